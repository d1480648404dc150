/*
 * cli.c: the client subcommands that talk to a running gateway's admin
 * endpoints over libcurl: `stats` (a table, optionally refreshed in place),
 * `warm` (start a job, show progress, exit status says whether all was warmed),
 * `plan` (post, list or cancel read plans) and `flush` (wait until written data is on the
 * backend).
 * Admin auth: --admin-token (or S3CACHED_ADMIN_TOKEN), else SigV4 with
 * --access-key/--secret-key (or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY).
 */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/buf.h"
#include "cli.h"
#include "lib/conf.h"
#include "lib/json.h"
#include "sig/sigv4.h"

struct cli_opts {
    const char *endpoint;
    const char *token;
    const char *access_key, *secret_key, *region;
    int watch;
    double interval_s;
    const char *keys_file;
    const char *manifest;
    const char *target; /* s3://BUCKET/PREFIX */
    int pin;
    int fit;
    int cluster;         /* stats: the cluster's figures (?scope=cluster) */
    const char *timeout; /* flush: a duration (conf syntax), NULL = wait as long as it takes */
    const char *name;    /* plan: the plan's name (a job and rank) */
    const char *cancel;  /* plan: the plan to cancel */
};

static size_t cli_write(char *p, size_t sz, size_t n, void *cls)
{
    return buf_append(cls, p, sz * n) ? 0 : sz * n;
}

/* One admin request. Returns the HTTP status (or -1 with a message on stderr); body in @out. */
static long cli_request(const struct cli_opts *o, const char *method, const char *path,
                        const char *body, struct buf *out)
{
    char url[4096], auth[1200], sigv4[128], userpwd[600], sha[65], sha_hdr[96];
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    long status = -1;
    if (!c)
        return -1;
    snprintf(url, sizeof(url), "%s%s", o->endpoint, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, cli_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        h = curl_slist_append(h, "Content-Type: application/json");
    }
    if (o->token) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", o->token);
        h = curl_slist_append(h, auth);
    } else if (o->access_key && o->secret_key) {
        snprintf(sigv4, sizeof(sigv4), "aws:amz:%s:s3", o->region ? o->region : "us-east-1");
        snprintf(userpwd, sizeof(userpwd), "%s:%s", o->access_key, o->secret_key);
        curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4);
        curl_easy_setopt(c, CURLOPT_USERPWD, userpwd);
        /* The body is signed (its SHA-256), so a captured request cannot be replayed with
         * another one: the gateway refuses UNSIGNED-PAYLOAD on admin bodies. */
        if (sigv4_sha256_hex(body ? body : "", body ? strlen(body) : 0, sha)) {
            fprintf(stderr, "s3cached: %s %s: cannot hash the body\n", method, url);
            curl_slist_free_all(h);
            curl_easy_cleanup(c);
            return -1;
        }
        snprintf(sha_hdr, sizeof(sha_hdr), "x-amz-content-sha256: %s", sha);
        h = curl_slist_append(h, sha_hdr);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    CURLcode cc = curl_easy_perform(c);
    if (cc != CURLE_OK)
        fprintf(stderr, "s3cached: %s %s: %s\n", method, url, curl_easy_strerror(cc));
    else
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return status;
}

/* Appends @s to the string in @dst (@cap bytes in all), truncating. */
static void append_str(char *dst, size_t cap, const char *s)
{
    size_t n = strlen(dst);
    if (n < cap)
        snprintf(dst + n, cap - n, "%s", s);
}

