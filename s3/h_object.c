/*
 * h_object.c: GetObject, HeadObject, PutObject, CopyObject, DeleteObject,
 * GetObjectAttributes and the object ACL and tagging stubs. Reads go through the
 * cache (read.c: never blocking an HTTP thread); bodies are staged by upload.c, and writes
 * run on a worker in the object layer (objects/object.c), which knows the write mode.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "http/respond.h"
#include "http/router.h"
#include "http/server.h"
#include "http/upload.h"
#include "lib/log.h"
#include "lib/range.h"
#include "lib/s3err.h"
#include "lib/xml.h"
#include "objects/object.h"
#include "objects/objects.h"
#include "read.h"
#include "s3.h"

enum { PH_START = 0, PH_JOB_DONE };

#define OWNER_ID "s3cached" /* the one owner of everything (ACL documents, listings) */

int version_id_ok(struct req *rq)
{
    const char *vid = req_query(rq, "versionId");
    return !vid || !*vid || !strcmp(vid, "null");
}

/* ------------------------------------------------------------------ GET / HEAD */

/* GET and HEAD (read.c): of the object, or of the tar member ?member= names (h_member.c). */
static int h_read_end(struct req *rq, int is_get)
{
    return read_end(rq, is_get, req_has_query(rq, "member") ? &read_member : &read_object);
}

static int h_get_end(struct req *rq)
{
    return h_read_end(rq, 1);
}

static int h_head_end(struct req *rq)
{
    return h_read_end(rq, 0);
}

const struct handler h_get = {.end = h_get_end};
const struct handler h_head = {.end = h_head_end};

/* ------------------------------------------------------------------ PUT */

struct put_state {
    struct be_meta meta;
    int rc;
};

static void put_state_free(void *p)
{
    free(p);
}

static struct put_state *put_state_new(struct req *rq)
{
    struct put_state *ps = calloc(1, sizeof(*ps));
    if (!ps)
        return NULL;
    rq->job_state = ps;
    rq->job_state_free = put_state_free;
    return ps;
}

static int h_put_begin(struct req *rq)
{
    int rc = acl_write_check(rq);
    if (rc)
        return rc;
    rc = upload_begin(rq, rq->srv->cf->max_object_size);
    return rc ? rc : upload_admit(rq);
}

static int h_put_body(struct req *rq, const char *data, size_t len)
{
    return upload_write(rq, data, len);
}

/* --- the write notice of a job (s3.h) ------------------------------------------------------ */

void s3_notice_begin(struct objects_notice *nt)
{
    objects_notice_begin(nt);
}

static void s3_notice_done(void *cls)
{
    req_job_release(cls);
}

void s3_notice_end(struct req *rq, struct objects_notice *nt)
{
    objects_notice_end(nt);
    req_job_hold(rq);
    if (!objects_notice_send(rq->srv->obj, nt, s3_notice_done, rq))
        req_job_release(rq); /* nothing to tell: the job's own hold remains */
    objects_notice_free(nt);
}

/* Worker: the staged body becomes the object (objects/object.c). */
static void put_job(struct req *rq)
{
    struct put_state *ps = rq->job_state;
    struct objects_notice nt;
    int taken = 0;
    s3_notice_begin(&nt);
    ps->rc = object_put(rq->srv->obj, rq->bucket, rq->key, upload_fd(rq), upload_path(rq),
                        upload_space(rq), &ps->meta, &taken);
    if (taken)
        upload_release_path(rq);
    s3_notice_end(rq, &nt);
}

static int h_put_end(struct req *rq)
{
    if (rq->phase == PH_JOB_DONE) {
        struct put_state *ps = rq->job_state;
        return ps->rc ? respond_error(rq, ps->rc)
                      : respond_stored(rq, ps->meta.etag, ps->meta.checksum_algo,
                                       ps->meta.checksum);
    }
    struct put_state *ps = put_state_new(rq);
    if (!ps)
        return respond_error(rq, -ENOMEM);
    int rc = upload_finish(rq, &ps->meta);
    if (!rc)
        rc = upload_meta_from_headers(rq, &ps->meta);
    if (rc)
        return respond_error(rq, rc);
    ps->meta.mtime_ns = s3c_real_ns();
    rq->phase = PH_JOB_DONE;
    rc = req_run_job(rq, put_job);
    return rc ? respond_error(rq, rc) : REQ_OK;
}

