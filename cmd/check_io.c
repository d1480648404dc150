/*
 * check_io.c: the HTTP side of `s3cached check` (cmd/check.h), on libcurl: single calls
 * (listing, admin endpoints, multipart create/complete, deletes), the GET handles of the
 * read phase (check_read.c) and pre-signed URLs for the command it prints, and the
 * checkpoint writers (multipart uploads in parallel, parts from one buffer of pseudo-random
 * bytes). Requests are
 * signed by libcurl's SigV4 (CURLOPT_AWS_SIGV4), which signs the query as given: callers pass
 * parameters sorted, each with '=' and its value encoded.
 */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "check.h"
#include "lib/s3c.h"
#include "sig/sigv4.h"

#define CHECK_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static double check_now(void)
{
    return (double)s3c_mono_ns() / 1e9;
}

static size_t body_keep(char *p, size_t sz, size_t n, void *cls)
{
    return buf_append(cls, p, sz * n) ? 0 : sz * n;
}

void check_http_global(int on)
{
    if (on)
        curl_global_init(CURL_GLOBAL_DEFAULT);
    else
        curl_global_cleanup();
}

int check_path(struct buf *out, const char *bucket, const char *key)
{
    size_t cap = strlen(key) * 3 + 1;
    char *enc = malloc(cap);
    int rc = enc ? 0 : -ENOMEM;
    if (!rc && sigv4_uri_encode(key, strlen(key), 1, enc, cap) < 0)
        rc = -EINVAL;
    if (!rc)
        rc = buf_printf(out, "/%s/%s", bucket, enc);
    free(enc);
    return rc;
}

/* A handle for @method @path_query with the job's headers and the credentials. SigV4 signs
 * @payload_sha (the hex SHA-256 of the body it will send), or UNSIGNED-PAYLOAD when NULL. */
static CURL *check_handle(const struct check_http *c, const char *method, const char *path_query,
                          int admin, const char *payload_sha, struct curl_slist **hdrs)
{
    char url[8192], auth[1200], sigv4[128], userpwd[600], sha_hdr[96];
    CURL *h = curl_easy_init();
    struct curl_slist *l = NULL;
    if (!h)
        return NULL;
    snprintf(url, sizeof(url), "%s%s", c->endpoint, path_query);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    if (admin && c->token) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", c->token);
        l = curl_slist_append(l, auth);
    } else if (c->access_key && c->secret_key) {
        snprintf(sigv4, sizeof(sigv4), "aws:amz:%s:s3", c->region ? c->region : "us-east-1");
        snprintf(userpwd, sizeof(userpwd), "%s:%s", c->access_key, c->secret_key);
        curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4);
        curl_easy_setopt(h, CURLOPT_USERPWD, userpwd);
        snprintf(sha_hdr, sizeof(sha_hdr), "x-amz-content-sha256: %s",
                 payload_sha ? payload_sha : "UNSIGNED-PAYLOAD");
        l = curl_slist_append(l, sha_hdr);
    }
    if (!admin) {
        l = curl_slist_append(l, c->job_header);
        if (c->need_header[0])
            l = curl_slist_append(l, c->need_header);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, l);
    *hdrs = l;
    return h;
}

long check_http_call(const struct check_http *c, const char *method, const char *path_query,
                     const char *body, int admin, struct buf *out)
{
    struct curl_slist *hdrs = NULL;
    long status = -1;
    char sha[65];
    /* Bodies are signed: the gateway refuses an admin body under UNSIGNED-PAYLOAD, which a
     * captured request could be replayed with. */
    if (sigv4_sha256_hex(body ? body : "", body ? strlen(body) : 0, sha))
        return -1;
    CURL *h = check_handle(c, method, path_query, admin, sha, &hdrs);
    if (!h)
        return -1;
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, body_keep);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    }
    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK)
        fprintf(stderr, "s3cached check: %s %s%s: %s\n", method, c->endpoint, path_query,
                curl_easy_strerror(cc));
    else
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    return status;
}

/* The text of the first <@tag>...</@tag> at or after @from, into @out (@cap); the position
 * after it, or NULL. */
static const char *xml_elem(const char *from, const char *tag, char *out, size_t cap)
{
    char open[64], close[64];
    snprintf(open, sizeof(open), "<%s>", tag);
    snprintf(close, sizeof(close), "</%s>", tag);
    const char *a = strstr(from, open), *b;
    if (!a || !(b = strstr(a + strlen(open), close)))
        return NULL;
    a += strlen(open);
    size_t n = (size_t)(b - a) < cap - 1 ? (size_t)(b - a) : cap - 1;
    memcpy(out, a, n);
    out[n] = '\0';
    return b + strlen(close);
}

