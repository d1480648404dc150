/* test_ring_envoy.c: Envoy's RING_HASH ring (ring/ring_envoy.c). The rings below are
 * the ones Envoy's own unit tests print and assert
 * (test/extensions/load_balancing_policies/ring_hash/ring_hash_lb_test.cc: Basic,
 * UnevenHosts, HostWeightedTinyRing); the XXH64 vectors come from Debian's libxxhash
 * 0.8.1 (XXH64 through ctypes), the library Envoy uses. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ring/ring_envoy.h"

#define N_(a) (sizeof(a) / sizeof((a)[0]))

static void test_ring_envoy_xxh64(void **state)
{
    static const char s[] =
        "/bucket/train/shard-000000.tar?partNumber=1&uploadId=abcdefghijklmnopqrstuvwxyz";
    static const struct { size_t len; uint64_t seed0, seed_golden; } v[] = {
        {0, 0xef46db3751d8e999ull, 0xac75fda2929b17efull},
        {1, 0xe89cd67289eddaeaull, 0x5e068796e8d1e861ull},
        {3, 0x567abffbc46af111ull, 0x7b34a6b90faf496dull},
        {4, 0x9c122b5c5e20947full, 0x2edf8e0075755da7ull},
        {7, 0x952454c5125ac2cdull, 0x182e1a9e02908338ull},
        {8, 0xf6d1de9142cfdcecull, 0x739f4c34a787fd3eull},
        {12, 0xd3350c27fe5755c4ull, 0x46d0ec50718c5a6bull},
        {31, 0xf6467eb885935712ull, 0x6c89c8862d49a782ull},
        {32, 0x6051d215681db656ull, 0xdcfa7453c4dcea9cull},
        {33, 0x3c70215d4fbb298dull, 0xcc64a2a99d232a3aull},
        {63, 0xf719d1a41bce4fefull, 0x02105e74971b65acull},
        {64, 0xe1790c8fe9f79894ull, 0xf2fb92c8c76dd133ull},
        {80, 0x208bd20ab5b595c7ull, 0xdce02b2f5a19b772ull},
    };
    (void)state;
    for (size_t i = 0; i < N_(v); i++) {
        assert_int_equal(ring_xxh64(s, v[i].len, 0), v[i].seed0);
        assert_int_equal(ring_xxh64(s, v[i].len, 2654435761u), v[i].seed_golden);
    }
}

static void check_ring(const struct ring_envoy *r, const uint64_t *hash, const int *server, size_t n)
{
    assert_int_equal(ring_envoy_points(r), n);
    for (size_t i = 0; i < n; i++) {
        uint64_t h;
        size_t s;
        ring_envoy_point(r, i, &h, &s);
        if (h != hash[i] || (int)s != server[i])
            fail_msg("entry %zu: %llu/%zu, Envoy: %llu/%d", i, (unsigned long long)h, s,
                     (unsigned long long)hash[i], server[i]);
    }
}

/* Envoy's "Basic": 6 hosts, minimum_ring_size 12 */
static void test_ring_envoy_basic(void **state)
{
    static const struct ring_server sv[] = {
        {"127.0.0.1:90", 1, 0}, {"127.0.0.1:91", 1, 0}, {"127.0.0.1:92", 1, 0},
        {"127.0.0.1:93", 1, 0}, {"127.0.0.1:94", 1, 0}, {"127.0.0.1:95", 1, 0}};
    static const uint64_t hash[] = {
        833437586790550860ull,   928266305478181108ull,   1033482794131418490ull,
        3551244743356806947ull,  3851675632748031481ull,  5583722120771150861ull,
        6311230543546372928ull,  7700377290971790572ull,  13144177310400110813ull,
        13444792449719432967ull, 15516499411664133160ull, 16117243373044804889ull};
    static const int server[] = {4, 2, 0, 5, 3, 1, 1, 3, 5, 2, 4, 0};
    struct ring_envoy *r = NULL;
    (void)state;
    assert_int_equal(ring_envoy_new(sv, 6, 12, 0, &r), 0);
    check_ring(r, hash, server, N_(hash));
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(ring_envoy_server_points(r, i), 2);
    /* Envoy's chooseHost() expectations */
    assert_int_equal(ring_envoy_owner_hash(r, 0), 4);
    assert_int_equal(ring_envoy_owner_hash(r, UINT64_MAX), 4); /* wraps */
    assert_int_equal(ring_envoy_owner_hash(r, 3551244743356806947ull), 5);
    assert_int_equal(ring_envoy_owner_hash(r, 3551244743356806948ull), 3);
    assert_int_equal(ring_envoy_owner_hash(r, 16117243373044804880ull), 0);
    ring_envoy_free(r);
}

