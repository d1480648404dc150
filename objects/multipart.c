/*
 * multipart.c: multipart uploads in the write mode of the object layer. Write-through: every
 * call goes to the backend; a Complete is checked against --max-object-size before the backend
 * makes anything, then the cache forgets the key and a warm-up fetches the new object back.
 * Write-back: uploads are staged in the cache directory (wb_mpu.c), parts count against the
 * dirty limit until the upload ends, and a Complete's result is adopted dirty. Listings of
 * uploads roll up under a delimiter here, over either store.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/mpu.h"
#include "cache/cache.h"
#include "lib/arr.h"
#include "lib/checksum.h"
#include "lib/s3err.h"
#include "multipart.h"
#include "objects.h"
#include "warm.h"
#include "wb_mpu.h"

int multipart_create(struct objects *o, const char *bucket, const char *key,
                     const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX])
{
    if (objects_write_back(o))
        return wb_mpu_create(o, bucket, key, meta, upload_id);
    return backend_mp_create(o->be, bucket, key, meta, upload_id);
}

int multipart_part_target(struct objects *o, const char *bucket, const char *key,
                          const char *upload_id, unsigned number, uint64_t size, int *fd,
                          uint64_t *off)
{
    if (!objects_write_back(o))
        return 0;
    return wb_mpu_part_target(o, bucket, key, upload_id, number, size, fd, off);
}

int multipart_put_part(struct objects *o, const char *bucket, const char *key,
                       const char *upload_id, int fd, const char *staged, int inplace,
                       uint64_t *space, const struct be_part *part, int *staged_taken)
{
    int rc;
    *staged_taken = 0;
    if (!objects_write_back(o))
        return backend_mp_put_part(o->be, bucket, key, upload_id, fd, part);
    if (inplace) {
        rc = wb_mpu_part_done_inplace(o, bucket, key, upload_id, part->number, part->etag, fd);
    } else {
        /* the staged part file (fsync'd) moves into the upload */
        if (!staged)
            return -S3E_INTERNAL;
        rc = fsync(fd) ? -errno : wb_mpu_put_part(o, bucket, key, upload_id, part->number,
                                                    staged, part->etag);
        *staged_taken = !rc;
    }
    /* its bytes stay counted against the dirty limit and as staged bytes until the upload
     * completes or aborts: the hold replaces the body's reservation */
    if (!rc) {
        if (space)
            cache_stage_release(o->cache, space);
        cache_dirty_hold(o->cache, part->size);
    }
    return rc;
}

/* The copy source's x-amz-copy-source-if-* conditions, judged as for a GET (so that an
 * if-modified-since is judged at all), a "not modified" being a failed precondition here. */
static int multipart_copy_conditions(const struct cond_hdrs *cond, const struct be_meta *src)
{
    int rc = cond_check(cond, src->etag, src->mtime_ns / 1000000000ll, 1);
    return rc == -S3E_NOT_MODIFIED ? -S3E_PRECONDITION_FAILED : rc;
}

/* Write-back UploadPartCopy: the source range read from the cache (it may exist nowhere else
 * yet) into a staged part, hashed as it is copied (the part's MD5 is its ETag). */
static int multipart_copy_part_wb(struct objects *o, const char *bucket, const char *key,
                                  const char *upload_id, unsigned number,
                                  const char *src_bucket, const char *src_key, int has_range,
                                  uint64_t src_off, uint64_t src_len,
                                  const struct cond_hdrs *cond, struct be_part *part)
{
    struct be_meta src;
    char path[4096];
    int in = -1, out = -1;
    int rc = cache_open_whole(o->cache, src_bucket, src_key, &in, &src);
    if (!rc)
        rc = multipart_copy_conditions(cond, &src);
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
        rc = cache_dirty_admit(o->cache, len);
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
            rc = fsync(out) ? -errno : wb_mpu_put_part(o, bucket, key, upload_id, number, path,
                                                        part->etag);
        }
        cksum_free(ck);
        free(buf);
        close(out);
        if (rc)
            unlink(path);
        cache_stage_release(o->cache, &space);
        if (!rc)
            cache_dirty_hold(o->cache, len);
    }
    cache_stage_release(o->cache, &space);
    cache_dirty_unadmit(o->cache, len);
out:
    if (in >= 0)
        close(in);
    return rc;
}

