/*
 * be_file.c: the POSIX directory backend, file:///abs/dir. Each subdirectory of the
 * root is a bucket, key "a/b/c" is the file ROOT/bucket/a/b/c and a key ending in '/'
 * is the marker file "dir/.s3cached-dir". A key "a" beside keys "a/..." (S3 keys are
 * flat, paths a tree) is the file "a/.s3cached-obj" inside directory "a": the first write
 * under "a/" nests an existing file "a" there (link, then one renameat2 RENAME_EXCHANGE of
 * a directory holding the link with the file, so a reader always finds one of the two),
 * and a write of "a" while directory "a" exists goes straight to that name. Metadata
 * rides in the "user.s3cached" xattr of the object file. Internal state lives in
 * ROOT/.s3cached/ (never a bucket):
 *   tmp/        temp files of writes in progress; rename()d into place when complete
 *   uploads/ID/ multipart uploads: "info", parts of the upload's common size P in "data" at
 *               (N-1)*P marked by inpl.NNNNN, other parts as part.NNNNN (be_part in an xattr)
 *   completed/ID  records of completed uploads, so that a repeated Complete succeeds
 * Listing keeps a bounded LRU cache of sorted directory entries, validated by the
 * directory's inode and mtime, so a page of a huge directory is a binary search.
 *
 * Symlinks: objects are written only through real directories (O_NOFOLLOW on every
 * component), so a symlink in the store never lets a write escape the root. Reads follow
 * symlinks other tools placed as long as the path stays under the root (openat2
 * RESOLVE_BENEATH); with --follow-symlinks wherever they lead, and a file reached outside
 * the root never gets an xattr (its ETag is remembered in memory). A DELETE never goes
 * through a symlinked directory: it unlinks the key's own entry or refuses. Listing shows
 * symlinks to files (those that reads would serve) and walks symlinked directories only with
 * --follow-symlinks, each loop once.
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
#include "lib/fileio.h"
#include "lib/s3err.h"
#include "mpu_slot.h"

/* ------------------------------------------------------------------------------------ */
/* Reading objects                                                                       */

/* The remembered ETag of @st (a file outside the store), or 0. */
static int memo_get(struct bef *b, const struct stat *st, char etag[33])
{
    struct memo *me;
    int hit = 0;

    pthread_mutex_lock(&b->memo_mu);
    if (b->memo) {
        me = &b->memo[((uint64_t)st->st_dev * 31 + st->st_ino) % BEF_MEMO_SLOTS];
        hit = me->dev == st->st_dev && me->ino == st->st_ino &&
              me->size == (uint64_t)st->st_size && me->mtime_ns == ts_ns(&st->st_mtim) &&
              me->ctime_ns == ts_ns(&st->st_ctim) && me->etag[0];
        if (hit)
            memcpy(etag, me->etag, 33);
    }
    pthread_mutex_unlock(&b->memo_mu);
    return hit;
}

static void memo_put(struct bef *b, const struct stat *st, const char etag[33])
{
    struct memo *me;

    pthread_mutex_lock(&b->memo_mu);
    if (!b->memo)
        b->memo = calloc(BEF_MEMO_SLOTS, sizeof(*b->memo));
    if (b->memo) {
        me = &b->memo[((uint64_t)st->st_dev * 31 + st->st_ino) % BEF_MEMO_SLOTS];
        me->dev = st->st_dev;
        me->ino = st->st_ino;
        me->size = (uint64_t)st->st_size;
        me->mtime_ns = ts_ns(&st->st_mtim);
        me->ctime_ns = ts_ns(&st->st_ctim);
        memcpy(me->etag, etag, 33);
    }
    pthread_mutex_unlock(&b->memo_mu);
}

/* Metadata of the open object file @fd: the xattr when it still describes the file,
 * otherwise computed (MD5 ETag, guessed type) and remembered: in the file's xattr when
 * possible, in memory only when the file lies @outside the store (reached through a symlink
 * with --follow-symlinks), which is never written to. */
static int meta_load(struct bef *b, int fd, const struct stat *st, const char *key,
                     struct be_meta *m, int outside)
{
    char buf[BEF_REC_MAX];
    ssize_t n = fgetxattr(fd, BEF_XATTR, buf, sizeof(buf));
    struct rec *r = NULL;
    struct stat st2;
    int rc;

