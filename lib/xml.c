/*
 * xml.c: the XML request bodies S3 clients send (CompleteMultipartUpload, DeleteObjects, the
 * AccessControlPolicy of Put*Acl), read with libexpat: the only file that includes <expat.h>.
 * expat does the XML (well-formedness, UTF-8, entities, CDATA, comments, prefixes kept as
 * written); this file keeps S3's rules: the root element, which children count, their text,
 * duplicates, counts and limits. It does not write XML (buf_xml*() in buf.c) and does not
 * check part order or ETags (backends).
 *
 * Hardened beyond expat's defaults: a DOCTYPE is refused as soon as it starts (so no entity is
 * ever declared: no billion laughs, no external entity, nothing fetched), processing
 * instructions too; nesting is bounded by XML_DEPTH_MAX and a leaf's text by XML_TEXT_MAX;
 * a NUL byte or a body over XML_BODY_MAX is refused before expat sees it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Debian's libexpat is built with XML_DTD (expat_config.h), which declares the billion-laughs
 * limits below; without it those functions would not link, a loud failure. */
#ifndef XML_DTD
#define XML_DTD 1
#endif
#include <expat.h>

#include "arr.h"
#include "s3c.h"
#include "s3err.h"
#include "xml.h"

#define XML_DEPTH_MAX 32     /* open elements, the root included */
#define XML_TEXT_MAX 4096    /* bytes of a leaf's decoded text (a key is at most 1024) */
#define XML_OBJECTS_MAX 1000 /* DeleteObjects */
#define XML_NAME_SHOWN 64    /* bytes of an element name kept for messages */

/* What a document's rules make of an element: skipped with everything inside, an element
 * whose children matter (only blanks between them), or a leaf whose text is read. */
enum xr_kind { XR_SKIP, XR_NODE, XR_LEAF };

struct xr;
/* A child element @name (local part) opens at depth x->depth (the root is 1; its parent is
 * xr_parent()): returns an enum xr_kind, or x->rc after xr_fail(). */
typedef int xr_start_f(struct xr *x, const char *name);
/* A NODE or LEAF element @name closes (still at depth x->depth); @text is a leaf's decoded text
 * (NUL-terminated, may be modified), NULL for a node. 0 or x->rc after xr_fail(). */
typedef int xr_end_f(struct xr *x, const char *name, char *text);

struct xr {
    XML_Parser p;
    struct errmsg *em;
    const char *root; /* the wanted root element */
    xr_start_f *start;
    xr_end_f *end;
    void *doc;        /* the document's state, for start/end */
    int rc;           /* the first error; parsing stops there */
    int depth;        /* open elements */
    int seen_root;
    int skip_from;    /* inside a skipped element opened at this depth (0: none) */
    int leaf;         /* the element at x->depth is a leaf: its text is being read */
    size_t skipped;   /* bytes (BOM, blanks) before what expat was given */
    size_t text_len;
    char names[XML_DEPTH_MAX][XML_NAME_SHOWN]; /* open elements' local names, for messages */
    char text[XML_TEXT_MAX + 1];
};

/* Records the first error (MALFORMED_XML with detail and byte position) and stops expat.
 * Returns x->rc. */
