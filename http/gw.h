/*
 * gw.h: the gateway's private interfaces (server, router, request state,
 * responses, auth, uploads, handlers). Nothing outside gateway/ includes it.
 *
 * Request lifecycle (one struct req per HTTP request):
 *   server_access() first call: req_new, route, authenticate, pick handler -> h->begin()
 *   body calls: h->body() (upload intake; errors latch rq->rc, the rest is discarded)
 *   final call: h->end(): answers at once, or runs a job on the workq after
 *               suspending the connection; the job resumes it and h->end() runs again
 *   server_completed(): access log, accounting, req_free (closes/unlinks what is left)
 */
#ifndef S3C_GW_H
#define S3C_GW_H

#include <microhttpd.h>
#include <stdint.h>
#include <sys/types.h>

#include "backends/backend.h"
#include "lib/buf.h"
#include "cache/cache.h"
#include "lib/conf.h"
#include "lib/s3c.h"
#include "sig/sigv4.h"
#include "lib/xml.h"
#include "acct/ratelimit.h"
#include "acct/fair.h"

struct server;
struct req;
struct auth;
struct stats;
struct stats_client;

/* --- routing -------------------------------------------------------------------------- */
enum op {
    OP_NONE = 0,
    OP_ADMIN,
    OP_LIST_BUCKETS,
    OP_BUCKET_CREATE, OP_BUCKET_DELETE, OP_BUCKET_HEAD, OP_BUCKET_LOCATION,
    OP_BUCKET_VERSIONING, OP_BUCKET_ACL, OP_BUCKET_PUT_ACL,
    OP_LIST_OBJECTS, OP_LIST_OBJECTS_V2, OP_LIST_VERSIONS, OP_LIST_UPLOADS, OP_DELETE_OBJECTS,
    OP_GET, OP_HEAD, OP_PUT, OP_COPY, OP_DELETE, OP_OBJECT_ACL, OP_OBJECT_PUT_ACL,
    OP_OBJECT_TAGGING, OP_OBJECT_ATTRIBUTES,
    OP_MP_CREATE, OP_MP_PART, OP_MP_PART_COPY, OP_MP_COMPLETE, OP_MP_ABORT, OP_MP_LIST_PARTS,
    OP_OPTIONS,
};
const char *op_name(enum op op);

/* --- a request ------------------------------------------------------------------------ */
typedef int handler_f(struct req *rq);

struct handler {
    handler_f *begin; /* headers known; may answer at once (rq->answered) */
    int (*body)(struct req *rq, const char *data, size_t len);
    handler_f *end;   /* body done (or none): answer, or start a job */
    int checks_payload; /* body() checks the declared digests itself (upload.c); for the
                         * others server.c does it with reqbody.c before end() */
};

struct upload;  /* upload.c */
struct reqbody; /* reqbody.c */

