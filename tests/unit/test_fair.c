/*
 * test_fair.c: unit tests of acct/fair.c: the max-min water-filling level (a table), and
 * the control loop against a simulated network in which every socket sends
 * min(its pacing rate, what its reader takes) each round: equal shares for a client with four
 * streams and one with one, the spare of a slow client going to the others, a lone client
 * held to the capacity, a client forgotten once it has been quiet for a round, the tail of a
 * completed response still counted while it drains, no pacing below saturation, and the
 * snapshot /_/stats shows (fair_get_stats), and the rounds a paced response was held back
 * (its stall, acct/stall.h).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lib/s3c.h"
#include "acct/fair.h"

#define MB 1000000.0
#define TICK_NS (FAIR_TICK_MS * 1000000ull)
#define NSOCK 16

static void test_fair_waterfill(void **state)
{
    static const struct {
        double cap;
        double d[4];
        size_t n;
        double want;
    } cases[] = {
        {100, {0}, 0, 100},                                          /* nobody: all of it */
        {100, {FAIR_UNBOUNDED}, 1, 100},                             /* one greedy client */
        {100, {FAIR_UNBOUNDED, FAIR_UNBOUNDED}, 2, 50},              /* two split evenly */
        {100, {10, FAIR_UNBOUNDED}, 2, 90},                          /* the spare of a slow one */
        {100, {10, 20, FAIR_UNBOUNDED, FAIR_UNBOUNDED}, 4, 35},      /* two slow, two greedy */
        {100, {40, 45, FAIR_UNBOUNDED}, 3, 33.333333},               /* 40 is over a third */
        {100, {10, 20}, 2, 90},                                      /* not saturated: 20 + 70 */
        {100, {60, 70}, 2, 50},                                      /* saturated by finite ones */
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        double d[4];
        memcpy(d, cases[i].d, sizeof(d));
        double got = fair_waterfill(cases[i].cap, d, cases[i].n);
        if (fabs(got - cases[i].want) > 1e-3)
            fail_msg("case %zu: level %.4f, want %.4f", i, got, cases[i].want);
    }
}

/* ---------------------------------------------------------------- a simulated network */

struct sim {
    double written[NSOCK]; /* bytes the "application" wrote to each socket */
    double pace[NSOCK];    /* bytes/s, as set by fair.c (0 = not paced) */
    double demand[NSOCK];  /* bytes/s the socket's reader takes */
    double queued[NSOCK];  /* bytes written but not yet acknowledged */
    int open[NSOCK];
};

static uint64_t sim_written(void *cls, int fd, uint64_t *queued)
{
    struct sim *s = cls;
    *queued = (uint64_t)s->queued[fd];
    return (uint64_t)s->written[fd];
}

static void sim_pace(void *cls, int fd, uint64_t bps)
{
    struct sim *s = cls;
    s->pace[fd] = bps == FAIR_UNPACED ? 0 : (double)bps;
}

/* One round of sending, then a fair_tick(); adds what each socket sent to @sent. */
static void sim_round(struct sim *s, struct fair *f, uint64_t *now, double *sent)
{
    double secs = (double)TICK_NS / 1e9;
    for (int i = 0; i < NSOCK; i++) {
        if (!s->open[i])
            continue;
        double b = (s->pace[i] > 0 ? S3C_MIN(s->pace[i], s->demand[i]) : s->demand[i]) * secs;
        s->written[i] += b;
        if (sent)
            sent[i] += b;
    }
    *now += TICK_NS;
    fair_tick(f, *now);
}

struct sim_client {
    const char *key;
    int first, n; /* sockets [first, first + n) */
    double demand_each;
};

/* Runs @nc clients for 3 s to settle, then 5 s measured; returns each client's rate. */
static void sim_run(double capacity, const struct sim_client *cl, size_t nc, double *rates)
{
    struct sim s;
    struct fair_conn fc[NSOCK];
    struct fair *f = NULL;
    struct fair_io io = {sim_written, sim_pace, &s};
    double sent[NSOCK];
    memset(&s, 0, sizeof(s));
    memset(fc, 0, sizeof(fc));
    memset(sent, 0, sizeof(sent));
    assert_int_equal(fair_new_manual((uint64_t)capacity, &io, &f), 0);
    uint64_t now = s3c_mono_ns();
    for (size_t c = 0; c < nc; c++)
        for (int i = cl[c].first; i < cl[c].first + cl[c].n; i++) {
            s.open[i] = 1;
            s.demand[i] = cl[c].demand_each;
            fair_conn_start(f, &fc[i], i, cl[c].key, "127.0.0.1");
        }
    for (int r = 0; r < 30; r++)
        sim_round(&s, f, &now, NULL);
    for (int r = 0; r < 50; r++)
        sim_round(&s, f, &now, sent);
    for (size_t c = 0; c < nc; c++) {
        rates[c] = 0;
        for (int i = cl[c].first; i < cl[c].first + cl[c].n; i++) {
            rates[c] += sent[i] / 5.0;
            fair_conn_end(f, &fc[i], (uint64_t)s.written[i]);
        }
    }
    fair_free(f);
}

