/*
 * router.c: (method, path, query, Host) -> S3 operation, bucket and key.
 * Decodes the raw path (libmicrohttpd hands it over undecoded; req.c decodes the
 * query with url_decode()), validates bucket names and keys, and reserves the
 * /_/ prefix for admin. Which handler serves an operation is cmd/'s table.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backends/backend.h"
#include "lib/hex.h"
#include "req.h"
#include "router.h"
#include "lib/s3err.h"

static const char *const op_names[] = {
    [OP_NONE] = "-", [OP_ADMIN] = "Admin", [OP_LIST_BUCKETS] = "ListBuckets",
    [OP_BUCKET_CREATE] = "CreateBucket", [OP_BUCKET_DELETE] = "DeleteBucket",
    [OP_BUCKET_HEAD] = "HeadBucket", [OP_BUCKET_LOCATION] = "GetBucketLocation",
    [OP_BUCKET_VERSIONING] = "GetBucketVersioning", [OP_BUCKET_ACL] = "GetBucketAcl",
    [OP_BUCKET_PUT_ACL] = "PutBucketAcl",
    [OP_LIST_OBJECTS] = "ListObjects", [OP_LIST_OBJECTS_V2] = "ListObjectsV2",
    [OP_LIST_VERSIONS] = "ListObjectVersions",
    [OP_LIST_UPLOADS] = "ListMultipartUploads", [OP_DELETE_OBJECTS] = "DeleteObjects",
    [OP_GET] = "GetObject", [OP_HEAD] = "HeadObject", [OP_PUT] = "PutObject",
    [OP_COPY] = "CopyObject", [OP_DELETE] = "DeleteObject", [OP_OBJECT_ACL] = "GetObjectAcl",
    [OP_OBJECT_PUT_ACL] = "PutObjectAcl", [OP_OBJECT_TAGGING] = "GetObjectTagging",
    [OP_OBJECT_ATTRIBUTES] = "GetObjectAttributes",
    [OP_MP_CREATE] = "CreateMultipartUpload", [OP_MP_PART] = "UploadPart",
    [OP_MP_PART_COPY] = "UploadPartCopy", [OP_MP_COMPLETE] = "CompleteMultipartUpload",
    [OP_MP_ABORT] = "AbortMultipartUpload", [OP_MP_LIST_PARTS] = "ListParts",
    [OP_OPTIONS] = "Options", [OP_BATCH] = "GetBatch",
};

const char *op_name(enum op op)
{
    if ((size_t)op < ARRAY_SIZE(op_names) && op_names[op])
        return op_names[op];
    return "-";
}

char *url_decode(const char *s, size_t len)
{
    char *out = malloc(len + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%') {
            if (i + 2 >= len)
                goto bad;
            int h = hex_digit((unsigned char)s[i + 1]);
            int l = hex_digit((unsigned char)s[i + 2]);
            if (h < 0 || l < 0)
                goto bad;
            char c = (char)(h * 16 + l);
            if (c == '\0')
                goto bad;
            *o++ = c;
            i += 2;
        } else {
            *o++ = s[i];
        }
    }
    *o = '\0';
    return out;
bad:
    free(out);
    return NULL;
}

/* Bucket from a virtual-hosted Host header ("bucket.domain[:port]"), or NULL. */
static char *router_vhost_bucket(const char *dom, const char *host)
{
    if (!dom || !*dom || !host)
        return NULL;
    size_t hl = strcspn(host, ":");
    if (host[0] == '[')
        return NULL;
    size_t dl = strlen(dom);
    if (hl <= dl + 1 || strncasecmp(host + hl - dl, dom, dl) || host[hl - dl - 1] != '.')
        return NULL;
    size_t bl = hl - dl - 1;
    char *b = malloc(bl + 1);
    if (!b)
        return NULL;
    for (size_t i = 0; i < bl; i++)
        b[i] = (char)((host[i] >= 'A' && host[i] <= 'Z') ? host[i] + 32 : host[i]);
    b[bl] = '\0';
    return b;
}

static int method_is(const char *m, const char *want)
{
    return !strcmp(m, want);
}

