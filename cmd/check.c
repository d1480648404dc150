/*
 * check.c: `s3cached check`, a capacity check before a training run: reads a data set (or a
 * sample) through the gateway with parallel streams, as its own job (x-s3cached-job), and
 * reports what was delivered against N GPUs x a rate, how many GPUs of that kind the gateway
 * can feed (at least, when this check's own readers were the bound: then it prints a wrk
 * command that measures further), and what bounded the run, from the gateway's counters (its
 * stall causes for the check's own job, backend bytes, process CPU, cache disk; /_/stats, an
 * admin call), the answers' x-cache (hits) and the machine's (/proc/stat, the check's own
 * CPU). The read phase is check_read.c: readers on threads, for a duration. With
 * --checkpoint it then writes a checkpoint from parallel multipart writers, times its
 * acknowledgement and its arrival on the backend (POST /_/flush), and deletes it.
 * The HTTP side is check_io.c.
 */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "lib/conf.h"
#include "lib/json.h"
#include "lib/s3c.h"

#define CHECK_RANGE_MAX (64ull << 20) /* larger objects are read in ranges of this */
#define CHECK_PART_IN_FLIGHT 4        /* parts in flight per writer */
#define CHECK_STALLED 0.2             /* as the gateway's verdict (acct/stall.h) */
#define CHECK_CPU_BUSY 0.85
#define CHECK_MACHINE_BUSY 0.9
#define CHECK_DISK_BUSY 0.85
#define CHECK_READER_BUSY 0.85        /* of the readers' threads: the readers are the bound */
#define CHECK_WARMUP_SHARE 0.1        /* of the duration: the start-up, left out */
#define CHECK_WARMUP_MAX_S 5.0
#define CHECK_PRESIGN_S 3600          /* the printed wrk command's URL lives an hour */
#define CHECK_PLURAL(n) ((n) == 1 ? "" : "s")

struct check_opts {
    struct check_http http;
    const char *target, *job;
    char *bucket, *prefix;
    unsigned gpus, streams, writers, readers, cores;
    uint64_t per_gpu_bps, sample, ckpt_bytes, part_size;
    double params;
    int64_t duration_ms;
    int json;
};

/* What /_/stats said at one moment (the parts the check reads). */
struct gw_snap {
    int ok;
    double cpu_s, disk_busy_s, disk_read, backend_read;
    unsigned cores;
    /* the check's job */
    int job_found;
    double xfer_s, stall_s[4], hit_bytes, bytes, need;
    char state[16], cause[16], main_cause[16];
};

static const char *const check_causes[4] = {"backend", "fill", "rate_limit", "queue"};

static void gw_snapshot(const struct check_opts *o, struct gw_snap *g)
{
    struct buf b;
    struct json *st = NULL;
    struct errmsg em = {{0}};
    memset(g, 0, sizeof(*g));
    buf_init(&b, 64u << 20);
    long status = check_http_call(&o->http, "GET", "/_/stats", NULL, 1, &b);
    if (status != 200 || json_parse(b.p, b.len, &st, &em)) {
        buf_free(&b);
        return;
    }
    const struct json *p = json_get(st, "process"), *jobs = json_get(st, "jobs");
    g->ok = p != NULL;
    g->cpu_s = json_get_num(p, "cpu_user_s", 0) + json_get_num(p, "cpu_system_s", 0);
    g->cores = (unsigned)json_get_num(p, "cores", 1);
    g->disk_busy_s = json_get_num(p, "cache_disk_busy_s", -1);
    g->disk_read = json_get_num(p, "disk_read_bytes", -1);
    g->backend_read = json_get_num(json_get(st, "backend"), "bytes_read", 0);
    for (size_t i = 0; jobs && jobs->type == JSON_ARR && i < jobs->n; i++) {
        const struct json *j = &jobs->items[i];
        const char *name = json_get_str(j, "job");
        if (!name || strcmp(name, o->job))
            continue;
        const struct json *by = json_get(j, "stall_by_cause_s");
        g->job_found = 1;
        g->xfer_s = json_get_num(j, "transfer_s", 0);
        for (int c = 0; c < 4; c++)
            g->stall_s[c] = json_get_num(by, check_causes[c], 0);
        g->hit_bytes = json_get_num(j, "hit_bytes", 0);
        g->bytes = json_get_num(j, "delivered_bytes", 0);
        g->need = json_get_num(j, "need_bps", 0);
        snprintf(g->state, sizeof(g->state), "%s", json_get_str(j, "state") ?: "");
        snprintf(g->cause, sizeof(g->cause), "%s", json_get_str(j, "cause") ?: "");
        snprintf(g->main_cause, sizeof(g->main_cause), "%s",
                 json_get_str(j, "main_cause_10s") ?: "");
    }
    json_free(st);
    buf_free(&b);
}

