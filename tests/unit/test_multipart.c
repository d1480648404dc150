/*
 * test_multipart.c: multipart uploads in the object layer's write mode (objects/multipart.c),
 * against fake_be_new_full() and a real cache in a mkdtemp directory. Write-through: every call
 * goes to the backend; a Complete over --max-object-size (or naming a part re-uploaded since)
 * is refused before the backend makes anything and leaves the upload as it was; the cache
 * forgets the key. Write-back: parts staged in the cache directory (in place when they can be),
 * held against the dirty limit until the upload ends, the result adopted dirty and drained
 * later. UploadPartCopy ranges and x-amz-copy-source-if-* in both modes; ListMultipartUploads
 * rolled up under a delimiter, the same over either store.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "fake_backend.h"
#include "lib/checksum.h"
#include "lib/conf.h"
#include "lib/range.h"
#include "lib/s3c.h"
#include "lib/s3err.h"
#include "lib/workq.h"
#include "objects/multipart.h"
#include "objects/object.h"
#include "objects/objects.h"

#define MIB (1u << 20)
#define P (5u * MIB)

struct env {
    char dir[256];
    struct conf cf;
    struct fake_be *fb;
    struct workq *wq;
    struct cache *c;
    struct objects *o;
};

static int setup_mode(void **state, int write_back)
{
    struct errmsg em = {""};
    struct env *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_multipart.XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    e->cf.cache_dir = e->dir;
    e->cf.cache_size = 1ull << 30;
    e->cf.block_size = MIB;
    e->cf.dirty_limit = 256ull * MIB;
    e->cf.max_object_size = 1ull << 30;
    e->cf.revalidate_after = 3600000;
    e->cf.write_mode = write_back ? CONF_WRITE_BACK : CONF_WRITE_THROUGH;
    e->fb = fake_be_new_full();
    assert_int_equal(workq_new(4, &e->wq), 0);
    assert_int_equal(cache_open(&e->cf, &e->fb->be, e->wq, &e->c, &em), 0);
    assert_int_equal(objects_new(&e->cf, &e->fb->be, e->c, NULL, &e->o, &em), 0);
    *state = e;
    return 0;
}

static int setup_through(void **state) { return setup_mode(state, 0); }
static int setup_back(void **state) { return setup_mode(state, 1); }

static int teardown(void **state)
{
    struct env *e = *state;
    char cmd[512];
    e->fb->fail_writes = 0;
    objects_free(e->o);
    cache_close(e->c);
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
        d[i] = (unsigned char)((i * 7 + seed * 29 + (i >> 10)) % 239);
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

/* UploadPart as h_multipart.c makes it: where the body goes (in place or a staged file), the
 * bytes written, then multipart_put_part(). *@part: the part as recorded. */
static int upload_part(struct env *e, const char *key, const char *id, unsigned n,
                       const void *d, size_t len, struct be_part *part)
{
    int fd = -1, taken = 0;
    uint64_t off = 0;
    char path[4096] = "";
    memset(part, 0, sizeof(*part));
    part->number = n;
    part->size = len;
    md5hex(d, len, part->etag);
    int inplace = multipart_part_target(e->o, "bkt", key, id, n, len, &fd, &off);
    if (inplace < 0)
        return inplace;
    if (inplace) {
        assert_int_equal(pwrite(fd, d, len, (off_t)off), (ssize_t)len);
    } else {
        assert_int_equal(cache_stage_open(e->c, &fd, path), 0);
        assert_int_equal(write(fd, d, len), (ssize_t)len);
    }
    int rc = multipart_put_part(e->o, "bkt", key, id, fd, inplace ? NULL : path, inplace, NULL, part,
                                &taken);
    close(fd);
    if (path[0] && !taken)
        unlink(path);
    return rc;
}

