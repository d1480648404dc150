/*
 * cache.c: the public API of cache/cache.h: open and close, adopt, invalidate and forget, the
 * staging of uploads, the stats and the policies: the facade, on top of the folder's other
 * files (docs/design.md, "The files of cache/"). Request handles and pins are in obj.c, keys
 * and versions in table.c, metadata lookups in lookup.c, block fetches and reads in fill.c
 * (with --miss-source in missource.c, windows in fillwin.c), capacity and LRU in evict.c, keep
 * or LRU per prefix in policy.c, the write-back journal in journal.c (the engine is
 * writeback/drain.c), the index in index.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "ahead_priv.h"
#include "cache_priv.h"
#include "evict_priv.h"
#include "fill_priv.h"
#include "fillwin_priv.h"
#include "journal_priv.h"
#include "members_priv.h"
#include "missource_priv.h"
#include "plan.h"
#include "table_priv.h"
#include "lib/arr.h"
#include "lib/conf.h"
#include "lib/fileio.h"
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
    case CACHE_PARTIAL: return "partial";
    }
    return "miss";
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
    c->cold_get = cf->cold_get && !(backend_caps(be) & BE_CAP_LOCAL_FD);
    c->miss_source = missource_enabled(cf, be);
    c->up.run_start_locked = fill_start_locked; /* the pipeline's calls up (cache_priv.h) */
    c->up.run_end = fill_end_run;
    c->up.ver_whole_locked = members_note_whole_locked;
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
    pthread_cond_init(&c->index_cv, NULL);
    pthread_cond_init(&c->journal_cv, NULL);
    if ((rc = policy_new(cf->keep_prefix, cf->lru_prefix, cf->keep_auto, cf->keep_idle,
                         s3c_real_ns(), &c->pol, em))) {
        if (rc == -ENOMEM)
            errmsg_set(em, "cache: out of memory");
        goto fail;
    }
    if ((rc = store_init(c->dir))) {
        errmsg_set(em, "cache: cannot create %s: %s", c->dir, strerror(-rc));
        goto fail;
    }
    c->in_memory = fileio_medium_of_path(c->dir) == FS_MEDIUM_MEMORY;
    snprintf(p, sizeof(p), "%s/index", c->dir);
    if ((rc = index_open(p, &c->ix, em)))
        goto fail;
    /* a new data.mdb and lock.mdb are names in index/: durable once it is synced */
    if ((rc = store_sync_dir(p))) {
        errmsg_set(em, "cache: fsync %s: %s", p, strerror(-rc));
        goto fail;
    }
    struct index_totals t;
    if ((rc = index_totals(c->ix, &t))) {
        errmsg_set(em, "cache: reading index totals: %s", s3c_strerror(rc));
        goto fail;
    }
    c->used = t.used_bytes;
    c->st.capacity_bytes = c->cap;
    if ((rc = fillwin_open(c, em)))
        goto fail;
    if ((rc = ahead_open(c, em))) {
        fillwin_close(c);
        goto fail;
    }
    if (cf->plan_requests > 0) {
        struct plans_conf pc = {.cache_bytes = c->cap,
                                .ahead_bytes = cf->plan_ahead,
                                .ahead_objects = 1024,
                                .requests = (unsigned)S3C_MIN(cf->plan_requests, 1024),
                                .idle_ns = cf->plan_idle > 0 ? cf->plan_idle * 1000000ll : 0};
        if ((rc = plans_new(&pc, &c->plans))) { /* the threads start with the first prefetch */
            errmsg_set(em, "cache: the read plans' threads (--plan-requests %u): %s", pc.requests,
                       s3c_strerror(rc));
            plans_free(c->plans);
            ahead_close(c);
            fillwin_close(c);
            goto fail;
        }
    }
    *out = c;
    return 0;
fail:
    index_close(c->ix);
    policy_free(c->pol);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->evict_mu);
    pthread_mutex_destroy(&c->record_mu);
    pthread_cond_destroy(&c->jobs_cv);
    pthread_cond_destroy(&c->index_cv);
    pthread_cond_destroy(&c->journal_cv);
    free(c->touch);
    free(c);
    return rc;
}

