/*
 * h_object.c: GetObject, HeadObject, PutObject, CopyObject, DeleteObject and
 * the object ACL stub. Reads go through the cache (never blocking an HTTP
 * thread); writes are staged by upload.c and run on a worker: backend first,
 * then the cache adopts the staged file, so read-after-write holds.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "gw.h"
#include "log.h"
#include "range.h"
#include "s3err.h"
#include "warm.h"

enum { PH_START = 0, PH_META, PH_JOB_DONE };

/* ------------------------------------------------------------------ GET / HEAD */

static int h_read_end(struct req *rq, int is_get)
{
    int rc;
    if (rq->phase == PH_START) {
        rc = cache_obj_get(rq->srv->cache, rq->bucket, rq->key, &rq->obj);
        if (rc)
            return respond_error(rq, rc);
        rq->phase = PH_META;
    }
    enum cache_outcome how = CACHE_HIT;
    const struct be_meta *m = NULL;
    rc = cache_obj_meta(rq->obj, &rq->waiter, &m, &how);
    if (rc == -EAGAIN)
        return MHD_YES; /* suspended; the cache resumes us */
    if (rc)
        return respond_error(rq, rc);
    rq->meta = m;
    rq->cache_how = (int)how;

    const char *vid = req_query(rq, "versionId");
    if (vid && *vid && strcmp(vid, "null"))
        return respond_error_msg(rq, -S3E_INVALID_ARGUMENT, "Invalid version id specified");

    struct cond_hdrs c = {
        .if_match = req_header(rq, "If-Match"),
        .if_none_match = req_header(rq, "If-None-Match"),
        .if_modified_since = req_header(rq, "If-Modified-Since"),
        .if_unmodified_since = req_header(rq, "If-Unmodified-Since"),
    };
    rc = cond_check(&c, m->etag, m->mtime_ns / 1000000000ll, 1);
    if (rc)
        return respond_error(rq, rc);

    uint64_t off = 0, len = m->size;
    int status = 200;
    const char *pn = req_query(rq, "partNumber");
    const char *range = req_header(rq, "Range");
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
            off = (uint64_t)(n - 1) * m->part_size;
            len = (uint32_t)n == m->parts_count ? m->size - off : m->part_size;
            status = 206;
        } else if (n != 1) {
            return respond_error(rq, -S3E_INVALID_RANGE);
        }
    } else if (range) {
        rc = range_parse(range, m->size, &off, &len);
        if (rc < 0)
            return respond_error(rq, rc);
        if (rc == 1)
            status = 206;
    }
    rq->partial = status == 206;
    rq->off = off;
    rq->len = len;
    if (!is_get || len == 0)
        return respond_object(rq, m, -1, status, off, len);
    int fd = -1;
    rc = cache_obj_open_get(rq->obj, off, len, &rq->waiter, &fd);
    if (rc == -EINPROGRESS)
        return MHD_YES; /* suspended until the fill has the backend's file open */
    rq->cache_how = (int)cache_obj_outcome(rq->obj); /* refined: hit only if no byte waits */
    if (rc == 1) {
        rq->from_source = 1;
        rc = 0;
    }
    if (rc == 0)
        return respond_object(rq, m, fd, status, off, len);
    if (rc != -EAGAIN)
        return respond_error(rq, rc);
    return respond_object(rq, m, -1, status, off, len);
}

static int h_get_end(struct req *rq)
{
    return h_read_end(rq, 1);
}

static int h_head_end(struct req *rq)
{
    return h_read_end(rq, 0);
}

const struct handler h_get = {.end = h_get_end};
const struct handler h_head = {.end = h_head_end};

/* ------------------------------------------------------------------ PUT */

struct put_state {
    struct be_meta meta;
    int rc;
};

static void put_state_free(void *p)
{
    free(p);
}

