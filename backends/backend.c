/*
 * backend.c: the scheme -> ops registry, the counting wrappers every caller goes
 * through (requests, bytes, errors for /_/stats), and the bucket-name and key rules
 * shared by the router and the backends. It owns no storage: each ops table's
 * open() allocates its struct backend and close() frees it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "backend.h"
#include "lib/s3err.h"

static void ctr_add(uint64_t *c, uint64_t n)
{
    __atomic_fetch_add(c, n, __ATOMIC_RELAXED);
}

/* Answers caused by the request rather than by a failing backend: not counted as errors. */
static int rc_is_client(int rc)
{
    switch (-rc) {
    case S3E_NO_SUCH_KEY:
    case S3E_NO_SUCH_BUCKET:
    case S3E_NO_SUCH_UPLOAD:
    case S3E_NOT_FOUND:
    case S3E_NOT_MODIFIED:
    case S3E_PRECONDITION_FAILED:
    case S3E_BUCKET_ALREADY_OWNED:
    case S3E_BUCKET_NOT_EMPTY:
    case S3E_KEY_CONFLICT:
    case S3E_INVALID_RANGE:
    case S3E_INVALID_PART:
    case S3E_INVALID_PART_ORDER:
    case S3E_ENTITY_TOO_SMALL:
    case S3E_ENTITY_TOO_LARGE:
    case S3E_INVALID_KEY:
    case S3E_KEY_TOO_LONG:
    case S3E_INVALID_BUCKET_NAME:
    case S3E_INVALID_ARGUMENT:
    case S3E_INVALID_REQUEST:
    case S3E_MALFORMED_XML:
    case S3E_METADATA_TOO_LARGE:
    case S3E_NOT_IMPLEMENTED:
    case S3E_INCOMPLETE_BODY:
    case S3E_BAD_DIGEST: return 1;
    default: return 0;
    }
}

static int count(struct backend *be, int rc)
{
    if (rc < 0 && !rc_is_client(rc))
        ctr_add(&be->ctr.errors, 1);
    return rc;
}

#define BE_CALL(be, op, ...)                                                                       \
    do {                                                                                           \
        CHECK_OBJ_NOTNULL((be), BACKEND_MAGIC);                                                    \
        ctr_add(&(be)->ctr.requests, 1);                                                           \
        if (!(be)->ops->op)                                                                        \
            return -S3E_NOT_IMPLEMENTED;                                                           \
        return count((be), (be)->ops->op((be), __VA_ARGS__));                                      \
    } while (0)

static int scheme_is(const char *url, const char *scheme)
{
    size_t n = strlen(scheme);
    return strncasecmp(url, scheme, n) == 0 && strncmp(url + n, "://", 3) == 0;
}

int backend_open(const struct conf *cf, const char *url, struct backend **out, struct errmsg *em)
{
    const struct backend_ops *ops;
    struct backend *be = NULL;
    int rc;

    *out = NULL;
    if (!url || !*url) {
        errmsg_set(em, "backend: empty URL (want file:///abs/dir or http(s)://host:port)");
        return -EINVAL;
    }
    if (scheme_is(url, "file"))
        ops = &be_file_ops;
    else if (scheme_is(url, "http") || scheme_is(url, "https"))
        ops = &be_s3_ops;
    else {
        errmsg_set(em,
                   "backend \"%s\": unknown scheme (want file:///abs/dir or "
                   "http(s)://host:port)",
                   url);
        return -EINVAL;
    }
    rc = ops->open(cf, url, &be, em);
    if (rc < 0)
        return rc;
    AN(be);
    S3C_ASSERT(!(be->caps & BE_CAP_LOCAL_FD) == !ops->open_fd);
    be->magic = BACKEND_MAGIC;
    be->ops = ops;
    memset(&be->ctr, 0, sizeof(be->ctr));
    *out = be;
    return 0;
}

unsigned backend_caps(const struct backend *be)
{
    return be->caps;
}

void backend_counters_get(const struct backend *be, struct backend_counters *out)
{
    out->requests = __atomic_load_n(&be->ctr.requests, __ATOMIC_RELAXED);
    out->bytes_read = __atomic_load_n(&be->ctr.bytes_read, __ATOMIC_RELAXED);
    out->bytes_written = __atomic_load_n(&be->ctr.bytes_written, __ATOMIC_RELAXED);
    out->errors = __atomic_load_n(&be->ctr.errors, __ATOMIC_RELAXED);
    out->throttled = __atomic_load_n(&be->ctr.throttled, __ATOMIC_RELAXED);
}

void backend_count_read(struct backend *be, uint64_t n)
{
    ctr_add(&be->ctr.bytes_read, n);
}

void backend_close(struct backend *be)
{
    if (!be)
        return;
    CHECK_OBJ_NOTNULL(be, BACKEND_MAGIC);
    be->ops->close(be);
}

