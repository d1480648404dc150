/*
 * tar.c: a forward-only tar walker driven by its caller (tar_index.c makes the member index
 * from its entries). Owns no file and does no I/O. The walk:
 *   HEADER --(x g X L K)--> META --> HEADER        one pax / long-name payload, capped
 *   HEADER --(S, extended)--> SPARSE_EXT* --> entry
 *   HEADER --(other type)--> entry; HEADER --(zero block | archive size)--> END
 *   any --(bad or hostile bytes, cap passed)--> FAILED (final)
 * Formats: v7, ustar (prefix + name), GNU (long names, base-256 numbers, old sparse), pax
 * (per-file and global path, size, mtime; GNU.sparse.*). Python's tarfile is the reference for
 * offsets: which types carry data, where data starts, how names are assembled.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tar.h"

#define TAR_WALK_MAGIC 0x7a3c0b11u
#define TAR_SPARSE_EXT_MAX 4096u       /* GNU 'S' extension blocks of one member */

/* header fields: offsets, and lengths where needed */
#define H_NAME 0
#define H_NAME_LEN 100
#define H_SIZE 124
#define H_MTIME 136
#define H_NUM_LEN 12 /* size and mtime */
#define H_CHKSUM 148
#define H_TYPE 156
#define H_MAGIC 257
#define H_PREFIX 345
#define H_PREFIX_LEN 155
#define H_SP_EXTENDED 482   /* GNU 'S': more sparse blocks follow */
#define H_SPX_EXTENDED 504  /* in a sparse extension block */

enum walk_state { WS_HEADER, WS_META, WS_SPARSE_EXT, WS_END, WS_FAILED };

/* A pax value: not given (fall back), given, or deleted by an empty value (use the header's). */
enum ov { OV_UNSET, OV_SET, OV_DELETED };

struct pax_set {
    enum ov path;
    char *path_buf; /* NUL-terminated copy, path_len bytes */
    size_t path_len, path_cap;
    enum ov size;
    uint64_t size_v;
    enum ov mtime;
    int64_t mtime_v;
    bool sparse; /* a GNU.sparse.* keyword */
};

struct tar_walk {
    unsigned magic;
    enum walk_state st;
    int err;
    uint64_t size; /* the archive's */
    uint64_t pos;  /* the header being read, or the next one */
    struct tar_limits lim;

    /* the pending read: want_len bytes at want_off into want_buf, have of them fed */
    bool armed;
    uint64_t want_off;
    size_t want_len, have;
    uint8_t *want_buf;

    uint8_t hdr[TAR_BLOCK];
    uint8_t *meta;
    size_t meta_cap;
    char meta_type;
    uint64_t meta_size;

    uint64_t ent_start; /* first x/X/L/K header of the coming entry, or UINT64_MAX */
    uint32_t meta_run;
    struct pax_set local, global;
    char *longname;
    size_t longname_len, longname_cap;
    bool has_longname;

    /* the entry being finished across sparse extension blocks */
    struct tar_entry cur;
    uint64_t ext_pos;
    uint32_t ext_blocks;

    char *name; /* the emitted name */
    size_t name_cap;
    uint32_t n_entries;
    uint64_t name_bytes;
    char reason[128];
};

/* Internal step result: go round the loop again. */
#define STEP_AGAIN 100

static int walk_fail(struct tar_walk *w, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int walk_fail(struct tar_walk *w, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->reason, sizeof(w->reason), fmt, ap);
    va_end(ap);
    w->st = WS_FAILED;
    w->err = err;
    w->armed = false;
    return err;
}

/* Grows *@buf to hold @need bytes. Returns 0 or -ENOMEM. */
static int grow(void *bufp, size_t *cap, size_t need)
{
    char **buf = bufp;
    if (need <= *cap && *buf)
        return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    char *nb = realloc(*buf, c);
    if (!nb)
        return -ENOMEM;
    *buf = nb;
    *cap = c;
    return 0;
}

