/*
 * cache.c: the public API of include/cache.h: keys and versions in memory,
 * metadata lookups (HEAD on a worker, coalesced per key; revalidation and
 * stale-if-error), adopt, invalidate, pins and stats. Block fetches and reads
 * live in fill.c, capacity and LRU in evict.c, the index in index.c.
 *   ckey: get -> load from index once -> [lookup: HEAD -> new version put in index]
 *         -> cur served to readers -> replaced/invalidated/evicted (gen++) -> freed at 0 refs
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cache_priv.h"
#include "lib/conf.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "lib/workq.h"

const char *cache_outcome_name(enum cache_outcome how)
{
    switch (how) {
    case CACHE_HIT: return "hit";
    case CACHE_MISS: return "miss";
    case CACHE_COALESCED: return "coalesced";
    case CACHE_BYPASS: return "bypass";
    }
    return "miss";
}

/* ---- jobs ------------------------------------------------------------------------------ */

int cache_submit(struct cache *c, enum workq_prio prio, workq_fn_f *fn, void *arg)
{
    int rc = workq_submit(c->wq, prio, fn, arg);
    if (!rc)
        c->njobs++;
    return rc;
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
    w->armed = 1;
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
            w->armed = 0;
            w->resume(w->cls);
        }
        w = n;
    }
}

static int unlink_waiter(struct cache_waiter **list, struct cache_waiter *w)
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

static void idle_remove_locked(struct cache *c, struct ckey *ck)
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
    idle_remove_locked(c, ck);
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
        idle_remove_locked(c, ck);
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

static struct cver *ver_new(struct ckey *ck, uint64_t version, const struct be_meta *m,
                            uint32_t bs)
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
        fill_free(f);
    }
    if (v->fd >= 0)
        close(v->fd);
    if (v->dropped && !v->unindexed) {
        char p[STORE_PATH_MAX];
        cache_ver_path(c, v, p);
        evict_queue_unlink_locked(c, p);
    }
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
    struct cver *v = ver_new(ck, e.version, &e.meta, e.block_size);
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

static void key_free_locked(struct cache *c, struct ckey *ck);

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
    if (!c->closing && ck->cur && !ck->cur->unindexed && ck->loaded && !ck->lookup_running
        && ck->bucket[0]) {
        idle_push_locked(c, ck);
        while (c->nidle > c->max_idle) {
            struct ckey *old = c->idle_head;
            idle_remove_locked(c, old);
            if (!old->refs)
                key_free_locked(c, old);
        }
        return;
    }
    key_free_locked(c, ck);
}

/* Unhashes and frees a key nobody references. */
static void key_free_locked(struct cache *c, struct ckey *ck)
{
    S3C_ASSERT(!ck->refs);
    idle_remove_locked(c, ck);
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

static void index_drop(struct cache *c, struct ckey *ck, uint64_t version);

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
        index_drop(c, ck, v->version);
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

/* ---- open/close ------------------------------------------------------------------------ */

int cache_open(const struct conf *cf, struct backend *be, struct workq *wq, struct cache **out,
               struct errmsg *em)
{
    struct cache *c = calloc(1, sizeof(*c));
    int rc;
    char p[STORE_PATH_MAX];
    if (!c)
        return -ENOMEM;
    c->magic = CACHE_MAGIC;
    struct rlimit nofile;
    c->max_idle = 256;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
        c->max_idle = (unsigned)S3C_MIN((rlim_t)CACHE_IDLE_KEYS_MAX, nofile.rlim_cur / 4);
    c->cf = cf;
    c->be = be;
    c->wq = wq;
    snprintf(c->dir, sizeof(c->dir), "%s", cf->cache_dir ? cf->cache_dir : "./var/cache");
    c->cap = cf->cache_size;
    c->block_size = cf->block_size ? cf->block_size : (8u << 20);
    if (c->block_size > (1u << 30))
        c->block_size = 1u << 30;
    c->readahead = cf->readahead;
    c->miss_source = missource_enabled(cf, be);
    c->revalidate_ms = cf->revalidate_never ? -1 : cf->revalidate_after;
    c->touch = calloc(CACHE_TOUCH_MAX, sizeof(*c->touch));
    if (!c->touch) {
        free(c);
        return -ENOMEM;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->evict_mu, NULL);
    pthread_mutex_init(&c->record_mu, NULL);
    pthread_cond_init(&c->jobs_cv, NULL);
    if ((rc = store_init(c->dir))) {
        errmsg_set(em, "cache: cannot create %s: %s", c->dir, strerror(-rc));
        goto fail;
    }
    snprintf(p, sizeof(p), "%s/index", c->dir);
    if ((rc = index_open(p, &c->ix, em)))
        goto fail;
    struct index_totals t;
    if ((rc = index_totals(c->ix, &t))) {
        errmsg_set(em, "cache: reading index totals: %s", s3c_strerror(rc));
        goto fail;
    }
    c->used = t.used_bytes;
    c->st.capacity_bytes = c->cap;
    if ((rc = drain_open(c, em)))
        goto fail;
    *out = c;
    return 0;
fail:
    index_close(c->ix);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->evict_mu);
    pthread_mutex_destroy(&c->record_mu);
    pthread_cond_destroy(&c->jobs_cv);
    free(c->touch);
    free(c);
    return rc;
}

