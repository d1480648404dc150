/*
 * members.c: reading inside tar shards through the cache. The member index of a version (a
 * lib/tar.h blob) is kept in the LMDB index beside the version's record (index.c's members
 * table, dropped with the record) and looked up there in place: a member hit is one read
 * transaction and an O(log n) search in the mapped blob, then the ordinary range path
 * (cache_obj_open_range: sendfile of the member's bytes). The index is built once per version:
 * from the cached file when the shard is whole, else by walking the tar headers through the
 * cache, which fetches (and keeps) only the blocks holding the headers it reads.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cache_priv.h"
#include "fill_priv.h"
#include "fillwin_priv.h"
#include "members_priv.h"
#include "prefetch_priv.h"
#include "table_priv.h"
#include "lib/tar.h"
#include "lib/workq.h"

#define MEMBER_ABSENT 1 /* member_find_cb(): the index has no such name */

struct member_find {
    const char *name;
    size_t name_len;
    struct cache_member *out;
};

static int member_find_cb(void *arg, const void *blob, size_t len)
{
    struct member_find *mf = arg;
    struct tar_index ix;
    struct tar_member m;
    if (tar_index_open(&ix, blob, len, NULL))
        return -EBADMSG;
    int rc = tar_index_find(&ix, mf->name, mf->name_len, &m);
    if (rc)
        return rc == -ENOENT ? MEMBER_ABSENT : rc;
    mf->out->data_off = m.data_off;
    mf->out->size = m.size;
    mf->out->pos = m.pos;
    mf->out->archive_size = ix.archive_size;
    return 0;
}

/* The key and version @o is bound to. 0, or -EINVAL before cache_obj_meta(). */
static int bound_version(struct cache_obj *o, struct index_key *k, uint64_t *version,
                         uint64_t *size)
{
    struct cache *c = o->c;
    pthread_mutex_lock(&c->mu);
    struct cver *v = o->v;
    if (v) {
        *k = v->key->k;
        *version = v->version;
        *size = v->meta.size;
    }
    pthread_mutex_unlock(&c->mu);
    return v ? 0 : -EINVAL;
}

/* Keeps a verified copy of @blob as @v's in-memory index, within CACHE_MEMBERS_MEM_MAX. */
static void members_keep(struct cache *c, struct cver *v, const void *blob, size_t len)
{
    struct tar_index ix;
    if (tar_index_open(&ix, blob, len, NULL) || tar_index_verify(&ix, NULL))
        return;
    void *copy = malloc(len);
    if (!copy)
        return;
    memcpy(copy, blob, len);
    pthread_mutex_lock(&c->mu);
    if (!v->members && c->members_mem + len <= CACHE_MEMBERS_MEM_MAX) {
        v->members = copy;
        v->members_len = len;
        c->members_mem += len;
        copy = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    free(copy);
}

struct members_copy {
    void *p;
    size_t len;
};

/* index_members_get()'s callback: a verified copy of the stored blob. */
static int members_copy(void *arg, const void *blob, size_t len)
{
    struct members_copy *mc = arg;
    struct tar_index ix;
    if (tar_index_open(&ix, blob, len, NULL) || tar_index_verify(&ix, NULL))
        return -EBADMSG;
    if (!(mc->p = malloc(len)))
        return -ENOMEM;
    memcpy(mc->p, blob, len);
    mc->len = len;
    return 0;
}

int cache_obj_member(struct cache_obj *o, const char *name, size_t name_len,
                     struct cache_member *out)
{
    CHECK_OBJ_NOTNULL(o, CACHE_OBJ_MAGIC);
    struct cache *c = o->c;
    struct member_find mf = {name, name_len, out};
    /* o holds its version, and a version's in-memory index lives as long as it */
    pthread_mutex_lock(&c->mu);
    struct cver *v = o->v;
    const void *mem = v ? v->members : NULL;
    size_t mem_len = v ? v->members_len : 0;
    struct index_key k;
    uint64_t version = 0, size = 0;
    if (v) {
        k = v->key->k;
        version = v->version;
        size = v->meta.size;
    }
    pthread_mutex_unlock(&c->mu);
    if (!v)
        return -EINVAL;
    int rc;
    if (mem) {
        rc = member_find_cb(&mf, mem, mem_len);
    } else {
        /* this version's first lookup: the stored index, verified, then kept in memory */
        struct members_copy mc = {NULL, 0};
        rc = index_members_get(c->ix, &k, version, members_copy, &mc);
        if (rc == -ENOENT)
            return -ENODATA; /* no index stored for this version */
        if (rc)
            return rc;
        rc = member_find_cb(&mf, mc.p, mc.len);
        if (rc == 0 || rc == MEMBER_ABSENT)
            members_keep(c, v, mc.p, mc.len);
        free(mc.p);
    }
    if (rc == MEMBER_ABSENT)
        return -ENOENT;
    if (!rc && out->archive_size != size)
        return -EBADMSG; /* an index of another archive: never serve its offsets */
    return rc;
}

int cache_member_lookup(const void *blob, size_t len, const char *name, size_t name_len,
                        struct cache_member *out)
{
    struct member_find mf = {name, name_len, out};
    int rc = member_find_cb(&mf, blob, len);
    return rc == MEMBER_ABSENT ? -ENOENT : rc;
}

/* Reads exactly @len bytes of @o at @pos, waiting for fetches (blocking: workers only). */
static int read_blocking(struct cache_obj *o, struct cache_pwait *p, uint64_t pos, void *buf,
                         size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = cache_obj_read(o, pos + got, (char *)buf + got, len - got, &p->w);
        if (n == -EAGAIN) {
            cache_pwait_wait(p);
            continue;
        }
        if (n < 0)
            return (int)n;
        if (n == 0)
            return -ENODATA; /* the object ended before the size its metadata gave */
        got += (size_t)n;
    }
    return 0;
}

