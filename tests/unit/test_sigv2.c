/*
 * test_sigv2.c: sigv2.c against the S3 documentation's Signature Version 2 example
 * (johnsmith/photos/puppy.jpg), and its refusals: an empty signature, a failing HMAC (this
 * binary is linked with -Wl,--wrap=HMAC,--wrap=EVP_MAC_init, so OpenSSL's HMAC(), which SigV2
 * calls, and EVP_MAC_init(), which SigV4's lib/digest.c calls, can be made to fail on demand),
 * a presigned Expires more than 7 days ahead, a query parameter V2 does not sign, and the
 * bucket of a virtual-hosted resource.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "lib/s3c.h"
#include "lib/s3err.h"
#include "sig/sigv4.h"

#define DOC_AK "AKIAIOSFODNN7EXAMPLE"
#define DOC_SK "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define DOC_DATE "Tue, 27 Mar 2007 19:36:42 +0000"
#define DOC_T ((time_t)1175024202)
#define DOC_SIG "bWq2s1WEIj+Ydj0vQ697zp+IXMU=" /* GET /johnsmith/photos/puppy.jpg */

/* ---- HMAC() under our control ------------------------------------------------------------- */

unsigned char *__real_HMAC(const EVP_MD *md, const void *key, int key_len, const unsigned char *d,
                           size_t n, unsigned char *out, unsigned int *out_len);
unsigned char *__wrap_HMAC(const EVP_MD *md, const void *key, int key_len, const unsigned char *d,
                           size_t n, unsigned char *out, unsigned int *out_len);

static int hmac_fail; /* calls to fail from now on (as OpenSSL does when it cannot allocate) */
static int hmac_calls;

unsigned char *__wrap_HMAC(const EVP_MD *md, const void *key, int key_len, const unsigned char *d,
                           size_t n, unsigned char *out, unsigned int *out_len)
{
    hmac_calls++;
    if (hmac_fail) {
        if (out_len)
            *out_len = 0;
        return NULL;
    }
    return __real_HMAC(md, key, key_len, d, n, out, out_len);
}

int __real_EVP_MAC_init(EVP_MAC_CTX *ctx, const unsigned char *key, size_t keylen,
                        const OSSL_PARAM params[]);
int __wrap_EVP_MAC_init(EVP_MAC_CTX *ctx, const unsigned char *key, size_t keylen,
                        const OSSL_PARAM params[]);

int __wrap_EVP_MAC_init(EVP_MAC_CTX *ctx, const unsigned char *key, size_t keylen,
                        const OSSL_PARAM params[])
{
    hmac_calls++;
    if (hmac_fail)
        return 0;
    return __real_EVP_MAC_init(ctx, key, keylen, params);
}

static const char *lookup(void *cls, const char *ak)
{
    UNUSED(cls);
    return !strcmp(ak, DOC_AK) ? DOC_SK : NULL;
}

#define KV(n, v)                                                                                   \
    {                                                                                              \
        (n), (v)                                                                                   \
    }

/* The V2 signature of @sts with the doc secret, computed here (not by sigv2.c). */
static void v2_sign(const char *sts, char out[64])
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int ml = 0;
    assert_non_null(__real_HMAC(EVP_sha1(), DOC_SK, (int)strlen(DOC_SK), (const unsigned char *)sts,
                                strlen(sts), mac, &ml));
    assert_int_equal(ml, 20);
    EVP_EncodeBlock((unsigned char *)out, mac, (int)ml);
}

static int verify_header(const char *authz, const char *resource, const struct sigv4_kv *q,
                         size_t nq, time_t now, struct sigv4_result *r, struct errmsg *em)
{
    struct sigv4_kv h[] = {KV("Host", "johnsmith.s3.amazonaws.com"), KV("Date", DOC_DATE),
                           KV("Authorization", authz)};
    struct sigv4_input in = {"GET", "/photos/puppy.jpg", q, nq, h, ARRAY_SIZE(h), NULL, NULL};
    return sigv2_verify(&in, resource, now, lookup, NULL, r, em);
}

static void test_sigv2_doc_example(void **state)
{
    UNUSED(state);
    struct sigv4_result r;
    struct errmsg em = {{0}};
    assert_int_equal(verify_header("AWS " DOC_AK ":" DOC_SIG, "/johnsmith/photos/puppy.jpg", NULL,
                                   0, DOC_T + 60, &r, &em),
                     0);
    assert_string_equal(r.access_key, DOC_AK);
    assert_int_equal(r.payload, SIGV4_PAYLOAD_UNSIGNED);
    assert_int_equal(r.presigned, 0);
    /* the Date is 15 minutes either way of the clock, no more */
    assert_int_equal(verify_header("AWS " DOC_AK ":" DOC_SIG, "/johnsmith/photos/puppy.jpg", NULL,
                                   0, DOC_T + 901, &r, &em),
                     -S3E_REQUEST_TIME_TOO_SKEWED);
}

