/*
 * h_multipart.c: CreateMultipartUpload, UploadPart (streamed to a staged file,
 * then handed to the backend), UploadPartCopy, CompleteMultipartUpload,
 * AbortMultipartUpload, ListParts and ListMultipartUploads (delimiter roll-up and
 * encoding-type done here, over either store of uploads).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "checksum.h"
#include "gw.h"
#include "range.h"
#include "s3err.h"
#include "warm.h"
#include "wb_mpu.h"

enum { PH_START = 0, PH_JOB_DONE };

#define OWNER_XML "<Owner><ID>s3cached</ID><DisplayName>s3cached</DisplayName></Owner>"
#define INITIATOR_XML "<Initiator><ID>s3cached</ID><DisplayName>s3cached</DisplayName></Initiator>"

struct mp_state {
    struct be_meta meta;
    char upload_id[BE_UPLOAD_ID_MAX];
    struct be_part part;
    struct be_part *parts;
    size_t n;
    int truncated;
    struct be_upload *uploads;
    char **prefixes;      /* ListMultipartUploads with a delimiter: the common prefixes */
    size_t n_prefixes;
    char *next_key;       /* ListMultipartUploads: NextKeyMarker (and NextUploadIdMarker when */
    char *next_upload_id; /* the page ends with an upload), when truncated */
    char *src_bucket, *src_key;
    uint64_t src_off, src_len;
    int has_range;
    int inplace; /* write-back UploadPart written into the upload's data file */
};

static void mp_state_free(void *p)
{
    struct mp_state *s = p;
    if (!s)
        return;
    free(s->parts);
    if (s->uploads)
        be_uploads_free(s->uploads, s->n);
    for (size_t i = 0; i < s->n_prefixes; i++)
        free(s->prefixes[i]);
    free(s->prefixes);
    free(s->next_key);
    free(s->next_upload_id);
    free(s->src_bucket);
    free(s->src_key);
    free(s);
}

static struct mp_state *mp_state(struct req *rq)
{
    if (!rq->job_state) {
        rq->job_state = calloc(1, sizeof(struct mp_state));
        rq->job_state_free = mp_state_free;
    }
    return rq->job_state;
}

static int start_job(struct req *rq, void (*fn)(struct req *))
{
    rq->phase = PH_JOB_DONE;
    int rc = req_run_job(rq, fn);
    return rc ? respond_error(rq, rc) : MHD_YES;
}

static const char *upload_id_param(struct req *rq)
{
    const char *u = req_query(rq, "uploadId");
    return u && *u ? u : NULL;
}

static int part_number_param(struct req *rq, unsigned *out)
{
    const char *pn = req_query(rq, "partNumber");
    char *end;
    if (!pn || !*pn)
        return -S3E_INVALID_ARGUMENT;
    long v = strtol(pn, &end, 10);
    if (*end || v < 1 || v > BE_MAX_PARTS)
        return -S3E_INVALID_ARGUMENT;
    *out = (unsigned)v;
    return 0;
}

/* ------------------------------------------------------------------ Create */

static void mp_create_job(struct req *rq)
{
    struct mp_state *s = rq->job_state;
    if (gw_write_back(rq->srv))
        rq->rc = wb_mpu_create(rq->srv, rq->bucket, rq->key, &s->meta, s->upload_id);
    else
        rq->rc = backend_mp_create(rq->srv->be, rq->bucket, rq->key, &s->meta, s->upload_id);
}

static int h_mp_create_end(struct req *rq)
{
    struct mp_state *s = mp_state(rq);
    if (!s)
        return respond_error(rq, -ENOMEM);
    if (rq->phase == PH_START) {
        int rc = meta_from_headers(rq, &s->meta);
        if (rc)
            return respond_error(rq, rc);
        const char *algo = req_header(rq, "x-amz-checksum-algorithm");
        if (algo) {
            if (cksum_algo_parse(algo) == CKSUM_NONE)
                return respond_error_msg(rq, -S3E_INVALID_REQUEST,
                                         "Checksum algorithm provided is unsupported.");
            snprintf(s->meta.checksum_algo, sizeof(s->meta.checksum_algo), "%s",
                     cksum_algo_name(cksum_algo_parse(algo)));
        }
        return start_job(rq, mp_create_job);
    }
    struct buf b;
    buf_init(&b, 8192);
    respond_xml_start(&b, "InitiateMultipartUploadResult");
    buf_xml_elem(&b, "Bucket", rq->bucket);
    buf_xml_elem(&b, "Key", rq->key);
    buf_xml_elem(&b, "UploadId", s->upload_id);
    buf_puts(&b, "</InitiateMultipartUploadResult>");
    return respond_xml(rq, 200, &b);
}

