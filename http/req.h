/*
 * req.h: one HTTP request as the handlers see it (struct req), the handler interface, and the
 * request accessors. No libmicrohttpd type shows here: req.c, server.c and respond.c are the
 * only files that include <microhttpd.h>.
 *
 * Request lifecycle (one struct req per HTTP request, req.c):
 *   first call: req_new, route, authenticate, pick the handler -> h->begin()
 *   body calls: h->body() (upload intake; errors latch rq->rc, the rest is discarded)
 *   final call: h->end(): answers at once, or runs a job on the workq after
 *               suspending the connection; the job resumes it and h->end() runs again
 *   completion: access log, accounting, req_free (closes/unlinks what is left)
 */
#ifndef S3C_REQ_H
#define S3C_REQ_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "acct/fair.h"
#include "acct/ratelimit.h"
#include "acct/stall.h"
#include "cache/cache.h"
#include "cache/plan.h"
#include "park.h"
#include "lib/buf.h"
#include "lib/s3c.h"
#include "peer/peer_http.h"
#include "router.h"
#include "sig/sigv4.h"

struct server;
struct req;
struct stats_client;
struct jobs_row;
struct upload;         /* upload.c */
struct reqbody;        /* reqbody.c */
struct MHD_Connection; /* opaque here: only req.c and respond.c look inside */

/* What a handler and every respond_*() return to the access handler: REQ_OK (go on: a response
 * is queued, or the request waits suspended) or REQ_CLOSE (close the connection). */
enum { REQ_CLOSE = 0, REQ_OK = 1 };

typedef int handler_f(struct req *rq);

struct handler {
    handler_f *begin; /* headers known; may answer at once (rq->answered) */
    int (*body)(struct req *rq, const char *data, size_t len);
    handler_f *end;   /* body done (or none): answer, or start a job */
    int checks_payload; /* body() checks the declared digests itself (upload.c); for the
                         * others req.c does it with reqbody.c before end() */
};

struct req {
    unsigned magic;
#define REQ_MAGIC 0x7e9a11c3
    struct server *srv;
    struct MHD_Connection *conn;
    char id[20];                  /* x-amz-request-id */
    uint64_t t_start_ns;
    const char *method;           /* MHD's, valid for the request */
    enum op op;
    char *bucket;                 /* decoded, NULL for service-level requests */
    char *key;                    /* decoded, NULL for bucket-level requests */
    char *raw_path;               /* path as sent, percent-encoded (SigV2 signs it) */
    char *path;                   /* decoded path as signed ("/b/k", or "/k" virtual-hosted) */
    int vhost;                    /* the bucket came from the Host header */
    struct sigv4_kv *query;       /* decoded query parameters */
    size_t n_query, query_cap;
    struct sigv4_kv *headers;     /* pointers into MHD's header storage */
    size_t n_headers, headers_cap;
    size_t header_bytes;          /* request line and header lines, about as sent */
    char access_key[129];         /* authenticated key, "anonymous", or "" */
    int is_admin;
    int authed;                   /* auth_check() accepted it (a key, the token, --anonymous) */
    int is_peer;                  /* signed by a peer (PEER_HEADER): served here, never forwarded */
    int signed_by_key;            /* a key's signature was verified (not token, anonymous) */
    char peer_name[256];          /* the sending peer's --self */
    struct sigv4_result auth;
    const struct handler *h;
    int rc;                       /* first error; latched */
    char err_msg[256];            /* <Message> of the error answered for rc, "" = the default */
    const char *err_elem;         /* an extra element of that error document (<Region>...) */
    char err_elem_value[128];
    int answered;                 /* a response has been queued */
    int must_close;               /* the answer says Connection: close (framing refused) */
    int swallowing;               /* refused on its headers: the body is read and dropped */
    int phase;                    /* handler-private progress */
    int suspended;                /* connection suspended waiting for a job */
    struct park_entry park;       /* in the server's registry of requests (http/park.h) */
    int released;                 /* woken by the shutdown, not by what it waited for: it is
                                   * answered 503 or its connection closed */
    atomic_uint job_holds;        /* a job in flight: the job itself + req_job_hold()s */
    int busy;                     /* counted in server.inflight (processing or answering) */
    uint64_t bytes_in;            /* request body bytes received */
    uint64_t bytes_out;           /* response body bytes (of the queued response) */
    uint64_t bytes_out_streamed;  /* counted by stream callbacks so far */
    int status;
    int cache_how;                /* enum cache_outcome or -1 */
    uint64_t tcp_acked_start;     /* TCP_INFO bytes acked when a large body was queued, or 0 */
    struct stats_client *sc;
    char addr[64];
    struct rl_bucket *rlb;        /* download rate limit of this key, or NULL */
    int from_source;              /* the body is read from the backend's own file (pread: a
                                   * file cut short under us ends the response, see respond.c) */
    struct rl_timer rl_timer;     /* resumes the connection when the bucket refills */
    struct fair_conn fair;        /* --max-bandwidth: this response's socket, while it sends */
    struct jobs_row *job;         /* a GET's job (x-s3cached-job, else the key), or NULL */
    struct plan_tok plan_tok;     /* a GET of a planned key: its plan (cache/plan.h) */
    struct stall_req stall;       /* a GET's time: waits by cause, first byte (acct/stall.h) */

