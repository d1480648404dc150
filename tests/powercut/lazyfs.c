/*
 * lazyfs.c: a FUSE file system that forgets, on command, everything not made durable: the
 * power cut of tests/e2e/79-power-cut.py (after Jepsen's LazyFS). Every file and directory
 * lives in this process's memory in two versions:
 *   - the volatile one, what the gateway sees: every write, truncate, create, mkdir, rename
 *     and unlink lands there at once;
 *   - the durable one, what a power cut leaves: a file's data and size become durable only at
 *     an fsync()/fdatasync() of it, a directory's entries (names, and which file each names)
 *     only at an fsync() of that directory. A file created, written and fsync'd whose
 *     directory was never fsync'd is gone after the cut; a rename not followed by an fsync of
 *     both directories did not happen.
 * Writing "dump DIR" to the file ".lazyfs-ctl" at the root writes the durable tree under DIR
 * (a plain directory the gateway is then restarted on) and answers once it is written;
 * "stats" makes the next read of the file say how many fsyncs were seen. With LAZYFS_IGNORE
 * set, an fsync/fdatasync of a file whose path contains that string is taken and ignored (not
 * of a directory): a gateway missing that fsync, to show the test catches it.
 * Hard links are names like any other (durable with their directory). Not supported
 * (ENOSYS/EOPNOTSUPP): symlinks, xattrs, O_TMPFILE. Single lock over
 * everything: a test tool, not a file system to be fast.
 *
 * Build: cc -O2 lazyfs.c $(pkg-config --cflags --libs fuse3) -o lazyfs
 * Run:   lazyfs MOUNTPOINT [fuse options]   (foreground; fusermount3 -u MOUNTPOINT ends it)
 */
#define FUSE_USE_VERSION 35
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CTL_NAME ".lazyfs-ctl"

struct blob {
    unsigned char *p;
    size_t size, cap;
};

struct node;
struct dent {
    char *name;
    struct node *n;
};
struct dents {
    struct dent *v;
    size_t n, cap;
};

struct node {
    uint64_t ino;
    int dir;
    mode_t mode;
    struct timespec mtime;
    unsigned nlink, open;
    struct blob vol, dur;         /* files */
    int dirty;                    /* vol differs from dur */
    struct dents ents, dents_dur; /* directories */
    char *path;                   /* its last name (create, rename): what LAZYFS_IGNORE matches */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct node *root;
static uint64_t next_ino = 1;
static const char *ignore_pat;
static unsigned long n_fsync, n_fsyncdir, n_ignored;

static struct node *node_new(int dir, mode_t mode)
{
    struct node *n = calloc(1, sizeof(*n));
    if (!n)
        abort();
    n->ino = next_ino++;
    n->dir = dir;
    n->mode = (dir ? S_IFDIR : S_IFREG) | (mode & 07777);
    n->nlink = dir ? 2 : 0;
    clock_gettime(CLOCK_REALTIME, &n->mtime);
    return n;
}

static int blob_resize(struct blob *b, size_t size)
{
    if (size > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < size)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p)
            return -ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    if (size > b->size)
        memset(b->p + b->size, 0, size - b->size);
    b->size = size;
    return 0;
}

static int blob_copy(struct blob *to, const struct blob *from)
{
    to->size = 0;
    int rc = blob_resize(to, from->size);
    if (!rc && from->size)
        memcpy(to->p, from->p, from->size);
    return rc;
}

static struct dent *dents_find(struct dents *d, const char *name)
{
    for (size_t i = 0; i < d->n; i++)
        if (!strcmp(d->v[i].name, name))
            return &d->v[i];
    return NULL;
}

static int dents_add(struct dents *d, const char *name, struct node *n)
{
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 16;
        struct dent *v = realloc(d->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        d->v = v;
        d->cap = cap;
    }
    d->v[d->n].name = strdup(name);
    d->v[d->n].n = n;
    d->n++;
    return 0;
}

static void dents_del(struct dents *d, struct dent *e)
{
    free(e->name);
    *e = d->v[--d->n];
}

