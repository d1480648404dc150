/*
 * test_stats.c: unit tests of acct/stats.c: exact per-client and per-bucket counters,
 * the /_/stats JSON (parsed by python3's json module), 10 s rates under an injected clock,
 * aging into "other" and the client cap, the Prometheus text checked by a strict parser
 * below (and by promtool when installed), label escaping, and concurrent charging.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/s3c.h"
#include "acct/stats.h"
#include "acct/fair.h" /* struct fair_stats */

#define SEC 1000000000ull
#define OUT_MAX (16u << 20)

static _Atomic uint64_t fake_now_ns;

static uint64_t fake_clock(void *cls)
{
    UNUSED(cls);
    return atomic_load(&fake_now_ns);
}

static void fake_advance(uint64_t ns)
{
    atomic_fetch_add(&fake_now_ns, ns);
}

static struct stats *new_fake_stats(void)
{
    struct stats *s = NULL;
    assert_int_equal(stats_new(&s), 0);
    atomic_store(&fake_now_ns, 1000 * SEC);
    stats_set_clock(s, fake_clock, NULL);
    return s;
}

static char *render_json_fs(struct stats *s, const struct cache_stats *cs,
                            const struct backend_counters *bc, const struct fair_stats *fs)
{
    struct buf b;
    buf_init(&b, OUT_MAX);
    assert_int_equal(stats_json(s, cs, bc, fs, NULL, &b), 0);
    return buf_take(&b);
}

static char *render_json(struct stats *s, const struct cache_stats *cs,
                         const struct backend_counters *bc)
{
    return render_json_fs(s, cs, bc, NULL);
}

static char *render_prom_fs(struct stats *s, const struct cache_stats *cs,
                            const struct backend_counters *bc, const struct fair_stats *fs)
{
    struct buf b;
    buf_init(&b, OUT_MAX);
    assert_int_equal(stats_prometheus(s, cs, bc, fs, NULL, &b), 0);
    return buf_take(&b);
}

static char *render_prom(struct stats *s, const struct cache_stats *cs,
                         const struct backend_counters *bc)
{
    return render_prom_fs(s, cs, bc, NULL);
}

/* --- a strict parser for the Prometheus text format 0.0.4 ------------------------------ */

struct pc {
    char err[512];
    int lineno;
    char fam[256];        /* current family */
    char fam_type[32];
    int fam_help, fam_typed, fam_samples;
    char **done;          /* families already closed: must not reappear */
    size_t n_done;
    char **series;        /* every series seen: no duplicates */
    size_t n_series;
    /* current histogram group (labels without le) */
    char grp[1024];
    double grp_le, grp_cum;
    int grp_inf, grp_sum;
};

