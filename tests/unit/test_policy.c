/*
 * test_policy.c: the keep policy (cache/policy.c, evict.c). First the bookkeeping alone, with
 * made-up clocks: rules (parsing, longest match, admin set), the idle bound, epoch-like
 * passes, the automatic switch and its revert. Then the cache against the fake backend, the
 * issue's experiment scaled down (24 objects through a cache of 16): sequential, shuffled and
 * mixed (a training set plus one-off reads) epochs, counting hits and the bytes the backend
 * sent per epoch; LRU beside it as the reference; the automatic switch; and the guarantees
 * kept: the cap, pins, write-back dirty bytes, a new version replacing the old.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "cache/cache.h"
#include "cache/index.h"
#include "cache/plan.h"
#include "cache/policy.h"
#include "fake_backend.h"
#include "lib/conf.h"
#include "lib/s3err.h"
#include "lib/workq.h"
#include "writeback/drain.h"

#define SEC 1000000000LL
#define MIN_NS (60 * SEC)

/* ---- the bookkeeping alone ------------------------------------------------------------- */

struct nm {
    struct index_key k;
};

static struct nm name_of(const char *bucket, const char *key)
{
    struct nm n;
    index_key_make(bucket, key, &n.k);
    return n;
}

static int keeps(struct policy *p, const char *b, const char *k, int64_t now)
{
    struct nm n = name_of(b, k);
    return policy_keeps(p, n.k.b, n.k.len, now, NULL);
}

static void readk(struct policy *p, const char *b, const char *k, uint64_t size, int hit,
                  int64_t now)
{
    struct nm n = name_of(b, k);
    struct policy_read r = { size, size, hit ? size : 0, !hit };
    policy_read(p, n.k.b, n.k.len, &r, now);
}

static void evicted(struct policy *p, const char *b, const char *k)
{
    struct nm n = name_of(b, k);
    policy_evicted(p, n.k.b, n.k.len);
}

static const struct cache_prefix_row *row(struct cache_prefix_row *rows, size_t n,
                                          const char *bucket, const char *prefix)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(rows[i].bucket, bucket) && !strcmp(rows[i].prefix, prefix))
            return &rows[i];
    return NULL;
}

static void test_policy_rules_parse(void **state)
{
    static const struct {
        const char *keep, *lru, *err;
    } cases[] = {
        { "data/train/", "", NULL },
        { " data/train/ , data ,other-bkt/x/y", "data/train/val/", NULL },
        { ",,data/a,", NULL, NULL },
        { "Bad_Bucket/x", "", "--keep-prefix \"Bad_Bucket/x\": \"Bad_Bucket\" is not a valid bucket name" },
        { "data/a", "data/a", "--lru-prefix \"data/a\": given twice" },
        { "data/a,data/a", "", "--keep-prefix \"data/a\": given twice" },
        { "/x", "", "--keep-prefix \"/x\": \"\" is not a valid bucket name" },
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct policy *p = NULL;
        struct errmsg em = { "" };
        int rc = policy_new(cases[i].keep, cases[i].lru, 1, 60000, 0, &p, &em);
        if (!cases[i].err) {
            assert_int_equal(rc, 0);
            policy_free(p);
            continue;
        }
        assert_int_equal(rc, -EINVAL);
        if (strncmp(em.buf, cases[i].err, strlen(cases[i].err)))
            fail_msg("case %zu: got \"%s\", want it to start \"%s\"", i, em.buf, cases[i].err);
    }
    /* too many rules */
    char *big = calloc(1, 64 * (POLICY_RULES_MAX + 2));
    for (int i = 0; i <= POLICY_RULES_MAX; i++)
        snprintf(big + strlen(big), 64, "%sbkt/p%d/", i ? "," : "", i);
    struct policy *p = NULL;
    struct errmsg em = { "" };
    assert_int_equal(policy_new(big, "", 1, 60000, 0, &p, &em), -EINVAL);
    assert_non_null(strstr(em.buf, "at most"));
    free(big);
}

