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
#include "objects/multipart.h"
#include "objects/object.h"
#include "objects/objects.h"
#include "objects/warm.h"
#include "objects/write_priv.h"

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
    assert_int_equal(objects_new(&e->cf, &e->fb->be, e->c, e->w, &e->o, &em), 0);
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
    assert_int_equal(drain_dirty_keys(e->o->dr, bucket, "", &d, &n), 0);
    for (size_t i = 0; i < n; i++) {
        found |= !strcmp(d[i].key, key);
        free(d[i].key);
    }
    free(d);
    return found;
}

static void flush_all(struct env *e)
{
    struct drain_flush_result res;
    assert_int_equal(drain_flush(e->o->dr, NULL, NULL, 20000, &res), 0);
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

/* ---- cluster notices ------------------------------------------------------------------------- */

/* A fake cluster: records each notice's changes and ends it at once (from the caller's thread,
 * which the hook allows). */
struct fake_cluster {
    int notices;
    size_t changes;
    char keys[8][32];
    int rewarm[8], stored[8];
};

static int fake_keep(void *cls, const char *bucket, const char *key)
{
    return strcmp(key, "not-mine") != 0;
}

static int fake_notify(void *cls, const struct objects_change *ch, size_t n,
                       objects_notified_f *done, void *done_cls)
{
    struct fake_cluster *fc = cls;
    fc->notices++;
    for (size_t i = 0; i < n; i++, fc->changes++)
        if (fc->changes < 8) {
            snprintf(fc->keys[fc->changes], sizeof(fc->keys[0]), "%s/%s", ch[i].bucket,
                     ch[i].key ? ch[i].key : "*");
            fc->rewarm[fc->changes] = ch[i].rewarm;
            fc->stored[fc->changes] = ch[i].stored;
        }
    done(done_cls);
    return 1;
}

static void notified(void *cls)
{
    (*(int *)cls)++;
}

static void test_object_notice_batched(void **state)
{
    struct env *e = *state;
    struct fake_cluster fc = {0};
    struct objects_peer_ops ops = {.keep = fake_keep, .notify = fake_notify, .cls = &fc};
    objects_set_peer_ops(e->o, &ops);
    /* no notice open: each change is told at once (and waited for) */
    assert_int_equal(put(e, "bkt", "a", "abc", 3, NULL), 0);
    assert_int_equal(fc.notices, 1);
    assert_string_equal(fc.keys[0], "bkt/a");
    /* open: the changes of one request (a DeleteObjects) are one notice, sent at its end */
    struct objects_notice nt;
    int done = 0;
    objects_notice_begin(&nt);
    assert_int_equal(object_delete(e->o, "bkt", "a"), 0);
    assert_int_equal(object_delete(e->o, "bkt", "b"), 0);
    assert_int_equal(put(e, "bkt", "not-mine", "xyz", 3, NULL), 0);
    objects_notice_end(&nt);
    assert_int_equal(fc.notices, 1); /* nothing told yet */
    assert_int_equal(nt.n, 3);
    assert_int_equal(objects_notice_send(e->o, &nt, notified, &done), 1);
    objects_notice_free(&nt);
    assert_int_equal(done, 1);
    assert_int_equal(fc.notices, 2);
    assert_int_equal(fc.changes, 4);
    assert_string_equal(fc.keys[1], "bkt/a");
    assert_string_equal(fc.keys[2], "bkt/b");
    assert_string_equal(fc.keys[3], "bkt/not-mine");
    assert_int_equal(fc.rewarm[3], 1); /* not kept here: its owner fetches it back */
    /* each change is on the backend (write-through, deletes): older dirty copies elsewhere go */
    for (int i = 0; i < 4; i++)
        assert_int_equal(fc.stored[i], 1);
    /* an empty notice is not sent */
    objects_notice_begin(&nt);
    objects_notice_end(&nt);
    assert_int_equal(objects_notice_send(e->o, &nt, notified, &done), 0);
    objects_notice_free(&nt);
    assert_int_equal(fc.notices, 2);
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
    assert_ptr_equal(e->o->write, &write_through_ops);
    assert_int_equal(objects_stage_direct(e->o), 0);
    /* changing the configuration afterwards changes nothing: the mode was parsed once */
    e->cf.write_mode = CONF_WRITE_BACK;
    assert_ptr_equal(e->o->write, &write_through_ops);
    assert_int_equal(objects_stage_direct(e->o), 0);
    assert_int_equal(put(e, "bkt", "k", "abc", 3, NULL), 0);
    assert_int_equal(e->fb->n_put, 1); /* through: on the backend at once */
    assert_int_equal(dirty_has(e, "bkt", "k"), 0);
    /* write-through admits anything and reserves nothing */
    assert_int_equal(objects_admit(e->o, 1ull << 40, &admitted), 0);
    assert_int_equal(admitted, 0);
    objects_unadmit(e->o, admitted);
    /* made again in write-back: now it is, whatever the configuration says later */
    objects_free(e->o);
    struct errmsg em = {""};
    assert_int_equal(objects_new(&e->cf, &e->fb->be, e->c, NULL, &e->o, &em), 0);
    e->cf.write_mode = CONF_WRITE_THROUGH;
    assert_ptr_equal(e->o->write, &write_back_ops);
    assert_int_equal(objects_stage_direct(e->o), 1);
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

/* Every write of the object layer goes through its write ops and nothing else asks the mode:
 * with a recording table in place of the mode's, each public call reaches its op once, with
 * its arguments, and answers what the op answers. */
static unsigned rec_calls[16];
enum { REC_ADMIT, REC_ADMIT_MORE, REC_PUT, REC_COPY, REC_CREATE, REC_TARGET, REC_PART,
       REC_COPY_PART, REC_COMPLETE, REC_ABORT, REC_LIST_PARTS, REC_LIST_UPLOADS };

static int rec_admit(struct objects *o, uint64_t bytes, uint64_t *admitted)
{
    rec_calls[REC_ADMIT]++;
    *admitted = bytes / 2;
    return -1001;
}

static int rec_admit_more(struct objects *o, uint64_t total, uint64_t *admitted)
{
    rec_calls[REC_ADMIT_MORE]++;
    *admitted = total;
    return -1012;
}

static int rec_put(struct objects *o, const char *bucket, const char *key, int fd,
                   const char *staged, uint64_t *space, struct be_meta *meta, int *staged_taken)
{
    rec_calls[REC_PUT]++;
    assert_string_equal(staged, "/staged");
    assert_int_equal(*space, 33);
    *staged_taken = 1;
    return -1002;
}

static int rec_copy(struct objects *o, const char *src_bucket, const char *src_key,
                    const char *bucket, const char *key, const struct be_meta *replace,
                    const struct cond_hdrs *cond, struct be_meta *out)
{
    rec_calls[REC_COPY]++;
    assert_string_equal(src_key, "src");
    return -1003;
}

static int rec_create(struct objects *o, const char *bucket, const char *key,
                      const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX])
{
    rec_calls[REC_CREATE]++;
    return -1004;
}

static int rec_target(struct objects *o, const char *bucket, const char *key,
                      const char *upload_id, unsigned number, uint64_t size, int *fd,
                      uint64_t *off)
{
    rec_calls[REC_TARGET]++;
    assert_int_equal(number, 7);
    return 1;
}

static int rec_part(struct objects *o, const char *bucket, const char *key, const char *upload_id,
                    int fd, const char *staged, int inplace, uint64_t *space,
                    const struct be_part *part, int *staged_taken)
{
    rec_calls[REC_PART]++;
    assert_null(space);
    assert_int_equal(*staged_taken, 0);
    assert_int_equal(inplace, 1);
    return -1006;
}

static int rec_copy_part(struct objects *o, const char *bucket, const char *key,
                         const char *upload_id, unsigned number, const char *src_bucket,
                         const char *src_key, int has_range, uint64_t off, uint64_t len,
                         const struct cond_hdrs *cond, struct be_part *out)
{
    rec_calls[REC_COPY_PART]++;
    assert_int_equal(off, 10);
    assert_int_equal(len, 20);
    return -1007;
}

static int rec_complete(struct objects *o, const char *bucket, const char *key,
                        const char *upload_id, const struct be_part *parts, size_t n,
                        struct be_meta *out)
{
    rec_calls[REC_COMPLETE]++;
    return -1008;
}

static int rec_abort(struct objects *o, const char *bucket, const char *key,
                     const char *upload_id)
{
    rec_calls[REC_ABORT]++;
    return -1009;
}

static int rec_list_parts(struct objects *o, const char *bucket, const char *key,
                          const char *upload_id, unsigned marker, unsigned max,
                          struct be_part **out, size_t *n, int *truncated)
{
    rec_calls[REC_LIST_PARTS]++;
    return -1010;
}

static int rec_list_uploads(struct objects *o, const char *bucket, const char *prefix,
                            const char *key_marker, const char *id_marker, unsigned max,
                            struct be_upload **out, size_t *n, int *truncated)
{
    rec_calls[REC_LIST_UPLOADS]++;
    *out = NULL;
    *n = 0;
    *truncated = 0;
    return -1011;
}

static const struct objects_write_ops rec_ops = {
    .name = "recording", .stage_direct = 7, .admit = rec_admit, .admit_more = rec_admit_more,
    .put = rec_put,
    .copy = rec_copy, .mp_create = rec_create, .mp_part_target = rec_target,
    .mp_put_part = rec_part, .mp_copy_part = rec_copy_part, .mp_complete = rec_complete,
    .mp_abort = rec_abort, .mp_list_parts = rec_list_parts,
    .mp_list_uploads = rec_list_uploads,
};

static void test_object_write_ops_dispatch(void **state)
{
    struct env *e = *state;
    const struct objects_write_ops *was = e->o->write;
    struct be_meta m = {0};
    struct be_part part = {.number = 1};
    struct multipart_uploads u;
    char id[BE_UPLOAD_ID_MAX];
    uint64_t admitted = 0, off = 0;
    int taken = 0, fd = -1;
    char path[] = "/tmp/test_object_ops.XXXXXX";
    int body = mkstemp(path);
    assert_true(body >= 0);
    unlink(path);
    memset(rec_calls, 0, sizeof(rec_calls));
    e->o->write = &rec_ops;
    assert_int_equal(objects_stage_direct(e->o), 7);
    assert_int_equal(objects_admit(e->o, 10, &admitted), -1001);
    assert_int_equal(admitted, 5);
    assert_int_equal(objects_admit_more(e->o, 12, &admitted), -1012);
    assert_int_equal(admitted, 12);
    uint64_t space = 33;
    assert_int_equal(object_put(e->o, "bkt", "k", body, "/staged", &space, &m, &taken), -1002);
    assert_int_equal(taken, 1);
    assert_int_equal(object_copy(e->o, "bkt", "src", "bkt", "k", NULL, NULL, &m), -1003);
    assert_int_equal(multipart_create(e->o, "bkt", "k", &m, id), -1004);
    assert_int_equal(multipart_part_target(e->o, "bkt", "k", "u", 7, 5, &fd, &off), 1);
    taken = 1;
    assert_int_equal(multipart_put_part(e->o, "bkt", "k", "u", body, NULL, 1, NULL, &part,
                                        &taken),
                     -1006);
    assert_int_equal(multipart_copy_part(e->o, "bkt", "k", "u", 2, "bkt", "src", 1, 10, 20,
                                         NULL, &part),
                     -1007);
    assert_int_equal(multipart_complete(e->o, "bkt", "k", "u", &part, 1, &m), -1008);
    assert_int_equal(multipart_abort(e->o, "bkt", "k", "u"), -1009);
    struct be_part *parts = NULL;
    size_t n = 0;
    int trunc = 0;
    assert_int_equal(multipart_list_parts(e->o, "bkt", "k", "u", 0, 10, &parts, &n, &trunc),
                     -1010);
    assert_int_equal(multipart_list_uploads(e->o, "bkt", "", NULL, NULL, NULL, 10, &u), -1011);
    multipart_uploads_free(&u);
    assert_int_equal(multipart_list_uploads(e->o, "bkt", "", "/", NULL, NULL, 10, &u), -1011);
    multipart_uploads_free(&u);
    for (unsigned i = REC_ADMIT; i <= REC_LIST_UPLOADS; i++)
        assert_int_equal(rec_calls[i], i == REC_LIST_UPLOADS ? 2 : 1);
    assert_int_equal(e->fb->n_put, 0); /* nothing went around the table */
    e->o->write = was;
    close(body);
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
        cmocka_unit_test_setup_teardown(test_object_notice_batched, setup_through, teardown),
        cmocka_unit_test_setup_teardown(test_object_put_back, setup_back, teardown),
        cmocka_unit_test_setup_teardown(test_object_copy_back, setup_back, teardown),
        cmocka_unit_test_setup_teardown(test_object_delete_back, setup_back, teardown),
        cmocka_unit_test_setup_teardown(test_object_mode_chosen_once, setup_through, teardown),
        cmocka_unit_test_setup_teardown(test_object_write_ops_dispatch, setup_through, teardown),
    };
    return cmocka_run_group_tests_name("object", tests, NULL, NULL);
}
