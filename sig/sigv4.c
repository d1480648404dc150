/*
 * sigv4.c: AWS Signature Version 4 (sig/sigv4.h). Builds the canonical
 * request the S3 way (path encoded once, never normalised), verifies the
 * Authorization header and presigned query forms, and signs upstream requests
 * with the same code. Pure: no I/O, no globals; SHA-256/HMAC through lib/digest.h.
 * It owns nothing past a call; the streaming decoder takes the key from
 * struct sigv4_result.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/crypto.h>

#include "lib/buf.h"
#include "lib/checksum.h"
#include "lib/digest.h"
#include "lib/hex.h"
#include "lib/s3c.h"
#include "lib/s3err.h"
#include "sigv4.h"

#define SIGV4_ALGO "AWS4-HMAC-SHA256"
#define SIGV4_MAX_SKEW_S 900
#define SIGV4_MAX_EXPIRES_S 604800
#define SIGV4_CREQ_MAX (1u << 20) /* canonical request cap: URL + headers are far smaller */

/* ---- primitives -------------------------------------------------------------------------- */

int sigv4_sha256_hex(const void *msg, size_t len, char out[65])
{
    uint8_t d[32];
    out[0] = '\0';
    int rc = digest_sha256(msg, len, d); /* -ENOMEM: OpenSSL could not allocate its context */
    if (!rc)
        hex_encode(d, 32, out);
    return rc;
}

int sigv4_hmac_hex(const uint8_t key[32], const void *msg, size_t len, char out[65])
{
    uint8_t d[32];
    out[0] = '\0';
    int rc = digest_hmac_sha256(key, 32, msg, len, d);
    if (!rc)
        hex_encode(d, 32, out);
    return rc;
}

/* The derivation of a signing key: four HMACs. */
static int signing_key_derive(const char *secret, const char *yyyymmdd, const char *region,
                              const char *service, uint8_t out[32])
{
    size_t sl = strlen(secret);
    char *k = malloc(sl + 5);
    uint8_t a[32], b[32];
    int rc;
    memset(out, 0, 32);
    if (!k)
        return -ENOMEM;
    memcpy(k, "AWS4", 4);
    memcpy(k + 4, secret, sl + 1);
    rc = digest_hmac_sha256(k, sl + 4, yyyymmdd, strlen(yyyymmdd), a);
    OPENSSL_cleanse(k, sl + 4);
    free(k);
    if (!rc)
        rc = digest_hmac_sha256(a, 32, region, strlen(region), b);
    if (!rc)
        rc = digest_hmac_sha256(b, 32, service, strlen(service), a);
    if (!rc)
        rc = digest_hmac_sha256(a, 32, "aws4_request", 12, out);
    if (rc)
        memset(out, 0, 32);
    OPENSSL_cleanse(a, sizeof(a));
    OPENSSL_cleanse(b, sizeof(b));
    return rc;
}

/* Signing keys derived on this thread, by (secret, date, region, service): a key is the same
 * for every request of its day and scope, so the four HMACs are done once a day per key and
 * thread rather than per request. Keyed by the secret itself, so a secret changed by a reload
 * never finds the old key. Per thread: no lock on the request path. */
#define SIGNING_KEYS 8
struct signing_key_slot {
    char secret[SIGV4_SECRET_CACHE_MAX];
    char date[9], region[64], service[16];
    uint8_t key[32];
};
static __thread struct signing_key_slot signing_keys[SIGNING_KEYS];
static __thread unsigned signing_keys_next;

int sigv4_signing_key(const char *secret, const char *yyyymmdd, const char *region,
                      const char *service, uint8_t out[32])
{
    int cacheable = strlen(secret) < sizeof(signing_keys[0].secret) && strlen(yyyymmdd) == 8 &&
                    strlen(region) < sizeof(signing_keys[0].region) &&
                    strlen(service) < sizeof(signing_keys[0].service);
    for (unsigned i = 0; cacheable && i < SIGNING_KEYS; i++) {
        const struct signing_key_slot *s = &signing_keys[i];
        if (s->date[0] && !strcmp(s->date, yyyymmdd) && !strcmp(s->region, region) &&
            !strcmp(s->service, service) && !strcmp(s->secret, secret)) {
            memcpy(out, s->key, 32);
            return 0;
        }
    }
    int rc = signing_key_derive(secret, yyyymmdd, region, service, out);
    if (!rc && cacheable) {
        struct signing_key_slot *s = &signing_keys[signing_keys_next++ % SIGNING_KEYS];
        OPENSSL_cleanse(s, sizeof(*s));
        snprintf(s->secret, sizeof(s->secret), "%s", secret); /* lengths checked above */
        snprintf(s->date, sizeof(s->date), "%s", yyyymmdd);
        snprintf(s->region, sizeof(s->region), "%s", region);
        snprintf(s->service, sizeof(s->service), "%s", service);
        memcpy(s->key, out, 32);
    }
    return rc;
}

