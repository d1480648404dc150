/*
 * evict.c: capacity and LRU. Capacity is a hard cap: used (indexed block
 * bytes) + reserved (blocks being fetched) never exceeds cf->cache_size; a
 * reservation that would is made room for by evicting least recently used,
 * unpinned, unopened entries down to 90%. Access times are batched in memory
 * and flushed in one transaction (before eviction decisions, when the batch
 * fills, at close). Unlinks of dropped files are queued and done off-lock.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache_priv.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "lib/workq.h"

#define EVICT_LOW_PCT 90
#define EVICT_BATCH 256
#define TOUCH_EVERY_NS 1000000000LL

void evict_unreserve_locked(struct cache *c, uint64_t bytes)
{
    S3C_ASSERT(c->reserved >= bytes);
    c->reserved -= bytes;
}

/* ---- access times ---------------------------------------------------------------------- */

void evict_touch_locked(struct cache *c, struct cver *v, int64_t validated_ns)
{
    int64_t now = s3c_real_ns();
    if (!validated_ns && now - v->touched_ns < TOUCH_EVERY_NS)
        return;
    if (v->dropped || c->ntouch >= CACHE_TOUCH_MAX)
        return; /* approximate LRU under pressure */
    v->touched_ns = now;
    struct index_touch *t = &c->touch[c->ntouch++];
    t->k = v->key->k;
    t->version = v->version;
    t->atime_ns = now;
    t->validated_ns = validated_ns;
}

void evict_flush_touches(struct cache *c)
{
    pthread_mutex_lock(&c->mu);
    size_t n = c->ntouch;
    struct index_touch *t = NULL;
    if (n) {
        t = malloc(n * sizeof(*t));
        if (t) {
            memcpy(t, c->touch, n * sizeof(*t));
            c->ntouch = 0;
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (!t)
        return;
    int rc = index_touch(c->ix, t, n);
    if (rc)
        log_warn("cache: recording access times: %s", s3c_strerror(rc));
    free(t);
}

/* ---- unlinks --------------------------------------------------------------------------- */

void evict_queue_unlink_locked(struct cache *c, const char *path)
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

void evict_drain_unlinks(struct cache *c)
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

static void background_run(void *arg)
{
    struct cache *c = arg;
    evict_drain_unlinks(c);
    evict_flush_touches(c);
    pthread_mutex_lock(&c->mu);
    c->unlink_queued = 0;
    c->touch_queued = 0;
    cache_job_done(c);
    pthread_mutex_unlock(&c->mu);
}

void evict_kick_locked(struct cache *c)
{
    if (c->closing || c->unlink_queued || c->touch_queued)
        return;
    if (!c->unlinks && c->ntouch < CACHE_TOUCH_MAX / 4)
        return;
    if (cache_submit(c, WORKQ_LOW, background_run, c) == 0) {
        c->unlink_queued = 1;
        c->touch_queued = 1;
    }
}

/* ---- eviction -------------------------------------------------------------------------- */

struct victim {
    struct ckey *ck; /* a ref */
    uint64_t version;
};

struct victim_scan {
    struct cache *c;
    struct victim *v;
    size_t n;
    uint64_t want, got;
};

static int victim_cb(void *arg, const struct index_key *k, uint64_t version, uint64_t used)
{
    struct victim_scan *vs = arg;
    struct cache *c = vs->c;
    pthread_mutex_lock(&c->mu);
    struct ckey *ck = cache_key_find_locked(c, k);
    int take = 1;
    if (ck) {
        struct cver *cur = ck->cur;
        if (!ck->loaded)
            take = 1;
        else if (cur && cur->version == version
                 && (cur->refs > 1 || fill_running_locked(cur) || (cur->flags & INDEX_F_PINNED)))
            take = 0; /* open by readers, being filled or pinned */
    }
    if (take) {
        if (ck) {
            ck->refs++;
        } else {
            /* a placeholder that keeps new readers from loading the doomed record */
            ck = cache_key_get_locked(c, "", "", k);
            if (!ck)
                take = 0;
        }
    }
    if (take) {
        ck->loaded = 1;
        if (ck->cur && ck->cur->version == version)
            cache_ver_drop_locked(c, ck);
        else
            ck->gen++;
        vs->v[vs->n].ck = ck;
        vs->v[vs->n].version = version;
        vs->n++;
        vs->got += used;
    }
    pthread_mutex_unlock(&c->mu);
    return vs->n >= EVICT_BATCH || vs->got >= vs->want;
}

int evict_reserve(struct cache *c, uint64_t bytes)
{
    if (bytes > c->cap)
        return -ENOSPC;
    struct victim vbuf[EVICT_BATCH];
    int rc = -ENOSPC;
    pthread_mutex_lock(&c->evict_mu);
    for (int pass = 0; pass < 64; pass++) {
        pthread_mutex_lock(&c->mu);
        if (c->used + c->reserved + bytes <= c->cap) {
            c->reserved += bytes;
            pthread_mutex_unlock(&c->mu);
            rc = 0;
            break;
        }
        uint64_t low = c->cap / 100 * EVICT_LOW_PCT;
        if (low + bytes > c->cap)
            low = c->cap - bytes;
        uint64_t want = c->used + c->reserved + bytes - low;
        int closing = c->closing;
        pthread_mutex_unlock(&c->mu);
        if (closing)
            break;
        evict_flush_touches(c);
        struct victim_scan vs = { c, vbuf, 0, want, 0 };
        int r = index_lru_scan(c->ix, victim_cb, &vs);
        if (r < 0)
            log_err("cache: scanning the LRU: %s", s3c_strerror(r));
        for (size_t i = 0; i < vs.n; i++) {
            struct ckey *ck = vbuf[i].ck;
            int64_t delta = 0;
            int d = index_del(c->ix, &ck->k, vbuf[i].version, &delta);
            char p[STORE_PATH_MAX];
            store_data_path(c->dir, ck->k.b, ck->k.len, vbuf[i].version, p);
            if (d == 0)
                unlink(p);
            else if (d != -ESTALE)
                log_err("cache: evicting: index_del: %s", s3c_strerror(d));
            pthread_mutex_lock(&c->mu);
            if (d == 0) {
                c->used = (uint64_t)((int64_t)c->used + delta);
                c->st.evictions++;
            }
            cache_key_index_written_locked(c, ck, d, 1);
            cache_key_put_locked(c, ck);
            pthread_mutex_unlock(&c->mu);
        }
        evict_drain_unlinks(c);
        if (vs.n == 0)
            break; /* nothing evictable: the caller bypasses */
    }
    pthread_mutex_unlock(&c->evict_mu);
    return rc;
}
