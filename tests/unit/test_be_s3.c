/*
 * test_be_s3.c: backends/be_s3.c against an in-process fake S3 upstream (a
 * libmicrohttpd daemon on 127.0.0.1, thread per connection). The fake records
 * every request (method, decoded path and query, headers, body hash) and
 * answers from a queue of canned responses or a routing function.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <setjmp.h>

#include <cmocka.h>
#include <microhttpd.h>

#include "backends/backend.h"
#include "lib/conf.h"
#include "lib/s3c.h"
#include "lib/s3err.h"
#include "sig/sigv4.h"

#define AK "AKIDEXAMPLE"
#define SK "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define FAKE_MAX_REQS 256
#define FAKE_BODY_KEEP (1u << 20)

struct fake_req {
    char method[16];
    char path[2048];
    struct sigv4_kv query[24];
    size_t n_query;
    struct sigv4_kv hdrs[64];
    size_t n_hdrs;
    uint64_t body_len;
    uint64_t body_fnv;
    char *body; /* first FAKE_BODY_KEEP bytes, NUL-terminated */
    int sig_rc; /* sigv4_verify() of the request; 1 when unsigned */
    int client_port;
};

struct fake_resp {
    int status;
    const char *hdrs[8]; /* "Name: value" */
    const char *body;
    size_t body_len;
    uint64_t head_size;  /* HEAD: the Content-Length to announce */
    uint64_t cut_after;  /* >0: announce body_len but close after this many bytes */
    int stall_ms;        /* sleep before answering */
};

typedef void fake_route_f(const struct fake_req *rq, struct fake_resp *out);

static struct fake {
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    struct fake_req reqs[FAKE_MAX_REQS];
    size_t n_reqs;
    struct fake_resp queue[16];
    size_t q_len, q_pos;
    struct fake_resp sticky; /* when the queue is empty */
    fake_route_f *route;
    int body_stall_ms; /* >0: the next request body stops being read this long at its start */
} F;

struct fake_conn {
    struct fake_req rq;
    size_t kept;
};

static uint64_t fnv_add(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define FNV_INIT 0xcbf29ce484222325ull

static const char *fake_secret(void *cls, const char *ak)
{
    (void)cls;
    return strcmp(ak, AK) ? NULL : SK;
}

static enum MHD_Result fake_hdr_it(void *cls, enum MHD_ValueKind kind, const char *k,
                                   const char *v)
{
    struct fake_req *rq = cls;
    (void)kind;
    if (rq->n_hdrs < ARRAY_SIZE(rq->hdrs)) {
        rq->hdrs[rq->n_hdrs].name = strdup(k);
        rq->hdrs[rq->n_hdrs].value = strdup(v ? v : "");
        rq->n_hdrs++;
    }
    return MHD_YES;
}

static enum MHD_Result fake_query_it(void *cls, enum MHD_ValueKind kind, const char *k,
                                     const char *v)
{
    struct fake_req *rq = cls;
    (void)kind;
    if (rq->n_query < ARRAY_SIZE(rq->query)) {
        rq->query[rq->n_query].name = strdup(k);
        rq->query[rq->n_query].value = v ? strdup(v) : NULL;
        rq->n_query++;
    }
    return MHD_YES;
}

static const char *req_hdr(const struct fake_req *rq, const char *name)
{
    for (size_t i = 0; i < rq->n_hdrs; i++)
        if (!strcasecmp(rq->hdrs[i].name, name))
            return rq->hdrs[i].value;
    return NULL;
}

static const char *req_query(const struct fake_req *rq, const char *name, int *present)
{
    for (size_t i = 0; i < rq->n_query; i++)
        if (!strcmp(rq->query[i].name, name)) {
            if (present)
                *present = 1;
            return rq->query[i].value;
        }
    if (present)
        *present = 0;
    return NULL;
}

static void fake_req_free(struct fake_req *rq)
{
    for (size_t i = 0; i < rq->n_hdrs; i++) {
        free((char *)rq->hdrs[i].name);
        free((char *)rq->hdrs[i].value);
    }
    for (size_t i = 0; i < rq->n_query; i++) {
        free((char *)rq->query[i].name);
        free((char *)rq->query[i].value);
    }
    free(rq->body);
    memset(rq, 0, sizeof(*rq));
}

struct cut_body {
    const char *p;
    size_t cut;
};

static ssize_t cut_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct cut_body *cb = cls;
    if (pos >= cb->cut)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t n = S3C_MIN(max, cb->cut - (size_t)pos);
    memcpy(buf, cb->p + pos, n);
    return (ssize_t)n;
}

static ssize_t never_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls;
    (void)pos;
    (void)buf;
    (void)max;
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

