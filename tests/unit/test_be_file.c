/*
 * test_be_file.c: the POSIX directory backend through the counting wrappers of
 * backend.c: objects and metadata across a restart, foreign files, key rules,
 * conflicts, atomic replacement, listing against a brute-force model of S3
 * listing, buckets, multipart and copy.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "backends/backend.h"
#include "backends/mpu_slot.h"
#include "lib/conf.h"
#include "lib/s3err.h"

struct fx {
    char dir[64];
    char url[96];
    struct backend *be;
};

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(p);
}

static int fx_setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    struct errmsg em = { "" };

    snprintf(fx->dir, sizeof(fx->dir), "/tmp/test_be_file.XXXXXX");
    assert_non_null(mkdtemp(fx->dir));
    snprintf(fx->url, sizeof(fx->url), "file://%s", fx->dir);
    assert_int_equal(backend_open(NULL, fx->url, &fx->be, &em), 0);
    assert_int_equal(backend_bucket_create(fx->be, "bkt"), 0);
    *state = fx;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *fx = *state;
    backend_close(fx->be);
    nftw(fx->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    free(fx);
    return 0;
}

static void md5hex(const void *p, size_t n, char out[33])
{
    unsigned char md[16];
    unsigned int l;
    EVP_Digest(p, n, md, &l, EVP_md5(), NULL);
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* An fd holding @data, like the gateway's upload temp file (memfd: another fs). */
static int data_fd(const void *data, size_t n)
{
    int fd = memfd_create("body", 0);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, n), (ssize_t)n);
    return fd;
}

static int put_str(struct backend *be, const char *bucket, const char *key, const char *data,
                   const char *ctype)
{
    struct be_meta m;
    size_t n = strlen(data);
    int fd = data_fd(data, n), rc;

    memset(&m, 0, sizeof(m));
    md5hex(data, n, m.etag);
    if (ctype)
        snprintf(m.content_type, sizeof(m.content_type), "%s", ctype);
    m.size = n;
    rc = backend_put(be, bucket, key, fd, n, &m);
    close(fd);
    return rc;
}

struct sink_buf {
    char *p;
    size_t n;
    struct be_meta meta;
    int metas;
};

static int sb_meta(void *cls, const struct be_meta *m)
{
    struct sink_buf *sb = cls;
    sb->meta = *m;
    sb->metas++;
    return 0;
}

static int sb_data(void *cls, const void *buf, size_t len)
{
    struct sink_buf *sb = cls;
    sb->p = realloc(sb->p, sb->n + len + 1);
    memcpy(sb->p + sb->n, buf, len);
    sb->n += len;
    sb->p[sb->n] = '\0';
    return 0;
}

static char *get_str(struct backend *be, const char *bucket, const char *key, uint64_t off,
                     uint64_t len, int *rc)
{
    struct sink_buf sb = { 0 };
    struct be_sink s = { sb_meta, sb_data, &sb };

    sb.p = calloc(1, 1);
    *rc = backend_get(be, bucket, key, off, len, &s);
    if (*rc == 0)
        assert_int_equal(sb.metas, 1);
    return sb.p;
}

static void reopen(struct fx *fx)
{
    struct errmsg em = { "" };
    backend_close(fx->be);
    fx->be = NULL;
    assert_int_equal(backend_open(NULL, fx->url, &fx->be, &em), 0);
}

/* ------------------------------------------------------------------------------------ */

static void test_be_file_roundtrip_restart(void **state)
{
    struct fx *fx = *state;
    struct be_meta m, h;
    const char *body = "hello, world\n";
    char want[33], *got;
    int fd, rc;

    memset(&m, 0, sizeof(m));
    md5hex(body, strlen(body), m.etag);
    memcpy(want, m.etag, 33);
    snprintf(m.content_type, sizeof(m.content_type), "text/x-test");
    snprintf(m.cache_control, sizeof(m.cache_control), "max-age=60");
    snprintf(m.usermeta, sizeof(m.usermeta), "color:blue\nshape:round\n");
    snprintf(m.checksum_algo, sizeof(m.checksum_algo), "CRC32");
    snprintf(m.checksum, sizeof(m.checksum), "AAAAAA==");
    fd = data_fd(body, strlen(body));
    assert_int_equal(backend_put(fx->be, "bkt", "dir/sub/obj.txt", fd, strlen(body), &m), 0);
    close(fd);

    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(backend_head(fx->be, "bkt", "dir/sub/obj.txt", &h), 0);
        assert_string_equal(h.etag, want);
        assert_int_equal(h.size, strlen(body));
        assert_string_equal(h.content_type, "text/x-test");
        assert_string_equal(h.cache_control, "max-age=60");
        assert_string_equal(h.usermeta, "color:blue\nshape:round\n");
        assert_string_equal(h.checksum_algo, "CRC32");
        assert_string_equal(h.checksum, "AAAAAA==");
        assert_true(h.mtime_ns > 0);
        got = get_str(fx->be, "bkt", "dir/sub/obj.txt", 0, UINT64_MAX, &rc);
        assert_int_equal(rc, 0);
        assert_string_equal(got, body);
        free(got);
        got = get_str(fx->be, "bkt", "dir/sub/obj.txt", 7, 5, &rc);
        assert_int_equal(rc, 0);
        assert_string_equal(got, "world");
        free(got);
        reopen(fx); /* metadata survives a restart */
    }
    assert_int_equal(backend_head(fx->be, "bkt", "nope", &h), -S3E_NO_SUCH_KEY);
    assert_int_equal(backend_head(fx->be, "bkt", "dir/sub", &h), -S3E_NO_SUCH_KEY);
    assert_int_equal(backend_head(fx->be, "nobkt", "x", &h), -S3E_NO_SUCH_BUCKET);
    got = get_str(fx->be, "bkt", "dir/sub/obj.txt", 100, 1, &rc);
    assert_int_equal(rc, -S3E_INVALID_RANGE);
    free(got);

    /* open_fd gives a readable fd and the same metadata */
    assert_int_equal(backend_open_fd(fx->be, "bkt", "dir/sub/obj.txt", &fd, &h), 0);
    {
        char buf[64] = "";
        assert_int_equal(pread(fd, buf, sizeof(buf), 0), (ssize_t)strlen(body));
        assert_string_equal(buf, body);
    }
    close(fd);
    assert_string_equal(h.etag, want);

    /* counters (fresh since the reopen): NO_SUCH_* and ranges are not errors */
    got = get_str(fx->be, "bkt", "dir/sub/obj.txt", 0, UINT64_MAX, &rc);
    free(got);
    assert_int_equal(fx->be->ctr.requests, 6);
    assert_int_equal(fx->be->ctr.errors, 0);
    assert_int_equal(fx->be->ctr.bytes_read, strlen(body));
    {
        struct be_list_req rq = { "bkt", NULL, NULL, NULL, 10 };
        struct be_list_page pg;
        assert_int_equal(backend_list(fx->be, &rq, &pg), 0);
        assert_int_equal(pg.n, 1);
        assert_string_equal(pg.entries[0].key, "dir/sub/obj.txt");
        be_list_page_free(&pg);
    }
}