static int unreserved(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '.' || ch == '_' || ch == '~';
}

/* Returns the encoded length (NUL not counted) or -ENOSPC. */
int sigv4_uri_encode(const char *s, size_t len, int keep_slash, char *out, size_t cap)
{
    static const char hexu[] = "0123456789ABCDEF";
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (unreserved(ch) || (keep_slash && ch == '/')) {
            if (o + 1 >= cap)
                goto nospc;
            out[o++] = (char)ch;
        } else {
            if (o + 3 >= cap)
                goto nospc;
            out[o++] = '%';
            out[o++] = hexu[ch >> 4];
            out[o++] = hexu[ch & 15];
        }
    }
    if (o >= cap)
        goto nospc;
    out[o] = '\0';
    return (int)o;
nospc:
    if (cap)
        out[0] = '\0';
    return -ENOSPC;
}

/* Appends the AWS encoding of @s to @b: a run of up to 256 input bytes per append (a byte at a
 * time was a tenth of a signed hit's user time). */
static int buf_uri(struct buf *b, const char *s, int keep_slash)
{
    char tmp[3 * 256 + 1];
    size_t len = strlen(s);
    for (size_t i = 0; i < len; i += 256) {
        size_t n = len - i < 256 ? len - i : 256;
        int o = sigv4_uri_encode(s + i, n, keep_slash, tmp, sizeof(tmp));
        int rc = o < 0 ? o : buf_append(b, tmp, (size_t)o);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- canonical request ------------------------------------------------------------------- */

struct qpair {
    char *name, *value; /* encoded */
};

static int qpair_cmp(const void *a, const void *b)
{
    const struct qpair *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

/* Appends the AWS encoding of @s (NULL: "") at *@at in @arena, NUL-terminated, and returns
 * where it starts; *@at moves past it. The arena holds 3 bytes per input byte and a NUL. */
static char *arena_uri(char *arena, size_t *at, const char *s, size_t len)
{
    char *out = arena + *at;
    int o = sigv4_uri_encode(s ? s : "", len, 0, out, 3 * len + 1);
    S3C_ASSERT(o >= 0); /* room for the worst case was made */
    *at += (size_t)o + 1;
    return out;
}

#define QUERY_STACK_PAIRS 16
#define QUERY_STACK_BYTES 4096

/* The canonical query: every pair encoded, sorted by name then value. The pairs and their
 * encodings live on the stack for a usual query (a presigned URL's six pairs), else in two
 * allocations, never one per name or value. */
static int append_query(struct buf *b, const struct sigv4_input *in, int skip_signature)
{
    struct qpair qstack[QUERY_STACK_PAIRS], *qs = qstack;
    char astack[QUERY_STACK_BYTES], *arena = astack;
    size_t n = 0, raw = 0, at = 0;
    int rc = 0;
    for (size_t i = 0; i < in->n_query; i++) {
        raw += strlen(in->query[i].name) + 2;
        raw += in->query[i].value ? strlen(in->query[i].value) : 0;
        if (raw > SIGV4_CREQ_MAX)
            return -EMSGSIZE; /* longer than a canonical request may be */
    }
    size_t need = 3 * raw; /* each byte encoded as at most 3, a NUL after each string */
    if (in->n_query > QUERY_STACK_PAIRS && !(qs = calloc(in->n_query, sizeof(*qs))))
        return -ENOMEM;
    if (need > sizeof(astack) && !(arena = malloc(need))) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < in->n_query; i++) {
        const struct sigv4_kv *q = &in->query[i];
        if (skip_signature && !strcmp(q->name, "X-Amz-Signature"))
            continue;
        qs[n].name = arena_uri(arena, &at, q->name, strlen(q->name));
        qs[n].value = arena_uri(arena, &at, q->value, q->value ? strlen(q->value) : 0);
        n++;
    }
    if (n)
        qsort(qs, n, sizeof(*qs), qpair_cmp);
    for (size_t i = 0; i < n && !rc; i++) {
        if (i)
            rc = buf_append(b, "&", 1);
        if (!rc)
            rc = buf_puts(b, qs[i].name);
        if (!rc)
            rc = buf_append(b, "=", 1);
        if (!rc)
            rc = buf_puts(b, qs[i].value);
    }
out:
    if (qs != qstack)
        free(qs);
    if (arena != astack)
        free(arena);
    return rc;
}

/* Appends @v trimmed, with inner runs of blanks collapsed to one space. */
static int append_trimmed(struct buf *b, const char *v)
{
    int rc = 0, space = 0, any = 0;
    for (const char *p = v ? v : ""; *p && !rc; p++) {
        if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') {
            space = 1;
            continue;
        }
        if (space && any)
            rc = buf_append(b, " ", 1);
        if (!rc)
            rc = buf_append(b, p, 1);
        space = 0;
        any = 1;
    }
    return rc;
}

/* Appends "name:v1,v2\n" for every name of @signed_headers; -ENOENT when one is missing. */
static int append_headers(struct buf *b, const struct sigv4_input *in, const char *signed_headers)
{
    const char *p = signed_headers;
    int rc = 0;
    while (!rc) {
        const char *e = strchr(p, ';');
        size_t nl = e ? (size_t)(e - p) : strlen(p);
        int found = 0;
        if (!nl)
            return -ENOENT;
        for (size_t i = 0; i < nl && !rc; i++) {
            char ch = (char)tolower((unsigned char)p[i]);
            rc = buf_append(b, &ch, 1);
        }
        if (!rc)
            rc = buf_append(b, ":", 1);
        for (size_t i = 0; i < in->n_headers && !rc; i++) {
            const char *hn = in->headers[i].name;
            if (strlen(hn) != nl || strncasecmp(hn, p, nl))
                continue;
            if (found)
                rc = buf_append(b, ",", 1);
            if (!rc)
                rc = append_trimmed(b, in->headers[i].value);
            found = 1;
        }
        if (!rc && !found)
            return -ENOENT;
        if (!rc)
            rc = buf_append(b, "\n", 1);
        if (!e)
            break;
        p = e + 1;
    }
    return rc;
}

/* Builds the canonical request into @b: 0, -ENOENT (a signed header is missing), -ENOMEM,
 * -EMSGSIZE. */
static int creq_build(struct buf *b, const struct sigv4_input *in, const char *signed_headers,
                      const char *payload_hash, int skip_signature)
{
    int rc = buf_puts(b, in->method);
    if (!rc)
        rc = buf_append(b, "\n", 1);
    if (!rc)
        rc = in->path && in->path[0] ? buf_uri(b, in->path, 1) : buf_append(b, "/", 1);
    if (!rc)
        rc = buf_append(b, "\n", 1);
    if (!rc)
        rc = append_query(b, in, skip_signature);
    if (!rc)
        rc = buf_append(b, "\n", 1);
    if (!rc)
        rc = append_headers(b, in, signed_headers);
    if (!rc)
        rc = buf_append(b, "\n", 1);
    if (!rc)
        rc = buf_puts(b, signed_headers);
    if (!rc)
        rc = buf_append(b, "\n", 1);
    if (!rc)
        rc = buf_puts(b, payload_hash);
    return rc;
}

char *sigv4_canonical_request(const struct sigv4_input *in, const char *signed_headers,
                              const char *payload_hash)
{
    struct buf b;
    buf_init(&b, SIGV4_CREQ_MAX);
    if (creq_build(&b, in, signed_headers, payload_hash, 0)) {
        buf_free(&b);
        return NULL;
    }
    return buf_take(&b);
}

/* signature = HMAC(key, "AWS4-HMAC-SHA256\n<date>\n<scope>\nhex(sha256(creq))"). Fills
 * @creq_hash too (for error detail). 0 or -ENOMEM. */
static int sign_creq(const uint8_t key[32], const char *amz_date, const char *scope,
                     const char *creq, size_t creq_len, char creq_hash[65], char sig[65])
{
    char sts[512];
    sig[0] = '\0';
    int rc = sigv4_sha256_hex(creq, creq_len, creq_hash);
    if (rc)
        return rc;
    int n = snprintf(sts, sizeof(sts), SIGV4_ALGO "\n%s\n%s\n%s", amz_date, scope, creq_hash);
    S3C_ASSERT(n > 0 && (size_t)n < sizeof(sts));
    return sigv4_hmac_hex(key, sts, (size_t)n, sig);
}

/* ---- signing ----------------------------------------------------------------------------- */

static int strptr_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int sigv4_sign(const struct sigv4_input *in, const char *access_key, const char *secret,
               const char *region, const char *service, const char *amz_date,
               const char *payload_hash, char *authz, size_t cap)
{
    char **names = NULL;
    struct buf sh, creq;
    char date[9], scope[160], hash[65], sig[65];
    uint8_t key[32];
    int rc = 0;

    buf_init(&sh, 64 * 1024);
    buf_init(&creq, SIGV4_CREQ_MAX);
    if (cap)
        authz[0] = '\0';
    if (strlen(amz_date) < 8)
        return -EINVAL;
    memcpy(date, amz_date, 8);
    date[8] = '\0';
    rc = snprintf(scope, sizeof(scope), "%s/%s/%s/aws4_request", date, region, service);
    if (rc < 0 || (size_t)rc >= sizeof(scope))
        return -EINVAL;
    rc = 0;

    /* Signed headers: every header of @in, lower case, sorted, once each. */
    if (in->n_headers && !(names = calloc(in->n_headers, sizeof(*names))))
        return -ENOMEM;
    for (size_t i = 0; i < in->n_headers; i++) {
        if (!(names[i] = strdup(in->headers[i].name))) {
            rc = -ENOMEM;
            goto out;
        }
        for (char *p = names[i]; *p; p++)
            *p = (char)tolower((unsigned char)*p);
    }
    if (in->n_headers)
        qsort(names, in->n_headers, sizeof(*names), strptr_cmp);
    for (size_t i = 0; i < in->n_headers && !rc; i++) {
        if (i && !strcmp(names[i], names[i - 1]))
            continue;
        if (sh.len)
            rc = buf_append(&sh, ";", 1);
        if (!rc)
            rc = buf_puts(&sh, names[i]);
    }
    if (!rc && !sh.len)
        rc = -EINVAL; /* nothing to sign: the caller always passes host */
    if (!rc)
        rc = creq_build(&creq, in, sh.p, payload_hash, 0);
    if (rc)
        goto out;
    rc = sigv4_signing_key(secret, date, region, service, key);
    if (!rc)
        rc = sign_creq(key, amz_date, scope, creq.p, creq.len, hash, sig);
    OPENSSL_cleanse(key, sizeof(key));
    if (rc)
        goto out;
    int n = snprintf(authz, cap, SIGV4_ALGO " Credential=%s/%s, SignedHeaders=%s, Signature=%s",
                     access_key, scope, sh.p, sig);
    if (n < 0 || (size_t)n >= cap) {
        if (cap)
            authz[0] = '\0';
        rc = -ENOSPC;
    }
out:
    for (size_t i = 0; names && i < in->n_headers; i++)
        free(names[i]);
    free(names);
    buf_free(&sh);
    buf_free(&creq);
    return rc == -EMSGSIZE ? -ENOSPC : rc;
}

/* ---- verification ------------------------------------------------------------------------ */

struct parsed {
    const char *credential; /* AK/YYYYMMDD/region/service/aws4_request */
    size_t credential_len;
    const char *signed_headers;
    size_t signed_headers_len;
    const char *signature;
    size_t signature_len;
};

static const char *find_header(const struct sigv4_input *in, const char *name)
{
    for (size_t i = 0; i < in->n_headers; i++)
        if (!strcasecmp(in->headers[i].name, name))
            return in->headers[i].value ? in->headers[i].value : "";
    return NULL;
}

/* Query names are case sensitive (S3 answers the X-Amz-* ones only as spelled). */
static const struct sigv4_kv *find_query(const struct sigv4_input *in, const char *name)
{
    for (size_t i = 0; i < in->n_query; i++)
        if (!strcmp(in->query[i].name, name))
            return &in->query[i];
    return NULL;
}

static int is_digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

/* "YYYYMMDDTHHMMSSZ" -> time; -1 when malformed. */
static time_t parse_amz_date(const char *s)
{
    struct tm tm;
    if (strlen(s) != 16 || !is_digits(s, 8) || s[8] != 'T' || !is_digits(s + 9, 6) ||
        s[15] != 'Z')
        return -1;
    memset(&tm, 0, sizeof(tm));
    tm.tm_year = (s[0] - '0') * 1000 + (s[1] - '0') * 100 + (s[2] - '0') * 10 + (s[3] - '0') - 1900;
    tm.tm_mon = (s[4] - '0') * 10 + (s[5] - '0') - 1;
    tm.tm_mday = (s[6] - '0') * 10 + (s[7] - '0');
    tm.tm_hour = (s[9] - '0') * 10 + (s[10] - '0');
    tm.tm_min = (s[11] - '0') * 10 + (s[12] - '0');
    tm.tm_sec = (s[13] - '0') * 10 + (s[14] - '0');
    if (tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
        tm.tm_min > 59 || tm.tm_sec > 60)
        return -1;
    return timegm(&tm);
}

/* RFC 7231 "Fri, 24 May 2013 00:00:00 GMT" -> time and the amz form; -1 when malformed. */
static time_t parse_http_date(const char *s, char amz[17])
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *e = strptime(s, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (!e || *e)
        return -1;
    time_t t = timegm(&tm);
    struct tm u;
    if (t == (time_t)-1 || !gmtime_r(&t, &u))
        return -1;
    strftime(amz, 17, "%Y%m%dT%H%M%SZ", &u);
    return t;
}

/* Splits "AK/DATE/REGION/SERVICE/aws4_request"; fills @out's access key and scope and the date
 * in @date. Returns 0 or -1. */
static int parse_credential(const char *cred, size_t len, struct sigv4_result *out,
                            char date[9])
{
    const char *slash[4];
    int k = 0;
    for (size_t i = len; i-- > 0 && k < 4;)
        if (cred[i] == '/')
            slash[k++] = cred + i;
    if (k < 4)
        return -1;
    /* slash[3] ends the access key; the scope follows it. */
    size_t aklen = (size_t)(slash[3] - cred);
    const char *sc = slash[3] + 1;
    size_t sclen = len - aklen - 1;
    if (!aklen || aklen >= sizeof(out->access_key) || sclen >= sizeof(out->scope))
        return -1;
    if (slash[2] - sc != 8 || !is_digits(sc, 8))
        return -1;
    if (slash[1] == slash[2] + 1 || slash[0] == slash[1] + 1) /* empty region or service */
        return -1;
    if ((size_t)(cred + len - (slash[0] + 1)) != 12 || memcmp(slash[0] + 1, "aws4_request", 12))
        return -1;
    memcpy(out->access_key, cred, aklen);
    out->access_key[aklen] = '\0';
    memcpy(out->scope, sc, sclen);
    out->scope[sclen] = '\0';
    memcpy(date, sc, 8);
    date[8] = '\0';
    return 0;
}

/* "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=..." with or without spaces
 * after the commas, any order. Returns 0 or -S3E_*. */
static int parse_authz(const char *h, struct parsed *p, struct errmsg *em)
{
    size_t al = strlen(SIGV4_ALGO);
    memset(p, 0, sizeof(*p));
    while (*h == ' ')
        h++;
    int ours = !strncmp(h, SIGV4_ALGO, al) && (!h[al] || h[al] == ' ' || h[al] == '\t');
    if (!ours || !h[al]) {
        if (!ours && (!strncmp(h, "AWS ", 4) || !strncmp(h, "AWS4-", 5))) {
            errmsg_set(em, "unsupported authorization type");
            return -S3E_NOT_IMPLEMENTED;
        }
        errmsg_set(em, "the authorization header must start with " SIGV4_ALGO);
        return -S3E_AUTH_HEADER_MALFORMED;
    }
    const char *s = h + al;
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == ',')
            s++;
        if (!*s)
            break;
        const char *eq = strchr(s, '=');
        const char *end = strchr(s, ',');
        if (!end)
            end = s + strlen(s);
        if (!eq || eq > end) {
            errmsg_set(em, "authorization component without '='");
            return -S3E_AUTH_HEADER_MALFORMED;
        }
        size_t kl = (size_t)(eq - s);
        const char *v = eq + 1;
        size_t vl = (size_t)(end - v);
        while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
            vl--;
        const char **slot = NULL;
        size_t *slot_len = NULL;
        if (kl == 10 && !memcmp(s, "Credential", 10)) {
            slot = &p->credential;
            slot_len = &p->credential_len;
        } else if (kl == 13 && !memcmp(s, "SignedHeaders", 13)) {
            slot = &p->signed_headers;
            slot_len = &p->signed_headers_len;
        } else if (kl == 9 && !memcmp(s, "Signature", 9)) {
            slot = &p->signature;
            slot_len = &p->signature_len;
        }
        if (slot) {
            if (*slot) {
                errmsg_set(em, "repeated authorization component");
                return -S3E_AUTH_HEADER_MALFORMED;
            }
            *slot = v;
            *slot_len = vl;
        }
        s = end;
    }
    if (!p->credential || !p->signed_headers || !p->signature || !p->credential_len ||
        !p->signed_headers_len || !p->signature_len) {
        errmsg_set(em, "the authorization header needs Credential, SignedHeaders and Signature");
        return -S3E_AUTH_HEADER_MALFORMED;
    }
    return 0;
}

