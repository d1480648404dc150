/* test_json.c: the JSON reader behind the admin request bodies and the CLI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_values),
        cmocka_unit_test(test_json_malformed),
        cmocka_unit_test(test_json_embedded_nul),
    };
    return cmocka_run_group_tests_name("json", tests, NULL, NULL);
}
