/* test_window.c: a fill's window (cache/window.c): chunks from a bounded pool, the writer
 * behind the readers, blocks dropped from the cache write when the disk is behind once their
 * readers copied them, runs that wait (rather than drop) when no room is left. The last tests
 * drive runs, a writer and readers in random interleavings against a model of the data file
 * and check what the cache relies on: a block is whole only if every byte of it was written
 * once, from the right bytes; a dropped block never gets a byte written; readers always copy
 * the right bytes; a reader never has to fetch again unless a run was stalled for long; the
 * memory stays within its caps. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache/window.h"

#define MiB (1u << 20)
#define S3C_MIN_(a, b) ((a) < (b) ? (a) : (b))
#define CH 4096u     /* the tests' chunk: small, so that they run fast */
#define BS (4u * CH) /* 4 chunks a block */

static unsigned char pat(uint64_t pos)
{
    uint64_t x = pos * 0x9E3779B97F4A7C15ull;
    return (unsigned char)(x >> 29);
}

static void fill_pat(unsigned char *p, uint64_t pos, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = pat(pos + i);
}

static int is_pat(const unsigned char *p, uint64_t pos, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != pat(pos + i))
            return 0;
    return 1;
}

#define STALL_MS 10000
static uint64_t now_ms = 1000000; /* the clock the tests give the pool, ms */

/* on_drop: counts per (owner, block) */
static unsigned drops[8][64];

static void on_drop(void *owner, unsigned bi)
{
    drops[(uintptr_t)owner][bi]++;
}

/* The run's side: lands @n bytes of the pattern (at most what one room takes). 0 or -EAGAIN. */
static int land(struct window_pool *p, struct window *w, int starved, size_t n)
{
    unsigned char *mem;
    size_t room;
    int rc = window_room(p, w, now_ms, starved, &mem, &room);
    if (rc)
        return rc;
    if (n > room)
        n = room;
    fill_pat(mem, window_landed_to(w), n);
    window_landed(w, n);
    return 0;
}

/* The end of a test: every window abandoned (nothing more written) and freed, then the pool. */
static void end_all(struct window_pool *p, struct window **ws, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        window_abandon(p, ws[i]);
    for (unsigned i = 0; i < n; i++)
        window_free(p, ws[i]);
    window_pool_fini(p);
}

static void test_window_pool_sizes(void **state)
{
    (void)state;
    struct window_pool p;
    /* a window holds at least a block and two chunks */
    assert_int_equal(window_pool_init(&p, 64 * MiB, 1 * MiB, 4 * MiB, 0, STALL_MS, NULL), 0);
    assert_true(window_pool_on(&p));
    assert_int_equal(p.chunk, MiB);
    assert_int_equal(p.per_window, 6);
    assert_int_equal(p.max_slots, 64);
    window_pool_fini(&p);
    /* not one window's worth in all: off */
    assert_int_equal(window_pool_init(&p, 5 * MiB, 16 * MiB, 4 * MiB, 0, STALL_MS, NULL), 0);
    assert_false(window_pool_on(&p));
    window_pool_fini(&p);
    assert_int_equal(window_pool_init(&p, 0, 16 * MiB, 4 * MiB, 0, STALL_MS, NULL), 0);
    assert_false(window_pool_on(&p));
    window_pool_fini(&p);
    /* blocks under a chunk: a chunk is a block */
    assert_int_equal(window_pool_init(&p, 8 * MiB, 1 * MiB, 256 * 1024, 0, STALL_MS, NULL), 0);
    assert_int_equal(p.chunk, 256 * 1024);
    assert_int_equal(p.per_window, 4);
    window_pool_fini(&p);
}

/* A run alone may hold the whole pool with bytes its reader copied (its share is per_window;
 * memory no other run needs absorbs the writer's pauses), but never more than a share its
 * reader has not copied. A second run landing bytes halves the cap and takes its share from
 * the run holding the most, by dropping that run's copied blocks the writer has not started;
 * once the first run received all it will, the second may grow past half the pool. */
static void test_window_cap_shares(void **state)
{
    (void)state;
    struct window_pool p;
    struct window *a, *b;
    memset(drops, 0, sizeof(drops));
    assert_int_equal(window_pool_init(&p, 24 * CH, 6 * CH, BS, CH, STALL_MS, on_drop), 0);
    assert_int_equal(window_pool_cap(&p), 24);
    assert_int_equal(window_new(&p, 0, 16 * BS, BS, (void *)1, now_ms, &a), 0);
    window_readers(a, 1, 1);
    while (land(&p, a, 0, CH) == 0)
        ;
    assert_int_equal(window_held(a), 6); /* its reader copied nothing: a share */
    for (int i = 0; i < 18; i++) {
        window_read(&p, a, window_landed_to(a), now_ms);
        assert_int_equal(land(&p, a, 0, CH), 0);
    }
    assert_int_equal(window_held(a), 24); /* alone, its reader keeping up: the whole pool */
    assert_int_equal(drops[1][0], 0);
    window_read(&p, a, window_landed_to(a), now_ms);
    assert_int_equal(window_new(&p, 0, 16 * BS, BS, (void *)2, now_ms, &b), 0);
    window_readers(b, 1, 1);
    assert_int_equal(window_pool_cap(&p), 12);
    while (land(&p, b, 0, CH) == 0)
        ;
    assert_int_equal(window_held(b), 6); /* its share at once; its reader copied nothing */
    assert_int_equal(drops[1][0], 1);    /* a's oldest copied blocks, never written */
    assert_int_equal(drops[1][1], 1);
    assert_int_equal(drops[1][2], 0);
    assert_int_equal(window_held(a), 16);
    /* b's reader keeps up: b grows to the cap (12), a giving down to it, no further */
    unsigned most = 0;
    for (int i = 0; i < 40; i++) {
        window_read(&p, b, window_landed_to(b), now_ms);
        assert_int_equal(land(&p, b, 0, CH), 0);
        assert_true(window_held(b) <= 12);
        most = window_held(b) > most ? window_held(b) : most;
    }
    assert_int_equal(most, 12);
    assert_int_equal(window_held(a), 12);
    assert_int_equal(p.forced, 0);
    /* a received all it will and the writer wrote its blocks: b may grow past half the pool */
    window_received(&p, a, 0);
    assert_int_equal(window_pool_cap(&p), 24);
    unsigned ci;
    const unsigned char *mem;
    uint64_t at;
    size_t len;
    int bstart;
    while (window_next_write(a, &ci, &mem, &at, &len, &bstart))
        window_wrote(&p, a, ci, 1);
    for (int i = 0; i < 8; i++) {
        window_read(&p, b, window_landed_to(b), now_ms);
        assert_int_equal(land(&p, b, 0, CH), 0);
    }
    assert_true(window_held(b) > 12);
    assert_true(window_held(a) + window_held(b) <= 24);
    assert_int_equal(p.forced, 0);
    window_abandon(&p, a);
    window_free(&p, a);
    window_received(&p, b, 0);
    window_abandon(&p, b);
    window_free(&p, b);
    assert_int_equal(p.nfree, p.nslots);
    window_pool_fini(&p);
}