static void human_bytes(double v, char *out, size_t cap)
{
    static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int i = 0;
    while (v >= 1024 && i < 5) {
        v /= 1024;
        i++;
    }
    snprintf(out, cap, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

/* Prints @msg of a failed admin call: the S3 <Message>, or the body. */
static void cli_fail(const char *what, long status, const struct buf *b)
{
    const char *m = b->p ? strstr(b->p, "<Message>") : NULL;
    if (m) {
        const char *e = strstr(m, "</Message>");
        fprintf(stderr, "s3cached: %s: HTTP %ld: %.*s\n", what, status,
                e ? (int)(e - m - 9) : 200, m + 9);
    } else {
        fprintf(stderr, "s3cached: %s: HTTP %ld%s%.300s\n", what, status, b->len ? ": " : "",
                b->p ? b->p : "");
    }
}

/* ------------------------------------------------------------------ stats */

struct row {
    const struct json *j;
    double rate;
};

static int row_cmp(const void *a, const void *b)
{
    double ra = ((const struct row *)a)->rate, rb = ((const struct row *)b)->rate;
    return ra < rb ? 1 : ra > rb ? -1 : 0;
}

/* The jobs of /_/stats: needed vs delivered (last 10 s and 60 s), the share of GET time spent
 * stalled on the gateway and its main cause, hits, the verdict. */
static void jobs_table(const struct json *jobs, FILE *f)
{
    size_t n = jobs && jobs->type == JSON_ARR ? jobs->n : 0;
    if (!n)
        return;
    fprintf(f, "\n%-24s %12s %12s %12s %7s %-10s %6s %-8s %s\n", "JOB", "NEEDED", "DELIVERED",
            "60s", "STALL", "CAUSE", "HITS", "STATE", "(10 s window)");
    for (size_t i = 0; i < n; i++) {
        const struct json *j = &jobs->items[i];
        char need[32] = "-", d10[32], d60[32];
        double nb = json_get_num(j, "need_bps", 0);
        if (nb > 0) {
            human_bytes(nb, need, sizeof(need) - 2);
            append_str(need, sizeof(need), "/s");
        }
        human_bytes(json_get_num(j, "delivered_bps_10s", 0), d10, sizeof(d10) - 2);
        append_str(d10, sizeof(d10), "/s");
        human_bytes(json_get_num(j, "delivered_bps_60s", 0), d60, sizeof(d60) - 2);
        append_str(d60, sizeof(d60), "/s");
        const char *name = json_get_str(j, "job"), *cause = json_get_str(j, "main_cause_10s");
        const char *state = json_get_str(j, "state");
        fprintf(f, "%-24.24s %12s %12s %12s %6.1f%% %-10s %5.1f%% %-8s\n", name ? name : "-", need,
                d10, d60, 100 * json_get_num(j, "stall_share_10s", 0), cause ? cause : "-",
                100 * json_get_num(j, "hit_share_10s", 0), state ? state : "-");
    }
}

/* The read plans (GET /_/plan's "plans", /_/stats' "plans"."list"): a line each. */
static void plans_table(const struct json *list, FILE *f)
{
    fprintf(f, "\n%-18s %-24s %-12s %15s %12s %8s %8s %8s %8s\n", "PLAN", "NAME", "BUCKET",
            "POSITION", "AHEAD", "HITS", "STALLS", "MISSES", "ERRORS");
    for (size_t i = 0; list && list->type == JSON_ARR && i < list->n; i++) {
        const struct json *p = &list->items[i];
        char pos[48], ahead[32];
        snprintf(pos, sizeof(pos), "%.0f/%.0f", json_get_num(p, "position", 0),
                 json_get_num(p, "entries", 0));
        human_bytes(json_get_num(p, "bytes_ahead", 0), ahead, sizeof(ahead));
        const char *id = json_get_str(p, "plan"), *nm = json_get_str(p, "name");
        const char *bk = json_get_str(p, "bucket");
        fprintf(f, "%-18s %-24.24s %-12.12s %15s %12s %8.0f %8.0f %8.0f %8.0f\n", id ? id : "-",
                nm ? nm : "-", bk ? bk : "-", pos, ahead, json_get_num(p, "hits", 0),
                json_get_num(p, "stalls", 0), json_get_num(p, "misses", 0),
                json_get_num(p, "prefetch_errors", 0));
    }
}

static void stats_table(const struct json *st, FILE *f)
{
    const struct json *cache = json_get(st, "cache"), *be = json_get(st, "backend");
    const struct json *clients = json_get(st, "clients");
    char a[32], b[32], c[32], d[32];
    double hits = json_get_num(cache, "hits", 0), misses = json_get_num(cache, "misses", 0);
    double coal = json_get_num(cache, "coalesced", 0);
    human_bytes(json_get_num(cache, "used_bytes", 0), a, sizeof(a));
    human_bytes(json_get_num(cache, "capacity_bytes", 0), b, sizeof(b));
    human_bytes(json_get_num(be, "bytes_read", 0), c, sizeof(c));
    human_bytes(json_get_num(cache, "dirty_bytes", 0), d, sizeof(d));
    fprintf(f, "uptime %.0fs  cache %s / %s, %.0f objects, hit ratio %.1f%%  backend read %s, "
               "%.0f requests, %.0f errors  dirty %s",
            json_get_num(st, "uptime_s", 0), a, b, json_get_num(cache, "objects", 0),
            hits + misses + coal > 0 ? 100.0 * hits / (hits + misses + coal) : 0.0, c,
            json_get_num(be, "requests", 0), json_get_num(be, "errors", 0), d);
    const struct json *parked = json_get(st, "parked");
    if (json_get_num(parked, "over_bound_total", 0) > 0) /* a request waited past --park-warn */
        fprintf(f, "  parked %.0f, %.0f over %.0fs (%.0f since the start)",
                json_get_num(parked, "requests", 0), json_get_num(parked, "over_bound", 0),
                json_get_num(parked, "bound_ms", 0) / 1000.0,
                json_get_num(parked, "over_bound_total", 0));
    const struct json *fair = json_get(st, "fair");
    if (json_get_num(fair, "capacity_bps", 0) > 0) { /* --max-bandwidth: the fair share */
        const struct json *sat = json_get(fair, "saturated");
        human_bytes(json_get_num(fair, "level_bps", 0), a, sizeof(a));
        human_bytes(json_get_num(fair, "capacity_bps", 0), b, sizeof(b));
        fprintf(f, "  fair share %s/s of %s/s, %.0f active clients%s", a, b,
                json_get_num(fair, "active_clients", 0),
                sat && sat->type == JSON_BOOL && sat->b ? ", saturated" : "");
    }
    fputs("\n", f);
    const struct json *nodes = json_get(st, "nodes");
    if (nodes && nodes->type == JSON_ARR) { /* --cluster: a line per gateway */
        fprintf(f, "cluster: %.0f of %.0f gateways answered\n", json_get_num(st, "nodes_up", 0),
                json_get_num(st, "nodes_total", 0));
        for (size_t i = 0; i < nodes->n; i++) {
            const struct json *nd = &nodes->items[i], *up = json_get(nd, "up");
            const char *name = json_get_str(nd, "node");
            if (!up || up->type != JSON_BOOL || !up->b) {
                fprintf(f, "  %-24s down: %s\n", name ? name : "-",
                        json_get_str(nd, "error") ? json_get_str(nd, "error") : "no answer");
                continue;
            }
            const struct json *nc = json_get(nd, "cache");
            human_bytes(json_get_num(nc, "used_bytes", 0), a, sizeof(a));
            fprintf(f, "  %-24s up %.0fs, cache %s, %.0f objects, %.0f hits, %.0f misses, "
                       "%.0f requests\n",
                    name ? name : "-", json_get_num(nd, "uptime_s", 0), a,
                    json_get_num(nc, "objects", 0), json_get_num(nc, "hits", 0),
                    json_get_num(nc, "misses", 0), json_get_num(nd, "requests", 0));
        }
    }
    fputs("\n", f);
    fprintf(f, "%-24s %-16s %9s %12s %12s %12s %12s %8s %8s\n", "CLIENT", "ADDR", "REQUESTS",
            "SENT", "RECEIVED", "OUT/s", "IN/s", "HITS", "MISSES");
    size_t n = clients && clients->type == JSON_ARR ? clients->n : 0;
    struct row *rows = calloc(n ? n : 1, sizeof(*rows));
    if (!rows)
        return;
    for (size_t i = 0; i < n; i++) {
        rows[i].j = &clients->items[i];
        rows[i].rate = json_get_num(rows[i].j, "rate_out_bps", 0) +
                       json_get_num(rows[i].j, "rate_in_bps", 0);
    }
    qsort(rows, n, sizeof(*rows), row_cmp);
    for (size_t i = 0; i < n; i++) {
        const struct json *r = rows[i].j;
        char s1[32], s2[32], s3[32], s4[32];
        human_bytes(json_get_num(r, "bytes_out", 0), s1, sizeof(s1));
        human_bytes(json_get_num(r, "bytes_in", 0), s2, sizeof(s2));
        human_bytes(json_get_num(r, "rate_out_bps", 0), s3, sizeof(s3));
        human_bytes(json_get_num(r, "rate_in_bps", 0), s4, sizeof(s4));
        const char *name = json_get_str(r, "client"), *addr = json_get_str(r, "addr");
        fprintf(f, "%-24.24s %-16.16s %9.0f %12s %12s %10s/s %10s/s %8.0f %8.0f\n",
                name ? name : "-", addr ? addr : "-", json_get_num(r, "requests", 0), s1, s2, s3,
                s4, json_get_num(r, "hits", 0), json_get_num(r, "misses", 0));
    }
    free(rows);
    jobs_table(json_get(st, "jobs"), f);
    const struct json *plans = json_get(st, "plans");
    if (json_get_num(plans, "held", 0) > 0)
        plans_table(json_get(plans, "list"), f);
}

static int cmd_stats(const struct cli_opts *o)
{
    int tty = isatty(1);
    for (;;) {
        struct buf b;
        struct json *st = NULL;
        struct errmsg em = {{0}};
        buf_init(&b, 64u << 20);
        long status = cli_request(o, "GET", o->cluster ? "/_/stats?scope=cluster" : "/_/stats",
                                  NULL, &b);
        if (status != 200) {
            if (status > 0)
                cli_fail("GET /_/stats", status, &b);
            buf_free(&b);
            return 1;
        }
        if (json_parse(b.p, b.len, &st, &em)) {
            fprintf(stderr, "s3cached: /_/stats: %s\n", em.buf);
            buf_free(&b);
            return 1;
        }
        if (o->watch && tty)
            fputs("\033[H\033[2J", stdout);
        stats_table(st, stdout);
        fflush(stdout);
        json_free(st);
        buf_free(&b);
        if (!o->watch)
            return 0;
        if (!tty)
            putchar('\n');
        usleep((useconds_t)(o->interval_s * 1e6));
    }
}

/* ------------------------------------------------------------------ warm */

/* s3://BUCKET/PREFIX -> bucket, prefix (new strings). */
static int parse_s3_url(const char *url, char **bucket, char **prefix)
{
    if (strncmp(url, "s3://", 5) || !url[5])
        return -EINVAL;
    const char *p = url + 5;
    size_t bl = strcspn(p, "/");
    *bucket = strndup(p, bl);
    *prefix = strdup(p[bl] ? p + bl + 1 : "");
    return *bucket && *prefix ? 0 : -ENOMEM;
}

/* The keys of @file, one a line, as ,"keys":[...],"keys_hex":[...] appended to @b: each key
 * twice, "keys_hex" carrying its bytes whole (a key need not be UTF-8), which the gateway
 * reads, "keys" for an older gateway. 0, or -errno with a message on stderr (@cmd's). */
static int keys_json(const char *file, const char *cmd, struct buf *b)
{
    FILE *f = fopen(file, "r");
    if (!f) {
        fprintf(stderr, "s3cached %s: --keys \"%s\": %s\n", cmd, file, strerror(errno));
        return -errno;
    }
    struct buf hex;
    buf_init(&hex, b->max);
    buf_puts(b, ",\"keys\":[");
    buf_puts(&hex, ",\"keys_hex\":[");
    char line[2048];
    int first = 1, rc = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0])
            continue;
        if (!first) {
            buf_puts(b, ",");
            buf_puts(&hex, ",");
        }
        buf_json_str(b, line);
        buf_json_hex(&hex, line);
        first = 0;
    }
    fclose(f);
    buf_puts(b, "]");
    buf_puts(&hex, "]");
    if (buf_append(b, hex.p, hex.len))
        rc = -EMSGSIZE;
    buf_free(&hex);
    if (rc)
        fprintf(stderr, "s3cached %s: --keys \"%s\": too many keys for one request\n", cmd, file);
    return rc;
}

