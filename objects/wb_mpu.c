/*
 * wb_mpu.c: multipart uploads in --write-mode back, staged in the cache
 * directory so that a checkpoint can be written while the backend is away.
 * The drainer later uploads the completed object like any other dirty one.
 *
 * Layout: CACHE_DIR/mpu/UPLOAD_ID/ holds "info" (bucket, key and the object's
 * metadata, hex-encoded lines) and the parts. Clients upload parts of one
 * size P (but the last), so the first part of at least 5 MiB fixes P
 * ("psize") and a part of exactly P bytes is written in place into "data" at
 * (N-1)*P, slot N, when its attempt holds the slot's lock and no acknowledged
 * part N is in the slot (backends/mpu_slot.h: a second attempt at once, or a
 * re-upload, is staged as its own file), then recorded by an empty marker
 * "i.NNNNN.MD5HEX" once fdatasync'd: Complete of parts 1..n then has nothing
 * to copy but a short last part, and the data file itself becomes the object.
 * Any other part is its own file "p.NNNNN.MD5HEX" (renamed in from the
 * request's staged file after fsync: one atomic step that also records its
 * ETag). A part's record is made, and the other records of its number removed,
 * under the number's publication lock and only when its attempt succeeded, so
 * the last attempt to succeed is the part and a failed one changes nothing. A
 * Complete that does not fit the layout, or that cannot hold the whole data
 * file (an attempt is writing a slot), concatenates into a staged file instead.
 * The caller adopts the result dirty; the upload directory then goes away.
 * Upload IDs are 32 hex digits and are checked before they touch a path.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/mpu.h"
#include "backends/mpu_slot.h"
#include "cache/cache.h"
#include "lib/arr.h"
#include "lib/fileio.h"
#include "lib/hex.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "objects.h"
#include "wb_mpu.h"

static void mpu_root(const struct objects *o, char out[2048])
{
    snprintf(out, 2048, "%s/mpu", o->cf->cache_dir ? o->cf->cache_dir : "./var/cache");
}

static int upload_dir(const struct objects *o, const char *id, char out[4096])
{
    char root[2048];
    if (!mpu_id_ok(id))
        return -S3E_NO_SUCH_UPLOAD;
    mpu_root(o, root);
    snprintf(out, 4096, "%s/%s", root, id);
    return 0;
}

int wb_mpu_here(const struct objects *o, const char *upload_id)
{
    char dir[4096];
    struct stat st;
    return upload_dir(o, upload_id, dir) == 0 && stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

static int fsync_path(const char *p, int dir)
{
    int fd = open(p, (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

/* ---- info file: "name hex(value)" lines ------------------------------------------------- */

static void put_hex(FILE *f, const char *name, const char *v)
{
    fprintf(f, "%s ", name);
    for (const unsigned char *p = (const unsigned char *)v; *p; p++)
        fprintf(f, "%02x", *p);
    fputc('\n', f);
}

static void get_hex(const char *hex, char *out, size_t cap)
{
    size_t n = 0;
    unsigned char c;
    for (; hex[0] && hex[1] && n + 1 < cap && !hex_decode(hex, 1, &c); hex += 2)
        out[n++] = (char)c;
    out[n] = '\0';
}

/* Reads the next "name value" line of @f into @line (cap bytes): 1 with @line the name and
 * *@value the rest, 0 at the end. Lines without a space are skipped. */
