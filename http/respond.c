/*
 * respond.c: the only code that builds libmicrohttpd responses: S3 error XML,
 * XML documents, empty answers, and object bodies (zero-copy from a cache
 * file, or streamed from a fill with suspend/resume).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <microhttpd.h>

#include "acct/stats.h"
#include "lib/checksum.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "respond.h"
#include "sig/sigv4.h"

#define STREAM_BLOCK (256 * 1024)

_Static_assert((int)REQ_OK == (int)MHD_YES && (int)REQ_CLOSE == (int)MHD_NO,
               "REQ_OK/REQ_CLOSE are MHD's values");

static void respond_object_headers(struct req *rq, struct MHD_Response *r, const struct be_meta *m);

/* Whether @rq asked "Expect: 100-continue" and is answered before a byte of its body came: an
 * early error, or a body of length 0 (for which libmicrohttpd 1.0.1, unlike 0.9.75, sends no
 * 100). botocore (up to 1.43 at least) keeps such an early status for the connection's next
 * request that expects 100-continue and then waits for its answer until its read timeout
 * (60 s): the connection is closed after this answer instead. */
static int respond_early_final(struct req *rq)
{
    return !rq->bytes_in && req_expects_continue(rq);
}

static void respond_common(struct req *rq, struct MHD_Response *r)
{
    if (!rq->must_close && respond_early_final(rq))
        rq->must_close = 1;
    MHD_add_response_header(r, "x-amz-request-id", rq->id);
    MHD_add_response_header(r, "x-amz-id-2", rq->id);
    MHD_add_response_header(r, "Server", "s3cached");
    if (rq->must_close) /* libmicrohttpd closes the connection after this answer */
        MHD_add_response_header(r, "Connection", "close");
}

static int respond_queue(struct req *rq, int status, struct MHD_Response *r)
{
    respond_common(rq, r);
    rq->status = status;
    rq->answered = 1;
    enum MHD_Result ret = MHD_queue_response(rq->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret == MHD_YES ? REQ_OK : REQ_CLOSE;
}

void respond_xml_start(struct buf *b, const char *root)
{
    buf_printf(
        b,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<%s xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">",
        root);
}

/* The S3 error document of @rc; @extra (NULL: none) is more XML after <Message>, and
 * @content_range (NULL: none) a Content-Range header. */
static int respond_error_doc(struct req *rq, int rc, const char *message, const char *extra,
                             const char *content_range)
{
    int is_bucket = rq->key == NULL;
    const struct s3err_info *e = s3err_lookup(rc, is_bucket);
    if (e->status == 304) {
        /* Not an error document: 304 has no body. */
        struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (!r)
            return REQ_CLOSE;
        if (rq->meta)
            respond_object_headers(rq, r, rq->meta);
        return respond_queue(rq, 304, r);
    }
    if (e->status >= 500 && rc != -S3E_SLOW_DOWN)
        log_warn("%s %s %s: %s%s%s", rq->id, rq->method, rq->path ? rq->path : "-",
                 s3c_strerror(rc), message ? ": " : "", message ? message : "");
    /* The detail latched with rq->rc (auth failures answered at the end of a body). */
    int latched = rc && rc == rq->rc;
    if ((!message || !*message) && latched && rq->err_msg[0])
        message = rq->err_msg;
    struct buf b;
    buf_init(&b, 16384);
    buf_puts(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>");
    buf_xml_text_elem(&b, "Code", e->code);
    buf_xml_text_elem(&b, "Message", message && *message ? message : e->message);
    if (extra)
        buf_puts(&b, extra);
    if (latched && rq->err_elem)
        buf_xml_text_elem(&b, rq->err_elem, rq->err_elem_value);
    if (rq->key)
        buf_xml_text_elem(&b, "Key", rq->key);
    if (rq->bucket)
        buf_xml_text_elem(&b, "BucketName", rq->bucket);
    if (rq->path)
        buf_xml_text_elem(&b, "Resource", rq->path);
    buf_xml_text_elem(&b, "RequestId", rq->id);
    buf_xml_text_elem(&b, "HostId", rq->id);
    buf_puts(&b, "</Error>");
    size_t len = b.len;
    char *body = buf_take(&b);
    int is_head = !strcmp(rq->method, "HEAD");
    if (is_head) { /* the status and headers say it all; HEAD has no body */
        free(body);
        body = NULL;
        len = 0;
    }
    struct MHD_Response *r = is_head
                                 ? MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT)
                                 : MHD_create_response_from_buffer(len, body,
                                                                   MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return REQ_CLOSE;
    }
    MHD_add_response_header(r, "Content-Type", "application/xml");
    if (rc == -S3E_SLOW_DOWN || e->status == 503)
        MHD_add_response_header(r, "Retry-After", "1");
    if (content_range)
        MHD_add_response_header(r, "Content-Range", content_range);
    rq->bytes_out = is_head ? 0 : len;
    return respond_queue(rq, e->status, r);
}

int respond_error_msg(struct req *rq, int rc, const char *message)
{
    return respond_error_doc(rq, rc, message, NULL, NULL);
}

int respond_error(struct req *rq, int rc)
{
    return respond_error_msg(rq, rc, NULL);
}

int respond_invalid_range(struct req *rq, const char *range, uint64_t size)
{
    struct buf x;
    char cr[48];
    buf_init(&x, 16384);
    buf_xml_text_elem(&x, "RangeRequested", range ? range : "");
    buf_printf(&x, "<ActualObjectSize>%llu</ActualObjectSize>", (unsigned long long)size);
    snprintf(cr, sizeof(cr), "bytes */%llu", (unsigned long long)size);
    /* without memory for the extra elements, the plain 416 still goes out */
    int ret = respond_error_doc(rq, -S3E_INVALID_RANGE, NULL, x.p, cr);
    buf_free(&x);
    return ret;
}

void respond_xml_value(struct buf *b, const char *name, const char *v, int url)
{
    if (!url) {
        buf_xml_elem(b, name, v);
        return;
    }
    size_t cap = strlen(v) * 3 + 1;
    char *enc = malloc(cap);
    if (enc && sigv4_uri_encode(v, strlen(v), 1, enc, cap) >= 0)
        buf_xml_elem(b, name, enc);
    else
        buf_xml_elem(b, name, v);
    free(enc);
}

int respond_xml(struct req *rq, int status, struct buf *xml)
{
    return respond_xml_headers(rq, status, xml, NULL, NULL);
}

int respond_xml_headers(struct req *rq, int status, struct buf *xml, const char *name,
                        const char *value)
{
    size_t len = xml->len;
    char *body = buf_take(xml);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return REQ_CLOSE;
    }
    MHD_add_response_header(r, "Content-Type", "application/xml");
    if (name && value)
        MHD_add_response_header(r, name, value);
    rq->bytes_out = len;
    return respond_queue(rq, status, r);
}