static int read_cached(struct env *e, const char *key, const void *want, size_t len)
{
    struct be_meta m;
    int fd = -1;
    int rc = cache_open_whole(e->c, "bkt", key, &fd, &m);
    if (rc)
        return rc;
    assert_int_equal(m.size, len);
    unsigned char *got = malloc(len ? len : 1);
    assert_int_equal(pread(fd, got, len, 0), (ssize_t)len);
    if (memcmp(got, want, len))
        fail_msg("%s: the cache serves other bytes", key);
    free(got);
    close(fd);
    return 0;
}

static uint64_t staged_bytes(struct env *e)
{
    struct cache_stats cs;
    cache_get_stats(e->c, &cs);
    return cs.dirty_staged_bytes;
}

/* The cache's staged bytes (files outside the index), and all it holds. */
static uint64_t cache_staged(struct env *e, uint64_t *used)
{
    struct cache_stats cs;
    cache_get_stats(e->c, &cs);
    if (used)
        *used = cs.used_bytes;
    return cs.staged_bytes;
}

static int dirty_has(struct env *e, const char *key)
{
    struct be_list_entry *d = NULL;
    size_t n = 0;
    int found = 0;
    assert_int_equal(drain_dirty_keys(e->o->dr, "bkt", "", &d, &n), 0);
    for (size_t i = 0; i < n; i++) {
        found |= !strcmp(d[i].key, key);
        free(d[i].key);
    }
    free(d);
    return found;
}

static int put_object(struct env *e, const char *key, const void *d, size_t len)
{
    char path[4096];
    int fd, taken = 0;
    struct be_meta m = {.size = len};
    md5hex(d, len, m.etag);
    assert_int_equal(cache_stage_open(e->c, &fd, path), 0);
    assert_int_equal(write(fd, d, len), (ssize_t)len);
    int rc = object_put(e->o, "bkt", key, fd, path, NULL, &m, &taken);
    close(fd);
    if (!taken)
        unlink(path);
    return rc;
}

/* ---- write-through ------------------------------------------------------------------------------ */

static void test_multipart_through(void **state)
{
    struct env *e = *state;
    char id[BE_UPLOAD_ID_MAX], id2[BE_UPLOAD_ID_MAX];
    struct be_meta meta = {0}, out;
    struct be_part parts[3];
    unsigned char *d = pattern(2 * (size_t)P + 99, 1);
    snprintf(meta.content_type, sizeof(meta.content_type), "application/x-tar");
    /* an older version cached: the completed object must replace it */
    assert_int_equal(put_object(e, "k", "old", 3), 0);
    assert_int_equal(read_cached(e, "k", "old", 3), 0);
    assert_int_equal(multipart_create(e->o, "bkt", "k", &meta, id), 0);
    assert_int_equal(e->fb->n_mp_create, 1);
    int fd = -1;
    uint64_t off;
    assert_int_equal(multipart_part_target(e->o, "bkt", "k", id, 1, P, &fd, &off), 0);
    for (unsigned i = 0; i < 3; i++)
        assert_int_equal(upload_part(e, "k", id, i + 1, d + (size_t)i * P, i < 2 ? P : 99,
                                     &parts[i]),
                         0);
    assert_int_equal(e->fb->n_mp_part, 3); /* each part straight to the backend */
    assert_int_equal(staged_bytes(e), 0);  /* nothing held against the dirty limit */
    struct be_part *ls;
    size_t n;
    int tr;
    assert_int_equal(multipart_list_parts(e->o, "bkt", "k", id, 0, 1000, &ls, &n, &tr), 0);
    assert_int_equal(n, 3);
    assert_string_equal(ls[2].etag, parts[2].etag);
    free(ls);
    assert_int_equal(multipart_complete(e->o, "bkt", "k", id, parts, 3, &out), 0);
    assert_int_equal(out.size, 2 * (uint64_t)P + 99);
    assert_string_equal(out.content_type, "application/x-tar");
    uint64_t len;
    unsigned char *got = fake_be_data(e->fb, "bkt", "k", &len);
    assert_non_null(got);
    assert_int_equal(len, 2 * (uint64_t)P + 99);
    assert_memory_equal(got, d, len);
    free(got);
    assert_int_equal(read_cached(e, "k", d, 2 * (size_t)P + 99), 0); /* not the old one */
    assert_int_equal(dirty_has(e, "k"), 0);
    /* abort */
    assert_int_equal(multipart_create(e->o, "bkt", "k2", &meta, id2), 0);
    assert_int_equal(fake_be_uploads(e->fb), 1);
    assert_int_equal(multipart_abort(e->o, "bkt", "k2", id2), 0);
    assert_int_equal(fake_be_uploads(e->fb), 0);
    assert_int_equal(multipart_abort(e->o, "bkt", "k2", id2), -S3E_NO_SUCH_UPLOAD);
    free(d);
}

