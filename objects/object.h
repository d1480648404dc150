/*
 * object.h: writes of one object (object.c): PutObject, CopyObject, DeleteObject, and the
 * metadata a HEAD through the cache sees. All blocking: call them on a worker.
 */
#ifndef S3C_OBJECT_H
#define S3C_OBJECT_H

#include <stdint.h>

#include "backends/backend.h"
#include "lib/range.h"

struct objects;

/* Stores the @meta->size bytes of @fd (the body, digests verified; its file is fsync'd here)
 * as (@bucket, @key) with @meta. Write-through: the backend first, then the cache adopts
 * @staged (the path of @fd's file in the cache's staging directory, or NULL: only invalidated);
 * @meta's mtime and ETag become the backend's. Write-back: @staged becomes the dirty version.
 * *@space (NULL: none): the room the cache holds for @staged's bytes (cache_stage_reserve());
 * the entry takes it over when adopted (then 0), else the caller still releases it.
 * *@staged_taken: 1 when @staged was consumed (the caller must not unlink it). 0 or -errno /
 * -S3E_*. */
int object_put(struct objects *o, const char *bucket, const char *key, int fd,
               const char *staged, uint64_t *space, struct be_meta *meta, int *staged_taken);
/* CopyObject of (@src_bucket, @src_key) to (@bucket, @key): @replace NULL keeps the source's
 * metadata, else the copy gets @replace's headers and user metadata. @cond: the
 * x-amz-copy-source-if-* headers (412 when they fail). *@out: the new object. Write-back reads
 * the source through the cache (it may exist nowhere else yet) and writes the copy dirty. */
int object_copy(struct objects *o, const char *src_bucket, const char *src_key,
                const char *bucket, const char *key, const struct be_meta *replace,
                const struct cond_hdrs *cond, struct be_meta *out);
/* DeleteObject: the backend first, then the cache (a dirty entry is forgotten only once the
 * backend deleted; its drain is held off meanwhile). A key the backend does not have is
 * deleted too (0). */
int object_delete(struct objects *o, const char *bucket, const char *key);
/* The metadata of (@bucket, @key) as a HEAD through the cache sees it (a dirty one included). */
int object_head(struct objects *o, const char *bucket, const char *key, struct be_meta *meta);

#endif