int respond_text(struct req *rq, int status, const char *ctype, const char *body, size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body,
                                                             MHD_RESPMEM_MUST_COPY);
    if (!r)
        return REQ_CLOSE;
    if (ctype)
        MHD_add_response_header(r, "Content-Type", ctype);
    rq->bytes_out = len;
    return respond_queue(rq, status, r);
}

int respond_empty(struct req *rq, int status)
{
    return respond_empty_header(rq, status, NULL, NULL);
}

int respond_empty_header(struct req *rq, int status, const char *name, const char *value)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return REQ_CLOSE;
    if (name && value)
        MHD_add_response_header(r, name, value);
    return respond_queue(rq, status, r);
}

/* x-amz-checksum-<algo>: @value for the algorithm named @algo ("CRC32", ...), if known. */
static void respond_checksum_header(struct MHD_Response *r, const char *algo, const char *value)
{
    const char *name = cksum_algo_header(cksum_algo_parse(algo));
    if (name && *name && value && *value)
        MHD_add_response_header(r, name, value);
}

int respond_stored(struct req *rq, const char *etag, const char *checksum_algo,
                   const char *checksum)
{
    char quoted[BE_ETAG_MAX + 2];
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return REQ_CLOSE;
    snprintf(quoted, sizeof(quoted), "\"%s\"", etag);
    MHD_add_response_header(r, "ETag", quoted);
    if (checksum_algo[0] && checksum[0])
        respond_checksum_header(r, checksum_algo, checksum);
    return respond_queue(rq, 200, r);
}

static void add_if(struct MHD_Response *r, const char *name, const char *value)
{
    if (value && *value)
        MHD_add_response_header(r, name, value);
}

static const char * override(struct req *rq, const char *param, const char *stored)
{
    const char *v = req_query(rq, param);
    return v && *v ? v : stored;
}

