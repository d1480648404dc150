/*
 * fair.c: max-min fair sharing of --max-bandwidth among downloading clients by kernel pacing
 * (acct/fair.h). Owns the client table (a small hash of the clients with a response in
 * flight or bytes in the last round), the ticker thread and a per-descriptor note of the sockets
 * it left paced; does not own the sockets: they are borrowed from registration to
 * fair_conn_end(), which the completion callback calls before libmicrohttpd closes them. One
 * mutex guards everything; the hot path takes it twice per response (start, end), never per
 * chunk, and makes no system call while the gateway is not saturated.
 */
#include <errno.h>
#include <netinet/in.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_sent, tcpi_notsent_bytes */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "fair.h"
#include "lib/log.h"
#include "lib/s3c.h"

#define FAIR_BUCKETS 256
#define FAIR_TAILS 8             /* tails remembered per client */
#define FAIR_TAIL_MIN (64u << 10) /* queued bytes worth a tail */
#define FAIR_ID_MAX (129 + 64 + 2) /* access key, '\n', address */

struct fair_client {
    struct fair_client *hnext;
    struct fair_conn *conns;
    unsigned nconns;
    struct {                  /* completed responses whose bytes are still queued */
        int fd;
        uint64_t until_ns;    /* when they will have drained; 0 = free slot */
    } tail[FAIR_TAILS];
    int fresh;      /* joined since the last round: its demand is not known yet */
    uint64_t bytes; /* written since the last round */
    char id[FAIR_ID_MAX];
};

struct fair {
    unsigned magic;
#define FAIR_MAGIC 0xfa125a4e
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int has_thread, stop;
    struct fair_io io;
    double capacity;
    double level;        /* bytes/s one client may take (last round) */
    double total;        /* bytes/s all clients took (last round) */
    int saturated;       /* sockets are paced */
    unsigned relaxed;    /* saturated rounds in a row under FAIR_RELAXED */
    uint8_t *paced;      /* by descriptor: we left a pacing rate on that socket */
    size_t npaced;
    unsigned nclients;   /* in the table */
    unsigned active;     /* counted by the last round */
    uint64_t last_ns;    /* time of the last round */
    double *dem;         /* scratch for the rounds */
    size_t dem_cap;
    struct fair_client *tab[FAIR_BUCKETS];
};

/* ------------------------------------------------------------------ the real sockets */

/* Bytes the application has written to a TCP socket: sent once (retransmissions excluded) plus
 * still queued. 0 when unknown (the callers never move a sample backwards). */
static uint64_t fair_sock_written(void *cls, int fd, uint64_t *queued)
{
    struct tcp_info ti;
    socklen_t sl = sizeof(ti);
    memset(&ti, 0, sizeof(ti));
    *queued = 0;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &sl) != 0)
        return 0;
    if (sl < offsetof(struct tcp_info, tcpi_bytes_retrans) + sizeof(ti.tcpi_bytes_retrans))
        return ti.tcpi_bytes_acked; /* an old kernel: what was acknowledged */
    uint64_t w = ti.tcpi_bytes_sent - ti.tcpi_bytes_retrans + ti.tcpi_notsent_bytes;
    *queued = w > ti.tcpi_bytes_acked ? w - ti.tcpi_bytes_acked : 0;
    return w;
}

static void fair_sock_pace(void *cls, int fd, uint64_t bps)
{
    if (setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &bps, sizeof(bps)) == 0)
        return;
    uint32_t b32 = bps == FAIR_UNPACED ? UINT32_MAX                   /* kernels before 4.20 */
                   : bps >= UINT32_MAX ? UINT32_MAX - 1 : (uint32_t)bps;
    (void)setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &b32, sizeof(b32));
}

static const struct fair_io fair_sock_io = {fair_sock_written, fair_sock_pace, NULL};

/* ------------------------------------------------------------------ the level */

static int fair_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double fair_waterfill(double capacity, double *demand, size_t n)
{
    if (n == 0)
        return capacity;
    qsort(demand, n, sizeof(*demand), fair_cmp_double);
    double left = capacity;
    for (size_t i = 0; i < n; i++) {
        double share = left / (double)(n - i);
        if (demand[i] >= share) /* this client and every larger one are held to the level */
            return share;
        left -= demand[i];
    }
    return demand[n - 1] + left; /* every demand met: the spare is anyone's to grow into */
}

/* The clock of fair_conn_start/end: real time, or the last round's in manual mode (tests). */
static uint64_t fair_now(struct fair *f)
{
    return f->has_thread ? s3c_mono_ns() : f->last_ns;
}

/* The pacing rate of each of @cl's sockets: an equal part of @level among its downloads in
 * flight and its tails still draining. */
