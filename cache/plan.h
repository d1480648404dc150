/*
 * plan.h: the read plans of training jobs (POST /_/plan, docs/plans.md). A plan is the keys one
 * rank of a job will GET from one bucket, in the order its sampler fixed (a key may come more
 * than once: the next epoch's order after this one's). This module keeps the plans and answers
 * three questions: where each plan's reader is (its GETs of planned keys move it), what to
 * prefetch next (bounded bytes and requests ahead of the reader, within the plan's share of the
 * cache) and which cached objects the plans need soon (eviction by next use: evict.c skips them
 * while anything else can go). Pure bookkeeping behind one mutex: no I/O, no other lock taken.
 * The prefetch threads that act on it are objects/plan.c's.
 */
#ifndef S3C_CACHE_PLAN_H
#define S3C_CACHE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "lib/buf.h"
#include "lib/s3c.h"

#define PLAN_MAX 64             /* plans held at once, all clients together */
#define PLAN_PER_OWNER 16       /* plans one access key may hold */
#define PLAN_KEYS_MAX 1000000   /* entries of one plan */
#define PLAN_KEYS_TOTAL 4000000 /* entries of all plans together (~100 bytes each) */
#define PLAN_NAME_MAX 128
#define PLAN_CACHE_SHARE_PCT 80 /* the plans' part of the cache, shared among them */

struct plans;

struct plans_conf {
    uint64_t cache_bytes;   /* the cache's capacity: the plans share PLAN_CACHE_SHARE_PCT of it */
    uint64_t ahead_bytes;   /* a plan's prefetched and in-flight bytes ahead of its reader */
    unsigned ahead_objects; /* and entries */
    unsigned requests;      /* prefetches in flight, all plans together */
    int64_t idle_ns;        /* a plan whose reader made no planned GET for this long is dropped */
};

int plans_new(const struct plans_conf *pc, struct plans **out);
/* Drops every plan. No ticket may be outstanding (the prefetch threads have stopped). */
void plans_free(struct plans *p);

/* A new plan. @keys (@n of them, each a valid key) and @sizes (NULL, or one per key: 0 for
 * unknown) are moved into the plan on success (the caller frees them otherwise). A plan of the
 * same @owner and @name is replaced (its prefetches in flight finish uncounted). 0 with the
 * plan's id in @id, -S3E_SLOW_DOWN when PLAN_MAX, PLAN_PER_OWNER or PLAN_KEYS_TOTAL would be
 * exceeded (with @why), -ENOMEM. */
int plans_put(struct plans *p, const char *owner, const char *name, const char *bucket, char **keys,
              uint64_t *sizes, size_t n, int64_t now_ns, char id[24], const char **why);
/* Cancels plan @id of @owner (NULL: an admin, any owner). 0 or -S3E_NOT_FOUND. */
int plans_cancel(struct plans *p, const char *owner, const char *id);
/* The plans of @owner (NULL: all), or only @id, as JSON into @b: {"plans":[...]} or one
 * plan's object. 0, -S3E_NOT_FOUND or -ENOMEM. */
int plans_json(struct plans *p, const char *owner, const char *id, struct buf *b);

/* What a planned GET carries from its start to its end. */
struct plan_tok {
    uint64_t seq; /* the plan's (0: the GET is in no plan) */
    int ahead;    /* its entry was prefetched or being prefetched when it came */
};
/* A GET of (@bucket, @key) by @owner starts: the first of @owner's plans of @bucket that holds
 * the key moves past its entry at or after the reader's position, unless an entry of the key
 * behind the position is nearer (a read that came late, out of order: counted as a re-read,
 * like a key only behind it). Fills @t. */
void plans_read(struct plans *p, const char *owner, const char *bucket, const char *key,
                int64_t now_ns, struct plan_tok *t);
/* That GET ended: @hit (answered from the cache), else @waited (it waited for a fetch another
 * request, a prefetch or not, had started) or a miss. */
void plans_read_done(struct plans *p, const struct plan_tok *t, int hit, int waited);

/* Whether a plan still needs the object of index name @name (index_key_make()): 1 with *@dist,
 * the entries from its reader's position to its next use (the least over the plans), else 0.
 * Eviction (evict.c) takes objects no plan needs first, then the one needed furthest ahead
 * (Belady's choice), and a fill whose own object is needed later still is not cached. */
int plans_next_use(struct plans *p, const void *name, size_t len, uint64_t *dist);

/* A prefetch to do: the plan and entry it came from, the object to fetch. */
struct plan_ticket {
    void *plan;
    size_t idx;
    const char *bucket, *key; /* the plan's, valid until plans_done() */
};
/* The next entry to prefetch, over all plans in turn: 1 and @t, or 0 when nothing may start
 * now (waits up to @wait_ms for that to change; plans_stop() ends the wait). Idle plans are
 * dropped here. */
int plans_take(struct plans *p, unsigned wait_ms, struct plan_ticket *t);
/* The prefetch of @t ended: 0 (its @size; @cached: it was cached already) or its error. */
void plans_done(struct plans *p, struct plan_ticket *t, int rc, uint64_t size, int cached);
/* Wakes every plans_take() for good (they return 0 at once from then on). */
void plans_stop(struct plans *p);

/* Totals for /_/stats and /_/metrics. */
struct plans_totals {
    uint64_t plans, entries, ahead_bytes, inflight;
    uint64_t reads, hits, misses, stalls, prefetched, prefetched_bytes, prefetch_errors;
};
void plans_totals(struct plans *p, struct plans_totals *t);

#endif
