/*
 * jobs.c: the table of jobs (acct/jobs.h): a mutex'd hash of rows by name, each with its need
 * and a struct stall_acc; the verdict of each at a snapshot. The writers are jobs_out.c.
 * Row lifecycle:
 *   jobs_ref() or jobs_declare() creates -> refs > 0 while GETs are in flight
 *   -> idle (refs == 0, not declared) for idle_s -> jobs_tick() folds it into "other", frees it
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jobs.h"
#include "jobs_priv.h"
#include "lib/s3c.h"

static uint64_t jobs_mono(void *cls)
{
    UNUSED(cls);
    return s3c_mono_ns();
}

static uint32_t jobs_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static struct jobs_row *row_new(const char *name, uint32_t hash, uint64_t now)
{
    struct jobs_row *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->magic = JOBS_ROW_MAGIC;
    r->hash = hash;
    r->last_seen_ns = now;
    size_t n = strnlen(name, JOBS_NAME_MAX);
    memcpy(r->name, name, n);
    r->name[n] = '\0';
    stall_acc_init(&r->acc, now);
    return r;
}

static void row_free(struct jobs_row *r)
{
    stall_acc_destroy(&r->acc);
    r->magic = 0;
    free(r);
}

int jobs_new(struct jobs **out)
{
    *out = NULL;
    struct jobs *j = calloc(1, sizeof(*j));
    if (!j)
        return -ENOMEM;
    j->magic = JOBS_MAGIC;
    j->now = jobs_mono;
    j->max = JOBS_MAX_DEFAULT;
    j->key_max = JOBS_KEY_MAX_DEFAULT;
    j->idle_ns = (uint64_t)JOBS_IDLE_S_DEFAULT * 1000000000ull;
    j->other = row_new(JOBS_OTHER, 0, j->now(NULL));
    if (!j->other) {
        free(j);
        return -ENOMEM;
    }
    j->other->is_other = 1;
    pthread_mutex_init(&j->lock, NULL);
    *out = j;
    return 0;
}

void jobs_free(struct jobs *j)
{
    if (!j)
        return;
    CHECK_OBJ_NOTNULL(j, JOBS_MAGIC);
    for (unsigned i = 0; i < JOBS_SLOTS; i++) {
        struct jobs_row *r = j->slots[i], *next;
        for (; r; r = next) {
            next = r->next;
            row_free(r);
        }
    }
    row_free(j->other);
    pthread_mutex_destroy(&j->lock);
    j->magic = 0;
    free(j);
}

void jobs_set_limits(struct jobs *j, unsigned max, unsigned idle_s)
{
    CHECK_OBJ_NOTNULL(j, JOBS_MAGIC);
    pthread_mutex_lock(&j->lock);
    if (max)
        j->max = max;
    if (idle_s)
        j->idle_ns = (uint64_t)idle_s * 1000000000ull;
    pthread_mutex_unlock(&j->lock);
}

void jobs_set_key_cap(struct jobs *j, unsigned per_key)
{
    CHECK_OBJ_NOTNULL(j, JOBS_MAGIC);
    pthread_mutex_lock(&j->lock);
    if (per_key)
        j->key_max = per_key;
    pthread_mutex_unlock(&j->lock);
}

void jobs_set_clock(struct jobs *j, uint64_t (*now)(void *cls), void *cls)
{
    CHECK_OBJ_NOTNULL(j, JOBS_MAGIC);
    pthread_mutex_lock(&j->lock);
    j->now = now ? now : jobs_mono;
    j->now_cls = now ? cls : NULL;
    j->other->acc.born_ns = j->other->last_seen_ns = j->now(j->now_cls);
    pthread_mutex_unlock(&j->lock);
}

const char *jobs_check_name(const char *name)
{
    size_t n = strlen(name);
    if (!n)
        return "a job name cannot be empty";
    if (n > JOBS_NAME_MAX)
        return "a job name is at most 128 bytes";
    if (!strcmp(name, JOBS_OTHER))
        return "\"other\" is the row of jobs beyond the table's cap";
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._-:/@+", *p))
            return "a job name is made of letters, digits and . _ - : / @ +";
    return NULL;
}

/* The row of @name, or NULL. Caller holds j->lock. */
static struct jobs_row *row_find(struct jobs *j, const char *name, uint32_t h)
{
    for (struct jobs_row *r = j->slots[h % JOBS_SLOTS]; r; r = r->next)
        if (r->hash == h && !strcmp(r->name, name))
            return r;
    return NULL;
}