static uint64_t fair_conn_rate(double level, struct fair_client *cl, uint64_t now)
{
    unsigned n = cl->nconns;
    for (unsigned i = 0; i < FAIR_TAILS; i++)
        n += cl->tail[i].until_ns > now;
    double per = level / (double)(n ? n : 1);
    return per < FAIR_MIN_CONN_BPS ? FAIR_MIN_CONN_BPS : (uint64_t)per;
}

/* ------------------------------------------------------------------ the table */

static unsigned fair_hash(const char *s)
{
    uint32_t h = 2166136261u;
    while (*s)
        h = (h ^ (unsigned char)*s++) * 16777619u;
    return h % FAIR_BUCKETS;
}

/* Samples @fc's socket and charges what it wrote since the last sample to its client (the
 * first sample of a response only sets the base: what came before is charged at its end). */
static void fair_conn_sample(struct fair *f, struct fair_conn *fc)
{
    uint64_t queued;
    uint64_t w = f->io.written(f->io.cls, fc->fd, &queued);
    if (!w)
        return;
    if (!fc->sampled) {
        fc->base = w;
        fc->sampled = 1;
    } else if (w > fc->base) {
        fc->cl->bytes += w - fc->base;
        fc->counted += w - fc->base;
        fc->base = w;
    }
}

/* Paces @fc's socket at @bps (FAIR_UNPACED: lifts it), noting it by descriptor. */
static void fair_pace(struct fair *f, struct fair_conn *fc, uint64_t bps)
{
    int fd = fc->fd;
    if (bps != FAIR_UNPACED && (size_t)fd >= f->npaced) {
        size_t n = S3C_MAX((size_t)fd + 1, f->npaced * 2);
        uint8_t *p = realloc(f->paced, n);
        if (!p)
            return; /* not paced: it goes at full speed, no worse than without sharing */
        memset(p + f->npaced, 0, n - f->npaced);
        f->paced = p;
        f->npaced = n;
    }
    f->io.pace(f->io.cls, fd, bps);
    fc->rate = bps == FAIR_UNPACED ? 0 : bps;
    if ((size_t)fd < f->npaced)
        f->paced[fd] = bps != FAIR_UNPACED;
}

void fair_conn_start(struct fair *f, struct fair_conn *fc, int fd, const char *key,
                     const char *addr)
{
    CHECK_OBJ_NOTNULL(f, FAIR_MAGIC);
    char id[FAIR_ID_MAX];
    snprintf(id, sizeof(id), "%s\n%s", key ? key : "", addr ? addr : "");
    unsigned h = fair_hash(id);
    if (fc->cl)
        fair_conn_end(f, fc, 0);
    pthread_mutex_lock(&f->mu);
    struct fair_client *cl = f->tab[h];
    while (cl && strcmp(cl->id, id))
        cl = cl->hnext;
    if (!cl) {
        cl = calloc(1, sizeof(*cl));
        if (!cl) { /* not shared, not paced: the request goes on */
            pthread_mutex_unlock(&f->mu);
            return;
        }
        memcpy(cl->id, id, sizeof(id));
        cl->fresh = 1;
        cl->hnext = f->tab[h];
        f->tab[h] = cl;
        if (f->nclients++ == 0)
            pthread_cond_signal(&f->cv); /* the ticker idles while the table is empty */
    }
    for (unsigned i = 0; i < FAIR_TAILS; i++) /* the same socket's last response: now us */
        if (cl->tail[i].until_ns && cl->tail[i].fd == fd)
            cl->tail[i].until_ns = 0;
    fc->cl = cl;
    fc->fd = fd;
    fc->sampled = 0;
    fc->base = fc->counted = fc->rate = fc->held_ns = 0;
    fc->prev = NULL;
    fc->next = cl->conns;
    if (cl->conns)
        cl->conns->prev = fc;
    cl->conns = fc;
    cl->nconns++;
    if (f->saturated) { /* measured and paced from its first byte */
        fair_conn_sample(f, fc);
        fair_pace(f, fc, fair_conn_rate(f->level, cl, fair_now(f)));
    } else if ((size_t)fd < f->npaced && f->paced[fd]) { /* an earlier response left it paced */
        fair_pace(f, fc, FAIR_UNPACED);
    }
    pthread_mutex_unlock(&f->mu);
}

