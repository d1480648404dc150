/*
 * test_ratelimit.c: acct/ratelimit.c. The token bucket as a pure calculation on a simulated
 * clock (rl_tb_take): it starts empty, refills at the rate, saves at most the burst (50 ms of
 * rate, at least 16 KiB), lets one grant overdraw it and then says how long to suspend; a
 * connection resumed after that wait is granted at once, and the long-run rate is exact. Then
 * the shared buckets (one per key, the latest rate wins, refunds) and the timer thread that
 * resumes connections (order, cancel, rl_free() firing what is armed), with bounded waits.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "acct/ratelimit.h"
#include "lib/s3c.h"

#define MS 1000000ull
#define SEC 1000000000ull
#define T0 (1000 * SEC) /* any start: the clock is the caller's */

static struct rl_tb tb_new(uint64_t rate)
{
    struct rl_tb tb = {.last_ns = T0};
    rl_tb_set_rate(&tb, rate);
    return tb;
}

static void test_ratelimit_starts_empty_and_refills(void **state)
{
    struct rl_tb tb = tb_new(1000000); /* 1 MB/s */
    uint64_t wait = 0;
    (void)state;
    /* empty at the start: the first byte takes 1 us to come, plus the 1 ms against busy
     * wake-ups */
    assert_int_equal(rl_tb_take(&tb, 65536, T0, &wait), 0);
    assert_int_equal(wait, 1000 + MS);
    /* 1 ms later 1000 bytes are saved: a grant of any size (debt-based: chunks stay large) */
    assert_int_equal(rl_tb_take(&tb, 65536, T0 + MS, &wait), 65536);
    /* the debt (64536 bytes) is paid back first: 64.537 ms + 1 ms */
    wait = 0;
    assert_int_equal(rl_tb_take(&tb, 65536, T0 + MS, &wait), 0);
    assert_int_equal(wait, 64537000 + MS);
    /* resumed 2 ms early: still in debt, told to wait the rest */
    assert_int_equal(rl_tb_take(&tb, 65536, T0 + MS + 64537000 + MS - 2 * MS, &wait), 0);
    assert_true(wait > MS && wait <= 2 * MS + 1000);
}

static void test_ratelimit_burst_cap(void **state)
{
    uint64_t wait = 0;
    (void)state;
    /* 10 s idle at 1 MB/s saves 50 ms of rate (50000 bytes), not 10 MB */
    struct rl_tb tb = tb_new(1000000);
    assert_true(tb.burst == 50000.0);
    assert_int_equal(rl_tb_take(&tb, 1000000, T0 + 10 * SEC, &wait), 1000000);
    assert_int_equal(rl_tb_take(&tb, 1, T0 + 10 * SEC, &wait), 0);
    assert_int_equal(wait, 950001000 + MS); /* (1e6 - 50000 + 1) / 1e6 s + 1 ms */

    /* a slow key still saves 16 KiB: one chunk goes without a wait */
    tb = tb_new(1000);
    assert_true(tb.burst == 16384.0);
    assert_int_equal(rl_tb_take(&tb, 16384, T0 + 100 * SEC, &wait), 16384);
    assert_int_equal(rl_tb_take(&tb, 1, T0 + 100 * SEC, &wait), 0);
    assert_int_equal(wait, MS + MS); /* 1 byte at 1000 B/s, + 1 ms */

    /* a lower rate caps what was saved at the new burst */
    tb = tb_new(10000000);
    assert_int_equal(rl_tb_take(&tb, 1, T0 + SEC, &wait), 1); /* refilled to 500000 */
    rl_tb_set_rate(&tb, 100000);
    assert_true(tb.tokens <= 16384.0);
}

/* A download of @total bytes in @chunk-byte sends at @rate, suspended and resumed at exactly
 * the times the bucket says (what req_throttle() and the timer do): the simulated time it
 * takes, and how often a resumed connection was refused again. */
