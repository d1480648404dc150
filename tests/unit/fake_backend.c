/*
 * fake_backend.c: the in-memory test backend of fake_backend.h. Only head and
 * get are implemented (the cache needs no more); everything else is NULL.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_backend.h"
#include "lib/s3err.h"

struct fake_obj {
    struct fake_obj *next;
    char bucket[64];
    char *key;
    struct be_meta meta;
    unsigned char *data; /* NULL: generated from seed */
    uint64_t seed;
};

unsigned char fake_byte(uint64_t seed, uint64_t i)
{
    uint64_t x = (i >> 3) * 0x9e3779b97f4a7c15ULL + seed * 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 29;
    return (unsigned char)((x >> (8 * (i & 7))) ^ i);
}

static struct fake_obj *find(struct fake_be *fb, const char *bucket, const char *key)
{
    for (struct fake_obj *o = fb->objs; o; o = o->next)
        if (strcmp(o->bucket, bucket) == 0 && strcmp(o->key, key) == 0)
            return o;
    return NULL;
}

static void obj_free(struct fake_obj *o)
{
    free(o->key);
    free(o->data);
    free(o);
}

void fake_be_del(struct fake_be *fb, const char *bucket, const char *key)
{
    pthread_mutex_lock(&fb->mu);
    for (struct fake_obj **p = &fb->objs; *p; p = &(*p)->next) {
        if (strcmp((*p)->bucket, bucket) == 0 && strcmp((*p)->key, key) == 0) {
            struct fake_obj *o = *p;
            *p = o->next;
            obj_free(o);
            break;
        }
    }
    pthread_mutex_unlock(&fb->mu);
}

static void put(struct fake_be *fb, const char *bucket, const char *key, const void *data,
                uint64_t len, uint64_t seed)
{
    fake_be_del(fb, bucket, key);
    struct fake_obj *o = calloc(1, sizeof(*o));
    snprintf(o->bucket, sizeof(o->bucket), "%s", bucket);
    o->key = strdup(key);
    if (data) {
        o->data = malloc(len ? len : 1);
        memcpy(o->data, data, len);
    }
    o->seed = seed;
    pthread_mutex_lock(&fb->mu);
    o->meta.size = len;
    o->meta.mtime_ns = 1700000000000000000LL + (int64_t)fb->etag_seq * 1000000000LL;
    snprintf(o->meta.etag, sizeof(o->meta.etag), "%032x", ++fb->etag_seq);
    snprintf(o->meta.content_type, sizeof(o->meta.content_type), "application/octet-stream");
    snprintf(o->meta.usermeta, sizeof(o->meta.usermeta), "k:v%u\n", fb->etag_seq);
    o->next = fb->objs;
    fb->objs = o;
    pthread_mutex_unlock(&fb->mu);
}

void fake_be_put(struct fake_be *fb, const char *bucket, const char *key, const void *data,
                 uint64_t len)
{
    put(fb, bucket, key, data ? data : "", len, 0);
}