/* Envoy's "UnevenHosts": 2 hosts and minimum_ring_size 3 give 2 entries each */
static void test_ring_envoy_uneven(void **state)
{
    static const struct ring_server a[] = {{"127.0.0.1:80", 1, 0}, {"127.0.0.1:81", 1, 0}};
    static const struct ring_server b[] = {{"127.0.0.1:81", 1, 0}, {"127.0.0.1:82", 1, 0}};
    static const uint64_t ha[] = {5454692015285649509ull, 7859399908942313493ull,
                                  13838424394637650569ull, 16064866803292627174ull};
    static const int sa[] = {0, 1, 0, 1};
    static const uint64_t hb[] = {7859399908942313493ull, 8241336090459785962ull,
                                  12882406409176325258ull, 16064866803292627174ull};
    static const int sb[] = {0, 1, 1, 0};
    struct ring_envoy *r = NULL;
    (void)state;
    assert_int_equal(ring_envoy_new(a, 2, 3, 0, &r), 0);
    check_ring(r, ha, sa, 4);
    assert_int_equal(ring_envoy_owner_hash(r, 0), 0);
    ring_envoy_free(r);
    assert_int_equal(ring_envoy_new(b, 2, 3, 0, &r), 0);
    check_ring(r, hb, sb, 4);
    assert_int_equal(ring_envoy_owner_hash(r, 0), 0);
    ring_envoy_free(r);
}

/* Envoy's "HostWeightedTinyRing": weights 1, 2, 3 on a ring of exactly 6 */
static void test_ring_envoy_weighted_tiny(void **state)
{
    static const struct ring_server sv[] = {
        {"127.0.0.1:90", 1, 0}, {"127.0.0.1:91", 2, 0}, {"127.0.0.1:92", 3, 0}};
    static const struct { uint64_t hash; int want; } expect[] = {
        {928266305478181108ull, 2},  {4443673547860492590ull, 2},  {5583722120771150861ull, 1},
        {6311230543546372928ull, 1}, {13444792449719432967ull, 2}, {16117243373044804889ull, 0}};
    struct ring_envoy *r = NULL;
    (void)state;
    assert_int_equal(ring_envoy_new(sv, 3, 6, 6, &r), 0);
    assert_int_equal(ring_envoy_points(r), 6);
    assert_int_equal(ring_envoy_server_points(r, 0), 1);
    assert_int_equal(ring_envoy_server_points(r, 1), 2);
    assert_int_equal(ring_envoy_server_points(r, 2), 3);
    for (size_t i = 0; i < N_(expect); i++)
        assert_int_equal(ring_envoy_owner_hash(r, expect[i].hash), expect[i].want);
    ring_envoy_free(r);
}

/* deploy/scale-out/envoy.yaml: 3 endpoints, minimum_ring_size 1024 -> 342 entries each
 * (scale = ceil(1024/3) x 3 = 1026); a down host is left out; the :path key stops at '?' */
static void test_ring_envoy_deployed(void **state)
{
    static const struct ring_server sv[] = {
        {"127.0.0.1:9001", 1, 0}, {"127.0.0.1:9002", 1, 0}, {"127.0.0.1:9003", 1, 0}};
    static const struct ring_server one_down[] = {
        {"127.0.0.1:9001", 1, 0}, {"127.0.0.1:9002", 1, 1}, {"127.0.0.1:9003", 1, 0}};
    static const struct ring_server all_down[] = {{"127.0.0.1:9001", 1, 1}};
    struct ring_envoy *r = NULL;
    const char *t = "/bucket/obj?partNumber=2&uploadId=x";
    (void)state;
    assert_int_equal(ring_envoy_new(sv, 3, 1024, 0, &r), 0);
    assert_int_equal(ring_envoy_points(r), 1026);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(ring_envoy_server_points(r, i), 342);
    assert_int_equal(ring_envoy_owner_path(r, t, strlen(t)),
                     ring_envoy_owner_hash(r, ring_xxh64("/bucket/obj", 11, 0)));
    ring_envoy_free(r);
    assert_int_equal(ring_envoy_new(one_down, 3, 0, 0, &r), 0);
    assert_int_equal(ring_envoy_points(r), 1024);
    assert_int_equal(ring_envoy_server_points(r, 1), 0);
    for (int i = 0; i < 1000; i++) {
        char k[32];
        int n = snprintf(k, sizeof(k), "/k/%d", i);
        assert_int_not_equal(ring_envoy_owner_path(r, k, (size_t)n), 1);
    }
    ring_envoy_free(r);
    assert_int_equal(ring_envoy_new(all_down, 1, 0, 0, &r), -EINVAL);
    assert_int_equal(ring_envoy_new(sv, 3, 20, 10, &r), -EINVAL); /* min > max */
    assert_int_equal(ring_envoy_new(sv, 3, 0, RING_ENVOY_MAX_SIZE_DEFAULT + 1, &r), -EINVAL);
    assert_int_equal(ring_envoy_new(sv, 0, 0, 0, &r), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_envoy_xxh64),
        cmocka_unit_test(test_ring_envoy_basic),
        cmocka_unit_test(test_ring_envoy_uneven),
        cmocka_unit_test(test_ring_envoy_weighted_tiny),
        cmocka_unit_test(test_ring_envoy_deployed),
    };
    return cmocka_run_group_tests_name("ring_envoy", tests, NULL, NULL);
}
