/*
 * mpu.h: multipart uploads as every store of them treats them (mpu.c), shared by the POSIX
 * backend (be_file_mpu.c) and write-back staging (objects/wb_mpu.c): upload IDs, the checks
 * and the ETag of a Complete, the MD5 that checks a slot copied while it could change, the
 * order and pages of upload listings, and how long a completed upload answers a repeated
 * Complete. The in-place layout and its locks are mpu_slot.h's. Each store keeps its own
 * records of uploads and parts: xattrs in the POSIX store, like its objects; names and small
 * files in the cache directory, which needs no xattrs.
 */
#ifndef S3C_MPU_H
#define S3C_MPU_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "mpu_slot.h"

#define MPU_ID_LEN 32                            /* upload IDs: 32 lower-case hex digits */
#define MPU_DONE_TTL_NS (3600LL * 1000000000)   /* a completed upload answers a repeat this long */
#define MPU_DONE_SWEEP_NS (600LL * 1000000000)  /* old records are looked for this often */

/* Whether @id is an upload ID (checked before it names a path). */
int mpu_id_ok(const char *id);
/* A new random upload ID. 0 or -EIO. */
int mpu_id_new(char id[MPU_ID_LEN + 1]);
/* Whether the ETag @client sent (quotes optional, any case) is @ours. */
int mpu_etag_match(const char *client, const char *ours);
/* The hex MD5 of @len bytes of @fd from @off: 0, -EIO when the file is shorter, -errno. */
int mpu_md5_range(int fd, uint64_t off, uint64_t len, char out[33]);

/* A part as its upload holds it. */
struct mpu_part {
    unsigned number;
    char etag[BE_ETAG_MAX]; /* the MD5 of its bytes, hex */
    uint64_t size;
    int inplace;            /* its bytes are in the data file's slot (mpu_slot.h) */
};
/* The store's record of part @number with the ETag @etag (the one a Complete names; a store that
 * keeps one record per number may look only at the number): 0 with *@out, -S3E_INVALID_PART
 * when there is none, or an error. */
typedef int mpu_part_f(void *cls, unsigned number, const char *etag, struct mpu_part *out);

/* What a Complete makes. */
struct mpu_plan {
    size_t n;
    struct mpu_part *parts;   /* [n]: each part named, as the upload holds it */
    struct mpu_slot_use *use; /* [n]: the same for mpu_slot_plan() */
    uint64_t total;           /* the object's size */
    uint64_t part_size;       /* every part's size but the last's when they are equal and the
                               * last is not larger (GET ?partNumber=N), else 0 */
    char etag[BE_ETAG_MAX];   /* the MD5 of the parts' MD5s, then "-n" */
};
/* Checks a Complete's list @want[0..@n) (1 <= @n <= BE_MAX_PARTS) against the upload: ascending
 * numbers (else -S3E_INVALID_PART_ORDER, before any part is looked up), each part held with the
 * ETag named (-S3E_INVALID_PART), each but the last of at least BE_MIN_PART_SIZE
 * (-S3E_ENTITY_TOO_SMALL). 0 with *@out (free with mpu_plan_free()), the error of @part, or
 * -ENOMEM. Writes nothing. */
int mpu_complete_plan(const struct be_part *want, size_t n, mpu_part_f *part, void *cls,
                      struct mpu_plan *out);
void mpu_plan_free(struct mpu_plan *p);

/* A page of a listing of uploads: sorts @u[0..*@n) by (key, upload ID), drops those at or
 * before (@key_marker, @id_marker) (NULL or "": none) and keeps at most @max (*@truncated when
 * more followed). The entries dropped are freed; *@n is the page's length. */
void mpu_uploads_page(struct be_upload *u, size_t *n, const char *key_marker,
                      const char *id_marker, unsigned max, int *truncated);
/* Removes the entries of directory @dirfd (records of completed uploads) older than
 * MPU_DONE_TTL_NS, at most once per MPU_DONE_SWEEP_NS (*@last_ns: when the store last did). */
void mpu_done_sweep(int dirfd, int64_t *last_ns);

#endif
