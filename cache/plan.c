/*
 * plan.c: the read plans' bookkeeping (plan.h). Each plan keeps its entries in order with, per
 * entry, the hash of its index name, the next occurrence of the same name and what is known of
 * its size; a small open-addressing table finds a name's first occurrence. Two spans start at
 * the reader's position (pos, the first entry it has not passed):
 *   [pos, fetch_next)  entries prefetched or being prefetched: their bytes (abytes) stay within
 *                      --plan-ahead, their count within PLAN_AHEAD_OBJECTS;
 *   [pos, horizon)     entries the plan's share of the cache holds (hbytes): what eviction keeps
 *                      and the furthest a prefetch may go (beyond it a prefetch would evict what
 *                      the reader needs sooner).
 * Both move forward as the reader does. An entry of unknown size counts an estimate (the mean of
 * the plan's known sizes) until a prefetch or the caller's "sizes" tells; the spans then adjust.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "index.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "plan.h"

#define PLAN_EST_DEFAULT (1ull << 20) /* a size before any is known */

enum { PE_KNOWN = 1, PE_TAKEN = 2, PE_DONE = 4, PE_FAILED = 8, PE_READ = 16 };

struct plan {
    struct plan *next;
    uint64_t seq;
    char id[24];
    char owner[130];
    char name[PLAN_NAME_MAX + 1];
    char *bucket;
    char **keys;
    uint64_t *size;      /* known, or the estimate it counts in the horizon (!PE_KNOWN) */
    uint64_t *acnt;      /* what it counts in abytes (taken: its size or estimate then) */
    uint8_t *st;         /* PE_* */
    uint64_t *hash;      /* of each entry's index name */
    uint32_t *next_same; /* the next entry of the same name, or UINT32_MAX */
    uint32_t *tab;       /* name hash -> its first entry + 1 (0: empty) */
    uint32_t tab_mask;
    size_t n, pos, fetch_next, horizon;
    size_t front; /* past the furthest entry read (pos: the first not read) */
    uint64_t abytes, hbytes, share;
    uint64_t known_sum, known_n;
    unsigned inflight, refs; /* refs: the list's, and each ticket's */
    int gone;                /* replaced, cancelled or idle: off the list */
    uint64_t reads, behind, hits, misses, stalls, prefetched, prefetched_bytes, errors;
    uint64_t cached_already, no_room;
    int64_t created_ns, last_ns;
};

struct plans {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct plans_conf pc;
    struct plan *list; /* newest first */
    unsigned nplans, inflight;
    size_t entries;
    uint64_t seq;
    struct plan *cursor_after; /* round robin of plans_take: the plan served last */
    uint64_t cursor_seq;
    int stop;
    int any; /* a plan is held (read without mu by the hot paths, written under it) */
    struct plans_totals gone_totals; /* counters of plans dropped */
};

static uint64_t name_hash(const void *p, size_t n)
{
    return s3c_hash_bytes(p, n) | 1; /* never 0 */
}

static void plan_free(struct plan *pl)
{
    for (size_t i = 0; i < pl->n; i++)
        free(pl->keys[i]);
    free(pl->keys);
    free(pl->size);
    free(pl->acnt);
    free(pl->st);
    free(pl->hash);
    free(pl->next_same);
    free(pl->tab);
    free(pl->bucket);
    free(pl);
}

static void plan_put_ref(struct plan *pl)
{
    if (--pl->refs == 0)
        plan_free(pl);
}

/* The plan's first entry named @h, or UINT32_MAX. */
static uint32_t plan_first(const struct plan *pl, uint64_t h)
{
    for (uint32_t i = (uint32_t)h & pl->tab_mask;; i = (i + 1) & pl->tab_mask) {
        uint32_t e = pl->tab[i];
        if (!e)
            return UINT32_MAX;
        if (pl->hash[e - 1] == h)
            return e - 1;
    }
}

static uint64_t plan_est(const struct plan *pl)
{
    return pl->known_n ? S3C_MAX(pl->known_sum / pl->known_n, 1ull) : PLAN_EST_DEFAULT;
}

/* What entry @i counts in a span: its size, else the estimate (recorded as what it counts). */
static uint64_t entry_bytes(struct plan *pl, size_t i)
{
    return pl->st[i] & PE_KNOWN ? pl->size[i] : plan_est(pl);
}

