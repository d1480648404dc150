/*
 * be_file_dircache.c: the POSIX backend's directory cache: a bounded LRU of directories'
 * entries, sorted by their "virtual names" (S3 key order) and validated by the directory's
 * inode and mtime, so that a page of a huge directory is a binary search.
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
#include "mpu_slot.h"

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

void bef_dc_release(struct dircache *dc, struct dcent *e)
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

int bef_dc_init(struct dircache *dc)
{
    memset(dc, 0, sizeof(*dc));
    dc->tab = calloc(BEF_DC_NBUCKETS, sizeof(*dc->tab));
    if (!dc->tab)
        return -ENOMEM;
    dc->lru.next = dc->lru.prev = &dc->lru;
    pthread_mutex_init(&dc->mu, NULL);
    return 0;
}

void bef_dc_destroy(struct dircache *dc)
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
int bef_classify(int dfd, const struct dirent *d, int follow)
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
    if (ARR_GROW(e->ents, e->n, 1, *cap))
        return -ENOMEM;
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
        type = bef_classify(dirfd(d), de, follow);
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


/* Opens directory @path (relative to the root) for listing: through no symlink at all (a
 * listing never walks a linked directory), or as the links say with --follow-symlinks. */
int bef_list_dir_open(struct bef *b, const char *path)
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
    return fd == -ENOSYS ? bef_open_nofollow(b, path, flags) : fd;
}

/* A referenced, sorted listing of directory @path (relative to the root). Release with
 * bef_dc_release(). -ENOENT/-ENOTDIR/-ELOOP when it is not a directory reached without a symlink
 * (with --follow-symlinks, any directory). */
int bef_dc_get(struct bef *b, const char *path, struct dcent **out)
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
    fd = bef_list_dir_open(b, path);
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

const char *bef_dent_name(const struct dcent *e, size_t i)
{
    return e->arena + e->ents[i].off;
}

/* First index whose virtual name is >= (@s, @n). */
size_t bef_dc_lower(const struct dcent *e, const char *s, size_t n)
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
size_t bef_dc_prefix_end(const struct dcent *e, size_t lo, const char *s, size_t n)
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

int bef_dent_eq(const struct dcent *e, size_t i, const char *s, size_t n)
{
    return i < e->n && e->ents[i].len == n && memcmp(bef_dent_name(e, i), s, n) == 0;
}

