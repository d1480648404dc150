/*
 * checksum.c: one-pass upload digests (lib/checksum.h). MD5 and SHA-256
 * through OpenSSL EVP, the x-amz-checksum-* value (CRC32 via zlib, CRC32C
 * with SSE4.2 when the CPU has it else slice-by-8, SHA1/SHA256 via EVP), and
 * strict base64 / hex helpers. Pure: no I/O; the only global state is the
 * CRC32C table and implementation choice, set up once (pthread_once).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>
#include <zlib.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "checksum.h"
#include "hex.h"

struct cksum {
    unsigned want;
    enum cksum_algo algo;
    EVP_MD_CTX *md5;
    EVP_MD_CTX *sha256; /* also serves algo == CKSUM_SHA256 */
    EVP_MD_CTX *algo_md; /* CKSUM_SHA1, or SHA256 when the payload hash is not wanted */
    uint32_t crc;
};

/* ---- CRC32C ------------------------------------------------------------------------------ */

#define CRC32C_POLY 0x82f63b78u /* Castagnoli, reflected */

typedef uint32_t crc32c_f(uint32_t crc, const uint8_t *p, size_t n);

static uint32_t crc32c_table[8][256];
static crc32c_f *crc32c_impl;
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;

/* Slice-by-8 over the raw (pre-/post-inverted by the caller) register. */
static uint32_t crc32c_sw(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        crc = crc32c_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= crc;
        crc = crc32c_table[7][lo & 0xff] ^ crc32c_table[6][(lo >> 8) & 0xff] ^
              crc32c_table[5][(lo >> 16) & 0xff] ^ crc32c_table[4][lo >> 24] ^
              crc32c_table[3][hi & 0xff] ^ crc32c_table[2][(hi >> 8) & 0xff] ^
              crc32c_table[1][(hi >> 16) & 0xff] ^ crc32c_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc32c_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p,
                                                              size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        crc = _mm_crc32_u8(crc, *p++);
        n--;
    }
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    crc = (uint32_t)c;
    while (n--)
        crc = _mm_crc32_u8(crc, *p++);
    return crc;
}
#endif

static void crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc32c_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc32c_table[t][i] =
                crc32c_table[0][crc32c_table[t - 1][i] & 0xff] ^ (crc32c_table[t - 1][i] >> 8);
    crc32c_impl = crc32c_sw;
#if defined(__x86_64__)
    if (!getenv("S3C_NO_SSE42") && __builtin_cpu_supports("sse4.2"))
        crc32c_impl = crc32c_hw;
#endif
}

uint32_t cksum_crc32c(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&crc32c_once, crc32c_init);
    return ~crc32c_impl(~crc, p, n);
}

/* ---- streaming digests -------------------------------------------------------------------- */

static EVP_MD_CTX *md_new(const EVP_MD *md)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx && !EVP_DigestInit_ex(ctx, md, NULL)) {
        EVP_MD_CTX_free(ctx);
        ctx = NULL;
    }
    return ctx;
}

int cksum_new(unsigned want, enum cksum_algo algo, struct cksum **out)
{
    struct cksum *c = calloc(1, sizeof(*c));
    *out = NULL;
    if (!c)
        return -ENOMEM;
    c->want = want;
    c->algo = algo;
    if ((want & CKSUM_WANT_MD5) && !(c->md5 = md_new(EVP_md5())))
        goto fail;
    if ((want & CKSUM_WANT_SHA256) && !(c->sha256 = md_new(EVP_sha256())))
        goto fail;
    if (algo == CKSUM_SHA1 && !(c->algo_md = md_new(EVP_sha1())))
        goto fail;
    if (algo == CKSUM_SHA256 && !c->sha256 && !(c->algo_md = md_new(EVP_sha256())))
        goto fail;
    if (algo == CKSUM_CRC32)
        c->crc = (uint32_t)crc32(0L, Z_NULL, 0);
    *out = c;
    return 0;
fail:
    cksum_free(c);
    return -ENOMEM;
}

void cksum_update(struct cksum *c, const void *p, size_t n)
{
    if (!n)
        return;
    if (c->md5)
        EVP_DigestUpdate(c->md5, p, n);
    if (c->sha256)
        EVP_DigestUpdate(c->sha256, p, n);
    if (c->algo_md)
        EVP_DigestUpdate(c->algo_md, p, n);
    if (c->algo == CKSUM_CRC32) {
        const uint8_t *b = p;
        while (n) { /* zlib takes uInt lengths */
            uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
            c->crc = (uint32_t)crc32(c->crc, b, k);
            b += k;
            n -= k;
        }
    } else if (c->algo == CKSUM_CRC32C) {
        c->crc = cksum_crc32c(c->crc, p, n);
    }
}

