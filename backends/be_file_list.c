/*
 * be_file_list.c: ListObjects over the POSIX tree: a depth-first walk in key order of the
 * directory cache's sorted entries, from the marker on, rolling keys up into common prefixes
 * under a delimiter, with symlinks to directories walked only with --follow-symlinks.
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

/* ------------------------------------------------------------------------------------ */
/* Listing                                                                               */

/* How the walk's lower bound (struct lw.lower) applies: none yet, keys after it (the marker),
 * or keys past it and everything under it (a common prefix already listed, a key too long). */
enum { LOWER_NONE = 0, LOWER_AFTER, LOWER_PAST };

/* One listing walk (a ListObjects page). */
struct lw {
    struct bef *b;
    const char *bucket;
    const char *prefix;
    size_t plen;
    const char *delim;
    size_t dlen;
    const char *marker;
    size_t mlen;
    unsigned max;
    struct be_list_page *page;
    size_t cap;
    char lower[BEF_KEY_MAX + 2]; /* keys up to here are not listed (see lower_mode) */
    size_t lower_len;
    int lower_mode;
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

static int anc_loops(const struct anc *up, dev_t dev, ino_t ino)
{
    for (; up; up = up->up)
        if (up->dev == dev && up->ino == ino)
            return 1;
    return 0;
}

int bef_dir_has_key(struct bef *b, const char *path, int depth, const struct anc *up)
{
    int fd = bef_list_dir_open(b, path);
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
            int type = bef_classify(fd, de, b->follow);
            char sub[PATH_MAX];
            pos += de->d_reclen;
            if (snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) >= (int)sizeof(sub))
                continue;
            if (type == DE_FILE && !b->follow && de->d_type != DT_REG) {
                int lfd, outside; /* a link is a key only when it stays under the root */
                if ((lfd = bef_read_open(b, sub, &outside)) >= 0) {
                    close(lfd);
                    found = 1;
                }
            } else if (type == DE_FILE || type == DE_MARKER || (type == DE_SELF && depth > 0)) {
                found = 1; /* the top directory's own key is no key under it */
            } else if (type == DE_DIR && depth < 256) {
                found = bef_dir_has_key(b, sub, depth + 1, &me);
            }
        }
    }
    close(fd);
    return found;
}

/* Where to start in directory @e (prefix lw->key[0..dplen)) given the lower bound. */
static size_t lw_seek(const struct lw *w, const struct dcent *e, size_t dplen)
{
    const char *S = w->lower, *rest, *slash;
    size_t sl = w->lower_len, rl, i;
    int c;

    if (w->lower_mode == LOWER_NONE)
        return 0;
    c = memcmp(S, w->key, S3C_MIN(sl, dplen));
    if (c < 0)
        return 0;
    if (c > 0)
        return e->n;
    if (sl < dplen) /* S is a proper prefix of this directory's keys */
        return w->lower_mode == LOWER_PAST ? e->n : 0;
    rest = S + dplen;
    rl = sl - dplen;
    slash = memchr(rest, '/', rl);
    if (slash) { /* the bound lies inside subdirectory "name/": start there, it re-seeks */
        size_t cl = (size_t)(slash - rest) + 1;
        return bef_dc_lower(e, rest, cl);
    }
    if (w->lower_mode == LOWER_AFTER) {
        i = bef_dc_lower(e, rest, rl);
        return bef_dent_eq(e, i, rest, rl) ? i + 1 : i;
    }
    if (rl == 0)
        return e->n;
    return bef_dc_prefix_end(e, bef_dc_lower(e, rest, rl), rest, rl);
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
    if (ARR_GROW(pg->entries, pg->n, 1, w->cap))
        return -ENOMEM;
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
        rc = bef_obj_open(w->b, w->bucket, key, &fd, m);
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
    memcpy(w->lower, s, n);
    w->lower_len = n;
    w->lower_mode = LOWER_PAST;
    w->gen++;
}

