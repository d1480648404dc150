/* test_ring.c: nginx's consistent-hash ring and $uri (ring/ring.c). The vectors were
 * printed by tests/unit/ring_ref.py, a small independent model of nginx's algorithm;
 * tests/e2e/86-ring-agreement.py checks the same code against real nginx. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ring/ring.h"

#define N_(a) (sizeof(a) / sizeof((a)[0]))

static int has_point(const struct ring *r, uint32_t h, size_t *server)
{
    for (size_t i = 0; i < ring_points(r); i++) {
        uint32_t ph;
        size_t s;
        ring_point(r, i, &ph, &s);
        if (ph == h) {
            if (server)
                *server = s;
            return 1;
        }
    }
    return 0;
}

static void test_ring_hash_is_crc32(void **state)
{
    (void)state;
    assert_int_equal(ring_hash("123456789", 9), 0xCBF43926u); /* the CRC-32 check value */
    assert_int_equal(ring_hash("/a", 2), 0x69707b5cu);
    assert_int_equal(ring_hash("", 0), 0);
}

/* How nginx splits a server's text into the host and port it hashes, seen through the
 * first three points it generates. */
static void test_ring_points_of_one_server(void **state)
{
    static const struct { const char *name; uint32_t first[3]; } cases[] = {
        {"127.0.0.1:9001", {0x70533e04u, 0x10571e62u, 0x1f895401u}},
        {"unix:/run/gw.sock", {0x5d5453d4u, 0x519558eau, 0x966392bdu}}, /* host = the path */
        {"UNIX:/run/gw.sock", {0x5d5453d4u, 0x519558eau, 0x966392bdu}}, /* any case */
        {"gw", {0xc55a906cu, 0xe2e3e3c6u, 0x068f6c34u}},                /* no port */
        {"gw:", {0xc55a906cu, 0xe2e3e3c6u, 0x068f6c34u}},               /* empty port */
        {"gw:abc", {0x33ea66e7u, 0x2f59d284u, 0x1f747d91u}},            /* not a port */
        {"[::1]:9000", {0x480417d0u, 0x6b52171au, 0x3c2492d8u}},
        {"10.0.0.5:09000", {0x2974a736u, 0x29e26f30u, 0xb42eda88u}},    /* text, not number */
    };
    (void)state;
    for (size_t i = 0; i < N_(cases); i++) {
        struct ring_server sv = {cases[i].name, 1, 0};
        struct ring *r = NULL;
        assert_int_equal(ring_new(&sv, 1, &r), 0);
        assert_int_equal(ring_points(r), RING_POINTS_PER_WEIGHT);
        for (int j = 0; j < 3; j++)
            if (!has_point(r, cases[i].first[j], NULL))
                fail_msg("%s: point %d 0x%08x missing", cases[i].name, j, cases[i].first[j]);
        for (size_t k = 1; k < ring_points(r); k++) { /* ascending */
            uint32_t a, b;
            size_t s;
            ring_point(r, k - 1, &a, &s);
            ring_point(r, k, &b, &s);
            assert_true(a < b);
        }
        ring_free(r);
    }
}

static const struct ring_server three[] = {
    {"127.0.0.1:9001", 1, 0}, {"127.0.0.1:9002", 1, 0}, {"127.0.0.1:9003", 1, 0}};

static void test_ring_owner_vectors(void **state)
{
    static const struct { const char *key; int want, want_weighted; } cases[] = {
        {"/", 1, 0},
        {"/a", 0, 3},
        {"/bucket/key-1", 2, 0},
        {"/shards/train/shard-000000.tar", 0, 3},
        {"/x%20y", 1, 3},
        {"/\xe6\x97\xa5\xe6\x9c\xac", 0, 3},
    };
    static const struct ring_server weighted[] = {
        {"a:1", 3, 0}, {"b:2", 1, 0}, {"c:3", 1, 1}, {"d:4", 2, 0}};
    struct ring *r = NULL, *w = NULL;
    (void)state;
    assert_int_equal(ring_new(three, 3, &r), 0);
    assert_int_equal(ring_new(weighted, 4, &w), 0);
    assert_int_equal(ring_points(r), 480);
    assert_int_equal(ring_points(w), 1120); /* (3+1+1+2) x 160: a down server keeps its points */
    for (size_t i = 0; i < N_(cases); i++) {
        assert_int_equal(ring_owner(r, cases[i].key, strlen(cases[i].key)), cases[i].want);
        assert_int_equal(ring_owner(w, cases[i].key, strlen(cases[i].key)), cases[i].want_weighted);
    }
    assert_string_equal(ring_name(w, 3), "d:4");
    assert_int_equal(ring_weight(w, 0), 3);
    assert_int_equal(ring_down(w, 2), 1);
    assert_null(ring_name(w, 4));
    ring_free(r);
    ring_free(w);
}