/* The longest rule wins; everything else is LRU; a rule protects only while read. */
static void test_policy_match_and_idle(void **state)
{
    (void)state;
    struct policy *p = NULL;
    assert_int_equal(policy_new("data/train/,other", "data/train/val/", 0, 60000, 0, &p, NULL),
                     0);
    int64_t t = 1 * SEC;
    assert_true(keeps(p, "data", "train/a/b.jpg", t));
    assert_false(keeps(p, "data", "train/val/x", t));     /* the longer lru rule */
    assert_false(keeps(p, "data", "test/x", t));          /* no rule: LRU */
    assert_true(keeps(p, "other", "anything", t));        /* a whole bucket */
    assert_false(keeps(p, "otherx", "anything", t));
    /* a rule protects for the idle bound from its creation, then only while read */
    assert_false(keeps(p, "data", "train/a", 61 * SEC));
    readk(p, "data", "train/a", 100, 0, 61 * SEC);
    assert_true(keeps(p, "data", "train/zzz", 61 * SEC + 1));
    assert_true(keeps(p, "data", "train/zzz", 121 * SEC));
    assert_false(keeps(p, "data", "train/zzz", 122 * SEC));
    /* a request's start counts as use (the first miss after a pause must not evict its own) */
    struct nm n = name_of("data", "train/q");
    policy_touch(p, n.k.b, n.k.len, 200 * SEC);
    assert_true(keeps(p, "data", "train/a", 200 * SEC));
    /* admin: keep for a new prefix, lru over a keep one, auto drops the rule */
    uint64_t g0 = policy_gen(p);
    struct errmsg em = { "" };
    assert_int_equal(policy_set(p, "data", "test/", "keep", 200 * SEC, &em), 0);
    assert_true(keeps(p, "data", "test/x", 201 * SEC));
    assert_int_equal(policy_set(p, "data", "train/", "lru", 201 * SEC, &em), 0);
    assert_false(keeps(p, "data", "train/a", 201 * SEC));
    assert_int_equal(policy_set(p, "data", "test/", "auto", 202 * SEC, &em), 0);
    assert_false(keeps(p, "data", "test/x", 202 * SEC));
    assert_true(policy_gen(p) > g0);
    assert_int_equal(policy_set(p, "data", "x/", "fifo", 0, &em), -EINVAL);
    assert_non_null(strstr(em.buf, "keep, lru or auto"));
    assert_int_equal(policy_set(p, "NO", "x/", "keep", 0, &em), -S3E_INVALID_BUCKET_NAME);
    char longp[600];
    memset(longp, 'a', sizeof(longp) - 1);
    longp[sizeof(longp) - 1] = 0;
    assert_int_equal(policy_set(p, "data", longp, "keep", 0, &em), -EINVAL);
    struct cache_prefix_row *rows;
    size_t nr;
    assert_int_equal(policy_report(p, 203 * SEC, &rows, &nr), 0);
    const struct cache_prefix_row *r = row(rows, nr, "data", "train/");
    assert_non_null(r);
    assert_string_equal(r->policy, "lru");
    assert_string_equal(r->source, "admin");
    r = row(rows, nr, "other", "");
    assert_non_null(r);
    assert_string_equal(r->policy, "keep");
    assert_string_equal(r->source, "config");
    assert_null(row(rows, nr, "data", "test/"));
    free(rows);
    policy_free(p);
}

/* Passes: in order and shuffled, a pass is an epoch; a re-read soon after stays in it. */
static void test_policy_passes(void **state)
{
    (void)state;
    struct policy *p = NULL;
    assert_int_equal(policy_new("dset", "", 0, 60000, 0, &p, NULL), 0);
    char k[32];
    int64_t t = SEC;
    /* epoch 1, in order, with a second ranged read of each object right after the first */
    for (int i = 0; i < 24; i++) {
        snprintf(k, sizeof(k), "s/%02d", i);
        readk(p, "dset", k, 1000, 0, t++);
        readk(p, "dset", k, 1000, 1, t++);
    }
    /* epochs 2 and 3: 16 hits of 24 */
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < 24; i++) {
            snprintf(k, sizeof(k), "s/%02d", i);
            readk(p, "dset", k, 1000, i < 16, t++);
        }
    struct cache_prefix_row *rows;
    size_t nr;
    assert_int_equal(policy_report(p, t, &rows, &nr), 0);
    const struct cache_prefix_row *r = row(rows, nr, "dset", "");
    assert_non_null(r);
    assert_int_equal(r->passes, 2);
    assert_int_equal(r->last.objects, 24);
    assert_int_equal(r->last.reads, 24);
    assert_int_equal(r->last.hits, 16);
    assert_int_equal(r->last.working_set_bytes, 24000);
    assert_int_equal(r->last.hit_bytes, 16000);
    assert_int_equal(r->cur.objects, 24);
    free(rows);
    /* shuffled epochs: a pass holds (almost) an epoch each time */
    unsigned seed = 7;
    int order[24];
    for (int i = 0; i < 24; i++)
        order[i] = i;
    uint64_t passes0 = 0;
    assert_int_equal(policy_report(p, t, &rows, &nr), 0);
    passes0 = row(rows, nr, "dset", "")->passes;
    free(rows);
    for (int e = 0; e < 6; e++) {
        for (int i = 23; i > 0; i--) {
            int j = (int)(rand_r(&seed) % (unsigned)(i + 1)), x = order[i];
            order[i] = order[j];
            order[j] = x;
        }
        for (int i = 0; i < 24; i++) {
            snprintf(k, sizeof(k), "s/%02d", order[i]);
            readk(p, "dset", k, 1000, 0, t++);
        }
    }
    assert_int_equal(policy_report(p, t, &rows, &nr), 0);
    r = row(rows, nr, "dset", "");
    assert_int_equal(r->passes - passes0, 6);
    assert_true(r->last.objects >= 20 && r->last.objects <= 24);
    free(rows);
    policy_free(p);
}

