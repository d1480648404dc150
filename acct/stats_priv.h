/*
 * stats_priv.h: what the accounting (stats.c) shares with its writers (stats_out.c,
 * stats_policy.c): the
 * client and bucket rows, struct stats, the latency buckets and name tables, and snapshots of
 * the rows. Only acct/stats*.c include it.
 */
#ifndef S3C_STATS_PRIV_H
#define S3C_STATS_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "stall.h"
#include "stats.h"

#define STATS_MAGIC 0x57a75000
#define STATS_CLIENT_MAGIC 0x57a7c11e
#define STATS_RING (STATS_RATE_WINDOW_S + 1) /* samples at t-10 s .. t */
#define STATS_CLIENT_SLOTS 4096u             /* hash heads; chains grow past the cap */
#define STATS_BUCKET_SLOTS 512u
#define STATS_HOW_NONE 5                     /* not a cached read (how == -1) */
#define STATS_N_HOW 6
#define STATS_N_LE 16                        /* 15 finite bounds + +Inf */


/* stats_policy.c: the s3cached_prefix_* families of /_/metrics (stats_policy_json() in
 * stats.h writes the JSON). @pr may be NULL (no prefixes). */
int stats_policy_prom(struct buf *out, const struct cache_policy_report *pr);

extern const char *const stats_op_names[STATS_OP__N];
extern const char *const stats_how_names[STATS_N_HOW];
/* Upper bounds of the latency buckets: ns, and the le label as Prometheus shows it. */
extern const uint64_t stats_le_ns[STATS_N_LE - 1];
extern const char *const stats_le_names[STATS_N_LE];

struct stats_client {
    unsigned magic;
    /* Hot: charged per chunk / per request by request threads, relaxed, no lock. Own cache
     * line so that two busy clients do not share one. */
    _Alignas(64) _Atomic uint64_t bytes_out;
    _Atomic uint64_t bytes_in;
    _Atomic uint64_t fill_bytes;
    _Atomic uint64_t requests;
    _Atomic uint64_t hits, misses, coalesced, err_4xx, err_5xx;
    _Atomic uint64_t by_op[STATS_OP__N];
    /* Room here for per-client fair sharing (a token bucket) later. */

    /* Cold: guarded by stats->lock. */
    _Alignas(64) unsigned refs;
    int is_other;
    int is_peer;           /* another gateway's requests (addr STATS_PEER_ADDR): never folded */
    uint32_t hash;
    uint64_t last_seen_ns; /* last ref or release */
    uint64_t born_ns;
    uint64_t first_seq;    /* first tick that samples this row */
    uint64_t ring_out[STATS_RING];
    uint64_t ring_in[STATS_RING];
    struct stats_client *next;
    char key[STATS_KEY_MAX];
    char addr[STATS_ADDR_MAX];
    /* GETs' time: transfer, stall by cause (acct/stall.h); own mutex, ring under lock */
    struct stall_acc stall;
};

/* Guarded by stats->bucket_lock (touched once per request). */
struct stats_bucket {
    uint64_t requests, bytes_out, bytes_in, hits, misses, coalesced, err_4xx, err_5xx;
    uint64_t by_op[STATS_OP__N];
    uint32_t hash;
    struct stats_bucket *next;
    char name[STATS_KEY_MAX];
};

struct stats {
    unsigned magic;
    uint64_t (*now)(void *cls);
    void *now_cls;
    uint64_t start_ns;

    pthread_mutex_t lock; /* client table, refs, rings, tick state, limits */
    struct stats_client *slots[STATS_CLIENT_SLOTS];
    struct stats_client *other;
    unsigned n_clients; /* in the table; "other" not counted */
    unsigned max_clients;
    uint64_t idle_ns;
    uint64_t tick_seq; /* ticks done */
    uint64_t tick_ns[STATS_RING];

    pthread_mutex_t bucket_lock;
    struct stats_bucket *bslots[STATS_BUCKET_SLOTS];
    struct stats_bucket bother;
    unsigned n_buckets;

    _Atomic uint64_t requests_by_op[STATS_OP__N];
    _Atomic uint64_t err_4xx, err_5xx;
    /* requests parked (stats_set_parked: http/park.c's watch, once a second) */
    _Atomic uint64_t parked, parked_over, parked_over_total, park_bound_ms;
    _Atomic uint64_t hist[STATS_OP__N][STATS_N_HOW][STATS_N_LE]; /* not cumulative */
    _Atomic uint64_t hist_sum_ns[STATS_OP__N][STATS_N_HOW];

    struct jobs *jobs;    /* ticked with the clients, written after them (stats_set_jobs) */
    char *disk_path;      /* the cache directory, for "process" (stats_set_disk_path) */

    pthread_mutex_t tk_lock;
    pthread_cond_t tk_cond;
    pthread_t ticker;
    int ticker_running;
    int tk_stop;
};

#define RELAXED memory_order_relaxed
#define LOAD(x) atomic_load_explicit(&(x), RELAXED)
#define ADD(x, n) atomic_fetch_add_explicit(&(x), (n), RELAXED)

/* --- snapshots for the writers --------------------------------------------------------- */

/* --- snapshots for the writers --------------------------------------------------------- */

struct stats_row {
    char key[STATS_KEY_MAX];
    char addr[STATS_ADDR_MAX];
    int is_other;
    int is_peer;
    unsigned in_flight;
    double rate_out, rate_in;
    uint64_t requests, bytes_out, bytes_in, fill_bytes, hits, misses, coalesced, err_4xx,
        err_5xx;
    uint64_t by_op[STATS_OP__N];
    struct stall_view stall; /* clients only */
};

int stats_snapshot_clients(struct stats *s, struct stats_row **rows, size_t *n);
int stats_snapshot_buckets(struct stats *s, struct stats_row **rows, size_t *n);

/* A Prometheus label value (backslash, double quote, line feed escaped): for jobs_out.c. */
int stats_prom_label(struct buf *out, const char *v);

#endif
