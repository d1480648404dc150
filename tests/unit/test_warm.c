/*
 * test_warm.c: warm-up jobs (objects/warm.c) against fake_be_new_full() and a real cache in a
 * mkdtemp directory: a prefix, a key list and a manifest (warmed in its order), pin and fit
 * (what is left out, what would not fit), cancel, the progress counters (objects, bytes, cached
 * already, errors), bad requests, the bounded history, and the job files: saved, read back
 * after a restart, a job that was running then shown as "interrupted". Jobs are waited for
 * with a bounded poll of warm_status(), never a sleep-then-assert.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "fake_backend.h"
#include "lib/buf.h"
#include "lib/conf.h"
#include "lib/json.h"
#include "lib/s3c.h"
#include "lib/s3err.h"
#include "lib/workq.h"
#include "objects/warm.h"

#define MIB (1u << 20)

struct env {
    char dir[256];
    struct conf cf;
    struct fake_be *fb;
    struct workq *wq;
    struct cache *c;
    struct warm *w;
    unsigned workers;
};

static void env_open(struct env *e)
{
    struct errmsg em = {""};
    assert_int_equal(workq_new(e->workers, &e->wq), 0);
    assert_int_equal(cache_open(&e->cf, &e->fb->be, e->wq, &e->c, &em), 0);
    assert_int_equal(warm_new(&e->cf, &e->fb->be, e->c, e->wq, &e->w), 0);
}

static void env_close(struct env *e)
{
    warm_free(e->w);
    cache_close(e->c);
    workq_free(e->wq);
    e->w = NULL;
    e->c = NULL;
    e->wq = NULL;
}

static int setup_with(void **state, uint64_t cache_size, int concurrency)
{
    struct env *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_warm.XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    e->cf.cache_dir = e->dir;
    e->cf.cache_size = cache_size;
    e->cf.block_size = MIB;
    e->cf.revalidate_after = 3600000;
    e->cf.warm_concurrency = concurrency;
    e->workers = 6;
    e->fb = fake_be_new_full();
    env_open(e);
    *state = e;
    return 0;
}

static int setup(void **state) { return setup_with(state, 256ull * MIB, 2); }
static int setup_serial(void **state) { return setup_with(state, 256ull * MIB, 1); }
static int setup_small(void **state) { return setup_with(state, 8ull * MIB, 2); }

static int teardown(void **state)
{
    struct env *e = *state;
    char cmd[512];
    fake_be_hold(e->fb, 0);
    env_close(e);
    fake_be_free(e->fb);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->dir);
    assert_int_equal(system(cmd), 0);
    free(e);
    return 0;
}

/* ---- jobs --------------------------------------------------------------------------------------- */

struct jv {
    char state[32], message[256], err_key[64], err[64];
    uint64_t total, done, cached, bytes_total, bytes_done, errors, skipped;
    int pin;
};

static void jv_from(const struct json *j, struct jv *v)
{
    memset(v, 0, sizeof(*v));
    snprintf(v->state, sizeof(v->state), "%s", json_get_str(j, "state"));
    snprintf(v->message, sizeof(v->message), "%s",
             json_get_str(j, "message") ? json_get_str(j, "message") : "");
    v->total = (uint64_t)json_get_num(j, "objects_total", -1);
    v->done = (uint64_t)json_get_num(j, "objects_done", -1);
    v->cached = (uint64_t)json_get_num(j, "objects_cached_already", -1);
    v->bytes_total = (uint64_t)json_get_num(j, "bytes_total", -1);
    v->bytes_done = (uint64_t)json_get_num(j, "bytes_done", -1);
    v->errors = (uint64_t)json_get_num(j, "errors_total", -1);
    v->skipped = (uint64_t)json_get_num(j, "objects_skipped", 0);
    v->pin = json_get(j, "pin") && json_get(j, "pin")->b;
    const struct json *errs = json_get(j, "errors");
    assert_non_null(errs);
    if (errs->n) {
        snprintf(v->err_key, sizeof(v->err_key), "%s", json_get_str(&errs->items[0], "key"));
        snprintf(v->err, sizeof(v->err), "%s", json_get_str(&errs->items[0], "error"));
    }
}