/* The machine's CPU ticks, busy and total (/proc/stat); 0 0 when unreadable. */
static void machine_ticks(double *busy, double *total)
{
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "re");
    *busy = *total = 0;
    if (!f)
        return;
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7]) == 8) {
        for (int i = 0; i < 8; i++)
            *total += (double)v[i];
        *busy = *total - (double)v[3] - (double)v[4]; /* less idle and iowait */
    }
    fclose(f);
}

static double own_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru))
        return 0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* The cores this process may run on (its affinity: a container's share), else the online. */
static unsigned check_cores(void)
{
    cpu_set_t set;
    long n = 0;
    if (!sched_getaffinity(0, sizeof(set), &set))
        n = CPU_COUNT(&set);
    if (n <= 0)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

static int endpoint_is_local(const char *ep)
{
    const char *h = strstr(ep, "://");
    h = h ? h + 3 : ep;
    return !strncmp(h, "127.", 4) || !strncmp(h, "localhost", 9) || !strncmp(h, "[::1]", 5);
}

/* "2.61 GiB/s (2.80 GB/s)" */
static void fmt_rate(double bps, char *out, size_t cap)
{
    static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = bps;
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        i++;
    }
    snprintf(out, cap, "%.2f %s/s (%.2f GB/s)", v, u[i], bps / 1e9);
}

static void fmt_bytes(double b, char *out, size_t cap)
{
    static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int i = 0;
    while (b >= 1024 && i < 5) {
        b /= 1024;
        i++;
    }
    snprintf(out, cap, i ? "%.1f %s" : "%.0f %s", b, u[i]);
}

/* --- the analysis ---------------------------------------------------------------------- */

struct check_result {
    size_t listed, sampled;
    double listed_bytes, sampled_bytes;
    struct check_read_res rd;
    double need_bps, delivered_bps, gpus_fed, passes;
    int local;
    double machine_busy;   /* share of the machine's CPU time busy, -1 unknown */
    double reader_cores;   /* this process */
    /* at each CHECK_MARK_*: the gateway's counters, the machine's ticks, this process's CPU */
    struct gw_snap at_g[3];
    double at_busy[3], at_total[3], at_cpu[3];
    struct gw_snap g0, g1; /* the measured window's ends */
    int lower_bound;       /* this check's readers were the bound: "at least" */
    char measure[8192];    /* a wrk command that measures further, or "" */
    double gw_cores, disk_busy, backend_bps, stall_share, hit_share;
    int main_cause;        /* index into check_causes, -1 */
    const char *bound;
    char bound_detail[512];
    int ckpt;
    struct check_write_res wr;
    double flush_s;        /* -1: unknown */
    int write_ok, removed;
};

/* Names what bounded the read: the gateway's waits first, then its CPU, the machine's, the
 * cache disk; else the reader or the network. */
static void check_bound(const struct check_opts *o, struct check_result *r)
{
    double secs = r->rd.window_s > 0 ? r->rd.window_s : 1e-9;
    struct gw_snap *a = &r->g0, *b = &r->g1;
    int gw = a->ok && b->ok;
    r->main_cause = -1;
    if (gw) {
        double stall = 0, best = 0;
        for (int c = 0; c < 4; c++) {
            double d = b->stall_s[c] - a->stall_s[c];
            stall += d;
            if (d > best) {
                best = d;
                r->main_cause = c;
            }
        }
        double xfer = b->xfer_s - a->xfer_s;
        r->stall_share = xfer > 0 ? stall / xfer : 0;
        /* per byte as the answers said (x-cache): the gateway books a GET's hit bytes at its
         * end, so a window that cuts GETs does not see them as it sees the bytes */
        if (r->rd.xcache)
            r->hit_share = r->rd.window_bytes
                               ? (double)r->rd.window_hit_bytes / (double)r->rd.window_bytes : 0;
        else
            r->hit_share = b->bytes > a->bytes
                               ? (b->hit_bytes - a->hit_bytes) / (b->bytes - a->bytes) : 0;
        r->gw_cores = (b->cpu_s - a->cpu_s) / secs;
        r->disk_busy = a->disk_busy_s >= 0 && b->disk_busy_s >= 0
                           ? (b->disk_busy_s - a->disk_busy_s) / secs : -1;
        r->backend_bps = (b->backend_read - a->backend_read) / secs;
    }
    char be[64];
    fmt_rate(r->backend_bps, be, sizeof(be));
    if (gw && r->stall_share >= CHECK_STALLED && r->main_cause >= 0) {
        int c = r->main_cause;
        r->bound = c <= 1 ? "backend" : c == 2 ? "rate_limit" : "gateway_workers";
        snprintf(r->bound_detail, sizeof(r->bound_detail),
                 c <= 1 ? "the reads waited on the backend %.0f %% of their time; it "
                          "delivered %s"
                 : c == 2 ? "the reads were held back by a rate limit or the fair share %.0f "
                            "%% of their time (%s from the backend)"
                          : "the reads waited for the gateway's worker threads %.0f %% of "
                            "their time (%s from the backend)",
                 100 * r->stall_share, be);
    } else if (gw && r->gw_cores >= CHECK_CPU_BUSY * b->cores) {
        r->bound = "gateway_cpu";
        snprintf(r->bound_detail, sizeof(r->bound_detail),
                 "the gateway kept %.2f of the machine's %u cores busy", r->gw_cores,
                 b->cores);
    } else if (r->local && r->machine_busy >= CHECK_MACHINE_BUSY) {
        char n[32] = "?", others[64] = "";
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        if (gw) {
            double rest = r->machine_busy * (double)(cores > 0 ? cores : 1) - r->gw_cores -
                          r->reader_cores;
            snprintf(n, sizeof(n), "%.2f", r->gw_cores);
            if (rest > 0.05)
                snprintf(others, sizeof(others), ", other processes %.2f", rest);
        }
        r->bound = "cpu";
        snprintf(r->bound_detail, sizeof(r->bound_detail),
                 "this machine's %ld CPUs were %.0f %% busy: the gateway took %s cores, this "
                 "check's %u reader%s %.2f%s (they share the machine)", cores,
                 100 * r->machine_busy, n, r->rd.readers, CHECK_PLURAL(r->rd.readers),
                 r->reader_cores, others);
    } else if (gw && r->disk_busy >= CHECK_DISK_BUSY) {
        r->bound = "cache_disk";
        snprintf(r->bound_detail, sizeof(r->bound_detail),
                 "the cache disk was busy %.0f %% of the time", 100 * r->disk_busy);
    } else if (r->reader_cores >= CHECK_READER_BUSY * r->rd.readers) {
        r->bound = "reader";
        snprintf(r->bound_detail, sizeof(r->bound_detail),
                 "this check's %u reader%s kept %.2f cores busy, all they had: the gateway may "
                 "deliver more than they took (%s)", r->rd.readers, CHECK_PLURAL(r->rd.readers),
                 r->reader_cores,
                 o->readers < o->cores ? "try more --readers" : "try readers on more machines");
    } else if (r->local) {
        r->bound = "reader";
        snprintf(r->bound_detail, sizeof(r->bound_detail),
                 "the gateway waited on nothing and had CPU to spare, and so had this machine: "
                 "this check's %u reader%s (%.2f cores) are the limit (try more --streams)",
                 r->rd.readers, CHECK_PLURAL(r->rd.readers), r->reader_cores);
    } else {
        r->bound = "network";
        snprintf(r->bound_detail, sizeof(r->bound_detail),
                 "the gateway waited on nothing and had CPU to spare: the network or this "
                 "check's readers are the limit");
    }
    if (!gw)
        snprintf(r->bound_detail + strlen(r->bound_detail),
                 sizeof(r->bound_detail) - strlen(r->bound_detail),
                 " (the gateway's own counters were not available: /_/stats needs an admin key "
                 "or --admin-token)");
}

/* --- output ---------------------------------------------------------------------------- */

static void print_table(const struct check_opts *o, const struct check_result *r)
{
    char a[64], b[64], c[64], d[64];
    fmt_bytes(r->listed_bytes, a, sizeof(a));
    fmt_bytes((double)r->rd.bytes, b, sizeof(b));
    printf("s3cached check  %s  %s\n\n", o->http.endpoint, o->target);
    char times[96];
    if (r->rd.cold && !r->rd.cut)
        snprintf(times, sizeof(times), "once (cold: the first pass was not all cache hits)");
    else if (r->passes > 0.995 && r->passes < 1.005)
        snprintf(times, sizeof(times), "once");
    else
        snprintf(times, sizeof(times), "%.2f times", r->passes);
    printf("  data set     %zu objects, %s; read %zu%s objects %s, %s in %.2f s with %u stream%s "
           "on %u reader%s%s\n",
           r->listed, a, r->sampled, r->sampled < r->listed ? " sampled" : "", times, b,
           r->rd.seconds, o->streams, CHECK_PLURAL(o->streams), r->rd.readers,
           CHECK_PLURAL(r->rd.readers), r->rd.errors ? " (with errors)" : "");
    fmt_rate((double)o->per_gpu_bps, a, sizeof(a));
    fmt_rate(r->need_bps, b, sizeof(b));
    printf("  needed       %u GPUs x %s = %s\n", o->gpus, a, b);
    fmt_rate(r->delivered_bps, c, sizeof(c));
    printf("  delivered    %s: %.1f %% of the need", c,
           r->need_bps > 0 ? 100 * r->delivered_bps / r->need_bps : 0);
    if (r->rd.window == CHECK_MARK_WARM)
        printf(" (steady: over %.2f s after %.2f s of start-up)\n", r->rd.window_s,
               r->rd.seconds - r->rd.window_s);
    else
        printf(" (over the whole read)\n");
    printf("  can feed     %s%.0f GPUs at %s each (%.2f GPUs' worth%s)\n",
           r->lower_bound ? "at least " : "", floor(r->gpus_fed), a, r->gpus_fed,
           r->lower_bound ? "; this check's own readers were the bound" : "");
    printf("  bound        %s: %s\n", r->bound, r->bound_detail);
    if (r->measure[0])
        printf("  measure      further with a reader of its own (one object, pre-signed for "
               "%d s):\n               %s\n", CHECK_PRESIGN_S, r->measure);
    if (r->g0.ok && r->g1.ok) {
        fmt_rate(r->backend_bps, d, sizeof(d));
        printf("  gateway      hits %.1f %% of bytes; stall %.1f %% of GET time (", 100 * r->hit_share,
               100 * r->stall_share);
        for (int k = 0; k < 4; k++)
            printf("%s%s %.3f s", k ? ", " : "", check_causes[k],
                   r->g1.stall_s[k] - r->g0.stall_s[k]);
        printf("); backend read %s; CPU %.2f of %u cores", d, r->gw_cores, r->g1.cores);
        if (r->disk_busy >= 0)
            printf("; cache disk busy %.0f %%", 100 * r->disk_busy);
        printf("\n");
        if (r->g1.job_found)
            printf("  verdict      %s%s%s (the gateway's, on this check's job over its last "
                   "10 s)\n", r->g1.state, r->g1.cause[0] ? ", cause " : "", r->g1.cause);
    }
    if (r->machine_busy >= 0) /* the cores it used, wherever the gateway is */
        printf("  machine      %sCPUs %.0f %% busy; this check's %u reader%s %.2f of %u cores\n",
               r->local ? "" : "(not the gateway's) ", 100 * r->machine_busy, r->rd.readers,
               CHECK_PLURAL(r->rd.readers), r->reader_cores, o->cores);
    if (r->rd.errors)
        printf("  errors       %llu GETs failed; first: %s\n", (unsigned long long)r->rd.errors,
               r->rd.first_error);
    if (r->ckpt) {
        fmt_bytes((double)o->ckpt_bytes, a, sizeof(a));
        fmt_bytes((double)o->part_size, b, sizeof(b));
        printf("  checkpoint   %s by %u writers (multipart, %s parts, %d in flight each)",
               a, o->writers, b, CHECK_PART_IN_FLIGHT);
        if (!r->write_ok) {
            printf(": FAILED: %s\n", r->wr.first_error);
        } else {
            fmt_rate((double)r->wr.bytes / (r->wr.ack_s > 0 ? r->wr.ack_s : 1e-9), c, sizeof(c));
            printf(": acknowledged after %.2f s (%s; first writer %.2f s)", r->wr.ack_s, c,
                   r->wr.writer_min_s);
            if (r->flush_s >= 0)
                printf(", on the backend after %.2f s", r->wr.ack_s + r->flush_s);
            else
                printf(", on the backend: unknown (POST /_/flush needs an admin key)");
            printf("; %s\n", r->removed ? "removed" : "NOT all removed");
        }
    }
}

static void print_json(const struct check_opts *o, const struct check_result *r)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    buf_puts(&b, "{\"endpoint\": ");
    buf_json_str(&b, o->http.endpoint);
    buf_puts(&b, ", \"bucket\": ");
    buf_json_str(&b, o->bucket);
    buf_puts(&b, ", \"prefix\": ");
    buf_json_str(&b, o->prefix);
    buf_puts(&b, ", \"job\": ");
    buf_json_str(&b, o->job);
    buf_printf(&b,
               ", \"objects_listed\": %zu, \"bytes_listed\": %.0f, \"objects_read\": %zu, "
               "\"bytes_read\": %llu, \"gets\": %llu, \"errors\": %llu, \"seconds\": %.3f, "
               "\"streams\": %u, \"gpus\": %u, \"per_gpu_bps\": %llu, \"need_bps\": %.0f, "
               "\"delivered_bps\": %.0f, \"gpus_fed\": %.3f, \"lower_bound\": %s, "
               "\"readers\": %u, \"reader_cores\": %.3f, \"passes\": %.3f, \"cold\": %s, "
               "\"window_s\": %.3f, \"startup_s\": %.3f, \"bound\": \"%s\", "
               "\"bound_detail\": ",
               r->listed, r->listed_bytes, r->sampled, (unsigned long long)r->rd.bytes,
               (unsigned long long)r->rd.gets, (unsigned long long)r->rd.errors, r->rd.seconds,
               o->streams, o->gpus, (unsigned long long)o->per_gpu_bps, r->need_bps,
               r->delivered_bps, r->gpus_fed, r->lower_bound ? "true" : "false", r->rd.readers,
               r->reader_cores, r->passes, r->rd.cold && !r->rd.cut ? "true" : "false",
               r->rd.window_s,
               r->rd.window == CHECK_MARK_WARM ? r->rd.seconds - r->rd.window_s : 0.0, r->bound);
    buf_json_str(&b, r->bound_detail);
    buf_puts(&b, ", \"measure_command\": ");
    if (r->measure[0])
        buf_json_str(&b, r->measure);
    else
        buf_puts(&b, "null");
    if (r->g0.ok && r->g1.ok) {
        buf_printf(&b,
                   ", \"gateway\": {\"hit_share\": %.4f, \"stall_share\": %.4f, "
                   "\"stall_by_cause_s\": {",
                   r->hit_share, r->stall_share);
        for (int k = 0; k < 4; k++)
            buf_printf(&b, "%s\"%s\": %.6f", k ? ", " : "", check_causes[k],
                       r->g1.stall_s[k] - r->g0.stall_s[k]);
        buf_printf(&b,
                   "}, \"backend_bps\": %.0f, \"cpu_cores_busy\": %.3f, \"cores\": %u, "
                   "\"cache_disk_busy\": %.3f, \"state\": \"%s\", \"cause\": ",
                   r->backend_bps, r->gw_cores, r->g1.cores, r->disk_busy, r->g1.state);
        if (r->g1.cause[0])
            buf_printf(&b, "\"%s\"}", r->g1.cause);
        else
            buf_puts(&b, "null}");
    } else {
        buf_puts(&b, ", \"gateway\": null");
    }
    buf_printf(&b,
               ", \"machine\": {\"local\": %s, \"cpu_busy\": %.3f, \"reader_cores\": %.3f, "
               "\"cores\": %u}",
               r->local ? "true" : "false", r->machine_busy, r->reader_cores, o->cores);
    if (r->ckpt) {
        buf_printf(&b,
                   ", \"checkpoint\": {\"bytes\": %llu, \"writers\": %u, \"part_size\": %llu, "
                   "\"ok\": %s, \"ack_s\": %.3f, \"first_writer_s\": %.3f, \"backend_s\": ",
                   (unsigned long long)o->ckpt_bytes, o->writers,
                   (unsigned long long)o->part_size, r->write_ok ? "true" : "false",
                   r->wr.ack_s, r->wr.writer_min_s);
        if (r->write_ok && r->flush_s >= 0)
            buf_printf(&b, "%.3f", r->wr.ack_s + r->flush_s);
        else
            buf_puts(&b, "null");
        buf_printf(&b, ", \"removed\": %s, \"error\": ", r->removed ? "true" : "false");
        buf_json_str(&b, r->wr.first_error);
        buf_puts(&b, "}");
    } else {
        buf_puts(&b, ", \"checkpoint\": null");
    }
    buf_puts(&b, "}\n");
    fwrite(b.p, 1, b.len, stdout);
    buf_free(&b);
}

