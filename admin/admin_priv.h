/*
 * admin_priv.h: the admin handlers' files share these (admin/ only).
 */
#ifndef S3C_ADMIN_PRIV_H
#define S3C_ADMIN_PRIV_H

#include "http/req.h"

/* Cluster mode, between gateways only (admin/h_peer.c):
 *   POST /_/notice  {"changes":[{"bucket":B,"key":K,"warm":true},{"bucket":B},...]}: another
 *                   gateway's write notice: forget each key (a bucket without "key": all of
 *                   it), and fetch back a "warm" one this gateway owns;
 *   POST /_/resync  another gateway could not tell this one of writes: everything cached
 *                   before now is revalidated with the backend on its next read. */
int admin_peer_notice(struct req *rq);
int admin_peer_resync(struct req *rq);
#define ADMIN_NOTICE_BODY_MAX (32u << 20) /* as peer.c's largest notice */

/* Read plans (admin/h_plan.c): whether @p (after "/_") is /plan[/ID]; the endpoint (POST a
 * plan, GET them, DELETE one), which a client key may use for its own plans; the plans' part
 * of /_/stats (@prometheus 0) or /_/metrics, appended to @b. */
struct server;
int admin_plan_path(const char *p);
int admin_plan(struct req *rq, const char *rest);
int admin_plan_figures(struct server *srv, int prometheus, struct buf *b);
#define ADMIN_PLAN_BODY_MAX (32u << 20) /* ~500,000 keys of 60 bytes */

#endif
