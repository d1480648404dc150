/*
 * write_priv.h: the write mode as an implementation of one interface. objects_new() picks
 * write_through_ops (write_through.c: the backend first, then the cache) or write_back_ops
 * (write_back.c: durable in the cache, drained later) from --write-mode, once; object.c,
 * multipart.c and objects.c call through o->write, or objects_write_for() for a write of one
 * key (cluster mode writes another gateway's keys through), and never ask which one it is.
 * Every op has the contract of the public function that calls it (object.h, multipart.h,
 * objects.h).
 */
#ifndef S3C_OBJECTS_WRITE_PRIV_H
#define S3C_OBJECTS_WRITE_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "lib/range.h"

struct objects;

struct objects_write_ops {
    const char *name; /* the --write-mode value: "through", "back" */
    /* objects_stage_direct(): the write does not read a staged body back at once */
    int stage_direct;
    /* objects_admit() */
    int (*admit)(struct objects *o, uint64_t bytes, uint64_t *admitted);
    /* objects_admit_more() */
    int (*admit_more)(struct objects *o, uint64_t total, uint64_t *admitted);
    /* object_put(), after @fd's fsync */
    int (*put)(struct objects *o, const char *bucket, const char *key, int fd, const char *staged,
               uint64_t *space, struct be_meta *meta, int *staged_taken);
    /* object_copy() */
    int (*copy)(struct objects *o, const char *src_bucket, const char *src_key, const char *bucket,
                const char *key, const struct be_meta *replace, const struct cond_hdrs *cond,
                struct be_meta *out);
    /* multipart_*(): where the uploads are and how they become objects */
    int (*mp_create)(struct objects *o, const char *bucket, const char *key,
                     const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX]);
    int (*mp_part_target)(struct objects *o, const char *bucket, const char *key,
                          const char *upload_id, unsigned number, uint64_t size, int *fd,
                          uint64_t *off);
    int (*mp_put_part)(struct objects *o, const char *bucket, const char *key,
                       const char *upload_id, int fd, const char *staged, int inplace,
                       uint64_t *space, const struct be_part *part, int *staged_taken);
    int (*mp_copy_part)(struct objects *o, const char *bucket, const char *key,
                        const char *upload_id, unsigned number, const char *src_bucket,
                        const char *src_key, int has_range, uint64_t off, uint64_t len,
                        const struct cond_hdrs *cond, struct be_part *out);
    int (*mp_complete)(struct objects *o, const char *bucket, const char *key,
                       const char *upload_id, const struct be_part *parts, size_t n,
                       struct be_meta *out);
    int (*mp_abort)(struct objects *o, const char *bucket, const char *key, const char *upload_id);
    int (*mp_list_parts)(struct objects *o, const char *bucket, const char *key,
                         const char *upload_id, unsigned marker, unsigned max, struct be_part **out,
                         size_t *n, int *truncated);
    /* one page of in-progress uploads, as backend_mp_list_uploads() */
    int (*mp_list_uploads)(struct objects *o, const char *bucket, const char *prefix,
                           const char *key_marker, const char *id_marker, unsigned max,
                           struct be_upload **out, size_t *n, int *truncated);
};

extern const struct objects_write_ops write_through_ops; /* write_through.c */
extern const struct objects_write_ops write_back_ops;    /* write_back.c */

/* The write mode for a write of (@bucket, @key): --write-mode's, except that in cluster mode
 * write-back keeps only the keys this gateway owns and writes another gateway's through. Reads
 * of a key go to its owner: a dirty copy here would leave the owner fetching the backend's
 * older object until the drain (objects.c). */
const struct objects_write_ops *objects_write_for(const struct objects *o, const char *bucket,
                                                  const char *key);

/* A copy source's x-amz-copy-source-if-* conditions @cond, judged as for a GET (so that an
 * if-modified-since is judged at all), a "not modified" being a failed precondition here:
 * 0 or -S3E_PRECONDITION_FAILED (objects.c). */
int objects_copy_conditions(const struct cond_hdrs *cond, const struct be_meta *src);

#endif