/* --- the phases ------------------------------------------------------------------------ */

/* Lists the target and picks the sample: --sample N objects spread evenly over the listing,
 * each read whole or in CHECK_RANGE_MAX ranges. */
static int check_items(const struct check_opts *o, struct check_result *r,
                       struct check_item **items, size_t *nitems)
{
    char **keys = NULL;
    uint64_t *sizes = NULL;
    size_t n = 0, k = 0, cap = 0;
    *items = NULL;
    *nitems = 0;
    if (check_list(&o->http, o->bucket, o->prefix, &keys, &sizes, &n))
        return -1;
    r->listed = n;
    size_t want = o->sample && o->sample < n ? (size_t)o->sample : n;
    int rc = 0;
    for (size_t i = 0; i < n; i++)
        r->listed_bytes += (double)sizes[i];
    for (size_t s = 0; s < want && !rc; s++) {
        size_t i = want == n ? s : s * n / want;
        uint64_t off = 0;
        r->sampled++;
        do {
            uint64_t len = S3C_MIN(sizes[i] - off, CHECK_RANGE_MAX);
            if (k == cap) {
                cap = cap ? cap * 2 : 256;
                struct check_item *ni = realloc(*items, cap * sizeof(*ni));
                if (!ni) {
                    rc = -1;
                    break;
                }
                *items = ni;
            }
            (*items)[k].key = strdup(keys[i]);
            (*items)[k].off = off;
            (*items)[k].len = len;
            if (!(*items)[k++].key)
                rc = -1;
            off += len;
        } while (off < sizes[i] && !rc);
    }
    *nitems = k;
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
    free(sizes);
    return rc;
}

