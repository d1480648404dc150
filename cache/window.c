/*
 * window.c: a fill run's bytes in memory, in chunks from one bounded pool of slots, between
 * the backend and the cache disk (see window.h). The pool only grows (up to its cap) and
 * never frees a slot while the cache runs: a reader copying from a slot that was just
 * released reads memory that is still ours (and then sees, with window_still(), that the copy
 * is void). Pure bookkeeping: no I/O, no lock, no knowledge of the cache.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/s3c.h"
#include "window.h"

#define WIN_C_FLIGHT 1u  /* the writer is writing it */
#define WIN_C_WRITTEN 2u /* in the data file */
#define WIN_B_STARTED 1u /* the writer wrote (or writes) a chunk of it */
#define WIN_B_DROPPED 2u /* never written: the disk was behind, or a write failed */
#define WIN_B_CUT 4u     /* never whole: the run ended before it */
#define WIN_B_FORCED 8u  /* counted in pool.forced: let go with bytes a reader had not copied */
#define WIN_B_GONE (WIN_B_DROPPED | WIN_B_CUT)
#define WIN_SLOT_ALIGN 4096u

struct window {
    struct window *prev, *next; /* the pool's list, oldest first */
    void *owner;
    uint64_t off, end, bs;
    size_t chunk;
    unsigned nblocks, cpb, nchunks; /* cpb: chunks per block */
    uint64_t landed;                /* bytes [off, landed) received */
    uint64_t read_to;               /* every attached reader copied [off, read_to) */
    uint64_t read_at;               /* when read_to last moved (or the window began), ms */
    unsigned readers;               /* readers attached (window_readers) */
    unsigned copying;               /* of which copy its bytes (not a walk) */
    int ever_read;                  /* a reader was attached once */
    unsigned held;                  /* chunks holding a slot */
    unsigned wnext;                 /* the next chunk to write */
    int received, werr;
    unsigned char **mem; /* per chunk: its slot or NULL */
    uint8_t *cst;        /* per chunk: WIN_C_* */
    uint8_t *bst;        /* per block: WIN_B_* */
};

/* ---- the pool ------------------------------------------------------------------------- */

int window_pool_init(struct window_pool *p, uint64_t total_bytes, uint64_t per_window_bytes,
                     uint64_t block_size, size_t chunk_bytes, uint64_t stall_ms,
                     window_drop_f *on_drop)
{
    memset(p, 0, sizeof(*p));
    p->on_drop = on_drop;
    p->stall_ms = stall_ms;
    if (!block_size || !total_bytes || !per_window_bytes)
        return 0; /* off */
    p->chunk = (size_t)S3C_MIN((uint64_t)(chunk_bytes ? chunk_bytes : WINDOW_CHUNK), block_size);
    uint64_t cpb = (block_size + p->chunk - 1) / p->chunk;
    uint64_t per = S3C_MAX((per_window_bytes + p->chunk - 1) / p->chunk, cpb + 2);
    uint64_t max = total_bytes / p->chunk;
    if (max < per || per > UINT32_MAX / 2)
        return 0; /* not one window's worth: off */
    if (max > UINT32_MAX / 2)
        max = UINT32_MAX / 2;
    p->free = calloc((size_t)max, sizeof(*p->free));
    if (!p->free)
        return -ENOMEM;
    p->max_slots = (unsigned)max;
    p->per_window = (unsigned)per;
    return 0;
}

void window_pool_fini(struct window_pool *p)
{
    S3C_ASSERT(!p->head);
    for (unsigned i = 0; i < p->nfree; i++)
        free(p->free[i]);
    free(p->free);
    memset(p, 0, sizeof(*p));
}

uint64_t window_pool_bytes(const struct window_pool *p)
{
    return (uint64_t)p->nslots * p->chunk;
}

uint64_t window_pool_held(const struct window_pool *p)
{
    return (uint64_t)(p->nslots - p->nfree) * p->chunk;
}

uint64_t window_pool_limit(const struct window_pool *p)
{
    return (uint64_t)p->max_slots * p->chunk;
}

