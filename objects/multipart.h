/*
 * multipart.h: multipart uploads in the object layer's write mode (multipart.c): to the
 * backend (write-through), or staged in the cache directory (write-back, objects/wb_mpu.c) and
 * adopted dirty at Complete. Blocking unless said otherwise: call them on a worker.
 */
#ifndef S3C_MULTIPART_H
#define S3C_MULTIPART_H

#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "lib/range.h"

struct objects;

/* S3's largest part: UploadPart and UploadPartCopy refuse more. */
#define MULTIPART_PART_MAX (5ull << 30)

int multipart_create(struct objects *o, const char *bucket, const char *key,
                     const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX]);
/* Where the body of part @number (@size bytes declared, UINT64_MAX unknown) goes: 1 with *@fd
 * (the caller's; closing it releases the slot's lock) and *@off when it is written in place into
 * the upload's data file (write-back), 0 when it goes to a staged file of its own, or an error
 * (-S3E_NO_SUCH_UPLOAD). Called on an HTTP thread as the headers arrive (short file work). */
int multipart_part_target(struct objects *o, const char *bucket, const char *key,
                          const char *upload_id, unsigned number, uint64_t size, int *fd,
                          uint64_t *off);
/* The body of @part (number, size, ETag and checksum set; digests verified) is in @fd: at
 * *@fd's slot when @inplace (multipart_part_target() said 1), else the file @staged (its path
 * in the cache's staging directory). Records it as the upload's part @part->number.
 * *@space (NULL: none): the room the cache reserved for the body (cache_stage_reserve()); in
 * write-back the stored part's own hold replaces it (then 0). *@staged_taken: 1 when @staged
 * was consumed. */
int multipart_put_part(struct objects *o, const char *bucket, const char *key,
                       const char *upload_id, int fd, const char *staged, int inplace,
                       uint64_t *space, const struct be_part *part, int *staged_taken);
/* UploadPartCopy: part @number of bytes [@off, @off + @len) of the source (@has_range; else
 * all of it), with the x-amz-copy-source-if-* conditions @cond. *@out: the part. */
int multipart_copy_part(struct objects *o, const char *bucket, const char *key,
                        const char *upload_id, unsigned number, const char *src_bucket,
                        const char *src_key, int has_range, uint64_t off, uint64_t len,
                        const struct cond_hdrs *cond, struct be_part *out);
/* CompleteMultipartUpload of @parts[0..@n) as the client listed them: nothing over
 * --max-object-size is made (the upload stays as it was). A repeat of a Complete that
 * succeeded answers the same. *@out: the object. */
int multipart_complete(struct objects *o, const char *bucket, const char *key,
                       const char *upload_id, const struct be_part *parts, size_t n,
                       struct be_meta *out);
int multipart_abort(struct objects *o, const char *bucket, const char *key,
                    const char *upload_id);
/* Parts with numbers above @marker, at most @max; *@out malloc'd (free()). */
int multipart_list_parts(struct objects *o, const char *bucket, const char *key,
                         const char *upload_id, unsigned marker, unsigned max,
                         struct be_part **out, size_t *n, int *truncated);

/* A page of ListMultipartUploads (free with multipart_uploads_free()). */
struct multipart_uploads {
    struct be_upload *uploads;
    size_t n;
    char **prefixes;      /* with a delimiter: the common prefixes */
    size_t n_prefixes;
    int truncated;
    char *next_key;       /* NextKeyMarker (and NextUploadIdMarker when the page ends with an */
    char *next_upload_id; /* upload), when truncated */
};
/* The uploads of @bucket under @prefix after (@key_marker, @id_marker), at most @max uploads
 * and common prefixes: with a @delimiter (NULL or "": none), uploads whose key has it after the
 * prefix roll up into one common prefix, as ListObjects does. */
int multipart_list_uploads(struct objects *o, const char *bucket, const char *prefix,
                           const char *delimiter, const char *key_marker,
                           const char *id_marker, unsigned max, struct multipart_uploads *out);
void multipart_uploads_free(struct multipart_uploads *u);

#endif
