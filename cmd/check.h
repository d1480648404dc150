/*
 * check.h: `s3cached check`, a capacity check before a training run (check.c: options, the
 * analysis and the report; check_io.c: the HTTP side on libcurl: listing, admin calls,
 * multipart writers; check_read.c: the read phase, readers on threads).
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

/* How to read: @streams GETs at once over @readers threads (each its share of the streams);
 * @duration_s > 0: the set again and again, in a new order each pass, for that long (a first
 * pass that was not all cache hits ends the read: a cold set is read once); 0: one pass,
 * however long it takes. @warmup_s: the start-up left out of the steady window. @mark (may
 * be NULL) runs on the calling thread at CHECK_MARK_START (before the first GET),
 * CHECK_MARK_WARM (the start-up is over, the readers running) and CHECK_MARK_END (the
 * readers still running when the duration ended the read). */
enum { CHECK_MARK_START, CHECK_MARK_WARM, CHECK_MARK_END };
struct check_read_opts {
    unsigned streams, readers;
    double duration_s, warmup_s;
    void (*mark)(void *cls, int at);
    void *cls;
};

struct check_read_res {
    uint64_t bytes, gets, errors;      /* bytes of every pass, cut GETs' included; whole GETs */
    double seconds;                    /* the whole read */
    unsigned readers, passes;          /* threads; passes begun */
    int cut;                           /* the duration ended it (GETs in flight were cut) */
    int cold;                          /* the first pass had answers that were not hits */
    int window;                        /* CHECK_MARK_START or _WARM: where the window began */
    double window_s;                   /* the measured window: from there to the end */
    uint64_t window_bytes, window_hit_bytes; /* of those, answers with x-cache: hit */
    int xcache;                        /* the answers carried x-cache (an s3cached gateway) */
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

/* GETs the items of @bucket as @o says (check_read.c), discarding the bytes. 0, or -1 when
 * the readers could not start (out of memory, threads). */
int check_read(const struct check_http *c, const char *bucket, const struct check_item *items,
               size_t n, const struct check_read_opts *o, struct check_read_res *res);
/* A GET handle (a CURL *) for @path_query with the job's headers and the credentials (its
 * header list into *@hdrs, freed by the caller after the handle); NULL when out of memory. */
struct curl_slist;
void *check_get_handle(const struct check_http *c, const char *path_query,
                       struct curl_slist **hdrs);
/* Points the handle @h (from check_get_handle) at @path_query, for its next GET. */
void check_set_url(const struct check_http *c, void *h, const char *path_query);
/* A pre-signed GET URL of s3://@bucket/@key valid for @expires_s (SigV4 in the query, as
 * `aws s3 presign` makes), or the plain URL when there are no credentials, into @out. */
int check_presign(const struct check_http *c, const char *bucket, const char *key,
                  unsigned expires_s, struct buf *out);

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
