/*
 * read.c: the GET / HEAD flow of everything answered as an object, from the cache: the object
 * and its metadata (never blocking an HTTP thread: the cache resumes a parked request), the
 * version check, the target's selection (the whole object, or a tar member: h_member.c), the
 * conditional headers, ?partNumber or Range, then the body from a cached file (sendfile), the
 * backend's file, or the fill as it streams.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "http/respond.h"
#include "http/server.h"
#include "lib/range.h"
#include "lib/s3err.h"
#include "read.h"
#include "s3.h"

const struct read_target read_object = {NULL, NULL};

/* The conditional headers against @v: its ETag, and its alternative when it has one. */
static int read_cond(struct req *rq, const struct read_view *v)
{
    struct cond_hdrs c = {
        .if_match = req_header(rq, "If-Match"),
        .if_none_match = req_header(rq, "If-None-Match"),
        .if_modified_since = req_header(rq, "If-Modified-Since"),
        .if_unmodified_since = req_header(rq, "If-Unmodified-Since"),
    };
    int64_t mtime = v->meta->mtime_ns / 1000000000ll;
    int b = cond_check(&c, v->meta->etag, mtime, 1);
    if (!v->alt_etag)
        return b;
    int a = cond_check(&c, v->alt_etag, mtime, 1);
    if (a == -S3E_NOT_MODIFIED || b == -S3E_NOT_MODIFIED)
        return -S3E_NOT_MODIFIED;
    return a && b ? a : 0;
}

/* ?partNumber or Range of @m: *@off, *@len and *@status (200 or 206). READ_ON, or the
 * handler's return once answered (an error). */
static int read_range(struct req *rq, const struct be_meta *m, uint64_t *off, uint64_t *len,
                      int *status)
{
    const char *pn = req_query(rq, "partNumber");
    const char *range = req_header(rq, "Range");
    *off = 0;
    *len = m->size;
    *status = 200;
    if (pn) {
        char *end;
        long n = strtol(pn, &end, 10);
        if (*end || n < 1 || n > BE_MAX_PARTS)
            return respond_error_msg(rq, -S3E_INVALID_ARGUMENT,
                                     "Part number must be an integer between 1 and 10000");
        if (range)
            return respond_error_msg(rq, -S3E_INVALID_REQUEST,
                                     "Cannot specify both Range header and partNumber query");
        if (m->parts_count) {
            if ((uint32_t)n > m->parts_count)
                return respond_error(rq, -S3E_INVALID_RANGE);
            if (!m->part_size)
                return respond_error_msg(rq, -S3E_NOT_IMPLEMENTED,
                                         "partNumber of an object with unequal parts");
            *off = (uint64_t)(n - 1) * m->part_size;
            *len = (uint32_t)n == m->parts_count ? m->size - *off : m->part_size;
            *status = 206;
        } else if (n != 1) {
            return respond_error(rq, -S3E_INVALID_RANGE);
        }
    } else if (range) {
        int rc = range_parse(range, m->size, off, len);
        if (rc == -S3E_INVALID_RANGE)
            return respond_invalid_range(rq, range, m->size);
        if (rc < 0)
            return respond_error(rq, rc);
        if (rc == 1)
            *status = 206;
    }
    return READ_ON;
}

/* Whether a GET reads from the object's first byte: no Range (nor ?partNumber but 1), or a
 * Range from byte 0 (a suffix range or a later start reads elsewhere). */
static int reads_first(struct req *rq)
{
    const char *pn = req_query(rq, "partNumber");
    const char *range = req_header(rq, "Range");
    if (pn && strcmp(pn, "1"))
        return 0;
    if (!range)
        return 1;
    while (*range == ' ')
        range++;
    return strncmp(range, "bytes=0-", 8) == 0;
}

static int read_answer(struct req *rq, int is_get, const struct read_target *t)
{
    int rc;
    if (rq->phase == READ_START) {
        rc = cache_obj_get(rq->srv->cache, rq->bucket, rq->key, &rq->obj);
        if (rc)
            return respond_error(rq, rc);
        if (is_get && !t->select && reads_first(rq))
            cache_obj_reads_first(rq->obj);
        struct plans *plans = cache_plans(rq->srv->cache);
        if (is_get && plans && !rq->is_peer) /* the reader of a plan moves it on */
            plans_read(plans, rq->access_key[0] ? rq->access_key : "anonymous", rq->bucket, rq->key,
                       s3c_real_ns(), &rq->plan_tok);
        rq->phase = READ_META;
    }
    enum cache_outcome how = CACHE_HIT;
    const struct be_meta *m = NULL;
    rc = cache_obj_meta(rq->obj, &rq->waiter, &m, &how);
    if (rc == -EAGAIN)
        return REQ_OK; /* suspended; the cache resumes us */
    if (rc)
        return respond_error(rq, rc);
    rq->cache_how = (int)how;

    if (!version_id_ok(rq))
        return respond_error_msg(rq, -S3E_INVALID_ARGUMENT, "Invalid version id specified");

    struct read_view v = {m, 0, NULL};
    if (t->select && (rc = t->select(rq, m, &v)) != READ_ON)
        return rc;
    rq->meta = v.meta; /* a 304 carries its headers */
    if ((rc = read_cond(rq, &v)))
        return respond_error(rq, rc);

    uint64_t off, len;
    int status;
    if ((rc = read_range(rq, v.meta, &off, &len, &status)) != READ_ON)
        return rc;
    rq->partial = status == 206;
    rq->off = v.base + off; /* offsets in the object (the hit check reads them) */
    rq->len = len;
    if (t->served && rq->phase != READ_BODY)
        t->served(rq);
    if (!is_get || len == 0)
        return respond_object_at(rq, v.meta, -1, status, off, len, v.base);
    int fd = -1;
    rq->phase = READ_BODY;
    rc = cache_obj_open_get(rq->obj, v.base + off, len, &rq->waiter, &fd);
    if (rc == -EINPROGRESS)
        return REQ_OK; /* suspended until the fill has the backend's file open */
    rq->cache_how = (int)cache_obj_outcome(rq->obj); /* refined: hit only if no byte waits */
    if (rc == 1) {
        rq->from_source = 1;
        rc = 0;
    }
    if (rc == 0)
        return respond_object_at(rq, v.meta, fd, status, off, len, v.base);
    if (rc != -EAGAIN)
        return respond_error(rq, rc);
    return respond_object_at(rq, v.meta, -1, status, off, len, v.base);
}

int read_end(struct req *rq, int is_get, const struct read_target *t)
{
    int ret = read_answer(rq, is_get, t);
    if (rq->answered && rq->obj && rq->phase != READ_BODY)
        cache_obj_fetch_none(rq->obj);
    return ret;
}