static void expect_near(const char *what, double got, double want, double tol)
{
    if (fabs(got - want) > tol * want)
        fail_msg("%s: %.2f MB/s, want %.2f MB/s ± %.0f%%", what, got / MB, want / MB, tol * 100);
}

static void test_fair_four_streams_vs_one(void **state)
{
    (void)state;
    const struct sim_client cl[] = {{"AKFOUR", 0, 4, 1e12}, {"AKONE", 4, 1, 1e12}};
    double rates[2];
    sim_run(100 * MB, cl, 2, rates);
    expect_near("client with 4 streams", rates[0], 50 * MB, 0.03);
    expect_near("client with 1 stream", rates[1], 50 * MB, 0.03);
}

static void test_fair_spare_goes_to_others(void **state)
{
    (void)state;
    /* the slow client's reader takes 10 MB/s; the other two split the remaining 90 */
    const struct sim_client cl[] = {
        {"AKSLOW", 0, 1, 10 * MB}, {"AKFOUR", 1, 4, 1e12}, {"AKTWO", 5, 2, 1e12}};
    double rates[3];
    sim_run(100 * MB, cl, 3, rates);
    expect_near("slow client", rates[0], 10 * MB, 0.03);
    expect_near("client with 4 streams", rates[1], 45 * MB, 0.05);
    expect_near("client with 2 streams", rates[2], 45 * MB, 0.05);
}

/* Stall accounting (acct/stall.h): a response paced while its client takes its share was held
 * back for those rounds (fair_conn.held_ns); one whose reader is slower than its share never
 * was, paced or not. */
static void test_fair_held_rounds(void **state)
{
    (void)state;
    struct sim s;
    struct fair_conn fc[3];
    struct fair *f = NULL;
    struct fair_io io = {sim_written, sim_pace, &s};
    memset(&s, 0, sizeof(s));
    memset(fc, 0, sizeof(fc));
    assert_int_equal(fair_new_manual((uint64_t)(100 * MB), &io, &f), 0);
    uint64_t now = s3c_mono_ns();
    s.open[0] = s.open[1] = s.open[2] = 1;
    s.demand[0] = 10 * MB;         /* AKSLOW: its reader takes 10 MB/s */
    s.demand[1] = s.demand[2] = 1e12; /* AKGREEDY: 2 streams, takes what it gets */
    fair_conn_start(f, &fc[0], 0, "AKSLOW", "127.0.0.1");
    fair_conn_start(f, &fc[1], 1, "AKGREEDY", "127.0.0.1");
    fair_conn_start(f, &fc[2], 2, "AKGREEDY", "127.0.0.1");
    for (int r = 0; r < 80; r++) /* 8 s */
        sim_round(&s, f, &now, NULL);
    for (int i = 0; i < 3; i++)
        fair_conn_end(f, &fc[i], (uint64_t)s.written[i]);
    assert_int_equal(fc[0].held_ns, 0);
    for (int i = 1; i < 3; i++) /* paced and at its share from the second round on */
        if (fc[i].held_ns < 7 * 1000000000ull || fc[i].held_ns > 8 * 1000000000ull)
            fail_msg("greedy stream %d held %.2f s of 8", i, (double)fc[i].held_ns / 1e9);
    fair_free(f);
}

static void test_fair_lone_client_capped(void **state)
{
    (void)state;
    const struct sim_client cl[] = {{"AKALONE", 0, 3, 1e12}};
    double rate;
    sim_run(100 * MB, cl, 1, &rate);
    expect_near("a client alone", rate, 100 * MB, 0.03);
}

