/*
 * h_batch.c: ordered batches, `POST /?batch` (or `POST /bucket?batch`, its bucket the items'
 * default). The body, a signed JSON document, names items {bucket, key, member?, range?}; the
 * answer is one TAR stream holding them in exactly that order, an entry "bucket/key" or
 * "bucket/key/member" each. With "continue_on_error" an item that cannot be served becomes an
 * empty entry marked with pax records (S3CACHED.status, .code, .message) and the stream ends
 * with a __batch_status__.json member; without it the first such item fails the request with
 * its S3 error before any byte is sent.
 *
 * A worker resolves every item first (metadata lookups in parallel, member indexes found or
 * built), so the length and every failure are known before the status line. The stream is
 * then generated on the connection's thread: each entry's header, then its bytes read from
 * the cache (cache_obj_read: a hit is a pread from the SSD file; a miss waits, suspended),
 * while the fetches of the next BATCH_AHEAD items are started ahead of the stream position.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "http/respond.h"
#include "http/server.h"
#include "lib/json.h"
#include "lib/range.h"
#include "lib/s3err.h"
#include "lib/tar.h"
#include "s3.h"

#define BATCH_AHEAD 16          /* items whose fetches start ahead of the stream position */
#define BATCH_HDR_MAX (16u << 10) /* one entry's header blocks, at most */
#define BATCH_STATUS_NAME "__batch_status__.json"

enum { BPH_START = 0, BPH_READY };

struct bitem {
    const char *bucket, *key, *member; /* into the parsed body (member NULL: the object) */
    const char *range;                 /* NULL: all of it */
    struct cache_obj *o;
    uint64_t off, len; /* the object's bytes to send */
    int64_t mtime;
    int rc;            /* 0, or why it cannot be served */
    char msg[300];
    void *blob;        /* a member index this batch built and the version did not keep */
    size_t blob_len;
    size_t hdr_len;
    uint64_t start;    /* stream offset of its header */
    int kicked;        /* its fetch was started ahead */
};

struct batch {
    struct req *rq;
    struct json *doc;
    struct bitem *items;
    size_t n, n_failed, n_members;
    int cont;            /* continue_on_error */
    size_t fail;         /* the item that fails the request (strict), or n */
    char *status;        /* __batch_status__.json (continue_on_error) */
    size_t status_len, status_hdr_len;
    uint64_t tail;       /* stream offset of the status member (or of the end blocks) */
    uint64_t total;
    size_t cur;          /* the reader's item */
    unsigned char *hdr;  /* BATCH_HDR_MAX: the current header */
    size_t hdr_of;       /* whose header is in hdr (SIZE_MAX: none) */
};

static void batch_free(void *p)
{
    struct batch *b = p;
    if (!b)
        return;
    for (size_t i = 0; i < b->n; i++) {
        if (b->items[i].o) {
            cache_obj_cancel_wait(b->items[i].o, &b->rq->waiter);
            cache_obj_release(b->items[i].o);
        }
        free(b->items[i].blob);
    }
    free(b->items);
    json_free(b->doc);
    free(b->status);
    free(b->hdr);
    free(b);
}

/* ---- the request --------------------------------------------------------------------------- */

static int h_batch_begin(struct req *rq)
{
    uint64_t max = rq->srv->cf->batch_max_body;
    const char *cl = req_header(rq, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > max) {
        char msg[128];
        snprintf(msg, sizeof(msg), "A batch body is at most %llu bytes",
                 (unsigned long long)max);
        return respond_error_msg(rq, -S3E_MAX_MESSAGE_LENGTH, msg);
    }
    rq->body.max = max;
    return 0;
}

static int h_batch_body(struct req *rq, const char *data, size_t len)
{
    int rc = buf_append(&rq->body, data, len);
    return rc == -EMSGSIZE ? -S3E_MAX_MESSAGE_LENGTH : rc;
}

