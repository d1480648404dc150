/*
 * test_sigv4.c: sigv4.c against the AWS SigV4 test suite (AKIDEXAMPLE, 20150830T123600Z),
 * the S3 documentation examples (GET with Range, PUT, presigned URL, the seed request of the
 * aws-chunked example), vectors produced once with botocore's S3SigV4Auth (awkward keys,
 * x-id, ?uploads, header whitespace), and every error return of sigv4_verify().
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

#include <pthread.h>
#include "lib/digest.h"
#include "lib/s3c.h"
#include "lib/s3err.h"
#include "sig/sigv4.h"

#define EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SUITE_AK "AKIDEXAMPLE"
#define SUITE_SK "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define DOC_AK "AKIAIOSFODNN7EXAMPLE"
#define DOC_SK "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define BOTO_AK "AK test+key~"
#define BOTO_SK "s3cr3t+/ with space \xc3\xbc"

#define T2013 ((time_t)1369353600) /* 20130524T000000Z */
#define T2024 ((time_t)1704164645) /* 20240102T030405Z */

static const char *lookup(void *cls, const char *ak)
{
    UNUSED(cls);
    if (!strcmp(ak, DOC_AK))
        return DOC_SK;
    if (!strcmp(ak, BOTO_AK))
        return BOTO_SK;
    if (!strcmp(ak, SUITE_AK))
        return SUITE_SK;
    return NULL;
}

#define KV(n, v) {(n), (v)}
#define IN(m, p, q, h)                                                                        \
    {.method = (m), .path = (p), .query = (q), .n_query = ARRAY_SIZE(q), .headers = (h),     \
     .n_headers = ARRAY_SIZE(h)}

static const struct sigv4_kv no_query[1] = {{NULL, NULL}};

/* ---- the AWS test suite ------------------------------------------------------------------ */

struct suite_case {
    const char *name, *method, *path;
    struct sigv4_kv query[3];
    size_t n_query;
    struct sigv4_kv headers[6];
    size_t n_headers;
    const char *payload, *signed_headers, *creq, *sig;
};

#define HOST KV("Host", "example.amazonaws.com")
#define XDATE KV("X-Amz-Date", "20150830T123600Z")