/* GET /_/warm/ID: 0 with *@v, or the error. */
static int status(struct env *e, const char *id, struct jv *v)
{
    struct buf b;
    struct json *js = NULL;
    struct errmsg em;
    buf_init(&b, 1 << 20);
    int rc = warm_status(e->w, id, &b);
    if (!rc) {
        assert_int_equal(json_parse(b.p, b.len, &js, &em), 0);
        assert_string_equal(json_get_str(js, "job"), id);
        jv_from(js, v);
        json_free(js);
    }
    buf_free(&b);
    return rc;
}

/* POST /_/warm: the new job's ID into @id. */
static int start(struct env *e, const char *body, char id[32])
{
    struct buf out;
    struct errmsg em = {""};
    buf_init(&out, 4096);
    int rc = warm_start(e->w, body, strlen(body), &out, &em);
    if (!rc) {
        struct json *js = NULL;
        assert_int_equal(json_parse(out.p, out.len, &js, &em), 0);
        snprintf(id, 32, "%s", json_get_str(js, "job"));
        json_free(js);
    }
    buf_free(&out);
    return rc;
}

/* Waits (30 s at most) until job @id has ended; its view in *@v. */
static void wait_job(struct env *e, const char *id, struct jv *v)
{
    for (int i = 0; i < 3000; i++) {
        assert_int_equal(status(e, id, v), 0);
        if (strcmp(v->state, "queued") && strcmp(v->state, "running"))
            return;
        usleep(10000);
    }
    fail_msg("job %s still %s after 30 s", id, v->state);
}

static void put_objects(struct env *e, const char *prefix, unsigned n, uint64_t size)
{
    for (unsigned i = 0; i < n; i++) {
        char k[64];
        snprintf(k, sizeof(k), "%s%u", prefix, i);
        fake_be_put_gen(e->fb, "bkt", k, size + i, i + 1);
    }
}

/* Whether (bkt, @key) was whole in the cache: read without the backend being asked (the read
 * itself caches it: a check, not a probe). */
static int cached(struct env *e, const char *key)
{
    unsigned gets = fake_be_gets(e->fb), heads = fake_be_heads(e->fb);
    struct be_meta m;
    int fd = -1;
    assert_int_equal(cache_open_whole(e->c, "bkt", key, &fd, &m), 0);
    if (fd >= 0)
        close(fd);
    return fake_be_gets(e->fb) == gets && fake_be_heads(e->fb) == heads;
}

/* ---- tests -------------------------------------------------------------------------------------- */

static void test_warm_prefix_and_counters(void **state)
{
    struct env *e = *state;
    char id[32], id2[32];
    struct jv v;
    put_objects(e, "train/", 5, 300000);
    fake_be_put(e->fb, "bkt", "val/0", "x", 1);
    fake_be_put(e->fb, "bkt", "trainer", "y", 1); /* "train/" is not "trainer" */
    assert_int_equal(start(e, "{\"bucket\":\"bkt\",\"prefix\":\"train/\"}", id), 0);
    wait_job(e, id, &v);
    uint64_t bytes = 5 * 300000 + 10;
    assert_string_equal(v.state, "done");
    assert_int_equal(v.total, 5);
    assert_int_equal(v.done, 5);
    assert_int_equal(v.cached, 0);
    assert_int_equal(v.bytes_total, bytes);
    assert_int_equal(v.bytes_done, bytes);
    assert_int_equal(v.errors, 0);
    assert_int_equal(v.pin, 0);
    assert_string_equal(v.message, "");
    for (unsigned i = 0; i < 5; i++) {
        char k[32];
        snprintf(k, sizeof(k), "train/%u", i);
        if (!cached(e, k))
            fail_msg("%s was not warmed", k);
    }
    assert_false(cached(e, "val/0"));
    assert_false(cached(e, "trainer"));
    /* the same again: everything was cached already */
    unsigned gets = fake_be_gets(e->fb);
    assert_int_equal(start(e, "{\"bucket\":\"bkt\",\"prefix\":\"train/\"}", id2), 0);
    assert_string_not_equal(id, id2);
    wait_job(e, id2, &v);
    assert_string_equal(v.state, "done");
    assert_int_equal(v.cached, 5);
    assert_int_equal(v.done, 5);
    assert_int_equal(v.bytes_done, bytes);
    assert_int_equal(fake_be_gets(e->fb), gets);
    /* an empty prefix is done at once */
    assert_int_equal(start(e, "{\"bucket\":\"bkt\",\"prefix\":\"none/\"}", id2), 0);
    wait_job(e, id2, &v);
    assert_string_equal(v.state, "done");
    assert_int_equal(v.total, 0);
    /* GET /_/warm lists them, newest first */
    struct buf b;
    struct json *js;
    struct errmsg em;
    buf_init(&b, 1 << 20);
    assert_int_equal(warm_status(e->w, NULL, &b), 0);
    assert_int_equal(json_parse(b.p, b.len, &js, &em), 0);
    const struct json *jobs = json_get(js, "jobs");
    assert_int_equal(jobs->n, 3);
    assert_string_equal(json_get_str(&jobs->items[2], "job"), id);
    json_free(js);
    buf_free(&b);
    assert_int_equal(status(e, "nosuchjob", &v), -S3E_NOT_FOUND);
}

