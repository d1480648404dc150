/*
 * fillwin.c: a cold fill from a remote backend, decoupled from the cache disk. The run's bytes
 * land in its window (window.h: chunks of a bounded pool); its readers copy them from there as
 * they arrive (one copy in user space, no wait on the file), and the cache writer, a few
 * threads of their own (c->wwq), writes the chunks into the data file behind them through the
 * page cache and starts their writeback at once (sync_file_range), one chunk per job so that
 * every run gets its turn: the pages stay cached, so the next epoch reads memory where RAM
 * holds the set, and a disk slower than the link holds the writer back, not the readers. The readers reading a run are attached to it (fetch.wreaders): the window keeps
 * every byte from the slowest one's position on. When the disk falls behind, the window drops a
 * block the writer has not started once its readers copied it: it is never written and never
 * marked present (counted in cache.uncached_*), and the next read of it fetches it again. With
 * no room at all the run waits for its readers (or the writer): TCP holds the backend back.
 *   run: window -> [get: copy into chunks, wake readers, kick the writer] -> received
 *        -> (writer idle) end  |  handed: the writer's last job ends it
 *   end: fdatasync, blocks written whole marked present (index), the rest given up; the fetch
 *        is freed, or kept (ended) while readers still copy from its window.
 * Not used for warm-ups and copy sources (they are the disk's pace by design: nowin), local
 * backends (copy_file_range, --miss-source), bypasses (no room in the cache), and a cache
 * directory in memory (tmpfs, ramfs: the cache file is memory already, no disk to wait for;
 * without the window the fill caches every byte at the same speed, two copies fewer:
 * bench/RESULTS.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>

#include "ahead_priv.h"
#include "cache_priv.h"
#include "evict_priv.h"
#include "fillwin_priv.h"
#include "table_priv.h"
#include "lib/conf.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "lib/workq.h"

#define FILLWIN_WRITERS 4 /* threads of the cache writer */
/* threads that end the runs the writer finished (fdatasync, index): an fdatasync waits for
 * every dirty page of the data file, the other runs' too, and on a writer thread it held the
 * writes of every other run behind it (e2e 61, slow flushes) */
#define FILLWIN_ENDERS 8
#define FILLWIN_WRITER_NICE 10 /* their scheduling priority: below the serving threads' */
#define FILLWIN_WAIT_MS 100    /* a run waiting for room looks again at least this often */
/* and after this long without any (a reader stopped reading), lets go of bytes not copied,
 * well before the backend's low-speed timeout (at most half of --backend-timeout) */
#define FILLWIN_STALL_MS 10000

/* The stall: FILLWIN_STALL_MS, at most half of --backend-timeout. */
static uint64_t fillwin_stall_ms(const struct cache *c)
{
    uint64_t ms = FILLWIN_STALL_MS;
    if (c->cf->backend_timeout > 0 && (uint64_t)c->cf->backend_timeout / 2 < ms)
        ms = (uint64_t)c->cf->backend_timeout / 2;
    return ms;
}

_Static_assert(CACHE_FETCH_MAX_BLOCKS <= 64, "fetch.released has a bit per block of a run");

/* Block @bi of @f's window was dropped: its capacity reservation is returned, and its fetching
 * bit is given up once the run has received all it will of it (until then readers past what
 * landed are still served by the run; a reader behind waits for that, then fetches it). */
static void fillwin_release_block_locked(struct fetch *f, unsigned bi)
{
    struct cver *v = f->v;
    uint64_t b = f->first + bi;
    if (f->released >> bi & 1)
        return;
    uint64_t bend = S3C_MIN((b + 1) * v->bs, v->meta.size);
    if (!f->received && f->landed < bend && !f->err)
        return; /* still receiving it */
    f->released |= 1ull << bi;
    cache_bit_clr(v->fetching, b);
    cache_wake_locked(&v->waiters);
}

