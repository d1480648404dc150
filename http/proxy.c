/*
 * proxy.c: a GET or HEAD of an object that another gateway owns (cluster mode) is answered by
 * that owner: the request goes to it signed as a peer's (so the owner serves it itself, from
 * its cache or the backend, and never forwards it again: no loop when two gateways disagree
 * on the ring), and its answer streams back through a bounded buffer, never held whole. This
 * gateway then keeps no copy: each object is fetched from the backend once, by its owner,
 * whichever gateway a client asked. When the owner cannot be reached (nothing answered) the
 * request is served here instead, as a gateway alone would.
 *   route (req.c) -> begin stream -> [suspended until the owner's headers] -> relay the body
 *   | fall back to the operation's own handler
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/log.h"
#include "lib/s3err.h"
#include "peer/peer.h"
#include "proxy.h"
#include "respond.h"
#include "server.h"

#define PROXY_MAGIC 0x9e0c5a11u

struct proxy_state {
    unsigned magic;
    struct req *rq;
    struct peer_xfer *x;     /* the request's reference (the body's reader has its own): the
                              * request's waiter is disarmed from it when the request ends */
    char owner[RING_NAME_MAX];
};

static void proxy_state_free(void *p)
{
    struct proxy_state *ps = p;
    if (!ps)
        return;
    CHECK_OBJ_NOTNULL(ps, PROXY_MAGIC);
    if (ps->x) {
        peer_stream_cancel_wait(ps->x, &ps->rq->pwaiter);
        peer_xfer_release(ps->x);
    }
    ps->magic = 0;
    free(ps);
}

/* The body's reader: the request's waiter waits on the owner's bytes. libmicrohttpd may free
 * the answer after the request (proxy_state_free disarmed the waiter then): the reader
 * touches the request only while reading. */
struct proxy_body {
    struct req *rq;
    struct peer_xfer *x;
};

static ssize_t proxy_body_read(void *cls, char *buf, size_t max)
{
    struct proxy_body *pb = cls;
    return peer_stream_read(pb->x, buf, max, &pb->rq->pwaiter);
}

static void proxy_body_free(void *cls)
{
    struct proxy_body *pb = cls;
    peer_xfer_release(pb->x);
    free(pb);
}

/* Query parameters that authenticate the client's request: this gateway checked them; the
 * owner is asked as a peer. */
static int proxy_auth_param(const char *name)
{
    return !strncasecmp(name, "X-Amz-", 6) || !strcmp(name, "AWSAccessKeyId") ||
           !strcmp(name, "Signature") || !strcmp(name, "Expires");
}

/* Starts the request to the owner. 0 or -errno. */
static int proxy_start(struct req *rq, struct proxy_state *ps)
{
    static const char *const pass[] = {"Range", "If-Match", "If-None-Match", "If-Modified-Since",
                                       "If-Unmodified-Since", "x-amz-checksum-mode"};
    struct sigv4_kv q[32], h[ARRAY_SIZE(pass)];
    size_t nq = 0, nh = 0;
    for (size_t i = 0; i < rq->n_query; i++) {
        if (proxy_auth_param(rq->query[i].name))
            continue;
        if (nq == ARRAY_SIZE(q))
            return -S3E_INVALID_ARGUMENT;
        q[nq++] = rq->query[i];
    }
    for (size_t i = 0; i < ARRAY_SIZE(pass); i++) {
        const char *v = req_header(rq, pass[i]);
        if (v) {
            h[nh].name = pass[i];
            h[nh++].value = v;
        }
    }
    size_t pl = strlen(rq->bucket) + strlen(rq->key) + 3;
    char *path = malloc(pl);
    if (!path)
        return -ENOMEM;
    snprintf(path, pl, "/%s/%s", rq->bucket, rq->key);
    struct peer_req r = {.host = ps->owner, .method = rq->method, .path = path, .query = q,
                         .n_query = nq, .headers = h, .n_headers = nh, .request_id = rq->id};
    char client[sizeof(rq->access_key) + sizeof(rq->addr) + 2];
    snprintf(client, sizeof(client), "%s %s", rq->access_key, rq->addr);
    int rc = peer_stream_start(peer_stream_client(rq->srv->peer), &r, client, &ps->x);
    free(path);
    return rc;
}

