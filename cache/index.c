/*
 * index.c: the cache index, the only file that includes <lmdb.h>. Owns the
 * LMDB environment (MDB_NOTLS, 64 GiB sparse map), record encoding and the
 * running totals. It does not know about files, fills or locks: cache.c
 * decides, index.c records, one transaction per call.
 * A failed meta page write leaves LMDB's environment in its fatal state (every
 * transaction then fails with MDB_PANIC): the next call that finds no other
 * call inside the environment closes and reopens it (index_recover()).
 */
#include <errno.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "index.h"
#include "store.h"
#include "lib/digest.h"
#include "lib/log.h"

#define INDEX_MAP_SIZE (64ULL << 30)
#define INDEX_REOPEN_RETRY_NS 1000000000ull /* after a failed reopen */
#define REC_FORMAT 2u
#define NAME_MAX_LEN 2048

struct index {
    /* Read-held by every call for the life of its transaction (calls run concurrently, as
     * LMDB allows); write-held only by index_recover(), which closes and reopens env. */
    pthread_rwlock_t lock;
    MDB_env *env; /* NULL after a failed reopen: calls fail until one succeeds */
    MDB_dbi objs, lru, info, dirty;
    MDB_dbi members; /* name key + version -> member index blob of a tar (lib/tar.h) */
    char *dir;
    uint64_t map;         /* the map size index_open() settled on */
    int nosync;           /* index_set_sync(0) */
    int broken;           /* atomic: MDB_PANIC seen, a reopen is due */
    uint64_t retry_at_ns; /* monotonic; no reopen attempt before it (write-held lock) */
    uint64_t reopens;     /* atomic */
    /* Group commit (index_write()): writes queued while a commit is being synced go in the
     * next one together, each in a nested transaction of its own. */
    pthread_mutex_t gmu;
    pthread_cond_t gcv;
    struct wop *gqueue, **gtail;
    int gleader; /* a thread runs a group now */
};

/* One write of a group: @fn(@arg) inside the group's transaction; @rc its result once @done. */
typedef int wop_fn(struct index *ix, MDB_txn *txn, void *arg);
struct wop {
    struct wop *next;
    wop_fn *fn;
    void *arg;
    int rc, done;
};

/* Entries that may be evicted are in the lru table: neither pinned nor dirty. */
static int in_lru(uint32_t flags)
{
    return !(flags & (INDEX_F_PINNED | INDEX_F_DIRTY));
}

static int mdb_rc(int rc)
{
    if (rc == 0)
        return 0;
    if (rc == MDB_NOTFOUND)
        return -ENOENT;
    if (rc == MDB_MAP_FULL)
        return -ENOSPC;
    if (rc > 0)
        return -rc;
    return -EIO;
}

void index_key_make(const char *bucket, const char *key, struct index_key *out)
{
    size_t bl = strlen(bucket), kl = strlen(key);
    size_t nl = bl + 1 + kl;
    if (nl <= INDEX_KEY_PLAIN_MAX) {
        memcpy(out->b, bucket, bl);
        out->b[bl] = '/';
        memcpy(out->b + bl + 1, key, kl);
        out->len = nl;
        return;
    }
    uint8_t dg[32];
    struct iovec parts[3] = {{(void *)bucket, bl}, {(void *)"/", 1}, {(void *)key, kl}};
    (void)digest_sha256v(parts, 3, dg); /* zeroed when OpenSSL fails, as before */
    /* plain prefix, then NUL (names never hold one), then the digest */
    size_t off = 0;
    size_t take = S3C_MIN(bl, (size_t)INDEX_KEY_PLAIN_MAX);
    memcpy(out->b, bucket, take);
    off = take;
    if (off < INDEX_KEY_PLAIN_MAX)
        out->b[off++] = '/';
    if (off < INDEX_KEY_PLAIN_MAX) {
        take = INDEX_KEY_PLAIN_MAX - off;
        memcpy(out->b + off, key, take);
        off += take;
    }
    out->b[off++] = 0;
    memcpy(out->b + off, dg, 32);
    out->len = off + 32;
}

uint64_t index_block_bytes(uint64_t size, uint32_t block_size, uint64_t block)
{
    uint64_t off = block * block_size;
    if (off >= size)
        return 0;
    return S3C_MIN((uint64_t)block_size, size - off);
}

uint64_t index_acct(uint64_t bytes)
{
    return (bytes + INDEX_ACCT_ROUND - 1) / INDEX_ACCT_ROUND * INDEX_ACCT_ROUND;
}

void index_entry_clear(struct index_entry *e)
{
    if (!e)
        return;
    free(e->bitmap);
    e->bitmap = NULL;
}

/* ---- record encoding ------------------------------------------------------------------ */

struct wbuf {
    unsigned char *p;
    size_t len, cap;
    int err;
};

static void w_put(struct wbuf *w, const void *p, size_t n)
{
    if (w->err)
        return;
    if (w->len + n > w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 1024;
        while (nc < w->len + n)
            nc *= 2;
        unsigned char *np = realloc(w->p, nc);
        if (!np) {
            w->err = -ENOMEM;
            return;
        }
        w->p = np;
        w->cap = nc;
    }
    memcpy(w->p + w->len, p, n);
    w->len += n;
}
static void w_u64(struct wbuf *w, uint64_t v)
{
    w_put(w, &v, 8);
}
static void w_u32(struct wbuf *w, uint32_t v)
{
    w_put(w, &v, 4);
}
static void w_str(struct wbuf *w, const char *s, size_t max)
{
    uint16_t l = (uint16_t)strnlen(s, max - 1);
    w_put(w, &l, 2);
    w_put(w, s, l);
}