unsigned window_pool_cap(const struct window_pool *p)
{
    return S3C_MAX(p->per_window, p->max_slots / S3C_MAX(p->receiving, 1u));
}

static void pool_put(struct window_pool *p, unsigned char *slot)
{
    S3C_ASSERT(p->nfree < p->max_slots);
    p->free[p->nfree++] = slot;
}

/* A free slot (@grow: or a new one, within the cap) for @w, within its share; else NULL. */
static int may_grow(const struct window_pool *p, const struct window *w);

static unsigned char *pool_take(struct window_pool *p, const struct window *w, int grow)
{
    if (!may_grow(p, w))
        return NULL;
    if (p->nfree)
        return p->free[--p->nfree];
    if (!grow || p->nslots >= p->max_slots)
        return NULL;
    void *m = NULL;
    if (posix_memalign(&m, WIN_SLOT_ALIGN, p->chunk))
        return NULL;
    p->nslots++;
    return m;
}

/* ---- geometry ------------------------------------------------------------------------- */

static unsigned chunk_of(const struct window *w, uint64_t pos)
{
    uint64_t rel = pos - w->off, bi = rel / w->bs;
    return (unsigned)(bi * w->cpb + (rel - bi * w->bs) / w->chunk);
}

/* Object bytes [*@cs, *@ce) of chunk @ci; 0 when it lies past the end (the last block). */
static int chunk_range(const struct window *w, unsigned ci, uint64_t *cs, uint64_t *ce)
{
    uint64_t bi = ci / w->cpb, j = ci % w->cpb;
    uint64_t bstart = w->off + bi * w->bs;
    *cs = bstart + j * w->chunk;
    *ce = S3C_MIN(S3C_MIN(*cs + w->chunk, bstart + w->bs), w->end);
    return *cs < *ce;
}

/* The chunk the run fills now (holds bytes it still copies into): never released. */
static int is_filling(const struct window *w, unsigned ci)
{
    return !w->received && w->landed < w->end && ci == chunk_of(w, w->landed);
}

/* Whether every attached reader copied all of chunk @ci (or it lies past the end). */
static int consumed(const struct window *w, unsigned ci)
{
    uint64_t cs, ce;
    return !chunk_range(w, ci, &cs, &ce) || ce <= w->read_to;
}

#define WIN_R_CONSUMED 0 /* consumed, and written or of a block gone: nobody needs it */
#define WIN_R_WRITTEN 1  /* written (a reader behind reads it from the file) */
#define WIN_R_FORCE 2    /* written or of a block gone, consumed or not (a reader refetches) */

/* Whether chunk @ci's slot may go back (@mode: WIN_R_*). Bytes an attached reader has not
 * copied are never released unless they are in the file (or @mode is WIN_R_FORCE). */
static int releasable_as(const struct window *w, unsigned ci, int mode)
{
    if (!w->mem[ci] || (w->cst[ci] & WIN_C_FLIGHT) || is_filling(w, ci))
        return 0;
    int written = !!(w->cst[ci] & WIN_C_WRITTEN), gone = !!(w->bst[ci / w->cpb] & WIN_B_GONE);
    switch (mode) {
    case WIN_R_CONSUMED: return (written || gone) && consumed(w, ci);
    case WIN_R_WRITTEN: return written;
    default: return written || gone;
    }
}

static int releasable(const struct window *w, unsigned ci)
{
    return releasable_as(w, ci, WIN_R_CONSUMED);
}

static unsigned char *release(struct window *w, unsigned ci)
{
    unsigned char *m = w->mem[ci];
    w->mem[ci] = NULL;
    w->held--;
    return m;
}

/* ---- windows -------------------------------------------------------------------------- */