/* Percent-decodes @s in place (encoding-type=url listings). */
static void url_unescape(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        unsigned v;
        if (*r == '%' && r[1] && r[2] && sscanf(r + 1, "%2x", &v) == 1) {
            *w++ = (char)v;
            r += 2;
        } else {
            *w++ = *r == '+' ? ' ' : *r;
        }
    }
    *w = '\0';
}

/* @s encoded as a SigV4 query value (no slash kept) appended to @b. */
static int query_value(struct buf *b, const char *s)
{
    size_t cap = strlen(s) * 3 + 1;
    char *enc = malloc(cap);
    int rc = enc && sigv4_uri_encode(s, strlen(s), 0, enc, cap) >= 0 ? buf_puts(b, enc) : -ENOMEM;
    free(enc);
    return rc;
}

int check_list(const struct check_http *c, const char *bucket, const char *prefix,
               char ***keys, uint64_t **sizes, size_t *n)
{
    char token[2048] = "", key[4096], size[32], trunc[16];
    size_t cap = 0;
    struct buf q, body;
    int rc = 0;
    *keys = NULL;
    *sizes = NULL;
    *n = 0;
    buf_init(&q, 16384);
    buf_init(&body, 64u << 20);
    for (;;) {
        buf_reset(&q);
        buf_reset(&body);
        /* sorted: continuation-token, encoding-type, list-type, prefix */
        buf_printf(&q, "/%s?", bucket);
        if (token[0]) {
            buf_puts(&q, "continuation-token=");
            query_value(&q, token);
            buf_puts(&q, "&");
        }
        buf_puts(&q, "encoding-type=url&list-type=2&prefix=");
        query_value(&q, prefix);
        long st = check_http_call(c, "GET", q.p, NULL, 0, &body);
        if (st != 200) {
            if (st > 0)
                fprintf(stderr, "s3cached check: listing s3://%s/%s: HTTP %ld %.300s\n", bucket,
                        prefix, st, body.p ? body.p : "");
            rc = -1;
            break;
        }
        const char *p = body.p ? body.p : "";
        while ((p = strstr(p, "<Contents>"))) {
            if (!(p = xml_elem(p, "Key", key, sizeof(key))) ||
                !(p = xml_elem(p, "Size", size, sizeof(size))))
                break;
            url_unescape(key);
            if (*n == cap) {
                cap = cap ? cap * 2 : 256;
                char **nk = realloc(*keys, cap * sizeof(**keys));
                uint64_t *ns = nk ? realloc(*sizes, cap * sizeof(**sizes)) : NULL;
                if (nk)
                    *keys = nk;
                if (!nk || !ns) {
                    rc = -1;
                    break;
                }
                *sizes = ns;
            }
            if (!((*keys)[*n] = strdup(key))) {
                rc = -1;
                break;
            }
            (*sizes)[(*n)++] = strtoull(size, NULL, 10);
        }
        if (rc || !xml_elem(body.p ? body.p : "", "IsTruncated", trunc, sizeof(trunc)) ||
            strcmp(trunc, "true") ||
            !xml_elem(body.p, "NextContinuationToken", token, sizeof(token)))
            break;
        url_unescape(token);
    }
    buf_free(&q);
    buf_free(&body);
    return rc;
}

void *check_get_handle(const struct check_http *c, const char *path_query,
                       struct curl_slist **hdrs)
{
    return check_handle(c, "GET", path_query, 0, CHECK_EMPTY_SHA256, hdrs);
}

void check_set_url(const struct check_http *c, void *h, const char *path_query)
{
    char url[8192];
    snprintf(url, sizeof(url), "%s%s", c->endpoint, path_query);
    curl_easy_setopt(h, CURLOPT_URL, url);
}

/* "YYYYMMDDTHHMMSSZ" of now. */
static void amz_now(char out[17])
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