static int pc_fail(struct pc *pc, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(pc->err, sizeof(pc->err), "line %d: ", pc->lineno);
    va_start(ap, fmt);
    vsnprintf(pc->err + n, sizeof(pc->err) - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static int pc_name_ok(const char *p, size_t n, int metric)
{
    if (!n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)p[i];
        int ok = isalpha(c) || c == '_' || (metric && c == ':') || (i && isdigit(c));
        if (!ok)
            return 0;
    }
    return 1;
}

static int pc_value(const char *v, double *out)
{
    if (!strcmp(v, "+Inf")) {
        *out = INFINITY;
        return 0;
    }
    if (!strcmp(v, "-Inf")) {
        *out = -INFINITY;
        return 0;
    }
    if (!strcmp(v, "NaN")) {
        *out = NAN;
        return 0;
    }
    char *end;
    errno = 0;
    *out = strtod(v, &end);
    if (!*v || *end || errno || isspace((unsigned char)*v))
        return -1;
    return 0;
}

static int pc_close_family(struct pc *pc)
{
    if (!pc->fam[0])
        return 0;
    if (!strcmp(pc->fam_type, "histogram") && pc->grp[0] && !pc->grp_sum)
        return pc_fail(pc, "histogram %s group {%s} without _sum/_count", pc->fam, pc->grp);
    pc->done = realloc(pc->done, (pc->n_done + 1) * sizeof(*pc->done));
    pc->done[pc->n_done++] = strdup(pc->fam);
    pc->fam[0] = '\0';
    pc->fam_type[0] = '\0';
    pc->fam_help = pc->fam_typed = pc->fam_samples = 0;
    pc->grp[0] = '\0';
    return 0;
}

/* Makes @name the current family (closing the previous one); it must be new. */
static int pc_family(struct pc *pc, const char *name)
{
    if (!strcmp(pc->fam, name))
        return 0;
    if (pc_close_family(pc))
        return -1;
    for (size_t i = 0; i < pc->n_done; i++)
        if (!strcmp(pc->done[i], name))
            return pc_fail(pc, "family %s is not contiguous", name);
    snprintf(pc->fam, sizeof(pc->fam), "%s", name);
    return 0;
}

static int pc_comment(struct pc *pc, const char *line)
{
    const char *p = line + 2;
    int help = !strncmp(p, "HELP ", 5), type = !strncmp(p, "TYPE ", 5);
    if (!help && !type)
        return pc_fail(pc, "unexpected comment: %s", line);
    p += 5;
    size_t n = strcspn(p, " ");
    if (!pc_name_ok(p, n, 1) || p[n] != ' ' || !p[n + 1])
        return pc_fail(pc, "bad %s line: %s", help ? "HELP" : "TYPE", line);
    char name[256];
    snprintf(name, sizeof(name), "%.*s", (int)n, p);
    if (pc_family(pc, name))
        return -1;
    const char *rest = p + n + 1;
    if (help) {
        if (pc->fam_help++)
            return pc_fail(pc, "second HELP for %s", name);
        for (const char *q = rest; *q; q++)
            if (*q == '\\' && q[1] != '\\' && q[1] != 'n')
                return pc_fail(pc, "bad escape in HELP of %s", name);
        return 0;
    }
    if (pc->fam_typed++ || pc->fam_samples)
        return pc_fail(pc, "TYPE for %s twice or after its samples", name);
    if (strcmp(rest, "counter") && strcmp(rest, "gauge") && strcmp(rest, "histogram") &&
        strcmp(rest, "summary") && strcmp(rest, "untyped"))
        return pc_fail(pc, "unknown type %s", rest);
    snprintf(pc->fam_type, sizeof(pc->fam_type), "%s", rest);
    return 0;
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int pc_sample(struct pc *pc, const char *line)
{
    const char *p = line;
    size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:");
    if (!pc_name_ok(p, n, 1))
        return pc_fail(pc, "bad metric name: %s", line);
    char name[256];
    snprintf(name, sizeof(name), "%.*s", (int)n, p);
    p += n;
    /* labels: canonical copy without le in grp, le value apart */
    char labels[1024] = "", grp[1024] = "", le[512] = "";
    char seen[16][64];
    int nseen = 0;
    if (*p == '{') {
        p++;
        while (*p != '}') {
            size_t ln = strcspn(p, "=");
            if (!pc_name_ok(p, ln, 0) || p[ln] != '=' || p[ln + 1] != '"')
                return pc_fail(pc, "bad label: %s", line);
            char lname[64];
            snprintf(lname, sizeof(lname), "%.*s", (int)ln, p);
            for (int i = 0; i < nseen; i++)
                if (!strcmp(seen[i], lname))
                    return pc_fail(pc, "duplicate label %s", lname);
            if (nseen < 16)
                snprintf(seen[nseen++], 64, "%s", lname);
            p += ln + 2;
            char val[512];
            size_t vn = 0;
            for (; *p != '"'; p++) {
                if (!*p)
                    return pc_fail(pc, "unterminated label value: %s", line);
                if (*p == '\\') {
                    p++;
                    if (*p != '\\' && *p != '"' && *p != 'n')
                        return pc_fail(pc, "bad escape \\%c: %s", *p, line);
                }
                if (vn < sizeof(val) - 1)
                    val[vn++] = *p;
            }
            val[vn] = '\0';
            p++;
            if (!strcmp(lname, "le"))
                snprintf(le, sizeof(le), "%s", val);
            else {
                size_t gl = strlen(grp);
                snprintf(grp + gl, sizeof(grp) - gl, "%s=%s;", lname, val);
            }
            size_t ll = strlen(labels);
            snprintf(labels + ll, sizeof(labels) - ll, "%s=%s;", lname, val);
            if (*p == ',') {
                p++;
                if (*p == '}')
                    return pc_fail(pc, "trailing comma: %s", line);
            } else if (*p != '}')
                return pc_fail(pc, "expected , or }: %s", line);
        }
        p++;
    }
    if (*p != ' ' || !p[1] || strchr(p + 1, ' '))
        return pc_fail(pc, "expected exactly one value (no timestamp): %s", line);
    double v;
    if (pc_value(p + 1, &v))
        return pc_fail(pc, "bad value: %s", line);

    /* Which family does it belong to? */
    const char *fam = name;
    char base[256];
    if (!strcmp(pc->fam_type, "histogram")) {
        static const char *const sfx[] = {"_bucket", "_sum", "_count"};
        for (size_t i = 0; i < ARRAY_SIZE(sfx); i++)
            if (ends_with(name, sfx[i])) {
                snprintf(base, sizeof(base), "%.*s", (int)(strlen(name) - strlen(sfx[i])), name);
                if (!strcmp(base, pc->fam))
                    fam = base;
            }
    }
    if (pc_family(pc, fam))
        return -1;
    if (!pc->fam_typed)
        return pc_fail(pc, "sample of %s without TYPE", fam);
    pc->fam_samples++;

    char sid[1400];
    snprintf(sid, sizeof(sid), "%s|%s", name, labels);
    for (size_t i = 0; i < pc->n_series; i++)
        if (!strcmp(pc->series[i], sid))
            return pc_fail(pc, "duplicate series %s", sid);
    pc->series = realloc(pc->series, (pc->n_series + 1) * sizeof(*pc->series));
    pc->series[pc->n_series++] = strdup(sid);

    if (!strcmp(pc->fam_type, "counter")) {
        if (!ends_with(name, "_total"))
            return pc_fail(pc, "counter %s without _total", name);
        if (!(v >= 0))
            return pc_fail(pc, "negative counter %s", line);
    }
    if (!strcmp(pc->fam_type, "histogram")) {
        if (strcmp(name, fam) == 0)
            return pc_fail(pc, "bare sample in histogram %s", fam);
        if (ends_with(name, "_bucket")) {
            if (!le[0])
                return pc_fail(pc, "_bucket without le: %s", line);
            double lev;
            if (pc_value(le, &lev))
                return pc_fail(pc, "bad le: %s", line);
            if (strcmp(grp, pc->grp)) {
                if (pc->grp[0] && !pc->grp_sum)
                    return pc_fail(pc, "group {%s} ended without _sum/_count", pc->grp);
                snprintf(pc->grp, sizeof(pc->grp), "%s", grp);
                pc->grp_le = -INFINITY;
                pc->grp_cum = 0;
                pc->grp_inf = pc->grp_sum = 0;
            }
            if (pc->grp_inf || !(lev > pc->grp_le))
                return pc_fail(pc, "le not increasing: %s", line);
            if (v < pc->grp_cum)
                return pc_fail(pc, "bucket counts not cumulative: %s", line);
            pc->grp_le = lev;
            pc->grp_cum = v;
            pc->grp_inf = isinf(lev);
        } else {
            if (le[0])
                return pc_fail(pc, "le on %s", line);
            if (strcmp(grp, pc->grp) || !pc->grp_inf)
                return pc_fail(pc, "%s before the group's +Inf bucket", line);
            if (ends_with(name, "_sum")) {
                if (pc->grp_sum)
                    return pc_fail(pc, "second _sum: %s", line);
                pc->grp_sum = 1;
            } else {
                if (!pc->grp_sum)
                    return pc_fail(pc, "_count before _sum: %s", line);
                if (v != pc->grp_cum)
                    return pc_fail(pc, "_count %g != +Inf bucket %g", v, pc->grp_cum);
                pc->grp[0] = '\0';
            }
        }
    }
    return 0;
}

/* 0 if @text is valid exposition format (and our stricter rules), else -1 with @err. */
static int prom_validate(const char *text, char *err, size_t errlen)
{
    struct pc pc;
    memset(&pc, 0, sizeof(pc));
    int rc = 0;
    size_t len = strlen(text);
    if (!len || text[len - 1] != '\n')
        rc = pc_fail(&pc, "output must end with a newline");
    const char *p = text;
    while (!rc && *p) {
        const char *nl = strchr(p, '\n');
        char *line = strndup(p, (size_t)(nl - p));
        pc.lineno++;
        if (!line[0])
            rc = pc_fail(&pc, "empty line");
        else if (line[0] == '#')
            rc = pc_comment(&pc, line);
        else
            rc = pc_sample(&pc, line);
        free(line);
        p = nl + 1;
    }
    if (!rc)
        rc = pc_close_family(&pc);
    for (size_t i = 0; i < pc.n_done; i++)
        free(pc.done[i]);
    for (size_t i = 0; i < pc.n_series; i++)
        free(pc.series[i]);
    free(pc.done);
    free(pc.series);
    snprintf(err, errlen, "%s", pc.err);
    return rc;
}

static void assert_prom_valid(const char *text)
{
    char err[512];
    if (prom_validate(text, err, sizeof(err))) {
        fprintf(stderr, "invalid exposition: %s\n--- text ---\n%s", err, text);
        fail();
    }
}

/* The value of the series written exactly as @series (name{labels}); fails if absent. */
static double prom_get(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p;) {
        if (!strncmp(p, series, n) && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    fprintf(stderr, "series not found: %s\n", series);
    fail();
    return -1;
}

static int prom_has(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p;) {
        if (!strncmp(p, series, n) && p[n] == ' ')
            return 1;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return 0;
}

static double client_metric(const char *text, const char *metric, const char *client,
                            const char *addr)
{
    char series[512];
    snprintf(series, sizeof(series), "%s{client=\"%s\",addr=\"%s\"}", metric, client, addr);
    return prom_get(text, series);
}

/* Runs python3 @script with @data on stdin; returns its exit status (-1: no python3). */
static int run_python(const char *script, const char *data)
{
    if (access("/usr/bin/python3", X_OK))
        return -1;
    char path[] = "/tmp/test_stats_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(data);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -c '%s' < %s", script, path);
    int st = system(cmd);
    unlink(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* --- tests ----------------------------------------------------------------------------- */

static void test_stats_op_names(void **state)
{
    static const char *const want[] = {"get",  "head",      "put",    "copy",  "delete",
                                       "list", "multipart", "bucket", "admin", "other"};
    UNUSED(state);
    for (unsigned i = 0; i < STATS_OP__N; i++)
        assert_string_equal(stats_op_name((enum stats_op)i), want[i]);
    assert_string_equal(stats_op_name(STATS_OP__N), "other");
    assert_string_equal(stats_op_name((enum stats_op)-1), "other");
}

/* Scripted traffic from two clients; every counter checked exactly. */
static void script_two_clients(struct stats *s)
{
    struct stats_client *a = stats_client_ref(s, "AKIAONE", "127.0.0.1");
    struct stats_client *b = stats_client_ref(s, "AKIATWO", "10.0.0.2");
    /* a: GET hit, 3 chunks */
    stats_client_sent(a, 400);
    stats_client_sent(a, 400);
    stats_client_sent(a, 200);
    stats_bucket_found(s, "photos"); /* as req.c does for a request that succeeded */
    stats_request_done(s, a, "photos", STATS_OP_GET, 200, CACHE_HIT, 2000000, 1000, 0);
    /* a: GET miss, backend filled 5000 on its behalf, client aborted after 1500 */
    stats_client_filled(a, 5000);
    stats_client_sent(a, 1500);
    stats_request_done(s, a, "photos", STATS_OP_GET, 200, CACHE_MISS, 40000000, 1500, 0);
    /* a: PUT 2048 */
    stats_client_received(a, 1024);
    stats_client_received(a, 1024);
    stats_bucket_found(s, "docs");
    stats_request_done(s, a, "docs", STATS_OP_PUT, 200, -1, 7000000, 0, 2048);
    /* b: GET coalesced 700, HEAD 404, GET 503, list */
    stats_client_sent(b, 700);
    stats_request_done(s, b, "photos", STATS_OP_GET, 206, CACHE_COALESCED, 3000000, 700, 0);
    stats_request_done(s, b, "photos", STATS_OP_HEAD, 404, -1, 500000, 0, 0);
    stats_request_done(s, b, "photos", STATS_OP_GET, 503, CACHE_MISS, 70 * SEC, 0, 0);
    stats_client_sent(b, 300);
    stats_request_done(s, b, "docs", STATS_OP_LIST, 200, -1, 1000000, 300, 0);
    stats_request_done(s, b, NULL, STATS_OP_BUCKET, 200, -1, 1000000, 0, 0); /* ListBuckets */
    stats_client_release(s, a);
    stats_client_release(s, b);
}

static void test_stats_counters_two_clients(void **state)
{
    UNUSED(state);
    struct stats *s = new_fake_stats();
    script_two_clients(s);
    char *t = render_prom(s, NULL, NULL);
    assert_prom_valid(t);

    assert_int_equal(client_metric(t, "s3cached_client_requests_total", "AKIAONE", "127.0.0.1"), 3);
    assert_int_equal(client_metric(t, "s3cached_client_sent_bytes_total", "AKIAONE", "127.0.0.1"),
                     2500);
    assert_int_equal(
        client_metric(t, "s3cached_client_received_bytes_total", "AKIAONE", "127.0.0.1"), 2048);
    assert_int_equal(client_metric(t, "s3cached_client_hits_total", "AKIAONE", "127.0.0.1"), 1);
    assert_int_equal(client_metric(t, "s3cached_client_misses_total", "AKIAONE", "127.0.0.1"), 1);
    assert_int_equal(client_metric(t, "s3cached_client_coalesced_total", "AKIAONE", "127.0.0.1"),
                     0);
    assert_int_equal(
        client_metric(t, "s3cached_client_backend_fill_bytes_total", "AKIAONE", "127.0.0.1"),
        5000);
    assert_int_equal(
        prom_get(t, "s3cached_client_errors_total"
                    "{client=\"AKIAONE\",addr=\"127.0.0.1\",class=\"4xx\"}"),
        0);

    assert_int_equal(client_metric(t, "s3cached_client_requests_total", "AKIATWO", "10.0.0.2"), 5);
    assert_int_equal(client_metric(t, "s3cached_client_sent_bytes_total", "AKIATWO", "10.0.0.2"),
                     1000);
    assert_int_equal(
        client_metric(t, "s3cached_client_received_bytes_total", "AKIATWO", "10.0.0.2"), 0);
    assert_int_equal(client_metric(t, "s3cached_client_hits_total", "AKIATWO", "10.0.0.2"), 0);
    assert_int_equal(client_metric(t, "s3cached_client_misses_total", "AKIATWO", "10.0.0.2"), 1);
    assert_int_equal(client_metric(t, "s3cached_client_coalesced_total", "AKIATWO", "10.0.0.2"), 1);
    assert_int_equal(
        prom_get(t, "s3cached_client_errors_total"
                    "{client=\"AKIATWO\",addr=\"10.0.0.2\",class=\"4xx\"}"),
        1);
    assert_int_equal(
        prom_get(t, "s3cached_client_errors_total"
                    "{client=\"AKIATWO\",addr=\"10.0.0.2\",class=\"5xx\"}"),
        1);
    /* the idle "other" row is not shown */
    assert_false(prom_has(t, "s3cached_client_requests_total{client=\"other\",addr=\"-\"}"));

    /* buckets: bytes come from stats_request_done */
    assert_int_equal(prom_get(t, "s3cached_bucket_requests_total{bucket=\"photos\"}"), 5);
    assert_int_equal(prom_get(t, "s3cached_bucket_sent_bytes_total{bucket=\"photos\"}"), 3200);
    assert_int_equal(prom_get(t, "s3cached_bucket_requests_total{bucket=\"docs\"}"), 2);
    assert_int_equal(prom_get(t, "s3cached_bucket_received_bytes_total{bucket=\"docs\"}"), 2048);
    assert_int_equal(prom_get(t, "s3cached_bucket_sent_bytes_total{bucket=\"docs\"}"), 300);
    assert_int_equal(prom_get(t, "s3cached_bucket_hits_total{bucket=\"photos\"}"), 1);
    assert_int_equal(prom_get(t, "s3cached_bucket_misses_total{bucket=\"photos\"}"), 2);
    assert_int_equal(prom_get(t, "s3cached_bucket_errors_total{bucket=\"photos\",class=\"5xx\"}"),
                     1);
    assert_int_equal(prom_get(t, "s3cached_requests_total{op=\"get\"}"), 4);
    assert_int_equal(prom_get(t, "s3cached_requests_total{op=\"bucket\"}"), 1);
    assert_int_equal(prom_get(t, "s3cached_request_errors_total{class=\"4xx\"}"), 1);

    /* histograms: le is inclusive, 70 s lands in +Inf only */
    const char *h = "s3cached_request_duration_seconds";
    char series[256];
    snprintf(series, sizeof(series), "%s_bucket{op=\"get\",cache=\"hit\",le=\"0.001\"}", h);
    assert_int_equal(prom_get(t, series), 0);
    snprintf(series, sizeof(series), "%s_bucket{op=\"get\",cache=\"hit\",le=\"0.0025\"}", h);
    assert_int_equal(prom_get(t, series), 1);
    snprintf(series, sizeof(series), "%s_bucket{op=\"get\",cache=\"miss\",le=\"0.05\"}", h);
    assert_int_equal(prom_get(t, series), 1);
    snprintf(series, sizeof(series), "%s_bucket{op=\"get\",cache=\"miss\",le=\"60\"}", h);
    assert_int_equal(prom_get(t, series), 1);
    snprintf(series, sizeof(series), "%s_bucket{op=\"get\",cache=\"miss\",le=\"+Inf\"}", h);
    assert_int_equal(prom_get(t, series), 2);
    snprintf(series, sizeof(series), "%s_count{op=\"get\",cache=\"miss\"}", h);
    assert_int_equal(prom_get(t, series), 2);
    snprintf(series, sizeof(series), "%s_sum{op=\"get\",cache=\"miss\"}", h);
    assert_true(fabs(prom_get(t, series) - 70.04) < 1e-9);
    snprintf(series, sizeof(series), "%s_bucket{op=\"head\",cache=\"none\",le=\"0.001\"}", h);
    assert_int_equal(prom_get(t, series), 1);
    snprintf(series, sizeof(series), "%s_count{op=\"put\",cache=\"hit\"}", h);
    assert_false(prom_has(t, series)); /* empty series are not written */
    free(t);
    stats_free(s);
}

static const char *const py_json_check =
    "import json,sys\n"
    "d=json.load(sys.stdin)\n"
    "u=d[\"uptime_s\"]\n"
    "assert isinstance(u,(int,float)) and abs(u-12.5)<1e-6,u\n"
    "for k in (\"capacity_bytes\",\"used_bytes\",\"objects\",\"pinned_objects\","
    "\"hits\",\"misses\","
    "\"coalesced\",\"evictions\",\"dirty_objects\",\"dirty_bytes\"):\n"
    "  assert isinstance(d[\"cache\"][k],int),k\n"
    "assert d[\"cache\"][\"capacity_bytes\"]==1073741824 and d[\"cache\"][\"hits\"]==7\n"
    "assert d[\"cache\"][\"dirty_bytes\"]==99\n"
    "for k in (\"requests\",\"bytes_read\",\"bytes_written\",\"errors\"):\n"
    "  assert isinstance(d[\"backend\"][k],int),k\n"
    "assert d[\"backend\"][\"requests\"]==3 and d[\"backend\"][\"bytes_read\"]==5000\n"
    "f=d[\"fair\"]\n"
    "assert f=={\"capacity_bps\":125829120,\"level_bps\":62914560,\"rate_bps\":120000000,"
    "\"active_clients\":2,\"responses\":5,\"paced_responses\":4,\"saturated\":True},f\n"
    "c={(x[\"client\"],x[\"addr\"]):x for x in d[\"clients\"]}\n"
    "for x in d[\"clients\"]:\n"
    "  for k in (\"client\",\"addr\",\"requests\",\"bytes_out\",\"bytes_in\",\"hits\",\"misses\","
    "\"rate_out_bps\",\"rate_in_bps\"):\n"
    "    assert k in x,k\n"
    "a=c[(\"AKIAONE\",\"127.0.0.1\")]\n"
    "assert (a[\"requests\"],a[\"bytes_out\"],a[\"bytes_in\"],a[\"hits\"],a[\"misses\"])"
    "==(3,2500,2048,1,1),a\n"
    "assert a[\"backend_fill_bytes\"]==5000\n"
    "assert a[\"requests_by_op\"][\"get\"]==2 and a[\"requests_by_op\"][\"put\"]==1\n"
    "b=c[(\"AKIATWO\",\"10.0.0.2\")]\n"
    "assert (b[\"requests\"],b[\"bytes_out\"],b[\"coalesced\"],b[\"errors_4xx\"],"
    "b[\"errors_5xx\"])==(5,1000,1,1,1),b\n"
    "q=c[(\"we\\\"ird\\\\key\\nx\",\"::1\")]\n"
    "assert q[\"requests\"]==0 and q[\"in_flight\"]==1\n"
    "names=[x[\"client\"] for x in d[\"clients\"]]\n"
    "assert names==sorted(names),names\n"
    "bk={x[\"bucket\"]:x for x in d[\"buckets\"]}\n"
    "assert bk[\"photos\"][\"requests\"]==5 and bk[\"photos\"][\"bytes_out\"]==3200\n"
    "assert bk[\"docs\"][\"bytes_in\"]==2048\n"
    "assert d[\"requests\"]==8 and d[\"requests_by_op\"][\"get\"]==4\n";

static void test_stats_json_contract(void **state)
{
    UNUSED(state);
    struct stats *s = new_fake_stats();
    script_two_clients(s);
    /* a client whose key needs escaping, with a request still in flight */
    struct stats_client *q = stats_client_ref(s, "we\"ird\\key\nx", "::1");
    fake_advance(12500000000ull);
    struct cache_stats cs = {.capacity_bytes = 1ull << 30, .hits = 7, .dirty_bytes = 99};
    struct backend_counters bc = {.requests = 3, .bytes_read = 5000};
    struct fair_stats fs = {.capacity_bps = 120ull << 20, .level_bps = 60ull << 20,
                            .rate_bps = 120000000, .active_clients = 2, .responses = 5,
                            .paced_responses = 4, .saturated = 1};
    char *j = render_json_fs(s, &cs, &bc, &fs);
    int rc = run_python(py_json_check, j);
    if (rc == -1)
        skip();
    if (rc)
        fprintf(stderr, "--- json ---\n%s", j);
    assert_int_equal(rc, 0);
    free(j);
    stats_client_release(s, q);

    /* empty state is valid JSON too */
    struct stats *e = NULL;
    assert_int_equal(stats_new(&e), 0);
    j = render_json(e, NULL, NULL);
    assert_int_equal(run_python("import json,sys; d=json.load(sys.stdin); "
                                "assert d[\"clients\"]==[] and d[\"buckets\"]==[]; "
                                "f=d[\"fair\"]; assert f[\"capacity_bps\"]==0 and "
                                "f[\"level_bps\"]==0 and f[\"active_clients\"]==0 and "
                                "f[\"saturated\"] is False, f",
                                j),
                     0);
    free(j);
    stats_free(e);
    stats_free(s);
}

static void test_stats_json_buffer_cap(void **state)
{
    UNUSED(state);
    struct stats *s = new_fake_stats();
    script_two_clients(s);
    struct buf b;
    buf_init(&b, 64);
    assert_int_equal(stats_json(s, NULL, NULL, NULL, NULL, &b), -EMSGSIZE);
    buf_free(&b);
    buf_init(&b, 64);
    assert_int_equal(stats_prometheus(s, NULL, NULL, NULL, NULL, &b), -EMSGSIZE);
    buf_free(&b);
    stats_free(s);
}

/* "rate_out_bps" of (client, addr) from the JSON, by a plain search. */
static double json_rate(struct stats *s, const char *client, const char *field)
{
    char *j = render_json(s, NULL, NULL);
    char pat[256];
    snprintf(pat, sizeof(pat), "{\"client\": \"%s\"", client);
    char *p = strstr(j, pat);
    assert_non_null(p);
    snprintf(pat, sizeof(pat), "\"%s\": ", field);
    char *f = strstr(p, pat);
    assert_non_null(f);
    double v = strtod(f + strlen(pat), NULL);
    free(j);
    return v;
}

static void test_stats_rates_window(void **state)
{
    UNUSED(state);
    struct stats *s = new_fake_stats();
    struct stats_client *c = stats_client_ref(s, "RATE", "127.0.0.1");
    assert_true(json_rate(s, "RATE", "rate_out_bps") == 0); /* no tick yet */
    /* young: 3 s of 1000 B/s out, 10 B/s in -> over the available 3 s window */
    for (int i = 0; i < 3; i++) {
        fake_advance(SEC);
        stats_client_sent(c, 1000);
        stats_client_received(c, 10);
        stats_tick(s);
    }
    assert_true(json_rate(s, "RATE", "rate_out_bps") == 1000);
    assert_true(json_rate(s, "RATE", "rate_in_bps") == 10);
    /* steady for well over the window */
    for (int i = 0; i < 12; i++) {
        fake_advance(SEC);
        stats_client_sent(c, 1000);
        stats_client_received(c, 10);
        stats_tick(s);
    }
    assert_true(json_rate(s, "RATE", "rate_out_bps") == 1000);
    /* bytes sent after the last tick do not count until the next one */
    stats_client_sent(c, 50000);
    assert_true(json_rate(s, "RATE", "rate_out_bps") == 1000);
    /* a burst of 50000 then silence: 5000 B/s for 10 s, then 0 */
    fake_advance(SEC);
    stats_tick(s);
    assert_true(json_rate(s, "RATE", "rate_out_bps") == (9 * 1000 + 50000) / 10.0);
    for (int i = 0; i < 9; i++) {
        fake_advance(SEC);
        stats_tick(s);
    }
    assert_true(json_rate(s, "RATE", "rate_out_bps") == 5000);
    assert_true(json_rate(s, "RATE", "rate_in_bps") == 0);
    fake_advance(SEC);
    stats_tick(s);
    assert_true(json_rate(s, "RATE", "rate_out_bps") == 0);
    /* a tick that came late: the rate divides by the real elapsed time (2 s + 9 s) */
    stats_client_sent(c, 11000);
    fake_advance(2 * SEC);
    stats_tick(s);
    for (int i = 0; i < 9; i++) {
        fake_advance(SEC);
        stats_tick(s);
    }
    assert_true(json_rate(s, "RATE", "rate_out_bps") == 1000);
    stats_client_release(s, c);
    stats_free(s);
}

static void test_stats_aging_into_other(void **state)
{
    UNUSED(state);
    struct stats *s = new_fake_stats();
    stats_set_limits(s, 0, 5); /* idle 5 s */
    struct stats_client *a = stats_client_ref(s, "OLD", "10.0.0.1");
    stats_client_sent(a, 1000);
    stats_bucket_found(s, "b1");
    stats_request_done(s, a, "b1", STATS_OP_GET, 200, CACHE_HIT, 1000, 1000, 0);
    stats_client_release(s, a);
    struct stats_client *held = stats_client_ref(s, "HELD", "10.0.0.2"); /* in flight */
    stats_client_sent(held, 7);
    for (int i = 0; i < 5; i++) {
        fake_advance(SEC);
        stats_tick(s); /* 5 s idle is not yet "more than 5 s" */
    }
    char *t = render_prom(s, NULL, NULL);
    assert_int_equal(client_metric(t, "s3cached_client_sent_bytes_total", "OLD", "10.0.0.1"), 1000);
    free(t);
    fake_advance(SEC);
    stats_tick(s);
    t = render_prom(s, NULL, NULL);
    assert_prom_valid(t);
    assert_false(prom_has(t, "s3cached_client_sent_bytes_total{client=\"OLD\",addr=\"10.0.0.1\"}"));
    assert_int_equal(client_metric(t, "s3cached_client_sent_bytes_total", "other", "-"), 1000);
    assert_int_equal(client_metric(t, "s3cached_client_requests_total", "other", "-"), 1);
    assert_int_equal(client_metric(t, "s3cached_client_hits_total", "other", "-"), 1);
    /* still referenced: never aged, and still charged */
    assert_int_equal(client_metric(t, "s3cached_client_sent_bytes_total", "HELD", "10.0.0.2"), 7);
    assert_int_equal(client_metric(t, "s3cached_client_in_flight_requests", "HELD", "10.0.0.2"), 1);
    free(t);
    /* The fold kept "other"'s rate continuous: OLD's bytes are older than the window. */
    for (int i = 0; i < 10; i++) {
        fake_advance(SEC);
        stats_tick(s);
    }
    assert_true(json_rate(s, "other", "rate_out_bps") == 0);
    stats_client_sent(held, 10);
    stats_client_release(s, held);
    for (int i = 0; i < 6; i++) {
        fake_advance(SEC);
        stats_tick(s);
    }
    t = render_prom(s, NULL, NULL);
    assert_false(
        prom_has(t, "s3cached_client_sent_bytes_total{client=\"HELD\",addr=\"10.0.0.2\"}"));
    assert_int_equal(client_metric(t, "s3cached_client_sent_bytes_total", "other", "-"), 1017);
    free(t);
    /* a client that is folded while its bytes are inside the window keeps "other"'s rate */
    stats_set_limits(s, 0, 1);
    struct stats_client *r = stats_client_ref(s, "RECENT", "10.0.0.3");
    stats_client_sent(r, 3000);
    stats_client_release(s, r);
    fake_advance(SEC);
    stats_tick(s);
    double before = json_rate(s, "RECENT", "rate_out_bps");
    assert_true(before == 3000); /* young: 1 s window */
    fake_advance(2 * SEC);
    stats_tick(s); /* idle 2 s > 1 s: folded */
    double after = json_rate(s, "other", "rate_out_bps");
    /* RECENT's 3000 B and HELD's last 10 B are within other's last 10 ticks, which span
     * 11 s (the last one came 2 s late) */
    assert_true(after == 274); /* round(3010 / 11) */
    /* coming back creates a fresh row */
    r = stats_client_ref(s, "RECENT", "10.0.0.3");
    stats_client_release(s, r);
    t = render_prom(s, NULL, NULL);
    assert_int_equal(client_metric(t, "s3cached_client_sent_bytes_total", "RECENT", "10.0.0.3"), 0);
    assert_int_equal(client_metric(t, "s3cached_client_sent_bytes_total", "other", "-"), 4017);
    free(t);
    stats_free(s);
}

static void test_stats_client_cap(void **state)
{
    UNUSED(state);
    struct stats *s = new_fake_stats();
    stats_set_limits(s, 3, 10);
    struct stats_client *c[5];
    char key[16];
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof(key), "K%d", i);
        c[i] = stats_client_ref(s, key, "127.0.0.1");
        assert_non_null(c[i]);
        stats_client_sent(c[i], 100u << i);
    }
    assert_true(c[3] == c[4]); /* both overflow into "other" */
    struct stats_client *again = stats_client_ref(s, "K1", "127.0.0.1");
    assert_true(again == c[1]); /* existing rows are still found at the cap */
    stats_client_release(s, again);
    char *t = render_prom(s, NULL, NULL);
    assert_prom_valid(t);
    assert_int_equal(client_metric(t, "s3cached_client_sent_bytes_total", "K2", "127.0.0.1"), 400);
    assert_false(prom_has(t, "s3cached_client_sent_bytes_total{client=\"K3\",addr=\"127.0.0.1\"}"));
    assert_int_equal(client_metric(t, "s3cached_client_sent_bytes_total", "other", "-"),
                     800 + 1600);
    assert_int_equal(client_metric(t, "s3cached_client_in_flight_requests", "other", "-"), 2);
    free(t);
    for (int i = 0; i < 5; i++)
        stats_client_release(s, c[i]);
    /* ("other", "-") asked for by name is the overflow row, not a second one */
    struct stats_client *o = stats_client_ref(s, "other", NULL);
    assert_true(o == c[3]);
    stats_client_release(s, o);
    /* NULL key is "anonymous"; after aging the freed room is reused */
    for (int i = 0; i < 11; i++) {
        fake_advance(SEC);
        stats_tick(s);
    }
    struct stats_client *an = stats_client_ref(s, NULL, "192.0.2.1");
    assert_true(an != c[3]);
    stats_client_sent(an, 5);
    stats_client_release(s, an);
    t = render_prom(s, NULL, NULL);
    assert_int_equal(client_metric(t, "s3cached_client_sent_bytes_total", "anonymous", "192.0.2.1"),
                     5);
    assert_int_equal(client_metric(t, "s3cached_client_sent_bytes_total", "other", "-"),
                     100 + 200 + 400 + 800 + 1600);
    free(t);
    stats_free(s);
}

static void test_stats_bucket_cap(void **state)
{
    UNUSED(state);
    struct stats *s = new_fake_stats();
    char name[32];
    for (int i = 0; i < STATS_MAX_BUCKETS + 10; i++) {
        snprintf(name, sizeof(name), "bucket-%04d", i);
        stats_bucket_found(s, name);
        stats_request_done(s, NULL, name, STATS_OP_GET, 200, CACHE_HIT, 1000, 10, 0);
    }
    char *t = render_prom(s, NULL, NULL);
    assert_prom_valid(t);
    assert_int_equal(prom_get(t, "s3cached_bucket_requests_total{bucket=\"bucket-0000\"}"), 1);
    assert_int_equal(prom_get(t, "s3cached_bucket_requests_total{bucket=\"bucket-0255\"}"), 1);
    assert_false(prom_has(t, "s3cached_bucket_requests_total{bucket=\"bucket-0256\"}"));
    assert_int_equal(prom_get(t, "s3cached_bucket_requests_total{bucket=\"_other\"}"), 10);
    assert_int_equal(prom_get(t, "s3cached_bucket_sent_bytes_total{bucket=\"_other\"}"), 100);
    free(t);
    stats_free(s);
}

/* Only buckets known to exist get rows: requests naming any other bucket (made up by an
 * unauthenticated client, say) are charged to "_other" however many names they use, so a real
 * bucket found later still gets its row; a deleted bucket's row folds into "_other". */
static void test_stats_bucket_rows_only_when_found(void **state)
{
    UNUSED(state);
    struct stats *s = new_fake_stats();
    char name[32];
    for (int i = 0; i < STATS_MAX_BUCKETS + 4; i++) {
        snprintf(name, sizeof(name), "junk-%04d", i);
        stats_request_done(s, NULL, name, STATS_OP_GET, 403, -1, 1000, 0, 0);
    }
    stats_bucket_found(s, "real");
    stats_request_done(s, NULL, "real", STATS_OP_GET, 200, CACHE_HIT, 1000, 10, 0);
    stats_request_done(s, NULL, "real", STATS_OP_GET, 404, -1, 1000, 0, 0); /* NoSuchKey */
    char *t = render_prom(s, NULL, NULL);
    assert_prom_valid(t);
    assert_false(prom_has(t, "s3cached_bucket_requests_total{bucket=\"junk-0000\"}"));
    assert_int_equal(prom_get(t, "s3cached_bucket_requests_total{bucket=\"_other\"}"),
                     STATS_MAX_BUCKETS + 4);
    assert_int_equal(prom_get(t, "s3cached_bucket_requests_total{bucket=\"real\"}"), 2);
    assert_int_equal(prom_get(t, "s3cached_bucket_sent_bytes_total{bucket=\"real\"}"), 10);
    free(t);
    stats_bucket_forget(s, "real");
    stats_bucket_forget(s, "never-found"); /* nothing to fold */
    t = render_prom(s, NULL, NULL);
    assert_false(prom_has(t, "s3cached_bucket_requests_total{bucket=\"real\"}"));
    assert_int_equal(prom_get(t, "s3cached_bucket_requests_total{bucket=\"_other\"}"),
                     STATS_MAX_BUCKETS + 6);
    assert_int_equal(prom_get(t, "s3cached_bucket_sent_bytes_total{bucket=\"_other\"}"), 10);
    free(t);
    /* found again (re-created): a fresh row */
    stats_bucket_found(s, "real");
    stats_request_done(s, NULL, "real", STATS_OP_BUCKET, 200, -1, 1000, 0, 0);
    t = render_prom(s, NULL, NULL);
    assert_int_equal(prom_get(t, "s3cached_bucket_requests_total{bucket=\"real\"}"), 1);
    free(t);
    stats_free(s);
}

/* The eviction policy of each prefix: "policy" in the JSON, s3cached_prefix_* families in the
 * exposition, prefixes escaped in both. */
static void test_stats_policy(void **state)
{
    UNUSED(state);
    struct stats *s = new_fake_stats();
    struct cache_prefix_row rows[2];
    memset(rows, 0, sizeof(rows));
    snprintf(rows[0].bucket, sizeof(rows[0].bucket), "data");
    snprintf(rows[0].prefix, sizeof(rows[0].prefix), "train/");
    rows[0].policy = "keep";
    rows[0].source = "config";
    rows[0].keep_active = 1;
    rows[0].passes = 3;
    rows[0].ideal = 2.0 / 3.0;
    rows[0].last = (struct cache_pass){ 24, 16, 2400, 1600, 24, 2400 };
    rows[0].cur = (struct cache_pass){ 5, 4, 500, 400, 5, 500 };
    rows[0].read_bytes = 9000;
    rows[0].hit_bytes = 5000;
    snprintf(rows[1].bucket, sizeof(rows[1].bucket), "data");
    snprintf(rows[1].prefix, sizeof(rows[1].prefix), "we\"ird\\/");
    rows[1].policy = "lru";
    rows[1].source = "default";
    struct cache_policy_report pr = { 1, 900000, 1000, rows, 2 };
    struct buf b;
    buf_init(&b, OUT_MAX);
    assert_int_equal(stats_json(s, NULL, NULL, NULL, &pr, &b), 0);
    char *j = buf_take(&b);
    int rc = run_python("import json,sys; d=json.load(sys.stdin); p=d[\"policy\"]; "
                        "assert p[\"auto\"] is True and p[\"keep_idle_s\"]==900 and "
                        "p[\"available_bytes\"]==1000, p; r=p[\"prefixes\"][0]; "
                        "assert r[\"bucket\"]==\"data\" and r[\"prefix\"]==\"train/\" and "
                        "r[\"policy\"]==\"keep\" and r[\"source\"]==\"config\" and "
                        "r[\"keep_active\"] is True and r[\"passes\"]==3, r; "
                        "l=r[\"last_pass\"]; assert l[\"hits\"]==16 and "
                        "abs(l[\"hit_ratio\"]-2/3)<1e-3 and l[\"working_set_bytes\"]==2400, l; "
                        "assert abs(r[\"ideal_hit_ratio\"]-2/3)<1e-3; "
                        "assert r[\"current_pass\"][\"reads\"]==5; "
                        "assert p[\"prefixes\"][1][\"prefix\"]==\"we\\\"ird\\\\/\"",
                        j);
    if (rc == -1)
        skip();
    if (rc)
        fprintf(stderr, "--- json ---\n%s", j);
    assert_int_equal(rc, 0);
    free(j);
    buf_init(&b, OUT_MAX);
    assert_int_equal(stats_prometheus(s, NULL, NULL, NULL, &pr, &b), 0);
    char *t = buf_take(&b);
    assert_prom_valid(t);
    assert_int_equal(prom_get(t, "s3cached_prefix_policy_info{bucket=\"data\",prefix=\"train/\","
                                 "policy=\"keep\",source=\"config\"}"),
                     1);
    assert_int_equal(prom_get(t, "s3cached_prefix_keep_active{bucket=\"data\",prefix=\"train/\"}"),
                     1);
    double hr = prom_get(t, "s3cached_prefix_last_pass_hit_ratio{bucket=\"data\",prefix=\"train/\"}");
    assert_true(hr > 0.666 && hr < 0.667);
    assert_int_equal(prom_get(t, "s3cached_prefix_passes_total{bucket=\"data\",prefix=\"train/\"}"),
                     3);
    assert_int_equal(
        prom_get(t, "s3cached_prefix_working_set_bytes{bucket=\"data\",prefix=\"train/\"}"), 2400);
    assert_int_equal(
        prom_get(t, "s3cached_prefix_hit_bytes_total{bucket=\"data\",prefix=\"train/\"}"), 5000);
    assert_true(prom_has(t, "s3cached_prefix_policy_info{bucket=\"data\",prefix=\"we\\\"ird\\\\/\","
                            "policy=\"lru\",source=\"default\"}"));
    free(t);
    stats_free(s);
}

static void test_stats_prometheus_format(void **state)
{
    UNUSED(state);
    struct stats *s = new_fake_stats();
    script_two_clients(s);
    struct stats_client *q = stats_client_ref(s, "we\"ird\\key\nx", "fe80::1%eth0");
    stats_client_sent(q, 3);
    stats_bucket_found(s, "b");
    stats_request_done(s, q, "b", STATS_OP_ADMIN, 200, -1, 100, 0, 0);
    stats_client_release(s, q);
    fake_advance(3 * SEC);
    struct cache_stats cs = {.capacity_bytes = 10ull << 30, .used_bytes = 12345, .objects = 3,
                             .hits = 11, .misses = 4, .coalesced = 2, .evictions = 1,
                             .dirty_bytes = 77};
    struct backend_counters bc = {.requests = 9, .bytes_read = 1 << 20, .bytes_written = 2048,
                                  .errors = 1};
    struct fair_stats fs = {.capacity_bps = 120ull << 20, .level_bps = 40ull << 20,
                            .rate_bps = 119000000, .active_clients = 3, .responses = 7,
                            .paced_responses = 6, .saturated = 1};
    char *t = render_prom_fs(s, &cs, &bc, &fs);
    assert_prom_valid(t);
    /* label escaping: backslash, double quote, newline */
    assert_int_equal(
        client_metric(t, "s3cached_client_sent_bytes_total", "we\\\"ird\\\\key\\nx",
                      "fe80::1%eth0"),
        3);
    assert_int_equal(prom_get(t, "s3cached_uptime_seconds"), 3);
    assert_int_equal(prom_get(t, "s3cached_cache_capacity_bytes"), 10ull << 30);
    assert_int_equal(prom_get(t, "s3cached_cache_used_bytes"), 12345);
    assert_int_equal(prom_get(t, "s3cached_cache_objects"), 3);
    assert_int_equal(prom_get(t, "s3cached_cache_hits_total"), 11);
    assert_int_equal(prom_get(t, "s3cached_cache_misses_total"), 4);
    assert_int_equal(prom_get(t, "s3cached_cache_coalesced_total"), 2);
    assert_int_equal(prom_get(t, "s3cached_cache_evictions_total"), 1);
    assert_int_equal(prom_get(t, "s3cached_cache_dirty_bytes"), 77);
    assert_int_equal(prom_get(t, "s3cached_backend_requests_total"), 9);
    assert_int_equal(prom_get(t, "s3cached_backend_read_bytes_total"), 1 << 20);
    assert_int_equal(prom_get(t, "s3cached_backend_written_bytes_total"), 2048);
    assert_int_equal(prom_get(t, "s3cached_backend_errors_total"), 1);
    assert_int_equal(prom_get(t, "s3cached_fair_capacity_bytes_per_second"), 120ull << 20);
    assert_int_equal(prom_get(t, "s3cached_fair_share_bytes_per_second"), 40ull << 20);
    assert_int_equal(prom_get(t, "s3cached_fair_rate_bytes_per_second"), 119000000);
    assert_int_equal(prom_get(t, "s3cached_fair_active_clients"), 3);
    assert_int_equal(prom_get(t, "s3cached_fair_responses"), 7);
    assert_int_equal(prom_get(t, "s3cached_fair_paced_responses"), 6);
    assert_int_equal(prom_get(t, "s3cached_fair_saturated"), 1);
    assert_non_null(strstr(t, "# TYPE s3cached_fair_saturated gauge\n"));
    assert_non_null(strstr(t, "# TYPE s3cached_fair_share_bytes_per_second gauge\n"));
    assert_non_null(strstr(t, "# TYPE s3cached_request_duration_seconds histogram\n"));
    assert_non_null(strstr(t, "# TYPE s3cached_cache_hits_total counter\n"));
    assert_non_null(strstr(t, "# TYPE s3cached_cache_used_bytes gauge\n"));

    /* the parser itself rejects what it should */
    static const char *const bad[] = {
        "x_total 1\n",                                                        /* no TYPE */
        "# TYPE x_total counter\nx_total{a=\"b\\t\"} 1\n",                    /* bad escape */
        "# TYPE x_total counter\nx_total 1\n# TYPE y gauge\ny 1\nx_total 2\n", /* split family */
        "# TYPE x_total counter\nx_total{a=\"1\",a=\"2\"} 1\n",               /* dup label */
        "# TYPE x_total counter\nx_total 1\nx_total 2\n",                     /* dup series */
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n", /* count != inf */
        "# TYPE x gauge\nx 1",                                                /* no newline */
        "# TYPE x gauge\nx 1 123\n",                                          /* timestamp */
        "# TYPE x gauge\nx{a=\"1\",} 1\n",                                    /* trailing comma */
    };
    char err[512];
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        if (!prom_validate(bad[i], err, sizeof(err))) {
            fprintf(stderr, "accepted bad input %zu: %s\n", i, bad[i]);
            fail();
        }
    }
    static const char *const good = "# HELP x a\n# TYPE x gauge\nx{a=\"q\\\"\\\\\\n\"} -1.5e3\n";
    assert_int_equal(prom_validate(good, err, sizeof(err)), 0);

    /* promtool, when installed (apt-get install prometheus), lints the same text */
    if (!access("/usr/bin/promtool", X_OK)) {
        char path[] = "/tmp/test_stats_prom_XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        size_t len = strlen(t);
        assert_int_equal(write(fd, t, len), (ssize_t)len);
        close(fd);
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "/usr/bin/promtool check metrics < %s", path);
        int st = system(cmd);
        unlink(path);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    free(t);
    stats_free(s);
}

/* --- concurrency ----------------------------------------------------------------------- */

#define HAMMER_THREADS 4
#define HAMMER_ITERS 500000

struct hammer {
    struct stats *s;
    int id;
    uint64_t sent;
};

static void *hammer_main(void *arg)
{
    struct hammer *h = arg;
    /* two threads per client row: contention on one row, and two rows */
    struct stats_client *c = stats_client_ref(h->s, h->id & 1 ? "ODD" : "EVEN", "127.0.0.1");
    for (uint64_t i = 0; i < HAMMER_ITERS; i++) {
        uint64_t n = (i % 7) + 1;
        stats_client_sent(c, n);
        stats_client_received(c, 1);
        h->sent += n;
        if (i % 1000 == 0) {
            stats_bucket_found(h->s, "hammer");
            stats_request_done(h->s, c, "hammer", STATS_OP_GET, 200, CACHE_HIT, i, 0, 0);
        }
    }
    stats_client_release(h->s, c);
    return NULL;
}

static void test_stats_concurrent_sent(void **state)
{
    UNUSED(state);
    struct stats *s = NULL;
    assert_int_equal(stats_new(&s), 0);
    assert_int_equal(stats_start_ticker(s), 0);
    assert_int_equal(stats_start_ticker(s), 0); /* idempotent */
    pthread_t th[HAMMER_THREADS];
    struct hammer h[HAMMER_THREADS];
    for (int i = 0; i < HAMMER_THREADS; i++) {
        h[i] = (struct hammer){.s = s, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, hammer_main, &h[i]), 0);
    }
    for (int i = 0; i < 200; i++) {
        stats_tick(s);
        char *j = render_json(s, NULL, NULL);
        free(j);
        usleep(100);
    }
    uint64_t want[2] = {0, 0};
    for (int i = 0; i < HAMMER_THREADS; i++) {
        pthread_join(th[i], NULL);
        want[i & 1] += h[i].sent;
    }
    char *t = render_prom(s, NULL, NULL);
    assert_prom_valid(t);
    assert_int_equal(client_metric(t, "s3cached_client_sent_bytes_total", "EVEN", "127.0.0.1"),
                     want[0]);
    assert_int_equal(client_metric(t, "s3cached_client_sent_bytes_total", "ODD", "127.0.0.1"),
                     want[1]);
    assert_int_equal(client_metric(t, "s3cached_client_received_bytes_total", "ODD", "127.0.0.1"),
                     2 * HAMMER_ITERS);
    assert_int_equal(client_metric(t, "s3cached_client_requests_total", "EVEN", "127.0.0.1"),
                     2 * (HAMMER_ITERS / 1000));
    free(t);
    stats_free(s); /* stops the ticker */
}

