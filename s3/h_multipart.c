/*
 * h_multipart.c: CreateMultipartUpload, UploadPart (streamed by upload.c to a staged file or
 * into the upload's data file), UploadPartCopy, CompleteMultipartUpload,
 * AbortMultipartUpload, ListParts and ListMultipartUploads: parameters parsed here, the work
 * done on a worker by the object layer (objects/multipart.c), the answer written here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "backends/backend.h"
#include "http/respond.h"
#include "http/server.h"
#include "http/upload.h"
#include "lib/checksum.h"
#include "lib/range.h"
#include "lib/s3err.h"
#include "lib/xml.h"
#include "objects/multipart.h"
#include "objects/objects.h"
#include "s3.h"

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
    struct multipart_uploads uploads; /* ListMultipartUploads */
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
    multipart_uploads_free(&s->uploads);
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
    return rc ? respond_error(rq, rc) : REQ_OK;
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
    rq->rc = multipart_create(rq->srv->obj, rq->bucket, rq->key, &s->meta, s->upload_id);
}

static int h_mp_create_end(struct req *rq)
{
    struct mp_state *s = mp_state(rq);
    if (!s)
        return respond_error(rq, -ENOMEM);
    if (rq->phase == PH_START) {
        int rc = acl_write_check(rq);
        if (rc)
            return respond_error_msg(rq, rc, rq->err_msg);
        rc = upload_meta_from_headers(rq, &s->meta);
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
    if (max > MULTIPART_PART_MAX)
        max = MULTIPART_PART_MAX; /* S3's largest part */
    int rc = upload_prepare(rq, max), fd = -1;
    if (!rc)
        rc = upload_admit(rq);
    if (rc)
        return rc;
    uint64_t off = 0;
    struct mp_state *s = mp_state(rq);
    if (!s)
        return -ENOMEM;
    rc = multipart_part_target(rq->srv->obj, rq->bucket, rq->key, upload_id_param(rq), pn,
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

static void mp_part_job(struct req *rq)
{
    struct mp_state *s = rq->job_state;
    int taken = 0;
    rq->rc = multipart_put_part(rq->srv->obj, rq->bucket, rq->key, upload_id_param(rq),
                                upload_fd(rq), upload_path(rq), s->inplace, upload_space(rq),
                                &s->part, &taken);
    if (taken)
        upload_release_path(rq);
    if (!rq->rc && s->inplace)
        upload_keep(rq); /* the slot's bytes are the part */
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
    return respond_stored(rq, s->part.etag, s->part.checksum_algo, s->part.checksum);
}

/* ------------------------------------------------------------------ UploadPartCopy */

static void mp_part_copy_job(struct req *rq)
{
    struct mp_state *s = rq->job_state;
    struct cond_hdrs cond;
    copy_source_cond(rq, &cond);
    rq->rc = multipart_copy_part(rq->srv->obj, rq->bucket, rq->key, upload_id_param(rq),
                                 s->part.number, s->src_bucket, s->src_key, s->has_range,
                                 s->src_off, s->src_len, &cond, &s->part);
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

static void mp_complete_job(struct req *rq)
{
    struct mp_state *s = rq->job_state;
    struct objects_notice nt;
    s3_notice_begin(&nt);
    rq->rc = multipart_complete(rq->srv->obj, rq->bucket, rq->key, upload_id_param(rq), s->parts,
                                s->n, &s->meta);
    s3_notice_end(rq, &nt);
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
    rq->rc = multipart_abort(rq->srv->obj, rq->bucket, rq->key, upload_id_param(rq));
}

static int h_mp_abort_end(struct req *rq)
{
    if (rq->phase == PH_START)
        return start_job(rq, mp_abort_job);
    return respond_empty(rq, 204);
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
    rq->rc = multipart_list_parts(rq->srv->obj, rq->bucket, rq->key, upload_id_param(rq), marker,
                                  max, &s->parts, &s->n, &s->truncated);
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

static void mp_list_uploads_job(struct req *rq)
{
    struct mp_state *s = rq->job_state;
    int bad = 0;
    unsigned max = uint_param(rq, "max-uploads", 1000, 1000, &bad);
    rq->rc = multipart_list_uploads(rq->srv->obj, rq->bucket, req_query(rq, "prefix"),
                                    req_query(rq, "delimiter"), req_query(rq, "key-marker"),
                                    req_query(rq, "upload-id-marker"), max, &s->uploads);
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
    const struct multipart_uploads *u = &s->uploads;
    struct buf b;
    char ts[32];
    buf_init(&b, 16u << 20);
    respond_xml_start(&b, "ListMultipartUploadsResult");
    buf_xml_elem(&b, "Bucket", rq->bucket);
    respond_xml_value(&b, "KeyMarker", km ? km : "", url);
    buf_xml_elem(&b, "UploadIdMarker", um ? um : "");
    if (u->truncated && u->next_key) {
        respond_xml_value(&b, "NextKeyMarker", u->next_key, url);
        buf_xml_elem(&b, "NextUploadIdMarker", u->next_upload_id ? u->next_upload_id : "");
    }
    if (prefix)
        respond_xml_value(&b, "Prefix", prefix, url);
    if (delim && *delim)
        respond_xml_value(&b, "Delimiter", delim, url);
    if (url)
        buf_puts(&b, "<EncodingType>url</EncodingType>");
    buf_printf(&b, "<MaxUploads>%u</MaxUploads><IsTruncated>%s</IsTruncated>", max,
               u->truncated ? "true" : "false");
    for (size_t i = 0; i < u->n; i++) {
        buf_puts(&b, "<Upload>");
        respond_xml_value(&b, "Key", u->uploads[i].key, url);
        buf_xml_elem(&b, "UploadId", u->uploads[i].upload_id);
        buf_puts(&b, INITIATOR_XML OWNER_XML "<StorageClass>STANDARD</StorageClass>");
        s3c_iso8601(u->uploads[i].initiated_ns, ts);
        buf_xml_elem(&b, "Initiated", ts);
        buf_puts(&b, "</Upload>");
    }
    for (size_t i = 0; i < u->n_prefixes; i++) {
        buf_puts(&b, "<CommonPrefixes>");
        respond_xml_value(&b, "Prefix", u->prefixes[i], url);
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