/* With no room left, a run whose readers are done with nothing of its own drops a copied block
 * the writer has not started of the window holding the most slots, not of the oldest window:
 * the run with the most memory pays (before, the first window in the list did). */
static void test_window_steal_from_most(void **state)
{
    (void)state;
    struct window_pool p;
    struct window *x, *y, *z;
    memset(drops, 0, sizeof(drops));
    assert_int_equal(window_pool_init(&p, 12 * CH, 6 * CH, BS, CH, STALL_MS, on_drop), 0);
    assert_int_equal(window_new(&p, 0, 16 * BS, BS, (void *)1, now_ms, &x), 0);
    window_readers(x, 1, 1);
    for (int i = 0; i < 5; i++)
        assert_int_equal(land(&p, x, 0, CH), 0);
    window_read(&p, x, 5 * CH, now_ms);
    assert_int_equal(window_new(&p, 0, 16 * BS, BS, (void *)2, now_ms, &y), 0);
    window_readers(y, 1, 1);
    while (land(&p, y, 0, CH) == 0)
        ;
    assert_int_equal(window_held(y), 6);
    window_read(&p, y, 6 * CH, now_ms);
    assert_int_equal(window_held(x), 5); /* x, the oldest, holds less than y */
    assert_int_equal(window_new(&p, 0, 16 * BS, BS, (void *)3, now_ms, &z), 0);
    window_readers(z, 1, 1);
    assert_int_equal(land(&p, z, 0, CH), 0); /* the last free slot */
    assert_int_equal(land(&p, z, 0, CH), 0); /* one of y's copied blocks goes */
    assert_int_equal(drops[2][0], 1);
    assert_int_equal(drops[1][0], 0);
    assert_int_equal(p.forced, 0);
    struct window *all[] = {x, y, z};
    for (int i = 0; i < 3; i++) {
        window_received(&p, all[i], 0);
        window_abandon(&p, all[i]);
        window_free(&p, all[i]);
    }
    window_pool_fini(&p);
}

/* Bytes land, readers copy them, the writer takes whole chunks only, in order. */
static void test_window_sequence(void **state)
{
    (void)state;
    struct window_pool p;
    struct window *w;
    assert_int_equal(window_pool_init(&p, 64 * CH, 16 * CH, BS, CH, STALL_MS, on_drop), 0);
    uint64_t off = 8 * BS, end = off + BS + 3 * CH + 123; /* 2 blocks, the last partial */
    assert_int_equal(window_new(&p, off, end, BS, (void *)1, now_ms, &w), 0);
    unsigned ci;
    const unsigned char *mem;
    uint64_t at;
    size_t len, avail;
    int bstart;
    assert_int_equal(window_next_write(w, &ci, &mem, &at, &len, &bstart), 0);
    assert_int_equal(land(&p, w, 0, 1000), 0);
    assert_true(window_at(w, off + 10, &mem, &avail));
    assert_int_equal(avail, 990);
    assert_true(is_pat(mem, off + 10, avail));
    assert_false(window_at(w, off + 1000, &mem, &avail));
    assert_true(window_can_serve(w, off + 5000));                             /* still to come */
    assert_int_equal(window_next_write(w, &ci, &mem, &at, &len, &bstart), 0); /* not whole */
    while (window_landed_to(w) < off + CH)
        assert_int_equal(land(&p, w, 0, 300000), 0);
    /* a chunk is whole, its block is not: a block starts once it is all in memory */
    assert_int_equal(window_next_write(w, &ci, &mem, &at, &len, &bstart), 0);
    while (window_landed_to(w) < off + BS)
        assert_int_equal(land(&p, w, 0, 300000), 0);
    assert_int_equal(window_next_write(w, &ci, &mem, &at, &len, &bstart), 1);
    assert_int_equal(at, off);
    assert_int_equal(len, CH);
    assert_true(bstart);
    assert_true(is_pat(mem, at, len));
    assert_int_equal(window_next_write(w, &ci, &mem, &at, &len, &bstart), 0); /* one at a time */
    window_wrote(&p, w, ci, 1);
    uint64_t fa;
    assert_true(window_in_file(w, off + 5, &fa));
    assert_int_equal(fa, CH - 5);
    while (window_landed_to(w) < end)
        assert_int_equal(land(&p, w, 0, 700000), 0);
    window_received(&p, w, 1);
    assert_false(window_can_serve(w, end));
    unsigned n = 1;
    uint64_t last_end = off + CH;
    while (window_next_write(w, &ci, &mem, &at, &len, &bstart)) {
        assert_int_equal(at, last_end);
        assert_int_equal(bstart, at == off + BS);
        assert_true(is_pat(mem, at, len));
        last_end = at + len;
        window_wrote(&p, w, ci, 1);
        n++;
    }
    assert_int_equal(last_end, end);
    assert_int_equal(n, 4 + 4); /* the last block: 1 CH, 1 CH, 1 CH, 123 bytes */
    assert_true(window_settled(w));
    assert_true(window_block_whole(w, 0));
    assert_true(window_block_whole(w, 1));
    assert_int_equal(window_dropped_bytes(w), 0);
    window_free(&p, w);
    assert_int_equal(p.nfree, p.nslots);
    window_pool_fini(&p);
}

/* The disk is behind: the run waits while its reader has not copied what the window holds
 * (a fill with no room waits instead of dropping); once the reader copied past a block the
 * writer has not started, that block is dropped from the cache write (never written) and the
 * run goes on. Only a run stalled for long lets go of bytes not copied (counted as forced). */