static void check_checkpoint(const struct check_opts *o, struct check_result *r)
{
    char prefix[256];
    char host[64] = "host";
    gethostname(host, sizeof(host) - 1);
    snprintf(prefix, sizeof(prefix), "s3cached-check-%.40s-%ld-%ld/", host, (long)getpid(),
             (long)time(NULL));
    r->ckpt = 1;
    r->flush_s = -1;
    r->write_ok = check_write(&o->http, o->bucket, prefix, o->ckpt_bytes, o->writers,
                              o->part_size, CHECK_PART_IN_FLIGHT, &r->wr) == 0;
    if (r->write_ok) { /* the time until the backend held it: a flush of the prefix */
        struct buf body, res;
        buf_init(&body, 4096);
        buf_init(&res, 1 << 20);
        buf_puts(&body, "{\"bucket\":");
        buf_json_str(&body, o->bucket);
        buf_puts(&body, ",\"prefix\":");
        buf_json_str(&body, prefix);
        buf_puts(&body, "}");
        uint64_t t = s3c_mono_ns();
        long st = check_http_call(&o->http, "POST", "/_/flush", body.p, 1, &res);
        if (st == 200)
            r->flush_s = (double)(s3c_mono_ns() - t) / 1e9;
        buf_free(&body);
        buf_free(&res);
    }
    r->removed = 1;
    for (unsigned i = 0; i < o->writers; i++) { /* what it wrote goes */
        struct buf q, res;
        char key[512];
        snprintf(key, sizeof(key), "%srank-%u.ckpt", prefix, i);
        buf_init(&q, 16384);
        buf_init(&res, 1 << 20);
        check_path(&q, o->bucket, key);
        long st = check_http_call(&o->http, "DELETE", q.p, NULL, 0, &res);
        if (st != 204 && st != 200)
            r->removed = 0;
        buf_free(&q);
        buf_free(&res);
    }
}

