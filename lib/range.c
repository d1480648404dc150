/*
 * range.c: the Range header and the conditional headers (If-Match, If-None-Match,
 * If-Modified-Since, If-Unmodified-Since) with S3's semantics. Pure: no I/O, no
 * allocation; HTTP dates go through libcurl's curl_getdate(). It does not build
 * responses (respond.c) nor know about the cache.
 */
#include <string.h>
#include <strings.h>
#include <stdint.h>
#include <curl/curl.h>

#include "s3c.h"
#include "s3err.h"
#include "range.h"

static int is_sp(char c)
{
    return c == ' ' || c == '\t';
}

static const char *skip_sp(const char *p)
{
    while (is_sp(*p))
        p++;
    return p;
}

/* Reads decimal digits at *@pp (at least one), saturating at UINT64_MAX. Returns 0 or -1
 * when there is no digit. */
static int read_u64(const char **pp, uint64_t *out)
{
    const char *p = *pp;
    uint64_t v = 0;
    if (*p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            v = UINT64_MAX; /* saturate; keep consuming digits */
        else
            v = v * 10 + d;
    }
    *pp = p;
    *out = v;
    return 0;
}

int range_parse(const char *hdr, uint64_t size, uint64_t *off, uint64_t *len)
{
    const char *p;
    uint64_t first = 0, last = UINT64_MAX, suffix = 0;
    int is_suffix = 0;

    AN(off);
    AN(len);
    if (!hdr)
        return 0;
    p = skip_sp(hdr);
    if (strncasecmp(p, "bytes", 5) != 0)
        return 0;
    p = skip_sp(p + 5);
    if (*p != '=')
        return 0;
    p = skip_sp(p + 1);
    if (strchr(p, ','))
        return 0; /* several ranges: S3 ignores the header */

    if (*p == '-') {
        p = skip_sp(p + 1);
        if (read_u64(&p, &suffix) < 0)
            return 0;
        is_suffix = 1;
    } else {
        if (read_u64(&p, &first) < 0)
            return 0;
        p = skip_sp(p);
        if (*p != '-')
            return 0;
        p = skip_sp(p + 1);
        if (*p >= '0' && *p <= '9') {
            if (read_u64(&p, &last) < 0)
                return 0;
            if (last < first)
                return 0; /* syntactically invalid: ignored */
        }
    }
    p = skip_sp(p);
    if (*p != '\0')
        return 0;

    if (size == 0)
        return -S3E_INVALID_RANGE;
    if (is_suffix) {
        if (suffix == 0)
            return -S3E_INVALID_RANGE;
        if (suffix > size)
            suffix = size;
        *off = size - suffix;
        *len = suffix;
        return 1;
    }
    if (first >= size)
        return -S3E_INVALID_RANGE;
    if (last >= size)
        last = size - 1;
    *off = first;
    *len = last - first + 1;
    return 1;
}

/* Is @p a present header value, i.e. not NULL and not only blanks? */
static int present(const char *p)
{
    if (!p)
        return 0;
    return *skip_sp(p) != '\0';
}

/* Does the entity-tag list @list (a, "b", W/"c", *) name @etag? Quotes and W/ are ignored on
 * both sides; "*" matches any existing object. */
static int etag_list_match(const char *list, const char *etag)
{
    const char *p = list;
    size_t elen;

    if (!etag)
        etag = "";
    if (strncmp(etag, "W/", 2) == 0)
        etag += 2;
    if (*etag == '"')
        etag++;
    elen = strlen(etag);
    if (elen > 0 && etag[elen - 1] == '"')
        elen--;

    while (*p) {
        const char *s, *e;
        p = skip_sp(p);
        if (*p == ',') {
            p++;
            continue;
        }
        if (!*p)
            break;
        s = p;
        if (*s == '"') {
            /* a quoted tag may hold commas */
            e = strchr(s + 1, '"');
            e = e ? e + 1 : s + strlen(s);
        } else if (strncmp(s, "W/\"", 3) == 0) {
            e = strchr(s + 3, '"');
            e = e ? e + 1 : s + strlen(s);
        } else {
            e = s;
            while (*e && *e != ',')
                e++;
        }
        p = e;
        while (e > s && is_sp(e[-1]))
            e--;
        if (e - s == 1 && *s == '*')
            return 1;
        if (e - s >= 2 && s[0] == 'W' && s[1] == '/')
            s += 2;
        if (s < e && *s == '"')
            s++;
        if (e > s && e[-1] == '"')
            e--;
        if ((size_t)(e - s) == elen && memcmp(s, etag, elen) == 0)
            return 1;
    }
    return 0;
}

/* Parses an HTTP date into *@t; 0 or -1 when unparsable. */
static int parse_date(const char *s, int64_t *t)
{
    time_t v = curl_getdate(s, NULL);
    if (v == (time_t)-1)
        return -1;
    *t = (int64_t)v;
    return 0;
}

int cond_check(const struct cond_hdrs *c, const char *etag, int64_t mtime, int is_get_head)
{
    int64_t t;
    int has_im, has_inm;

    AN(c);
    has_im = present(c->if_match);
    has_inm = present(c->if_none_match);

    if (has_im) {
        if (!etag_list_match(c->if_match, etag))
            return -S3E_PRECONDITION_FAILED;
    } else if (present(c->if_unmodified_since) && parse_date(c->if_unmodified_since, &t) == 0) {
        if (mtime > t)
            return -S3E_PRECONDITION_FAILED;
    }

    if (has_inm) {
        if (etag_list_match(c->if_none_match, etag))
            return is_get_head ? -S3E_NOT_MODIFIED : -S3E_PRECONDITION_FAILED;
    } else if (is_get_head && present(c->if_modified_since) &&
               parse_date(c->if_modified_since, &t) == 0) {
        if (mtime <= t)
            return -S3E_NOT_MODIFIED;
    }
    return 0;
}
