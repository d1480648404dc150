/*
 * stats_out.c: the /_/stats JSON document and the /_/metrics Prometheus text of the
 * accounting (stats.c), from snapshots of its rows, with the cache's, backend's and fair
 * share's counters it is given.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fair.h"
#include "jobs.h"
#include "lib/s3c.h"
#include "procinfo.h"
#include "stats.h"
#include "stats_priv.h"

static double stats_uptime_s(struct stats *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t now = s->now(s->now_cls);
    uint64_t start = s->start_ns;
    pthread_mutex_unlock(&s->lock);
    return now > start ? (double)(now - start) / 1e9 : 0.0;
}

/* Moves the rows of other gateways' requests (cluster mode) after the clients' rows, keeping
 * both in order. Returns the number of client rows. */
static size_t split_peers(struct stats_row *r, size_t n)
{
    size_t k = 0;
    struct stats_row *tmp = n ? malloc(n * sizeof(*tmp)) : NULL;
    if (!tmp)
        return n; /* no memory: peers are shown as clients */
    for (size_t i = 0; i < n; i++)
        if (!r[i].is_peer)
            tmp[k++] = r[i];
    size_t nc = k;
    for (size_t i = 0; i < n; i++)
        if (r[i].is_peer)
            tmp[k++] = r[i];
    memcpy(r, tmp, n * sizeof(*tmp));
    free(tmp);
    return nc;
}

/* --- JSON ------------------------------------------------------------------------------ */

static int json_by_op(struct buf *out, const uint64_t *by_op)
{
    int rc = buf_puts(out, "\"requests_by_op\": {");
    for (unsigned i = 0; i < STATS_OP__N && !rc; i++)
        rc = buf_printf(out, "%s\"%s\": %" PRIu64, i ? ", " : "", stats_op_names[i], by_op[i]);
    if (!rc)
        rc = buf_puts(out, "}");
    return rc;
}

static int json_common(struct buf *out, const struct stats_row *r)
{
    int rc = buf_printf(out,
                        "\"requests\": %" PRIu64 ", \"bytes_out\": %" PRIu64
                        ", \"bytes_in\": %" PRIu64 ", \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
                        ", \"coalesced\": %" PRIu64 ", \"errors_4xx\": %" PRIu64
                        ", \"errors_5xx\": %" PRIu64 ", ",
                        r->requests, r->bytes_out, r->bytes_in, r->hits, r->misses, r->coalesced,
                        r->err_4xx, r->err_5xx);
    if (!rc)
        rc = json_by_op(out, r->by_op);
    return rc;
}

/* The gateway process and its cache disk (acct/procinfo.h); unknown figures are -1. */
static void stats_procinfo(struct stats *s, struct procinfo *pi)
{
    pthread_mutex_lock(&s->lock);
    char *path = s->disk_path ? strdup(s->disk_path) : NULL;
    pthread_mutex_unlock(&s->lock);
    procinfo_get(path, pi);
    free(path);
}

/* ,"jobs": [...] (acct/jobs.h) and ,"process": {...} */
static int json_jobs_process(struct stats *s, struct buf *out)
{
    struct procinfo pi;
    pthread_mutex_lock(&s->lock);
    struct jobs *jobs = s->jobs;
    pthread_mutex_unlock(&s->lock);
    int rc = buf_puts(out, ",\n \"jobs\": ");
    if (!rc)
        rc = jobs ? jobs_json(jobs, NULL, out) : buf_puts(out, "[]");
    stats_procinfo(s, &pi);
    if (!rc)
        rc = buf_printf(out,
                        ",\n \"process\": {\"cpu_user_s\": %.3f, \"cpu_system_s\": %.3f, "
                        "\"cores\": %u, \"disk_read_bytes\": %" PRId64
                        ", \"disk_write_bytes\": %" PRId64 ", \"cache_disk\": ",
                        pi.cpu_user_s, pi.cpu_system_s, pi.cores, pi.disk_read_bytes,
                        pi.disk_write_bytes);
    if (!rc)
        rc = buf_json_str(out, pi.cache_disk);
    if (!rc)
        rc = buf_printf(out, ", \"cache_disk_busy_s\": %.3f}", pi.cache_disk_busy_s);
    return rc;
}

/* What both writers start from: the optional inputs defaulted to zeroed figures (a caller
 * without a cache, backend or fair share passes NULL) and snapshots of the client and bucket
 * rows (*@cl and *@bk, the caller frees them, also on error). 0 or -ENOMEM. */
static int snapshot_begin(struct stats *s, const struct cache_stats **cs,
                          const struct backend_counters **bc, const struct fair_stats **fs,
                          struct stats_row **cl, size_t *ncl, struct stats_row **bk, size_t *nbk)
{
    static const struct cache_stats cs0;
    static const struct backend_counters bc0;
    static const struct fair_stats fs0;
    if (!*cs)
        *cs = &cs0;
    if (!*bc)
        *bc = &bc0;
    if (!*fs)
        *fs = &fs0;
    int rc = stats_snapshot_clients(s, cl, ncl);
    return rc ? rc : stats_snapshot_buckets(s, bk, nbk);
}

/* The "clients", "buckets" and "peers" arrays of /_/stats: @cl holds clients and peers (split
 * here, the peers last), @bk the buckets. */