static enum MHD_Result fake_access(void *cls, struct MHD_Connection *conn, const char *url,
                                   const char *method, const char *version,
                                   const char *upload_data, size_t *upload_data_size,
                                   void **con_cls)
{
    struct fake_conn *fc = *con_cls;
    (void)cls;
    (void)version;
    if (!fc) {
        fc = calloc(1, sizeof(*fc));
        snprintf(fc->rq.method, sizeof(fc->rq.method), "%s", method);
        snprintf(fc->rq.path, sizeof(fc->rq.path), "%s", url);
        MHD_get_connection_values(conn, MHD_HEADER_KIND, fake_hdr_it, &fc->rq);
        MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, fake_query_it, &fc->rq);
        fc->rq.body = calloc(1, FAKE_BODY_KEEP + 1);
        fc->rq.body_fnv = FNV_INIT;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr->sa_family == AF_INET)
            fc->rq.client_port = ntohs(((const struct sockaddr_in *)ci->client_addr)->sin_port);
        *con_cls = fc;
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        pthread_mutex_lock(&F.mu);
        int stall_ms = F.body_stall_ms;
        F.body_stall_ms = 0;
        pthread_mutex_unlock(&F.mu);
        if (stall_ms)
            usleep((useconds_t)stall_ms * 1000);
        fc->rq.body_fnv = fnv_add(fc->rq.body_fnv, upload_data, n);
        if (fc->kept < FAKE_BODY_KEEP) {
            size_t k = S3C_MIN(n, FAKE_BODY_KEEP - fc->kept);
            memcpy(fc->rq.body + fc->kept, upload_data, k);
            fc->kept += k;
        }
        fc->rq.body_len += n;
        *upload_data_size = 0;
        return MHD_YES;
    }
    /* Verify the signature the way a real S3 would. */
    struct fake_req *rq = &fc->rq;
    rq->sig_rc = 1;
    if (req_hdr(rq, "Authorization")) {
        struct sigv4_input in = {.method = rq->method, .path = rq->path, .query = rq->query,
                                 .n_query = rq->n_query, .headers = rq->hdrs,
                                 .n_headers = rq->n_hdrs};
        struct sigv4_result res;
        struct errmsg em = {""};
        rq->sig_rc = sigv4_verify(&in, time(NULL), fake_secret, NULL, &res, &em);
        if (rq->sig_rc)
            fprintf(stderr, "fake: sigv4_verify %s %s: %d %s\n", rq->method, rq->path,
                    rq->sig_rc, em.buf);
        const char *sha = req_hdr(rq, "x-amz-content-sha256");
        if (!rq->sig_rc && sha && strcmp(sha, "UNSIGNED-PAYLOAD")) {
            char hex[65];
            sigv4_sha256_hex(rq->body, rq->body_len, hex);
            if (strcmp(hex, sha))
                rq->sig_rc = -S3E_SHA256_MISMATCH;
        }
    }
    struct fake_resp r = {0};
    pthread_mutex_lock(&F.mu);
    if (F.route)
        F.route(rq, &r);
    else if (F.q_pos < F.q_len)
        r = F.queue[F.q_pos++];
    else
        r = F.sticky;
    if (F.n_reqs < FAKE_MAX_REQS) {
        F.reqs[F.n_reqs++] = *rq;
        memset(rq, 0, sizeof(*rq)); /* moved */
    }
    pthread_mutex_unlock(&F.mu);
    if (r.stall_ms)
        usleep((useconds_t)r.stall_ms * 1000);
    if (!r.status)
        r.status = 200;
    struct MHD_Response *resp;
    static struct cut_body cbs[64];
    static unsigned cb_i;
    if (!strcmp(method, "HEAD") && r.head_size) {
        resp = MHD_create_response_from_callback(r.head_size, 4096, never_reader, NULL, NULL);
    } else if (r.cut_after) {
        struct cut_body *cb = &cbs[__atomic_fetch_add(&cb_i, 1, __ATOMIC_RELAXED) % 64];
        cb->p = r.body;
        cb->cut = (size_t)r.cut_after;
        resp = MHD_create_response_from_callback(r.body_len, 4096, cut_reader, cb, NULL);
    } else {
        resp = MHD_create_response_from_buffer(r.body_len, (void *)(r.body ? r.body : ""),
                                               MHD_RESPMEM_MUST_COPY);
    }
    for (size_t i = 0; i < ARRAY_SIZE(r.hdrs) && r.hdrs[i]; i++) {
        char name[128];
        const char *colon = strchr(r.hdrs[i], ':');
        snprintf(name, sizeof(name), "%.*s", (int)(colon - r.hdrs[i]), r.hdrs[i]);
        MHD_add_response_header(resp, name, colon + 2);
    }
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r.status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void fake_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    struct fake_conn *fc = *con_cls;
    if (fc) {
        fake_req_free(&fc->rq);
        free(fc);
    }
    *con_cls = NULL;
}

static int fake_start(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    memset(F.reqs, 0, sizeof(F.reqs));
    F.n_reqs = F.q_len = F.q_pos = 0;
    memset(&F.sticky, 0, sizeof(F.sticky));
    F.route = NULL;
    pthread_mutex_init(&F.mu, NULL);
    F.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
                           NULL, NULL, fake_access, NULL, MHD_OPTION_SOCK_ADDR,
                           (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED, fake_completed,
                           NULL, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (!F.d)
        return -1;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(F.d, MHD_DAEMON_INFO_BIND_PORT);
    F.port = di->port;
    return 0;
}

static void fake_stop(void)
{
    if (F.d)
        MHD_stop_daemon(F.d);
    F.d = NULL;
    for (size_t i = 0; i < F.n_reqs; i++)
        fake_req_free(&F.reqs[i]);
    F.n_reqs = 0;
    pthread_mutex_destroy(&F.mu);
}

static void fake_push(struct fake_resp r)
{
    F.queue[F.q_len++] = r;
}

/* ---- fixtures ------------------------------------------------------------------------ */

struct fx {
    struct conf cf;
    struct backend *be;
    char url[128];
};

static int open_be(struct fx *x, int anonymous, int vhost, int64_t timeout_ms)
{
    memset(&x->cf, 0, sizeof(x->cf));
    x->cf.backend_access_key = anonymous ? NULL : (char *)AK;
    x->cf.backend_secret_key = anonymous ? NULL : (char *)SK;
    x->cf.backend_region = (char *)"us-east-1";
    x->cf.backend_virtual_host = vhost;
    x->cf.backend_timeout = timeout_ms;
    snprintf(x->url, sizeof(x->url), "http://%s:%d", vhost ? "localhost" : "127.0.0.1",
             F.port);
    struct errmsg em = {""};
    int rc = be_s3_ops.open(&x->cf, x->url, &x->be, &em);
    if (rc)
        fprintf(stderr, "open: %s\n", em.buf);
    return rc;
}

static int setup(void **state)
{
    static struct fx x;
    if (fake_start())
        return -1;
    if (open_be(&x, 0, 0, 5000))
        return -1;
    *state = &x;
    return 0;
}

static int teardown(void **state)
{
    struct fx *x = *state;
    be_s3_ops.close(x->be);
    x->be = NULL;
    fake_stop();
    return 0;
}

static void page_free(struct be_list_page *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->entries[i].key);
    free(p->entries);
    free(p->next_marker);
}

/* A temp file of @n bytes of a pattern; returns the fd (unlinked). */
static int pattern_file(uint64_t n)
{
    char path[] = "/tmp/test_be_s3.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    char *b = malloc(1 << 20);
    for (uint64_t off = 0; off < n;) {
        size_t k = (size_t)S3C_MIN((uint64_t)(1 << 20), n - off);
        for (size_t i = 0; i < k; i++)
            b[i] = (char)(((off + i) * 7 + (off + i) / 4093) & 0xff);
        assert_int_equal(pwrite(fd, b, k, (off_t)off), (ssize_t)k);
        off += k;
    }
    free(b);
    return fd;
}

static uint64_t pattern_fnv(uint64_t off, uint64_t n)
{
    uint64_t h = FNV_INIT;
    for (uint64_t i = off; i < off + n; i++) {
        unsigned char c = (unsigned char)((i * 7 + i / 4093) & 0xff);
        h = fnv_add(h, &c, 1);
    }
    return h;
}

/* ---- a collecting sink --------------------------------------------------------------- */

struct csink {
    int n_meta;
    int meta_before_data;
    struct be_meta meta;
    char *data;
    size_t len, cap;
    int fail_data; /* return this from on_data */
};

static int cs_meta(void *cls, const struct be_meta *m)
{
    struct csink *s = cls;
    s->n_meta++;
    s->meta = *m;
    s->meta_before_data = s->len == 0;
    return 0;
}

