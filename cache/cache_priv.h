/*
 * cache_priv.h: the in-memory state shared by cache.c (API), table.c (keys,
 * versions), lookup.c (metadata lookups), fill.c (block fetches, reads),
 * missource.c (--miss-source), journal.c (the write-back journal) and evict.c (capacity, LRU,
 * unlinks), which asks policy.c (keep or LRU, per prefix) what it may take, fillwin.c
 * (fills through a memory window, the cache writer). One mutex, c->mu, guards
 * everything here; waiters are suspended and resumed under it (policy.c has its
 * own, taken last). Nothing holds c->mu across backend, disk or index I/O.
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
    int loaded;          /* cur reflects the index (or newer knowledge) */
    struct cver *cur;    /* the version new readers get; holds a ref */
    uint64_t gen;        /* bumped by every replace/invalidate/evict */
    int lookup_running;
    uint64_t lookup_seq;  /* last lookup started */
    uint64_t lookup_done; /* last lookup finished */
    int lookup_err;       /* result of lookup_done when it left no version */
    int lookup_stale;     /* lookup_done failed and cur is served stale */
    int lookup_same;      /* lookup_done confirmed cur (revalidated, unchanged) */
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
    uint64_t first, n;     /* blocks */
    uint64_t off, end;     /* bytes [off, end) */
    uint64_t landed;       /* bytes [off, landed) are readable */
    uint64_t marked;       /* blocks [first, first + marked) are done */
    uint64_t reserved;     /* accounted bytes still reserved by this fetch */
    uint64_t woke_at;
    int need_reserve, bypass, running, err;
    int direct;            /* a warm-up's: written around the page cache (set under c->mu) */
    int as_lru;            /* reserves as an LRU fetch whatever the key's policy (a copy
                            * source must be cached whole; set under c->mu) */
    unsigned char *mem;    /* bypass: the bytes */
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
    int nowin;            /* never through a window: warm-ups and copy sources (set under mu) */
    int starved;          /* a reader waits for bytes the run has not received */
    int received;         /* the backend call ended: every byte the run will get is in */
    int wr_queued, handed, kept;
    int run_rc;           /* the run's result, for the writer that ends it */
    unsigned copiers;
    struct cache_obj *wreaders; /* readers attached to its window (fillwin_attach_locked) */
    uint64_t released;    /* blocks (bits from first) whose fetching bit this run gave up */
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
    int dropped; /* no longer indexed: unlink the file when freed */
    int unindexed; /* the index could not take it (LMDB map full, index error): it has no data
                    * file (cache_ver_fd_locked() fails with -ENOSPC, so fetches go to memory
                    * as bypasses) and is not kept once no request holds its key */
    unsigned bypass_seen; /* fetches of it that went to memory (a bypass): none, or how many */
    int unrecorded; /* not in the index yet: recorded before its data file is created or it is
                     * pinned (cache_ver_record); a cold GET sent from the backend's file does
                     * not wait for that write (--miss-source) */
    unsigned src_readers; /* GETs sending from a run's backend file: chains go on while > 0 */
    uint64_t src_done_to; /* and up to this block, asked by such GETs that read to their end */
    int unverified; /* loaded from the index with blocks present, data file not yet opened */
    int first_fetch_owned; /* created by a lookup: that lookup's request is the miss, so the
                            * request that happens to start the first fetch is not another */
    int members_building; /* a member index build of this version runs (members.c) */
    void *members;        /* its member index in memory (verified; members.c), or NULL */
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
    int guessed;    /* how is a guess from meta (refined by open_range) */
    int stale;
    uint64_t waited_lookup;
    int waited_data;
    uint64_t err_gen;
    uint64_t next_pos, range_end;
    struct cache_waiter *w_armed; /* the waiter we armed, if any */
    int from_source; /* sending from a run's backend file (counted in v->src_readers) */
    int source_waited; /* suspended once for a run to open that file: never starts another */
    int internal;      /* a warm-up's or a copy's, not a client read: no pass accounting */
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
    int64_t revalidate_ms; /* < 0: never */
    int64_t valid_after_ns; /* entries validated before this are revalidated (cluster restart) */
    int miss_source;       /* cold GETs send from the local backend's file (--miss-source) */
    int in_memory;         /* the cache directory is tmpfs or ramfs (fileio_medium_of_path) */

    struct cache_up up; /* set once by cache_open() */

    pthread_mutex_t mu;
    pthread_cond_t jobs_cv;
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
    struct cache_stats st;   /* counters only */

    struct index_touch *touch;
    size_t ntouch;
    int touch_queued;
    struct unlink_item *unlinks;
    int unlink_queued;

    struct window_pool pool;  /* the fills' windows (fillwin.c) */
    pthread_cond_t win_cv;    /* runs waiting for room in their window */
    unsigned win_waiters;
    struct workq *wwq;        /* the cache writer's threads */

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
    uint64_t members_mem;     /* bytes of member indexes held by versions (members.c) */
};

