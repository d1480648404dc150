/*
 * write_back.c: the write-back mode (write_priv.h). A write is answered once it is durable in
 * the cache directory as a dirty entry; the drainer (writeback/drain.c) uploads it later. Bodies
 * are reserved against the dirty limit as they arrive (objects_admit()) and written around
 * the page cache when large (objects_stage_direct()). Copies read their source through the
 * cache (it may exist nowhere else yet). Multipart uploads are staged in the cache directory
 * (wb_mpu.c); their parts count against the dirty limit until the upload ends, and a Complete's
 * result is adopted dirty.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "lib/checksum.h"
#include "lib/fileio.h"
#include "lib/s3err.h"
#include "multipart.h"
#include "objects.h"
#include "wb_mpu.h"
#include "write_priv.h"

static int write_back_admit(struct objects *o, uint64_t bytes, uint64_t *admitted)
{
    *admitted = 0;
    int rc = drain_admit(o->dr, bytes);
    if (!rc)
        *admitted = bytes;
    return rc;
}

/* A body of unknown length: the dirty limit's reservation grows to @total bytes. */
static int write_back_admit_more(struct objects *o, uint64_t total, uint64_t *admitted)
{
    return drain_grow(o->dr, admitted, total);
}

static int write_back_put(struct objects *o, const char *bucket, const char *key, int fd,
                          const char *staged, uint64_t *space, struct be_meta *meta,
                          int *staged_taken)
{
    if (!staged)
        return -S3E_INTERNAL;
    *staged_taken = 1; /* consumed either way */
    int rc = cache_adopt_held(o->cache, bucket, key, staged, meta, 1, space);
    if (!rc)
        objects_changed(o, bucket, key, 0);
    return rc;
}

static int write_back_copy(struct objects *o, const char *src_bucket, const char *src_key,
                           const char *bucket, const char *key, const struct be_meta *replace,
                           const struct cond_hdrs *cond, struct be_meta *out)
{
    struct be_meta src, m;
    char path[4096];
    int in = -1, fd = -1;
    uint64_t admitted = 0, space = 0;
    int rc = cache_open_whole(o->cache, src_bucket, src_key, &in, &src);
    if (!rc)
        rc = objects_copy_conditions(cond, &src);
    if (!rc && src.size > o->cf->max_object_size)
        rc = -S3E_ENTITY_TOO_LARGE;
    if (!rc && !(rc = drain_admit(o->dr, src.size)))
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
        drain_unadmit(o->dr, admitted);
    return rc;
}

static int write_back_mp_put_part(struct objects *o, const char *bucket, const char *key,
                                  const char *upload_id, int fd, const char *staged, int inplace,
                                  uint64_t *space, const struct be_part *part, int *staged_taken)
{
    int rc;
    if (inplace) {
        rc = wb_mpu_part_done_inplace(o, bucket, key, upload_id, part->number, part->etag, fd);
    } else {
        /* the staged part file (fsync'd) moves into the upload */
        if (!staged)
            return -S3E_INTERNAL;
        rc = fsync(fd)
                 ? -errno
                 : wb_mpu_put_part(o, bucket, key, upload_id, part->number, staged, part->etag);
        *staged_taken = !rc;
    }
    /* its bytes stay counted against the dirty limit and as staged bytes until the upload
     * completes or aborts: the hold replaces the body's reservation */
    if (!rc) {
        if (space)
            cache_stage_release(o->cache, space);
        drain_hold(o->dr, part->size);
    }
    return rc;
}

/* UploadPartCopy: the source range read from the cache into a staged part, hashed as it is
 * copied (the part's MD5 is its ETag). */
