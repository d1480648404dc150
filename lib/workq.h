/*
 * workq.h: a fixed pool of threads for work that may block (backend calls,
 * fsync, fills), so HTTP threads never do. Two priorities: live requests
 * (WORKQ_HIGH) always run before background work (WORKQ_LOW: warm-up, drain),
 * and at most half the threads ever run LOW work at once.
 */
#ifndef S3C_WORKQ_H
#define S3C_WORKQ_H

#include <stdint.h>

enum workq_prio { WORKQ_HIGH = 0, WORKQ_LOW = 1 };

struct workq;

typedef void workq_fn_f(void *arg);

int workq_new(unsigned nthreads, struct workq **out);
/* Queues @fn(@arg). Returns 0, or -ESHUTDOWN after workq_stop() began. Never blocks. */
int workq_submit(struct workq *wq, enum workq_prio prio, workq_fn_f *fn, void *arg);
/* Runs everything already queued, then joins the threads. */
void workq_free(struct workq *wq);
unsigned workq_pending(const struct workq *wq);
/* The number of threads of the pool. */
unsigned workq_threads(const struct workq *wq);
/* On a thread of a pool, while it runs a job: when that job was queued and when it started
 * (s3c_mono_ns()), so that what it wakes can tell the time it waited for a thread from the
 * time it waited for the work. Elsewhere both are 0. */
void workq_current(uint64_t *submit_ns, uint64_t *start_ns);

#endif