/* Without a rule, a directory whose misses re-read evicted objects switches to keep, and is
 * LRU again once idle; one-off reads never switch. */
static void test_policy_auto_switch(void **state)
{
    (void)state;
    struct policy *p = NULL;
    assert_int_equal(policy_new("", "bkt/pinned-lru/", 1, 60000, 0, &p, NULL), 0);
    char k[32];
    int64_t t = SEC;
    /* pass 1: 24 cold misses, LRU evicts the first 8 as 17.. come in */
    for (int i = 0; i < 24; i++) {
        snprintf(k, sizeof(k), "ep/%02d", i);
        readk(p, "bkt", k, 1000, 0, t++);
        if (i >= 16) {
            snprintf(k, sizeof(k), "ep/%02d", i - 16);
            evicted(p, "bkt", k);
        }
        snprintf(k, sizeof(k), "once/%03d", i);
        readk(p, "bkt", k, 1000, 0, t++);
        evicted(p, "bkt", k); /* one-offs get evicted too */
    }
    assert_false(keeps(p, "bkt", "ep/00", t));
    /* pass 2: 7 misses of evicted objects: not yet */
    for (int i = 0; i < 7; i++) {
        snprintf(k, sizeof(k), "ep/%02d", i);
        readk(p, "bkt", k, 1000, 0, t++);
    }
    assert_false(keeps(p, "bkt", "ep/00", t));
    snprintf(k, sizeof(k), "ep/%02d", 7);
    readk(p, "bkt", k, 1000, 0, t++);
    assert_true(keeps(p, "bkt", "ep/00", t));
    assert_false(keeps(p, "bkt", "once/000", t)); /* never re-read: LRU */
    /* an lru rule is never switched */
    for (int i = 0; i < 40; i++) {
        snprintf(k, sizeof(k), "pinned-lru/%02d", i % 20);
        readk(p, "bkt", k, 1000, 0, t++);
        evicted(p, "bkt", k);
    }
    assert_false(keeps(p, "bkt", "pinned-lru/00", t));
    struct cache_prefix_row *rows;
    size_t nr;
    assert_int_equal(policy_report(p, t, &rows, &nr), 0);
    const struct cache_prefix_row *r = row(rows, nr, "bkt", "ep/");
    assert_non_null(r);
    assert_string_equal(r->policy, "keep");
    assert_string_equal(r->source, "auto");
    assert_true(r->keep_active);
    assert_int_equal(r->thrash, 8);
    r = row(rows, nr, "bkt", "once/");
    assert_string_equal(r->policy, "lru");
    assert_string_equal(r->source, "default");
    free(rows);
    /* idle past the bound: LRU again, and the next read does not bring keep back */
    t += 61 * SEC;
    uint64_t g0 = policy_gen(p);
    assert_false(keeps(p, "bkt", "ep/00", t));
    assert_true(policy_gen(p) > g0);
    readk(p, "bkt", "ep/00", 1000, 0, t);
    assert_false(keeps(p, "bkt", "ep/00", t));
    policy_free(p);
}

/* At most POLICY_GROUPS_MAX directories are followed; the oldest goes, a keep one in use stays. */
static void test_policy_groups_bounded(void **state)
{
    (void)state;
    struct policy *p = NULL;
    assert_int_equal(policy_new("", "", 1, 60000, 0, &p, NULL), 0);
    char k[64];
    int64_t t = SEC;
    for (int i = 0; i < 9; i++) { /* dir "hot/" switched to keep */
        snprintf(k, sizeof(k), "hot/%d", i);
        evicted(p, "bkt", k);
        readk(p, "bkt", k, 10, 0, t++);
    }
    assert_true(keeps(p, "bkt", "hot/0", t));
    for (int i = 0; i < 3 * POLICY_GROUPS_MAX; i++) {
        snprintf(k, sizeof(k), "d%04d/x", i);
        readk(p, "bkt", k, 10, 0, t++);
    }
    struct cache_prefix_row *rows;
    size_t nr;
    assert_int_equal(policy_report(p, t, &rows, &nr), 0);
    assert_int_equal(nr, POLICY_GROUPS_MAX);
    assert_non_null(row(rows, nr, "bkt", "hot/"));
    assert_non_null(row(rows, nr, "bkt", "d0767/"));
    assert_null(row(rows, nr, "bkt", "d0000/"));
    assert_true(rows[0].idle_s <= rows[nr - 1].idle_s); /* most recent first */
    free(rows);
    policy_free(p);
}

