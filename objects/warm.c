/*
 * warm.c: warm-up jobs. A job is created by POST /_/warm, resolves its key list on a
 * low-priority worker (listing a prefix, taking a key list, or reading a manifest object: one key
 * a line, warmed in that order), then the warm threads take its keys in order and make each
 * object fully cached, pinning it when asked. The warm threads are this module's own (as many
 * as objects may be warmed at once over all jobs: --warm-concurrency, at most half the worker
 * pool): they only wait, while the block fetches they start run on the work queue. So a
 * warm-up never holds more than half the workers, and live requests always find a thread.
 *   queued -> running -> done | failed | cancelled
 * Each job is saved as CACHE_DIR/warm/ID.json (atomically, progress at most once a second); after
 * a restart, jobs that were queued or running show as "interrupted", never vanish.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/backend.h"
#include "cache/cache.h"
#include "lib/conf.h"
#include "lib/hex.h"
#include "lib/json.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "warm.h"
#include "lib/workq.h"

#define WARM_MAX_JOBS 64
#define WARM_MAX_ERRORS 100
#define WARM_MAX_KEYS 1000000
#define WARM_MANIFEST_MAX (64u << 20)
#define WARM_PIN_SHARE_DIV CACHE_PIN_SHARE_DIV /* pinned objects: at most 1/2 of the cache */
#define WARM_ATTEMPTS 3

static int warm_transient(int rc)
{
    return rc == -S3E_SERVICE_UNAVAILABLE || rc == -S3E_GATEWAY_TIMEOUT || rc == -S3E_SLOW_DOWN ||
           rc == -S3E_INTERNAL || rc == -EIO || rc == -ETIMEDOUT || rc == -ECONNRESET;
}

struct warm_job {
    struct warm_job *next;
    unsigned refs;
    char id[24];
    char *bucket, *prefix, *manifest;
    char **keys;
    size_t nkeys, next_key;
    uint64_t *sizes;         /* per key, when known (prefix listings) */
    size_t skipped;          /* "fit": keys left out */
    struct errmsg why;       /* why the job failed as a whole */
    int64_t persisted_ns;
    uint64_t snap_seq, written_seq; /* persistence order (snap_seq: w->mu; written_seq: w->pmu) */
    int persist_warned;
    int pin, fit, cancel, shutdown;
    const char *state;
    unsigned workers;        /* keys being warmed by the warm threads */
    int resolved;            /* the key list is final: the warm threads may take keys */
    uint64_t objects_total, objects_done, objects_cached, bytes_total, bytes_done;
    struct buf errors;       /* JSON array items */
    unsigned nerrors;
    int64_t started_ns, finished_ns;
};

struct warm {
    const struct conf *cf;
    struct backend *be;
    struct cache *cache;
    struct workq *wq;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* jobs' workers ended */
    pthread_mutex_t pmu;     /* job files being written */
    pthread_cond_t slot_cv;  /* keys to warm, a job cancelled, or stop */
    unsigned slots;          /* warm threads: objects being warmed at once, over all jobs */
    pthread_t *threads;
    unsigned nthreads;       /* started */
    int stop;
    unsigned nworkers;       /* threads of the workq */
    struct warm_job *jobs;   /* newest first */
    unsigned seq, running;
};

static void job_release_locked(struct warm_job *j)
{
    if (--j->refs)
        return;
    for (size_t i = 0; i < j->nkeys; i++)
        free(j->keys[i]);
    free(j->keys);
    free(j->sizes);
    free(j->bucket);
    free(j->prefix);
    free(j->manifest);
    buf_free(&j->errors);
    free(j);
}

static void job_error_locked(struct warm_job *j, const char *key, int rc)
{
    if (j->nerrors++ >= WARM_MAX_ERRORS)
        return;
    if (j->errors.len)
        buf_puts(&j->errors, ",");
    buf_puts(&j->errors, "{\"key\":");
    buf_json_str(&j->errors, key);
    buf_puts(&j->errors, ",\"error\":");
    buf_json_str(&j->errors, s3c_strerror(rc));
    buf_puts(&j->errors, "}");
}