void fair_conn_end(struct fair *f, struct fair_conn *fc, uint64_t sent)
{
    if (!f || !fc->cl)
        return;
    CHECK_OBJ_NOTNULL(f, FAIR_MAGIC);
    pthread_mutex_lock(&f->mu);
    struct fair_client *cl = fc->cl;
    if (sent > fc->counted)
        cl->bytes += sent - fc->counted;
    uint64_t queued = 0;
    if (fc->rate) /* paced: what is still queued drains at that rate */
        (void)f->io.written(f->io.cls, fc->fd, &queued);
    if (queued >= FAIR_TAIL_MIN && fc->rate) {
        uint64_t now = fair_now(f), until = now + queued * 1000000000ull / fc->rate;
        unsigned slot = 0; /* a free slot, else the one that ends first */
        for (unsigned i = 0; i < FAIR_TAILS; i++)
            if (cl->tail[i].until_ns < cl->tail[slot].until_ns)
                slot = i;
        if (cl->tail[slot].until_ns < until) {
            cl->tail[slot].fd = fc->fd;
            cl->tail[slot].until_ns = until;
        }
    }
    if (fc->prev)
        fc->prev->next = fc->next;
    else
        cl->conns = fc->next;
    if (fc->next)
        fc->next->prev = fc->prev;
    cl->nconns--;
    fc->cl = NULL;
    fc->next = fc->prev = NULL;
    pthread_mutex_unlock(&f->mu); /* the client row goes at a round with nothing to count */
}

void fair_tick(struct fair *f, uint64_t now_ns)
{
    CHECK_OBJ_NOTNULL(f, FAIR_MAGIC);
    pthread_mutex_lock(&f->mu);
    if (now_ns <= f->last_ns + 1000000ull) { /* under 1 ms: nothing to measure yet */
        pthread_mutex_unlock(&f->mu);
        return;
    }
    double secs = (double)(now_ns - f->last_ns) / 1e9;
    uint64_t round_ns = now_ns - f->last_ns;
    f->last_ns = now_ns;
    if (f->nclients > f->dem_cap) {
        size_t cap = S3C_MAX((size_t)f->nclients, f->dem_cap * 2);
        double *d = realloc(f->dem, cap * sizeof(*d));
        if (!d) { /* keep the last level; try again next round */
            pthread_mutex_unlock(&f->mu);
            return;
        }
        f->dem = d;
        f->dem_cap = cap;
    }
    size_t n = 0;
    double total = 0;
    for (unsigned b = 0; b < FAIR_BUCKETS; b++) {
        struct fair_client **pp = &f->tab[b];
        while (*pp) {
            struct fair_client *cl = *pp;
            for (struct fair_conn *fc = cl->conns; fc; fc = fc->next)
                fair_conn_sample(f, fc);
            int tails = 0;
            for (unsigned i = 0; i < FAIR_TAILS; i++) {
                if (cl->tail[i].until_ns <= now_ns)
                    cl->tail[i].until_ns = 0;
                tails |= cl->tail[i].until_ns != 0;
            }
            if (!cl->nconns && !tails && !cl->bytes && !cl->fresh) { /* quiet: forget it */
                *pp = cl->hnext;
                f->nclients--;
                free(cl);
                continue;
            }
            double used = (double)cl->bytes / secs;
            total += used;
            /* A client that took most of what it was allowed may want more: its demand is
             * unknown and the level caps it. One that took clearly less is held back by
             * something else (its reader, a fill, its own rate limit): it keeps what it takes
             * and the rest goes to the others. */
            int greedy = cl->fresh || used >= FAIR_GREEDY * f->level;
            /* Paced through the round and taking what the level allowed: its responses were
             * held back by the fair share for the round (their stall, acct/stall.h). */
            if (f->saturated && !cl->fresh && used >= FAIR_GREEDY * f->level)
                for (struct fair_conn *fc = cl->conns; fc; fc = fc->next)
                    fc->held_ns += fc->rate ? round_ns : 0;
            f->dem[n++] = greedy ? FAIR_UNBOUNDED : used;
            cl->bytes = 0;
            cl->fresh = 0;
            pp = &cl->hnext;
        }
    }
    double level = fair_waterfill(f->capacity, f->dem, n);
    if (level > f->capacity)
        level = f->capacity;
    /* Saturated from the first round at FAIR_SATURATED of capacity; relaxed only after
     * FAIR_RELAX_ROUNDS rounds in a row under FAIR_RELAXED (one round can undercount: a
     * response registered unsaturated is charged its first bytes when it ends). */
    int sat = f->saturated;
    if (!sat && total >= FAIR_SATURATED * f->capacity)
        sat = 1;
    f->relaxed = sat && total < FAIR_RELAXED * f->capacity ? f->relaxed + 1 : 0;
    if (f->relaxed >= FAIR_RELAX_ROUNDS || !n) { /* no client left: start afresh */
        sat = 0;
        f->relaxed = 0;
    }
    if (n != f->active || sat != f->saturated)
        log_debug("fair share: %zu active clients, %.1f of %.1f MB/s, %s", n, total / 1e6,
                  f->capacity / 1e6, sat ? "pacing each to its share" : "not saturated");
    f->level = level;
    f->total = total;
    f->active = (unsigned)n;
    f->saturated = sat;
    for (unsigned b = 0; b < FAIR_BUCKETS; b++)
        for (struct fair_client *cl = f->tab[b]; cl; cl = cl->hnext)
            for (struct fair_conn *fc = cl->conns; fc; fc = fc->next) {
                if (!sat) {
                    if (fc->rate)
                        fair_pace(f, fc, FAIR_UNPACED);
                    continue;
                }
                uint64_t r = fair_conn_rate(level, cl, now_ns);
                uint64_t diff = r > fc->rate ? r - fc->rate : fc->rate - r;
                if (!fc->rate || diff > fc->rate / 64) /* skip changes under ~1.5% */
                    fair_pace(f, fc, r);
            }
    pthread_mutex_unlock(&f->mu);
}

