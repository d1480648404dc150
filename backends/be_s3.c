/*
 * be_s3.c: any S3 endpoint as the backing store, over libcurl (the only
 * backend that includes <curl/curl.h>). Owns a pool of curl easy handles (so
 * keep-alive connections are reused), SigV4 signing of upstream requests
 * (sigv4_sign), retries with backoff for idempotent requests, the mapping of
 * upstream answers to -S3E_*, and a tiny bounded XML tag reader for S3's
 * response bodies. It counts nothing: backend.c's wrappers do.
 *   one op = s3_call_new -> headers/query/body -> s3_call_run (attempts: sign,
 *   perform, classify, back off) -> parse -> s3_call_free
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "backend.h"
#include "buf.h"
#include "conf.h"
#include "log.h"
#include "s3c.h"
#include "s3err.h"
#include "sigv4.h"

#define S3BE_MAGIC 0x53b3e0a1
#define S3CALL_MAGIC 0x53ca11ed

#define S3_POOL_MAX 64                    /* idle easy handles kept (each keeps its connection) */
#define S3_MAX_QUERY 12
#define S3_MAX_HDRS 48
#define S3_ARENA 16384                    /* header names/values and query strings of one call */
#define S3_ERRBODY_MAX (64u << 10)        /* an error answer's XML */
#define S3_BODY_MAX (32u << 20)           /* a listing or result XML */
#define S3_HDRS_MAX (64u << 10)           /* response header block */
#define S3_ATTEMPTS 4                     /* 1 try + 3 retries: 100 ms, 400 ms, 1.6 s (+-50%) */
#define S3_BACKOFF_MS 100
#define S3_MP_THRESHOLD (64ull << 20)     /* put() above this: multipart upload upstream */
#define S3_MP_PART_SIZE (16ull << 20)
#define S3_MP_PARALLEL 4
#define S3_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct s3be {
    unsigned magic;
    int https;
    char host[256];     /* as in the URL; IPv6 literals keep their brackets */
    int port;
    char hostport[300]; /* Host header value (port omitted when the scheme's default) */
    char base[320];     /* scheme://host[:port] */
    char *access_key, *secret_key, *region, *ca_file;
    int anonymous, virtual_host, insecure;
    long timeout_ms;
    const int *stopping; /* the struct backend's: backend_stop() */
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
    int overflow;               /* a header or query did not fit: -ENAMETOOLONG */
    const char *body;           /* memory body (signed with its sha256) */
    size_t body_len;
    int has_body;
    int fd;                     /* file body (UNSIGNED-PAYLOAD), borrowed */
    uint64_t fd_off, fd_len;
    const int *cancel;          /* PUT: stop (-ECANCELED) once it reads non-zero; borrowed */
    enum s3_retry retry;
    int nf_rc;                  /* the error of a 404 without a body (HEAD) */
    const struct be_sink *sink; /* GET: stream 2xx bodies here */
    uint64_t want_off, want_len; /* GET: asked range (to apply when a 200 ignores Range) */
    int ranged;
    /* per attempt */
    uint64_t up_pos;
    long status;
    struct buf hdrs;            /* the final response's header lines */
    struct buf body_out;        /* 2xx body (no sink) or the error body */
    int read_rc, sink_rc, meta_sent;
    uint64_t delivered;         /* body bytes handed to the sink (all attempts) */
    uint64_t skip, left;        /* 200-for-a-range: bytes to drop, bytes still wanted */
    int done_early;
    /* result */
    char code[64];              /* upstream <Code> of an error */
    char message[160];
};

/* ---- small helpers --------------------------------------------------------------------- */

static pthread_once_t s3_once = PTHREAD_ONCE_INIT;
static int s3_global_rc;

static void s3_global_init(void)
{
    s3_global_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -ENOMEM;
}

static char *s3_strdup0(const char *s)
{
    return (s && *s) ? strdup(s) : NULL;
}

static void s3_copy(char *dst, size_t cap, const char *s, size_t n)
{
    if (!cap)
        return;
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, s, n);
    dst[n] = '\0';
}

static int s3_is_md5_hex(const char *s)
{
    size_t i;
    for (i = 0; s[i]; i++)
        if (!isxdigit((unsigned char)s[i]))
            return 0;
    return i == 32;
}

static int s3_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Base64 of the 16 bytes that @hex (32 hex digits) spells: the Content-MD5 header value. */
static void s3_md5_b64(const char *hex, char out[32])
{
    unsigned char bin[16];
    for (int i = 0; i < 16; i++)
        bin[i] = (unsigned char)(s3_hexval(hex[2 * i]) << 4 | s3_hexval(hex[2 * i + 1]));
    EVP_EncodeBlock((unsigned char *)out, bin, 16);
}

/* Percent-decodes @s[0..n) into a malloc'd string; '+' is a space when
 * @plus (S3's encoding-type=url). NULL on ENOMEM. */
static char *s3_url_decode(const char *s, size_t n, int plus)
{
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        int a, b;
        if (s[i] == '%' && i + 2 < n &&
            (a = s3_hexval((unsigned char)s[i + 1])) >= 0 &&
            (b = s3_hexval((unsigned char)s[i + 2])) >= 0) {
            *o++ = (char)(a << 4 | b);
            i += 2;
        } else if (plus && s[i] == '+') {
            *o++ = ' ';
        } else {
            *o++ = s[i];
        }
    }
    *o = '\0';
    return out;
}

/* "2009-10-12T17:50:30.000Z" -> ns since the epoch; 0 when unparsable. */
static int64_t s3_parse_iso8601(const char *s)
{
    struct tm tm;
    int y, mo, d, h, mi, sec, n = 0;
    memset(&tm, 0, sizeof(tm));
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6)
        return 0;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return 0;
    int64_t ns = 0, scale = 100000000;
    const char *p = s + n;
    if (*p == '.')
        for (p++; isdigit((unsigned char)*p); p++, scale /= 10)
            ns += (*p - '0') * scale;
    return (int64_t)t * 1000000000ll + ns;
}

static int64_t s3_parse_http_date(const char *s)
{
    time_t t = curl_getdate(s, NULL);
    return t == (time_t)-1 ? 0 : (int64_t)t * 1000000000ll;
}

/* Strips surrounding quotes (and a weak W/ prefix) of an ETag into @out. */
static void s3_etag_unquote(const char *s, size_t n, char *out, size_t cap)
{
    if (n >= 2 && s[0] == 'W' && s[1] == '/') {
        s += 2;
        n -= 2;
    }
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
        s++;
        n -= 2;
    }
    s3_copy(out, cap, s, n);
}

/* ---- the XML reader: <Tag>text</Tag>, bounded, no nesting of the same name ---------------- */

/* Finds the next element @tag in [p, end): sets its inner text span and returns the position
 * after it, or NULL. Matches "<Tag>", "<Tag attr=..>" and "<Tag/>" (empty). */
static const char *s3x_find(const char *p, const char *end, const char *tag, const char **vs,
                            const char **ve)
{
    size_t tl = strlen(tag);
    while (p && p < end) {
        const char *lt = memchr(p, '<', (size_t)(end - p));
        if (!lt)
            return NULL;
        const char *nm = lt + 1;
        if ((size_t)(end - nm) > tl && !memcmp(nm, tag, tl) &&
            (nm[tl] == '>' || nm[tl] == ' ' || nm[tl] == '/' || nm[tl] == '\t' ||
             nm[tl] == '\n' || nm[tl] == '\r')) {
            const char *gt = memchr(nm + tl, '>', (size_t)(end - nm - tl));
            if (!gt)
                return NULL;
            if (gt[-1] == '/') {
                *vs = *ve = gt;
                return gt + 1;
            }
            const char *q = gt + 1;
            while (q < end) {
                const char *c = memchr(q, '<', (size_t)(end - q));
                if (!c)
                    return NULL;
                if ((size_t)(end - c) >= tl + 3 && c[1] == '/' && !memcmp(c + 2, tag, tl) &&
                    c[2 + tl] == '>') {
                    *vs = gt + 1;
                    *ve = c;
                    return c + 3 + tl;
                }
                q = c + 1;
            }
            return NULL;
        }
        p = lt + 1;
    }
    return NULL;
}

/* Decodes the XML text [s, e) (entities &lt; &gt; &amp; &quot; &apos; &#N; &#xN;) into a
 * malloc'd string; NULL on ENOMEM. */
static char *s3x_text(const char *s, const char *e)
{
    size_t n = (size_t)(e - s);
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    while (s < e) {
        if (*s != '&') {
            *o++ = *s++;
            continue;
        }
        const char *semi = memchr(s, ';', (size_t)(e - s));
        size_t el = semi ? (size_t)(semi - s) : 0;
        static const struct { const char *name; char c; } ents[] = {
            {"&lt", '<'}, {"&gt", '>'}, {"&amp", '&'}, {"&quot", '"'}, {"&apos", '\''},
        };
        int done = 0;
        for (size_t i = 0; semi && i < ARRAY_SIZE(ents) && !done; i++)
            if (el == strlen(ents[i].name) && !memcmp(s, ents[i].name, el)) {
                *o++ = ents[i].c;
                done = 1;
            }
        if (!done && semi && el > 2 && s[1] == '#') {
            unsigned long cp = (s[2] == 'x' || s[2] == 'X') ? strtoul(s + 3, NULL, 16)
                                                            : strtoul(s + 2, NULL, 10);
            if (cp > 0 && cp < 0x80) {
                *o++ = (char)cp;
            } else if (cp < 0x800) {
                *o++ = (char)(0xc0 | (cp >> 6));
                *o++ = (char)(0x80 | (cp & 0x3f));
            } else if (cp < 0x10000) {
                *o++ = (char)(0xe0 | (cp >> 12));
                *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
                *o++ = (char)(0x80 | (cp & 0x3f));
            } else if (cp < 0x110000) {
                *o++ = (char)(0xf0 | (cp >> 18));
                *o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
                *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
                *o++ = (char)(0x80 | (cp & 0x3f));
            }
            done = 1;
        }
        if (done) {
            s = semi + 1;
        } else {
            *o++ = *s++;
        }
    }
    *o = '\0';
    return out;
}