static void test_be_file_open_errors(void **state)
{
    struct backend *be = NULL;
    struct errmsg em = { "" };
    char url[128];
    int fd;

    (void)state;
    assert_int_equal(backend_open(NULL, "ftp://x", &be, &em), -EINVAL);
    assert_true(em.buf[0] != '\0');
    em.buf[0] = '\0';
    assert_true(backend_open(NULL, "file://relative/dir", &be, &em) < 0);
    assert_true(em.buf[0] != '\0');
    em.buf[0] = '\0';
    assert_true(backend_open(NULL, "file:///nonexistent/s3c/dir", &be, &em) < 0);
    assert_non_null(strstr(em.buf, "/nonexistent/s3c/dir"));
    fd = open("/tmp/test_be_file.notadir", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    close(fd);
    snprintf(url, sizeof(url), "file:///tmp/test_be_file.notadir");
    assert_true(backend_open(NULL, url, &be, &em) < 0);
    assert_null(be);
    unlink("/tmp/test_be_file.notadir");
}

static void test_be_file_foreign_file(void **state)
{
    struct fx *fx = *state;
    char path[256], want[33], xa[16];
    const char *body = "written by another tool";
    struct be_meta h;
    int fd;

    snprintf(path, sizeof(path), "%s/bkt/f", fx->dir);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/bkt/f/notes.txt", fx->dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_int_equal(write(fd, body, strlen(body)), (ssize_t)strlen(body));
    close(fd);
    md5hex(body, strlen(body), want);

    assert_int_equal(getxattr(path, "user.s3cached", xa, sizeof(xa)), -1);
    assert_int_equal(backend_head(fx->be, "bkt", "f/notes.txt", &h), 0);
    assert_string_equal(h.etag, want);
    assert_string_equal(h.content_type, "text/plain");
    assert_int_equal(h.size, strlen(body));
    assert_true(getxattr(path, "user.s3cached", NULL, 0) > 0); /* remembered */
    assert_int_equal(backend_head(fx->be, "bkt", "f/notes.txt", &h), 0);
    assert_string_equal(h.etag, want);

    /* changed behind our back: the stale xattr is ignored */
    fd = open(path, O_WRONLY | O_APPEND);
    assert_int_equal(write(fd, "!", 1), 1);
    close(fd);
    {
        char both[64];
        snprintf(both, sizeof(both), "%s!", body);
        md5hex(both, strlen(both), want);
    }
    assert_int_equal(backend_head(fx->be, "bkt", "f/notes.txt", &h), 0);
    assert_string_equal(h.etag, want);
    assert_int_equal(h.size, strlen(body) + 1);

    /* a foreign file without an extension */
    snprintf(path, sizeof(path), "%s/bkt/f/blob", fx->dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    close(fd);
    assert_int_equal(backend_head(fx->be, "bkt", "f/blob", &h), 0);
    assert_string_equal(h.etag, "d41d8cd98f00b204e9800998ecf8427e");
    assert_string_equal(h.content_type, "application/octet-stream");
}

static void test_be_file_key_rules(void **state)
{
    static const struct { const char *key; int want; } keys[] = {
        { "ok", 0 }, { "a/b/c", 0 }, { "dir/", 0 }, { "..a", 0 }, { "a..", 0 }, { ".hidden", 0 },
        { "", -S3E_INVALID_KEY }, { "/abs", -S3E_INVALID_KEY }, { "../x", -S3E_INVALID_KEY },
        { "a/../../x", -S3E_INVALID_KEY }, { "a/./b", -S3E_INVALID_KEY },
        { "a//b", -S3E_INVALID_KEY }, { "..", -S3E_INVALID_KEY }, { ".", -S3E_INVALID_KEY },
        { "a/..", -S3E_INVALID_KEY }, { "dir//", -S3E_INVALID_KEY },
        { ".s3cached/tmp/x", -S3E_INVALID_KEY }, { "a/.s3cached-dir", -S3E_INVALID_KEY },
    };
    static const struct { const char *name; int ok; } buckets[] = {
        { "abc", 1 }, { "my-bucket.v2", 1 }, { "a1b", 1 }, { "ab", 0 }, { "Abc", 0 },
        { "-abc", 0 }, { "abc-", 0 }, { ".abc", 0 }, { "_abc", 0 }, { "a_b", 0 },
        { "192.168.1.1", 0 }, { "192.168.1", 1 },
        { "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 1 },
        { "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 0 },
    };
    struct fx *fx = *state;
    char big[1100], comp[300];
    struct be_meta h;

    for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
        assert_int_equal(backend_check_key(keys[i].key, strlen(keys[i].key)), keys[i].want);
        if (keys[i].want)
            assert_int_equal(put_str(fx->be, "bkt", keys[i].key, "x", NULL), keys[i].want);
    }
    assert_int_equal(backend_check_key("a\0b", 3), -S3E_INVALID_KEY);
    memset(big, 'k', 1025);
    big[1025] = '\0';
    assert_int_equal(backend_check_key(big, 1025), -S3E_KEY_TOO_LONG);
    memset(comp, 'c', 256);
    comp[256] = '\0';
    assert_int_equal(backend_check_key(comp, 256), -S3E_INVALID_KEY);
    comp[255] = '\0';
    assert_int_equal(backend_check_key(comp, 255), 0);
    for (size_t i = 0; i < ARRAY_SIZE(buckets); i++)
        assert_int_equal(backend_check_bucket_name(buckets[i].name) == 0, buckets[i].ok);

    /* A symlink placed inside the store cannot carry a write outside the root. */
    {
        char out[128], link[256], probe[300];
        struct stat st;
        snprintf(out, sizeof(out), "%s-outside", fx->dir);
        assert_int_equal(mkdir(out, 0755), 0);
        snprintf(link, sizeof(link), "%s/bkt/escape", fx->dir);
        assert_int_equal(symlink(out, link), 0);
        assert_int_equal(put_str(fx->be, "bkt", "escape/evil", "x", NULL), -S3E_KEY_CONFLICT);
        snprintf(probe, sizeof(probe), "%s/evil", out);
        assert_int_equal(stat(probe, &st), -1);
        assert_int_equal(backend_del(fx->be, "bkt", "escape/evil"), 0);
        unlink(link);
        rmdir(out);
    }
    assert_int_equal(backend_head(fx->be, "bkt", "../x", &h), -S3E_INVALID_KEY);
    assert_int_equal(put_str(fx->be, "nobkt", "x", "x", NULL), -S3E_NO_SUCH_BUCKET);
}

static int is_dir(const struct fx *fx, const char *rel)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", fx->dir, rel);
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static ino_t ino_of(const struct fx *fx, const char *rel)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", fx->dir, rel);
    return lstat(path, &st) == 0 ? st.st_ino : 0;
}

static void want_body(struct backend *be, const char *key, const char *body)
{
    int rc;
    char *got = get_str(be, "bkt", key, 0, UINT64_MAX, &rc);
    if (rc != 0 || strcmp(got, body) != 0)
        fail_msg("GET %s: rc %d body \"%s\", want \"%s\"", key, rc, got, body);
    free(got);
}

/* Lists bkt with @prefix/@delim into "k1,k2/,..." (prefixes end in their delimiter). */
static void list_str(struct backend *be, const char *prefix, const char *delim, char *out,
                     size_t cap)
{
    struct be_list_req rq = { "bkt", prefix, delim, NULL, 1000 };
    struct be_list_page pg;
    size_t len = 0;

    out[0] = '\0';
    assert_int_equal(backend_list(be, &rq, &pg), 0);
    for (size_t i = 0; i < pg.n; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? "," : "", pg.entries[i].key);
    be_list_page_free(&pg);
}

/* Keys "a" and "a/b" coexist as in S3, written in either order; the file "a" nests into
 * directory "a" as its reserved name keeping its inode; deleting either leaves the other. */
static void test_be_file_nested_keys(void **state)
{
    struct fx *fx = *state;
    struct be_meta h;
    char got[512];
    ino_t ino;

    /* file first, then a key under it */
    assert_int_equal(put_str(fx->be, "bkt", "a", "file a", "text/x-a"), 0);
    ino = ino_of(fx, "bkt/a");
    assert_false(is_dir(fx, "bkt/a"));
    assert_int_equal(put_str(fx->be, "bkt", "a/b", "file a/b", NULL), 0);
    assert_true(is_dir(fx, "bkt/a"));
    assert_int_equal(ino_of(fx, "bkt/a/.s3cached-obj"), ino); /* the same file, nested */
    want_body(fx->be, "a", "file a");
    want_body(fx->be, "a/b", "file a/b");
    assert_int_equal(backend_head(fx->be, "bkt", "a", &h), 0);
    assert_int_equal(h.size, 6);
    assert_string_equal(h.content_type, "text/x-a"); /* metadata went along */
    /* a marker "a/" and a deeper chain nest the same way */
    assert_int_equal(put_str(fx->be, "bkt", "a/", "marker", NULL), 0);
    assert_int_equal(put_str(fx->be, "bkt", "a/b/c", "file a/b/c", NULL), 0);
    want_body(fx->be, "a/b", "file a/b");
    want_body(fx->be, "a/", "marker");
    /* neighbours that sort between "a" and "a/" ('-' 0x2d and '.' 0x2e < '/' 0x2f) */
    assert_int_equal(put_str(fx->be, "bkt", "a-b", "x", NULL), 0);
    assert_int_equal(put_str(fx->be, "bkt", "a.txt", "x", NULL), 0);
    assert_int_equal(put_str(fx->be, "bkt", "a0", "x", NULL), 0);
    list_str(fx->be, "", NULL, got, sizeof(got));
    assert_string_equal(got, "a,a-b,a.txt,a/,a/b,a/b/c,a0");
    list_str(fx->be, "", "/", got, sizeof(got));
    assert_string_equal(got, "a,a-b,a.txt,a/,a0");
    list_str(fx->be, "a/", "/", got, sizeof(got));
    assert_string_equal(got, "a/,a/b,a/b/");
    list_str(fx->be, "a", NULL, got, sizeof(got));
    assert_string_equal(got, "a,a-b,a.txt,a/,a/b,a/b/c,a0");
    /* replacing the nested key keeps the others */
    assert_int_equal(put_str(fx->be, "bkt", "a", "file a v2", NULL), 0);
    want_body(fx->be, "a", "file a v2");
    want_body(fx->be, "a/b/c", "file a/b/c");
    /* delete each: the others survive */
    assert_int_equal(backend_del(fx->be, "bkt", "a/b"), 0);
    assert_int_equal(backend_head(fx->be, "bkt", "a/b", &h), -S3E_NO_SUCH_KEY);
    want_body(fx->be, "a/b/c", "file a/b/c");
    want_body(fx->be, "a", "file a v2");
    assert_int_equal(backend_del(fx->be, "bkt", "a"), 0);
    assert_int_equal(backend_head(fx->be, "bkt", "a", &h), -S3E_NO_SUCH_KEY);
    want_body(fx->be, "a/b/c", "file a/b/c");
    want_body(fx->be, "a/", "marker");
    assert_int_equal(backend_del(fx->be, "bkt", "a/b/c"), 0);
    assert_int_equal(backend_del(fx->be, "bkt", "a/"), 0);
    assert_false(is_dir(fx, "bkt/a")); /* empty directories go */
    list_str(fx->be, "", NULL, got, sizeof(got));
    assert_string_equal(got, "a-b,a.txt,a0");

    /* directory first, then the key of its name: straight to the reserved name */
    assert_int_equal(put_str(fx->be, "bkt", "c/d", "file c/d", NULL), 0);
    assert_int_equal(put_str(fx->be, "bkt", "c", "file c", NULL), 0);
    assert_true(is_dir(fx, "bkt/c"));
    want_body(fx->be, "c", "file c");
    want_body(fx->be, "c/d", "file c/d");
    list_str(fx->be, "c", "/", got, sizeof(got));
    assert_string_equal(got, "c,c/");
    /* the last key under it goes: "c" stays, and "c/" is no common prefix */
    assert_int_equal(backend_del(fx->be, "bkt", "c/d"), 0);
    want_body(fx->be, "c", "file c");
    list_str(fx->be, "c", "/", got, sizeof(got));
    assert_string_equal(got, "c");
    list_str(fx->be, "", NULL, got, sizeof(got));
    assert_string_equal(got, "a-b,a.txt,a0,c");
    assert_int_equal(backend_del(fx->be, "bkt", "c"), 0);
    assert_false(is_dir(fx, "bkt/c"));
    /* copy onto and from a nested key */
    assert_int_equal(put_str(fx->be, "bkt", "e/f", "file e/f", NULL), 0);
    assert_int_equal(backend_copy(fx->be, "bkt", "a0", "bkt", "e", NULL, &h), 0);
    want_body(fx->be, "e", "x");
    assert_int_equal(backend_copy(fx->be, "bkt", "e", "bkt", "e/g", NULL, &h), 0);
    want_body(fx->be, "e/g", "x");
    /* a folder marker "m/" nests the file "m" too */
    assert_int_equal(put_str(fx->be, "bkt", "m", "file m", NULL), 0);
    assert_int_equal(put_str(fx->be, "bkt", "m/", "", NULL), 0);
    want_body(fx->be, "m", "file m");
    want_body(fx->be, "m/", "");
    list_str(fx->be, "m", "/", got, sizeof(got));
    assert_string_equal(got, "m,m/");
    assert_int_equal(backend_del(fx->be, "bkt", "m/"), 0);
    want_body(fx->be, "m", "file m");
    list_str(fx->be, "m", "/", got, sizeof(got));
    assert_string_equal(got, "m");
    /* a bucket holding only a nested key is not empty */
    assert_int_equal(backend_bucket_create(fx->be, "solo"), 0);
    assert_int_equal(put_str(fx->be, "solo", "k/x", "1", NULL), 0);
    assert_int_equal(put_str(fx->be, "solo", "k", "2", NULL), 0);
    assert_int_equal(backend_del(fx->be, "solo", "k/x"), 0);
    assert_int_equal(backend_bucket_delete(fx->be, "solo"), -S3E_BUCKET_NOT_EMPTY);
    assert_int_equal(backend_del(fx->be, "solo", "k"), 0);
    assert_int_equal(backend_bucket_delete(fx->be, "solo"), 0);
    /* conflicts that remain: a symlink or another kind of file in the way */
    {
        char path[256];
        snprintf(path, sizeof(path), "%s/bkt/lnk", fx->dir);
        assert_int_equal(symlink("a0", path), 0);
        assert_int_equal(put_str(fx->be, "bkt", "lnk/x", "1", NULL), -S3E_KEY_CONFLICT);
        snprintf(path, sizeof(path), "%s/bkt/fifo", fx->dir);
        assert_int_equal(mkfifo(path, 0644), 0);
        assert_int_equal(put_str(fx->be, "bkt", "fifo/x", "1", NULL), -S3E_KEY_CONFLICT);
    }
    assert_int_equal(fx->be->ctr.errors, 0); /* conflicts are the client's */
}

/* ---- races between writers of "k" and "k/x" (two backends = two gateway processes) ---- */

struct nest_op {
    struct backend *be;
    char key[64];
    const char *body; /* NULL: delete */
    int rc;
    volatile int *go;
};

static void *nest_op_run(void *p)
{
    struct nest_op *o = p;
    while (!__atomic_load_n(o->go, __ATOMIC_ACQUIRE))
        ;
    o->rc = o->body ? put_str(o->be, "bkt", o->key, o->body, NULL) : backend_del(o->be, "bkt", o->key);
    return NULL;
}

struct nest_reader {
    struct backend *be;
    char key[64];
    volatile int stop;
    int misses, reads;
};

static void *nest_reader_run(void *p)
{
    struct nest_reader *r = p;
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
        struct be_meta m;
        int fd;
        if (backend_open_fd(r->be, "bkt", r->key, &fd, &m) != 0) {
            r->misses++;
            continue;
        }
        close(fd);
        r->reads++;
    }
    return NULL;
}

/* Runs @a and @b at once while a reader opens @watch (NULL: none): the reader must never miss. */
static void race2(struct nest_op *a, struct nest_op *b, struct backend *rbe, const char *watch)
{
    volatile int go = 0;
    struct nest_reader r = { rbe, "", 0, 0, 0 };
    pthread_t ta, tb, tr;

    a->go = b->go = &go;
    if (watch) {
        snprintf(r.key, sizeof(r.key), "%s", watch);
        pthread_create(&tr, NULL, nest_reader_run, &r);
    }
    pthread_create(&ta, NULL, nest_op_run, a);
    pthread_create(&tb, NULL, nest_op_run, b);
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    if (watch) {
        __atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
        pthread_join(tr, NULL);
        if (r.misses)
            fail_msg("reader of %s missed it %d times (%d reads)", watch, r.misses, r.reads);
    }
    assert_int_equal(a->rc, 0);
    assert_int_equal(b->rc, 0);
}

static void test_be_file_nested_races(void **state)
{
    struct fx *fx = *state;
    struct backend *be2 = NULL;
    struct errmsg em = { "" };
    struct be_meta h;

    assert_int_equal(backend_open(NULL, fx->url, &be2, &em), 0);
    for (int i = 0; i < 150; i++) {
        struct backend *other = i % 2 ? be2 : fx->be; /* odd rounds: another "process" */
        struct nest_op a, b;
        char k[32], kx[40];

        memset(&a, 0, sizeof(a));
        memset(&b, 0, sizeof(b));
        a.be = fx->be;
        b.be = other;

        /* PUT k (a new version) while PUT k/x nests the old one: neither is lost, and k is
         * readable throughout */
        snprintf(k, sizeof(k), "r%d", i);
        snprintf(kx, sizeof(kx), "r%d/x", i);
        assert_int_equal(put_str(fx->be, "bkt", k, "v0", NULL), 0);
        snprintf(a.key, sizeof(a.key), "%s", k);
        a.body = "v1";
        snprintf(b.key, sizeof(b.key), "%s", kx);
        b.body = "x";
        race2(&a, &b, fx->be, k);
        want_body(fx->be, k, "v1");
        want_body(fx->be, kx, "x");

        /* DELETE k while PUT k/x nests it: k stays deleted, k/x is there */
        snprintf(k, sizeof(k), "d%d", i);
        snprintf(kx, sizeof(kx), "d%d/x", i);
        assert_int_equal(put_str(fx->be, "bkt", k, "v0", NULL), 0);
        snprintf(a.key, sizeof(a.key), "%s", k);
        a.body = NULL;
        snprintf(b.key, sizeof(b.key), "%s", kx);
        b.body = "x";
        race2(&a, &b, NULL, NULL);
        assert_int_equal(backend_head(fx->be, "bkt", k, &h), -S3E_NO_SUCH_KEY);
        want_body(fx->be, kx, "x");

        /* PUT k while DELETE k/x empties directory k: k is there, k/x is not */
        snprintf(k, sizeof(k), "e%d", i);
        snprintf(kx, sizeof(kx), "e%d/x", i);
        assert_int_equal(put_str(fx->be, "bkt", kx, "x", NULL), 0);
        snprintf(a.key, sizeof(a.key), "%s", k);
        a.body = "v1";
        snprintf(b.key, sizeof(b.key), "%s", kx);
        b.body = NULL;
        race2(&a, &b, NULL, NULL);
        want_body(fx->be, k, "v1");
        assert_int_equal(backend_head(fx->be, "bkt", kx, &h), -S3E_NO_SUCH_KEY);

        /* PUT k/x and PUT k/y/z both nesting k: all three there, k readable throughout */
        snprintf(k, sizeof(k), "n%d", i);
        assert_int_equal(put_str(fx->be, "bkt", k, "v0", NULL), 0);
        snprintf(a.key, sizeof(a.key), "n%d/x", i);
        a.body = "x";
        snprintf(b.key, sizeof(b.key), "n%d/y/z", i);
        b.body = "z";
        race2(&a, &b, fx->be, k);
        want_body(fx->be, k, "v0");
        want_body(fx->be, a.key, "x");
        want_body(fx->be, b.key, "z");
    }
    backend_close(be2);
}

/* ---- symlinks: reads stay under the root unless --follow-symlinks; DELETE never reports
 * success while the object stays readable; no xattr on a file outside the store ---- */

static void write_file(const char *path, const char *body)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, body, strlen(body)), (ssize_t)strlen(body));
    close(fd);
}

