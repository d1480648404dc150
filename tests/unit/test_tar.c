/*
 * test_tar.c: the tar walker and the member index against archives made at test time by GNU
 * tar and Python's tarfile (tests/unit/tar_fixtures.py: every offset is checked against
 * tarfile's TarInfo.offset / offset_data), a WebDataset-like shard of 9000 members, hostile
 * archives (from the script and crafted here header by header), and corrupt index blobs.
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
#include <sys/stat.h>
#include <unistd.h>

#include "lib/s3c.h"
#include "lib/tar.h"

static char fixdir[] = "/tmp/test_tar.XXXXXX";
static int fixtures_ok;

/* --- walking a file or a buffer -------------------------------------------------------- */

struct ent {
    struct tar_entry e;
    char *name; /* a copy */
};

struct walked {
    struct ent *v;
    size_t n, cap;
    int rc; /* TAR_END or the error */
    char reason[128];
    uint64_t needs; /* TAR_NEED answers */
};

static void walked_free(struct walked *w)
{
    for (size_t i = 0; i < w->n; i++)
        free(w->v[i].name);
    free(w->v);
    memset(w, 0, sizeof(*w));
}

/* Walks @size bytes read from @fd (pread) or @mem, feeding @chunk bytes at a time (0: each
 * range at once). Checks that every range asked for is inside the archive and forward. */
static void walk(int fd, const uint8_t *mem, uint64_t size, const struct tar_limits *lim,
                 size_t chunk, struct walked *out)
{
    struct tar_walk *w;
    uint64_t last_end = 0;
    static uint8_t buf[1 << 20];
    memset(out, 0, sizeof(*out));
    assert_int_equal(tar_walk_new(size, lim, &w), 0);
    for (;;) {
        struct tar_entry e;
        struct tar_need need;
        int rc = tar_walk_next(w, &e, &need);
        if (rc == TAR_NEED) {
            out->needs++;
            assert_true(need.len > 0 && need.len <= sizeof(buf));
            assert_true(need.off <= size && need.len <= size - need.off);
            assert_true(need.off >= last_end); /* forward only */
            last_end = need.off + need.len;
            size_t n = chunk && chunk < need.len ? chunk : need.len;
            if (fd >= 0)
                assert_int_equal(pread(fd, buf, n, (off_t)need.off), (ssize_t)n);
            else
                memcpy(buf, mem + need.off, n);
            assert_int_equal(tar_walk_feed(w, buf, n), 0);
            if (n < need.len) /* the rest is asked for again */
                last_end = need.off + n;
            continue;
        }
        if (rc == TAR_ENTRY) {
            assert_true(e.data_off <= size && e.size <= size - e.data_off);
            assert_int_equal(strlen(e.name), e.name_len);
            if (out->n == out->cap) {
                out->cap = out->cap ? out->cap * 2 : 64;
                out->v = realloc(out->v, out->cap * sizeof(*out->v));
                assert_non_null(out->v);
            }
            out->v[out->n].e = e;
            out->v[out->n].name = strdup(e.name);
            out->v[out->n].e.name = out->v[out->n].name;
            out->n++;
            continue;
        }
        out->rc = rc;
        snprintf(out->reason, sizeof(out->reason), "%s", tar_walk_reason(w));
        /* final: the same answer again */
        assert_int_equal(tar_walk_next(w, &e, &need), rc);
        break;
    }
    tar_walk_free(w);
}

static int open_fixture(const char *name, uint64_t *size)
{
    char p[512];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", fixdir, name);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    assert_int_equal(fstat(fd, &st), 0);
    *size = (uint64_t)st.st_size;
    return fd;
}

static void walk_fixture(const char *name, const struct tar_limits *lim, size_t chunk,
                         struct walked *out)
{
    uint64_t size;
    int fd = open_fixture(name, &size);
    if (fd < 0)
        fail_msg("fixture %s missing", name);
    walk(fd, NULL, size, lim, chunk, out);
    close(fd);
}

/* --- tarfile's listings ----------------------------------------------------------------- */

struct lrow {
    uint64_t off, off_data, size;
    char kind[8];
    char *name;
    size_t name_len;
};

static int unhex(const char *h, char **out, size_t *len)
{
    size_t n = strlen(h) / 2;
    char *s = malloc(n + 1);
    assert_non_null(s);
    if (strcmp(h, "-") == 0)
        n = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(h + 2 * i, "%2x", &v) != 1)
            return -1;
        s[i] = (char)v;
    }
    s[n] = '\0';
    *out = s;
    *len = n;
    return 0;
}

/* Reads NAME.list; returns the rows or NULL when there is none (GNU tar absent). */
static struct lrow *listing(const char *tarname, size_t *n)
{
    char p[512], hex[8192];
    snprintf(p, sizeof(p), "%s/%.*s.list", fixdir, (int)(strlen(tarname) - 4), tarname);
    FILE *f = fopen(p, "r");
    if (!f)
        return NULL;
    struct lrow *v = NULL;
    size_t cap = 0;
    *n = 0;
    struct lrow r;
    unsigned long long a, b, c;
    while (fscanf(f, "%llu %llu %llu %7s %8191s", &a, &b, &c, r.kind, hex) == 5) {
        r.off = a;
        r.off_data = b;
        r.size = c;
        assert_int_equal(unhex(hex, &r.name, &r.name_len), 0);
        if (*n == cap) {
            cap = cap ? cap * 2 : 64;
            v = realloc(v, cap * sizeof(*v));
            assert_non_null(v);
        }
        v[(*n)++] = r;
    }
    fclose(f);
    return v;
}

static void listing_free(struct lrow *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].name);
    free(v);
}

static const char *type_kind(enum tar_type t)
{
    switch (t) {
    case TAR_REG: return "reg";
    case TAR_DIR: return "dir";
    case TAR_SYMLINK: return "sym";
    case TAR_HARDLINK: return "lnk";
    case TAR_SPARSE: return "sparse";
    default: return "other";
    }
}