void backend_stop(struct backend *be)
{
    if (be)
        __atomic_store_n(&be->stopping, 1, __ATOMIC_RELAXED);
}

int backend_head(struct backend *be, const char *bucket, const char *key, struct be_meta *out)
{
    BE_CALL(be, head, bucket, key, out);
}

/* Wraps the caller's sink to count the bytes that reach it. */
struct count_sink {
    const struct be_sink *inner;
    struct backend *be;
};

static int count_on_meta(void *cls, const struct be_meta *meta)
{
    struct count_sink *cs = cls;
    return cs->inner->on_meta ? cs->inner->on_meta(cs->inner->cls, meta) : 0;
}

static int count_on_data(void *cls, const void *buf, size_t len)
{
    struct count_sink *cs = cls;
    ctr_add(&cs->be->ctr.bytes_read, len);
    return cs->inner->on_data(cs->inner->cls, buf, len);
}

int backend_get(struct backend *be, const char *bucket, const char *key, uint64_t off, uint64_t len,
                const struct be_sink *sink)
{
    struct count_sink cs = {sink, be};
    struct be_sink wrapped = {count_on_meta, count_on_data, &cs};

    CHECK_OBJ_NOTNULL(be, BACKEND_MAGIC);
    ctr_add(&be->ctr.requests, 1);
    if (!be->ops->get)
        return -S3E_NOT_IMPLEMENTED;
    return count(be, be->ops->get(be, bucket, key, off, len, &wrapped));
}

int backend_open_fd(struct backend *be, const char *bucket, const char *key, int *fd,
                    struct be_meta *out)
{
    BE_CALL(be, open_fd, bucket, key, fd, out);
}

int backend_put_cancellable(struct backend *be, const char *bucket, const char *key, int fd,
                            uint64_t len, const struct be_meta *meta, const int *cancel)
{
    int rc;

    CHECK_OBJ_NOTNULL(be, BACKEND_MAGIC);
    ctr_add(&be->ctr.requests, 1);
    if (!be->ops->put)
        return -S3E_NOT_IMPLEMENTED;
    rc = be->ops->put(be, bucket, key, fd, len, meta, cancel);
    if (rc == 0)
        ctr_add(&be->ctr.bytes_written, len);
    return rc == -ECANCELED ? rc : count(be, rc);
}

int backend_put(struct backend *be, const char *bucket, const char *key, int fd, uint64_t len,
                const struct be_meta *meta)
{
    return backend_put_cancellable(be, bucket, key, fd, len, meta, NULL);
}

int backend_copy(struct backend *be, const char *src_bucket, const char *src_key,
                 const char *dst_bucket, const char *dst_key, const struct be_meta *replace,
                 struct be_meta *out)
{
    BE_CALL(be, copy, src_bucket, src_key, dst_bucket, dst_key, replace, out);
}

int backend_del(struct backend *be, const char *bucket, const char *key)
{
    BE_CALL(be, del, bucket, key);
}

int backend_list(struct backend *be, const struct be_list_req *rq, struct be_list_page *out)
{
    BE_CALL(be, list, rq, out);
}

int backend_list_buckets(struct backend *be, struct be_bucket **out, size_t *n)
{
    BE_CALL(be, list_buckets, out, n);
}

int backend_bucket_create(struct backend *be, const char *bucket)
{
    BE_CALL(be, bucket_create, bucket);
}

int backend_bucket_head(struct backend *be, const char *bucket)
{
    BE_CALL(be, bucket_head, bucket);
}

int backend_bucket_delete(struct backend *be, const char *bucket)
{
    BE_CALL(be, bucket_delete, bucket);
}

int backend_mp_create(struct backend *be, const char *bucket, const char *key,
                      const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX])
{
    BE_CALL(be, mp_create, bucket, key, meta, upload_id);
}

int backend_mp_put_part(struct backend *be, const char *bucket, const char *key,
                        const char *upload_id, int fd, const struct be_part *part)
{
    int rc;

    CHECK_OBJ_NOTNULL(be, BACKEND_MAGIC);
    ctr_add(&be->ctr.requests, 1);
    if (!be->ops->mp_put_part)
        return -S3E_NOT_IMPLEMENTED;
    rc = be->ops->mp_put_part(be, bucket, key, upload_id, fd, part);
    if (rc == 0)
        ctr_add(&be->ctr.bytes_written, part->size);
    return count(be, rc);
}

int backend_mp_copy_part(struct backend *be, const char *bucket, const char *key,
                         const char *upload_id, unsigned part_number, const char *src_bucket,
                         const char *src_key, uint64_t off, uint64_t len, struct be_part *out)
{
    BE_CALL(be, mp_copy_part, bucket, key, upload_id, part_number, src_bucket, src_key, off, len,
            out);
}

int backend_mp_complete(struct backend *be, const char *bucket, const char *key,
                        const char *upload_id, const struct be_part *parts, size_t n,
                        struct be_meta *out)
{
    BE_CALL(be, mp_complete, bucket, key, upload_id, parts, n, out);
}

