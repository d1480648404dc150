/*
 * test_wb_mpu.c: write-back multipart staging (objects/wb_mpu.c) in a real cache directory
 * (mkdtemp): create (the object's metadata kept for Complete), parts as files of their own and
 * in place in the data file (P fixed by the first part of 5 MiB or more), a re-upload (the last
 * one recorded is the part), failed attempts that keep the part acknowledged before them, two
 * attempts at once, Complete (the data file itself becomes the object when it can; copied and
 * checked when an attempt holds a slot; order, ETag, size and limit checks; a repeat answered as
 * the first), abort, the listings of parts and uploads, upload IDs that are no path, and the
 * staged bytes counted again after a restart. Calls are made as objects/multipart.c makes them
 * (its dirty-limit holds included).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/backend.h"
#include "cache/cache.h"
#include "fake_backend.h"
#include "lib/checksum.h"
#include "lib/conf.h"
#include "lib/hex.h"
#include "lib/s3c.h"
#include "lib/s3err.h"
#include "lib/workq.h"
#include "objects/objects.h"
#include "objects/wb_mpu.h"

#define MIB (1u << 20)
#define P (5u * MIB) /* the smallest in-place part size */

struct env {
    char dir[256];
    struct conf cf;
    struct fake_be *fb;
    struct workq *wq;
    struct cache *c;
    struct objects *o;
};

static void env_open(struct env *e)
{
    struct errmsg em = {""};
    assert_int_equal(cache_open(&e->cf, &e->fb->be, e->wq, &e->c, &em), 0);
    assert_int_equal(objects_new(&e->cf, &e->fb->be, e->c, NULL, &e->o, &em), 0);
}

static void env_close(struct env *e)
{
    objects_free(e->o);
    cache_close(e->c);
    e->o = NULL;
    e->c = NULL;
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_wb_mpu.XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    e->cf.cache_dir = e->dir;
    e->cf.cache_size = 1ull << 30;
    e->cf.block_size = MIB;
    e->cf.dirty_limit = 512ull * MIB;
    e->cf.max_object_size = 1ull << 30;
    e->cf.revalidate_after = 3600000;
    e->cf.write_mode = CONF_WRITE_BACK;
    e->fb = fake_be_new();
    assert_int_equal(workq_new(4, &e->wq), 0);
    env_open(e);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    char cmd[512];
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
        d[i] = (unsigned char)((i * 13 + seed * 101 + (i >> 11)) % 241);
    return d;
}

static void md5hex(const void *d, size_t n, char out[33])
{
    struct cksum *ck;
    struct cksum_result r;
    assert_int_equal(cksum_new(CKSUM_WANT_MD5, CKSUM_NONE, &ck), 0);
    cksum_update(ck, d, n);
    cksum_final(ck, &r);
    cksum_free(ck);
    memcpy(out, r.md5_hex, 33);
}

/* S3's multipart ETag: MD5 of the parts' binary MD5s, "-n". */
static void mpu_etag(char md5s[][33], size_t n, char out[BE_ETAG_MAX])
{
    unsigned char *bin = malloc(16 * n);
    char h[33];
    for (size_t i = 0; i < n; i++)
        assert_int_equal(hex_decode(md5s[i], 16, bin + 16 * i), 0);
    md5hex(bin, 16 * n, h);
    snprintf(out, BE_ETAG_MAX, "%s-%zu", h, n);
    free(bin);
}

static uint64_t staged_bytes(struct env *e)
{
    struct cache_stats cs;
    cache_get_stats(e->c, &cs);
    return cs.dirty_staged_bytes;
}

static int create(struct env *e, const char *key, char id[BE_UPLOAD_ID_MAX])
{
    struct be_meta m;
    memset(&m, 0, sizeof(m));
    snprintf(m.content_type, sizeof(m.content_type), "application/x-ckpt");
    snprintf(m.usermeta, sizeof(m.usermeta), "step:42\n");
    return wb_mpu_create(e->o, "bkt", key, &m, id);
}

/* A part as a file of its own (UploadPart when its slot is not free): a staged file moved in.
 * *@etag its MD5. */
static int put_file(struct env *e, const char *key, const char *id, unsigned n, const void *d,
                    size_t len, char etag[33])
{
    char path[4096];
    int fd;
    md5hex(d, len, etag);
    assert_int_equal(cache_stage_open(e->c, &fd, path), 0);
    assert_int_equal(write(fd, d, len), (ssize_t)len);
    assert_int_equal(fsync(fd), 0);
    close(fd);
    int rc = wb_mpu_put_part(e->o, "bkt", key, id, n, path, etag);
    if (rc)
        unlink(path); /* not consumed */
    else
        drain_hold(e->o->dr, len); /* as multipart_put_part() */
    return rc;
}

