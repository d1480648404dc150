/*
 * stats.c: per-client, per-bucket and global request accounting (include/stats.h), and the
 * /_/stats JSON and /_/metrics Prometheus writers. Does not own the cache's, backend's or fair
 * share's counters; it formats the snapshots it is given.
 *
 * A client row lives in a mutex'd hash table (looked up once per request) and is charged
 * per chunk with relaxed atomics. Row lifecycle:
 *   stats_client_ref() creates (or finds) -> refs > 0 while requests are in flight
 *   -> idle (refs == 0) for idle_s -> stats_tick() folds its totals and rate samples into
 *   the permanent "other" row and frees it.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fair.h"
#include "lib/s3c.h"
#include "stats.h"

#define STATS_MAGIC 0x57a75000
#define STATS_CLIENT_MAGIC 0x57a7c11e
#define STATS_RING (STATS_RATE_WINDOW_S + 1) /* samples at t-10 s .. t */
#define STATS_CLIENT_SLOTS 4096u             /* hash heads; chains grow past the cap */
#define STATS_BUCKET_SLOTS 512u
#define STATS_HOW_NONE 4                     /* not a cached read (how == -1) */
#define STATS_N_HOW 5
#define STATS_N_LE 16                        /* 15 finite bounds + +Inf */

static const char *const stats_op_names[STATS_OP__N] = {
    "get", "head", "put", "copy", "delete", "list", "multipart", "bucket", "admin", "other",
};
static const char *const stats_how_names[STATS_N_HOW] = {
    "hit", "miss", "coalesced", "bypass", "none",
};
/* Upper bounds of the latency buckets: ns, and the le label as Prometheus shows it. */
static const uint64_t stats_le_ns[STATS_N_LE - 1] = {
    1000000ull,    2500000ull,    5000000ull,    10000000ull,   25000000ull,
    50000000ull,   100000000ull,  250000000ull,  500000000ull,  1000000000ull,
    2500000000ull, 5000000000ull, 10000000000ull, 30000000000ull, 60000000000ull,
};
static const char *const stats_le_names[STATS_N_LE] = {
    "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25",
    "0.5",   "1",      "2.5",   "5",    "10",    "30",   "60",  "+Inf",
};

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
    uint32_t hash;
    uint64_t last_seen_ns; /* last ref or release */
    uint64_t born_ns;
    uint64_t first_seq;    /* first tick that samples this row */
    uint64_t ring_out[STATS_RING];
    uint64_t ring_in[STATS_RING];
    struct stats_client *next;
    char key[STATS_KEY_MAX];
    char addr[STATS_ADDR_MAX];
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
    _Atomic uint64_t hist[STATS_OP__N][STATS_N_HOW][STATS_N_LE]; /* not cumulative */
    _Atomic uint64_t hist_sum_ns[STATS_OP__N][STATS_N_HOW];

    pthread_mutex_t tk_lock;
    pthread_cond_t tk_cond;
    pthread_t ticker;
    int ticker_running;
    int tk_stop;
};

#define RELAXED memory_order_relaxed
#define LOAD(x) atomic_load_explicit(&(x), RELAXED)
#define ADD(x, n) atomic_fetch_add_explicit(&(x), (n), RELAXED)

const char *stats_op_name(enum stats_op op)
{
    if ((unsigned)op >= STATS_OP__N)
        return "other";
    return stats_op_names[op];
}

static uint64_t stats_mono(void *cls)
{
    UNUSED(cls);
    return s3c_mono_ns();
}

static uint32_t stats_hash(const char *a, const char *b)
{
    uint32_t h = 2166136261u;
    for (; *a; a++)
        h = (h ^ (unsigned char)*a) * 16777619u;
    h = (h ^ 0xffu) * 16777619u;
    for (; b && *b; b++)
        h = (h ^ (unsigned char)*b) * 16777619u;
    return h;
}

static void copy_trunc(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static struct stats_client *client_new(const char *key, const char *addr, uint32_t hash,
                                       uint64_t now, uint64_t seq)
{
    struct stats_client *c = aligned_alloc(64, sizeof(*c));
    if (!c)
        return NULL;
    memset(c, 0, sizeof(*c));
    c->magic = STATS_CLIENT_MAGIC;
    c->hash = hash;
    c->born_ns = now;
    c->last_seen_ns = now;
    c->first_seq = seq;
    copy_trunc(c->key, sizeof(c->key), key);
    copy_trunc(c->addr, sizeof(c->addr), addr);
    return c;
}

int stats_new(struct stats **out)
{
    *out = NULL;
    struct stats *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->magic = STATS_MAGIC;
    s->now = stats_mono;
    s->start_ns = s->now(NULL);
    s->max_clients = STATS_MAX_CLIENTS_DEFAULT;
    s->idle_ns = (uint64_t)STATS_IDLE_S_DEFAULT * 1000000000ull;
    s->other = client_new(STATS_OTHER, STATS_OTHER_ADDR, 0, s->start_ns, 0);
    if (!s->other) {
        free(s);
        return -ENOMEM;
    }
    s->other->is_other = 1;
    copy_trunc(s->bother.name, sizeof(s->bother.name), STATS_OTHER_BUCKET);
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->bucket_lock, NULL);
    pthread_mutex_init(&s->tk_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->tk_cond, &ca);
    pthread_condattr_destroy(&ca);
    *out = s;
    return 0;
}