static int json_rows(struct buf *out, struct stats_row *cl, size_t ncl, const struct stats_row *bk,
                     size_t nbk)
{
    size_t nall = ncl;
    ncl = split_peers(cl, ncl);
    int rc = buf_puts(out, ",\n \"clients\": [");
    for (size_t i = 0; i < ncl && !rc; i++) {
        const struct stats_row *r = &cl[i];
        rc = buf_puts(out, i ? ",\n  {\"client\": " : "\n  {\"client\": ");
        if (!rc)
            rc = buf_json_str(out, r->key);
        if (!rc)
            rc = buf_puts(out, ", \"addr\": ");
        if (!rc)
            rc = buf_json_str(out, r->addr);
        if (!rc)
            rc = buf_puts(out, ", ");
        if (!rc)
            rc = json_common(out, r);
        if (!rc)
            rc = buf_printf(out,
                            ", \"backend_fill_bytes\": %" PRIu64
                            ", \"in_flight\": %u, \"rate_out_bps\": %.0f, \"rate_in_bps\": %.0f, ",
                            r->fill_bytes, r->in_flight, r->rate_out, r->rate_in);
        if (!rc)
            rc = stall_json(out, &r->stall);
        if (!rc)
            rc = buf_puts(out, "}");
    }
    if (!rc)
        rc = buf_puts(out, ncl ? "\n ],\n \"buckets\": [" : "],\n \"buckets\": [");
    for (size_t i = 0; i < nbk && !rc; i++) {
        rc = buf_puts(out, i ? ",\n  {\"bucket\": " : "\n  {\"bucket\": ");
        if (!rc)
            rc = buf_json_str(out, bk[i].key);
        if (!rc)
            rc = buf_puts(out, ", ");
        if (!rc)
            rc = json_common(out, &bk[i]);
        if (!rc)
            rc = buf_puts(out, "}");
    }
    /* cluster mode: other gateways' requests, apart from the clients' (counted where they
     * entered the cluster) */
    if (!rc)
        rc = buf_puts(out, nbk ? "\n ],\n \"peers\": [" : "],\n \"peers\": [");
    for (size_t i = ncl; i < nall && !rc; i++) {
        rc = buf_puts(out, i > ncl ? ",\n  {\"peer\": " : "\n  {\"peer\": ");
        if (!rc)
            rc = buf_json_str(out, cl[i].key);
        if (!rc)
            rc = buf_puts(out, ", ");
        if (!rc)
            rc = json_common(out, &cl[i]);
        if (!rc)
            rc = buf_printf(out,
                            ", \"in_flight\": %u, \"rate_out_bps\": %.0f, \"rate_in_bps\": %.0f}",
                            cl[i].in_flight, cl[i].rate_out, cl[i].rate_in);
    }
    if (!rc)
        rc = buf_puts(out, nall > ncl ? "\n ]" : "]");
    return rc;
}