static int field_next(FILE *f, char *line, int cap, char **value)
{
    while (fgets(line, cap, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *sp = strchr(line, ' ');
        if (!sp)
            continue;
        *sp++ = '\0';
        *value = sp;
        return 1;
    }
    return 0;
}

#define INFO_FIELDS(X)                                                                        \
    X(content_type) X(cache_control) X(content_disposition) X(content_encoding)               \
    X(content_language) X(expires) X(usermeta) X(checksum_algo)

struct info {
    char bucket[1024];
    char key[1100];
    struct be_meta meta;
    int64_t initiated_ns;
};

/* A new file @path (truncated if there) for writing, readable by the owner only: the upload's
 * bucket, key and user metadata are nobody else's business. NULL and errno on failure. */
static FILE *private_fopen(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

static int info_write(const char *dir, const struct info *in)
{
    char p[4096 + 64], t[4096 + 64];
    snprintf(p, sizeof(p), "%s/info", dir);
    snprintf(t, sizeof(t), "%s/info.tmp", dir);
    FILE *f = private_fopen(t);
    if (!f)
        return -errno;
    put_hex(f, "bucket", in->bucket);
    put_hex(f, "key", in->key);
#define X(fld) put_hex(f, #fld, in->meta.fld);
    INFO_FIELDS(X)
#undef X
    fprintf(f, "initiated %lld\n", (long long)in->initiated_ns);
    int rc = fflush(f) || fsync(fileno(f)) ? -errno : 0;
    if (fclose(f) && !rc)
        rc = -errno;
    if (!rc && rename(t, p))
        rc = -errno;
    if (!rc)
        rc = fsync_path(dir, 1);
    return rc;
}

static int info_read(const char *dir, struct info *in)
{
    char p[4096 + 64], line[8192];
    snprintf(p, sizeof(p), "%s/info", dir);
    FILE *f = fopen(p, "re");
    memset(in, 0, sizeof(*in));
    if (!f)
        return errno == ENOENT ? -S3E_NO_SUCH_UPLOAD : -errno;
    char *sp;
    while (field_next(f, line, (int)sizeof(line), &sp)) {
        if (!strcmp(line, "bucket"))
            get_hex(sp, in->bucket, sizeof(in->bucket));
        else if (!strcmp(line, "key"))
            get_hex(sp, in->key, sizeof(in->key));
        else if (!strcmp(line, "initiated"))
            in->initiated_ns = atoll(sp);
#define X(fld) else if (!strcmp(line, #fld)) get_hex(sp, in->meta.fld, sizeof(in->meta.fld));
        INFO_FIELDS(X)
#undef X
    }
    fclose(f);
    return in->bucket[0] && in->key[0] ? 0 : -S3E_NO_SUCH_UPLOAD;
}

/* The upload @id of (@bucket, @key): 0 with its directory in @dir, or -S3E_NO_SUCH_UPLOAD. */
static int upload_open(const struct objects *o, const char *bucket, const char *key,
                       const char *id, char dir[4096], struct info *in)
{
    int rc = upload_dir(o, id, dir);
    if (!rc)
        rc = info_read(dir, in);
    if (!rc && (strcmp(in->bucket, bucket) || strcmp(in->key, key)))
        rc = -S3E_NO_SUCH_UPLOAD;
    return rc;
}

/* ---- parts ------------------------------------------------------------------------------ */

struct part_file {
    unsigned number;
    int inplace; /* "i." marker: P bytes in data at (number-1)*P */
    char etag[33];
    uint64_t size;
    int64_t mtime_ns;
    char name[64];
};

static int part_parse(const char *name, struct part_file *p)
{
    unsigned n;
    char kind, etag[40];
    if (sscanf(name, "%c.%5u.%32[0-9a-f]", &kind, &n, etag) != 3 ||
        strlen(name) != 2 + 5 + 1 + 32 || (kind != 'p' && kind != 'i') || n < 1 ||
        n > BE_MAX_PARTS)
        return -1;
    p->inplace = kind == 'i';
    p->number = n;
    memcpy(p->etag, etag, 33);
    memcpy(p->name, name, 2 + 5 + 1 + 32 + 1); /* the length was checked above */
    return 0;
}

static int part_cmp(const void *a, const void *b)
{
    const struct part_file *x = a, *y = b;
    return x->number < y->number ? -1 : x->number > y->number;
}

/* The upload's in-place part size P, 0 when not fixed yet. */
static uint64_t psize_read(const char *dir)
{
    char p[4096 + 64], b[32];
    snprintf(p, sizeof(p), "%s/psize", dir);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, b, sizeof(b) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    b[n] = '\0';
    return strtoull(b, NULL, 10);
}

/* Every part of the upload in @dir, sorted by number (own files: size and mtime from stat;
 * in-place markers: size P). */
static int parts_scan(const char *dir, struct part_file **out, size_t *n)
{
    uint64_t psize = psize_read(dir);
    DIR *d = opendir(dir);
    struct part_file *ps = NULL;
    size_t cnt = 0, cap = 0;
    *out = NULL;
    *n = 0;
    if (!d)
        return errno == ENOENT ? -S3E_NO_SUCH_UPLOAD : -errno;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        struct part_file p;
        struct stat st;
        if (part_parse(de->d_name, &p) || fstatat(dirfd(d), de->d_name, &st, 0))
            continue;
        if (p.inplace && !psize)
            continue; /* cannot be: P is fixed before any in-place write */
        p.size = p.inplace ? psize : (uint64_t)st.st_size;
        p.mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
        if (ARR_GROW(ps, cnt, 1, cap)) {
            rc = -ENOMEM;
            break;
        }
        ps[cnt++] = p;
    }
    closedir(d);
    if (rc) {
        free(ps);
        return rc;
    }
    if (cnt)
        qsort(ps, cnt, sizeof(*ps), part_cmp);
    *out = ps;
    *n = cnt;
    return 0;
}

/* Bytes held by the parts of every staged upload (at start: the dirty limit counts them). */
uint64_t wb_mpu_staged_bytes(const struct objects *o)
{
    char root[2048];
    uint64_t sum = 0;
    mpu_root(o, root);
    DIR *d = opendir(root);
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char dir[4096 + 64];
        struct part_file *ps;
        size_t n;
        if (!mpu_id_ok(de->d_name))
            continue;
        snprintf(dir, sizeof(dir), "%s/%s", root, de->d_name);
        if (parts_scan(dir, &ps, &n))
            continue;
        for (size_t i = 0; i < n; i++)
            sum += ps[i].size;
        free(ps);
    }
    closedir(d);
    return sum;
}

