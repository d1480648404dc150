/*
 * test_members.c: member indexes of tar shards through the cache (cache/members.c) over the
 * fake backend: a cold shard's index walks only the blocks holding headers, a whole one's is
 * read from the SSD, an index is per version (a changed shard is never read with its old
 * index), and a hostile archive gives -S3E_INVALID_ARCHIVE.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "cache/cache.h"
#include "fake_backend.h"
#include "lib/conf.h"
#include "lib/s3err.h"
#include "lib/workq.h"

#define BS (64u << 10)

struct env {
    char dir[256];
    struct conf cf;
    struct fake_be *fb;
    struct workq *wq;
    struct cache *c;
};

static int setup_reval(void **state, int64_t reval_ms)
{
    struct env *e = calloc(1, sizeof(*e));
    struct errmsg em = {""};
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_members.XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    e->cf.cache_dir = e->dir;
    e->cf.cache_size = 64u << 20;
    e->cf.block_size = BS;
    e->cf.readahead = 0;
    e->cf.revalidate_after = reval_ms;
    e->fb = fake_be_new();
    assert_int_equal(workq_new(4, &e->wq), 0);
    assert_int_equal(cache_open(&e->cf, &e->fb->be, e->wq, &e->c, &em), 0);
    *state = e;
    return 0;
}

static int setup(void **state) { return setup_reval(state, 60000); }
static int setup_always(void **state) { return setup_reval(state, 0); }

static int teardown(void **state)
{
    struct env *e = *state;
    cache_close(e->c);
    workq_free(e->wq);
    fake_be_free(e->fb);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->dir);
    assert_int_equal(system(cmd), 0);
    free(e);
    return 0;
}

/* ---- a waiter and a blocking metadata lookup -------------------------------------------- */

struct tw {
    struct cache_waiter w;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int woken;
};

static void tw_suspend(void *cls) { (void)cls; }

