/*
 * table_priv.h: what table.c offers the other files of cache/: keys and versions in memory,
 * their references and waiters, the cache's jobs, the end of a version (its index record, its
 * data file, its fetches) and the state of a run and of a read as the stages of a fill see it.
 */
#ifndef S3C_CACHE_TABLE_PRIV_H
#define S3C_CACHE_TABLE_PRIV_H

#include "cache_priv.h"

/* Takes @w off @list: 1 when it was on it. */
int cache_unlink_waiter(struct cache_waiter **list, struct cache_waiter *w);
/* @ck leaves the LRU of idle keys (it is referenced again, or freed). */
void cache_idle_remove_locked(struct cache *c, struct ckey *ck);
/* A new version of @ck (one reference, the caller's), @m its metadata, blocks of @bs bytes. */
struct cver *cache_ver_new(struct ckey *ck, uint64_t version, const struct be_meta *m, uint32_t bs);
void cache_key_free_locked(struct cache *c, struct ckey *ck);

/* Indexes @v if it is only in memory (unrecorded); when the index does not take it, @v becomes
 * unindexed (served uncached). @v held by the caller; no lock held. */
void cache_ver_record(struct cache *c, struct cver *v);
int cache_submit(struct cache *c, enum workq_prio prio, workq_fn_f *fn, void *arg); /* mu held */
/* cache_submit() onto another pool of the cache's (the fetch threads): a cache job too. */
int cache_submit_to(struct cache *c, struct workq *wq, enum workq_prio prio, workq_fn_f *fn,
                    void *arg);       /* mu held */
void cache_job_done(struct cache *c); /* mu held */
struct ckey *cache_key_find_locked(struct cache *c, const struct index_key *k);
struct ckey *cache_key_get_locked(struct cache *c, const char *bucket, const char *key,
                                  const struct index_key *k);
void cache_key_load_locked(struct cache *c, struct ckey *ck);
/* After a write of @ck's index record returned @rc: a delete that failed (@rc other than 0 and
 * -ESTALE) marks the record stale (ckey.index_stale), one that succeeded (or any successful
 * put) ends that. */
void cache_key_index_written_locked(struct cache *c, struct ckey *ck, int rc, int is_delete);
void cache_key_put_locked(struct cache *c, struct ckey *ck);
void cache_ver_put_locked(struct cache *c, struct cver *v);
void cache_ver_drop_locked(struct cache *c, struct ckey *ck); /* cur -> NULL, dropped */
void cache_wake_locked(struct cache_waiter **list);
void cache_arm_locked(struct cache_obj *h, struct cache_waiter **list, struct cache_waiter *w);
void cache_ver_path(struct cache *c, const struct cver *v, char out[STORE_PATH_MAX]);
int cache_ver_fd_locked(struct cache *c, struct cver *v, int create, int *fd);

/* The end of a version: */
/* Removes @version of @ck from the index (no lock held). */
void cache_index_drop(struct cache *c, struct ckey *ck, uint64_t version);
/* @v's data file is gone: stop serving it (the index entry is dropped in the background). */
void cache_ver_broken_locked(struct cache *c, struct cver *v);
/* Queues @path to be unlinked by cache_unlinks_run() (no unlink under the lock). */
void cache_unlink_queue_locked(struct cache *c, const char *path);
void cache_unlinks_run(struct cache *c); /* mu not held */
/* Takes @f off @v's list of fetches. */
void cache_fetch_remove_locked(struct cver *v, struct fetch *f);
/* Frees @f (its window, its bytes; its readers are attached to nothing). mu held. */
void cache_fetch_free(struct fetch *f);
/* Frees @f, or keeps it until its last reader copying from its window is done (mu held). */
void cache_fetch_retire_locked(struct fetch *f);
/* Whether a fetch of @v is running (a kept one, ended, does not count). */
int cache_ver_running_locked(const struct cver *v);

/* A run's and a read's state: */
/* be_sink.on_meta of a run (@cls the fetch): -ESTALE when @m is not the version's object. */
int cache_fetch_on_meta(void *cls, const struct be_meta *m);
/* Whether every byte of [@off, @end) is present or has landed in a fetch in flight. */
int cache_ver_landed_locked(const struct cver *v, uint64_t off, uint64_t end);
/* The block after the last one of @h's range. */
uint64_t cache_obj_end_block(struct cache_obj *h, struct cver *v);
/* The outcome of a read that joined a running fetch, or started one. */
void cache_outcome_waiting(struct cache_obj *h);
void cache_outcome_started(struct cache_obj *h);

#endif