/* The walk of @name gives tarfile's members: names, types, offsets, sizes. */
static size_t check_against_tarfile(const char *name, size_t chunk)
{
    size_t n;
    struct lrow *rows = listing(name, &n);
    struct walked w;
    if (!rows) {
        print_message("  %s: no listing (GNU tar absent): skipped\n", name);
        return 0;
    }
    walk_fixture(name, NULL, chunk, &w);
    if (w.rc != TAR_END)
        fail_msg("%s: %d %s", name, w.rc, w.reason);
    assert_int_equal(w.n, n);
    for (size_t i = 0; i < n; i++) {
        const struct tar_entry *e = &w.v[i].e;
        const struct lrow *r = &rows[i];
        if (e->name_len != r->name_len || memcmp(e->name, r->name, r->name_len) != 0)
            fail_msg("%s #%zu: name '%s', tarfile '%s'", name, i, e->name, r->name);
        if (strcmp(type_kind(e->type), r->kind) != 0)
            fail_msg("%s #%zu %s: type %s, tarfile %s", name, i, r->name, type_kind(e->type),
                     r->kind);
        if (e->hdr_off != r->off)
            fail_msg("%s #%zu %s: hdr_off %llu, tarfile %llu", name, i, r->name,
                     (unsigned long long)e->hdr_off, (unsigned long long)r->off);
        if (e->type == TAR_SPARSE)
            continue; /* tarfile moves offset_data past a pax sparse map and reports the
                       * expanded size: not comparable, and never served */
        if (e->data_off != r->off_data)
            fail_msg("%s #%zu %s: data_off %llu, tarfile %llu", name, i, r->name,
                     (unsigned long long)e->data_off, (unsigned long long)r->off_data);
        if (e->type == TAR_REG && e->size != r->size)
            fail_msg("%s #%zu %s: size %llu, tarfile %llu", name, i, r->name,
                     (unsigned long long)e->size, (unsigned long long)r->size);
    }
    walked_free(&w);
    listing_free(rows, n);
    return n;
}

/* --- fixtures ---------------------------------------------------------------------------- */

static int fixtures_setup(void **state)
{
    char cmd[1024];
    (void)state;
    if (!mkdtemp(fixdir))
        return -1;
    const char *here = __FILE__; /* tests/unit/test_tar.c, relative to the repository */
    const char *slash = strrchr(here, '/');
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %.*s/tar_fixtures.py %s >/dev/null",
             slash ? (int)(slash - here) : 1, slash ? here : ".", fixdir);
    fixtures_ok = access("/usr/bin/python3", X_OK) == 0 && system(cmd) == 0;
    if (!fixtures_ok)
        print_message("test_tar: fixtures not made (%s): their tests are skipped\n", cmd);
    return 0;
}

static int fixtures_teardown(void **state)
{
    char cmd[600];
    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", fixdir);
    return system(cmd) == 0 ? 0 : -1;
}

#define NEED_FIXTURES()                                                                       \
    do {                                                                                      \
        if (!fixtures_ok)                                                                     \
            skip();                                                                           \
    } while (0)

/* --- tests: formats ---------------------------------------------------------------------- */

static const char *valid_archives[] = {
    "py_ustar.tar", "py_gnu.tar", "py_pax.tar", "big_pax.tar", "big_gnu.tar", "wds.tar",
    "gnutar_v7.tar", "gnutar_ustar.tar", "gnutar_oldgnu.tar", "gnutar_gnu.tar",
    "gnutar_pax.tar", "gnutar_oldgnu_sparse.tar", "gnutar_gnu_sparse.tar",
    "gnutar_pax_sparse.tar",
};

static void test_tar_matches_tarfile(void **state)
{
    (void)state;
    NEED_FIXTURES();
    size_t total = 0;
    for (size_t i = 0; i < ARRAY_SIZE(valid_archives); i++)
        total += check_against_tarfile(valid_archives[i], 0);
    print_message("  %zu members checked against tarfile\n", total);
    assert_true(total >= 9000 + 6 * 10);
}

/* Feeding in small pieces gives the same walk. */
static void test_tar_chunked_feed(void **state)
{
    static const char *names[] = { "py_pax.tar", "py_gnu.tar", "gnutar_gnu_sparse.tar",
                                   "gnutar_pax.tar", "big_pax.tar" };
    static const size_t chunks[] = { 1, 7, 100, 511 };
    (void)state;
    NEED_FIXTURES();
    for (size_t i = 0; i < ARRAY_SIZE(names); i++)
        for (size_t c = 0; c < ARRAY_SIZE(chunks); c++)
            check_against_tarfile(names[i], chunks[c]);
}

/* Sizes over 8 GiB: a pax 'size' record and a GNU base-256 size field. The walk reads headers
 * only: 2 entries, 9 GiB apart, from 3 or 4 reads. */
static void test_tar_big_member(void **state)
{
    static const char *names[] = { "big_pax.tar", "big_gnu.tar" };
    (void)state;
    NEED_FIXTURES();
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        struct walked w;
        walk_fixture(names[i], NULL, 0, &w);
        assert_int_equal(w.rc, TAR_END);
        assert_int_equal(w.n, 2);
        assert_string_equal(w.v[0].e.name, "big.bin");
        assert_true(w.v[0].e.size == 9ull << 30);
        assert_string_equal(w.v[1].e.name, "after.txt");
        assert_true(w.v[1].e.data_off == w.v[0].e.data_off + (9ull << 30) + 512);
        assert_true(w.needs <= 5);
        walked_free(&w);
    }
}

/* --- tests: the index -------------------------------------------------------------------- */

static void build_fixture_index(const char *name, void **blob, size_t *len, struct tar_index *ix)
{
    uint64_t size;
    struct errmsg em = { "" };
    int fd = open_fixture(name, &size);
    assert_true(fd >= 0);
    int rc = tar_index_build_fd(fd, size, NULL, blob, len, &em);
    if (rc != 0)
        fail_msg("%s: %d %s", name, rc, em.buf);
    close(fd);
    assert_int_equal(tar_index_open(ix, *blob, *len, &em), 0);
    assert_int_equal(tar_index_verify(ix, &em), 0);
    assert_true(ix->archive_size == size);
}

static void test_tar_index_wds(void **state)
{
    void *blob;
    size_t len, n;
    struct tar_index ix;
    struct tar_member m;
    (void)state;
    NEED_FIXTURES();
    struct lrow *rows = listing("wds.tar", &n);
    assert_non_null(rows);
    assert_int_equal(n, 9000);
    build_fixture_index("wds.tar", &blob, &len, &ix);
    assert_int_equal(ix.n, 9000);
    assert_int_equal(ix.n_skipped, 0);
    size_t names = 0;
    for (size_t i = 0; i < n; i++)
        names += rows[i].name_len;
    assert_int_equal(len, TAR_INDEX_HDR + 9000 * (TAR_INDEX_REC + 4) + names);
    print_message("  wds.tar: 9000 members, blob %zu bytes (%.1f per member)\n", len,
                  (double)len / 9000);
    uint64_t size;
    int fd = open_fixture("wds.tar", &size);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(tar_index_find(&ix, rows[i].name, rows[i].name_len, &m), 0);
        assert_true(m.data_off == rows[i].off_data && m.size == rows[i].size);
        assert_int_equal(m.pos, i); /* archive order */
        assert_int_equal(tar_index_get(&ix, (uint32_t)i, &m), 0);
        assert_memory_equal(m.name, rows[i].name, rows[i].name_len);
        if (i % 3 == 1) { /* sample-NNNNN.cls holds N % 10 */
            char c;
            assert_int_equal(pread(fd, &c, 1, (off_t)m.data_off), 1);
            assert_int_equal(c, '0' + (int)((i / 3) % 10));
        }
    }
    close(fd);
    assert_int_equal(tar_index_get(&ix, 9000, &m), -ERANGE);
    static const char *absent[] = { "", "sample-", "sample-00042", "sample-00042.jp",
                                    "sample-00042.jpgx", "sample-99999.jpg", "a", "zzz" };
    for (size_t i = 0; i < ARRAY_SIZE(absent); i++)
        assert_int_equal(tar_index_find(&ix, absent[i], strlen(absent[i]), &m), -ENOENT);
    free(blob);
    listing_free(rows, n);
}

