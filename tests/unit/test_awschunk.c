/*
 * test_awschunk.c: the aws-chunked decoder on AWS's worked example
 * (STREAMING-AWS4-HMAC-SHA256-PAYLOAD, 66560 x 'a', 64 KiB chunks), on a signed-trailer body
 * whose signatures were computed once with Python's hmac/hashlib, on the JS SDK's unsigned
 * trailer body, and on malformed input. Every body is fed whole, one byte at a time and in
 * random splits.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "lib/s3c.h"
#include "lib/s3err.h"
#include "sig/awschunk.h"

#define DATE "20130524T000000Z"
#define SCOPE "20130524/us-east-1/s3/aws4_request"
#define DOC_SEED "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
#define TR_SEED "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e"

/* sigv4_signing_key(DOC secret, 20130524, us-east-1, s3) */
static const uint8_t doc_key[32] = {
    0xdb, 0xb8, 0x93, 0xac, 0xc0, 0x10, 0x96, 0x49, 0x18, 0xf1, 0xfd, 0x43, 0x3a, 0xdd, 0x87, 0xc7,
    0x0e, 0x8b, 0x0d, 0xb6, 0xbe, 0x30, 0xc1, 0xfb, 0xea, 0xfe, 0xfa, 0x5e, 0xc6, 0xba, 0x83, 0x78,
};

static const char *doc_sigs[] = {
    "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
    "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
    "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
};
static const char *tr_sigs[] = {
    "3d1713c068041cdd64332ba0bab6ef4ff85c53a25f5aa48c4c493a078f548fdb",
    "44eff479690a43d05a8aea738b2785112d43721ed32a7c6f6a4eb941368ea083",
    "990751a78ef07564f67ede5cfc451f18d2037c24ae62168eedb8dca02bd6acf2",
};
#define TR_CRC "v5J7Gg=="
#define TR_SIG "41a1daec48b20fbf04174dd1d213fdb5ad183c236b866e99abc7529b5c6e3955"
#define TR2_SIG "eb49e6d41a9b3f8184e6fe3e2fdbe721ba55315fbf47815a5c68b7dfd9fffce5"

/* ---- body building ------------------------------------------------------------------------ */

struct body {
    char *p;
    size_t len, cap;
};

