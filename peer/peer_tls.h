/*
 * peer_tls.h: the start-up check of a cluster that serves TLS (peer_tls.c, OpenSSL). The
 * gateways call each other over HTTPS and verify the certificate they get for the HOST of the
 * ring name they call; this gateway's own certificate, verified the same way (its chain
 * against --peer-ca or the system's store, for the host of --self), tells before anything is
 * served whether the others will accept it. A gateway they refuse could never be told of a
 * write, and would serve what it cached after every overwrite.
 */
#ifndef S3C_PEER_TLS_H
#define S3C_PEER_TLS_H

#include "lib/s3c.h"

/* Verifies the PEM certificate (and the chain after it) in @cert_file for the host of @self
 * ("HOST:PORT" or "[V6]:PORT"; an address must be an IP SAN) against @ca_file (NULL or "":
 * the system's store), as a TLS client verifies a server. 0, or -EINVAL (@em says why: an
 * unreadable file, no certificate, a chain or name that does not verify). */
int peer_tls_check(const char *cert_file, const char *ca_file, const char *self, struct errmsg *em);

#endif