struct rbuf {
    const unsigned char *p;
    size_t len, off;
    int err;
};
static void r_get(struct rbuf *r, void *p, size_t n)
{
    if (r->err || r->off + n > r->len) {
        r->err = -EIO;
        memset(p, 0, n);
        return;
    }
    memcpy(p, r->p + r->off, n);
    r->off += n;
}
static uint64_t r_u64(struct rbuf *r)
{
    uint64_t v;
    r_get(r, &v, 8);
    return v;
}
static uint32_t r_u32(struct rbuf *r)
{
    uint32_t v;
    r_get(r, &v, 4);
    return v;
}
static void r_str(struct rbuf *r, char *out, size_t max)
{
    uint16_t l = 0;
    r_get(r, &l, 2);
    if (r->err || l >= max || r->off + l > r->len) {
        r->err = -EIO;
        out[0] = 0;
        return;
    }
    memcpy(out, r->p + r->off, l);
    out[l] = 0;
    r->off += l;
}

#define META_STRS(X)                                                                               \
    X(etag)                                                                                        \
    X(content_type) X(cache_control) X(content_disposition) X(content_encoding)                    \
        X(content_language) X(expires) X(usermeta) X(checksum_algo) X(checksum)

static int rec_encode(const struct index_entry *e, const char *name, struct wbuf *w)
{
    w_u32(w, REC_FORMAT);
    w_u32(w, e->flags);
    w_u64(w, e->version);
    w_u64(w, e->size);
    w_u64(w, e->used_bytes);
    w_u32(w, e->block_size);
    w_u32(w, e->meta.parts_count);
    w_u64(w, (uint64_t)e->atime_ns);
    w_u64(w, (uint64_t)e->validated_ns);
    w_u64(w, e->nblocks);
    w_u64(w, (uint64_t)e->meta.mtime_ns);
    w_u64(w, e->meta.part_size);
#define X(f) w_str(w, e->meta.f, sizeof(e->meta.f));
    META_STRS(X)
#undef X
    w_str(w, name, NAME_MAX_LEN);
    if (e->nblocks)
        w_put(w, e->bitmap, (e->nblocks + 7) / 8);
    return w->err;
}

/* Decodes @v into @e (bitmap malloc'd unless @no_bitmap) and the name into @name if given. */
static int rec_decode(const MDB_val *v, struct index_entry *e, char *name, size_t name_max,
                      int no_bitmap)
{
    struct rbuf r = {v->mv_data, v->mv_size, 0, 0};
    char tmp[NAME_MAX_LEN];
    memset(e, 0, sizeof(*e));
    if (r_u32(&r) != REC_FORMAT)
        return -EIO;
    e->flags = r_u32(&r);
    e->version = r_u64(&r);
    e->size = r_u64(&r);
    e->used_bytes = r_u64(&r);
    e->block_size = r_u32(&r);
    e->meta.parts_count = r_u32(&r);
    e->atime_ns = (int64_t)r_u64(&r);
    e->validated_ns = (int64_t)r_u64(&r);
    e->nblocks = r_u64(&r);
    e->meta.mtime_ns = (int64_t)r_u64(&r);
    e->meta.part_size = r_u64(&r);
    e->meta.size = e->size;
#define X(f) r_str(&r, e->meta.f, sizeof(e->meta.f));
    META_STRS(X)
#undef X
    r_str(&r, name ? name : tmp, name ? name_max : sizeof(tmp));
    if (r.err)
        return r.err;
    size_t bl = (e->nblocks + 7) / 8;
    if (r.off + bl != r.len)
        return -EIO;
    if (e->nblocks && !no_bitmap) {
        e->bitmap = malloc(bl);
        if (!e->bitmap)
            return -ENOMEM;
        memcpy(e->bitmap, r.p + r.off, bl);
    }
    return 0;
}

/* The record of @key in @txn, decoded into @e (rec_decode()'s @name, @name_max, @no_bitmap),
 * if it is still version @version: 0, -ESTALE when the key is gone or holds another version
 * (evicted, invalidated or replaced meanwhile), or another error. */
static int rec_get_version(struct index *ix, MDB_txn *txn, MDB_val *key, uint64_t version,
                           MDB_val *v, struct index_entry *e, char *name, size_t name_max,
                           int no_bitmap)
{
    int rc = mdb_rc(mdb_get(txn, ix->objs, key, v));
    if (rc)
        return rc == -ENOENT ? -ESTALE : rc;
    if ((rc = rec_decode(v, e, name, name_max, no_bitmap)))
        return rc;
    return e->version == version ? 0 : -ESTALE;
}

/* Offset of the bitmap inside an encoded record (it is the tail). */
static size_t rec_bitmap_off(const MDB_val *v, uint64_t nblocks)
{
    return v->mv_size - (nblocks + 7) / 8;
}

/* ---- totals ---------------------------------------------------------------------------- */

static int totals_get(struct index *ix, MDB_txn *txn, struct index_totals *t)
{
    MDB_val k = {6, "totals"}, v;
    int rc = mdb_get(txn, ix->info, &k, &v);
    memset(t, 0, sizeof(*t));
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return mdb_rc(rc);
    /* an older, shorter totals record: its fields are a prefix of ours */
    memcpy(t, v.mv_data, S3C_MIN(v.mv_size, sizeof(*t)));
    return 0;
}

static int totals_put(struct index *ix, MDB_txn *txn, const struct index_totals *t)
{
    MDB_val k = {6, "totals"}, v = {sizeof(*t), (void *)t};
    return mdb_rc(mdb_put(txn, ix->info, &k, &v, 0));
}

