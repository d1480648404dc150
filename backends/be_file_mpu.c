/*
 * be_file_mpu.c: multipart uploads of the POSIX backend. ROOT/.s3cached/uploads/ID/ holds
 * "info" (bucket, key, the object's metadata), the parts of the upload's common size P in
 * "data" at (N-1)*P recorded by "inpl.NNNNN", other parts as "part.NNNNN" (struct be_part in
 * an xattr); ROOT/.s3cached/completed/ID records a completed upload so that a repeated
 * Complete succeeds. The slots and their locks are backends/mpu_slot.c's; Complete's checks
 * and ETag are backends/mpu.c's, shared with write-back staging.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/types.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <linux/openat2.h>
#include <openssl/evp.h>

#include "backend.h"
#include "be_file_priv.h"
#include "lib/arr.h"
#include "lib/conf.h"
#include "lib/s3err.h"
#include "mpu.h"
#include "mpu_slot.h"

/* ------------------------------------------------------------------------------------ */
/* Multipart                                                                             */

/* Removes directory @name under @parent and its plain-file contents. */
void bef_rm_flat_dir(int parent, const char *name)
{
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct dirent *de;
    DIR *d;

    if (fd < 0)
        return;
    d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            (void)unlinkat(dirfd(d), de->d_name, 0);
    closedir(d);
    (void)unlinkat(parent, name, AT_REMOVEDIR);
}

/* Reads a whole small record file @name under @dfd and decodes it. */
static int rec_read_file(int dfd, const char *name, struct rec *r)
{
    char *buf = malloc(BEF_REC_MAX);
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    ssize_t n;
    int rc;

    if (!buf || fd < 0) {
        rc = !buf ? -ENOMEM : -errno;
        if (fd >= 0)
            close(fd);
        free(buf);
        return rc;
    }
    n = read(fd, buf, BEF_REC_MAX);
    rc = n < 0 ? -errno : bef_rec_decode(buf, (size_t)n, r);
    close(fd);
    free(buf);
    return rc;
}

/* Writes @e atomically as @name under @dfd (temp file, fsync, rename). */
static int rec_write_file(struct bef *b, const struct enc *e, int dfd, const char *name)
{
    struct tmpf t = { .fd = -1 };
    int rc = bef_tmp_create(b, &t);

    if (rc < 0)
        return rc;
    if (write(t.fd, e->buf, e->len) != (ssize_t)e->len)
        rc = -EIO;
    else if (fsync(t.fd) < 0)
        rc = -errno;
    else if (renameat(b->tmpfd, t.name, dfd, name) < 0)
        rc = -errno;
    else {
        close(t.fd);
        t.fd = -1;
        fsync(dfd);
    }
    bef_tmp_discard(b, &t);
    return rc;
}

