/* test_peers.c: --peers / --self membership (ring/peers.c): list parsing, dns: lists
 * sorted whatever order the resolver answers in, refresh and swap, and lookups racing
 * swaps in a loop (run under ASan: no use-after-free, no leak). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ring/peers.h"
#include "ring/ring.h"

#define N_(a) (sizeof(a) / sizeof((a)[0]))

static void test_peers_parse_lists(void **state)
{
    static const struct {
        const char *spec;
        size_t n;
        const char *names[3];
        unsigned weights[3];
        int down[3];
    } ok[] = {
        {"127.0.0.1:9001,127.0.0.1:9002", 2, {"127.0.0.1:9001", "127.0.0.1:9002"}, {1, 1}, {0, 0}},
        {" a:1 ,  b:2 weight=3 ,c:3 down", 3, {"a:1", "b:2", "c:3"}, {1, 3, 1}, {0, 0, 1}},
        /* exactly the parameters of deploy/scale-out/nginx.conf's server lines */
        {"127.0.0.1:9001 max_fails=1 fail_timeout=10s", 1, {"127.0.0.1:9001"}, {1}, {0}},
        {"gw weight=1000 max_conns=5\tdown", 1, {"gw"}, {1000}, {1}},
        {"unix:/run/gw.sock,[::1]:9000", 2, {"unix:/run/gw.sock", "[::1]:9000"}, {1, 1}, {0, 0}},
    };
    static const struct { const char *spec; const char *err; } bad[] = {
        {"", "entry 1 is empty"},
        {"a:1,,b:2", "entry 2 is empty"},
        {"a:1,", "entry 2 is empty"},
        {"a:1 weight=0", "weight must be 1..1000"},
        {"a:1 weight=1001", "weight must be 1..1000"},
        {"a:1 weight=x", "weight must be 1..1000"},
        {"a:1 weight=", "unknown parameter \"weight=\""},
        {"a:1 weight=-2", "weight must be"},
        {"a:1 backup", "backup is not allowed"},
        {"a:1 resolve", "unknown parameter \"resolve\""},
        {"a:1,b:2,a:1", "\"a:1\" is listed twice"},
    };
    (void)state;
    for (size_t i = 0; i < N_(ok); i++) {
        struct ring_server *sv = NULL;
        size_t n = 0;
        char err[256] = "";
        int rc = peers_parse(ok[i].spec, &sv, &n, err, sizeof(err));
        if (rc != 0)
            fail_msg("\"%s\": %d %s", ok[i].spec, rc, err);
        assert_int_equal(n, ok[i].n);
        for (size_t k = 0; k < n; k++) {
            assert_string_equal(sv[k].name, ok[i].names[k]);
            assert_int_equal(sv[k].weight, ok[i].weights[k]);
            assert_int_equal(sv[k].down, ok[i].down[k]);
        }
        peers_servers_free(sv, n);
    }
    for (size_t i = 0; i < N_(bad); i++) {
        struct ring_server *sv = (struct ring_server *)1;
        size_t n = 7;
        char err[256] = "";
        assert_int_equal(peers_parse(bad[i].spec, &sv, &n, err, sizeof(err)), -EINVAL);
        assert_null(sv);
        assert_int_equal(n, 0);
        if (!strstr(err, bad[i].err))
            fail_msg("\"%s\": error \"%s\" lacks \"%s\"", bad[i].spec, err, bad[i].err);
    }
}