const struct handler h_put = {.begin = h_put_begin, .body = h_put_body, .end = h_put_end,
                              .checks_payload = 1};

/* ------------------------------------------------------------------ COPY */

/* Parses x-amz-copy-source ("/bucket/key" or "bucket/key", URL-encoded, optional
 * "?versionId=..."). 0 or -S3E_*. */
int copy_source_parse(struct req *rq, char **bucket, char **key)
{
    const char *src = req_header(rq, "x-amz-copy-source");
    if (!src)
        return -S3E_INVALID_ARGUMENT;
    if (*src == '/')
        src++;
    size_t n = strcspn(src, "?");
    if (src[n]) {
        const char *v = src + n + 1;
        if (strncmp(v, "versionId=", 10) || (strcmp(v + 10, "null") && v[10]))
            return -S3E_INVALID_ARGUMENT;
    }
    char *dec = url_decode(src, n);
    if (!dec)
        return -S3E_INVALID_ARGUMENT;
    char *slash = strchr(dec, '/');
    if (!slash || !slash[1]) {
        free(dec);
        return -S3E_INVALID_ARGUMENT;
    }
    *slash = '\0';
    if (backend_check_bucket_name(dec)) {
        free(dec);
        return -S3E_NO_SUCH_BUCKET;
    }
    int rc = backend_check_key(slash + 1, strlen(slash + 1));
    if (rc) {
        free(dec);
        return rc;
    }
    *bucket = strdup(dec);
    *key = strdup(slash + 1);
    free(dec);
    return *bucket && *key ? 0 : -ENOMEM;
}

void copy_source_cond(struct req *rq, struct cond_hdrs *c)
{
    c->if_match = req_header(rq, "x-amz-copy-source-if-match");
    c->if_none_match = req_header(rq, "x-amz-copy-source-if-none-match");
    c->if_modified_since = req_header(rq, "x-amz-copy-source-if-modified-since");
    c->if_unmodified_since = req_header(rq, "x-amz-copy-source-if-unmodified-since");
}

struct copy_state {
    char *src_bucket, *src_key;
    int replace;
    struct be_meta replace_meta;
    struct be_meta out;
    int rc;
};

static void copy_state_free(void *p)
{
    struct copy_state *cs = p;
    if (!cs)
        return;
    free(cs->src_bucket);
    free(cs->src_key);
    free(cs);
}

static void copy_job(struct req *rq)
{
    struct copy_state *cs = rq->job_state;
    struct cond_hdrs cond;
    struct objects_notice nt;
    copy_source_cond(rq, &cond);
    s3_notice_begin(&nt);
    cs->rc = object_copy(rq->srv->obj, cs->src_bucket, cs->src_key, rq->bucket, rq->key,
                         cs->replace ? &cs->replace_meta : NULL, &cond, &cs->out);
    s3_notice_end(rq, &nt);
}