static uint64_t simulate(uint64_t rate, uint64_t total, size_t chunk, unsigned *refused)
{
    struct rl_tb tb = tb_new(rate);
    uint64_t now = T0, sent = 0;
    int resumed = 0;
    *refused = 0;
    while (sent < total) {
        uint64_t wait = 0;
        size_t want = (size_t)S3C_MIN((uint64_t)chunk, total - sent);
        size_t got = rl_tb_take(&tb, want, now, &wait);
        if (got) {
            sent += got;
            resumed = 0;
            continue;
        }
        *refused += resumed;
        assert_true(wait > 0 && wait < 60 * SEC);
        now += wait; /* the timer resumes the connection */
        resumed = 1;
    }
    return now - T0;
}

static void test_ratelimit_suspend_resume_timing(void **state)
{
    static const struct { uint64_t rate, total; size_t chunk; } cases[] = {
        {10000000, 100000000, 262144}, /* 10 MB/s, 100 MB in 256 KiB sends */
        {1000000, 20000000, 65536},
        {100000, 2000000, 16384},
        {50000000, 500000000, 1048576},
        {1000, 100000, 4096},          /* below the minimum burst */
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        unsigned refused;
        uint64_t ns = simulate(cases[i].rate, cases[i].total, cases[i].chunk, &refused);
        double want = (double)cases[i].total / (double)cases[i].rate * 1e9;
        double chunks = (double)cases[i].total / (double)cases[i].chunk;
        /* the long-run rate is the limit: at most the +1 ms per suspension over it, and never
         * faster (the last send is granted on credit: the bytes before it came at the rate) */
        double last = (double)cases[i].chunk / (double)cases[i].rate * 1e9;
        if ((double)ns > want + chunks * 1.001e6 + 1e6 || (double)ns < want - last)
            fail_msg("case %zu: %llu bytes at %llu B/s took %.3f s, want %.3f s", i,
                     (unsigned long long)cases[i].total, (unsigned long long)cases[i].rate,
                     (double)ns / 1e9, want / 1e9);
        /* a connection resumed when the bucket said is granted at once: no busy wake-ups */
        if (refused)
            fail_msg("case %zu: %u resumes were refused again", i, refused);
    }
}

/* rl_take() until it grants @want (each refusal sleeps its wait, which must stay under
 * @max_wait): the bytes granted, 0 after 100 refusals. */
