/*
 * drain.c: the write-back engine (drain.h). Objects written in --write-mode back are adopted
 * into the cache as dirty entries (the cache's journal: cache.h, "write-back"); this file
 * drains them to the backend with a few threads of its own, oldest first, and marks each clean
 * only after the backend confirmed it. It also keeps the dirty limit, excludes gateway writes
 * of a key from its drain (drain_write_begin/end), and answers flushes.
 *
 * Memory mirrors the journal: one struct dirty per dirty key, loaded from the journal at open
 * (cache_journal_scan()), added when the cache says a dirty version was adopted (the note
 * hook), removed when the drain of its newest version is confirmed or the key is forgotten
 * (the forget hook). dr->mu guards it all; nothing holds dr->mu across backend, disk or index
 * I/O, nor across a call into the cache, but drain_open() while it loads the journal (no other
 * thread can take it yet).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "cache/cache.h"
#include "lib/arr.h"
#include "lib/conf.h"
#include "lib/log.h"
#include "lib/s3c.h"
#include "lib/s3err.h"
#include "drain.h"

#define DRAIN_BACKOFF_MIN_MS 200
#define DRAIN_BACKOFF_MAX_MS 30000
#define DRAIN_THREADS_MAX 32
#define DRAIN_ERR_CLOSING (-S3E_SERVICE_UNAVAILABLE)

struct dirty {
    struct dirty *next;
    char *bucket, *key;
    uint64_t version, size;
    uint64_t seq;       /* of the newest write */
    uint64_t since_seq; /* of the oldest write not yet on the backend */
    int64_t since_ns;   /* when that write was acknowledged (oldest dirty age) */
    int inflight;       /* a drainer is uploading (some version of) it */
    int cancel;         /* atomic: stop that upload, it is superseded (an overwrite, a DELETE,
                         * a gateway write of the key); the record stays allocated meanwhile */
    unsigned attempts;
    int64_t next_try_ms;
};

struct wlock {
    struct wlock *next;
    char *bucket, *key;
};

/* A flush being waited for (drain_flush_start): answered by the flush thread. */
struct flush_wait {
    struct flush_wait *next;
    char *bucket, *prefix;      /* NULL: all */
    uint64_t upto;              /* dr->seq at its start: only what was written before counts */
    uint64_t up0, upb0;         /* dr->uploaded_* at its start */
    int64_t t0_ms, deadline_ms; /* deadline < 0: none */
    drain_flush_cb cb;
    void *arg;
};

struct drain {
    const struct conf *cf;
    struct cache *c;
    struct backend *be;
    int attached; /* its hooks are attached to the cache */
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* drainers: new work, closing */
    pthread_cond_t done_cv; /* flush thread, write locks: an upload ended, a flush began */
    struct flush_wait *waits;
    pthread_t flush_thread;
    int flush_thread_started;
    struct dirty *list; /* unordered; small (bounded by the dirty limit) */
    struct wlock *locks;
    uint64_t seq;
    uint64_t dirty_bytes, staged_bytes, limit;
    unsigned nthreads;
    pthread_t threads[DRAIN_THREADS_MAX];
    int closing;
    int flush_abort; /* the server is stopping: flushes return now (drain_flush_abort) */
    /* stats */
    uint64_t uploaded_objects, uploaded_bytes, errors, cancelled;
    int64_t rate_t0_ms;
    uint64_t rate_b0, rate_bps;
    drain_cleaned_f *cleaned; /* drain_on_cleaned() (mu) */
    void *cleaned_cls;
    unsigned cleaned_busy; /* its calls in flight (mu; done_cv when one ends) */
};

static int64_t now_ms(void)
{
    return s3c_mono_ns() / 1000000;
}

static int key_eq(const char *b1, const char *k1, const char *b2, const char *k2)
{
    return strcmp(k1, k2) == 0 && strcmp(b1, b2) == 0;
}

static struct dirty *find_locked(struct drain *dr, const char *bucket, const char *key)
{
    for (struct dirty *d = dr->list; d; d = d->next)
        if (key_eq(d->bucket, d->key, bucket, key))
            return d;
    return NULL;
}