/* Opens upload @id of @bucket/@key: its directory fd and its info record. */
static int upload_open(struct bef *b, const char *bucket, const char *key, const char *id,
                       int *dfd, struct rec *info)
{
    int rc = bef_check_names(bucket, key), fd;

    if (rc < 0)
        return rc;
    if (!mpu_id_ok(id))
        return -S3E_NO_SUCH_UPLOAD;
    fd = openat(b->upfd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? -S3E_NO_SUCH_UPLOAD : -errno;
    rc = rec_read_file(fd, "info", info);
    if (rc < 0 || strcmp(info->bucket, bucket) || strcmp(info->key, key)) {
        close(fd);
        return rc == -ENOMEM ? rc : -S3E_NO_SUCH_UPLOAD;
    }
    *dfd = fd;
    return 0;
}

int be_file_mp_create(struct backend *be, const char *bucket, const char *key,
                             const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX])
{
    struct bef *b = bef_of(be);
    char id[33], stage[48];
    struct enc *e = NULL;
    int fd = -1, rc = bef_check_names(bucket, key);

    if (rc < 0)
        return rc;
    if (!bef_bucket_exists(b, bucket))
        return -S3E_NO_SUCH_BUCKET;
    if ((rc = mpu_id_new(id)))
        return rc;
    snprintf(stage, sizeof(stage), "u.%s", id);
    e = malloc(sizeof(*e));
    if (!e)
        return -ENOMEM;
    bef_enc_init(e);
    bef_enc_str(e, T_BUCKET, bucket);
    bef_enc_str(e, T_KEY, key);
    bef_enc_num(e, T_INIT, s3c_real_ns());
    bef_enc_meta(e, meta);
    if (e->err) {
        rc = -S3E_METADATA_TOO_LARGE;
        goto out;
    }
    /* Staged in tmp/ and renamed whole, so an upload directory always has its info. */
    if (mkdirat(b->tmpfd, stage, 0755) < 0) {
        rc = -errno;
        goto out;
    }
    fd = openat(b->tmpfd, stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    rc = rec_write_file(b, e, fd, "info");
    if (rc == 0 && renameat(b->tmpfd, stage, b->upfd, id) < 0)
        rc = -errno;
    if (rc == 0) {
        fsync(b->upfd);
        snprintf(upload_id, BE_UPLOAD_ID_MAX, "%s", id);
    } else {
        bef_rm_flat_dir(b->tmpfd, stage);
    }
out:
    if (fd >= 0)
        close(fd);
    free(e);
    return rc;
}

static int part_stamp(struct tmpf *t, const struct be_part *p)
{
    struct enc *e = malloc(sizeof(*e));
    int rc = 0;

    if (!e)
        return -ENOMEM;
    bef_enc_init(e);
    bef_enc_num(e, T_NUMBER, p->number);
    bef_enc_str(e, T_ETAG, p->etag);
    bef_enc_num(e, T_SIZE, (int64_t)p->size);
    bef_enc_num(e, T_MTIME, p->mtime_ns);
    bef_enc_str(e, T_CKALGO, p->checksum_algo);
    bef_enc_str(e, T_CK, p->checksum);
    if (fsetxattr(t->fd, BEF_PART_XATTR, e->buf, e->len, 0) < 0)
        rc = -errno;
    else if (fsync(t->fd) < 0)
        rc = -errno;
    free(e);
    return rc;
}

/* Records part @number: the finished temp file @t (its xattr stamped) becomes "inpl.NNNNN"
 * (@inplace: its bytes are in the data file's slot) or "part.NNNNN", the other name of the
 * number goes, and the directory is synced, all under the number's publication lock (byte N of
 * "info", mpu_slot.h), so the last attempt to get here is the part. Without locks on this file
 * system, the same steps unordered. */
static int part_publish(struct bef *b, int udfd, struct tmpf *t, unsigned number, int inplace)
{
    char name[24], other[24];
    int lfd = openat(udfd, "info", O_RDWR | O_CLOEXEC | O_NOFOLLOW), rc = 0;

    snprintf(name, sizeof(name), "%s.%05u", inplace ? "inpl" : "part", number);
    snprintf(other, sizeof(other), "%s.%05u", inplace ? "part" : "inpl", number);
    if (lfd >= 0)
        (void)mpu_slot_publish_lock(lfd, number);
    if (renameat(b->tmpfd, t->name, udfd, name) < 0) {
        rc = errno == ENOENT ? -S3E_NO_SUCH_UPLOAD : -errno;
    } else {
        close(t->fd);
        t->fd = -1;
        (void)unlinkat(udfd, other, 0);
        if (fsync(udfd) < 0)
            rc = -errno;
    }
    if (lfd >= 0)
        close(lfd); /* and the lock with it */
    return rc;
}

/* In-place parts (backends/mpu_slot.h). Clients upload parts of one size P (but the last): the
 * first part of at least BE_MIN_PART_SIZE fixes P (an xattr of the upload's "data" file), and a
 * part of exactly P bytes is copied straight into "data" at (N-1)*P, then recorded by
 * "inpl.NNNNN" (an empty file with the part's xattr) once data is synced, when its attempt holds
 * slot N's lock and no acknowledged part N is in the slot. Any other part (another size, a
 * second attempt at once, a re-upload of a part in bef_place) is its own file "part.NNNNN".
 * Completing parts 1..n, each in place or of P bytes (copied into its slot), makes "data" the
 * object: in the common case of one attempt per part nothing is copied a second time (on a
 * network file system, no second pass over a checkpoint). Placing one name of a number removes
 * the other; should a crash leave both, the newer counts. */

/* P of the data file @fd: 0 with *@psize, or -1. */
static int data_psize(int fd, uint64_t *psize)
{
    char v[24];
    ssize_t n = fgetxattr(fd, BEF_PSIZE_XATTR, v, sizeof(v) - 1);
    char *end;

    if (n <= 0)
        return -1;
    v[n] = '\0';
    *psize = strtoull(v, &end, 10);
    return *end || *psize < BE_MIN_PART_SIZE ? -1 : 0;
}

/* The upload's data file for a part of @size, read-write: 0 with *@fd and *@psize, or -1 when
 * the part does not go in bef_place (small, another size, or "data" still being made). */
static int data_open(int udfd, uint64_t size, int *fd, uint64_t *psize)
{
    int f;

    if (size < BE_MIN_PART_SIZE)
        return -1;
    f = openat(udfd, "data", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (f >= 0) { /* the first: P is this size, durable before a marker relies on it */
        char v[24];
        int l = snprintf(v, sizeof(v), "%" PRIu64, size);
        if (fsetxattr(f, BEF_PSIZE_XATTR, v, (size_t)l, 0) < 0 || fsync(f) < 0 ||
            fsync(udfd) < 0) {
            close(f);
            return -1;
        }
        *fd = f;
        *psize = size;
        return 0;
    }
    if (errno != EEXIST)
        return -1;
    f = openat(udfd, "data", O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (f < 0)
        return -1;
    if (data_psize(f, psize) < 0 || *psize != size) {
        close(f);
        return -1;
    }
    *fd = f;
    return 0;
}

/* Whether @dfd, holding slot @number's lock, may write the slot: "data" of @udfd is still this
 * file and still has its P (a Complete that made it the object dropped it), and no part
 * @number is in bef_place (only a holder of the slot's lock records one). */
static int slot_free(int udfd, int dfd, unsigned number, uint64_t psize)
{
    struct stat a, d;
    char name[24];
    uint64_t now;

    snprintf(name, sizeof(name), "inpl.%05u", number);
    return fstat(dfd, &d) == 0 && fstatat(udfd, "data", &a, AT_SYMLINK_NOFOLLOW) == 0 &&
           a.st_ino == d.st_ino && a.st_dev == d.st_dev && data_psize(dfd, &now) == 0 &&
           now == psize && faccessat(udfd, name, F_OK, AT_SYMLINK_NOFOLLOW) < 0 &&
           errno == ENOENT;
}

/* Part @p (size and number set) from @src into slot N of the upload's data file: 0 once its
 * record is placed, 1 when it does not go in bef_place (then nothing was written there), or an
 * error (the slot's bytes are then no part's: the records are as they were). */
static int part_put_inplace(struct bef *b, int udfd, int src, struct be_part *p)
{
    struct tmpf t = { .fd = -1 };
    char name[24];
    uint64_t psize;
    struct stat st;
    int dfd, rc;

    snprintf(name, sizeof(name), "inpl.%05u", p->number);
    if (p->size < BE_MIN_PART_SIZE || faccessat(udfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
        return 1; /* a part is in the slot: a re-upload gets a file of its own */
    if (data_open(udfd, p->size, &dfd, &psize) < 0)
        return 1;
    if (mpu_slot_lock(dfd, p->number, psize) < 0 || !slot_free(udfd, dfd, p->number, psize)) {
        close(dfd); /* another attempt writes the slot, or a Complete holds the file */
        return 1;
    }
    rc = bef_copy_range_to(src, 0, dfd, (uint64_t)(p->number - 1) * psize, p->size);
    if (rc == -EIO)
        rc = -S3E_INCOMPLETE_BODY;
    if (rc == 0 && fdatasync(dfd) < 0)
        rc = -errno;
    if (rc == 0)
        rc = bef_tmp_create(b, &t);
    if (rc == 0 && fstat(t.fd, &st) < 0)
        rc = -errno;
    if (rc == 0) {
        p->mtime_ns = ts_ns(&st.st_mtim);
        rc = part_stamp(&t, p);
    }
    if (rc == 0)
        rc = part_publish(b, udfd, &t, p->number, 1);
    close(dfd); /* the slot's lock goes after the record is placed */
    bef_tmp_discard(b, &t);
    return rc;
}

int be_file_mp_put_part(struct backend *be, const char *bucket, const char *key,
                               const char *upload_id, int fd, const struct be_part *part)
{
    struct bef *b = bef_of(be);
    struct tmpf t = { .fd = -1 };
    struct rec *info = malloc(sizeof(*info));
    struct be_part p = *part;
    struct stat st;
    int udfd = -1, rc;

    if (!info)
        return -ENOMEM;
    if (p.number < 1 || p.number > BE_MAX_PARTS) {
        rc = -S3E_INVALID_ARGUMENT;
        goto out;
    }
    rc = upload_open(b, bucket, key, upload_id, &udfd, info);
    if (rc < 0)
        goto out;
    if ((rc = part_put_inplace(b, udfd, fd, &p)) <= 0)
        goto out;
    rc = bef_tmp_create(b, &t);
    if (rc < 0)
        goto out;
    if (p.size > 0 && (rc = bef_copy_range(fd, 0, t.fd, p.size)) < 0) {
        if (rc == -EIO)
            rc = -S3E_INCOMPLETE_BODY;
        goto out;
    }
    if (fstat(t.fd, &st) < 0) {
        rc = -errno;
        goto out;
    }
    p.mtime_ns = ts_ns(&st.st_mtim);
    rc = part_stamp(&t, &p);
    if (rc == 0)
        rc = part_publish(b, udfd, &t, p.number, 0);
out:
    bef_tmp_discard(b, &t);
    if (udfd >= 0)
        close(udfd);
    free(info);
    return rc;
}

int be_file_mp_copy_part(struct backend *be, const char *bucket, const char *key,
                                const char *upload_id, unsigned part_number,
                                const char *src_bucket, const char *src_key, uint64_t off,
                                uint64_t len, struct be_part *out)
{
    struct bef *b = bef_of(be);
    struct tmpf t = { .fd = -1 };
    struct rec *info = malloc(sizeof(*info));
    struct be_meta *sm = malloc(sizeof(*sm));
    struct be_part p;
    struct stat st;
    int udfd = -1, sfd = -1, rc;

    if (!info || !sm) {
        rc = -ENOMEM;
        goto out;
    }
    if (part_number < 1 || part_number > BE_MAX_PARTS) {
        rc = -S3E_INVALID_ARGUMENT;
        goto out;
    }
    rc = upload_open(b, bucket, key, upload_id, &udfd, info);
    if (rc < 0)
        goto out;
    rc = bef_obj_open(b, src_bucket, src_key, &sfd, sm);
    if (rc < 0)
        goto out;
    if (len == UINT64_MAX && off <= sm->size)
        len = sm->size - off;
    if (off > sm->size || len > sm->size - off) {
        rc = -S3E_INVALID_RANGE;
        goto out;
    }
    memset(&p, 0, sizeof(p));
    p.number = part_number;
    p.size = len;
    rc = bef_tmp_create(b, &t);
    if (rc < 0)
        goto out;
    if (len > 0 && (rc = bef_copy_range(sfd, off, t.fd, len)) < 0)
        goto out;
    rc = mpu_md5_range(t.fd, 0, len, p.etag); /* the copy, so the ETag matches the stored bytes */
    if (rc < 0)
        goto out;
    if (fstat(t.fd, &st) < 0) {
        rc = -errno;
        goto out;
    }
    p.mtime_ns = ts_ns(&st.st_mtim);
    rc = part_stamp(&t, &p);
    if (rc == 0)
        rc = part_publish(b, udfd, &t, p.number, 0);
    if (rc == 0 && out)
        *out = p;
out:
    bef_tmp_discard(b, &t);
    if (udfd >= 0)
        close(udfd);
    if (sfd >= 0)
        close(sfd);
    free(info);
    free(sm);
    return rc;
}

/* Reads the part record file @name (part.N or inpl.N) of @udfd: an fd on it (optional) and
 * its info. */
static int part_read(int udfd, const char *name, unsigned number, int *fdp, struct be_part *p)
{
    char buf[1024];
    struct rec *r;
    ssize_t n;
    int fd, rc = 0;

    fd = openat(udfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? -S3E_INVALID_PART : -errno;
    n = fgetxattr(fd, BEF_PART_XATTR, buf, sizeof(buf));
    r = malloc(sizeof(*r));
    if (!r)
        rc = -ENOMEM;
    else if (n <= 0 || bef_rec_decode(buf, (size_t)n, r) < 0)
        rc = -S3E_INVALID_PART;
    if (rc == 0) {
        memset(p, 0, sizeof(*p));
        p->number = number;
        p->size = r->m.size;
        p->mtime_ns = r->m.mtime_ns;
        memcpy(p->etag, r->m.etag, sizeof(p->etag));
        memcpy(p->checksum_algo, r->m.checksum_algo, sizeof(p->checksum_algo));
        memcpy(p->checksum, r->m.checksum, sizeof(p->checksum));
    }
    free(r);
    if (rc == 0 && fdp)
        *fdp = fd;
    else
        close(fd);
    return rc;
}

/* Reads part @number of the upload directory @udfd: its info, and (optional) an fd on its bytes,
 * which start at *@offp (the data file for a part in place: *@inplace). */
static int part_open(int udfd, unsigned number, int *fdp, uint64_t *offp, int *inplace,
                     struct be_part *p)
{
    char name[24];
    struct be_part own, in;
    uint64_t psize;
    int ofd = -1, rc_own, rc_in, fd;

    snprintf(name, sizeof(name), "part.%05u", number);
    rc_own = part_read(udfd, name, number, fdp ? &ofd : NULL, &own);
    snprintf(name, sizeof(name), "inpl.%05u", number);
    rc_in = part_read(udfd, name, number, NULL, &in);
    if (rc_in < 0 || (rc_own == 0 && own.mtime_ns >= in.mtime_ns)) {
        if (rc_own == 0) {
            *p = own;
            if (fdp)
                *fdp = ofd;
            if (offp)
                *offp = 0;
            if (inplace)
                *inplace = 0;
        }
        return rc_own;
    }
    if (ofd >= 0)
        close(ofd);
    fd = openat(udfd, "data", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? -S3E_INVALID_PART : -errno;
    if (data_psize(fd, &psize) < 0 || in.size != psize) {
        close(fd);
        return -S3E_INVALID_PART;
    }
    *p = in;
    if (offp)
        *offp = (uint64_t)(number - 1) * psize;
    if (inplace)
        *inplace = 1;
    if (fdp)
        *fdp = fd;
    else
        close(fd);
    return 0;
}

/* A repeated Complete of an upload that is gone: answer from its completed record. */
static int complete_again(struct bef *b, const char *bucket, const char *key, const char *id,
                          const char *phash, struct be_meta *out)
{
    struct rec *r = malloc(sizeof(*r));
    int rc;

    if (!r)
        return -ENOMEM;
    rc = rec_read_file(b->donefd, id, r);
    if (rc < 0 || strcmp(r->bucket, bucket) || strcmp(r->key, key))
        rc = -S3E_NO_SUCH_UPLOAD;
    else if (strcmp(r->phash, phash) != 0)
        rc = -S3E_INVALID_PART;
    else if (out)
        *out = r->m;
    free(r);
    return rc;
}

/* The highest number of a part in place in @udfd (0: none; bytes of parts above the n of a
 * Complete would be cut off by making the data file the object), UINT_MAX when unknown. */
static unsigned inplace_max(int udfd)
{
    int fd = dup(udfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;
    unsigned max = 0;

    if (!d) {
        if (fd >= 0)
            close(fd);
        return UINT_MAX;
    }
    rewinddir(d);
    while ((de = readdir(d))) {
        unsigned long v = strncmp(de->d_name, "inpl.", 5) ? 0 : strtoul(de->d_name + 5, NULL, 10);
        if (v > max && v <= BE_MAX_PARTS)
            max = (unsigned)v;
    }
    closedir(d);
    return max;
}

/* Part @want of the upload @udfd, as a Complete named it: an fd on its bytes (from *@offp; the
 * data file for a part in bef_place, *@inplace) and its record, -S3E_INVALID_PART when the part
 * under that number is no longer the one named (replaced since it was looked at). */
static int part_open_named(int udfd, const struct be_part *want, int *fdp, uint64_t *offp,
                           int *inplace, struct be_part *p)
{
    int rc = part_open(udfd, want->number, fdp, offp, inplace, p);

    if (rc == 0 && !mpu_etag_match(want->etag, p->etag)) {
        close(*fdp);
        *fdp = -1;
        rc = -S3E_INVALID_PART;
    }
    return rc;
}

/* Makes the data file @dfd (whose every slot the caller holds locked) of an upload whose
 * parts @parts[0..@n) are 1..n, as @use says each in place or of @psize bytes, the object:
 * parts with files of their own copied into their slots (the ones in place are the bytes
 * looked at: nobody can write a slot meanwhile), the file cut to size, a second name for it
 * in tmp/ as *@t (placing consumes that name; a failure leaves the upload whole for a retry). */
static int complete_inplace(struct bef *b, int udfd, int dfd, const struct be_part *parts,
                            const struct mpu_slot_use *use, size_t n, uint64_t psize,
                            struct tmpf *t)
{
    uint64_t end = (uint64_t)(n - 1) * psize + use[n - 1].size;
    int rc = 0;

    for (size_t i = 0; i < n && rc == 0; i++) {
        struct be_part p;
        uint64_t off;
        int inplace = 0, pfd = -1;
        if (use[i].inplace)
            continue;
        rc = part_open_named(udfd, &parts[i], &pfd, &off, &inplace, &p);
        if (rc == 0 && (inplace || p.size != use[i].size))
            rc = -S3E_INVALID_PART; /* replaced since it was looked at */
        if (rc == 0 && p.size)
            rc = bef_copy_range_to(pfd, off, dfd, (uint64_t)i * psize, p.size);
        if (pfd >= 0)
            close(pfd);
    }
    if (rc == 0 && ftruncate(dfd, (off_t)end) < 0)
        rc = -errno;
    if (rc < 0)
        return rc;
    t->fd = dup(dfd);
    if (t->fd < 0)
        return -errno;
    for (int i = 0; i < 8; i++) { /* a random name, as bef_tmp_create() gives */
        memcpy(t->name, "t.", 2);
        bef_random_hex(t->name + 2, 12);
        if (linkat(udfd, "data", b->tmpfd, t->name, 0) == 0)
            return 0;
        if (errno != EEXIST) {
            rc = -errno;
            break;
        }
    }
    close(t->fd);
    t->fd = -1;
    return rc ? rc : -EEXIST;
}

/* Copies the parts @parts[0..@n) of the upload @udfd one after the other into the new temp file
 * *@t. @verify: the slots may be written meanwhile (the caller could not lock the data file),
 * so the bytes copied from a slot must have the part's MD5, else -S3E_INVALID_PART. */
static int complete_copy(struct bef *b, int udfd, const struct be_part *parts, size_t n,
                         int verify, struct tmpf *t)
{
    uint64_t at = 0;
    int rc = bef_tmp_create(b, t);

    for (size_t i = 0; i < n && rc == 0; i++) {
        struct be_part p;
        uint64_t off;
        int inplace = 0, pfd = -1;
        char md5[33];
        rc = part_open_named(udfd, &parts[i], &pfd, &off, &inplace, &p);
        if (rc == 0 && p.size)
            rc = bef_copy_range(pfd, off, t->fd, p.size);
        if (pfd >= 0)
            close(pfd);
        if (rc == 0 && verify && inplace && (rc = mpu_md5_range(t->fd, at, p.size, md5)) == 0 &&
            strcmp(md5, p.etag))
            rc = -S3E_INVALID_PART;
        at += p.size;
    }
    return rc;
}

/* mpu_part_f over the upload directory (@cls an int *): the part's newer record. */
static int complete_part(void *cls, unsigned number, const char *etag, struct mpu_part *out)
{
    struct be_part p;
    int inplace = 0, rc = part_open(*(int *)cls, number, NULL, NULL, &inplace, &p);

    if (rc < 0)
        return rc;
    out->number = number;
    out->size = p.size;
    out->inplace = inplace;
    memcpy(out->etag, p.etag, sizeof(out->etag));
    return 0;
}

int be_file_mp_complete(struct backend *be, const char *bucket, const char *key,
                        const char *upload_id, const struct be_part *parts, size_t n,
                        struct be_meta *out)
{
    struct bef *b = bef_of(be);
    struct tmpf t = { .fd = -1 };
    struct rec *info = malloc(sizeof(*info));
    struct enc *e = malloc(sizeof(*e));
    struct mpu_plan plan = {0};
    char phash[33], gone[48];
    int udfd = -1, dfd = -1, rc;

    if (!info || !e) {
        rc = -ENOMEM;
        goto out;
    }
    mpu_done_sweep(b->donefd, &b->last_sweep_ns);
    if (n == 0 || n > BE_MAX_PARTS) {
        rc = -S3E_MALFORMED_XML;
        goto out;
    }
    rc = be_parts_hash(parts, n, phash);
    if (rc < 0)
        goto out;
    rc = upload_open(b, bucket, key, upload_id, &udfd, info);
    if (rc == -S3E_NO_SUCH_UPLOAD && mpu_id_ok(upload_id)) {
        rc = complete_again(b, bucket, key, upload_id, phash, out);
        goto out;
    }
    if (rc < 0)
        goto out;
    /* Holding the whole data file keeps every attempt out of its slots until the end (the file
     * may become the object); without it (an attempt is writing a slot), the parts are copied. */
    uint64_t psize = 0;
    dfd = openat(udfd, "data", O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    int whole = dfd >= 0 && mpu_slot_lock_all(dfd) == 0;
    if (dfd >= 0 && data_psize(dfd, &psize) < 0)
        psize = 0;
    /* Validate every part before writing anything. */
    if ((rc = mpu_complete_plan(parts, n, complete_part, &udfd, &plan)) < 0)
        goto out;
    int fast = whole && mpu_slot_plan(plan.use, n, psize, inplace_max(udfd));
    if (fast)
        rc = complete_inplace(b, udfd, dfd, parts, plan.use, n, psize, &t);
    else
        rc = complete_copy(b, udfd, parts, n, !whole, &t);
    if (rc < 0)
        goto out;
    info->m.parts_count = (uint32_t)n;
    info->m.part_size = plan.part_size;
    info->m.checksum_algo[0] = info->m.checksum[0] = '\0';
    memcpy(info->m.etag, plan.etag, sizeof(info->m.etag));
    rc = bef_tmp_finish(&t, &info->m);
    if (rc == 0)
        rc = bef_place(b, bucket, key, &t);
    if (rc < 0)
        goto out;
    if (fast) /* the data file is the object: no attempt may take it for the upload's again */
        (void)fremovexattr(dfd, BEF_PSIZE_XATTR);
    /* The record for a repeated Complete, then the upload goes away. */
    bef_enc_init(e);
    bef_enc_str(e, T_BUCKET, bucket);
    bef_enc_str(e, T_KEY, key);
    bef_enc_str(e, T_PHASH, phash);
    bef_enc_num(e, T_SIZE, (int64_t)info->m.size);
    bef_enc_num(e, T_MTIME, info->m.mtime_ns);
    bef_enc_meta(e, &info->m);
    if (!e->err)
        (void)rec_write_file(b, e, b->donefd, upload_id);
    snprintf(gone, sizeof(gone), "x.%s", upload_id);
    if (renameat(b->upfd, upload_id, b->tmpfd, gone) == 0)
        bef_rm_flat_dir(b->tmpfd, gone);
    if (out)
        *out = info->m;
out:
    bef_tmp_discard(b, &t);
    if (dfd >= 0)
        close(dfd); /* the data file's lock goes once the upload is gone */
    if (udfd >= 0)
        close(udfd);
    mpu_plan_free(&plan);
    free(info);
    free(e);
    return rc;
}

int be_file_mp_abort(struct backend *be, const char *bucket, const char *key,
                            const char *upload_id)
{
    struct bef *b = bef_of(be);
    struct rec *info = malloc(sizeof(*info));
    char gone[48];
    int udfd = -1, rc;

    if (!info)
        return -ENOMEM;
    rc = upload_open(b, bucket, key, upload_id, &udfd, info);
    free(info);
    if (rc < 0)
        return rc;
    close(udfd);
    /* Renamed away first: a concurrent UploadPart then fails with NoSuchUpload. */
    snprintf(gone, sizeof(gone), "x.%s", upload_id);
    if (renameat(b->upfd, upload_id, b->tmpfd, gone) < 0)
        return errno == ENOENT ? -S3E_NO_SUCH_UPLOAD : -errno;
    bef_rm_flat_dir(b->tmpfd, gone);
    return 0;
}

static int uint_cmp(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

int be_file_mp_list_parts(struct backend *be, const char *bucket, const char *key,
                                 const char *upload_id, unsigned marker, unsigned max,
                                 struct be_part **out, size_t *n, int *truncated)
{
    struct bef *b = bef_of(be);
    struct rec *info = malloc(sizeof(*info));
    unsigned *nums = NULL;
    size_t cnt = 0, cap = 0, k = 0;
    struct be_part *v = NULL;
    struct dirent *de;
    DIR *d = NULL;
    int udfd = -1, rc;

    *out = NULL;
    *n = 0;
    *truncated = 0;
    if (!info)
        return -ENOMEM;
    rc = upload_open(b, bucket, key, upload_id, &udfd, info);
    if (rc < 0)
        goto out;
    d = fdopendir(dup(udfd));
    if (!d) {
        rc = -errno;
        goto out;
    }
    while ((de = readdir(d))) {
        char *end;
        unsigned long num;
        if (strncmp(de->d_name, "part.", 5) != 0 && strncmp(de->d_name, "inpl.", 5) != 0)
            continue;
        num = strtoul(de->d_name + 5, &end, 10);
        if (*end || num <= marker || num > BE_MAX_PARTS)
            continue;
        if (ARR_GROW(nums, cnt, 1, cap)) {
            rc = -ENOMEM;
            goto out;
        }
        nums[cnt++] = (unsigned)num;
    }
    if (cnt > 1)
        qsort(nums, cnt, sizeof(*nums), uint_cmp);
    size_t uniq = 0; /* a number may have both names for a moment */
    for (size_t i = 0; i < cnt; i++)
        if (!uniq || nums[uniq - 1] != nums[i])
            nums[uniq++] = nums[i];
    cnt = uniq;
    if (cnt > max) {
        cnt = max;
        *truncated = 1;
    }
    v = calloc(cnt ? cnt : 1, sizeof(*v));
    if (!v) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < cnt; i++)
        if (part_open(udfd, nums[i], NULL, NULL, NULL, &v[k]) == 0)
            k++;
    *out = v;
    *n = k;
    v = NULL;
out:
    if (d)
        closedir(d);
    if (udfd >= 0)
        close(udfd);
    free(v);
    free(nums);
    free(info);
    return rc;
}

int be_file_mp_list_uploads(struct backend *be, const char *bucket, const char *prefix,
                                   const char *key_marker, const char *upload_id_marker,
                                   unsigned max, struct be_upload **out, size_t *n,
                                   int *truncated)
{
    struct bef *b = bef_of(be);
    struct rec *r = malloc(sizeof(*r));
    struct be_upload *v = NULL;
    size_t cnt = 0, cap = 0, plen = prefix ? strlen(prefix) : 0;
    struct dirent *de;
    DIR *d = NULL;
    int fd, rc = backend_check_bucket_name(bucket);

    *out = NULL;
    *n = 0;
    *truncated = 0;
    if (!r)
        return -ENOMEM;
    if (rc < 0)
        goto out;
    if (!bef_bucket_exists(b, bucket)) {
        rc = -S3E_NO_SUCH_BUCKET;
        goto out;
    }
    fd = openat(b->upfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || !(d = fdopendir(fd))) {
        rc = -errno;
        if (fd >= 0)
            close(fd);
        goto out;
    }
    while ((de = readdir(d))) {
        int ufd;
        if (!mpu_id_ok(de->d_name))
            continue;
        ufd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (ufd < 0)
            continue;
        rc = rec_read_file(ufd, "info", r);
        close(ufd);
        if (rc < 0) {
            rc = 0;
            continue;
        }
        if (strcmp(r->bucket, bucket) || strncmp(r->key, prefix ? prefix : "", plen))
            continue;
        if (ARR_GROW(v, cnt, 1, cap)) {
            rc = -ENOMEM;
            goto out;
        }
        v[cnt].key = strdup(r->key);
        if (!v[cnt].key) {
            rc = -ENOMEM;
            goto out;
        }
        memcpy(v[cnt].upload_id, de->d_name, 33); /* checked: 32 hex digits */
        v[cnt].initiated_ns = r->initiated_ns;
        cnt++;
    }
    mpu_uploads_page(v, &cnt, key_marker, upload_id_marker, max, truncated);
    *out = v;
    *n = cnt;
    v = NULL;
    cnt = 0;
out:
    if (d)
        closedir(d);
    be_uploads_free(v, cnt);
    free(r);
    return rc;
}

