/* test_json.c: the JSON reader behind the admin request bodies and the CLI (json.c on jansson),
 * and the writer it reads back (buf_json_str). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <stdlib.h>

#include "lib/buf.h"
#include "lib/hex.h"
#include "lib/json.h"

static void test_json_values(void **state)
{
    (void)state;
    struct json *j = NULL;
    struct errmsg em = {{0}};
    const char *s = " {\"bucket\":\"b\",\"keys\":[\"a\",\"b\\/c\",\"\\u00e9\\ud83d\\ude00\"],"
                    "\"pin\":true,\"n\":-12.5e1,\"none\":null,\"o\":{}} ";
    assert_int_equal(json_parse(s, strlen(s), &j, &em), 0);
    assert_string_equal(json_get_str(j, "bucket"), "b");
    const struct json *k = json_get(j, "keys");
    assert_non_null(k);
    assert_int_equal(k->type, JSON_ARR);
    assert_int_equal(k->n, 3);
    assert_string_equal(k->items[1].str, "b/c");
    assert_string_equal(k->items[2].str, "\xc3\xa9\xf0\x9f\x98\x80");
    assert_int_equal(json_get(j, "pin")->b, 1);
    assert_true(json_get_num(j, "n", 0) == -125.0);
    assert_int_equal(json_get(j, "none")->type, JSON_NULL);
    assert_int_equal(json_get(j, "o")->n, 0);
    assert_null(json_get(j, "missing"));
    assert_true(json_get_num(j, "bucket", 7) == 7); /* wrong type: the default */
    json_free(j);
}

static void test_json_malformed(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", "{", "}", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "[1,]", "[1 2]", "\"unterminated",
        "\"\\x\"", "\"\\u12\"", "\"\\u0000\"", "\"\\udc00\"", "\"\\ud800x\"", "tru", "nul",
        "{} x", "\"a\nb\"", "{1:2}", "-", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct json *j = NULL;
        struct errmsg em = {{0}};
        int rc = json_parse(bad[i], strlen(bad[i]), &j, &em);
        if (rc == 0)
            fail_msg("accepted malformed JSON #%zu: %s", i, bad[i]);
        assert_null(j);
        assert_true(em.buf[0] != '\0');
    }
}

static void test_json_embedded_nul(void **state)
{
    (void)state;
    struct json *j = NULL;
    struct errmsg em = {{0}};
    const char s[] = "{\"a\":\"x\0y\"}";
    assert_int_not_equal(json_parse(s, sizeof(s) - 1, &j, &em), 0);
}

static int parses(const char *s, struct errmsg *em)
{
    struct json *j = (struct json *)0x1;
    int rc = json_parse(s, strlen(s), &j, em);
    if (rc)
        assert_null(j);
    json_free(rc ? NULL : j);
    return rc;
}

/* Our choices where JSON leaves room: a member name twice in one object is refused (readers
 * disagree on which counts); numbers are doubles (a 2^64-1 counter reads, 1e400 is refused);
 * not-UTF-8 bytes are refused; member order is the document's. */
static void test_json_choices(void **state)
{
    struct errmsg em = {{0}};
    (void)state;
    assert_int_equal(parses("{\"a\":1,\"a\":2}", &em), -EINVAL);
    assert_non_null(strstr(em.buf, "duplicate object key"));
    assert_int_equal(parses("{\"o\":{\"k\":1},\"p\":{\"k\":2}}", &em), 0); /* per object */
    assert_int_equal(parses("[{\"a\":1},{\"a\":2}]", &em), 0);
    assert_int_equal(parses("1e400", &em), -EINVAL);
    assert_non_null(strstr(em.buf, "overflow"));
    assert_int_equal(parses("\"caf\xe9\"", &em), -EINVAL);
    assert_int_equal(parses("\"\xed\xa0\x80\"", &em), -EINVAL); /* a surrogate in UTF-8 */
    assert_int_equal(parses("01", &em), -EINVAL);
    assert_int_equal(parses("1.", &em), -EINVAL);

    struct json *j = NULL;
    const char *s = "{\"z\":18446744073709551615,\"a\":-0.5e-3,\"m\":\"caf\xc3\xa9\",\"t\":1e-400}";
    assert_int_equal(json_parse(s, strlen(s), &j, &em), 0);
    assert_int_equal(j->n, 4);
    assert_string_equal(j->keys[0], "z");
    assert_string_equal(j->keys[1], "a");
    assert_true(json_get_num(j, "z", 0) == 18446744073709551615.0);
    assert_true(json_get_num(j, "a", 0) == -0.0005);
    assert_string_equal(json_get_str(j, "m"), "caf\xc3\xa9");
    assert_true(json_get_num(j, "t", 1) == 0);
    json_free(j);

    /* the detail says what and where */
    assert_int_equal(parses("{\"bucket\":\"b\",}", &em), -EINVAL);
    assert_non_null(strstr(em.buf, "JSON: "));
    assert_non_null(strstr(em.buf, "near '}' at byte 15"));
}