/* Entry @i joins the horizon: what it counts there from now until it leaves (or its size is
 * learnt, or plan_refit()). */
static uint64_t horizon_add(struct plan *pl, size_t i)
{
    pl->size[i] = entry_bytes(pl, i);
    return pl->size[i];
}

/* Moves the horizon: forward while the next entry fits the share, back while over it. */
static void plan_fit(struct plan *pl)
{
    if (pl->horizon < pl->pos) {
        pl->horizon = pl->pos;
        pl->hbytes = 0;
    }
    while (pl->horizon > pl->pos && pl->hbytes > pl->share)
        pl->hbytes -= pl->size[--pl->horizon];
    while (pl->horizon < pl->n && pl->hbytes + entry_bytes(pl, pl->horizon) <= pl->share)
        pl->hbytes += horizon_add(pl, pl->horizon++);
}

/* The estimate moved (the first sizes learnt): the horizon's unknown entries count it anew. */
static void plan_refit(struct plan *pl)
{
    pl->hbytes = 0;
    for (size_t i = pl->pos; i < pl->horizon; i++)
        pl->hbytes += horizon_add(pl, i);
    plan_fit(pl);
}

/* Entry @i's size is @size now. */
static void plan_learn(struct plan *pl, size_t i, uint64_t size)
{
    if (pl->st[i] & PE_KNOWN)
        return;
    uint64_t was = pl->size[i];
    pl->st[i] |= PE_KNOWN;
    pl->size[i] = size;
    pl->known_sum += size;
    pl->known_n++;
    if (i >= pl->pos && i < pl->horizon)
        pl->hbytes = pl->hbytes - S3C_MIN(pl->hbytes, was) + size;
    if (i >= pl->pos && i < pl->fetch_next && (pl->st[i] & PE_TAKEN)) {
        pl->abytes = pl->abytes - S3C_MIN(pl->abytes, pl->acnt[i]) + size;
        pl->acnt[i] = size;
    }
    /* the same object later in the plan: the same size (a key repeated: the next epoch) */
    for (uint32_t j = pl->next_same[i]; j != UINT32_MAX; j = pl->next_same[j])
        if (!strcmp(pl->keys[j], pl->keys[i])) {
            plan_learn(pl, j, size);
            break;
        }
    if (!(pl->known_n & (pl->known_n - 1)))
        plan_refit(pl); /* 1, 2, 4, ... sizes known: the estimate settles, O(log n) refits */
    else
        plan_fit(pl);
}

/* The reader passed every entry before @to. */
static void plan_advance(struct plan *pl, size_t to)
{
    if (to <= pl->pos)
        return;
    for (size_t i = pl->pos; i < to; i++) {
        if (i < pl->horizon)
            pl->hbytes -= S3C_MIN(pl->hbytes, pl->size[i]);
        if (i < pl->fetch_next)
            pl->abytes -= S3C_MIN(pl->abytes, pl->acnt[i]);
    }
    pl->pos = to;
    if (pl->fetch_next < to) {
        pl->fetch_next = to;
        pl->abytes = 0;
    }
    plan_fit(pl);
}

/* Each plan's share of the cache: the plans' part, split evenly. mu held. */
static void plans_reshare_locked(struct plans *p)
{
    uint64_t part = p->pc.cache_bytes / 100 * PLAN_CACHE_SHARE_PCT;
    for (struct plan *pl = p->list; pl; pl = pl->next) {
        pl->share = part / S3C_MAX(p->nplans, 1u);
        plan_fit(pl);
    }
}

static void totals_add(struct plans_totals *t, const struct plan *pl)
{
    t->reads += pl->reads;
    t->hits += pl->hits;
    t->misses += pl->misses;
    t->stalls += pl->stalls;
    t->prefetched += pl->prefetched;
    t->prefetched_bytes += pl->prefetched_bytes;
    t->prefetch_errors += pl->errors;
}

