/*
 * req.c: one request from the first call of libmicrohttpd's access handler to its completion:
 * the state (struct req; its header and query accessors are in req_kv.c), routing,
 * authentication and the handler's begin, body and end calls, jobs on the work queue with
 * suspend/resume, the rate limit and fair share of its response, and at completion what went
 * out: accounting, the access line, and a re-read of a cache file a response could not send
 * whole.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_acked */
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "acct/jobs.h"
#include "acct/stats.h"
#include "auth.h"
#include "lib/arr.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "lib/workq.h"
#include "lib/xml.h"
#include "proxy.h"
#include "req.h"
#include "req_mhd.h"
#include "reqbody.h"
#include "respond.h"
#include "router.h"
#include "server.h"
#include "upload.h"

/* Every suspend and resume of a request's connection goes through these two: the registry
 * (park.h) sees each parking. */
static void req_park(struct req *rq, enum park_why why)
{
    park_enter(&rq->park, why);
    rq->suspended = 1;
    MHD_suspend_connection(rq->conn);
}

static void req_unpark(struct req *rq)
{
    park_leave(&rq->park); /* before the resume: the request may be freed right after it */
    rq->suspended = 0;
    MHD_resume_connection(rq->conn);
}

void req_suspend(struct req *rq, enum park_why why)
{
    req_park(rq, why);
}

void req_resume(struct req *rq)
{
    req_unpark(rq);
}

/* A GET's wait ends: what it waited for was queued for a worker for part of it when the job
 * resuming it (on this thread) was (acct/stall.h). A no-op for requests not counted. */
static void req_stall_resume(struct req *rq)
{
    uint64_t queued, started;
    workq_current(&queued, &started);
    stall_req_resume(&rq->stall, s3c_mono_ns(), queued, started);
}

/* A cache wait: the lookup and a fetch the request started are the backend's time; bytes of
 * another request's fill are "fill" (a coalesced read waits for the fill it joined). */
static void req_wait_suspend(struct req *rq, enum park_why why)
{
    stall_req_suspend(&rq->stall,
                      rq->answered && rq->cache_how == CACHE_COALESCED ? STALL_FILL
                                                                       : STALL_BACKEND,
                      s3c_mono_ns());
    req_park(rq, why);
}

static void req_waiter_suspend(void *cls)
{
    struct req *rq;
    CAST_OBJ_NOTNULL(rq, cls, REQ_MAGIC);
    req_wait_suspend(rq, PARK_CACHE);
}

static void req_pwaiter_suspend(void *cls)
{
    struct req *rq;
    CAST_OBJ_NOTNULL(rq, cls, REQ_MAGIC);
    req_wait_suspend(rq, PARK_PEER);
}

static void req_waiter_resume(void *cls)
{
    struct req *rq;
    CAST_OBJ_NOTNULL(rq, cls, REQ_MAGIC);
    req_stall_resume(rq);
    req_unpark(rq);
}

static struct req *req_of_park(const struct park_entry *e)
{
    struct req *rq = (struct req *)((char *)e - offsetof(struct req, park));
    CHECK_OBJ_NOTNULL(rq, REQ_MAGIC);
    return rq;
}

int req_release_parked(struct park_entry *e, void *cls)
{
    (void)cls;
    struct req *rq = req_of_park(e);
    if (atomic_load(&e->why) != PARK_CACHE || !rq->obj ||
        !cache_obj_cancel_wait(rq->obj, &rq->waiter))
        return 0; /* woken meanwhile, or waiting for what ends by itself */
    rq->released = 1;
    req_unpark(rq);
    return 1;
}

void req_describe(const struct park_entry *e, char *buf, size_t cap)
{
    const struct req *rq = req_of_park(e);
    struct buf b;
    buf_init(&b, cap > 1 ? cap - 1 : 1);
    buf_printf(&b, "%s ", rq->id);
    log_buf_escaped(&b, rq->method ? rq->method : "-");
    buf_puts(&b, " /");
    log_buf_escaped(&b, rq->bucket ? rq->bucket : "");
    if (rq->key) {
        buf_puts(&b, "/");
        log_buf_escaped(&b, rq->key);
    }
    snprintf(buf, cap, "%s", b.p ? b.p : rq->id);
    buf_free(&b);
}

void req_first_byte(struct req *rq)
{
    if (rq->job && !rq->stall.first_ns)
        stall_req_first_byte(&rq->stall, s3c_mono_ns());
}

uint64_t req_tcp_bytes_acked(struct req *rq)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(rq->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct tcp_info ti;
    socklen_t sl = sizeof(ti);
    if (!ci || getsockopt(ci->connect_fd, IPPROTO_TCP, TCP_INFO, &ti, &sl) != 0)
        return 0;
    return ti.tcpi_bytes_acked;
}