static int cs_data(void *cls, const void *p, size_t n)
{
    struct csink *s = cls;
    if (s->fail_data)
        return s->fail_data;
    if (s->len + n > s->cap) {
        s->cap = (s->len + n) * 2;
        s->data = realloc(s->data, s->cap);
    }
    memcpy(s->data + s->len, p, n);
    s->len += n;
    return 0;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_be_s3_open_urls(void **state)
{
    static const struct { const char *url; int ok; } cases[] = {
        {"http://127.0.0.1:9000", 1},   {"https://s3.example.com/", 1},
        {"http://[::1]:9000", 1},       {"HTTP://host:80", 1},
        {"ftp://host", 0},              {"http://host:0", 0},
        {"http://host:99999", 0},       {"http://host/bucket", 0},
        {"http://ak:sk@host", 0},       {"http://", 0},
    };
    struct conf cf;
    (void)state;
    memset(&cf, 0, sizeof(cf));
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct backend *be = NULL;
        struct errmsg em = {""};
        int rc = be_s3_ops.open(&cf, cases[i].url, &be, &em);
        if (cases[i].ok) {
            assert_int_equal(rc, 0);
            be_s3_ops.close(be);
        } else {
            assert_int_equal(rc, -EINVAL);
            assert_true(em.buf[0] != '\0');
        }
    }
    /* Half a key pair is a config error. */
    cf.backend_access_key = (char *)AK;
    struct backend *be = NULL;
    assert_int_equal(be_s3_ops.open(&cf, "http://h:1", &be, NULL), -EINVAL);
}