/* The cache as tar_read_f: reads wait for the blocks to be fetched (blocking: workers only). */
struct cache_reader {
    struct cache_obj *o;
    struct cache_pwait p;
    char *buf;
    size_t cap;
};

static int cache_read(void *cls, uint64_t off, size_t len, const void **bytes,
                      struct errmsg *em)
{
    struct cache_reader *r = cls;
    (void)em;
    if (len > r->cap)
        return -E2BIG;
    int rc = read_blocking(r->o, &r->p, off, r->buf, len);
    *bytes = r->buf;
    return rc;
}

/* Walks the tar of @o (@size bytes) through the cache: the headers' blocks are fetched as the
 * walk reaches them, read-ahead included. */
static int build_walk(struct cache_obj *o, uint64_t size, void **blob, size_t *len,
                      struct errmsg *em)
{
    struct cache_reader r = {.o = o, .cap = TAR_DEF_MAX_META + TAR_BLOCK};
    if (!(r.buf = malloc(r.cap)))
        return -ENOMEM;
    cache_pwait_init(&r.p);
    pthread_mutex_lock(&o->c->mu);
    o->range_end = size; /* read-ahead stays inside the archive */
    o->wf_scan = 1;      /* what the walk passes is for the member reads that wait for it */
    pthread_mutex_unlock(&o->c->mu);
    int rc = tar_index_build(size, NULL, cache_read, &r, blob, len, em);
    cache_obj_cancel_wait(o, &r.p.w);
    pthread_mutex_lock(&o->c->mu);
    fillwin_detach_locked(o); /* as a scanner: its run keeps the bytes for the member reads */
    o->wf_scan = 0;
    pthread_mutex_unlock(&o->c->mu);
    cache_pwait_destroy(&r.p);
    free(r.buf);
    return rc;
}

/* A copy of the index of @o's version that another build made: from memory, else from the
 * index. 0, or -ENOENT when there is none. */
static int members_take(struct cache_obj *o, const struct index_key *k, uint64_t version,
                        void **blob, size_t *len)
{
    struct cache *c = o->c;
    pthread_mutex_lock(&c->mu);
    struct cver *v = o->v;
    if (v->members && (*blob = malloc(v->members_len))) {
        memcpy(*blob, v->members, v->members_len);
        *len = v->members_len;
    }
    pthread_mutex_unlock(&c->mu);
    if (*blob)
        return 0;
    struct members_copy mc = {NULL, 0};
    int rc = index_members_get(c->ix, k, version, members_copy, &mc);
    if (rc)
        return -ENOENT;
    *blob = mc.p;
    *len = mc.len;
    return 0;
}