static int classify_payload(const char *v, struct sigv4_result *out, struct errmsg *em)
{
    static const struct {
        const char *value;
        enum sigv4_payload payload;
    } modes[] = {
        {"UNSIGNED-PAYLOAD", SIGV4_PAYLOAD_UNSIGNED},
        {"STREAMING-AWS4-HMAC-SHA256-PAYLOAD", SIGV4_PAYLOAD_STREAMING},
        {"STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", SIGV4_PAYLOAD_STREAMING_TRAILER},
        {"STREAMING-UNSIGNED-PAYLOAD-TRAILER", SIGV4_PAYLOAD_UNSIGNED_TRAILER},
    };
    for (size_t i = 0; i < ARRAY_SIZE(modes); i++)
        if (!strcmp(v, modes[i].value)) {
            out->payload = modes[i].payload;
            return 0;
        }
    if (!strncmp(v, "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD", 39)) {
        errmsg_set(em, "x-amz-content-sha256: %s is not supported", v);
        return -S3E_NOT_IMPLEMENTED;
    }
    size_t n = strlen(v);
    int hex = n == 64;
    for (size_t i = 0; hex && i < n; i++)
        hex = isxdigit((unsigned char)v[i]) != 0;
    if (!hex) {
        errmsg_set(em, "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-* or a SHA-256 "
                       "hex digest");
        return -S3E_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < 64; i++)
        out->payload_sha256[i] = (char)tolower((unsigned char)v[i]);
    out->payload_sha256[64] = '\0';
    out->payload = SIGV4_PAYLOAD_SHA256;
    return 0;
}

