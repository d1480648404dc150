/*
 * write_through.c: the write-through mode (write_priv.h). Every write goes to the backend
 * first and is answered once the backend has it; then the cache adopts the staged bytes
 * (read-after-write holds) or forgets the key, and objects made on the backend (a copy, a
 * completed multipart upload) are fetched back by a warm-up. A dirty copy of the key (from a
 * past write-back run) is not drained meanwhile (drain_write_begin()). Nothing is reserved
 * against the dirty limit.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/mpu.h"
#include "cache/cache.h"
#include "lib/s3err.h"
#include "multipart.h"
#include "objects.h"
#include "warm.h"
#include "write_priv.h"

static int write_through_admit(struct objects *o, uint64_t bytes, uint64_t *admitted)
{
    (void)o;
    (void)bytes;
    *admitted = 0;
    return 0;
}

/* Write-through reserves nothing of the dirty limit, for bodies of unknown length either. */
static int write_through_admit_more(struct objects *o, uint64_t total, uint64_t *admitted)
{
    (void)o;
    (void)total;
    (void)admitted;
    return 0;
}

static int write_through_put(struct objects *o, const char *bucket, const char *key, int fd,
                             const char *staged, uint64_t *space, struct be_meta *meta,
                             int *staged_taken)
{
    drain_write_begin(o->dr, bucket, key); /* no drain of an older dirty copy */
    int rc = backend_put(o->be, bucket, key, fd, meta->size, meta);
    if (rc) {
        cache_invalidate(o->cache, bucket, key);
        drain_write_end(o->dr, bucket, key);
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
    drain_write_end(o->dr, bucket, key);
    objects_changed(o, bucket, key, OBJECTS_CH_STORED | (keep ? 0 : OBJECTS_CH_REWARM));
    return 0;
}

/* After the backend made (@rc 0) or failed to make (@rc) (@bucket, @key) of @size bytes under
 * drain_write_begin(): the cache forgets its copy (the backend's object is newer), or
 * invalidates it on failure (a dirty copy stays: it was not replaced). A fresh object stays in
 * the cache in both modes, fetched back in the background (a warm-up job; a GET before it ends
 * joins its fill; in cluster mode the owner's). Best effort: the write succeeded either way.
 * Returns @rc. */
static int write_through_made(struct objects *o, const char *bucket, const char *key, int rc,
                              uint64_t size)
{
    if (rc)
        cache_invalidate(o->cache, bucket, key);
    else
        cache_forget(o->cache, bucket, key);
    drain_write_end(o->dr, bucket, key);
    if (rc)
        return rc;
    int keep = objects_keep(o, bucket, key);
    objects_changed(o, bucket, key, OBJECTS_CH_STORED | (!keep && size ? OBJECTS_CH_REWARM : 0));
    if (size && o->warm && keep)
        (void)warm_object(o->warm, bucket, key);
    return 0;
}

static int write_through_copy(struct objects *o, const char *src_bucket, const char *src_key,
                              const char *bucket, const char *key, const struct be_meta *replace,
                              const struct cond_hdrs *cond, struct be_meta *out)
{
    struct be_meta src;
    int rc = backend_head(o->be, src_bucket, src_key, &src);
    if (rc == -S3E_NO_SUCH_BUCKET || rc == -S3E_NO_SUCH_KEY)
        return rc;
    if (!rc)
        rc = objects_copy_conditions(cond, &src);
    if (!rc && src.size > o->cf->max_object_size)
        rc = -S3E_ENTITY_TOO_LARGE;
    if (rc)
        return rc;
    drain_write_begin(o->dr, bucket, key);
    rc = backend_copy(o->be, src_bucket, src_key, bucket, key, replace, out);
    return write_through_made(o, bucket, key, rc, src.size);
}

static int write_through_mp_create(struct objects *o, const char *bucket, const char *key,
                                   const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX])
{
    return backend_mp_create(o->be, bucket, key, meta, upload_id);
}

/* Parts go to a staged file of their own, then to the backend. */
static int write_through_mp_part_target(struct objects *o, const char *bucket, const char *key,
                                        const char *upload_id, unsigned number, uint64_t size,
                                        int *fd, uint64_t *off)
{
    return 0;
}

static int write_through_mp_put_part(struct objects *o, const char *bucket, const char *key,
                                     const char *upload_id, int fd, const char *staged, int inplace,
                                     uint64_t *space, const struct be_part *part, int *staged_taken)
{
    return backend_mp_put_part(o->be, bucket, key, upload_id, fd, part);
}

static int write_through_mp_copy_part(struct objects *o, const char *bucket, const char *key,
                                      const char *upload_id, unsigned number,
                                      const char *src_bucket, const char *src_key, int has_range,
                                      uint64_t src_off, uint64_t src_len,
                                      const struct cond_hdrs *cond, struct be_part *out)
{
    struct be_meta src;
    int rc = backend_head(o->be, src_bucket, src_key, &src);
    if (!rc)
        rc = objects_copy_conditions(cond, &src);
    if (rc)
        return rc;
    uint64_t off = 0, len = src.size;
    if (has_range) {
        if (src_off >= src.size || src_len > src.size - src_off)
            return -S3E_INVALID_RANGE;
        off = src_off;
        len = src_len;
    }
    if (len > MULTIPART_PART_MAX)
        return -S3E_ENTITY_TOO_LARGE;
    return backend_mp_copy_part(o->be, bucket, key, upload_id, number, src_bucket, src_key, off,
                                len, out);
}