struct check_marks {
    const struct check_opts *o;
    struct check_result *r;
};

/* The read's CHECK_MARK_* callback: the counters at that moment. */
static void check_mark(void *cls, int at)
{
    struct check_marks *m = cls;
    gw_snapshot(m->o, &m->r->at_g[at]);
    machine_ticks(&m->r->at_busy[at], &m->r->at_total[at]);
    m->r->at_cpu[at] = own_cpu_s();
}

/* The wrk command that measures further when this check's readers were the bound: its
 * threads on this machine's cores, the check's streams, one object of the set (the largest
 * item's), pre-signed. */
static void check_measure_cmd(const struct check_opts *o, struct check_result *r,
                              const struct check_item *items, size_t n)
{
    struct buf url;
    size_t big = 0;
    if (!n)
        return;
    for (size_t i = 1; i < n; i++)
        if (items[i].len > items[big].len)
            big = i;
    buf_init(&url, sizeof(r->measure) - 128);
    if (!check_presign(&o->http, o->bucket, items[big].key, CHECK_PRESIGN_S, &url))
        snprintf(r->measure, sizeof(r->measure), "wrk -t%u -c%u -d%llds --timeout 30s '%s'",
                 o->cores, S3C_MAX(o->streams, o->cores),
                 (long long)S3C_MAX(10, o->duration_ms / 1000), url.p);
    buf_free(&url);
}

