/*
 * test_plan.c: the read plans' bookkeeping (cache/plan.c) alone, with made-up clocks: the
 * prefetch stays within the bytes and entries ahead of the reader and within the plan's share
 * of the cache; the reader's GETs move the plan (a re-read does not); next use; a replaced
 * plan's tickets end quietly; the limits per key and in all; an owner sees and cancels only
 * its own plans; an idle plan goes. (The cache's eviction by next use: test_policy.c.)
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cache/index.h"
#include "cache/plan.h"
#include "lib/s3c.h"
#include "lib/s3err.h"

#define MiB (1ull << 20)
#define SEC 1000000000ll

static char **keys_of(int n, const char *fmt)
{
    char **k = calloc((size_t)n, sizeof(char *));
    for (int i = 0; i < n; i++) {
        char b[64];
        snprintf(b, sizeof(b), fmt, i);
        k[i] = strdup(b);
    }
    return k;
}

static uint64_t *sizes_of(int n, uint64_t each)
{
    uint64_t *s = calloc((size_t)n, sizeof(uint64_t));
    for (int i = 0; i < n; i++)
        s[i] = each;
    return s;
}

static struct plans *new_plans(uint64_t cache, uint64_t ahead, int64_t idle_ns)
{
    struct plans_conf pc = {.cache_bytes = cache,
                            .ahead_bytes = ahead,
                            .ahead_objects = 100,
                            .requests = 64,
                            .idle_ns = idle_ns};
    struct plans *p;
    assert_int_equal(plans_new(&pc, &p), 0);
    return p;
}

static uint64_t dist_of(struct plans *p, const char *bucket, const char *key)
{
    struct index_key k;
    uint64_t d;
    index_key_make(bucket, key, &k);
    return plans_next_use(p, k.b, k.len, &d) ? d : UINT64_MAX;
}

static void test_plan_pacing(void **state)
{
    (void)state;
    struct plans *p = new_plans(100 * MiB, 10 * MiB, 0);
    char id[24];
    const char *why;
    int64_t now = 1000 * SEC;
    assert_int_equal(plans_put(p, "ak", "r0", "b", keys_of(10, "k%d"), sizes_of(10, 4 * MiB), 10,
                               now, id, &why),
                     0);
    struct plan_ticket t[4];
    /* 10 MiB ahead: the first two 4 MiB entries, not the third */
    assert_int_equal(plans_take(p, 0, &t[0]), 1);
    assert_string_equal(t[0].key, "k0");
    assert_int_equal(plans_take(p, 0, &t[1]), 1);
    assert_string_equal(t[1].key, "k1");
    assert_int_equal(plans_take(p, 0, &t[2]), 0);
    /* the reader reads k0: one entry more may go */
    struct plan_tok tok;
    plans_read(p, "ak", "b", "k0", now, &tok);
    assert_true(tok.seq != 0);
    assert_int_equal(tok.ahead, 1);
    plans_read_done(p, &tok, 0, 1);
    assert_int_equal(plans_take(p, 0, &t[2]), 1);
    assert_string_equal(t[2].key, "k2");
    plans_done(p, &t[0], 0, 4 * MiB, 0);
    plans_done(p, &t[1], -EIO, 0, 0);
    plans_done(p, &t[2], 0, 4 * MiB, 1);
    /* another owner's or bucket's GET moves nothing; a re-read does not either */
    plans_read(p, "other", "b", "k5", now, &tok);
    assert_true(tok.seq == 0);
    plans_read(p, "ak", "c", "k5", now, &tok);
    assert_true(tok.seq == 0);
    assert_int_equal(dist_of(p, "b", "k5"), 4);
    plans_read(p, "ak", "b", "k5", now, &tok); /* out of order: k1..k4 are still to come */
    plans_read_done(p, &tok, 1, 0);
    assert_int_equal(dist_of(p, "b", "k5"), UINT64_MAX);
    assert_int_equal(dist_of(p, "b", "k1"), 0);
    assert_int_equal(dist_of(p, "b", "k6"), 5);
    plans_read(p, "ak", "b", "k0", now, &tok); /* behind the reader: a re-read */
    plans_read_done(p, &tok, 1, 0);
    assert_int_equal(dist_of(p, "b", "k1"), 0);
    for (int i = 1; i <= 4; i++) { /* the late ones: the position passes k5 too */
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        plans_read(p, "ak", "b", k, now, &tok);
        assert_true(tok.seq != 0);
    }
    assert_int_equal(dist_of(p, "b", "k6"), 0);
    struct plans_totals tt;
    plans_totals(p, &tt);
    assert_int_equal(tt.plans, 1);
    assert_int_equal(tt.reads, 6); /* k0..k5; the re-read of k0 is counted apart */
    assert_int_equal(tt.hits, 2);
    assert_int_equal(tt.stalls, 1);
    assert_int_equal(tt.prefetched, 1);
    assert_int_equal(tt.prefetch_errors, 1);
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(plans_json(p, "ak", id, &b), 0);
    assert_non_null(strstr(b.p, "\"position\":6"));
    assert_non_null(strstr(b.p, "\"reads_behind\":1"));
    buf_free(&b);
    plans_free(p);
}

/* The share of the cache bounds the prefetch too: a plan of 20 x 10 MiB in a 100 MiB cache
 * (80 MiB for plans) prefetches 8, whatever --plan-ahead allows. A key repeated (the next
 * epoch) has the next use of its next entry. */