/* UploadPart as the gateway makes it: in place when wb_mpu_part_target() says so (then 1),
 * else a file of its own (0); negative: the error. */
static int put_part(struct env *e, const char *key, const char *id, unsigned n, const void *d,
                    size_t len, char etag[33])
{
    int fd = -1;
    uint64_t off = 0;
    int t = wb_mpu_part_target(e->o, "bkt", key, id, n, len, &fd, &off);
    if (t < 0)
        return t;
    if (t == 0) {
        int rc = put_file(e, key, id, n, d, len, etag);
        return rc ? rc : 0;
    }
    assert_int_equal(off, (uint64_t)(n - 1) * P);
    md5hex(d, len, etag);
    assert_int_equal(pwrite(fd, d, len, (off_t)off), (ssize_t)len);
    int rc = wb_mpu_part_done_inplace(e->o, "bkt", key, id, n, etag, fd);
    close(fd);
    if (rc)
        return rc;
    drain_hold(e->o->dr, len);
    return 1;
}

static int complete_parts(struct env *e, const char *key, const char *id, const unsigned *nums,
                          char etags[][33], size_t n, struct be_meta *out, char staged[4096],
                          int *seal)
{
    struct be_part *ps = calloc(n ? n : 1, sizeof(*ps));
    uint64_t held = 0;
    for (size_t i = 0; i < n; i++) {
        ps[i].number = nums[i];
        snprintf(ps[i].etag, sizeof(ps[i].etag), "%.32s", etags[i]);
    }
    int rc = wb_mpu_complete(e->o, "bkt", key, id, ps, n, out, staged, &held, seal);
    free(ps);
    return rc;
}

/* Complete as objects/multipart.c makes it: the staged result adopted dirty, the upload
 * finished, the seal closed. Checks the object's bytes against @want. */
static int complete_adopt(struct env *e, const char *key, const char *id, const unsigned *nums,
                          char etags[][33], size_t n, const void *want, size_t len,
                          struct be_meta *out)
{
    char staged[4096];
    int seal = -1;
    int rc = complete_parts(e, key, id, nums, etags, n, out, staged, &seal);
    if (rc)
        return rc;
    struct be_part *ps = calloc(n, sizeof(*ps));
    for (size_t i = 0; i < n; i++) {
        ps[i].number = nums[i];
        snprintf(ps[i].etag, sizeof(ps[i].etag), "%.32s", etags[i]);
    }
    assert_int_equal(cache_adopt_dirty(e->c, "bkt", key, staged, out), 0);
    assert_int_equal(wb_mpu_finish(e->o, "bkt", key, id, ps, n, out, 0), 0);
    free(ps);
    if (seal >= 0)
        close(seal);
    struct be_meta m;
    int fd = -1;
    assert_int_equal(cache_open_whole(e->c, "bkt", key, &fd, &m), 0);
    assert_int_equal(m.size, len);
    unsigned char *got = malloc(len ? len : 1);
    assert_int_equal(pread(fd, got, len, 0), (ssize_t)len);
    if (memcmp(got, want, len))
        fail_msg("%s: the completed object holds other bytes", key);
    free(got);
    close(fd);
    return 0;
}

static size_t count_parts(struct env *e, const char *key, const char *id, struct be_part **ps)
{
    size_t n = 0;
    int trunc = 0;
    assert_int_equal(wb_mpu_list_parts(e->o, "bkt", key, id, 0, 1000, ps, &n, &trunc), 0);
    assert_int_equal(trunc, 0);
    return n;
}

/* Files in the upload's directory whose names start with @prefix. */
static unsigned count_files(struct env *e, const char *id, const char *prefix)
{
    char p[512];
    unsigned n = 0;
    snprintf(p, sizeof(p), "%s/mpu/%s", e->dir, id);
    DIR *d = opendir(p);
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += !strncmp(de->d_name, prefix, strlen(prefix));
    closedir(d);
    return n;
}

/* ---- tests -------------------------------------------------------------------------------------- */