static int warm_body(const struct cli_opts *o, struct buf *b)
{
    char *bucket = NULL, *prefix = NULL;
    int rc = 0;
    buf_puts(b, "{");
    if (o->manifest) {
        if (parse_s3_url(o->manifest, &bucket, &prefix) || !*prefix) {
            fprintf(stderr, "s3cached warm: --manifest wants s3://BUCKET/KEY\n");
            rc = -EINVAL;
            goto out;
        }
        buf_puts(b, "\"bucket\":");
        buf_json_str(b, bucket);
        buf_puts(b, ",\"manifest\":");
        buf_json_str(b, prefix);
    } else if (o->keys_file) {
        if (!o->target || parse_s3_url(o->target, &bucket, &prefix)) {
            fprintf(stderr, "s3cached warm: --keys FILE needs the bucket as s3://BUCKET\n");
            rc = -EINVAL;
            goto out;
        }
        buf_puts(b, "\"bucket\":");
        buf_json_str(b, bucket);
        if ((rc = keys_json(o->keys_file, "warm", b)))
            goto out;
    } else {
        if (!o->target || parse_s3_url(o->target, &bucket, &prefix)) {
            fprintf(stderr, "s3cached warm: give s3://BUCKET/PREFIX, --keys FILE or --manifest\n");
            rc = -EINVAL;
            goto out;
        }
        buf_puts(b, "\"bucket\":");
        buf_json_str(b, bucket);
        buf_puts(b, ",\"prefix\":");
        buf_json_str(b, prefix);
    }
    if (o->pin)
        buf_puts(b, ",\"pin\":true");
    if (o->fit)
        buf_puts(b, ",\"fit\":true");
    buf_puts(b, "}");
out:
    free(bucket);
    free(prefix);
    return rc;
}