int window_new(struct window_pool *p, uint64_t off, uint64_t end, uint64_t bs, void *owner,
               uint64_t now_ms, struct window **out)
{
    S3C_ASSERT(window_pool_on(p) && end > off && bs && p->chunk <= bs);
    struct window *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->owner = owner;
    w->off = off;
    w->end = end;
    w->bs = bs;
    w->chunk = p->chunk;
    w->cpb = (unsigned)((bs + p->chunk - 1) / p->chunk);
    w->nblocks = (unsigned)((end - off + bs - 1) / bs);
    w->nchunks = w->nblocks * w->cpb;
    w->landed = off;
    w->read_to = off;
    w->read_at = now_ms;
    w->mem = calloc(w->nchunks, sizeof(*w->mem));
    w->cst = calloc(w->nchunks, 1);
    w->bst = calloc(w->nblocks, 1);
    if (!w->mem || !w->cst || !w->bst) {
        free(w->mem);
        free(w->cst);
        free(w->bst);
        free(w);
        return -ENOMEM;
    }
    p->receiving++;
    w->prev = p->tail;
    if (p->tail)
        p->tail->next = w;
    else
        p->head = w;
    p->tail = w;
    *out = w;
    return 0;
}

void window_free(struct window_pool *p, struct window *w)
{
    if (!w)
        return;
    for (unsigned ci = 0; ci < w->nchunks; ci++) {
        S3C_ASSERT(!(w->cst[ci] & WIN_C_FLIGHT));
        if (w->mem[ci])
            pool_put(p, release(w, ci));
    }
    if (!w->received)
        p->receiving--;
    if (w->prev)
        w->prev->next = w->next;
    else
        p->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        p->tail = w->prev;
    free(w->mem);
    free(w->cst);
    free(w->bst);
    free(w);
}

/* Drops block @bi of @w for good (it is never written) and releases what its readers are done
 * with (@force: all of it but a chunk being filled); the rest goes once they copied it. */
static void drop_block(struct window_pool *p, struct window *w, unsigned bi, int force)
{
    if (w->bst[bi] & WIN_B_GONE)
        return;
    w->bst[bi] |= WIN_B_DROPPED;
    p->drops++;
    if (force) {
        w->bst[bi] |= WIN_B_FORCED;
        p->forced++;
    }
    for (unsigned ci = bi * w->cpb; ci < (bi + 1) * w->cpb; ci++)
        if (releasable_as(w, ci, force ? WIN_R_FORCE : WIN_R_CONSUMED))
            pool_put(p, release(w, ci));
    if (p->on_drop)
        p->on_drop(w->owner, bi);
}

/* The newest block of @w that the writer has not started and that holds a slot it would give
 * back: its index, or -1. */
static int newest_unstarted(const struct window *w)
{
    for (unsigned bi = w->nblocks; bi-- > 0;) {
        if (w->bst[bi] & (WIN_B_STARTED | WIN_B_GONE))
            continue;
        for (unsigned ci = bi * w->cpb; ci < (bi + 1) * w->cpb; ci++)
            if (w->mem[ci] && !is_filling(w, ci))
                return (int)bi;
    }
    return -1;
}

/* The newest chunk of @w in a block given up (dropped or cut) that still holds a slot for
 * bytes a reader has not copied (a run that dropped its own block lands the rest of it for a
 * reader that stopped reading): its index, or -1. */
static int gone_held(const struct window *w)
{
    for (unsigned ci = w->nchunks; ci-- > 0;)
        if ((w->bst[ci / w->cpb] & WIN_B_GONE) && releasable_as(w, ci, WIN_R_FORCE))
            return (int)ci;
    return -1;
}

/* Lets go of chunk @ci of @w (gone_held()): its reader fetches the bytes again. */
static void let_go(struct window_pool *p, struct window *w, unsigned ci)
{
    unsigned bi = ci / w->cpb;
    if (!(w->bst[bi] & WIN_B_FORCED)) {
        w->bst[bi] |= WIN_B_FORCED;
        p->forced++;
    }
    pool_put(p, release(w, ci));
}

/* Whether @w holds bytes its readers have not copied (its readers are behind its run). */
static int behind(const struct window *w)
{
    for (unsigned ci = 0; ci < w->nchunks; ci++)
        if (w->mem[ci] && !is_filling(w, ci) && !consumed(w, ci))
            return 1;
    return 0;
}

/* Whether @w's readers stopped: readers that copy (not a read-ahead, not a walk) copied nothing
 * for the pool's stall time while it holds bytes they have not copied. */
