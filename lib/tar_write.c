/*
 * tar_write.c: the header blocks of tar entries a response generates (batches): ustar, with a
 * pax extended header ('x') in front when the name does not fit the 100-byte name field, the
 * size does not fit 11 octal digits, or the caller adds records of its own. What Python's
 * tarfile, GNU tar and bsdtar read. Pure.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tar.h"

#define USTAR_SIZE_MAX 077777777777ull /* 11 octal digits: 8 GiB - 1 */

/* One ustar header block at @p: a regular file ('0') or a pax header ('x'). */
static void ustar_block(unsigned char *p, const char *name, size_t name_len, uint64_t size,
                        int64_t mtime, char type)
{
    memset(p, 0, TAR_BLOCK);
    memcpy(p, name, name_len > 100 ? 100 : name_len);
    snprintf((char *)p + 100, 8, "%07o", 0644);
    snprintf((char *)p + 108, 8, "%07o", 0);
    snprintf((char *)p + 116, 8, "%07o", 0);
    snprintf((char *)p + 124, 12, "%011llo",
             (unsigned long long)(size > USTAR_SIZE_MAX ? 0 : size));
    snprintf((char *)p + 136, 12, "%011llo",
             (unsigned long long)(mtime < 0 ? 0 : mtime > 077777777777ll ? 077777777777ll : mtime));
    p[156] = (unsigned char)type;
    memcpy(p + 257, "ustar", 6); /* magic "ustar\0", version "00" */
    memcpy(p + 263, "00", 2);
    memset(p + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < TAR_BLOCK; i++)
        sum += p[i];
    snprintf((char *)p + 148, 8, "%06o", sum);
}

/* Appends the pax record "LEN key=value\n" at *@at (inside @cap bytes of @out): LEN counts
 * the whole record, its own digits included. 0 or -E2BIG. */
static int pax_record(unsigned char *out, size_t cap, size_t *at, const char *key,
                      const char *value, size_t value_len)
{
    size_t body = 1 + strlen(key) + 1 + value_len + 1; /* " key=value\n" */
    size_t len = body + 1, digits = 1;
    for (;;) {
        size_t d = 1;
        for (size_t x = len; x >= 10; x /= 10)
            d++;
        if (d == digits)
            break;
        digits = d;
        len = body + digits;
    }
    if (*at + len > cap)
        return -E2BIG;
    int n = snprintf((char *)out + *at, cap - *at, "%zu %s=", len, key);
    memcpy(out + *at + n, value, value_len);
    out[*at + len - 1] = '\n';
    *at += len;
    return 0;
}

ssize_t tar_write_header(void *buf, size_t cap, const char *name, size_t name_len,
                         uint64_t size, int64_t mtime, const struct tar_write_kv *pax,
                         size_t n_pax)
{
    unsigned char *out = buf;
    int need_pax = name_len > 100 || size > USTAR_SIZE_MAX || n_pax > 0 ||
                   memchr(name, '\0', name_len) != NULL;
    if (!name_len || memchr(name, '\0', name_len))
        return -EINVAL;
    if (!need_pax) {
        if (cap < TAR_BLOCK)
            return -E2BIG;
        ustar_block(out, name, name_len, size, mtime, '0');
        return TAR_BLOCK;
    }
    /* records after the first block (the 'x' header), which is written last */
    size_t at = TAR_BLOCK;
    int rc = 0;
    if (cap < 2 * TAR_BLOCK)
        return -E2BIG;
    if (name_len > 100)
        rc = pax_record(out, cap - TAR_BLOCK, &at, "path", name, name_len);
    if (!rc && size > USTAR_SIZE_MAX) {
        char sz[24];
        int n = snprintf(sz, sizeof(sz), "%llu", (unsigned long long)size);
        rc = pax_record(out, cap - TAR_BLOCK, &at, "size", sz, (size_t)n);
    }
    for (size_t i = 0; i < n_pax && !rc; i++)
        rc = pax_record(out, cap - TAR_BLOCK, &at, pax[i].key, pax[i].value, strlen(pax[i].value));
    if (rc)
        return rc;
    size_t rec_len = at - TAR_BLOCK;
    size_t padded = (rec_len + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
    if (TAR_BLOCK + padded + TAR_BLOCK > cap)
        return -E2BIG;
    memset(out + at, 0, TAR_BLOCK + padded - at);
    ustar_block(out, "././@PaxHeader", 14, rec_len, mtime, 'x');
    ustar_block(out + TAR_BLOCK + padded, name, name_len, size, mtime, '0');
    return (ssize_t)(TAR_BLOCK + padded + TAR_BLOCK);
}