static void test_multipart_through_complete_checks(void **state)
{
    struct env *e = *state;
    char id[BE_UPLOAD_ID_MAX];
    struct be_meta meta = {0}, out;
    struct be_part parts[3], again;
    unsigned char *d = pattern(3 * (size_t)MIB, 2);
    e->cf.max_object_size = 8ull * MIB;
    assert_int_equal(multipart_create(e->o, "bkt", "k", &meta, id), 0);
    for (unsigned i = 0; i < 3; i++)
        assert_int_equal(upload_part(e, "k", id, i + 1, d, 3 * MIB, &parts[i]), 0);
    /* 9 MiB over an 8 MiB limit: refused before the backend makes anything */
    assert_int_equal(multipart_complete(e->o, "bkt", "k", id, parts, 3, &out),
                     -S3E_ENTITY_TOO_LARGE);
    assert_int_equal(e->fb->n_mp_complete, 0);
    assert_int_equal(fake_be_uploads(e->fb), 1); /* the upload stays as it was */
    /* a part re-uploaded since (bigger, another ETag) cannot sneak past the check */
    unsigned char *d2 = pattern(5 * (size_t)MIB, 3);
    assert_int_equal(upload_part(e, "k", id, 2, d2, 5 * MIB, &again), 0);
    assert_int_equal(multipart_complete(e->o, "bkt", "k", id, parts, 2, &out),
                     -S3E_INVALID_PART);
    assert_int_equal(e->fb->n_mp_complete, 0);
    /* out of order: the backend's own answer */
    struct be_part swapped[2] = {again, parts[0]};
    assert_int_equal(multipart_complete(e->o, "bkt", "k", id, swapped, 2, &out),
                     -S3E_INVALID_PART_ORDER);
    /* what fits is made: parts 1 and 2 as they are now, 8 MiB */
    struct be_part fits[2] = {parts[0], again};
    assert_int_equal(multipart_complete(e->o, "bkt", "k", id, fits, 2, &out), 0);
    assert_int_equal(out.size, 8ull * MIB);
    assert_true(fake_be_has(e->fb, "bkt", "k", NULL));
    free(d);
    free(d2);
}

