/*
 * peer_resync.c: the gateways owed a resync (peer_resync.h) and the thread that asks them.
 * An entry per gateway name: how many notices it missed, and, while a resync is in flight,
 * how many it had missed when that was sent. A confirmed resync clears the entry only when
 * nothing was missed since it was sent (a write acknowledged after the other gateway set its
 * mark but before its answer arrived is covered by the next one). A gateway that joins the
 * ring of a dns: list is owed one too: out of the list, it heard no notices (a pod that was
 * not ready for a while and is again, without a restart). The names owed one are kept in a
 * file (written when the set changes, which is rare), so that a gateway restarted before
 * the others came back still asks them.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/log.h"
#include "peer.h"
#include "peer_resync.h"

#define PEER_RESYNC_EVERY_MS 1000
#define PEER_OWED_MAX 4096 /* names kept (a dns: list of that many gateways all down) */

struct peer_owed {
    char name[RING_NAME_MAX];
    uint64_t missed; /* notices missed so far */
    uint64_t asked;  /* @missed when the resync in flight was sent */
    int inflight;
};

struct peer_resync {
    struct peer *p;
    char *path;         /* the file of the names owed a resync; NULL: none */
    int save_failed;    /* logged once */
    pthread_mutex_t mu; /* everything below */
    pthread_cond_t cv;
    struct peer_owed *owed;
    size_t n, cap;
    int stop, started;
    uint64_t resyncs;
    char **members;       /* the ring's names at the last round (resync thread only) */
    uint64_t members_gen; /* its generation, 0: none yet */
    pthread_t thr;
};

struct peer_resync_call {
    struct peer_resync *r;
    char name[RING_NAME_MAX];
};

static struct peer_owed *owed_find_locked(struct peer_resync *r, const char *name)
{
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->owed[i].name, name))
            return &r->owed[i];
    return NULL;
}

/* Writes the names owed a resync to r->path (a temporary file renamed over it). Logs a
 * failure once: the debts stay in memory. */
static void owed_save_locked(struct peer_resync *r)
{
    char tmp[4096];
    if (!r->path || snprintf(tmp, sizeof(tmp), "%s.tmp", r->path) >= (int)sizeof(tmp))
        return;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int ok = fd >= 0;
    for (size_t i = 0; ok && i < r->n; i++) {
        size_t len = strlen(r->owed[i].name);
        ok = write(fd, r->owed[i].name, len) == (ssize_t)len && write(fd, "\n", 1) == 1;
    }
    ok = ok && fsync(fd) == 0;
    if (fd >= 0)
        close(fd);
    ok = ok && rename(tmp, r->path) == 0;
    if (!ok) {
        unlink(tmp);
        if (!r->save_failed++)
            log_warn("cluster: cannot write %s (%s): the gateways owed a resync are not "
                     "remembered across a restart",
                     r->path, strerror(errno));
    }
}

/* The names a past run owed a resync (one a line), owed again. */
static void owed_load(struct peer_resync *r)
{
    char line[RING_NAME_MAX + 2];
    FILE *f = r->path ? fopen(r->path, "re") : NULL;
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] && peer_resync_owe(r, line))
            log_info("cluster: %s was owed a resync before this gateway restarted: it is "
                     "asked again",
                     line);
    }
    fclose(f);
}

static void owed_drop_locked(struct peer_resync *r, struct peer_owed *e)
{
    *e = r->owed[--r->n];
    owed_save_locked(r);
}

int peer_resync_owe(struct peer_resync *r, const char *name)
{
    int fresh = 0;
    pthread_mutex_lock(&r->mu);
    struct peer_owed *e = owed_find_locked(r, name);
    if (!e && r->n == r->cap && r->cap < PEER_OWED_MAX) {
        size_t cap = r->cap ? 2 * r->cap : 8;
        struct peer_owed *v = realloc(r->owed, cap * sizeof(*v));
        if (v) {
            r->owed = v;
            r->cap = cap;
        }
    }
    if (!e && r->n < r->cap) {
        e = &r->owed[r->n++];
        memset(e, 0, sizeof(*e));
        snprintf(e->name, sizeof(e->name), "%s", name);
        fresh = 1;
        owed_save_locked(r);
    }
    if (e)
        e->missed++;
    pthread_mutex_unlock(&r->mu);
    return fresh;
}

int peer_resync_owed(struct peer_resync *r, const char *name)
{
    pthread_mutex_lock(&r->mu);
    struct peer_owed *e = owed_find_locked(r, name);
    if (e)
        e->missed++;
    pthread_mutex_unlock(&r->mu);
    return e != NULL;
}

int peer_resync_behind(struct peer_resync *r, const char *name)
{
    pthread_mutex_lock(&r->mu);
    int behind = owed_find_locked(r, name) != NULL;
    pthread_mutex_unlock(&r->mu);
    return behind;
}