void stats_free(struct stats *s)
{
    if (!s)
        return;
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    pthread_mutex_lock(&s->tk_lock);
    int running = s->ticker_running;
    s->tk_stop = 1;
    pthread_cond_broadcast(&s->tk_cond);
    pthread_mutex_unlock(&s->tk_lock);
    if (running)
        pthread_join(s->ticker, NULL);
    for (unsigned i = 0; i < STATS_CLIENT_SLOTS; i++) {
        struct stats_client *c = s->slots[i], *next;
        for (; c; c = next) {
            next = c->next;
            c->magic = 0;
            free(c);
        }
    }
    for (unsigned i = 0; i < STATS_BUCKET_SLOTS; i++) {
        struct stats_bucket *b = s->bslots[i], *next;
        for (; b; b = next) {
            next = b->next;
            free(b);
        }
    }
    s->other->magic = 0;
    free(s->other);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->bucket_lock);
    pthread_mutex_destroy(&s->tk_lock);
    pthread_cond_destroy(&s->tk_cond);
    s->magic = 0;
    free(s);
}

void stats_set_limits(struct stats *s, unsigned max_clients, unsigned idle_s)
{
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    pthread_mutex_lock(&s->lock);
    if (max_clients)
        s->max_clients = max_clients;
    if (idle_s)
        s->idle_ns = (uint64_t)idle_s * 1000000000ull;
    pthread_mutex_unlock(&s->lock);
}

void stats_set_clock(struct stats *s, uint64_t (*now)(void *cls), void *cls)
{
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    pthread_mutex_lock(&s->lock);
    s->now = now ? now : stats_mono;
    s->now_cls = now ? cls : NULL;
    s->start_ns = s->now(s->now_cls);
    s->other->born_ns = s->start_ns;
    s->other->last_seen_ns = s->start_ns;
    pthread_mutex_unlock(&s->lock);
}

/* --- ticks and rates ------------------------------------------------------------------- */

/* The byte totals of @c at tick @seq (which must still be in the ring); 0 before it existed. */
static void client_sample(const struct stats_client *c, uint64_t seq, uint64_t *out,
                          uint64_t *in)
{
    if (seq < c->first_seq) {
        *out = *in = 0;
        return;
    }
    *out = c->ring_out[seq % STATS_RING];
    *in = c->ring_in[seq % STATS_RING];
}

/* Moves @c's totals and rate samples into "other". Caller holds s->lock, @c is unlinked and
 * idle; the current tick (@seq) has sampled both rows already. */
static void client_fold(struct stats *s, struct stats_client *c, uint64_t seq)
{
    struct stats_client *o = s->other;
    ADD(o->bytes_out, LOAD(c->bytes_out));
    ADD(o->bytes_in, LOAD(c->bytes_in));
    ADD(o->fill_bytes, LOAD(c->fill_bytes));
    ADD(o->requests, LOAD(c->requests));
    ADD(o->hits, LOAD(c->hits));
    ADD(o->misses, LOAD(c->misses));
    ADD(o->coalesced, LOAD(c->coalesced));
    ADD(o->err_4xx, LOAD(c->err_4xx));
    ADD(o->err_5xx, LOAD(c->err_5xx));
    for (unsigned i = 0; i < STATS_OP__N; i++)
        ADD(o->by_op[i], LOAD(c->by_op[i]));
    /* Keep "other"'s rate continuous: its past samples gain what @c had at those ticks. */
    uint64_t lo = seq >= STATS_RING - 1 ? seq - (STATS_RING - 1) : 0;
    for (uint64_t q = lo; q <= seq; q++) {
        uint64_t bo, bi;
        client_sample(c, q, &bo, &bi);
        o->ring_out[q % STATS_RING] += bo;
        o->ring_in[q % STATS_RING] += bi;
    }
}

void stats_tick(struct stats *s)
{
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    pthread_mutex_lock(&s->lock);
    uint64_t now = s->now(s->now_cls);
    uint64_t seq = s->tick_seq;
    unsigned idx = (unsigned)(seq % STATS_RING);
    s->tick_ns[idx] = now;
    s->other->ring_out[idx] = LOAD(s->other->bytes_out);
    s->other->ring_in[idx] = LOAD(s->other->bytes_in);
    for (unsigned i = 0; i < STATS_CLIENT_SLOTS; i++) {
        struct stats_client **pp = &s->slots[i];
        while (*pp) {
            struct stats_client *c = *pp;
            c->ring_out[idx] = LOAD(c->bytes_out);
            c->ring_in[idx] = LOAD(c->bytes_in);
            if (c->refs == 0 && now - c->last_seen_ns > s->idle_ns) {
                *pp = c->next;
                s->n_clients--;
                client_fold(s, c, seq);
                c->magic = 0;
                free(c);
                continue;
            }
            pp = &c->next;
        }
    }
    s->tick_seq = seq + 1;
    pthread_mutex_unlock(&s->lock);
}

/* Bytes/s over the last STATS_RATE_WINDOW_S ticks (or the row's life, at least 1 s).
 * Caller holds s->lock. */
static void client_rates(const struct stats *s, const struct stats_client *c, double *r_out,
                         double *r_in)
{
    *r_out = *r_in = 0;
    if (s->tick_seq == 0 || s->tick_seq - 1 < c->first_seq)
        return;
    uint64_t last = s->tick_seq - 1;
    uint64_t base_out = 0, base_in = 0, base_ns = c->born_ns;
    if (last >= STATS_RATE_WINDOW_S && last - STATS_RATE_WINDOW_S >= c->first_seq) {
        uint64_t b = last - STATS_RATE_WINDOW_S;
        client_sample(c, b, &base_out, &base_in);
        base_ns = s->tick_ns[b % STATS_RING];
    }
    uint64_t end_out, end_in, end_ns = s->tick_ns[last % STATS_RING];
    client_sample(c, last, &end_out, &end_in);
    uint64_t win_ns = end_ns > base_ns ? end_ns - base_ns : 0;
    if (win_ns < 1000000000ull)
        win_ns = 1000000000ull;
    double win_s = (double)win_ns / 1e9;
    *r_out = end_out > base_out ? (double)(end_out - base_out) / win_s : 0;
    *r_in = end_in > base_in ? (double)(end_in - base_in) / win_s : 0;
}

