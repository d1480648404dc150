/*
 * cstats.c: merges the gateways' /_/stats documents into the cluster's (cstats.h). Pure: the
 * documents in, one document out. Every gateway runs the same version, so the first document
 * that has a member gives its shape; numbers are summed over the documents that have it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cstats.h"
#include "lib/json.h"

/* Members whose merge is the largest value, not the sum. */
static int cstats_is_max(const char *key)
{
    size_t n = strlen(key);
    return !strcmp(key, "uptime_s") || (n > 6 && !strcmp(key + n - 6, "_age_s"));
}

static int cstats_num(struct buf *b, double v)
{
    if (v > -9e15 && v < 9e15 && (double)(long long)v == v)
        return buf_printf(b, "%lld", (long long)v);
    return buf_printf(b, "%.3f", v);
}

/* Writes the members of @objs[0] (an object) with numbers merged over @objs[0..@n) (summed, or
 * the largest for ages), booleans OR'ed, objects merged the same way, strings as in @objs[0];
 * arrays and @skip (NULL-terminated names) left out. No braces: the caller writes them.
 * Returns 0 or -ENOMEM; *@first tracks the separator. */
static int cstats_members(struct buf *b, const struct json *const *objs, size_t n,
                          const char *const *skip, int *first)
{
    const struct json *o = objs[0];
    int rc = 0;
    for (size_t i = 0; !rc && o && o->type == JSON_OBJ && i < o->n; i++) {
        const char *k = o->keys[i];
        const struct json *v = &o->items[i];
        int skipped = v->type == JSON_ARR;
        for (size_t s = 0; skip && skip[s] && !skipped; s++)
            skipped = !strcmp(skip[s], k);
        if (skipped)
            continue;
        rc = buf_puts(b, *first ? "" : ", ") || buf_json_str(b, k) || buf_puts(b, ": ");
        *first = 0;
        if (rc)
            break;
        if (v->type == JSON_NUM) {
            double acc = 0;
            for (size_t d = 0; d < n; d++) {
                const struct json *x = json_get(objs[d], k);
                double xv = x && x->type == JSON_NUM ? x->num : 0;
                acc = cstats_is_max(k) ? (d == 0 || xv > acc ? xv : acc) : acc + xv;
            }
            rc = cstats_num(b, acc);
        } else if (v->type == JSON_BOOL) {
            int any = 0;
            for (size_t d = 0; d < n; d++) {
                const struct json *x = json_get(objs[d], k);
                any |= x && x->type == JSON_BOOL && x->b;
            }
            rc = buf_puts(b, any ? "true" : "false");
        } else if (v->type == JSON_STR) {
            rc = buf_json_str(b, v->str);
        } else if (v->type == JSON_OBJ) {
            const struct json **sub = calloc(n, sizeof(*sub));
            size_t m = 0;
            if (!sub)
                return -ENOMEM;
            for (size_t d = 0; d < n; d++) {
                const struct json *x = json_get(objs[d], k);
                if (x && x->type == JSON_OBJ)
                    sub[m++] = x;
            }
            int f2 = 1;
            rc = buf_puts(b, "{") || cstats_members(b, sub, m, NULL, &f2) || buf_puts(b, "}");
            free(sub);
        } else {
            rc = buf_puts(b, "null");
        }
    }
    return rc ? -ENOMEM : 0;
}

struct cstats_row {
    const char *k1, *k2;       /* client + addr, or the bucket/peer name */
    const struct json **objs;  /* one per gateway that has the row */
    const char **node;         /* their gateways */
    size_t n;
};

/* Merges the rows of the array @name of the @nd documents by @key1 (+ @key2) and writes
 * them, with a per-gateway list when @per_node. */
