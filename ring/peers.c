/*
 * peers.c: membership of the gateways behind one balancer (peers.h). Owns the current
 * snapshot (a ring, the index of self, a generation) and, for a dns: list, the refresher
 * thread that re-resolves the name and swaps a new snapshot in. Readers take a counted
 * reference under a read lock held only to copy the pointer; the last reference frees a
 * snapshot. Nothing here logs: failures are counted in peers_stats().
 */
#include "peers.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PEERS_MAGIC 0x9ee2a51cu

struct peers_snap {
    atomic_uint refs;
    struct ring *ring; /* NULL: no address yet */
    int self;
    uint64_t gen;
};

struct peers {
    unsigned magic;
    pthread_rwlock_t lock; /* guards cur: held to copy it and take a reference, or swap it */
    struct peers_snap *cur;

    char *self;      /* NULL: none */
    char *dns_host;  /* NULL: a static list */
    uint16_t dns_port;
    struct peers_opts opts;

    pthread_mutex_t refresh_mu; /* one resolution + swap at a time */
    pthread_mutex_t mu;         /* the fields below */
    pthread_cond_t cv;          /* wakes the refresher to stop */
    int stopping;
    int thr_started;
    pthread_t thr;
    uint64_t resolutions, failures;
    int last_error;
};

static void peers_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void peers_errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* --- static lists ---------------------------------------------------------------------- */

void peers_servers_free(struct ring_server *servers, size_t n)
{
    if (!servers)
        return;
    for (size_t i = 0; i < n; i++)
        free((char *)servers[i].name);
    free(servers);
}

/* nginx's ngx_atoi over [s, s+len): digits only, at least one. Returns -1 otherwise or
 * above @max. */
static long peers_atoi(const char *s, size_t len, long max)
{
    long v = 0;
    if (len == 0)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
        if (v > max)
            return -1;
    }
    return v;
}

/* One entry [s, s+len), already trimmed, into @sv. */
static int peers_parse_entry(const char *s, size_t len, size_t idx, struct ring_server *sv,
                             char *err, size_t errlen)
{
    size_t i = 0, nl;
    char *name;

    while (i < len && !isspace((unsigned char)s[i]))
        i++;
    nl = i;
    if (nl >= RING_NAME_MAX) {
        peers_errf(err, errlen, "--peers entry %zu: name longer than %d bytes", idx + 1,
                   RING_NAME_MAX - 1);
        return -EINVAL;
    }
    sv->weight = 1;
    sv->down = 0;
    while (i < len) {
        size_t t0, tl;
        while (i < len && isspace((unsigned char)s[i]))
            i++;
        t0 = i;
        while (i < len && !isspace((unsigned char)s[i]))
            i++;
        tl = i - t0;
        if (tl == 0)
            break;
        const char *t = s + t0;
        if (tl > 7 && strncmp(t, "weight=", 7) == 0) {
            long w = peers_atoi(t + 7, tl - 7, RING_WEIGHT_MAX);
            if (w < 1) {
                peers_errf(err, errlen, "--peers entry %zu (%.*s): weight must be 1..%d",
                           idx + 1, (int)nl, s, RING_WEIGHT_MAX);
                return -EINVAL;
            }
            sv->weight = (unsigned)w;
        } else if (tl == 4 && strncmp(t, "down", 4) == 0) {
            sv->down = 1;
        } else if ((tl > 10 && strncmp(t, "max_fails=", 10) == 0) ||
                   (tl > 10 && strncmp(t, "max_conns=", 10) == 0) ||
                   (tl > 13 && strncmp(t, "fail_timeout=", 13) == 0)) {
            /* nginx's passive health state: not part of the ring */
        } else if (tl == 6 && strncmp(t, "backup", 6) == 0) {
            peers_errf(err, errlen,
                       "--peers entry %zu (%.*s): backup is not allowed with consistent "
                       "hashing (nginx refuses it after `hash` and gives it no points)",
                       idx + 1, (int)nl, s);
            return -EINVAL;
        } else {
            peers_errf(err, errlen, "--peers entry %zu (%.*s): unknown parameter \"%.*s\"",
                       idx + 1, (int)nl, s, (int)tl, t);
            return -EINVAL;
        }
    }
    name = strndup(s, nl);
    if (!name)
        return -ENOMEM;
    sv->name = name;
    return 0;
}