static void test_window_drop_when_starved(void **state)
{
    (void)state;
    struct window_pool p;
    struct window *w;
    memset(drops, 0, sizeof(drops));
    assert_int_equal(window_pool_init(&p, 6 * CH, 6 * CH, BS, CH, STALL_MS, on_drop), 0);
    uint64_t off = 0, end = 4 * BS;
    assert_int_equal(window_new(&p, off, end, BS, (void *)2, now_ms, &w), 0);
    window_readers(w, 1, 1);
    unsigned ci;
    const unsigned char *mem;
    uint64_t at;
    size_t len, avail;
    int bstart;
    while (land(&p, w, 0, CH) == 0)
        ;
    assert_int_equal(window_held(w), 6); /* block 0 and 2 CH of block 1 */
    /* the writer takes chunk 0 of the whole block 0 and stalls on it */
    assert_int_equal(window_next_write(w, &ci, &mem, &at, &len, &bstart), 1);
    assert_int_equal(window_landed_to(w), 6 * CH);
    /* the reader has copied nothing: the run waits, however often it asks, and drops nothing */
    for (int i = 0; i < 5; i++)
        assert_int_equal(land(&p, w, 0, CH), -EAGAIN);
    assert_int_equal(drops[2][1], 0);
    for (uint64_t x = 0; x < 6 * CH; x += CH / 2) {
        assert_true(window_at(w, x, &mem, &avail));
        assert_true(is_pat(mem, x, avail));
    }
    /* the reader copied half of block 1: it (not started) is dropped, its copied chunk goes */
    assert_int_equal(window_read(&p, w, 5 * CH, now_ms), 1);
    assert_int_equal(land(&p, w, 0, CH), 0);
    assert_int_equal(drops[2][1], 1);
    assert_int_equal(p.forced, 0);
    assert_true(window_block_dropped(w, 1));
    assert_int_equal(window_landed_to(w), 7 * CH);
    /* the chunk the reader has not copied stays readable */
    assert_true(window_at(w, 5 * CH + 7, &mem, &avail));
    assert_true(is_pat(mem, 5 * CH + 7, avail));
    /* the rest of block 1 streams through as the reader copies it */
    assert_int_equal(land(&p, w, 0, CH), -EAGAIN);
    window_read(&p, w, 7 * CH, now_ms);
    assert_int_equal(land(&p, w, 0, CH), 0);
    assert_true(window_at(w, 7 * CH + 1, &mem, &avail));
    assert_true(is_pat(mem, 7 * CH + 1, avail));
    /* the writer finishes block 0, skips block 1 */
    window_wrote(&p, w, ci, 1);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(window_next_write(w, &ci, &mem, &at, &len, &bstart), 1);
        window_wrote(&p, w, ci, 1);
    }
    assert_int_equal(window_next_write(w, &ci, &mem, &at, &len, &bstart), 0);
    while (window_landed_to(w) < end) { /* room again as the reader copies */
        while (window_next_write(w, &ci, &mem, &at, &len, &bstart)) {
            assert_true(at >= 2 * BS); /* never a byte of block 1 */
            window_wrote(&p, w, ci, 1);
        }
        window_read(&p, w, window_landed_to(w), now_ms);
        assert_int_equal(land(&p, w, 0, CH), 0);
    }
    window_received(&p, w, 1);
    while (window_next_write(w, &ci, &mem, &at, &len, &bstart)) {
        assert_true(at >= 2 * BS); /* never a byte of block 1 */
        window_wrote(&p, w, ci, 1);
    }
    assert_true(window_settled(w));
    assert_true(window_block_whole(w, 0));
    assert_false(window_block_whole(w, 1));
    assert_int_equal(window_dropped_blocks(w), 1);
    assert_int_equal(window_dropped_bytes(w), BS);
    /* once copied, the dropped block's bytes are gone (a later reader fetches them) */
    assert_false(window_can_serve(w, BS + 10));
    uint64_t fa;
    assert_true(window_in_file(w, 10, &fa));
    window_free(&p, w);

    /* stalled for long (a reader stopped reading): the newest block of its own not started
     * goes, counted as forced */
    memset(drops, 0, sizeof(drops));
    assert_int_equal(window_new(&p, off, end, BS, (void *)2, now_ms, &w), 0);
    window_readers(w, 1, 1);
    while (land(&p, w, 0, CH) == 0)
        ;
    assert_int_equal(window_next_write(w, &ci, &mem, &at, &len, &bstart), 1);
    assert_int_equal(land(&p, w, 0, CH), -EAGAIN);
    assert_int_equal(land(&p, w, 1, CH), 0);
    assert_int_equal(drops[2][1], 1);
    assert_int_equal(p.forced, 1);
    window_wrote(&p, w, ci, 1);
    window_abandon(&p, w);
    window_free(&p, w);
    window_pool_fini(&p);
}

/* Readers that stopped reading hold the whole pool with blocks the writer has not started (the
 * disk is behind). A new run, whose reader copies all it lands, waits while they may still
 * read, stalled or not; once their windows are stale (nothing copied for the stall time) it
 * takes the newest block not started of the stale window holding the most slots, at once
 * (counted as forced; that block's reader fetches it again): a client that stops reading holds
 * another's cold read no longer than the stall. A run whose own reader stopped lets go of its
 * own bytes only, never another window's. Before (4d6c55b) the new run waited until those
 * clients went; b5c6ed7 made it wait a stall for every chunk. */
