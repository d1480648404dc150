/*
 * range.h: the Range header and the conditional request headers of GET/HEAD
 * (and CopyObject's x-amz-copy-source-if-*), with S3's semantics. Pure;
 * HTTP dates are parsed with libcurl's curl_getdate().
 */
#ifndef S3C_RANGE_H
#define S3C_RANGE_H

#include <stdint.h>

/* Resolves a Range header against an object of @size bytes.
 * Returns 0 when the whole object is to be sent (no header, or one S3 ignores: not "bytes=",
 * a syntax error, several ranges), 1 with [*off, *off + *len) for a satisfiable single range
 * (206), or -S3E_INVALID_RANGE (416: start beyond the end, or a suffix of 0 bytes, or any range
 * of an empty object). Forms: bytes=a-b (b clamped to size-1), bytes=a-, bytes=-n (last n). */
int range_parse(const char *hdr, uint64_t size, uint64_t *off, uint64_t *len);

struct cond_hdrs {
    const char *if_match;
    const char *if_none_match;
    const char *if_modified_since;
    const char *if_unmodified_since;
};

/* Evaluates the conditions against the object's @etag (unquoted) and Last-Modified @mtime (s).
 * Returns 0 (serve), -S3E_NOT_MODIFIED (304) or -S3E_PRECONDITION_FAILED (412).
 * S3's order: If-Match false -> 412; else If-Unmodified-Since false (and no If-Match) -> 412;
 * If-None-Match matches -> 304 (@is_get_head) or 412; else If-Modified-Since not modified
 * (and no If-None-Match) -> 304 (@is_get_head only). ETag lists ("a", "b"), W/ prefixes and
 * "*" are understood; unparsable dates are ignored. */
int cond_check(const struct cond_hdrs *c, const char *etag, int64_t mtime, int is_get_head);

#endif
