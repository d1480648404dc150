/*
 * fake_backend.c: the in-memory test backend of fake_backend.h. fake_be_new()
 * implements head, get and put (the cache needs no more; everything else is
 * NULL); fake_be_new_full() adds copy, del, list and multipart (second half).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/mpu.h"
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
    while (fb->hold_head) { /* the answer is on its way: what it says is already fixed */
        fb->held++;
        pthread_cond_broadcast(&fb->cv);
        while (fb->hold_head)
            pthread_cond_wait(&fb->cv, &fb->mu);
        fb->held--;
    }
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
        snprintf(fb->get_log[nr - 1].key, sizeof(fb->get_log[nr - 1].key), "%s", key);
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
    int fail = fb->fail_all ? fb->fail_all : fb->fail_writes;
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

static void uploads_free(struct fake_be *fb);

void fake_be_free(struct fake_be *fb)
{
    if (!fb)
        return;
    uploads_free(fb);
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

void fake_be_hold_heads(struct fake_be *fb, int on)
{
    pthread_mutex_lock(&fb->mu);
    fb->hold_head = on;
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

/* ---- fake_be_new_full(): writes, listings, multipart ------------------------------------- */

struct fake_part {
    unsigned number;
    char etag[BE_ETAG_MAX];
    unsigned char *data;
    uint64_t size;
};

struct fake_upload {
    struct fake_upload *next;
    char bucket[64];
    char *key;
    char id[BE_UPLOAD_ID_MAX];
    struct be_meta meta;
    struct fake_part *parts; /* by number, unsorted */
    size_t nparts;
    int64_t initiated_ns;
};

static void upload_free_one(struct fake_upload *u)
{
    for (size_t i = 0; i < u->nparts; i++)
        free(u->parts[i].data);
    free(u->parts);
    free(u->key);
    free(u);
}

static void uploads_free(struct fake_be *fb)
{
    while (fb->uploads) {
        struct fake_upload *u = fb->uploads;
        fb->uploads = u->next;
        upload_free_one(u);
    }
}

/* The bytes of @o (a copy, malloc'd), under fb->mu. */
static unsigned char *obj_bytes(const struct fake_obj *o)
{
    unsigned char *d = malloc(o->meta.size ? o->meta.size : 1);
    if (!d)
        return NULL;
    if (o->data)
        memcpy(d, o->data, o->meta.size);
    else
        for (uint64_t i = 0; i < o->meta.size; i++)
            d[i] = fake_byte(o->seed, i);
    return d;
}

static int write_fail(struct fake_be *fb)
{
    return fb->fail_all ? fb->fail_all : fb->fail_writes;
}

int fake_be_has(struct fake_be *fb, const char *bucket, const char *key, struct be_meta *meta)
{
    pthread_mutex_lock(&fb->mu);
    struct fake_obj *o = find(fb, bucket, key);
    if (o && meta)
        *meta = o->meta;
    pthread_mutex_unlock(&fb->mu);
    return o != NULL;
}

unsigned char *fake_be_data(struct fake_be *fb, const char *bucket, const char *key,
                            uint64_t *len)
{
    pthread_mutex_lock(&fb->mu);
    struct fake_obj *o = find(fb, bucket, key);
    unsigned char *d = o ? obj_bytes(o) : NULL;
    if (o)
        *len = o->meta.size;
    pthread_mutex_unlock(&fb->mu);
    return d;
}

unsigned fake_be_uploads(struct fake_be *fb)
{
    unsigned n = 0;
    pthread_mutex_lock(&fb->mu);
    for (struct fake_upload *u = fb->uploads; u; u = u->next)
        n++;
    pthread_mutex_unlock(&fb->mu);
    return n;
}

/* Stores @data as (@bucket, @key) with @meta's headers (a new ETag unless @etag). */
static void put_with_meta(struct fake_be *fb, const char *bucket, const char *key,
                          const unsigned char *data, uint64_t len, const struct be_meta *meta,
                          const char *etag)
{
    put(fb, bucket, key, data ? data : (const unsigned char *)"", len, 0);
    pthread_mutex_lock(&fb->mu);
    struct fake_obj *o = find(fb, bucket, key);
    if (o && meta) {
        struct be_meta m = *meta;
        m.size = o->meta.size;
        m.mtime_ns = o->meta.mtime_ns;
        memcpy(m.etag, o->meta.etag, sizeof(m.etag));
        o->meta = m;
    }
    if (o && etag)
        snprintf(o->meta.etag, sizeof(o->meta.etag), "%s", etag);
    pthread_mutex_unlock(&fb->mu);
}

static int fake_copy(struct backend *be, const char *src_bucket, const char *src_key,
                     const char *dst_bucket, const char *dst_key, const struct be_meta *replace,
                     struct be_meta *out)
{
    struct fake_be *fb = be->priv;
    pthread_mutex_lock(&fb->mu);
    fb->n_copy++;
    int fail = write_fail(fb);
    struct fake_obj *o = fail ? NULL : find(fb, src_bucket, src_key);
    unsigned char *d = o ? obj_bytes(o) : NULL;
    struct be_meta m;
    if (o)
        m = replace ? *replace : o->meta;
    uint64_t len = o ? o->meta.size : 0;
    pthread_mutex_unlock(&fb->mu);
    if (fail)
        return fail;
    if (!o)
        return -S3E_NO_SUCH_KEY;
    put_with_meta(fb, dst_bucket, dst_key, d, len, &m, NULL);
    free(d);
    return fake_be_has(fb, dst_bucket, dst_key, out) ? 0 : -EIO;
}

static int fake_del_op(struct backend *be, const char *bucket, const char *key)
{
    struct fake_be *fb = be->priv;
    pthread_mutex_lock(&fb->mu);
    fb->n_del++;
    int fail = write_fail(fb);
    pthread_mutex_unlock(&fb->mu);
    if (fail)
        return fail;
    fake_be_del(fb, bucket, key);
    return 0;
}

static int key_cmp(const void *a, const void *b)
{
    return strcmp(((const struct be_list_entry *)a)->key, ((const struct be_list_entry *)b)->key);
}

static int fake_list(struct backend *be, const struct be_list_req *rq, struct be_list_page *out)
{
    struct fake_be *fb = be->priv;
    const char *prefix = rq->prefix ? rq->prefix : "";
    size_t pl = strlen(prefix), n = 0, cap = 16;
    struct be_list_entry *all = calloc(cap, sizeof(*all));
    memset(out, 0, sizeof(*out));
    if (!all)
        return -ENOMEM;
    pthread_mutex_lock(&fb->mu);
    fb->n_list++;
    int fail = fb->fail_all;
    for (struct fake_obj *o = fb->objs; o && !fail; o = o->next) {
        if (strcmp(o->bucket, rq->bucket) || strncmp(o->key, prefix, pl))
            continue;
        if (n == cap) {
            cap *= 2;
            all = realloc(all, cap * sizeof(*all));
        }
        memset(&all[n], 0, sizeof(all[n]));
        all[n].key = strdup(o->key);
        all[n].size = o->meta.size;
        all[n].mtime_ns = o->meta.mtime_ns;
        memcpy(all[n].etag, o->meta.etag, sizeof(all[n].etag));
        n++;
    }
    pthread_mutex_unlock(&fb->mu);
    if (fail) {
        free(all);
        return fail;
    }
    qsort(all, n, sizeof(*all), key_cmp);
    /* roll up under the delimiter, skip to after the marker, cut at max_keys */
    struct be_list_entry *pg = calloc(n ? n : 1, sizeof(*pg));
    size_t k = 0;
    unsigned max = rq->max_keys ? rq->max_keys : 1000;
    for (size_t i = 0; i < n; i++) {
        char *d = rq->delimiter && *rq->delimiter ? strstr(all[i].key + pl, rq->delimiter)
                                                  : NULL;
        if (d) {
            d[strlen(rq->delimiter)] = '\0'; /* the common prefix */
            all[i].is_prefix = 1;
        }
        if ((rq->marker && strcmp(all[i].key, rq->marker) <= 0) ||
            (k && !strcmp(pg[k - 1].key, all[i].key))) {
            free(all[i].key);
            continue;
        }
        if (k == max) {
            out->truncated = 1;
            for (; i < n; i++)
                free(all[i].key);
            break;
        }
        pg[k++] = all[i];
    }
    free(all);
    out->entries = pg;
    out->n = k;
    if (out->truncated && k)
        out->next_marker = strdup(pg[k - 1].key);
    return 0;
}

static struct fake_upload *upload_find(struct fake_be *fb, const char *bucket, const char *key,
                                       const char *id)
{
    for (struct fake_upload *u = fb->uploads; u; u = u->next)
        if (!strcmp(u->id, id) && !strcmp(u->bucket, bucket) && !strcmp(u->key, key))
            return u;
    return NULL;
}

static int fake_mp_create(struct backend *be, const char *bucket, const char *key,
                          const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX])
{
    struct fake_be *fb = be->priv;
    struct fake_upload *u = calloc(1, sizeof(*u));
    if (!u)
        return -ENOMEM;
    pthread_mutex_lock(&fb->mu);
    fb->n_mp_create++;
    int fail = write_fail(fb);
    if (!fail) {
        snprintf(u->bucket, sizeof(u->bucket), "%s", bucket);
        u->key = strdup(key);
        snprintf(u->id, sizeof(u->id), "fake-upload-%u", ++fb->upload_seq);
        u->meta = *meta;
        u->initiated_ns = 1700000000000000000LL + fb->upload_seq;
        u->next = fb->uploads;
        fb->uploads = u;
        snprintf(upload_id, BE_UPLOAD_ID_MAX, "%s", u->id);
    }
    pthread_mutex_unlock(&fb->mu);
    if (fail)
        free(u);
    return fail;
}

/* Records part @number of @u (replacing an earlier one), taking @data. Under fb->mu. */
static void part_set(struct fake_upload *u, unsigned number, const char *etag,
                     unsigned char *data, uint64_t size)
{
    struct fake_part *p = NULL;
    for (size_t i = 0; i < u->nparts; i++)
        if (u->parts[i].number == number)
            p = &u->parts[i];
    if (!p) {
        u->parts = realloc(u->parts, (u->nparts + 1) * sizeof(*u->parts));
        p = &u->parts[u->nparts++];
        memset(p, 0, sizeof(*p));
    }
    free(p->data);
    p->number = number;
    snprintf(p->etag, sizeof(p->etag), "%s", etag);
    p->data = data;
    p->size = size;
}

static int fake_mp_put_part(struct backend *be, const char *bucket, const char *key,
                            const char *upload_id, int fd, const struct be_part *part)
{
    struct fake_be *fb = be->priv;
    unsigned char *d = malloc(part->size ? part->size : 1);
    if (!d)
        return -ENOMEM;
    for (uint64_t got = 0; got < part->size;) {
        ssize_t n = pread(fd, d + got, (size_t)(part->size - got), (off_t)got);
        if (n <= 0) {
            free(d);
            return -EIO;
        }
        got += (uint64_t)n;
    }
    pthread_mutex_lock(&fb->mu);
    fb->n_mp_part++;
    int rc = write_fail(fb);
    struct fake_upload *u = rc ? NULL : upload_find(fb, bucket, key, upload_id);
    if (!rc && !u)
        rc = -S3E_NO_SUCH_UPLOAD;
    if (!rc) {
        part_set(u, part->number, part->etag, d, part->size);
        d = NULL;
    }
    pthread_mutex_unlock(&fb->mu);
    free(d);
    return rc;
}

static int fake_mp_copy_part(struct backend *be, const char *bucket, const char *key,
                             const char *upload_id, unsigned part_number, const char *src_bucket,
                             const char *src_key, uint64_t off, uint64_t len, struct be_part *out)
{
    struct fake_be *fb = be->priv;
    pthread_mutex_lock(&fb->mu);
    fb->n_mp_part++;
    int rc = write_fail(fb);
    struct fake_upload *u = rc ? NULL : upload_find(fb, bucket, key, upload_id);
    struct fake_obj *o = rc ? NULL : find(fb, src_bucket, src_key);
    if (!rc && !u)
        rc = -S3E_NO_SUCH_UPLOAD;
    else if (!rc && !o)
        rc = -S3E_NO_SUCH_KEY;
    else if (!rc && off + len > o->meta.size)
        rc = -S3E_INVALID_RANGE;
    if (!rc) {
        unsigned char *all = obj_bytes(o), *d = malloc(len ? len : 1);
        memcpy(d, all + off, len);
        free(all);
        memset(out, 0, sizeof(*out));
        out->number = part_number;
        out->size = len;
        snprintf(out->etag, sizeof(out->etag), "%032x", ++fb->etag_seq);
        part_set(u, part_number, out->etag, d, len);
    }
    pthread_mutex_unlock(&fb->mu);
    return rc;
}

static int fake_mp_complete(struct backend *be, const char *bucket, const char *key,
                            const char *upload_id, const struct be_part *parts, size_t n,
                            struct be_meta *out)
{
    struct fake_be *fb = be->priv;
    pthread_mutex_lock(&fb->mu);
    fb->n_mp_complete++;
    int rc = write_fail(fb);
    struct fake_upload **pp = &fb->uploads;
    while (!rc && *pp && (strcmp((*pp)->id, upload_id) || strcmp((*pp)->bucket, bucket) ||
                          strcmp((*pp)->key, key)))
        pp = &(*pp)->next;
    struct fake_upload *u = rc ? NULL : *pp;
    if (!rc && !u)
        rc = -S3E_NO_SUCH_UPLOAD;
    uint64_t total = 0;
    const struct fake_part **use = calloc(n ? n : 1, sizeof(*use));
    for (size_t i = 0; !rc && i < n; i++) {
        if (i && parts[i].number <= parts[i - 1].number) {
            rc = -S3E_INVALID_PART_ORDER;
            break;
        }
        for (size_t j = 0; j < u->nparts; j++)
            if (u->parts[j].number == parts[i].number &&
                mpu_etag_match(parts[i].etag, u->parts[j].etag))
                use[i] = &u->parts[j];
        if (!use[i])
            rc = -S3E_INVALID_PART;
        else
            total += use[i]->size;
    }
    unsigned char *d = NULL;
    if (!rc && !(d = malloc(total ? total : 1)))
        rc = -ENOMEM;
    for (size_t i = 0, off = 0; !rc && i < n; off += use[i]->size, i++)
        memcpy(d + off, use[i]->data, use[i]->size);
    struct be_meta meta;
    char etag[BE_ETAG_MAX];
    if (!rc) {
        meta = u->meta;
        snprintf(etag, sizeof(etag), "%032x-%zu", ++fb->etag_seq, n);
        *pp = u->next;
    }
    pthread_mutex_unlock(&fb->mu);
    free(use);
    if (rc)
        return rc;
    put_with_meta(fb, bucket, key, d, total, &meta, etag);
    free(d);
    upload_free_one(u);
    return fake_be_has(fb, bucket, key, out) ? 0 : -EIO;
}

static int fake_mp_abort(struct backend *be, const char *bucket, const char *key,
                         const char *upload_id)
{
    struct fake_be *fb = be->priv;
    pthread_mutex_lock(&fb->mu);
    fb->n_mp_abort++;
    int rc = write_fail(fb);
    struct fake_upload **pp = &fb->uploads;
    while (!rc && *pp && (strcmp((*pp)->id, upload_id) || strcmp((*pp)->bucket, bucket) ||
                          strcmp((*pp)->key, key)))
        pp = &(*pp)->next;
    struct fake_upload *u = rc ? NULL : *pp;
    if (!rc && !u)
        rc = -S3E_NO_SUCH_UPLOAD;
    if (u)
        *pp = u->next;
    pthread_mutex_unlock(&fb->mu);
    if (u)
        upload_free_one(u);
    return rc;
}

static int part_cmp(const void *a, const void *b)
{
    const struct be_part *x = a, *y = b;
    return x->number < y->number ? -1 : x->number > y->number;
}

static int fake_mp_list_parts(struct backend *be, const char *bucket, const char *key,
                              const char *upload_id, unsigned marker, unsigned max,
                              struct be_part **out, size_t *nout, int *truncated)
{
    struct fake_be *fb = be->priv;
    *out = NULL;
    *nout = 0;
    *truncated = 0;
    pthread_mutex_lock(&fb->mu);
    fb->n_mp_list_parts++;
    int rc = fb->fail_all;
    struct fake_upload *u = rc ? NULL : upload_find(fb, bucket, key, upload_id);
    if (!rc && !u)
        rc = -S3E_NO_SUCH_UPLOAD;
    struct be_part *ps = NULL;
    size_t k = 0;
    if (!rc) {
        ps = calloc(u->nparts ? u->nparts : 1, sizeof(*ps));
        for (size_t i = 0; i < u->nparts; i++) {
            if (u->parts[i].number <= marker)
                continue;
            ps[k].number = u->parts[i].number;
            ps[k].size = u->parts[i].size;
            snprintf(ps[k].etag, sizeof(ps[k].etag), "%s", u->parts[i].etag);
            k++;
        }
    }
    pthread_mutex_unlock(&fb->mu);
    if (rc)
        return rc;
    qsort(ps, k, sizeof(*ps), part_cmp);
    if (k > max) {
        k = max;
        *truncated = 1;
    }
    *out = ps;
    *nout = k;
    return 0;
}

static int fake_mp_list_uploads(struct backend *be, const char *bucket, const char *prefix,
                                const char *key_marker, const char *upload_id_marker,
                                unsigned max, struct be_upload **out, size_t *nout,
                                int *truncated)
{
    struct fake_be *fb = be->priv;
    size_t n = 0, pl = prefix ? strlen(prefix) : 0;
    pthread_mutex_lock(&fb->mu);
    fb->n_mp_list_uploads++;
    for (struct fake_upload *u = fb->uploads; u; u = u->next)
        n++;
    struct be_upload *us = calloc(n ? n : 1, sizeof(*us));
    size_t k = 0;
    for (struct fake_upload *u = fb->uploads; us && u; u = u->next) {
        if (strcmp(u->bucket, bucket) || (pl && strncmp(u->key, prefix, pl)))
            continue;
        us[k].key = strdup(u->key);
        snprintf(us[k].upload_id, sizeof(us[k].upload_id), "%s", u->id);
        us[k].initiated_ns = u->initiated_ns;
        k++;
    }
    pthread_mutex_unlock(&fb->mu);
    if (!us)
        return -ENOMEM;
    mpu_uploads_page(us, &k, key_marker, upload_id_marker, max, truncated);
    *out = us;
    *nout = k;
    return 0;
}

static const struct backend_ops fake_ops_full = {
    .scheme = "fake",
    .head = fake_head,
    .get = fake_get,
    .put = fake_put_op,
    .copy = fake_copy,
    .del = fake_del_op,
    .list = fake_list,
    .mp_create = fake_mp_create,
    .mp_put_part = fake_mp_put_part,
    .mp_copy_part = fake_mp_copy_part,
    .mp_complete = fake_mp_complete,
    .mp_abort = fake_mp_abort,
    .mp_list_parts = fake_mp_list_parts,
    .mp_list_uploads = fake_mp_list_uploads,
};

struct fake_be *fake_be_new_full(void)
{
    struct fake_be *fb = fake_be_new();
    fb->be.ops = &fake_ops_full;
    return fb;
}