/* Parses the body into b->items. 0, or an S3 error with @msg set. */
static int batch_parse(struct req *rq, struct batch *b, char *msg, size_t msg_len)
{
    struct errmsg em = {""};
    if (!rq->body.len) {
        snprintf(msg, msg_len, "A batch needs a JSON body: {\"items\": [{\"key\": ...}, ...]}");
        return -S3E_MISSING_REQUEST_BODY;
    }
    if (json_parse(rq->body.p, rq->body.len, &b->doc, &em)) {
        snprintf(msg, msg_len, "The batch body is not JSON: %s", em.buf);
        return -S3E_INVALID_REQUEST;
    }
    const struct json *d = b->doc, *items = json_get(d, "items");
    if (d->type != JSON_OBJ || !items || items->type != JSON_ARR || !items->n) {
        snprintf(msg, msg_len, "The batch body must be an object with a non-empty \"items\" "
                               "array");
        return -S3E_INVALID_REQUEST;
    }
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->keys[i], "items") && strcmp(d->keys[i], "continue_on_error")) {
            snprintf(msg, msg_len, "Unknown field \"%.64s\" in the batch body", d->keys[i]);
            return -S3E_INVALID_REQUEST;
        }
    const struct json *coe = json_get(d, "continue_on_error");
    if (coe && coe->type != JSON_BOOL) {
        snprintf(msg, msg_len, "\"continue_on_error\" must be true or false");
        return -S3E_INVALID_REQUEST;
    }
    b->cont = coe && coe->b;
    int64_t max = rq->srv->cf->batch_max_items;
    if ((int64_t)items->n > max) {
        snprintf(msg, msg_len, "A batch holds at most %lld items; this one has %zu",
                 (long long)max, items->n);
        return -S3E_INVALID_REQUEST;
    }
    b->n = items->n;
    b->items = calloc(b->n, sizeof(*b->items));
    if (!b->items)
        return -ENOMEM;
    for (size_t i = 0; i < b->n; i++) {
        const struct json *it = &items->items[i];
        struct bitem *bi = &b->items[i];
        if (it->type != JSON_OBJ) {
            snprintf(msg, msg_len, "Item %zu is not an object", i);
            return -S3E_INVALID_REQUEST;
        }
        for (size_t k = 0; k < it->n; k++) {
            const char *f = it->keys[k];
            if ((strcmp(f, "bucket") && strcmp(f, "key") && strcmp(f, "member") &&
                 strcmp(f, "range")) || it->items[k].type != JSON_STR) {
                snprintf(msg, msg_len, "Item %zu: \"%.64s\" is not a string field of an item "
                                       "(bucket, key, member, range)", i, f);
                return -S3E_INVALID_REQUEST;
            }
        }
        bi->bucket = json_get_str(it, "bucket");
        if (!bi->bucket)
            bi->bucket = rq->bucket;
        bi->key = json_get_str(it, "key");
        bi->member = json_get_str(it, "member");
        bi->range = json_get_str(it, "range");
        if (!bi->bucket || !bi->key || !*bi->key) {
            snprintf(msg, msg_len, "Item %zu needs a \"key\"%s", i,
                     bi->bucket ? "" : " and a \"bucket\" (POST /?batch has no default)");
            return -S3E_INVALID_REQUEST;
        }
        if (bi->member && (!*bi->member || strlen(bi->member) > 4096)) {
            snprintf(msg, msg_len, "Item %zu: \"member\" must be 1 to 4096 bytes", i);
            return -S3E_INVALID_REQUEST;
        }
    }
    return 0;
}

/* The entry name of @bi: "bucket/key" or "bucket/key/member". */
static int entry_name(const struct bitem *bi, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s%s%s", bi->bucket, bi->key, bi->member ? "/" : "",
                     bi->member ? bi->member : "");
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

/* Writes item @i's header into b->hdr. Its length, or a negative error. */
static ssize_t entry_header(struct batch *b, size_t i)
{
    const struct bitem *bi = &b->items[i];
    char name[8192], status[8];
    int nl = entry_name(bi, name, sizeof(name));
    if (nl < 0)
        return -E2BIG;
    if (!bi->rc)
        return tar_write_header(b->hdr, BATCH_HDR_MAX, name, (size_t)nl, bi->len, bi->mtime,
                                NULL, 0);
    const struct s3err_info *e = s3err_lookup(bi->rc, 0);
    snprintf(status, sizeof(status), "%d", e->status);
    struct tar_write_kv kv[] = {
        {"S3CACHED.status", status},
        {"S3CACHED.code", e->code},
        {"S3CACHED.message", bi->msg[0] ? bi->msg : e->message},
    };
    return tar_write_header(b->hdr, BATCH_HDR_MAX, name, (size_t)nl, 0, bi->mtime, kv, 3);
}

