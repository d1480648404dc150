/*
 * peer.c: the cluster context (peer.h): membership and ring lookups over ring/peers.c, the
 * HTTP client to the peers, the write path's hooks (a write through any gateway makes every
 * other one forget its keys before the client is answered: one notice per gateway and
 * request, all gateways at once, bounded by --peer-timeout) and the invalidation fan-out.
 * A gateway that missed a notice is owed a resync (peer_resync.c): until it confirms one it
 * is not waited for again. Counts what it does for /_/stats and /_/metrics; logs a peer that
 * could not be told.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/log.h"
#include "lib/s3err.h"
#include "peer.h"
#include "peer_resync.h"
#include "peer_tls.h"

#define PEER_MAGIC 0x9ee9c7a5u
#define PEER_OWED_FILE "peer-resync-owed" /* in --cache-dir: the gateways owed a resync */
#define PEER_NOTICE_BODY_MAX (32u << 20) /* a DeleteObjects' 1,000 keys of 1 KiB, escaped */
/* Proxied reads open at once (each holds a connection to the owner and a 1 MiB buffer): in
 * all, and per client (access key and address); one more is served here instead */
#define PEER_PROXY_STREAMS 64
#define PEER_PROXY_STREAMS_CLIENT 16

struct peer {
    unsigned magic;
    const struct conf *cf;
    struct peers *members;
    struct peer_http *http;    /* calls: notices, resyncs, flushes, stats, warm-ups */
    struct peer_http *streams; /* proxied reads: their own thread and connections, so that
                                * no call ever waits behind a client's read */
    char self[RING_NAME_MAX];
    int64_t timeout_ms;
    struct peer_resync *resync;
    _Atomic uint64_t proxied, fallbacks, inval_sent, inval_failed;
};

int peer_open(const struct conf *cf, struct peer **out, struct errmsg *em)
{
    char err[256] = "";
    *out = NULL;
    if (!cf->peers || !*cf->peers)
        return 0;
    if (!cf->self || !*cf->self) {
        errmsg_set(em, "--peers needs --self: this gateway's entry, as the balancer names it "
                       "(HOST:PORT)");
        return -EINVAL;
    }
    const char *secret = cf->peer_secret && *cf->peer_secret ? cf->peer_secret : cf->admin_token;
    if (!secret || !*secret) {
        errmsg_set(em, "--peers needs --peer-secret (or --admin-token): the secret the gateways "
                       "sign their requests to each other with");
        return -EINVAL;
    }
    if (strlen(cf->self) >= RING_NAME_MAX || !strncmp(cf->self, "unix:", 5)) {
        errmsg_set(em, "--self \"%s\": want HOST:PORT", cf->self);
        return -EINVAL;
    }
    if (strstr(cf->peers, "://") || strstr(cf->self, "://")) {
        errmsg_set(em, "--peers/--self: entries are HOST:PORT as the balancer's server lines "
                       "name them, without a scheme (the gateways call each other over HTTPS "
                       "when they serve it, --tls-cert, else over HTTP)");
        return -EINVAL;
    }
    int tls = cf->tls_cert && *cf->tls_cert;
    if (!tls && cf->peer_ca && *cf->peer_ca) {
        errmsg_set(em, "--peer-ca needs --tls-cert: the gateways call each other over HTTPS "
                       "only when they serve it");
        return -EINVAL;
    }
    /* The others call this one as https://--self and verify its certificate for that host:
     * one they would refuse could never be told of a write, and would serve stale bytes. */
    int rc = tls ? peer_tls_check(cf->tls_cert, cf->peer_ca, cf->self, em) : 0;
    if (rc)
        return rc;
    struct peer *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->magic = PEER_MAGIC;
    p->cf = cf;
    p->timeout_ms = cf->peer_timeout > 0 ? cf->peer_timeout : 5000;
    rc = peers_new(cf->peers, cf->self, NULL, &p->members, err, sizeof(err));
    if (rc) {
        errmsg_set(em, "%s", err[0] ? err : strerror(-rc));
        peer_close(p);
        return rc;
    }
    /* peers_new() keeps --self as it canonicalises a dns: one; the name we sign with is the
     * ring's own spelling of it once DNS lists us, the flag until then. */
    snprintf(p->self, sizeof(p->self), "%s", cf->self);
    struct peer_http_opts ho = {
        .self = p->self,
        .secret = secret,
        .region = cf->region,
        .connect_ms = p->timeout_ms,
        /* a stream may wait for the owner's own backend fetch */
        .stall_ms = S3C_MAX(p->timeout_ms, cf->backend_timeout) + 5000,
        .tls = tls,
        .ca_file = cf->peer_ca,
    };
    if ((rc = peer_http_new(&ho, &p->http))) {
        errmsg_set(em, "cannot start the peer client: %s", strerror(-rc));
        peer_close(p);
        return rc;
    }
    ho.max_streams = PEER_PROXY_STREAMS;
    ho.max_streams_client = PEER_PROXY_STREAMS_CLIENT;
    if ((rc = peer_http_new(&ho, &p->streams))) {
        errmsg_set(em, "cannot start the peer client: %s", strerror(-rc));
        peer_close(p);
        return rc;
    }
    char owed[4096];
    snprintf(owed, sizeof(owed), "%s/%s", cf->cache_dir ? cf->cache_dir : ".", PEER_OWED_FILE);
    if ((rc = peer_resync_new(p, owed, &p->resync))) {
        errmsg_set(em, "cannot start the peer resyncs: %s", strerror(-rc));
        peer_close(p);
        return rc;
    }
    struct peers_stats ps;
    peers_stats(p->members, &ps);
    if (!strncmp(cf->peers, "dns:", 4))
        log_info("cluster: %s, %zu gateways resolved, self %s", cf->peers, ps.count,
                 ps.self >= 0 ? "listed" : "not listed yet");
    else if (ps.self < 0)
        log_warn("cluster: --self %s is not in the ring", cf->self);
    *out = p;
    return 0;
}

