/*
 * upload.c: request bodies that become objects or parts. Undoes aws-chunked
 * framing (awschunk.c), hashes in one pass (checksum.c: MD5 for the ETag,
 * SHA-256 when the payload hash was signed, the x-amz-checksum-* algorithm),
 * and writes to a staged file in the cache directory; upload_finish() checks
 * lengths and every digest before anything is stored.
 * In write-back mode a large body goes around the page cache (direct_*): the
 * bytes gather in an aligned buffer written with O_DIRECT, a chunk at a time;
 * bytes before the first aligned offset and after the last go the buffered
 * way. A 1 GiB checkpoint then costs no page-cache copy, no zeroing of fresh
 * pages, and no contention of parallel parts on the data file's inode lock
 * (perf: those were 55 % of the gateway's CPU on a checkpoint upload).
 * The aligned buffers are kept for the next body (stage_get/stage_put): a
 * fresh one costs 256 page faults and their zeroing, about 6 % of the
 * gateway's CPU per checkpoint.
 * Owns the staged file until upload_release_path(); upload_free() unlinks it.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "sig/awschunk.h"
#include "lib/checksum.h"
#include "cache/cache.h"
#include "cache/store.h"
#include "lib/fileio.h"
#include "objects/objects.h"
#include "req.h"
#include "server.h"
#include "upload.h"
#include "lib/s3err.h"

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
    uint64_t admitted;       /* reserved by the object layer (write-back: the dirty limit) */
    uint64_t space;          /* room reserved in the cache for the file's bytes */
    int failed;              /* a write failed: the body is dropped (upload_drop) */
    struct objects *obj;
    struct cache *cache;
    uint64_t pos;            /* file offset of the next byte not yet written or staged */
    /* upload_target_fd(): the slot of another file this body writes, from @slot_off on; its
     * bytes are given back (a hole punched) unless upload_keep() said they were recorded */
    int in_slot, kept;
    uint64_t slot_off;
    /* direct: the same file opened O_DIRECT, and the aligned buffer of bytes bound for @pos */
    int dfd;
    unsigned char *stage;
    size_t staged;
};

#define UPLOAD_DIRECT_ALIGN 4096u
#define UPLOAD_DIRECT_CHUNK (1u << 20) /* one write: short, as it holds an HTTP thread */
#define UPLOAD_DIRECT_MIN (4ull << 20) /* smaller bodies stay in the page cache */

/* Aligned buffers of UPLOAD_DIRECT_CHUNK bytes no body holds now, at most STAGE_POOL_MAX:
 * as many as bodies are usually written at once (awscli sends 10 parts in parallel). */
enum { STAGE_POOL_MAX = 16 };
static struct {
    pthread_mutex_t mu;
    unsigned n;
    void *free[STAGE_POOL_MAX];
} stage_pool = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* A buffer of UPLOAD_DIRECT_CHUNK bytes aligned to UPLOAD_DIRECT_ALIGN, NULL when out of
 * memory. Its contents are whatever the last body left. */
static void *stage_get(void)
{
    void *p = NULL;
    pthread_mutex_lock(&stage_pool.mu);
    if (stage_pool.n)
        p = stage_pool.free[--stage_pool.n];
    pthread_mutex_unlock(&stage_pool.mu);
    if (!p && posix_memalign(&p, UPLOAD_DIRECT_ALIGN, UPLOAD_DIRECT_CHUNK))
        p = NULL;
    return p;
}

/* Gives back a buffer of stage_get() (NULL is ignored): kept for the next body, or freed. */
static void stage_put(void *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&stage_pool.mu);
    if (stage_pool.n < STAGE_POOL_MAX) {
        stage_pool.free[stage_pool.n++] = p;
        p = NULL;
    }
    pthread_mutex_unlock(&stage_pool.mu);
    free(p);
}

__attribute__((destructor)) static void stage_pool_free(void)
{
    while (stage_pool.n)
        free(stage_pool.free[--stage_pool.n]);
}

/* Sends the body written from @up->pos on around the page cache, when it is large and the
 * write does not read it back at once (objects_stage_direct(): write-back; write-through
 * reads the file again at once: that stays in memory). Best effort: any refusal (no memory, a
 * file system without O_DIRECT) keeps it buffered. */
static void direct_start(struct req *rq)
{
    struct upload *up = rq->up;
    long pg = sysconf(_SC_PAGESIZE);
    if (!objects_stage_direct(rq->srv->obj) || up->declared == UINT64_MAX ||
        up->declared < UPLOAD_DIRECT_MIN || pg <= 0 || UPLOAD_DIRECT_ALIGN % (unsigned long)pg)
        return;
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", up->fd);
    int dfd = open(proc, O_WRONLY | O_DIRECT | O_CLOEXEC);
    if (dfd < 0)
        return;
    void *stage = stage_get();
    if (!stage) {
        close(dfd);
        return;
    }
    up->dfd = dfd;
    up->stage = stage;
    up->staged = 0;
}

