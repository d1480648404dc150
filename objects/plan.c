/*
 * plan.c: the read plans' front (plan.h). planner_post() checks a plan's body and hands its
 * keys to the cache's plans (cache/plan.c); the prefetch threads, as many as --plan-requests,
 * each take the next entry the plans allow (bytes and entries ahead of the reader, within the
 * plan's share of the cache) and make that object cached (cache_prefetch_plan(): lookup and
 * runs on the cache's plan threads, never the workers). The readers' GETs move the plans on
 * (s3/read.c); nothing here waits for them except through plans_take().
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "backends/backend.h"
#include "cache/cache.h"
#include "cache/plan.h"
#include "lib/conf.h"
#include "lib/hex.h"
#include "lib/json.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "plan.h"

#define PLANNER_WAIT_MS 1000 /* a thread with nothing to do looks again (idle plans go) */
#define PLANNER_NICE 10      /* below the serving threads: a prefetch never slows a hit */

struct planner {
    struct cache *c;
    struct plans *plans;
    pthread_mutex_t mu; /* the threads' start (with the first plan: none while unused) */
    pthread_t *threads;
    unsigned nthreads, want;
    volatile int stop;
};

static void *planner_thread(void *arg)
{
    struct planner *pr = arg;
    /* A prefetch of what is cached already costs a lookup; where the cores are the bound
     * (an epoch of hits beside it) the readers come first. */
    (void)setpriority(PRIO_PROCESS, (id_t)gettid(), PLANNER_NICE);
    while (!__atomic_load_n(&pr->stop, __ATOMIC_RELAXED)) {
        struct plan_ticket t;
        if (!plans_take(pr->plans, PLANNER_WAIT_MS, &t))
            continue;
        enum cache_outcome how = CACHE_MISS;
        uint64_t size = 0;
        int rc = cache_prefetch_plan(pr->c, t.bucket, t.key, &how, &size, &pr->stop);
        if (rc && rc != -ECANCELED)
            log_debug("plan: prefetching %s/%s: %s", t.bucket, t.key, s3c_strerror(rc));
        plans_done(pr->plans, &t, rc, size, !rc && how == CACHE_HIT);
    }
    return NULL;
}

int planner_new(const struct conf *cf, struct cache *c, struct planner **out)
{
    *out = NULL;
    struct plans *plans = cache_plans(c);
    if (!plans)
        return 0;
    struct planner *pr = calloc(1, sizeof(*pr));
    if (!pr)
        return -ENOMEM;
    pr->c = c;
    pr->plans = plans;
    pthread_mutex_init(&pr->mu, NULL);
    pr->want = (unsigned)S3C_MIN(S3C_MAX(cf->plan_requests, 1), 1024);
    if (!(pr->threads = calloc(pr->want, sizeof(pthread_t)))) {
        planner_free(pr);
        return -ENOMEM;
    }
    *out = pr;
    return 0;
}

/* Starts the prefetch threads once (the first plan): idle ones cost the serving path (256
 * threads more cut hits 12 % in ../shared/bench/epochs). 0 or -errno. */
static int planner_start(struct planner *pr)
{
    int rc = 0;
    pthread_mutex_lock(&pr->mu);
    while (!rc && pr->nthreads < pr->want && !pr->stop) {
        rc = -pthread_create(&pr->threads[pr->nthreads], NULL, planner_thread, pr);
        pr->nthreads += !rc;
    }
    pthread_mutex_unlock(&pr->mu);
    return pr->nthreads ? 0 : rc;
}

void planner_free(struct planner *pr)
{
    if (!pr)
        return;
    pthread_mutex_lock(&pr->mu);
    __atomic_store_n(&pr->stop, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pr->mu);
    plans_stop(pr->plans);
    for (unsigned i = 0; i < pr->nthreads; i++)
        pthread_join(pr->threads[i], NULL);
    pthread_mutex_destroy(&pr->mu);
    free(pr->threads);
    free(pr);
}

/* Key @i of a plan's body: "keys_hex"[i] decoded (a key that is not UTF-8) or "keys"[i]; a
 * copy in *@out, or -S3E_INVALID_ARGUMENT with @em. */
