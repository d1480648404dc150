/*
 * reqbody.h: the bodies of the requests upload.c does not take (reqbody.c), bound to what
 * their headers declare.
 */
#ifndef S3C_REQBODY_H
#define S3C_REQBODY_H

#include <stddef.h>

struct req;

/* For a handler without checks_payload: reads what the headers declare about the body (a
 * literal x-amz-content-sha256 from rq->auth, Content-MD5, x-amz-checksum-*). 0, or
 * -S3E_INVALID_DIGEST / -S3E_INVALID_REQUEST (unparsable value), -S3E_NOT_IMPLEMENTED
 * (signed aws-chunked: only uploads check chunk signatures), -ENOMEM. */
int reqbody_begin(struct req *rq);
/* Whether reqbody_begin() found one of those: the body cannot be swapped unnoticed. */
int reqbody_bound(const struct req *rq);
/* Whether the only binding declared was a Content-MD5 the signature does not cover (not a
 * binding: reqbody_bound() is 0). */
int reqbody_md5_unsigned(const struct req *rq);
int reqbody_update(struct req *rq, const char *data, size_t len); /* 0 or -ENOMEM */
/* All body bytes are in: 0, -S3E_SHA256_MISMATCH or -S3E_BAD_DIGEST (once; later calls 0). */
int reqbody_finish(struct req *rq);
void reqbody_free(struct req *rq);

#endif