/* Only regular files are indexed; of two entries of one name, the last wins. */
static void test_tar_index_semantics(void **state)
{
    void *blob;
    size_t len, n;
    struct tar_index ix;
    struct tar_member m;
    (void)state;
    NEED_FIXTURES();
    struct lrow *rows = listing("py_gnu.tar", &n);
    build_fixture_index("py_gnu.tar", &blob, &len, &ix);
    assert_int_equal(tar_index_find(&ix, "dup.txt", 7, &m), 0);
    assert_int_equal(m.size, 26); /* "second, the one that wins\n" */
    for (const char *const *p = (const char *const[]){ "sub", "link", "hard.bin", NULL }; *p;
         p++)
        assert_int_equal(tar_index_find(&ix, *p, strlen(*p), &m), -ENOENT);
    /* 16 entries: a dir, a symlink, a hard link, a shadowed dup.txt left out */
    assert_int_equal(n, 16);
    assert_int_equal(ix.n, 12);
    assert_int_equal(ix.n_skipped, 4);
    uint64_t prev = 0;
    for (uint32_t i = 0; i < ix.n; i++) { /* archive order */
        assert_int_equal(tar_index_get(&ix, i, &m), 0);
        assert_true(m.data_off > prev);
        prev = m.data_off;
        struct tar_member f;
        assert_int_equal(tar_index_find(&ix, m.name, m.name_len, &f), 0);
        assert_int_equal(f.pos, i);
    }
    free(blob);
    listing_free(rows, n);
}

/* Names that escape (absolute, ".." segments) are flagged by the walk and not indexed. */
static void test_tar_unsafe_names(void **state)
{
    static const struct {
        const char *name;
        int unsafe;
    } want[] = {
        { "../evil.txt", 1 }, { "/abs.txt", 1 }, { "a/../b.txt", 1 }, { "ok.txt", 0 },
        { "./fine.txt", 0 }, { "..hidden", 0 }, { "a/..b", 0 }, { "x/..", 1 },
        { "..\\win.txt", 1 },
    };
    struct walked w;
    void *blob;
    size_t len;
    struct tar_index ix;
    struct tar_member m;
    (void)state;
    NEED_FIXTURES();
    walk_fixture("dotdot.tar", NULL, 0, &w);
    assert_int_equal(w.rc, TAR_END);
    assert_int_equal(w.n, ARRAY_SIZE(want));
    build_fixture_index("dotdot.tar", &blob, &len, &ix);
    for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
        assert_string_equal(w.v[i].e.name, want[i].name);
        assert_int_equal(!!(w.v[i].e.flags & TAR_F_UNSAFE), want[i].unsafe);
        assert_int_equal(tar_index_find(&ix, want[i].name, strlen(want[i].name), &m),
                         want[i].unsafe ? -ENOENT : 0);
    }
    assert_int_equal(ix.n, 4);
    assert_int_equal(ix.n_skipped, 5);
    walked_free(&w);
    free(blob);
}

/* --- tests: hostile archives ------------------------------------------------------------- */

static void test_tar_hostile_files(void **state)
{
    static const struct {
        const char *name;
        int rc;
        size_t entries; /* read before the end or the error */
        const char *reason;
    } cases[] = {
        { "badsum.tar", -EBADMSG, 1, "bad header checksum at offset 1024" },
        { "pastend.tar", -ENODATA, 0, "data bytes end past the archive" },
        { "trunc_hdr.tar", -ENODATA, 1, "truncated header at offset 1024" },
        { "hugepax.tar", -E2BIG, 0, "(cap 65536)" },
        { "notatar.bin", -EBADMSG, 0, "bad header checksum at offset 0" },
        { "empty.tar", TAR_END, 0, "" },
        { "endonly.tar", TAR_END, 0, "" },
        { "endonly10k.tar", TAR_END, 0, "" },
    };
    (void)state;
    NEED_FIXTURES();
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct walked w;
        walk_fixture(cases[i].name, NULL, 0, &w);
        if (w.rc != cases[i].rc || w.n != cases[i].entries ||
            !strstr(w.reason, cases[i].reason))
            fail_msg("%s: rc %d entries %zu reason '%s'", cases[i].name, w.rc, w.n, w.reason);
        walked_free(&w);
        /* the index of an invalid archive is refused with the walk's reason */
        uint64_t size;
        void *blob = NULL;
        size_t len = 0;
        struct errmsg em = { "" };
        int fd = open_fixture(cases[i].name, &size);
        int rc = tar_index_build_fd(fd, size, NULL, &blob, &len, &em);
        close(fd);
        if (cases[i].rc == TAR_END) {
            struct tar_index ix;
            struct tar_member m;
            assert_int_equal(rc, 0);
            assert_int_equal(tar_index_open(&ix, blob, len, NULL), 0);
            assert_int_equal(ix.n, 0);
            assert_int_equal(tar_index_find(&ix, "a", 1, &m), -ENOENT);
        } else {
            assert_int_equal(rc, cases[i].rc);
            assert_null(blob);
            assert_non_null(strstr(em.buf, cases[i].reason));
        }
        free(blob);
    }
}

/* A file shorter than the size it is said to have: the pread that finds its end fails. */
static void test_tar_index_short_file(void **state)
{
    uint64_t size;
    void *blob = (void *)1;
    size_t len = 1;
    struct errmsg em = { "" };
    (void)state;
    NEED_FIXTURES();
    int fd = open_fixture("pastend.tar", &size); /* one member of 100000 bytes, 1000 there */
    assert_int_equal(tar_index_build_fd(fd, 200000, NULL, &blob, &len, &em), -ENODATA);
    assert_null(blob);
    assert_int_equal(len, 0);
    assert_non_null(strstr(em.buf, "file shorter than its size"));
    assert_int_equal(tar_index_build_fd(-1, size, NULL, &blob, &len, &em), -EBADF);
    close(fd);
}

