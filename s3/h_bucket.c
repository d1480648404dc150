/*
 * h_bucket.c: bucket-level S3 operations: ListBuckets, Create/Head/Delete
 * bucket, GetBucketLocation/Versioning/Acl, PutBucketAcl (only what is enforced),
 * ListObjects v1 and v2, ListObjectVersions (unversioned: each object once), and
 * DeleteObjects. Every backend call runs on a worker; listings come from the
 * backend (the cache never answers them).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/checksum.h"
#include "http/gw.h"
#include "lib/s3err.h"

enum { PH_START = 0, PH_JOB_DONE };

#define OWNER_XML "<Owner><ID>s3cached</ID><DisplayName>s3cached</DisplayName></Owner>"

/* Runs @fn on a worker the first time; @done the second. */
static int run_then(struct req *rq, void (*fn)(struct req *), int (*done)(struct req *))
{
    if (rq->phase == PH_JOB_DONE)
        return done(rq);
    rq->phase = PH_JOB_DONE;
    int rc = req_run_job(rq, fn);
    return rc ? respond_error(rq, rc) : MHD_YES;
}

/* Swallows a small request body (CreateBucketConfiguration and the like). */
static int body_collect(struct req *rq, const char *data, size_t len)
{
    int rc = buf_append(&rq->body, data, len);
    return rc == -EMSGSIZE ? -S3E_MALFORMED_XML : rc;
}

/* ------------------------------------------------------------------ ListBuckets */

struct buckets_state {
    struct be_bucket *b;
    size_t n;
};

static void buckets_state_free(void *p)
{
    struct buckets_state *s = p;
    if (s)
        free(s->b);
    free(s);
}

static void list_buckets_job(struct req *rq)
{
    struct buckets_state *s = calloc(1, sizeof(*s));
    if (!s) {
        rq->rc = -ENOMEM;
        return;
    }
    rq->job_state = s;
    rq->job_state_free = buckets_state_free;
    rq->rc = backend_list_buckets(rq->srv->be, &s->b, &s->n);
}

static int list_buckets_done(struct req *rq)
{
    struct buckets_state *s = rq->job_state;
    struct buf b;
    char ts[32];
    buf_init(&b, 16u << 20);
    respond_xml_start(&b, "ListAllMyBucketsResult");
    buf_puts(&b, OWNER_XML "<Buckets>");
    for (size_t i = 0; i < s->n; i++) {
        buf_puts(&b, "<Bucket>");
        buf_xml_elem(&b, "Name", s->b[i].name);
        s3c_iso8601(s->b[i].ctime_ns, ts);
        buf_xml_elem(&b, "CreationDate", ts);
        buf_puts(&b, "</Bucket>");
    }
    buf_puts(&b, "</Buckets></ListAllMyBucketsResult>");
    return respond_xml(rq, 200, &b);
}

static int h_list_buckets_end(struct req *rq)
{
    return run_then(rq, list_buckets_job, list_buckets_done);
}

/* ------------------------------------------------------------------ bucket ops */

static void bucket_create_job(struct req *rq)
{
    rq->rc = backend_bucket_create(rq->srv->be, rq->bucket);
    if (rq->rc == -S3E_BUCKET_ALREADY_OWNED)
        rq->rc = 0; /* us-east-1 semantics: re-creating your own bucket succeeds */
}

static int bucket_create_done(struct req *rq)
{
    struct MHD_Response *r;
    char loc[128];
    if (respond_empty(rq, 200, &r) != MHD_YES)
        return MHD_NO;
    snprintf(loc, sizeof(loc), "/%s", rq->bucket);
    MHD_add_response_header(r, "Location", loc);
    return respond_queue_prepared(rq, 200, r);
}

static int h_bucket_create_end(struct req *rq)
{
    return run_then(rq, bucket_create_job, bucket_create_done);
}