static int xr_fail(struct xr *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int xr_fail(struct xr *x, const char *fmt, ...)
{
    char tmp[200];
    va_list ap;
    long pos = x->p ? (long)XML_GetCurrentByteIndex(x->p) : 0;

    if (x->rc)
        return x->rc;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    errmsg_set(x->em, "%s at byte %zu", tmp, (pos < 0 ? 0 : (size_t)pos) + x->skipped);
    x->rc = -S3E_MALFORMED_XML;
    if (x->p)
        XML_StopParser(x->p, XML_FALSE);
    return x->rc;
}

/* Stops with @rc, whose detail the caller has set in x->em. */
static int xr_stop(struct xr *x, int rc)
{
    if (!x->rc) {
        x->rc = rc;
        if (x->p)
            XML_StopParser(x->p, XML_FALSE);
    }
    return x->rc;
}

static int xr_is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* The parent of the element at x->depth. */
static const char *xr_parent(const struct xr *x)
{
    return x->depth >= 2 ? x->names[x->depth - 2] : "";
}

static void XMLCALL xr_on_start(void *ud, const XML_Char *qname, const XML_Char **atts)
{
    struct xr *x = ud;
    const char *name = strrchr(qname, ':'); /* namespaces are ignored: the local part */
    int kind;

    (void)atts; /* attributes (xmlns, xsi:type) carry nothing we use */
    if (x->rc)
        return;
    name = name ? name + 1 : qname;
    if (!*name) {
        xr_fail(x, "empty local name in <%.*s>", XML_NAME_SHOWN, qname);
        return;
    }
    if (x->leaf) {
        xr_fail(x, "unexpected element inside <%s>", x->names[x->depth - 1]);
        return;
    }
    if (x->depth == XML_DEPTH_MAX) {
        xr_fail(x, "elements nested too deep (more than %d)", XML_DEPTH_MAX);
        return;
    }
    x->depth++;
    snprintf(x->names[x->depth - 1], XML_NAME_SHOWN, "%s", name);
    if (x->skip_from)
        return;
    if (x->depth == 1) {
        x->seen_root = 1;
        if (strcmp(name, x->root))
            xr_fail(x, "root element is <%.*s>, expected <%s>", XML_NAME_SHOWN, name, x->root);
        return;
    }
    kind = x->start(x, name);
    if (kind == XR_SKIP) {
        x->skip_from = x->depth;
    } else if (kind == XR_LEAF) {
        x->leaf = 1;
        x->text_len = 0;
    }
}

static void XMLCALL xr_on_end(void *ud, const XML_Char *qname)
{
    struct xr *x = ud;
    const char *name = strrchr(qname, ':');
    char *text = NULL;

    if (x->rc)
        return;
    name = name ? name + 1 : qname;
    if (x->skip_from) {
        if (x->depth == x->skip_from)
            x->skip_from = 0;
    } else if (x->depth > 1) {
        if (x->leaf) {
            x->text[x->text_len] = '\0';
            text = x->text;
            x->leaf = 0;
        }
        if (x->end(x, name, text))
            return;
    }
    x->depth--;
}

static void XMLCALL xr_on_text(void *ud, const XML_Char *s, int len)
{
    struct xr *x = ud;

    if (x->rc || x->skip_from)
        return;
    if (x->leaf) {
        if ((size_t)len > XML_TEXT_MAX - x->text_len) {
            xr_fail(x, "text of <%s> longer than %d bytes", x->names[x->depth - 1],
                    XML_TEXT_MAX);
            return;
        }
        memcpy(x->text + x->text_len, s, (size_t)len);
        x->text_len += (size_t)len;
        return;
    }
    for (int i = 0; i < len; i++) {
        if (!xr_is_ws(s[i])) {
            xr_fail(x, "unexpected text in <%s>", x->names[x->depth - 1]);
            return;
        }
    }
}

static void XMLCALL xr_on_doctype(void *ud, const XML_Char *name, const XML_Char *sysid,
                                  const XML_Char *pubid, int has_internal_subset)
{
    (void)name;
    (void)sysid;
    (void)pubid;
    (void)has_internal_subset;
    xr_fail(ud, "DOCTYPE not allowed");
}

/* Unreachable while DOCTYPE is refused; kept so that no entity declaration is ever taken. */
static void XMLCALL xr_on_entity_decl(void *ud, const XML_Char *name, int is_param,
                                      const XML_Char *value, int value_len, const XML_Char *base,
                                      const XML_Char *sysid, const XML_Char *pubid,
                                      const XML_Char *notation)
{
    (void)name;
    (void)is_param;
    (void)value;
    (void)value_len;
    (void)base;
    (void)sysid;
    (void)pubid;
    (void)notation;
    xr_fail(ud, "entity declarations not allowed");
}

static int XMLCALL xr_on_external_entity(XML_Parser p, const XML_Char *context,
                                         const XML_Char *base, const XML_Char *sysid,
                                         const XML_Char *pubid)
{
    (void)p;
    (void)context;
    (void)base;
    (void)sysid;
    (void)pubid;
    return XML_STATUS_ERROR; /* never loaded */
}

static void XMLCALL xr_on_pi(void *ud, const XML_Char *target, const XML_Char *data)
{
    (void)data;
    xr_fail(ud, "unexpected markup: processing instruction <?%.*s", XML_NAME_SHOWN, target);
}

/* Parses @body (@len bytes) as a document whose root is @root, calling @start / @end for the
 * elements under it. 0, x->rc (MALFORMED_XML or what a callback set), or -ENOMEM. The detail
 * of expat's errors: its message and the byte; at the end of the body inside an element,
 * "unterminated <name>" first. */
static int xr_parse(struct xr *x, const char *body, size_t len)
{
    static const char bom[] = "\xef\xbb\xbf";
    enum XML_Status st;
    enum XML_Error code;
    const char *nul;

    if (len > XML_BODY_MAX)
        return xr_fail(x, "document larger than %u bytes", XML_BODY_MAX);
    if (!body)
        body = "";
    if ((nul = memchr(body, '\0', len))) {
        x->skipped = (size_t)(nul - body);
        return xr_fail(x, "NUL byte");
    }
    /* a BOM, and blanks before the <?xml?> declaration (which expat wants first) */
    if (len >= 3 && !memcmp(body, bom, 3))
        x->skipped = 3;
    while (x->skipped < len && xr_is_ws(body[x->skipped]))
        x->skipped++;
    if (x->skipped == len)
        return xr_fail(x, "empty document");

    x->p = XML_ParserCreate("UTF-8"); /* UTF-8 whatever the declaration says */
    if (!x->p)
        return -ENOMEM;
    XML_SetUserData(x->p, x);
    XML_SetElementHandler(x->p, xr_on_start, xr_on_end);
    XML_SetCharacterDataHandler(x->p, xr_on_text);
    XML_SetProcessingInstructionHandler(x->p, xr_on_pi);
    XML_SetStartDoctypeDeclHandler(x->p, xr_on_doctype);
    XML_SetEntityDeclHandler(x->p, xr_on_entity_decl);
    XML_SetExternalEntityRefHandler(x->p, xr_on_external_entity);
    XML_SetParamEntityParsing(x->p, XML_PARAM_ENTITY_PARSING_NEVER);
    XML_SetBillionLaughsAttackProtectionMaximumAmplification(x->p, 2.0f);
    XML_SetBillionLaughsAttackProtectionActivationThreshold(x->p, 64u << 10);

    st = XML_Parse(x->p, body + x->skipped, (int)(len - x->skipped), XML_TRUE);
    if (st == XML_STATUS_OK || x->rc)
        return x->rc;
    code = XML_GetErrorCode(x->p);
    if (code == XML_ERROR_NO_MEMORY)
        return xr_stop(x, -ENOMEM);
    if (!x->seen_root && code == XML_ERROR_NO_ELEMENTS)
        return xr_fail(x, "empty document");
    if (!x->seen_root)
        return xr_fail(x, "expected <%s>: %s", x->root, XML_ErrorString(code));
    if (x->depth > 0 && (code == XML_ERROR_NO_ELEMENTS || code == XML_ERROR_UNCLOSED_TOKEN ||
                         code == XML_ERROR_PARTIAL_CHAR ||
                         code == XML_ERROR_UNCLOSED_CDATA_SECTION))
        return xr_fail(x, "unterminated <%s> (%s)", x->names[x->depth - 1],
                       XML_ErrorString(code));
    if (code == XML_ERROR_JUNK_AFTER_DOC_ELEMENT)
        return xr_fail(x, "content after the root element");
    return xr_fail(x, "%s", XML_ErrorString(code));
}

static void xr_free(struct xr *x)
{
    if (x && x->p)
        XML_ParserFree(x->p);
    free(x);
}

/* A reader for a document rooted at @root; NULL when out of memory. */
static struct xr *xr_new(const char *root, xr_start_f *start, xr_end_f *end, void *doc,
                         struct errmsg *em)
{
    struct xr *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->root = root;
    x->start = start;
    x->end = end;
    x->doc = doc;
    x->em = em;
    return x;
}

/* Trims XML blanks from both ends of @s in place; returns @s. */
static char *trim(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && xr_is_ws(s[n - 1]))
        s[--n] = '\0';
    size_t i = 0;
    while (xr_is_ws(s[i]))
        i++;
    if (i)
        memmove(s, s + i, n - i + 1);
    return s;
}