static void dents_copy(struct dents *to, const struct dents *from)
{
    for (size_t i = 0; i < to->n; i++)
        free(to->v[i].name);
    to->n = 0;
    for (size_t i = 0; i < from->n; i++)
        (void)dents_add(to, from->v[i].name, from->v[i].n);
}

/* The node at @path in the volatile tree, NULL if none; *@parent and *@leaf for the last
 * component when @parent is given (the parent must exist). */
static struct node *resolve(const char *path, struct node **parent, const char **leaf)
{
    static __thread char buf[4096];
    struct node *cur = root, *par = NULL;
    const char *last = "";
    if (!path) {
        if (parent)
            *parent = NULL;
        return NULL;
    }
    snprintf(buf, sizeof(buf), "%s", path);
    char *save = NULL;
    for (char *tok = strtok_r(buf, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
        if (!cur || !cur->dir) {
            cur = NULL;
            par = NULL;
            break;
        }
        par = cur;
        last = tok;
        struct dent *e = dents_find(&cur->ents, tok);
        cur = e ? e->n : NULL;
    }
    if (parent)
        *parent = par;
    if (leaf)
        *leaf = last;
    return cur;
}

/* fi->fh of the open control file (nodes are pointers: never 1) */
#define CTL_FH ((uint64_t)1)

/* @path is NULL for an open file (nullpath_ok): then fi->fh says which. */
static int is_ctl(const char *path, const struct fuse_file_info *fi)
{
    return (fi && fi->fh == CTL_FH) || (path && !strcmp(path, "/" CTL_NAME));
}

/* The node of an open file, or the one at @path. */
static struct node *node_of(const char *path, const struct fuse_file_info *fi);

static struct node *node_of(const char *path, const struct fuse_file_info *fi)
{
    if (fi && fi->fh && fi->fh != CTL_FH)
        return (struct node *)(uintptr_t)fi->fh;
    return resolve(path, NULL, NULL);
}

static void fill_stat(const struct node *n, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = n->ino;
    st->st_mode = n->mode;
    st->st_nlink = n->dir ? 2 : (n->nlink ? n->nlink : 1);
    st->st_size = n->dir ? 4096 : (off_t)n->vol.size;
    st->st_blocks = n->dir ? 8 : (blkcnt_t)((n->vol.size + 511) / 512);
    st->st_blksize = 4096;
    st->st_mtim = st->st_ctim = st->st_atim = n->mtime;
    st->st_uid = getuid();
    st->st_gid = getgid();
}

static void touch(struct node *n)
{
    clock_gettime(CLOCK_REALTIME, &n->mtime);
}

/* ---- the dump: the durable tree into a plain directory --------------------------------- */

static int dump_dir(const struct node *d, const char *to, int depth)
{
    if (depth > 64)
        return -ELOOP;
    if (mkdir(to, 0755) && errno != EEXIST)
        return -errno;
    for (size_t i = 0; i < d->dents_dur.n; i++) {
        const struct dent *e = &d->dents_dur.v[i];
        char p[4096];
        snprintf(p, sizeof(p), "%s/%s", to, e->name);
        if (e->n->dir) {
            int rc = dump_dir(e->n, p, depth + 1);
            if (rc)
                return rc;
            continue;
        }
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, e->n->mode & 07777);
        if (fd < 0)
            return -errno;
        size_t off = 0;
        while (off < e->n->dur.size) {
            ssize_t w = write(fd, e->n->dur.p + off, e->n->dur.size - off);
            if (w <= 0) {
                close(fd);
                return -EIO;
            }
            off += (size_t)w;
        }
        close(fd);
    }
    return 0;
}

static char ctl_answer[256];

static int ctl_command(const char *cmd, size_t len)
{
    char buf[4200];
    if (len >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, cmd, len);
    buf[len] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    if (!strncmp(buf, "dump ", 5)) {
        int rc = dump_dir(root, buf + 5, 0);
        snprintf(ctl_answer, sizeof(ctl_answer), "dump %d\n", rc);
        return rc;
    }
    if (!strcmp(buf, "stats")) {
        snprintf(ctl_answer, sizeof(ctl_answer), "fsync %lu fsyncdir %lu ignored %lu\n", n_fsync,
                 n_fsyncdir, n_ignored);
        return 0;
    }
    return -EINVAL;
}

