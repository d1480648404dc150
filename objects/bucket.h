/*
 * bucket.h: bucket operations with S3's semantics over the backend and the cache (bucket.c).
 * Blocking: call them on a worker.
 */
#ifndef S3C_BUCKET_H
#define S3C_BUCKET_H

#include <stddef.h>

#include "backends/backend.h"

struct objects;

/* ListBuckets: *@out malloc'd (free()). */
int bucket_list_all(struct objects *o, struct be_bucket **out, size_t *n);
/* CreateBucket; re-creating a bucket of one's own succeeds (us-east-1 semantics). */
int bucket_create(struct objects *o, const char *bucket);
/* 0 when @bucket exists, -S3E_NO_SUCH_BUCKET, or the backend's error. */
int bucket_head(struct objects *o, const char *bucket);
/* DeleteBucket: -S3E_BUCKET_NOT_EMPTY while keys written back are not drained, whatever the
 * backend holds; once deleted, the bucket's cached entries are dropped. */
int bucket_delete(struct objects *o, const char *bucket);

#endif