/* The decoded text of the first @tag in [p, end) into @out (truncated to @cap). 0 or -ENOENT
 * / -ENOMEM. */
static int s3x_get(const char *p, const char *end, const char *tag, char *out, size_t cap)
{
    const char *vs, *ve;
    if (!s3x_find(p, end, tag, &vs, &ve))
        return -ENOENT;
    char *t = s3x_text(vs, ve);
    if (!t)
        return -ENOMEM;
    s3_copy(out, cap, t, strlen(t));
    free(t);
    return 0;
}

static uint64_t s3x_u64(const char *p, const char *end, const char *tag)
{
    char tmp[32];
    if (s3x_get(p, end, tag, tmp, sizeof(tmp)))
        return 0;
    return strtoull(tmp, NULL, 10);
}

static int s3x_bool(const char *p, const char *end, const char *tag)
{
    char tmp[16];
    if (s3x_get(p, end, tag, tmp, sizeof(tmp)))
        return 0;
    return !strcmp(tmp, "true");
}

static void s3x_etag(const char *p, const char *end, char *out, size_t cap)
{
    char tmp[BE_ETAG_MAX + 8];
    out[0] = '\0';
    if (!s3x_get(p, end, "ETag", tmp, sizeof(tmp)))
        s3_etag_unquote(tmp, strlen(tmp), out, cap);
}

/* ---- the handle pool ------------------------------------------------------------------ */

static CURL *s3_handle_get(struct s3be *be)
{
    CURL *h = NULL;
    pthread_mutex_lock(&be->mu);
    if (be->n_idle)
        h = be->idle[--be->n_idle];
    pthread_mutex_unlock(&be->mu);
    if (h) {
        curl_easy_reset(h); /* keeps the connection, DNS and TLS session caches */
        return h;
    }
    return curl_easy_init();
}

static void s3_handle_put(struct s3be *be, CURL *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&be->mu);
    if (be->n_idle < S3_POOL_MAX) {
        be->idle[be->n_idle++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&be->mu);
    if (h)
        curl_easy_cleanup(h);
}

/* ---- one call --------------------------------------------------------------------------- */

static struct s3_call *s3_call_new(struct s3be *be, const char *method, const char *bucket,
                                   const char *key)
{
    struct s3_call *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->magic = S3CALL_MAGIC;
    c->be = be;
    c->method = method;
    c->bucket = bucket;
    c->key = key;
    c->fd = -1;
    c->retry = S3_RETRY_IDEMPOTENT;
    c->nf_rc = key ? -S3E_NO_SUCH_KEY : -S3E_NO_SUCH_BUCKET;
    buf_init(&c->hdrs, S3_HDRS_MAX);
    buf_init(&c->body_out, S3_BODY_MAX);
    return c;
}

static void s3_call_free(struct s3_call *c)
{
    if (!c)
        return;
    s3_handle_put(c->be, c->h);
    buf_free(&c->hdrs);
    buf_free(&c->body_out);
    c->magic = 0;
    free(c);
}

static const char *s3_arena_vprintf(struct s3_call *c, const char *fmt, va_list ap)
{
    size_t room = sizeof(c->arena) - c->arena_len;
    int n = vsnprintf(c->arena + c->arena_len, room, fmt, ap);
    if (n < 0 || (size_t)n >= room) {
        c->overflow = 1;
        return NULL;
    }
    const char *s = c->arena + c->arena_len;
    c->arena_len += (size_t)n + 1;
    return s;
}

