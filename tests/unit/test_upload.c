/*
 * test_upload.c: http/upload.c without a server: request bodies into a staged file of a real
 * cache (a mkdtemp directory, the fake backend behind it), fed in pieces of odd sizes. Plain
 * bodies and aws-chunked ones (AWS's worked example with its chunk signatures; an unsigned body
 * with a checksum trailer); Content-MD5, x-amz-checksum-* headers and trailers, the literal
 * SHA-256 of a signed payload; declared lengths (Content-Length, x-amz-decoded-content-length,
 * chunked without one, the object size limit); the metadata taken from the headers; the
 * admission of write-back bodies against the dirty limit; the staged file's owner. The O_DIRECT
 * path of large write-back bodies: this binary is linked with -Wl,--wrap=fileio_pwrite_all, so
 * every write upload.c makes is seen (a write through an O_DIRECT descriptor must be whole
 * pages at a page offset) and one can be refused with EINVAL (the rest then goes buffered).
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

#include "cache/cache.h"
#include "fake_backend.h"
#include "http/req.h"
#include "http/server.h"
#include "http/upload.h"
#include "lib/checksum.h"
#include "lib/conf.h"
#include "lib/fileio.h"
#include "lib/s3c.h"
#include "lib/s3err.h"
#include "lib/workq.h"
#include "objects/objects.h"

#define MIB (1u << 20)
#define PAGE 4096u

/* ---- every write upload.c makes ------------------------------------------------------------ */

int __real_fileio_pwrite_all(int fd, const void *p, size_t len, uint64_t off);
int __wrap_fileio_pwrite_all(int fd, const void *p, size_t len, uint64_t off);

static struct {
    unsigned writes, direct, bad_direct; /* bad: not whole pages at a page offset */
    uint64_t direct_bytes;
    int refuse_direct_at;                /* the N-th direct write fails with EINVAL (0: none) */
    int refused;
} wr;

int __wrap_fileio_pwrite_all(int fd, const void *p, size_t len, uint64_t off)
{
    int fl = fcntl(fd, F_GETFL);
    wr.writes++;
    if (fl >= 0 && (fl & O_DIRECT)) {
        wr.direct++;
        if (len % PAGE || off % PAGE || (uintptr_t)p % PAGE)
            wr.bad_direct++;
        if ((int)wr.direct == wr.refuse_direct_at) {
            wr.refused++;
            return -EINVAL; /* as a file system without O_DIRECT for this write */
        }
        wr.direct_bytes += len;
    }
    return __real_fileio_pwrite_all(fd, p, len, off);
}

/* ---- environment ----------------------------------------------------------------------------- */

struct env {
    char dir[256];
    struct conf cf;
    struct fake_be *fb;
    struct workq *wq;
    struct cache *c;
    struct objects *o;
    struct server srv;
};

static void env_open(struct env *e, int write_back)
{
    struct errmsg em = {""};
    e->cf.write_mode = write_back ? CONF_WRITE_BACK : CONF_WRITE_THROUGH;
    assert_int_equal(cache_open(&e->cf, &e->fb->be, e->wq, &e->c, &em), 0);
    assert_int_equal(objects_new(&e->cf, &e->fb->be, e->c, NULL, &e->o, &em), 0);
    e->srv.magic = SERVER_MAGIC;
    e->srv.cf = &e->cf;
    e->srv.cache = e->c;
    e->srv.obj = e->o;
}

static void env_close(struct env *e)
{
    objects_free(e->o);
    cache_close(e->c);
    e->o = NULL;
    e->c = NULL;
}

static int setup_mode(void **state, int write_back)
{
    struct env *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_upload.XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    e->cf.cache_dir = e->dir;
    e->cf.cache_size = 512ull * MIB;
    e->cf.block_size = MIB;
    e->cf.dirty_limit = 64ull * MIB;
    e->cf.max_object_size = 5ull << 40;
    e->cf.revalidate_after = 60000;
    e->fb = fake_be_new();
    assert_int_equal(workq_new(4, &e->wq), 0);
    env_open(e, write_back);
    memset(&wr, 0, sizeof(wr));
    *state = e;
    return 0;
}

static int setup_through(void **state) { return setup_mode(state, 0); }
static int setup_back(void **state) { return setup_mode(state, 1); }

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

/* ---- requests -------------------------------------------------------------------------------- */

struct treq {
    struct req rq;
    struct sigv4_kv h[12];
    char cl[32];
};

static void treq_init(struct treq *t, struct env *e, enum sigv4_payload pm)
{
    memset(t, 0, sizeof(*t));
    t->rq.magic = REQ_MAGIC;
    t->rq.srv = &e->srv;
    t->rq.method = "PUT";
    t->rq.op = OP_PUT;
    t->rq.headers = t->h;
    t->rq.auth.payload = pm;
}

static void hdr(struct treq *t, const char *name, const char *value)
{
    assert_true(t->rq.n_headers < ARRAY_SIZE(t->h));
    t->h[t->rq.n_headers].name = name;
    t->h[t->rq.n_headers].value = value;
    t->rq.n_headers++;
}

static void content_length(struct treq *t, uint64_t n)
{
    snprintf(t->cl, sizeof(t->cl), "%llu", (unsigned long long)n);
    hdr(t, "Content-Length", t->cl);
}

static unsigned char *pattern(size_t n, unsigned seed)
{
    unsigned char *d = malloc(n ? n : 1);
    assert_non_null(d);
    for (size_t i = 0; i < n; i++)
        d[i] = (unsigned char)((i * 131 + seed * 7 + (i >> 12)) % 251);
    return d;
}

/* Feeds @len bytes in pieces of the sizes in @pieces (cycled; NULL: whole). The first error. */
static int feed(struct req *rq, const void *data, size_t len, const size_t *pieces, size_t np)
{
    const char *p = data;
    for (size_t off = 0, i = 0; off < len; i++) {
        size_t n = pieces ? S3C_MIN(pieces[i % np], len - off) : len - off;
        int rc = upload_write(rq, p + off, n);
        if (rc)
            return rc;
        off += n;
    }
    return 0;
}