    if (n > 0) {
        r = malloc(sizeof(*r));
        if (!r)
            return -ENOMEM;
        if (bef_rec_decode(buf, (size_t)n, r) == 0 && r->have_size && r->have_mtime &&
            r->m.size == (uint64_t)st->st_size && r->m.mtime_ns == ts_ns(&st->st_mtim) &&
            r->m.etag[0]) {
            *m = r->m;
            free(r);
            return 0;
        }
        free(r);
    }
    memset(m, 0, sizeof(*m));
    m->size = (uint64_t)st->st_size;
    m->mtime_ns = ts_ns(&st->st_mtim);
    snprintf(m->content_type, sizeof(m->content_type), "%s", bef_guess_type(key));
    if (outside && memo_get(b, st, m->etag))
        return 0;
    rc = bef_md5_fd(fd, 0, m->size, m->etag);
    if (rc < 0)
        return rc;
    if (fstat(fd, &st2) == 0 && st2.st_size == st->st_size &&
        ts_ns(&st2.st_mtim) == ts_ns(&st->st_mtim)) {
        struct enc *e;
        if (outside) {
            memo_put(b, &st2, m->etag);
            return 0;
        }
        e = malloc(sizeof(*e));
        if (e) {
            bef_enc_init(e);
            bef_enc_num(e, T_SIZE, (int64_t)m->size);
            bef_enc_num(e, T_MTIME, m->mtime_ns);
            bef_enc_meta(e, m);
            if (!e->err)
                (void)fsetxattr(fd, BEF_XATTR, e->buf, e->len, 0); /* best effort */
            free(e);
        }
    }
    return 0;
}

/* Opens @path (relative to the root) component by component, following no symlink: -ELOOP
 * at one. For kernels without openat2(). */
int bef_open_nofollow(struct bef *b, const char *path, int flags)
{
    char buf[BEF_PATH_MAX];
    char *p = buf, *slash;
    int dfd = b->rootfd, fd;

    snprintf(buf, sizeof(buf), "%s", path);
    while ((slash = strchr(p, '/'))) {
        *slash = '\0';
        fd = openat(dfd, p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            fd = errno == ENOTDIR ? -ELOOP : -errno; /* O_PATH|O_NOFOLLOW: a link is ENOTDIR */
            if (dfd != b->rootfd)
                close(dfd);
            return fd;
        }
        if (dfd != b->rootfd)
            close(dfd);
        dfd = fd;
        p = slash + 1;
    }
    fd = openat(dfd, p, flags | O_NOFOLLOW);
    if (fd < 0)
        fd = -errno;
    if (dfd != b->rootfd)
        close(dfd);
    return fd;
}

/* Opens @path (relative to the root) read-only for serving an object. Symlinks are followed
 * while the path stays under the root (openat2 RESOLVE_BENEATH; with no openat2, none is);
 * one that leads out of it is -EXDEV (or -ELOOP), unless --follow-symlinks, which opens it
 * as the links say and sets *@outside. */
int bef_read_open(struct bef *b, const char *path, int *outside)
{
    const int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
    int fd = -ENOSYS;

    *outside = 0;
    if (__atomic_load_n(&b->have_openat2, __ATOMIC_RELAXED)) {
        struct open_how how;
        memset(&how, 0, sizeof(how));
        how.flags = (uint64_t)flags;
        how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
        for (int i = 0; i < 8; i++) { /* EAGAIN: a rename raced a ".." of a link's target */
            fd = (int)syscall(SYS_openat2, b->rootfd, path, &how, sizeof(how));
            if (fd >= 0)
                return fd;
            fd = -errno;
            if (fd != -EAGAIN)
                break;
        }
        if (fd == -ENOSYS)
            __atomic_store_n(&b->have_openat2, 0, __ATOMIC_RELAXED);
    }
    if (fd == -ENOSYS)
        fd = bef_open_nofollow(b, path, flags);
    if ((fd == -EXDEV || fd == -ELOOP) && b->follow) {
        fd = openat(b->rootfd, path, flags);
        if (fd < 0)
            return -errno;
        *outside = 1;
    }
    return fd;
}

