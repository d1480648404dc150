/*
 * router.h: (method, path, query, Host) -> S3 operation, bucket and key (router.c). Pure: it
 * reads the request's method, decoded query and headers, and knows no handler (cmd/ maps each
 * operation to its handler).
 */
#ifndef S3C_ROUTER_H
#define S3C_ROUTER_H

#include <stddef.h>

struct req;

enum op {
    OP_NONE = 0,
    OP_ADMIN,
    OP_LIST_BUCKETS,
    OP_BUCKET_CREATE, OP_BUCKET_DELETE, OP_BUCKET_HEAD, OP_BUCKET_LOCATION,
    OP_BUCKET_VERSIONING, OP_BUCKET_ACL, OP_BUCKET_PUT_ACL,
    OP_LIST_OBJECTS, OP_LIST_OBJECTS_V2, OP_LIST_VERSIONS, OP_LIST_UPLOADS, OP_DELETE_OBJECTS,
    OP_GET, OP_HEAD, OP_PUT, OP_COPY, OP_DELETE, OP_OBJECT_ACL, OP_OBJECT_PUT_ACL,
    OP_OBJECT_TAGGING, OP_OBJECT_ATTRIBUTES,
    OP_MP_CREATE, OP_MP_PART, OP_MP_PART_COPY, OP_MP_COMPLETE, OP_MP_ABORT, OP_MP_LIST_PARTS,
    OP_OPTIONS,
    OP_BATCH, /* POST /?batch or /bucket?batch: an ordered TAR of many objects or members */
    OP__N
};
/* The S3 name of @op ("GetObject"), "-" for none. */
const char *op_name(enum op op);

/* Decodes @url (the raw path) and picks rq->op, rq->bucket, rq->key from it, rq->method,
 * rq->query (already decoded) and @host (virtual-hosted style when it ends in
 * .@vhost_domain; NULL or "" for path style only). Sets rq->raw_path and rq->path (NULL when
 * the path cannot be decoded). 0 or -S3E_*. */
int router_route(struct req *rq, const char *url, const char *host, const char *vhost_domain);
/* Percent-decodes @s (len bytes) into a new string; NULL on bad escapes or embedded NUL. */
char *url_decode(const char *s, size_t len);

#endif