static struct req *req_new(struct server *srv, struct MHD_Connection *conn, const char *method)
{
    struct req *rq = calloc(1, sizeof(*rq));
    if (!rq)
        return NULL;
    rq->magic = REQ_MAGIC;
    rq->srv = srv;
    rq->conn = conn;
    rq->method = method;
    rq->t_start_ns = s3c_mono_ns();
    rq->cache_how = -1;
    unsigned long seq = __atomic_add_fetch(&srv->req_seq, 1, __ATOMIC_RELAXED);
    snprintf(rq->id, sizeof(rq->id), "%08X%08lX", (unsigned)(srv->start_ns & 0xffffffffu),
             seq & 0xffffffffUL);
    rq->waiter.suspend = req_waiter_suspend;
    rq->waiter.resume = req_waiter_resume;
    rq->waiter.cls = rq;
    rq->pwaiter.suspend = req_pwaiter_suspend;
    rq->pwaiter.resume = req_waiter_resume;
    rq->pwaiter.cls = rq;
    rq->auth.payload = SIGV4_PAYLOAD_UNSIGNED; /* until a signature says otherwise */
    buf_init(&rq->body, XML_BODY_MAX);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, rq->addr,
                      sizeof(rq->addr));
        else if (sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, rq->addr,
                      sizeof(rq->addr));
    }
    if (!rq->addr[0])
        snprintf(rq->addr, sizeof(rq->addr), "-");
    park_add(srv->park, &rq->park);
    return rq;
}

static void req_free(struct req *rq)
{
    if (!rq)
        return;
    park_remove(&rq->park); /* first: a shutdown walking the registry holds it till then */
    if (rq->obj) {
        cache_obj_cancel_wait(rq->obj, &rq->waiter);
        cache_obj_release(rq->obj);
    }
    upload_free(rq);
    reqbody_free(rq);
    buf_free(&rq->body);
    if (rq->job_state_free)
        rq->job_state_free(rq->job_state);
    if (rq->sc)
        stats_client_release(rq->srv->stats, rq->sc);
    if (rq->job)
        jobs_release(rq->srv->jobs, rq->job);
    if (rq->rlb) {
        rl_timer_cancel(rq->srv->rl, &rq->rl_timer);
        rl_bucket_release(rq->srv->rl, rq->rlb);
    }
    fair_conn_end(rq->srv->fair, &rq->fair, 0); /* normally done by server_completed */
    for (size_t i = 0; i < rq->n_query; i++) {
        free((char *)rq->query[i].name);
        free((char *)rq->query[i].value);
    }
    free(rq->query);
    free(rq->headers);
    free(rq->bucket);
    free(rq->key);
    free(rq->path);
    free(rq->raw_path);
    rq->magic = 0;
    free(rq);
}

static void req_timer_resume(void *arg)
{
    struct req *rq = arg;
    req_stall_resume(rq);
    req_unpark(rq);
}

int req_throttle(struct req *rq, size_t *max)
{
    uint64_t wait_ns = 0;
    if (!rq->rlb)
        return 0;
    size_t got = rl_take(rq->rlb, *max, &wait_ns);
    if (got) {
        *max = got;
        return 0;
    }
    stall_req_suspend(&rq->stall, STALL_RATE, s3c_mono_ns());
    req_park(rq, PARK_RATE);
    rl_timer_arm(rq->srv->rl, &rq->rl_timer, wait_ns, req_timer_resume, rq);
    return -EAGAIN;
}

void req_body_sent(struct req *rq, size_t granted, ssize_t n)
{
    if (rq->rlb)
        rl_refund(rq->rlb, n > 0 ? granted - (size_t)n : granted);
    if (n <= 0)
        return;
    rq->bytes_out_streamed += (uint64_t)n;
    if (rq->sc)
        stats_client_sent(rq->sc, (uint64_t)n);
}

void req_fair_start(struct req *rq)
{
    if (!rq->srv->fair || rq->is_peer) /* a peer's answer: its client is paced where it is */
        return;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(rq->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci)
        fair_conn_start(rq->srv->fair, &rq->fair, ci->connect_fd,
                        rq->access_key[0] ? rq->access_key : "anonymous", rq->addr);
}

struct req_job {
    struct req *rq;
    void (*fn)(struct req *rq);
};

static void req_job_main(void *arg)
{
    struct req_job *j = arg;
    struct req *rq = j->rq;
    j->fn(rq);
    free(j);
    req_job_release(rq); /* the job's own hold */
}

void req_job_hold(struct req *rq)
{
    atomic_fetch_add(&rq->job_holds, 1);
}

void req_job_release(struct req *rq)
{
    if (atomic_fetch_sub(&rq->job_holds, 1) != 1)
        return;
    req_unpark(rq);
}

static int req_run_on(struct req *rq, struct workq *wq, void (*fn)(struct req *rq));

int req_run_job(struct req *rq, void (*fn)(struct req *rq))
{
    return req_run_on(rq, rq->srv->wq, fn);
}

int req_run_wait_job(struct req *rq, void (*fn)(struct req *rq))
{
    return req_run_on(rq, rq->srv->wq_wait, fn);
}