void cache_stop(struct cache *c)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
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
    pthread_mutex_unlock(&c->mu);
}

void cache_close(struct cache *c)
{
    if (!c)
        return;
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    if (journal_attached(c))
        return; /* a write-back engine could not stop (an upload outlived the shutdown
                 * timeout) and still uses the cache: left to the exiting process */
    cache_stop(c);
    pthread_mutex_lock(&c->mu);
    while (c->njobs)
        pthread_cond_wait(&c->jobs_cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    ahead_close(c); /* every run ended */
    if (c->pwq)
        workq_free(c->pwq);
    c->pwq = NULL;
    plans_free(c->plans); /* their prefetch threads (objects/plan.c) stopped before */
    c->plans = NULL;
    workq_free(c->wwq); /* every run ended: only the writer's last jobs may be finishing */
    c->wwq = NULL;
    workq_free(c->ewq); /* and the enders' (after the writer's: they queue them) */
    c->ewq = NULL;
    pthread_mutex_lock(&c->mu);
    while (c->idle_head) {
        struct ckey *ck = c->idle_head;
        cache_idle_remove_locked(c, ck);
        if (!ck->refs)
            cache_key_free_locked(c, ck);
    }
    for (unsigned i = 0; i < CACHE_KEY_BUCKETS; i++) {
        for (struct ckey *ck = c->keys[i], *next; ck; ck = next) {
            next = ck->hnext;
            if (ck->index_stale) {
                ck->index_stale = 0;
                if (!--ck->refs)
                    cache_key_free_locked(c, ck);
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
    evict_flush_touches(c);
    cache_unlinks_run(c);
    pthread_mutex_lock(&c->mu);
    /* keys still referenced by requests that were never released: nothing to do safely
     * but drop our view of them */
    pthread_mutex_unlock(&c->mu);
    index_close(c->ix);
    if (!c->pool.head) /* else a request never released holds a window: left to the exit */
        fillwin_close(c);
    policy_free(c->pol);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->evict_mu);
    pthread_mutex_destroy(&c->record_mu);
    pthread_cond_destroy(&c->jobs_cv);
    pthread_cond_destroy(&c->index_cv);
    pthread_cond_destroy(&c->journal_cv);
    free(c->touch);
    c->magic = 0;
    free(c);
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
        cache_index_drop(c, ck, version);
    if (was_dirty)
        journal_forget(c, bucket, key);
    pthread_mutex_lock(&c->mu);
    cache_key_put_locked(c, ck);
    pthread_mutex_unlock(&c->mu);
    cache_unlinks_run(c);
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

struct prefix_scan {
    char **names;
    size_t n, cap;
    int err;
};

static int prefix_cb(void *arg, const struct index_key *k, const char *name, uint64_t version)
{
    struct prefix_scan *ps = arg;
    if (ARR_GROW(ps->names, ps->n, 1, ps->cap)) {
        ps->err = -ENOMEM;
        return 1;
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
    struct prefix_scan ps = {0};
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

int cache_stage_reserve(struct cache *c, uint64_t *held, uint64_t total)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    if (total <= *held)
        return 0;
    if (total > c->cap)
        return -S3E_ENTITY_TOO_LARGE;
    uint64_t more = total - *held;
    /* Room left: taken at once, without the evictor's lock (the caller may be an HTTP thread
     * receiving a body; an eviction there holds its other connections meanwhile). */
    pthread_mutex_lock(&c->mu);
    int fits = c->used + c->reserved + more <= c->cap;
    if (fits) {
        c->reserved += more;
        c->staged += more;
    }
    pthread_mutex_unlock(&c->mu);
    if (!fits) {
        /* as an LRU fetch would: a body must be held or refused, whatever the keep prefixes */
        if (evict_reserve(c, more, 0, 0, NULL))
            return -S3E_SLOW_DOWN;
        pthread_mutex_lock(&c->mu);
        c->staged += more;
        pthread_mutex_unlock(&c->mu);
    }
    *held = total;
    return 0;
}

int cache_stage_fits(const struct cache *c, uint64_t total)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    return total > c->cap ? -S3E_ENTITY_TOO_LARGE : 0;
}

void cache_stage_release(struct cache *c, uint64_t *held)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    if (!held || !*held)
        return;
    cache_stage_drop(c, *held);
    *held = 0;
}

void cache_stage_drop(struct cache *c, uint64_t bytes)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    pthread_mutex_lock(&c->mu);
    /* staged is part of reserved. At most what is staged: a part replaced while its upload
     * completed may have been given back twice; the count must not wrap. */
    uint64_t n = S3C_MIN(bytes, c->staged);
    c->staged -= n;
    evict_unreserve_locked(c, n);
    pthread_mutex_unlock(&c->mu);
}

void cache_stage_force(struct cache *c, uint64_t bytes)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    pthread_mutex_lock(&c->mu);
    c->reserved += bytes;
    c->staged += bytes;
    pthread_mutex_unlock(&c->mu);
}

/* Reserves @acct bytes for an adopted entry, taking over first what *@held reserves for its
 * staged file (then 0). 0, or evict_reserve()'s error with *@held unchanged. */
static int adopt_reserve(struct cache *c, uint64_t acct, uint64_t *held)
{
    uint64_t have = held ? *held : 0;
    pthread_mutex_lock(&c->mu);
    uint64_t take = S3C_MIN(have, c->staged); /* as cache_stage_drop(): never wraps */
    c->staged -= take;
    pthread_mutex_unlock(&c->mu);
    if (take < acct) {
        /* An upload reserves as LRU, whatever its prefix's policy: a write-back object must
         * be held (or the writer slowed down), never refused because keep objects fill the
         * cache. */
        int rc = evict_reserve(c, acct - take, 0, 0, NULL);
        if (rc) {
            pthread_mutex_lock(&c->mu);
            c->staged += take;
            pthread_mutex_unlock(&c->mu);
            return rc;
        }
    } else if (take > acct) {
        pthread_mutex_lock(&c->mu);
        evict_unreserve_locked(c, take - acct);
        pthread_mutex_unlock(&c->mu);
    }
    if (held)
        *held = 0;
    return 0;
}

/* cache_adopt() and cache_adopt_dirty(): see cache.h. */
static int adopt(struct cache *c, const char *bucket, const char *key, const char *path,
                 const struct be_meta *meta, int dirty, uint64_t *held)
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
        while (ck->indexing) /* a lookup writing its record: ours goes after it */
            pthread_cond_wait(&c->index_cv, &c->mu);
        ck->indexing = 1;
        ck->gen++; /* lookups in flight must not install what they found */
    }
    pthread_mutex_unlock(&c->mu);
    if (!ck) {
        unlink(path);
        return -ENOMEM;
    }
    if (adopt_reserve(c, acct, held)) {
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
    c->evict_gen++;
    cache_key_index_written_locked(c, ck, 0, 0);
    uint64_t curv = ck->cur ? ck->cur->version : 0;
    cache_ver_drop_locked(c, ck);
    if (oldv && oldv != curv) {
        char op[STORE_PATH_MAX];
        store_data_path(c->dir, k.b, k.len, oldv, op);
        cache_unlink_queue_locked(c, op);
    }
    struct cver *v = cache_ver_new(ck, e.version, meta, e.block_size);
    if (v) {
        v->flags = e.flags;
        v->validated_ns = e.validated_ns;
        for (uint64_t b = 0; b < v->nblocks; b++)
            cache_bit_set(v->present, b);
        v->npresent = v->nblocks;
        ck->cur = v;
    }
    ck->loaded = v != NULL;
    ck->gen++; /* a lookup that began before this version was in place found no version */
    ck->indexing = 0;
    pthread_cond_broadcast(&c->index_cv);
    pthread_mutex_unlock(&c->mu);
    if (dirty)
        journal_note(c, bucket, key, e.version, e.size);
    else
        journal_forget(c, bucket, key); /* a clean version replaced whatever was dirty */
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
    if (ck->indexing) { /* ended early (no room, no memory, an index error) */
        ck->indexing = 0;
        pthread_cond_broadcast(&c->index_cv);
    }
    cache_key_put_locked(c, ck);
    pthread_mutex_unlock(&c->mu);
    cache_unlinks_run(c);
    return rc;
}

