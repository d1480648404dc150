/*
 * peer.c: the cluster context (peer.h): membership and ring lookups over cluster/peers.c, the
 * HTTP client to the peers, the write path's hooks (a write through any gateway makes every
 * other one forget the key before the client is answered) and the invalidation fan-out.
 * Counts what it does for /_/stats and /_/metrics; logs a peer that could not be told.
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

#define PEER_MAGIC 0x9ee9c7a5u

struct peer {
    unsigned magic;
    const struct conf *cf;
    struct peers *members;
    struct peer_http *http;
    char self[RING_NAME_MAX];
    int64_t timeout_ms;
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
    struct peer *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->magic = PEER_MAGIC;
    p->cf = cf;
    p->timeout_ms = cf->peer_timeout > 0 ? cf->peer_timeout : 5000;
    int rc = peers_new(cf->peers, cf->self, NULL, &p->members, err, sizeof(err));
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
    };
    if ((rc = peer_http_new(&ho, &p->http))) {
        errmsg_set(em, "cannot start the peer client: %s", strerror(-rc));
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
    peer_http_free(p->http);
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

/* Tells every other gateway to forget (@bucket, @key) (or @bucket under @prefix); the owner of
 * @key also fetches it back when @rewarm. Returns the number that could not be told. */
static unsigned peer_tell(struct peer *p, const char *bucket, const char *key,
                          const char *prefix, int rewarm, unsigned *sent)
{
    char **names = NULL, owner[RING_NAME_MAX] = "";
    size_t n = 0, k = 0;
    int self = -1;
    unsigned failed = 0;
    *sent = 0;
    if (peer_names(p, &names, &n, &self) || n <= 1) {
        peer_names_free(names);
        return 0;
    }
    if (key && rewarm && !peer_route_key(p, bucket, key, owner))
        owner[0] = '\0';
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
    struct sigv4_kv q_warm = {"warm", "1"};
    for (size_t i = 0; rq && res && i < n; i++) {
        if ((int)i == self)
            continue;
        rq[k] = (struct peer_req){.host = names[i], .method = "DELETE", .path = path.p,
                                  .timeout_ms = p->timeout_ms};
        if (!key) {
            rq[k].query = &q_prefix;
            rq[k].n_query = 1;
        } else if (owner[0] && !strcmp(owner, names[i])) {
            rq[k].query = &q_warm;
            rq[k].n_query = 1;
        }
        k++;
    }
    if (rq && res) {
        peer_call_many(p->http, rq, k, res);
        for (size_t i = 0; i < k; i++) {
            if (res[i].rc || res[i].status != 200) {
                failed++;
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

unsigned peer_invalidate_all(struct peer *p, const char *bucket, const char *key,
                             const char *prefix, unsigned *sent)
{
    return peer_tell(p, bucket, key, prefix, 0, sent);
}

static int peer_ops_keep(void *cls, const char *bucket, const char *key)
{
    char owner[RING_NAME_MAX];
    return !peer_route_key(cls, bucket, key, owner);
}

static void peer_ops_changed(void *cls, const char *bucket, const char *key, int rewarm)
{
    unsigned sent;
    (void)peer_tell(cls, bucket, key, key ? NULL : "", rewarm, &sent);
}

void peer_objects_ops(struct peer *p, struct objects_peer_ops *ops)
{
    ops->keep = peer_ops_keep;
    ops->changed = peer_ops_changed;
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
    out->invalidations_sent = atomic_load(&p->inval_sent);
    out->invalidations_failed = atomic_load(&p->inval_failed);
    peers_stats(p->members, &ps);
    out->generation = ps.generation;
    out->members = ps.count;
    out->self_index = ps.self;
}
