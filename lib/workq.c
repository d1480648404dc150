/*
 * workq.c: a fixed pool of threads for blocking work (lib/workq.h). Two
 * FIFO queues; HIGH is always taken first, and LOW work may occupy at most
 * half the threads (at least one), so live requests always find a thread.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "s3c.h"
#include "workq.h"

struct workq_item {
    struct workq_item *next;
    workq_fn_f *fn;
    void *arg;
    int low;
    uint64_t submit_ns; /* when it was queued */
};

/* The job the calling pool thread runs (workq_current()). */
static __thread uint64_t workq_cur_submit_ns, workq_cur_start_ns;

struct workq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct workq_item *head[2], *tail[2];
    unsigned pending;
    unsigned low_running, low_max;
    int stopping;
    unsigned nthreads;
    pthread_t *threads;
};

static struct workq_item *workq_take(struct workq *wq)
{
    for (int p = 0; p < 2; p++) {
        if (p == WORKQ_LOW && wq->low_running >= wq->low_max)
            break;
        struct workq_item *it = wq->head[p];
        if (!it)
            continue;
        wq->head[p] = it->next;
        if (!wq->head[p])
            wq->tail[p] = NULL;
        wq->pending--;
        it->next = NULL;
        it->low = p == WORKQ_LOW;
        if (it->low)
            wq->low_running++;
        return it;
    }
    return NULL;
}

static void *workq_main(void *arg)
{
    struct workq *wq = arg;
    pthread_mutex_lock(&wq->mu);
    for (;;) {
        struct workq_item *it = workq_take(wq);
        if (!it) {
            if (wq->stopping && !wq->pending)
                break;
            pthread_cond_wait(&wq->cv, &wq->mu);
            continue;
        }
        int low = it->low;
        pthread_mutex_unlock(&wq->mu);
        workq_cur_submit_ns = it->submit_ns;
        workq_cur_start_ns = s3c_mono_ns();
        it->fn(it->arg);
        workq_cur_submit_ns = workq_cur_start_ns = 0;
        free(it);
        pthread_mutex_lock(&wq->mu);
        if (low) {
            wq->low_running--;
            pthread_cond_signal(&wq->cv);
        }
    }
    pthread_mutex_unlock(&wq->mu);
    return NULL;
}

int workq_new(unsigned nthreads, struct workq **out)
{
    struct workq *wq = calloc(1, sizeof(*wq));
    if (!wq)
        return -ENOMEM;
    if (nthreads == 0)
        nthreads = 1;
    pthread_mutex_init(&wq->mu, NULL);
    pthread_cond_init(&wq->cv, NULL);
    wq->low_max = nthreads / 2 ? nthreads / 2 : 1;
    wq->threads = calloc(nthreads, sizeof(pthread_t));
    if (!wq->threads) {
        free(wq);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < nthreads; i++) {
        int rc = pthread_create(&wq->threads[i], NULL, workq_main, wq);
        if (rc) {
            wq->nthreads = i;
            workq_free(wq);
            return -rc;
        }
        wq->nthreads = i + 1;
    }
    *out = wq;
    return 0;
}

int workq_submit(struct workq *wq, enum workq_prio prio, workq_fn_f *fn, void *arg)
{
    struct workq_item *it = malloc(sizeof(*it));
    if (!it)
        return -ENOMEM;
    it->next = NULL;
    it->fn = fn;
    it->arg = arg;
    it->submit_ns = s3c_mono_ns();
    pthread_mutex_lock(&wq->mu);
    if (wq->stopping) {
        pthread_mutex_unlock(&wq->mu);
        free(it);
        return -ESHUTDOWN;
    }
    int p = prio == WORKQ_LOW ? 1 : 0;
    if (wq->tail[p])
        wq->tail[p]->next = it;
    else
        wq->head[p] = it;
    wq->tail[p] = it;
    wq->pending++;
    pthread_cond_signal(&wq->cv);
    pthread_mutex_unlock(&wq->mu);
    return 0;
}

unsigned workq_pending(const struct workq *wq)
{
    return __atomic_load_n(&wq->pending, __ATOMIC_RELAXED);
}

void workq_free(struct workq *wq)
{
    if (!wq)
        return;
    pthread_mutex_lock(&wq->mu);
    wq->stopping = 1;
    pthread_cond_broadcast(&wq->cv);
    pthread_mutex_unlock(&wq->mu);
    for (unsigned i = 0; i < wq->nthreads; i++)
        pthread_join(wq->threads[i], NULL);
    free(wq->threads);
    pthread_mutex_destroy(&wq->mu);
    pthread_cond_destroy(&wq->cv);
    free(wq);
}

unsigned workq_threads(const struct workq *wq)
{
    return wq->nthreads;
}

void workq_current(uint64_t *submit_ns, uint64_t *start_ns)
{
    *submit_ns = workq_cur_submit_ns;
    *start_ns = workq_cur_start_ns;
}
