/*
 * park.h: the requests of the server, whether each is parked (its connection suspended while
 * it waits for a worker's job, the cache, a peer, its rate limit or a flush), and a watch over
 * them. Once a second the watch counts the parked ones and those parked longer than the bound
 * (--park-warn), and names in the log each that crosses it, so a request that is never woken
 * shows in /_/stats, /_/metrics and the log whatever the cause, instead of hiding. It wakes
 * nothing: a parked request is woken by what it waits for, or at shutdown by its owner
 * (http/req.c) through park_each().
 *   park_add (request made) -> [park_enter -> park_leave]* -> park_remove (request freed)
 * Cost on the serving path: a lock of the calling thread's own shard at add and remove (the
 * watch takes it once a second), two atomic stores per park and one per wake.
 */
#ifndef S3C_PARK_H
#define S3C_PARK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct stats;
struct park;
struct park_shard;

/* What a parked request waits for. */
enum park_why {
    PARK_NONE = 0,
    PARK_JOB,   /* a job on a worker (a write, a lookup of the object layer, ...) */
    PARK_CACHE, /* the cache: the key's lookup, or bytes of a fill */
    PARK_PEER,  /* another gateway's answer */
    PARK_RATE,  /* its key's rate limit */
    PARK_WAIT,  /* an admin wait (a flush) */
};

/* One request's place in the registry, embedded in it. The fields are the registry's. */
struct park_entry {
    struct park_entry *prev, *next;
    struct park_shard *shard;
    _Atomic uint64_t since_ns; /* parked since (monotonic), 0 when not parked */
    _Atomic int why;           /* enum park_why, while parked */
    uint64_t named_since;      /* the watch's: the parking it named */
};

/* Writes what identifies @e's request ("<id> GET /bucket/key") into @buf (@cap bytes, NUL
 * ended). Called with @e's shard locked: the request exists and is parked or was just. */
typedef void park_describe_f(const struct park_entry *e, char *buf, size_t cap);

/* A registry whose watch counts requests parked longer than @bound_ms (0: counts none, and
 * names none) into @st (stats_set_parked(); may be NULL) once a second, and logs each the
 * first time it crosses the bound, described by @describe. 0 or -errno. */
int park_new(uint64_t bound_ms, struct stats *st, park_describe_f *describe, struct park **out);
/* Stops the watch and frees the registry; every entry must have been removed. NULL is ok. */
void park_free(struct park *p);

/* @e's request exists (its first callback, on its HTTP thread): added to that thread's shard. */
void park_add(struct park *p, struct park_entry *e);
/* @e's request is about to be freed (on the same thread): removed, whatever its state. */
void park_remove(struct park_entry *e);

/* @e's request parks now, for @why; it leaves before it is woken (from any thread, before the
 * call that resumes its connection). */
void park_enter(struct park_entry *e, enum park_why why);
void park_leave(struct park_entry *e);

struct park_counts {
    unsigned parked;           /* parked now */
    unsigned over_bound;       /* of which longer than the bound */
    uint64_t over_bound_total; /* parkings that crossed the bound since the start */
    uint64_t bound_ms;
};
/* The figures of the watch's last pass, or computed now with @now set. */
void park_counts(struct park *p, int now, struct park_counts *out);

/* Calls @fn for every entry parked now, its shard locked (the request cannot be freed
 * meanwhile; @fn must not add or remove entries); @fn returns 1 for one it woke. The number
 * woken. */
unsigned park_each(struct park *p, int (*fn)(struct park_entry *e, void *cls), void *cls);

/* "a worker's job", "the cache (its lookup or fill)", ... */
const char *park_why_name(enum park_why why);

#endif