static int h_copy_end(struct req *rq)
{
    struct copy_state *cs = rq->job_state;
    if (rq->phase == PH_JOB_DONE) {
        if (cs->rc)
            return respond_error(rq, cs->rc);
        struct buf b;
        char ts[32];
        buf_init(&b, 4096);
        respond_xml_start(&b, "CopyObjectResult");
        s3c_iso8601(cs->out.mtime_ns, ts);
        buf_xml_elem(&b, "LastModified", ts);
        buf_printf(&b, "<ETag>&quot;%s&quot;</ETag></CopyObjectResult>", cs->out.etag);
        return respond_xml(rq, 200, &b);
    }
    int arc = acl_write_check(rq);
    if (arc)
        return respond_error_msg(rq, arc, rq->err_msg);
    cs = calloc(1, sizeof(*cs));
    if (!cs)
        return respond_error(rq, -ENOMEM);
    rq->job_state = cs;
    rq->job_state_free = copy_state_free;
    int rc = copy_source_parse(rq, &cs->src_bucket, &cs->src_key);
    if (rc)
        return respond_error_msg(rq, rc, rc == -S3E_INVALID_ARGUMENT
                                             ? "Copy Source must mention the source bucket and key: sourcebucket/sourcekey"
                                             : NULL);
    const char *dir = req_header(rq, "x-amz-metadata-directive");
    if (dir && strcasecmp(dir, "COPY") && strcasecmp(dir, "REPLACE"))
        return respond_error_msg(rq, -S3E_INVALID_ARGUMENT,
                                 "Unknown metadata directive.");
    cs->replace = dir && !strcasecmp(dir, "REPLACE");
    if (cs->replace && (rc = upload_meta_from_headers(rq, &cs->replace_meta)))
        return respond_error(rq, rc);
    if (!cs->replace && !strcmp(cs->src_bucket, rq->bucket) && !strcmp(cs->src_key, rq->key))
        return respond_error_msg(
            rq, -S3E_INVALID_REQUEST,
            "This copy request is illegal because it is trying to copy an object to itself "
            "without changing the object's metadata, storage class, website redirect location "
            "or encryption attributes.");
    rq->phase = PH_JOB_DONE;
    rc = req_run_job(rq, copy_job);
    return rc ? respond_error(rq, rc) : REQ_OK;
}

const struct handler h_copy = {.end = h_copy_end};

/* ------------------------------------------------------------------ DELETE */

static void delete_job(struct req *rq)
{
    struct objects_notice nt;
    s3_notice_begin(&nt);
    rq->rc = object_delete(rq->srv->obj, rq->bucket, rq->key);
    s3_notice_end(rq, &nt);
}

static int h_delete_end(struct req *rq)
{
    if (rq->phase == PH_JOB_DONE)
        return rq->rc ? respond_error(rq, rq->rc) : respond_empty(rq, 204);
    /* x-amz-bypass-governance-retention needs nothing: there is no object lock */
    if (!version_id_ok(rq))
        return respond_error_msg(rq, -S3E_INVALID_ARGUMENT, "Invalid version id specified");
    rq->phase = PH_JOB_DONE;
    int rc = req_run_job(rq, delete_job);
    return rc ? respond_error(rq, rc) : REQ_OK;
}

const struct handler h_delete = {.end = h_delete_end};

/* ------------------------------------------------------------------ ACL (fixed) */

void acl_document(struct buf *b)
{
    respond_xml_start(b, "AccessControlPolicy");
    buf_puts(b, "<Owner><ID>" OWNER_ID "</ID><DisplayName>" OWNER_ID "</DisplayName></Owner>"
                "<AccessControlList><Grant><Grantee "
                "xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" "
                "xsi:type=\"CanonicalUser\"><ID>" OWNER_ID "</ID><DisplayName>" OWNER_ID
                "</DisplayName></Grantee><Permission>FULL_CONTROL</Permission></Grant>"
                "</AccessControlList></AccessControlPolicy>");
}

static const char *const acl_canned[] = {"private", "public-read", "public-read-write",
                                         "authenticated-read", "aws-exec-read",
                                         "bucket-owner-read", "bucket-owner-full-control",
                                         "log-delivery-write"};

