/*
 * policy.c: the eviction policy of each prefix (policy.h, cache.h). Owns the rules (config
 * and admin), the groups it follows (a rule's, or a parent directory's), their passes and the
 * ghost table of names eviction took. Touches no file and no index: evict.c asks
 * policy_keeps() of each LRU candidate, fill.c of each fetch that needs room.
 *   group: first read -> LRU, watched -> [thrash in a pass: keep (auto)] -> idle: LRU again
 *          -> recycled when POLICY_GROUPS_MAX others are newer
 * A pass: the objects a group reads, in order, until one of them is read again after more than
 * half of them (an epoch starting over, in order or shuffled); a re-read sooner (ranged GETs
 * of one object, a shuffle that put it early again) stays in the pass.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "index.h"
#include "lib/log.h"
#include "lib/s3c.h"
#include "lib/s3err.h"
#include "policy.h"

#define POLICY_HASH_BUCKETS 512
#define POLICY_GHOSTS (1u << 19)             /* evicted names' hashes, direct-mapped: 4 MiB */
#define POLICY_SEEN_BUDGET (1ull << 22)      /* pass-set slots of all groups together: 32 MiB */
#define POLICY_SEQ_BITS 24                   /* a pass-set entry: hash tag | order in the pass */
#define POLICY_SEQ_MASK ((1ull << POLICY_SEQ_BITS) - 1)
#define POLICY_NAME_MAX 448

enum policy_src { SRC_DEFAULT = 0, SRC_AUTO, SRC_CONFIG, SRC_ADMIN };
static const char *const policy_src_names[] = { "default", "auto", "config", "admin" };

struct prule;

struct pgroup {
    struct pgroup *hnext;
    struct prule *rule; /* the rule whose group it is, or NULL: a parent directory */
    unsigned char name[POLICY_NAME_MAX];
    size_t len;
    int keep;           /* without a rule: switched to keep by the detection */
    int64_t last_ns;    /* last request */
    int64_t pass_ns;    /* the current pass's first read */
    uint64_t *seen;     /* the pass's objects: open addressing, 0 = empty */
    uint32_t seen_cap, seen_n, distinct;
    struct cache_pass cur, last;
    uint64_t passes, misses, thrash, read_bytes, hit_bytes;
    int last_cut;
};

struct prule {
    unsigned char name[POLICY_NAME_MAX]; /* "bucket/prefix" */
    size_t len;
    int keep;
    enum policy_src src;
    struct pgroup *g;
};

struct policy {
    pthread_mutex_t mu;
    int auto_on;
    int64_t idle_ns;
    uint64_t gen;
    struct prule *rules[POLICY_RULES_MAX];
    size_t nrules;
    struct pgroup *hash[POLICY_HASH_BUCKETS]; /* groups without a rule */
    size_t ngroups;
    uint64_t seen_slots;
    uint64_t *ghosts; /* NULL without auto detection */
};

static uint64_t hash_bytes(const void *p, size_t n)
{
    return s3c_hash_bytes(p, n);
}

/* ---- groups ---------------------------------------------------------------------------- */

static int group_idle(const struct policy *p, const struct pgroup *g, int64_t now)
{
    return now - g->last_ns > p->idle_ns;
}

static void group_free(struct policy *p, struct pgroup *g)
{
    if (!g)
        return;
    p->seen_slots -= g->seen_cap;
    free(g->seen);
    free(g);
}

/* An automatic keep group idle past the bound goes back to LRU. */
static void group_expire(struct policy *p, struct pgroup *g, int64_t now)
{
    if (g->rule || !g->keep || !group_idle(p, g, now))
        return;
    g->keep = 0;
    p->gen++;
    log_info("cache: prefix \"%.*s\" idle for over %llds: back to LRU", (int)g->len, g->name,
             (long long)(p->idle_ns / 1000000000));
}

static int group_keeps(struct policy *p, struct pgroup *g, int64_t now)
{
    group_expire(p, g, now);
    int keep = g->rule ? g->rule->keep : g->keep;
    return keep && !group_idle(p, g, now);
}