/* Serves @rq here: the owner could not be reached. */
static int proxy_fallback(struct req *rq, struct proxy_state *ps, int rc)
{
    if (rc == -EBUSY)
        log_debug("%s %s /%s/%s: proxied reads at their limit: serving it here", rq->id,
                  rq->method, rq->bucket, rq->key);
    else
        log_info("%s %s /%s/%s: owner %s unreachable (%s): serving it here", rq->id,
                 rq->method, rq->bucket, rq->key, ps->owner, s3c_strerror(rc));
    peer_count_proxy(rq->srv->peer, 1);
    rq->h = rq->srv->handlers[rq->op];
    rq->phase = 0;
    if (ps->x) {
        peer_stream_cancel_wait(ps->x, &rq->pwaiter);
        peer_xfer_release(ps->x);
        ps->x = NULL;
    }
    if (!rq->h || !rq->h->end)
        return respond_error(rq, -S3E_NOT_IMPLEMENTED);
    return rq->h->end(rq);
}

static int h_proxy_end(struct req *rq)
{
    struct proxy_state *ps = rq->job_state;
    CHECK_OBJ_NOTNULL(ps, PROXY_MAGIC);
    int rc;
    /* an owner that missed a notice and has not answered a resync since is not waited for */
    if (!ps->x && peer_behind(rq->srv->peer, ps->owner))
        return proxy_fallback(rq, ps, -ETIMEDOUT);
    if (!ps->x && (rc = proxy_start(rq, ps))) {
        if (rc == -S3E_INVALID_ARGUMENT)
            return respond_error(rq, rc);
        /* over the proxied reads' limits: in write-back mode the owner may hold a version the
         * backend has not got yet, so this gateway cannot answer for it: the client backs off */
        if (rc == -EBUSY && rq->srv->cf->write_mode == CONF_WRITE_BACK)
            return respond_error_msg(rq, -S3E_SLOW_DOWN,
                                     "Too many reads of this client are waiting on the "
                                     "gateway that owns their keys; read what was sent, then "
                                     "retry");
        return proxy_fallback(rq, ps, rc);
    }
    rc = peer_stream_headers(ps->x, &rq->pwaiter);
    if (rc == -EAGAIN)
        return REQ_OK; /* suspended until the owner answers */
    if (rc)
        return proxy_fallback(rq, ps, rc);
    struct peer_xfer *x = ps->x;
    size_t n = peer_xfer_nheaders(x);
    struct respond_hdr *h = calloc(n + 1, sizeof(*h));
    struct proxy_body *pb = calloc(1, sizeof(*pb));
    if (!h || !pb) {
        free(h);
        free(pb);
        return respond_error(rq, -ENOMEM);
    }
    for (size_t i = 0; i < n; i++) {
        const struct peer_hdr *ph = peer_xfer_header(x, i);
        h[i] = (struct respond_hdr){ph->name, ph->value};
    }
    h[n] = (struct respond_hdr){PEER_OWNER_HEADER, ps->owner};
    const char *xc = peer_xfer_find_header(x, "x-cache");
    for (int how = CACHE_HIT; xc && how <= CACHE_PARTIAL; how++)
        if (!strcmp(xc, cache_outcome_name((enum cache_outcome)how)))
            rq->cache_how = how; /* the owner's outcome is this client's */
    int64_t clen = peer_xfer_content_length(x);
    pb->rq = rq;
    pb->x = x;
    peer_xfer_ref(x); /* the body's own */
    peer_count_proxy(rq->srv->peer, 0);
    int r = respond_relay(rq, (int)peer_xfer_status(x), h, n + 1,
                          clen >= 0 ? (uint64_t)clen : UINT64_MAX, proxy_body_read,
                          proxy_body_free, pb);
    free(h);
    return r;
}

static const struct handler h_proxy = {.end = h_proxy_end};

int proxy_route(struct req *rq, const char *url)
{
    struct server *srv = rq->srv;
    if (!srv->peer || rq->is_peer || (rq->op != OP_GET && rq->op != OP_HEAD) || !rq->bucket ||
        !rq->key)
        return 0;
    char owner[RING_NAME_MAX];
    if (!peer_route(srv->peer, url, owner))
        return 0;
    struct proxy_state *ps = calloc(1, sizeof(*ps));
    if (!ps)
        return 0; /* served here */
    ps->magic = PROXY_MAGIC;
    ps->rq = rq;
    memcpy(ps->owner, owner, sizeof(owner));
    rq->job_state = ps;
    rq->job_state_free = proxy_state_free;
    rq->h = &h_proxy;
    return 1;
}
