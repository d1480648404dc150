/*
 * test_listing.c: the merge of keys written back but not drained into a backend's listing
 * page (objects/listing.c listing_merge_dirty()), as tables: a dirty key replaces the
 * backend's entry of its name, rolls up under a delimiter, stays out before the marker and
 * past a truncated page's end, and a page over max-keys is cut with the next marker at its end.
 * Also lib/arr.h and lib/hex.h, which the write path uses.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/arr.h"
#include "lib/hex.h"
#include "lib/s3c.h"
#include "objects/listing.h"

/* A page from "a b c" (keys; "p/" a common prefix when it ends in '/'), dirty keys from
 * "x y", merged: the page's keys as "k1 k2 p/", its next marker and truncation. */
static void merge(const char *backend, int truncated, const char *dirty, const char *prefix,
                  const char *delim, const char *marker, unsigned max, char *out, size_t cap,
                  char *next, size_t ncap, int *trunc_out)
{
    struct be_list_page pg = {0};
    struct be_list_entry dk[16];
    size_t dn = 0, cap_pg = 0;
    char buf[256], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", backend);
    for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        assert_int_equal(ARR_GROW(pg.entries, pg.n, 1, cap_pg), 0);
        memset(&pg.entries[pg.n], 0, sizeof(pg.entries[pg.n]));
        pg.entries[pg.n].key = strdup(t);
        pg.entries[pg.n].is_prefix = t[strlen(t) - 1] == '/';
        snprintf(pg.entries[pg.n].etag, sizeof(pg.entries[pg.n].etag), "backend");
        pg.n++;
    }
    pg.truncated = truncated;
    snprintf(buf, sizeof(buf), "%s", dirty);
    save = NULL;
    for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        memset(&dk[dn], 0, sizeof(dk[dn]));
        dk[dn].key = t;
        snprintf(dk[dn].etag, sizeof(dk[dn].etag), "dirty");
        dn++;
    }
    struct be_list_req lr = {.bucket = "b", .prefix = prefix, .delimiter = delim,
                             .marker = marker, .max_keys = max};
    assert_int_equal(listing_merge_dirty(&lr, &pg, dk, dn), 0);
    out[0] = '\0';
    for (size_t i = 0; i < pg.n; i++) {
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "%s%s%s", l ? " " : "", pg.entries[i].key,
                 !pg.entries[i].is_prefix && !strcmp(pg.entries[i].etag, "dirty") ? "*" : "");
    }
    snprintf(next, ncap, "%s", pg.next_marker ? pg.next_marker : "-");
    *trunc_out = pg.truncated;
    be_list_page_free(&pg);
}

static void test_listing_merge_dirty(void **state)
{
    /* "*": the entry is the dirty key's (its ETag), not the backend's */
    static const struct {
        const char *backend;
        int truncated;
        const char *dirty, *prefix, *delim, *marker;
        unsigned max;
        const char *want, *next;
        int want_trunc;
    } cases[] = {
        {"a c", 0, "b", "", NULL, NULL, 1000, "a b* c", "-", 0},
        {"a b c", 0, "b", "", NULL, NULL, 1000, "a b* c", "-", 0},        /* replaces */
        {"c", 0, "0 a b", "", NULL, "a", 1000, "b* c", "-", 0},           /* not after the marker */
        {"a c", 1, "b d", "", NULL, NULL, 2, "a b*", "b", 1},             /* d: next page */
        {"a c", 0, "b d", "", NULL, NULL, 3, "a b* c", "c", 1},           /* cut to max-keys */
        {"a p/", 0, "p/x q/y", "", "/", NULL, 1000, "a p/ q/", "-", 0},   /* roll up */
        {"", 0, "d/x d/y e", "d/", "/", NULL, 1000, "d/x* d/y*", "-", 0}, /* under a prefix */
        {"", 0, "", "", NULL, NULL, 1000, "", "-", 0},
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        char got[256], next[64];
        int trunc;
        /* the cache hands over only the dirty keys under the prefix */
        char dirty[64] = "";
        char buf[64], *save = NULL;
        snprintf(buf, sizeof(buf), "%s", cases[i].dirty);
        for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save))
            if (!strncmp(t, cases[i].prefix, strlen(cases[i].prefix)))
                snprintf(dirty + strlen(dirty), sizeof(dirty) - strlen(dirty), "%s%s",
                         dirty[0] ? " " : "", t);
        merge(cases[i].backend, cases[i].truncated, dirty, cases[i].prefix, cases[i].delim,
              cases[i].marker, cases[i].max, got, sizeof(got), next, sizeof(next), &trunc);
        if (strcmp(got, cases[i].want) || strcmp(next, cases[i].next) ||
            trunc != cases[i].want_trunc)
            fail_msg("case %zu: got \"%s\" next %s truncated %d; want \"%s\" next %s truncated %d",
                     i, got, next, trunc, cases[i].want, cases[i].next, cases[i].want_trunc);
    }
}

static void test_listing_arr_grow(void **state)
{
    int *v = NULL;
    size_t n = 0, cap = 0;
    (void)state;
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(ARR_GROW(v, n, 1, cap), 0);
        v[n++] = i;
    }
    assert_true(cap >= 1000 && cap < 2048);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(v[i], i);
    assert_int_equal(ARR_GROW(v, n, 5000, cap), 0);
    assert_true(cap >= 6000);
    size_t before = cap;
    assert_int_not_equal(ARR_GROW(v, n, SIZE_MAX, cap), 0); /* overflow: refused, unchanged */
    assert_int_equal(cap, before);
    free(v);
}

static void test_listing_hex(void **state)
{
    unsigned char b[4];
    char s[9];
    (void)state;
    assert_int_equal(hex_decode("00fFa5", 3, b), 0);
    assert_int_equal(b[0], 0);
    assert_int_equal(b[1], 0xff);
    assert_int_equal(b[2], 0xa5);
    assert_int_equal(hex_decode("0g", 1, b), -1);
    assert_int_equal(hex_digit('F'), 15);
    assert_int_equal(hex_digit('/'), -1);
    hex_encode("\x01\xab\xff\x10", 4, s);
    assert_string_equal(s, "01abff10");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listing_merge_dirty),
        cmocka_unit_test(test_listing_arr_grow),
        cmocka_unit_test(test_listing_hex),
    };
    return cmocka_run_group_tests_name("listing", tests, NULL, NULL);
}
