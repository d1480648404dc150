/*
 * peer_http.c: requests to peers (peer_http.h) on one thread driving a curl multi handle.
 * Owns that thread, the multi handle (and so the connections kept alive to each peer) and
 * every transfer until its last reference goes. A transfer's life:
 *   start (any thread): built, signed, queued -> the thread adds it to the multi handle
 *   -> headers (status, header lines) -> body (call: into a buffer; stream: into a ring the
 *   reader drains; the transfer pauses while the ring is full and the reader asks the thread
 *   to resume it) -> done (callback for a call; a waiting reader is woken)
 *   -> released (a stream whose reader left early is cancelled by the thread).
 * Only the thread touches the multi handle and the easy handles while they are in it.
 */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "lib/s3c.h"
#include "peer_http.h"

#define PH_MAGIC 0x9ee9417au
#define PX_MAGIC 0x9ee9c411u
#define PEER_STREAM_RING (1u << 20) /* body bytes a stream holds before its transfer pauses */
#define PEER_HDR_MAX 200            /* header lines kept of one answer */
#define PEER_HDR_BYTES (64u << 10)
#define PEER_HOST_CONNS 64L         /* connections kept to one peer (curl's host limit) */

struct peer_xfer {
    unsigned magic;
    struct peer_http *ph;
    CURL *easy;
    struct curl_slist *hdrs;
    char *url;
    char *body;
    size_t body_len;
    atomic_uint refs;  /* the thread's (until done) + the users' */
    struct peer_xfer *next;  /* ph->incoming, or ph->active (thread only) */
    uint64_t deadline_ns;    /* s3c_mono_ns() by which a call fails, queued or not; 0: none */
    /* a stream admitted under peer_http_opts' limits: on ph->streams (ph->mu) until its last
     * user releases it */
    struct peer_xfer *snext;
    char *s_client;
    int s_counted;

    pthread_mutex_t mu;      /* everything below */
    unsigned users;          /* references held by callers (streams) */
    int streaming;
    int headers_done;        /* status and headers of the final answer are in */
    int done;                /* the transfer ended (rc says how) */
    int rc;
    long status;
    int64_t clen;
    struct peer_hdr *rh;
    size_t nrh, rh_bytes;
    struct buf body_in;      /* a call's answer */
    char *ring;              /* a stream's unread body bytes */
    size_t rcap, rhead, rlen;
    int paused;              /* the write callback paused the transfer (thread) */
    int want_unpause;        /* the reader made room: the thread resumes it */
    int cancel;              /* no user left: the thread drops it */
    struct peer_waiter *w;   /* armed waiter */
    peer_done_f *done_cb;
    void *done_cls;
};

struct peer_http {
    unsigned magic;
    CURLM *multi;
    pthread_t thr;
    int started;
    pthread_mutex_t mu;          /* incoming, stop */
    struct peer_xfer *incoming;
    int stop;
    struct peer_xfer *active;    /* thread only */
    struct peer_xfer *streams;   /* admitted streams (ph->mu) */
    unsigned n_streams;
    unsigned max_streams, max_streams_client;
    uint64_t streams_refused;
    char *self, *secret, *region;
    char *ca_file;               /* NULL: the system's store */
    int tls;                     /* https:// and a verified certificate */
    int64_t connect_ms, stall_ms;
};

static pthread_once_t peer_curl_once = PTHREAD_ONCE_INIT;
static int peer_curl_rc;

static void peer_curl_init(void)
{
    peer_curl_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -ENOMEM;
}

/* --- transfers: lifetime ---------------------------------------------------------------- */

static void px_free(struct peer_xfer *x)
{
    if (x->easy)
        curl_easy_cleanup(x->easy);
    curl_slist_free_all(x->hdrs);
    free(x->url);
    free(x->body);
    for (size_t i = 0; i < x->nrh; i++) {
        free(x->rh[i].name);
        free(x->rh[i].value);
    }
    free(x->rh);
    buf_free(&x->body_in);
    free(x->ring);
    free(x->s_client);
    pthread_mutex_destroy(&x->mu);
    x->magic = 0;
    free(x);
}

static void px_unref(struct peer_xfer *x)
{
    if (atomic_fetch_sub_explicit(&x->refs, 1, memory_order_acq_rel) == 1)
        px_free(x);
}

