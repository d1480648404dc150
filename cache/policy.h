/*
 * policy.h: the eviction policy of each prefix (private to cache/). Objects are grouped by
 * prefix: the longest --keep-prefix / --lru-prefix / admin rule their name starts with, else
 * their parent "directory" (bucket/a/b/ for bucket/a/b/c). A group runs under LRU or under
 * keep; eviction (evict.c) asks policy_keeps() of each candidate. The module also follows each
 * group's epoch-like passes (hit ratio, working set) and, with auto detection on, switches a
 * group to keep when its misses are re-reads of objects LRU evicted. Pure bookkeeping behind
 * one mutex: no I/O, no cache lock, time passed in by the caller (CLOCK_REALTIME ns, the
 * clock of the index's access times).
 * Names are index key bytes (index_key_make(): "bucket/key", long names truncated + digest).
 */
#ifndef S3C_CACHE_POLICY_H
#define S3C_CACHE_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"

struct errmsg;
struct policy;

#define POLICY_RULES_MAX 64      /* explicit rules (config and admin) */
#define POLICY_GROUPS_MAX 256    /* prefixes followed without a rule (parent directories) */
#define POLICY_THRASH_MIN 8      /* re-reads of evicted objects in a pass before a switch ... */
#define POLICY_THRASH_DIV 4      /* ... that are at least 1/4 of the pass's misses */
#define POLICY_SEEN_MAX (1u << 20) /* objects a pass follows; past it the pass is cut */

/* @keep, @lru: comma lists of BUCKET[/PREFIX] (NULL or "" for none). @auto_on: detect
 * thrashing groups. @idle_ms: a keep group with no read for this long protects nothing, and an
 * automatic one returns to LRU. 0 or -EINVAL/-ENOMEM with @em naming the bad entry. */
int policy_new(const char *keep, const char *lru, int auto_on, int64_t idle_ms, int64_t now_ns,
               struct policy **out, struct errmsg *em);
void policy_free(struct policy *p);

/* Whether the object named @name (index key bytes) is protected as keep now: its group runs
 * under keep and was read within the idle bound. With @since, also when its group's current
 * pass began (@now_ns if it has not): a keep fetch takes the place of no LRU object read since
 * then (the one-off reads beside a training set must not rotate it out). */
int policy_keeps(struct policy *p, const void *name, size_t len, int64_t now_ns,
                 int64_t *since);
/* A request for the object starts: its group is in use (not idle). */
void policy_touch(struct policy *p, const void *name, size_t len, int64_t now_ns);

struct policy_read {
    uint64_t size;      /* the object's size */
    uint64_t bytes;     /* bytes the read asked for */
    uint64_t hit_bytes; /* of those, bytes in blocks present on the SSD when it began */
    int fetched;        /* it needed the backend (miss, coalesced or bypass) */
};
/* A GET of the object ended: counts it in its group's pass (a pass ends when an object it read
 * is read again after more than half of the pass's objects), and a fetched one that LRU had
 * evicted as thrash (which may switch an automatic group to keep). */
void policy_read(struct policy *p, const void *name, size_t len, const struct policy_read *r,
                 int64_t now_ns);
/* Eviction took the object: remembered (bounded, lossy) so that a re-read counts as thrash. */
void policy_evicted(struct policy *p, const void *name, size_t len);

/* The admin call: @mode "keep" or "lru" sets a rule for @bucket/@prefix, "auto" removes it.
 * 0, -S3E_INVALID_BUCKET_NAME, or -EINVAL (@em says why). */
int policy_set(struct policy *p, const char *bucket, const char *prefix, const char *mode,
               int64_t now_ns, struct errmsg *em);
/* Changes with every switch of a group's policy (rules set, automatic switches and reverts):
 * what eviction found protected may have become evictable. */
uint64_t policy_gen(struct policy *p);
int policy_auto(const struct policy *p);
int64_t policy_idle_ms(const struct policy *p);

/* One row per group (rules first, then the others by most recent read); ideal left 0 for the
 * caller. 0 and *@rows (free()) / *@n, or -ENOMEM. */
int policy_report(struct policy *p, int64_t now_ns, struct cache_prefix_row **rows, size_t *n);

#endif
