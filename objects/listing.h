/*
 * listing.h: ListObjects (v1, v2, versions) pages of a bucket as clients must see them
 * (listing.c): the backend's keys, and in write-back the keys written but not yet drained.
 * Blocking: call it on a worker.
 */
#ifndef S3C_LISTING_H
#define S3C_LISTING_H

#include "backends/backend.h"

struct objects;

/* One page of @lr (max_keys 0: only checks that the bucket exists, the page stays empty) into
 * *@page (free with be_list_page_free(), also on failure). Keys written back but not drained
 * are merged in: one replaces the backend's entry of its name, and they are listed even while
 * the backend is unreachable (a listing of those alone); a backend that answers for the bucket
 * (NoSuchBucket, AccessDenied) otherwise wins. 0 or -errno / -S3E_*. */
int listing_objects(struct objects *o, const struct be_list_req *lr, struct be_list_page *page);
/* Merges the dirty keys @dk[0..@dn) (sorted) into @page, the backend's answer to @lr: keys past a
 * truncated page's end are left to the next page; the page is cut back to max_keys with the
 * next marker at its new end. Exposed for tests. 0 or -ENOMEM. */
int listing_merge_dirty(const struct be_list_req *lr, struct be_list_page *page,
                        const struct be_list_entry *dk, size_t dn);

#endif
