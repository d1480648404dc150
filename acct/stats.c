/*
 * stats.c: per-client, per-bucket and global request accounting (acct/stats.h); its
 * /_/stats JSON and /_/metrics Prometheus writers are stats_out.c. Does not own the cache's,
 * backend's or fair share's counters.
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
#include "jobs.h"
#include "lib/s3c.h"
#include "stats.h"
#include "stats_priv.h"


const char *const stats_op_names[STATS_OP__N] = {
    "get", "head", "put", "copy", "delete", "list", "multipart", "bucket", "admin", "other",
};
const char *const stats_how_names[STATS_N_HOW] = {
    "hit", "miss", "coalesced", "bypass", "partial", "none",
};
/* Upper bounds of the latency buckets: ns, and the le label as Prometheus shows it. */
const uint64_t stats_le_ns[STATS_N_LE - 1] = {
    1000000ull,    2500000ull,    5000000ull,    10000000ull,   25000000ull,
    50000000ull,   100000000ull,  250000000ull,  500000000ull,  1000000000ull,
    2500000000ull, 5000000000ull, 10000000000ull, 30000000000ull, 60000000000ull,
};
const char *const stats_le_names[STATS_N_LE] = {
    "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25",
    "0.5",   "1",      "2.5",   "5",    "10",    "30",   "60",  "+Inf",
};

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
    stall_acc_init(&c->stall, now);
    return c;
}

static void client_free(struct stats_client *c)
{
    stall_acc_destroy(&c->stall);
    c->magic = 0;
    free(c);
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
            client_free(c);
        }
    }
    for (unsigned i = 0; i < STATS_BUCKET_SLOTS; i++) {
        struct stats_bucket *b = s->bslots[i], *next;
        for (; b; b = next) {
            next = b->next;
            free(b);
        }
    }
    client_free(s->other);
    free(s->disk_path);
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
    stall_acc_fold(&o->stall, &c->stall);
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
    stall_acc_sample(&s->other->stall, seq, now);
    for (unsigned i = 0; i < STATS_CLIENT_SLOTS; i++) {
        struct stats_client **pp = &s->slots[i];
        while (*pp) {
            struct stats_client *c = *pp;
            c->ring_out[idx] = LOAD(c->bytes_out);
            c->ring_in[idx] = LOAD(c->bytes_in);
            stall_acc_sample(&c->stall, seq, now);
            if (c->refs == 0 && !c->is_peer && now - c->last_seen_ns > s->idle_ns) {
                *pp = c->next;
                s->n_clients--;
                client_fold(s, c, seq);
                client_free(c);
                continue;
            }
            pp = &c->next;
        }
    }
    s->tick_seq = seq + 1;
    struct jobs *jobs = s->jobs;
    pthread_mutex_unlock(&s->lock);
    if (jobs)
        jobs_tick(jobs);
}

struct stall_acc *stats_client_stall(struct stats_client *c)
{
    CHECK_OBJ_NOTNULL(c, STATS_CLIENT_MAGIC);
    return &c->stall;
}

void stats_set_jobs(struct stats *s, struct jobs *j)
{
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    pthread_mutex_lock(&s->lock);
    s->jobs = j;
    pthread_mutex_unlock(&s->lock);
}

void stats_set_disk_path(struct stats *s, const char *path)
{
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    char *p = path ? strdup(path) : NULL;
    pthread_mutex_lock(&s->lock);
    free(s->disk_path);
    s->disk_path = p;
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
    int is_peer = !strcmp(a, STATS_PEER_ADDR); /* a few, one per gateway: always a row */

    pthread_mutex_lock(&s->lock);
    uint64_t now = s->now(s->now_cls);
    struct stats_client **head = &s->slots[h % STATS_CLIENT_SLOTS], *c;
    for (c = *head; c; c = c->next)
        if (c->hash == h && !strcmp(c->key, key) && !strcmp(c->addr, a))
            break;
    if (!c && !is_other && (s->n_clients < s->max_clients || is_peer)) {
        c = client_new(key, a, h, now, s->tick_seq);
        if (c) {
            c->is_peer = is_peer;
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

/* The row of @bucket; when it has none, a new row if @create and the table has room, else the
 * "_other" row. Caller holds s->bucket_lock. */
static struct stats_bucket *bucket_get(struct stats *s, const char *bucket, int create)
{
    char name[STATS_KEY_MAX];
    copy_trunc(name, sizeof(name), bucket);
    uint32_t h = stats_hash(name, NULL);
    struct stats_bucket **head = &s->bslots[h % STATS_BUCKET_SLOTS], *b;
    for (b = *head; b; b = b->next)
        if (b->hash == h && !strcmp(b->name, name))
            return b;
    if (!create || s->n_buckets >= STATS_MAX_BUCKETS)
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

void stats_bucket_found(struct stats *s, const char *bucket)
{
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    if (!bucket || !*bucket)
        return;
    pthread_mutex_lock(&s->bucket_lock);
    (void)bucket_get(s, bucket, 1);
    pthread_mutex_unlock(&s->bucket_lock);
}

void stats_bucket_forget(struct stats *s, const char *bucket)
{
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    if (!bucket || !*bucket)
        return;
    char name[STATS_KEY_MAX];
    copy_trunc(name, sizeof(name), bucket);
    uint32_t h = stats_hash(name, NULL);
    pthread_mutex_lock(&s->bucket_lock);
    for (struct stats_bucket **pp = &s->bslots[h % STATS_BUCKET_SLOTS]; *pp; pp = &(*pp)->next) {
        struct stats_bucket *b = *pp, *o = &s->bother;
        if (b->hash != h || strcmp(b->name, name))
            continue;
        *pp = b->next;
        s->n_buckets--;
        o->requests += b->requests;
        o->bytes_out += b->bytes_out;
        o->bytes_in += b->bytes_in;
        o->hits += b->hits;
        o->misses += b->misses;
        o->coalesced += b->coalesced;
        o->err_4xx += b->err_4xx;
        o->err_5xx += b->err_5xx;
        for (unsigned i = 0; i < STATS_OP__N; i++)
            o->by_op[i] += b->by_op[i];
        free(b);
        break;
    }
    pthread_mutex_unlock(&s->bucket_lock);
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
    /* A bypass or a partial hit went to the backend: for clients and buckets it counts as a
     * miss. */
    int hit = hi == CACHE_HIT, miss = hi == CACHE_MISS || hi == CACHE_BYPASS || hi == CACHE_PARTIAL;
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
        struct stats_bucket *b = bucket_get(s, bucket, 0);
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


static void row_from_client(const struct stats *s, const struct stats_client *c,
                            struct stats_row *r)
{
    memcpy(r->key, c->key, sizeof(r->key));
    memcpy(r->addr, c->addr, sizeof(r->addr));
    r->is_other = c->is_other;
    r->is_peer = c->is_peer;
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
    stall_acc_view((struct stall_acc *)&c->stall, s->now(s->now_cls), &r->stall);
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
int stats_snapshot_clients(struct stats *s, struct stats_row **rows, size_t *n)
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

int stats_snapshot_buckets(struct stats *s, struct stats_row **rows, size_t *n)
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

void stats_set_parked(struct stats *s, uint64_t parked, uint64_t over, uint64_t over_total,
                      uint64_t bound_ms)
{
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    atomic_store_explicit(&s->parked, parked, RELAXED);
    atomic_store_explicit(&s->parked_over, over, RELAXED);
    atomic_store_explicit(&s->parked_over_total, over_total, RELAXED);
    atomic_store_explicit(&s->park_bound_ms, bound_ms, RELAXED);
}