/* The rule with the longest name that @name starts with, or NULL. */
static struct prule *rule_match(struct policy *p, const unsigned char *name, size_t len)
{
    struct prule *best = NULL;
    for (size_t i = 0; i < p->nrules; i++) {
        struct prule *r = p->rules[i];
        if (r->len <= len && (!best || r->len > best->len) && !memcmp(r->name, name, r->len))
            best = r;
    }
    return best;
}

/* Length of the parent "directory" of @name: up to and including its last '/' before a NUL
 * (a long name's digest follows one). 0 when there is none. */
static size_t parent_len(const unsigned char *name, size_t len)
{
    const unsigned char *nul = memchr(name, 0, len);
    size_t plain = nul ? (size_t)(nul - name) : len;
    for (size_t i = plain; i > 0; i--)
        if (name[i - 1] == '/')
            return i < POLICY_NAME_MAX ? i : 0;
    return 0;
}

/* Drops the least recently requested group without a rule that is not a keep group in use.
 * 1 when one went. */
static int group_recycle(struct policy *p, int64_t now)
{
    struct pgroup **victim = NULL;
    for (unsigned b = 0; b < POLICY_HASH_BUCKETS; b++) {
        for (struct pgroup **gp = &p->hash[b]; *gp; gp = &(*gp)->hnext) {
            struct pgroup *g = *gp;
            if (g->keep && !group_idle(p, g, now))
                continue;
            if (!victim || g->last_ns < (*victim)->last_ns)
                victim = gp;
        }
    }
    if (!victim)
        return 0;
    struct pgroup *g = *victim;
    *victim = g->hnext;
    p->ngroups--;
    group_free(p, g);
    return 1;
}

/* The group of the object @name: its rule's, else its parent directory's (created when
 * @create and there is room). NULL: not followed. */
static struct pgroup *group_of(struct policy *p, const void *name, size_t len, int create,
                               int64_t now)
{
    const unsigned char *nm = name;
    struct prule *r = rule_match(p, nm, len);
    if (r)
        return r->g;
    size_t gl = parent_len(nm, len);
    if (!gl)
        return NULL;
    unsigned hb = (unsigned)(hash_bytes(nm, gl) % POLICY_HASH_BUCKETS);
    for (struct pgroup *g = p->hash[hb]; g; g = g->hnext)
        if (g->len == gl && !memcmp(g->name, nm, gl))
            return g;
    if (!create || (p->ngroups >= POLICY_GROUPS_MAX && !group_recycle(p, now)))
        return NULL;
    struct pgroup *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    memcpy(g->name, nm, gl);
    g->len = gl;
    g->last_ns = now;
    g->hnext = p->hash[hb];
    p->hash[hb] = g;
    p->ngroups++;
    return g;
}

/* ---- passes ---------------------------------------------------------------------------- */

static uint64_t seen_tag(uint64_t h)
{
    uint64_t tag = h & ~POLICY_SEQ_MASK;
    return tag ? tag : 1ull << POLICY_SEQ_BITS;
}

static int seen_find(const struct pgroup *g, uint64_t tag, uint32_t *seq)
{
    if (!g->seen_cap)
        return 0;
    uint32_t m = g->seen_cap - 1;
    for (uint32_t i = (uint32_t)(tag >> POLICY_SEQ_BITS) & m;; i = (i + 1) & m) {
        uint64_t e = g->seen[i];
        if (!e)
            return 0;
        if ((e & ~POLICY_SEQ_MASK) == tag) {
            *seq = (uint32_t)(e & POLICY_SEQ_MASK);
            return 1;
        }
    }
}

static void seen_put(uint64_t *set, uint32_t cap, uint64_t e)
{
    uint32_t m = cap - 1;
    uint32_t i = (uint32_t)(e >> POLICY_SEQ_BITS) & m;
    while (set[i])
        i = (i + 1) & m;
    set[i] = e;
}

