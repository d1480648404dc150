/*
 * ring.h: the consistent-hash ring of nginx's `hash KEY consistent`, computed as nginx
 * computes it, so a gateway knows which of N gateways the balancer sends a key to.
 * It owns the points and the server names; it does not know who "self" is, resolve
 * names or change after ring_new() (peers.h does membership). A ring is immutable:
 * any number of threads may look up in it at once.
 *
 * nginx (src/http/modules/ngx_http_upstream_hash_module.c): each server gets
 * weight x 160 points; point j is crc32(HOST "\0" PORT, then the previous point as 4
 * little-endian bytes, 0 for the first), where the server's text, as written in the
 * `server` line, is split at its last ':' if only digits (or nothing) follow ("unix:"
 * names have no port). Points are sorted and equal ones dropped (the earliest server
 * keeps it). A key goes to the first point >= crc32(key), wrapping past the last to the
 * first; a `down` server keeps its points but its keys go on to the next point.
 */
#ifndef S3C_RING_H
#define S3C_RING_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define RING_POINTS_PER_WEIGHT 160 /* nginx: points per unit of weight */
#define RING_WEIGHT_MAX 1000       /* ours; nginx has no cap (1000 = 160k points a server) */
#define RING_SERVERS_MAX 4096
#define RING_POINTS_MAX (1u << 22) /* 160 x total weight: 48 MiB of points at most */
#define RING_NAME_MAX 256          /* bytes of a server name, NUL included */
#define RING_NGINX_TRIES 21        /* points nginx tries before falling back to round robin */

struct ring_server {
    const char *name; /* exactly as in the balancer's `server` line: "10.0.0.5:9000" */
    unsigned weight;  /* nginx weight=, 1..RING_WEIGHT_MAX */
    int down;         /* nginx `down`: keeps its points; its keys go to the next point */
};

struct ring;

/* Builds the ring of @n servers (copied: the caller keeps @servers). Returns 0, -EINVAL
 * (no server, a weight out of range, an empty or too long name, too many servers, more
 * than RING_POINTS_MAX points),
 * -EEXIST (two servers with one name: nginx would round-robin between them) or -ENOMEM. */
int ring_new(const struct ring_server *servers, size_t n, struct ring **out);
void ring_free(struct ring *r);

size_t ring_count(const struct ring *r);                /* servers */
const char *ring_name(const struct ring *r, size_t i);  /* borrowed, lives as long as @r */
unsigned ring_weight(const struct ring *r, size_t i);
int ring_down(const struct ring *r, size_t i);
size_t ring_points(const struct ring *r);               /* distinct points after dedup */
/* Point @i (0 <= i < ring_points()) in ascending order: its hash and server index. */
void ring_point(const struct ring *r, size_t i, uint32_t *hash, size_t *server);

/* nginx's ngx_crc32_long: CRC-32 (IEEE 802.3, as zlib's crc32()). */
uint32_t ring_hash(const void *key, size_t len);

/* The server nginx sends @key to while every server not marked down is up (nginx's
 * passive failure state, max_fails, is not known here). Returns its index, or
 *   -ENOENT: every server is down (nginx answers 502);
 *   -EAGAIN: nginx would choose by weighted round robin, not by the key: the key is
 *            empty (and there is more than one server), or the key's point and the 20
 *            after it all belong to down servers. */
int ring_owner(const struct ring *r, const void *key, size_t len);
/* The same for a key already hashed with ring_hash() (never -EAGAIN for an empty key). */
int ring_owner_hash(const struct ring *r, uint32_t hash);

/* nginx's $uri of a request-target as a client (or nginx's proxy_pass, which forwards
 * it unchanged) sends it: the path before the first '?' or '#', %XX decoded (a decoded
 * '%', '?' or '#' stays a plain character; every other decoded byte counts as if sent
 * raw, %2F is a '/'), "//" merged (merge_slashes on, nginx's default), "/./" removed and
 * "/x/../" resolved. Writes the result to @out (not NUL-terminated; @cap >= @len is
 * always enough) and returns its length, or -EINVAL where nginx answers 400 Bad Request
 * (not starting with '/', a control byte, space or DEL anywhere, a bad or truncated %XX
 * or %00 in the path, ".." above the root), or -ENOSPC. */
ssize_t ring_nginx_uri(const char *target, size_t len, char *out, size_t cap);

#endif