/* Opens the file of object @bucket/@key (the file of its name, or BEF_SELF inside the
 * directory of its name) for reading: *@out, its stat, whether it lies outside the store. */
static int obj_fd(struct bef *b, const char *bucket, const char *key, int *out,
                  struct stat *st, int *outside)
{
    char path[BEF_PATH_MAX];
    int fd, rc = bef_check_names(bucket, key);

    if (rc < 0)
        return rc;
    rc = bef_obj_path(bucket, key, path);
    if (rc < 0)
        return rc;
    fd = bef_read_open(b, path, outside);
    if (fd < 0) {
        if (fd == -ENOENT || fd == -ENOTDIR || fd == -ELOOP || fd == -EISDIR || fd == -EXDEV)
            return bef_missing(b, bucket);
        return fd;
    }
    if (fstat(fd, st) < 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    if (S_ISDIR(st->st_mode) && key[strlen(key) - 1] != '/') {
        int sfd = openat(fd, BEF_SELF, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW);
        close(fd);
        if (sfd < 0)
            return errno == ENOENT || errno == ELOOP ? -S3E_NO_SUCH_KEY : -errno;
        fd = sfd;
        if (fstat(fd, st) < 0) {
            rc = -errno;
            close(fd);
            return rc;
        }
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return -S3E_NO_SUCH_KEY;
    }
    (void)fcntl(fd, F_SETFL, 0);
    *out = fd;
    return 0;
}

/* Opens object @bucket/@key for reading and loads its metadata. */
int bef_obj_open(struct bef *b, const char *bucket, const char *key, int *out,
                    struct be_meta *m)
{
    struct stat st;
    int fd, outside, rc = obj_fd(b, bucket, key, &fd, &st, &outside);

    if (rc < 0)
        return rc;
    rc = meta_load(b, fd, &st, key, m, outside);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    *out = fd;
    return 0;
}

static int be_file_head(struct backend *be, const char *bucket, const char *key,
                        struct be_meta *out)
{
    int fd, rc = bef_obj_open(bef_of(be), bucket, key, &fd, out);