int cache_adopt(struct cache *c, const char *bucket, const char *key, const char *path,
                const struct be_meta *meta)
{
    return adopt(c, bucket, key, path, meta, 0, NULL);
}

int cache_adopt_held(struct cache *c, const char *bucket, const char *key, const char *path,
                     const struct be_meta *meta, int dirty, uint64_t *held)
{
    return adopt(c, bucket, key, path, meta, dirty, held);
}

int cache_adopt_dirty(struct cache *c, const char *bucket, const char *key, const char *path,
                      const struct be_meta *meta)
{
    return adopt(c, bucket, key, path, meta, 1, NULL);
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
    out->staged_bytes = c->staged;
    out->reserved_bytes = c->reserved - S3C_MIN(c->staged, c->reserved); /* staged is reserved */
    out->window_bytes = window_pool_bytes(&c->pool);
    out->window_held_bytes = window_pool_held(&c->pool);
    out->fetch_ahead_running = c->ahead_running;
    out->fetch_ahead_limit = c->ahead_limit;
    out->fetch_objects = c->versions_receiving;
    out->window_limit_bytes = (uint64_t)c->pool.max_slots * c->pool.chunk;
    out->window_forced_drops = c->pool.forced;
    pthread_mutex_unlock(&c->mu);
    out->objects = t.objects;
    out->pinned_objects = t.pinned_objects;
    out->pinned_bytes = t.pinned_bytes;
    out->dirty_objects = t.dirty_objects;
    out->dirty_bytes = t.dirty_bytes;
    journal_stats(c, out); /* the write-back engine's figures */
}

