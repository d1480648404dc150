/*
 * cache.h: the SSD cache between the S3 front end and the backend. The
 * gateway's only way to read objects: hits come from local files (sendfile),
 * misses are fetched once per block by worker threads and streamed to every
 * waiting reader as the bytes land. cache/ never includes <microhttpd.h>: a
 * wait is expressed through struct cache_waiter callbacks.
 *
 * Lifecycle of a read (one HTTP request):
 *   cache_obj_get() -> cache_obj_meta() [-EAGAIN: suspended, call again after resume]
 *   -> cache_obj_open_range() (all present: fd for sendfile)  or
 *      cache_obj_read() loop (streaming; -EAGAIN: suspended, call again after resume)
 *   -> cache_obj_release()
 */
#ifndef S3C_CACHE_H
#define S3C_CACHE_H

#include <stdint.h>
#include <sys/types.h>
#include "backends/backend.h"

struct conf;
struct workq;
struct cache;
struct cache_obj;

/* The gateway's side of a wait. Rule against lost wake-ups: cache/ calls suspend() under the
 * lock that guards the awaited state, right before returning -EAGAIN, and calls resume() under
 * that same lock, only for an armed waiter, exactly once per suspend(). */
struct cache_waiter {
    void (*suspend)(void *cls);
    void (*resume)(void *cls);
    void *cls;
    /* private to cache/ */
    struct cache_waiter *next;
    int armed;
};

enum cache_outcome {
    CACHE_HIT = 0,   /* metadata and bytes from the SSD; the backend was not asked */
    CACHE_MISS,      /* this request started the backend fetch */
    CACHE_COALESCED, /* joined a fetch another request started */
    CACHE_BYPASS,    /* served from the backend without caching (nothing evictable, too big) */
    CACHE_PARTIAL,   /* part of the range from the SSD, this request fetched the rest */
};
/* "hit" "miss" "coalesced" "bypass" "partial" */
const char *cache_outcome_name(enum cache_outcome how);

struct cache_stats {
    /* used_bytes: indexed entries, blocks being fetched and staged_bytes (files of the cache
     * directory outside the index: bodies being received, write-back parts) */
    uint64_t capacity_bytes, used_bytes, staged_bytes, objects, pinned_objects, pinned_bytes;
    uint64_t reserved_bytes; /* of used_bytes, reserved by fills in flight (0: fills all ended) */
    uint64_t hits, misses, coalesced, bypassed, evictions, revalidations, stale_served;
    uint64_t partial; /* reads with part of their range cached that fetched the rest */
    uint64_t hit_bytes, miss_bytes; /* bytes reads asked for: in blocks present when they began,
                                     * and the others */
    uint64_t fill_bytes;            /* bytes written into the cache from the backend */
    uint64_t source_sends;          /* GETs sent from the backend's file while the cache filled */
    /* fills through a memory window (fillwin.c): bytes (and blocks) of cold fills delivered
     * to readers but not cached, the disk being behind; the windows' memory, and its cap */
    uint64_t uncached_bytes, uncached_blocks, window_bytes, window_limit_bytes;
    uint64_t window_held_bytes; /* of window_bytes, held by fills now (0 once idle) */
    /* ranged GETs ahead of readers (--fetch-parallel): started, limit halvings on SlowDown
     * (counters); in flight and the limit now (gauges) */
    uint64_t fetch_ahead_runs, fetch_ahead_backoffs, fetch_ahead_running, fetch_ahead_limit;
    uint64_t fetch_objects;       /* objects with a fetch in flight now (gauge) */
    uint64_t window_forced_drops; /* blocks let go before their readers copied them */
    uint64_t dirty_objects, dirty_bytes;
    /* write-back drain (writeback/drain.c) */
    uint64_t dirty_limit_bytes, dirty_staged_bytes; /* staged: admitted writes in progress */
    uint64_t drain_uploaded_objects, drain_uploaded_bytes, drain_errors, drain_inflight;
    uint64_t drain_cancelled; /* uploads stopped because a newer write superseded them */
    uint64_t drain_rate_bps;
    double drain_oldest_dirty_age_s;
    /* reads inside tar shards (members.c) */
    uint64_t member_reads, member_index_builds, member_index_errors;
    uint64_t batches, batch_items, batch_item_errors;
};