static void test_be_s3_head_meta_and_signature(void **state)
{
    struct fx *x = *state;
    fake_push((struct fake_resp){
        .status = 200,
        .head_size = 12345,
        .hdrs = {"ETag: \"0123456789abcdef0123456789abcdef\"",
                 "Last-Modified: Sun, 06 Nov 1994 08:49:37 GMT", "Content-Type: text/plain",
                 "Cache-Control: max-age=60", "x-amz-meta-Color: blue",
                 "x-amz-meta-owner: alice smith", "x-amz-checksum-crc32: AAAAAA==",
                 "Content-Disposition: attachment"}});
    struct be_meta m;
    assert_int_equal(be_s3_ops.head(x->be, "bkt", "dir/a b+c.txt", &m), 0);
    assert_int_equal(m.size, 12345);
    assert_string_equal(m.etag, "0123456789abcdef0123456789abcdef");
    assert_int_equal(m.mtime_ns, 784111777ll * 1000000000ll);
    assert_string_equal(m.content_type, "text/plain");
    assert_string_equal(m.cache_control, "max-age=60");
    assert_string_equal(m.content_disposition, "attachment");
    assert_string_equal(m.usermeta, "color:blue\nowner:alice smith\n");
    assert_string_equal(m.checksum_algo, "CRC32");
    assert_string_equal(m.checksum, "AAAAAA==");
    assert_int_equal(m.parts_count, 0);

    assert_int_equal(F.n_reqs, 1);
    struct fake_req *rq = &F.reqs[0];
    assert_string_equal(rq->method, "HEAD");
    assert_string_equal(rq->path, "/bkt/dir/a b+c.txt");
    assert_non_null(req_hdr(rq, "Authorization"));
    assert_non_null(req_hdr(rq, "x-amz-date"));
    assert_string_equal(req_hdr(rq, "x-amz-content-sha256"),
                        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    assert_int_equal(rq->sig_rc, 0); /* the fake recomputed the signature with sigv4 */
}

static void test_be_s3_anonymous_unsigned(void **state)
{
    struct fx *x = *state;
    struct fx a;
    assert_int_equal(open_be(&a, 1, 0, 5000), 0);
    fake_push((struct fake_resp){.status = 200, .head_size = 3});
    struct be_meta m;
    assert_int_equal(be_s3_ops.head(a.be, "bkt", "k", &m), 0);
    assert_int_equal(m.size, 3);
    assert_null(req_hdr(&F.reqs[0], "Authorization"));
    be_s3_ops.close(a.be);
    (void)x;
}

static void test_be_s3_virtual_host(void **state)
{
    struct fx v;
    (void)state;
    assert_int_equal(open_be(&v, 0, 1, 5000), 0);
    fake_push((struct fake_resp){.status = 200, .head_size = 5});
    struct be_meta m;
    assert_int_equal(be_s3_ops.head(v.be, "bkt", "x/y", &m), 0);
    char host[64];
    snprintf(host, sizeof(host), "bkt.localhost:%d", F.port);
    assert_string_equal(req_hdr(&F.reqs[0], "Host"), host);
    assert_string_equal(F.reqs[0].path, "/x/y");
    assert_int_equal(F.reqs[0].sig_rc, 0);
    be_s3_ops.close(v.be);
}

static void test_be_s3_get_range_streams(void **state)
{
    struct fx *x = *state;
    static char body[100000];
    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (char)(i * 13);
    fake_push((struct fake_resp){.status = 206,
                                 .hdrs = {"Content-Range: bytes 1000-50999/1000000",
                                          "ETag: \"abc\"", "Content-Type: a/b"},
                                 .body = body + 1000,
                                 .body_len = 50000});
    struct csink s = {0};
    struct be_sink sink = {cs_meta, cs_data, &s};
    assert_int_equal(be_s3_ops.get(x->be, "bkt", "obj", 1000, 50000, &sink), 0);
    assert_string_equal(req_hdr(&F.reqs[0], "Range"), "bytes=1000-50999");
    assert_int_equal(s.n_meta, 1);
    assert_true(s.meta_before_data);
    assert_int_equal(s.meta.size, 1000000); /* the whole object, from Content-Range */
    assert_string_equal(s.meta.etag, "abc");
    assert_int_equal(s.len, 50000);
    assert_memory_equal(s.data, body + 1000, 50000);
    free(s.data);

    /* Whole object: no Range header, size from Content-Length. */
    memset(&s, 0, sizeof(s));
    fake_push((struct fake_resp){.status = 200, .body = body, .body_len = sizeof(body)});
    assert_int_equal(be_s3_ops.get(x->be, "bkt", "obj", 0, UINT64_MAX, &sink), 0);
    assert_null(req_hdr(&F.reqs[1], "Range"));
    assert_int_equal(s.meta.size, sizeof(body));
    assert_int_equal(s.len, sizeof(body));
    assert_memory_equal(s.data, body, sizeof(body));
    free(s.data);

    /* An upstream that ignores Range: we cut the window out ourselves. */
    memset(&s, 0, sizeof(s));
    fake_push((struct fake_resp){.status = 200, .body = body, .body_len = sizeof(body)});
    assert_int_equal(be_s3_ops.get(x->be, "bkt", "obj", 10, 20, &sink), 0);
    assert_int_equal(s.len, 20);
    assert_memory_equal(s.data, body + 10, 20);
    free(s.data);

    /* Open-ended range. */
    memset(&s, 0, sizeof(s));
    fake_push((struct fake_resp){.status = 206,
                                 .hdrs = {"Content-Range: bytes 99990-99999/100000"},
                                 .body = body + 99990,
                                 .body_len = 10});
    assert_int_equal(be_s3_ops.get(x->be, "bkt", "obj", 99990, UINT64_MAX, &sink), 0);
    assert_string_equal(req_hdr(&F.reqs[3], "Range"), "bytes=99990-");
    assert_int_equal(s.len, 10);
    free(s.data);

    /* Empty object: on_meta still called once. */
    memset(&s, 0, sizeof(s));
    fake_push((struct fake_resp){.status = 200, .body = "", .body_len = 0});
    assert_int_equal(be_s3_ops.get(x->be, "bkt", "empty", 0, UINT64_MAX, &sink), 0);
    assert_int_equal(s.n_meta, 1);
    assert_int_equal(s.meta.size, 0);
    assert_int_equal(s.len, 0);

    /* The sink's error aborts and is returned. */
    memset(&s, 0, sizeof(s));
    s.fail_data = -ENOSPC;
    fake_push((struct fake_resp){.status = 200, .body = body, .body_len = sizeof(body)});
    assert_int_equal(be_s3_ops.get(x->be, "bkt", "obj", 0, UINT64_MAX, &sink), -ENOSPC);
    assert_int_equal(F.n_reqs, 6);
}

static void test_be_s3_retry_503_then_200(void **state)
{
    struct fx *x = *state;
    static const char err[] = "<?xml version=\"1.0\"?><Error><Code>SlowDown</Code>"
                              "<Message>Reduce</Message></Error>";
    fake_push((struct fake_resp){.status = 503, .body = err, .body_len = sizeof(err) - 1});
    fake_push((struct fake_resp){.status = 500, .body = "", .body_len = 0});
    fake_push((struct fake_resp){.status = 200, .body = "hello", .body_len = 5});
    struct csink s = {0};
    struct be_sink sink = {cs_meta, cs_data, &s};
    assert_int_equal(be_s3_ops.get(x->be, "bkt", "k", 0, UINT64_MAX, &sink), 0);
    assert_int_equal(F.n_reqs, 3);
    assert_int_equal(s.n_meta, 1);
    assert_int_equal(s.len, 5);
    assert_memory_equal(s.data, "hello", 5);
    free(s.data);
    /* Every attempt is signed afresh and verifies. */
    for (size_t i = 0; i < F.n_reqs; i++)
        assert_int_equal(F.reqs[i].sig_rc, 0);
}

static void test_be_s3_503_forever(void **state)
{
    struct fx *x = *state;
    static const char err[] = "<Error><Code>ServiceUnavailable</Code></Error>";
    F.sticky = (struct fake_resp){.status = 503, .body = err, .body_len = sizeof(err) - 1};
    struct be_meta m;
    uint64_t t0 = s3c_mono_ns();
    assert_int_equal(be_s3_ops.head(x->be, "bkt", "k", &m), -S3E_SERVICE_UNAVAILABLE);
    uint64_t ms = (s3c_mono_ns() - t0) / 1000000;
    assert_int_equal(F.n_reqs, 4); /* 1 try + 3 retries */
    assert_true(ms >= 1000 && ms < 6000);
    /* A POST (create upload) is not retried once sent. */
    char id[BE_UPLOAD_ID_MAX];
    assert_int_equal(be_s3_ops.mp_create(x->be, "bkt", "k", NULL, id), -S3E_SERVICE_UNAVAILABLE);
    assert_int_equal(F.n_reqs, 5);
}

static void test_be_s3_get_no_retry_after_data(void **state)
{
    struct fx *x = *state;
    static char body[200000];
    memset(body, 'z', sizeof(body));
    F.sticky = (struct fake_resp){.status = 200, .body = body, .body_len = sizeof(body),
                                  .cut_after = 70000};
    struct csink s = {0};
    struct be_sink sink = {cs_meta, cs_data, &s};
    int rc = be_s3_ops.get(x->be, "bkt", "k", 0, UINT64_MAX, &sink);
    assert_true(rc < 0);
    assert_int_equal(F.n_reqs, 1); /* the sink has data: no silent retry */
    assert_true(s.len > 0 && s.len < sizeof(body));
    free(s.data);
}

static void test_be_s3_error_mapping(void **state)
{
    struct fx *x = *state;
    static const struct {
        int status;
        const char *body;
        int op; /* 0 get, 1 head, 2 bucket_head, 3 del, 4 bucket_create, 5 bucket_delete */
        int want;
    } cases[] = {
        {404, "<Error><Code>NoSuchKey</Code></Error>", 0, -S3E_NO_SUCH_KEY},
        {404, "<Error><Code>NoSuchBucket</Code></Error>", 0, -S3E_NO_SUCH_BUCKET},
        {404, "", 1, -S3E_NO_SUCH_KEY},
        {404, "", 2, -S3E_NO_SUCH_BUCKET},
        {404, "<Error><Code>NoSuchKey</Code></Error>", 3, 0},
        {404, "<Error><Code>NoSuchBucket</Code></Error>", 3, -S3E_NO_SUCH_BUCKET},
        {403, "<Error><Code>SignatureDoesNotMatch</Code></Error>", 0, -S3E_ACCESS_DENIED},
        {403, "", 1, -S3E_ACCESS_DENIED},
        {412, "<Error><Code>PreconditionFailed</Code></Error>", 0, -S3E_PRECONDITION_FAILED},
        {416, "<Error><Code>InvalidRange</Code></Error>", 0, -S3E_INVALID_RANGE},
        {304, "", 1, -S3E_NOT_MODIFIED},
        {409, "<Error><Code>BucketAlreadyOwnedByYou</Code></Error>", 4,
         -S3E_BUCKET_ALREADY_OWNED},
        {409, "<Error><Code>BucketNotEmpty</Code></Error>", 5, -S3E_BUCKET_NOT_EMPTY},
        {400, "<Error><Code>InvalidBucketName</Code></Error>", 4, -S3E_INVALID_BUCKET_NAME},
        {501, "<Error><Code>NotImplemented</Code></Error>", 0, -S3E_NOT_IMPLEMENTED},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        F.q_len = F.q_pos = 0;
        fake_push((struct fake_resp){.status = cases[i].status, .body = cases[i].body,
                                     .body_len = strlen(cases[i].body)});
        struct csink s = {0};
        struct be_sink sink = {cs_meta, cs_data, &s};
        struct be_meta m;
        int rc = 0;
        switch (cases[i].op) {
        case 0: rc = be_s3_ops.get(x->be, "bkt", "k", 0, UINT64_MAX, &sink); break;
        case 1: rc = be_s3_ops.head(x->be, "bkt", "k", &m); break;
        case 2: rc = be_s3_ops.bucket_head(x->be, "bkt"); break;
        case 3: rc = be_s3_ops.del(x->be, "bkt", "k"); break;
        case 4: rc = be_s3_ops.bucket_create(x->be, "bkt"); break;
        case 5: rc = be_s3_ops.bucket_delete(x->be, "bkt"); break;
        }
        if (rc != cases[i].want)
            fprintf(stderr, "case %zu: got %d (%s) want %d\n", i, rc, s3c_strerror(rc),
                    cases[i].want);
        assert_int_equal(rc, cases[i].want);
        assert_int_equal(s.len, 0);
        assert_int_equal(s.n_meta, 0);
    }
}

static void test_be_s3_connection_refused(void **state)
{
    (void)state;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &sl), 0);
    close(s); /* nothing listens there now */
    struct conf cf;
    memset(&cf, 0, sizeof(cf));
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", ntohs(sa.sin_port));
    struct backend *be = NULL;
    assert_int_equal(be_s3_ops.open(&cf, url, &be, NULL), 0); /* a down upstream is no error */
    struct be_meta m;
    assert_int_equal(be_s3_ops.head(be, "b", "k", &m), -S3E_SERVICE_UNAVAILABLE);
    be_s3_ops.close(be);
}