static void tw_resume(void *cls)
{
    struct tw *t = cls;
    pthread_mutex_lock(&t->mu);
    t->woken = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* A handle on (b, @key) bound to its current version. */
static struct cache_obj *open_obj(struct env *e, const char *key)
{
    struct cache_obj *o;
    struct tw t = {.w = {.suspend = tw_suspend, .resume = tw_resume}};
    const struct be_meta *m;
    enum cache_outcome how;
    int rc;
    t.w.cls = &t;
    pthread_mutex_init(&t.mu, NULL);
    pthread_cond_init(&t.cv, NULL);
    assert_int_equal(cache_obj_get(e->c, "b", key, &o), 0);
    while ((rc = cache_obj_meta(o, &t.w, &m, &how)) == -EAGAIN) {
        pthread_mutex_lock(&t.mu);
        while (!t.woken)
            pthread_cond_wait(&t.cv, &t.mu);
        t.woken = 0;
        pthread_mutex_unlock(&t.mu);
    }
    assert_int_equal(rc, 0);
    cache_obj_cancel_wait(o, &t.w);
    pthread_mutex_destroy(&t.mu);
    pthread_cond_destroy(&t.cv);
    return o;
}

/* ---- tars ------------------------------------------------------------------------------- */

/* Appends a ustar header for @name of @size bytes at @p (512 bytes). */
static void ustar_header(unsigned char *p, const char *name, uint64_t size)
{
    memset(p, 0, 512);
    snprintf((char *)p, 100, "%s", name);
    snprintf((char *)p + 100, 8, "%07o", 0644);
    snprintf((char *)p + 108, 8, "%07o", 0);
    snprintf((char *)p + 116, 8, "%07o", 0);
    snprintf((char *)p + 124, 12, "%011llo", (unsigned long long)size);
    snprintf((char *)p + 136, 12, "%011o", 1700000000);
    p[156] = '0';
    memcpy(p + 257, "ustar", 6);
    memcpy(p + 263, "00", 2);
    memset(p + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += p[i];
    snprintf((char *)p + 148, 8, "%06o", sum);
}

/* A tar of @n members "m0".."m<n-1>" of @size bytes each (byte j of member i is i + j),
 * in *@len bytes (malloc'd). */
static unsigned char *make_tar(unsigned n, uint64_t size, uint64_t *len)
{
    uint64_t padded = (size + 511) / 512 * 512;
    *len = n * (512 + padded) + 1024;
    unsigned char *t = calloc(1, *len), *p = t;
    for (unsigned i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof(name), "m%u", i);
        ustar_header(p, name, size);
        for (uint64_t j = 0; j < size; j++)
            p[512 + j] = (unsigned char)(i + j);
        p += 512 + padded;
    }
    return t;
}

/* Whether the backend was asked for the block at byte @off. */
static int fetched(struct fake_be *fb, uint64_t off)
{
    for (unsigned i = 0; i < fb->n_get && i < FAKE_GET_LOG; i++)
        if (fb->get_log[i].off <= off && off < fb->get_log[i].off + fb->get_log[i].len)
            return 1;
    return 0;
}

/* ---- tests ------------------------------------------------------------------------------ */

/* A cold shard: the walk fetches the blocks that hold headers (and the end-of-archive block),
 * not the members' data in between; the index is kept, and found by the next handle. */
static void test_members_cold_walk_fetches_header_blocks(void **state)
{
    struct env *e = *state;
    uint64_t len, msize = 5 * BS;
    unsigned char *t = make_tar(4, msize, &len);
    fake_be_put(e->fb, "b", "s.tar", t, len);
    struct cache_obj *o = open_obj(e, "s.tar");
    struct cache_member cm;
    assert_int_equal(cache_obj_member(o, "m2", 2, &cm), -ENODATA);
    void *blob;
    size_t blen;
    struct errmsg em = {""};
    assert_int_equal(cache_obj_members_build(o, &blob, &blen, &em), 0);
    assert_int_equal(cache_member_lookup(blob, blen, "m2", 2, &cm), 0);
    assert_int_equal(cm.data_off, 2 * (512 + msize) + 512);
    assert_int_equal(cm.size, msize);
    free(blob);
    uint64_t blocks = (len + BS - 1) / BS, n_fetched = 0;
    for (uint64_t b = 0; b < blocks; b++)
        n_fetched += fetched(e->fb, b * BS);
    /* headers at 0 and (512 + 5 BS) * i: blocks 0, 5, 10, 15, and the end at block 20 */
    for (unsigned i = 0; i <= 4; i++)
        assert_true(fetched(e->fb, i * (512 + msize)));
    assert_int_equal(n_fetched, 5);
    assert_true(blocks >= 20);
    cache_obj_release(o);

    o = open_obj(e, "s.tar");
    assert_int_equal(cache_obj_member(o, "m3", 2, &cm), 0);
    assert_int_equal(cm.data_off, 3 * (512 + msize) + 512);
    assert_int_equal(cache_obj_member(o, "m9", 2, &cm), -ENOENT);
    cache_obj_release(o);
    struct cache_stats cs;
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.member_index_builds, 1);
    free(t);
}

/* A whole cached shard is indexed from the SSD: no backend GET. */
static void test_members_whole_shard_reads_no_backend(void **state)
{
    struct env *e = *state;
    uint64_t len;
    unsigned char *t = make_tar(30, 1000, &len);
    fake_be_put(e->fb, "b", "w.tar", t, len);
    int fd = -1;
    struct be_meta m;
    assert_int_equal(cache_open_whole(e->c, "b", "w.tar", &fd, &m), 0);
    close(fd);
    unsigned gets = fake_be_gets(e->fb);
    struct cache_obj *o = open_obj(e, "w.tar");
    void *blob;
    size_t blen;
    struct errmsg em = {""};
    assert_int_equal(cache_obj_members_build(o, &blob, &blen, &em), 0);
    free(blob);
    assert_int_equal(fake_be_gets(e->fb), gets);
    struct cache_member cm;
    assert_int_equal(cache_obj_member(o, "m29", 3, &cm), 0);
    assert_int_equal(cm.size, 1000);
    cache_obj_release(o);
    free(t);
}

/* A .tar read whole is indexed at fill time, in the background: the first member read finds
 * its index. Another key (not .tar) is not. */