static void fillwin_on_drop(void *owner, unsigned bi)
{
    struct fetch *f = owner;
    struct cache *c = f->c;
    struct cver *v = f->v;
    uint64_t acct = index_acct(index_block_bytes(v->meta.size, v->bs, f->first + bi));
    uint64_t rel = S3C_MIN(acct, f->reserved);
    f->reserved -= rel;
    evict_unreserve_locked(c, rel);
    fillwin_release_block_locked(f, bi);
}

/* Blocks of @f dropped earlier and now received entirely give up their fetching bits. */
static void fillwin_release_passed_locked(struct fetch *f)
{
    for (unsigned bi = 0; bi < f->n; bi++)
        if (window_block_dropped(f->win, bi))
            fillwin_release_block_locked(f, bi);
}

int fillwin_open(struct cache *c, struct errmsg *em)
{
    pthread_cond_init(&c->win_cv, NULL);
    /* a cache directory in memory gets no pool (see the top): no window, no writer threads */
    int rc = window_pool_init(&c->pool, c->in_memory ? 0 : c->cf->fill_memory, c->cf->fill_window,
                              c->block_size, 0, fillwin_stall_ms(c), fillwin_on_drop);
    if (!rc && window_pool_on(&c->pool))
        rc = workq_new(FILLWIN_WRITERS, &c->wwq);
    if (!rc && window_pool_on(&c->pool))
        rc = workq_new(FILLWIN_ENDERS, &c->ewq);
    if (rc) {
        workq_free(c->wwq);
        c->wwq = NULL;
        errmsg_set(em, "cache: the fills' windows: %s", s3c_strerror(rc));
        window_pool_fini(&c->pool);
        pthread_cond_destroy(&c->win_cv);
    }
    return rc;
}

void fillwin_close(struct cache *c)
{
    workq_free(c->wwq); /* every run ended: nothing is queued */
    c->wwq = NULL;
    workq_free(c->ewq);
    c->ewq = NULL;
    window_pool_fini(&c->pool);
    pthread_cond_destroy(&c->win_cv);
}

int fillwin_begin_locked(struct fetch *f)
{
    struct cache *c = f->c;
    struct cver *v = f->v;
    if (!window_pool_on(&c->pool) || f->bypass || f->direct || f->nowin || v->unindexed ||
        (backend_caps(c->be) & BE_CAP_LOCAL_FD) || f->end <= f->off || f->n > 64)
        return 0;
    if (window_new(&c->pool, f->off, f->end, v->bs, f, s3c_mono_ns() / 1000000, &f->win))
        return 0; /* no memory for its tables: the way through the page cache */
    if (f->wanted)
        window_wanted(f->win);
    return 1;
}

static void fillwin_wake_runs_locked(struct cache *c)
{
    if (c->win_waiters)
        pthread_cond_broadcast(&c->win_cv);
}

void fillwin_starved_locked(struct fetch *f)
{
    if (!f->running)
        return;
    /* a reader waits for it: not a read-ahead that may wait behind the others for room */
    f->wanted = 1;
    if (f->win)
        window_wanted(f->win);
    f->starved = 1;
    fillwin_wake_runs_locked(f->c);
}

static void fillwin_write_job(void *arg);

/* The writer's queue for @f's next chunk: the first run of its object with bytes to write goes
 * first (the objects' first runs in turn), the runs after it (ranged GETs ahead, cache/ahead.c)
 * when none of those has a chunk ready. The reader copies in order, so the disk writes in its
 * order: a block the reader passed is written, not dropped as one the writer never started
 * while the writer spread itself over every run at once. */
static enum workq_prio fillwin_write_prio_locked(const struct fetch *f)
{
    for (const struct fetch *x = f->v->fetches; x; x = x->next)
        if (x != f && x->win && x->wr_queued && x->off < f->off)
            return WORKQ_LOW;
    return WORKQ_HIGH;
}