/* Under x->mu: wakes the armed waiter. */
static void px_wake_locked(struct peer_xfer *x)
{
    struct peer_waiter *w = x->w;
    if (w && w->armed) {
        w->armed = 0;
        x->w = NULL;
        w->resume(w->cls);
    }
}

/* Under x->mu: arms @w and suspends its connection. */
static void px_arm_locked(struct peer_xfer *x, struct peer_waiter *w)
{
    x->w = w;
    w->armed = 1;
    w->suspend(w->cls);
}

/* Takes @x off the admitted streams (its last user released it: its ring goes with it). */
static void ph_stream_uncount(struct peer_http *ph, struct peer_xfer *x)
{
    pthread_mutex_lock(&ph->mu);
    for (struct peer_xfer **pp = &ph->streams; *pp; pp = &(*pp)->snext)
        if (*pp == x) {
            *pp = x->snext;
            ph->n_streams--;
            break;
        }
    x->s_counted = 0;
    pthread_mutex_unlock(&ph->mu);
}

void peer_xfer_ref(struct peer_xfer *x)
{
    CHECK_OBJ_NOTNULL(x, PX_MAGIC);
    pthread_mutex_lock(&x->mu);
    x->users++;
    pthread_mutex_unlock(&x->mu);
    atomic_fetch_add_explicit(&x->refs, 1, memory_order_relaxed);
}

void peer_xfer_release(struct peer_xfer *x)
{
    if (!x)
        return;
    CHECK_OBJ_NOTNULL(x, PX_MAGIC);
    struct peer_http *ph = x->ph;
    int cancel = 0;
    int last = 0;
    pthread_mutex_lock(&x->mu);
    if (x->users && --x->users == 0) {
        last = 1;
        if (!x->done) {
            x->cancel = 1;
            cancel = 1;
        }
    }
    pthread_mutex_unlock(&x->mu);
    if (last && x->s_counted)
        ph_stream_uncount(ph, x);
    if (cancel)
        curl_multi_wakeup(ph->multi);
    px_unref(x);
}

/* The transfer ended (thread): records @rc, wakes the reader, runs the callback, drops the
 * thread's reference. */
static void px_finish(struct peer_xfer *x, int rc)
{
    peer_done_f *cb;
    pthread_mutex_lock(&x->mu);
    x->done = 1;
    x->rc = rc;
    cb = x->done_cb;
    px_wake_locked(x);
    pthread_mutex_unlock(&x->mu);
    if (cb)
        cb(x->done_cls, x);
    px_unref(x);
}

/* --- transfers: callbacks (thread) ------------------------------------------------------- */

static size_t px_header_cb(char *p, size_t sz, size_t n, void *cls)
{
    struct peer_xfer *x = cls;
    size_t len = sz * n, l = len;
    while (l && (p[l - 1] == '\r' || p[l - 1] == '\n'))
        l--;
    pthread_mutex_lock(&x->mu);
    if (x->headers_done) {
        /* trailers of a chunked body: the headers a reader may be walking stay as they are */
    } else if (len >= 5 && !strncmp(p, "HTTP/", 5)) { /* a status line: a new answer (after 1xx) */
        const char *sp = memchr(p, ' ', l);
        x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        for (size_t i = 0; i < x->nrh; i++) {
            free(x->rh[i].name);
            free(x->rh[i].value);
        }
        x->nrh = 0;
        x->rh_bytes = 0;
        x->clen = -1;
    } else if (l == 0) { /* the end of a header section */
        if (x->status >= 200) {
            x->headers_done = 1;
            px_wake_locked(x);
        }
    } else {
        const char *colon = memchr(p, ':', l);
        if (colon && x->nrh < PEER_HDR_MAX && x->rh_bytes + l <= PEER_HDR_BYTES) {
            const char *v = colon + 1, *e = p + l;
            while (v < e && (*v == ' ' || *v == '\t'))
                v++;
            while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
                e--;
            if (!x->rh) {
                x->rh = calloc(PEER_HDR_MAX, sizeof(*x->rh));
            }
            if (x->rh) {
                struct peer_hdr *h = &x->rh[x->nrh];
                h->name = strndup(p, (size_t)(colon - p));
                h->value = strndup(v, (size_t)(e - v));
                if (h->name && h->value) {
                    x->nrh++;
                    x->rh_bytes += l;
                    if (!strcasecmp(h->name, "Content-Length"))
                        x->clen = strtoll(h->value, NULL, 10);
                } else {
                    free(h->name);
                    free(h->value);
                }
            }
        }
    }
    pthread_mutex_unlock(&x->mu);
    return len;
}