/* ---------------------------------------------------------------- CompleteMultipartUpload */

static const char *const checksum_elems[][2] = {
    { "ChecksumCRC32", "CRC32" },
    { "ChecksumCRC32C", "CRC32C" },
    { "ChecksumSHA1", "SHA1" },
    { "ChecksumSHA256", "SHA256" },
};

struct complete_doc {
    struct xml_part *arr;
    size_t n, cap;   /* arr[n] is the <Part> being read */
    int have_num, have_etag;
};

static int complete_start(struct xr *x, const char *name)
{
    struct complete_doc *d = x->doc;
    struct xml_part *pt;

    if (x->depth == 2) {
        if (strcmp(name, "Part"))
            return XR_SKIP;
        if (d->n == XML_PARTS_MAX)
            return xr_fail(x, "more than %u parts", XML_PARTS_MAX);
        if (ARR_GROW(d->arr, d->n, 1, d->cap))
            return xr_stop(x, -ENOMEM);
        memset(&d->arr[d->n], 0, sizeof(d->arr[0]));
        d->have_num = d->have_etag = 0;
        return XR_NODE;
    }
    pt = &d->arr[d->n]; /* depth 3: a child of <Part> */
    if (!strcmp(name, "PartNumber"))
        return d->have_num ? xr_fail(x, "duplicate <PartNumber>") : XR_LEAF;
    if (!strcmp(name, "ETag"))
        return d->have_etag ? xr_fail(x, "duplicate <ETag>") : XR_LEAF;
    for (size_t ci = 0; ci < ARRAY_SIZE(checksum_elems); ci++)
        if (!strcmp(name, checksum_elems[ci][0]))
            return pt->checksum_algo[0] ? xr_fail(x, "more than one checksum in <Part>")
                                        : XR_LEAF;
    return XR_SKIP;
}