/* A saved job's errors_total and its listed errors ({"key", "error"}), as job_json_locked()
 * wrote them: what a job reports stays the same across a restart. */
static void job_load_errors(struct warm_job *j, const struct json *js)
{
    const struct json *errs = json_get(js, "errors");
    for (size_t i = 0; errs && errs->type == JSON_ARR && i < errs->n; i++) {
        const char *key = json_get_str(&errs->items[i], "key");
        const char *err = json_get_str(&errs->items[i], "error");
        if (!key || !err || j->nerrors >= WARM_MAX_ERRORS)
            continue;
        if (j->errors.len)
            buf_puts(&j->errors, ",");
        buf_puts(&j->errors, "{\"key\":");
        buf_json_str(&j->errors, key);
        buf_puts(&j->errors, ",\"error\":");
        buf_json_str(&j->errors, err);
        buf_puts(&j->errors, "}");
        j->nerrors++;
    }
    double total = json_get_num(js, "errors_total", 0);
    if (total > j->nerrors && total < 4e9)
        j->nerrors = (unsigned)total;
}

static int job_add_key(struct warm_job *j, const char *k, size_t len)
{
    if (j->nkeys >= WARM_MAX_KEYS)
        return -S3E_INVALID_ARGUMENT;
    if (j->nkeys % 1024 == 0) {
        char **nk = realloc(j->keys, (j->nkeys + 1024) * sizeof(char *));
        if (!nk)
            return -ENOMEM;
        j->keys = nk;
    }
    if (!(j->keys[j->nkeys] = strndup(k, len)))
        return -ENOMEM;
    j->nkeys++;
    return 0;
}

/* ------------------------------------------------------------------ persistence */

int warm_object(struct warm *w, const char *bucket, const char *key)
{
    pthread_mutex_lock(&w->mu);
    unsigned running = w->running;
    pthread_mutex_unlock(&w->mu);
    if (running >= WARM_MAX_JOBS / 2) { /* a burst of writes: the history stays bounded */
        log_debug("not warming %s/%s: %u warm-up jobs unfinished", bucket, key, running);
        return -EBUSY;
    }
    struct buf body, out;
    struct errmsg em = {{0}};
    buf_init(&body, 16384);
    buf_init(&out, 256);
    int rc = buf_puts(&body, "{\"bucket\":") || buf_json_str(&body, bucket) ||
                     buf_puts(&body, ",\"keys\":[") || buf_json_str(&body, key) ||
                     buf_puts(&body, "]}")
                 ? -ENOMEM
                 : warm_start(w, body.p, body.len, &out, &em);
    buf_free(&body);
    buf_free(&out);
    if (rc)
        log_debug("not warming %s/%s: %s", bucket, key, em.buf[0] ? em.buf : s3c_strerror(rc));
    return rc;
}

static void job_json_locked(const struct warm_job *j, struct buf *b);

/* Writes CACHE_DIR/warm/ID.json atomically (temp, fsync, rename). Best effort: a job whose
 * state cannot be saved still runs; the failure is logged once per job. The JSON is taken under
 * w->mu, which is dropped for the file I/O (HTTP threads take it to report progress); w->pmu
 * orders the writers, and a snapshot older than one already written is not written. The caller
 * holds a reference to @j. */
static void job_persist_locked(struct warm *w, struct warm_job *j)
{
    char dir[4200], tmp[4300], path[4300];
    struct buf b;
    snprintf(dir, sizeof(dir), "%s/warm", w->cf->cache_dir);
    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, j->id);
    snprintf(path, sizeof(path), "%s/%s.json", dir, j->id);
    buf_init(&b, 4u << 20);
    job_json_locked(j, &b);
    j->persisted_ns = s3c_real_ns();
    uint64_t seq = ++j->snap_seq;
    pthread_mutex_unlock(&w->mu);

    pthread_mutex_lock(&w->pmu);
    if (seq > j->written_seq) {
        j->written_seq = seq;
        mkdir(dir, 0755);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        int ok = fd >= 0 && b.p && write(fd, b.p, b.len) == (ssize_t)b.len && fsync(fd) == 0;
        if (fd >= 0)
            close(fd);
        ok = ok && rename(tmp, path) == 0;
        if (!ok && !j->persist_warned) {
            j->persist_warned = 1;
            log_warn("warm: cannot save job %s in %s: %s", j->id, dir, strerror(errno));
            unlink(tmp);
        }
    }
    pthread_mutex_unlock(&w->pmu);
    buf_free(&b);
    pthread_mutex_lock(&w->mu);
}