static void test_window_stale_gives_to_others(void **state)
{
    (void)state;
    struct window_pool p;
    struct window *a, *b, *c;
    memset(drops, 0, sizeof(drops));
    uint64_t t0 = now_ms;
    assert_int_equal(window_pool_init(&p, 11 * CH, 6 * CH, BS, CH, STALL_MS, on_drop), 0);
    assert_int_equal(window_new(&p, 0, 4 * BS, BS, (void *)1, now_ms, &a), 0);
    assert_int_equal(window_new(&p, 0, 4 * BS, BS, (void *)2, now_ms, &b), 0);
    assert_int_equal(window_new(&p, 0, 4 * BS, BS, (void *)3, now_ms, &c), 0);
    window_readers(a, 1, 1);
    window_readers(b, 1, 1);
    window_readers(c, 1, 1);
    while (land(&p, a, 0, CH) == 0)
        ;
    while (land(&p, b, 0, CH) == 0)
        ;
    assert_int_equal(window_held(a), 6);
    assert_int_equal(window_held(b), 5);
    /* the new run waits, stalled or not, however often it asks, while a and b may read */
    now_ms = t0 + STALL_MS - 1;
    for (int i = 0; i < 3; i++)
        assert_int_equal(land(&p, c, i & 1, CH), -EAGAIN);
    assert_int_equal(p.forced, 0);
    /* b's own run, stalled, lets go of its own newest block not started, not a's */
    assert_int_equal(land(&p, b, 1, CH), 0);
    assert_int_equal(p.forced, 1);
    assert_int_equal(drops[2][1], 1);
    assert_false(window_block_dropped(a, 1));
    /* the stall passed: a (the most slots) is stale, c gets room without having stalled */
    now_ms = t0 + STALL_MS;
    assert_int_equal(land(&p, c, 0, CH), 0);
    assert_int_equal(p.forced, 2);
    assert_int_equal(drops[1][1], 1);
    assert_true(window_block_dropped(a, 1));
    assert_int_equal(window_landed_to(c), CH);
    /* and its next chunks at once too, c's reader copying: no stall per chunk */
    for (int i = 1; i < 6; i++) {
        window_read(&p, c, window_landed_to(c), now_ms);
        assert_int_equal(land(&p, c, 0, CH), 0);
    }
    assert_int_equal(window_landed_to(c), 6 * CH);
    /* a's block 0 and the bytes of c stay readable */
    const unsigned char *mem;
    size_t avail;
    assert_true(window_at(a, 10, &mem, &avail));
    assert_true(is_pat(mem, 10, avail));
    assert_true(window_at(c, 5 * CH + 10, &mem, &avail));
    assert_true(is_pat(mem, 5 * CH + 10, avail));
    end_all(&p, (struct window *[]){a, b, c}, 3);
    now_ms = t0;
}

/* Two runs whose readers stopped reading, stalled again and again: each drops its own block
 * being filled and lands the rest of it, bytes nobody copies in a block that is never
 * written. Once every slot holds such bytes, a new run still gets room once they are stale: a
 * chunk of a block already given up goes (counted as forced once per block). */
static void test_window_stale_frees_given_up(void **state)
{
    (void)state;
    struct window_pool p;
    struct window *a, *b, *c;
    memset(drops, 0, sizeof(drops));
    uint64_t t0 = now_ms;
    assert_int_equal(window_pool_init(&p, 11 * CH, 6 * CH, BS, CH, STALL_MS, on_drop), 0);
    assert_int_equal(window_new(&p, 0, 64 * BS, BS, (void *)1, now_ms, &a), 0);
    assert_int_equal(window_new(&p, 0, 64 * BS, BS, (void *)2, now_ms, &b), 0);
    window_readers(a, 1, 1);
    window_readers(b, 1, 1);
    int ra = 0, rb = 0, rounds = 0;
    for (; rounds < 200 && (ra == 0 || rb == 0); rounds++) {
        ra = land(&p, a, 1, CH);
        rb = land(&p, b, 1, CH);
    }
    assert_true(window_landed_to(a) < 64 * BS && window_landed_to(b) < 64 * BS);
    assert_int_equal(window_held(a) + window_held(b), 11);
    now_ms = t0 + STALL_MS - 1;
    assert_int_equal(window_new(&p, 0, 4 * BS, BS, (void *)3, now_ms, &c), 0);
    window_readers(c, 1, 1);
    /* a and b may still read: c waits; the stall passed: it gets room */
    assert_int_equal(land(&p, c, 1, CH), -EAGAIN);
    now_ms = t0 + STALL_MS;
    assert_int_equal(land(&p, c, 0, CH), 0);
    assert_int_equal(window_landed_to(c), CH);
    assert_int_equal(window_held(a) + window_held(b) + window_held(c), 11); /* the cap holds */
    const unsigned char *mem;
    size_t avail;
    assert_true(window_at(c, 10, &mem, &avail));
    assert_true(is_pat(mem, 10, avail));
    end_all(&p, (struct window *[]){a, b, c}, 3);
    now_ms = t0;
}

/* A stale window whose blocks the writer started, all in memory and waiting for a disk that
 * is behind: a run whose reader keeps up gets room from its newest block not written whole,
 * which is then never written (the writer skips it; no byte of it is marked present), while
 * the chunk being written stays until its write ends. */
static void test_window_stale_started(void **state)
{
    (void)state;
    struct window_pool p;
    struct window *a, *b, *c;
    unsigned ca, cb;
    const unsigned char *mem;
    uint64_t at;
    size_t len;
    int bstart;
    memset(drops, 0, sizeof(drops));
    uint64_t t0 = now_ms;
    assert_int_equal(window_pool_init(&p, 8 * CH, 6 * CH, BS, CH, STALL_MS, on_drop), 0);
    assert_int_equal(window_new(&p, 0, 4 * BS, BS, (void *)1, now_ms, &a), 0);
    assert_int_equal(window_new(&p, 0, 4 * BS, BS, (void *)2, now_ms, &b), 0);
    assert_int_equal(window_new(&p, 0, 4 * BS, BS, (void *)3, now_ms, &c), 0);
    window_readers(a, 1, 1);
    window_readers(b, 1, 1);
    window_readers(c, 1, 1);
    for (int i = 0; i < 4; i++) { /* block 0 of each, whole, its reader copying nothing */
        assert_int_equal(land(&p, a, 0, CH), 0);
        assert_int_equal(land(&p, b, 0, CH), 0);
    }
    /* the writer started both blocks: their chunks 0 in flight (a written chunk would go
     * back to the pool: a reader behind reads it from the file) */
    assert_int_equal(window_next_write(a, &ca, &mem, &at, &len, &bstart), 1);
    assert_true(bstart);
    assert_int_equal(window_next_write(b, &cb, &mem, &at, &len, &bstart), 1);
    assert_int_equal(land(&p, c, 0, CH), -EAGAIN); /* they may still read */
    now_ms = t0 + STALL_MS;
    /* stale: a (the first holding the most) gives its block 0 but the chunk in flight */
    assert_int_equal(land(&p, c, 0, CH), 0);
    assert_int_equal(p.forced, 1);
    assert_true(window_block_dropped(a, 0));
    assert_false(window_block_dropped(b, 0));
    assert_int_equal(window_held(a), 1);
    window_wrote(&p, a, ca, 1);
    assert_int_equal(window_next_write(a, &ca, &mem, &at, &len, &bstart), 0); /* skipped */
    assert_false(window_block_whole(a, 0));
    window_wrote(&p, b, cb, 1);
    end_all(&p, (struct window *[]){a, b, c}, 3);
    now_ms = t0;
}

