/*
 * sigv4.h: AWS Signature Version 4, pure (no I/O, no globals). Verifies the
 * Authorization header and presigned URLs for the front end, and signs
 * requests for the S3 backend, with the same canonicalisation code.
 */
#ifndef S3C_SIGV4_H
#define S3C_SIGV4_H

#include <stdint.h>
#include <stddef.h>
#include <time.h>
#include "lib/s3c.h"

struct sigv4_kv {
    const char *name;
    const char *value; /* query: NULL when the parameter had no '=' ("?uploads") */
};

/* A request as received. Path and query are DECODED (percent-decoding done by the caller; for the
 * query '+' is left as is); sigv4 re-encodes them the AWS way (RFC 3986 unreserved kept, '/' kept
 * in the path, everything else %XX upper case). Headers are as received, names in any case;
 * repeated names are allowed (their values are joined with ','). */
struct sigv4_input {
    const char *method;
    const char *path;
    const struct sigv4_kv *query;
    size_t n_query;
    const struct sigv4_kv *headers;
    size_t n_headers;
    /* Verification only: the credential scope this server accepts. NULL accepts any region
     * (service) (the AWS test suite signs for the service "service"). */
    const char *region;
    const char *service;
};

enum sigv4_payload {
    SIGV4_PAYLOAD_SHA256,            /* x-amz-content-sha256 is a hex digest: check the body */
    SIGV4_PAYLOAD_UNSIGNED,          /* UNSIGNED-PAYLOAD (and every presigned URL) */
    SIGV4_PAYLOAD_STREAMING,         /* STREAMING-AWS4-HMAC-SHA256-PAYLOAD */
    SIGV4_PAYLOAD_STREAMING_TRAILER, /* STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER */
    SIGV4_PAYLOAD_UNSIGNED_TRAILER,  /* STREAMING-UNSIGNED-PAYLOAD-TRAILER */
};

/* What a verified request proved; the streaming decoder needs the key, scope and seed. */
struct sigv4_result {
    char access_key[129];
    enum sigv4_payload payload;
    char payload_sha256[65]; /* lower-case hex when payload == SIGV4_PAYLOAD_SHA256 */
    uint8_t signing_key[32];
    char seed_signature[65];
    char amz_date[17]; /* YYYYMMDDTHHMMSSZ */
    char scope[128];   /* YYYYMMDD/region/service/aws4_request */
    int presigned;
    /* Why a well-formed request was refused, for the error document: */
    int region_wrong;     /* the scope names another region than sigv4_input.region */
    int refused;          /* region or service not ours, or a header not signed */
    char not_signed[128]; /* x-amz-* (and host) headers sent but not signed, ','-joined */
    int md5_signed;       /* Content-MD5 is covered by the signature (V2 always signs it) */
};

/* Looks up the secret of @access_key; NULL when unknown. */
typedef const char *sigv4_secret_f(void *cls, const char *access_key);

/* Verifies @in at time @now. Returns 0 and fills @out, or:
 *  -S3E_ACCESS_DENIED          no Authorization header and no X-Amz-Algorithm query; or host or
 *                              an x-amz-* header the request carries is not in SignedHeaders
 *                              (out->not_signed names them, out->refused is set)
 *  -S3E_AUTH_HEADER_MALFORMED  unparsable Authorization (missing parts, bad credential scope, a
 *                              scope date other than the request's date); a scope region or
 *                              service other than @in->region / @in->service (out->refused,
 *                              and out->region_wrong for the region; @em has S3's message)
 *  -S3E_AUTH_QUERY_MALFORMED   the same for a presigned query; X-Amz-Expires not a number
 *  -S3E_EXPIRES_OUT_OF_RANGE   X-Amz-Expires a number outside 1..604800 (403, as S3)
 *  -S3E_NOT_IMPLEMENTED        another algorithm (AWS4-ECDSA-P256-SHA256, SigV2 "AWS ")
 *  -S3E_MISSING_SECURITY_HEADER  header-signed request without x-amz-content-sha256
 *  -S3E_INVALID_ACCESS_KEY_ID  @lookup returned NULL
 *  -S3E_REQUEST_TIME_TOO_SKEWED  x-amz-date (or Date) more than 15 minutes from @now
 *  -S3E_EXPIRED_REQUEST        presigned URL past X-Amz-Date + X-Amz-Expires
 *  -S3E_SIGNATURE_DOES_NOT_MATCH
 * Parses the Authorization header with or without spaces after the commas. Every header named in
 * SignedHeaders must be present (else SIGNATURE_DOES_NOT_MATCH). @em gets the detail
 * (e.g. the canonical request's hash, the expected string to sign). */
