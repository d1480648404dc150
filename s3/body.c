/*
 * body.c: the request bodies the S3 handlers read whole: the XML documents of CreateBucket,
 * PutBucketAcl, PutObjectAcl, DeleteObjects and CompleteMultipartUpload, collected into
 * rq->body within its cap (XML_BODY_MAX). Object bodies are not here: upload.c stages them.
 */
#include <errno.h>

#include "http/router.h"
#include "lib/s3err.h"
#include "s3.h"

int body_collect(struct req *rq, const char *data, size_t len)
{
    int rc = buf_append(&rq->body, data, len);
    if (rc != -EMSGSIZE)
        return rc;
    /* a document past the cap is a malformed one: PutObjectAcl's is an ACL */
    return rq->op == OP_OBJECT_PUT_ACL ? -S3E_MALFORMED_ACL : -S3E_MALFORMED_XML;
}