static int write_back_mp_copy_part(struct objects *o, const char *bucket, const char *key,
                                   const char *upload_id, unsigned number, const char *src_bucket,
                                   const char *src_key, int has_range, uint64_t src_off,
                                   uint64_t src_len, const struct cond_hdrs *cond,
                                   struct be_part *part)
{
    struct be_meta src;
    char path[4096];
    int in = -1, out = -1;
    int rc = cache_open_whole(o->cache, src_bucket, src_key, &in, &src);
    if (!rc)
        rc = objects_copy_conditions(cond, &src);
    uint64_t off = 0, len = src.size;
    if (!rc && has_range) {
        if (src_off >= src.size || src_off + src_len > src.size)
            rc = -S3E_INVALID_RANGE;
        off = src_off;
        len = src_len;
    }
    if (!rc && len > MULTIPART_PART_MAX)
        rc = -S3E_ENTITY_TOO_LARGE;
    if (!rc)
        rc = drain_admit(o->dr, len);
    if (rc)
        goto out;
    uint64_t space = 0; /* the staged part's room in the cache until the part holds it */
    if (!(rc = cache_stage_reserve(o->cache, &space, len)) &&
        !(rc = cache_stage_open(o->cache, &out, path))) {
        struct cksum *ck = NULL;
        struct cksum_result res;
        char *buf = malloc(1u << 20);
        uint64_t done = 0;
        if (!buf || (rc = cksum_new(CKSUM_WANT_MD5, CKSUM_NONE, &ck)))
            rc = rc ? rc : -ENOMEM;
        while (!rc && done < len) {
            ssize_t n = pread(in, buf, (size_t)S3C_MIN(len - done, (uint64_t)1 << 20),
                              (off_t)(off + done));
            if (n <= 0) {
                rc = n < 0 ? -errno : -EIO;
                break;
            }
            cksum_update(ck, buf, (size_t)n);
            if (write(out, buf, (size_t)n) != n)
                rc = -EIO;
            done += (uint64_t)n;
        }
        if (!rc) {
            cksum_final(ck, &res);
            snprintf(part->etag, sizeof(part->etag), "%s", res.md5_hex);
            part->number = number;
            part->size = len;
            part->mtime_ns = s3c_real_ns();
            rc = fsync(out) ? -errno
                            : wb_mpu_put_part(o, bucket, key, upload_id, number, path, part->etag);
        }
        cksum_free(ck);
        free(buf);
        close(out);
        if (rc)
            unlink(path);
        cache_stage_release(o->cache, &space);
        if (!rc)
            drain_hold(o->dr, len);
    }
    cache_stage_release(o->cache, &space);
    drain_unadmit(o->dr, len);
out:
    if (in >= 0)
        close(in);
    return rc;
}

/* Complete: staged parts -> one file (or the upload's data file itself) adopted dirty; the
 * upload then goes. wb_mpu_complete() checks --max-object-size before it writes anything. A
 * repeat of a Complete that ended is answered as the first. */
static int write_back_mp_complete(struct objects *o, const char *bucket, const char *key,
                                  const char *upload_id, const struct be_part *parts, size_t n,
                                  struct be_meta *out)
{
    char staged[4096];
    uint64_t held = 0;
    int seal = -1;
    int rc = wb_mpu_complete(o, bucket, key, upload_id, parts, n, out, staged, &held, &seal);
    if (rc == 1) /* a repeat: answered as the first time, nothing more to do */
        return 0;
    /* the parts' staged bytes (drain_hold()) become the object's */
    uint64_t cap = held;
    if (!rc)
        rc = cache_adopt_held(o->cache, bucket, key, staged, out, 1, &cap);
    if (!rc) {
        wb_mpu_finish(o, bucket, key, upload_id, parts, n, out, held);
        objects_changed(o, bucket, key, 0);
    }
    if (seal >= 0)
        close(seal); /* UploadPart may use the data file again: it is no longer the upload's */
    return rc;
}

const struct objects_write_ops write_back_ops = {
    .name = "back",
    .stage_direct = 1, /* the drainer reads it later: no use keeping it in the page cache */
    .admit = write_back_admit,
    .admit_more = write_back_admit_more,
    .put = write_back_put,
    .copy = write_back_copy,
    .mp_create = wb_mpu_create,
    .mp_part_target = wb_mpu_part_target,
    .mp_put_part = write_back_mp_put_part,
    .mp_copy_part = write_back_mp_copy_part,
    .mp_complete = write_back_mp_complete,
    .mp_abort = wb_mpu_abort,
    .mp_list_parts = wb_mpu_list_parts,
    .mp_list_uploads = wb_mpu_list_uploads,
};