static size_t px_write_cb(char *p, size_t sz, size_t n, void *cls)
{
    struct peer_xfer *x = cls;
    size_t len = sz * n;
    pthread_mutex_lock(&x->mu);
    if (x->cancel) {
        pthread_mutex_unlock(&x->mu);
        return 0; /* != len: the transfer fails (CURLE_WRITE_ERROR) */
    }
    if (!x->streaming) {
        int rc = buf_append(&x->body_in, p, len);
        pthread_mutex_unlock(&x->mu);
        return rc ? 0 : len;
    }
    if (x->rcap - x->rlen < len) {
        if (x->rlen || len <= x->rcap) {
            x->paused = 1; /* curl keeps the bytes and hands them over again once resumed */
            pthread_mutex_unlock(&x->mu);
            return CURL_WRITEFUNC_PAUSE;
        }
        char *nr = realloc(x->ring, len); /* a chunk larger than the ring, which is empty */
        if (!nr) {
            pthread_mutex_unlock(&x->mu);
            return 0;
        }
        x->ring = nr;
        x->rcap = len;
        x->rhead = 0;
    }
    size_t tail = (x->rhead + x->rlen) % x->rcap;
    size_t first = S3C_MIN(len, x->rcap - tail);
    memcpy(x->ring + tail, p, first);
    memcpy(x->ring, p + first, len - first);
    x->rlen += len;
    px_wake_locked(x);
    pthread_mutex_unlock(&x->mu);
    return len;
}

/* --- the thread ----------------------------------------------------------------------------- */

static int px_curl_rc(CURLcode cc)
{
    switch (cc) {
    case CURLE_OK: return 0;
    case CURLE_COULDNT_CONNECT: return -ECONNREFUSED;
    case CURLE_OPERATION_TIMEDOUT: return -ETIMEDOUT;
    case CURLE_COULDNT_RESOLVE_HOST: return -EHOSTUNREACH;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE: return -ECONNRESET;
    case CURLE_WRITE_ERROR:
    case CURLE_ABORTED_BY_CALLBACK: return -ECANCELED;
    default: return -EIO;
    }
}

static void *ph_thread(void *arg)
{
    struct peer_http *ph = arg;
    for (;;) {
        pthread_mutex_lock(&ph->mu);
        struct peer_xfer *in = ph->incoming;
        ph->incoming = NULL;
        int stop = ph->stop;
        pthread_mutex_unlock(&ph->mu);
        while (in) {
            struct peer_xfer *x = in;
            in = x->next;
            if (stop || curl_multi_add_handle(ph->multi, x->easy) != CURLM_OK) {
                px_finish(x, stop ? -ECANCELED : -ENOMEM);
                continue;
            }
            x->next = ph->active;
            ph->active = x;
        }
        uint64_t now = s3c_mono_ns(), next_deadline = 0;
        for (struct peer_xfer **pp = &ph->active; *pp;) {
            struct peer_xfer *x = *pp;
            if (x->deadline_ns && !stop) {
                if (x->deadline_ns <= now) { /* curl's own timeout may not count the queue */
                    *pp = x->next;
                    curl_multi_remove_handle(ph->multi, x->easy);
                    px_finish(x, -ETIMEDOUT);
                    continue;
                }
                if (!next_deadline || x->deadline_ns < next_deadline)
                    next_deadline = x->deadline_ns;
            }
            pthread_mutex_lock(&x->mu);
            int cancel = x->cancel || stop;
            int unpause = !cancel && x->want_unpause && x->paused;
            if (unpause)
                x->want_unpause = x->paused = 0;
            pthread_mutex_unlock(&x->mu);
            if (cancel) {
                *pp = x->next;
                curl_multi_remove_handle(ph->multi, x->easy);
                px_finish(x, -ECANCELED);
                continue;
            }
            if (unpause)
                curl_easy_pause(x->easy, CURLPAUSE_CONT); /* may call px_write_cb now */
            pp = &x->next;
        }
        if (stop)
            break;
        int running = 0;
        curl_multi_perform(ph->multi, &running);
        CURLMsg *msg;
        int q;
        while ((msg = curl_multi_info_read(ph->multi, &q))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            struct peer_xfer *x = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            CURLcode cc = msg->data.result;
            for (struct peer_xfer **pp = &ph->active; *pp; pp = &(*pp)->next)
                if (*pp == x) {
                    *pp = x->next;
                    break;
                }
            curl_multi_remove_handle(ph->multi, x->easy);
            px_finish(x, px_curl_rc(cc));
        }
        int wait_ms = 1000;
        if (next_deadline) {
            uint64_t left = next_deadline > now ? (next_deadline - now) / 1000000 + 1 : 1;
            wait_ms = (int)S3C_MIN(left, (uint64_t)wait_ms);
        }
        curl_multi_poll(ph->multi, NULL, 0, wait_ms, NULL);
    }
    return NULL;
}