static void test_multipart_through_copy_part(void **state)
{
    struct env *e = *state;
    char id[BE_UPLOAD_ID_MAX];
    struct be_meta meta = {0}, src;
    struct be_part out;
    unsigned char *d = pattern(1000, 4);
    fake_be_put(e->fb, "bkt", "src", d, 1000);
    assert_true(fake_be_has(e->fb, "bkt", "src", &src));
    assert_int_equal(multipart_create(e->o, "bkt", "k", &meta, id), 0);
    const struct {
        int has_range;
        uint64_t off, len;
        struct cond_hdrs c;
        const char *src;
        int rc;
    } cases[] = {
        {0, 0, 0, {0}, "src", 0},
        {1, 0, 1000, {0}, "src", 0},
        {1, 999, 1, {0}, "src", 0},
        {1, 1000, 1, {0}, "src", -S3E_INVALID_RANGE},
        {1, 500, 501, {0}, "src", -S3E_INVALID_RANGE},
        {1, 1, UINT64_MAX, {0}, "src", -S3E_INVALID_RANGE},
        {0, 0, 0, {0}, "nope", -S3E_NO_SUCH_KEY},
        {0, 0, 0, {.if_match = "\"abc\""}, "src", -S3E_PRECONDITION_FAILED},
        {0, 0, 0, {.if_modified_since = "Sat, 01 Jan 2050 00:00:00 GMT"}, "src",
         -S3E_PRECONDITION_FAILED},
        {0, 0, 0, {.if_modified_since = "Sat, 01 Jan 2000 00:00:00 GMT"}, "src", 0},
        {0, 0, 0, {.if_unmodified_since = "Sat, 01 Jan 2000 00:00:00 GMT"}, "src",
         -S3E_PRECONDITION_FAILED},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        unsigned before = e->fb->n_mp_part;
        int rc = multipart_copy_part(e->o, "bkt", "k", id, 1, "bkt", cases[i].src,
                                     cases[i].has_range, cases[i].off, cases[i].len, &cases[i].c,
                                     &out);
        if (rc != cases[i].rc)
            fail_msg("case %zu: rc %d (%s), want %d", i, rc, s3c_strerror(rc), cases[i].rc);
        assert_int_equal(e->fb->n_mp_part, before + (rc == 0));
        if (!rc)
            assert_int_equal(out.size, cases[i].has_range ? cases[i].len : 1000);
    }
    free(d);
}

/* ---- write-back -------------------------------------------------------------------------------- */

static void test_multipart_back(void **state)
{
    struct env *e = *state;
    char id[BE_UPLOAD_ID_MAX];
    struct be_meta meta = {0}, out, again;
    struct be_part parts[3];
    size_t total = 2 * (size_t)P + 12345;
    unsigned char *d = pattern(total, 5);
    e->fb->fail_writes = -S3E_SERVICE_UNAVAILABLE; /* the backend away */
    snprintf(meta.content_type, sizeof(meta.content_type), "application/x-ckpt");
    assert_int_equal(multipart_create(e->o, "bkt", "ck", &meta, id), 0);
    assert_int_equal(e->fb->n_mp_create, 0); /* staged in the cache directory */
    int fd = -1;
    uint64_t off = 1;
    assert_int_equal(multipart_part_target(e->o, "bkt", "ck", id, 2, P, &fd, &off), 1);
    assert_int_equal(off, P); /* P fixed by this part: slot 2 */
    close(fd);
    for (unsigned i = 0; i < 3; i++)
        assert_int_equal(upload_part(e, "ck", id, i + 1, d + (size_t)i * P, i < 2 ? P : 12345,
                                     &parts[i]),
                         0);
    assert_int_equal(e->fb->n_mp_part, 0);
    /* parts count against the dirty limit until the upload ends */
    assert_int_equal(staged_bytes(e), total);
    /* and as staged bytes of the cache; the object takes them over */
    uint64_t used = 0;
    assert_int_equal(cache_staged(e, &used), total);
    assert_true(used >= total);
    assert_int_equal(multipart_complete(e->o, "bkt", "ck", id, parts, 3, &out), 0);
    assert_int_equal(staged_bytes(e), 0);
    assert_int_equal(cache_staged(e, &used), 0);
    assert_true(used >= total && used < total + (1u << 20));
    assert_int_equal(out.size, total);
    assert_int_equal(out.parts_count, 3);
    assert_int_equal(out.part_size, P);
    assert_string_equal(out.content_type, "application/x-ckpt");
    assert_int_equal(dirty_has(e, "ck"), 1);
    assert_int_equal(read_cached(e, "ck", d, total), 0);
    assert_false(fake_be_has(e->fb, "bkt", "ck", NULL));
    /* a repeat of the Complete is answered as the first */
    assert_int_equal(multipart_complete(e->o, "bkt", "ck", id, parts, 3, &again), 0);
    assert_string_equal(again.etag, out.etag);
    /* drained once the backend is back */
    e->fb->fail_writes = 0;
    struct drain_flush_result fr;
    assert_int_equal(drain_flush(e->o->dr, NULL, NULL, 20000, &fr), 0);
    uint64_t len;
    unsigned char *got = fake_be_data(e->fb, "bkt", "ck", &len);
    assert_non_null(got);
    assert_int_equal(len, total);
    assert_memory_equal(got, d, total);
    free(got);
    free(d);
}