static void test_fair_not_saturated(void **state)
{
    (void)state;
    /* demands under the capacity: everyone gets what it asks */
    const struct sim_client cl[] = {{"AKA", 0, 2, 15 * MB}, {"AKB", 2, 1, 40 * MB}};
    double rates[2];
    sim_run(100 * MB, cl, 2, rates);
    expect_near("client A (2 x 15)", rates[0], 30 * MB, 0.03);
    expect_near("client B", rates[1], 40 * MB, 0.03);
}

static void test_fair_quiet_client_forgotten(void **state)
{
    struct sim s;
    struct fair_conn a, b;
    struct fair *f = NULL;
    struct fair_io io = {sim_written, sim_pace, &s};
    unsigned active = 0;
    int sat = 0;
    (void)state;
    memset(&s, 0, sizeof(s));
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    assert_int_equal(fair_new_manual(100 * MB, &io, &f), 0);
    uint64_t now = s3c_mono_ns();
    s.open[0] = s.open[1] = 1;
    s.demand[0] = s.demand[1] = 1e12;
    fair_conn_start(f, &a, 0, "AKA", "10.0.0.1");
    fair_conn_start(f, &b, 1, "AKA", "10.0.0.2"); /* another address: another client */
    for (int r = 0; r < 10; r++)
        sim_round(&s, f, &now, NULL);
    assert_int_equal(fair_level(f, &active, &sat), 50 * MB);
    assert_int_equal(active, 2);
    assert_true(sat);
    s.written[1] += 1e6; /* b's last bytes, written after the last round */
    fair_conn_end(f, &b, (uint64_t)s.written[1]);
    s.open[1] = 0;
    sim_round(&s, f, &now, NULL); /* they still count this round */
    fair_level(f, &active, NULL);
    assert_int_equal(active, 2);
    sim_round(&s, f, &now, NULL); /* quiet: forgotten, a has it all */
    assert_int_equal(fair_level(f, &active, NULL), 100 * MB);
    assert_int_equal(active, 1);
    fair_conn_end(f, &a, 0);
    fair_conn_end(f, &a, 0); /* twice: a no-op */
    fair_free(f);
}

static void test_fair_tail_still_counts(void **state)
{
    struct sim s;
    struct fair_conn a, b;
    struct fair *f = NULL;
    struct fair_io io = {sim_written, sim_pace, &s};
    (void)state;
    memset(&s, 0, sizeof(s));
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    assert_int_equal(fair_new_manual(100 * MB, &io, &f), 0);
    uint64_t now = s3c_mono_ns();
    s.open[0] = s.open[1] = 1;
    s.demand[0] = s.demand[1] = 1e12;
    fair_conn_start(f, &a, 0, "AKA", "10.0.0.1");
    fair_conn_start(f, &b, 1, "AKA", "10.0.0.1");
    for (int r = 0; r < 5; r++)
        sim_round(&s, f, &now, NULL);
    expect_near("each of 2 sockets", s.pace[0], 50 * MB, 0.02);
    /* b completes with 10 MB still queued: 0.2 s at 50 MB/s, during which a stays at half */
    s.queued[1] = 10 * MB;
    fair_conn_end(f, &b, (uint64_t)s.written[1]);
    sim_round(&s, f, &now, NULL);
    expect_near("a while b's tail drains", s.pace[0], 50 * MB, 0.02);
    sim_round(&s, f, &now, NULL);
    sim_round(&s, f, &now, NULL);
    expect_near("a once it has drained", s.pace[0], 100 * MB, 0.02);
    /* the same socket's next response replaces its tail instead of adding to it */
    s.queued[0] = 10 * MB;
    fair_conn_end(f, &a, (uint64_t)s.written[0]);
    fair_conn_start(f, &a, 0, "AKA", "10.0.0.1");
    expect_near("a new response on a draining socket", s.pace[0], 100 * MB, 0.02);
    fair_conn_end(f, &a, 0);
    fair_free(f);
}