/* Resolves item @i (its metadata known: @m, @rc): member, range, bytes to send. */
static void item_resolve(struct batch *b, size_t i, const struct be_meta *m, int rc)
{
    struct bitem *bi = &b->items[i];
    uint64_t base = 0, size;
    if (rc) {
        bi->rc = rc;
        return;
    }
    size = m->size;
    bi->mtime = m->mtime_ns / 1000000000ll;
    if (bi->member) {
        struct cache_member cm;
        size_t kl = strlen(bi->key);
        b->n_members++;
        if ((kl > 7 && !strcasecmp(bi->key + kl - 7, ".tar.gz")) ||
            (kl > 4 && !strcasecmp(bi->key + kl - 4, ".tgz"))) {
            bi->rc = -S3E_NOT_IMPLEMENTED;
            snprintf(bi->msg, sizeof(bi->msg), "Member reads of compressed tars are not "
                                               "supported");
            return;
        }
        rc = cache_obj_member(bi->o, bi->member, strlen(bi->member), &cm);
        if (rc == -ENODATA || rc == -EBADMSG) {
            /* an index this batch built already, that the version could not keep */
            for (size_t j = 0; j < i && rc; j++)
                if (b->items[j].blob && !strcmp(b->items[j].bucket, bi->bucket) &&
                    !strcmp(b->items[j].key, bi->key))
                    rc = cache_member_lookup(b->items[j].blob, b->items[j].blob_len,
                                             bi->member, strlen(bi->member), &cm);
        }
        if (rc == -ENODATA || rc == -EBADMSG) {
            struct errmsg em = {""};
            rc = cache_obj_members_build(bi->o, &bi->blob, &bi->blob_len, &em);
            if (rc) {
                bi->rc = rc;
                if (rc == -S3E_INVALID_ARCHIVE)
                    snprintf(bi->msg, sizeof(bi->msg), "%.100s is not a tar archive the "
                             "gateway can read: %.120s", bi->key, em.buf);
                return;
            }
            rc = cache_member_lookup(bi->blob, bi->blob_len, bi->member, strlen(bi->member),
                                     &cm);
        }
        if (rc == -ENOENT) {
            bi->rc = -S3E_NO_SUCH_KEY;
            snprintf(bi->msg, sizeof(bi->msg), "%.120s has no member %.150s", bi->key,
                     bi->member);
            return;
        }
        if (rc || cm.data_off > m->size || cm.size > m->size - cm.data_off) {
            bi->rc = -S3E_INTERNAL;
            return;
        }
        base = cm.data_off;
        size = cm.size;
    }
    uint64_t off = 0, len = size;
    if (bi->range) {
        rc = range_parse(bi->range, size, &off, &len);
        if (rc < 0) {
            bi->rc = rc;
            snprintf(bi->msg, sizeof(bi->msg), "The range %.64s is not satisfiable (%llu "
                     "bytes)", bi->range, (unsigned long long)size);
            return;
        }
    }
    bi->off = base + off;
    bi->len = len;
}

/* __batch_status__.json: one row per item, in order. */
static int status_doc(struct batch *b)
{
    struct buf s;
    char name[8192];
    int rc;
    buf_init(&s, 1u << 30);
    rc = buf_puts(&s, "{\"items\": [");
    for (size_t i = 0; i < b->n && !rc; i++) {
        const struct bitem *bi = &b->items[i];
        const struct s3err_info *e = s3err_lookup(bi->rc ? bi->rc : -S3E_INTERNAL, 0);
        rc = buf_printf(&s, "%s\n  {\"index\": %zu, \"name\": ", i ? "," : "", i);
        if (!rc)
            rc = entry_name(bi, name, sizeof(name)) < 0 ? -E2BIG : buf_json_str(&s, name);
        if (!rc && !bi->rc)
            rc = buf_printf(&s, ", \"status\": %d, \"size\": %llu}", bi->range ? 206 : 200,
                            (unsigned long long)bi->len);
        else if (!rc) {
            rc = buf_printf(&s, ", \"status\": %d, \"code\": ", e->status);
            if (!rc)
                rc = buf_json_str(&s, e->code);
            if (!rc)
                rc = buf_puts(&s, ", \"message\": ");
            if (!rc)
                rc = buf_json_str(&s, bi->msg[0] ? bi->msg : e->message);
            if (!rc)
                rc = buf_puts(&s, "}");
        }
    }
    if (!rc)
        rc = buf_puts(&s, "\n]}\n");
    if (rc) {
        buf_free(&s);
        return rc;
    }
    b->status_len = s.len;
    b->status = buf_take(&s);
    return 0;
}