int peers_parse(const char *spec, struct ring_server **out, size_t *n, char *err, size_t errlen)
{
    struct ring_server *sv = NULL;
    size_t cnt = 0, cap = 0;
    const char *p = spec;
    int rc;

    *out = NULL;
    *n = 0;
    if (!spec) {
        peers_errf(err, errlen, "--peers: empty");
        return -EINVAL;
    }
    for (;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len && isspace((unsigned char)*p))
            p++, len--;
        while (len && isspace((unsigned char)p[len - 1]))
            len--;
        if (len == 0) {
            peers_errf(err, errlen, "--peers: entry %zu is empty", cnt + 1);
            rc = -EINVAL;
            goto fail;
        }
        if (cnt == RING_SERVERS_MAX) {
            peers_errf(err, errlen, "--peers: more than %d entries", RING_SERVERS_MAX);
            rc = -EINVAL;
            goto fail;
        }
        if (cnt == cap) {
            size_t nc = cap ? cap * 2 : 8;
            struct ring_server *ns = realloc(sv, nc * sizeof(*ns));
            if (!ns) {
                rc = -ENOMEM;
                goto fail;
            }
            sv = ns;
            cap = nc;
        }
        rc = peers_parse_entry(p, len, cnt, &sv[cnt], err, errlen);
        if (rc < 0)
            goto fail;
        for (size_t k = 0; k < cnt; k++)
            if (strcmp(sv[k].name, sv[cnt].name) == 0) {
                peers_errf(err, errlen, "--peers: \"%s\" is listed twice", sv[cnt].name);
                cnt++;
                rc = -EINVAL;
                goto fail;
            }
        cnt++;
        if (!e)
            break;
        p = e + 1;
    }
    *out = sv;
    *n = cnt;
    return 0;
fail:
    peers_servers_free(sv, cnt);
    return rc;
}

/* --- addresses ----------------------------------------------------------------------- */

int peers_addr_name(const struct sockaddr *sa, char *buf, size_t len)
{
    char a[INET6_ADDRSTRLEN];
    int w;

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        if (!inet_ntop(AF_INET, &s4->sin_addr, a, sizeof(a)))
            return -EINVAL;
        w = snprintf(buf, len, "%s:%u", a, (unsigned)ntohs(s4->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        if (!inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a)))
            return -EINVAL;
        w = snprintf(buf, len, "[%s]:%u", a, (unsigned)ntohs(s6->sin6_port));
    } else {
        return -EINVAL;
    }
    return w < 0 || (size_t)w >= len ? -EINVAL : 0;
}

/* Order of a dns: list: IPv4 before IPv6, then by address bytes (so 10.0.0.9 before
 * 10.0.0.10), then port. */
static int peers_addr_cmp(const void *a, const void *b)
{
    const struct sockaddr_storage *x = a, *y = b;
    int c;
    if (x->ss_family != y->ss_family)
        return x->ss_family == AF_INET ? -1 : 1;
    if (x->ss_family == AF_INET) {
        const struct sockaddr_in *p = (const void *)x, *q = (const void *)y;
        c = memcmp(&p->sin_addr, &q->sin_addr, sizeof(p->sin_addr));
        return c ? c : (int)ntohs(p->sin_port) - (int)ntohs(q->sin_port);
    }
    const struct sockaddr_in6 *p = (const void *)x, *q = (const void *)y;
    c = memcmp(&p->sin6_addr, &q->sin6_addr, sizeof(p->sin6_addr));
    return c ? c : (int)ntohs(p->sin6_port) - (int)ntohs(q->sin6_port);
}

static int peers_gai(void *cls, const char *host, struct sockaddr_storage *addrs, size_t max,
                     size_t *n)
{
    struct addrinfo hints, *res = NULL;
    int rc;

    (void)cls;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    *n = 0;
    rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0) {
        if (rc == EAI_NONAME)
            return -ENOENT;
#ifdef EAI_NODATA
        if (rc == EAI_NODATA)
            return -ENOENT;
#endif
        if (rc == EAI_MEMORY)
            return -ENOMEM;
        if (rc == EAI_SYSTEM && errno)
            return -errno;
        return -EAGAIN;
    }
    for (struct addrinfo *ai = res; ai && *n < max; ai = ai->ai_next) {
        if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
            ai->ai_addrlen > sizeof(addrs[0]))
            continue;
        memset(&addrs[*n], 0, sizeof(addrs[0]));
        memcpy(&addrs[*n], ai->ai_addr, ai->ai_addrlen);
        (*n)++;
    }
    freeaddrinfo(res);
    return 0;
}