/* Removes the entries of part @number other than @keep (a re-upload replaced them). */
static void drop_others(struct objects *o, const char *dir, unsigned number, const char *keep)
{
    struct part_file *ps;
    size_t n;
    if (parts_scan(dir, &ps, &n))
        return;
    for (size_t i = 0; i < n; i++) {
        if (ps[i].number != number || !strcmp(ps[i].name, keep))
            continue;
        char old[4096 + 64];
        snprintf(old, sizeof(old), "%s/%s", dir, ps[i].name);
        if (unlink(old) == 0)
            drain_release(o->dr, ps[i].size);
    }
    free(ps);
}

/* ---- operations -------------------------------------------------------------------------- */

int wb_mpu_create(struct objects *o, const char *bucket, const char *key,
                  const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX])
{
    char root[2048], dir[4096];
    struct info *in = calloc(1, sizeof(*in));
    if (!in)
        return -ENOMEM;
    if (mpu_id_new(upload_id)) {
        free(in);
        return -EIO;
    }
    mpu_root(o, root);
    if (mkdir(root, 0755) && errno != EEXIST) {
        free(in);
        return -errno;
    }
    snprintf(dir, sizeof(dir), "%s/%s", root, upload_id);
    if (mkdir(dir, 0755)) {
        free(in);
        return -errno;
    }
    snprintf(in->bucket, sizeof(in->bucket), "%s", bucket);
    snprintf(in->key, sizeof(in->key), "%s", key);
    in->meta = *meta;
    in->initiated_ns = s3c_real_ns();
    int rc = info_write(dir, in);
    if (!rc)
        rc = fsync_path(root, 1);
    free(in);
    return rc;
}

/* Makes the record @name of part @number in @dir: the file @staged renamed in, or (NULL) an
 * empty marker; the number's other records go and the directory is synced, all under the
 * number's publication lock (mpu_slot.h), so the last attempt to get here is the part. */