void fake_be_put_gen(struct fake_be *fb, const char *bucket, const char *key, uint64_t size,
                     uint64_t seed)
{
    put(fb, bucket, key, NULL, size, seed);
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

static int fake_head(struct backend *be, const char *bucket, const char *key,
                     struct be_meta *out)
{
    struct fake_be *fb = be->priv;
    pthread_mutex_lock(&fb->mu);
    fb->n_head++;
    unsigned delay = fb->meta_delay_ms;
    int fail = fb->fail_all;
    pthread_mutex_unlock(&fb->mu);
    if (delay)
        sleep_ms(delay);
    if (fail)
        return fail;
    pthread_mutex_lock(&fb->mu);
    struct fake_obj *o = find(fb, bucket, key);
    if (o)
        *out = o->meta;
    pthread_mutex_unlock(&fb->mu);
    return o ? 0 : -S3E_NO_SUCH_KEY;
}

static int fake_get(struct backend *be, const char *bucket, const char *key, uint64_t off,
                    uint64_t len, const struct be_sink *sink)
{
    struct fake_be *fb = be->priv;
    pthread_mutex_lock(&fb->mu);
    unsigned nr = ++fb->n_get;
    if (nr <= FAKE_GET_LOG) {
        fb->get_log[nr - 1].off = off;
        fb->get_log[nr - 1].len = len;
    }
    unsigned delay = fb->meta_delay_ms;
    int fail = fb->fail_all;
    int fail_mid = fb->fail_get_at == nr;
    uint64_t short_after = fb->short_after;
    size_t chunk = fb->chunk ? fb->chunk : 65536;
    struct fake_obj *o = find(fb, bucket, key);
    struct be_meta m;
    unsigned char *data = NULL;
    uint64_t seed = 0;
    if (o) {
        m = o->meta;
        seed = o->seed;
        if (o->data) { /* a snapshot, so a concurrent put cannot pull it away */
            data = malloc(m.size ? m.size : 1);
            memcpy(data, o->data, m.size);
        }
    }
    pthread_mutex_unlock(&fb->mu);
    if (delay)
        sleep_ms(delay);
    if (fail) {
        free(data);
        return fail;
    }
    if (!o)
        return -S3E_NO_SUCH_KEY;
    int rc = 0;
    if (off > m.size || (off == m.size && m.size)) {
        free(data);
        return -S3E_INVALID_RANGE;
    }
    uint64_t end = len == UINT64_MAX || off + len > m.size ? m.size : off + len;
    if ((rc = sink->on_meta(sink->cls, &m)))
        goto out;
    pthread_mutex_lock(&fb->mu);
    if (fb->hold) {
        fb->held++;
        pthread_cond_broadcast(&fb->cv);
        while (fb->hold)
            pthread_cond_wait(&fb->cv, &fb->mu);
        fb->held--;
    }
    pthread_mutex_unlock(&fb->mu);
    unsigned char *buf = malloc(chunk);
    uint64_t sent = 0;
    for (uint64_t p = off; p < end;) {
        size_t n = (size_t)(end - p < chunk ? end - p : chunk);
        if (fail_mid && sent + n > (end - off) / 2) {
            rc = -EIO;
            break;
        }
        if (short_after && sent + n > short_after)
            break;
        if (data)
            memcpy(buf, data + p, n);
        else
            for (size_t i = 0; i < n; i++)
                buf[i] = fake_byte(seed, p + i);
        if ((rc = sink->on_data(sink->cls, buf, n)))
            break;
        p += n;
        sent += n;
        pthread_mutex_lock(&fb->mu);
        fb->bytes_sent += n;
        pthread_mutex_unlock(&fb->mu);
    }
    free(buf);
out:
    free(data);
    return rc;
}

/* PUT from @fd (the drainer's upload): fails with fail_all like the rest. */
static int fake_put_op(struct backend *be, const char *bucket, const char *key, int fd,
                       uint64_t len, const struct be_meta *meta, const int *cancel)
{
    struct fake_be *fb = be->priv;
    (void)meta;
    if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
        return -ECANCELED;
    pthread_mutex_lock(&fb->mu);
    fb->n_put++;
    int fail = fb->fail_all;
    pthread_mutex_unlock(&fb->mu);
    if (fail)
        return fail;
    unsigned char *data = malloc(len ? len : 1);
    if (!data)
        return -ENOMEM;
    for (uint64_t got = 0; got < len;) {
        ssize_t n = pread(fd, data + got, (size_t)(len - got), (off_t)got);
        if (n <= 0) {
            free(data);
            return -EIO;
        }
        got += (uint64_t)n;
    }
    put(fb, bucket, key, data, len, 0);
    free(data);
    return 0;
}

static const struct backend_ops fake_ops = {
    .scheme = "fake",
    .head = fake_head,
    .get = fake_get,
    .put = fake_put_op,
};

struct fake_be *fake_be_new(void)
{
    struct fake_be *fb = calloc(1, sizeof(*fb));
    fb->be.magic = BACKEND_MAGIC;
    fb->be.ops = &fake_ops;
    fb->be.priv = fb;
    pthread_mutex_init(&fb->mu, NULL);
    pthread_cond_init(&fb->cv, NULL);
    return fb;
}

void fake_be_free(struct fake_be *fb)
{
    if (!fb)
        return;
    while (fb->objs) {
        struct fake_obj *o = fb->objs;
        fb->objs = o->next;
        obj_free(o);
    }
    pthread_mutex_destroy(&fb->mu);
    pthread_cond_destroy(&fb->cv);
    free(fb);
}

void fake_be_hold(struct fake_be *fb, int on)
{
    pthread_mutex_lock(&fb->mu);
    fb->hold = on;
    pthread_cond_broadcast(&fb->cv);
    pthread_mutex_unlock(&fb->mu);
}

int fake_be_wait_held(struct fake_be *fb, unsigned n)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 5;
    int rc = 0;
    pthread_mutex_lock(&fb->mu);
    while (fb->held < n && rc == 0)
        rc = pthread_cond_timedwait(&fb->cv, &fb->mu, &dl);
    rc = fb->held >= n ? 0 : -ETIMEDOUT;
    pthread_mutex_unlock(&fb->mu);
    return rc;
}

unsigned fake_be_gets(struct fake_be *fb)
{
    pthread_mutex_lock(&fb->mu);
    unsigned n = fb->n_get;
    pthread_mutex_unlock(&fb->mu);
    return n;
}

unsigned fake_be_heads(struct fake_be *fb)
{
    pthread_mutex_lock(&fb->mu);
    unsigned n = fb->n_head;
    pthread_mutex_unlock(&fb->mu);
    return n;
}
