/*
 * fill.c: block fetches and reads. A fetch is one backend_get of a run of
 * missing blocks, run on a worker: bytes are pwritten at their offset into the
 * version's sparse data file, each finished block is fdatasync'd and only then
 * marked present in the index. Readers stream bytes as they land and are woken
 * under c->mu. When no capacity can be reserved the fetch is a bypass: bytes go
 * to memory and are never indexed.
 *   start (fetching bits, reservation) -> run: [evict] get -> blocks marked -> done
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "ahead_priv.h"
#include "cache_priv.h"
#include "evict_priv.h"
#include "fill_priv.h"
#include "fillwin_priv.h"
#include "missource_priv.h"
#include "table_priv.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "lib/workq.h"

struct fetch *fill_find_locked(struct cver *v, uint64_t pos)
{
    struct fetch *best = NULL;
    for (struct fetch *f = v->fetches; f; f = f->next) {
        if (pos < f->off || pos >= f->end)
            continue;
        if (f->win && !window_can_serve(f->win, pos))
            continue; /* its window let the byte go and the file does not have it */
        if (!best || f->landed > best->landed)
            best = f;
    }
    return best;
}

static void fetch_unlink_locked(struct cache *c, struct fetch *f)
{
    for (struct fetch **p = &c->fetches; *p; p = &(*p)->all_next) {
        if (*p == f) {
            *p = f->all_next;
            break;
        }
    }
    f->all_next = NULL;
}

/* Keeps a bounded number of finished bypass fetches (their bytes) per version; @just, which
 * just finished and whose readers have not taken its bytes yet, is never the one dropped (it
 * was: a reader then fetched the block again, and again, while older bytes were kept). */
static void prune_bypass_locked(struct cver *v, struct fetch *just)
{
    unsigned keep = v->refs > 2 ? v->refs : 2, n = 0;
    for (struct fetch *f = v->fetches; f; f = f->next)
        if (!f->running && !f->win)
            n++;
    while (n > keep) {
        struct fetch *low = NULL;
        for (struct fetch *f = v->fetches; f; f = f->next)
            if (!f->running && !f->win && f != just && (!low || f->off < low->off))
                low = f;
        if (!low)
            break;
        cache_fetch_remove_locked(v, low);
        cache_fetch_free(low);
        n--;
    }
}

void fill_drop_finished_locked(struct cver *v)
{
    for (struct fetch **p = &v->fetches; *p;) {
        struct fetch *f = *p;
        if (f->running) {
            p = &f->next;
            continue;
        }
        *p = f->next;
        cache_fetch_free(f);
    }
}

void fill_fail_all_locked(struct cache *c, int err)
{
    for (struct fetch *f = c->fetches; f; f = f->all_next) {
        if (!f->err)
            f->err = err;
        cache_wake_locked(&f->v->waiters);
    }
    if (c->win_waiters)
        pthread_cond_broadcast(&c->win_cv); /* runs waiting for room see the error */
}

/* ---- the worker side ------------------------------------------------------------------- */

/* Cuts @f down to its first block; waiters on the others re-evaluate. */
static void fetch_shrink_locked(struct fetch *f)
{
    struct cver *v = f->v;
    for (uint64_t b = f->first + 1; b < f->first + f->n; b++)
        cache_bit_clr(v->fetching, b);
    f->n = 1;
    f->end = S3C_MIN(f->off + v->bs, v->meta.size);
    cache_wake_locked(&v->waiters);
}

/* Marks blocks [@from, @to) of @f done: present in the index after an fdatasync. */
static int fetch_complete_blocks(struct fetch *f, uint64_t from, uint64_t to)
{
    struct cache *c = f->c;
    struct cver *v = f->v;
    int64_t delta = 0;
    int rc = 0, indexed = 0;
    if (!f->bypass) {
        if (fdatasync(v->fd))
            return -errno;
        rc = index_mark(c->ix, &v->key->k, v->version, from, to - from, &delta);
        if (rc == 0)
            indexed = 1;
        else if (rc == -ESTALE)
            rc = 0; /* the version was dropped meanwhile: serve it from memory state only */
        else
            return rc;
    }
    pthread_mutex_lock(&c->mu);
    uint64_t acct = 0;
    for (uint64_t b = from; b < to; b++) {
        acct += index_acct(index_block_bytes(v->meta.size, v->bs, b));
        if (!f->bypass) {
            cache_bit_clr(v->fetching, b);
            if (!cache_bit(v->present, b)) {
                cache_bit_set(v->present, b);
                v->npresent++;
            }
        }
    }
    if (!f->bypass) {
        uint64_t rel = S3C_MIN(acct, f->reserved);
        f->reserved -= rel;
        evict_unreserve_locked(c, rel);
        if (indexed) {
            c->used = (uint64_t)((int64_t)c->used + delta);
            c->evict_gen++;
        }
    }
    f->marked = to - f->first;
    if (indexed && v->npresent == v->nblocks)
        c->up.ver_whole_locked(c, v, f->direct); /* members.c: a tar read whole, indexed now */
    cache_wake_locked(&v->waiters);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* Starts writing back the FETCH_WRITEBACK_BYTES windows of @f that its last @len bytes (landed
 * at @at) completed: the disk works while the rest is copied, and the run's final fdatasync
 * only waits for the tail. Asynchronous (SYNC_FILE_RANGE_WRITE); best effort. */
#define FETCH_WRITEBACK_BYTES (8u << 20)
static void fetch_writeback(const struct fetch *f, uint64_t at, uint64_t len)
{
    uint64_t w0 = (at - f->off) / FETCH_WRITEBACK_BYTES;
    uint64_t w1 = (at + len - f->off) / FETCH_WRITEBACK_BYTES;
    if (w1 > w0 && !f->bypass)
        (void)sync_file_range(f->v->fd, (off_t)(f->off + w0 * FETCH_WRITEBACK_BYTES),
                              (off_t)((w1 - w0) * FETCH_WRITEBACK_BYTES), SYNC_FILE_RANGE_WRITE);
}

/* @n more bytes of @f are in the cache file: count them and wake readers. Returns the fetch's
 * error, if it was failed meanwhile. */
static int fetch_landed(struct fetch *f, uint64_t n)
{
    struct cache *c = f->c;
    pthread_mutex_lock(&c->mu);
    f->landed += n;
    c->st.fill_bytes += n;
    if (f->landed - f->woke_at >= CACHE_WAKE_BYTES || f->landed == f->end) {
        f->woke_at = f->landed;
        cache_wake_locked(&f->v->waiters);
    }
    int err = f->err;
    pthread_mutex_unlock(&c->mu);
    return err;
}

/* A warm-up's run from a remote backend goes around the page cache too (see
 * fetch_copy_direct): the bytes the backend hands over gather in an aligned buffer of
 * FETCH_DIRECT_CHUNK and are written O_DIRECT a chunk at a time, the last partial page through
 * the page cache. Readers joining the run see its bytes a chunk at a time, from the disk. */
#define FETCH_DIRECT_ALIGN 4096u
#define FETCH_DIRECT_CHUNK (4u << 20)

/* The data file of @f opened O_DIRECT, for a run with at least one aligned page to write
 * (its start aligned to FETCH_DIRECT_ALIGN and to the page). -1 when the run is not aligned
 * or the file system refuses O_DIRECT: the run goes the buffered way. */
static int fetch_direct_fd(struct fetch *f)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (f->end - f->off < FETCH_DIRECT_ALIGN || f->off % FETCH_DIRECT_ALIGN || pg <= 0 ||
        f->off % (uint64_t)pg)
        return -1;
    char path[STORE_PATH_MAX];
    pthread_mutex_lock(&f->c->mu);
    cache_ver_path(f->c, f->v, path);
    pthread_mutex_unlock(&f->c->mu);
    return open(path, O_WRONLY | O_DIRECT | O_CLOEXEC);
}