int cache_obj_members_build(struct cache_obj *o, void **blob, size_t *len, struct errmsg *em)
{
    CHECK_OBJ_NOTNULL(o, CACHE_OBJ_MAGIC);
    struct cache *c = o->c;
    struct index_key k;
    uint64_t version, size;
    int rc = bound_version(o, &k, &version, &size), fd = -1;
    if (rc)
        return rc;
    *blob = NULL;
    /* Another build of this version runs (a concurrent member read's, or the fill-time one):
     * wait for it and take its index rather than walk the shard twice. Its end wakes the
     * version's waiters (so do its fills: then this looks again). */
    struct cache_pwait p;
    int tried = 0, whole = 0;
    cache_pwait_init(&p);
    for (;;) {
        pthread_mutex_lock(&c->mu);
        if (o->v->members_building > 0 && !c->closing) {
            cache_arm_locked(o, &o->v->waiters, &p.w);
            pthread_mutex_unlock(&c->mu);
            tried = 0;
            cache_pwait_wait(&p);
            continue;
        }
        if (!tried) {
            /* built since the caller looked (a build that ended before this job ran), or
             * just now by the one waited for */
            pthread_mutex_unlock(&c->mu);
            tried = 1;
            if (members_take(o, &k, version, blob, len) == 0) {
                cache_obj_cancel_wait(o, &p.w);
                cache_pwait_destroy(&p);
                return 0;
            }
            continue; /* none: this one builds, unless another began meanwhile */
        }
        whole = o->v->npresent == o->v->nblocks;
        o->v->members_building++; /* no other build beside this one */
        pthread_mutex_unlock(&c->mu);
        break;
    }
    cache_obj_cancel_wait(o, &p.w);
    cache_pwait_destroy(&p);
    /* whole on the SSD: pread the headers (opening it checks that nothing is missing) */
    if (whole && size && cache_obj_open_range(o, 0, size, &fd) == 0) {
        rc = tar_index_build_fd(fd, size, NULL, blob, len, em);
        close(fd);
    } else {
        rc = build_walk(o, size, blob, len, em);
    }
    if (!rc) {
        /* Kept with the version when it still is the record's (best effort: an unrecorded or
         * replaced version's index serves only the request that built it), before the
         * fill-time build may look for it. */
        (void)index_members_put(c->ix, &k, version, *blob, *len);
        members_keep(c, o->v, *blob, *len);
    }
    pthread_mutex_lock(&c->mu);
    o->v->members_building--;
    cache_wake_locked(&o->v->waiters); /* builds waiting for this one */
    if (rc)
        c->st.member_index_errors++;
    else
        c->st.member_index_builds++;
    pthread_mutex_unlock(&c->mu);
    if (rc) {
        free(*blob);
        *blob = NULL;
        /* the archive's faults; the cache's own (a failed fetch, the backend) pass as they are */
        if (rc == -EBADMSG || rc == -ENODATA || rc == -E2BIG)
            rc = -S3E_INVALID_ARCHIVE;
        return rc;
    }
    return 0;
}

/* ---- at fill time ------------------------------------------------------------------------ */

struct whole_job {
    struct cache *c;
    struct cver *v; /* held, with its key */
    int direct;     /* read around the page cache */
};

#define MEMBERS_DIRECT_ALIGN 4096

/* An O_DIRECT file as tar_read_f: each range is read in whole aligned pages. */
struct direct_reader {
    int fd;
    char *buf; /* aligned */
    size_t cap;
};