/* Adds @tag at @seq; the set grows (load <= 1/2) within POLICY_SEEN_MAX and the budget. */
static int seen_insert(struct policy *p, struct pgroup *g, uint64_t tag, uint32_t seq)
{
    if ((uint64_t)(g->seen_n + 1) * 2 > g->seen_cap) {
        uint32_t ncap = g->seen_cap ? g->seen_cap * 2 : 1024;
        if (ncap > 2 * POLICY_SEEN_MAX || p->seen_slots - g->seen_cap + ncap > POLICY_SEEN_BUDGET)
            return -ENOSPC;
        uint64_t *ns = calloc(ncap, sizeof(*ns));
        if (!ns)
            return -ENOMEM;
        for (uint32_t i = 0; i < g->seen_cap; i++)
            if (g->seen[i])
                seen_put(ns, ncap, g->seen[i]);
        free(g->seen);
        p->seen_slots += ncap - g->seen_cap;
        g->seen = ns;
        g->seen_cap = ncap;
    }
    seen_put(g->seen, g->seen_cap, tag | seq);
    g->seen_n++;
    return 0;
}

static void pass_end(struct pgroup *g, int cut)
{
    g->last = g->cur;
    g->last_cut = cut;
    g->passes++;
    memset(&g->cur, 0, sizeof(g->cur));
    g->distinct = 0;
    g->misses = g->thrash = 0;
    if (g->seen_n)
        memset(g->seen, 0, (size_t)g->seen_cap * sizeof(*g->seen));
    g->seen_n = 0;
}

static void pass_count(struct policy *p, struct pgroup *g, uint64_t h,
                       const struct policy_read *r, int64_t now)
{
    uint64_t tag = seen_tag(h);
    uint32_t seq = 0;
    int found = seen_find(g, tag, &seq);
    if (found && g->distinct >= 2 && g->distinct - seq > g->distinct / 2) {
        pass_end(g, 0);
        found = 0;
    }
    if (!found) {
        if (g->distinct >= POLICY_SEEN_MAX || seen_insert(p, g, tag, g->distinct)) {
            pass_end(g, 1);
            (void)seen_insert(p, g, tag, 0); /* no room even now: the pass goes on untracked */
        }
        g->distinct++;
        g->cur.objects++;
        g->cur.working_set_bytes += r->size;
    }
    if (!g->cur.reads)
        g->pass_ns = now;
    g->cur.reads++;
    g->cur.hits += !r->fetched;
    g->cur.bytes += r->bytes;
    g->cur.hit_bytes += r->hit_bytes;
    g->read_bytes += r->bytes;
    g->hit_bytes += r->hit_bytes;
}

/* ---- ghosts ---------------------------------------------------------------------------- */

static void ghost_put(struct policy *p, uint64_t h)
{
    if (p->ghosts)
        p->ghosts[h & (POLICY_GHOSTS - 1)] = h | 1;
}

static int ghost_take(struct policy *p, uint64_t h)
{
    if (!p->ghosts || p->ghosts[h & (POLICY_GHOSTS - 1)] != (h | 1))
        return 0;
    p->ghosts[h & (POLICY_GHOSTS - 1)] = 0;
    return 1;
}

/* ---- rules ----------------------------------------------------------------------------- */

/* "bucket/prefix" of a rule into @out (POLICY_NAME_MAX). Its length, or -errno with @em. */
static int rule_name(const char *bucket, const char *prefix, unsigned char *out,
                     struct errmsg *em)
{
    int rc = backend_check_bucket_name(bucket);
    if (rc) {
        errmsg_set(em, "\"%s\" is not a valid bucket name", bucket);
        return rc;
    }
    size_t bl = strlen(bucket), pl = strlen(prefix);
    if (bl + 1 + pl > INDEX_KEY_PLAIN_MAX) {
        errmsg_set(em, "bucket and prefix are longer than %d bytes", INDEX_KEY_PLAIN_MAX - 1);
        return -EINVAL;
    }
    memcpy(out, bucket, bl);
    out[bl] = '/';
    memcpy(out + bl + 1, prefix, pl);
    return (int)(bl + 1 + pl);
}