int check_presign(const struct check_http *c, const char *bucket, const char *key,
                  unsigned expires_s, struct buf *out)
{
    struct buf path, q, creq;
    char date[17], day[9], scope[160], cred[400], hash[65], sig[65];
    uint8_t skey[32];
    const char *host = strstr(c->endpoint, "://");
    host = host ? host + 3 : c->endpoint;
    size_t hl = strcspn(host, "/");
    int rc;
    buf_init(&path, 16384);
    if ((rc = check_path(&path, bucket, key)))
        goto done_path;
    if (!c->access_key || !c->secret_key) {
        rc = buf_printf(out, "%s%s", c->endpoint, path.p);
        goto done_path;
    }
    buf_init(&q, 16384);
    buf_init(&creq, 65536);
    amz_now(date);
    snprintf(day, sizeof(day), "%.8s", date);
    snprintf(scope, sizeof(scope), "%.8s/%s/s3/aws4_request", date,
             c->region ? c->region : "us-east-1");
    snprintf(cred, sizeof(cred), "%s/%s", c->access_key, scope);
    /* the query in canonical order: the names sort as written */
    rc = buf_puts(&q, "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=");
    rc = rc ? rc : query_value(&q, cred);
    rc = rc ? rc : buf_printf(&q, "&X-Amz-Date=%s&X-Amz-Expires=%u&X-Amz-SignedHeaders=host",
                              date, expires_s);
    rc = rc ? rc : buf_printf(&creq, "GET\n%s\n%s\nhost:%.*s\n\nhost\nUNSIGNED-PAYLOAD", path.p,
                              q.p, (int)hl, host);
    rc = rc ? rc : sigv4_sha256_hex(creq.p, creq.len, hash);
    if (!rc) {
        buf_reset(&creq);
        rc = buf_printf(&creq, "AWS4-HMAC-SHA256\n%s\n%s\n%s", date, scope, hash);
    }
    rc = rc ? rc : sigv4_signing_key(c->secret_key, day, c->region ? c->region : "us-east-1",
                                     "s3", skey);
    rc = rc ? rc : sigv4_hmac_hex(skey, creq.p, creq.len, sig);
    rc = rc ? rc : buf_printf(out, "%s%s?%s&X-Amz-Signature=%s", c->endpoint, path.p, q.p, sig);
    buf_free(&q);
    buf_free(&creq);
done_path:
    buf_free(&path);
    return rc;
}

/* --- checkpoint writers ---------------------------------------------------------------- */

struct wr; /* one writer */

struct part {
    CURL *h;
    struct curl_slist *hdrs;
    struct wr *w;
    unsigned num;        /* 1.. ; 0: the writer's single PUT or its Complete */
    int complete;        /* the POST ?uploadId */
    size_t len, off;     /* the body, from the shared buffer */
    const unsigned char *data;
    char etag[128];
    struct buf resp;
};

struct wr {
    char key[512];
    char upload_id[256];
    uint64_t size;
    unsigned nparts, next, inflight, done;
    char (*etags)[128];
    int failed, finished;
    double t_done;
};

static size_t part_read(char *p, size_t sz, size_t n, void *cls)
{
    struct part *pt = cls;
    size_t k = S3C_MIN(sz * n, pt->len - pt->off);
    memcpy(p, pt->data + pt->off, k);
    pt->off += k;
    return k;
}

static size_t part_header(char *p, size_t sz, size_t n, void *cls)
{
    struct part *pt = cls;
    size_t len = sz * n;
    if (len > 5 && !strncasecmp(p, "ETag:", 5)) {
        const char *v = p + 5;
        while (*v == ' ')
            v++;
        size_t k = len - (size_t)(v - p);
        while (k && (v[k - 1] == '\r' || v[k - 1] == '\n'))
            k--;
        snprintf(pt->etag, sizeof(pt->etag), "%.*s", (int)k, v);
    }
    return len;
}

