/*
 * cache_priv.h: the in-memory state shared by the files of cache/: struct cache, struct ckey,
 * struct cver, struct fetch and struct cache_obj, and nothing else but their constants. What
 * each file offers the others is declared in its own private header (table_priv.h,
 * evict_priv.h, missource_priv.h, fillwin_priv.h, fill_priv.h, prefetch_priv.h,
 * members_priv.h, journal_priv.h), and a file includes the headers of the files it calls:
 * its includes show its place in the pipeline (docs/design.md, "The files of cache/"), and
 * make lint fails when they go round in a circle. One mutex, c->mu, guards everything here;
 * waiters are suspended and resumed under it (policy.c has its own, taken last). Nothing
 * holds c->mu across backend, disk or index I/O.
 *
 *   struct ckey   one per (bucket, key) while referenced; authoritative over
 *                 the index while alive (loaded once from it).
 *   struct cver   one object version: metadata, block bitmaps, data fd,
 *                 fetches in flight, readers waiting for bytes.
 *   struct fetch  one backend_get of a run of blocks (a worker job).
 */
#ifndef S3C_CACHE_PRIV_H
#define S3C_CACHE_PRIV_H

#include <pthread.h>
#include <stdint.h>

#include "cache.h"
#include "lib/s3err.h"
#include "lib/workq.h"
#include "index.h"
#include "policy.h"
#include "store.h"
#include "window.h"

#define CACHE_MAGIC 0xcac4e001u
#define CACHE_OBJ_MAGIC 0xcac40b1du
#define CACHE_KEY_BUCKETS 4096
#define CACHE_TOUCH_MAX 4096
#define CACHE_FETCH_MAX_BLOCKS 16
#define CACHE_WAKE_BYTES (256u << 10)
#define CACHE_ERR_CLOSING (-S3E_SERVICE_UNAVAILABLE)
#define CACHE_IDLE_KEYS_MAX 8192 /* idle keys kept at most (each may hold one open fd) */

struct cver;

struct ckey {
    struct ckey *hnext;
    struct cache *c;
    unsigned refs;
    struct index_key k;
    char *bucket, *key;
    int loaded;       /* cur reflects the index (or newer knowledge) */
    struct cver *cur; /* the version new readers get; holds a ref */
    uint64_t gen;     /* bumped by every replace/invalidate/evict */
    int lookup_running;
    /* a new version's record is being written to the index (adopt() or a lookup's
     * version_create()): the other waits (c->index_cv), so that neither's index_put()
     * replaces the record the other just wrote and unlinks its data file */
    int indexing;
    int64_t lookup_started_ns;    /* CLOCK_REALTIME when the running lookup asked the backend */
    uint64_t lookup_seq;          /* last lookup started */
    uint64_t lookup_done;         /* last lookup finished */
    int lookup_err;               /* result of lookup_done when it left no version */
    int lookup_stale;             /* lookup_done failed and cur is served stale */
    int lookup_same;              /* lookup_done confirmed cur (revalidated, unchanged) */
    struct cache_waiter *waiters; /* waiting for a lookup */
    /* A delete of its index record failed (LMDB map full): the record left behind may name a
     * version we dropped (its data file unlinked). The cache then holds a ref, so the key stays
     * in memory, loaded, and the record is never read back, until a later write of the record
     * (put or delete) succeeds: cache_key_index_written_locked(). */
    int index_stale;
    /* Idle keys (no references, a current version) stay in memory, with their open data fd, in a
     * bounded LRU so that hits need no index read and no open(2). */
    struct ckey *idle_prev, *idle_next;
    int idle;
};

struct fetch {
    struct fetch *next;     /* in v->fetches */
    struct fetch *all_next; /* in c->fetches (in flight only) */
    struct cache *c;
    struct cver *v;
    uint64_t first, n; /* blocks */
    uint64_t off, end; /* bytes [off, end) */
    uint64_t landed;   /* bytes [off, landed) are readable */
    uint64_t marked;   /* blocks [first, first + marked) are done */
    uint64_t reserved; /* accounted bytes still reserved by this fetch */
    uint64_t woke_at;
    int need_reserve, bypass, running, err;
    int direct;         /* a warm-up's: written around the page cache (set under c->mu) */
    int as_lru;         /* reserves as an LRU fetch whatever the key's policy (a copy
                            * source must be cached whole; set under c->mu) */
    int no_bypass;      /* a plan's prefetch: without room it ends, never fetches to memory
                         * (no reader waits for those bytes; set under c->mu) */
    unsigned char *mem; /* bypass: the bytes */
    /* A direct run from a remote backend (fetch_stage_open): bytes gather in @stage, aligned,
     * and go to @dfd (the data file opened O_DIRECT) a chunk at a time. Owned by the run. */
    unsigned char *stage;
    size_t staged;
    int dfd;
    /* A run from a local backend publishes the backend file it copies from (@src_fd, owned by
     * the run) once its metadata matched the version: src_state 0 not yet, 1 open, -1 none.
     * GETs of the version then send from a duplicate of it while the run copies (see
     * missource.c). A chain run (@follow_to > first + n) starts the next run of
     * the range those GETs asked for when it ends, handing it the open file (@given_fd). */
    int src_fd, src_state, src_err, given_fd;
    uint64_t follow_to;
    /* A run through a window (fillwin.c): the backend's bytes land in @win, readers copy them
     * from there, the cache writer (a job of c->wwq at a time, @wr_queued) writes them into the
     * data file behind them; the run's worker hands its end to the writer (@handed) when the
     * disk is behind. Ended, the fetch may stay (@kept, not running) for readers still copying
     * from its window; it is freed once no reader copies (@copiers) and nothing is held. */
    struct window *win;
    int nowin;    /* never through a window: warm-ups and copy sources (set under mu) */
    int starved;  /* a reader waits for bytes the run has not received */
    int wanted;   /* a reader waited for it before its window began (window_wanted) */
    int received; /* the backend call ended: every byte the run will get is in */
    int wr_queued, handed, kept;
    int run_rc; /* the run's result, for the writer that ends it */
    unsigned copiers;
    struct cache_obj *wreaders; /* readers attached to its window (fillwin_attach_locked) */
    uint64_t released;          /* blocks (bits from first) whose fetching bit this run gave up */
    int ahead;                  /* started ahead of its readers, on the fetch threads (ahead.c) */
    int receiving;              /* counted as receiving from the backend (ahead.c) */
};