static const struct suite_case suite[] = {
    {"get-vanilla", "GET", "/", {{0}}, 0, {HOST, XDATE}, 2, EMPTY_SHA, "host;x-amz-date",
     "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_SHA,
     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
    {"post-vanilla", "POST", "/", {{0}}, 0, {HOST, XDATE}, 2, EMPTY_SHA, "host;x-amz-date", NULL,
     "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"},
    {"get-unreserved", "GET", "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
     {{0}}, 0, {HOST, XDATE}, 2, EMPTY_SHA, "host;x-amz-date", NULL,
     "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"},
    {"get-utf8", "GET", "/\xe1\x88\xb4", {{0}}, 0, {HOST, XDATE}, 2, EMPTY_SHA, "host;x-amz-date",
     "GET\n/%E1%88%B4\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_SHA,
     "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"},
    {"get-space-unnormalized", "GET", "/example space/", {{0}}, 0, {HOST, XDATE}, 2, EMPTY_SHA,
     "host;x-amz-date", NULL, "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741"},
    {"get-slashes-unnormalized", "GET", "//example//", {{0}}, 0, {HOST, XDATE}, 2, EMPTY_SHA,
     "host;x-amz-date", NULL, "87cca117541a147f6df867677d98a7d80dff226d2bfca9e4ffa899665623c7e5"},
    {"get-relative-unnormalized", "GET", "/example/..", {{0}}, 0, {HOST, XDATE}, 2, EMPTY_SHA,
     "host;x-amz-date", NULL, "eca7ead57bb5aa5c8e28007acd4ff04e1ff9a0ff3b237ec1554a184887ff9282"},
    {"get-vanilla-query-order-key-case", "GET", "/",
     {KV("Param2", "value2"), KV("Param1", "value1")}, 2, {HOST, XDATE}, 2, EMPTY_SHA,
     "host;x-amz-date",
     "GET\n/\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_SHA,
     "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"},
    {"get-vanilla-query-order-encoded", "GET", "/",
     {KV("Param-3", "Value3"), KV("Param", "Value2"), KV("\xe1\x88\xb4", "Value1")}, 3,
     {HOST, XDATE}, 2, EMPTY_SHA, "host;x-amz-date",
     "GET\n/\n%E1%88%B4=Value1&Param=Value2&Param-3=Value3\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_SHA,
     "371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac"},
    {"get-vanilla-query-unreserved", "GET", "/",
     {KV("-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
         "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")},
     1, {HOST, XDATE}, 2, EMPTY_SHA, "host;x-amz-date", NULL,
     "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"},
    {"get-vanilla-utf8-query", "GET", "/", {KV("\xe1\x88\xb4", "bar")}, 1, {HOST, XDATE}, 2,
     EMPTY_SHA, "host;x-amz-date", NULL,
     "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"},
    {"get-vanilla-with-session-token", "GET", "/", {{0}}, 0,
     {HOST, XDATE,
      KV("X-Amz-Security-Token", "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267")},
     3, EMPTY_SHA, "host;x-amz-date;x-amz-security-token", NULL,
     "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"},
    {"get-header-key-duplicate", "GET", "/", {{0}}, 0,
     {HOST, KV("My-Header1", "value2"), KV("My-Header1", "value2"), KV("My-Header1", "value1"),
      XDATE},
     5, EMPTY_SHA, "host;my-header1;x-amz-date",
     "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value2,value2,value1\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\n" EMPTY_SHA,
     "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"},
    {"get-header-value-order", "GET", "/", {{0}}, 0,
     {HOST, KV("My-Header1", "value4"), KV("My-Header1", "value1"), KV("My-Header1", "value3"),
      KV("My-Header1", "value2"), XDATE},
     6, EMPTY_SHA, "host;my-header1;x-amz-date", NULL,
     "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01"},
    {"get-header-value-trim", "GET", "/", {{0}}, 0,
     {HOST, KV("My-Header1", " value1"), KV("My-Header2", " \"a   b   c\""), XDATE}, 4,
     EMPTY_SHA, "host;my-header1;my-header2;x-amz-date",
     "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nmy-header2:\"a b c\"\nx-amz-date:20150830T123600Z\n\nhost;my-header1;my-header2;x-amz-date\n" EMPTY_SHA,
     "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"},
    {"post-vanilla-query", "POST", "/", {KV("Param1", "value1")}, 1, {HOST, XDATE}, 2, EMPTY_SHA,
     "host;x-amz-date", NULL, "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"},
    {"post-header-value-case", "POST", "/", {{0}}, 0, {HOST, KV("My-Header1", "VALUE1"), XDATE},
     3, EMPTY_SHA, "host;my-header1;x-amz-date", NULL,
     "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d"},
    /* the original suite's form post: payload sha256("Param1=value1") */
    {"post-x-www-form-urlencoded", "POST", "/", {{0}}, 0,
     {KV("Content-Type", "application/x-www-form-urlencoded"), HOST, XDATE}, 3,
     "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
     "content-type;host;x-amz-date", NULL,
     "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"},
    /* aws-c-auth's version of it, which also signs content-length and x-amz-content-sha256 */
    {"post-x-www-form-urlencoded-c-auth", "POST", "/", {{0}}, 0,
     {KV("Content-Type", "application/x-www-form-urlencoded"), KV("Content-Length", "13"), HOST,
      KV("x-amz-content-sha256", "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"),
      XDATE},
     5, "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
     "content-length;content-type;host;x-amz-content-sha256;x-amz-date", NULL,
     "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b"},
};

/* The per-thread signing-key cache gives what the derivation gives, and never an old key for
 * a secret that changed (a credentials reload), another day or another scope. AWS's documented
 * example key (SigV4 "derive signing key" example, 20150830/us-east-1/iam). */
static void test_sigv4_signing_key_cache(void **state)
{
    UNUSED(state);
    static const char want[] = "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9";
    uint8_t k1[32], k2[32];
    char hex[65];
    for (int round = 0; round < 3; round++) { /* derived, then cached: the same bytes */
        assert_int_equal(sigv4_signing_key(SUITE_SK, "20150830", "us-east-1", "iam", k1), 0);
        for (int i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", k1[i]);
        assert_string_equal(hex, want);
    }
    char other[64];
    snprintf(other, sizeof(other), "%s", SUITE_SK);
    other[0] ^= 1; /* the secret changed: another key, not the cached one */
    assert_int_equal(sigv4_signing_key(other, "20150830", "us-east-1", "iam", k2), 0);
    assert_memory_not_equal(k1, k2, 32);
    assert_int_equal(sigv4_signing_key(SUITE_SK, "20150831", "us-east-1", "iam", k2), 0);
    assert_memory_not_equal(k1, k2, 32);
    assert_int_equal(sigv4_signing_key(SUITE_SK, "20150830", "us-west-2", "iam", k2), 0);
    assert_memory_not_equal(k1, k2, 32);
    assert_int_equal(sigv4_signing_key(SUITE_SK, "20150830", "us-east-1", "s3", k2), 0);
    assert_memory_not_equal(k1, k2, 32);
    for (int i = 0; i < 20; i++) { /* more scopes than slots: still right after eviction */
        char region[16];
        snprintf(region, sizeof(region), "r-%d", i);
        assert_int_equal(sigv4_signing_key(SUITE_SK, "20150830", region, "iam", k2), 0);
    }
    assert_int_equal(sigv4_signing_key(SUITE_SK, "20150830", "us-east-1", "iam", k2), 0);
    assert_memory_equal(k1, k2, 32);
}

static void test_sigv4_suite_building_blocks(void **state)
{
    UNUSED(state);
    uint8_t key[32];
    sigv4_signing_key(SUITE_SK, "20150830", "us-east-1", "service", key);
    for (size_t i = 0; i < ARRAY_SIZE(suite); i++) {
        const struct suite_case *c = &suite[i];
        struct sigv4_input in = {c->method, c->path, c->query, c->n_query, c->headers,
                                 c->n_headers, NULL, NULL};
        char *creq = sigv4_canonical_request(&in, c->signed_headers, c->payload);
        assert_non_null(creq);
        if (c->creq)
            assert_string_equal(creq, c->creq);
        char h[65], sts[256], sig[65];
        sigv4_sha256_hex(creq, strlen(creq), h);
        snprintf(sts, sizeof(sts),
                 "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n%s",
                 h);
        sigv4_hmac_hex(key, sts, strlen(sts), sig);
        if (strcmp(sig, c->sig))
            fail_msg("%s: got %s want %s\n%s", c->name, sig, c->sig, creq);
        free(creq);
    }
}

/* sigv4_sign signs every header it is given: the suite's requests sign exactly theirs. */
static void test_sigv4_suite_sign(void **state)
{
    UNUSED(state);
    for (size_t i = 0; i < ARRAY_SIZE(suite); i++) {
        const struct suite_case *c = &suite[i];
        struct sigv4_input in = {c->method, c->path, c->query, c->n_query, c->headers,
                                 c->n_headers, NULL, NULL};
        char authz[512], want[512];
        assert_int_equal(sigv4_sign(&in, SUITE_AK, SUITE_SK, "us-east-1", "service",
                                    "20150830T123600Z", c->payload, authz, sizeof(authz)),
                         0);
        snprintf(want, sizeof(want),
                 "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                 "SignedHeaders=%s, Signature=%s",
                 c->signed_headers, c->sig);
        if (strcmp(authz, want))
            fail_msg("%s:\n got %s\nwant %s", c->name, authz, want);
    }
}

/* Verifying the suite vectors needs x-amz-content-sha256; the c-auth form post has it. */
static void test_sigv4_suite_verify(void **state)
{
    UNUSED(state);
    const struct suite_case *c = &suite[ARRAY_SIZE(suite) - 1];
    struct sigv4_kv h[7];
    memcpy(h, c->headers, c->n_headers * sizeof(h[0]));
    h[c->n_headers] = (struct sigv4_kv){
        "Authorization",
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        "SignedHeaders=content-length;content-type;host;x-amz-content-sha256;x-amz-date, "
        "Signature=d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b"};
    struct sigv4_input in = {"POST", "/", NULL, 0, h, c->n_headers + 1, NULL, NULL};
    struct sigv4_result r;
    struct errmsg em = {{0}};
    time_t t = 1440938160; /* 20150830T123600Z */
    assert_int_equal(sigv4_verify(&in, t + 30, lookup, NULL, &r, &em), 0);
    assert_string_equal(r.access_key, SUITE_AK);
    assert_int_equal(r.payload, SIGV4_PAYLOAD_SHA256);
    assert_string_equal(r.payload_sha256, c->payload);
    assert_string_equal(r.scope, "20150830/us-east-1/service/aws4_request");
    assert_string_equal(r.seed_signature, c->sig);
    assert_int_equal(r.presigned, 0);
}

/* ---- S3 documentation examples ------------------------------------------------------------ */

static const struct sigv4_kv doc_get_hdrs[] = {
    KV("Host", "examplebucket.s3.amazonaws.com"),
    KV("Authorization",
       "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
       "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
       "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"),
    KV("Range", "bytes=0-9"),
    KV("x-amz-content-sha256", EMPTY_SHA),
    KV("x-amz-date", "20130524T000000Z"),
};

static void test_sigv4_doc_get_range(void **state)
{
    UNUSED(state);
    struct sigv4_input in = {"GET", "/test.txt", NULL, 0, doc_get_hdrs,
                             ARRAY_SIZE(doc_get_hdrs), NULL, NULL};
    struct sigv4_result r;
    struct errmsg em = {{0}};
    assert_int_equal(sigv4_verify(&in, T2013 + 60, lookup, NULL, &r, &em), 0);
    assert_string_equal(r.access_key, DOC_AK);
    assert_string_equal(r.amz_date, "20130524T000000Z");
    assert_string_equal(r.scope, "20130524/us-east-1/s3/aws4_request");
    assert_string_equal(r.seed_signature,
                        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    assert_int_equal(r.payload, SIGV4_PAYLOAD_SHA256);
    assert_string_equal(r.payload_sha256, EMPTY_SHA);
    /* the signing key of the documentation's examples */
    char hex[65];
    static const char *want_key =
        "dbb893acc010964918f1fd433add87c70e8b0db6be30c1fbeafefa5ec6ba8378";
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", r.signing_key[i]);
    assert_string_equal(hex, want_key);

    /* signing the same request gives the same header (with ", " separators) */
    struct sigv4_kv sh[] = {doc_get_hdrs[0], doc_get_hdrs[2], doc_get_hdrs[3], doc_get_hdrs[4]};
    struct sigv4_input sin = {"GET", "/test.txt", NULL, 0, sh, ARRAY_SIZE(sh), NULL, NULL};
    char authz[300];
    assert_int_equal(sigv4_sign(&sin, DOC_AK, DOC_SK, "us-east-1", "s3", "20130524T000000Z",
                                EMPTY_SHA, authz, sizeof(authz)),
                     0);
    assert_string_equal(authz,
                        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
                        "aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
                        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    /* too small a buffer */
    assert_int_equal(sigv4_sign(&sin, DOC_AK, DOC_SK, "us-east-1", "s3", "20130524T000000Z",
                                EMPTY_SHA, authz, 100),
                     -ENOSPC);
    assert_string_equal(authz, "");
}

/* PUT /test$file.text with a Date header as well as x-amz-date. */
static void test_sigv4_doc_put(void **state)
{
    UNUSED(state);
    static const struct sigv4_kv h[] = {
        KV("Host", "examplebucket.s3.amazonaws.com"),
        KV("Date", "Fri, 24 May 2013 00:00:00 GMT"),
        KV("Authorization",
           "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
           "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,"
           "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"),
        KV("x-amz-date", "20130524T000000Z"),
        KV("x-amz-storage-class", "REDUCED_REDUNDANCY"),
        KV("x-amz-content-sha256",
           "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"),
    };
    struct sigv4_input in = {"PUT", "/test$file.text", NULL, 0, h, ARRAY_SIZE(h), NULL, NULL};
    struct sigv4_result r;
    assert_int_equal(sigv4_verify(&in, T2013, lookup, NULL, &r, NULL), 0);
    assert_string_equal(r.payload_sha256,
                        "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
}

/* The seed request of the STREAMING-AWS4-HMAC-SHA256-PAYLOAD example. */
static void test_sigv4_doc_chunked_seed(void **state)
{
    UNUSED(state);
    static const struct sigv4_kv h[] = {
        KV("Host", "s3.amazonaws.com"),
        KV("x-amz-date", "20130524T000000Z"),
        KV("x-amz-storage-class", "REDUCED_REDUNDANCY"),
        KV("Authorization",
           "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
           "SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
           "x-amz-decoded-content-length;x-amz-storage-class,"
           "Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"),
        KV("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
        KV("Content-Encoding", "aws-chunked"),
        KV("x-amz-decoded-content-length", "66560"),
        KV("Content-Length", "66824"),
    };
    struct sigv4_input in = {"PUT", "/examplebucket/chunkObject.txt", NULL, 0, h, ARRAY_SIZE(h),
                             NULL,  NULL};
    struct sigv4_result r;
    assert_int_equal(sigv4_verify(&in, T2013 + 899, lookup, NULL, &r, NULL), 0);
    assert_int_equal(r.payload, SIGV4_PAYLOAD_STREAMING);
    assert_string_equal(r.seed_signature,
                        "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9");
    assert_string_equal(r.payload_sha256, "");
}

#define DOC_PRESIGN_SIG "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"

static void presign_input(struct sigv4_kv *q, const char *expires, const char *sig)
{
    q[0] = (struct sigv4_kv){"X-Amz-Algorithm", "AWS4-HMAC-SHA256"};
    q[1] = (struct sigv4_kv){"X-Amz-Credential", DOC_AK "/20130524/us-east-1/s3/aws4_request"};
    q[2] = (struct sigv4_kv){"X-Amz-Date", "20130524T000000Z"};
    q[3] = (struct sigv4_kv){"X-Amz-Expires", expires};
    q[4] = (struct sigv4_kv){"X-Amz-SignedHeaders", "host"};
    q[5] = (struct sigv4_kv){"X-Amz-Signature", sig};
}

static const struct sigv4_kv presign_hdrs[] = {
    KV("Host", "examplebucket.s3.amazonaws.com"),
    KV("User-Agent", "curl/7.88.1"),
    KV("Accept", "*/*"),
};

static void test_sigv4_doc_presigned(void **state)
{
    UNUSED(state);
    struct sigv4_kv q[6], rq[6];
    struct sigv4_result r;
    struct errmsg em = {{0}};
    presign_input(q, "86400", DOC_PRESIGN_SIG);
    struct sigv4_input in = {"GET", "/test.txt", q, 6, presign_hdrs, ARRAY_SIZE(presign_hdrs),
                             NULL,  NULL};
    assert_int_equal(sigv4_verify(&in, T2013 + 100, lookup, NULL, &r, &em), 0);
    assert_int_equal(r.presigned, 1);
    assert_int_equal(r.payload, SIGV4_PAYLOAD_UNSIGNED);
    assert_string_equal(r.access_key, DOC_AK);
    assert_string_equal(r.seed_signature, DOC_PRESIGN_SIG);
    /* any parameter order, the signature anywhere */
    for (int i = 0; i < 6; i++)
        rq[i] = q[5 - i];
    in.query = rq;
    assert_int_equal(sigv4_verify(&in, T2013 + 86400, lookup, NULL, &r, &em), 0);
    /* expired, from the future, too far */
    assert_int_equal(sigv4_verify(&in, T2013 + 86401, lookup, NULL, &r, &em),
                     -S3E_EXPIRED_REQUEST);
    assert_int_equal(sigv4_verify(&in, T2013 - 901, lookup, NULL, &r, &em),
                     -S3E_REQUEST_TIME_TOO_SKEWED);
    assert_int_equal(sigv4_verify(&in, T2013 - 899, lookup, NULL, &r, &em), 0);
    /* an extra signed query parameter, a changed path or host */
    struct sigv4_kv q7[7];
    memcpy(q7, q, sizeof(q));
    q7[6] = (struct sigv4_kv){"x-id", "GetObject"};
    in.query = q7;
    in.n_query = 7;
    assert_int_equal(sigv4_verify(&in, T2013, lookup, NULL, &r, &em),
                     -S3E_SIGNATURE_DOES_NOT_MATCH);
    in.query = q;
    in.n_query = 6;
    in.path = "/test.txt2";
    assert_int_equal(sigv4_verify(&in, T2013, lookup, NULL, &r, &em),
                     -S3E_SIGNATURE_DOES_NOT_MATCH);
    in.path = "/test.txt";
    struct sigv4_kv h2[] = {KV("Host", "otherbucket.s3.amazonaws.com")};
    in.headers = h2;
    in.n_headers = 1;
    assert_int_equal(sigv4_verify(&in, T2013, lookup, NULL, &r, &em),
                     -S3E_SIGNATURE_DOES_NOT_MATCH);
    /* the signed header host is missing */
    in.headers = presign_hdrs + 1;
    in.n_headers = 2;
    assert_int_equal(sigv4_verify(&in, T2013, lookup, NULL, &r, &em),
                     -S3E_SIGNATURE_DOES_NOT_MATCH);
}

static void test_sigv4_presigned_errors(void **state)
{
    UNUSED(state);
    static const struct {
        int field; /* which query entry to change (-1: drop X-Amz-Expires) */
        const char *value;
        int rc;
    } cases[] = {
        {3, "0", -S3E_EXPIRES_OUT_OF_RANGE},
        {3, "604801", -S3E_EXPIRES_OUT_OF_RANGE},
        {3, "-5", -S3E_EXPIRES_OUT_OF_RANGE},
        {3, "-0", -S3E_EXPIRES_OUT_OF_RANGE},
        {3, "99999999999999999999", -S3E_EXPIRES_OUT_OF_RANGE},
        {3, "-", -S3E_AUTH_QUERY_MALFORMED},
        {3, "12x", -S3E_AUTH_QUERY_MALFORMED},
        {3, "", -S3E_AUTH_QUERY_MALFORMED},
        {3, "604800", -S3E_SIGNATURE_DOES_NOT_MATCH}, /* valid, but not what was signed */
        {3, NULL, -S3E_AUTH_QUERY_MALFORMED},
        {-1, NULL, -S3E_AUTH_QUERY_MALFORMED},
        {0, "AWS4-ECDSA-P256-SHA256", -S3E_NOT_IMPLEMENTED},
        {0, "HMAC-SHA1", -S3E_AUTH_QUERY_MALFORMED},
        {1, DOC_AK "/20130524/us-east-1/s3", -S3E_AUTH_QUERY_MALFORMED},
        {1, DOC_AK "/20130524/us-east-1/s3/aws4_requesx", -S3E_AUTH_QUERY_MALFORMED},
        {1, DOC_AK "/20130525/us-east-1/s3/aws4_request", -S3E_AUTH_QUERY_MALFORMED},
        {1, "/20130524/us-east-1/s3/aws4_request", -S3E_AUTH_QUERY_MALFORMED},
        {1, DOC_AK "/20130524//s3/aws4_request", -S3E_AUTH_QUERY_MALFORMED},
        {1, "NOSUCHKEY/20130524/us-east-1/s3/aws4_request", -S3E_INVALID_ACCESS_KEY_ID},
        {2, "20130524T000000", -S3E_AUTH_QUERY_MALFORMED},
        {2, "2013-05-24T00:00:00Z", -S3E_AUTH_QUERY_MALFORMED},
        {4, "", -S3E_AUTH_QUERY_MALFORMED},
        {4, "host;;x", -S3E_AUTH_QUERY_MALFORMED},
        {4, "host;x-missing", -S3E_SIGNATURE_DOES_NOT_MATCH},
        {5, "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d405",
         -S3E_SIGNATURE_DOES_NOT_MATCH},
        {5, "aeeed9bb", -S3E_SIGNATURE_DOES_NOT_MATCH},
        {5, "AEEED9BBCCD4D02EE5C0109B86D86835F995330DA4C265957D157751F604D404", 0},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct sigv4_kv q[6];
        size_t nq = 6;
        presign_input(q, "86400", DOC_PRESIGN_SIG);
        if (cases[i].field < 0) {
            q[3] = q[5];
            nq = 5;
        } else {
            q[cases[i].field].value = cases[i].value;
        }
        struct sigv4_input in = {"GET", "/test.txt", q, nq, presign_hdrs,
                                 ARRAY_SIZE(presign_hdrs), NULL, NULL};
        struct sigv4_result r;
        struct errmsg em = {{0}};
        int rc = sigv4_verify(&in, T2013 + 10, lookup, NULL, &r, &em);
        if (rc != cases[i].rc)
            fail_msg("case %zu: rc %d want %d (%s)", i, rc, cases[i].rc, em.buf);
        if (rc)
            assert_true(em.buf[0] != '\0');
    }
    /* X-Amz-Signature alone, no algorithm */
    struct sigv4_kv q1[] = {KV("X-Amz-Signature", DOC_PRESIGN_SIG)};
    struct sigv4_input in = {"GET", "/test.txt", q1, 1, presign_hdrs, 1, NULL, NULL};
    struct sigv4_result r;
    assert_int_equal(sigv4_verify(&in, T2013, lookup, NULL, &r, NULL),
                     -S3E_AUTH_QUERY_MALFORMED);
    /* both an Authorization header and a presigned query */
    struct sigv4_kv q[6];
    presign_input(q, "86400", DOC_PRESIGN_SIG);
    struct sigv4_input both = {"GET", "/test.txt", q, 6, doc_get_hdrs, ARRAY_SIZE(doc_get_hdrs),
                               NULL,  NULL};
    assert_int_equal(sigv4_verify(&both, T2013, lookup, NULL, &r, NULL), -S3E_INVALID_ARGUMENT);
}

/* ---- botocore-generated vectors (S3SigV4Auth, 20240102T030405Z) ---------------------------- */

#define BOTO_CRED "Credential=AK test+key~/20240102/us-east-1/s3/aws4_request"

static void test_sigv4_botocore_unicode_key_xid(void **state)
{
    UNUSED(state);
    static const struct sigv4_kv q[] = {KV("x-id", "PutObject")};
    static const struct sigv4_kv h[] = {
        KV("Host", "127.0.0.1:9000"),
        KV("Content-Type", "text/plain"),
        KV("X-Amz-Date", "20240102T030405Z"),
        KV("X-Amz-Content-SHA256",
           "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"),
        KV("Authorization",
           "AWS4-HMAC-SHA256 " BOTO_CRED ", SignedHeaders=content-type;host;x-amz-content-sha256;"
           "x-amz-date, Signature=ba0c9872bf91e0cf80aa7ced9fa4655c306066582f5847b0aa15304a75747a0d"),
        KV("Content-Length", "11"),
        KV("Expect", "100-continue"),
    };
    struct sigv4_input in = IN("PUT",
                               "/bucket/dir/\xe3\x83\x95\xe3\x82\xa1\xe3\x82\xa4\xe3\x83\xab "
                               "\xe5\x90\x8d+~!*'()$&,;=@:.txt",
                               q, h);
    struct sigv4_result r;
    struct errmsg em = {{0}};
    int rc = sigv4_verify(&in, T2024, lookup, NULL, &r, &em);
    if (rc)
        fail_msg("rc %d: %s", rc, em.buf);
    assert_string_equal(r.access_key, BOTO_AK);
    assert_string_equal(r.payload_sha256,
                        "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9");
}

static const struct sigv4_kv uploads_q[] = {KV("uploads", NULL)};
#define UPLOADS_SIG "d2102591755aad5583b46ffed4a02ca42670130174b0e4f8d61673e13b740042"

static void test_sigv4_botocore_uploads_no_equals(void **state)
{
    UNUSED(state);
    static const char *authz[] = {
        "AWS4-HMAC-SHA256 " BOTO_CRED ", SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
        "Signature=" UPLOADS_SIG,
        /* s3cmd: no spaces after the commas */
        "AWS4-HMAC-SHA256 " BOTO_CRED ",SignedHeaders=host;x-amz-content-sha256;x-amz-date,"
        "Signature=" UPLOADS_SIG,
        /* any order, extra blanks */
        "AWS4-HMAC-SHA256  Signature=" UPLOADS_SIG " ,  " BOTO_CRED
        ",SignedHeaders=host;x-amz-content-sha256;x-amz-date",
    };
    for (size_t i = 0; i < ARRAY_SIZE(authz); i++) {
        const struct sigv4_kv h[] = {
            KV("host", "127.0.0.1:9000"),
            KV("x-amz-date", "20240102T030405Z"),
            KV("x-amz-content-sha256", EMPTY_SHA),
            KV("authorization", authz[i]),
        };
        struct sigv4_input in = IN("POST", "/bucket/big.bin", uploads_q, h);
        struct sigv4_result r;
        struct errmsg em = {{0}};
        int rc = sigv4_verify(&in, T2024 - 600, lookup, NULL, &r, &em);
        if (rc)
            fail_msg("authz %zu: rc %d: %s", i, rc, em.buf);
        /* "?uploads=" canonicalises the same way */
        static const struct sigv4_kv q2[] = {KV("uploads", "")};
        in.query = q2;
        assert_int_equal(sigv4_verify(&in, T2024, lookup, NULL, &r, &em), 0);
    }
}

static void test_sigv4_botocore_list_header_spaces(void **state)
{
    UNUSED(state);
    static const struct sigv4_kv q[] = {
        KV("list-type", "2"), KV("prefix", "a/b c"), KV("encoding-type", "url"),
        KV("delimiter", "/"),
    };
    static const struct sigv4_kv h[] = {
        KV("Host", "127.0.0.1:9000"),
        KV("Accept-Encoding", "gzip"),
        KV("X-Amz-Meta-Multi", "  a   b  "),
        KV("X-Amz-Date", "20240102T030405Z"),
        KV("X-Amz-Content-SHA256", EMPTY_SHA),
        KV("Authorization",
           "AWS4-HMAC-SHA256 " BOTO_CRED ", SignedHeaders=accept-encoding;host;"
           "x-amz-content-sha256;x-amz-date;x-amz-meta-multi, "
           "Signature=9e83e2aeeebaf205ebefef3666259d041d8d47123ebce2582126b4921b19ef8b"),
    };
    struct sigv4_input in = IN("GET", "/bucket", q, h);
    struct sigv4_result r;
    struct errmsg em = {{0}};
    int rc = sigv4_verify(&in, T2024, lookup, NULL, &r, &em);
    if (rc)
        fail_msg("rc %d: %s", rc, em.buf);
    /* a value change inside the collapsed whitespace is a different request */
    struct sigv4_kv h2[ARRAY_SIZE(h)];
    memcpy(h2, h, sizeof(h));
    h2[2].value = "a b";
    in.headers = h2;
    assert_int_equal(sigv4_verify(&in, T2024, lookup, NULL, &r, &em), 0);
    h2[2].value = "ab";
    assert_int_equal(sigv4_verify(&in, T2024, lookup, NULL, &r, &em),
                     -S3E_SIGNATURE_DOES_NOT_MATCH);
}

/* ---- error paths of the header form -------------------------------------------------------- */

static int verify_with(const char *authz, const char *date, const char *sha, time_t now,
                       struct sigv4_result *r, struct errmsg *em)
{
    struct sigv4_kv h[5];
    size_t n = 0;
    h[n++] = (struct sigv4_kv){"Host", "examplebucket.s3.amazonaws.com"};
    h[n++] = (struct sigv4_kv){"Range", "bytes=0-9"};
    if (authz)
        h[n++] = (struct sigv4_kv){"Authorization", authz};
    if (date)
        h[n++] = (struct sigv4_kv){"x-amz-date", date};
    if (sha)
        h[n++] = (struct sigv4_kv){"x-amz-content-sha256", sha};
    struct sigv4_input in = {"GET", "/test.txt", NULL, 0, h, n, NULL, NULL};
    return sigv4_verify(&in, now, lookup, NULL, r, em);
}

#define GOOD_AUTHZ doc_get_hdrs[1].value
#define GOOD_CRED "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request"
#define GOOD_SH "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date"
#define GOOD_SIG "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"

static void test_sigv4_header_errors(void **state)
{
    UNUSED(state);
    static const struct {
        const char *authz, *date, *sha;
        time_t now;
        int rc;
    } cases[] = {
        {GOOD_AUTHZ, "20130524T000000Z", EMPTY_SHA, T2013, 0},
        {NULL, "20130524T000000Z", EMPTY_SHA, T2013, -S3E_ACCESS_DENIED},
        {"AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=", "20130524T000000Z", EMPTY_SHA,
         T2013, -S3E_NOT_IMPLEMENTED},
        {"AWS4-ECDSA-P256-SHA256 " GOOD_CRED ", " GOOD_SH ", " GOOD_SIG, "20130524T000000Z",
         EMPTY_SHA, T2013, -S3E_NOT_IMPLEMENTED},
        {"Basic dXNlcjpwYXNz", "20130524T000000Z", EMPTY_SHA, T2013, -S3E_AUTH_HEADER_MALFORMED},
        {"", "20130524T000000Z", EMPTY_SHA, T2013, -S3E_AUTH_HEADER_MALFORMED},
        {"AWS4-HMAC-SHA256", "20130524T000000Z", EMPTY_SHA, T2013, -S3E_AUTH_HEADER_MALFORMED},
        {"AWS4-HMAC-SHA256 " GOOD_CRED ", " GOOD_SH, "20130524T000000Z", EMPTY_SHA, T2013,
         -S3E_AUTH_HEADER_MALFORMED},
        {"AWS4-HMAC-SHA256 " GOOD_CRED ", " GOOD_SIG, "20130524T000000Z", EMPTY_SHA, T2013,
         -S3E_AUTH_HEADER_MALFORMED},
        {"AWS4-HMAC-SHA256 " GOOD_SH ", " GOOD_SIG, "20130524T000000Z", EMPTY_SHA, T2013,
         -S3E_AUTH_HEADER_MALFORMED},
        {"AWS4-HMAC-SHA256 " GOOD_CRED ", " GOOD_CRED ", " GOOD_SH ", " GOOD_SIG,
         "20130524T000000Z", EMPTY_SHA, T2013, -S3E_AUTH_HEADER_MALFORMED},
        {"AWS4-HMAC-SHA256 Credential, " GOOD_SH ", " GOOD_SIG, "20130524T000000Z", EMPTY_SHA,
         T2013, -S3E_AUTH_HEADER_MALFORMED},
        {"AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3, " GOOD_SH
         ", " GOOD_SIG,
         "20130524T000000Z", EMPTY_SHA, T2013, -S3E_AUTH_HEADER_MALFORMED},
        {"AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/2013052x/us-east-1/s3/aws4_request, "
         GOOD_SH ", " GOOD_SIG,
         "20130524T000000Z", EMPTY_SHA, T2013, -S3E_AUTH_HEADER_MALFORMED},
        {"AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1//aws4_request, "
         GOOD_SH ", " GOOD_SIG,
         "20130524T000000Z", EMPTY_SHA, T2013, -S3E_AUTH_HEADER_MALFORMED},
        /* the scope date is not the x-amz-date date */
        {"AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130523/us-east-1/s3/aws4_request, "
         GOOD_SH ", " GOOD_SIG,
         "20130524T000000Z", EMPTY_SHA, T2013, -S3E_AUTH_HEADER_MALFORMED},
        {"AWS4-HMAC-SHA256 " GOOD_CRED ", SignedHeaders=, " GOOD_SIG, "20130524T000000Z",
         EMPTY_SHA, T2013, -S3E_AUTH_HEADER_MALFORMED},
        {"AWS4-HMAC-SHA256 " GOOD_CRED ", SignedHeaders=host;;range, " GOOD_SIG,
         "20130524T000000Z", EMPTY_SHA, T2013, -S3E_AUTH_HEADER_MALFORMED},
        /* an unknown key */
        {"AWS4-HMAC-SHA256 Credential=AKIANOTKNOWN/20130524/us-east-1/s3/aws4_request, " GOOD_SH
         ", " GOOD_SIG,
         "20130524T000000Z", EMPTY_SHA, T2013, -S3E_INVALID_ACCESS_KEY_ID},
        /* no date at all, a bad date */
        {GOOD_AUTHZ, NULL, EMPTY_SHA, T2013, -S3E_ACCESS_DENIED},
        {GOOD_AUTHZ, "20130524", EMPTY_SHA, T2013, -S3E_ACCESS_DENIED},
        {GOOD_AUTHZ, "20131324T000000Z", EMPTY_SHA, T2013, -S3E_ACCESS_DENIED},
        /* payload header */
        {GOOD_AUTHZ, "20130524T000000Z", NULL, T2013, -S3E_MISSING_SECURITY_HEADER},
        {GOOD_AUTHZ, "20130524T000000Z", "abc", T2013, -S3E_INVALID_ARGUMENT},
        {GOOD_AUTHZ, "20130524T000000Z", EMPTY_SHA "0", T2013, -S3E_INVALID_ARGUMENT},
        {GOOD_AUTHZ, "20130524T000000Z",
         "g3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", T2013,
         -S3E_INVALID_ARGUMENT},
        {GOOD_AUTHZ, "20130524T000000Z", "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD", T2013,
         -S3E_NOT_IMPLEMENTED},
        /* the upper-case digest is the same digest but a different signed header value */
        {GOOD_AUTHZ, "20130524T000000Z",
         "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855", T2013,
         -S3E_SIGNATURE_DOES_NOT_MATCH},
        {GOOD_AUTHZ, "20130524T000000Z", "UNSIGNED-PAYLOAD", T2013, -S3E_SIGNATURE_DOES_NOT_MATCH},
        /* clock skew: 15 minutes either way is fine, more is not */
        {GOOD_AUTHZ, "20130524T000000Z", EMPTY_SHA, T2013 + 900, 0},
        {GOOD_AUTHZ, "20130524T000000Z", EMPTY_SHA, T2013 - 900, 0},
        {GOOD_AUTHZ, "20130524T000000Z", EMPTY_SHA, T2013 + 901, -S3E_REQUEST_TIME_TOO_SKEWED},
        {GOOD_AUTHZ, "20130524T000000Z", EMPTY_SHA, T2013 - 901, -S3E_REQUEST_TIME_TOO_SKEWED},
        /* the signature */
        {"AWS4-HMAC-SHA256 " GOOD_CRED ", " GOOD_SH
         ", Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb42",
         "20130524T000000Z", EMPTY_SHA, T2013, -S3E_SIGNATURE_DOES_NOT_MATCH},
        {"AWS4-HMAC-SHA256 " GOOD_CRED ", " GOOD_SH ", Signature=f0e8", "20130524T000000Z",
         EMPTY_SHA, T2013, -S3E_SIGNATURE_DOES_NOT_MATCH},
        {"AWS4-HMAC-SHA256 " GOOD_CRED ", " GOOD_SH
         ", Signature=F0E8BDB87C964420E857BD35B5D6ED310BD44F0170ABA48DD91039C6036BDB41",
         "20130524T000000Z", EMPTY_SHA, T2013, 0},
        /* a signed header that is absent */
        {"AWS4-HMAC-SHA256 " GOOD_CRED
         ", SignedHeaders=host;range;x-amz-content-sha256;x-amz-date;x-amz-meta-gone, " GOOD_SIG,
         "20130524T000000Z", EMPTY_SHA, T2013, -S3E_SIGNATURE_DOES_NOT_MATCH},
        /* fewer signed headers than the client used */
        {"AWS4-HMAC-SHA256 " GOOD_CRED ", SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
         GOOD_SIG,
         "20130524T000000Z", EMPTY_SHA, T2013, -S3E_SIGNATURE_DOES_NOT_MATCH},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct sigv4_result r;
        struct errmsg em = {{0}};
        int rc = verify_with(cases[i].authz, cases[i].date, cases[i].sha, cases[i].now, &r, &em);
        if (rc != cases[i].rc)
            fail_msg("case %zu: rc %d want %d (%s)", i, rc, cases[i].rc, em.buf);
        if (rc)
            assert_true(em.buf[0] != '\0');
        else
            assert_int_equal(r.presigned, 0);
        /* a NULL errmsg is fine too */
        assert_int_equal(verify_with(cases[i].authz, cases[i].date, cases[i].sha, cases[i].now,
                                     &r, NULL),
                         cases[i].rc);
    }
}

/* ---- sign -> verify round trips -------------------------------------------------------------- */

static void test_sigv4_sign_verify_roundtrip(void **state)
{
    UNUSED(state);
    static const struct {
        const char *sha;
        enum sigv4_payload want;
    } modes[] = {
        {EMPTY_SHA, SIGV4_PAYLOAD_SHA256},
        {"UNSIGNED-PAYLOAD", SIGV4_PAYLOAD_UNSIGNED},
        {"STREAMING-AWS4-HMAC-SHA256-PAYLOAD", SIGV4_PAYLOAD_STREAMING},
        {"STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", SIGV4_PAYLOAD_STREAMING_TRAILER},
        {"STREAMING-UNSIGNED-PAYLOAD-TRAILER", SIGV4_PAYLOAD_UNSIGNED_TRAILER},
    };
    for (size_t i = 0; i < ARRAY_SIZE(modes); i++) {
        struct sigv4_kv q[] = {KV("partNumber", "3"), KV("uploadId", "a/b+c=d"),
                               KV("x-id", "UploadPart")};
        struct sigv4_kv h[6] = {
            KV("host", "127.0.0.1:9000"), KV("x-amz-date", "20240102T030405Z"),
            KV("x-amz-content-sha256", modes[i].sha), KV("X-Amz-Meta-A", "1"),
            KV("x-amz-meta-a", "2"),
        };
        struct sigv4_input in = {"PUT", "/b/k with space/\xc3\xa9", q, 3, h, 5, NULL, NULL};
        char authz[512];
        assert_int_equal(sigv4_sign(&in, BOTO_AK, BOTO_SK, "eu-west-3", "s3", "20240102T030405Z",
                                    modes[i].sha, authz, sizeof(authz)),
                         0);
        assert_non_null(strstr(authz, "SignedHeaders=host;x-amz-content-sha256;x-amz-date;"
                                      "x-amz-meta-a, "));
        h[5] = (struct sigv4_kv){"Authorization", authz};
        in.n_headers = 6;
        struct sigv4_result r;
        struct errmsg em = {{0}};
        int rc = sigv4_verify(&in, T2024 + 5, lookup, NULL, &r, &em);
        if (rc)
            fail_msg("mode %zu: rc %d (%s)", i, rc, em.buf);
        assert_int_equal(r.payload, modes[i].want);
        assert_string_equal(r.scope, "20240102/eu-west-3/s3/aws4_request");
        assert_string_equal(r.amz_date, "20240102T030405Z");
        uint8_t key[32];
        sigv4_signing_key(BOTO_SK, "20240102", "eu-west-3", "s3", key);
        assert_memory_equal(key, r.signing_key, 32);
        assert_non_null(strstr(authz, r.seed_signature));
    }
}

/* A request dated only by Date (no x-amz-date). */
static void test_sigv4_date_header(void **state)
{
    UNUSED(state);
    struct sigv4_kv h[4] = {
        KV("Host", "h"), KV("Date", "Tue, 02 Jan 2024 03:04:05 GMT"),
        KV("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
    };
    struct sigv4_input in = {"GET", "/b/k", NULL, 0, h, 3, NULL, NULL};
    char authz[512];
    assert_int_equal(sigv4_sign(&in, BOTO_AK, BOTO_SK, "us-east-1", "s3", "20240102T030405Z",
                                "UNSIGNED-PAYLOAD", authz, sizeof(authz)),
                     0);
    h[3] = (struct sigv4_kv){"Authorization", authz};
    in.n_headers = 4;
    struct sigv4_result r;
    assert_int_equal(sigv4_verify(&in, T2024, lookup, NULL, &r, NULL), 0);
    assert_string_equal(r.amz_date, "20240102T030405Z");
    assert_int_equal(sigv4_verify(&in, T2024 + 1000, lookup, NULL, &r, NULL),
                     -S3E_REQUEST_TIME_TOO_SKEWED);
    h[1].value = "Tue, 02 Jan 2024 03:04:05";
    assert_int_equal(sigv4_verify(&in, T2024, lookup, NULL, &r, NULL), -S3E_ACCESS_DENIED);
}

/* ---- what this server accepts: scope and signed headers ------------------------------------ */

/* Signs GET /b/k for @region/@service (host signed unless @unsigned_host), then verifies it
 * as a server of us-east-1 / s3 would, with @extra (an x-amz-* header added after signing,
 * or NULL). */
static int scope_case(const char *region, const char *service, int unsigned_host,
                      const struct sigv4_kv *extra, struct sigv4_result *r, struct errmsg *em)
{
    struct sigv4_kv h[5] = {KV("x-amz-date", "20240102T030405Z"),
                            KV("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
                            KV("Host", "127.0.0.1:9000")};
    struct sigv4_input in = {"GET", "/b/k", NULL, 0, h, unsigned_host ? 2 : 3, NULL, NULL};
    char authz[512];
    assert_int_equal(sigv4_sign(&in, BOTO_AK, BOTO_SK, region, service, "20240102T030405Z",
                                "UNSIGNED-PAYLOAD", authz, sizeof(authz)),
                     0);
    size_t n = 3;
    h[n++] = (struct sigv4_kv){"Authorization", authz};
    if (extra)
        h[n++] = *extra;
    in.n_headers = n;
    in.region = "us-east-1";
    in.service = "s3";
    return sigv4_verify(&in, T2024, lookup, NULL, r, em);
}

static void test_sigv4_scope_region_service(void **state)
{
    UNUSED(state);
    struct sigv4_result r;
    struct errmsg em = {{0}};
    assert_int_equal(scope_case("us-east-1", "s3", 0, NULL, &r, &em), 0);
    assert_int_equal(r.refused, 0);

    /* another region: S3's message and <Region> (region_wrong) */
    memset(&em, 0, sizeof(em));
    assert_int_equal(scope_case("eu-west-1", "s3", 0, NULL, &r, &em), -S3E_AUTH_HEADER_MALFORMED);
    assert_int_equal(r.region_wrong, 1);
    assert_int_equal(r.refused, 1);
    assert_string_equal(em.buf, "The authorization header is malformed; the region 'eu-west-1' "
                                "is wrong; expecting 'us-east-1'");

    /* another service: malformed, not a region error */
    memset(&em, 0, sizeof(em));
    assert_int_equal(scope_case("us-east-1", "ec2", 0, NULL, &r, &em),
                     -S3E_AUTH_HEADER_MALFORMED);
    assert_int_equal(r.region_wrong, 0);
    assert_int_equal(r.refused, 1);
    assert_non_null(strstr(em.buf, "'ec2'"));

    /* NULL accepts any (the AWS test suite signs for "service") */
    struct sigv4_kv h[4] = {KV("x-amz-date", "20240102T030405Z"),
                            KV("x-amz-content-sha256", "UNSIGNED-PAYLOAD"), KV("Host", "h")};
    struct sigv4_input in = {"GET", "/", NULL, 0, h, 3, NULL, NULL};
    char authz[512];
    assert_int_equal(sigv4_sign(&in, BOTO_AK, BOTO_SK, "mars-1", "service", "20240102T030405Z",
                                "UNSIGNED-PAYLOAD", authz, sizeof(authz)),
                     0);
    h[3] = (struct sigv4_kv){"Authorization", authz};
    in.n_headers = 4;
    assert_int_equal(sigv4_verify(&in, T2024, lookup, NULL, &r, NULL), 0);
    in.region = "mars-1";
    assert_int_equal(sigv4_verify(&in, T2024, lookup, NULL, &r, NULL), 0);
    in.service = "s3";
    assert_int_equal(sigv4_verify(&in, T2024, lookup, NULL, &r, NULL),
                     -S3E_AUTH_HEADER_MALFORMED);
}

/* The scope's date must be the request's date: a signing key of another day is not honoured,
 * in both forms. */
static void test_sigv4_scope_date(void **state)
{
    UNUSED(state);
    struct sigv4_result r;
    struct errmsg em = {{0}};
    /* header form (the doc GET, signed on 20130524, scope date changed) */
    assert_int_equal(verify_with("AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130525/"
                                 "us-east-1/s3/aws4_request, " GOOD_SH ", " GOOD_SIG,
                                 "20130524T000000Z", EMPTY_SHA, T2013, &r, &em),
                     -S3E_AUTH_HEADER_MALFORMED);
    /* presigned form */
    struct sigv4_kv q[6];
    presign_input(q, "86400", DOC_PRESIGN_SIG);
    q[1].value = DOC_AK "/20130523/us-east-1/s3/aws4_request";
    struct sigv4_input in = {"GET", "/test.txt", q, 6, presign_hdrs, ARRAY_SIZE(presign_hdrs),
                             "us-east-1", "s3"};
    assert_int_equal(sigv4_verify(&in, T2013, lookup, NULL, &r, &em), -S3E_AUTH_QUERY_MALFORMED);
}

/* Presigned URLs: the same scope rules, with the query form's code and message. */
static void test_sigv4_scope_presigned(void **state)
{
    UNUSED(state);
    struct sigv4_kv q[6];
    struct sigv4_result r;
    struct errmsg em = {{0}};
    presign_input(q, "86400", DOC_PRESIGN_SIG);
    struct sigv4_input in = {"GET", "/test.txt", q, 6, presign_hdrs, ARRAY_SIZE(presign_hdrs),
                             "us-east-1", "s3"};
    assert_int_equal(sigv4_verify(&in, T2013 + 100, lookup, NULL, &r, &em), 0);
    in.region = "eu-central-1";
    assert_int_equal(sigv4_verify(&in, T2013 + 100, lookup, NULL, &r, &em),
                     -S3E_AUTH_QUERY_MALFORMED);
    assert_int_equal(r.region_wrong, 1);
    assert_string_equal(em.buf, "Error parsing the X-Amz-Credential parameter; the region "
                                "'us-east-1' is wrong; expecting 'eu-central-1'");
    in.region = "us-east-1";
    in.service = "s3-object-lambda";
    assert_int_equal(sigv4_verify(&in, T2013 + 100, lookup, NULL, &r, &em),
                     -S3E_AUTH_QUERY_MALFORMED);
    assert_int_equal(r.region_wrong, 0);
    /* host left out of X-Amz-SignedHeaders (refused before the signature is looked at) */
    in.service = "s3";
    struct sigv4_kv h[] = {KV("Host", "examplebucket.s3.amazonaws.com"), KV("Range", "bytes=0-1")};
    in.headers = h;
    in.n_headers = 2;
    q[4].value = "range";
    assert_int_equal(sigv4_verify(&in, T2013 + 100, lookup, NULL, &r, &em), -S3E_ACCESS_DENIED);
    assert_string_equal(r.not_signed, "host");
}

/* host and every x-amz-* header the request carries must be signed (S3's HeadersNotSigned). */
static void test_sigv4_headers_not_signed(void **state)
{
    UNUSED(state);
    struct sigv4_result r;
    struct errmsg em = {{0}};
    assert_int_equal(scope_case("us-east-1", "s3", 1, NULL, &r, &em), -S3E_ACCESS_DENIED);
    assert_string_equal(r.not_signed, "host");
    assert_int_equal(r.refused, 1);
    assert_string_equal(em.buf, "There were headers present in the request which were not signed");
    /* an x-amz-copy-source added to a captured request would turn it into a copy */
    struct sigv4_kv cs = KV("X-Amz-Copy-Source", "/b/other");
    assert_int_equal(scope_case("us-east-1", "s3", 0, &cs, &r, &em), -S3E_ACCESS_DENIED);
    assert_string_equal(r.not_signed, "x-amz-copy-source");
    assert_int_equal(scope_case("us-east-1", "s3", 1, &cs, &r, &em), -S3E_ACCESS_DENIED);
    assert_string_equal(r.not_signed, "host,x-amz-copy-source");
    /* other headers may go unsigned (S3 signs what the client chose) */
    struct sigv4_kv ua = KV("User-Agent", "x");
    assert_int_equal(scope_case("us-east-1", "s3", 0, &ua, &r, &em), 0);
}

/* ---- building blocks ------------------------------------------------------------------------ */

static void test_sigv4_uri_encode(void **state)
{
    UNUSED(state);
    static const struct {
        const char *in;
        int keep_slash;
        const char *want;
    } cases[] = {
        {"", 0, ""},
        {"abcXYZ019-._~", 0, "abcXYZ019-._~"},
        {"a/b", 1, "a/b"},
        {"a/b", 0, "a%2Fb"},
        {"a b+c", 1, "a%20b%2Bc"},
        {"%41", 1, "%2541"}, /* never double-decoded, encoded once */
        {"!*'();:@&=$,?#[]", 1, "%21%2A%27%28%29%3B%3A%40%26%3D%24%2C%3F%23%5B%5D"},
        {"\xc3\xbc\xff\x01", 0, "%C3%BC%FF%01"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        char out[128];
        int n = sigv4_uri_encode(cases[i].in, strlen(cases[i].in), cases[i].keep_slash, out,
                                 sizeof(out));
        assert_int_equal(n, (int)strlen(cases[i].want));
        assert_string_equal(out, cases[i].want);
    }
    char small[4];
    assert_int_equal(sigv4_uri_encode("abc", 3, 0, small, 4), 3);
    assert_int_equal(sigv4_uri_encode("abcd", 4, 0, small, 4), -ENOSPC);
    assert_int_equal(sigv4_uri_encode("a b", 3, 0, small, 4), -ENOSPC);
    assert_int_equal(sigv4_uri_encode(" ", 1, 0, small, 4), 3);
    assert_string_equal(small, "%20");
    /* a length shorter than the string */
    assert_int_equal(sigv4_uri_encode("ab/cd", 3, 1, small, 4), 3);
    assert_string_equal(small, "ab/");
}

static void test_sigv4_canonical_request_shapes(void **state)
{
    UNUSED(state);
    static const struct sigv4_kv q[] = {
        KV("b", "2"), KV("a", "z"), KV("a", "y"), KV("uploads", NULL), KV("k", "a b/c+d"),
        KV("X-Amz-Signature", "kept here"),
    };
    static const struct sigv4_kv h[] = {KV("HOST", "\tH  \t x "), KV("x-e", "")};
    struct sigv4_input in = {"DELETE", "", q, ARRAY_SIZE(q), h, ARRAY_SIZE(h), NULL, NULL};
    char *c = sigv4_canonical_request(&in, "host;x-e", "UNSIGNED-PAYLOAD");
    assert_non_null(c);
    assert_string_equal(c, "DELETE\n/\nX-Amz-Signature=kept%20here&a=y&a=z&b=2&k=a%20b%2Fc%2Bd&"
                           "uploads=\nhost:H x\nx-e:\n\nhost;x-e\nUNSIGNED-PAYLOAD");
    free(c);
    assert_null(sigv4_canonical_request(&in, "host;x-missing", "UNSIGNED-PAYLOAD"));
    in.path = NULL;
    c = sigv4_canonical_request(&in, "host", "x");
    assert_non_null(c);
    assert_true(!strncmp(c, "DELETE\n/\n", 9));
    free(c);
}

/* A path and a query value longer than the encoder's runs of 256 bytes, with bytes to encode
 * on both sides of each run's edge: the canonical request holds every byte's encoding, in
 * order (the expectation is built here a byte at a time). */
static void test_sigv4_canonical_request_long_values(void **state)
{
    UNUSED(state);
    static const char hexu[] = "0123456789ABCDEF";
    char path[800], val[700], want_path[2400], want_val[2100];
    size_t wp = 0, wv = 0;
    for (size_t i = 0; i + 1 < sizeof(path); i++) {
        char ch = i % 7 == 3 ? ' ' : i % 11 == 5 ? '/' : (i % 255 == 254 ? '\xe9' : (char)('a' + i % 26));
        path[i] = i == 0 ? '/' : ch;
    }
    path[sizeof(path) - 1] = '\0';
    for (size_t i = 0; path[i]; i++) {
        unsigned char ch = (unsigned char)path[i];
        if (ch == '/' || (ch >= 'a' && ch <= 'z')) {
            want_path[wp++] = (char)ch;
        } else {
            want_path[wp++] = '%';
            want_path[wp++] = hexu[ch >> 4];
            want_path[wp++] = hexu[ch & 15];
        }
    }
    want_path[wp] = '\0';
    for (size_t i = 0; i + 1 < sizeof(val); i++)
        val[i] = i % 256 == 255 || i % 256 == 0 ? '/' : (char)('b' + i % 20);
    val[sizeof(val) - 1] = '\0';
    for (size_t i = 0; val[i]; i++) {
        if (val[i] == '/') {
            memcpy(want_val + wv, "%2F", 3);
            wv += 3;
        } else {
            want_val[wv++] = val[i];
        }
    }
    want_val[wv] = '\0';
    const struct sigv4_kv q[] = {KV("v", val)};
    static const struct sigv4_kv h[] = {KV("host", "h")};
    struct sigv4_input in = {"GET", path, q, ARRAY_SIZE(q), h, ARRAY_SIZE(h), NULL, NULL};
    char *c = sigv4_canonical_request(&in, "host", "UNSIGNED-PAYLOAD");
    assert_non_null(c);
    char *want = malloc(strlen(want_path) + strlen(want_val) + 64);
    assert_non_null(want);
    sprintf(want, "GET\n%s\nv=%s\nhost:h\n\nhost\nUNSIGNED-PAYLOAD", want_path, want_val);
    assert_string_equal(c, want);
    free(want);
    free(c);
}

static void test_sigv4_hash_helpers(void **state)
{
    UNUSED(state);
    char h[65];
    sigv4_sha256_hex("", 0, h);
    assert_string_equal(h, EMPTY_SHA);
    sigv4_sha256_hex("Param1=value1", 13, h);
    assert_string_equal(h, "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e");
    uint8_t key[32];
    sigv4_signing_key(SUITE_SK, "20150830", "us-east-1", "iam", key);
    /* the key-derivation example of the SigV4 documentation */
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", key[i]);
    assert_string_equal(hex, "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9");
}

/* The canonical query past what append_query() keeps on its stack (16 pairs, 4 KiB encoded):
 * 20 pairs given in reverse order, 300-byte values to encode, one without a value. */
static void test_sigv4_canonical_query_many_pairs(void **state)
{
    UNUSED(state);
    char names[20][8], vals[20][301], want[20 * (8 + 900) + 64];
    struct sigv4_kv q[20];
    size_t w = 0;
    for (int i = 0; i < 20; i++) {
        snprintf(names[i], sizeof(names[i]), "k%02d", 19 - i);
        for (int j = 0; j < 300; j++)
            vals[i][j] = j % 10 == 9 ? '/' : (char)('a' + (i + j) % 26);
        vals[i][300] = '\0';
        q[i] = (struct sigv4_kv){names[i], i == 7 ? NULL : vals[i]};
    }
    for (int i = 19; i >= 0; i--) { /* sorted: k00 first, the last given */
        w += (size_t)snprintf(want + w, sizeof(want) - w, "%s%s=", w ? "&" : "", names[i]);
        for (int j = 0; i != 7 && j < 300; j++)
            w += (size_t)snprintf(want + w, sizeof(want) - w, vals[i][j] == '/' ? "%%2F" : "%c",
                                  vals[i][j]);
    }
    static const struct sigv4_kv h[] = {KV("host", "h")};
    struct sigv4_input in = {"GET", "/b/k", q, 20, h, ARRAY_SIZE(h), NULL, NULL};
    char *c = sigv4_canonical_request(&in, "host", "UNSIGNED-PAYLOAD");
    assert_non_null(c);
    const char *line = strchr(c, '\n') + 1; /* the method's line */
    line = strchr(line, '\n') + 1;         /* the path's */
    assert_int_equal(strcspn(line, "\n"), strlen(want));
    assert_memory_equal(line, want, strlen(want));
    free(c);
}

/* lib/digest.c, which SigV4 signs and verifies with: RFC 4231's HMAC-SHA256 vectors (a key
 * shorter than the block, and one longer, hashed first), one after another on the same
 * thread's reused contexts, and the same from several threads at once. */
static void hex32(const uint8_t d[32], char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

struct hmac_case {
    uint8_t key[131];
    size_t klen;
    const char *msg, *want;
};

static void hmac_cases(struct hmac_case c[3])
{
    memset(c, 0, 3 * sizeof(*c));
    memset(c[0].key, 0x0b, 20);
    c[0].klen = 20;
    c[0].msg = "Hi There";
    c[0].want = "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7";
    memcpy(c[1].key, "Jefe", 4);
    c[1].klen = 4;
    c[1].msg = "what do ya want for nothing?";
    c[1].want = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
    memset(c[2].key, 0xaa, 131);
    c[2].klen = 131;
    c[2].msg = "Test Using Larger Than Block-Size Key - Hash Key First";
    c[2].want = "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54";
}

static void *hmac_thread(void *arg)
{
    struct hmac_case c[3];
    hmac_cases(c);
    intptr_t bad = 0;
    for (int i = 0; i < 3000; i++) {
        uint8_t d[32];
        char h[65];
        const struct hmac_case *k = &c[(i + (intptr_t)arg) % 3];
        if (digest_hmac_sha256(k->key, k->klen, k->msg, strlen(k->msg), d))
            bad++;
        hex32(d, h);
        bad += strcmp(h, k->want) != 0;
    }
    return (void *)bad;
}

static void test_sigv4_digest_vectors(void **state)
{
    UNUSED(state);
    uint8_t d[32];
    char h[65];
    struct hmac_case c[3];
    hmac_cases(c);
    assert_int_equal(digest_sha256("abc", 3, d), 0);
    hex32(d, h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    for (int round = 0; round < 2; round++) /* each call keys the reused context anew */
        for (int i = 0; i < 3; i++) {
            assert_int_equal(digest_hmac_sha256(c[i].key, c[i].klen, c[i].msg, strlen(c[i].msg),
                                                d),
                             0);
            hex32(d, h);
            assert_string_equal(h, c[i].want);
            assert_int_equal(digest_sha256("abc", 3, d), 0); /* between two HMACs */
            hex32(d, h);
            assert_string_equal(
                h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        }
    pthread_t t[4];
    for (intptr_t i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, hmac_thread, (void *)i), 0);
    for (int i = 0; i < 4; i++) {
        void *bad = (void *)1;
        assert_int_equal(pthread_join(t[i], &bad), 0);
        assert_ptr_equal(bad, NULL);
    }
}

/* lib/s3c.c's HTTP date (Last-Modified on every object answer), formatted by hand. */
static void test_http_date_format(void **state)
{
    UNUSED(state);
    char d[32];
    s3c_http_date(784111777, d); /* RFC 9110's example */
    assert_string_equal(d, "Sun, 06 Nov 1994 08:49:37 GMT");
    s3c_http_date(0, d);
    assert_string_equal(d, "Thu, 01 Jan 1970 00:00:00 GMT");
    s3c_http_date(1798502400, d);
    assert_string_equal(d, "Tue, 29 Dec 2026 00:00:00 GMT");
    s3c_http_date(253402300799ll, d);
    assert_string_equal(d, "Fri, 31 Dec 9999 23:59:59 GMT");
    s3c_http_date(253402300800ll, d); /* year 10000: as printf writes it, cut to 31 bytes */
    assert_string_equal(d, "Sat, 01 Jan 10000 00:00:00 GMT");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigv4_signing_key_cache),
        cmocka_unit_test(test_sigv4_suite_building_blocks),
        cmocka_unit_test(test_sigv4_suite_sign),
        cmocka_unit_test(test_sigv4_suite_verify),
        cmocka_unit_test(test_sigv4_doc_get_range),
        cmocka_unit_test(test_sigv4_doc_put),
        cmocka_unit_test(test_sigv4_doc_chunked_seed),
        cmocka_unit_test(test_sigv4_doc_presigned),
        cmocka_unit_test(test_sigv4_presigned_errors),
        cmocka_unit_test(test_sigv4_botocore_unicode_key_xid),
        cmocka_unit_test(test_sigv4_botocore_uploads_no_equals),
        cmocka_unit_test(test_sigv4_botocore_list_header_spaces),
        cmocka_unit_test(test_sigv4_header_errors),
        cmocka_unit_test(test_sigv4_sign_verify_roundtrip),
        cmocka_unit_test(test_sigv4_date_header),
        cmocka_unit_test(test_sigv4_scope_region_service),
        cmocka_unit_test(test_sigv4_scope_date),
        cmocka_unit_test(test_sigv4_scope_presigned),
        cmocka_unit_test(test_sigv4_headers_not_signed),
        cmocka_unit_test(test_sigv4_uri_encode),
        cmocka_unit_test(test_sigv4_canonical_request_shapes),
        cmocka_unit_test(test_sigv4_canonical_request_long_values),
        cmocka_unit_test(test_sigv4_canonical_query_many_pairs),
        cmocka_unit_test(test_sigv4_hash_helpers),
        cmocka_unit_test(test_sigv4_digest_vectors),
        cmocka_unit_test(test_http_date_format),
    };
    (void)no_query;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