static void test_peers_static_self(void **state)
{
    const char *spec = "127.0.0.1:9001 max_fails=1,127.0.0.1:9002,127.0.0.1:9003 weight=2";
    struct ring_server sv[] = {{"127.0.0.1:9001", 1, 0}, {"127.0.0.1:9002", 1, 0},
                               {"127.0.0.1:9003", 2, 0}};
    struct peers *p = NULL;
    struct ring *r = NULL;
    char err[256], key[64];
    int self_hits = 0;
    (void)state;
    assert_int_equal(peers_new(spec, "127.0.0.1:9002", NULL, &p, err, sizeof(err)), 0);
    assert_int_equal(ring_new(sv, 3, &r), 0);
    for (int i = 0; i < 3000; i++) {
        struct peers_owner o;
        int n = snprintf(key, sizeof(key), "/b/k%d", i);
        int want = ring_owner(r, key, (size_t)n);
        assert_int_equal(peers_owner(p, key, (size_t)n, &o), 0);
        assert_int_equal(o.index, want);
        assert_string_equal(o.name, sv[want].name);
        assert_int_equal(o.is_self, want == 1);
        assert_int_equal(o.generation, 1);
        self_hits += o.is_self;
    }
    assert_true(self_hits > 300 && self_hits < 1500); /* ~1/4 */
    struct peers_stats st;
    peers_stats(p, &st);
    assert_int_equal(st.count, 3);
    assert_int_equal(st.self, 1);
    assert_int_equal(st.generation, 1);
    assert_int_equal(peers_refresh(p), 0); /* static: nothing to resolve */
    peers_free(p);
    ring_free(r);

    /* --self must be one of the entries; no --self: nothing is self */
    assert_int_equal(peers_new(spec, "127.0.0.1:9004", NULL, &p, err, sizeof(err)), -EINVAL);
    assert_null(p);
    assert_non_null(strstr(err, "--self \"127.0.0.1:9004\" is not one of"));
    assert_int_equal(peers_new(spec, NULL, NULL, &p, err, sizeof(err)), 0);
    struct peers_owner o;
    for (int i = 0; i < 200; i++) {
        int n = snprintf(key, sizeof(key), "/k%d", i);
        assert_int_equal(peers_owner(p, key, (size_t)n, &o), 0);
        assert_false(o.is_self);
    }
    peers_free(p);
    assert_int_equal(peers_new("a:1 backup", NULL, NULL, &p, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "backup"));
    peers_free(NULL);
}

/* peers_owner_uri hashes nginx's $uri of the target */
static void test_peers_owner_uri(void **state)
{
    struct peers *p = NULL;
    struct peers_owner a, b;
    char err[256];
    char big[5000];
    (void)state;
    assert_int_equal(peers_new("a:1,b:2,c:3,d:4", "c:3", NULL, &p, err, sizeof(err)), 0);
    const char *t = "/bkt//x/./y/../k%20z?partNumber=3";
    assert_int_equal(peers_owner_uri(p, t, strlen(t), &a), 0);
    assert_int_equal(peers_owner(p, "/bkt/x/k z", 10, &b), 0);
    assert_int_equal(a.index, b.index);
    assert_int_equal(peers_owner_uri(p, "/..", 3, &a), -EINVAL);
    assert_int_equal(a.index, -1);
    /* a target longer than the stack buffer */
    big[0] = '/';
    memset(big + 1, 'q', sizeof(big) - 1);
    assert_int_equal(peers_owner_uri(p, big, sizeof(big), &a), 0);
    assert_int_equal(peers_owner(p, big, sizeof(big), &b), 0);
    assert_int_equal(a.index, b.index);
    peers_free(p);
}

/* --- dns: with a fake resolver ---------------------------------------------------------- */

struct fake_dns {
    pthread_mutex_t mu;
    const char *const *addrs; /* textual IPv4/IPv6 addresses, NULL-terminated */
    int fail;                 /* returned instead when nonzero */
    unsigned calls;
    char last_host[64];
};