/* Complete, before the backend makes the object: -S3E_ENTITY_TOO_LARGE when the parts @parts
 * (ascending, from the request) add up to more than --max-object-size, as the backend lists
 * them. A part not listed, or listed with another ETag, is -S3E_INVALID_PART (what the backend
 * would answer), so that a part re-uploaded meanwhile cannot grow the object past the check. 0
 * when they fit, and when the check cannot apply: parts out of order or an upload the backend
 * no longer lists (it answers those itself: InvalidPartOrder, NoSuchUpload or a repeated
 * Complete's result). Other errors: the backend's. */
static int write_through_size_check(struct objects *o, const char *bucket, const char *key,
                                    const char *upload_id, const struct be_part *parts, size_t n)
{
    uint64_t max = o->cf->max_object_size, total = 0;
    if ((uint64_t)n * MULTIPART_PART_MAX <= max)
        return 0; /* no parts that S3 allows can exceed it */
    for (size_t i = 1; i < n; i++)
        if (parts[i].number <= parts[i - 1].number)
            return 0;
    unsigned marker = 0;
    size_t i = 0;
    int truncated = 1, rc = 0;
    while (!rc && i < n && truncated) {
        struct be_part *got = NULL;
        size_t ng = 0;
        rc = backend_mp_list_parts(o->be, bucket, key, upload_id, marker, 1000, &got, &ng,
                                   &truncated);
        if (rc == -S3E_NO_SUCH_UPLOAD || rc == -S3E_NOT_IMPLEMENTED)
            return 0;
        for (size_t j = 0; !rc && j < ng && i < n; j++) {
            if (got[j].number < parts[i].number)
                continue;
            if (got[j].number > parts[i].number || !mpu_etag_match(parts[i].etag, got[j].etag))
                rc = -S3E_INVALID_PART;
            else if ((total += got[j].size) > max)
                rc = -S3E_ENTITY_TOO_LARGE;
            i++;
        }
        if (ng)
            marker = got[ng - 1].number;
        else
            truncated = 0;
        free(got);
    }
    return rc ? rc : i < n ? -S3E_INVALID_PART : 0;
}

static int write_through_mp_complete(struct objects *o, const char *bucket, const char *key,
                                     const char *upload_id, const struct be_part *parts, size_t n,
                                     struct be_meta *out)
{
    /* Nothing may be made that is over the limit: checked first, the upload stays as it was
     * (it can be completed with fewer parts, listed or aborted). */
    int rc = write_through_size_check(o, bucket, key, upload_id, parts, n);
    if (rc)
        return rc;
    drain_write_begin(o->dr, bucket, key);
    rc = backend_mp_complete(o->be, bucket, key, upload_id, parts, n, out);
    if (!rc && out->size > o->cf->max_object_size)
        rc = -S3E_ENTITY_TOO_LARGE; /* a check skipped above (backend without ListParts) */
    /* the parts went to the backend one by one: the object is fetched back */
    return write_through_made(o, bucket, key, rc, rc ? 0 : out->size);
}

static int write_through_mp_abort(struct objects *o, const char *bucket, const char *key,
                                  const char *upload_id)
{
    return backend_mp_abort(o->be, bucket, key, upload_id);
}

static int write_through_mp_list_parts(struct objects *o, const char *bucket, const char *key,
                                       const char *upload_id, unsigned marker, unsigned max,
                                       struct be_part **out, size_t *n, int *truncated)
{
    return backend_mp_list_parts(o->be, bucket, key, upload_id, marker, max, out, n, truncated);
}

static int write_through_mp_list_uploads(struct objects *o, const char *bucket, const char *prefix,
                                         const char *key_marker, const char *id_marker,
                                         unsigned max, struct be_upload **out, size_t *n,
                                         int *truncated)
{
    return backend_mp_list_uploads(o->be, bucket, prefix, key_marker, id_marker, max, out, n,
                                   truncated);
}

const struct objects_write_ops write_through_ops = {
    .name = "through",
    .stage_direct = 0, /* the backend reads the staged body at once: it stays in memory */
    .admit = write_through_admit,
    .admit_more = write_through_admit_more,
    .put = write_through_put,
    .copy = write_through_copy,
    .mp_create = write_through_mp_create,
    .mp_part_target = write_through_mp_part_target,
    .mp_put_part = write_through_mp_put_part,
    .mp_copy_part = write_through_mp_copy_part,
    .mp_complete = write_through_mp_complete,
    .mp_abort = write_through_mp_abort,
    .mp_list_parts = write_through_mp_list_parts,
    .mp_list_uploads = write_through_mp_list_uploads,
};