static void warm_progress(const struct json *j, int tty, double elapsed)
{
    double od = json_get_num(j, "objects_done", 0), ot = json_get_num(j, "objects_total", 0);
    double bd = json_get_num(j, "bytes_done", 0), bt = json_get_num(j, "bytes_total", 0);
    double rate = elapsed > 0 ? bd / elapsed : 0;
    char sb[32], st[32], sr[32], eta[32] = "-";
    human_bytes(bd, sb, sizeof(sb));
    human_bytes(bt, st, sizeof(st));
    human_bytes(rate, sr, sizeof(sr));
    if (rate > 0 && bt > bd)
        snprintf(eta, sizeof(eta), "%.0fs", (bt - bd) / rate);
    const char *state = json_get_str(j, "state");
    const struct json *nodes = json_get(j, "nodes"); /* a cluster job: its shares */
    char nd[48] = "";
    if (nodes && nodes->type == JSON_ARR) {
        size_t fin = 0;
        for (size_t i = 0; i < nodes->n; i++) {
            const char *ns = json_get_str(&nodes->items[i], "state");
            fin += ns && strcmp(ns, "queued") && strcmp(ns, "running");
        }
        snprintf(nd, sizeof(nd), "  gateways %zu/%zu", fin, nodes->n);
    }
    if (tty) {
        int width = 30, fill = bt > 0 ? (int)(width * bd / bt) : (ot > 0 ? (int)(width * od / ot) : 0);
        char bar[64];
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[width] = '\0';
        printf("\r[%s] %.0f/%.0f objects  %s/%s  %s/s  ETA %s%s  %-9s", bar, od, ot, sb, st, sr,
               eta, nd, state ? state : "");
    } else {
        printf("%s objects %.0f/%.0f bytes %.0f/%.0f rate %.0f B/s eta %s%s\n",
               state ? state : "-", od, ot, bd, bt, rate, eta, nd);
    }
    fflush(stdout);
}

