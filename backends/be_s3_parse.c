/*
 * be_s3_parse.c: reading what an S3 upstream answers: ISO 8601 and HTTP dates, quoted ETags,
 * percent-escapes of listings, Content-MD5 of a hex MD5, and a tiny bounded XML tag reader
 * (<Tag>text</Tag>, no nesting of the same name) for its response bodies.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "backend.h"
#include "be_s3_priv.h"
#include "lib/buf.h"
#include "lib/conf.h"
#include "lib/hex.h"
#include "lib/log.h"
#include "lib/s3c.h"
#include "lib/s3err.h"
#include "sig/sigv4.h"

/* ---- small helpers --------------------------------------------------------------------- */

char *s3_strdup0(const char *s)
{
    return (s && *s) ? strdup(s) : NULL;
}

void s3_copy(char *dst, size_t cap, const char *s, size_t n)
{
    if (!cap)
        return;
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, s, n);
    dst[n] = '\0';
}

int s3_is_md5_hex(const char *s)
{
    size_t i;
    for (i = 0; s[i]; i++)
        if (!isxdigit((unsigned char)s[i]))
            return 0;
    return i == 32;
}

/* Base64 of the 16 bytes that @hex (32 hex digits) spells: the Content-MD5 header value. */
void s3_md5_b64(const char *hex, char out[32])
{
    unsigned char bin[16];
    for (int i = 0; i < 16; i++)
        bin[i] = (unsigned char)(hex_digit(hex[2 * i]) << 4 | hex_digit(hex[2 * i + 1]));
    EVP_EncodeBlock((unsigned char *)out, bin, 16);
}

/* Percent-decodes @s[0..n) into a malloc'd string; '+' is a space when
 * @plus (S3's encoding-type=url). NULL on ENOMEM. */
char *s3_url_decode(const char *s, size_t n, int plus)
{
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        int a, b;
        if (s[i] == '%' && i + 2 < n &&
            (a = hex_digit((unsigned char)s[i + 1])) >= 0 &&
            (b = hex_digit((unsigned char)s[i + 2])) >= 0) {
            *o++ = (char)(a << 4 | b);
            i += 2;
        } else if (plus && s[i] == '+') {
            *o++ = ' ';
        } else {
            *o++ = s[i];
        }
    }
    *o = '\0';
    return out;
}

/* "2009-10-12T17:50:30.000Z" -> ns since the epoch; 0 when unparsable. */
int64_t s3_parse_iso8601(const char *s)
{
    struct tm tm;
    int y, mo, d, h, mi, sec, n = 0;
    memset(&tm, 0, sizeof(tm));
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6)
        return 0;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return 0;
    int64_t ns = 0, scale = 100000000;
    const char *p = s + n;
    if (*p == '.')
        for (p++; isdigit((unsigned char)*p); p++, scale /= 10)
            ns += (*p - '0') * scale;
    return (int64_t)t * 1000000000ll + ns;
}

int64_t s3_parse_http_date(const char *s)
{
    time_t t = curl_getdate(s, NULL);
    return t == (time_t)-1 ? 0 : (int64_t)t * 1000000000ll;
}

/* Strips surrounding quotes (and a weak W/ prefix) of an ETag into @out. */
void s3_etag_unquote(const char *s, size_t n, char *out, size_t cap)
{
    if (n >= 2 && s[0] == 'W' && s[1] == '/') {
        s += 2;
        n -= 2;
    }
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
        s++;
        n -= 2;
    }
    s3_copy(out, cap, s, n);
}

/* ---- the XML reader: <Tag>text</Tag>, bounded, no nesting of the same name ---------------- */

/* Finds the next element @tag in [p, end): sets its inner text span and returns the position
 * after it, or NULL. Matches "<Tag>", "<Tag attr=..>" and "<Tag/>" (empty). */