int stats_json(struct stats *s, const struct cache_stats *cs, const struct backend_counters *bc,
               const struct fair_stats *fs, const struct cache_policy_report *pr, struct buf *out)
{
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    struct stats_row *cl = NULL, *bk = NULL;
    size_t ncl = 0, nbk = 0;
    uint64_t by_op[STATS_OP__N], total = 0;
    int rc = snapshot_begin(s, &cs, &bc, &fs, &cl, &ncl, &bk, &nbk);
    if (rc)
        goto out;
    for (unsigned i = 0; i < STATS_OP__N; i++) {
        by_op[i] = LOAD(s->requests_by_op[i]);
        total += by_op[i];
    }

    rc = buf_printf(out,
                    "{\"uptime_s\": %.3f,\n"
                    " \"cache\": {\"capacity_bytes\": %" PRIu64 ", \"used_bytes\": %" PRIu64
                    ", \"staged_bytes\": %" PRIu64 ", \"objects\": %" PRIu64
                    ", \"pinned_objects\": %" PRIu64 ", \"pinned_bytes\": %" PRIu64 ",\n"
                    "           \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
                    ", \"coalesced\": %" PRIu64 ", \"bypassed\": %" PRIu64
                    ", \"evictions\": %" PRIu64 ", \"revalidations\": %" PRIu64
                    ", \"stale_served\": %" PRIu64 ", \"source_sends\": %" PRIu64 ",\n"
                    "           \"partial\": %" PRIu64 ", \"hit_bytes\": %" PRIu64
                    ", \"miss_bytes\": %" PRIu64 ", \"reserved_bytes\": %" PRIu64 ",\n"
                    "           \"fill_bytes\": %" PRIu64 ", \"dirty_objects\": %" PRIu64
                    ", \"dirty_bytes\": %" PRIu64 ",\n"
                    "           \"uncached_bytes\": %" PRIu64 ", \"uncached_blocks\": %" PRIu64
                    ", \"fill_window_bytes\": %" PRIu64 ", \"fill_window_held_bytes\": %" PRIu64
                    ", \"fill_window_limit_bytes\": %" PRIu64
                    ", \"fill_window_forced_drops\": %" PRIu64 ",\n"
                    "           \"fetch_ahead_runs\": %" PRIu64
                    ", \"fetch_ahead_running\": %" PRIu64 ", \"fetch_ahead_limit\": %" PRIu64
                    ", \"fetch_ahead_backoffs\": %" PRIu64 ", \"fetch_objects\": %" PRIu64 "},\n"
                    " \"drain\": {\"dirty_limit_bytes\": %" PRIu64 ", \"staged_bytes\": %" PRIu64
                    ", \"uploaded_objects\": %" PRIu64 ", \"uploaded_bytes\": %" PRIu64
                    ", \"errors\": %" PRIu64 ", \"cancelled\": %" PRIu64 ", \"inflight\": %" PRIu64
                    ", \"rate_bps\": %" PRIu64 ", \"oldest_dirty_age_s\": %.3f},\n"
                    " \"fair\": {\"capacity_bps\": %" PRIu64 ", \"level_bps\": %" PRIu64
                    ", \"rate_bps\": %" PRIu64 ", \"active_clients\": %" PRIu64
                    ", \"responses\": %" PRIu64 ", \"paced_responses\": %" PRIu64
                    ", \"saturated\": %s},\n"
                    " \"backend\": {\"requests\": %" PRIu64 ", \"bytes_read\": %" PRIu64
                    ", \"bytes_written\": %" PRIu64 ", \"errors\": %" PRIu64
                    ", \"throttled\": %" PRIu64 "},\n"
                    " \"requests\": %" PRIu64 ", \"errors_4xx\": %" PRIu64
                    ", \"errors_5xx\": %" PRIu64 ", ",
                    stats_uptime_s(s), cs->capacity_bytes, cs->used_bytes, cs->staged_bytes,
                    cs->objects, cs->pinned_objects, cs->pinned_bytes, cs->hits, cs->misses,
                    cs->coalesced, cs->bypassed, cs->evictions, cs->revalidations, cs->stale_served,
                    cs->source_sends, cs->partial, cs->hit_bytes, cs->miss_bytes,
                    cs->reserved_bytes, cs->fill_bytes, cs->dirty_objects, cs->dirty_bytes,
                    cs->uncached_bytes, cs->uncached_blocks, cs->window_bytes,
                    cs->window_held_bytes, cs->window_limit_bytes, cs->window_forced_drops,
                    cs->fetch_ahead_runs, cs->fetch_ahead_running, cs->fetch_ahead_limit,
                    cs->fetch_ahead_backoffs, cs->fetch_objects, cs->dirty_limit_bytes,
                    cs->dirty_staged_bytes, cs->drain_uploaded_objects, cs->drain_uploaded_bytes,
                    cs->drain_errors, cs->drain_cancelled, cs->drain_inflight, cs->drain_rate_bps,
                    cs->drain_oldest_dirty_age_s, fs->capacity_bps, fs->level_bps, fs->rate_bps,
                    fs->active_clients, fs->responses, fs->paced_responses,
                    fs->saturated ? "true" : "false", bc->requests, bc->bytes_read,
                    bc->bytes_written, bc->errors, bc->throttled, total, LOAD(s->err_4xx),
                    LOAD(s->err_5xx));
    if (!rc)
        rc = buf_printf(out,
                        "\"shards\": {\"member_reads\": %" PRIu64
                        ", \"member_index_builds\": %" PRIu64 ", \"member_index_errors\": %" PRIu64
                        ", \"batches\": %" PRIu64 ", \"batch_items\": %" PRIu64
                        ", \"batch_item_errors\": %" PRIu64 "}, ",
                        cs->member_reads, cs->member_index_builds, cs->member_index_errors,
                        cs->batches, cs->batch_items, cs->batch_item_errors);
    if (!rc)
        rc = buf_printf(out,
                        "\"parked\": {\"requests\": %" PRIu64 ", \"over_bound\": %" PRIu64
                        ", \"over_bound_total\": %" PRIu64 ", \"bound_ms\": %" PRIu64 "}, ",
                        LOAD(s->parked), LOAD(s->parked_over), LOAD(s->parked_over_total),
                        LOAD(s->park_bound_ms));
    if (!rc)
        rc = json_by_op(out, by_op);
    if (!rc)
        rc = json_rows(out, cl, ncl, bk, nbk);
    if (!rc)
        rc = buf_puts(out, ",\n \"policy\": ");
    if (!rc)
        rc = stats_policy_json(out, pr);
    if (!rc)
        rc = json_jobs_process(s, out);
    if (!rc)
        rc = buf_puts(out, "}\n");
out:
    free(cl);
    free(bk);
    return rc;
}

/* --- Prometheus text format 0.0.4 ------------------------------------------------------- */

/* Label value: backslash, double quote and line feed escaped, as the format requires. */
static int prom_label(struct buf *out, const char *v)
{
    int rc = 0;
    const char *run = v;
    for (; *v && !rc; v++) {
        const char *rep = *v == '\\' ? "\\\\" : *v == '"' ? "\\\"" : *v == '\n' ? "\\n" : NULL;
        if (!rep)
            continue;
        rc = buf_append(out, run, (size_t)(v - run));
        if (!rc)
            rc = buf_puts(out, rep);
        run = v + 1;
    }
    if (!rc)
        rc = buf_append(out, run, (size_t)(v - run));
    return rc;
}

int stats_prom_label(struct buf *out, const char *v)
{
    return prom_label(out, v);
}