static int stale(const struct window_pool *p, const struct window *w)
{
    return w->copying && p->now_ms - w->read_at >= p->stall_ms && behind(w);
}

/* The newest block of @w that the writer started and has not written whole, holding a slot it
 * would give back (not in flight, not being filled): its index, or -1. */
static int newest_unwritten(const struct window *w)
{
    for (unsigned bi = w->nblocks; bi-- > 0;) {
        if (!(w->bst[bi] & WIN_B_STARTED) || (w->bst[bi] & WIN_B_GONE))
            continue;
        for (unsigned ci = bi * w->cpb; ci < (bi + 1) * w->cpb; ci++)
            if (w->mem[ci] && !(w->cst[ci] & WIN_C_FLIGHT) && !is_filling(w, ci))
                return (int)bi;
    }
    return -1;
}

/* For @w, whose readers are not behind: the stale window (not @w) holding the most slots gives
 * some back, its newest block not started, else a chunk of a block given up, else its newest
 * block not written whole (never written now: no byte of it is marked present). Counted as
 * forced; its readers fetch those bytes again. 1 when something was given back. */
static int give_up_stale(struct window_pool *p, const struct window *w)
{
    struct window *v = NULL;
    for (struct window *o = p->head; o; o = o->next)
        if (o != w && (!v || o->held > v->held) && o->held && stale(p, o) &&
            (newest_unstarted(o) >= 0 || gone_held(o) >= 0 || newest_unwritten(o) >= 0))
            v = o;
    if (!v)
        return 0;
    int bi;
    if ((bi = newest_unstarted(v)) >= 0)
        drop_block(p, v, (unsigned)bi, 1);
    else if ((bi = gone_held(v)) >= 0)
        let_go(p, v, (unsigned)bi);
    else if ((bi = newest_unwritten(v)) >= 0)
        drop_block(p, v, (unsigned)bi, 1);
    else
        return 0;
    return 1;
}

/* The oldest block of @w that the writer has not started and that holds a slot its readers
 * are done with: its index, or -1. Dropping it loses no byte a reader still needs. */
static int consumed_unstarted(const struct window *w)
{
    for (unsigned bi = 0; bi < w->nblocks; bi++) {
        if (w->bst[bi] & (WIN_B_STARTED | WIN_B_GONE))
            continue;
        unsigned ci = bi * w->cpb;
        if (!consumed(w, ci))
            return -1; /* the blocks after it are not consumed either */
        for (; ci < (bi + 1) * w->cpb; ci++)
            if (w->mem[ci] && !is_filling(w, ci) && consumed(w, ci))
                return (int)bi;
    }
    return -1;
}

/* Of the windows but @w, the one holding the most slots that has a block consumed_unstarted()
 * (its index in *@bi): dropping there costs the run with the most memory. NULL when none. */
static struct window *most_consumed_unstarted(const struct window_pool *p, const struct window *w,
                                              int *bi)
{
    struct window *v = NULL;
    for (struct window *o = p->head; o; o = o->next) {
        int b;
        if (o != w && (!v || o->held > v->held) && (b = consumed_unstarted(o)) >= 0) {
            v = o;
            *bi = b;
        }
    }
    return v;
}

/* A slot released from a chunk of @w that no longer needs it (WIN_R_CONSUMED or
 * WIN_R_WRITTEN), lowest first; NULL when none. */
static unsigned char *reclaim(struct window *w, int mode)
{
    for (unsigned ci = 0; ci < w->nchunks; ci++)
        if (releasable_as(w, ci, mode))
            return release(w, ci);
    return NULL;
}

/* Whether @w may hold one slot more: within its share, or its cap while its readers have not
 * fallen a share behind, and a window no reader reads yet
 * (read-ahead) only while such windows hold less than half the pool, so that the runs readers
 * wait for always find room as their readers copy. */