static void test_fair_unsaturated_not_paced(void **state)
{
    struct sim s;
    struct fair_conn a;
    struct fair *f = NULL;
    struct fair_io io = {sim_written, sim_pace, &s};
    int sat = 1;
    (void)state;
    memset(&s, 0, sizeof(s));
    memset(&a, 0, sizeof(a));
    assert_int_equal(fair_new_manual(100 * MB, &io, &f), 0);
    uint64_t now = s3c_mono_ns();
    s.open[0] = 1;
    s.demand[0] = 1e12; /* saturates: paced */
    fair_conn_start(f, &a, 0, "AKA", "10.0.0.1");
    for (int r = 0; r < 3; r++)
        sim_round(&s, f, &now, NULL);
    assert_true(s.pace[0] > 0);
    s.demand[0] = 20 * MB; /* its reader slows down: below FAIR_RELAXED, pacing is lifted */
    for (int r = 0; r < FAIR_RELAX_ROUNDS - 1; r++)
        sim_round(&s, f, &now, NULL);
    fair_level(f, NULL, &sat);
    assert_true(sat); /* not after one slow round */
    sim_round(&s, f, &now, NULL);
    fair_level(f, NULL, &sat);
    assert_false(sat);
    assert_true(s.pace[0] == 0);
    /* a socket left paced by an earlier response is unpaced at its next one */
    fair_conn_end(f, &a, (uint64_t)s.written[0]);
    s.pace[0] = 5 * MB;
    fair_conn_start(f, &a, 0, "AKA", "10.0.0.1"); /* fair.c had not paced it: left alone */
    assert_true(s.pace[0] == 5 * MB);
    fair_conn_end(f, &a, 0);
    fair_free(f);
}

static void test_fair_stats_snapshot(void **state)
{
    struct sim s;
    struct fair_conn fc[5];
    struct fair *f = NULL;
    struct fair_io io = {sim_written, sim_pace, &s};
    struct fair_stats st;
    (void)state;
    memset(&st, 0xff, sizeof(st));
    fair_get_stats(NULL, &st); /* no --max-bandwidth: all zeros */
    assert_int_equal(st.capacity_bps, 0);
    assert_int_equal(st.level_bps, 0);
    assert_int_equal(st.active_clients, 0);
    assert_int_equal(st.responses, 0);
    assert_false(st.saturated);
    memset(&s, 0, sizeof(s));
    memset(fc, 0, sizeof(fc));
    assert_int_equal(fair_new_manual(100 * MB, &io, &f), 0);
    fair_get_stats(f, &st); /* before any round: one client may take it all */
    assert_int_equal(st.capacity_bps, 100 * MB);
    assert_int_equal(st.level_bps, 100 * MB);
    assert_int_equal(st.active_clients, 0);
    assert_false(st.saturated);
    uint64_t now = s3c_mono_ns();
    for (int i = 0; i < 5; i++) { /* 4 streams of AKFOUR, 1 of AKONE */
        s.open[i] = 1;
        s.demand[i] = 1e12;
        fair_conn_start(f, &fc[i], i, i < 4 ? "AKFOUR" : "AKONE", "127.0.0.1");
    }
    fair_get_stats(f, &st);
    assert_int_equal(st.responses, 5);
    assert_int_equal(st.paced_responses, 0);
    for (int r = 0; r < 10; r++)
        sim_round(&s, f, &now, NULL);
    fair_get_stats(f, &st);
    assert_int_equal(st.capacity_bps, 100 * MB);
    assert_int_equal(st.level_bps, 50 * MB);
    assert_int_equal(st.active_clients, 2);
    assert_int_equal(st.responses, 5);
    assert_int_equal(st.paced_responses, 5);
    assert_true(st.saturated);
    expect_near("rate of the last round", (double)st.rate_bps, 100 * MB, 0.03);
    for (int i = 0; i < 5; i++) {
        fair_conn_end(f, &fc[i], (uint64_t)s.written[i]);
        s.open[i] = 0;
    }
    fair_get_stats(f, &st);
    assert_int_equal(st.responses, 0);
    assert_int_equal(st.paced_responses, 0);
    for (int r = 0; r < 3; r++) /* quiet: forgotten, not saturated */
        sim_round(&s, f, &now, NULL);
    fair_get_stats(f, &st);
    assert_int_equal(st.active_clients, 0);
    assert_int_equal(st.rate_bps, 0);
    assert_false(st.saturated);
    fair_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fair_waterfill),
        cmocka_unit_test(test_fair_four_streams_vs_one),
        cmocka_unit_test(test_fair_spare_goes_to_others),
        cmocka_unit_test(test_fair_lone_client_capped),
        cmocka_unit_test(test_fair_held_rounds),
        cmocka_unit_test(test_fair_not_saturated),
        cmocka_unit_test(test_fair_quiet_client_forgotten),
        cmocka_unit_test(test_fair_tail_still_counts),
        cmocka_unit_test(test_fair_unsaturated_not_paced),
        cmocka_unit_test(test_fair_stats_snapshot),
    };
    return cmocka_run_group_tests_name("fair", tests, NULL, NULL);
}