static struct put_state *put_state_new(struct req *rq)
{
    struct put_state *ps = calloc(1, sizeof(*ps));
    if (!ps)
        return NULL;
    rq->job_state = ps;
    rq->job_state_free = put_state_free;
    return ps;
}

int gw_write_back(const struct server *srv)
{
    return srv->cf->write_mode && strcmp(srv->cf->write_mode, "back") == 0;
}

static int h_put_begin(struct req *rq)
{
    int rc = upload_begin(rq, rq->srv->cf->max_object_size);
    if (!rc && gw_write_back(rq->srv))
        rc = upload_admit_dirty(rq);
    return rc;
}

static int h_put_body(struct req *rq, const char *data, size_t len)
{
    return upload_write(rq, data, len);
}

/* Worker: durable staged file -> backend -> cache (write-through), or -> the cache as a dirty
 * entry the drainer uploads later (write-back). */
static void put_job(struct req *rq)
{
    struct put_state *ps = rq->job_state;
    struct server *srv = rq->srv;
    int fd = upload_fd(rq);
    if (fsync(fd) != 0) {
        ps->rc = -errno;
        return;
    }
    if (gw_write_back(srv)) {
        const char *path = upload_path(rq);
        ps->rc = path ? cache_adopt_dirty(srv->cache, rq->bucket, rq->key, path, &ps->meta)
                      : -S3E_INTERNAL;
        upload_release_path(rq);
        return;
    }
    cache_write_begin(srv->cache, rq->bucket, rq->key); /* no drain of an older dirty copy */
    ps->rc = backend_put(srv->be, rq->bucket, rq->key, fd, ps->meta.size, &ps->meta);
    if (ps->rc) {
        cache_invalidate(srv->cache, rq->bucket, rq->key);
        cache_write_end(srv->cache, rq->bucket, rq->key);
        return;
    }
    /* The backend's own view (Last-Modified, and the ETag an S3 upstream gives a large PUT it
     * split into parts) is what later revalidation compares with, and what we answer. */
    struct be_meta stored;
    if (backend_head(srv->be, rq->bucket, rq->key, &stored) == 0 &&
        stored.size == ps->meta.size) {
        ps->meta.mtime_ns = stored.mtime_ns;
        memcpy(ps->meta.etag, stored.etag, sizeof(ps->meta.etag));
    }
    const char *path = upload_path(rq);
    if (path) {
        cache_adopt(srv->cache, rq->bucket, rq->key, path, &ps->meta);
        upload_release_path(rq);
    } else {
        cache_forget(srv->cache, rq->bucket, rq->key);
    }
    cache_write_end(srv->cache, rq->bucket, rq->key);
}

static int respond_put_ok(struct req *rq, const struct be_meta *m)
{
    struct MHD_Response *r;
    char etag[BE_ETAG_MAX + 2];
    if (respond_empty(rq, 200, &r) != MHD_YES)
        return MHD_NO;
    snprintf(etag, sizeof(etag), "\"%s\"", m->etag);
    MHD_add_response_header(r, "ETag", etag);
    if (m->checksum_algo[0]) {
        respond_checksum_header(r, m->checksum_algo, m->checksum);
    }
    return respond_queue_prepared(rq, 200, r);
}

static int h_put_end(struct req *rq)
{
    if (rq->phase == PH_JOB_DONE) {
        struct put_state *ps = rq->job_state;
        return ps->rc ? respond_error(rq, ps->rc) : respond_put_ok(rq, &ps->meta);
    }
    struct put_state *ps = put_state_new(rq);
    if (!ps)
        return respond_error(rq, -ENOMEM);
    int rc = upload_finish(rq, &ps->meta);
    if (!rc)
        rc = meta_from_headers(rq, &ps->meta);
    if (rc)
        return respond_error(rq, rc);
    ps->meta.mtime_ns = s3c_real_ns();
    rq->phase = PH_JOB_DONE;
    rc = req_run_job(rq, put_job);
    return rc ? respond_error(rq, rc) : MHD_YES;
}