static const char *s3_arena_printf(struct s3_call *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static const char *s3_arena_printf(struct s3_call *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *s = s3_arena_vprintf(c, fmt, ap);
    va_end(ap);
    return s;
}

/* Adds request header @name with a printf value. Values with CR or LF are dropped (they
 * cannot come from a parsed request; refuse to forge headers anyway). */
static void s3_hdr(struct s3_call *c, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void s3_hdr(struct s3_call *c, const char *name, const char *fmt, ...)
{
    va_list ap;
    if (c->n_hdr >= S3_MAX_HDRS) {
        c->overflow = 1;
        return;
    }
    va_start(ap, fmt);
    const char *v = s3_arena_vprintf(c, fmt, ap);
    va_end(ap);
    const char *n = s3_arena_printf(c, "%s", name);
    if (!v || !n)
        return;
    if (strpbrk(v, "\r\n"))
        return;
    c->hdr[c->n_hdr].name = n;
    c->hdr[c->n_hdr].value = v;
    c->n_hdr++;
}

/* Adds query parameter @name (decoded) with value @value (decoded; NULL = no '='). */
static void s3_query(struct s3_call *c, const char *name, const char *value)
{
    if (c->n_query >= S3_MAX_QUERY) {
        c->overflow = 1;
        return;
    }
    const char *n = s3_arena_printf(c, "%s", name);
    const char *v = value ? s3_arena_printf(c, "%s", value) : NULL;
    if (!n || (value && !v))
        return;
    c->query[c->n_query].name = n;
    c->query[c->n_query].value = v;
    c->n_query++;
}

static void s3_query_u(struct s3_call *c, const char *name, uint64_t v)
{
    char tmp[24];
    snprintf(tmp, sizeof(tmp), "%" PRIu64, v);
    s3_query(c, name, tmp);
}

/* The headers of an object to be (PUT, multipart create, copy REPLACE). */
static void s3_hdr_meta(struct s3_call *c, const struct be_meta *m)
{
    static const struct { const char *name; size_t off; } hs[] = {
        {"Content-Type", offsetof(struct be_meta, content_type)},
        {"Cache-Control", offsetof(struct be_meta, cache_control)},
        {"Content-Disposition", offsetof(struct be_meta, content_disposition)},
        {"Content-Encoding", offsetof(struct be_meta, content_encoding)},
        {"Content-Language", offsetof(struct be_meta, content_language)},
        {"Expires", offsetof(struct be_meta, expires)},
    };
    for (size_t i = 0; i < ARRAY_SIZE(hs); i++) {
        const char *v = (const char *)m + hs[i].off;
        if (*v)
            s3_hdr(c, hs[i].name, "%s", v);
    }
    const char *p = m->usermeta;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t ll = nl ? (size_t)(nl - p) : strlen(p);
        const char *colon = memchr(p, ':', ll);
        if (colon && colon > p) {
            const char *n = s3_arena_printf(c, "x-amz-meta-%.*s", (int)(colon - p), p);
            const char *v = s3_arena_printf(c, "%.*s", (int)(ll - (size_t)(colon - p) - 1),
                                            colon + 1);
            if (c->n_hdr >= S3_MAX_HDRS)
                c->overflow = 1;
            else if (n && v && !strpbrk(v, "\r\n")) {
                c->hdr[c->n_hdr].name = n;
                c->hdr[c->n_hdr].value = v;
                c->n_hdr++;
            }
        }
        p += ll + (nl ? 1 : 0);
    }
}

/* The Content-Type header of a POST must be ours: curl would add a form type. */
static int s3_has_hdr(const struct s3_call *c, const char *name)
{
    for (size_t i = 0; i < c->n_hdr; i++)
        if (!strcasecmp(c->hdr[i].name, name))
            return 1;
    return 0;
}

/* Path (decoded, for signing) and URL of the call. */
static int s3_build_target(struct s3_call *c, char *path, size_t pcap, struct buf *url,
                           char *host, size_t hcap)
{
    struct s3be *be = c->be;
    int n;
    if (be->virtual_host && c->bucket) {
        n = snprintf(path, pcap, "/%s", c->key ? c->key : "");
        snprintf(host, hcap, "%s.%s", c->bucket, be->hostport);
    } else {
        if (!c->bucket)
            n = snprintf(path, pcap, "/");
        else if (!c->key)
            n = snprintf(path, pcap, "/%s", c->bucket);
        else
            n = snprintf(path, pcap, "/%s/%s", c->bucket, c->key);
        snprintf(host, hcap, "%s", be->hostport);
    }
    if (n < 0 || (size_t)n >= pcap)
        return -ENAMETOOLONG;
    char enc[8192];
    if (sigv4_uri_encode(path, strlen(path), 1, enc, sizeof(enc)) < 0)
        return -ENAMETOOLONG;
    int rc;
    if (be->virtual_host && c->bucket)
        rc = buf_printf(url, "%s://%s.%s%s", be->https ? "https" : "http", c->bucket,
                        be->base + (be->https ? 8 : 7), enc);
    else
        rc = buf_printf(url, "%s%s", be->base, enc);
    for (size_t i = 0; !rc && i < c->n_query; i++) {
        rc = buf_puts(url, i ? "&" : "?");
        if (sigv4_uri_encode(c->query[i].name, strlen(c->query[i].name), 0, enc, sizeof(enc)) < 0)
            return -ENAMETOOLONG;
        if (!rc)
            rc = buf_puts(url, enc);
        if (!rc && c->query[i].value) {
            if (sigv4_uri_encode(c->query[i].value, strlen(c->query[i].value), 0, enc,
                                 sizeof(enc)) < 0)
                return -ENAMETOOLONG;
            rc = buf_printf(url, "=%s", enc);
        }
    }
    return rc;
}

/* ---- curl callbacks --------------------------------------------------------------------- */

static size_t s3_read_cb(char *dst, size_t size, size_t nitems, void *ud)
{
    struct s3_call *c;
    CAST_OBJ_NOTNULL(c, ud, S3CALL_MAGIC);
    size_t want = size * nitems;
    uint64_t total = c->fd >= 0 ? c->fd_len : c->body_len;
    if (c->up_pos >= total)
        return 0;
    if (want > total - c->up_pos)
        want = (size_t)(total - c->up_pos);
    if (c->cancel && __atomic_load_n(c->cancel, __ATOMIC_RELAXED)) {
        c->read_rc = -ECANCELED;
        return CURL_READFUNC_ABORT;
    }
    if (c->fd < 0) {
        memcpy(dst, c->body + c->up_pos, want);
        c->up_pos += want;
        return want;
    }
    ssize_t n;
    do {
        n = pread(c->fd, dst, want, (off_t)(c->fd_off + c->up_pos));
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
        c->read_rc = n < 0 ? -errno : -EIO; /* a file shorter than announced */
        return CURL_READFUNC_ABORT;
    }
    c->up_pos += (uint64_t)n;
    return (size_t)n;
}

static int s3_stopping(const struct s3be *be)
{
    return be->stopping && __atomic_load_n(be->stopping, __ATOMIC_RELAXED);
}

/* A PUT whose whole body has been handed to libcurl may be applied by the upstream whatever we
 * do next: it is no longer cancelled, but waited for. Cut then, it could land after a later
 * request of the key (a DELETE that superseded it) and bring the object back. */
static int s3_body_unsent(const struct s3_call *c)
{
    return c->up_pos < (c->fd >= 0 ? c->fd_len : (uint64_t)c->body_len);
}

/* Every call is cancellable: libcurl calls this about once a second, also while connecting
 * or stalled on a full socket (when no read or write callback is called). A PUT's cancel
 * flag ends it with -ECANCELED while its body is not all sent; backend_stop() ends any call
 * as unavailable. */
static int s3_xferinfo_cb(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                          curl_off_t ulnow)
{
    struct s3_call *c;
    CAST_OBJ_NOTNULL(c, ud, S3CALL_MAGIC);
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    if (c->cancel && __atomic_load_n(c->cancel, __ATOMIC_RELAXED) && s3_body_unsent(c)) {
        c->read_rc = -ECANCELED;
        return 1;
    }
    if (s3_stopping(c->be)) {
        c->read_rc = -S3E_SERVICE_UNAVAILABLE;
        return 1;
    }
    return 0;
}

static int s3_seek_cb(void *ud, curl_off_t offset, int origin)
{
    struct s3_call *c;
    CAST_OBJ_NOTNULL(c, ud, S3CALL_MAGIC);
    if (origin != SEEK_SET || offset < 0)
        return CURL_SEEKFUNC_CANTSEEK;
    c->up_pos = (uint64_t)offset;
    return CURL_SEEKFUNC_OK;
}

static size_t s3_header_cb(char *p, size_t size, size_t nitems, void *ud)
{
    struct s3_call *c;
    CAST_OBJ_NOTNULL(c, ud, S3CALL_MAGIC);
    size_t n = size * nitems;
    if (n >= 5 && !memcmp(p, "HTTP/", 5)) { /* a new response (after 100 Continue, ...) */
        buf_reset(&c->hdrs);
        const char *sp = memchr(p, ' ', n);
        c->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        return n;
    }
    if (buf_append(&c->hdrs, p, n))
        return 0; /* absurd header block: abort */
    return n;
}

/* Value of response header @name (case-insensitive) into @out; 0 or -ENOENT. */
static int s3_resp_hdr(const struct s3_call *c, const char *name, char *out, size_t cap)
{
    const char *p = c->hdrs.p, *end = c->hdrs.p + c->hdrs.len;
    size_t nl = strlen(name);
    while (p && p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *le = eol ? eol : end;
        if ((size_t)(le - p) > nl && p[nl] == ':' && !strncasecmp(p, name, nl)) {
            const char *v = p + nl + 1;
            while (v < le && (*v == ' ' || *v == '\t'))
                v++;
            const char *ve = le;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            s3_copy(out, cap, v, (size_t)(ve - v));
            return 0;
        }
        p = eol ? eol + 1 : end;
    }
    return -ENOENT;
}

/* Response headers -> @m (HEAD, GET). @total: the whole object's size (Content-Range total
 * for a 206, else Content-Length). */
static void s3_parse_meta(const struct s3_call *c, struct be_meta *m)
{
    char v[600];
    memset(m, 0, sizeof(*m));
    if (!s3_resp_hdr(c, "Content-Length", v, sizeof(v)))
        m->size = strtoull(v, NULL, 10);
    if (c->status == 206 && !s3_resp_hdr(c, "Content-Range", v, sizeof(v))) {
        const char *slash = strchr(v, '/');
        if (slash && slash[1] != '*')
            m->size = strtoull(slash + 1, NULL, 10);
    }
    if (!s3_resp_hdr(c, "ETag", v, sizeof(v)))
        s3_etag_unquote(v, strlen(v), m->etag, sizeof(m->etag));
    if (!s3_resp_hdr(c, "Last-Modified", v, sizeof(v)))
        m->mtime_ns = s3_parse_http_date(v);
    s3_resp_hdr(c, "Content-Type", m->content_type, sizeof(m->content_type));
    s3_resp_hdr(c, "Cache-Control", m->cache_control, sizeof(m->cache_control));
    s3_resp_hdr(c, "Content-Disposition", m->content_disposition,
                sizeof(m->content_disposition));
    s3_resp_hdr(c, "Content-Encoding", m->content_encoding, sizeof(m->content_encoding));
    s3_resp_hdr(c, "Content-Language", m->content_language, sizeof(m->content_language));
    s3_resp_hdr(c, "Expires", m->expires, sizeof(m->expires));
    if (!s3_resp_hdr(c, "x-amz-mp-parts-count", v, sizeof(v)))
        m->parts_count = (uint32_t)strtoul(v, NULL, 10);
    else if (strchr(m->etag, '-'))
        m->parts_count = (uint32_t)strtoul(strchr(m->etag, '-') + 1, NULL, 10);
    static const char *const algos[] = {"CRC32", "CRC32C", "SHA1", "SHA256"};
    for (size_t i = 0; i < ARRAY_SIZE(algos); i++) {
        char hn[32];
        snprintf(hn, sizeof(hn), "x-amz-checksum-%s", algos[i]);
        if (!s3_resp_hdr(c, hn, m->checksum, sizeof(m->checksum))) {
            snprintf(m->checksum_algo, sizeof(m->checksum_algo), "%s", algos[i]);
            break;
        }
    }
    /* x-amz-meta-*: "name:value\n", name lower case. */
    const char *p = c->hdrs.p, *end = c->hdrs.p + c->hdrs.len;
    size_t um = 0;
    while (p && p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *le = eol ? eol : end;
        if ((size_t)(le - p) > 11 && !strncasecmp(p, "x-amz-meta-", 11)) {
            const char *colon = memchr(p, ':', (size_t)(le - p));
            if (colon) {
                const char *vs = colon + 1, *ve = le;
                while (vs < ve && (*vs == ' ' || *vs == '\t'))
                    vs++;
                while (ve > vs && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                    ve--;
                size_t nn = (size_t)(colon - p - 11), vn = (size_t)(ve - vs);
                if (um + nn + vn + 3 <= sizeof(m->usermeta)) {
                    for (size_t i = 0; i < nn; i++)
                        m->usermeta[um++] = (char)tolower((unsigned char)p[11 + i]);
                    m->usermeta[um++] = ':';
                    memcpy(m->usermeta + um, vs, vn);
                    um += vn;
                    m->usermeta[um++] = '\n';
                    m->usermeta[um] = '\0';
                }
            }
        }
        p = eol ? eol + 1 : end;
    }
}

static size_t s3_write_cb(char *p, size_t size, size_t nitems, void *ud)
{
    struct s3_call *c;
    CAST_OBJ_NOTNULL(c, ud, S3CALL_MAGIC);
    size_t n = size * nitems;
    if (c->status < 200 || c->status > 299) {
        if (c->body_out.len + n > S3_ERRBODY_MAX)
            return n; /* keep the head of an error body, drop the rest */
        return buf_append(&c->body_out, p, n) ? 0 : n;
    }
    if (!c->sink)
        return buf_append(&c->body_out, p, n) ? 0 : n;
    if (!c->meta_sent) {
        struct be_meta m;
        s3_parse_meta(c, &m);
        /* Deliver at most what was asked; when the upstream ignored Range (200), cut the
         * asked window out of the whole body ourselves. */
        c->skip = (c->ranged && c->status == 200) ? c->want_off : 0;
        c->left = c->ranged ? c->want_len : UINT64_MAX;
        c->meta_sent = 1;
        if (c->sink->on_meta) {
            int rc = c->sink->on_meta(c->sink->cls, &m);
            if (rc) {
                c->sink_rc = rc;
                return 0;
            }
        }
    }
    const char *d = p;
    size_t dn = n;
    if (c->skip) {
        size_t s = c->skip < dn ? (size_t)c->skip : dn;
        c->skip -= s;
        d += s;
        dn -= s;
    }
    if (dn && c->left == 0) {
        c->done_early = 1;
        return 0; /* we have all we asked for: stop the transfer */
    }
    if (dn > c->left)
        dn = (size_t)c->left;
    if (dn) {
        int rc = c->sink->on_data(c->sink->cls, d, dn);
        if (rc) {
            c->sink_rc = rc;
            return 0;
        }
        c->delivered += dn;
        if (c->left != UINT64_MAX)
            c->left -= dn;
    }
    return n;
}

/* ---- error mapping ------------------------------------------------------------------------ */

static int s3_code_to_err(const char *code)
{
    static const struct { const char *code; int rc; } tbl[] = {
#define X(sym, status, code, msg) {code, -S3E_##sym},
        S3ERR_TABLE(X)
#undef X
    };
    for (size_t i = 0; i < ARRAY_SIZE(tbl); i++)
        if (!strcmp(tbl[i].code, code))
            return tbl[i].rc;
    return 0;
}

/* The -S3E_* for a non-2xx answer (after retries). */
static int s3_status_to_err(struct s3_call *c)
{
    const char *b = c->body_out.p, *e = b + c->body_out.len;
    if (b && !c->code[0]) {
        s3x_get(b, e, "Code", c->code, sizeof(c->code));
        s3x_get(b, e, "Message", c->message, sizeof(c->message));
    }
    int rc = c->code[0] ? s3_code_to_err(c->code) : 0;
    switch (c->status) {
    case 304:
        return -S3E_NOT_MODIFIED;
    case 412:
        return -S3E_PRECONDITION_FAILED;
    case 416:
        return -S3E_INVALID_RANGE;
    case 403:
        /* A HEAD's 403 has no body, hence no code: say so rather than print nothing. */
        log_warn("be_s3: upstream %s rejected the gateway's request: %s %s/%s: %ld %s%s%s "
                 "(check --backend-access-key/--backend-secret-key and the key's permissions)",
                 c->be->base, c->method, c->bucket ? c->bucket : "", c->key ? c->key : "",
                 c->status, c->code[0] ? c->code : "(no error body)", c->message[0] ? " " : "",
                 c->message);
        return -S3E_ACCESS_DENIED;
    case 404:
        if (rc == -S3E_NO_SUCH_KEY || rc == -S3E_NO_SUCH_BUCKET || rc == -S3E_NO_SUCH_UPLOAD)
            return rc;
        return c->nf_rc;
    case 409:
        if (!strcmp(c->code, "BucketAlreadyExists"))
            return -S3E_BUCKET_ALREADY_OWNED;
        return rc ? rc : -S3E_KEY_CONFLICT;
    case 411:
        return -S3E_MISSING_CONTENT_LENGTH;
    case 429:
        return -S3E_SLOW_DOWN;
    case 501:
        return -S3E_NOT_IMPLEMENTED;
    default:
        break;
    }
    if (c->status >= 500) {
        log_warn("be_s3: upstream failing: %s %s/%s: %ld %s %s", c->method,
                 c->bucket ? c->bucket : "", c->key ? c->key : "", c->status,
                 c->code[0] ? c->code : "-", c->message);
        return rc == -S3E_SLOW_DOWN ? rc : -S3E_SERVICE_UNAVAILABLE;
    }
    if (c->status >= 400) {
        if (rc && rc != -S3E_ACCESS_DENIED && rc != -S3E_SERVICE_UNAVAILABLE)
            return rc;
        return -S3E_BAD_REQUEST;
    }
    log_warn("be_s3: unexpected upstream answer: %s %s/%s: %ld %s", c->method,
             c->bucket ? c->bucket : "", c->key ? c->key : "", c->status, c->code);
    return -S3E_INTERNAL;
}

static int s3_curl_to_err(struct s3_call *c, CURLcode cc)
{
    switch (cc) {
    case CURLE_OPERATION_TIMEDOUT:
        return -S3E_GATEWAY_TIMEOUT;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    case CURLE_URL_MALFORMAT:
        return -EINVAL;
    default:
        break;
    }
    log_warn("be_s3: %s %s/%s: %s", c->method, c->bucket ? c->bucket : "",
             c->key ? c->key : "", curl_easy_strerror(cc));
    return -S3E_SERVICE_UNAVAILABLE;
}

/* ---- running a call --------------------------------------------------------------------- */

static uint64_t s3_rand(void)
{
    static __thread uint64_t x;
    if (!x)
        x = s3c_mono_ns() ^ ((uint64_t)(uintptr_t)&x << 17) ^ 0x9e3779b97f4a7c15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

static void s3_backoff(int attempt)
{
    uint64_t ms = (uint64_t)S3_BACKOFF_MS << (2 * attempt); /* 100, 400, 1600 */
    ms = ms / 2 + s3_rand() % (ms + 1);                        /* +-50% */
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000l};
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

static int s3_retryable_curl(CURLcode cc)
{
    switch (cc) {
    /* Not CURLE_OPERATION_TIMEDOUT: that attempt already waited the whole --backend-timeout
     * (connect, or no byte for that long), and the client is waiting behind it; a stalled
     * upstream must cost one timeout, not S3_ATTEMPTS of them. */
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
        return 1;
    default:
        return 0;
    }
}

/* One attempt: sign, perform. Returns the CURLcode; response state in @c. */
static CURLcode s3_attempt(struct s3_call *c, int *rc_out)
{
    struct s3be *be = c->be;
    char path[4200], host[400], amz_date[20], sha[65], authz[1024];
    struct buf url;
    struct curl_slist *sl = NULL;
    CURLcode cc = CURLE_OK;
    *rc_out = 0;
    buf_init(&url, 16384);

    buf_reset(&c->hdrs);
    buf_reset(&c->body_out);
    c->status = 0;
    c->up_pos = 0;
    c->read_rc = c->sink_rc = c->meta_sent = c->done_early = 0;
    c->code[0] = c->message[0] = '\0';

    int rc = s3_build_target(c, path, sizeof(path), &url, host, sizeof(host));
    if (rc) {
        *rc_out = rc;
        goto out;
    }
    /* The signed header set: ours plus host, x-amz-date, x-amz-content-sha256. */
    struct sigv4_kv hs[S3_MAX_HDRS + 3];
    size_t nh = 0;
    for (size_t i = 0; i < c->n_hdr; i++)
        hs[nh++] = c->hdr[i];
    hs[nh++] = (struct sigv4_kv){"host", host};
    if (!be->anonymous) {
        struct tm tm;
        time_t now = time(NULL);
        gmtime_r(&now, &tm);
        strftime(amz_date, sizeof(amz_date), "%Y%m%dT%H%M%SZ", &tm);
        if (c->fd >= 0)
            snprintf(sha, sizeof(sha), "UNSIGNED-PAYLOAD");
        else if (c->has_body && c->body_len)
            sigv4_sha256_hex(c->body, c->body_len, sha);
        else
            snprintf(sha, sizeof(sha), "%s", S3_EMPTY_SHA256);
        hs[nh++] = (struct sigv4_kv){"x-amz-date", amz_date};
        hs[nh++] = (struct sigv4_kv){"x-amz-content-sha256", sha};
        struct sigv4_input in = {.method = c->method, .path = path, .query = c->query,
                                 .n_query = c->n_query, .headers = hs, .n_headers = nh};
        rc = sigv4_sign(&in, be->access_key, be->secret_key, be->region, "s3", amz_date, sha,
                        authz, sizeof(authz));
        if (rc) {
            *rc_out = rc;
            goto out;
        }
    }
    for (size_t i = 0; i < nh; i++) {
        char line[8192];
        /* "Name:" alone would make curl drop the header (signed: SignatureDoesNotMatch);
         * "Name;" is curl's way of sending it with an empty value (x-amz-meta-a:). */
        if (hs[i].value[0])
            snprintf(line, sizeof(line), "%s: %s", hs[i].name, hs[i].value);
        else
            snprintf(line, sizeof(line), "%s;", hs[i].name);
        struct curl_slist *t = curl_slist_append(sl, line);
        if (!t) {
            *rc_out = -ENOMEM;
            goto out;
        }
        sl = t;
    }
    if (!be->anonymous) {
        char line[1100];
        snprintf(line, sizeof(line), "Authorization: %s", authz);
        struct curl_slist *t = curl_slist_append(sl, line);
        if (!t) {
            *rc_out = -ENOMEM;
            goto out;
        }
        sl = t;
    }
    if (!strcmp(c->method, "POST") && !s3_has_hdr(c, "Content-Type")) {
        struct curl_slist *t = curl_slist_append(sl, "Content-Type:");
        if (t)
            sl = t;
    }

    if (!c->h)
        c->h = s3_handle_get(be);
    if (!c->h) {
        *rc_out = -ENOMEM;
        goto out;
    }
    CURL *h = c->h;
    curl_easy_setopt(h, CURLOPT_URL, url.p);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, sl);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    /* large reads: fewer callbacks and cache writes per byte on cold misses */
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, be->timeout_ms);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, S3C_MAX(1L, (be->timeout_ms + 999) / 1000));
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (be->https) {
        if (be->insecure) {
            curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
            curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
        } else if (be->ca_file) {
            curl_easy_setopt(h, CURLOPT_CAINFO, be->ca_file);
        }
    }
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, s3_header_cb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, s3_write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
    /* set on every use: handles are pooled */
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, s3_xferinfo_cb);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, c);

    if (!strcmp(c->method, "HEAD")) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (!strcmp(c->method, "PUT")) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, s3_read_cb);
        curl_easy_setopt(h, CURLOPT_READDATA, c);
        curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, s3_seek_cb);
        curl_easy_setopt(h, CURLOPT_SEEKDATA, c);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
                         (curl_off_t)(c->fd >= 0 ? c->fd_len : c->body_len));
    } else if (!strcmp(c->method, "POST")) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body ? c->body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->body_len);
    } else if (strcmp(c->method, "GET")) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, c->method);
    }

    cc = curl_easy_perform(h);
    if (cc == CURLE_OK && c->status == 0)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &c->status);
