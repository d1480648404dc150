/*
 * h_admin.c: the reserved /_/ endpoints: health (no auth), stats (JSON),
 * metrics (Prometheus), cache invalidation, eviction policies; and OPTIONS,
 * which S3 answers 400 without a CORS Origin.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acct/fair.h"
#include "acct/jobs.h"
#include "acct/stats.h"
#include "admin.h"
#include "admin_priv.h"
#include "backends/backend.h"
#include "cache/cache.h"
#include "http/auth.h"
#include "http/respond.h"
#include "http/server.h"
#include "lib/json.h"
#include "lib/s3err.h"
#include "objects/objects.h"
#include "objects/warm.h"
#include "peer/cstats.h"
#include "peer/cwarm.h"
#include "peer/peer.h"

enum { PH_START = 0, PH_JOB_DONE };

/* Cluster mode: this gateway's part of /_/stats ("cluster": its name, the ring, what it sent
 * to and served for the others) and of /_/metrics (s3cached_cluster_*; s3cached_node_info
 * names the node, so a `sum by` over gateways can join on it), appended to @b. */
static int admin_cluster_figures(struct server *srv, int prometheus, struct buf *b)
{
    struct peer_counters pc;
    peer_get_counters(srv->peer, &pc);
    if (prometheus) {
        int rc = buf_puts(b, "# HELP s3cached_node_info This gateway's name on the ring.\n"
                             "# TYPE s3cached_node_info gauge\ns3cached_node_info{node=\"");
        for (const char *c = peer_self(srv->peer); !rc && *c; c++)
            rc = *c == '"' || *c == '\\' ? buf_printf(b, "\\%c", *c) : buf_append(b, c, 1);
        if (!rc)
            rc = buf_printf(
                b,
                "\"} 1\n"
                "# HELP s3cached_cluster_members Gateways on the ring.\n"
                "# TYPE s3cached_cluster_members gauge\ns3cached_cluster_members %llu\n"
                "# HELP s3cached_cluster_ring_generation Ring rebuilds since start (+1).\n"
                "# TYPE s3cached_cluster_ring_generation gauge\n"
                "s3cached_cluster_ring_generation %llu\n"
                "# HELP s3cached_cluster_proxied_total Reads answered by their owner through this "
                "gateway.\n# TYPE s3cached_cluster_proxied_total counter\n"
                "s3cached_cluster_proxied_total %llu\n"
                "# HELP s3cached_cluster_proxy_fallbacks_total Reads served here because their "
                "owner could not be reached.\n"
                "# TYPE s3cached_cluster_proxy_fallbacks_total counter\n"
                "s3cached_cluster_proxy_fallbacks_total %llu\n"
                "# HELP s3cached_cluster_proxy_limited_total Of those, reads served here because "
                "the proxied reads were at their limit (in all or for their client).\n"
                "# TYPE s3cached_cluster_proxy_limited_total counter\n"
                "s3cached_cluster_proxy_limited_total %llu\n"
                "# HELP s3cached_cluster_proxy_streams Proxied reads open now.\n"
                "# TYPE s3cached_cluster_proxy_streams gauge\n"
                "s3cached_cluster_proxy_streams %llu\n"
                "# HELP s3cached_cluster_invalidations_sent_total Write notices sent to other "
                "gateways.\n# TYPE s3cached_cluster_invalidations_sent_total counter\n"
                "s3cached_cluster_invalidations_sent_total %llu\n"
                "# HELP s3cached_cluster_invalidations_failed_total Write notices that did not "
                "reach their gateway.\n# TYPE s3cached_cluster_invalidations_failed_total "
                "counter\ns3cached_cluster_invalidations_failed_total %llu\n"
                "# HELP s3cached_cluster_peers_behind Gateways that missed a write notice and "
                "have not confirmed a resync yet.\n# TYPE s3cached_cluster_peers_behind gauge\n"
                "s3cached_cluster_peers_behind %llu\n"
                "# HELP s3cached_cluster_resyncs_total Resyncs confirmed by gateways that had "
                "missed a write notice.\n# TYPE s3cached_cluster_resyncs_total counter\n"
                "s3cached_cluster_resyncs_total %llu\n",
                (unsigned long long)pc.members, (unsigned long long)pc.generation,
                (unsigned long long)pc.proxied, (unsigned long long)pc.proxy_fallbacks,
                (unsigned long long)pc.proxy_limited, (unsigned long long)pc.proxy_streams,
                (unsigned long long)pc.invalidations_sent,
                (unsigned long long)pc.invalidations_failed,
                (unsigned long long)pc.peers_behind, (unsigned long long)pc.resyncs);
        return rc;
    }
    /* the JSON document ends "}\n": the member goes before that brace */
    while (b->len && (b->p[b->len - 1] == '\n' || b->p[b->len - 1] == '}'))
        if (b->p[--b->len] == '}')
            break;
    int rc = buf_puts(b, ",\n \"cluster\": {\"self\": ") || buf_json_str(b, peer_self(srv->peer));
    if (!rc)
        rc = buf_printf(b, ", \"members\": %llu, \"self_listed\": %s, \"ring_generation\": %llu, "
                           "\"proxied\": %llu, \"proxy_fallbacks\": %llu, "
                           "\"proxy_limited\": %llu, \"proxy_streams\": %llu, "
                           "\"invalidations_sent\": %llu, \"invalidations_failed\": %llu, "
                           "\"peers_behind\": %llu, \"resyncs\": %llu}}\n",
                        (unsigned long long)pc.members, pc.self_index >= 0 ? "true" : "false",
                        (unsigned long long)pc.generation, (unsigned long long)pc.proxied,
                        (unsigned long long)pc.proxy_fallbacks,
                        (unsigned long long)pc.proxy_limited,
                        (unsigned long long)pc.proxy_streams,
                        (unsigned long long)pc.invalidations_sent,
                        (unsigned long long)pc.invalidations_failed,
                        (unsigned long long)pc.peers_behind, (unsigned long long)pc.resyncs);
    return rc;
}