/* A growable archive in memory, built header by header. */
struct arch {
    uint8_t *p;
    size_t len, cap;
};

static uint8_t *arch_add(struct arch *a, size_t n)
{
    if (a->len + n > a->cap) {
        a->cap = (a->len + n) * 2 + 4096;
        a->p = realloc(a->p, a->cap);
        assert_non_null(a->p);
    }
    uint8_t *r = a->p + a->len;
    memset(r, 0, n);
    a->len += n;
    return r;
}

static void hdr_sum(uint8_t *h)
{
    unsigned sum = 0;
    memset(h + 148, ' ', 8);
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

/* Appends a ustar header; returns it (its checksum is set: redo hdr_sum after changes). */
static uint8_t *hdr(struct arch *a, const char *name, char type, uint64_t size)
{
    uint8_t *h = arch_add(a, 512);
    memcpy(h, name, strlen(name) < 100 ? strlen(name) : 100);
    memcpy(h + 100, "0000644", 7);
    memcpy(h + 108, "0000000", 7);
    memcpy(h + 116, "0000000", 7);
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)(size & 077777777777ull));
    memcpy(h + 136, "14000000000", 11);
    h[156] = (uint8_t)type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    hdr_sum(h);
    return h;
}

static void data_add(struct arch *a, const void *d, size_t n)
{
    uint8_t *p = arch_add(a, (n + 511) / 512 * 512);
    memcpy(p, d, n);
}

/* Appends a pax header of @type holding "key=value" pairs (NULL-terminated list). */
static void pax(struct arch *a, char type, const char *const *kv)
{
    char payload[8192];
    size_t n = 0;
    for (; *kv; kv += 2) {
        size_t body = strlen(kv[0]) + 1 + strlen(kv[1]) + 1 + 1, len = body + 1;
        while (snprintf(NULL, 0, "%zu", len) + body != len)
            len++;
        n += (size_t)snprintf(payload + n, sizeof(payload) - n, "%zu %s=%s\n", len, kv[0],
                              kv[1]);
    }
    hdr(a, "PaxHeader", type, n);
    data_add(a, payload, n);
}

static void walk_mem(const struct arch *a, const struct tar_limits *lim, struct walked *w)
{
    walk(-1, a->p, a->len, lim, 0, w);
}