static int cstats_rows(struct buf *b, const char *name, const struct json *const *docs,
                       const char *const *nodes, size_t nd, const char *key1, const char *key2,
                       int per_node)
{
    struct cstats_row *rows = NULL;
    size_t nr = 0, cap = 0;
    int rc = 0;
    for (size_t d = 0; !rc && d < nd; d++) {
        const struct json *arr = json_get(docs[d], name);
        for (size_t i = 0; !rc && arr && arr->type == JSON_ARR && i < arr->n; i++) {
            const struct json *r = &arr->items[i];
            const char *k1 = json_get_str(r, key1), *k2 = key2 ? json_get_str(r, key2) : "";
            if (!k1 || !k2)
                continue;
            size_t j = 0;
            while (j < nr && (strcmp(rows[j].k1, k1) || strcmp(rows[j].k2, k2)))
                j++;
            if (j == nr) {
                if (nr == cap) {
                    size_t nc = cap ? 2 * cap : 64;
                    struct cstats_row *x = realloc(rows, nc * sizeof(*x));
                    if (!x) {
                        rc = -ENOMEM;
                        break;
                    }
                    rows = x;
                    cap = nc;
                }
                rows[nr] = (struct cstats_row){k1, k2, calloc(nd, sizeof(void *)),
                                               calloc(nd, sizeof(char *)), 0};
                if (!rows[nr].objs || !rows[nr].node) {
                    free(rows[nr].objs);
                    free(rows[nr].node);
                    rc = -ENOMEM;
                    break;
                }
                nr++;
            }
            rows[j].objs[rows[j].n] = r;
            rows[j].node[rows[j].n++] = nodes[d];
        }
    }
    if (!rc)
        rc = buf_puts(b, ",\n \"") || buf_puts(b, name) || buf_puts(b, "\": [") ? -ENOMEM : 0;
    for (size_t j = 0; !rc && j < nr; j++) {
        int first = 1;
        rc = buf_puts(b, j ? ",\n  {" : "\n  {") ? -ENOMEM : 0;
        if (!rc)
            rc = cstats_members(b, rows[j].objs, rows[j].n, NULL, &first);
        if (!rc && per_node) {
            rc = buf_puts(b, ", \"nodes\": [") ? -ENOMEM : 0;
            for (size_t i = 0; !rc && i < rows[j].n; i++) {
                const struct json *o = rows[j].objs[i];
                rc = buf_puts(b, i ? ", {\"node\": " : "{\"node\": ") ||
                             buf_json_str(b, rows[j].node[i]) ||
                             buf_printf(b, ", \"requests\": %.0f, \"bytes_out\": %.0f, "
                                           "\"bytes_in\": %.0f, \"hits\": %.0f, \"misses\": %.0f}",
                                        json_get_num(o, "requests", 0),
                                        json_get_num(o, "bytes_out", 0),
                                        json_get_num(o, "bytes_in", 0), json_get_num(o, "hits", 0),
                                        json_get_num(o, "misses", 0))
                         ? -ENOMEM
                         : 0;
            }
            if (!rc)
                rc = buf_puts(b, "]") ? -ENOMEM : 0;
        }
        if (!rc)
            rc = buf_puts(b, "}") ? -ENOMEM : 0;
    }
    if (!rc)
        rc = buf_puts(b, nr ? "\n ]" : "]") ? -ENOMEM : 0;
    for (size_t j = 0; j < nr; j++) {
        free(rows[j].objs);
        free(rows[j].node);
    }
    free(rows);
    return rc;
}

int cstats_merge(const struct cstats_node *nodes, size_t n, struct buf *out)
{
    static const char *const skip_top[] = {"cluster", NULL};
    struct json **parsed = calloc(n ? n : 1, sizeof(*parsed));
    const struct json **up = calloc(n ? n : 1, sizeof(*up));
    const char **upn = calloc(n ? n : 1, sizeof(*upn));
    size_t nup = 0;
    int rc = parsed && up && upn ? 0 : -ENOMEM;
    for (size_t i = 0; !rc && i < n; i++) {
        struct errmsg em;
        if (nodes[i].doc && !json_parse(nodes[i].doc, nodes[i].len, &parsed[i], &em) &&
            parsed[i]->type == JSON_OBJ && json_get(parsed[i], "cache")) {
            up[nup] = parsed[i];
            upn[nup++] = nodes[i].node;
        }
    }
    int first = 0;
    if (!rc)
        rc = buf_printf(out, "{\"scope\": \"cluster\", \"nodes_total\": %zu, \"nodes_up\": %zu", n,
                        nup)
                 ? -ENOMEM
                 : 0;
    if (!rc && nup)
        rc = cstats_members(out, up, nup, skip_top, &first);
    if (!rc)
        rc = cstats_rows(out, "clients", up, upn, nup, "client", "addr", 1);
    if (!rc)
        rc = cstats_rows(out, "buckets", up, upn, nup, "bucket", NULL, 0);
    if (!rc)
        rc = cstats_rows(out, "peers", up, upn, nup, "peer", NULL, 0);
    if (!rc)
        rc = buf_puts(out, ",\n \"nodes\": [") ? -ENOMEM : 0;
    for (size_t i = 0; !rc && i < n; i++) {
        int isup = 0;
        for (size_t u = 0; u < nup; u++)
            isup |= up[u] == parsed[i] && parsed[i];
        rc = buf_puts(out, i ? ",\n  {\"node\": " : "\n  {\"node\": ") ||
                     buf_json_str(out, nodes[i].node) ||
                     buf_printf(out, ", \"self\": %s, \"up\": %s", nodes[i].self ? "true" : "false",
                                isup ? "true" : "false")
                 ? -ENOMEM
                 : 0;
        if (!rc && isup) {
            int f = 0;
            const struct json *one[1] = {parsed[i]};
            rc = cstats_members(out, one, 1, NULL, &f);
        } else if (!rc) {
            rc = buf_puts(out, ", \"error\": ") ||
                         buf_json_str(out, nodes[i].error ? nodes[i].error
                                                          : "not a /_/stats document")
                     ? -ENOMEM
                     : 0;
        }
        if (!rc)
            rc = buf_puts(out, "}") ? -ENOMEM : 0;
    }
    if (!rc)
        rc = buf_puts(out, n ? "\n ]}\n" : "]}\n") ? -ENOMEM : 0;
    for (size_t i = 0; parsed && i < n; i++)
        json_free(parsed[i]);
    free(parsed);
    free(up);
    free(upn);
    return rc;
}
