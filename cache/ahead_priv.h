/*
 * ahead_priv.h: what ahead.c, the parallel stage of a cold read from a remote backend, offers
 * fill.c and cache.c: how many ranged GETs one object and the whole cache may have in flight
 * ahead of their readers, the threads they run on, and the backing off when the backend answers
 * 503 SlowDown.
 */
#ifndef S3C_CACHE_AHEAD_PRIV_H
#define S3C_CACHE_AHEAD_PRIV_H

#include "cache_priv.h"

/* At open: the fetch threads (--fetch-connections) when the backend is remote and
 * --fetch-parallel > 1, else none (ahead_on() is 0). 0 or -errno with @em. */
int ahead_open(struct cache *c, struct errmsg *em);
/* At close, once every run ended: joins the threads. */
void ahead_close(struct cache *c);
/* Whether cold reads of @c fetch ahead in parallel. */
int ahead_on(const struct cache *c);
/* How many more runs may start ahead of a reader of @v now (mu held): within --fetch-parallel
 * runs of @v receiving (its readers' own included), @v's share of the cache's limit of ahead
 * runs among the objects being fetched, and that limit (--fetch-connections, lowered while the
 * backend answers SlowDown). */
unsigned ahead_room_locked(const struct cache *c, const struct cver *v);
/* Queues @fn(@f) on the fetch threads (mu held): 0, counted as an ahead run and a cache job,
 * or -ESHUTDOWN. */
int ahead_submit_locked(struct cache *c, workq_fn_f *fn, struct fetch *f);
/* A run of @f's starts (mu held) and, once, its transfer from the backend ended (all it will
 * get is in; the writer may still be writing it): what the limits count is the runs
 * receiving. An ahead run's end gives its place back; the limit halves when the backend
 * answered SlowDown (or 429) since the last one ended, else grows by one up to
 * --fetch-connections. When the last run of a version receiving ends, its waiters are woken
 * if a plan's prefetch is among them (cver.plan_waiters). */
void ahead_receiving_locked(struct fetch *f);
void ahead_received_locked(struct fetch *f);

#endif
