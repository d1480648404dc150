/*
 * drain.h: the write-back engine. Objects written in --write-mode back are adopted into the
 * cache dirty (cache_adopt_held(), @dirty 1: durable in the cache, the index row and its
 * journal row committed in one LMDB transaction, served to readers at once, never evicted nor
 * revalidated); the engine uploads them to the backend with threads of its own (oldest first,
 * bounded parallelism, retried with backoff while the backend fails) and marks each clean only
 * once the backend confirmed it. It also keeps the dirty limit, keeps gateway writes of a key
 * apart from its drain, and answers flushes. Dirty entries found at open are drained.
 *
 * The object layer owns it (objects/objects.c opens it in either write mode: a past
 * write-back run may have left dirty entries) and calls it; it reads and cleans the journal
 * through the cache's journal API (cache.h) and hears of new dirty versions and forgotten keys
 * through the hooks it attaches there.
 */
#ifndef S3C_WRITEBACK_DRAIN_H
#define S3C_WRITEBACK_DRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"

struct cache;
struct conf;
struct drain;

/* Loads the journal of @c, attaches to @c (cache_journal_attach()) and starts the drainers
 * (--drain-concurrency) and the flush thread. @cf, @c and @be are borrowed and outlive it. 0,
 * or an error with @em. */
int drain_open(const struct conf *cf, struct cache *c, struct backend *be, struct drain **out,
               struct errmsg *em);
/* Stops the drainers, waiting up to --shutdown-timeout for uploads in flight, detaches from
 * the cache and frees @dr. -EBUSY when some are still running: @dr then stays attached and
 * allocated (cache_close() leaves the cache to the exiting process). NULL: 0. */
int drain_close(struct drain *dr);

/* Runs @fn(@cls, bucket, key) on a drainer thread after each object the backend confirmed and
 * the journal marked clean, before a flush waiting for it is answered (cluster mode: the
 * other gateways forget a copy they may have taken from the backend before the drain, with a
 * write notice bounded by --peer-timeout). One hook; NULL removes it. Returns once no call of
 * the previous hook is in flight; drain_close() removes it when it leaves drainers running. */
typedef void drain_cleaned_f(void *cls, const char *bucket, const char *key);
void drain_on_cleaned(struct drain *dr, drain_cleaned_f *fn, void *cls);

/* Reserves @bytes of the dirty limit for a write in progress: 0, -S3E_SLOW_DOWN (limit
 * reached: the client backs off and retries), -S3E_ENTITY_TOO_LARGE (more than the limit).
 * drain_unadmit() returns the reservation when the write ended either way. */
int drain_admit(struct drain *dr, uint64_t bytes);
void drain_unadmit(struct drain *dr, uint64_t bytes);
/* drain_admit() of a body of unknown length, as its bytes arrive: grows the reservation
 * *@held to @total. 0, -S3E_ENTITY_TOO_LARGE (@total is over the limit itself) or
 * -S3E_SLOW_DOWN (no room now); *@held unchanged on failure. Release with
 * drain_unadmit(*@held). */
int drain_grow(struct drain *dr, uint64_t *held, uint64_t total);
/* Counts @bytes held outside the index (staged multipart parts) against the dirty limit and
 * as staged bytes of the capacity (cache_stage_force()), unconditionally; drain_release()
 * releases them. */
void drain_hold(struct drain *dr, uint64_t bytes);
/* Releases what drain_hold() counted (@bytes at most of either). */
void drain_release(struct drain *dr, uint64_t bytes);
/* Excludes (@bucket, @key) from draining while a gateway write of it runs (DELETE, a
 * write-through PUT over a dirty key): waits for an upload of it in flight to end. Blocking
 * (workers only); pair with drain_write_end(). */
int drain_write_begin(struct drain *dr, const char *bucket, const char *key);
void drain_write_end(struct drain *dr, const char *bucket, const char *key);

struct drain_flush_result {
    uint64_t remaining_objects, remaining_bytes; /* of those written before the call */
    uint64_t uploaded_objects, uploaded_bytes;   /* uploads that ended during the call */
    double seconds;
};
/* A flush's answer: @rc 0 once everything written before it (in its bucket, under its
 * prefix) is on the backend, -ETIMEDOUT after its timeout, -S3E_SERVICE_UNAVAILABLE when the
 * server stops. Called once, from the engine's flush thread, with no lock held. */
typedef void (*drain_flush_cb)(void *arg, int rc, const struct drain_flush_result *res);
/* Starts a flush of what was written before the call (in @bucket, under @prefix; NULL/"" =
 * all) and returns at once: @cb(@arg, ...) answers it later, never from within this call.
 * @timeout_ms < 0: no limit. Objects in backoff are retried at once. A waiting flush holds no
 * thread (many ranks of a job may flush at its end). 0, or an error and @cb is never called. */
int drain_flush_start(struct drain *dr, const char *bucket, const char *prefix, int64_t timeout_ms,
                      drain_flush_cb cb, void *arg);
/* drain_flush_start() waited for on the calling thread: returns its @rc, fills @out. */
int drain_flush(struct drain *dr, const char *bucket, const char *prefix, int64_t timeout_ms,
                struct drain_flush_result *out);
/* The server is stopping: every flush waiting, and every later one, is answered
 * -S3E_SERVICE_UNAVAILABLE at once (what was written stays journaled and drains after the
 * restart), so no request is left suspended when the HTTP daemon stops. NULL: nothing. */
void drain_flush_abort(struct drain *dr);
/* Not-yet-drained keys of @bucket under @prefix, sorted by key (size, ETag, Last-Modified
 * filled): for listings to merge. The caller frees every key, then the array. */
int drain_dirty_keys(struct drain *dr, const char *bucket, const char *prefix,
                     struct be_list_entry **out, size_t *n);

struct drain_stats {
    uint64_t dirty_objects, dirty_bytes, staged_bytes, limit_bytes, inflight;
    uint64_t uploaded_objects, uploaded_bytes, errors, rate_bps;
    uint64_t cancelled;
    double oldest_dirty_age_s;
};
void drain_get_stats(struct drain *dr, struct drain_stats *out);

#endif
