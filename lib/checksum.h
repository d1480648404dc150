/*
 * checksum.h: the digests an upload is checked against, updated together in
 * one pass: MD5 (ETag, Content-MD5), SHA-256 (x-amz-content-sha256) through
 * OpenSSL EVP, and the x-amz-checksum-* family (CRC32 via zlib, CRC32C,
 * SHA1, SHA256). Pure.
 */
#ifndef S3C_CHECKSUM_H
#define S3C_CHECKSUM_H

#include <stdint.h>
#include <stddef.h>

enum cksum_algo { CKSUM_NONE = 0, CKSUM_CRC32, CKSUM_CRC32C, CKSUM_SHA1, CKSUM_SHA256 };

#define CKSUM_WANT_MD5 1u
#define CKSUM_WANT_SHA256 2u /* the payload hash, hex */

struct cksum; /* opaque; holds EVP contexts */

/* @want: CKSUM_WANT_* bits; @algo: the x-amz-checksum algorithm to compute too (or NONE). */
int cksum_new(unsigned want, enum cksum_algo algo, struct cksum **out);
void cksum_update(struct cksum *c, const void *p, size_t n);
/* Finishes; out strings NUL-terminated; unused ones left "". */
struct cksum_result {
    char md5_hex[33];
    char md5_b64[25];
    char sha256_hex[65];
    char algo_b64[64]; /* base64 of the x-amz-checksum value */
};
void cksum_final(struct cksum *c, struct cksum_result *out);
void cksum_free(struct cksum *c);

/* "CRC32" / "crc32" / "x-amz-checksum-crc32" -> algo; CKSUM_NONE if unknown. */
enum cksum_algo cksum_algo_parse(const char *name);
const char *cksum_algo_name(enum cksum_algo a);        /* "CRC32" ... */
const char *cksum_algo_header(enum cksum_algo a);      /* "x-amz-checksum-crc32" ... */
/* Base64-decoded length of a valid value of @a (4, 4, 20, 32). */
size_t cksum_algo_len(enum cksum_algo a);

/* One-shot helpers. */
uint32_t cksum_crc32c(uint32_t crc, const void *p, size_t n);
int base64_encode(const void *in, size_t n, char *out, size_t cap); /* 0 or -ENOSPC */
/* Strict standard base64 (with padding); returns decoded length or -EINVAL. */
int base64_decode(const char *in, void *out, size_t cap);

#endif