int backend_mp_abort(struct backend *be, const char *bucket, const char *key, const char *upload_id)
{
    BE_CALL(be, mp_abort, bucket, key, upload_id);
}

int backend_mp_list_parts(struct backend *be, const char *bucket, const char *key,
                          const char *upload_id, unsigned marker, unsigned max,
                          struct be_part **out, size_t *n, int *truncated)
{
    BE_CALL(be, mp_list_parts, bucket, key, upload_id, marker, max, out, n, truncated);
}

int backend_mp_list_uploads(struct backend *be, const char *bucket, const char *prefix,
                            const char *key_marker, const char *upload_id_marker, unsigned max,
                            struct be_upload **out, size_t *n, int *truncated)
{
    BE_CALL(be, mp_list_uploads, bucket, prefix, key_marker, upload_id_marker, max, out, n,
            truncated);
}

void be_list_page_free(struct be_list_page *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->entries[i].key);
    free(p->entries);
    free(p->next_marker);
    memset(p, 0, sizeof(*p));
}

void be_uploads_free(struct be_upload *u, size_t n)
{
    if (!u)
        return;
    for (size_t i = 0; i < n; i++)
        free(u[i].key);
    free(u);
}

/* Four dot-separated groups of 1-3 digits: what S3 calls "formatted as an IP address". */
static int looks_like_ipv4(const char *s)
{
    int groups = 0, digits = 0;

    for (;; s++) {
        if (*s >= '0' && *s <= '9') {
            if (++digits > 3)
                return 0;
        } else if (*s == '.' || *s == '\0') {
            if (digits == 0)
                return 0;
            groups++;
            digits = 0;
            if (*s == '\0')
                break;
        } else {
            return 0;
        }
    }
    return groups == 4;
}

static int is_alnum_lc(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

int backend_check_bucket_name(const char *name)
{
    size_t n;

    if (!name)
        return -S3E_INVALID_BUCKET_NAME;
    n = strlen(name);
    if (n < 3 || n > 63)
        return -S3E_INVALID_BUCKET_NAME;
    if (!is_alnum_lc(name[0]) || !is_alnum_lc(name[n - 1]))
        return -S3E_INVALID_BUCKET_NAME;
    for (size_t i = 0; i < n; i++) {
        if (!is_alnum_lc(name[i]) && name[i] != '.' && name[i] != '-')
            return -S3E_INVALID_BUCKET_NAME;
        /* S3: no "..", ".-" or "-." (labels must start and end with a letter or digit) */
        if (i > 0 && name[i - 1] == '.' && (name[i] == '.' || name[i] == '-'))
            return -S3E_INVALID_BUCKET_NAME;
        if (i > 0 && name[i - 1] == '-' && name[i] == '.')
            return -S3E_INVALID_BUCKET_NAME;
    }
    if (looks_like_ipv4(name))
        return -S3E_INVALID_BUCKET_NAME;
    return 0;
}

int backend_check_key(const char *key, size_t len)
{
    size_t start = 0;

    if (!key || len == 0)
        return -S3E_INVALID_KEY;
    if (len > 1024)
        return -S3E_KEY_TOO_LONG;
    if (memchr(key, '\0', len))
        return -S3E_INVALID_KEY;
    if (key[0] == '/')
        return -S3E_INVALID_KEY;
    while (start < len) {
        const char *c = key + start;
        const char *slash = memchr(c, '/', len - start);
        size_t clen = slash ? (size_t)(slash - c) : len - start;

        if (clen == 0)
            return -S3E_INVALID_KEY; /* "a//b"; a single trailing '/' never gets here */
        if (clen > 255)
            return -S3E_INVALID_KEY;
        if ((clen == 1 && c[0] == '.') || (clen == 2 && c[0] == '.' && c[1] == '.'))
            return -S3E_INVALID_KEY;
        if (clen >= 9 && memcmp(c, ".s3cached", 9) == 0)
            return -S3E_INVALID_KEY;
        start += clen + 1;
    }
    return 0;
}

int be_parts_hash(const struct be_part *parts, size_t n, char out[33])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen;

    if (!ctx || !EVP_DigestInit_ex(ctx, EVP_md5(), NULL)) {
        EVP_MD_CTX_free(ctx);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        char line[BE_ETAG_MAX + 16];
        const char *et = parts[i].etag;
        size_t el = strlen(et);
        if (el >= 2 && et[0] == '"' && et[el - 1] == '"')
            et++, el -= 2;
        int k = snprintf(line, sizeof(line), "%u:%.*s\n", parts[i].number, (int)el, et);
        for (int j = 0; j < k; j++)
            if (line[j] >= 'A' && line[j] <= 'F')
                line[j] = (char)(line[j] - 'A' + 'a');
        EVP_DigestUpdate(ctx, line, (size_t)k);
    }
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    for (unsigned i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    return 0;
}
