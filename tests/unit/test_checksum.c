/*
 * test_checksum.c: checksum.c against known digests (the "123456789" check values, RFC 3720
 * CRC32C vectors, "hello world" as S3 reports it, digests computed once with Python), strict
 * base64 and the algorithm-name helpers. The CRC32C tests run twice: in this process (SSE4.2
 * when the CPU has it) and in a child forced onto the slice-by-8 table.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "lib/s3c.h"
#include "lib/checksum.h"
#include "lib/hex.h"

static uint32_t crc32c_ref(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
    }
    return ~crc;
}

static uint8_t *pattern(size_t n)
{
    uint8_t *d = malloc(n + 16);
    assert_non_null(d);
    for (size_t i = 0; i < n + 16; i++)
        d[i] = (uint8_t)((i * 7 + 3) % 251);
    return d;
}

static void test_checksum_crc32c_vectors(void **state)
{
    UNUSED(state);
    uint8_t b[32];
    assert_int_equal(cksum_crc32c(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(cksum_crc32c(0, "", 0), 0);
    memset(b, 0, sizeof(b));
    assert_int_equal(cksum_crc32c(0, b, 32), 0x8a9136aau);
    memset(b, 0xff, sizeof(b));
    assert_int_equal(cksum_crc32c(0, b, 32), 0x62a8ab43u);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)i;
    assert_int_equal(cksum_crc32c(0, b, 32), 0x46dd794eu);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)(31 - i);
    assert_int_equal(cksum_crc32c(0, b, 32), 0x113fdb5cu);
}

/* Every length and alignment up to 64, and incremental updates, agree with a bitwise CRC. */
static void test_checksum_crc32c_incremental(void **state)
{
    UNUSED(state);
    uint8_t *d = pattern(100000);
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n <= 64; n++)
            assert_int_equal(cksum_crc32c(0, d + off, n), crc32c_ref(0, d + off, n));
    assert_int_equal(cksum_crc32c(0, d, 100000), 0x4fb573feu);
    uint32_t c = 0;
    size_t off = 0, step = 1;
    while (off < 100000) {
        size_t n = S3C_MIN(step, 100000 - off);
        c = cksum_crc32c(c, d + off, n);
        off += n;
        step = step * 3 % 1013 + 1;
    }
    assert_int_equal(c, 0x4fb573feu);
    free(d);
}

static void test_checksum_hello_world(void **state)
{
    UNUSED(state);
    static const struct {
        enum cksum_algo algo;
        const char *b64;
    } cases[] = {
        {CKSUM_CRC32, "DUoRhQ=="},
        {CKSUM_CRC32C, "yZRlqg=="},
        {CKSUM_SHA1, "Kq5sNclPz7QV2+lfQIuc6R7oRu0="},
        {CKSUM_SHA256, "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek="},
        {CKSUM_NONE, ""},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        for (unsigned want = 0; want < 4; want++) {
            struct cksum *c;
            struct cksum_result r;
            assert_int_equal(cksum_new(want, cases[i].algo, &c), 0);
            cksum_update(c, "hello", 5);
            cksum_update(c, "", 0);
            cksum_update(c, " world", 6);
            cksum_final(c, &r);
            cksum_free(c);
            assert_string_equal(r.algo_b64, cases[i].b64);
            assert_string_equal(r.md5_hex,
                                want & CKSUM_WANT_MD5 ? "5eb63bbbe01eeed093cb22bb8f5acdc3" : "");
            assert_string_equal(r.md5_b64, want & CKSUM_WANT_MD5 ? "XrY7u+Ae7tCTyyK7j1rNww==" : "");
            assert_string_equal(r.sha256_hex,
                                want & CKSUM_WANT_SHA256
                                    ? "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
                                    : "");
        }
    }
}