static void respond_object_headers(struct req *rq, struct MHD_Response *r, const struct be_meta *m)
{
    char etag[BE_ETAG_MAX + 2], date[32];
    snprintf(etag, sizeof(etag), "\"%s\"", m->etag);
    MHD_add_response_header(r, "ETag", etag);
    s3c_http_date(m->mtime_ns / 1000000000ll, date);
    MHD_add_response_header(r, "Last-Modified", date);
    MHD_add_response_header(r, "Accept-Ranges", "bytes");
    const char *ct = override(rq, "response-content-type", m->content_type);
    MHD_add_response_header(r, "Content-Type", ct && *ct ? ct : "binary/octet-stream");
    add_if(r, "Cache-Control", override(rq, "response-cache-control", m->cache_control));
    add_if(r, "Content-Disposition",
           override(rq, "response-content-disposition", m->content_disposition));
    add_if(r, "Content-Encoding", override(rq, "response-content-encoding", m->content_encoding));
    add_if(r, "Content-Language", override(rq, "response-content-language", m->content_language));
    add_if(r, "Expires", override(rq, "response-expires", m->expires));
    if (m->parts_count) {
        char n[16];
        snprintf(n, sizeof(n), "%u", m->parts_count);
        MHD_add_response_header(r, "x-amz-mp-parts-count", n);
    }
    if (m->checksum_algo[0] && m->checksum[0] && !rq->partial) {
        respond_checksum_header(r, m->checksum_algo, m->checksum);
    }
    /* x-amz-meta-*: "name:value\n" lines */
    const char *p = m->usermeta;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t ll = nl ? (size_t)(nl - p) : strlen(p);
        const char *colon = memchr(p, ':', ll);
        if (colon) {
            char name[300], value[BE_USERMETA_MAX];
            snprintf(name, sizeof(name), "x-amz-meta-%.*s", (int)(colon - p), p);
            snprintf(value, sizeof(value), "%.*s", (int)(ll - (size_t)(colon - p) - 1), colon + 1);
            /* libmicrohttpd (0.9.75 as 1.0.1) drops a header whose value is empty: a lone space goes out
             * instead, which every HTTP parser reads as the empty value (RFC 9110 5.5: no
             * leading or trailing whitespace belongs to a field value). */
            MHD_add_response_header(r, name, value[0] ? value : " ");
        }
        p += ll + (nl ? 1 : 0);
    }
    if (rq->cache_how >= 0)
        MHD_add_response_header(r, "x-cache", cache_outcome_name(rq->cache_how));
}

/* ---------------------------------------------------------------- streaming */

struct stream {
    unsigned magic;
#define STREAM_MAGIC 0x5e7a11f3
    struct req *rq;
    uint64_t off; /* object offset of response byte 0 */
    uint64_t len;
    int fd; /* >= 0: a file read with pread (rate-limited hits, the backend's file), else
                   * the fill */
};

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct stream *st;
    CAST_OBJ_NOTNULL(st, cls, STREAM_MAGIC);
    struct req *rq = st->rq;
    if (pos >= st->len)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (rq->released)
        return MHD_CONTENT_READER_END_WITH_ERROR; /* the server stops: the body is cut short */
    if (max > st->len - pos)
        max = (size_t)(st->len - pos);
    size_t granted = max;
    if (req_throttle(rq, &granted) == -EAGAIN)
        return 0; /* suspended; the rate limiter's timer resumes us */
    ssize_t n;
    if (st->fd >= 0) {
        n = pread(st->fd, buf, granted, (off_t)(st->off + pos));
        if (n < 0)
            n = -errno;
    } else {
        n = cache_obj_read(rq->obj, st->off + pos, buf, granted, &rq->waiter);
    }
    req_body_sent(rq, granted, n);
    if (n > 0) {
        if (rq->job) { /* a GET's time and bytes (acct/stall.h) */
            req_first_byte(rq);
            stall_req_sent(&rq->stall, (uint64_t)n);
        }
        return n;
    }
    if (n == -EAGAIN)
        return 0; /* cache_obj_read suspended the connection; the fill resumes it */
    if (n == 0)
        log_warn("%s: %s/%s ended at %llu of %llu bytes", rq->id, rq->bucket, rq->key,
                 (unsigned long long)(st->off + pos), (unsigned long long)(st->off + st->len));
    else
        log_warn("%s: %s/%s: fill failed at byte %llu: %s", rq->id, rq->bucket, rq->key,
                 (unsigned long long)(st->off + pos), s3c_strerror((int)n));
    return MHD_CONTENT_READER_END_WITH_ERROR; /* short body: the client sees an error */
}