static int locked_locked(struct drain *dr, const char *bucket, const char *key)
{
    for (struct wlock *l = dr->locks; l; l = l->next)
        if (key_eq(l->bucket, l->key, bucket, key))
            return 1;
    return 0;
}

static void wlock_free(struct wlock *l)
{
    if (!l)
        return;
    free(l->bucket);
    free(l->key);
    free(l);
}

static void dirty_free(struct dirty *d)
{
    if (!d)
        return;
    free(d->bucket);
    free(d->key);
    free(d);
}

static void unlink_locked(struct drain *dr, struct dirty *d)
{
    for (struct dirty **p = &dr->list; *p; p = &(*p)->next) {
        if (*p == d) {
            *p = d->next;
            break;
        }
    }
    dr->dirty_bytes -= S3C_MIN(dr->dirty_bytes, d->size);
    dirty_free(d);
}

/* Stops the upload of @d in flight (the drainer sees -ECANCELED). mu held. */
static void cancel_locked(struct dirty *d)
{
    __atomic_store_n(&d->cancel, 1, __ATOMIC_RELAXED);
}

/* Adds or updates the record of a dirty (@bucket, @key) at @version. mu held. */
static int note_locked(struct drain *dr, const char *bucket, const char *key, uint64_t version,
                       uint64_t size)
{
    struct dirty *d = find_locked(dr, bucket, key);
    if (!d) {
        d = calloc(1, sizeof(*d));
        if (!d || !(d->bucket = strdup(bucket)) || !(d->key = strdup(key))) {
            dirty_free(d);
            return -ENOMEM;
        }
        d->since_seq = dr->seq + 1;
        d->since_ns = s3c_real_ns();
        d->next = dr->list;
        dr->list = d;
    } else {
        dr->dirty_bytes -= S3C_MIN(dr->dirty_bytes, d->size);
        if (d->inflight && d->version != version)
            cancel_locked(d); /* an overwrite: only the newest version goes upstream */
    }
    d->version = version;
    d->size = size;
    d->seq = ++dr->seq;
    d->attempts = 0;
    d->next_try_ms = 0;
    dr->dirty_bytes += size;
    pthread_cond_signal(&dr->work_cv);
    return 0;
}

/* The oldest dirty record a drainer may take now; *@wait_ms how long until one may be due. */
static struct dirty *pick_locked(struct drain *dr, int64_t *wait_ms)
{
    struct dirty *best = NULL;
    int64_t now = now_ms();
    *wait_ms = 1000;
    for (struct dirty *d = dr->list; d; d = d->next) {
        if (d->inflight || locked_locked(dr, d->bucket, d->key))
            continue;
        if (d->next_try_ms > now) {
            *wait_ms = S3C_MIN(*wait_ms, d->next_try_ms - now);
            continue;
        }
        if (!best || d->seq < best->seq)
            best = d;
    }
    return best;
}

static unsigned backoff_ms(unsigned attempts)
{
    unsigned ms = DRAIN_BACKOFF_MIN_MS;
    for (unsigned i = 1; i < attempts && ms < DRAIN_BACKOFF_MAX_MS; i++)
        ms *= 2;
    ms = S3C_MIN(ms, (unsigned)DRAIN_BACKOFF_MAX_MS);
    unsigned r = 0;
    if (getrandom(&r, sizeof(r), 0) != sizeof(r))
        r = 0;
    return ms / 2 + r % (ms / 2 + 1); /* "equal jitter" */
}

/* Uploads @version of (@bucket, @key) from its cache file. 0, or the backend's/disk's error
 * (-ECANCELED once *@cancel is set). *@etag and *@mtime_ns: the backend's view of what it
 * stored (empty/0 when unknown). */