static uint64_t round_block(uint64_t n)
{
    return (n + (TAR_BLOCK - 1)) / TAR_BLOCK * TAR_BLOCK; /* callers bound n far below 2^64 */
}

int tar_walk_new(uint64_t archive_size, const struct tar_limits *lim, struct tar_walk **out)
{
    struct tar_walk *w = calloc(1, sizeof(*w));
    *out = NULL;
    if (!w)
        return -ENOMEM;
    w->magic = TAR_WALK_MAGIC;
    w->size = archive_size;
    w->ent_start = UINT64_MAX;
    if (lim)
        w->lim = *lim;
    if (!w->lim.max_entries)
        w->lim.max_entries = TAR_DEF_MAX_ENTRIES;
    if (!w->lim.max_name_bytes)
        w->lim.max_name_bytes = TAR_DEF_MAX_NAME_BYTES;
    if (!w->lim.max_meta)
        w->lim.max_meta = TAR_DEF_MAX_META;
    if (!w->lim.max_meta_run)
        w->lim.max_meta_run = TAR_DEF_MAX_META_RUN;
    w->reason[0] = '\0';
    *out = w;
    return 0;
}

void tar_walk_free(struct tar_walk *w)
{
    if (!w)
        return;
    CHECK_OBJ_NOTNULL(w, TAR_WALK_MAGIC);
    free(w->meta);
    free(w->local.path_buf);
    free(w->global.path_buf);
    free(w->longname);
    free(w->name);
    w->magic = 0;
    free(w);
}

const char *tar_walk_reason(const struct tar_walk *w)
{
    return w ? w->reason : "";
}

static void walk_arm(struct tar_walk *w, uint64_t off, size_t len, uint8_t *buf)
{
    S3C_ASSERT(off <= w->size && len <= w->size - off);
    S3C_ASSERT(!w->armed);
    w->armed = true;
    w->want_off = off;
    w->want_len = len;
    w->want_buf = buf;
    w->have = 0;
}

int tar_walk_feed(struct tar_walk *w, const void *buf, size_t len)
{
    CHECK_OBJ_NOTNULL(w, TAR_WALK_MAGIC);
    if (w->st == WS_FAILED)
        return w->err;
    if (!w->armed || len > w->want_len - w->have)
        return walk_fail(w, -EINVAL, "fed %zu bytes, %zu awaited", len,
                         w->armed ? w->want_len - w->have : 0);
    if (len)
        memcpy(w->want_buf + w->have, buf, len);
    w->have += len;
    return 0;
}

/* --- header fields -------------------------------------------------------------------- */