/* Common prefix @cp of a key: listed unless it sorts at or before the marker. */
static int lw_prefix(struct lw *w, const char *cp, size_t cl)
{
    int rc = 0;
    int after = 1;

    if (w->mlen) {
        int c = memcmp(cp, w->marker, S3C_MIN(cl, w->mlen));
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
        const char *d = memmem(k + w->plen, klen - w->plen, w->delim, w->dlen);
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
    rc = bef_dc_get(w->b, dplen ? path : w->bucket, &e);
    if (rc < 0)
        return rc == -ENOENT || rc == -ENOTDIR || rc == -ELOOP || rc == -EXDEV ? 0 : rc;
    if (anc_loops(up, e->dev, e->ino)) { /* a linked directory leading back up */
        bef_dc_release(&w->b->dc, e);
        return 0;
    }
    me.dev = e->dev;
    me.ino = e->ino;
    pe = e->n;
    if (w->plen > dplen) { /* only entries on the way to, or inside, the prefix */
        const char *prest = w->prefix + dplen;
        size_t prl = w->plen - dplen;
        const char *slash = memchr(prest, '/', prl);
        if (slash) {
            size_t cl = (size_t)(slash - prest) + 1;
            pi = bef_dc_lower(e, prest, cl);
            pe = bef_dent_eq(e, pi, prest, cl) ? pi + 1 : pi;
        } else {
            pi = bef_dc_lower(e, prest, prl);
            pe = bef_dc_prefix_end(e, pi, prest, prl);
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
        memcpy(w->key + dplen, bef_dent_name(e, i), d->len);
        if (d->type == DE_DIR) {
            if (w->dlen == 1 && w->delim[0] == '/' && klen > w->plen) {
                /* Fast path: the whole subdirectory is one common prefix. */
                int after = 1;
                if (w->lower_mode != LOWER_NONE) {
                    int c = memcmp(w->key, w->lower, S3C_MIN(klen, w->lower_len));
                    after = c > 0 || (c == 0 && klen > w->lower_len);
                }
                if (!after)
                    continue;
                snprintf(path, sizeof(path), "%s/%.*s", w->bucket, (int)klen - 1, w->key);
                if (!bef_dir_has_key(w->b, path, 0, &me))
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
    bef_dc_release(&w->b->dc, e);
    return rc < 0 ? rc : 0;
}

int be_file_list(struct backend *be, const struct be_list_req *rq,
                        struct be_list_page *out)
{
    struct bef *b = bef_of(be);
    struct lw *w;
    int rc = backend_check_bucket_name(rq->bucket);

    memset(out, 0, sizeof(*out));
    if (rc < 0)
        return rc;
    if (!bef_bucket_exists(b, rq->bucket))
        return -S3E_NO_SUCH_BUCKET;
    if (rq->max_keys == 0)
        return 0;
    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->b = b;
    w->bucket = rq->bucket;
    w->prefix = rq->prefix ? rq->prefix : "";
    w->plen = strlen(w->prefix);
    w->delim = rq->delimiter ? rq->delimiter : "";
    w->dlen = strlen(w->delim);
    w->marker = rq->marker ? rq->marker : "";
    w->mlen = strlen(w->marker);
    w->max = rq->max_keys;
    w->page = out;
    if (w->plen > BEF_KEY_MAX)
        goto out; /* no key can match */
    if (w->mlen) {
        if (w->mlen > BEF_KEY_MAX) {
            /* a longer marker sorts after the keys it shares BEF_KEY_MAX bytes with */
            memcpy(w->lower, w->marker, BEF_KEY_MAX);
            w->lower_len = BEF_KEY_MAX;
            w->lower_mode = LOWER_PAST;
        } else {
            memcpy(w->lower, w->marker, w->mlen);
            w->lower_len = w->mlen;
            w->lower_mode = LOWER_AFTER;
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