/* The bytes of @fd from @off on equal @data. */
static void assert_file(int fd, uint64_t off, const void *data, size_t len)
{
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal((uint64_t)st.st_size, off + len);
    unsigned char *got = malloc(len ? len : 1);
    assert_non_null(got);
    assert_int_equal(pread(fd, got, len, (off_t)off), (ssize_t)len);
    if (memcmp(got, data, len))
        fail_msg("the staged bytes differ from the body");
    free(got);
}

static void digests(const void *data, size_t len, enum cksum_algo algo, struct cksum_result *r)
{
    struct cksum *ck;
    assert_int_equal(cksum_new(CKSUM_WANT_MD5 | CKSUM_WANT_SHA256, algo, &ck), 0);
    cksum_update(ck, data, len);
    cksum_final(ck, r);
    cksum_free(ck);
}

static const size_t odd_pieces[] = {1, 4095, 4097, 65539, 1, 1048577, 7, 300000};

/* ---- plain bodies ---------------------------------------------------------------------------- */

static void test_upload_plain_body(void **state)
{
    struct env *e = *state;
    static const size_t sizes[] = {0, 1, 4095, 4096, 65537, 3 * MIB + 17};
    for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
        struct treq t;
        struct be_meta m;
        struct cksum_result want;
        unsigned char *d = pattern(sizes[i], (unsigned)i);
        memset(&m, 0, sizeof(m));
        digests(d, sizes[i], CKSUM_NONE, &want);
        treq_init(&t, e, SIGV4_PAYLOAD_UNSIGNED);
        content_length(&t, sizes[i]);
        assert_int_equal(upload_begin(&t.rq, 1ull << 30), 0);
        assert_int_equal(upload_declared(&t.rq), sizes[i]);
        assert_int_equal(feed(&t.rq, d, sizes[i], odd_pieces, ARRAY_SIZE(odd_pieces)), 0);
        assert_int_equal(upload_finish(&t.rq, &m), 0);
        assert_int_equal(m.size, sizes[i]);
        assert_string_equal(m.etag, want.md5_hex);
        assert_string_equal(m.checksum_algo, "");
        /* the staged file is in the cache directory and holds the body */
        const char *path = upload_path(&t.rq);
        assert_non_null(path);
        assert_memory_equal(path, e->dir, strlen(e->dir));
        assert_file(upload_fd(&t.rq), 0, d, sizes[i]);
        /* upload_free() unlinks what was not handed over */
        char p[4096];
        snprintf(p, sizeof(p), "%s", path);
        upload_free(&t.rq);
        assert_null(t.rq.up);
        assert_int_equal(access(p, F_OK), -1);
        free(d);
    }
    assert_int_equal(wr.direct, 0); /* write-through never goes around the page cache */
    /* a path handed over stays */
    struct treq t;
    struct be_meta m;
    char p[4096];
    treq_init(&t, e, SIGV4_PAYLOAD_UNSIGNED);
    content_length(&t, 3);
    assert_int_equal(upload_begin(&t.rq, 100), 0);
    assert_int_equal(upload_write(&t.rq, "abc", 3), 0);
    assert_int_equal(upload_finish(&t.rq, &m), 0);
    snprintf(p, sizeof(p), "%s", upload_path(&t.rq));
    upload_release_path(&t.rq);
    assert_null(upload_path(&t.rq));
    upload_free(&t.rq);
    assert_int_equal(access(p, F_OK), 0);
    unlink(p);
    upload_free(&t.rq); /* twice: nothing */
    /* without upload_begin() */
    assert_int_equal(upload_write(&t.rq, "x", 1), -S3E_INTERNAL);
    assert_int_equal(upload_finish(&t.rq, &m), -S3E_INTERNAL);
    assert_int_equal(upload_fd(&t.rq), -1);
    assert_int_equal(upload_declared(&t.rq), UINT64_MAX);
}