/* Opens (creating) the cache under cf->cache_dir: reclaims orphaned temp files, opens the LMDB
 * index; does not scan the object files. @be and @wq are borrowed and outlive the cache. */
int cache_open(const struct conf *cf, struct backend *be, struct workq *wq, struct cache **out,
               struct errmsg *em);
/* The start of a shutdown: no lookup or fill starts any more, and every one in flight fails
 * (its waiters are woken with -S3E_SERVICE_UNAVAILABLE, its run stops at its next byte); hits and
 * writes go on. Called again by cache_close(). */
void cache_stop(struct cache *c);
/* cache_stop(), then waits for workers' cache jobs to end, closes the index. */
void cache_close(struct cache *c);

/* A new reference to the in-memory object for (@bucket, @key); all concurrent requests for one
 * key share it (that is how misses coalesce). Never blocks, never fails but for -ENOMEM. */
int cache_obj_get(struct cache *c, const char *bucket, const char *key, struct cache_obj **out);
/* The object's metadata, known from the index (fresh: hit) or fetched from the backend (HEAD, or
 * revalidation when older than --revalidate-after; stale-if-error when the backend is down).
 * 0 with *@meta (valid until release) and *@how; -EAGAIN after @w->suspend(); or the backend's
 * error (-S3E_NO_SUCH_KEY, -S3E_NO_SUCH_BUCKET, -S3E_SERVICE_UNAVAILABLE, ...). */
int cache_obj_meta(struct cache_obj *o, struct cache_waiter *w, const struct be_meta **meta,
                   enum cache_outcome *how);
/* Before cache_obj_meta(): the request is a GET that reads from the object's first block (no
 * Range, or one from byte 0). A lookup it starts for a key not cached may then be a ranged GET
 * of that block whose answer brings the metadata and the first bytes at once (--cold-get). */
void cache_obj_reads_first(struct cache_obj *o);
/* When every byte of [@off, @off+@len) is on the SSD: 0 and a new O_RDONLY fd (caller owns it;
 * the bytes stay valid while it is open, even if evicted) positioned nowhere in particular: read
 * the object at file offset @off. Otherwise -EAGAIN (not suspended) after making sure the missing
 * blocks are being fetched; the caller then streams with cache_obj_read(). */
int cache_obj_open_range(struct cache_obj *o, uint64_t off, uint64_t len, int *fd);
/* cache_obj_open_range() for a GET: with --miss-source, a range not all present may also come
 * back 1 with *@fd open on the backend's own file (a local backend: the file the cache fills
 * from, checked against the version; object offset = file offset), or -EINPROGRESS after
 * @w->suspend() while the fill is still opening it (call again once resumed). */
int cache_obj_open_get(struct cache_obj *o, uint64_t off, uint64_t len, struct cache_waiter *w,
                       int *fd);
/* Copies up to @max bytes of the object at @pos into @buf. Returns >0, 0 at the end of the object,
 * -EAGAIN after @w->suspend() (bytes not there yet; fetch started, read-ahead too), or an error of
 * the fill (the response must then be cut short). Non-blocking. */
ssize_t cache_obj_read(struct cache_obj *o, uint64_t pos, void *buf, size_t max,
                       struct cache_waiter *w);
/* Disarms @w if it is still armed on @o (a client went away, the server stops). Must be called
 * before the waiter's memory is freed. 1 when it was armed: no resume() will come for its
 * suspend(), the caller owns the wake-up; 0 when it was not (resumed already, or never). */
int cache_obj_cancel_wait(struct cache_obj *o, struct cache_waiter *w);
void cache_obj_release(struct cache_obj *o);
/* @o's request was answered without reading a byte (HEAD, 304, 412, an empty range): if its
 * lookup made the version, the next request to fetch is the miss, not coalesced with it. What
 * cache_obj_release() does too, said early: the client may send its next request first. */