/* --- building a request ------------------------------------------------------------------ */

/* @s AWS-encoded into @b. */
static int ph_encode(struct buf *b, const char *s, int keep_slash)
{
    size_t cap = strlen(s) * 3 + 1;
    char *enc = malloc(cap);
    int rc = enc && sigv4_uri_encode(s, strlen(s), keep_slash, enc, cap) >= 0 ? buf_puts(b, enc)
                                                                               : -ENOMEM;
    free(enc);
    return rc;
}

static int ph_header(struct curl_slist **l, const char *name, const char *value)
{
    size_t n = strlen(name) + strlen(value) + 3;
    char *line = malloc(n);
    if (!line)
        return -ENOMEM;
    snprintf(line, n, "%s: %s", name, value);
    struct curl_slist *nl = curl_slist_append(*l, line);
    free(line);
    if (!nl)
        return -ENOMEM;
    *l = nl;
    return 0;
}

/* Builds @x's URL, signed headers and easy handle for @r. */
static int px_build(struct peer_http *ph, struct peer_xfer *x, const struct peer_req *r)
{
    struct buf url;
    char amz_date[17], sha[65], authz[1024];
    struct tm tm;
    time_t now = time(NULL);
    size_t nh = 0;
    int rc;
    struct sigv4_kv *hv = calloc(r->n_headers + 5, sizeof(*hv));
    if (!hv)
        return -ENOMEM;
    buf_init(&url, 64u << 10);
    rc = buf_puts(&url, ph->tls ? "https://" : "http://") || buf_puts(&url, r->host) || ph_encode(&url, r->path, 1)
             ? -ENOMEM
             : 0;
    for (size_t i = 0; !rc && i < r->n_query; i++) {
        rc = buf_puts(&url, i ? "&" : "?") || ph_encode(&url, r->query[i].name, 0) ? -ENOMEM : 0;
        if (!rc && r->query[i].value)
            rc = buf_puts(&url, "=") || ph_encode(&url, r->query[i].value, 0) ? -ENOMEM : 0;
    }
    if (rc)
        goto out;
    gmtime_r(&now, &tm);
    strftime(amz_date, sizeof(amz_date), "%Y%m%dT%H%M%SZ", &tm);
    if ((rc = sigv4_sha256_hex(r->body ? r->body : "", r->body ? r->body_len : 0, sha)))
        goto out;
    hv[nh++] = (struct sigv4_kv){"host", r->host};
    hv[nh++] = (struct sigv4_kv){"x-amz-date", amz_date};
    hv[nh++] = (struct sigv4_kv){"x-amz-content-sha256", sha};
    hv[nh++] = (struct sigv4_kv){PEER_HEADER, ph->self};
    if (r->request_id)
        hv[nh++] = (struct sigv4_kv){PEER_REQUEST_ID_HEADER, r->request_id};
    for (size_t i = 0; i < r->n_headers; i++)
        hv[nh++] = r->headers[i];
    struct sigv4_input in = {.method = r->method, .path = r->path, .query = r->query,
                             .n_query = r->n_query, .headers = hv, .n_headers = nh};
    if ((rc = sigv4_sign(&in, PEER_ACCESS_KEY, ph->secret, ph->region, "s3", amz_date, sha,
                         authz, sizeof(authz))))
        goto out;
    for (size_t i = 0; !rc && i < nh; i++)
        rc = ph_header(&x->hdrs, hv[i].name, hv[i].value);
    if (!rc)
        rc = ph_header(&x->hdrs, "Authorization", authz);
    if (!rc && !(x->hdrs = curl_slist_append(x->hdrs, "Expect:"))) /* no 100-continue wait */
        rc = -ENOMEM;
    if (rc)
        goto out;
    x->url = buf_take(&url);
    if (r->body && r->body_len) {
        if (!(x->body = malloc(r->body_len))) {
            rc = -ENOMEM;
            goto out;
        }
        memcpy(x->body, r->body, r->body_len);
        x->body_len = r->body_len;
    }
    CURL *h = x->easy = curl_easy_init();
    if (!h) {
        rc = -ENOMEM;
        goto out;
    }
    curl_easy_setopt(h, CURLOPT_URL, x->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(h, CURLOPT_PRIVATE, (char *)x);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L * 1024);
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, ph->tls ? "https" : "http");
    if (ph->tls) {
        /* the peer must prove it is the HOST of its ring name (an IP SAN for an address) */
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
        if (ph->ca_file)
            curl_easy_setopt(h, CURLOPT_CAINFO, ph->ca_file);
    }
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)ph->connect_ms);
    if (!r->no_stall_limit) {
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)S3C_MAX(1, (ph->stall_ms + 999) / 1000));
    }
    if (r->timeout_ms > 0)
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)r->timeout_ms);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, px_header_cb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, px_write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    if (!strcmp(r->method, "HEAD")) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (!strcmp(r->method, "POST")) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, x->body ? x->body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)x->body_len);
    } else if (strcmp(r->method, "GET")) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
    }