uint64_t fair_level(struct fair *f, unsigned *active_clients, int *saturated)
{
    CHECK_OBJ_NOTNULL(f, FAIR_MAGIC);
    pthread_mutex_lock(&f->mu);
    uint64_t l = (uint64_t)f->level;
    if (active_clients)
        *active_clients = f->active;
    if (saturated)
        *saturated = f->saturated;
    pthread_mutex_unlock(&f->mu);
    return l;
}

void fair_get_stats(struct fair *f, struct fair_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!f)
        return;
    CHECK_OBJ_NOTNULL(f, FAIR_MAGIC);
    pthread_mutex_lock(&f->mu);
    out->capacity_bps = (uint64_t)f->capacity;
    out->level_bps = (uint64_t)f->level;
    out->rate_bps = (uint64_t)f->total;
    out->active_clients = f->active;
    out->saturated = f->saturated;
    for (unsigned b = 0; b < FAIR_BUCKETS; b++)
        for (struct fair_client *cl = f->tab[b]; cl; cl = cl->hnext)
            for (struct fair_conn *fc = cl->conns; fc; fc = fc->next) {
                out->responses++;
                out->paced_responses += fc->rate != 0;
            }
    pthread_mutex_unlock(&f->mu);
}

/* ------------------------------------------------------------------ lifecycle */

static void *fair_main(void *arg)
{
    struct fair *f = arg;
    pthread_mutex_lock(&f->mu);
    while (!f->stop) {
        if (!f->nclients) { /* nothing to share: sleep until a client comes */
            pthread_cond_wait(&f->cv, &f->mu);
            f->last_ns = s3c_mono_ns();
            continue;
        }
        struct timespec ts;
        s3c_deadline(CLOCK_MONOTONIC, FAIR_TICK_MS, &ts);
        int rc = 0;
        while (!f->stop && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&f->cv, &f->mu, &ts);
        if (f->stop)
            break;
        pthread_mutex_unlock(&f->mu);
        fair_tick(f, s3c_mono_ns());
        pthread_mutex_lock(&f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static int fair_create(uint64_t capacity_bps, const struct fair_io *io, struct fair **out)
{
    struct fair *f = calloc(1, sizeof(*f));
    pthread_condattr_t ca;
    if (!f)
        return -ENOMEM;
    f->magic = FAIR_MAGIC;
    f->io = io ? *io : fair_sock_io;
    f->capacity = (double)capacity_bps;
    f->level = f->capacity; /* a first client alone may take it all */
    f->last_ns = s3c_mono_ns();
    pthread_mutex_init(&f->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = f;
    return 0;
}

int fair_new_manual(uint64_t capacity_bps, const struct fair_io *io, struct fair **out)
{
    if (!capacity_bps)
        return -EINVAL;
    return fair_create(capacity_bps, io, out);
}

int fair_new(uint64_t capacity_bps, struct fair **out)
{
    struct fair *f;
    if (!capacity_bps)
        return -EINVAL;
    int rc = fair_create(capacity_bps, NULL, &f);
    if (rc)
        return rc;
    rc = pthread_create(&f->thread, NULL, fair_main, f);
    if (rc) {
        fair_free(f);
        *out = NULL;
        return -rc;
    }
    f->has_thread = 1;
    *out = f;
    return 0;
}

void fair_free(struct fair *f)
{
    if (!f)
        return;
    CHECK_OBJ_NOTNULL(f, FAIR_MAGIC);
    if (f->has_thread) {
        pthread_mutex_lock(&f->mu);
        f->stop = 1;
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->thread, NULL);
    }
    for (unsigned b = 0; b < FAIR_BUCKETS; b++)
        while (f->tab[b]) {
            struct fair_client *cl = f->tab[b];
            f->tab[b] = cl->hnext;
            free(cl);
        }
    free(f->dem);
    free(f->paced);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    f->magic = 0;
    free(f);
}
