/*
 * window.h: the memory between a cold fill and the cache disk. A fill run's window holds the
 * run's bytes in chunks (slots of one bounded pool): readers copy from it as the bytes arrive
 * and the cache writer writes the chunks into the data file behind them, so a miss is
 * delivered at the backend's pace whatever the disk does. Bytes a reader attached to the run
 * has not copied are never let go unless they are in the file (one backend fetch for all the
 * run's readers). When the disk falls behind, the window drops a block the writer has not
 * started and whose bytes its readers copied: it is never written, so never marked present.
 * With no such room the run waits (its backend held back) for a reader or the writer. No lock
 * here: the caller's (the cache's mutex) guards the pool and every window.
 *   chunk: empty -> held (being filled, then full) -> [in flight -> written] -> released
 *   block: -> started (all in memory; the writer began it: written whole unless a write
 *             fails) | dropped (never a byte written)
 * Bytes a reader has not copied go only when it stopped reading: its own run stalled for long
 * lets them go, and so may a run whose readers keep up once that window is stale.
 */
#ifndef S3C_WINDOW_H
#define S3C_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#define WINDOW_CHUNK (1u << 20) /* bytes per slot: one write of the cache writer */

struct window;

/* Called when a window drops block @bi (0 = its first) for good; @owner is the window's. */
typedef void window_drop_f(void *owner, unsigned bi);

struct window_pool {
    size_t chunk;               /* bytes per slot */
    unsigned max_slots;         /* every window together */
    unsigned per_window;        /* one window's share (--fill-window) */
    unsigned receiving;         /* windows whose run still lands bytes */
    unsigned nslots, nfree;     /* allocated (never freed before window_pool_fini), free */
    unsigned char **free;       /* stack of free slots */
    struct window *head, *tail; /* live windows, oldest first */
    window_drop_f *on_drop;
    uint64_t stall_ms; /* a window whose readers copied nothing this long is stale */
    uint64_t now_ms;   /* the clock of the last window_room() / window_read() */
    uint64_t drops;    /* blocks dropped, all windows (counter) */
    uint64_t forced;   /* of which with bytes a reader had not copied (counter) */
};

/* Sets @p up for @total_bytes of slots in all, @per_window_bytes per window, fills of
 * @block_size blocks, slots of @chunk_bytes (0: WINDOW_CHUNK; at most a block); a window whose
 * readers copy nothing for @stall_ms while it holds bytes they have not copied is stale. A window must hold a block and two chunks more (the writer's block and
 * room to stream past it), so per_window is raised to that; the pool is off (0 slots) when
 * @total_bytes cannot hold one such window. 0 or -ENOMEM. */
int window_pool_init(struct window_pool *p, uint64_t total_bytes, uint64_t per_window_bytes,
                     uint64_t block_size, size_t chunk_bytes, uint64_t stall_ms,
                     window_drop_f *on_drop);
/* Frees the pool's slots; every window must have been freed. */
void window_pool_fini(struct window_pool *p);
static inline int window_pool_on(const struct window_pool *p)
{
    return p->max_slots > 0;
}
/* The slots one window may hold now: its share (per_window) or, while fewer runs land bytes
 * than the pool has shares for, an equal part of the pool, so that a run absorbs the writer's
 * pauses with memory no other run needs. Above its share a window grows only while its readers
 * are less than a share behind: the extra memory holds bytes they copied, for the writer. */
unsigned window_pool_cap(const struct window_pool *p);
/* Bytes of slots allocated (the pool's memory), and held by windows now. */
uint64_t window_pool_bytes(const struct window_pool *p);
uint64_t window_pool_held(const struct window_pool *p);
uint64_t window_pool_limit(const struct window_pool *p); /* bytes of slots at most */

/* A window for object bytes [@off, @end) of blocks of @bs bytes (@off at a block's start),
 * begun at @now_ms. 0 or -ENOMEM. */
int window_new(struct window_pool *p, uint64_t off, uint64_t end, uint64_t bs, void *owner,
               uint64_t now_ms, struct window **out);
/* Returns its slots to the pool. No chunk may be in flight. Accepts NULL. */
void window_free(struct window_pool *p, struct window *w);

/* The run's side, at @now_ms (a monotonic clock in ms). The room to copy the next bytes into
 * (at window_landed_to()): 0 with @mem and @room (> 0), or -EAGAIN: no slot can be had now
 * (call again once the writer wrote a chunk or a reader copied: the run waits, its backend
 * held back). To get one it releases a chunk every attached reader copied (window_read) and
 * that is written or of a block dropped, takes a free slot or a new one within the pool's cap,
 * releases a written chunk (a reader behind reads it from the file), or drops a block the
 * writer has not started whose bytes its readers copied (its own, else another window's).
 * Bytes a reader has not copied are never let go while they are nowhere else, but:
 *  - a run whose readers copied all it landed takes from a stale window (its readers copied
 *    nothing for the stall time): its newest block not started, a chunk of a block given up,
 *    else its newest block not written whole;
 *  - a run @stalled (no room for long: its own reader stopped reading) lets go of its own newest
 *    block not started, else a chunk of its own block given up;
 * those are counted in pool.forced, and their readers fetch the bytes again. A window no reader
 * reads yet (read-ahead) holds at most its cap (window_pool_cap) and, with the others like it,
 * half the pool.
 * The bytes copied into @mem outside the lock belong to no reader until window_landed(). */
