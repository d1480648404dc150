/*
 * fill_priv.h: what fill.c, the orchestrator of a fill's runs, offers the files above it
 * (obj.c, prefetch.c, cache.c). The stages below it call it back through c->up.
 */
#ifndef S3C_CACHE_FILL_PRIV_H
#define S3C_CACHE_FILL_PRIV_H

#include "cache_priv.h"

/* Starts fetches for the missing, not yet fetching blocks of [b0, b1). Returns how many started
 * or a negative error. */
int fill_ensure_locked(struct cache *c, struct cver *v, uint64_t b0, uint64_t b1);
/* fill_ensure_locked(), its runs on @wq (NULL: the workers). */
int fill_ensure_on_locked(struct cache *c, struct cver *v, uint64_t b0, uint64_t b1,
                          struct workq *wq);
struct fetch *fill_find_locked(struct cver *v, uint64_t pos);
void fill_fail_all_locked(struct cache *c, int err);
/* Frees @v's finished fetches kept for their readers (bypass bytes in memory): when no request
 * reads @v any more. An idle version must not hold them (blocks of memory per key). */
void fill_drop_finished_locked(struct cver *v);
/* Starts a run of blocks [@first, @first + @n) on a worker. A chain run also names the block
 * its chain ends at (@follow_to, else 0) and may be handed the backend file the previous run
 * copied from (@given_fd, owned by the run once this returns 0). */
int fill_start_locked(struct cache *c, struct cver *v, uint64_t first, uint64_t n,
                      uint64_t follow_to, int given_fd);

/* Ends run @f with @rc (no lock held): blocks landed whole are synced and marked present,
 * waiters woken, the fetch freed (or kept for readers), its job done. */
void fill_end_run(struct fetch *f, int rc);
/* A run of blocks [0, @n) of @v whose transfer is already under way on the caller's thread
 * (a lookup by GET, lookup.c: the GET that brought @v's metadata carries its first bytes):
 * in flight at once, its blocks fetching. NULL when one of them is present or fetching, or
 * the cache closes, or without memory. Then, without the lock: fill_adopted_begin() (0, or
 * the run's error), fill_adopted_data() for each piece of the body, fill_adopted_end() with
 * the transfer's result, always once: it ends the run. */
struct fetch *fill_adopt_locked(struct cache *c, struct cver *v, uint64_t n);
int fill_adopted_begin(struct fetch *f, int *windowed);
int fill_adopted_data(struct fetch *f, int windowed, const void *buf, size_t len);
void fill_adopted_end(struct fetch *f, int windowed, int rc);

#endif