static bool is_space(uint8_t c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Parses a numeric header field of @n bytes: octal (cut at the first NUL, surrounding white
 * space ignored, empty = 0) or GNU base-256 (first byte 0x80 positive, 0xff negative).
 * Returns 0 with *@v (two's complement when *@neg), or -1 for a malformed or too large one. */
static int field_num(const uint8_t *f, size_t n, uint64_t *v, bool *neg)
{
    uint64_t u = 0;
    *neg = false;
    if (f[0] == 0x80 || f[0] == 0xff) {
        if (f[0] == 0xff) {
            *neg = true;
            u = UINT64_MAX;
        }
        for (size_t i = 1; i < n; i++) {
            if (i + 8 < n) { /* beyond 64 bits: must be sign extension */
                if (f[i] != (*neg ? 0xff : 0))
                    return -1;
                continue;
            }
            u = (u << 8) | f[i];
        }
        if (*neg && !(u >> 63))
            return -1;
        if (!*neg && n > 8 && (u >> 63)) /* keep sizes in int64 range */
            return -1;
        *v = u;
        return 0;
    }
    if (f[0] & 0x80)
        return -1;
    const uint8_t *nul = memchr(f, 0, n);
    size_t e = nul ? (size_t)(nul - f) : n, b = 0;
    while (b < e && is_space(f[b]))
        b++;
    while (e > b && is_space(f[e - 1]))
        e--;
    for (size_t i = b; i < e; i++) {
        if (f[i] < '0' || f[i] > '7' || (u >> 61))
            return -1;
        u = u * 8 + (uint64_t)(f[i] - '0');
    }
    *v = u;
    return 0;
}

static bool header_checksum_ok(const uint8_t *h)
{
    uint64_t want;
    bool neg;
    if (field_num(h + H_CHKSUM, 8, &want, &neg) != 0 || neg)
        return false;
    uint64_t usum = 8 * ' ';
    int64_t ssum = 8 * ' ';
    for (size_t i = 0; i < TAR_BLOCK; i++) {
        if (i >= H_CHKSUM && i < H_CHKSUM + 8)
            continue;
        usum += h[i];
        ssum += (int8_t)h[i];
    }
    return want == usum || (int64_t)want == ssum;
}

static bool block_is_zero(const uint8_t *h)
{
    for (size_t i = 0; i < TAR_BLOCK; i++)
        if (h[i])
            return false;
    return true;
}

/* Length of the NUL-terminated string in a field of @n bytes. */
static size_t field_len(const uint8_t *f, size_t n)
{
    const uint8_t *nul = memchr(f, 0, n);
    return nul ? (size_t)(nul - f) : n;
}

/* --- pax ------------------------------------------------------------------------------- */

static int pax_set_path(struct pax_set *s, const uint8_t *v, size_t n)
{
    if (grow(&s->path_buf, &s->path_cap, n + 1) != 0)
        return -ENOMEM;
    memcpy(s->path_buf, v, n);
    s->path_buf[n] = '\0';
    s->path_len = n;
    return 0;
}

/* Parses a pax decimal (digits only). Returns 0 or -1 (empty, not a number, over int64). */
static int pax_u64(const uint8_t *v, size_t n, uint64_t *out)
{
    uint64_t u = 0;
    if (n == 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9' || u > (UINT64_MAX >> 1) / 10)
            return -1;
        u = u * 10 + (uint64_t)(v[i] - '0');
    }
    if (u >> 63)
        return -1;
    *out = u;
    return 0;
}

/* Applies one pax record to @s (the per-file or the global set). */
static int pax_apply(struct tar_walk *w, struct pax_set *s, bool global, const uint8_t *k,
                     size_t kn, const uint8_t *v, size_t vn, uint64_t rec_off)
{
    enum ov del = global ? OV_UNSET : OV_DELETED;
    bool is_sparse_name = kn == 15 && memcmp(k, "GNU.sparse.name", 15) == 0;
    if (kn > 11 && memcmp(k, "GNU.sparse.", 11) == 0)
        s->sparse = true;
    if ((kn == 4 && memcmp(k, "path", 4) == 0) || is_sparse_name) {
        if (vn == 0) {
            s->path = del;
            return 0;
        }
        if (pax_set_path(s, v, vn) != 0)
            return walk_fail(w, -ENOMEM, "out of memory");
        s->path = OV_SET;
    } else if (kn == 4 && memcmp(k, "size", 4) == 0) {
        if (vn == 0) {
            s->size = del;
            return 0;
        }
        if (pax_u64(v, vn, &s->size_v) != 0)
            return walk_fail(w, -EBADMSG, "bad pax size in header at offset %llu",
                             (unsigned long long)rec_off);
        s->size = OV_SET;
    } else if (kn == 5 && memcmp(k, "mtime", 5) == 0) {
        if (vn == 0) {
            s->mtime = del;
            return 0;
        }
        /* [-]digits[.fraction]; anything else is ignored (the header's mtime stays) */
        size_t i = v[0] == '-', e = i;
        while (e < vn && v[e] >= '0' && v[e] <= '9')
            e++;
        uint64_t u;
        if (e < vn && v[e] != '.')
            return 0;
        if (pax_u64(v + i, e - i, &u) != 0)
            return 0;
        s->mtime_v = i ? -(int64_t)u : (int64_t)u;
        s->mtime = OV_SET;
    }
    return 0;
}

/* Parses the pax records "LEN key=value\n" of a payload (trailing NULs allowed), as
 * Python's tarfile does: 1 to 20 length digits, a record of at least 5 bytes inside the
 * payload ending in '\n', a non-empty key. */
static int pax_parse(struct tar_walk *w, struct pax_set *s, bool global, const uint8_t *b,
                     size_t n, uint64_t hdr_off)
{
    size_t p = 0;
    while (p < n && b[p] != 0) {
        size_t q = p;
        uint64_t len = 0;
        while (q < n && q - p < 20 && b[q] >= '0' && b[q] <= '9' && len <= n)
            len = len * 10 + (uint64_t)(b[q++] - '0'); /* stops once past n: no overflow */
        if (q == p || q >= n || b[q] != ' ' || len < 5 || len > n - p || q + 1 >= p + len ||
            b[p + len - 1] != '\n')
            return walk_fail(w, -EBADMSG, "bad pax record in header at offset %llu",
                             (unsigned long long)hdr_off);
        const uint8_t *k = b + q + 1, *end = b + p + len - 1;
        const uint8_t *eq = memchr(k, '=', (size_t)(end - k));
        if (!eq || eq == k)
            return walk_fail(w, -EBADMSG, "bad pax record in header at offset %llu",
                             (unsigned long long)hdr_off);
        int rc = pax_apply(w, s, global, k, (size_t)(eq - k), eq + 1, (size_t)(end - eq - 1),
                           hdr_off);
        if (rc < 0)
            return rc;
        p += len;
    }
    return 0;
}

/* --- entries --------------------------------------------------------------------------- */

/* True for a name that must not be served or extracted: empty, absolute, a ".." segment
 * (separated by '/' or '\\'), or too long. */
static bool name_unsafe(const char *s, size_t n)
{
    if (n == 0 || n > TAR_NAME_MAX || s[0] == '/' || s[0] == '\\')
        return true;
    size_t seg = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '/' || s[i] == '\\') {
            if (i - seg == 2 && s[seg] == '.' && s[seg + 1] == '.')
                return true;
            seg = i + 1;
        }
    }
    return false;
}