static int publish(struct objects *o, const char *dir, unsigned number, const char *staged,
                   const char *name)
{
    char p[4096 + 64];
    int rc = 0;
    snprintf(p, sizeof(p), "%s/info", dir);
    int lfd = open(p, O_RDWR | O_CLOEXEC);
    if (lfd >= 0)
        (void)mpu_slot_publish_lock(lfd, number); /* no locks on this file system: unordered */
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    if (staged) {
        if (rename(staged, p))
            rc = errno == ENOENT ? -S3E_NO_SUCH_UPLOAD : -errno;
    } else {
        int mf = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (mf < 0)
            rc = errno == ENOENT ? -S3E_NO_SUCH_UPLOAD : -errno;
        else
            close(mf);
    }
    if (!rc) {
        drop_others(o, dir, number, name);
        rc = fsync_path(dir, 1);
    }
    if (lfd >= 0)
        close(lfd); /* and the lock with it */
    return rc;
}

int wb_mpu_put_part(struct objects *o, const char *bucket, const char *key,
                    const char *upload_id, unsigned number, const char *staged_path,
                    const char *etag)
{
    char dir[4096], name[64];
    struct info in;
    int rc = upload_open(o, bucket, key, upload_id, dir, &in);
    if (rc)
        return rc;
    if (strlen(etag) != 32)
        return -S3E_INTERNAL;
    snprintf(name, sizeof(name), "p.%05u.%s", number, etag);
    return publish(o, dir, number, staged_path, name);
}

/* Whether part @number of the upload in @dir is in place (an "i.NNNNN." marker). */
static int inplace_has(const char *dir, unsigned number)
{
    char prefix[16];
    int found = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 1; /* unknown: as if it were */
    snprintf(prefix, sizeof(prefix), "i.%05u.", number);
    struct dirent *de;
    while (!found && (de = readdir(d)))
        found = !strncmp(de->d_name, prefix, 8);
    closedir(d);
    return found;
}

int wb_mpu_part_target(struct objects *o, const char *bucket, const char *key,
                       const char *upload_id, unsigned number, uint64_t size, int *fd,
                       uint64_t *off)
{
    char dir[4096], p[4096 + 64];
    struct info in;
    int rc = upload_open(o, bucket, key, upload_id, dir, &in);
    if (rc)
        return rc;
    uint64_t psize = psize_read(dir);
    if (!psize && size >= BE_MIN_PART_SIZE && size != UINT64_MAX) {
        /* the first big part fixes P; durable before anything relies on it */
        snprintf(p, sizeof(p), "%s/psize", dir);
        int pf = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (pf >= 0) {
            char b[32];
            int l = snprintf(b, sizeof(b), "%llu\n", (unsigned long long)size);
            int ok = write(pf, b, (size_t)l) == l && fsync(pf) == 0;
            close(pf);
            if (!ok || fsync_path(dir, 1)) {
                unlink(p);
                return 0; /* own file then */
            }
        }
        psize = psize_read(dir);
    }
    if (!psize || size != psize || inplace_has(dir, number))
        return 0; /* an acknowledged part is in the slot: a re-upload is a file of its own */
    snprintf(p, sizeof(p), "%s/data", dir);
    int dfd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (dfd < 0)
        return -errno;
    /* The slot is this attempt's while it holds the lock (closing the fd, in upload_free(),
     * releases it): "data" must still be the upload's (after a Complete made it the object,
     * wb_mpu_finish() removed the name) and no part @number in place. */
    struct stat a, d;
    if (mpu_slot_lock(dfd, number, psize) || fstat(dfd, &d) || stat(p, &a) ||
        a.st_ino != d.st_ino || a.st_dev != d.st_dev || inplace_has(dir, number)) {
        close(dfd);
        return 0;
    }
    *fd = dfd;
    *off = (uint64_t)(number - 1) * psize;
    return 1;
}