static int complete_part_number(struct xr *x, const char *v, struct xml_part *pt)
{
    unsigned long num = 0;
    if (!*v)
        return xr_fail(x, "empty <PartNumber>");
    for (const char *d = v; *d; d++) {
        if (*d < '0' || *d > '9')
            return xr_fail(x, "<PartNumber> is not a number");
        if (num <= XML_PARTS_MAX)
            num = num * 10 + (unsigned long)(*d - '0');
    }
    if (num < 1 || num > XML_PARTS_MAX) {
        errmsg_set(x->em, "part number %lu%s is outside 1..%u", num,
                   num > XML_PARTS_MAX ? "+" : "", XML_PARTS_MAX);
        return xr_stop(x, -S3E_INVALID_PART);
    }
    pt->number = (unsigned)num;
    return 0;
}

static int complete_end(struct xr *x, const char *name, char *text)
{
    struct complete_doc *d = x->doc;
    struct xml_part *pt = &d->arr[d->n];
    size_t n;

    if (x->depth == 2) { /* </Part> */
        if (!d->have_num)
            return xr_fail(x, "<Part> without <PartNumber>");
        if (!d->have_etag)
            return xr_fail(x, "<Part> without <ETag>");
        d->n++;
        return 0;
    }
    trim(text);
    n = strlen(text);
    if (!strcmp(name, "PartNumber")) {
        d->have_num = 1;
        return complete_part_number(x, text, pt);
    }
    if (!strcmp(name, "ETag")) {
        if (n >= 2 && text[0] == '"' && text[n - 1] == '"') {
            text++;
            n -= 2;
        }
        if (n == 0 || n >= sizeof(pt->etag))
            return xr_fail(x, n ? "<ETag> too long" : "empty <ETag>");
        memcpy(pt->etag, text, n);
        pt->etag[n] = '\0';
        d->have_etag = 1;
        return 0;
    }
    for (size_t ci = 0; ci < ARRAY_SIZE(checksum_elems); ci++) {
        if (strcmp(name, checksum_elems[ci][0]))
            continue;
        if (n == 0 || n >= sizeof(pt->checksum))
            return xr_fail(x, "bad <%s>", checksum_elems[ci][0]);
        memcpy(pt->checksum, text, n + 1);
        snprintf(pt->checksum_algo, sizeof(pt->checksum_algo), "%s", checksum_elems[ci][1]);
    }
    return 0;
}

int xml_parse_complete(const char *body, size_t len, struct xml_part **parts, size_t *n,
                       struct errmsg *em)
{
    struct complete_doc d = { 0 };
    struct xr *x;
    int rc;

    AN(parts);
    AN(n);
    *parts = NULL;
    *n = 0;
    x = xr_new("CompleteMultipartUpload", complete_start, complete_end, &d, em);
    if (!x)
        return -ENOMEM;
    rc = xr_parse(x, body, len);
    if (!rc && d.n == 0)
        rc = xr_fail(x, "no <Part> in <CompleteMultipartUpload>");
    xr_free(x);
    if (rc) {
        free(d.arr);
        return rc;
    }
    *parts = d.arr;
    *n = d.n;
    return 0;
}