static enum op router_bucket_op(struct req *rq)
{
    const char *m = rq->method;
    if (method_is(m, "GET")) {
        if (req_has_query(rq, "location"))
            return OP_BUCKET_LOCATION;
        if (req_has_query(rq, "versioning"))
            return OP_BUCKET_VERSIONING;
        if (req_has_query(rq, "acl"))
            return OP_BUCKET_ACL;
        if (req_has_query(rq, "uploads"))
            return OP_LIST_UPLOADS;
        if (req_has_query(rq, "versions"))
            return OP_LIST_VERSIONS;
        static const char *const unsupported[] = {
            "policy", "lifecycle", "cors", "website", "tagging", "notification", "replication",
            "encryption", "logging", "object-lock", "requestPayment", "accelerate",
            "analytics", "inventory", "metrics", "intelligent-tiering", "ownershipControls",
            "publicAccessBlock", "policyStatus"};
        for (size_t i = 0; i < ARRAY_SIZE(unsupported); i++)
            if (req_has_query(rq, unsupported[i]))
                return OP_NONE;
        const char *lt = req_query(rq, "list-type");
        if (lt && !strcmp(lt, "2"))
            return OP_LIST_OBJECTS_V2;
        return OP_LIST_OBJECTS;
    }
    if (method_is(m, "HEAD"))
        return OP_BUCKET_HEAD;
    if (method_is(m, "PUT")) {
        if (req_has_query(rq, "acl"))
            return OP_BUCKET_PUT_ACL;
        if (rq->n_query == 0 || req_has_query(rq, "x-id"))
            return OP_BUCKET_CREATE;
        return OP_NONE;
    }
    if (method_is(m, "DELETE"))
        return rq->n_query == 0 || req_has_query(rq, "x-id") ? OP_BUCKET_DELETE : OP_NONE;
    if (method_is(m, "POST") && req_has_query(rq, "delete"))
        return OP_DELETE_OBJECTS;
    if (method_is(m, "POST") && req_has_query(rq, "batch"))
        return OP_BATCH;
    if (method_is(m, "OPTIONS"))
        return OP_OPTIONS;
    return OP_NONE;
}

static enum op router_object_op(struct req *rq)
{
    const char *m = rq->method;
    int upload_id = req_has_query(rq, "uploadId");
    if (method_is(m, "GET")) {
        if (upload_id)
            return OP_MP_LIST_PARTS;
        if (req_has_query(rq, "acl"))
            return OP_OBJECT_ACL;
        if (req_has_query(rq, "tagging"))
            return OP_OBJECT_TAGGING;
        if (req_has_query(rq, "attributes"))
            return OP_OBJECT_ATTRIBUTES;
        if (req_has_query(rq, "retention") ||
            req_has_query(rq, "legal-hold") || req_has_query(rq, "torrent"))
            return OP_NONE;
        return OP_GET;
    }
    if (method_is(m, "HEAD"))
        return OP_HEAD;
    if (method_is(m, "PUT")) {
        if (req_has_query(rq, "acl"))
            return OP_OBJECT_PUT_ACL;
        if (req_has_query(rq, "tagging") ||
            req_has_query(rq, "retention") || req_has_query(rq, "legal-hold"))
            return OP_NONE;
        int copy = req_header(rq, "x-amz-copy-source") != NULL;
        if (upload_id || req_has_query(rq, "partNumber"))
            return copy ? OP_MP_PART_COPY : OP_MP_PART;
        return copy ? OP_COPY : OP_PUT;
    }
    if (method_is(m, "POST")) {
        if (req_has_query(rq, "uploads"))
            return OP_MP_CREATE;
        if (upload_id)
            return OP_MP_COMPLETE;
        return OP_NONE;
    }
    if (method_is(m, "DELETE"))
        return upload_id ? OP_MP_ABORT : OP_DELETE;
    if (method_is(m, "OPTIONS"))
        return OP_OPTIONS;
    return OP_NONE;
}

int router_route(struct req *rq, const char *url, const char *host, const char *vhost_domain)
{
    rq->raw_path = strdup(url);
    rq->path = url_decode(url, strlen(url));
    if (!rq->path)
        return -S3E_INVALID_URI;
    if (rq->path[0] != '/')
        return -S3E_INVALID_URI;
    if (!strncmp(rq->path, "/_/", 3) || !strcmp(rq->path, "/_")) {
        rq->op = OP_ADMIN;
        return 0;
    }
    const char *p = rq->path + 1;
    char *vb = router_vhost_bucket(vhost_domain, host);
    if (vb) {
        rq->bucket = vb;
        rq->vhost = 1;
        if (*p)
            rq->key = strdup(p);
    } else if (*p) {
        size_t bl = strcspn(p, "/");
        rq->bucket = strndup(p, bl);
        if (p[bl] == '/' && p[bl + 1])
            rq->key = strdup(p + bl + 1);
    }
    if ((rq->bucket && !*rq->bucket) || (rq->key && !*rq->key))
        return -S3E_INVALID_URI;
    if (!rq->bucket) {
        if (method_is(rq->method, "GET"))
            rq->op = OP_LIST_BUCKETS;
        else if (method_is(rq->method, "POST") && req_has_query(rq, "batch"))
            rq->op = OP_BATCH;
        else if (method_is(rq->method, "OPTIONS"))
            rq->op = OP_OPTIONS;
        else
            return -S3E_METHOD_NOT_ALLOWED;
        return 0;
    }
    int rc = backend_check_bucket_name(rq->bucket);
    if (rc) {
        /* Unknown bucket names that are not even valid: reads say NoSuchBucket like S3. */
        if (!method_is(rq->method, "PUT") || rq->key)
            return -S3E_NO_SUCH_BUCKET;
        return rc;
    }
    if (rq->key) {
        rc = backend_check_key(rq->key, strlen(rq->key));
        if (rc)
            return rc;
        rq->op = router_object_op(rq);
    } else {
        rq->op = router_bucket_op(rq);
    }
    if (rq->op == OP_NONE)
        return -S3E_NOT_IMPLEMENTED;
    return 0;
}
