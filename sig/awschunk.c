/*
 * awschunk.c: incremental aws-chunked decoder (sig/awschunk.h). Owns the
 * frame parser, the per-chunk SHA-256 and chunk/trailer signature checks and
 * the parsed trailer (it holds no payload: bytes go out as they come); it does not
 * undo HTTP chunked framing nor check the payload checksums (the caller does).
 *   HDR -> DATA -> DATA_CR -> DATA_LF -> HDR ... HDR(size 0) -> [END_CRLF | TRAILER] -> DONE
 * Any error is sticky (FAILED): later feeds return it again.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "awschunk.h"
#include "lib/hex.h"
#include "lib/s3c.h"
#include "lib/s3err.h"
#include "sigv4.h"

#define AWSCHUNK_MAX_CHUNK (16u << 20)
#define AWSCHUNK_LINE_MAX 1024 /* a chunk header or one trailer line */
#define AWSCHUNK_MAX_TRAILERS 8
#define AWSCHUNK_EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

enum awschunk_state {
    ST_HDR,      /* collecting "<hex>[;chunk-signature=<sig>]\r\n" */
    ST_DATA,     /* chunk payload */
    ST_DATA_CR,  /* the \r after the payload */
    ST_DATA_LF,  /* the \n after the payload */
    ST_END_CRLF, /* SIGNED: the empty line after the final frame */
    ST_TRAILER,  /* trailer lines until an empty one */
    ST_DONE,
    ST_FAILED,
};

struct trailer {
    char name[64];
    char value[256];
};

struct awschunk {
    enum awschunk_mode mode;
    enum awschunk_state st;
    int err;
    int signed_chunks;
    uint8_t key[32];
    char prev_sig[65];
    char amz_date[17];
    char scope[128];

    char line[AWSCHUNK_LINE_MAX];
    size_t line_len;

    uint64_t remaining;   /* payload bytes left in the current chunk */
    char chunk_sig[65];   /* as announced in the frame header */
    EVP_MD_CTX *md;       /* SHA-256 of the current chunk */

    struct trailer trailers[AWSCHUNK_MAX_TRAILERS];
    size_t n_trailers;
    EVP_MD_CTX *trailer_md; /* SHA-256 over "name:value\n" of every trailer line */
    int trailer_signed;     /* x-amz-trailer-signature seen and checked */

    uint64_t decoded;
};

int awschunk_new(enum awschunk_mode mode, const uint8_t signing_key[32],
                 const char *seed_signature, const char *amz_date, const char *scope,
                 struct awschunk **out)
{
    struct awschunk *c = calloc(1, sizeof(*c));
    *out = NULL;
    if (!c)
        return -ENOMEM;
    c->mode = mode;
    c->st = ST_HDR;
    c->signed_chunks = mode == AWSCHUNK_SIGNED || mode == AWSCHUNK_SIGNED_TRAILER;
    if (c->signed_chunks) {
        AN(signing_key);
        AN(seed_signature);
        AN(amz_date);
        AN(scope);
        memcpy(c->key, signing_key, 32);
        snprintf(c->prev_sig, sizeof(c->prev_sig), "%s", seed_signature);
        snprintf(c->amz_date, sizeof(c->amz_date), "%s", amz_date);
        snprintf(c->scope, sizeof(c->scope), "%s", scope);
        c->md = EVP_MD_CTX_new();
        if (!c->md)
            goto fail;
    }
    if (mode != AWSCHUNK_SIGNED) {
        c->trailer_md = EVP_MD_CTX_new();
        if (!c->trailer_md || !EVP_DigestInit_ex(c->trailer_md, EVP_sha256(), NULL))
            goto fail;
    }
    *out = c;
    return 0;
fail:
    awschunk_free(c);
    return -ENOMEM;
}

void awschunk_free(struct awschunk *c)
{
    if (!c)
        return;
    EVP_MD_CTX_free(c->md);
    EVP_MD_CTX_free(c->trailer_md);
    OPENSSL_cleanse(c->key, sizeof(c->key));
    free(c);
}

static int fail(struct awschunk *c, int rc)
{
    c->st = ST_FAILED;
    c->err = rc;
    return rc;
}