const struct handler h_put = {.begin = h_put_begin, .body = h_put_body, .end = h_put_end,
                              .checks_payload = 1};

/* ------------------------------------------------------------------ COPY */

/* Parses x-amz-copy-source ("/bucket/key" or "bucket/key", URL-encoded, optional
 * "?versionId=..."). 0 or -S3E_*. */
int copy_source_parse(struct req *rq, char **bucket, char **key)
{
    const char *src = req_header(rq, "x-amz-copy-source");
    if (!src)
        return -S3E_INVALID_ARGUMENT;
    if (*src == '/')
        src++;
    size_t n = strcspn(src, "?");
    if (src[n]) {
        const char *v = src + n + 1;
        if (strncmp(v, "versionId=", 10) || (strcmp(v + 10, "null") && v[10]))
            return -S3E_INVALID_ARGUMENT;
    }
    char *dec = url_decode(src, n);
    if (!dec)
        return -S3E_INVALID_ARGUMENT;
    char *slash = strchr(dec, '/');
    if (!slash || !slash[1]) {
        free(dec);
        return -S3E_INVALID_ARGUMENT;
    }
    *slash = '\0';
    if (backend_check_bucket_name(dec)) {
        free(dec);
        return -S3E_NO_SUCH_BUCKET;
    }
    int rc = backend_check_key(slash + 1, strlen(slash + 1));
    if (rc) {
        free(dec);
        return rc;
    }
    *bucket = strdup(dec);
    *key = strdup(slash + 1);
    free(dec);
    return *bucket && *key ? 0 : -ENOMEM;
}

/* Evaluates x-amz-copy-source-if-* against the source. */
int copy_source_conditions(struct req *rq, const struct be_meta *src)
{
    struct cond_hdrs c = {
        .if_match = req_header(rq, "x-amz-copy-source-if-match"),
        .if_none_match = req_header(rq, "x-amz-copy-source-if-none-match"),
        .if_modified_since = req_header(rq, "x-amz-copy-source-if-modified-since"),
        .if_unmodified_since = req_header(rq, "x-amz-copy-source-if-unmodified-since"),
    };
    int rc = cond_check(&c, src->etag, src->mtime_ns / 1000000000ll, 0);
    return rc == -S3E_NOT_MODIFIED ? -S3E_PRECONDITION_FAILED : rc;
}

struct copy_state {
    char *src_bucket, *src_key;
    int replace;
    struct be_meta replace_meta;
    struct be_meta out;
    int rc;
};

static void copy_state_free(void *p)
{
    struct copy_state *cs = p;
    if (!cs)
        return;
    free(cs->src_bucket);
    free(cs->src_key);
    free(cs);
}

/* Write-back CopyObject: the source is read from the cache (it may exist nowhere else yet),
 * the copy becomes a dirty entry. */
static void copy_job_write_back(struct req *rq)
{
    struct copy_state *cs = rq->job_state;
    struct server *srv = rq->srv;
    struct be_meta src, m;
    char path[4096];
    int in = -1, out = -1;
    uint64_t admitted = 0;
    cs->rc = cache_open_whole(srv->cache, cs->src_bucket, cs->src_key, &in, &src);
    if (!cs->rc)
        cs->rc = copy_source_conditions(rq, &src);
    if (!cs->rc && src.size > srv->cf->max_object_size)
        cs->rc = -S3E_ENTITY_TOO_LARGE;
    if (!cs->rc && !(cs->rc = cache_dirty_admit(srv->cache, src.size)))
        admitted = src.size;
    if (!cs->rc)
        cs->rc = cache_stage_open(srv->cache, &out, path);
    if (cs->rc)
        goto out;
    if (src.size)
        cs->rc = gw_copy_fd(in, 0, out, 0, src.size);
    if (!cs->rc && fsync(out) != 0)
        cs->rc = -errno;
    close(out);
    if (cs->rc) {
        unlink(path);
        goto out;
    }
    m = src;
    if (cs->replace) {
        m = cs->replace_meta;
        m.size = src.size;
        memcpy(m.etag, src.etag, sizeof(m.etag));
        m.parts_count = src.parts_count;
        m.part_size = src.part_size;
        memcpy(m.checksum_algo, src.checksum_algo, sizeof(m.checksum_algo));
        memcpy(m.checksum, src.checksum, sizeof(m.checksum));
    }
    m.mtime_ns = s3c_real_ns();
    cs->rc = cache_adopt_dirty(srv->cache, rq->bucket, rq->key, path, &m);
    if (!cs->rc)
        cs->out = m;
out:
    if (in >= 0)
        close(in);
    if (admitted)
        cache_dirty_unadmit(srv->cache, admitted);
}