/* Parsed request, either form, ready for the signature check. */
struct authreq {
    const char *signed_headers; /* NUL-terminated copy in @sh */
    char sh[4096];
    char sig[65];     /* as provided, lower-cased; "" if not 64 hex */
    char date[9];     /* credential scope date */
    const char *payload_hash;
};

static int copy_sig(const char *s, size_t n, char out[65])
{
    out[0] = '\0';
    if (n != 64)
        return -1;
    for (size_t i = 0; i < 64; i++) {
        if (!isxdigit((unsigned char)s[i]))
            return -1;
        out[i] = (char)tolower((unsigned char)s[i]);
    }
    out[64] = '\0';
    return 0;
}

static int signed_headers_ok(const char *s, size_t n)
{
    if (!n || s[0] == ';' || s[n - 1] == ';')
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= ' ' || ch >= 127 || ch == ',' || ch == ':' || (ch == ';' && s[i + 1] == ';'))
            return 0;
    }
    return 1;
}

static int verify_header(const struct sigv4_input *in, const char *authz, time_t now,
                         struct authreq *ar, struct sigv4_result *out, struct errmsg *em)
{
    struct parsed p;
    int rc = parse_authz(authz, &p, em);
    if (rc)
        return rc;
    if (parse_credential(p.credential, p.credential_len, out, ar->date)) {
        errmsg_set(em, "malformed Credential (want AK/YYYYMMDD/region/service/aws4_request)");
        return -S3E_AUTH_HEADER_MALFORMED;
    }
    if (!signed_headers_ok(p.signed_headers, p.signed_headers_len) ||
        p.signed_headers_len >= sizeof(ar->sh)) {
        errmsg_set(em, "malformed SignedHeaders");
        return -S3E_AUTH_HEADER_MALFORMED;
    }
    memcpy(ar->sh, p.signed_headers, p.signed_headers_len);
    ar->sh[p.signed_headers_len] = '\0';
    ar->signed_headers = ar->sh;
    copy_sig(p.signature, p.signature_len, ar->sig);

