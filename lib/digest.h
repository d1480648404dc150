/*
 * digest.h: SHA-256 and HMAC-SHA256 of short messages, as the request path needs them (the
 * canonical request, the string to sign, the signing key's derivation, object names). OpenSSL
 * EVP underneath (digest.c): the algorithms are fetched once per process and each thread
 * keeps its own contexts, so a call allocates nothing and takes no lock. OpenSSL 3's one-shot
 * HMAC() and EVP_Digest() with EVP_sha256() look the algorithm up and build a context on every
 * call, which cost a signed hit more than the hashing itself.
 */
#ifndef S3C_DIGEST_H
#define S3C_DIGEST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* SHA-256 of @msg[0..@len) into @out: 0, or -ENOMEM when OpenSSL could not set up (@out
 * zeroed). */
int digest_sha256(const void *msg, size_t len, uint8_t out[32]);
/* The same of the @n pieces of @iov, one after the other. */
int digest_sha256v(const struct iovec *iov, int n, uint8_t out[32]);
/* HMAC-SHA256 (RFC 2104) of @msg under @key[0..@klen) into @out: 0, or -ENOMEM as above. */
int digest_hmac_sha256(const void *key, size_t klen, const void *msg, size_t len, uint8_t out[32]);

#endif