/* Takes @pl off the list (its tickets keep it until they end). mu held. */
static void plan_unlink_locked(struct plans *p, struct plan *pl)
{
    for (struct plan **pp = &p->list; *pp; pp = &(*pp)->next)
        if (*pp == pl) {
            *pp = pl->next;
            break;
        }
    pl->gone = 1;
    p->nplans--;
    __atomic_store_n(&p->any, p->nplans > 0, __ATOMIC_RELAXED);
    p->entries -= pl->n;
    totals_add(&p->gone_totals, pl);
    if (p->cursor_after == pl)
        p->cursor_after = NULL;
    plans_reshare_locked(p);
    plan_put_ref(pl);
}

static void plans_reap_locked(struct plans *p, int64_t now_ns)
{
    for (struct plan *pl = p->list, *next; pl; pl = next) {
        next = pl->next;
        if (p->pc.idle_ns > 0 && now_ns - pl->last_ns > p->pc.idle_ns) {
            log_info("plan %s (%s) dropped: no planned GET for %lld s", pl->id, pl->name,
                     (long long)((now_ns - pl->last_ns) / 1000000000ll));
            plan_unlink_locked(p, pl);
        }
    }
}

int plans_new(const struct plans_conf *pc, struct plans **out)
{
    struct plans *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->pc = *pc;
    if (!p->pc.ahead_objects)
        p->pc.ahead_objects = 1024;
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = p;
    return 0;
}

