/*
 * tar_index.c: the member index of one tar archive as a byte blob (an LMDB value): built from
 * tar_walk entries, read in place with bounds checks (binary search on a sorted table of
 * record numbers). Owns the blobs it makes until handed over; a view owns nothing.
 * Layout: see tar.h.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "arr.h"
#include "tar.h"

#define TAR_INDEX_MAX_MEMBERS (1u << 24)

/* Grows *@buf to hold @need bytes. Returns 0 or -ENOMEM. */
static int grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap && *buf)
        return 0;
    size_t c = *cap ? *cap : 4096;
    while (c < need)
        c *= 2;
    char *nb = realloc(*buf, c);
    if (!nb)
        return -ENOMEM;
    *buf = nb;
    *cap = c;
    return 0;
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

#define IX_MAGIC "TARX"
#define IX_OFF_N 8
#define IX_OFF_NAMES 12
#define IX_OFF_ASIZE 16
#define IX_OFF_SKIPPED 24
#define IX_OFF_CRC 28

struct bent {
    uint64_t data_off, size;
    uint64_t name_off; /* in the builder's names */
    uint32_t name_len;
    bool reg;
    bool drop;
};

struct tar_index_builder {
    uint64_t archive_size;
    struct bent *v;
    size_t n, cap;
    char *names;
    size_t names_len, names_cap;
    uint32_t n_unsafe;
};

int tar_index_builder_new(uint64_t archive_size, struct tar_index_builder **out)
{
    struct tar_index_builder *b = calloc(1, sizeof(*b));
    *out = b;
    if (!b)
        return -ENOMEM;
    b->archive_size = archive_size;
    return 0;
}

void tar_index_builder_free(struct tar_index_builder *b)
{
    if (!b)
        return;
    free(b->v);
    free(b->names);
    free(b);
}

int tar_index_builder_add(struct tar_index_builder *b, const struct tar_entry *ent)
{
    if (ent->flags & TAR_F_UNSAFE) {
        b->n_unsafe++;
        return 0;
    }
    if (b->n >= TAR_INDEX_MAX_MEMBERS || ent->name_len > UINT16_MAX ||
        ent->name_len > UINT32_MAX - b->names_len)
        return -E2BIG;
    if (ARR_GROW(b->v, b->n, 1, b->cap))
        return -ENOMEM;
    if (grow(&b->names, &b->names_cap, b->names_len + ent->name_len) != 0)
        return -ENOMEM;
    memcpy(b->names + b->names_len, ent->name, ent->name_len);
    b->v[b->n++] = (struct bent){ .data_off = ent->data_off, .size = ent->size,
                                  .name_off = b->names_len, .name_len = (uint32_t)ent->name_len,
                                  .reg = ent->type == TAR_REG };
    b->names_len += ent->name_len;
    return 0;
}

static int name_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    if (c)
        return c;
    return an < bn ? -1 : an > bn;
}

static int builder_cmp(const void *x, const void *y, void *cls)
{
    const struct tar_index_builder *b = cls;
    uint32_t i = *(const uint32_t *)x, j = *(const uint32_t *)y;
    const struct bent *p = &b->v[i], *q = &b->v[j];
    int c = name_cmp(b->names + p->name_off, p->name_len, b->names + q->name_off, q->name_len);
    return c ? c : (i > j) - (i < j);
}

