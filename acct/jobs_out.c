/*
 * jobs_out.c: the jobs as JSON (the "jobs" array of /_/stats, GET /_/jobs) and as Prometheus
 * text (the s3cached_job_* families of /_/metrics), from jobs_snapshot().
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "jobs.h"
#include "lib/s3c.h"
#include "stats_priv.h" /* stats_prom_label() */

int jobs_json_view(const struct jobs_view *jv, struct buf *out)
{
    int rc = buf_puts(out, "{\"job\": ");
    if (!rc)
        rc = buf_json_str(out, jv->name);
    if (!rc)
        rc = buf_printf(out,
                        ", \"need_bps\": %" PRIu64 ", \"need_source\": \"%s\", \"declared\": %s, "
                        "\"state\": \"%s\", \"cause\": ",
                        jv->need_bps, jv->need_source, jv->declared ? "true" : "false",
                        stall_state_name(jv->state));
    if (!rc)
        rc = jv->cause >= 0 ? buf_printf(out, "\"%s\", ", stall_cause_name(jv->cause))
                            : buf_puts(out, "null, ");
    if (!rc)
        rc = stall_json(out, &jv->v);
    if (!rc)
        rc = buf_puts(out, "}");
    return rc;
}

int jobs_json(struct jobs *j, const char *only, struct buf *out)
{
    struct jobs_view *v = NULL;
    size_t n = 0;
    int rc = jobs_snapshot(j, only, &v, &n);
    if (!rc)
        rc = buf_puts(out, "[");
    for (size_t i = 0; i < n && !rc; i++) {
        rc = buf_puts(out, i ? ",\n  " : "\n  ");
        if (!rc)
            rc = jobs_json_view(&v[i], out);
    }
    if (!rc)
        rc = buf_puts(out, n ? "\n ]" : "]");
    free(v);
    return rc;
}

/* --- Prometheus ------------------------------------------------------------------------ */

static int family(struct buf *out, const char *name, const char *type, const char *help)
{
    return buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* NAME{job="..."[,extra]} */
static int series(struct buf *out, const char *name, const struct jobs_view *jv,
                  const char *extra)
{
    int rc = buf_printf(out, "%s{job=\"", name);
    if (!rc)
        rc = stats_prom_label(out, jv->name);
    if (!rc)
        rc = buf_printf(out, "\"%s%s} ", extra ? "," : "", extra ? extra : "");
    return rc;
}

static double win_rate(const struct stall_window *w)
{
    return w->bytes / (w->secs < 1.0 ? 1.0 : w->secs);
}

int jobs_prometheus(struct jobs *j, struct buf *out)
{
    struct jobs_view *v = NULL;
    size_t n = 0;
    int rc = jobs_snapshot(j, NULL, &v, &n);
    if (rc)
        return rc;
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"s3cached_job_need_bytes_per_second", "gauge",
         "What the job declared it needs (0: none declared)."},
        {"s3cached_job_delivered_bytes_per_second", "gauge",
         "GET body bytes delivered to the job per second, over a window (10s, 60s)."},
        {"s3cached_job_state", "gauge",
         "The job's verdict over the last 10 s: 1 for its state (ok, starved, idle)."},
        {"s3cached_job_stall_ratio", "gauge",
         "Share of the job's GET time spent waiting on the gateway, last 10 s."},
        {"s3cached_job_stall_seconds_total", "counter",
         "GET time spent waiting on the gateway, by cause (backend, fill, rate_limit, queue)."},
        {"s3cached_job_transfer_seconds_total", "counter",
         "GET time, from request to completion, summed over the job's GETs."},
        {"s3cached_job_first_byte_seconds_total", "counter",
         "Time to the first body byte, summed over the job's GETs."},
        {"s3cached_job_gets_total", "counter", "GETs completed by the job."},
        {"s3cached_job_sent_bytes_total", "counter", "GET body bytes sent to the job."},
        {"s3cached_job_hit_bytes_total", "counter",
         "GET body bytes sent to the job from the cache (hits)."},
        {"s3cached_job_in_flight_gets", "gauge", "GETs of the job in flight."},
    };
    for (size_t f = 0; f < ARRAY_SIZE(fam) && !rc; f++) {
        rc = family(out, fam[f].name, fam[f].type, fam[f].help);
        for (size_t i = 0; i < n && !rc; i++) {
            const struct jobs_view *jv = &v[i];
            const struct stall_view *sv = &jv->v;
            char extra[64];
            switch (f) {
            case 0:
                rc = series(out, fam[f].name, jv, NULL);
                rc = rc ? rc : buf_printf(out, "%" PRIu64 "\n", jv->need_bps);
                break;
            case 1:
                rc = series(out, fam[f].name, jv, "window=\"10s\"");
                rc = rc ? rc : buf_printf(out, "%.0f\n", win_rate(&sv->w_short));
                rc = rc ? rc : series(out, fam[f].name, jv, "window=\"60s\"");
                rc = rc ? rc : buf_printf(out, "%.0f\n", win_rate(&sv->w_long));
                break;
            case 2:
                for (int s = STALL_IDLE; s <= STALL_STARVED && !rc; s++) {
                    snprintf(extra, sizeof(extra), "state=\"%s\"", stall_state_name(s));
                    rc = series(out, fam[f].name, jv, extra);
                    rc = rc ? rc : buf_printf(out, "%d\n", (int)jv->state == s);
                }
                break;
            case 3:
                rc = series(out, fam[f].name, jv, NULL);
                rc = rc ? rc : buf_printf(out, "%.4f\n", stall_share(&sv->w_short));
                break;
            case 4:
                for (int c = 0; c < STALL__N && !rc; c++) {
                    snprintf(extra, sizeof(extra), "cause=\"%s\"", stall_cause_name(c));
                    rc = series(out, fam[f].name, jv, extra);
                    rc = rc ? rc : buf_printf(out, "%.6f\n", sv->stall_s[c]);
                }
                break;
            case 5:
                rc = series(out, fam[f].name, jv, NULL);
                rc = rc ? rc : buf_printf(out, "%.6f\n", sv->xfer_s);
                break;
            case 6:
                rc = series(out, fam[f].name, jv, NULL);
                rc = rc ? rc : buf_printf(out, "%.6f\n", sv->ttfb_s);
                break;
            case 7:
                rc = series(out, fam[f].name, jv, NULL);
                rc = rc ? rc : buf_printf(out, "%" PRIu64 "\n", sv->gets);
                break;
            case 8:
                rc = series(out, fam[f].name, jv, NULL);
                rc = rc ? rc : buf_printf(out, "%" PRIu64 "\n", sv->bytes);
                break;
            case 9:
                rc = series(out, fam[f].name, jv, NULL);
                rc = rc ? rc : buf_printf(out, "%" PRIu64 "\n", sv->hit_bytes);
                break;
            default:
                rc = series(out, fam[f].name, jv, NULL);
                rc = rc ? rc : buf_printf(out, "%" PRIu64 "\n", sv->active);
                break;
            }
        }
    }
    free(v);
    return rc;
}