static void put(struct body *b, const void *p, size_t n)
{
    if (!n)
        return;
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void puts_(struct body *b, const char *s)
{
    put(b, s, strlen(s));
}

static void frame(struct body *b, const uint8_t *data, size_t n, const char *sig)
{
    char h[128];
    if (sig)
        snprintf(h, sizeof(h), "%zx;chunk-signature=%s\r\n", n, sig);
    else
        snprintf(h, sizeof(h), "%zx\r\n", n);
    puts_(b, h);
    put(b, data, n);
    if (n)
        puts_(b, "\r\n");
}

static uint8_t *pattern(size_t n)
{
    uint8_t *d = malloc(n);
    assert_non_null(d);
    for (size_t i = 0; i < n; i++)
        d[i] = (uint8_t)((i * 7 + 3) % 251);
    return d;
}

/* AWS's example: 66560 'a' in a 65536 and a 1024 chunk, then the final frame. */
static struct body doc_body(void)
{
    struct body b = {0};
    static uint8_t a[65536];
    memset(a, 'a', sizeof(a));
    frame(&b, a, 65536, doc_sigs[0]);
    frame(&b, a, 1024, doc_sigs[1]);
    frame(&b, a, 0, doc_sigs[2]);
    puts_(&b, "\r\n");
    return b;
}

/* 70000 pattern bytes, signed, with a signed crc32 trailer. */
static struct body trailer_body(const uint8_t *d, const char *trailer_lines)
{
    struct body b = {0};
    frame(&b, d, 65536, tr_sigs[0]);
    frame(&b, d + 65536, 70000 - 65536, tr_sigs[1]);
    frame(&b, d, 0, tr_sigs[2]);
    puts_(&b, trailer_lines);
    return b;
}

/* ---- feeding ------------------------------------------------------------------------------ */

struct sink {
    struct body got;
    size_t calls;
    size_t max_call; /* the largest piece emitted at once */
    int fail_after;  /* return an error once this many bytes were taken (0: never) */
};

static int sink_out(void *cls, const void *data, size_t len)
{
    struct sink *s = cls;
    assert_true(len > 0);
    if (s->fail_after && s->got.len + len > (size_t)s->fail_after)
        return -28; /* -ENOSPC from the cache file */
    put(&s->got, data, len);
    s->calls++;
    if (len > s->max_call)
        s->max_call = len;
    return 0;
}

enum split { SPLIT_WHOLE, SPLIT_BYTE, SPLIT_RANDOM };

/* Feeds @b to a new decoder; returns the first error of feed or finish. */
static int run(enum awschunk_mode mode, const char *seed, const struct body *b, enum split how,
               struct sink *s, struct awschunk **keep)
{
    struct awschunk *c;
    assert_int_equal(awschunk_new(mode, doc_key, seed, DATE, SCOPE, &c), 0);
    int rc = 0;
    size_t off = 0;
    while (off < b->len && !rc) {
        size_t n = b->len - off;
        if (how == SPLIT_BYTE)
            n = 1;
        else if (how == SPLIT_RANDOM) {
            size_t r = (size_t)(rand() % 9000) + (rand() % 4 ? 0 : 1); /* 0 and 1 happen too */
            n = S3C_MIN(n, r);
        }
        rc = awschunk_feed(c, b->p + off, n, sink_out, s);
        off += n;
    }
    if (!rc)
        rc = awschunk_finish(c);
    else
        assert_int_equal(awschunk_finish(c), rc); /* sticky */
    if (keep)
        *keep = c;
    else
        awschunk_free(c);
    return rc;
}

static void test_awschunk_doc_example(void **state)
{
    UNUSED(state);
    struct body b = doc_body();
    assert_int_equal(b.len, 66824); /* the example's Content-Length */
    for (int how = SPLIT_WHOLE; how <= SPLIT_RANDOM; how++) {
        for (int rep = 0; rep < (how == SPLIT_RANDOM ? 20 : 1); rep++) {
            struct sink s = {0};
            struct awschunk *c;
            assert_int_equal(run(AWSCHUNK_SIGNED, DOC_SEED, &b, how, &s, &c), 0);
            assert_int_equal(s.got.len, 66560);
            assert_int_equal(awschunk_decoded_bytes(c), 66560);
            for (size_t i = 0; i < s.got.len; i++)
                if (s.got.p[i] != 'a')
                    fail_msg("byte %zu", i);
            /* streamed as it came: never more than the piece fed, nor across a chunk's end */
            assert_true(s.max_call <= 65536);
            if (how == SPLIT_WHOLE)
                assert_int_equal(s.calls, 2);
            assert_null(awschunk_trailer(c, "x-amz-checksum-crc32"));
            awschunk_free(c);
            free(s.got.p);
        }
    }
    free(b.p);
}

/* A bad signature fails the decode at the end of its chunk: the chunks before it and its own
 * bytes went out (the caller drops them all on the error), nothing after it. */
static void test_awschunk_doc_bad_signatures(void **state)
{
    UNUSED(state);
    for (int which = 0; which < 3; which++) {
        struct body b = doc_body();
        char *sig = memmem(b.p, b.len, doc_sigs[which], 64);
        assert_non_null(sig);
        sig[10] ^= 1;
        for (int how = SPLIT_WHOLE; how <= SPLIT_BYTE; how++) {
            struct sink s = {0};
            assert_int_equal(run(AWSCHUNK_SIGNED, DOC_SEED, &b, how, &s, NULL),
                             -S3E_SIGNATURE_DOES_NOT_MATCH);
            assert_int_equal(s.got.len, which == 0 ? 65536 : 66560);
            free(s.got.p);
        }
        free(b.p);
    }
    /* a wrong seed fails the first chunk */
    struct body b = doc_body();
    struct sink s = {0};
    assert_int_equal(run(AWSCHUNK_SIGNED, TR_SEED, &b, SPLIT_WHOLE, &s, NULL),
                     -S3E_SIGNATURE_DOES_NOT_MATCH);
    assert_int_equal(s.got.len, 65536);
    free(s.got.p);
    memset(&s, 0, sizeof(s));
    /* a changed data byte fails its chunk */
    b.p[200] = 'b';
    assert_int_equal(run(AWSCHUNK_SIGNED, DOC_SEED, &b, SPLIT_WHOLE, &s, NULL),
                     -S3E_SIGNATURE_DOES_NOT_MATCH);
    assert_int_equal(s.got.len, 65536);
    free(b.p);
    free(s.got.p);
}

static void test_awschunk_signed_trailer(void **state)
{
    UNUSED(state);
    uint8_t *d = pattern(70000);
    static const struct {
        const char *lines;
        int rc;
    } cases[] = {
        {"x-amz-checksum-crc32:" TR_CRC "\r\nx-amz-trailer-signature:" TR_SIG "\r\n\r\n", 0},
        {"X-Amz-Checksum-CRC32:" TR_CRC "\r\nx-amz-trailer-signature:" TR_SIG "\r\n\r\n", 0},
        {"x-amz-checksum-crc32: " TR_CRC " \r\nx-amz-trailer-signature:" TR_SIG "\r\n\r\n", 0},
        {"x-amz-checksum-crc32:" TR_CRC "\r\nx-amz-trailer-signature:" TR_SIG "\r\n", 0},
        {"x-amz-checksum-crc32:" TR_CRC "\r\nx-amz-meta-x:y z\r\nx-amz-trailer-signature:" TR2_SIG
         "\r\n\r\n",
         0},
        /* a changed value, a missing signature, a line after the signature */
        {"x-amz-checksum-crc32:v5J7Gh==\r\nx-amz-trailer-signature:" TR_SIG "\r\n\r\n",
         -S3E_SIGNATURE_DOES_NOT_MATCH},
        {"x-amz-checksum-crc32:" TR_CRC "\r\n\r\n", -S3E_SIGNATURE_DOES_NOT_MATCH},
        {"x-amz-checksum-crc32:" TR_CRC "\r\n", -S3E_INCOMPLETE_BODY},
        {"x-amz-checksum-crc32:" TR_CRC "\r\nx-amz-trailer-signature:" TR_SIG
         "\r\nx-amz-meta-x:y\r\n\r\n",
         -S3E_INVALID_REQUEST},
        {"x-amz-checksum-crc32:" TR_CRC "\r\nx-amz-trailer-signature:abc\r\n\r\n",
         -S3E_SIGNATURE_DOES_NOT_MATCH},
        {"x-amz-checksum-crc32:" TR_CRC "\r\nx-amz-trailer-signature:" TR_SIG "\r\n\r\nX",
         -S3E_INVALID_REQUEST},
        {"x-amz-checksum-crc32:" TR_CRC "\r\nx-amz-trailer-signature:" TR_SIG "\r", -S3E_INCOMPLETE_BODY},
        {"no colon\r\n\r\n", -S3E_INVALID_REQUEST},
        {"", -S3E_INCOMPLETE_BODY},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct body b = trailer_body(d, cases[i].lines);
        for (int how = SPLIT_WHOLE; how <= SPLIT_RANDOM; how++) {
            struct sink s = {0};
            struct awschunk *c;
            int rc = run(AWSCHUNK_SIGNED_TRAILER, TR_SEED, &b, how, &s, &c);
            if (rc != cases[i].rc)
                fail_msg("case %zu split %d: rc %d want %d", i, how, rc, cases[i].rc);
            assert_int_equal(s.got.len, 70000); /* the chunks themselves were fine */
            assert_memory_equal(s.got.p, d, 70000);
            if (!rc) {
                assert_string_equal(awschunk_trailer(c, "x-amz-checksum-crc32"), TR_CRC);
                assert_string_equal(awschunk_trailer(c, "X-AMZ-CHECKSUM-CRC32"), TR_CRC);
                assert_null(awschunk_trailer(c, "x-amz-trailer-signature"));
                assert_null(awschunk_trailer(c, "x-amz-checksum-crc32c"));
            }
            awschunk_free(c);
            free(s.got.p);
        }
        free(b.p);
    }
    free(d);
}

/* The JS SDK: STREAMING-UNSIGNED-PAYLOAD-TRAILER with 64 KiB chunks and a crc32 trailer. */
static void test_awschunk_unsigned_trailer_js(void **state)
{
    UNUSED(state);
    uint8_t *d = pattern(200000);
    static const char *ends[] = {
        "x-amz-checksum-crc32:AAAAAA==\r\n\r\n",
        "x-amz-checksum-crc32:AAAAAA==\r\n", /* the final empty line missing: accepted */
    };
    for (size_t e = 0; e < ARRAY_SIZE(ends); e++) {
        struct body b = {0};
        size_t off = 0;
        while (off < 200000) {
            size_t n = S3C_MIN((size_t)65536, 200000 - off);
            frame(&b, d + off, n, NULL);
            off += n;
        }
        frame(&b, d, 0, NULL);
        puts_(&b, ends[e]);
        assert_non_null(memmem(b.p, b.len, "\r\nd40\r\n", 7)); /* 200000 - 3 * 65536 */
        for (int how = SPLIT_WHOLE; how <= SPLIT_RANDOM; how++) {
            struct sink s = {0};
            struct awschunk *c;
            assert_int_equal(run(AWSCHUNK_UNSIGNED_TRAILER, NULL, &b, how, &s, &c), 0);
            assert_int_equal(s.got.len, 200000);
            assert_memory_equal(s.got.p, d, 200000);
            assert_int_equal(awschunk_decoded_bytes(c), 200000);
            assert_string_equal(awschunk_trailer(c, "x-amz-checksum-crc32"), "AAAAAA==");
            if (how == SPLIT_BYTE)
                assert_int_equal(s.max_call, 1); /* unsigned mode streams */
            awschunk_free(c);
            free(s.got.p);
        }
        free(b.p);
    }
    free(d);
}

static void test_awschunk_unsigned_edge_cases(void **state)
{
    UNUSED(state);
    static const struct {
        const char *body;
        int rc;
        const char *payload;
    } cases[] = {
        {"0\r\n\r\n", 0, ""},
        {"0\r\n", 0, ""},
        {"3\r\nabc\r\n0\r\n\r\n", 0, "abc"},
        {"3\nabc\r\n0\n\n", 0, "abc"}, /* bare LF line ends */
        {"A\r\n0123456789\r\n0\r\nx-amz-checksum-crc32c:sOO8/Q==\r\n\r\n", 0, "0123456789"},
        {"00003\r\nabc\r\n0\r\n\r\n", 0, "abc"},
        /* an ignored chunk signature, an ignored trailer signature */
        {"3;chunk-signature=" TR_SIG "\r\nabc\r\n0\r\nx-amz-trailer-signature:x\r\n\r\n", 0, "abc"},
        {"", -S3E_INCOMPLETE_BODY, ""},
        {"3\r\nab", -S3E_INCOMPLETE_BODY, "ab"},
        {"3\r\nabc", -S3E_INCOMPLETE_BODY, "abc"},
        {"3\r\nabc\r\n", -S3E_INCOMPLETE_BODY, "abc"},
        {"3\r\nabc\r\n0", -S3E_INCOMPLETE_BODY, "abc"},
        {"3\r\nabc\r\n0\r\nx-amz-checksum-crc32:AA", -S3E_INCOMPLETE_BODY, "abc"},
        {"3\r\nabcd\r\n0\r\n\r\n", -S3E_INVALID_REQUEST, "abc"},
        {"3\r\nabc\n0\r\n\r\n", -S3E_INVALID_REQUEST, "abc"},
        {"x\r\nabc\r\n0\r\n\r\n", -S3E_INVALID_REQUEST, ""},
        {"\r\n", -S3E_INVALID_REQUEST, ""},
        {"3 \r\nabc\r\n0\r\n\r\n", -S3E_INVALID_REQUEST, ""},
        {"3;foo=bar\r\nabc\r\n0\r\n\r\n", -S3E_INVALID_REQUEST, ""},
        {"1000001\r\n", -S3E_INVALID_REQUEST, ""}, /* over 16 MiB */
        {"ffffffffffffffffffff\r\n", -S3E_INVALID_REQUEST, ""},
        {"3\r\na\rc\r\n0\r\n\r\n", 0, "a\rc"},
        {"3\r\nabc\r\n0\r\n\r\n\r\n", -S3E_INVALID_REQUEST, "abc"},
        {"0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\nextra", -S3E_INVALID_REQUEST, ""},
        {"0\r\n:value\r\n\r\n", -S3E_INVALID_REQUEST, ""},
        {"0\r\nbad name:value\r\n\r\n", -S3E_INVALID_REQUEST, ""},
        {"0\r\na\rb:value\r\n\r\n", -S3E_INVALID_REQUEST, ""},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct body b = {0};
        puts_(&b, cases[i].body);
        for (int how = SPLIT_WHOLE; how <= SPLIT_BYTE; how++) {
            struct sink s = {0};
            int rc = run(AWSCHUNK_UNSIGNED_TRAILER, NULL, &b, how, &s, NULL);
            if (rc != cases[i].rc)
                fail_msg("case %zu split %d: rc %d want %d", i, how, rc, cases[i].rc);
            put(&s.got, "", 1);
            if (strcmp(s.got.p, cases[i].payload) && how == SPLIT_BYTE)
                fail_msg("case %zu: payload \"%s\" want \"%s\"", i, s.got.p, cases[i].payload);
            free(s.got.p);
        }
        free(b.p);
    }
    /* a long trailer line and too many trailers */
    struct body b = {0};
    puts_(&b, "0\r\nx-amz-meta-long:");
    for (int i = 0; i < 2000; i++)
        puts_(&b, "v");
    puts_(&b, "\r\n\r\n");
    struct sink s = {0};
    assert_int_equal(run(AWSCHUNK_UNSIGNED_TRAILER, NULL, &b, SPLIT_WHOLE, &s, NULL),
                     -S3E_INVALID_REQUEST);
    b.len = 0;
    puts_(&b, "0\r\n");
    for (int i = 0; i < 9; i++)
        puts_(&b, "x-amz-meta-n:1\r\n");
    puts_(&b, "\r\n");
    assert_int_equal(run(AWSCHUNK_UNSIGNED_TRAILER, NULL, &b, SPLIT_WHOLE, &s, NULL),
                     -S3E_INVALID_REQUEST);
    free(b.p);
    free(s.got.p);
}

static void test_awschunk_signed_malformed(void **state)
{
    UNUSED(state);
    static const struct {
        const char *body;
        int rc;
    } cases[] = {
        {"0\r\n\r\n", -S3E_INVALID_REQUEST}, /* signed mode needs chunk signatures */
        {"0;chunk-signature=abc\r\n\r\n", -S3E_INVALID_REQUEST},
        {"0;chunk-signature=" TR_SIG "x\r\n\r\n", -S3E_INVALID_REQUEST},
        {"0;chunk-signature=" TR_SIG "\r\n\r\n", -S3E_SIGNATURE_DOES_NOT_MATCH},
        {"0;chunk-signatur=" TR_SIG "\r\n\r\n", -S3E_INVALID_REQUEST},
        {"1000001;chunk-signature=" TR_SIG "\r\n", -S3E_INVALID_REQUEST},
        {"10;chunk-signature=" TR_SIG "\r\nabc", -S3E_INCOMPLETE_BODY},
        {"", -S3E_INCOMPLETE_BODY},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct body b = {0};
        puts_(&b, cases[i].body);
        for (int how = SPLIT_WHOLE; how <= SPLIT_BYTE; how++) {
            struct sink s = {0};
            int rc = run(AWSCHUNK_SIGNED, DOC_SEED, &b, how, &s, NULL);
            if (rc != cases[i].rc)
                fail_msg("case %zu split %d: rc %d want %d", i, how, rc, cases[i].rc);
            /* what arrived of a chunk went out; the error makes the caller drop it */
            assert_int_equal(s.got.len, cases[i].rc == -S3E_INCOMPLETE_BODY && b.len > 3 ? 3 : 0);
            free(s.got.p);
        }
        free(b.p);
    }
    /* the doc body: its final empty line may be missing, other trailing bytes may not */
    struct body b = doc_body();
    struct sink s = {0};
    b.len -= 2;
    assert_int_equal(run(AWSCHUNK_SIGNED, DOC_SEED, &b, SPLIT_BYTE, &s, NULL), 0);
    b.len += 1;
    assert_int_equal(run(AWSCHUNK_SIGNED, DOC_SEED, &b, SPLIT_BYTE, &s, NULL),
                     -S3E_INCOMPLETE_BODY);
    b.len += 1;
    puts_(&b, "x");
    assert_int_equal(run(AWSCHUNK_SIGNED, DOC_SEED, &b, SPLIT_WHOLE, &s, NULL),
                     -S3E_INVALID_REQUEST);
    b.len -= 3;
    puts_(&b, "x\r\n");
    assert_int_equal(run(AWSCHUNK_SIGNED, DOC_SEED, &b, SPLIT_WHOLE, &s, NULL),
                     -S3E_INVALID_REQUEST);
    free(b.p);
    free(s.got.p);
}

/* The sink's error stops the decoder and comes back from feed (and stays). */
static void test_awschunk_sink_error(void **state)
{
    UNUSED(state);
    struct body b = doc_body();
    struct sink s = {.fail_after = 100};
    assert_int_equal(run(AWSCHUNK_SIGNED, DOC_SEED, &b, SPLIT_RANDOM, &s, NULL), -28);
    assert_int_equal(s.got.len, 0);
    free(b.p);
    b = (struct body){0};
    puts_(&b, "100\r\n");
    for (int i = 0; i < 256; i++)
        put(&b, "z", 1);
    puts_(&b, "\r\n0\r\n\r\n");
    struct sink u = {.fail_after = 100};
    assert_int_equal(run(AWSCHUNK_UNSIGNED_TRAILER, NULL, &b, SPLIT_BYTE, &u, NULL), -28);
    assert_int_equal(u.got.len, 100);
    free(b.p);
    free(s.got.p);
    free(u.got.p);
}

/* The largest allowed chunk (16 MiB) goes through whole. */
static void test_awschunk_max_chunk(void **state)
{
    UNUSED(state);
    struct body b = {0};
    size_t n = 16u << 20;
    uint8_t *d = calloc(1, n);
    assert_non_null(d);
    frame(&b, d, n, NULL);
    frame(&b, d, 0, NULL);
    puts_(&b, "\r\n");
    struct sink s = {0};
    assert_int_equal(run(AWSCHUNK_UNSIGNED_TRAILER, NULL, &b, SPLIT_RANDOM, &s, NULL), 0);
    assert_int_equal(s.got.len, n);
    free(s.got.p);
    free(b.p);
    free(d);
}

int main(void)
{
    srand(12345);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_awschunk_doc_example),
        cmocka_unit_test(test_awschunk_doc_bad_signatures),
        cmocka_unit_test(test_awschunk_signed_trailer),
        cmocka_unit_test(test_awschunk_unsigned_trailer_js),
        cmocka_unit_test(test_awschunk_unsigned_edge_cases),
        cmocka_unit_test(test_awschunk_signed_malformed),
        cmocka_unit_test(test_awschunk_sink_error),
        cmocka_unit_test(test_awschunk_max_chunk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