static void test_multipart_back_over_limit(void **state)
{
    struct env *e = *state;
    char id[BE_UPLOAD_ID_MAX];
    struct be_meta meta = {0}, out;
    struct be_part parts[2];
    unsigned char *d = pattern(P, 6);
    e->cf.max_object_size = P + 10;
    assert_int_equal(multipart_create(e->o, "bkt", "k", &meta, id), 0);
    assert_int_equal(upload_part(e, "k", id, 1, d, P, &parts[0]), 0);
    assert_int_equal(upload_part(e, "k", id, 2, d, 11, &parts[1]), 0);
    assert_int_equal(multipart_complete(e->o, "bkt", "k", id, parts, 2, &out),
                     -S3E_ENTITY_TOO_LARGE);
    assert_int_equal(dirty_has(e, "k"), 0);
    assert_int_equal(staged_bytes(e), P + 11); /* still the upload's */
    /* abort gives the bytes back */
    assert_int_equal(multipart_abort(e->o, "bkt", "k", id), 0);
    assert_int_equal(staged_bytes(e), 0);
    uint64_t used = 1;
    assert_int_equal(cache_staged(e, &used), 0);
    assert_int_equal(used, 0);
    struct be_part *ls;
    size_t n;
    int tr;
    assert_int_equal(multipart_list_parts(e->o, "bkt", "k", id, 0, 10, &ls, &n, &tr),
                     -S3E_NO_SUCH_UPLOAD);
    free(d);
}

static void test_multipart_back_copy_part(void **state)
{
    struct env *e = *state;
    char id[BE_UPLOAD_ID_MAX];
    struct be_meta meta = {0}, out;
    struct be_part p1, p2;
    struct cond_hdrs none = {0};
    unsigned char *d = pattern(P + 100, 7);
    e->fb->fail_writes = -S3E_SERVICE_UNAVAILABLE;
    /* the source exists only in the cache, dirty */
    assert_int_equal(put_object(e, "src", d, P + 100), 0);
    assert_int_equal(multipart_create(e->o, "bkt", "k", &meta, id), 0);
    assert_int_equal(multipart_copy_part(e->o, "bkt", "k", id, 1, "bkt", "src", 1, 0, P, &none,
                                         &p1),
                     0);
    assert_int_equal(p1.size, P);
    char want[33];
    md5hex(d, P, want);
    assert_string_equal(p1.etag, want); /* the copied range's MD5 */
    assert_int_equal(multipart_copy_part(e->o, "bkt", "k", id, 2, "bkt", "src", 1, P, 100, &none,
                                         &p2),
                     0);
    assert_int_equal(multipart_copy_part(e->o, "bkt", "k", id, 3, "bkt", "src", 1, P, 101, &none,
                                         &p2),
                     -S3E_INVALID_RANGE);
    struct cond_hdrs later = {.if_modified_since = "Sat, 01 Jan 2050 00:00:00 GMT"};
    assert_int_equal(multipart_copy_part(e->o, "bkt", "k", id, 3, "bkt", "src", 0, 0, 0, &later,
                                         &p2),
                     -S3E_PRECONDITION_FAILED);
    assert_int_equal(multipart_copy_part(e->o, "bkt", "k", id, 3, "bkt", "nope", 0, 0, 0, &none,
                                         &p2),
                     -S3E_NO_SUCH_KEY);
    assert_int_equal(e->fb->n_mp_part, 0);
    assert_int_equal(staged_bytes(e), P + 100); /* the two copied parts, held */
    md5hex(d + P, 100, p2.etag);
    p2.number = 2;
    struct be_part parts[2] = {p1, p2};
    assert_int_equal(multipart_complete(e->o, "bkt", "k", id, parts, 2, &out), 0);
    assert_int_equal(read_cached(e, "k", d, P + 100), 0);
    free(d);
}

