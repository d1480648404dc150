/*
 * objects.c: the object layer's context: the write mode's implementation (write_priv.h),
 * picked once from --write-mode, and what the writes of both modes share. The operations are
 * in object.c, listing.c, bucket.c and multipart.c.
 */
#include <errno.h>
#include <stdlib.h>

#include "cache/cache.h"
#include "lib/s3err.h"
#include "objects.h"
#include "wb_mpu.h"
#include "write_priv.h"

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
    /* the one place the write mode is asked: everything else calls through o->write */
    o->write = cf->write_mode == CONF_WRITE_BACK ? &write_back_ops : &write_through_ops;
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

int objects_stage_direct(const struct objects *o)
{
    return o->write->stage_direct;
}

int objects_admit(struct objects *o, uint64_t bytes, uint64_t *admitted)
{
    return o->write->admit(o, bytes, admitted);
}

void objects_unadmit(struct objects *o, uint64_t admitted)
{
    if (admitted)
        cache_dirty_unadmit(o->cache, admitted);
}

int objects_copy_conditions(const struct cond_hdrs *cond, const struct be_meta *src)
{
    int rc = cond_check(cond, src->etag, src->mtime_ns / 1000000000ll, 1);
    return rc == -S3E_NOT_MODIFIED ? -S3E_PRECONDITION_FAILED : rc;
}
