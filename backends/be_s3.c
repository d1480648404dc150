/*
 * be_s3.c: any S3 endpoint as the backing store, over libcurl (be_s3*.c are the only
 * backend files that include <curl/curl.h>): the backend's operations (objects, a large PUT
 * as a parallel multipart upload upstream, listings, buckets, multipart passthrough), each
 * as one or more calls of be_s3_call.c whose answers be_s3_parse.c reads. It counts nothing:
 * backend.c's wrappers do.
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
#include "lib/arr.h"
#include "lib/buf.h"
#include "lib/conf.h"
#include "lib/log.h"
#include "lib/s3c.h"
#include "lib/s3err.h"
#include "sig/sigv4.h"

static pthread_once_t s3_once = PTHREAD_ONCE_INIT;
static int s3_global_rc;

static void s3_global_init(void)
{
    s3_global_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -ENOMEM;
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
        errmsg_set(em,
                   "backend URL \"%s\": put credentials in --backend-access-key/"
                   "--backend-secret-key, not the URL",
                   url);
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
    be->throttled = &b->ctr.throttled;
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

static int be_s3_head(struct backend *b, const char *bucket, const char *key, struct be_meta *out)
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

static int s3_put_single(struct s3be *be, const char *bucket, const char *key, int fd, uint64_t len,
                         const struct be_meta *meta, const int *cancel)
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
static int s3_part_put(struct s3be *be, const char *bucket, const char *key, const char *upload_id,
                       int fd, uint64_t off, uint64_t size, unsigned number, const char *md5_hex,
                       const char *ck_algo, const char *ck, const int *cancel,
                       char etag_out[BE_ETAG_MAX])
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
    struct s3_mp_job j = {.b = b,
                          .bucket = bucket,
                          .key = key,
                          .upload_id = upload_id,
                          .fd = fd,
                          .len = len,
                          .part_size = part_size,
                          .cancel = cancel,
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

static int be_s3_put(struct backend *b, const char *bucket, const char *key, int fd, uint64_t len,
                     const struct be_meta *meta, const int *cancel)
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
    if (ARR_GROW(p->entries, p->n, 1, *cap)) {
        free(key);
        return -ENOMEM;
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
                        unsigned max_keys, struct be_list_page *out, size_t *cap, char **next_token,
                        char **last_raw)
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
    const char *bp = c->body_out.p ? c->body_out.p : "", *e = bp + c->body_out.len, *p, *vs, *ve;
    size_t cnt = 0, cap = 0;
    struct be_bucket *arr = NULL;
    for (p = bp; (p = s3x_find(p, e, "Bucket", &vs, &ve));) {
        if (ARR_GROW(arr, cnt, 1, cap)) {
            free(arr);
            rc = -ENOMEM;
            goto out;
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
                              const char *upload_id, unsigned part_number, const char *src_bucket,
                              const char *src_key, uint64_t off, uint64_t len, struct be_part *out)
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
    const char *bp = c->body_out.p ? c->body_out.p : "", *e = bp + c->body_out.len, *p, *vs, *ve;
    size_t cnt = 0, cap = 0;
    struct be_part *arr = NULL;
    for (p = bp; (p = s3x_find(p, e, "Part", &vs, &ve));) {
        if (ARR_GROW(arr, cnt, 1, cap)) {
            free(arr);
            rc = -ENOMEM;
            goto out;
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
                                 const char *key_marker, const char *upload_id_marker, unsigned max,
                                 struct be_upload **outp, size_t *n, int *truncated)
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
    const char *bp = c->body_out.p ? c->body_out.p : "", *e = bp + c->body_out.len, *p, *vs, *ve;
    char et[16] = "";
    s3x_get(bp, e, "EncodingType", et, sizeof(et));
    int url = !strcasecmp(et, "url");
    size_t cnt = 0, cap = 0;
    struct be_upload *arr = NULL;
    for (p = bp; (p = s3x_find(p, e, "Upload", &vs, &ve));) {
        const char *ks, *ke;
        if (!s3x_find(vs, ve, "Key", &ks, &ke))
            continue;
        if (ARR_GROW(arr, cnt, 1, cap)) {
            rc = -ENOMEM;
            break;
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