static void add64(uint64_t *x, int64_t d)
{
    if (d < 0 && (uint64_t)-d > *x)
        *x = 0;
    else
        *x += (uint64_t)d;
}

/* ---- lru ------------------------------------------------------------------------------- */

static void lru_key(unsigned char *out, size_t *len, int64_t atime, const struct index_key *k)
{
    uint64_t a = (uint64_t)atime;
    for (int i = 0; i < 8; i++)
        out[i] = (unsigned char)(a >> (56 - 8 * i));
    memcpy(out + 8, k->b, k->len);
    *len = 8 + k->len;
}

static int lru_del(struct index *ix, MDB_txn *txn, int64_t atime, const struct index_key *k)
{
    unsigned char b[8 + INDEX_KEY_MAX];
    MDB_val key;
    lru_key(b, &key.mv_size, atime, k);
    key.mv_data = b;
    int rc = mdb_del(txn, ix->lru, &key, NULL);
    return rc == MDB_NOTFOUND ? 0 : mdb_rc(rc);
}

static int lru_put(struct index *ix, MDB_txn *txn, int64_t atime, const struct index_key *k,
                   uint64_t version, uint64_t used)
{
    unsigned char b[8 + INDEX_KEY_MAX];
    uint64_t val[2] = {version, used};
    MDB_val key, v = {sizeof(val), val};
    lru_key(b, &key.mv_size, atime, k);
    key.mv_data = b;
    return mdb_rc(mdb_put(txn, ix->lru, &key, &v, 0));
}

/* ---- open/close ------------------------------------------------------------------------ */

/* The index holds keys, user metadata, member names and the write-back journal: its files
 * are the owner's alone, as the cached data is. LMDB creates data.mdb and lock.mdb with
 * INDEX_FILE_MODE; a file left wider by an older version (0644) loses its group and other
 * bits here. Best effort: a file we cannot chmod (not ours) is left as it is. */
#define INDEX_FILE_MODE 0600

static void index_tighten(const char *dir)
{
    static const char *const names[] = {"data.mdb", "lock.mdb"};
    char p[4096];
    struct stat st;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077))
            (void)chmod(p, st.st_mode & 07700);
    }
}

/* Opens ix->env on @dir with a map of @map bytes (smaller where address space is limited) and
 * its tables. 0 or an LMDB/errno code; ix->env is NULL on failure. */
static int env_open(struct index *ix, const char *dir, uint64_t map)
{
    MDB_txn *txn = NULL;
    int rc;
    /* a large sparse map; smaller ones where address space is limited (ulimit -v, valgrind) */
    for (;; map /= 4) {
        if ((rc = mdb_env_create(&ix->env))) {
            ix->env = NULL;
            return rc;
        }
        if ((rc = mdb_env_set_maxdbs(ix->env, 5)) || (rc = mdb_env_set_mapsize(ix->env, map)) ||
            (rc = mdb_env_set_maxreaders(ix->env, 1024)))
            goto fail;
        rc = mdb_env_open(ix->env, dir, MDB_NOTLS | (ix->nosync ? MDB_NOSYNC : 0), INDEX_FILE_MODE);
        if (rc == 0)
            break;
        mdb_env_close(ix->env);
        ix->env = NULL;
        if ((rc != EINVAL && rc != ENOMEM) || map <= (256ULL << 20))
            return rc;
    }
    ix->map = map;
    index_tighten(dir);
    if ((rc = mdb_txn_begin(ix->env, NULL, 0, &txn)))
        goto fail;
    if ((rc = mdb_dbi_open(txn, "objs", MDB_CREATE, &ix->objs)) ||
        (rc = mdb_dbi_open(txn, "lru", MDB_CREATE, &ix->lru)) ||
        (rc = mdb_dbi_open(txn, "info", MDB_CREATE, &ix->info)) ||
        (rc = mdb_dbi_open(txn, "dirty", MDB_CREATE, &ix->dirty)) ||
        (rc = mdb_dbi_open(txn, "members", MDB_CREATE, &ix->members)))
        goto fail;
    rc = mdb_txn_commit(txn);
    txn = NULL;
    if (rc)
        goto fail;
    /* readers left by a killed process of ours */
    int dead = 0;
    mdb_reader_check(ix->env, &dead);
    return 0;
fail:
    if (txn)
        mdb_txn_abort(txn);
    mdb_env_close(ix->env);
    ix->env = NULL;
    return rc;
}

int index_open(const char *dir, struct index **out, struct errmsg *em)
{
    struct index *ix = calloc(1, sizeof(*ix));
    int rc;
    if (!ix)
        return -ENOMEM;
    if (!(ix->dir = strdup(dir))) {
        free(ix);
        return -ENOMEM;
    }
    if ((rc = -pthread_rwlock_init(&ix->lock, NULL))) {
        free(ix->dir);
        free(ix);
        return rc;
    }
    pthread_mutex_init(&ix->gmu, NULL);
    pthread_cond_init(&ix->gcv, NULL);
    ix->gtail = &ix->gqueue;
    if ((rc = store_mkdir(dir))) {
        errmsg_set(em, "index: mkdir %s: %s", dir, strerror(-rc));
        goto fail;
    }
    if ((rc = env_open(ix, dir, INDEX_MAP_SIZE))) {
        errmsg_set(em, "index: lmdb %s: %s", dir, mdb_strerror(rc));
        rc = mdb_rc(rc);
        goto fail;
    }
    *out = ix;
    return 0;
fail:
    pthread_rwlock_destroy(&ix->lock);
    pthread_mutex_destroy(&ix->gmu);
    pthread_cond_destroy(&ix->gcv);
    free(ix->dir);
    free(ix);
    return rc;
}