void peer_close(struct peer *p)
{
    if (!p)
        return;
    CHECK_OBJ_NOTNULL(p, PEER_MAGIC);
    peer_resync_stop(p->resync); /* no resync starts any more */
    peer_http_free(p->http);     /* the calls in flight end: their callbacks run */
    peer_http_free(p->streams);
    peer_resync_free(p->resync);
    peers_free(p->members);
    p->magic = 0;
    free(p);
}

const char *peer_self(const struct peer *p)
{
    return p->self;
}

struct peer_http *peer_client(struct peer *p)
{
    return p->http;
}

struct peer_http *peer_stream_client(struct peer *p)
{
    return p->streams;
}

int64_t peer_timeout_ms(const struct peer *p)
{
    return p->timeout_ms;
}

struct peers_snap *peer_snap_get(struct peer *p)
{
    return peers_snap_get(p->members);
}

/* "/@bucket/@key" as a client sends it (AWS URI encoding, '/' kept) into a new string. */
static char *peer_key_target(const char *bucket, const char *key)
{
    size_t bl = strlen(bucket), kl = strlen(key), cap = 3 * (bl + kl) + 3;
    char *t = malloc(cap);
    if (!t)
        return NULL;
    t[0] = '/';
    int n = sigv4_uri_encode(bucket, bl, 0, t + 1, cap - 1);
    if (n < 0) {
        free(t);
        return NULL;
    }
    size_t off = 1 + strlen(t + 1);
    t[off++] = '/';
    if (sigv4_uri_encode(key, kl, 1, t + off, cap - off) < 0) {
        free(t);
        return NULL;
    }
    return t;
}

int peer_route(struct peer *p, const char *raw_path, char owner[RING_NAME_MAX])
{
    struct peers_owner o;
    if (!p || peers_owner_uri(p->members, raw_path, strlen(raw_path), &o) != 0 || o.is_self)
        return 0;
    snprintf(owner, RING_NAME_MAX, "%s", o.name);
    return 1;
}

int peer_route_key(struct peer *p, const char *bucket, const char *key, char owner[RING_NAME_MAX])
{
    char *t = peer_key_target(bucket, key);
    int r = t ? peer_route(p, t, owner) : 0;
    free(t);
    return r;
}

int peer_owner_index(const struct peers_snap *snap, const char *bucket, const char *key)
{
    const struct ring *ring = peers_snap_ring(snap);
    char *t = ring ? peer_key_target(bucket, key) : NULL;
    int idx = -1;
    if (t) {
        size_t len = strlen(t);
        char *u = malloc(len + 1);
        ssize_t ul = u ? ring_nginx_uri(t, len, u, len + 1) : -ENOMEM;
        if (ul >= 0)
            idx = ring_owner(ring, u, (size_t)ul);
        if (idx < 0)
            idx = -1;
        free(u);
    }
    free(t);
    return idx;
}

