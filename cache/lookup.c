/*
 * lookup.c: the metadata of a key: a HEAD on a worker (for a cold GET from byte 0 over an S3
 * backend, --cold-get, a ranged GET of the first block whose answer's headers are the metadata
 * and whose body fills that block), coalesced per key, that makes a new
 * version (indexed, or left unrecorded for --miss-source, or unindexed when the index cannot
 * hold it), revalidation after --revalidate-after and stale-if-error; cache_obj_meta() binds a
 * request to the version it will read; broken versions are dropped in the background.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cache_priv.h"
#include "evict_priv.h"
#include "fill_priv.h"
#include "missource_priv.h"
#include "table_priv.h"
#include "lib/conf.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "lib/workq.h"

/* ---- lookups --------------------------------------------------------------------------- */

struct lookup_job {
    struct cache *c;
    struct ckey *ck;
    uint64_t gen, seq;
    /* CLOCK_REALTIME before the backend was asked: what its answer is stamped validated at, so
     * that a resync (cache_set_valid_after) arriving while the answer is on its way still
     * leaves the version suspect (the answer may predate the write the resync stands for) */
    int64_t started_ns;
    /* A lookup by GET (--cold-get): the ranged GET of the first block whose answer makes the
     * version (@got_meta) and then fills that block as the run @f (fill_adopt_locked()),
     * through a window or not (@windowed); @frc its start's error. */
    int by_get, got_meta, windowed, frc;
    int nowin; /* a plan's prefetch: that run fills the disk at its pace, without a window */
    struct fetch *f;
};

#define LOOKUP_GET_DONE (-ECANCELED) /* the GET's bytes have no run to go to: stop it */

static int meta_same(const struct be_meta *a, const struct be_meta *b)
{
    return a->size == b->size && strcmp(a->etag, b->etag) == 0 && a->mtime_ns == b->mtime_ns;
}

static int is_absent_err(int rc)
{
    return rc == -S3E_NO_SUCH_KEY || rc == -S3E_NO_SUCH_BUCKET || rc == -ENOENT;
}

static void lookup_finish_locked(struct cache *c, struct ckey *ck, uint64_t seq, int err, int stale,
                                 int same)
{
    if (ck->lookup_seq == seq)
        ck->lookup_running = 0;
    if (ck->lookup_done < seq) {
        ck->lookup_done = seq;
        ck->lookup_err = err;
        ck->lookup_stale = stale;
        ck->lookup_same = same;
    }
    cache_wake_locked(&ck->waiters);
}

/* Indexes a new version of @ck with metadata @m (no blocks yet), unless @ck changed since
 * generation @gen (an upload adopted meanwhile: -ESTALE, nothing written). Its record is
 * written in @ck's indexing turn, never beside an adopt()'s. 0 and *@out (one ref), or an
 * error. No lock held. */