static void test_upload_declared_lengths(void **state)
{
    struct env *e = *state;
    const struct {
        const char *cl, *te, *dl;
        enum sigv4_payload pm;
        uint64_t max;
        int begin_rc;
        size_t body;
        int write_rc, finish_rc;
    } cases[] = {
        {"10", NULL, NULL, SIGV4_PAYLOAD_UNSIGNED, 100, 0, 10, 0, 0},
        {"10", NULL, NULL, SIGV4_PAYLOAD_UNSIGNED, 100, 0, 11, -S3E_INVALID_REQUEST, 0},
        {"10", NULL, NULL, SIGV4_PAYLOAD_UNSIGNED, 100, 0, 9, 0, -S3E_INCOMPLETE_BODY},
        {"0", NULL, NULL, SIGV4_PAYLOAD_UNSIGNED, 100, 0, 0, 0, 0},
        {NULL, "chunked", NULL, SIGV4_PAYLOAD_UNSIGNED, 100, 0, 77, 0, 0}, /* length unknown */
        {NULL, "gzip, chunked", NULL, SIGV4_PAYLOAD_UNSIGNED, 100, 0, 5, 0, 0},
        {NULL, "chunked", NULL, SIGV4_PAYLOAD_UNSIGNED, 100, 0, 101, -S3E_ENTITY_TOO_LARGE, 0},
        {NULL, NULL, NULL, SIGV4_PAYLOAD_UNSIGNED, 100, -S3E_MISSING_CONTENT_LENGTH, 0, 0, 0},
        {NULL, "identity", NULL, SIGV4_PAYLOAD_UNSIGNED, 100, -S3E_MISSING_CONTENT_LENGTH, 0, 0,
         0},
        {"101", NULL, NULL, SIGV4_PAYLOAD_UNSIGNED, 100, -S3E_ENTITY_TOO_LARGE, 0, 0, 0},
        {"100", NULL, NULL, SIGV4_PAYLOAD_UNSIGNED, 100, 0, 100, 0, 0},
        {"-1", NULL, NULL, SIGV4_PAYLOAD_UNSIGNED, 100, -S3E_INVALID_ARGUMENT, 0, 0, 0},
        {"1x", NULL, NULL, SIGV4_PAYLOAD_UNSIGNED, 100, -S3E_INVALID_ARGUMENT, 0, 0, 0},
        {"", NULL, NULL, SIGV4_PAYLOAD_UNSIGNED, 100, -S3E_INVALID_ARGUMENT, 0, 0, 0},
        {"18446744073709551615", NULL, NULL, SIGV4_PAYLOAD_UNSIGNED, 100, -S3E_INVALID_ARGUMENT,
         0, 0, 0},
        {"99999999999999999999", NULL, NULL, SIGV4_PAYLOAD_UNSIGNED, 100, -S3E_INVALID_ARGUMENT,
         0, 0, 0},
        /* aws-chunked: the decoded length is the one that counts */
        {"500", NULL, "200", SIGV4_PAYLOAD_UNSIGNED_TRAILER, 300, 0, 0, 0, 0},
        {"500", NULL, "301", SIGV4_PAYLOAD_UNSIGNED_TRAILER, 300, -S3E_ENTITY_TOO_LARGE, 0, 0, 0},
        {"500", NULL, "x", SIGV4_PAYLOAD_UNSIGNED_TRAILER, 300, -S3E_INVALID_ARGUMENT, 0, 0, 0},
        {"500", NULL, NULL, SIGV4_PAYLOAD_UNSIGNED_TRAILER, 300, 0, 0, 0, 0},
        {"500", NULL, NULL, SIGV4_PAYLOAD_STREAMING, 300, -S3E_MISSING_CONTENT_LENGTH, 0, 0, 0},
        {"500", NULL, NULL, SIGV4_PAYLOAD_STREAMING_TRAILER, 300, -S3E_MISSING_CONTENT_LENGTH,
         0, 0, 0},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct treq t;
        struct be_meta m;
        treq_init(&t, e, cases[i].pm);
        if (cases[i].cl)
            hdr(&t, "Content-Length", cases[i].cl);
        if (cases[i].te)
            hdr(&t, "Transfer-Encoding", cases[i].te);
        if (cases[i].dl)
            hdr(&t, "x-amz-decoded-content-length", cases[i].dl);
        int rc = upload_begin(&t.rq, cases[i].max);
        if (rc != cases[i].begin_rc)
            fail_msg("case %zu: upload_begin %d (%s), want %d", i, rc, s3c_strerror(rc),
                     cases[i].begin_rc);
        if (!rc && cases[i].pm == SIGV4_PAYLOAD_UNSIGNED) {
            unsigned char *d = pattern(cases[i].body, 1);
            rc = feed(&t.rq, d, cases[i].body, odd_pieces, 3);
            free(d);
            if (rc != cases[i].write_rc)
                fail_msg("case %zu: upload_write %d (%s), want %d", i, rc, s3c_strerror(rc),
                         cases[i].write_rc);
            if (!rc) {
                rc = upload_finish(&t.rq, &m);
                if (rc != cases[i].finish_rc)
                    fail_msg("case %zu: upload_finish %d (%s), want %d", i, rc,
                             s3c_strerror(rc), cases[i].finish_rc);
                if (!rc)
                    assert_int_equal(m.size, cases[i].body);
            }
        }
        upload_free(&t.rq);
    }
}