/* How many rows @key made. Caller holds j->lock. At most j->max rows: a short walk, and only
 * when a row is to be made. */
static unsigned rows_owned(const struct jobs *j, const char *key)
{
    unsigned n = 0;
    for (unsigned i = 0; i < JOBS_SLOTS; i++)
        for (const struct jobs_row *r = j->slots[i]; r; r = r->next)
            n += !strcmp(r->owner, key);
    return n;
}

static void copy_name(char dst[JOBS_NAME_MAX + 1], const char *src)
{
    size_t n = strnlen(src, JOBS_NAME_MAX);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* The row of @name, created for @owner (NULL: never; "": POST /_/jobs, no per-key cap) when
 * the table and the owner's cap have room; NULL otherwise. Caller holds j->lock. */
static struct jobs_row *row_get(struct jobs *j, const char *name, const char *owner, uint64_t now)
{
    uint32_t h = jobs_hash(name);
    struct jobs_row *r = row_find(j, name, h);
    if (r || !owner || j->n >= j->max || (*owner && rows_owned(j, owner) >= j->key_max))
        return r;
    r = row_new(name, h, now);
    if (!r)
        return NULL;
    copy_name(r->owner, owner);
    r->next = j->slots[h % JOBS_SLOTS];
    j->slots[h % JOBS_SLOTS] = r;
    j->n++;
    return r;
}

struct jobs_row *jobs_ref(struct jobs *j, const char *name, const char *key, uint64_t need_hdr,
                          uint64_t key_need)
{
    CHECK_OBJ_NOTNULL(j, JOBS_MAGIC);
    if (key && !*key)
        key = NULL;
    pthread_mutex_lock(&j->lock);
    uint64_t now = j->now(j->now_cls);
    struct jobs_row *r = strcmp(name, JOBS_OTHER) ? row_get(j, name, key, now) : NULL;
    if (!r)
        r = j->other;
    if (r != j->other && key) { /* "other" has no need: it is many jobs */
        if (!r->owner[0])       /* made by POST /_/jobs: the first key to read it */
            copy_name(r->owner, key);
        /* a need belongs to the key that declared it: another key's header is ignored */
        if (need_hdr && (!r->need_owner[0] || !strcmp(r->need_owner, key))) {
            if (need_hdr == JOBS_NEED_CLEAR) {
                r->need_hdr = 0;
                r->need_owner[0] = '\0';
            } else {
                r->need_hdr = need_hdr;
                copy_name(r->need_owner, key);
            }
        }
        if (!strcmp(r->owner, key))
            r->need_key = key_need;
    }
    r->refs++;
    r->last_seen_ns = now;
    pthread_mutex_unlock(&j->lock);
    return r;
}

void jobs_release(struct jobs *j, struct jobs_row *r)
{
    if (!r)
        return;
    CHECK_OBJ_NOTNULL(j, JOBS_MAGIC);
    CHECK_OBJ_NOTNULL(r, JOBS_ROW_MAGIC);
    pthread_mutex_lock(&j->lock);
    S3C_ASSERT(r->refs > 0);
    r->refs--;
    r->last_seen_ns = j->now(j->now_cls);
    pthread_mutex_unlock(&j->lock);
}

struct stall_acc *jobs_acc(struct jobs_row *r)
{
    CHECK_OBJ_NOTNULL(r, JOBS_ROW_MAGIC);
    return &r->acc;
}

int jobs_declare(struct jobs *j, const char *name, uint64_t need_bps)
{
    CHECK_OBJ_NOTNULL(j, JOBS_MAGIC);
    int rc = 0;
    pthread_mutex_lock(&j->lock);
    uint64_t now = j->now(j->now_cls);
    struct jobs_row *r = row_get(j, name, "", now);
    if (!r) {
        rc = j->n >= j->max ? -ENOSPC : -ENOMEM;
    } else {
        r->need_api = need_bps;
        r->declared = need_bps != 0;
        r->last_seen_ns = now;
    }
    pthread_mutex_unlock(&j->lock);
    return rc;
}

int jobs_forget(struct jobs *j, const char *name)
{
    CHECK_OBJ_NOTNULL(j, JOBS_MAGIC);
    pthread_mutex_lock(&j->lock);
    struct jobs_row *r = row_find(j, name, jobs_hash(name));
    int rc = r && r->declared ? 0 : -ENOENT;
    if (r) {
        r->declared = 0;
        r->need_api = 0;
    }
    pthread_mutex_unlock(&j->lock);
    return rc;
}

void jobs_tick(struct jobs *j)
{
    CHECK_OBJ_NOTNULL(j, JOBS_MAGIC);
    pthread_mutex_lock(&j->lock);
    uint64_t now = j->now(j->now_cls), seq = ++j->seq;
    stall_acc_sample(&j->other->acc, seq, now);
    for (unsigned i = 0; i < JOBS_SLOTS; i++) {
        struct jobs_row **pp = &j->slots[i];
        while (*pp) {
            struct jobs_row *r = *pp;
            stall_acc_sample(&r->acc, seq, now);
            if (!r->refs && !r->declared && now - r->last_seen_ns > j->idle_ns) {
                *pp = r->next;
                j->n--;
                stall_acc_fold(&j->other->acc, &r->acc);
                row_free(r);
                continue;
            }
            pp = &r->next;
        }
    }
    pthread_mutex_unlock(&j->lock);
}

/* --- snapshots ------------------------------------------------------------------------- */

static void view_of(struct jobs_row *r, uint64_t now, struct jobs_view *jv)
{
    memset(jv, 0, sizeof(*jv));
    memcpy(jv->name, r->name, sizeof(jv->name));
    jv->is_other = r->is_other;
    jv->declared = r->declared;
    if (r->need_api) {
        jv->need_bps = r->need_api;
        jv->need_source = "api";
    } else if (r->need_hdr) {
        jv->need_bps = r->need_hdr;
        jv->need_source = "header";
    } else if (r->need_key) {
        jv->need_bps = r->need_key;
        jv->need_source = "key";
    } else {
        jv->need_source = "none";
    }
    stall_acc_view(&r->acc, now, &jv->v);
    jv->state = stall_verdict(&jv->v.w_short, jv->need_bps, &jv->cause);
}

static int view_cmp(const void *a, const void *b)
{
    const struct jobs_view *x = a, *y = b;
    if (x->is_other != y->is_other)
        return x->is_other - y->is_other;
    return strcmp(x->name, y->name);
}

int jobs_snapshot(struct jobs *j, const char *only, struct jobs_view **out, size_t *n)
{
    CHECK_OBJ_NOTNULL(j, JOBS_MAGIC);
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&j->lock);
    struct jobs_view *v = malloc(((size_t)j->n + 1) * sizeof(*v));
    if (!v) {
        pthread_mutex_unlock(&j->lock);
        return -ENOMEM;
    }
    uint64_t now = j->now(j->now_cls);
    size_t k = 0;
    for (unsigned i = 0; i < JOBS_SLOTS; i++)
        for (struct jobs_row *r = j->slots[i]; r; r = r->next)
            if (!only || !strcmp(only, r->name))
                view_of(r, now, &v[k++]);
    if (!only) {
        view_of(j->other, now, &v[k]);
        if (v[k].v.gets || v[k].v.active || v[k].v.bytes)
            k++;
    }
    pthread_mutex_unlock(&j->lock);
    qsort(v, k, sizeof(*v), view_cmp);
    *out = v;
    *n = k;
    return 0;
}