/* Writes the first @n staged bytes at @up->pos (direct when @n is whole pages, else the
 * buffered way), keeping the rest at the stage's start. A direct write the file system
 * refuses (EINVAL) is done buffered, and the rest of the body with it. */
static int direct_flush(struct upload *up, size_t n)
{
    int rc = -EINVAL;
    if (up->dfd >= 0 && n % UPLOAD_DIRECT_ALIGN == 0)
        rc = fileio_pwrite_all(up->dfd, up->stage, n, up->pos);
    if (rc == -EINVAL) {
        if (up->dfd >= 0 && n % UPLOAD_DIRECT_ALIGN == 0) {
            close(up->dfd);
            up->dfd = -1;
        }
        rc = fileio_pwrite_all(up->fd, up->stage, n, up->pos);
    }
    if (rc)
        return rc;
    memmove(up->stage, up->stage + n, up->staged - n);
    up->staged -= n;
    up->pos += n;
    return 0;
}

/* Stages @len bytes; bytes before the first aligned file offset go out at once, buffered. */
static int direct_write(struct upload *up, const unsigned char *p, size_t len)
{
    while (len) {
        size_t n;
        if (!up->staged && up->pos % UPLOAD_DIRECT_ALIGN) {
            n = (size_t)S3C_MIN((uint64_t)len, UPLOAD_DIRECT_ALIGN - up->pos % UPLOAD_DIRECT_ALIGN);
            int rc = fileio_pwrite_all(up->fd, p, n, up->pos);
            if (rc)
                return rc;
            up->pos += n;
        } else {
            n = S3C_MIN(len, (size_t)UPLOAD_DIRECT_CHUNK - up->staged);
            memcpy(up->stage + up->staged, p, n);
            up->staged += n;
            if (up->staged == UPLOAD_DIRECT_CHUNK) {
                int rc = direct_flush(up, UPLOAD_DIRECT_CHUNK);
                if (rc)
                    return rc;
            }
        }
        p += n;
        len -= n;
    }
    return 0;
}

/* Writes what is staged: whole pages direct, a last partial page buffered. */
static int direct_finish(struct upload *up)
{
    size_t whole = up->staged & ~(size_t)(UPLOAD_DIRECT_ALIGN - 1);
    int rc = whole ? direct_flush(up, whole) : 0;
    return !rc && up->staged ? direct_flush(up, up->staged) : rc;
}

/* A body reserves as its bytes arrive: room in the cache and, in write-back, the dirty limit
 * (upload_admit() only checks that a declared length could fit). Never more than twice what
 * has arrived, or a step: a client that declares 60 MiB and trickles holds what it sent, not
 * what it promised, and a fast one reserves a few times per body. What it needs exactly when
 * the larger reservation does not fit. */
#define UPLOAD_RESERVE_STEP (1ull << 20)

static int upload_reserve(struct upload *up, uint64_t need)
{
    uint64_t step = (need + UPLOAD_RESERVE_STEP - 1) / UPLOAD_RESERVE_STEP * UPLOAD_RESERVE_STEP;
    step = S3C_MIN(S3C_MAX(step, 2 * up->written), up->max);
    if (up->declared != UINT64_MAX)
        step = S3C_MIN(step, up->declared);
    step = S3C_MAX(step, need);
    int rc = 0;
    if (need > up->admitted && objects_admit_more(up->obj, step, &up->admitted))
        rc = objects_admit_more(up->obj, need, &up->admitted);
    if (!rc && need > up->space && cache_stage_reserve(up->cache, &up->space, step))
        rc = cache_stage_reserve(up->cache, &up->space, need);
    return rc;
}

static int upload_sink(void *cls, const void *data, size_t len)
{
    struct req *rq = cls;
    struct upload *up = rq->up;
    if (up->written + len > up->max)
        return -S3E_ENTITY_TOO_LARGE;
    if (up->declared != UINT64_MAX && up->written + len > up->declared)
        return -S3E_INVALID_REQUEST;
    int rrc = upload_reserve(up, up->written + len);
    if (rrc)
        return rrc;
    cksum_update(up->ck, data, len);
    int rc;
    if (up->stage) {
        rc = direct_write(up, data, len);
    } else {
        rc = fileio_pwrite_all(up->fd, data, len, up->pos);
        up->pos += len;
    }
    if (!rc)
        up->written += len;
    return rc;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !*s || *s == '-')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v == UINT64_MAX) /* UINT64_MAX means "unknown" to us */
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
    up->dfd = -1;
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
    up->obj = rq->srv->obj;
    up->cache = rq->srv->cache;
    return 0;
}

int upload_begin(struct req *rq, uint64_t max_size)
{
    int rc = begin(rq, max_size);
    return rc ? rc : upload_target_stage(rq);
}

