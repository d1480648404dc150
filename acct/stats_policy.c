/*
 * stats_policy.c: the eviction policies in /_/stats ("policy": every prefix followed, the
 * policy it runs under, its last and current epoch-like pass, the ideal hit ratio) and in
 * /_/metrics (s3cached_prefix_* families), from a cache_policy_report. Writes only.
 */
#include <inttypes.h>
#include <stdio.h>

#include "stats_priv.h"

static double ratio(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : 0.0;
}

static int json_pass(struct buf *out, const char *name, const struct cache_pass *p)
{
    return buf_printf(out,
                      "\"%s\": {\"reads\": %" PRIu64 ", \"hits\": %" PRIu64
                      ", \"bytes\": %" PRIu64 ", \"hit_bytes\": %" PRIu64
                      ", \"hit_ratio\": %.4f, \"objects\": %" PRIu64
                      ", \"working_set_bytes\": %" PRIu64 "}",
                      name, p->reads, p->hits, p->bytes, p->hit_bytes,
                      ratio(p->hit_bytes, p->bytes), p->objects, p->working_set_bytes);
}

int stats_policy_json(struct buf *out, const struct cache_policy_report *pr)
{
    static const struct cache_policy_report none;
    if (!pr)
        pr = &none;
    int rc = buf_printf(out,
                        "{\"auto\": %s, \"keep_idle_s\": %.3f"
                        ", \"available_bytes\": %" PRIu64 ", \"prefixes\": [",
                        pr->auto_on ? "true" : "false", (double)pr->idle_ms / 1000.0,
                        pr->available_bytes);
    for (size_t i = 0; i < pr->n && !rc; i++) {
        const struct cache_prefix_row *r = &pr->rows[i];
        rc = buf_puts(out, i ? ",\n  {\"bucket\": " : "\n  {\"bucket\": ");
        if (!rc)
            rc = buf_json_str(out, r->bucket);
        if (!rc)
            rc = buf_puts(out, ", \"prefix\": ");
        if (!rc)
            rc = buf_json_str(out, r->prefix);
        if (!rc)
            rc = buf_printf(out,
                            ", \"policy\": \"%s\", \"source\": \"%s\", \"keep_active\": %s"
                            ", \"idle_s\": %.3f, \"passes\": %" PRIu64
                            ", \"ideal_hit_ratio\": %.4f, \"last_pass_cut\": %s"
                            ", \"misses\": %" PRIu64 ", \"thrash\": %" PRIu64
                            ", \"read_bytes\": %" PRIu64 ", \"hit_bytes\": %" PRIu64 ",\n   ",
                            r->policy, r->source, r->keep_active ? "true" : "false", r->idle_s,
                            r->passes, r->ideal, r->last_cut ? "true" : "false", r->misses,
                            r->thrash, r->read_bytes, r->hit_bytes);
        if (!rc)
            rc = json_pass(out, "last_pass", &r->last);
        if (!rc)
            rc = buf_puts(out, ", ");
        if (!rc)
            rc = json_pass(out, "current_pass", &r->cur);
        if (!rc)
            rc = buf_puts(out, "}");
    }
    if (!rc)
        rc = buf_puts(out, pr->n ? "\n ]}" : "]}");
    return rc;
}

/* Prometheus label value (backslash, quote and line feed escaped). */
static int prom_value(struct buf *out, const char *v)
{
    int rc = 0;
    for (; *v && !rc; v++) {
        if (*v == '\\' || *v == '"')
            rc = buf_printf(out, "\\%c", *v);
        else if (*v == '\n')
            rc = buf_puts(out, "\\n");
        else
            rc = buf_append(out, v, 1);
    }
    return rc;
}

static int prom_prefix(struct buf *out, const char *name, const struct cache_prefix_row *r)
{
    int rc = buf_printf(out, "%s{bucket=\"", name);
    if (!rc)
        rc = prom_value(out, r->bucket);
    if (!rc)
        rc = buf_puts(out, "\",prefix=\"");
    if (!rc)
        rc = prom_value(out, r->prefix);
    return rc ? rc : buf_puts(out, "\"");
}

enum { PF_POLICY, PF_KEEP, PF_RATIO, PF_IDEAL, PF_WS, PF_PASSES, PF_READ, PF_HIT, PF__N };

int stats_policy_prom(struct buf *out, const struct cache_policy_report *pr)
{
    static const struct {
        const char *name, *type, *help;
    } fam[PF__N] = {
        { "s3cached_prefix_policy_info", "gauge",
          "The eviction policy a prefix runs under (1), and what chose it." },
        { "s3cached_prefix_keep_active", "gauge",
          "1 while a keep prefix is read within --keep-idle and its objects are protected." },
        { "s3cached_prefix_last_pass_hit_ratio", "gauge",
          "Bytes served from the cache / bytes read, in the prefix's last epoch-like pass." },
        { "s3cached_prefix_ideal_hit_ratio", "gauge",
          "min(1, available capacity / working set of the last pass): the best a cache can do." },
        { "s3cached_prefix_working_set_bytes", "gauge",
          "Distinct bytes the prefix's last pass read." },
        { "s3cached_prefix_passes_total", "counter", "Epoch-like passes the prefix completed." },
        { "s3cached_prefix_read_bytes_total", "counter", "Bytes GETs of the prefix asked for." },
        { "s3cached_prefix_hit_bytes_total", "counter",
          "Bytes of the prefix's GETs that were on the SSD." },
    };
    static const struct cache_policy_report none;
    if (!pr)
        pr = &none;
    int rc = 0;
    for (int f = 0; f < PF__N && !rc; f++) {
        rc = buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help,
                        fam[f].name, fam[f].type);
        for (size_t i = 0; i < pr->n && !rc; i++) {
            const struct cache_prefix_row *r = &pr->rows[i];
            rc = prom_prefix(out, fam[f].name, r);
            if (rc)
                break;
            switch (f) {
            case PF_POLICY:
                rc = buf_printf(out, ",policy=\"%s\",source=\"%s\"} 1\n", r->policy, r->source);
                break;
            case PF_KEEP: rc = buf_printf(out, "} %d\n", r->keep_active); break;
            case PF_RATIO:
                rc = buf_printf(out, "} %.4f\n", ratio(r->last.hit_bytes, r->last.bytes));
                break;
            case PF_IDEAL: rc = buf_printf(out, "} %.4f\n", r->ideal); break;
            case PF_WS: rc = buf_printf(out, "} %" PRIu64 "\n", r->last.working_set_bytes); break;
            case PF_PASSES: rc = buf_printf(out, "} %" PRIu64 "\n", r->passes); break;
            case PF_READ: rc = buf_printf(out, "} %" PRIu64 "\n", r->read_bytes); break;
            case PF_HIT: rc = buf_printf(out, "} %" PRIu64 "\n", r->hit_bytes); break;
            }
        }
    }
    return rc;
}