static struct prule *rule_find(struct policy *p, const unsigned char *name, size_t len,
                               size_t *at)
{
    for (size_t i = 0; i < p->nrules; i++) {
        if (p->rules[i]->len == len && !memcmp(p->rules[i]->name, name, len)) {
            if (at)
                *at = i;
            return p->rules[i];
        }
    }
    return NULL;
}

/* Groups without a rule whose objects all fall under the rule @name now: dropped. */
static void groups_subsumed(struct policy *p, const unsigned char *name, size_t len)
{
    for (unsigned b = 0; b < POLICY_HASH_BUCKETS; b++) {
        for (struct pgroup **gp = &p->hash[b]; *gp;) {
            struct pgroup *g = *gp;
            if (g->len >= len && !memcmp(g->name, name, len)) {
                *gp = g->hnext;
                p->ngroups--;
                group_free(p, g);
            } else {
                gp = &g->hnext;
            }
        }
    }
}

static int rule_set(struct policy *p, const unsigned char *name, size_t len, int keep,
                    enum policy_src src, int64_t now, struct errmsg *em)
{
    struct prule *r = rule_find(p, name, len, NULL);
    if (!r) {
        if (p->nrules >= POLICY_RULES_MAX) {
            errmsg_set(em, "at most %d prefixes may have a rule", POLICY_RULES_MAX);
            return -EINVAL;
        }
        r = calloc(1, sizeof(*r));
        struct pgroup *g = calloc(1, sizeof(*g));
        if (!r || !g) {
            free(r);
            free(g);
            return -ENOMEM;
        }
        memcpy(r->name, name, len);
        r->len = len;
        memcpy(g->name, name, len);
        g->len = len;
        g->rule = r;
        r->g = g;
        p->rules[p->nrules++] = r;
        groups_subsumed(p, name, len);
    }
    r->keep = keep;
    r->src = src;
    r->g->last_ns = now; /* in use from now: a restart or a new rule protects at once */
    p->gen++;
    return 0;
}

static void rule_del(struct policy *p, const unsigned char *name, size_t len)
{
    size_t at = 0;
    struct prule *r = rule_find(p, name, len, &at);
    if (!r)
        return;
    group_free(p, r->g);
    free(r);
    memmove(&p->rules[at], &p->rules[at + 1], (p->nrules - at - 1) * sizeof(p->rules[0]));
    p->nrules--;
    p->gen++;
}

