/*
 * evict.c: capacity and eviction. Capacity is a hard cap: used (indexed block
 * bytes) + reserved (blocks being fetched) never exceeds cf->cache_size; a
 * reservation that would is made room for by evicting least recently used,
 * unpinned, unopened entries down to 90%. Which entries may go is the policy's
 * (policy.c): objects of a keep prefix in use are skipped; a fetch for a keep
 * prefix takes only the others last read before its pass began (none: it is a
 * bypass), any other reservation takes keep objects too, least recently used
 * first and only the bytes it still needs, once nothing else is left (after
 * waiting up to EVICT_BUSY_WAIT_NS for LRU objects open or being filled). Access
 * times are batched in memory and flushed in one transaction (before eviction
 * decisions, when the batch fills, at close). Unlinks of dropped files are
 * queued and done off-lock.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache_priv.h"
#include "evict_priv.h"
#include "plan.h"
#include "table_priv.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "lib/workq.h"

#define EVICT_LOW_PCT 90
#define EVICT_BATCH 256
#define TOUCH_EVERY_NS 1000000000LL
/* A keep reservation that found nothing evictable fails at once (a bypass) for this long,
 * unless something may have become evictable meanwhile (cache.evict_gen, the policy's gen):
 * without it each bypassed block would walk the whole LRU table. */
#define EVICT_KEEP_MEMO_NS 250000000LL
/* An LRU reservation that finds no idle LRU entry but another LRU object still busy (its fill's
 * fdatasync and index commit can outlast its reader) waits for it this long, a poll at a time,
 * before it takes a keep object's place: else each such overlap cost a keep prefix a place. */
#define EVICT_BUSY_WAIT_NS 500000000LL
#define EVICT_BUSY_POLL_US 2000

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

static void background_run(void *arg)
{
    struct cache *c = arg;
    cache_unlinks_run(c);
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
    int keep_too;   /* keep objects may go (a reservation that is not a keep prefix's) */
    int64_t before; /* only entries last read before this (a keep prefix's pass start) */
    int64_t now_ns; /* for the policy's idle bound */
    const struct index_key *self; /* the reserving object's own entry (NULL: none) */
    size_t busy; /* LRU entries of other objects skipped while open or being filled */
    size_t kept; /* keep objects skipped */
    /* Read plans (plan.h): entries a plan still needs are skipped like keep objects; the one
     * needed furthest ahead is recorded (far, far_dist) for a pass that takes only it (@only) */
    const struct index_key *only;
    int far_set;
    uint64_t far_dist;
    struct index_key far;
};