static void reopen_follow(struct fx *fx, int follow)
{
    struct errmsg em = { "" };
    struct conf cf;

    memset(&cf, 0, sizeof(cf));
    cf.follow_symlinks = follow;
    backend_close(fx->be);
    fx->be = NULL;
    assert_int_equal(backend_open(&cf, fx->url, &fx->be, &em), 0);
}

static int has_xattr(const char *path)
{
    return lgetxattr(path, "user.s3cached", NULL, 0) >= 0;
}

static void test_be_file_symlinks(void **state)
{
    struct fx *fx = *state;
    char out[128], path[512], target[512], got[1024], want[33];
    struct be_meta h;
    struct stat st;
    int rc;

    /* outside the store: a file and a directory holding one */
    snprintf(out, sizeof(out), "%s-outside", fx->dir);
    assert_int_equal(mkdir(out, 0755), 0);
    snprintf(path, sizeof(path), "%s/data.bin", out);
    write_file(path, "outside bytes");
    md5hex("outside bytes", 13, want);
    /* in the bucket: links out (absolute, relative), a link in, a directory link in and out */
    snprintf(path, sizeof(path), "%s/bkt/abs", fx->dir);
    snprintf(target, sizeof(target), "%s/data.bin", out);
    assert_int_equal(symlink(target, path), 0);
    snprintf(path, sizeof(path), "%s/bkt/rel", fx->dir);
    snprintf(target, sizeof(target), "../../%s-outside/data.bin", strrchr(fx->dir, '/') + 1);
    assert_int_equal(symlink(target, path), 0);
    assert_int_equal(stat(path, &st), 0); /* the link does resolve */
    snprintf(path, sizeof(path), "%s/bkt/outdir", fx->dir);
    assert_int_equal(symlink(out, path), 0);
    assert_int_equal(put_str(fx->be, "bkt", "sub/real.txt", "inside", NULL), 0);
    snprintf(path, sizeof(path), "%s/bkt/inlink", fx->dir);
    assert_int_equal(symlink("sub/real.txt", path), 0);
    snprintf(path, sizeof(path), "%s/bkt/indir", fx->dir);
    assert_int_equal(symlink("sub", path), 0);
    /* loops: walked once with --follow-symlinks, never again */
    snprintf(path, sizeof(path), "%s/bkt/sub/self", fx->dir);
    assert_int_equal(symlink(".", path), 0);
    snprintf(path, sizeof(path), "%s/bkt/sub/up", fx->dir);
    assert_int_equal(symlink("..", path), 0);
    /* a directory whose only entry leads out of the store */
    snprintf(path, sizeof(path), "%s/bkt/only", fx->dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/bkt/only/x", fx->dir);
    snprintf(target, sizeof(target), "%s/data.bin", out);
    assert_int_equal(symlink(target, path), 0);

    for (int follow = 0; follow < 2; follow++) {
        reopen_follow(fx, follow);
        /* out of the root: 404 by default, served with --follow-symlinks */
        int want_rc = follow ? 0 : -S3E_NO_SUCH_KEY;
        assert_int_equal(backend_head(fx->be, "bkt", "abs", &h), want_rc);
        if (follow)
            assert_string_equal(h.etag, want);
        assert_int_equal(backend_head(fx->be, "bkt", "rel", &h), want_rc);
        assert_int_equal(backend_head(fx->be, "bkt", "outdir/data.bin", &h), want_rc);
        char *body = get_str(fx->be, "bkt", "abs", 0, UINT64_MAX, &rc);
        assert_int_equal(rc, want_rc);
        if (follow)
            assert_string_equal(body, "outside bytes");
        free(body);
        /* links that stay under the root are served either way */
        want_body(fx->be, "inlink", "inside");
        want_body(fx->be, "indir/real.txt", "inside");
        /* listings: links to files out of the root only with --follow-symlinks; linked
         * directories walked only then, each loop once; a directory holding only a link out
         * is no common prefix without it */
        list_str(fx->be, "", NULL, got, sizeof(got));
        assert_string_equal(got, follow ? "abs,indir/real.txt,inlink,only/x,outdir/data.bin,rel,"
                                          "sub/real.txt"
                                        : "inlink,sub/real.txt");
        list_str(fx->be, "", "/", got, sizeof(got));
        assert_string_equal(got, follow ? "abs,indir/,inlink,only/,outdir/,rel,sub/"
                                        : "inlink,sub/");
        list_str(fx->be, "outdir/", NULL, got, sizeof(got)); /* no walk through a link */
        assert_string_equal(got, follow ? "outdir/data.bin" : "");
        list_str(fx->be, "sub/", "/", got, sizeof(got));
        assert_string_equal(got, "sub/real.txt");
        /* twice: the second HEAD uses the remembered ETag */
        assert_int_equal(backend_head(fx->be, "bkt", "abs", &h), want_rc);
        /* no xattr was ever written outside */
        snprintf(path, sizeof(path), "%s/data.bin", out);
        assert_false(has_xattr(path));
        /* DELETE does not go through a directory link: refused while readable */
        assert_int_equal(backend_del(fx->be, "bkt", "indir/real.txt"), -S3E_ACCESS_DENIED);
        want_body(fx->be, "indir/real.txt", "inside");
        assert_int_equal(backend_del(fx->be, "bkt", "outdir/data.bin"),
                         follow ? -S3E_ACCESS_DENIED : 0);
        assert_int_equal(stat(path, &st), 0);
        /* a key that is a link to a directory without a key of its own: nothing to delete */
        assert_int_equal(backend_del(fx->be, "bkt", "indir"), 0);
        snprintf(path, sizeof(path), "%s/bkt/indir", fx->dir);
        assert_int_equal(lstat(path, &st), 0);
    }
    /* the link is the key: DELETE removes the link, never the file it points to */
    assert_int_equal(backend_del(fx->be, "bkt", "abs"), 0);
    assert_int_equal(backend_head(fx->be, "bkt", "abs", &h), -S3E_NO_SUCH_KEY);
    snprintf(path, sizeof(path), "%s/data.bin", out);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(backend_del(fx->be, "bkt", "inlink"), 0);
    assert_int_equal(backend_head(fx->be, "bkt", "inlink", &h), -S3E_NO_SUCH_KEY);
    want_body(fx->be, "sub/real.txt", "inside");
    /* a link inside the store pointing at a file inside gets its xattr as any file */
    snprintf(path, sizeof(path), "%s/bkt/sub/real.txt", fx->dir);
    assert_true(has_xattr(path));
    /* writes never go through links: a PUT replaces the link itself */
    assert_int_equal(put_str(fx->be, "bkt", "rel", "replaced", NULL), 0);
    snprintf(path, sizeof(path), "%s/data.bin", out);
    {
        char buf[32] = "";
        int fd = open(path, O_RDONLY);
        assert_int_equal(read(fd, buf, sizeof(buf)), 13);
        close(fd);
        assert_string_equal(buf, "outside bytes");
    }
    assert_int_equal(put_str(fx->be, "bkt", "outdir/new", "x", NULL), -S3E_KEY_CONFLICT);
    snprintf(path, sizeof(path), "%s/new", out);
    assert_int_equal(stat(path, &st), -1);
    snprintf(path, sizeof(path), "%s/data.bin", out);
    assert_false(has_xattr(path));
    unlink(path);
    rmdir(out);
}

/* A DELETE the file system refuses (an immutable file: EPERM) is an error, not a 204 with the
 * object still readable (it was taken for "the leaf is a directory" before). */
static void test_be_file_delete_refused(void **state)
{
    struct fx *fx = *state;
    char path[256];
    struct be_meta h;
    int fd, flags = 0, rc;

    assert_int_equal(put_str(fx->be, "bkt", "stuck", "x", NULL), 0);
    snprintf(path, sizeof(path), "%s/bkt/stuck", fx->dir);
    fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    if (ioctl(fd, FS_IOC_GETFLAGS, &flags) < 0 ||
        (flags |= FS_IMMUTABLE_FL, ioctl(fd, FS_IOC_SETFLAGS, &flags) < 0)) {
        close(fd);
        print_message("skipped: cannot make a file immutable here (%s)\n", strerror(errno));
        skip();
    }
    rc = backend_del(fx->be, "bkt", "stuck");
    flags &= ~FS_IMMUTABLE_FL;
    assert_int_equal(ioctl(fd, FS_IOC_SETFLAGS, &flags), 0);
    close(fd);
    assert_true(rc < 0);
    assert_int_equal(s3err_from_errno(rc, 0), -S3E_ACCESS_DENIED);
    assert_int_equal(backend_head(fx->be, "bkt", "stuck", &h), 0);
    assert_int_equal(backend_del(fx->be, "bkt", "stuck"), 0);
    assert_int_equal(backend_head(fx->be, "bkt", "stuck", &h), -S3E_NO_SUCH_KEY);
}

struct reader_arg {
    struct backend *be;
    volatile int stop;
    int bad;
    int reads;
};

static void *reader(void *p)
{
    struct reader_arg *a = p;
    char *buf = malloc(1 << 20);

    while (!a->stop) {
        struct be_meta m;
        int fd;
        if (backend_open_fd(a->be, "bkt", "atomic", &fd, &m) != 0) {
            a->bad++;
            continue;
        }
        ssize_t n = pread(fd, buf, 1 << 20, 0);
        close(fd);
        if (n != (1 << 20) || (uint64_t)n != m.size) {
            a->bad++;
            continue;
        }
        for (ssize_t i = 1; i < n; i++)
            if (buf[i] != buf[0]) {
                a->bad++;
                break;
            }
        a->reads++;
    }
    free(buf);
    return NULL;
}

static void test_be_file_atomic_put(void **state)
{
    struct fx *fx = *state;
    size_t n = 1 << 20;
    char *body = malloc(n), *old = malloc(n);
    struct reader_arg ra = { fx->be, 0, 0, 0 };
    struct be_meta m;
    pthread_t th;
    int ofd;

    memset(body, 'A', n);
    {
        int fd = data_fd(body, n);
        memset(&m, 0, sizeof(m));
        md5hex(body, n, m.etag);
        assert_int_equal(backend_put(fx->be, "bkt", "atomic", fd, n, &m), 0);
        close(fd);
    }
    /* a reader of the old version keeps it */
    assert_int_equal(backend_open_fd(fx->be, "bkt", "atomic", &ofd, &m), 0);
    pthread_create(&th, NULL, reader, &ra);
    for (int i = 0; i < 40; i++) {
        memset(body, 'B' + i % 20, n);
        int fd = data_fd(body, n);
        md5hex(body, n, m.etag);
        assert_int_equal(backend_put(fx->be, "bkt", "atomic", fd, n, &m), 0);
        close(fd);
    }
    ra.stop = 1;
    pthread_join(th, NULL);
    assert_int_equal(ra.bad, 0);
    assert_true(ra.reads > 0);
    assert_int_equal(pread(ofd, old, n, 0), (ssize_t)n);
    for (size_t i = 0; i < n; i++)
        if (old[i] != 'A')
            fail_msg("old reader saw new bytes at %zu", i);
    close(ofd);
    free(body);
    free(old);
}

static void test_be_file_delete_parents(void **state)
{
    struct fx *fx = *state;
    char path[256];
    struct stat st;

    assert_int_equal(put_str(fx->be, "bkt", "x/y/z/f", "1", NULL), 0);
    assert_int_equal(put_str(fx->be, "bkt", "x/keep", "1", NULL), 0);
    assert_int_equal(backend_del(fx->be, "bkt", "x/y/z/f"), 0);
    snprintf(path, sizeof(path), "%s/bkt/x/y", fx->dir);
    assert_int_equal(stat(path, &st), -1);
    snprintf(path, sizeof(path), "%s/bkt/x", fx->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(backend_del(fx->be, "bkt", "x/keep"), 0);
    assert_int_equal(stat(path, &st), -1);
    snprintf(path, sizeof(path), "%s/bkt", fx->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(backend_del(fx->be, "bkt", "x/keep"), 0);
    assert_int_equal(backend_del(fx->be, "bkt", "never/was"), 0);
    assert_int_equal(backend_del(fx->be, "nobkt", "k"), -S3E_NO_SUCH_BUCKET);
    /* a marker key */
    assert_int_equal(put_str(fx->be, "bkt", "m/", "", NULL), 0);
    assert_int_equal(backend_del(fx->be, "bkt", "m/"), 0);
    snprintf(path, sizeof(path), "%s/bkt/m", fx->dir);
    assert_int_equal(stat(path, &st), -1);
}

struct race_arg {
    struct backend *be;
    const char *key;
    int failures;
};

static void *race_worker(void *p)
{
    struct race_arg *a = p;
    for (int i = 0; i < 300; i++) {
        int rc = put_str(a->be, "bkt", a->key, "race", NULL);
        if (rc != 0) {
            a->failures++;
            fprintf(stderr, "race: put %s: %d\n", a->key, rc);
        }
        rc = backend_del(a->be, "bkt", a->key);
        if (rc != 0) {
            a->failures++;
            fprintf(stderr, "race: del %s: %d\n", a->key, rc);
        }
    }
    return NULL;
}

/* Creating parents races with deleting now-empty parents: puts retry and succeed. */
static void test_be_file_parent_race(void **state)
{
    struct fx *fx = *state;
    struct race_arg a = { fx->be, "r/s/t/k1", 0 }, b = { fx->be, "r/s/t/k2", 0 };
    pthread_t ta, tb;

    pthread_create(&ta, NULL, race_worker, &a);
    pthread_create(&tb, NULL, race_worker, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.failures + b.failures, 0);
}

/* ------------------------------------------------------------------------------------ */
/* Listing against a model                                                               */

/* Keys in the order they are written: "p/q/r", "zz/top" and "a/c" are files nested by a later
 * key under them, "a", "b0/y", "dir" and "p/q" go straight into their directories. */
static const char *list_keys[] = {
    "p/q/r", "zz/top", "a/c", "a-b", "a.b", "a0", "a/", "a/b", "a/c/d", "a/c/e", "a/c-", "a/c.x",
    "a/ca/", "b", "b0/x", "b0/y/", "b0/y/z", "\xc3\xa9t\xc3\xa9", "\xe2\x82\xac/1", "zz/top/x",
    "A", "_u", "~t", " sp", "p/q/r/s/t", "p/q/r/s/u", "p/q-r", "p/q.r", "dir/", "dir/x-y/z", "a",
    "b0/y", "dir", "p/q",
};

static int strp_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

struct ment {
    char key[1100];
    int is_prefix;
};

static size_t model_list(const char **sorted, size_t nk, const char *P, const char *D,
                         const char *M, unsigned max, struct ment *out, int *trunc)
{
    size_t n = 0, pl = strlen(P), dl = D ? strlen(D) : 0;
    char last_cp[1100] = "";

    *trunc = 0;
    for (size_t i = 0; i < nk; i++) {
        const char *k = sorted[i];
        char ent[1100];
        int isp = 0;
        if (strncmp(k, P, pl) || (M && *M && strcmp(k, M) <= 0))
            continue;
        const char *d = dl ? strstr(k + pl, D) : NULL;
        if (d) {
            size_t cl = (size_t)(d - k) + dl;
            memcpy(ent, k, cl);
            ent[cl] = '\0';
            if ((M && *M && strcmp(ent, M) <= 0) || strcmp(ent, last_cp) == 0)
                continue;
            snprintf(last_cp, sizeof(last_cp), "%s", ent);
            isp = 1;
        } else {
            snprintf(ent, sizeof(ent), "%s", k);
        }
        if (n == max) {
            *trunc = 1;
            break;
        }
        snprintf(out[n].key, sizeof(out[n].key), "%s", ent);
        out[n].is_prefix = isp;
        n++;
    }
    return n;
}

static void check_list(struct backend *be, const char **sorted, size_t nk, const char *P,
                       const char *D, const char *M, unsigned max)
{
    struct be_list_req rq = { "bkt", P, D, M, max };
    struct be_list_page pg;
    struct ment want[64];
    int trunc;
    size_t n = model_list(sorted, nk, P, D, M, max, want, &trunc);

    assert_int_equal(backend_list(be, &rq, &pg), 0);
    if (pg.n != n || pg.truncated != trunc)
        fail_msg("P=\"%s\" D=\"%s\" M=\"%s\" max=%u: got n=%zu trunc=%d, want n=%zu trunc=%d "
                 "(first got \"%s\")", P, D ? D : "", M ? M : "", max, pg.n, pg.truncated, n,
                 trunc, pg.n ? pg.entries[0].key : "");
    for (size_t i = 0; i < n; i++) {
        if (strcmp(pg.entries[i].key, want[i].key) || pg.entries[i].is_prefix != want[i].is_prefix)
            fail_msg("P=\"%s\" D=\"%s\" M=\"%s\" max=%u [%zu]: got \"%s\"%s want \"%s\"%s", P,
                     D ? D : "", M ? M : "", max, i, pg.entries[i].key,
                     pg.entries[i].is_prefix ? "(cp)" : "", want[i].key,
                     want[i].is_prefix ? "(cp)" : "");
        if (!want[i].is_prefix)
            assert_int_equal(strlen(pg.entries[i].etag), 32);
    }
    if (trunc)
        assert_string_equal(pg.next_marker, want[n - 1].key);
    be_list_page_free(&pg);
}

static void test_be_file_list_model(void **state)
{
    static const char *prefixes[] = { "", "a", "a/", "a/c", "b0/", "p/q", "p/q/r/s/", "zz", "q",
                                      "dir/x", "b0/y", "p/q/r", "dir", "zz/top" };
    static const char *delims[] = { NULL, "/", "-", "c/", "/s/", "." };
    struct fx *fx = *state;
    size_t nk = ARRAY_SIZE(list_keys);
    const char *sorted[ARRAY_SIZE(list_keys)];
    const char *markers[ARRAY_SIZE(list_keys) + 6];

    for (size_t i = 0; i < nk; i++) {
        char body[64];
        snprintf(body, sizeof(body), "body of %zu", i);
        assert_int_equal(put_str(fx->be, "bkt", list_keys[i], body, NULL), 0);
        sorted[i] = list_keys[i];
    }
    qsort(sorted, nk, sizeof(*sorted), strp_cmp);
    for (size_t i = 0; i < nk; i++)
        markers[i] = sorted[i];
    markers[nk] = "";
    markers[nk + 1] = "a/c";
    markers[nk + 2] = "b0/";
    markers[nk + 3] = "zzz";
    markers[nk + 4] = "a/c/";
    markers[nk + 5] = "p/q/";

    for (size_t p = 0; p < ARRAY_SIZE(prefixes); p++)
        for (size_t d = 0; d < ARRAY_SIZE(delims); d++) {
            for (size_t m = 0; m < ARRAY_SIZE(markers); m++)
                check_list(fx->be, sorted, nk, prefixes[p], delims[d], markers[m], 1000);
            for (unsigned max = 1; max <= 4; max++)
                check_list(fx->be, sorted, nk, prefixes[p], delims[d], NULL, max);
        }
    /* run twice: the second pass hits the directory cache (once the dirs are "old") */
    usleep(250 * 1000);
    for (size_t p = 0; p < ARRAY_SIZE(prefixes); p++)
        for (size_t d = 0; d < ARRAY_SIZE(delims); d++)
            for (size_t m = 0; m < ARRAY_SIZE(markers); m += 3)
                check_list(fx->be, sorted, nk, prefixes[p], delims[d], markers[m], 3);
}

/* Paginating with every page size visits every key exactly once, in order. */
static void test_be_file_list_pages(void **state)
{
    struct fx *fx = *state;
    size_t nk = ARRAY_SIZE(list_keys);
    const char *sorted[ARRAY_SIZE(list_keys)];

    for (size_t i = 0; i < nk; i++) {
        assert_int_equal(put_str(fx->be, "bkt", list_keys[i], "v", NULL), 0);
        sorted[i] = list_keys[i];
    }
    qsort(sorted, nk, sizeof(*sorted), strp_cmp);
    for (unsigned max = 1; max <= nk + 1; max++) {
        char marker[1100] = "";
        size_t seen = 0;
        for (int guard = 0; guard < 100; guard++) {
            struct be_list_req rq = { "bkt", "", NULL, marker, max };
            struct be_list_page pg;
            assert_int_equal(backend_list(fx->be, &rq, &pg), 0);
            for (size_t i = 0; i < pg.n; i++) {
                assert_true(seen < nk);
                assert_string_equal(pg.entries[i].key, sorted[seen]);
                seen++;
            }
            if (!pg.truncated) {
                be_list_page_free(&pg);
                break;
            }
            snprintf(marker, sizeof(marker), "%s", pg.next_marker);
            be_list_page_free(&pg);
        }
        assert_int_equal(seen, nk);
    }
    /* an empty directory left by another tool is no common prefix */
    {
        char path[256];
        struct be_list_req rq = { "bkt", "", "/", NULL, 1000 };
        struct be_list_page pg;
        snprintf(path, sizeof(path), "%s/bkt/emptydir", fx->dir);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof(path), "%s/bkt/emptydir/deeper", fx->dir);
        assert_int_equal(mkdir(path, 0755), 0);
        assert_int_equal(backend_list(fx->be, &rq, &pg), 0);
        for (size_t i = 0; i < pg.n; i++)
            assert_true(strncmp(pg.entries[i].key, "emptydir", 8) != 0);
        be_list_page_free(&pg);
    }
    /* the directory cache follows changes made after it was filled */
    {
        struct be_list_req rq = { "bkt", "p/q/r/s/", NULL, NULL, 1000 };
        struct be_list_page pg;
        usleep(250 * 1000);
        assert_int_equal(backend_list(fx->be, &rq, &pg), 0);
        assert_int_equal(pg.n, 2);
        be_list_page_free(&pg);
        assert_int_equal(backend_list(fx->be, &rq, &pg), 0); /* served from the cache */
        assert_int_equal(pg.n, 2);
        be_list_page_free(&pg);
        assert_int_equal(put_str(fx->be, "bkt", "p/q/r/s/tt", "new", NULL), 0);
        assert_int_equal(backend_list(fx->be, &rq, &pg), 0);
        assert_int_equal(pg.n, 3);
        assert_string_equal(pg.entries[1].key, "p/q/r/s/tt");
        be_list_page_free(&pg);
        usleep(250 * 1000);
        assert_int_equal(backend_list(fx->be, &rq, &pg), 0);
        be_list_page_free(&pg);
        assert_int_equal(backend_del(fx->be, "bkt", "p/q/r/s/t"), 0);
        assert_int_equal(backend_list(fx->be, &rq, &pg), 0);
        assert_int_equal(pg.n, 2);
        assert_string_equal(pg.entries[0].key, "p/q/r/s/tt");
        be_list_page_free(&pg);
    }
    {
        struct be_list_req rq = { "nobkt", "", NULL, NULL, 10 };
        struct be_list_page pg;
        assert_int_equal(backend_list(fx->be, &rq, &pg), -S3E_NO_SUCH_BUCKET);
    }
}

/* ------------------------------------------------------------------------------------ */

static void test_be_file_buckets(void **state)
{
    struct fx *fx = *state;
    struct be_bucket *v;
    size_t n;
    char path[256];

    assert_int_equal(backend_bucket_create(fx->be, "bkt"), -S3E_BUCKET_ALREADY_OWNED);
    assert_int_equal(backend_bucket_create(fx->be, "Bad_Name"), -S3E_INVALID_BUCKET_NAME);
    assert_int_equal(backend_bucket_create(fx->be, "zeta"), 0);
    assert_int_equal(backend_bucket_create(fx->be, "alpha"), 0);
    assert_int_equal(backend_list_buckets(fx->be, &v, &n), 0);
    assert_int_equal(n, 3); /* .s3cached is never a bucket */
    assert_string_equal(v[0].name, "alpha");
    assert_string_equal(v[1].name, "bkt");
    assert_string_equal(v[2].name, "zeta");
    assert_true(v[0].ctime_ns > 0);
    free(v);
    assert_int_equal(backend_bucket_head(fx->be, "alpha"), 0);
    assert_int_equal(backend_bucket_head(fx->be, "nope"), -S3E_NO_SUCH_BUCKET);

    /* a directory marker counts as a key */
    assert_int_equal(put_str(fx->be, "alpha", "d/", "", NULL), 0);
    assert_int_equal(backend_bucket_delete(fx->be, "alpha"), -S3E_BUCKET_NOT_EMPTY);
    assert_int_equal(backend_del(fx->be, "alpha", "d/"), 0);
    /* empty subdirectories do not */
    snprintf(path, sizeof(path), "%s/alpha/e1", fx->dir);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/alpha/e1/e2", fx->dir);
    mkdir(path, 0755);
    assert_int_equal(backend_bucket_delete(fx->be, "alpha"), 0);
    assert_int_equal(backend_bucket_head(fx->be, "alpha"), -S3E_NO_SUCH_BUCKET);
    assert_int_equal(backend_bucket_delete(fx->be, "alpha"), -S3E_NO_SUCH_BUCKET);
}

/* ------------------------------------------------------------------------------------ */
/* Multipart                                                                             */

/* A part of @size bytes, all @fill (sparse when zero). */
static int part_fd(size_t size, char fill, char etag[33])
{
    int fd = memfd_create("part", 0);
    char *p;
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(p != MAP_FAILED);
    if (fill)
        memset(p, fill, size);
    md5hex(p, size, etag);
    munmap(p, size);
    return fd;
}

static void put_part(struct backend *be, const char *key, const char *id, unsigned num,
                     size_t size, char fill, struct be_part *out)
{
    struct be_part p;
    int fd;

    memset(&p, 0, sizeof(p));
    p.number = num;
    p.size = size;
    fd = part_fd(size, fill, p.etag);
    assert_int_equal(backend_mp_put_part(be, "bkt", key, id, fd, &p), 0);
    close(fd);
    *out = p;
}

static void test_be_file_multipart(void **state)
{
    struct fx *fx = *state;
    char id[BE_UPLOAD_ID_MAX], id2[BE_UPLOAD_ID_MAX], id3[BE_UPLOAD_ID_MAX], want[40];
    struct be_part parts[3], lp[4], *v;
    struct be_meta m, out, out2, h;
    struct be_upload *ups;
    size_t n;
    int trunc;

    memset(&m, 0, sizeof(m));
    snprintf(m.content_type, sizeof(m.content_type), "video/mp4");
    snprintf(m.usermeta, sizeof(m.usermeta), "k:v\n");
    assert_int_equal(backend_mp_create(fx->be, "nobkt", "big", &m, id), -S3E_NO_SUCH_BUCKET);
    assert_int_equal(backend_mp_create(fx->be, "bkt", "big", &m, id), 0);
    assert_int_equal(strlen(id), 32);
    assert_int_equal(backend_mp_create(fx->be, "bkt", "big", &m, id2), 0);
    assert_int_equal(backend_mp_create(fx->be, "bkt", "a-first", &m, id3), 0);

    put_part(fx->be, "big", id, 1, BE_MIN_PART_SIZE, 0, &parts[0]);
    put_part(fx->be, "big", id, 2, BE_MIN_PART_SIZE, 'x', &parts[1]);
    put_part(fx->be, "big", id, 3, 1000, 'y', &parts[2]);
    put_part(fx->be, "big", id, 3, 1234, 'z', &parts[2]); /* replaces part 3 */

    /* list parts, with a marker and a max */
    assert_int_equal(backend_mp_list_parts(fx->be, "bkt", "big", id, 0, 1000, &v, &n, &trunc), 0);
    assert_int_equal(n, 3);
    assert_int_equal(trunc, 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(v[i].number, i + 1);
        assert_string_equal(v[i].etag, parts[i].etag);
        assert_int_equal(v[i].size, parts[i].size);
    }
    free(v);
    assert_int_equal(backend_mp_list_parts(fx->be, "bkt", "big", id, 1, 1, &v, &n, &trunc), 0);
    assert_int_equal(n, 1);
    assert_int_equal(trunc, 1);
    assert_int_equal(v[0].number, 2);
    free(v);

    /* list uploads: sorted by (key, id), filtered, paged */
    assert_int_equal(backend_mp_list_uploads(fx->be, "bkt", "", NULL, NULL, 1000, &ups, &n, &trunc),
                     0);
    assert_int_equal(n, 3);
    assert_string_equal(ups[0].key, "a-first");
    assert_string_equal(ups[1].key, "big");
    assert_true(strcmp(ups[1].upload_id, ups[2].upload_id) < 0);
    assert_true(ups[0].initiated_ns > 0);
    {
        char after[BE_UPLOAD_ID_MAX];
        snprintf(after, sizeof(after), "%s", ups[1].upload_id);
        be_uploads_free(ups, n);
        assert_int_equal(backend_mp_list_uploads(fx->be, "bkt", "", "big", after, 1000, &ups, &n,
                                                 &trunc), 0);
        assert_int_equal(n, 1);
        be_uploads_free(ups, n);
    }
    assert_int_equal(backend_mp_list_uploads(fx->be, "bkt", "b", NULL, NULL, 1, &ups, &n, &trunc),
                     0);
    assert_int_equal(n, 1);
    assert_int_equal(trunc, 1);
    be_uploads_free(ups, n);

    /* errors */
    lp[0] = parts[1];
    lp[1] = parts[0];
    assert_int_equal(backend_mp_complete(fx->be, "bkt", "big", id, lp, 2, &out),
                     -S3E_INVALID_PART_ORDER);
    lp[0] = parts[0];
    lp[1] = parts[1];
    lp[1].etag[0] = lp[1].etag[0] == 'a' ? 'b' : 'a';
    assert_int_equal(backend_mp_complete(fx->be, "bkt", "big", id, lp, 2, &out),
                     -S3E_INVALID_PART);
    lp[1] = parts[1];
    lp[1].number = 7;
    assert_int_equal(backend_mp_complete(fx->be, "bkt", "big", id, lp, 2, &out),
                     -S3E_INVALID_PART);
    lp[0] = parts[2];
    lp[0].number = 3;
    lp[1] = parts[1];
    lp[1].number = 4;
    put_part(fx->be, "big", id, 4, BE_MIN_PART_SIZE, 'x', &lp[1]);
    assert_int_equal(backend_mp_complete(fx->be, "bkt", "big", id, lp, 2, &out),
                     -S3E_ENTITY_TOO_SMALL);
    assert_int_equal(backend_mp_complete(fx->be, "bkt", "other", id, parts, 3, &out),
                     -S3E_NO_SUCH_UPLOAD);
    assert_int_equal(backend_mp_complete(fx->be, "bkt", "big", "../../etc", parts, 3, &out),
                     -S3E_NO_SUCH_UPLOAD);

    /* happy path; ETag = md5(binary md5s) "-3", computed here independently */
    {
        unsigned char bin[48];
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 16; j++) {
                unsigned int b;
                sscanf(parts[i].etag + 2 * j, "%2x", &b);
                bin[16 * i + j] = (unsigned char)b;
            }
        md5hex(bin, sizeof(bin), want);
        memcpy(want + 32, "-3", 3);
    }
    lp[0] = parts[0];
    lp[1] = parts[1];
    lp[2] = parts[2];
    snprintf(lp[1].etag, sizeof(lp[1].etag), "\"%.32s\"", parts[1].etag); /* quoted is fine */
    assert_int_equal(backend_mp_complete(fx->be, "bkt", "big", id, lp, 3, &out), 0);
    assert_string_equal(out.etag, want);
    assert_int_equal(out.size, 2 * BE_MIN_PART_SIZE + 1234);
    assert_int_equal(out.parts_count, 3);
    assert_int_equal(backend_head(fx->be, "bkt", "big", &h), 0);
    assert_string_equal(h.etag, want);
    assert_string_equal(h.content_type, "video/mp4");
    assert_string_equal(h.usermeta, "k:v\n");
    assert_int_equal(h.size, out.size);
    {
        int rc;
        char *tail = get_str(fx->be, "bkt", "big", 2 * BE_MIN_PART_SIZE - 2, 4, &rc);
        assert_int_equal(rc, 0);
        assert_memory_equal(tail, "xxzz", 4);
        free(tail);
    }
    /* completing again with the same parts gives the same answer */
    assert_int_equal(backend_mp_complete(fx->be, "bkt", "big", id, parts, 3, &out2), 0);
    assert_string_equal(out2.etag, want);
    assert_int_equal(out2.size, out.size);
    assert_int_equal(backend_mp_complete(fx->be, "bkt", "big", id, parts, 2, &out2),
                     -S3E_INVALID_PART);
    assert_int_equal(backend_mp_abort(fx->be, "bkt", "big", id), -S3E_NO_SUCH_UPLOAD);

    /* abort */
    assert_int_equal(backend_mp_abort(fx->be, "bkt", "big", id2), 0);
    assert_int_equal(backend_mp_abort(fx->be, "bkt", "big", id2), -S3E_NO_SUCH_UPLOAD);
    {
        struct be_part p;
        int fd = part_fd(10, 'q', p.etag);
        p.number = 1;
        p.size = 10;
        assert_int_equal(backend_mp_put_part(fx->be, "bkt", "big", id2, fd, &p),
                         -S3E_NO_SUCH_UPLOAD);
        close(fd);
    }

    /* upload part copy: a byte range of an object, single-part completion */
    {
        struct be_part cp;
        char e1[33];
        assert_int_equal(backend_mp_copy_part(fx->be, "bkt", "a-first", id3, 1, "bkt", "big",
                                              2 * BE_MIN_PART_SIZE - 2, 4, &cp), 0);
        md5hex("xxzz", 4, e1);
        assert_string_equal(cp.etag, e1);
        assert_int_equal(cp.size, 4);
        assert_int_equal(backend_mp_copy_part(fx->be, "bkt", "a-first", id3, 2, "bkt", "big",
                                              out.size, 4, &cp), -S3E_INVALID_RANGE);
        lp[0] = cp;
        assert_int_equal(backend_mp_complete(fx->be, "bkt", "a-first", id3, lp, 1, &out), 0);
        assert_true(strstr(out.etag, "-1") != NULL);
        assert_int_equal(out.size, 4);
    }
    assert_int_equal(backend_mp_list_uploads(fx->be, "bkt", "", NULL, NULL, 1000, &ups, &n, &trunc),
                     0);
    assert_int_equal(n, 0);
    be_uploads_free(ups, n);
    assert_int_equal(fx->be->ctr.errors, 0);
}

/* Parts of the upload's common size go straight into its data file, and a Complete of parts
 * 1..n laid out that way makes that file the object (same inode: nothing copied); parts of
 * another size, re-uploads and subsets still complete byte for byte. */
static void test_be_file_multipart_inplace(void **state)
{
    struct fx *fx = *state;
    const size_t P = BE_MIN_PART_SIZE;
    char id[BE_UPLOAD_ID_MAX], id2[BE_UPLOAD_ID_MAX], path[256], *got;
    struct be_part parts[4], lp[4], *v;
    struct be_meta m, out;
    struct stat data_st, obj_st;
    size_t n;
    int trunc, rc;

    memset(&m, 0, sizeof(m));
    assert_int_equal(backend_mp_create(fx->be, "bkt", "ckpt", &m, id), 0);
    put_part(fx->be, "ckpt", id, 3, P, 'c', &parts[2]); /* out of order: fixes P first */
    put_part(fx->be, "ckpt", id, 1, P, 'a', &parts[0]);
    put_part(fx->be, "ckpt", id, 4, 100, 'd', &parts[3]);
    put_part(fx->be, "ckpt", id, 2, P, 'x', &parts[1]);
    snprintf(path, sizeof(path), "%s/.s3cached/uploads/%s/inpl.00002", fx->dir, id);
    assert_int_equal(access(path, F_OK), 0);
    put_part(fx->be, "ckpt", id, 2, P, 'b', &parts[1]); /* re-uploaded: a file of its own */
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof(path), "%s/.s3cached/uploads/%s/part.00002", fx->dir, id);
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/.s3cached/uploads/%s/part.00004", fx->dir, id);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(backend_mp_list_parts(fx->be, "bkt", "ckpt", id, 0, 1000, &v, &n, &trunc), 0);
    assert_int_equal(n, 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(v[i].number, i + 1);
        assert_string_equal(v[i].etag, parts[i].etag);
        assert_int_equal(v[i].size, parts[i].size);
    }
    free(v);
    snprintf(path, sizeof(path), "%s/.s3cached/uploads/%s/data", fx->dir, id);
    assert_int_equal(stat(path, &data_st), 0);
    memcpy(lp, parts, sizeof(lp));
    assert_int_equal(backend_mp_complete(fx->be, "bkt", "ckpt", id, lp, 4, &out), 0);
    assert_int_equal(out.size, 3 * P + 100);
    snprintf(path, sizeof(path), "%s/bkt/ckpt", fx->dir);
    assert_int_equal(stat(path, &obj_st), 0);
    assert_int_equal(obj_st.st_ino, data_st.st_ino); /* the data file itself, not a copy: the
                                                       * re-upload was copied into its slot */
    assert_int_equal(obj_st.st_size, 3 * P + 100);
    assert_true(getxattr(path, "user.s3cached.psize", NULL, 0) < 0);
    for (int i = 0; i < 4; i++) {
        got = get_str(fx->be, "bkt", "ckpt", (uint64_t)i * P, i < 3 ? P : 100, &rc);
        assert_int_equal(rc, 0);
        for (size_t j = 0; j < (i < 3 ? P : 100); j += 4099)
            assert_int_equal(got[j], "abcd"[i]);
        free(got);
    }
    assert_int_equal(backend_mp_complete(fx->be, "bkt", "ckpt", id, lp, 4, &out), 0); /* again */

    /* a part of another size takes the in-place copy's place; a subset below an in-place part
     * is copied out of the data file */
    assert_int_equal(backend_mp_create(fx->be, "bkt", "mixed", &m, id2), 0);
    put_part(fx->be, "mixed", id2, 1, P, 'a', &parts[0]);
    put_part(fx->be, "mixed", id2, 2, P, 'x', &parts[1]);
    put_part(fx->be, "mixed", id2, 2, P + 7, 'b', &parts[1]); /* its own file now */
    put_part(fx->be, "mixed", id2, 3, P, 'c', &parts[2]);
    assert_int_equal(backend_mp_list_parts(fx->be, "bkt", "mixed", id2, 0, 1000, &v, &n, &trunc),
                     0);
    assert_int_equal(n, 3);
    assert_int_equal(v[1].size, P + 7);
    free(v);
    memcpy(lp, parts, sizeof(lp));
    assert_int_equal(backend_mp_complete(fx->be, "bkt", "mixed", id2, lp, 2, &out), 0);
    assert_int_equal(out.size, 2 * P + 7);
    got = get_str(fx->be, "bkt", "mixed", P - 2, 4, &rc);
    assert_int_equal(rc, 0);
    assert_memory_equal(got, "aabb", 4);
    free(got);
    got = get_str(fx->be, "bkt", "mixed", 2 * P + 5, 2, &rc);
    assert_int_equal(rc, 0);
    assert_memory_equal(got, "bb", 2);
    free(got);
    assert_int_equal(fx->be->ctr.errors, 0);
}

