/*
 * table.c: the cache's keys and versions in memory: the hash of struct ckey (one per key while
 * referenced, loaded from the index once), the bounded LRU of idle keys that keeps hits free of
 * index reads, struct cver (one object version, its blocks and data file) and their
 * references, the recording of a version in the index, waiters and the cache's job count.
 *   ckey: get -> load from index once -> [lookup] -> cur served to readers
 *         -> replaced/invalidated/evicted (gen++) -> idle -> freed
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cache_priv.h"
#include "table_priv.h"
#include "lib/conf.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "lib/workq.h"

/* ---- jobs ------------------------------------------------------------------------------ */

int cache_submit_to(struct cache *c, struct workq *wq, enum workq_prio prio, workq_fn_f *fn,
                    void *arg)
{
    int rc = workq_submit(wq, prio, fn, arg);
    if (!rc)
        c->njobs++;
    return rc;
}

int cache_submit(struct cache *c, enum workq_prio prio, workq_fn_f *fn, void *arg)
{
    return cache_submit_to(c, c->wq, prio, fn, arg);
}

void cache_job_done(struct cache *c)
{
    S3C_ASSERT(c->njobs > 0);
    if (--c->njobs == 0)
        pthread_cond_broadcast(&c->jobs_cv);
}

/* ---- waiters --------------------------------------------------------------------------- */

void cache_arm_locked(struct cache_obj *h, struct cache_waiter **list, struct cache_waiter *w)
{
    if (w->armed)
        return; /* already suspended on us: one suspend, one resume */
    w->suspend(w->cls);
    __atomic_store_n(&w->armed, 1, __ATOMIC_RELEASE); /* read unlocked: cache_obj_cancel_wait */
    w->next = *list;
    *list = w;
    h->w_armed = w;
}

void cache_wake_locked(struct cache_waiter **list)
{
    struct cache_waiter *w = *list;
    *list = NULL;
    while (w) {
        struct cache_waiter *n = w->next;
        w->next = NULL;
        if (w->armed) {
            __atomic_store_n(&w->armed, 0, __ATOMIC_RELEASE);
            w->resume(w->cls);
        }
        w = n;
    }
}

int cache_unlink_waiter(struct cache_waiter **list, struct cache_waiter *w)
{
    for (struct cache_waiter **p = list; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            w->next = NULL;
            return 1;
        }
    }
    return 0;
}

/* ---- keys and versions ----------------------------------------------------------------- */

static unsigned key_hash(const struct index_key *k)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < k->len; i++)
        h = (h ^ k->b[i]) * 16777619u;
    return h % CACHE_KEY_BUCKETS;
}

struct ckey *cache_key_find_locked(struct cache *c, const struct index_key *k)
{
    for (struct ckey *ck = c->keys[key_hash(k)]; ck; ck = ck->hnext)
        if (ck->k.len == k->len && memcmp(ck->k.b, k->b, k->len) == 0)
            return ck;
    return NULL;
}

void cache_idle_remove_locked(struct cache *c, struct ckey *ck)
{
    if (!ck->idle)
        return;
    if (ck->idle_prev)
        ck->idle_prev->idle_next = ck->idle_next;
    else
        c->idle_head = ck->idle_next;
    if (ck->idle_next)
        ck->idle_next->idle_prev = ck->idle_prev;
    else
        c->idle_tail = ck->idle_prev;
    ck->idle_prev = ck->idle_next = NULL;
    ck->idle = 0;
    c->nidle--;
}

static void idle_push_locked(struct cache *c, struct ckey *ck)
{
    cache_idle_remove_locked(c, ck);
    ck->idle_prev = c->idle_tail;
    ck->idle_next = NULL;
    if (c->idle_tail)
        c->idle_tail->idle_next = ck;
    else
        c->idle_head = ck;
    c->idle_tail = ck;
    ck->idle = 1;
    c->nidle++;
}

