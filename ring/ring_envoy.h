/*
 * ring_envoy.h: Envoy's RING_HASH ring with its default hash_function XX_HASH, computed as
 * Envoy computes it (source/extensions/load_balancing_policies/ring_hash/ring_hash_lb.cc),
 * for deploy/scale-out/envoy.yaml. Immutable once built; lookups from any thread.
 *
 * Envoy: weights are normalised to sum 1; scale = min(ceil(min_w x minimum_ring_size) /
 * min_w, maximum_ring_size); walking the hosts in order, running sums give host i about
 * scale x w_i entries; entry k of a host is xxHash64("ADDR:PORT_k", seed 0), ADDR:PORT
 * as Envoy prints the endpoint ("10.0.0.5:9000", "[fd00::5]:9000"). Entries are sorted;
 * a request goes to the first entry >= its hash, past the last to the first. The request
 * hash of envoy.yaml's hash_policy is xxHash64(:path with everything from the first '?'
 * removed), the path as the client sent it (normalize_path and merge_slashes are off).
 * Envoy builds the ring from healthy hosts only (while at least the panic threshold,
 * 50 % by default, are healthy): ring_envoy_new() leaves `down` servers out likewise.
 */
#ifndef S3C_RING_ENVOY_H
#define S3C_RING_ENVOY_H

#include <stddef.h>
#include <stdint.h>

#include "ring.h"

#define RING_ENVOY_MIN_SIZE_DEFAULT 1024         /* Envoy's minimum_ring_size default */
#define RING_ENVOY_MAX_SIZE_DEFAULT (8ull << 20) /* Envoy's maximum_ring_size default and cap */

struct ring_envoy;

/* xxHash64 (XXH64) of [@p, @p+@len) with @seed. */
uint64_t ring_xxh64(const void *p, size_t len, uint64_t seed);

/* Builds the ring of the servers not marked down (@servers copied). @min_size and
 * @max_size are Envoy's minimum_ring_size / maximum_ring_size (0 = defaults). Returns 0,
 * -EINVAL (no server up, min > max, max above 8M, a bad name or weight, as ring_new()),
 * -EEXIST (a name twice) or -ENOMEM. */
int ring_envoy_new(const struct ring_server *servers, size_t n, uint64_t min_size,
                   uint64_t max_size, struct ring_envoy **out);
void ring_envoy_free(struct ring_envoy *r);

size_t ring_envoy_count(const struct ring_envoy *r);               /* servers, down included */
const char *ring_envoy_name(const struct ring_envoy *r, size_t i); /* borrowed */
size_t ring_envoy_points(const struct ring_envoy *r);
/* Entry @i in ascending order: its hash and server index (into the list given). */
void ring_envoy_point(const struct ring_envoy *r, size_t i, uint64_t *hash, size_t *server);
/* Entries of server @i (Envoy's min/max_hashes_per_host are the extremes of these). */
size_t ring_envoy_server_points(const struct ring_envoy *r, size_t i);

/* The server index Envoy picks for request hash @hash. */
int ring_envoy_owner_hash(const struct ring_envoy *r, uint64_t hash);
/* The server index for a request-target under envoy.yaml's hash_policy: xxHash64 of
 * @target up to its first '?'. */
int ring_envoy_owner_path(const struct ring_envoy *r, const char *target, size_t len);

#endif