int window_room(struct window_pool *p, struct window *w, uint64_t now_ms, int stalled,
                unsigned char **mem, size_t *room);
/* @n bytes were copied into the room: readers may read them. */
void window_landed(struct window *w, size_t n);
uint64_t window_landed_to(const struct window *w);
/* The run got every byte it will get (@all: all of [off, end)). The blocks not whole stay
 * unwritten; nothing more is asked of the run. */
void window_received(struct window_pool *p, struct window *w, int all);
/* Drops every block the writer has not started (the server is closing, the data file cannot
 * be opened). */
void window_drop_rest(struct window_pool *p, struct window *w);

/* The writer's side. The next chunk to write: 1 with its index @ci, its slot @mem, its object
 * offset @at and length @len (marked in flight; @block_start set when it begins a block), or 0
 * when none is ready. */
int window_next_write(struct window *w, unsigned *ci, const unsigned char **mem, uint64_t *at,
                      size_t *len, int *block_start);
/* The write of chunk @ci ended: @ok (a chunk its readers copied already goes back to the pool
 * now), or failed (then nothing more is written: every block not whole is dropped, the started
 * one too). */
void window_wrote(struct window_pool *p, struct window *w, unsigned ci, int ok);
/* Nothing more is written (the server stops, the writer cannot run): every block not written
 * whole is dropped. */
void window_abandon(struct window_pool *p, struct window *w);
/* Nothing is or will be in flight: the run received all it will and the writer has nothing
 * left to write. */
int window_settled(const struct window *w);

/* The readers' side. 1 when the byte at @pos is in memory: *@mem points at it and *@avail bytes
 * follow it in the same slot (up to what landed). The slot may be released once the lock is
 * dropped: after copying, window_still() says whether the copy is good. */
int window_at(const struct window *w, uint64_t pos, const unsigned char **mem, size_t *avail);
int window_still(const struct window *w, uint64_t pos, const unsigned char *mem);
/* Every reader attached to the window copied its bytes up to @to (the slowest one's position;
 * it only moves forward): the chunks behind it that are written or of a block dropped go back
 * to the pool at once, and the others may be dropped from the cache write. 1 when a chunk was
 * passed (a run waiting for room may find some). */
int window_read(struct window_pool *p, struct window *w, uint64_t to, uint64_t now_ms);
uint64_t window_read_to(const struct window *w);
/* No reader will read @w (its readers left, or none came to a read-ahead): all of it counts as
 * read, so it is let go as the writer writes it or dropped when the disk is behind, and it no
 * longer counts as a read-ahead nobody reads yet. 1 when a chunk was passed. */
int window_left(struct window_pool *p, struct window *w, uint64_t now_ms);
/* @n readers are attached to the window (0 and none ever: a read-ahead nobody reads yet), of
 * which @copying copy its bytes (the others walk them: a member index build). Only a window
 * with readers that copy can be stale: a read-ahead or a walk is not a client that stopped. */
void window_readers(struct window *w, unsigned n, unsigned copying);
/* A reader waits for @w's bytes before it could attach (the run had no window yet): @w is not
 * a read-ahead nobody reads, and grows as a read window does. */
void window_wanted(struct window *w);
/* 1 when the byte at @pos is in the data file (its chunk was written, its block kept): *@avail
 * bytes from @pos are. */
int window_in_file(const struct window *w, uint64_t pos, uint64_t *avail);
/* Whether the byte at @pos will be readable from this window later (its run may still receive
 * it), or is now (window_at, window_in_file). 0: another fetch must bring it. */
int window_can_serve(const struct window *w, uint64_t pos);

/* After window_settled(): block @bi (0 = the first) was written whole and kept, or dropped;
 * started: the writer began it (so its extent may hold bytes, if it was dropped after). */
int window_block_whole(const struct window *w, unsigned bi);
int window_block_dropped(const struct window *w, unsigned bi);
int window_block_started(const struct window *w, unsigned bi);
/* Bytes the run received of the blocks it dropped (delivered, not cached). */
uint64_t window_dropped_bytes(const struct window *w);
unsigned window_dropped_blocks(const struct window *w);
/* Chunks holding a slot now. */
unsigned window_held(const struct window *w);

#endif