/* Sets w->name to @n bytes of @s; a NUL inside cuts the name and is reported in *@nul. */
static int walk_name_set(struct tar_walk *w, const char *s, size_t n, bool *nul)
{
    const char *z = memchr(s, 0, n);
    if (z) {
        n = (size_t)(z - s);
        *nul = true;
    }
    if (grow(&w->name, &w->name_cap, n + 1) != 0)
        return -ENOMEM;
    memcpy(w->name, s, n);
    w->name[n] = '\0';
    w->cur.name = w->name;
    w->cur.name_len = n;
    return 0;
}

/* Assembles the name of the entry whose header is w->hdr: the per-file pax path, else a GNU
 * long name, else the global pax path, else the header's (ustar prefix + '/' + name). */
static int walk_name(struct tar_walk *w, bool is_dir)
{
    const uint8_t *h = w->hdr;
    bool nul = false, from_pax = false;
    int rc;
    if (w->local.path == OV_SET) {
        rc = walk_name_set(w, w->local.path_buf, w->local.path_len, &nul);
        from_pax = true;
    } else if (w->has_longname) {
        rc = walk_name_set(w, w->longname, w->longname_len, &nul);
    } else if (w->local.path == OV_UNSET && w->global.path == OV_SET) {
        rc = walk_name_set(w, w->global.path_buf, w->global.path_len, &nul);
        from_pax = true;
    } else {
        char tmp[H_PREFIX_LEN + 1 + H_NAME_LEN + 1];
        size_t nl = field_len(h + H_NAME, H_NAME_LEN), pl = 0;
        if (memcmp(h + H_MAGIC, "ustar\0", 6) == 0)
            pl = field_len(h + H_PREFIX, H_PREFIX_LEN);
        if (pl) {
            memcpy(tmp, h + H_PREFIX, pl);
            tmp[pl++] = '/';
        }
        memcpy(tmp + pl, h + H_NAME, nl);
        rc = walk_name_set(w, tmp, pl + nl, &nul);
    }
    if (rc != 0)
        return walk_fail(w, -ENOMEM, "out of memory");
    if (is_dir || from_pax)
        while (w->cur.name_len > 1 && w->name[w->cur.name_len - 1] == '/')
            w->name[--w->cur.name_len] = '\0';
    if (nul || name_unsafe(w->name, w->cur.name_len))
        w->cur.flags |= TAR_F_UNSAFE;
    return 0;
}