static void test_upload_digests(void **state)
{
    struct env *e = *state;
    static const char body[] = "The quick brown fox jumps over the lazy dog";
    size_t n = sizeof(body) - 1;
    struct cksum_result md5, crc32, crc32c, sha1, sha256;
    digests(body, n, CKSUM_NONE, &md5);
    digests(body, n, CKSUM_CRC32, &crc32);
    digests(body, n, CKSUM_CRC32C, &crc32c);
    digests(body, n, CKSUM_SHA1, &sha1);
    digests(body, n, CKSUM_SHA256, &sha256);
    char sha_upper[65];
    for (size_t i = 0; i < 65; i++)
        sha_upper[i] = (char)(sha256.sha256_hex[i] >= 'a' ? sha256.sha256_hex[i] - 32
                                                          : sha256.sha256_hex[i]);
    const struct {
        const char *h1, *v1, *h2, *v2;
        const char *payload_sha; /* SIGV4_PAYLOAD_SHA256 with this hash */
        int begin_rc, finish_rc;
        const char *algo, *cks; /* stored checksum on success */
    } cases[] = {
        {"Content-MD5", md5.md5_b64, NULL, NULL, NULL, 0, 0, "", ""},
        {"Content-MD5", "1B2M2Y8AsgTpgAmY7PhCfg==", NULL, NULL, NULL, 0, -S3E_BAD_DIGEST, 0, 0},
        {"Content-MD5", "not base64!", NULL, NULL, NULL, -S3E_INVALID_DIGEST, 0, 0, 0},
        {"Content-MD5", "AAAA", NULL, NULL, NULL, -S3E_INVALID_DIGEST, 0, 0, 0}, /* 3 bytes */
        {"x-amz-checksum-crc32", crc32.algo_b64, NULL, NULL, NULL, 0, 0, "CRC32",
         crc32.algo_b64},
        {"x-amz-checksum-crc32c", crc32c.algo_b64, NULL, NULL, NULL, 0, 0, "CRC32C",
         crc32c.algo_b64},
        {"x-amz-checksum-sha1", sha1.algo_b64, NULL, NULL, NULL, 0, 0, "SHA1", sha1.algo_b64},
        {"x-amz-checksum-sha256", sha256.algo_b64, NULL, NULL, NULL, 0, 0, "SHA256",
         sha256.algo_b64},
        {"x-amz-checksum-crc32", crc32c.algo_b64, NULL, NULL, NULL, 0, -S3E_BAD_DIGEST, 0, 0},
        {"x-amz-checksum-sha256", sha1.algo_b64, NULL, NULL, NULL, -S3E_INVALID_REQUEST, 0, 0, 0},
        {"x-amz-checksum-crc32", "!!!!", NULL, NULL, NULL, -S3E_INVALID_REQUEST, 0, 0, 0},
        {"Content-MD5", md5.md5_b64, "x-amz-checksum-sha1", sha1.algo_b64, NULL, 0, 0, "SHA1",
         sha1.algo_b64},
        {"Content-MD5", md5.md5_b64, "x-amz-checksum-sha1", crc32.algo_b64, NULL,
         -S3E_INVALID_REQUEST, 0, 0, 0},
        /* the SDK names the algorithm it will send in a trailer: computed and stored */
        {"x-amz-sdk-checksum-algorithm", "CRC32C", NULL, NULL, NULL, 0, 0, "CRC32C",
         crc32c.algo_b64},
        /* the literal SHA-256 of a signed payload, in either case */
        {NULL, NULL, NULL, NULL, sha256.sha256_hex, 0, 0, "", ""},
        {NULL, NULL, NULL, NULL, sha_upper, 0, 0, "", ""},
        {NULL, NULL, NULL, NULL, md5.sha256_hex, 0, 0, "", ""}, /* same body, same hash */
        {NULL, NULL, NULL, NULL,
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", 0,
         -S3E_SHA256_MISMATCH, 0, 0},
        {"Content-MD5", md5.md5_b64, NULL, NULL,
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", 0,
         -S3E_SHA256_MISMATCH, 0, 0},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct treq t;
        struct be_meta m;
        memset(&m, 0, sizeof(m));
        treq_init(&t, e, cases[i].payload_sha ? SIGV4_PAYLOAD_SHA256 : SIGV4_PAYLOAD_UNSIGNED);
        if (cases[i].payload_sha)
            snprintf(t.rq.auth.payload_sha256, sizeof(t.rq.auth.payload_sha256), "%s",
                     cases[i].payload_sha);
        content_length(&t, n);
        if (cases[i].h1)
            hdr(&t, cases[i].h1, cases[i].v1);
        if (cases[i].h2)
            hdr(&t, cases[i].h2, cases[i].v2);
        int rc = upload_begin(&t.rq, 1000);
        if (rc != cases[i].begin_rc)
            fail_msg("case %zu: upload_begin %d (%s), want %d", i, rc, s3c_strerror(rc),
                     cases[i].begin_rc);
        if (!rc) {
            assert_int_equal(feed(&t.rq, body, n, odd_pieces, 1), 0); /* byte by byte */
            rc = upload_finish(&t.rq, &m);
            if (rc != cases[i].finish_rc)
                fail_msg("case %zu: upload_finish %d (%s), want %d", i, rc, s3c_strerror(rc),
                         cases[i].finish_rc);
            if (!rc) {
                assert_string_equal(m.etag, md5.md5_hex);
                assert_string_equal(m.checksum_algo, cases[i].algo);
                assert_string_equal(m.checksum, cases[i].cks);
            }
        }
        upload_free(&t.rq);
    }
}

/* ---- aws-chunked ------------------------------------------------------------------------------ */

/* AWS's worked example (STREAMING-AWS4-HMAC-SHA256-PAYLOAD): 66560 'a' in a 65536 and a 1024
 * byte chunk, signed with the documentation's key (see test_awschunk.c). */
static const uint8_t doc_key[32] = {
    0xdb, 0xb8, 0x93, 0xac, 0xc0, 0x10, 0x96, 0x49, 0x18, 0xf1, 0xfd, 0x43, 0x3a, 0xdd, 0x87, 0xc7,
    0x0e, 0x8b, 0x0d, 0xb6, 0xbe, 0x30, 0xc1, 0xfb, 0xea, 0xfe, 0xfa, 0x5e, 0xc6, 0xba, 0x83, 0x78,
};
static const char *const doc_sigs[] = {
    "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
    "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
    "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
};

struct body {
    char *p;
    size_t len;
};

