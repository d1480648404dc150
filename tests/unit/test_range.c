/*
 * test_range.c: range_parse() and cond_check() against tables of every form S3
 * clients send and the edge cases S3 answers 416/412/304 for.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "lib/s3c.h"
#include "lib/s3err.h"
#include "lib/range.h"

#define R416 (-S3E_INVALID_RANGE)

static void test_range_table(void **state)
{
    static const struct {
        const char *hdr;
        uint64_t size;
        int rc;
        uint64_t off, len;
    } cases[] = {
        /* absent / ignored */
        { NULL, 100, 0, 0, 0 },
        { "", 100, 0, 0, 0 },
        { "items=0-5", 100, 0, 0, 0 },
        { "bytes", 100, 0, 0, 0 },
        { "bytes=", 100, 0, 0, 0 },
        { "bytes=-", 100, 0, 0, 0 },
        { "bytes=abc", 100, 0, 0, 0 },
        { "bytes=a-5", 100, 0, 0, 0 },
        { "bytes=5-x", 100, 0, 0, 0 },
        { "bytes=5", 100, 0, 0, 0 },
        { "bytes=5-2", 100, 0, 0, 0 },             /* last < first: syntax error */
        { "bytes=0-1,5-6", 100, 0, 0, 0 },         /* multi-range: whole object */
        { "bytes=0-1, 5-6", 100, 0, 0, 0 },
        { "bytes=--5", 100, 0, 0, 0 },
        { "bytes=1-2-3", 100, 0, 0, 0 },
        { "bytes=+1-2", 100, 0, 0, 0 },
        { "bytes=1 2-3", 100, 0, 0, 0 },
        { "bytes=5-2", 0, 0, 0, 0 },               /* ignored even on an empty object */
        /* a-b */
        { "bytes=0-0", 100, 1, 0, 1 },
        { "bytes=0-9", 100, 1, 0, 10 },
        { "bytes=10-19", 100, 1, 10, 10 },
        { "bytes=99-99", 100, 1, 99, 1 },
        { "bytes=90-200", 100, 1, 90, 10 },        /* clamped */
        { "bytes=0-18446744073709551615", 100, 1, 0, 100 },
        { "bytes=0-99999999999999999999999999", 100, 1, 0, 100 }, /* overflow saturates */
        { "bytes=0-8388607", 52428800, 1, 0, 8388608 },           /* awscli part */
        /* a- */
        { "bytes=0-", 100, 1, 0, 100 },
        { "bytes=50-", 100, 1, 50, 50 },
        { "bytes=99-", 100, 1, 99, 1 },
        { "bytes=50331648-", 52428800, 1, 50331648, 2097152 },    /* awscli last part */
        /* -n */
        { "bytes=-7", 100, 1, 93, 7 },
        { "bytes=-100", 100, 1, 0, 100 },
        { "bytes=-1000", 100, 1, 0, 100 },
        { "bytes=-99999999999999999999999999", 100, 1, 0, 100 },
        { "bytes=-1", 1, 1, 0, 1 },
        /* spaces and case */
        { " bytes = 1 - 3 ", 100, 1, 1, 3 },
        { "bytes=\t1-\t3", 100, 1, 1, 3 },
        { "bytes= - 7", 100, 1, 93, 7 },
        { "Bytes=1-3", 100, 1, 1, 3 },
        /* 416 */
        { "bytes=100-", 100, R416, 0, 0 },
        { "bytes=100-200", 100, R416, 0, 0 },
        { "bytes=150-160", 100, R416, 0, 0 },
        { "bytes=99999999999999999999999999-", 100, R416, 0, 0 },
        { "bytes=-0", 100, R416, 0, 0 },
        { "bytes=-0", 0, R416, 0, 0 },
        { "bytes=0-0", 0, R416, 0, 0 },
        { "bytes=0-", 0, R416, 0, 0 },
        { "bytes=-5", 0, R416, 0, 0 },
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        uint64_t off = 12345, len = 12345;
        int rc = range_parse(cases[i].hdr, cases[i].size, &off, &len);
        if (rc != cases[i].rc)
            fail_msg("case %zu \"%s\" size %llu: rc %d, want %d", i,
                     cases[i].hdr ? cases[i].hdr : "(null)",
                     (unsigned long long)cases[i].size, rc, cases[i].rc);
        if (rc == 1 && (off != cases[i].off || len != cases[i].len))
            fail_msg("case %zu \"%s\": off %llu len %llu, want %llu %llu", i, cases[i].hdr,
                     (unsigned long long)off, (unsigned long long)len,
                     (unsigned long long)cases[i].off, (unsigned long long)cases[i].len);
    }
}

#define NM (-S3E_NOT_MODIFIED)
#define PF (-S3E_PRECONDITION_FAILED)

/* mtime of the object under test: Sun, 06 Nov 1994 08:49:37 GMT */
#define T0 784111777
#define D_EQ "Sun, 06 Nov 1994 08:49:37 GMT"
#define D_BEFORE "Sun, 06 Nov 1994 08:49:36 GMT"
#define D_AFTER "Sun, 06 Nov 1994 08:49:38 GMT"

