/*
 * upload.c: request bodies that become objects or parts. Undoes aws-chunked
 * framing (awschunk.c), hashes in one pass (checksum.c: MD5 for the ETag,
 * SHA-256 when the payload hash was signed, the x-amz-checksum-* algorithm),
 * and writes to a staged file in the cache directory; upload_finish() checks
 * lengths and every digest before anything is stored.
 * Owns the staged file until upload_release_path(); upload_free() unlinks it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "awschunk.h"
#include "checksum.h"
#include "gw.h"
#include "s3err.h"

struct upload {
    int fd;
    char path[4096];
    struct cksum *ck;
    struct awschunk *ac;
    enum cksum_algo algo;
    char want_md5_b64[32];
    char want_algo_b64[64];
    int algo_in_trailer;
    int verify_sha256;
    uint64_t declared; /* expected decoded length, UINT64_MAX when unknown */
    uint64_t written;
    uint64_t max;
    uint64_t dirty_admitted; /* write-back: reserved against the dirty limit */
    struct cache *cache;
};

static int upload_sink(void *cls, const void *data, size_t len)
{
    struct req *rq = cls;
    struct upload *up = rq->up;
    if (up->written + len > up->max)
        return -S3E_ENTITY_TOO_LARGE;
    if (up->declared != UINT64_MAX && up->written + len > up->declared)
        return -S3E_INVALID_REQUEST;
    cksum_update(up->ck, data, len);
    const char *p = data;
    size_t left = len;
    while (left) {
        ssize_t n = write(up->fd, p, left);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        left -= (size_t)n;
    }
    up->written += len;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !*s || *s == '-')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

/* The x-amz-checksum-* header a request carries, if any. */
static enum cksum_algo upload_header_algo(struct req *rq, const char **value)
{
    static const enum cksum_algo algos[] = {CKSUM_CRC32, CKSUM_CRC32C, CKSUM_SHA1, CKSUM_SHA256};
    for (size_t i = 0; i < ARRAY_SIZE(algos); i++) {
        const char *v = req_header(rq, cksum_algo_header(algos[i]));
        if (v) {
            *value = v;
            return algos[i];
        }
    }
    return CKSUM_NONE;
}

/* upload_begin() and upload_begin_into(): everything but where the bytes go. */
static int begin(struct req *rq, uint64_t max_size)
{
    struct upload *up = calloc(1, sizeof(*up));
    unsigned char tmp[64];
    if (!up)
        return -ENOMEM;
    up->fd = -1;
    up->declared = UINT64_MAX;
    up->max = max_size;
    rq->up = up;

    const char *cl = req_header(rq, "Content-Length");
    const char *te = req_header(rq, "Transfer-Encoding");
    uint64_t content_length = UINT64_MAX;
    if (cl && parse_u64(cl, &content_length))
        return -S3E_INVALID_ARGUMENT;
    if (!cl && !(te && strcasestr(te, "chunked")))
        return -S3E_MISSING_CONTENT_LENGTH;

    enum sigv4_payload pm = rq->auth.payload;
    int streaming = pm == SIGV4_PAYLOAD_STREAMING || pm == SIGV4_PAYLOAD_STREAMING_TRAILER ||
                    pm == SIGV4_PAYLOAD_UNSIGNED_TRAILER;
    if (streaming) {
        const char *dl = req_header(rq, "x-amz-decoded-content-length");
        if (dl && parse_u64(dl, &up->declared))
            return -S3E_INVALID_ARGUMENT;
        if (!dl && pm != SIGV4_PAYLOAD_UNSIGNED_TRAILER)
            return -S3E_MISSING_CONTENT_LENGTH;
        enum awschunk_mode mode = pm == SIGV4_PAYLOAD_STREAMING ? AWSCHUNK_SIGNED
                                  : pm == SIGV4_PAYLOAD_STREAMING_TRAILER
                                      ? AWSCHUNK_SIGNED_TRAILER
                                      : AWSCHUNK_UNSIGNED_TRAILER;
        int rc = awschunk_new(mode, rq->auth.signing_key, rq->auth.seed_signature,
                              rq->auth.amz_date, rq->auth.scope, &up->ac);
        if (rc)
            return rc;
    } else {
        up->declared = content_length;
        up->verify_sha256 = pm == SIGV4_PAYLOAD_SHA256;
    }
    if (up->declared != UINT64_MAX && up->declared > max_size)
        return -S3E_ENTITY_TOO_LARGE;

    const char *md5 = req_header(rq, "Content-MD5");
    if (md5) {
        if (base64_decode(md5, tmp, sizeof(tmp)) != 16)
            return -S3E_INVALID_DIGEST;
        snprintf(up->want_md5_b64, sizeof(up->want_md5_b64), "%s", md5);
    }
    const char *hv = NULL;
    up->algo = upload_header_algo(rq, &hv);
    if (up->algo != CKSUM_NONE) {
        if (base64_decode(hv, tmp, sizeof(tmp)) != (int)cksum_algo_len(up->algo))
            return -S3E_INVALID_REQUEST;
        snprintf(up->want_algo_b64, sizeof(up->want_algo_b64), "%s", hv);
    }
    const char *trailer = req_header(rq, "x-amz-trailer");
    if (trailer && up->ac) {
        enum cksum_algo ta = cksum_algo_parse(trailer);
        if (ta == CKSUM_NONE)
            return -S3E_INVALID_REQUEST;
        if (up->algo == CKSUM_NONE) {
            up->algo = ta;
            up->algo_in_trailer = 1;
        }
    }
    if (up->algo == CKSUM_NONE) {
        const char *sdk = req_header(rq, "x-amz-sdk-checksum-algorithm");
        if (sdk)
            up->algo = cksum_algo_parse(sdk);
    }
    int rc = cksum_new(CKSUM_WANT_MD5 | (up->verify_sha256 ? CKSUM_WANT_SHA256 : 0), up->algo,
                       &up->ck);
    if (rc)
        return rc;
    up->cache = rq->srv->cache;
    return 0;
}