static void test_tar_crafted(void **state)
{
    struct arch a = { 0 };
    struct walked w;
    (void)state;

    /* a member with a base-256 size: 0x80 then big-endian */
    hdr(&a, "b256.bin", '0', 0);
    uint8_t *h = a.p;
    memset(h + 124, 0, 12);
    h[124] = 0x80;
    h[135] = 100;
    hdr_sum(h);
    data_add(&a, (char[100]){ 'x' }, 100);
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, TAR_END);
    assert_int_equal(w.n, 1);
    assert_int_equal(w.v[0].e.size, 100);
    walked_free(&w);
    /* negative base-256 size */
    h[124] = 0xff;
    memset(h + 125, 0xff, 11);
    hdr_sum(h);
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, -EBADMSG);
    assert_non_null(strstr(w.reason, "bad size field"));
    walked_free(&w);
    /* base-256 over 2^63 */
    memset(h + 124, 0, 12);
    h[124] = 0x80;
    h[127] = 1;
    hdr_sum(h);
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, -EBADMSG);
    walked_free(&w);
    /* octal garbage; then a huge octal that is past the end */
    memcpy(h + 124, "0000001x000", 12);
    hdr_sum(h);
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, -EBADMSG);
    walked_free(&w);
    memcpy(h + 124, "77777777777", 12);
    hdr_sum(h);
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, -ENODATA);
    walked_free(&w);
    /* spaces and NUL around octal digits, as old tars write them; an empty size is 0 */
    memcpy(h + 124, "   144 \0\0\0\0", 12);
    hdr_sum(h);
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, TAR_END);
    assert_int_equal(w.v[0].e.size, 100);
    walked_free(&w);
    memset(h + 124, 0, 12);
    hdr_sum(h);
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, -EBADMSG); /* size 0: the data block is read as a header */
    walked_free(&w);
    /* a signed checksum (bytes over 127 counted negative), as some old tars wrote it */
    memcpy(h + 124, "00000000144", 12);
    h[5] = 0xe9;
    {
        int sum = 0;
        memset(h + 148, ' ', 8);
        for (int i = 0; i < 512; i++)
            sum += (int8_t)h[i];
        snprintf((char *)h + 148, 8, "%06o", sum);
    }
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, TAR_END);
    walked_free(&w);
    free(a.p);

    /* pax: a wrong record length, a bad size value, an 'x' with no entry after it */
    static const char *bad_pax[] = { "99 path=foo\n", "6 pathfoo\n", "11 size=1x\n",
                                     "7 =foo\n", "abc path=x\n", "0 a=b\n", "9 path=ab" };
    for (size_t i = 0; i < ARRAY_SIZE(bad_pax); i++) {
        memset(&a, 0, sizeof(a));
        hdr(&a, "PaxHeader", 'x', strlen(bad_pax[i]));
        data_add(&a, bad_pax[i], strlen(bad_pax[i]));
        hdr(&a, "f", '0', 0);
        walk_mem(&a, NULL, &w);
        if (w.rc != -EBADMSG)
            fail_msg("pax '%s': %d", bad_pax[i], w.rc);
        walked_free(&w);
        free(a.p);
    }
    memset(&a, 0, sizeof(a));
    pax(&a, 'x', (const char *const[]){ "path", "orphan", NULL });
    arch_add(&a, 1024);
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, -EBADMSG);
    assert_non_null(strstr(w.reason, "has no entry"));
    walked_free(&w);
    a.len -= 1024; /* and at the archive's very end */
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, -EBADMSG);
    walked_free(&w);
    free(a.p);

    /* global and per-file pax: the per-file wins, an empty value deletes, global applies on */
    memset(&a, 0, sizeof(a));
    pax(&a, 'g', (const char *const[]){ "mtime", "1234.5", "comment", "hi", NULL });
    pax(&a, 'x', (const char *const[]){ "path", "renamed.txt", "size", "3", NULL });
    hdr(&a, "orig.txt", '0', 999); /* the header's size is wrong; pax size wins */
    data_add(&a, "abc", 3);
    pax(&a, 'x', (const char *const[]){ "path", "", "mtime", "-7", NULL });
    hdr(&a, "plain.txt", '0', 2);
    data_add(&a, "ab", 2);
    pax(&a, 'x', (const char *const[]){ "GNU.sparse.major", "1", "GNU.sparse.name", "real",
                                        NULL });
    hdr(&a, "GNUSparseFile.0/real", '0', 512);
    arch_add(&a, 512);
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, TAR_END);
    assert_int_equal(w.n, 3);
    assert_string_equal(w.v[0].e.name, "renamed.txt");
    assert_int_equal(w.v[0].e.size, 3);
    assert_int_equal(w.v[0].e.mtime, 1234);
    assert_int_equal(w.v[0].e.hdr_off, 1024); /* the 'x' header, after the 'g' one */
    assert_int_equal(w.v[0].e.data_off, 2560);
    assert_string_equal(w.v[1].e.name, "plain.txt");
    assert_int_equal(w.v[1].e.mtime, -7);
    assert_string_equal(w.v[2].e.name, "real");
    assert_int_equal(w.v[2].e.type, TAR_SPARSE);
    walked_free(&w);
    free(a.p);

    /* a global path renames every later entry (tarfile does the same) */
    memset(&a, 0, sizeof(a));
    pax(&a, 'g', (const char *const[]){ "path", "same", NULL });
    hdr(&a, "one", '0', 0);
    hdr(&a, "two", '0', 0);
    pax(&a, 'g', (const char *const[]){ "path", "", NULL });
    hdr(&a, "three", '0', 0);
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, TAR_END);
    assert_int_equal(w.n, 3);
    assert_string_equal(w.v[0].e.name, "same");
    assert_string_equal(w.v[1].e.name, "same");
    assert_string_equal(w.v[2].e.name, "three");
    walked_free(&w);
    free(a.p);

    /* GNU long name / link; a long name with no entry; a name with a NUL from pax */
    memset(&a, 0, sizeof(a));
    char longname[5000];
    memset(longname, 'L', sizeof(longname));
    longname[300] = '\0';
    hdr(&a, "././@LongLink", 'L', 301);
    data_add(&a, longname, 301);
    hdr(&a, "././@LongLink", 'K', 4);
    data_add(&a, "tgt", 4);
    hdr(&a, "short", '2', 0);
    longname[300] = 'L';
    longname[4999] = '\0';
    hdr(&a, "././@LongLink", 'L', 5000); /* over TAR_NAME_MAX: flagged */
    data_add(&a, longname, 5000);
    hdr(&a, "short2", '0', 0);
    pax(&a, 'x', (const char *const[]){ "path", "a", NULL });
    hdr(&a, "x", '0', 0);
    hdr(&a, "dir/", '\0', 0); /* v7 directory */
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, TAR_END);
    assert_int_equal(w.n, 4);
    assert_int_equal(w.v[0].e.name_len, 300);
    assert_int_equal(w.v[0].e.type, TAR_SYMLINK);
    assert_int_equal(w.v[0].e.flags, 0);
    assert_int_equal(w.v[1].e.name_len, 4999);
    assert_int_equal(w.v[1].e.flags, TAR_F_UNSAFE);
    assert_string_equal(w.v[2].e.name, "a");
    assert_string_equal(w.v[3].e.name, "dir");
    assert_int_equal(w.v[3].e.type, TAR_DIR);
    walked_free(&w);
    free(a.p);

    memset(&a, 0, sizeof(a));
    pax(&a, 'x', (const char *const[]){ "path", "ab", NULL });
    assert_memory_equal(a.p + 512, "11 path=ab\n", 11);
    a.p[512 + 9] = '\0'; /* "11 path=a\0\n": a NUL inside the name */
    hdr(&a, "x", '0', 0);
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, TAR_END);
    assert_string_equal(w.v[0].e.name, "a");
    assert_int_equal(w.v[0].e.flags, TAR_F_UNSAFE);
    walked_free(&w);
    free(a.p);

    /* types without data (tarfile): a size on a link, a dir or a fifo is not skipped */
    memset(&a, 0, sizeof(a));
    hdr(&a, "ln", '2', 512);
    hdr(&a, "hl", '1', 512);
    hdr(&a, "d", '5', 512);
    hdr(&a, "p", '6', 512);
    hdr(&a, "unknown", 'Q', 1);
    data_add(&a, "q", 1);
    hdr(&a, "after", '0', 0);
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, TAR_END);
    assert_int_equal(w.n, 6);
    assert_int_equal(w.v[0].e.size, 0);
    assert_int_equal(w.v[4].e.type, TAR_OTHER);
    assert_int_equal(w.v[4].e.size, 1);
    assert_int_equal(w.v[5].e.hdr_off, 3072);
    walked_free(&w);
    free(a.p);

    /* GNU 'S' old sparse with two extension blocks */
    memset(&a, 0, sizeof(a));
    h = hdr(&a, "sp", 'S', 1024);
    h[482] = 1;
    hdr_sum(h);
    arch_add(&a, 512)[504] = 1;
    arch_add(&a, 512);
    arch_add(&a, 1024);
    hdr(&a, "next", '0', 1);
    data_add(&a, "n", 1);
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, TAR_END);
    assert_int_equal(w.n, 2);
    assert_int_equal(w.v[0].e.type, TAR_SPARSE);
    assert_int_equal(w.v[0].e.data_off, 1536);
    assert_int_equal(w.v[1].e.data_off, 1536 + 1024 + 512);
    walked_free(&w);
    a.len = 1024; /* extension block missing */
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, -ENODATA);
    walked_free(&w);
    free(a.p);
}

/* Caps: entries, name bytes, extended headers in a row, payload size. */
static void test_tar_limits(void **state)
{
    struct arch a = { 0 };
    struct walked w;
    (void)state;
    for (int i = 0; i < 40; i++)
        pax(&a, 'x', (const char *const[]){ "comment", "c", NULL });
    hdr(&a, "f", '0', 0);
    walk_mem(&a, NULL, &w);
    assert_int_equal(w.rc, -E2BIG);
    assert_non_null(strstr(w.reason, "extended headers in a row"));
    walked_free(&w);
    walk_mem(&a, &(struct tar_limits){ .max_meta_run = 64 }, &w);
    assert_int_equal(w.rc, TAR_END);
    walked_free(&w);
    free(a.p);

    memset(&a, 0, sizeof(a));
    for (int i = 0; i < 20; i++) {
        char n[16];
        snprintf(n, sizeof(n), "f%02d", i);
        hdr(&a, n, '0', 0);
    }
    walk_mem(&a, &(struct tar_limits){ .max_entries = 10 }, &w);
    assert_int_equal(w.rc, -E2BIG);
    assert_int_equal(w.n, 10);
    walked_free(&w);
    walk_mem(&a, &(struct tar_limits){ .max_name_bytes = 30 }, &w);
    assert_int_equal(w.rc, -E2BIG);
    assert_int_equal(w.n, 10);
    walked_free(&w);
    walk_mem(&a, &(struct tar_limits){ .max_entries = 20, .max_name_bytes = 60 }, &w);
    assert_int_equal(w.rc, TAR_END);
    walked_free(&w);
    free(a.p);

    memset(&a, 0, sizeof(a));
    hdr(&a, "././@LongLink", 'L', 1000);
    arch_add(&a, 1024);
    hdr(&a, "f", '0', 0);
    walk_mem(&a, &(struct tar_limits){ .max_meta = 999 }, &w);
    assert_int_equal(w.rc, -E2BIG);
    walked_free(&w);
    free(a.p);
}