/* At start: jobs saved by an earlier run. Those that were queued or running are reported as
 * "interrupted" (their progress is what they had saved); nothing is resumed automatically. */
static void warm_load(struct warm *w)
{
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s/warm", w->cf->cache_dir);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".json") || e->d_name[0] == '.')
            continue;
        char path[4500];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        struct buf b;
        char chunk[4096];
        size_t r;
        buf_init(&b, 4u << 20);
        while ((r = fread(chunk, 1, sizeof(chunk), f)) > 0 && !buf_append(&b, chunk, r))
            ;
        fclose(f);
        struct json *js = NULL;
        struct errmsg em;
        struct warm_job *j = NULL;
        if (b.p && !json_parse(b.p, b.len, &js, &em) && json_get_str(js, "job") &&
            json_get_str(js, "bucket") && (j = calloc(1, sizeof(*j)))) {
            j->refs = 1;
            buf_init(&j->errors, 1u << 20);
            snprintf(j->id, sizeof(j->id), "%s", json_get_str(js, "job"));
            j->bucket = strdup(json_get_str(js, "bucket"));
            const char *st = json_get_str(js, "state");
            static const char *const states[] = {"done", "failed", "cancelled", "interrupted"};
            j->state = "interrupted";
            for (size_t i = 0; st && i < ARRAY_SIZE(states); i++)
                if (!strcmp(st, states[i]))
                    j->state = states[i];
            j->pin = json_get(js, "pin") && json_get(js, "pin")->b;
            j->objects_total = (uint64_t)json_get_num(js, "objects_total", 0);
            j->objects_done = (uint64_t)json_get_num(js, "objects_done", 0);
            j->objects_cached = (uint64_t)json_get_num(js, "objects_cached_already", 0);
            j->bytes_total = (uint64_t)json_get_num(js, "bytes_total", 0);
            j->bytes_done = (uint64_t)json_get_num(js, "bytes_done", 0);
            j->started_ns = j->finished_ns = s3c_real_ns();
            job_load_errors(j, js);
            if (json_get_str(js, "message"))
                errmsg_set(&j->why, "%s", json_get_str(js, "message"));
            else if (!strcmp(j->state, "interrupted"))
                errmsg_set(&j->why, "the gateway stopped while this job ran; start it again");
            j->next = w->jobs;
            w->jobs = j;
            job_persist_locked(w, j);
        }
        json_free(js);
        buf_free(&b);
    }
    if (d)
        closedir(d);
}

/* ------------------------------------------------------------------ workers */

struct worker_arg {
    struct warm *w;
    struct warm_job *j;
};

static void job_finish_locked(struct warm *w, struct warm_job *j)
{
    if (j->shutdown) {
        j->state = "interrupted";
        errmsg_set(&j->why, "the gateway stopped while this job ran; start it again");
    } else if (j->cancel) {
        j->state = "cancelled";
    }
    else if (!strcmp(j->state, "running"))
        j->state = j->nerrors ? "failed" : "done";
    j->finished_ns = s3c_real_ns();
    job_persist_locked(w, j);
    w->running--;
    pthread_cond_broadcast(&w->cv);
}

/* Finishes @j once nothing of it is in flight and nothing more will start: every key taken, or
 * cancelled. May drop w->mu (job_persist_locked); the caller holds a reference to @j. */
static void job_maybe_finish_locked(struct warm *w, struct warm_job *j)
{
    if (j->resolved && !j->finished_ns && !j->workers &&
        (j->cancel || j->next_key >= j->nkeys - j->skipped))
        job_finish_locked(w, j);
}

/* The oldest running job with a key to take, or NULL. */
static struct warm_job *job_next_locked(struct warm *w)
{
    struct warm_job *pick = NULL;
    for (struct warm_job *j = w->jobs; j; j = j->next) /* newest first */
        if (j->resolved && !j->finished_ns && !j->cancel && j->next_key < j->nkeys - j->skipped)
            pick = j;
    return pick;
}

