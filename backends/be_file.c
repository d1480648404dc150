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
#include <sys/vfs.h>
#include <sys/types.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <linux/openat2.h>
#include <openssl/evp.h>

#include "backend.h"
#include "lib/conf.h"
#include "lib/s3err.h"
#include "mpu_slot.h"

#define BEF_MAGIC 0xbef11e5u
#define BEF_XATTR "user.s3cached"
#define BEF_PART_XATTR "user.s3cached.part"
#define BEF_PSIZE_XATTR "user.s3cached.psize" /* an upload's "data": its part size P */
#define BEF_MARKER ".s3cached-dir"
#define BEF_SELF ".s3cached-obj"          /* key "a" kept inside directory "a" */
#define BEF_INTERNAL ".s3cached"
#define BEF_CHUNK (256u * 1024)
#define BEF_KEY_MAX 1024
#define BEF_PATH_MAX 1400                 /* bucket + '/' + key + marker suffix */
#define BEF_REC_MAX 8192                  /* encoded metadata record */
#define BEF_DC_CAP_BYTES (256ull << 20)   /* directory cache memory */
#define BEF_DC_CAP_DIRS 200000u
#define BEF_DC_NBUCKETS 16384u
#define BEF_DC_STABLE_NS (200LL * 1000000) /* trust a dir mtime only this far in the past */
#define BEF_COMPLETED_TTL_NS (3600LL * 1000000000)
#define BEF_SWEEP_EVERY_NS (600LL * 1000000000)
#define BEF_TMP_TTL_NS (3600LL * 1000000000)
#define BEF_PLACE_RETRIES 32
#define BEF_MEMO_SLOTS 16384u             /* ETags of files outside the store */

/* ------------------------------------------------------------------------------------ */
/* Directory cache                                                                       */

/* DE_NESTED: the key "name" that directory "name/" may hold as BEF_SELF (each directory has one,
 * looked up when listed); DE_SELF: that file, seen inside the directory (not an entry there). */
enum { DE_FILE = 1, DE_DIR = 2, DE_MARKER = 3, DE_NESTED = 4, DE_SELF = 5 };

/* One directory entry by its "virtual name": a file's name, a directory's name + "/" (and its
 * nested key: the name alone), "" for the marker file. Sorting virtual names bytewise gives S3
 * key order: "a" < "a-b" < "a.txt" < "a/" < "a0". */
struct dent {
    uint32_t off; /* into the arena */
    uint16_t len;
    uint8_t type;
};

struct dcent {
    struct dcent *hnext, *prev, *next; /* hash chain, LRU list */
    char *path;
    uint64_t hash;
    dev_t dev;
    ino_t ino;
    struct timespec mtim;
    size_t n;
    struct dent *ents;
    char *arena;
    size_t bytes;
    unsigned refs; /* the table holds one while the entry is in it */
    int in_table;
};

struct dircache {
    pthread_mutex_t mu;
    struct dcent **tab;
    struct dcent lru; /* sentinel: lru.next is the most recent */
    size_t bytes;
    size_t count;
};

struct bef {
    unsigned magic;
    struct backend be;
    char *root;
    int rootfd, tmpfd, upfd, donefd;
    struct dircache dc;
    int64_t last_sweep_ns;
    /* place() creating a key's parent directories and renaming into them, and be_file_del()
     * unlinking a key (read) against be_file_del() removing parents left empty and nest()
     * turning a file into a directory (write): this process's puts and deletes of keys under
     * one prefix cannot starve each other (another process is met by retries). Other
     * processes on the same store are kept out of a nest() by flock(): shared on the key's
     * directory while a key is renamed in or unlinked, exclusive while one of its files nests. */
    pthread_rwlock_t parents;
    int follow;        /* --follow-symlinks */
    int can_exchange;  /* renameat2(RENAME_EXCHANGE) works here: keys nest, dirs get flocks */
    int have_openat2;  /* else reads follow no symlink at all (without --follow-symlinks) */
    pthread_mutex_t memo_mu;
    struct memo *memo; /* BEF_MEMO_SLOTS, allocated on the first file outside the store */
};

/* An ETag computed for a file outside the store (no xattr is written there). */
struct memo {
    dev_t dev;
    ino_t ino;
    uint64_t size;
    int64_t mtime_ns, ctime_ns;
    char etag[33];
};

static struct bef *bef_of(struct backend *be)
{
    struct bef *b;

    CHECK_OBJ_NOTNULL(be, BACKEND_MAGIC);
    CAST_OBJ_NOTNULL(b, (struct bef *)be->priv, BEF_MAGIC);
    return b;
}

static int64_t ts_ns(const struct timespec *ts)
{
    return (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

static void dcent_free(struct dcent *e)
{
    if (!e)
        return;
    free(e->path);
    free(e->ents);
    free(e->arena);
    free(e);
}

static void lru_unlink(struct dcent *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push(struct dircache *dc, struct dcent *e)
{
    e->next = dc->lru.next;
    e->prev = &dc->lru;
    dc->lru.next->prev = e;
    dc->lru.next = e;
}

/* Removes @e from the table under dc->mu; returns non-zero when the caller must free it. */
static int dc_remove_locked(struct dircache *dc, struct dcent *e)
{
    struct dcent **pp = &dc->tab[e->hash % BEF_DC_NBUCKETS];

    while (*pp && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = e->hnext;
    e->hnext = NULL;
    lru_unlink(e);
    e->in_table = 0;
    dc->bytes -= e->bytes;
    dc->count--;
    return --e->refs == 0;
}

static void dc_release(struct dircache *dc, struct dcent *e)
{
    int dead;

    if (!e)
        return;
    pthread_mutex_lock(&dc->mu);
    dead = --e->refs == 0;
    pthread_mutex_unlock(&dc->mu);
    if (dead)
        dcent_free(e);
}

static int dc_init(struct dircache *dc)
{
    memset(dc, 0, sizeof(*dc));
    dc->tab = calloc(BEF_DC_NBUCKETS, sizeof(*dc->tab));
    if (!dc->tab)
        return -ENOMEM;
    dc->lru.next = dc->lru.prev = &dc->lru;
    pthread_mutex_init(&dc->mu, NULL);
    return 0;
}

static void dc_destroy(struct dircache *dc)
{
    if (!dc->tab)
        return;
    while (dc->lru.next != &dc->lru) {
        struct dcent *e = dc->lru.next;
        if (dc_remove_locked(dc, e))
            dcent_free(e);
    }
    free(dc->tab);
    pthread_mutex_destroy(&dc->mu);
}

static int dent_cmp(const void *a, const void *b, void *arena)
{
    const struct dent *x = a, *y = b;
    const char *ar = arena;
    size_t n = S3C_MIN(x->len, y->len);
    int c = memcmp(ar + x->off, ar + y->off, n);

    if (c)
        return c;
    return (x->len > y->len) - (x->len < y->len);
}

/* Classifies a directory entry: DE_* or 0 to skip it. A symlink to a file is a key; one to a
 * directory is walked only with @follow (--follow-symlinks). */
static int classify(int dfd, const struct dirent *d, int follow)
{
    const char *name = d->d_name;
    unsigned char t = d->d_type;
    struct stat st;

    if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2])))
        return 0;
    if (strncmp(name, BEF_INTERNAL, sizeof(BEF_INTERNAL) - 1) == 0) {
        int type = !strcmp(name, BEF_MARKER) ? DE_MARKER : !strcmp(name, BEF_SELF) ? DE_SELF : 0;
        if (!type)
            return 0;
        if (t == DT_REG)
            return type;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            return type;
        return 0;
    }
    if (t == DT_REG)
        return DE_FILE;
    if (t == DT_DIR)
        return DE_DIR;
    if (t == DT_LNK) {
        if (fstatat(dfd, name, &st, 0) == 0 && S_ISREG(st.st_mode))
            return DE_FILE;
        return follow && S_ISDIR(st.st_mode) ? DE_DIR : 0;
    }
    if (t == DT_UNKNOWN && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISREG(st.st_mode))
            return DE_FILE;
        if (S_ISDIR(st.st_mode))
            return DE_DIR;
        if (S_ISLNK(st.st_mode) && fstatat(dfd, name, &st, 0) == 0) {
            if (S_ISREG(st.st_mode))
                return DE_FILE;
            if (follow && S_ISDIR(st.st_mode))
                return DE_DIR;
        }
    }
    return 0;
}