/* ------------------------------------------------------------------ UploadPart */

static int h_mp_part_begin(struct req *rq)
{
    unsigned pn;
    if (part_number_param(rq, &pn))
        return -S3E_INVALID_ARGUMENT;
    if (!upload_id_param(rq))
        return -S3E_NO_SUCH_UPLOAD;
    uint64_t max = rq->srv->cf->max_object_size;
    if (max > (5ull << 30))
        max = 5ull << 30; /* S3's largest part */
    if (!gw_write_back(rq->srv))
        return upload_begin(rq, max);
    int rc = upload_prepare(rq, max), fd = -1;
    if (!rc)
        rc = upload_admit_dirty(rq);
    if (rc)
        return rc;
    uint64_t off = 0;
    struct mp_state *s = mp_state(rq);
    if (!s)
        return -ENOMEM;
    rc = wb_mpu_part_target(rq->srv, rq->bucket, rq->key, upload_id_param(rq), pn,
                            upload_declared(rq), &fd, &off);
    if (rc < 0)
        return rc;
    s->inplace = rc == 1;
    return s->inplace ? upload_target_fd(rq, fd, off) : upload_target_stage(rq);
}

static int h_mp_part_body(struct req *rq, const char *data, size_t len)
{
    return upload_write(rq, data, len);
}

/* Write-back: the staged part file (fsync'd) moves into the upload; its bytes stay counted
 * against the dirty limit until the upload completes or is aborted. */
static int wb_part_adopt(struct req *rq, int fd, const char *path, const struct be_part *part)
{
    if (fsync(fd))
        return -errno;
    return wb_mpu_put_part(rq->srv, rq->bucket, rq->key, upload_id_param(rq), part->number, path,
                           part->etag);
}

static void mp_part_job(struct req *rq)
{
    struct mp_state *s = rq->job_state;
    if (gw_write_back(rq->srv) && s->inplace) {
        rq->rc = wb_mpu_part_done_inplace(rq->srv, rq->bucket, rq->key, upload_id_param(rq),
                                          s->part.number, s->part.etag, upload_fd(rq));
        if (!rq->rc)
            cache_dirty_hold(rq->srv->cache, s->part.size);
        return;
    }
    if (gw_write_back(rq->srv)) {
        const char *path = upload_path(rq);
        rq->rc = path ? wb_part_adopt(rq, upload_fd(rq), path, &s->part) : -S3E_INTERNAL;
        if (!rq->rc) {
            upload_release_path(rq);
            cache_dirty_hold(rq->srv->cache, s->part.size);
        }
        return;
    }
    rq->rc = backend_mp_put_part(rq->srv->be, rq->bucket, rq->key, upload_id_param(rq),
                                 upload_fd(rq), &s->part);
}

static int h_mp_part_end(struct req *rq)
{
    struct mp_state *s = mp_state(rq);
    if (!s)
        return respond_error(rq, -ENOMEM);
    if (rq->phase == PH_START) {
        int rc = upload_finish(rq, &s->meta);
        if (rc)
            return respond_error(rq, rc);
        part_number_param(rq, &s->part.number);
        s->part.size = s->meta.size;
        s->part.mtime_ns = s3c_real_ns();
        snprintf(s->part.etag, sizeof(s->part.etag), "%s", s->meta.etag);
        snprintf(s->part.checksum_algo, sizeof(s->part.checksum_algo), "%s",
                 s->meta.checksum_algo);
        snprintf(s->part.checksum, sizeof(s->part.checksum), "%s", s->meta.checksum);
        return start_job(rq, mp_part_job);
    }
    struct MHD_Response *r;
    char etag[BE_ETAG_MAX + 2];
    if (respond_empty(rq, 200, &r) != MHD_YES)
        return MHD_NO;
    snprintf(etag, sizeof(etag), "\"%s\"", s->part.etag);
    MHD_add_response_header(r, "ETag", etag);
    if (s->part.checksum_algo[0] && s->part.checksum[0]) {
        respond_checksum_header(r, s->part.checksum_algo, s->part.checksum);
    }
    return respond_queue_prepared(rq, 200, r);
}

/* ------------------------------------------------------------------ UploadPartCopy */

