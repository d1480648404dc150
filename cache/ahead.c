/*
 * ahead.c: the parallel stage of a cold read from a remote backend (ahead_priv.h). A store
 * serves one connection slowly (cloud S3 ~90 MB/s and tens of ms to first byte, an HDD array
 * what its disks seek): a reader reading an object in order gets the link's speed only when
 * many ranged GETs are in flight for it. fill.c starts them, a block each, ahead of the reader
 * (one fetch per block however many readers); this file decides how many, owns the threads they
 * block on (apart from the workers, so that lookups and the blocks readers wait for never queue
 * behind them) and backs off when the backend says SlowDown: additive increase, multiplicative
 * decrease, as TCP does, so that a throttled store gets fewer requests, not more.
 */
#include <errno.h>
#include <unistd.h>

#include "ahead_priv.h"
#include "table_priv.h"
#include "lib/conf.h"
#include "lib/log.h"
#include "lib/workq.h"

int ahead_on(const struct cache *c)
{
    return c->awq != NULL;
}

int ahead_open(struct cache *c, struct errmsg *em)
{
    const struct conf *cf = c->cf;
    if (cf->fetch_parallel <= 1 || cf->fetch_connections < 0 ||
        (backend_caps(c->be) & BE_CAP_LOCAL_FD))
        return 0; /* one stream per reader, with --readahead; a local file needs no requests */
    /* by default 8 a core: each transfer costs CPU (two cores gained nothing from more with
     * 8 readers, and one reader got 4.6x one stream from 16: bench/RESULTS.md) */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    c->ahead_max = cf->fetch_connections > 0 ? (unsigned)cf->fetch_connections
                                             : (unsigned)S3C_MAX(16l, 8 * (ncpu > 0 ? ncpu : 1));
    c->ahead_limit = c->ahead_max;
    c->ahead_per_object = (unsigned)cf->fetch_parallel;
    struct backend_counters bc;
    backend_counters_get(c->be, &bc);
    c->ahead_throttled_seen = bc.throttled;
    int rc = workq_new(c->ahead_max, &c->awq);
    if (rc)
        errmsg_set(em, "cache: the fetch threads (--fetch-connections %u): %s", c->ahead_max,
                   s3c_strerror(rc));
    return rc;
}

void ahead_close(struct cache *c)
{
    if (c->awq)
        workq_free(c->awq);
    c->awq = NULL;
}

unsigned ahead_room_locked(const struct cache *c, const struct cver *v)
{
    if (!c->awq || c->ahead_running >= c->ahead_limit)
        return 0;
    /* --fetch-parallel runs of the object in flight (its readers' own included), of which
     * ahead at most its share of the limit among the objects being fetched (one at least) */
    unsigned share = S3C_MAX(c->ahead_limit / S3C_MAX(c->versions_receiving, 1u), 1u);
    if (v->nreceiving >= c->ahead_per_object || v->nahead >= share)
        return 0;
    unsigned room = S3C_MIN(c->ahead_per_object - v->nreceiving, share - v->nahead);
    return S3C_MIN(room, c->ahead_limit - c->ahead_running);
}

int ahead_submit_locked(struct cache *c, workq_fn_f *fn, struct fetch *f)
{
    int rc = cache_submit_to(c, c->awq, WORKQ_HIGH, fn, f);
    if (rc)
        return rc;
    f->ahead = 1;
    c->st.fetch_ahead_runs++;
    return 0;
}

void ahead_receiving_locked(struct fetch *f)
{
    struct cache *c = f->c;
    struct cver *v = f->v;
    S3C_ASSERT(!f->receiving);
    f->receiving = 1;
    if (v->nreceiving++ == 0)
        c->versions_receiving++;
    if (f->ahead) {
        v->nahead++;
        c->ahead_running++;
    }
}

/* An ahead run's transfer ended: its place goes back, and the limit moves (see the header). */
static void ahead_ended_locked(struct cache *c, struct cver *v)
{
    S3C_ASSERT(c->ahead_running > 0 && v->nahead > 0);
    c->ahead_running--;
    v->nahead--;
    struct backend_counters bc;
    backend_counters_get(c->be, &bc);
    if (bc.throttled != c->ahead_throttled_seen) {
        unsigned was = c->ahead_limit;
        c->ahead_throttled_seen = bc.throttled;
        c->ahead_limit = S3C_MAX(1u, c->ahead_limit / 2);
        c->st.fetch_ahead_backoffs++;
        if (c->ahead_limit != was)
            log_info("cache: the backend answered SlowDown: ranged GETs ahead of readers %u -> %u",
                     was, c->ahead_limit);
    } else if (c->ahead_limit < c->ahead_max) {
        c->ahead_limit++;
    }
}

void ahead_received_locked(struct fetch *f)
{
    struct cache *c = f->c;
    struct cver *v = f->v;
    if (!f->receiving)
        return;
    f->receiving = 0;
    S3C_ASSERT(v->nreceiving > 0);
    if (--v->nreceiving == 0) {
        c->versions_receiving--;
        if (v->plan_waiters) /* a plan's prefetch waits for the transfers, not the sync */
            cache_wake_locked(&v->waiters);
    }
    if (f->ahead)
        ahead_ended_locked(c, v);
}
