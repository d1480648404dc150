/*
 * upload.h: request bodies that become objects or parts (upload.c): aws-chunked decoding,
 * digests in one pass, checked before anything is stored, into a staged cache file or a file
 * the object layer names.
 */
#ifndef S3C_UPLOAD_H
#define S3C_UPLOAD_H

#include <stdint.h>

#include "backends/backend.h"

struct req;

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
/* The request failed before or during its body: drops it as a failed upload_write() does (no
 * staged file, nothing reserved), at once. NULL-safe, idempotent. */
void upload_abandon(struct req *rq);
/* Checks lengths and digests; on success fills @meta's size/etag/checksum fields. */
int upload_finish(struct req *rq, struct be_meta *meta);
int upload_fd(struct req *rq);
const char *upload_path(struct req *rq);
/* The room the cache holds for the body's bytes (cache_stage_reserve()): an adopt of the
 * staged file may take it over (cache_adopt_held()); upload_free() gives back what is left. */
uint64_t *upload_space(struct req *rq);
/* Hands the staged path over (the caller must adopt or unlink it). */
void upload_release_path(struct req *rq);
/* The bytes written into upload_target_fd()'s slot were recorded (the part is the upload's
 * now): upload_free() leaves them. Without it, a body that wrote into a slot gives those bytes
 * back (a hole punched) when it is dropped or freed. */
void upload_keep(struct req *rq);
void upload_free(struct req *rq);
/* Checks that a declared body size could be held: room in the cache for its file (both
 * modes: not more than the whole cache) and what the object layer admits (write-back: the
 * dirty limit, with what others hold now). Nothing is reserved here: every body reserves as
 * its bytes arrive, returned by upload_free(), and a write past either limit fails like this.
 * 0, -S3E_SLOW_DOWN (no room now: retry) or -S3E_ENTITY_TOO_LARGE (more than the whole cache,
 * or than the dirty limit). After upload_begin() or upload_prepare(). A failed upload_write()
 * drops the body at once: the staged file is removed and every reservation given back. */
int upload_admit(struct req *rq);
/* Request headers -> the stored metadata fields (content-type etc, x-amz-meta-*). */
int upload_meta_from_headers(struct req *rq, struct be_meta *m);

#endif