/* A warm thread: takes the next key of the oldest running job and makes it cached, until
 * warm_free(). Sleeps while there is nothing to warm. */
static void *warm_thread(void *arg)
{
    struct warm *w = arg;
    struct cache *c = w->cache;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        struct warm_job *j = NULL;
        while (!w->stop && !(j = job_next_locked(w)))
            pthread_cond_wait(&w->slot_cv, &w->mu);
        if (w->stop)
            break;
        const char *key = j->keys[j->next_key++];
        j->workers++;
        j->refs++;
        pthread_mutex_unlock(&w->mu);
        enum cache_outcome how = CACHE_MISS;
        int rc = 0;
        uint64_t size = 0;
        /* transient backend trouble: a few attempts with backoff (cut short by cancel) */
        for (int attempt = 0; attempt < WARM_ATTEMPTS; attempt++) {
            rc = cache_prefetch(c, j->bucket, key, j->pin, &how, &size, &j->cancel);
            if (!warm_transient(rc) || attempt + 1 == WARM_ATTEMPTS)
                break;
            for (unsigned ms = 0; ms < (200u << attempt) && !j->cancel; ms += 20)
                usleep(20000);
        }
        int cached = !rc && how == CACHE_HIT;
        pthread_mutex_lock(&w->mu);
        j->workers--;
        if (rc && !j->cancel) {
            job_error_locked(j, key, rc);
        } else if (!rc) {
            j->objects_done++;
            j->objects_cached += cached ? 1 : 0;
            j->bytes_done += size;
        }
        if (s3c_real_ns() - j->persisted_ns > 1000000000ll && !j->finished_ns)
            job_persist_locked(w, j);
        job_maybe_finish_locked(w, j);
        job_release_locked(j);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int manifest_data(void *cls, const void *p, size_t n)
{
    return buf_append(cls, p, n);
}

/* Resolves the key list (on a worker: listing and manifests talk to the backend). */
static int job_resolve(struct warm *w, struct warm_job *j)
{
    struct backend *be = w->be;
    int rc = 0;
    if (j->prefix) {
        char *marker = NULL;
        for (;;) {
            struct be_list_page pg = {0};
            struct be_list_req lr = {.bucket = j->bucket, .prefix = j->prefix,
                                     .marker = marker, .max_keys = 1000};
            rc = backend_list(be, &lr, &pg);
            if (rc)
                break;
            for (size_t i = 0; i < pg.n && !rc; i++) {
                if (pg.entries[i].is_prefix)
                    continue;
                rc = job_add_key(j, pg.entries[i].key, strlen(pg.entries[i].key));
                if (!rc && j->nkeys % 1024 == 1) {
                    uint64_t *ns = realloc(j->sizes, (j->nkeys + 1023) * sizeof(uint64_t));
                    if (!ns)
                        rc = -ENOMEM;
                    else
                        j->sizes = ns;
                }
                if (!rc)
                    j->sizes[j->nkeys - 1] = pg.entries[i].size;
                j->bytes_total += pg.entries[i].size;
            }
            free(marker);
            marker = pg.truncated && pg.next_marker ? strdup(pg.next_marker) : NULL;
            be_list_page_free(&pg);
            if (rc || !marker || j->cancel)
                break;
        }
        free(marker);
    } else if (j->manifest) {
        struct buf m;
        struct be_meta meta;
        buf_init(&m, WARM_MANIFEST_MAX);
        rc = backend_head(be, j->bucket, j->manifest, &meta);
        if (!rc && meta.size > WARM_MANIFEST_MAX)
            rc = -S3E_ENTITY_TOO_LARGE;
        if (!rc) {
            struct be_sink sink = {NULL, manifest_data, &m};
            rc = backend_get(be, j->bucket, j->manifest, 0, UINT64_MAX, &sink);
        }
        for (const char *p = m.p, *end = m.p ? m.p + m.len : NULL; !rc && p && p < end;) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
            if (l && p[l - 1] == '\r')
                l--;
            if (l)
                rc = job_add_key(j, p, l);
            p += (nl ? (size_t)(nl - p) + 1 : l);
        }
        buf_free(&m);
    }
    return rc;
}

