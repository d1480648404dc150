/*
 * prefetch.c: the blocking side of the cache, for warm-up jobs. cache_prefetch() runs on a
 * thread that may block (a warm thread of objects/warm.c; a worker for cache_open_whole()) and
 * makes one object fully cached: it looks the metadata up through the ordinary cache_obj_*
 * path, then starts block fetches itself (fill_ensure_locked, at most one run of
 * CACHE_FETCH_MAX_BLOCKS at a time per object; a warm-up's are marked direct: written around
 * the page cache) and sleeps on a condition variable that the cache's waiter callbacks signal,
 * until every block is present (synced and indexed). No byte is copied to user space. The
 * fetches themselves run at WORKQ_HIGH like every fill, so a live reader joining the same
 * object shares them; the callers bound how many run at once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache_priv.h"
#include "fill_priv.h"
#include "prefetch_priv.h"
#include "table_priv.h"
#include "lib/conf.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "lib/s3c.h"

#define PREFETCH_POLL_MS 100 /* how often a waiting prefetch looks at its cancel flag */

static void pw_suspend(void *cls)
{
    UNUSED(cls);
}

static void pw_resume(void *cls)
{
    struct cache_pwait *p = cls;
    pthread_mutex_lock(&p->mu);
    p->woken = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Sleeps until resumed, or PREFETCH_POLL_MS when @cancel may be raised. */
static void pw_wait(struct cache_pwait *p, volatile int *cancel)
{
    pthread_mutex_lock(&p->mu);
    while (!p->woken && !(cancel && *cancel)) {
        if (!cancel) {
            pthread_cond_wait(&p->cv, &p->mu);
            continue;
        }
        struct timespec ts;
        s3c_deadline(CLOCK_MONOTONIC, PREFETCH_POLL_MS, &ts);
        if (pthread_cond_timedwait(&p->cv, &p->mu, &ts) == ETIMEDOUT)
            break;
    }
    p->woken = 0;
    pthread_mutex_unlock(&p->mu);
}

void cache_pwait_init(struct cache_pwait *p)
{
    memset(p, 0, sizeof(*p));
    p->w.suspend = pw_suspend;
    p->w.resume = pw_resume;
    p->w.cls = p;
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
}

void cache_pwait_wait(struct cache_pwait *p)
{
    pw_wait(p, NULL);
}

void cache_pwait_destroy(struct cache_pwait *p)
{
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
}

/* Serializes pin admission so that concurrent prefetches cannot both fit under the share. */
static pthread_mutex_t pin_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t acct_of(uint64_t size, uint64_t bs)
{
    uint64_t nb = (size + bs - 1) / bs, sum = 0;
    if (nb)
        sum = (nb - 1) * index_acct(bs) + index_acct(size - (nb - 1) * bs);
    return sum;
}

/* Pins @o's version if it fits in the pin share. @o is held: the version cannot be evicted. */
static int prefetch_pin(struct cache *c, struct cache_obj *o, const char *bucket, const char *key)
{
    pthread_mutex_lock(&c->mu);
    struct cver *v = o->v;
    int already = !!(v->flags & INDEX_F_PINNED);
    uint64_t need = acct_of(v->meta.size, v->bs);
    pthread_mutex_unlock(&c->mu);
    if (already)
        return 0;
    pthread_mutex_lock(&pin_mu);
    struct index_totals t; /* pinned bytes are the index's figure (as cache_get_stats()) */
    memset(&t, 0, sizeof(t));
    index_totals(c->ix, &t);
    int rc;
    if (t.pinned_bytes + need > c->cap / CACHE_PIN_SHARE_DIV)
        rc = -S3E_INSUFFICIENT_STORAGE; /* cached, but the pin share is full */
    else
        rc = cache_pin(c, bucket, key, 1);
    pthread_mutex_unlock(&pin_mu);
    return rc;
}

/* Waits (cancel-aware) until no fetch of @v is running: a cancelled prefetch does not return
 * while the backend is still sending it bytes. */
static void prefetch_drain(struct cache *c, struct cache_obj *o, struct cache_pwait *p)
{
    for (;;) {
        pthread_mutex_lock(&c->mu);
        struct cver *v = o->v;
        int busy = cache_ver_running_locked(v);
        if (busy)
            cache_arm_locked(o, &v->waiters, &p->w);
        pthread_mutex_unlock(&c->mu);
        if (!busy)
            return;
        pw_wait(p, NULL);
    }
}

/* Every block of @v present or fetching, and no transfer of it running: a plan's prefetch is
 * done with the backend (the cache writer syncs and indexes the rest on its own; its reader
 * reads the bytes from the run meanwhile). mu held. */
static int landed_locked(const struct cver *v)
{
    if (v->nreceiving)
        return 0;
    for (uint64_t b = 0; b < v->nblocks; b++)
        if (!cache_bit(v->present, b) && !cache_bit(v->fetching, b))
            return 0;
    return 1;
}

/* prefetch()'s fetch of what @o lacks, one run at a time from its first missing block, until it
 * is whole (a plan's: until its transfers end, landed_locked()), fails or *@cancel is raised
 * (a cancelled fetch returns once no run of it is in flight). @copy: a copy source's. 0 or the
 * error. */
static int prefetch_fill(struct cache *c, struct cache_obj *o, struct cache_pwait *p,
                         volatile int *cancel, int copy, int plan)
{
    int rc = 0;
    uint64_t err_gen0;
    unsigned bypass0;
    pthread_mutex_lock(&c->mu);
    struct cver *pv = o->v; /* the version a plan's wait is counted on */
    pv->plan_waiters += plan;
    err_gen0 = o->v->err_gen;
    unsigned noroom0 = o->v->noroom_gen;
    bypass0 = o->v->bypass_seen; /* a client's read bypassed before (a keep prefix): try anew */
    pthread_mutex_unlock(&c->mu);
    for (;;) {
        if (cancel && *cancel) {
            rc = -ECANCELED;
            break;
        }
        pthread_mutex_lock(&c->mu);
        struct cver *v = o->v;
        uint64_t first = v->nblocks;
        for (uint64_t b = 0; b < v->nblocks; b++)
            if (!cache_bit(v->present, b)) {
                first = b;
                break;
            }
        if (first == v->nblocks || (plan && landed_locked(v))) {
            pthread_mutex_unlock(&c->mu);
            rc = 0;
            break;
        }
        if (c->closing) {
            rc = CACHE_ERR_CLOSING;
        } else if (v->dropped) {
            rc = -S3E_SERVICE_UNAVAILABLE; /* replaced or invalidated meanwhile: retry anew */
        } else if (v->bypass_seen != bypass0 || v->noroom_gen != noroom0) {
            rc = -S3E_INSUFFICIENT_STORAGE; /* no room to keep it: fetched, not cached */
        } else if (v->err_gen != err_gen0 && !cache_bit(v->fetching, first)) {
            rc = v->last_err ? v->last_err : -EIO;
        } else {
            /* one run at a time for this object: starts nothing while the run holding the
             * first missing block is in flight */
            struct fetch *before = v->fetches;
            int r = cache_bit(v->fetching, first)
                        ? 0
                        : fill_ensure_on_locked(c, v, first, first + CACHE_FETCH_MAX_BLOCKS, o->wq);
            /* A warm-up's runs (pushed in front) go around the page cache; a copy source and a
             * plan's prefetch are read soon, from the page cache. None goes through a window:
             * they are there to fill the disk, at its pace. */
            for (struct fetch *x = v->fetches; r > 0 && x && x != before; x = x->next) {
                x->nowin = 1;
                x->no_bypass = plan;
                if (!copy && !plan)
                    x->direct = 1;
                else
                    x->as_lru = 1; /* a copy source is cached whole, keep prefix or not */
            }
            if (r < 0)
                rc = r;
            else
                cache_arm_locked(o, &v->waiters, &p->w);
        }
        pthread_mutex_unlock(&c->mu);
        if (rc)
            break;
        pw_wait(p, cancel);
    }
    cache_obj_cancel_wait(o, &p->w);
    pthread_mutex_lock(&c->mu);
    pv->plan_waiters -= plan;
    pthread_mutex_unlock(&c->mu);
    if (rc == -ECANCELED)
        prefetch_drain(c, o, p);
    cache_obj_cancel_wait(o, &p->w);
    return rc;
}

/* cache_prefetch(), with @out_fd also cache_open_whole(), with @plan cache_prefetch_plan(). */
static int prefetch(struct cache *c, const char *bucket, const char *key, int pin,
                    enum cache_outcome *how, uint64_t *bytes, volatile int *cancel, int *out_fd,
                    struct be_meta *out_meta, int plan)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    struct cache_obj *o;
    const struct be_meta *m;
    enum cache_outcome mhow;
    struct cache_pwait p;
    int rc, fd = -1, waited = 0;
    memset(&p, 0, sizeof(p));
    p.w.suspend = pw_suspend;
    p.w.resume = pw_resume;
    p.w.cls = &p;
    pthread_mutex_init(&p.mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p.cv, &ca);
    pthread_condattr_destroy(&ca);
    if (how)
        *how = CACHE_HIT;
    if (bytes)
        *bytes = 0;

    if ((rc = cache_obj_get(c, bucket, key, &o)))
        goto out_nobj;
    o->internal = 1; /* not a client's read: no pass of its prefix counts it */
    if (plan) {
        /* a plan's: its lookup and runs on the plans' threads; a cold lookup by GET of the
         * first block (one round trip for a small object), as the reader's own GET would */
        o->wq = c->pwq;
        cache_obj_reads_first(o);
    }
    while ((rc = cache_obj_meta(o, &p.w, &m, &mhow)) == -EAGAIN) {
        pw_wait(&p, cancel);
        if (cancel && *cancel) {
            cache_obj_cancel_wait(o, &p.w);
            rc = -ECANCELED;
            goto out;
        }
    }
    if (rc)
        goto out;
    if (bytes)
        *bytes = m->size;
    if (out_meta)
        *out_meta = *m;

    /* A lookup that went to the backend fetched: for a plan's, a GET of the first block that
     * may have brought the whole of a small object before the check below sees it whole. */
    waited = mhow != CACHE_HIT;
    if (m->size == 0) /* nothing to fetch: the metadata is the whole object */
        goto done;
    /* Already whole on the SSD: a hit (and it refreshes the entry's recency). Checked first so
     * that opening does not start the fetches itself: the loop below starts them, as its own. */
    pthread_mutex_lock(&c->mu);
    int whole = o->v->npresent == o->v->nblocks;
    pthread_mutex_unlock(&c->mu);
    if (whole && plan)
        goto done; /* a plan's: eviction goes by the plan, not by recency; no file to open */
    if (whole) {
        rc = cache_obj_open_range(o, 0, m->size, &fd);
        if (rc == 0)
            goto done;
        if (rc != -EAGAIN)
            goto out;
    }
    waited = 1;
    rc = prefetch_fill(c, o, &p, cancel, out_fd != NULL, plan);
    if (rc)
        goto out;
done:
    if (how)
        *how = waited ? CACHE_MISS : CACHE_HIT;
    if (pin)
        rc = prefetch_pin(c, o, bucket, key);
    if (!rc && out_fd && m->size && fd < 0)
        rc = cache_obj_open_range(o, 0, m->size, &fd);
    if (!rc && out_fd) {
        *out_fd = fd; /* the caller's now (-1 for an empty object) */
        fd = -1;
    }
out:
    if (fd >= 0)
        close(fd);
    cache_obj_release(o);
out_nobj:
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
    return rc;
}