int index_set_sync(struct index *ix, int on)
{
    pthread_rwlock_rdlock(&ix->lock);
    int rc = ix->env ? mdb_env_set_flags(ix->env, MDB_NOSYNC, on ? 0 : 1) : MDB_PANIC;
    if (!rc) {
        ix->nosync = !on;
        if (on)
            rc = mdb_env_sync(ix->env, 1);
    }
    pthread_rwlock_unlock(&ix->lock);
    return mdb_rc(rc);
}

void index_close(struct index *ix)
{
    if (!ix)
        return;
    if (ix->env)
        mdb_env_close(ix->env);
    pthread_rwlock_destroy(&ix->lock);
    pthread_mutex_destroy(&ix->gmu);
    pthread_cond_destroy(&ix->gcv);
    free(ix->dir);
    free(ix);
}

uint64_t index_reopens(struct index *ix)
{
    return __atomic_load_n(&ix->reopens, __ATOMIC_RELAXED);
}

/* The environment is in LMDB's fatal state (MDB_PANIC: a meta page write failed; every
 * transaction fails until it is opened again): closes and reopens it, as a restart would, if
 * no call is inside it. Only tried, never waited for: callers may hold cache locks that a call
 * inside the environment (a scan's callback) waits for. When calls are in flight, a later call
 * reopens; after a failed reopen, none is tried for INDEX_REOPEN_RETRY_NS. */
static void index_recover(struct index *ix)
{
    if (pthread_rwlock_trywrlock(&ix->lock))
        return;
    uint64_t now = s3c_mono_ns();
    if (__atomic_load_n(&ix->broken, __ATOMIC_ACQUIRE) && now >= ix->retry_at_ns) {
        if (ix->env)
            mdb_env_close(ix->env);
        ix->env = NULL;
        int rc = env_open(ix, ix->dir, ix->map);
        if (rc == 0) {
            __atomic_store_n(&ix->broken, 0, __ATOMIC_RELEASE);
            __atomic_add_fetch(&ix->reopens, 1, __ATOMIC_RELAXED);
            log_warn("index: lmdb %s was in its fatal state (MDB_PANIC): reopened", ix->dir);
        } else {
            ix->retry_at_ns = now + INDEX_REOPEN_RETRY_NS;
            log_err("index: reopening lmdb %s after MDB_PANIC: %s", ix->dir, mdb_strerror(rc));
        }
    }
    pthread_rwlock_unlock(&ix->lock);
}

/* ---- operations ------------------------------------------------------------------------ */

/* Every call's transaction: begun under the read-held lock, which txn_end()/txn_close()
 * release. While a reopen is due no call enters the environment (calls in flight leave it
 * soon, and then one reopens it); finding it in its fatal state, a call recovers and tries
 * once more. */
static int txn_begin(struct index *ix, int rdonly, MDB_txn **txn)
{
    for (int again = 0;; again = 1) {
        if (__atomic_load_n(&ix->broken, __ATOMIC_ACQUIRE)) {
            index_recover(ix);
            if (__atomic_load_n(&ix->broken, __ATOMIC_ACQUIRE))
                return -EIO;
        }
        pthread_rwlock_rdlock(&ix->lock);
        int rc = ix->env ? mdb_txn_begin(ix->env, NULL, rdonly ? MDB_RDONLY : 0, txn) : MDB_PANIC;
        if (rc == 0)
            return 0;
        pthread_rwlock_unlock(&ix->lock);
        if (rc != MDB_PANIC || again)
            return mdb_rc(rc);
        __atomic_store_n(&ix->broken, 1, __ATOMIC_RELEASE);
    }
}

/* Commits @txn when @rc is 0, else aborts it; releases the lock. */
static int txn_end(struct index *ix, MDB_txn *txn, int rc)
{
    if (rc) {
        mdb_txn_abort(txn);
    } else if ((rc = mdb_txn_commit(txn)) != 0) {
        if (rc == MDB_PANIC)
            __atomic_store_n(&ix->broken, 1, __ATOMIC_RELEASE);
        rc = mdb_rc(rc);
    }
    pthread_rwlock_unlock(&ix->lock);
    return rc;
}

/* Runs the writes @batch (a list) in one transaction, each in a nested one (a failed write
 * leaves the others whole; a lone write needs none), and commits once: one sync for all. */
static void group_run(struct index *ix, struct wop *batch)
{
    MDB_txn *txn, *child;
    int rc = txn_begin(ix, 0, &txn), any = 0;
    for (struct wop *op = batch; op; op = op->next) {
        if (rc) {
            op->rc = rc;
            continue;
        }
        if (!batch->next) {
            op->rc = op->fn(ix, txn, op->arg);
            any = !op->rc;
            continue;
        }
        int r = mdb_txn_begin(ix->env, txn, 0, &child);
        if (r) {
            op->rc = mdb_rc(r);
            continue;
        }
        op->rc = op->fn(ix, child, op->arg);
        if (op->rc) {
            mdb_txn_abort(child);
        } else if ((r = mdb_txn_commit(child))) {
            op->rc = mdb_rc(r);
        } else {
            any = 1;
        }
    }
    if (rc)
        return;
    rc = txn_end(ix, txn, any ? 0 : -ECANCELED); /* nothing to keep: aborted */
    for (struct wop *op = batch; op && rc != -ECANCELED; op = op->next)
        if (!op->rc && rc)
            op->rc = rc; /* the commit failed: none of it happened */
}