static int req_run_on(struct req *rq, struct workq *wq, void (*fn)(struct req *rq))
{
    struct req_job *j = malloc(sizeof(*j));
    if (!j)
        return -ENOMEM;
    j->rq = rq;
    j->fn = fn;
    atomic_store(&rq->job_holds, 1);
    req_park(rq, PARK_JOB);
    int rc = workq_submit(wq, WORKQ_HIGH, req_job_main, j);
    if (rc) {
        free(j);
        req_unpark(rq);
    }
    return rc;
}

static enum MHD_Result req_collect_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                          const char *value)
{
    struct req *rq = cls;
    if (ARR_GROW(rq->headers, rq->n_headers, 1, rq->headers_cap)) {
        rq->rc = -ENOMEM;
        return MHD_NO;
    }
    struct sigv4_kv *h = rq->headers;
    h[rq->n_headers].name = key;
    h[rq->n_headers].value = value ? value : "";
    rq->n_headers++;
    rq->header_bytes += strlen(key) + 2 + strlen(h[rq->n_headers - 1].value) + 2;
    return MHD_YES;
}

struct req_args {
    struct req *rq;
    int bad;
};

static enum MHD_Result req_collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value)
{
    struct req_args *ra = cls;
    struct req *rq = ra->rq;
    if (ARR_GROW(rq->query, rq->n_query, 1, rq->query_cap)) {
        ra->bad = -ENOMEM;
        return MHD_NO;
    }
    struct sigv4_kv *q = rq->query;
    char *k = url_decode(key, strlen(key));
    char *v = value ? url_decode(value, strlen(value)) : NULL;
    if (!k || (value && !v)) {
        free(k);
        free(v);
        ra->bad = -S3E_INVALID_URI;
        return MHD_NO;
    }
    q[rq->n_query].name = k;
    q[rq->n_query].value = v;
    rq->n_query++;
    return MHD_YES;
}

/* The decoded query parameters into rq->query: 0, -S3E_INVALID_URI or -ENOMEM. */
static int req_collect_query(struct req *rq)
{
    struct req_args ra = {rq, 0};
    MHD_get_connection_values(rq->conn, MHD_GET_ARGUMENT_KIND, req_collect_arg, &ra);
    return ra.bad;
}

/* A refused request's body read and dropped so that its client reads the error rather than a
 * reset: at most this many bytes, within --idle-timeout from the request's start. */
#define REQ_SWALLOW_MAX (16ull << 20)

/* Decides how to answer an early error when the client may already be sending a body: with
 * "Expect: 100-continue" (or no body, or a declared one over REQ_SWALLOW_MAX) answer now;
 * with a small body, or a chunked one, swallow it and answer at the end (req_swallow_ok()
 * cuts a chunked body that grows past the bound, or a trickle). */
static int req_fail_early(struct req *rq, int rc)
{
    const char *cl = req_header(rq, "Content-Length");
    const char *te = req_header(rq, "Transfer-Encoding");
    unsigned long long n = cl ? strtoull(cl, NULL, 10) : 0;
    rq->rc = rc;
    upload_abandon(rq); /* what a begin reserved is not held while a body is swallowed */
    if (req_expects_continue(rq) || (!te && n == 0) || n > REQ_SWALLOW_MAX)
        return respond_error(rq, rc);
    rq->swallowing = 1;
    return REQ_OK;
}

/* Content-Length, when sent, is a decimal number below 2^64-1: libmicrohttpd takes
 * 18446744073709551615 as "length unknown", which would let a body of any length through. */
