/*
 * park.c: the registry of requests and the watch over the parked ones (park.h). Entries live
 * in shards, one per HTTP thread as it first adds one (a thread adds and removes its own
 * requests, so the serving path takes an uncontended lock); the watch thread walks every shard
 * once a second.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acct/stats.h"
#include "lib/log.h"
#include "lib/s3c.h"
#include "park.h"

#define PARK_SHARDS 64   /* HTTP threads are fewer; more share a shard */
#define PARK_NAMED_MAX 8 /* requests named per pass; the rest are counted in one line */
#define PARK_DESC_MAX 600

struct park_shard {
    pthread_mutex_t mu;
    struct park_entry *head;
};

struct park {
    unsigned magic;
#define PARK_MAGIC 0x9a7c0e11
    struct park_shard shards[PARK_SHARDS];
    uint64_t bound_ns;
    struct stats *st;
    park_describe_f *describe;
    pthread_mutex_t mu; /* the watch's state below */
    pthread_cond_t cv;
    int stop, started;
    pthread_t thread;
    struct park_counts last;
};

static _Atomic unsigned park_next_shard;
static __thread int park_my_shard = -1;

const char *park_why_name(enum park_why why)
{
    switch (why) {
    case PARK_JOB: return "a worker's job";
    case PARK_CACHE: return "the cache (the key's lookup or its fill)";
    case PARK_PEER: return "another gateway's answer";
    case PARK_RATE: return "its rate limit";
    case PARK_WAIT: return "an admin wait (a flush)";
    default: return "nothing known";
    }
}

void park_add(struct park *p, struct park_entry *e)
{
    CHECK_OBJ_NOTNULL(p, PARK_MAGIC);
    if (park_my_shard < 0)
        park_my_shard = (int)(atomic_fetch_add(&park_next_shard, 1) % PARK_SHARDS);
    struct park_shard *s = &p->shards[park_my_shard];
    atomic_store_explicit(&e->since_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&e->why, PARK_NONE, memory_order_relaxed);
    e->named_since = 0;
    e->shard = s;
    e->prev = NULL;
    pthread_mutex_lock(&s->mu);
    e->next = s->head;
    if (s->head)
        s->head->prev = e;
    s->head = e;
    pthread_mutex_unlock(&s->mu);
}

void park_remove(struct park_entry *e)
{
    struct park_shard *s = e->shard;
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    if (e->prev)
        e->prev->next = e->next;
    else
        s->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    pthread_mutex_unlock(&s->mu);
    e->prev = e->next = NULL;
    e->shard = NULL;
}

void park_enter(struct park_entry *e, enum park_why why)
{
    uint64_t now = s3c_mono_ns();
    atomic_store_explicit(&e->why, why, memory_order_relaxed);
    atomic_store_explicit(&e->since_ns, now ? now : 1, memory_order_release);
}

void park_leave(struct park_entry *e)
{
    atomic_store_explicit(&e->since_ns, 0, memory_order_release);
}

struct park_named {
    char desc[PARK_DESC_MAX];
    enum park_why why;
    uint64_t for_ms;
};

/* One pass over every shard at @now: the counts into *@out (its over_bound_total grown by the
 * parkings newly over the bound when @name, which marks them named and describes the first
 * PARK_NAMED_MAX into @named, *@nnamed of them). */
static void park_scan(struct park *p, uint64_t now, int name, struct park_counts *out,
                      struct park_named *named, unsigned *nnamed)
{
    out->parked = out->over_bound = 0;
    out->bound_ms = p->bound_ns / 1000000;
    for (unsigned i = 0; i < PARK_SHARDS; i++) {
        struct park_shard *s = &p->shards[i];
        pthread_mutex_lock(&s->mu);
        for (struct park_entry *e = s->head; e; e = e->next) {
            uint64_t since = atomic_load_explicit(&e->since_ns, memory_order_acquire);
            if (!since)
                continue;
            out->parked++;
            if (!p->bound_ns || now < since || now - since < p->bound_ns)
                continue;
            out->over_bound++;
            if (!name || e->named_since == since)
                continue;
            e->named_since = since;
            out->over_bound_total++;
            if (*nnamed < PARK_NAMED_MAX) {
                struct park_named *n = &named[(*nnamed)++];
                p->describe(e, n->desc, sizeof(n->desc));
                n->why = (enum park_why)atomic_load_explicit(&e->why, memory_order_relaxed);
                n->for_ms = (now - since) / 1000000;
            }
        }
        pthread_mutex_unlock(&s->mu);
    }
}