/* Worker: every item resolved, the stream laid out. */
static void batch_job(struct req *rq)
{
    struct batch *b = rq->job_state;
    struct cache_obj **objs = calloc(b->n, sizeof(*objs));
    const struct be_meta **metas = calloc(b->n, sizeof(*metas));
    int *rcs = calloc(b->n, sizeof(*rcs));
    rq->rc = 0;
    if (!objs || !metas || !rcs || !(b->hdr = malloc(BATCH_HDR_MAX))) {
        rq->rc = -ENOMEM;
        goto out;
    }
    size_t nobj = 0;
    for (size_t i = 0; i < b->n; i++) {
        struct bitem *bi = &b->items[i];
        if (backend_check_bucket_name(bi->bucket))
            bi->rc = -S3E_NO_SUCH_BUCKET;
        else if ((bi->rc = backend_check_key(bi->key, strlen(bi->key))) == 0 &&
                 (bi->rc = cache_obj_get(rq->srv->cache, bi->bucket, bi->key, &bi->o)) == 0)
            objs[nobj++] = bi->o;
    }
    cache_objs_meta_wait(objs, nobj, metas, rcs);
    b->fail = b->n;
    for (size_t i = 0, k = 0; i < b->n; i++) {
        struct bitem *bi = &b->items[i];
        if (bi->o) {
            item_resolve(b, i, metas[k], rcs[k]);
            k++;
        }
        if (bi->rc) {
            b->n_failed++;
            if (!b->cont && b->fail == b->n)
                b->fail = i;
        }
        if (bi->rc && !b->cont)
            break;
    }
    if (b->fail < b->n)
        goto out;
    /* the layout: entries, the status member, two zero blocks */
    uint64_t at = 0;
    for (size_t i = 0; i < b->n; i++) {
        struct bitem *bi = &b->items[i];
        ssize_t h = entry_header(b, i);
        if (h < 0) {
            rq->rc = (int)h == -E2BIG ? -S3E_KEY_TOO_LONG : (int)h;
            goto out;
        }
        bi->hdr_len = (size_t)h;
        bi->start = at;
        at += (uint64_t)h + bi->len + TAR_PAD(bi->len);
    }
    b->tail = at;
    if (b->cont) {
        if ((rq->rc = status_doc(b)))
            goto out;
        ssize_t h = tar_write_header(b->hdr, BATCH_HDR_MAX, BATCH_STATUS_NAME,
                                     strlen(BATCH_STATUS_NAME), b->status_len, 0, NULL, 0);
        if (h < 0) {
            rq->rc = (int)h;
            goto out;
        }
        b->status_hdr_len = (size_t)h;
        at += (uint64_t)h + b->status_len + TAR_PAD(b->status_len);
    }
    b->total = at + 2 * TAR_BLOCK;
    b->hdr_of = SIZE_MAX;
out:
    free(objs);
    free(metas);
    free(rcs);
}

/* ---- the stream ---------------------------------------------------------------------------- */

/* Starts the fetches of the items after @i (up to BATCH_AHEAD), so that misses land while the
 * stream sends what is before them. Non-blocking. */
static void batch_kick(struct batch *b, size_t i)
{
    for (size_t j = i; j < b->n && j <= i + BATCH_AHEAD; j++) {
        struct bitem *bi = &b->items[j];
        if (bi->kicked || bi->rc || !bi->len)
            continue;
        bi->kicked = 1;
        int fd = -1;
        if (cache_obj_open_range(bi->o, bi->off, bi->len, &fd) == 0)
            close(fd); /* all there already */
    }
}

static ssize_t copy_out(char *buf, size_t max, const void *src, uint64_t avail)
{
    size_t n = (size_t)S3C_MIN((uint64_t)max, avail);
    if (src)
        memcpy(buf, src, n);
    else
        memset(buf, 0, n);
    return (ssize_t)n;
}