int acl_put_check(struct req *rq, struct errmsg *em)
{
    static const char *const grant_hdrs[] = {"x-amz-grant-full-control", "x-amz-grant-read",
                                             "x-amz-grant-read-acp", "x-amz-grant-write",
                                             "x-amz-grant-write-acp"};
    const char *canned = req_header(rq, "x-amz-acl");
    int grants = 0;
    for (size_t i = 0; i < ARRAY_SIZE(grant_hdrs); i++)
        grants |= req_header(rq, grant_hdrs[i]) != NULL;
    if (canned && grants) {
        errmsg_set(em, "Specifying both Canned ACLs and Header Grants is not allowed");
        return -S3E_INVALID_REQUEST;
    }
    if ((canned || grants) && rq->body.len) {
        errmsg_set(em, "This request does not support content with an x-amz-acl or "
                       "x-amz-grant-* header");
        return -S3E_INVALID_REQUEST;
    }
    if (grants) {
        errmsg_set(em, "ACL grants are not supported: every bucket and object is private to "
                       "its owner");
        return -S3E_NOT_IMPLEMENTED;
    }
    if (canned) {
        size_t i;
        for (i = 0; i < ARRAY_SIZE(acl_canned) && strcmp(canned, acl_canned[i]); i++)
            ;
        if (i == ARRAY_SIZE(acl_canned)) {
            errmsg_set(em, "Invalid canned ACL in x-amz-acl");
            return -S3E_INVALID_ARGUMENT;
        }
        if (i) {
            errmsg_set(em, "Only the canned ACL 'private' is supported: every bucket and "
                           "object is private to its owner");
            return -S3E_NOT_IMPLEMENTED;
        }
        return 0;
    }
    if (!rq->body.len) {
        errmsg_set(em, "Your request was missing a required header: x-amz-acl (or an "
                       "AccessControlPolicy document)");
        return -S3E_MISSING_SECURITY_HEADER;
    }
    int rc = xml_parse_acl(rq->body.p, rq->body.len, OWNER_ID, em);
    if (rc == -S3E_NOT_IMPLEMENTED)
        errmsg_set(em, "Only a grant of FULL_CONTROL to the owner (ID " OWNER_ID ") is "
                       "supported: every bucket and object is private to its owner");
    return rc;
}

int acl_write_check(struct req *rq)
{
    static const char *const grant_hdrs[] = {"x-amz-grant-full-control", "x-amz-grant-read",
                                             "x-amz-grant-read-acp", "x-amz-grant-write-acp"};
    for (size_t i = 0; i < ARRAY_SIZE(grant_hdrs); i++)
        if (req_header(rq, grant_hdrs[i])) {
            snprintf(rq->err_msg, sizeof(rq->err_msg), "ACL grants are not supported (%s): "
                     "every object is private to its owner", grant_hdrs[i]);
            return -S3E_NOT_IMPLEMENTED;
        }
    const char *canned = req_header(rq, "x-amz-acl");
    if (!canned)
        return 0;
    size_t i;
    for (i = 0; i < ARRAY_SIZE(acl_canned) && strcmp(canned, acl_canned[i]); i++)
        ;
    if (i == ARRAY_SIZE(acl_canned)) {
        snprintf(rq->err_msg, sizeof(rq->err_msg), "Invalid canned ACL in x-amz-acl");
        return -S3E_INVALID_ARGUMENT;
    }
    /* the bucket's owner is the object's owner: both of these leave the object private */
    if (!strcmp(canned, "private") || !strcmp(canned, "bucket-owner-full-control") ||
        !strcmp(canned, "bucket-owner-read"))
        return 0;
    snprintf(rq->err_msg, sizeof(rq->err_msg), "The canned ACL '%s' is not supported: every "
             "object is private to its owner (private and bucket-owner-full-control are "
             "accepted)", canned);
    return -S3E_NOT_IMPLEMENTED;
}

/* The object must exist (as a HEAD through the cache sees it: a dirty one does). Its
 * metadata goes to rq->job_state when the handler made room for it there. */
static void exists_job(struct req *rq)
{
    struct be_meta m, *out = rq->job_state ? rq->job_state : &m;
    rq->rc = object_head(rq->srv->obj, rq->bucket, rq->key, out);
}

/* GetObjectAcl (a fixed owner-full-control document) and GetObjectTagging (no tags: s3cached
 * stores none; `aws s3 cp s3://... s3://...` asks before copying). */
static int h_object_doc_end(struct req *rq, int tagging)
{
    if (rq->phase != PH_JOB_DONE) {
        rq->phase = PH_JOB_DONE;
        int rc = req_run_job(rq, exists_job);
        return rc ? respond_error(rq, rc) : REQ_OK;
    }
    if (rq->rc)
        return respond_error(rq, rq->rc);
    struct buf b;
    buf_init(&b, 4096);
    if (tagging) {
        respond_xml_start(&b, "Tagging");
        buf_puts(&b, "<TagSet></TagSet></Tagging>");
    } else {
        acl_document(&b);
    }
    return respond_xml(rq, 200, &b);
}

