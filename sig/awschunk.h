/*
 * awschunk.h: decoder of the aws-chunked content encoding (streaming SigV4
 * uploads), pure. Feed it the request body after HTTP chunked framing has been
 * undone (libmicrohttpd does that), in pieces of any size; it emits the
 * decoded payload, checks every chunk signature (signed variants), and parses
 * and checks the trailer (trailer variants).
 *
 * Frames:  <hex-size>[;chunk-signature=<64 hex>]\r\n<data>\r\n ... final 0-size frame,
 *          then either \r\n (no trailer) or trailer lines "name:value\r\n" ...
 *          [x-amz-trailer-signature:<64 hex>\r\n] then \r\n.
 */
#ifndef S3C_AWSCHUNK_H
#define S3C_AWSCHUNK_H

#include <stdint.h>
#include <stddef.h>

enum awschunk_mode {
    AWSCHUNK_SIGNED,           /* STREAMING-AWS4-HMAC-SHA256-PAYLOAD */
    AWSCHUNK_SIGNED_TRAILER,   /* STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER */
    AWSCHUNK_UNSIGNED_TRAILER, /* STREAMING-UNSIGNED-PAYLOAD-TRAILER */
};

struct awschunk;

typedef int awschunk_out_f(void *cls, const void *data, size_t len);

/* For the signed modes: @signing_key, @seed_signature, @amz_date and @scope from
 * sigv4_result; ignored (may be NULL) for UNSIGNED_TRAILER. Returns 0 or -ENOMEM. */
int awschunk_new(enum awschunk_mode mode, const uint8_t signing_key[32],
                 const char *seed_signature, const char *amz_date, const char *scope,
                 struct awschunk **out);
void awschunk_free(struct awschunk *c);

/* Decodes @len bytes; calls @out for payload bytes (any non-zero return stops and is returned).
 * Returns 0 or -S3E_INCOMPLETE_BODY / -S3E_INVALID_REQUEST (malformed frame, chunk over 16 MiB,
 * bytes after the end) / -S3E_SIGNATURE_DOES_NOT_MATCH (a chunk or trailer signature).
 * Payload bytes are emitted as they arrive, and a chunk's signature is checked at its end: a
 * mismatch fails the decode (sticky), after that chunk's bytes went out. The caller keeps what
 * it was given out of use (staged, not stored or forwarded) until awschunk_finish() returns 0,
 * and drops it on any error. No payload is held here, so no chunk costs memory (a decoder that
 * buffered each chunk until its signature checked held up to 16 MiB per connection). */
int awschunk_feed(struct awschunk *c, const void *in, size_t len, awschunk_out_f *out, void *cls);
/* At the end of the body: 0 if the final frame (and trailer) was complete, else
 * -S3E_INCOMPLETE_BODY. */
int awschunk_finish(struct awschunk *c);
/* A trailer value ("x-amz-checksum-crc32" -> base64), or NULL. Valid until awschunk_free(). */
const char *awschunk_trailer(const struct awschunk *c, const char *name);
/* Payload bytes emitted so far. */
uint64_t awschunk_decoded_bytes(const struct awschunk *c);

#endif
