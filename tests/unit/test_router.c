/*
 * test_router.c: http/router.c as tables: (method, path, query, Host, one header) -> the S3
 * operation, bucket and key, or the error; every sub-resource the router knows (acl, versions,
 * attributes, uploads, tagging, location, versioning, delete, list-type=2, uploadId,
 * partNumber, x-id) and those it refuses as NotImplemented; virtual-hosted buckets (ports,
 * case, IPv6 literals, a Host that only looks like the domain); bad escapes; the /_/ admin
 * prefix; bucket-name and key rules; url_decode() and op_name(). Links without req.c,
 * server.c and libmicrohttpd (Makefile: NOMHD_TESTS).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/req.h"
#include "http/router.h"
#include "lib/s3c.h"
#include "lib/s3err.h"

#define OK 0

/* One request as req.c would hand it over: the query already split and decoded. */
struct rt {
    struct req rq;
    struct sigv4_kv hdr[2];
};

/* "a=b&c&d=%2F" -> rq->query, decoded with url_decode() as req.c does. */
static void rt_query(struct req *rq, const char *qs)
{
    char buf[512], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", qs ? qs : "");
    for (char *t = strtok_r(buf, "&", &save); t; t = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(t, '=');
        rq->query = realloc(rq->query, (rq->n_query + 1) * sizeof(*rq->query));
        assert_non_null(rq->query);
        struct sigv4_kv *q = &rq->query[rq->n_query++];
        q->name = url_decode(t, eq ? (size_t)(eq - t) : strlen(t));
        q->value = eq ? url_decode(eq + 1, strlen(eq + 1)) : NULL;
        assert_non_null(q->name);
    }
}

static void rt_free(struct rt *r)
{
    struct req *rq = &r->rq;
    for (size_t i = 0; i < rq->n_query; i++) {
        free((char *)rq->query[i].name);
        free((char *)rq->query[i].value);
    }
    free(rq->query);
    free(rq->bucket);
    free(rq->key);
    free(rq->path);
    free(rq->raw_path);
    memset(r, 0, sizeof(*r));
}

/* Routes one request; @hname/@hval: one request header (NULL: none). */
static int rt_route(struct rt *r, const char *method, const char *url, const char *qs,
                    const char *host, const char *dom, const char *hname, const char *hval)
{
    memset(r, 0, sizeof(*r));
    r->rq.magic = REQ_MAGIC;
    r->rq.method = method;
    if (hname) {
        r->hdr[0].name = hname;
        r->hdr[0].value = hval;
        r->rq.headers = r->hdr;
        r->rq.n_headers = 1;
    }
    rt_query(&r->rq, qs);
    return router_route(&r->rq, url, host, dom);
}

struct rcase {
    const char *method, *url, *query;
    const char *hname, *hval;
    int rc; /* 0 or -S3E_* */
    enum op op;
    const char *bucket, *key; /* NULL: none */
};

static void run_cases(const struct rcase *cases, size_t n, const char *host, const char *dom,
                      int want_vhost)
{
    for (size_t i = 0; i < n; i++) {
        const struct rcase *c = &cases[i];
        struct rt r;
        int rc = rt_route(&r, c->method, c->url, c->query, host, dom, c->hname, c->hval);
        const char *b = r.rq.bucket, *k = r.rq.key;
        int bad = rc != c->rc;
        if (!bad && rc == 0)
            bad = r.rq.op != c->op || (!!b != !!c->bucket) || (b && strcmp(b, c->bucket)) ||
                  (!!k != !!c->key) || (k && strcmp(k, c->key)) ||
                  r.rq.vhost != (want_vhost && c->bucket);
        if (bad)
            fail_msg("case %zu: %s %s?%s (Host %s): got rc %d (%s) op %s bucket %s key %s "
                     "vhost %d; want rc %d (%s) op %s bucket %s key %s",
                     i, c->method, c->url, c->query ? c->query : "", host ? host : "-", rc,
                     rc ? s3c_strerror(rc) : "ok", op_name(r.rq.op), b ? b : "-", k ? k : "-",
                     r.rq.vhost, c->rc, c->rc ? s3c_strerror(c->rc) : "ok", op_name(c->op),
                     c->bucket ? c->bucket : "-", c->key ? c->key : "-");
        rt_free(&r);
    }
}

