/*
 * ring.c: nginx's consistent-hash ring (`hash KEY consistent`) and nginx's $uri of a
 * request-target, reproduced from nginx's behaviour (ring.h has the algorithm). Owns
 * the sorted points and a copy of the server names; immutable once built.
 */
#include "ring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

struct ring_pt {
    uint32_t hash;
    uint32_t server;
    uint32_t seq; /* order of generation: the tie-break of a stable sort */
};

struct ring {
    size_t n;
    char **names;
    unsigned *weight;
    int *down;
    size_t n_down;
    size_t npts;
    struct ring_pt *pts;
};

uint32_t ring_hash(const void *key, size_t len)
{
    uLong c = crc32(0L, Z_NULL, 0);
    const unsigned char *p = key;
    while (len > 0) { /* zlib takes uInt lengths */
        uInt chunk = len > (1u << 30) ? (1u << 30) : (uInt)len;
        c = crc32(c, p, chunk);
        p += chunk;
        len -= chunk;
    }
    return (uint32_t)c;
}

/* nginx's split of a server's text into the host and port it hashes: "unix:PATH" is all
 * host; otherwise the last ':' splits when only digits follow it (also "host:" with an
 * empty port); a name without such a ':' is all host. */
static void ring_split(const char *s, size_t len, const char **host, size_t *host_len,
                       const char **port, size_t *port_len)
{
    *host = s;
    *host_len = len;
    *port = NULL;
    *port_len = 0;
    if (len >= 5 && strncasecmp(s, "unix:", 5) == 0) {
        *host = s + 5;
        *host_len = len - 5;
        return;
    }
    for (size_t j = 0; j < len; j++) {
        char c = s[len - j - 1];
        if (c == ':') {
            *host_len = len - j - 1;
            *port = s + len - j;
            *port_len = j;
            return;
        }
        if (c < '0' || c > '9')
            return;
    }
}