static int h_object_acl_end(struct req *rq)
{
    return h_object_doc_end(rq, 0);
}

static int h_object_tagging_end(struct req *rq)
{
    return h_object_doc_end(rq, 1);
}

/* PutObjectAcl: what the gateway enforces anyway (private to the owner) succeeds and changes
 * nothing; any other grant is NotImplemented, so nobody believes an object became public. */
static int h_object_put_acl_end(struct req *rq)
{
    if (rq->phase != PH_JOB_DONE) {
        struct errmsg em = {{0}};
        int rc = acl_put_check(rq, &em);
        if (!rc && !version_id_ok(rq)) {
            rc = -S3E_INVALID_ARGUMENT;
            errmsg_set(&em, "Invalid version id specified");
        }
        if (rc)
            return respond_error_msg(rq, rc, em.buf[0] ? em.buf : NULL);
        rq->phase = PH_JOB_DONE;
        rc = req_run_job(rq, exists_job);
        return rc ? respond_error(rq, rc) : REQ_OK;
    }
    return rq->rc ? respond_error(rq, rq->rc) : respond_empty(rq, 200);
}

const struct handler h_object_acl = {.end = h_object_acl_end};
const struct handler h_object_put_acl = {.body = body_collect, .end = h_object_put_acl_end};
const struct handler h_object_tagging = {.end = h_object_tagging_end};

/* ------------------------------------------------------------------ GetObjectAttributes */

enum {
    ATTR_ETAG = 1, ATTR_CHECKSUM = 2, ATTR_PARTS = 4, ATTR_STORAGE_CLASS = 8, ATTR_SIZE = 16,
};

/* x-amz-object-attributes ("ETag,ObjectSize", names as S3 spells them) -> ATTR_* bits; 0 when
 * missing, empty or naming anything else. */
static unsigned attributes_parse(const char *v)
{
    static const struct { const char *name; unsigned bit; } names[] = {
        {"ETag", ATTR_ETAG}, {"Checksum", ATTR_CHECKSUM}, {"ObjectParts", ATTR_PARTS},
        {"StorageClass", ATTR_STORAGE_CLASS}, {"ObjectSize", ATTR_SIZE},
    };
    unsigned bits = 0;
    while (v && *v) {
        while (*v == ' ' || *v == '\t')
            v++;
        size_t n = strcspn(v, ","), l = n;
        while (l && (v[l - 1] == ' ' || v[l - 1] == '\t'))
            l--;
        size_t i;
        for (i = 0; i < ARRAY_SIZE(names); i++)
            if (l == strlen(names[i].name) && !memcmp(v, names[i].name, l))
                break;
        if (i == ARRAY_SIZE(names))
            return 0;
        bits |= names[i].bit;
        v += n + (v[n] == ',');
    }
    return bits;
}

/* A header holding a number 0..@max (larger is @max): 0, or -1 when malformed; absent or
 * empty leaves *@out. */
static int attributes_uint(struct req *rq, const char *name, unsigned max, unsigned *out)
{
    const char *v = req_header(rq, name);
    char *end;
    if (!v || !*v)
        return 0;
    if (*v < '0' || *v > '9')
        return -1;
    unsigned long long n = strtoull(v, &end, 10);
    if (*end)
        return -1;
    *out = n > max ? max : (unsigned)n;
    return 0;
}