static int cmd_warm(const struct cli_opts *o)
{
    struct buf body, b;
    struct json *j = NULL;
    struct errmsg em = {{0}};
    char path[256];
    buf_init(&body, 64u << 20);
    buf_init(&b, 16u << 20);
    if (warm_body(o, &body)) {
        buf_free(&body);
        return 2;
    }
    long status = cli_request(o, "POST", "/_/warm", body.p, &b);
    buf_free(&body);
    if (status != 202 && status != 200) {
        if (status > 0)
            cli_fail("POST /_/warm", status, &b);
        buf_free(&b);
        return 1;
    }
    if (json_parse(b.p, b.len, &j, &em) || !json_get_str(j, "job")) {
        fprintf(stderr, "s3cached warm: unexpected answer: %.200s\n", b.p ? b.p : "");
        json_free(j);
        buf_free(&b);
        return 1;
    }
    snprintf(path, sizeof(path), "/_/warm/%s", json_get_str(j, "job"));
    printf("job %s\n", json_get_str(j, "job")); /* GET /_/warm/ID follows it later */
    fflush(stdout);
    json_free(j);
    int tty = isatty(1), rc = 1;
    struct timespec t0, t1;
    double shown = -1; /* when progress was last printed */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        buf_reset(&b);
        j = NULL;
        status = cli_request(o, "GET", path, NULL, &b);
        if (status != 200 || json_parse(b.p, b.len, &j, &em)) {
            if (status > 0)
                cli_fail("GET warm job", status, &b);
            break;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double el = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        const char *state = json_get_str(j, "state");
        int over = state && strcmp(state, "queued") && strcmp(state, "running");
        /* A bar 5 times a second on a terminal, else a line a second; always the last state. */
        if (over || shown < 0 || el - shown >= (tty ? 0.2 : 1.0)) {
            warm_progress(j, tty, el);
            shown = el;
        }
        if (over) {
            const struct json *errs = json_get(j, "errors");
            size_t ne = errs && errs->type == JSON_ARR ? errs->n : 0;
            if (tty)
                putchar('\n');
            for (size_t i = 0; i < ne && i < 20; i++) {
                const struct json *e = &errs->items[i];
                const char *k = e->type == JSON_STR ? e->str : json_get_str(e, "key");
                const char *m = e->type == JSON_OBJ ? json_get_str(e, "error") : NULL;
                fprintf(stderr, "failed: %s%s%s\n", k ? k : "?", m ? ": " : "", m ? m : "");
            }
            if (ne > 20)
                fprintf(stderr, "... and %zu more failures\n", ne - 20);
            const struct json *nodes = json_get(j, "nodes"); /* a cluster job: each share */
            for (size_t i = 0; nodes && nodes->type == JSON_ARR && i < nodes->n; i++) {
                const struct json *nd = &nodes->items[i];
                const char *ns = json_get_str(nd, "state"), *nm = json_get_str(nd, "message");
                int ok = ns && !strcmp(ns, "done");
                fprintf(ok ? stdout : stderr, "gateway %s: %s, %.0f/%.0f objects%s%s\n",
                        json_get_str(nd, "node") ? json_get_str(nd, "node") : "?",
                        ns ? ns : "?", json_get_num(nd, "objects_done", 0),
                        json_get_num(nd, "objects_total", 0), nm ? ": " : "", nm ? nm : "");
            }
            if (json_get_str(j, "message"))
                fprintf(stderr, "s3cached warm: %s\n", json_get_str(j, "message"));
            rc = !strcmp(state, "done") && ne == 0 ? 0 : 1;
            json_free(j);
            break;
        }
        json_free(j);
        /* Poll in proportion to the time the job has taken (2%, 10 ms to 1 s): a short job is
         * seen done within a few ms, a long one costs a request a second. */
        double wait = S3C_MAX(0.01, S3C_MIN(el / 50, tty ? 0.2 : 1.0));
        usleep((useconds_t)(wait * 1e6));
    }
    buf_free(&b);
    return rc;
}