int upload_begin(struct req *rq, uint64_t max_size)
{
    int rc = begin(rq, max_size);
    return rc ? rc : cache_stage_open(rq->srv->cache, &rq->up->fd, rq->up->path);
}

int upload_prepare(struct req *rq, uint64_t max_size)
{
    return begin(rq, max_size);
}

int upload_target_stage(struct req *rq)
{
    return cache_stage_open(rq->srv->cache, &rq->up->fd, rq->up->path);
}

int upload_target_fd(struct req *rq, int fd, uint64_t off)
{
    rq->up->fd = fd;
    return lseek(fd, (off_t)off, SEEK_SET) < 0 ? -errno : 0;
}

uint64_t upload_declared(struct req *rq)
{
    return rq->up ? rq->up->declared : UINT64_MAX;
}

int upload_admit_dirty(struct req *rq)
{
    struct upload *up = rq->up;
    if (!up)
        return -S3E_INTERNAL;
    /* an unknown length (chunked without x-amz-decoded-content-length) is not reserved */
    uint64_t want = up->declared == UINT64_MAX ? 0 : up->declared;
    int rc = cache_dirty_admit(up->cache, want);
    if (!rc)
        up->dirty_admitted = want;
    return rc;
}

int upload_write(struct req *rq, const char *data, size_t len)
{
    struct upload *up = rq->up;
    if (!up)
        return -S3E_INTERNAL;
    if (up->ac)
        return awschunk_feed(up->ac, data, len, upload_sink, rq);
    return upload_sink(rq, data, len);
}

int upload_finish(struct req *rq, struct be_meta *meta)
{
    struct upload *up = rq->up;
    struct cksum_result res;
    int rc;
    if (!up)
        return -S3E_INTERNAL;
    if (up->ac && (rc = awschunk_finish(up->ac)))
        return rc;
    if (up->declared != UINT64_MAX && up->written != up->declared)
        return -S3E_INCOMPLETE_BODY;
    cksum_final(up->ck, &res);
    if (up->want_md5_b64[0] && strcmp(up->want_md5_b64, res.md5_b64))
        return -S3E_BAD_DIGEST;
    if (up->verify_sha256 && strcasecmp(rq->auth.payload_sha256, res.sha256_hex))
        return -S3E_SHA256_MISMATCH;
    if (up->algo != CKSUM_NONE) {
        const char *want = up->want_algo_b64[0] ? up->want_algo_b64 : NULL;
        if (up->algo_in_trailer) {
            want = awschunk_trailer(up->ac, cksum_algo_header(up->algo));
            if (!want)
                return -S3E_INVALID_REQUEST;
        }
        if (want && strcmp(want, res.algo_b64))
            return -S3E_BAD_DIGEST;
        snprintf(meta->checksum_algo, sizeof(meta->checksum_algo), "%s",
                 cksum_algo_name(up->algo));
        snprintf(meta->checksum, sizeof(meta->checksum), "%s", res.algo_b64);
    }
    meta->size = up->written;
    snprintf(meta->etag, sizeof(meta->etag), "%s", res.md5_hex);
    return 0;
}