void cache_obj_fetch_none(struct cache_obj *o);
/* The response of @o went out whole: if it was read from the backend's file, the cache keeps
 * filling its range after @o is released (a client gone early stops the fill instead). */
void cache_obj_delivered(struct cache_obj *o);
/* The outcome so far, refined after cache_obj_meta(): cache_obj_open_range() finding every
 * byte present makes a guessed miss a hit; starting or joining a block fetch makes it a miss
 * or coalesced; bytes served from memory without caching make it a bypass. Counted in the
 * stats at release. */
enum cache_outcome cache_obj_outcome(struct cache_obj *o);
/* Pins (@on) or unpins the cached version of (@bucket, @key): a pinned entry is never evicted.
 * -ENOENT when nothing is cached for the key (warm: cache_obj_meta() first, then pin, then
 * read). May block briefly on one index write: call it from a worker. */
int cache_pin(struct cache *c, const char *bucket, const char *key, int on);

/* Uploads: a temp file inside the cache directory (same file system as the store, so a finished
 * upload can be adopted by rename). Creates it O_RDWR|O_CLOEXEC; *@fd and @path are the caller's
 * until cache_adopt() or unlink. */
int cache_stage_open(struct cache *c, int *fd, char path[4096]);
/* Room in the cache for the bytes of a staged file: grows the reservation *@held (0 at
 * first) to @total bytes, evicting least recently used entries as for a fetch. The reserved
 * bytes count in used_bytes and against --cache-size until cache_stage_release() or an adopt
 * takes them over. 0, -S3E_ENTITY_TOO_LARGE (@total is more than the whole cache) or
 * -S3E_SLOW_DOWN (nothing evictable: the rest is pinned, dirty, staged or being fetched; a
 * retry may fit). Blocking (eviction: index I/O). */
int cache_stage_reserve(struct cache *c, uint64_t *held, uint64_t total);
/* Whether a staged file of @total bytes could ever be held: 0, or -S3E_ENTITY_TOO_LARGE when
 * it is more than the whole cache. Reserves nothing. */
int cache_stage_fits(const struct cache *c, uint64_t total);
/* Gives *@held back (*@held = 0). NULL or 0: nothing. */
void cache_stage_release(struct cache *c, uint64_t *held);
/* Gives back @bytes of staged bytes counted by cache_stage_force() (at most what is staged). */
void cache_stage_drop(struct cache *c, uint64_t bytes);
/* Counts @bytes already on disk outside the index (write-back parts found at start, a part
 * whose body's reservation it takes over) as staged, whatever room is left. */
void cache_stage_force(struct cache *c, uint64_t bytes);
/* After the backend stored (@bucket, @key) with @meta: takes @path (a staged file of exactly
 * meta->size bytes, fsync'd by the caller) and makes it the cached version, replacing any older
 * one atomically for new readers (readers already streaming keep theirs). If it cannot be held
 * (capacity), the file is unlinked and the key only invalidated. Always consumes @path. */
int cache_adopt(struct cache *c, const char *bucket, const char *key, const char *path,
                const struct be_meta *meta);
/* cache_adopt() (@dirty 0) or cache_adopt_dirty() (@dirty 1) of a file whose bytes *@held
 * reserves (cache_stage_reserve()): when the file becomes the entry, the entry takes the
 * reservation over (*@held = 0), so a file as large as the cache can be adopted; otherwise
 * *@held is left to the caller to release. @held NULL: none. */
int cache_adopt_held(struct cache *c, const char *bucket, const char *key, const char *path,
                     const struct be_meta *meta, int dirty, uint64_t *held);
/* Forget (@bucket, @key) (a write that did not go through cache_adopt, an admin
 * invalidation). A dirty entry (write-back, not yet on the backend) is kept: -EBUSY. */
int cache_invalidate(struct cache *c, const char *bucket, const char *key);
/* Forget (@bucket, @key) even when dirty (DELETE, once the backend deleted it). */
int cache_forget(struct cache *c, const char *bucket, const char *key);
/* Forget every key of @bucket starting with @prefix (dirty ones are kept); *@n the number
 * looked at. */
