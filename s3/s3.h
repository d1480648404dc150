/*
 * s3.h: the S3 API's handlers (s3/h_object.c, h_bucket.c, h_multipart.c), which cmd/ maps to
 * the operations, and what they share. A handler parses the request, calls the object layer
 * (objects/) on a worker, and answers through http/respond.h.
 */
#ifndef S3C_S3_H
#define S3C_S3_H

#include "http/req.h"
#include "lib/buf.h"
#include "lib/range.h"
#include "lib/s3c.h"

extern const struct handler h_get, h_head, h_put, h_copy, h_delete, h_object_acl,
    h_object_put_acl, h_object_tagging, h_object_attributes;
extern const struct handler h_list_buckets, h_bucket_create, h_bucket_delete, h_bucket_head,
    h_bucket_location, h_bucket_versioning, h_bucket_acl, h_bucket_put_acl, h_list_objects,
    h_list_uploads, h_delete_objects;
extern const struct handler h_batch; /* h_batch.c */
extern const struct handler h_mp_create, h_mp_part, h_mp_part_copy, h_mp_complete, h_mp_abort,
    h_mp_list_parts;

/* The body() of the handlers whose body is an XML document (body.c): appends @data to
 * rq->body. 0, -ENOMEM, or past XML_BODY_MAX the operation's malformed-document error
 * (-S3E_MALFORMED_ACL for PutObjectAcl, else -S3E_MALFORMED_XML). */
int body_collect(struct req *rq, const char *data, size_t len);

/* Shared by the object and multipart handlers (h_object.c). */
/* Parses x-amz-copy-source ("/bucket/key" or "bucket/key", URL-encoded, optional
 * "?versionId=null"). 0 or -S3E_*. */
int copy_source_parse(struct req *rq, char **bucket, char **key);
/* The x-amz-copy-source-if-* headers of @rq into *@c (pointers into the request). */
void copy_source_cond(struct req *rq, struct cond_hdrs *c);
void acl_document(struct buf *b);
/* Without versioning every object has one version, "null" (S3's id of a version made while a
 * bucket was never versioned): whether ?versionId is absent, empty or "null" (any other id is
 * refused: 400 InvalidArgument). */
int version_id_ok(struct req *rq);
/* Put{Bucket,Object}Acl's request (x-amz-acl, x-amz-grant-*, rq->body): 0 when it asks for what
 * is enforced anyway (canned "private", or a document granting the owner FULL_CONTROL and
 * nothing else); -S3E_NOT_IMPLEMENTED for any other grant; -S3E_INVALID_REQUEST,
 * -S3E_INVALID_ARGUMENT, -S3E_MISSING_SECURITY_HEADER or -S3E_MALFORMED_ACL for a bad one.
 * @em: the message for the client. */
int acl_put_check(struct req *rq, struct errmsg *em);
/* The ACL headers of a write that creates an object (PutObject, CopyObject,
 * CreateMultipartUpload): none, or x-amz-acl private / bucket-owner-full-control /
 * bucket-owner-read (the one owner keeps the object private) are 0; any other canned ACL or
 * an x-amz-grant-* header is -S3E_NOT_IMPLEMENTED and a bad canned ACL -S3E_INVALID_ARGUMENT,
 * with rq->err_msg saying why: nobody is led to believe an object became public. */
int acl_write_check(struct req *rq);
/* A write job's notice to the other gateways (cluster mode): s3_notice_begin() before the
 * job's calls of the object layer collects the changes they make; s3_notice_end() after them
 * sends them, one notice per gateway, and holds the request (req_job_hold) until every
 * gateway confirmed or --peer-timeout passed: the client is answered after that, as before,
 * but no worker waits meanwhile. */
struct objects_notice;
void s3_notice_begin(struct objects_notice *nt);
void s3_notice_end(struct req *rq, struct objects_notice *nt);

#endif
