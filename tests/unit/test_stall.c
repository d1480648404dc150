/*
 * test_stall.c: unit tests of acct/stall.c: a GET's waits charged by cause to both its rows,
 * the split of a wait into queue and the rest, waits and transfers in progress counted up to
 * the moment of a view, the 10 s and 60 s windows over 1 Hz samples, folding a row into
 * another without a jump in its windows, the verdict's table, and rows charged by many
 * threads at once while read (totals exact, no view ever out of range).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acct/stall.h"
#include "lib/buf.h"
#include "lib/json.h"
#include "lib/s3c.h"

#define MS 1000000ull
#define SEC 1000000000ull
#define T0 (1000 * SEC)

static void near(double got, double want, const char *what)
{
    if (fabs(got - want) > 1e-6 + fabs(want) * 1e-9)
        fail_msg("%s: got %.9f, want %.9f", what, got, want);
}

static void test_stall_causes_both_rows(void **state)
{
    (void)state;
    struct stall_acc client, job;
    struct stall_req r;
    struct stall_view v;
    stall_acc_init(&client, T0);
    stall_acc_init(&job, T0);
    stall_req_begin(&r, &client, &job, T0);
    stall_req_suspend(&r, STALL_BACKEND, T0 + 10 * MS);       /* the lookup: 40 ms */
    stall_req_resume(&r, T0 + 50 * MS, 0, 0);
    stall_req_first_byte(&r, T0 + 60 * MS);
    stall_req_sent(&r, 1000);
    stall_req_suspend(&r, STALL_FILL, T0 + 70 * MS);          /* another's fill: 30 ms */
    stall_req_suspend(&r, STALL_BACKEND, T0 + 80 * MS);       /* ignored: already waiting */
    stall_req_resume(&r, T0 + 100 * MS, 0, 0);
    stall_req_resume(&r, T0 + 105 * MS, 0, 0);                /* ignored: not waiting */
    stall_req_suspend(&r, STALL_RATE, T0 + 110 * MS);         /* the token bucket: 20 ms */
    stall_req_resume(&r, T0 + 130 * MS, 0, 0);
    stall_req_add(&r, STALL_RATE, 5 * MS);                    /* fair-share pacing */
    stall_req_end(&r, T0 + 200 * MS, 5000, 0);
    for (int i = 0; i < 2; i++) {
        stall_acc_view(i ? &job : &client, T0 + 200 * MS, &v);
        assert_int_equal(v.gets, 1);
        assert_int_equal(v.active, 0);
        assert_int_equal(v.bytes, 5000); /* 1000 streamed + the 4000 added at the end */
        assert_int_equal(v.hit_bytes, 0);
        near(v.xfer_s, 0.2, "transfer");
        near(v.ttfb_s, 0.06, "first byte");
        near(v.stall_s[STALL_BACKEND], 0.04, "backend");
        near(v.stall_s[STALL_FILL], 0.03, "fill");
        near(v.stall_s[STALL_RATE], 0.025, "rate");
        near(v.stall_s[STALL_QUEUE], 0, "queue");
    }
    assert_int_equal(r.ns[STALL_BACKEND], 40 * MS);
    /* a hit: its bytes are hit bytes, and a request not counted changes nothing */
    struct stall_req h, none;
    stall_req_begin(&h, &client, NULL, T0 + 300 * MS);
    stall_req_end(&h, T0 + 310 * MS, 777, 1);
    stall_req_begin(&none, NULL, NULL, T0);
    stall_req_suspend(&none, STALL_BACKEND, T0);
    stall_req_resume(&none, T0 + SEC, 0, 0);
    stall_req_end(&none, T0 + SEC, 10, 1);
    stall_acc_view(&client, T0 + SEC, &v);
    assert_int_equal(v.gets, 2);
    assert_int_equal(v.bytes, 5777);
    assert_int_equal(v.hit_bytes, 777);
    stall_acc_view(&job, T0 + SEC, &v);
    assert_int_equal(v.gets, 1);
    stall_acc_destroy(&client);
    stall_acc_destroy(&job);
}