/* @fn(@arg) in a write transaction shared with the writes queued meanwhile (group commit): the
 * first writer to find no group running runs the batch queued then, the others wait for
 * theirs. Returns @fn's result, or the begin's or the commit's error. */
static int index_write(struct index *ix, wop_fn *fn, void *arg)
{
    struct wop op = {NULL, fn, arg, 0, 0};
    pthread_mutex_lock(&ix->gmu);
    *ix->gtail = &op;
    ix->gtail = &op.next;
    while (!op.done) {
        if (ix->gleader) {
            pthread_cond_wait(&ix->gcv, &ix->gmu);
            continue;
        }
        ix->gleader = 1;
        struct wop *batch = ix->gqueue;
        ix->gqueue = NULL;
        ix->gtail = &ix->gqueue;
        pthread_mutex_unlock(&ix->gmu);
        group_run(ix, batch);
        pthread_mutex_lock(&ix->gmu);
        for (struct wop *o = batch, *next; o; o = next) {
            next = o->next; /* o may go as soon as done is seen */
            o->done = 1;
        }
        ix->gleader = 0;
        pthread_cond_broadcast(&ix->gcv);
    }
    pthread_mutex_unlock(&ix->gmu);
    return op.rc;
}

/* Ends a read transaction; releases the lock. */
static void txn_close(struct index *ix, MDB_txn *txn)
{
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&ix->lock);
}

int index_get(struct index *ix, const struct index_key *k, struct index_entry *out)
{
    MDB_txn *txn;
    MDB_val key = {k->len, (void *)k->b}, v;
    int rc = txn_begin(ix, 1, &txn);
    if (rc)
        return rc;
    rc = mdb_rc(mdb_get(txn, ix->objs, &key, &v));
    if (!rc)
        rc = rec_decode(&v, out, NULL, 0, 0);
    txn_close(ix, txn);
    return rc;
}

/* The members table's key of (@k, @version): the object key, then the version. */
static void members_key(const struct index_key *k, uint64_t version, unsigned char *out,
                        size_t *len)
{
    memcpy(out, k->b, k->len);
    memcpy(out + k->len, &version, 8);
    *len = k->len + 8;
}

/* Removes the record at @key inside @txn, keeping lru and totals right, and the member index
 * of its version (a tar's, if one was built). */
static int del_locked(struct index *ix, MDB_txn *txn, MDB_val *key, const struct index_key *k,
                      const struct index_entry *old, struct index_totals *t)
{
    int rc = mdb_rc(mdb_del(txn, ix->objs, key, NULL));
    if (!rc) {
        unsigned char mk[INDEX_KEY_MAX + 8];
        MDB_val mkey = {0, mk};
        members_key(k, old->version, mk, &mkey.mv_size);
        int r = mdb_del(txn, ix->members, &mkey, NULL);
        rc = r == MDB_NOTFOUND ? 0 : mdb_rc(r);
    }
    if (!rc && in_lru(old->flags))
        rc = lru_del(ix, txn, old->atime_ns, k);
    if (!rc && (old->flags & INDEX_F_DIRTY)) {
        rc = mdb_del(txn, ix->dirty, key, NULL);
        rc = rc == MDB_NOTFOUND ? 0 : mdb_rc(rc);
        add64(&t->dirty_objects, -1);
        add64(&t->dirty_bytes, -(int64_t)old->size);
    }
    if (rc)
        return rc;
    add64(&t->used_bytes, -(int64_t)old->used_bytes);
    add64(&t->objects, -1);
    if (old->flags & INDEX_F_PINNED) {
        add64(&t->pinned_objects, -1);
        add64(&t->pinned_bytes, -(int64_t)old->used_bytes);
    }
    return 0;
}

static int put(struct index *ix, const struct index_key *k, const char *name,
               const struct index_entry *e, uint64_t *old_version, int64_t *delta_used,
               int only_new);

int index_put_new(struct index *ix, const struct index_key *k, const char *name,
                  const struct index_entry *e, int64_t *delta_used)
{
    uint64_t old = 0;
    return put(ix, k, name, e, &old, delta_used, 1);
}

int index_put(struct index *ix, const struct index_key *k, const char *name,
              const struct index_entry *e, uint64_t *old_version, int64_t *delta_used)
{
    return put(ix, k, name, e, old_version, delta_used, 0);
}

struct put_args {
    const struct index_key *k;
    const char *name;
    const struct index_entry *e;
    uint64_t old_version;
    int64_t delta;
    int only_new;
};

/* put()'s write, in @txn (index_write()). */
static int put_in(struct index *ix, MDB_txn *txn, void *arg)
{
    struct put_args *a = arg;
    const struct index_key *k = a->k;
    const struct index_entry *e = a->e;
    const char *name = a->name;
    int only_new = a->only_new;
    uint64_t *old_version = &a->old_version;
    MDB_val key = {k->len, (void *)k->b}, v;
    struct index_totals t;
    struct wbuf w = {0};
    int64_t delta = 0;
    int rc;
    *old_version = 0;
    if ((rc = totals_get(ix, txn, &t)))
        goto out;
    rc = mdb_get(txn, ix->objs, &key, &v);
    if (rc == 0 && only_new) {
        rc = -EEXIST;
        goto out;
    }
    if (rc == 0) {
        struct index_entry old;
        if ((rc = rec_decode(&v, &old, NULL, 0, 1)))
            goto out;
        *old_version = old.version;
        delta -= (int64_t)old.used_bytes;
        if ((rc = del_locked(ix, txn, &key, k, &old, &t)))
            goto out;
    } else if (rc != MDB_NOTFOUND) {
        rc = mdb_rc(rc);
        goto out;
    }
    if ((rc = rec_encode(e, name, &w)))
        goto out;
    v.mv_size = w.len;
    v.mv_data = w.p;
    if ((rc = mdb_rc(mdb_put(txn, ix->objs, &key, &v, 0))))
        goto out;
    if (in_lru(e->flags) && (rc = lru_put(ix, txn, e->atime_ns, k, e->version, e->used_bytes)))
        goto out;
    if (e->flags & INDEX_F_DIRTY) {
        MDB_val dv = {sizeof(e->version), (void *)&e->version};
        if ((rc = mdb_rc(mdb_put(txn, ix->dirty, &key, &dv, 0))))
            goto out;
        t.dirty_objects++;
        t.dirty_bytes += e->size;
    }
    delta += (int64_t)e->used_bytes;
    t.used_bytes += e->used_bytes;
    t.objects++;
    if (e->flags & INDEX_F_PINNED) {
        t.pinned_objects++;
        t.pinned_bytes += e->used_bytes;
    }
    rc = totals_put(ix, txn, &t);
out:
    free(w.p);
    a->delta = delta;
    return rc;
}