static int req_content_length_ok(const char *cl)
{
    uint64_t v = 0;
    if (!*cl)
        return 0;
    for (const char *p = cl; *p; p++) {
        if (*p < '0' || *p > '9' || v > (UINT64_MAX - 9) / 10)
            return 0;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    return v < UINT64_MAX;
}

/* How the body's end is found must be beyond doubt (RFC 9112 6.1-6.3): a proxy in front
 * that read the framing otherwise would take the bytes after it for another request (request
 * smuggling). libmicrohttpd 0.9.75 took the first of two Content-Length fields and read a body
 * of a Transfer-Encoding other than exactly "chunked" up to the connection's end (1.0.1 refuses
 * the latter itself; these checks stay as a second line). So a
 * request with more than one Content-Length field, more than one Transfer-Encoding field, a
 * Transfer-Encoding other than "chunked", both Transfer-Encoding and Content-Length, or a
 * Transfer-Encoding in HTTP/1.0 (@version), is refused: NULL when the framing is unambiguous,
 * else the reason. */
static const char *req_framing_error(const struct req *rq, const char *version)
{
    int n_cl = 0, n_te = 0;
    const char *te = NULL;
    for (size_t i = 0; i < rq->n_headers; i++) {
        if (!strcasecmp(rq->headers[i].name, "Content-Length"))
            n_cl++;
        else if (!strcasecmp(rq->headers[i].name, "Transfer-Encoding")) {
            n_te++;
            te = rq->headers[i].value;
        }
    }
    if (n_cl > 1)
        return "A request must not carry more than one Content-Length header";
    if (n_te > 1)
        return "A request must not carry more than one Transfer-Encoding header";
    if (te && strcasecmp(te, "chunked"))
        return "Transfer-Encoding must be chunked (no other coding is supported)";
    if (te && n_cl)
        return "A request must not carry both Content-Length and Transfer-Encoding";
    if (te && version && strcmp(version, "HTTP/1.1"))
        return "Transfer-Encoding is defined for HTTP/1.1 requests only";
    return NULL;
}

/* Keeps what the client may learn about a failed authentication for its error document: the
 * message of a malformed or refused request (not of a bad signature), and S3's <Region> or
 * <HeadersNotSigned>. */
static void req_auth_detail(struct req *rq, int rc, const struct errmsg *em)
{
    switch (rc) {
    case -S3E_AUTH_HEADER_MALFORMED:
    case -S3E_AUTH_QUERY_MALFORMED:
    case -S3E_ACCESS_DENIED:
    case -S3E_INVALID_ARGUMENT:
    case -S3E_NOT_IMPLEMENTED:
    case -S3E_MISSING_SECURITY_HEADER:
        snprintf(rq->err_msg, sizeof(rq->err_msg), "%s", em->buf);
        break;
    default:
        break;
    }
    if (rq->auth.region_wrong) {
        rq->err_elem = "Region";
        snprintf(rq->err_elem_value, sizeof(rq->err_elem_value), "%s", rq->srv->cf->region);
    } else if (rq->auth.not_signed[0] && rc == -S3E_ACCESS_DENIED) {
        rq->err_elem = "HeadersNotSigned";
        snprintf(rq->err_elem_value, sizeof(rq->err_elem_value), "%s", rq->auth.not_signed);
    }
}

/* x-s3cached-job and x-s3cached-job-need (acct/jobs.h): checked on every request that
 * carries them; a GET is charged to its job (the key's name without the header) and its time
 * accounted from now on (acct/stall.h). 0, or -S3E_INVALID_ARGUMENT with the reason. */
static int req_job_begin(struct req *rq, uint64_t key_need)
{
    struct server *srv = rq->srv;
    const char *name = req_header(rq, JOBS_HEADER), *nh = req_header(rq, JOBS_NEED_HEADER);
    const char *why = name ? jobs_check_name(name) : NULL;
    uint64_t need = 0;
    if (why) {
        snprintf(rq->err_msg, sizeof(rq->err_msg), "%s: %s", JOBS_HEADER, why);
        return -S3E_INVALID_ARGUMENT;
    }
    if (nh && (why = conf_parse_rate(nh, &need))) {
        snprintf(rq->err_msg, sizeof(rq->err_msg), "%s: %s", JOBS_NEED_HEADER, why);
        return -S3E_INVALID_ARGUMENT;
    }
    if (nh && !need)
        need = JOBS_NEED_CLEAR; /* "0": no need any more */
    if (rq->op != OP_GET || !rq->sc)
        return 0;
    rq->job = jobs_ref(srv->jobs, name ? name : rq->access_key[0] ? rq->access_key : "anonymous",
                       rq->authed ? rq->access_key : NULL, need, key_need);
    stall_req_begin(&rq->stall, stats_client_stall(rq->sc), jobs_acc(rq->job), rq->t_start_ns);
    return 0;
}

/* A peer's request keeps the id of the client request it serves (PEER_REQUEST_ID_HEADER),
 * so the error document and both gateways' access lines carry the id the client saw. */
static void req_adopt_id(struct req *rq)
{
    const char *id = req_header(rq, PEER_REQUEST_ID_HEADER);
    size_t n = id ? strlen(id) : 0;
    if (!n || n >= sizeof(rq->id))
        return;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'A' && id[i] <= 'F')))
            return;
    memcpy(rq->id, id, n + 1);
}

