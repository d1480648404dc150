/*
 * h_plan.c: /_/plan, the read plans of training jobs (docs/plans.md). Unlike the other /_/
 * endpoints a client key may use it, for its own plans only: a plan prefetches what that key
 * could GET anyway, and it sees, replaces and cancels the plans it posted (an admin sees and
 * cancels all). Also the plans' part of /_/stats and /_/metrics.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "admin_priv.h"
#include "cache/cache.h"
#include "cache/plan.h"
#include "http/auth.h"
#include "http/respond.h"
#include "http/server.h"
#include "lib/s3err.h"
#include "objects/plan.h"

int admin_plan_path(const char *p)
{
    return !strcmp(p, "/plan") || !strncmp(p, "/plan/", 6);
}

/* Whose plans @rq acts on: its access key ("anonymous" without one); NULL for an admin's GET
 * or DELETE, which see every plan. */
static const char *plan_owner(struct req *rq, int all)
{
    if (all && auth_is_admin(rq->srv->auth, rq))
        return NULL;
    return rq->access_key[0] ? rq->access_key : "anonymous";
}

int admin_plan(struct req *rq, const char *rest)
{
    struct server *srv = rq->srv;
    struct plans *plans = cache_plans(srv->cache);
    if (!srv->planner || !plans)
        return respond_error_msg(rq, -S3E_NOT_IMPLEMENTED,
                                 "Read plans are off (--plan-requests 0)");
    if (srv->peer)
        return respond_error_msg(rq, -S3E_NOT_IMPLEMENTED,
                                 "Read plans are not available in cluster mode yet");
    const char *id = rest[0] == '/' && rest[1] ? rest + 1 : NULL;
    struct errmsg em = {{0}};
    struct buf b;
    buf_init(&b, 64u << 20);
    int rc;
    if (!strcmp(rq->method, "POST") && !id) {
        rc = planner_post(srv->planner, plan_owner(rq, 0), rq->body.p, rq->body.len, &b, &em);
        if (!rc) {
            int r = respond_text(rq, 201, "application/json", b.p, b.len);
            buf_free(&b);
            return r;
        }
    } else if (!strcmp(rq->method, "GET") || !strcmp(rq->method, "HEAD")) {
        rc = plans_json(plans, plan_owner(rq, 1), id, &b);
        rc = rc ? rc : buf_puts(&b, "\n") ? -ENOMEM : 0;
    } else if (!strcmp(rq->method, "DELETE") && id) {
        rc = plans_cancel(plans, plan_owner(rq, 1), id);
        rc = rc ? rc : buf_printf(&b, "{\"plan\":\"%s\",\"cancelled\":true}\n", id) ? -ENOMEM : 0;
    } else {
        rc = -S3E_METHOD_NOT_ALLOWED;
    }
    if (rc == -S3E_NOT_FOUND && !em.buf[0])
        errmsg_set(&em, "No such plan (of this access key)");
    int r = rc ? respond_error_msg(rq, rc, em.buf[0] ? em.buf : NULL)
               : respond_text(rq, 200, "application/json", b.p, b.len);
    buf_free(&b);
    return r;
}

int admin_plan_figures(struct server *srv, int prometheus, struct buf *b)
{
    struct plans *plans = cache_plans(srv->cache);
    if (!plans)
        return 0;
    struct plans_totals t;
    plans_totals(plans, &t);
    if (prometheus) {
        static const struct {
            const char *name, *type, *help;
            size_t off;
        } rows[] = {
#define ROW(n, ty, h, f) {n, ty, h, offsetof(struct plans_totals, f)}
            ROW("plans", "gauge", "Read plans held.", plans),
            ROW("plan_entries", "gauge", "Entries of the read plans held.", entries),
            ROW("plan_ahead_bytes", "gauge",
                "Bytes prefetched or being prefetched ahead of the plans' readers.", ahead_bytes),
            ROW("plan_prefetches_in_flight", "gauge", "Plan prefetches in flight.", inflight),
            ROW("plan_reads_total", "counter",
                "GETs of planned keys at or after their "
                "plan's position.",
                reads),
            ROW("plan_hits_total", "counter", "Planned GETs answered from the cache.", hits),
            ROW("plan_misses_total", "counter",
                "Planned GETs that fetched from the backend "
                "themselves.",
                misses),
            ROW("plan_stalls_total", "counter",
                "Planned GETs that waited for a fetch in "
                "flight (a prefetch behind its reader).",
                stalls),
            ROW("plan_prefetched_total", "counter", "Objects the plans prefetched.", prefetched),
            ROW("plan_prefetched_bytes_total", "counter", "Bytes the plans prefetched.",
                prefetched_bytes),
            ROW("plan_prefetch_errors_total", "counter", "Plan prefetches that failed.",
                prefetch_errors),
#undef ROW
        };
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
            if (buf_printf(b, "# HELP s3cached_%s %s\n# TYPE s3cached_%s %s\ns3cached_%s %llu\n",
                           rows[i].name, rows[i].help, rows[i].name, rows[i].type, rows[i].name,
                           (unsigned long long)*(const uint64_t *)((const char *)&t + rows[i].off)))
                return -ENOMEM;
        return 0;
    }
    /* the JSON document ends "}\n": the member goes before that brace */
    while (b->len && (b->p[b->len - 1] == '\n' || b->p[b->len - 1] == '}'))
        if (b->p[--b->len] == '}')
            break;
    int rc = buf_printf(b,
                        ",\n \"plans\": {\"held\": %llu, \"entries\": %llu, "
                        "\"ahead_bytes\": %llu, \"in_flight\": %llu, \"reads\": %llu, "
                        "\"hits\": %llu, \"misses\": %llu, \"stalls\": %llu, "
                        "\"prefetched\": %llu, \"prefetched_bytes\": %llu, "
                        "\"prefetch_errors\": %llu, \"list\": ",
                        (unsigned long long)t.plans, (unsigned long long)t.entries,
                        (unsigned long long)t.ahead_bytes, (unsigned long long)t.inflight,
                        (unsigned long long)t.reads, (unsigned long long)t.hits,
                        (unsigned long long)t.misses, (unsigned long long)t.stalls,
                        (unsigned long long)t.prefetched, (unsigned long long)t.prefetched_bytes,
                        (unsigned long long)t.prefetch_errors);
    struct buf list;
    buf_init(&list, 32u << 20);
    if (!rc)
        rc = plans_json(plans, NULL, NULL, &list);
    if (!rc) { /* {"plans":[...]}: the array */
        const char *a = strchr(list.p, '[');
        rc = buf_append(b, a, list.len - (size_t)(a - list.p) - 1);
    }
    buf_free(&list);
    return rc ? rc : buf_puts(b, "}\n}\n");
}