static void body_put(struct body *b, const void *p, size_t n)
{
    b->p = realloc(b->p, b->len + n + 1);
    assert_non_null(b->p);
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void frame(struct body *b, const void *data, size_t n, const char *sig)
{
    char h[128];
    if (sig)
        snprintf(h, sizeof(h), "%zx;chunk-signature=%s\r\n", n, sig);
    else
        snprintf(h, sizeof(h), "%zx\r\n", n);
    body_put(b, h, strlen(h));
    body_put(b, data, n);
    if (n)
        body_put(b, "\r\n", 2);
}

static void signed_request(struct treq *t, struct env *e, const char *decoded_len, size_t wire)
{
    treq_init(t, e, SIGV4_PAYLOAD_STREAMING);
    memcpy(t->rq.auth.signing_key, doc_key, 32);
    snprintf(t->rq.auth.seed_signature, sizeof(t->rq.auth.seed_signature), "%s",
             "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9");
    snprintf(t->rq.auth.amz_date, sizeof(t->rq.auth.amz_date), "20130524T000000Z");
    snprintf(t->rq.auth.scope, sizeof(t->rq.auth.scope), "20130524/us-east-1/s3/aws4_request");
    content_length(t, wire);
    hdr(t, "x-amz-decoded-content-length", decoded_len);
    hdr(t, "Content-Encoding", "aws-chunked");
}

static void test_upload_aws_chunked_signed(void **state)
{
    struct env *e = *state;
    static unsigned char a[65536];
    struct body b = {0};
    struct cksum_result want;
    memset(a, 'a', sizeof(a));
    frame(&b, a, 65536, doc_sigs[0]);
    frame(&b, a, 1024, doc_sigs[1]);
    frame(&b, a, 0, doc_sigs[2]);
    body_put(&b, "\r\n", 2);
    unsigned char *whole = malloc(66560);
    memset(whole, 'a', 66560);
    digests(whole, 66560, CKSUM_NONE, &want);
    static const size_t pieces[][3] = {{SIZE_MAX, 0, 0}, {1, 0, 0}, {7, 8191, 65537}};
    for (size_t i = 0; i < ARRAY_SIZE(pieces); i++) {
        struct treq t;
        struct be_meta m;
        size_t np = pieces[i][1] ? 3 : 1;
        signed_request(&t, e, "66560", b.len);
        assert_int_equal(upload_begin(&t.rq, 1 << 20), 0);
        assert_int_equal(upload_declared(&t.rq), 66560);
        assert_int_equal(feed(&t.rq, b.p, b.len, pieces[i], np), 0);
        assert_int_equal(upload_finish(&t.rq, &m), 0);
        assert_int_equal(m.size, 66560);
        assert_string_equal(m.etag, want.md5_hex);
        assert_file(upload_fd(&t.rq), 0, whole, 66560); /* the payload, without the framing */
        upload_free(&t.rq);
    }
    /* a chunk signature off by one digit: refused, and the body dropped at once: no staged
     * file left while the client sends the rest */
    struct body bad = {0};
    body_put(&bad, b.p, b.len);
    char *sig = strstr(bad.p + 65536, doc_sigs[1]);
    assert_non_null(sig);
    sig[10] = sig[10] == '0' ? '1' : '0';
    struct treq t;
    struct be_meta m;
    signed_request(&t, e, "66560", bad.len);
    assert_int_equal(upload_begin(&t.rq, 1 << 20), 0);
    char staged_path[4096];
    snprintf(staged_path, sizeof(staged_path), "%s", upload_path(&t.rq));
    assert_int_equal(feed(&t.rq, bad.p, bad.len, NULL, 0), -S3E_SIGNATURE_DOES_NOT_MATCH);
    assert_int_equal(upload_fd(&t.rq), -1);
    assert_null(upload_path(&t.rq));
    struct stat st;
    assert_int_equal(stat(staged_path, &st), -1);
    assert_int_equal(upload_finish(&t.rq, &m), -S3E_INTERNAL);
    upload_free(&t.rq);
    /* the decoded length must be the payload's */
    signed_request(&t, e, "66561", b.len);
    assert_int_equal(upload_begin(&t.rq, 1 << 20), 0);
    assert_int_equal(feed(&t.rq, b.p, b.len, NULL, 0), 0);
    assert_int_equal(upload_finish(&t.rq, &m), -S3E_INCOMPLETE_BODY);
    upload_free(&t.rq);
    signed_request(&t, e, "66559", b.len);
    assert_int_equal(upload_begin(&t.rq, 1 << 20), 0);
    assert_int_equal(feed(&t.rq, b.p, b.len, NULL, 0), -S3E_INVALID_REQUEST);
    upload_free(&t.rq);
    /* a body cut before its final frame */
    signed_request(&t, e, "66560", b.len);
    assert_int_equal(upload_begin(&t.rq, 1 << 20), 0);
    assert_int_equal(feed(&t.rq, b.p, b.len - 90, NULL, 0), 0);
    assert_int_equal(upload_finish(&t.rq, &m), -S3E_INCOMPLETE_BODY);
    upload_free(&t.rq);
    free(whole);
    free(b.p);
    free(bad.p);
}

static void test_upload_aws_chunked_trailer(void **state)
{
    struct env *e = *state;
    size_t n = 70000;
    unsigned char *d = pattern(n, 3);
    struct cksum_result crc, crc32c;
    digests(d, n, CKSUM_CRC32, &crc);
    digests(d, n, CKSUM_CRC32C, &crc32c);
    const struct {
        const char *trailer_hdr; /* x-amz-trailer */
        const char *trailer;     /* the trailer lines */
        const char *header_algo, *header_value;
        int begin_rc, finish_rc;
        const char *algo, *cks;
    } cases[] = {
        {"x-amz-checksum-crc32", "x-amz-checksum-crc32:%s\r\n\r\n", NULL, NULL, 0, 0, "CRC32",
         crc.algo_b64},
        {"x-amz-checksum-crc32", "x-amz-checksum-crc32:AAAAAA==\r\n\r\n", NULL, NULL, 0,
         -S3E_BAD_DIGEST, 0, 0},
        {"x-amz-checksum-crc32", "\r\n", NULL, NULL, 0, -S3E_INVALID_REQUEST, 0, 0},
        {"x-amz-checksum-md5", "\r\n", NULL, NULL, -S3E_INVALID_REQUEST, 0, 0, 0},
        /* a checksum header wins over the trailer's algorithm */
        {"x-amz-checksum-crc32", "x-amz-checksum-crc32:%s\r\n\r\n", "x-amz-checksum-crc32c",
         crc32c.algo_b64, 0, 0, "CRC32C", crc32c.algo_b64},
        {NULL, "\r\n", NULL, NULL, 0, 0, "", ""},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct body b = {0};
        char tr[256];
        snprintf(tr, sizeof(tr), cases[i].trailer, crc.algo_b64);
        frame(&b, d, 65536, NULL);
        frame(&b, d + 65536, n - 65536, NULL);
        frame(&b, d, 0, NULL);
        body_put(&b, tr, strlen(tr));
        struct treq t;
        struct be_meta m;
        memset(&m, 0, sizeof(m));
        treq_init(&t, e, SIGV4_PAYLOAD_UNSIGNED_TRAILER);
        content_length(&t, b.len);
        hdr(&t, "x-amz-decoded-content-length", "70000");
        if (cases[i].trailer_hdr)
            hdr(&t, "x-amz-trailer", cases[i].trailer_hdr);
        if (cases[i].header_algo)
            hdr(&t, cases[i].header_algo, cases[i].header_value);
        int rc = upload_begin(&t.rq, 1 << 20);
        if (rc != cases[i].begin_rc)
            fail_msg("case %zu: upload_begin %d, want %d", i, rc, cases[i].begin_rc);
        if (!rc) {
            assert_int_equal(feed(&t.rq, b.p, b.len, odd_pieces, ARRAY_SIZE(odd_pieces)), 0);
            rc = upload_finish(&t.rq, &m);
            if (rc != cases[i].finish_rc)
                fail_msg("case %zu: upload_finish %d (%s), want %d", i, rc, s3c_strerror(rc),
                         cases[i].finish_rc);
            if (!rc) {
                assert_int_equal(m.size, n);
                assert_string_equal(m.checksum_algo, cases[i].algo);
                assert_string_equal(m.checksum, cases[i].cks);
                assert_file(upload_fd(&t.rq), 0, d, n);
            }
        }
        upload_free(&t.rq);
        free(b.p);
    }
    free(d);
}

/* ---- metadata -------------------------------------------------------------------------------- */

static void test_upload_meta_from_headers(void **state)
{
    struct env *e = *state;
    const struct {
        const char *ce;      /* Content-Encoding */
        const char *want_ce;
    } ce_cases[] = {
        {"aws-chunked", ""},         {"gzip", "gzip"},       {"aws-chunked,gzip", "gzip"},
        {"gzip, aws-chunked", "gzip"}, {"gzip , br", "gzip, br"}, {" AWS-Chunked , ", ""},
        {NULL, ""},
    };
    for (size_t i = 0; i < ARRAY_SIZE(ce_cases); i++) {
        struct treq t;
        struct be_meta m;
        memset(&m, 0x55, sizeof(m));
        treq_init(&t, e, SIGV4_PAYLOAD_UNSIGNED);
        if (ce_cases[i].ce)
            hdr(&t, "Content-Encoding", ce_cases[i].ce);
        assert_int_equal(upload_meta_from_headers(&t.rq, &m), 0);
        if (strcmp(m.content_encoding, ce_cases[i].want_ce))
            fail_msg("Content-Encoding \"%s\": stored \"%s\", want \"%s\"", ce_cases[i].ce,
                     m.content_encoding, ce_cases[i].want_ce);
        assert_string_equal(m.content_type, "");
        assert_string_equal(m.usermeta, "");
    }
    struct treq t;
    struct be_meta m;
    treq_init(&t, e, SIGV4_PAYLOAD_UNSIGNED);
    hdr(&t, "Content-Type", "text/plain");
    hdr(&t, "cache-control", "max-age=60");
    hdr(&t, "Content-Disposition", "attachment");
    hdr(&t, "Content-Language", "en");
    hdr(&t, "Expires", "Thu, 01 Dec 2094 16:00:00 GMT");
    hdr(&t, "X-Amz-Meta-Color", "Blue");
    hdr(&t, "x-amz-meta-", "nameless");   /* no name: not metadata */
    hdr(&t, "x-amz-metadata-directive", "COPY");
    hdr(&t, "x-amz-meta-Shape", "round");
    assert_int_equal(upload_meta_from_headers(&t.rq, &m), 0);
    assert_string_equal(m.content_type, "text/plain");
    assert_string_equal(m.cache_control, "max-age=60");
    assert_string_equal(m.content_disposition, "attachment");
    assert_string_equal(m.content_language, "en");
    assert_string_equal(m.expires, "Thu, 01 Dec 2094 16:00:00 GMT");
    assert_string_equal(m.usermeta, "color:Blue\nshape:round\n"); /* names lower-cased */
    /* S3's 2 KB of user metadata (names and values) */
    static char big[2100];
    memset(big, 'v', 2040);
    big[2040] = '\0';
    treq_init(&t, e, SIGV4_PAYLOAD_UNSIGNED);
    hdr(&t, "x-amz-meta-a", big);
    assert_int_equal(upload_meta_from_headers(&t.rq, &m), 0);
    hdr(&t, "x-amz-meta-bbbbbbbb", "x");
    assert_int_equal(upload_meta_from_headers(&t.rq, &m), -S3E_METADATA_TOO_LARGE);
}

/* ---- write-back: admission and O_DIRECT ---------------------------------------------------- */

/* Write-back, a declared length: upload_admit() refuses what could not fit now (SlowDown) or
 * ever (EntityTooLarge) and reserves nothing; the body reserves the dirty limit and the room
 * in the cache as its bytes arrive, never more than twice what arrived (issue 45 item 6: a
 * client that declares 60 MiB and trickles must not hold 60 MiB). */
static void test_upload_admit(void **state)
{
    struct env *e = *state; /* write-back, dirty limit 64 MiB */
    static const size_t piece[] = {64 * 1024};
    struct treq t1, t2, t3;
    struct cache_stats cs;
    treq_init(&t1, e, SIGV4_PAYLOAD_UNSIGNED);
    content_length(&t1, 40ull * MIB);
    assert_int_equal(upload_begin(&t1.rq, 1ull << 30), 0);
    assert_int_equal(upload_admit(&t1.rq), 0);
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.dirty_staged_bytes, 0); /* nothing before its bytes */
    assert_int_equal(cs.staged_bytes, 0);
    unsigned char *d = pattern(3 * MIB, 5);
    assert_int_equal(feed(&t1.rq, d, 3 * MIB, piece, 1), 0);
    free(d);
    cache_get_stats(e->c, &cs);
    assert_true(cs.dirty_staged_bytes >= 3 * MIB && cs.dirty_staged_bytes <= 6 * MIB);
    assert_true(cs.staged_bytes >= 3 * MIB && cs.staged_bytes <= 6 * MIB);
    /* others hold 40 MiB: 40 more do not fit now, and nothing is held by the refusal */
    assert_int_equal(drain_admit(e->o->dr, 40 * MIB), 0);
    uint64_t before = cs.dirty_staged_bytes;
    treq_init(&t2, e, SIGV4_PAYLOAD_UNSIGNED);
    content_length(&t2, 40ull * MIB);
    assert_int_equal(upload_prepare(&t2.rq, 1ull << 30), 0);
    assert_int_equal(upload_admit(&t2.rq), -S3E_SLOW_DOWN); /* retry later */
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.dirty_staged_bytes, before + 40 * MIB);
    upload_free(&t2.rq);
    treq_init(&t3, e, SIGV4_PAYLOAD_UNSIGNED);
    content_length(&t3, 65ull * MIB);
    assert_int_equal(upload_prepare(&t3.rq, 1ull << 30), 0);
    assert_int_equal(upload_admit(&t3.rq), -S3E_ENTITY_TOO_LARGE); /* never fits */
    upload_free(&t3.rq);
    drain_unadmit(e->o->dr, 40 * MIB);
    /* the reservation ends with the body */
    upload_free(&t1.rq);
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.dirty_staged_bytes, 0);
    assert_int_equal(cs.staged_bytes, 0);
    treq_init(&t2, e, SIGV4_PAYLOAD_UNSIGNED);
    content_length(&t2, 40ull * MIB);
    assert_int_equal(upload_prepare(&t2.rq, 1ull << 30), 0);
    assert_int_equal(upload_admit(&t2.rq), 0);
    upload_free(&t2.rq);
    /* a length not known up front reserves nothing before its bytes (test_upload_unknown_*) */
    treq_init(&t1, e, SIGV4_PAYLOAD_UNSIGNED);
    hdr(&t1, "Transfer-Encoding", "chunked");
    assert_int_equal(upload_prepare(&t1.rq, 1ull << 30), 0);
    assert_int_equal(upload_admit(&t1.rq), 0);
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.dirty_staged_bytes, 0);
    upload_free(&t1.rq);
    assert_int_equal(upload_admit(&t1.rq), -S3E_INTERNAL);
}