out:
    curl_slist_free_all(sl);
    buf_free(&url);
    return cc;
}

/* Runs @c with retries. 0 on a 2xx answer (body in c->body_out or streamed to the sink),
 * else the mapped error. */
static int s3_call_run(struct s3_call *c)
{
    if (c->overflow)
        return -ENAMETOOLONG;
    for (int attempt = 0;; attempt++) {
        int rc = 0;
        CURLcode cc = s3_attempt(c, &rc);
        if (rc)
            return rc;
        int last = attempt + 1 >= S3_ATTEMPTS;
        if (c->done_early)
            cc = CURLE_OK; /* the write callback stopped a too-long 200 */
        if (cc != CURLE_OK) {
            if (c->sink_rc)
                return c->sink_rc;
            if (c->read_rc)
                return c->read_rc;
            int before_send = cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST;
            int may = s3_retryable_curl(cc) && c->delivered == 0 &&
                      (c->retry == S3_RETRY_IDEMPOTENT || before_send);
            if (!may || last) {
                if (c->delivered)
                    log_warn("be_s3: %s %s/%s failed after %" PRIu64 " body bytes: %s",
                             c->method, c->bucket ? c->bucket : "", c->key ? c->key : "",
                             c->delivered, curl_easy_strerror(cc));
                return s3_curl_to_err(c, cc);
            }
            if (s3_stopping(c->be))
                return -S3E_SERVICE_UNAVAILABLE;
            log_debug("be_s3: %s %s/%s: %s; retrying", c->method, c->bucket ? c->bucket : "",
                      c->key ? c->key : "", curl_easy_strerror(cc));
            s3_backoff(attempt);
            continue;
        }
        if (c->status >= 200 && c->status <= 299) {
            if (c->sink && !c->meta_sent) { /* an empty body: meta still goes first */
                struct be_meta m;
                s3_parse_meta(c, &m);
                c->meta_sent = 1;
                if (c->sink->on_meta) {
                    int src = c->sink->on_meta(c->sink->cls, &m);
                    if (src)
                        return src;
                }
            }
            return 0;
        }
        int transient = c->status >= 500 || c->status == 429;
        if (transient && c->retry == S3_RETRY_IDEMPOTENT && !last && c->status != 501 &&
            !s3_stopping(c->be)) {
            if (c->body_out.p)
                s3x_get(c->body_out.p, c->body_out.p + c->body_out.len, "Code", c->code,
                        sizeof(c->code));
            log_debug("be_s3: %s %s/%s: %ld %s; retrying", c->method,
                      c->bucket ? c->bucket : "", c->key ? c->key : "", c->status, c->code);
            s3_backoff(attempt);
            continue;
        }
        return s3_status_to_err(c);
    }
}