/* Queues the writer for @f unless it is queued already (mu held). */
static void fillwin_kick_locked(struct fetch *f)
{
    if (f->wr_queued)
        return;
    if (workq_submit(f->c->wwq, fillwin_write_prio_locked(f), fillwin_write_job, f) == 0)
        f->wr_queued = 1;
}

/* Wakes the readers of @f when enough landed since the last time (or it is all there). */
static void fillwin_wake_readers_locked(struct fetch *f, int force)
{
    if (f->landed > f->woke_at &&
        (force || f->landed - f->woke_at >= CACHE_WAKE_BYTES || f->landed == f->end)) {
        f->woke_at = f->landed;
        f->starved = 0; /* until one of them waits again */
        cache_wake_locked(&f->v->waiters);
    }
}

int fillwin_on_data(void *cls, const void *buf, size_t len)
{
    struct fetch *f = cls;
    struct cache *c = f->c;
    const unsigned char *p = buf;
    int rc = 0;
    uint64_t wait_since = 0;
    pthread_mutex_lock(&c->mu);
    while (len && !rc) {
        if (f->err) {
            rc = f->err;
            break;
        }
        if (f->landed >= f->end)
            break; /* more than was asked for */
        unsigned char *mem;
        size_t room;
        /* No room for long: a reader stopped copying and the writer cannot free the rest;
         * letting go of bytes not copied is then the only way on (the backend must not stall
         * into its low-speed timeout). */
        uint64_t now = s3c_mono_ns();
        int stalled = wait_since && now - wait_since > c->pool.stall_ms * 1000000ull;
        if (window_room(&c->pool, f->win, now / 1000000, stalled, &mem, &room) == -EAGAIN) {
            /* Every slot holds bytes a reader has not copied yet, or the disk has not written:
             * the readers get what landed so far, and the run (its backend held back by TCP)
             * waits for a reader to copy or the writer to write before it takes more. */
            if (!wait_since)
                wait_since = s3c_mono_ns();
            fillwin_wake_readers_locked(f, 1);
            struct timespec ts;
            s3c_deadline(CLOCK_REALTIME, FILLWIN_WAIT_MS, &ts);
            c->win_waiters++;
            pthread_cond_timedwait(&c->win_cv, &c->mu, &ts);
            c->win_waiters--;
            continue;
        }
        wait_since = 0;
        size_t n = S3C_MIN(room, len);
        pthread_mutex_unlock(&c->mu);
        memcpy(mem, p, n);
        pthread_mutex_lock(&c->mu);
        window_landed(f->win, n);
        uint64_t from = f->landed;
        f->landed += n;
        p += n;
        len -= n;
        fillwin_wake_readers_locked(f, 0);
        uint64_t in_block = (f->landed - f->off) % f->v->bs;
        if (in_block % c->pool.chunk == 0 || f->landed == f->end)
            fillwin_kick_locked(f); /* a chunk is whole */
        if ((from - f->off) / f->v->bs != (f->landed - f->off) / f->v->bs || f->landed == f->end)
            fillwin_release_passed_locked(f);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int fillwin_received(struct fetch *f, int rc)
{
    struct cache *c = f->c;
    pthread_mutex_lock(&c->mu);
    window_received(&c->pool, f->win, !rc && f->landed == f->end);
    fillwin_wake_runs_locked(c); /* one run fewer: the others' cap may have grown */
    f->run_rc = rc;
    f->received = 1;
    ahead_received_locked(f); /* its place among the transfers goes to the next run */
    fillwin_release_passed_locked(f);
    fillwin_wake_readers_locked(f, 1);
    int writer_ends = !(window_settled(f->win) && !f->wr_queued);
    if (writer_ends)
        fillwin_kick_locked(f);
    if (writer_ends && !f->wr_queued) {
        /* The writer cannot be queued (the server is stopping): nothing more is written and
         * the run ends here. */
        window_abandon(&c->pool, f->win);
        writer_ends = 0;
    }
    f->handed = writer_ends;
    pthread_mutex_unlock(&c->mu);
    return writer_ends;
}

/* Writes @len bytes of @mem at @at of @fd through the page cache, then starts their writeback
 * (SYNC_FILE_RANGE_WRITE: the disk works while the next chunks are copied, the run's final
 * fdatasync only waits for the tail, and a disk slower than the link holds the writer back
 * here, so the window drops blocks instead of the page cache filling with dirty pages). The
 * pages stay cached: the next epoch's hits come from memory where it holds them. 0 or the
 * error. */
static int fillwin_write(int fd, const unsigned char *mem, uint64_t at, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(fd, mem + done, len - done, (off_t)(at + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EIO; /* a short write: the block is not cached */
        done += (size_t)n;
    }
    (void)sync_file_range(fd, (off_t)at, (off_t)len, SYNC_FILE_RANGE_WRITE);
    return 0;
}

/* A job of the enders: ends @arg's run, which the writer finished (fill_end_run()). */
static void fillwin_end_job(void *arg)
{
    struct fetch *f = arg;
    f->c->up.run_end(f, f->run_rc);
}

/* One job of the cache writer: writes one chunk of @arg's window, then queues itself again
 * (behind the other runs' jobs) while chunks are ready; the last job of a handed run ends it. */
static void fillwin_write_job(void *arg)
{
    /* The writer's copies into the page cache yield the CPU to the serving path: on a machine
     * whose cores are the bound, readers keep the link's pace and the window drops what the
     * writer could not take (the next epoch fetches it), instead of both slowing down. */
    static __thread int lowered;
    if (!lowered) {
        (void)setpriority(PRIO_PROCESS, (id_t)gettid(), FILLWIN_WRITER_NICE);
        lowered = 1;
    }
    struct fetch *f = arg;
    struct cache *c = f->c;
    struct cver *v = f->v;
    pthread_mutex_lock(&c->mu);
    S3C_ASSERT(f->wr_queued);
    for (;;) {
        if (c->closing)
            window_drop_rest(&c->pool, f->win);
        unsigned ci;
        const unsigned char *mem;
        uint64_t at;
        size_t len;
        int bstart;
        if (!window_next_write(f->win, &ci, &mem, &at, &len, &bstart)) {
            f->wr_queued = 0;
            int end = f->handed && window_settled(f->win);
            fillwin_wake_runs_locked(c);
            pthread_mutex_unlock(&c->mu);
            if (end && workq_submit(c->ewq, WORKQ_HIGH, fillwin_end_job, f))
                fillwin_end_job(f); /* the server is stopping: here */
            return;
        }
        int fd, rc = cache_ver_fd_locked(c, v, 1, &fd);
        pthread_mutex_unlock(&c->mu);
        if (!rc && bstart) {
            /* the block's extent at once (best effort): less file system work than page by
             * page, and no allocation for blocks dropped before they started */
            uint64_t b0 = at - (at - f->off) % v->bs;
            store_preallocate(fd, b0, S3C_MIN(b0 + v->bs, v->meta.size) - b0, c->in_memory);
        }
        if (!rc)
            rc = fillwin_write(fd, mem, at, len);
        pthread_mutex_lock(&c->mu);
        window_wrote(&c->pool, f->win, ci, rc == 0);
        if (rc == 0) {
            c->st.fill_bytes += len;
        } else if (rc != CACHE_ERR_CLOSING) {
            log_warn("cache: writing \"%s/%s\" at %llu: %s: delivered, not cached", v->key->bucket,
                     v->key->key, (unsigned long long)at, s3c_strerror(rc));
        }
        fillwin_wake_runs_locked(c); /* a written chunk is room */
        if (workq_submit(c->wwq, fillwin_write_prio_locked(f), fillwin_write_job, f) == 0)
            break; /* the next chunk waits its turn behind the other runs' */
    }
    pthread_mutex_unlock(&c->mu);
}

int fillwin_complete(struct fetch *f, int *unsynced)
{
    struct cache *c = f->c;
    struct cver *v = f->v;
    int rc = 0;
    uint64_t whole = 0, punch = 0;
    *unsynced = 0;
    pthread_mutex_lock(&c->mu);
    int fd = v->fd;
    for (unsigned bi = 0; bi < f->n; bi++) {
        uint64_t b = f->first + bi;
        if (window_block_whole(f->win, bi)) {
            whole |= 1ull << bi;
        } else if (fd >= 0 &&
                   (window_block_dropped(f->win, bi) || !window_block_started(f->win, bi)) &&
                   !cache_bit(v->present, b) && !cache_bit(v->fetching, b)) {
            /* dropped after the writer began it (a stale window gave it up, a write failed),
             * or given up by a run before this one that left it to this run (its fetching bit
             * was taken when this run began) and not written by this one either: its extent
             * may hold bytes nothing accounts for. No reader reads a dropped or unstarted
             * block from the file. Claimed as fetching while its space goes back, so no other
             * run writes it meanwhile. */
            cache_bit_set(v->fetching, b);
            punch |= 1ull << bi;
        }
    }
    c->st.uncached_bytes += window_dropped_bytes(f->win);
    c->st.uncached_blocks += window_dropped_blocks(f->win);
    pthread_mutex_unlock(&c->mu);
    if (punch) {
        for (unsigned bi = 0; bi < f->n; bi++)
            if (punch >> bi & 1) {
                uint64_t b0 = (f->first + bi) * v->bs;
                store_punch(fd, b0, S3C_MIN(b0 + v->bs, v->meta.size) - b0);
            }
        pthread_mutex_lock(&c->mu);
        for (unsigned bi = 0; bi < f->n; bi++)
            if (punch >> bi & 1)
                cache_bit_clr(v->fetching, f->first + bi);
        cache_wake_locked(&v->waiters);
        pthread_mutex_unlock(&c->mu);
    }
    if (!whole)
        return 0;
    if (fdatasync(fd)) {
        *unsynced = -errno;
        return 0;
    }
    for (unsigned bi = 0; bi < f->n && !rc;) {
        if (!(whole >> bi & 1)) {
            bi++;
            continue;
        }
        unsigned e = bi + 1;
        while (e < f->n && (whole >> e & 1))
            e++;
        int64_t delta = 0;
        int r = index_mark(c->ix, &v->key->k, v->version, f->first + bi, e - bi, &delta);
        if (r && r != -ESTALE) {
            rc = r;
            break;
        }
        pthread_mutex_lock(&c->mu);
        uint64_t acct = 0;
        for (uint64_t b = f->first + bi; b < f->first + e; b++) {
            acct += index_acct(index_block_bytes(v->meta.size, v->bs, b));
            cache_bit_clr(v->fetching, b);
            f->released |= 1ull << (b - f->first);
            if (!cache_bit(v->present, b)) {
                cache_bit_set(v->present, b);
                v->npresent++;
            }
        }
        uint64_t rel = S3C_MIN(acct, f->reserved);
        f->reserved -= rel;
        evict_unreserve_locked(c, rel);
        if (r == 0)
            c->used = (uint64_t)((int64_t)c->used + delta);
        cache_wake_locked(&v->waiters);
        pthread_mutex_unlock(&c->mu);
        bi = e;
    }
    return rc;
}

void fillwin_clear_fetching_locked(struct fetch *f)
{
    for (unsigned bi = 0; bi < f->n; bi++) {
        if (f->released >> bi & 1)
            continue; /* given up earlier: another run may own it now */
        f->released |= 1ull << bi;
        cache_bit_clr(f->v->fetching, f->first + bi);
    }
}

struct fetch *fillwin_find_locked(struct cver *v, uint64_t pos, const unsigned char **mem,
                                  size_t *avail)
{
    for (struct fetch *f = v->fetches, *next; f; f = next) {
        next = f->next;
        if (!f->win)
            continue;
        if (window_at(f->win, pos, mem, avail))
            return f;
        if (f->kept && !f->copiers && !window_held(f->win)) { /* nothing left: freed */
            for (struct fetch **pp = &v->fetches; *pp; pp = &(*pp)->next)
                if (*pp == f) {
                    *pp = f->next;
                    break;
                }
            cache_fetch_free(f);
        }
    }
    return NULL;
}

int fillwin_copy(struct fetch *f, uint64_t pos, const unsigned char *mem, void *buf, size_t n)
{
    struct cache *c = f->c;
    f->copiers++;
    pthread_mutex_unlock(&c->mu);
    memcpy(buf, mem, n);
    pthread_mutex_lock(&c->mu);
    f->copiers--;
    int good = window_still(f->win, pos, mem);
    if (!f->copiers && f->kept == 2) {
        cache_fetch_retire_locked(f); /* it ended and was left to us: freed */
        return good ? 2 : 0;
    }
    return good;
}

void fillwin_idle_locked(struct cache *c, struct cver *v)
{
    (void)c;
    for (struct fetch **pp = &v->fetches; *pp;) {
        struct fetch *f = *pp;
        if (f->win && f->kept == 1 && !f->copiers) {
            *pp = f->next;
            cache_fetch_free(f);
        } else {
            pp = &f->next;
        }
    }
}

/* Tells @f's window how many readers it has and how far the slowest one copied; a window whose
 * last reader left (@left: it read on past the run, or went away) keeps nothing for it. A
 * scanner (wf_scan) counts as a reader but never passes a byte: the readers that wait for its
 * walk read behind it. Runs waiting for room are woken when a chunk was passed. */
static void fillwin_readers_locked(struct fetch *f, int left)
{
    struct cache *c = f->c;
    unsigned n = 0, m = 0;
    uint64_t lo = UINT64_MAX;
    for (struct cache_obj *o = f->wreaders; o; o = o->wf_next) {
        n++;
        if (o->wf_scan)
            continue;
        m++;
        lo = S3C_MIN(lo, o->wf_pos);
    }
    window_readers(f->win, n, m);
    if (!m)
        lo = left && !n ? f->end : f->off;
    if (lo > f->off && window_read(&c->pool, f->win, lo, s3c_mono_ns() / 1000000))
        fillwin_wake_runs_locked(c);
}

void fillwin_orphan_locked(struct cache *c, struct cver *v)
{
    for (struct fetch *f = v->fetches; f; f = f->next)
        if (f->win && f->running && !f->wreaders &&
            window_left(&c->pool, f->win, s3c_mono_ns() / 1000000))
            fillwin_wake_runs_locked(c);
}

void fillwin_detach_locked(struct cache_obj *o)
{
    struct fetch *f = o->wf;
    if (!f)
        return;
    for (struct cache_obj **pp = &f->wreaders; *pp; pp = &(*pp)->wf_next)
        if (*pp == o) {
            *pp = o->wf_next;
            break;
        }
    o->wf = NULL;
    o->wf_next = NULL;
    fillwin_readers_locked(f, !o->wf_scan); /* a scanner leaving passes nothing */
}

void fillwin_attach_locked(struct cache_obj *o, struct fetch *f, uint64_t pos)
{
    if (!f->win || pos < f->off || pos >= f->end) {
        fillwin_detach_locked(o);
        return;
    }
    if (o->wf != f) {
        fillwin_detach_locked(o);
        o->wf = f;
        o->wf_next = f->wreaders;
        f->wreaders = o;
    }
    o->wf_pos = pos;
    fillwin_readers_locked(f, 0);
}

void fillwin_reader_at_locked(struct cache_obj *o, uint64_t pos)
{
    if (o->wf)
        fillwin_attach_locked(o, o->wf, pos);
}