static void stream_free(void *cls)
{
    struct stream *st;
    CAST_OBJ_NOTNULL(st, cls, STREAM_MAGIC);
    if (st->fd >= 0)
        close(st->fd);
    st->magic = 0;
    free(st);
}

int respond_object(struct req *rq, const struct be_meta *m, int fd, int status, uint64_t off,
                   uint64_t len)
{
    return respond_object_at(rq, m, fd, status, off, len, 0);
}

int respond_object_at(struct req *rq, const struct be_meta *m, int fd, int status, uint64_t off,
                      uint64_t len, uint64_t base)
{
    struct MHD_Response *r;
    int is_head = !strcmp(rq->method, "HEAD");
    /* sendfile for cache files. Not for a backend's file (from_source), which another tool
     * may change while it is sent: pread reads what is there. A cache file shorter than its
     * index says (cut by hand, or by a power cut on a file system that had not synced it)
     * ends the answer where its bytes end, and libmicrohttpd logs it (patch 05): no fstat
     * per answer. */
    if (fd >= 0 && !is_head && !rq->rlb && !rq->from_source) {
        r = MHD_create_response_from_fd_at_offset64(len, fd, base + off);
        if (!r) {
            close(fd);
            return respond_error(rq, -ENOMEM);
        }
        fd = -1; /* MHD owns it now */
        req_first_byte(rq);
    } else {
        /* Streamed: from the fill, or from a file with pread (rate-limited hits, a backend's). */
        if (fd >= 0 && is_head) {
            close(fd);
            fd = -1;
        }
        struct stream *st = calloc(1, sizeof(*st));
        if (!st) {
            if (fd >= 0)
                close(fd);
            return respond_error(rq, -ENOMEM);
        }
        st->magic = STREAM_MAGIC;
        st->rq = rq;
        st->off = base + off;
        st->len = len;
        st->fd = fd;
        fd = -1;
        r = MHD_create_response_from_callback(len, STREAM_BLOCK, stream_read, st, stream_free);
        if (!r) {
            free(st);
            return respond_error(rq, -ENOMEM);
        }
    }
    respond_object_headers(rq, r, m);
    if (status == 206) {
        char cr[96];
        snprintf(cr, sizeof(cr), "bytes %llu-%llu/%llu", (unsigned long long)off,
                 (unsigned long long)(off + len - 1), (unsigned long long)m->size);
        MHD_add_response_header(r, "Content-Range", cr);
    }
    rq->bytes_out = is_head ? 0 : len;
    if (!is_head && len)
        req_fair_start(rq);
    /* An aborted large download is charged what TCP saw acknowledged since now. */
    if (!is_head && len >= (1u << 20))
        rq->tcp_acked_start = req_tcp_bytes_acked(rq) + 1;
    return respond_queue(rq, status, r);
}

/* ---------------------------------------------------------------- generated bodies */

struct gen {
    unsigned magic;
#define GEN_MAGIC 0x6e7a11f5
    struct req *rq;
    uint64_t len;
    respond_read_f *read;
    void *cls;
};

static ssize_t gen_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct gen *g;
    CAST_OBJ_NOTNULL(g, cls, GEN_MAGIC);
    struct req *rq = g->rq;
    if (pos >= g->len)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (max > g->len - pos)
        max = (size_t)(g->len - pos);
    size_t granted = max;
    if (req_throttle(rq, &granted) == -EAGAIN)
        return 0; /* suspended; the rate limiter's timer resumes us */
    ssize_t n = g->read(g->cls, pos, buf, granted);
    req_body_sent(rq, granted, n);
    if (n > 0)
        return n;
    if (n == 0)
        return 0; /* the producer suspended the connection; it is resumed when bytes wait */
    log_warn("%s: generated body failed at byte %llu of %llu: %s", rq->id, (unsigned long long)pos,
             (unsigned long long)g->len, s3c_strerror((int)n));
    return MHD_CONTENT_READER_END_WITH_ERROR; /* short body: the client sees an error */
}

static void gen_free(void *cls)
{
    struct gen *g;
    CAST_OBJ_NOTNULL(g, cls, GEN_MAGIC);
    g->magic = 0;
    free(g);
}

