/*
 * objects.c: the object layer's context: which write mode is on (parsed once from
 * --write-mode) and the admission of bodies against the dirty limit. The operations are in
 * object.c, listing.c, bucket.c and multipart.c.
 */
#include <errno.h>
#include <stdlib.h>

#include "cache/cache.h"
#include "objects.h"
#include "wb_mpu.h"

int objects_new(const struct conf *cf, struct backend *be, struct cache *c, struct warm *warm,
                struct objects **out)
{
    struct objects *o = calloc(1, sizeof(*o));
    if (!o)
        return -ENOMEM;
    o->magic = OBJECTS_MAGIC;
    o->cf = cf;
    o->be = be;
    o->cache = c;
    o->warm = warm;
    o->mode = (enum conf_write_mode)cf->write_mode;
    cache_dirty_hold(c, wb_mpu_staged_bytes(o)); /* write-back parts of a past run */
    *out = o;
    return 0;
}

void objects_free(struct objects *o)
{
    if (!o)
        return;
    o->magic = 0;
    free(o);
}

void objects_set_peer_ops(struct objects *o, const struct objects_peer_ops *ops)
{
    o->peer = *ops;
}

int objects_keep(const struct objects *o, const char *bucket, const char *key)
{
    return !o->peer.keep || o->peer.keep(o->peer.cls, bucket, key);
}

void objects_changed(const struct objects *o, const char *bucket, const char *key, int rewarm)
{
    if (o->peer.changed)
        o->peer.changed(o->peer.cls, bucket, key, rewarm);
}

int objects_write_back(const struct objects *o)
{
    return o->mode == CONF_WRITE_BACK;
}

int objects_admit(struct objects *o, uint64_t bytes, uint64_t *admitted)
{
    *admitted = 0;
    if (!objects_write_back(o))
        return 0;
    int rc = cache_dirty_admit(o->cache, bytes);
    if (!rc)
        *admitted = bytes;
    return rc;
}

int objects_admit_more(struct objects *o, uint64_t total, uint64_t *admitted)
{
    if (!objects_write_back(o))
        return 0;
    return cache_dirty_grow(o->cache, admitted, total);
}

void objects_unadmit(struct objects *o, uint64_t admitted)
{
    if (admitted)
        cache_dirty_unadmit(o->cache, admitted);
}