/* ---- operations ------------------------------------------------------------------------- */

static void *lz_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
    (void)conn;
    cfg->use_ino = 1;
    cfg->entry_timeout = 0;
    cfg->attr_timeout = 0;
    cfg->negative_timeout = 0;
    cfg->hard_remove = 1; /* an unlinked open file stays ours, not a .fuse_hidden rename */
    cfg->nullpath_ok = 1; /* and its operations come with a NULL path and fi->fh */
    return NULL;
}

static int lz_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
    if (is_ctl(path, fi)) {
        memset(st, 0, sizeof(*st));
        st->st_mode = S_IFREG | 0600;
        st->st_nlink = 1;
        st->st_size = (off_t)strlen(ctl_answer);
        return 0;
    }
    pthread_mutex_lock(&mu);
    struct node *n = node_of(path, fi);
    if (n)
        fill_stat(n, st);
    pthread_mutex_unlock(&mu);
    return n ? 0 : -ENOENT;
}

static int lz_opendir(const char *path, struct fuse_file_info *fi)
{
    pthread_mutex_lock(&mu);
    struct node *d = resolve(path, NULL, NULL);
    int rc = !d ? -ENOENT : !d->dir ? -ENOTDIR : 0;
    fi->fh = rc ? 0 : (uintptr_t)d;
    pthread_mutex_unlock(&mu);
    return rc;
}