/* Sets @f up for a staged direct run. Best effort: on any refusal (see fetch_direct_fd, or no
 * memory) @f stays a buffered run. */
static void fetch_stage_open(struct fetch *f)
{
    void *stage = NULL;
    if (posix_memalign(&stage, (size_t)S3C_MAX((long)FETCH_DIRECT_ALIGN, sysconf(_SC_PAGESIZE)),
                       FETCH_DIRECT_CHUNK))
        return;
    int dfd = fetch_direct_fd(f);
    if (dfd < 0) {
        free(stage);
        return;
    }
    f->dfd = dfd;
    f->staged = 0;
    f->stage = stage;
}

/* Writes the first @n bytes of the stage (a multiple of FETCH_DIRECT_ALIGN) at @f->landed with
 * O_DIRECT and keeps what follows them at the stage's start. */
static int fetch_stage_write(struct fetch *f, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = pwrite(f->dfd, f->stage + done, n - done, (off_t)(f->landed + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        if (w == 0 || (size_t)w % FETCH_DIRECT_ALIGN)
            return -EIO; /* a short direct write: the run fails, a retry fetches it again */
        done += (size_t)w;
    }
    memmove(f->stage, f->stage + n, f->staged - n);
    f->staged -= n;
    return fetch_landed(f, n);
}

static int fetch_stage_data(struct fetch *f, const void *buf, size_t len)
{
    uint64_t at = f->landed + f->staged;
    if (at + len > f->end)
        len = (size_t)(f->end - at);
    const unsigned char *p = buf;
    while (len) {
        size_t n = S3C_MIN(len, (size_t)FETCH_DIRECT_CHUNK - f->staged);
        memcpy(f->stage + f->staged, p, n);
        f->staged += n;
        p += n;
        len -= n;
        if (f->staged == FETCH_DIRECT_CHUNK) {
            int rc = fetch_stage_write(f, FETCH_DIRECT_CHUNK);
            if (rc)
                return rc;
        }
    }
    return 0;
}

static int fetch_on_data(void *cls, const void *buf, size_t len);

/* Ends a staged run: after a whole body (@rc 0), what is still staged lands (the aligned part
 * direct, a last partial page the buffered way, fetch_on_data). Releases the stage either
 * way. */
static int fetch_stage_close(struct fetch *f, int rc)
{
    unsigned char *stage = f->stage;
    if (!stage)
        return rc;
    if (!rc && f->staged >= FETCH_DIRECT_ALIGN)
        rc = fetch_stage_write(f, f->staged & ~(size_t)(FETCH_DIRECT_ALIGN - 1));
    size_t tail = f->staged;
    close(f->dfd);
    f->stage = NULL;
    f->staged = 0;
    f->dfd = -1;
    if (!rc && tail)
        rc = fetch_on_data(f, stage, tail);
    free(stage);
    return rc;
}

static int fetch_on_data(void *cls, const void *buf, size_t len)
{
    struct fetch *f = cls;
    struct cache *c = f->c;
    struct cver *v = f->v;
    if (f->err)
        return f->err;
    if (f->stage)
        return fetch_stage_data(f, buf, len);
    if (f->landed + len > f->end)
        len = f->end - f->landed;
    if (!len)
        return 0;
    if (f->bypass) {
        memcpy(f->mem + (f->landed - f->off), buf, len);
    } else {
        const char *p = buf;
        size_t left = len;
        uint64_t at = f->landed;
        while (left) {
            ssize_t n = pwrite(v->fd, p, left, (off_t)at);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                return -errno;
            }
            p += n;
            left -= (size_t)n;
            at += (uint64_t)n;
        }
    }
    pthread_mutex_lock(&c->mu);
    f->landed += len;
    c->st.fill_bytes += f->bypass ? 0 : len;
    /* Readers stream what has landed; blocks become present (synced, indexed) when the run
     * ends, so durability never sits on the path between the backend and the clients. */
    if (f->landed - f->woke_at >= CACHE_WAKE_BYTES || f->landed == f->end) {
        f->woke_at = f->landed;
        cache_wake_locked(&v->waiters);
    }
    int err = f->err;
    pthread_mutex_unlock(&c->mu);
    fetch_writeback(f, f->landed - len, len);
    return err;
}