static int put(struct index *ix, const struct index_key *k, const char *name,
               const struct index_entry *e, uint64_t *old_version, int64_t *delta_used,
               int only_new)
{
    struct put_args a = {k, name, e, 0, 0, only_new};
    int rc = index_write(ix, put_in, &a);
    *old_version = rc ? 0 : a.old_version;
    if (!rc && delta_used)
        *delta_used = a.delta;
    return rc;
}

struct mark_args {
    const struct index_key *k;
    uint64_t version, first, n, add;
};

/* index_mark()'s write, in @txn (index_write()). */
static int mark_in(struct index *ix, MDB_txn *txn, void *arg)
{
    struct mark_args *a = arg;
    const struct index_key *k = a->k;
    uint64_t version = a->version, first = a->first, n = a->n;
    MDB_val key = {k->len, (void *)k->b}, v;
    struct index_entry e;
    struct index_totals t;
    unsigned char *copy = NULL;
    uint64_t add = 0;
    int rc;
    if ((rc = rec_get_version(ix, txn, &key, version, &v, &e, NULL, 0, 1)))
        goto out;
    if (first + n > e.nblocks) {
        rc = -ESTALE;
        goto out;
    }
    copy = malloc(v.mv_size);
    if (!copy) {
        rc = -ENOMEM;
        goto out;
    }
    memcpy(copy, v.mv_data, v.mv_size);
    unsigned char *bm = copy + rec_bitmap_off(&v, e.nblocks);
    for (uint64_t b = first; b < first + n; b++) {
        if (bm[b / 8] & (1u << (b % 8)))
            continue;
        bm[b / 8] |= (unsigned char)(1u << (b % 8));
        add += index_acct(index_block_bytes(e.size, e.block_size, b));
    }
    if (!add)
        goto out;
    /* used_bytes sits at a fixed offset: format(4) flags(4) version(8) size(8) */
    uint64_t used = e.used_bytes + add;
    memcpy(copy + 24, &used, 8);
    MDB_val nv = {v.mv_size, copy};
    if ((rc = mdb_rc(mdb_put(txn, ix->objs, &key, &nv, 0))))
        goto out;
    if (in_lru(e.flags)) {
        /* the lru value carries the used bytes */
        if ((rc = lru_put(ix, txn, e.atime_ns, k, e.version, used)))
            goto out;
    }
    if ((rc = totals_get(ix, txn, &t)))
        goto out;
    t.used_bytes += add;
    if (e.flags & INDEX_F_PINNED)
        t.pinned_bytes += add;
    rc = totals_put(ix, txn, &t);
out:
    free(copy);
    a->add = add;
    return rc;
}

int index_mark(struct index *ix, const struct index_key *k, uint64_t version, uint64_t first,
               uint64_t n, int64_t *delta_used)
{
    struct mark_args a = {k, version, first, n, 0};
    *delta_used = 0;
    int rc = index_write(ix, mark_in, &a);
    if (!rc)
        *delta_used = (int64_t)a.add;
    return rc;
}

int index_del(struct index *ix, const struct index_key *k, uint64_t version, int64_t *delta_used)
{
    MDB_txn *txn;
    MDB_val key = {k->len, (void *)k->b}, v;
    struct index_entry e;
    struct index_totals t;
    int rc = txn_begin(ix, 0, &txn);
    if (rc)
        return rc;
    *delta_used = 0;
    if ((rc = rec_get_version(ix, txn, &key, version, &v, &e, NULL, 0, 1)))
        goto out;
    if ((rc = totals_get(ix, txn, &t)) || (rc = del_locked(ix, txn, &key, k, &e, &t)))
        goto out;
    rc = totals_put(ix, txn, &t);
out:
    rc = txn_end(ix, txn, rc);
    if (!rc)
        *delta_used = -(int64_t)e.used_bytes;
    return rc;
}

/* Rewrites the record at @key with @e (same size and layout as @v). */
static int rewrite_head(struct index *ix, MDB_txn *txn, MDB_val *key, const MDB_val *v,
                        uint32_t flags, int64_t atime, int64_t validated)
{
    unsigned char *copy = malloc(v->mv_size);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, v->mv_data, v->mv_size);
    /* format(4) flags(4) version(8) size(8) used(8) bs(4) parts(4) atime(8) validated(8) */
    memcpy(copy + 4, &flags, 4);
    memcpy(copy + 40, &atime, 8);
    memcpy(copy + 48, &validated, 8);
    MDB_val nv = {v->mv_size, copy};
    int rc = mdb_rc(mdb_put(txn, ix->objs, key, &nv, 0));
    free(copy);
    return rc;
}