static void test_members_indexed_at_fill_time(void **state)
{
    struct env *e = *state;
    uint64_t len;
    unsigned char *t = make_tar(10, 70000, &len);
    fake_be_put(e->fb, "b", "f.tar", t, len);
    fake_be_put(e->fb, "b", "f.bin", t, len);
    int fd = -1;
    struct be_meta m;
    assert_int_equal(cache_open_whole(e->c, "b", "f.tar", &fd, &m), 0);
    close(fd);
    assert_int_equal(cache_open_whole(e->c, "b", "f.bin", &fd, &m), 0);
    close(fd);
    for (int i = 0; i < 10000 && cache_busy(e->c); i++)
        usleep(1000);
    assert_int_equal(cache_busy(e->c), 0);
    struct cache_obj *o = open_obj(e, "f.tar");
    struct cache_member cm;
    assert_int_equal(cache_obj_member(o, "m9", 2, &cm), 0);
    assert_int_equal(cm.size, 70000);
    cache_obj_release(o);
    o = open_obj(e, "f.bin");
    assert_int_equal(cache_obj_member(o, "m9", 2, &cm), -ENODATA);
    cache_obj_release(o);
    struct cache_stats cs;
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.member_index_builds, 1);
    free(t);
}

/* The shard changes on the backend: the new version has no index (the old one's offsets are
 * never used for its bytes), and gets its own. */
static void test_members_index_is_per_version(void **state)
{
    struct env *e = *state;
    uint64_t len1, len2;
    unsigned char *t1 = make_tar(3, 100, &len1), *t2 = make_tar(5, 3000, &len2);
    fake_be_put(e->fb, "b", "v.tar", t1, len1);
    struct cache_obj *o = open_obj(e, "v.tar");
    void *blob;
    size_t blen;
    struct errmsg em = {""};
    assert_int_equal(cache_obj_members_build(o, &blob, &blen, &em), 0);
    free(blob);
    struct cache_member cm;
    assert_int_equal(cache_obj_member(o, "m1", 2, &cm), 0);
    assert_int_equal(cm.size, 100);
    cache_obj_release(o);

    fake_be_put(e->fb, "b", "v.tar", t2, len2); /* a new ETag: revalidation sees a change */
    o = open_obj(e, "v.tar");
    assert_int_equal(cache_obj_member(o, "m1", 2, &cm), -ENODATA);
    assert_int_equal(cache_obj_members_build(o, &blob, &blen, &em), 0);
    free(blob);
    assert_int_equal(cache_obj_member(o, "m1", 2, &cm), 0);
    assert_int_equal(cm.size, 3000);
    assert_int_equal(cache_obj_member(o, "m4", 2, &cm), 0);
    cache_obj_release(o);
    free(t1);
    free(t2);
}

/* Hostile or broken archives: a clean error, nothing stored. */
static void test_members_bad_archives(void **state)
{
    struct env *e = *state;
    uint64_t len;
    unsigned char *t = make_tar(3, 5000, &len);
    /* not a tar */
    unsigned char junk[4096];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (unsigned char)(i * 7 + 1);
    fake_be_put(e->fb, "b", "junk.tar", junk, sizeof(junk));
    /* a member's size past the end */
    fake_be_put(e->fb, "b", "cut.tar", t, 512 + 1000);
    /* a header checksum broken */
    t[512 + 5120 + 10] ^= 0x55;
    fake_be_put(e->fb, "b", "sum.tar", t, len);
    const char *keys[] = {"junk.tar", "cut.tar", "sum.tar"};
    for (size_t i = 0; i < 3; i++) {
        struct cache_obj *o = open_obj(e, keys[i]);
        void *blob = (void *)1;
        size_t blen;
        struct errmsg em = {""};
        assert_int_equal(cache_obj_members_build(o, &blob, &blen, &em), -S3E_INVALID_ARCHIVE);
        assert_null(blob);
        assert_true(em.buf[0] != '\0');
        struct cache_member cm;
        assert_int_equal(cache_obj_member(o, "m0", 2, &cm), -ENODATA);
        cache_obj_release(o);
    }
    struct cache_stats cs;
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.member_index_errors, 3);
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_members_cold_walk_fetches_header_blocks, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_members_whole_shard_reads_no_backend, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_members_indexed_at_fill_time, setup, teardown),
        cmocka_unit_test_setup_teardown(test_members_index_is_per_version, setup_always,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_members_bad_archives, setup, teardown),
    };
    return cmocka_run_group_tests_name("members", tests, NULL, NULL);
}