static int req_start(struct req *rq, const char *url, const char *version)
{
    struct server *srv = rq->srv;
    struct errmsg em = {{0}};
    MHD_get_connection_values(rq->conn, MHD_HEADER_KIND, req_collect_header, rq);
    if (rq->rc) /* no memory for the header list: nothing can be checked */
        return respond_error(rq, rq->rc);
    /* libmicrohttpd refuses (431) only a header section that overflows its connection pool,
     * which is larger than the limit: the limit itself is enforced here, as S3 does. */
    rq->header_bytes += strlen(rq->method) + 1 + strlen(url) + sizeof(" HTTP/1.1\r\n") - 1;
    if (rq->header_bytes > srv->cf->max_header_size)
        return req_fail_early(rq, -S3E_HEADER_TOO_LARGE);
    const char *framing = req_framing_error(rq, version);
    if (framing) { /* answered now, and the connection closed: nothing after it is read */
        rq->rc = -S3E_BAD_REQUEST;
        rq->must_close = 1;
        snprintf(rq->err_msg, sizeof(rq->err_msg), "%s", framing);
        return respond_error(rq, rq->rc);
    }
    const char *cl = req_header(rq, "Content-Length");
    if (cl && !req_content_length_ok(cl)) { /* answered now: the body's end is unknown */
        rq->rc = -S3E_INVALID_ARGUMENT;
        rq->must_close = 1;
        snprintf(rq->err_msg, sizeof(rq->err_msg),
                 "Content-Length must be a decimal number of bytes below 2^64-1");
        return respond_error(rq, rq->rc);
    }
    /* Authentication comes first, as with S3: a bad name or key from an unauthenticated
     * client is AccessDenied, not a hint about what exists. */
    int route_rc = req_collect_query(rq);
    if (!route_rc)
        route_rc = router_route(rq, url, req_header(rq, "Host"), srv->cf->virtual_host_domain);
    if (!rq->path)
        return req_fail_early(rq, route_rc);
    int rc;
    /* Only GET or HEAD of exactly /_/health goes without authentication. A CORS preflight
     * never carries credentials (browsers do not sign it): OPTIONS is answered without
     * authentication, as S3 does, and reveals nothing (400 without an Origin, 403 with one),
     * whatever signature or presigned query it carries. */
    int health = !route_rc && rq->op == OP_ADMIN && !strcmp(rq->path, "/_/health") &&
                 (!strcmp(rq->method, "GET") || !strcmp(rq->method, "HEAD"));
    int preflight = !route_rc && rq->op == OP_OPTIONS;
    if (!health && !preflight) {
        rc = auth_check(srv->auth, rq, &em);
        if (rc) {
            if (em.buf[0])
                log_debug("auth %s %s: %s: %s", rq->method, rq->path, s3c_strerror(rc), em.buf);
            req_auth_detail(rq, rc, &em);
            /* Failed logins share one row: many addresses must not crowd real clients out. */
            if (srv->cf->accounting)
                rq->sc = stats_client_ref(srv->stats, "unauthenticated", NULL);
            return req_fail_early(rq, rc);
        }
        rq->authed = 1;
    }
    if (rq->is_peer) {
        /* The request of a client of another gateway: it keeps that request's id, and its
         * bytes count as peer traffic, apart from clients (they counted where they entered). */
        req_adopt_id(rq);
        if (srv->cf->accounting)
            rq->sc = stats_client_ref(srv->stats, rq->peer_name, STATS_PEER_ADDR);
    } else if (srv->cf->accounting) {
        rq->sc = stats_client_ref(srv->stats, rq->access_key[0] ? rq->access_key : "anonymous",
                                  rq->addr);
    }
    if (route_rc)
        return req_fail_early(rq, route_rc);
    uint64_t rate = 0, need = 0;
    if (rq->access_key[0] && !rq->is_peer)
        auth_limits(srv->auth, rq->access_key, &rate, &need);
    if (rate && rq->op != OP_ADMIN)
        rq->rlb = rl_bucket_ref(srv->rl, rq->access_key, rate);
    /* a peer's request is charged to no job: the gateway the client entered charges it */
    if (srv->jobs && !rq->is_peer && (rc = req_job_begin(rq, need)))
        return req_fail_early(rq, rc);
    if (proxy_route(rq, url))
        return REQ_OK; /* the owner answers (http/proxy.c) */
    rq->h = srv->handlers[rq->op];
    if (!rq->h)
        return req_fail_early(rq, -S3E_NOT_IMPLEMENTED);
    if (!rq->h->checks_payload && (rc = reqbody_begin(rq)))
        return req_fail_early(rq, rc);
    if (rq->h->begin) {
        rc = rq->h->begin(rq);
        if (rq->answered)
            return REQ_OK;
        if (rc)
            return req_fail_early(rq, rc);
    }
    return REQ_OK;
}

/* Slow bodies (slowloris): libmicrohttpd's timeout only measures silence, so a client sending
 * a byte now and then would hold its connection and staged file forever. As with Apache's
 * mod_reqtimeout (body=TIMEOUT,MinRate=RATE), a request gets --idle-timeout for its headers and
 * body, extended by one second per REQ_BODY_MIN_RATE bytes received. */
#define REQ_BODY_MIN_RATE 1024 /* bytes/s */

/* Whether a refused request's body may still be swallowed: 0 once it is past REQ_SWALLOW_MAX
 * bytes or --idle-timeout (not extended by its rate: nothing it sends will be kept). */
static int req_swallow_ok(const struct server *srv, const struct req *rq)
{
    uint64_t elapsed_ns = s3c_mono_ns() - rq->t_start_ns;
    return rq->bytes_in <= REQ_SWALLOW_MAX &&
           elapsed_ns <= (uint64_t)srv->cf->idle_timeout * 1000000ull;
}

static int req_body_too_slow(const struct server *srv, const struct req *rq)
{
    uint64_t elapsed_ns = s3c_mono_ns() - rq->t_start_ns;
    uint64_t allowed_ns = (uint64_t)srv->cf->idle_timeout * 1000000ull +
                          rq->bytes_in / REQ_BODY_MIN_RATE * 1000000000ull;
    return elapsed_ns > allowed_ns;
}