/* ---- the cache against the fake backend ------------------------------------------------ */

#define BS (64u << 10)
#define OBJ (4 * (uint64_t)BS)         /* each object: 4 blocks */
#define NOBJ 24
#define CAP (16 * OBJ)                 /* the cache holds 16 of the 24 */
#define DATA ((uint64_t)NOBJ * OBJ)

struct env {
    char dir[256];
    struct conf cf;
    struct fake_be *fb;
    struct workq *wq;
    struct cache *c;
    struct drain *dr; /* the write-back engine over c */
};

struct twaiter {
    struct cache_waiter w;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned suspended, resumed;
};

static void tw_suspend(void *cls)
{
    struct twaiter *t = cls;
    pthread_mutex_lock(&t->mu);
    t->suspended++;
    pthread_mutex_unlock(&t->mu);
}

static void tw_resume(void *cls)
{
    struct twaiter *t = cls;
    pthread_mutex_lock(&t->mu);
    t->resumed++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void tw_wait(struct twaiter *t)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    pthread_mutex_lock(&t->mu);
    while (t->resumed < t->suspended)
        if (pthread_cond_timedwait(&t->cv, &t->mu, &dl) == ETIMEDOUT)
            break;
    unsigned s = t->suspended, r = t->resumed;
    pthread_mutex_unlock(&t->mu);
    assert_int_equal(s, r);
}

static int setup_conf(void **state, const char *keep, int auto_on)
{
    struct env *e = calloc(1, sizeof(*e));
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_policy.XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    e->cf.cache_dir = e->dir;
    e->cf.cache_size = CAP;
    e->cf.block_size = BS;
    e->cf.readahead = 0;
    e->cf.revalidate_never = 1;
    e->cf.revalidate_after = 0;
    e->cf.keep_prefix = keep ? strdup(keep) : NULL;
    e->cf.keep_auto = auto_on;
    e->cf.keep_idle = 15 * 60 * 1000;
    e->cf.plan_requests = 8;
    e->cf.plan_ahead = 1u << 30;
    e->cf.plan_idle = 10 * 60 * 1000;
    e->fb = fake_be_new();
    assert_int_equal(workq_new(8, &e->wq), 0);
    struct errmsg em = { "" };
    int rc = cache_open(&e->cf, &e->fb->be, e->wq, &e->c, &em);
    if (rc)
        fprintf(stderr, "cache_open: %s\n", em.buf);
    assert_int_equal(rc, 0);
    assert_int_equal(drain_open(&e->cf, e->c, &e->fb->be, &e->dr, &em), 0);
    char key[64];
    for (int i = 0; i < NOBJ; i++) {
        snprintf(key, sizeof(key), "train/%02d", i);
        fake_be_put_gen(e->fb, "dset", key, OBJ - (uint64_t)i * 7, 100 + (uint64_t)i);
        snprintf(key, sizeof(key), "lru/%02d", i);
        fake_be_put_gen(e->fb, "dset", key, OBJ - (uint64_t)i * 7, 200 + (uint64_t)i);
    }
    *state = e;
    return 0;
}

static int setup_keep(void **state) { return setup_conf(state, "dset/train/", 0); }
static int setup_auto(void **state) { return setup_conf(state, NULL, 1); }
static int setup_lru(void **state) { return setup_conf(state, NULL, 0); }

static int teardown(void **state)
{
    struct env *e = *state;
    assert_int_equal(drain_close(e->dr), 0);
    cache_close(e->c);
    workq_free(e->wq);
    fake_be_free(e->fb);
    free(e->cf.keep_prefix);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->dir);
    assert_int_equal(system(cmd), 0);
    free(e);
    return 0;
}

static __thread int concurrent;

static void settle(struct cache *c)
{
    for (int i = 0; i < 10000 && cache_busy(c); i++)
        usleep(1000);
    assert_int_equal(cache_busy(c), 0);
}

/* GETs (@bucket, @key) whole like the gateway: fd when all present, else streaming. Checks the
 * bytes against seed @seed. Returns the outcome. */