int peer_names(struct peer *p, char ***names, size_t *n, int *self)
{
    struct peers_snap *s = peers_snap_get(p->members);
    const struct ring *r = peers_snap_ring(s);
    size_t cnt = r ? ring_count(r) : 0;
    char **v = calloc(cnt + 1, sizeof(*v));
    int rc = v ? 0 : -ENOMEM;
    for (size_t i = 0; !rc && i < cnt; i++)
        if (!(v[i] = strdup(ring_name(r, i))))
            rc = -ENOMEM;
    *self = peers_snap_self(s);
    peers_snap_put(s);
    if (rc) {
        peer_names_free(v);
        return rc;
    }
    *names = v;
    *n = cnt;
    return 0;
}

void peer_names_free(char **names)
{
    for (size_t i = 0; names && names[i]; i++)
        free(names[i]);
    free(names);
}

/* --- invalidation fan-out ------------------------------------------------------------------- */

/* An operator's invalidation: every other gateway is asked, even one owed a resync (a
 * revalidation would keep a copy the backend still confirms), and owes one if it fails. */
unsigned peer_invalidate_all(struct peer *p, const char *bucket, const char *key,
                             const char *prefix, unsigned *sent)
{
    char **names = NULL;
    size_t n = 0, k = 0;
    int self = -1;
    unsigned failed = 0;
    *sent = 0;
    if (peer_names(p, &names, &n, &self) || n <= 1) {
        peer_names_free(names);
        return 0;
    }
    struct buf path;
    buf_init(&path, 8192);
    if (buf_puts(&path, "/_/cache/") || buf_puts(&path, bucket) ||
        (key && (buf_puts(&path, "/") || buf_puts(&path, key)))) {
        buf_free(&path);
        peer_names_free(names);
        return (unsigned)n - 1;
    }
    struct peer_req *rq = calloc(n, sizeof(*rq));
    struct peer_result *res = calloc(n, sizeof(*res));
    struct sigv4_kv q_prefix = {"prefix", prefix ? prefix : ""};
    for (size_t i = 0; rq && res && i < n; i++) {
        if ((int)i == self)
            continue;
        rq[k] = (struct peer_req){.host = names[i], .method = "DELETE", .path = path.p,
                                  .timeout_ms = p->timeout_ms};
        if (!key) {
            rq[k].query = &q_prefix;
            rq[k].n_query = 1;
        }
        k++;
    }
    if (rq && res) {
        peer_call_many(p->http, rq, k, res);
        for (size_t i = 0; i < k; i++) {
            if (res[i].rc || res[i].status != 200) {
                failed++;
                peer_resync_owe(p->resync, rq[i].host);
                log_warn("cluster: could not tell %s to forget %s/%s: %s", rq[i].host, bucket,
                         key ? key : (prefix ? prefix : ""),
                         res[i].rc ? s3c_strerror(res[i].rc) : "HTTP error");
            }
            buf_free(&res[i].body);
        }
        *sent = (unsigned)k;
    } else {
        failed = (unsigned)n - 1;
    }
    atomic_fetch_add(&p->inval_sent, k);
    atomic_fetch_add(&p->inval_failed, failed);
    free(rq);
    free(res);
    buf_free(&path);
    peer_names_free(names);
    return failed;
}

static int peer_ops_keep(void *cls, const char *bucket, const char *key)
{
    char owner[RING_NAME_MAX];
    return !peer_route_key(cls, bucket, key, owner);
}

/* --- write notices ------------------------------------------------------------------------ */

struct peer_notice_call {
    struct peer_notice *nt;
    char name[RING_NAME_MAX];
};

/* One request's notice to every other gateway: the calls in flight and who waits for them. */
struct peer_notice {
    struct peer *p;
    atomic_size_t left; /* calls not ended, +1 while they are being started */
    objects_notified_f *done;
    void *cls;
    size_t n_changes;
    struct peer_notice_call calls[];
};

/* Drops one of @nt's counts; the last one tells the waiter and frees it. */
static void peer_notice_put(struct peer_notice *nt)
{
    if (atomic_fetch_sub(&nt->left, 1) != 1)
        return;
    nt->done(nt->cls);
    free(nt);
}

static void peer_notice_one(void *cls, struct peer_xfer *x)
{
    struct peer_notice_call *c = cls;
    struct peer_notice *nt = c->nt;
    int rc = peer_xfer_rc(x);
    long st = peer_xfer_status(x);
    if (rc || st != 200) {
        atomic_fetch_add(&nt->p->inval_failed, 1);
        if (peer_resync_owe(nt->p->resync, c->name))
            log_warn("cluster: %s was not told of %zu change%s (%s): it is owed a resync and "
                     "not waited for until it confirms one", c->name, nt->n_changes,
                     nt->n_changes == 1 ? "" : "s",
                     rc ? s3c_strerror(rc) : st == 404 ? "HTTP 404: an older s3cached?"
                                                      : "HTTP error");
    }
    peer_notice_put(nt);
}