/* cache.c, table.c, lookup.c */
/* Takes @w off @list: 1 when it was on it. */
int cache_unlink_waiter(struct cache_waiter **list, struct cache_waiter *w);
/* @ck leaves the LRU of idle keys (it is referenced again, or freed). */
void cache_idle_remove_locked(struct cache *c, struct ckey *ck);
/* A new version of @ck (one reference, the caller's), @m its metadata, blocks of @bs bytes. */
struct cver *cache_ver_new(struct ckey *ck, uint64_t version, const struct be_meta *m, uint32_t bs);
void cache_key_free_locked(struct cache *c, struct ckey *ck);

/* Indexes @v if it is only in memory (unrecorded); when the index does not take it, @v becomes
 * unindexed (served uncached). @v held by the caller; no lock held. */
void cache_ver_record(struct cache *c, struct cver *v);
int cache_submit(struct cache *c, enum workq_prio prio, workq_fn_f *fn, void *arg); /* mu held */
void cache_job_done(struct cache *c);                                               /* mu held */
struct ckey *cache_key_find_locked(struct cache *c, const struct index_key *k);
struct ckey *cache_key_get_locked(struct cache *c, const char *bucket, const char *key,
                                  const struct index_key *k);
void cache_key_load_locked(struct cache *c, struct ckey *ck);
/* After a write of @ck's index record returned @rc: a delete that failed (@rc other than 0 and
 * -ESTALE) marks the record stale (ckey.index_stale), one that succeeded (or any successful
 * put) ends that. */
void cache_key_index_written_locked(struct cache *c, struct ckey *ck, int rc, int is_delete);
void cache_key_put_locked(struct cache *c, struct ckey *ck);
void cache_ver_put_locked(struct cache *c, struct cver *v);
void cache_ver_drop_locked(struct cache *c, struct ckey *ck); /* cur -> NULL, dropped */
void cache_wake_locked(struct cache_waiter **list);
void cache_arm_locked(struct cache_obj *h, struct cache_waiter **list, struct cache_waiter *w);
void cache_ver_path(struct cache *c, const struct cver *v, char out[STORE_PATH_MAX]);
int cache_ver_fd_locked(struct cache *c, struct cver *v, int create, int *fd);
/* The end of a version (table.c): */
/* Removes @version of @ck from the index (no lock held). */
void cache_index_drop(struct cache *c, struct ckey *ck, uint64_t version);
/* @v's data file is gone: stop serving it (the index entry is dropped in the background). */
void cache_ver_broken_locked(struct cache *c, struct cver *v);
/* Queues @path to be unlinked by cache_unlinks_run() (no unlink under the lock). */
void cache_unlink_queue_locked(struct cache *c, const char *path);
void cache_unlinks_run(struct cache *c); /* mu not held */
/* Takes @f off @v's list of fetches. */
void cache_fetch_remove_locked(struct cver *v, struct fetch *f);
/* Frees @f (its window, its bytes; its readers are attached to nothing). mu held. */
void cache_fetch_free(struct fetch *f);
/* Frees @f, or keeps it until its last reader copying from its window is done (mu held). */
void cache_fetch_retire_locked(struct fetch *f);
/* Whether a fetch of @v is running (a kept one, ended, does not count). */
int cache_ver_running_locked(const struct cver *v);
/* A run's and a read's state (table.c): */
/* be_sink.on_meta of a run (@cls the fetch): -ESTALE when @m is not the version's object. */
int cache_fetch_on_meta(void *cls, const struct be_meta *m);
/* Whether every byte of [@off, @end) is present or has landed in a fetch in flight. */
int cache_ver_landed_locked(const struct cver *v, uint64_t off, uint64_t end);
/* The block after the last one of @h's range. */
uint64_t cache_obj_end_block(struct cache_obj *h, struct cver *v);
/* The outcome of a read that joined a running fetch, or started one. */
void cache_outcome_waiting(struct cache_obj *h);
void cache_outcome_started(struct cache_obj *h);
static inline int cache_bit(const uint8_t *bm, uint64_t b) { return bm[b / 8] >> (b % 8) & 1; }
static inline void cache_bit_set(uint8_t *bm, uint64_t b) { bm[b / 8] |= (uint8_t)(1u << (b % 8)); }
static inline void cache_bit_clr(uint8_t *bm, uint64_t b) { bm[b / 8] &= (uint8_t)~(1u << (b % 8)); }