/* Splits "NAME:PORT" (after "dns:") into @p. */
static int peers_parse_dns(struct peers *p, const char *s, char *err, size_t errlen)
{
    const char *colon = strrchr(s, ':');
    long port;

    if (!colon || colon == s ||
        (port = peers_atoi(colon + 1, strlen(colon + 1), 65535)) < 1) {
        peers_errf(err, errlen, "--peers dns:%s: want dns:NAME:PORT with a port 1..65535", s);
        return -EINVAL;
    }
    for (const char *c = s; c < colon; c++)
        if (isspace((unsigned char)*c) || *c == ',' || *c == ':' || *c == '[') {
            peers_errf(err, errlen, "--peers dns:%s: NAME must be a DNS name", s);
            return -EINVAL;
        }
    p->dns_host = strndup(s, (size_t)(colon - s));
    if (!p->dns_host)
        return -ENOMEM;
    p->dns_port = (uint16_t)port;
    return 0;
}

/* --self of a dns: list in peers_addr_name()'s form when it is ADDR:PORT or [ADDR]:PORT;
 * anything else is kept as it is (and then never matches an address). */
static char *peers_canon_self(const char *self)
{
    char host[INET6_ADDRSTRLEN], name[RING_NAME_MAX];
    const char *colon = strrchr(self, ':'), *h = self;
    struct sockaddr_storage ss;
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    long port;
    size_t hl;

    if (!colon || (port = peers_atoi(colon + 1, strlen(colon + 1), 65535)) < 0)
        return strdup(self);
    hl = (size_t)(colon - self);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl == 0 || hl >= sizeof(host))
        return strdup(self);
    memcpy(host, h, hl);
    host[hl] = '\0';
    memset(&ss, 0, sizeof(ss));
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
    } else {
        return strdup(self);
    }
    if (peers_addr_name((struct sockaddr *)&ss, name, sizeof(name)) < 0)
        return strdup(self);
    return strdup(name);
}

/* --- snapshots ------------------------------------------------------------------------- */

static void peers_snap_free(struct peers_snap *s)
{
    ring_free(s->ring);
    free(s);
}