int upload_fd(struct req *rq)
{
    return rq->up ? rq->up->fd : -1;
}

const char *upload_path(struct req *rq)
{
    return rq->up && rq->up->path[0] ? rq->up->path : NULL;
}

void upload_release_path(struct req *rq)
{
    if (rq->up)
        rq->up->path[0] = '\0';
}

void upload_free(struct req *rq)
{
    struct upload *up = rq->up;
    if (!up)
        return;
    if (up->fd >= 0)
        close(up->fd);
    if (up->path[0])
        unlink(up->path);
    if (up->dirty_admitted)
        cache_dirty_unadmit(up->cache, up->dirty_admitted);
    cksum_free(up->ck);
    awschunk_free(up->ac);
    free(up);
    rq->up = NULL;
}

int gw_copy_fd(int in, uint64_t in_off, int out, uint64_t out_off, uint64_t len)
{
    loff_t io = (loff_t)in_off, oo = (loff_t)out_off;
    while (len) {
        ssize_t n = copy_file_range(in, &io, out, &oo, (size_t)S3C_MIN(len, (uint64_t)1 << 30), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP))
            break; /* fall back to copying through memory */
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EIO;
        len -= (uint64_t)n;
    }
    if (!len)
        return 0;
    enum { CHUNK = 1 << 20 };
    char *buf = malloc(CHUNK);
    int rc = buf ? 0 : -ENOMEM;
    while (!rc && len) {
        ssize_t n = pread(in, buf, (size_t)S3C_MIN(len, (uint64_t)CHUNK), io);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -EIO;
            break;
        }
        for (ssize_t w = 0; w < n && !rc;) {
            ssize_t k = pwrite(out, buf + w, (size_t)(n - w), oo);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0)
                rc = -errno;
            else {
                w += k;
                oo += k;
            }
        }
        io += n;
        len -= (uint64_t)n;
    }
    free(buf);
    return rc;
}

static void copy_field(char *dst, size_t cap, const char *v)
{
    snprintf(dst, cap, "%s", v ? v : "");
}

int meta_from_headers(struct req *rq, struct be_meta *m)
{
    copy_field(m->content_type, sizeof(m->content_type), req_header(rq, "Content-Type"));
    copy_field(m->cache_control, sizeof(m->cache_control), req_header(rq, "Cache-Control"));
    copy_field(m->content_disposition, sizeof(m->content_disposition),
               req_header(rq, "Content-Disposition"));
    copy_field(m->content_language, sizeof(m->content_language),
               req_header(rq, "Content-Language"));
    copy_field(m->expires, sizeof(m->expires), req_header(rq, "Expires"));
    /* Content-Encoding without the transport-level "aws-chunked" token. */
    const char *ce = req_header(rq, "Content-Encoding");
    m->content_encoding[0] = '\0';
    if (ce) {
        char tmp[256], *save = NULL;
        snprintf(tmp, sizeof(tmp), "%s", ce);
        for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            while (*t == ' ')
                t++;
            size_t tl = strlen(t);
            while (tl && t[tl - 1] == ' ')
                t[--tl] = '\0';
            if (!tl || !strcasecmp(t, "aws-chunked"))
                continue;
            size_t cur = strlen(m->content_encoding);
            snprintf(m->content_encoding + cur, sizeof(m->content_encoding) - cur, "%s%s",
                     cur ? ", " : "", t);
        }
    }
    size_t used = 0, total = 0;
    m->usermeta[0] = '\0';
    for (size_t i = 0; i < rq->n_headers; i++) {
        const char *n = rq->headers[i].name;
        if (strncasecmp(n, "x-amz-meta-", 11) || !n[11])
            continue;
        const char *v = rq->headers[i].value;
        total += strlen(n + 11) + strlen(v);
        if (total > 2048)
            return -S3E_METADATA_TOO_LARGE;
        int w = snprintf(m->usermeta + used, sizeof(m->usermeta) - used, "%s:%s\n", n + 11, v);
        if (w < 0 || (size_t)w >= sizeof(m->usermeta) - used)
            return -S3E_METADATA_TOO_LARGE;
        for (size_t j = used; j < used + strlen(n + 11); j++)
            if (m->usermeta[j] >= 'A' && m->usermeta[j] <= 'Z')
                m->usermeta[j] = (char)(m->usermeta[j] + 32);
        used += (size_t)w;
    }
    return 0;
}