static void *park_watch(void *arg)
{
    struct park *p = arg;
    struct park_named *named = calloc(PARK_NAMED_MAX, sizeof(*named));
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        struct timespec ts;
        s3c_deadline(CLOCK_MONOTONIC, 1000, &ts);
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        if (p->stop)
            break;
        struct park_counts c = p->last;
        unsigned nnamed = 0;
        uint64_t before = c.over_bound_total;
        pthread_mutex_unlock(&p->mu);
        park_scan(p, s3c_mono_ns(), named != NULL, &c, named, &nnamed);
        for (unsigned i = 0; i < nnamed; i++)
            log_warn("request %s parked for %.1f s waiting for %s (--park-warn %.1f s): still "
                     "waiting",
                     named[i].desc, (double)named[i].for_ms / 1000.0, park_why_name(named[i].why),
                     (double)c.bound_ms / 1000.0);
        if (c.over_bound_total - before > nnamed)
            log_warn("%llu more requests parked past --park-warn",
                     (unsigned long long)(c.over_bound_total - before - nnamed));
        if (p->st)
            stats_set_parked(p->st, c.parked, c.over_bound, c.over_bound_total, c.bound_ms);
        pthread_mutex_lock(&p->mu);
        p->last = c;
    }
    pthread_mutex_unlock(&p->mu);
    free(named);
    return NULL;
}

int park_new(uint64_t bound_ms, struct stats *st, park_describe_f *describe, struct park **out)
{
    struct park *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->magic = PARK_MAGIC;
    p->bound_ns = bound_ms * 1000000ull;
    p->st = st;
    p->describe = describe;
    p->last.bound_ms = bound_ms;
    for (unsigned i = 0; i < PARK_SHARDS; i++)
        pthread_mutex_init(&p->shards[i].mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&p->thread, NULL, park_watch, p);
    if (rc) {
        park_free(p);
        return -rc;
    }
    p->started = 1;
    *out = p;
    return 0;
}

void park_free(struct park *p)
{
    if (!p)
        return;
    CHECK_OBJ_NOTNULL(p, PARK_MAGIC);
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    for (unsigned i = 0; i < PARK_SHARDS; i++) {
        S3C_ASSERT(!p->shards[i].head);
        pthread_mutex_destroy(&p->shards[i].mu);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    p->magic = 0;
    free(p);
}

void park_counts(struct park *p, int now, struct park_counts *out)
{
    CHECK_OBJ_NOTNULL(p, PARK_MAGIC);
    pthread_mutex_lock(&p->mu);
    *out = p->last;
    pthread_mutex_unlock(&p->mu);
    if (now)
        park_scan(p, s3c_mono_ns(), 0, out, NULL, NULL);
}

unsigned park_each(struct park *p, int (*fn)(struct park_entry *e, void *cls), void *cls)
{
    CHECK_OBJ_NOTNULL(p, PARK_MAGIC);
    unsigned woken = 0;
    for (unsigned i = 0; i < PARK_SHARDS; i++) {
        struct park_shard *s = &p->shards[i];
        pthread_mutex_lock(&s->mu);
        for (struct park_entry *e = s->head; e; e = e->next)
            if (atomic_load_explicit(&e->since_ns, memory_order_acquire))
                woken += (unsigned)fn(e, cls);
        pthread_mutex_unlock(&s->mu);
    }
    return woken;
}
