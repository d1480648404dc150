/*
 * be_file_store.c: how the POSIX backend keeps an object: the metadata record ("S3C" 0x01,
 * then tag-length-value fields) in the "user.s3cached" xattr, the key's path, temp files in
 * ROOT/.s3cached/tmp, and their atomic placement under the key's name, creating its parent
 * directories and nesting a key "a" into directory "a" when keys "a/..." appear.
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
#include "lib/conf.h"
#include "lib/s3err.h"
#include "mpu_slot.h"

void bef_enc_init(struct enc *e)
{
    memcpy(e->buf, "S3C\x01", 4);
    e->len = 4;
    e->err = 0;
}

static void enc_bytes(struct enc *e, int tag, const void *p, size_t n)
{
    if (n > 0xffff || e->len + 3 + n > sizeof(e->buf)) {
        e->err = 1;
        return;
    }
    e->buf[e->len] = (char)tag;
    e->buf[e->len + 1] = (char)(n & 0xff);
    e->buf[e->len + 2] = (char)(n >> 8);
    memcpy(e->buf + e->len + 3, p, n);
    e->len += 3 + n;
}

void bef_enc_str(struct enc *e, int tag, const char *s)
{
    if (s && *s)
        enc_bytes(e, tag, s, strlen(s));
}

void bef_enc_num(struct enc *e, int tag, int64_t v)
{
    char t[24];
    int n = snprintf(t, sizeof(t), "%" PRId64, v);
    enc_bytes(e, tag, t, (size_t)n);
}

/* The headers of @m (everything except size and mtime). */
void bef_enc_meta(struct enc *e, const struct be_meta *m)
{
    bef_enc_str(e, T_ETAG, m->etag);
    bef_enc_str(e, T_CTYPE, m->content_type);
    bef_enc_str(e, T_CC, m->cache_control);
    bef_enc_str(e, T_CD, m->content_disposition);
    bef_enc_str(e, T_CE, m->content_encoding);
    bef_enc_str(e, T_CL, m->content_language);
    bef_enc_str(e, T_EXPIRES, m->expires);
    bef_enc_str(e, T_UMETA, m->usermeta);
    bef_enc_str(e, T_CKALGO, m->checksum_algo);
    bef_enc_str(e, T_CK, m->checksum);
    if (m->parts_count)
        bef_enc_num(e, T_PARTS, m->parts_count);
    if (m->part_size)
        bef_enc_num(e, T_PSIZE, m->part_size);
}

static int dec_str(char *dst, size_t cap, const char *p, size_t n)
{
    if (n >= cap)
        return -EINVAL;
    memcpy(dst, p, n);
    dst[n] = '\0';
    return 0;
}

static int dec_num(const char *p, size_t n, int64_t *v)
{
    char t[24], *end;

    if (n == 0 || n >= sizeof(t))
        return -EINVAL;
    memcpy(t, p, n);
    t[n] = '\0';
    errno = 0;
    *v = strtoll(t, &end, 10);
    return errno || *end ? -EINVAL : 0;
}

#define DEC_S(field) rc = dec_str(field, sizeof(field), p, n)