static int may_grow(const struct window_pool *p, const struct window *w)
{
    if (w->held >= window_pool_cap(p))
        return 0;
    /* above its share only for bytes its readers copied (the writer's lag, not a slow
     * reader's): a reader that falls behind holds no more than a share of the pool */
    if (w->held >= p->per_window && w->landed - w->read_to >= (uint64_t)p->per_window * w->chunk)
        return 0;
    if (w->readers || w->ever_read)
        return 1;
    unsigned idle = 0;
    for (const struct window *o = p->head; o; o = o->next)
        if (!o->readers && !o->ever_read)
            idle += o->held;
    return idle < p->max_slots / 2;
}

/* After @w dropped a block of its own: the slot it gave back goes to its chunk @ci (a swap,
 * whatever its share). */
static void take_dropped(struct window_pool *p, struct window *w, unsigned ci)
{
    if (!p->nfree)
        return;
    w->mem[ci] = p->free[--p->nfree];
    w->held++;
}

int window_room(struct window_pool *p, struct window *w, uint64_t now_ms, int stalled,
                unsigned char **mem, size_t *room)
{
    S3C_ASSERT(w->landed < w->end && !w->received);
    p->now_ms = now_ms;
    unsigned ci = chunk_of(w, w->landed);
    uint64_t cs, ce;
    chunk_range(w, ci, &cs, &ce);
    for (int round = 0; !w->mem[ci]; round++) {
        /* every drop gives back a slot or makes one of ours releasable */
        S3C_ASSERT(round < 8);
        /* In order: what readers are done with (this window's, a free slot, another's), new
         * memory within the cap, then what is in the file (a reader behind reads it there):
         * the pool grows only while every slot holds bytes someone may still want. */
        unsigned char *s = reclaim(w, WIN_R_CONSUMED);
        if (!s)
            s = pool_take(p, w, 0);
        for (struct window *o = p->head; !s && o && may_grow(p, w); o = o->next)
            if (o != w)
                s = reclaim(o, WIN_R_CONSUMED);
        if (!s)
            s = pool_take(p, w, 1);
        if (!s)
            s = reclaim(w, WIN_R_WRITTEN);
        for (struct window *o = p->head; !s && o && may_grow(p, w); o = o->next)
            if (o != w)
                s = reclaim(o, WIN_R_WRITTEN);
        if (s) {
            w->mem[ci] = s;
            w->held++;
            break;
        }
        /* The disk is behind: a block the writer has not started, whose bytes every reader
         * copied, is not written: of a window holding more than the cap (it grew while fewer
         * runs landed bytes), else its own, else another window's. */
        int obi = -1, bi;
        struct window *o = may_grow(p, w) ? most_consumed_unstarted(p, w, &obi) : NULL;
        if (o && o->held > window_pool_cap(p)) {
            drop_block(p, o, (unsigned)obi, 0);
            continue;
        }
        if ((bi = consumed_unstarted(w)) >= 0) {
            drop_block(p, w, (unsigned)bi, 0);
            take_dropped(p, w, ci);
            continue;
        }
        if (o) {
            drop_block(p, o, (unsigned)obi, 0);
            continue;
        }
        /* Nothing its readers are done with. A run whose readers copied all it landed takes
         * from a window whose readers stopped (stale): one client that stops reading holds
         * another's cold read no longer than the stall. */
        if (!behind(w) && may_grow(p, w) && give_up_stale(p, w))
            continue;
        /* Otherwise the run waits for its readers (or the writer). Only a run stalled for long
         * lets go of bytes its own reader has not copied (its newest block not started, else
         * a chunk of a block given up): that reader fetches them again, and the backend keeps
         * sending (its low-speed timeout). */
        if (!stalled)
            return -EAGAIN;
        if ((bi = newest_unstarted(w)) >= 0) {
            drop_block(p, w, (unsigned)bi, 1);
            take_dropped(p, w, ci);
            continue;
        }
        if ((bi = gone_held(w)) >= 0) {
            let_go(p, w, (unsigned)bi);
            take_dropped(p, w, ci);
            continue;
        }
        return -EAGAIN;
    }
    *mem = w->mem[ci] + (w->landed - cs);
    *room = (size_t)(ce - w->landed);
    return 0;
}

void window_landed(struct window *w, size_t n)
{
    S3C_ASSERT(w->landed + n <= w->end);
    w->landed += n;
}