static void hex_digest(EVP_MD_CTX *md, char out[65])
{
    static const char digits[] = "0123456789abcdef";
    uint8_t d[32];
    unsigned dl = 0;
    if (!EVP_DigestFinal_ex(md, d, &dl) || dl != 32)
        s3c_assert_fail("EVP_DigestFinal_ex(sha256)", __FILE__, __LINE__, __func__);
    for (int i = 0; i < 32; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[64] = '\0';
}

/* Checks @want against HMAC(key, "<algo>\n<date>\n<scope>\n<prev>\n<rest>") and moves prev. */
static int check_sig(struct awschunk *c, const char *algo, const char *rest, const char *want)
{
    char sts[512], sig[65];
    int n = snprintf(sts, sizeof(sts), "%s\n%s\n%s\n%s\n%s", algo, c->amz_date, c->scope,
                     c->prev_sig, rest);
    S3C_ASSERT(n > 0 && (size_t)n < sizeof(sts));
    int rc = sigv4_hmac_hex(c->key, sts, (size_t)n, sig);
    if (rc)
        return rc;
    if (CRYPTO_memcmp(sig, want, 64))
        return -S3E_SIGNATURE_DOES_NOT_MATCH;
    memcpy(c->prev_sig, sig, 65);
    return 0;
}

/* The current chunk is complete (its bytes went out as they came): check its signature
 * (signed modes). */
static int chunk_done(struct awschunk *c)
{
    if (!c->signed_chunks)
        return 0;
    char rest[200], h[65];
    hex_digest(c->md, h);
    snprintf(rest, sizeof(rest), AWSCHUNK_EMPTY_SHA "\n%s", h);
    return check_sig(c, "AWS4-HMAC-SHA256-PAYLOAD", rest, c->chunk_sig);
}

/* Parses the collected chunk header line (without its CRLF). */
static int parse_header(struct awschunk *c, awschunk_out_f *out, void *cls)
{
    const char *p = c->line, *end = c->line + c->line_len;
    uint64_t size = 0;
    int nd = 0;
    for (; p < end && hex_digit((unsigned char)*p) >= 0; p++, nd++) {
        size = size * 16 + (uint64_t)hex_digit((unsigned char)*p);
        if (size > AWSCHUNK_MAX_CHUNK)
            return -S3E_INVALID_REQUEST;
    }
    if (!nd)
        return -S3E_INVALID_REQUEST;
    c->chunk_sig[0] = '\0';
    if (p < end) {
        static const char ext[] = ";chunk-signature=";
        size_t el = sizeof(ext) - 1;
        if ((size_t)(end - p) != el + 64 || memcmp(p, ext, el))
            return -S3E_INVALID_REQUEST;
        p += el;
        for (int i = 0; i < 64; i++) {
            if (hex_digit((unsigned char)p[i]) < 0)
                return -S3E_INVALID_REQUEST;
            c->chunk_sig[i] = (char)(p[i] >= 'A' && p[i] <= 'F' ? p[i] - 'A' + 'a' : p[i]);
        }
        c->chunk_sig[64] = '\0';
    }
    if (c->signed_chunks) {
        if (!c->chunk_sig[0])
            return -S3E_INVALID_REQUEST;
        if (!EVP_DigestInit_ex(c->md, EVP_sha256(), NULL))
            return -ENOMEM;
    }
    c->remaining = size;
    if (size) {
        c->st = ST_DATA;
        return 0;
    }
    /* the final frame: signed too */
    int rc = chunk_done(c);
    if (rc)
        return rc;
    c->st = c->mode == AWSCHUNK_SIGNED ? ST_END_CRLF : ST_TRAILER;
    return 0;
}

/* One complete trailer line (without CRLF); an empty one ends the body. */
static int parse_trailer(struct awschunk *c)
{
    char *line = c->line;
    size_t len = c->line_len;
    if (!len) {
        if (c->mode == AWSCHUNK_SIGNED_TRAILER && !c->trailer_signed)
            return -S3E_SIGNATURE_DOES_NOT_MATCH; /* the trailer must be signed */
        c->st = ST_DONE;
        return 0;
    }
    if (c->trailer_signed)
        return -S3E_INVALID_REQUEST; /* nothing may follow the trailer signature */
    char *colon = memchr(line, ':', len);
    if (!colon || colon == line)
        return -S3E_INVALID_REQUEST;
    size_t nl = (size_t)(colon - line);
    const char *v = colon + 1;
    size_t vl = len - nl - 1;
    while (vl && (*v == ' ' || *v == '\t')) {
        v++;
        vl--;
    }
    while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        vl--;
    for (size_t i = 0; i < nl; i++) {
        unsigned char ch = (unsigned char)line[i];
        if (ch <= ' ' || ch >= 127)
            return -S3E_INVALID_REQUEST;
        if (ch >= 'A' && ch <= 'Z')
            line[i] = (char)(ch - 'A' + 'a');
    }
    if (nl == 23 && !memcmp(line, "x-amz-trailer-signature", 23)) {
        if (c->mode != AWSCHUNK_SIGNED_TRAILER)
            return 0; /* unsigned trailer: nothing to check it with; ignore */
        if (vl != 64)
            return -S3E_SIGNATURE_DOES_NOT_MATCH;
        char want[65], h[65];
        for (size_t i = 0; i < 64; i++) {
            if (hex_digit((unsigned char)v[i]) < 0)
                return -S3E_SIGNATURE_DOES_NOT_MATCH;
            want[i] = (char)(v[i] >= 'A' && v[i] <= 'F' ? v[i] - 'A' + 'a' : v[i]);
        }
        want[64] = '\0';
        hex_digest(c->trailer_md, h);
        int rc = check_sig(c, "AWS4-HMAC-SHA256-TRAILER", h, want);
        if (rc)
            return rc;
        c->trailer_signed = 1;
        return 0;
    }
    if (c->n_trailers == AWSCHUNK_MAX_TRAILERS || nl >= sizeof(c->trailers[0].name) ||
        vl >= sizeof(c->trailers[0].value))
        return -S3E_INVALID_REQUEST;
    struct trailer *t = &c->trailers[c->n_trailers++];
    memcpy(t->name, line, nl);
    t->name[nl] = '\0';
    memcpy(t->value, v, vl);
    t->value[vl] = '\0';
    EVP_DigestUpdate(c->trailer_md, t->name, nl);
    EVP_DigestUpdate(c->trailer_md, ":", 1);
    EVP_DigestUpdate(c->trailer_md, t->value, vl);
    EVP_DigestUpdate(c->trailer_md, "\n", 1);
    return 0;
}

/* Collects a line ending in CRLF (a bare LF is accepted) from @p; returns bytes used and sets
 * *@done when the line is complete, or a negative error. */
static long take_line(struct awschunk *c, const uint8_t *p, size_t n, int *done)
{
    const uint8_t *lf = memchr(p, '\n', n);
    size_t use = lf ? (size_t)(lf - p) + 1 : n;
    size_t add = lf ? use - 1 : use;
    *done = 0;
    if (c->line_len + add >= sizeof(c->line))
        return -S3E_INVALID_REQUEST;
    memcpy(c->line + c->line_len, p, add);
    c->line_len += add;
    if (lf) {
        if (c->line_len && c->line[c->line_len - 1] == '\r')
            c->line_len--;
        if (memchr(c->line, '\r', c->line_len))
            return -S3E_INVALID_REQUEST;
        c->line[c->line_len] = '\0';
        *done = 1;
    }
    return (long)use;
}

int awschunk_feed(struct awschunk *c, const void *in, size_t len, awschunk_out_f *out, void *cls)
{
    const uint8_t *p = in;
    int rc = 0;
    if (c->st == ST_FAILED)
        return c->err;
    while (len) {
        switch (c->st) {
        case ST_HDR:
        case ST_TRAILER: {
            int done;
            long used = take_line(c, p, len, &done);
            if (used < 0)
                return fail(c, (int)used);
            p += used;
            len -= (size_t)used;
            if (!done)
                break;
            rc = c->st == ST_HDR ? parse_header(c, out, cls) : parse_trailer(c);
            c->line_len = 0;
            if (rc)
                return fail(c, rc);
            break;
        }
        case ST_DATA: {
            size_t k = len < c->remaining ? len : (size_t)c->remaining;
            if (c->signed_chunks)
                EVP_DigestUpdate(c->md, p, k);
            if ((rc = out(cls, p, k)))
                return fail(c, rc);
            c->decoded += k;
            p += k;
            len -= k;
            c->remaining -= k;
            if (!c->remaining) {
                if ((rc = chunk_done(c)))
                    return fail(c, rc);
                c->st = ST_DATA_CR;
            }
            break;
        }
        case ST_DATA_CR:
            if (*p != '\r')
                return fail(c, -S3E_INVALID_REQUEST);
            p++;
            len--;
            c->st = ST_DATA_LF;
            break;
        case ST_DATA_LF:
            if (*p != '\n')
                return fail(c, -S3E_INVALID_REQUEST);
            p++;
            len--;
            c->st = ST_HDR;
            break;
        case ST_END_CRLF: {
            int done;
            long used = take_line(c, p, len, &done);
            if (used < 0)
                return fail(c, (int)used);
            p += used;
            len -= (size_t)used;
            if (done) {
                if (c->line_len)
                    return fail(c, -S3E_INVALID_REQUEST);
                c->st = ST_DONE;
            }
            break;
        }
        case ST_DONE:
            return fail(c, -S3E_INVALID_REQUEST); /* bytes after the end */
        case ST_FAILED:
            return c->err;
        }
    }
    return 0;
}

int awschunk_finish(struct awschunk *c)
{
    if (c->st == ST_FAILED)
        return c->err;
    if (c->st == ST_DONE)
        return 0;
    /* Lenient: the final empty line may be missing once everything else is complete. */
    if (c->st == ST_END_CRLF && !c->line_len)
        return 0;
    if (c->st == ST_TRAILER && !c->line_len &&
        (c->mode == AWSCHUNK_UNSIGNED_TRAILER || c->trailer_signed))
        return 0;
    return -S3E_INCOMPLETE_BODY;
}

const char *awschunk_trailer(const struct awschunk *c, const char *name)
{
    for (size_t i = 0; i < c->n_trailers; i++)
        if (!strcasecmp(c->trailers[i].name, name))
            return c->trailers[i].value;
    return NULL;
}

uint64_t awschunk_decoded_bytes(const struct awschunk *c)
{
    return c->decoded;
}