/* A 200 whose body is an <Error> (CopyObject, UploadPartCopy, CompleteMultipartUpload). */
static int s3_body_error(struct s3_call *c)
{
    const char *b = c->body_out.p, *e = b + c->body_out.len, *vs, *ve;
    if (!b || !s3x_find(b, e, "Error", &vs, &ve))
        return 0;
    s3x_get(vs, ve, "Code", c->code, sizeof(c->code));
    s3x_get(vs, ve, "Message", c->message, sizeof(c->message));
    int rc = s3_code_to_err(c->code);
    log_warn("be_s3: %s %s/%s: 200 with error %s %s", c->method, c->bucket ? c->bucket : "",
             c->key ? c->key : "", c->code, c->message);
    if (!rc || rc == -S3E_ACCESS_DENIED)
        rc = rc ? rc : -S3E_SERVICE_UNAVAILABLE;
    return rc;
}

/* ---- open / close -------------------------------------------------------------------------- */

static void s3_free_be(struct s3be *be)
{
    if (!be)
        return;
    for (size_t i = 0; i < be->n_idle; i++)
        curl_easy_cleanup(be->idle[i]);
    pthread_mutex_destroy(&be->mu);
    free(be->access_key);
    free(be->secret_key);
    free(be->region);
    free(be->ca_file);
    free(be);
}

static int s3_parse_url(struct s3be *be, const char *url, struct errmsg *em)
{
    const char *p;
    if (!strncasecmp(url, "http://", 7)) {
        be->https = 0;
        p = url + 7;
    } else if (!strncasecmp(url, "https://", 8)) {
        be->https = 1;
        p = url + 8;
    } else {
        errmsg_set(em, "backend URL \"%s\": scheme must be http:// or https://", url);
        return -EINVAL;
    }
    const char *end = p + strcspn(p, "/?#");
    if (*end && strcmp(end, "/")) {
        errmsg_set(em, "backend URL \"%s\": no path allowed (buckets map 1:1)", url);
        return -EINVAL;
    }
    if (memchr(p, '@', (size_t)(end - p))) {
        errmsg_set(em, "backend URL \"%s\": put credentials in --backend-access-key/"
                       "--backend-secret-key, not the URL", url);
        return -EINVAL;
    }
    const char *hend;
    if (*p == '[') {
        const char *rb = memchr(p, ']', (size_t)(end - p));
        if (!rb) {
            errmsg_set(em, "backend URL \"%s\": unterminated IPv6 address", url);
            return -EINVAL;
        }
        hend = rb + 1;
    } else {
        hend = memchr(p, ':', (size_t)(end - p));
        if (!hend)
            hend = end;
    }
    if (hend == p || (size_t)(hend - p) >= sizeof(be->host)) {
        errmsg_set(em, "backend URL \"%s\": bad host", url);
        return -EINVAL;
    }
    s3_copy(be->host, sizeof(be->host), p, (size_t)(hend - p));
    be->port = be->https ? 443 : 80;
    int explicit_port = 0;
    if (hend < end) {
        if (*hend != ':') {
            errmsg_set(em, "backend URL \"%s\": bad host", url);
            return -EINVAL;
        }
        char *e;
        long port = strtol(hend + 1, &e, 10);
        if (e != end || port < 1 || port > 65535) {
            errmsg_set(em, "backend URL \"%s\": bad port", url);
            return -EINVAL;
        }
        be->port = (int)port;
        explicit_port = 1;
    }
    if (explicit_port && be->port != (be->https ? 443 : 80))
        snprintf(be->hostport, sizeof(be->hostport), "%s:%d", be->host, be->port);
    else
        snprintf(be->hostport, sizeof(be->hostport), "%s", be->host);
    snprintf(be->base, sizeof(be->base), "%s://%s", be->https ? "https" : "http", be->hostport);
    return 0;
}

static int be_s3_open(const struct conf *cf, const char *url, struct backend **out,
                      struct errmsg *em)
{
    *out = NULL;
    pthread_once(&s3_once, s3_global_init);
    if (s3_global_rc) {
        errmsg_set(em, "be_s3: curl_global_init failed");
        return s3_global_rc;
    }
    struct s3be *be = calloc(1, sizeof(*be));
    struct backend *b = calloc(1, sizeof(*b));
    if (!be || !b) {
        free(be);
        free(b);
        errmsg_set(em, "be_s3: out of memory");
        return -ENOMEM;
    }
    be->magic = S3BE_MAGIC;
    pthread_mutex_init(&be->mu, NULL);
    int rc = s3_parse_url(be, url, em);
    if (rc)
        goto fail;
    const char *ak = cf ? cf->backend_access_key : NULL;
    const char *sk = cf ? cf->backend_secret_key : NULL;
    if ((ak && *ak) != (sk && *sk)) {
        errmsg_set(em, "backend: set both --backend-access-key and --backend-secret-key, "
                       "or neither (anonymous)");
        rc = -EINVAL;
        goto fail;
    }
    be->anonymous = !(ak && *ak);
    be->access_key = s3_strdup0(ak);
    be->secret_key = s3_strdup0(sk);
    be->region = strdup(cf && cf->backend_region && *cf->backend_region ? cf->backend_region
                                                                         : "us-east-1");
    be->ca_file = s3_strdup0(cf ? cf->backend_ca_file : NULL);
    be->virtual_host = cf ? cf->backend_virtual_host : 0;
    be->insecure = cf ? cf->backend_insecure : 0;
    be->timeout_ms = (cf && cf->backend_timeout > 0) ? (long)cf->backend_timeout : 30000;
    if (!be->region || (!be->anonymous && (!be->access_key || !be->secret_key))) {
        rc = -ENOMEM;
        errmsg_set(em, "be_s3: out of memory");
        goto fail;
    }
    if (be->https && be->insecure)
        log_warn("backend %s: TLS certificate verification is OFF (--backend-insecure)", url);
    if (be->anonymous)
        log_info("backend %s: no credentials configured, upstream requests are unsigned", url);
    b->magic = BACKEND_MAGIC;
    b->ops = &be_s3_ops;
    b->priv = be;
    be->stopping = &b->stopping;
    *out = b;
    return 0;
fail:
    s3_free_be(be);
    free(b);
    return rc;
}

static void be_s3_close(struct backend *b)
{
    if (!b)
        return;
    struct s3be *be;
    CAST_OBJ_NOTNULL(be, (struct s3be *)b->priv, S3BE_MAGIC);
    s3_free_be(be);
    b->priv = NULL;
    free(b);
}

static struct s3be *s3_be(struct backend *b)
{
    struct s3be *be;
    CHECK_OBJ_NOTNULL(b, BACKEND_MAGIC);
    CAST_OBJ_NOTNULL(be, (struct s3be *)b->priv, S3BE_MAGIC);
    return be;
}

/* ---- objects ---------------------------------------------------------------------------- */

static int be_s3_head(struct backend *b, const char *bucket, const char *key,
                      struct be_meta *out)
{
    struct s3_call *c = s3_call_new(s3_be(b), "HEAD", bucket, key);
    if (!c)
        return -ENOMEM;
    int rc = s3_call_run(c);
    if (!rc)
        s3_parse_meta(c, out);
    s3_call_free(c);
    return rc;
}

static int be_s3_get(struct backend *b, const char *bucket, const char *key, uint64_t off,
                     uint64_t len, const struct be_sink *sink)
{
    struct s3_call *c = s3_call_new(s3_be(b), "GET", bucket, key);
    if (!c)
        return -ENOMEM;
    c->sink = sink;
    if (off > 0 || len != UINT64_MAX) {
        c->ranged = 1;
        c->want_off = off;
        c->want_len = len;
        if (len == UINT64_MAX || off + len < off)
            s3_hdr(c, "Range", "bytes=%" PRIu64 "-", off);
        else if (len == 0)
            s3_hdr(c, "Range", "bytes=%" PRIu64 "-%" PRIu64, off, off);
        else
            s3_hdr(c, "Range", "bytes=%" PRIu64 "-%" PRIu64, off, off + len - 1);
    }
    int rc = s3_call_run(c);
    s3_call_free(c);
    return rc;
}

static int s3_put_single(struct s3be *be, const char *bucket, const char *key, int fd,
                         uint64_t len, const struct be_meta *meta, const int *cancel)
{
    struct s3_call *c = s3_call_new(be, "PUT", bucket, key);
    if (!c)
        return -ENOMEM;
    c->cancel = cancel;
    c->fd = fd;
    c->fd_off = 0;
    c->fd_len = len;
    if (meta) {
        s3_hdr_meta(c, meta);
        if (s3_is_md5_hex(meta->etag)) {
            char b64[32];
            s3_md5_b64(meta->etag, b64);
            s3_hdr(c, "Content-MD5", "%s", b64);
        }
        if (meta->checksum_algo[0] && meta->checksum[0]) {
            char hn[40];
            snprintf(hn, sizeof(hn), "x-amz-checksum-%s", meta->checksum_algo);
            for (char *q = hn; *q; q++)
                *q = (char)tolower((unsigned char)*q);
            s3_hdr(c, hn, "%s", meta->checksum);
        }
    }
    int rc = s3_call_run(c);
    s3_call_free(c);
    return rc;
}