/* Write-back UploadPartCopy: the source range read from the cache into a staged part. */
static void mp_part_copy_job_wb(struct req *rq)
{
    struct mp_state *s = rq->job_state;
    struct server *srv = rq->srv;
    struct be_meta src;
    char path[4096];
    int in = -1, out = -1;
    rq->rc = cache_open_whole(srv->cache, s->src_bucket, s->src_key, &in, &src);
    if (!rq->rc)
        rq->rc = copy_source_conditions(rq, &src);
    uint64_t off = 0, len = src.size;
    if (!rq->rc && s->has_range) {
        if (s->src_off >= src.size || s->src_off + s->src_len > src.size)
            rq->rc = -S3E_INVALID_RANGE;
        off = s->src_off;
        len = s->src_len;
    }
    if (!rq->rc && len > (5ull << 30))
        rq->rc = -S3E_ENTITY_TOO_LARGE;
    if (!rq->rc)
        rq->rc = cache_dirty_admit(srv->cache, len);
    if (rq->rc)
        goto out;
    if (!(rq->rc = cache_stage_open(srv->cache, &out, path))) {
        /* the part's MD5 is its ETag: hash while copying through memory */
        struct cksum *ck = NULL;
        struct cksum_result res;
        char *buf = malloc(1u << 20);
        uint64_t done = 0;
        if (!buf || (rq->rc = cksum_new(CKSUM_WANT_MD5, CKSUM_NONE, &ck)))
            rq->rc = rq->rc ? rq->rc : -ENOMEM;
        while (!rq->rc && done < len) {
            ssize_t n = pread(in, buf, (size_t)S3C_MIN(len - done, (uint64_t)1 << 20),
                              (off_t)(off + done));
            if (n <= 0) {
                rq->rc = n < 0 ? -errno : -EIO;
                break;
            }
            cksum_update(ck, buf, (size_t)n);
            if (write(out, buf, (size_t)n) != n)
                rq->rc = -EIO;
            done += (uint64_t)n;
        }
        if (!rq->rc) {
            cksum_final(ck, &res);
            snprintf(s->part.etag, sizeof(s->part.etag), "%s", res.md5_hex);
            s->part.size = len;
            s->part.mtime_ns = s3c_real_ns();
            rq->rc = wb_part_adopt(rq, out, path, &s->part);
        }
        cksum_free(ck);
        free(buf);
        close(out);
        if (rq->rc)
            unlink(path);
        else
            cache_dirty_hold(srv->cache, len);
    }
    cache_dirty_unadmit(srv->cache, len);
out:
    if (in >= 0)
        close(in);
}

static void mp_part_copy_job(struct req *rq)
{
    struct mp_state *s = rq->job_state;
    struct be_meta src;
    if (gw_write_back(rq->srv)) {
        mp_part_copy_job_wb(rq);
        return;
    }
    rq->rc = backend_head(rq->srv->be, s->src_bucket, s->src_key, &src);
    if (!rq->rc)
        rq->rc = copy_source_conditions(rq, &src);
    if (rq->rc)
        return;
    uint64_t off = 0, len = src.size;
    if (s->has_range) {
        if (s->src_off >= src.size || s->src_len > src.size - s->src_off) {
            rq->rc = -S3E_INVALID_RANGE;
            return;
        }
        off = s->src_off;
        len = s->src_len;
    }
    if (len > (5ull << 30)) {
        rq->rc = -S3E_ENTITY_TOO_LARGE;
        return;
    }
    rq->rc = backend_mp_copy_part(rq->srv->be, rq->bucket, rq->key, upload_id_param(rq),
                                  s->part.number, s->src_bucket, s->src_key, off, len, &s->part);
}

/* Reads decimal digits at *@pp (at least one) into @out; -1 without a digit or past
 * UINT64_MAX (never wrapped, never saturated). */