/* {"changes":[{"bucket":B,"key":K,"key_hex":H,"warm":true,"stored":true},{"bucket":B},...]}
 * into @b. A key is any bytes but NUL, JSON strings are UTF-8: "key_hex" carries it whole (the
 * receiver reads it; "key" is for people, and for an older peer). */
static int peer_notice_body(struct buf *b, const struct objects_change *ch, size_t n)
{
    int rc = buf_puts(b, "{\"changes\":[");
    for (size_t i = 0; !rc && i < n; i++) {
        rc = buf_puts(b, i ? ",{\"bucket\":" : "{\"bucket\":") || buf_json_str(b, ch[i].bucket);
        if (!rc && ch[i].key)
            rc = buf_puts(b, ",\"key\":") || buf_json_str(b, ch[i].key) ||
                 buf_puts(b, ",\"key_hex\":") || buf_json_hex(b, ch[i].key);
        if (!rc && ch[i].key && ch[i].rewarm)
            rc = buf_puts(b, ",\"warm\":true");
        if (!rc && ch[i].key && ch[i].stored)
            rc = buf_puts(b, ",\"stored\":true");
        if (!rc)
            rc = buf_puts(b, "}");
    }
    return rc ? rc : buf_puts(b, "]}");
}

static int peer_ops_notify(void *cls, const struct objects_change *ch, size_t n,
                           objects_notified_f *done, void *done_cls)
{
    struct peer *p = cls;
    char **names = NULL;
    size_t nn = 0;
    int self = -1;
    if (!n || peer_names(p, &names, &nn, &self) || nn <= 1) {
        peer_names_free(names);
        return 0;
    }
    struct buf body;
    buf_init(&body, PEER_NOTICE_BODY_MAX);
    struct peer_notice *nt = calloc(1, sizeof(*nt) + nn * sizeof(nt->calls[0]));
    if (!nt || peer_notice_body(&body, ch, n)) {
        /* nobody can be told: every other gateway is owed a resync, nothing is waited for */
        for (size_t i = 0; i < nn; i++)
            if ((int)i != self)
                peer_resync_owe(p->resync, names[i]);
        atomic_fetch_add(&p->inval_failed, nn - 1);
        free(nt);
        buf_free(&body);
        peer_names_free(names);
        return 0;
    }
    nt->p = p;
    nt->done = done;
    nt->cls = done_cls;
    nt->n_changes = n;
    atomic_init(&nt->left, 1);
    size_t k = 0;
    for (size_t i = 0; i < nn; i++) {
        if ((int)i == self)
            continue;
        atomic_fetch_add(&p->inval_sent, 1);
        /* one that missed a notice before and has not confirmed a resync since is not waited
         * for: the resync covers this change too */
        if (peer_resync_owed(p->resync, names[i])) {
            atomic_fetch_add(&p->inval_failed, 1);
            continue;
        }
        struct peer_notice_call *c = &nt->calls[k++];
        c->nt = nt;
        snprintf(c->name, sizeof(c->name), "%s", names[i]);
        struct peer_req r = {.host = c->name, .method = "POST", .path = "/_/notice",
                             .body = body.p, .body_len = body.len, .timeout_ms = p->timeout_ms};
        atomic_fetch_add(&nt->left, 1);
        if (peer_call_start(p->http, &r, peer_notice_one, c)) {
            atomic_fetch_add(&p->inval_failed, 1);
            peer_resync_owe(p->resync, c->name);
            atomic_fetch_sub(&nt->left, 1);
        }
    }
    buf_free(&body);
    peer_names_free(names);
    peer_notice_put(nt); /* the calls may all have ended: then @done runs now */
    return 1;
}

int peer_behind(struct peer *p, const char *name)
{
    return peer_resync_behind(p->resync, name);
}

void peer_objects_ops(struct peer *p, struct objects_peer_ops *ops)
{
    ops->keep = peer_ops_keep;
    ops->notify = peer_ops_notify;
    ops->cls = p;
}

/* --- asynchronous fan-out ------------------------------------------------------------------ */

struct peer_fanout_slot {
    struct peer_fanout *f;
    char *node;
    int rc;
    long status;
    struct buf body;
};