/* fetch_landed() for bytes a local backend moved in the kernel: the backend never saw them
 * pass, so they are counted as read from it here. */
static int fetch_landed_local(struct fetch *f, uint64_t n)
{
    backend_count_read(f->c->be, n);
    return fetch_landed(f, n);
}

/* A warm-up's run from a local backend: written with O_DIRECT straight from the backend file's
 * pages (mapped), so the bytes are copied neither through nor into the page cache (a warm-up
 * of terabytes must not evict what clients are reading, and on a VM fresh page-cache pages are
 * what costs most). The run's FETCH_DIRECT_ALIGN-aligned body goes direct, a last partial
 * page through the page cache. -ENOTSUP, with nothing landed, when the cache's file system
 * refuses O_DIRECT or the run is not aligned: the caller copies it the buffered way. */
static int fetch_copy_direct(struct fetch *f, int bfd)
{
    struct cver *v = f->v;
    uint64_t body = (f->end - f->off) & ~(uint64_t)(FETCH_DIRECT_ALIGN - 1);
    int dfd = fetch_direct_fd(f);
    if (dfd < 0)
        return -ENOTSUP;
    /* Mapped a chunk at a time: a run of 16 blocks mapped whole would count 128 MiB of the
     * backend's pages in this process's RSS. */
    int rc = 0;
    while (!rc && f->landed < f->off + body) {
        size_t want = (size_t)S3C_MIN(f->off + body - f->landed, (uint64_t)FETCH_DIRECT_CHUNK);
        const char *map = mmap(NULL, want, PROT_READ, MAP_SHARED, bfd, (off_t)f->landed);
        if (map == MAP_FAILED) {
            rc = f->landed == f->off ? -ENOTSUP : -errno;
            break;
        }
        size_t done = 0;
        while (!rc && done < want) {
            ssize_t n = pwrite(dfd, map + done, want - done, (off_t)(f->landed));
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                /* refused at once (EINVAL; EFAULT: pages the kernel cannot write from): the
                 * buffered way; EFAULT later: the backend file shrank under us */
                rc = (errno == EINVAL || errno == EFAULT) && f->landed == f->off ? -ENOTSUP
                     : errno == EFAULT                                           ? -EIO
                                                                                 : -errno;
                break;
            }
            if (n == 0) {
                rc = -EIO;
                break;
            }
            done += (size_t)n;
            rc = fetch_landed_local(f, (uint64_t)n);
            if ((size_t)n % FETCH_DIRECT_ALIGN && !rc)
                rc = -EIO; /* a short direct write: the run fails, a retry fetches it again */
        }
        munmap((void *)map, want);
    }
    close(dfd);
    if (!rc && f->landed < f->end) { /* the tail, under a page */
        char tail[FETCH_DIRECT_ALIGN];
        size_t want = (size_t)(f->end - f->landed);
        ssize_t n = pread(bfd, tail, want, (off_t)f->landed);
        if (n >= 0 && (size_t)n == want)
            n = pwrite(v->fd, tail, want, (off_t)f->landed);
        if (n < 0)
            rc = -errno;
        else if ((size_t)n < want)
            rc = -EIO; /* the file shrank under us */
        else
            rc = fetch_landed_local(f, want);
    }
    return rc;
}

/* A backend that is a local file system (BE_CAP_LOCAL_FD): move the run's bytes into the cache
 * file in the kernel with copy_file_range (or fetch_copy_direct() for a warm-up), waking
 * readers as they land. -ENOTSUP: use get(). */
static int fetch_copy_local(struct fetch *f, int direct)
{
    struct cver *v = f->v;
    int rc = missource_fetch_open(f);
    if (rc)
        return rc == -S3E_NOT_IMPLEMENTED ? -ENOTSUP : rc;
    int bfd = f->src_fd;
    /* Allocate the run's extent at once: far less ext4 work than page-by-page delayed
     * allocation. Best effort (store_preallocate: the file's size grows to the run's end). */
    if (!rc)
        store_preallocate(v->fd, f->off, f->end - f->off, f->c->in_memory);
    if (!rc && direct && (rc = fetch_copy_direct(f, bfd)) == -ENOTSUP)
        rc = 0; /* the buffered way */
    loff_t in = (loff_t)f->landed, out = (loff_t)f->landed;
    while (!rc && f->landed < f->end) {
        size_t want = (size_t)S3C_MIN(f->end - f->landed, (uint64_t)(1u << 20));
        ssize_t n = copy_file_range(bfd, &in, v->fd, &out, want, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP) &&
                         f->landed == f->off
                     ? -ENOTSUP
                     : -errno;
            break;
        }
        if (n == 0) {
            rc = -EIO; /* the file shrank under us */
            break;
        }
        rc = fetch_landed_local(f, (uint64_t)n);
        fetch_writeback(f, f->landed - (uint64_t)n, (uint64_t)n);
    }
    return rc; /* bfd is f->src_fd: fetch_run closes it, or hands it to the chain's next run */
}

/* The cache disk is full: fetch @f's first block again, into memory like a bypass, so the
 * readers waiting on it are served (uncached) rather than failed while the disk stays full.
 * Only while nothing has landed: no reader has taken a byte from the file yet. */
static int fetch_to_memory(struct fetch *f)
{
    struct cache *c = f->c;
    struct cver *v = f->v;
    pthread_mutex_lock(&c->mu);
    fetch_shrink_locked(f);
    evict_unreserve_locked(c, f->reserved);
    f->reserved = 0;
    pthread_mutex_unlock(&c->mu);
    unsigned char *mem = malloc(f->end - f->off);
    if (!mem)
        return -ENOMEM;
    pthread_mutex_lock(&c->mu);
    f->mem = mem;
    f->bypass = 1;
    v->bypass_seen++;
    pthread_mutex_unlock(&c->mu);
    struct be_sink sink = {cache_fetch_on_meta, fetch_on_data, f};
    int rc = backend_get(c->be, v->key->bucket, v->key->key, f->off, f->end - f->off, &sink);
    if (!rc && f->landed < f->end)
        rc = -EIO; /* short body */
    return rc;
}

