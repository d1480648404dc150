/*
 * respond.h: answers to a request (respond.c, the only code that builds libmicrohttpd
 * responses): S3 error documents, XML and text documents, empty answers, and object bodies
 * (zero-copy from a cache file, or streamed from a fill with suspend/resume). Every respond_*()
 * returns REQ_OK or REQ_CLOSE for the handler to return, and sets rq->answered, rq->status and
 * rq->bytes_out.
 */
#ifndef S3C_RESPOND_H
#define S3C_RESPOND_H

#include <stdint.h>
#include <sys/types.h>

#include "backends/backend.h"
#include "lib/buf.h"
#include "req.h"

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
/* An empty answer; respond_empty_header() adds the header @name: @value. */
int respond_empty(struct req *rq, int status);
int respond_empty_header(struct req *rq, int status, const char *name, const char *value);
/* 200 to a PUT or UploadPart: ETag "@etag", and x-amz-checksum-<@checksum_algo>: @checksum
 * when both are set. */
int respond_stored(struct req *rq, const char *etag, const char *checksum_algo,
                   const char *checksum);
int respond_text(struct req *rq, int status, const char *ctype, const char *body, size_t len);
/* Object responses: headers from @m; body from @fd (owned; closed even on failure) at
 * [off, off+len), or streamed from rq->obj when fd < 0. */
int respond_object(struct req *rq, const struct be_meta *m, int fd, int status, uint64_t off,
                   uint64_t len);
/* respond_object() of a part of an object seen as an object of its own (a tar member): @m
 * describes the part, [@off, @off+@len) is a range of it (Content-Range), and its byte 0 is
 * byte @base of the object (of @fd, and of rq->obj when streamed). */
int respond_object_at(struct req *rq, const struct be_meta *m, int fd, int status,
                      uint64_t off, uint64_t len, uint64_t base);
/* A body a producer generates as it is sent (a batch's tar stream): @read(@cls, pos, buf, max)
 * returns > 0 bytes written at body offset pos, 0 after suspending the request (it resumes it
 * when bytes wait), or a negative error (the response is cut short: the client sees a body
 * shorter than its Content-Length). @read runs on the connection's thread and must not block;
 * @cls must live until the request ends. @headers: NULL, or name, value, ..., NULL. Bytes
 * count for the client as they go, and the rate limit applies. */
typedef ssize_t respond_read_f(void *cls, uint64_t pos, char *buf, size_t max);
int respond_generated(struct req *rq, int status, const char *ctype, uint64_t len,
                      respond_read_f *read, void *cls, const char *const *headers);
/* An answer relayed from another gateway (http/proxy.c): reads up to @max body bytes into
 * @buf: >0, 0 at the end of the body, -EAGAIN after suspending the request (its waker resumes
 * it), or another negative error (the answer is cut short). */
typedef ssize_t respond_relay_read_f(void *cls, char *buf, size_t max);
struct respond_hdr {
    const char *name, *value;
};
/* @status with the @n headers @h (copied; Content-Length, Transfer-Encoding, Connection,
 * Keep-Alive, Date, Server and the request ids are left out: this answer has its own) and a
 * body of @size bytes (UINT64_MAX: unknown, sent chunked) from @read(@cls, ...); @free_fn(@cls)
 * once libmicrohttpd is done with it, or at once when no answer could be queued. HEAD, 204
 * and 304 carry no body. Rate limits, fair share and accounting as respond_object(). */
int respond_relay(struct req *rq, int status, const struct respond_hdr *h, size_t n,
                  uint64_t size, respond_relay_read_f *read, void (*free_fn)(void *), void *cls);
/* XML document prolog into @b. */
void respond_xml_start(struct buf *b, const char *root);
/* <name>@v</name> into @b, @v URL-encoded ('/' kept) when @url (encoding-type=url was asked). */
void respond_xml_value(struct buf *b, const char *name, const char *v, int url);

#endif