static int ring_pt_cmp(const void *a, const void *b)
{
    const struct ring_pt *x = a, *y = b;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

void ring_free(struct ring *r)
{
    if (!r)
        return;
    for (size_t i = 0; r->names && i < r->n; i++)
        free(r->names[i]);
    free(r->names);
    free(r->weight);
    free(r->down);
    free(r->pts);
    free(r);
}

int ring_new(const struct ring_server *servers, size_t n, struct ring **out)
{
    struct ring *r = NULL;
    size_t total = 0;

    *out = NULL;
    if (n == 0 || n > RING_SERVERS_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        size_t len = servers[i].name ? strlen(servers[i].name) : 0;
        if (len == 0 || len >= RING_NAME_MAX || servers[i].weight < 1 ||
            servers[i].weight > RING_WEIGHT_MAX)
            return -EINVAL;
        for (size_t k = 0; k < i; k++)
            if (strcmp(servers[k].name, servers[i].name) == 0)
                return -EEXIST;
        total += (size_t)servers[i].weight * RING_POINTS_PER_WEIGHT;
    }
    if (total > RING_POINTS_MAX)
        return -EINVAL;
    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->names = calloc(n, sizeof(*r->names));
    r->weight = calloc(n, sizeof(*r->weight));
    r->down = calloc(n, sizeof(*r->down));
    r->pts = malloc(total * sizeof(*r->pts));
    if (!r->names || !r->weight || !r->down || !r->pts)
        goto fail;
    r->n = n;
    for (size_t i = 0; i < n; i++) {
        r->names[i] = strdup(servers[i].name);
        if (!r->names[i])
            goto fail;
        r->weight[i] = servers[i].weight;
        r->down[i] = servers[i].down ? 1 : 0;
        r->n_down += (size_t)r->down[i];
    }

    for (size_t i = 0; i < n; i++) {
        const char *s = r->names[i], *host, *port;
        size_t host_len, port_len;
        unsigned char prev[4] = {0, 0, 0, 0};
        uLong base;

        ring_split(s, strlen(s), &host, &host_len, &port, &port_len);
        base = crc32(0L, Z_NULL, 0);
        base = crc32(base, (const Bytef *)host, (uInt)host_len);
        base = crc32(base, (const Bytef *)"", 1);
        if (port_len)
            base = crc32(base, (const Bytef *)port, (uInt)port_len);
        for (size_t j = 0; j < (size_t)r->weight[i] * RING_POINTS_PER_WEIGHT; j++) {
            uint32_t h = (uint32_t)crc32(base, prev, 4);
            r->pts[r->npts].hash = h;
            r->pts[r->npts].server = (uint32_t)i;
            r->pts[r->npts].seq = (uint32_t)r->npts;
            r->npts++;
            prev[0] = (unsigned char)(h & 0xff); /* little-endian, as nginx on x86/arm */
            prev[1] = (unsigned char)((h >> 8) & 0xff);
            prev[2] = (unsigned char)((h >> 16) & 0xff);
            prev[3] = (unsigned char)((h >> 24) & 0xff);
        }
    }
    /* nginx sorts with qsort (glibc: a stable merge sort) and keeps the first of equal
     * points: the one generated first, i.e. the earlier server in the list. */
    qsort(r->pts, r->npts, sizeof(*r->pts), ring_pt_cmp);
    size_t k = 0;
    for (size_t j = 1; j < r->npts; j++)
        if (r->pts[j].hash != r->pts[k].hash)
            r->pts[++k] = r->pts[j];
    r->npts = k + 1;
    *out = r;
    return 0;
fail:
    ring_free(r);
    return -ENOMEM;
}

size_t ring_count(const struct ring *r)
{
    return r->n;
}

const char *ring_name(const struct ring *r, size_t i)
{
    return i < r->n ? r->names[i] : NULL;
}

unsigned ring_weight(const struct ring *r, size_t i)
{
    return i < r->n ? r->weight[i] : 0;
}

int ring_down(const struct ring *r, size_t i)
{
    return i < r->n ? r->down[i] : 1;
}

size_t ring_points(const struct ring *r)
{
    return r->npts;
}

void ring_point(const struct ring *r, size_t i, uint32_t *hash, size_t *server)
{
    *hash = r->pts[i].hash;
    *server = r->pts[i].server;
}

int ring_owner_hash(const struct ring *r, uint32_t hash)
{
    size_t lo = 0, hi = r->npts;

    if (r->n_down == r->n)
        return -ENOENT;
    if (r->n == 1) /* nginx: a single peer is used without hashing */
        return 0;
    while (lo < hi) { /* the first point >= hash; npts when none (wraps to 0) */
        size_t mid = lo + (hi - lo) / 2;
        if (r->pts[mid].hash < hash)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t t = 0; t < RING_NGINX_TRIES; t++) {
        size_t s = r->pts[(lo + t) % r->npts].server;
        if (!r->down[s])
            return (int)s;
    }
    return -EAGAIN;
}

int ring_owner(const struct ring *r, const void *key, size_t len)
{
    if (len == 0 && r->n > 1 && r->n_down < r->n)
        return -EAGAIN; /* nginx: an empty key falls back to round robin */
    return ring_owner_hash(r, ring_hash(key, len));
}

/* --- $uri ---------------------------------------------------------------------------- */

static int ring_hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Drops the last segment and the "/.." written after it ("/a/b/.." -> "/a/"): @o ends
 * with "/.."; nginx steps back from the byte before that '/' to the previous '/'.
 * Returns -EINVAL when there is nothing to drop ("/.."). */
static int ring_uri_pop(const char *out, size_t *o)
{
    size_t p;
    if (*o < 4)
        return -EINVAL;
    p = *o - 4;
    while (out[p] != '/') /* out[0] is always '/' */
        p--;
    *o = p + 1;
    return 0;
}

enum ring_uri_state { URI_USUAL, URI_SLASH, URI_DOT, URI_DOTDOT };

ssize_t ring_nginx_uri(const char *target, size_t len, char *out, size_t cap)
{
    const unsigned char *in = (const unsigned char *)target;
    enum ring_uri_state st = URI_USUAL;
    size_t i = 0, o = 0;

    if (len == 0 || in[0] != '/')
        return -EINVAL;
    for (size_t k = 0; k < len; k++) /* nginx refuses these anywhere in the target */
        if (in[k] <= 0x20 || in[k] == 0x7f)
            return -EINVAL;
    while (i < len) {
        unsigned c = in[i++];
        int plain = 0; /* a decoded '%', '?' or '#': an ordinary byte */

        if (c == '?' || c == '#')
            break;
        if (c == '%') {
            int hi, lo;
            if (i + 2 > len || (hi = ring_hexval(in[i])) < 0 || (lo = ring_hexval(in[i + 1])) < 0)
                return -EINVAL;
            i += 2;
            c = (unsigned)(hi << 4 | lo);
            if (c == 0)
                return -EINVAL;
            plain = c == '%' || c == '?' || c == '#';
        }
        if (o >= cap)
            return -ENOSPC;
        if (!plain && c == '/') {
            switch (st) {
            case URI_SLASH: /* merge_slashes */
                break;
            case URI_DOT: /* "/./" -> "/" */
                o--;
                break;
            case URI_DOTDOT:
                if (ring_uri_pop(out, &o) < 0)
                    return -EINVAL;
                break;
            case URI_USUAL:
                out[o++] = '/';
                break;
            }
            st = URI_SLASH;
            continue;
        }
        if (!plain && c == '.' && (st == URI_SLASH || st == URI_DOT)) {
            out[o++] = '.';
            st = st == URI_SLASH ? URI_DOT : URI_DOTDOT;
            continue;
        }
        out[o++] = (char)c;
        st = URI_USUAL;
    }
    if (st == URI_DOT)
        o--;
    else if (st == URI_DOTDOT && ring_uri_pop(out, &o) < 0)
        return -EINVAL;
    return (ssize_t)o;
}