/* A member index walk (a reader that copies nothing) and a read-ahead nobody reads are not
 * clients that stopped: past the stall, a run that keeps up takes from a window whose copying
 * reader stopped, even one holding less, and from neither of those. */
static void test_window_walk_not_stale(void **state)
{
    (void)state;
    struct window_pool p;
    struct window *walk, *ra, *b, *c;
    memset(drops, 0, sizeof(drops));
    uint64_t t0 = now_ms;
    assert_int_equal(window_pool_init(&p, 14 * CH, 6 * CH, BS, CH, STALL_MS, on_drop), 0);
    assert_int_equal(window_new(&p, 0, 4 * BS, BS, (void *)1, now_ms, &walk), 0);
    assert_int_equal(window_new(&p, 0, 4 * BS, BS, (void *)2, now_ms, &ra), 0);
    assert_int_equal(window_new(&p, 0, 4 * BS, BS, (void *)3, now_ms, &b), 0);
    assert_int_equal(window_new(&p, 0, 4 * BS, BS, (void *)4, now_ms, &c), 0);
    window_readers(walk, 1, 0);
    window_readers(b, 1, 1);
    window_readers(c, 1, 1);
    while (land(&p, walk, 0, CH) == 0)
        ;
    while (land(&p, ra, 0, CH) == 0)
        ;
    for (int i = 0; i < 2; i++)
        assert_int_equal(land(&p, b, 0, CH), 0);
    assert_int_equal(window_held(walk), 6);
    assert_true(window_held(ra) >= 1);
    while (land(&p, b, 0, CH) == 0)
        ;
    now_ms = t0 + 10 * STALL_MS;
    assert_int_equal(land(&p, c, 0, CH), 0);
    assert_int_equal(p.forced, 1);
    assert_int_equal(drops[3][0], 1); /* b's: its reader stopped */
    assert_int_equal(drops[1][0] + drops[1][1] + drops[2][0] + drops[2][1], 0);
    end_all(&p, (struct window *[]){walk, ra, b, c}, 4);
    now_ms = t0;
}

/* The pool is at its cap: a run with no room waits (whether its reader waits or not) rather
 * than take bytes another window's reader has not copied; once that reader copied past a
 * block the writer has not started, that block gives its slots. */
static void test_window_steal(void **state)
{
    (void)state;
    struct window_pool p;
    struct window *a, *b;
    unsigned ci;
    const unsigned char *mem;
    uint64_t at;
    size_t len, avail;
    int bstart;
    memset(drops, 0, sizeof(drops));
    assert_int_equal(window_pool_init(&p, 10 * CH, 6 * CH, BS, CH, STALL_MS, on_drop), 0);
    assert_int_equal(window_new(&p, 0, 3 * BS, BS, (void *)3, now_ms, &a), 0);
    assert_int_equal(window_new(&p, 0, 3 * BS, BS, (void *)4, now_ms, &b), 0);
    window_readers(a, 1, 1);
    window_readers(b, 1, 1);
    while (land(&p, a, 0, CH) == 0)
        ;
    assert_int_equal(window_held(a), 6); /* its block 0 and half its block 1 */
    for (int i = 0; i < 4; i++)
        assert_int_equal(land(&p, b, 0, CH), 0);
    assert_int_equal(land(&p, b, 0, CH), -EAGAIN); /* the pool is at its 10 */
    /* b's block 0 is whole: its writer starts it (a slow disk: it stays in flight) */
    assert_int_equal(window_next_write(b, &ci, &mem, &at, &len, &bstart), 1);
    for (int i = 0; i < 5; i++)
        assert_int_equal(land(&p, b, 0, CH), -EAGAIN);
    assert_int_equal(drops[3][0] + drops[3][1] + drops[4][0] + drops[4][1], 0);
    for (uint64_t x = 0; x < 6 * CH; x += CH / 3)
        assert_true(window_at(a, x, &mem, &avail) && is_pat(mem, x, avail));
    /* a's reader copied 2 CH: a's block 0 (not started) is dropped for b, its copied chunks
     * give their slots, the others stay for the reader */
    window_read(&p, a, 2 * CH, now_ms);
    assert_int_equal(land(&p, b, 0, CH), 0);
    assert_int_equal(drops[3][0], 1);
    assert_int_equal(drops[3][1], 0);
    assert_int_equal(window_landed_to(b), 5 * CH);
    assert_true(p.nslots <= p.max_slots);
    for (uint64_t x = 2 * CH; x < 6 * CH; x += CH / 3)
        assert_true(window_at(a, x, &mem, &avail) && is_pat(mem, x, avail));
    /* a's writer never writes its block 0, and has nothing whole to write */
    assert_int_equal(window_next_write(a, &ci, &mem, &at, &len, &bstart), 0);
    /* a's reader copies the rest of block 0: those slots go back at once */
    unsigned nfree = p.nfree;
    window_read(&p, a, 4 * CH, now_ms);
    assert_int_equal(p.nfree, nfree + 2);
    assert_int_equal(window_held(a), 2);
    window_wrote(&p, b, ci, 1);
    window_free(&p, a);
    window_free(&p, b);
    assert_int_equal(p.nfree, p.nslots);
    window_pool_fini(&p);
}

/* The chunk a run copies into without the lock stays its own, even when another run drops its
 * block meanwhile: the bytes still reach its readers. */