/* ------------------------------------------------------------------ plan */

/* s3cached plan s3://BUCKET --keys FILE [--name NAME]: posts a read plan (docs/plans.md) and
 * prints its id; s3cached plan: the plans, a line each; s3cached plan --cancel ID. */
static int cmd_plan(const struct cli_opts *o)
{
    struct buf body, b;
    char *bucket = NULL, *prefix = NULL, path[200];
    long status;
    int rc = 1;
    buf_init(&body, 64u << 20);
    buf_init(&b, 64u << 20);
    if (o->cancel) {
        snprintf(path, sizeof(path), "/_/plan/%.100s", o->cancel);
        status = cli_request(o, "DELETE", path, NULL, &b);
        if (status == 200) {
            printf("plan %s cancelled\n", o->cancel);
            rc = 0;
        } else if (status > 0) {
            cli_fail("DELETE plan", status, &b);
        }
    } else if (o->keys_file) {
        if (!o->target || parse_s3_url(o->target, &bucket, &prefix)) {
            fprintf(stderr, "s3cached plan: --keys FILE needs the bucket as s3://BUCKET\n");
            rc = 2;
            goto out;
        }
        buf_puts(&body, "{\"bucket\":");
        buf_json_str(&body, bucket);
        if (o->name) {
            buf_puts(&body, ",\"name\":");
            buf_json_str(&body, o->name);
        }
        if (keys_json(o->keys_file, "plan", &body)) {
            rc = 2;
            goto out;
        }
        buf_puts(&body, "}");
        status = cli_request(o, "POST", "/_/plan", body.p, &b);
        struct json *j = NULL;
        struct errmsg em = {{0}};
        if (status != 201) {
            if (status > 0)
                cli_fail("POST /_/plan", status, &b);
        } else if (json_parse(b.p, b.len, &j, &em) || !json_get_str(j, "plan")) {
            fprintf(stderr, "s3cached plan: unexpected answer: %.200s\n", b.p ? b.p : "");
        } else {
            printf("plan %s: %.0f entries\n", json_get_str(j, "plan"),
                   json_get_num(j, "entries", 0));
            rc = 0;
        }
        json_free(j);
    } else {
        struct json *j = NULL;
        struct errmsg em = {{0}};
        status = cli_request(o, "GET", "/_/plan", NULL, &b);
        if (status != 200) {
            if (status > 0)
                cli_fail("GET /_/plan", status, &b);
        } else if (json_parse(b.p, b.len, &j, &em)) {
            fprintf(stderr, "s3cached plan: /_/plan: %s\n", em.buf);
        } else {
            plans_table(json_get(j, "plans"), stdout);
            rc = 0;
        }
        json_free(j);
    }
out:
    free(bucket);
    free(prefix);
    buf_free(&body);
    buf_free(&b);
    return rc;
}

