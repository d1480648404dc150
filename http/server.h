/*
 * server.h: the HTTP daemon (server.c) and the long-lived objects every request reaches
 * through rq->srv. server_run() owns them all.
 */
#ifndef S3C_SERVER_H
#define S3C_SERVER_H

#include <stdint.h>

#include "lib/conf.h"
#include "req.h"

struct MHD_Daemon;

#define SERVER_WAIT_THREADS 4 /* srv->wq_wait */

struct server {
    unsigned magic;
#define SERVER_MAGIC 0x5e77e401
    struct conf *cf;
    struct MHD_Daemon *daemon;
    const struct handler *const *handlers; /* [OP__N]: op -> handler (NULL: NotImplemented) */
    struct backend *be;
    struct workq *wq;
    struct workq *wq_wait;        /* jobs that wait on fills (never run one): member index
                                   * builds, batch resolution; so they cannot starve the fills */
    struct cache *cache;
    struct objects *obj;          /* the object layer: writes, listings */
    struct warm *warm;
    struct planner *planner;      /* read plans' prefetch threads (objects/plan.h), or NULL */
    struct auth *auth;
    struct stats *stats;
    struct park *park;            /* every request, and the watch over the parked (park.h) */
    struct jobs *jobs;            /* jobs and their needs (acct/jobs.h), or NULL when
                                   * --accounting or --stall-accounting is off */
    struct rl *rl;
    struct fair *fair;            /* --max-bandwidth, or NULL */
    struct peer *peer;            /* cluster mode (--peers), or NULL */
    struct cwarm *cwarm;          /* cluster mode's warm-ups, or NULL */
    uint64_t start_ns;
    unsigned long req_seq;
    unsigned long inflight;       /* requests being processed or answered */
    unsigned hit_checks;          /* re-reads of aborted hits queued or running (req.c; atomic) */
};

/* Serves @cf until SIGTERM/SIGINT (SIGHUP reloads the credentials), with @handlers[op] (OP__N
 * entries; cmd/ builds the table) answering each operation. 0, or -errno after logging why it
 * could not start. */
int server_run(struct conf *cf, const struct handler *const *handlers);

#endif