static void test_window_filling_kept(void **state)
{
    (void)state;
    struct window_pool p;
    struct window *a, *b;
    memset(drops, 0, sizeof(drops));
    assert_int_equal(window_pool_init(&p, 6 * CH, 6 * CH, BS, CH, STALL_MS, on_drop), 0);
    assert_int_equal(window_new(&p, 0, 2 * BS, BS, (void *)6, now_ms, &a), 0);
    assert_int_equal(window_new(&p, 0, 2 * BS, BS, (void *)7, now_ms, &b), 0);
    window_readers(a, 1, 1);
    window_readers(b, 1, 1);
    for (int i = 0; i < 4; i++)
        assert_int_equal(land(&p, b, 0, CH), 0); /* b: its block 0, whole */
    unsigned ci;
    const unsigned char *mem;
    uint64_t at;
    size_t len, room, avail;
    int bstart;
    assert_int_equal(window_next_write(b, &ci, &mem, &at, &len, &bstart), 1);
    assert_int_equal(land(&p, a, 0, CH), 0); /* a: chunk 0 of its block 0 */
    unsigned char *pend;
    assert_int_equal(window_room(&p, a, now_ms, 0, &pend, &room),
                     0);            /* a copies into chunk 1 ... */
    window_read(&p, a, CH, now_ms); /* ... a's reader copied chunk 0 ... */
    /* ... while b finds the pool at its cap and drops a's unstarted, copied block */
    assert_int_equal(land(&p, b, 0, CH), 0);
    assert_int_equal(drops[6][0], 1);
    assert_true(window_at(b, BS, &mem, &avail));
    assert_true(mem < pend || mem >= pend + room); /* not the slot a copies into */
    fill_pat(pend, CH, room);
    window_landed(a, room);
    assert_true(window_at(a, CH + 5, &mem, &avail));
    assert_true(is_pat(mem, CH + 5, avail));
    assert_true(window_at(b, BS, &mem, &avail));
    assert_true(is_pat(mem, BS, avail));
    window_wrote(&p, b, ci, 1);
    window_free(&p, a);
    window_free(&p, b);
    window_pool_fini(&p);
}

/* A read-ahead window (no reader yet) holds at most half the pool with the others like it, so
 * that a run a reader waits for always finds room as readers copy. */
static void test_window_readahead_half(void **state)
{
    (void)state;
    struct window_pool p;
    struct window *ra, *rb, *w;
    assert_int_equal(window_pool_init(&p, 12 * CH, 6 * CH, BS, CH, STALL_MS, NULL), 0);
    assert_int_equal(window_new(&p, 0, 2 * BS, BS, NULL, now_ms, &ra), 0);
    assert_int_equal(window_new(&p, 0, 2 * BS, BS, NULL, now_ms, &rb), 0);
    assert_int_equal(window_new(&p, 0, 2 * BS, BS, NULL, now_ms, &w), 0);
    window_readers(w, 1, 1);
    while (land(&p, ra, 0, CH) == 0)
        ;
    while (land(&p, rb, 0, CH) == 0)
        ;
    assert_int_equal(window_held(ra) + window_held(rb), 6);
    assert_int_equal(land(&p, ra, 1, CH) == 0 ? 1 : 0, 1); /* stalled: forced, its own */
    for (int i = 0; i < 6; i++)
        assert_int_equal(land(&p, w, 0, CH), 0);
    end_all(&p, (struct window *[]){ra, rb, w}, 3);
}

/* A failed write: nothing more is written, blocks not whole are dropped, the run settles. A
 * run cut short: its last block is never whole and not counted as dropped. */
static void test_window_write_error_and_cut(void **state)
{
    (void)state;
    struct window_pool p;
    struct window *w;
    memset(drops, 0, sizeof(drops));
    assert_int_equal(window_pool_init(&p, 64 * CH, 16 * CH, BS, CH, STALL_MS, on_drop), 0);
    assert_int_equal(window_new(&p, 0, 3 * BS, BS, (void *)5, now_ms, &w), 0);
    unsigned ci;
    const unsigned char *mem;
    uint64_t at;
    size_t len;
    int bstart;
    while (window_landed_to(w) < 2 * BS + CH)
        assert_int_equal(land(&p, w, 0, CH), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(window_next_write(w, &ci, &mem, &at, &len, &bstart), 1);
        window_wrote(&p, w, ci, 1);
    }
    assert_int_equal(window_next_write(w, &ci, &mem, &at, &len, &bstart), 1);
    window_wrote(&p, w, ci, 0); /* EIO */
    assert_int_equal(window_next_write(w, &ci, &mem, &at, &len, &bstart), 0);
    assert_false(window_settled(w)); /* still receiving */
    window_received(&p, w, 0);       /* and the backend failed too */
    assert_true(window_settled(w));
    assert_true(window_block_whole(w, 0));
    assert_false(window_block_whole(w, 1));
    assert_false(window_block_whole(w, 2));
    assert_int_equal(drops[5][1], 1);
    window_free(&p, w);

    assert_int_equal(window_new(&p, 0, 2 * BS, BS, (void *)6, now_ms, &w), 0);
    while (window_landed_to(w) < BS + 2 * CH + 5)
        assert_int_equal(land(&p, w, 0, CH), 0);
    window_received(&p, w, 0);
    while (window_next_write(w, &ci, &mem, &at, &len, &bstart)) {
        assert_true(at < BS);
        window_wrote(&p, w, ci, 1);
    }
    assert_true(window_settled(w));
    assert_true(window_block_whole(w, 0));
    assert_false(window_block_whole(w, 1));
    assert_int_equal(window_dropped_blocks(w), 0);
    assert_int_equal(window_dropped_bytes(w), 0);
    window_free(&p, w);
    window_pool_fini(&p);
}

/* Runs of one small object each whose reader copied all of it before the writer wrote it:
 * the slot goes back as the write ends, so an ended run keeps no memory for readers that are
 * gone. Runs whose readers never attach (read-ahead, a client gone) hold what they landed
 * only until it is written (their owner frees them then: fill.c). */