/* journal.c: the write-back engine's hooks (cache_journal_attach()); nothing when none is
 * attached. No lock held. */
void journal_note(struct cache *c, const char *bucket, const char *key, uint64_t version,
                  uint64_t size);
void journal_forget(struct cache *c, const char *bucket, const char *key);
void journal_stats(struct cache *c, struct cache_stats *out);
int journal_attached(struct cache *c);

/* fill.c */
/* Starts fetches for the missing, not yet fetching blocks of [b0, b1). Returns how many started
 * or a negative error. */
int fill_ensure_locked(struct cache *c, struct cver *v, uint64_t b0, uint64_t b1);
struct fetch *fill_find_locked(struct cver *v, uint64_t pos);
void fill_fail_all_locked(struct cache *c, int err);
/* Frees @v's finished fetches kept for their readers (bypass bytes in memory): when no request
 * reads @v any more. An idle version must not hold them (blocks of memory per key). */
void fill_drop_finished_locked(struct cver *v);
/* Starts a run of blocks [@first, @first + @n) on a worker. A chain run also names the block
 * its chain ends at (@follow_to, else 0) and may be handed the backend file the previous run
 * copied from (@given_fd, owned by the run once this returns 0). */
int fill_start_locked(struct cache *c, struct cver *v, uint64_t first, uint64_t n,
                      uint64_t follow_to, int given_fd);

/* Ends run @f with @rc (no lock held): blocks landed whole are synced and marked present,
 * waiters woken, the fetch freed (or kept for readers), its job done. */
void fill_end_run(struct fetch *f, int rc);

/* fillwin.c: fills through a window (window.h) and the cache writer */
int fillwin_open(struct cache *c, struct errmsg *em); /* the pool and the writer's threads */
void fillwin_close(struct cache *c);                  /* after every run ended */
/* Whether @f runs through a window; creates it (mu held, in the run, before the backend). */
int fillwin_begin_locked(struct fetch *f);
/* be_sink.on_data of a windowed run. */
int fillwin_on_data(void *cls, const void *buf, size_t len);
/* The backend call of windowed run @f ended with @rc: 1 when the writer ends the run (the
 * caller must not touch @f again), 0 when the caller ends it now (fill_end_run). */
int fillwin_received(struct fetch *f, int rc);
/* At the end of a windowed run: syncs and marks present the blocks written whole; *@unsynced
 * the sync's error when none could be (bytes served, not cached). Counts what was dropped. */
int fillwin_complete(struct fetch *f, int *unsynced);
/* The fetching bits of windowed run @f that are still its own are cleared (mu held). */
void fillwin_clear_fetching_locked(struct fetch *f);
/* A reader of @v at @pos: the fetch whose window holds the byte (copy it with
 * fillwin_copy()), else NULL (mu held). */
struct fetch *fillwin_find_locked(struct cver *v, uint64_t pos, const unsigned char **mem,
                                  size_t *avail);
/* Copies @n bytes from @mem (found by fillwin_find_locked at @pos) into @buf without the lock:
 * 1 when the copy is good, 0 when the window let the bytes go meanwhile (read again), 2 when
 * the copy is good but @f ended meanwhile and this was its last copier: @f is freed (the
 * caller must not touch it again). Called and returns with mu held. */