    /* The request time: x-amz-date, else Date. */
    const char *xd = find_header(in, "x-amz-date");
    time_t t;
    if (xd) {
        t = parse_amz_date(xd);
        if (t != (time_t)-1)
            memcpy(out->amz_date, xd, 17);
    } else {
        const char *d = find_header(in, "Date");
        t = d ? parse_http_date(d, out->amz_date) : (time_t)-1;
    }
    if (t == (time_t)-1) {
        errmsg_set(em, "AWS authentication requires a valid Date or x-amz-date header");
        return -S3E_ACCESS_DENIED;
    }
    if (memcmp(out->amz_date, ar->date, 8)) {
        errmsg_set(em, "invalid credential date %s: not the date of x-amz-date %.8s", ar->date,
                   out->amz_date);
        return -S3E_AUTH_HEADER_MALFORMED;
    }
    const char *ph = find_header(in, "x-amz-content-sha256");
    if (!ph) {
        errmsg_set(em, "missing x-amz-content-sha256");
        return -S3E_MISSING_SECURITY_HEADER;
    }
    if ((rc = classify_payload(ph, out, em)))
        return rc;
    ar->payload_hash = ph;
    if (now - t > SIGV4_MAX_SKEW_S || t - now > SIGV4_MAX_SKEW_S) {
        errmsg_set(em, "request time %s is more than 15 minutes from the server time",
                   out->amz_date);
        return -S3E_REQUEST_TIME_TOO_SKEWED;
    }
    return 0;
}