static size_t take_waiting(struct rl_bucket *b, size_t want, uint64_t max_wait)
{
    for (int i = 0; i < 100; i++) {
        uint64_t wait = 0;
        size_t got = rl_take(b, want, &wait);
        if (got)
            return got;
        assert_true(wait > 0 && wait <= max_wait);
        struct timespec ts = {(time_t)(wait / SEC), (long)(wait % SEC)};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void test_ratelimit_shared_buckets(void **state)
{
    struct rl *rl;
    uint64_t wait = 0;
    (void)state;
    assert_int_equal(rl_new(&rl), 0);
    assert_null(rl_bucket_ref(rl, "k1", 0)); /* no limit, no bucket */
    struct rl_bucket *a = rl_bucket_ref(rl, "k1", 1000);
    struct rl_bucket *b = rl_bucket_ref(rl, "k1", 1000);
    struct rl_bucket *c = rl_bucket_ref(rl, "k2", 1000);
    assert_non_null(a);
    assert_ptr_equal(a, b); /* one bucket per key: a client's connections share the rate */
    assert_ptr_not_equal(a, c);
    /* the first grant comes within a few ms (a bucket starts empty) */
    assert_int_equal(take_waiting(a, 1000000, 3 * MS), 1000000);
    /* b is a: 1 MB of debt at 1000 B/s */
    assert_int_equal(rl_take(b, 1, &wait), 0);
    assert_true(wait > 900 * SEC);
    /* k2 is not in k1's debt */
    assert_int_equal(take_waiting(c, 1000000, 3 * MS), 1000000);
    /* bytes granted but not sent are given back */
    rl_refund(c, 1000000);
    rl_refund(c, 0);
    rl_refund(NULL, 5);
    assert_int_equal(rl_take(c, 10, &wait), 10);
    /* the latest caller's rate wins (a credentials reload): k1's debt now pays back in ~1 ms */
    struct rl_bucket *d = rl_bucket_ref(rl, "k1", 1000000000);
    assert_ptr_equal(d, a);
    assert_int_equal(take_waiting(a, 1, 3 * MS), 1);
    rl_bucket_release(rl, d);
    rl_bucket_release(rl, c);
    rl_bucket_release(rl, b);
    rl_bucket_release(rl, a);
    rl_bucket_release(rl, NULL);
    /* the last release freed it: a new bucket for k1 starts empty at its own rate */
    a = rl_bucket_ref(rl, "k1", 1000);
    assert_int_equal(take_waiting(a, 100, 3 * MS), 100);
    rl_bucket_release(rl, a);
    rl_free(rl);
}

/* ---- the timer thread ------------------------------------------------------------------- */

struct fired {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int order[8];
    unsigned n;
};

struct tmr {
    struct rl_timer t;
    struct fired *f;
    int id;
};

static void on_fire(void *arg)
{
    struct tmr *x = arg;
    pthread_mutex_lock(&x->f->mu);
    if (x->f->n < ARRAY_SIZE(x->f->order))
        x->f->order[x->f->n] = x->id;
    x->f->n++;
    pthread_cond_broadcast(&x->f->cv);
    pthread_mutex_unlock(&x->f->mu);
}

/* Waits (10 s at most) until @n timers fired. */
static unsigned wait_fired(struct fired *f, unsigned n)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    pthread_mutex_lock(&f->mu);
    while (f->n < n && pthread_cond_timedwait(&f->cv, &f->mu, &dl) != ETIMEDOUT)
        ;
    unsigned got = f->n;
    pthread_mutex_unlock(&f->mu);
    return got;
}

static void test_ratelimit_timers(void **state)
{
    struct rl *rl;
    struct fired f = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, 0};
    struct tmr t[4];
    (void)state;
    memset(t, 0, sizeof(t));
    for (int i = 0; i < 4; i++) {
        t[i].f = &f;
        t[i].id = i;
    }
    assert_int_equal(rl_new(&rl), 0);
    /* fired in due order, whatever the order they were armed in */
    rl_timer_arm(rl, &t[0].t, 60 * MS, on_fire, &t[0]);
    rl_timer_arm(rl, &t[1].t, 0, on_fire, &t[1]);
    rl_timer_arm(rl, &t[2].t, 20 * MS, on_fire, &t[2]);
    assert_int_equal(wait_fired(&f, 3), 3);
    assert_int_equal(f.order[0], 1);
    assert_int_equal(f.order[1], 2);
    assert_int_equal(f.order[2], 0);
    assert_int_equal(t[0].t.armed, 0);
    /* a cancelled timer never fires (a connection that went away) */
    rl_timer_arm(rl, &t[3].t, 20 * MS, on_fire, &t[3]);
    rl_timer_cancel(rl, &t[3].t);
    assert_int_equal(t[3].t.armed, 0);
    rl_timer_cancel(rl, &t[3].t); /* twice: harmless */
    /* re-armed after firing; a due one fires while the cancelled one stays quiet */
    rl_timer_arm(rl, &t[1].t, 40 * MS, on_fire, &t[1]);
    assert_int_equal(wait_fired(&f, 4), 4);
    assert_int_equal(f.order[3], 1);
    /* rl_free() fires what is still armed, so no connection stays suspended */
    rl_timer_arm(rl, &t[0].t, 3600 * SEC, on_fire, &t[0]);
    rl_free(rl);
    assert_int_equal(f.n, 5);
    assert_int_equal(f.order[4], 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ratelimit_starts_empty_and_refills),
        cmocka_unit_test(test_ratelimit_burst_cap),
        cmocka_unit_test(test_ratelimit_suspend_resume_timing),
        cmocka_unit_test(test_ratelimit_shared_buckets),
        cmocka_unit_test(test_ratelimit_timers),
    };
    return cmocka_run_group_tests_name("ratelimit", tests, NULL, NULL);
}