static void test_wb_mpu_create_and_ids(void **state)
{
    struct env *e = *state;
    char id[BE_UPLOAD_ID_MAX], id2[BE_UPLOAD_ID_MAX], et[1][33];
    assert_int_equal(create(e, "dir/ckpt", id), 0);
    assert_int_equal(strlen(id), 32);
    for (size_t i = 0; i < 32; i++)
        assert_non_null(strchr("0123456789abcdef", id[i]));
    assert_int_equal(create(e, "dir/ckpt", id2), 0);
    assert_string_not_equal(id, id2); /* two uploads of one key */
    /* an ID names its upload only with its own bucket and key */
    struct be_part *ps = NULL;
    size_t n = 0;
    int tr = 0;
    assert_int_equal(wb_mpu_list_parts(e->o, "bkt", "dir/ckpt", id, 0, 10, &ps, &n, &tr), 0);
    free(ps);
    assert_int_equal(wb_mpu_list_parts(e->o, "bkt", "other", id, 0, 10, &ps, &n, &tr),
                     -S3E_NO_SUCH_UPLOAD);
    assert_int_equal(wb_mpu_list_parts(e->o, "bkt2", "dir/ckpt", id, 0, 10, &ps, &n, &tr),
                     -S3E_NO_SUCH_UPLOAD);
    /* IDs that are not 32 hex digits never reach a path */
    static const char *const bad[] = {"../../etc", "", "0123456789abcdef0123456789abcde",
                                      "0123456789abcdef0123456789abcdef0",
                                      "0123456789ABCDEF0123456789ABCDEF", "../mpu-done/x",
                                      "0123456789abcdef0123456789abcde/"};
    unsigned char one = 'x';
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        struct be_meta out;
        char staged[4096];
        int seal;
        unsigned num = 1;
        snprintf(et[0], sizeof(et[0]), "%032x", 0);
        assert_int_equal(wb_mpu_list_parts(e->o, "bkt", "dir/ckpt", bad[i], 0, 10, &ps, &n, &tr),
                         -S3E_NO_SUCH_UPLOAD);
        assert_int_equal(put_file(e, "dir/ckpt", bad[i], 1, &one, 1, et[0]),
                         -S3E_NO_SUCH_UPLOAD);
        assert_int_equal(wb_mpu_abort(e->o, "bkt", "dir/ckpt", bad[i]), -S3E_NO_SUCH_UPLOAD);
        assert_int_equal(complete_parts(e, "dir/ckpt", bad[i], &num, et, 1, &out, staged, &seal),
                         -S3E_NO_SUCH_UPLOAD);
    }
    /* the object's metadata given at create comes back at Complete */
    unsigned char *d = pattern(1000, 1);
    unsigned num = 1;
    struct be_meta out;
    assert_int_equal(put_part(e, "dir/ckpt", id, 1, d, 1000, et[0]), 0); /* small: own file */
    assert_int_equal(complete_adopt(e, "dir/ckpt", id, &num, et, 1, d, 1000, &out), 0);
    assert_string_equal(out.content_type, "application/x-ckpt");
    assert_string_equal(out.usermeta, "step:42\n");
    assert_int_equal(out.size, 1000);
    assert_int_equal(out.parts_count, 1);
    char want[BE_ETAG_MAX];
    mpu_etag(et, 1, want);
    assert_string_equal(out.etag, want);
    free(d);
}

