/*
 * ratelimit.h: per-key download rate limits (token buckets) and the timer
 * that resumes a throttled connection when its bucket has refilled. Nothing
 * here sleeps: a throttled request suspends its connection and arms a timer.
 */
#ifndef S3C_RATELIMIT_H
#define S3C_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

struct rl;
struct rl_bucket;

/* A token bucket as a pure calculation: the caller passes the clock (rl_bucket holds one under
 * its lock and passes s3c_mono_ns()). Starts empty at @last_ns; refills at @rate_bps up to
 * @burst; a grant may overdraw it (debt), paid back before the next grant. */
struct rl_tb {
    uint64_t rate_bps;
    double tokens;    /* may go negative: debt to pay back before the next grant */
    double burst;
    uint64_t last_ns; /* when tokens was last brought up to date */
};
/* Sets the rate (and the burst with it: 50 ms of rate, at least 16 KiB), capping what is saved
 * at the new burst. */
void rl_tb_set_rate(struct rl_tb *tb, uint64_t rate_bps);
/* rl_take() at @now_ns (never before tb->last_ns). */
size_t rl_tb_take(struct rl_tb *tb, size_t want, uint64_t now_ns, uint64_t *wait_ns);

/* A one-shot timer owned by its user (embedded in struct req). */
struct rl_timer {
    struct rl_timer *next;
    uint64_t due_ns;
    void (*fn)(void *arg);
    void *arg;
    int armed;
};

int rl_new(struct rl **out);
/* Stops the timer thread (armed timers are fired first, so nothing stays suspended). */
void rl_free(struct rl *rl);

/* The shared bucket of @key at @rate_bps bytes/s (a new reference), or NULL when rate is 0. The
 * rate of an existing bucket follows the latest caller (credentials reload). */
struct rl_bucket *rl_bucket_ref(struct rl *rl, const char *key, uint64_t rate_bps);
void rl_bucket_release(struct rl *rl, struct rl_bucket *b);

/* Takes up to @want bytes. Returns the bytes granted (> 0), or 0 with *@wait_ns until some are
 * available. Debt-based: one grant may overdraw the bucket, so a client's long-run rate is exact
 * and chunks stay large. */
size_t rl_take(struct rl_bucket *b, size_t want, uint64_t *wait_ns);
/* Gives back bytes granted but not sent. */
void rl_refund(struct rl_bucket *b, size_t n);

/* Calls @fn(@arg) on the timer thread in @delay_ns. The timer must not be armed already. */
void rl_timer_arm(struct rl *rl, struct rl_timer *t, uint64_t delay_ns, void (*fn)(void *),
                  void *arg);
/* Disarms @t; on return @fn is neither running nor going to run for it. */
void rl_timer_cancel(struct rl *rl, struct rl_timer *t);

#endif