static int lz_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
    (void)off;
    (void)flags;
    pthread_mutex_lock(&mu);
    struct node *d = node_of(path, fi);
    int rc = !d ? -ENOENT : !d->dir ? -ENOTDIR : 0;
    if (!rc) {
        fill(buf, ".", NULL, 0, 0);
        fill(buf, "..", NULL, 0, 0);
        for (size_t i = 0; i < d->ents.n; i++)
            fill(buf, d->ents.v[i].name, NULL, 0, 0);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static int lz_mknode(const char *path, mode_t mode, int dir, struct node **out)
{
    struct node *par;
    const char *leaf;
    if (resolve(path, &par, &leaf))
        return -EEXIST;
    if (!par || !par->dir)
        return -ENOENT;
    struct node *n = node_new(dir, mode);
    n->nlink = 1;
    n->path = strdup(path);
    int rc = dents_add(&par->ents, leaf, n);
    if (!rc)
        touch(par);
    *out = n;
    return rc;
}

static int lz_mkdir(const char *path, mode_t mode)
{
    struct node *n;
    pthread_mutex_lock(&mu);
    int rc = lz_mknode(path, mode, 1, &n);
    pthread_mutex_unlock(&mu);
    return rc;
}

static int lz_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    if (fi->flags & O_TMPFILE)
        return -EOPNOTSUPP;
    struct node *n;
    pthread_mutex_lock(&mu);
    int rc = lz_mknode(path, mode, 0, &n);
    if (!rc) {
        n->open++;
        fi->fh = (uintptr_t)n;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static int lz_open(const char *path, struct fuse_file_info *fi)
{
    if (is_ctl(path, NULL)) {
        fi->fh = CTL_FH;
        fi->direct_io = 1;
        return 0;
    }
    pthread_mutex_lock(&mu);
    struct node *n = resolve(path, NULL, NULL);
    int rc = !n ? -ENOENT : n->dir ? -EISDIR : 0;
    if (!rc) {
        if (fi->flags & O_TRUNC) {
            n->vol.size = 0;
            n->dirty = 1;
        }
        n->open++;
        fi->fh = (uintptr_t)n;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static int lz_release(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    pthread_mutex_lock(&mu);
    struct node *n = node_of(NULL, fi);
    if (n && n->open)
        n->open--;
    pthread_mutex_unlock(&mu);
    return 0;
}

static int lz_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
    if (is_ctl(path, fi)) {
        size_t l = strlen(ctl_answer);
        if ((size_t)off >= l)
            return 0;
        size_t k = l - (size_t)off < size ? l - (size_t)off : size;
        memcpy(buf, ctl_answer + off, k);
        return (int)k;
    }
    pthread_mutex_lock(&mu);
    struct node *n = node_of(NULL, fi);
    int got = 0;
    if (n && (size_t)off < n->vol.size) {
        size_t k = n->vol.size - (size_t)off < size ? n->vol.size - (size_t)off : size;
        memcpy(buf, n->vol.p + off, k);
        got = (int)k;
    }
    pthread_mutex_unlock(&mu);
    return got;
}

static int lz_write(const char *path, const char *buf, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    if (is_ctl(path, fi)) {
        pthread_mutex_lock(&mu);
        int rc = ctl_command(buf, size);
        pthread_mutex_unlock(&mu);
        return rc ? rc : (int)size;
    }
    pthread_mutex_lock(&mu);
    struct node *n = node_of(NULL, fi);
    int rc = -EBADF;
    if (n) {
        size_t end = (size_t)off + size;
        rc = end > n->vol.size ? blob_resize(&n->vol, end) : 0;
        if (!rc) {
            memcpy(n->vol.p + off, buf, size);
            n->dirty = 1;
            touch(n);
            rc = (int)size;
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static int lz_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
    if (is_ctl(path, fi))
        return 0;
    pthread_mutex_lock(&mu);
    struct node *n = node_of(path, fi);
    int rc = !n ? -ENOENT : n->dir ? -EISDIR : 0;
    if (!rc) {
        if ((size_t)size < n->vol.size)
            n->vol.size = (size_t)size;
        else
            rc = blob_resize(&n->vol, (size_t)size);
        n->dirty = 1;
        touch(n);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static int lz_fallocate(const char *path, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
    (void)path;
    pthread_mutex_lock(&mu);
    struct node *n = node_of(NULL, fi);
    int rc = n ? 0 : -EBADF;
    size_t end = (size_t)off + (size_t)len;
    if (!rc && mode == (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)) {
        if ((size_t)off < n->vol.size)
            memset(n->vol.p + off, 0, (end < n->vol.size ? end : n->vol.size) - (size_t)off);
        n->dirty = 1;
    } else if (!rc && (mode == 0 || mode == FALLOC_FL_KEEP_SIZE)) {
        if (mode == 0 && end > n->vol.size) {
            rc = blob_resize(&n->vol, end);
            n->dirty = 1;
        }
    } else if (!rc) {
        rc = -EOPNOTSUPP;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static int lz_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
    (void)datasync;
    pthread_mutex_lock(&mu);
    struct node *n = node_of(NULL, fi);
    int rc = n ? 0 : -EBADF;
    n_fsync++;
    path = n && n->path ? n->path : path; /* nullpath_ok: the path is not passed */
    if (getenv("LAZYFS_TRACE"))
        fprintf(stderr, "fsync %s%s\n", path ? path : "?", datasync ? " data" : "");
    if (!rc && ignore_pat && path && strstr(path, ignore_pat)) {
        n_ignored++;
    } else if (!rc && n->dirty) {
        rc = blob_copy(&n->dur, &n->vol);
        n->dirty = rc != 0;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static int lz_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi)
{
    (void)datasync;
    pthread_mutex_lock(&mu);
    struct node *d = node_of(path, fi);
    int rc = !d ? -ENOENT : !d->dir ? -ENOTDIR : 0;
    n_fsyncdir++;
    if (!rc)
        dents_copy(&d->dents_dur, &d->ents);
    pthread_mutex_unlock(&mu);
    return rc;
}

static int lz_unlink(const char *path)
{
    pthread_mutex_lock(&mu);
    struct node *par;
    const char *leaf;
    struct node *n = resolve(path, &par, &leaf);
    int rc = !n ? -ENOENT : n->dir ? -EISDIR : 0;
    if (!rc) {
        dents_del(&par->ents, dents_find(&par->ents, leaf));
        if (n->nlink)
            n->nlink--;
        touch(par);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static int lz_rmdir(const char *path)
{
    pthread_mutex_lock(&mu);
    struct node *par;
    const char *leaf;
    struct node *n = resolve(path, &par, &leaf);
    int rc = !n ? -ENOENT : !n->dir ? -ENOTDIR : n->ents.n ? -ENOTEMPTY : !par ? -EBUSY : 0;
    if (!rc) {
        dents_del(&par->ents, dents_find(&par->ents, leaf));
        touch(par);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static int lz_rename(const char *from, const char *to, unsigned int flags)
{
    if (flags & ~(unsigned)RENAME_NOREPLACE)
        return -EINVAL;
    pthread_mutex_lock(&mu);
    struct node *fpar, *tpar;
    const char *fleaf, *tleaf;
    struct node *n = resolve(from, &fpar, &fleaf);
    char fl[256];
    snprintf(fl, sizeof(fl), "%s", fleaf);
    struct node *old = resolve(to, &tpar, &tleaf);
    int rc = !n || !tpar || !tpar->dir ? -ENOENT : 0;
    if (!rc && old && (flags & RENAME_NOREPLACE))
        rc = -EEXIST;
    if (!rc && old && old->dir != n->dir)
        rc = old->dir ? -EISDIR : -ENOTDIR;
    if (!rc && old && old->dir && old->ents.n)
        rc = -ENOTEMPTY;
    if (!rc && old != n) {
        if (old) {
            struct dent *e = dents_find(&tpar->ents, tleaf);
            e->n = n;
            if (old->nlink)
                old->nlink--;
        } else {
            rc = dents_add(&tpar->ents, tleaf, n);
        }
        if (!rc) {
            dents_del(&fpar->ents, dents_find(&fpar->ents, fl));
            free(n->path);
            n->path = strdup(to);
        }
        touch(fpar);
        touch(tpar);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static int lz_link(const char *from, const char *to)
{
    pthread_mutex_lock(&mu);
    struct node *tpar;
    const char *tleaf;
    struct node *n = resolve(from, NULL, NULL);
    int rc = !n ? -ENOENT : n->dir ? -EPERM : resolve(to, &tpar, &tleaf) ? -EEXIST : 0;
    if (!rc && (!tpar || !tpar->dir))
        rc = -ENOENT;
    if (!rc && !(rc = dents_add(&tpar->ents, tleaf, n))) {
        n->nlink++;
        touch(tpar);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static int lz_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi)
{
    (void)tv;
    pthread_mutex_lock(&mu);
    struct node *n = node_of(path, fi);
    if (n)
        touch(n);
    pthread_mutex_unlock(&mu);
    return n ? 0 : -ENOENT;
}

static int lz_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    pthread_mutex_lock(&mu);
    struct node *n = node_of(path, fi);
    if (n)
        n->mode = (n->mode & S_IFMT) | (mode & 07777);
    pthread_mutex_unlock(&mu);
    return n ? 0 : -ENOENT;
}

static int lz_statfs(const char *path, struct statvfs *sv)
{
    (void)path;
    memset(sv, 0, sizeof(*sv));
    sv->f_bsize = sv->f_frsize = 4096;
    sv->f_blocks = 16ull << 20; /* 64 GiB */
    sv->f_bfree = sv->f_bavail = 15ull << 20;
    sv->f_files = sv->f_ffree = sv->f_favail = 1u << 20;
    sv->f_namemax = 255;
    return 0;
}

static const struct fuse_operations ops = {
    .init = lz_init,
    .getattr = lz_getattr,
    .opendir = lz_opendir,
    .readdir = lz_readdir,
    .mkdir = lz_mkdir,
    .create = lz_create,
    .open = lz_open,
    .release = lz_release,
    .read = lz_read,
    .write = lz_write,
    .truncate = lz_truncate,
    .fallocate = lz_fallocate,
    .fsync = lz_fsync,
    .fsyncdir = lz_fsyncdir,
    .unlink = lz_unlink,
    .rmdir = lz_rmdir,
    .rename = lz_rename,
    .link = lz_link,
    .utimens = lz_utimens,
    .chmod = lz_chmod,
    .statfs = lz_statfs,
};

int main(int argc, char **argv)
{
    ignore_pat = getenv("LAZYFS_IGNORE");
    if (ignore_pat && !*ignore_pat)
        ignore_pat = NULL;
    root = node_new(1, 0755);
    root->nlink = 1;
    return fuse_main(argc, argv, &ops, NULL);
}
