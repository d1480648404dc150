/*
 * warm.h: cache warm-up jobs behind POST/GET/DELETE /_/warm and POST /_/unpin. A job lists its
 * keys (a prefix, a key list, or a manifest object, in order) and fetches them into the cache
 * from this module's own threads; their fetches take at most half the workers, so live requests
 * never queue behind a warm-up.
 */
#ifndef S3C_WARM_H
#define S3C_WARM_H

#include "lib/buf.h"

struct warm;
struct conf;
struct backend;
struct cache;
struct workq;

/* Starts the warm threads and loads the jobs of an earlier run (CACHE_DIR/warm). @cf, @be, @c
 * and @wq are borrowed and outlive the warm-up. 0 or -errno. */
int warm_new(const struct conf *cf, struct backend *be, struct cache *c, struct workq *wq,
             struct warm **out);
/* Cancels every job, waits for what is in flight and stops the warm threads. */
void warm_free(struct warm *w);
/* POST /_/warm: 0 and the new job's JSON ({"job":"ID"}) in @out, or -S3E_* with @em. */
int warm_start(struct warm *w, const char *body, size_t len, struct buf *out, struct errmsg *em);
/* A job warming the one object (@bucket, @key), as POST /_/warm with "keys": [@key] would
 * start (listed in GET /_/warm like any other). 0 or warm_start()'s error, or -EBUSY
 * with 32 jobs unfinished (logged at debug: callers treat it as best effort). */
int warm_object(struct warm *w, const char *bucket, const char *key);
/* GET /_/warm/ID (@id) or GET /_/warm (@id NULL): JSON into @out; -S3E_NOT_FOUND. */
int warm_status(struct warm *w, const char *id, struct buf *out);
/* DELETE /_/warm/ID. */
int warm_cancel(struct warm *w, const char *id);
/* POST /_/unpin (blocking: call on a worker). *@n keys unpinned. */
int warm_unpin(struct warm *w, const char *body, size_t len, uint64_t *n, struct errmsg *em);

#endif
