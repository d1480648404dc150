/* test_cstats.c: the cluster's /_/stats merged from the gateways' documents (peer/cstats.c):
 * counters summed, ages and uptimes their largest, booleans OR'ed, clients merged by (client,
 * addr) with a row per gateway, buckets and peers by name, a gateway that did not answer (or
 * answered something else) listed as down and left out of the sums; the output parses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/json.h"
#include "peer/cstats.h"

static const char DOC_A[] =
    "{\"uptime_s\": 10.5, \"cache\": {\"objects\": 3, \"hits\": 7, \"used_bytes\": 100},"
    " \"drain\": {\"errors\": 1, \"oldest_dirty_age_s\": 4.25},"
    " \"fair\": {\"capacity_bps\": 0, \"saturated\": false},"
    " \"backend\": {\"requests\": 5, \"bytes_read\": 50},"
    " \"requests\": 20, \"errors_4xx\": 1, \"errors_5xx\": 0,"
    " \"requests_by_op\": {\"get\": 15, \"put\": 5},"
    " \"clients\": [{\"client\": \"AK1\", \"addr\": \"10.0.0.1\", \"requests\": 4, \"bytes_out\": 400,"
    "   \"bytes_in\": 0, \"hits\": 3, \"misses\": 1, \"rate_out_bps\": 40,"
    "   \"requests_by_op\": {\"get\": 4, \"put\": 0}},"
    "  {\"client\": \"AK2\", \"addr\": \"10.0.0.2\", \"requests\": 1, \"bytes_out\": 1, \"bytes_in\": 9,"
    "   \"hits\": 0, \"misses\": 0, \"rate_out_bps\": 0, \"requests_by_op\": {\"get\": 0, \"put\": 1}}],"
    " \"buckets\": [{\"bucket\": \"b1\", \"requests\": 5, \"bytes_out\": 401}],"
    " \"peers\": [{\"peer\": \"gw-b\", \"requests\": 2, \"bytes_out\": 200}],"
    " \"cluster\": {\"self\": \"gw-a\", \"members\": 3, \"proxied\": 2}}\n";

static const char DOC_B[] =
    "{\"uptime_s\": 99, \"cache\": {\"objects\": 4, \"hits\": 1, \"used_bytes\": 300},"
    " \"drain\": {\"errors\": 2, \"oldest_dirty_age_s\": 1},"
    " \"fair\": {\"capacity_bps\": 0, \"saturated\": true},"
    " \"backend\": {\"requests\": 6, \"bytes_read\": 60},"
    " \"requests\": 30, \"errors_4xx\": 0, \"errors_5xx\": 2,"
    " \"requests_by_op\": {\"get\": 30, \"put\": 0},"
    " \"clients\": [{\"client\": \"AK1\", \"addr\": \"10.0.0.1\", \"requests\": 6, \"bytes_out\": 600,"
    "   \"bytes_in\": 0, \"hits\": 5, \"misses\": 1, \"rate_out_bps\": 60,"
    "   \"requests_by_op\": {\"get\": 6, \"put\": 0}}],"
    " \"buckets\": [{\"bucket\": \"b1\", \"requests\": 6, \"bytes_out\": 600},"
    "  {\"bucket\": \"b2\", \"requests\": 1, \"bytes_out\": 1}],"
    " \"peers\": [{\"peer\": \"gw-a\", \"requests\": 3, \"bytes_out\": 300}],"
    " \"cluster\": {\"self\": \"gw-b\", \"members\": 3, \"proxied\": 5}}\n";

static struct json *merge(const struct cstats_node *nodes, size_t n)
{
    struct buf b;
    struct json *j = NULL;
    struct errmsg em = {{0}};
    buf_init(&b, 1u << 20);
    assert_int_equal(cstats_merge(nodes, n, &b), 0);
    if (json_parse(b.p, b.len, &j, &em))
        fail_msg("the merged document does not parse: %s\n%s", em.buf, b.p);
    buf_free(&b);
    return j;
}

static const struct json *row(const struct json *arr, const char *k, const char *v)
{
    for (size_t i = 0; arr && i < arr->n; i++)
        if (json_get_str(&arr->items[i], k) && !strcmp(json_get_str(&arr->items[i], k), v))
            return &arr->items[i];
    return NULL;
}

static void test_cstats_sums_and_rows(void **state)
{
    (void)state;
    const struct cstats_node nodes[] = {
        {"gw-a", 1, DOC_A, sizeof(DOC_A) - 1, NULL},
        {"gw-b", 0, DOC_B, sizeof(DOC_B) - 1, NULL},
        {"gw-c", 0, NULL, 0, "Connection refused"},
    };
    struct json *j = merge(nodes, 3);
    assert_string_equal(json_get_str(j, "scope"), "cluster");
    assert_int_equal(json_get_num(j, "nodes_total", -1), 3);
    assert_int_equal(json_get_num(j, "nodes_up", -1), 2);
    assert_true(json_get_num(j, "uptime_s", 0) == 99);                   /* largest */
    assert_int_equal(json_get_num(json_get(j, "cache"), "objects", 0), 7);  /* summed */
    assert_int_equal(json_get_num(json_get(j, "cache"), "used_bytes", 0), 400);
    assert_true(json_get_num(json_get(j, "drain"), "oldest_dirty_age_s", 0) == 4.25);
    assert_int_equal(json_get_num(json_get(j, "drain"), "errors", 0), 3);
    assert_true(json_get(json_get(j, "fair"), "saturated")->b);           /* OR */
    assert_int_equal(json_get_num(j, "requests", 0), 50);
    assert_int_equal(json_get_num(json_get(j, "requests_by_op"), "put", 0), 5);
    assert_null(json_get(j, "cluster")); /* each gateway's own, under nodes */

    const struct json *cl = json_get(j, "clients");
    assert_int_equal(cl->n, 2);
    const struct json *a1 = row(cl, "client", "AK1");
    assert_non_null(a1);
    assert_string_equal(json_get_str(a1, "addr"), "10.0.0.1");
    assert_int_equal(json_get_num(a1, "bytes_out", 0), 1000);
    assert_int_equal(json_get_num(a1, "hits", 0), 8);
    assert_int_equal(json_get_num(a1, "rate_out_bps", 0), 100);
    assert_int_equal(json_get_num(json_get(a1, "requests_by_op"), "get", 0), 10);
    const struct json *an = json_get(a1, "nodes");
    assert_int_equal(an->n, 2);
    assert_string_equal(json_get_str(&an->items[0], "node"), "gw-a");
    assert_int_equal(json_get_num(&an->items[0], "bytes_out", 0), 400);
    assert_int_equal(json_get_num(&an->items[1], "bytes_out", 0), 600);
    assert_int_equal(json_get(row(cl, "client", "AK2"), "nodes")->n, 1);

    const struct json *bk = json_get(j, "buckets");
    assert_int_equal(bk->n, 2);
    assert_int_equal(json_get_num(row(bk, "bucket", "b1"), "bytes_out", 0), 1001);
    const struct json *pe = json_get(j, "peers");
    assert_int_equal(pe->n, 2);
    assert_int_equal(json_get_num(row(pe, "peer", "gw-a"), "bytes_out", 0), 300);

    const struct json *nd = json_get(j, "nodes");
    assert_int_equal(nd->n, 3);
    assert_true(json_get(row(nd, "node", "gw-a"), "self")->b);
    assert_true(json_get(row(nd, "node", "gw-b"), "up")->b);
    assert_int_equal(json_get_num(json_get(row(nd, "node", "gw-b"), "cache"), "objects", 0), 4);
    assert_int_equal(json_get_num(json_get(row(nd, "node", "gw-b"), "cluster"), "proxied", 0), 5);
    const struct json *c = row(nd, "node", "gw-c");
    assert_false(json_get(c, "up")->b);
    assert_string_equal(json_get_str(c, "error"), "Connection refused");
    json_free(j);
}