static void test_range_cond_table(void **state)
{
    static const struct {
        const char *im, *inm, *ims, *ius;
        int get_head;
        int rc;
    } cases[] = {
        { NULL, NULL, NULL, NULL, 1, 0 },
        /* If-Match */
        { "\"abc\"", NULL, NULL, NULL, 1, 0 },
        { "abc", NULL, NULL, NULL, 1, 0 },
        { "W/\"abc\"", NULL, NULL, NULL, 1, 0 },
        { "\"xyz\"", NULL, NULL, NULL, 1, PF },
        { "\"xyz\"", NULL, NULL, NULL, 0, PF },
        { "\"x\", \"abc\"", NULL, NULL, NULL, 1, 0 },
        { "\"x\",\"y\"", NULL, NULL, NULL, 1, PF },
        { "x , abc ", NULL, NULL, NULL, 1, 0 },
        { "*", NULL, NULL, NULL, 1, 0 },
        { "\"abcd\"", NULL, NULL, NULL, 1, PF },
        { "\"ab\"", NULL, NULL, NULL, 1, PF },
        { "\"a,b\", abc", NULL, NULL, NULL, 1, 0 },
        { "  ", NULL, NULL, NULL, 1, 0 }, /* blank header: absent */
        /* If-None-Match */
        { NULL, "\"abc\"", NULL, NULL, 1, NM },
        { NULL, "\"abc\"", NULL, NULL, 0, PF },
        { NULL, "W/\"abc\"", NULL, NULL, 1, NM },
        { NULL, "*", NULL, NULL, 1, NM },
        { NULL, "*", NULL, NULL, 0, PF },
        { NULL, "\"xyz\"", NULL, NULL, 1, 0 },
        { NULL, "\"xyz\", \"abc\"", NULL, NULL, 1, NM },
        /* If-Unmodified-Since */
        { NULL, NULL, NULL, D_EQ, 1, 0 },
        { NULL, NULL, NULL, D_AFTER, 1, 0 },
        { NULL, NULL, NULL, D_BEFORE, 1, PF },
        { NULL, NULL, NULL, D_BEFORE, 0, PF },
        { NULL, NULL, NULL, "garbage", 1, 0 },          /* unparsable: ignored */
        { NULL, NULL, NULL, "Sunday, 06-Nov-94 08:49:36 GMT", 1, PF }, /* RFC 850 */
        { NULL, NULL, NULL, "Sun Nov  6 08:49:36 1994", 1, PF },       /* asctime */
        /* If-Modified-Since */
        { NULL, NULL, D_EQ, NULL, 1, NM },
        { NULL, NULL, D_AFTER, NULL, 1, NM },
        { NULL, NULL, D_BEFORE, NULL, 1, 0 },
        { NULL, NULL, D_EQ, NULL, 0, 0 },               /* only GET/HEAD */
        { NULL, NULL, "not a date", NULL, 1, 0 },
        /* S3's combinations */
        { "\"abc\"", NULL, NULL, D_BEFORE, 1, 0 },      /* If-Match true wins over IUS */
        { "\"xyz\"", NULL, NULL, D_AFTER, 1, PF },
        { NULL, "\"xyz\"", D_EQ, NULL, 1, 0 },          /* INM present: IMS ignored */
        { NULL, "\"abc\"", D_BEFORE, NULL, 1, NM },
        { "\"abc\"", "\"abc\"", NULL, NULL, 1, NM },
        { "\"xyz\"", "\"abc\"", NULL, NULL, 1, PF },    /* If-Match first */
        { NULL, NULL, D_EQ, D_BEFORE, 1, PF },          /* IUS before IMS */
        { NULL, NULL, D_BEFORE, D_AFTER, 1, 0 },
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct cond_hdrs c = { cases[i].im, cases[i].inm, cases[i].ims, cases[i].ius };
        int rc = cond_check(&c, "abc", T0, cases[i].get_head);
        if (rc != cases[i].rc)
            fail_msg("case %zu: rc %d, want %d", i, rc, cases[i].rc);
    }
}

static void test_range_cond_etag_forms(void **state)
{
    /* the stored etag may itself carry quotes or a multipart suffix */
    struct cond_hdrs c = { "\"0123456789abcdef0123456789abcdef-7\"", NULL, NULL, NULL };
    (void)state;
    assert_int_equal(cond_check(&c, "0123456789abcdef0123456789abcdef-7", T0, 1), 0);
    assert_int_equal(cond_check(&c, "\"0123456789abcdef0123456789abcdef-7\"", T0, 1), 0);
    assert_int_equal(cond_check(&c, "0123456789abcdef0123456789abcdef", T0, 1), PF);
    c.if_match = "\"\"";
    assert_int_equal(cond_check(&c, "abc", T0, 1), PF);
    c.if_match = "\"unterminated";
    assert_int_equal(cond_check(&c, "unterminated", T0, 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range_table),
        cmocka_unit_test(test_range_cond_table),
        cmocka_unit_test(test_range_cond_etag_forms),
    };
    return cmocka_run_group_tests_name("range", tests, NULL, NULL);
}