/* ------------------------------------------------------------------ flush */

static int cmd_flush(const struct cli_opts *o)
{
    struct buf body, b;
    char *bucket = NULL, *prefix = NULL;
    int64_t timeout_ms = -1;
    if (o->timeout) {
        const char *err = conf_parse_duration_ms(o->timeout, &timeout_ms);
        if (err) {
            fprintf(stderr, "s3cached flush: --timeout %s: %s\n", o->timeout, err);
            return 2;
        }
    }
    buf_init(&body, 4096);
    buf_init(&b, 1u << 20);
    buf_puts(&body, "{");
    if (o->target) {
        if (parse_s3_url(o->target, &bucket, &prefix)) {
            fprintf(stderr, "s3cached flush: expected s3://BUCKET[/PREFIX]\n");
            buf_free(&body);
            buf_free(&b);
            return 2;
        }
        buf_puts(&body, "\"bucket\":");
        buf_json_str(&body, bucket);
        buf_puts(&body, ",\"prefix\":");
        buf_json_str(&body, prefix);
    }
    if (timeout_ms >= 0)
        buf_printf(&body, "%s\"timeout_s\":%.3f", o->target ? "," : "", (double)timeout_ms / 1e3);
    buf_puts(&body, "}");
    long status = cli_request(o, "POST", "/_/flush", body.p, &b);
    int rc = status == 200 ? 0 : 1;
    if (status == 200)
        printf("%s", b.p ? b.p : "");
    else if (status == 504)
        fprintf(stderr, "s3cached flush: not everything is on the backend yet: %s",
                b.p ? b.p : "\n");
    else if (status > 0)
        cli_fail("POST /_/flush", status, &b);
    free(bucket);
    free(prefix);
    buf_free(&body);
    buf_free(&b);
    return rc;
}