struct ckey *cache_key_get_locked(struct cache *c, const char *bucket, const char *key,
                                  const struct index_key *k)
{
    struct ckey *ck = cache_key_find_locked(c, k);
    if (ck) {
        cache_idle_remove_locked(c, ck);
        if (!ck->bucket[0] && bucket[0]) {
            /* an evictor's placeholder: give it the real name before anyone uses it */
            char *nb = strdup(bucket), *nk = strdup(key);
            if (!nb || !nk) {
                free(nb);
                free(nk);
                return NULL;
            }
            free(ck->bucket);
            free(ck->key);
            ck->bucket = nb;
            ck->key = nk;
        }
        ck->refs++;
        return ck;
    }
    ck = calloc(1, sizeof(*ck));
    if (!ck)
        return NULL;
    ck->bucket = strdup(bucket);
    ck->key = strdup(key);
    if (!ck->bucket || !ck->key) {
        free(ck->bucket);
        free(ck->key);
        free(ck);
        return NULL;
    }
    ck->c = c;
    ck->refs = 1;
    ck->k = *k;
    unsigned hb = key_hash(k);
    ck->hnext = c->keys[hb];
    c->keys[hb] = ck;
    return ck;
}

struct cver *cache_ver_new(struct ckey *ck, uint64_t version, const struct be_meta *m, uint32_t bs)
{
    struct cver *v = calloc(1, sizeof(*v));
    if (!v)
        return NULL;
    v->refs = 1;
    v->key = ck;
    v->version = version;
    v->meta = *m;
    v->bs = bs;
    v->nblocks = (m->size + bs - 1) / bs;
    v->fd = -1;
    size_t bl = (v->nblocks + 7) / 8;
    if (bl) {
        v->present = calloc(1, bl);
        v->fetching = calloc(1, bl);
        if (!v->present || !v->fetching) {
            free(v->present);
            free(v->fetching);
            free(v);
            return NULL;
        }
    }
    return v;
}

void cache_ver_path(struct cache *c, const struct cver *v, char out[STORE_PATH_MAX])
{
    store_data_path(c->dir, v->key->k.b, v->key->k.len, v->version, out);
}

/* ---- the end of a version: its index record, its data file, its fetches ----------------- */

/* Deletes @version of @ck from the index (no lock held) and accounts for it. */
void cache_index_drop(struct cache *c, struct ckey *ck, uint64_t version)
{
    int64_t delta = 0;
    int rc = index_del(c->ix, &ck->k, version, &delta);
    if (rc && rc != -ESTALE)
        log_err("cache: index_del \"%s/%s\": %s", ck->bucket, ck->key, s3c_strerror(rc));
    pthread_mutex_lock(&c->mu);
    if (!rc)
        c->used = (uint64_t)((int64_t)c->used + delta);
    cache_key_index_written_locked(c, ck, rc, 1);
    pthread_mutex_unlock(&c->mu);
}

struct drop_job {
    struct cache *c;
    struct ckey *ck;
    uint64_t version;
};

static void drop_run(void *arg)
{
    struct drop_job *j = arg;
    cache_index_drop(j->c, j->ck, j->version);
    cache_unlinks_run(j->c);
    pthread_mutex_lock(&j->c->mu);
    cache_key_put_locked(j->c, j->ck);
    cache_job_done(j->c);
    pthread_mutex_unlock(&j->c->mu);
    free(j);
}

void cache_ver_broken_locked(struct cache *c, struct cver *v)
{
    struct ckey *ck = v->key;
    if (ck->cur != v)
        return;
    log_err("cache: data of \"%s/%s\" is missing: dropping the entry", ck->bucket, ck->key);
    uint64_t version = v->version;
    struct drop_job *j = calloc(1, sizeof(*j));
    cache_ver_drop_locked(c, ck); /* may free v */
    if (!j)
        return;
    j->c = c;
    j->ck = ck;
    j->version = version;
    ck->refs++;
    if (cache_submit(c, WORKQ_LOW, drop_run, j)) {
        ck->refs--;
        free(j);
    }
}