int upload_prepare(struct req *rq, uint64_t max_size)
{
    return begin(rq, max_size);
}

int upload_target_stage(struct req *rq)
{
    int rc = cache_stage_open(rq->srv->cache, &rq->up->fd, rq->up->path);
    if (!rc)
        direct_start(rq);
    return rc;
}

int upload_target_fd(struct req *rq, int fd, uint64_t off)
{
    rq->up->fd = fd;
    rq->up->pos = off;
    rq->up->in_slot = 1;
    rq->up->slot_off = off;
    direct_start(rq);
    return 0;
}

uint64_t upload_declared(struct req *rq)
{
    return rq->up ? rq->up->declared : UINT64_MAX;
}

int upload_admit(struct req *rq)
{
    struct upload *up = rq->up;
    if (!up)
        return -S3E_INTERNAL;
    /* Refused now if it could not fit now (the dirty limit) or ever (the cache); nothing is
     * held until its bytes arrive (upload_reserve()). */
    if (up->declared == UINT64_MAX)
        return 0;
    uint64_t probe = 0;
    int rc = cache_stage_fits(up->cache, up->declared);
    if (!rc && !(rc = objects_admit(up->obj, up->declared, &probe)))
        objects_unadmit(up->obj, probe);
    return rc;
}

/* A body written into a slot of another file that will not be recorded: the bytes it wrote
 * there are given back to the file system. They were counted only in the body's own
 * reservation, which ends with it: kept, they would fill the disk uncounted (issue 45 item 5,
 * failed in-place UploadParts). The slot is still this body's (its fd holds the lock). */
static void upload_slot_giveback(struct upload *up)
{
    if (up->in_slot && !up->kept && up->fd >= 0 && up->pos > up->slot_off)
        store_punch(up->fd, up->slot_off, up->pos - up->slot_off);
    up->in_slot = 0;
}

/* A write failed: the body will not be stored, so it lets go at once of what it holds (the
 * staged file or the bytes written into a slot, the room and the dirty limit it reserved),
 * not once the client has sent the rest of it. upload_free() does what is left. */
static void upload_drop(struct upload *up)
{
    up->failed = 1;
    if (up->dfd >= 0)
        close(up->dfd);
    up->dfd = -1;
    upload_slot_giveback(up);
    if (up->path[0]) { /* a file of its own (not a slot of an upload's data file) */
        if (up->fd >= 0)
            close(up->fd);
        up->fd = -1;
        unlink(up->path);
        up->path[0] = '\0';
    }
    stage_put(up->stage);
    up->stage = NULL;
    up->staged = 0;
    cache_stage_release(up->cache, &up->space);
    objects_unadmit(up->obj, up->admitted);
    up->admitted = 0;
}

void upload_abandon(struct req *rq)
{
    if (rq->up && rq->up->cache && !rq->up->failed)
        upload_drop(rq->up);
}

int upload_write(struct req *rq, const char *data, size_t len)
{
    struct upload *up = rq->up;
    if (!up)
        return -S3E_INTERNAL;
    if (up->failed)
        return -S3E_INTERNAL;
    int rc = up->ac ? awschunk_feed(up->ac, data, len, upload_sink, rq)
                    : upload_sink(rq, data, len);
    if (rc)
        upload_drop(up);
    return rc;
}

int upload_finish(struct req *rq, struct be_meta *meta)
{
    struct upload *up = rq->up;
    struct cksum_result res;
    int rc;
    if (!up || up->failed)
        return -S3E_INTERNAL;
    if (up->ac && (rc = awschunk_finish(up->ac)))
        return rc;
    if (up->stage && (rc = direct_finish(up)))
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

uint64_t *upload_space(struct req *rq)
{
    return rq->up ? &rq->up->space : NULL;
}

void upload_release_path(struct req *rq)
{
    if (rq->up)
        rq->up->path[0] = '\0';
}

void upload_keep(struct req *rq)
{
    if (rq->up)
        rq->up->kept = 1;
}

void upload_free(struct req *rq)
{
    struct upload *up = rq->up;
    if (!up)
        return;
    if (up->dfd >= 0)
        close(up->dfd);
    up->dfd = -1;
    upload_slot_giveback(up);
    if (up->fd >= 0)
        close(up->fd);
    stage_put(up->stage);
    if (up->path[0])
        unlink(up->path);
    if (up->cache)
        cache_stage_release(up->cache, &up->space);
    objects_unadmit(up->obj, up->admitted);
    cksum_free(up->ck);
    awschunk_free(up->ac);
    free(up);
    rq->up = NULL;
}

static void copy_field(char *dst, size_t cap, const char *v)
{
    snprintf(dst, cap, "%s", v ? v : "");
}

int upload_meta_from_headers(struct req *rq, struct be_meta *m)
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