int index_set_pinned(struct index *ix, const struct index_key *k, uint64_t version, int on)
{
    MDB_txn *txn;
    MDB_val key = {k->len, (void *)k->b}, v;
    struct index_entry e;
    struct index_totals t;
    int rc = txn_begin(ix, 0, &txn);
    if (rc)
        return rc;
    if ((rc = rec_get_version(ix, txn, &key, version, &v, &e, NULL, 0, 1)))
        goto out;
    int was = !!(e.flags & INDEX_F_PINNED);
    if (was == !!on)
        goto out;
    uint32_t flags = on ? (e.flags | INDEX_F_PINNED) : (e.flags & ~INDEX_F_PINNED);
    if ((rc = rewrite_head(ix, txn, &key, &v, flags, e.atime_ns, e.validated_ns)))
        goto out;
    if (in_lru(e.flags) && !in_lru(flags))
        rc = lru_del(ix, txn, e.atime_ns, k);
    else if (!in_lru(e.flags) && in_lru(flags))
        rc = lru_put(ix, txn, e.atime_ns, k, e.version, e.used_bytes);
    if (rc || (rc = totals_get(ix, txn, &t)))
        goto out;
    if (on) {
        t.pinned_objects++;
        t.pinned_bytes += e.used_bytes;
    } else {
        add64(&t.pinned_objects, -1);
        add64(&t.pinned_bytes, -(int64_t)e.used_bytes);
    }
    rc = totals_put(ix, txn, &t);
out:
    return txn_end(ix, txn, rc);
}

int index_touch(struct index *ix, const struct index_touch *t, size_t n)
{
    MDB_txn *txn;
    int rc = txn_begin(ix, 0, &txn);
    if (rc)
        return rc;
    for (size_t i = 0; i < n && !rc; i++) {
        MDB_val key = {t[i].k.len, (void *)t[i].k.b}, v;
        struct index_entry e;
        int r = mdb_get(txn, ix->objs, &key, &v);
        if (r == MDB_NOTFOUND)
            continue;
        if (r) {
            rc = mdb_rc(r);
            break;
        }
        if (rec_decode(&v, &e, NULL, 0, 1) || e.version != t[i].version)
            continue;
        int64_t at = t[i].atime_ns > e.atime_ns ? t[i].atime_ns : e.atime_ns;
        int64_t va = t[i].validated_ns > e.validated_ns ? t[i].validated_ns : e.validated_ns;
        if (at == e.atime_ns && va == e.validated_ns)
            continue;
        if ((rc = rewrite_head(ix, txn, &key, &v, e.flags, at, va)))
            break;
        if (in_lru(e.flags) && at != e.atime_ns) {
            if ((rc = lru_del(ix, txn, e.atime_ns, &t[i].k)))
                break;
            rc = lru_put(ix, txn, at, &t[i].k, e.version, e.used_bytes);
        }
    }
    return txn_end(ix, txn, rc);
}

int index_lru_scan(struct index *ix, index_lru_f *cb, void *arg)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    MDB_val key, v;
    int rc = txn_begin(ix, 1, &txn);
    if (rc)
        return rc;
    if ((rc = mdb_rc(mdb_cursor_open(txn, ix->lru, &cur)))) {
        txn_close(ix, txn);
        return rc;
    }
    int r = mdb_cursor_get(cur, &key, &v, MDB_FIRST);
    rc = 0;
    while (r == 0) {
        if (key.mv_size > 8 && key.mv_size - 8 <= INDEX_KEY_MAX && v.mv_size == 16) {
            struct index_key k;
            uint64_t val[2], at = 0;
            const unsigned char *kb = key.mv_data;
            k.len = key.mv_size - 8;
            memcpy(k.b, kb + 8, k.len);
            memcpy(val, v.mv_data, 16);
            for (int i = 0; i < 8; i++)
                at = at << 8 | kb[i];
            if ((rc = cb(arg, &k, val[0], val[1], (int64_t)at)))
                break;
        }
        r = mdb_cursor_get(cur, &key, &v, MDB_NEXT);
    }
    if (!rc && r != MDB_NOTFOUND)
        rc = mdb_rc(r);
    mdb_cursor_close(cur);
    txn_close(ix, txn);
    return rc;
}

int index_prefix_scan(struct index *ix, const char *name_prefix, index_scan_f *cb, void *arg)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    size_t pl = strlen(name_prefix);
    size_t kl = S3C_MIN(pl, (size_t)INDEX_KEY_PLAIN_MAX);
    MDB_val key = {kl, (void *)name_prefix}, v;
    char *name = malloc(NAME_MAX_LEN);
    int rc;
    if (!name)
        return -ENOMEM;
    if ((rc = txn_begin(ix, 1, &txn))) {
        free(name);
        return rc;
    }
    if ((rc = mdb_rc(mdb_cursor_open(txn, ix->objs, &cur)))) {
        txn_close(ix, txn);
        free(name);
        return rc;
    }
    int r = kl ? mdb_cursor_get(cur, &key, &v, MDB_SET_RANGE)
               : mdb_cursor_get(cur, &key, &v, MDB_FIRST);
    rc = 0;
    while (r == 0) {
        if (key.mv_size < kl || memcmp(key.mv_data, name_prefix, kl) != 0)
            break;
        struct index_entry e;
        if (key.mv_size <= INDEX_KEY_MAX && !rec_decode(&v, &e, name, NAME_MAX_LEN, 1) &&
            strncmp(name, name_prefix, pl) == 0) {
            struct index_key k;
            k.len = key.mv_size;
            memcpy(k.b, key.mv_data, k.len);
            if ((rc = cb(arg, &k, name, e.version)))
                break;
        }
        r = mdb_cursor_get(cur, &key, &v, MDB_NEXT);
    }
    if (!rc && r != 0 && r != MDB_NOTFOUND)
        rc = mdb_rc(r);
    mdb_cursor_close(cur);
    txn_close(ix, txn);
    free(name);
    return rc;
}