static void test_wb_mpu_parts_and_reupload(void **state)
{
    struct env *e = *state;
    char id[BE_UPLOAD_ID_MAX], et[4][33], old[33];
    static const size_t sizes[] = {6 * MIB + 1, 100, 6 * MIB + 1, 3};
    unsigned char *d[4];
    assert_int_equal(create(e, "k", id), 0);
    for (unsigned i = 0; i < 4; i++) {
        d[i] = pattern(sizes[i], i);
        /* files of their own, out of order on purpose */
        unsigned n = (unsigned[]){3, 1, 4, 2}[i];
        assert_int_equal(put_file(e, "k", id, n, d[i], sizes[i], et[n - 1]), 0);
    }
    /* listed by number, with sizes and ETags; a page at a time */
    struct be_part *ps;
    assert_int_equal(count_parts(e, "k", id, &ps), 4);
    static const size_t by_num[] = {100, 3, 6 * MIB + 1, 6 * MIB + 1};
    for (unsigned i = 0; i < 4; i++) {
        assert_int_equal(ps[i].number, i + 1);
        assert_int_equal(ps[i].size, by_num[i]);
        assert_string_equal(ps[i].etag, et[i]);
    }
    free(ps);
    size_t n;
    int tr;
    assert_int_equal(wb_mpu_list_parts(e->o, "bkt", "k", id, 1, 2, &ps, &n, &tr), 0);
    assert_int_equal(n, 2);
    assert_int_equal(tr, 1);
    assert_int_equal(ps[0].number, 2);
    assert_int_equal(ps[1].number, 3);
    free(ps);
    assert_int_equal(wb_mpu_list_parts(e->o, "bkt", "k", id, 3, 2, &ps, &n, &tr), 0);
    assert_int_equal(n, 1);
    assert_int_equal(tr, 0);
    free(ps);
    assert_int_equal(staged_bytes(e), 12 * MIB + 2 + 103);
    /* a re-upload of part 2: the last one recorded is the part, the old file goes and its bytes
     * stop counting */
    memcpy(old, et[1], 33);
    unsigned char *d2 = pattern(50, 9);
    assert_int_equal(put_file(e, "k", id, 2, d2, 50, et[1]), 0);
    assert_string_not_equal(old, et[1]);
    assert_int_equal(count_parts(e, "k", id, &ps), 4);
    assert_int_equal(ps[1].size, 50);
    assert_string_equal(ps[1].etag, et[1]);
    free(ps);
    assert_int_equal(count_files(e, id, "p.00002."), 1);
    assert_int_equal(staged_bytes(e), 12 * MIB + 2 + 100 + 50);
    /* Complete names a part by its ETag: the old one is no part any more */
    unsigned nums[4] = {1, 2, 3, 4};
    char stale[1][33];
    memcpy(stale[0], old, 33);
    struct be_meta out;
    char staged[4096];
    int seal;
    assert_int_equal(complete_parts(e, "k", id, nums + 1, stale, 1, &out, staged, &seal),
                     -S3E_INVALID_PART);
    /* parts but the last under 5 MiB: EntityTooSmall */
    assert_int_equal(complete_parts(e, "k", id, nums, et, 4, &out, staged, &seal),
                     -S3E_ENTITY_TOO_SMALL);
    /* parts 3 and 4 (6 MiB + 1 bytes each) make an object */
    size_t total = 2 * (6 * MIB + 1);
    unsigned char *want = malloc(total);
    memcpy(want, d[0], 6 * MIB + 1);
    memcpy(want + 6 * MIB + 1, d[2], 6 * MIB + 1);
    unsigned two[2] = {3, 4};
    assert_int_equal(complete_adopt(e, "k", id, two, et + 2, 2, want, total, &out), 0);
    assert_int_equal(out.size, total);
    assert_int_equal(out.parts_count, 2);
    char wetag[BE_ETAG_MAX];
    mpu_etag(et + 2, 2, wetag);
    assert_string_equal(out.etag, wetag);
    /* every part's bytes, those not completed included, are released with the upload */
    assert_int_equal(staged_bytes(e), 0);
    for (unsigned i = 0; i < 4; i++)
        free(d[i]);
    free(d2);
    free(want);
}

static void test_wb_mpu_in_place(void **state)
{
    struct env *e = *state;
    char id[BE_UPLOAD_ID_MAX], et[4][33];
    size_t sizes[4] = {P, P, P, 1234567};
    unsigned char *d[4];
    assert_int_equal(create(e, "big", id), 0);
    size_t total = 0;
    for (unsigned i = 0; i < 4; i++) {
        d[i] = pattern(sizes[i], 20 + i);
        total += sizes[i];
    }
    /* the first part of 5 MiB or more fixes P; parts of P go into their slots, in any order */
    assert_int_equal(put_part(e, "big", id, 2, d[1], P, et[1]), 1);
    assert_int_equal(put_part(e, "big", id, 1, d[0], P, et[0]), 1);
    assert_int_equal(put_part(e, "big", id, 3, d[2], P, et[2]), 1);
    assert_int_equal(put_part(e, "big", id, 4, d[3], sizes[3], et[3]), 0); /* not P: a file */
    assert_int_equal(count_files(e, id, "i."), 3);
    assert_int_equal(count_files(e, id, "p."), 1);
    struct be_part *ps;
    assert_int_equal(count_parts(e, "big", id, &ps), 4);
    for (unsigned i = 0; i < 4; i++) {
        assert_int_equal(ps[i].size, sizes[i]);
        assert_string_equal(ps[i].etag, et[i]);
    }
    free(ps);
    assert_int_equal(staged_bytes(e), total);
    /* Complete: the data file itself is the object (sealed until adopted), nothing copied but
     * the short last part */
    unsigned char *want = malloc(total);
    for (unsigned i = 0, off = 0; i < 4; off += (unsigned)sizes[i], i++)
        memcpy(want + off, d[i], sizes[i]);
    unsigned nums[4] = {1, 2, 3, 4};
    char staged[4096];
    int seal = -1;
    struct be_meta out;
    assert_int_equal(complete_parts(e, "big", id, nums, et, 4, &out, staged, &seal), 0);
    assert_true(seal >= 0);
    char dp[512];
    snprintf(dp, sizeof(dp), "%s/mpu/%s/data.obj", e->dir, id);
    assert_string_equal(staged, dp);
    assert_int_equal(out.part_size, P);
    close(seal);
    unlink(staged);
    /* (the upload is still whole: the Complete as the gateway makes it) */
    assert_int_equal(complete_adopt(e, "big", id, nums, et, 4, want, total, &out), 0);
    char wetag[BE_ETAG_MAX];
    mpu_etag(et, 4, wetag);
    assert_string_equal(out.etag, wetag);
    assert_int_equal(staged_bytes(e), 0);
    for (unsigned i = 0; i < 4; i++)
        free(d[i]);
    free(want);
}