void cache_close(struct cache *c)
{
    if (!c)
        return;
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    if (drain_close(c))
        return; /* an upload outlived the shutdown timeout: left to the exiting process */
    pthread_mutex_lock(&c->mu);
    c->closing = 1;
    for (unsigned i = 0; i < CACHE_KEY_BUCKETS; i++) {
        for (struct ckey *ck = c->keys[i]; ck; ck = ck->hnext) {
            if (ck->lookup_running) {
                ck->lookup_done = ck->lookup_seq;
                ck->lookup_err = CACHE_ERR_CLOSING;
                ck->lookup_stale = 0;
                ck->lookup_same = 0;
            }
            cache_wake_locked(&ck->waiters);
        }
    }
    fill_fail_all_locked(c, CACHE_ERR_CLOSING);
    while (c->njobs)
        pthread_cond_wait(&c->jobs_cv, &c->mu);
    while (c->idle_head) {
        struct ckey *ck = c->idle_head;
        idle_remove_locked(c, ck);
        if (!ck->refs)
            key_free_locked(c, ck);
    }
    for (unsigned i = 0; i < CACHE_KEY_BUCKETS; i++) {
        for (struct ckey *ck = c->keys[i], *next; ck; ck = next) {
            next = ck->hnext;
            if (ck->index_stale) {
                ck->index_stale = 0;
                if (!--ck->refs)
                    key_free_locked(c, ck);
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
    evict_flush_touches(c);
    evict_drain_unlinks(c);
    pthread_mutex_lock(&c->mu);
    /* keys still referenced by requests that were never released: nothing to do safely
     * but drop our view of them */
    pthread_mutex_unlock(&c->mu);
    index_close(c->ix);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->evict_mu);
    pthread_mutex_destroy(&c->record_mu);
    pthread_cond_destroy(&c->jobs_cv);
    free(c->touch);
    c->magic = 0;
    free(c);
}

/* ---- handles --------------------------------------------------------------------------- */

int cache_obj_get(struct cache *c, const char *bucket, const char *key, struct cache_obj **out)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    struct cache_obj *h = calloc(1, sizeof(*h));
    struct index_key k;
    if (!h)
        return -ENOMEM;
    index_key_make(bucket, key, &k);
    pthread_mutex_lock(&c->mu);
    h->k = cache_key_get_locked(c, bucket, key, &k);
    pthread_mutex_unlock(&c->mu);
    if (!h->k) {
        free(h);
        return -ENOMEM;
    }
    h->magic = CACHE_OBJ_MAGIC;
    h->c = c;
    h->next_pos = UINT64_MAX;
    h->range_end = UINT64_MAX;
    *out = h;
    return 0;
}

void cache_obj_cancel_wait(struct cache_obj *o, struct cache_waiter *w)
{
    CHECK_OBJ_NOTNULL(o, CACHE_OBJ_MAGIC);
    struct cache *c = o->c;
    pthread_mutex_lock(&c->mu);
    if (w->armed) {
        if (!unlink_waiter(&o->k->waiters, w) && o->v)
            unlink_waiter(&o->v->waiters, w);
        w->armed = 0;
    }
    if (o->w_armed == w)
        o->w_armed = NULL;
    pthread_mutex_unlock(&c->mu);
}

/* The request whose lookup created this version is its miss, and one that starts the first
 * fetch meanwhile is not another. Done without having started any fetch (a HEAD, a failed
 * precondition), it leaves the next request that does to be a miss. */
static void fetch_none_locked(struct cache_obj *o)
{
    if (o->v->first_fetch_owned && o->how == CACHE_MISS && !o->guessed)
        o->v->first_fetch_owned = 0;
}

void cache_obj_release(struct cache_obj *o)
{
    if (!o)
        return;
    CHECK_OBJ_NOTNULL(o, CACHE_OBJ_MAGIC);
    struct cache *c = o->c;
    pthread_mutex_lock(&c->mu);
    struct cache_waiter *w = o->w_armed;
    if (w && w->armed) {
        if (!unlink_waiter(&o->k->waiters, w) && o->v)
            unlink_waiter(&o->v->waiters, w);
        w->armed = 0;
    }
    if (o->v) {
        fetch_none_locked(o);
        if (o->from_source)
            o->v->src_readers--;
        switch (o->how) {
        case CACHE_HIT: c->st.hits++; break;
        case CACHE_MISS: c->st.misses++; break;
        case CACHE_COALESCED: c->st.coalesced++; break;
        case CACHE_BYPASS: c->st.bypassed++; break;
        }
        evict_touch_locked(c, o->v, 0);
    }
    cache_ver_put_locked(c, o->v);
    cache_key_put_locked(c, o->k);
    evict_kick_locked(c);
    pthread_mutex_unlock(&c->mu);
    o->magic = 0;
    free(o);
}

void cache_obj_fetch_none(struct cache_obj *o)
{
    CHECK_OBJ_NOTNULL(o, CACHE_OBJ_MAGIC);
    pthread_mutex_lock(&o->c->mu);
    if (o->v)
        fetch_none_locked(o);
    pthread_mutex_unlock(&o->c->mu);
}

enum cache_outcome cache_obj_outcome(struct cache_obj *o)
{
    CHECK_OBJ_NOTNULL(o, CACHE_OBJ_MAGIC);
    pthread_mutex_lock(&o->c->mu);
    enum cache_outcome how = o->how;
    pthread_mutex_unlock(&o->c->mu);
    return how;
}

/* ---- lookups --------------------------------------------------------------------------- */

struct lookup_job {
    struct cache *c;
    struct ckey *ck;
    uint64_t gen, seq;
};

static int meta_same(const struct be_meta *a, const struct be_meta *b)
{
    return a->size == b->size && strcmp(a->etag, b->etag) == 0 && a->mtime_ns == b->mtime_ns;
}

static int is_absent_err(int rc)
{
    return rc == -S3E_NO_SUCH_KEY || rc == -S3E_NO_SUCH_BUCKET || rc == -ENOENT;
}

static void lookup_finish_locked(struct cache *c, struct ckey *ck, uint64_t seq, int err,
                                 int stale, int same)
{
    if (ck->lookup_seq == seq)
        ck->lookup_running = 0;
    if (ck->lookup_done < seq) {
        ck->lookup_done = seq;
        ck->lookup_err = err;
        ck->lookup_stale = stale;
        ck->lookup_same = same;
    }
    cache_wake_locked(&ck->waiters);
}

/* Deletes @version of @ck from the index (no lock held) and accounts for it. */
static void index_drop(struct cache *c, struct ckey *ck, uint64_t version)
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

/* Indexes a new version of @ck with metadata @m (no blocks yet). 0 and *@out (one ref), or
 * an error. No lock held. */
static int version_create(struct cache *c, struct ckey *ck, const struct be_meta *m,
                          uint32_t flags, struct cver **out)
{
    struct index_entry e;
    memset(&e, 0, sizeof(e));
    e.version = store_new_version();
    e.size = m->size;
    e.block_size = (uint32_t)c->block_size;
    e.flags = flags;
    e.atime_ns = e.validated_ns = s3c_real_ns();
    e.nblocks = (m->size + c->block_size - 1) / c->block_size;
    e.meta = *m;
    if (e.nblocks) {
        e.bitmap = calloc(1, (e.nblocks + 7) / 8);
        if (!e.bitmap)
            return -ENOMEM;
    }
    pthread_mutex_lock(&c->mu);
    struct cver *v = ver_new(ck, e.version, m, e.block_size);
    if (v) {
        v->validated_ns = e.validated_ns;
        v->flags = flags;
        v->first_fetch_owned = 1;
    }
    pthread_mutex_unlock(&c->mu);
    if (!v) {
        index_entry_clear(&e);
        return -ENOMEM;
    }
    int rc = 0;
    if (m->size == 0) { /* complete at once: the (empty) file must exist */
        char p[STORE_PATH_MAX];
        int fd = -1;
        cache_ver_path(c, v, p);
        rc = store_open(p, 1, &fd);
        if (!rc) {
            fsync(fd);
            v->fd = fd;
        }
    }
    char *name = NULL;
    if (!rc && asprintf(&name, "%s/%s", ck->bucket, ck->key) < 0)
        rc = -ENOMEM;
    uint64_t oldv = 0;
    int64_t delta = 0;
    if (!rc)
        rc = index_put(c->ix, &ck->k, name, &e, &oldv, &delta);
    free(name);
    index_entry_clear(&e);
    pthread_mutex_lock(&c->mu);
    if (rc) {
        v->dropped = 1;
        cache_ver_put_locked(c, v);
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    c->used = (uint64_t)((int64_t)c->used + delta);
    cache_key_index_written_locked(c, ck, 0, 0);
    if (oldv && oldv != e.version) {
        /* a version we no longer held in memory: its file goes too */
        char p[STORE_PATH_MAX];
        store_data_path(c->dir, ck->k.b, ck->k.len, oldv, p);
        evict_queue_unlink_locked(c, p);
    }
    pthread_mutex_unlock(&c->mu);
    *out = v;
    return 0;
}

/* A version of @ck with metadata @m that the index could not take: served from the backend
 * without caching (a bypass) to the requests that wait for it, never written to the disk or
 * indexed. 0 and *@out (one ref), or -ENOMEM. No lock held. */
static int version_unindexed(struct cache *c, struct ckey *ck, const struct be_meta *m,
                             struct cver **out)
{
    pthread_mutex_lock(&c->mu);
    struct cver *v = ver_new(ck, store_new_version(), m, (uint32_t)c->block_size);
    if (v) {
        v->unindexed = 1;
        v->validated_ns = s3c_real_ns();
        v->first_fetch_owned = 1;
    }
    pthread_mutex_unlock(&c->mu);
    *out = v;
    return v ? 0 : -ENOMEM;
}

/* A new version of @ck with metadata @m, in memory only (cache_ver_record() indexes it).
 * 0 and *@out (one ref), or -ENOMEM. No lock held. */
static int version_unrecorded(struct cache *c, struct ckey *ck, const struct be_meta *m,
                              struct cver **out)
{
    pthread_mutex_lock(&c->mu);
    struct cver *v = ver_new(ck, store_new_version(), m, (uint32_t)c->block_size);
    if (v) {
        v->unrecorded = 1;
        v->validated_ns = s3c_real_ns();
        v->first_fetch_owned = 1;
    }
    pthread_mutex_unlock(&c->mu);
    *out = v;
    return v ? 0 : -ENOMEM;
}

static void lookup_run(void *arg)
{
    struct lookup_job *j = arg;
    struct cache *c = j->c;
    struct ckey *ck = j->ck;
    struct be_meta m;
    memset(&m, 0, sizeof(m));
    int rc = backend_head(c->be, ck->bucket, ck->key, &m);
    int err = 0, stale = 0, warn = 0, same = 0;
    uint64_t drop_version = 0;
    struct cver *nv = NULL;

    pthread_mutex_lock(&c->mu);
    c->st.revalidations += ck->cur ? 1 : 0;
    if (c->closing || ck->gen != j->gen) {
        err = c->closing ? CACHE_ERR_CLOSING : 0; /* 0: waiters retry */
        goto finish;
    }
    struct cver *cur = ck->cur;
    if (rc) {
        if (cur && !is_absent_err(rc)) {
            stale = 1;
            warn = 1;
        } else {
            if (cur) {
                drop_version = cur->version;
                cache_ver_drop_locked(c, ck);
            }
            err = rc;
        }
        goto finish;
    }
    if (cur && meta_same(&cur->meta, &m)) {
        cur->validated_ns = s3c_real_ns();
        evict_touch_locked(c, cur, cur->validated_ns);
        same = 1;
        goto finish;
    }
    uint32_t flags = 0;
    if (cur) {
        flags = cur->flags;
        drop_version = cur->version;
        cache_ver_drop_locked(c, ck);
    }
    uint64_t gen = ck->gen;
    pthread_mutex_unlock(&c->mu);
    if (drop_version) {
        index_drop(c, ck, drop_version);
        drop_version = 0;
    }
    if (!cur && !flags && missource_defer_record(c, m.size)) {
        /* its first GET is sent from the backend's file: the record is written when the
         * fill needs it (cache_ver_record), not before that GET's first byte */
        rc = version_unrecorded(c, ck, &m, &nv);
    } else {
        rc = version_create(c, ck, &m, flags, &nv);
    }
    if (rc && rc != -ENOMEM) {
        /* the object is there, the index cannot hold it (LMDB map full, an index or disk
         * error): read it from the backend, uncached, rather than fail the read */
        log_warn("cache: indexing \"%s/%s\": %s: served uncached", ck->bucket, ck->key,
                 s3c_strerror(rc));
        rc = version_unindexed(c, ck, &m, &nv);
    }
    pthread_mutex_lock(&c->mu);
    if (rc) {
        log_err("cache: indexing \"%s/%s\": %s", ck->bucket, ck->key, s3c_strerror(rc));
        err = rc;
        goto finish;
    }
    if (ck->gen != gen || ck->cur || c->closing) {
        /* replaced or invalidated meanwhile: ours is not the version to serve */
        drop_version = nv->version;
        nv->dropped = 1;
        cache_ver_put_locked(c, nv);
        err = c->closing ? CACHE_ERR_CLOSING : 0;
        goto finish;
    }
    ck->cur = nv; /* our ref moves to ck */
finish:
    lookup_finish_locked(c, ck, j->seq, err, stale, same);
    pthread_mutex_unlock(&c->mu);
    if (warn)
        log_warn("cache: revalidating \"%s/%s\" failed, serving stale: %s", ck->bucket, ck->key,
                 s3c_strerror(rc));
    if (drop_version)
        index_drop(c, ck, drop_version);
    evict_drain_unlinks(c);
    pthread_mutex_lock(&c->mu);
    cache_key_put_locked(c, ck);
    cache_job_done(c);
    pthread_mutex_unlock(&c->mu);
    free(j);
}

static int lookup_start_locked(struct cache *c, struct ckey *ck)
{
    struct lookup_job *j = calloc(1, sizeof(*j));
    if (!j)
        return -ENOMEM;
    j->c = c;
    j->ck = ck;
    j->gen = ck->gen;
    j->seq = ck->lookup_seq + 1;
    ck->refs++;
    int rc = cache_submit(c, WORKQ_HIGH, lookup_run, j);
    if (rc) {
        ck->refs--;
        free(j);
        return rc == -ESHUTDOWN ? CACHE_ERR_CLOSING : rc;
    }
    ck->lookup_seq = j->seq;
    ck->lookup_running = 1;
    return 0;
}

static int fresh(struct cache *c, const struct cver *v)
{
    /* a dirty entry is newer than the backend's copy: the backend cannot confirm it */
    if (c->revalidate_ms < 0 || (v->flags & INDEX_F_DIRTY))
        return 1;
    int64_t age_ms = (s3c_real_ns() - v->validated_ns) / 1000000;
    return age_ms < c->revalidate_ms;
}

/* Whether @ck's current version may be served: one loaded from the index with blocks present
 * must have its data file. A record can outlive its file (a delete of the record that failed
 * with the LMDB map full, a file removed by hand): that version is dropped, so the request
 * looks the object up as a miss instead of failing on the missing file. Opens the file (kept
 * in v->fd for the read that follows); may release c->mu meanwhile. */
static int cur_usable_locked(struct cache *c, struct ckey *ck)
{
    struct cver *v = ck->cur;
    if (!v->unverified)
        return 1;
    v->unverified = 0;
    int fd;
    v->refs++;
    int rc = cache_ver_fd_locked(c, v, 0, &fd);
    if (rc == -ENOENT && ck->cur == v)
        cache_ver_broken_locked(c, v);
    int ok = ck->cur == v;
    cache_ver_put_locked(c, v);
    return ok;
}

static void bind_locked(struct cache_obj *h, struct cver *v, int from_lookup)
{
    h->v = v;
    v->refs++;
    if (from_lookup)
        return;
    /* Metadata from the cache, no backend request: a hit unless reading bytes says otherwise
     * (cache_obj_open_range() refines the guess for every GET that reads). A request that reads
     * no byte (HEAD, 304, 412, an empty range) was answered from the cache alone. */
    h->guessed = 1;
    h->how = CACHE_HIT;
}

int cache_obj_meta(struct cache_obj *o, struct cache_waiter *w, const struct be_meta **meta,
                   enum cache_outcome *how)
{
    CHECK_OBJ_NOTNULL(o, CACHE_OBJ_MAGIC);
    struct cache *c = o->c;
    struct ckey *ck = o->k;
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (o->v)
        goto bound;
    cache_key_load_locked(c, ck);
    if (o->waited_lookup) {
        if (ck->lookup_done < o->waited_lookup) {
            cache_arm_locked(o, &ck->waiters, w); /* woken early: keep waiting */
            rc = -EAGAIN;
            goto out;
        }
        o->waited_lookup = 0;
        if (ck->cur && cur_usable_locked(c, ck)) {
            if (ck->lookup_stale) {
                o->stale = 1;
                c->st.stale_served++;
            }
            /* confirmed (or kept) versions are hits when complete; new ones are misses */
            bind_locked(o, ck->cur, !(ck->lookup_stale || ck->lookup_same));
            goto bound;
        }
        if (ck->lookup_err) {
            rc = ck->lookup_err;
            goto out;
        }
        /* the lookup was overtaken by a replace/invalidate: look again */
    } else if (ck->cur && fresh(c, ck->cur) && cur_usable_locked(c, ck)) {
        bind_locked(o, ck->cur, 0);
        goto bound;
    }
    if (c->closing) {
        rc = CACHE_ERR_CLOSING;
        goto out;
    }
    if (ck->lookup_running) {
        if (o->how != CACHE_MISS)
            o->how = CACHE_COALESCED;
    } else {
        if ((rc = lookup_start_locked(c, ck)))
            goto out;
        o->how = CACHE_MISS;
    }
    o->waited_lookup = ck->lookup_seq;
    cache_arm_locked(o, &ck->waiters, w);
    rc = -EAGAIN;
    goto out;
bound:
    *meta = &o->v->meta;
    *how = o->how;
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

unsigned cache_busy(struct cache *c)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    pthread_mutex_lock(&c->mu);
    unsigned n = c->njobs;
    pthread_mutex_unlock(&c->mu);
    return n;
}

struct drop_job {
    struct cache *c;
    struct ckey *ck;
    uint64_t version;
};

static void drop_run(void *arg)
{
    struct drop_job *j = arg;
    index_drop(j->c, j->ck, j->version);
    evict_drain_unlinks(j->c);
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

/* ---- pins ------------------------------------------------------------------------------ */

int cache_pin(struct cache *c, const char *bucket, const char *key, int on)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    struct index_key k;
    index_key_make(bucket, key, &k);
    pthread_mutex_lock(&c->mu);
    struct ckey *ck = cache_key_get_locked(c, bucket, key, &k);
    if (!ck) {
        pthread_mutex_unlock(&c->mu);
        return -ENOMEM;
    }
    cache_key_load_locked(c, ck);
    struct cver *v = ck->cur;
    int rc = -ENOENT;
    uint64_t version = 0;
    if (v) {
        version = v->version;
        v->refs++;
    }
    pthread_mutex_unlock(&c->mu);
    if (v)
        cache_ver_record(c, v); /* a version only in memory is indexed first */
    if (v)
        rc = index_set_pinned(c->ix, &k, version, on);
    if (rc == -ESTALE)
        rc = -ENOENT;
    pthread_mutex_lock(&c->mu);
    if (v && !rc) {
        if (on)
            v->flags |= INDEX_F_PINNED;
        else
            v->flags &= ~INDEX_F_PINNED;
    }
    cache_ver_put_locked(c, v);
    cache_key_put_locked(c, ck);
    pthread_mutex_unlock(&c->mu);
    evict_drain_unlinks(c);
    return rc;
}

/* ---- adopt / invalidate ---------------------------------------------------------------- */

static uint64_t acct_of(uint64_t size, uint64_t bs)
{
    uint64_t nb = (size + bs - 1) / bs, sum = 0;
    if (nb)
        sum = (nb - 1) * index_acct(bs) + index_acct(size - (nb - 1) * bs);
    return sum;
}

/* Drops the cached version of (@bucket, @key); a dirty one only with @dirty_too (-EBUSY). */
static int forget(struct cache *c, const char *bucket, const char *key, int dirty_too)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    struct index_key k;
    index_key_make(bucket, key, &k);
    pthread_mutex_lock(&c->mu);
    struct ckey *ck = cache_key_get_locked(c, bucket, key, &k);
    if (!ck) {
        pthread_mutex_unlock(&c->mu);
        return -ENOMEM;
    }
    cache_key_load_locked(c, ck);
    int was_dirty = ck->cur && (ck->cur->flags & INDEX_F_DIRTY);
    if (was_dirty && !dirty_too) {
        cache_key_put_locked(c, ck);
        pthread_mutex_unlock(&c->mu);
        return -EBUSY;
    }
    uint64_t version = ck->cur ? ck->cur->version : 0;
    cache_ver_drop_locked(c, ck);
    pthread_mutex_unlock(&c->mu);
    if (version)
        index_drop(c, ck, version);
    if (was_dirty)
        drain_forget(c, &k);
    pthread_mutex_lock(&c->mu);
    cache_key_put_locked(c, ck);
    pthread_mutex_unlock(&c->mu);
    evict_drain_unlinks(c);
    return 0;
}

int cache_invalidate(struct cache *c, const char *bucket, const char *key)
{
    return forget(c, bucket, key, 0);
}

int cache_forget(struct cache *c, const char *bucket, const char *key)
{
    return forget(c, bucket, key, 1);
}

void cache_ver_clean(struct cache *c, const struct index_key *k, uint64_t version,
                     const char *etag, int64_t mtime_ns)
{
    pthread_mutex_lock(&c->mu);
    struct ckey *ck = cache_key_find_locked(c, k);
    struct cver *v = ck ? ck->cur : NULL;
    if (!v || v->version != version) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    int same = (!etag || !etag[0] || !strcmp(etag, v->meta.etag)) &&
               (!mtime_ns || mtime_ns == v->meta.mtime_ns);
    if (same) {
        v->flags &= ~INDEX_F_DIRTY;
        v->validated_ns = s3c_real_ns();
        pthread_mutex_unlock(&c->mu);
        return;
    }
    /* Readers hold pointers into v->meta: the backend's view goes into a new in-memory
     * version of the same data file (not dropped: the file stays). */
    struct be_meta m = v->meta;
    if (etag && etag[0])
        snprintf(m.etag, sizeof(m.etag), "%s", etag);
    if (mtime_ns)
        m.mtime_ns = mtime_ns;
    struct cver *nv = ver_new(ck, version, &m, v->bs);
    if (!nv) {
        v->flags &= ~INDEX_F_DIRTY; /* the key reloads from the index when it goes idle */
        pthread_mutex_unlock(&c->mu);
        return;
    }
    nv->flags = v->flags & ~INDEX_F_DIRTY;
    nv->validated_ns = s3c_real_ns();
    if (nv->nblocks) {
        memcpy(nv->present, v->present, (nv->nblocks + 7) / 8);
        nv->npresent = v->npresent;
    }
    ck->cur = nv;
    cache_ver_put_locked(c, v);
    pthread_mutex_unlock(&c->mu);
}

struct prefix_scan {
    char **names;
    size_t n, cap;
    int err;
};

static int prefix_cb(void *arg, const struct index_key *k, const char *name, uint64_t version)
{
    struct prefix_scan *ps = arg;
    if (ps->n == ps->cap) {
        size_t nc = ps->cap ? ps->cap * 2 : 64;
        char **nn = realloc(ps->names, nc * sizeof(*nn));
        if (!nn) {
            ps->err = -ENOMEM;
            return 1;
        }
        ps->names = nn;
        ps->cap = nc;
    }
    if (!(ps->names[ps->n] = strdup(name))) {
        ps->err = -ENOMEM;
        return 1;
    }
    ps->n++;
    return 0;
}

int cache_invalidate_prefix(struct cache *c, const char *bucket, const char *prefix, uint64_t *n)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    struct prefix_scan ps = { 0 };
    char *np = NULL;
    size_t bl = strlen(bucket), pl = strlen(prefix);
    uint64_t dropped = 0;
    if (asprintf(&np, "%s/%s", bucket, prefix) < 0)
        return -ENOMEM;
    /* keys in memory first (lookups in flight must not install what they found) */
    pthread_mutex_lock(&c->mu);
    for (unsigned i = 0; i < CACHE_KEY_BUCKETS; i++)
        for (struct ckey *ck = c->keys[i]; ck; ck = ck->hnext)
            if (strcmp(ck->bucket, bucket) == 0 && strncmp(ck->key, prefix, pl) == 0)
                ck->gen++;
    pthread_mutex_unlock(&c->mu);
    int rc = index_prefix_scan(c->ix, np, prefix_cb, &ps);
    if (!rc)
        rc = ps.err;
    for (size_t i = 0; i < ps.n; i++) {
        if (!rc && strlen(ps.names[i]) > bl + 1) {
            cache_invalidate(c, bucket, ps.names[i] + bl + 1);
            dropped++;
        }
        free(ps.names[i]);
    }
    free(ps.names);
    free(np);
    if (n)
        *n = dropped;
    return rc;
}