    /* handler state */
    struct upload *up;
    struct reqbody *rb;           /* digests of a body upload.c does not take */
    struct buf body;              /* small XML bodies */
    struct cache_obj *obj;
    struct cache_waiter waiter;
    struct peer_waiter pwaiter;   /* a wait on a peer's answer (http/proxy.c) */
    const struct be_meta *meta;   /* borrowed from obj */
    uint64_t off, len;            /* range being served */
    int partial;
    void *job_state;              /* handler-private result of a job */
    void (*job_state_free)(void *);
};

/* Queues fn on the work queue after suspending the connection; the access handler runs again
 * once fn has returned. fn must not touch MHD. Returns 0 or -errno (nothing suspended). */
int req_run_job(struct req *rq, void (*fn)(struct req *rq));
/* req_run_job() for a job that waits for cache fills (a member index build, a batch's
 * lookups): it runs on the server's few waiting threads, never on the workers the fills need,
 * so waiting jobs cannot hold every worker while their fills queue behind them. */
int req_run_wait_job(struct req *rq, void (*fn)(struct req *rq));
/* From a job: the request is not resumed when the job returns but once it also got
 * req_job_release() (from any thread), so a job may start work that ends later (a write's
 * notice to the other gateways) without a worker waiting for it. */
void req_job_hold(struct req *rq);
void req_job_release(struct req *rq);
/* Parks the request (its handler returns REQ_OK and is called again once resumed), and
 * wakes it: from any thread, once, after the work it waits for has set its state. @why says
 * what it waits for (the watch of http/park.h names a request parked too long by it). */
void req_suspend(struct req *rq, enum park_why why);
void req_resume(struct req *rq);
/* At shutdown, for a request still parked on the cache (park_each() on the server's
 * registry): its wait is cancelled and it is woken to be answered 503 or closed. 1 when it was
 * woken so. */
int req_release_parked(struct park_entry *e, void *cls);
/* park_describe_f of the server's registry: "<id> <method> /<bucket>/<key>". */
void req_describe(const struct park_entry *e, char *buf, size_t cap);
/* Rate limit before sending up to *@max body bytes: 0 (and *@max possibly lowered) to go on, or
 * -EAGAIN after suspending the connection until the key's bucket has refilled. */
int req_throttle(struct req *rq, size_t *max);
/* After a body read that req_throttle granted @granted bytes for: gives the rate limiter back
 * what was not read and charges the client for the @n bytes that were (none when @n <= 0). */
void req_body_sent(struct req *rq, size_t granted, ssize_t n);
/* --max-bandwidth: a response body is being queued; its socket joins the fair share of the
 * client. A no-op without --max-bandwidth (one branch). */
void req_fair_start(struct req *rq);
/* A GET's response body sends its first byte now (its time to first byte). */
void req_first_byte(struct req *rq);
/* Bytes the peer has acknowledged on the request's socket so far (TCP_INFO), 0 if unknown. */
uint64_t req_tcp_bytes_acked(struct req *rq);
/* The request's headers and query parameters (req_kv.c: no libmicrohttpd). */
const char *req_header(struct req *rq, const char *name);   /* case-insensitive; NULL */
int req_expects_continue(struct req *rq);                   /* "Expect: 100-continue" */
const char *req_query(struct req *rq, const char *name);    /* decoded; "" for "?name" */
int req_has_query(struct req *rq, const char *name);

#endif