int cache_invalidate_prefix(struct cache *c, const char *bucket, const char *prefix, uint64_t *n);

/* --- write-back: dirty entries and their journal ------------------------------------------
 * An object written in --write-mode back is adopted dirty: durable in the cache (data fsync'd,
 * the index row and its journal row committed in one LMDB transaction), served to readers at
 * once, never evicted nor revalidated, until the write-back engine (writeback/drain.c) has
 * uploaded it and marks it clean here. The cache keeps the journal; the engine reads it with
 * the calls below and hears of its changes through the hooks it attaches. */

/* cache_adopt() for write-back: @path (fsync'd by the caller) becomes the dirty version. 0,
 * -S3E_SLOW_DOWN when the capacity is all dirty or pinned, or an index/disk error. Always
 * consumes @path. */
int cache_adopt_dirty(struct cache *c, const char *bucket, const char *key, const char *path,
                      const struct be_meta *meta);

/* What the write-back engine hears from the cache. Called with no cache lock held, never
 * after cache_journal_detach() returned. */
struct cache_journal_ops {
    /* (@bucket, @key) was just indexed dirty at @version (@size bytes): the journal row is
     * committed. */
    void (*note)(void *cls, const char *bucket, const char *key, uint64_t version, uint64_t size);
    /* (@bucket, @key) is no longer dirty in the index (forgotten, or replaced by a clean
     * version). */
    void (*forget)(void *cls, const char *bucket, const char *key);
    /* cache_get_stats(): fills the write-back fields of @out (dirty_limit_bytes and
     * dirty_staged_bytes, drain_*). */
    void (*stats)(void *cls, struct cache_stats *out);
    void *cls;
};
/* Attaches the engine's hooks (@ops copied): one engine at a time. */
void cache_journal_attach(struct cache *c, const struct cache_journal_ops *ops);
/* Detaches them, waiting for hook calls in flight to return. While an engine is attached,
 * cache_close() leaves the cache allocated (an engine that could not stop still uses it). */
void cache_journal_detach(struct cache *c);
/* Calls @cb for every journal row (dirty entry): its name, version and size, until @cb
 * returns non-zero (the scan stops; 0 is returned). One read transaction: @cb must not call
 * the cache. 0 or the index's error. */
typedef int cache_journal_f(void *arg, const char *bucket, const char *key, uint64_t version,
                            uint64_t size);
int cache_journal_scan(struct cache *c, cache_journal_f *cb, void *arg);
/* The metadata of the indexed version of (@bucket, @key): 0 with *@meta, or -ENOENT. */
int cache_journal_get(struct cache *c, const char *bucket, const char *key, struct be_meta *meta);
/* Opens the data file of dirty @version of (@bucket, @key) for its upload: 0 with *@fd (the
 * caller's, O_RDONLY) and *@meta; -ESTALE when the key is gone, has another version or is not
 * dirty (overwritten or deleted meanwhile); or the open's error (@path names the file). */
int cache_journal_open(struct cache *c, const char *bucket, const char *key, uint64_t version,
                       int *fd, struct be_meta *meta, char path[4096]);
/* @version of (@bucket, @key) is on the backend: its journal row goes, the entry becomes
 * clean (evictable) and takes the backend's ETag/Last-Modified (@etag ""/NULL, @mtime_ns 0:
 * ours kept), in the index and in memory. 0, -ESTALE when it is gone, has another version or
 * is not dirty, or the index's error. */
int cache_journal_clean(struct cache *c, const char *bucket, const char *key, uint64_t version,
                        const char *etag, int64_t mtime_ns);
/* Unlinks the data files that the cache queued for unlinking (no lock held): the engine's
 * drainers do it after each upload. */
void cache_journal_unlinks(struct cache *c);

void cache_get_stats(struct cache *c, struct cache_stats *out);
/* Entries last validated before @ns (CLOCK_REALTIME) are checked with the backend before they
 * are served again, whatever --revalidate-after says (dirty ones excepted). Cluster mode sets
 * it at start (while this gateway was down, writes through the others could not reach it) and
 * when another gateway says it missed a notice (a resync). It only moves forward. */