int tar_index_builder_finish(struct tar_index_builder *b, void **blob, size_t *len)
{
    uint32_t *order = NULL, *rank = NULL;
    uint8_t *out = NULL;
    int rc = -ENOMEM;
    size_t n = b->n;
    *blob = NULL;
    *len = 0;
    order = malloc((n ? n : 1) * sizeof(*order));
    rank = malloc((n ? n : 1) * sizeof(*rank));
    if (!order || !rank)
        goto out;
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    qsort_r(order, n, sizeof(*order), builder_cmp, b);
    /* tar semantics: of entries sharing a name, the last one (in archive order) wins */
    for (size_t k = 0; k < n; k++) {
        struct bent *e = &b->v[order[k]];
        bool shadowed = false;
        if (k + 1 < n) {
            const struct bent *f = &b->v[order[k + 1]];
            shadowed = name_cmp(b->names + e->name_off, e->name_len, b->names + f->name_off,
                                f->name_len) == 0;
        }
        e->drop = shadowed || !e->reg;
    }
    uint32_t m = 0;
    uint64_t names_len = 0;
    for (size_t i = 0; i < n; i++)
        if (!b->v[i].drop) {
            rank[i] = m++;
            names_len += b->v[i].name_len;
        }
    size_t total = TAR_INDEX_HDR + (size_t)m * (TAR_INDEX_REC + 4) + (size_t)names_len;
    out = calloc(1, total);
    if (!out)
        goto out;
    memcpy(out, IX_MAGIC, 4);
    out[4] = TAR_INDEX_VERSION;
    out[5] = TAR_INDEX_REC;
    put32(out + IX_OFF_N, m);
    put32(out + IX_OFF_NAMES, (uint32_t)names_len);
    put64(out + IX_OFF_ASIZE, b->archive_size);
    put32(out + IX_OFF_SKIPPED, (uint32_t)(n - m + b->n_unsafe));
    uint8_t *recs = out + TAR_INDEX_HDR, *sorted = recs + (size_t)m * TAR_INDEX_REC;
    uint8_t *names = sorted + (size_t)m * 4;
    uint32_t noff = 0;
    for (size_t i = 0; i < n; i++) {
        const struct bent *e = &b->v[i];
        if (e->drop)
            continue;
        uint8_t *r = recs + (size_t)rank[i] * TAR_INDEX_REC;
        put64(r, e->data_off);
        put64(r + 8, e->size);
        put32(r + 16, noff);
        put16(r + 20, (uint16_t)e->name_len);
        memcpy(names + noff, b->names + e->name_off, e->name_len);
        noff += e->name_len;
    }
    uint32_t k = 0;
    for (size_t j = 0; j < n; j++)
        if (!b->v[order[j]].drop)
            put32(sorted + 4 * (size_t)k++, rank[order[j]]);
    put32(out + IX_OFF_CRC, (uint32_t)crc32_z(0L, out, total));
    *blob = out;
    *len = total;
    out = NULL;
    rc = 0;
out:
    free(order);
    free(rank);
    free(out);
    return rc;
}

/* tar_walk_all()'s entry callback: the entry into the builder @cls. */
static int build_add(void *cls, const struct tar_entry *ent, struct errmsg *em)
{
    int rc = tar_index_builder_add(cls, ent);
    if (rc)
        errmsg_set(em, "tar index: %s at member %llu",
                   rc == -E2BIG ? "too many members" : "out of memory",
                   (unsigned long long)ent->hdr_off);
    return rc;
}

int tar_index_build(uint64_t size, const struct tar_limits *lim, tar_read_f *read, void *cls,
                    void **blob, size_t *len, struct errmsg *em)
{
    struct tar_index_builder *b = NULL;
    *blob = NULL;
    *len = 0;
    int rc = tar_index_builder_new(size, &b);
    if (!rc)
        rc = tar_walk_all(size, lim, read, cls, build_add, b, em);
    if (!rc)
        rc = tar_index_builder_finish(b, blob, len);
    tar_index_builder_free(b);
    return rc;
}

/* A file read with pread into a buffer grown to the largest read. */
struct fd_reader {
    int fd;
    char *buf;
    size_t cap;
};

static int fd_read(void *cls, uint64_t off, size_t len, const void **bytes, struct errmsg *em)
{
    struct fd_reader *r = cls;
    if (grow(&r->buf, &r->cap, len) != 0)
        return -ENOMEM;
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(r->fd, r->buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int rc = n < 0 ? -errno : -ENODATA;
            errmsg_set(em, "tar: pread at %llu: %s", (unsigned long long)(off + got),
                       n < 0 ? strerror(errno) : "file shorter than its size");
            return rc;
        }
        got += (size_t)n;
    }
    *bytes = r->buf;
    return 0;
}

int tar_index_build_fd(int fd, uint64_t size, const struct tar_limits *lim, void **blob,
                       size_t *len, struct errmsg *em)
{
    struct fd_reader r = {fd, NULL, 0};
    int rc = tar_index_build(size, lim, fd_read, &r, blob, len, em);
    free(r.buf);
    return rc;
}

/* --- reading a blob -------------------------------------------------------------------- */