out:
    buf_free(&url);
    free(hv);
    return rc;
}

static int px_new(struct peer_http *ph, const struct peer_req *r, int streaming,
                  struct peer_xfer **out)
{
    struct peer_xfer *x = calloc(1, sizeof(*x));
    if (!x)
        return -ENOMEM;
    x->magic = PX_MAGIC;
    x->ph = ph;
    atomic_init(&x->refs, 1);
    pthread_mutex_init(&x->mu, NULL);
    x->streaming = streaming;
    x->clen = -1;
    buf_init(&x->body_in, PEER_BODY_MAX);
    int rc = px_build(ph, x, r);
    if (!rc && streaming) {
        x->rcap = PEER_STREAM_RING;
        if (!(x->ring = malloc(x->rcap)))
            rc = -ENOMEM;
    }
    if (rc) {
        px_free(x);
        return rc;
    }
    *out = x;
    return 0;
}

static void px_queue(struct peer_http *ph, struct peer_xfer *x)
{
    pthread_mutex_lock(&ph->mu);
    x->next = ph->incoming;
    ph->incoming = x;
    pthread_mutex_unlock(&ph->mu);
    curl_multi_wakeup(ph->multi);
}

/* --- API ----------------------------------------------------------------------------------- */

int peer_call_start(struct peer_http *ph, const struct peer_req *r, peer_done_f *done, void *cls)
{
    struct peer_xfer *x;
    CHECK_OBJ_NOTNULL(ph, PH_MAGIC);
    int rc = px_new(ph, r, 0, &x);
    if (rc)
        return rc;
    x->done_cb = done;
    x->done_cls = cls;
    if (r->timeout_ms > 0)
        x->deadline_ns = s3c_mono_ns() + (uint64_t)r->timeout_ms * 1000000u;
    px_queue(ph, x);
    return 0;
}

struct many {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t left;
};

struct many_one {
    struct many *m;
    struct peer_result *res;
};

static void many_done(void *cls, struct peer_xfer *x)
{
    struct many_one *o = cls;
    o->res->rc = x->rc;
    o->res->status = x->status;
    o->res->body = x->body_in; /* moved */
    buf_init(&x->body_in, PEER_BODY_MAX);
    pthread_mutex_lock(&o->m->mu);
    o->m->left--;
    pthread_cond_broadcast(&o->m->cv);
    pthread_mutex_unlock(&o->m->mu);
}

