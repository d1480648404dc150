/*
 * ops.c: which handler answers each S3 operation: the table the HTTP layer is given at start
 * (http/ knows operations, not the handlers above it).
 */
#include "admin/admin.h"
#include "ops.h"
#include "s3/s3.h"

const struct handler *const ops_handlers[OP__N] = {
    [OP_ADMIN] = &h_admin,
    [OP_OPTIONS] = &h_options,
    [OP_LIST_BUCKETS] = &h_list_buckets,
    [OP_BUCKET_CREATE] = &h_bucket_create,
    [OP_BUCKET_DELETE] = &h_bucket_delete,
    [OP_BUCKET_HEAD] = &h_bucket_head,
    [OP_BUCKET_LOCATION] = &h_bucket_location,
    [OP_BUCKET_VERSIONING] = &h_bucket_versioning,
    [OP_BUCKET_ACL] = &h_bucket_acl,
    [OP_BUCKET_PUT_ACL] = &h_bucket_put_acl,
    [OP_LIST_OBJECTS] = &h_list_objects,
    [OP_LIST_OBJECTS_V2] = &h_list_objects,
    [OP_LIST_VERSIONS] = &h_list_objects,
    [OP_LIST_UPLOADS] = &h_list_uploads,
    [OP_DELETE_OBJECTS] = &h_delete_objects,
    [OP_GET] = &h_get,
    [OP_HEAD] = &h_head,
    [OP_PUT] = &h_put,
    [OP_COPY] = &h_copy,
    [OP_DELETE] = &h_delete,
    [OP_OBJECT_ACL] = &h_object_acl,
    [OP_OBJECT_PUT_ACL] = &h_object_put_acl,
    [OP_OBJECT_ATTRIBUTES] = &h_object_attributes,
    [OP_OBJECT_TAGGING] = &h_object_tagging,
    [OP_MP_CREATE] = &h_mp_create,
    [OP_MP_PART] = &h_mp_part,
    [OP_MP_PART_COPY] = &h_mp_part_copy,
    [OP_MP_COMPLETE] = &h_mp_complete,
    [OP_MP_ABORT] = &h_mp_abort,
    [OP_MP_LIST_PARTS] = &h_mp_list_parts,
    [OP_BATCH] = &h_batch,
};