/* The credentials file's reloads (SIGHUP), appended to @b: in /_/stats "credentials", in
 * /_/metrics s3cached_credentials_*. last_reload_failed says the file on disk is not the one
 * in force (auth_reload()). */
static int admin_credentials_figures(struct server *srv, int prometheus, struct buf *b)
{
    struct auth_reload_status rs;
    auth_reload_status(srv->auth, &rs);
    if (prometheus)
        return buf_printf(
            b,
            "# HELP s3cached_credentials_reloads_total Reloads of the credentials file (SIGHUP) "
            "that took effect.\n# TYPE s3cached_credentials_reloads_total counter\n"
            "s3cached_credentials_reloads_total %lu\n"
            "# HELP s3cached_credentials_reload_failures_total Reloads of the credentials file "
            "refused (the previous keys stayed, less those the file no longer names).\n"
            "# TYPE s3cached_credentials_reload_failures_total counter\n"
            "s3cached_credentials_reload_failures_total %lu\n"
            "# HELP s3cached_credentials_last_reload_failed 1 when the last reload of the "
            "credentials file failed: the file on disk is not in force.\n"
            "# TYPE s3cached_credentials_last_reload_failed gauge\n"
            "s3cached_credentials_last_reload_failed %d\n",
            rs.reloads, rs.reload_failures, rs.last_failed);
    /* the JSON document ends "}\n": the member goes before that brace */
    while (b->len && (b->p[b->len - 1] == '\n' || b->p[b->len - 1] == '}'))
        if (b->p[--b->len] == '}')
            break;
    int rc = buf_printf(b,
                        ",\n \"credentials\": {\"reloads\": %lu, \"reload_failures\": %lu, "
                        "\"last_reload_failed\": %s, \"revoked_by_failed_reload\": %zu, "
                        "\"last_reload_error\": ",
                        rs.reloads, rs.reload_failures, rs.last_failed ? "true" : "false",
                        rs.revoked);
    if (!rc)
        rc = buf_json_str(b, rs.last_error);
    if (!rc)
        rc = buf_puts(b, "}}\n");
    return rc;
}

/* This gateway's /_/stats (or /_/metrics) into @b. */
static int admin_stats_doc(struct server *srv, int prometheus, struct buf *b)
{
    struct cache_stats cs;
    struct backend_counters bc;
    struct fair_stats fs;
    cache_get_stats(srv->cache, &cs);
    fair_get_stats(srv->fair, &fs);
    backend_counters_get(srv->be, &bc);
    struct cache_policy_report pr;
    int rc = cache_policy_report(srv->cache, &pr);
    if (rc)
        return rc;
    rc = prometheus ? stats_prometheus(srv->stats, &cs, &bc, &fs, &pr, b)
                    : stats_json(srv->stats, &cs, &bc, &fs, &pr, b);
    cache_policy_report_free(&pr);
    if (!rc)
        rc = admin_credentials_figures(srv, prometheus, b);
    if (!rc && srv->peer)
        rc = admin_cluster_figures(srv, prometheus, b);
    if (!rc)
        rc = admin_plan_figures(srv, prometheus, b);
    return rc;
}

/* GET /_/stats?scope=cluster: every gateway's document (asked at once, each bounded by
 * --peer-timeout), merged (peer/cstats.c). On a worker. */
struct cstats_state {
    int rc;
    struct buf out;
};

static void cstats_state_free(void *p)
{
    struct cstats_state *s = p;
    if (!s)
        return;
    buf_free(&s->out);
    free(s);
}

static void cstats_job(struct req *rq)
{
    struct cstats_state *s = rq->job_state;
    struct server *srv = rq->srv;
    char **names = NULL;
    size_t n = 0, k = 0;
    int self = -1;
    struct buf local;
    buf_init(&local, 64u << 20);
    s->rc = admin_stats_doc(srv, 0, &local);
    if (!s->rc)
        s->rc = peer_names(srv->peer, &names, &n, &self);
    struct peer_req *prq = calloc(n + 1, sizeof(*prq));
    struct peer_result *res = calloc(n + 1, sizeof(*res));
    struct cstats_node *nodes = calloc(n + 1, sizeof(*nodes));
    size_t *which = calloc(n + 1, sizeof(*which));
    if (!s->rc && (!prq || !res || !nodes || !which))
        s->rc = -ENOMEM;
    size_t nn = 0;
    if (!s->rc && self < 0) /* not (yet) on the ring: still a gateway of the cluster */
        nodes[nn++] = (struct cstats_node){peer_self(srv->peer), 1, local.p, local.len, NULL};
    for (size_t i = 0; !s->rc && i < n; i++) {
        if ((int)i == self) {
            nodes[nn++] = (struct cstats_node){names[i], 1, local.p, local.len, NULL};
            continue;
        }
        prq[k] = (struct peer_req){.host = names[i], .method = "GET", .path = "/_/stats",
                                   .request_id = rq->id, .timeout_ms = peer_timeout_ms(srv->peer)};
        which[k++] = nn;
        nodes[nn++] = (struct cstats_node){names[i], 0, NULL, 0, NULL};
    }
    if (!s->rc && k)
        peer_call_many(peer_client(srv->peer), prq, k, res);
    char (*why)[96] = calloc(k + 1, sizeof(*why));
    for (size_t i = 0; !s->rc && i < k; i++) {
        struct cstats_node *nd = &nodes[which[i]];
        if (!res[i].rc && res[i].status == 200 && res[i].body.p) {
            nd->doc = res[i].body.p;
            nd->len = res[i].body.len;
        } else if (why) {
            if (res[i].rc)
                snprintf(why[i], sizeof(why[i]), "%s", s3c_strerror(res[i].rc));
            else
                snprintf(why[i], sizeof(why[i]), "HTTP %ld", res[i].status);
            nd->error = why[i];
        }
    }
    if (!s->rc)
        s->rc = cstats_merge(nodes, nn, &s->out);
    for (size_t i = 0; res && i < k; i++)
        buf_free(&res[i].body);
    free(why);
    free(prq);
    free(res);
    free(nodes);
    free(which);
    peer_names_free(names);
    buf_free(&local);
}