static void test_wb_mpu_failed_attempt_keeps_part(void **state)
{
    struct env *e = *state;
    char id[BE_UPLOAD_ID_MAX], et[3][33], scratch[33];
    unsigned char *a = pattern(P, 31), *b = pattern(P, 32), *junk = pattern(P, 33);
    int fd = -1, fd2 = -1;
    uint64_t off;
    assert_int_equal(create(e, "k", id), 0);
    /* part 1 acknowledged in its slot */
    assert_int_equal(put_part(e, "k", id, 1, a, P, et[0]), 1);
    /* an attempt at part 1 again may not write the slot (an acknowledged part is in it) */
    assert_int_equal(wb_mpu_part_target(e->o, "bkt", "k", id, 1, P, &fd, &off), 0);
    /* ... it stages a file of its own, and fails before it is recorded: part 1 is as it was */
    /* part 2 acknowledged as a file of its own (its slot was busy then) */
    assert_int_equal(put_file(e, "k", id, 2, b, P, et[1]), 0);
    /* a retry of part 2 gets the slot (no acknowledged part is in it), writes half of its
     * bytes and dies (the client went away): nothing recorded */
    assert_int_equal(wb_mpu_part_target(e->o, "bkt", "k", id, 2, P, &fd, &off), 1);
    assert_int_equal(pwrite(fd, junk, P / 2, (off_t)off), (ssize_t)(P / 2));
    /* meanwhile a second attempt at part 2 finds the slot held: its own file */
    assert_int_equal(wb_mpu_part_target(e->o, "bkt", "k", id, 2, P, &fd2, &off), 0);
    close(fd);
    struct be_part *ps;
    assert_int_equal(count_parts(e, "k", id, &ps), 2);
    assert_string_equal(ps[0].etag, et[0]);
    assert_string_equal(ps[1].etag, et[1]);
    free(ps);
    /* a failed re-upload as a file (its staged file lost) records nothing either */
    md5hex(junk, 10, scratch);
    char gone[512];
    snprintf(gone, sizeof(gone), "%s/no-such-staged-file", e->dir);
    assert_int_not_equal(wb_mpu_put_part(e->o, "bkt", "k", id, 1, gone, scratch), 0);
    assert_int_equal(count_parts(e, "k", id, &ps), 2);
    assert_string_equal(ps[0].etag, et[0]);
    free(ps);
    /* Complete: the acknowledged bytes, not the failed attempt's */
    unsigned char *want = malloc(2 * (size_t)P);
    memcpy(want, a, P);
    memcpy(want + P, b, P);
    unsigned nums[2] = {1, 2};
    struct be_meta out;
    assert_int_equal(complete_adopt(e, "k", id, nums, et, 2, want, 2 * (size_t)P, &out), 0);
    free(a);
    free(b);
    free(junk);
    free(want);
}