/* One part from @fd [off, off+size): PUT ?partNumber&uploadId. @etag_out gets the part's ETag. */
static int s3_part_put(struct s3be *be, const char *bucket, const char *key,
                       const char *upload_id, int fd, uint64_t off, uint64_t size,
                       unsigned number, const char *md5_hex, const char *ck_algo,
                       const char *ck, const int *cancel, char etag_out[BE_ETAG_MAX])
{
    struct s3_call *c = s3_call_new(be, "PUT", bucket, key);
    if (!c)
        return -ENOMEM;
    c->cancel = cancel;
    c->nf_rc = -S3E_NO_SUCH_UPLOAD;
    c->fd = fd;
    c->fd_off = off;
    c->fd_len = size;
    s3_query_u(c, "partNumber", number);
    s3_query(c, "uploadId", upload_id);
    if (md5_hex && s3_is_md5_hex(md5_hex)) {
        char b64[32];
        s3_md5_b64(md5_hex, b64);
        s3_hdr(c, "Content-MD5", "%s", b64);
    }
    if (ck_algo && ck_algo[0] && ck && ck[0]) {
        char hn[40];
        snprintf(hn, sizeof(hn), "x-amz-checksum-%s", ck_algo);
        for (char *q = hn; *q; q++)
            *q = (char)tolower((unsigned char)*q);
        s3_hdr(c, hn, "%s", ck);
    }
    int rc = s3_call_run(c);
    if (!rc && etag_out) {
        char v[BE_ETAG_MAX + 8];
        etag_out[0] = '\0';
        if (!s3_resp_hdr(c, "ETag", v, sizeof(v)))
            s3_etag_unquote(v, strlen(v), etag_out, BE_ETAG_MAX);
        else if (md5_hex)
            snprintf(etag_out, BE_ETAG_MAX, "%s", md5_hex);
    }
    s3_call_free(c);
    return rc;
}

static int be_s3_mp_create(struct backend *b, const char *bucket, const char *key,
                           const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX]);
static int be_s3_mp_complete(struct backend *b, const char *bucket, const char *key,
                             const char *upload_id, const struct be_part *parts, size_t n,
                             struct be_meta *out);
static int be_s3_mp_abort(struct backend *b, const char *bucket, const char *key,
                          const char *upload_id);

struct s3_mp_job {
    struct backend *b;
    const char *bucket, *key, *upload_id;
    int fd;
    uint64_t len, part_size;
    size_t n_parts, next;
    struct be_part *parts;
    const int *cancel;
    pthread_mutex_t mu;
    int rc;
};

static void *s3_mp_worker(void *arg)
{
    struct s3_mp_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        if (!j->rc && j->cancel && __atomic_load_n(j->cancel, __ATOMIC_RELAXED))
            j->rc = -ECANCELED;
        if (j->rc || j->next >= j->n_parts) {
            pthread_mutex_unlock(&j->mu);
            return NULL;
        }
        size_t i = j->next++;
        pthread_mutex_unlock(&j->mu);
        uint64_t off = (uint64_t)i * j->part_size;
        uint64_t size = S3C_MIN(j->part_size, j->len - off);
        struct be_part *p = &j->parts[i];
        p->number = (unsigned)(i + 1);
        p->size = size;
        int rc = s3_part_put(s3_be(j->b), j->bucket, j->key, j->upload_id, j->fd, off, size,
                             p->number, NULL, NULL, NULL, j->cancel, p->etag);
        if (rc) {
            pthread_mutex_lock(&j->mu);
            if (!j->rc)
                j->rc = rc;
            pthread_mutex_unlock(&j->mu);
            return NULL;
        }
    }
}

/* A large put(): multipart upload upstream, S3_MP_PARALLEL parts at a time. The upstream
 * object's ETag is then the multipart kind ("md5-N"), not @meta->etag. */
static int s3_put_multipart(struct backend *b, const char *bucket, const char *key, int fd,
                            uint64_t len, const struct be_meta *meta, const int *cancel)
{
    struct be_meta empty;
    char upload_id[BE_UPLOAD_ID_MAX];
    uint64_t part_size = S3_MP_PART_SIZE;
    while ((len + part_size - 1) / part_size > BE_MAX_PARTS)
        part_size *= 2;
    if (!meta) {
        memset(&empty, 0, sizeof(empty));
        meta = &empty;
    }
    struct be_meta cm = *meta; /* a full-object checksum does not apply part-wise */
    cm.checksum_algo[0] = cm.checksum[0] = '\0';
    int rc = be_s3_mp_create(b, bucket, key, &cm, upload_id);
    if (rc)
        return rc;
    struct s3_mp_job j = {.b = b, .bucket = bucket, .key = key, .upload_id = upload_id,
                          .fd = fd, .len = len, .part_size = part_size, .cancel = cancel,
                          .n_parts = (size_t)((len + part_size - 1) / part_size)};
    j.parts = calloc(j.n_parts, sizeof(*j.parts));
    if (!j.parts) {
        be_s3_mp_abort(b, bucket, key, upload_id);
        return -ENOMEM;
    }
    pthread_mutex_init(&j.mu, NULL);
    pthread_t th[S3_MP_PARALLEL - 1];
    size_t n_th = 0;
    for (size_t i = 0; i < ARRAY_SIZE(th) && i + 1 < j.n_parts; i++)
        if (!pthread_create(&th[n_th], NULL, s3_mp_worker, &j))
            n_th++;
    s3_mp_worker(&j);
    for (size_t i = 0; i < n_th; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&j.mu);
    rc = j.rc;
    if (!rc && cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
        rc = -ECANCELED;
    if (!rc)
        rc = be_s3_mp_complete(b, bucket, key, upload_id, j.parts, j.n_parts, NULL);
    if (rc) {
        int arc = be_s3_mp_abort(b, bucket, key, upload_id);
        if (arc && arc != -S3E_NO_SUCH_UPLOAD)
            log_warn("be_s3: abort of upload %s of %s/%s after %s: %s", upload_id, bucket, key,
                     s3c_strerror(rc), s3c_strerror(arc));
    }
    free(j.parts);
    return rc;
}

static int be_s3_put(struct backend *b, const char *bucket, const char *key, int fd,
                     uint64_t len, const struct be_meta *meta, const int *cancel)
{
    if (len > S3_MP_THRESHOLD)
        return s3_put_multipart(b, bucket, key, fd, len, meta, cancel);
    return s3_put_single(s3_be(b), bucket, key, fd, len, meta, cancel);
}

/* "/bucket/encoded-key" for x-amz-copy-source. */
static int s3_copy_source(const char *bucket, const char *key, char *out, size_t cap)
{
    char enc[8192];
    if (sigv4_uri_encode(key, strlen(key), 1, enc, sizeof(enc)) < 0)
        return -ENAMETOOLONG;
    int n = snprintf(out, cap, "/%s/%s", bucket, enc);
    return (n < 0 || (size_t)n >= cap) ? -ENAMETOOLONG : 0;
}

static int be_s3_copy(struct backend *b, const char *src_bucket, const char *src_key,
                      const char *dst_bucket, const char *dst_key, const struct be_meta *replace,
                      struct be_meta *out)
{
    char src[8400];
    int rc = s3_copy_source(src_bucket, src_key, src, sizeof(src));
    if (rc)
        return rc;
    struct s3_call *c = s3_call_new(s3_be(b), "PUT", dst_bucket, dst_key);
    if (!c)
        return -ENOMEM;
    s3_hdr(c, "x-amz-copy-source", "%s", src);
    s3_hdr(c, "x-amz-metadata-directive", "%s", replace ? "REPLACE" : "COPY");
    if (replace)
        s3_hdr_meta(c, replace);
    rc = s3_call_run(c);
    if (!rc)
        rc = s3_body_error(c);
    if (!rc && out) {
        const char *bp = c->body_out.p ? c->body_out.p : "", *e = bp + c->body_out.len;
        char lm[64];
        memset(out, 0, sizeof(*out));
        s3x_etag(bp, e, out->etag, sizeof(out->etag));
        if (!s3x_get(bp, e, "LastModified", lm, sizeof(lm)))
            out->mtime_ns = s3_parse_iso8601(lm);
        struct be_meta h;
        if (!be_s3_head(b, dst_bucket, dst_key, &h))
            *out = h; /* the whole picture: size, headers, user metadata */
    }
    s3_call_free(c);
    return rc;
}

static int be_s3_del(struct backend *b, const char *bucket, const char *key)
{
    struct s3_call *c = s3_call_new(s3_be(b), "DELETE", bucket, key);
    if (!c)
        return -ENOMEM;
    int rc = s3_call_run(c);
    if (rc == -S3E_NO_SUCH_KEY)
        rc = 0;
    s3_call_free(c);
    return rc;
}

static void s3_page_free(struct be_list_page *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->entries[i].key);
    free(p->entries);
    free(p->next_marker);
    memset(p, 0, sizeof(*p));
}

static int s3_page_add(struct be_list_page *p, size_t *cap, char *key, int is_prefix)
{
    if (p->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        struct be_list_entry *e = realloc(p->entries, nc * sizeof(*e));
        if (!e) {
            free(key);
            return -ENOMEM;
        }
        p->entries = e;
        *cap = nc;
    }
    memset(&p->entries[p->n], 0, sizeof(p->entries[p->n]));
    p->entries[p->n].key = key;
    p->entries[p->n].is_prefix = is_prefix;
    p->n++;
    return 0;
}

static int s3_entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct be_list_entry *)a)->key, ((const struct be_list_entry *)b)->key);
}