/* JSON_MAX_DEPTH (32) levels, a scalar counting as one: 31 arrays around a number or 32 empty
 * ones are read, one more is refused; far deeper (past jansson's own 2048) too. */
static void test_json_depth(void **state)
{
    struct errmsg em = {{0}};
    static char s[16384];
    (void)state;
    for (int levels = 31; levels <= 33; levels++) {
        for (int scalar = 0; scalar <= 1; scalar++) {
            size_t n = 0;
            for (int i = 0; i < levels - scalar; i++)
                s[n++] = '[';
            if (scalar)
                s[n++] = '1';
            for (int i = 0; i < levels - scalar; i++)
                s[n++] = ']';
            s[n] = '\0';
            int rc = parses(s, &em);
            if (rc != (levels <= JSON_MAX_DEPTH ? 0 : -EINVAL))
                fail_msg("%d levels (scalar %d): rc %d %s", levels, scalar, rc, em.buf);
            if (rc)
                assert_non_null(strstr(em.buf, "nested too deeply"));
        }
    }
    size_t n = 0;
    for (int i = 0; i < 3000; i++)
        s[n++] = '{', s[n++] = '"', s[n++] = 'a', s[n++] = '"', s[n++] = ':';
    s[n] = '\0';
    assert_int_equal(parses(s, &em), -EINVAL);
    assert_non_null(strstr(em.buf, "nested too deeply"));
}

/* Whatever buf_json_str writes, json_parse reads back: control characters, quotes, UTF-8 as
 * is, and bytes that are not UTF-8 (a POSIX file name) as U+FFFD. */
static void test_json_writer_roundtrip(void **state)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        { "plain", "plain" },
        { "q\"b\\s/\x01\n\x1f", "q\"b\\s/\x01\n\x1f" },
        { "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
          "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80" },
        { "caf\xe9", "caf\xef\xbf\xbd" },                  /* Latin-1 */
        { "\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd" },         /* overlong */
        { "\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" }, /* surrogate */
        { "\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" }, /* >10FFFF */
        { "a\xe2\x82", "a\xef\xbf\xbd\xef\xbf\xbd" },       /* cut short */
        { "\xff\xfe", "\xef\xbf\xbd\xef\xbf\xbd" },
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct buf b;
        struct json *j = NULL;
        struct errmsg em = {{0}};
        buf_init(&b, 1 << 10);
        assert_int_equal(buf_json_str(&b, cases[i].in), 0);
        if (json_parse(b.p, b.len, &j, &em))
            fail_msg("case %zu: %s reads back as %s", i, b.p, em.buf);
        assert_int_equal(j->type, JSON_STR);
        assert_string_equal(j->str, cases[i].out);
        json_free(j);
        buf_free(&b);
    }
}

/* A key's bytes in hex (peer notices, warm shares): every byte 1-255 comes back whole, where a
 * JSON string would have made U+FFFD of the bytes that are not UTF-8. */
static void test_json_hex_keys(void **state)
{
    (void)state;
    char key[256];
    for (int i = 0; i < 255; i++)
        key[i] = (char)(i + 1);
    key[255] = 0;
    struct buf b;
    struct json *j = NULL;
    struct errmsg em = {{0}};
    buf_init(&b, 1 << 12);
    assert_int_equal(buf_json_hex(&b, key), 0);
    assert_int_equal(json_parse(b.p, b.len, &j, &em), 0);
    assert_int_equal(j->type, JSON_STR);
    char *back = NULL;
    assert_int_equal(hex_decode_str(j->str, &back), 0);
    assert_memory_equal(back, key, 256);
    free(back);
    json_free(j);
    buf_free(&b);
    /* an odd count, a non-digit, a NUL byte: refused, nothing to free */
    assert_int_equal(hex_decode_str("abc", &back), -EINVAL);
    assert_null(back);
    assert_int_equal(hex_decode_str("zz", &back), -EINVAL);
    assert_int_equal(hex_decode_str("6100", &back), -EINVAL);
    assert_null(back);
    assert_int_equal(hex_decode_str("", &back), 0);
    assert_string_equal(back, "");
    free(back);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_values),
        cmocka_unit_test(test_json_malformed),
        cmocka_unit_test(test_json_embedded_nul),
        cmocka_unit_test(test_json_choices),
        cmocka_unit_test(test_json_depth),
        cmocka_unit_test(test_json_writer_roundtrip),
        cmocka_unit_test(test_json_hex_keys),
    };
    return cmocka_run_group_tests_name("json", tests, NULL, NULL);
}