void cache_set_valid_after(struct cache *c, int64_t ns);

/* --- eviction policies (cache/policy.c) -----------------------------------------------------
 * LRU for everything, except prefixes under "keep": for repeated passes over a data set
 * larger than the cache. A keep object, once cached, is not evicted to make room for objects
 * of a keep prefix (a miss that finds no other room is served uncached, a bypass), nor for
 * LRU objects while anything else can go; once its prefix has had no read for --keep-idle it
 * is evicted like an LRU object. Chosen per prefix by --keep-prefix/--lru-prefix, by
 * cache_policy_set(), or automatically (--keep-auto) when a prefix's misses are re-reads of
 * objects that LRU evicted. Pins, the cap and dirty bytes are as before. */
struct cache_pass {
    uint64_t reads, hits;                /* GETs, and those served whole from the SSD */
    uint64_t bytes, hit_bytes;           /* bytes they asked for, and those on the SSD */
    uint64_t objects, working_set_bytes; /* distinct objects read, and their sizes */
};
struct cache_prefix_row {
    char bucket[64];
    char prefix[448];
    const char *policy; /* "keep" | "lru" */
    const char *source; /* "config" | "admin" | "auto" (switched) | "default" (LRU, watched) */
    int keep_active;    /* keep, and read within --keep-idle: its objects are protected */
    double idle_s;      /* since its last request */
    uint64_t passes;    /* passes completed */
    int last_cut;       /* the last pass ended at POLICY_SEEN_MAX objects, not by a re-read */
    struct cache_pass last, cur;
    uint64_t misses, thrash; /* this pass: reads that fetched, and re-reads of evicted objects */
    uint64_t read_bytes, hit_bytes; /* since start */
    double ideal; /* min(1, available capacity / last.working_set_bytes); 0: no pass yet */
};
struct cache_policy_report {
    int auto_on;
    int64_t idle_ms;
    uint64_t available_bytes; /* capacity minus pinned and dirty bytes */
    struct cache_prefix_row *rows;
    size_t n;
};
/* 0 and *@out (release with cache_policy_report_free()), or -ENOMEM. */
int cache_policy_report(struct cache *c, struct cache_policy_report *out);
void cache_policy_report_free(struct cache_policy_report *r);
/* Checks --keep-prefix and --lru-prefix of @cf (what cache_open() would refuse): 0, or -EINVAL
 * with @em naming the entry. For `serve` to exit as on any bad option. */
int cache_policy_check(const struct conf *cf, struct errmsg *em);
/* Sets the policy of @bucket/@prefix: @mode "keep", "lru", or "auto" (drops the rule: LRU with
 * automatic detection). Kept in memory (config rules are the durable way). 0,
 * -S3E_INVALID_BUCKET_NAME or -EINVAL with @em. */
int cache_policy_set(struct cache *c, const char *bucket, const char *prefix, const char *mode,
                     struct errmsg *em);
/* Cache jobs queued or running on the workq (fills, lookups, background flushes): 0 when the
 * cache is idle. For tests and shutdown diagnostics. */
unsigned cache_busy(struct cache *c);

/* --- warm-up (cache/prefetch.c) ------------------------------------------------------------ */
/* Pinned entries may hold at most 1/CACHE_PIN_SHARE_DIV of the capacity. */
#define CACHE_PIN_SHARE_DIV 2
/* Blocking (worker threads only; the pool needs a free WORKQ_HIGH thread for the fills it waits
 * on): makes (@bucket, @key) fully cached, synced and indexed, without copying its bytes. *@how:
 * CACHE_HIT when it already was whole, CACHE_MISS when this call fetched some of it; *@bytes
 * its size. With @pin, pins it afterwards unless the pin share would be exceeded
 * (-S3E_INSUFFICIENT_STORAGE: cached but not pinned). When *@cancel becomes non-zero it returns
 * -ECANCELED within ~100 ms once the fetch run in flight (at most CACHE_FETCH_MAX_BLOCKS blocks)
 * has ended. Errors: the backend's (-S3E_NO_SUCH_KEY, -S3E_SERVICE_UNAVAILABLE, ...),
 * -S3E_INSUFFICIENT_STORAGE when nothing can be evicted to hold it. */