static int copy_range_u64(const char **pp, uint64_t *out)
{
    const char *p = *pp;
    uint64_t v = 0;
    if (*p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *pp = p;
    *out = v;
    return 0;
}

/* x-amz-copy-source-range "bytes=FIRST-LAST" -> @off, @len; -1 unless FIRST <= LAST and the
 * length LAST-FIRST+1 fits in 64 bits (so no range wraps into an empty part). */
static int copy_range_parse(const char *v, uint64_t *off, uint64_t *len)
{
    uint64_t a, b;
    if (strncmp(v, "bytes=", 6))
        return -1;
    v += 6;
    if (copy_range_u64(&v, &a) || *v++ != '-' || copy_range_u64(&v, &b) || *v || b < a ||
        b == UINT64_MAX)
        return -1;
    *off = a;
    *len = b - a + 1;
    return 0;
}

static int h_mp_part_copy_end(struct req *rq)
{
    struct mp_state *s = mp_state(rq);
    if (!s)
        return respond_error(rq, -ENOMEM);
    if (rq->phase == PH_START) {
        if (part_number_param(rq, &s->part.number))
            return respond_error(rq, -S3E_INVALID_ARGUMENT);
        if (!upload_id_param(rq))
            return respond_error(rq, -S3E_NO_SUCH_UPLOAD);
        int rc = copy_source_parse(rq, &s->src_bucket, &s->src_key);
        if (rc)
            return respond_error(rq, rc);
        const char *range = req_header(rq, "x-amz-copy-source-range");
        if (range) {
            if (copy_range_parse(range, &s->src_off, &s->src_len))
                return respond_error_msg(rq, -S3E_INVALID_ARGUMENT,
                                         "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy");
            s->has_range = 1;
        }
        return start_job(rq, mp_part_copy_job);
    }
    struct buf b;
    char ts[32];
    buf_init(&b, 4096);
    respond_xml_start(&b, "CopyPartResult");
    s3c_iso8601(s->part.mtime_ns ? s->part.mtime_ns : s3c_real_ns(), ts);
    buf_xml_elem(&b, "LastModified", ts);
    buf_printf(&b, "<ETag>&quot;%s&quot;</ETag></CopyPartResult>", s->part.etag);
    return respond_xml(rq, 200, &b);
}

/* ------------------------------------------------------------------ Complete */

static int body_collect(struct req *rq, const char *data, size_t len)
{
    int rc = buf_append(&rq->body, data, len);
    return rc == -EMSGSIZE ? -S3E_MALFORMED_XML : rc;
}

/* S3's largest part; UploadPart and UploadPartCopy refuse more (UploadPart also more than
 * --max-object-size). */
#define MP_PART_MAX (5ull << 30)

static int mp_etag_eq(const char *client, const char *backend)
{
    size_t l = strlen(client);
    if (l >= 2 && client[0] == '"' && client[l - 1] == '"')
        return l - 2 == strlen(backend) && strncasecmp(client + 1, backend, l - 2) == 0;
    return strcasecmp(client, backend) == 0;
}

/* Write-through Complete, before the backend makes the object: -S3E_ENTITY_TOO_LARGE when the
 * parts @parts (ascending, from the request) add up to more than --max-object-size, as the
 * backend lists them. A part not listed, or listed with another ETag, is -S3E_INVALID_PART
 * (what the backend would answer), so that a part re-uploaded meanwhile cannot grow the object
 * past the check. 0 when they fit, and when the check cannot apply: parts out of order or an
 * upload the backend no longer lists (it answers those itself: InvalidPartOrder, NoSuchUpload
 * or a repeated Complete's result). Other errors: the backend's. */
static int mp_complete_size_check(struct req *rq, const struct be_part *parts, size_t n)
{
    struct server *srv = rq->srv;
    uint64_t max = srv->cf->max_object_size, total = 0;
    if ((uint64_t)n * MP_PART_MAX <= max)
        return 0; /* no parts that S3 allows can exceed it */
    for (size_t i = 1; i < n; i++)
        if (parts[i].number <= parts[i - 1].number)
            return 0;
    unsigned marker = 0;
    size_t i = 0;
    int truncated = 1, rc = 0;
    while (!rc && i < n && truncated) {
        struct be_part *got = NULL;
        size_t ng = 0;
        rc = backend_mp_list_parts(srv->be, rq->bucket, rq->key, upload_id_param(rq), marker,
                                   1000, &got, &ng, &truncated);
        if (rc == -S3E_NO_SUCH_UPLOAD || rc == -S3E_NOT_IMPLEMENTED)
            return 0;
        for (size_t j = 0; !rc && j < ng && i < n; j++) {
            if (got[j].number < parts[i].number)
                continue;
            if (got[j].number > parts[i].number || !mp_etag_eq(parts[i].etag, got[j].etag))
                rc = -S3E_INVALID_PART;
            else if ((total += got[j].size) > max)
                rc = -S3E_ENTITY_TOO_LARGE;
            i++;
        }
        if (ng)
            marker = got[ng - 1].number;
        else
            truncated = 0;
        free(got);
    }
    return rc ? rc : i < n ? -S3E_INVALID_PART : 0;
}

static void mp_complete_job(struct req *rq)
{
    struct mp_state *s = rq->job_state;
    struct server *srv = rq->srv;
    if (gw_write_back(srv)) {
        char staged[4096];
        uint64_t held = 0;
        int seal = -1;
        rq->rc = wb_mpu_complete(srv, rq->bucket, rq->key, upload_id_param(rq), s->parts, s->n,
                                 &s->meta, staged, &held, &seal);
        if (rq->rc == 1) { /* a repeat: answered as the first time, nothing more to do */
            rq->rc = 0;
            return;
        }
        if (!rq->rc)
            rq->rc = cache_adopt_dirty(srv->cache, rq->bucket, rq->key, staged, &s->meta);
        if (!rq->rc)
            wb_mpu_finish(srv, rq->bucket, rq->key, upload_id_param(rq), s->parts, s->n,
                          &s->meta);
        if (seal >= 0)
            close(seal); /* UploadPart may use the data file again: it is no longer the upload's */
        return;
    }
    /* Nothing may be made that is over the limit: checked first, the upload stays as it was
     * (it can be completed with fewer parts, listed or aborted). Write-back checks in
     * wb_mpu_complete(), before it writes anything. */
    if ((rq->rc = mp_complete_size_check(rq, s->parts, s->n)))
        return;
    cache_write_begin(srv->cache, rq->bucket, rq->key);
    rq->rc = backend_mp_complete(srv->be, rq->bucket, rq->key, upload_id_param(rq), s->parts,
                                 s->n, &s->meta);
    if (!rq->rc && s->meta.size > srv->cf->max_object_size)
        rq->rc = -S3E_ENTITY_TOO_LARGE; /* a check skipped above (backend without ListParts) */
    if (rq->rc)
        cache_invalidate(srv->cache, rq->bucket, rq->key);
    else
        cache_forget(srv->cache, rq->bucket, rq->key); /* the backend's object is newer */
    cache_write_end(srv->cache, rq->bucket, rq->key);
    /* A freshly written object stays in the cache in both modes: the parts went to the backend
     * one by one, so the object is fetched back in the background (a warm-up job; a GET before
     * it ends joins its fill). Best effort: the upload succeeded either way. */
    if (!rq->rc && s->meta.size)
        (void)warm_object(srv->warm, rq->bucket, rq->key);
}

/* The parts of a CompleteMultipartUpload body (xml.h's type, free of the backend layer) as
 * be_parts in *@out (malloc'd). 0 or -ENOMEM. */
_Static_assert(XML_PARTS_MAX == BE_MAX_PARTS, "xml.h and backend.h disagree on parts");
_Static_assert(XML_ETAG_MAX == BE_ETAG_MAX, "xml.h and backend.h disagree on ETags");
static int mp_parts_from_xml(const struct xml_part *xp, size_t n, struct be_part **out)
{
    struct be_part *bp = calloc(n ? n : 1, sizeof(*bp));
    if (!bp)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        bp[i].number = xp[i].number;
        snprintf(bp[i].etag, sizeof(bp[i].etag), "%s", xp[i].etag);
        snprintf(bp[i].checksum_algo, sizeof(bp[i].checksum_algo), "%s", xp[i].checksum_algo);
        snprintf(bp[i].checksum, sizeof(bp[i].checksum), "%s", xp[i].checksum);
    }
    *out = bp;
    return 0;
}