static void test_warm_keys_and_errors(void **state)
{
    struct env *e = *state;
    char id[32];
    struct jv v;
    put_objects(e, "k", 3, 1000);
    assert_int_equal(start(e, "{\"bucket\":\"bkt\",\"keys\":[\"k0\",\"missing\",\"k2\"]}", id), 0);
    wait_job(e, id, &v);
    /* one key that fails fails the job, the others are warmed all the same */
    assert_string_equal(v.state, "failed");
    assert_int_equal(v.total, 3);
    assert_int_equal(v.done, 2);
    assert_int_equal(v.errors, 1);
    assert_string_equal(v.err_key, "missing");
    assert_string_equal(v.err, "NoSuchKey");
    assert_true(cached(e, "k0"));
    assert_true(cached(e, "k2"));
    assert_false(cached(e, "k1"));
    /* transient backend trouble is retried; lasting trouble is an error per key */
    fake_be_put(e->fb, "bkt", "t", "t", 1);
    e->fb->fail_all = -S3E_SERVICE_UNAVAILABLE;
    assert_int_equal(start(e, "{\"bucket\":\"bkt\",\"keys\":[\"t\"]}", id), 0);
    wait_job(e, id, &v);
    e->fb->fail_all = 0;
    assert_string_equal(v.state, "failed");
    assert_string_equal(v.err, "ServiceUnavailable");
    /* warm_object(): a job of one key, listed like the others */
    unsigned gets = fake_be_gets(e->fb);
    assert_int_equal(warm_object(e->w, "bkt", "t"), 0);
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(warm_status(e->w, NULL, &b), 0);
    assert_non_null(strstr(b.p, "\"objects_total\":1"));
    buf_free(&b);
    for (int busy = 1, i = 0; busy && i < 3000; i++) { /* until every job has ended */
        buf_init(&b, 1 << 20);
        assert_int_equal(warm_status(e->w, NULL, &b), 0);
        busy = strstr(b.p, "\"queued\"") || strstr(b.p, "\"running\"");
        buf_free(&b);
        usleep(busy ? 10000 : 0);
    }
    assert_true(fake_be_gets(e->fb) > gets);
    assert_true(cached(e, "t"));
}

