/*
 * stats.h: request accounting for /_/stats (JSON) and /_/metrics (Prometheus text 0.0.4).
 * Counters per client (access key + remote address), per bucket, and global latency
 * histograms by operation and cache outcome. Does not own the cache or backend counters:
 * the caller passes snapshots of those to the writers.
 *
 * Lifecycle of one request's accounting:
 *   stats_client_ref()                       once, after authentication (mutex'd table lookup)
 *   stats_client_sent/received/filled()      per chunk: one relaxed atomic add, no lock
 *   stats_request_done()                     once at completion: op, status, outcome, latency
 *   stats_client_release()                   once, in the completion callback (last use of c)
 *
 * Bounded memory: at most stats_set_limits() max_clients client rows (default 1024); a new
 * client beyond the cap is accounted to the row ("other", "-"). A client with no request in
 * flight and none finished for idle_s seconds (default 300) is folded into that row at the
 * next stats_tick() and freed. A client referenced by an in-flight request is never freed.
 * Buckets: a row is made only for a bucket known to exist (stats_bucket_found(): the server
 * calls it when an authenticated request on the bucket succeeded) and folded into "_other" when
 * it is deleted (stats_bucket_forget()), so names made up by clients never take rows; at most
 * STATS_MAX_BUCKETS rows, requests for any other name are charged to "_other".
 *
 * Rates: stats_tick() (1 Hz) samples every client's byte totals into a ring; a rate is
 * (total at the last tick - total STATS_RATE_WINDOW_S ticks before) / elapsed seconds, or
 * over the client's lifetime (at least 1 s) when it is younger than the window.
 *
 * Threading: every function is thread-safe. The hot-path functions never lock.
 */
#ifndef S3C_STATS_H
#define S3C_STATS_H

#include <stdint.h>
#include "cache/cache.h"   /* struct cache_stats, enum cache_outcome */
#include "backends/backend.h" /* struct backend_counters */
#include "lib/buf.h"

#define STATS_MAX_CLIENTS_DEFAULT 1024
#define STATS_IDLE_S_DEFAULT 300
#define STATS_MAX_BUCKETS 256
#define STATS_RATE_WINDOW_S 10
#define STATS_OTHER "other"        /* client and bucket name of the overflow row */
#define STATS_OTHER_ADDR "-"
#define STATS_OTHER_BUCKET "_other" /* overflow bucket row: no real bucket starts with '_' */
#define STATS_ANONYMOUS "anonymous" /* client name when access_key is NULL or "" */
#define STATS_PEER_ADDR "(peer)"   /* addr of the row of another gateway's requests (cluster) */
#define STATS_KEY_MAX 128          /* longer access keys / bucket names are truncated */
#define STATS_ADDR_MAX 64

enum stats_op {
    STATS_OP_GET,
    STATS_OP_HEAD,
    STATS_OP_PUT,
    STATS_OP_COPY,
    STATS_OP_DELETE,
    STATS_OP_LIST,
    STATS_OP_MULTIPART,
    STATS_OP_BUCKET,
    STATS_OP_ADMIN,
    STATS_OP_OTHER,
    STATS_OP__N
};
/* "get" "head" "put" "copy" "delete" "list" "multipart" "bucket" "admin" "other";
 * "other" for anything out of range. */
const char *stats_op_name(enum stats_op op);

struct stats;
struct stats_client;
struct fair_stats; /* acct/fair.h: the --max-bandwidth fair share */
struct stall_acc;  /* acct/stall.h */
struct jobs;       /* acct/jobs.h */

/* Creates the accounting state and records the start time (uptime). 0 or -ENOMEM. */
int stats_new(struct stats **out);
/* Stops the ticker thread if started, frees everything. Every client reference must have been
 * released. Accepts NULL. */
void stats_free(struct stats *s);
/* Starts a thread calling stats_tick() once a second until stats_free(). 0 or -errno.
 * Calling it twice is a no-op. */
int stats_start_ticker(struct stats *s);
/* One sample: records every client's byte totals for the rates, then ages out idle clients.
 * Cheap (one pass over at most max_clients rows under the table lock). */
void stats_tick(struct stats *s);

/* Tuning, before or while serving: @max_clients 0 keeps the current cap; @idle_s 0 keeps the
 * current idle time. Lowering the cap does not drop existing rows; they age out normally. */
void stats_set_limits(struct stats *s, unsigned max_clients, unsigned idle_s);
/* Replaces the monotonic clock (ns) used for uptime, idle times and rate windows (tests).
 * @now NULL restores s3c_mono_ns(). Set it before any traffic. */
void stats_set_clock(struct stats *s, uint64_t (*now)(void *cls), void *cls);

/* Once per request, after authentication: a new reference to the row of (@access_key, @addr)
 * (@access_key NULL or "" means "anonymous"; @addr NULL means "-"). Never NULL: falls back to
 * the "other" row when the table is full or memory is short. Release with
 * stats_client_release() once the request is finished (no more bytes will be charged). */