/* Appends the entry (@name, @nl bytes; a DE_DIR gets its '/') of @type to @e. */
static int dc_add(struct dcent *e, size_t *cap, size_t *acap, size_t *alen, const char *name,
                  size_t nl, int type)
{
    if (e->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 64;
        struct dent *p = realloc(e->ents, ncap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        e->ents = p;
        *cap = ncap;
    }
    if (*alen + nl + 1 > *acap) {
        size_t ncap = *acap ? *acap * 2 : 1024;
        char *p;
        while (ncap < *alen + nl + 1)
            ncap *= 2;
        if (ncap > UINT32_MAX)
            return -ENOMEM;
        p = realloc(e->arena, ncap);
        if (!p)
            return -ENOMEM;
        e->arena = p;
        *acap = ncap;
    }
    e->ents[e->n].off = (uint32_t)*alen;
    e->ents[e->n].len = (uint16_t)nl;
    e->ents[e->n].type = (uint8_t)type;
    if (type != DE_MARKER) {
        memcpy(e->arena + *alen, name, nl - (type == DE_DIR));
        if (type == DE_DIR)
            e->arena[*alen + nl - 1] = '/';
    }
    *alen += nl;
    e->arena[(*alen)++] = '\0';
    e->n++;
    return 0;
}

/* Reads and sorts directory @fd (taken over, closed) into a new entry. */
static int dc_load(int fd, const char *path, int follow, struct dcent **out)
{
    struct dcent *e = calloc(1, sizeof(*e));
    size_t cap = 0, acap = 0, alen = 0;
    DIR *d = NULL;
    struct dirent *de;
    int rc = 0;

    if (!e) {
        close(fd);
        return -ENOMEM;
    }
    d = fdopendir(fd);
    if (!d) {
        rc = -errno;
        close(fd);
        goto fail;
    }
    e->path = strdup(path);
    if (!e->path) {
        rc = -ENOMEM;
        goto fail;
    }
    for (;;) {
        int type;
        size_t nl;

        errno = 0;
        de = readdir(d);
        if (!de) {
            if (errno) {
                rc = -errno;
                goto fail;
            }
            break;
        }
        type = classify(dirfd(d), de, follow);
        if (!type || type == DE_SELF) /* the directory's own key: listed by its parent */
            continue;
        nl = type == DE_MARKER ? 0 : strlen(de->d_name) + (type == DE_DIR);
        rc = dc_add(e, &cap, &acap, &alen, de->d_name, nl, type);
        if (rc == 0 && type == DE_DIR)
            rc = dc_add(e, &cap, &acap, &alen, de->d_name, nl - 1, DE_NESTED);
        if (rc < 0)
            goto fail;
    }
    if (e->n > 1)
        qsort_r(e->ents, e->n, sizeof(*e->ents), dent_cmp, e->arena);
    e->bytes = sizeof(*e) + strlen(path) + cap * sizeof(struct dent) + acap;
    closedir(d);
    *out = e;
    return 0;
fail:
    if (d)
        closedir(d);
    dcent_free(e);
    return rc;
}

static int open_nofollow(struct bef *b, const char *path, int flags);

/* Opens directory @path (relative to the root) for listing: through no symlink at all (a
 * listing never walks a linked directory), or as the links say with --follow-symlinks. */
static int list_dir_open(struct bef *b, const char *path)
{
    const int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
    int fd = -ENOSYS;

    if (b->follow)
        return (fd = openat(b->rootfd, path, flags)) < 0 ? -errno : fd;
    if (__atomic_load_n(&b->have_openat2, __ATOMIC_RELAXED)) {
        struct open_how how;
        memset(&how, 0, sizeof(how));
        how.flags = (uint64_t)flags;
        how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;
        for (int i = 0; i < 8 && (fd == -ENOSYS || fd == -EAGAIN); i++) {
            fd = (int)syscall(SYS_openat2, b->rootfd, path, &how, sizeof(how));
            if (fd < 0)
                fd = -errno;
        }
    }
    return fd == -ENOSYS ? open_nofollow(b, path, flags) : fd;
}

/* A referenced, sorted listing of directory @path (relative to the root). Release with
 * dc_release(). -ENOENT/-ENOTDIR/-ELOOP when it is not a directory reached without a symlink
 * (with --follow-symlinks, any directory). */
static int dc_get(struct bef *b, const char *path, struct dcent **out)
{
    struct dircache *dc = &b->dc;
    uint64_t h = fnv1a(path);
    struct dcent *e, *old = NULL;
    struct stat st;
    int64_t t0;
    int fd, rc;

    if (fstatat(b->rootfd, path, &st, b->follow ? 0 : AT_SYMLINK_NOFOLLOW) < 0)
        return -errno;
    if (!S_ISDIR(st.st_mode))
        return -ENOTDIR;
    pthread_mutex_lock(&dc->mu);
    for (e = dc->tab[h % BEF_DC_NBUCKETS]; e; e = e->hnext)
        if (e->hash == h && strcmp(e->path, path) == 0)
            break;
    if (e && e->dev == st.st_dev && e->ino == st.st_ino &&
        ts_ns(&e->mtim) == ts_ns(&st.st_mtim)) {
        e->refs++;
        lru_unlink(e);
        lru_push(dc, e);
        pthread_mutex_unlock(&dc->mu);
        *out = e;
        return 0;
    }
    pthread_mutex_unlock(&dc->mu);

    /* Miss or stale: read without the lock. */
    t0 = s3c_real_ns();
    fd = list_dir_open(b, path);
    if (fd < 0)
        return fd;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    rc = dc_load(fd, path, b->follow, &e);
    if (rc < 0)
        return rc;
    e->hash = h;
    e->dev = st.st_dev;
    e->ino = st.st_ino;
    e->mtim = st.st_mtim;
    e->refs = 1;
    /* A change in the same clock tick as our read would leave the mtime unchanged, so only
     * a directory whose mtime is safely older than the read is cached. */
    if (ts_ns(&st.st_mtim) < t0 - BEF_DC_STABLE_NS && e->bytes < BEF_DC_CAP_BYTES) {
        struct dcent *victims = NULL;

        pthread_mutex_lock(&dc->mu);
        for (old = dc->tab[h % BEF_DC_NBUCKETS]; old; old = old->hnext)
            if (old->hash == h && strcmp(old->path, path) == 0)
                break;
        if (old && dc_remove_locked(dc, old)) {
            old->hnext = victims;
            victims = old;
        }
        e->hnext = dc->tab[h % BEF_DC_NBUCKETS];
        dc->tab[h % BEF_DC_NBUCKETS] = e;
        lru_push(dc, e);
        e->in_table = 1;
        e->refs++;
        dc->bytes += e->bytes;
        dc->count++;
        while ((dc->bytes > BEF_DC_CAP_BYTES || dc->count > BEF_DC_CAP_DIRS) &&
               dc->lru.prev != e) {
            struct dcent *v = dc->lru.prev;
            if (dc_remove_locked(dc, v)) {
                v->hnext = victims;
                victims = v;
            }
        }
        pthread_mutex_unlock(&dc->mu);
        while (victims) {
            struct dcent *v = victims;
            victims = v->hnext;
            dcent_free(v);
        }
    }
    *out = e;
    return 0;
}

static const char *dent_name(const struct dcent *e, size_t i)
{
    return e->arena + e->ents[i].off;
}

/* First index whose virtual name is >= (@s, @n). */
static size_t dc_lower(const struct dcent *e, const char *s, size_t n)
{
    size_t lo = 0, hi = e->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct dent *d = &e->ents[mid];
        int c = memcmp(e->arena + d->off, s, S3C_MIN(d->len, n));
        if (c == 0)
            c = (d->len > n) - (d->len < n);
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* First index from @lo whose virtual name neither starts with (@s, @n) nor sorts before. */
static size_t dc_prefix_end(const struct dcent *e, size_t lo, const char *s, size_t n)
{
    size_t hi = e->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct dent *d = &e->ents[mid];
        int c = memcmp(e->arena + d->off, s, S3C_MIN(d->len, n));
        if (c == 0 && d->len < n)
            c = -1;
        if (c <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int dent_eq(const struct dcent *e, size_t i, const char *s, size_t n)
{
    return i < e->n && e->ents[i].len == n && memcmp(dent_name(e, i), s, n) == 0;
}

/* ------------------------------------------------------------------------------------ */
/* Metadata records: "S3C" 0x01, then (tag, u16 length, bytes) fields.                  */

enum {
    T_SIZE = 1, T_MTIME, T_ETAG, T_CTYPE, T_CC, T_CD, T_CE, T_CL, T_EXPIRES, T_UMETA,
    T_CKALGO, T_CK, T_PARTS, T_PSIZE,
    T_BUCKET = 20, T_KEY, T_INIT, T_PHASH, T_NUMBER,
};

struct rec {
    struct be_meta m;
    int have_size, have_mtime;
    char bucket[64];
    char key[BEF_KEY_MAX + 1];
    int64_t initiated_ns;
    char phash[33];
    unsigned number;
};

struct enc {
    char buf[BEF_REC_MAX];
    size_t len;
    int err;
};

static void enc_init(struct enc *e)
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

static void enc_str(struct enc *e, int tag, const char *s)
{
    if (s && *s)
        enc_bytes(e, tag, s, strlen(s));
}

static void enc_num(struct enc *e, int tag, int64_t v)
{
    char t[24];
    int n = snprintf(t, sizeof(t), "%" PRId64, v);
    enc_bytes(e, tag, t, (size_t)n);
}

/* The headers of @m (everything except size and mtime). */
static void enc_meta(struct enc *e, const struct be_meta *m)
{
    enc_str(e, T_ETAG, m->etag);
    enc_str(e, T_CTYPE, m->content_type);
    enc_str(e, T_CC, m->cache_control);
    enc_str(e, T_CD, m->content_disposition);
    enc_str(e, T_CE, m->content_encoding);
    enc_str(e, T_CL, m->content_language);
    enc_str(e, T_EXPIRES, m->expires);
    enc_str(e, T_UMETA, m->usermeta);
    enc_str(e, T_CKALGO, m->checksum_algo);
    enc_str(e, T_CK, m->checksum);
    if (m->parts_count)
        enc_num(e, T_PARTS, m->parts_count);
    if (m->part_size)
        enc_num(e, T_PSIZE, m->part_size);
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

static int rec_decode(const char *buf, size_t len, struct rec *r)
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

static int md5_hex_of(const unsigned char *p, size_t n, char out[33])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;

    if (!EVP_Digest(p, n, md, &mdlen, EVP_md5(), NULL))
        return -ENOMEM;
    for (unsigned i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    return 0;
}

/* MD5 of @len bytes of @fd from @off as hex. Runs without any lock held. */
static int md5_fd(int fd, uint64_t off, uint64_t len, char out[33])
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

static int hex_val(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static void random_hex(char *out, size_t nbytes)
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

static const char *guess_type(const char *key)
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

static int check_names(const char *bucket, const char *key)
{
    int rc = backend_check_bucket_name(bucket);

    if (rc == 0 && key)
        rc = backend_check_key(key, strlen(key));
    return rc;
}

/* "bucket/key" or "bucket/dir/.s3cached-dir" for a key ending in '/'. */
static int obj_path(const char *bucket, const char *key, char out[BEF_PATH_MAX])
{
    size_t kl = strlen(key);
    int n = snprintf(out, BEF_PATH_MAX, "%s/%s%s", bucket, key,
                     kl && key[kl - 1] == '/' ? BEF_MARKER : "");
    return n > 0 && n < BEF_PATH_MAX ? 0 : -S3E_KEY_TOO_LONG;
}

static int bucket_exists(struct bef *b, const char *bucket)
{
    struct stat st;
    return fstatat(b->rootfd, bucket, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

/* A missing object: NO_SUCH_BUCKET when the bucket is gone too. */
static int missing(struct bef *b, const char *bucket)
{
    return bucket_exists(b, bucket) ? -S3E_NO_SUCH_KEY : -S3E_NO_SUCH_BUCKET;
}

/* Copies @len bytes of @in from @off into @out at @out_off. */
static int copy_range_to(int in, uint64_t off, int out, uint64_t out_off, uint64_t len)
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
static int copy_range(int in, uint64_t off, int out, uint64_t len)
{
    struct stat st;

    if (fstat(out, &st) < 0)
        return -errno;
    return copy_range_to(in, off, out, (uint64_t)st.st_size, len);
}

/* ------------------------------------------------------------------------------------ */
/* Temp files and atomic placement                                                       */

struct tmpf {
    int fd;
    char name[48];
};

static int tmp_create(struct bef *b, struct tmpf *t)
{
    for (int i = 0; i < 8; i++) {
        memcpy(t->name, "t.", 2);
        random_hex(t->name + 2, 12);
        t->fd = openat(b->tmpfd, t->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (t->fd >= 0)
            return 0;
        if (errno != EEXIST)
            return -errno;
    }
    return -EEXIST;
}

static void tmp_discard(struct bef *b, struct tmpf *t)
{
    if (t->fd >= 0) {
        close(t->fd);
        unlinkat(b->tmpfd, t->name, 0);
        t->fd = -1;
    }
}

/* Stamps @m (size and mtime from the file) into the temp file's xattr and fsyncs it.
 * @m->size and @m->mtime_ns are filled in. */
static int tmp_finish(struct tmpf *t, struct be_meta *m)
{
    struct enc e;
    struct stat st;

    if (fstat(t->fd, &st) < 0)
        return -errno;
    m->size = (uint64_t)st.st_size;
    m->mtime_ns = ts_ns(&st.st_mtim);
    enc_init(&e);
    enc_num(&e, T_SIZE, (int64_t)m->size);
    enc_num(&e, T_MTIME, m->mtime_ns);
    enc_meta(&e, m);
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
 * with dir_unlock()), 0 when this file system does not nest keys or refuses the lock (the
 * in-process rwlock still orders this process's own writers). */
static int dir_lock(const struct bef *b, int fd, int op)
{
    if (!b->can_exchange)
        return 0;
    while (flock(fd, op) < 0)
        if (errno != EINTR)
            return 0;
    return 1;
}

static void dir_unlock(int fd, int locked)
{
    if (locked)
        (void)flock(fd, LOCK_UN);
}

/* Opens (creating when @create) the directory @dirs[0..n) under the bucket directory,
 * never following a symlink. -ENOTDIR with *@bad = i when component i is not a directory
 * (a file, a symlink, ...); -ENOENT when one is missing (@create 0); -EAGAIN when a parent
 * went away under us. */
static int open_parents(struct bef *b, const char *bucket, char *const *dirs, size_t n,
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
static size_t split_key(const char *key, char *buf, char **dirs, const char **leaf)
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
 * that sweep_tmp() removes. Called with b->parents held for writing; flock(LOCK_EX) on @dfd
 * keeps other processes' renames and unlinks of @name out. 0 when done, or when @name changed
 * meanwhile (the caller looks again); -S3E_KEY_CONFLICT when @name is no regular file (a
 * symlink, ...) or cannot be linked. */
static int nest_file(struct bef *b, int dfd, const char *name)
{
    char tname[48];
    struct stat st, lst;
    int tfd = -1, rc = 0, locked = dir_lock(b, dfd, LOCK_EX), linked = 0;

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
    random_hex(tname + 2, 12);
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
    dir_unlock(dfd, locked);
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
    rc = open_parents(b, bucket, dirs, i, 0, &dfd, &bad);
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
    int locked = dir_lock(b, dfd, LOCK_SH), rc = 0, e;

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
    dir_unlock(dfd, locked);
    return rc;
placed:
    dir_unlock(dfd, locked);
    close(t->fd);
    t->fd = -1;
    return 0;
}

/* Renames temp file @t into place as @bucket/@key: creates parents (nesting a file of a
 * parent's name), retries when a concurrent delete removes them, fsyncs the parent. The temp
 * file is consumed on success. */
static int place(struct bef *b, const char *bucket, const char *key, struct tmpf *t)
{
    char buf[BEF_KEY_MAX + 2];
    char *dirs[BEF_KEY_MAX / 2 + 1];
    const char *leaf;
    size_t n = split_key(key, buf, dirs, &leaf), bad = 0;
    int rc = -EAGAIN;

    for (int attempt = 0; attempt < BEF_PLACE_RETRIES && rc == -EAGAIN; attempt++) {
        int dfd = -1, syncfd = -1;

        pthread_rwlock_rdlock(&b->parents);
        rc = open_parents(b, bucket, dirs, n, 1, &dfd, &bad);
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
        if (rec_decode(buf, (size_t)n, r) == 0 && r->have_size && r->have_mtime &&
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
    snprintf(m->content_type, sizeof(m->content_type), "%s", guess_type(key));
    if (outside && memo_get(b, st, m->etag))
        return 0;
    rc = md5_fd(fd, 0, m->size, m->etag);
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
            enc_init(e);
            enc_num(e, T_SIZE, (int64_t)m->size);
            enc_num(e, T_MTIME, m->mtime_ns);
            enc_meta(e, m);
            if (!e->err)
                (void)fsetxattr(fd, BEF_XATTR, e->buf, e->len, 0); /* best effort */
            free(e);
        }
    }
    return 0;
}

/* Opens @path (relative to the root) component by component, following no symlink: -ELOOP
 * at one. For kernels without openat2(). */
static int open_nofollow(struct bef *b, const char *path, int flags)
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
static int read_open(struct bef *b, const char *path, int *outside)
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
        fd = open_nofollow(b, path, flags);
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
    int fd, rc = check_names(bucket, key);

    if (rc < 0)
        return rc;
    rc = obj_path(bucket, key, path);
    if (rc < 0)
        return rc;
    fd = read_open(b, path, outside);
    if (fd < 0) {
        if (fd == -ENOENT || fd == -ENOTDIR || fd == -ELOOP || fd == -EISDIR || fd == -EXDEV)
            return missing(b, bucket);
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
static int obj_open(struct bef *b, const char *bucket, const char *key, int *out,
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
    int fd, rc = obj_open(bef_of(be), bucket, key, &fd, out);

    if (rc == 0)
        close(fd);
    return rc;
}

static int be_file_open_fd(struct backend *be, const char *bucket, const char *key, int *fd,
                           struct be_meta *out)
{
    return obj_open(bef_of(be), bucket, key, fd, out);
}

static int be_file_get(struct backend *be, const char *bucket, const char *key, uint64_t off,
                       uint64_t len, const struct be_sink *sink)
{
    struct be_meta m;
    char *buf = NULL;
    int fd, rc = obj_open(bef_of(be), bucket, key, &fd, &m);

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
    int rc = check_names(bucket, key);

    if (rc < 0)
        return rc;
    if (!bucket_exists(b, bucket))
        return -S3E_NO_SUCH_BUCKET;
    m = malloc(sizeof(*m));
    if (!m)
        return -ENOMEM;
    *m = *meta;
    rc = tmp_create(b, &t);
    if (rc < 0)
        goto out;
    if (len > 0 && (rc = copy_range(fd, 0, t.fd, len)) < 0) {
        if (rc == -EIO)
            rc = -S3E_INCOMPLETE_BODY;
        goto out;
    }
    rc = tmp_finish(&t, m);
    /* a local copy is quick: a cancel is honoured where it costs nothing, before the object
     * is placed */
    if (rc == 0 && cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
        rc = -ECANCELED;
    if (rc == 0)
        rc = place(b, bucket, key, &t);
out:
    tmp_discard(b, &t);
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
    rc = check_names(dst_bucket, dst_key);
    if (rc < 0)
        goto out;
    rc = obj_open(b, src_bucket, src_key, &sfd, src);
    if (rc < 0)
        goto out;
    if (!bucket_exists(b, dst_bucket)) {
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
    rc = tmp_create(b, &t);
    if (rc < 0)
        goto out;
    if (src->size > 0 && (rc = copy_range(sfd, 0, t.fd, src->size)) < 0)
        goto out;
    rc = tmp_finish(&t, src);
    if (rc == 0)
        rc = place(b, dst_bucket, dst_key, &t);
    if (rc == 0 && out)
        *out = *src;
out:
    tmp_discard(b, &t);
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
    int locked = dir_lock(b, dfd, LOCK_SH), rc = 1;
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
    dir_unlock(dfd, locked);
    return rc;
}

static int be_file_del(struct backend *be, const char *bucket, const char *key)
{
    struct bef *b = bef_of(be);
    char buf[BEF_KEY_MAX + 2];
    char *dirs[BEF_KEY_MAX / 2 + 2];
    const char *leaf;
    size_t n, bad;
    int dfd = -1, nested = 0, syncfd = -1, rc = check_names(bucket, key);

    if (rc < 0)
        return rc;
    n = split_key(key, buf, dirs, &leaf);
    pthread_rwlock_rdlock(&b->parents);
    rc = open_parents(b, bucket, dirs, n, 0, &dfd, &bad);
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
/* Listing                                                                               */

enum { LB_NONE = 0, LB_EXCL, LB_PAST };

struct lw {
    struct bef *b;
    const char *bucket;
    const char *P;
    size_t plen;
    const char *D;
    size_t dlen;
    const char *M;
    size_t mlen;
    unsigned max;
    struct be_list_page *page;
    size_t cap;
    char lb[BEF_KEY_MAX + 2];
    size_t lblen;
    int lbmode;
    unsigned gen;
    int done;
    int rc;
    char key[BEF_KEY_MAX + 2]; /* the directory prefix being walked, then the entry */
};

/* Does the directory @path (relative to root) hold at least one key? Reads with a small
 * getdents64 buffer: the usual answer is the first regular file of the first read. */
_Static_assert(sizeof(struct dirent) == sizeof(struct dirent64) &&
                   offsetof(struct dirent, d_name) == offsetof(struct dirent64, d_name),
               "struct dirent is not the getdents64 record");

/* A directory on the way down a walk: with --follow-symlinks, a link back to one of them (a
 * loop) is not walked again. */
struct anc {
    dev_t dev;
    ino_t ino;
    const struct anc *up;
};

static int anc_loops(const struct anc *up, dev_t dev, ino_t ino)
{
    for (; up; up = up->up)
        if (up->dev == dev && up->ino == ino)
            return 1;
    return 0;
}

static int dir_has_key(struct bef *b, const char *path, int depth, const struct anc *up)
{
    int fd = list_dir_open(b, path);
    char buf[2048] __attribute__((aligned(8)));
    struct anc me = { 0, 0, up };
    struct stat st;
    int found = 0;
    ssize_t n;

    if (fd < 0)
        return 0;
    if (fstat(fd, &st) < 0 || anc_loops(up, st.st_dev, st.st_ino)) {
        close(fd);
        return 0;
    }
    me.dev = st.st_dev;
    me.ino = st.st_ino;
    while (!found && (n = getdents64(fd, buf, sizeof(buf))) > 0) {
        for (ssize_t pos = 0; pos < n && !found;) {
            /* with _FILE_OFFSET_BITS=64, struct dirent is the getdents64 record */
            const struct dirent *de = (const struct dirent *)(buf + pos);
            int type = classify(fd, de, b->follow);
            char sub[PATH_MAX];
            pos += de->d_reclen;
            if (snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) >= (int)sizeof(sub))
                continue;
            if (type == DE_FILE && !b->follow && de->d_type != DT_REG) {
                int lfd, outside; /* a link is a key only when it stays under the root */
                if ((lfd = read_open(b, sub, &outside)) >= 0) {
                    close(lfd);
                    found = 1;
                }
            } else if (type == DE_FILE || type == DE_MARKER || (type == DE_SELF && depth > 0)) {
                found = 1; /* the top directory's own key is no key under it */
            } else if (type == DE_DIR && depth < 256) {
                found = dir_has_key(b, sub, depth + 1, &me);
            }
        }
    }
    close(fd);
    return found;
}

/* Where to start in directory @e (prefix lw->key[0..dplen)) given the lower bound. */
static size_t lw_seek(const struct lw *w, const struct dcent *e, size_t dplen)
{
    const char *S = w->lb, *rest, *slash;
    size_t sl = w->lblen, rl, i;
    int c;

    if (w->lbmode == LB_NONE)
        return 0;
    c = memcmp(S, w->key, S3C_MIN(sl, dplen));
    if (c < 0)
        return 0;
    if (c > 0)
        return e->n;
    if (sl < dplen) /* S is a proper prefix of this directory's keys */
        return w->lbmode == LB_PAST ? e->n : 0;
    rest = S + dplen;
    rl = sl - dplen;
    slash = memchr(rest, '/', rl);
    if (slash) { /* the bound lies inside subdirectory "name/": start there, it re-seeks */
        size_t cl = (size_t)(slash - rest) + 1;
        return dc_lower(e, rest, cl);
    }
    if (w->lbmode == LB_EXCL) {
        i = dc_lower(e, rest, rl);
        return dent_eq(e, i, rest, rl) ? i + 1 : i;
    }
    if (rl == 0)
        return e->n;
    return dc_prefix_end(e, dc_lower(e, rest, rl), rest, rl);
}

static int lw_push(struct lw *w, const char *k, size_t klen, int is_prefix, int nested)
{
    struct be_list_page *pg = w->page;
    struct be_list_entry *en;

    if (pg->n == w->max) {
        pg->truncated = 1;
        w->done = 1;
        return 0;
    }
    if (pg->n == w->cap) {
        size_t ncap = w->cap ? w->cap * 2 : 64;
        struct be_list_entry *p = realloc(pg->entries, ncap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        pg->entries = p;
        w->cap = ncap;
    }
    en = &pg->entries[pg->n];
    memset(en, 0, sizeof(*en));
    if (nested) { /* most directories hold no key of their own name: one stat says so */
        char path[BEF_PATH_MAX];
        struct stat st;
        if (snprintf(path, sizeof(path), "%s/%.*s/%s", w->bucket, (int)klen, k, BEF_SELF) >=
                (int)sizeof(path) ||
            fstatat(w->b->rootfd, path, &st, AT_SYMLINK_NOFOLLOW) < 0)
            return 0;
    }
    if (!is_prefix) {
        struct be_meta *m = malloc(sizeof(*m));
        int fd, rc;
        char key[BEF_KEY_MAX + 1];

        if (!m)
            return -ENOMEM;
        memcpy(key, k, klen);
        key[klen] = '\0';
        rc = obj_open(w->b, w->bucket, key, &fd, m);
        if (rc == -S3E_NO_SUCH_KEY || rc == -S3E_INVALID_KEY || rc == -S3E_KEY_TOO_LONG) {
            free(m); /* vanished since readdir, or a name no key can have: not listed */
            return 0;
        }
        if (rc < 0) {
            free(m);
            return rc;
        }
        close(fd);
        en->size = m->size;
        en->mtime_ns = m->mtime_ns;
        memcpy(en->etag, m->etag, sizeof(en->etag));
        free(m);
    }
    en->key = strndup(k, klen);
    if (!en->key)
        return -ENOMEM;
    en->is_prefix = is_prefix;
    pg->n++;
    return 0;
}

static void lw_set_past(struct lw *w, const char *s, size_t n)
{
    memcpy(w->lb, s, n);
    w->lblen = n;
    w->lbmode = LB_PAST;
    w->gen++;
}

/* Common prefix @cp of a key: listed unless it sorts at or before the marker. */
static int lw_prefix(struct lw *w, const char *cp, size_t cl)
{
    int rc = 0;
    int after = 1;

    if (w->mlen) {
        int c = memcmp(cp, w->M, S3C_MIN(cl, w->mlen));
        after = c > 0 || (c == 0 && cl > w->mlen);
    }
    if (after)
        rc = lw_push(w, cp, cl, 1, 0);
    if (!w->done)
        lw_set_past(w, cp, cl);
    return rc;
}

/* Key w->key[0..@klen) (@nested: the one a directory may hold, see DE_NESTED). */
static int lw_key(struct lw *w, size_t klen, int nested)
{
    const char *k = w->key;

    if (w->dlen && klen > w->plen) {
        const char *d = memmem(k + w->plen, klen - w->plen, w->D, w->dlen);
        if (d)
            return lw_prefix(w, k, (size_t)(d - k) + w->dlen);
    }
    return lw_push(w, k, klen, 0, nested);
}

static int lw_walk(struct lw *w, size_t dplen, int depth, const struct anc *up)
{
    char path[BEF_PATH_MAX];
    struct dcent *e = NULL;
    struct anc me = { 0, 0, up };
    size_t i, pe, pi = 0;
    unsigned gen;
    int rc;

    if (depth > 512)
        return 0;
    snprintf(path, sizeof(path), "%s/%.*s", w->bucket, (int)(dplen ? dplen - 1 : 0), w->key);
    rc = dc_get(w->b, dplen ? path : w->bucket, &e);
    if (rc < 0)
        return rc == -ENOENT || rc == -ENOTDIR || rc == -ELOOP || rc == -EXDEV ? 0 : rc;
    if (anc_loops(up, e->dev, e->ino)) { /* a linked directory leading back up */
        dc_release(&w->b->dc, e);
        return 0;
    }
    me.dev = e->dev;
    me.ino = e->ino;
    pe = e->n;
    if (w->plen > dplen) { /* only entries on the way to, or inside, the prefix */
        const char *prest = w->P + dplen;
        size_t prl = w->plen - dplen;
        const char *slash = memchr(prest, '/', prl);
        if (slash) {
            size_t cl = (size_t)(slash - prest) + 1;
            pi = dc_lower(e, prest, cl);
            pe = dent_eq(e, pi, prest, cl) ? pi + 1 : pi;
        } else {
            pi = dc_lower(e, prest, prl);
            pe = dc_prefix_end(e, pi, prest, prl);
        }
    }
    gen = w->gen;
    i = S3C_MAX(pi, lw_seek(w, e, dplen));
    for (; i < pe && !w->done; i++) {
        const struct dent *d;
        size_t klen;

        if (w->gen != gen) {
            gen = w->gen;
            i = S3C_MAX(i, lw_seek(w, e, dplen));
            if (i >= pe)
                break;
        }
        d = &e->ents[i];
        klen = dplen + d->len;
        if (klen > BEF_KEY_MAX)
            continue;
        memcpy(w->key + dplen, dent_name(e, i), d->len);
        if (d->type == DE_DIR) {
            if (w->dlen == 1 && w->D[0] == '/' && klen > w->plen) {
                /* Fast path: the whole subdirectory is one common prefix. */
                int after = 1;
                if (w->lbmode != LB_NONE) {
                    int c = memcmp(w->key, w->lb, S3C_MIN(klen, w->lblen));
                    after = c > 0 || (c == 0 && klen > w->lblen);
                }
                if (!after)
                    continue;
                snprintf(path, sizeof(path), "%s/%.*s", w->bucket, (int)klen - 1, w->key);
                if (!dir_has_key(w->b, path, 0, &me))
                    continue;
                rc = lw_prefix(w, w->key, klen);
            } else {
                rc = lw_walk(w, klen, depth + 1, &me);
            }
        } else {
            rc = lw_key(w, klen, d->type == DE_NESTED);
        }
        if (rc < 0)
            break;
    }
    dc_release(&w->b->dc, e);
    return rc < 0 ? rc : 0;
}

static int be_file_list(struct backend *be, const struct be_list_req *rq,
                        struct be_list_page *out)
{
    struct bef *b = bef_of(be);
    struct lw *w;
    int rc = backend_check_bucket_name(rq->bucket);

    memset(out, 0, sizeof(*out));
    if (rc < 0)
        return rc;
    if (!bucket_exists(b, rq->bucket))
        return -S3E_NO_SUCH_BUCKET;
    if (rq->max_keys == 0)
        return 0;
    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->b = b;
    w->bucket = rq->bucket;
    w->P = rq->prefix ? rq->prefix : "";
    w->plen = strlen(w->P);
    w->D = rq->delimiter ? rq->delimiter : "";
    w->dlen = strlen(w->D);
    w->M = rq->marker ? rq->marker : "";
    w->mlen = strlen(w->M);
    w->max = rq->max_keys;
    w->page = out;
    if (w->plen > BEF_KEY_MAX)
        goto out; /* no key can match */
    if (w->mlen) {
        if (w->mlen > BEF_KEY_MAX) {
            /* a longer marker sorts after the keys it shares BEF_KEY_MAX bytes with */
            memcpy(w->lb, w->M, BEF_KEY_MAX);
            w->lblen = BEF_KEY_MAX;
            w->lbmode = LB_PAST;
        } else {
            memcpy(w->lb, w->M, w->mlen);
            w->lblen = w->mlen;
            w->lbmode = LB_EXCL;
        }
    }
    rc = lw_walk(w, 0, 0, NULL);
    if (rc == 0 && out->truncated && out->n) {
        out->next_marker = strdup(out->entries[out->n - 1].key);
        if (!out->next_marker)
            rc = -ENOMEM;
    }
out:
    free(w);
    if (rc < 0)
        be_list_page_free(out);
    return rc;
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
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct be_bucket *p = realloc(v, ncap * sizeof(*p));
            if (!p) {
                free(v);
                closedir(d);
                return -ENOMEM;
            }
            v = p;
            cap = ncap;
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
    return bucket_exists(bef_of(be), bucket) ? 0 : -S3E_NO_SUCH_BUCKET;
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
    if (!bucket_exists(b, bucket))
        return -S3E_NO_SUCH_BUCKET;
    if (dir_has_key(b, bucket, 0, NULL))
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
/* Multipart                                                                             */

static int upload_id_ok(const char *id)
{
    size_t n = 0;

    if (!id)
        return 0;
    for (; id[n]; n++)
        if (!((id[n] >= '0' && id[n] <= '9') || (id[n] >= 'a' && id[n] <= 'f')))
            return 0;
    return n == 32;
}

/* Removes directory @name under @parent and its plain-file contents. */
static void rm_flat_dir(int parent, const char *name)
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
    rc = n < 0 ? -errno : rec_decode(buf, (size_t)n, r);
    close(fd);
    free(buf);
    return rc;
}

/* Writes @e atomically as @name under @dfd (temp file, fsync, rename). */
static int rec_write_file(struct bef *b, const struct enc *e, int dfd, const char *name)
{
    struct tmpf t = { .fd = -1 };
    int rc = tmp_create(b, &t);

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
    tmp_discard(b, &t);
    return rc;
}

/* Opens upload @id of @bucket/@key: its directory fd and its info record. */
static int upload_open(struct bef *b, const char *bucket, const char *key, const char *id,
                       int *dfd, struct rec *info)
{
    int rc = check_names(bucket, key), fd;

    if (rc < 0)
        return rc;
    if (!upload_id_ok(id))
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

static int be_file_mp_create(struct backend *be, const char *bucket, const char *key,
                             const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX])
{
    struct bef *b = bef_of(be);
    char id[33], stage[48];
    struct enc *e = NULL;
    int fd = -1, rc = check_names(bucket, key);

    if (rc < 0)
        return rc;
    if (!bucket_exists(b, bucket))
        return -S3E_NO_SUCH_BUCKET;
    random_hex(id, 16);
    snprintf(stage, sizeof(stage), "u.%s", id);
    e = malloc(sizeof(*e));
    if (!e)
        return -ENOMEM;
    enc_init(e);
    enc_str(e, T_BUCKET, bucket);
    enc_str(e, T_KEY, key);
    enc_num(e, T_INIT, s3c_real_ns());
    enc_meta(e, meta);
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
        rm_flat_dir(b->tmpfd, stage);
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
    enc_init(e);
    enc_num(e, T_NUMBER, p->number);
    enc_str(e, T_ETAG, p->etag);
    enc_num(e, T_SIZE, (int64_t)p->size);
    enc_num(e, T_MTIME, p->mtime_ns);
    enc_str(e, T_CKALGO, p->checksum_algo);
    enc_str(e, T_CK, p->checksum);
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
 * second attempt at once, a re-upload of a part in place) is its own file "part.NNNNN".
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
 * the part does not go in place (small, another size, or "data" still being made). */
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
 * @number is in place (only a holder of the slot's lock records one). */
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
 * record is placed, 1 when it does not go in place (then nothing was written there), or an
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
    rc = copy_range_to(src, 0, dfd, (uint64_t)(p->number - 1) * psize, p->size);
    if (rc == -EIO)
        rc = -S3E_INCOMPLETE_BODY;
    if (rc == 0 && fdatasync(dfd) < 0)
        rc = -errno;
    if (rc == 0)
        rc = tmp_create(b, &t);
    if (rc == 0 && fstat(t.fd, &st) < 0)
        rc = -errno;
    if (rc == 0) {
        p->mtime_ns = ts_ns(&st.st_mtim);
        rc = part_stamp(&t, p);
    }
    if (rc == 0)
        rc = part_publish(b, udfd, &t, p->number, 1);
    close(dfd); /* the slot's lock goes after the record is placed */
    tmp_discard(b, &t);
    return rc;
}

static int be_file_mp_put_part(struct backend *be, const char *bucket, const char *key,
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
    rc = tmp_create(b, &t);
    if (rc < 0)
        goto out;
    if (p.size > 0 && (rc = copy_range(fd, 0, t.fd, p.size)) < 0) {
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
    tmp_discard(b, &t);
    if (udfd >= 0)
        close(udfd);
    free(info);
    return rc;
}

static int be_file_mp_copy_part(struct backend *be, const char *bucket, const char *key,
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
    rc = obj_open(b, src_bucket, src_key, &sfd, sm);
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
    rc = tmp_create(b, &t);
    if (rc < 0)
        goto out;
    if (len > 0 && (rc = copy_range(sfd, off, t.fd, len)) < 0)
        goto out;
    rc = md5_fd(t.fd, 0, len, p.etag); /* the copy, so the ETag matches the stored bytes */
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
    tmp_discard(b, &t);
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
    else if (n <= 0 || rec_decode(buf, (size_t)n, r) < 0)
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

/* An ETag as the client sent it: optional quotes, any case. */
static int etag_match(const char *want, const char *have)
{
    size_t n = strlen(want);

    if (n >= 2 && want[0] == '"' && want[n - 1] == '"') {
        want++;
        n -= 2;
    }
    return n == strlen(have) && strncasecmp(want, have, n) == 0;
}

static void sweep_completed(struct bef *b)
{
    int64_t now = s3c_real_ns();
    int64_t last = __atomic_load_n(&b->last_sweep_ns, __ATOMIC_RELAXED);
    struct dirent *de;
    DIR *d;
    int fd;

    if (now - last < BEF_SWEEP_EVERY_NS ||
        !__atomic_compare_exchange_n(&b->last_sweep_ns, &last, now, 0, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED))
        return;
    fd = openat(b->donefd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || !(d = fdopendir(fd))) {
        if (fd >= 0)
            close(fd);
        return;
    }
    while ((de = readdir(d))) {
        struct stat st;
        if (de->d_name[0] == '.')
            continue;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            ts_ns(&st.st_mtim) < now - BEF_COMPLETED_TTL_NS)
            (void)unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
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
 * data file for a part in place, *@inplace) and its record, -S3E_INVALID_PART when the part
 * under that number is no longer the one named (replaced since it was looked at). */
static int part_open_named(int udfd, const struct be_part *want, int *fdp, uint64_t *offp,
                           int *inplace, struct be_part *p)
{
    int rc = part_open(udfd, want->number, fdp, offp, inplace, p);

    if (rc == 0 && !etag_match(want->etag, p->etag)) {
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
            rc = copy_range_to(pfd, off, dfd, (uint64_t)i * psize, p.size);
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
    for (int i = 0; i < 8; i++) { /* a random name, as tmp_create() gives */
        memcpy(t->name, "t.", 2);
        random_hex(t->name + 2, 12);
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
    int rc = tmp_create(b, t);

    for (size_t i = 0; i < n && rc == 0; i++) {
        struct be_part p;
        uint64_t off;
        int inplace = 0, pfd = -1;
        char md5[33];
        rc = part_open_named(udfd, &parts[i], &pfd, &off, &inplace, &p);
        if (rc == 0 && p.size)
            rc = copy_range(pfd, off, t->fd, p.size);
        if (pfd >= 0)
            close(pfd);
        if (rc == 0 && verify && inplace && (rc = md5_fd(t->fd, at, p.size, md5)) == 0 &&
            strcmp(md5, p.etag))
            rc = -S3E_INVALID_PART;
        at += p.size;
    }
    return rc;
}

static int be_file_mp_complete(struct backend *be, const char *bucket, const char *key,
                               const char *upload_id, const struct be_part *parts, size_t n,
                               struct be_meta *out)
{
    struct bef *b = bef_of(be);
    struct tmpf t = { .fd = -1 };
    struct rec *info = malloc(sizeof(*info));
    struct enc *e = malloc(sizeof(*e));
    unsigned char *md5s = NULL;
    struct mpu_slot_use *use = NULL;
    char phash[33], gone[48];
    int udfd = -1, dfd = -1, rc;

    if (!info || !e) {
        rc = -ENOMEM;
        goto out;
    }
    sweep_completed(b);
    if (n == 0 || n > BE_MAX_PARTS) {
        rc = -S3E_MALFORMED_XML;
        goto out;
    }
    rc = be_parts_hash(parts, n, phash);
    if (rc < 0)
        goto out;
    rc = upload_open(b, bucket, key, upload_id, &udfd, info);
    if (rc == -S3E_NO_SUCH_UPLOAD && upload_id_ok(upload_id)) {
        rc = complete_again(b, bucket, key, upload_id, phash, out);
        goto out;
    }
    if (rc < 0)
        goto out;
    for (size_t i = 1; i < n; i++)
        if (parts[i].number <= parts[i - 1].number) {
            rc = -S3E_INVALID_PART_ORDER;
            goto out;
        }
    uint64_t part_size_uniform = 0;
    md5s = malloc(16 * n);
    use = malloc(n * sizeof(*use));
    if (!md5s || !use) {
        rc = -ENOMEM;
        goto out;
    }
    /* Holding the whole data file keeps every attempt out of its slots until the end (the file
     * may become the object); without it (an attempt is writing a slot), the parts are copied. */
    uint64_t psize = 0;
    dfd = openat(udfd, "data", O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    int whole = dfd >= 0 && mpu_slot_lock_all(dfd) == 0;
    if (dfd >= 0 && data_psize(dfd, &psize) < 0)
        psize = 0;
    /* Validate every part before writing anything. */
    for (size_t i = 0; i < n; i++) {
        struct be_part p;
        int inplace = 0;
        rc = part_open(udfd, parts[i].number, NULL, NULL, &inplace, &p);
        if (rc < 0)
            goto out;
        use[i].number = parts[i].number;
        use[i].size = p.size;
        use[i].inplace = inplace;
        if (!etag_match(parts[i].etag, p.etag) || strlen(p.etag) != 32) {
            rc = -S3E_INVALID_PART;
            goto out;
        }
        for (int j = 0; j < 16; j++)
            md5s[16 * i + j] = (unsigned char)(hex_val(p.etag[2 * j]) << 4 |
                                               hex_val(p.etag[2 * j + 1]));
        if (i + 1 < n && p.size < BE_MIN_PART_SIZE) {
            rc = -S3E_ENTITY_TOO_SMALL;
            goto out;
        }
        /* GET ?partNumber=N needs the part layout: kept when all but the last are equal. */
        if (i == 0)
            part_size_uniform = p.size;
        else if (i + 1 < n && p.size != part_size_uniform)
            part_size_uniform = 0;
        else if (i + 1 == n && p.size > part_size_uniform)
            part_size_uniform = 0;
    }
    int fast = whole && mpu_slot_plan(use, n, psize, inplace_max(udfd));
    if (fast)
        rc = complete_inplace(b, udfd, dfd, parts, use, n, psize, &t);
    else
        rc = complete_copy(b, udfd, parts, n, !whole, &t);
    if (rc < 0)
        goto out;
    info->m.parts_count = (uint32_t)n;
    info->m.part_size = part_size_uniform;
    info->m.checksum_algo[0] = info->m.checksum[0] = '\0';
    rc = md5_hex_of(md5s, 16 * n, info->m.etag);
    if (rc < 0)
        goto out;
    snprintf(info->m.etag + 32, sizeof(info->m.etag) - 32, "-%zu", n);
    rc = tmp_finish(&t, &info->m);
    if (rc == 0)
        rc = place(b, bucket, key, &t);
    if (rc < 0)
        goto out;
    if (fast) /* the data file is the object: no attempt may take it for the upload's again */
        (void)fremovexattr(dfd, BEF_PSIZE_XATTR);
    /* The record for a repeated Complete, then the upload goes away. */
    enc_init(e);
    enc_str(e, T_BUCKET, bucket);
    enc_str(e, T_KEY, key);
    enc_str(e, T_PHASH, phash);
    enc_num(e, T_SIZE, (int64_t)info->m.size);
    enc_num(e, T_MTIME, info->m.mtime_ns);
    enc_meta(e, &info->m);
    if (!e->err)
        (void)rec_write_file(b, e, b->donefd, upload_id);
    snprintf(gone, sizeof(gone), "x.%s", upload_id);
    if (renameat(b->upfd, upload_id, b->tmpfd, gone) == 0)
        rm_flat_dir(b->tmpfd, gone);
    if (out)
        *out = info->m;
out:
    tmp_discard(b, &t);
    if (dfd >= 0)
        close(dfd); /* the data file's lock goes once the upload is gone */
    if (udfd >= 0)
        close(udfd);
    free(md5s);
    free(use);
    free(info);
    free(e);
    return rc;
}

static int be_file_mp_abort(struct backend *be, const char *bucket, const char *key,
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
    rm_flat_dir(b->tmpfd, gone);
    return 0;
}

static int uint_cmp(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

static int be_file_mp_list_parts(struct backend *be, const char *bucket, const char *key,
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
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            unsigned *p = realloc(nums, ncap * sizeof(*p));
            if (!p) {
                rc = -ENOMEM;
                goto out;
            }
            nums = p;
            cap = ncap;
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

static int upload_cmp(const void *a, const void *b)
{
    const struct be_upload *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : strcmp(x->upload_id, y->upload_id);
}

static int be_file_mp_list_uploads(struct backend *be, const char *bucket, const char *prefix,
                                   const char *key_marker, const char *upload_id_marker,
                                   unsigned max, struct be_upload **out, size_t *n,
                                   int *truncated)
{
    struct bef *b = bef_of(be);
    struct rec *r = malloc(sizeof(*r));
    struct be_upload *v = NULL;
    size_t cnt = 0, cap = 0, plen = prefix ? strlen(prefix) : 0, k = 0;
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
    if (!bucket_exists(b, bucket)) {
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
        if (!upload_id_ok(de->d_name))
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
        if (key_marker && *key_marker) {
            int c = strcmp(r->key, key_marker);
            if (c < 0)
                continue;
            if (c == 0 && (!upload_id_marker || !*upload_id_marker ||
                           strcmp(de->d_name, upload_id_marker) <= 0))
                continue;
        }
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct be_upload *p = realloc(v, ncap * sizeof(*p));
            if (!p) {
                rc = -ENOMEM;
                goto out;
            }
            v = p;
            cap = ncap;
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
    if (cnt > 1)
        qsort(v, cnt, sizeof(*v), upload_cmp);
    if (cnt > max) {
        for (k = max; k < cnt; k++)
            free(v[k].key);
        cnt = max;
        *truncated = 1;
    }
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

/* ------------------------------------------------------------------------------------ */
/* Open and close                                                                        */

/* Removes temp files older than BEF_TMP_TTL_NS (a crash's leftovers). */
static void sweep_tmp(struct bef *b)
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
            rm_flat_dir(dirfd(d), de->d_name);
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
    dc_destroy(&b->dc);
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

/* Whether the file system of @dirfd keeps its data on a local disk (or in memory): ext4, xfs,
 * btrfs, f2fs, zfs, tmpfs, overlayfs. A network or FUSE file system (NFS, Lustre, CephFS,
 * GPFS, SMB, 9p...) is not: reading one may stall on the network. */
static int on_local_disk(int dirfd)
{
    static const unsigned long local[] = {
        0xEF53,     /* ext2/3/4 */
        0x58465342, /* xfs */
        0x9123683E, /* btrfs */
        0xF2F52010, /* f2fs */
        0x2FC12FC1, /* zfs */
        0x01021994, /* tmpfs */
        0x794C7630, /* overlayfs */
    };
    struct statfs sf;
    if (fstatfs(dirfd, &sf) < 0)
        return 0;
    for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++)
        if ((unsigned long)sf.f_type == local[i])
            return 1;
    return 0;
}

/* Whether renameat2(RENAME_EXCHANGE) swaps a file and a directory in tmp/ (ext4, xfs, btrfs,
 * tmpfs, f2fs: yes; NFS and most FUSE file systems: no). */
static int probe_exchange(struct bef *b)
{
    char f[32], d[32];
    int fd, ok;

    memcpy(f, "x.", 2);
    random_hex(f + 2, 12);
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
    if (!b->root || dc_init(&b->dc) < 0) {
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
    sweep_tmp(b);
    b->can_exchange = probe_exchange(b);
    b->have_openat2 = probe_openat2(b);
    b->be.caps = BE_CAP_LOCAL_FD | (on_local_disk(b->rootfd) ? BE_CAP_LOCAL_DISK : 0);
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