/* Upload @size bytes of @fill as part @num: the backend's answer (the part's ETag in @out). */
static int try_part(struct backend *be, const char *key, const char *id, unsigned num,
                    size_t size, size_t body, char fill, struct be_part *out)
{
    struct be_part p;
    int fd, rc;

    memset(&p, 0, sizeof(p));
    p.number = num;
    p.size = size;
    fd = part_fd(body, fill, p.etag); /* @body < @size: the body ends early */
    rc = backend_mp_put_part(be, "bkt", key, id, fd, &p);
    close(fd);
    if (out)
        *out = p;
    return rc;
}

/* Whether bytes [@off, @off + @len) of @bucket/@key are all @c. */
static int all_of(struct backend *be, const char *key, uint64_t off, size_t len, char c)
{
    int rc, ok = 1;
    char *got = get_str(be, "bkt", key, off, len, &rc);

    for (size_t i = 0; rc == 0 && i < len; i++)
        ok = ok && got[i] == c;
    free(got);
    return rc == 0 && ok;
}

static void list_is(struct backend *be, const char *key, const char *id, const struct be_part *want,
                    size_t n)
{
    struct be_part *v;
    size_t got;
    int trunc;

    assert_int_equal(backend_mp_list_parts(be, "bkt", key, id, 0, 1000, &v, &got, &trunc), 0);
    assert_int_equal(got, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(v[i].number, want[i].number);
        assert_string_equal(v[i].etag, want[i].etag);
        assert_int_equal(v[i].size, want[i].size);
    }
    free(v);
}