/* One ListObjectsV2 page into @out (appended). @token: continuation token or NULL. */
static int s3_list_once(struct s3be *be, const struct be_list_req *rq, const char *token,
                        unsigned max_keys, struct be_list_page *out, size_t *cap,
                        char **next_token, char **last_raw)
{
    struct s3_call *c = s3_call_new(be, "GET", rq->bucket, NULL);
    if (!c)
        return -ENOMEM;
    s3_query(c, "list-type", "2");
    s3_query(c, "encoding-type", "url");
    if (rq->prefix && *rq->prefix)
        s3_query(c, "prefix", rq->prefix);
    if (rq->delimiter && *rq->delimiter)
        s3_query(c, "delimiter", rq->delimiter);
    if (token)
        s3_query(c, "continuation-token", token);
    else if (rq->marker && *rq->marker)
        s3_query(c, "start-after", rq->marker);
    s3_query_u(c, "max-keys", max_keys);
    int rc = s3_call_run(c);
    if (rc)
        goto out;
    const char *bp = c->body_out.p ? c->body_out.p : "", *e = bp + c->body_out.len;
    const char *vs, *ve, *p;
    char et[16] = "";
    s3x_get(bp, e, "EncodingType", et, sizeof(et));
    int url = !strcasecmp(et, "url");
    size_t first = out->n;
    /* Contents */
    for (p = bp; (p = s3x_find(p, e, "Contents", &vs, &ve));) {
        const char *ks, *ke;
        if (!s3x_find(vs, ve, "Key", &ks, &ke))
            continue;
        char *t = s3x_text(ks, ke), *k = NULL;
        if (t && url) {
            k = s3_url_decode(t, strlen(t), 1);
            free(t);
        } else {
            k = t;
        }
        if (!k || (rc = s3_page_add(out, cap, k, 0))) {
            rc = rc ? rc : -ENOMEM;
            goto out;
        }
        struct be_list_entry *en = &out->entries[out->n - 1];
        en->size = s3x_u64(vs, ve, "Size");
        char lm[64];
        if (!s3x_get(vs, ve, "LastModified", lm, sizeof(lm)))
            en->mtime_ns = s3_parse_iso8601(lm);
        s3x_etag(vs, ve, en->etag, sizeof(en->etag));
    }
    for (p = bp; (p = s3x_find(p, e, "CommonPrefixes", &vs, &ve));) {
        const char *ks, *ke;
        if (!s3x_find(vs, ve, "Prefix", &ks, &ke))
            continue;
        char *t = s3x_text(ks, ke), *k = NULL;
        if (t && url) {
            k = s3_url_decode(t, strlen(t), 1);
            free(t);
        } else {
            k = t;
        }
        if (!k) {
            rc = -ENOMEM;
            goto out;
        }
        /* A marker that is a common prefix: the upstream may roll it up again; skip it. */
        if (rq->marker && !strcmp(k, rq->marker)) {
            free(*last_raw);
            *last_raw = k;
            continue;
        }
        if ((rc = s3_page_add(out, cap, k, 1)))
            goto out;
    }
    if (out->n > first + 1)
        qsort(out->entries + first, out->n - first, sizeof(*out->entries), s3_entry_cmp);
    out->truncated = s3x_bool(bp, e, "IsTruncated");
    if (out->truncated) {
        const char *ts, *te;
        if (s3x_find(bp, e, "NextContinuationToken", &ts, &te)) {
            *next_token = s3x_text(ts, te);
            if (!*next_token)
                rc = -ENOMEM;
        }
    }
out:
    s3_call_free(c);
    return rc;
}

static int be_s3_list(struct backend *b, const struct be_list_req *rq, struct be_list_page *out)
{
    struct s3be *be = s3_be(b);
    size_t cap = 0;
    char *token = NULL, *last_raw = NULL;
    unsigned max = rq->max_keys ? S3C_MIN(rq->max_keys, 1000u) : 1000u;
    int rc = 0;
    memset(out, 0, sizeof(*out));
    for (int round = 0; round < 8; round++) {
        char *next = NULL;
        rc = s3_list_once(be, rq, token, max - (unsigned)out->n, out, &cap, &next, &last_raw);
        free(token);
        token = next;
        if (rc || !out->truncated || out->n >= max || !token)
            break;
    }
    if (!rc && out->n > max) { /* an upstream that counts max-keys its own way */
        for (size_t i = max; i < out->n; i++)
            free(out->entries[i].key);
        out->n = max;
        out->truncated = 1;
    }
    if (!rc && out->truncated) {
        const char *last = out->n ? out->entries[out->n - 1].key : (last_raw ? last_raw : "");
        if (!*last) {
            /* Nothing to resume from: a page of nothing but a skipped prefix, 8 times over. */
            rc = -S3E_SERVICE_UNAVAILABLE;
        } else if (!(out->next_marker = strdup(last))) {
            rc = -ENOMEM;
        }
    }
    free(token);
    free(last_raw);
    if (rc)
        s3_page_free(out);
    return rc;
}

/* ---- buckets ------------------------------------------------------------------------------- */

static int be_s3_list_buckets(struct backend *b, struct be_bucket **outp, size_t *n)
{
    *outp = NULL;
    *n = 0;
    struct s3_call *c = s3_call_new(s3_be(b), "GET", NULL, NULL);
    if (!c)
        return -ENOMEM;
    int rc = s3_call_run(c);
    if (rc)
        goto out;
    const char *bp = c->body_out.p ? c->body_out.p : "", *e = bp + c->body_out.len, *p, *vs,
               *ve;
    size_t cnt = 0, cap = 0;
    struct be_bucket *arr = NULL;
    for (p = bp; (p = s3x_find(p, e, "Bucket", &vs, &ve));) {
        if (cnt == cap) {
            size_t nc = cap ? cap * 2 : 16;
            struct be_bucket *t = realloc(arr, nc * sizeof(*t));
            if (!t) {
                free(arr);
                rc = -ENOMEM;
                goto out;
            }
            arr = t;
            cap = nc;
        }
        memset(&arr[cnt], 0, sizeof(arr[cnt]));
        if (s3x_get(vs, ve, "Name", arr[cnt].name, sizeof(arr[cnt].name)))
            continue;
        char cd[64];
        if (!s3x_get(vs, ve, "CreationDate", cd, sizeof(cd)))
            arr[cnt].ctime_ns = s3_parse_iso8601(cd);
        cnt++;
    }
    *outp = arr;
    *n = cnt;
out:
    s3_call_free(c);
    return rc;
}

static int be_s3_bucket_create(struct backend *b, const char *bucket)
{
    struct s3be *be = s3_be(b);
    struct s3_call *c = s3_call_new(be, "PUT", bucket, NULL);
    if (!c)
        return -ENOMEM;
    struct buf body;
    buf_init(&body, 4096);
    if (strcmp(be->region, "us-east-1")) {
        int rc = buf_puts(&body, "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/"
                                 "doc/2006-03-01/\">");
        if (!rc)
            rc = buf_xml_elem(&body, "LocationConstraint", be->region);
        if (!rc)
            rc = buf_puts(&body, "</CreateBucketConfiguration>");
        if (rc) {
            buf_free(&body);
            s3_call_free(c);
            return rc;
        }
        c->body = body.p;
        c->body_len = body.len;
        c->has_body = 1;
    }
    int rc = s3_call_run(c);
    s3_call_free(c);
    buf_free(&body);
    return rc;
}

static int be_s3_bucket_head(struct backend *b, const char *bucket)
{
    struct s3_call *c = s3_call_new(s3_be(b), "HEAD", bucket, NULL);
    if (!c)
        return -ENOMEM;
    int rc = s3_call_run(c);
    s3_call_free(c);
    return rc;
}

static int be_s3_bucket_delete(struct backend *b, const char *bucket)
{
    struct s3_call *c = s3_call_new(s3_be(b), "DELETE", bucket, NULL);
    if (!c)
        return -ENOMEM;
    int rc = s3_call_run(c);
    s3_call_free(c);
    return rc;
}

/* ---- multipart passthrough ---------------------------------------------------------------- */

static int be_s3_mp_create(struct backend *b, const char *bucket, const char *key,
                           const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX])
{
    struct s3_call *c = s3_call_new(s3_be(b), "POST", bucket, key);
    if (!c)
        return -ENOMEM;
    c->retry = S3_RETRY_UNSENT;
    c->nf_rc = -S3E_NO_SUCH_BUCKET;
    s3_query(c, "uploads", NULL);
    if (meta) {
        s3_hdr_meta(c, meta);
        if (meta->checksum_algo[0])
            s3_hdr(c, "x-amz-checksum-algorithm", "%s", meta->checksum_algo);
    }
    int rc = s3_call_run(c);
    if (!rc) {
        const char *bp = c->body_out.p ? c->body_out.p : "";
        upload_id[0] = '\0';
        if (s3x_get(bp, bp + c->body_out.len, "UploadId", upload_id, BE_UPLOAD_ID_MAX) ||
            !upload_id[0]) {
            log_warn("be_s3: create upload %s/%s: no <UploadId> in the answer", bucket, key);
            rc = -S3E_SERVICE_UNAVAILABLE;
        }
    }
    s3_call_free(c);
    return rc;
}

static int be_s3_mp_put_part(struct backend *b, const char *bucket, const char *key,
                             const char *upload_id, int fd, const struct be_part *part)
{
    char etag[BE_ETAG_MAX];
    return s3_part_put(s3_be(b), bucket, key, upload_id, fd, 0, part->size, part->number,
                       part->etag, part->checksum_algo, part->checksum, NULL, etag);
}

