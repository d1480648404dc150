/*
 * backend.h: the backing store behind the cache, as a table of operations
 * (Varnish stevedore, curl Curl_ssl). backends/backend.c picks the table by
 * URL scheme and counts requests and bytes for /_/stats; be_file.c serves a
 * POSIX directory, be_s3.c any S3 endpoint.
 *
 * Every op is thread-safe, may block (callers run it on a worker thread, never
 * on an HTTP thread), and returns 0, -errno or -S3E_*. An optional op may be
 * NULL: the caller then answers NotImplemented.
 */
#ifndef S3C_BACKEND_H
#define S3C_BACKEND_H

#include <stdint.h>
#include <stddef.h>
#include "lib/s3c.h"

struct conf;

#define BE_ETAG_MAX 72
#define BE_USERMETA_MAX 2560 /* S3 allows 2 KB of user metadata; room for the separators */
#define BE_UPLOAD_ID_MAX 128
#define BE_MIN_PART_SIZE (5u << 20)
#define BE_MAX_PARTS 10000

/* What a backend stores with an object besides its bytes. Plain data: copy freely. */
struct be_meta {
    uint64_t size;
    int64_t mtime_ns;       /* Last-Modified, ns since the epoch */
    char etag[BE_ETAG_MAX]; /* without quotes: 32 hex, or 32 hex "-N" for multipart */
    char content_type[256];
    char cache_control[256];
    char content_disposition[512];
    char content_encoding[128];
    char content_language[64];
    char expires[64];
    /* x-amz-meta-*: "name:value\n" lines, name lower case without the "x-amz-meta-" prefix. */
    char usermeta[BE_USERMETA_MAX];
    char checksum_algo[8]; /* "", "CRC32", "CRC32C", "SHA1", "SHA256" */
    char checksum[64];     /* base64 full-object checksum of checksum_algo */
    uint32_t parts_count;  /* 0 for objects made by a single PUT */
    uint64_t part_size;    /* multipart: size of every part but the last when they are
                                      * all equal (what GET ?partNumber=N needs), else 0 */
};

/* One part of a multipart upload. */
struct be_part {
    unsigned number;
    char etag[BE_ETAG_MAX]; /* without quotes */
    uint64_t size;
    int64_t mtime_ns;
    char checksum_algo[8];
    char checksum[64];
};

/* Where GET bytes go (fill.c provides one). on_meta is called once, before the first byte,
 * with the whole object's metadata; a non-zero return from either aborts the transfer and
 * becomes the op's return value. */
struct be_sink {
    int (*on_meta)(void *cls, const struct be_meta *meta);
    int (*on_data)(void *cls, const void *buf, size_t len);
    void *cls;
};

/* A listing request: keys of @bucket that start with @prefix, strictly after @marker
 * (""/NULL = from the start), in byte order. With a @delimiter, keys that have it after the
 * prefix roll up into one common prefix entry (is_prefix) in key order. */
struct be_list_req {
    const char *bucket;
    const char *prefix;
    const char *delimiter;
    const char *marker;
    unsigned max_keys; /* 1..1000: keys plus common prefixes on this page */
};
struct be_list_entry {
    char *key; /* owned by the page; for a common prefix the prefix including the delimiter */
    int is_prefix;
    uint64_t size;
    int64_t mtime_ns;
    char etag[BE_ETAG_MAX];
};
struct be_list_page {
    struct be_list_entry *entries;
    size_t n;
    int truncated;
    char *next_marker; /* when truncated: pass as the next request's marker */
};
void be_list_page_free(struct be_list_page *p);

struct be_bucket {
    char name[64];
    int64_t ctime_ns;
};

/* MD5 hex of a Complete's part list as the client sent it (numbers and ETags, quotes and
 * case aside): identifies a repeated Complete of the same parts. 0 or -ENOMEM. */
int be_parts_hash(const struct be_part *parts, size_t n, char out[33]);

struct be_upload {
    char *key; /* owned by the array; free with be_uploads_free() */
    char upload_id[BE_UPLOAD_ID_MAX];
    int64_t initiated_ns;
};
void be_uploads_free(struct be_upload *u, size_t n);

struct backend;

struct backend_ops {
    const char *scheme; /* "file", "http", "https" */
    int (*open)(const struct conf *cf, const char *url, struct backend **out, struct errmsg *em);
    void (*close)(struct backend *be);