struct peer_fanout {
    pthread_mutex_t mu;
    size_t n, left;
    struct peer_fanout_slot *slots;
    peer_fanout_done_f *done;
    void *cls;
};

static void peer_fanout_one(void *cls, struct peer_xfer *x)
{
    struct peer_fanout_slot *sl = cls;
    struct peer_fanout *f = sl->f;
    sl->rc = peer_xfer_rc(x);
    sl->status = peer_xfer_status(x);
    const struct buf *b = peer_xfer_body(x);
    if (b->p)
        buf_append(&sl->body, b->p, b->len);
    pthread_mutex_lock(&f->mu);
    int last = --f->left == 0;
    pthread_mutex_unlock(&f->mu);
    if (last)
        f->done(f->cls);
}

int peer_fanout_start(struct peer *p, const struct peer_req *tmpl, peer_fanout_done_f *done,
                      void *cls, struct peer_fanout **out)
{
    char **names = NULL;
    size_t n = 0;
    int self = -1;
    *out = NULL;
    if (peer_names(p, &names, &n, &self))
        return -ENOMEM;
    size_t others = n - (self >= 0 && (size_t)self < n ? 1 : 0);
    struct peer_fanout *f = others ? calloc(1, sizeof(*f)) : NULL;
    if (!others || !f || !(f->slots = calloc(others, sizeof(*f->slots)))) {
        free(f);
        peer_names_free(names);
        return others ? -ENOMEM : 0;
    }
    pthread_mutex_init(&f->mu, NULL);
    f->done = done;
    f->cls = cls;
    for (size_t i = 0; i < n; i++) {
        if ((int)i == self)
            continue;
        struct peer_fanout_slot *sl = &f->slots[f->n++];
        sl->f = f;
        if (!(sl->node = strdup(names[i])))
            sl->rc = -ENOMEM;
        buf_init(&sl->body, PEER_BODY_MAX);
    }
    f->left = f->n + 1; /* one for this call, so no callback ends it while calls start */
    for (size_t i = 0; i < f->n; i++) {
        struct peer_fanout_slot *sl = &f->slots[i];
        struct peer_req r = *tmpl;
        r.host = sl->node;
        int rc = sl->node ? peer_call_start(p->http, &r, peer_fanout_one, sl) : -ENOMEM;
        if (rc) {
            sl->rc = rc;
            pthread_mutex_lock(&f->mu);
            f->left--;
            pthread_mutex_unlock(&f->mu);
        }
    }
    peer_names_free(names);
    pthread_mutex_lock(&f->mu);
    int last = --f->left == 0;
    pthread_mutex_unlock(&f->mu);
    *out = f;
    if (last) /* every call failed to start: answered now */
        done(cls);
    return (int)f->n;
}

size_t peer_fanout_count(const struct peer_fanout *f)
{
    return f ? f->n : 0;
}

const char *peer_fanout_node(const struct peer_fanout *f, size_t i)
{
    return f->slots[i].node ? f->slots[i].node : "?";
}

int peer_fanout_rc(const struct peer_fanout *f, size_t i)
{
    return f->slots[i].rc;
}

long peer_fanout_status(const struct peer_fanout *f, size_t i)
{
    return f->slots[i].status;
}

const struct buf *peer_fanout_body(const struct peer_fanout *f, size_t i)
{
    return &f->slots[i].body;
}

void peer_fanout_free(struct peer_fanout *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++) {
        free(f->slots[i].node);
        buf_free(&f->slots[i].body);
    }
    free(f->slots);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

void peer_count_proxy(struct peer *p, int fallback)
{
    atomic_fetch_add(fallback ? &p->fallbacks : &p->proxied, 1);
}

void peer_get_counters(struct peer *p, struct peer_counters *out)
{
    struct peers_stats ps;
    memset(out, 0, sizeof(*out));
    out->proxied = atomic_load(&p->proxied);
    out->proxy_fallbacks = atomic_load(&p->fallbacks);
    unsigned open = 0;
    peer_http_stream_stats(p->streams, &open, &out->proxy_limited);
    out->proxy_streams = open;
    out->invalidations_sent = atomic_load(&p->inval_sent);
    out->invalidations_failed = atomic_load(&p->inval_failed);
    struct peer_resync_stats rs;
    peer_resync_stats(p->resync, &rs);
    out->peers_behind = rs.behind;
    out->resyncs = rs.resyncs;
    peers_stats(p->members, &ps);
    out->generation = ps.generation;
    out->members = ps.count;
    out->self_index = ps.self;
}