/* A chunked body of @len bytes fed a piece of 64 KiB at a time: the first error. */
static int unknown_feed(struct treq *t, struct env *e, size_t len)
{
    static const size_t piece[] = {64 * 1024};
    unsigned char *d = pattern(len, 3);
    treq_init(t, e, SIGV4_PAYLOAD_UNSIGNED);
    hdr(t, "Transfer-Encoding", "chunked");
    assert_int_equal(upload_begin(&t->rq, 1ull << 30), 0);
    assert_int_equal(upload_admit(&t->rq), 0);
    int rc = feed(&t->rq, d, len, piece, 1);
    free(d);
    return rc;
}

/* Write-back, a body of unknown length: the dirty limit and the room in the cache are reserved
 * as its bytes arrive; past the limit the write fails (EntityTooLarge when the body alone is
 * over it, SlowDown when others hold the rest) and lets go at once of its file and of every
 * reservation. */
static void test_upload_unknown_length_write_back(void **state)
{
    struct env *e = *state; /* dirty limit 64 MiB, cache 512 MiB */
    struct treq t;
    struct cache_stats cs;
    struct be_meta m;
    char path[4096];
    struct stat st;
    assert_int_equal(unknown_feed(&t, e, 64 * MIB + 1), -S3E_ENTITY_TOO_LARGE);
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.dirty_staged_bytes, 0);
    assert_int_equal(cs.staged_bytes, 0);
    assert_int_equal(cs.used_bytes, 0);
    assert_null(upload_path(&t.rq));
    assert_int_equal(upload_fd(&t.rq), -1);
    upload_free(&t.rq);
    /* others hold 60 MiB: 5 MiB do not fit */
    assert_int_equal(drain_admit(e->o->dr, 60 * MIB), 0);
    assert_int_equal(unknown_feed(&t, e, 5 * MIB), -S3E_SLOW_DOWN);
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.dirty_staged_bytes, 60 * MIB);
    assert_int_equal(cs.staged_bytes, 0);
    upload_free(&t.rq);
    /* 4 MiB do, exactly */
    assert_int_equal(unknown_feed(&t, e, 4 * MIB), 0);
    snprintf(path, sizeof(path), "%s", upload_path(&t.rq));
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.dirty_staged_bytes, 64 * MIB);
    assert_int_equal(cs.staged_bytes, 4 * MIB);
    assert_int_equal(cs.used_bytes, 4 * MIB);
    assert_int_equal(upload_finish(&t.rq, &m), 0);
    assert_int_equal(m.size, 4 * MIB);
    upload_free(&t.rq);
    assert_int_equal(stat(path, &st), -1);
    drain_unadmit(e->o->dr, 60 * MIB);
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.dirty_staged_bytes, 0);
    assert_int_equal(cs.staged_bytes, 0);
    assert_int_equal(cs.used_bytes, 0);
}