/* A warm set must fit: the whole cache, or for pinned sets WARM_PIN_SHARE of it (less what is
 * pinned already). Sizes are known up front for prefixes (from the listing). With "fit", keys
 * are kept in order while they fit and the rest is reported as skipped. */
static int job_check_capacity(struct warm *w, struct warm_job *j)
{
    struct cache_stats cs;
    if (!j->bytes_total)
        return 0;
    cache_get_stats(w->cache, &cs);
    uint64_t room = j->pin ? cs.capacity_bytes / WARM_PIN_SHARE_DIV - S3C_MIN(cs.pinned_bytes, cs.capacity_bytes / WARM_PIN_SHARE_DIV)
                           : cs.capacity_bytes;
    if (j->bytes_total <= room)
        return 0;
    if (!j->fit) {
        errmsg_set(&j->why, "the warm set is %llu bytes but only %llu fit (%s); add \"fit\":true to warm what fits",
                   (unsigned long long)j->bytes_total, (unsigned long long)room,
                   j->pin ? "pinned bytes may use half the cache" : "the cache capacity");
        return -S3E_ENTITY_TOO_LARGE;
    }
    /* keep what fits, in order (sizes were recorded by the listing) */
    uint64_t used = 0;
    size_t keep = 0;
    while (keep < j->nkeys && used + j->sizes[keep] <= room)
        used += j->sizes[keep++];
    j->skipped = j->nkeys - keep;
    j->bytes_total = used;
    return 0;
}

static void job_main(void *arg)
{
    struct worker_arg *a = arg;
    struct warm *w = a->w;
    struct warm_job *j = a->j;
    pthread_mutex_lock(&w->mu);
    job_persist_locked(w, j); /* queued */
    pthread_mutex_unlock(&w->mu);
    int rc = job_resolve(w, j);
    if (!rc)
        rc = job_check_capacity(w, j);
    pthread_mutex_lock(&w->mu);
    if (rc) {
        if (!j->why.buf[0])
            errmsg_set(&j->why, "%s", s3c_strerror(rc));
        job_error_locked(j, j->manifest ? j->manifest : j->prefix ? j->prefix : "", rc);
        j->state = "failed";
        job_finish_locked(w, j);
    } else if (j->cancel) {
        job_finish_locked(w, j);
    } else {
        j->state = "running";
        j->objects_total = j->nkeys;
        j->resolved = 1; /* the warm threads take it from here, while this saves it */
        pthread_cond_broadcast(&w->slot_cv);
        job_persist_locked(w, j);
        job_maybe_finish_locked(w, j); /* nothing to warm, or cancelled meanwhile */
    }
    job_release_locked(j);
    pthread_mutex_unlock(&w->mu);
    free(a);
}

/* ------------------------------------------------------------------ API */