static void test_wb_mpu_complete_while_attempt_writes(void **state)
{
    struct env *e = *state;
    char id[BE_UPLOAD_ID_MAX], et[2][33];
    unsigned char *a = pattern(P, 41), *b = pattern(100, 42), *junk = pattern(P, 43);
    int fd = -1;
    uint64_t off;
    assert_int_equal(create(e, "k", id), 0);
    assert_int_equal(put_part(e, "k", id, 1, a, P, et[0]), 1);
    assert_int_equal(put_part(e, "k", id, 2, b, 100, et[1]), 0);
    /* an attempt at part 3 holds its slot: the data file cannot become the object, so the
     * parts are copied out (slot bytes checked against their MD5) */
    assert_int_equal(wb_mpu_part_target(e->o, "bkt", "k", id, 3, P, &fd, &off), 1);
    assert_int_equal(pwrite(fd, junk, P, (off_t)off), (ssize_t)P);
    unsigned nums[2] = {1, 2};
    char staged[4096];
    int seal = 5;
    struct be_meta out;
    assert_int_equal(complete_parts(e, "k", id, nums, et, 2, &out, staged, &seal), 0);
    assert_int_equal(seal, -1);
    assert_null(strstr(staged, "/mpu/")); /* a staged copy, not the data file */
    unlink(staged);
    close(fd);
    /* a slot overwritten behind its record (no lock held) fails the Complete, never serves
     * other bytes: the MD5 of what was copied is checked */
    char dp[512];
    snprintf(dp, sizeof(dp), "%s/mpu/%s/data", e->dir, id);
    int raw = open(dp, O_RDWR);
    assert_true(raw >= 0);
    assert_int_equal(wb_mpu_part_target(e->o, "bkt", "k", id, 3, P, &fd, &off), 1);
    assert_int_equal(pwrite(raw, junk, 10, 0), 10); /* slot 1 */
    close(raw);
    assert_int_equal(complete_parts(e, "k", id, nums, et, 2, &out, staged, &seal),
                     -S3E_INVALID_PART);
    close(fd);
    free(a);
    free(b);
    free(junk);
}

static void test_wb_mpu_complete_checks(void **state)
{
    struct env *e = *state;
    char id[BE_UPLOAD_ID_MAX], et[3][33];
    unsigned char *d = pattern(P, 51);
    assert_int_equal(create(e, "k", id), 0);
    assert_int_equal(put_part(e, "k", id, 1, d, P, et[0]), 1);
    assert_int_equal(put_part(e, "k", id, 2, d, P, et[1]), 1);
    assert_int_equal(put_part(e, "k", id, 3, d, 10, et[2]), 0);
    struct be_meta out;
    char staged[4096];
    int seal;
    char q[3][33];
    /* ETags in upper case name the same part */
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 33; j++)
            q[i][j] = (char)(et[i][j] >= 'a' ? et[i][j] - 32 : et[i][j]);
    const struct {
        unsigned nums[3];
        size_t n;
        int which; /* 0: et, 1: upper case, 2: a bad ETag for part 2 */
        uint64_t max;
        int rc;
    } cases[] = {
        {{2, 1, 3}, 3, 0, 1ull << 30, -S3E_INVALID_PART_ORDER},
        {{1, 1, 3}, 3, 0, 1ull << 30, -S3E_INVALID_PART_ORDER},
        {{1, 2, 4}, 3, 0, 1ull << 30, -S3E_INVALID_PART},
        {{1, 2, 3}, 3, 2, 1ull << 30, -S3E_INVALID_PART},
        {{1, 2, 3}, 0, 0, 1ull << 30, -S3E_MALFORMED_XML},
        {{1, 3, 0}, 2, 0, 1ull << 30, 0},         /* parts may be skipped */
        {{1, 2, 3}, 3, 0, 2ull * P, -S3E_ENTITY_TOO_LARGE},
        {{1, 2, 3}, 3, 1, 1ull << 30, 0},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        char names[3][33];
        for (size_t j = 0; j < 3; j++) {
            unsigned num = cases[i].nums[j] ? cases[i].nums[j] : 1;
            const char *src = num <= 3 ? et[num - 1] : et[0];
            if (cases[i].which == 1 && num <= 3)
                src = q[num - 1];
            snprintf(names[j], 33, "%.32s", src);
            if (cases[i].which == 2 && num == 2)
                snprintf(names[j], 33, "%032x", 7);
        }
        e->cf.max_object_size = cases[i].max;
        seal = -1;
        int rc = complete_parts(e, "k", id, cases[i].nums, names, cases[i].n, &out, staged,
                                &seal);
        if (rc != cases[i].rc)
            fail_msg("case %zu: rc %d (%s), want %d", i, rc, s3c_strerror(rc), cases[i].rc);
        if (!rc) { /* not finished: the upload stays as it was */
            if (seal >= 0)
                close(seal);
            unlink(staged);
        }
        /* a failed Complete leaves the upload whole */
        struct be_part *ps;
        assert_int_equal(count_parts(e, "k", id, &ps), 3);
        free(ps);
    }
    e->cf.max_object_size = 1ull << 30;
    /* and in quotes, as clients send them */
    struct be_part qp[3] = {{.number = 1}, {.number = 2}, {.number = 3}};
    uint64_t held;
    for (int i = 0; i < 3; i++)
        snprintf(qp[i].etag, sizeof(qp[i].etag), "\"%.32s\"", et[i]);
    assert_int_equal(wb_mpu_complete(e->o, "bkt", "k", id, qp, 3, &out, staged, &held, &seal), 0);
    assert_int_equal(held, 2 * (uint64_t)P + 10);
    if (seal >= 0)
        close(seal);
    unlink(staged);
    free(d);
}