static int upload_one(struct drain *dr, const char *bucket, const char *key, uint64_t version,
                      const int *cancel, char etag[BE_ETAG_MAX], int64_t *mtime_ns)
{
    struct be_meta m;
    char p[4096];
    int fd = -1;
    etag[0] = '\0';
    *mtime_ns = 0;
    int rc = cache_journal_open(dr->c, bucket, key, version, &fd, &m, p);
    if (rc) {
        if (rc != -ESTALE && p[0])
            log_err("drain: \"%s/%s\": cannot open its cache file %s: %s", bucket, key, p,
                    strerror(-rc));
        return rc;
    }
    rc = backend_put_cancellable(dr->be, bucket, key, fd, m.size, &m, cancel);
    close(fd);
    if (rc)
        return rc;
    struct be_meta stored;
    if (backend_head(dr->be, bucket, key, &stored) == 0 && stored.size == m.size) {
        snprintf(etag, BE_ETAG_MAX, "%s", stored.etag);
        *mtime_ns = stored.mtime_ns;
    }
    return 0;
}

/* Runs the drain_on_cleaned() hook for (@bucket, @key), counted so that the hook can be
 * replaced (or removed at close) only once no call of it is in flight. */
static void drain_tell_cleaned(struct drain *dr, const char *bucket, const char *key)
{
    pthread_mutex_lock(&dr->mu);
    drain_cleaned_f *fn = dr->cleaned;
    void *cls = dr->cleaned_cls;
    if (fn)
        dr->cleaned_busy++;
    pthread_mutex_unlock(&dr->mu);
    if (!fn)
        return;
    fn(cls, bucket, key);
    pthread_mutex_lock(&dr->mu);
    dr->cleaned_busy--;
    pthread_cond_broadcast(&dr->done_cv);
    pthread_mutex_unlock(&dr->mu);
}

static void *drainer(void *arg)
{
    struct drain *dr = arg;
    pthread_mutex_lock(&dr->mu);
    while (!dr->closing) {
        int64_t wait_ms;
        struct dirty *d = pick_locked(dr, &wait_ms);
        if (!d) {
            struct timespec ts;
            s3c_deadline(CLOCK_REALTIME, wait_ms, &ts);
            pthread_cond_timedwait(&dr->work_cv, &dr->mu, &ts);
            continue;
        }
        d->inflight = 1;
        __atomic_store_n(&d->cancel, 0, __ATOMIC_RELAXED);
        const int *cancel = &d->cancel; /* d stays allocated while inflight */
        uint64_t version = d->version, size = d->size;
        char *bucket = strdup(d->bucket), *key = strdup(d->key);
        pthread_mutex_unlock(&dr->mu);

        char etag[BE_ETAG_MAX];
        int64_t mtime = 0;
        int rc = bucket && key ? upload_one(dr, bucket, key, version, cancel, etag, &mtime)
                               : -ENOMEM;
        if (rc == 0) {
            int crc = cache_journal_clean(dr->c, bucket, key, version, etag, mtime);
            if (crc != 0 && crc != -ESTALE)
                log_err("drain: \"%s/%s\": marking clean: %s", bucket, key, s3c_strerror(crc));
            drain_tell_cleaned(dr, bucket, key);
        }

        pthread_mutex_lock(&dr->mu);
        /* d is still the key's record: one is never freed while inflight (a forget or an
         * overwrite meanwhile set its version to 0 or to the newer one) */
        d->inflight = 0;
        if (rc == 0) {
            dr->uploaded_objects++;
            dr->uploaded_bytes += size;
            if (d && (d->version == version || !d->version))
                unlink_locked(dr, d);
        } else if (rc == -ESTALE) {
            /* overwritten or deleted while we looked: the newer record (if any) stays */
            if (d && (d->version == version || !d->version))
                unlink_locked(dr, d);
        } else if (rc == -ECANCELED) {
            /* superseded: a newer version (if any) is drained next, no backoff; a key that a
             * gateway write holds is not picked until that write ends */
            dr->cancelled++;
            if (d && !d->version)
                unlink_locked(dr, d);
        } else if (d && !d->version) {
            unlink_locked(dr, d);
        } else if (d) {
            dr->errors++;
            d->attempts++;
            d->next_try_ms = now_ms() + backoff_ms(d->attempts);
            if (d->attempts == 1 || d->attempts % 20 == 0)
                log_warn("drain: \"%s/%s\" (%llu bytes) not uploaded (attempt %u, retrying): %s",
                         d->bucket, d->key, (unsigned long long)size, d->attempts,
                         s3c_strerror(rc));
        }
        pthread_cond_broadcast(&dr->done_cv);
        pthread_mutex_unlock(&dr->mu);
        cache_journal_unlinks(dr->c);
        free(bucket);
        free(key);
        pthread_mutex_lock(&dr->mu);
    }
    pthread_mutex_unlock(&dr->mu);
    return NULL;
}

