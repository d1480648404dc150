/*
 * object.c: the writes of one object, in the write mode of the object layer. Write-through:
 * the backend first, then the cache adopts the staged bytes (read-after-write holds) or
 * forgets the key; a dirty copy of the key is not drained meanwhile (cache_write_begin()).
 * Write-back: the bytes become a dirty cache entry the drainer uploads later.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "cache/cache.h"
#include "lib/fileio.h"
#include "lib/s3err.h"
#include "object.h"
#include "objects.h"
#include "warm.h"

int object_put(struct objects *o, const char *bucket, const char *key, int fd,
               const char *staged, uint64_t *space, struct be_meta *meta, int *staged_taken)
{
    *staged_taken = 0;
    if (fsync(fd) != 0)
        return -errno;
    if (objects_write_back(o)) {
        if (!staged)
            return -S3E_INTERNAL;
        *staged_taken = 1; /* consumed either way */
        int wrc = cache_adopt_held(o->cache, bucket, key, staged, meta, 1, space);
        if (!wrc)
            objects_changed(o, bucket, key, 0);
        return wrc;
    }
    cache_write_begin(o->cache, bucket, key); /* no drain of an older dirty copy */
    int rc = backend_put(o->be, bucket, key, fd, meta->size, meta);
    if (rc) {
        cache_invalidate(o->cache, bucket, key);
        cache_write_end(o->cache, bucket, key);
        return rc;
    }
    /* The backend's own view (Last-Modified, and the ETag an S3 upstream gives a large PUT it
     * split into parts) is what later revalidation compares with, and what we answer. */
    struct be_meta stored;
    if (backend_head(o->be, bucket, key, &stored) == 0 && stored.size == meta->size) {
        meta->mtime_ns = stored.mtime_ns;
        memcpy(meta->etag, stored.etag, sizeof(meta->etag));
    }
    int keep = objects_keep(o, bucket, key);
    if (staged && keep) {
        cache_adopt_held(o->cache, bucket, key, staged, meta, 0, space);
        *staged_taken = 1;
    } else {
        cache_forget(o->cache, bucket, key); /* cluster mode: the owner caches it */
    }
    cache_write_end(o->cache, bucket, key);
    objects_changed(o, bucket, key, !keep);
    return 0;
}

/* The copy source's x-amz-copy-source-if-* conditions, judged as for a GET (so that an
 * if-modified-since is judged at all), a "not modified" being a failed precondition here. */
static int object_copy_conditions(const struct cond_hdrs *cond, const struct be_meta *src)
{
    int rc = cond_check(cond, src->etag, src->mtime_ns / 1000000000ll, 1);
    return rc == -S3E_NOT_MODIFIED ? -S3E_PRECONDITION_FAILED : rc;
}

/* Write-back CopyObject: the source is read from the cache (it may exist nowhere else yet),
 * the copy becomes a dirty entry. */
static int object_copy_write_back(struct objects *o, const char *src_bucket, const char *src_key,
                                  const char *bucket, const char *key,
                                  const struct be_meta *replace, const struct cond_hdrs *cond,
                                  struct be_meta *out)
{
    struct be_meta src, m;
    char path[4096];
    int in = -1, fd = -1;
    uint64_t admitted = 0, space = 0;
    int rc = cache_open_whole(o->cache, src_bucket, src_key, &in, &src);
    if (!rc)
        rc = object_copy_conditions(cond, &src);
    if (!rc && src.size > o->cf->max_object_size)
        rc = -S3E_ENTITY_TOO_LARGE;
    if (!rc && !(rc = cache_dirty_admit(o->cache, src.size)))
        admitted = src.size;
    if (!rc) /* the staged copy's room in the cache, the new entry's once adopted */
        rc = cache_stage_reserve(o->cache, &space, src.size);
    if (!rc)
        rc = cache_stage_open(o->cache, &fd, path);
    if (rc)
        goto out;
    if (src.size)
        rc = fileio_copy_range(in, 0, fd, 0, src.size);
    if (!rc && fsync(fd) != 0)
        rc = -errno;
    close(fd);
    if (rc) {
        unlink(path);
        goto out;
    }
    m = src;
    if (replace) {
        m = *replace;
        m.size = src.size;
        memcpy(m.etag, src.etag, sizeof(m.etag));
        m.parts_count = src.parts_count;
        m.part_size = src.part_size;
        memcpy(m.checksum_algo, src.checksum_algo, sizeof(m.checksum_algo));
        memcpy(m.checksum, src.checksum, sizeof(m.checksum));
    }
    m.mtime_ns = s3c_real_ns();
    rc = cache_adopt_held(o->cache, bucket, key, path, &m, 1, &space);
    if (!rc) {
        *out = m;
        objects_changed(o, bucket, key, 0);
    }
out:
    cache_stage_release(o->cache, &space);
    if (in >= 0)
        close(in);
    if (admitted)
        cache_dirty_unadmit(o->cache, admitted);
    return rc;
}

int object_copy(struct objects *o, const char *src_bucket, const char *src_key,
                const char *bucket, const char *key, const struct be_meta *replace,
                const struct cond_hdrs *cond, struct be_meta *out)
{
    struct be_meta src;
    if (objects_write_back(o))
        return object_copy_write_back(o, src_bucket, src_key, bucket, key, replace, cond, out);
    int rc = backend_head(o->be, src_bucket, src_key, &src);
    if (rc == -S3E_NO_SUCH_BUCKET || rc == -S3E_NO_SUCH_KEY)
        return rc;
    if (!rc)
        rc = object_copy_conditions(cond, &src);
    if (!rc && src.size > o->cf->max_object_size)
        rc = -S3E_ENTITY_TOO_LARGE;
    if (rc)
        return rc;
    cache_write_begin(o->cache, bucket, key);
    rc = backend_copy(o->be, src_bucket, src_key, bucket, key, replace, out);
    if (rc)
        cache_invalidate(o->cache, bucket, key);
    else
        cache_forget(o->cache, bucket, key); /* the backend's copy is newer */
    cache_write_end(o->cache, bucket, key);
    if (rc)
        return rc;
    /* a fresh object stays in the cache in both modes: fetched back in the background (in
     * cluster mode by its owner) */
    int keep = objects_keep(o, bucket, key);
    objects_changed(o, bucket, key, !keep && src.size);
    if (src.size && o->warm && keep)
        (void)warm_object(o->warm, bucket, key);
    return 0;
}

int object_delete(struct objects *o, const char *bucket, const char *key)
{
    cache_write_begin(o->cache, bucket, key); /* waits out an upload of it in flight */
    int rc = backend_del(o->be, bucket, key);
    if (rc == -S3E_NO_SUCH_KEY)
        rc = 0;
    if (!rc)
        cache_forget(o->cache, bucket, key);
    else
        cache_invalidate(o->cache, bucket, key); /* a dirty copy stays: it was not deleted */
    cache_write_end(o->cache, bucket, key);
    if (!rc)
        objects_changed(o, bucket, key, 0);
    return rc;
}

int object_head(struct objects *o, const char *bucket, const char *key, struct be_meta *meta)
{
    return cache_head(o->cache, bucket, key, meta);
}
