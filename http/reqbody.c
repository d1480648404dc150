/*
 * reqbody.c: binds the body of every request that upload.c does not take (the XML bodies
 * of DeleteObjects, CompleteMultipartUpload and CreateBucket, the admin JSON bodies, and
 * bodies nobody reads) to what its headers declare: a literal x-amz-content-sha256,
 * Content-MD5 and an x-amz-checksum-* value. Digests are taken as the bytes arrive; the
 * handler's end() runs only once they matched, so a signed request replayed with another
 * body does nothing. Owns the digest state in rq->rb; upload.c checks PUT and UploadPart.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/checksum.h"
#include "req.h"
#include "reqbody.h"
#include "lib/s3err.h"

#define REQBODY_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct reqbody {
    unsigned want;         /* CKSUM_WANT_* */
    enum cksum_algo algo;  /* x-amz-checksum-* header, or NONE */
    char want_md5_b64[32];
    char want_algo_b64[64];
    struct cksum *ck;      /* created with the first body byte */
    int bound;             /* the body is bound to the signature by one of them */
    int md5_unsigned;      /* only by a Content-MD5 the signature does not cover */
};

int reqbody_begin(struct req *rq)
{
    static const enum cksum_algo algos[] = {CKSUM_CRC32, CKSUM_CRC32C, CKSUM_SHA1, CKSUM_SHA256};
    unsigned char tmp[64];
    struct reqbody rb = {0};
    enum sigv4_payload pm = rq->auth.payload;
    if (pm == SIGV4_PAYLOAD_STREAMING || pm == SIGV4_PAYLOAD_STREAMING_TRAILER)
        return -S3E_NOT_IMPLEMENTED; /* chunk signatures are checked by uploads only */
    if (pm == SIGV4_PAYLOAD_SHA256 && rq->auth.payload_sha256[0])
        rb.want |= CKSUM_WANT_SHA256;
    const char *md5 = req_header(rq, "Content-MD5");
    if (md5) {
        if (strlen(md5) >= sizeof(rb.want_md5_b64) || base64_decode(md5, tmp, sizeof(tmp)) != 16)
            return -S3E_INVALID_DIGEST;
        snprintf(rb.want_md5_b64, sizeof(rb.want_md5_b64), "%s", md5);
        rb.want |= CKSUM_WANT_MD5;
    }
    for (size_t i = 0; i < ARRAY_SIZE(algos) && rb.algo == CKSUM_NONE; i++) {
        const char *v = req_header(rq, cksum_algo_header(algos[i]));
        if (!v)
            continue;
        if (strlen(v) >= sizeof(rb.want_algo_b64) ||
            base64_decode(v, tmp, sizeof(tmp)) != (int)cksum_algo_len(algos[i]))
            return -S3E_INVALID_REQUEST;
        snprintf(rb.want_algo_b64, sizeof(rb.want_algo_b64), "%s", v);
        rb.algo = algos[i];
    }
    if (!rb.want && rb.algo == CKSUM_NONE)
        return 0; /* nothing declared: nothing to keep */
    /* A Content-MD5 outside SigV4's SignedHeaders binds nothing: whoever captured the request
     * can send another body with that body's MD5 (x-amz-checksum-* headers are always signed,
     * sigv4.c; without a signature, under --anonymous, nothing is bound anyway). */
    int md5_binds = !rq->signed_by_key || rq->auth.md5_signed;
    rb.bound = (rb.want & CKSUM_WANT_SHA256) || rb.algo != CKSUM_NONE ||
               ((rb.want & CKSUM_WANT_MD5) && md5_binds);
    rb.md5_unsigned = !rb.bound && (rb.want & CKSUM_WANT_MD5);
    if (!(rq->rb = malloc(sizeof(rb))))
        return -ENOMEM;
    *rq->rb = rb;
    return 0;
}

int reqbody_bound(const struct req *rq)
{
    return rq->rb && rq->rb->bound;
}

int reqbody_md5_unsigned(const struct req *rq)
{
    return rq->rb && rq->rb->md5_unsigned;
}

int reqbody_update(struct req *rq, const char *data, size_t len)
{
    struct reqbody *rb = rq->rb;
    if (!rb || (!rb->want && rb->algo == CKSUM_NONE) || !len)
        return 0;
    if (!rb->ck && cksum_new(rb->want, rb->algo, &rb->ck))
        return -ENOMEM;
    cksum_update(rb->ck, data, len);
    return 0;
}

int reqbody_finish(struct req *rq)
{
    struct reqbody *rb = rq->rb;
    struct cksum_result res;
    if (!rb || (!rb->want && rb->algo == CKSUM_NONE))
        return 0;
    if (!rb->ck && rb->want == CKSUM_WANT_SHA256 && rb->algo == CKSUM_NONE) {
        /* no body, only the payload hash declared (every GET of most SDKs over HTTP) */
        rb->want = 0;
        return strcasecmp(rq->auth.payload_sha256, REQBODY_EMPTY_SHA256) ? -S3E_SHA256_MISMATCH
                                                                           : 0;
    }
    if (!rb->ck && cksum_new(rb->want, rb->algo, &rb->ck)) /* no body: digests of "" */
        return -ENOMEM;
    cksum_final(rb->ck, &res); /* a digest OpenSSL failed to finish stays "": no match */
    cksum_free(rb->ck);
    rb->ck = NULL;
    int rc = 0;
    if ((rb->want & CKSUM_WANT_SHA256) &&
        (!res.sha256_hex[0] || strcasecmp(rq->auth.payload_sha256, res.sha256_hex)))
        rc = -S3E_SHA256_MISMATCH;
    else if ((rb->want & CKSUM_WANT_MD5) &&
             (!res.md5_b64[0] || strcmp(rb->want_md5_b64, res.md5_b64)))
        rc = -S3E_BAD_DIGEST;
    else if (rb->algo != CKSUM_NONE &&
             (!res.algo_b64[0] || strcmp(rb->want_algo_b64, res.algo_b64)))
        rc = -S3E_BAD_DIGEST;
    rb->want = 0; /* checked: later end() calls of the same request pass */
    rb->algo = CKSUM_NONE;
    return rc;
}

void reqbody_free(struct req *rq)
{
    if (!rq->rb)
        return;
    cksum_free(rq->rb->ck);
    free(rq->rb);
    rq->rb = NULL;
}