static void copy_job(struct req *rq)
{
    struct copy_state *cs = rq->job_state;
    struct server *srv = rq->srv;
    struct be_meta src;
    if (gw_write_back(srv)) {
        copy_job_write_back(rq);
        return;
    }
    cs->rc = backend_head(srv->be, cs->src_bucket, cs->src_key, &src);
    if (cs->rc == -S3E_NO_SUCH_BUCKET || cs->rc == -S3E_NO_SUCH_KEY)
        return;
    if (!cs->rc)
        cs->rc = copy_source_conditions(rq, &src);
    if (!cs->rc && src.size > srv->cf->max_object_size)
        cs->rc = -S3E_ENTITY_TOO_LARGE;
    if (cs->rc)
        return;
    cache_write_begin(srv->cache, rq->bucket, rq->key);
    cs->rc = backend_copy(srv->be, cs->src_bucket, cs->src_key, rq->bucket, rq->key,
                          cs->replace ? &cs->replace_meta : NULL, &cs->out);
    if (cs->rc)
        cache_invalidate(srv->cache, rq->bucket, rq->key);
    else
        cache_forget(srv->cache, rq->bucket, rq->key); /* the backend's copy is newer */
    cache_write_end(srv->cache, rq->bucket, rq->key);
    /* a fresh object stays in the cache in both modes: fetched back in the background */
    if (!cs->rc && src.size)
        (void)warm_object(srv->warm, rq->bucket, rq->key);
}

static int h_copy_end(struct req *rq)
{
    struct copy_state *cs = rq->job_state;
    if (rq->phase == PH_JOB_DONE) {
        if (cs->rc)
            return respond_error(rq, cs->rc);
        struct buf b;
        char ts[32];
        buf_init(&b, 4096);
        respond_xml_start(&b, "CopyObjectResult");
        s3c_iso8601(cs->out.mtime_ns, ts);
        buf_xml_elem(&b, "LastModified", ts);
        buf_printf(&b, "<ETag>&quot;%s&quot;</ETag></CopyObjectResult>", cs->out.etag);
        return respond_xml(rq, 200, &b);
    }
    cs = calloc(1, sizeof(*cs));
    if (!cs)
        return respond_error(rq, -ENOMEM);
    rq->job_state = cs;
    rq->job_state_free = copy_state_free;
    int rc = copy_source_parse(rq, &cs->src_bucket, &cs->src_key);
    if (rc)
        return respond_error_msg(rq, rc, rc == -S3E_INVALID_ARGUMENT
                                             ? "Copy Source must mention the source bucket and key: sourcebucket/sourcekey"
                                             : NULL);
    const char *dir = req_header(rq, "x-amz-metadata-directive");
    if (dir && strcasecmp(dir, "COPY") && strcasecmp(dir, "REPLACE"))
        return respond_error_msg(rq, -S3E_INVALID_ARGUMENT,
                                 "Unknown metadata directive.");
    cs->replace = dir && !strcasecmp(dir, "REPLACE");
    if (cs->replace && (rc = meta_from_headers(rq, &cs->replace_meta)))
        return respond_error(rq, rc);
    if (!cs->replace && !strcmp(cs->src_bucket, rq->bucket) && !strcmp(cs->src_key, rq->key))
        return respond_error_msg(
            rq, -S3E_INVALID_REQUEST,
            "This copy request is illegal because it is trying to copy an object to itself "
            "without changing the object's metadata, storage class, website redirect location "
            "or encryption attributes.");
    rq->phase = PH_JOB_DONE;
    rc = req_run_job(rq, copy_job);
    return rc ? respond_error(rq, rc) : MHD_YES;
}

