/*
 * bucket.c: bucket operations. The backend holds the buckets; the cache only has to forget a
 * deleted bucket's entries, and a bucket holding keys written back but not drained is not
 * empty.
 */
#include <stdlib.h>

#include "bucket.h"
#include "cache/cache.h"
#include "lib/s3err.h"
#include "objects.h"

int bucket_list_all(struct objects *o, struct be_bucket **out, size_t *n)
{
    return backend_list_buckets(o->be, out, n);
}

int bucket_create(struct objects *o, const char *bucket)
{
    int rc = backend_bucket_create(o->be, bucket);
    return rc == -S3E_BUCKET_ALREADY_OWNED ? 0 : rc;
}

int bucket_head(struct objects *o, const char *bucket)
{
    return backend_bucket_head(o->be, bucket);
}

int bucket_delete(struct objects *o, const char *bucket)
{
    struct be_list_entry *dk = NULL;
    size_t dn = 0;
    /* written back but not drained: the bucket is not empty, whatever the backend holds */
    if (drain_dirty_keys(o->dr, bucket, "", &dk, &dn) == 0 && dn) {
        for (size_t i = 0; i < dn; i++)
            free(dk[i].key);
        free(dk);
        return -S3E_BUCKET_NOT_EMPTY;
    }
    int rc = backend_bucket_delete(o->be, bucket);
    if (!rc) {
        uint64_t n;
        cache_invalidate_prefix(o->cache, bucket, "", &n);
        objects_changed(o, bucket, NULL, 0);
    }
    return rc;
}