static void test_cstats_bad_and_empty(void **state)
{
    (void)state;
    static const char junk[] = "<Error><Code>AccessDenied</Code></Error>";
    static const char notstats[] = "{\"jobs\": []}";
    const struct cstats_node nodes[] = {
        {"gw-a", 1, DOC_A, sizeof(DOC_A) - 1, NULL},
        {"gw-x", 0, junk, sizeof(junk) - 1, NULL},
        {"gw-y", 0, notstats, sizeof(notstats) - 1, NULL},
    };
    struct json *j = merge(nodes, 3);
    assert_int_equal(json_get_num(j, "nodes_up", -1), 1);
    assert_int_equal(json_get_num(json_get(j, "cache"), "objects", 0), 3);
    const struct json *nd = json_get(j, "nodes");
    assert_false(json_get(row(nd, "node", "gw-x"), "up")->b);
    assert_string_equal(json_get_str(row(nd, "node", "gw-y"), "error"), "not a /_/stats document");
    json_free(j);

    j = merge(NULL, 0);
    assert_int_equal(json_get_num(j, "nodes_total", -1), 0);
    assert_int_equal(json_get(j, "clients")->n, 0);
    json_free(j);

    const struct cstats_node down[] = {{"gw-a", 1, NULL, 0, "Connection refused"}};
    j = merge(down, 1);
    assert_int_equal(json_get_num(j, "nodes_up", -1), 0);
    assert_null(json_get(j, "cache"));
    json_free(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cstats_sums_and_rows),
        cmocka_unit_test(test_cstats_bad_and_empty),
    };
    return cmocka_run_group_tests_name("cstats", tests, NULL, NULL);
}