static int prom_family(struct buf *out, const char *name, const char *type, const char *help)
{
    return buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

struct prom_field {
    const char *name, *type, *help;
    size_t off;
};

#define CS_F(name, type, field, help)                                                              \
    {                                                                                              \
        name, type, help, offsetof(struct cache_stats, field)                                      \
    }
static const struct prom_field prom_cache[] = {
    CS_F("s3cached_cache_capacity_bytes", "gauge", capacity_bytes, "Configured cache capacity."),
    CS_F("s3cached_cache_used_bytes", "gauge", used_bytes,
         "Bytes held in the cache: objects, blocks being fetched and staged bytes."),
    CS_F("s3cached_cache_staged_bytes", "gauge", staged_bytes,
         "Bytes of the cache directory outside the index (request bodies being received, "
         "write-back parts), counted in used bytes."),
    CS_F("s3cached_cache_reserved_bytes", "gauge", reserved_bytes,
         "Of the used bytes, those reserved by fills in flight."),
    CS_F("s3cached_cache_objects", "gauge", objects, "Objects held in the cache."),
    CS_F("s3cached_cache_pinned_objects", "gauge", pinned_objects, "Objects pinned in the cache."),
    CS_F("s3cached_cache_pinned_bytes", "gauge", pinned_bytes, "Bytes of pinned objects."),
    CS_F("s3cached_cache_hits_total", "counter", hits, "Reads served from the cache."),
    CS_F("s3cached_cache_misses_total", "counter", misses, "Reads that started a backend fetch."),
    CS_F("s3cached_cache_coalesced_total", "counter", coalesced,
         "Reads that joined a fetch already in flight."),
    CS_F("s3cached_cache_bypassed_total", "counter", bypassed,
         "Reads served from the backend without caching."),
    CS_F("s3cached_cache_partial_total", "counter", partial,
         "Reads with part of their range cached that fetched the rest (partial hits)."),
    CS_F("s3cached_cache_hit_bytes_total", "counter", hit_bytes,
         "Bytes reads asked for that were in blocks on the SSD when they began."),
    CS_F("s3cached_cache_miss_bytes_total", "counter", miss_bytes,
         "Bytes reads asked for that were not on the SSD when they began."),
    CS_F("s3cached_cache_evictions_total", "counter", evictions, "Objects evicted."),
    CS_F("s3cached_cache_revalidations_total", "counter", revalidations,
         "Cached entries checked with the backend."),
    CS_F("s3cached_cache_stale_served_total", "counter", stale_served,
         "Stale entries served because the backend failed."),
    CS_F("s3cached_cache_source_sends_total", "counter", source_sends,
         "Cold GETs sent from the backend's file while the cache filled from it."),
    CS_F("s3cached_cache_fill_bytes_total", "counter", fill_bytes,
         "Bytes written into the cache from the backend."),
    CS_F("s3cached_cache_uncached_bytes_total", "counter", uncached_bytes,
         "Bytes of cold fills delivered to readers but not cached: the cache disk was behind."),
    CS_F("s3cached_cache_uncached_blocks_total", "counter", uncached_blocks,
         "Blocks of cold fills delivered to readers but not cached: the cache disk was behind."),
    CS_F("s3cached_cache_fill_window_bytes", "gauge", window_bytes,
         "Memory of the fills' windows (allocated; at most --fill-memory)."),
    CS_F("s3cached_cache_fill_window_held_bytes", "gauge", window_held_bytes,
         "Of the fills' windows' memory, what runs and their readers hold now (0 when no fill "
         "is in flight)."),
    CS_F("s3cached_cache_fill_window_limit_bytes", "gauge", window_limit_bytes,
         "Most memory the fills' windows may take (--fill-memory)."),
    CS_F("s3cached_cache_fill_window_forced_drops_total", "counter", window_forced_drops,
         "Blocks a fill let go before its readers copied them (a reader stopped reading for "
         "long): those readers fetch them again."),
    CS_F("s3cached_cache_fetch_ahead_runs_total", "counter", fetch_ahead_runs,
         "Ranged GETs started ahead of the readers of cold objects (--fetch-parallel)."),
    CS_F("s3cached_cache_fetch_ahead_running", "gauge", fetch_ahead_running,
         "Ranged GETs ahead of readers in flight now."),
    CS_F("s3cached_cache_fetch_ahead_limit", "gauge", fetch_ahead_limit,
         "Most ranged GETs ahead of readers in flight now: --fetch-connections, halved on "
         "the backend's SlowDown and grown back one at a time."),
    CS_F("s3cached_cache_fetch_objects", "gauge", fetch_objects,
         "Objects with a fetch from the backend in flight now."),
    CS_F("s3cached_cache_fetch_ahead_backoffs_total", "counter", fetch_ahead_backoffs,
         "Halvings of that limit after the backend answered SlowDown."),
    CS_F("s3cached_cache_dirty_objects", "gauge", dirty_objects,
         "Objects written back but not yet on the backend."),
    CS_F("s3cached_cache_dirty_bytes", "gauge", dirty_bytes,
         "Bytes written back but not yet on the backend."),
    CS_F("s3cached_drain_dirty_limit_bytes", "gauge", dirty_limit_bytes,
         "Write-back: most dirty bytes before writes get 503 SlowDown."),
    CS_F("s3cached_drain_uploaded_objects_total", "counter", drain_uploaded_objects,
         "Write-back: objects uploaded to the backend by the drainer."),
    CS_F("s3cached_drain_uploaded_bytes_total", "counter", drain_uploaded_bytes,
         "Write-back: bytes uploaded to the backend by the drainer."),
    CS_F("s3cached_drain_errors_total", "counter", drain_errors,
         "Write-back: drain uploads that failed (retried)."),
    CS_F("s3cached_drain_cancelled_total", "counter", drain_cancelled,
         "Write-back: uploads stopped because a newer write or a DELETE superseded them."),
    CS_F("s3cached_drain_inflight", "gauge", drain_inflight, "Write-back: uploads in flight."),
    CS_F("s3cached_member_reads_total", "counter", member_reads,
         "Reads of one member of a tar shard (GET or HEAD ?member=)."),
    CS_F("s3cached_member_index_builds_total", "counter", member_index_builds,
         "Member indexes of tar shards built (once per shard version)."),
    CS_F("s3cached_member_index_errors_total", "counter", member_index_errors,
         "Member index builds for a member read that failed (not a readable tar, or a fetch failed)."),
    CS_F("s3cached_batches_total", "counter", batches, "Ordered batch requests (POST ?batch)."),
    CS_F("s3cached_batch_items_total", "counter", batch_items, "Items of batch requests."),
    CS_F("s3cached_batch_item_errors_total", "counter", batch_item_errors,
         "Batch items that could not be served (a marked empty entry, or the batch failed)."),
};
#undef CS_F

#define BC_F(name, field, help)                                                                    \
    {                                                                                              \
        name, "counter", help, offsetof(struct backend_counters, field)                            \
    }
static const struct prom_field prom_backend[] = {
    BC_F("s3cached_backend_requests_total", requests, "Requests made to the backend."),
    BC_F("s3cached_backend_read_bytes_total", bytes_read, "Bytes read from the backend."),
    BC_F("s3cached_backend_written_bytes_total", bytes_written, "Bytes written to the backend."),
    BC_F("s3cached_backend_errors_total", errors, "Backend requests that failed."),
    BC_F("s3cached_backend_throttled_total", throttled,
         "Backend answers that said slow down (503, 429), retried or not."),
};
#undef BC_F

#define FS_F(name, field, help)                                                                    \
    {                                                                                              \
        name, "gauge", help, offsetof(struct fair_stats, field)                                    \
    }
static const struct prom_field prom_fair[] = {
    FS_F("s3cached_fair_capacity_bytes_per_second", capacity_bps,
         "Fair sharing: configured --max-bandwidth (0: off)."),
    FS_F("s3cached_fair_share_bytes_per_second", level_bps,
         "Fair sharing: the level, what one client may take."),
    FS_F("s3cached_fair_rate_bytes_per_second", rate_bps,
         "Fair sharing: what all clients took in the last 100 ms round."),
    FS_F("s3cached_fair_active_clients", active_clients,
         "Fair sharing: clients counted by the last round."),
    FS_F("s3cached_fair_responses", responses, "Fair sharing: response bodies being sent."),
    FS_F("s3cached_fair_paced_responses", paced_responses,
         "Fair sharing: response bodies whose socket is paced."),
};
#undef FS_F

#define ROW_F(name, field, help)                                                                   \
    {                                                                                              \
        name, "counter", help, offsetof(struct stats_row, field)                                   \
    }
static const struct prom_field prom_client[] = {
    ROW_F("s3cached_client_requests_total", requests, "Requests completed, by client."),
    ROW_F("s3cached_client_sent_bytes_total", bytes_out, "Body bytes sent, by client."),
    ROW_F("s3cached_client_received_bytes_total", bytes_in, "Body bytes received, by client."),
    ROW_F("s3cached_client_hits_total", hits, "Cache hits, by client."),
    ROW_F("s3cached_client_misses_total", misses, "Cache misses (and bypasses), by client."),
    ROW_F("s3cached_client_coalesced_total", coalesced, "Coalesced reads, by client."),
    ROW_F("s3cached_client_backend_fill_bytes_total", fill_bytes,
          "Backend bytes fetched on the client's behalf."),
};
static const struct prom_field prom_bucket[] = {
    ROW_F("s3cached_bucket_requests_total", requests, "Requests completed, by bucket."),
    ROW_F("s3cached_bucket_sent_bytes_total", bytes_out, "Body bytes sent, by bucket."),
    ROW_F("s3cached_bucket_received_bytes_total", bytes_in, "Body bytes received, by bucket."),
    ROW_F("s3cached_bucket_hits_total", hits, "Cache hits, by bucket."),
    ROW_F("s3cached_bucket_misses_total", misses, "Cache misses (and bypasses), by bucket."),
};
#undef ROW_F

static uint64_t field_u64(const void *base, size_t off)
{
    uint64_t v;
    memcpy(&v, (const char *)base + off, sizeof(v));
    return v;
}

/* {client="..",addr=".."} or {bucket=".."}, with @extra ("class=\"4xx\"") inside if set. */
static int prom_labels(struct buf *out, const struct stats_row *r, int is_client, const char *extra)
{
    int rc = buf_puts(out, is_client ? "{client=\"" : "{bucket=\"");
    if (!rc)
        rc = prom_label(out, r->key);
    if (!rc && is_client) {
        rc = buf_puts(out, "\",addr=\"");
        if (!rc)
            rc = prom_label(out, r->addr);
    }
    if (!rc)
        rc = buf_puts(out, "\"");
    if (!rc && extra)
        rc = buf_printf(out, ",%s", extra);
    if (!rc)
        rc = buf_puts(out, "}");
    return rc;
}

static int prom_rows(struct buf *out, const struct prom_field *f, size_t nf,
                     const struct stats_row *rows, size_t n, int is_client)
{
    int rc = 0;
    for (size_t i = 0; i < nf && !rc; i++) {
        rc = prom_family(out, f[i].name, f[i].type, f[i].help);
        for (size_t k = 0; k < n && !rc; k++) {
            rc = buf_puts(out, f[i].name);
            if (!rc)
                rc = prom_labels(out, &rows[k], is_client, NULL);
            if (!rc)
                rc = buf_printf(out, " %" PRIu64 "\n", field_u64(&rows[k], f[i].off));
        }
    }
    const char *ename = is_client ? "s3cached_client_errors_total" : "s3cached_bucket_errors_total";
    if (!rc)
        rc = prom_family(out, ename, "counter",
                         is_client ? "Error responses, by client and class (4xx, 5xx)."
                                   : "Error responses, by bucket and class (4xx, 5xx).");
    for (size_t k = 0; k < n && !rc; k++) {
        rc = buf_puts(out, ename);
        if (!rc)
            rc = prom_labels(out, &rows[k], is_client, "class=\"4xx\"");
        if (!rc)
            rc = buf_printf(out, " %" PRIu64 "\n%s", rows[k].err_4xx, ename);
        if (!rc)
            rc = prom_labels(out, &rows[k], is_client, "class=\"5xx\"");
        if (!rc)
            rc = buf_printf(out, " %" PRIu64 "\n", rows[k].err_5xx);
    }
    return rc;
}

static int prom_histograms(struct stats *s, struct buf *out)
{
    static const char *const name = "s3cached_request_duration_seconds";
    int rc = prom_family(out, name, "histogram",
                         "Request latency, from the first byte of the request to the last byte "
                         "of the response, by operation and cache outcome.");
    for (unsigned o = 0; o < STATS_OP__N && !rc; o++) {
        for (unsigned h = 0; h < STATS_N_HOW && !rc; h++) {
            uint64_t cum[STATS_N_LE], acc = 0;
            for (unsigned i = 0; i < STATS_N_LE; i++) {
                acc += LOAD(s->hist[o][h][i]);
                cum[i] = acc;
            }
            if (!acc)
                continue;
            for (unsigned i = 0; i < STATS_N_LE && !rc; i++)
                rc = buf_printf(out, "%s_bucket{op=\"%s\",cache=\"%s\",le=\"%s\"} %" PRIu64 "\n",
                                name, stats_op_names[o], stats_how_names[h], stats_le_names[i],
                                cum[i]);
            if (!rc)
                rc = buf_printf(out,
                                "%s_sum{op=\"%s\",cache=\"%s\"} %.9f\n"
                                "%s_count{op=\"%s\",cache=\"%s\"} %" PRIu64 "\n",
                                name, stats_op_names[o], stats_how_names[h],
                                (double)LOAD(s->hist_sum_ns[o][h]) / 1e9, name, stats_op_names[o],
                                stats_how_names[h], acc);
        }
    }
    return rc;
}

/* Cluster mode: other gateways' requests to this one, by peer (apart from the client_*
 * families, so that a sum over gateways of a client's bytes counts each byte once). */
static int prom_peers(struct buf *out, const struct stats_row *r, size_t n)
{
    static const struct prom_field f[] = {
        {"s3cached_peer_requests_total", "counter", "Requests of other gateways, by peer.",
         offsetof(struct stats_row, requests)},
        {"s3cached_peer_sent_bytes_total", "counter", "Body bytes sent to other gateways, by peer.",
         offsetof(struct stats_row, bytes_out)},
        {"s3cached_peer_received_bytes_total", "counter",
         "Body bytes received from other gateways, by peer.", offsetof(struct stats_row, bytes_in)},
    };
    int rc = 0;
    for (size_t i = 0; i < ARRAY_SIZE(f) && !rc; i++) {
        rc = prom_family(out, f[i].name, f[i].type, f[i].help);
        for (size_t k = 0; k < n && !rc; k++) {
            rc = buf_printf(out, "%s{peer=\"", f[i].name);
            if (!rc)
                rc = prom_label(out, r[k].key);
            if (!rc)
                rc = buf_printf(out, "\"} %" PRIu64 "\n", field_u64(&r[k], f[i].off));
        }
    }
    return rc;
}

/* The fair share's gauges (zeros when it is off). */
static int prom_fair_gauges(struct buf *out, const struct fair_stats *fs)
{
    int rc = 0;
    for (size_t i = 0; i < ARRAY_SIZE(prom_fair) && !rc; i++) {
        rc = prom_family(out, prom_fair[i].name, prom_fair[i].type, prom_fair[i].help);
        if (!rc)
            rc = buf_printf(out, "%s %" PRIu64 "\n", prom_fair[i].name,
                            field_u64(fs, prom_fair[i].off));
    }
    if (!rc)
        rc = prom_family(out, "s3cached_fair_saturated", "gauge",
                         "Fair sharing: 1 while the gateway is saturated and sockets are paced.");
    if (!rc)
        rc = buf_printf(out, "s3cached_fair_saturated %d\n", fs->saturated ? 1 : 0);
    return rc;
}

/* The clients' GET time (acct/stall.h): stall by cause, transfer, first byte, hits, windows. */
static int prom_client_stall(struct buf *out, const struct stats_row *cl, size_t n)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"s3cached_client_stall_seconds_total", "counter",
         "GET time spent waiting on the gateway, by client and cause."},
        {"s3cached_client_transfer_seconds_total", "counter",
         "GET time, from request to completion, summed over the client's GETs."},
        {"s3cached_client_first_byte_seconds_total", "counter",
         "Time to the first body byte, summed over the client's GETs."},
        {"s3cached_client_gets_total", "counter", "GETs completed, by client."},
        {"s3cached_client_hit_bytes_total", "counter", "GET body bytes sent from the cache."},
        {"s3cached_client_delivered_bytes_per_second", "gauge",
         "GET body bytes delivered per second, over a window (10s, 60s)."},
        {"s3cached_client_stall_ratio", "gauge",
         "Share of the client's GET time spent waiting on the gateway, last 10 s."},
    };
    int rc = 0;
    for (size_t f = 0; f < ARRAY_SIZE(fam) && !rc; f++) {
        rc = prom_family(out, fam[f].name, fam[f].type, fam[f].help);
        for (size_t k = 0; k < n && !rc; k++) {
            const struct stall_view *v = &cl[k].stall;
            char extra[48];
            int nser = f == 0 ? STALL__N : f == 5 ? 2 : 1;
            for (int i = 0; i < nser && !rc; i++) {
                const struct stall_window *w = i ? &v->w_long : &v->w_short;
                if (f == 0)
                    snprintf(extra, sizeof(extra), "cause=\"%s\"", stall_cause_name(i));
                else
                    snprintf(extra, sizeof(extra), "window=\"%s\"", i ? "60s" : "10s");
                rc = buf_puts(out, fam[f].name);
                if (!rc)
                    rc = prom_labels(out, &cl[k], 1, f == 0 || f == 5 ? extra : NULL);
                if (rc)
                    break;
                switch (f) {
                case 0: rc = buf_printf(out, " %.6f\n", v->stall_s[i]); break;
                case 1: rc = buf_printf(out, " %.6f\n", v->xfer_s); break;
                case 2: rc = buf_printf(out, " %.6f\n", v->ttfb_s); break;
                case 3: rc = buf_printf(out, " %" PRIu64 "\n", v->gets); break;
                case 4: rc = buf_printf(out, " %" PRIu64 "\n", v->hit_bytes); break;
                case 5:
                    rc = buf_printf(out, " %.0f\n", w->bytes / (w->secs < 1 ? 1 : w->secs));
                    break;
                default: rc = buf_printf(out, " %.4f\n", stall_share(&v->w_short)); break;
                }
            }
        }
    }
    return rc;
}