static void test_window_read_before_written(void **state)
{
    (void)state;
    struct window_pool p;
    struct window *w[12];
    unsigned ci;
    const unsigned char *mem;
    uint64_t at;
    size_t len;
    int bstart;
    assert_int_equal(window_pool_init(&p, 8 * CH, 6 * CH, BS, CH, STALL_MS, NULL), 0);
    for (unsigned i = 0; i < 12; i++) { /* more runs than the pool has slots */
        assert_int_equal(window_new(&p, 0, 3000, BS, NULL, now_ms, &w[i]), 0);
        window_readers(w[i], 1, 1);
        assert_int_equal(land(&p, w[i], 0, 3000), 0);
        window_received(&p, w[i], 1);
        assert_int_equal(window_read(&p, w[i], 3000, now_ms), 1); /* not written yet: kept */
        assert_int_equal(window_held(w[i]), 1);
        window_readers(w[i], 0, 0);
        assert_int_equal(window_next_write(w[i], &ci, &mem, &at, &len, &bstart), 1);
        window_wrote(&p, w[i], ci, 1);
        assert_int_equal(window_held(w[i]), 0);
        assert_true(window_settled(w[i]));
        assert_true(window_block_whole(w[i], 0));
    }
    assert_int_equal(window_pool_held(&p), 0);
    end_all(&p, w, 12);
}

/* A slot that was released under a reader's copy: window_still() says so; chunks a reader is
 * done with go first, and at once once the run ended. */
static void test_window_still_and_read(void **state)
{
    (void)state;
    struct window_pool p;
    struct window *w;
    assert_int_equal(window_pool_init(&p, 64 * CH, 6 * CH, BS, CH, STALL_MS, NULL), 0);
    assert_int_equal(window_new(&p, 0, 2 * BS, BS, NULL, now_ms, &w), 0);
    unsigned ci;
    const unsigned char *mem, *m0;
    uint64_t at;
    size_t len, avail;
    int bstart;
    while (window_landed_to(w) < BS)
        assert_int_equal(land(&p, w, 0, CH), 0);
    assert_true(window_at(w, 100, &m0, &avail));
    assert_int_equal(window_next_write(w, &ci, &mem, &at, &len, &bstart), 1);
    window_wrote(&p, w, ci, 1);
    window_read(&p, w, CH,
                now_ms); /* a reader copied chunk 0, written: its slot goes back at once */
    assert_false(window_still(w, 100, m0));
    /* the next chunk takes the consumed one's slot rather than new memory */
    unsigned before = p.nslots;
    assert_int_equal(land(&p, w, 0, CH), 0);
    assert_int_equal(p.nslots, before);
    assert_false(window_at(w, 100, &mem, &avail));
    uint64_t fa;
    assert_true(window_in_file(w, 100, &fa));
    while (window_landed_to(w) < 2 * BS) {
        while (window_next_write(w, &ci, &mem, &at, &len, &bstart))
            window_wrote(&p, w, ci, 1);
        assert_int_equal(land(&p, w, 0, CH), 0);
    }
    window_received(&p, w, 1);
    while (window_next_write(w, &ci, &mem, &at, &len, &bstart))
        window_wrote(&p, w, ci, 1);
    window_read(&p, w, 2 * BS, now_ms);
    assert_int_equal(window_held(w), 0);
    window_free(&p, w);
    window_pool_fini(&p);
}

/* ---- random interleavings against a model ------------------------------------------------ */

struct sim_run {
    struct window *w;
    uint64_t off, end;
    unsigned char *file; /* the model of the data file over [off, end) */
    uint8_t *wcount;     /* writes per byte */
    uint64_t rpos;       /* a reader */
    int reader_keeps_pace;
    unsigned refetches;
    int received, flight, stalls;
    unsigned char *pend; /* a room taken, copied into at the run's next turn (as without the
                          * lock: every other run, writer and reader acts in between) */
    size_t pend_n;
    unsigned fci;
    uint64_t fat;
    size_t flen;
    const unsigned char *fmem;
};

static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

/* One reader step: copies what it can; 1 when it moved. */
static int sim_read(struct window_pool *p, struct sim_run *r, int *starved)
{
    const unsigned char *mem;
    size_t avail;
    uint64_t fa;
    *starved = 0;
    if (r->rpos >= r->end)
        return 0;
    if (window_at(r->w, r->rpos, &mem, &avail)) {
        size_t n = (size_t)(1 + rnd() % avail);
        assert_true(is_pat(mem, r->rpos, n));
        assert_true(window_still(r->w, r->rpos, mem));
        r->rpos += n;
        window_read(p, r->w, r->rpos, now_ms);
        return 1;
    }
    if (window_in_file(r->w, r->rpos, &fa)) {
        size_t n = (size_t)(1 + rnd() % fa);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(r->wcount[r->rpos - r->off + i], 1);
        assert_true(is_pat(r->file + (r->rpos - r->off), r->rpos, n));
        r->rpos += n;
        return 1;
    }
    if (r->rpos >= window_landed_to(r->w) && !r->received) {
        *starved = 1;
        return 0;
    }
    assert_false(window_can_serve(r->w, r->rpos));
    r->refetches++; /* another fetch would bring it: the model skips to its block's end */
    r->rpos = S3C_MIN_(r->rpos - (r->rpos - r->off) % BS + BS, r->end);
    window_read(p, r->w, r->rpos, now_ms);
    return 1;
}