static void *stats_ticker_main(void *arg)
{
    struct stats *s = arg;
    struct timespec next;
    sigset_t all;
    sigfillset(&all); /* SIGTERM and friends are for the server's threads, not this one */
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    clock_gettime(CLOCK_MONOTONIC, &next);
    pthread_mutex_lock(&s->tk_lock);
    while (!s->tk_stop) {
        next.tv_sec += 1;
        while (!s->tk_stop && pthread_cond_timedwait(&s->tk_cond, &s->tk_lock, &next) == 0)
            ;
        if (s->tk_stop)
            break;
        pthread_mutex_unlock(&s->tk_lock);
        stats_tick(s);
        pthread_mutex_lock(&s->tk_lock);
    }
    pthread_mutex_unlock(&s->tk_lock);
    return NULL;
}

int stats_start_ticker(struct stats *s)
{
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    int rc = 0;
    pthread_mutex_lock(&s->tk_lock);
    if (!s->ticker_running && !s->tk_stop) {
        rc = -pthread_create(&s->ticker, NULL, stats_ticker_main, s);
        if (rc == 0)
            s->ticker_running = 1;
    }
    pthread_mutex_unlock(&s->tk_lock);
    return rc;
}

/* --- per request ----------------------------------------------------------------------- */

struct stats_client *stats_client_ref(struct stats *s, const char *access_key, const char *addr)
{
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    char key[STATS_KEY_MAX], a[STATS_ADDR_MAX];
    copy_trunc(key, sizeof(key), access_key && *access_key ? access_key : STATS_ANONYMOUS);
    copy_trunc(a, sizeof(a), addr && *addr ? addr : STATS_OTHER_ADDR);
    uint32_t h = stats_hash(key, a);
    /* ("other", "-") is the overflow row itself: never a second row by that name. */
    int is_other = !strcmp(key, STATS_OTHER) && !strcmp(a, STATS_OTHER_ADDR);

    pthread_mutex_lock(&s->lock);
    uint64_t now = s->now(s->now_cls);
    struct stats_client **head = &s->slots[h % STATS_CLIENT_SLOTS], *c;
    for (c = *head; c; c = c->next)
        if (c->hash == h && !strcmp(c->key, key) && !strcmp(c->addr, a))
            break;
    if (!c && !is_other && s->n_clients < s->max_clients) {
        c = client_new(key, a, h, now, s->tick_seq);
        if (c) {
            c->next = *head;
            *head = c;
            s->n_clients++;
        }
    }
    if (!c)
        c = s->other;
    c->refs++;
    c->last_seen_ns = now;
    pthread_mutex_unlock(&s->lock);
    return c;
}

void stats_client_release(struct stats *s, struct stats_client *c)
{
    if (!c)
        return;
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    CHECK_OBJ_NOTNULL(c, STATS_CLIENT_MAGIC);
    pthread_mutex_lock(&s->lock);
    S3C_ASSERT(c->refs > 0);
    c->refs--;
    c->last_seen_ns = s->now(s->now_cls);
    pthread_mutex_unlock(&s->lock);
}

void stats_client_sent(struct stats_client *c, uint64_t n)
{
    if (c)
        ADD(c->bytes_out, n);
}

void stats_client_received(struct stats_client *c, uint64_t n)
{
    if (c)
        ADD(c->bytes_in, n);
}

void stats_client_filled(struct stats_client *c, uint64_t n)
{
    if (c)
        ADD(c->fill_bytes, n);
}

static struct stats_bucket *bucket_get(struct stats *s, const char *bucket)
{
    char name[STATS_KEY_MAX];
    copy_trunc(name, sizeof(name), bucket);
    uint32_t h = stats_hash(name, NULL);
    struct stats_bucket **head = &s->bslots[h % STATS_BUCKET_SLOTS], *b;
    for (b = *head; b; b = b->next)
        if (b->hash == h && !strcmp(b->name, name))
            return b;
    if (s->n_buckets >= STATS_MAX_BUCKETS)
        return &s->bother;
    b = calloc(1, sizeof(*b));
    if (!b)
        return &s->bother;
    b->hash = h;
    memcpy(b->name, name, sizeof(name));
    b->next = *head;
    *head = b;
    s->n_buckets++;
    return b;
}