/* Virtual-hosted: the bucket from the Host header is part of the resource; a signature made
 * for /photos/puppy.jpg of johnsmith is not one for the same path of another bucket. */
static void test_sigv2_resource_names_the_bucket(void **state)
{
    UNUSED(state);
    struct sigv4_result r;
    assert_int_equal(verify_header("AWS " DOC_AK ":" DOC_SIG, "/photos/puppy.jpg", NULL, 0, DOC_T,
                                   &r, NULL),
                     -S3E_SIGNATURE_DOES_NOT_MATCH);
    assert_int_equal(verify_header("AWS " DOC_AK ":" DOC_SIG, "/otherbucket/photos/puppy.jpg", NULL,
                                   0, DOC_T, &r, NULL),
                     -S3E_SIGNATURE_DOES_NOT_MATCH);
}

/* An empty signature never matches, whatever HMAC() does. */
static void test_sigv2_empty_signature(void **state)
{
    UNUSED(state);
    struct sigv4_result r;
    for (int fail = 0; fail < 2; fail++) {
        hmac_fail = fail;
        assert_int_not_equal(verify_header("AWS " DOC_AK ":", "/johnsmith/photos/puppy.jpg", NULL,
                                           0, DOC_T, &r, NULL),
                             0);
        struct sigv4_kv q[] = {KV("AWSAccessKeyId", DOC_AK), KV("Expires", "1175024262"),
                               KV("Signature", "")};
        struct sigv4_kv h[] = {KV("Host", "johnsmith.s3.amazonaws.com")};
        struct sigv4_input in = {"GET", "/photos/puppy.jpg", q, 3, h, 1, NULL, NULL};
        assert_int_not_equal(sigv2_verify(&in, "/johnsmith/photos/puppy.jpg", DOC_T, lookup, NULL,
                                          &r, NULL),
                             0);
    }
    hmac_fail = 0;
}

/* A failing HMAC() is an error, never a match (before: an empty digest matched an empty
 * signature). SigV4 fails closed the same way. */
static void test_sigv2_hmac_failure_fails_closed(void **state)
{
    UNUSED(state);
    struct sigv4_result r;
    struct errmsg em = {{0}};
    hmac_fail = 1;
    hmac_calls = 0;
    int rc = verify_header("AWS " DOC_AK ":" DOC_SIG, "/johnsmith/photos/puppy.jpg", NULL, 0, DOC_T,
                           &r, &em);
    hmac_fail = 0;
    assert_int_equal(rc, -ENOMEM);
    assert_true(hmac_calls > 0); /* the failure came from HMAC(), not an earlier check */
    assert_int_equal(verify_header("AWS " DOC_AK ":" DOC_SIG, "/johnsmith/photos/puppy.jpg", NULL,
                                   0, DOC_T, &r, &em),
                     0);

    /* SigV4: a request it accepts with a working HMAC() is refused with a failing one */
    struct sigv4_kv h[4] = {KV("host", "h"), KV("x-amz-date", "20070327T193642Z"),
                            KV("x-amz-content-sha256", "UNSIGNED-PAYLOAD")};
    struct sigv4_input in = {"GET", "/b/k", NULL, 0, h, 3, "us-east-1", "s3"};
    char authz[512];
    assert_int_equal(sigv4_sign(&in, DOC_AK, DOC_SK, "us-east-1", "s3", "20070327T193642Z",
                                "UNSIGNED-PAYLOAD", authz, sizeof(authz)),
                     0);
    h[3] = (struct sigv4_kv){"Authorization", authz};
    in.n_headers = 4;
    assert_int_equal(sigv4_verify(&in, DOC_T, lookup, NULL, &r, NULL), 0);
    hmac_fail = 1;
    rc = sigv4_verify(&in, DOC_T, lookup, NULL, &r, NULL);
    hmac_fail = 0;
    assert_int_equal(rc, -ENOMEM);
}

/* Presigned: Expires at most 7 days ahead (as SigV4's X-Amz-Expires), not in the past. */
static void test_sigv2_presigned_expiry(void **state)
{
    UNUSED(state);
    static const struct {
        long long ahead;
        int rc;
    } cases[] = {
        {60, 0},
        {604800, 0},
        {604801, -S3E_AUTH_QUERY_MALFORMED},
        {10LL * 365 * 86400, -S3E_AUTH_QUERY_MALFORMED},
        {-1, -S3E_EXPIRED_REQUEST},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        char exp[32], sts[256], sig[64];
        snprintf(exp, sizeof(exp), "%lld", (long long)DOC_T + cases[i].ahead);
        snprintf(sts, sizeof(sts), "GET\n\n\n%s\n/johnsmith/photos/puppy.jpg", exp);
        v2_sign(sts, sig);
        struct sigv4_kv q[] = {KV("AWSAccessKeyId", DOC_AK), KV("Expires", exp),
                               KV("Signature", sig)};
        struct sigv4_kv h[] = {KV("Host", "johnsmith.s3.amazonaws.com")};
        struct sigv4_input in = {"GET", "/photos/puppy.jpg", q, 3, h, 1, NULL, NULL};
        struct sigv4_result r;
        struct errmsg em = {{0}};
        int rc = sigv2_verify(&in, "/johnsmith/photos/puppy.jpg", DOC_T, lookup, NULL, &r, &em);
        if (rc != cases[i].rc)
            fail_msg("case %zu: rc %d want %d (%s)", i, rc, cases[i].rc, em.buf);
        if (!rc)
            assert_int_equal(r.presigned, 1);
    }
}