static void sim(unsigned nruns, uint64_t pool_bytes, int writer_slowness, int keep_pace,
                int no_stall, unsigned *total_drops, unsigned *total_refetches)
{
    struct window_pool p;
    struct sim_run runs[4];
    assert_true(nruns <= 4);
    memset(drops, 0, sizeof(drops));
    assert_int_equal(window_pool_init(&p, pool_bytes, 8 * CH, BS, CH, STALL_MS, on_drop), 0);
    assert_true(window_pool_on(&p));
    for (unsigned i = 0; i < nruns; i++) {
        struct sim_run *r = &runs[i];
        memset(r, 0, sizeof(*r));
        r->off = (uint64_t)(rnd() % 4) * BS;
        r->end = r->off + 3 * BS + rnd() % (4 * BS);
        r->file = calloc(1, r->end - r->off);
        r->wcount = calloc(1, r->end - r->off);
        r->rpos = r->off;
        r->reader_keeps_pace = keep_pace;
        assert_int_equal(window_new(&p, r->off, r->end, BS, (void *)(uintptr_t)i, now_ms, &r->w),
                         0);
        window_readers(r->w, 1, 1);
    }
    for (unsigned step = 0; step < 200000; step++) {
        int busy = 0;
        for (unsigned i = 0; i < nruns; i++) {
            struct sim_run *r = &runs[i];
            int starved = 0;
            /* the reader: one that keeps pace copies all it can before the run lands more */
            if (r->reader_keeps_pace) {
                while (sim_read(&p, r, &starved))
                    ;
            } else if (rnd() % 3 == 0) {
                sim_read(&p, r, &starved);
            }
            busy |= r->rpos < r->end;
            /* the run */
            if (!r->received) {
                busy = 1;
                if (window_landed_to(r->w) >= r->end) {
                    window_received(&p, r->w, 1);
                    r->received = 1;
                } else if (r->pend) {
                    fill_pat(r->pend, window_landed_to(r->w), r->pend_n);
                    window_landed(r->w, r->pend_n);
                    r->pend = NULL;
                } else {
                    /* waited long for room: fillwin.c's stall (never, with @no_stall) */
                    size_t room;
                    (void)starved;
                    unsigned before = window_held(r->w), cap = window_pool_cap(&p);
                    int rc = window_room(&p, r->w, now_ms, !no_stall && r->stalls > 20, &r->pend,
                                         &room);
                    /* it grows only below its cap (a swap for a block of its own dropped is no growth) */
                    assert_true(window_held(r->w) <= before || before < cap);
                    r->stalls = rc ? r->stalls + 1 : 0;
                    if (rc)
                        r->pend = NULL;
                    else {
                        size_t want = (size_t)(1 + rnd() % (3 * CH / 2));
                        r->pend_n = S3C_MIN_(room, want);
                    }
                }
            }
            /* the writer, slower than the run by @writer_slowness */
            if (r->flight && rnd() % (unsigned)writer_slowness == 0) {
                assert_true(is_pat(r->fmem, r->fat, r->flen));
                memcpy(r->file + (r->fat - r->off), r->fmem, r->flen);
                for (size_t k = 0; k < r->flen; k++)
                    r->wcount[r->fat - r->off + k]++;
                window_wrote(&p, r->w, r->fci, 1);
                r->flight = 0;
            }
            if (!r->flight) {
                int bstart;
                r->flight = window_next_write(r->w, &r->fci, &r->fmem, &r->fat, &r->flen, &bstart);
            }
            busy |= r->flight || !window_settled(r->w);
            assert_true(window_held(r->w) <= p.max_slots);
        }
        assert_true(p.nslots <= p.max_slots);
        if (!busy)
            break;
    }
    *total_drops = 0;
    *total_refetches = 0;
    for (unsigned i = 0; i < nruns; i++) {
        struct sim_run *r = &runs[i];
        assert_true(window_settled(r->w));
        unsigned nb = (unsigned)((r->end - r->off + BS - 1) / BS);
        for (unsigned bi = 0; bi < nb; bi++) {
            uint64_t bs = r->off + (uint64_t)bi * BS, be = S3C_MIN_(bs + BS, r->end);
            if (window_block_whole(r->w, bi)) {
                for (uint64_t x = bs; x < be; x++)
                    assert_int_equal(r->wcount[x - r->off], 1);
                assert_true(is_pat(r->file + (bs - r->off), bs, be - bs));
                assert_int_equal(drops[i][bi], 0);
            } else {
                assert_true(window_block_dropped(r->w, bi));
                assert_int_equal(drops[i][bi], 1);
                for (uint64_t x = bs; x < be; x++)
                    assert_int_equal(r->wcount[x - r->off], 0); /* never a byte written */
                (*total_drops)++;
            }
        }
        *total_refetches += r->refetches;
        window_free(&p, r->w);
        free(r->file);
        free(r->wcount);
    }
    assert_int_equal(p.nfree, p.nslots);
    window_pool_fini(&p);
}

/* One run, a reader that keeps pace, a writer at a fifth of the run's pace: blocks are
 * dropped, the reader never has to fetch again. */
static void test_window_sim_keeping_pace(void **state)
{
    (void)state;
    unsigned d_all = 0;
    for (int round = 0; round < 300; round++) {
        unsigned d, rf;
        sim(1, 8 * CH, 5, 1, 0, &d, &rf); /* the pool: one window's share */
        assert_int_equal(rf, 0);
        d_all += d;
    }
    assert_true(d_all > 0);
}

/* Several runs on a small pool, slow readers, writers of every pace: the invariants hold. */
static void test_window_sim_mixed(void **state)
{
    (void)state;
    for (int round = 0; round < 1000; round++) {
        unsigned d, rf;
        sim(1 + (unsigned)(rnd() % 4), (uint64_t)(14 + rnd() % 30) * CH, 1 + (int)(rnd() % 8),
            (int)(rnd() % 2), 0, &d, &rf);
    }
}

/* Several runs on a small pool, slow readers, slow writers, and no stall ever declared: runs
 * wait for their readers instead of dropping, so no reader ever has to fetch a byte again, and
 * every run still settles (the readers' copying and the drop of copied blocks free room). */
static void test_window_sim_never_refetch(void **state)
{
    (void)state;
    unsigned d_all = 0;
    for (int round = 0; round < 1000; round++) {
        unsigned d, rf;
        sim(1 + (unsigned)(rnd() % 4), (uint64_t)(14 + rnd() % 30) * CH, 1 + (int)(rnd() % 8),
            (int)(rnd() % 2), 1, &d, &rf);
        assert_int_equal(rf, 0);
        d_all += d;
    }
    assert_true(d_all > 0); /* the disk was behind: blocks were dropped, after their readers */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_pool_sizes),
        cmocka_unit_test(test_window_cap_shares),
        cmocka_unit_test(test_window_steal_from_most),
        cmocka_unit_test(test_window_sequence),
        cmocka_unit_test(test_window_drop_when_starved),
        cmocka_unit_test(test_window_steal),
        cmocka_unit_test(test_window_stale_gives_to_others),
        cmocka_unit_test(test_window_stale_frees_given_up),
        cmocka_unit_test(test_window_stale_started),
        cmocka_unit_test(test_window_walk_not_stale),
        cmocka_unit_test(test_window_filling_kept),
        cmocka_unit_test(test_window_write_error_and_cut),
        cmocka_unit_test(test_window_still_and_read),
        cmocka_unit_test(test_window_sim_keeping_pace),
        cmocka_unit_test(test_window_readahead_half),
        cmocka_unit_test(test_window_read_before_written),
        cmocka_unit_test(test_window_sim_mixed),
        cmocka_unit_test(test_window_sim_never_refetch),
    };
    return cmocka_run_group_tests_name("window", tests, NULL, NULL);
}
