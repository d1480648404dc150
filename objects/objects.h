/*
 * objects.h: the object layer's context (objects.c). S3 object semantics over the cache and
 * the backend live in this folder: reads go through the cache; writes (object.c: put, copy,
 * delete; multipart.c; bucket.c) and listings (listing.c, which merges keys written back but
 * not drained) decide here, once, between write-through (the backend first, then the cache)
 * and write-back (durable in the cache, drained later). The handlers above parse requests and
 * answer; they never ask which mode is on.
 */
#ifndef S3C_OBJECTS_H
#define S3C_OBJECTS_H

#include <stdint.h>

#include "lib/conf.h"

struct backend;
struct cache;
struct warm;

/* Cluster mode (--peers): what the gateways acting as one cache need to hear from the write
 * path. Set once by the server before serving; absent, every gateway keeps what it wrote. */
struct objects_peer_ops {
    /* 1 when this gateway may keep a cached copy of (@bucket, @key): it owns the key on the
     * ring (or has no ring); 0 when another gateway does, which then caches it. */
    int (*keep)(void *cls, const char *bucket, const char *key);
    /* (@bucket, @key) was written or deleted (@key NULL: the bucket was deleted), before the
     * client is answered: every other gateway forgets its copy. @rewarm: the owner fetches
     * the new version back (this gateway did not keep it). Blocking, bounded. */
    void (*changed)(void *cls, const char *bucket, const char *key, int rewarm);
    void *cls;
};

struct objects {
    unsigned magic;
#define OBJECTS_MAGIC 0x0b1ec75a
    const struct conf *cf;
    struct backend *be;
    struct cache *cache;
    struct warm *warm;         /* fetches written objects back into the cache (write-through) */
    enum conf_write_mode mode; /* --write-mode, parsed once */
    struct objects_peer_ops peer; /* cluster mode; all NULL otherwise */
};

/* The object layer over @be and @c (borrowed: they outlive it); @warm (borrowed, NULL: none)
 * fetches objects made on the backend back into the cache. Parts staged by a past run in
 * write-back count against the dirty limit from now on. 0 or -ENOMEM. */
int objects_new(const struct conf *cf, struct backend *be, struct cache *c, struct warm *warm,
                struct objects **out);
void objects_free(struct objects *o);
/* Cluster mode: @ops (copied) from now on. Before serving. */
void objects_set_peer_ops(struct objects *o, const struct objects_peer_ops *ops);
/* Whether this gateway keeps a cached copy of what it writes to (@bucket, @key) (always but
 * in cluster mode, where only the key's owner does), and the write's notice to the cluster
 * (nothing outside cluster mode). */
int objects_keep(const struct objects *o, const char *bucket, const char *key);
void objects_changed(const struct objects *o, const char *bucket, const char *key, int rewarm);
/* Whether writes are written back (durable in the cache, drained later). Non-blocking. */
int objects_write_back(const struct objects *o);

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