/* Only parameters V2 signs (sub-resources, response-* overrides) or that change nothing (x-id,
 * the presigned ones) may come with a V2 signature: a prefix could be changed by anyone who
 * holds the URL or captured the request. */
static void test_sigv2_unsigned_parameter(void **state)
{
    UNUSED(state);
    static const struct {
        const char *name, *value;
        int rc;
    } cases[] = {
        {"prefix", "a/", -S3E_ACCESS_DENIED},
        {"delimiter", "/", -S3E_ACCESS_DENIED},
        {"max-keys", "1", -S3E_ACCESS_DENIED},
        {"encoding-type", "url", -S3E_ACCESS_DENIED},
        {"content-type", "text/plain", 0}, /* botocore copies signed headers there */
        {"x-id", "GetObject", 0},
        {"response-content-type", "text/plain", 0}, /* signed: in the resource */
        {"versionId", "null", 0},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        char exp[32], sts[256], sig[64];
        snprintf(exp, sizeof(exp), "%lld", (long long)DOC_T + 60);
        int sub = cases[i].rc == 0 && strcmp(cases[i].name, "x-id") &&
                  strcmp(cases[i].name, "content-type");
        snprintf(sts, sizeof(sts), "GET\n\n\n%s\n/johnsmith/photos/puppy.jpg%s%s%s%s", exp,
                 sub ? "?" : "", sub ? cases[i].name : "", sub ? "=" : "",
                 sub ? cases[i].value : "");
        v2_sign(sts, sig);
        struct sigv4_kv q[] = {KV("AWSAccessKeyId", DOC_AK), KV("Expires", exp),
                               KV("Signature", sig), KV(cases[i].name, cases[i].value)};
        struct sigv4_kv h[] = {KV("Host", "johnsmith.s3.amazonaws.com")};
        struct sigv4_input in = {"GET", "/photos/puppy.jpg", q, 4, h, 1, NULL, NULL};
        struct sigv4_result r;
        struct errmsg em = {{0}};
        int rc = sigv2_verify(&in, "/johnsmith/photos/puppy.jpg", DOC_T, lookup, NULL, &r, &em);
        if (rc != cases[i].rc)
            fail_msg("case %zu (%s): rc %d want %d (%s)", i, cases[i].name, rc, cases[i].rc,
                     em.buf);
        if (rc) {
            assert_int_equal(r.refused, 1);
            assert_non_null(strstr(em.buf, cases[i].name));
        }
        /* a bucket listing takes its own parameters unsigned, as AWS does (the others: no) */
        rc = sigv2_verify_ex(&in, "/johnsmith/photos/puppy.jpg", DOC_T, 1, lookup, NULL, &r, &em);
        assert_int_equal(rc, 0);
    }
    /* the header form too: Date-bound, but replayable for 15 minutes */
    struct sigv4_kv q[] = {KV("prefix", "")};
    struct sigv4_result r;
    assert_int_equal(verify_header("AWS " DOC_AK ":" DOC_SIG, "/johnsmith/photos/puppy.jpg", q, 1,
                                   DOC_T, &r, NULL),
                     -S3E_ACCESS_DENIED);
    /* a listing: not an unknown parameter, nor an admin one */
    struct sigv4_kv q2[] = {KV("prefix", ""), KV("flush", "1")};
    struct sigv4_kv h2[] = {KV("Host", "johnsmith.s3.amazonaws.com"), KV("Date", DOC_DATE),
                            KV("Authorization", "AWS " DOC_AK ":" DOC_SIG)};
    struct sigv4_input in2 = {"GET", "/photos/puppy.jpg", q2, 2, h2, ARRAY_SIZE(h2), NULL, NULL};
    struct errmsg em = {{0}};
    assert_int_equal(sigv2_verify_ex(&in2, "/johnsmith/photos/puppy.jpg", DOC_T, 1, lookup, NULL,
                                     &r, &em),
                     -S3E_ACCESS_DENIED);
    assert_non_null(strstr(em.buf, "flush"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigv2_doc_example),
        cmocka_unit_test(test_sigv2_resource_names_the_bucket),
        cmocka_unit_test(test_sigv2_empty_signature),
        cmocka_unit_test(test_sigv2_hmac_failure_fails_closed),
        cmocka_unit_test(test_sigv2_presigned_expiry),
        cmocka_unit_test(test_sigv2_unsigned_parameter),
    };
    return cmocka_run_group_tests_name("sigv2", tests, NULL, NULL);
}