int cache_stage_open(struct cache *c, int *fd, char path[4096])
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    return store_stage(c->dir, fd, path);
}

/* cache_adopt() and cache_adopt_dirty(): see cache.h. */
static int adopt(struct cache *c, const char *bucket, const char *key, const char *path,
                 const struct be_meta *meta, int dirty)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    struct index_key k;
    uint64_t acct = acct_of(meta->size, c->block_size);
    char dpath[STORE_PATH_MAX];
    char *name = NULL;
    struct index_entry e;
    int rc;
    memset(&e, 0, sizeof(e));
    index_key_make(bucket, key, &k);
    pthread_mutex_lock(&c->mu);
    struct ckey *ck = cache_key_get_locked(c, bucket, key, &k);
    if (ck) {
        cache_key_load_locked(c, ck);
        ck->gen++; /* lookups in flight must not install what they found */
    }
    pthread_mutex_unlock(&c->mu);
    if (!ck) {
        unlink(path);
        return -ENOMEM;
    }
    if (evict_reserve(c, acct)) {
        unlink(path);
        if (dirty) {
            /* everything else is dirty or pinned: the writer retries once some drained */
            rc = -S3E_SLOW_DOWN;
            goto out;
        }
        cache_invalidate(c, bucket, key);
        rc = 0;
        goto out;
    }
    e.version = store_new_version();
    e.size = meta->size;
    e.block_size = (uint32_t)c->block_size;
    e.atime_ns = e.validated_ns = s3c_real_ns();
    e.nblocks = (meta->size + c->block_size - 1) / c->block_size;
    e.used_bytes = acct;
    e.meta = *meta;
    pthread_mutex_lock(&c->mu);
    e.flags = (ck->cur ? ck->cur->flags & INDEX_F_PINNED : 0) | (dirty ? INDEX_F_DIRTY : 0);
    pthread_mutex_unlock(&c->mu);
    store_data_path(c->dir, k.b, k.len, e.version, dpath);
    rc = -ENOMEM;
    if (e.nblocks && !(e.bitmap = malloc((e.nblocks + 7) / 8)))
        goto unreserve;
    if (e.nblocks)
        memset(e.bitmap, 0xff, (e.nblocks + 7) / 8);
    if (asprintf(&name, "%s/%s", bucket, key) < 0) {
        name = NULL;
        goto unreserve;
    }
    if ((rc = store_rename(path, dpath)))
        goto unreserve;
    uint64_t oldv = 0;
    int64_t delta = 0;
    if ((rc = index_put(c->ix, &k, name, &e, &oldv, &delta))) {
        unlink(dpath);
        path = NULL;
        goto unreserve;
    }
    pthread_mutex_lock(&c->mu);
    evict_unreserve_locked(c, acct);
    c->used = (uint64_t)((int64_t)c->used + delta);
    cache_key_index_written_locked(c, ck, 0, 0);
    uint64_t curv = ck->cur ? ck->cur->version : 0;
    cache_ver_drop_locked(c, ck);
    if (oldv && oldv != curv) {
        char op[STORE_PATH_MAX];
        store_data_path(c->dir, k.b, k.len, oldv, op);
        evict_queue_unlink_locked(c, op);
    }
    struct cver *v = ver_new(ck, e.version, meta, e.block_size);
    if (v) {
        v->flags = e.flags;
        v->validated_ns = e.validated_ns;
        for (uint64_t b = 0; b < v->nblocks; b++)
            cache_bit_set(v->present, b);
        v->npresent = v->nblocks;
        ck->cur = v;
    }
    ck->loaded = v != NULL;
    pthread_mutex_unlock(&c->mu);
    if (dirty)
        drain_note(c, bucket, key, &k, e.version, e.size);
    else
        drain_forget(c, &k); /* a clean version replaced whatever was dirty */
    rc = 0;
    goto out;