static void test_be_s3_timeout(void **state)
{
    struct fx t;
    (void)state;
    assert_int_equal(open_be(&t, 0, 0, 1000), 0);
    fake_push((struct fake_resp){.status = 200, .stall_ms = 3000,
                                 .body = "<InitiateMultipartUploadResult/>", .body_len = 32});
    char id[BE_UPLOAD_ID_MAX];
    /* POST: a timed-out request that was sent is not retried. */
    assert_int_equal(be_s3_ops.mp_create(t.be, "bkt", "k", NULL, id), -S3E_GATEWAY_TIMEOUT);
    assert_int_equal(F.n_reqs, 1);
    be_s3_ops.close(t.be);
}

static void test_be_s3_put_single(void **state)
{
    struct fx *x = *state;
    int fd = pattern_file(300000);
    struct be_meta m;
    memset(&m, 0, sizeof(m));
    m.size = 300000;
    snprintf(m.etag, sizeof(m.etag), "9e107d9d372bb6826bd81d3542a419d6");
    snprintf(m.content_type, sizeof(m.content_type), "image/png");
    snprintf(m.cache_control, sizeof(m.cache_control), "no-cache");
    snprintf(m.usermeta, sizeof(m.usermeta), "color:blue\nmtime:1700000000.5\n");
    snprintf(m.checksum_algo, sizeof(m.checksum_algo), "CRC32");
    snprintf(m.checksum, sizeof(m.checksum), "sOO8/Q==");
    fake_push((struct fake_resp){.status = 500});
    fake_push((struct fake_resp){.status = 200, .hdrs = {"ETag: \"x\""}});
    assert_int_equal(be_s3_ops.put(x->be, "bkt", "dir/obj.png", fd, 300000, &m, NULL), 0);
    assert_int_equal(F.n_reqs, 2); /* the 500 was retried, re-reading the file */
    for (size_t i = 0; i < 2; i++) {
        struct fake_req *rq = &F.reqs[i];
        assert_string_equal(rq->method, "PUT");
        assert_string_equal(rq->path, "/bkt/dir/obj.png");
        assert_int_equal(rq->body_len, 300000);
        assert_true(rq->body_fnv == pattern_fnv(0, 300000));
        assert_string_equal(req_hdr(rq, "Content-Length"), "300000");
        assert_string_equal(req_hdr(rq, "Content-Type"), "image/png");
        assert_string_equal(req_hdr(rq, "Cache-Control"), "no-cache");
        assert_string_equal(req_hdr(rq, "x-amz-meta-color"), "blue");
        assert_string_equal(req_hdr(rq, "x-amz-meta-mtime"), "1700000000.5");
        assert_string_equal(req_hdr(rq, "Content-MD5"), "nhB9nTcrtoJr2B01QqQZ1g==");
        assert_string_equal(req_hdr(rq, "x-amz-checksum-crc32"), "sOO8/Q==");
        assert_string_equal(req_hdr(rq, "x-amz-content-sha256"), "UNSIGNED-PAYLOAD");
        assert_int_equal(rq->sig_rc, 0);
    }
    close(fd);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

struct canceller {
    int *flag;
    unsigned after_ms;
};

static void *cancel_later(void *arg)
{
    struct canceller *cn = arg;
    usleep(cn->after_ms * 1000u);
    __atomic_store_n(cn->flag, 1, __ATOMIC_RELAXED);
    return NULL;
}

/* A drain upload superseded by a newer write stops: before it starts, and while its body is
 * still being sent (the upstream not reading it: no read callback, a full socket), without a
 * retry and long before the timeout. Once the whole body is sent the upstream may apply it: it is
 * then waited for, never cut, so it cannot land after the write that superseded it. */
static void test_be_s3_put_cancel(void **state)
{
    struct fx t;
    (void)state;
    assert_int_equal(open_be(&t, 0, 0, 2000), 0);
    int fd = pattern_file(300000);
    struct be_meta m;
    memset(&m, 0, sizeof(m));
    m.size = 300000;
    int cancel = 1;
    assert_int_equal(be_s3_ops.put(t.be, "bkt", "k", fd, 300000, &m, &cancel), -ECANCELED);
    assert_true(F.n_reqs <= 1);
    size_t before = F.n_reqs;

    /* 64 MiB the upstream stops reading for 3 s: cancelled while the body is in flight */
    uint64_t big_len = 64u << 20;
    int big = pattern_file(big_len);
    struct be_meta mb = m;
    mb.size = big_len;
    cancel = 0;
    pthread_mutex_lock(&F.mu);
    F.body_stall_ms = 3000;
    pthread_mutex_unlock(&F.mu);
    struct canceller cn = {.flag = &cancel, .after_ms = 200};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cancel_later, &cn), 0);
    uint64_t t0 = now_ms();
    assert_int_equal(be_s3_ops.put(t.be, "bkt", "big", big, big_len, &mb, &cancel), -ECANCELED);
    assert_true(now_ms() - t0 < 2800); /* libcurl's progress call, once a second, cut it */
    pthread_join(th, NULL);
    close(big);

    /* the whole body sent, the answer held 1.8 s: waited for (200), not cut */
    before = F.n_reqs;
    cancel = 0;
    fake_push((struct fake_resp){.status = 200, .stall_ms = 1800});
    assert_int_equal(pthread_create(&th, NULL, cancel_later, &cn), 0);
    t0 = now_ms();
    assert_int_equal(be_s3_ops.put(t.be, "bkt", "k", fd, 300000, &m, &cancel), 0);
    assert_true(now_ms() - t0 >= 1500);
    pthread_join(th, NULL);
    assert_int_equal(F.n_reqs, before + 1);
    close(fd);
    be_s3_ops.close(t.be);
}