void cache_set_valid_after(struct cache *c, int64_t ns)
{
    pthread_mutex_lock(&c->mu);
    if (ns > c->valid_after_ns) /* only ever later: an earlier call's entries stay suspect */
        c->valid_after_ns = ns;
    pthread_mutex_unlock(&c->mu);
}

/* ---- policies -------------------------------------------------------------------------- */

int cache_policy_report(struct cache *c, struct cache_policy_report *out)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    struct index_totals t;
    memset(out, 0, sizeof(*out));
    memset(&t, 0, sizeof(t));
    index_totals(c->ix, &t);
    out->auto_on = policy_auto(c->pol);
    out->idle_ms = policy_idle_ms(c->pol);
    uint64_t held = t.pinned_bytes + t.dirty_bytes;
    out->available_bytes = c->cap > held ? c->cap - held : 0;
    int rc = policy_report(c->pol, s3c_real_ns(), &out->rows, &out->n);
    if (rc)
        return rc;
    for (size_t i = 0; i < out->n; i++) {
        uint64_t ws = out->rows[i].last.working_set_bytes;
        out->rows[i].ideal = !ws ? 0
                             : out->available_bytes >= ws
                                 ? 1.0
                                 : (double)out->available_bytes / (double)ws;
    }
    return 0;
}

void cache_policy_report_free(struct cache_policy_report *r)
{
    if (!r)
        return;
    free(r->rows);
    r->rows = NULL;
    r->n = 0;
}

int cache_policy_set(struct cache *c, const char *bucket, const char *prefix, const char *mode,
                     struct errmsg *em)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    return policy_set(c->pol, bucket, prefix, mode, s3c_real_ns(), em);
}

int cache_policy_check(const struct conf *cf, struct errmsg *em)
{
    struct policy *p = NULL;
    int rc = policy_new(cf->keep_prefix, cf->lru_prefix, 0, cf->keep_idle, 0, &p, em);
    policy_free(p);
    return rc;
}