static int h_object_attributes_end(struct req *rq)
{
    unsigned max_parts = 1000, marker = 0;
    unsigned want = attributes_parse(req_header(rq, "x-amz-object-attributes"));
    if (rq->phase != PH_JOB_DONE) {
        if (!want)
            return respond_error_msg(rq, -S3E_INVALID_ARGUMENT,
                                     req_header(rq, "x-amz-object-attributes") &&
                                             *req_header(rq, "x-amz-object-attributes")
                                         ? "Invalid attribute name specified."
                                         : "The x-amz-object-attributes header specifying the "
                                           "attributes to be retrieved is either missing or "
                                           "empty");
        if (attributes_uint(rq, "x-amz-max-parts", 1000, &max_parts))
            return respond_error_msg(rq, -S3E_INVALID_ARGUMENT,
                                     "x-amz-max-parts must be a number from 0 to 1000");
        if (attributes_uint(rq, "x-amz-part-number-marker", BE_MAX_PARTS, &marker))
            return respond_error_msg(rq, -S3E_INVALID_ARGUMENT,
                                     "x-amz-part-number-marker must be a number");
        if (!version_id_ok(rq))
            return respond_error_msg(rq, -S3E_INVALID_ARGUMENT, "Invalid version id specified");
        rq->job_state = calloc(1, sizeof(struct be_meta));
        if (!rq->job_state)
            return respond_error(rq, -ENOMEM);
        rq->job_state_free = free;
        rq->phase = PH_JOB_DONE;
        int rc = req_run_job(rq, exists_job);
        return rc ? respond_error(rq, rc) : REQ_OK;
    }
    if (rq->rc)
        return respond_error(rq, rq->rc);
    (void)attributes_uint(rq, "x-amz-max-parts", 1000, &max_parts);
    (void)attributes_uint(rq, "x-amz-part-number-marker", BE_MAX_PARTS, &marker);
    const struct be_meta *m = rq->job_state;
    struct buf b;
    buf_init(&b, 1u << 20);
    respond_xml_start(&b, "GetObjectAttributesResponse");
    if (want & ATTR_ETAG)
        buf_xml_elem(&b, "ETag", m->etag); /* unquoted, as S3 answers it here */
    if ((want & ATTR_CHECKSUM) && m->checksum_algo[0] && m->checksum[0])
        buf_printf(&b, "<Checksum><Checksum%s>%s</Checksum%s></Checksum>", m->checksum_algo,
                   m->checksum, m->checksum_algo);
    if ((want & ATTR_PARTS) && m->parts_count) {
        /* Parts are listed (number and size) when their sizes are known: all of one size but
         * the last, what SDKs upload. No per-part checksums are kept. */
        unsigned n = m->parts_count, last = marker;
        int listed = m->part_size != 0;
        buf_printf(&b, "<ObjectParts><PartsCount>%u</PartsCount>", n);
        if (listed) {
            struct buf pb;
            buf_init(&pb, 1u << 20);
            for (unsigned i = marker + 1; i <= n && i - marker <= max_parts; i++) {
                uint64_t size = i < n ? m->part_size : m->size - (uint64_t)(n - 1) * m->part_size;
                buf_printf(&pb, "<Part><PartNumber>%u</PartNumber><Size>%llu</Size></Part>", i,
                           (unsigned long long)size);
                last = i;
            }
            buf_printf(&b, "<PartNumberMarker>%u</PartNumberMarker>", marker);
            if (last < n)
                buf_printf(&b, "<NextPartNumberMarker>%u</NextPartNumberMarker>", last);
            buf_printf(&b, "<MaxParts>%u</MaxParts><IsTruncated>%s</IsTruncated>", max_parts,
                       last < n ? "true" : "false");
            if (pb.p)
                buf_append(&b, pb.p, pb.len);
            buf_free(&pb);
        }
        buf_puts(&b, "</ObjectParts>");
    }
    if (want & ATTR_STORAGE_CLASS)
        buf_puts(&b, "<StorageClass>STANDARD</StorageClass>");
    if (want & ATTR_SIZE)
        buf_printf(&b, "<ObjectSize>%llu</ObjectSize>", (unsigned long long)m->size);
    buf_puts(&b, "</GetObjectAttributesResponse>");
    /* Last-Modified is a header of this answer: the body is not the object */
    char date[32];
    s3c_http_date(m->mtime_ns / 1000000000ll, date);
    return respond_xml_headers(rq, 200, &b, "Last-Modified", date);
}

const struct handler h_object_attributes = {.end = h_object_attributes_end};