static int admin_stats_cluster(struct req *rq)
{
    struct cstats_state *s = rq->job_state;
    if (rq->phase == PH_JOB_DONE)
        return s->rc ? respond_error(rq, s->rc)
                     : respond_text(rq, 200, "application/json", s->out.p, s->out.len);
    if (!(s = calloc(1, sizeof(*s))))
        return respond_error(rq, -ENOMEM);
    buf_init(&s->out, 64u << 20);
    rq->job_state = s;
    rq->job_state_free = cstats_state_free;
    rq->phase = PH_JOB_DONE;
    int rc = req_run_job(rq, cstats_job);
    return rc ? respond_error(rq, rc) : REQ_OK;
}

static int admin_stats(struct req *rq, int prometheus)
{
    struct server *srv = rq->srv;
    struct buf b;
    const char *scope = req_query(rq, "scope");
    if (scope && strcmp(scope, "cluster") && strcmp(scope, "node"))
        return respond_error_msg(rq, -S3E_INVALID_ARGUMENT, "scope is node or cluster");
    if (scope && !strcmp(scope, "cluster") && !prometheus) {
        if (!srv->peer)
            return respond_error_msg(rq, -S3E_INVALID_ARGUMENT,
                                     "scope=cluster needs a gateway started with --peers");
        if (!rq->is_peer)
            return admin_stats_cluster(rq);
    }
    buf_init(&b, 64u << 20);
    int rc = admin_stats_doc(srv, prometheus, &b);
    if (rc) {
        buf_free(&b);
        return respond_error(rq, rc);
    }
    size_t len = b.len;
    int r = respond_text(rq, 200,
                         prometheus ? "text/plain; version=0.0.4; charset=utf-8"
                                    : "application/json",
                         b.p ? b.p : "", len);
    buf_free(&b);
    return r;
}

struct inval_state {
    char *bucket;
    char *key;
    char *prefix;
    uint64_t n;
    int rewarm;              /* ?warm=1 (a peer's write notice): fetch the new version back */
    unsigned peers, peers_failed;
};

static void inval_state_free(void *p)
{
    struct inval_state *s = p;
    if (!s)
        return;
    free(s->bucket);
    free(s->key);
    free(s->prefix);
    free(s);
}

static void inval_job(struct req *rq)
{
    struct inval_state *s = rq->job_state;
    if (s->key) {
        rq->rc = cache_invalidate(rq->srv->cache, s->bucket, s->key);
        s->n = rq->rc ? 0 : 1;
        if (s->rewarm && !rq->rc)
            (void)warm_object(rq->srv->warm, s->bucket, s->key);
    } else {
        rq->rc = cache_invalidate_prefix(rq->srv->cache, s->bucket, s->prefix ? s->prefix : "",
                                         &s->n);
    }
    /* cluster mode: an operator's invalidation reaches every gateway (a peer's stays here) */
    if (rq->srv->peer && !rq->is_peer)
        s->peers_failed = peer_invalidate_all(rq->srv->peer, s->bucket, s->key,
                                              s->prefix ? s->prefix : "", &s->peers);
}

/* DELETE /_/cache/BUCKET/KEY or /_/cache/BUCKET?prefix=P */
static int admin_invalidate(struct req *rq, const char *rest)
{
    if (rq->phase == PH_JOB_DONE) {
        struct inval_state *s = rq->job_state;
        struct buf b;
        buf_init(&b, 256);
        if (rq->srv->peer && !rq->is_peer)
            buf_printf(&b, "{\"invalidated\":%llu,\"peers\":%u,\"peers_failed\":%u}\n",
                       (unsigned long long)s->n, s->peers, s->peers_failed);
        else
            buf_printf(&b, "{\"invalidated\":%llu}\n", (unsigned long long)s->n);
        int r = respond_text(rq, 200, "application/json", b.p, b.len);
        buf_free(&b);
        return r;
    }
    struct inval_state *s = calloc(1, sizeof(*s));
    if (!s)
        return respond_error(rq, -ENOMEM);
    rq->job_state = s;
    rq->job_state_free = inval_state_free;
    size_t bl = strcspn(rest, "/");
    s->bucket = strndup(rest, bl);
    if (!s->bucket || backend_check_bucket_name(s->bucket))
        return respond_error(rq, -S3E_INVALID_BUCKET_NAME);
    if (rest[bl] == '/' && rest[bl + 1]) {
        s->key = strdup(rest + bl + 1);
        if (!s->key || backend_check_key(s->key, strlen(s->key)))
            return respond_error(rq, -S3E_INVALID_KEY);
    } else {
        const char *p = req_query(rq, "prefix");
        s->prefix = strdup(p ? p : "");
    }
    const char *w = req_query(rq, "warm");
    s->rewarm = w && !strcmp(w, "1");
    rq->phase = PH_JOB_DONE;
    int rc = req_run_job(rq, inval_job);
    return rc ? respond_error(rq, rc) : REQ_OK;
}

