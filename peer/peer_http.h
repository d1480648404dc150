/*
 * peer_http.h: HTTP from this gateway to its peers (peer_http.c, the only file of peer/ that
 * includes <curl/curl.h>). One thread drives every transfer on a curl multi handle, so a
 * waiting peer request holds no worker: a request is signed with SigV4 under the peer key
 * (PEER_ACCESS_KEY and the peer secret), carries PEER_HEADER naming the sender (signed, so the
 * receiver knows the request came from a peer and never forwards it again), and is either
 *   - a call: the answer's body is collected (capped) and a callback runs when it ends, or
 *   - a stream: the answer's status and headers, then its body read as it arrives through a
 *     bounded buffer (the transfer pauses while the buffer is full; a reader that catches up
 *     waits through struct peer_waiter, as cache readers do through struct cache_waiter).
 *   peer_http_new -> [peer_call_start | peer_stream_start ... peer_xfer_release]* -> peer_http_free
 */
#ifndef S3C_PEER_HTTP_H
#define S3C_PEER_HTTP_H

#include <stdint.h>
#include <sys/types.h>

#include "lib/buf.h"
#include "sig/sigv4.h"

#define PEER_ACCESS_KEY "s3cached-peer"      /* the access key of peer requests (SigV4) */
#define PEER_HEADER "x-s3cached-peer"        /* the sender's --self, signed */
#define PEER_REQUEST_ID_HEADER "x-s3cached-request-id" /* the client request's id, adopted */
#define PEER_OWNER_HEADER "x-s3cached-owner" /* on a proxied answer: the gateway that served it */
#define PEER_BODY_MAX (64u << 20)            /* largest answer body a call collects */

struct peer_http;
struct peer_xfer;

/* A reader's side of a wait on a stream (the rule of struct cache_waiter: suspend() is called
 * under the transfer's lock right before -EAGAIN is returned, resume() under the same lock,
 * once per suspend(), only for an armed waiter). */
struct peer_waiter {
    void (*suspend)(void *cls);
    void (*resume)(void *cls);
    void *cls;
    int armed; /* private to peer_http.c */
};

struct peer_hdr {
    char *name, *value;
};

/* One request to a peer. Strings are copied by the *_start() calls. */
struct peer_req {
    const char *host;                  /* the peer's ring name, "HOST:PORT" */
    const char *method;                /* GET, HEAD, POST, DELETE */
    const char *path;                  /* decoded, "/bucket/key" or "/_/warm"; encoded here */
    const struct sigv4_kv *query;      /* decoded parameters (value NULL: "?name") */
    size_t n_query;
    const struct sigv4_kv *headers;    /* more headers to send (signed with the rest) */
    size_t n_headers;
    const char *body;                  /* POST body, or NULL */
    size_t body_len;
    const char *request_id;            /* sent as PEER_REQUEST_ID_HEADER; NULL: none */
    int64_t timeout_ms;                /* whole transfer; 0: only the stall limit */
    int no_stall_limit;                /* an answer that may rightly take long (a flush) */
};

struct peer_http_opts {
    const char *self;        /* this gateway's name, sent in PEER_HEADER */
    const char *secret;      /* the peer secret */
    const char *region;      /* the region the peers verify signatures for */
    int64_t connect_ms;      /* connect timeout */
    int64_t stall_ms;        /* a transfer receiving nothing this long fails */
    int tls;                 /* call https://HOST: the peer's certificate must verify for HOST */
    const char *ca_file;     /* PEM CA bundle to verify it with; NULL or "": the system's */
    /* streams open at once (each holds a 1 MiB buffer and a connection): in all (0: 64, the
     * connections kept to one peer, so that no stream ever queues for a connection), and per
     * client tag (0: no limit). peer_stream_start() refuses one more with -EBUSY. */
    unsigned max_streams, max_streams_client;
};

/* Starts the transfer thread. @o's strings are copied. 0 or -errno. */
int peer_http_new(const struct peer_http_opts *o, struct peer_http **out);
/* Fails every transfer in flight (callbacks run, readers wake with -ECANCELED), stops the
 * thread and frees it. Transfers still referenced stay valid until their release. */
void peer_http_free(struct peer_http *ph);

/* Called once when a call ended, on the transfer thread (must not block). @x is valid during
 * the call: peer_xfer_rc(), peer_xfer_status(), peer_xfer_body(). */
typedef void peer_done_f(void *cls, struct peer_xfer *x);

/* Starts a call: @done(@cls, x) runs once it ended (even when it could not start: then from
 * this call's thread, before it returns). A call with @r->timeout_ms fails with -ETIMEDOUT
 * that long after this call, however long it waited for a connection. Returns 0 or -errno
 * (then @done has not run and will not). */
int peer_call_start(struct peer_http *ph, const struct peer_req *r, peer_done_f *done,
                    void *cls);

struct peer_result {
    int rc;           /* 0, or the transport error: -ECONNREFUSED, -ETIMEDOUT, -EHOSTUNREACH, -EIO */
    long status;      /* HTTP status when rc == 0 */
    struct buf body;  /* the answer's body (free with buf_free) */
};
/* Runs @n calls at once and waits for all of them (blocking: workers only). @out[i] is the
 * result of @r[i]; free each body. */
void peer_call_many(struct peer_http *ph, const struct peer_req *r, size_t n,
                    struct peer_result *out);

/* Starts a stream for the client @client (a tag: the streams of one tag are limited together,
 * peer_http_opts). 0 and a reference in *@out (release with peer_xfer_release); -EBUSY when
 * the limits are reached (serve the request another way); or -errno. A stream counts against
 * the limits until its last user released it. */
int peer_stream_start(struct peer_http *ph, const struct peer_req *r, const char *client,
                      struct peer_xfer **out);
/* Streams open now, and those refused by the limits since the start. */
void peer_http_stream_stats(struct peer_http *ph, unsigned *open, uint64_t *refused);
/* 0 once the answer's status and headers are in; -EAGAIN after @w->suspend() (call again once
 * resumed); or the transport error when no answer came (nothing was received: the caller may
 * do the request another way). */
int peer_stream_headers(struct peer_xfer *x, struct peer_waiter *w);
/* Copies up to @max body bytes: >0, 0 at the end of a complete body, -EAGAIN after
 * @w->suspend(), or a negative error (the transfer failed midway: cut the answer short). */
ssize_t peer_stream_read(struct peer_xfer *x, void *buf, size_t max, struct peer_waiter *w);
/* Disarms @w if it is armed on @x (before the waiter's memory goes). */
void peer_stream_cancel_wait(struct peer_xfer *x, struct peer_waiter *w);

/* What an ended call (or a stream's headers) says. */
int peer_xfer_rc(const struct peer_xfer *x);
long peer_xfer_status(const struct peer_xfer *x);
int64_t peer_xfer_content_length(const struct peer_xfer *x); /* -1: not sent */
size_t peer_xfer_nheaders(const struct peer_xfer *x);
const struct peer_hdr *peer_xfer_header(const struct peer_xfer *x, size_t i);
const char *peer_xfer_find_header(const struct peer_xfer *x, const char *name); /* or NULL */
const struct buf *peer_xfer_body(const struct peer_xfer *x);
/* Another reference to a stream (its reader and its holder may go in either order). */
void peer_xfer_ref(struct peer_xfer *x);
/* Drops a reference; a stream still running is cancelled with the last one. Accepts NULL. */
void peer_xfer_release(struct peer_xfer *x);

#endif