void cache_unlink_queue_locked(struct cache *c, const char *path)
{
    size_t l = strlen(path);
    struct unlink_item *u = malloc(sizeof(*u) + l + 1);
    if (!u) {
        unlink(path); /* better late than leaked */
        return;
    }
    memcpy(u->path, path, l + 1);
    u->next = c->unlinks;
    c->unlinks = u;
}

void cache_unlinks_run(struct cache *c)
{
    pthread_mutex_lock(&c->mu);
    struct unlink_item *u = c->unlinks;
    c->unlinks = NULL;
    pthread_mutex_unlock(&c->mu);
    while (u) {
        struct unlink_item *n = u->next;
        unlink(u->path);
        free(u);
        u = n;
    }
}

void cache_fetch_remove_locked(struct cver *v, struct fetch *f)
{
    for (struct fetch **p = &v->fetches; *p; p = &(*p)->next) {
        if (*p == f) {
            *p = f->next;
            break;
        }
    }
    f->next = NULL;
}

static void fetch_forget_readers_locked(struct fetch *f)
{
    for (struct cache_obj *o = f->wreaders, *next; o; o = next) {
        next = o->wf_next;
        o->wf = NULL;
        o->wf_next = NULL;
    }
    f->wreaders = NULL;
}

void cache_fetch_free(struct fetch *f)
{
    if (!f)
        return;
    if (f->win) { /* mu held */
        fetch_forget_readers_locked(f);
        window_free(&f->c->pool, f->win);
        if (f->c->win_waiters)
            pthread_cond_broadcast(&f->c->win_cv);
    }
    if (f->dfd >= 0)
        close(f->dfd);
    free(f->mem);
    free(f);
}

void cache_fetch_retire_locked(struct fetch *f)
{
    if (f->copiers) {
        f->kept = 2; /* the last reader copying from its window frees it */
        return;
    }
    cache_fetch_remove_locked(f->v, f);
    cache_fetch_free(f);
}

int cache_ver_running_locked(const struct cver *v)
{
    for (const struct fetch *f = v->fetches; f; f = f->next)
        if (f->running)
            return 1;
    return 0;
}

/* @v is being freed: its member index leaves memory (members.c keeps it). mu held. */
static void ver_members_forget_locked(struct cache *c, struct cver *v)
{
    if (!v->members)
        return;
    c->members_mem -= v->members_len;
    free(v->members);
    v->members = NULL;
}

void cache_ver_put_locked(struct cache *c, struct cver *v)
{
    if (!v)
        return;
    S3C_ASSERT(v->refs > 0);
    if (--v->refs)
        return;
    S3C_ASSERT(!v->waiters);
    while (v->fetches) {
        struct fetch *f = v->fetches;
        S3C_ASSERT(!f->running);
        v->fetches = f->next;
        cache_fetch_free(f);
    }
    if (v->fd >= 0)
        close(v->fd);
    if (v->dropped && !v->unindexed) {
        char p[STORE_PATH_MAX];
        cache_ver_path(c, v, p);
        cache_unlink_queue_locked(c, p);
    }
    ver_members_forget_locked(c, v);
    free(v->present);
    free(v->fetching);
    free(v);
}

void cache_ver_drop_locked(struct cache *c, struct ckey *ck)
{
    struct cver *v = ck->cur;
    ck->gen++;
    if (!v)
        return;
    ck->cur = NULL;
    v->dropped = 1;
    cache_ver_put_locked(c, v);
}

void cache_key_load_locked(struct cache *c, struct ckey *ck)
{
    struct index_entry e;
    if (ck->loaded)
        return;
    ck->loaded = 1;
    if (index_get(c->ix, &ck->k, &e))
        return;
    if (e.block_size == 0 || e.size != e.meta.size) {
        index_entry_clear(&e);
        return;
    }
    struct cver *v = cache_ver_new(ck, e.version, &e.meta, e.block_size);
    if (v && v->nblocks == e.nblocks) {
        v->flags = e.flags;
        v->validated_ns = e.validated_ns;
        v->touched_ns = 0;
        for (uint64_t b = 0; b < v->nblocks; b++) {
            if (cache_bit(e.bitmap, b)) {
                cache_bit_set(v->present, b);
                v->npresent++;
            }
        }
        v->unverified = v->npresent > 0;
        ck->cur = v;
    } else if (v) {
        cache_ver_put_locked(c, v);
    }
    index_entry_clear(&e);
}