enum MHD_Result req_access(void *cls, struct MHD_Connection *conn, const char *url,
                           const char *method, const char *version, const char *upload_data,
                           size_t *upload_data_size, void **con_cls)
{
    struct server *srv;
    CAST_OBJ_NOTNULL(srv, cls, SERVER_MAGIC);
    struct req *rq = *con_cls;
    if (!rq) {
        rq = req_new(srv, conn, method);
        if (!rq)
            return MHD_NO;
        *con_cls = rq;
        return req_start(rq, url, version) == REQ_OK ? MHD_YES : MHD_NO;
    }
    CHECK_OBJ_NOTNULL(rq, REQ_MAGIC);
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        rq->bytes_in += n;
        if (rq->sc)
            stats_client_received(rq->sc, n);
        if (!rq->rc && !rq->answered) {
            rq->rc = reqbody_update(rq, upload_data, n);
            if (!rq->rc && rq->h && rq->h->body)
                rq->rc = rq->h->body(rq, upload_data, n);
        }
        *upload_data_size = 0;
        if (rq->swallowing && !req_swallow_ok(srv, rq)) {
            log_info("%s %s %s: refused, and its body goes on past %llu bytes or %llu ms: "
                     "closing",
                     rq->id, rq->method, rq->path ? rq->path : "-",
                     (unsigned long long)REQ_SWALLOW_MAX,
                     (unsigned long long)srv->cf->idle_timeout);
            return MHD_NO;
        }
        if (req_body_too_slow(srv, rq)) {
            log_info("%s %s %s: body slower than %d bytes/s (%llu bytes in %llu ms): closing",
                     rq->id, rq->method, rq->path ? rq->path : "-", REQ_BODY_MIN_RATE,
                     (unsigned long long)rq->bytes_in,
                     (unsigned long long)((s3c_mono_ns() - rq->t_start_ns) / 1000000));
            return MHD_NO; /* no answer is possible mid-body: the connection is closed */
        }
        return MHD_YES;
    }
    if (rq->answered)
        return MHD_YES;
    if (rq->released) { /* the server stops: what it waited for will not come */
        rq->must_close = 1;
        return respond_error_msg(rq, -S3E_SERVICE_UNAVAILABLE, "The server is shutting down.") ==
                       REQ_OK
                   ? MHD_YES
                   : MHD_NO;
    }
    if (rq->rc)
        return respond_error(rq, rq->rc) == REQ_OK ? MHD_YES : MHD_NO;
    if (!rq->h || !rq->h->end)
        return respond_error(rq, -S3E_NOT_IMPLEMENTED) == REQ_OK ? MHD_YES : MHD_NO;
    /* The whole body is in: nothing is done with it unless it is the one declared. */
    if ((rq->rc = reqbody_finish(rq)))
        return respond_error(rq, rq->rc) == REQ_OK ? MHD_YES : MHD_NO;
    if (!rq->busy) { /* the request is now ours to finish: shutdown waits for it */
        rq->busy = 1;
        __atomic_add_fetch(&srv->inflight, 1, __ATOMIC_RELAXED);
    }
    int r = rq->h->end(rq);
    return r == REQ_OK ? MHD_YES : MHD_NO;
}

static void req_access_log(struct req *rq, enum MHD_RequestTerminationCode toe, uint64_t ms_x10)
{
    if (!log_enabled(S3C_LOG_INFO))
        return;
    struct buf b;
    char ts[32];
    buf_init(&b, 8192);
    s3c_iso8601(s3c_real_ns(), ts);
    const char *how = rq->cache_how >= 0 ? cache_outcome_name(rq->cache_how) : "-";
    if (log_is_json()) {
        buf_printf(&b, "{\"time\":\"%s\",\"id\":\"%s\",\"client\":", ts, rq->id);
        buf_json_str(&b, rq->access_key[0] ? rq->access_key : "-");
        buf_printf(&b, ",\"addr\":\"%s\",\"method\":", rq->addr);
        buf_json_str(&b, rq->method);
        buf_printf(&b, ",\"op\":\"%s\",\"bucket\":", op_name(rq->op));
        buf_json_str(&b, rq->bucket ? rq->bucket : "");
        buf_puts(&b, ",\"key\":");
        buf_json_str(&b, rq->key ? rq->key : "");
        buf_printf(&b,
                   ",\"status\":%d,\"bytes_in\":%llu,\"bytes_out\":%llu,\"cache\":\"%s\","
                   "\"ms\":%.1f,\"complete\":%s}",
                   rq->status, (unsigned long long)rq->bytes_in,
                   (unsigned long long)rq->bytes_out, how, (double)ms_x10 / 10.0,
                   toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "true" : "false");
    } else {
        /* Client-chosen fields (key, bucket, method, access key) are escaped: a key with a
         * newline must not forge a second line. */
        buf_printf(&b, "%s access %s ", ts, rq->id);
        log_buf_escaped(&b, rq->access_key[0] ? rq->access_key : "-");
        buf_printf(&b, " %s ", rq->addr);
        log_buf_escaped(&b, rq->method);
        buf_printf(&b, " %s /", op_name(rq->op));
        log_buf_escaped(&b, rq->bucket ? rq->bucket : "");
        if (rq->key) {
            buf_puts(&b, "/");
            log_buf_escaped(&b, rq->key);
        }
        buf_printf(&b, " %d in=%llu out=%llu cache=%s %.1fms%s", rq->status,
                   (unsigned long long)rq->bytes_in, (unsigned long long)rq->bytes_out, how,
                   (double)ms_x10 / 10.0,
                   toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " aborted");
    }
    if (b.p)
        log_line(b.p, b.len);
    buf_free(&b);
}