int wb_mpu_part_done_inplace(struct objects *o, const char *bucket, const char *key,
                             const char *upload_id, unsigned number, const char *etag, int fd)
{
    char dir[4096], name[64];
    struct info in;
    int rc = upload_open(o, bucket, key, upload_id, dir, &in);
    if (rc)
        return rc;
    if (strlen(etag) != 32)
        return -S3E_INTERNAL;
    if (fdatasync(fd))
        return -errno;
    snprintf(name, sizeof(name), "i.%05u.%s", number, etag);
    rc = publish(o, dir, number, NULL, name);
    if (!rc) /* recorded: the slot is free now, not when the request's fd is closed after the
              * answer (the client's Complete may come first and find the file held) */
        mpu_slot_unlock(fd, number, psize_read(dir));
    return rc;
}

int wb_mpu_list_parts(struct objects *o, const char *bucket, const char *key,
                      const char *upload_id, unsigned marker, unsigned max,
                      struct be_part **out, size_t *nout, int *truncated)
{
    char dir[4096];
    struct info in;
    struct part_file *ps;
    size_t n;
    int rc = upload_open(o, bucket, key, upload_id, dir, &in);
    *out = NULL;
    *nout = 0;
    *truncated = 0;
    if (rc || (rc = parts_scan(dir, &ps, &n)))
        return rc;
    struct be_part *bp = calloc(n ? n : 1, sizeof(*bp));
    if (!bp) {
        free(ps);
        return -ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (ps[i].number <= marker)
            continue;
        if (k && bp[k - 1].number == ps[i].number) {
            /* two records of one number: for an instant while one replaces the other (or after
             * a crash in between); the newer is listed */
            if (ps[i].mtime_ns > bp[k - 1].mtime_ns) {
                bp[k - 1].size = ps[i].size;
                bp[k - 1].mtime_ns = ps[i].mtime_ns;
                snprintf(bp[k - 1].etag, sizeof(bp[k - 1].etag), "%s", ps[i].etag);
            }
            continue;
        }
        if (k == max) {
            *truncated = 1;
            break;
        }
        bp[k].number = ps[i].number;
        bp[k].size = ps[i].size;
        bp[k].mtime_ns = ps[i].mtime_ns;
        snprintf(bp[k].etag, sizeof(bp[k].etag), "%s", ps[i].etag);
        k++;
    }
    free(ps);
    *out = bp;
    *nout = k;
    return 0;
}

static int rm_upload(const char *dir, uint64_t *bytes)
{
    struct part_file *ps;
    size_t n;
    char p[4096 + 64];
    *bytes = 0;
    if (!parts_scan(dir, &ps, &n)) {
        for (size_t i = 0; i < n; i++) {
            snprintf(p, sizeof(p), "%s/%s", dir, ps[i].name);
            if (unlink(p) == 0)
                *bytes += ps[i].size;
        }
        free(ps);
    }
    static const char *const others[] = {"info", "info.tmp", "data", "data.obj", "psize"};
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, others[i]);
        unlink(p);
    }
    return rmdir(dir) ? -errno : 0;
}

int wb_mpu_abort(struct objects *o, const char *bucket, const char *key, const char *upload_id)
{
    char dir[4096];
    struct info in;
    uint64_t bytes = 0;
    int rc = upload_open(o, bucket, key, upload_id, dir, &in);
    if (!rc)
        rc = rm_upload(dir, &bytes);
    if (bytes)
        drain_release(o->dr, bytes);
    return rc;
}

/* ---- completed uploads ------------------------------------------------------------------ */

/* A client whose Complete's answer was lost sends it again and finds the upload gone: for an
 * hour CACHE_DIR/mpu-done/ID keeps its bucket, key, the hash of its part list and its ETag, and
 * the repeat is answered as the first was (as S3 and the write-through backends do). Best
 * effort and not fsync'd: a record lost in a crash makes a repeat NoSuchUpload. */
static void done_path(const struct objects *o, const char *name, char out[4096])
{
    char root[2048];
    mpu_root(o, root);
    snprintf(out, 4096, "%s-done/%s", root, name);
}

