/*
 * digest.c: SHA-256 and HMAC-SHA256 with per-thread OpenSSL contexts (digest.h). The two
 * algorithms are fetched once (pthread_once) and kept for the life of the process; each
 * thread's contexts are made on its first call and freed when it exits (a pthread key).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "digest.h"

struct digest_ctxs {
    EVP_MD_CTX *md;
    EVP_MAC_CTX *mac; /* HMAC with its digest set to SHA-256; keyed per call */
};

static pthread_once_t digest_once = PTHREAD_ONCE_INIT;
static EVP_MD *sha256_md;
static EVP_MAC *hmac_mac;
static pthread_key_t digest_key;
static int digest_ready;

static void ctxs_free(void *p)
{
    struct digest_ctxs *t = p;
    EVP_MD_CTX_free(t->md);
    EVP_MAC_CTX_free(t->mac);
    free(t);
}

static void digest_init(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
    hmac_mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    digest_ready = sha256_md && hmac_mac && !pthread_key_create(&digest_key, ctxs_free);
}

/* This thread's contexts, made on its first call; NULL when OpenSSL or malloc failed (the
 * next call tries again). */
static struct digest_ctxs *ctxs_get(void)
{
    pthread_once(&digest_once, digest_init);
    if (!digest_ready)
        return NULL;
    struct digest_ctxs *t = pthread_getspecific(digest_key);
    if (t)
        return t;
    char name[] = OSSL_DIGEST_NAME_SHA2_256;
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, name, 0),
                           OSSL_PARAM_construct_end()};
    t = calloc(1, sizeof(*t));
    if (t && (t->md = EVP_MD_CTX_new()) && (t->mac = EVP_MAC_CTX_new(hmac_mac)) &&
        EVP_MAC_CTX_set_params(t->mac, params) && !pthread_setspecific(digest_key, t))
        return t;
    if (t)
        ctxs_free(t);
    return NULL;
}

int digest_sha256v(const struct iovec *iov, int n, uint8_t out[32])
{
    struct digest_ctxs *t = ctxs_get();
    unsigned got = 0;
    int ok = t && EVP_DigestInit_ex2(t->md, sha256_md, NULL);
    for (int i = 0; ok && i < n; i++)
        ok = EVP_DigestUpdate(t->md, iov[i].iov_base, iov[i].iov_len);
    if (ok && EVP_DigestFinal_ex(t->md, out, &got) && got == 32)
        return 0;
    memset(out, 0, 32);
    return -ENOMEM;
}

int digest_sha256(const void *msg, size_t len, uint8_t out[32])
{
    struct iovec v = {(void *)msg, len};
    return digest_sha256v(&v, 1, out);
}

int digest_hmac_sha256(const void *key, size_t klen, const void *msg, size_t len, uint8_t out[32])
{
    struct digest_ctxs *t = ctxs_get();
    size_t n = 0;
    if (t && EVP_MAC_init(t->mac, key ? key : (const void *)"", klen, NULL) &&
        EVP_MAC_update(t->mac, msg, len) && EVP_MAC_final(t->mac, out, &n, 32) && n == 32)
        return 0;
    memset(out, 0, 32);
    return -ENOMEM;
}
