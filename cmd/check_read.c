/*
 * check_read.c: the read phase of `s3cached check` (cmd/check.h): readers on threads, each
 * with its own curl multi handle and its share of the streams, GET the items of one shared
 * queue, count the bytes in the write callback and drop them. With a duration the queue
 * starts the set again in a new order each time it runs out (passes overlap, so no stream
 * waits for a pass's tail), unless the first pass was not all cache hits (a cold set is read
 * once: a second pass would measure the cache instead); at the duration the GETs in flight
 * are cut and their bytes so far count. The caller's mark callback runs on the calling
 * thread at the start, at the end of the start-up and at the end, where it reads the
 * gateway's and the machine's counters for the same windows.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "check.h"
#include "lib/s3c.h"

/* The receive buffer of each stream (kept from GET to GET): 1 MiB. Measured on 8 x 64 MiB
 * hits, the readers' CPU per byte: 256 KiB ~0.21, 1 MiB ~0.19, curl's largest (10 MiB)
 * ~0.19 core-s/GB, the last at ten times the memory per stream. */
#define CHECK_READ_BUF (1L << 20)
#define CHECK_WAIT_MS 100 /* a reader's poll when it has GETs in flight */
#define CHECK_RETRY_MS 5  /* when it waits for the first pass's answers to start another */

/* The queue the readers share. */
struct rq {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a reader ended */
    const char *bucket;
    const struct check_http *http;
    const struct check_item *items;
    size_t n, *order, pos;
    unsigned pass;           /* 1..: the pass being handed out */
    size_t first_unanswered; /* GETs of the first pass without their header yet */
    uint64_t first_not_hit;  /* answers of the first pass that were not hits */
    int repeat;              /* start the set again when it runs out */
    int ended;               /* no more GETs to hand out */
    int stop;                /* cut the GETs in flight (atomic) */
    unsigned live;           /* readers still running */
    uint64_t rng;
};

/* One stream: its handle (and its receive buffer) kept from GET to GET. */
struct slot {
    CURL *h;
    struct curl_slist *hdrs;
    int busy; /* a GET in flight */
    struct reader *rd;
    unsigned pass;
    int answered, not_hit;
};

/* One reader thread. Padded: the byte counter is written on every callback. */
struct reader {
    _Alignas(64) uint64_t bytes; /* written by this reader, read by the caller */
    uint64_t hit_bytes;          /* of them, bodies of answers with x-cache: hit */
    int xcache;                  /* answers carried x-cache (an s3cached gateway) */
    struct rq *q;
    CURLM *m;
    unsigned streams;
    uint64_t gets, errors;
    char first_error[256];
    pthread_t tid;
    int started;
};

static double rd_now(void)
{
    return (double)s3c_mono_ns() / 1e9;
}

static uint64_t rq_rand(struct rq *q)
{
    q->rng ^= q->rng << 13, q->rng ^= q->rng >> 7, q->rng ^= q->rng << 17;
    return q->rng;
}

/* The next item for a reader: 1 (*@it, *@pass set), 0 when none can go now (the first pass's
 * answers are still coming: whether a second pass starts depends on them), -1 when no more
 * will. A new pass starts in a new order; the first keeps the caller's. */