/* Misuse of the feeding protocol fails the walk instead of corrupting it. */
static void test_tar_feed_misuse(void **state)
{
    struct tar_walk *w;
    struct tar_entry e;
    struct tar_need need;
    uint8_t buf[1024] = { 0 };
    (void)state;
    assert_int_equal(tar_walk_new(1024, NULL, &w), 0);
    assert_int_equal(tar_walk_feed(w, buf, 1), -EINVAL); /* nothing asked for yet */
    assert_int_equal(tar_walk_next(w, &e, &need), -EINVAL);
    tar_walk_free(w);
    assert_int_equal(tar_walk_new(1024, NULL, &w), 0);
    assert_int_equal(tar_walk_next(w, &e, &need), TAR_NEED);
    assert_int_equal(need.len, 512);
    assert_int_equal(tar_walk_feed(w, buf, 513), -EINVAL); /* more than asked */
    assert_int_equal(tar_walk_next(w, &e, &need), -EINVAL);
    tar_walk_free(w);
    assert_int_equal(tar_walk_new(1024, NULL, &w), 0);
    assert_int_equal(tar_walk_next(w, &e, &need), TAR_NEED);
    assert_int_equal(tar_walk_next(w, &e, &need), TAR_NEED); /* not fed: asked again */
    assert_int_equal(need.off, 0);
    assert_int_equal(tar_walk_feed(w, buf, 512), 0);
    assert_int_equal(tar_walk_next(w, &e, &need), TAR_END);
    tar_walk_free(w);
    tar_walk_free(NULL);
}

/* A corrupt blob never makes a lookup read outside it (ASan watches this): every truncation,
 * every byte changed. verify() catches every single-byte change. */
static void test_tar_index_corrupt(void **state)
{
    void *blob;
    size_t len;
    struct tar_index ix;
    struct tar_member m;
    static const char *names[] = { "a.txt", "dup.txt", "f.bin", "sub/x.json", "zzz", "" };
    (void)state;
    NEED_FIXTURES();
    build_fixture_index("py_gnu.tar", &blob, &len, &ix);
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *b = malloc(cut ? cut : 1);
        memcpy(b, blob, cut);
        assert_int_equal(tar_index_open(&ix, b, cut, NULL), -EBADMSG);
        free(b);
    }
    uint8_t *b = malloc(len);
    for (size_t i = 0; i < len; i++) {
        static const uint8_t xors[] = { 0x01, 0x80, 0xff };
        for (size_t x = 0; x < ARRAY_SIZE(xors); x++) {
            memcpy(b, blob, len);
            b[i] ^= xors[x];
            if (tar_index_open(&ix, b, len, NULL) != 0)
                continue;
            assert_int_equal(tar_index_verify(&ix, NULL), -EBADMSG);
            for (size_t k = 0; k < ARRAY_SIZE(names); k++) {
                int rc = tar_index_find(&ix, names[k], strlen(names[k]), &m);
                assert_true(rc == 0 || rc == -ENOENT || rc == -EBADMSG);
                if (rc == 0)
                    assert_true((const uint8_t *)m.name >= b &&
                                (const uint8_t *)m.name + m.name_len <= b + len &&
                                m.data_off + m.size <= ix.archive_size);
            }
            for (uint32_t p = 0; p <= ix.n; p++) {
                int rc = tar_index_get(&ix, p, &m);
                assert_true(rc == 0 || rc == -ERANGE || rc == -EBADMSG);
            }
        }
    }
    free(b);
    /* a version this code does not know */
    ((uint8_t *)blob)[4] = 2;
    assert_int_equal(tar_index_open(&ix, blob, len, NULL), -EBADMSG);
    assert_int_equal(tar_index_open(&ix, NULL, 0, NULL), -EBADMSG);
    free(blob);
}

/* The builder on its own: names sorted bytewise, shorter first; a later non-regular entry
 * hides an earlier file of its name. */
static void test_tar_index_builder(void **state)
{
    struct tar_index_builder *b;
    void *blob;
    size_t len;
    struct tar_index ix;
    struct tar_member m;
    static const struct {
        const char *name;
        enum tar_type type;
    } in[] = { { "b", TAR_REG }, { "ab", TAR_REG }, { "a", TAR_REG }, { "\xff", TAR_REG },
               { "gone", TAR_REG }, { "gone", TAR_SYMLINK }, { "a", TAR_REG } };
    (void)state;
    assert_int_equal(tar_index_builder_new(1 << 20, &b), 0);
    for (size_t i = 0; i < ARRAY_SIZE(in); i++) {
        struct tar_entry e = { .name = in[i].name, .name_len = strlen(in[i].name),
                               .data_off = 512 + 1024 * i, .size = 10, .type = in[i].type };
        assert_int_equal(tar_index_builder_add(b, &e), 0);
    }
    assert_int_equal(tar_index_builder_finish(b, &blob, &len), 0);
    tar_index_builder_free(b);
    assert_int_equal(tar_index_open(&ix, blob, len, NULL), 0);
    assert_int_equal(tar_index_verify(&ix, NULL), 0);
    assert_int_equal(ix.n, 4);
    assert_int_equal(ix.n_skipped, 3);
    assert_int_equal(tar_index_find(&ix, "a", 1, &m), 0);
    assert_int_equal(m.data_off, 512 + 1024 * 6);
    assert_int_equal(m.pos, 3);
    assert_int_equal(tar_index_find(&ix, "gone", 4, &m), -ENOENT);
    assert_int_equal(tar_index_find(&ix, "\xff", 1, &m), 0);
    const char *order[] = { "b", "ab", "\xff", "a" };
    for (uint32_t i = 0; i < 4; i++) {
        assert_int_equal(tar_index_get(&ix, i, &m), 0);
        assert_int_equal(m.name_len, strlen(order[i]));
        assert_memory_equal(m.name, order[i], m.name_len);
    }
    free(blob);
}

