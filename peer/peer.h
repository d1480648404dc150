/*
 * peer.h: this gateway as one of N gateways acting as one cache (--peers, --self). Owns the
 * membership (ring/peers.h: the balancer's ring) and the HTTP client to the peers
 * (peer_http.h), and answers the questions the layers above ask:
 *   - which gateway owns a request's key (the one the balancer sends it to);
 *   - who must hear of a write or delete (every other gateway forgets its copy, before the
 *     client is answered: one notice per request to every gateway at once, bounded by
 *     --peer-timeout; one that missed a notice is owed a resync, peer_resync.h), and of an
 *     admin invalidation or flush (they fan out);
 *   - which gateways there are (cluster warm-ups and stats ask each of them).
 * Without --peers there is no struct peer: callers hold NULL and stay a single gateway.
 *   peer_open -> [lookups, fan-outs from any thread] -> peer_close
 */
#ifndef S3C_PEER_H
#define S3C_PEER_H

#include <stdint.h>

#include "ring/peers.h"
#include "ring/ring.h"
#include "lib/conf.h"
#include "objects/objects.h"
#include "peer_http.h"

struct peer;

/* Starts cluster mode when cf->peers is set (else 0 and *@out NULL): the membership (a static
 * list or dns:NAME:PORT), --self (required, one of the entries for a static list), the peer
 * secret (--peer-secret, else --admin-token: one is required), the transfer thread and the
 * resync thread. With --tls-cert the peers are called over HTTPS and their certificates
 * verified (--peer-ca, else the system's store); this gateway's own must verify so for the
 * host of --self, or it refuses to start. @cf is borrowed and outlives it. 0, or -EINVAL /
 * -errno with @em saying why. */
int peer_open(const struct conf *cf, struct peer **out, struct errmsg *em);
/* Stops the transfer thread (failing what is in flight) and the membership. Accepts NULL. */
void peer_close(struct peer *p);

const char *peer_self(const struct peer *p);
struct peer_http *peer_client(struct peer *p);        /* calls (notices, resyncs, ...) */
struct peer_http *peer_stream_client(struct peer *p); /* proxied reads, apart from calls */
int64_t peer_timeout_ms(const struct peer *p); /* --peer-timeout */

/* The owner of the request-target @raw_path (the path as sent, before any '?', which is what
 * nginx's `hash $uri consistent` hashes) into @owner. Returns 1 when another gateway owns it,
 * 0 when this one does or when no owner can be named (no ring yet, a target nginx would
 * refuse, every server down): the request is then served here. */
int peer_route(struct peer *p, const char *raw_path, char owner[RING_NAME_MAX]);
/* The same for the key a client would ask for as /@bucket/@key (path-style). */
int peer_route_key(struct peer *p, const char *bucket, const char *key, char owner[RING_NAME_MAX]);
/* The index of the owner of /@bucket/@key in @snap's ring, or -1 (served locally). */
int peer_owner_index(const struct peers_snap *snap, const char *bucket, const char *key);

/* The members of the current ring: *@names (NULL-terminated, free with peer_names_free),
 * *@n of them, *@self the index of this gateway or -1. 0 or -ENOMEM (no ring yet: 0 and
 * *@n 0). */
int peer_names(struct peer *p, char ***names, size_t *n, int *self);
void peer_names_free(char **names);
/* A counted snapshot of the ring for many lookups that must agree; release with
 * peers_snap_put(). */
struct peers_snap *peer_snap_get(struct peer *p);

/* 1 when the gateway @name missed a write notice and has not confirmed a resync since (down,
 * hung or unreachable not long ago): writes do not wait for it, and reads of its keys are
 * served here rather than wait for its answer. */
int peer_behind(struct peer *p, const char *name);

/* The write path's hooks (objects.h) of this cluster. */
void peer_objects_ops(struct peer *p, struct objects_peer_ops *ops);

/* Fan-out of an admin invalidation: every other gateway forgets (@bucket, @key), or every key
 * of @bucket under @prefix when @key is NULL. Blocking (workers), bounded by --peer-timeout.
 * Returns the number of gateways that could not be told; *@sent those asked. */
unsigned peer_invalidate_all(struct peer *p, const char *bucket, const char *key,
                             const char *prefix, unsigned *sent);

/* An asynchronous request to every other gateway (cluster flush): one call per member of the
 * ring but this one, @tmpl with its host replaced. @done(@cls) runs once, on the transfer
 * thread, when the last call ended. Returns the number of calls started; 0 (no other member:
 * @done is not called) or -errno (nothing started). *@out (when > 0): free with
 * peer_fanout_free() after @done. */
struct peer_fanout;
typedef void peer_fanout_done_f(void *cls);
int peer_fanout_start(struct peer *p, const struct peer_req *tmpl, peer_fanout_done_f *done,
                      void *cls, struct peer_fanout **out);
size_t peer_fanout_count(const struct peer_fanout *f);
/* Call @i's gateway, transport error (0 or -errno), HTTP status and body. */
const char *peer_fanout_node(const struct peer_fanout *f, size_t i);
int peer_fanout_rc(const struct peer_fanout *f, size_t i);
long peer_fanout_status(const struct peer_fanout *f, size_t i);
const struct buf *peer_fanout_body(const struct peer_fanout *f, size_t i);
void peer_fanout_free(struct peer_fanout *f);

struct peer_counters {
    uint64_t proxied;             /* GET/HEAD answered by their owner through this gateway */
    uint64_t proxy_fallbacks;     /* ... served here because the owner could not be reached,
                                   * or the proxied reads' limits were reached */
    uint64_t proxy_limited;       /* of those, served here because of the limits */
    uint64_t proxy_streams;       /* proxied reads open now */
    uint64_t invalidations_sent;  /* notices of writes and invalidations to other gateways */
    uint64_t invalidations_failed; /* ... not confirmed (not sent to a gateway owed a resync) */
    uint64_t peers_behind;        /* gateways that missed a notice, owed a resync now */
    uint64_t resyncs;             /* resyncs they confirmed */
    uint64_t generation;          /* of the ring */
    uint64_t members;
    int self_index;
};
void peer_get_counters(struct peer *p, struct peer_counters *out);
void peer_count_proxy(struct peer *p, int fallback);

#endif