/* Drops records older than MPU_DONE_TTL_NS, now and then (mpu_done_sweep()). */
static void done_sweep(const struct objects *o)
{
    static int64_t last_ns;
    char dir[4096];
    done_path(o, "", dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    mpu_done_sweep(fd, &last_ns);
    close(fd);
}

static void done_record(const struct objects *o, const char *id, const char *bucket,
                        const char *key, const char *phash, const char *etag)
{
    char p[4096], t[4096 + 8];
    done_sweep(o);
    done_path(o, "", p);
    (void)mkdir(p, 0755);
    done_path(o, id, p);
    snprintf(t, sizeof(t), "%s.tmp", p);
    FILE *f = private_fopen(t);
    if (!f)
        return;
    put_hex(f, "bucket", bucket);
    put_hex(f, "key", key);
    put_hex(f, "parts", phash);
    put_hex(f, "etag", etag);
    int bad = ferror(f);
    if (fclose(f) || bad || rename(t, p))
        unlink(t);
}

/* A repeated Complete of upload @id, gone: 0 with out->etag when it was completed for
 * (@bucket, @key) with the same parts (@phash), -S3E_INVALID_PART with other parts, else
 * -S3E_NO_SUCH_UPLOAD. */
static int done_lookup(const struct objects *o, const char *id, const char *bucket,
                       const char *key, const char *phash, struct be_meta *out)
{
    char p[4096], line[8192], b[1024] = "", k[1100] = "", ph[40] = "", et[BE_ETAG_MAX] = "";
    done_path(o, id, p);
    FILE *f = fopen(p, "re");
    if (!f)
        return -S3E_NO_SUCH_UPLOAD;
    char *sp;
    while (field_next(f, line, (int)sizeof(line), &sp)) {
        if (!strcmp(line, "bucket"))
            get_hex(sp, b, sizeof(b));
        else if (!strcmp(line, "key"))
            get_hex(sp, k, sizeof(k));
        else if (!strcmp(line, "parts"))
            get_hex(sp, ph, sizeof(ph));
        else if (!strcmp(line, "etag"))
            get_hex(sp, et, sizeof(et));
    }
    fclose(f);
    if (!et[0] || strcmp(b, bucket) || strcmp(k, key))
        return -S3E_NO_SUCH_UPLOAD;
    if (strcmp(ph, phash))
        return -S3E_INVALID_PART;
    memset(out, 0, sizeof(*out));
    snprintf(out->etag, sizeof(out->etag), "%s", et);
    return 0;
}

/* Copies the bytes of part @f (in the data file @dfd at its slot, or its own file in @dir) to
 * @out at @at. */
static int part_copy(const char *dir, int dfd, uint64_t psize, const struct part_file *f, int out,
                     uint64_t at)
{
    char p[4096 + 64];
    if (!f->size)
        return 0;
    if (f->inplace)
        return dfd < 0 ? -S3E_INVALID_PART
                       : fileio_copy_range(dfd, (uint64_t)(f->number - 1) * psize, out, at, f->size);
    snprintf(p, sizeof(p), "%s/%s", dir, f->name);
    int in_fd = open(p, O_RDONLY | O_CLOEXEC); /* named by its ETag: these are its bytes */
    if (in_fd < 0)
        return errno == ENOENT ? -S3E_INVALID_PART : -errno;
    int rc = fileio_copy_range(in_fd, 0, out, at, f->size);
    close(in_fd);
    return rc;
}

/* mpu_part_f over the upload's records (struct complete_parts): the record of the number with
 * the ETag named, noted in use[] in the order the Complete names them. */
struct complete_parts {
    const struct part_file *ps;
    size_t np;
    const struct part_file **use;
    size_t k;
};

static int complete_part(void *cls, unsigned number, const char *etag, struct mpu_part *out)
{
    struct complete_parts *cp = cls;
    const struct part_file *f = NULL;
    for (size_t j = 0; j < cp->np; j++)
        if (cp->ps[j].number == number && mpu_etag_match(etag, cp->ps[j].etag))
            f = &cp->ps[j];
    if (!f)
        return -S3E_INVALID_PART;
    cp->use[cp->k++] = f;
    out->number = number;
    out->size = f->size;
    out->inplace = f->inplace;
    snprintf(out->etag, sizeof(out->etag), "%s", f->etag);
    return 0;
}

/* Makes the data file @dfd (held whole) the object: the parts with files of their own copied
 * into their slots, the tail cut, a second name @staged for it (adopting consumes it; a failed
 * adopt leaves the upload whole for the client's retry). */
static int complete_inplace(const char *dir, int dfd, const char *dpath,
                            const struct part_file *const *use, size_t n, uint64_t psize,
                            uint64_t total, char staged[4096])
{
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        if (!use[i]->inplace)
            rc = part_copy(dir, -1, psize, use[i], dfd, (uint64_t)i * psize);
    if (!rc && ftruncate(dfd, (off_t)total))
        rc = -errno;
    if (!rc && fsync(dfd))
        rc = -errno;
    if (rc)
        return rc;
    if (snprintf(staged, 4096, "%s/data.obj", dir) >= 4096) {
        staged[0] = '\0';
        return -ENAMETOOLONG;
    }
    unlink(staged);
    if (link(dpath, staged)) {
        staged[0] = '\0';
        return -errno;
    }
    return 0;
}

/* Concatenates the parts into a new staged file @staged; @verify: the slots could be written
 * meanwhile (the data file was not held), so the bytes copied from a slot must have the part's
 * MD5, else -S3E_INVALID_PART. */
static int complete_copy(struct objects *o, const char *dir, int dfd,
                         const struct part_file *const *use, size_t n, uint64_t psize,
                         int verify, char staged[4096])
{
    int fd = -1, rc = cache_stage_open(o->cache, &fd, staged);
    uint64_t off = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        char md5[33];
        rc = part_copy(dir, dfd, psize, use[i], fd, off);
        if (!rc && verify && use[i]->inplace &&
            !(rc = mpu_md5_range(fd, off, use[i]->size, md5)) && strcmp(md5, use[i]->etag))
            rc = -S3E_INVALID_PART; /* the slot was written since the part was looked at */
        off += use[i]->size;
    }
    if (!rc && fsync(fd))
        rc = -errno;
    if (fd >= 0)
        close(fd);
    return rc;
}