void cache_key_free_locked(struct cache *c, struct ckey *ck);

void cache_key_index_written_locked(struct cache *c, struct ckey *ck, int rc, int is_delete)
{
    if (rc == 0 && ck->index_stale) {
        ck->index_stale = 0;
        ck->refs--; /* the caller holds another: never the last */
        S3C_ASSERT(ck->refs > 0);
    } else if (rc && rc != -ESTALE && is_delete && !ck->index_stale) {
        ck->loaded = 1;
        ck->index_stale = 1;
        ck->refs++;
    }
}

void cache_key_put_locked(struct cache *c, struct ckey *ck)
{
    if (!ck)
        return;
    S3C_ASSERT(ck->refs > 0);
    if (--ck->refs) {
        /* held for its stale index record alone: it keeps no uncached version (nor its bytes) */
        if (ck->refs == 1 && ck->index_stale && ck->cur && ck->cur->unindexed)
            cache_ver_drop_locked(c, ck);
        return;
    }
    S3C_ASSERT(!ck->waiters);
    if (!c->closing && ck->cur && !ck->cur->unindexed && ck->loaded && !ck->lookup_running &&
        ck->bucket[0]) {
        idle_push_locked(c, ck);
        while (c->nidle > c->max_idle) {
            struct ckey *old = c->idle_head;
            cache_idle_remove_locked(c, old);
            if (!old->refs)
                cache_key_free_locked(c, old);
        }
        return;
    }
    cache_key_free_locked(c, ck);
}

/* Unhashes and frees a key nobody references. */
void cache_key_free_locked(struct cache *c, struct ckey *ck)
{
    S3C_ASSERT(!ck->refs);
    cache_idle_remove_locked(c, ck);
    unsigned hb = key_hash(&ck->k);
    for (struct ckey **p = &c->keys[hb]; *p; p = &(*p)->hnext) {
        if (*p == ck) {
            *p = ck->hnext;
            break;
        }
    }
    /* cur's holders all hold ck too: cur is ours alone now */
    cache_ver_put_locked(c, ck->cur);
    free(ck->bucket);
    free(ck->key);
    free(ck);
}

void cache_ver_record(struct cache *c, struct cver *v)
{
    pthread_mutex_lock(&c->record_mu);
    pthread_mutex_lock(&c->mu);
    if (!v->unrecorded || v->dropped) {
        v->unrecorded = 0; /* dropped: never indexed; its file (if any) goes when it is freed */
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&c->record_mu);
        return;
    }
    struct ckey *ck = v->key;
    struct index_entry e;
    memset(&e, 0, sizeof(e));
    e.version = v->version;
    e.size = v->meta.size;
    e.block_size = v->bs;
    e.flags = v->flags;
    e.atime_ns = e.validated_ns = v->validated_ns;
    e.nblocks = v->nblocks;
    e.meta = v->meta;
    pthread_mutex_unlock(&c->mu);
    int rc = 0;
    char *name = NULL;
    if (e.nblocks && !(e.bitmap = calloc(1, (e.nblocks + 7) / 8)))
        rc = -ENOMEM;
    if (!rc && asprintf(&name, "%s/%s", ck->bucket, ck->key) < 0)
        rc = -ENOMEM;
    int64_t delta = 0;
    if (!rc)
        rc = index_put_new(c->ix, &ck->k, name, &e, &delta);
    free(name);
    index_entry_clear(&e);
    int drop = 0;
    pthread_mutex_lock(&c->mu);
    v->unrecorded = 0;
    if (rc) {
        /* -EEXIST: a newer version of the key was recorded meanwhile; else a full map or an
         * index error. Either way this one is served uncached (a bypass), never written. */
        v->unindexed = 1;
    } else {
        c->used = (uint64_t)((int64_t)c->used + delta);
        cache_key_index_written_locked(c, ck, 0, 0);
        drop = v->dropped; /* dropped while we wrote: its dropper found no record to delete */
    }
    pthread_mutex_unlock(&c->mu);
    if (drop)
        cache_index_drop(c, ck, v->version);
    pthread_mutex_unlock(&c->record_mu);
    if (rc && rc != -EEXIST)
        log_warn("cache: indexing \"%s/%s\": %s: served uncached", ck->bucket, ck->key,
                 s3c_strerror(rc));
}

