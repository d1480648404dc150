/*
 * journal.c: the write-back journal, as the cache offers it to the write-back engine
 * (writeback/drain.c; cache.h, "write-back"): the dirty entries of the index read, opened and
 * marked clean, and the hooks by which the engine hears of new dirty versions and forgotten
 * keys (cache_journal_attach()). The engine itself (drainers, dirty limit, flushes) is not
 * here: the cache never calls the backend for a write.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache_priv.h"
#include "journal_priv.h"
#include "table_priv.h"

/* ---- the engine's hooks ----------------------------------------------------------------- */

void cache_journal_attach(struct cache *c, const struct cache_journal_ops *ops)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    pthread_mutex_lock(&c->mu);
    S3C_ASSERT(!c->journal_on);
    c->journal = *ops;
    c->journal_on = 1;
    pthread_mutex_unlock(&c->mu);
}

void cache_journal_detach(struct cache *c)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    pthread_mutex_lock(&c->mu);
    c->journal_on = 0;
    while (c->journal_calls)
        pthread_cond_wait(&c->journal_cv, &c->mu);
    memset(&c->journal, 0, sizeof(c->journal));
    pthread_mutex_unlock(&c->mu);
}

/* Takes a copy of the hooks in *@ops for a call (1), or 0 when no engine is attached. */
static int journal_enter(struct cache *c, struct cache_journal_ops *ops)
{
    pthread_mutex_lock(&c->mu);
    int on = c->journal_on;
    if (on) {
        *ops = c->journal;
        c->journal_calls++;
    }
    pthread_mutex_unlock(&c->mu);
    return on;
}

static void journal_leave(struct cache *c)
{
    pthread_mutex_lock(&c->mu);
    if (!--c->journal_calls)
        pthread_cond_broadcast(&c->journal_cv);
    pthread_mutex_unlock(&c->mu);
}

void journal_note(struct cache *c, const char *bucket, const char *key, uint64_t version,
                  uint64_t size)
{
    struct cache_journal_ops ops;
    if (!journal_enter(c, &ops))
        return; /* no engine: the journal row drains at its next open */
    ops.note(ops.cls, bucket, key, version, size);
    journal_leave(c);
}

void journal_forget(struct cache *c, const char *bucket, const char *key)
{
    struct cache_journal_ops ops;
    if (!journal_enter(c, &ops))
        return;
    ops.forget(ops.cls, bucket, key);
    journal_leave(c);
}

void journal_stats(struct cache *c, struct cache_stats *out)
{
    struct cache_journal_ops ops;
    if (!journal_enter(c, &ops))
        return;
    ops.stats(ops.cls, out);
    journal_leave(c);
}

int journal_attached(struct cache *c)
{
    pthread_mutex_lock(&c->mu);
    int on = c->journal_on;
    pthread_mutex_unlock(&c->mu);
    return on;
}

/* ---- the journal ------------------------------------------------------------------------ */

struct scan_arg {
    cache_journal_f *cb;
    void *arg;
    int err;
};

static int scan_cb(void *arg, const struct index_key *k, const char *name,
                   const struct index_entry *e)
{
    struct scan_arg *sa = arg;
    const char *slash = strchr(name, '/');
    if (!slash)
        return 0;
    char *bucket = strndup(name, (size_t)(slash - name));
    if (!bucket) {
        sa->err = -ENOMEM;
        return 1;
    }
    int rc = sa->cb(sa->arg, bucket, slash + 1, e->version, e->size);
    free(bucket);
    return rc ? 1 : 0;
}

int cache_journal_scan(struct cache *c, cache_journal_f *cb, void *arg)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    struct scan_arg sa = {cb, arg, 0};
    int rc = index_dirty_scan(c->ix, scan_cb, &sa);
    return rc ? rc : sa.err;
}

int cache_journal_get(struct cache *c, const char *bucket, const char *key, struct be_meta *meta)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    struct index_key k;
    struct index_entry e;
    index_key_make(bucket, key, &k);
    int rc = index_get(c->ix, &k, &e);
    if (rc)
        return rc;
    *meta = e.meta;
    meta->size = e.size;
    index_entry_clear(&e);
    return 0;
}

int cache_journal_open(struct cache *c, const char *bucket, const char *key, uint64_t version,
                       int *fd, struct be_meta *meta, char p[STORE_PATH_MAX])
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    struct index_key k;
    struct index_entry e;
    p[0] = '\0';
    index_key_make(bucket, key, &k);
    int rc = index_get(c->ix, &k, &e);
    *fd = -1;
    if (rc)
        return rc == -ENOENT ? -ESTALE : rc;
    if (e.version != version || !(e.flags & INDEX_F_DIRTY)) {
        index_entry_clear(&e);
        return -ESTALE;
    }
    store_data_path(c->dir, k.b, k.len, version, p);
    *fd = open(p, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) {
        rc = -errno;
        index_entry_clear(&e);
        return rc;
    }
    *meta = e.meta;
    index_entry_clear(&e);
    return 0;
}

/* @version of @k is on the backend (index_clean() done): the in-memory version stops being
 * dirty and takes the backend's ETag/Last-Modified (@etag ""/@mtime_ns 0: unchanged). */
static void ver_clean(struct cache *c, const struct index_key *k, uint64_t version,
                      const char *etag, int64_t mtime_ns)
{
    pthread_mutex_lock(&c->mu);
    struct ckey *ck = cache_key_find_locked(c, k);
    struct cver *v = ck ? ck->cur : NULL;
    if (!v || v->version != version) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    c->evict_gen++; /* clean: evictable */
    int same = (!etag || !etag[0] || !strcmp(etag, v->meta.etag)) &&
               (!mtime_ns || mtime_ns == v->meta.mtime_ns);
    if (same) {
        v->flags &= ~INDEX_F_DIRTY;
        v->validated_ns = s3c_real_ns();
        pthread_mutex_unlock(&c->mu);
        return;
    }
    /* Readers hold pointers into v->meta: the backend's view goes into a new in-memory
     * version of the same data file (not dropped: the file stays). */
    struct be_meta m = v->meta;
    if (etag && etag[0])
        snprintf(m.etag, sizeof(m.etag), "%s", etag);
    if (mtime_ns)
        m.mtime_ns = mtime_ns;
    struct cver *nv = cache_ver_new(ck, version, &m, v->bs);
    if (!nv) {
        v->flags &= ~INDEX_F_DIRTY; /* the key reloads from the index when it goes idle */
        pthread_mutex_unlock(&c->mu);
        return;
    }
    nv->flags = v->flags & ~INDEX_F_DIRTY;
    nv->validated_ns = s3c_real_ns();
    if (nv->nblocks) {
        memcpy(nv->present, v->present, (nv->nblocks + 7) / 8);
        nv->npresent = v->npresent;
    }
    ck->cur = nv;
    cache_ver_put_locked(c, v);
    pthread_mutex_unlock(&c->mu);
}

int cache_journal_clean(struct cache *c, const char *bucket, const char *key, uint64_t version,
                        const char *etag, int64_t mtime_ns)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    struct index_key k;
    index_key_make(bucket, key, &k);
    int rc = index_clean(c->ix, &k, version, etag, mtime_ns);
    if (rc == 0)
        ver_clean(c, &k, version, etag, mtime_ns);
    return rc;
}

void cache_journal_unlinks(struct cache *c)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    cache_unlinks_run(c);
}
