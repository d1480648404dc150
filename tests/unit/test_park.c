/* test_park.c: the registry of requests and the watch over the parked ones (http/park.c): the
 * counts (parked, over the bound, parkings past it since the start), each parking past the
 * bound named once, park_each() visiting only the parked, and many threads adding, parking,
 * waking and removing at once while the watch walks them. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "http/park.h"

struct item {
    struct park_entry e; /* first: the describe callback casts back */
    int id;
};

static _Atomic unsigned described;

static void describe(const struct park_entry *e, char *buf, size_t cap)
{
    const struct item *it = (const struct item *)e;
    snprintf(buf, cap, "item %d", it->id);
    atomic_fetch_add(&described, 1);
}

/* Waits (5 s at most) until the watch's last pass says @over over the bound. */
static struct park_counts wait_over(struct park *p, unsigned over)
{
    struct park_counts c;
    for (int i = 0; i < 500; i++) {
        park_counts(p, 0, &c);
        if (c.over_bound == over)
            break;
        usleep(10000);
    }
    return c;
}

static void test_park_counts_and_names(void **state)
{
    (void)state;
    struct park *p;
    struct item a = {.id = 1}, b = {.id = 2};
    atomic_store(&described, 0);
    assert_int_equal(park_new(50, NULL, describe, &p), 0);
    park_add(p, &a.e);
    park_add(p, &b.e);
    struct park_counts c;
    park_counts(p, 1, &c);
    assert_int_equal(c.parked, 0);
    assert_int_equal(c.bound_ms, 50);

    park_enter(&a.e, PARK_CACHE);
    park_enter(&b.e, PARK_JOB);
    park_counts(p, 1, &c); /* at once: parked, not yet over the bound */
    assert_int_equal(c.parked, 2);
    assert_int_equal(c.over_bound, 0);
    c = wait_over(p, 2);
    assert_int_equal(c.over_bound, 2);
    assert_int_equal(c.over_bound_total, 2);
    assert_int_equal(atomic_load(&described), 2);

    /* still parked at the next passes: counted, not named again */
    usleep(1200000);
    park_counts(p, 0, &c);
    assert_int_equal(c.over_bound, 2);
    assert_int_equal(c.over_bound_total, 2);
    assert_int_equal(atomic_load(&described), 2);

    /* woken: no longer counted; parked again, a new parking past the bound */
    park_leave(&a.e);
    c = wait_over(p, 1);
    assert_int_equal(c.parked, 1);
    assert_int_equal(c.over_bound_total, 2);
    park_enter(&a.e, PARK_RATE);
    usleep(100000);
    c = wait_over(p, 2);
    assert_int_equal(c.over_bound_total, 3);
    assert_int_equal(atomic_load(&described), 3);

    park_leave(&a.e);
    park_leave(&b.e);
    park_remove(&a.e);
    park_remove(&b.e);
    park_free(p);
}

static int visit(struct park_entry *e, void *cls)
{
    int *seen = cls;
    seen[((struct item *)e)->id]++;
    return ((struct item *)e)->id == 3;
}

static void test_park_each_visits_the_parked(void **state)
{
    (void)state;
    struct park *p;
    struct item it[5];
    int seen[5] = {0};
    assert_int_equal(park_new(0, NULL, describe, &p), 0); /* 0: no bound */
    for (int i = 0; i < 5; i++) {
        it[i].id = i;
        park_add(p, &it[i].e);
    }
    park_enter(&it[1].e, PARK_CACHE);
    park_enter(&it[3].e, PARK_PEER);
    assert_int_equal(park_each(p, visit, seen), 1);
    assert_int_equal(seen[0] + seen[2] + seen[4], 0);
    assert_int_equal(seen[1], 1);
    assert_int_equal(seen[3], 1);
    struct park_counts c;
    park_counts(p, 1, &c);
    assert_int_equal(c.parked, 2);
    assert_int_equal(c.over_bound, 0); /* no bound: never over it */
    for (int i = 0; i < 5; i++)
        park_remove(&it[i].e); /* removed parked or not */
    park_counts(p, 1, &c);
    assert_int_equal(c.parked, 0);
    park_free(p);
}

struct churn {
    struct park *p;
    int n;
};

static void *churn_main(void *arg)
{
    struct churn *ch = arg;
    struct item it[16];
    for (int round = 0; round < ch->n; round++) {
        for (int i = 0; i < 16; i++) {
            it[i].id = i;
            park_add(ch->p, &it[i].e);
            park_enter(&it[i].e, PARK_JOB);
        }
        for (int i = 0; i < 16; i++) {
            park_leave(&it[i].e);
            park_remove(&it[i].e);
        }
    }
    return NULL;
}

static int count(struct park_entry *e, void *cls)
{
    (void)e;
    (*(unsigned *)cls)++;
    return 0;
}

/* Threads adding, parking, waking and removing while the watch and park_each walk them. */
static void test_park_threads(void **state)
{
    (void)state;
    struct park *p;
    enum { T = 4 };
    pthread_t th[T];
    struct churn ch = {NULL, 3000};
    assert_int_equal(park_new(1, NULL, describe, &p), 0);
    ch.p = p;
    for (int i = 0; i < T; i++)
        pthread_create(&th[i], NULL, churn_main, &ch);
    unsigned seen = 0;
    for (int i = 0; i < 200; i++)
        park_each(p, count, &seen);
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    struct park_counts c;
    park_counts(p, 1, &c);
    assert_int_equal(c.parked, 0);
    park_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_park_counts_and_names),
        cmocka_unit_test(test_park_each_visits_the_parked),
        cmocka_unit_test(test_park_threads),
    };
    return cmocka_run_group_tests_name("park", tests, NULL, NULL);
}