static enum cache_outcome get(struct env *e, const char *bucket, const char *key, uint64_t seed)
{
    struct cache_obj *o;
    struct twaiter tw;
    const struct be_meta *m;
    enum cache_outcome how;
    memset(&tw, 0, sizeof(tw));
    tw.w.suspend = tw_suspend;
    tw.w.resume = tw_resume;
    tw.w.cls = &tw;
    pthread_mutex_init(&tw.mu, NULL);
    pthread_cond_init(&tw.cv, NULL);
    assert_int_equal(cache_obj_get(e->c, bucket, key, &o), 0);
    int rc;
    while ((rc = cache_obj_meta(o, &tw.w, &m, &how)) == -EAGAIN)
        tw_wait(&tw);
    assert_int_equal(rc, 0);
    uint64_t size = m->size;
    unsigned char *buf = malloc(size ? size : 1);
    int fd = -1;
    rc = cache_obj_open_range(o, 0, size, &fd);
    if (rc == 0) {
        uint64_t got = 0;
        while (got < size) {
            ssize_t n = pread(fd, buf + got, size - got, (off_t)got);
            assert_true(n > 0);
            got += (uint64_t)n;
        }
        close(fd);
    } else {
        assert_int_equal(rc, -EAGAIN);
        uint64_t pos = 0;
        while (pos < size) {
            ssize_t n = cache_obj_read(o, pos, buf + pos, (size_t)(size - pos), &tw.w);
            if (n == -EAGAIN) {
                tw_wait(&tw);
                continue;
            }
            assert_true(n > 0);
            pos += (uint64_t)n;
        }
    }
    for (uint64_t i = 0; i < size; i++)
        if (buf[i] != fake_byte(seed, i))
            fail_msg("%s/%s: byte %llu differs", bucket, key, (unsigned long long)i);
    free(buf);
    how = cache_obj_outcome(o);
    if (!concurrent)
        settle(e->c);
    cache_obj_release(o);
    pthread_mutex_destroy(&tw.mu);
    pthread_cond_destroy(&tw.cv);
    return how;
}

static uint64_t be_bytes(struct env *e)
{
    pthread_mutex_lock(&e->fb->mu);
    uint64_t b = e->fb->bytes_sent;
    pthread_mutex_unlock(&e->fb->mu);
    return b;
}

static uint64_t used(struct env *e)
{
    struct cache_stats st;
    cache_get_stats(e->c, &st);
    return st.used_bytes;
}

static void shuffle(int *order, int n, unsigned *seed)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rand_r(seed) % (unsigned)(i + 1)), x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
}

struct epoch {
    int hits;
    uint64_t backend;
};

/* One epoch over @dir (train or lru) in @order (NULL: in order); after each training read
 * with @oneoffs, a read of a new unrelated object. Checks the cap after every read. */
static struct epoch epoch(struct env *e, const char *dir, const int *order, int oneoffs)
{
    static int oneoff_seq;
    struct epoch ep = { 0, be_bytes(e) };
    char key[64];
    for (int n = 0; n < NOBJ; n++) {
        int i = order ? order[n] : n;
        snprintf(key, sizeof(key), "%s/%02d", dir, i);
        uint64_t seed = (strcmp(dir, "train") ? 200 : 100) + (uint64_t)i;
        ep.hits += get(e, "dset", key, seed) == CACHE_HIT;
        assert_true(used(e) <= CAP);
        if (oneoffs) {
            snprintf(key, sizeof(key), "misc/once-%05d", oneoff_seq++);
            fake_be_put_gen(e->fb, "dset", key, OBJ, 9000 + (uint64_t)oneoff_seq);
            assert_int_equal(get(e, "dset", key, 9000 + (uint64_t)oneoff_seq), CACHE_MISS);
            assert_true(used(e) <= CAP);
        }
    }
    ep.backend = be_bytes(e) - ep.backend;
    return ep;
}

/* The bound: from epoch 2, hits >= 95 % of cache/data and the backend sends at most
 * (data - cache) x 1.05. */
static void check_keep_epoch(const char *what, int e, struct epoch ep, uint64_t oneoff_bytes)
{
    uint64_t bound = (DATA - CAP) + (DATA - CAP) / 20 + oneoff_bytes;
    int want = (int)((NOBJ * CAP * 95 + DATA * 100 - 1) / (DATA * 100)); /* ceil(0.95*16) = 16 */
    printf("       # %s epoch %d: %d of %d hits, backend %llu KiB (bound %llu)\n", what, e + 1,
           ep.hits, NOBJ, (unsigned long long)(ep.backend >> 10),
           (unsigned long long)(bound >> 10));
    if (e == 0)
        return;
    if (ep.hits < want)
        fail_msg("%s epoch %d: %d hits, want >= %d", what, e + 1, ep.hits, want);
    if (ep.backend > bound)
        fail_msg("%s epoch %d: backend sent %llu bytes, bound %llu", what, e + 1,
                 (unsigned long long)ep.backend, (unsigned long long)bound);
}