static enum stats_op req_stats_op(enum op op)
{
    switch (op) {
    case OP_GET:
    case OP_BATCH: return STATS_OP_GET; /* bytes of objects, counted as every GET's */
    case OP_HEAD: return STATS_OP_HEAD;
    case OP_PUT: return STATS_OP_PUT;
    case OP_COPY: return STATS_OP_COPY;
    case OP_DELETE:
    case OP_DELETE_OBJECTS: return STATS_OP_DELETE;
    case OP_LIST_OBJECTS:
    case OP_LIST_OBJECTS_V2:
    case OP_LIST_VERSIONS:
    case OP_LIST_BUCKETS:
    case OP_LIST_UPLOADS: return STATS_OP_LIST;
    case OP_MP_CREATE:
    case OP_MP_PART:
    case OP_MP_PART_COPY:
    case OP_MP_COMPLETE:
    case OP_MP_ABORT:
    case OP_MP_LIST_PARTS: return STATS_OP_MULTIPART;
    case OP_BUCKET_CREATE:
    case OP_BUCKET_DELETE:
    case OP_BUCKET_HEAD:
    case OP_BUCKET_LOCATION:
    case OP_BUCKET_VERSIONING:
    case OP_BUCKET_ACL:
    case OP_BUCKET_PUT_ACL: return STATS_OP_BUCKET;
    case OP_ADMIN: return STATS_OP_ADMIN;
    default: return STATS_OP_OTHER;
    }
}

/* A GET answered from a cache file that ended early: the client went away, or the file could
 * not be read (libmicrohttpd's sendfile and its pread fallback only close the connection).
 * A worker re-reads what was not delivered, from what TCP saw acknowledged on: at most
 * HIT_CHECK_MAX bytes (a failed read lies within the socket's send buffer, at most 4 MiB by
 * default, and one sendfile call past it), and at most HIT_CHECK_JOBS such re-reads queued or
 * running at once (a burst of clients going away is not checked past that: a copy that cannot
 * be read fails the next read of it as well, and that one is checked). An unreadable cached
 * copy is dropped, so the client's retry fetches the object from the backend instead of failing
 * the same way again. */
#define HIT_CHECK_MAX (8u << 20)
#define HIT_CHECK_JOBS 2u
#define HIT_CHECK_CHUNK (1u << 20)

struct hit_check {
    struct server *srv;
    struct cache_obj *obj; /* the request's reference, moved here */
    char *bucket, *key;
    uint64_t off, len;
};

static void hit_check_run(void *arg)
{
    struct hit_check *hc = arg;
    int fd = -1, rc = 0;
    uint64_t pos = hc->off, end = hc->off + hc->len;
    char *buf = NULL;
    if (cache_obj_open_range(hc->obj, hc->off, hc->len, &fd) == 0 &&
        (buf = malloc(HIT_CHECK_CHUNK))) {
        while (!rc && pos < end) {
            ssize_t n = pread(fd, buf, (size_t)S3C_MIN(end - pos, (uint64_t)HIT_CHECK_CHUNK),
                              (off_t)pos);
            if (n < 0 && errno == EINTR)
                continue;
            rc = n < 0 ? -errno : n == 0 ? -EIO : 0;
            pos += n > 0 ? (uint64_t)n : 0;
        }
    }
    if (fd >= 0)
        close(fd);
    free(buf);
    if (rc) {
        log_err("cache: reading \"%s/%s\" at byte %llu: %s: dropping the cached copy",
                hc->bucket, hc->key, (unsigned long long)pos, s3c_strerror(rc));
        cache_invalidate(hc->srv->cache, hc->bucket, hc->key);
    }
    cache_obj_release(hc->obj);
    __atomic_sub_fetch(&hc->srv->hit_checks, 1, __ATOMIC_RELAXED);
    free(hc->bucket);
    free(hc->key);
    free(hc);
}