struct stats_client *stats_client_ref(struct stats *s, const char *access_key, const char *addr);
/* Drops a reference from stats_client_ref(). @c may be NULL. */
void stats_client_release(struct stats *s, struct stats_client *c);

/* Hot path, per chunk: one relaxed atomic add on the client's own row. @c may be NULL.
 * sent: body bytes actually handed to the client's socket (a client that aborts is charged
 * what went out); received: request body bytes read; filled: bytes the backend sent for this
 * client's misses and uncached reads (req.c charges them at completion: what such a response
 * sent, the backend sent for it; fetches it joined are not charged again). */
void stats_client_sent(struct stats_client *c, uint64_t n);
void stats_client_received(struct stats_client *c, uint64_t n);
void stats_client_filled(struct stats_client *c, uint64_t n);

/* The client's GET time row (acct/stall.h), for stall_req_begin(). Valid while @c is held. */
struct stall_acc *stats_client_stall(struct stats_client *c);
/* The jobs ticked with the clients (1 Hz) and written after them in stats_json() ("jobs": [])
 * and stats_prometheus() (s3cached_job_*). Borrowed; set before serving, outlives @s's use. */
void stats_set_jobs(struct stats *s, struct jobs *j);
/* The cache directory whose block device stats_json()'s "process" object reports as the cache
 * disk (acct/procinfo.h). Copied. */
void stats_set_disk_path(struct stats *s, const char *path);

/* @bucket exists (a request on it succeeded, or it was just created): it gets a row of its
 * own if it has none and the table has room (STATS_MAX_BUCKETS). NULL or "" is ignored. */
void stats_bucket_found(struct stats *s, const char *bucket);
/* @bucket was deleted: its row, if any, is folded into "_other" and freed. */
void stats_bucket_forget(struct stats *s, const char *bucket);

/* Once per request at completion. Counts the request for @c (may be NULL) by @op, its error
 * class (@http_status 4xx / 5xx), its cache outcome @how (an enum cache_outcome, or -1 when not
 * a cached read), and the latency histogram of (@op, @how). @bucket (NULL or "" for requests
 * without one: ListBuckets, admin) is charged the request and @bytes_out / @bytes_in: to its
 * row when stats_bucket_found() made one, else to "_other" (never a new row: see above); the
 * client's bytes are NOT added again here (they came per chunk). */
void stats_request_done(struct stats *s, struct stats_client *c, const char *bucket,
                        enum stats_op op, int http_status, int how, uint64_t latency_ns,
                        uint64_t bytes_out, uint64_t bytes_in);

/* The requests parked now (their connection suspended while they wait), @over of them for
 * longer than @bound_ms, and @over_total parkings past the bound since the start: the
 * "parked" object of stats_json() and s3cached_requests_parked* of stats_prometheus(). */
void stats_set_parked(struct stats *s, uint64_t parked, uint64_t over, uint64_t over_total,
                      uint64_t bound_ms);

/* Appends the /_/stats JSON document (INTERFACE.md) to @out. @cs, @bc and @fs may be NULL
 * (zeros; @fs NULL: fair sharing off). Extra fields: requests, requests_by_op, errors_4xx,
 * errors_5xx at the top level; a "fair" object (capacity_bps, level_bps, rate_bps,
 * active_clients, responses, paced_responses, saturated); per client
 * coalesced, errors_4xx, errors_5xx, backend_fill_bytes, in_flight, requests_by_op; and
 * buckets[] with bucket, requests, bytes_out, bytes_in, hits, misses, coalesced, errors_4xx,
 * errors_5xx, requests_by_op. Clients sorted by (client, addr), "other" last. Last, "policy":
 * the eviction policy of every prefix @pr follows (may be NULL: none).
 * 0, -EMSGSIZE (@out's cap) or -ENOMEM; @out may hold a partial document on failure. */
int stats_json(struct stats *s, const struct cache_stats *cs, const struct backend_counters *bc,
               const struct fair_stats *fs, const struct cache_policy_report *pr,
               struct buf *out);
/* Appends the same figures in Prometheus text exposition format 0.0.4 (Content-Type
 * "text/plain; version=0.0.4; charset=utf-8"). Same returns as stats_json(). */
int stats_prometheus(struct stats *s, const struct cache_stats *cs,
                     const struct backend_counters *bc, const struct fair_stats *fs,
                     const struct cache_policy_report *pr, struct buf *out);
/* The "policy" object of /_/stats (and of GET /_/policy): auto, keep_idle_s, available_bytes,
 * prefixes[] (bucket, prefix, policy, source, keep_active, idle_s, passes, ideal_hit_ratio,
 * last_pass, current_pass, ...). @pr may be NULL (no prefixes). Same returns as stats_json(). */
int stats_policy_json(struct buf *out, const struct cache_policy_report *pr);
#define STATS_PROMETHEUS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#endif
