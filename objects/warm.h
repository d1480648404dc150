/*
 * warm.h: cache warm-up jobs behind POST/GET/DELETE /_/warm and POST /_/unpin. A job lists its
 * keys (a prefix, a key list, or a manifest object, in order) and fetches them into the cache
 * from this module's own threads; their fetches take at most half the workers, so live requests
 * never queue behind a warm-up.
 */
#ifndef S3C_WARM_H
#define S3C_WARM_H

#include <stddef.h>
#include <stdint.h>

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

/* Cluster warm-ups (peer/cwarm.c) split a job's keys by owner and start each share as a job
 * of "keys" (with their "sizes", when the listing gave them) on its owner. */
struct warm_keys {
    char *bucket;
    char **keys;
    uint64_t *sizes; /* NULL when not known (a key list, a manifest) */
    size_t n;
    int pin, fit;
};
/* Checks a POST /_/warm body without starting anything: 0 or -S3E_INVALID_ARGUMENT with @em. */
int warm_validate(const char *body, size_t len, struct errmsg *em);
/* The keys a POST /_/warm body names, in order (listing a prefix, reading a manifest: blocking,
 * call on a worker). 0 with *@out (free with warm_keys_free), or -S3E_* with @em. */
int warm_resolve(struct warm *w, const char *body, size_t len, struct warm_keys *out,
                 struct errmsg *em);
void warm_keys_free(struct warm_keys *k);

#endif