/* Weights share the keys out roughly in proportion; a down server gets none: its keys go
 * to the next point's server. */
static void test_ring_weights_and_down(void **state)
{
    static const struct ring_server weighted[] = {
        {"a:1", 3, 0}, {"b:2", 1, 0}, {"c:3", 1, 1}, {"d:4", 2, 0}};
    struct ring *w = NULL;
    unsigned count[4] = {0, 0, 0, 0};
    char key[64];
    (void)state;
    assert_int_equal(ring_new(weighted, 4, &w), 0);
    for (int i = 0; i < 60000; i++) {
        int n = snprintf(key, sizeof(key), "/bucket/obj-%d", i);
        int o = ring_owner(w, key, (size_t)n);
        assert_in_range(o, 0, 3);
        count[o]++;
    }
    assert_int_equal(count[2], 0);
    /* shares of 3 : 1 : 2 plus c's share spread over the others: a is ~1.5x d, d ~2x b */
    assert_true(count[0] > count[3] && count[3] > count[1]);
    assert_in_range(count[0], 60000 * 3 / 7 * 8 / 10, 60000 * 4 / 6);
    ring_free(w);
}

static void test_ring_one_server(void **state)
{
    struct ring_server up = {"only:1", 1, 0}, down = {"only:1", 1, 1};
    struct ring *r = NULL;
    (void)state;
    assert_int_equal(ring_new(&up, 1, &r), 0);
    assert_int_equal(ring_owner(r, "/x", 2), 0);
    assert_int_equal(ring_owner(r, "", 0), 0); /* nginx: one peer, no hashing at all */
    ring_free(r);
    assert_int_equal(ring_new(&down, 1, &r), 0);
    assert_int_equal(ring_owner(r, "/x", 2), -ENOENT);
    ring_free(r);
}

/* 127.0.0.1:20195 and 127.0.0.1:20412 generate one equal point (found by the port search
 * of e2e 86): the ring keeps it once, for the server listed first. */
static void test_ring_equal_points(void **state)
{
    const uint32_t shared = 849932538u;
    struct ring_server ab[] = {{"127.0.0.1:20195", 1, 0}, {"127.0.0.1:20412", 1, 0}};
    struct ring_server ba[] = {{"127.0.0.1:20412", 1, 0}, {"127.0.0.1:20195", 1, 0}};
    struct ring *r = NULL;
    size_t s = 99;
    (void)state;
    assert_int_equal(ring_new(ab, 2, &r), 0);
    assert_int_equal(ring_points(r), 319);
    assert_true(has_point(r, shared, &s));
    assert_int_equal(s, 0);
    assert_int_equal(ring_owner_hash(r, shared), 0);
    ring_free(r);
    assert_int_equal(ring_new(ba, 2, &r), 0);
    assert_true(has_point(r, shared, &s));
    assert_int_equal(s, 0); /* now 20412, listed first */
    assert_int_equal(ring_owner_hash(r, shared), 0);
    assert_string_equal(ring_name(r, 0), "127.0.0.1:20412");
    ring_free(r);
}

static void test_ring_wraparound(void **state)
{
    struct ring *r = NULL;
    uint32_t first, last, h;
    size_t sfirst, slast, s;
    (void)state;
    assert_int_equal(ring_new(three, 3, &r), 0);
    ring_point(r, 0, &first, &sfirst);
    ring_point(r, ring_points(r) - 1, &last, &slast);
    assert_int_equal(first, 0x006fff97u); /* ring_ref.py */
    assert_int_equal(sfirst, 2);
    assert_int_equal(last, 0xffeea1b4u);
    /* past the last point: the first point's server */
    assert_int_equal(ring_owner_hash(r, last + 1), (int)sfirst);
    assert_int_equal(ring_owner_hash(r, UINT32_MAX), (int)sfirst);
    assert_int_equal(ring_owner_hash(r, 0), (int)sfirst);
    assert_int_equal(ring_owner_hash(r, first), (int)sfirst);
    assert_int_equal(ring_owner_hash(r, last), (int)slast);
    /* a hash equal to a point is that point's; one above goes to the next */
    ring_point(r, 100, &h, &s);
    assert_int_equal(ring_owner_hash(r, h), (int)s);
    ring_point(r, 101, &h, &s);
    uint32_t h100;
    size_t s100;
    ring_point(r, 100, &h100, &s100);
    assert_int_equal(ring_owner_hash(r, h100 + 1), (int)s);
    ring_free(r);
}