static int check_run(struct check_opts *o)
{
    struct check_result r;
    struct check_item *items = NULL;
    size_t nitems = 0;
    memset(&r, 0, sizeof(r));
    r.local = endpoint_is_local(o->http.endpoint);
    r.need_bps = (double)o->gpus * (double)o->per_gpu_bps;
    if (check_items(o, &r, &items, &nitems))
        return 1;
    if (!nitems && !o->ckpt_bytes) {
        fprintf(stderr, "s3cached check: nothing under %s\n", o->target);
        free(items);
        return 1;
    }
    for (size_t i = 0; i < nitems; i++)
        r.sampled_bytes += (double)items[i].len;
    struct check_marks marks = {o, &r};
    double dur = (double)o->duration_ms / 1e3;
    struct check_read_opts ro = {
        .streams = o->streams,
        .readers = o->readers,
        .duration_s = dur,
        .warmup_s = S3C_MIN(CHECK_WARMUP_SHARE * dur, CHECK_WARMUP_MAX_S),
        .mark = check_mark,
        .cls = &marks,
    };
    if (check_read(&o->http, o->bucket, items, nitems, &ro, &r.rd)) {
        fprintf(stderr, "s3cached check: the readers could not start (out of memory?)\n");
        for (size_t i = 0; i < nitems; i++)
            free(items[i].key);
        free(items);
        return 1;
    }
    int w = r.rd.window, e = CHECK_MARK_END;
    r.g0 = r.at_g[w];
    r.g1 = r.at_g[e];
    double secs = r.rd.window_s > 0 ? r.rd.window_s : 1e-9;
    r.delivered_bps = (double)r.rd.window_bytes / secs;
    r.gpus_fed = o->per_gpu_bps ? r.delivered_bps / (double)o->per_gpu_bps : 0;
    r.passes = r.sampled_bytes > 0 ? (double)r.rd.bytes / r.sampled_bytes : 0;
    r.reader_cores = (r.at_cpu[e] - r.at_cpu[w]) / secs;
    r.machine_busy = r.at_total[e] > r.at_total[w]
                         ? (r.at_busy[e] - r.at_busy[w]) / (r.at_total[e] - r.at_total[w])
                         : -1;
    check_bound(o, &r);
    r.lower_bound = !strcmp(r.bound, "reader");
    if (r.lower_bound)
        check_measure_cmd(o, &r, items, nitems);
    for (size_t i = 0; i < nitems; i++)
        free(items[i].key);
    free(items);
    if (o->ckpt_bytes)
        check_checkpoint(o, &r);
    if (o->json)
        print_json(o, &r);
    else
        print_table(o, &r);
    if (r.rd.errors || (r.ckpt && (!r.write_ok || !r.removed)))
        return 1;
    return r.delivered_bps >= r.need_bps ? 0 : 3;
}