int cache_prefetch(struct cache *c, const char *bucket, const char *key, int pin,
                   enum cache_outcome *how, uint64_t *bytes, volatile int *cancel)
{
    return prefetch(c, bucket, key, pin, how, bytes, cancel, NULL, NULL, 0);
}

int cache_prefetch_plan(struct cache *c, const char *bucket, const char *key,
                        enum cache_outcome *how, uint64_t *bytes, volatile int *cancel)
{
    if (!c->plans)
        return -S3E_NOT_IMPLEMENTED;
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (!c->pwq) /* the plans' threads start with their first prefetch: none while unused */
        rc = workq_new((unsigned)S3C_MIN(c->cf->plan_requests, 1024), &c->pwq);
    pthread_mutex_unlock(&c->mu);
    return rc ? rc : prefetch(c, bucket, key, 0, how, bytes, cancel, NULL, NULL, 1);
}

struct plans *cache_plans(struct cache *c)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    return c->plans;
}

int cache_head(struct cache *c, const char *bucket, const char *key, struct be_meta *meta)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    struct cache_obj *o;
    const struct be_meta *m;
    enum cache_outcome how;
    struct cache_pwait p;
    memset(&p, 0, sizeof(p));
    p.w.suspend = pw_suspend;
    p.w.resume = pw_resume;
    p.w.cls = &p;
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    int rc = cache_obj_get(c, bucket, key, &o);
    if (!rc) {
        while ((rc = cache_obj_meta(o, &p.w, &m, &how)) == -EAGAIN)
            pw_wait(&p, NULL);
        if (!rc)
            *meta = *m;
        cache_obj_cancel_wait(o, &p.w);
        cache_obj_release(o);
    }
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
    return rc;
}