/* Starts part @num of @w (0: the whole object in one PUT) on @m. */
static int part_start(const struct check_http *c, CURLM *m, const char *bucket, struct wr *w,
                      unsigned num, uint64_t part_size, const unsigned char *data)
{
    struct part *pt = calloc(1, sizeof(*pt));
    struct buf q;
    if (!pt)
        return -1;
    buf_init(&q, 16384);
    check_path(&q, bucket, w->key);
    if (num)
        buf_printf(&q, "?partNumber=%u&uploadId=%s", num, w->upload_id);
    pt->w = w;
    pt->num = num;
    pt->data = data;
    pt->len = num ? (size_t)S3C_MIN(part_size, w->size - (uint64_t)(num - 1) * part_size)
                  : (size_t)w->size;
    buf_init(&pt->resp, 1 << 20);
    /* UNSIGNED-PAYLOAD, as S3 documents for uploads: hashing every part would slow the
     * writers being measured, and a part swapped by a replay only spoils this check's data. */
    pt->h = check_handle(c, "PUT", q.p, 0, NULL, &pt->hdrs);
    buf_free(&q);
    if (!pt->h) {
        free(pt);
        return -1;
    }
    curl_easy_setopt(pt->h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(pt->h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)pt->len);
    curl_easy_setopt(pt->h, CURLOPT_READFUNCTION, part_read);
    curl_easy_setopt(pt->h, CURLOPT_READDATA, pt);
    curl_easy_setopt(pt->h, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(pt->h, CURLOPT_HEADERFUNCTION, part_header);
    curl_easy_setopt(pt->h, CURLOPT_HEADERDATA, pt);
    curl_easy_setopt(pt->h, CURLOPT_WRITEFUNCTION, body_keep);
    curl_easy_setopt(pt->h, CURLOPT_WRITEDATA, &pt->resp);
    curl_easy_setopt(pt->h, CURLOPT_PRIVATE, pt);
    curl_multi_add_handle(m, pt->h);
    w->inflight++;
    return 0;
}

/* Starts @w's CompleteMultipartUpload on @m. */
static int complete_start(const struct check_http *c, CURLM *m, const char *bucket, struct wr *w)
{
    struct part *pt = calloc(1, sizeof(*pt));
    struct buf q, x;
    if (!pt)
        return -1;
    buf_init(&q, 16384);
    buf_init(&x, 64u << 20);
    check_path(&q, bucket, w->key);
    buf_printf(&q, "?uploadId=%s", w->upload_id);
    buf_puts(&x, "<CompleteMultipartUpload>");
    for (unsigned i = 0; i < w->nparts; i++)
        buf_printf(&x, "<Part><PartNumber>%u</PartNumber><ETag>%s</ETag></Part>", i + 1,
                   w->etags[i]);
    buf_puts(&x, "</CompleteMultipartUpload>");
    pt->w = w;
    pt->complete = 1;
    buf_init(&pt->resp, 1 << 20);
    pt->len = x.len;
    pt->data = (const unsigned char *)buf_take(&x);
    char sha[65];
    if (pt->data && sigv4_sha256_hex(pt->data, pt->len, sha))
        sha[0] = '\0';
    pt->h = pt->data && sha[0] ? check_handle(c, "POST", q.p, 0, sha, &pt->hdrs) : NULL;
    buf_free(&q);
    if (!pt->h || !pt->data) {
        if (pt->h)
            curl_easy_cleanup(pt->h);
        free((void *)pt->data);
        free(pt);
        return -1;
    }
    curl_easy_setopt(pt->h, CURLOPT_POSTFIELDS, (const char *)pt->data);
    curl_easy_setopt(pt->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)pt->len);
    curl_easy_setopt(pt->h, CURLOPT_WRITEFUNCTION, body_keep);
    curl_easy_setopt(pt->h, CURLOPT_WRITEDATA, &pt->resp);
    curl_easy_setopt(pt->h, CURLOPT_PRIVATE, pt);
    curl_multi_add_handle(m, pt->h);
    w->inflight++;
    return 0;
}

static void write_fail(struct check_write_res *res, struct wr *w, const char *what, long st,
                       const struct buf *body)
{
    if (!res->first_error[0])
        snprintf(res->first_error, sizeof(res->first_error), "%s %.60s: HTTP %ld %.150s", what,
                 w->key, st, body && body->p ? body->p : "");
    w->failed = 1;
}

/* CreateMultipartUpload for every writer whose share is more than one part. */
static int write_create(const struct check_http *c, const char *bucket, struct wr *ws,
                        unsigned writers, struct check_write_res *res)
{
    struct buf q, body;
    buf_init(&q, 16384);
    buf_init(&body, 1 << 20);
    for (unsigned i = 0; i < writers; i++) {
        struct wr *w = &ws[i];
        if (w->nparts <= 1)
            continue;
        buf_reset(&q);
        buf_reset(&body);
        check_path(&q, bucket, w->key);
        buf_puts(&q, "?uploads=");
        long st = check_http_call(c, "POST", q.p, "", 0, &body);
        if (st != 200 || !body.p || !xml_elem(body.p, "UploadId", w->upload_id,
                                              sizeof(w->upload_id)))
            write_fail(res, w, "CreateMultipartUpload", st, &body);
    }
    buf_free(&q);
    buf_free(&body);
    return 0;
}

/* One finished transfer of the writers' multi: records it. */
static void write_step(struct part *pt, CURLcode cc, double t0, struct check_write_res *res)
{
    struct wr *w = pt->w;
    long st = 0;
    curl_easy_getinfo(pt->h, CURLINFO_RESPONSE_CODE, &st);
    w->inflight--;
    if (cc != CURLE_OK || st != 200 ||
        (pt->complete && pt->resp.p && strstr(pt->resp.p, "<Error>"))) {
        write_fail(res, w, pt->complete ? "CompleteMultipartUpload" : "UploadPart", st,
                   &pt->resp);
    } else if (pt->complete || !pt->num) {
        w->finished = 1;
        w->t_done = check_now() - t0;
        res->bytes += w->size;
        res->writers_ok++;
    } else {
        snprintf(w->etags[pt->num - 1], sizeof(w->etags[0]), "%s", pt->etag);
        w->done++;
    }
}