/* The jobs' families (acct/jobs_out.c) and the process's. */
static int prom_jobs_process(struct stats *s, struct buf *out)
{
    struct procinfo pi;
    pthread_mutex_lock(&s->lock);
    struct jobs *jobs = s->jobs;
    pthread_mutex_unlock(&s->lock);
    int rc = jobs ? jobs_prometheus(jobs, out) : 0;
    stats_procinfo(s, &pi);
    if (!rc)
        rc = prom_family(out, "s3cached_process_cpu_seconds_total", "counter",
                         "CPU time of the gateway process, by mode (user, system).");
    if (!rc)
        rc = buf_printf(out,
                        "s3cached_process_cpu_seconds_total{mode=\"user\"} %.3f\n"
                        "s3cached_process_cpu_seconds_total{mode=\"system\"} %.3f\n",
                        pi.cpu_user_s, pi.cpu_system_s);
    if (!rc)
        rc = prom_family(out, "s3cached_process_cores", "gauge", "Online CPUs of the machine.");
    if (!rc)
        rc = buf_printf(out, "s3cached_process_cores %u\n", pi.cores);
    if (!rc && pi.disk_read_bytes >= 0)
        rc = prom_family(out, "s3cached_process_storage_read_bytes_total", "counter",
                         "Bytes the gateway process read from storage (/proc/self/io).");
    if (!rc && pi.disk_read_bytes >= 0)
        rc = buf_printf(out, "s3cached_process_storage_read_bytes_total %" PRId64 "\n",
                        pi.disk_read_bytes);
    if (!rc && pi.disk_write_bytes >= 0)
        rc = prom_family(out, "s3cached_process_storage_written_bytes_total", "counter",
                         "Bytes the gateway process wrote to storage (/proc/self/io).");
    if (!rc && pi.disk_write_bytes >= 0)
        rc = buf_printf(out, "s3cached_process_storage_written_bytes_total %" PRId64 "\n",
                        pi.disk_write_bytes);
    if (!rc && pi.cache_disk_busy_s >= 0)
        rc = prom_family(out, "s3cached_cache_disk_busy_seconds_total", "counter",
                         "Time the block device under the cache directory was busy.");
    if (!rc && pi.cache_disk_busy_s >= 0) {
        rc = buf_puts(out, "s3cached_cache_disk_busy_seconds_total{device=\"");
        if (!rc)
            rc = prom_label(out, pi.cache_disk);
        if (!rc)
            rc = buf_printf(out, "\"} %.3f\n", pi.cache_disk_busy_s);
    }
    return rc;
}