/* ---------------------------------------------------------------- DeleteObjects */

struct delete_doc {
    struct xml_delete_obj *arr;
    size_t n, cap;
    int quiet, have_quiet;
    char *key, *version_id; /* of the <Object> being read */
};

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

static int delete_start(struct xr *x, const char *name)
{
    struct delete_doc *d = x->doc;

    if (x->depth == 2) {
        if (!strcmp(name, "Quiet"))
            return d->have_quiet ? xr_fail(x, "duplicate <Quiet>") : XR_LEAF;
        if (strcmp(name, "Object"))
            return XR_SKIP;
        if (d->n == XML_OBJECTS_MAX)
            return xr_fail(x, "more than %d objects", XML_OBJECTS_MAX);
        if (ARR_GROW(d->arr, d->n, 1, d->cap))
            return xr_stop(x, -ENOMEM);
        return XR_NODE;
    }
    if (!strcmp(name, "Key")) /* depth 3: a child of <Object> */
        return d->key ? xr_fail(x, "duplicate <Key>") : XR_LEAF;
    if (!strcmp(name, "VersionId"))
        return d->version_id ? xr_fail(x, "duplicate <VersionId>") : XR_LEAF;
    return XR_SKIP;
}

static int delete_end(struct xr *x, const char *name, char *text)
{
    struct delete_doc *d = x->doc;

    if (!strcmp(name, "Quiet") && x->depth == 2) {
        trim(text);
        if (!strcasecmp(text, "true"))
            d->quiet = 1;
        else if (!strcasecmp(text, "false"))
            d->quiet = 0;
        else
            return xr_fail(x, "<Quiet> is not true or false");
        d->have_quiet = 1;
        return 0;
    }
    if (x->depth == 2) { /* </Object> */
        if (!d->key)
            return xr_fail(x, "<Object> without <Key>");
        d->arr[d->n].key = d->key;
        d->arr[d->n].version_id = d->version_id;
        d->key = d->version_id = NULL;
        d->n++;
        return 0;
    }
    if (!strcmp(name, "Key") && !*text)
        return xr_fail(x, "empty <Key>");
    char *v = strdup(text);
    if (!v)
        return xr_stop(x, -ENOMEM);
    *(!strcmp(name, "Key") ? &d->key : &d->version_id) = v;
    return 0;
}

int xml_parse_delete(const char *body, size_t len, int *quiet, struct xml_delete_obj **objs,
                     size_t *n, struct errmsg *em)
{
    struct delete_doc d = { 0 };
    struct xr *x;
    int rc;

    AN(quiet);
    AN(objs);
    AN(n);
    *quiet = 0;
    *objs = NULL;
    *n = 0;
    x = xr_new("Delete", delete_start, delete_end, &d, em);
    if (!x)
        return -ENOMEM;
    rc = xr_parse(x, body, len);
    if (!rc && d.n == 0)
        rc = xr_fail(x, "no <Object> in <Delete>");
    xr_free(x);
    free(d.key);
    free(d.version_id);
    if (rc) {
        xml_delete_free(d.arr, d.n);
        return rc;
    }
    *quiet = d.quiet;
    *objs = d.arr;
    *n = d.n;
    return 0;
}

/* ---------------------------------------------------------------- AccessControlPolicy */

static const char *const acl_permissions[] = { "FULL_CONTROL", "READ", "WRITE", "READ_ACP",
                                               "WRITE_ACP" };

struct acl_doc {
    const char *owner_id;
    int have_owner, have_list, owner_only, grants;
    char *oid, *oother;            /* <Owner>'s <ID>, or its <URI>/<EmailAddress> */
    int have_grantee;              /* of the <Grant> being read */
    char *gid, *gother, *perm;
    char **slot;                   /* where the leaf being read goes */
};

static void acl_grant_clear(struct acl_doc *d)
{
    free(d->gid);
    free(d->gother);
    free(d->perm);
    d->gid = d->gother = d->perm = NULL;
    d->have_grantee = 0;
}

/* A leaf of a party (<Owner> or <Grantee>) or <Permission>, read into *@slot once. */
static int acl_leaf(struct xr *x, const char *name, char **slot)
{
    struct acl_doc *d = x->doc;
    if (*slot)
        return xr_fail(x, "duplicate <%s>", name);
    d->slot = slot;
    return XR_LEAF;
}