static void bucket_delete_job(struct req *rq)
{
    struct be_list_entry *dk = NULL;
    size_t dn = 0;
    /* written back but not drained: the bucket is not empty, whatever the backend holds */
    if (cache_dirty_keys(rq->srv->cache, rq->bucket, "", &dk, &dn) == 0 && dn) {
        for (size_t i = 0; i < dn; i++)
            free(dk[i].key);
        free(dk);
        rq->rc = -S3E_BUCKET_NOT_EMPTY;
        return;
    }
    rq->rc = backend_bucket_delete(rq->srv->be, rq->bucket);
    if (!rq->rc) {
        uint64_t n;
        cache_invalidate_prefix(rq->srv->cache, rq->bucket, "", &n);
    }
}

static int bucket_delete_done(struct req *rq)
{
    return respond_empty(rq, 204, NULL);
}

static int h_bucket_delete_end(struct req *rq)
{
    return run_then(rq, bucket_delete_job, bucket_delete_done);
}

static void bucket_head_job(struct req *rq)
{
    rq->rc = backend_bucket_head(rq->srv->be, rq->bucket);
}

static int bucket_head_done(struct req *rq)
{
    struct MHD_Response *r;
    if (respond_empty(rq, 200, &r) != MHD_YES)
        return MHD_NO;
    MHD_add_response_header(r, "x-amz-bucket-region", rq->srv->cf->region);
    return respond_queue_prepared(rq, 200, r);
}

static int h_bucket_head_end(struct req *rq)
{
    return run_then(rq, bucket_head_job, bucket_head_done);
}

static int bucket_location_done(struct req *rq)
{
    struct buf b;
    buf_init(&b, 4096);
    buf_puts(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                 "<LocationConstraint xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    if (strcmp(rq->srv->cf->region, "us-east-1"))
        buf_xml(&b, rq->srv->cf->region);
    buf_puts(&b, "</LocationConstraint>");
    return respond_xml(rq, 200, &b);
}

static int h_bucket_location_end(struct req *rq)
{
    return run_then(rq, bucket_head_job, bucket_location_done);
}

static int bucket_versioning_done(struct req *rq)
{
    struct buf b;
    buf_init(&b, 4096);
    respond_xml_start(&b, "VersioningConfiguration");
    buf_puts(&b, "</VersioningConfiguration>");
    return respond_xml(rq, 200, &b);
}

static int h_bucket_versioning_end(struct req *rq)
{
    return run_then(rq, bucket_head_job, bucket_versioning_done);
}

static int bucket_acl_done(struct req *rq)
{
    struct buf b;
    buf_init(&b, 4096);
    acl_document(&b);
    return respond_xml(rq, 200, &b);
}

static int h_bucket_acl_end(struct req *rq)
{
    return run_then(rq, bucket_head_job, bucket_acl_done);
}

static int bucket_put_acl_done(struct req *rq)
{
    return rq->rc ? respond_error(rq, rq->rc) : respond_empty(rq, 200, NULL);
}

/* PutBucketAcl: asking for what is enforced (private to the owner) succeeds and changes
 * nothing; any other grant is NotImplemented (acl_put_check()). */
static int h_bucket_put_acl_end(struct req *rq)
{
    if (rq->phase == PH_START) {
        struct errmsg em = {{0}};
        int rc = acl_put_check(rq, &em);
        if (rc)
            return respond_error_msg(rq, rc, em.buf[0] ? em.buf : NULL);
    }
    return run_then(rq, bucket_head_job, bucket_put_acl_done);
}

/* ------------------------------------------------------------------ ListObjects */

struct list_state {
    struct be_list_page page;
    char *marker;     /* decoded marker / start-after / continuation / key-marker */
    unsigned max_keys;
    int v2;
    int versions;     /* ListObjectVersions: every object once, as version "null" */
    int url;
};

static void list_state_free(void *p)
{
    struct list_state *s = p;
    if (!s)
        return;
    be_list_page_free(&s->page);
    free(s->marker);
    free(s);
}

/* The rolled-up form of dirty key @key under @lr: NULL (the key itself) or a malloc'd common
 * prefix (prefix + up to and including the delimiter). *@err on no memory. */
static char *dirty_rollup(const struct be_list_req *lr, const char *key, int *err)
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

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct be_list_entry *)a)->key, ((const struct be_list_entry *)b)->key);
}