static void test_wb_mpu_repeat_complete(void **state)
{
    struct env *e = *state;
    char id[BE_UPLOAD_ID_MAX], et[2][33];
    unsigned char *d = pattern(P + 10, 61);
    assert_int_equal(create(e, "k", id), 0);
    assert_int_equal(put_part(e, "k", id, 1, d, P, et[0]), 1);
    assert_int_equal(put_part(e, "k", id, 2, d + P, 10, et[1]), 0);
    unsigned nums[2] = {1, 2};
    struct be_meta first, again;
    char staged[4096];
    int seal = -1;
    assert_int_equal(complete_adopt(e, "k", id, nums, et, 2, d, P + 10, &first), 0);
    /* the upload is gone... */
    char p[512];
    snprintf(p, sizeof(p), "%s/mpu/%s", e->dir, id);
    assert_int_equal(access(p, F_OK), -1);
    struct be_part *ps = NULL;
    size_t n;
    int tr;
    assert_int_equal(wb_mpu_list_parts(e->o, "bkt", "k", id, 0, 10, &ps, &n, &tr),
                     -S3E_NO_SUCH_UPLOAD);
    /* ...but a repeat of its Complete (the answer was lost) is answered as the first: 1 */
    assert_int_equal(complete_parts(e, "k", id, nums, et, 2, &again, staged, &seal), 1);
    assert_string_equal(again.etag, first.etag);
    assert_int_equal(seal, -1);
    /* with other parts it is InvalidPart; for another key there is no such upload */
    assert_int_equal(complete_parts(e, "k", id, nums, et, 1, &again, staged, &seal),
                     -S3E_INVALID_PART);
    assert_int_equal(complete_parts(e, "k2", id, nums, et, 2, &again, staged, &seal),
                     -S3E_NO_SUCH_UPLOAD);
    free(d);
}

static void test_wb_mpu_abort(void **state)
{
    struct env *e = *state;
    char id[BE_UPLOAD_ID_MAX], keep[BE_UPLOAD_ID_MAX], et[2][33];
    unsigned char *d = pattern(P, 71);
    assert_int_equal(create(e, "k", id), 0);
    assert_int_equal(create(e, "k", keep), 0);
    assert_int_equal(put_part(e, "k", id, 1, d, P, et[0]), 1);
    assert_int_equal(put_part(e, "k", id, 2, d, 77, et[1]), 0);
    assert_int_equal(put_part(e, "k", keep, 1, d, 5, et[0]), 0);
    assert_int_equal(staged_bytes(e), P + 77 + 5);
    assert_int_equal(wb_mpu_abort(e->o, "bkt", "k", id), 0);
    /* its directory and its bytes are gone, the other upload of the key stays */
    char p[512];
    snprintf(p, sizeof(p), "%s/mpu/%s", e->dir, id);
    assert_int_equal(access(p, F_OK), -1);
    assert_int_equal(staged_bytes(e), 5);
    assert_int_equal(wb_mpu_abort(e->o, "bkt", "k", id), -S3E_NO_SUCH_UPLOAD);
    struct be_part *ps;
    assert_int_equal(count_parts(e, "k", keep, &ps), 1);
    free(ps);
    assert_int_equal(put_part(e, "k", id, 3, d, 5, et[0]), -S3E_NO_SUCH_UPLOAD);
    int fd;
    uint64_t off;
    assert_int_equal(wb_mpu_part_target(e->o, "bkt", "k", id, 1, P, &fd, &off),
                     -S3E_NO_SUCH_UPLOAD);
    free(d);
}

