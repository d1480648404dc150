/*
 * cstats.h: the cluster's /_/stats (GET /_/stats?scope=cluster), merged from the documents of
 * every gateway (cstats.c, pure): counters summed (a client's bytes over every gateway it
 * reached), ages and uptimes their largest, and a row per gateway; a gateway that did not
 * answer is listed as down and left out of the sums.
 */
#ifndef S3C_CSTATS_H
#define S3C_CSTATS_H

#include <stddef.h>

#include "lib/buf.h"

struct cstats_node {
    const char *node;  /* its name on the ring */
    int self;
    const char *doc;   /* its /_/stats JSON, or NULL when it did not answer */
    size_t len;
    const char *error; /* why not, when doc is NULL */
};

/* Appends the cluster document of the @n gateways to @out:
 *   {"scope":"cluster","nodes_total":N,"nodes_up":U, <the per-gateway top-level figures summed:
 *    uptime_s (largest), cache, drain, fair, backend, requests, errors_*, requests_by_op>,
 *    "clients":[{"client","addr", <summed>, "nodes":[{"node", requests, bytes_out, bytes_in,
 *    hits, misses}]}], "buckets":[<summed by bucket>], "peers":[<summed by peer>],
 *    "nodes":[{"node","self","up", <its top-level figures> | "error"}]}
 * Clients and buckets are merged by (client, addr) and by name. 0, -EINVAL (a document that
 * is not a stats object: that gateway counts as down) is never returned; -ENOMEM. */
int cstats_merge(const struct cstats_node *nodes, size_t n, struct buf *out);

#endif
