/*
 * peer_tls.c: this gateway's certificate verified as its peers will verify it (peer_tls.h):
 * OpenSSL's X509_verify_cert() with the purpose of a TLS server and the host of --self, the
 * checks libcurl's OpenSSL backend makes on the other side (CURLOPT_SSL_VERIFYPEER,
 * CURLOPT_SSL_VERIFYHOST). Runs once, at start.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>

#include "peer_tls.h"

/* The host of "HOST:PORT" / "[V6]:PORT" into @host. 0 or -EINVAL. */
static int peer_tls_host(const char *self, char *host, size_t cap)
{
    const char *end;
    if (self[0] == '[') {
        self++;
        end = strchr(self, ']');
    } else {
        end = strrchr(self, ':');
    }
    if (!end || end == self || (size_t)(end - self) >= cap)
        return -EINVAL;
    memcpy(host, self, (size_t)(end - self));
    host[end - self] = '\0';
    return 0;
}

int peer_tls_check(const char *cert_file, const char *ca_file, const char *self, struct errmsg *em)
{
    char host[256];
    unsigned char ip[16];
    int rc = -EINVAL;
    X509 *leaf = NULL, *x;
    STACK_OF(X509) *chain = sk_X509_new_null();
    X509_STORE *st = X509_STORE_new();
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    BIO *bio = NULL;
    if (!chain || !st || !ctx) {
        rc = -ENOMEM;
        goto out;
    }
    if (peer_tls_host(self, host, sizeof(host))) {
        errmsg_set(em, "--self \"%s\": want HOST:PORT", self);
        goto out;
    }
    if (!(bio = BIO_new_file(cert_file, "r")) ||
        !(leaf = PEM_read_bio_X509(bio, NULL, NULL, NULL))) {
        errmsg_set(em, "--tls-cert %s: no PEM certificate to read", cert_file);
        goto out;
    }
    while ((x = PEM_read_bio_X509(bio, NULL, NULL, NULL)))
        if (!sk_X509_push(chain, x)) {
            X509_free(x);
            rc = -ENOMEM;
            goto out;
        }
    ERR_clear_error(); /* the end of the file reads as an error */
    if (ca_file && *ca_file ? X509_STORE_load_file(st, ca_file) != 1
                            : X509_STORE_set_default_paths(st) != 1) {
        errmsg_set(em, "--peer-ca %s: no PEM CA certificate to read",
                   ca_file && *ca_file ? ca_file : "(the system's store)");
        goto out;
    }
    if (X509_STORE_CTX_init(ctx, st, leaf, chain) != 1) {
        rc = -ENOMEM;
        goto out;
    }
    X509_VERIFY_PARAM *vp = X509_STORE_CTX_get0_param(ctx);
    X509_VERIFY_PARAM_set_purpose(vp, X509_PURPOSE_SSL_SERVER);
    int is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
    if ((is_ip ? X509_VERIFY_PARAM_set1_ip_asc(vp, host)
               : X509_VERIFY_PARAM_set1_host(vp, host, 0)) != 1) {
        errmsg_set(em, "--self \"%s\": \"%s\" is no host name a certificate can name", self, host);
        goto out;
    }
    if (X509_verify_cert(ctx) != 1) {
        errmsg_set(em,
                   "--tls-cert %s does not verify for %s (the host of --self) against %s: %s; "
                   "the other gateways call this one as https://%s and would refuse it, so it "
                   "could not be told of writes (give a certificate for %s%s signed by that CA)",
                   cert_file, host, ca_file && *ca_file ? ca_file : "the system's CA store",
                   X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx)), self, host,
                   is_ip ? " as an IP SAN" : "");
        goto out;
    }
    rc = 0;
out:
    BIO_free(bio);
    X509_free(leaf);
    sk_X509_pop_free(chain, X509_free);
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(st);
    ERR_clear_error();
    return rc;
}