static int rq_take(struct rq *q, const struct check_item **it, unsigned *pass)
{
    int rc = 1;
    pthread_mutex_lock(&q->mu);
    if (q->pos == q->n && !q->ended) {
        if (!q->repeat || !q->n || (q->pass == 1 && q->first_not_hit)) {
            q->ended = 1;
        } else if (q->pass == 1 && q->first_unanswered) {
            rc = 0;
        } else {
            for (size_t i = q->n - 1; i > 0; i--) {
                size_t j = (size_t)(rq_rand(q) % (i + 1)), t = q->order[i];
                q->order[i] = q->order[j];
                q->order[j] = t;
            }
            q->pos = 0;
            q->pass++;
        }
    }
    if (q->ended || __atomic_load_n(&q->stop, __ATOMIC_RELAXED))
        rc = -1;
    if (rc == 1) {
        *it = &q->items[q->order[q->pos++]];
        *pass = q->pass;
        if (q->pass == 1)
            q->first_unanswered++;
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

/* @s has its answer (its header, or its end without one): the first pass's count. */
static void slot_answered(struct slot *s)
{
    struct rq *q = s->rd->q;
    if (s->answered)
        return;
    s->answered = 1;
    if (s->pass != 1)
        return;
    pthread_mutex_lock(&q->mu);
    q->first_unanswered--;
    if (s->not_hit)
        q->first_not_hit++;
    pthread_mutex_unlock(&q->mu);
}

static size_t slot_body(char *p, size_t sz, size_t n, void *cls)
{
    struct slot *s = cls;
    UNUSED(p);
    __atomic_store_n(&s->rd->bytes, s->rd->bytes + sz * n, __ATOMIC_RELAXED);
    if (!s->not_hit)
        __atomic_store_n(&s->rd->hit_bytes, s->rd->hit_bytes + sz * n, __ATOMIC_RELAXED);
    return sz * n;
}

/* Header lines: the status (not 2xx: not a hit), x-cache (anything but "hit": a miss, a
 * coalesced or bypassed read), and the blank line that ends them. A gateway that sends no
 * x-cache is taken at its word: hits. */
static size_t slot_header(char *p, size_t sz, size_t n, void *cls)
{
    struct slot *s = cls;
    size_t len = sz * n;
    if (len > 9 && !strncmp(p, "HTTP/", 5)) {
        const char *sp = memchr(p, ' ', len);
        if (!sp || sp + 1 >= p + len || sp[1] != '2')
            s->not_hit = 1;
    } else if (len >= 8 && !strncasecmp(p, "x-cache:", 8)) {
        const char *v = p + 8, *e = p + len;
        s->rd->xcache = 1;
        while (v < e && (*v == ' ' || *v == '\t'))
            v++;
        if (e - v < 3 || strncasecmp(v, "hit", 3) || (e - v > 3 && v[3] != '\r' && v[3] != '\n'))
            s->not_hit = 1;
    } else if (len <= 2 && (p[0] == '\r' || p[0] == '\n')) {
        slot_answered(s);
    }
    return len;
}

/* Starts @it on the free slot @s, on its handle of the previous GET when it has one. -1 when
 * no handle could be made (the item is skipped and counted as an error). */
static int slot_start(struct reader *rd, struct slot *s, const struct check_item *it, unsigned pass,
                      struct buf *path)
{
    char range[96];
    s->rd = rd;
    s->pass = pass;
    s->answered = s->not_hit = 0;
    buf_reset(path);
    if (check_path(path, rd->q->bucket, it->key) ||
        (!s->h && !(s->h = check_get_handle(rd->q->http, path->p, &s->hdrs)))) {
        s->not_hit = 1;
        slot_answered(s);
        if (!rd->errors++)
            snprintf(rd->first_error, sizeof(rd->first_error), "GET: out of memory");
        return -1;
    }
    check_set_url(rd->q->http, s->h, path->p);
    snprintf(range, sizeof(range), "%llu-%llu", (unsigned long long)it->off,
             (unsigned long long)(it->off + it->len - 1));
    curl_easy_setopt(s->h, CURLOPT_RANGE, it->len ? range : NULL);
    curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, slot_body);
    curl_easy_setopt(s->h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->h, CURLOPT_HEADERFUNCTION, slot_header);
    curl_easy_setopt(s->h, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(s->h, CURLOPT_BUFFERSIZE, CHECK_READ_BUF);
    curl_easy_setopt(s->h, CURLOPT_PRIVATE, s);
    curl_multi_add_handle(rd->m, s->h);
    s->busy = 1;
    return 0;
}

/* Ends @s's transfer; @done: it finished (counted as a GET, an error when it failed), else it
 * was cut at the duration. The handle stays for the slot's next GET. */
static void slot_end(struct reader *rd, struct slot *s, int done, CURLcode cc)
{
    long st = 0;
    curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &st);
    if (done) {
        rd->gets++;
        if (cc != CURLE_OK || st / 100 != 2) {
            s->not_hit = 1;
            if (!rd->errors++)
                snprintf(rd->first_error, sizeof(rd->first_error), "GET: %s (HTTP %ld)",
                         curl_easy_strerror(cc), st);
        }
    }
    slot_answered(s);
    curl_multi_remove_handle(rd->m, s->h);
    s->busy = 0;
}

static void *reader_main(void *arg)
{
    struct reader *rd = arg;
    struct rq *q = rd->q;
    struct slot *slots = calloc(rd->streams, sizeof(*slots));
    struct buf path;
    buf_init(&path, 16384);
    unsigned active = 0;
    int more = slots != NULL;
    while (slots) {
        int wait = 0;
        for (unsigned i = 0; i < rd->streams && more; i++) {
            const struct check_item *it;
            unsigned pass;
            if (slots[i].busy)
                continue;
            int t = rq_take(q, &it, &pass);
            if (t <= 0) {
                more = t == 0;
                wait = t == 0;
                break;
            }
            if (!slot_start(rd, &slots[i], it, pass, &path))
                active++;
        }
        if (__atomic_load_n(&q->stop, __ATOMIC_RELAXED)) {
            for (unsigned i = 0; i < rd->streams; i++)
                if (slots[i].busy)
                    slot_end(rd, &slots[i], 0, CURLE_OK);
            break;
        }
        if (!active && !more)
            break;
        int running = 0, left = 0;
        curl_multi_perform(rd->m, &running);
        CURLMsg *msg;
        while ((msg = curl_multi_info_read(rd->m, &left))) {
            struct slot *s = NULL;
            if (msg->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
            slot_end(rd, s, 1, msg->data.result);
            active--;
        }
        curl_multi_poll(rd->m, NULL, 0, wait ? CHECK_RETRY_MS : CHECK_WAIT_MS, NULL);
    }
    for (unsigned i = 0; slots && i < rd->streams; i++) {
        if (slots[i].h)
            curl_easy_cleanup(slots[i].h);
        curl_slist_free_all(slots[i].hdrs);
    }
    free(slots);
    buf_free(&path);
    pthread_mutex_lock(&q->mu);
    q->live--;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* The bytes the readers have had so far, and those of cache hits into *@hit. */
static uint64_t readers_bytes(const struct reader *rds, unsigned n, uint64_t *hit)
{
    uint64_t b = 0;
    *hit = 0;
    for (unsigned i = 0; i < n; i++) {
        b += __atomic_load_n(&rds[i].bytes, __ATOMIC_RELAXED);
        *hit += __atomic_load_n(&rds[i].hit_bytes, __ATOMIC_RELAXED);
    }
    return b;
}

/* Waits until every reader ended or @until (monotonic seconds; 0: no limit). 1 when they all
 * ended. */
static int readers_wait(struct rq *q, double until)
{
    pthread_mutex_lock(&q->mu);
    while (q->live) {
        double left = until - rd_now();
        if (until > 0 && left <= 0)
            break;
        struct timespec ts;
        s3c_deadline(CLOCK_MONOTONIC, until > 0 ? (int64_t)(left * 1000) + 1 : 1000, &ts);
        pthread_cond_timedwait(&q->cv, &q->mu, &ts);
    }
    int all = !q->live;
    pthread_mutex_unlock(&q->mu);
    return all;
}

/* The threads, the queue and its condition variable on CLOCK_MONOTONIC. */
static int readers_start(struct rq *q, struct reader *rds, unsigned readers, unsigned streams)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&q->mu, NULL);
    for (unsigned i = 0; i < readers; i++) {
        struct reader *rd = &rds[i];
        rd->q = q;
        rd->streams = streams / readers + (i < streams % readers ? 1 : 0);
        if (!(rd->m = curl_multi_init()))
            return -1;
        curl_multi_setopt(rd->m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)rd->streams);
        pthread_mutex_lock(&q->mu);
        q->live++;
        pthread_mutex_unlock(&q->mu);
        if (pthread_create(&rd->tid, NULL, reader_main, rd)) {
            pthread_mutex_lock(&q->mu);
            q->live--;
            pthread_mutex_unlock(&q->mu);
            return -1;
        }
        rd->started = 1;
    }
    return 0;
}