int wb_mpu_complete(struct objects *o, const char *bucket, const char *key,
                    const char *upload_id, const struct be_part *parts, size_t n,
                    struct be_meta *out, char staged[4096], uint64_t *parts_bytes, int *seal)
{
    char dir[4096], dpath[4096 + 64];
    struct info in;
    struct part_file *ps = NULL;
    size_t np = 0;
    struct complete_parts cp = {0};
    struct mpu_plan plan = {0};
    int dfd = -1, rc;
    staged[0] = '\0';
    *parts_bytes = 0;
    *seal = -1;
    if (n == 0 || n > BE_MAX_PARTS)
        return -S3E_MALFORMED_XML;
    if ((rc = upload_open(o, bucket, key, upload_id, dir, &in))) {
        char phash[33];
        if (rc == -S3E_NO_SUCH_UPLOAD && mpu_id_ok(upload_id) && !be_parts_hash(parts, n, phash) &&
            !(rc = done_lookup(o, upload_id, bucket, key, phash, out)))
            return 1;
        return rc;
    }
    /* Holding the whole data file keeps every attempt out of its slots (until the caller closes
     * *@seal, when the file became the object); without it (an attempt is writing a slot), the
     * parts are copied out and the slots' bytes checked. */
    snprintf(dpath, sizeof(dpath), "%s/data", dir);
    dfd = open(dpath, O_RDWR | O_CLOEXEC);
    int whole = dfd >= 0 && mpu_slot_lock_all(dfd) == 0;
    if ((rc = parts_scan(dir, &ps, &np)))
        goto out;
    cp.ps = ps;
    cp.np = np;
    if (!(cp.use = calloc(n, sizeof(*cp.use)))) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = mpu_complete_plan(parts, n, complete_part, &cp, &plan)))
        goto out;
    if (plan.total > o->cf->max_object_size) {
        rc = -S3E_ENTITY_TOO_LARGE;
        goto out;
    }
    unsigned max_inplace = 0;
    for (size_t j = 0; j < np; j++)
        if (ps[j].inplace && ps[j].number > max_inplace)
            max_inplace = ps[j].number;
    uint64_t psize = psize_read(dir);
    if (whole && mpu_slot_plan(plan.use, n, psize, max_inplace)) {
        if (!(rc = complete_inplace(dir, dfd, dpath, cp.use, n, psize, plan.total, staged))) {
            *seal = dfd;
            dfd = -1;
        }
    } else {
        rc = complete_copy(o, dir, dfd, cp.use, n, psize, !whole, staged);
    }
    if (rc)
        goto out;
    *out = in.meta;
    out->size = plan.total;
    out->mtime_ns = s3c_real_ns();
    out->parts_count = (uint32_t)n;
    out->part_size = plan.part_size;
    out->checksum_algo[0] = out->checksum[0] = '\0';
    memcpy(out->etag, plan.etag, sizeof(out->etag));
    for (size_t j = 0; j < np; j++)
        *parts_bytes += ps[j].size;