uint64_t window_landed_to(const struct window *w)
{
    return w->landed;
}

void window_received(struct window_pool *p, struct window *w, int all)
{
    if (w->received)
        return;
    if (!all && w->landed < w->end) {
        /* the block the run stopped in can never be whole */
        unsigned bi = (unsigned)((w->landed - w->off) / w->bs);
        w->bst[bi] |= WIN_B_CUT;
        for (unsigned b = bi + 1; b < w->nblocks; b++)
            w->bst[b] |= WIN_B_CUT;
    }
    w->received = 1;
    p->receiving--;
    for (unsigned ci = 0; ci < w->nchunks; ci++) /* what the cut made useless, once copied */
        if (w->mem[ci] && (w->bst[ci / w->cpb] & WIN_B_CUT) && releasable(w, ci))
            pool_put(p, release(w, ci));
}

void window_drop_rest(struct window_pool *p, struct window *w)
{
    for (unsigned bi = 0; bi < w->nblocks; bi++)
        if (!(w->bst[bi] & WIN_B_STARTED))
            drop_block(p, w, bi, 0);
}

/* The writer's next chunk after skipping blocks gone and chunks past the end. */
static unsigned next_to_write(const struct window *w)
{
    unsigned ci = w->wnext;
    uint64_t cs, ce;
    while (ci < w->nchunks) {
        unsigned bi = ci / w->cpb;
        if ((w->bst[bi] & WIN_B_GONE) || !chunk_range(w, ci, &cs, &ce)) {
            ci = (bi + 1) * w->cpb;
            continue;
        }
        break;
    }
    return ci;
}

int window_next_write(struct window *w, unsigned *ci, const unsigned char **mem, uint64_t *at,
                      size_t *len, int *block_start)
{
    if (w->werr)
        return 0;
    unsigned c = w->wnext = next_to_write(w);
    uint64_t cs, ce;
    if (c >= w->nchunks || (w->cst[c] & WIN_C_FLIGHT))
        return 0;
    chunk_range(w, c, &cs, &ce);
    unsigned bi = c / w->cpb;
    uint64_t bend = S3C_MIN(w->off + (uint64_t)(bi + 1) * w->bs, w->end);
    /* A block is started only once it is all in memory: a started block then never needs a
     * slot more, so the writer always frees what it holds, whatever the other runs hold. */
    if (ce > w->landed || (!(w->bst[bi] & WIN_B_STARTED) && bend > w->landed))
        return 0;
    S3C_ASSERT(w->mem[c]);
    *block_start = !(w->bst[bi] & WIN_B_STARTED);
    w->bst[bi] |= WIN_B_STARTED;
    w->cst[c] |= WIN_C_FLIGHT;
    *ci = c;
    *mem = w->mem[c];
    *at = cs;
    *len = (size_t)(ce - cs);
    return 1;
}

void window_wrote(struct window_pool *p, struct window *w, unsigned ci, int ok)
{
    S3C_ASSERT(w->cst[ci] & WIN_C_FLIGHT);
    w->cst[ci] &= (uint8_t)~WIN_C_FLIGHT;
    if (ok) {
        w->cst[ci] |= WIN_C_WRITTEN;
        w->wnext = ci + 1;
        if (releasable(w, ci)) /* its readers copied it before it was written */
            pool_put(p, release(w, ci));
        return;
    }
    window_abandon(p, w);
}

void window_abandon(struct window_pool *p, struct window *w)
{
    w->werr = 1;
    for (unsigned bi = 0; bi < w->nblocks; bi++)
        if (!window_block_whole(w, bi))
            drop_block(p, w, bi, 0);
}

int window_settled(const struct window *w)
{
    if (!w->received)
        return 0;
    for (unsigned ci = 0; ci < w->nchunks; ci++)
        if (w->cst[ci] & WIN_C_FLIGHT)
            return 0;
    if (w->werr)
        return 1;
    unsigned c = next_to_write(w);
    return c >= w->nchunks;
}

