/*
 * ratelimit.c: token buckets per access key and one timer thread
 * (acct/ratelimit.h). Buckets live in a small list keyed by access key and
 * are freed with their last reference; the token arithmetic (rl_tb_*) is pure,
 * given the clock. Timers are kept sorted by due time.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ratelimit.h"
#include "lib/s3c.h"

struct rl_bucket {
    struct rl_bucket *next;
    unsigned refs;
    char key[129];
    pthread_mutex_t mu;
    struct rl_tb tb;    /* under mu */
};

struct rl {
    pthread_mutex_t mu;       /* buckets list */
    struct rl_bucket *buckets;
    pthread_mutex_t tmu;      /* timers */
    pthread_cond_t tcv;
    struct rl_timer *timers;  /* sorted by due_ns */
    struct rl_timer *firing;  /* the timer whose fn is running */
    pthread_t thread;
    int stop;
};

static void *rl_timer_main(void *arg)
{
    struct rl *rl = arg;
    pthread_mutex_lock(&rl->tmu);
    for (;;) {
        struct rl_timer *t = rl->timers;
        uint64_t now = s3c_mono_ns();
        if (t && (t->due_ns <= now || rl->stop)) {
            rl->timers = t->next;
            t->armed = 0;
            rl->firing = t;
            pthread_mutex_unlock(&rl->tmu);
            t->fn(t->arg);
            pthread_mutex_lock(&rl->tmu);
            rl->firing = NULL;
            pthread_cond_broadcast(&rl->tcv);
            continue;
        }
        if (rl->stop)
            break;
        if (!t) {
            pthread_cond_wait(&rl->tcv, &rl->tmu);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t wait = t->due_ns - now;
        ts.tv_sec += (time_t)(wait / 1000000000ull);
        ts.tv_nsec += (long)(wait % 1000000000ull);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&rl->tcv, &rl->tmu, &ts);
    }
    pthread_mutex_unlock(&rl->tmu);
    return NULL;
}

int rl_new(struct rl **out)
{
    struct rl *rl = calloc(1, sizeof(*rl));
    pthread_condattr_t ca;
    if (!rl)
        return -ENOMEM;
    pthread_mutex_init(&rl->mu, NULL);
    pthread_mutex_init(&rl->tmu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rl->tcv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&rl->thread, NULL, rl_timer_main, rl);
    if (rc) {
        free(rl);
        return -rc;
    }
    *out = rl;
    return 0;
}

void rl_free(struct rl *rl)
{
    if (!rl)
        return;
    pthread_mutex_lock(&rl->tmu);
    rl->stop = 1;
    pthread_cond_broadcast(&rl->tcv);
    pthread_mutex_unlock(&rl->tmu);
    pthread_join(rl->thread, NULL);
    while (rl->buckets) {
        struct rl_bucket *b = rl->buckets;
        rl->buckets = b->next;
        pthread_mutex_destroy(&b->mu);
        free(b);
    }
    pthread_mutex_destroy(&rl->mu);
    pthread_mutex_destroy(&rl->tmu);
    pthread_cond_destroy(&rl->tcv);
    free(rl);
}

struct rl_bucket *rl_bucket_ref(struct rl *rl, const char *key, uint64_t rate_bps)
{
    if (!rate_bps)
        return NULL;
    pthread_mutex_lock(&rl->mu);
    struct rl_bucket *b = rl->buckets;
    while (b && strcmp(b->key, key))
        b = b->next;
    if (!b && (b = calloc(1, sizeof(*b)))) {
        snprintf(b->key, sizeof(b->key), "%s", key);
        pthread_mutex_init(&b->mu, NULL);
        b->tb.last_ns = s3c_mono_ns();
        b->next = rl->buckets;
        rl->buckets = b;
    }
    if (b) {
        b->refs++;
        pthread_mutex_lock(&b->mu);
        if (b->tb.rate_bps != rate_bps)
            rl_tb_set_rate(&b->tb, rate_bps);
        pthread_mutex_unlock(&b->mu);
    }
    pthread_mutex_unlock(&rl->mu);
    return b;
}

void rl_bucket_release(struct rl *rl, struct rl_bucket *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&rl->mu);
    if (--b->refs == 0) {
        struct rl_bucket **pp = &rl->buckets;
        while (*pp != b)
            pp = &(*pp)->next;
        *pp = b->next;
        pthread_mutex_destroy(&b->mu);
        free(b);
    }
    pthread_mutex_unlock(&rl->mu);
}

void rl_tb_set_rate(struct rl_tb *tb, uint64_t rate_bps)
{
    tb->rate_bps = rate_bps;
    /* 50 ms of rate, at least 16 KiB: smooth, and small against any 1 s window */
    tb->burst = S3C_MAX((double)rate_bps / 20.0, 16384.0);
    if (tb->tokens > tb->burst)
        tb->tokens = tb->burst;
}

size_t rl_tb_take(struct rl_tb *tb, size_t want, uint64_t now_ns, uint64_t *wait_ns)
{
    tb->tokens += (double)(now_ns - tb->last_ns) * (double)tb->rate_bps / 1e9;
    if (tb->tokens > tb->burst)
        tb->tokens = tb->burst;
    tb->last_ns = now_ns;
    size_t granted = 0;
    if (tb->tokens > 0) {
        granted = want;
        tb->tokens -= (double)want;
    } else {
        double secs = (-tb->tokens + 1.0) / (double)tb->rate_bps;
        *wait_ns = (uint64_t)(secs * 1e9) + 1000000; /* +1 ms: no busy wake-ups */
    }
    return granted;
}

size_t rl_take(struct rl_bucket *b, size_t want, uint64_t *wait_ns)
{
    pthread_mutex_lock(&b->mu);
    size_t granted = rl_tb_take(&b->tb, want, s3c_mono_ns(), wait_ns);
    pthread_mutex_unlock(&b->mu);
    return granted;
}

void rl_refund(struct rl_bucket *b, size_t n)
{
    if (!b || !n)
        return;
    pthread_mutex_lock(&b->mu);
    b->tb.tokens += (double)n;
    pthread_mutex_unlock(&b->mu);
}

void rl_timer_arm(struct rl *rl, struct rl_timer *t, uint64_t delay_ns, void (*fn)(void *),
                  void *arg)
{
    pthread_mutex_lock(&rl->tmu);
    S3C_ASSERT(!t->armed);
    t->due_ns = s3c_mono_ns() + delay_ns;
    t->fn = fn;
    t->arg = arg;
    t->armed = 1;
    struct rl_timer **pp = &rl->timers;
    while (*pp && (*pp)->due_ns <= t->due_ns)
        pp = &(*pp)->next;
    t->next = *pp;
    *pp = t;
    pthread_cond_broadcast(&rl->tcv);
    pthread_mutex_unlock(&rl->tmu);
}

void rl_timer_cancel(struct rl *rl, struct rl_timer *t)
{
    pthread_mutex_lock(&rl->tmu);
    if (t->armed) {
        struct rl_timer **pp = &rl->timers;
        while (*pp && *pp != t)
            pp = &(*pp)->next;
        if (*pp)
            *pp = t->next;
        t->armed = 0;
    }
    while (rl->firing == t)
        pthread_cond_wait(&rl->tcv, &rl->tmu);
    pthread_mutex_unlock(&rl->tmu);
}