void peer_call_many(struct peer_http *ph, const struct peer_req *r, size_t n,
                    struct peer_result *out)
{
    struct many m;
    struct many_one *ones = calloc(n ? n : 1, sizeof(*ones));
    pthread_mutex_init(&m.mu, NULL);
    pthread_cond_init(&m.cv, NULL);
    m.left = n;
    for (size_t i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof(out[i]));
        buf_init(&out[i].body, PEER_BODY_MAX);
        int rc = -ENOMEM;
        if (ones) {
            ones[i] = (struct many_one){&m, &out[i]};
            rc = peer_call_start(ph, &r[i], many_done, &ones[i]);
        }
        if (rc) {
            out[i].rc = rc;
            pthread_mutex_lock(&m.mu);
            m.left--;
            pthread_mutex_unlock(&m.mu);
        }
    }
    pthread_mutex_lock(&m.mu);
    while (m.left)
        pthread_cond_wait(&m.cv, &m.mu);
    pthread_mutex_unlock(&m.mu);
    pthread_mutex_destroy(&m.mu);
    pthread_cond_destroy(&m.cv);
    free(ones);
}

/* Admits @x (client tag @client) under the limits, or -EBUSY. */
static int ph_stream_admit(struct peer_http *ph, struct peer_xfer *x, const char *client)
{
    if (!(x->s_client = strdup(client ? client : "")))
        return -ENOMEM;
    int rc = 0;
    unsigned same_client = 0;
    pthread_mutex_lock(&ph->mu);
    for (struct peer_xfer *o = ph->streams; ph->max_streams_client && o; o = o->snext)
        same_client += !strcmp(o->s_client, x->s_client);
    /* max_streams <= the connections kept to one peer: no stream waits for a connection */
    if (ph->n_streams >= ph->max_streams ||
        (ph->max_streams_client && same_client >= ph->max_streams_client)) {
        ph->streams_refused++;
        rc = -EBUSY;
    } else {
        x->snext = ph->streams;
        ph->streams = x;
        ph->n_streams++;
        x->s_counted = 1;
    }
    pthread_mutex_unlock(&ph->mu);
    return rc;
}

int peer_stream_start(struct peer_http *ph, const struct peer_req *r, const char *client,
                      struct peer_xfer **out)
{
    struct peer_xfer *x;
    CHECK_OBJ_NOTNULL(ph, PH_MAGIC);
    int rc = px_new(ph, r, 1, &x);
    if (rc)
        return rc;
    if ((rc = ph_stream_admit(ph, x, client))) {
        px_free(x);
        return rc;
    }
    atomic_fetch_add(&x->refs, 1); /* the caller's */
    x->users = 1;
    px_queue(ph, x);
    *out = x;
    return 0;
}

int peer_stream_headers(struct peer_xfer *x, struct peer_waiter *w)
{
    int rc;
    CHECK_OBJ_NOTNULL(x, PX_MAGIC);
    pthread_mutex_lock(&x->mu);
    if (x->headers_done)
        rc = 0;
    else if (x->done)
        rc = x->rc ? x->rc : -ECONNRESET;
    else {
        px_arm_locked(x, w);
        rc = -EAGAIN;
    }
    pthread_mutex_unlock(&x->mu);
    return rc;
}

ssize_t peer_stream_read(struct peer_xfer *x, void *buf, size_t max, struct peer_waiter *w)
{
    ssize_t n;
    int wake = 0;
    CHECK_OBJ_NOTNULL(x, PX_MAGIC);
    pthread_mutex_lock(&x->mu);
    if (x->rlen) {
        size_t k = S3C_MIN(max, x->rlen);
        size_t first = S3C_MIN(k, x->rcap - x->rhead);
        memcpy(buf, x->ring + x->rhead, first);
        memcpy((char *)buf + first, x->ring, k - first);
        x->rhead = (x->rhead + k) % x->rcap;
        x->rlen -= k;
        if (!x->rlen)
            x->rhead = 0;
        n = (ssize_t)k;
        /* resume a paused transfer once half the ring is free (not per read) */
        if (x->paused && !x->want_unpause && x->rlen <= x->rcap / 2) {
            x->want_unpause = 1;
            wake = 1;
        }
    } else if (x->done) {
        n = x->rc;
    } else {
        if (x->paused && !x->want_unpause) { /* empty and paused: cannot happen, but never hang */
            x->want_unpause = 1;
            wake = 1;
        }
        px_arm_locked(x, w);
        n = -EAGAIN;
    }
    pthread_mutex_unlock(&x->mu);
    if (wake)
        curl_multi_wakeup(x->ph->multi);
    return n;
}