struct req {
    unsigned magic;
#define REQ_MAGIC 0x7e9a11c3
    struct server *srv;
    struct MHD_Connection *conn;
    char id[20];                  /* x-amz-request-id */
    uint64_t t_start_ns;
    const char *method;           /* MHD's, valid for the request */
    enum op op;
    char *bucket;                 /* decoded, NULL for service-level requests */
    char *key;                    /* decoded, NULL for bucket-level requests */
    char *raw_path;               /* path as sent, percent-encoded (SigV2 signs it) */
    char *path;                   /* decoded path as signed ("/b/k", or "/k" virtual-hosted) */
    int vhost;                    /* the bucket came from the Host header */
    struct sigv4_kv *query;       /* decoded query parameters */
    size_t n_query;
    struct sigv4_kv *headers;     /* pointers into MHD's header storage */
    size_t n_headers;
    size_t header_bytes;          /* request line and header lines, about as sent */
    char access_key[129];         /* authenticated key, "anonymous", or "" */
    int is_admin;
    struct sigv4_result auth;
    const struct handler *h;
    int rc;                       /* first error; latched */
    char err_msg[256];            /* <Message> of the error answered for rc, "" = the default */
    const char *err_elem;         /* an extra element of that error document (<Region>...) */
    char err_elem_value[128];
    int answered;                 /* a response has been queued */
    int phase;                    /* handler-private progress */
    int suspended;                /* connection suspended waiting for a job */
    int busy;                     /* counted in server.inflight (processing or answering) */
    uint64_t bytes_in;            /* request body bytes received */
    uint64_t bytes_out;           /* response body bytes (of the queued response) */
    uint64_t bytes_out_streamed;  /* counted by stream callbacks so far */
    int status;
    int cache_how;                /* enum cache_outcome or -1 */
    uint64_t tcp_acked_start;     /* TCP_INFO bytes acked when a large body was queued, or 0 */
    struct stats_client *sc;
    char addr[64];
    struct rl_bucket *rlb;        /* download rate limit of this key, or NULL */
    int from_source;              /* the body is read from the backend's own file (pread: a
                                   * file cut short under us ends the response, see respond.c) */
    struct rl_timer rl_timer;     /* resumes the connection when the bucket refills */
    struct fair_conn fair;        /* --max-bandwidth: this response's socket, while it sends */

    /* handler state */
    struct upload *up;
    struct reqbody *rb;           /* digests of a body upload.c does not take */
    struct buf body;              /* small XML bodies */
    struct cache_obj *obj;
    struct cache_waiter waiter;
    const struct be_meta *meta;   /* borrowed from obj */
    uint64_t off, len;            /* range being served */
    int partial;
    void *job_state;              /* handler-private result of a job */
    void (*job_state_free)(void *);
};

/* Queues fn on the work queue after suspending the connection; the access handler runs again
 * once fn has returned. fn must not touch MHD. Returns 0 or -errno (nothing suspended). */
int req_run_job(struct req *rq, void (*fn)(struct req *rq));
/* Parks the request (its handler returns MHD_YES and is called again once resumed), and
 * wakes it: from any thread, once, after the work it waits for has set its state. */
void req_suspend(struct req *rq);
void req_resume(struct req *rq);
/* Rate limit before sending up to *@max body bytes: 0 (and *@max possibly lowered) to go on, or
 * -EAGAIN after suspending the connection until the key's bucket has refilled. */
int req_throttle(struct req *rq, size_t *max);
/* --max-bandwidth: a response body is being queued; its socket joins the fair share of the
 * client. A no-op without --max-bandwidth (one branch). */
void req_fair_start(struct req *rq);
const char *req_header(struct req *rq, const char *name);   /* case-insensitive; NULL */
const char *req_query(struct req *rq, const char *name);    /* decoded; "" for "?name" */
int req_has_query(struct req *rq, const char *name);

/* --- responses (respond.c: the only code that builds MHD responses) --------------------- */
/* All return MHD_YES/MHD_NO for the access handler, and set rq->answered/status/bytes_out. */
int respond_error(struct req *rq, int rc);
int respond_error_msg(struct req *rq, int rc, const char *message);
/* 416 InvalidRange as AWS sends it: <RangeRequested> (@range, the header as sent) and
 * <ActualObjectSize> in the body, Content-Range: bytes * / @size (what smart_open reads to open
 * an empty object). */
int respond_invalid_range(struct req *rq, const char *range, uint64_t size);
int respond_xml(struct req *rq, int status, struct buf *xml); /* takes xml's memory */
/* respond_xml() with one more header @name: @value (none when either is NULL). */
int respond_xml_headers(struct req *rq, int status, struct buf *xml, const char *name,
                        const char *value);
int respond_empty(struct req *rq, int status, struct MHD_Response **extra_out);
int respond_queue_prepared(struct req *rq, int status, struct MHD_Response *r);
int respond_text(struct req *rq, int status, const char *ctype, const char *body, size_t len);
/* Object responses: headers from @m; body from @fd (owned; closed even on failure) at
 * [off, off+len), or streamed from rq->obj when fd < 0. */