    /* Objects */
    int (*head)(struct backend *be, const char *bucket, const char *key, struct be_meta *out);
    /* Bytes [off, off+len) (len UINT64_MAX = to the end) into @sink. */
    int (*get)(struct backend *be, const char *bucket, const char *key, uint64_t off, uint64_t len,
               const struct be_sink *sink);
    /* Optional (BE_CAP_LOCAL_FD): an O_RDONLY fd on the object, owned by the caller. */
    int (*open_fd)(struct backend *be, const char *bucket, const char *key, int *fd,
                   struct be_meta *out);
    /* Store @len bytes read from @fd at offset 0 (borrowed; pread only) as the object. The
     * caller has verified digests: @meta carries size, etag, checksum and headers. The object
     * appears atomically (no reader sees a partial one). @cancel (NULL: none): once *@cancel
     * reads non-zero (another thread sets it), the transfer stops soon, even one stalled on
     * the network, and put returns -ECANCELED without making the object. */
    int (*put)(struct backend *be, const char *bucket, const char *key, int fd, uint64_t len,
               const struct be_meta *meta, const int *cancel);
    /* Server-side copy. @replace NULL keeps the source's metadata (COPY); otherwise the new
     * object gets @replace's headers and user metadata (REPLACE). @out: the new object. */
    int (*copy)(struct backend *be, const char *src_bucket, const char *src_key,
                const char *dst_bucket, const char *dst_key, const struct be_meta *replace,
                struct be_meta *out);
    /* 0 also when the key does not exist; -S3E_NO_SUCH_BUCKET when the bucket does not. */
    int (*del)(struct backend *be, const char *bucket, const char *key);
    int (*list)(struct backend *be, const struct be_list_req *rq, struct be_list_page *out);

    /* Buckets */
    int (*list_buckets)(struct backend *be, struct be_bucket **out, size_t *n);
    int (*bucket_create)(struct backend *be, const char *bucket); /* -S3E_BUCKET_ALREADY_OWNED */
    int (*bucket_head)(struct backend *be, const char *bucket);
    int (*bucket_delete)(struct backend *be, const char *bucket); /* -S3E_BUCKET_NOT_EMPTY */

    /* Multipart. @meta of create: headers and user metadata of the object to be. */
    int (*mp_create)(struct backend *be, const char *bucket, const char *key,
                     const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX]);
    /* Stores part @part->number from @fd (borrowed, pread from 0, @part->size bytes); the
     * caller computed @part->etag (MD5 hex) and checksum. */
    int (*mp_put_part)(struct backend *be, const char *bucket, const char *key,
                       const char *upload_id, int fd, const struct be_part *part);
    int (*mp_copy_part)(struct backend *be, const char *bucket, const char *key,
                        const char *upload_id, unsigned part_number, const char *src_bucket,
                        const char *src_key, uint64_t off, uint64_t len, struct be_part *out);
    /* Checks order (INVALID_PART_ORDER), existence and ETags (INVALID_PART), sizes
     * (ENTITY_TOO_SMALL for any part but the last under 5 MiB), then makes the object
     * atomically. Completing an upload that was just completed with the same parts succeeds
     * again with the same result. @out: the new object's metadata. */
    int (*mp_complete)(struct backend *be, const char *bucket, const char *key,
                       const char *upload_id, const struct be_part *parts, size_t n,
                       struct be_meta *out);
    int (*mp_abort)(struct backend *be, const char *bucket, const char *key, const char *upload_id);
    /* Parts with number > @marker, at most @max; *@out malloc'd (free()). */
    int (*mp_list_parts)(struct backend *be, const char *bucket, const char *key,
                         const char *upload_id, unsigned marker, unsigned max, struct be_part **out,
                         size_t *n, int *truncated);
    /* In-progress uploads of @bucket whose key starts with @prefix, ordered by (key, upload
     * id), after (@key_marker, @upload_id_marker); at most @max. */
    int (*mp_list_uploads)(struct backend *be, const char *bucket, const char *prefix,
                           const char *key_marker, const char *upload_id_marker, unsigned max,
                           struct be_upload **out, size_t *n, int *truncated);
};

/* Counters for /_/stats; updated by backend.c's wrappers with relaxed atomics. */
struct backend_counters {
    uint64_t requests;
    uint64_t bytes_read;
    uint64_t bytes_written;
    uint64_t errors;
    uint64_t throttled; /* answers that said slow down (503, 429), retried or not */
};

struct backend {
    unsigned magic;
#define BACKEND_MAGIC 0x8ac4e0d1
    const struct backend_ops *ops;
    void *priv;
    struct backend_counters ctr;
    int stopping;  /* backend_stop() was called (read atomically) */
    unsigned caps; /* BE_CAP_*: set by the backend's open(), read with backend_caps() */
};

/* What a backend can do beyond the operations every backend has. Callers ask backend_caps();
 * they never look at the operation table. */
