/*
 * wb_mpu.h: multipart uploads staged in the cache directory in --write-mode
 * back (wb_mpu.c). Blocking file work: call from workers. Errors are -S3E_*
 * (-S3E_NO_SUCH_UPLOAD for an unknown or malformed upload ID) or -errno.
 */
#ifndef S3C_WB_MPU_H
#define S3C_WB_MPU_H

#include <stdint.h>
#include "backends/backend.h"

struct objects;

int wb_mpu_create(struct objects *o, const char *bucket, const char *key,
                  const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX]);
/* Moves @staged_path (fsync'd, the part's bytes, MD5 @etag) into the upload as part @number,
 * replacing an earlier upload of that number (the last one recorded is the part). */
int wb_mpu_put_part(struct objects *o, const char *bucket, const char *key,
                    const char *upload_id, unsigned number, const char *staged_path,
                    const char *etag);
/* Where part @number of @size bytes goes: 1 with *@fd (opened on the upload's data file, the
 * caller's; it holds the slot's lock until closed, backends/mpu_slot.h) and *@off when it is
 * written in place; 0 when it is staged as its own file (wb_mpu_put_part()): another attempt
 * holds the slot, an acknowledged part is in it, or the size is not the upload's P; or an
 * error. Nothing of an acknowledged part changes until the attempt is recorded. */
int wb_mpu_part_target(struct objects *o, const char *bucket, const char *key,
                       const char *upload_id, unsigned number, uint64_t size, int *fd,
                       uint64_t *off);
/* After an in-place part was written through @fd: makes it durable and records it. */
int wb_mpu_part_done_inplace(struct objects *o, const char *bucket, const char *key,
                             const char *upload_id, unsigned number, const char *etag, int fd);
int wb_mpu_list_parts(struct objects *o, const char *bucket, const char *key,
                      const char *upload_id, unsigned marker, unsigned max,
                      struct be_part **out, size_t *n, int *truncated);
/* 1 when @upload_id is an upload staged here (its directory exists), else 0. */
int wb_mpu_here(const struct objects *o, const char *upload_id);
int wb_mpu_list_uploads(struct objects *o, const char *bucket, const char *prefix,
                        const char *key_marker, const char *id_marker, unsigned max,
                        struct be_upload **out, size_t *n, int *truncated);
int wb_mpu_abort(struct objects *o, const char *bucket, const char *key, const char *upload_id);
/* Validates @parts (order, ETags, sizes) and concatenates them into @staged (a new fsync'd file
 * in the cache's staging directory, the caller's to adopt or unlink). *@out: the object's
 * metadata (ETag MD5-of-MD5s "-N"). *@parts_bytes: what the upload's parts hold (released from
 * the dirty limit by wb_mpu_finish()). The upload stays until wb_mpu_finish(). 1 (nothing
 * staged, out->etag set) for a repeat of a Complete that wb_mpu_finish() ended, same parts.
 * *@seal: -1, or (when @staged is the upload's data file itself) an fd whose lock keeps
 * UploadPart out of that file: the caller's, closed after adopting and wb_mpu_finish(), or
 * when adopting failed. */
int wb_mpu_complete(struct objects *o, const char *bucket, const char *key,
                    const char *upload_id, const struct be_part *parts, size_t n,
                    struct be_meta *out, char staged[4096], uint64_t *parts_bytes, int *seal);
/* Removes a completed upload's directory and releases its parts from the dirty limit, and
 * from the cache's staged bytes but for the @handed bytes the adopted object took over
 * (cache_adopt_held()); keeps a record of it (@parts as completed, the object @made) that
 * answers a repeated Complete. */
int wb_mpu_finish(struct objects *o, const char *bucket, const char *key,
                  const char *upload_id, const struct be_part *parts, size_t n,
                  const struct be_meta *made, uint64_t handed);
/* Bytes held by staged parts (counted against the dirty limit at start). */
uint64_t wb_mpu_staged_bytes(const struct objects *o);

#endif
