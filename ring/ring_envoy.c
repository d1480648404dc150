/*
 * ring_envoy.c: Envoy's RING_HASH ring (XX_HASH) and XXH64, reproduced from Envoy's
 * behaviour (ring_envoy.h has the algorithm). Owns the sorted entries and a copy of the
 * names; immutable once built.
 */
#include "ring_envoy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- XXH64 (the published algorithm) --------------------------------------------------- */

#define XX_P1 0x9E3779B185EBCA87ull
#define XX_P2 0xC2B2AE3D27D4EB4Full
#define XX_P3 0x165667B19E3779F9ull
#define XX_P4 0x85EBCA77C2B2AE63ull
#define XX_P5 0x27D4EB2F165667C5ull

static uint64_t xx_rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static uint64_t xx_read64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t xx_read32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t xx_round(uint64_t acc, uint64_t in)
{
    acc += in * XX_P2;
    acc = xx_rotl(acc, 31);
    return acc * XX_P1;
}

static uint64_t xx_merge(uint64_t acc, uint64_t v)
{
    acc ^= xx_round(0, v);
    return acc * XX_P1 + XX_P4;
}

uint64_t ring_xxh64(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data, *end = p + len;
    uint64_t h;

    if (len >= 32) {
        uint64_t v1 = seed + XX_P1 + XX_P2, v2 = seed + XX_P2, v3 = seed, v4 = seed - XX_P1;
        do {
            v1 = xx_round(v1, xx_read64(p));
            v2 = xx_round(v2, xx_read64(p + 8));
            v3 = xx_round(v3, xx_read64(p + 16));
            v4 = xx_round(v4, xx_read64(p + 24));
            p += 32;
        } while (end - p >= 32);
        h = xx_rotl(v1, 1) + xx_rotl(v2, 7) + xx_rotl(v3, 12) + xx_rotl(v4, 18);
        h = xx_merge(h, v1);
        h = xx_merge(h, v2);
        h = xx_merge(h, v3);
        h = xx_merge(h, v4);
    } else {
        h = seed + XX_P5;
    }
    h += (uint64_t)len;
    while (end - p >= 8) {
        h ^= xx_round(0, xx_read64(p));
        h = xx_rotl(h, 27) * XX_P1 + XX_P4;
        p += 8;
    }
    if (end - p >= 4) {
        h ^= (uint64_t)xx_read32(p) * XX_P1;
        h = xx_rotl(h, 23) * XX_P2 + XX_P3;
        p += 4;
    }
    while (p < end) {
        h ^= (uint64_t)*p * XX_P5;
        h = xx_rotl(h, 11) * XX_P1;
        p++;
    }
    h ^= h >> 33;
    h *= XX_P2;
    h ^= h >> 29;
    h *= XX_P3;
    h ^= h >> 32;
    return h;
}

/* --- the ring ------------------------------------------------------------------------- */

/* std::ceil for the positive values below 2^63 met here (no libm) */
static double ring_envoy_ceil(double x)
{
    double t = (double)(uint64_t)x;
    return t < x ? t + 1.0 : t;
}

struct ring_envoy_pt {
    uint64_t hash;
    uint32_t server;
    uint32_t seq;
};

struct ring_envoy {
    size_t n;
    char **names;
    size_t *npts_of;
    size_t npts;
    struct ring_envoy_pt *pts;
};

static int ring_envoy_pt_cmp(const void *a, const void *b)
{
    const struct ring_envoy_pt *x = a, *y = b;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq; /* std::sort leaves equal hashes unordered */
}

void ring_envoy_free(struct ring_envoy *r)
{
    if (!r)
        return;
    for (size_t i = 0; r->names && i < r->n; i++)
        free(r->names[i]);
    free(r->names);
    free(r->npts_of);
    free(r->pts);
    free(r);
}