static int direct_read(void *cls, uint64_t off, size_t len, const void **bytes,
                       struct errmsg *em)
{
    struct direct_reader *r = cls;
    (void)em;
    uint64_t a0 = off / MEMBERS_DIRECT_ALIGN * MEMBERS_DIRECT_ALIGN;
    uint64_t a1 =
        (off + len + MEMBERS_DIRECT_ALIGN - 1) / MEMBERS_DIRECT_ALIGN * MEMBERS_DIRECT_ALIGN;
    if (a1 - a0 > r->cap)
        return -E2BIG;
    size_t got = 0;
    while (got < a1 - a0) {
        ssize_t n = pread(r->fd, r->buf + got, (size_t)(a1 - a0) - got, (off_t)(a0 + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* the end of the file: the last page is short */
        got += (size_t)n;
    }
    if (got < off + len - a0)
        return -ENODATA;
    *bytes = r->buf + (off - a0);
    return 0;
}

/* tar_index_build_fd() with O_DIRECT reads of @fd (opened O_DIRECT). Same results. */
static int build_direct(int fd, uint64_t size, void **blob, size_t *len)
{
    struct direct_reader r = {fd, NULL, TAR_DEF_MAX_META + TAR_BLOCK + 2 * MEMBERS_DIRECT_ALIGN};
    void *buf = NULL;
    if (posix_memalign(&buf, MEMBERS_DIRECT_ALIGN, r.cap))
        return -ENOMEM;
    r.buf = buf;
    int rc = tar_index_build(size, NULL, direct_read, &r, blob, len, NULL);
    free(buf);
    return rc;
}

static int members_present(void *arg, const void *blob, size_t len)
{
    (void)arg;
    (void)blob;
    (void)len;
    return 0;
}

/* Indexes a version that just became whole, from its data file (its pages are warm: the fill
 * wrote them), unless an index is there already. */
static void whole_run(void *arg)
{
    struct whole_job *j = arg;
    struct cache *c = j->c;
    struct cver *v = j->v;
    int fd = -1, rc;
    void *blob = NULL;
    size_t len = 0;
    int direct = 0;
    if (index_members_get(c->ix, &v->key->k, v->version, members_present, NULL) == -ENOENT) {
        char path[STORE_PATH_MAX];
        pthread_mutex_lock(&c->mu);
        int wfd;
        if (!c->closing && !v->dropped && !v->members_building && !v->members &&
            cache_ver_fd_locked(c, v, 0, &wfd) == 0) {
            if (j->direct) {
                cache_ver_path(c, v, path);
                fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
                direct = fd >= 0;
            }
            if (fd < 0)
                fd = fcntl(wfd, F_DUPFD_CLOEXEC, 0);
        }
        if (fd >= 0)
            v->members_building++;
        pthread_mutex_unlock(&c->mu);
        /* a member read may have stored one between the look above and the lock */
        if (fd >= 0 &&
            index_members_get(c->ix, &v->key->k, v->version, members_present, NULL) != -ENOENT) {
            close(fd);
            fd = -1;
            pthread_mutex_lock(&c->mu);
            v->members_building--;
            cache_wake_locked(&v->waiters);
            pthread_mutex_unlock(&c->mu);
        }
    }
    if (fd >= 0) {
        if (direct) {
            rc = build_direct(fd, v->meta.size, &blob, &len);
        } else {
            if (j->direct) /* no O_DIRECT here (tmpfs): pages read, then let go */
                posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
            rc = tar_index_build_fd(fd, v->meta.size, NULL, &blob, &len, NULL);
            if (j->direct)
                posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        }
        close(fd);
        if (!rc)
            rc = index_members_put(c->ix, &v->key->k, v->version, blob, len);
        free(blob);
        /* a failure is not counted here: a member read will try, and say why */
        pthread_mutex_lock(&c->mu);
        v->members_building--;
        cache_wake_locked(&v->waiters);
        if (rc == 0)
            c->st.member_index_builds++;
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_lock(&c->mu);
    struct ckey *ck = v->key;
    cache_ver_put_locked(c, v);
    cache_key_put_locked(c, ck);
    cache_job_done(c);
    pthread_mutex_unlock(&c->mu);
    free(j);
}

void members_note_whole_locked(struct cache *c, struct cver *v, int direct)
{
    const char *key = v->key->key;
    size_t kl = strlen(key);
    if (c->closing || kl < 4 || strcasecmp(key + kl - 4, ".tar") || v->unindexed ||
        !v->meta.size || v->members_building)
        return;
    struct whole_job *j = calloc(1, sizeof(*j));
    if (!j)
        return;
    j->c = c;
    j->v = v;
    j->direct = direct;
    v->refs++;
    v->key->refs++;
    if (cache_submit(c, WORKQ_LOW, whole_run, j)) {
        v->refs--;
        v->key->refs--;
        free(j);
    }
}

void cache_count_members(struct cache *c, uint64_t member_reads, uint64_t batches,
                         uint64_t batch_items, uint64_t batch_item_errors)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    pthread_mutex_lock(&c->mu);
    c->st.member_reads += member_reads;
    c->st.batches += batches;
    c->st.batch_items += batch_items;
    c->st.batch_item_errors += batch_item_errors;
    pthread_mutex_unlock(&c->mu);
}