int cache_prefetch(struct cache *c, const char *bucket, const char *key, int pin,
                   enum cache_outcome *how, uint64_t *bytes, volatile int *cancel);
/* cache_prefetch() for a read plan (objects/plan.c), on any thread: its lookup (by GET of the
 * first block from a remote backend) and its runs go to the plans' own threads (--plan-requests),
 * never the workers, and it is written through the page cache (its reader comes soon).
 * -S3E_NOT_IMPLEMENTED with plans off. */
int cache_prefetch_plan(struct cache *c, const char *bucket, const char *key,
                        enum cache_outcome *how, uint64_t *bytes, volatile int *cancel);
/* The read plans (cache/plan.h), or NULL with --plan-requests 0. */
struct plans *cache_plans(struct cache *c);

/* Blocking (workers only): cache_obj_meta() of @n handles, their lookups in parallel (64 at a
 * time): @rcs[i] is its result and @metas[i] the metadata (valid until the handle's release). */
void cache_objs_meta_wait(struct cache_obj **objs, size_t n, const struct be_meta **metas,
                          int *rcs);
/* Blocking (workers only): the metadata of (@bucket, @key) as a HEAD through the cache sees it
 * (a dirty object included). 0 or the backend's error. */
int cache_head(struct cache *c, const char *bucket, const char *key, struct be_meta *meta);
/* Blocking (workers only), as cache_prefetch(): makes (@bucket, @key) whole in the cache and
 * opens it. 0 with *@fd (the caller's; -1 for an empty object, read it at offset 0..size) and
 * *@meta, or the backend's error. The write-back path's CopyObject/UploadPartCopy source. */
int cache_open_whole(struct cache *c, const char *bucket, const char *key, int *fd,
                     struct be_meta *meta);

/* --- members of tar shards (cache/members.c) ------------------------------------------------
 * A version's member index (lib/tar.h) is built once and kept in the LMDB index beside its
 * record, dropped with it (eviction, invalidation, a new version). */
struct cache_member {
    uint64_t data_off, size; /* the member's bytes: [data_off, data_off + size) of the shard */
    uint32_t pos;            /* rank in archive order */
    uint64_t archive_size;   /* the size the index was built for */
};
/* After cache_obj_meta(): looks @name up in the member index of @o's version (one LMDB read
 * transaction on the mapped blob, no copy; fit for an HTTP thread). 0 with *@out; -ENOENT: the
 * shard has no such member; -ENODATA: no index for this version yet (cache_obj_members_build
 * on a worker); -EBADMSG: the stored index is corrupt or not this archive's (rebuild). */
int cache_obj_member(struct cache_obj *o, const char *name, size_t name_len,
                     struct cache_member *out);
/* Blocking (workers only): builds the member index of @o's version, from the cached file when
 * the shard is whole, else by walking its tar headers through the cache (fetching and keeping
 * only the blocks the walk reads, and read-ahead), and stores it beside the version's record.
 * 0 with *@blob (malloc'd, the caller frees it; usable with cache_member_lookup() even when
 * the version could not keep it) and *@len; -S3E_INVALID_ARCHIVE (not a valid tar, truncated,
 * past the walker's caps; reason in @em); or the fetch's error. */
int cache_obj_members_build(struct cache_obj *o, void **blob, size_t *len, struct errmsg *em);
/* cache_obj_member() on a blob in hand. */
int cache_member_lookup(const void *blob, size_t len, const char *name, size_t name_len,
                        struct cache_member *out);
/* Counts member reads and batches (their items, and those that failed) in the stats. */
void cache_count_members(struct cache *c, uint64_t member_reads, uint64_t batches,
                         uint64_t batch_items, uint64_t batch_item_errors);

#endif
