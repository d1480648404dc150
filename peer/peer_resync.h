/*
 * peer_resync.h: the gateways that missed a write notice (peer_resync.c). A gateway that
 * could not be told of a write (down, hung, slow past --peer-timeout, unreachable) may hold
 * the old bytes; it is owed a resync: about every second, until it answers, it is asked to
 * revalidate everything it cached before that moment (POST /_/resync, which does what a
 * gateway does at its own start: cache_set_valid_after(now)). Until it confirms, the write
 * path does not wait for it (the resync covers those changes too), so one hung gateway costs
 * a write at most one --peer-timeout, once.
 * The names owed one are kept in a file of the cache directory across restarts.
 *   peer_resync_new -> [owe, owed, stats]* -> peer_resync_stop -> (peer_http_free) -> _free
 */
#ifndef S3C_PEER_RESYNC_H
#define S3C_PEER_RESYNC_H

#include <stdint.h>

struct peer;
struct peer_resync;

/* Starts the resync thread of @p (borrowed: it outlives it). @path (NULL: none) keeps the
 * names owed a resync across restarts: read now (they are owed one again), rewritten when
 * the set changes. 0 or -errno. */
int peer_resync_new(struct peer *p, const char *path, struct peer_resync **out);
/* Stops the thread: no resync is started any more (those in flight end with the client). */
void peer_resync_stop(struct peer_resync *r);
/* Frees it, after the peer client is gone (no callback can run). Accepts NULL. */
void peer_resync_free(struct peer_resync *r);

/* @name (a ring name) missed a notice. Returns 1 when it was not owed a resync before (the
 * caller logs it), else 0. Thread-safe, non-blocking. */
int peer_resync_owe(struct peer_resync *r, const char *name);
/* 1 when @name is owed a resync (the notice not sent to it counts as missed too), else 0. */
int peer_resync_owed(struct peer_resync *r, const char *name);
/* The same, without counting anything (a read's question). */
int peer_resync_behind(struct peer_resync *r, const char *name);

struct peer_resync_stats {
    uint64_t behind;  /* gateways owed a resync now */
    uint64_t resyncs; /* resyncs confirmed since start */
};
void peer_resync_stats(struct peer_resync *r, struct peer_resync_stats *out);

#endif