int multipart_copy_part(struct objects *o, const char *bucket, const char *key,
                        const char *upload_id, unsigned number, const char *src_bucket,
                        const char *src_key, int has_range, uint64_t src_off, uint64_t src_len,
                        const struct cond_hdrs *cond, struct be_part *out)
{
    struct be_meta src;
    if (objects_write_back(o))
        return multipart_copy_part_wb(o, bucket, key, upload_id, number, src_bucket, src_key,
                                      has_range, src_off, src_len, cond, out);
    int rc = backend_head(o->be, src_bucket, src_key, &src);
    if (!rc)
        rc = multipart_copy_conditions(cond, &src);
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

/* Write-through Complete, before the backend makes the object: -S3E_ENTITY_TOO_LARGE when the
 * parts @parts (ascending, from the request) add up to more than --max-object-size, as the
 * backend lists them. A part not listed, or listed with another ETag, is -S3E_INVALID_PART
 * (what the backend would answer), so that a part re-uploaded meanwhile cannot grow the object
 * past the check. 0 when they fit, and when the check cannot apply: parts out of order or an
 * upload the backend no longer lists (it answers those itself: InvalidPartOrder, NoSuchUpload
 * or a repeated Complete's result). Other errors: the backend's. */
static int multipart_size_check(struct objects *o, const char *bucket, const char *key,
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

/* Write-back Complete: staged parts -> one file (or the upload's data file itself) adopted
 * dirty; the upload then goes. A repeat of a Complete that ended is answered as the first. */
static int multipart_complete_wb(struct objects *o, const char *bucket, const char *key,
                                 const char *upload_id, const struct be_part *parts, size_t n,
                                 struct be_meta *out)
{
    char staged[4096];
    uint64_t held = 0;
    int seal = -1;
    int rc = wb_mpu_complete(o, bucket, key, upload_id, parts, n, out, staged, &held, &seal);
    if (rc == 1) /* a repeat: answered as the first time, nothing more to do */
        return 0;
    /* the parts' staged bytes (cache_dirty_hold()) become the object's */
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

int multipart_complete(struct objects *o, const char *bucket, const char *key,
                       const char *upload_id, const struct be_part *parts, size_t n,
                       struct be_meta *out)
{
    if (objects_write_back(o))
        return multipart_complete_wb(o, bucket, key, upload_id, parts, n, out);
    /* Nothing may be made that is over the limit: checked first, the upload stays as it was
     * (it can be completed with fewer parts, listed or aborted). Write-back checks in
     * wb_mpu_complete(), before it writes anything. */
    int rc = multipart_size_check(o, bucket, key, upload_id, parts, n);
    if (rc)
        return rc;
    cache_write_begin(o->cache, bucket, key);
    rc = backend_mp_complete(o->be, bucket, key, upload_id, parts, n, out);
    if (!rc && out->size > o->cf->max_object_size)
        rc = -S3E_ENTITY_TOO_LARGE; /* a check skipped above (backend without ListParts) */
    if (rc)
        cache_invalidate(o->cache, bucket, key);
    else
        cache_forget(o->cache, bucket, key); /* the backend's object is newer */
    cache_write_end(o->cache, bucket, key);
    if (rc)
        return rc;
    /* A freshly written object stays in the cache in both modes: the parts went to the backend
     * one by one, so the object is fetched back in the background (a warm-up job; a GET before
     * it ends joins its fill; in cluster mode the owner's). Best effort: the upload succeeded
     * either way. */
    int keep = objects_keep(o, bucket, key);
    objects_changed(o, bucket, key, !keep && out->size);
    if (out->size && o->warm && keep)
        (void)warm_object(o->warm, bucket, key);
    return 0;
}

int multipart_abort(struct objects *o, const char *bucket, const char *key,
                    const char *upload_id)
{
    if (objects_write_back(o))
        return wb_mpu_abort(o, bucket, key, upload_id);
    return backend_mp_abort(o->be, bucket, key, upload_id);
}

int multipart_list_parts(struct objects *o, const char *bucket, const char *key,
                         const char *upload_id, unsigned marker, unsigned max,
                         struct be_part **out, size_t *n, int *truncated)
{
    if (objects_write_back(o))
        return wb_mpu_list_parts(o, bucket, key, upload_id, marker, max, out, n, truncated);
    return backend_mp_list_parts(o->be, bucket, key, upload_id, marker, max, out, n, truncated);
}

/* One page of in-progress uploads where they are kept: the write-back staging or the
 * backend. Same contract as backend_mp_list_uploads(). */
static int multipart_uploads_page(struct objects *o, const char *bucket, const char *prefix,
                                  const char *key_marker, const char *id_marker, unsigned max,
                                  struct be_upload **out, size_t *n, int *truncated)
{
    if (objects_write_back(o))
        return wb_mpu_list_uploads(o, bucket, prefix, key_marker, id_marker, max, out, n,
                                   truncated);
    return backend_mp_list_uploads(o->be, bucket, prefix, key_marker, id_marker, max, out, n,
                                   truncated);
}

void multipart_uploads_free(struct multipart_uploads *u)
{
    if (!u)
        return;
    if (u->uploads)
        be_uploads_free(u->uploads, u->n);
    for (size_t i = 0; i < u->n_prefixes; i++)
        free(u->prefixes[i]);
    free(u->prefixes);
    free(u->next_key);
    free(u->next_upload_id);
    memset(u, 0, sizeof(*u));
}

/* Appends @p (taken over) to the common prefixes. 0 or -ENOMEM (@p freed). */
static int multipart_add_prefix(struct multipart_uploads *s, size_t *cap, char *p)
{
    if (ARR_GROW(s->prefixes, s->n_prefixes, 1, *cap)) {
        free(p);
        return -ENOMEM;
    }
    s->prefixes[s->n_prefixes++] = p;
    return 0;
}

/* With a delimiter: uploads whose key has it after the prefix roll up into one common prefix
 * (prefix up to and including the delimiter), as ListObjects does. Pages of the store are read
 * until @max uploads and prefixes are listed and one more would follow (then truncated), or
 * none is left. A prefix at or before the key-marker was listed on an earlier page (the
 * NextKeyMarker of a page ending with a prefix is that prefix). */
static int multipart_rollup(struct objects *o, const char *bucket, const char *prefix,
                            const char *delim, const char *km0, const char *um0, unsigned max,
                            struct multipart_uploads *s)
{
    size_t pl = prefix ? strlen(prefix) : 0, cap = 0, pcap = 0;
    char *km = strdup(km0 ? km0 : ""), *um = strdup(um0 ? um0 : "");
    const char *last = NULL; /* what the listing ends with so far */
    int rc = km && um ? 0 : -ENOMEM, more = 1;
    while (!rc && more && !s->truncated) {
        struct be_upload *u = NULL;
        size_t n = 0;
        rc = multipart_uploads_page(o, bucket, prefix, km, um, 1000, &u, &n, &more);
        if (!rc && n) { /* the next page starts after this one's last upload */
            free(km);
            free(um);
            km = strdup(u[n - 1].key);
            um = strdup(u[n - 1].upload_id);
            if (!km || !um)
                rc = -ENOMEM;
        }
        for (size_t i = 0; !rc && i < n && !s->truncated; i++) {
            const char *d = strstr(u[i].key + pl, delim);
            char *cp = d ? strndup(u[i].key, (size_t)(d - u[i].key) + strlen(delim)) : NULL;
            if (d && !cp) {
                rc = -ENOMEM;
                break;
            }
            if (cp && ((km0 && strcmp(cp, km0) <= 0) ||
                       (s->n_prefixes && !strcmp(cp, s->prefixes[s->n_prefixes - 1])))) {
                free(cp);
                continue;
            }
            if (s->n + s->n_prefixes == max) {
                free(cp);
                s->truncated = 1;
                break;
            }
            if (cp) {
                if (!(rc = multipart_add_prefix(s, &pcap, cp)))
                    last = s->prefixes[s->n_prefixes - 1];
                continue;
            }
            if ((rc = ARR_GROW(s->uploads, s->n, 1, cap)))
                break;
            s->uploads[s->n] = u[i];
            u[i].key = NULL; /* moved */
            last = s->uploads[s->n++].key;
        }
        if (!n)
            more = 0;
        if (u)
            be_uploads_free(u, n);
    }
    if (!rc && s->truncated && last) {
        s->next_key = strdup(last);
        if (s->n && last == s->uploads[s->n - 1].key)
            s->next_upload_id = strdup(s->uploads[s->n - 1].upload_id);
        if (!s->next_key)
            rc = -ENOMEM;
    }
    free(km);
    free(um);
    return rc;
}

int multipart_list_uploads(struct objects *o, const char *bucket, const char *prefix,
                           const char *delimiter, const char *key_marker,
                           const char *id_marker, unsigned max, struct multipart_uploads *s)
{
    int rc;
    memset(s, 0, sizeof(*s));
    if (delimiter && *delimiter)
        return multipart_rollup(o, bucket, prefix, delimiter, key_marker, id_marker, max, s);
    rc = multipart_uploads_page(o, bucket, prefix, key_marker, id_marker, max, &s->uploads,
                                &s->n, &s->truncated);
    if (!rc && s->truncated && s->n) {
        s->next_key = strdup(s->uploads[s->n - 1].key);
        s->next_upload_id = strdup(s->uploads[s->n - 1].upload_id);
        if (!s->next_key || !s->next_upload_id)
            rc = -ENOMEM;
    }
    return rc;
}