/* Attempts of one part number (backends/mpu_slot.h): a second attempt while one writes the slot
 * gets a file of its own and leaves the slot alone; a failed attempt, in place or not, leaves
 * the acknowledged part; an attempt while a Complete holds the data file stays out of it; a
 * Complete that cannot hold the data file copies the parts, and refuses a part in place whose
 * slot no longer has its bytes. The attempt "in flight" is this test holding the slot's lock. */
static void test_be_file_multipart_attempts(void **state)
{
    struct fx *fx = *state;
    const size_t P = BE_MIN_PART_SIZE;
    char id[BE_UPLOAD_ID_MAX], dpath[256], path[256];
    struct be_part parts[4], lp[3], other;
    struct be_meta m, out;
    struct stat data_st, obj_st;
    int slot, all;

    memset(&m, 0, sizeof(m));
    assert_int_equal(backend_mp_create(fx->be, "bkt", "att", &m, id), 0);
    put_part(fx->be, "att", id, 1, P, 'a', &parts[0]);
    put_part(fx->be, "att", id, 2, P, 'b', &parts[1]);
    put_part(fx->be, "att", id, 3, 100, 'c', &parts[2]);
    snprintf(dpath, sizeof(dpath), "%s/.s3cached/uploads/%s/data", fx->dir, id);

    /* failed retries: of a part in place, of a part of its own, a first attempt in place */
    assert_int_equal(try_part(fx->be, "att", id, 1, P, P - 1, 'z', NULL), -S3E_INCOMPLETE_BODY);
    assert_int_equal(try_part(fx->be, "att", id, 3, 100, 99, 'z', NULL), -S3E_INCOMPLETE_BODY);
    assert_int_equal(try_part(fx->be, "att", id, 4, P, P / 2, 'z', NULL), -S3E_INCOMPLETE_BODY);
    list_is(fx->be, "att", id, parts, 3);

    /* an attempt holds slot 2: the other one at once goes to a file of its own and is the part
     * once it succeeds; the slot keeps its bytes */
    slot = open(dpath, O_RDWR);
    assert_true(slot >= 0);
    assert_int_equal(mpu_slot_lock(slot, 2, P), 0);
    put_part(fx->be, "att", id, 2, P, 'y', &parts[1]);
    snprintf(path, sizeof(path), "%s/.s3cached/uploads/%s/part.00002", fx->dir, id);
    assert_int_equal(access(path, F_OK), 0);
    list_is(fx->be, "att", id, parts, 3);
    char byte = 0;
    assert_int_equal(pread(slot, &byte, 1, (off_t)P + 77), 1);
    assert_int_equal(byte, 'b');

    /* a Complete holding the whole file keeps attempts out of it */
    all = open(dpath, O_RDWR);
    assert_int_equal(mpu_slot_lock_all(all), -EAGAIN); /* slot 2 is held */
    close(slot);
    assert_int_equal(mpu_slot_lock_all(all), 0);
    put_part(fx->be, "att", id, 4, P, 'd', &other);
    snprintf(path, sizeof(path), "%s/.s3cached/uploads/%s/part.00004", fx->dir, id);
    assert_int_equal(access(path, F_OK), 0);
    close(all);

    /* an attempt writes slot 4 (held): Complete copies, checking the slots it copies; slot 1
     * written meanwhile by someone is refused, restored it completes */
    slot = open(dpath, O_RDWR);
    assert_int_equal(mpu_slot_lock(slot, 4, P), 0);
    assert_int_equal(pwrite(slot, "Z", 1, 4096), 1);
    memcpy(lp, parts, sizeof(lp));
    assert_int_equal(backend_mp_complete(fx->be, "bkt", "att", id, lp, 3, &out),
                     -S3E_INVALID_PART);
    assert_int_equal(pwrite(slot, "a", 1, 4096), 1);
    assert_int_equal(stat(dpath, &data_st), 0);
    assert_int_equal(backend_mp_complete(fx->be, "bkt", "att", id, lp, 3, &out), 0);
    close(slot);
    snprintf(path, sizeof(path), "%s/bkt/att", fx->dir);
    assert_int_equal(stat(path, &obj_st), 0);
    assert_true(obj_st.st_ino != data_st.st_ino); /* a copy */
    assert_int_equal(obj_st.st_size, 2 * P + 100);
    assert_true(all_of(fx->be, "att", 0, P, 'a'));
    assert_true(all_of(fx->be, "att", P, P, 'y'));
    assert_true(all_of(fx->be, "att", 2 * P, 100, 'c'));
    assert_int_equal(fx->be->ctr.errors, 0);
}