/* A cluster warm job (cluster mode): its status or its cancel ask other gateways, so they run
 * on a worker; a job this gateway does not have is looked for on the others (the balancer
 * sends /_/warm/ID to another gateway than /_/warm). */
struct cwarm_req {
    char id[64];
    int rc;
    struct buf out;
};

static void cwarm_req_free(void *p)
{
    struct cwarm_req *s = p;
    if (!s)
        return;
    buf_free(&s->out);
    free(s);
}

static void cwarm_job(struct req *rq)
{
    struct cwarm_req *s = rq->job_state;
    int del = !strcmp(rq->method, "DELETE");
    s->rc = del ? cwarm_cancel(rq->srv->cwarm, s->id, &s->out)
                : cwarm_status(rq->srv->cwarm, s->id, &s->out);
    if (s->rc == -S3E_NOT_FOUND && !rq->is_peer)
        s->rc = cwarm_elsewhere(rq->srv->cwarm, del ? "DELETE" : "GET", s->id, &s->out);
}

static int admin_cwarm(struct req *rq, const char *id)
{
    struct cwarm_req *s = rq->job_state;
    if (rq->phase == PH_JOB_DONE)
        return s->rc ? respond_error(rq, s->rc)
                     : respond_text(rq, 200, "application/json", s->out.p, s->out.len);
    if (strcmp(rq->method, "GET") && strcmp(rq->method, "DELETE"))
        return respond_error(rq, -S3E_METHOD_NOT_ALLOWED);
    if (strlen(id) >= sizeof(s->id))
        return respond_error(rq, -S3E_NOT_FOUND);
    if (!(s = calloc(1, sizeof(*s))))
        return respond_error(rq, -ENOMEM);
    snprintf(s->id, sizeof(s->id), "%s", id);
    buf_init(&s->out, 64u << 20);
    rq->job_state = s;
    rq->job_state_free = cwarm_req_free;
    rq->phase = PH_JOB_DONE;
    int rc = req_run_job(rq, cwarm_job);
    return rc ? respond_error(rq, rc) : REQ_OK;
}

/* /_/warm[/ID]: POST starts a job, GET reports one or all, DELETE cancels one. In cluster mode
 * a client's job is a cluster job (peer/cwarm.c): shares of it reach the other gateways as
 * their own jobs. */
static int admin_warm(struct req *rq, const char *rest)
{
    struct warm *w = rq->srv->warm;
    struct errmsg em = {{0}};
    struct buf b;
    int rc;
    const char *id = rest[0] == '/' && rest[1] ? rest + 1 : NULL;
    if (id && rq->srv->cwarm && cwarm_is_id(id))
        return admin_cwarm(rq, id);
    buf_init(&b, 64u << 20);
    if (!strcmp(rq->method, "POST") && !id && rq->srv->cwarm && !rq->is_peer) {
        rc = cwarm_start(rq->srv->cwarm, rq->body.p, rq->body.len, &b, &em);
        if (!rc) {
            int r = respond_text(rq, 202, "application/json", b.p, b.len);
            buf_free(&b);
            return r;
        }
    } else if (!strcmp(rq->method, "POST") && !id) {
        rc = warm_start(w, rq->body.p, rq->body.len, &b, &em);
        if (!rc) {
            int r = respond_text(rq, 202, "application/json", b.p, b.len);
            buf_free(&b);
            return r;
        }
    } else if (!strcmp(rq->method, "GET")) {
        rc = warm_status(w, id, &b);
    } else if (!strcmp(rq->method, "DELETE") && id) {
        rc = warm_cancel(w, id);
        if (!rc)
            rc = warm_status(w, id, &b);
    } else {
        rc = -S3E_METHOD_NOT_ALLOWED;
    }
    int r = rc ? respond_error_msg(rq, rc, em.buf[0] ? em.buf : NULL)
               : respond_text(rq, 200, "application/json", b.p, b.len);
    buf_free(&b);
    return r;
}

struct unpin_state {
    uint64_t n;
    struct errmsg em;
};

static void unpin_job(struct req *rq)
{
    struct unpin_state *s = rq->job_state;
    rq->rc = warm_unpin(rq->srv->warm, rq->body.p, rq->body.len, &s->n, &s->em);
}

static int admin_unpin(struct req *rq)
{
    if (rq->phase == PH_JOB_DONE) {
        struct unpin_state *s = rq->job_state;
        char out[64];
        int n = snprintf(out, sizeof(out), "{\"unpinned\":%llu}\n", (unsigned long long)s->n);
        return respond_text(rq, 200, "application/json", out, (size_t)n);
    }
    struct unpin_state *s = calloc(1, sizeof(*s));
    if (!s)
        return respond_error(rq, -ENOMEM);
    rq->job_state = s;
    rq->job_state_free = free;
    rq->phase = PH_JOB_DONE;
    int rc = req_run_job(rq, unpin_job);
    return rc ? respond_error(rq, rc) : REQ_OK;
}