static int verify_query(const struct sigv4_input *in, time_t now, struct authreq *ar,
                        struct sigv4_result *out, struct errmsg *em)
{
    const struct sigv4_kv *alg = find_query(in, "X-Amz-Algorithm");
    const struct sigv4_kv *cred = find_query(in, "X-Amz-Credential");
    const struct sigv4_kv *date = find_query(in, "X-Amz-Date");
    const struct sigv4_kv *exp = find_query(in, "X-Amz-Expires");
    const struct sigv4_kv *sh = find_query(in, "X-Amz-SignedHeaders");
    const struct sigv4_kv *sig = find_query(in, "X-Amz-Signature");

    if (alg && alg->value && strcmp(alg->value, SIGV4_ALGO) && !strncmp(alg->value, "AWS4-", 5)) {
        errmsg_set(em, "X-Amz-Algorithm %s is not supported", alg->value);
        return -S3E_NOT_IMPLEMENTED;
    }
    if (!alg || !alg->value || strcmp(alg->value, SIGV4_ALGO)) {
        errmsg_set(em, "X-Amz-Algorithm only supports \"" SIGV4_ALGO "\"");
        return -S3E_AUTH_QUERY_MALFORMED;
    }
    if (!cred || !cred->value || !date || !date->value || !exp || !exp->value || !sh ||
        !sh->value || !sig || !sig->value) {
        errmsg_set(em, "presigned URLs need X-Amz-Credential, X-Amz-Date, X-Amz-Expires, "
                       "X-Amz-SignedHeaders and X-Amz-Signature");
        return -S3E_AUTH_QUERY_MALFORMED;
    }
    if (parse_credential(cred->value, strlen(cred->value), out, ar->date)) {
        errmsg_set(em, "malformed X-Amz-Credential");
        return -S3E_AUTH_QUERY_MALFORMED;
    }
    time_t t = parse_amz_date(date->value);
    if (t == (time_t)-1) {
        errmsg_set(em, "X-Amz-Date must be in the ISO8601 long format YYYYMMDDTHHMMSSZ");
        return -S3E_AUTH_QUERY_MALFORMED;
    }
    memcpy(out->amz_date, date->value, 17);
    if (memcmp(out->amz_date, ar->date, 8)) {
        errmsg_set(em, "credential date %s is not the date of X-Amz-Date", ar->date);
        return -S3E_AUTH_QUERY_MALFORMED;
    }
    /* A number outside 1..604800 (0, negative, over 7 days) is denied (403), as S3 does; what
     * is not a number at all is malformed (400). */
    const char *ev = exp->value + (exp->value[0] == '-');
    size_t el = strlen(ev);
    if (!el || !is_digits(ev, el)) {
        errmsg_set(em, "X-Amz-Expires must be a number of seconds");
        return -S3E_AUTH_QUERY_MALFORMED;
    }
    long expires = ev != exp->value || el > 6 ? 0 : strtol(ev, NULL, 10);
    if (expires < 1 || expires > SIGV4_MAX_EXPIRES_S) {
        errmsg_set(em, "X-Amz-Expires %s is not between 1 and 604800 seconds", exp->value);
        return -S3E_EXPIRES_OUT_OF_RANGE;
    }
    size_t shl = strlen(sh->value);
    if (!signed_headers_ok(sh->value, shl) || shl >= sizeof(ar->sh)) {
        errmsg_set(em, "malformed X-Amz-SignedHeaders");
        return -S3E_AUTH_QUERY_MALFORMED;
    }
    memcpy(ar->sh, sh->value, shl + 1);
    ar->signed_headers = ar->sh;
    copy_sig(sig->value, strlen(sig->value), ar->sig);
    ar->payload_hash = "UNSIGNED-PAYLOAD";
    out->payload = SIGV4_PAYLOAD_UNSIGNED;
    out->presigned = 1;
    if (t - now > SIGV4_MAX_SKEW_S) {
        errmsg_set(em, "X-Amz-Date %s is in the future", out->amz_date);
        return -S3E_REQUEST_TIME_TOO_SKEWED;
    }
    if (now > t + expires) {
        errmsg_set(em, "request has expired (X-Amz-Date %s + %ld s)", out->amz_date, expires);
        return -S3E_EXPIRED_REQUEST;
    }
    return 0;
}