unreserve:
    if (path)
        unlink(path);
    pthread_mutex_lock(&c->mu);
    evict_unreserve_locked(c, acct);
    pthread_mutex_unlock(&c->mu);
    if (!dirty)
        cache_invalidate(c, bucket, key);
out:
    index_entry_clear(&e);
    free(name);
    pthread_mutex_lock(&c->mu);
    cache_key_put_locked(c, ck);
    pthread_mutex_unlock(&c->mu);
    evict_drain_unlinks(c);
    return rc;
}

int cache_adopt(struct cache *c, const char *bucket, const char *key, const char *path,
                const struct be_meta *meta)
{
    return adopt(c, bucket, key, path, meta, 0);
}

int cache_adopt_dirty(struct cache *c, const char *bucket, const char *key, const char *path,
                      const struct be_meta *meta)
{
    return adopt(c, bucket, key, path, meta, 1);
}

/* ---- stats ----------------------------------------------------------------------------- */

void cache_get_stats(struct cache *c, struct cache_stats *out)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    struct index_totals t;
    memset(&t, 0, sizeof(t));
    index_totals(c->ix, &t);
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->capacity_bytes = c->cap;
    out->used_bytes = c->used + c->reserved;
    pthread_mutex_unlock(&c->mu);
    out->objects = t.objects;
    out->pinned_objects = t.pinned_objects;
    out->pinned_bytes = t.pinned_bytes;
    out->dirty_objects = t.dirty_objects;
    out->dirty_bytes = t.dirty_bytes;
    struct cache_drain_stats ds;
    cache_drain_stats(c, &ds);
    out->dirty_limit_bytes = ds.limit_bytes;
    out->dirty_staged_bytes = ds.staged_bytes;
    out->drain_uploaded_objects = ds.uploaded_objects;
    out->drain_uploaded_bytes = ds.uploaded_bytes;
    out->drain_errors = ds.errors;
    out->drain_inflight = ds.inflight;
    out->drain_cancelled = ds.cancelled;
    out->drain_rate_bps = ds.rate_bps;
    out->drain_oldest_dirty_age_s = ds.oldest_dirty_age_s;
}