/* ---- open/close ------------------------------------------------------------------------ */

struct load_arg {
    struct drain *dr;
    int err;
    uint64_t n;
};

static int load_cb(void *arg, const char *bucket, const char *key, uint64_t version, uint64_t size)
{
    struct load_arg *la = arg;
    int rc = note_locked(la->dr, bucket, key, version, size);
    if (rc) {
        la->err = rc;
        return 1;
    }
    la->n++;
    return 0;
}

/* The cache's hooks (cache_journal_ops). */
static void hook_note(void *cls, const char *bucket, const char *key, uint64_t version,
                      uint64_t size)
{
    struct drain *dr = cls;
    pthread_mutex_lock(&dr->mu);
    if (note_locked(dr, bucket, key, version, size))
        log_err("drain: no memory to track \"%s/%s\": it drains after a restart", bucket, key);
    pthread_mutex_unlock(&dr->mu);
}

static void hook_forget(void *cls, const char *bucket, const char *key)
{
    struct drain *dr = cls;
    pthread_mutex_lock(&dr->mu);
    struct dirty *d = find_locked(dr, bucket, key);
    if (d && !d->inflight) {
        unlink_locked(dr, d);
    } else if (d) {
        d->version = 0; /* the drainer drops it when its upload ends */
        cancel_locked(d);
    }
    pthread_cond_broadcast(&dr->done_cv);
    pthread_mutex_unlock(&dr->mu);
}

static void hook_stats(void *cls, struct cache_stats *out)
{
    struct drain_stats ds;
    drain_get_stats(cls, &ds);
    out->dirty_limit_bytes = ds.limit_bytes;
    out->dirty_staged_bytes = ds.staged_bytes;
    out->drain_uploaded_objects = ds.uploaded_objects;
    out->drain_uploaded_bytes = ds.uploaded_bytes;
    out->drain_errors = ds.errors;
    out->drain_inflight = ds.inflight;
    out->drain_cancelled = ds.cancelled;
    out->drain_rate_bps = ds.rate_bps;
    out->drain_oldest_dirty_age_s = ds.oldest_dirty_age_s;
}

static void *flusher(void *arg);

int drain_open(const struct conf *cf, struct cache *c, struct backend *be, struct drain **out,
               struct errmsg *em)
{
    struct drain *dr = calloc(1, sizeof(*dr));
    *out = NULL;
    if (!dr)
        return -ENOMEM;
    dr->cf = cf;
    dr->c = c;
    dr->be = be;
    pthread_mutex_init(&dr->mu, NULL);
    pthread_cond_init(&dr->work_cv, NULL);
    pthread_cond_init(&dr->done_cv, NULL);
    dr->limit = cf->dirty_limit ? cf->dirty_limit : cf->cache_size / 2;
    dr->rate_t0_ms = now_ms();
    struct load_arg la = {dr, 0, 0};
    pthread_mutex_lock(&dr->mu);
    int rc = cache_journal_scan(c, load_cb, &la);
    pthread_mutex_unlock(&dr->mu);
    if (!rc)
        rc = la.err;
    if (rc) {
        errmsg_set(em, "cache: reading the write-back journal: %s", s3c_strerror(rc));
        drain_close(dr);
        return rc;
    }
    if (la.n)
        log_info("drain: %llu objects (%llu bytes) written back but not yet on the backend: "
                 "draining them",
                 (unsigned long long)la.n, (unsigned long long)dr->dirty_bytes);
    /* from now on the cache tells of new dirty versions and forgotten keys */
    struct cache_journal_ops ops = {.note = hook_note,
                                    .forget = hook_forget,
                                    .stats = hook_stats,
                                    .cls = dr};
    cache_journal_attach(c, &ops);
    dr->attached = 1;
    int64_t want = cf->drain_concurrency > 0 ? cf->drain_concurrency : 4;
    want = S3C_MIN(want, (int64_t)DRAIN_THREADS_MAX);
    if (pthread_create(&dr->flush_thread, NULL, flusher, dr)) {
        errmsg_set(em, "cache: starting the flush thread: %s", strerror(errno));
        drain_close(dr);
        return -EAGAIN;
    }
    dr->flush_thread_started = 1;
    for (int64_t i = 0; i < want; i++) {
        if (pthread_create(&dr->threads[dr->nthreads], NULL, drainer, dr)) {
            errmsg_set(em, "cache: starting drain threads: %s", strerror(errno));
            drain_close(dr);
            return -EAGAIN;
        }
        dr->nthreads++;
    }
    *out = dr;
    return 0;
}