/* "DATE/REGION/SERVICE/aws4_request" (checked by parse_credential) -> @region, @service. */
static void scope_split(const char *scope, char region[128], char service[128])
{
    const char *r = scope + 9;
    const char *rs = strchr(r, '/');
    const char *ss = rs ? strchr(rs + 1, '/') : NULL;
    S3C_ASSERT(rs && ss); /* parse_credential checked the shape */
    snprintf(region, 128, "%.*s", (int)(rs - r), r);
    snprintf(service, 128, "%.*s", (int)(ss - rs - 1), rs + 1);
}

/* The credential scope names the region and service this server accepts (@in->region and
 * @in->service; NULL accepts any). 0, or @bad (the form's MALFORMED code) with S3's message:
 * a signature for another region or service must not be honoured here. */
static int check_scope(const struct sigv4_input *in, struct sigv4_result *out, int bad,
                       struct errmsg *em)
{
    char region[128], service[128];
    int query = bad == -S3E_AUTH_QUERY_MALFORMED;
    scope_split(out->scope, region, service);
    if (in->region && strcmp(region, in->region)) {
        out->refused = out->region_wrong = 1;
        if (query)
            errmsg_set(em, "Error parsing the X-Amz-Credential parameter; the region '%s' is "
                           "wrong; expecting '%s'", region, in->region);
        else
            errmsg_set(em, "The authorization header is malformed; the region '%s' is wrong; "
                           "expecting '%s'", region, in->region);
        return bad;
    }
    if (in->service && strcmp(service, in->service)) {
        out->refused = 1;
        if (query)
            errmsg_set(em, "Error parsing the X-Amz-Credential parameter; incorrect service "
                           "'%s'. This endpoint belongs to '%s'.", service, in->service);
        else
            errmsg_set(em, "The authorization header is malformed; incorrect service '%s'. "
                           "This endpoint belongs to '%s'.", service, in->service);
        return bad;
    }
    return 0;
}

/* Whether @name (@nl bytes) is an item of @list ("a;b;c" with @sep ';'), in any case. */
static int list_has(const char *list, char sep, const char *name, size_t nl)
{
    for (const char *p = list; *p;) {
        const char *e = strchr(p, sep);
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == nl && !strncasecmp(p, name, nl))
            return 1;
        if (!e)
            break;
        p = e + 1;
    }
    return 0;
}