int fillwin_copy(struct fetch *f, uint64_t pos, const unsigned char *mem, void *buf, size_t n);
/* A reader waits for bytes of @f past what it received (mu held). */
void fillwin_starved_locked(struct fetch *f);
/* Reader @o reads windowed run @f at @pos (copies from its window, reads what its writer wrote,
 * or waits for it): the run keeps every byte from @pos on for it (mu held). */
void fillwin_attach_locked(struct cache_obj *o, struct fetch *f, uint64_t pos);
/* Reader @o reads at @pos next: it leaves its run when @pos is outside the run's range, else
 * the run may let go of what lies behind @pos (mu held). */
void fillwin_reader_at_locked(struct cache_obj *o, uint64_t pos);
/* Reader @o is gone (mu held). */
void fillwin_detach_locked(struct cache_obj *o);
/* @v has no reader left but @self: its ended windows go back to the pool (mu held). */
void fillwin_idle_locked(struct cache *c, struct cver *v);

/* missource.c (--miss-source) */
int missource_enabled(const struct conf *cf, struct backend *be); /* at open: c->miss_source */
/* A new version of @size bytes (no earlier one, not pinned): its index record may wait for the
 * fill, so its first GET, sent from the backend's file, does not wait for that write. */
int missource_defer_record(const struct cache *c, uint64_t size);
/* The fill's side, from a run of @f: opens the backend file before the cache file (the GETs'
 * first byte waits for nothing else), ... */
void missource_run_start(struct fetch *f);
/* ... or says there will be none (GETs waiting stream from the cache; mu held) ... */
void missource_run_none_locked(struct fetch *f);
/* ... opens, checks and publishes it (idempotent; 0 or the error), ... */
int missource_fetch_open(struct fetch *f);
/* ... and when the run ended well, hands the file to the chain's next run (mu held). */
void missource_run_end_locked(struct fetch *f);
/* A GET's side: [@off, @end) of @v not all present, blocks [@b0, @b1) to fill: 1 with *@fd to
 * send from, -EINPROGRESS after @w->suspend() while a run opens the file, -ENOENT: stream from
 * the cache. mu held. */
int missource_open_locked(struct cache_obj *o, struct cver *v, uint64_t off, uint64_t end,
                          uint64_t b0, uint64_t b1, struct cache_waiter *w, int *fd);

/* prefetch.c: a waiter for threads that may block (workers): resume() signals a condition
 * variable that cache_pwait_wait() sleeps on (once per suspend). */
struct cache_pwait {
    struct cache_waiter w;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int woken;
};
void cache_pwait_init(struct cache_pwait *p);
void cache_pwait_wait(struct cache_pwait *p);
void cache_pwait_destroy(struct cache_pwait *p);

/* members.c: @v just became whole (every block present and indexed): a tar (a key ending in
 * ".tar") gets its member index built in the background: from its warm pages, or, when its
 * last run was a warm-up's (@direct: written around the page cache), with O_DIRECT reads
 * that leave the page cache as the warm-up did. mu held. */
void members_note_whole_locked(struct cache *c, struct cver *v, int direct);
/* Member indexes held in memory by versions, at most (beyond it, hits read the LMDB copy). */
#define CACHE_MEMBERS_MEM_MAX (256ull << 20)

/* evict.c */
/* Reserves @bytes of capacity, evicting LRU entries if needed: for a keep prefix's fetch
 * (@for_keep) only entries that are not a keep prefix's in use and were last read before
 * @since (its pass's start, policy_keeps()); otherwise those first (waiting up to 500 ms for
 * LRU objects other than @self, the reserving object's entry or NULL, that are open or being
 * filled), then keep entries for the bytes still needed. Blocks (worker only). 0 or -ENOSPC
 * when nothing more can be evicted (the caller bypasses). */
int evict_reserve(struct cache *c, uint64_t bytes, int for_keep, int64_t since,
                  const struct index_key *self);
void evict_unreserve_locked(struct cache *c, uint64_t bytes);
void evict_touch_locked(struct cache *c, struct cver *v, int64_t validated_ns);
void evict_flush_touches(struct cache *c);
void evict_kick_locked(struct cache *c);   /* queue background unlinks/touch flush if due */

#endif
