/*
 * journal_priv.h: what journal.c offers cache.c: the write-back engine's hooks.
 */
#ifndef S3C_CACHE_JOURNAL_PRIV_H
#define S3C_CACHE_JOURNAL_PRIV_H

#include "cache_priv.h"

/* journal.c: the write-back engine's hooks (cache_journal_attach()); nothing when none is
 * attached. No lock held. */
void journal_note(struct cache *c, const char *bucket, const char *key, uint64_t version,
                  uint64_t size);
void journal_forget(struct cache *c, const char *bucket, const char *key);
void journal_stats(struct cache *c, struct cache_stats *out);
int journal_attached(struct cache *c);

#endif