/* Appends @name (lower case) to the ','-joined @out->not_signed unless it is there already
 * or there is no room (the list is detail only: the refusal stands without it). */
static void not_signed_add(struct sigv4_result *out, const char *name)
{
    size_t nl = strlen(name), o = strlen(out->not_signed);
    char *d = out->not_signed;
    if (list_has(d, ',', name, nl) || o + 1 + nl + 1 > sizeof(out->not_signed))
        return;
    if (o)
        d[o++] = ',';
    for (size_t i = 0; i < nl; i++)
        d[o + i] = (char)tolower((unsigned char)name[i]);
    d[o + nl] = '\0';
}

/* S3: the host header, and every x-amz-* header the request carries, must be signed: an
 * unsigned one could be added or changed by anyone who captured the request (an
 * x-amz-copy-source turns a captured PUT into a copy). 0 or -S3E_ACCESS_DENIED. */
static int check_signed(const struct sigv4_input *in, const char *sh, struct sigv4_result *out,
                        struct errmsg *em)
{
    out->md5_signed = list_has(sh, ';', "content-md5", 11);
    if (!list_has(sh, ';', "host", 4))
        not_signed_add(out, "host");
    for (size_t i = 0; i < in->n_headers; i++) {
        const char *n = in->headers[i].name;
        if (!strncasecmp(n, "x-amz-", 6) && !list_has(sh, ';', n, strlen(n)))
            not_signed_add(out, n);
    }
    if (!out->not_signed[0])
        return 0;
    out->refused = 1;
    errmsg_set(em, "There were headers present in the request which were not signed");
    return -S3E_ACCESS_DENIED;
}

int sigv4_verify(const struct sigv4_input *in, time_t now, sigv4_secret_f *lookup, void *cls,
                 struct sigv4_result *out, struct errmsg *em)
{
    struct authreq ar;
    struct buf creq;
    char hash[65], want[65];
    int rc;

    memset(out, 0, sizeof(*out));
    memset(&ar, 0, sizeof(ar));
    const char *authz = find_header(in, "Authorization");
    int presigned = find_query(in, "X-Amz-Algorithm") || find_query(in, "X-Amz-Signature") ||
                    find_query(in, "X-Amz-Credential");
    if (!authz && !presigned) {
        errmsg_set(em, "no Authorization header and no X-Amz-Algorithm query");
        return -S3E_ACCESS_DENIED;
    }
    if (authz && presigned) {
        errmsg_set(em, "only one auth mechanism allowed: Authorization header or X-Amz-* query");
        return -S3E_INVALID_ARGUMENT;
    }
    rc = authz ? verify_header(in, authz, now, &ar, out, em) : verify_query(in, now, &ar, out, em);
    if (!rc)
        rc = check_scope(in, out, authz ? -S3E_AUTH_HEADER_MALFORMED : -S3E_AUTH_QUERY_MALFORMED,
                         em);
    if (!rc)
        rc = check_signed(in, ar.signed_headers, out, em);
    if (rc)
        goto fail;

    const char *secret = lookup(cls, out->access_key);
    if (!secret) {
        errmsg_set(em, "unknown access key %s", out->access_key);
        rc = -S3E_INVALID_ACCESS_KEY_ID;
        goto fail;
    }
    char region[128], service[128];
    scope_split(out->scope, region, service);
    buf_init(&creq, SIGV4_CREQ_MAX);
    rc = creq_build(&creq, in, ar.signed_headers, ar.payload_hash, out->presigned);
    if (rc == -ENOENT) {
        buf_free(&creq);
        errmsg_set(em, "a header named in SignedHeaders (%s) is missing", ar.signed_headers);
        rc = -S3E_SIGNATURE_DOES_NOT_MATCH;
        goto fail;
    }
    if (rc) {
        buf_free(&creq);
        rc = rc == -EMSGSIZE ? -S3E_HEADER_TOO_LARGE : rc;
        goto fail;
    }
    rc = sigv4_signing_key(secret, ar.date, region, service, out->signing_key);
    if (!rc)
        rc = sign_creq(out->signing_key, out->amz_date, out->scope, creq.p, creq.len, hash, want);
    buf_free(&creq);
    if (rc) {
        errmsg_set(em, "computing the signature: %s", strerror(-rc));
        goto fail;
    }
    if (!ar.sig[0] || CRYPTO_memcmp(want, ar.sig, 64)) {
        errmsg_set(em, "signature mismatch: canonical request sha256 %s, date %s, scope %s", hash,
                   out->amz_date, out->scope);
        rc = -S3E_SIGNATURE_DOES_NOT_MATCH;
        goto fail;
    }
    memcpy(out->seed_signature, want, 65);
    return 0;
fail:
    OPENSSL_cleanse(out->signing_key, sizeof(out->signing_key));
    return rc;
}