int drain_close(struct drain *dr)
{
    if (!dr)
        return 0;
    pthread_mutex_lock(&dr->mu);
    dr->closing = 1;
    pthread_cond_broadcast(&dr->work_cv);
    pthread_cond_broadcast(&dr->done_cv);
    int flusher_started = dr->flush_thread_started;
    dr->flush_thread_started = 0; /* flushes from now on fail at once */
    pthread_mutex_unlock(&dr->mu);
    if (flusher_started) /* it answers every flush still waiting (closing), then ends */
        pthread_join(dr->flush_thread, NULL);
    /* An upload in flight may take long (a big object, a slow backend): wait a bounded time,
     * then leave it; its journal row makes the next start upload it again. */
    struct timespec until;
    s3c_deadline(CLOCK_REALTIME, dr->cf->shutdown_timeout > 0 ? dr->cf->shutdown_timeout : 10000,
                 &until);
    for (unsigned i = 0; i < dr->nthreads; i++) {
        if (pthread_timedjoin_np(dr->threads[i], NULL, &until)) {
            log_warn("drain: uploads still in flight at exit: they start over at the next start");
            drain_on_cleaned(dr, NULL, NULL); /* what the hook uses may go after this */
            return -EBUSY; /* threads still use the cache: it must stay allocated */
        }
    }
    if (dr->attached) /* waits for the cache's calls of the hooks in flight */
        cache_journal_detach(dr->c);
    while (dr->list) {
        struct dirty *d = dr->list;
        dr->list = d->next;
        dirty_free(d);
    }
    while (dr->locks) {
        struct wlock *l = dr->locks;
        dr->locks = l->next;
        wlock_free(l);
    }
    pthread_mutex_destroy(&dr->mu);
    pthread_cond_destroy(&dr->work_cv);
    pthread_cond_destroy(&dr->done_cv);
    free(dr);
    return 0;
}

/* ---- the public API ------------------------------------------------------------------- */

int drain_write_begin(struct drain *dr, const char *bucket, const char *key)
{
    struct wlock *l = calloc(1, sizeof(*l));
    if (!l || !(l->bucket = strdup(bucket)) || !(l->key = strdup(key))) {
        wlock_free(l);
        return -ENOMEM;
    }
    pthread_mutex_lock(&dr->mu);
    l->next = dr->locks;
    dr->locks = l;
    for (;;) {
        struct dirty *d = find_locked(dr, bucket, key);
        if (!d || !d->inflight || dr->closing)
            break;
        cancel_locked(d); /* this write supersedes it; a write that fails leaves it dirty */
        pthread_cond_wait(&dr->done_cv, &dr->mu);
    }
    pthread_mutex_unlock(&dr->mu);
    return 0;
}