void plans_free(struct plans *p)
{
    if (!p)
        return;
    while (p->list)
        plan_unlink_locked(p, p->list);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

/* A plan of @keys, not yet on the list: NULL without memory. */
static struct plan *plan_build(const char *bucket, char **keys, uint64_t *sizes, size_t n)
{
    struct plan *pl = calloc(1, sizeof(*pl));
    if (!pl)
        return NULL;
    uint32_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    pl->tab_mask = cap - 1;
    pl->bucket = strdup(bucket);
    pl->size = calloc(n ? n : 1, sizeof(uint64_t));
    pl->acnt = calloc(n ? n : 1, sizeof(uint64_t));
    pl->st = calloc(n ? n : 1, 1);
    pl->hash = calloc(n ? n : 1, sizeof(uint64_t));
    pl->next_same = calloc(n ? n : 1, sizeof(uint32_t));
    pl->tab = calloc(cap, sizeof(uint32_t));
    if (!pl->bucket || !pl->size || !pl->acnt || !pl->st || !pl->hash || !pl->next_same ||
        !pl->tab) {
        plan_free(pl);
        return NULL;
    }
    struct index_key k;
    for (size_t i = 0; i < n; i++) {
        index_key_make(bucket, keys[i], &k);
        pl->hash[i] = name_hash(k.b, k.len);
        pl->next_same[i] = UINT32_MAX;
    }
    /* a name's first entry in the table, each later one chained from the one before */
    uint32_t *tail = calloc(cap, sizeof(uint32_t)); /* slot -> the name's last entry + 1 */
    if (!tail) {
        plan_free(pl);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t s = (uint32_t)pl->hash[i] & pl->tab_mask;
        while (pl->tab[s] && pl->hash[pl->tab[s] - 1] != pl->hash[i])
            s = (s + 1) & pl->tab_mask;
        if (!pl->tab[s])
            pl->tab[s] = (uint32_t)i + 1;
        else
            pl->next_same[tail[s] - 1] = (uint32_t)i;
        tail[s] = (uint32_t)i + 1;
    }
    free(tail);
    for (size_t i = 0; sizes && i < n; i++)
        if (sizes[i]) {
            pl->st[i] |= PE_KNOWN;
            pl->size[i] = sizes[i];
            pl->known_sum += sizes[i];
            pl->known_n++;
        }
    pl->keys = keys;
    pl->n = n;
    pl->refs = 1;
    return pl;
}

int plans_put(struct plans *p, const char *owner, const char *name, const char *bucket, char **keys,
              uint64_t *sizes, size_t n, int64_t now_ns, char id[24], const char **why)
{
    *why = NULL;
    if (n > PLAN_KEYS_MAX) {
        *why = "a plan holds at most 1,000,000 keys";
        return -S3E_INVALID_ARGUMENT;
    }
    struct plan *pl = plan_build(bucket, keys, sizes, n);
    if (!pl)
        return -ENOMEM;
    snprintf(pl->owner, sizeof(pl->owner), "%s", owner);
    snprintf(pl->name, sizeof(pl->name), "%s", name);
    pl->created_ns = pl->last_ns = now_ns;
    pthread_mutex_lock(&p->mu);
    plans_reap_locked(p, now_ns);
    struct plan *old = NULL;
    unsigned mine = 0;
    for (struct plan *x = p->list; x; x = x->next) {
        if (strcmp(x->owner, owner))
            continue;
        if (!strcmp(x->name, name))
            old = x;
        else
            mine++;
    }
    int rc = 0;
    if (mine >= PLAN_PER_OWNER) {
        *why = "an access key holds at most 16 plans: cancel one (DELETE /_/plan/ID)";
        rc = -S3E_SLOW_DOWN;
    } else if (p->nplans - (old ? 1 : 0) >= PLAN_MAX) {
        *why = "the gateway holds at most 64 plans";
        rc = -S3E_SLOW_DOWN;
    } else if (p->entries - (old ? old->n : 0) + n > PLAN_KEYS_TOTAL) {
        *why = "the plans held hold 4,000,000 keys in all: cancel some";
        rc = -S3E_SLOW_DOWN;
    }
    if (rc) {
        pthread_mutex_unlock(&p->mu);
        pl->keys = NULL; /* the caller's still */
        pl->n = 0;
        plan_free(pl);
        return rc;
    }
    if (old)
        plan_unlink_locked(p, old);
    pl->seq = ++p->seq;
    snprintf(pl->id, sizeof(pl->id), "p%08x%06llx", (unsigned)(now_ns / 1000000000ll),
             (unsigned long long)(pl->seq & 0xffffff));
    snprintf(id, 24, "%s", pl->id);
    pl->next = p->list;
    p->list = pl;
    p->nplans++;
    __atomic_store_n(&p->any, 1, __ATOMIC_RELAXED);
    p->entries += n;
    plans_reshare_locked(p);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    free(sizes);
    return 0;
}

int plans_cancel(struct plans *p, const char *owner, const char *id)
{
    int rc = -S3E_NOT_FOUND;
    pthread_mutex_lock(&p->mu);
    for (struct plan *pl = p->list; pl; pl = pl->next)
        if (!strcmp(pl->id, id) && (!owner || !strcmp(owner, pl->owner))) {
            plan_unlink_locked(p, pl);
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

static int plan_json(const struct plan *pl, struct buf *b)
{
    char ts[32];
    int rc = buf_printf(b, "{\"plan\":\"%s\",\"name\":", pl->id) || buf_json_str(b, pl->name) ||
             buf_puts(b, ",\"owner\":") || buf_json_str(b, pl->owner) ||
             buf_puts(b, ",\"bucket\":") || buf_json_str(b, pl->bucket);
    s3c_iso8601(pl->created_ns, ts);
    rc = rc ||
         buf_printf(b,
                    ",\"entries\":%zu,\"position\":%zu,\"prefetch_next\":%zu,"
                    "\"horizon\":%zu,\"bytes_ahead\":%llu,\"horizon_bytes\":%llu,"
                    "\"share_bytes\":%llu,\"in_flight\":%u,\"reads\":%llu,"
                    "\"reads_behind\":%llu,\"hits\":%llu,\"misses\":%llu,\"stalls\":%llu,"
                    "\"prefetched\":%llu,\"prefetched_bytes\":%llu,"
                    "\"cached_already\":%llu,\"prefetch_no_room\":%llu,\"prefetch_errors\":%llu,"
                    "\"created\":\"%s\"}",
                    pl->n, pl->pos, pl->fetch_next, pl->horizon, (unsigned long long)pl->abytes,
                    (unsigned long long)pl->hbytes, (unsigned long long)pl->share, pl->inflight,
                    (unsigned long long)pl->reads, (unsigned long long)pl->behind,
                    (unsigned long long)pl->hits, (unsigned long long)pl->misses,
                    (unsigned long long)pl->stalls, (unsigned long long)pl->prefetched,
                    (unsigned long long)pl->prefetched_bytes,
                    (unsigned long long)pl->cached_already, (unsigned long long)pl->no_room,
                    (unsigned long long)pl->errors, ts);
    return rc ? -ENOMEM : 0;
}

int plans_json(struct plans *p, const char *owner, const char *id, struct buf *b)
{
    int rc = 0, found = 0;
    pthread_mutex_lock(&p->mu);
    plans_reap_locked(p, s3c_real_ns());
    if (!id && buf_puts(b, "{\"plans\":["))
        rc = -ENOMEM;
    for (struct plan *pl = p->list; pl && !rc; pl = pl->next) {
        if ((owner && strcmp(owner, pl->owner)) || (id && strcmp(id, pl->id)))
            continue;
        if (!id && found && buf_puts(b, ","))
            rc = -ENOMEM;
        if (!rc)
            rc = plan_json(pl, b);
        found++;
    }
    if (!rc && !id && buf_puts(b, "]}"))
        rc = -ENOMEM;
    pthread_mutex_unlock(&p->mu);
    return rc ? rc : id && !found ? -S3E_NOT_FOUND : 0;
}

void plans_read(struct plans *p, const char *owner, const char *bucket, const char *key,
                int64_t now_ns, struct plan_tok *t)
{
    memset(t, 0, sizeof(*t));
    if (!__atomic_load_n(&p->any, __ATOMIC_RELAXED)) /* no plan: no lock on the hot path */
        return;
    struct index_key k;
    index_key_make(bucket, key, &k);
    uint64_t h = name_hash(k.b, k.len);
    pthread_mutex_lock(&p->mu);
    for (struct plan *pl = p->list; pl; pl = pl->next) {
        if (strcmp(pl->owner, owner) || strcmp(pl->bucket, bucket))
            continue;
        /* its first entry not read yet at or after the position (a DataLoader's workers answer
         * out of order: the position is the first entry not read, and entries up to
         * ahead_objects past it may be read first), else the last one before */
        uint32_t at = UINT32_MAX, behind = UINT32_MAX;
        for (uint32_t i = plan_first(pl, h); i != UINT32_MAX; i = pl->next_same[i]) {
            if (strcmp(pl->keys[i], key))
                continue;
            if (i >= pl->pos && !(pl->st[i] & PE_READ)) {
                at = i;
                break;
            }
            behind = i;
        }
        if (at == UINT32_MAX && behind == UINT32_MAX)
            continue;
        /* a key read again soon after (a retry) is that read, not the key's next use an
         * epoch ahead: the nearer entry wins */
        if (at != UINT32_MAX && behind != UINT32_MAX && behind >= pl->pos &&
            at - behind > p->pc.ahead_objects)
            at = UINT32_MAX;
        pl->last_ns = now_ns;
        t->seq = pl->seq;
        if (at == UINT32_MAX) {
            pl->behind++;
            t->ahead = !!(pl->st[behind] & (PE_TAKEN | PE_DONE));
        } else {
            pl->reads++;
            t->ahead = !!(pl->st[at] & (PE_TAKEN | PE_DONE));
            pl->st[at] |= PE_READ;
            if (at + 1 > pl->front)
                pl->front = at + 1;
            size_t to = pl->pos;
            while (to < pl->n && (pl->st[to] & PE_READ))
                to++;
            if (pl->front > to + p->pc.ahead_objects) /* an entry never read: skipped */
                to = pl->front - p->pc.ahead_objects;
            while (to < pl->n && (pl->st[to] & PE_READ))
                to++;
            plan_advance(pl, to);
            pthread_cond_signal(&p->cv); /* room ahead for a prefetch (one thread: no herd) */
        }
        break;
    }
    pthread_mutex_unlock(&p->mu);
}

void plans_read_done(struct plans *p, const struct plan_tok *t, int hit, int waited)
{
    if (!t->seq)
        return;
    pthread_mutex_lock(&p->mu);
    for (struct plan *pl = p->list; pl; pl = pl->next)
        if (pl->seq == t->seq) {
            if (hit)
                pl->hits++;
            else if (waited)
                pl->stalls++;
            else
                pl->misses++;
            break;
        }
    pthread_mutex_unlock(&p->mu);
}

int plans_next_use(struct plans *p, const void *name, size_t len, uint64_t *dist)
{
    if (!__atomic_load_n(&p->any, __ATOMIC_RELAXED))
        return 0;
    uint64_t h = name_hash(name, len), best = UINT64_MAX;
    pthread_mutex_lock(&p->mu);
    for (struct plan *pl = p->list; pl; pl = pl->next) {
        uint32_t i = plan_first(pl, h);
        while (i != UINT32_MAX && (i < pl->pos || (pl->st[i] & PE_READ)))
            i = pl->next_same[i];
        if (i != UINT32_MAX && i - pl->pos < best)
            best = i - pl->pos;
    }
    pthread_mutex_unlock(&p->mu);
    *dist = best;
    return best != UINT64_MAX;
}

/* The entry @pl may prefetch now, or SIZE_MAX. */
static size_t plan_next_locked(struct plans *p, struct plan *pl)
{
    unsigned per_plan = S3C_MAX(p->pc.requests / S3C_MAX(p->nplans, 1u), 4u);
    if (pl->inflight >= per_plan)
        return SIZE_MAX;
    if (pl->fetch_next >= pl->horizon || pl->fetch_next >= pl->pos + p->pc.ahead_objects)
        return SIZE_MAX;
    if (pl->abytes && pl->abytes + entry_bytes(pl, pl->fetch_next) > p->pc.ahead_bytes)
        return SIZE_MAX;
    return pl->fetch_next;
}

int plans_take(struct plans *p, unsigned wait_ms, struct plan_ticket *t)
{
    pthread_mutex_lock(&p->mu);
    int got = 0;
    for (int waited = 0; !p->stop; waited = 1) {
        plans_reap_locked(p, s3c_real_ns());
        if (p->inflight < p->pc.requests && p->list) {
            /* round robin: start after the plan served last */
            struct plan *start = p->cursor_after && !p->cursor_after->gone ? p->cursor_after->next
                                                                           : NULL;
            if (!start)
                start = p->list;
            struct plan *pl = start;
            do {
                size_t i = plan_next_locked(p, pl);
                if (i != SIZE_MAX) {
                    pl->st[i] |= PE_TAKEN;
                    pl->acnt[i] = entry_bytes(pl, i);
                    pl->abytes += pl->acnt[i];
                    pl->fetch_next = i + 1;
                    pl->inflight++;
                    pl->refs++;
                    p->inflight++;
                    p->cursor_after = pl;
                    *t = (struct plan_ticket){pl, i, pl->bucket, pl->keys[i]};
                    got = 1;
                    break;
                }
                pl = pl->next ? pl->next : p->list;
            } while (pl != start);
        }
        if (got) {
            /* the next thread takes the next entry, if there is one: a wake-up per take,
             * not the whole pool per event */
            pthread_cond_signal(&p->cv);
            break;
        }
        if (waited || !wait_ms)
            break;
        struct timespec ts;
        s3c_deadline(CLOCK_MONOTONIC, wait_ms, &ts);
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    }
    pthread_mutex_unlock(&p->mu);
    return got;
}

void plans_done(struct plans *p, struct plan_ticket *t, int rc, uint64_t size, int cached)
{
    struct plan *pl = t->plan;
    pthread_mutex_lock(&p->mu);
    pl->inflight--;
    p->inflight--;
    if (!pl->gone) {
        if (rc == -S3E_INSUFFICIENT_STORAGE) {
            pl->st[t->idx] |= PE_FAILED; /* the cache holds what is needed sooner */
            pl->no_room++;
        } else if (rc) {
            pl->st[t->idx] |= PE_FAILED;
            pl->errors++;
        } else {
            pl->st[t->idx] |= PE_DONE;
            plan_learn(pl, t->idx, size);
            if (cached)
                pl->cached_already++;
            else {
                pl->prefetched++;
                pl->prefetched_bytes += size;
            }
        }
    }
    plan_put_ref(pl);
    t->plan = NULL;
    pthread_cond_signal(&p->cv); /* its place: one thread takes it */
    pthread_mutex_unlock(&p->mu);
}

void plans_stop(struct plans *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void plans_totals(struct plans *p, struct plans_totals *t)
{
    pthread_mutex_lock(&p->mu);
    *t = p->gone_totals;
    t->plans = p->nplans;
    t->entries = p->entries;
    t->inflight = p->inflight;
    t->ahead_bytes = 0;
    for (struct plan *pl = p->list; pl; pl = pl->next) {
        totals_add(t, pl);
        t->ahead_bytes += pl->abytes;
    }
    pthread_mutex_unlock(&p->mu);
}
