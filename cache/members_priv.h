/*
 * members_priv.h: what members.c offers cache.c (which sets c->up.ver_whole_locked to it).
 */
#ifndef S3C_CACHE_MEMBERS_PRIV_H
#define S3C_CACHE_MEMBERS_PRIV_H

#include "cache_priv.h"

/* members.c: @v just became whole (every block present and indexed): a tar (a key ending in
 * ".tar") gets its member index built in the background: from its warm pages, or, when its
 * last run was a warm-up's (@direct: written around the page cache), with O_DIRECT reads
 * that leave the page cache as the warm-up did. mu held. */
void members_note_whole_locked(struct cache *c, struct cver *v, int direct);
/* Member indexes held in memory by versions, at most (beyond it, hits read the LMDB copy). */
#define CACHE_MEMBERS_MEM_MAX (256ull << 20)

#endif