static int h_mp_complete_end(struct req *rq)
{
    struct mp_state *s = mp_state(rq);
    struct errmsg em = {{0}};
    if (!s)
        return respond_error(rq, -ENOMEM);
    if (rq->phase == PH_START) {
        if (!upload_id_param(rq))
            return respond_error(rq, -S3E_NO_SUCH_UPLOAD);
        if (!rq->body.len)
            return respond_error(rq, -S3E_MALFORMED_XML);
        struct xml_part *xp = NULL;
        size_t n = 0;
        int rc = xml_parse_complete(rq->body.p, rq->body.len, &xp, &n, &em);
        if (rc)
            return respond_error_msg(rq, rc, em.buf[0] ? em.buf : NULL);
        rc = mp_parts_from_xml(xp, n, &s->parts);
        free(xp);
        if (rc)
            return respond_error(rq, rc);
        s->n = n;
        return start_job(rq, mp_complete_job);
    }
    struct buf b;
    char loc[1024];
    buf_init(&b, 8192);
    respond_xml_start(&b, "CompleteMultipartUploadResult");
    snprintf(loc, sizeof(loc), "/%s/%s", rq->bucket, rq->key);
    buf_xml_elem(&b, "Location", loc);
    buf_xml_elem(&b, "Bucket", rq->bucket);
    buf_xml_elem(&b, "Key", rq->key);
    buf_printf(&b, "<ETag>&quot;%s&quot;</ETag></CompleteMultipartUploadResult>", s->meta.etag);
    return respond_xml(rq, 200, &b);
}