static void test_warm_manifest_order(void **state)
{
    struct env *e = *state; /* one object at a time: the manifest's order is the fetch order */
    char id[32];
    struct jv v;
    put_objects(e, "s", 4, 2 * MIB + 1); /* 3 blocks each */
    static const char manifest[] = "s3\r\ns1\n\ns0\ns2"; /* CRLF, a blank line, no last LF */
    fake_be_put(e->fb, "bkt", "epoch.list", manifest, sizeof(manifest) - 1);
    unsigned first = fake_be_gets(e->fb);
    assert_int_equal(start(e, "{\"bucket\":\"bkt\",\"manifest\":\"epoch.list\",\"pin\":true}",
                           id),
                     0);
    wait_job(e, id, &v);
    assert_string_equal(v.state, "done");
    assert_int_equal(v.total, 4);
    assert_int_equal(v.done, 4);
    assert_int_equal(v.pin, 1);
    /* the manifest first, then its keys in its order */
    static const char *const order[] = {"epoch.list", "s3", "s1", "s0", "s2"};
    size_t k = 0;
    unsigned n = fake_be_gets(e->fb);
    for (unsigned i = first; i < n && i < FAKE_GET_LOG; i++) {
        const char *key = e->fb->get_log[i].key;
        if (k && !strcmp(key, order[k - 1]))
            continue; /* another block of the same object */
        if (k == ARRAY_SIZE(order) || strcmp(key, order[k]))
            fail_msg("fetch %u was %s, want %s", i, key, k < ARRAY_SIZE(order) ? order[k] : "-");
        k++;
    }
    assert_int_equal(k, ARRAY_SIZE(order));
    /* pinned: all four */
    struct cache_stats cs;
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.pinned_objects, 4);
    /* POST /_/unpin takes the same sources */
    uint64_t unpinned = 0;
    struct errmsg em = {""};
    static const char body[] = "{\"bucket\":\"bkt\",\"manifest\":\"epoch.list\"}";
    assert_int_equal(warm_unpin(e->w, body, sizeof(body) - 1, &unpinned, &em), 0);
    assert_int_equal(unpinned, 4);
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.pinned_objects, 0);
    /* a manifest that is not there fails the job, saying so */
    assert_int_equal(start(e, "{\"bucket\":\"bkt\",\"manifest\":\"nope.list\"}", id), 0);
    wait_job(e, id, &v);
    assert_string_equal(v.state, "failed");
    assert_string_equal(v.err_key, "nope.list");
    assert_string_equal(v.message, "NoSuchKey");
}

static void test_warm_fit(void **state)
{
    struct env *e = *state; /* an 8 MiB cache */
    char id[32];
    struct jv v;
    put_objects(e, "big/", 5, 3 * MIB);
    /* 15 MiB do not fit: refused whole, saying how to warm what fits */
    assert_int_equal(start(e, "{\"bucket\":\"bkt\",\"prefix\":\"big/\"}", id), 0);
    wait_job(e, id, &v);
    assert_string_equal(v.state, "failed");
    assert_non_null(strstr(v.message, "only 8388608 fit"));
    assert_non_null(strstr(v.message, "\"fit\":true"));
    assert_int_equal(v.done, 0);
    /* "fit": the first ones in order while they fit, the rest reported skipped */
    assert_int_equal(start(e, "{\"bucket\":\"bkt\",\"prefix\":\"big/\",\"fit\":true}", id), 0);
    wait_job(e, id, &v);
    assert_string_equal(v.state, "done");
    assert_int_equal(v.total, 2);
    assert_int_equal(v.skipped, 3);
    assert_int_equal(v.done, 2);
    assert_int_equal(v.bytes_total, 6 * MIB + 1);
    assert_true(cached(e, "big/0"));
    assert_true(cached(e, "big/1"));
    /* pinned sets may use half the cache: one object of 3 MiB */
    assert_int_equal(start(e, "{\"bucket\":\"bkt\",\"prefix\":\"big/\",\"fit\":true,\"pin\":true}",
                           id),
                     0);
    wait_job(e, id, &v);
    assert_string_equal(v.state, "done");
    assert_int_equal(v.total, 1);
    assert_int_equal(v.skipped, 4);
    assert_int_equal(start(e, "{\"bucket\":\"bkt\",\"prefix\":\"big/\",\"pin\":true}", id), 0);
    wait_job(e, id, &v);
    assert_string_equal(v.state, "failed");
    assert_non_null(strstr(v.message, "pinned bytes may use half the cache"));
}

static void test_warm_cancel(void **state)
{
    struct env *e = *state;
    char id[32];
    struct jv v;
    put_objects(e, "c", 20, 100000);
    fake_be_hold(e->fb, 1);
    assert_int_equal(start(e, "{\"bucket\":\"bkt\",\"prefix\":\"c\"}", id), 0);
    assert_int_equal(fake_be_wait_held(e->fb, 1), 0); /* a key in flight */
    assert_int_equal(status(e, id, &v), 0);
    assert_string_equal(v.state, "running");
    assert_int_equal(v.total, 20);
    assert_int_equal(v.bytes_total, 20 * 100000 + 190);
    assert_int_equal(v.done, 0);
    assert_int_equal(warm_cancel(e->w, id), 0);
    fake_be_hold(e->fb, 0);
    wait_job(e, id, &v);
    assert_string_equal(v.state, "cancelled");
    assert_true(v.done < 20);
    assert_int_equal(v.errors, 0); /* what the cancel cut short is no error */
    assert_int_equal(warm_cancel(e->w, "nosuchjob"), -S3E_NOT_FOUND);
    assert_int_equal(warm_cancel(e->w, id), 0); /* a finished job: nothing to do */
    assert_int_equal(status(e, id, &v), 0);
    assert_string_equal(v.state, "cancelled");
}