static int acl_party_child(struct xr *x, const char *name, char **id, char **other)
{
    if (!strcmp(name, "ID"))
        return acl_leaf(x, name, id);
    if (!strcmp(name, "URI") || !strcmp(name, "EmailAddress"))
        return acl_leaf(x, name, other);
    return XR_SKIP;
}

static int acl_start(struct xr *x, const char *name)
{
    struct acl_doc *d = x->doc;
    const char *parent = xr_parent(x);

    switch (x->depth) {
    case 2:
        if (!strcmp(name, "Owner")) {
            if (d->have_owner)
                return xr_fail(x, "duplicate <Owner>");
            d->have_owner = 1;
            return XR_NODE;
        }
        if (!strcmp(name, "AccessControlList")) {
            if (d->have_list)
                return xr_fail(x, "duplicate <AccessControlList>");
            d->have_list = 1;
            return XR_NODE;
        }
        return XR_SKIP;
    case 3:
        if (!strcmp(parent, "Owner"))
            return acl_party_child(x, name, &d->oid, &d->oother);
        if (strcmp(name, "Grant")) /* in <AccessControlList> */
            return XR_SKIP;
        acl_grant_clear(d);
        return XR_NODE;
    case 4: /* in <Grant> */
        if (!strcmp(name, "Grantee")) {
            if (d->have_grantee)
                return xr_fail(x, "duplicate <Grantee>");
            d->have_grantee = 1;
            return XR_NODE;
        }
        if (!strcmp(name, "Permission"))
            return acl_leaf(x, name, &d->perm);
        return XR_SKIP;
    default: /* 5, in <Grantee> */
        return acl_party_child(x, name, &d->gid, &d->gother);
    }
}

/* </Grant>: 1 when it grants the owner FULL_CONTROL, 0 when anything else, or an error. */
static int acl_grant_end(struct xr *x, struct acl_doc *d)
{
    size_t i;
    if (!d->have_grantee || (!d->gid && !d->gother) || (d->gid && d->gother))
        return xr_fail(x, "<Grant> needs a <Grantee> with one <ID>, <URI> or <EmailAddress>");
    for (i = 0; d->perm && i < ARRAY_SIZE(acl_permissions); i++)
        if (!strcmp(d->perm, acl_permissions[i]))
            break;
    if (!d->perm || i == ARRAY_SIZE(acl_permissions))
        return xr_fail(x, "<Grant> needs a <Permission> of FULL_CONTROL, READ, WRITE, READ_ACP "
                          "or WRITE_ACP");
    return d->gid && !strcmp(d->gid, d->owner_id) && i == 0;
}

static int acl_end(struct xr *x, const char *name, char *text)
{
    struct acl_doc *d = x->doc;
    int rc;

    if (text) {
        if (!(*d->slot = strdup(trim(text))))
            return xr_stop(x, -ENOMEM);
        return 0;
    }
    if (!strcmp(name, "Owner") && x->depth == 2) {
        if (d->oother || (d->oid && strcmp(d->oid, d->owner_id)))
            d->owner_only = 0; /* another owner: not what is enforced */
    } else if (!strcmp(name, "Grant") && x->depth == 3) {
        if ((rc = acl_grant_end(x, d)) < 0)
            return rc;
        d->owner_only &= rc;
        d->grants++;
    }
    return 0;
}

int xml_parse_acl(const char *body, size_t len, const char *owner_id, struct errmsg *em)
{
    struct acl_doc d = { .owner_id = owner_id, .owner_only = 1 };
    struct xr *x;
    int rc;

    AN(owner_id);
    x = xr_new("AccessControlPolicy", acl_start, acl_end, &d, em);
    if (!x)
        return -ENOMEM;
    rc = xr_parse(x, body, len);
    if (!rc && !d.have_list)
        rc = xr_fail(x, "no <AccessControlList> in <AccessControlPolicy>");
    xr_free(x);
    if (!rc) {
        rc = d.owner_only && d.grants ? 0 : -S3E_NOT_IMPLEMENTED;
        if (rc)
            errmsg_set(em, "%s", d.grants ? "only the owner's FULL_CONTROL grant is supported"
                                          : "an ACL without grants is not supported");
    }
    free(d.oid);
    free(d.oother);
    acl_grant_clear(&d);
    return rc == -S3E_MALFORMED_XML ? -S3E_MALFORMED_ACL : rc;
}