static void test_plan_share_and_next_use(void **state)
{
    (void)state;
    struct plans *p = new_plans(100 * MiB, 1ull << 40, 0);
    char id[24];
    const char *why;
    char **k = keys_of(20, "s%d");
    free(k[19]);
    k[19] = strdup("s0"); /* s0 again at the end */
    assert_int_equal(plans_put(p, "ak", "r0", "b", k, sizes_of(20, 10 * MiB), 20, 0, id, &why), 0);
    struct plan_ticket t[20];
    int n = 0;
    while (n < 20 && plans_take(p, 0, &t[n]))
        n++;
    assert_int_equal(n, 8);
    assert_int_equal(dist_of(p, "b", "s0"), 0);
    struct plan_tok tok;
    plans_read(p, "ak", "b", "s0", 0, &tok);
    assert_int_equal(dist_of(p, "b", "s0"), 18); /* entry 19, from position 1 */
    /* the entries after one not read yet move nothing while they stay within ahead_objects */
    for (int i = 2; i < 19; i++) {
        char key[16];
        snprintf(key, sizeof(key), "s%d", i);
        plans_read(p, "ak", "b", key, 0, &tok);
    }
    assert_int_equal(dist_of(p, "b", "s1"), 0); /* s1 not read: still the position */
    assert_int_equal(dist_of(p, "b", "s0"), 18);
    for (int i = 0; i < n; i++)
        plans_done(p, &t[i], 0, 10 * MiB, 0);
    plans_free(p);
    /* further than ahead_objects (4 here) past an entry never read, it is skipped */
    struct plans_conf pc = {.cache_bytes = 100 * MiB,
                            .ahead_bytes = 10 * MiB,
                            .ahead_objects = 4,
                            .requests = 8};
    assert_int_equal(plans_new(&pc, &p), 0);
    assert_int_equal(plans_put(p, "ak", "r0", "b", keys_of(12, "q%d"), NULL, 12, 0, id, &why), 0);
    for (int i = 1; i <= 5; i++) {
        char key[16];
        snprintf(key, sizeof(key), "q%d", i);
        plans_read(p, "ak", "b", key, 0, &tok);
    }
    assert_int_equal(dist_of(p, "b", "q0"), UINT64_MAX); /* skipped */
    assert_int_equal(dist_of(p, "b", "q1"), UINT64_MAX); /* read */
    assert_int_equal(dist_of(p, "b", "q6"), 0);          /* the position: q0 skipped, q1-q5 read */
    plans_free(p);
}

static void test_plan_replace_limits_owners(void **state)
{
    (void)state;
    struct plans *p = new_plans(100 * MiB, 10 * MiB, 60 * SEC);
    char id[24], id2[24];
    const char *why;
    int64_t now = s3c_real_ns();
    assert_int_equal(plans_put(p, "ak", "r0", "b", keys_of(4, "k%d"), NULL, 4, now, id, &why), 0);
    struct plan_ticket t;
    assert_int_equal(plans_take(p, 0, &t), 1);
    /* replaced while its prefetch is in flight: the ticket ends without a trace */
    assert_int_equal(plans_put(p, "ak", "r0", "b", keys_of(4, "n%d"), NULL, 4, now, id2, &why), 0);
    assert_string_not_equal(id, id2);
    plans_done(p, &t, 0, 1000, 0);
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(plans_json(p, NULL, id, &b), -S3E_NOT_FOUND);
    /* another key neither sees nor cancels it; its owner and an admin (NULL) do */
    assert_int_equal(plans_json(p, "other", id2, &b), -S3E_NOT_FOUND);
    assert_int_equal(plans_cancel(p, "other", id2), -S3E_NOT_FOUND);
    assert_int_equal(plans_json(p, "ak", id2, &b), 0);
    buf_free(&b);
    /* at most PLAN_PER_OWNER plans per key: the next is SlowDown, the caller keeps its keys */
    for (int i = 1; i < PLAN_PER_OWNER; i++) {
        char name[16];
        snprintf(name, sizeof(name), "r%d", i);
        assert_int_equal(plans_put(p, "ak", name, "b", keys_of(1, "x%d"), NULL, 1, now, id, &why),
                         0);
    }
    char **k = keys_of(1, "y%d");
    assert_int_equal(plans_put(p, "ak", "one-more", "b", k, NULL, 1, now, id, &why),
                     -S3E_SLOW_DOWN);
    assert_non_null(why);
    free(k[0]);
    free(k);
    /* the same name replaces, even at the limit */
    assert_int_equal(plans_put(p, "ak", "r1", "b", keys_of(2, "z%d"), NULL, 2, now, id, &why), 0);
    assert_int_equal(plans_cancel(p, NULL, id2), 0);
    struct plans_totals tt;
    plans_totals(p, &tt);
    assert_int_equal(tt.plans, PLAN_PER_OWNER - 1);
    plans_free(p);
    /* idle: a plan whose last planned GET is older than the bound goes at the next look */
    p = new_plans(100 * MiB, 10 * MiB, 60 * SEC);
    assert_int_equal(plans_put(p, "ak", "old", "b", keys_of(2, "o%d"), NULL, 2, now - 61 * SEC, id,
                               &why),
                     0);
    assert_int_equal(plans_put(p, "ak", "new", "b", keys_of(2, "w%d"), NULL, 2, now, id2, &why), 0);
    buf_init(&b, 1 << 20);
    assert_int_equal(plans_json(p, NULL, NULL, &b), 0);
    assert_null(strstr(b.p, "\"old\""));
    assert_non_null(strstr(b.p, "\"new\""));
    buf_free(&b);
    plans_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_pacing),
        cmocka_unit_test(test_plan_share_and_next_use),
        cmocka_unit_test(test_plan_replace_limits_owners),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