/* The job that ends a wait was queued for part of it: that part is queue, whatever the cause. */
static void test_stall_queue_split(void **state)
{
    (void)state;
    static const struct {
        uint64_t susp, resume, queued, started, want_q;
    } cases[] = {
        {100, 500, 0, 0, 0},       /* not woken by a worker */
        {100, 500, 50, 300, 200},  /* queued before the wait began: 100..300 */
        {100, 500, 200, 300, 100}, /* queued within the wait */
        {100, 500, 200, 900, 300}, /* still "queued" at resume (clock skew): capped at resume */
        {100, 500, 10, 90, 0},     /* started before the wait began */
        {100, 500, 100, 100, 0},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct stall_acc a;
        struct stall_req r;
        struct stall_view v;
        stall_acc_init(&a, T0);
        stall_req_begin(&r, &a, NULL, T0);
        stall_req_suspend(&r, STALL_BACKEND, T0 + cases[i].susp * MS);
        stall_req_resume(&r, T0 + cases[i].resume * MS,
                         cases[i].queued ? T0 + cases[i].queued * MS : 0,
                         cases[i].started ? T0 + cases[i].started * MS : 0);
        stall_req_end(&r, T0 + SEC, 0, 0);
        stall_acc_view(&a, T0 + SEC, &v);
        double wait = (double)(cases[i].resume - cases[i].susp) / 1e3;
        near(v.stall_s[STALL_QUEUE], (double)cases[i].want_q / 1e3, "queue");
        near(v.stall_s[STALL_BACKEND], wait - (double)cases[i].want_q / 1e3, "backend");
        stall_acc_destroy(&a);
    }
}

/* A GET in progress, and a wait in progress, count up to the moment of the view. */
static void test_stall_in_progress(void **state)
{
    (void)state;
    struct stall_acc a;
    struct stall_req r1, r2;
    struct stall_view v;
    stall_acc_init(&a, T0);
    stall_req_begin(&r1, &a, NULL, T0);
    stall_req_begin(&r2, &a, NULL, T0 + 2 * SEC);
    stall_req_suspend(&r2, STALL_BACKEND, T0 + 3 * SEC);
    stall_acc_view(&a, T0 + 5 * SEC, &v);
    assert_int_equal(v.active, 2);
    near(v.xfer_s, 5 + 3, "transfer in progress");
    near(v.stall_s[STALL_BACKEND], 2, "wait in progress");
    near(stall_share(&v.w_short), 2.0 / 8, "share");
    /* a completion while waiting closes the wait */
    stall_req_end(&r2, T0 + 6 * SEC, 0, 0);
    stall_acc_view(&a, T0 + 7 * SEC, &v);
    near(v.stall_s[STALL_BACKEND], 3, "closed at completion");
    near(v.xfer_s, 7 + 4, "one done, one in progress");
    stall_req_end(&r1, T0 + 7 * SEC, 0, 0);
    stall_acc_destroy(&a);
}

/* Windows: from the newest sample at least 10 s (60 s) old; a younger row from its birth. */
static void test_stall_windows(void **state)
{
    (void)state;
    struct stall_acc a;
    struct stall_view v;
    stall_acc_init(&a, T0);
    uint64_t seq = 0;
    /* 100 s of ticks; a hit of 1 MB completes every second, taking 0.5 s; from t=80 s on,
     * each GET also waits 0.25 s on the backend */
    for (uint64_t s = 1; s <= 100; s++) {
        struct stall_req r;
        uint64_t t = T0 + s * SEC - SEC / 2;
        stall_req_begin(&r, &a, NULL, t);
        if (s > 80) {
            stall_req_suspend(&r, STALL_BACKEND, t);
            stall_req_resume(&r, t + SEC / 4, 0, 0);
        }
        stall_req_end(&r, t + SEC / 2, 1000000, s <= 80);
        stall_acc_sample(&a, ++seq, T0 + s * SEC);
        if (s == 5) { /* younger than both windows: its life */
            stall_acc_view(&a, T0 + 5 * SEC, &v);
            near(v.w_short.secs, 5, "young: 5 s");
            near(v.w_short.bytes, 5e6, "young bytes");
        }
    }
    stall_acc_view(&a, T0 + 100 * SEC, &v);
    near(v.w_short.secs, 10, "10 s");
    near(v.w_short.bytes, 10e6, "10 s bytes");
    near(v.w_short.xfer_s, 5, "10 s transfer");
    near(v.w_short.stall_s[STALL_BACKEND], 2.5, "10 s stall");
    near(stall_share(&v.w_short), 0.5, "10 s share");
    near(v.w_short.hit_bytes, 0, "10 s hits");
    near(v.w_long.secs, 60, "60 s");
    near(v.w_long.bytes, 60e6, "60 s bytes");
    near(v.w_long.hit_bytes, 40e6, "60 s hits");
    near(v.w_long.stall_s[STALL_BACKEND], 5, "60 s stall");
    assert_int_equal(stall_main_cause(&v.w_short), STALL_BACKEND);
    /* a view between ticks: the window reaches back to the newest sample 10 s before */
    stall_acc_view(&a, T0 + 100 * SEC + SEC / 2, &v);
    near(v.w_short.secs, 10.5, "between ticks");
    /* the JSON of a view parses, with the fields docs/operations.md names */
    struct buf b;
    struct json *j = NULL;
    struct errmsg em = {{0}};
    buf_init(&b, 1 << 20);
    assert_int_equal(buf_puts(&b, "{"), 0);
    assert_int_equal(stall_json(&b, &v), 0);
    assert_int_equal(buf_puts(&b, "}"), 0);
    assert_int_equal(json_parse(b.p, b.len, &j, &em), 0);
    near(json_get_num(j, "delivered_bps_10s", -1), round(10e6 / 10.5), "json rate");
    near(json_get_num(j, "stall_share_10s", -1), 0.5, "json share");
    near(json_get_num(json_get(j, "stall_by_cause_s"), "backend", -1), 5, "json by cause");
    assert_string_equal(json_get_str(j, "main_cause_10s"), "backend");
    near(json_get_num(j, "hit_share", -1), 0.8, "json hit share");
    json_free(j);
    buf_free(&b);
    stall_acc_destroy(&a);
}

