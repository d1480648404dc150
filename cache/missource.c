/*
 * missource.c: --miss-source, the one module of the cache that sends a cold GET from a local
 * backend's own file (BE_CAP_LOCAL_FD) instead of streaming it from the cache file as the fill
 * lands. A run of the fill opens the backend file, checks it against the version and publishes
 * it; GETs of the version read a duplicate with pread (http/respond.c: not sendfile, which stalls
 * on a file another tool cuts short) while a chain of runs fills the cache behind them, run after run with the same file, as long as such GETs read.
 * The rest of the cache calls: missource_enabled() at open, missource_defer_record() for a new
 * version, missource_run_*() from a fill's run, missource_open_locked() from a GET's open,
 * and cache_obj_delivered().
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "backends/backend.h"
#include "cache_priv.h"
#include "missource_priv.h"
#include "table_priv.h"
#include "lib/conf.h"

/* The smallest cold range sent from the backend's file. A smaller one streams from the cache
 * as its fill lands: its fill ends with its response, so reading it again at once is a hit; a
 * large one (shards, checkpoints) is sent at the backend file's pace while the cache fills
 * behind it. */
#define MISSOURCE_MIN (32ull << 20)

int missource_enabled(const struct conf *cf, struct backend *be)
{
    unsigned caps = be ? backend_caps(be) : 0;
    return (caps & BE_CAP_LOCAL_FD) &&
           (cf->miss_source == CONF_MISS_BACKEND ||
            (cf->miss_source == CONF_MISS_AUTO && (caps & BE_CAP_LOCAL_DISK)));
}

int missource_defer_record(const struct cache *c, uint64_t size)
{
    return c->miss_source && size >= MISSOURCE_MIN;
}

/* Opens the backend file of @f's run (or takes the one a chain handed it), checks it against
 * the version and publishes it as f->src_fd for GETs that send from it (missource_open_locked):
 * 0, or the error (src_state -1). Idempotent; the run owns the file. */
int missource_fetch_open(struct fetch *f)
{
    struct cache *c = f->c;
    struct cver *v = f->v;
    if (f->src_state)
        return f->src_state > 0 ? 0 : f->src_err;
    struct be_meta m;
    int bfd = f->given_fd, rc = 0;
    f->given_fd = -1;
    if (bfd < 0) { /* else the previous run of a chain checked it against v already */
        rc = backend_open_fd(c->be, v->key->bucket, v->key->key, &bfd, &m);
        if (!rc)
            rc = cache_fetch_on_meta(f, &m);
        else
            bfd = -1;
    }
    pthread_mutex_lock(&c->mu);
    f->src_fd = bfd;
    f->src_err = rc;
    f->src_state = rc ? -1 : 1;
    if (c->miss_source) /* only GETs that may send from it wait for this */
        cache_wake_locked(&v->waiters);
    pthread_mutex_unlock(&c->mu);
    return rc;
}


void missource_run_start(struct fetch *f)
{
    /* A run whose GETs may send from the backend's file opens it first: their first byte does
     * not wait for the cache file's creation (a directory fsync). */
    if (f->c->miss_source)
        (void)missource_fetch_open(f);
}

void missource_run_none_locked(struct fetch *f)
{
    f->src_state = -1;
    if (f->c->miss_source) /* GETs waiting for one stream from the cache instead */
        cache_wake_locked(&f->v->waiters);
}

/* The running chain run whose chain covers block @b (from its first block to its follow_to). */
static struct fetch *missource_chain_covering_locked(const struct cver *v, uint64_t b)
{
    for (struct fetch *f = v->fetches; f; f = f->next)
        if (f->running && !f->bypass && f->first <= b &&
            b < S3C_MAX(f->first + f->n, f->follow_to))
            return f;
    return NULL;
}

/* Starts the run of a chain at the first block of [@b, @follow_to) that is neither present nor
 * being fetched, up to CACHE_FETCH_MAX_BLOCKS, handing it @src_fd (>= 0: owned by the new run
 * on success). 1 when a run started, 0 when nothing is left to fetch, or an error. */
static int missource_chain_next_locked(struct cache *c, struct cver *v, uint64_t b,
                                       uint64_t follow_to, int src_fd)
{
    if (follow_to > v->nblocks)
        follow_to = v->nblocks;
    while (b < follow_to && (cache_bit(v->present, b) || cache_bit(v->fetching, b)))
        b++;
    if (b >= follow_to)
        return 0;
    uint64_t e = b + 1;
    while (e < follow_to && e - b < CACHE_FETCH_MAX_BLOCKS && !cache_bit(v->present, e) &&
           !cache_bit(v->fetching, e))
        e++;
    int rc = c->up.run_start_locked(c, v, b, e - b, follow_to, src_fd); /* fill.c */
    if (rc)
        return rc;
    /* Its GETs send from the backend's file, not from the cache's: the run may write around
     * the page cache like a warm-up (fetch_copy_direct), the cheapest copy there is. */
    v->fetches->direct = 1;
    return 1;
}