static void test_wb_mpu_list_uploads(void **state)
{
    struct env *e = *state;
    static const char *const keys[] = {"b/2", "a/1", "c", "a/1", "b/1", "d/x/y"};
    char ids[ARRAY_SIZE(keys)][BE_UPLOAD_ID_MAX];
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
        assert_int_equal(create(e, keys[i], ids[i]), 0);
    struct be_meta m = {0};
    char other[BE_UPLOAD_ID_MAX];
    assert_int_equal(wb_mpu_create(e->o, "bkt2", "a/1", &m, other), 0); /* another bucket */
    struct be_upload *u;
    size_t n;
    int tr;
    assert_int_equal(wb_mpu_list_uploads(e->o, "bkt", NULL, NULL, NULL, 1000, &u, &n, &tr), 0);
    assert_int_equal(n, 6);
    assert_int_equal(tr, 0);
    /* by key, then upload ID */
    static const char *const order[] = {"a/1", "a/1", "b/1", "b/2", "c", "d/x/y"};
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(u[i].key, order[i]);
        assert_true(u[i].initiated_ns > 0);
    }
    assert_true(strcmp(u[0].upload_id, u[1].upload_id) < 0);
    char second_a[BE_UPLOAD_ID_MAX];
    snprintf(second_a, sizeof(second_a), "%s", u[1].upload_id);
    char first_a[BE_UPLOAD_ID_MAX];
    snprintf(first_a, sizeof(first_a), "%s", u[0].upload_id);
    be_uploads_free(u, n);
    /* a prefix */
    assert_int_equal(wb_mpu_list_uploads(e->o, "bkt", "b/", NULL, NULL, 1000, &u, &n, &tr), 0);
    assert_int_equal(n, 2);
    assert_string_equal(u[0].key, "b/1");
    be_uploads_free(u, n);
    /* pages: max, key marker, key and upload-id markers */
    assert_int_equal(wb_mpu_list_uploads(e->o, "bkt", NULL, NULL, NULL, 2, &u, &n, &tr), 0);
    assert_int_equal(n, 2);
    assert_int_equal(tr, 1);
    be_uploads_free(u, n);
    assert_int_equal(wb_mpu_list_uploads(e->o, "bkt", NULL, "a/1", NULL, 1000, &u, &n, &tr), 0);
    assert_int_equal(n, 4);
    assert_string_equal(u[0].key, "b/1");
    be_uploads_free(u, n);
    assert_int_equal(wb_mpu_list_uploads(e->o, "bkt", NULL, "a/1", first_a, 1000, &u, &n, &tr),
                     0);
    assert_int_equal(n, 5);
    assert_string_equal(u[0].upload_id, second_a);
    be_uploads_free(u, n);
    /* none */
    assert_int_equal(wb_mpu_list_uploads(e->o, "nobkt", NULL, NULL, NULL, 1000, &u, &n, &tr), 0);
    assert_int_equal(n, 0);
    be_uploads_free(u, n);
}

static void test_wb_mpu_restart(void **state)
{
    struct env *e = *state;
    char id[BE_UPLOAD_ID_MAX], et[3][33];
    unsigned char *d = pattern(2 * (size_t)P + 3, 81);
    assert_int_equal(create(e, "k", id), 0);
    assert_int_equal(put_part(e, "k", id, 1, d, P, et[0]), 1);
    assert_int_equal(put_part(e, "k", id, 2, d + P, P, et[1]), 1);
    assert_int_equal(put_part(e, "k", id, 3, d + 2 * (size_t)P, 3, et[2]), 0);
    uint64_t before = staged_bytes(e);
    assert_int_equal(before, 2 * (uint64_t)P + 3);
    /* a restart: the staged parts count against the dirty limit again */
    env_close(e);
    env_open(e);
    assert_int_equal(staged_bytes(e), before);
    assert_int_equal(wb_mpu_staged_bytes(e->o), before);
    struct be_part *ps;
    assert_int_equal(count_parts(e, "k", id, &ps), 3);
    free(ps);
    unsigned nums[3] = {1, 2, 3};
    struct be_meta out;
    assert_int_equal(complete_adopt(e, "k", id, nums, et, 3, d, 2 * (size_t)P + 3, &out), 0);
    assert_string_equal(out.content_type, "application/x-ckpt");
    assert_int_equal(staged_bytes(e), 0);
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_wb_mpu_create_and_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wb_mpu_parts_and_reupload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wb_mpu_in_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wb_mpu_failed_attempt_keeps_part, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wb_mpu_complete_while_attempt_writes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_wb_mpu_complete_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wb_mpu_repeat_complete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wb_mpu_abort, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wb_mpu_list_uploads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wb_mpu_restart, setup, teardown),
    };
    return cmocka_run_group_tests_name("wb_mpu", tests, NULL, NULL);
}
