/*
 * missource_priv.h: what missource.c, the fetch stage of a fill from a local backend's own
 * file (--miss-source), offers fill.c, lookup.c and cache.c.
 */
#ifndef S3C_CACHE_MISSOURCE_PRIV_H
#define S3C_CACHE_MISSOURCE_PRIV_H

#include "cache_priv.h"

/* missource.c (--miss-source) */
int missource_enabled(const struct conf *cf, struct backend *be); /* at open: c->miss_source */
/* A new version of @size bytes (no earlier one, not pinned): its index record may wait for the
 * fill, so its first GET, sent from the backend's file, does not wait for that write. */
int missource_defer_record(const struct cache *c, uint64_t size);
/* The fill's side, from a run of @f: opens the backend file before the cache file (the GETs'
 * first byte waits for nothing else), ... */
void missource_run_start(struct fetch *f);
/* ... or says there will be none (GETs waiting stream from the cache; mu held) ... */
void missource_run_none_locked(struct fetch *f);
/* ... opens, checks and publishes it (idempotent; 0 or the error), ... */
int missource_fetch_open(struct fetch *f);
/* ... and when the run ended well, hands the file to the chain's next run (mu held). */
void missource_run_end_locked(struct fetch *f);
/* A GET's side: [@off, @end) of @v not all present, blocks [@b0, @b1) to fill: 1 with *@fd to
 * send from, -EINPROGRESS after @w->suspend() while a run opens the file, -ENOENT: stream from
 * the cache. mu held. */
int missource_open_locked(struct cache_obj *o, struct cver *v, uint64_t off, uint64_t end,
                          uint64_t b0, uint64_t b1, struct cache_waiter *w, int *fd);

#endif