/* Makes sure blocks [@b0, @b1) of @v are being filled, in one chain of runs: a running chain
 * that covers the first missing block is extended to @b1, else a new chain starts there.
 * Returns 1 when this started a run, 0 when it joined one, or an error. */
static int missource_chain_ensure_locked(struct cache *c, struct cver *v, uint64_t b0, uint64_t b1)
{
    for (uint64_t b = b0; b < b1 && b < v->nblocks; b++) {
        if (cache_bit(v->present, b))
            continue;
        struct fetch *f = missource_chain_covering_locked(v, b);
        if (f) {
            if (f->follow_to < b1)
                f->follow_to = b1;
            return 0;
        }
        if (cache_bit(v->fetching, b))
            continue; /* a reader's read-ahead run: the chain starts after it */
        return missource_chain_next_locked(c, v, b, b1, -1);
    }
    return 0;
}

/* A GET of [@b0, @b1) (blocks) not all present, with --miss-source: rather than streaming the
 * bytes from the cache file as they land (writing them into fresh page-cache pages and reading
 * them back), the response is read from the backend file the fill copies from (with pread, see
 * respond_object_at()), while the chain fills the cache. The file is the one the run opened
 * and checked against @v (size, ETag): the backend is opened once per fill, however many GETs
 * send from it. 1 with *@fd (caller owns it; object offset = file offset); -EINPROGRESS after
 * @w->suspend() when a run is still opening the file; -ENOENT: stream from the cache. */
static int missource_send_locked(struct cache *c, struct cache_obj *o, struct cver *v,
                                 uint64_t b0, uint64_t b1, struct cache_waiter *w, int *fd)
{
    /* A GET woken from a wait below starts no other chain: when the run it waited for has no
     * file to send from (it went to memory as a bypass, failed, or ended), the GET streams
     * from the cache, whose reads handle those cases. A new chain each time could loop for
     * good (each run going to memory in turn). */
    if (!o->from_source && !o->source_waited) {
        int r = missource_chain_ensure_locked(c, v, b0, b1);
        if (r < 0)
            return -ENOENT;
        if (r > 0)
            cache_outcome_started(o);
        else
            cache_outcome_waiting(o);
    }
    struct fetch *src = NULL, *pending = NULL;
    for (struct fetch *f = v->fetches; f && !src; f = f->next) {
        if (!f->running)
            continue;
        if (f->src_state == 1 && f->src_fd >= 0)
            src = f;
        else if (f->src_state == 0 && !f->bypass)
            pending = f;
    }
    if (src) {
        int nfd = fcntl(src->src_fd, F_DUPFD_CLOEXEC, 0);
        if (nfd < 0)
            return -ENOENT;
        *fd = nfd;
        if (!o->from_source) {
            o->from_source = 1;
            v->src_readers++;
        }
        c->st.source_sends++;
        return 1;
    }
    if (pending) {
        o->source_waited = 1;
        cache_arm_locked(o, &v->waiters, w);
        return -EINPROGRESS;
    }
    return -ENOENT;
}

void missource_run_end_locked(struct fetch *f)
{
    struct cache *c = f->c;
    struct cver *v = f->v;
    if (f->src_state == 1 && v->key->cur == v && !v->dropped &&
        f->follow_to > f->first + f->n &&
        (v->src_readers || f->first + f->n < v->src_done_to) && !c->closing &&
        missource_chain_next_locked(c, v, f->first + f->n, f->follow_to, f->src_fd) > 0)
        f->src_fd = -1; /* the next run owns it now */
}

int missource_open_locked(struct cache_obj *o, struct cver *v, uint64_t off, uint64_t end,
                          uint64_t b0, uint64_t b1, struct cache_waiter *w, int *fd)
{
    struct cache *c = o->c;
    if (!c->miss_source || end - off < MISSOURCE_MIN || v->bypass_seen || v->unindexed ||
        cache_ver_landed_locked(v, off, end))
        return -ENOENT;
    return missource_send_locked(c, o, v, b0, b1, w, fd);
}

void cache_obj_delivered(struct cache_obj *o)
{
    CHECK_OBJ_NOTNULL(o, CACHE_OBJ_MAGIC);
    struct cache *c = o->c;
    pthread_mutex_lock(&c->mu);
    if (o->v && o->from_source) {
        uint64_t to = cache_obj_end_block(o, o->v);
        if (to > o->v->src_done_to)
            o->v->src_done_to = to;
    }
    pthread_mutex_unlock(&c->mu);
}