/* nginx tries the key's point and the 20 after it; when all are down servers' it falls back
 * to round robin (-EAGAIN here). Every server down: -ENOENT. An empty key: round robin. */
static void test_ring_down_runs(void **state)
{
    struct ring_server sv[] = {{"up:1", 1, 0}, {"down:2", RING_WEIGHT_MAX, 1}};
    struct ring_server all_down[] = {{"a:1", 1, 1}, {"b:1", 1, 1}};
    struct ring *r = NULL;
    size_t n, run = 0, long_runs = 0, short_runs = 0;
    (void)state;
    assert_int_equal(ring_new(sv, 2, &r), 0);
    n = ring_points(r);
    /* walk the ring: a point of "down" with fewer than 21 points to the next "up" point
     * resolves to "up"; one with 21 or more gives -EAGAIN */
    for (size_t i = n; i-- > 0;) {
        uint32_t h;
        size_t s;
        ring_point(r, i, &h, &s);
        if (s == 0) {
            run = 0;
            assert_int_equal(ring_owner_hash(r, h), 0);
            continue;
        }
        run++;
        if (i + run >= n) /* the run wraps: not counted */
            continue;
        if (run < RING_NGINX_TRIES) {
            assert_int_equal(ring_owner_hash(r, h), 0);
            short_runs++;
        } else {
            assert_int_equal(ring_owner_hash(r, h), -EAGAIN);
            long_runs++;
        }
    }
    assert_true(short_runs > 100 && long_runs > 100);
    assert_int_equal(ring_owner(r, "", 0), -EAGAIN);
    ring_free(r);
    assert_int_equal(ring_new(all_down, 2, &r), 0);
    assert_int_equal(ring_owner(r, "/x", 2), -ENOENT);
    assert_int_equal(ring_owner(r, "", 0), -ENOENT);
    ring_free(r);
    assert_int_equal(ring_new(three, 3, &r), 0);
    assert_int_equal(ring_owner(r, "", 0), -EAGAIN);
    ring_free(r);
}

static void test_ring_new_errors(void **state)
{
    char longname[RING_NAME_MAX + 1];
    struct ring *r = (struct ring *)1;
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    struct ring_server zero_w[] = {{"a:1", 0, 0}};
    struct ring_server big_w[] = {{"a:1", RING_WEIGHT_MAX + 1, 0}};
    struct ring_server dup[] = {{"a:1", 1, 0}, {"b:1", 1, 0}, {"a:1", 2, 0}};
    struct ring_server empty[] = {{"", 1, 0}};
    struct ring_server null[] = {{NULL, 1, 0}};
    struct ring_server lng[] = {{longname, 1, 0}};
    (void)state;
    assert_int_equal(ring_new(zero_w, 0, &r), -EINVAL);
    assert_null(r);
    assert_int_equal(ring_new(zero_w, 1, &r), -EINVAL);
    assert_int_equal(ring_new(big_w, 1, &r), -EINVAL);
    assert_int_equal(ring_new(dup, 3, &r), -EEXIST);
    assert_int_equal(ring_new(empty, 1, &r), -EINVAL);
    assert_int_equal(ring_new(null, 1, &r), -EINVAL);
    assert_int_equal(ring_new(lng, 1, &r), -EINVAL);
    /* 27 servers of weight 1000: 4.3 M points, above RING_POINTS_MAX */
    struct ring_server heavy[27];
    char hn[27][16];
    for (int i = 0; i < 27; i++) {
        snprintf(hn[i], sizeof(hn[i]), "h%d:1", i);
        heavy[i] = (struct ring_server){hn[i], RING_WEIGHT_MAX, 0};
    }
    assert_int_equal(ring_new(heavy, 27, &r), -EINVAL);
    assert_int_equal(ring_new(heavy, 26, &r), 0); /* 4.16 M */
    ring_free(r);
    longname[RING_NAME_MAX - 1] = '\0';
    assert_int_equal(ring_new(lng, 1, &r), 0);
    ring_free(r);
    ring_free(NULL);
}