/* A resync ended (transfer thread). */
static void peer_resync_done(void *cls, struct peer_xfer *x)
{
    struct peer_resync_call *c = cls;
    struct peer_resync *r = c->r;
    int ok = !peer_xfer_rc(x) && peer_xfer_status(x) == 200;
    pthread_mutex_lock(&r->mu);
    struct peer_owed *e = owed_find_locked(r, c->name);
    if (e) {
        e->inflight = 0;
        if (ok && e->missed == e->asked) {
            log_info("cluster: %s confirmed a resync: it revalidates what it cached before "
                     "(%llu notice%s missed)",
                     c->name, (unsigned long long)e->missed, e->missed == 1 ? "" : "s");
            owed_drop_locked(r, e);
            r->resyncs++;
        }
    }
    pthread_mutex_unlock(&r->mu);
    free(c);
}

/* The ring changed (a dns: list): the names that joined it are owed a resync. */
static void peer_resync_joined(struct peer_resync *r)
{
    struct peers_snap *snap = peer_snap_get(r->p);
    const struct ring *ring = peers_snap_ring(snap);
    uint64_t gen = peers_snap_generation(snap);
    size_t nn = ring ? ring_count(ring) : 0;
    int self = peers_snap_self(snap);
    char **keep = gen != r->members_gen ? calloc(nn + 1, sizeof(*keep)) : NULL;
    for (size_t i = 0; keep && i < nn; i++) {
        const char *name = ring_name(ring, i);
        int known = (int)i == self;
        for (size_t j = 0; r->members && r->members[j] && !known; j++)
            known = !strcmp(r->members[j], name);
        if (!known && r->members_gen && peer_resync_owe(r, name))
            log_info("cluster: %s joined the ring: it heard no write notice while out of it and "
                     "is asked to revalidate what it cached",
                     name);
        if (!(keep[i] = strdup(name))) {
            peer_names_free(keep);
            keep = NULL;
        }
    }
    if (keep) { /* else unchanged, or tried again next round */
        peer_names_free(r->members);
        r->members = keep;
        r->members_gen = gen;
    }
    peers_snap_put(snap);
}

/* One round: a resync to every owed gateway of the ring that has none in flight; names that
 * left the ring are forgotten (one that joins it again is owed a new one then). */
static void peer_resync_round(struct peer_resync *r)
{
    char **names = NULL;
    size_t nn = 0;
    int self = -1;
    peer_resync_joined(r);
    if (peer_names(r->p, &names, &nn, &self))
        return;
    struct peer_resync_call **calls = NULL;
    size_t k = 0;
    pthread_mutex_lock(&r->mu);
    if (r->n && !(calls = calloc(r->n, sizeof(*calls)))) {
        pthread_mutex_unlock(&r->mu);
        peer_names_free(names);
        return;
    }
    for (size_t i = 0; i < r->n;) {
        struct peer_owed *e = &r->owed[i];
        int member = 0;
        for (size_t j = 0; j < nn && !member; j++)
            member = (int)j != self && !strcmp(names[j], e->name);
        if (!member) {
            log_info("cluster: %s left the ring before it confirmed a resync", e->name);
            owed_drop_locked(r, e);
            continue;
        }
        if (!e->inflight && (calls[k] = calloc(1, sizeof(**calls)))) {
            e->inflight = 1;
            e->asked = e->missed;
            calls[k]->r = r;
            snprintf(calls[k]->name, sizeof(calls[k]->name), "%s", e->name);
            k++;
        }
        i++;
    }
    pthread_mutex_unlock(&r->mu);
    /* started unlocked: a call that cannot start ends (its callback runs) right here */
    for (size_t i = 0; i < k; i++) {
        struct peer_req rq = {.host = calls[i]->name,
                              .method = "POST",
                              .path = "/_/resync",
                              .timeout_ms = peer_timeout_ms(r->p)};
        if (peer_call_start(peer_client(r->p), &rq, peer_resync_done, calls[i])) {
            pthread_mutex_lock(&r->mu);
            struct peer_owed *e = owed_find_locked(r, calls[i]->name);
            if (e)
                e->inflight = 0;
            pthread_mutex_unlock(&r->mu);
            free(calls[i]);
        }
    }
    free(calls);
    peer_names_free(names);
}

static void *peer_resync_main(void *arg)
{
    struct peer_resync *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)PEER_RESYNC_EVERY_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (r->stop)
            continue;
        pthread_mutex_unlock(&r->mu);
        peer_resync_round(r);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int peer_resync_new(struct peer *p, const char *path, struct peer_resync **out)
{
    struct peer_resync *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->p = p;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (path && *path && !(r->path = strdup(path))) {
        peer_resync_free(r);
        return -ENOMEM;
    }
    owed_load(r);
    int rc = -pthread_create(&r->thr, NULL, peer_resync_main, r);
    if (rc) {
        peer_resync_free(r);
        return rc;
    }
    r->started = 1;
    *out = r;
    return 0;
}

void peer_resync_stop(struct peer_resync *r)
{
    if (!r || !r->started)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thr, NULL);
    r->started = 0;
}

void peer_resync_free(struct peer_resync *r)
{
    if (!r)
        return;
    peer_resync_stop(r);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r->owed);
    free(r->path);
    peer_names_free(r->members);
    free(r);
}

void peer_resync_stats(struct peer_resync *r, struct peer_resync_stats *out)
{
    pthread_mutex_lock(&r->mu);
    out->behind = r->n;
    out->resyncs = r->resyncs;
    pthread_mutex_unlock(&r->mu);
}
