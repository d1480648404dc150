/*
 * obj.c: request handles (cache.h: cache_obj_get, cache_obj_cancel_wait, cache_obj_release,
 * cache_obj_fetch_none, cache_obj_outcome) and pins (cache_pin). A handle holds its key and,
 * once cache_obj_meta() bound it (lookup.c), its version; what it reads is in fill.c. Released,
 * it counts its outcome, gives its bytes' reads to the policy and lets an idle version's
 * ended windows and bypass bytes go.
 */
#include <errno.h>
#include <stdlib.h>

#include "cache_priv.h"
#include "evict_priv.h"
#include "fill_priv.h"
#include "fillwin_priv.h"
#include "table_priv.h"
#include "lib/s3err.h"

/* ---- handles --------------------------------------------------------------------------- */

int cache_obj_get(struct cache *c, const char *bucket, const char *key, struct cache_obj **out)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    struct cache_obj *h = calloc(1, sizeof(*h));
    struct index_key k;
    if (!h)
        return -ENOMEM;
    index_key_make(bucket, key, &k);
    policy_touch(c->pol, k.b, k.len, s3c_real_ns()); /* its prefix is in use */
    pthread_mutex_lock(&c->mu);
    h->k = cache_key_get_locked(c, bucket, key, &k);
    pthread_mutex_unlock(&c->mu);
    if (!h->k) {
        free(h);
        return -ENOMEM;
    }
    h->magic = CACHE_OBJ_MAGIC;
    h->c = c;
    h->next_pos = UINT64_MAX;
    h->range_end = UINT64_MAX;
    *out = h;
    return 0;
}

int cache_obj_cancel_wait(struct cache_obj *o, struct cache_waiter *w)
{
    CHECK_OBJ_NOTNULL(o, CACHE_OBJ_MAGIC);
    struct cache *c = o->c;
    /* Without the lock when there is nothing to undo, as for every hit: only the owner arms
     * @w and sets o->w_armed (in its own calls), so neither becomes set behind its back; a
     * waker may clear w->armed meanwhile, which is the answer 0 the lock would give too. */
    if (!__atomic_load_n(&w->armed, __ATOMIC_ACQUIRE) && o->w_armed != w)
        return 0;
    pthread_mutex_lock(&c->mu);
    int was = w->armed;
    if (w->armed) {
        if (!cache_unlink_waiter(&o->k->waiters, w) && o->v)
            cache_unlink_waiter(&o->v->waiters, w);
        __atomic_store_n(&w->armed, 0, __ATOMIC_RELEASE);
    }
    if (o->w_armed == w)
        o->w_armed = NULL;
    pthread_mutex_unlock(&c->mu);
    return was;
}

/* The request whose lookup created this version is its miss, and one that starts the first
 * fetch meanwhile is not another. Done without having started any fetch (a HEAD, a failed
 * precondition), it leaves the next request that does to be a miss. */
static void fetch_none_locked(struct cache_obj *o)
{
    if (o->v->first_fetch_owned && o->how == CACHE_MISS && !o->guessed)
        o->v->first_fetch_owned = 0;
}

void cache_obj_release(struct cache_obj *o)
{
    if (!o)
        return;
    CHECK_OBJ_NOTNULL(o, CACHE_OBJ_MAGIC);
    struct cache *c = o->c;
    pthread_mutex_lock(&c->mu);
    struct cache_waiter *w = o->w_armed;
    if (w && w->armed) {
        if (!cache_unlink_waiter(&o->k->waiters, w) && o->v)
            cache_unlink_waiter(&o->v->waiters, w);
        __atomic_store_n(&w->armed, 0, __ATOMIC_RELEASE);
    }
    fillwin_detach_locked(o);
    if (o->v) {
        fetch_none_locked(o);
        if (o->from_source)
            o->v->src_readers--;
        switch (o->how) {
        case CACHE_HIT: c->st.hits++; break;
        case CACHE_MISS: c->st.misses++; break;
        case CACHE_COALESCED: c->st.coalesced++; break;
        case CACHE_BYPASS: c->st.bypassed++; break;
        case CACHE_PARTIAL: c->st.partial++; break;
        }
        evict_touch_locked(c, o->v, 0);
        if (o->opened && !o->internal) {
            uint64_t asked = o->read_end - o->read_off, hb = S3C_MIN(o->hit_bytes, asked);
            c->st.hit_bytes += hb;
            c->st.miss_bytes += asked - hb;
            struct policy_read pr = {o->v->meta.size, o->read_end - o->read_off,
                                     S3C_MIN(o->hit_bytes, o->read_end - o->read_off),
                                     o->how != CACHE_HIT};
            policy_read(c->pol, o->k->k.b, o->k->k.len, &pr, s3c_real_ns());
        }
        /* the last reader gone: the windows of its ended fills go back to the pool */
        unsigned running = 0;
        for (struct fetch *f = o->v->fetches; f; f = f->next)
            running += f->running;
        if (o->v->refs <= 1 + running + (o->k->cur == o->v)) {
            fillwin_idle_locked(c, o->v);
            fillwin_orphan_locked(c, o->v);
        }
    }
    if (o->v && o->v->refs <= 1 + (o->k->cur == o->v))
        fill_drop_finished_locked(o->v); /* the last reader: bypass bytes go */
    cache_ver_put_locked(c, o->v);
    cache_key_put_locked(c, o->k);
    evict_kick_locked(c);
    pthread_mutex_unlock(&c->mu);
    o->magic = 0;
    free(o);
}

void cache_obj_fetch_none(struct cache_obj *o)
{
    CHECK_OBJ_NOTNULL(o, CACHE_OBJ_MAGIC);
    pthread_mutex_lock(&o->c->mu);
    if (o->v)
        fetch_none_locked(o);
    pthread_mutex_unlock(&o->c->mu);
}

/* No lock: o->how changes only in calls made on @o by its owner, the caller. */
enum cache_outcome cache_obj_outcome(struct cache_obj *o)
{
    CHECK_OBJ_NOTNULL(o, CACHE_OBJ_MAGIC);
    return o->how;
}

/* ---- pins ------------------------------------------------------------------------------ */

int cache_pin(struct cache *c, const char *bucket, const char *key, int on)
{
    CHECK_OBJ_NOTNULL(c, CACHE_MAGIC);
    struct index_key k;
    index_key_make(bucket, key, &k);
    pthread_mutex_lock(&c->mu);
    struct ckey *ck = cache_key_get_locked(c, bucket, key, &k);
    if (!ck) {
        pthread_mutex_unlock(&c->mu);
        return -ENOMEM;
    }
    cache_key_load_locked(c, ck);
    struct cver *v = ck->cur;
    int rc = -ENOENT;
    uint64_t version = 0;
    if (v) {
        version = v->version;
        v->refs++;
    }
    pthread_mutex_unlock(&c->mu);
    if (v)
        cache_ver_record(c, v); /* a version only in memory is indexed first */
    if (v)
        rc = index_set_pinned(c->ix, &k, version, on);
    if (rc == -ESTALE)
        rc = -ENOENT;
    pthread_mutex_lock(&c->mu);
    if (v && !rc) {
        if (on)
            v->flags |= INDEX_F_PINNED;
        else
            v->flags &= ~INDEX_F_PINNED;
        c->evict_gen += !on; /* evictable again */
    }
    cache_ver_put_locked(c, v);
    cache_key_put_locked(c, ck);
    pthread_mutex_unlock(&c->mu);
    cache_unlinks_run(c);
    return rc;
}