int respond_object(struct req *rq, const struct be_meta *m, int fd, int status, uint64_t off,
                   uint64_t len);
/* Adds the standard object headers (ETag, Last-Modified, Content-Type, metadata...). */
void respond_object_headers(struct req *rq, struct MHD_Response *r, const struct be_meta *m);
/* x-amz-checksum-<algo>: @value for the algorithm named @algo ("CRC32", ...), if known. */
void respond_checksum_header(struct MHD_Response *r, const char *algo, const char *value);
/* XML document prolog into @b. */
void respond_xml_start(struct buf *b, const char *root);
/* <name>@v</name> into @b, @v URL-encoded ('/' kept) when @url (encoding-type=url was asked). */
void respond_xml_value(struct buf *b, const char *name, const char *v, int url);

/* --- auth (auth.c) ----------------------------------------------------------------------- */
int auth_new(const struct conf *cf, struct auth **out, struct errmsg *em);
void auth_free(struct auth *a);
int auth_reload(struct auth *a, struct errmsg *em);       /* SIGHUP: re-read the file */
/* Authenticates @rq: fills rq->access_key, rq->is_admin, rq->auth. 0 or -S3E_*. */
int auth_check(struct auth *a, struct req *rq, struct errmsg *em);
/* Admin endpoints: a signed admin key, the bearer token, or anonymous mode. */
int auth_is_admin(struct auth *a, struct req *rq);
/* For the start-up banner: the generated pair's access key (else NULL), and its secret only
 * when it was generated by this start (else NULL). Keys the operator gave are never shown. */
void auth_banner_key(struct auth *a, const char **access_key, const char **secret_key);
uint64_t auth_rate_limit(struct auth *a, const char *access_key);

/* --- uploads (upload.c) ------------------------------------------------------------------ */
/* Prepares to receive a PUT/UploadPart body into a staged cache file: payload mode from
 * rq->auth, Content-Length / x-amz-decoded-content-length limits, Content-MD5 and
 * x-amz-checksum-* expectations. 0 or -S3E_*. */
int upload_begin(struct req *rq, uint64_t max_size);
/* upload_begin() in two steps, for a caller that picks the destination from the declared
 * length: upload_prepare(), then upload_target_stage() (a staged file, as upload_begin()) or
 * upload_target_fd() (@fd, taken over and closed by upload_free(), written from byte @off on;
 * no staged path). */
int upload_prepare(struct req *rq, uint64_t max_size);
int upload_target_stage(struct req *rq);
int upload_target_fd(struct req *rq, int fd, uint64_t off);
/* The body's declared (decoded) length, UINT64_MAX when unknown. After a begin. */
uint64_t upload_declared(struct req *rq);
int upload_write(struct req *rq, const char *data, size_t len);
/* Checks lengths and digests; on success fills @meta's size/etag/checksum fields. */
int upload_finish(struct req *rq, struct be_meta *meta);
int upload_fd(struct req *rq);
const char *upload_path(struct req *rq);
/* Hands the staged path over (the caller must adopt or unlink it). */
void upload_release_path(struct req *rq);
void upload_free(struct req *rq);
/* Write-back: reserves the declared body size against --dirty-limit (returned by
 * upload_free()). 0, -S3E_SLOW_DOWN or -S3E_ENTITY_TOO_LARGE. After upload_begin(). */
int upload_admit_dirty(struct req *rq);
/* Copies @len bytes of @in at @in_off to @out at @out_off (copy_file_range, else pread/pwrite).
 * 0, -EIO when @in is shorter, or -errno. */
int gw_copy_fd(int in, uint64_t in_off, int out, uint64_t out_off, uint64_t len);
/* Request headers -> the stored metadata fields (content-type etc, x-amz-meta-*). */
int meta_from_headers(struct req *rq, struct be_meta *m);