int sigv4_verify(const struct sigv4_input *in, time_t now, sigv4_secret_f *lookup, void *cls,
                 struct sigv4_result *out, struct errmsg *em);

/* Signs @in for the backend: computes the Authorization header value for the headers of @in
 * (all of them are signed; the caller includes host, x-amz-date and x-amz-content-sha256 in
 * @in->headers) and writes it to @authz. @payload_hash is the value of x-amz-content-sha256.
 * Returns 0 or -ENOSPC when @cap is too small. */
int sigv4_sign(const struct sigv4_input *in, const char *access_key, const char *secret,
               const char *region, const char *service, const char *amz_date,
               const char *payload_hash, char *authz, size_t cap);

/* Building blocks, exposed for the chunk decoder, the signer and the unit tests. Each returns
 * 0, or -ENOMEM when OpenSSL cannot allocate (then @out is zeroed / the empty string). */
/* The signing key of @secret for a day and scope: derived once per thread and (secret, day,
 * region, service), from a small per-thread cache after that (secrets shorter than
 * SIGV4_SECRET_CACHE_MAX; longer ones are derived every time). 0 or -ENOMEM/-EIO. */
#define SIGV4_SECRET_CACHE_MAX 128
int sigv4_signing_key(const char *secret, const char *yyyymmdd, const char *region,
                      const char *service, uint8_t out[32]);
int sigv4_hmac_hex(const uint8_t key[32], const void *msg, size_t len, char out[65]);
int sigv4_sha256_hex(const void *msg, size_t len, char out[65]);
/* Canonical request text (malloc'd, NUL-terminated) for @in with @signed_headers
 * ("host;x-amz-date", lower case, sorted) and @payload_hash. NULL on ENOMEM or when a
 * signed header is missing. */
char *sigv4_canonical_request(const struct sigv4_input *in, const char *signed_headers,
                              const char *payload_hash);
/* AWS URI encoding of @s into @out (RFC 3986 unreserved kept; '/' kept iff @keep_slash). */
int sigv4_uri_encode(const char *s, size_t len, int keep_slash, char *out, size_t cap);

/* Legacy Signature Version 2 (sigv2.c): "Authorization: AWS ACCESS:SIG" or the presigned query
 * AWSAccessKeyId/Expires/Signature. @resource: the path of the canonical resource, i.e. the
 * request path exactly as sent (still percent-encoded), preceded by "/BUCKET" when the bucket
 * came from the Host header. Same return codes as sigv4_verify; payload is always UNSIGNED.
 * Also refused: a presigned Expires more than 7 days ahead (-S3E_AUTH_QUERY_MALFORMED), a
 * query parameter V2 does not sign (-S3E_ACCESS_DENIED, out->refused; allowed: the S3
 * sub-resources, response-* overrides, x-id and the presigned parameters), an empty signature;
 * and a failed HMAC is -ENOMEM, never a match. */
int sigv2_verify(const struct sigv4_input *in, const char *resource, time_t now,
                 sigv4_secret_f *lookup, void *cls, struct sigv4_result *out, struct errmsg *em);
/* sigv2_verify() of a bucket listing (ListObjects v1 or v2) when @listing: its parameters
 * (prefix, delimiter, markers, max-keys, ...) may come unsigned, as V2 never signs them and AWS
 * accepts them. */
int sigv2_verify_ex(const struct sigv4_input *in, const char *resource, time_t now, int listing,
                    sigv4_secret_f *lookup, void *cls, struct sigv4_result *out, struct errmsg *em);

#endif