/* nginx's $uri (ngx_http_parse_complex_uri with merge_slashes on). NULL: 400. */
static void test_ring_nginx_uri(void **state)
{
    static const struct { const char *in; const char *want; } cases[] = {
        {"/", "/"},
        {"/a/b", "/a/b"},
        {"/a//b", "/a/b"},
        {"//a///b//", "/a/b/"},
        {"/a/./b", "/a/b"},
        {"/./", "/"},
        {"/.", "/"},
        {"/a/.", "/a/"},
        {"/a/..", "/"},
        {"/a/b/../c", "/a/c"},
        {"/a/bb/..", "/a/"},
        {"/a/b/c/../../d", "/a/d"},
        {"/a/.b", "/a/.b"},
        {"/a/..b", "/a/..b"},
        {"/a/...", "/a/..."},
        {"/a./b.", "/a./b."},
        {"/a%2Fb", "/a/b"},
        {"/a%2f%2F/b", "/a/b"},
        {"/a/%2e%2E/b", "/b"},
        {"/%2e/x", "/x"},
        {"/a/b/%2E%2E%2F%2E%2E%2Fc", "/c"},
        {"/a%25b", "/a%b"},
        {"/a%2541", "/a%41"},  /* decoded once */
        {"/a%252e%252e", "/a%2e%2e"},
        {"/a/%25/..", "/a/"},
        {"/a%3Fb?c", "/a?b"},   /* a decoded '?' is a plain byte */
        {"/a%3f/../b", "/b"},
        {"/a%23b#c", "/a#b"},
        {"/a?b/../c", "/a"},
        {"/a?%zz", "/a"},       /* the query is not decoded */
        {"/a#b", "/a"},
        {"/a/.#b", "/a/"},
        {"/a/..?x", "/"},
        {"/x%20y+z", "/x y+z"}, /* '+' stays */
        {"/%C3%A9", "/\xc3\xa9"},
        {"/\xc3\xa9/\xe6\x97\xa5", "/\xc3\xa9/\xe6\x97\xa5"},
        {"/a%0Ab%09", "/a\nb\t"}, /* decoded control bytes are kept */
        {"/..", NULL},
        {"/../a", NULL},
        {"/a/../..", NULL},
        {"/%2E%2E%2Fetc", NULL},
        {"/.%2e", NULL},
        {"/a%", NULL},
        {"/a%4", NULL},
        {"/a%zz", NULL},
        {"/a%4g", NULL},
        {"/a%00", NULL},
        {"/a b", NULL},
        {"/a\tb", NULL},
        {"/a\x7f", NULL},
        {"/a?b c", NULL},
        {"a/b", NULL},
        {"", NULL},
        {"%2Fa", NULL},
    };
    char out[256];
    (void)state;
    for (size_t i = 0; i < N_(cases); i++) {
        ssize_t n = ring_nginx_uri(cases[i].in, strlen(cases[i].in), out, sizeof(out));
        if (!cases[i].want) {
            if (n != -EINVAL)
                fail_msg("\"%s\": want -EINVAL, got %zd", cases[i].in, n);
            continue;
        }
        if (n < 0)
            fail_msg("\"%s\": got %zd", cases[i].in, n);
        if ((size_t)n != strlen(cases[i].want) || memcmp(out, cases[i].want, (size_t)n) != 0)
            fail_msg("\"%s\": want \"%s\", got \"%.*s\"", cases[i].in, cases[i].want, (int)n, out);
    }
    /* a NUL byte in the target is refused like any control byte */
    assert_int_equal(ring_nginx_uri("/a\0b", 4, out, sizeof(out)), -EINVAL);
    /* the output is never longer than the input: cap == len is enough; less is -ENOSPC */
    assert_int_equal(ring_nginx_uri("/abc", 4, out, 4), 4);
    assert_int_equal(ring_nginx_uri("/abc", 4, out, 3), -ENOSPC);
    assert_int_equal(ring_nginx_uri("/a%2Fb", 6, out, 4), 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_hash_is_crc32),
        cmocka_unit_test(test_ring_points_of_one_server),
        cmocka_unit_test(test_ring_owner_vectors),
        cmocka_unit_test(test_ring_weights_and_down),
        cmocka_unit_test(test_ring_one_server),
        cmocka_unit_test(test_ring_equal_points),
        cmocka_unit_test(test_ring_wraparound),
        cmocka_unit_test(test_ring_down_runs),
        cmocka_unit_test(test_ring_new_errors),
        cmocka_unit_test(test_ring_nginx_uri),
    };
    return cmocka_run_group_tests_name("ring", tests, NULL, NULL);
}