/* POST /_/flush: {"bucket":"b","prefix":"p","timeout_s":N} (all optional; query parameters
 * bucket, prefix, timeout_s too). Suspended, holding no thread (every rank of a job may flush
 * at its end), until everything written before it is on the backend: 200 {"flushed":true,...}; after timeout_s (default: none) 504 {"flushed":false,
 * "remaining_objects":N,...}. */
struct flush_state {
    char *bucket, *prefix;
    int64_t timeout_ms;
    int rc; /* not rq->rc: a timeout is an answer here, not a failed job */
    struct drain_flush_result res;
    /* cluster mode: the same flush at every other gateway, answered when all are */
    pthread_mutex_t mu;
    int pending;               /* parts not answered yet (this gateway's, the others') */
    struct peer_fanout *fan;
    int fan_rc;                /* < 0: the others could not be asked */
};

static void flush_state_free(void *p)
{
    struct flush_state *s = p;
    if (!s)
        return;
    free(s->bucket);
    free(s->prefix);
    peer_fanout_free(s->fan);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* One part of the flush answered: the last one wakes the request. */
static void flush_part_done(struct req *rq)
{
    struct flush_state *s = rq->job_state;
    pthread_mutex_lock(&s->mu);
    int last = --s->pending == 0;
    pthread_mutex_unlock(&s->mu);
    if (last)
        req_resume(rq);
}

/* The flush's answer (drain_flush_cb, from the drain's flush thread). */
static void flush_done(void *arg, int rc, const struct drain_flush_result *res)
{
    struct req *rq = arg;
    struct flush_state *s = rq->job_state;
    s->rc = rc;
    s->res = *res;
    flush_part_done(rq);
}

static void flush_fan_done(void *arg)
{
    flush_part_done(arg);
}

/* Cluster mode: asks every other gateway to flush the same (their answers, once all came,
 * resume the request with this gateway's). Counts as one part of s->pending. */
static void flush_fan_start(struct req *rq, struct flush_state *s)
{
    struct buf body;
    buf_init(&body, 16384);
    buf_puts(&body, "{");
    if (s->bucket) {
        buf_puts(&body, "\"bucket\":");
        buf_json_str(&body, s->bucket);
        if (s->prefix) {
            buf_puts(&body, ",\"prefix\":");
            buf_json_str(&body, s->prefix);
        }
    }
    if (s->timeout_ms >= 0)
        buf_printf(&body, "%s\"timeout_s\":%.3f", s->bucket ? "," : "", s->timeout_ms / 1e3);
    buf_puts(&body, "}");
    struct peer *p = rq->srv->peer;
    struct peer_req tmpl = {
        .method = "POST", .path = "/_/flush", .body = body.p, .body_len = body.len,
        .request_id = rq->id, .no_stall_limit = 1,
        .timeout_ms = s->timeout_ms >= 0 ? s->timeout_ms + peer_timeout_ms(p) : 0,
    };
    int n = body.p ? peer_fanout_start(p, &tmpl, flush_fan_done, rq, &s->fan) : -ENOMEM;
    buf_free(&body);
    if (n <= 0) {
        s->fan_rc = n;
        flush_part_done(rq);
    }
}

/* The cluster's answer to a flush: this gateway's part and every other's. */
static int flush_answer_cluster(struct req *rq, struct flush_state *s)
{
    struct buf b;
    struct drain_flush_result t = s->res;
    int all = !s->rc && s->fan_rc >= 0;
    buf_init(&b, 1u << 20);
    buf_puts(&b, "\"nodes\":[{\"node\":");
    buf_json_str(&b, peer_self(rq->srv->peer));
    buf_printf(&b, ",\"flushed\":%s,\"remaining_objects\":%llu}", s->rc ? "false" : "true",
               (unsigned long long)s->res.remaining_objects);
    for (size_t i = 0; i < peer_fanout_count(s->fan); i++) {
        struct json *j = NULL;
        struct errmsg em;
        const struct buf *pb = peer_fanout_body(s->fan, i);
        int rc = peer_fanout_rc(s->fan, i);
        long st = peer_fanout_status(s->fan, i);
        int ok = !rc && (st == 200 || st == 504) && pb->p && !json_parse(pb->p, pb->len, &j, &em);
        const struct json *fl = ok ? json_get(j, "flushed") : NULL;
        int flushed = fl && fl->type == JSON_BOOL && fl->b;
        all = all && flushed;
        if (ok) {
            t.uploaded_objects += (uint64_t)json_get_num(j, "objects", 0);
            t.uploaded_bytes += (uint64_t)json_get_num(j, "bytes", 0);
            t.remaining_objects += (uint64_t)json_get_num(j, "remaining_objects", 0);
            t.remaining_bytes += (uint64_t)json_get_num(j, "remaining_bytes", 0);
        }
        buf_puts(&b, ",{\"node\":");
        buf_json_str(&b, peer_fanout_node(s->fan, i));
        buf_printf(&b, ",\"flushed\":%s", flushed ? "true" : "false");
        if (ok)
            buf_printf(&b, ",\"remaining_objects\":%llu",
                       (unsigned long long)json_get_num(j, "remaining_objects", 0));
        else {
            char why[96];
            snprintf(why, sizeof(why), "%s", rc ? s3c_strerror(rc) : "HTTP error");
            if (!rc)
                snprintf(why, sizeof(why), "HTTP %ld", st);
            buf_puts(&b, ",\"error\":");
            buf_json_str(&b, why);
        }
        buf_puts(&b, "}");
        json_free(j);
    }
    buf_puts(&b, "]");
    struct buf out;
    buf_init(&out, 2u << 20);
    buf_printf(&out,
               "{\"flushed\":%s,\"objects\":%llu,\"bytes\":%llu,\"remaining_objects\":%llu,"
               "\"remaining_bytes\":%llu,\"seconds\":%.3f,%s}\n",
               all ? "true" : "false", (unsigned long long)t.uploaded_objects,
               (unsigned long long)t.uploaded_bytes, (unsigned long long)t.remaining_objects,
               (unsigned long long)t.remaining_bytes, s->res.seconds, b.p ? b.p : "\"nodes\":[]");
    int r = out.p ? respond_text(rq, all ? 200 : 504, "application/json", out.p, out.len)
                  : respond_error(rq, -ENOMEM);
    buf_free(&b);
    buf_free(&out);
    return r;
}

static int admin_flush(struct req *rq)
{
    struct flush_state *s = rq->job_state;
    if (rq->phase == PH_JOB_DONE) {
        char out[512];
        if (s->rc == -S3E_SERVICE_UNAVAILABLE)
            return respond_error_msg(rq, s->rc, "The gateway is stopping: objects not yet on "
                                                "the backend stay journaled and drain after "
                                                "its restart");
        if (s->rc && s->rc != -ETIMEDOUT)
            return respond_error(rq, s->rc);
        if (rq->srv->peer && !rq->is_peer)
            return flush_answer_cluster(rq, s);
        int n = snprintf(out, sizeof(out),
                         "{\"flushed\":%s,\"objects\":%llu,\"bytes\":%llu,"
                         "\"remaining_objects\":%llu,\"remaining_bytes\":%llu,\"seconds\":%.3f}\n",
                         s->rc ? "false" : "true",
                         (unsigned long long)s->res.uploaded_objects,
                         (unsigned long long)s->res.uploaded_bytes,
                         (unsigned long long)s->res.remaining_objects,
                         (unsigned long long)s->res.remaining_bytes, s->res.seconds);
        return respond_text(rq, s->rc ? 504 : 200, "application/json", out, (size_t)n);
    }
    if (strcmp(rq->method, "POST"))
        return respond_error(rq, -S3E_METHOD_NOT_ALLOWED);
    s = calloc(1, sizeof(*s));
    if (!s)
        return respond_error(rq, -ENOMEM);
    pthread_mutex_init(&s->mu, NULL);
    rq->job_state = s;
    rq->job_state_free = flush_state_free;
    s->timeout_ms = -1;
    const char *qb = req_query(rq, "bucket"), *qp = req_query(rq, "prefix");
    const char *qt = req_query(rq, "timeout_s");
    double timeout_s = qt && *qt ? atof(qt) : -1;
    if (rq->body.len) {
        struct json *j = NULL;
        struct errmsg em = {{0}};
        if (json_parse(rq->body.p, rq->body.len, &j, &em))
            return respond_error_msg(rq, -S3E_INVALID_ARGUMENT,
                                     em.buf[0] ? em.buf : "the body must be a JSON object");
        qb = json_get_str(j, "bucket") ? json_get_str(j, "bucket") : qb;
        qp = json_get_str(j, "prefix") ? json_get_str(j, "prefix") : qp;
        timeout_s = json_get_num(j, "timeout_s", timeout_s);
        s->bucket = qb ? strdup(qb) : NULL;
        s->prefix = qp ? strdup(qp) : NULL;
        json_free(j);
    } else {
        s->bucket = qb ? strdup(qb) : NULL;
        s->prefix = qp ? strdup(qp) : NULL;
    }
    if (s->prefix && !s->bucket)
        return respond_error_msg(rq, -S3E_INVALID_ARGUMENT, "a prefix needs a bucket");
    if (timeout_s >= 0)
        s->timeout_ms = (int64_t)(timeout_s * 1000.0);
    rq->phase = PH_JOB_DONE;
    int cluster = rq->srv->peer && !rq->is_peer;
    s->pending = cluster ? 2 : 1;
    req_suspend(rq, PARK_WAIT);
    if (cluster)
        flush_fan_start(rq, s);
    int rc = objects_flush_start(rq->srv->obj, s->bucket, s->prefix, s->timeout_ms, flush_done,
                                 rq);
    if (rc) {
        s->rc = rc;
        flush_part_done(rq); /* answered with the error once the others answered */
    }
    return REQ_OK;
}

/* The job @name as one JSON object into @b: 0, -ENOENT or the writer's error. */
static int admin_job_one(struct jobs *jobs, const char *name, struct buf *b)
{
    struct jobs_view *v = NULL;
    size_t n = 0;
    int rc = jobs_snapshot(jobs, name, &v, &n);
    if (!rc)
        rc = n ? jobs_json_view(&v[0], b) : -ENOENT;
    free(v);
    return rc;
}

/* /_/jobs[/NAME]: GET lists the jobs (or one), POST {"job":"NAME","need_bps":N} (or
 * "need":"2.8G") declares what a job needs (0 clears it), DELETE /_/jobs/NAME forgets that. */
static int admin_jobs(struct req *rq, const char *rest)
{
    struct jobs *jobs = rq->srv->jobs;
    const char *name = rest[0] == '/' && rest[1] ? rest + 1 : NULL;
    struct buf b;
    int rc = 0;
    if (!jobs)
        return respond_error_msg(rq, -S3E_NOT_FOUND, "Job accounting is off (--accounting or "
                                                     "--stall-accounting false)");
    buf_init(&b, 64u << 20);
    if (!strcmp(rq->method, "POST") && !name) {
        struct json *j = NULL;
        struct errmsg em = {{0}};
        uint64_t need = 0;
        const char *why = NULL;
        if (json_parse(rq->body.p ? rq->body.p : "", rq->body.len, &j, &em) ||
            j->type != JSON_OBJ) {
            why = em.buf[0] ? em.buf : "the body must be a JSON object";
        } else if (!json_get_str(j, "job") || (why = jobs_check_name(json_get_str(j, "job")))) {
            why = why ? why : "\"job\" (a string) is required";
        } else if (json_get_str(j, "need")) {
            why = conf_parse_rate(json_get_str(j, "need"), &need);
        } else {
            const struct json *n = json_get(j, "need_bps");
            if (!n || n->type != JSON_NUM || n->num < 0 || n->num >= 1.8e19)
                why = "\"need_bps\" (bytes/s, a number >= 0) or \"need\" (\"2.8G\") is required";
            else
                need = (uint64_t)(n->num + 0.5);
        }
        if (!why) {
            rc = jobs_declare(jobs, json_get_str(j, "job"), need);
            if (!rc)
                rc = admin_job_one(jobs, json_get_str(j, "job"), &b);
        }
        json_free(j);
        if (why) {
            buf_free(&b);
            return respond_error_msg(rq, -S3E_INVALID_ARGUMENT, why);
        }
        if (rc == -ENOSPC) {
            buf_free(&b);
            return respond_error_msg(rq, -S3E_SLOW_DOWN, "The table of jobs is full");
        }
    } else if (!strcmp(rq->method, "GET") || !strcmp(rq->method, "HEAD")) {
        if (name) {
            rc = admin_job_one(jobs, name, &b);
        } else {
            rc = buf_puts(&b, "{\"jobs\": ");
            rc = rc ? rc : jobs_json(jobs, NULL, &b);
            rc = rc ? rc : buf_puts(&b, "}");
        }
        if (rc == -ENOENT) {
            buf_free(&b);
            return respond_error_msg(rq, -S3E_NOT_FOUND, "No such job");
        }
    } else if (!strcmp(rq->method, "DELETE") && name) {
        rc = jobs_forget(jobs, name);
        if (rc == -ENOENT) {
            buf_free(&b);
            return respond_error_msg(rq, -S3E_NOT_FOUND, "No job of that name was declared");
        }
        if (!rc)
            rc = admin_job_one(jobs, name, &b);
    } else {
        rc = -S3E_METHOD_NOT_ALLOWED;
    }
    if (!rc)
        rc = buf_puts(&b, "\n");
    int r = rc ? respond_error(rq, rc) : respond_text(rq, 200, "application/json", b.p, b.len);
    buf_free(&b);
    return r;
}

/* /_/policy: GET lists the eviction policy of every prefix the cache follows (the "policy"
 * object of /_/stats); PUT {"bucket":"b","prefix":"p","policy":"keep|lru|auto"} sets one
 * (no prefix: the whole bucket; auto drops the rule: LRU, watched) and answers the list. */
static int admin_policy(struct req *rq)
{
    struct cache *cache = rq->srv->cache;
    if (!strcmp(rq->method, "PUT")) {
        struct json *j = NULL;
        struct errmsg em = {{0}};
        if (json_parse(rq->body.p ? rq->body.p : "", rq->body.len, &j, &em) ||
            j->type != JSON_OBJ) {
            json_free(j);
            return respond_error_msg(rq, -S3E_INVALID_ARGUMENT,
                                     em.buf[0] ? em.buf
                                               : "the body must be a JSON object: {\"bucket\": "
                                                 "B, \"prefix\": P, \"policy\": "
                                                 "\"keep|lru|auto\"}");
        }
        const char *b = json_get_str(j, "bucket"), *p = json_get_str(j, "prefix");
        const char *m = json_get_str(j, "policy");
        int rc = 0;
        if (!b || !m || (json_get(j, "prefix") && !p)) {
            rc = -S3E_INVALID_ARGUMENT;
            errmsg_set(&em, "\"bucket\" and \"policy\" (keep, lru or auto) are strings, "
                            "\"prefix\" an optional string");
        } else {
            rc = cache_policy_set(cache, b, p ? p : "", m, &em);
        }
        json_free(j);
        if (rc)
            return respond_error_msg(rq, rc == -EINVAL ? -S3E_INVALID_ARGUMENT : rc,
                                     em.buf[0] ? em.buf : NULL);
    } else if (strcmp(rq->method, "GET") && strcmp(rq->method, "HEAD")) {
        return respond_error(rq, -S3E_METHOD_NOT_ALLOWED);
    }
    struct cache_policy_report pr;
    struct buf b;
    int rc = cache_policy_report(cache, &pr);
    if (rc)
        return respond_error(rq, rc);
    buf_init(&b, 64u << 20);
    rc = stats_policy_json(&b, &pr);
    if (!rc)
        rc = buf_puts(&b, "\n");
    cache_policy_report_free(&pr);
    int r = rc ? respond_error(rq, rc) : respond_text(rq, 200, "application/json", b.p, b.len);
    buf_free(&b);
    return r;
}

static int h_admin_end(struct req *rq)
{
    const char *p = rq->path + 2; /* after "/_" */
    int get = !strcmp(rq->method, "GET") || !strcmp(rq->method, "HEAD");
    if (!strcmp(p, "/health") && get)
        return respond_text(rq, 200, "text/plain", "ok\n", 3);
    if (admin_plan_path(p) && !rq->is_peer)
        return admin_plan(rq, p + 5); /* a client's own plans too */
    if (!auth_is_admin(rq->srv->auth, rq))
        return respond_error_msg(rq, -S3E_ACCESS_DENIED, "Admin endpoints need an admin key or the admin token");
    if (!strcmp(p, "/stats") && get)
        return admin_stats(rq, 0);
    if (!strcmp(p, "/metrics") && get)
        return admin_stats(rq, 1);
    if (!strncmp(p, "/cache/", 7) && !strcmp(rq->method, "DELETE"))
        return admin_invalidate(rq, p + 7);
    if (!strcmp(p, "/warm") || !strncmp(p, "/warm/", 6))
        return admin_warm(rq, p + 5);
    if (!strcmp(p, "/unpin") && !strcmp(rq->method, "POST"))
        return admin_unpin(rq);
    if (!strcmp(p, "/flush"))
        return admin_flush(rq);
    if (!strcmp(p, "/jobs") || !strncmp(p, "/jobs/", 6))
        return admin_jobs(rq, p + 5);
    if (!strcmp(p, "/policy"))
        return admin_policy(rq);
    if (!strcmp(p, "/notice") && !strcmp(rq->method, "POST"))
        return admin_peer_notice(rq);
    if (!strcmp(p, "/resync") && !strcmp(rq->method, "POST"))
        return admin_peer_resync(rq);
    return respond_error_msg(rq, -S3E_NOT_FOUND, "No such admin endpoint");
}

/* Whether @p (after "/_") with @method is an admin endpoint h_admin_end() serves. */
static int admin_known(const char *p, const char *method)
{
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    return ((!strcmp(p, "/stats") || !strcmp(p, "/metrics")) && get) ||
           (!strncmp(p, "/cache/", 7) && !strcmp(method, "DELETE")) || !strcmp(p, "/warm") ||
           !strncmp(p, "/warm/", 6) || (!strcmp(p, "/unpin") && !strcmp(method, "POST")) ||
           !strcmp(p, "/flush") || !strcmp(p, "/jobs") || !strncmp(p, "/jobs/", 6) ||
           !strcmp(p, "/policy") ||
           ((!strcmp(p, "/notice") || !strcmp(p, "/resync")) && !strcmp(method, "POST"));
}

/* Headers only: a request that is not an admin's, or names no admin endpoint, is refused
 * before a byte of its body is read (GET /_/health alone goes unauthenticated). */
static int h_admin_begin(struct req *rq)
{
    const char *p = rq->path + 2; /* after "/_" */
    if (!strcmp(p, "/health") && (!strcmp(rq->method, "GET") || !strcmp(rq->method, "HEAD")))
        return 0;
    int plan = admin_plan_path(p) && !rq->is_peer; /* a client key's own plans too */
    if (!plan && !auth_is_admin(rq->srv->auth, rq)) {
        snprintf(rq->err_msg, sizeof(rq->err_msg),
                 "Admin endpoints need an admin key or the admin token");
        return -S3E_ACCESS_DENIED;
    }
    if (!plan && !admin_known(p, rq->method)) {
        snprintf(rq->err_msg, sizeof(rq->err_msg), "No such admin endpoint");
        return -S3E_NOT_FOUND;
    }
    struct errmsg em = {{0}};
    int rc = auth_admin_body_signed(rq, &em);
    if (rc) { /* refused before a byte of the body is read */
        snprintf(rq->err_msg, sizeof(rq->err_msg), "%s", em.buf);
        return rc;
    }
    if (rq->is_peer && !strcmp(p, "/warm"))
        rq->body.max = 64u << 20; /* a cluster warm-up's share: up to a listing's keys */
    if (rq->is_peer && !strcmp(p, "/notice"))
        rq->body.max = ADMIN_NOTICE_BODY_MAX; /* every key of a DeleteObjects */
    if (plan && !strcmp(rq->method, "POST"))
        rq->body.max = ADMIN_PLAN_BODY_MAX;
    return 0;
}

/* Only the POST endpoints (warm, unpin, flush, jobs) and PUT /_/policy read a body; others
 * are not kept. */
static int h_admin_body(struct req *rq, const char *data, size_t len)
{
    if (strcmp(rq->method, "POST") && (strcmp(rq->method, "PUT") || strcmp(rq->path, "/_/policy")))
        return 0;
    int rc = buf_append(&rq->body, data, len);
    return rc == -EMSGSIZE ? -S3E_ENTITY_TOO_LARGE : rc;
}

const struct handler h_admin = {.begin = h_admin_begin, .body = h_admin_body,
                                .end = h_admin_end};

static int h_options_end(struct req *rq)
{
    if (!req_header(rq, "Origin"))
        return respond_error_msg(rq, -S3E_BAD_REQUEST,
                                 "Insufficient information. Origin request header needed.");
    return respond_error_msg(rq, -S3E_ACCESS_DENIED, "CORS is not enabled for this bucket.");
}

const struct handler h_options = {.end = h_options_end};
