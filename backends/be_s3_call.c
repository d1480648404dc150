/*
 * be_s3_call.c: one call to an S3 upstream: a pool of curl easy handles (keep-alive
 * connections are reused), the request (method, bucket, key, query, headers, a body from memory
 * or a file), SigV4 signing (sigv4_sign), curl's callbacks, retries with backoff for
 * idempotent requests, and the mapping of upstream answers to -S3E_*.
 *   s3_call_new -> headers/query/body -> s3_call_run (attempts: sign, perform, classify, back
 *   off) -> parse -> s3_call_free
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
#include "be_s3_priv.h"
#include "lib/buf.h"
#include "lib/conf.h"
#include "lib/log.h"
#include "lib/s3c.h"
#include "lib/s3err.h"
#include "sig/sigv4.h"

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

struct s3_call *s3_call_new(struct s3be *be, const char *method, const char *bucket,
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

void s3_call_free(struct s3_call *c)
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
void s3_hdr(struct s3_call *c, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void s3_hdr(struct s3_call *c, const char *name, const char *fmt, ...)
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
void s3_query(struct s3_call *c, const char *name, const char *value)
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

void s3_query_u(struct s3_call *c, const char *name, uint64_t v)
{
    char tmp[24];
    snprintf(tmp, sizeof(tmp), "%" PRIu64, v);
    s3_query(c, name, tmp);
}

/* The headers of an object to be (PUT, multipart create, copy REPLACE). */
void s3_hdr_meta(struct s3_call *c, const struct be_meta *m)
{
    static const struct {
        const char *name;
        size_t off;
    } hs[] = {
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
static int s3_build_target(struct s3_call *c, char *path, size_t pcap, struct buf *url, char *host,
                           size_t hcap)
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
int s3_resp_hdr(const struct s3_call *c, const char *name, char *out, size_t cap)
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
void s3_parse_meta(const struct s3_call *c, struct be_meta *m)
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
    s3_resp_hdr(c, "Content-Disposition", m->content_disposition, sizeof(m->content_disposition));
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
    static const struct {
        const char *code;
        int rc;
    } tbl[] = {
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
    case 304: return -S3E_NOT_MODIFIED;
    case 412: return -S3E_PRECONDITION_FAILED;
    case 416: return -S3E_INVALID_RANGE;
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
    case 411: return -S3E_MISSING_CONTENT_LENGTH;
    case 429: return -S3E_SLOW_DOWN;
    case 501: return -S3E_NOT_IMPLEMENTED;
    default: break;
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
    case CURLE_OPERATION_TIMEDOUT: return -S3E_GATEWAY_TIMEOUT;
    case CURLE_OUT_OF_MEMORY: return -ENOMEM;
    case CURLE_URL_MALFORMAT: return -EINVAL;
    default: break;
    }
    log_warn("be_s3: %s %s/%s: %s", c->method, c->bucket ? c->bucket : "", c->key ? c->key : "",
             curl_easy_strerror(cc));
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
    ms = ms / 2 + s3_rand() % (ms + 1);                     /* +-50% */
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
    case CURLE_SSL_CONNECT_ERROR: return 1;
    default: return 0;
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
        struct sigv4_input in = {.method = c->method,
                                 .path = path,
                                 .query = c->query,
                                 .n_query = c->n_query,
                                 .headers = hs,
                                 .n_headers = nh};
        rc = sigv4_sign(&in, be->access_key, be->secret_key, be->region, "s3", amz_date, sha, authz,
                        sizeof(authz));
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
int s3_call_run(struct s3_call *c)
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
                    log_warn("be_s3: %s %s/%s failed after %" PRIu64 " body bytes: %s", c->method,
                             c->bucket ? c->bucket : "", c->key ? c->key : "", c->delivered,
                             curl_easy_strerror(cc));
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
        if (c->status == 503 || c->status == 429) /* the fetches ahead back off (cache/ahead.c) */
            __atomic_add_fetch(c->be->throttled, 1, __ATOMIC_RELAXED);
        int transient = c->status >= 500 || c->status == 429;
        if (transient && c->retry == S3_RETRY_IDEMPOTENT && !last && c->status != 501 &&
            !s3_stopping(c->be)) {
            if (c->body_out.p)
                s3x_get(c->body_out.p, c->body_out.p + c->body_out.len, "Code", c->code,
                        sizeof(c->code));
            log_debug("be_s3: %s %s/%s: %ld %s; retrying", c->method, c->bucket ? c->bucket : "",
                      c->key ? c->key : "", c->status, c->code);
            s3_backoff(attempt);
            continue;
        }
        return s3_status_to_err(c);
    }
}

/* A 200 whose body is an <Error> (CopyObject, UploadPartCopy, CompleteMultipartUpload). */
int s3_body_error(struct s3_call *c)
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