static void test_warm_bad_requests(void **state)
{
    struct env *e = *state;
    static const struct { const char *body; int rc; const char *msg; } cases[] = {
        {"", -S3E_INVALID_ARGUMENT, NULL},
        {"{", -S3E_INVALID_ARGUMENT, NULL},
        {"[]", -S3E_INVALID_ARGUMENT, "\"bucket\""},
        {"{\"prefix\":\"a\"}", -S3E_INVALID_ARGUMENT, "\"bucket\" must name a bucket"},
        {"{\"bucket\":\"B!\",\"prefix\":\"a\"}", -S3E_INVALID_ARGUMENT, "\"bucket\""},
        {"{\"bucket\":\"bkt\"}", -S3E_INVALID_ARGUMENT, "exactly one of"},
        {"{\"bucket\":\"bkt\",\"prefix\":\"a\",\"keys\":[\"a\"]}", -S3E_INVALID_ARGUMENT,
         "exactly one of"},
        {"{\"bucket\":\"bkt\",\"keys\":\"a\"}", -S3E_INVALID_ARGUMENT, "array of strings"},
        {"{\"bucket\":\"bkt\",\"keys\":[\"ok\",\"../x\"]}", -S3E_INVALID_ARGUMENT,
         "\"keys\"[1] is not a valid key"},
        {"{\"bucket\":\"bkt\",\"keys\":[\"ok\",7]}", -S3E_INVALID_ARGUMENT, "\"keys\"[1]"},
        {"{\"bucket\":\"bkt\",\"manifest\":\"/abs\"}", -S3E_INVALID_ARGUMENT,
         "\"manifest\" is not a valid key"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct buf out;
        struct errmsg em = {""};
        buf_init(&out, 4096);
        int rc = warm_start(e->w, cases[i].body, strlen(cases[i].body), &out, &em);
        if (rc != cases[i].rc || (cases[i].msg && !strstr(em.buf, cases[i].msg)))
            fail_msg("case %zu (%s): rc %d \"%s\"", i, cases[i].body, rc, em.buf);
        buf_free(&out);
    }
    /* nothing was started */
    struct buf b;
    buf_init(&b, 4096);
    assert_int_equal(warm_status(e->w, NULL, &b), 0);
    assert_string_equal(b.p, "{\"jobs\":[]}\n");
    buf_free(&b);
    /* with one worker a warm-up would starve live requests: refused */
    env_close(e);
    e->workers = 1;
    env_open(e);
    struct buf out;
    struct errmsg em = {""};
    static const char body[] = "{\"bucket\":\"bkt\",\"prefix\":\"a\"}";
    buf_init(&out, 4096);
    assert_int_equal(warm_start(e->w, body, sizeof(body) - 1, &out, &em),
                     -S3E_INVALID_REQUEST);
    assert_non_null(strstr(em.buf, "at least 2 worker threads"));
    buf_free(&out);
}

/* Releases the fake's held gets after 50 ms (warm_free() has set the cancel by then). */
static void *release_later(void *arg)
{
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
    fake_be_hold(arg, 0);
    return NULL;
}

static void test_warm_persistence(void **state)
{
    struct env *e = *state;
    char done_id[32], run_id[32], path[512];
    struct jv v;
    put_objects(e, "p", 200, 1000);
    assert_int_equal(start(e, "{\"bucket\":\"bkt\",\"keys\":[\"p1\",\"p2\",\"nope\"],\"pin\":true}",
                           done_id),
                     0);
    wait_job(e, done_id, &v);
    assert_string_equal(v.state, "failed");
    assert_int_equal(v.errors, 1);
    assert_string_equal(v.err_key, "nope");
    char err_before[64];
    snprintf(err_before, sizeof(err_before), "%s", v.err);
    snprintf(path, sizeof(path), "%s/warm/%s.json", e->dir, done_id);
    assert_int_equal(access(path, F_OK), 0);
    /* a job running when the gateway stops */
    fake_be_hold(e->fb, 1);
    assert_int_equal(start(e, "{\"bucket\":\"bkt\",\"prefix\":\"p\"}", run_id), 0);
    assert_int_equal(fake_be_wait_held(e->fb, 1), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, release_later, e->fb), 0);
    env_close(e); /* cancels, waits for the keys in flight */
    pthread_join(t, NULL);
    /* after the restart: the finished job as it ended, the running one "interrupted" */
    env_open(e);
    assert_int_equal(status(e, done_id, &v), 0);
    assert_string_equal(v.state, "failed");
    assert_int_equal(v.done, 2);
    assert_int_equal(v.pin, 1);
    assert_int_equal(v.errors, 1); /* its errors read back, not reset to none */
    assert_string_equal(v.err_key, "nope");
    assert_string_equal(v.err, err_before);
    assert_int_equal(status(e, run_id, &v), 0);
    assert_string_equal(v.state, "interrupted");
    assert_non_null(strstr(v.message, "start it again"));
    assert_true(v.done < 200);
    assert_int_equal(v.total, 200);
    /* a job file left "running" by a crash reads back "interrupted" too; a file that is no
     * job, and a temp file, are ignored */
    char crash[512];
    FILE *f;
    snprintf(crash, sizeof(crash), "%s/warm/0000000a0001.json", e->dir);
    assert_non_null(f = fopen(crash, "w"));
    fputs("{\"job\":\"0000000a0001\",\"state\":\"running\",\"bucket\":\"bkt\",\"objects_total\":9,"
          "\"objects_done\":4,\"bytes_total\":900,\"bytes_done\":400,\"errors\":[]}",
          f);
    fclose(f);
    snprintf(crash, sizeof(crash), "%s/warm/junk.json", e->dir);
    assert_non_null(f = fopen(crash, "w"));
    fputs("not json", f);
    fclose(f);
    snprintf(crash, sizeof(crash), "%s/warm/.0000000a0002.tmp", e->dir);
    assert_non_null(f = fopen(crash, "w"));
    fclose(f);
    env_close(e);
    env_open(e);
    assert_int_equal(status(e, "0000000a0001", &v), 0);
    assert_string_equal(v.state, "interrupted");
    assert_int_equal(v.total, 9);
    assert_int_equal(v.done, 4);
    assert_int_equal(v.bytes_done, 400);
    assert_int_equal(status(e, run_id, &v), 0);
    assert_string_equal(v.state, "interrupted");
    assert_int_equal(status(e, done_id, &v), 0);
    assert_string_equal(v.state, "failed");
}