/* ------------------------------------------------------------------ Abort */

static void mp_abort_job(struct req *rq)
{
    if (gw_write_back(rq->srv))
        rq->rc = wb_mpu_abort(rq->srv, rq->bucket, rq->key, upload_id_param(rq));
    else
        rq->rc = backend_mp_abort(rq->srv->be, rq->bucket, rq->key, upload_id_param(rq));
}

static int h_mp_abort_end(struct req *rq)
{
    if (rq->phase == PH_START)
        return start_job(rq, mp_abort_job);
    return respond_empty(rq, 204, NULL);
}

/* ------------------------------------------------------------------ ListParts */

/* encoding-type: 1 for "url", 0 when absent; -1 for anything else (400). */
static int encoding_param(struct req *rq)
{
    const char *et = req_query(rq, "encoding-type");
    if (!et || !*et)
        return 0;
    return strcmp(et, "url") ? -1 : 1;
}


static unsigned uint_param(struct req *rq, const char *name, unsigned dflt, unsigned max, int *bad)
{
    const char *v = req_query(rq, name);
    char *end;
    if (!v || !*v)
        return dflt;
    long n = strtol(v, &end, 10);
    if (*end || n < 0) {
        *bad = 1;
        return dflt;
    }
    return n > (long)max ? max : (unsigned)n;
}

static void mp_list_parts_job(struct req *rq)
{
    struct mp_state *s = rq->job_state;
    int bad = 0;
    unsigned marker = uint_param(rq, "part-number-marker", 0, BE_MAX_PARTS, &bad);
    unsigned max = uint_param(rq, "max-parts", 1000, 1000, &bad);
    if (gw_write_back(rq->srv))
        rq->rc = wb_mpu_list_parts(rq->srv, rq->bucket, rq->key, upload_id_param(rq), marker, max,
                                   &s->parts, &s->n, &s->truncated);
    else
        rq->rc = backend_mp_list_parts(rq->srv->be, rq->bucket, rq->key, upload_id_param(rq),
                                       marker, max, &s->parts, &s->n, &s->truncated);
}

static int h_mp_list_parts_end(struct req *rq)
{
    struct mp_state *s = mp_state(rq);
    if (!s)
        return respond_error(rq, -ENOMEM);
    int bad = 0;
    unsigned marker = uint_param(rq, "part-number-marker", 0, BE_MAX_PARTS, &bad);
    unsigned max = uint_param(rq, "max-parts", 1000, 1000, &bad);
    int url = encoding_param(rq);
    if (rq->phase == PH_START) {
        if (bad)
            return respond_error(rq, -S3E_INVALID_ARGUMENT);
        if (url < 0)
            return respond_error_msg(rq, -S3E_INVALID_ARGUMENT,
                                     "Invalid Encoding Method specified in Request");
        return start_job(rq, mp_list_parts_job);
    }
    struct buf b;
    char ts[32];
    buf_init(&b, 8u << 20);
    respond_xml_start(&b, "ListPartsResult");
    buf_xml_elem(&b, "Bucket", rq->bucket);
    /* encoding-type=url: AWS's ListPartsResult carries it too (the Java SDK reads it) */
    respond_xml_value(&b, "Key", rq->key, url);
    if (url)
        buf_puts(&b, "<EncodingType>url</EncodingType>");
    buf_xml_elem(&b, "UploadId", upload_id_param(rq));
    buf_puts(&b, INITIATOR_XML OWNER_XML "<StorageClass>STANDARD</StorageClass>");
    buf_printf(&b, "<PartNumberMarker>%u</PartNumberMarker>", marker);
    if (s->n)
        buf_printf(&b, "<NextPartNumberMarker>%u</NextPartNumberMarker>",
                   s->parts[s->n - 1].number);
    buf_printf(&b, "<MaxParts>%u</MaxParts><IsTruncated>%s</IsTruncated>", max,
               s->truncated ? "true" : "false");
    for (size_t i = 0; i < s->n; i++) {
        const struct be_part *p = &s->parts[i];
        s3c_iso8601(p->mtime_ns, ts);
        buf_printf(&b, "<Part><PartNumber>%u</PartNumber><LastModified>%s</LastModified>"
                       "<ETag>&quot;%s&quot;</ETag><Size>%llu</Size>",
                   p->number, ts, p->etag, (unsigned long long)p->size);
        if (p->checksum_algo[0] && p->checksum[0])
            buf_printf(&b, "<Checksum%s>%s</Checksum%s>", p->checksum_algo, p->checksum,
                       p->checksum_algo);
        buf_puts(&b, "</Part>");
    }
    buf_puts(&b, "</ListPartsResult>");
    return respond_xml(rq, 200, &b);
}