    if (rc == 0)
        close(fd);
    return rc;
}

static int be_file_open_fd(struct backend *be, const char *bucket, const char *key, int *fd,
                           struct be_meta *out)
{
    return bef_obj_open(bef_of(be), bucket, key, fd, out);
}

static int be_file_get(struct backend *be, const char *bucket, const char *key, uint64_t off,
                       uint64_t len, const struct be_sink *sink)
{
    struct be_meta m;
    char *buf = NULL;
    int fd, rc = bef_obj_open(bef_of(be), bucket, key, &fd, &m);

    if (rc < 0)
        return rc;
    if (off > m.size || (off == m.size && m.size > 0 && len > 0)) {
        rc = -S3E_INVALID_RANGE;
        goto out;
    }
    if (len > m.size - off)
        len = m.size - off;
    if (sink->on_meta && (rc = sink->on_meta(sink->cls, &m)) != 0)
        goto out;
    buf = malloc(BEF_CHUNK);
    if (!buf) {
        rc = -ENOMEM;
        goto out;
    }
    while (len > 0) {
        ssize_t n = pread(fd, buf, (size_t)S3C_MIN(len, (uint64_t)BEF_CHUNK), (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            goto out;
        }
        if (n == 0) { /* truncated under us by another tool */
            rc = -EIO;
            goto out;
        }
        if ((rc = sink->on_data(sink->cls, buf, (size_t)n)) != 0)
            goto out;
        off += (uint64_t)n;
        len -= (uint64_t)n;
    }
out:
    free(buf);
    close(fd);
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Writing objects                                                                       */

static int be_file_put(struct backend *be, const char *bucket, const char *key, int fd,
                       uint64_t len, const struct be_meta *meta, const int *cancel)
{
    struct bef *b = bef_of(be);
    struct tmpf t = { .fd = -1 };
    struct be_meta *m = NULL;
    int rc = bef_check_names(bucket, key);

    if (rc < 0)
        return rc;
    if (!bef_bucket_exists(b, bucket))
        return -S3E_NO_SUCH_BUCKET;
    m = malloc(sizeof(*m));
    if (!m)
        return -ENOMEM;
    *m = *meta;
    rc = bef_tmp_create(b, &t);
    if (rc < 0)
        goto out;
    if (len > 0 && (rc = bef_copy_range(fd, 0, t.fd, len)) < 0) {
        if (rc == -EIO)
            rc = -S3E_INCOMPLETE_BODY;
        goto out;
    }
    rc = bef_tmp_finish(&t, m);
    /* a local copy is quick: a cancel is honoured where it costs nothing, before the object
     * is placed */
    if (rc == 0 && cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
        rc = -ECANCELED;
    if (rc == 0)
        rc = bef_place(b, bucket, key, &t);
out:
    bef_tmp_discard(b, &t);
    free(m);
    return rc;
}

static int be_file_copy(struct backend *be, const char *src_bucket, const char *src_key,
                        const char *dst_bucket, const char *dst_key,
                        const struct be_meta *replace, struct be_meta *out)
{
    struct bef *b = bef_of(be);
    struct tmpf t = { .fd = -1 };
    struct be_meta *src = malloc(sizeof(*src));
    int sfd = -1, rc;

    if (!src)
        return -ENOMEM;
    rc = bef_check_names(dst_bucket, dst_key);
    if (rc < 0)
        goto out;
    rc = bef_obj_open(b, src_bucket, src_key, &sfd, src);
    if (rc < 0)
        goto out;
    if (!bef_bucket_exists(b, dst_bucket)) {
        rc = -S3E_NO_SUCH_BUCKET;
        goto out;
    }
    if (replace) {
        struct be_meta keep = *src;
        *src = *replace;
        memcpy(src->etag, keep.etag, sizeof(src->etag));
        memcpy(src->checksum_algo, keep.checksum_algo, sizeof(src->checksum_algo));
        memcpy(src->checksum, keep.checksum, sizeof(src->checksum));
        src->parts_count = keep.parts_count;
        src->part_size = keep.part_size;
        src->size = keep.size;
    }
    rc = bef_tmp_create(b, &t);
    if (rc < 0)
        goto out;
    if (src->size > 0 && (rc = bef_copy_range(sfd, 0, t.fd, src->size)) < 0)
        goto out;
    rc = bef_tmp_finish(&t, src);
    if (rc == 0)
        rc = bef_place(b, dst_bucket, dst_key, &t);
    if (rc == 0 && out)
        *out = *src;
out:
    bef_tmp_discard(b, &t);
    if (sfd >= 0)
        close(sfd);
    free(src);
    return rc;
}

/* Unlinks the entry of key @leaf in directory @dfd: the file (or symlink) of that name, or
 * BEF_SELF inside the directory of that name (*@nested set). 1 when it unlinked one (and
 * *@syncfd is the directory to fsync once the locks are dropped: @dfd or a new fd), 0 when there
 * was none, -ENOTDIR when @leaf is a symlink to a directory (the key would be deleted through
 * it). */
static int del_leaf(struct bef *b, int dfd, const char *leaf, int *nested, int *syncfd)
{
    int locked = bef_dir_lock(b, dfd, LOCK_SH), rc = 1;
    struct stat st;

    *nested = 0;
    if (fstatat(dfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        rc = errno == ENOENT ? 0 : -errno;
    } else if (S_ISDIR(st.st_mode)) {
        int sfd = openat(dfd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd < 0) {
            rc = errno == ENOENT ? 0 : -errno;
        } else if (unlinkat(sfd, BEF_SELF, 0) < 0) {
            rc = errno == ENOENT ? 0 : -errno;
            close(sfd);
        } else {
            *nested = 1;
            *syncfd = sfd;
        }
    } else if (S_ISLNK(st.st_mode) && fstatat(dfd, leaf, &st, 0) == 0 && S_ISDIR(st.st_mode)) {
        rc = -ENOTDIR;
    } else if (unlinkat(dfd, leaf, 0) < 0) {
        rc = errno == ENOENT ? 0 : -errno;
    } else {
        *syncfd = dfd;
    }
    bef_dir_unlock(dfd, locked);
    return rc;
}

static int be_file_del(struct backend *be, const char *bucket, const char *key)
{
    struct bef *b = bef_of(be);
    char buf[BEF_KEY_MAX + 2];
    char *dirs[BEF_KEY_MAX / 2 + 2];
    const char *leaf;
    size_t n, bad;
    int dfd = -1, nested = 0, syncfd = -1, rc = bef_check_names(bucket, key);

    if (rc < 0)
        return rc;
    n = bef_split_key(key, buf, dirs, &leaf);
    pthread_rwlock_rdlock(&b->parents);
    rc = bef_open_parents(b, bucket, dirs, n, 0, &dfd, &bad);
    if (rc == 0)
        rc = del_leaf(b, dfd, leaf, &nested, &syncfd);
    else
        dfd = -1;
    pthread_rwlock_unlock(&b->parents);
    if (syncfd >= 0) { /* outside the locks */
        fsync(syncfd);
        if (syncfd != dfd)
            close(syncfd);
    }
    if (dfd >= 0)
        close(dfd);
    if (rc == -ENOENT)
        return 0;
    if (rc == -ENOTDIR) {
        /* A component is no directory. A file: the key cannot exist. A symlink another tool
         * placed: the key may be readable through it, and a DELETE does not go through links
         * (it would delete the linked file, perhaps outside the store): refused while the
         * object is readable, so that a success always means it is gone. */
        struct stat st;
        int fd, outside;
        if (obj_fd(b, bucket, key, &fd, &st, &outside) < 0)
            return 0;
        close(fd);
        return -S3E_ACCESS_DENIED;
    }
    if (rc <= 0)
        return rc;
    if (nested)
        dirs[n++] = (char *)leaf; /* directory "leaf" may be empty now */
    /* Remove parents that are now empty, deepest first, up to the bucket directory. */
    pthread_rwlock_wrlock(&b->parents);
    while (n > 0) {
        char path[BEF_PATH_MAX];
        size_t len = 0;
        int k = snprintf(path, sizeof(path), "%s", bucket);

        len = (size_t)k;
        for (size_t i = 0; i < n; i++)
            len += (size_t)snprintf(path + len, sizeof(path) - len, "/%s", dirs[i]);
        if (unlinkat(b->rootfd, path, AT_REMOVEDIR) < 0)
            break;
        n--;
    }
    pthread_rwlock_unlock(&b->parents);
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Buckets                                                                               */

static int bucket_cmp(const void *a, const void *b)
{
    return strcmp(((const struct be_bucket *)a)->name, ((const struct be_bucket *)b)->name);
}

static int be_file_list_buckets(struct backend *be, struct be_bucket **out, size_t *n)
{
    struct bef *b = bef_of(be);
    struct be_bucket *v = NULL;
    size_t cnt = 0, cap = 0;
    struct dirent *de;
    int fd = openat(b->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d;

    *out = NULL;
    *n = 0;
    if (fd < 0)
        return -errno;
    d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    while ((de = readdir(d))) {
        struct statx sx;

        if (backend_check_bucket_name(de->d_name) < 0)
            continue;
        if (statx(fd, de->d_name, AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_BTIME | STATX_CTIME,
                  &sx) < 0 || !S_ISDIR(sx.stx_mode))
            continue;
        if (ARR_GROW(v, cnt, 1, cap)) {
            free(v);
            closedir(d);
            return -ENOMEM;
        }
        memcpy(v[cnt].name, de->d_name, strlen(de->d_name) + 1); /* checked: <= 63 */
        if (sx.stx_mask & STATX_BTIME)
            v[cnt].ctime_ns = (int64_t)sx.stx_btime.tv_sec * 1000000000LL + sx.stx_btime.tv_nsec;
        else
            v[cnt].ctime_ns = (int64_t)sx.stx_ctime.tv_sec * 1000000000LL + sx.stx_ctime.tv_nsec;
        cnt++;
    }
    closedir(d);
    if (cnt > 1)
        qsort(v, cnt, sizeof(*v), bucket_cmp);
    *out = v;
    *n = cnt;
    return 0;
}

static int be_file_bucket_create(struct backend *be, const char *bucket)
{
    struct bef *b = bef_of(be);
    int rc = backend_check_bucket_name(bucket);

    if (rc < 0)
        return rc;
    if (mkdirat(b->rootfd, bucket, 0755) < 0)
        return errno == EEXIST ? -S3E_BUCKET_ALREADY_OWNED : -errno;
    fsync(b->rootfd);
    return 0;
}

static int be_file_bucket_head(struct backend *be, const char *bucket)
{
    int rc = backend_check_bucket_name(bucket);

    if (rc < 0)
        return rc;
    return bef_bucket_exists(bef_of(be), bucket) ? 0 : -S3E_NO_SUCH_BUCKET;
}

/* Removes the empty directories under @dfd (taken over, closed), deepest first. */
static void prune_empty(int dfd, int depth)
{
    DIR *d = fdopendir(dfd);
    struct dirent *de;

    if (!d) {
        close(dfd);
        return;
    }
    while ((de = readdir(d))) {
        int sub;
        if (de->d_type != DT_DIR || !strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (depth < 256) {
            sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                prune_empty(sub, depth + 1);
        }
        (void)unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
    }
    closedir(d);
}

static int be_file_bucket_delete(struct backend *be, const char *bucket)
{
    struct bef *b = bef_of(be);
    int fd, rc = backend_check_bucket_name(bucket);

    if (rc < 0)
        return rc;
    if (!bef_bucket_exists(b, bucket))
        return -S3E_NO_SUCH_BUCKET;
    if (bef_dir_has_key(b, bucket, 0, NULL))
        return -S3E_BUCKET_NOT_EMPTY;
    fd = openat(b->rootfd, bucket, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0)
        prune_empty(fd, 0);
    if (unlinkat(b->rootfd, bucket, AT_REMOVEDIR) < 0) {
        if (errno == ENOTEMPTY || errno == EEXIST)
            return -S3E_BUCKET_NOT_EMPTY;
        return errno == ENOENT ? -S3E_NO_SUCH_BUCKET : -errno;
    }
    fsync(b->rootfd);
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Open and close                                                                        */

/* Removes temp files older than BEF_TMP_TTL_NS (a crash's leftovers). */
void bef_sweep_tmp(struct bef *b)
{
    int64_t now = s3c_real_ns();
    int fd = openat(b->tmpfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct dirent *de;
    DIR *d;

    if (fd < 0 || !(d = fdopendir(fd))) {
        if (fd >= 0)
            close(fd);
        return;
    }
    while ((de = readdir(d))) {
        struct stat st;
        if (de->d_name[0] == '.')
            continue;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            ts_ns(&st.st_mtim) >= now - BEF_TMP_TTL_NS)
            continue;
        if (S_ISDIR(st.st_mode))
            bef_rm_flat_dir(dirfd(d), de->d_name);
        else
            (void)unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
}

static int open_sub(int dfd, const char *name, int *out)
{
    if (mkdirat(dfd, name, 0755) < 0 && errno != EEXIST)
        return -errno;
    *out = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return *out < 0 ? -errno : 0;
}

static void be_file_close(struct backend *be)
{
    struct bef *b;

    if (!be)
        return;
    b = bef_of(be);
    bef_dc_destroy(&b->dc);
    if (b->tmpfd >= 0)
        close(b->tmpfd);
    if (b->upfd >= 0)
        close(b->upfd);
    if (b->donefd >= 0)
        close(b->donefd);
    if (b->rootfd >= 0)
        close(b->rootfd);
    free(b->root);
    free(b->memo);
    pthread_mutex_destroy(&b->memo_mu);
    pthread_rwlock_destroy(&b->parents);
    b->magic = 0;
    free(b);
}

/* Whether renameat2(RENAME_EXCHANGE) swaps a file and a directory in tmp/ (ext4, xfs, btrfs,
 * tmpfs, f2fs: yes; NFS and most FUSE file systems: no). */
static int probe_exchange(struct bef *b)
{
    char f[32], d[32];
    int fd, ok;

    memcpy(f, "x.", 2);
    bef_random_hex(f + 2, 12);
    memcpy(d, f, sizeof(d));
    d[0] = 'y';
    fd = openat(b->tmpfd, f, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return 0;
    close(fd);
    if (mkdirat(b->tmpfd, d, 0755) < 0) {
        (void)unlinkat(b->tmpfd, f, 0);
        return 0;
    }
    ok = renameat2(b->tmpfd, f, b->tmpfd, d, RENAME_EXCHANGE) == 0;
    (void)unlinkat(b->tmpfd, f, ok ? AT_REMOVEDIR : 0);
    (void)unlinkat(b->tmpfd, d, ok ? 0 : AT_REMOVEDIR);
    return ok;
}

/* Whether openat2() is there (Linux 5.6). */
static int probe_openat2(struct bef *b)
{
    struct open_how how;
    int fd;

    memset(&how, 0, sizeof(how));
    how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH;
    fd = (int)syscall(SYS_openat2, b->rootfd, ".", &how, sizeof(how));
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

static int be_file_open(const struct conf *cf, const char *url, struct backend **out,
                        struct errmsg *em)
{
    const char *path = url;
    struct bef *b;
    struct stat st;
    int ifd = -1, rc;

    *out = NULL;
    if (strncasecmp(path, "file://", 7) == 0)
        path += 7;
    if (path[0] != '/') {
        errmsg_set(em, "backend \"%s\": want file:///absolute/dir", url);
        return -EINVAL;
    }
    b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    if (pthread_rwlock_init(&b->parents, NULL)) {
        free(b);
        return -ENOMEM;
    }
    pthread_mutex_init(&b->memo_mu, NULL);
    b->follow = cf ? cf->follow_symlinks : 0;
    b->magic = BEF_MAGIC;
    b->rootfd = b->tmpfd = b->upfd = b->donefd = -1;
    b->be.magic = BACKEND_MAGIC;
    b->be.ops = &be_file_ops;
    b->be.priv = b;
    b->root = strdup(path);
    if (!b->root || bef_dc_init(&b->dc) < 0) {
        rc = -ENOMEM;
        goto fail;
    }
    b->rootfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (b->rootfd < 0) {
        rc = -errno;
        errmsg_set(em, "backend: open \"%s\": %s", path, strerror(errno));
        goto fail;
    }
    if (fstat(b->rootfd, &st) < 0 || faccessat(b->rootfd, ".", R_OK | W_OK | X_OK, 0) < 0) {
        rc = -errno;
        errmsg_set(em, "backend: \"%s\" is not a readable and writable directory: %s", path,
                   strerror(errno));
        goto fail;
    }
    if ((rc = open_sub(b->rootfd, BEF_INTERNAL, &ifd)) < 0 ||
        (rc = open_sub(ifd, "tmp", &b->tmpfd)) < 0 ||
        (rc = open_sub(ifd, "uploads", &b->upfd)) < 0 ||
        (rc = open_sub(ifd, "completed", &b->donefd)) < 0) {
        errmsg_set(em, "backend: creating \"%s/%s\": %s", path, BEF_INTERNAL, strerror(-rc));
        goto fail;
    }
    close(ifd);
    bef_sweep_tmp(b);
    b->can_exchange = probe_exchange(b);
    b->have_openat2 = probe_openat2(b);
    b->be.caps = BE_CAP_LOCAL_FD | (fileio_medium_of_fd(b->rootfd) != FS_MEDIUM_OTHER ? BE_CAP_LOCAL_DISK : 0);
    *out = &b->be;
    return 0;
fail:
    if (ifd >= 0)
        close(ifd);
    be_file_close(&b->be);
    return rc;
}

const struct backend_ops be_file_ops = {
    .scheme = "file",
    .open = be_file_open,
    .close = be_file_close,
    .head = be_file_head,
    .get = be_file_get,
    .open_fd = be_file_open_fd,
    .put = be_file_put,
    .copy = be_file_copy,
    .del = be_file_del,
    .list = be_file_list,
    .list_buckets = be_file_list_buckets,
    .bucket_create = be_file_bucket_create,
    .bucket_head = be_file_bucket_head,
    .bucket_delete = be_file_bucket_delete,
    .mp_create = be_file_mp_create,
    .mp_put_part = be_file_mp_put_part,
    .mp_copy_part = be_file_mp_copy_part,
    .mp_complete = be_file_mp_complete,
    .mp_abort = be_file_mp_abort,
    .mp_list_parts = be_file_mp_list_parts,
    .mp_list_uploads = be_file_mp_list_uploads,
};