static void test_warm_history_bounded(void **state)
{
    struct env *e = *state;
    char first[32], id[32], path[512];
    struct jv v;
    fake_be_put(e->fb, "bkt", "h", "x", 1);
    assert_int_equal(start(e, "{\"bucket\":\"bkt\",\"keys\":[\"h\"]}", first), 0);
    wait_job(e, first, &v);
    snprintf(path, sizeof(path), "%s/warm/%s.json", e->dir, first);
    assert_int_equal(access(path, F_OK), 0);
    for (int i = 0; i < 64; i++) {
        assert_int_equal(start(e, "{\"bucket\":\"bkt\",\"keys\":[\"h\"]}", id), 0);
        wait_job(e, id, &v);
    }
    /* 64 jobs are kept: the oldest finished one went, its file too */
    assert_int_equal(status(e, first, &v), -S3E_NOT_FOUND);
    assert_int_equal(access(path, F_OK), -1);
    struct buf b;
    struct json *js;
    struct errmsg em;
    buf_init(&b, 1 << 20);
    assert_int_equal(warm_status(e->w, NULL, &b), 0);
    assert_int_equal(json_parse(b.p, b.len, &js, &em), 0);
    assert_int_equal(json_get(js, "jobs")->n, 64);
    json_free(js);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_warm_prefix_and_counters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_warm_keys_and_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_warm_manifest_order, setup_serial, teardown),
        cmocka_unit_test_setup_teardown(test_warm_fit, setup_small, teardown),
        cmocka_unit_test_setup_teardown(test_warm_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_warm_bad_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_warm_persistence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_warm_history_bounded, setup, teardown),
    };
    return cmocka_run_group_tests_name("warm", tests, NULL, NULL);
}