int check_read(const struct check_http *c, const char *bucket, const struct check_item *items,
               size_t n, const struct check_read_opts *o, struct check_read_res *res)
{
    struct rq q;
    unsigned readers = S3C_MAX(1u, S3C_MIN(o->readers, o->streams));
    struct reader *rds = calloc(readers, sizeof(*rds));
    memset(res, 0, sizeof(*res));
    memset(&q, 0, sizeof(q));
    q.order = malloc((n ? n : 1) * sizeof(*q.order));
    if (!rds || !q.order) {
        free(rds);
        free(q.order);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        q.order[i] = i;
    q.http = c;
    q.bucket = bucket;
    q.items = items;
    q.n = n;
    q.pass = 1;
    q.repeat = o->duration_s > 0;
    q.rng = 0x9e3779b97f4a7c15ull ^ s3c_mono_ns() ^ ((uint64_t)getpid() << 32);
    res->readers = readers;
    double t0 = rd_now(), t_warm = 0, t_end;
    uint64_t b_warm = 0, b_end, h_warm = 0, h_end;
    if (o->mark)
        o->mark(o->cls, CHECK_MARK_START);
    int rc = readers_start(&q, rds, readers, o->streams);
    int all = rc ? 1 : 0;
    if (rc) {
        __atomic_store_n(&q.stop, 1, __ATOMIC_RELAXED);
    } else if (o->duration_s > 0) {
        all = readers_wait(&q, t0 + o->warmup_s);
        if (!all) { /* the start-up is over: the steady window begins */
            t_warm = rd_now();
            b_warm = readers_bytes(rds, readers, &h_warm);
            if (o->mark)
                o->mark(o->cls, CHECK_MARK_WARM);
            all = readers_wait(&q, t0 + o->duration_s);
        }
    } else {
        all = readers_wait(&q, 0);
    }
    t_end = rd_now();
    b_end = readers_bytes(rds, readers, &h_end);
    if (o->mark)
        o->mark(o->cls, CHECK_MARK_END);
    if (!all) { /* the duration is up: the GETs in flight are cut */
        __atomic_store_n(&q.stop, 1, __ATOMIC_RELAXED);
        for (unsigned i = 0; i < readers; i++)
            if (rds[i].m)
                curl_multi_wakeup(rds[i].m);
    }
    for (unsigned i = 0; i < readers; i++) {
        struct reader *rd = &rds[i];
        if (rd->started)
            pthread_join(rd->tid, NULL);
        if (rd->m)
            curl_multi_cleanup(rd->m);
        res->bytes += rd->bytes;
        res->gets += rd->gets;
        res->xcache |= rd->xcache;
        if (rd->errors && !res->errors)
            snprintf(res->first_error, sizeof(res->first_error), "%s", rd->first_error);
        res->errors += rd->errors;
    }
    res->seconds = t_end - t0;
    res->cut = !all;
    res->cold = q.first_not_hit > 0;
    res->passes = q.pass;
    if (t_warm > 0 && !all) {
        res->window = CHECK_MARK_WARM;
        res->window_s = t_end - t_warm;
        res->window_bytes = b_end - b_warm;
        res->window_hit_bytes = h_end - h_warm;
    } else {
        res->window = CHECK_MARK_START;
        res->window_s = res->seconds;
        res->window_bytes = b_end;
        res->window_hit_bytes = h_end;
    }
    pthread_cond_destroy(&q.cv);
    pthread_mutex_destroy(&q.mu);
    free(q.order);
    free(rds);
    return rc;
}