int cache_ver_fd_locked(struct cache *c, struct cver *v, int create, int *fd)
{
    if (v->unindexed)
        return -ENOSPC; /* never on the disk: a fetch of it reads into memory (fill.c) */
    if (v->fd >= 0) {
        *fd = v->fd;
        return 0;
    }
    char p[STORE_PATH_MAX];
    int nfd = -1;
    cache_ver_path(c, v, p);
    /* opening may create directories: do it without the lock; v is held by the caller */
    v->refs++;
    if (create && v->unrecorded) {
        pthread_mutex_unlock(&c->mu);
        cache_ver_record(c, v);
        pthread_mutex_lock(&c->mu);
        if (v->unindexed) {
            v->refs--;
            return -ENOSPC; /* the index did not take it: fetches go to memory */
        }
    }
    pthread_mutex_unlock(&c->mu);
    int rc = store_open(p, create, &nfd);
    pthread_mutex_lock(&c->mu);
    if (!rc) {
        if (v->fd < 0)
            v->fd = nfd;
        else
            close(nfd);
        *fd = v->fd;
    }
    v->refs--;
    S3C_ASSERT(v->refs > 0);
    return rc;
}

/* ---- a run's and a read's state, as the stages of a fill see it ------------------------- */

int cache_fetch_on_meta(void *cls, const struct be_meta *m)
{
    struct fetch *f = cls;
    struct cver *v = f->v;
    if (m->size != v->meta.size ||
        (m->etag[0] && v->meta.etag[0] && strcmp(m->etag, v->meta.etag) != 0))
        return -ESTALE; /* the object changed since its metadata was cached */
    return 0;
}

/* Whether every byte of [@off, @end) is present or has landed in a fetch in flight. */
int cache_ver_landed_locked(const struct cver *v, uint64_t off, uint64_t end)
{
    for (uint64_t b = off / v->bs; b * v->bs < end; b++) {
        if (cache_bit(v->present, b))
            continue;
        uint64_t need = S3C_MIN(end, (b + 1) * v->bs);
        const struct fetch *f = v->fetches;
        while (f && !(b >= f->first && b < f->first + f->n && f->landed >= need && !f->err &&
                      (!f->win || !window_block_dropped(f->win, (unsigned)(b - f->first)))))
            f = f->next;
        if (!f)
            return 0;
    }
    return 1;
}

uint64_t cache_obj_end_block(struct cache_obj *h, struct cver *v)
{
    uint64_t end = S3C_MIN(h->range_end, v->meta.size);
    return (end + v->bs - 1) / v->bs;
}

void cache_outcome_waiting(struct cache_obj *h)
{
    /* a guessed miss that found another request's fetch already running joined it */
    if (h->how == CACHE_HIT || h->guessed)
        h->how = CACHE_COALESCED;
    h->guessed = 0;
}

void cache_outcome_started(struct cache_obj *h)
{
    if (h->how == CACHE_HIT || h->guessed)
        h->how = h->v && h->v->first_fetch_owned ? CACHE_COALESCED : CACHE_MISS;
    if (h->v)
        h->v->first_fetch_owned = 0;
    h->guessed = 0;
}