int tar_index_open(struct tar_index *ix, const void *blob, size_t len, struct errmsg *em)
{
    const uint8_t *p = blob;
    memset(ix, 0, sizeof(*ix));
    if (!p || len < TAR_INDEX_HDR) {
        errmsg_set(em, "tar index: %zu bytes, shorter than its header", len);
        return -EBADMSG;
    }
    if (memcmp(p, IX_MAGIC, 4) != 0) {
        errmsg_set(em, "tar index: bad magic");
        return -EBADMSG;
    }
    if (p[4] != TAR_INDEX_VERSION || p[5] != TAR_INDEX_REC || get16(p + 6) != 0) {
        errmsg_set(em, "tar index: version %u record size %u, not %u and %u", p[4], p[5],
                   TAR_INDEX_VERSION, TAR_INDEX_REC);
        return -EBADMSG;
    }
    uint32_t n = get32(p + IX_OFF_N), names_len = get32(p + IX_OFF_NAMES);
    uint64_t want = TAR_INDEX_HDR + (uint64_t)n * (TAR_INDEX_REC + 4) + names_len;
    if (n > TAR_INDEX_MAX_MEMBERS || want != len) {
        errmsg_set(em, "tar index: %u members and %u name bytes need %llu bytes, not %zu", n,
                   names_len, (unsigned long long)want, len);
        return -EBADMSG;
    }
    ix->blob = p;
    ix->len = len;
    ix->n = n;
    ix->names_len = names_len;
    ix->archive_size = get64(p + IX_OFF_ASIZE);
    ix->n_skipped = get32(p + IX_OFF_SKIPPED);
    return 0;
}

/* Reads record @i (< ix->n) with bounds checks. Returns 0 or -EBADMSG. */
static int ix_member(const struct tar_index *ix, uint32_t i, struct tar_member *out)
{
    const uint8_t *r = ix->blob + TAR_INDEX_HDR + (size_t)i * TAR_INDEX_REC;
    const uint8_t *names = ix->blob + TAR_INDEX_HDR + (size_t)ix->n * (TAR_INDEX_REC + 4);
    uint64_t off = get64(r), size = get64(r + 8);
    uint32_t noff = get32(r + 16);
    uint16_t nlen = get16(r + 20);
    if ((uint64_t)noff + nlen > ix->names_len || off > ix->archive_size ||
        size > ix->archive_size - off || get16(r + 22) != 0)
        return -EBADMSG;
    out->name = (const char *)names + noff;
    out->name_len = nlen;
    out->data_off = off;
    out->size = size;
    out->pos = i;
    return 0;
}

int tar_index_get(const struct tar_index *ix, uint32_t pos, struct tar_member *out)
{
    if (pos >= ix->n)
        return -ERANGE;
    return ix_member(ix, pos, out);
}

int tar_index_find(const struct tar_index *ix, const char *name, size_t name_len,
                   struct tar_member *out)
{
    if (ix->n == 0)
        return -ENOENT;
    const uint8_t *sorted = ix->blob + TAR_INDEX_HDR + (size_t)ix->n * TAR_INDEX_REC;
    uint32_t lo = 0, hi = ix->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2, i = get32(sorted + 4 * (size_t)mid);
        struct tar_member m;
        if (i >= ix->n || ix_member(ix, i, &m) != 0)
            return -EBADMSG;
        int c = name_cmp(name, name_len, m.name, m.name_len);
        if (c == 0) {
            *out = m;
            return 0;
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -ENOENT;
}

int tar_index_verify(const struct tar_index *ix, struct errmsg *em)
{
    uint8_t hdr[TAR_INDEX_HDR];
    memcpy(hdr, ix->blob, TAR_INDEX_HDR);
    put32(hdr + IX_OFF_CRC, 0);
    uLong crc = crc32(0L, hdr, TAR_INDEX_HDR);
    crc = crc32_z(crc, ix->blob + TAR_INDEX_HDR, ix->len - TAR_INDEX_HDR);
    if ((uint32_t)crc != get32(ix->blob + IX_OFF_CRC)) {
        errmsg_set(em, "tar index: crc mismatch");
        return -EBADMSG;
    }
    uint64_t end = 0;
    for (uint32_t i = 0; i < ix->n; i++) {
        struct tar_member m;
        if (ix_member(ix, i, &m) != 0 || m.data_off < TAR_BLOCK || m.data_off - TAR_BLOCK < end) {
            errmsg_set(em, "tar index: member %u out of bounds or order", i);
            return -EBADMSG;
        }
        end = m.data_off + m.size;
    }
    const uint8_t *sorted = ix->blob + TAR_INDEX_HDR + (size_t)ix->n * TAR_INDEX_REC;
    struct tar_member prev = { 0 };
    for (uint32_t k = 0; k < ix->n; k++) {
        uint32_t i = get32(sorted + 4 * (size_t)k);
        struct tar_member m;
        if (i >= ix->n || ix_member(ix, i, &m) != 0 ||
            (k && name_cmp(prev.name, prev.name_len, m.name, m.name_len) >= 0)) {
            errmsg_set(em, "tar index: name table not sorted at %u", k);
            return -EBADMSG;
        }
        prev = m;
    }
    return 0;
}