struct racer {
    struct backend *be;
    const char *id;
    char fill;
    pthread_barrier_t *go;
    struct be_part part;
    int rc;
};

static void *racer_run(void *arg)
{
    struct racer *r = arg;
    int fd = part_fd(BE_MIN_PART_SIZE, r->fill, r->part.etag);

    r->part.number = 2;
    r->part.size = BE_MIN_PART_SIZE;
    pthread_barrier_wait(r->go);
    r->rc = backend_mp_put_part(r->be, "bkt", "race", r->id, fd, &r->part);
    close(fd);
    return NULL;
}

/* Two attempts of part 2 at once, many times: the part listed is one of them, whole; Complete
 * naming the other is InvalidPart, naming it gives exactly its bytes. */
static void test_be_file_multipart_race(void **state)
{
    struct fx *fx = *state;
    const size_t P = BE_MIN_PART_SIZE;

    for (int round = 0; round < 12; round++) {
        char id[BE_UPLOAD_ID_MAX];
        struct be_part lp[2], *v;
        struct be_meta m, out;
        pthread_barrier_t go;
        struct racer r[2];
        pthread_t th[2];
        size_t n;
        int trunc;

        memset(&m, 0, sizeof(m));
        assert_int_equal(backend_mp_create(fx->be, "bkt", "race", &m, id), 0);
        put_part(fx->be, "race", id, 1, P, 'a', &lp[0]);
        pthread_barrier_init(&go, NULL, 2);
        for (int i = 0; i < 2; i++) {
            memset(&r[i], 0, sizeof(r[i]));
            r[i] = (struct racer){ fx->be, id, (char)('x' + i), &go, { 0 }, 0 };
            assert_int_equal(pthread_create(&th[i], NULL, racer_run, &r[i]), 0);
        }
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        pthread_barrier_destroy(&go);
        assert_int_equal(r[0].rc, 0);
        assert_int_equal(r[1].rc, 0);
        assert_int_equal(backend_mp_list_parts(fx->be, "bkt", "race", id, 0, 1000, &v, &n, &trunc),
                         0);
        assert_int_equal(n, 2);
        int w = strcmp(v[1].etag, r[0].part.etag) == 0 ? 0 : 1;
        assert_string_equal(v[1].etag, r[w].part.etag);
        free(v);
        lp[1] = r[1 - w].part;
        assert_int_equal(backend_mp_complete(fx->be, "bkt", "race", id, lp, 2, &out),
                         -S3E_INVALID_PART);
        lp[1] = r[w].part;
        assert_int_equal(backend_mp_complete(fx->be, "bkt", "race", id, lp, 2, &out), 0);
        assert_true(all_of(fx->be, "race", 0, P, 'a'));
        assert_true(all_of(fx->be, "race", P, P, r[w].fill));
    }
}