static ssize_t batch_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct batch *b = cls;
    struct req *rq = b->rq;
    while (b->cur < b->n && pos >= b->items[b->cur].start + b->items[b->cur].hdr_len +
                                        b->items[b->cur].len + TAR_PAD(b->items[b->cur].len))
        b->cur++;
    if (b->cur < b->n) {
        struct bitem *bi = &b->items[b->cur];
        uint64_t rel = pos - bi->start;
        if (rel < bi->hdr_len) {
            if (b->hdr_of != b->cur) {
                ssize_t h = entry_header(b, b->cur);
                if (h != (ssize_t)bi->hdr_len)
                    return h < 0 ? h : -EIO;
                b->hdr_of = b->cur;
                batch_kick(b, b->cur);
            }
            return copy_out(buf, max, b->hdr + rel, bi->hdr_len - rel);
        }
        rel -= bi->hdr_len;
        if (rel < bi->len) {
            size_t want = (size_t)S3C_MIN((uint64_t)max, bi->len - rel);
            ssize_t n = cache_obj_read(bi->o, bi->off + rel, buf, want, &rq->waiter);
            if (n == -EAGAIN)
                return 0; /* suspended; the fill resumes us */
            if (n == 0)
                return -EIO; /* the object ended early */
            if (n > 0 && rel + (uint64_t)n == bi->len &&
                cache_obj_outcome(bi->o) != CACHE_HIT)
                rq->cache_how = CACHE_MISS;
            return n;
        }
        rel -= bi->len;
        return copy_out(buf, max, NULL, TAR_PAD(bi->len) - rel);
    }
    uint64_t rel = pos - b->tail;
    if (b->cont) {
        if (rel < b->status_hdr_len) {
            if (b->hdr_of != b->n) {
                ssize_t h = tar_write_header(b->hdr, BATCH_HDR_MAX, BATCH_STATUS_NAME,
                                             strlen(BATCH_STATUS_NAME), b->status_len, 0,
                                             NULL, 0);
                if (h != (ssize_t)b->status_hdr_len)
                    return h < 0 ? h : -EIO;
                b->hdr_of = b->n;
            }
            return copy_out(buf, max, b->hdr + rel, b->status_hdr_len - rel);
        }
        rel -= b->status_hdr_len;
        if (rel < b->status_len)
            return copy_out(buf, max, b->status + rel, b->status_len - rel);
        rel -= b->status_len;
        if (rel < TAR_PAD(b->status_len))
            return copy_out(buf, max, NULL, TAR_PAD(b->status_len) - rel);
        rel -= TAR_PAD(b->status_len);
    }
    return copy_out(buf, max, NULL, 2 * TAR_BLOCK - S3C_MIN(rel, 2 * TAR_BLOCK));
}

static int h_batch_end(struct req *rq)
{
    struct batch *b = rq->job_state;
    char msg[1024] = "";
    int rc;
    if (rq->phase == BPH_READY) {
        if (rq->rc)
            return respond_error(rq, rq->rc);
        cache_count_members(rq->srv->cache, b->n_members, 1, b->n, b->n_failed);
        if (b->fail < b->n) {
            struct bitem *bi = &b->items[b->fail];
            char name[600];
            snprintf(name, sizeof(name), "%s/%s%s%s", bi->bucket, bi->key,
                     bi->member ? "/" : "", bi->member ? bi->member : "");
            snprintf(msg, sizeof(msg), "Item %zu (%.300s): %.600s", b->fail, name,
                     bi->msg[0] ? bi->msg : s3err_lookup(bi->rc, 0)->message);
            return respond_error_msg(rq, bi->rc, msg);
        }
        char items[24], errors[24];
        snprintf(items, sizeof(items), "%zu", b->n);
        snprintf(errors, sizeof(errors), "%zu", b->n_failed);
        const char *hdrs[] = {"x-s3cached-batch-items", items, "x-s3cached-batch-errors",
                              errors, NULL};
        rq->cache_how = rq->cache_how < 0 ? CACHE_HIT : rq->cache_how;
        return respond_generated(rq, 200, "application/x-tar", b->total, batch_read, b, hdrs);
    }
    /* The body is bound to the signature: a signed request carries its SHA-256 (SigV4
     * x-amz-content-sha256, checked by reqbody.c before this runs). */
    if (strcmp(rq->access_key, "anonymous") && rq->auth.payload != SIGV4_PAYLOAD_SHA256)
        return respond_error_msg(rq, -S3E_INVALID_REQUEST,
                                 "The body of a batch must be signed: send its SHA-256 in "
                                 "x-amz-content-sha256 (not UNSIGNED-PAYLOAD)");
    if (!(b = calloc(1, sizeof(*b))))
        return respond_error(rq, -ENOMEM);
    b->rq = rq;
    rq->job_state = b;
    rq->job_state_free = batch_free;
    if ((rc = batch_parse(rq, b, msg, sizeof(msg))))
        return respond_error_msg(rq, rc, msg[0] ? msg : NULL);
    rq->phase = BPH_READY;
    rc = req_run_wait_job(rq, batch_job);
    return rc ? respond_error(rq, rc) : REQ_OK;
}

const struct handler h_batch = {.begin = h_batch_begin, .body = h_batch_body,
                                .end = h_batch_end};
