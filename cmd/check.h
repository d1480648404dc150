/*
 * check.h: `s3cached check`, a capacity check before a training run (check.c: options, the
 * analysis and the report; check_io.c: the HTTP side on libcurl: listing, parallel reads,
 * multipart writers, admin calls).
 */
#ifndef S3C_CHECK_H
#define S3C_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "lib/buf.h"

/* How to reach the gateway. */
struct check_http {
    const char *endpoint;              /* http://host:port */
    const char *access_key, *secret_key, *region; /* SigV4; both NULL: unsigned */
    const char *token;                 /* admin bearer token, or NULL */
    char job_header[200];              /* "x-s3cached-job: NAME" */
    char need_header[80];              /* "x-s3cached-job-need: N", or "" */
};

/* One GET of the read phase: bytes [off, off+len) of @key. */
struct check_item {
    char *key;
    uint64_t off, len;
};

struct check_read_res {
    uint64_t bytes, gets, errors;
    double seconds;
    char first_error[256];
};

struct check_write_res {
    uint64_t bytes;
    unsigned writers_ok;
    double ack_s;                      /* until every writer's upload was acknowledged */
    double writer_min_s, writer_max_s;
    char first_error[256];
};

/* libcurl's global state: @on 1 before any call, 0 after the last. */
void check_http_global(int on);
/* One request on its own handle: @path_query starts with '/' ("/b/k?a=1&b=2": parameters
 * sorted and encoded by the caller, as SigV4 wants them). @admin: with the admin token when
 * there is one. @body (may be NULL) is sent as is. The body of the answer into @out; returns
 * the HTTP status, or -1 (message on stderr). */
long check_http_call(const struct check_http *c, const char *method, const char *path_query,
                     const char *body, int admin, struct buf *out);
/* "/BUCKET/KEY" with KEY encoded as SigV4 encodes a path (slashes kept) into @out. */
int check_path(struct buf *out, const char *bucket, const char *key);

/* Lists s3://@bucket/@prefix (ListObjectsV2 pages): *@keys (each malloc'd) with *@sizes.
 * 0, or -1 with a message on stderr. */
int check_list(const struct check_http *c, const char *bucket, const char *prefix,
               char ***keys, uint64_t **sizes, size_t *n);

/* GETs every item of @bucket, @streams at once (curl multi, one thread), discarding the bytes,
 * starting none after @max_s seconds (0: no limit). */
int check_read(const struct check_http *c, const char *bucket, const struct check_item *items,
               size_t n, unsigned streams, double max_s, struct check_read_res *res);

/* @writers parallel uploads of @total bytes in all under s3://@bucket/@prefix/rank-N, each
 * multipart in @part_size parts with @in_flight parts in flight (a single PUT when its share
 * is at most one part), as awscli and boto3 upload. 0, or -1 when a writer failed (its
 * upload aborted; res->first_error says why). */
int check_write(const struct check_http *c, const char *bucket, const char *prefix,
                uint64_t total, unsigned writers, uint64_t part_size, unsigned in_flight,
                struct check_write_res *res);

/* The command: argv after "check". Exit status 0 (the gateway can feed the GPUs), 3 (it
 * cannot), 1 (the check failed), 2 (usage). */
int check_main(int argc, char **argv);

#endif