struct cver {
    unsigned refs;
    struct ckey *key; /* every holder of a cver also holds its key */
    uint64_t version;
    struct be_meta meta;
    uint32_t bs;
    uint32_t flags; /* INDEX_F_PINNED */
    uint64_t nblocks, npresent;
    uint8_t *present, *fetching;
    int64_t validated_ns, touched_ns;
    int fd;
    int dropped;   /* no longer indexed: unlink the file when freed */
    int unindexed; /* the index could not take it (LMDB map full, index error): it has no data
                    * file (cache_ver_fd_locked() fails with -ENOSPC, so fetches go to memory
                    * as bypasses) and is not kept once no request holds its key */
    unsigned bypass_seen;  /* fetches of it that went to memory (a bypass): none, or how many */
    unsigned nreceiving;   /* its runs receiving from the backend (fetch.receiving, ahead.c) */
    unsigned plan_waiters; /* plan prefetches waiting on it: woken when nreceiving drops to 0 */
    unsigned noroom_gen;   /* plan prefetch runs ended for want of room (no reader's error) */
    unsigned nahead;       /* of which started ahead of its readers */
    int unrecorded;       /* not in the index yet: recorded before its data file is created or it is
                     * pinned (cache_ver_record); a cold GET sent from the backend's file does
                     * not wait for that write (--miss-source) */
    unsigned src_readers; /* GETs sending from a run's backend file: chains go on while > 0 */
    uint64_t src_done_to; /* and up to this block, asked by such GETs that read to their end */
    int unverified;       /* loaded from the index with blocks present, data file not yet opened */
    int first_fetch_owned; /* created by a lookup: that lookup's request is the miss, so the
                            * request that happens to start the first fetch is not another */
    int members_building;  /* a member index build of this version runs (members.c) */
    void *members;         /* its member index in memory (verified; members.c), or NULL */
    size_t members_len;
    struct fetch *fetches;
    uint64_t err_gen;
    int last_err;
    struct cache_waiter *waiters; /* waiting for bytes */
};

struct cache_obj {
    unsigned magic;
    struct cache *c;
    struct ckey *k;
    struct cver *v; /* bound by cache_obj_meta */
    enum cache_outcome how;
    int guessed; /* how is a guess from meta (refined by open_range) */
    int stale;
    uint64_t waited_lookup;
    int waited_data;
    uint64_t err_gen;
    uint64_t next_pos, range_end;
    struct cache_waiter *w_armed; /* the waiter we armed, if any */
    int from_source;   /* sending from a run's backend file (counted in v->src_readers) */
    int source_waited; /* suspended once for a run to open that file: never starts another */
    int internal;      /* a warm-up's or a copy's, not a client read: no pass accounting */
    int reads_first;   /* a GET that reads from the object's first block (cache_obj_reads_first) */
    struct workq *wq;  /* where its lookup and fetch runs go (a plan's prefetch: c->pwq), or NULL:
                        * the workers */
    int opened;        /* open_range ran: [read_off, range_end) is what the request reads */
    uint64_t read_off, read_end, hit_bytes; /* and the bytes of it present when it began */
    /* The windowed run this reader reads from (or waits on), in its wreaders, and the position
     * it reads next: the run keeps the bytes from there (fillwin.c). */
    struct fetch *wf;
    struct cache_obj *wf_next;
    uint64_t wf_pos;
    /* It walks ahead of the readers to come (a member index build reads the headers, then the
     * batch or member GET that waited for it reads the members): the run keeps what it walked
     * past, as for a run no reader reads yet, so that they find it (fillwin.c). */
    int wf_scan;
};

