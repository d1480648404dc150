/*
 * h_admin.c: the reserved /_/ endpoints: health (no auth), stats (JSON),
 * metrics (Prometheus), cache invalidation, eviction policies; and OPTIONS,
 * which S3 answers 400 without a CORS Origin.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acct/fair.h"
#include "acct/stats.h"
#include "admin.h"
#include "backends/backend.h"
#include "cache/cache.h"
#include "http/auth.h"
#include "http/respond.h"
#include "http/server.h"
#include "lib/json.h"
#include "lib/s3err.h"
#include "objects/warm.h"

enum { PH_START = 0, PH_JOB_DONE };

static int admin_stats(struct req *rq, int prometheus)
{
    struct server *srv = rq->srv;
    struct cache_stats cs;
    struct backend_counters bc;
    struct fair_stats fs;
    struct cache_policy_report pr;
    struct buf b;
    cache_get_stats(srv->cache, &cs);
    fair_get_stats(srv->fair, &fs);
    backend_counters_get(srv->be, &bc);
    int prc = cache_policy_report(srv->cache, &pr);
    buf_init(&b, 64u << 20);
    int rc = prc ? prc
                 : prometheus ? stats_prometheus(srv->stats, &cs, &bc, &fs, &pr, &b)
                              : stats_json(srv->stats, &cs, &bc, &fs, &pr, &b);
    cache_policy_report_free(&pr);
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
    } else {
        rq->rc = cache_invalidate_prefix(rq->srv->cache, s->bucket, s->prefix ? s->prefix : "",
                                         &s->n);
    }
}

/* DELETE /_/cache/BUCKET/KEY or /_/cache/BUCKET?prefix=P */
static int admin_invalidate(struct req *rq, const char *rest)
{
    if (rq->phase == PH_JOB_DONE) {
        struct inval_state *s = rq->job_state;
        struct buf b;
        buf_init(&b, 256);
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
    rq->phase = PH_JOB_DONE;
    int rc = req_run_job(rq, inval_job);
    return rc ? respond_error(rq, rc) : REQ_OK;
}

/* /_/warm[/ID]: POST starts a job, GET reports one or all, DELETE cancels one. */
static int admin_warm(struct req *rq, const char *rest)
{
    struct warm *w = rq->srv->warm;
    struct errmsg em = {{0}};
    struct buf b;
    int rc;
    const char *id = rest[0] == '/' && rest[1] ? rest + 1 : NULL;
    buf_init(&b, 64u << 20);
    if (!strcmp(rq->method, "POST") && !id) {
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
    struct cache_flush_result res;
};

static void flush_state_free(void *p)
{
    struct flush_state *s = p;
    if (!s)
        return;
    free(s->bucket);
    free(s->prefix);
    free(s);
}

/* The flush's answer (cache_flush_cb, from the drain's flush thread). */
static void flush_done(void *arg, int rc, const struct cache_flush_result *res)
{
    struct req *rq = arg;
    struct flush_state *s = rq->job_state;
    s->rc = rc;
    s->res = *res;
    req_resume(rq);
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
    req_suspend(rq);
    int rc = cache_flush_start(rq->srv->cache, s->bucket, s->prefix, s->timeout_ms, flush_done,
                               rq);
    if (rc) {
        req_resume(rq);
        return respond_error(rq, rc);
    }
    return REQ_OK;
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
    if (!strcmp(p, "/policy"))
        return admin_policy(rq);
    return respond_error_msg(rq, -S3E_NOT_FOUND, "No such admin endpoint");
}

/* Whether @p (after "/_") with @method is an admin endpoint h_admin_end() serves. */
static int admin_known(const char *p, const char *method)
{
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    return ((!strcmp(p, "/stats") || !strcmp(p, "/metrics")) && get) ||
           (!strncmp(p, "/cache/", 7) && !strcmp(method, "DELETE")) || !strcmp(p, "/warm") ||
           !strncmp(p, "/warm/", 6) || (!strcmp(p, "/unpin") && !strcmp(method, "POST")) ||
           !strcmp(p, "/flush") || !strcmp(p, "/policy");
}

/* Headers only: a request that is not an admin's, or names no admin endpoint, is refused
 * before a byte of its body is read (GET /_/health alone goes unauthenticated). */
static int h_admin_begin(struct req *rq)
{
    const char *p = rq->path + 2; /* after "/_" */
    if (!strcmp(p, "/health") && (!strcmp(rq->method, "GET") || !strcmp(rq->method, "HEAD")))
        return 0;
    if (!auth_is_admin(rq->srv->auth, rq)) {
        snprintf(rq->err_msg, sizeof(rq->err_msg),
                 "Admin endpoints need an admin key or the admin token");
        return -S3E_ACCESS_DENIED;
    }
    if (!admin_known(p, rq->method)) {
        snprintf(rq->err_msg, sizeof(rq->err_msg), "No such admin endpoint");
        return -S3E_NOT_FOUND;
    }
    return 0;
}

/* Only the POST endpoints (warm, unpin, flush) and PUT /_/policy read a body; others are not
 * kept. */
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