/* Write-through: a body of unknown length reserves room in the cache as it arrives, a step at
 * a time (not the dirty limit); one larger than the cache fails EntityTooLarge. */
static void test_upload_unknown_length_write_through(void **state)
{
    struct env *e = *state; /* cache 512 MiB */
    struct treq t;
    struct cache_stats cs;
    assert_int_equal(unknown_feed(&t, e, 3 * MIB + 5), 0);
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.dirty_staged_bytes, 0);
    assert_int_equal(cs.staged_bytes, 4 * MIB); /* whole steps */
    upload_free(&t.rq);
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.staged_bytes, 0);
    assert_int_equal(cs.used_bytes, 0);
    /* declared: all of it at once */
    treq_init(&t, e, SIGV4_PAYLOAD_UNSIGNED);
    content_length(&t, 513 * MIB);
    assert_int_equal(upload_prepare(&t.rq, 1ull << 40), 0);
    assert_int_equal(upload_admit(&t.rq), -S3E_ENTITY_TOO_LARGE);
    upload_free(&t.rq);
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.staged_bytes, 0);
}

static void test_upload_admit_write_through(void **state)
{
    struct env *e = *state;
    struct treq t;
    struct cache_stats cs;
    treq_init(&t, e, SIGV4_PAYLOAD_UNSIGNED);
    content_length(&t, 200ull * MIB); /* over the dirty limit: write-through does not care */
    assert_int_equal(upload_begin(&t.rq, 1ull << 30), 0);
    assert_int_equal(upload_admit(&t.rq), 0);
    static const size_t piece[] = {256 * 1024};
    unsigned char *d = pattern(8 * MIB, 6);
    assert_int_equal(feed(&t.rq, d, 8 * MIB, piece, 1), 0);
    free(d);
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.dirty_staged_bytes, 0);
    /* but its file takes room in the cache, as its bytes arrive */
    assert_true(cs.staged_bytes >= 8 * MIB && cs.staged_bytes <= 16 * MIB);
    assert_int_equal(cs.used_bytes, cs.staged_bytes);
    upload_free(&t.rq);
    cache_get_stats(e->c, &cs);
    assert_int_equal(cs.staged_bytes, 0);
}

