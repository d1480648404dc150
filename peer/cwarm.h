/*
 * cwarm.h: cluster warm-ups (cwarm.c). A warm job posted to any gateway of a cluster (directly
 * or through the balancer) lists its keys once, splits them by owner on the ring and hands each
 * share to its owner as a warm job of that gateway (a "share"), so every object is read from
 * the backend once and lands on the gateway the balancer sends its reads to. The cluster job
 * lives on the gateway it was posted to (in memory); its status asks each share's gateway and
 * shows cluster totals and a line per gateway. A gateway that cannot be reached when its share
 * is handed out or asked about makes that share "failed" for good (run the job again once it
 * is back: cached objects are skipped); the job never waits for it.
 *   queued (listing, handing out) -> running -> done | failed | cancelled
 */
#ifndef S3C_CWARM_H
#define S3C_CWARM_H

#include <stddef.h>

#include "lib/buf.h"
#include "lib/s3c.h"

struct cwarm;
struct peer;
struct warm;
struct workq;

/* @p, @w and @wq are borrowed and outlive it. 0 or -ENOMEM. */
int cwarm_new(struct peer *p, struct warm *w, struct workq *wq, struct cwarm **out);
/* After the work queue stopped (no job of it runs). Accepts NULL. */
void cwarm_free(struct cwarm *cw);

/* Whether @id names a cluster job (theirs start with 'c'; a gateway's own never do). */
int cwarm_is_id(const char *id);
/* POST /_/warm in cluster mode: checks the body, answers {"job":"ID"} in @out at once; the keys
 * are listed and handed out on a worker. 0 or -S3E_* with @em. Non-blocking. */
int cwarm_start(struct cwarm *cw, const char *body, size_t len, struct buf *out,
                struct errmsg *em);
/* GET /_/warm/ID of a cluster job of this gateway: the job's JSON (asking each share's
 * gateway, at most every 100 ms) in @out. -S3E_NOT_FOUND when this gateway does not have it.
 * Blocking (workers): bounded by --peer-timeout. */
int cwarm_status(struct cwarm *cw, const char *id, struct buf *out);
/* DELETE /_/warm/ID: cancels every share, then as cwarm_status(). Blocking. */
int cwarm_cancel(struct cwarm *cw, const char *id, struct buf *out);
/* A cluster job posted to another gateway (the balancer sends /_/warm/ID elsewhere than
 * /_/warm): asks the others for it with @method (GET or DELETE). 0 with its JSON in @out, or
 * -S3E_NOT_FOUND. Blocking. */
int cwarm_elsewhere(struct cwarm *cw, const char *method, const char *id, struct buf *out);

#endif