void cksum_final(struct cksum *c, struct cksum_result *out)
{
    uint8_t d[EVP_MAX_MD_SIZE], sha[32];
    unsigned dl = 0;
    int have_sha = 0;

    memset(out, 0, sizeof(*out));
    if (c->md5 && EVP_DigestFinal_ex(c->md5, d, &dl) && dl == 16) {
        hex_encode(d, 16, out->md5_hex);
        base64_encode(d, 16, out->md5_b64, sizeof(out->md5_b64));
    }
    if (c->sha256 && EVP_DigestFinal_ex(c->sha256, sha, &dl) && dl == 32) {
        hex_encode(sha, 32, out->sha256_hex);
        have_sha = 1;
    }
    switch (c->algo) {
    case CKSUM_CRC32:
    case CKSUM_CRC32C:
        d[0] = (uint8_t)(c->crc >> 24);
        d[1] = (uint8_t)(c->crc >> 16);
        d[2] = (uint8_t)(c->crc >> 8);
        d[3] = (uint8_t)c->crc;
        base64_encode(d, 4, out->algo_b64, sizeof(out->algo_b64));
        break;
    case CKSUM_SHA1:
        if (EVP_DigestFinal_ex(c->algo_md, d, &dl) && dl == 20)
            base64_encode(d, 20, out->algo_b64, sizeof(out->algo_b64));
        break;
    case CKSUM_SHA256:
        if (have_sha)
            base64_encode(sha, 32, out->algo_b64, sizeof(out->algo_b64));
        else if (EVP_DigestFinal_ex(c->algo_md, d, &dl) && dl == 32)
            base64_encode(d, 32, out->algo_b64, sizeof(out->algo_b64));
        break;
    case CKSUM_NONE:
        break;
    }
}

void cksum_free(struct cksum *c)
{
    if (!c)
        return;
    EVP_MD_CTX_free(c->md5);
    EVP_MD_CTX_free(c->sha256);
    EVP_MD_CTX_free(c->algo_md);
    free(c);
}

/* ---- algorithm names ---------------------------------------------------------------------- */

static const struct {
    enum cksum_algo algo;
    const char *name, *header;
    size_t len;
} algos[] = {
    {CKSUM_CRC32, "CRC32", "x-amz-checksum-crc32", 4},
    {CKSUM_CRC32C, "CRC32C", "x-amz-checksum-crc32c", 4},
    {CKSUM_SHA1, "SHA1", "x-amz-checksum-sha1", 20},
    {CKSUM_SHA256, "SHA256", "x-amz-checksum-sha256", 32},
};

enum cksum_algo cksum_algo_parse(const char *name)
{
    if (!name)
        return CKSUM_NONE;
    while (*name == ' ' || *name == '\t')
        name++;
    size_t n = strlen(name);
    while (n && (name[n - 1] == ' ' || name[n - 1] == '\t'))
        n--;
    if (n > 15 && !strncasecmp(name, "x-amz-checksum-", 15)) {
        name += 15;
        n -= 15;
    }
    for (size_t i = 0; i < sizeof(algos) / sizeof(algos[0]); i++)
        if (strlen(algos[i].name) == n && !strncasecmp(name, algos[i].name, n))
            return algos[i].algo;
    return CKSUM_NONE;
}

const char *cksum_algo_name(enum cksum_algo a)
{
    for (size_t i = 0; i < sizeof(algos) / sizeof(algos[0]); i++)
        if (algos[i].algo == a)
            return algos[i].name;
    return "";
}

const char *cksum_algo_header(enum cksum_algo a)
{
    for (size_t i = 0; i < sizeof(algos) / sizeof(algos[0]); i++)
        if (algos[i].algo == a)
            return algos[i].header;
    return "";
}

size_t cksum_algo_len(enum cksum_algo a)
{
    for (size_t i = 0; i < sizeof(algos) / sizeof(algos[0]); i++)
        if (algos[i].algo == a)
            return algos[i].len;
    return 0;
}

/* ---- base64 and hex ----------------------------------------------------------------------- */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int base64_encode(const void *in, size_t n, char *out, size_t cap)
{
    const uint8_t *p = in;
    size_t need = (n + 2) / 3 * 4 + 1;
    if (n > (SIZE_MAX - 3) / 4 * 3 || cap < need) {
        if (cap)
            out[0] = '\0';
        return -ENOSPC;
    }
    char *o = out;
    for (; n >= 3; n -= 3, p += 3) {
        uint32_t v = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
        *o++ = b64_alphabet[v >> 18];
        *o++ = b64_alphabet[(v >> 12) & 63];
        *o++ = b64_alphabet[(v >> 6) & 63];
        *o++ = b64_alphabet[v & 63];
    }
    if (n) {
        uint32_t v = (uint32_t)p[0] << 16 | (n == 2 ? (uint32_t)p[1] << 8 : 0);
        *o++ = b64_alphabet[v >> 18];
        *o++ = b64_alphabet[(v >> 12) & 63];
        *o++ = n == 2 ? b64_alphabet[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    *o = '\0';
    return 0;
}

static int b64_value(char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

/* Strict: length a multiple of 4, only the alphabet, '=' only as the last one or two
 * characters, and the unused bits before the padding zero (canonical encoding). */
int base64_decode(const char *in, void *out, size_t cap)
{
    size_t n = strlen(in);
    uint8_t *o = out;
    size_t len = 0;
    if (n % 4 || n / 4 * 3 > (size_t)INT32_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        int last = i + 4 == n;
        for (int k = 0; k < 4; k++) {
            char ch = in[i + k];
            if (ch == '=' && last && k >= 2) {
                v[k] = 0;
                pad++;
            } else if (pad || (v[k] = b64_value(ch)) < 0) {
                return -EINVAL; /* data after '=', or a character outside the alphabet */
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
                     (uint32_t)v[3];
        if ((pad == 1 && (w & 0xff)) || (pad == 2 && (w & 0xffff)))
            return -EINVAL; /* non-zero bits under the padding */
        size_t nout = 3 - (size_t)pad;
        if (len + nout > cap)
            return -EINVAL;
        o[len++] = (uint8_t)(w >> 16);
        if (nout > 1)
            o[len++] = (uint8_t)(w >> 8);
        if (nout > 2)
            o[len++] = (uint8_t)w;
    }
    return (int)len;
}
