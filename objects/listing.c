/*
 * listing.c: object listings as clients must see them: the backend's page, with the keys
 * written back but not yet drained merged in (each where its name sorts, rolled up under a
 * delimiter like the backend's), so a PUT is listed as soon as it is answered in either write
 * mode.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "lib/s3err.h"
#include "listing.h"
#include "objects.h"

/* The rolled-up form of dirty key @key under @lr: NULL (the key itself) or a malloc'd common
 * prefix (prefix + up to and including the delimiter). *@err on no memory. */
static char *listing_rollup(const struct be_list_req *lr, const char *key, int *err)
{
    size_t pl = lr->prefix ? strlen(lr->prefix) : 0;
    if (!lr->delimiter)
        return NULL;
    const char *d = strstr(key + pl, lr->delimiter);
    if (!d)
        return NULL;
    char *cp = strndup(key, (size_t)(d - key) + strlen(lr->delimiter));
    if (!cp)
        *err = -ENOMEM;
    return cp;
}

static int listing_entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct be_list_entry *)a)->key, ((const struct be_list_entry *)b)->key);
}

/* A dirty key replaces the backend's entry of the same name (listing.h). */
int listing_merge_dirty(const struct be_list_req *lr, struct be_list_page *page,
                            const struct be_list_entry *dk, size_t dn)
{
    const char *marker = lr->marker ? lr->marker : "";
    /* the page covers keys up to its last entry when truncated, everything after otherwise */
    const char *end = page->truncated && page->n ? page->entries[page->n - 1].key : NULL;
    size_t cap = page->n + dn;
    struct be_list_entry *all = calloc(cap ? cap : 1, sizeof(*all));
    int err = 0;
    if (!all)
        return -ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < page->n; i++)
        all[n++] = page->entries[i]; /* keys move; the page's array is freed below */
    for (size_t i = 0; i < dn && !err; i++) {
        char *cp = listing_rollup(lr, dk[i].key, &err);
        const char *name = cp ? cp : dk[i].key;
        if (err)
            break;
        if (strcmp(name, marker) <= 0 || (end && strcmp(name, end) > 0)) {
            free(cp);
            continue;
        }
        size_t j;
        for (j = 0; j < n && strcmp(all[j].key, name); j++)
            ;
        if (j < n && cp) { /* that common prefix is already listed */
            free(cp);
            continue;
        }
        if (j < n) {
            /* The dirty key replaces the backend's entry of that name and keeps its string:
             * freeing it would leave @end dangling when it is the page's last key. */
            char *same = all[j].key;
            all[j] = dk[i];
            all[j].key = same;
            all[j].is_prefix = 0;
            continue;
        }
        char *key = cp ? cp : strdup(dk[i].key);
        if (!key) {
            err = -ENOMEM;
            break;
        }
        j = n++;
        all[j] = dk[i];
        all[j].key = key;
        all[j].is_prefix = cp != NULL;
    }
    free(page->entries); /* its keys moved into all[] */
    page->entries = NULL;
    qsort(all, n, sizeof(*all), listing_entry_cmp);
    if (n > lr->max_keys) {
        for (size_t i = lr->max_keys; i < n; i++)
            free(all[i].key);
        n = lr->max_keys;
        page->truncated = 1;
    }
    free(page->next_marker);
    page->next_marker = page->truncated && n ? strdup(all[n - 1].key) : NULL;
    if (page->truncated && n && !page->next_marker)
        err = -ENOMEM;
    page->entries = all;
    page->n = n;
    return err;
}

int listing_objects(struct objects *o, const struct be_list_req *lr, struct be_list_page *page)
{
    if (lr->max_keys == 0)
        return backend_bucket_head(o->be, lr->bucket);
    int rc = backend_list(o->be, lr, page);
    struct be_list_entry *dk = NULL;
    size_t dn = 0;
    if (drain_dirty_keys(o->dr, lr->bucket, lr->prefix ? lr->prefix : "", &dk, &dn) || !dn)
        return rc;
    /* Keys written back but not drained are listed even while the backend is unreachable (a
     * listing of those alone); a backend that answers for the bucket otherwise wins. */
    if (rc && rc != -S3E_NO_SUCH_BUCKET && rc != -S3E_ACCESS_DENIED) {
        be_list_page_free(page);
        rc = 0;
    }
    if (!rc)
        rc = listing_merge_dirty(lr, page, dk, dn);
    for (size_t i = 0; i < dn; i++)
        free(dk[i].key);
    free(dk);
    return rc;
}