/* ------------------------------------------------------------------ dispatch */

int cli_main(const char *cmd, int argc, char **argv)
{
    struct cli_opts o = {
        .endpoint = getenv("S3CACHED_ENDPOINT"),
        .token = getenv("S3CACHED_ADMIN_TOKEN"),
        .access_key = getenv("AWS_ACCESS_KEY_ID"),
        .secret_key = getenv("AWS_SECRET_ACCESS_KEY"),
        .region = "us-east-1",
        .interval_s = 1.0,
    };
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define TAKE(flag, field)                                                                      \
    if (!strcmp(a, flag)) {                                                                    \
        if (!v) {                                                                              \
            fprintf(stderr, "s3cached %s: %s needs a value\n", cmd, flag);                     \
            return 2;                                                                          \
        }                                                                                      \
        o.field = v;                                                                           \
        i++;                                                                                   \
        continue;                                                                              \
    }
        TAKE("--endpoint", endpoint);
        TAKE("--admin-token", token);
        TAKE("--access-key", access_key);
        TAKE("--secret-key", secret_key);
        TAKE("--region", region);
        TAKE("--keys", keys_file);
        TAKE("--manifest", manifest);
        TAKE("--name", name);
        TAKE("--cancel", cancel);
#undef TAKE
        if (!strcmp(a, "--watch")) {
            o.watch = 1;
        } else if (!strcmp(a, "--pin")) {
            o.pin = 1;
        } else if (!strcmp(a, "--fit")) {
            o.fit = 1;
        } else if (!strcmp(a, "--cluster")) {
            o.cluster = 1;
        } else if (!strcmp(a, "--timeout") && v) {
            o.timeout = v;
            i++;
        } else if (!strcmp(a, "--interval") && v) {
            o.interval_s = atof(v);
            if (o.interval_s < 0.1)
                o.interval_s = 0.1;
            i++;
        } else if (!strncmp(a, "s3://", 5) && !o.target) {
            o.target = a;
        } else {
            fprintf(stderr, "s3cached %s: unknown argument \"%s\" (try: s3cached help)\n", cmd, a);
            return 2;
        }
    }
    if (!o.endpoint) {
        fprintf(stderr, "s3cached %s: --endpoint URL is required (e.g. http://127.0.0.1:9000)\n",
                cmd);
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc;
    if (!strcmp(cmd, "stats"))
        rc = cmd_stats(&o);
    else if (!strcmp(cmd, "warm"))
        rc = cmd_warm(&o);
    else if (!strcmp(cmd, "plan"))
        rc = cmd_plan(&o);
    else
        rc = cmd_flush(&o);
    curl_global_cleanup();
    return rc;
}