out:
    if (dfd >= 0)
        close(dfd);
    if (rc && *seal >= 0) {
        close(*seal);
        *seal = -1;
    }
    if (rc && staged[0]) {
        unlink(staged);
        staged[0] = '\0';
    }
    free(ps);
    free(cp.use);
    mpu_plan_free(&plan);
    return rc;
}

int wb_mpu_finish(struct objects *o, const char *bucket, const char *key,
                  const char *upload_id, const struct be_part *parts, size_t n,
                  const struct be_meta *made, uint64_t handed)
{
    char dir[4096], phash[33];
    uint64_t bytes = 0;
    int rc = upload_dir(o, upload_id, dir);
    if (!rc && !be_parts_hash(parts, n, phash))
        done_record(o, upload_id, bucket, key, phash, made->etag);
    if (!rc)
        rc = rm_upload(dir, &bytes);
    if (bytes) {
        drain_unadmit(o->dr, bytes);
        if (bytes > handed) /* parts the object did not take over (one raced the Complete) */
            cache_stage_drop(o->cache, bytes - handed);
    }
    return rc;
}

int wb_mpu_list_uploads(struct objects *o, const char *bucket, const char *prefix,
                        const char *key_marker, const char *id_marker, unsigned max,
                        struct be_upload **out, size_t *nout, int *truncated)
{
    char root[2048];
    struct be_upload *u = NULL;
    size_t cnt = 0, cap = 0;
    int rc = 0;
    *out = NULL;
    *nout = 0;
    *truncated = 0;
    mpu_root(o, root);
    DIR *d = opendir(root);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)) && !rc) {
            char dir[4096 + 64];
            struct info in;
            if (!mpu_id_ok(de->d_name))
                continue;
            snprintf(dir, sizeof(dir), "%s/%s", root, de->d_name);
            if (info_read(dir, &in) || strcmp(in.bucket, bucket) ||
                (prefix && strncmp(in.key, prefix, strlen(prefix))))
                continue;
            if ((rc = ARR_GROW(u, cnt, 1, cap)))
                break;
            if (!(u[cnt].key = strdup(in.key))) {
                rc = -ENOMEM;
                break;
            }
            memcpy(u[cnt].upload_id, de->d_name, MPU_ID_LEN + 1); /* mpu_id_ok(): 32 digits */
            u[cnt].initiated_ns = in.initiated_ns;
            cnt++;
        }
        closedir(d);
    }
    if (rc) {
        be_uploads_free(u, cnt);
        return rc;
    }
    mpu_uploads_page(u, &cnt, key_marker, id_marker, max, truncated);
    if (!u && !(u = calloc(1, sizeof(*u))))
        return -ENOMEM;
    *out = u;
    *nout = cnt;
    return 0;
}