void drain_write_end(struct drain *dr, const char *bucket, const char *key)
{
    pthread_mutex_lock(&dr->mu);
    for (struct wlock **p = &dr->locks; *p; p = &(*p)->next) {
        if (key_eq((*p)->bucket, (*p)->key, bucket, key)) {
            struct wlock *l = *p;
            *p = l->next;
            wlock_free(l);
            break;
        }
    }
    pthread_cond_signal(&dr->work_cv);
    pthread_mutex_unlock(&dr->mu);
}

int drain_admit(struct drain *dr, uint64_t bytes)
{
    int rc = 0;
    pthread_mutex_lock(&dr->mu);
    if (dr->dirty_bytes + dr->staged_bytes + bytes > dr->limit && bytes)
        rc = bytes > dr->limit ? -S3E_ENTITY_TOO_LARGE : -S3E_SLOW_DOWN;
    else
        dr->staged_bytes += bytes;
    pthread_mutex_unlock(&dr->mu);
    return rc;
}

int drain_grow(struct drain *dr, uint64_t *held, uint64_t total)
{
    int rc = 0;
    if (total <= *held)
        return 0;
    uint64_t more = total - *held;
    pthread_mutex_lock(&dr->mu);
    if (total > dr->limit)
        rc = -S3E_ENTITY_TOO_LARGE;
    else if (dr->dirty_bytes + dr->staged_bytes + more > dr->limit)
        rc = -S3E_SLOW_DOWN;
    else
        dr->staged_bytes += more;
    pthread_mutex_unlock(&dr->mu);
    if (!rc)
        *held = total;
    return rc;
}

void drain_on_cleaned(struct drain *dr, drain_cleaned_f *fn, void *cls)
{
    pthread_mutex_lock(&dr->mu);
    dr->cleaned = fn;
    dr->cleaned_cls = cls;
    while (dr->cleaned_busy) /* a call of the old hook may still use what it was given */
        pthread_cond_wait(&dr->done_cv, &dr->mu);
    pthread_mutex_unlock(&dr->mu);
}

void drain_hold(struct drain *dr, uint64_t bytes)
{
    pthread_mutex_lock(&dr->mu);
    dr->staged_bytes += bytes;
    pthread_mutex_unlock(&dr->mu);
    cache_stage_force(dr->c, bytes);
}

void drain_release(struct drain *dr, uint64_t bytes)
{
    drain_unadmit(dr, bytes);
    cache_stage_drop(dr->c, bytes);
}

void drain_unadmit(struct drain *dr, uint64_t bytes)
{
    pthread_mutex_lock(&dr->mu);
    dr->staged_bytes -= S3C_MIN(dr->staged_bytes, bytes);
    pthread_mutex_unlock(&dr->mu);
}

static int matches(const struct dirty *d, const char *bucket, const char *prefix)
{
    if (bucket && *bucket && strcmp(d->bucket, bucket))
        return 0;
    return !prefix || strncmp(d->key, prefix, strlen(prefix)) == 0;
}

static void flush_wait_free(struct flush_wait *w)
{
    free(w->bucket);
    free(w->prefix);
    free(w);
}

/* Whether flush @w has its answer: 0 (everything it waits for is on the backend),
 * -ETIMEDOUT, DRAIN_ERR_CLOSING, or 1 (not yet). Fills @out. Objects it waits for that are
 * in backoff are retried at once. */
static int flush_check_locked(struct drain *dr, const struct flush_wait *w, int64_t now,
                              struct drain_flush_result *out)
{
    uint64_t n = 0, bytes = 0;
    for (struct dirty *d = dr->list; d; d = d->next) {
        if (d->since_seq > w->upto || !matches(d, w->bucket, w->prefix))
            continue;
        n++;
        bytes += d->size;
        if (d->next_try_ms > now && !d->inflight) {
            d->next_try_ms = 0; /* a flush retries now */
            pthread_cond_signal(&dr->work_cv);
        }
    }
    memset(out, 0, sizeof(*out));
    out->remaining_objects = n;
    out->remaining_bytes = bytes;
    /* uploads that ended meanwhile (of any key: a rough figure, reported as such) */
    out->uploaded_objects = dr->uploaded_objects - w->up0;
    out->uploaded_bytes = dr->uploaded_bytes - w->upb0;
    out->seconds = (double)(now - w->t0_ms) / 1000.0;
    if (!n)
        return 0;
    if (dr->closing || dr->flush_abort)
        return DRAIN_ERR_CLOSING;
    if (w->deadline_ms >= 0 && now >= w->deadline_ms)
        return -ETIMEDOUT;
    return 1;
}