/* Starts what @w can start now: more parts (up to @in_flight), or its Complete. */
static void write_more(const struct check_http *c, CURLM *m, const char *bucket, struct wr *w,
                       uint64_t part_size, unsigned in_flight, const unsigned char *data,
                       struct check_write_res *res)
{
    if (w->failed || w->finished || w->nparts <= 1)
        return;
    while (w->next < w->nparts && w->inflight < in_flight)
        if (part_start(c, m, bucket, w, ++w->next, part_size, data))
            write_fail(res, w, "UploadPart (no memory)", 0, NULL);
    if (w->done == w->nparts && !w->inflight && complete_start(c, m, bucket, w))
        write_fail(res, w, "CompleteMultipartUpload (no memory)", 0, NULL);
}

static void part_free(struct part *pt)
{
    curl_easy_cleanup(pt->h);
    curl_slist_free_all(pt->hdrs);
    buf_free(&pt->resp);
    if (pt->complete)
        free((void *)pt->data);
    free(pt);
}

int check_write(const struct check_http *c, const char *bucket, const char *prefix,
                uint64_t total, unsigned writers, uint64_t part_size, unsigned in_flight,
                struct check_write_res *res)
{
    memset(res, 0, sizeof(*res));
    struct wr *ws = calloc(writers, sizeof(*ws));
    unsigned char *data = malloc((size_t)part_size);
    CURLM *m = curl_multi_init();
    int rc = 0;
    if (!ws || !data || !m) {
        snprintf(res->first_error, sizeof(res->first_error), "out of memory");
        rc = -1;
        goto out;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull; /* bytes that do not compress */
    for (size_t i = 0; i < part_size; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(data + i, &x, S3C_MIN((size_t)8, (size_t)part_size - i));
    }
    for (unsigned i = 0; i < writers; i++) {
        struct wr *w = &ws[i];
        snprintf(w->key, sizeof(w->key), "%srank-%u.ckpt", prefix, i);
        w->size = total / writers + (i < total % writers ? 1 : 0);
        w->nparts = w->size > part_size ? (unsigned)((w->size + part_size - 1) / part_size) : 1;
        if (!(w->etags = calloc(w->nparts, sizeof(*w->etags)))) {
            rc = -1;
            goto out;
        }
    }
    curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)(writers * in_flight));
    double t0 = check_now();
    write_create(c, bucket, ws, writers, res);
    for (unsigned i = 0; i < writers; i++) {
        if (!ws[i].failed && ws[i].nparts <= 1 && part_start(c, m, bucket, &ws[i], 0, part_size,
                                                             data))
            write_fail(res, &ws[i], "PutObject (no memory)", 0, NULL);
        write_more(c, m, bucket, &ws[i], part_size, in_flight, data, res);
    }
    for (;;) {
        int running = 0, left = 0;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            struct part *pt = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&pt);
            CURLcode cc = msg->data.result;
            curl_multi_remove_handle(m, pt->h);
            write_step(pt, cc, t0, res);
            struct wr *w = pt->w;
            part_free(pt);
            write_more(c, m, bucket, w, part_size, in_flight, data, res);
        }
        unsigned busy = 0;
        for (unsigned i = 0; i < writers; i++)
            busy += ws[i].inflight;
        if (!busy)
            break;
        if (running)
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    res->writer_min_s = -1;
    for (unsigned i = 0; i < writers; i++) {
        struct wr *w = &ws[i];
        if (w->finished) {
            res->ack_s = S3C_MAX(res->ack_s, w->t_done);
            res->writer_max_s = S3C_MAX(res->writer_max_s, w->t_done);
            res->writer_min_s = res->writer_min_s < 0 ? w->t_done
                                                      : S3C_MIN(res->writer_min_s, w->t_done);
        } else if (w->upload_id[0]) { /* a failed writer's upload goes */
            struct buf q, body;
            buf_init(&q, 16384);
            buf_init(&body, 1 << 20);
            check_path(&q, bucket, w->key);
            buf_printf(&q, "?uploadId=%s", w->upload_id);
            check_http_call(c, "DELETE", q.p, NULL, 0, &body);
            buf_free(&q);
            buf_free(&body);
        }
    }
    rc = res->writers_ok == writers ? 0 : -1;
out:
    if (ws)
        for (unsigned i = 0; i < writers; i++)
            free(ws[i].etags);
    free(ws);
    free(data);
    curl_multi_cleanup(m);
    return rc;
}
