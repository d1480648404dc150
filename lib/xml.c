/*
 * xml.c: a small strict XML reader for the request bodies S3 clients send
 * (CompleteMultipartUpload, DeleteObjects, the AccessControlPolicy of Put*Acl). Pull-style over the body bytes, no
 * recursion, nesting bounded by XML_DEPTH_MAX, no external library. It does not
 * write XML (buf_xml*() in buf.c) and does not check part order or ETags (backends).
 *
 * Accepted: an optional UTF-8 BOM and <?xml ...?> prolog, namespace prefixes and
 * attributes (ignored), comments (skipped), CDATA sections inside text, the five
 * named entities and &#N; / &#xN; (not &#0;, surrogates or > U+10FFFF). Unknown
 * child elements are skipped. Rejected with -S3E_MALFORMED_XML: DOCTYPE and other
 * processing instructions, mismatched or unterminated tags, non-blank text between
 * elements, unknown entities, NUL bytes, anything after the root element.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "s3c.h"
#include "s3err.h"
#include "xml.h"

#define XML_DEPTH_MAX 32
#define XML_OBJECTS_MAX 1000

struct xr {
    const char *start, *p, *end;
    struct errmsg *em;
};

/* An element name without its namespace prefix; points into the body. */
struct xname {
    const char *s;
    size_t len;
};