/* Folding an idle row into another keeps the other's windows continuous. */
static void test_stall_fold(void **state)
{
    (void)state;
    struct stall_acc other, a;
    struct stall_view before, after;
    stall_acc_init(&other, T0);
    stall_acc_init(&a, T0 + 3 * SEC);
    for (uint64_t s = 1; s <= 20; s++) {
        struct stall_req r;
        if (s >= 4 && s <= 8) {
            stall_req_begin(&r, &a, NULL, T0 + s * SEC - SEC / 2);
            stall_req_suspend(&r, STALL_FILL, T0 + s * SEC - SEC / 2);
            stall_req_resume(&r, T0 + s * SEC - SEC / 4, 0, 0);
            stall_req_end(&r, T0 + s * SEC, 500, 0);
        }
        stall_acc_sample(&other, s, T0 + s * SEC);
        if (s >= 3)
            stall_acc_sample(&a, s, T0 + s * SEC);
    }
    stall_acc_view(&other, T0 + 20 * SEC, &before);
    stall_acc_fold(&other, &a);
    stall_acc_view(&other, T0 + 20 * SEC, &after);
    assert_int_equal(after.gets, 5);
    assert_int_equal(after.bytes, 2500);
    near(after.stall_s[STALL_FILL], 1.25, "folded totals");
    /* the GETs ended more than 10 s ago: still outside the short window, inside the long */
    near(after.w_short.bytes, before.w_short.bytes, "10 s window continuous");
    near(after.w_short.stall_s[STALL_FILL], 0, "10 s window stall");
    near(after.w_long.bytes, 2500, "60 s window");
    stall_acc_destroy(&other);
    stall_acc_destroy(&a);
}

