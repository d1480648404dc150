/*
 * prefetch_priv.h: what prefetch.c offers members.c: a waiter for threads that may block.
 */
#ifndef S3C_CACHE_PREFETCH_PRIV_H
#define S3C_CACHE_PREFETCH_PRIV_H

#include "cache_priv.h"

/* prefetch.c: a waiter for threads that may block (workers): resume() signals a condition
 * variable that cache_pwait_wait() sleeps on (once per suspend). */
struct cache_pwait {
    struct cache_waiter w;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int woken;
};
void cache_pwait_init(struct cache_pwait *p);
void cache_pwait_wait(struct cache_pwait *p);
void cache_pwait_destroy(struct cache_pwait *p);

#endif