static void mp_route(const struct fake_req *rq, struct fake_resp *out)
{
    static char etags[64][48];
    int has_uploads, has_part;
    req_query(rq, "uploads", &has_uploads);
    const char *pn = req_query(rq, "partNumber", &has_part);
    if (!strcmp(rq->method, "POST") && has_uploads) {
        static const char x[] = "<InitiateMultipartUploadResult><Bucket>bkt</Bucket><Key>big"
                                "</Key><UploadId>UP-1&amp;2</UploadId>"
                                "</InitiateMultipartUploadResult>";
        *out = (struct fake_resp){.status = 200, .body = x, .body_len = sizeof(x) - 1};
    } else if (!strcmp(rq->method, "PUT") && has_part) {
        int n = (int)(strtol(pn, NULL, 10) % 64);
        snprintf(etags[n], sizeof(etags[n]), "ETag: \"%016" PRIx64 "\"", rq->body_fnv);
        *out = (struct fake_resp){.status = 200, .hdrs = {etags[n]}};
    } else if (!strcmp(rq->method, "POST")) {
        static const char x[] = "<CompleteMultipartUploadResult><ETag>&quot;ffff-5&quot;"
                                "</ETag></CompleteMultipartUploadResult>";
        *out = (struct fake_resp){.status = 200, .body = x, .body_len = sizeof(x) - 1};
    } else if (!strcmp(rq->method, "HEAD")) {
        *out = (struct fake_resp){.status = 200, .head_size = 64 * 1048576 + 4097,
                                  .hdrs = {"ETag: \"ffff-5\""}};
    } else {
        *out = (struct fake_resp){.status = 400};
    }
}

static void test_be_s3_put_multipart(void **state)
{
    struct fx *x = *state;
    uint64_t len = 64ull * 1048576 + 4097; /* above the threshold: 5 parts of 16 MiB */
    int fd = pattern_file(len);
    struct be_meta m;
    memset(&m, 0, sizeof(m));
    m.size = len;
    snprintf(m.content_type, sizeof(m.content_type), "application/x-big");
    F.route = mp_route;
    assert_int_equal(be_s3_ops.put(x->be, "bkt", "big", fd, len, &m, NULL), 0);
    /* create + 5 parts + complete */
    assert_int_equal(F.n_reqs, 7);
    assert_string_equal(F.reqs[0].method, "POST");
    assert_string_equal(req_hdr(&F.reqs[0], "Content-Type"), "application/x-big");
    uint64_t total = 0;
    int seen[6] = {0};
    for (size_t i = 1; i <= 5; i++) {
        struct fake_req *rq = &F.reqs[i];
        assert_string_equal(rq->method, "PUT");
        assert_string_equal(req_query(rq, "uploadId", NULL), "UP-1&2");
        int pn = (int)strtol(req_query(rq, "partNumber", NULL), NULL, 10);
        assert_true(pn >= 1 && pn <= 5);
        seen[pn]++;
        uint64_t off = (uint64_t)(pn - 1) * 16 * 1048576;
        assert_int_equal(rq->body_len, pn == 5 ? 4097 : 16 * 1048576);
        assert_true(rq->body_fnv == pattern_fnv(off, rq->body_len));
        total += rq->body_len;
        assert_int_equal(rq->sig_rc, 0);
    }
    assert_int_equal(total, len);
    for (int p = 1; p <= 5; p++)
        assert_int_equal(seen[p], 1);
    struct fake_req *c = &F.reqs[6];
    assert_string_equal(c->method, "POST");
    assert_int_equal(c->sig_rc, 0); /* the XML body's sha256 was signed and matches */
    const char *b = c->body;
    assert_non_null(strstr(b, "<Part><PartNumber>1</PartNumber><ETag>&quot;"));
    assert_non_null(strstr(b, "<PartNumber>5</PartNumber>"));
    assert_non_null(strstr(b, "</CompleteMultipartUpload>"));
    close(fd);
}