static void test_checksum_empty_and_large(void **state)
{
    UNUSED(state);
    struct cksum *c;
    struct cksum_result r;
    assert_int_equal(cksum_new(CKSUM_WANT_MD5 | CKSUM_WANT_SHA256, CKSUM_CRC32C, &c), 0);
    cksum_final(c, &r);
    cksum_free(c);
    assert_string_equal(r.md5_hex, "d41d8cd98f00b204e9800998ecf8427e");
    assert_string_equal(r.md5_b64, "1B2M2Y8AsgTpgAmY7PhCfg==");
    assert_string_equal(r.sha256_hex,
                        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    assert_string_equal(r.algo_b64, "AAAAAA==");

    uint8_t *d = pattern(100000);
    static const struct {
        enum cksum_algo algo;
        const char *b64;
    } cases[] = {
        {CKSUM_CRC32, "Q7/utA=="}, /* 0x43bfeeb4 */
        {CKSUM_CRC32C, "T7Vz/g=="}, /* 0x4fb573fe */
        {CKSUM_SHA1, "t1VTh6xDlGRlOvBqYXUmtTu27qo="},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        assert_int_equal(cksum_new(CKSUM_WANT_MD5 | CKSUM_WANT_SHA256, cases[i].algo, &c), 0);
        for (size_t off = 0; off < 100000; off += 4099)
            cksum_update(c, d + off, S3C_MIN((size_t)4099, 100000 - off));
        cksum_final(c, &r);
        cksum_free(c);
        assert_string_equal(r.algo_b64, cases[i].b64);
        assert_string_equal(r.md5_hex, "e82210e5ca4fe2021408617cb7b4c5e7");
        assert_string_equal(r.sha256_hex,
                            "5889ab642baa09c41570b8888cbf45f3762152cea2490ea6b150208a99c92b10");
    }
    free(d);
    cksum_free(NULL);
}

static void test_checksum_algo_names(void **state)
{
    UNUSED(state);
    static const struct {
        const char *in;
        enum cksum_algo want;
    } cases[] = {
        {"CRC32", CKSUM_CRC32},
        {"crc32", CKSUM_CRC32},
        {"x-amz-checksum-crc32", CKSUM_CRC32},
        {"X-Amz-Checksum-CRC32C", CKSUM_CRC32C},
        {" crc32c ", CKSUM_CRC32C},
        {"SHA1", CKSUM_SHA1},
        {"sha256", CKSUM_SHA256},
        {"x-amz-checksum-sha256", CKSUM_SHA256},
        {"CRC64NVME", CKSUM_NONE},
        {"crc3", CKSUM_NONE},
        {"crc32cc", CKSUM_NONE},
        {"x-amz-checksum-", CKSUM_NONE},
        {"", CKSUM_NONE},
        {NULL, CKSUM_NONE},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
        assert_int_equal(cksum_algo_parse(cases[i].in), cases[i].want);
    assert_string_equal(cksum_algo_name(CKSUM_CRC32), "CRC32");
    assert_string_equal(cksum_algo_name(CKSUM_CRC32C), "CRC32C");
    assert_string_equal(cksum_algo_name(CKSUM_SHA1), "SHA1");
    assert_string_equal(cksum_algo_name(CKSUM_SHA256), "SHA256");
    assert_string_equal(cksum_algo_header(CKSUM_CRC32C), "x-amz-checksum-crc32c");
    assert_string_equal(cksum_algo_header(CKSUM_SHA256), "x-amz-checksum-sha256");
    assert_string_equal(cksum_algo_header(CKSUM_NONE), "");
    assert_int_equal(cksum_algo_len(CKSUM_CRC32), 4);
    assert_int_equal(cksum_algo_len(CKSUM_CRC32C), 4);
    assert_int_equal(cksum_algo_len(CKSUM_SHA1), 20);
    assert_int_equal(cksum_algo_len(CKSUM_SHA256), 32);
    assert_int_equal(cksum_algo_len(CKSUM_NONE), 0);
    for (enum cksum_algo a = CKSUM_CRC32; a <= CKSUM_SHA256; a++) {
        assert_int_equal(cksum_algo_parse(cksum_algo_name(a)), a);
        assert_int_equal(cksum_algo_parse(cksum_algo_header(a)), a);
    }
}

static void test_checksum_base64(void **state)
{
    UNUSED(state);
    static const struct {
        const char *raw, *b64;
    } rfc4648[] = {
        {"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},         {"foo", "Zm9v"},
        {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(rfc4648); i++) {
        char out[16];
        uint8_t raw[16];
        size_t n = strlen(rfc4648[i].raw);
        assert_int_equal(base64_encode(rfc4648[i].raw, n, out, sizeof(out)), 0);
        assert_string_equal(out, rfc4648[i].b64);
        assert_int_equal(base64_decode(rfc4648[i].b64, raw, sizeof(raw)), (int)n);
        assert_memory_equal(raw, rfc4648[i].raw, n);
        /* exactly enough room, one byte short */
        size_t need = strlen(rfc4648[i].b64) + 1;
        assert_int_equal(base64_encode(rfc4648[i].raw, n, out, need), 0);
        if (need > 1)
            assert_int_equal(base64_encode(rfc4648[i].raw, n, out, need - 1), -ENOSPC);
        assert_int_equal(base64_decode(rfc4648[i].b64, raw, n), (int)n);
        if (n)
            assert_int_equal(base64_decode(rfc4648[i].b64, raw, n - 1), -EINVAL);
    }
    /* all byte values round-trip, including '+' and '/' */
    uint8_t all[256], back[256];
    char enc[400];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)i;
    assert_int_equal(base64_encode(all, 256, enc, sizeof(enc)), 0);
    assert_non_null(strchr(enc, '+'));
    assert_non_null(strchr(enc, '/'));
    assert_int_equal(base64_decode(enc, back, sizeof(back)), 256);
    assert_memory_equal(all, back, 256);

    static const char *bad[] = {
        "Zg=",       /* length not a multiple of 4 */
        "Zg",        "Z",        "Zm9vY",   "Zg==Zg==", /* padding in the middle */
        "Z===",      "====",     "Zm9v====", "Zm=v",    "Zh==",     /* non-zero pad bits */
        "Zm9=",      /* non-zero pad bits */
        "Zm9v\n",    " Zm9v",    "Zm9v ",   "Zm-v",     "Zm_v",     /* url alphabet */
        "Zm\x80v",
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        uint8_t raw[16];
        if (base64_decode(bad[i], raw, sizeof(raw)) != -EINVAL)
            fail_msg("\"%s\" accepted", bad[i]);
    }
    /* Content-MD5 as clients send it */
    uint8_t md5[16];
    assert_int_equal(base64_decode("XrY7u+Ae7tCTyyK7j1rNww==", md5, sizeof(md5)), 16);
    assert_int_equal(md5[0], 0x5e);
    assert_int_equal(md5[15], 0xc3);
}

static void test_checksum_hex(void **state)
{
    UNUSED(state);
    char out[9];
    static const uint8_t b[] = {0x00, 0x9f, 0xa0, 0xff};
    hex_encode(b, 4, out);
    assert_string_equal(out, "009fa0ff");
    hex_encode(b, 0, out);
    assert_string_equal(out, "");
}

static const struct CMUnitTest crc_tests[] = {
    cmocka_unit_test(test_checksum_crc32c_vectors),
    cmocka_unit_test(test_checksum_crc32c_incremental),
};

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checksum_crc32c_vectors),
        cmocka_unit_test(test_checksum_crc32c_incremental),
        cmocka_unit_test(test_checksum_hello_world),
        cmocka_unit_test(test_checksum_empty_and_large),
        cmocka_unit_test(test_checksum_algo_names),
        cmocka_unit_test(test_checksum_base64),
        cmocka_unit_test(test_checksum_hex),
    };
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* the table implementation, whatever the CPU */
        setenv("S3C_NO_SSE42", "1", 1);
        _exit(cmocka_run_group_tests_name("crc32c_slice_by_8", crc_tests, NULL, NULL) ? 1 : 0);
    }
    int status = 0, child_failed = 1;
    if (pid > 0 && waitpid(pid, &status, 0) == pid)
        child_failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    return rc || child_failed;
}