static void walk_reset_meta(struct tar_walk *w)
{
    w->local.path = OV_UNSET;
    w->local.size = OV_UNSET;
    w->local.mtime = OV_UNSET;
    w->local.sparse = false;
    w->has_longname = false;
    w->meta_run = 0;
    w->ent_start = UINT64_MAX;
}

static bool walk_has_meta(const struct tar_walk *w)
{
    return w->ent_start != UINT64_MAX || w->local.path != OV_UNSET ||
           w->local.size != OV_UNSET || w->local.sparse;
}

/* Emits w->cur, whose data starts at @data_off: checks it against the archive and the caps,
 * moves to the next header. */
static int walk_emit(struct tar_walk *w, struct tar_entry *ent, uint64_t data_off, bool data)
{
    struct tar_entry *e = &w->cur;
    uint64_t next = data_off;
    S3C_ASSERT(data_off > w->pos && data_off <= w->size);
    e->data_off = data_off;
    if (data) {
        if (e->size > w->size - data_off)
            return walk_fail(w, -ENODATA,
                             "member at offset %llu: %llu data bytes end past the archive",
                             (unsigned long long)e->hdr_off, (unsigned long long)e->size);
        next = data_off + e->size;
        uint64_t pad = round_block(e->size) - e->size;
        next = pad > w->size - next ? w->size : next + pad; /* padding may be cut off */
    } else {
        e->size = 0;
    }
    if (w->n_entries >= w->lim.max_entries)
        return walk_fail(w, -E2BIG, "more than %u entries", w->lim.max_entries);
    if (e->name_len > w->lim.max_name_bytes - w->name_bytes)
        return walk_fail(w, -E2BIG, "names longer than %llu bytes in all",
                         (unsigned long long)w->lim.max_name_bytes);
    w->n_entries++;
    w->name_bytes += e->name_len;
    S3C_ASSERT(next > w->pos); /* forward progress: no loop is possible */
    w->pos = next;
    w->st = WS_HEADER;
    walk_reset_meta(w);
    *ent = *e;
    return TAR_ENTRY;
}

/* Handles an entry header in w->hdr (not metadata, not zero). */
static int walk_entry(struct tar_walk *w, struct tar_entry *ent, uint64_t hsize)
{
    const uint8_t *h = w->hdr;
    uint8_t t = h[H_TYPE];
    bool data = true;
    struct tar_entry *e = &w->cur;
    memset(e, 0, sizeof(*e));
    e->hdr_off = w->ent_start != UINT64_MAX ? w->ent_start : w->pos;
    switch (t) {
    case '0': case '7':
        e->type = TAR_REG;
        break;
    case '\0': {
        size_t nl = field_len(h + H_NAME, H_NAME_LEN);
        e->type = nl && h[nl - 1] == '/' ? TAR_DIR : TAR_REG; /* v7 directory */
        data = e->type == TAR_REG;
        break;
    }
    case '1': e->type = TAR_HARDLINK; data = false; break;
    case '2': e->type = TAR_SYMLINK; data = false; break;
    case '5': e->type = TAR_DIR; data = false; break;
    case '3': case '4': case '6': e->type = TAR_OTHER; data = false; break;
    case 'S': e->type = TAR_SPARSE; break;
    default: e->type = TAR_OTHER; break; /* 'D' 'M' 'V' and unknown: data skipped */
    }
    if (e->type == TAR_REG && (w->local.sparse || w->global.sparse))
        e->type = TAR_SPARSE;

    e->size = hsize;
    if (w->local.size == OV_SET)
        e->size = w->local.size_v;
    else if (w->local.size == OV_UNSET && w->global.size == OV_SET)
        e->size = w->global.size_v;

    uint64_t mt;
    bool neg;
    e->mtime = field_num(h + H_MTIME, H_NUM_LEN, &mt, &neg) == 0 ? (int64_t)mt : 0;
    if (w->local.mtime == OV_SET)
        e->mtime = w->local.mtime_v;
    else if (w->local.mtime == OV_UNSET && w->global.mtime == OV_SET)
        e->mtime = w->global.mtime_v;

    int rc = walk_name(w, e->type == TAR_DIR);
    if (rc < 0)
        return rc;
    if (t == 'S' && h[H_SP_EXTENDED]) {
        w->st = WS_SPARSE_EXT;
        w->ext_pos = w->pos + TAR_BLOCK;
        w->ext_blocks = 0;
        return STEP_AGAIN;
    }
    return walk_emit(w, ent, w->pos + TAR_BLOCK, data);
}

