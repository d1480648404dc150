/*
 * object.c: the writes of one object. A put and a copy are the write mode's (write_priv.h:
 * write_through.c or write_back.c); a delete is the same in both: the backend first, then the
 * cache (a dirty copy waits for the backend's answer, held off from draining meanwhile).
 */
#include <errno.h>
#include <unistd.h>

#include "backends/backend.h"
#include "cache/cache.h"
#include "lib/s3err.h"
#include "object.h"
#include "objects.h"
#include "write_priv.h"

int object_put(struct objects *o, const char *bucket, const char *key, int fd,
               const char *staged, uint64_t *space, struct be_meta *meta, int *staged_taken)
{
    *staged_taken = 0;
    if (fsync(fd) != 0)
        return -errno;
    return objects_write_for(o, bucket, key)
        ->put(o, bucket, key, fd, staged, space, meta, staged_taken);
}

int object_copy(struct objects *o, const char *src_bucket, const char *src_key,
                const char *bucket, const char *key, const struct be_meta *replace,
                const struct cond_hdrs *cond, struct be_meta *out)
{
    return objects_write_for(o, bucket, key)
        ->copy(o, src_bucket, src_key, bucket, key, replace, cond, out);
}

int object_delete(struct objects *o, const char *bucket, const char *key)
{
    drain_write_begin(o->dr, bucket, key); /* waits out an upload of it in flight */
    int rc = backend_del(o->be, bucket, key);
    if (rc == -S3E_NO_SUCH_KEY)
        rc = 0;
    if (!rc)
        cache_forget(o->cache, bucket, key);
    else
        cache_invalidate(o->cache, bucket, key); /* a dirty copy stays: it was not deleted */
    drain_write_end(o->dr, bucket, key);
    if (!rc)
        objects_changed(o, bucket, key, OBJECTS_CH_STORED);
    return rc;
}

int object_head(struct objects *o, const char *bucket, const char *key, struct be_meta *meta)
{
    return cache_head(o->cache, bucket, key, meta);
}