int ring_envoy_new(const struct ring_server *servers, size_t n, uint64_t min_size,
                   uint64_t max_size, struct ring_envoy **out)
{
    struct ring_envoy *r = NULL;
    uint64_t sum = 0, ring_size;
    double min_w = 1.0, scale, current = 0.0, target = 0.0;
    size_t up = 0;

    *out = NULL;
    if (!min_size)
        min_size = RING_ENVOY_MIN_SIZE_DEFAULT;
    if (!max_size)
        max_size = RING_ENVOY_MAX_SIZE_DEFAULT;
    if (n == 0 || n > RING_SERVERS_MAX || min_size > max_size ||
        max_size > RING_ENVOY_MAX_SIZE_DEFAULT)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        size_t len = servers[i].name ? strlen(servers[i].name) : 0;
        if (len == 0 || len >= RING_NAME_MAX || servers[i].weight < 1 ||
            servers[i].weight > RING_WEIGHT_MAX)
            return -EINVAL;
        for (size_t k = 0; k < i; k++)
            if (strcmp(servers[k].name, servers[i].name) == 0)
                return -EEXIST;
        if (!servers[i].down) {
            sum += servers[i].weight;
            up++;
        }
    }
    if (up == 0)
        return -EINVAL;
    /* Envoy's normalizeHostWeights() and Ring(): the same double operations, in order */
    for (size_t i = 0; i < n; i++) {
        if (servers[i].down)
            continue;
        double w = (double)servers[i].weight * 1.0 / (double)sum;
        if (w < min_w)
            min_w = w;
    }
    scale = ring_envoy_ceil(min_w * (double)min_size) / min_w;
    if (scale > (double)max_size)
        scale = (double)max_size;
    ring_size = (uint64_t)ring_envoy_ceil(scale);

    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->names = calloc(n, sizeof(*r->names));
    r->npts_of = calloc(n, sizeof(*r->npts_of));
    r->pts = malloc((ring_size + n) * sizeof(*r->pts)); /* + rounding slack */
    if (!r->names || !r->npts_of || !r->pts)
        goto fail;
    r->n = n;
    for (size_t i = 0; i < n; i++)
        if (!(r->names[i] = strdup(servers[i].name)))
            goto fail;
    for (size_t i = 0; i < n; i++) {
        char key[RING_NAME_MAX + 24];
        if (servers[i].down)
            continue;
        double w = (double)servers[i].weight * 1.0 / (double)sum;
        volatile double add = scale * w; /* no fused multiply-add: Envoy rounds twice too */
        target += add;
        for (uint64_t k = 0; current < target; k++) {
            int kl = snprintf(key, sizeof(key), "%s_%llu", servers[i].name, (unsigned long long)k);
            if (r->npts == ring_size + n)
                break; /* cannot happen: current stays within ceil(scale) */
            r->pts[r->npts].hash = ring_xxh64(key, (size_t)kl, 0);
            r->pts[r->npts].server = (uint32_t)i;
            r->pts[r->npts].seq = (uint32_t)r->npts;
            r->npts++;
            r->npts_of[i]++;
            current += 1.0;
        }
    }
    qsort(r->pts, r->npts, sizeof(*r->pts), ring_envoy_pt_cmp);
    *out = r;
    return 0;
fail:
    ring_envoy_free(r);
    return -ENOMEM;
}

size_t ring_envoy_count(const struct ring_envoy *r)
{
    return r->n;
}

const char *ring_envoy_name(const struct ring_envoy *r, size_t i)
{
    return i < r->n ? r->names[i] : NULL;
}

size_t ring_envoy_points(const struct ring_envoy *r)
{
    return r->npts;
}

void ring_envoy_point(const struct ring_envoy *r, size_t i, uint64_t *hash, size_t *server)
{
    *hash = r->pts[i].hash;
    *server = r->pts[i].server;
}

size_t ring_envoy_server_points(const struct ring_envoy *r, size_t i)
{
    return i < r->n ? r->npts_of[i] : 0;
}

/* Envoy's ketama search finds the first entry >= @hash, or wraps to entry 0. */
int ring_envoy_owner_hash(const struct ring_envoy *r, uint64_t hash)
{
    size_t lo = 0, hi = r->npts;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->pts[mid].hash < hash)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (int)r->pts[lo == r->npts ? 0 : lo].server;
}

int ring_envoy_owner_path(const struct ring_envoy *r, const char *target, size_t len)
{
    const char *q = memchr(target, '?', len);
    return ring_envoy_owner_hash(r, ring_xxh64(target, q ? (size_t)(q - target) : len, 0));
}
