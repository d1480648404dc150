/*
 * h_bucket.c: bucket-level S3 operations: ListBuckets, Create/Head/Delete
 * bucket, GetBucketLocation/Versioning/Acl, PutBucketAcl (only what is enforced),
 * ListObjects v1 and v2, ListObjectVersions (unversioned: each object once), and
 * DeleteObjects. Every call of the object layer runs on a worker; listings come
 * from the backend (objects/listing.c merges keys not yet drained).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/reqbody.h"
#include "http/respond.h"
#include "http/server.h"
#include "lib/checksum.h"
#include "lib/s3err.h"
#include "lib/xml.h"
#include "objects/bucket.h"
#include "objects/listing.h"
#include "objects/object.h"
#include "objects/objects.h"
#include "s3.h"

enum { PH_START = 0, PH_JOB_DONE };

#define OWNER_XML "<Owner><ID>s3cached</ID><DisplayName>s3cached</DisplayName></Owner>"

/* Runs @fn on a worker the first time; @done the second. */
static int run_then(struct req *rq, void (*fn)(struct req *), int (*done)(struct req *))
{
    if (rq->phase == PH_JOB_DONE)
        return done(rq);
    rq->phase = PH_JOB_DONE;
    int rc = req_run_job(rq, fn);
    return rc ? respond_error(rq, rc) : REQ_OK;
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
    rq->rc = bucket_list_all(rq->srv->obj, &s->b, &s->n);
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
    rq->rc = bucket_create(rq->srv->obj, rq->bucket);
}

static int bucket_create_done(struct req *rq)
{
    char loc[128];
    snprintf(loc, sizeof(loc), "/%s", rq->bucket);
    return respond_empty_header(rq, 200, "Location", loc);
}

static int h_bucket_create_end(struct req *rq)
{
    return run_then(rq, bucket_create_job, bucket_create_done);
}

static void bucket_delete_job(struct req *rq)
{
    struct objects_notice nt;
    s3_notice_begin(&nt);
    rq->rc = bucket_delete(rq->srv->obj, rq->bucket);
    s3_notice_end(rq, &nt);
}

static int bucket_delete_done(struct req *rq)
{
    return respond_empty(rq, 204);
}

static int h_bucket_delete_end(struct req *rq)
{
    return run_then(rq, bucket_delete_job, bucket_delete_done);
}

static void bucket_head_job(struct req *rq)
{
    rq->rc = bucket_head(rq->srv->obj, rq->bucket);
}

static int bucket_head_done(struct req *rq)
{
    return respond_empty_header(rq, 200, "x-amz-bucket-region", rq->srv->cf->region);
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
    return rq->rc ? respond_error(rq, rq->rc) : respond_empty(rq, 200);
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

static void list_job(struct req *rq)
{
    struct list_state *s = rq->job_state;
    struct be_list_req lr = {
        .bucket = rq->bucket,
        .prefix = req_query(rq, "prefix"),
        .delimiter = req_query(rq, "delimiter"),
        .marker = s->marker,
        .max_keys = s->max_keys,
    };
    if (lr.delimiter && !*lr.delimiter)
        lr.delimiter = NULL;
    rq->rc = listing_objects(rq->srv->obj, &lr, &s->page);
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
    /* encoding-type=url encodes the top-level <Prefix> of v2 (AWS: Delimiter, Prefix, Key,
     * StartAfter) but not of v1, where S3 and RGW answer it as sent and SDKs (botocore)
     * decode only Delimiter, Marker, NextMarker, Key and CommonPrefixes' Prefix. */
    respond_xml_value(&b, "Prefix", prefix ? prefix : "", s->url && s->v2);
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
    return rc ? respond_error(rq, rc) : REQ_OK;
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

/* Every key deleted in turn; the other gateways hear of all of them in one notice. */
static void delete_objects_job(struct req *rq)
{
    struct delete_state *s = rq->job_state;
    struct objects_notice nt;
    s3_notice_begin(&nt);
    for (size_t i = 0; i < s->n; i++) {
        const char *k = s->objs[i].key, *v = s->objs[i].version_id;
        int rc = backend_check_key(k, strlen(k));
        if (!rc && v && *v && strcmp(v, "null"))
            rc = -S3E_INVALID_ARGUMENT; /* no versioning: "null" is every object's version */
        if (!rc)
            rc = object_delete(rq->srv->obj, rq->bucket, k);
        s->rcs[i] = rc;
        if (rc == -S3E_NO_SUCH_BUCKET) {
            rq->rc = rc;
            break;
        }
    }
    s3_notice_end(rq, &nt);
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
    if (reqbody_md5_unsigned(rq))
        return respond_error_msg(rq, -S3E_ACCESS_DENIED,
                                 "With an unsigned payload, Content-MD5 must be signed (in "
                                 "SignedHeaders): else the key list can be swapped in a "
                                 "captured request");
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
    return rc ? respond_error(rq, rc) : REQ_OK;
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