const struct handler h_copy = {.end = h_copy_end};

/* ------------------------------------------------------------------ DELETE */

int object_delete(struct server *srv, const char *bucket, const char *key)
{
    cache_write_begin(srv->cache, bucket, key); /* waits out an upload of it in flight */
    int rc = backend_del(srv->be, bucket, key);
    if (rc == -S3E_NO_SUCH_KEY)
        rc = 0;
    if (!rc)
        cache_forget(srv->cache, bucket, key);
    else
        cache_invalidate(srv->cache, bucket, key); /* a dirty copy stays: it was not deleted */
    cache_write_end(srv->cache, bucket, key);
    return rc;
}

static void delete_job(struct req *rq)
{
    rq->rc = object_delete(rq->srv, rq->bucket, rq->key);
}

static int h_delete_end(struct req *rq)
{
    if (rq->phase == PH_JOB_DONE)
        return rq->rc ? respond_error(rq, rq->rc) : respond_empty(rq, 204, NULL);
    rq->phase = PH_JOB_DONE;
    int rc = req_run_job(rq, delete_job);
    return rc ? respond_error(rq, rc) : MHD_YES;
}

const struct handler h_delete = {.end = h_delete_end};

/* ------------------------------------------------------------------ ACL (fixed) */

void acl_document(struct buf *b)
{
    respond_xml_start(b, "AccessControlPolicy");
    buf_puts(b, "<Owner><ID>s3cached</ID><DisplayName>s3cached</DisplayName></Owner>"
                "<AccessControlList><Grant><Grantee "
                "xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" "
                "xsi:type=\"CanonicalUser\"><ID>s3cached</ID><DisplayName>s3cached</DisplayName>"
                "</Grantee><Permission>FULL_CONTROL</Permission></Grant></AccessControlList>"
                "</AccessControlPolicy>");
}

/* The object must exist (as a HEAD through the cache sees it: a dirty one does). */
static void exists_job(struct req *rq)
{
    struct be_meta m;
    rq->rc = cache_head(rq->srv->cache, rq->bucket, rq->key, &m);
}

/* GetObjectAcl (a fixed owner-full-control document) and GetObjectTagging (no tags: s3cached
 * stores none; `aws s3 cp s3://... s3://...` asks before copying). */
static int h_object_doc_end(struct req *rq, int tagging)
{
    if (rq->phase != PH_JOB_DONE) {
        rq->phase = PH_JOB_DONE;
        int rc = req_run_job(rq, exists_job);
        return rc ? respond_error(rq, rc) : MHD_YES;
    }
    if (rq->rc)
        return respond_error(rq, rq->rc);
    struct buf b;
    buf_init(&b, 4096);
    if (tagging) {
        respond_xml_start(&b, "Tagging");
        buf_puts(&b, "<TagSet></TagSet></Tagging>");
    } else {
        acl_document(&b);
    }
    return respond_xml(rq, 200, &b);
}

static int h_object_acl_end(struct req *rq)
{
    return h_object_doc_end(rq, 0);
}

static int h_object_tagging_end(struct req *rq)
{
    return h_object_doc_end(rq, 1);
}

const struct handler h_object_acl = {.end = h_object_acl_end};
const struct handler h_object_tagging = {.end = h_object_tagging_end};