int warm_new(const struct conf *cf, struct backend *be, struct cache *c, struct workq *wq,
             struct warm **out)
{
    struct warm *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->cf = cf;
    w->be = be;
    w->cache = c;
    w->wq = wq;
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->pmu, NULL);
    pthread_cond_init(&w->cv, NULL);
    pthread_cond_init(&w->slot_cv, NULL);
    w->nworkers = workq_threads(wq);
    /* A warming object holds a warm thread (waiting) and at most one worker (its fetch run): at
     * most half the pool in warm-up fetches leaves the other half to live requests. */
    w->slots = S3C_MAX(1u, S3C_MIN((unsigned)S3C_MAX(1, cf->warm_concurrency),
                                   w->nworkers / 2));
    pthread_mutex_lock(&w->mu);
    warm_load(w);
    pthread_mutex_unlock(&w->mu);
    int rc = 0;
    if (!(w->threads = calloc(w->slots, sizeof(*w->threads))))
        rc = -ENOMEM;
    while (!rc && w->nthreads < w->slots) {
        rc = -pthread_create(&w->threads[w->nthreads], NULL, warm_thread, w);
        w->nthreads += !rc;
    }
    if (rc) {
        warm_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

void warm_free(struct warm *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    for (struct warm_job *j = w->jobs; j; j = j->next)
        if (!j->finished_ns)
            j->cancel = j->shutdown = 1;
    pthread_cond_broadcast(&w->slot_cv);
    for (int again = 1; again;) { /* finish idle running jobs (finishing drops w->mu) */
        again = 0;
        for (struct warm_job *j = w->jobs; j && !again; j = j->next)
            if (j->resolved && !j->finished_ns && !j->workers) {
                j->refs++;
                job_maybe_finish_locked(w, j);
                job_release_locked(j);
                again = 1;
            }
    }
    while (w->running) /* keys in flight end; jobs still resolving see the cancel */
        pthread_cond_wait(&w->cv, &w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->slot_cv);
    pthread_mutex_unlock(&w->mu);
    for (unsigned i = 0; i < w->nthreads; i++)
        pthread_join(w->threads[i], NULL);
    free(w->threads);
    pthread_mutex_lock(&w->mu);
    while (w->jobs) {
        struct warm_job *j = w->jobs;
        w->jobs = j->next;
        job_release_locked(j);
    }
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->pmu);
    pthread_cond_destroy(&w->cv);
    pthread_cond_destroy(&w->slot_cv);
    free(w);
}

/* Parses a warm/unpin body into a new job (not yet started). */
static int job_parse(const char *body, size_t len, struct warm_job **out, struct errmsg *em)
{
    struct json *js = NULL;
    int rc = json_parse(body ? body : "", len, &js, em);
    if (rc)
        return rc == -ENOMEM ? rc : -S3E_INVALID_ARGUMENT;
    struct warm_job *j = calloc(1, sizeof(*j));
    if (!j) {
        json_free(js);
        return -ENOMEM;
    }
    j->refs = 1;
    j->state = "queued";
    buf_init(&j->errors, 1u << 20);
    const char *bucket = json_get_str(js, "bucket");
    const char *prefix = json_get_str(js, "prefix");
    const char *manifest = json_get_str(js, "manifest");
    const struct json *keys = json_get(js, "keys"), *hexkeys = json_get(js, "keys_hex");
    const struct json *pin = json_get(js, "pin"), *fit = json_get(js, "fit");
    int sources = !!prefix + !!manifest + !!(keys || hexkeys);
    rc = 0;
    if (!bucket || backend_check_bucket_name(bucket)) {
        errmsg_set(em, "\"bucket\" must name a bucket");
        rc = -S3E_INVALID_ARGUMENT;
    } else if (sources != 1) {
        errmsg_set(em, "give exactly one of \"prefix\", \"keys\" or \"manifest\"");
        rc = -S3E_INVALID_ARGUMENT;
    } else if (keys && keys->type != JSON_ARR) {
        errmsg_set(em, "\"keys\" must be an array of strings");
        rc = -S3E_INVALID_ARGUMENT;
    }
    j->pin = pin && pin->type == JSON_BOOL && pin->b;
    j->fit = fit && fit->type == JSON_BOOL && fit->b;
    if (!rc && !(j->bucket = strdup(bucket)))
        rc = -ENOMEM;
    if (!rc && prefix && !(j->prefix = strdup(prefix)))
        rc = -ENOMEM;
    if (!rc && manifest) {
        if (backend_check_key(manifest, strlen(manifest))) {
            errmsg_set(em, "\"manifest\" is not a valid key");
            rc = -S3E_INVALID_ARGUMENT;
        } else if (!(j->manifest = strdup(manifest))) {
            rc = -ENOMEM;
        }
    }
    /* "keys_hex": the keys, each its bytes in hex (a key that is not UTF-8; a cluster
     * warm-up's share sends both): read instead of "keys" */
    if (!rc && hexkeys && (hexkeys->type != JSON_ARR || (keys && hexkeys->n != keys->n))) {
        errmsg_set(em, "\"keys_hex\" must be an array of hex strings, one per key");
        rc = -S3E_INVALID_ARGUMENT;
    }
    size_t nkeys = hexkeys ? hexkeys->n : keys ? keys->n : 0;
    for (size_t i = 0; !rc && i < nkeys; i++) {
        const struct json *h = hexkeys ? &hexkeys->items[i] : NULL;
        const struct json *k = h ? NULL : &keys->items[i];
        char *raw = NULL;
        const char *key = k && k->type == JSON_STR ? k->str : NULL;
        if (h && (h->type != JSON_STR || hex_decode_str(h->str, &raw)))
            key = NULL;
        else if (h)
            key = raw;
        if (!key || backend_check_key(key, strlen(key))) {
            errmsg_set(em, "\"%s\"[%zu] is not a valid key", h ? "keys_hex" : "keys", i);
            rc = -S3E_INVALID_ARGUMENT;
        } else {
            rc = job_add_key(j, key, strlen(key));
        }
        free(raw);
    }
    /* "sizes" (a cluster warm-up's share: the listing's sizes of its keys) */
    const struct json *sizes = json_get(js, "sizes");
    if (!rc && sizes && (sizes->type != JSON_ARR || !nkeys || sizes->n != nkeys)) {
        errmsg_set(em, "\"sizes\" must be an array of numbers, one per key");
        rc = -S3E_INVALID_ARGUMENT;
    }
    if (!rc && sizes && j->nkeys && !(j->sizes = calloc(j->nkeys, sizeof(uint64_t))))
        rc = -ENOMEM;
    for (size_t i = 0; !rc && sizes && i < sizes->n; i++) {
        if (sizes->items[i].type != JSON_NUM || sizes->items[i].num < 0) {
            errmsg_set(em, "\"sizes\"[%zu] is not a size", i);
            rc = -S3E_INVALID_ARGUMENT;
        } else {
            j->sizes[i] = (uint64_t)sizes->items[i].num;
            j->bytes_total += j->sizes[i];
        }
    }
    json_free(js);
    if (rc) {
        j->refs = 1;
        job_release_locked(j);
        return rc;
    }
    *out = j;
    return 0;
}