int cache_open_whole(struct cache *c, const char *bucket, const char *key, int *fd,
                     struct be_meta *meta)
{
    *fd = -1;
    int rc = prefetch(c, bucket, key, 0, NULL, NULL, NULL, fd, meta, 0);
    if (rc == -EAGAIN) /* evicted between the fill and the open: rare, once more */
        rc = prefetch(c, bucket, key, 0, NULL, NULL, NULL, fd, meta, 0);
    return rc == -EAGAIN ? -S3E_SERVICE_UNAVAILABLE : rc;
}

/* ---- many lookups at once -------------------------------------------------------------- */

struct multi_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned pending; /* suspended and not yet resumed */
};

static void mw_suspend(void *cls)
{
    struct multi_wait *mw = cls;
    pthread_mutex_lock(&mw->mu);
    mw->pending++;
    pthread_mutex_unlock(&mw->mu);
}

static void mw_resume(void *cls)
{
    struct multi_wait *mw = cls;
    pthread_mutex_lock(&mw->mu);
    mw->pending--;
    pthread_cond_signal(&mw->cv);
    pthread_mutex_unlock(&mw->mu);
}

#define META_WAIT_WINDOW 64 /* lookups in flight at once */

void cache_objs_meta_wait(struct cache_obj **objs, size_t n, const struct be_meta **metas, int *rcs)
{
    struct multi_wait mw = {.pending = 0};
    struct cache_waiter w[META_WAIT_WINDOW];
    pthread_mutex_init(&mw.mu, NULL);
    pthread_cond_init(&mw.cv, NULL);
    for (size_t base = 0; base < n; base += META_WAIT_WINDOW) {
        size_t m = S3C_MIN((size_t)META_WAIT_WINDOW, n - base), left = m;
        memset(w, 0, sizeof(w));
        for (size_t i = 0; i < m; i++) {
            w[i].suspend = mw_suspend;
            w[i].resume = mw_resume;
            w[i].cls = &mw;
            rcs[base + i] = -EAGAIN;
        }
        while (left) {
            for (size_t i = 0; i < m; i++) {
                if (rcs[base + i] != -EAGAIN)
                    continue;
                enum cache_outcome how;
                rcs[base + i] = cache_obj_meta(objs[base + i], &w[i], &metas[base + i], &how);
                if (rcs[base + i] != -EAGAIN)
                    left--;
            }
            pthread_mutex_lock(&mw.mu);
            while (left && mw.pending)
                pthread_cond_wait(&mw.cv, &mw.mu);
            pthread_mutex_unlock(&mw.mu);
        }
        for (size_t i = 0; i < m; i++)
            cache_obj_cancel_wait(objs[base + i], &w[i]);
    }
    pthread_mutex_destroy(&mw.mu);
    pthread_cond_destroy(&mw.cv);
}