static int walk_header(struct tar_walk *w, struct tar_entry *ent)
{
    if (!w->armed) {
        if (w->pos == w->size) {
            if (walk_has_meta(w))
                return walk_fail(w, -EBADMSG, "extended header at offset %llu has no entry",
                                 (unsigned long long)w->ent_start);
            w->st = WS_END;
            return TAR_END;
        }
        if (w->size - w->pos < TAR_BLOCK)
            return walk_fail(w, -ENODATA, "truncated header at offset %llu",
                             (unsigned long long)w->pos);
        walk_arm(w, w->pos, TAR_BLOCK, w->hdr);
        return STEP_AGAIN;
    }
    w->armed = false;
    const uint8_t *h = w->hdr;
    if (block_is_zero(h)) {
        if (walk_has_meta(w))
            return walk_fail(w, -EBADMSG, "extended header at offset %llu has no entry",
                             (unsigned long long)w->ent_start);
        w->st = WS_END;
        return TAR_END;
    }
    if (!header_checksum_ok(h))
        return walk_fail(w, -EBADMSG, "bad header checksum at offset %llu",
                         (unsigned long long)w->pos);
    uint64_t hsize;
    bool neg;
    if (field_num(h + H_SIZE, H_NUM_LEN, &hsize, &neg) != 0 || neg)
        return walk_fail(w, -EBADMSG, "bad size field in header at offset %llu",
                         (unsigned long long)w->pos);
    uint8_t t = h[H_TYPE];
    if (t != 'x' && t != 'g' && t != 'X' && t != 'L' && t != 'K')
        return walk_entry(w, ent, hsize);

    if (++w->meta_run > w->lim.max_meta_run)
        return walk_fail(w, -E2BIG, "more than %u extended headers in a row at offset %llu",
                         w->lim.max_meta_run, (unsigned long long)w->pos);
    if (hsize > w->lim.max_meta)
        return walk_fail(w, -E2BIG, "extended header at offset %llu: %llu bytes (cap %u)",
                         (unsigned long long)w->pos, (unsigned long long)hsize,
                         w->lim.max_meta);
    if (hsize > w->size - w->pos - TAR_BLOCK)
        return walk_fail(w, -ENODATA, "extended header at offset %llu ends past the archive",
                         (unsigned long long)w->pos);
    if (t != 'g' && w->ent_start == UINT64_MAX)
        w->ent_start = w->pos;
    if (grow(&w->meta, &w->meta_cap, (size_t)hsize + 1) != 0)
        return walk_fail(w, -ENOMEM, "out of memory");
    w->meta_type = (char)t;
    w->meta_size = hsize;
    w->st = WS_META;
    walk_arm(w, w->pos + TAR_BLOCK, (size_t)hsize, w->meta);
    return STEP_AGAIN;
}