/* The flush thread: answers every flush once it has its answer (checked when an upload ends,
 * a flush begins, the server stops, and at least once a second for timeouts and retries).
 * Callbacks run without dr->mu. It ends when the drain closes, having answered them all. */
static void *flusher(void *arg)
{
    struct drain *dr = arg;
    pthread_mutex_lock(&dr->mu);
    for (;;) {
        int64_t now = now_ms(), wake = now + 1000;
        struct flush_wait *w = dr->waits, **pp = &dr->waits;
        struct drain_flush_result res;
        int rc = 1;
        for (; w; pp = &w->next, w = w->next) {
            if ((rc = flush_check_locked(dr, w, now, &res)) != 1)
                break;
            if (w->deadline_ms >= 0)
                wake = S3C_MIN(wake, w->deadline_ms);
        }
        if (w) {
            *pp = w->next;
            pthread_mutex_unlock(&dr->mu);
            w->cb(w->arg, rc, &res);
            flush_wait_free(w);
            pthread_mutex_lock(&dr->mu);
            continue;
        }
        if (dr->closing)
            break;
        struct timespec ts;
        s3c_deadline(CLOCK_REALTIME, S3C_MAX(wake - now, (int64_t)1), &ts);
        pthread_cond_timedwait(&dr->done_cv, &dr->mu, &ts);
    }
    pthread_mutex_unlock(&dr->mu);
    return NULL;
}

int drain_flush_start(struct drain *dr, const char *bucket, const char *prefix, int64_t timeout_ms,
                      drain_flush_cb cb, void *arg)
{
    struct flush_wait *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    if ((bucket && *bucket && !(w->bucket = strdup(bucket))) ||
        (prefix && *prefix && !(w->prefix = strdup(prefix)))) {
        flush_wait_free(w);
        return -ENOMEM;
    }
    w->cb = cb;
    w->arg = arg;
    w->t0_ms = now_ms();
    w->deadline_ms = timeout_ms < 0 ? -1 : w->t0_ms + timeout_ms;
    pthread_mutex_lock(&dr->mu);
    if (!dr->flush_thread_started) {
        pthread_mutex_unlock(&dr->mu);
        flush_wait_free(w);
        return DRAIN_ERR_CLOSING;
    }
    w->upto = dr->seq;
    w->up0 = dr->uploaded_objects;
    w->upb0 = dr->uploaded_bytes;
    w->next = dr->waits;
    dr->waits = w;
    pthread_cond_broadcast(&dr->done_cv);
    pthread_mutex_unlock(&dr->mu);
    return 0;
}

struct flush_sync {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, rc;
    struct drain_flush_result res;
};

static void flush_sync_done(void *arg, int rc, const struct drain_flush_result *res)
{
    struct flush_sync *fs = arg;
    pthread_mutex_lock(&fs->mu);
    fs->rc = rc;
    fs->res = *res;
    fs->done = 1;
    pthread_cond_signal(&fs->cv);
    pthread_mutex_unlock(&fs->mu);
}

int drain_flush(struct drain *dr, const char *bucket, const char *prefix, int64_t timeout_ms,
                struct drain_flush_result *out)
{
    struct flush_sync fs = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    memset(out, 0, sizeof(*out));
    int rc = drain_flush_start(dr, bucket, prefix, timeout_ms, flush_sync_done, &fs);
    if (rc)
        return rc;
    pthread_mutex_lock(&fs.mu);
    while (!fs.done)
        pthread_cond_wait(&fs.cv, &fs.mu);
    pthread_mutex_unlock(&fs.mu);
    *out = fs.res;
    return fs.rc;
}