int window_at(const struct window *w, uint64_t pos, const unsigned char **mem, size_t *avail)
{
    if (pos < w->off || pos >= w->landed)
        return 0;
    unsigned ci = chunk_of(w, pos);
    uint64_t cs, ce;
    if (!w->mem[ci] || !chunk_range(w, ci, &cs, &ce))
        return 0;
    *mem = w->mem[ci] + (pos - cs);
    *avail = (size_t)(S3C_MIN(ce, w->landed) - pos);
    return 1;
}

int window_read(struct window_pool *p, struct window *w, uint64_t to, uint64_t now_ms)
{
    p->now_ms = now_ms;
    if (to > w->end)
        to = w->end;
    if (to <= w->read_to)
        return 0;
    int more = to == w->end || chunk_of(w, to) != chunk_of(w, w->read_to);
    w->read_to = to;
    w->read_at = now_ms;
    /* what its readers are done with goes back now (an ended run takes nothing more; a
     * running one frees room for every run) */
    unsigned char *s;
    while ((s = reclaim(w, WIN_R_CONSUMED)))
        pool_put(p, s);
    return more;
}

int window_left(struct window_pool *p, struct window *w, uint64_t now_ms)
{
    w->ever_read = 1;
    return window_read(p, w, w->end, now_ms);
}

void window_readers(struct window *w, unsigned n, unsigned copying)
{
    w->readers = n;
    w->copying = copying;
    if (n)
        w->ever_read = 1;
}

void window_wanted(struct window *w)
{
    w->ever_read = 1;
}

uint64_t window_read_to(const struct window *w)
{
    return w->read_to;
}

int window_still(const struct window *w, uint64_t pos, const unsigned char *mem)
{
    unsigned ci = chunk_of(w, pos);
    uint64_t cs, ce;
    chunk_range(w, ci, &cs, &ce);
    return w->mem[ci] && w->mem[ci] + (pos - cs) == mem;
}

int window_in_file(const struct window *w, uint64_t pos, uint64_t *avail)
{
    if (pos < w->off || pos >= w->landed)
        return 0;
    unsigned ci = chunk_of(w, pos);
    uint64_t cs, ce;
    if (!(w->cst[ci] & WIN_C_WRITTEN) || !chunk_range(w, ci, &cs, &ce))
        return 0;
    *avail = ce - pos;
    return 1;
}

int window_can_serve(const struct window *w, uint64_t pos)
{
    const unsigned char *m;
    size_t a;
    uint64_t fa;
    if (pos < w->off || pos >= w->end)
        return 0;
    if (pos >= w->landed)
        return !w->received;
    return window_at(w, pos, &m, &a) || window_in_file(w, pos, &fa);
}

int window_block_whole(const struct window *w, unsigned bi)
{
    if (w->bst[bi] & WIN_B_GONE)
        return 0;
    uint64_t cs, ce;
    for (unsigned ci = bi * w->cpb; ci < (bi + 1) * w->cpb; ci++)
        if (chunk_range(w, ci, &cs, &ce) && !(w->cst[ci] & WIN_C_WRITTEN))
            return 0;
    return 1;
}

int window_block_dropped(const struct window *w, unsigned bi)
{
    return !!(w->bst[bi] & WIN_B_DROPPED);
}

int window_block_started(const struct window *w, unsigned bi)
{
    return !!(w->bst[bi] & WIN_B_STARTED);
}

uint64_t window_dropped_bytes(const struct window *w)
{
    uint64_t n = 0;
    for (unsigned bi = 0; bi < w->nblocks; bi++) {
        if (!(w->bst[bi] & WIN_B_DROPPED))
            continue;
        uint64_t bs = w->off + bi * w->bs, be = S3C_MIN(bs + w->bs, w->end);
        if (w->landed > bs)
            n += S3C_MIN(be, w->landed) - bs;
    }
    return n;
}

unsigned window_dropped_blocks(const struct window *w)
{
    unsigned n = 0;
    for (unsigned bi = 0; bi < w->nblocks; bi++)
        n += !!(w->bst[bi] & WIN_B_DROPPED);
    return n;
}

unsigned window_held(const struct window *w)
{
    return w->held;
}