static int victim_cb(void *arg, const struct index_key *k, uint64_t version, uint64_t used,
                     int64_t atime_ns)
{
    struct victim_scan *vs = arg;
    struct cache *c = vs->c;
    if (atime_ns >= vs->before)
        return 1; /* the rest is newer still */
    if (vs->only && (vs->only->len != k->len || memcmp(vs->only->b, k->b, k->len)))
        return 0;
    uint64_t dist;
    if (!vs->only && !vs->keep_too && c->plans && plans_next_use(c->plans, k->b, k->len, &dist)) {
        int own = vs->self && vs->self->len == k->len && !memcmp(vs->self->b, k->b, k->len);
        if (!own && (!vs->far_set || dist > vs->far_dist)) {
            vs->far_set = 1;
            vs->far_dist = dist;
            vs->far = *k;
        }
        vs->kept++;
        return 0; /* a plan needs it: the one needed furthest may go later */
    }
    if (!vs->keep_too && policy_keeps(c->pol, k->b, k->len, vs->now_ns, NULL)) {
        vs->kept++;
        return 0; /* a keep prefix's object in use */
    }
    pthread_mutex_lock(&c->mu);
    struct ckey *ck = cache_key_find_locked(c, k);
    int take = 1;
    if (ck) {
        struct cver *cur = ck->cur;
        if (!ck->loaded)
            take = 1;
        else if (cur && cur->version == version &&
                 (cur->refs > 1 || cache_ver_running_locked(cur) ||
                  (cur->flags & INDEX_F_PINNED))) {
            take = 0; /* open by readers, being filled or pinned */
            vs->busy += !(cur->flags & INDEX_F_PINNED) && !vs->keep_too &&
                        !(vs->self && vs->self->len == k->len &&
                          !memcmp(vs->self->b, k->b, k->len));
        }
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

/* Evicts up to @want bytes (a batch at most) of entries last read before @before, keep
 * objects too with @keep_too. Returns how many entries it took; *@busy (may be NULL): whether
 * it skipped both keep objects and LRU entries of objects other than @self that are open or
 * being filled (those may free room soon; the keep objects would go otherwise). evict_mu
 * held. */
static size_t evict_batch(struct cache *c, struct victim *vbuf, uint64_t want, int keep_too,
                          int64_t before, const struct index_key *self, size_t *busy,
                          struct victim_scan *plan)
{
    struct victim_scan vs = {c,    vbuf,     0,       want,
                             0,    keep_too, before,  s3c_real_ns(),
                             self, 0,        0,       plan ? plan->only : NULL,
                             0,    0,        {0, {0}}};
    int r = index_lru_scan(c->ix, victim_cb, &vs);
    if (r < 0)
        log_err("cache: scanning the LRU: %s", s3c_strerror(r));
    for (size_t i = 0; i < vs.n; i++) {
        struct ckey *ck = vbuf[i].ck;
        int64_t delta = 0;
        int d = index_del(c->ix, &ck->k, vbuf[i].version, &delta);
        char p[STORE_PATH_MAX];
        store_data_path(c->dir, ck->k.b, ck->k.len, vbuf[i].version, p);
        if (d == 0) {
            unlink(p);
            policy_evicted(c->pol, ck->k.b, ck->k.len);
        } else if (d != -ESTALE) {
            log_err("cache: evicting: index_del: %s", s3c_strerror(d));
        }
        pthread_mutex_lock(&c->mu);
        if (d == 0) {
            c->used = (uint64_t)((int64_t)c->used + delta);
            c->st.evictions++;
        }
        cache_key_index_written_locked(c, ck, d, 1);
        cache_key_put_locked(c, ck);
        pthread_mutex_unlock(&c->mu);
    }
    cache_unlinks_run(c);
    if (busy)
        *busy = vs.busy && vs.kept;
    if (plan && !plan->only) {
        plan->far_set = vs.far_set;
        plan->far_dist = vs.far_dist;
        plan->far = vs.far;
    }
    return vs.n;
}

/* Nothing but objects the read plans need is left to evict (@far: the one needed furthest,
 * from the scan): evicts that one, unless @self is needed later still or by no plan, in which
 * case the caller's fill is not cached (Belady: the incoming object is needed last).
 * Returns the entries taken; 0 also when @self should go uncached (*@bypass). evict_mu held. */
static size_t evict_furthest(struct cache *c, struct victim *vbuf, uint64_t need,
                             const struct index_key *self, struct victim_scan *far, int *bypass)
{
    uint64_t own;
    *bypass = 0;
    if (!far->far_set)
        return 0;
    if (self && (!plans_next_use(c->plans, self->b, self->len, &own) || own > far->far_dist)) {
        *bypass = 1;
        return 0;
    }
    struct victim_scan only = *far;
    only.only = &far->far;
    return evict_batch(c, vbuf, need, 1, INT64_MAX, self, NULL, &only);
}

int evict_reserve(struct cache *c, uint64_t bytes, int for_keep, int64_t since,
                  const struct index_key *self)
{
    int64_t busy_since = 0;
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
        uint64_t need = c->used + c->reserved + bytes - c->cap;
        int closing = c->closing;
        uint64_t gen = c->evict_gen + policy_gen(c->pol);
        int64_t now = (int64_t)s3c_mono_ns();
        int memo = for_keep && c->keep_memo_valid && c->keep_memo_gen == gen &&
                   c->keep_memo_since == since && now - c->keep_memo_ns < EVICT_KEEP_MEMO_NS;
        pthread_mutex_unlock(&c->mu);
        if (closing || memo)
            break;
        evict_flush_touches(c);
        size_t busy = 0;
        struct victim_scan far = {0};
        size_t n = evict_batch(c, vbuf, want, 0, for_keep ? since : INT64_MAX, self, &busy, &far);
        if (n == 0 && far.far_set && !for_keep) {
            int bypass;
            n = evict_furthest(c, vbuf, need, self, &far, &bypass);
            if (bypass)
                break; /* the incoming object is needed last of all: it goes uncached */
            if (n)
                continue;
        }
        if (n == 0 && for_keep) {
            pthread_mutex_lock(&c->mu);
            c->keep_memo_valid = 1;
            c->keep_memo_gen = gen;
            c->keep_memo_ns = now;
            c->keep_memo_since = since;
            pthread_mutex_unlock(&c->mu);
            break; /* only the keep prefixes' own objects left: the caller bypasses */
        }
        if (n == 0 && busy) { /* rather than a keep object, an LRU one freed soon (bounded) */
            int64_t t = (int64_t)s3c_mono_ns();
            if (!busy_since)
                busy_since = t;
            if (t - busy_since < EVICT_BUSY_WAIT_NS) {
                pthread_mutex_unlock(&c->evict_mu); /* its next run may need to reserve */
                usleep(EVICT_BUSY_POLL_US);
                pthread_mutex_lock(&c->evict_mu);
                pass--;
                continue;
            }
        }
        if (n == 0) /* keep ones: only what is needed */
            n = evict_batch(c, vbuf, need, 1, INT64_MAX, self, NULL, NULL);
        if (n == 0)
            break; /* nothing evictable: the caller bypasses */
    }
    pthread_mutex_unlock(&c->evict_mu);
    return rc;
}
