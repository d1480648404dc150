/*
 * objects.c: the object layer's context: the write mode's implementation (write_priv.h),
 * picked once from --write-mode, and what the writes of both modes share. The operations are
 * in object.c, listing.c, bucket.c and multipart.c.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "lib/s3err.h"
#include "objects.h"
#include "wb_mpu.h"
#include "write_priv.h"

int objects_new(const struct conf *cf, struct backend *be, struct cache *c, struct warm *warm,
                struct objects **out, struct errmsg *em)
{
    struct objects *o = calloc(1, sizeof(*o));
    if (!o) {
        errmsg_set(em, "cannot start the object layer: %s", strerror(ENOMEM));
        return -ENOMEM;
    }
    o->magic = OBJECTS_MAGIC;
    o->cf = cf;
    o->be = be;
    o->cache = c;
    o->warm = warm;
    /* the one place the write mode is asked: everything else calls through o->write */
    o->write = cf->write_mode == CONF_WRITE_BACK ? &write_back_ops : &write_through_ops;
    int rc = drain_open(cf, c, be, &o->dr, em);
    if (rc) {
        free(o);
        return rc;
    }
    drain_hold(o->dr, wb_mpu_staged_bytes(o)); /* write-back parts of a past run */
    *out = o;
    return 0;
}

/* The object layer left to the exiting process (objects_free): kept reachable, as it is still
 * owned, so that a leak checker (make test-asan) does not take it for a lost allocation. */
static struct objects *volatile objects_left;

int objects_free(struct objects *o)
{
    if (!o)
        return 0;
    if (drain_close(o->dr)) {
        objects_left = o; /* an upload outlived the shutdown timeout: left to the exiting process */
        return -EBUSY;
    }
    o->magic = 0;
    free(o);
    return 0;
}

int objects_flush_start(struct objects *o, const char *bucket, const char *prefix,
                        int64_t timeout_ms, drain_flush_cb cb, void *arg)
{
    return drain_flush_start(o->dr, bucket, prefix, timeout_ms, cb, arg);
}

void objects_flush_abort(struct objects *o)
{
    if (o)
        drain_flush_abort(o->dr);
}

/* After a drain (drain_on_cleaned): the other gateways forget what they may have taken from
 * the backend before it (a read served while the owner could not be reached). */
static void objects_drained(void *cls, const char *bucket, const char *key)
{
    objects_changed(cls, bucket, key, 0);
}

void objects_set_peer_ops(struct objects *o, const struct objects_peer_ops *ops)
{
    o->peer = *ops;
    drain_on_cleaned(o->dr, ops->notify ? objects_drained : NULL, o);
}

const struct objects_write_ops *objects_write_for(const struct objects *o, const char *bucket,
                                                  const char *key)
{
    if (o->write == &write_back_ops && !objects_keep(o, bucket, key))
        return &write_through_ops;
    return o->write;
}

int objects_keep(const struct objects *o, const char *bucket, const char *key)
{
    return !o->peer.keep || o->peer.keep(o->peer.cls, bucket, key);
}

/* The notice this thread collects into (objects_notice_begin), or NULL. */
static __thread struct objects_notice *objects_cur;

struct objects_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
};

static void objects_wait_done(void *cls)
{
    struct objects_wait *w = cls;
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Tells the cluster of @ch and waits until every gateway answered or could not be told. */
static void objects_tell_wait(const struct objects *o, const struct objects_change *ch, size_t n)
{
    struct objects_wait w = {.done = 0};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    if (o->peer.notify(o->peer.cls, ch, n, objects_wait_done, &w)) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
    }
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
}

/* Appends a copy of the change to @nt. 0 or -ENOMEM (@nt unchanged). */
static int objects_notice_add(struct objects_notice *nt, const char *bucket, const char *key,
                              int how)
{
    if (nt->n == nt->cap) {
        size_t cap = nt->cap ? 2 * nt->cap : 8;
        struct objects_change *ch = realloc(nt->ch, cap * sizeof(*ch));
        if (!ch)
            return -ENOMEM;
        nt->ch = ch;
        nt->cap = cap;
    }
    struct objects_change *c = &nt->ch[nt->n];
    c->bucket = strdup(bucket);
    c->key = key ? strdup(key) : NULL;
    c->rewarm = !!(how & OBJECTS_CH_REWARM);
    c->stored = !!(how & OBJECTS_CH_STORED);
    if (!c->bucket || (key && !c->key)) {
        free(c->bucket);
        free(c->key);
        return -ENOMEM;
    }
    nt->n++;
    return 0;
}

void objects_changed(const struct objects *o, const char *bucket, const char *key, int how)
{
    if (!o->peer.notify)
        return;
    if (objects_cur && !objects_notice_add(objects_cur, bucket, key, how))
        return;
    /* no notice is open (or it cannot grow): this one is told now, and waited for */
    struct objects_change one = {(char *)bucket, (char *)key, !!(how & OBJECTS_CH_REWARM),
                                 !!(how & OBJECTS_CH_STORED)};
    objects_tell_wait(o, &one, 1);
}

void objects_notice_begin(struct objects_notice *nt)
{
    memset(nt, 0, sizeof(*nt));
    objects_cur = nt;
}

void objects_notice_end(struct objects_notice *nt)
{
    if (objects_cur == nt)
        objects_cur = NULL;
}

int objects_notice_send(const struct objects *o, const struct objects_notice *nt,
                        objects_notified_f *done, void *cls)
{
    if (!o->peer.notify || !nt->n)
        return 0;
    return o->peer.notify(o->peer.cls, nt->ch, nt->n, done, cls);
}

void objects_notice_free(struct objects_notice *nt)
{
    for (size_t i = 0; i < nt->n; i++) {
        free(nt->ch[i].bucket);
        free(nt->ch[i].key);
    }
    free(nt->ch);
    memset(nt, 0, sizeof(*nt));
}

int objects_stage_direct(const struct objects *o)
{
    return o->write->stage_direct;
}

int objects_admit(struct objects *o, uint64_t bytes, uint64_t *admitted)
{
    return o->write->admit(o, bytes, admitted);
}

int objects_admit_more(struct objects *o, uint64_t total, uint64_t *admitted)
{
    return o->write->admit_more(o, total, admitted);
}

void objects_unadmit(struct objects *o, uint64_t admitted)
{
    if (admitted)
        drain_unadmit(o->dr, admitted);
}

int objects_copy_conditions(const struct cond_hdrs *cond, const struct be_meta *src)
{
    int rc = cond_check(cond, src->etag, src->mtime_ns / 1000000000ll, 1);
    return rc == -S3E_NOT_MODIFIED ? -S3E_PRECONDITION_FAILED : rc;
}
