/*
 * peers.h: who the gateways acting as one cache are, and which of them owns a key.
 * --peers is either a static list, exactly the `server` lines of the balancer's upstream
 * block (their text is what nginx hashes), or "dns:NAME:PORT": every A/AAAA address of
 * NAME (a Kubernetes headless Service), sorted so that every gateway builds the same
 * list whatever order DNS answers in, re-resolved every refresh period by a background
 * thread. --self names this gateway's entry. Owns the current ring (ring.h) and swaps a
 * new one in atomically: lookups never wait for a resolution or a ring build, only for
 * the copy of a pointer.
 *   peers_new -> [peers_owner / peers_snap_get ... | refresher: resolve, swap]* -> peers_free
 */
#ifndef S3C_PEERS_H
#define S3C_PEERS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "ring.h"

#define PEERS_REFRESH_MS_DEFAULT 10000
#define PEERS_ADDRS_MAX 1024 /* addresses taken from one resolution */

struct peers;
struct peers_snap;

/* Resolves @host into at most @max addresses (any order, duplicates allowed), setting *@n.
 * Returns 0 or -errno (-ENOENT: no such name, -EAGAIN: try later). The default is
 * getaddrinfo(AF_UNSPEC, SOCK_STREAM); tests give their own. */
typedef int peers_resolve_f(void *cls, const char *host, struct sockaddr_storage *addrs,
                            size_t max, size_t *n);

struct peers_opts {
    unsigned refresh_ms;       /* dns: re-resolution period; 0 = PEERS_REFRESH_MS_DEFAULT */
    peers_resolve_f *resolve;  /* NULL = getaddrinfo */
    void *resolve_cls;
};

/* Parses a static --peers list: comma-separated `NAME[ PARAM...]` entries, NAME as in an
 * nginx `server` line ("10.0.0.5:9000", "gw-0.s3cached:9000", "unix:/run/gw.sock") and
 * PARAM one of weight=N (1..RING_WEIGHT_MAX), down, or max_fails=, fail_timeout=,
 * max_conns= (accepted and ignored: they change nothing in the ring). `backup` is refused:
 * nginx refuses it after `hash`, and gives a backup server no points anyway. On success *@out is an array of *@n servers (free with
 * peers_servers_free()); on -EINVAL @err says which entry and why. */
int peers_parse(const char *spec, struct ring_server **out, size_t *n, char *err, size_t errlen);
void peers_servers_free(struct ring_server *servers, size_t n);

/* Formats @sa as nginx writes an address, "10.0.0.5:9000" or "[fd00::5]:9000", into @buf.
 * Returns 0 or -EINVAL (not IPv4/IPv6, or @len too small). */
int peers_addr_name(const struct sockaddr *sa, char *buf, size_t len);

/* Starts the membership of @spec (static or "dns:NAME:PORT") with this gateway's entry
 * @self (NULL or "": no entry is self). A static @self must be one of the entries; a dns:
 * @self is "ADDR:PORT" (reformatted as peers_addr_name() does) and counts once DNS lists
 * it (a headless Service lists only ready pods). A dns: list whose first resolution fails
 * starts anyway, empty (peers_owner() says -ENOENT) and keeps resolving. @opts may be
 * NULL. Returns 0, -EINVAL (@err says why), -ENOMEM, or a thread-creation error. */
int peers_new(const char *spec, const char *self, const struct peers_opts *opts,
              struct peers **out, char *err, size_t errlen);
/* Stops the refresher (waking it) and frees everything. Snapshots still held stay valid
 * until their peers_snap_put(). Accepts NULL. */
void peers_free(struct peers *p);

struct peers_owner {
    int index;           /* of the owner in the snapshot the lookup used */
    int is_self;         /* the owner is --self */
    uint64_t generation; /* of that snapshot: 1 for the first ring, +1 per swap */
    char name[RING_NAME_MAX];
};

/* The owner of @key (the bytes the balancer hashes). Thread-safe, never waits for a
 * resolution. Returns 0, or ring_owner()'s -ENOENT / -EAGAIN (-ENOENT also while a dns:
 * list has no address yet). */
int peers_owner(struct peers *p, const void *key, size_t len, struct peers_owner *out);
/* The owner of a request-target under nginx's `hash $uri consistent`: the key is
 * ring_nginx_uri(@target). Returns 0, -EINVAL (nginx answers such a target 400),
 * -ENOMEM, or peers_owner()'s errors. */
int peers_owner_uri(struct peers *p, const char *target, size_t len, struct peers_owner *out);

/* A counted reference to the current generation: its ring stays valid (and unchanged)
 * until peers_snap_put(), whatever swaps happen meanwhile. */
struct peers_snap *peers_snap_get(struct peers *p);
void peers_snap_put(struct peers_snap *s); /* accepts NULL */
const struct ring *peers_snap_ring(const struct peers_snap *s); /* NULL: no address yet */
int peers_snap_self(const struct peers_snap *s);                 /* index of self, or -1 */
uint64_t peers_snap_generation(const struct peers_snap *s);      /* 0: no ring yet */

/* Resolves a dns: list now (the refresher does it every period). Returns 1 when a new
 * ring was swapped in, 0 when the list is unchanged (or static), or the resolver's error
 * (the previous ring stays). */
int peers_refresh(struct peers *p);

struct peers_stats {
    uint64_t generation;  /* of the current ring, 0 before the first */
    uint64_t resolutions; /* dns: attempts, successful or not */
    uint64_t failures;
    int last_error;       /* 0 or the last failed resolution's -errno */
    size_t count;         /* servers in the current ring */
    int self;             /* index of self in it, or -1 */
};
void peers_stats(struct peers *p, struct peers_stats *out);

#endif