int bef_rec_decode(const char *buf, size_t len, struct rec *r)
{
    size_t pos = 4;
    int64_t v;

    memset(r, 0, sizeof(*r));
    if (len < 4 || memcmp(buf, "S3C\x01", 4) != 0)
        return -EINVAL;
    while (pos < len) {
        int tag, rc = 0;
        size_t n;
        const char *p;

        if (pos + 3 > len)
            return -EINVAL;
        tag = (unsigned char)buf[pos];
        n = (unsigned char)buf[pos + 1] | (size_t)(unsigned char)buf[pos + 2] << 8;
        p = buf + pos + 3;
        if (pos + 3 + n > len)
            return -EINVAL;
        switch (tag) {
        case T_SIZE:
            if (!(rc = dec_num(p, n, &v)))
                r->m.size = (uint64_t)v, r->have_size = 1;
            break;
        case T_MTIME:
            if (!(rc = dec_num(p, n, &v)))
                r->m.mtime_ns = v, r->have_mtime = 1;
            break;
        case T_ETAG: DEC_S(r->m.etag); break;
        case T_CTYPE: DEC_S(r->m.content_type); break;
        case T_CC: DEC_S(r->m.cache_control); break;
        case T_CD: DEC_S(r->m.content_disposition); break;
        case T_CE: DEC_S(r->m.content_encoding); break;
        case T_CL: DEC_S(r->m.content_language); break;
        case T_EXPIRES: DEC_S(r->m.expires); break;
        case T_UMETA: DEC_S(r->m.usermeta); break;
        case T_CKALGO: DEC_S(r->m.checksum_algo); break;
        case T_CK: DEC_S(r->m.checksum); break;
        case T_PARTS:
            if (!(rc = dec_num(p, n, &v)))
                r->m.parts_count = (uint32_t)v;
            break;
        case T_PSIZE:
            if (!(rc = dec_num(p, n, &v)))
                r->m.part_size = (uint64_t)v;
            break;
        case T_BUCKET: DEC_S(r->bucket); break;
        case T_KEY: DEC_S(r->key); break;
        case T_INIT: rc = dec_num(p, n, &r->initiated_ns); break;
        case T_PHASH: DEC_S(r->phash); break;
        case T_NUMBER:
            if (!(rc = dec_num(p, n, &v)))
                r->number = (unsigned)v;
            break;
        default: break; /* newer field: ignore */
        }
        if (rc)
            return rc;
        pos += 3 + n;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Small helpers                                                                         */

/* MD5 of @len bytes of @fd from @off as hex. Runs without any lock held. */
int bef_md5_fd(int fd, uint64_t off, uint64_t len, char out[33])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    char *buf = malloc(BEF_CHUNK);
    int rc = 0;

    if (!ctx || !buf || !EVP_DigestInit_ex(ctx, EVP_md5(), NULL)) {
        rc = -ENOMEM;
        goto out;
    }
    while (len > 0) {
        ssize_t r = pread(fd, buf, (size_t)S3C_MIN(len, (uint64_t)BEF_CHUNK), (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            goto out;
        }
        if (r == 0)
            break;
        EVP_DigestUpdate(ctx, buf, (size_t)r);
        off += (uint64_t)r;
        len -= (uint64_t)r;
    }
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    for (unsigned i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
out:
    EVP_MD_CTX_free(ctx);
    free(buf);
    return rc;
}

void bef_random_hex(char *out, size_t nbytes)
{
    unsigned char r[32];
    size_t got = 0;

    S3C_ASSERT(nbytes <= sizeof(r));
    while (got < nbytes) {
        ssize_t n = getrandom(r + got, nbytes - got, 0);
        if (n < 0) {
            S3C_ASSERT(errno == EINTR);
            continue;
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < nbytes; i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
}

const char *bef_guess_type(const char *key)
{
    static const struct { const char *ext, *type; } tab[] = {
        { "txt", "text/plain" }, { "html", "text/html" }, { "htm", "text/html" },
        { "css", "text/css" }, { "csv", "text/csv" }, { "md", "text/markdown" },
        { "js", "application/javascript" }, { "json", "application/json" },
        { "xml", "application/xml" }, { "pdf", "application/pdf" },
        { "zip", "application/zip" }, { "gz", "application/gzip" },
        { "tar", "application/x-tar" }, { "wasm", "application/wasm" },
        { "png", "image/png" }, { "jpg", "image/jpeg" }, { "jpeg", "image/jpeg" },
        { "gif", "image/gif" }, { "svg", "image/svg+xml" }, { "webp", "image/webp" },
        { "mp4", "video/mp4" }, { "mp3", "audio/mpeg" },
    };
    const char *slash = strrchr(key, '/');
    const char *dot = strrchr(slash ? slash + 1 : key, '.');

    if (dot && dot[1])
        for (size_t i = 0; i < ARRAY_SIZE(tab); i++)
            if (strcasecmp(dot + 1, tab[i].ext) == 0)
                return tab[i].type;
    return "application/octet-stream";
}

int bef_check_names(const char *bucket, const char *key)
{
    int rc = backend_check_bucket_name(bucket);

    if (rc == 0 && key)
        rc = backend_check_key(key, strlen(key));
    return rc;
}

/* "bucket/key" or "bucket/dir/.s3cached-dir" for a key ending in '/'. */
int bef_obj_path(const char *bucket, const char *key, char out[BEF_PATH_MAX])
{
    size_t kl = strlen(key);
    int n = snprintf(out, BEF_PATH_MAX, "%s/%s%s", bucket, key,
                     kl && key[kl - 1] == '/' ? BEF_MARKER : "");
    return n > 0 && n < BEF_PATH_MAX ? 0 : -S3E_KEY_TOO_LONG;
}

int bef_bucket_exists(struct bef *b, const char *bucket)
{
    struct stat st;
    return fstatat(b->rootfd, bucket, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

/* A missing object: NO_SUCH_BUCKET when the bucket is gone too. */
int bef_missing(struct bef *b, const char *bucket)
{
    return bef_bucket_exists(b, bucket) ? -S3E_NO_SUCH_KEY : -S3E_NO_SUCH_BUCKET;
}

/* Copies @len bytes of @in from @off into @out at @out_off. */
int bef_copy_range_to(int in, uint64_t off, int out, uint64_t out_off, uint64_t len)
{
    loff_t ioff = (loff_t)off, ooff = (loff_t)out_off;
    int fallback = 0;
    char *buf = NULL;
    int rc = 0;

    while (len > 0 && !fallback) {
        ssize_t n = copy_file_range(in, &ioff, out, &ooff,
                                    (size_t)S3C_MIN(len, (uint64_t)1 << 30), 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP ||
                errno == EBADF) {
                fallback = 1;
                break;
            }
            return -errno;
        }
        if (n == 0)
            return -EIO; /* source shorter than promised */
        len -= (uint64_t)n;
    }
    if (!fallback)
        return 0;
    buf = malloc(BEF_CHUNK);
    if (!buf)
        return -ENOMEM;
    while (len > 0) {
        ssize_t n = pread(in, buf, (size_t)S3C_MIN(len, (uint64_t)BEF_CHUNK), ioff);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -EIO;
            break;
        }
        for (ssize_t w = 0; w < n;) {
            ssize_t k = pwrite(out, buf + w, (size_t)(n - w), ooff);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0) {
                rc = -errno;
                goto out;
            }
            w += k;
            ooff += k;
        }
        ioff += n;
        len -= (uint64_t)n;
    }
out:
    free(buf);
    return rc;
}

/* Copies @len bytes of @in from @off into @out at its current size (appending). */
int bef_copy_range(int in, uint64_t off, int out, uint64_t len)
{
    struct stat st;

    if (fstat(out, &st) < 0)
        return -errno;
    return bef_copy_range_to(in, off, out, (uint64_t)st.st_size, len);
}

int bef_tmp_create(struct bef *b, struct tmpf *t)
{
    for (int i = 0; i < 8; i++) {
        memcpy(t->name, "t.", 2);
        bef_random_hex(t->name + 2, 12);
        t->fd = openat(b->tmpfd, t->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (t->fd >= 0)
            return 0;
        if (errno != EEXIST)
            return -errno;
    }
    return -EEXIST;
}

void bef_tmp_discard(struct bef *b, struct tmpf *t)
{
    if (t->fd >= 0) {
        close(t->fd);
        unlinkat(b->tmpfd, t->name, 0);
        t->fd = -1;
    }
}

/* Stamps @m (size and mtime from the file) into the temp file's xattr and fsyncs it.
 * @m->size and @m->mtime_ns are filled in. */
int bef_tmp_finish(struct tmpf *t, struct be_meta *m)
{
    struct enc e;
    struct stat st;

    if (fstat(t->fd, &st) < 0)
        return -errno;
    m->size = (uint64_t)st.st_size;
    m->mtime_ns = ts_ns(&st.st_mtim);
    bef_enc_init(&e);
    bef_enc_num(&e, T_SIZE, (int64_t)m->size);
    bef_enc_num(&e, T_MTIME, m->mtime_ns);
    bef_enc_meta(&e, m);
    if (e.err)
        return -S3E_METADATA_TOO_LARGE;
    if (fsetxattr(t->fd, BEF_XATTR, e.buf, e.len, 0) < 0) {
        if (errno == E2BIG || errno == ENOSPC || errno == ERANGE)
            return -S3E_METADATA_TOO_LARGE;
        if (errno != ENOTSUP) /* no xattrs here: served like a foreign file (MD5 ETag) */
            return -errno;
    }
    if (fsync(t->fd) < 0)
        return -errno;
    return 0;
}

/* Takes flock(@op) on the directory @fd where keys nest (see struct bef): 1 when taken (release
 * with bef_dir_unlock()), 0 when this file system does not nest keys or refuses the lock (the
 * in-process rwlock still orders this process's own writers). */
int bef_dir_lock(const struct bef *b, int fd, int op)
{
    if (!b->can_exchange)
        return 0;
    while (flock(fd, op) < 0)
        if (errno != EINTR)
            return 0;
    return 1;
}

void bef_dir_unlock(int fd, int locked)
{
    if (locked)
        (void)flock(fd, LOCK_UN);
}

/* Opens (creating when @create) the directory @dirs[0..n) under the bucket directory,
 * never following a symlink. -ENOTDIR with *@bad = i when component i is not a directory
 * (a file, a symlink, ...); -ENOENT when one is bef_missing (@create 0); -EAGAIN when a parent
 * went away under us. */
int bef_open_parents(struct bef *b, const char *bucket, char *const *dirs, size_t n,
                        int create, int *out, size_t *bad)
{
    int dfd = openat(b->rootfd, bucket, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

    if (dfd < 0)
        return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? -S3E_NO_SUCH_BUCKET
                                                                      : -errno;
    for (size_t i = 0; i < n; i++) {
        int nfd = openat(dfd, dirs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0 && errno == ENOENT && create) {
            if (mkdirat(dfd, dirs[i], 0755) == 0)
                fsync(dfd);
            else if (errno != EEXIST) {
                int e = errno;
                close(dfd);
                return e == ENOENT ? -EAGAIN : -e; /* parent removed under us: retry */
            }
            nfd = openat(dfd, dirs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (nfd < 0 && errno == ENOENT) {
                close(dfd);
                return -EAGAIN;
            }
        }
        if (nfd < 0) {
            int e = errno;
            close(dfd);
            if (e == ENOTDIR || e == ELOOP) {
                *bad = i;
                return -ENOTDIR;
            }
            return -e;
        }
        close(dfd);
        dfd = nfd;
    }
    *out = dfd;
    return 0;
}

/* Splits @key into directory components and the leaf file name (in @buf). */
size_t bef_split_key(const char *key, char *buf, char **dirs, const char **leaf)
{
    size_t n = 0, kl = strlen(key);
    char *p = buf, *slash;

    memcpy(buf, key, kl + 1);
    while ((slash = strchr(p, '/'))) {
        *slash = '\0';
        dirs[n++] = p;
        p = slash + 1;
    }
    *leaf = *p ? p : BEF_MARKER;
    return n;
}

/* Nests the regular file @name of directory @dfd: it becomes directory @name holding the same
 * inode as BEF_SELF. A reader finds the file or the directory, never neither: the directory is
 * made in tmp/ with a hard link to the file and exchanged with it in one renameat2; the file's
 * old name (now in tmp/) is unlinked. A crash leaves either layout, plus a leftover in tmp/
 * that bef_sweep_tmp() removes. Called with b->parents held for writing; flock(LOCK_EX) on @dfd
 * keeps other processes' renames and unlinks of @name out. 0 when done, or when @name changed
 * meanwhile (the caller looks again); -S3E_KEY_CONFLICT when @name is no regular file (a
 * symlink, ...) or cannot be linked. */
static int nest_file(struct bef *b, int dfd, const char *name)
{
    char tname[48];
    struct stat st, lst;
    int tfd = -1, rc = 0, locked = bef_dir_lock(b, dfd, LOCK_EX), linked = 0;

    if (!locked) { /* two nests of one file at once would lose the first's directory */
        rc = -S3E_KEY_CONFLICT;
        goto out;
    }
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        rc = errno == ENOENT ? 0 : -errno;
        goto out;
    }
    if (S_ISDIR(st.st_mode))
        goto out; /* nested already */
    if (!S_ISREG(st.st_mode)) {
        rc = -S3E_KEY_CONFLICT;
        goto out;
    }
    memcpy(tname, "n.", 2);
    bef_random_hex(tname + 2, 12);
    if (mkdirat(b->tmpfd, tname, 0755) < 0) {
        rc = -errno;
        goto out;
    }
    tfd = openat(b->tmpfd, tname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (tfd < 0) {
        rc = -errno;
        goto fail;
    }
    if (linkat(dfd, name, tfd, BEF_SELF, 0) < 0) {
        rc = errno == ENOENT ? 0 : errno == EPERM || errno == EMLINK ? -S3E_KEY_CONFLICT : -errno;
        goto fail;
    }
    linked = 1;
    if (fstatat(tfd, BEF_SELF, &lst, AT_SYMLINK_NOFOLLOW) < 0 || fsync(tfd) < 0) {
        rc = -errno;
        goto fail;
    }
    if (renameat2(b->tmpfd, tname, dfd, name, RENAME_EXCHANGE) < 0) {
        rc = errno == ENOENT ? 0 : -errno;
        goto fail;
    }
    fsync(dfd);
    /* tname is the file now. Another tool may have replaced it between the link and the
     * exchange: that newer file is the key. */
    if (fstatat(b->tmpfd, tname, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        (st.st_ino != lst.st_ino || st.st_dev != lst.st_dev)) {
        int nfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd >= 0 && renameat(b->tmpfd, tname, nfd, BEF_SELF) == 0)
            fsync(nfd);
        if (nfd >= 0)
            close(nfd);
    }
    (void)unlinkat(b->tmpfd, tname, 0);
    goto out;
fail:
    if (linked)
        (void)unlinkat(tfd, BEF_SELF, 0);
    (void)unlinkat(b->tmpfd, tname, AT_REMOVEDIR);
out:
    if (tfd >= 0)
        close(tfd);
    bef_dir_unlock(dfd, locked);
    return rc;
}

/* Makes component @i of @dirs (a regular file: key dirs[0]/../dirs[i]) a directory, so that
 * keys can be placed under it. 0 when the caller should look again. */
static int nest(struct bef *b, const char *bucket, char *const *dirs, size_t i)
{
    size_t bad;
    int dfd, rc;

    if (!b->can_exchange)
        return -S3E_KEY_CONFLICT; /* no atomic way to swap a file for a directory here */
    pthread_rwlock_wrlock(&b->parents);
    rc = bef_open_parents(b, bucket, dirs, i, 0, &dfd, &bad);
    if (rc == 0) {
        rc = nest_file(b, dfd, dirs[i]);
        close(dfd);
    } else if (rc == -ENOENT || rc == -ENOTDIR) {
        rc = 0; /* changed meanwhile: the caller creates or nests from the top again */
    }
    pthread_rwlock_unlock(&b->parents);
    return rc;
}

/* Renames temp file @t to @leaf of directory @dfd, or to @leaf/BEF_SELF when @leaf is a
 * directory (the key beside keys under it). Consumes @t on success and sets *@syncfd to the
 * directory to fsync (@dfd, or a new fd the caller closes) once the locks are dropped; -EAGAIN
 * when the directory went away meanwhile. */
static int place_leaf(struct bef *b, int dfd, const char *leaf, struct tmpf *t, int *syncfd)
{
    int locked = bef_dir_lock(b, dfd, LOCK_SH), rc = 0, e;

    if (renameat(b->tmpfd, t->name, dfd, leaf) == 0) {
        *syncfd = dfd;
        goto placed;
    }
    e = errno;
    if ((e == EISDIR || e == ENOTEMPTY || e == EEXIST) && strcmp(leaf, BEF_MARKER) != 0) {
        int sfd = openat(dfd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd < 0) {
            rc = errno == ENOENT || errno == ENOTDIR ? -EAGAIN : -errno;
        } else if (renameat(b->tmpfd, t->name, sfd, BEF_SELF) == 0) {
            *syncfd = sfd;
            goto placed;
        } else {
            rc = errno == ENOENT ? -EAGAIN : -errno;
            close(sfd);
        }
    } else {
        rc = e == ENOENT ? -EAGAIN
             : e == EISDIR || e == ENOTDIR || e == ENOTEMPTY || e == EEXIST ? -S3E_KEY_CONFLICT
                                                                             : -e;
    }
    bef_dir_unlock(dfd, locked);
    return rc;
placed:
    bef_dir_unlock(dfd, locked);
    close(t->fd);
    t->fd = -1;
    return 0;
}

/* Renames temp file @t into place as @bucket/@key: creates parents (nesting a file of a
 * parent's name), retries when a concurrent delete removes them, fsyncs the parent. The temp
 * file is consumed on success. */
int bef_place(struct bef *b, const char *bucket, const char *key, struct tmpf *t)
{
    char buf[BEF_KEY_MAX + 2];
    char *dirs[BEF_KEY_MAX / 2 + 1];
    const char *leaf;
    size_t n = bef_split_key(key, buf, dirs, &leaf), bad = 0;
    int rc = -EAGAIN;

    for (int attempt = 0; attempt < BEF_PLACE_RETRIES && rc == -EAGAIN; attempt++) {
        int dfd = -1, syncfd = -1;

        pthread_rwlock_rdlock(&b->parents);
        rc = bef_open_parents(b, bucket, dirs, n, 1, &dfd, &bad);
        if (rc == 0)
            rc = place_leaf(b, dfd, leaf, t, &syncfd);
        else
            dfd = -1;
        pthread_rwlock_unlock(&b->parents);
        if (syncfd >= 0) { /* outside the locks: a nest or rmdir need not wait for the disk */
            fsync(syncfd);
            if (syncfd != dfd)
                close(syncfd);
        }
        if (dfd >= 0)
            close(dfd);
        if (rc == -ENOTDIR && (rc = nest(b, bucket, dirs, bad)) == 0)
            rc = -EAGAIN;
        if (rc == -ENOENT)
            rc = -EAGAIN;
    }
    return rc;
}