static int be_s3_mp_copy_part(struct backend *b, const char *bucket, const char *key,
                              const char *upload_id, unsigned part_number,
                              const char *src_bucket, const char *src_key, uint64_t off,
                              uint64_t len, struct be_part *out)
{
    char src[8400];
    int rc = s3_copy_source(src_bucket, src_key, src, sizeof(src));
    if (rc)
        return rc;
    struct s3_call *c = s3_call_new(s3_be(b), "PUT", bucket, key);
    if (!c)
        return -ENOMEM;
    c->nf_rc = -S3E_NO_SUCH_UPLOAD;
    s3_query_u(c, "partNumber", part_number);
    s3_query(c, "uploadId", upload_id);
    s3_hdr(c, "x-amz-copy-source", "%s", src);
    if (len && len != UINT64_MAX)
        s3_hdr(c, "x-amz-copy-source-range", "bytes=%" PRIu64 "-%" PRIu64, off, off + len - 1);
    rc = s3_call_run(c);
    if (!rc)
        rc = s3_body_error(c);
    if (!rc && out) {
        const char *bp = c->body_out.p ? c->body_out.p : "", *e = bp + c->body_out.len;
        char lm[64];
        memset(out, 0, sizeof(*out));
        out->number = part_number;
        out->size = len == UINT64_MAX ? 0 : len;
        s3x_etag(bp, e, out->etag, sizeof(out->etag));
        if (!s3x_get(bp, e, "LastModified", lm, sizeof(lm)))
            out->mtime_ns = s3_parse_iso8601(lm);
    }
    s3_call_free(c);
    return rc;
}

static int be_s3_mp_complete(struct backend *b, const char *bucket, const char *key,
                             const char *upload_id, const struct be_part *parts, size_t n,
                             struct be_meta *out)
{
    struct buf x;
    buf_init(&x, 16u << 20);
    int rc = buf_puts(&x, "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/"
                          "2006-03-01/\">");
    for (size_t i = 0; !rc && i < n; i++) {
        char q[BE_ETAG_MAX + 4];
        snprintf(q, sizeof(q), "\"%s\"", parts[i].etag);
        rc = buf_printf(&x, "<Part><PartNumber>%u</PartNumber>", parts[i].number);
        if (!rc)
            rc = buf_xml_elem(&x, "ETag", q);
        if (!rc && parts[i].checksum_algo[0] && parts[i].checksum[0]) {
            char tag[24];
            const char *a = parts[i].checksum_algo;
            snprintf(tag, sizeof(tag), "Checksum%s", a);
            rc = buf_xml_elem(&x, tag, parts[i].checksum);
        }
        if (!rc)
            rc = buf_puts(&x, "</Part>");
    }
    if (!rc)
        rc = buf_puts(&x, "</CompleteMultipartUpload>");
    if (rc) {
        buf_free(&x);
        return rc;
    }
    struct s3_call *c = s3_call_new(s3_be(b), "POST", bucket, key);
    if (!c) {
        buf_free(&x);
        return -ENOMEM;
    }
    c->retry = S3_RETRY_UNSENT;
    c->nf_rc = -S3E_NO_SUCH_UPLOAD;
    s3_query(c, "uploadId", upload_id);
    s3_hdr(c, "Content-Type", "application/xml");
    c->body = x.p;
    c->body_len = x.len;
    c->has_body = 1;
    rc = s3_call_run(c);
    if (!rc)
        rc = s3_body_error(c);
    if (!rc && out) {
        const char *bp = c->body_out.p ? c->body_out.p : "", *e = bp + c->body_out.len;
        memset(out, 0, sizeof(*out));
        s3x_etag(bp, e, out->etag, sizeof(out->etag));
        uint64_t size = 0;
        for (size_t i = 0; i < n; i++)
            size += parts[i].size;
        out->size = size;
        out->parts_count = (uint32_t)n;
        struct be_meta h;
        if (!be_s3_head(b, bucket, key, &h)) {
            *out = h;
            if (!out->parts_count)
                out->parts_count = (uint32_t)n;
        }
    }
    s3_call_free(c);
    buf_free(&x);
    return rc;
}

static int be_s3_mp_abort(struct backend *b, const char *bucket, const char *key,
                          const char *upload_id)
{
    struct s3_call *c = s3_call_new(s3_be(b), "DELETE", bucket, key);
    if (!c)
        return -ENOMEM;
    c->nf_rc = -S3E_NO_SUCH_UPLOAD;
    s3_query(c, "uploadId", upload_id);
    int rc = s3_call_run(c);
    s3_call_free(c);
    return rc;
}

static int be_s3_mp_list_parts(struct backend *b, const char *bucket, const char *key,
                               const char *upload_id, unsigned marker, unsigned max,
                               struct be_part **outp, size_t *n, int *truncated)
{
    *outp = NULL;
    *n = 0;
    *truncated = 0;
    struct s3_call *c = s3_call_new(s3_be(b), "GET", bucket, key);
    if (!c)
        return -ENOMEM;
    c->nf_rc = -S3E_NO_SUCH_UPLOAD;
    s3_query(c, "uploadId", upload_id);
    if (marker)
        s3_query_u(c, "part-number-marker", marker);
    if (max)
        s3_query_u(c, "max-parts", max);
    int rc = s3_call_run(c);
    if (rc)
        goto out;
    const char *bp = c->body_out.p ? c->body_out.p : "", *e = bp + c->body_out.len, *p, *vs,
               *ve;
    size_t cnt = 0, cap = 0;
    struct be_part *arr = NULL;
    for (p = bp; (p = s3x_find(p, e, "Part", &vs, &ve));) {
        if (cnt == cap) {
            size_t nc = cap ? cap * 2 : 16;
            struct be_part *t = realloc(arr, nc * sizeof(*t));
            if (!t) {
                free(arr);
                rc = -ENOMEM;
                goto out;
            }
            arr = t;
            cap = nc;
        }
        struct be_part *pt = &arr[cnt];
        memset(pt, 0, sizeof(*pt));
        pt->number = (unsigned)s3x_u64(vs, ve, "PartNumber");
        pt->size = s3x_u64(vs, ve, "Size");
        s3x_etag(vs, ve, pt->etag, sizeof(pt->etag));
        char lm[64];
        if (!s3x_get(vs, ve, "LastModified", lm, sizeof(lm)))
            pt->mtime_ns = s3_parse_iso8601(lm);
        static const char *const algos[] = {"CRC32", "CRC32C", "SHA1", "SHA256"};
        for (size_t i = 0; i < ARRAY_SIZE(algos); i++) {
            char tag[24];
            snprintf(tag, sizeof(tag), "Checksum%s", algos[i]);
            if (!s3x_get(vs, ve, tag, pt->checksum, sizeof(pt->checksum))) {
                snprintf(pt->checksum_algo, sizeof(pt->checksum_algo), "%s", algos[i]);
                break;
            }
        }
        cnt++;
    }
    *outp = arr;
    *n = cnt;
    *truncated = s3x_bool(bp, e, "IsTruncated");
out:
    s3_call_free(c);
    return rc;
}

static int be_s3_mp_list_uploads(struct backend *b, const char *bucket, const char *prefix,
                                 const char *key_marker, const char *upload_id_marker,
                                 unsigned max, struct be_upload **outp, size_t *n,
                                 int *truncated)
{
    *outp = NULL;
    *n = 0;
    *truncated = 0;
    struct s3_call *c = s3_call_new(s3_be(b), "GET", bucket, NULL);
    if (!c)
        return -ENOMEM;
    s3_query(c, "uploads", NULL);
    s3_query(c, "encoding-type", "url");
    if (prefix && *prefix)
        s3_query(c, "prefix", prefix);
    if (key_marker && *key_marker)
        s3_query(c, "key-marker", key_marker);
    if (upload_id_marker && *upload_id_marker)
        s3_query(c, "upload-id-marker", upload_id_marker);
    if (max)
        s3_query_u(c, "max-uploads", max);
    int rc = s3_call_run(c);
    if (rc)
        goto out;
    const char *bp = c->body_out.p ? c->body_out.p : "", *e = bp + c->body_out.len, *p, *vs,
               *ve;
    char et[16] = "";
    s3x_get(bp, e, "EncodingType", et, sizeof(et));
    int url = !strcasecmp(et, "url");
    size_t cnt = 0, cap = 0;
    struct be_upload *arr = NULL;
    for (p = bp; (p = s3x_find(p, e, "Upload", &vs, &ve));) {
        const char *ks, *ke;
        if (!s3x_find(vs, ve, "Key", &ks, &ke))
            continue;
        if (cnt == cap) {
            size_t nc = cap ? cap * 2 : 16;
            struct be_upload *t = realloc(arr, nc * sizeof(*t));
            if (!t) {
                rc = -ENOMEM;
                break;
            }
            arr = t;
            cap = nc;
        }
        struct be_upload *u = &arr[cnt];
        memset(u, 0, sizeof(*u));
        char *t = s3x_text(ks, ke);
        if (t && url) {
            u->key = s3_url_decode(t, strlen(t), 1);
            free(t);
        } else {
            u->key = t;
        }
        if (!u->key) {
            rc = -ENOMEM;
            break;
        }
        s3x_get(vs, ve, "UploadId", u->upload_id, sizeof(u->upload_id));
        char ini[64];
        if (!s3x_get(vs, ve, "Initiated", ini, sizeof(ini)))
            u->initiated_ns = s3_parse_iso8601(ini);
        cnt++;
    }
    if (rc) {
        for (size_t i = 0; i < cnt; i++)
            free(arr[i].key);
        free(arr);
        goto out;
    }
    *outp = arr;
    *n = cnt;
    *truncated = s3x_bool(bp, e, "IsTruncated");
out:
    s3_call_free(c);
    return rc;
}

const struct backend_ops be_s3_ops = {
    .scheme = "http",
    .open = be_s3_open,
    .close = be_s3_close,
    .head = be_s3_head,
    .get = be_s3_get,
    .open_fd = NULL,
    .put = be_s3_put,
    .copy = be_s3_copy,
    .del = be_s3_del,
    .list = be_s3_list,
    .list_buckets = be_s3_list_buckets,
    .bucket_create = be_s3_bucket_create,
    .bucket_head = be_s3_bucket_head,
    .bucket_delete = be_s3_bucket_delete,
    .mp_create = be_s3_mp_create,
    .mp_put_part = be_s3_mp_put_part,
    .mp_copy_part = be_s3_mp_copy_part,
    .mp_complete = be_s3_mp_complete,
    .mp_abort = be_s3_mp_abort,
    .mp_list_parts = be_s3_mp_list_parts,
    .mp_list_uploads = be_s3_mp_list_uploads,
};