void stats_request_done(struct stats *s, struct stats_client *c, const char *bucket,
                        enum stats_op op, int http_status, int how, uint64_t latency_ns,
                        uint64_t bytes_out, uint64_t bytes_in)
{
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    unsigned o = (unsigned)op < STATS_OP__N ? (unsigned)op : STATS_OP_OTHER;
    unsigned hi = how >= 0 && how < STATS_HOW_NONE ? (unsigned)how : STATS_HOW_NONE;
    int e4 = http_status >= 400 && http_status < 500;
    int e5 = http_status >= 500;
    /* A bypass went to the backend: for clients and buckets it counts as a miss. */
    int hit = hi == CACHE_HIT, miss = hi == CACHE_MISS || hi == CACHE_BYPASS;
    int coal = hi == CACHE_COALESCED;

    if (c) {
        CHECK_OBJ_NOTNULL(c, STATS_CLIENT_MAGIC);
        ADD(c->requests, 1);
        ADD(c->by_op[o], 1);
        if (hit)
            ADD(c->hits, 1);
        if (miss)
            ADD(c->misses, 1);
        if (coal)
            ADD(c->coalesced, 1);
        if (e4)
            ADD(c->err_4xx, 1);
        if (e5)
            ADD(c->err_5xx, 1);
    }
    ADD(s->requests_by_op[o], 1);
    if (e4)
        ADD(s->err_4xx, 1);
    if (e5)
        ADD(s->err_5xx, 1);
    unsigned le = 0;
    while (le < STATS_N_LE - 1 && latency_ns > stats_le_ns[le])
        le++;
    ADD(s->hist[o][hi][le], 1);
    ADD(s->hist_sum_ns[o][hi], latency_ns);

    if (bucket && *bucket) {
        pthread_mutex_lock(&s->bucket_lock);
        struct stats_bucket *b = bucket_get(s, bucket);
        b->requests++;
        b->by_op[o]++;
        b->bytes_out += bytes_out;
        b->bytes_in += bytes_in;
        b->hits += (uint64_t)hit;
        b->misses += (uint64_t)miss;
        b->coalesced += (uint64_t)coal;
        b->err_4xx += (uint64_t)e4;
        b->err_5xx += (uint64_t)e5;
        pthread_mutex_unlock(&s->bucket_lock);
    }
}

/* --- snapshots for the writers --------------------------------------------------------- */

struct stats_row {
    char key[STATS_KEY_MAX];
    char addr[STATS_ADDR_MAX];
    int is_other;
    unsigned in_flight;
    double rate_out, rate_in;
    uint64_t requests, bytes_out, bytes_in, fill_bytes, hits, misses, coalesced, err_4xx,
        err_5xx;
    uint64_t by_op[STATS_OP__N];
};

static void row_from_client(const struct stats *s, const struct stats_client *c,
                            struct stats_row *r)
{
    memcpy(r->key, c->key, sizeof(r->key));
    memcpy(r->addr, c->addr, sizeof(r->addr));
    r->is_other = c->is_other;
    r->in_flight = c->refs;
    client_rates(s, c, &r->rate_out, &r->rate_in);
    r->requests = LOAD(c->requests);
    r->bytes_out = LOAD(c->bytes_out);
    r->bytes_in = LOAD(c->bytes_in);
    r->fill_bytes = LOAD(c->fill_bytes);
    r->hits = LOAD(c->hits);
    r->misses = LOAD(c->misses);
    r->coalesced = LOAD(c->coalesced);
    r->err_4xx = LOAD(c->err_4xx);
    r->err_5xx = LOAD(c->err_5xx);
    for (unsigned i = 0; i < STATS_OP__N; i++)
        r->by_op[i] = LOAD(c->by_op[i]);
}

static void row_from_bucket(const struct stats_bucket *b, int is_other, struct stats_row *r)
{
    memset(r, 0, sizeof(*r));
    memcpy(r->key, b->name, sizeof(r->key));
    r->is_other = is_other;
    r->requests = b->requests;
    r->bytes_out = b->bytes_out;
    r->bytes_in = b->bytes_in;
    r->hits = b->hits;
    r->misses = b->misses;
    r->coalesced = b->coalesced;
    r->err_4xx = b->err_4xx;
    r->err_5xx = b->err_5xx;
    memcpy(r->by_op, b->by_op, sizeof(r->by_op));
}

static int row_cmp(const void *a, const void *b)
{
    const struct stats_row *x = a, *y = b;
    if (x->is_other != y->is_other)
        return x->is_other - y->is_other;
    int d = strcmp(x->key, y->key);
    return d ? d : strcmp(x->addr, y->addr);
}

static int row_empty(const struct stats_row *r)
{
    return !r->requests && !r->bytes_out && !r->bytes_in && !r->fill_bytes && !r->in_flight;
}

/* Client rows, sorted, "other" last and only when it has something. Caller frees *@rows. */
static int snapshot_clients(struct stats *s, struct stats_row **rows, size_t *n)
{
    pthread_mutex_lock(&s->lock);
    size_t cap = (size_t)s->n_clients + 1, k = 0;
    struct stats_row *r = malloc(cap * sizeof(*r));
    if (!r) {
        pthread_mutex_unlock(&s->lock);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < STATS_CLIENT_SLOTS; i++)
        for (const struct stats_client *c = s->slots[i]; c; c = c->next)
            row_from_client(s, c, &r[k++]);
    row_from_client(s, s->other, &r[k]);
    if (!row_empty(&r[k]))
        k++;
    pthread_mutex_unlock(&s->lock);
    qsort(r, k, sizeof(*r), row_cmp);
    *rows = r;
    *n = k;
    return 0;
}

static int snapshot_buckets(struct stats *s, struct stats_row **rows, size_t *n)
{
    pthread_mutex_lock(&s->bucket_lock);
    size_t cap = (size_t)s->n_buckets + 1, k = 0;
    struct stats_row *r = malloc(cap * sizeof(*r));
    if (!r) {
        pthread_mutex_unlock(&s->bucket_lock);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < STATS_BUCKET_SLOTS; i++)
        for (const struct stats_bucket *b = s->bslots[i]; b; b = b->next)
            row_from_bucket(b, 0, &r[k++]);
    row_from_bucket(&s->bother, 1, &r[k]);
    if (!row_empty(&r[k]))
        k++;
    pthread_mutex_unlock(&s->bucket_lock);
    qsort(r, k, sizeof(*r), row_cmp);
    *rows = r;
    *n = k;
    return 0;
}