const char *s3x_find(const char *p, const char *end, const char *tag, const char **vs,
                            const char **ve)
{
    size_t tl = strlen(tag);
    while (p && p < end) {
        const char *lt = memchr(p, '<', (size_t)(end - p));
        if (!lt)
            return NULL;
        const char *nm = lt + 1;
        if ((size_t)(end - nm) > tl && !memcmp(nm, tag, tl) &&
            (nm[tl] == '>' || nm[tl] == ' ' || nm[tl] == '/' || nm[tl] == '\t' ||
             nm[tl] == '\n' || nm[tl] == '\r')) {
            const char *gt = memchr(nm + tl, '>', (size_t)(end - nm - tl));
            if (!gt)
                return NULL;
            if (gt[-1] == '/') {
                *vs = *ve = gt;
                return gt + 1;
            }
            const char *q = gt + 1;
            while (q < end) {
                const char *c = memchr(q, '<', (size_t)(end - q));
                if (!c)
                    return NULL;
                if ((size_t)(end - c) >= tl + 3 && c[1] == '/' && !memcmp(c + 2, tag, tl) &&
                    c[2 + tl] == '>') {
                    *vs = gt + 1;
                    *ve = c;
                    return c + 3 + tl;
                }
                q = c + 1;
            }
            return NULL;
        }
        p = lt + 1;
    }
    return NULL;
}

/* Decodes the XML text [s, e) (entities &lt; &gt; &amp; &quot; &apos; &#N; &#xN;) into a
 * malloc'd string; NULL on ENOMEM. */
char *s3x_text(const char *s, const char *e)
{
    size_t n = (size_t)(e - s);
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    while (s < e) {
        if (*s != '&') {
            *o++ = *s++;
            continue;
        }
        const char *semi = memchr(s, ';', (size_t)(e - s));
        size_t el = semi ? (size_t)(semi - s) : 0;
        static const struct { const char *name; char c; } ents[] = {
            {"&lt", '<'}, {"&gt", '>'}, {"&amp", '&'}, {"&quot", '"'}, {"&apos", '\''},
        };
        int done = 0;
        for (size_t i = 0; semi && i < ARRAY_SIZE(ents) && !done; i++)
            if (el == strlen(ents[i].name) && !memcmp(s, ents[i].name, el)) {
                *o++ = ents[i].c;
                done = 1;
            }
        if (!done && semi && el > 2 && s[1] == '#') {
            unsigned long cp = (s[2] == 'x' || s[2] == 'X') ? strtoul(s + 3, NULL, 16)
                                                            : strtoul(s + 2, NULL, 10);
            if (cp > 0 && cp < 0x80) {
                *o++ = (char)cp;
            } else if (cp < 0x800) {
                *o++ = (char)(0xc0 | (cp >> 6));
                *o++ = (char)(0x80 | (cp & 0x3f));
            } else if (cp < 0x10000) {
                *o++ = (char)(0xe0 | (cp >> 12));
                *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
                *o++ = (char)(0x80 | (cp & 0x3f));
            } else if (cp < 0x110000) {
                *o++ = (char)(0xf0 | (cp >> 18));
                *o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
                *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
                *o++ = (char)(0x80 | (cp & 0x3f));
            }
            done = 1;
        }
        if (done) {
            s = semi + 1;
        } else {
            *o++ = *s++;
        }
    }
    *o = '\0';
    return out;
}

/* The decoded text of the first @tag in [p, end) into @out (truncated to @cap). 0 or -ENOENT
 * / -ENOMEM. */
int s3x_get(const char *p, const char *end, const char *tag, char *out, size_t cap)
{
    const char *vs, *ve;
    if (!s3x_find(p, end, tag, &vs, &ve))
        return -ENOENT;
    char *t = s3x_text(vs, ve);
    if (!t)
        return -ENOMEM;
    s3_copy(out, cap, t, strlen(t));
    free(t);
    return 0;
}

uint64_t s3x_u64(const char *p, const char *end, const char *tag)
{
    char tmp[32];
    if (s3x_get(p, end, tag, tmp, sizeof(tmp)))
        return 0;
    return strtoull(tmp, NULL, 10);
}

int s3x_bool(const char *p, const char *end, const char *tag)
{
    char tmp[16];
    if (s3x_get(p, end, tag, tmp, sizeof(tmp)))
        return 0;
    return !strcmp(tmp, "true");
}

void s3x_etag(const char *p, const char *end, char *out, size_t cap)
{
    char tmp[BE_ETAG_MAX + 8];
    out[0] = '\0';
    if (!s3x_get(p, end, "ETag", tmp, sizeof(tmp)))
        s3_etag_unquote(tmp, strlen(tmp), out, cap);
}