/* Write-back: merges the keys not yet on the backend into @page (the backend's answer to @lr,
 * or nothing when @backend_rc says it could not answer). A dirty key replaces the backend's
 * entry of the same name; keys past a truncated page's end are left to the next page; the page
 * is cut back to max_keys with the next marker at its new end. 0 or -ENOMEM. */
static int list_merge_dirty(const struct be_list_req *lr, struct be_list_page *page,
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
        char *cp = dirty_rollup(lr, dk[i].key, &err);
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
    qsort(all, n, sizeof(*all), entry_cmp);
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

static void list_job(struct req *rq)
{
    struct list_state *s = rq->job_state;
    if (s->max_keys == 0) {
        rq->rc = backend_bucket_head(rq->srv->be, rq->bucket);
        return;
    }
    struct be_list_req lr = {
        .bucket = rq->bucket,
        .prefix = req_query(rq, "prefix"),
        .delimiter = req_query(rq, "delimiter"),
        .marker = s->marker,
        .max_keys = s->max_keys,
    };
    if (lr.delimiter && !*lr.delimiter)
        lr.delimiter = NULL;
    rq->rc = backend_list(rq->srv->be, &lr, &s->page);
    struct be_list_entry *dk = NULL;
    size_t dn = 0;
    if (cache_dirty_keys(rq->srv->cache, rq->bucket, lr.prefix ? lr.prefix : "", &dk, &dn) || !dn)
        return;
    /* Keys written back but not drained are listed even while the backend is unreachable (a
     * listing of those alone); a backend that answers for the bucket otherwise wins. */
    if (rq->rc && rq->rc != -S3E_NO_SUCH_BUCKET && rq->rc != -S3E_ACCESS_DENIED) {
        be_list_page_free(&s->page);
        rq->rc = 0;
    }
    if (!rq->rc)
        rq->rc = list_merge_dirty(&lr, &s->page, dk, dn);
    for (size_t i = 0; i < dn; i++)
        free(dk[i].key);
    free(dk);
}

static char *token_encode(const char *marker)
{
    size_t n = strlen(marker), cap = (n + 2) / 3 * 4 + 4;
    char *out = malloc(cap);
    if (out && base64_encode(marker, n, out, cap) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

static char *token_decode(const char *tok)
{
    size_t cap = strlen(tok) + 4;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    int n = base64_decode(tok, out, cap - 1);
    if (n < 0 || memchr(out, '\0', (size_t)n)) {
        free(out);
        return NULL;
    }
    out[n] = '\0';
    return out;
}

/* The echoed <MaxKeys>: the client's max-keys as sent, 1000 by default. */
static const char *list_max_keys(struct req *rq)
{
    const char *mk = req_query(rq, "max-keys");
    return mk && *mk ? mk : "1000";
}

/* <CommonPrefixes> of the page. */
static void list_prefixes(struct buf *b, const struct list_state *s)
{
    for (size_t i = 0; i < s->page.n; i++) {
        const struct be_list_entry *e = &s->page.entries[i];
        if (!e->is_prefix)
            continue;
        buf_puts(b, "<CommonPrefixes>");
        respond_xml_value(b, "Prefix", e->key, s->url);
        buf_puts(b, "</CommonPrefixes>");
    }
}

/* ListObjectVersions of a bucket that never had versioning, as S3 answers it: each object is
 * its one version, "null", the latest; no delete markers. Pages and markers are those of the
 * objects (a version-id-marker can only be "null", which adds nothing to the key-marker). */
static int list_versions_done(struct req *rq)
{
    struct list_state *s = rq->job_state;
    const char *prefix = req_query(rq, "prefix");
    const char *delim = req_query(rq, "delimiter");
    const char *km = req_query(rq, "key-marker");
    const char *vm = req_query(rq, "version-id-marker");
    struct buf b;
    char ts[32];
    buf_init(&b, 64u << 20);
    respond_xml_start(&b, "ListVersionsResult");
    buf_xml_elem(&b, "Name", rq->bucket);
    respond_xml_value(&b, "Prefix", prefix ? prefix : "", s->url);
    respond_xml_value(&b, "KeyMarker", km ? km : "", s->url);
    buf_xml_elem(&b, "VersionIdMarker", vm ? vm : "");
    if (s->page.truncated && s->page.next_marker) {
        respond_xml_value(&b, "NextKeyMarker", s->page.next_marker, s->url);
        buf_puts(&b, "<NextVersionIdMarker>null</NextVersionIdMarker>");
    }
    buf_printf(&b, "<MaxKeys>%s</MaxKeys>", list_max_keys(rq));
    if (delim && *delim)
        respond_xml_value(&b, "Delimiter", delim, s->url);
    if (s->url)
        buf_puts(&b, "<EncodingType>url</EncodingType>");
    buf_printf(&b, "<IsTruncated>%s</IsTruncated>", s->page.truncated ? "true" : "false");
    for (size_t i = 0; i < s->page.n; i++) {
        const struct be_list_entry *e = &s->page.entries[i];
        if (e->is_prefix)
            continue;
        buf_puts(&b, "<Version>");
        respond_xml_value(&b, "Key", e->key, s->url);
        buf_puts(&b, "<VersionId>null</VersionId><IsLatest>true</IsLatest>");
        s3c_iso8601(e->mtime_ns, ts);
        buf_xml_elem(&b, "LastModified", ts);
        buf_printf(&b, "<ETag>&quot;%s&quot;</ETag><Size>%llu</Size>", e->etag,
                   (unsigned long long)e->size);
        buf_puts(&b, OWNER_XML "<StorageClass>STANDARD</StorageClass></Version>");
    }
    list_prefixes(&b, s);
    buf_puts(&b, "</ListVersionsResult>");
    return respond_xml(rq, 200, &b);
}

static int list_done(struct req *rq)
{
    struct list_state *s = rq->job_state;
    const char *prefix = req_query(rq, "prefix");
    const char *delim = req_query(rq, "delimiter");
    struct buf b;
    char ts[32];
    if (s->versions)
        return list_versions_done(rq);
    buf_init(&b, 64u << 20);
    respond_xml_start(&b, "ListBucketResult");
    buf_xml_elem(&b, "Name", rq->bucket);
    respond_xml_value(&b, "Prefix", prefix ? prefix : "", s->url);
    if (s->v2) {
        const char *ct = req_query(rq, "continuation-token");
        const char *sa = req_query(rq, "start-after");
        if (ct)
            buf_xml_elem(&b, "ContinuationToken", ct);
        if (sa)
            respond_xml_value(&b, "StartAfter", sa, s->url);
        buf_printf(&b, "<KeyCount>%zu</KeyCount>", s->page.n);
    } else {
        const char *mk = req_query(rq, "marker");
        respond_xml_value(&b, "Marker", mk ? mk : "", s->url);
    }
    buf_printf(&b, "<MaxKeys>%s</MaxKeys>", list_max_keys(rq));
    if (delim && *delim)
        respond_xml_value(&b, "Delimiter", delim, s->url);
    if (s->url)
        buf_puts(&b, "<EncodingType>url</EncodingType>");
    buf_printf(&b, "<IsTruncated>%s</IsTruncated>", s->page.truncated ? "true" : "false");
    if (s->page.truncated && s->page.next_marker) {
        if (s->v2) {
            char *tok = token_encode(s->page.next_marker);
            if (tok)
                buf_xml_elem(&b, "NextContinuationToken", tok);
            free(tok);
        } else {
            respond_xml_value(&b, "NextMarker", s->page.next_marker, s->url);
        }
    }
    int owner = !s->v2 || (req_query(rq, "fetch-owner") &&
                           !strcasecmp(req_query(rq, "fetch-owner"), "true"));
    for (size_t i = 0; i < s->page.n; i++) {
        const struct be_list_entry *e = &s->page.entries[i];
        if (e->is_prefix)
            continue;
        buf_puts(&b, "<Contents>");
        respond_xml_value(&b, "Key", e->key, s->url);
        s3c_iso8601(e->mtime_ns, ts);
        buf_xml_elem(&b, "LastModified", ts);
        buf_printf(&b, "<ETag>&quot;%s&quot;</ETag><Size>%llu</Size>", e->etag,
                   (unsigned long long)e->size);
        if (owner)
            buf_puts(&b, OWNER_XML);
        buf_puts(&b, "<StorageClass>STANDARD</StorageClass></Contents>");
    }
    list_prefixes(&b, s);
    buf_puts(&b, "</ListBucketResult>");
    return respond_xml(rq, 200, &b);
}

static int h_list_objects_end(struct req *rq)
{
    if (rq->phase == PH_JOB_DONE)
        return list_done(rq);
    struct list_state *s = calloc(1, sizeof(*s));
    if (!s)
        return respond_error(rq, -ENOMEM);
    rq->job_state = s;
    rq->job_state_free = list_state_free;
    s->v2 = rq->op == OP_LIST_OBJECTS_V2;
    s->versions = rq->op == OP_LIST_VERSIONS;
    const char *et = req_query(rq, "encoding-type");
    if (et && *et && strcmp(et, "url"))
        return respond_error_msg(rq, -S3E_INVALID_ARGUMENT, "Invalid Encoding Method specified in Request");
    s->url = et && !strcmp(et, "url");
    s->max_keys = 1000;
    const char *mk = req_query(rq, "max-keys");
    if (mk && *mk) {
        char *end;
        long v = strtol(mk, &end, 10);
        if (*end || v < 0)
            return respond_error_msg(rq, -S3E_INVALID_ARGUMENT,
                                     "Provided max-keys not an integer or within integer range");
        s->max_keys = v > 1000 ? 1000 : (unsigned)v;
    }
    const char *m = NULL;
    if (s->v2) {
        const char *ct = req_query(rq, "continuation-token");
        if (ct) {
            s->marker = token_decode(ct);
            if (!s->marker)
                return respond_error_msg(rq, -S3E_INVALID_ARGUMENT,
                                         "The continuation token provided is incorrect");
        } else {
            m = req_query(rq, "start-after");
        }
    } else if (s->versions) {
        m = req_query(rq, "key-marker");
        const char *vm = req_query(rq, "version-id-marker");
        if (vm && *vm && (!m || !*m))
            return respond_error_msg(rq, -S3E_INVALID_ARGUMENT,
                                     "A version-id marker cannot be specified without a key "
                                     "marker.");
        if (vm && *vm && strcmp(vm, "null"))
            return respond_error_msg(rq, -S3E_INVALID_ARGUMENT, "Invalid version id specified");
    } else {
        m = req_query(rq, "marker");
    }
    if (m && !s->marker && !(s->marker = strdup(m)))
        return respond_error(rq, -ENOMEM);
    rq->phase = PH_JOB_DONE;
    int rc = req_run_job(rq, list_job);
    return rc ? respond_error(rq, rc) : MHD_YES;
}

/* ------------------------------------------------------------------ DeleteObjects */

struct delete_state {
    struct xml_delete_obj *objs;
    size_t n;
    int quiet;
    int *rcs;
};

static void delete_state_free(void *p)
{
    struct delete_state *s = p;
    if (!s)
        return;
    xml_delete_free(s->objs, s->n);
    free(s->rcs);
    free(s);
}

static void delete_objects_job(struct req *rq)
{
    struct delete_state *s = rq->job_state;
    struct server *srv = rq->srv;
    for (size_t i = 0; i < s->n; i++) {
        const char *k = s->objs[i].key, *v = s->objs[i].version_id;
        int rc = backend_check_key(k, strlen(k));
        if (!rc && v && *v && strcmp(v, "null"))
            rc = -S3E_INVALID_ARGUMENT; /* no versioning: "null" is every object's version */
        if (!rc)
            rc = object_delete(srv, rq->bucket, k);
        s->rcs[i] = rc;
        if (rc == -S3E_NO_SUCH_BUCKET) {
            rq->rc = rc;
            return;
        }
    }
}

static int delete_objects_done(struct req *rq)
{
    struct delete_state *s = rq->job_state;
    struct buf b;
    buf_init(&b, 16u << 20);
    respond_xml_start(&b, "DeleteResult");
    for (size_t i = 0; i < s->n; i++) {
        if (!s->rcs[i]) {
            if (s->quiet)
                continue;
            buf_puts(&b, "<Deleted>");
            buf_xml_elem(&b, "Key", s->objs[i].key);
            if (s->objs[i].version_id && *s->objs[i].version_id)
                buf_puts(&b, "<VersionId>null</VersionId>");
            buf_puts(&b, "</Deleted>");
        } else {
            const struct s3err_info *e = s3err_lookup(s->rcs[i], 0);
            buf_puts(&b, "<Error>");
            buf_xml_elem(&b, "Key", s->objs[i].key);
            if (s->objs[i].version_id && *s->objs[i].version_id)
                buf_xml_elem(&b, "VersionId", s->objs[i].version_id);
            buf_xml_elem(&b, "Code", e->code);
            buf_xml_elem(&b, "Message", s->rcs[i] == -S3E_INVALID_ARGUMENT
                                            ? "Invalid version id specified" : e->message);
            buf_puts(&b, "</Error>");
        }
    }
    buf_puts(&b, "</DeleteResult>");
    return respond_xml(rq, 200, &b);
}

static int h_delete_objects_end(struct req *rq)
{
    if (rq->phase == PH_JOB_DONE)
        return delete_objects_done(rq);
    struct delete_state *s = calloc(1, sizeof(*s));
    struct errmsg em = {{0}};
    if (!s)
        return respond_error(rq, -ENOMEM);
    rq->job_state = s;
    rq->job_state_free = delete_state_free;
    if (!rq->body.len)
        return respond_error(rq, -S3E_MISSING_REQUEST_BODY);
    /* As S3: the list of keys must be bound to the request (Content-MD5, an x-amz-checksum-*
     * or a literal x-amz-content-sha256, which server.c checked against the body); an
     * unbound one could be swapped in a captured request to delete other keys. */
    if (!reqbody_bound(rq))
        return respond_error_msg(rq, -S3E_INVALID_REQUEST,
                                 "Missing required header for this request: Content-MD5");
    int rc = xml_parse_delete(rq->body.p, rq->body.len, &s->quiet, &s->objs, &s->n, &em);
    if (rc)
        return respond_error_msg(rq, rc, em.buf[0] ? em.buf : NULL);
    s->rcs = calloc(s->n ? s->n : 1, sizeof(int));
    if (!s->rcs)
        return respond_error(rq, -ENOMEM);
    rq->phase = PH_JOB_DONE;
    rc = req_run_job(rq, delete_objects_job);
    return rc ? respond_error(rq, rc) : MHD_YES;
}

const struct handler h_list_buckets = {.end = h_list_buckets_end};
const struct handler h_bucket_create = {.body = body_collect, .end = h_bucket_create_end};
const struct handler h_bucket_delete = {.end = h_bucket_delete_end};
const struct handler h_bucket_head = {.end = h_bucket_head_end};
const struct handler h_bucket_location = {.end = h_bucket_location_end};
const struct handler h_bucket_versioning = {.end = h_bucket_versioning_end};
const struct handler h_bucket_acl = {.end = h_bucket_acl_end};
const struct handler h_bucket_put_acl = {.body = body_collect, .end = h_bucket_put_acl_end};
const struct handler h_list_objects = {.end = h_list_objects_end};
const struct handler h_delete_objects = {.body = body_collect, .end = h_delete_objects_end};