void drain_flush_abort(struct drain *dr)
{
    if (!dr)
        return;
    pthread_mutex_lock(&dr->mu);
    dr->flush_abort = 1;
    pthread_cond_broadcast(&dr->done_cv);
    pthread_mutex_unlock(&dr->mu);
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const struct be_list_entry *)a)->key, ((const struct be_list_entry *)b)->key);
}

int drain_dirty_keys(struct drain *dr, const char *bucket, const char *prefix,
                     struct be_list_entry **out, size_t *n)
{
    struct dirty **ds = NULL;
    size_t cnt = 0, cap = 0;
    int rc = 0;
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&dr->mu);
    for (struct dirty *d = dr->list; d; d = d->next) {
        if (!d->version || !matches(d, bucket, prefix))
            continue;
        if (ARR_GROW(ds, cnt, 1, cap)) {
            rc = -ENOMEM;
            break;
        }
        ds[cnt++] = d;
    }
    struct be_list_entry *es = !rc && cnt ? calloc(cnt, sizeof(*es)) : NULL;
    if (cnt && !es)
        rc = -ENOMEM;
    for (size_t i = 0; !rc && i < cnt; i++) {
        if (!(es[i].key = strdup(ds[i]->key)))
            rc = -ENOMEM;
        es[i].size = ds[i]->size;
    }
    /* keys copied: the metadata comes from the index, outside the lock */
    char **bs = !rc && cnt ? calloc(cnt, sizeof(*bs)) : NULL;
    if (cnt && !rc && !bs)
        rc = -ENOMEM;
    for (size_t i = 0; !rc && i < cnt; i++)
        if (!(bs[i] = strdup(ds[i]->bucket)))
            rc = -ENOMEM;
    pthread_mutex_unlock(&dr->mu);
    for (size_t i = 0; !rc && i < cnt; i++) {
        struct be_meta m;
        if (cache_journal_get(dr->c, bs[i], es[i].key, &m) == 0) {
            snprintf(es[i].etag, sizeof(es[i].etag), "%s", m.etag);
            es[i].mtime_ns = m.mtime_ns;
            es[i].size = m.size;
        }
    }
    for (size_t i = 0; bs && i < cnt; i++)
        free(bs[i]);
    free(bs);
    free(ds);
    if (rc) {
        for (size_t i = 0; es && i < cnt; i++)
            free(es[i].key);
        free(es);
        return rc;
    }
    if (cnt)
        qsort(es, cnt, sizeof(*es), cmp_entry);
    *out = es;
    *n = cnt;
    return 0;
}

void drain_get_stats(struct drain *dr, struct drain_stats *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&dr->mu);
    int64_t now = now_ms(), oldest = 0, real = s3c_real_ns();
    for (struct dirty *d = dr->list; d; d = d->next) {
        out->dirty_objects++;
        out->inflight += d->inflight ? 1 : 0;
        if (!oldest || d->since_ns < oldest)
            oldest = d->since_ns;
    }
    out->dirty_bytes = dr->dirty_bytes;
    out->staged_bytes = dr->staged_bytes;
    out->limit_bytes = dr->limit;
    out->uploaded_objects = dr->uploaded_objects;
    out->uploaded_bytes = dr->uploaded_bytes;
    out->errors = dr->errors;
    out->cancelled = dr->cancelled;
    out->oldest_dirty_age_s = oldest ? (double)(real - oldest) / 1e9 : 0;
    /* rate: bytes uploaded over the last few seconds, refreshed at most once a second */
    if (now - dr->rate_t0_ms >= 1000) {
        int64_t dt = now - dr->rate_t0_ms;
        uint64_t db = dr->uploaded_bytes - dr->rate_b0;
        dr->rate_bps = dt < 15000 ? (uint64_t)((double)db * 1000.0 / (double)dt) : 0;
        dr->rate_t0_ms = now;
        dr->rate_b0 = dr->uploaded_bytes;
    }
    out->rate_bps = dr->rate_bps;
    pthread_mutex_unlock(&dr->mu);
}