static void test_be_file_copy(void **state)
{
    struct fx *fx = *state;
    struct be_meta m, out, h, rep;
    const char *body = "copy me";
    int fd, rc;
    char *got;

    memset(&m, 0, sizeof(m));
    md5hex(body, strlen(body), m.etag);
    snprintf(m.content_type, sizeof(m.content_type), "text/a");
    snprintf(m.usermeta, sizeof(m.usermeta), "orig:1\n");
    fd = data_fd(body, strlen(body));
    assert_int_equal(backend_put(fx->be, "bkt", "src", fd, strlen(body), &m), 0);
    close(fd);
    assert_int_equal(backend_bucket_create(fx->be, "other"), 0);

    assert_int_equal(backend_copy(fx->be, "bkt", "src", "other", "d/dst", NULL, &out), 0);
    assert_string_equal(out.etag, m.etag);
    assert_int_equal(backend_head(fx->be, "other", "d/dst", &h), 0);
    assert_string_equal(h.content_type, "text/a");
    assert_string_equal(h.usermeta, "orig:1\n");
    got = get_str(fx->be, "other", "d/dst", 0, UINT64_MAX, &rc);
    assert_string_equal(got, body);
    free(got);

    memset(&rep, 0, sizeof(rep));
    snprintf(rep.content_type, sizeof(rep.content_type), "text/b");
    snprintf(rep.usermeta, sizeof(rep.usermeta), "new:2\n");
    snprintf(rep.etag, sizeof(rep.etag), "ignored");
    assert_int_equal(backend_copy(fx->be, "bkt", "src", "bkt", "src", &rep, &out), 0); /* self */
    assert_int_equal(backend_head(fx->be, "bkt", "src", &h), 0);
    assert_string_equal(h.content_type, "text/b");
    assert_string_equal(h.usermeta, "new:2\n");
    assert_string_equal(h.etag, m.etag);
    assert_int_equal(h.size, strlen(body));
    got = get_str(fx->be, "bkt", "src", 0, UINT64_MAX, &rc);
    assert_string_equal(got, body);
    free(got);

    assert_int_equal(backend_copy(fx->be, "bkt", "nope", "bkt", "x", NULL, &out),
                     -S3E_NO_SUCH_KEY);
    assert_int_equal(backend_copy(fx->be, "bkt", "src", "nobkt", "x", NULL, &out),
                     -S3E_NO_SUCH_BUCKET);
}