static void test_router_service_level(void **state)
{
    static const struct rcase cases[] = {
        {"GET", "/", NULL, NULL, NULL, OK, OP_LIST_BUCKETS, NULL, NULL},
        {"OPTIONS", "/", NULL, NULL, NULL, OK, OP_OPTIONS, NULL, NULL},
        {"PUT", "/", NULL, NULL, NULL, -S3E_METHOD_NOT_ALLOWED, 0, NULL, NULL},
        {"DELETE", "/", NULL, NULL, NULL, -S3E_METHOD_NOT_ALLOWED, 0, NULL, NULL},
        {"HEAD", "/", NULL, NULL, NULL, -S3E_METHOD_NOT_ALLOWED, 0, NULL, NULL},
        {"POST", "/", NULL, NULL, NULL, -S3E_METHOD_NOT_ALLOWED, 0, NULL, NULL},
    };
    (void)state;
    run_cases(cases, ARRAY_SIZE(cases), NULL, NULL, 0);
}

static void test_router_bucket_subresources(void **state)
{
    static const struct rcase cases[] = {
        {"GET", "/bkt", NULL, NULL, NULL, OK, OP_LIST_OBJECTS, "bkt", NULL},
        {"GET", "/bkt/", NULL, NULL, NULL, OK, OP_LIST_OBJECTS, "bkt", NULL},
        {"GET", "/bkt", "list-type=2", NULL, NULL, OK, OP_LIST_OBJECTS_V2, "bkt", NULL},
        {"GET", "/bkt", "list-type=1", NULL, NULL, OK, OP_LIST_OBJECTS, "bkt", NULL},
        {"GET", "/bkt", "prefix=a&delimiter=%2F", NULL, NULL, OK, OP_LIST_OBJECTS, "bkt", NULL},
        {"GET", "/bkt", "location", NULL, NULL, OK, OP_BUCKET_LOCATION, "bkt", NULL},
        {"GET", "/bkt", "versioning", NULL, NULL, OK, OP_BUCKET_VERSIONING, "bkt", NULL},
        {"GET", "/bkt", "acl", NULL, NULL, OK, OP_BUCKET_ACL, "bkt", NULL},
        {"GET", "/bkt", "acl=", NULL, NULL, OK, OP_BUCKET_ACL, "bkt", NULL},
        {"GET", "/bkt", "uploads", NULL, NULL, OK, OP_LIST_UPLOADS, "bkt", NULL},
        {"GET", "/bkt", "uploads&prefix=x", NULL, NULL, OK, OP_LIST_UPLOADS, "bkt", NULL},
        {"GET", "/bkt", "versions", NULL, NULL, OK, OP_LIST_VERSIONS, "bkt", NULL},
        {"GET", "/bkt", "versions&list-type=2", NULL, NULL, OK, OP_LIST_VERSIONS, "bkt", NULL},
        {"GET", "/bkt", "policy", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"GET", "/bkt", "lifecycle", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"GET", "/bkt", "cors", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"GET", "/bkt", "tagging", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"GET", "/bkt", "object-lock", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"GET", "/bkt", "publicAccessBlock", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"GET", "/bkt", "encryption&list-type=2", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL,
         NULL},
        {"HEAD", "/bkt", NULL, NULL, NULL, OK, OP_BUCKET_HEAD, "bkt", NULL},
        {"PUT", "/bkt", NULL, NULL, NULL, OK, OP_BUCKET_CREATE, "bkt", NULL},
        {"PUT", "/bkt", "x-id=CreateBucket", NULL, NULL, OK, OP_BUCKET_CREATE, "bkt", NULL},
        {"PUT", "/bkt", "acl", NULL, NULL, OK, OP_BUCKET_PUT_ACL, "bkt", NULL},
        {"PUT", "/bkt", "versioning", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"PUT", "/bkt", "policy", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"DELETE", "/bkt", NULL, NULL, NULL, OK, OP_BUCKET_DELETE, "bkt", NULL},
        {"DELETE", "/bkt", "x-id=DeleteBucket", NULL, NULL, OK, OP_BUCKET_DELETE, "bkt", NULL},
        {"DELETE", "/bkt", "cors", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"POST", "/bkt", "delete", NULL, NULL, OK, OP_DELETE_OBJECTS, "bkt", NULL},
        {"POST", "/bkt", "delete=", NULL, NULL, OK, OP_DELETE_OBJECTS, "bkt", NULL},
        {"POST", "/bkt", NULL, NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"OPTIONS", "/bkt", NULL, NULL, NULL, OK, OP_OPTIONS, "bkt", NULL},
        {"PATCH", "/bkt", NULL, NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
    };
    (void)state;
    run_cases(cases, ARRAY_SIZE(cases), NULL, NULL, 0);
}

static void test_router_object_subresources(void **state)
{
    static const struct rcase cases[] = {
        {"GET", "/bkt/k", NULL, NULL, NULL, OK, OP_GET, "bkt", "k"},
        {"GET", "/bkt/k", "versionId=null", NULL, NULL, OK, OP_GET, "bkt", "k"},
        {"GET", "/bkt/k", "partNumber=2", NULL, NULL, OK, OP_GET, "bkt", "k"},
        {"GET", "/bkt/k", "response-content-type=a%2Fb", NULL, NULL, OK, OP_GET, "bkt", "k"},
        {"GET", "/bkt/k", "uploadId=abc", NULL, NULL, OK, OP_MP_LIST_PARTS, "bkt", "k"},
        {"GET", "/bkt/k", "uploadId=abc&acl", NULL, NULL, OK, OP_MP_LIST_PARTS, "bkt", "k"},
        {"GET", "/bkt/k", "acl", NULL, NULL, OK, OP_OBJECT_ACL, "bkt", "k"},
        {"GET", "/bkt/k", "tagging", NULL, NULL, OK, OP_OBJECT_TAGGING, "bkt", "k"},
        {"GET", "/bkt/k", "attributes", NULL, NULL, OK, OP_OBJECT_ATTRIBUTES, "bkt", "k"},
        {"GET", "/bkt/k", "retention", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"GET", "/bkt/k", "legal-hold", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"GET", "/bkt/k", "torrent", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"HEAD", "/bkt/k", NULL, NULL, NULL, OK, OP_HEAD, "bkt", "k"},
        {"HEAD", "/bkt/k", "partNumber=1", NULL, NULL, OK, OP_HEAD, "bkt", "k"},
        {"PUT", "/bkt/k", NULL, NULL, NULL, OK, OP_PUT, "bkt", "k"},
        {"PUT", "/bkt/k", "x-id=PutObject", NULL, NULL, OK, OP_PUT, "bkt", "k"},
        {"PUT", "/bkt/k", NULL, "x-amz-copy-source", "/src/o", OK, OP_COPY, "bkt", "k"},
        {"PUT", "/bkt/k", NULL, "X-Amz-Copy-Source", "src/o", OK, OP_COPY, "bkt", "k"},
        {"PUT", "/bkt/k", "partNumber=1&uploadId=u", NULL, NULL, OK, OP_MP_PART, "bkt", "k"},
        {"PUT", "/bkt/k", "uploadId=u", NULL, NULL, OK, OP_MP_PART, "bkt", "k"},
        {"PUT", "/bkt/k", "partNumber=1", NULL, NULL, OK, OP_MP_PART, "bkt", "k"},
        {"PUT", "/bkt/k", "partNumber=3&uploadId=u", "x-amz-copy-source", "/s/o", OK,
         OP_MP_PART_COPY, "bkt", "k"},
        {"PUT", "/bkt/k", "acl", NULL, NULL, OK, OP_OBJECT_PUT_ACL, "bkt", "k"},
        {"PUT", "/bkt/k", "acl", "x-amz-copy-source", "/s/o", OK, OP_OBJECT_PUT_ACL, "bkt", "k"},
        {"PUT", "/bkt/k", "tagging", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"PUT", "/bkt/k", "retention", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"PUT", "/bkt/k", "legal-hold", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"POST", "/bkt/k", "uploads", NULL, NULL, OK, OP_MP_CREATE, "bkt", "k"},
        {"POST", "/bkt/k", "uploads=", NULL, NULL, OK, OP_MP_CREATE, "bkt", "k"},
        {"POST", "/bkt/k", "uploadId=u", NULL, NULL, OK, OP_MP_COMPLETE, "bkt", "k"},
        {"POST", "/bkt/k", NULL, NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
        {"POST", "/bkt/k", "select&select-type=2", NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL,
         NULL},
        {"DELETE", "/bkt/k", NULL, NULL, NULL, OK, OP_DELETE, "bkt", "k"},
        {"DELETE", "/bkt/k", "uploadId=u", NULL, NULL, OK, OP_MP_ABORT, "bkt", "k"},
        {"OPTIONS", "/bkt/k", NULL, NULL, NULL, OK, OP_OPTIONS, "bkt", "k"},
        {"PATCH", "/bkt/k", NULL, NULL, NULL, -S3E_NOT_IMPLEMENTED, 0, NULL, NULL},
    };
    (void)state;
    run_cases(cases, ARRAY_SIZE(cases), NULL, NULL, 0);
}

static void test_router_keys_and_escapes(void **state)
{
    static char long_key[1200], max_key[1100];
    snprintf(long_key, sizeof(long_key), "/bkt/%01025d", 0);  /* a key of 1025 bytes */
    snprintf(max_key, sizeof(max_key), "/bkt/%0255d/%0255d/%0255d/%0255d/", 0, 0, 0,
             0); /* a key of 1024 bytes: 4 components of 255 bytes, 4 slashes */
    const struct rcase cases[] = {
        {"GET", "/bkt/a%20b", NULL, NULL, NULL, OK, OP_GET, "bkt", "a b"},
        {"GET", "/bkt/a+b", NULL, NULL, NULL, OK, OP_GET, "bkt", "a+b"}, /* '+' is no space */
        {"GET", "/bkt/dir/sub/file.bin", NULL, NULL, NULL, OK, OP_GET, "bkt", "dir/sub/file.bin"},
        {"GET", "/bkt/dir/", NULL, NULL, NULL, OK, OP_GET, "bkt", "dir/"},
        {"GET", "/bkt/a%2Fb", NULL, NULL, NULL, OK, OP_GET, "bkt", "a/b"},
        {"GET", "/bkt/%E2%82%AC", NULL, NULL, NULL, OK, OP_GET, "bkt", "\xe2\x82\xac"},
        {"GET", "/b%6Bt/k", NULL, NULL, NULL, OK, OP_GET, "bkt", "k"}, /* bucket escaped too */
        {"GET", "/bkt/%zz", NULL, NULL, NULL, -S3E_INVALID_URI, 0, NULL, NULL},
        {"GET", "/bkt/a%2", NULL, NULL, NULL, -S3E_INVALID_URI, 0, NULL, NULL},
        {"GET", "/bkt/a%", NULL, NULL, NULL, -S3E_INVALID_URI, 0, NULL, NULL},
        {"GET", "/bkt/a%00b", NULL, NULL, NULL, -S3E_INVALID_URI, 0, NULL, NULL},
        {"GET", "bkt/k", NULL, NULL, NULL, -S3E_INVALID_URI, 0, NULL, NULL},
        {"GET", "", NULL, NULL, NULL, -S3E_INVALID_URI, 0, NULL, NULL},
        {"GET", "//k", NULL, NULL, NULL, -S3E_INVALID_URI, 0, NULL, NULL},
        {"GET", "/bkt//k", NULL, NULL, NULL, -S3E_INVALID_KEY, 0, NULL, NULL},
        {"GET", "/bkt/a//b", NULL, NULL, NULL, -S3E_INVALID_KEY, 0, NULL, NULL},
        {"GET", "/bkt/a/../b", NULL, NULL, NULL, -S3E_INVALID_KEY, 0, NULL, NULL},
        {"GET", "/bkt/a/%2E%2E/b", NULL, NULL, NULL, -S3E_INVALID_KEY, 0, NULL, NULL},
        {"GET", "/bkt/.", NULL, NULL, NULL, -S3E_INVALID_KEY, 0, NULL, NULL},
        {"PUT", "/bkt/.s3cached-x", NULL, NULL, NULL, -S3E_INVALID_KEY, 0, NULL, NULL},
        {"PUT", long_key, NULL, NULL, NULL, -S3E_KEY_TOO_LONG, 0, NULL, NULL},
        {"PUT", max_key, NULL, NULL, NULL, OK, OP_PUT, "bkt", max_key + 5},
        /* bucket names: reads of a name that cannot exist say NoSuchBucket, as S3 does */
        {"GET", "/AB/k", NULL, NULL, NULL, -S3E_NO_SUCH_BUCKET, 0, NULL, NULL},
        {"GET", "/ab", NULL, NULL, NULL, -S3E_NO_SUCH_BUCKET, 0, NULL, NULL},
        {"PUT", "/ab/k", NULL, NULL, NULL, -S3E_NO_SUCH_BUCKET, 0, NULL, NULL},
        {"PUT", "/ab", NULL, NULL, NULL, -S3E_INVALID_BUCKET_NAME, 0, NULL, NULL},
        {"PUT", "/Bucket", NULL, NULL, NULL, -S3E_INVALID_BUCKET_NAME, 0, NULL, NULL},
        {"PUT", "/192.168.1.1", NULL, NULL, NULL, -S3E_INVALID_BUCKET_NAME, 0, NULL, NULL},
        {"PUT", "/bkt-1.a", NULL, NULL, NULL, OK, OP_BUCKET_CREATE, "bkt-1.a", NULL},
        {"GET", "/_x/k", NULL, NULL, NULL, -S3E_NO_SUCH_BUCKET, 0, NULL, NULL},
    };
    (void)state;
    run_cases(cases, ARRAY_SIZE(cases), NULL, NULL, 0);

    /* raw_path is what was sent (SigV2 signs it), path the decoded form (SigV4) */
    struct rt r;
    assert_int_equal(rt_route(&r, "GET", "/bkt/a%20b", NULL, NULL, NULL, NULL, NULL), 0);
    assert_string_equal(r.rq.raw_path, "/bkt/a%20b");
    assert_string_equal(r.rq.path, "/bkt/a b");
    rt_free(&r);
    /* a path that cannot be decoded has no path: req.c answers at once, before authenticating */
    assert_int_equal(rt_route(&r, "GET", "/bkt/%g0", NULL, NULL, NULL, NULL, NULL),
                     -S3E_INVALID_URI);
    assert_null(r.rq.path);
    assert_string_equal(r.rq.raw_path, "/bkt/%g0");
    rt_free(&r);
}

static void test_router_admin_prefix(void **state)
{
    static const char *const urls[] = {"/_/health", "/_/stats", "/_/metrics", "/_/warm/abc",
                                       "/_", "/_/", "/_/cache/bkt/k%20x", "/_/nonsense"};
    static const char *const methods[] = {"GET", "HEAD", "POST", "DELETE", "PUT", "OPTIONS"};
    static const char *const hosts[] = {NULL, "bkt.s3.test"};
    (void)state;
    for (size_t h = 0; h < ARRAY_SIZE(hosts); h++)
        for (size_t i = 0; i < ARRAY_SIZE(urls); i++)
            for (size_t m = 0; m < ARRAY_SIZE(methods); m++) {
                struct rt r;
                int rc = rt_route(&r, methods[m], urls[i], "job=1", hosts[h], "s3.test", NULL,
                                  NULL);
                if (rc || r.rq.op != OP_ADMIN || r.rq.bucket || r.rq.key)
                    fail_msg("%s %s (Host %s): rc %d op %s bucket %s", methods[m], urls[i],
                             hosts[h] ? hosts[h] : "-", rc, op_name(r.rq.op),
                             r.rq.bucket ? r.rq.bucket : "-");
                rt_free(&r);
            }
    /* "/_x" and "/__" are not the prefix: bucket names (invalid ones) */
    struct rt r;
    assert_int_equal(rt_route(&r, "GET", "/__/k", NULL, NULL, NULL, NULL, NULL),
                     -S3E_NO_SUCH_BUCKET);
    rt_free(&r);
    /* an escaped "_" is the admin prefix once decoded, as the path is matched decoded */
    assert_int_equal(rt_route(&r, "GET", "/%5F/health", NULL, NULL, NULL, NULL, NULL), 0);
    assert_int_equal(r.rq.op, OP_ADMIN);
    rt_free(&r);
}

static void test_router_virtual_host(void **state)
{
    static const struct rcase vh[] = {
        {"GET", "/", NULL, NULL, NULL, OK, OP_LIST_OBJECTS, "bkt", NULL},
        {"GET", "/", "list-type=2", NULL, NULL, OK, OP_LIST_OBJECTS_V2, "bkt", NULL},
        {"GET", "/", "versions", NULL, NULL, OK, OP_LIST_VERSIONS, "bkt", NULL},
        {"PUT", "/", NULL, NULL, NULL, OK, OP_BUCKET_CREATE, "bkt", NULL},
        {"GET", "/k", NULL, NULL, NULL, OK, OP_GET, "bkt", "k"},
        {"GET", "/dir/k", NULL, NULL, NULL, OK, OP_GET, "bkt", "dir/k"}, /* no path bucket */
        {"GET", "/k", "attributes", NULL, NULL, OK, OP_OBJECT_ATTRIBUTES, "bkt", "k"},
        {"PUT", "/k", NULL, "x-amz-copy-source", "/o/x", OK, OP_COPY, "bkt", "k"},
        {"DELETE", "/k", "uploadId=u", NULL, NULL, OK, OP_MP_ABORT, "bkt", "k"},
        {"GET", "//k", NULL, NULL, NULL, -S3E_INVALID_KEY, 0, NULL, NULL},
    };
    (void)state;
    run_cases(vh, ARRAY_SIZE(vh), "bkt.s3.test", "s3.test", 1);
    run_cases(vh, ARRAY_SIZE(vh), "bkt.s3.test:9000", "s3.test", 1);
    run_cases(vh, ARRAY_SIZE(vh), "BKT.S3.Test:9000", "s3.test", 1); /* lower-cased */
    run_cases(vh, ARRAY_SIZE(vh), "bkt.s3.test", "S3.TEST", 1);

    /* hosts that are not BUCKET.DOMAIN: path style */
    static const struct { const char *host, *dom; } path_style[] = {
        {"s3.test", "s3.test"},         {"s3.test:9000", "s3.test"}, {"xs3.test", "s3.test"},
        {".s3.test", "s3.test"},        {"bkt.s3.test.evil", "s3.test"},
        {"[::1]:9000", "s3.test"},      {"bkt.s3.test", ""},         {"bkt.s3.test", NULL},
        {NULL, "s3.test"},              {"127.0.0.1:9000", "s3.test"},
    };
    static const struct rcase ps[] = {
        {"GET", "/", NULL, NULL, NULL, OK, OP_LIST_BUCKETS, NULL, NULL},
        {"GET", "/bkt/k", NULL, NULL, NULL, OK, OP_GET, "bkt", "k"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(path_style); i++)
        run_cases(ps, ARRAY_SIZE(ps), path_style[i].host, path_style[i].dom, 0);

    /* a dotted bucket; an invalid one named by the Host is judged like a path's */
    struct rt r;
    assert_int_equal(rt_route(&r, "GET", "/k", NULL, "a.b.s3.test", "s3.test", NULL, NULL), 0);
    assert_string_equal(r.rq.bucket, "a.b");
    assert_string_equal(r.rq.key, "k");
    assert_string_equal(r.rq.path, "/k"); /* signed as sent: without the bucket */
    rt_free(&r);
    assert_int_equal(rt_route(&r, "GET", "/k", NULL, "x_y.s3.test", "s3.test", NULL, NULL),
                     -S3E_NO_SUCH_BUCKET);
    rt_free(&r);
    assert_int_equal(rt_route(&r, "PUT", "/", NULL, "x_y.s3.test", "s3.test", NULL, NULL),
                     -S3E_INVALID_BUCKET_NAME);
    rt_free(&r);
}

static void test_router_url_decode(void **state)
{
    static const struct { const char *in, *want; } cases[] = {
        {"", ""},          {"abc", "abc"},  {"a%20b", "a b"},   {"%41%42", "AB"},
        {"%2f%2F", "//"},  {"a+b", "a+b"},  {"%7e~", "~~"},     {"%e2%82%ac", "\xe2\x82\xac"},
        {"%", NULL},       {"%4", NULL},    {"a%4", NULL},      {"%G1", NULL},
        {"%1G", NULL},     {"%00", NULL},   {"a%00", NULL},     {"%%41", NULL},
        {"%-1", NULL},     {"% 1", NULL},
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        char *got = url_decode(cases[i].in, strlen(cases[i].in));
        if (!cases[i].want != !got || (got && strcmp(got, cases[i].want)))
            fail_msg("url_decode(\"%s\"): got %s%s%s, want %s", cases[i].in, got ? "\"" : "",
                     got ? got : "NULL", got ? "\"" : "", cases[i].want ? cases[i].want : "NULL");
        free(got);
    }
    /* only @len bytes are read */
    char *got = url_decode("ab%2", 2);
    assert_string_equal(got, "ab");
    free(got);
}

static void test_router_op_names(void **state)
{
    (void)state;
    assert_string_equal(op_name(OP_NONE), "-");
    assert_string_equal(op_name(OP__N), "-");
    assert_string_equal(op_name((enum op)-1), "-");
    assert_string_equal(op_name(OP_GET), "GetObject");
    assert_string_equal(op_name(OP_LIST_VERSIONS), "ListObjectVersions");
    assert_string_equal(op_name(OP_OBJECT_ATTRIBUTES), "GetObjectAttributes");
    assert_string_equal(op_name(OP_BUCKET_PUT_ACL), "PutBucketAcl");
    assert_string_equal(op_name(OP_MP_PART_COPY), "UploadPartCopy");
    /* every operation has its own name (the access log and the stats show it) */
    for (int a = OP_NONE + 1; a < OP__N; a++) {
        assert_string_not_equal(op_name((enum op)a), "-");
        for (int b = a + 1; b < OP__N; b++)
            if (!strcmp(op_name((enum op)a), op_name((enum op)b)))
                fail_msg("ops %d and %d are both named %s", a, b, op_name((enum op)a));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_router_service_level),
        cmocka_unit_test(test_router_bucket_subresources),
        cmocka_unit_test(test_router_object_subresources),
        cmocka_unit_test(test_router_keys_and_escapes),
        cmocka_unit_test(test_router_admin_prefix),
        cmocka_unit_test(test_router_virtual_host),
        cmocka_unit_test(test_router_url_decode),
        cmocka_unit_test(test_router_op_names),
    };
    return cmocka_run_group_tests_name("router", tests, NULL, NULL);
}