/* The requests parked (http/park.c's watch): now, over --park-warn now, and since the start. */
static int prom_parked(struct stats *s, struct buf *out)
{
    int rc = prom_family(out, "s3cached_requests_parked", "gauge",
                         "Requests parked now: their connection waits for a job, the cache, a "
                         "peer, a rate limit or a flush.");
    if (!rc)
        rc = buf_printf(out, "s3cached_requests_parked %" PRIu64 "\n", LOAD(s->parked));
    if (!rc)
        rc = prom_family(out, "s3cached_requests_parked_over_bound", "gauge",
                         "Requests parked now for longer than --park-warn.");
    if (!rc)
        rc = buf_printf(out, "s3cached_requests_parked_over_bound %" PRIu64 "\n",
                        LOAD(s->parked_over));
    if (!rc)
        rc = prom_family(out, "s3cached_requests_parked_over_bound_total", "counter",
                         "Parkings that lasted longer than --park-warn (each is named in the "
                         "log).");
    if (!rc)
        rc = buf_printf(out, "s3cached_requests_parked_over_bound_total %" PRIu64 "\n",
                        LOAD(s->parked_over_total));
    return rc;
}

int stats_prometheus(struct stats *s, const struct cache_stats *cs,
                     const struct backend_counters *bc, const struct fair_stats *fs,
                     const struct cache_policy_report *pr, struct buf *out)
{
    CHECK_OBJ_NOTNULL(s, STATS_MAGIC);
    struct stats_row *cl = NULL, *bk = NULL;
    size_t ncl = 0, nbk = 0;
    int rc = snapshot_begin(s, &cs, &bc, &fs, &cl, &ncl, &bk, &nbk);
    if (rc)
        goto out;

    rc = prom_family(out, "s3cached_uptime_seconds", "gauge", "Seconds since the server started.");
    if (!rc)
        rc = buf_printf(out, "s3cached_uptime_seconds %.3f\n", stats_uptime_s(s));
    for (size_t i = 0; i < ARRAY_SIZE(prom_cache) && !rc; i++) {
        rc = prom_family(out, prom_cache[i].name, prom_cache[i].type, prom_cache[i].help);
        if (!rc)
            rc = buf_printf(out, "%s %" PRIu64 "\n", prom_cache[i].name,
                            field_u64(cs, prom_cache[i].off));
    }
    for (size_t i = 0; i < ARRAY_SIZE(prom_backend) && !rc; i++) {
        rc = prom_family(out, prom_backend[i].name, prom_backend[i].type, prom_backend[i].help);
        if (!rc)
            rc = buf_printf(out, "%s %" PRIu64 "\n", prom_backend[i].name,
                            field_u64(bc, prom_backend[i].off));
    }
    if (!rc)
        rc = prom_fair_gauges(out, fs);
    if (!rc)
        rc = prom_family(out, "s3cached_requests_total", "counter",
                         "Requests completed, by operation.");
    for (unsigned i = 0; i < STATS_OP__N && !rc; i++)
        rc = buf_printf(out, "s3cached_requests_total{op=\"%s\"} %" PRIu64 "\n", stats_op_names[i],
                        LOAD(s->requests_by_op[i]));
    if (!rc)
        rc = prom_family(out, "s3cached_request_errors_total", "counter",
                         "Error responses, by class (4xx, 5xx).");
    if (!rc)
        rc = buf_printf(out,
                        "s3cached_request_errors_total{class=\"4xx\"} %" PRIu64 "\n"
                        "s3cached_request_errors_total{class=\"5xx\"} %" PRIu64 "\n",
                        LOAD(s->err_4xx), LOAD(s->err_5xx));
    if (!rc)
        rc = prom_parked(s, out);
    size_t nall = ncl;
    ncl = split_peers(cl, ncl);
    if (!rc)
        rc = prom_rows(out, prom_client, ARRAY_SIZE(prom_client), cl, ncl, 1);
    if (!rc)
        rc = prom_family(out, "s3cached_client_in_flight_requests", "gauge",
                         "Requests in flight, by client.");
    for (size_t k = 0; k < ncl && !rc; k++) {
        rc = buf_puts(out, "s3cached_client_in_flight_requests");
        if (!rc)
            rc = prom_labels(out, &cl[k], 1, NULL);
        if (!rc)
            rc = buf_printf(out, " %u\n", cl[k].in_flight);
    }
    if (!rc)
        rc = prom_client_stall(out, cl, ncl);
    if (!rc)
        rc = prom_rows(out, prom_bucket, ARRAY_SIZE(prom_bucket), bk, nbk, 0);
    if (!rc)
        rc = prom_histograms(s, out);
    if (!rc)
        rc = prom_jobs_process(s, out);
    if (!rc)
        rc = prom_peers(out, cl + ncl, nall - ncl);
    if (!rc)
        rc = stats_policy_prom(out, pr);
out:
    free(cl);
    free(bk);
    return rc;
}