static void test_policy_keep_sequential(void **state)
{
    struct env *e = *state;
    for (int i = 0; i < 4; i++)
        check_keep_epoch("in order", i, epoch(e, "train", NULL, 0), 0);
    /* LRU beside it (no rule): in order over a set larger than the cache, LRU hits nothing.
     * The keep set is in use, so the LRU objects evict each other first. */
    for (int i = 0; i < 3; i++) {
        struct epoch ep = epoch(e, "lru", NULL, 0);
        printf("       # lru epoch %d: %d of %d hits\n", i + 1, ep.hits, NOBJ);
        assert_int_equal(ep.hits, 0);
    }
    struct cache_policy_report rep;
    assert_int_equal(cache_policy_report(e->c, &rep), 0);
    const struct cache_prefix_row *r = row(rep.rows, rep.n, "dset", "train/");
    assert_non_null(r);
    assert_string_equal(r->policy, "keep");
    assert_true(r->passes >= 3);
    assert_int_equal(r->last.objects, NOBJ);
    assert_int_equal(r->last.hits, 16);
    assert_true(r->ideal > 0.66 && r->ideal < 0.67);
    assert_true((double)r->last.hit_bytes / (double)r->last.bytes >= 0.95 * r->ideal);
    cache_policy_report_free(&rep);
}

static void test_policy_keep_shuffled(void **state)
{
    struct env *e = *state;
    int order[NOBJ];
    unsigned seed = 4242;
    for (int i = 0; i < NOBJ; i++)
        order[i] = i;
    for (int i = 0; i < 4; i++) {
        shuffle(order, NOBJ, &seed);
        check_keep_epoch("shuffled", i, epoch(e, "train", order, 0), 0);
    }
}

/* A training set plus a one-off read after each of its reads: the one-offs evict each other
 * (and, when nothing else is left, one keep object at a time), the training set keeps all but
 * about one object's room. */
static void test_policy_keep_mixed(void **state)
{
    struct env *e = *state;
    int order[NOBJ];
    unsigned seed = 99;
    for (int i = 0; i < NOBJ; i++)
        order[i] = i;
    for (int i = 0; i < 4; i++) {
        shuffle(order, NOBJ, &seed);
        struct epoch ep = epoch(e, "train", i % 2 ? order : NULL, 1);
        uint64_t oneoffs = (uint64_t)NOBJ * OBJ;
        printf("       # mixed epoch %d: %d of %d training hits, backend %llu KiB\n", i + 1,
               ep.hits, NOBJ, (unsigned long long)(ep.backend >> 10));
        if (i == 0)
            continue;
        /* the training set holds at least 14 of its 16 places */
        if (ep.hits < 14)
            fail_msg("mixed epoch %d: %d training hits, want >= 14", i + 1, ep.hits);
        if (ep.backend > (DATA - CAP + 2 * OBJ) * 21 / 20 + oneoffs)
            fail_msg("mixed epoch %d: backend sent %llu", i + 1, (unsigned long long)ep.backend);
    }
}

/* The reference: the same epochs under LRU (no rule, no detection). */
static void test_policy_lru_reference(void **state)
{
    struct env *e = *state;
    int order[NOBJ];
    unsigned seed = 4242;
    for (int i = 0; i < NOBJ; i++)
        order[i] = i;
    int seq = 0, shuf = 0;
    for (int i = 0; i < 3; i++) {
        struct epoch ep = epoch(e, "train", NULL, 0);
        if (i)
            seq += ep.hits;
    }
    for (int i = 0; i < 3; i++) {
        shuffle(order, NOBJ, &seed);
        struct epoch ep = epoch(e, "train", order, 0);
        if (i)
            shuf += ep.hits;
    }
    printf("       # LRU: in order %d hits over epochs 2-3, shuffled %d (keep: 32 each)\n", seq,
           shuf);
    assert_int_equal(seq, 0);
    assert_true(shuf < 32);
    struct cache_policy_report rep;
    assert_int_equal(cache_policy_report(e->c, &rep), 0);
    const struct cache_prefix_row *r = row(rep.rows, rep.n, "dset", "train/");
    assert_non_null(r);
    assert_string_equal(r->policy, "lru"); /* no detection: stays LRU */
    cache_policy_report_free(&rep);
}

/* A read plan per epoch (this epoch's order, then the next one's, as examples/plan_loader.py
 * posts it), the set 1.5x the cache, LRU otherwise: eviction by next use keeps 16 of the 24 (at
 * least) from epoch 2, where LRU keeps fewer (test_policy_lru_reference) and keep 16. */