/* --- bodies of the other requests (reqbody.c) ----------------------------------------------- */
/* For a handler without checks_payload: reads what the headers declare about the body (a
 * literal x-amz-content-sha256 from rq->auth, Content-MD5, x-amz-checksum-*). 0, or
 * -S3E_INVALID_DIGEST / -S3E_INVALID_REQUEST (unparsable value), -S3E_NOT_IMPLEMENTED
 * (signed aws-chunked: only uploads check chunk signatures), -ENOMEM. */
int reqbody_begin(struct req *rq);
/* Whether reqbody_begin() found one of those: the body cannot be swapped unnoticed. */
int reqbody_bound(const struct req *rq);
int reqbody_update(struct req *rq, const char *data, size_t len); /* 0 or -ENOMEM */
/* All body bytes are in: 0, -S3E_SHA256_MISMATCH or -S3E_BAD_DIGEST (once; later calls 0). */
int reqbody_finish(struct req *rq);
void reqbody_free(struct req *rq);

/* --- handlers ------------------------------------------------------------------------------ */
extern const struct handler h_get, h_head, h_put, h_copy, h_delete, h_object_acl,
    h_object_put_acl, h_object_tagging, h_object_attributes;
extern const struct handler h_list_buckets, h_bucket_create, h_bucket_delete, h_bucket_head,
    h_bucket_location, h_bucket_versioning, h_bucket_acl, h_bucket_put_acl, h_list_objects,
    h_list_uploads, h_delete_objects;
extern const struct handler h_mp_create, h_mp_part, h_mp_part_copy, h_mp_complete, h_mp_abort,
    h_mp_list_parts;
extern const struct handler h_admin, h_options;

/* Shared by the object and multipart handlers (h_object.c). */
int copy_source_parse(struct req *rq, char **bucket, char **key);
/* DeleteObject of one key on a worker: the backend first, then the cache (a dirty entry is
 * forgotten only once the backend deleted; its drain is held off meanwhile). A key the
 * backend does not have is deleted too (0). */
int object_delete(struct server *srv, const char *bucket, const char *key);
int copy_source_conditions(struct req *rq, const struct be_meta *src);
void acl_document(struct buf *b);
/* Put{Bucket,Object}Acl's request (x-amz-acl, x-amz-grant-*, rq->body): 0 when it asks for what
 * is enforced anyway (canned "private", or a document granting the owner FULL_CONTROL and
 * nothing else); -S3E_NOT_IMPLEMENTED for any other grant; -S3E_INVALID_REQUEST,
 * -S3E_INVALID_ARGUMENT, -S3E_MISSING_SECURITY_HEADER or -S3E_MALFORMED_ACL for a bad one.
 * @em: the message for the client. */
int acl_put_check(struct req *rq, struct errmsg *em);

/* --- router (router.c) --------------------------------------------------------------------- */
/* Decodes the path and query of @rq and picks rq->op, rq->bucket, rq->key. 0 or -S3E_*. */
int router_route(struct req *rq, const char *url, const char *host);
const struct handler *router_handler(enum op op);
/* Percent-decodes @s (len bytes) into a new string; NULL on bad escapes or embedded NUL. */
char *url_decode(const char *s, size_t len);

/* --- server (server.c) --------------------------------------------------------------------- */
struct server {
    unsigned magic;
#define SERVER_MAGIC 0x5e77e401
    struct conf *cf;
    struct MHD_Daemon *daemon;
    struct backend *be;
    struct workq *wq;
    struct cache *cache;
    struct auth *auth;
    struct stats *stats;
    struct rl *rl;
    struct fair *fair;            /* --max-bandwidth, or NULL */
    struct warm *warm;
    uint64_t start_ns;
    unsigned long req_seq;
    unsigned long inflight;       /* requests being processed or answered */
};
int server_run(struct conf *cf);
/* --write-mode back */
int gw_write_back(const struct server *srv);
/* Bytes the peer has acknowledged on @conn's socket so far (TCP_INFO), 0 if unknown. */
uint64_t tcp_bytes_acked(struct MHD_Connection *conn);

#endif