static void test_be_s3_list(void **state)
{
    struct fx *x = *state;
    static const char xml[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Name>bkt</Name><Prefix>p%2F</Prefix><KeyCount>4</KeyCount><MaxKeys>4</MaxKeys>"
        "<Delimiter>%2F</Delimiter><EncodingType>url</EncodingType>"
        "<IsTruncated>true</IsTruncated><NextContinuationToken>tok+1</NextContinuationToken>"
        "<Contents><Key>p%2Fa+b%26c.txt</Key><LastModified>2009-10-12T17:50:30.123Z"
        "</LastModified><ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag>"
        "<Size>434234</Size><StorageClass>STANDARD</StorageClass></Contents>"
        "<Contents><Key>p%2F%C3%A9t%C3%A9</Key><LastModified>2009-10-12T17:50:31.000Z"
        "</LastModified><ETag>\"aa-2\"</ETag><Size>0</Size></Contents>"
        "<CommonPrefixes><Prefix>p%2Fdir%2F</Prefix></CommonPrefixes>"
        "<CommonPrefixes><Prefix>p%2Fb%2F</Prefix></CommonPrefixes>"
        "</ListBucketResult>";
    fake_push((struct fake_resp){.status = 200, .body = xml, .body_len = sizeof(xml) - 1});
    struct be_list_req rq = {.bucket = "bkt", .prefix = "p/", .delimiter = "/",
                             .marker = "p/0 x", .max_keys = 4};
    struct be_list_page pg;
    assert_int_equal(be_s3_ops.list(x->be, &rq, &pg), 0);
    struct fake_req *r = &F.reqs[0];
    assert_string_equal(r->path, "/bkt");
    assert_string_equal(req_query(r, "list-type", NULL), "2");
    assert_string_equal(req_query(r, "prefix", NULL), "p/");
    assert_string_equal(req_query(r, "delimiter", NULL), "/");
    assert_string_equal(req_query(r, "start-after", NULL), "p/0 x");
    assert_string_equal(req_query(r, "max-keys", NULL), "4");
    assert_string_equal(req_query(r, "encoding-type", NULL), "url");
    assert_int_equal(r->sig_rc, 0);
    assert_int_equal(pg.n, 4);
    /* In key order, prefixes mixed in. */
    assert_string_equal(pg.entries[0].key, "p/a b&c.txt");
    assert_int_equal(pg.entries[0].is_prefix, 0);
    assert_int_equal(pg.entries[0].size, 434234);
    assert_string_equal(pg.entries[0].etag, "fba9dede5f27731c9771645a39863328");
    assert_int_equal(pg.entries[0].mtime_ns, 1255369830123000000ll);
    assert_string_equal(pg.entries[1].key, "p/b/");
    assert_int_equal(pg.entries[1].is_prefix, 1);
    assert_string_equal(pg.entries[2].key, "p/dir/");
    assert_string_equal(pg.entries[3].key, "p/\xc3\xa9t\xc3\xa9");
    assert_string_equal(pg.entries[3].etag, "aa-2");
    assert_true(pg.truncated);
    assert_string_equal(pg.next_marker, "p/\xc3\xa9t\xc3\xa9");
    page_free(&pg);

    /* No EncodingType echoed: keys are taken literally ('%' and '+' kept). */
    static const char raw[] = "<ListBucketResult><IsTruncated>false</IsTruncated>"
                              "<Contents><Key>a%20+b</Key><Size>1</Size></Contents>"
                              "</ListBucketResult>";
    fake_push((struct fake_resp){.status = 200, .body = raw, .body_len = sizeof(raw) - 1});
    struct be_list_req rq2 = {.bucket = "bkt", .max_keys = 1000};
    assert_int_equal(be_s3_ops.list(x->be, &rq2, &pg), 0);
    assert_int_equal(pg.n, 1);
    assert_string_equal(pg.entries[0].key, "a%20+b");
    assert_false(pg.truncated);
    assert_null(pg.next_marker);
    page_free(&pg);
}

static void test_be_s3_list_buckets_and_create(void **state)
{
    struct fx *x = *state;
    static const char xml[] =
        "<ListAllMyBucketsResult><Owner><ID>1</ID></Owner><Buckets>"
        "<Bucket><Name>alpha</Name><CreationDate>2020-01-02T03:04:05.000Z</CreationDate>"
        "</Bucket><Bucket><Name>beta</Name><CreationDate>2021-01-02T03:04:05Z</CreationDate>"
        "</Bucket></Buckets></ListAllMyBucketsResult>";
    fake_push((struct fake_resp){.status = 200, .body = xml, .body_len = sizeof(xml) - 1});
    struct be_bucket *bs;
    size_t n;
    assert_int_equal(be_s3_ops.list_buckets(x->be, &bs, &n), 0);
    assert_string_equal(F.reqs[0].path, "/");
    assert_int_equal(n, 2);
    assert_string_equal(bs[0].name, "alpha");
    assert_int_equal(bs[0].ctime_ns, 1577934245ll * 1000000000ll);
    assert_string_equal(bs[1].name, "beta");
    free(bs);

    fake_push((struct fake_resp){.status = 200});
    assert_int_equal(be_s3_ops.bucket_create(x->be, "newb"), 0);
    assert_string_equal(F.reqs[1].method, "PUT");
    assert_string_equal(F.reqs[1].path, "/newb");
    assert_string_equal(req_hdr(&F.reqs[1], "Content-Length"), "0");
    assert_int_equal(F.reqs[1].sig_rc, 0);
}

static void test_be_s3_copy(void **state)
{
    struct fx *x = *state;
    static const char xml[] = "<CopyObjectResult><LastModified>2020-01-02T03:04:05.000Z"
                              "</LastModified><ETag>\"d41d8cd98f00b204e9800998ecf8427e\"</ETag>"
                              "</CopyObjectResult>";
    fake_push((struct fake_resp){.status = 200, .body = xml, .body_len = sizeof(xml) - 1});
    fake_push((struct fake_resp){.status = 200, .head_size = 77,
                                 .hdrs = {"ETag: \"d41d8cd98f00b204e9800998ecf8427e\"",
                                          "Content-Type: text/x"}});
    struct be_meta out, rep;
    memset(&rep, 0, sizeof(rep));
    snprintf(rep.content_type, sizeof(rep.content_type), "text/x");
    assert_int_equal(be_s3_ops.copy(x->be, "src", "a b/c+d", "dst", "k", &rep, &out), 0);
    struct fake_req *r = &F.reqs[0];
    assert_string_equal(r->method, "PUT");
    assert_string_equal(r->path, "/dst/k");
    assert_string_equal(req_hdr(r, "x-amz-copy-source"), "/src/a%20b/c%2Bd");
    assert_string_equal(req_hdr(r, "x-amz-metadata-directive"), "REPLACE");
    assert_string_equal(req_hdr(r, "Content-Type"), "text/x");
    assert_int_equal(r->sig_rc, 0);
    assert_int_equal(out.size, 77);
    assert_string_equal(out.etag, "d41d8cd98f00b204e9800998ecf8427e");

    /* A 200 whose body is an <Error>. */
    static const char err[] = "<Error><Code>InternalError</Code></Error>";
    fake_push((struct fake_resp){.status = 200, .body = err, .body_len = sizeof(err) - 1});
    assert_int_equal(be_s3_ops.copy(x->be, "src", "a", "dst", "k", NULL, &out), -S3E_INTERNAL);
    assert_string_equal(req_hdr(&F.reqs[2], "x-amz-metadata-directive"), "COPY");
}

static void test_be_s3_multipart_passthrough(void **state)
{
    struct fx *x = *state;
    static const char init[] = "<InitiateMultipartUploadResult><UploadId>abc-123</UploadId>"
                               "</InitiateMultipartUploadResult>";
    fake_push((struct fake_resp){.status = 200, .body = init, .body_len = sizeof(init) - 1});
    char id[BE_UPLOAD_ID_MAX];
    assert_int_equal(be_s3_ops.mp_create(x->be, "bkt", "obj", NULL, id), 0);
    assert_string_equal(id, "abc-123");
    int present;
    req_query(&F.reqs[0], "uploads", &present);
    assert_true(present);
    assert_int_equal(F.reqs[0].sig_rc, 0);

    int fd = pattern_file(1000);
    struct be_part p = {.number = 3, .size = 1000};
    snprintf(p.etag, sizeof(p.etag), "9e107d9d372bb6826bd81d3542a419d6");
    fake_push((struct fake_resp){.status = 200, .hdrs = {"ETag: \"9e107d9d\""}});
    assert_int_equal(be_s3_ops.mp_put_part(x->be, "bkt", "obj", id, fd, &p), 0);
    assert_string_equal(req_query(&F.reqs[1], "partNumber", NULL), "3");
    assert_string_equal(req_query(&F.reqs[1], "uploadId", NULL), "abc-123");
    assert_string_equal(req_hdr(&F.reqs[1], "Content-MD5"), "nhB9nTcrtoJr2B01QqQZ1g==");
    assert_int_equal(F.reqs[1].body_len, 1000);
    close(fd);

    static const char cp[] = "<CopyPartResult><LastModified>2020-01-02T03:04:05.000Z"
                             "</LastModified><ETag>&quot;eeee&quot;</ETag></CopyPartResult>";
    fake_push((struct fake_resp){.status = 200, .body = cp, .body_len = sizeof(cp) - 1});
    struct be_part cpo;
    assert_int_equal(be_s3_ops.mp_copy_part(x->be, "bkt", "obj", id, 4, "s", "k/x", 100, 50,
                                            &cpo),
                     0);
    assert_string_equal(req_hdr(&F.reqs[2], "x-amz-copy-source"), "/s/k/x");
    assert_string_equal(req_hdr(&F.reqs[2], "x-amz-copy-source-range"), "bytes=100-149");
    assert_int_equal(cpo.number, 4);
    assert_int_equal(cpo.size, 50);
    assert_string_equal(cpo.etag, "eeee");

    static const char done[] = "<CompleteMultipartUploadResult><ETag>\"ffff-2\"</ETag>"
                               "</CompleteMultipartUploadResult>";
    fake_push((struct fake_resp){.status = 200, .body = done, .body_len = sizeof(done) - 1});
    fake_push((struct fake_resp){.status = 200, .head_size = 1050,
                                 .hdrs = {"ETag: \"ffff-2\""}});
    struct be_part parts[2] = {{.number = 3, .size = 1000}, {.number = 4, .size = 50}};
    snprintf(parts[0].etag, sizeof(parts[0].etag), "9e107d9d");
    snprintf(parts[1].etag, sizeof(parts[1].etag), "eeee");
    snprintf(parts[1].checksum_algo, sizeof(parts[1].checksum_algo), "CRC32");
    snprintf(parts[1].checksum, sizeof(parts[1].checksum), "AAAAAA==");
    struct be_meta out;
    assert_int_equal(be_s3_ops.mp_complete(x->be, "bkt", "obj", id, parts, 2, &out), 0);
    struct fake_req *c = &F.reqs[3];
    assert_string_equal(req_query(c, "uploadId", NULL), "abc-123");
    assert_int_equal(c->sig_rc, 0);
    assert_non_null(strstr(c->body, "<Part><PartNumber>3</PartNumber>"
                                    "<ETag>&quot;9e107d9d&quot;</ETag></Part>"));
    assert_non_null(strstr(c->body, "<ChecksumCRC32>AAAAAA==</ChecksumCRC32>"));
    assert_string_equal(out.etag, "ffff-2");
    assert_int_equal(out.size, 1050);
    assert_int_equal(out.parts_count, 2);

    static const char lp[] =
        "<ListPartsResult><IsTruncated>true</IsTruncated><NextPartNumberMarker>2"
        "</NextPartNumberMarker><Part><PartNumber>1</PartNumber><LastModified>"
        "2020-01-02T03:04:05.000Z</LastModified><ETag>\"e1\"</ETag><Size>5242880</Size>"
        "</Part><Part><PartNumber>2</PartNumber><ETag>&quot;e2&quot;</ETag><Size>7</Size>"
        "<ChecksumSHA256>xyz=</ChecksumSHA256></Part></ListPartsResult>";
    fake_push((struct fake_resp){.status = 200, .body = lp, .body_len = sizeof(lp) - 1});
    struct be_part *lps;
    size_t n;
    int tr;
    assert_int_equal(be_s3_ops.mp_list_parts(x->be, "bkt", "obj", id, 0, 2, &lps, &n, &tr), 0);
    assert_string_equal(req_query(&F.reqs[5], "max-parts", NULL), "2");
    assert_int_equal(n, 2);
    assert_true(tr);
    assert_int_equal(lps[0].number, 1);
    assert_int_equal(lps[0].size, 5242880);
    assert_string_equal(lps[0].etag, "e1");
    assert_string_equal(lps[1].etag, "e2");
    assert_string_equal(lps[1].checksum_algo, "SHA256");
    assert_string_equal(lps[1].checksum, "xyz=");
    free(lps);

    static const char lu[] =
        "<ListMultipartUploadsResult><Bucket>bkt</Bucket><KeyMarker></KeyMarker>"
        "<UploadIdMarker/><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
        "<Upload><Key>a%2Fb+c</Key><UploadId>u1</UploadId><Initiated>"
        "2020-01-02T03:04:05.000Z</Initiated></Upload>"
        "<Upload><Key>z</Key><UploadId>u2</UploadId></Upload></ListMultipartUploadsResult>";
    fake_push((struct fake_resp){.status = 200, .body = lu, .body_len = sizeof(lu) - 1});
    struct be_upload *ups;
    assert_int_equal(
        be_s3_ops.mp_list_uploads(x->be, "bkt", "a", NULL, NULL, 100, &ups, &n, &tr), 0);
    req_query(&F.reqs[6], "uploads", &present);
    assert_true(present);
    assert_int_equal(n, 2);
    assert_false(tr);
    assert_string_equal(ups[0].key, "a/b c");
    assert_string_equal(ups[0].upload_id, "u1");
    assert_int_equal(ups[0].initiated_ns, 1577934245ll * 1000000000ll);
    assert_string_equal(ups[1].key, "z");
    for (size_t i = 0; i < n; i++)
        free(ups[i].key);
    free(ups);

    static const char nsu[] = "<Error><Code>NoSuchUpload</Code></Error>";
    fake_push((struct fake_resp){.status = 404, .body = nsu, .body_len = sizeof(nsu) - 1});
    assert_int_equal(be_s3_ops.mp_abort(x->be, "bkt", "obj", id), -S3E_NO_SUCH_UPLOAD);
    assert_string_equal(F.reqs[7].method, "DELETE");
    fake_push((struct fake_resp){.status = 204});
    assert_int_equal(be_s3_ops.mp_abort(x->be, "bkt", "obj", id), 0);
}

static void test_be_s3_keep_alive(void **state)
{
    struct fx *x = *state;
    F.sticky = (struct fake_resp){.status = 200, .head_size = 1};
    struct be_meta m;
    for (int i = 0; i < 20; i++)
        assert_int_equal(be_s3_ops.head(x->be, "bkt", "k", &m), 0);
    assert_int_equal(F.n_reqs, 20);
    /* One pooled handle, one keep-alive connection: every request came from the same port. */
    for (size_t i = 1; i < F.n_reqs; i++)
        assert_int_equal(F.reqs[i].client_port, F.reqs[0].client_port);
    assert_true(F.reqs[0].client_port > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_be_s3_open_urls),
        cmocka_unit_test_setup_teardown(test_be_s3_head_meta_and_signature, setup, teardown),
        cmocka_unit_test_setup_teardown(test_be_s3_anonymous_unsigned, setup, teardown),
        cmocka_unit_test_setup_teardown(test_be_s3_virtual_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_be_s3_get_range_streams, setup, teardown),
        cmocka_unit_test_setup_teardown(test_be_s3_retry_503_then_200, setup, teardown),
        cmocka_unit_test_setup_teardown(test_be_s3_503_forever, setup, teardown),
        cmocka_unit_test_setup_teardown(test_be_s3_get_no_retry_after_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_be_s3_error_mapping, setup, teardown),
        cmocka_unit_test(test_be_s3_connection_refused),
        cmocka_unit_test_setup_teardown(test_be_s3_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_be_s3_put_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_be_s3_put_single, setup, teardown),
        cmocka_unit_test_setup_teardown(test_be_s3_put_multipart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_be_s3_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_be_s3_list_buckets_and_create, setup, teardown),
        cmocka_unit_test_setup_teardown(test_be_s3_copy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_be_s3_multipart_passthrough, setup, teardown),
        cmocka_unit_test_setup_teardown(test_be_s3_keep_alive, setup, teardown),
    };
    return cmocka_run_group_tests_name("be_s3", tests, NULL, NULL);
}