void peer_stream_cancel_wait(struct peer_xfer *x, struct peer_waiter *w)
{
    if (!x)
        return;
    pthread_mutex_lock(&x->mu);
    if (x->w == w) {
        x->w = NULL;
        w->armed = 0;
    }
    pthread_mutex_unlock(&x->mu);
}

void peer_http_stream_stats(struct peer_http *ph, unsigned *open, uint64_t *refused)
{
    pthread_mutex_lock(&ph->mu);
    *open = ph->n_streams;
    *refused = ph->streams_refused;
    pthread_mutex_unlock(&ph->mu);
}

int peer_xfer_rc(const struct peer_xfer *x)
{
    return x->rc;
}

long peer_xfer_status(const struct peer_xfer *x)
{
    return x->status;
}

int64_t peer_xfer_content_length(const struct peer_xfer *x)
{
    return x->clen;
}

size_t peer_xfer_nheaders(const struct peer_xfer *x)
{
    return x->nrh;
}

const struct peer_hdr *peer_xfer_header(const struct peer_xfer *x, size_t i)
{
    return i < x->nrh ? &x->rh[i] : NULL;
}

const char *peer_xfer_find_header(const struct peer_xfer *x, const char *name)
{
    for (size_t i = 0; i < x->nrh; i++)
        if (!strcasecmp(x->rh[i].name, name))
            return x->rh[i].value;
    return NULL;
}

const struct buf *peer_xfer_body(const struct peer_xfer *x)
{
    return &x->body_in;
}

int peer_http_new(const struct peer_http_opts *o, struct peer_http **out)
{
    pthread_once(&peer_curl_once, peer_curl_init);
    if (peer_curl_rc)
        return peer_curl_rc;
    struct peer_http *ph = calloc(1, sizeof(*ph));
    if (!ph)
        return -ENOMEM;
    ph->magic = PH_MAGIC;
    pthread_mutex_init(&ph->mu, NULL);
    ph->self = strdup(o->self ? o->self : "");
    ph->secret = strdup(o->secret ? o->secret : "");
    ph->region = strdup(o->region ? o->region : "us-east-1");
    ph->tls = o->tls;
    int ca_ok = !o->ca_file || !*o->ca_file || (ph->ca_file = strdup(o->ca_file));
    ph->connect_ms = o->connect_ms > 0 ? o->connect_ms : 5000;
    ph->stall_ms = o->stall_ms > 0 ? o->stall_ms : 30000;
    ph->max_streams = o->max_streams && o->max_streams < (unsigned)PEER_HOST_CONNS
                          ? o->max_streams
                          : (unsigned)PEER_HOST_CONNS;
    ph->max_streams_client = o->max_streams_client;
    ph->multi = curl_multi_init();
    int rc = ph->self && ph->secret && ph->region && ph->multi && ca_ok ? 0 : -ENOMEM;
    if (!rc)
        curl_multi_setopt(ph->multi, CURLMOPT_MAX_HOST_CONNECTIONS, PEER_HOST_CONNS);
    if (!rc && (rc = -pthread_create(&ph->thr, NULL, ph_thread, ph)) == 0)
        ph->started = 1;
    if (rc) {
        peer_http_free(ph);
        return rc;
    }
    *out = ph;
    return 0;
}

void peer_http_free(struct peer_http *ph)
{
    if (!ph)
        return;
    CHECK_OBJ_NOTNULL(ph, PH_MAGIC);
    if (ph->started) {
        pthread_mutex_lock(&ph->mu);
        ph->stop = 1;
        pthread_mutex_unlock(&ph->mu);
        curl_multi_wakeup(ph->multi);
        pthread_join(ph->thr, NULL);
    }
    if (ph->multi)
        curl_multi_cleanup(ph->multi);
    /* streams still referenced outlive @ph: their release must not reach back into it */
    for (struct peer_xfer *x = ph->streams; x; x = x->snext)
        x->s_counted = 0;
    ph->streams = NULL;
    pthread_mutex_destroy(&ph->mu);
    free(ph->self);
    if (ph->secret)
        memset(ph->secret, 0, strlen(ph->secret));
    free(ph->secret);
    free(ph->region);
    free(ph->ca_file);
    ph->magic = 0;
    free(ph);
}