/* Adds the rules of a comma list (@opt names it in errors). */
static int rules_parse(struct policy *p, const char *list, int keep, const char *opt,
                       int64_t now, struct errmsg *em)
{
    if (!list)
        return 0;
    const char *s = list;
    while (*s) {
        size_t n = strcspn(s, ",");
        char item[POLICY_NAME_MAX + 16];
        const char *a = s, *e = s + n;
        while (a < e && (*a == ' ' || *a == '\t'))
            a++;
        while (e > a && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        s += n + (s[n] == ',');
        if (a == e)
            continue;
        if ((size_t)(e - a) >= sizeof(item)) {
            errmsg_set(em, "%s \"%.40s...\": too long", opt, a);
            return -EINVAL;
        }
        memcpy(item, a, (size_t)(e - a));
        item[e - a] = 0;
        char *slash = strchr(item, '/');
        const char *prefix = "";
        if (slash) {
            *slash = 0;
            prefix = slash + 1;
        }
        unsigned char name[POLICY_NAME_MAX];
        struct errmsg why = { "" };
        int len = rule_name(item, prefix, name, &why);
        if (len >= 0 && rule_find(p, name, (size_t)len, NULL)) {
            errmsg_set(em, "%s \"%s%s%s\": given twice (or in both --keep-prefix and "
                       "--lru-prefix)", opt, item, slash ? "/" : "", prefix);
            return -EINVAL;
        }
        int rc = len < 0 ? len : rule_set(p, name, (size_t)len, keep, SRC_CONFIG, now, &why);
        if (rc) {
            errmsg_set(em, "%s \"%s%s%s\": %s (want BUCKET or BUCKET/PREFIX, comma separated)",
                       opt, item, slash ? "/" : "", prefix, why.buf);
            return rc == -S3E_INVALID_BUCKET_NAME ? -EINVAL : rc;
        }
    }
    return 0;
}

/* ---- API ------------------------------------------------------------------------------- */

int policy_new(const char *keep, const char *lru, int auto_on, int64_t idle_ms, int64_t now_ns,
               struct policy **out, struct errmsg *em)
{
    struct policy *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    pthread_mutex_init(&p->mu, NULL);
    p->auto_on = auto_on;
    p->idle_ns = idle_ms * 1000000;
    int rc = 0;
    if (auto_on && !(p->ghosts = calloc(POLICY_GHOSTS, sizeof(*p->ghosts))))
        rc = -ENOMEM;
    if (!rc)
        rc = rules_parse(p, keep, 1, "--keep-prefix", now_ns, em);
    if (!rc)
        rc = rules_parse(p, lru, 0, "--lru-prefix", now_ns, em);
    if (rc) {
        policy_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

void policy_free(struct policy *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->nrules; i++) {
        group_free(p, p->rules[i]->g);
        free(p->rules[i]);
    }
    for (unsigned b = 0; b < POLICY_HASH_BUCKETS; b++) {
        while (p->hash[b]) {
            struct pgroup *g = p->hash[b];
            p->hash[b] = g->hnext;
            group_free(p, g);
        }
    }
    free(p->ghosts);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int policy_keeps(struct policy *p, const void *name, size_t len, int64_t now_ns,
                 int64_t *since)
{
    pthread_mutex_lock(&p->mu);
    struct pgroup *g = group_of(p, name, len, 0, now_ns);
    int keep = g && group_keeps(p, g, now_ns);
    if (since)
        *since = g && g->cur.reads ? g->pass_ns : now_ns;
    pthread_mutex_unlock(&p->mu);
    return keep;
}

void policy_touch(struct policy *p, const void *name, size_t len, int64_t now_ns)
{
    pthread_mutex_lock(&p->mu);
    struct pgroup *g = group_of(p, name, len, 0, now_ns);
    if (g) {
        group_expire(p, g, now_ns);
        g->last_ns = now_ns;
    }
    pthread_mutex_unlock(&p->mu);
}

void policy_read(struct policy *p, const void *name, size_t len, const struct policy_read *r,
                 int64_t now_ns)
{
    uint64_t h = hash_bytes(name, len);
    pthread_mutex_lock(&p->mu);
    struct pgroup *g = group_of(p, name, len, 1, now_ns);
    if (!g) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    group_expire(p, g, now_ns);
    g->last_ns = now_ns;
    pass_count(p, g, h, r, now_ns);
    if (r->fetched) {
        g->misses++;
        g->thrash += ghost_take(p, h);
        if (!g->rule && p->auto_on && !g->keep && g->thrash >= POLICY_THRASH_MIN
            && g->thrash * POLICY_THRASH_DIV >= g->misses) {
            g->keep = 1;
            p->gen++;
            log_info("cache: prefix \"%.*s\" switched to keep: %llu of the %llu misses of this "
                     "pass re-read objects LRU evicted", (int)g->len, g->name,
                     (unsigned long long)g->thrash, (unsigned long long)g->misses);
        }
    }
    pthread_mutex_unlock(&p->mu);
}

void policy_evicted(struct policy *p, const void *name, size_t len)
{
    if (!p->ghosts)
        return;
    uint64_t h = hash_bytes(name, len);
    pthread_mutex_lock(&p->mu);
    ghost_put(p, h);
    pthread_mutex_unlock(&p->mu);
}

int policy_set(struct policy *p, const char *bucket, const char *prefix, const char *mode,
               int64_t now_ns, struct errmsg *em)
{
    int keep;
    if (!strcmp(mode, "keep"))
        keep = 1;
    else if (!strcmp(mode, "lru"))
        keep = 0;
    else if (!strcmp(mode, "auto"))
        keep = -1;
    else {
        errmsg_set(em, "policy \"%s\": use keep, lru or auto", mode);
        return -EINVAL;
    }
    unsigned char name[POLICY_NAME_MAX];
    int len = rule_name(bucket, prefix ? prefix : "", name, em);
    if (len < 0)
        return len;
    pthread_mutex_lock(&p->mu);
    int rc = 0;
    if (keep < 0)
        rule_del(p, name, (size_t)len);
    else
        rc = rule_set(p, name, (size_t)len, keep, SRC_ADMIN, now_ns, em);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

uint64_t policy_gen(struct policy *p)
{
    pthread_mutex_lock(&p->mu);
    uint64_t g = p->gen;
    pthread_mutex_unlock(&p->mu);
    return g;
}

int policy_auto(const struct policy *p)
{
    return p->auto_on;
}

int64_t policy_idle_ms(const struct policy *p)
{
    return p->idle_ns / 1000000;
}

static void row_fill(struct policy *p, struct pgroup *g, int64_t now, struct cache_prefix_row *w)
{
    memset(w, 0, sizeof(*w));
    const unsigned char *slash = memchr(g->name, '/', g->len);
    size_t bl = slash ? (size_t)(slash - g->name) : g->len;
    snprintf(w->bucket, sizeof(w->bucket), "%.*s", (int)bl, g->name);
    if (slash)
        snprintf(w->prefix, sizeof(w->prefix), "%.*s", (int)(g->len - bl - 1), slash + 1);
    w->keep_active = group_keeps(p, g, now);
    int keep = g->rule ? g->rule->keep : g->keep;
    w->policy = keep ? "keep" : "lru";
    w->source = g->rule ? policy_src_names[g->rule->src]
                        : policy_src_names[g->keep ? SRC_AUTO : SRC_DEFAULT];
    w->idle_s = now > g->last_ns ? (double)(now - g->last_ns) / 1e9 : 0;
    w->passes = g->passes;
    w->last_cut = g->last_cut;
    w->last = g->last;
    w->cur = g->cur;
    w->misses = g->misses;
    w->thrash = g->thrash;
    w->read_bytes = g->read_bytes;
    w->hit_bytes = g->hit_bytes;
}

static int by_recent(const void *a, const void *b)
{
    const struct pgroup *x = *(struct pgroup *const *)a, *y = *(struct pgroup *const *)b;
    return x->last_ns < y->last_ns ? 1 : x->last_ns > y->last_ns ? -1 : 0;
}

int policy_report(struct policy *p, int64_t now_ns, struct cache_prefix_row **rows, size_t *n)
{
    pthread_mutex_lock(&p->mu);
    size_t cnt = p->nrules + p->ngroups, k = 0;
    struct cache_prefix_row *w = calloc(cnt ? cnt : 1, sizeof(*w));
    struct pgroup **gs = calloc(p->ngroups ? p->ngroups : 1, sizeof(*gs));
    if (!w || !gs) {
        pthread_mutex_unlock(&p->mu);
        free(w);
        free(gs);
        return -ENOMEM;
    }
    for (size_t i = 0; i < p->nrules; i++)
        row_fill(p, p->rules[i]->g, now_ns, &w[k++]);
    size_t ng = 0;
    for (unsigned b = 0; b < POLICY_HASH_BUCKETS; b++)
        for (struct pgroup *g = p->hash[b]; g; g = g->hnext)
            gs[ng++] = g;
    qsort(gs, ng, sizeof(*gs), by_recent);
    for (size_t i = 0; i < ng; i++)
        row_fill(p, gs[i], now_ns, &w[k++]);
    pthread_mutex_unlock(&p->mu);
    free(gs);
    *rows = w;
    *n = k;
    return 0;
}