static int walk_meta(struct tar_walk *w)
{
    const uint8_t *b = w->meta;
    size_t n = (size_t)w->meta_size;
    int rc = 0;
    w->armed = false;
    switch (w->meta_type) {
    case 'L':
        n = field_len(b, n);
        if (grow(&w->longname, &w->longname_cap, n + 1) != 0)
            return walk_fail(w, -ENOMEM, "out of memory");
        memcpy(w->longname, b, n);
        w->longname[n] = '\0';
        w->longname_len = n;
        w->has_longname = true;
        break;
    case 'K':
        break; /* link targets are not served */
    case 'g':
        rc = pax_parse(w, &w->global, true, b, n, w->pos);
        break;
    default:
        rc = pax_parse(w, &w->local, false, b, n, w->pos);
        break;
    }
    if (rc < 0)
        return rc;
    uint64_t next = w->pos + TAR_BLOCK + w->meta_size;
    uint64_t pad = round_block(w->meta_size) - w->meta_size;
    next = pad > w->size - next ? w->size : next + pad;
    S3C_ASSERT(next > w->pos);
    w->pos = next;
    w->st = WS_HEADER;
    return STEP_AGAIN;
}

static int walk_sparse_ext(struct tar_walk *w, struct tar_entry *ent)
{
    if (!w->armed) {
        if (w->size - w->ext_pos < TAR_BLOCK)
            return walk_fail(w, -ENODATA, "truncated sparse header at offset %llu",
                             (unsigned long long)w->ext_pos);
        walk_arm(w, w->ext_pos, TAR_BLOCK, w->hdr);
        return STEP_AGAIN;
    }
    w->armed = false;
    w->ext_pos += TAR_BLOCK;
    if (++w->ext_blocks > TAR_SPARSE_EXT_MAX)
        return walk_fail(w, -E2BIG, "more than %u sparse blocks at offset %llu",
                         TAR_SPARSE_EXT_MAX, (unsigned long long)w->pos);
    if (w->hdr[H_SPX_EXTENDED])
        return STEP_AGAIN;
    return walk_emit(w, ent, w->ext_pos, true);
}

int tar_walk_next(struct tar_walk *w, struct tar_entry *ent, struct tar_need *need)
{
    CHECK_OBJ_NOTNULL(w, TAR_WALK_MAGIC);
    for (;;) {
        int rc;
        if (w->st == WS_FAILED)
            return w->err;
        if (w->st == WS_END)
            return TAR_END;
        if (w->armed && w->have < w->want_len) {
            need->off = w->want_off + w->have;
            need->len = w->want_len - w->have;
            return TAR_NEED;
        }
        switch (w->st) {
        case WS_HEADER: rc = walk_header(w, ent); break;
        case WS_META: rc = walk_meta(w); break;
        case WS_SPARSE_EXT: rc = walk_sparse_ext(w, ent); break;
        default: S3C_ASSERT(!"walk state"); return -EINVAL;
        }
        if (rc != STEP_AGAIN)
            return rc;
    }
}

/* --- the whole walk -------------------------------------------------------------------- */

int tar_walk_all(uint64_t archive_size, const struct tar_limits *lim, tar_read_f *read,
                 void *read_cls, tar_entry_f *on_entry, void *entry_cls, struct errmsg *em)
{
    struct tar_walk *w = NULL;
    int rc = tar_walk_new(archive_size, lim, &w);
    while (rc == 0) {
        struct tar_entry ent;
        struct tar_need need;
        const void *bytes = NULL;
        rc = tar_walk_next(w, &ent, &need);
        if (rc == TAR_END) {
            rc = 0;
            break;
        }
        if (rc == TAR_ENTRY) {
            rc = on_entry(entry_cls, &ent, em);
        } else if (rc == TAR_NEED) {
            if (!(rc = read(read_cls, need.off, need.len, &bytes, em)))
                rc = tar_walk_feed(w, bytes, need.len);
        } else {
            errmsg_set(em, "tar: %s", tar_walk_reason(w));
        }
    }
    tar_walk_free(w);
    return rc;
}