static int xr_fail(struct xr *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int xr_fail(struct xr *x, const char *fmt, ...)
{
    char tmp[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    errmsg_set(x->em, "%s at byte %zu", tmp, (size_t)(x->p - x->start));
    return -S3E_MALFORMED_XML;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static int at(const struct xr *x, const char *lit)
{
    size_t n = strlen(lit);
    return (size_t)(x->end - x->p) >= n && memcmp(x->p, lit, n) == 0;
}

static int name_start(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || c >= 0x80;
}

static int name_char(unsigned char c)
{
    return name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

static int name_is(const struct xname *n, const char *s)
{
    return n->len == strlen(s) && memcmp(n->s, s, n->len) == 0;
}

static void skip_ws(struct xr *x)
{
    while (x->p < x->end && is_ws(*x->p))
        x->p++;
}

/* Finds @lit at or after @from; NULL if absent. */
static const char *find(const struct xr *x, const char *from, const char *lit)
{
    return memmem(from, (size_t)(x->end - from), lit, strlen(lit));
}

/* At "<!--": skips the comment. */
static int xr_comment(struct xr *x)
{
    const char *e = find(x, x->p + 4, "-->");
    if (!e)
        return xr_fail(x, "unterminated comment");
    x->p = e + 3;
    return 0;
}

/* Skips blanks and comments. */
static int xr_misc(struct xr *x)
{
    for (;;) {
        skip_ws(x);
        if (!at(x, "<!--"))
            return 0;
        int rc = xr_comment(x);
        if (rc)
            return rc;
    }
}

/* Reads a (possibly prefixed) name at x->p into @n (the local part). */
static int xr_name(struct xr *x, struct xname *n)
{
    const char *s = x->p;
    if (x->p >= x->end || !name_start((unsigned char)*x->p))
        return xr_fail(x, "expected a name");
    while (x->p < x->end && name_char((unsigned char)*x->p))
        x->p++;
    n->s = s;
    n->len = (size_t)(x->p - s);
    const char *colon = memrchr(s, ':', n->len);
    if (colon) {
        n->len -= (size_t)(colon + 1 - s);
        n->s = colon + 1;
        if (n->len == 0)
            return xr_fail(x, "empty local name");
    }
    return 0;
}

/* At '<' of a start tag: reads the name and attributes through '>' or "/>". */
static int xr_stag(struct xr *x, struct xname *n, int *empty)
{
    int rc;
    x->p++;
    if ((rc = xr_name(x, n)))
        return rc;
    for (;;) {
        int had_ws = x->p < x->end && is_ws(*x->p);
        skip_ws(x);
        if (x->p >= x->end)
            return xr_fail(x, "unterminated start tag <%.*s", (int)n->len, n->s);
        if (*x->p == '>') {
            x->p++;
            *empty = 0;
            return 0;
        }
        if (at(x, "/>")) {
            x->p += 2;
            *empty = 1;
            return 0;
        }
        if (!had_ws)
            return xr_fail(x, "bad character in tag <%.*s>", (int)n->len, n->s);
        struct xname an;
        if ((rc = xr_name(x, &an)))
            return rc;
        skip_ws(x);
        if (x->p >= x->end || *x->p != '=')
            return xr_fail(x, "attribute %.*s without a value", (int)an.len, an.s);
        x->p++;
        skip_ws(x);
        if (x->p >= x->end || (*x->p != '"' && *x->p != '\''))
            return xr_fail(x, "unquoted attribute value");
        char q = *x->p++;
        const char *e = memchr(x->p, q, (size_t)(x->end - x->p));
        if (!e)
            return xr_fail(x, "unterminated attribute value");
        if (memchr(x->p, '<', (size_t)(e - x->p)))
            return xr_fail(x, "'<' in attribute value");
        x->p = e + 1;
    }
}

/* At "</": reads the end tag and checks it closes @want. */
static int xr_etag(struct xr *x, const struct xname *want)
{
    struct xname n;
    int rc;
    x->p += 2;
    if ((rc = xr_name(x, &n)))
        return rc;
    skip_ws(x);
    if (x->p >= x->end || *x->p != '>')
        return xr_fail(x, "unterminated end tag </%.*s", (int)n.len, n.s);
    x->p++;
    if (n.len != want->len || memcmp(n.s, want->s, n.len) != 0)
        return xr_fail(x, "mismatched tag: </%.*s> closes <%.*s>", (int)n.len, n.s,
                       (int)want->len, want->s);
    return 0;
}

/* Next child element of @parent: 1 with its start tag read into @child/@empty, 0 once the
 * end tag of @parent is read, or an error. Only blanks and comments may sit between. */
static int xr_next_child(struct xr *x, const struct xname *parent, struct xname *child,
                         int *empty)
{
    int rc;
    if ((rc = xr_misc(x)))
        return rc;
    if (x->p >= x->end)
        return xr_fail(x, "unterminated <%.*s>", (int)parent->len, parent->s);
    if (*x->p != '<')
        return xr_fail(x, "unexpected text in <%.*s>", (int)parent->len, parent->s);
    if (at(x, "</"))
        return xr_etag(x, parent) ? -S3E_MALFORMED_XML : 0;
    if (at(x, "<!") || at(x, "<?"))
        return xr_fail(x, "unexpected markup in <%.*s>", (int)parent->len, parent->s);
    if ((rc = xr_stag(x, child, empty)))
        return rc;
    return 1;
}

static void put_utf8(char *o, size_t *ol, unsigned long cp)
{
    if (cp < 0x80) {
        o[(*ol)++] = (char)cp;
    } else if (cp < 0x800) {
        o[(*ol)++] = (char)(0xc0 | (cp >> 6));
        o[(*ol)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        o[(*ol)++] = (char)(0xe0 | (cp >> 12));
        o[(*ol)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[(*ol)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        o[(*ol)++] = (char)(0xf0 | (cp >> 18));
        o[(*ol)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        o[(*ol)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[(*ol)++] = (char)(0x80 | (cp & 0x3f));
    }
}

/* At '&' before @stop: decodes one reference into @o. Every reference is at least as long
 * as its UTF-8 encoding, so decoding never outgrows the raw text. */
static int xr_entity(struct xr *x, const char *stop, char *o, size_t *ol)
{
    static const struct {
        const char *name;
        char c;
    } named[] = { { "lt", '<' }, { "gt", '>' }, { "amp", '&' }, { "quot", '"' }, { "apos", '\'' } };
    const char *s = x->p + 1;
    const char *semi = memchr(s, ';', (size_t)(stop - s) < 12 ? (size_t)(stop - s) : 12);
    size_t n;

    if (!semi)
        return xr_fail(x, "bad entity reference");
    n = (size_t)(semi - s);
    if (n >= 2 && s[0] == '#') {
        unsigned long cp = 0;
        int hex = s[1] == 'x';
        const char *d = s + 1 + hex;
        if (d == semi)
            return xr_fail(x, "bad character reference");
        for (; d < semi; d++) {
            int v;
            if (*d >= '0' && *d <= '9')
                v = *d - '0';
            else if (hex && *d >= 'a' && *d <= 'f')
                v = *d - 'a' + 10;
            else if (hex && *d >= 'A' && *d <= 'F')
                v = *d - 'A' + 10;
            else
                return xr_fail(x, "bad character reference");
            cp = cp * (hex ? 16 : 10) + (unsigned long)v;
            if (cp > 0x10ffff)
                return xr_fail(x, "character reference out of range");
        }
        if (cp == 0 || (cp >= 0xd800 && cp <= 0xdfff))
            return xr_fail(x, "character reference out of range");
        put_utf8(o, ol, cp);
        x->p = semi + 1;
        return 0;
    }
    for (size_t i = 0; i < ARRAY_SIZE(named); i++) {
        if (n == strlen(named[i].name) && memcmp(s, named[i].name, n) == 0) {
            o[(*ol)++] = named[i].c;
            x->p = semi + 1;
            return 0;
        }
    }
    return xr_fail(x, "unknown entity &%.*s;", (int)n, s);
}

/* Reads the text of leaf element @el (start tag read, not empty) through its end tag.
 * *@out: malloc'd, decoded, NUL-terminated. Child elements are an error. */
static int xr_leaf(struct xr *x, const struct xname *el, char **out)
{
    const char *q = x->p, *stop;
    char *o;
    size_t ol = 0;
    int rc;

    /* pass 1: the extent of the text (CDATA and comments may hold '<') */
    for (;;) {
        const char *lt = memchr(q, '<', (size_t)(x->end - q));
        if (!lt) {
            x->p = x->end;
            return xr_fail(x, "unterminated <%.*s>", (int)el->len, el->s);
        }
        struct xr t = *x;
        t.p = lt;
        if (at(&t, "<![CDATA[")) {
            const char *e = find(x, lt + 9, "]]>");
            if (!e)
                return xr_fail(&t, "unterminated CDATA section");
            q = e + 3;
        } else if (at(&t, "<!--")) {
            const char *e = find(x, lt + 4, "-->");
            if (!e)
                return xr_fail(&t, "unterminated comment");
            q = e + 3;
        } else {
            stop = lt;
            break;
        }
    }
    o = malloc((size_t)(stop - x->p) + 1);
    if (!o)
        return -ENOMEM;
    /* pass 2: decode */
    while (x->p < stop) {
        if (at(x, "<![CDATA[")) {
            const char *e = find(x, x->p + 9, "]]>");
            memcpy(o + ol, x->p + 9, (size_t)(e - (x->p + 9)));
            ol += (size_t)(e - (x->p + 9));
            x->p = e + 3;
        } else if (at(x, "<!--")) {
            x->p = find(x, x->p + 4, "-->") + 3;
        } else if (*x->p == '&') {
            if ((rc = xr_entity(x, stop, o, &ol)))
                goto fail;
        } else if (*x->p == '\0') {
            rc = xr_fail(x, "NUL byte in text");
            goto fail;
        } else {
            o[ol++] = *x->p++;
        }
    }
    if (!at(x, "</")) {
        rc = xr_fail(x, "unexpected element inside <%.*s>", (int)el->len, el->s);
        goto fail;
    }
    if ((rc = xr_etag(x, el)))
        goto fail;
    o[ol] = '\0';
    *out = o;
    return 0;
fail:
    free(o);
    return rc;
}

/* Reads a leaf (possibly empty: "") into *@out. */
static int xr_leaf_any(struct xr *x, const struct xname *el, int empty, char **out)
{
    if (empty) {
        *out = strdup("");
        return *out ? 0 : -ENOMEM;
    }
    return xr_leaf(x, el, out);
}

/* Skips element @el (start tag read, not empty) and everything inside it. */
static int xr_skip(struct xr *x, const struct xname *el)
{
    struct xname stack[XML_DEPTH_MAX];
    int depth = 0, rc;
    stack[depth++] = *el;
    while (depth > 0) {
        const char *lt = memchr(x->p, '<', (size_t)(x->end - x->p));
        if (!lt) {
            x->p = x->end;
            return xr_fail(x, "unterminated <%.*s>", (int)stack[depth - 1].len,
                           stack[depth - 1].s);
        }
        if (memchr(x->p, '\0', (size_t)(lt - x->p)))
            return xr_fail(x, "NUL byte in text");
        x->p = lt;
        if (at(x, "<!--")) {
            if ((rc = xr_comment(x)))
                return rc;
        } else if (at(x, "<![CDATA[")) {
            const char *e = find(x, x->p + 9, "]]>");
            if (!e)
                return xr_fail(x, "unterminated CDATA section");
            x->p = e + 3;
        } else if (at(x, "</")) {
            if ((rc = xr_etag(x, &stack[depth - 1])))
                return rc;
            depth--;
        } else if (at(x, "<!") || at(x, "<?")) {
            return xr_fail(x, "unexpected markup");
        } else {
            struct xname n;
            int empty;
            if ((rc = xr_stag(x, &n, &empty)))
                return rc;
            if (!empty) {
                if (depth == XML_DEPTH_MAX)
                    return xr_fail(x, "elements nested too deep");
                stack[depth++] = n;
            }
        }
    }
    return 0;
}

/* Reads up to and including the root's start tag, which must be @want. */
static int xr_root(struct xr *x, const char *want, struct xname *root, int *empty)
{
    int rc;
    if ((size_t)(x->end - x->p) > XML_BODY_MAX)
        return xr_fail(x, "document larger than %u bytes", XML_BODY_MAX);
    if (at(x, "\xef\xbb\xbf"))
        x->p += 3;
    skip_ws(x);
    if (at(x, "<?xml") && x->p + 5 < x->end && (is_ws(x->p[5]) || x->p[5] == '?')) {
        const char *e = find(x, x->p + 5, "?>");
        if (!e)
            return xr_fail(x, "unterminated XML declaration");
        x->p = e + 2;
    }
    if ((rc = xr_misc(x)))
        return rc;
    if (x->p >= x->end)
        return xr_fail(x, "empty document");
    if (at(x, "<!DOCTYPE"))
        return xr_fail(x, "DOCTYPE not allowed");
    if (*x->p != '<' || at(x, "<!") || at(x, "<?") || at(x, "</"))
        return xr_fail(x, "expected <%s>", want);
    if ((rc = xr_stag(x, root, empty)))
        return rc;
    if (!name_is(root, want))
        return xr_fail(x, "root element is <%.*s>, expected <%s>", (int)root->len, root->s,
                       want);
    return 0;
}

/* After the root's end tag: only blanks and comments may follow. */
static int xr_tail(struct xr *x)
{
    int rc = xr_misc(x);
    if (rc)
        return rc;
    if (x->p < x->end)
        return xr_fail(x, "content after the root element");
    return 0;
}

/* Trims XML blanks from both ends of @s in place; returns @s. */
static char *trim(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && is_ws(s[n - 1]))
        s[--n] = '\0';
    size_t i = 0;
    while (is_ws(s[i]))
        i++;
    if (i)
        memmove(s, s + i, n - i + 1);
    return s;
}

static const char *const checksum_elems[][2] = {
    { "ChecksumCRC32", "CRC32" },
    { "ChecksumCRC32C", "CRC32C" },
    { "ChecksumSHA1", "SHA1" },
    { "ChecksumSHA256", "SHA256" },
};

/* Reads one <Part> (start tag read) into @pt. */
static int parse_part(struct xr *x, const struct xname *part, int part_empty, struct be_part *pt)
{
    int have_num = 0, have_etag = 0, rc;
    struct xname c;
    int empty;
    char *v = NULL;

    memset(pt, 0, sizeof(*pt));
    while (!part_empty && (rc = xr_next_child(x, part, &c, &empty)) != 0) {
        size_t ci;
        if (rc < 0)
            return rc;
        if (name_is(&c, "PartNumber")) {
            if (have_num)
                return xr_fail(x, "duplicate <PartNumber>");
            if ((rc = xr_leaf_any(x, &c, empty, &v)))
                return rc;
            trim(v);
            unsigned long num = 0;
            const char *d = v;
            if (!*d) {
                free(v);
                return xr_fail(x, "empty <PartNumber>");
            }
            for (; *d; d++) {
                if (*d < '0' || *d > '9') {
                    free(v);
                    return xr_fail(x, "<PartNumber> is not a number");
                }
                if (num <= BE_MAX_PARTS)
                    num = num * 10 + (unsigned long)(*d - '0');
            }
            free(v);
            v = NULL;
            if (num < 1 || num > BE_MAX_PARTS) {
                errmsg_set(x->em, "part number %lu%s is outside 1..%u", num,
                           num > BE_MAX_PARTS ? "+" : "", BE_MAX_PARTS);
                return -S3E_INVALID_PART;
            }
            pt->number = (unsigned)num;
            have_num = 1;
        } else if (name_is(&c, "ETag")) {
            if (have_etag)
                return xr_fail(x, "duplicate <ETag>");
            if ((rc = xr_leaf_any(x, &c, empty, &v)))
                return rc;
            char *e = trim(v);
            size_t n = strlen(e);
            if (n >= 2 && e[0] == '"' && e[n - 1] == '"') {
                e++;
                n -= 2;
            }
            if (n == 0 || n >= sizeof(pt->etag)) {
                free(v);
                return xr_fail(x, n ? "<ETag> too long" : "empty <ETag>");
            }
            memcpy(pt->etag, e, n);
            pt->etag[n] = '\0';
            free(v);
            v = NULL;
            have_etag = 1;
        } else {
            for (ci = 0; ci < ARRAY_SIZE(checksum_elems); ci++)
                if (name_is(&c, checksum_elems[ci][0]))
                    break;
            if (ci == ARRAY_SIZE(checksum_elems)) {
                if (!empty && (rc = xr_skip(x, &c)))
                    return rc;
                continue;
            }
            if (pt->checksum_algo[0])
                return xr_fail(x, "more than one checksum in <Part>");
            if ((rc = xr_leaf_any(x, &c, empty, &v)))
                return rc;
            trim(v);
            size_t n = strlen(v);
            if (n == 0 || n >= sizeof(pt->checksum)) {
                free(v);
                return xr_fail(x, "bad <%s>", checksum_elems[ci][0]);
            }
            memcpy(pt->checksum, v, n + 1);
            snprintf(pt->checksum_algo, sizeof(pt->checksum_algo), "%s", checksum_elems[ci][1]);
            free(v);
            v = NULL;
        }
    }
    if (!have_num)
        return xr_fail(x, "<Part> without <PartNumber>");
    if (!have_etag)
        return xr_fail(x, "<Part> without <ETag>");
    return 0;
}

int xml_parse_complete(const char *body, size_t len, struct be_part **parts, size_t *n,
                       struct errmsg *em)
{
    struct xr x = { body, body, body + len, em };
    struct xname root, c;
    int empty, rc;
    struct be_part *arr = NULL;
    size_t cnt = 0, cap = 0;

    AN(parts);
    AN(n);
    *parts = NULL;
    *n = 0;
    if (!body)
        x.start = x.p = x.end = "";
    if ((rc = xr_root(&x, "CompleteMultipartUpload", &root, &empty)))
        goto fail;
    while (!empty && (rc = xr_next_child(&x, &root, &c, &empty)) != 0) {
        if (rc < 0)
            goto fail;
        if (!name_is(&c, "Part")) {
            if (!empty && (rc = xr_skip(&x, &c)))
                goto fail;
            empty = 0;
            continue;
        }
        if (cnt == BE_MAX_PARTS) {
            rc = xr_fail(&x, "more than %u parts", BE_MAX_PARTS);
            goto fail;
        }
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct be_part *na = realloc(arr, ncap * sizeof(*arr));
            if (!na) {
                rc = -ENOMEM;
                goto fail;
            }
            arr = na;
            cap = ncap;
        }
        if ((rc = parse_part(&x, &c, empty, &arr[cnt])))
            goto fail;
        cnt++;
        empty = 0;
    }
    if ((rc = xr_tail(&x)))
        goto fail;
    if (cnt == 0) {
        rc = xr_fail(&x, "no <Part> in <CompleteMultipartUpload>");
        goto fail;
    }
    *parts = arr;
    *n = cnt;
    return 0;
fail:
    free(arr);
    return rc;
}

void xml_delete_free(struct xml_delete_obj *objs, size_t n)
{
    if (!objs)
        return;
    for (size_t i = 0; i < n; i++) {
        free(objs[i].key);
        free(objs[i].version_id);
    }
    free(objs);
}

/* Reads one <Object> (start tag read) into @o (key and version id malloc'd). */
static int parse_object(struct xr *x, const struct xname *obj, int obj_empty,
                        struct xml_delete_obj *o)
{
    struct xname c;
    int empty, rc;
    char *k = NULL, *v = NULL;

    while (!obj_empty && (rc = xr_next_child(x, obj, &c, &empty)) != 0) {
        if (rc < 0)
            goto fail;
        if (name_is(&c, "Key")) {
            if (k) {
                rc = xr_fail(x, "duplicate <Key>");
                goto fail;
            }
            if ((rc = xr_leaf_any(x, &c, empty, &k)))
                goto fail;
            if (!*k) {
                rc = xr_fail(x, "empty <Key>");
                goto fail;
            }
        } else if (name_is(&c, "VersionId")) {
            if (v) {
                rc = xr_fail(x, "duplicate <VersionId>");
                goto fail;
            }
            if ((rc = xr_leaf_any(x, &c, empty, &v)))
                goto fail;
        } else if (!empty && (rc = xr_skip(x, &c))) {
            goto fail;
        }
    }
    if (!k) {
        free(v);
        return xr_fail(x, "<Object> without <Key>");
    }
    o->key = k;
    o->version_id = v;
    return 0;
fail:
    free(k);
    free(v);
    return rc;
}

int xml_parse_delete(const char *body, size_t len, int *quiet, struct xml_delete_obj **objs,
                     size_t *n, struct errmsg *em)
{
    struct xr x = { body, body, body + len, em };
    struct xname root, c;
    int empty, rc, have_quiet = 0;
    struct xml_delete_obj *arr = NULL;
    size_t cnt = 0, cap = 0;
    char *v = NULL;

    AN(quiet);
    AN(objs);
    AN(n);
    *quiet = 0;
    *objs = NULL;
    *n = 0;
    if (!body)
        x.start = x.p = x.end = "";
    if ((rc = xr_root(&x, "Delete", &root, &empty)))
        goto fail;
    while (!empty && (rc = xr_next_child(&x, &root, &c, &empty)) != 0) {
        if (rc < 0)
            goto fail;
        if (name_is(&c, "Quiet")) {
            if (have_quiet) {
                rc = xr_fail(&x, "duplicate <Quiet>");
                goto fail;
            }
            if ((rc = xr_leaf_any(&x, &c, empty, &v)))
                goto fail;
            trim(v);
            if (strcasecmp(v, "true") == 0) {
                *quiet = 1;
            } else if (strcasecmp(v, "false") == 0) {
                *quiet = 0;
            } else {
                free(v);
                v = NULL;
                rc = xr_fail(&x, "<Quiet> is not true or false");
                goto fail;
            }
            free(v);
            v = NULL;
            have_quiet = 1;
        } else if (name_is(&c, "Object")) {
            if (cnt == XML_OBJECTS_MAX) {
                rc = xr_fail(&x, "more than %d objects", XML_OBJECTS_MAX);
                goto fail;
            }
            if (cnt == cap) {
                size_t ncap = cap ? cap * 2 : 16;
                struct xml_delete_obj *na = realloc(arr, ncap * sizeof(*arr));
                if (!na) {
                    rc = -ENOMEM;
                    goto fail;
                }
                arr = na;
                cap = ncap;
            }
            if ((rc = parse_object(&x, &c, empty, &arr[cnt])))
                goto fail;
            cnt++;
        } else if (!empty && (rc = xr_skip(&x, &c))) {
            goto fail;
        }
        empty = 0;
    }
    if ((rc = xr_tail(&x)))
        goto fail;
    if (cnt == 0) {
        rc = xr_fail(&x, "no <Object> in <Delete>");
        goto fail;
    }
    *objs = arr;
    *n = cnt;
    return 0;
fail:
    xml_delete_free(arr, cnt);
    *quiet = 0;
    return rc;
}

/* The text of leaf @c (start tag read) into *@out (malloc'd, blanks trimmed); a second one of
 * the same name in the parent is an error (*@out already set). */
static int acl_leaf(struct xr *x, const struct xname *c, int empty, char **out)
{
    if (*out)
        return xr_fail(x, "duplicate <%.*s>", (int)c->len, c->s);
    int rc = xr_leaf_any(x, c, empty, out);
    if (!rc)
        trim(*out);
    return rc;
}

/* Reads <Owner> or <Grantee> (start tag read): *@id, *@other (a URI or EmailAddress grantee),
 * malloc'd or NULL. */
static int acl_party(struct xr *x, const struct xname *el, int el_empty, char **id, char **other)
{
    struct xname c;
    int empty, rc;
    while (!el_empty && (rc = xr_next_child(x, el, &c, &empty)) != 0) {
        if (rc < 0)
            return rc;
        if (name_is(&c, "ID"))
            rc = acl_leaf(x, &c, empty, id);
        else if (name_is(&c, "URI") || name_is(&c, "EmailAddress"))
            rc = acl_leaf(x, &c, empty, other);
        else
            rc = empty ? 0 : xr_skip(x, &c);
        if (rc)
            return rc;
    }
    return 0;
}

static const char *const acl_permissions[] = {"FULL_CONTROL", "READ", "WRITE", "READ_ACP",
                                              "WRITE_ACP"};

/* Reads one <Grant> (start tag read): 1 when it grants @owner_id FULL_CONTROL, 0 when it
 * grants anything else, or an error. */
static int acl_grant(struct xr *x, const struct xname *g, int g_empty, const char *owner_id)
{
    struct xname c;
    int empty, rc, have_grantee = 0;
    char *id = NULL, *other = NULL, *perm = NULL;
    while (!g_empty && (rc = xr_next_child(x, g, &c, &empty)) != 0) {
        if (rc < 0)
            goto out;
        if (name_is(&c, "Grantee")) {
            if (have_grantee) {
                rc = xr_fail(x, "duplicate <Grantee>");
                goto out;
            }
            have_grantee = 1;
            rc = acl_party(x, &c, empty, &id, &other);
        } else if (name_is(&c, "Permission")) {
            rc = acl_leaf(x, &c, empty, &perm);
        } else {
            rc = empty ? 0 : xr_skip(x, &c);
        }
        if (rc)
            goto out;
    }
    rc = -S3E_MALFORMED_XML;
    if (!have_grantee || (!id && !other) || (id && other)) {
        xr_fail(x, "<Grant> needs a <Grantee> with one <ID>, <URI> or <EmailAddress>");
        goto out;
    }
    size_t i;
    for (i = 0; perm && i < ARRAY_SIZE(acl_permissions); i++)
        if (!strcmp(perm, acl_permissions[i]))
            break;
    if (!perm || i == ARRAY_SIZE(acl_permissions)) {
        xr_fail(x, "<Grant> needs a <Permission> of FULL_CONTROL, READ, WRITE, READ_ACP or "
                   "WRITE_ACP");
        goto out;
    }
    rc = id && !strcmp(id, owner_id) && i == 0;
out:
    free(id);
    free(other);
    free(perm);
    return rc;
}

int xml_parse_acl(const char *body, size_t len, const char *owner_id, struct errmsg *em)
{
    struct xr x = { body, body, body + len, em };
    struct xname root, c, g;
    int empty, rc, have_list = 0, owner_only = 1, grants = 0, gempty;
    char *oid = NULL, *oother = NULL;

    AN(owner_id);
    if (!body)
        x.start = x.p = x.end = "";
    if ((rc = xr_root(&x, "AccessControlPolicy", &root, &empty)))
        goto out;
    while (!empty && (rc = xr_next_child(&x, &root, &c, &empty)) != 0) {
        if (rc < 0)
            goto out;
        if (name_is(&c, "Owner")) {
            if (oid || oother) {
                rc = xr_fail(&x, "duplicate <Owner>");
                goto out;
            }
            if ((rc = acl_party(&x, &c, empty, &oid, &oother)))
                goto out;
            if (oother || (oid && strcmp(oid, owner_id)))
                owner_only = 0; /* another owner: not what is enforced */
        } else if (name_is(&c, "AccessControlList")) {
            if (have_list) {
                rc = xr_fail(&x, "duplicate <AccessControlList>");
                goto out;
            }
            have_list = 1;
            while (!empty && (rc = xr_next_child(&x, &c, &g, &gempty)) != 0) {
                if (rc < 0)
                    goto out;
                if (!name_is(&g, "Grant")) {
                    if (!gempty && (rc = xr_skip(&x, &g)))
                        goto out;
                    continue;
                }
                if ((rc = acl_grant(&x, &g, gempty, owner_id)) < 0)
                    goto out;
                owner_only &= rc;
                grants++;
            }
        } else if (!empty && (rc = xr_skip(&x, &c))) {
            goto out;
        }
        empty = 0;
    }
    if ((rc = xr_tail(&x)))
        goto out;
    if (!have_list) {
        rc = xr_fail(&x, "no <AccessControlList> in <AccessControlPolicy>");
        goto out;
    }
    rc = owner_only && grants ? 0 : -S3E_NOT_IMPLEMENTED;
    if (rc)
        errmsg_set(em, "%s", grants ? "only the owner's FULL_CONTROL grant is supported"
                                    : "an ACL without grants is not supported");
out:
    free(oid);
    free(oother);
    return rc == -S3E_MALFORMED_XML ? -S3E_MALFORMED_ACL : rc;
}