/* --- tar_walk_all(): the whole walk over callbacks ------------------------------------- */

/* An archive in memory as tar_read_f; counts reads and fails read number @fail_at (1-based). */
struct mem_reader {
    const struct arch *a;
    uint64_t last_end;
    unsigned reads, fail_at;
};

static int mem_read(void *cls, uint64_t off, size_t len, const void **bytes, struct errmsg *em)
{
    struct mem_reader *r = cls;
    assert_true(len > 0 && off <= r->a->len && len <= r->a->len - off);
    assert_true(off >= r->last_end); /* forward only */
    r->last_end = off + len;
    if (++r->reads == r->fail_at) {
        errmsg_set(em, "read %u failed", r->reads);
        return -EIO;
    }
    *bytes = r->a->p + off;
    return 0;
}

/* Collects the entries into a struct walked; answers @stop_rc at entry number @stop_at. */
struct entry_sink {
    struct walked w;
    size_t stop_at;
    int stop_rc;
};

static int sink_entry(void *cls, const struct tar_entry *e, struct errmsg *em)
{
    struct entry_sink *s = cls;
    (void)em;
    struct walked *w = &s->w;
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 16;
        w->v = realloc(w->v, w->cap * sizeof(*w->v));
        assert_non_null(w->v);
    }
    w->v[w->n].e = *e;
    w->v[w->n].name = strdup(e->name);
    w->v[w->n].e.name = w->v[w->n].name;
    w->n++;
    return w->n == s->stop_at ? s->stop_rc : 0;
}

/* The archive of the walk_all tests: a pax-named member, a GNU long name, a directory, a
 * symlink and plain files, then the end. */