/* The calls that go up the pipeline (docs/design.md, "The files of cache/"): a stage of a fill
 * hands back to the orchestrator above it, fill.c, and the fill tells members.c of a version
 * made whole. cache_open() sets them (to fill_start_locked, fill_end_run and
 * members_note_whole_locked); the stages call them through c->up, so that no file of cache/
 * calls a file above it. */
struct cache_up {
    /* missource.c: starts the next run of a chain, as fill_start_locked() (mu held). */
    int (*run_start_locked)(struct cache *c, struct cver *v, uint64_t first, uint64_t n,
                            uint64_t follow_to, int given_fd);
    /* fillwin.c: the writer ends a run handed to it, as fill_end_run() (no lock held). */
    void (*run_end)(struct fetch *f, int rc);
    /* fill.c: @v became whole, as members_note_whole_locked() (mu held). */
    void (*ver_whole_locked)(struct cache *c, struct cver *v, int direct);
};

struct unlink_item {
    struct unlink_item *next;
    char path[];
};

struct cache {
    unsigned magic;
    const struct conf *cf;
    struct backend *be;
    struct workq *wq;
    struct index *ix;
    char dir[2048];
    uint64_t cap, block_size, readahead;
    int64_t revalidate_ms;  /* < 0: never */
    int64_t valid_after_ns; /* entries validated before this are revalidated (cluster restart) */
    int miss_source;        /* cold GETs send from the local backend's file (--miss-source) */
    int in_memory;          /* the cache directory is tmpfs or ramfs (fileio_medium_of_path) */

    struct cache_up up; /* set once by cache_open() */

    pthread_mutex_t mu;
    pthread_cond_t jobs_cv;
    pthread_cond_t index_cv; /* a key's indexing ended (ckey.indexing) */
    unsigned njobs;
    int closing;
    struct ckey *keys[CACHE_KEY_BUCKETS];
    struct ckey *idle_head, *idle_tail; /* LRU of idle keys, oldest first */
    unsigned nidle, max_idle; /* max_idle: a quarter of the fd limit, at most CACHE_IDLE_KEYS_MAX */
    struct fetch *fetches;

    uint64_t used, reserved; /* used mirrors the index total */
    /* Of reserved: bytes held by files of the cache directory outside the index (request
     * bodies being received, write-back parts until their upload ends); cache_stage_*(). */
    uint64_t staged;
    struct cache_stats st; /* counters only */

    struct index_touch *touch;
    size_t ntouch;
    int touch_queued;
    struct unlink_item *unlinks;
    int unlink_queued;

    struct window_pool pool; /* the fills' windows (fillwin.c) */
    pthread_cond_t win_cv;   /* runs waiting for room in their window */
    unsigned win_waiters;
    struct workq *wwq; /* the cache writer's threads */
    struct workq *ewq; /* the threads that end the runs it finished (fillwin.c) */

    /* Ranged GETs ahead of readers (ahead.c): their threads (NULL: off), how many run, the
     * limit now (halved on SlowDown) and its ceiling, the most per object, and the backend's
     * throttled answers last seen. */
    struct workq *awq;
    unsigned ahead_running, ahead_limit, ahead_max, ahead_per_object;
    int cold_get; /* --cold-get on a remote backend: a cold lookup by GET (lookup.c) */
    unsigned versions_receiving; /* versions with a run receiving (cver.nreceiving > 0) */
    uint64_t ahead_throttled_seen;

    pthread_mutex_t evict_mu; /* one evictor at a time */
    struct policy *pol;       /* keep or LRU, per prefix (policy.c; its own lock, taken last) */
    /* Bumped when entries may have become evictable (blocks indexed, an adopt, an unpin, a
     * clean); with the policy's gen it validates the memo of a keep reservation that found
     * nothing to evict (evict.c). */
    uint64_t evict_gen;
    int keep_memo_valid;
    uint64_t keep_memo_gen;
    int64_t keep_memo_ns, keep_memo_since;
    pthread_mutex_t record_mu; /* one cache_ver_record() at a time (taken before mu) */
    /* The write-back engine's hooks (journal.c): called without mu, counted in journal_calls
     * so that cache_journal_detach() waits for them (journal_cv). */
    struct cache_journal_ops journal;
    int journal_on;
    unsigned journal_calls;
    pthread_cond_t journal_cv;
    uint64_t members_mem; /* bytes of member indexes held by versions (members.c) */
    /* Read plans (plan.c; NULL with --plan-requests 0) and the threads their prefetches'
     * lookups and runs go to, apart from the workers, so that no client's miss queues behind
     * them. */
    struct plans *plans;
    struct workq *pwq;
};

/* A version's block bitmaps (present, fetching). */
static inline int cache_bit(const uint8_t *bm, uint64_t b)
{
    return bm[b / 8] >> (b % 8) & 1;
}
static inline void cache_bit_set(uint8_t *bm, uint64_t b)
{
    bm[b / 8] |= (uint8_t)(1u << (b % 8));
}
static inline void cache_bit_clr(uint8_t *bm, uint64_t b)
{
    bm[b / 8] &= (uint8_t) ~(1u << (b % 8));
}

#endif
