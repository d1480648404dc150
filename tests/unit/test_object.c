/*
 * test_object.c: the write path of one object (objects/object.c) and the object layer's context
 * (objects/objects.c), against the fake backend with every operation (fake_be_new_full()) and a
 * real cache in a mkdtemp directory. PutObject, CopyObject and DeleteObject in both modes:
 * write-through (the backend first, then the cache adopts or forgets; a failed backend write
 * changes nothing the client could read) and write-back (a dirty entry, read through the cache,
 * on the backend only after a flush; a delete that failed keeps it). The mode is chosen once,
 * when the object layer is made; admission against the dirty limit only in write-back.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "fake_backend.h"
#include "lib/buf.h"
#include "lib/checksum.h"
#include "lib/conf.h"
#include "lib/range.h"
#include "lib/s3c.h"
#include "lib/s3err.h"
#include "lib/workq.h"
#include "objects/object.h"
#include "objects/objects.h"
#include "objects/warm.h"

#define MIB (1u << 20)

struct env {
    char dir[256];
    struct conf cf;
    struct fake_be *fb;
    struct workq *wq;
    struct cache *c;
    struct warm *w;
    struct objects *o;
};

static void env_open(struct env *e, int write_back, int with_warm)
{
    struct errmsg em = {""};
    e->cf.write_mode = write_back ? CONF_WRITE_BACK : CONF_WRITE_THROUGH;
    assert_int_equal(cache_open(&e->cf, &e->fb->be, e->wq, &e->c, &em), 0);
    if (with_warm)
        assert_int_equal(warm_new(&e->cf, &e->fb->be, e->c, e->wq, &e->w), 0);
    assert_int_equal(objects_new(&e->cf, &e->fb->be, e->c, e->w, &e->o), 0);
}

static void env_close(struct env *e)
{
    objects_free(e->o);
    warm_free(e->w);
    cache_close(e->c);
    e->o = NULL;
    e->w = NULL;
    e->c = NULL;
}

static int setup_mode(void **state, int write_back, int with_warm)
{
    struct env *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_object.XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    e->cf.cache_dir = e->dir;
    e->cf.cache_size = 256ull * MIB;
    e->cf.block_size = MIB;
    e->cf.dirty_limit = 32ull * MIB;
    e->cf.max_object_size = 8ull * MIB;
    e->cf.revalidate_after = 3600000;
    e->cf.warm_concurrency = 2;
    e->cf.drain_concurrency = 2;
    e->fb = fake_be_new_full();
    assert_int_equal(workq_new(6, &e->wq), 0);
    env_open(e, write_back, with_warm);
    *state = e;
    return 0;
}

static int setup_through(void **state) { return setup_mode(state, 0, 0); }
static int setup_through_warm(void **state) { return setup_mode(state, 0, 1); }
static int setup_back(void **state) { return setup_mode(state, 1, 0); }

static int teardown(void **state)
{
    struct env *e = *state;
    char cmd[512];
    e->fb->fail_writes = 0; /* let the drain end */
    env_close(e);
    workq_free(e->wq);
    fake_be_free(e->fb);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->dir);
    assert_int_equal(system(cmd), 0);
    free(e);
    return 0;
}

/* ---- helpers ----------------------------------------------------------------------------------- */

static unsigned char *pattern(size_t n, unsigned seed)
{
    unsigned char *d = malloc(n ? n : 1);
    assert_non_null(d);
    for (size_t i = 0; i < n; i++)
        d[i] = (unsigned char)((i * 31 + seed * 17 + (i >> 9)) % 253);
    return d;
}

/* PutObject of @len bytes of @data as the handler does it: a staged file in the cache
 * directory, digests computed, then object_put(). *@meta_out: what it answered. */