/* One large write-back body of @len bytes fed in @pieces, into a staged file or (@at_off >= 0)
 * into a file of the test at that offset: the bytes land whole, and every direct write is
 * whole pages at a page offset. */
static void direct_case(struct env *e, size_t len, const size_t *pieces, size_t np,
                        int64_t at_off, int chunked)
{
    struct treq t;
    struct be_meta m;
    struct cksum_result want;
    unsigned char *d = pattern(len, (unsigned)len);
    digests(d, len, CKSUM_NONE, &want);
    treq_init(&t, e, SIGV4_PAYLOAD_UNSIGNED);
    if (chunked)
        hdr(&t, "Transfer-Encoding", "chunked");
    else
        content_length(&t, len);
    char path[300];
    int fd = -1;
    if (at_off >= 0) {
        snprintf(path, sizeof(path), "%s/target", e->dir);
        fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, at_off), 0);
        assert_int_equal(upload_prepare(&t.rq, 1ull << 30), 0);
        assert_int_equal(upload_target_fd(&t.rq, fd, (uint64_t)at_off), 0); /* takes fd */
    } else {
        assert_int_equal(upload_begin(&t.rq, 1ull << 30), 0);
    }
    assert_int_equal(feed(&t.rq, d, len, pieces, np), 0);
    assert_int_equal(upload_finish(&t.rq, &m), 0);
    assert_string_equal(m.etag, want.md5_hex);
    assert_file(upload_fd(&t.rq), at_off >= 0 ? (uint64_t)at_off : 0, d, len);
    if (at_off >= 0)
        assert_null(upload_path(&t.rq));
    upload_free(&t.rq);
    free(d);
    if (wr.bad_direct)
        fail_msg("%u direct writes were not whole pages at a page offset (body %zu at %lld)",
                 wr.bad_direct, len, (long long)at_off);
}

static void test_upload_direct_odd_sizes(void **state)
{
    struct env *e = *state; /* write-back */
    static const size_t one[] = {1};
    static const size_t whole[] = {SIZE_MAX};
    const struct {
        size_t len;
        const size_t *pieces;
        size_t np;
        int64_t off;
    } cases[] = {
        {4 * MIB, whole, 1, -1},
        {4 * MIB + 1, odd_pieces, ARRAY_SIZE(odd_pieces), -1},
        {4 * MIB + 4095, odd_pieces, ARRAY_SIZE(odd_pieces), -1},
        {5 * MIB - 1, whole, 1, -1},
        {6 * MIB + 12345, odd_pieces + 2, 3, -1},
        {4 * MIB + 3, odd_pieces, ARRAY_SIZE(odd_pieces), 3 * PAGE + 5}, /* unaligned start */
        {4 * MIB + 4096, odd_pieces, ARRAY_SIZE(odd_pieces), 8 * MIB},   /* a part's slot */
        {4 * MIB, odd_pieces, ARRAY_SIZE(odd_pieces), PAGE - 1},
        {4 * MIB + 100, one, 1, 1},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        memset(&wr, 0, sizeof(wr));
        direct_case(e, cases[i].len, cases[i].pieces, cases[i].np, cases[i].off, 0);
        /* most of the body went around the page cache */
        if (wr.direct_bytes < cases[i].len - 2 * PAGE)
            fail_msg("case %zu: %llu of %zu bytes written direct", i,
                     (unsigned long long)wr.direct_bytes, cases[i].len);
    }
    /* small bodies, and bodies of unknown length, stay in the page cache */
    memset(&wr, 0, sizeof(wr));
    direct_case(e, 4 * MIB - 1, odd_pieces, ARRAY_SIZE(odd_pieces), -1, 0);
    direct_case(e, 5 * MIB, odd_pieces, ARRAY_SIZE(odd_pieces), -1, 1);
    assert_int_equal(wr.direct, 0);
    assert_true(wr.writes > 0);
}

static void test_upload_direct_refused(void **state)
{
    struct env *e = *state; /* write-back */
    /* the file system refuses a direct write (EINVAL): that chunk and the rest go buffered */
    static const int at[] = {1, 2, 5};
    for (size_t i = 0; i < ARRAY_SIZE(at); i++) {
        memset(&wr, 0, sizeof(wr));
        wr.refuse_direct_at = at[i];
        direct_case(e, 7 * MIB + 333, odd_pieces, ARRAY_SIZE(odd_pieces), -1, 0);
        assert_int_equal(wr.refused, 1);
        assert_int_equal(wr.direct, (unsigned)at[i]); /* none after the refusal */
    }
}

static void test_upload_direct_not_write_through(void **state)
{
    struct env *e = *state;
    memset(&wr, 0, sizeof(wr));
    direct_case(e, 6 * MIB + 1, odd_pieces, ARRAY_SIZE(odd_pieces), -1, 0);
    assert_int_equal(wr.direct, 0); /* write-through reads the file again at once */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_upload_plain_body, setup_through, teardown),
        cmocka_unit_test_setup_teardown(test_upload_declared_lengths, setup_through, teardown),
        cmocka_unit_test_setup_teardown(test_upload_digests, setup_through, teardown),
        cmocka_unit_test_setup_teardown(test_upload_aws_chunked_signed, setup_through, teardown),
        cmocka_unit_test_setup_teardown(test_upload_aws_chunked_trailer, setup_through,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_upload_meta_from_headers, setup_through, teardown),
        cmocka_unit_test_setup_teardown(test_upload_admit, setup_back, teardown),
        cmocka_unit_test_setup_teardown(test_upload_unknown_length_write_back, setup_back,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_upload_unknown_length_write_through, setup_through,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_upload_admit_write_through, setup_through,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_upload_direct_odd_sizes, setup_back, teardown),
        cmocka_unit_test_setup_teardown(test_upload_direct_refused, setup_back, teardown),
        cmocka_unit_test_setup_teardown(test_upload_direct_not_write_through, setup_through,
                                        teardown),
    };
    return cmocka_run_group_tests_name("upload", tests, NULL, NULL);
}