/* Requests come and go on many keys while ticks age rows out under a moving clock: no byte
 * is lost or counted twice, whether it ends up in its own row or in "other". */
struct churn {
    struct stats *s;
    int id;
    uint64_t sent;
};

static void *churn_main(void *arg)
{
    struct churn *ch = arg;
    char key[32];
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof(key), "C%d-%d", ch->id, i % 97);
        struct stats_client *c = stats_client_ref(ch->s, key, "10.1.1.1");
        stats_client_sent(c, 3);
        stats_client_sent(c, 4);
        ch->sent += 7;
        stats_request_done(ch->s, c, NULL, STATS_OP_GET, 200, CACHE_MISS, 1, 7, 0);
        stats_client_release(ch->s, c);
    }
    return NULL;
}

static void test_stats_concurrent_aging(void **state)
{
    UNUSED(state);
    struct stats *s = new_fake_stats();
    stats_set_limits(s, 150, 1);
    pthread_t th[HAMMER_THREADS];
    struct churn ch[HAMMER_THREADS];
    for (int i = 0; i < HAMMER_THREADS; i++) {
        ch[i] = (struct churn){.s = s, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, churn_main, &ch[i]), 0);
    }
    for (int i = 0; i < 300; i++) {
        fake_advance(SEC / 2);
        stats_tick(s);
        usleep(200);
    }
    uint64_t want = 0;
    for (int i = 0; i < HAMMER_THREADS; i++) {
        pthread_join(th[i], NULL);
        want += ch[i].sent;
    }
    char *t = render_prom(s, NULL, NULL);
    assert_prom_valid(t);
    /* sum every client row */
    uint64_t got = 0, reqs = 0;
    const char *m = "s3cached_client_sent_bytes_total{";
    const char *r = "s3cached_client_requests_total{";
    for (const char *p = t; p && *p;) {
        if (!strncmp(p, m, strlen(m)))
            got += strtoull(strchr(p, ' ') + 1, NULL, 10);
        if (!strncmp(p, r, strlen(r)))
            reqs += strtoull(strchr(p, ' ') + 1, NULL, 10);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    assert_int_equal(got, want);
    assert_int_equal(reqs, HAMMER_THREADS * 20000);
    free(t);
    stats_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_op_names),
        cmocka_unit_test(test_stats_counters_two_clients),
        cmocka_unit_test(test_stats_json_contract),
        cmocka_unit_test(test_stats_json_buffer_cap),
        cmocka_unit_test(test_stats_rates_window),
        cmocka_unit_test(test_stats_aging_into_other),
        cmocka_unit_test(test_stats_client_cap),
        cmocka_unit_test(test_stats_bucket_cap),
        cmocka_unit_test(test_stats_bucket_rows_only_when_found),
        cmocka_unit_test(test_stats_prometheus_format),
        cmocka_unit_test(test_stats_policy),
        cmocka_unit_test(test_stats_concurrent_sent),
        cmocka_unit_test(test_stats_concurrent_aging),
    };
    return cmocka_run_group_tests_name("stats", tests, NULL, NULL);
}