static int body_key(const struct json *keys, const struct json *hex, size_t i, char **out,
                    struct errmsg *em)
{
    const struct json *it = hex ? &hex->items[i] : &keys->items[i];
    *out = NULL;
    if (it->type == JSON_STR) {
        if (hex ? hex_decode_str(it->str, out) : !(*out = strdup(it->str)) ? -ENOMEM : 0)
            *out = NULL;
    }
    if (*out && !backend_check_key(*out, strlen(*out)))
        return 0;
    free(*out);
    *out = NULL;
    errmsg_set(em, "\"%s\"[%zu] is not a valid key", hex ? "keys_hex" : "keys", i);
    return -S3E_INVALID_ARGUMENT;
}

int planner_post(struct planner *pr, const char *owner, const char *body, size_t len,
                 struct buf *out, struct errmsg *em)
{
    struct json *js = NULL;
    if (json_parse(body ? body : "", len, &js, em) || js->type != JSON_OBJ) {
        json_free(js);
        if (!em->buf[0])
            errmsg_set(em, "the body must be a JSON object");
        return -S3E_INVALID_ARGUMENT;
    }
    const char *bucket = json_get_str(js, "bucket"), *name = json_get_str(js, "name");
    const struct json *keys = json_get(js, "keys"), *hex = json_get(js, "keys_hex");
    const struct json *sz = json_get(js, "sizes");
    const struct json *list = hex ? hex : keys;
    int rc = 0;
    if (!bucket || backend_check_bucket_name(bucket))
        errmsg_set(em, "\"bucket\" must name a bucket");
    else if (json_get(js, "name") && (!name || !name[0] || strlen(name) > PLAN_NAME_MAX))
        errmsg_set(em, "\"name\" is a string of 1 to %d bytes (a job and rank)", PLAN_NAME_MAX);
    else if (!list || list->type != JSON_ARR ||
             (keys && hex && (keys->type != JSON_ARR || keys->n != hex->n)))
        errmsg_set(em, "give the keys in order: \"keys\" (strings) and/or \"keys_hex\" (the "
                       "same keys, each its bytes in hex: read instead)");
    else if (list->n > PLAN_KEYS_MAX)
        errmsg_set(em, "a plan holds at most %d keys", PLAN_KEYS_MAX);
    else if (sz && (sz->type != JSON_ARR || sz->n != list->n))
        errmsg_set(em, "\"sizes\" must be an array of numbers, one per key");
    if (em->buf[0]) {
        json_free(js);
        return -S3E_INVALID_ARGUMENT;
    }
    size_t n = list->n;
    char **k = calloc(n ? n : 1, sizeof(char *));
    uint64_t *sizes = sz ? calloc(n ? n : 1, sizeof(uint64_t)) : NULL;
    if (!k || (sz && !sizes))
        rc = -ENOMEM;
    for (size_t i = 0; !rc && i < n; i++) {
        rc = body_key(keys, hex, i, &k[i], em);
        if (!rc && sz) {
            const struct json *s = &sz->items[i];
            if (s->type != JSON_NUM || s->num < 0 || s->num > 1.8e19) {
                errmsg_set(em, "\"sizes\"[%zu] is not a size", i);
                rc = -S3E_INVALID_ARGUMENT;
            } else {
                sizes[i] = (uint64_t)s->num;
            }
        }
    }
    char id[24];
    const char *why = NULL;
    if (!rc)
        rc = planner_start(pr);
    if (!rc)
        rc = plans_put(pr->plans, owner, name ? name : "default", bucket, k, sizes, n,
                       s3c_real_ns(), id, &why);
    if (rc) {
        if (why)
            errmsg_set(em, "%s", why);
        for (size_t i = 0; k && i < n; i++)
            free(k[i]);
        free(k);
        free(sizes);
    } else {
        rc = plans_json(pr->plans, NULL, id, out);
        if (rc == -S3E_NOT_FOUND) /* cancelled meanwhile: still the answer to this POST */
            rc = buf_printf(out, "{\"plan\":\"%s\"}", id) ? -ENOMEM : 0;
        if (!rc)
            rc = buf_puts(out, "\n") ? -ENOMEM : 0;
    }
    json_free(js);
    return rc;
}