/* ------------------------------------------------------------------ ListMultipartUploads */

/* One page of in-progress uploads where they are kept: the write-back staging or the
 * backend. Same contract as backend_mp_list_uploads(). */
static int mp_uploads_page(struct req *rq, const char *key_marker, const char *id_marker,
                           unsigned max, struct be_upload **out, size_t *n, int *truncated)
{
    const char *prefix = req_query(rq, "prefix");
    if (gw_write_back(rq->srv))
        return wb_mpu_list_uploads(rq->srv, rq->bucket, prefix, key_marker, id_marker, max, out,
                                   n, truncated);
    return backend_mp_list_uploads(rq->srv->be, rq->bucket, prefix, key_marker, id_marker, max,
                                   out, n, truncated);
}

/* Appends @p (taken over) to the common prefixes. 0 or -ENOMEM (@p freed). */
static int mp_add_prefix(struct mp_state *s, char *p)
{
    char **np = realloc(s->prefixes, (s->n_prefixes + 1) * sizeof(*np));
    if (!np) {
        free(p);
        return -ENOMEM;
    }
    s->prefixes = np;
    s->prefixes[s->n_prefixes++] = p;
    return 0;
}

/* With a delimiter: uploads whose key has it after the prefix roll up into one common prefix
 * (prefix up to and including the delimiter), as ListObjects does. Pages of the store are read
 * until @max uploads and prefixes are listed and one more would follow (then truncated), or
 * none is left. A prefix at or before the key-marker was listed on an earlier page (the
 * NextKeyMarker of a page ending with a prefix is that prefix). */
static int mp_list_uploads_rollup(struct req *rq, struct mp_state *s, const char *delim,
                                  unsigned max)
{
    const char *prefix = req_query(rq, "prefix");
    const char *km0 = req_query(rq, "key-marker");
    size_t pl = prefix ? strlen(prefix) : 0, cap = 0;
    char *km = strdup(km0 ? km0 : ""), *um = strdup(req_query(rq, "upload-id-marker") ?
                                                    req_query(rq, "upload-id-marker") : "");
    const char *last = NULL;  /* what the listing ends with so far */
    int rc = km && um ? 0 : -ENOMEM, more = 1;
    while (!rc && more && !s->truncated) {
        struct be_upload *u = NULL;
        size_t n = 0;
        rc = mp_uploads_page(rq, km, um, 1000, &u, &n, &more);
        if (!rc && n) { /* the next page starts after this one's last upload */
            free(km);
            free(um);
            km = strdup(u[n - 1].key);
            um = strdup(u[n - 1].upload_id);
            if (!km || !um)
                rc = -ENOMEM;
        }
        for (size_t i = 0; !rc && i < n && !s->truncated; i++) {
            const char *d = strstr(u[i].key + pl, delim);
            char *cp = d ? strndup(u[i].key, (size_t)(d - u[i].key) + strlen(delim)) : NULL;
            if (d && !cp) {
                rc = -ENOMEM;
                break;
            }
            if (cp && ((km0 && strcmp(cp, km0) <= 0) ||
                       (s->n_prefixes && !strcmp(cp, s->prefixes[s->n_prefixes - 1])))) {
                free(cp);
                continue;
            }
            if (s->n + s->n_prefixes == max) {
                free(cp);
                s->truncated = 1;
                break;
            }
            if (cp) {
                if (!(rc = mp_add_prefix(s, cp)))
                    last = s->prefixes[s->n_prefixes - 1];
                continue;
            }
            if (s->n == cap) {
                size_t nc = cap ? cap * 2 : 16;
                struct be_upload *nu = realloc(s->uploads, nc * sizeof(*nu));
                if (!nu) {
                    rc = -ENOMEM;
                    break;
                }
                s->uploads = nu;
                cap = nc;
            }
            s->uploads[s->n] = u[i];
            u[i].key = NULL; /* moved */
            last = s->uploads[s->n++].key;
        }
        if (!n)
            more = 0;
        if (u)
            be_uploads_free(u, n);
    }
    if (!rc && s->truncated && last) {
        s->next_key = strdup(last);
        if (s->n && last == s->uploads[s->n - 1].key)
            s->next_upload_id = strdup(s->uploads[s->n - 1].upload_id);
        if (!s->next_key)
            rc = -ENOMEM;
    }
    free(km);
    free(um);
    return rc;
}