/* Reserves the run's capacity when fill_start_locked() could not: evicting, or one block at a
 * time, or else the run becomes a bypass (its bytes in memory, never cached). 0 or -ENOMEM;
 * -S3E_INSUFFICIENT_STORAGE for a plan's prefetch (no_bypass), which is then not fetched. */
static int fetch_reserve(struct fetch *f)
{
    struct cache *c = f->c;
    struct cver *v = f->v;
    struct ckey *ck = v->key;
    uint64_t acct = 0;
    for (uint64_t b = f->first; b < f->first + f->n; b++)
        acct += index_acct(index_block_bytes(v->meta.size, v->bs, b));
    pthread_mutex_lock(&c->mu);
    int as_lru = f->as_lru, no_bypass = f->no_bypass;
    pthread_mutex_unlock(&c->mu);
    int64_t since = 0;
    int for_keep = !as_lru && policy_keeps(c->pol, ck->k.b, ck->k.len, s3c_real_ns(), &since);
    int r = evict_reserve(c, acct, for_keep, since, &ck->k);
    if (r && f->n > 1) {
        /* not room for the whole run: one block at a time (readers of the rest retry) */
        pthread_mutex_lock(&c->mu);
        fetch_shrink_locked(f);
        pthread_mutex_unlock(&c->mu);
        acct = index_acct(index_block_bytes(v->meta.size, v->bs, f->first));
        r = evict_reserve(c, acct, for_keep, since, &ck->k);
    }
    if (r == 0) {
        pthread_mutex_lock(&c->mu);
        f->reserved = acct;
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    if (no_bypass)
        return -S3E_INSUFFICIENT_STORAGE; /* a prefetch the cache cannot hold: not fetched */
    unsigned char *mem = malloc(f->end - f->off);
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (mem) {
        f->mem = mem;
        f->bypass = 1;
        v->bypass_seen++;
    } else {
        rc = -ENOMEM;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* The start of run @f on the thread that carries its transfer: its reservation, its window
 * (or its data file). 0, or the run's error (fetch_finish() ends it then); *@windowed whether
 * its bytes go through a window (fillwin_on_data), else fetch_on_data; *@direct for a run
 * written around the page cache. */
static int fetch_begin(struct fetch *f, int *windowed, int *direct)
{
    struct cache *c = f->c;
    struct cver *v = f->v;
    int rc = 0;
    *windowed = *direct = 0;
    if (f->need_reserve)
        rc = fetch_reserve(f);
    if (!rc && !f->bypass)
        missource_run_start(f);
    if (!rc && !f->bypass) {
        int fd;
        pthread_mutex_lock(&c->mu);
        /* A run through a window creates its data file in the writer: the first byte waits
         * for neither the file nor the disk. */
        *windowed = fillwin_begin_locked(f);
        if (!*windowed)
            rc = cache_ver_fd_locked(c, v, 1, &fd);
        *direct = f->direct;
        pthread_mutex_unlock(&c->mu);
    }
    if (rc || f->bypass || !(backend_caps(c->be) & BE_CAP_LOCAL_FD)) { /* no file to send */
        pthread_mutex_lock(&c->mu);
        missource_run_none_locked(f);
        pthread_mutex_unlock(&c->mu);
    }
    return rc;
}

/* The end of run @f's transfer with result @rc: a windowed run is ended by the cache writer
 * once the disk has what it will take, any other here (fill_end_run()). */
static void fetch_finish(struct fetch *f, int windowed, int rc)
{
    struct cache *c = f->c;
    if (f->err && !rc)
        rc = f->err;
    if (!rc && f->landed < f->end)
        rc = -EIO; /* short body */
    if (windowed) {
        if (fillwin_received(f, rc))
            return;
        fill_end_run(f, rc);
        return;
    }
    if ((rc == -ENOSPC || rc == -EDQUOT) && !f->bypass && !f->err && f->landed == f->off)
        rc = fetch_to_memory(f);
    pthread_mutex_lock(&c->mu);
    ahead_received_locked(f); /* the transfer is over: the next may start before the sync */
    pthread_mutex_unlock(&c->mu);
    fill_end_run(f, rc);
}

static void fetch_run(void *arg)
{
    struct fetch *f = arg;
    struct cache *c = f->c;
    struct cver *v = f->v;
    struct ckey *ck = v->key;
    int windowed, direct;
    int rc = fetch_begin(f, &windowed, &direct);
    if (windowed) {
        struct be_sink sink = {cache_fetch_on_meta, fillwin_on_data, f};
        if (!f->err)
            rc = backend_get(c->be, ck->bucket, ck->key, f->off, f->end - f->off, &sink);
        fetch_finish(f, 1, rc);
        return;
    }
    if (!rc && !f->err) {
        if (!f->bypass && (backend_caps(c->be) & BE_CAP_LOCAL_FD))
            rc = fetch_copy_local(f, direct);
        else
            rc = -ENOTSUP;
        if (rc == -ENOTSUP) {
            struct be_sink sink = {cache_fetch_on_meta, fetch_on_data, f};
            if (direct && !f->bypass) {
                store_preallocate(v->fd, f->off, f->end - f->off, c->in_memory);
                fetch_stage_open(f);
            }
            rc = backend_get(c->be, ck->bucket, ck->key, f->off, f->end - f->off, &sink);
            rc = fetch_stage_close(f, rc);
        }
    }
    fetch_finish(f, 0, rc);
}

int fill_adopted_begin(struct fetch *f, int *windowed)
{
    int direct;
    int rc = fetch_begin(f, windowed, &direct);
    S3C_ASSERT(!direct);
    return rc;
}

int fill_adopted_data(struct fetch *f, int windowed, const void *buf, size_t len)
{
    return windowed ? fillwin_on_data(f, buf, len) : fetch_on_data(f, buf, len);
}

void fill_adopted_end(struct fetch *f, int windowed, int rc)
{
    fetch_finish(f, windowed, rc);
}

/* Marks what a run that went through the page cache landed whole: one fdatasync and one index
 * transaction for the whole run, after every byte landed; when it failed midway, for the
 * blocks that landed whole (unless the object changed). Returns the run's result; *@unsynced
 * the sync's error when every byte is in the file but none could be marked. */
static int fetch_complete(struct fetch *f, int rc, int *unsynced)
{
    struct cver *v = f->v;
    *unsynced = 0;
    if (f->bypass || rc == -ESTALE)
        return rc;
    uint64_t from = f->first + f->marked, to = from;
    while (to < f->first + f->n && S3C_MIN((to + 1) * v->bs, v->meta.size) <= f->landed)
        to++;
    if (to > from) {
        int r2 = fetch_complete_blocks(f, from, to);
        if (r2 && !rc && f->landed == f->end)
            *unsynced = r2; /* every byte is in the file: serve them, mark nothing present */
        else if (!rc)
            rc = r2;
    }
    return rc;
}

void fill_end_run(struct fetch *f, int rc)
{
    struct cache *c = f->c;
    struct cver *v = f->v;
    struct ckey *ck = v->key;
    int unsynced = 0;
    if (f->err && !rc)
        rc = f->err;
    if (!f->win) {
        rc = fetch_complete(f, rc, &unsynced);
    } else if (rc != -ESTALE) {
        int r2 = fillwin_complete(f, &unsynced);
        if (!rc)
            rc = r2;
    }

    pthread_mutex_lock(&c->mu);
    if (rc == -ESTALE && ck->cur == v)
        v->validated_ns = 0; /* changed upstream: the next request revalidates */
    if (!rc && !f->bypass && !unsynced)
        missource_run_end_locked(f); /* a chain goes on with the run's file */
    int src_fd = f->src_fd, given_fd = f->given_fd;
    f->src_fd = f->given_fd = -1;
    f->src_state = -1;
    if (f->win) {
        fillwin_clear_fetching_locked(f);
    } else {
        for (uint64_t b = f->first + f->marked; b < f->first + f->n; b++)
            cache_bit_clr(v->fetching, b);
        if (f->bypass) {
            for (uint64_t b = f->first; b < f->first + f->n; b++)
                cache_bit_clr(v->fetching, b);
        }
    }
    evict_unreserve_locked(c, f->reserved);
    f->reserved = 0;
    f->running = 0;
    ahead_received_locked(f); /* if fillwin_received() did not already */
    fetch_unlink_locked(c, f);
    if (rc && f->no_bypass && rc == -S3E_INSUFFICIENT_STORAGE && f->landed == f->off) {
        /* a plan's prefetch the cache had no room for: not an error of the object's; a reader
         * that joined it fetches the blocks itself (bypassing, if it must) */
        v->noroom_gen++;
        cache_fetch_retire_locked(f);
    } else if (rc) {
        if (!f->err)
            f->err = rc;
        v->err_gen++;
        v->last_err = rc == -ESTALE ? -S3E_SERVICE_UNAVAILABLE : rc;
        cache_fetch_retire_locked(f);
    } else if (f->win) {
        /* Kept while readers may still copy from its window (freed when none is left, or
         * its slots were all taken back); served from the file when unsynced. A window no
         * reader is attached to goes now: its readers left (or never came: a read-ahead, a
         * client gone), and a later one reads the file, or fetches what was not written. */
        f->kept = 1;
        if (!f->copiers && (!f->wreaders || (!window_held(f->win) && !unsynced)))
            cache_fetch_retire_locked(f);
    } else if (f->bypass || unsynced) {
        /* kept for the readers still streaming its bytes; with none left (they went while it
         * ran: read-ahead), nobody will read them */
        unsigned held = 1 + (ck->cur == v); /* this run's reference and the key's */
        for (struct fetch *x = v->fetches; x; x = x->next)
            held += x->running;
        if (v->refs <= held)
            fill_drop_finished_locked(v); /* f too */
        else
            prune_bypass_locked(v, f);
    } else {
        cache_fetch_remove_locked(v, f);
        cache_fetch_free(f);
    }
    cache_wake_locked(&v->waiters);
    pthread_mutex_unlock(&c->mu);
    if (src_fd >= 0)
        close(src_fd);
    if (given_fd >= 0)
        close(given_fd);
    if (rc && rc != CACHE_ERR_CLOSING)
        log_warn("cache: fetching \"%s/%s\": %s", ck->bucket, ck->key, s3c_strerror(rc));
    if (unsynced)
        log_warn("cache: syncing \"%s/%s\": %s: served, not cached", ck->bucket, ck->key,
                 s3c_strerror(unsynced));
    cache_unlinks_run(c);
    pthread_mutex_lock(&c->mu);
    cache_ver_put_locked(c, v);
    cache_key_put_locked(c, ck);
    cache_job_done(c);
    pthread_mutex_unlock(&c->mu);
}

/* A new run of blocks [@first, @first + @n) of @v, its capacity reserved if there is room
 * now (else its worker reserves it): NULL without memory. Not yet in flight (fetch_link). */
static struct fetch *fetch_new_locked(struct cache *c, struct cver *v, uint64_t first, uint64_t n,
                                      uint64_t follow_to, int given_fd)
{
    struct fetch *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->c = c;
    f->v = v;
    f->first = first;
    f->n = n;
    f->off = first * v->bs;
    f->end = S3C_MIN((first + n) * v->bs, v->meta.size);
    f->landed = f->woke_at = f->off;
    f->running = 1;
    f->dfd = f->src_fd = -1;
    f->given_fd = given_fd;
    f->follow_to = follow_to;
    uint64_t acct = 0;
    for (uint64_t b = first; b < first + n; b++)
        acct += index_acct(index_block_bytes(v->meta.size, v->bs, b));
    if (c->used + c->reserved + acct <= c->cap) {
        c->reserved += acct;
        f->reserved = acct;
    } else {
        f->need_reserve = 1;
    }
    v->refs++;
    v->key->refs++;
    return f;
}

/* Run @f is in flight: its blocks fetching, on its version's and the cache's lists. */
static void fetch_link_locked(struct fetch *f)
{
    struct cache *c = f->c;
    struct cver *v = f->v;
    for (uint64_t b = f->first; b < f->first + f->n; b++)
        cache_bit_set(v->fetching, b);
    ahead_receiving_locked(f);
    f->next = v->fetches;
    v->fetches = f;
    f->all_next = c->fetches;
    c->fetches = f;
}

/* Starts a run of blocks [@first, @first + @n) on a worker, or with @ahead on the fetch
 * threads (ahead.c). A chain run also names the block its chain ends at (@follow_to, else 0)
 * and may be handed the backend file the previous run copied from (@given_fd, owned by the run
 * once this returns 0). */
static int fill_start_on_locked(struct cache *c, struct cver *v, uint64_t first, uint64_t n,
                                uint64_t follow_to, int given_fd, int ahead, struct workq *wq)
{
    if (c->closing)
        return CACHE_ERR_CLOSING;
    struct fetch *f = fetch_new_locked(c, v, first, n, follow_to, given_fd);
    if (!f)
        return -ENOMEM;
    int rc = ahead ? ahead_submit_locked(c, fetch_run, f)
                   : cache_submit_to(c, wq ? wq : c->wq, WORKQ_HIGH, fetch_run, f);
    if (rc) {
        evict_unreserve_locked(c, f->reserved);
        v->refs--;
        v->key->refs--;
        free(f);
        return rc == -ESHUTDOWN ? CACHE_ERR_CLOSING : rc;
    }
    fetch_link_locked(f);
    return 0;
}

struct fetch *fill_adopt_locked(struct cache *c, struct cver *v, uint64_t n)
{
    if (c->closing || !v->nblocks)
        return NULL;
    for (uint64_t b = 0; b < n; b++)
        if (cache_bit(v->present, b) || cache_bit(v->fetching, b))
            return NULL;
    struct fetch *f = fetch_new_locked(c, v, 0, n, 0, -1);
    if (f) {
        fetch_link_locked(f);
        c->njobs++; /* a job until fill_end_run(), as a run on a worker is */
    }
    return f;
}

int fill_start_locked(struct cache *c, struct cver *v, uint64_t first, uint64_t n,
                      uint64_t follow_to, int given_fd)
{
    return fill_start_on_locked(c, v, first, n, follow_to, given_fd, 0, NULL);
}

/* Ahead of a reader: a run of one block, on the fetch threads, for each block of [@b0, @b1) of
 * @v neither present nor fetching, as many as ahead_room_locked() lets start now (a remote
 * backend, --fetch-parallel): the ranged GETs in flight for one object that a store serving
 * each connection slowly needs. */
static void fill_ahead_locked(struct cache *c, struct cver *v, uint64_t b0, uint64_t b1)
{
    if (b1 > v->nblocks)
        b1 = v->nblocks;
    unsigned room = ahead_room_locked(c, v);
    for (uint64_t b = b0; b < b1 && room; b++) {
        if (cache_bit(v->present, b) || cache_bit(v->fetching, b))
            continue;
        if (fill_start_on_locked(c, v, b, 1, 0, -1, 1, NULL))
            return;
        room--;
    }
}

int fill_ensure_locked(struct cache *c, struct cver *v, uint64_t b0, uint64_t b1)
{
    return fill_ensure_on_locked(c, v, b0, b1, NULL);
}

int fill_ensure_on_locked(struct cache *c, struct cver *v, uint64_t b0, uint64_t b1,
                          struct workq *wq)
{
    int started = 0;
    if (b1 > v->nblocks)
        b1 = v->nblocks;
    uint64_t b = b0;
    while (b < b1) {
        if (cache_bit(v->present, b) || cache_bit(v->fetching, b)) {
            b++;
            continue;
        }
        uint64_t e = b + 1;
        while (e < b1 && e - b < CACHE_FETCH_MAX_BLOCKS && !cache_bit(v->present, e) &&
               !cache_bit(v->fetching, e))
            e++;
        int rc = fill_start_on_locked(c, v, b, e - b, 0, -1, 0, wq);
        if (rc)
            return started ? started : rc;
        started++;
        b = e;
    }
    return started;
}

/* ---- the reader side ------------------------------------------------------------------- */

static uint64_t ra_blocks(struct cache *c, struct cver *v)
{
    return (c->readahead + v->bs - 1) / v->bs;
}

/* Read-ahead for a sequential reader in block @b: the next blocks (--readahead) must be present
 * or fetching. A run started for them goes on towards the end of the reader's range (at most
 * CACHE_FETCH_MAX_BLOCKS), as the reader's first run did: a long read is a few backend
 * requests, not one per block (each a request through the link and a window of its own;
 * before, a 256 MiB shard past its first run was fetched 8 MiB at a time, 17 requests). A
 * local file backend keeps the read-ahead's own range. */
static void read_ahead_locked(struct cache *c, struct cver *v, struct cache_obj *o, uint64_t b)
{
    uint64_t end = cache_obj_end_block(o, v);
    if (ahead_room_locked(c, v)) { /* ranged GETs in parallel, a block each, up to its end */
        fill_ahead_locked(c, v, b + 1, S3C_MIN(end, b + 1 + c->ahead_per_object));
        return;
    }
    if (v->nahead)
        return; /* those in flight cover what comes next; more start as they end */
    uint64_t last = S3C_MIN(end, b + 1 + ra_blocks(c, v));
    if (backend_caps(c->be) & BE_CAP_LOCAL_FD) { /* a local file: no request to save */
        fill_ensure_locked(c, v, b + 1, last);
        return;
    }
    for (uint64_t x = b + 1; x < last; x++)
        if (!cache_bit(v->present, x) && !cache_bit(v->fetching, x)) {
            (void)fill_ensure_locked(c, v, x, S3C_MIN(end, x + CACHE_FETCH_MAX_BLOCKS));
            return;
        }
}

/* Starts what a range's first missing block @miss needs from [@from, @b1): the range (in runs
 * of at most CACHE_FETCH_MAX_BLOCKS), or the read-ahead window when that is larger, counted
 * from @miss. With room for ranged GETs ahead: one block now and the rest in parallel, what
 * they cannot take of the window as one stream (the range's first window is fetched whatever
 * its reader does next); else one stream, the run as long as the read-ahead. The number of
 * runs started, or an error (fill_ensure_locked()). */
static int open_window_locked(struct cache *c, struct cver *v, uint64_t from, uint64_t b1,
                              uint64_t miss)
{
    uint64_t win = S3C_MAX((uint64_t)CACHE_FETCH_MAX_BLOCKS, 1 + ra_blocks(c, v));
    int par = !v->bypass_seen && ahead_room_locked(c, v);
    uint64_t last = S3C_MIN(b1, from + (par ? 1 : win));
    if (from >= b1)
        return 0;
    int rc = fill_ensure_locked(c, v, from, S3C_MIN(last, miss + win));
    if (rc >= 0 && par) {
        fill_ahead_locked(c, v, last, S3C_MIN(b1, last + c->ahead_per_object));
        (void)fill_ensure_locked(c, v, last, S3C_MIN(b1, miss + win));
    }
    return rc;
}

/* cache_obj_open_range(), and with a waiter (cache_obj_open_get) a cold range may be sent from
 * the backend's file (missource.c). */
static int open_range(struct cache_obj *o, uint64_t off, uint64_t len, struct cache_waiter *w,
                      int *fd)
{
    CHECK_OBJ_NOTNULL(o, CACHE_OBJ_MAGIC);
    struct cache *c = o->c;
    int rc;
    pthread_mutex_lock(&c->mu);
    struct cver *v = o->v;
    if (!v) {
        pthread_mutex_unlock(&c->mu);
        return -EINVAL;
    }
    uint64_t end = off + len;
    if (end > v->meta.size || end < off)
        end = v->meta.size;
    o->range_end = end;
    uint64_t b0 = off / v->bs, b1 = (end + v->bs - 1) / v->bs;
    if (!o->opened) { /* what the request reads, and how much of it the SSD holds (policy.c) */
        o->opened = 1;
        o->read_off = off < end ? off : end;
        o->read_end = end;
        o->hit_bytes = 0;
        for (uint64_t b = b0; b < b1; b++)
            if (cache_bit(v->present, b))
                o->hit_bytes += S3C_MIN(end, (b + 1) * v->bs) - S3C_MAX(off, b * v->bs);
    }
    uint64_t miss = b1;
    for (uint64_t b = b0; b < b1; b++) {
        if (!cache_bit(v->present, b)) {
            miss = b;
            break;
        }
    }
    if (miss == b1) {
        int wfd;
        rc = cache_ver_fd_locked(c, v, 0, &wfd);
        if (!rc) {
            /* A duplicate of the version's descriptor: no path walk. Sharing the file offset is
             * harmless: responses read with sendfile/pread at explicit offsets. */
            int nfd = fcntl(wfd, F_DUPFD_CLOEXEC, 0);
            if (nfd < 0) {
                char dp[STORE_PATH_MAX];
                cache_ver_path(c, v, dp);
                nfd = open(dp, O_RDONLY | O_CLOEXEC);
            }
            rc = nfd < 0 ? -errno : 0;
            if (!rc)
                *fd = nfd;
        }
        if (!rc && o->guessed) {
            o->how = CACHE_HIT;
            o->guessed = 0;
        }
        if (rc) {
            log_err("cache: opening data of \"%s/%s\": %s", v->key->bucket, v->key->key,
                    s3c_strerror(rc));
            v->refs++; /* o holds v: it survives the drop */
            cache_ver_broken_locked(c, v);
            v->refs--;
            rc = -S3E_INTERNAL;
        }
        evict_touch_locked(c, v, 0);
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    if (w) {
        rc = missource_open_locked(o, v, off, end, miss, b1, w, fd);
        if (rc != -ENOENT) {
            pthread_mutex_unlock(&c->mu);
            return rc;
        }
    }
    if (cache_bit(v->fetching, miss)) {
        /* Joining a fetch whose bytes for this range have all landed (only their sync is
         * pending) costs the reader no wait: that is a hit. */
        if (cache_ver_landed_locked(v, off, end)) {
            if (o->guessed || o->how == CACHE_HIT) {
                o->how = CACHE_HIT;
                o->guessed = 0;
            }
        } else {
            cache_outcome_waiting(o);
        }
        /* the rest of the range's first window, as if this reader had started the fetch (it
         * may be a lookup's of the first block, --cold-get) */
        (void)open_window_locked(c, v, miss + 1, b1, miss);
        rc = -EAGAIN;
    } else {
        rc = open_window_locked(c, v, miss, b1, miss);
        if (rc >= 0) {
            cache_outcome_started(o);
            if (o->how == CACHE_MISS && o->hit_bytes > 0)
                o->how = CACHE_PARTIAL; /* its cached blocks come from the SSD */
            rc = -EAGAIN;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cache_obj_open_range(struct cache_obj *o, uint64_t off, uint64_t len, int *fd)
{
    return open_range(o, off, len, NULL, fd);
}

int cache_obj_open_get(struct cache_obj *o, uint64_t off, uint64_t len, struct cache_waiter *w,
                       int *fd)
{
    return open_range(o, off, len, w, fd);
}

ssize_t cache_obj_read(struct cache_obj *o, uint64_t pos, void *buf, size_t max,
                       struct cache_waiter *w)
{
    CHECK_OBJ_NOTNULL(o, CACHE_OBJ_MAGIC);
    struct cache *c = o->c;
    ssize_t rc;
    uint64_t avail = 0;
    int fd = -1;
    pthread_mutex_lock(&c->mu);
    struct cver *v = o->v;
    if (!v) {
        rc = -EINVAL;
        goto out;
    }
    if (pos >= v->meta.size || max == 0) {
        rc = 0;
        goto out;
    }
    uint64_t b = pos / v->bs;
    uint64_t bend = S3C_MIN((b + 1) * v->bs, v->meta.size);
    int sequential = pos == o->next_pos;
    fillwin_reader_at_locked(o, pos);
    /* A fill's window first: copying from memory costs less than any read of the file (the
     * bytes written around the page cache would come from the disk). */
    for (;;) { /* a failed copy means its chunk is gone for good: this ends */
        const unsigned char *mem;
        size_t wav;
        struct fetch *wf = fillwin_find_locked(v, pos, &mem, &wav);
        if (!wf)
            break;
        size_t n = S3C_MIN(wav, max);
        /* a reader of the run before it copies (its first copy may take the whole run: the
         * bytes all landed before it came), so that moving past the run's end below is a
         * reader leaving that read it all, and the window lets those bytes go */
        fillwin_attach_locked(o, wf, pos);
        int got = fillwin_copy(wf, pos, mem, buf, n);
        if (!got)
            continue; /* the window let those bytes go meanwhile: look again */
        /* 2: the run failed during the copy and is freed: nothing to attach to, and no
         * read-ahead (the failed run's blocks are no longer fetching: a read-ahead now would
         * begin a fetch under the fault, and a later reader joining it would fail with it) */
        int failed = got == 2 || wf->err;
        if (got == 1)
            fillwin_attach_locked(o, wf, pos + n);
        o->next_pos = pos + n;
        o->waited_data = 0;
        if (sequential && c->readahead && !v->bypass_seen && !failed)
            read_ahead_locked(c, v, o, b);
        rc = (ssize_t)n;
        goto out;
    }
    if (cache_bit(v->present, b)) {
        avail = bend - pos;
    } else {
        struct fetch *f = fill_find_locked(v, pos);
        uint64_t in_file = 0;
        if (f && f->win && !window_in_file(f->win, pos, &in_file))
            in_file = 0;
        if (f && f->err && !in_file) {
            rc = f->err == -ESTALE ? -S3E_SERVICE_UNAVAILABLE : f->err;
            goto out;
        }
        if (f && f->win && in_file) {
            avail = in_file; /* written by the cache writer, gone from the window */
            fillwin_attach_locked(o, f, pos);
        } else if (f && !f->win && f->landed > pos) {
            avail = f->landed - pos;
            if (f->bypass) {
                size_t n = (size_t)S3C_MIN(avail, (uint64_t)max);
                memcpy(buf, f->mem + (pos - f->off), n);
                o->how = CACHE_BYPASS;
                o->next_pos = pos + n;
                o->waited_data = 0;
                if (sequential && c->readahead && !v->bypass_seen)
                    fill_ensure_locked(c, v, b + 1,
                                       S3C_MIN(cache_obj_end_block(o, v), b + 1 + ra_blocks(c, v)));
                rc = (ssize_t)n;
                goto out;
            }
        } else if (f) {
            cache_outcome_waiting(o);
            fillwin_starved_locked(f);
            fillwin_attach_locked(o, f, pos);
            o->waited_data = 1;
            o->err_gen = v->err_gen;
            cache_arm_locked(o, &v->waiters, w);
            rc = -EAGAIN;
            goto out;
        } else {
            if (o->waited_data && v->err_gen != o->err_gen) {
                o->waited_data = 0;
                rc = v->last_err ? v->last_err : -EIO;
                goto out;
            }
            uint64_t last = S3C_MIN(cache_obj_end_block(o, v), b + 1 + ra_blocks(c, v));
            int par = sequential && !v->bypass_seen && ahead_room_locked(c, v);
            if (last <= b || v->bypass_seen || par || v->nahead)
                last = b + 1;
            int r = fill_ensure_locked(c, v, b, last);
            if (r < 0) {
                rc = r;
                goto out;
            }
            if (par) /* the blocks after it, in parallel */
                read_ahead_locked(c, v, o, b);
            /* the run this reader now waits for is a reader's, not a read-ahead: it must not
             * wait for room behind the runs started ahead of it (they wait for it) */
            struct fetch *rf = fill_find_locked(v, pos);
            if (rf)
                fillwin_starved_locked(rf);
            cache_outcome_started(o);
            o->waited_data = 1;
            o->err_gen = v->err_gen;
            cache_arm_locked(o, &v->waiters, w);
            rc = -EAGAIN;
            goto out;
        }
    }
    o->waited_data = 0;
    if (sequential && c->readahead && !v->bypass_seen)
        read_ahead_locked(c, v, o, b);
    if ((rc = cache_ver_fd_locked(c, v, 0, &fd))) {
        cache_ver_broken_locked(c, v);
        rc = -S3E_INTERNAL;
        goto out;
    }
    v->refs++; /* keeps fd open while we read without the lock */
    pthread_mutex_unlock(&c->mu);
    size_t want = (size_t)S3C_MIN(avail, (uint64_t)max);
    ssize_t n;
    do
        n = pread(fd, buf, want, (off_t)pos);
    while (n < 0 && errno == EINTR);
    rc = n < 0 ? -errno : n == 0 ? -EIO : n;
    pthread_mutex_lock(&c->mu);
    if (rc > 0)
        o->next_pos = pos + (uint64_t)rc;
    else if (cache_bit(v->present, b))
        cache_ver_broken_locked(c, v); /* unreadable: the next request fetches it again */
    cache_ver_put_locked(c, v);
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}
