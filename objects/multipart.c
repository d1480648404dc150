/*
 * multipart.c: multipart uploads in the write mode of the object layer (write_priv.h): on the
 * backend (write_through.c), or staged in the cache directory (write_back.c, wb_mpu.c).
 * Listings of uploads roll up under a delimiter here, over either store.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/arr.h"
#include "multipart.h"
#include "objects.h"
#include "wb_mpu.h"
#include "write_priv.h"

/* The write mode of upload @upload_id of (@bucket, @key): the one it was created in. An upload
 * staged here stays here (in cluster mode the ring may have moved the key meanwhile), any
 * other is the key's write mode now (objects_write_for(): the backend's uploads, or a repeat
 * of a Complete that ended here). */
static const struct objects_write_ops *upload_ops(const struct objects *o, const char *bucket,
                                                  const char *key, const char *upload_id)
{
    if (o->write == &write_back_ops && wb_mpu_here(o, upload_id))
        return &write_back_ops;
    return objects_write_for(o, bucket, key);
}

int multipart_create(struct objects *o, const char *bucket, const char *key,
                     const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX])
{
    return objects_write_for(o, bucket, key)->mp_create(o, bucket, key, meta, upload_id);
}

int multipart_part_target(struct objects *o, const char *bucket, const char *key,
                          const char *upload_id, unsigned number, uint64_t size, int *fd,
                          uint64_t *off)
{
    return upload_ops(o, bucket, key, upload_id)
        ->mp_part_target(o, bucket, key, upload_id, number, size, fd, off);
}

int multipart_put_part(struct objects *o, const char *bucket, const char *key,
                       const char *upload_id, int fd, const char *staged, int inplace,
                       uint64_t *space, const struct be_part *part, int *staged_taken)
{
    *staged_taken = 0;
    return upload_ops(o, bucket, key, upload_id)
        ->mp_put_part(o, bucket, key, upload_id, fd, staged, inplace, space, part, staged_taken);
}

int multipart_copy_part(struct objects *o, const char *bucket, const char *key,
                        const char *upload_id, unsigned number, const char *src_bucket,
                        const char *src_key, int has_range, uint64_t src_off, uint64_t src_len,
                        const struct cond_hdrs *cond, struct be_part *out)
{
    return upload_ops(o, bucket, key, upload_id)
        ->mp_copy_part(o, bucket, key, upload_id, number, src_bucket, src_key, has_range,
                       src_off, src_len, cond, out);
}

int multipart_complete(struct objects *o, const char *bucket, const char *key,
                       const char *upload_id, const struct be_part *parts, size_t n,
                       struct be_meta *out)
{
    return upload_ops(o, bucket, key, upload_id)
        ->mp_complete(o, bucket, key, upload_id, parts, n, out);
}

int multipart_abort(struct objects *o, const char *bucket, const char *key,
                    const char *upload_id)
{
    return upload_ops(o, bucket, key, upload_id)->mp_abort(o, bucket, key, upload_id);
}

int multipart_list_parts(struct objects *o, const char *bucket, const char *key,
                         const char *upload_id, unsigned marker, unsigned max,
                         struct be_part **out, size_t *n, int *truncated)
{
    return upload_ops(o, bucket, key, upload_id)
        ->mp_list_parts(o, bucket, key, upload_id, marker, max, out, n, truncated);
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
        rc = o->write->mp_list_uploads(o, bucket, prefix, km, um, 1000, &u, &n, &more);
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
    rc = o->write->mp_list_uploads(o, bucket, prefix, key_marker, id_marker, max, &s->uploads,
                                   &s->n, &s->truncated);
    if (!rc && s->truncated && s->n) {
        s->next_key = strdup(s->uploads[s->n - 1].key);
        s->next_upload_id = strdup(s->uploads[s->n - 1].upload_id);
        if (!s->next_key || !s->next_upload_id)
            rc = -ENOMEM;
    }
    return rc;
}