static int put(struct env *e, const char *bucket, const char *key, const void *data, size_t len,
               struct be_meta *meta_out)
{
    char path[4096];
    int fd = -1, taken = 0;
    struct be_meta m;
    struct cksum *ck;
    struct cksum_result r;
    assert_int_equal(cache_stage_open(e->c, &fd, path), 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    assert_int_equal(cksum_new(CKSUM_WANT_MD5, CKSUM_NONE, &ck), 0);
    cksum_update(ck, data, len);
    cksum_final(ck, &r);
    cksum_free(ck);
    memset(&m, 0, sizeof(m));
    m.size = len;
    m.mtime_ns = s3c_real_ns();
    snprintf(m.etag, sizeof(m.etag), "%s", r.md5_hex);
    snprintf(m.content_type, sizeof(m.content_type), "text/plain");
    int rc = object_put(e->o, bucket, key, fd, path, NULL, &m, &taken);
    close(fd);
    if (!taken) /* the caller's to unlink (upload_free() does it) */
        assert_int_equal(unlink(path), 0);
    else
        assert_int_equal(access(path, F_OK), -1); /* consumed */
    if (meta_out)
        *meta_out = m;
    return rc;
}

/* The object as the cache serves it: 0 with its bytes compared to @want (NULL: not compared),
 * or the error. */
static int read_cached(struct env *e, const char *bucket, const char *key, const void *want,
                       size_t len, struct be_meta *meta)
{
    struct be_meta m;
    int fd = -1;
    int rc = cache_open_whole(e->c, bucket, key, &fd, &m);
    if (rc)
        return rc;
    assert_int_equal(m.size, len);
    if (want && len) {
        unsigned char *got = malloc(len);
        assert_int_equal(pread(fd, got, len, 0), (ssize_t)len);
        if (memcmp(got, want, len))
            fail_msg("%s/%s: the cache serves other bytes", bucket, key);
        free(got);
    }
    if (fd >= 0)
        close(fd);
    if (meta)
        *meta = m;
    return 0;
}

static void assert_backend(struct env *e, const char *bucket, const char *key, const void *want,
                           size_t len)
{
    uint64_t n = 0;
    unsigned char *d = fake_be_data(e->fb, bucket, key, &n);
    if (!d)
        fail_msg("%s/%s is not on the backend", bucket, key);
    assert_int_equal(n, len);
    if (len && memcmp(d, want, len))
        fail_msg("%s/%s: the backend holds other bytes", bucket, key);
    free(d);
}

static int dirty_has(struct env *e, const char *bucket, const char *key)
{
    struct be_list_entry *d = NULL;
    size_t n = 0;
    int found = 0;
    assert_int_equal(cache_dirty_keys(e->c, bucket, "", &d, &n), 0);
    for (size_t i = 0; i < n; i++) {
        found |= !strcmp(d[i].key, key);
        free(d[i].key);
    }
    free(d);
    return found;
}

static void flush_all(struct env *e)
{
    struct cache_flush_result res;
    assert_int_equal(cache_flush(e->c, NULL, NULL, 20000, &res), 0);
    assert_int_equal(res.remaining_objects, 0);
}

/* ---- write-through ----------------------------------------------------------------------------- */

static void test_object_put_through(void **state)
{
    struct env *e = *state;
    size_t n = 3 * MIB + 5;
    unsigned char *d = pattern(n, 1);
    struct be_meta m, bm, cm;
    assert_int_equal(put(e, "bkt", "dir/obj", d, n, &m), 0);
    /* on the backend first, with the backend's view answered (its ETag and mtime) */
    assert_backend(e, "bkt", "dir/obj", d, n);
    assert_true(fake_be_has(e->fb, "bkt", "dir/obj", &bm));
    assert_string_equal(m.etag, bm.etag);
    assert_int_equal(m.mtime_ns, bm.mtime_ns);
    assert_int_equal(e->fb->n_put, 1);
    /* then adopted by the cache: read-after-write without asking the backend */
    unsigned gets = fake_be_gets(e->fb), heads = fake_be_heads(e->fb);
    assert_int_equal(read_cached(e, "bkt", "dir/obj", d, n, &cm), 0);
    assert_int_equal(fake_be_gets(e->fb), gets);
    assert_int_equal(fake_be_heads(e->fb), heads);
    assert_string_equal(cm.etag, bm.etag);
    assert_string_equal(cm.content_type, "text/plain");
    assert_int_equal(dirty_has(e, "bkt", "dir/obj"), 0); /* nothing left to drain */
    /* an overwrite replaces the cached version */
    unsigned char *d2 = pattern(1000, 2);
    assert_int_equal(put(e, "bkt", "dir/obj", d2, 1000, NULL), 0);
    assert_int_equal(read_cached(e, "bkt", "dir/obj", d2, 1000, NULL), 0);
    assert_backend(e, "bkt", "dir/obj", d2, 1000);
    /* an empty object */
    assert_int_equal(put(e, "bkt", "empty", "", 0, NULL), 0);
    assert_backend(e, "bkt", "empty", "", 0);
    assert_int_equal(read_cached(e, "bkt", "empty", NULL, 0, NULL), 0);
    /* without a staged file the cache only forgets: the next read goes to the backend */
    int fd = -1, taken = 1;
    char path[4096];
    struct be_meta m3 = {.size = 5};
    assert_int_equal(cache_stage_open(e->c, &fd, path), 0);
    assert_int_equal(write(fd, "hello", 5), 5);
    assert_int_equal(object_put(e->o, "bkt", "dir/obj", fd, NULL, NULL, &m3, &taken), 0);
    assert_int_equal(taken, 0);
    close(fd);
    unlink(path);
    gets = fake_be_gets(e->fb);
    assert_int_equal(read_cached(e, "bkt", "dir/obj", "hello", 5, NULL), 0);
    assert_true(fake_be_gets(e->fb) > gets);
    free(d);
    free(d2);
}

static void test_object_put_through_backend_fails(void **state)
{
    struct env *e = *state;
    unsigned char *v1 = pattern(5000, 1), *v2 = pattern(7000, 2);
    assert_int_equal(put(e, "bkt", "k", v1, 5000, NULL), 0);
    assert_int_equal(read_cached(e, "bkt", "k", v1, 5000, NULL), 0);
    /* the backend refuses: the error is answered, the staged file stays the caller's, and
     * nobody reads v2 (never stored) */
    e->fb->fail_writes = -EIO;
    assert_int_equal(put(e, "bkt", "k", v2, 7000, NULL), -EIO);
    e->fb->fail_writes = 0;
    assert_backend(e, "bkt", "k", v1, 5000);
    unsigned heads = fake_be_heads(e->fb);
    assert_int_equal(read_cached(e, "bkt", "k", v1, 5000, NULL), 0);
    assert_true(fake_be_heads(e->fb) > heads); /* the cached copy was dropped: asked again */
    assert_int_equal(dirty_has(e, "bkt", "k"), 0);
    /* a new key that failed is nowhere */
    e->fb->fail_writes = -S3E_SERVICE_UNAVAILABLE;
    assert_int_equal(put(e, "bkt", "new", v2, 7000, NULL), -S3E_SERVICE_UNAVAILABLE);
    e->fb->fail_writes = 0;
    assert_int_equal(read_cached(e, "bkt", "new", NULL, 0, NULL), -S3E_NO_SUCH_KEY);
    free(v1);
    free(v2);
}

static void test_object_copy_through(void **state)
{
    struct env *e = *state;
    unsigned char *d = pattern(300000, 3), *old = pattern(10, 4);
    struct be_meta out, src;
    struct cond_hdrs none = {0};
    fake_be_put(e->fb, "src", "a", d, 300000);
    assert_true(fake_be_has(e->fb, "src", "a", &src));
    /* the destination's cached copy is forgotten: the copy is newer */
    assert_int_equal(put(e, "dst", "b", old, 10, NULL), 0);
    assert_int_equal(read_cached(e, "dst", "b", old, 10, NULL), 0);
    assert_int_equal(object_copy(e->o, "src", "a", "dst", "b", NULL, &none, &out), 0);
    assert_int_equal(e->fb->n_copy, 1); /* server-side, on the backend */
    assert_backend(e, "dst", "b", d, 300000);
    assert_int_equal(out.size, 300000);
    assert_int_equal(read_cached(e, "dst", "b", d, 300000, NULL), 0);
    /* REPLACE: the new headers */
    struct be_meta rep = {0};
    snprintf(rep.content_type, sizeof(rep.content_type), "image/png");
    assert_int_equal(object_copy(e->o, "src", "a", "dst", "c", &rep, &none, &out), 0);
    assert_string_equal(out.content_type, "image/png");
    /* the x-amz-copy-source-if-* conditions, a "not modified" included, fail with 412 */
    char quoted[80];
    snprintf(quoted, sizeof(quoted), "\"%s\"", src.etag);
    const struct {
        struct cond_hdrs c;
        int rc;
    } conds[] = {
        {{.if_match = quoted}, 0},
        {{.if_match = "\"0123\""}, -S3E_PRECONDITION_FAILED},
        {{.if_none_match = quoted}, -S3E_PRECONDITION_FAILED},
        {{.if_none_match = "\"0123\""}, 0},
        {{.if_unmodified_since = "Sat, 01 Jan 2000 00:00:00 GMT"}, -S3E_PRECONDITION_FAILED},
        {{.if_modified_since = "Sat, 01 Jan 2050 00:00:00 GMT"}, -S3E_PRECONDITION_FAILED},
    };
    for (size_t i = 0; i < ARRAY_SIZE(conds); i++) {
        unsigned copies = e->fb->n_copy;
        int rc = object_copy(e->o, "src", "a", "dst", "cond", NULL, &conds[i].c, &out);
        if (rc != conds[i].rc)
            fail_msg("condition %zu: rc %d, want %d", i, rc, conds[i].rc);
        assert_int_equal(e->fb->n_copy, copies + (rc == 0)); /* nothing copied when it fails */
    }
    /* a missing source; a source over --max-object-size (8 MiB here) */
    assert_int_equal(object_copy(e->o, "src", "nope", "dst", "x", NULL, &none, &out),
                     -S3E_NO_SUCH_KEY);
    fake_be_put_gen(e->fb, "src", "big", 9 * MIB, 7);
    unsigned copies = e->fb->n_copy;
    assert_int_equal(object_copy(e->o, "src", "big", "dst", "x", NULL, &none, &out),
                     -S3E_ENTITY_TOO_LARGE);
    assert_int_equal(e->fb->n_copy, copies);
    assert_false(fake_be_has(e->fb, "dst", "x", NULL));
    /* the backend failing: the destination's cached copy is not trusted any more */
    e->fb->fail_writes = -EIO;
    assert_int_equal(object_copy(e->o, "src", "a", "dst", "b", NULL, &none, &out), -EIO);
    e->fb->fail_writes = 0;
    free(d);
    free(old);
}

/* Waits (20 s at most) until every warm-up job is done. */
static void warm_settle(struct env *e)
{
    for (int i = 0; i < 2000; i++) {
        struct buf b;
        buf_init(&b, 1 << 20);
        assert_int_equal(warm_status(e->w, NULL, &b), 0);
        int busy = strstr(b.p, "\"queued\"") || strstr(b.p, "\"running\"");
        buf_free(&b);
        if (!busy)
            return;
        usleep(10000);
    }
    fail_msg("warm-up jobs still running after 20 s");
}

static void test_object_copy_fetched_back(void **state)
{
    struct env *e = *state; /* write-through, with warm-up jobs */
    unsigned char *d = pattern(2 * MIB + 1, 5);
    struct cond_hdrs none = {0};
    struct be_meta out;
    fake_be_put(e->fb, "src", "a", d, 2 * MIB + 1);
    assert_int_equal(object_copy(e->o, "src", "a", "dst", "b", NULL, &none, &out), 0);
    /* the new object is fetched back into the cache in the background */
    warm_settle(e);
    unsigned gets = fake_be_gets(e->fb);
    assert_true(gets >= 1);
    assert_int_equal(read_cached(e, "dst", "b", d, 2 * MIB + 1, NULL), 0);
    assert_int_equal(fake_be_gets(e->fb), gets); /* a hit */
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(warm_status(e->w, NULL, &b), 0);
    assert_non_null(strstr(b.p, "\"state\":\"done\""));
    buf_free(&b);
    free(d);
}

static void test_object_delete_through(void **state)
{
    struct env *e = *state;
    assert_int_equal(put(e, "bkt", "k", "abc", 3, NULL), 0);
    assert_int_equal(read_cached(e, "bkt", "k", "abc", 3, NULL), 0);
    assert_int_equal(object_delete(e->o, "bkt", "k"), 0);
    assert_false(fake_be_has(e->fb, "bkt", "k", NULL));
    assert_int_equal(read_cached(e, "bkt", "k", NULL, 0, NULL), -S3E_NO_SUCH_KEY);
    assert_int_equal(object_delete(e->o, "bkt", "k"), 0); /* a key that is not there: 0 */
    /* the backend failing: the error, and the object is still there */
    assert_int_equal(put(e, "bkt", "k2", "xyz", 3, NULL), 0);
    e->fb->fail_writes = -EIO;
    assert_int_equal(object_delete(e->o, "bkt", "k2"), -EIO);
    e->fb->fail_writes = 0;
    assert_int_equal(read_cached(e, "bkt", "k2", "xyz", 3, NULL), 0);
    assert_int_equal(object_head(e->o, "bkt", "k2", &(struct be_meta){0}), 0);
}

/* ---- write-back -------------------------------------------------------------------------------- */

static void test_object_put_back(void **state)
{
    struct env *e = *state;
    size_t n = 2 * MIB + 3;
    unsigned char *d = pattern(n, 9);
    struct be_meta m, hm;
    e->fb->fail_writes = -S3E_SERVICE_UNAVAILABLE; /* the backend away: the drain waits */
    assert_int_equal(put(e, "bkt", "ckpt", d, n, &m), 0);
    /* durable in the cache, served from it, not on the backend yet */
    assert_false(fake_be_has(e->fb, "bkt", "ckpt", NULL));
    assert_int_equal(dirty_has(e, "bkt", "ckpt"), 1);
    assert_int_equal(read_cached(e, "bkt", "ckpt", d, n, NULL), 0);
    assert_int_equal(object_head(e->o, "bkt", "ckpt", &hm), 0);
    assert_string_equal(hm.etag, m.etag); /* the body's MD5, ours */
    /* the backend back: a flush puts it there */
    e->fb->fail_writes = 0;
    flush_all(e);
    assert_backend(e, "bkt", "ckpt", d, n);
    assert_int_equal(dirty_has(e, "bkt", "ckpt"), 0);
    /* write-back needs the staged file */
    int fd, taken = 0;
    char path[4096];
    struct be_meta m2 = {.size = 1};
    assert_int_equal(cache_stage_open(e->c, &fd, path), 0);
    assert_int_equal(write(fd, "x", 1), 1);
    assert_int_equal(object_put(e->o, "bkt", "x", fd, NULL, NULL, &m2, &taken), -S3E_INTERNAL);
    close(fd);
    unlink(path);
    free(d);
}

static void test_object_copy_back(void **state)
{
    struct env *e = *state;
    unsigned char *d = pattern(1 * MIB + 77, 11);
    struct be_meta src, out, got;
    struct cond_hdrs none = {0};
    e->fb->fail_writes = -S3E_SERVICE_UNAVAILABLE;
    /* the source exists only in the cache (dirty): the copy is read through it */
    assert_int_equal(put(e, "bkt", "src", d, 1 * MIB + 77, &src), 0);
    assert_int_equal(object_copy(e->o, "bkt", "src", "bkt", "dst", NULL, &none, &out), 0);
    assert_int_equal(e->fb->n_copy, 0);
    assert_int_equal(dirty_has(e, "bkt", "dst"), 1);
    assert_int_equal(read_cached(e, "bkt", "dst", d, 1 * MIB + 77, &got), 0);
    assert_string_equal(got.etag, src.etag); /* same bytes, same ETag */
    assert_string_equal(got.content_type, "text/plain");
    /* REPLACE: the headers change, the bytes and their ETag do not */
    struct be_meta rep = {0};
    snprintf(rep.content_type, sizeof(rep.content_type), "application/x-new");
    snprintf(rep.etag, sizeof(rep.etag), "ignored");
    rep.size = 1;
    assert_int_equal(object_copy(e->o, "bkt", "src", "bkt", "dst2", &rep, &none, &out), 0);
    assert_int_equal(read_cached(e, "bkt", "dst2", d, 1 * MIB + 77, &got), 0);
    assert_string_equal(got.content_type, "application/x-new");
    assert_string_equal(got.etag, src.etag);
    /* conditions and a missing source */
    struct cond_hdrs bad = {.if_match = "\"nope\""};
    assert_int_equal(object_copy(e->o, "bkt", "src", "bkt", "dst3", NULL, &bad, &out),
                     -S3E_PRECONDITION_FAILED);
    assert_int_equal(dirty_has(e, "bkt", "dst3"), 0);
    assert_int_equal(object_copy(e->o, "bkt", "nope", "bkt", "dst3", NULL, &none, &out),
                     -S3E_NO_SUCH_KEY);
    e->fb->fail_writes = 0;
    flush_all(e);
    assert_backend(e, "bkt", "dst", d, 1 * MIB + 77);
    assert_backend(e, "bkt", "dst2", d, 1 * MIB + 77);
    free(d);
}

static void test_object_delete_back(void **state)
{
    struct env *e = *state;
    e->fb->fail_writes = -S3E_SERVICE_UNAVAILABLE;
    assert_int_equal(put(e, "bkt", "k", "dirty", 5, NULL), 0);
    /* the backend cannot delete: the dirty copy stays (it was not deleted) */
    assert_int_equal(object_delete(e->o, "bkt", "k"), -S3E_SERVICE_UNAVAILABLE);
    assert_int_equal(dirty_has(e, "bkt", "k"), 1);
    assert_int_equal(read_cached(e, "bkt", "k", "dirty", 5, NULL), 0);
    /* once it can, the key is gone from both, and no drain brings it back */
    e->fb->fail_writes = 0;
    assert_int_equal(object_delete(e->o, "bkt", "k"), 0);
    assert_int_equal(dirty_has(e, "bkt", "k"), 0);
    flush_all(e);
    assert_false(fake_be_has(e->fb, "bkt", "k", NULL));
    assert_int_equal(read_cached(e, "bkt", "k", NULL, 0, NULL), -S3E_NO_SUCH_KEY);
}

/* ---- the object layer's context ---------------------------------------------------------------- */

static void test_object_mode_chosen_once(void **state)
{
    struct env *e = *state; /* made write-through */
    uint64_t admitted = 1;
    assert_int_equal(objects_write_back(e->o), 0);
    /* changing the configuration afterwards changes nothing: the mode was parsed once */
    e->cf.write_mode = CONF_WRITE_BACK;
    assert_int_equal(objects_write_back(e->o), 0);
    assert_int_equal(put(e, "bkt", "k", "abc", 3, NULL), 0);
    assert_int_equal(e->fb->n_put, 1); /* through: on the backend at once */
    assert_int_equal(dirty_has(e, "bkt", "k"), 0);
    /* write-through admits anything and reserves nothing */
    assert_int_equal(objects_admit(e->o, 1ull << 40, &admitted), 0);
    assert_int_equal(admitted, 0);
    objects_unadmit(e->o, admitted);
    /* made again in write-back: now it is, whatever the configuration says later */
    objects_free(e->o);
    assert_int_equal(objects_new(&e->cf, &e->fb->be, e->c, NULL, &e->o), 0);
    e->cf.write_mode = CONF_WRITE_THROUGH;
    assert_int_equal(objects_write_back(e->o), 1);
    e->fb->fail_writes = -S3E_SERVICE_UNAVAILABLE;
    assert_int_equal(put(e, "bkt", "k2", "def", 3, NULL), 0);
    assert_int_equal(dirty_has(e, "bkt", "k2"), 1);
    assert_false(fake_be_has(e->fb, "bkt", "k2", NULL));
    /* write-back reserves against the dirty limit (32 MiB; 3 bytes are dirty) */
    struct cache_stats cs;
    assert_int_equal(objects_admit(e->o, 20ull * MIB, &admitted), 0);
    assert_int_equal(admitted, 20ull * MIB);
    uint64_t a2 = 0;
    assert_int_equal(objects_admit(e->o, 20ull * MIB, &a2), -S3E_SLOW_DOWN);
    assert_int_equal(a2, 0);
    assert_int_equal(objects_admit(e->o, 33ull * MIB, &a2), -S3E_ENTITY_TOO_LARGE);
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.dirty_staged_bytes, 20ull * MIB);
    objects_unadmit(e->o, admitted);
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.dirty_staged_bytes, 0);
    e->fb->fail_writes = 0;
    flush_all(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_object_put_through, setup_through, teardown),
        cmocka_unit_test_setup_teardown(test_object_put_through_backend_fails, setup_through,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_object_copy_through, setup_through, teardown),
        cmocka_unit_test_setup_teardown(test_object_copy_fetched_back, setup_through_warm,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_object_delete_through, setup_through, teardown),
        cmocka_unit_test_setup_teardown(test_object_put_back, setup_back, teardown),
        cmocka_unit_test_setup_teardown(test_object_copy_back, setup_back, teardown),
        cmocka_unit_test_setup_teardown(test_object_delete_back, setup_back, teardown),
        cmocka_unit_test_setup_teardown(test_object_mode_chosen_once, setup_through, teardown),
    };
    return cmocka_run_group_tests_name("object", tests, NULL, NULL);
}
