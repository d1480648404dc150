/*
 * buf.c: growable, capped, NUL-terminated byte buffers (lib/buf.h), with
 * XML and JSON escaping for the response writers.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "hex.h"

void buf_init(struct buf *b, size_t max)
{
    b->p = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

static int buf_reserve(struct buf *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    if (b->len + extra > b->max || need < b->len)
        return -EMSGSIZE;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    if (cap > b->max + 1)
        cap = b->max + 1;
    char *p = realloc(b->p, cap);
    if (!p)
        return -ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
    int rc = buf_reserve(b, n);
    if (rc)
        return rc;
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int buf_puts(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    char small[256];
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n < sizeof(small))
        return buf_append(b, small, (size_t)n);
    int rc = buf_reserve(b, (size_t)n);
    if (rc)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

static size_t buf_utf8_len(const unsigned char *s);

#define BUF_U_FFFD "\xef\xbf\xbd" /* U+FFFD REPLACEMENT CHARACTER in UTF-8 */

/* buf_xml() and buf_xml_text(): @strict writes only what XML 1.0 allows. */
static int buf_xml_escaped(struct buf *b, const char *s, int strict)
{
    const char *run = s;
    int rc = 0;
    for (; *s && !rc; s++) {
        const char *rep = NULL;
        char num[16];
        unsigned char ch = (unsigned char)*s;
        switch (ch) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&quot;"; break;
        case '\'': rep = "&apos;"; break;
        default:
            if (strict && ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') {
                rep = BUF_U_FFFD; /* no XML 1.0 Char, not even as &#N; */
            } else if (ch < 0x20 || ch == 0x7f) {
                snprintf(num, sizeof(num), "&#%u;", ch);
                rep = num;
            } else if (strict && ch >= 0x80) {
                size_t n = buf_utf8_len((const unsigned char *)s);
                if (n) {
                    s += n - 1; /* UTF-8 as it is */
                    continue;
                }
                rep = BUF_U_FFFD; /* not UTF-8 (a POSIX file name) */
            }
        }
        if (!rep)
            continue;
        rc = buf_append(b, run, (size_t)(s - run));
        if (!rc)
            rc = buf_puts(b, rep);
        run = s + 1;
    }
    if (!rc)
        rc = buf_append(b, run, (size_t)(s - run));
    return rc;
}

int buf_xml(struct buf *b, const char *s)
{
    return buf_xml_escaped(b, s, 0);
}

int buf_xml_text(struct buf *b, const char *s)
{
    return buf_xml_escaped(b, s, 1);
}

static int buf_xml_elem_escaped(struct buf *b, const char *name, const char *value, int strict)
{
    int rc = buf_printf(b, "<%s>", name);
    if (!rc)
        rc = buf_xml_escaped(b, value ? value : "", strict);
    if (!rc)
        rc = buf_printf(b, "</%s>", name);
    return rc;
}

int buf_xml_elem(struct buf *b, const char *name, const char *value)
{
    return buf_xml_elem_escaped(b, name, value, 0);
}

int buf_xml_text_elem(struct buf *b, const char *name, const char *value)
{
    return buf_xml_elem_escaped(b, name, value, 1);
}

/* Length of the well-formed UTF-8 sequence at @s (RFC 3629: no overlong form, no surrogate,
 * at most U+10FFFF), or 0. @s is NUL-terminated (a NUL is never a continuation byte). */
static size_t buf_utf8_len(const unsigned char *s)
{
    unsigned c = s[0], cp;
    size_t n;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

int buf_json_hex(struct buf *b, const char *s)
{
    char pair[3];
    int rc = buf_puts(b, "\"");
    for (; !rc && *s; s++) {
        hex_encode(s, 1, pair);
        rc = buf_append(b, pair, 2);
    }
    return rc ? rc : buf_puts(b, "\"");
}

int buf_json_str(struct buf *b, const char *s)
{
    int rc = buf_append(b, "\"", 1);
    const char *run = s;
    for (; *s && !rc; s++) {
        unsigned char ch = (unsigned char)*s;
        char esc[8];
        const char *rep = NULL;
        if (ch == '"')
            rep = "\\\"";
        else if (ch == '\\')
            rep = "\\\\";
        else if (ch < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", ch);
            rep = esc;
        } else if (ch >= 0x80) {
            size_t n = buf_utf8_len((const unsigned char *)s);
            if (n) {
                s += n - 1; /* UTF-8 as it is */
                continue;
            }
            rep = "\\ufffd"; /* not UTF-8 (a POSIX file name): JSON cannot carry the byte */
        }
        if (!rep)
            continue;
        rc = buf_append(b, run, (size_t)(s - run));
        if (!rc)
            rc = buf_puts(b, rep);
        run = s + 1;
    }
    if (!rc)
        rc = buf_append(b, run, (size_t)(s - run));
    if (!rc)
        rc = buf_append(b, "\"", 1);
    return rc;
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = '\0';
}

char *buf_take(struct buf *b)
{
    char *p = b->p;
    if (!p)
        p = calloc(1, 1);
    b->p = NULL;
    b->len = b->cap = 0;
    return p;
}

void buf_free(struct buf *b)
{
    if (!b)
        return;
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}