int respond_generated(struct req *rq, int status, const char *ctype, uint64_t len,
                      respond_read_f *read, void *cls, const char *const *headers)
{
    struct gen *g = calloc(1, sizeof(*g));
    if (!g)
        return respond_error(rq, -ENOMEM);
    g->magic = GEN_MAGIC;
    g->rq = rq;
    g->len = len;
    g->read = read;
    g->cls = cls;
    struct MHD_Response *r = MHD_create_response_from_callback(len, STREAM_BLOCK, gen_read, g,
                                                               gen_free);
    if (!r) {
        free(g);
        return respond_error(rq, -ENOMEM);
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    for (size_t i = 0; headers && headers[i] && headers[i + 1]; i += 2)
        MHD_add_response_header(r, headers[i], headers[i + 1]);
    rq->bytes_out = len;
    if (len)
        req_fair_start(rq);
    if (len >= (1u << 20))
        rq->tcp_acked_start = req_tcp_bytes_acked(rq) + 1;
    return respond_queue(rq, status, r);
}

/* ---------------------------------------------------------------- relayed answers */

struct relay {
    unsigned magic;
#define RELAY_MAGIC 0x5e7a1a11
    struct req *rq;
    respond_relay_read_f *read;
    void (*free_fn)(void *);
    void *cls;
};

static ssize_t relay_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct relay *rl;
    CAST_OBJ_NOTNULL(rl, cls, RELAY_MAGIC);
    struct req *rq = rl->rq;
    (void)pos; /* the relayed body is read in order */
    size_t granted = max;
    if (req_throttle(rq, &granted) == -EAGAIN)
        return 0; /* suspended; the rate limiter's timer resumes us */
    ssize_t n = rl->read(rl->cls, buf, granted);
    req_body_sent(rq, granted, n);
    if (n > 0)
        return n;
    if (n == 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (n == -EAGAIN)
        return 0; /* suspended by the reader; its waker resumes us */
    log_warn("%s: %s/%s: relayed answer cut at byte %llu: %s", rq->id, rq->bucket ? rq->bucket : "",
             rq->key ? rq->key : "", (unsigned long long)rq->bytes_out_streamed,
             s3c_strerror((int)n));
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

static void relay_free(void *cls)
{
    struct relay *rl;
    CAST_OBJ_NOTNULL(rl, cls, RELAY_MAGIC);
    if (rl->free_fn)
        rl->free_fn(rl->cls);
    rl->magic = 0;
    free(rl);
}

int respond_relay(struct req *rq, int status, const struct respond_hdr *h, size_t n, uint64_t size,
                  respond_relay_read_f *read, void (*free_fn)(void *), void *cls)
{
    static const char *const skip[] =
        {"Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Date",
         "Server",         "x-amz-request-id",  "x-amz-id-2"};
    int is_head = !strcmp(rq->method, "HEAD");
    int bodyless = is_head || status == 204 || status == 304 || status < 200;
    struct MHD_Response *r;
    struct relay *rl = NULL;
    if (bodyless) {
        r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (r && is_head && size != UINT64_MAX) {
            /* a HEAD says the object's length; libmicrohttpd sends no body for it */
            MHD_destroy_response(r);
            r = MHD_create_response_from_callback(size, 4096, relay_read, NULL, NULL);
        }
    } else {
        rl = calloc(1, sizeof(*rl));
        r = rl ? MHD_create_response_from_callback(size == UINT64_MAX ? MHD_SIZE_UNKNOWN : size,
                                                   STREAM_BLOCK, relay_read, rl, relay_free)
               : NULL;
        if (rl && r) {
            *rl = (struct relay){RELAY_MAGIC, rq, read, free_fn, cls};
            free_fn = NULL; /* relay_free calls it now */
        }
    }
    if (!r) {
        free(rl);
        if (free_fn)
            free_fn(cls);
        return respond_error(rq, -ENOMEM);
    }
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < ARRAY_SIZE(skip) && strcasecmp(h[i].name, skip[k]))
            k++;
        if (k == ARRAY_SIZE(skip))
            MHD_add_response_header(r, h[i].name, h[i].value);
    }
    if (bodyless && free_fn) /* after the headers: they may be @cls's (copied by now) */
        free_fn(cls);
    rq->bytes_out = bodyless || size == UINT64_MAX ? 0 : size;
    if (!bodyless && size)
        req_fair_start(rq);
    if (!bodyless && size != UINT64_MAX && size >= (1u << 20))
        rq->tcp_acked_start = req_tcp_bytes_acked(rq) + 1;
    return respond_queue(rq, status, r);
}