static int fake_resolve(void *cls, const char *host, struct sockaddr_storage *out, size_t max,
                        size_t *n)
{
    struct fake_dns *f = cls;
    int rc = 0;
    pthread_mutex_lock(&f->mu);
    f->calls++;
    snprintf(f->last_host, sizeof(f->last_host), "%s", host);
    *n = 0;
    if (f->fail) {
        rc = f->fail;
    } else {
        for (size_t i = 0; f->addrs[i] && *n < max; i++) {
            struct sockaddr_storage *ss = &out[(*n)++];
            memset(ss, 0, sizeof(*ss));
            struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
            struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
            if (inet_pton(AF_INET, f->addrs[i], &s4->sin_addr) == 1) {
                s4->sin_family = AF_INET;
                s4->sin_port = htons(53); /* ignored: the port is --peers' */
            } else {
                assert_int_equal(inet_pton(AF_INET6, f->addrs[i], &s6->sin6_addr), 1);
                s6->sin6_family = AF_INET6;
            }
        }
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static void fake_set(struct fake_dns *f, const char *const *addrs, int fail)
{
    pthread_mutex_lock(&f->mu);
    f->addrs = addrs;
    f->fail = fail;
    pthread_mutex_unlock(&f->mu);
}

static void snap_names(struct peers *p, char *buf, size_t len)
{
    struct peers_snap *s = peers_snap_get(p);
    const struct ring *r = peers_snap_ring(s);
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; r && i < ring_count(r); i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? "," : "", ring_name(r, i));
    peers_snap_put(s);
}

static void test_peers_dns_sorted(void **state)
{
    /* the order DNS answers in, duplicates included */
    static const char *const order1[] = {"fd00::2", "10.0.0.10", "10.0.0.9", "fd00::1", "10.0.0.10",
                                         "192.168.1.1", NULL};
    static const char *const order2[] = {"192.168.1.1", "fd00::1", "10.0.0.9", "fd00::2", "10.0.0.10",
                                         NULL};
    const char *want = "10.0.0.9:9000,10.0.0.10:9000,192.168.1.1:9000,[fd00::1]:9000,[fd00::2]:9000";
    struct fake_dns f = {PTHREAD_MUTEX_INITIALIZER, order1, 0, 0, ""};
    struct peers_opts o = {60000, fake_resolve, &f};
    struct peers *p = NULL, *q = NULL;
    char names[512], err[256];
    struct peers_owner a, b;
    (void)state;
    assert_int_equal(peers_new("dns:s3cached.ns.svc.cluster.local:9000", "[fd00:0::1]:9000", &o, &p,
                               err, sizeof(err)), 0);
    assert_string_equal(f.last_host, "s3cached.ns.svc.cluster.local");
    snap_names(p, names, sizeof(names));
    assert_string_equal(names, want);
    fake_set(&f, order2, 0);
    assert_int_equal(peers_new("dns:s3cached.ns.svc.cluster.local:9000", "10.0.0.10:9000", &o, &q,
                               err, sizeof(err)), 0);
    snap_names(q, names, sizeof(names));
    assert_string_equal(names, want);
    /* both gateways agree on every owner; each knows which one it is */
    for (int i = 0; i < 2000; i++) {
        char key[32];
        int n = snprintf(key, sizeof(key), "/k/%d", i);
        assert_int_equal(peers_owner(p, key, (size_t)n, &a), 0);
        assert_int_equal(peers_owner(q, key, (size_t)n, &b), 0);
        assert_int_equal(a.index, b.index);
        assert_int_equal(a.is_self, a.index == 3);
        assert_int_equal(b.is_self, b.index == 1);
    }
    struct peers_stats st;
    peers_stats(p, &st);
    assert_int_equal(st.self, 3);
    assert_int_equal(st.count, 5);
    assert_int_equal(st.generation, 1);
    /* the same set again in another order: no new ring */
    assert_int_equal(peers_refresh(p), 0);
    peers_stats(p, &st);
    assert_int_equal(st.generation, 1);
    assert_int_equal(st.resolutions, 2);
    peers_free(p);
    peers_free(q);
}

static void test_peers_dns_refresh(void **state)
{
    static const char *const two[] = {"10.0.0.2", "10.0.0.1", NULL};
    static const char *const three_[] = {"10.0.0.3", "10.0.0.2", "10.0.0.1", NULL};
    static const char *const none[] = {NULL};
    struct fake_dns f = {PTHREAD_MUTEX_INITIALIZER, two, -ENOENT, 0, ""};
    struct peers_opts o = {60000, fake_resolve, &f};
    struct peers *p = NULL;
    struct peers_stats st;
    struct peers_owner ow;
    char names[256], err[256];
    (void)state;
    /* the name does not resolve yet (no ready pod): starts empty, lookups say -ENOENT */
    assert_int_equal(peers_new("dns:gw:9000", "10.0.0.3:9000", &o, &p, err, sizeof(err)), 0);
    assert_int_equal(peers_owner(p, "/a", 2, &ow), -ENOENT);
    peers_stats(p, &st);
    assert_int_equal(st.generation, 0);
    assert_int_equal(st.failures, 1);
    assert_int_equal(st.last_error, -ENOENT);
    assert_int_equal(st.self, -1);
    fake_set(&f, two, 0);
    assert_int_equal(peers_refresh(p), 1);
    snap_names(p, names, sizeof(names));
    assert_string_equal(names, "10.0.0.1:9000,10.0.0.2:9000");
    assert_int_equal(peers_owner(p, "/a", 2, &ow), 0);
    assert_false(ow.is_self); /* self is not listed yet */
    assert_int_equal(ow.generation, 1);
    fake_set(&f, three_, 0);
    assert_int_equal(peers_refresh(p), 1);
    peers_stats(p, &st);
    assert_int_equal(st.generation, 2);
    assert_int_equal(st.self, 2);
    /* a failed or empty resolution keeps the last ring */
    fake_set(&f, three_, -EAGAIN);
    assert_int_equal(peers_refresh(p), -EAGAIN);
    fake_set(&f, none, 0);
    assert_int_equal(peers_refresh(p), -ENOENT);
    peers_stats(p, &st);
    assert_int_equal(st.generation, 2);
    assert_int_equal(st.count, 3);
    assert_int_equal(st.failures, 3);
    assert_int_equal(st.last_error, -ENOENT);
    /* a snapshot held across swaps stays whole */
    struct peers_snap *s = peers_snap_get(p);
    fake_set(&f, two, 0);
    assert_int_equal(peers_refresh(p), 1);
    assert_int_equal(peers_snap_generation(s), 2);
    assert_int_equal(ring_count(peers_snap_ring(s)), 3);
    assert_string_equal(ring_name(peers_snap_ring(s), 2), "10.0.0.3:9000");
    assert_int_equal(peers_snap_self(s), 2);
    peers_free(p); /* the snapshot outlives it */
    assert_int_equal(ring_count(peers_snap_ring(s)), 3);
    peers_snap_put(s);
}

static void test_peers_dns_errors(void **state)
{
    static const char *const bad[] = {"dns:", "dns:gw", "dns:gw:", "dns:gw:0", "dns:gw:65536",
                                      "dns::9000", "dns:gw:9x", "dns:a b:9000", "dns:[::1]:9000"};
    struct peers *p = NULL;
    char err[256];
    (void)state;
    for (size_t i = 0; i < N_(bad); i++) {
        err[0] = '\0';
        if (peers_new(bad[i], NULL, NULL, &p, err, sizeof(err)) != -EINVAL)
            fail_msg("%s accepted", bad[i]);
        assert_null(p);
        assert_non_null(strstr(err, "dns:"));
    }
}

/* The real resolver: localhost is in /etc/hosts everywhere these tests run. */
static void test_peers_dns_getaddrinfo(void **state)
{
    struct peers *p = NULL;
    char names[512], err[256];
    (void)state;
    assert_int_equal(peers_new("dns:localhost:9000", "127.0.0.1:9000", NULL, &p, err, sizeof(err)), 0);
    snap_names(p, names, sizeof(names));
    if (!strstr(names, "127.0.0.1:9000"))
        fail_msg("localhost resolved to \"%s\"", names);
    struct peers_stats st;
    peers_stats(p, &st);
    assert_int_equal(st.self, 0); /* IPv4 sorts first */
    peers_free(p);
}

/* --- swaps racing lookups ------------------------------------------------------------------ */

struct race {
    struct peers *p;
    atomic_int stop;
    atomic_ulong lookups;
    atomic_int bad;
};

static void *race_reader(void *arg)
{
    struct race *rc = arg;
    uint64_t last_gen = 0;
    unsigned long n = 0;
    char key[32];
    while (!atomic_load(&rc->stop)) {
        struct peers_owner o;
        int len = snprintf(key, sizeof(key), "/obj/%lu", n);
        if (peers_owner(rc->p, key, (size_t)len, &o) != 0 || o.generation < last_gen ||
            strncmp(o.name, "10.0.", 5) != 0)
            atomic_store(&rc->bad, 1);
        last_gen = o.generation;
        if ((n & 15) == 0) { /* hold a snapshot a little while */
            struct peers_snap *s = peers_snap_get(rc->p);
            const struct ring *r = peers_snap_ring(s);
            size_t cnt = ring_count(r);
            if (cnt != 2 && cnt != 3)
                atomic_store(&rc->bad, 1);
            if (ring_owner(r, key, (size_t)len) < 0 || peers_snap_generation(s) < last_gen)
                atomic_store(&rc->bad, 1);
            peers_snap_put(s);
        }
        n++;
    }
    atomic_fetch_add(&rc->lookups, n);
    return NULL;
}

static void test_peers_swap_under_lookups(void **state)
{
    static const char *const a[] = {"10.0.0.1", "10.0.0.2", NULL};
    static const char *const b[] = {"10.0.0.3", "10.0.0.1", "10.0.0.2", NULL};
    struct fake_dns f = {PTHREAD_MUTEX_INITIALIZER, a, 0, 0, ""};
    /* the refresher also runs, every millisecond, alongside the explicit refreshes */
    struct peers_opts o = {1, fake_resolve, &f};
    struct race rc;
    pthread_t th[4];
    char err[256];
    struct peers_stats st;
    (void)state;
    memset(&rc, 0, sizeof(rc));
    assert_int_equal(peers_new("dns:gw:9000", "10.0.0.1:9000", &o, &rc.p, err, sizeof(err)), 0);
    for (size_t i = 0; i < N_(th); i++)
        assert_int_equal(pthread_create(&th[i], NULL, race_reader, &rc), 0);
    for (int i = 0; i < 3000; i++) {
        fake_set(&f, (i & 1) ? a : b, 0);
        assert_true(peers_refresh(rc.p) >= 0);
    }
    atomic_store(&rc.stop, 1);
    for (size_t i = 0; i < N_(th); i++)
        pthread_join(th[i], NULL);
    peers_stats(rc.p, &st);
    printf("       %lu lookups during %llu swaps (%llu resolutions, refresher included)\n",
           (unsigned long)atomic_load(&rc.lookups), (unsigned long long)st.generation,
           (unsigned long long)st.resolutions);
    assert_int_equal(atomic_load(&rc.bad), 0);
    assert_true(st.generation >= 3000);
    assert_true(atomic_load(&rc.lookups) > 0);
    peers_free(rc.p); /* joins the refresher */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peers_parse_lists),
        cmocka_unit_test(test_peers_static_self),
        cmocka_unit_test(test_peers_owner_uri),
        cmocka_unit_test(test_peers_dns_sorted),
        cmocka_unit_test(test_peers_dns_refresh),
        cmocka_unit_test(test_peers_dns_errors),
        cmocka_unit_test(test_peers_dns_getaddrinfo),
        cmocka_unit_test(test_peers_swap_under_lookups),
    };
    return cmocka_run_group_tests_name("peers", tests, NULL, NULL);
}