static void mp_list_uploads_job(struct req *rq)
{
    struct mp_state *s = rq->job_state;
    int bad = 0;
    unsigned max = uint_param(rq, "max-uploads", 1000, 1000, &bad);
    const char *delim = req_query(rq, "delimiter");
    if (delim && *delim) {
        rq->rc = mp_list_uploads_rollup(rq, s, delim, max);
        return;
    }
    rq->rc = mp_uploads_page(rq, req_query(rq, "key-marker"), req_query(rq, "upload-id-marker"),
                             max, &s->uploads, &s->n, &s->truncated);
    if (!rq->rc && s->truncated && s->n) {
        s->next_key = strdup(s->uploads[s->n - 1].key);
        s->next_upload_id = strdup(s->uploads[s->n - 1].upload_id);
        if (!s->next_key || !s->next_upload_id)
            rq->rc = -ENOMEM;
    }
}

static int h_list_uploads_end(struct req *rq)
{
    struct mp_state *s = mp_state(rq);
    if (!s)
        return respond_error(rq, -ENOMEM);
    int bad = 0, url = encoding_param(rq);
    unsigned max = uint_param(rq, "max-uploads", 1000, 1000, &bad);
    if (rq->phase == PH_START) {
        if (bad)
            return respond_error(rq, -S3E_INVALID_ARGUMENT);
        if (url < 0)
            return respond_error_msg(rq, -S3E_INVALID_ARGUMENT,
                                     "Invalid Encoding Method specified in Request");
        return start_job(rq, mp_list_uploads_job);
    }
    const char *km = req_query(rq, "key-marker");
    const char *um = req_query(rq, "upload-id-marker");
    const char *prefix = req_query(rq, "prefix");
    const char *delim = req_query(rq, "delimiter");
    struct buf b;
    char ts[32];
    buf_init(&b, 16u << 20);
    respond_xml_start(&b, "ListMultipartUploadsResult");
    buf_xml_elem(&b, "Bucket", rq->bucket);
    respond_xml_value(&b, "KeyMarker", km ? km : "", url);
    buf_xml_elem(&b, "UploadIdMarker", um ? um : "");
    if (s->truncated && s->next_key) {
        respond_xml_value(&b, "NextKeyMarker", s->next_key, url);
        buf_xml_elem(&b, "NextUploadIdMarker", s->next_upload_id ? s->next_upload_id : "");
    }
    if (prefix)
        respond_xml_value(&b, "Prefix", prefix, url);
    if (delim && *delim)
        respond_xml_value(&b, "Delimiter", delim, url);
    if (url)
        buf_puts(&b, "<EncodingType>url</EncodingType>");
    buf_printf(&b, "<MaxUploads>%u</MaxUploads><IsTruncated>%s</IsTruncated>", max,
               s->truncated ? "true" : "false");
    for (size_t i = 0; i < s->n; i++) {
        buf_puts(&b, "<Upload>");
        respond_xml_value(&b, "Key", s->uploads[i].key, url);
        buf_xml_elem(&b, "UploadId", s->uploads[i].upload_id);
        buf_puts(&b, INITIATOR_XML OWNER_XML "<StorageClass>STANDARD</StorageClass>");
        s3c_iso8601(s->uploads[i].initiated_ns, ts);
        buf_xml_elem(&b, "Initiated", ts);
        buf_puts(&b, "</Upload>");
    }
    for (size_t i = 0; i < s->n_prefixes; i++) {
        buf_puts(&b, "<CommonPrefixes>");
        respond_xml_value(&b, "Prefix", s->prefixes[i], url);
        buf_puts(&b, "</CommonPrefixes>");
    }
    buf_puts(&b, "</ListMultipartUploadsResult>");
    return respond_xml(rq, 200, &b);
}

const struct handler h_mp_create = {.end = h_mp_create_end};
const struct handler h_mp_part = {.begin = h_mp_part_begin, .body = h_mp_part_body,
                                  .end = h_mp_part_end, .checks_payload = 1};
const struct handler h_mp_part_copy = {.end = h_mp_part_copy_end};
const struct handler h_mp_complete = {.body = body_collect, .end = h_mp_complete_end};
const struct handler h_mp_abort = {.end = h_mp_abort_end};
const struct handler h_mp_list_parts = {.end = h_mp_list_parts_end};
const struct handler h_list_uploads = {.end = h_list_uploads_end};