static double stats_uptime_s(struct stats *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t now = s->now(s->now_cls);
    uint64_t start = s->start_ns;
    pthread_mutex_unlock(&s->lock);
    return now > start ? (double)(now - start) / 1e9 : 0.0;
}

/* --- JSON ------------------------------------------------------------------------------ */

static int json_by_op(struct buf *out, const uint64_t *by_op)
{
    int rc = buf_puts(out, "\"requests_by_op\": {");
    for (unsigned i = 0; i < STATS_OP__N && !rc; i++)
        rc = buf_printf(out, "%s\"%s\": %" PRIu64, i ? ", " : "", stats_op_names[i], by_op[i]);
    if (!rc)
        rc = buf_puts(out, "}");
    return rc;
}

static int json_common(struct buf *out, const struct stats_row *r)
{
    int rc = buf_printf(out,
                        "\"requests\": %" PRIu64 ", \"bytes_out\": %" PRIu64
                        ", \"bytes_in\": %" PRIu64 ", \"hits\": %" PRIu64
                        ", \"misses\": %" PRIu64 ", \"coalesced\": %" PRIu64
                        ", \"errors_4xx\": %" PRIu64 ", \"errors_5xx\": %" PRIu64 ", ",
                        r->requests, r->bytes_out, r->bytes_in, r->hits, r->misses, r->coalesced,
                        r->err_4xx, r->err_5xx);
    if (!rc)
        rc = json_by_op(out, r->by_op);
    return rc;
}

int stats_json(struct stats *s, const struct cache_stats *cs, const struct backend_counters *bc,
               const struct fair_stats *fs, struct buf *out)
{
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    static const struct cache_stats cs0;
    static const struct backend_counters bc0;
    static const struct fair_stats fs0;
    struct stats_row *cl = NULL, *bk = NULL;
    size_t ncl = 0, nbk = 0;
    uint64_t by_op[STATS_OP__N], total = 0;
    if (!cs)
        cs = &cs0;
    if (!bc)
        bc = &bc0;
    if (!fs)
        fs = &fs0;
    int rc = snapshot_clients(s, &cl, &ncl);
    if (!rc)
        rc = snapshot_buckets(s, &bk, &nbk);
    if (rc)
        goto out;
    for (unsigned i = 0; i < STATS_OP__N; i++) {
        by_op[i] = LOAD(s->requests_by_op[i]);
        total += by_op[i];
    }

    rc = buf_printf(out,
                    "{\"uptime_s\": %.3f,\n"
                    " \"cache\": {\"capacity_bytes\": %" PRIu64 ", \"used_bytes\": %" PRIu64
                    ", \"objects\": %" PRIu64 ", \"pinned_objects\": %" PRIu64
                    ", \"pinned_bytes\": %" PRIu64 ",\n"
                    "           \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
                    ", \"coalesced\": %" PRIu64 ", \"bypassed\": %" PRIu64
                    ", \"evictions\": %" PRIu64 ", \"revalidations\": %" PRIu64
                    ", \"stale_served\": %" PRIu64 ", \"source_sends\": %" PRIu64 ",\n"
                    "           \"fill_bytes\": %" PRIu64 ", \"dirty_objects\": %" PRIu64
                    ", \"dirty_bytes\": %" PRIu64 "},\n"
                    " \"drain\": {\"dirty_limit_bytes\": %" PRIu64 ", \"staged_bytes\": %" PRIu64
                    ", \"uploaded_objects\": %" PRIu64 ", \"uploaded_bytes\": %" PRIu64
                    ", \"errors\": %" PRIu64 ", \"cancelled\": %" PRIu64 ", \"inflight\": %" PRIu64
                    ", \"rate_bps\": %" PRIu64
                    ", \"oldest_dirty_age_s\": %.3f},\n"
                    " \"fair\": {\"capacity_bps\": %" PRIu64 ", \"level_bps\": %" PRIu64
                    ", \"rate_bps\": %" PRIu64 ", \"active_clients\": %" PRIu64
                    ", \"responses\": %" PRIu64 ", \"paced_responses\": %" PRIu64
                    ", \"saturated\": %s},\n"
                    " \"backend\": {\"requests\": %" PRIu64 ", \"bytes_read\": %" PRIu64
                    ", \"bytes_written\": %" PRIu64 ", \"errors\": %" PRIu64 "},\n"
                    " \"requests\": %" PRIu64 ", \"errors_4xx\": %" PRIu64
                    ", \"errors_5xx\": %" PRIu64 ", ",
                    stats_uptime_s(s), cs->capacity_bytes, cs->used_bytes, cs->objects,
                    cs->pinned_objects, cs->pinned_bytes, cs->hits, cs->misses, cs->coalesced,
                    cs->bypassed, cs->evictions, cs->revalidations, cs->stale_served,
                    cs->source_sends, cs->fill_bytes, cs->dirty_objects, cs->dirty_bytes, cs->dirty_limit_bytes,
                    cs->dirty_staged_bytes, cs->drain_uploaded_objects, cs->drain_uploaded_bytes,
                    cs->drain_errors, cs->drain_cancelled, cs->drain_inflight, cs->drain_rate_bps,
                    cs->drain_oldest_dirty_age_s, fs->capacity_bps, fs->level_bps, fs->rate_bps,
                    fs->active_clients, fs->responses, fs->paced_responses,
                    fs->saturated ? "true" : "false", bc->requests,
                    bc->bytes_read, bc->bytes_written, bc->errors, total, LOAD(s->err_4xx),
                    LOAD(s->err_5xx));
    if (!rc)
        rc = json_by_op(out, by_op);
    if (!rc)
        rc = buf_puts(out, ",\n \"clients\": [");
    for (size_t i = 0; i < ncl && !rc; i++) {
        const struct stats_row *r = &cl[i];
        rc = buf_puts(out, i ? ",\n  {\"client\": " : "\n  {\"client\": ");
        if (!rc)
            rc = buf_json_str(out, r->key);
        if (!rc)
            rc = buf_puts(out, ", \"addr\": ");
        if (!rc)
            rc = buf_json_str(out, r->addr);
        if (!rc)
            rc = buf_puts(out, ", ");
        if (!rc)
            rc = json_common(out, r);
        if (!rc)
            rc = buf_printf(out,
                            ", \"backend_fill_bytes\": %" PRIu64
                            ", \"in_flight\": %u, \"rate_out_bps\": %.0f, \"rate_in_bps\": %.0f}",
                            r->fill_bytes, r->in_flight, r->rate_out, r->rate_in);
    }
    if (!rc)
        rc = buf_puts(out, ncl ? "\n ],\n \"buckets\": [" : "],\n \"buckets\": [");
    for (size_t i = 0; i < nbk && !rc; i++) {
        rc = buf_puts(out, i ? ",\n  {\"bucket\": " : "\n  {\"bucket\": ");
        if (!rc)
            rc = buf_json_str(out, bk[i].key);
        if (!rc)
            rc = buf_puts(out, ", ");
        if (!rc)
            rc = json_common(out, &bk[i]);
        if (!rc)
            rc = buf_puts(out, "}");
    }
    if (!rc)
        rc = buf_puts(out, nbk ? "\n ]}\n" : "]}\n");
out:
    free(cl);
    free(bk);
    return rc;
}