/* --- options --------------------------------------------------------------------------- */

static void check_help(void)
{
    printf(
        "usage: s3cached check --endpoint URL s3://BUCKET/PREFIX --gpus N --per-gpu RATE\n"
        "                      [--sample N] [--streams N] [--readers N] [--duration DUR]\n"
        "                      [--job NAME] [--checkpoint SIZE | --params P] [--writers N]\n"
        "                      [--part-size SIZE] [--json]\n\n"
        "Reads the data set through the gateway as its own job and says how many GPUs of\n"
        "--per-gpu each it can feed, and what bounded the read (the backend, a rate limit,\n"
        "the gateway's workers or CPU, this machine's CPU, the cache disk, this check's\n"
        "readers, the network). Exit 0: it can feed --gpus; 3: it cannot; 1: it failed;\n"
        "2: usage.\n\n"
        "  --endpoint URL     the gateway (or S3CACHED_ENDPOINT)\n"
        "  --gpus N           GPUs to feed, each at --per-gpu RATE (bytes/s: 2.8e9, 500M)\n"
        "  --sample N         read N objects spread over the listing (default: all)\n"
        "  --streams N        GETs at once (default 2 x --gpus, 8 to 64)\n"
        "  --readers N        threads that read, each with its share of the streams\n"
        "                     (default: the cores this check may run on, at most --streams)\n"
        "  --duration DUR     read for this long (default 10s): the set again in a new order\n"
        "                     each pass, the rate taken after the start-up (the first 10 %%,\n"
        "                     at most 5 s); a set whose first pass was not all cache hits is\n"
        "                     read once. 0: one pass, however long, the whole of it timed\n"
        "  --job NAME         the job name on the gateway (default s3cached-check-PID)\n"
        "  --checkpoint SIZE  then write a checkpoint of SIZE (or --params P: 14 bytes each)\n"
        "                     from --writers N multipart uploads of --part-size parts (8M),\n"
        "                     time it to the acknowledgement and to the backend, delete it\n"
        "  --json             one JSON object instead of the table\n"
        "  --admin-token T    the gateway's counters (/_/stats) (or S3CACHED_ADMIN_TOKEN)\n"
        "  --access-key K --secret-key S --region R   SigV4 (or AWS_ACCESS_KEY_ID, ...)\n\n"
        "When this check's own readers were the bound the answer is a lower bound\n"
        "(\"can feed at least N GPUs\") and it prints a wrk command, on a pre-signed URL of\n"
        "one object of the set, that measures further.\n");
}

static int usage_err(const char *msg, const char *arg)
{
    fprintf(stderr, "s3cached check: %s%s%s\n", msg, arg ? " " : "", arg ? arg : "");
    return 2;
}