static void test_plan_belady_shuffled(void **state)
{
    struct env *e = *state;
    struct plans *pl = cache_plans(e->c);
    assert_non_null(pl);
    int order[2][NOBJ];
    unsigned seed = 4242;
    for (int i = 0; i < NOBJ; i++)
        order[0][i] = order[1][i] = i;
    shuffle(order[0], NOBJ, &seed);
    char key[64];
    for (int ep = 0; ep < 6; ep++) {
        int *now = order[ep % 2], *next = order[(ep + 1) % 2];
        memcpy(next, now, sizeof(order[0]));
        shuffle(next, NOBJ, &seed);
        char **keys = calloc(2 * NOBJ, sizeof(char *));
        for (int i = 0; i < 2 * NOBJ; i++) {
            snprintf(key, sizeof(key), "train/%02d", i < NOBJ ? now[i] : next[i - NOBJ]);
            keys[i] = strdup(key);
        }
        char id[24];
        const char *why;
        assert_int_equal(plans_put(pl, "o", "rank-0", "dset", keys, NULL, 2 * NOBJ,
                                   s3c_real_ns(), id, &why), 0);
        struct epoch r = { 0, be_bytes(e) };
        for (int n = 0; n < NOBJ; n++) {
            struct plan_tok tok;
            snprintf(key, sizeof(key), "train/%02d", now[n]);
            plans_read(pl, "o", "dset", key, s3c_real_ns(), &tok);
            assert_true(tok.seq != 0);
            enum cache_outcome how = get(e, "dset", key, 100 + (uint64_t)now[n]);
            plans_read_done(pl, &tok, how == CACHE_HIT, how == CACHE_COALESCED);
            r.hits += how == CACHE_HIT;
            assert_true(used(e) <= CAP);
        }
        r.backend = be_bytes(e) - r.backend;
        printf("       # plan epoch %d: %d of %d hits, backend %llu KiB\n", ep + 1, r.hits, NOBJ,
               (unsigned long long)(r.backend >> 10));
        if (ep > 0 && r.hits < 16)
            fail_msg("plan epoch %d: %d hits, want >= 16", ep + 1, r.hits);
    }
    struct plans_totals t;
    plans_totals(pl, &t);
    assert_int_equal(t.plans, 1); /* each epoch's plan replaced the one before */
    assert_true(t.reads >= NOBJ && t.hits >= 16);
}

/* No rule: LRU thrashes for a pass, the detection switches the directory, and from then on it
 * is as good as a rule. */
static void test_policy_auto_detects(void **state)
{
    struct env *e = *state;
    int switched_at = -1;
    for (int i = 0; i < 5; i++) {
        struct epoch ep = epoch(e, "train", NULL, 0);
        struct cache_policy_report rep;
        assert_int_equal(cache_policy_report(e->c, &rep), 0);
        const struct cache_prefix_row *r = row(rep.rows, rep.n, "dset", "train/");
        printf("       # auto epoch %d: %d hits, backend %llu KiB, policy %s (%s)\n", i + 1,
               ep.hits, (unsigned long long)(ep.backend >> 10), r->policy, r->source);
        if (switched_at < 0 && !strcmp(r->policy, "keep")) {
            assert_string_equal(r->source, "auto");
            switched_at = i;
        }
        cache_policy_report_free(&rep);
        if (switched_at >= 0 && i >= switched_at + 2)
            check_keep_epoch("auto", i, ep, 0);
    }
    if (switched_at < 0 || switched_at > 1)
        fail_msg("switched at epoch %d, want 1 or 2", switched_at + 1);
}

/* Under keep, the other guarantees hold: a pinned object stays, a write-back object is taken
 * (evicting keep objects, never refused), a new version replaces the old, the cap holds. */