/* --- Prometheus text format 0.0.4 ------------------------------------------------------- */

/* Label value: backslash, double quote and line feed escaped, as the format requires. */
static int prom_label(struct buf *out, const char *v)
{
    int rc = 0;
    const char *run = v;
    for (; *v && !rc; v++) {
        const char *rep = *v == '\\' ? "\\\\" : *v == '"' ? "\\\"" : *v == '\n' ? "\\n" : NULL;
        if (!rep)
            continue;
        rc = buf_append(out, run, (size_t)(v - run));
        if (!rc)
            rc = buf_puts(out, rep);
        run = v + 1;
    }
    if (!rc)
        rc = buf_append(out, run, (size_t)(v - run));
    return rc;
}

static int prom_family(struct buf *out, const char *name, const char *type, const char *help)
{
    return buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

struct prom_field {
    const char *name, *type, *help;
    size_t off;
};

#define CS_F(name, type, field, help) { name, type, help, offsetof(struct cache_stats, field) }
static const struct prom_field prom_cache[] = {
    CS_F("s3cached_cache_capacity_bytes", "gauge", capacity_bytes, "Configured cache capacity."),
    CS_F("s3cached_cache_used_bytes", "gauge", used_bytes, "Bytes of objects held in the cache."),
    CS_F("s3cached_cache_objects", "gauge", objects, "Objects held in the cache."),
    CS_F("s3cached_cache_pinned_objects", "gauge", pinned_objects, "Objects pinned in the cache."),
    CS_F("s3cached_cache_pinned_bytes", "gauge", pinned_bytes, "Bytes of pinned objects."),
    CS_F("s3cached_cache_hits_total", "counter", hits, "Reads served from the cache."),
    CS_F("s3cached_cache_misses_total", "counter", misses,
         "Reads that started a backend fetch."),
    CS_F("s3cached_cache_coalesced_total", "counter", coalesced,
         "Reads that joined a fetch already in flight."),
    CS_F("s3cached_cache_bypassed_total", "counter", bypassed,
         "Reads served from the backend without caching."),
    CS_F("s3cached_cache_evictions_total", "counter", evictions, "Objects evicted."),
    CS_F("s3cached_cache_revalidations_total", "counter", revalidations,
         "Cached entries checked with the backend."),
    CS_F("s3cached_cache_stale_served_total", "counter", stale_served,
         "Stale entries served because the backend failed."),
    CS_F("s3cached_cache_source_sends_total", "counter", source_sends,
         "Cold GETs sent from the backend's file while the cache filled from it."),
    CS_F("s3cached_cache_fill_bytes_total", "counter", fill_bytes,
         "Bytes written into the cache from the backend."),
    CS_F("s3cached_cache_dirty_objects", "gauge", dirty_objects,
         "Objects written back but not yet on the backend."),
    CS_F("s3cached_cache_dirty_bytes", "gauge", dirty_bytes,
         "Bytes written back but not yet on the backend."),
    CS_F("s3cached_drain_dirty_limit_bytes", "gauge", dirty_limit_bytes,
         "Write-back: most dirty bytes before writes get 503 SlowDown."),
    CS_F("s3cached_drain_uploaded_objects_total", "counter", drain_uploaded_objects,
         "Write-back: objects uploaded to the backend by the drainer."),
    CS_F("s3cached_drain_uploaded_bytes_total", "counter", drain_uploaded_bytes,
         "Write-back: bytes uploaded to the backend by the drainer."),
    CS_F("s3cached_drain_errors_total", "counter", drain_errors,
         "Write-back: drain uploads that failed (retried)."),
    CS_F("s3cached_drain_cancelled_total", "counter", drain_cancelled,
         "Write-back: uploads stopped because a newer write or a DELETE superseded them."),
    CS_F("s3cached_drain_inflight", "gauge", drain_inflight,
         "Write-back: uploads in flight."),
};
#undef CS_F

#define BC_F(name, field, help) { name, "counter", help, offsetof(struct backend_counters, field) }
static const struct prom_field prom_backend[] = {
    BC_F("s3cached_backend_requests_total", requests, "Requests made to the backend."),
    BC_F("s3cached_backend_read_bytes_total", bytes_read, "Bytes read from the backend."),
    BC_F("s3cached_backend_written_bytes_total", bytes_written, "Bytes written to the backend."),
    BC_F("s3cached_backend_errors_total", errors, "Backend requests that failed."),
};
#undef BC_F

#define FS_F(name, field, help) { name, "gauge", help, offsetof(struct fair_stats, field) }
static const struct prom_field prom_fair[] = {
    FS_F("s3cached_fair_capacity_bytes_per_second", capacity_bps,
         "Fair sharing: configured --max-bandwidth (0: off)."),
    FS_F("s3cached_fair_share_bytes_per_second", level_bps,
         "Fair sharing: the level, what one client may take."),
    FS_F("s3cached_fair_rate_bytes_per_second", rate_bps,
         "Fair sharing: what all clients took in the last 100 ms round."),
    FS_F("s3cached_fair_active_clients", active_clients,
         "Fair sharing: clients counted by the last round."),
    FS_F("s3cached_fair_responses", responses, "Fair sharing: response bodies being sent."),
    FS_F("s3cached_fair_paced_responses", paced_responses,
         "Fair sharing: response bodies whose socket is paced."),
};
#undef FS_F

#define ROW_F(name, field, help) { name, "counter", help, offsetof(struct stats_row, field) }
static const struct prom_field prom_client[] = {
    ROW_F("s3cached_client_requests_total", requests, "Requests completed, by client."),
    ROW_F("s3cached_client_sent_bytes_total", bytes_out, "Body bytes sent, by client."),
    ROW_F("s3cached_client_received_bytes_total", bytes_in, "Body bytes received, by client."),
    ROW_F("s3cached_client_hits_total", hits, "Cache hits, by client."),
    ROW_F("s3cached_client_misses_total", misses, "Cache misses (and bypasses), by client."),
    ROW_F("s3cached_client_coalesced_total", coalesced, "Coalesced reads, by client."),
    ROW_F("s3cached_client_backend_fill_bytes_total", fill_bytes,
          "Backend bytes fetched on the client's behalf."),
};
static const struct prom_field prom_bucket[] = {
    ROW_F("s3cached_bucket_requests_total", requests, "Requests completed, by bucket."),
    ROW_F("s3cached_bucket_sent_bytes_total", bytes_out, "Body bytes sent, by bucket."),
    ROW_F("s3cached_bucket_received_bytes_total", bytes_in, "Body bytes received, by bucket."),
    ROW_F("s3cached_bucket_hits_total", hits, "Cache hits, by bucket."),
    ROW_F("s3cached_bucket_misses_total", misses, "Cache misses (and bypasses), by bucket."),
};
#undef ROW_F

static uint64_t field_u64(const void *base, size_t off)
{
    uint64_t v;
    memcpy(&v, (const char *)base + off, sizeof(v));
    return v;
}

/* {client="..",addr=".."} or {bucket=".."}, with @extra ("class=\"4xx\"") inside if set. */
static int prom_labels(struct buf *out, const struct stats_row *r, int is_client,
                       const char *extra)
{
    int rc = buf_puts(out, is_client ? "{client=\"" : "{bucket=\"");
    if (!rc)
        rc = prom_label(out, r->key);
    if (!rc && is_client) {
        rc = buf_puts(out, "\",addr=\"");
        if (!rc)
            rc = prom_label(out, r->addr);
    }
    if (!rc)
        rc = buf_puts(out, "\"");
    if (!rc && extra)
        rc = buf_printf(out, ",%s", extra);
    if (!rc)
        rc = buf_puts(out, "}");
    return rc;
}

static int prom_rows(struct buf *out, const struct prom_field *f, size_t nf,
                     const struct stats_row *rows, size_t n, int is_client)
{
    int rc = 0;
    for (size_t i = 0; i < nf && !rc; i++) {
        rc = prom_family(out, f[i].name, f[i].type, f[i].help);
        for (size_t k = 0; k < n && !rc; k++) {
            rc = buf_puts(out, f[i].name);
            if (!rc)
                rc = prom_labels(out, &rows[k], is_client, NULL);
            if (!rc)
                rc = buf_printf(out, " %" PRIu64 "\n", field_u64(&rows[k], f[i].off));
        }
    }
    const char *ename = is_client ? "s3cached_client_errors_total" : "s3cached_bucket_errors_total";
    if (!rc)
        rc = prom_family(out, ename, "counter",
                         is_client ? "Error responses, by client and class (4xx, 5xx)."
                                   : "Error responses, by bucket and class (4xx, 5xx).");
    for (size_t k = 0; k < n && !rc; k++) {
        rc = buf_puts(out, ename);
        if (!rc)
            rc = prom_labels(out, &rows[k], is_client, "class=\"4xx\"");
        if (!rc)
            rc = buf_printf(out, " %" PRIu64 "\n%s", rows[k].err_4xx, ename);
        if (!rc)
            rc = prom_labels(out, &rows[k], is_client, "class=\"5xx\"");
        if (!rc)
            rc = buf_printf(out, " %" PRIu64 "\n", rows[k].err_5xx);
    }
    return rc;
}

static int prom_histograms(struct stats *s, struct buf *out)
{
    static const char *const name = "s3cached_request_duration_seconds";
    int rc = prom_family(out, name, "histogram",
                         "Request latency, from the first byte of the request to the last byte "
                         "of the response, by operation and cache outcome.");
    for (unsigned o = 0; o < STATS_OP__N && !rc; o++) {
        for (unsigned h = 0; h < STATS_N_HOW && !rc; h++) {
            uint64_t cum[STATS_N_LE], acc = 0;
            for (unsigned i = 0; i < STATS_N_LE; i++) {
                acc += LOAD(s->hist[o][h][i]);
                cum[i] = acc;
            }
            if (!acc)
                continue;
            for (unsigned i = 0; i < STATS_N_LE && !rc; i++)
                rc = buf_printf(out, "%s_bucket{op=\"%s\",cache=\"%s\",le=\"%s\"} %" PRIu64 "\n",
                                name, stats_op_names[o], stats_how_names[h], stats_le_names[i],
                                cum[i]);
            if (!rc)
                rc = buf_printf(out,
                                "%s_sum{op=\"%s\",cache=\"%s\"} %.9f\n"
                                "%s_count{op=\"%s\",cache=\"%s\"} %" PRIu64 "\n",
                                name, stats_op_names[o], stats_how_names[h],
                                (double)LOAD(s->hist_sum_ns[o][h]) / 1e9, name,
                                stats_op_names[o], stats_how_names[h], acc);
        }
    }
    return rc;
}

/* The fair share's gauges (zeros when it is off). */
static int prom_fair_gauges(struct buf *out, const struct fair_stats *fs)
{
    int rc = 0;
    for (size_t i = 0; i < ARRAY_SIZE(prom_fair) && !rc; i++) {
        rc = prom_family(out, prom_fair[i].name, prom_fair[i].type, prom_fair[i].help);
        if (!rc)
            rc = buf_printf(out, "%s %" PRIu64 "\n", prom_fair[i].name,
                            field_u64(fs, prom_fair[i].off));
    }
    if (!rc)
        rc = prom_family(out, "s3cached_fair_saturated", "gauge",
                         "Fair sharing: 1 while the gateway is saturated and sockets are paced.");
    if (!rc)
        rc = buf_printf(out, "s3cached_fair_saturated %d\n", fs->saturated ? 1 : 0);
    return rc;
}

int stats_prometheus(struct stats *s, const struct cache_stats *cs,
                     const struct backend_counters *bc, const struct fair_stats *fs,
                     struct buf *out)
{
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    static const struct cache_stats cs0;
    static const struct backend_counters bc0;
    static const struct fair_stats fs0;
    struct stats_row *cl = NULL, *bk = NULL;
    size_t ncl = 0, nbk = 0;
    if (!cs)
        cs = &cs0;
    if (!bc)
        bc = &bc0;
    if (!fs)
        fs = &fs0;
    int rc = snapshot_clients(s, &cl, &ncl);
    if (!rc)
        rc = snapshot_buckets(s, &bk, &nbk);
    if (rc)
        goto out;

    rc = prom_family(out, "s3cached_uptime_seconds", "gauge", "Seconds since the server started.");
    if (!rc)
        rc = buf_printf(out, "s3cached_uptime_seconds %.3f\n", stats_uptime_s(s));
    for (size_t i = 0; i < ARRAY_SIZE(prom_cache) && !rc; i++) {
        rc = prom_family(out, prom_cache[i].name, prom_cache[i].type, prom_cache[i].help);
        if (!rc)
            rc = buf_printf(out, "%s %" PRIu64 "\n", prom_cache[i].name,
                            field_u64(cs, prom_cache[i].off));
    }
    for (size_t i = 0; i < ARRAY_SIZE(prom_backend) && !rc; i++) {
        rc = prom_family(out, prom_backend[i].name, prom_backend[i].type, prom_backend[i].help);
        if (!rc)
            rc = buf_printf(out, "%s %" PRIu64 "\n", prom_backend[i].name,
                            field_u64(bc, prom_backend[i].off));
    }
    if (!rc)
        rc = prom_fair_gauges(out, fs);
    if (!rc)
        rc = prom_family(out, "s3cached_requests_total", "counter",
                         "Requests completed, by operation.");
    for (unsigned i = 0; i < STATS_OP__N && !rc; i++)
        rc = buf_printf(out, "s3cached_requests_total{op=\"%s\"} %" PRIu64 "\n",
                        stats_op_names[i], LOAD(s->requests_by_op[i]));
    if (!rc)
        rc = prom_family(out, "s3cached_request_errors_total", "counter",
                         "Error responses, by class (4xx, 5xx).");
    if (!rc)
        rc = buf_printf(out,
                        "s3cached_request_errors_total{class=\"4xx\"} %" PRIu64 "\n"
                        "s3cached_request_errors_total{class=\"5xx\"} %" PRIu64 "\n",
                        LOAD(s->err_4xx), LOAD(s->err_5xx));
    if (!rc)
        rc = prom_rows(out, prom_client, ARRAY_SIZE(prom_client), cl, ncl, 1);
    if (!rc)
        rc = prom_family(out, "s3cached_client_in_flight_requests", "gauge",
                         "Requests in flight, by client.");
    for (size_t k = 0; k < ncl && !rc; k++) {
        rc = buf_puts(out, "s3cached_client_in_flight_requests");
        if (!rc)
            rc = prom_labels(out, &cl[k], 1, NULL);
        if (!rc)
            rc = buf_printf(out, " %u\n", cl[k].in_flight);
    }
    if (!rc)
        rc = prom_rows(out, prom_bucket, ARRAY_SIZE(prom_bucket), bk, nbk, 0);
    if (!rc)
        rc = prom_histograms(s, out);
out:
    free(cl);
    free(bk);
    return rc;
}