int check_main(int argc, char **argv)
{
    struct check_opts o;
    char jobname[128];
    memset(&o, 0, sizeof(o));
    o.http.endpoint = getenv("S3CACHED_ENDPOINT");
    o.http.token = getenv("S3CACHED_ADMIN_TOKEN");
    o.http.access_key = getenv("AWS_ACCESS_KEY_ID");
    o.http.secret_key = getenv("AWS_SECRET_ACCESS_KEY");
    o.http.region = "us-east-1";
    o.writers = 1;
    o.part_size = 8u << 20; /* awscli's and boto3's default part size */
    o.duration_ms = 10000;
    o.cores = check_cores();
    const char *ckpt = NULL, *params = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL, *err = NULL;
        uint64_t u = 0;
        if (!strcmp(a, "--json")) {
            o.json = 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            check_help();
            return 0;
        }
        if (!strncmp(a, "s3://", 5) && !o.target) {
            o.target = a;
            continue;
        }
        if (strncmp(a, "--", 2))
            return usage_err("unknown argument", a);
        if (!v)
            return usage_err("a value is needed after", a);
        i++;
        if (!strcmp(a, "--endpoint"))
            o.http.endpoint = v;
        else if (!strcmp(a, "--admin-token"))
            o.http.token = v;
        else if (!strcmp(a, "--access-key"))
            o.http.access_key = v;
        else if (!strcmp(a, "--secret-key"))
            o.http.secret_key = v;
        else if (!strcmp(a, "--region"))
            o.http.region = v;
        else if (!strcmp(a, "--job"))
            o.job = v;
        else if (!strcmp(a, "--per-gpu"))
            err = conf_parse_rate(v, &o.per_gpu_bps);
        else if (!strcmp(a, "--checkpoint"))
            ckpt = v, err = conf_parse_rate(v, &o.ckpt_bytes);
        else if (!strcmp(a, "--params"))
            params = v;
        else if (!strcmp(a, "--part-size"))
            err = conf_parse_size(v, &o.part_size);
        else if (!strcmp(a, "--duration"))
            err = conf_parse_duration_ms(v, &o.duration_ms);
        else if (!strcmp(a, "--gpus") || !strcmp(a, "--streams") || !strcmp(a, "--writers") ||
                 !strcmp(a, "--sample") || !strcmp(a, "--readers")) {
            err = conf_parse_size(v, &u);
            if (!err && (u > 100000 || (u == 0 && strcmp(a, "--sample"))))
                err = "out of range";
            if (!strcmp(a, "--gpus"))
                o.gpus = (unsigned)u;
            else if (!strcmp(a, "--streams"))
                o.streams = (unsigned)u;
            else if (!strcmp(a, "--writers"))
                o.writers = (unsigned)u;
            else if (!strcmp(a, "--readers"))
                o.readers = (unsigned)u;
            else
                o.sample = u;
        } else {
            return usage_err("unknown option", a);
        }
        if (err) {
            fprintf(stderr, "s3cached check: %s %s: %s\n", a, v, err);
            return 2;
        }
    }
    if (params) { /* mixed precision with Adam: 14 bytes of checkpoint per parameter */
        char *end;
        o.params = strtod(params, &end);
        if (*end || !(o.params > 0) || o.params > 1e15 || ckpt)
            return usage_err(ckpt ? "--params and --checkpoint name the same thing; give one"
                                  : "--params wants a number of parameters (1.2e9)", NULL);
        o.ckpt_bytes = (uint64_t)(14.0 * o.params);
    }
    if (!o.http.endpoint)
        return usage_err("--endpoint URL is required (e.g. http://127.0.0.1:9000)", NULL);
    if (!o.target || !o.gpus || !o.per_gpu_bps)
        return usage_err("usage: s3cached check --endpoint URL s3://BUCKET/PREFIX --gpus N "
                         "--per-gpu RATE [--sample N] [--streams N] [--readers N] "
                         "[--duration DUR] "
                         "[--checkpoint SIZE | --params P] [--writers N] [--json]", NULL);
    if (o.part_size < (5u << 20) || o.part_size > (5ull << 30))
        return usage_err("--part-size must be 5M to 5G (S3's part sizes)", NULL);
    const char *p = o.target + 5;
    size_t bl = strcspn(p, "/");
    if (!bl)
        return usage_err("expected s3://BUCKET/PREFIX, got", o.target);
    o.bucket = strndup(p, bl);
    o.prefix = strdup(p[bl] ? p + bl + 1 : "");
    if (!o.streams)
        o.streams = S3C_MAX(8u, S3C_MIN(64u, 2 * o.gpus));
    if (!o.readers)
        o.readers = o.cores;
    o.readers = S3C_MIN(o.readers, o.streams);
    if (!o.job) {
        snprintf(jobname, sizeof(jobname), "s3cached-check-%ld", (long)getpid());
        o.job = jobname;
    }
    snprintf(o.http.job_header, sizeof(o.http.job_header), "x-s3cached-job: %s", o.job);
    snprintf(o.http.need_header, sizeof(o.http.need_header), "x-s3cached-job-need: %.0f",
             (double)o.gpus * (double)o.per_gpu_bps);
    check_http_global(1);
    int rc = o.bucket && o.prefix ? check_run(&o) : 1;
    check_http_global(0);
    free(o.bucket);
    free(o.prefix);
    return rc;
}