static void test_policy_keep_guarantees(void **state)
{
    struct env *e = *state;
    fake_be_put_gen(e->fb, "dset", "other/pinned", OBJ, 5);
    assert_int_equal(get(e, "dset", "other/pinned", 5), CACHE_MISS);
    assert_int_equal(cache_pin(e->c, "dset", "other/pinned", 1), 0);
    for (int i = 0; i < 3; i++)
        epoch(e, "train", NULL, 1);
    assert_int_equal(get(e, "dset", "other/pinned", 5), CACHE_HIT);
    assert_true(used(e) <= CAP);
    /* write-back: the cache is full of keep objects; the dirty one is still taken */
    for (int i = 0; i < 4; i++) {
        char path[4096], key[32];
        int fd;
        assert_int_equal(cache_stage_open(e->c, &fd, path), 0);
        unsigned char *buf = malloc(OBJ);
        for (uint64_t b = 0; b < OBJ; b++)
            buf[b] = fake_byte(777 + (uint64_t)i, b);
        assert_int_equal(write(fd, buf, OBJ), (ssize_t)OBJ);
        free(buf);
        fsync(fd);
        close(fd);
        struct be_meta m;
        memset(&m, 0, sizeof(m));
        m.size = OBJ;
        snprintf(m.etag, sizeof(m.etag), "\"dirty%d\"", i);
        snprintf(key, sizeof(key), "train/dirty%d", i);
        assert_int_equal(cache_adopt_dirty(e->c, "dset", key, path, &m), 0);
        assert_true(used(e) <= CAP);
    }
    struct drain_flush_result fr;
    assert_int_equal(drain_flush(e->dr, NULL, NULL, 10000, &fr), 0);
    pthread_mutex_lock(&e->fb->mu);
    assert_int_equal(e->fb->n_put, 4); /* each uploaded once */
    pthread_mutex_unlock(&e->fb->mu);
    struct cache_stats st;
    cache_get_stats(e->c, &st);
    assert_int_equal(st.pinned_objects, 1);
    /* a new version of a kept object replaces the old one (its blocks freed) */
    char kept[32] = "";
    for (int i = 15; i >= 0 && !kept[0]; i--) {
        snprintf(kept, sizeof(kept), "train/%02d", i);
        if (get(e, "dset", kept, 100 + (uint64_t)i) != CACHE_HIT)
            kept[0] = 0;
    }
    assert_true(kept[0] != 0);
    uint64_t before = used(e);
    char path[4096];
    int fd;
    assert_int_equal(cache_stage_open(e->c, &fd, path), 0);
    unsigned char *buf = malloc(OBJ);
    for (uint64_t b = 0; b < OBJ; b++)
        buf[b] = fake_byte(555, b);
    assert_int_equal(write(fd, buf, OBJ), (ssize_t)OBJ);
    free(buf);
    fsync(fd);
    close(fd);
    struct be_meta m;
    memset(&m, 0, sizeof(m));
    m.size = OBJ;
    snprintf(m.etag, sizeof(m.etag), "\"v2\"");
    fake_be_put_gen(e->fb, "dset", kept, OBJ, 555);
    assert_int_equal(cache_adopt(e->c, "dset", kept, path, &m), 0);
    settle(e->c);
    assert_int_equal(get(e, "dset", kept, 555), CACHE_HIT);
    assert_true(used(e) <= before + OBJ); /* the old version's bytes went */
    assert_true(used(e) <= CAP);
}

struct par {
    struct env *e;
    unsigned seed;
    int rounds;
};

static void *par_reader(void *arg)
{
    struct par *pp = arg;
    concurrent = 1;
    char key[32];
    for (int r = 0; r < pp->rounds; r++) {
        int i = (int)(rand_r(&pp->seed) % NOBJ);
        snprintf(key, sizeof(key), "train/%02d", i);
        get(pp->e, "dset", key, 100 + (uint64_t)i);
        snprintf(key, sizeof(key), "lru/%02d", i);
        if (rand_r(&pp->seed) % 4 == 0)
            get(pp->e, "dset", key, 200 + (uint64_t)i);
        assert_true(used(pp->e) <= CAP);
    }
    return NULL;
}

/* Four readers at once over the keep set and an LRU set, many rounds: every body right, the
 * cap held; then a sequential epoch is within the bound (the keep set took its room back). */
static void test_policy_keep_concurrent(void **state)
{
    struct env *e = *state;
    pthread_t th[4];
    struct par pp[4];
    for (int i = 0; i < 4; i++) {
        pp[i] = (struct par){ e, 31u * (unsigned)i + 1, 150 };
        assert_int_equal(pthread_create(&th[i], NULL, par_reader, &pp[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    settle(e->c);
    assert_true(used(e) <= CAP);
    struct epoch ep0 = epoch(e, "train", NULL, 0);
    struct epoch ep = epoch(e, "train", NULL, 0);
    printf("       # after the concurrent rounds: %d then %d of %d hits, backend %llu KiB then "
           "%llu KiB\n", ep0.hits, ep.hits, NOBJ, (unsigned long long)(ep0.backend >> 10),
           (unsigned long long)(ep.backend >> 10));
    /* in bytes: runs that found room for one block of four left objects partly cached */
    assert_true(ep.backend <= (DATA - CAP) + (DATA - CAP) / 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_rules_parse),
        cmocka_unit_test(test_policy_match_and_idle),
        cmocka_unit_test(test_policy_passes),
        cmocka_unit_test(test_policy_auto_switch),
        cmocka_unit_test(test_policy_groups_bounded),
        cmocka_unit_test_setup_teardown(test_policy_keep_sequential, setup_keep, teardown),
        cmocka_unit_test_setup_teardown(test_policy_keep_shuffled, setup_keep, teardown),
        cmocka_unit_test_setup_teardown(test_policy_keep_mixed, setup_keep, teardown),
        cmocka_unit_test_setup_teardown(test_policy_lru_reference, setup_lru, teardown),
        cmocka_unit_test_setup_teardown(test_plan_belady_shuffled, setup_lru, teardown),
        cmocka_unit_test_setup_teardown(test_policy_auto_detects, setup_auto, teardown),
        cmocka_unit_test_setup_teardown(test_policy_keep_guarantees, setup_keep, teardown),
        cmocka_unit_test_setup_teardown(test_policy_keep_concurrent, setup_keep, teardown),
    };
    return cmocka_run_group_tests_name("policy", tests, NULL, NULL);
}