void peers_snap_put(struct peers_snap *s)
{
    if (s && atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
        peers_snap_free(s);
}

struct peers_snap *peers_snap_get(struct peers *p)
{
    struct peers_snap *s;
    pthread_rwlock_rdlock(&p->lock);
    s = p->cur;
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
    pthread_rwlock_unlock(&p->lock);
    return s;
}

const struct ring *peers_snap_ring(const struct peers_snap *s)
{
    return s->ring;
}

int peers_snap_self(const struct peers_snap *s)
{
    return s->self;
}

uint64_t peers_snap_generation(const struct peers_snap *s)
{
    return s->gen;
}

/* A new snapshot owning @ring (taken even on failure), self looked up by name. */
static struct peers_snap *peers_snap_new(struct ring *ring, const char *self, uint64_t gen)
{
    struct peers_snap *s = calloc(1, sizeof(*s));
    if (!s) {
        ring_free(ring);
        return NULL;
    }
    atomic_init(&s->refs, 1);
    s->ring = ring;
    s->gen = gen;
    s->self = -1;
    for (size_t i = 0; ring && self && i < ring_count(ring); i++)
        if (strcmp(ring_name(ring, i), self) == 0)
            s->self = (int)i;
    return s;
}

/* Makes @s current (the old one is released after the swap). */
static void peers_swap(struct peers *p, struct peers_snap *s)
{
    struct peers_snap *old;
    pthread_rwlock_wrlock(&p->lock);
    old = p->cur;
    p->cur = s;
    pthread_rwlock_unlock(&p->lock);
    peers_snap_put(old);
}

/* --- dns: resolution -------------------------------------------------------------------- */

static int peers_resolve_once(struct peers *p)
{
    struct sockaddr_storage *addrs = NULL;
    struct ring_server *sv = NULL;
    struct peers_snap *cur = NULL, *s;
    struct ring *ring = NULL;
    size_t n = 0, k = 0;
    int rc;

    addrs = calloc(PEERS_ADDRS_MAX, sizeof(*addrs));
    if (!addrs)
        return -ENOMEM;
    rc = p->opts.resolve(p->opts.resolve_cls, p->dns_host, addrs, PEERS_ADDRS_MAX, &n);
    if (rc == 0 && n == 0)
        rc = -ENOENT;
    if (rc < 0)
        goto out;
    for (size_t i = 0; i < n; i++) { /* the port is ours, not the resolver's */
        if (addrs[i].ss_family == AF_INET)
            ((struct sockaddr_in *)&addrs[i])->sin_port = htons(p->dns_port);
        else if (addrs[i].ss_family == AF_INET6)
            ((struct sockaddr_in6 *)&addrs[i])->sin6_port = htons(p->dns_port);
    }
    qsort(addrs, n, sizeof(*addrs), peers_addr_cmp);
    sv = calloc(n, sizeof(*sv));
    if (!sv) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        char name[RING_NAME_MAX];
        if (peers_addr_name((struct sockaddr *)&addrs[i], name, sizeof(name)) < 0)
            continue;
        if (k > 0 && strcmp(sv[k - 1].name, name) == 0)
            continue; /* sorted: duplicates are adjacent */
        sv[k].name = strdup(name);
        if (!sv[k].name) {
            rc = -ENOMEM;
            goto out;
        }
        sv[k].weight = 1;
        k++;
    }
    if (k == 0) {
        rc = -ENOENT;
        goto out;
    }
    cur = peers_snap_get(p);
    if (cur->ring && ring_count(cur->ring) == k) {
        size_t i = 0;
        while (i < k && strcmp(ring_name(cur->ring, i), sv[i].name) == 0)
            i++;
        if (i == k) {
            rc = 0; /* unchanged */
            goto out;
        }
    }
    rc = ring_new(sv, k, &ring);
    if (rc < 0)
        goto out;
    s = peers_snap_new(ring, p->self, cur->gen + 1);
    if (!s) {
        rc = -ENOMEM;
        goto out;
    }
    peers_swap(p, s);
    rc = 1;
out:
    peers_snap_put(cur);
    peers_servers_free(sv, k);
    free(addrs);
    pthread_mutex_lock(&p->mu);
    p->resolutions++;
    if (rc < 0) {
        p->failures++;
        p->last_error = rc;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int peers_refresh(struct peers *p)
{
    int rc;
    if (!p->dns_host)
        return 0;
    pthread_mutex_lock(&p->refresh_mu);
    rc = peers_resolve_once(p);
    pthread_mutex_unlock(&p->refresh_mu);
    return rc;
}

static void *peers_refresher(void *arg)
{
    struct peers *p = arg;
    struct timespec dl;

    pthread_mutex_lock(&p->mu);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_sec += p->opts.refresh_ms / 1000;
        dl.tv_nsec += (long)(p->opts.refresh_ms % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        while (!p->stopping && pthread_cond_timedwait(&p->cv, &p->mu, &dl) != ETIMEDOUT)
            ;
        if (p->stopping)
            break;
        pthread_mutex_unlock(&p->mu);
        peers_refresh(p);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* --- life ---------------------------------------------------------------------------- */

void peers_free(struct peers *p)
{
    if (!p)
        return;
    if (p->thr_started) {
        pthread_mutex_lock(&p->mu);
        p->stopping = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thr, NULL);
    }
    peers_snap_put(p->cur);
    pthread_rwlock_destroy(&p->lock);
    pthread_mutex_destroy(&p->refresh_mu);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->self);
    free(p->dns_host);
    p->magic = 0;
    free(p);
}

int peers_new(const char *spec, const char *self, const struct peers_opts *opts,
              struct peers **out, char *err, size_t errlen)
{
    struct peers *p;
    struct ring_server *sv = NULL;
    struct ring *ring = NULL;
    pthread_condattr_t ca;
    size_t n = 0;
    int rc;

    *out = NULL;
    if (err && errlen)
        err[0] = '\0';
    p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->magic = PEERS_MAGIC;
    pthread_rwlock_init(&p->lock, NULL);
    pthread_mutex_init(&p->refresh_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (opts)
        p->opts = *opts;
    if (!p->opts.refresh_ms)
        p->opts.refresh_ms = PEERS_REFRESH_MS_DEFAULT;
    if (!p->opts.resolve)
        p->opts.resolve = peers_gai;

    if (spec && strncmp(spec, "dns:", 4) == 0) {
        rc = peers_parse_dns(p, spec + 4, err, errlen);
        if (rc < 0)
            goto fail;
        if (self && *self && !(p->self = peers_canon_self(self))) {
            rc = -ENOMEM;
            goto fail;
        }
        p->cur = peers_snap_new(NULL, NULL, 0);
        if (!p->cur) {
            rc = -ENOMEM;
            goto fail;
        }
        (void)peers_refresh(p); /* a failure is counted; the refresher retries */
        rc = pthread_create(&p->thr, NULL, peers_refresher, p);
        if (rc != 0) {
            rc = -rc;
            goto fail;
        }
        p->thr_started = 1;
        *out = p;
        return 0;
    }

    rc = peers_parse(spec, &sv, &n, err, errlen);
    if (rc < 0)
        goto fail;
    if (self && *self) {
        size_t i = 0;
        while (i < n && strcmp(sv[i].name, self) != 0)
            i++;
        if (i == n) {
            peers_errf(err, errlen, "--self \"%s\" is not one of the --peers entries", self);
            rc = -EINVAL;
            goto fail;
        }
        if (!(p->self = strdup(self))) {
            rc = -ENOMEM;
            goto fail;
        }
    }
    rc = ring_new(sv, n, &ring);
    if (rc < 0) {
        peers_errf(err, errlen, "--peers: cannot build the ring: %s", strerror(-rc));
        goto fail;
    }
    p->cur = peers_snap_new(ring, p->self, 1);
    if (!p->cur) {
        rc = -ENOMEM;
        goto fail;
    }
    peers_servers_free(sv, n);
    *out = p;
    return 0;
fail:
    peers_servers_free(sv, n);
    peers_free(p);
    return rc;
}

/* --- lookups ------------------------------------------------------------------------- */

static int peers_owner_of(struct peers *p, int uri, const void *key, size_t len,
                          struct peers_owner *out)
{
    struct peers_snap *s = peers_snap_get(p);
    char stackbuf[1024], *buf = stackbuf;
    int rc;

    memset(out, 0, sizeof(*out));
    out->index = -1;
    out->generation = s->gen;
    if (uri) {
        ssize_t ul;
        if (len > sizeof(stackbuf) && !(buf = malloc(len))) {
            rc = -ENOMEM;
            goto out;
        }
        ul = ring_nginx_uri(key, len, buf, len);
        if (ul < 0) {
            rc = (int)ul;
            goto out;
        }
        key = buf;
        len = (size_t)ul;
    }
    if (!s->ring) {
        rc = -ENOENT;
        goto out;
    }
    rc = ring_owner(s->ring, key, len);
    if (rc >= 0) {
        out->index = rc;
        out->is_self = rc == s->self;
        snprintf(out->name, sizeof(out->name), "%s", ring_name(s->ring, (size_t)rc));
        rc = 0;
    }
out:
    if (buf != stackbuf)
        free(buf);
    peers_snap_put(s);
    return rc;
}

int peers_owner(struct peers *p, const void *key, size_t len, struct peers_owner *out)
{
    return peers_owner_of(p, 0, key, len, out);
}

int peers_owner_uri(struct peers *p, const char *target, size_t len, struct peers_owner *out)
{
    return peers_owner_of(p, 1, target, len, out);
}

void peers_stats(struct peers *p, struct peers_stats *out)
{
    struct peers_snap *s = peers_snap_get(p);
    memset(out, 0, sizeof(*out));
    out->generation = s->gen;
    out->count = s->ring ? ring_count(s->ring) : 0;
    out->self = s->self;
    peers_snap_put(s);
    pthread_mutex_lock(&p->mu);
    out->resolutions = p->resolutions;
    out->failures = p->failures;
    out->last_error = p->last_error;
    pthread_mutex_unlock(&p->mu);
}
