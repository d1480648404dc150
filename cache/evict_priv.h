/*
 * evict_priv.h: what evict.c (capacity, reservations, LRU touches) offers the files above it.
 */
#ifndef S3C_CACHE_EVICT_PRIV_H
#define S3C_CACHE_EVICT_PRIV_H

#include "cache_priv.h"

/* Reserves @bytes of capacity, evicting LRU entries if needed: for a keep prefix's fetch
 * (@for_keep) only entries that are not a keep prefix's in use and were last read before
 * @since (its pass's start, policy_keeps()); otherwise those first (waiting up to 500 ms for
 * LRU objects other than @self, the reserving object's entry or NULL, that are open or being
 * filled), then keep entries for the bytes still needed. Blocks (worker only). 0 or -ENOSPC
 * when nothing more can be evicted (the caller bypasses). */
int evict_reserve(struct cache *c, uint64_t bytes, int for_keep, int64_t since,
                  const struct index_key *self);
void evict_unreserve_locked(struct cache *c, uint64_t bytes);
void evict_touch_locked(struct cache *c, struct cver *v, int64_t validated_ns);
void evict_flush_touches(struct cache *c);
void evict_kick_locked(struct cache *c); /* queue background unlinks/touch flush if due */

#endif