#define BE_CAP_LOCAL_FD 0x1u /* backend_open_fd(): a descriptor on the object's own file */
#define BE_CAP_LOCAL_DISK                                                                          \
    0x2u /* ... on a local disk file system: reads of it never stall on a
                                * network (a cold GET may be sent from it, --miss-source) */
unsigned backend_caps(const struct backend *be);
/* The request and byte counters (/_/stats), read with relaxed atomics. */
void backend_counters_get(const struct backend *be, struct backend_counters *out);
/* Counts @n bytes read from @be's files without its get() (a local backend's file copied by
 * the kernel, BE_CAP_LOCAL_FD). */
void backend_count_read(struct backend *be, uint64_t n);

/* Opens the backend named by @url (file:///abs/dir, http://host:port, https://...).
 * 0 or -EINVAL/-errno with a one-line reason in @em. */
int backend_open(const struct conf *cf, const char *url, struct backend **out, struct errmsg *em);
void backend_close(struct backend *be);
/* The server is stopping: network transfers in flight end within about a second, and later
 * ones at once, with -S3E_SERVICE_UNAVAILABLE and no retry, so that no request stays waiting
 * on a stalled upstream. Local backends are not affected (their calls do not stall). */
void backend_stop(struct backend *be);

/* Counting wrappers: callers use these, not be->ops directly. They return -S3E_NOT_IMPLEMENTED
 * when the op is NULL, count one request per call, errors (rc < 0 other than the expected
 * NO_SUCH_KEY/NOT_MODIFIED/PRECONDITION answers) and bytes moved. */
int backend_head(struct backend *be, const char *bucket, const char *key, struct be_meta *out);
int backend_get(struct backend *be, const char *bucket, const char *key, uint64_t off, uint64_t len,
                const struct be_sink *sink);
int backend_open_fd(struct backend *be, const char *bucket, const char *key, int *fd,
                    struct be_meta *out);
int backend_put(struct backend *be, const char *bucket, const char *key, int fd, uint64_t len,
                const struct be_meta *meta);
/* backend_put() that another thread may stop by setting *@cancel (see ops.put). */
int backend_put_cancellable(struct backend *be, const char *bucket, const char *key, int fd,
                            uint64_t len, const struct be_meta *meta, const int *cancel);
int backend_copy(struct backend *be, const char *src_bucket, const char *src_key,
                 const char *dst_bucket, const char *dst_key, const struct be_meta *replace,
                 struct be_meta *out);
int backend_del(struct backend *be, const char *bucket, const char *key);
int backend_list(struct backend *be, const struct be_list_req *rq, struct be_list_page *out);
int backend_list_buckets(struct backend *be, struct be_bucket **out, size_t *n);
int backend_bucket_create(struct backend *be, const char *bucket);
int backend_bucket_head(struct backend *be, const char *bucket);
int backend_bucket_delete(struct backend *be, const char *bucket);
int backend_mp_create(struct backend *be, const char *bucket, const char *key,
                      const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX]);
int backend_mp_put_part(struct backend *be, const char *bucket, const char *key,
                        const char *upload_id, int fd, const struct be_part *part);
int backend_mp_copy_part(struct backend *be, const char *bucket, const char *key,
                         const char *upload_id, unsigned part_number, const char *src_bucket,
                         const char *src_key, uint64_t off, uint64_t len, struct be_part *out);
int backend_mp_complete(struct backend *be, const char *bucket, const char *key,
                        const char *upload_id, const struct be_part *parts, size_t n,
                        struct be_meta *out);
int backend_mp_abort(struct backend *be, const char *bucket, const char *key,
                     const char *upload_id);
int backend_mp_list_parts(struct backend *be, const char *bucket, const char *key,
                          const char *upload_id, unsigned marker, unsigned max,
                          struct be_part **out, size_t *n, int *truncated);
int backend_mp_list_uploads(struct backend *be, const char *bucket, const char *prefix,
                            const char *key_marker, const char *upload_id_marker, unsigned max,
                            struct be_upload **out, size_t *n, int *truncated);

/* Key and bucket name rules shared by the router and the backends. */
/* 0 if @name is a valid bucket name (3-63 chars of a-z 0-9 . -, starts and ends with a letter
 * or digit, not an IP address, never starts with '_' or '.'), else -S3E_INVALID_BUCKET_NAME. */
int backend_check_bucket_name(const char *name);
/* 0 if @key is storable: 1..1024 bytes (else KEY_TOO_LONG), no NUL, no "." or ".." path
 * component, no empty component except a trailing '/', no leading '/', no component over 255
 * bytes, no component starting with ".s3cached" (else -S3E_INVALID_KEY). */
int backend_check_key(const char *key, size_t len);

extern const struct backend_ops be_file_ops;
extern const struct backend_ops be_s3_ops;

#endif
