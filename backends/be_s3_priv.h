/*
 * be_s3_priv.h: what the three files of the S3 backend share: the backend's state (struct s3be),
 * one upstream call (struct s3_call) and the helpers of be_s3_parse.c (reading what an S3
 * upstream answers) and be_s3_call.c (building, signing, running and retrying a call), which
 * be_s3.c's operations use. Only backends/be_s3*.c include it (it needs <curl/curl.h>).
 */
#ifndef S3C_BE_S3_PRIV_H
#define S3C_BE_S3_PRIV_H

#include <pthread.h>
#include <stdint.h>

#include <curl/curl.h>

#include "backend.h"
#include "lib/buf.h"
#include "sig/sigv4.h"

#define S3BE_MAGIC 0x53b3e0a1
#define S3CALL_MAGIC 0x53ca11ed

#define S3_POOL_MAX 64 /* idle easy handles kept (each keeps its connection) */
#define S3_MAX_QUERY 12
#define S3_MAX_HDRS 48
#define S3_ARENA 16384             /* header names/values and query strings of one call */
#define S3_ERRBODY_MAX (64u << 10) /* an error answer's XML */
#define S3_BODY_MAX (32u << 20)    /* a listing or result XML */
#define S3_HDRS_MAX (64u << 10)    /* response header block */
#define S3_ATTEMPTS 4              /* 1 try + 3 retries: 100 ms, 400 ms, 1.6 s (+-50%) */
#define S3_BACKOFF_MS 100
#define S3_MP_THRESHOLD (64ull << 20) /* put() above this: multipart upload upstream */
#define S3_MP_PART_SIZE (16ull << 20)
#define S3_MP_PARALLEL 4
#define S3_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct s3be {
    unsigned magic;
    int https;
    char host[256]; /* as in the URL; IPv6 literals keep their brackets */
    int port;
    char hostport[300]; /* Host header value (port omitted when the scheme's default) */
    char base[320];     /* scheme://host[:port] */
    char *access_key, *secret_key, *region, *ca_file;
    int anonymous, virtual_host, insecure;
    long timeout_ms;
    const int *stopping; /* the struct backend's: backend_stop() */
    uint64_t *throttled; /* the struct backend's counter of SlowDown answers */
    pthread_mutex_t mu;
    CURL *idle[S3_POOL_MAX];
    size_t n_idle;
};

enum s3_retry {
    S3_RETRY_IDEMPOTENT, /* GET, HEAD, PUT from a file or memory, DELETE, list */
    S3_RETRY_UNSENT,     /* POST: only when the request never left (connect failed) */
};

struct s3_call {
    unsigned magic;
    struct s3be *be;
    CURL *h;
    /* request */
    const char *method;
    const char *bucket; /* NULL: the service (ListBuckets) */
    const char *key;    /* NULL: the bucket */
    struct sigv4_kv query[S3_MAX_QUERY];
    size_t n_query;
    struct sigv4_kv hdr[S3_MAX_HDRS];
    size_t n_hdr;
    char arena[S3_ARENA];
    size_t arena_len;
    int overflow;     /* a header or query did not fit: -ENAMETOOLONG */
    const char *body; /* memory body (signed with its sha256) */
    size_t body_len;
    int has_body;
    int fd; /* file body (UNSIGNED-PAYLOAD), borrowed */
    uint64_t fd_off, fd_len;
    const int *cancel; /* PUT: stop (-ECANCELED) once it reads non-zero; borrowed */
    enum s3_retry retry;
    int nf_rc;                   /* the error of a 404 without a body (HEAD) */
    const struct be_sink *sink;  /* GET: stream 2xx bodies here */
    uint64_t want_off, want_len; /* GET: asked range (to apply when a 200 ignores Range) */
    int ranged;
    /* per attempt */
    uint64_t up_pos;
    long status;
    struct buf hdrs;     /* the final response's header lines */
    struct buf body_out; /* 2xx body (no sink) or the error body */
    int read_rc, sink_rc, meta_sent;
    uint64_t delivered;  /* body bytes handed to the sink (all attempts) */
    uint64_t skip, left; /* 200-for-a-range: bytes to drop, bytes still wanted */
    int done_early;
    /* result */
    char code[64]; /* upstream <Code> of an error */
    char message[160];
};

/* be_s3_parse.c: what an upstream answers (dates, ETags, escapes) and the bounded XML reader */
char *s3_strdup0(const char *s);
void s3_copy(char *dst, size_t cap, const char *s, size_t n);
int s3_is_md5_hex(const char *s);
void s3_md5_b64(const char *hex, char out[32]);
char *s3_url_decode(const char *s, size_t n, int plus);
int64_t s3_parse_iso8601(const char *s);
int64_t s3_parse_http_date(const char *s);
void s3_etag_unquote(const char *s, size_t n, char *out, size_t cap);
const char *s3x_find(const char *p, const char *end, const char *tag, const char **vs,
                     const char **ve);
char *s3x_text(const char *s, const char *e);
int s3x_get(const char *p, const char *end, const char *tag, char *out, size_t cap);
uint64_t s3x_u64(const char *p, const char *end, const char *tag);
int s3x_bool(const char *p, const char *end, const char *tag);
void s3x_etag(const char *p, const char *end, char *out, size_t cap);

/* be_s3_call.c: one call: build, sign, run with retries, read the answer */
struct s3_call *s3_call_new(struct s3be *be, const char *method, const char *bucket,
                            const char *key);
void s3_call_free(struct s3_call *c);
void s3_hdr(struct s3_call *c, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void s3_query(struct s3_call *c, const char *name, const char *value);
void s3_query_u(struct s3_call *c, const char *name, uint64_t v);
void s3_hdr_meta(struct s3_call *c, const struct be_meta *m);
int s3_resp_hdr(const struct s3_call *c, const char *name, char *out, size_t cap);
void s3_parse_meta(const struct s3_call *c, struct be_meta *m);
int s3_call_run(struct s3_call *c);
int s3_body_error(struct s3_call *c);

#endif