static int version_create(struct cache *c, struct ckey *ck, const struct be_meta *m, uint32_t flags,
                          int64_t validated_ns, uint64_t gen, struct cver **out)
{
    struct index_entry e;
    memset(&e, 0, sizeof(e));
    e.version = store_new_version();
    e.size = m->size;
    e.block_size = (uint32_t)c->block_size;
    e.flags = flags;
    e.atime_ns = s3c_real_ns();
    e.validated_ns = validated_ns;
    e.nblocks = (m->size + c->block_size - 1) / c->block_size;
    e.meta = *m;
    if (e.nblocks) {
        e.bitmap = calloc(1, (e.nblocks + 7) / 8);
        if (!e.bitmap)
            return -ENOMEM;
    }
    pthread_mutex_lock(&c->mu);
    /* an adopt() of this key writes its record: wait for it, then ours is not wanted */
    while (ck->indexing)
        pthread_cond_wait(&c->index_cv, &c->mu);
    if (ck->gen != gen || ck->cur) {
        pthread_mutex_unlock(&c->mu);
        index_entry_clear(&e);
        return -ESTALE;
    }
    struct cver *v = cache_ver_new(ck, e.version, m, e.block_size);
    if (v) {
        v->validated_ns = e.validated_ns;
        v->flags = flags;
        v->first_fetch_owned = 1;
        ck->indexing = 1;
    }
    pthread_mutex_unlock(&c->mu);
    if (!v) {
        index_entry_clear(&e);
        return -ENOMEM;
    }
    int rc = 0;
    if (m->size == 0) { /* complete at once: the (empty) file must exist */
        char p[STORE_PATH_MAX];
        int fd = -1;
        cache_ver_path(c, v, p);
        rc = store_open(p, 1, &fd);
        if (!rc) {
            fsync(fd);
            v->fd = fd;
        }
    }
    char *name = NULL;
    if (!rc && asprintf(&name, "%s/%s", ck->bucket, ck->key) < 0)
        rc = -ENOMEM;
    uint64_t oldv = 0;
    int64_t delta = 0;
    if (!rc)
        rc = index_put(c->ix, &ck->k, name, &e, &oldv, &delta);
    free(name);
    index_entry_clear(&e);
    pthread_mutex_lock(&c->mu);
    ck->indexing = 0;
    pthread_cond_broadcast(&c->index_cv);
    if (rc) {
        v->dropped = 1;
        cache_ver_put_locked(c, v);
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    c->used = (uint64_t)((int64_t)c->used + delta);
    cache_key_index_written_locked(c, ck, 0, 0);
    if (oldv && oldv != e.version) {
        /* a version we no longer held in memory: its file goes too */
        char p[STORE_PATH_MAX];
        store_data_path(c->dir, ck->k.b, ck->k.len, oldv, p);
        cache_unlink_queue_locked(c, p);
    }
    pthread_mutex_unlock(&c->mu);
    *out = v;
    return 0;
}

/* A version of @ck with metadata @m that the index could not take: served from the backend
 * without caching (a bypass) to the requests that wait for it, never written to the disk or
 * indexed. 0 and *@out (one ref), or -ENOMEM. No lock held. */
static int version_unindexed(struct cache *c, struct ckey *ck, const struct be_meta *m,
                             int64_t validated_ns, struct cver **out)
{
    pthread_mutex_lock(&c->mu);
    struct cver *v = cache_ver_new(ck, store_new_version(), m, (uint32_t)c->block_size);
    if (v) {
        v->unindexed = 1;
        v->validated_ns = validated_ns;
        v->first_fetch_owned = 1;
    }
    pthread_mutex_unlock(&c->mu);
    *out = v;
    return v ? 0 : -ENOMEM;
}

/* A new version of @ck with metadata @m, in memory only (cache_ver_record() indexes it).
 * 0 and *@out (one ref), or -ENOMEM. No lock held. */
static int version_unrecorded(struct cache *c, struct ckey *ck, const struct be_meta *m,
                              int64_t validated_ns, struct cver **out)
{
    pthread_mutex_lock(&c->mu);
    struct cver *v = cache_ver_new(ck, store_new_version(), m, (uint32_t)c->block_size);
    if (v) {
        v->unrecorded = 1;
        v->validated_ns = validated_ns;
        v->first_fetch_owned = 1;
    }
    pthread_mutex_unlock(&c->mu);
    *out = v;
    return v ? 0 : -ENOMEM;
}

/* The lookup's answer: the backend's @rc and metadata @m (a HEAD's, or a GET's headers):
 * the key's version confirmed, replaced or made, or its error, and the requests waiting for it
 * woken. A lookup by GET that made a new version adopts the run of its first block first
 * (j->f), so that no request woken here starts another. No lock held. */
static void lookup_settle(struct lookup_job *j, int rc, const struct be_meta *m)
{
    struct cache *c = j->c;
    struct ckey *ck = j->ck;
    int err = 0, stale = 0, warn = 0, same = 0;
    uint64_t drop_version = 0;
    struct cver *nv = NULL;

    pthread_mutex_lock(&c->mu);
    c->st.revalidations += ck->cur ? 1 : 0;
    if (c->closing || ck->gen != j->gen || ck->lookup_seq != j->seq) {
        /* closing, invalidated, or overtaken by a lookup started later (after a resync): the
         * later answer is the one that counts */
        err = c->closing ? CACHE_ERR_CLOSING : 0; /* 0: waiters retry */
        goto finish;
    }
    struct cver *cur = ck->cur;
    if (rc) {
        if (cur && !is_absent_err(rc)) {
            stale = 1;
            warn = 1;
        } else {
            if (cur) {
                drop_version = cur->version;
                cache_ver_drop_locked(c, ck);
            }
            err = rc;
        }
        goto finish;
    }
    if (cur && meta_same(&cur->meta, m)) {
        if (j->started_ns > cur->validated_ns)
            cur->validated_ns = j->started_ns;
        evict_touch_locked(c, cur, cur->validated_ns);
        same = 1;
        goto finish;
    }
    uint32_t flags = 0;
    if (cur) {
        flags = cur->flags;
        drop_version = cur->version;
        cache_ver_drop_locked(c, ck);
    }
    uint64_t gen = ck->gen;
    pthread_mutex_unlock(&c->mu);
    if (drop_version) {
        cache_index_drop(c, ck, drop_version);
        drop_version = 0;
    }
    if (!cur && !flags && missource_defer_record(c, m->size)) {
        /* its first GET is sent from the backend's file: the record is written when the
         * fill needs it (cache_ver_record), not before that GET's first byte */
        rc = version_unrecorded(c, ck, m, j->started_ns, &nv);
    } else {
        rc = version_create(c, ck, m, flags, j->started_ns, gen, &nv);
    }
    if (rc == -ESTALE) { /* replaced meanwhile (an upload adopted): waiters look again */
        pthread_mutex_lock(&c->mu);
        err = c->closing ? CACHE_ERR_CLOSING : 0;
        goto finish;
    }
    if (rc && rc != -ENOMEM) {
        /* the object is there, the index cannot hold it (LMDB map full, an index or disk
         * error): read it from the backend, uncached, rather than fail the read */
        log_warn("cache: indexing \"%s/%s\": %s: served uncached", ck->bucket, ck->key,
                 s3c_strerror(rc));
        rc = version_unindexed(c, ck, m, j->started_ns, &nv);
    }
    pthread_mutex_lock(&c->mu);
    if (rc) {
        log_err("cache: indexing \"%s/%s\": %s", ck->bucket, ck->key, s3c_strerror(rc));
        err = rc;
        goto finish;
    }
    if (ck->gen != gen || ck->cur || c->closing || ck->lookup_seq != j->seq) {
        /* replaced, invalidated or overtaken meanwhile: ours is not the version to serve */
        drop_version = nv->version;
        nv->dropped = 1;
        cache_ver_put_locked(c, nv);
        err = c->closing ? CACHE_ERR_CLOSING : 0;
        goto finish;
    }
    ck->cur = nv; /* our ref moves to ck */
    if (j->by_get && !nv->unindexed && !nv->unrecorded)
        j->f = fill_adopt_locked(c, nv, 1);
    if (j->f && j->nowin)
        j->f->nowin = j->f->no_bypass = 1;
finish:
    lookup_finish_locked(c, ck, j->seq, err, stale, same);
    pthread_mutex_unlock(&c->mu);
    if (warn)
        log_warn("cache: revalidating \"%s/%s\" failed, serving stale: %s", ck->bucket, ck->key,
                 s3c_strerror(rc));
    if (drop_version)
        cache_index_drop(c, ck, drop_version);
}

static int lookup_get_meta(void *cls, const struct be_meta *m)
{
    struct lookup_job *j = cls;
    if (j->got_meta) /* a retry of the GET before any byte came: the same answer */
        return j->f ? j->frc : LOOKUP_GET_DONE;
    j->got_meta = 1;
    lookup_settle(j, 0, m);
    if (!j->f)
        return LOOKUP_GET_DONE;
    j->frc = fill_adopted_begin(j->f, &j->windowed);
    return j->frc;
}

static int lookup_get_data(void *cls, const void *buf, size_t len)
{
    struct lookup_job *j = cls;
    return fill_adopted_data(j->f, j->windowed, buf, len);
}

static void lookup_run(void *arg)
{
    struct lookup_job *j = arg;
    struct cache *c = j->c;
    struct ckey *ck = j->ck;
    struct be_meta m;
    memset(&m, 0, sizeof(m));
    int rc = 0, head = 1;
    if (j->by_get) {
        struct be_sink sink = {lookup_get_meta, lookup_get_data, j};
        rc = backend_get(c->be, ck->bucket, ck->key, 0, c->block_size, &sink);
        if (j->got_meta) {
            head = 0;
            if (j->f)
                fill_adopted_end(j->f, j->windowed, j->frc ? j->frc : rc);
        } else if (rc != -S3E_INVALID_RANGE && rc != -S3E_NOT_IMPLEMENTED) {
            head = 0; /* the backend's answer, as a HEAD's would be (an empty object's first
                       * block is no range: 416, and a HEAD then) */
            lookup_settle(j, rc, &m);
        }
    }
    if (head) {
        rc = backend_head(c->be, ck->bucket, ck->key, &m);
        lookup_settle(j, rc, &m);
    }
    cache_unlinks_run(c);
    pthread_mutex_lock(&c->mu);
    cache_key_put_locked(c, ck);
    cache_job_done(c);
    pthread_mutex_unlock(&c->mu);
    free(j);
}

static int lookup_start_locked(struct cache *c, struct ckey *ck, int by_get, struct workq *wq)
{
    struct lookup_job *j = calloc(1, sizeof(*j));
    if (!j)
        return -ENOMEM;
    j->c = c;
    j->ck = ck;
    j->by_get = by_get && c->cold_get && !ck->cur;
    j->nowin = wq != NULL; /* only a plan's prefetch names its threads */
    j->gen = ck->gen;
    j->seq = ck->lookup_seq + 1;
    j->started_ns = s3c_real_ns();
    ck->refs++;
    int rc = cache_submit_to(c, wq ? wq : c->wq, WORKQ_HIGH, lookup_run, j);
    if (rc) {
        ck->refs--;
        free(j);
        return rc == -ESHUTDOWN ? CACHE_ERR_CLOSING : rc;
    }
    ck->lookup_seq = j->seq;
    ck->lookup_running = 1;
    ck->lookup_started_ns = j->started_ns;
    return 0;
}

static int fresh(struct cache *c, const struct cver *v)
{
    /* a dirty entry is newer than the backend's copy: the backend cannot confirm it */
    if (v->flags & INDEX_F_DIRTY)
        return 1;
    if (v->validated_ns < c->valid_after_ns)
        return 0; /* cached before a restart in cluster mode: writes may have been missed */
    if (c->revalidate_ms < 0)
        return 1;
    int64_t age_ms = (s3c_real_ns() - v->validated_ns) / 1000000;
    return age_ms < c->revalidate_ms;
}

/* Whether @ck's current version may be served: one loaded from the index with blocks present
 * must have its data file. A record can outlive its file (a delete of the record that failed
 * with the LMDB map full, a file removed by hand): that version is dropped, so the request
 * looks the object up as a miss instead of failing on the missing file. Opens the file (kept
 * in v->fd for the read that follows); may release c->mu meanwhile. */
static int cur_usable_locked(struct cache *c, struct ckey *ck)
{
    struct cver *v = ck->cur;
    if (!v->unverified)
        return 1;
    v->unverified = 0;
    int fd;
    v->refs++;
    int rc = cache_ver_fd_locked(c, v, 0, &fd);
    if (rc == -ENOENT && ck->cur == v)
        cache_ver_broken_locked(c, v);
    int ok = ck->cur == v;
    cache_ver_put_locked(c, v);
    return ok;
}

static void bind_locked(struct cache_obj *h, struct cver *v, int from_lookup)
{
    h->v = v;
    v->refs++;
    if (from_lookup)
        return;
    /* Metadata from the cache, no backend request: a hit unless reading bytes says otherwise
     * (cache_obj_open_range() refines the guess for every GET that reads). A request that reads
     * no byte (HEAD, 304, 412, an empty range) was answered from the cache alone. */
    h->guessed = 1;
    h->how = CACHE_HIT;
}

int cache_obj_meta(struct cache_obj *o, struct cache_waiter *w, const struct be_meta **meta,
                   enum cache_outcome *how)
{
    CHECK_OBJ_NOTNULL(o, CACHE_OBJ_MAGIC);
    struct cache *c = o->c;
    struct ckey *ck = o->k;
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (o->v)
        goto bound;
    cache_key_load_locked(c, ck);
    if (o->waited_lookup) {
        if (ck->lookup_done < o->waited_lookup) {
            cache_arm_locked(o, &ck->waiters, w); /* woken early: keep waiting */
            rc = -EAGAIN;
            goto out;
        }
        o->waited_lookup = 0;
        if (ck->cur && cur_usable_locked(c, ck)) {
            if (ck->lookup_stale) {
                o->stale = 1;
                c->st.stale_served++;
            }
            /* confirmed (or kept) versions are hits when complete; new ones are misses */
            bind_locked(o, ck->cur, !(ck->lookup_stale || ck->lookup_same));
            goto bound;
        }
        if (ck->lookup_err) {
            rc = ck->lookup_err;
            goto out;
        }
        /* the lookup was overtaken by a replace/invalidate: look again */
    } else if (ck->cur && fresh(c, ck->cur) && cur_usable_locked(c, ck)) {
        bind_locked(o, ck->cur, 0);
        goto bound;
    }
    if (c->closing) {
        rc = CACHE_ERR_CLOSING;
        goto out;
    }
    /* a lookup that asked the backend before the last resync may bring an answer older than
     * the write the resync stands for: this request starts its own (the later answer wins) */
    if (ck->lookup_running && ck->lookup_started_ns >= c->valid_after_ns) {
        if (o->how != CACHE_MISS)
            o->how = CACHE_COALESCED;
    } else {
        if ((rc = lookup_start_locked(c, ck, o->reads_first, o->wq)))
            goto out;
        o->how = CACHE_MISS;
    }
    o->waited_lookup = ck->lookup_seq;
    cache_arm_locked(o, &ck->waiters, w);
    rc = -EAGAIN;
    goto out;
bound:
    *meta = &o->v->meta;
    *how = o->how;
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

unsigned cache_busy(struct cache *c)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    pthread_mutex_lock(&c->mu);
    unsigned n = c->njobs;
    pthread_mutex_unlock(&c->mu);
    return n;
}

void cache_obj_reads_first(struct cache_obj *o)
{
    CHECK_OBJ_NOTNULL(o, CACHE_OBJ_MAGIC);
    o->reads_first = 1;
}