int index_clean(struct index *ix, const struct index_key *k, uint64_t version, const char *etag,
                int64_t mtime_ns)
{
    MDB_txn *txn;
    MDB_val key = {k->len, (void *)k->b}, v;
    struct index_entry e;
    struct index_totals t;
    struct wbuf w = {0};
    char *name = malloc(NAME_MAX_LEN);
    int rc = name ? txn_begin(ix, 0, &txn) : -ENOMEM;
    if (rc) {
        free(name);
        return rc;
    }
    memset(&e, 0, sizeof(e));
    if ((rc = rec_get_version(ix, txn, &key, version, &v, &e, name, NAME_MAX_LEN, 0)))
        goto out;
    if (!(e.flags & INDEX_F_DIRTY)) {
        rc = -ESTALE;
        goto out;
    }
    e.flags &= ~INDEX_F_DIRTY;
    e.validated_ns = s3c_real_ns();
    if (etag && etag[0])
        snprintf(e.meta.etag, sizeof(e.meta.etag), "%s", etag);
    if (mtime_ns)
        e.meta.mtime_ns = mtime_ns;
    if ((rc = rec_encode(&e, name, &w)))
        goto out;
    MDB_val nv = {w.len, w.p};
    if ((rc = mdb_rc(mdb_put(txn, ix->objs, &key, &nv, 0))))
        goto out;
    if (in_lru(e.flags) && (rc = lru_put(ix, txn, e.atime_ns, k, e.version, e.used_bytes)))
        goto out;
    rc = mdb_del(txn, ix->dirty, &key, NULL);
    if ((rc = rc == MDB_NOTFOUND ? 0 : mdb_rc(rc)) || (rc = totals_get(ix, txn, &t)))
        goto out;
    add64(&t.dirty_objects, -1);
    add64(&t.dirty_bytes, -(int64_t)e.size);
    rc = totals_put(ix, txn, &t);
out:
    index_entry_clear(&e);
    free(w.p);
    free(name);
    return txn_end(ix, txn, rc);
}

int index_dirty_scan(struct index *ix, index_dirty_f *cb, void *arg)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    MDB_val key, v;
    char *name = malloc(NAME_MAX_LEN);
    int rc = name ? txn_begin(ix, 1, &txn) : -ENOMEM;
    if (rc) {
        free(name);
        return rc;
    }
    if ((rc = mdb_rc(mdb_cursor_open(txn, ix->dirty, &cur)))) {
        txn_close(ix, txn);
        free(name);
        return rc;
    }
    int r = mdb_cursor_get(cur, &key, &v, MDB_FIRST);
    while (r == 0) {
        MDB_val ov;
        struct index_entry e;
        if (key.mv_size <= INDEX_KEY_MAX && mdb_get(txn, ix->objs, &key, &ov) == 0 &&
            rec_decode(&ov, &e, name, NAME_MAX_LEN, 1) == 0 && (e.flags & INDEX_F_DIRTY)) {
            struct index_key k;
            k.len = key.mv_size;
            memcpy(k.b, key.mv_data, k.len);
            if ((rc = cb(arg, &k, name, &e)))
                break;
        }
        r = mdb_cursor_get(cur, &key, &v, MDB_NEXT);
    }
    if (!rc && r != MDB_NOTFOUND)
        rc = mdb_rc(r);
    mdb_cursor_close(cur);
    txn_close(ix, txn);
    free(name);
    return rc;
}

int index_totals(struct index *ix, struct index_totals *out)
{
    MDB_txn *txn;
    int rc = txn_begin(ix, 1, &txn);
    if (rc)
        return rc;
    rc = totals_get(ix, txn, out);
    txn_close(ix, txn);
    return rc;
}

/* ---- member indexes of tar archives ---------------------------------------------------- */

int index_members_put(struct index *ix, const struct index_key *k, uint64_t version,
                      const void *blob, size_t len)
{
    MDB_txn *txn;
    MDB_val key = {k->len, (void *)k->b}, v;
    unsigned char mk[INDEX_KEY_MAX + 8];
    MDB_val mkey = {0, mk}, mv = {len, (void *)blob};
    struct index_entry e;
    int rc = txn_begin(ix, 0, &txn);
    if (rc)
        return rc;
    if ((rc = rec_get_version(ix, txn, &key, version, &v, &e, NULL, 0, 1)))
        goto out;
    members_key(k, version, mk, &mkey.mv_size);
    rc = mdb_rc(mdb_put(txn, ix->members, &mkey, &mv, 0));
out:
    return txn_end(ix, txn, rc);
}

int index_members_get(struct index *ix, const struct index_key *k, uint64_t version,
                      index_members_f *cb, void *arg)
{
    MDB_txn *txn;
    unsigned char mk[INDEX_KEY_MAX + 8];
    MDB_val mkey = {0, mk}, v;
    int rc = txn_begin(ix, 1, &txn);
    if (rc)
        return rc;
    members_key(k, version, mk, &mkey.mv_size);
    rc = mdb_rc(mdb_get(txn, ix->members, &mkey, &v));
    if (!rc)
        rc = cb(arg, v.mv_data, v.mv_size);
    txn_close(ix, txn);
    return rc;
}