int warm_start(struct warm *w, const char *body, size_t len, struct buf *out, struct errmsg *em)
{
    struct warm_job *j;
    if (w->nworkers < 2) {
        /* a warm-up's fetches may hold half the workers: with one, live requests would wait */
        errmsg_set(em, "warm-up needs at least 2 worker threads (--workers)");
        return -S3E_INVALID_REQUEST;
    }
    int rc = job_parse(body, len, &j, em);
    if (rc)
        return rc;
    struct worker_arg *a = malloc(sizeof(*a));
    if (!a) {
        job_release_locked(j);
        return -ENOMEM;
    }
    pthread_mutex_lock(&w->mu);
    snprintf(j->id, sizeof(j->id), "%08x%04x", (unsigned)(s3c_real_ns() / 1000000000ll),
             ++w->seq & 0xffff);
    j->started_ns = s3c_real_ns();
    j->objects_total = j->nkeys;
    j->next = w->jobs;
    w->jobs = j;
    /* keep a bounded history: drop the oldest finished jobs */
    unsigned n = 0;
    for (struct warm_job **pp = &w->jobs; *pp;) {
        struct warm_job *x = *pp;
        if (++n > WARM_MAX_JOBS && x->finished_ns) {
            char path[4300];
            snprintf(path, sizeof(path), "%s/warm/%s.json", w->cf->cache_dir, x->id);
            unlink(path);
            *pp = x->next;
            job_release_locked(x);
            continue;
        }
        pp = &x->next;
    }
    j->refs++; /* the job's workers */
    w->running++;
    *a = (struct worker_arg){w, j}; /* job_main saves it first thing */
    rc = workq_submit(w->wq, WORKQ_LOW, job_main, a);
    if (rc) {
        j->refs--;
        w->running--;
        j->state = "failed";
        free(a);
    } else {
        buf_printf(out, "{\"job\":\"%s\"}\n", j->id);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

static void job_json_locked(const struct warm_job *j, struct buf *b)
{
    char ts[32];
    buf_printf(b, "{\"job\":\"%s\",\"state\":\"%s\",\"bucket\":", j->id, j->state);
    buf_json_str(b, j->bucket);
    buf_printf(b, ",\"pin\":%s,\"objects_total\":%llu,\"objects_done\":%llu,"
                  "\"objects_cached_already\":%llu,\"bytes_total\":%llu,\"bytes_done\":%llu,"
                  "\"errors_total\":%u,\"errors\":[%s]",
               j->pin ? "true" : "false", (unsigned long long)(j->objects_total - j->skipped),
               (unsigned long long)j->objects_done, (unsigned long long)j->objects_cached,
               (unsigned long long)S3C_MAX(j->bytes_total, j->bytes_done),
               (unsigned long long)j->bytes_done, j->nerrors, j->errors.p ? j->errors.p : "");
    if (j->skipped)
        buf_printf(b, ",\"objects_skipped\":%zu", j->skipped);
    if (j->why.buf[0]) {
        buf_puts(b, ",\"message\":");
        buf_json_str(b, j->why.buf);
    }
    s3c_iso8601(j->started_ns, ts);
    buf_printf(b, ",\"started\":\"%s\"", ts);
    if (j->finished_ns) {
        s3c_iso8601(j->finished_ns, ts);
        buf_printf(b, ",\"finished\":\"%s\"", ts);
    }
    buf_puts(b, "}");
}

int warm_status(struct warm *w, const char *id, struct buf *out)
{
    int rc = id ? -S3E_NOT_FOUND : 0;
    pthread_mutex_lock(&w->mu);
    if (!id)
        buf_puts(out, "{\"jobs\":[");
    int first = 1;
    for (struct warm_job *j = w->jobs; j; j = j->next) {
        if (id && strcmp(id, j->id))
            continue;
        if (!id && !first)
            buf_puts(out, ",");
        job_json_locked(j, out);
        first = 0;
        rc = 0;
    }
    if (!id)
        buf_puts(out, "]}");
    buf_puts(out, "\n");
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int warm_cancel(struct warm *w, const char *id)
{
    int rc = -S3E_NOT_FOUND;
    pthread_mutex_lock(&w->mu);
    struct warm_job *j = w->jobs;
    while (j && strcmp(id, j->id))
        j = j->next;
    if (j) {
        j->cancel = 1;
        j->refs++;
        job_maybe_finish_locked(w, j); /* no key in flight: it ends now */
        job_release_locked(j);
        rc = 0;
    }
    pthread_cond_broadcast(&w->slot_cv);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int warm_unpin(struct warm *w, const char *body, size_t len, uint64_t *n, struct errmsg *em)
{
    struct warm_job *j;
    int rc = job_parse(body, len, &j, em);
    if (rc)
        return rc;
    rc = job_resolve(w, j);
    *n = 0;
    for (size_t i = 0; !rc && i < j->nkeys; i++)
        if (cache_pin(w->cache, j->bucket, j->keys[i], 0) == 0)
            (*n)++;
    pthread_mutex_lock(&w->mu);
    job_release_locked(j);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int warm_validate(const char *body, size_t len, struct errmsg *em)
{
    struct warm_job *j;
    int rc = job_parse(body, len, &j, em);
    if (!rc)
        job_release_locked(j); /* never shared: no lock needed */
    return rc;
}

int warm_resolve(struct warm *w, const char *body, size_t len, struct warm_keys *out,
                 struct errmsg *em)
{
    struct warm_job *j;
    memset(out, 0, sizeof(*out));
    int rc = job_parse(body, len, &j, em);
    if (rc)
        return rc;
    rc = job_resolve(w, j);
    if (rc) {
        errmsg_set(em, "%s", s3c_strerror(rc));
    } else {
        out->bucket = j->bucket;
        out->keys = j->keys;
        out->sizes = j->sizes;
        out->n = j->nkeys;
        out->pin = j->pin;
        out->fit = j->fit;
        j->bucket = NULL; /* moved */
        j->keys = NULL;
        j->sizes = NULL;
        j->nkeys = 0;
    }
    pthread_mutex_lock(&w->mu);
    job_release_locked(j);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void warm_keys_free(struct warm_keys *k)
{
    for (size_t i = 0; i < k->n; i++)
        free(k->keys[i]);
    free(k->keys);
    free(k->sizes);
    free(k->bucket);
    memset(k, 0, sizeof(*k));
}
