/*
 * index.h: the cache index (private to cache/). One LMDB environment under
 * CACHE_DIR/index with three tables: objects (name key -> record: version,
 * metadata, block bitmap, access time, flags), lru (be64 atime + name key ->
 * version, entries neither pinned nor dirty), dirty (name key -> version: the write-back
 * journal) and totals (used bytes, objects, pins, dirty).
 * Every call is one transaction; nothing here blocks on anything but LMDB.
 */
#ifndef S3C_CACHE_INDEX_H
#define S3C_CACHE_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include "backends/backend.h"

struct index;

/* An LMDB key for (bucket, key): "bucket/key", or for long names its first bytes, a NUL and
 * the SHA-256 of the whole name. Byte order of short keys is name order (prefix scans). */
#define INDEX_KEY_MAX 480
#define INDEX_KEY_PLAIN_MAX 440
struct index_key {
    size_t len;
    unsigned char b[INDEX_KEY_MAX];
};
void index_key_make(const char *bucket, const char *key, struct index_key *out);

#define INDEX_F_PINNED 0x1u
#define INDEX_F_DIRTY 0x2u  /* write-back: not yet on the backend; never evicted, never revalidated */
#define INDEX_ACCT_ROUND 4096u /* block bytes are accounted rounded up to this */

struct index_entry {
    uint64_t version;     /* names the data file; never 0 */
    uint64_t size;        /* == meta.size */
    uint64_t used_bytes;  /* accounted bytes of present blocks */
    uint32_t block_size;
    uint32_t flags;       /* INDEX_F_* */
    int64_t atime_ns;     /* last access, CLOCK_REALTIME */
    int64_t validated_ns; /* last time the backend confirmed (or provided) the metadata */
    uint64_t nblocks;
    uint8_t *bitmap;      /* malloc'd (nblocks + 7) / 8 bytes, or NULL when nblocks == 0 */
    struct be_meta meta;
};
void index_entry_clear(struct index_entry *e); /* frees the bitmap */
uint64_t index_block_bytes(uint64_t size, uint32_t block_size, uint64_t block); /* exact */
uint64_t index_acct(uint64_t bytes);                                            /* rounded */

struct index_totals {
    uint64_t used_bytes, objects, pinned_objects, pinned_bytes;
    uint64_t dirty_objects, dirty_bytes; /* dirty_bytes: object sizes */
};

/* Calls may run on any threads at once. When LMDB's environment reaches its fatal state
 * (MDB_PANIC, after a failed meta page write: the write that failed returns -EIO), a later
 * call closes and reopens it as a restart would, once no other call is inside it; until then
 * calls fail with -EIO. */
int index_open(const char *dir, struct index **out, struct errmsg *em);
void index_close(struct index *ix);
/* How many times the environment was reopened after MDB_PANIC. */
uint64_t index_reopens(struct index *ix);
/* Bulk loads (tools): @on = 0 stops syncing each commit; @on = 1 syncs and restores it. */
int index_set_sync(struct index *ix, int on);

/* 0 and a copy in *@out (caller clears), or -ENOENT. @name (optional, NAME_MAX 1100+) gets the
 * full "bucket/key" name. */
int index_get(struct index *ix, const struct index_key *k, struct index_entry *out);
/* Stores @e under @k with @name (bucket/key), replacing any record. *@old_version: the version
 * replaced (0 if none). *@delta_used: change of the used total. */
int index_put(struct index *ix, const struct index_key *k, const char *name,
              const struct index_entry *e, uint64_t *old_version, int64_t *delta_used);
/* index_put() of a record for a key that has none: -EEXIST (nothing written) if one appeared
 * meanwhile. */
int index_put_new(struct index *ix, const struct index_key *k, const char *name,
                  const struct index_entry *e, int64_t *delta_used);
/* Marks blocks [@first, @first+@n) of @version present. -ESTALE if the record is gone or has
 * another version. *@delta_used: newly accounted bytes. */
int index_mark(struct index *ix, const struct index_key *k, uint64_t version, uint64_t first,
               uint64_t n, int64_t *delta_used);
/* Deletes the record if it has @version (-ESTALE otherwise). *@delta_used <= 0. */
int index_del(struct index *ix, const struct index_key *k, uint64_t version, int64_t *delta_used);
/* Pin or unpin @version. -ESTALE if not that version. */
int index_set_pinned(struct index *ix, const struct index_key *k, uint64_t version, int on);

struct index_touch {
    struct index_key k;
    uint64_t version;
    int64_t atime_ns;
    int64_t validated_ns; /* 0: unchanged */
};
/* Applies access-time (and validation-time) updates in one transaction; entries whose
 * version no longer matches are skipped. */
int index_touch(struct index *ix, const struct index_touch *t, size_t n);

/* Calls @cb for unpinned entries, least recently used first (@atime_ns ascending), until it
 * returns non-zero (that value is returned) or the table ends (0). One read transaction: @cb
 * must not call index functions that write. */
typedef int index_lru_f(void *arg, const struct index_key *k, uint64_t version, uint64_t used,
                        int64_t atime_ns);
int index_lru_scan(struct index *ix, index_lru_f *cb, void *arg);

/* Calls @cb for every record whose name starts with @name_prefix ("bucket/prefix"). */
typedef int index_scan_f(void *arg, const struct index_key *k, const char *name,
                         uint64_t version);
int index_prefix_scan(struct index *ix, const char *name_prefix, index_scan_f *cb, void *arg);

/* Write-back: @version of @k reached the backend. Clears INDEX_F_DIRTY (the entry becomes
 * evictable), records the backend's ETag and Last-Modified (@etag NULL/"" and @mtime_ns 0 keep
 * ours) so that later revalidation sees the same object. -ESTALE when @k is gone, has another
 * version or is not dirty (overwritten or deleted meanwhile). */
int index_clean(struct index *ix, const struct index_key *k, uint64_t version,
                const char *etag, int64_t mtime_ns);
/* Calls @cb for every dirty entry (the dirty table; no scan of the objects table), @e without
 * its bitmap. One read transaction: @cb must not write the index. */
typedef int index_dirty_f(void *arg, const struct index_key *k, const char *name,
                          const struct index_entry *e);
int index_dirty_scan(struct index *ix, index_dirty_f *cb, void *arg);

int index_totals(struct index *ix, struct index_totals *out);

/* The member index of a tar archive (lib/tar.h's blob), one per version, in the members table
 * keyed by the record's key and @version. It goes with its record: deleting or replacing the
 * record (eviction, invalidation, a new version) deletes it in the same transaction. */
/* Stores @blob for @version of @k: -ESTALE when the record is gone or has another version. */
int index_members_put(struct index *ix, const struct index_key *k, uint64_t version,
                      const void *blob, size_t len);
/* Calls @cb(@arg, blob, len) inside a read transaction (the blob is LMDB's mapped page, valid
 * only during the call; no copy) and returns what it returns, or -ENOENT when none is stored. */
typedef int index_members_f(void *arg, const void *blob, size_t len);
int index_members_get(struct index *ix, const struct index_key *k, uint64_t version,
                      index_members_f *cb, void *arg);

#endif