/* ------------------------------------------------------------------------------------ */
/* S3C_BENCH_LIST=1: 1,000,000 keys flat and as 1000 x 1000; prints page times.         */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double time_page(struct backend *be, const char *bucket, const char *prefix,
                        const char *delim, const char *marker, size_t *n, char *next)
{
    struct be_list_req rq = { bucket, prefix, delim, marker, 1000 };
    struct be_list_page pg;
    double t0 = now_ms();

    assert_int_equal(backend_list(be, &rq, &pg), 0);
    t0 = now_ms() - t0;
    *n = pg.n;
    if (next)
        snprintf(next, 1100, "%s", pg.next_marker ? pg.next_marker : "");
    be_list_page_free(&pg);
    return t0;
}

static void test_be_file_bench_1m(void **state)
{
    struct fx *fx = *state;
    const char *want = getenv("S3C_BENCH_LIST");
    unsigned long asked = want ? strtoul(want, NULL, 10) : 0;
    unsigned total = asked > 1 ? (unsigned)asked : 1000000;
    char path[512], next[1100], mid[64];
    size_t n;
    double t;

    assert_int_equal(backend_bucket_create(fx->be, "flat"), 0);
    assert_int_equal(backend_bucket_create(fx->be, "nest"), 0);
    t = now_ms();
    for (unsigned i = 0; i < total; i++) {
        snprintf(path, sizeof(path), "%s/flat/k%07u", fx->dir, i);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        assert_true(fd >= 0);
        close(fd);
    }
    unsigned side = 1000;
    while ((unsigned long)side * side > total)
        side /= 2;
    for (unsigned d = 0; d < side; d++) {
        snprintf(path, sizeof(path), "%s/nest/d%04u", fx->dir, d);
        assert_int_equal(mkdir(path, 0755), 0);
        for (unsigned i = 0; i < side; i++) {
            snprintf(path, sizeof(path), "%s/nest/d%04u/f%04u", fx->dir, d, i);
            int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
            assert_true(fd >= 0);
            close(fd);
        }
    }
    print_message("bench: created %u flat + %u nested files in %.0f ms\n", total, side * side,
                  now_ms() - t);
    usleep(300 * 1000);

    t = time_page(fx->be, "flat", "", NULL, NULL, &n, next);
    print_message("bench: flat first page (readdir+sort, 1000 foreign MD5s): %.1f ms, n=%zu\n", t, n);
    t = time_page(fx->be, "flat", "", NULL, next, &n, next);
    print_message("bench: flat second page (foreign MD5s): %.1f ms, n=%zu\n", t, n);
    t = time_page(fx->be, "flat", "", NULL, NULL, &n, NULL);
    print_message("bench: flat first page again (cached dir + xattrs): %.1f ms, n=%zu\n", t, n);
    snprintf(mid, sizeof(mid), "k%07u", total / 2);
    t = time_page(fx->be, "flat", "", NULL, mid, &n, next);
    print_message("bench: flat page at marker %s (MD5s): %.1f ms, n=%zu\n", mid, t, n);
    t = time_page(fx->be, "flat", "", NULL, mid, &n, next);
    print_message("bench: flat page at marker %s again: %.1f ms, n=%zu\n", mid, t, n);
    t = time_page(fx->be, "flat", "k0999", "/", NULL, &n, NULL);
    print_message("bench: flat prefix k0999 delimiter /: %.1f ms, n=%zu\n", t, n);

    t = time_page(fx->be, "nest", "", NULL, NULL, &n, next);
    print_message("bench: nested first page: %.1f ms, n=%zu\n", t, n);
    t = time_page(fx->be, "nest", "", NULL, next, &n, next);
    print_message("bench: nested second page: %.1f ms, n=%zu\n", t, n);
    snprintf(mid, sizeof(mid), "d%04u/f%04u", side / 2, side / 2);
    t = time_page(fx->be, "nest", "", NULL, mid, &n, next);
    print_message("bench: nested page at marker %s: %.1f ms, n=%zu\n", mid, t, n);
    t = time_page(fx->be, "nest", "", "/", NULL, &n, NULL);
    print_message("bench: nested delimiter / (%zu common prefixes): %.1f ms\n", n, t);
    t = time_page(fx->be, "nest", "", "/", "d0500/", &n, NULL);
    print_message("bench: nested delimiter / after d0500/: %.1f ms, n=%zu\n", t, n);
    t = time_page(fx->be, "nest", "d0700/", "/", NULL, &n, NULL);
    print_message("bench: nested prefix d0700/ delimiter /: %.1f ms, n=%zu\n", t, n);

    /* a full walk of the flat bucket, page by page */
    {
        size_t seen = 0, pages = 0;
        double worst = 0;
        next[0] = '\0';
        t = now_ms();
        for (;;) {
            double p = time_page(fx->be, "flat", "", NULL, next, &n, next);
            worst = p > worst ? p : worst;
            seen += n;
            pages++;
            if (!next[0])
                break;
        }
        print_message("bench: flat full walk: %zu keys, %zu pages, %.0f ms, worst page %.1f ms\n",
                      seen, pages, now_ms() - t, worst);
        assert_int_equal(seen, total);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_be_file_roundtrip_restart, fx_setup, fx_teardown),
        cmocka_unit_test(test_be_file_open_errors),
        cmocka_unit_test_setup_teardown(test_be_file_foreign_file, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_be_file_key_rules, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_be_file_nested_keys, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_be_file_nested_races, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_be_file_symlinks, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_be_file_delete_refused, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_be_file_atomic_put, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_be_file_delete_parents, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_be_file_parent_race, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_be_file_list_model, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_be_file_list_pages, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_be_file_buckets, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_be_file_multipart, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_be_file_multipart_inplace, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_be_file_multipart_attempts, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_be_file_multipart_race, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_be_file_copy, fx_setup, fx_teardown),
    };
    const struct CMUnitTest bench[] = {
        cmocka_unit_test_setup_teardown(test_be_file_bench_1m, fx_setup, fx_teardown),
    };
    const char *b = getenv("S3C_BENCH_LIST");

    if (b && *b) /* S3C_BENCH_LIST=1 (1M keys) or =N keys: the listing benchmark only */
        return cmocka_run_group_tests_name("be_file_bench", bench, NULL, NULL);
    return cmocka_run_group_tests_name("be_file", tests, NULL, NULL);
}