/* ---- ListMultipartUploads ---------------------------------------------------------------------- */

/* The same listing over either store: uploads of a/1 a/2 b/1 c d/x/y rolled up under "/". */
static void list_rollup(struct env *e)
{
    static const char *const keys[] = {"c", "a/2", "b/1", "a/1", "d/x/y", "b/1"};
    char ids[ARRAY_SIZE(keys)][BE_UPLOAD_ID_MAX];
    struct be_meta meta = {0};
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
        assert_int_equal(multipart_create(e->o, "bkt", keys[i], &meta, ids[i]), 0);
    const struct {
        const char *prefix, *delim, *km;
        unsigned max;
        const char *want; /* uploads' keys and prefixes, in order */
        int truncated;
        const char *next_key;
    } cases[] = {
        {NULL, "/", NULL, 1000, "a/ b/ c d/", 0, NULL},
        {NULL, "/", NULL, 2, "a/ b/", 1, "b/"},
        {NULL, "/", "b/", 2, "c d/", 0, NULL},
        {NULL, "/", "a/", 1, "b/", 1, "b/"},
        {"d/", "/", NULL, 1000, "d/x/", 0, NULL},
        {"a/", "/", NULL, 1000, "a/1 a/2", 0, NULL},
        {NULL, NULL, NULL, 1000, "a/1 a/2 b/1 b/1 c d/x/y", 0, NULL},
        {NULL, "", NULL, 3, "a/1 a/2 b/1", 1, "b/1"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct multipart_uploads u;
        char got[256] = "";
        assert_int_equal(multipart_list_uploads(e->o, "bkt", cases[i].prefix, cases[i].delim,
                                                cases[i].km, NULL, cases[i].max, &u),
                         0);
        /* uploads and prefixes merged in key order, as the response lists them */
        size_t a = 0, b = 0;
        while (a < u.n || b < u.n_prefixes) {
            const char *k;
            if (b >= u.n_prefixes || (a < u.n && strcmp(u.uploads[a].key, u.prefixes[b]) < 0))
                k = u.uploads[a++].key;
            else
                k = u.prefixes[b++];
            snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s", got[0] ? " " : "", k);
        }
        if (strcmp(got, cases[i].want) || u.truncated != cases[i].truncated ||
            (cases[i].next_key && (!u.next_key || strcmp(u.next_key, cases[i].next_key))))
            fail_msg("case %zu: got \"%s\" truncated %d next %s; want \"%s\" %d %s", i, got,
                     u.truncated, u.next_key ? u.next_key : "-", cases[i].want,
                     cases[i].truncated, cases[i].next_key ? cases[i].next_key : "-");
        /* a page ending with an upload names its ID as the next upload-id-marker */
        if (u.truncated && u.n && !strcmp(u.next_key, u.uploads[u.n - 1].key))
            assert_non_null(u.next_upload_id);
        multipart_uploads_free(&u);
    }
    multipart_uploads_free(NULL);
}

static void test_multipart_list_uploads_through(void **state)
{
    list_rollup(*state);
}

static void test_multipart_list_uploads_back(void **state)
{
    struct env *e = *state;
    list_rollup(e);
    assert_int_equal(e->fb->n_mp_list_uploads, 0); /* the staging, not the backend */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_multipart_through, setup_through, teardown),
        cmocka_unit_test_setup_teardown(test_multipart_through_complete_checks, setup_through,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_multipart_through_copy_part, setup_through,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_multipart_back, setup_back, teardown),
        cmocka_unit_test_setup_teardown(test_multipart_back_over_limit, setup_back, teardown),
        cmocka_unit_test_setup_teardown(test_multipart_back_copy_part, setup_back, teardown),
        cmocka_unit_test_setup_teardown(test_multipart_list_uploads_through, setup_through,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_multipart_list_uploads_back, setup_back, teardown),
    };
    return cmocka_run_group_tests_name("multipart", tests, NULL, NULL);
}