static void test_stall_verdict_table(void **state)
{
    (void)state;
    static const struct {
        double secs, bytes, xfer, stall_b, stall_r;
        uint64_t need;
        enum stall_state want;
        int cause;
    } cases[] = {
        {10, 0, 0, 0, 0, 0, STALL_IDLE, -1},              /* nothing asked */
        {10, 0, 0, 0, 0, 100, STALL_IDLE, -1},
        {10, 1000, 10, 0, 0, 100, STALL_OK, -1},          /* 100 B/s of 100 */
        {10, 900, 10, 9, 0, 100, STALL_OK, -1},           /* at 0.9 of need, stalled or not */
        {10, 890, 10, 2, 0, 100, STALL_STARVED, STALL_BACKEND}, /* under, 20 % stalled */
        {10, 890, 10, 1.9, 0, 100, STALL_IDLE, -1},       /* under, 19 %: the reader's pace */
        {10, 500, 10, 1, 3, 100, STALL_STARVED, STALL_RATE},    /* the largest cause */
        {10, 500, 10, 0, 0, 0, STALL_IDLE, -1},           /* no need, no stall: idle */
        {10, 500, 10, 5, 0, 0, STALL_STARVED, STALL_BACKEND},   /* no need, stalled */
        {0.2, 50, 1, 0, 0, 100, STALL_IDLE, -1},          /* a young window counts 1 s */
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct stall_window w;
        memset(&w, 0, sizeof(w));
        w.secs = cases[i].secs;
        w.bytes = cases[i].bytes;
        w.xfer_s = cases[i].xfer;
        w.stall_s[STALL_BACKEND] = cases[i].stall_b;
        w.stall_s[STALL_RATE] = cases[i].stall_r;
        int cause = 7;
        enum stall_state st = stall_verdict(&w, cases[i].need, &cause);
        if (st != cases[i].want || cause != cases[i].cause)
            fail_msg("case %zu: got %s/%d, want %s/%d", i, stall_state_name(st), cause,
                     stall_state_name(cases[i].want), cases[i].cause);
    }
    assert_string_equal(stall_cause_name(STALL_RATE), "rate_limit");
    assert_string_equal(stall_cause_name(-1), "none");
}

/* Threads charging one row while another thread views it: totals exact, views in range. */
#define NTHREADS 4
#define NGETS 20000

struct conc {
    struct stall_acc *a;
    _Atomic uint64_t clock;
    _Atomic int stop;
};

static void *charger(void *arg)
{
    struct conc *c = arg;
    for (int i = 0; i < NGETS; i++) {
        struct stall_req r;
        uint64_t t = atomic_fetch_add(&c->clock, 10);
        stall_req_begin(&r, c->a, NULL, t);
        stall_req_suspend(&r, (enum stall_cause)(i % STALL__N), t + 1);
        stall_req_resume(&r, t + 3, 0, 0);
        stall_req_sent(&r, 3);
        stall_req_end(&r, t + 5, 10, i & 1);
    }
    return NULL;
}

static void *viewer(void *arg)
{
    struct conc *c = arg;
    uint64_t seq = 0;
    while (!atomic_load(&c->stop)) {
        struct stall_view v;
        uint64_t now = atomic_load(&c->clock) + 100;
        stall_acc_sample(c->a, ++seq, now);
        stall_acc_view(c->a, now, &v);
        double total = 0;
        for (int k = 0; k < STALL__N; k++)
            total += v.stall_s[k];
        if (v.active > NTHREADS || total > v.xfer_s + 1e-3 || v.xfer_s > (double)now / 1e9)
            fail_msg("view out of range: active %llu stall %.9f transfer %.9f",
                     (unsigned long long)v.active, total, v.xfer_s);
    }
    return NULL;
}

static void test_stall_concurrent(void **state)
{
    (void)state;
    struct stall_acc a;
    struct conc c = {.a = &a};
    pthread_t t[NTHREADS], vt;
    atomic_store(&c.clock, T0);
    stall_acc_init(&a, T0);
    pthread_create(&vt, NULL, viewer, &c);
    for (int i = 0; i < NTHREADS; i++)
        pthread_create(&t[i], NULL, charger, &c);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    atomic_store(&c.stop, 1);
    pthread_join(vt, NULL);
    struct stall_view v;
    stall_acc_view(&a, atomic_load(&c.clock), &v);
    assert_int_equal(v.gets, NTHREADS * NGETS);
    assert_int_equal(v.active, 0);
    assert_int_equal(v.bytes, (uint64_t)NTHREADS * NGETS * 10);
    assert_int_equal(v.hit_bytes, (uint64_t)NTHREADS * NGETS / 2 * 10);
    near(v.xfer_s, NTHREADS * NGETS * 5e-9, "transfer");
    for (int k = 0; k < STALL__N; k++)
        near(v.stall_s[k], NTHREADS * NGETS / STALL__N * 2e-9, "stall");
    stall_acc_destroy(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stall_causes_both_rows),
        cmocka_unit_test(test_stall_queue_split),
        cmocka_unit_test(test_stall_in_progress),
        cmocka_unit_test(test_stall_windows),
        cmocka_unit_test(test_stall_fold),
        cmocka_unit_test(test_stall_verdict_table),
        cmocka_unit_test(test_stall_concurrent),
    };
    return cmocka_run_group_tests_name("stall", tests, NULL, NULL);
}