/* Takes rq->obj for a hit_check of the bytes after the first @sent of the response. */
static void hit_check_start(struct server *srv, struct req *rq, uint64_t sent)
{
    if (__atomic_add_fetch(&srv->hit_checks, 1, __ATOMIC_RELAXED) > HIT_CHECK_JOBS) {
        __atomic_sub_fetch(&srv->hit_checks, 1, __ATOMIC_RELAXED);
        return;
    }
    struct hit_check *hc = calloc(1, sizeof(*hc));
    if (!hc) {
        __atomic_sub_fetch(&srv->hit_checks, 1, __ATOMIC_RELAXED);
        return;
    }
    hc->srv = srv;
    hc->bucket = strdup(rq->bucket);
    hc->key = strdup(rq->key);
    hc->off = rq->off + S3C_MIN(sent, rq->len);
    hc->len = S3C_MIN(rq->len - S3C_MIN(sent, rq->len), (uint64_t)HIT_CHECK_MAX);
    hc->obj = rq->obj;
    cache_obj_cancel_wait(rq->obj, &rq->waiter); /* the waiter goes with rq */
    if (!hc->bucket || !hc->key || !hc->len ||
        workq_submit(srv->wq, WORKQ_LOW, hit_check_run, hc)) {
        __atomic_sub_fetch(&srv->hit_checks, 1, __ATOMIC_RELAXED);
        free(hc->bucket);
        free(hc->key);
        free(hc);
        return;
    }
    rq->obj = NULL; /* the job releases it */
}

/* Whether @rq shows that its bucket exists, so that the bucket may have a row of its own in
 * the accounting (acct/stats.h): an authenticated S3 request on it that succeeded (2xx, 3xx).
 * Failed requests prove nothing (a 404 of a HEAD cannot tell a missing key from a missing
 * bucket), and unauthenticated ones never make rows: made-up names stay in "_other". */
static int req_bucket_found(const struct req *rq)
{
    return rq->authed && rq->op != OP_ADMIN && rq->op != OP_OPTIONS && rq->status >= 200 &&
           rq->status < 400 && rq->op != OP_BUCKET_DELETE;
}

void req_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                   enum MHD_RequestTerminationCode toe)
{
    struct server *srv;
    CAST_OBJ_NOTNULL(srv, cls, SERVER_MAGIC);
    struct req *rq = *con_cls;
    if (!rq)
        return;
    CHECK_OBJ_NOTNULL(rq, REQ_MAGIC);
    *con_cls = NULL;
    /* Body bytes that really went out: all of them when the response completed; otherwise
     * what TCP saw acknowledged (less the response header, roughly), capped by the body. */
    uint64_t sent = rq->bytes_out;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && !rq->tcp_acked_start) {
        sent = rq->bytes_out_streamed; /* a small body: what the callbacks handed over */
    } else if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        uint64_t acked = req_tcp_bytes_acked(rq);
        uint64_t delta = acked > rq->tcp_acked_start ? acked - rq->tcp_acked_start : 0;
        delta = delta > 512 ? delta - 512 : 0;
        if (delta < sent)
            sent = delta;
        if (rq->bytes_out_streamed > sent)
            sent = rq->bytes_out_streamed;
        rq->bytes_out = sent;
    }
    fair_conn_end(srv->fair, &rq->fair, sent); /* before MHD closes the socket */
    uint64_t now = s3c_mono_ns();
    if (rq->job) { /* the fair share's pacing held it back: rate limiting too */
        stall_req_add(&rq->stall, STALL_RATE, rq->fair.held_ns);
        stall_req_end(&rq->stall, now, rq->status / 100 == 2 ? sent : 0,
                      rq->cache_how == CACHE_HIT);
    }
    if (rq->plan_tok.seq)
        plans_read_done(cache_plans(srv->cache), &rq->plan_tok, rq->cache_how == CACHE_HIT,
                        rq->cache_how == CACHE_COALESCED);
    if (rq->sc) {
        if (sent > rq->bytes_out_streamed)
            stats_client_sent(rq->sc, sent - rq->bytes_out_streamed);
        /* a miss or an uncached read: what it sent, the backend sent for it */
        if (rq->cache_how == CACHE_MISS || rq->cache_how == CACHE_BYPASS ||
            rq->cache_how == CACHE_PARTIAL)
            stats_client_filled(rq->sc, sent);
        /* a peer's request counted in its bucket where the client's request entered */
        const char *bucket = rq->is_peer ? NULL : rq->bucket;
        if (bucket && req_bucket_found(rq))
            stats_bucket_found(srv->stats, bucket);
        stats_request_done(srv->stats, rq->sc, bucket, req_stats_op(rq->op),
                           rq->status ? rq->status : 499, rq->cache_how, now - rq->t_start_ns,
                           sent, rq->bytes_in);
        if (bucket && rq->op == OP_BUCKET_DELETE && rq->status / 100 == 2)
            stats_bucket_forget(srv->stats, bucket);
    }
    if (rq->op != OP_ADMIN || rq->status >= 400 || log_enabled(S3C_LOG_DEBUG))
        req_access_log(rq, toe, (now - rq->t_start_ns) / 100000);
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && rq->op == OP_GET && rq->obj &&
        rq->cache_how == CACHE_HIT && rq->bucket && rq->key && rq->status / 100 == 2)
        hit_check_start(srv, rq, sent);
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && rq->from_source && rq->obj)
        cache_obj_delivered(rq->obj);
    int busy = rq->busy;
    req_free(rq);
    if (busy)
        __atomic_sub_fetch(&srv->inflight, 1, __ATOMIC_RELAXED);
}