static void walk_all_arch(struct arch *a)
{
    char longname[300];
    memset(longname, 'l', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    memset(a, 0, sizeof(*a));
    hdr(a, "one.txt", '0', 5);
    data_add(a, "hello", 5);
    pax(a, 'x', (const char *const[]){ "path", "pax/named.jpg", NULL });
    hdr(a, "short", '0', 700);
    data_add(a, (char[700]){ 0 }, 700);
    hdr(a, "././@LongLink", 'L', sizeof(longname));
    data_add(a, longname, sizeof(longname));
    hdr(a, "cut", '0', 3);
    data_add(a, "abc", 3);
    hdr(a, "dir/", '5', 0);
    hdr(a, "link", '2', 0);
    hdr(a, "last.cls", '0', 1);
    data_add(a, "7", 1);
    arch_add(a, 1024);
}

/* tar_walk_all() sees what the step API sees, entry for entry, reading forward only; an entry
 * callback's nonzero answer and a reader's error end the walk with that value; a walk error is
 * returned with "tar: <reason>"; tar_index_build() over a reader makes the same blob as
 * tar_index_build_fd() over a file of the same bytes. */
static void test_tar_walk_all(void **state)
{
    struct arch a;
    struct walked ref;
    struct errmsg em = { "" };
    (void)state;
    walk_all_arch(&a);
    walk_mem(&a, NULL, &ref);
    assert_int_equal(ref.rc, TAR_END);
    assert_int_equal(ref.n, 6);

    struct mem_reader r = { .a = &a };
    struct entry_sink s = { .stop_at = 0 };
    assert_int_equal(tar_walk_all(a.len, NULL, mem_read, &r, sink_entry, &s, &em), 0);
    assert_int_equal(s.w.n, ref.n);
    assert_int_equal(r.reads, ref.needs);
    for (size_t i = 0; i < ref.n; i++) {
        assert_string_equal(s.w.v[i].name, ref.v[i].name);
        assert_int_equal(s.w.v[i].e.hdr_off, ref.v[i].e.hdr_off);
        assert_int_equal(s.w.v[i].e.data_off, ref.v[i].e.data_off);
        assert_int_equal(s.w.v[i].e.size, ref.v[i].e.size);
        assert_int_equal(s.w.v[i].e.type, ref.v[i].e.type);
    }
    assert_string_equal(s.w.v[1].name, "pax/named.jpg");
    assert_int_equal(s.w.v[2].e.name_len, 299);
    walked_free(&s.w);

    /* the entry callback stops it: its value, no read after */
    struct mem_reader r2 = { .a = &a };
    struct entry_sink s2 = { .stop_at = 2, .stop_rc = 7 };
    assert_int_equal(tar_walk_all(a.len, NULL, mem_read, &r2, sink_entry, &s2, &em), 7);
    assert_int_equal(s2.w.n, 2);
    walked_free(&s2.w);
    struct entry_sink s3 = { .stop_at = 1, .stop_rc = -ENOMEM };
    struct mem_reader r3 = { .a = &a };
    assert_int_equal(tar_walk_all(a.len, NULL, mem_read, &r3, sink_entry, &s3, &em), -ENOMEM);
    walked_free(&s3.w);

    /* the reader fails its third read: its error and message */
    struct mem_reader r4 = { .a = &a, .fail_at = 3 };
    struct entry_sink s4 = { .stop_at = 0 };
    em.buf[0] = '\0';
    assert_int_equal(tar_walk_all(a.len, NULL, mem_read, &r4, sink_entry, &s4, &em), -EIO);
    assert_string_equal(em.buf, "read 3 failed");
    assert_int_equal(r4.reads, 3);
    walked_free(&s4.w);

    /* a bad header checksum in the third entry's header: -EBADMSG, the reason, the entries
     * before it seen */
    struct arch bad = a;
    bad.p = malloc(a.len);
    assert_non_null(bad.p);
    memcpy(bad.p, a.p, a.len);
    uint64_t third = ref.v[2].e.hdr_off;
    bad.p[third + 1] ^= 0x20;
    struct mem_reader r5 = { .a = &bad };
    struct entry_sink s5 = { .stop_at = 0 };
    em.buf[0] = '\0';
    assert_int_equal(tar_walk_all(bad.len, NULL, mem_read, &r5, sink_entry, &s5, &em),
                     -EBADMSG);
    assert_int_equal(s5.w.n, 2);
    assert_non_null(strstr(em.buf, "tar: bad header checksum at offset"));
    walked_free(&s5.w);
    free(bad.p);

    /* a limit passed: -E2BIG */
    struct tar_limits lim = { .max_entries = 3 };
    struct mem_reader r6 = { .a = &a };
    struct entry_sink s6 = { .stop_at = 0 };
    assert_int_equal(tar_walk_all(a.len, &lim, mem_read, &r6, sink_entry, &s6, &em), -E2BIG);
    assert_int_equal(s6.w.n, 3);
    walked_free(&s6.w);

    /* the index: over the reader and over a file of the same bytes, the same blob */
    void *b1 = NULL, *b2 = NULL;
    size_t l1 = 0, l2 = 0;
    struct mem_reader r7 = { .a = &a };
    assert_int_equal(tar_index_build(a.len, NULL, mem_read, &r7, &b1, &l1, &em), 0);
    char path[] = "/tmp/test_tar_walk_all.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    assert_int_equal(write(fd, a.p, a.len), (ssize_t)a.len);
    assert_int_equal(tar_index_build_fd(fd, a.len, NULL, &b2, &l2, &em), 0);
    close(fd);
    assert_int_equal(l1, l2);
    assert_memory_equal(b1, b2, l1);
    struct tar_index ix;
    struct tar_member m;
    assert_int_equal(tar_index_open(&ix, b1, l1, NULL), 0);
    assert_int_equal(ix.n, 4); /* the regular files */
    assert_int_equal(tar_index_find(&ix, "pax/named.jpg", 13, &m), 0);
    assert_int_equal(m.data_off, ref.v[1].e.data_off);
    free(b1);
    free(b2);
    /* a failing reader: the index is not made */
    struct mem_reader r8 = { .a = &a, .fail_at = 2 };
    b1 = (void *)1;
    assert_int_equal(tar_index_build(a.len, NULL, mem_read, &r8, &b1, &l1, &em), -EIO);
    assert_null(b1);
    walked_free(&ref);
    free(a.p);
}

/* tar_write_header(): what it writes walks back to the same names, sizes and offsets, with a
 * pax header only where ustar cannot say it (long names, sizes past 8 GiB - 1, records of the
 * caller's), and the pax record lengths are exact (the walker rejects a wrong one). */
static void test_tar_write_roundtrip(void **state)
{
    (void)state;
    struct arch a = {0};
    char longname[700];
    memset(longname, 'n', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    memcpy(longname + 600, "/x.jpg", 7);
    const char *names[] = {"a.txt", longname, "b/c.cls", "marked/entry", "big.bin"};
    uint64_t sizes[] = {5, 1000, 0, 0, 9ull << 30};
    uint8_t h[16384];
    struct tar_write_kv kv[] = {{"S3CACHED.status", "404"}, {"S3CACHED.code", "NoSuchKey"},
                                {"S3CACHED.message", "no such key, really"}};
    ssize_t lens[5];
    for (int i = 0; i < 5; i++) {
        lens[i] = tar_write_header(h, sizeof(h), names[i], strlen(names[i]), sizes[i],
                                   1700000000, i == 3 ? kv : NULL, i == 3 ? 3 : 0);
        assert_true(lens[i] > 0 && lens[i] % 512 == 0);
        memcpy(arch_add(&a, (size_t)lens[i]), h, (size_t)lens[i]);
        if (i < 4) {
            uint8_t d[1024];
            memset(d, 'a' + i, sizeof(d));
            data_add(&a, d, (size_t)sizes[i]);
        }
    }
    assert_int_equal(lens[0], 512); /* plain ustar */
    assert_int_equal(lens[2], 512);
    assert_true(lens[1] >= 1536);   /* pax path */
    assert_true(lens[3] >= 1536);   /* the caller's records */
    assert_true(lens[4] >= 1536);   /* pax size */
    /* the big member's bytes are not there: walk the first four, then end the archive */
    struct arch b = {0};
    uint64_t cut = a.len - (uint64_t)lens[4];
    memcpy(arch_add(&b, cut), a.p, cut);
    arch_add(&b, 1024);
    struct walked w;
    walk_mem(&b, NULL, &w);
    assert_int_equal(w.rc, TAR_END);
    assert_int_equal(w.n, 4);
    for (int i = 0; i < 4; i++) {
        assert_string_equal(w.v[i].name, names[i]);
        assert_int_equal(w.v[i].e.size, sizes[i]);
        assert_int_equal(w.v[i].e.type, TAR_REG);
        assert_int_equal(w.v[i].e.mtime, 1700000000);
    }
    assert_int_equal(b.p[w.v[1].e.data_off], 'b');
    walked_free(&w);
    /* the 9 GiB entry's header alone: its size comes from the pax record */
    struct tar_walk *tw;
    struct tar_entry e;
    struct tar_need need;
    assert_int_equal(tar_walk_new((uint64_t)lens[4] + (9ull << 30), NULL, &tw), 0);
    int rc;
    uint64_t fed = 0;
    while ((rc = tar_walk_next(tw, &e, &need)) == TAR_NEED) {
        assert_true(need.off >= fed); /* forward only */
        assert_int_equal(tar_walk_feed(tw, a.p + cut + need.off, need.len), 0);
        fed = need.off + need.len;
    }
    assert_int_equal(rc, TAR_ENTRY);
    assert_int_equal(e.size, 9ull << 30);
    assert_string_equal(e.name, "big.bin");
    tar_walk_free(tw);
    /* errors */
    assert_int_equal(tar_write_header(h, 511, "a", 1, 1, 0, NULL, 0), -E2BIG);
    assert_int_equal(tar_write_header(h, 1024, longname, strlen(longname), 1, 0, NULL, 0),
                     -E2BIG);
    assert_int_equal(tar_write_header(h, sizeof(h), "", 0, 1, 0, NULL, 0), -EINVAL);
    assert_int_equal(tar_write_header(h, sizeof(h), "a\0b", 3, 1, 0, NULL, 0), -EINVAL);
    free(a.p);
    free(b.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tar_matches_tarfile),
        cmocka_unit_test(test_tar_chunked_feed),
        cmocka_unit_test(test_tar_big_member),
        cmocka_unit_test(test_tar_index_wds),
        cmocka_unit_test(test_tar_index_semantics),
        cmocka_unit_test(test_tar_unsafe_names),
        cmocka_unit_test(test_tar_hostile_files),
        cmocka_unit_test(test_tar_index_short_file),
        cmocka_unit_test(test_tar_crafted),
        cmocka_unit_test(test_tar_limits),
        cmocka_unit_test(test_tar_feed_misuse),
        cmocka_unit_test(test_tar_index_corrupt),
        cmocka_unit_test(test_tar_index_builder),
        cmocka_unit_test(test_tar_write_roundtrip),
        cmocka_unit_test(test_tar_walk_all),
    };
    return cmocka_run_group_tests_name("tar", tests, fixtures_setup, fixtures_teardown);
}
