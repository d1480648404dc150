/*
 * objects.h: the object layer's context (objects.c). S3 object semantics over the cache and
 * the backend live in this folder: reads go through the cache; writes (object.c: put, copy,
 * delete; multipart.c; bucket.c) and listings (listing.c, which merges keys written back but
 * not drained). The write mode is one implementation of one interface (write_priv.h), picked
 * once in objects_new(): write-through (write_through.c: the backend first, then the cache)
 * or write-back (write_back.c: durable in the cache, drained later). The handlers above parse
 * requests and answer; they never ask which mode is on, and nor does the rest of this folder.
 */
#ifndef S3C_OBJECTS_H
#define S3C_OBJECTS_H

#include <stdint.h>

#include "lib/conf.h"
#include "writeback/drain.h"

struct backend;
struct cache;
struct objects_write_ops;
struct warm;

/* One change the other gateways must hear of: (@bucket, @key) written or deleted (@key NULL:
 * the bucket deleted); @rewarm: the key's owner fetches the new version back (the gateway
 * that wrote it did not keep it); @stored: the change is on the backend (a write-through
 * write, a delete), newer than any dirty copy another gateway may hold, which it drops;
 * without it (a write-back write, a drain) the others drop only clean copies. */
struct objects_change {
    char *bucket, *key;
    int rewarm, stored;
};
#define OBJECTS_CH_REWARM 1 /* objects_changed() @how: the change's rewarm */
#define OBJECTS_CH_STORED 2 /* ... and its stored */

/* The changes one request made, told to the cluster in one notice once it is done (a
 * DeleteObjects of 1,000 keys is one notice to each gateway, not 1,000 waits). */
struct objects_notice {
    struct objects_change *ch;
    size_t n, cap;
};

typedef void objects_notified_f(void *cls);

/* Cluster mode (--peers): what the gateways acting as one cache need to hear from the write
 * path. Set once by the server before serving; absent, every gateway keeps what it wrote. */
struct objects_peer_ops {
    /* 1 when this gateway may keep a cached copy of (@bucket, @key): it owns the key on the
     * ring (or has no ring); 0 when another gateway does, which then caches it. */
    int (*keep)(void *cls, const char *bucket, const char *key);
    /* Starts telling every other gateway of the @n changes @ch (copied: one request each, all
     * at once, each bounded by the peer timeout) so that they forget their copies. Non-
     * blocking. @done(@done_cls) runs once, on another thread or before this returns, when
     * every gateway answered or could not be told. Returns 1 (started: @done will run) or 0
     * (nobody to tell: it will not). */
    int (*notify)(void *cls, const struct objects_change *ch, size_t n,
                  objects_notified_f *done, void *done_cls);
    void *cls;
};

struct objects {
    unsigned magic;
#define OBJECTS_MAGIC 0x0b1ec75a
    const struct conf *cf;
    struct backend *be;
    struct cache *cache;
    /* The write-back engine (writeback/drain.h), in either mode: write-through drains what a
     * past write-back run left dirty, and keeps its own writes of a key apart from that drain
     * (drain_write_begin()). Opened and closed here; the cache tells it of dirty versions. */
    struct drain *dr;
    struct warm *warm;         /* fetches written objects back into the cache (write-through) */
    const struct objects_write_ops *write; /* --write-mode's implementation, picked once */
    struct objects_peer_ops peer; /* cluster mode; all NULL otherwise */
};

/* The object layer over @be and @c (borrowed: they outlive it); @warm (borrowed, NULL: none)
 * fetches objects made on the backend back into the cache. Starts the write-back engine
 * (drain_open(): the dirty entries of the cache are drained from now on). Parts staged by a
 * past run in write-back count against the dirty limit from now on. 0, or an error with @em. */
int objects_new(const struct conf *cf, struct backend *be, struct cache *c, struct warm *warm,
                struct objects **out, struct errmsg *em);
/* Stops the write-back engine (drain_close(): when an upload outlives --shutdown-timeout, the
 * engine and the cache are left to the exiting process, cache_close() then returning at once)
 * and frees @o. 0, or -EBUSY when the engine was left running: its drainers may still call the
 * backend, which the caller must then not close. */
int objects_free(struct objects *o);
/* POST /_/flush: drain_flush_start() of the write-back engine (whatever the mode: a flush in
 * write-through waits for what a past write-back run left). */
int objects_flush_start(struct objects *o, const char *bucket, const char *prefix,
                        int64_t timeout_ms, drain_flush_cb cb, void *arg);
/* The server is stopping: drain_flush_abort(). */
void objects_flush_abort(struct objects *o);
/* Cluster mode: @ops (copied) from now on. Before serving. */
void objects_set_peer_ops(struct objects *o, const struct objects_peer_ops *ops);
/* Whether this gateway keeps a cached copy of what it writes to (@bucket, @key) (always but
 * in cluster mode, where only the key's owner does), and the write's notice to the cluster
 * (nothing outside cluster mode). */
int objects_keep(const struct objects *o, const char *bucket, const char *key);
/* The write path's notice of a change (nothing outside cluster mode): collected into this
 * thread's notice between objects_notice_begin() and _end(), else told at once, the caller
 * waiting (bounded by the peer timeout) before its client is answered. */
void objects_changed(const struct objects *o, const char *bucket, const char *key, int how);
/* Whether a large body staged for a write may be written around the page cache: the write
 * does not read it back at once (write-back: the drainer uploads it later), where write-through
 * sends it to the backend right away, from memory. Non-blocking. */
int objects_stage_direct(const struct objects *o);

/* From now on, on this thread, objects_changed() adds to @nt (zeroed here) instead of telling
 * the cluster; _end() stops that. A worker runs one request's job at a time: the job of a
 * write brackets its calls of the object layer, then sends the notice without waiting
 * (objects_notice_send), so no worker waits on a peer. */
void objects_notice_begin(struct objects_notice *nt);
void objects_notice_end(struct objects_notice *nt);
/* Starts telling the cluster of @nt's changes (the notify hook). 1: started, @done(@cls)
 * will run once when every gateway answered or could not be told; 0: nothing to tell or not
 * cluster mode (@done will not run). @nt may be freed as soon as this returns. */
int objects_notice_send(const struct objects *o, const struct objects_notice *nt,
                        objects_notified_f *done, void *cls);
void objects_notice_free(struct objects_notice *nt);

/* A body of @bytes is about to be received for a write: write-back reserves it against the
 * dirty limit (*@admitted = @bytes; give it back with objects_unadmit() once the write ended
 * either way), write-through reserves nothing (*@admitted = 0). 0, -S3E_SLOW_DOWN (limit
 * reached: the client retries), -S3E_ENTITY_TOO_LARGE (more than the limit). Non-blocking. */
int objects_admit(struct objects *o, uint64_t bytes, uint64_t *admitted);
/* objects_admit() of a body of unknown length as its bytes arrive: write-back grows the
 * reservation *@admitted to @total bytes of the dirty limit (unchanged on failure); same
 * answers, -S3E_ENTITY_TOO_LARGE once @total alone is over the limit. Non-blocking. */
int objects_admit_more(struct objects *o, uint64_t total, uint64_t *admitted);
void objects_unadmit(struct objects *o, uint64_t admitted);

#endif
