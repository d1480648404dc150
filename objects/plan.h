/*
 * plan.h: read plans behind POST/GET/DELETE /_/plan (docs/plans.md): the body of a plan, and
 * the threads that prefetch what the plans (cache/plan.h) say is next, paced by their readers.
 */
#ifndef S3C_OBJECTS_PLAN_H
#define S3C_OBJECTS_PLAN_H

#include <stddef.h>

#include "lib/buf.h"
#include "lib/s3c.h"

struct planner;
struct cache;
struct conf;

/* Starts --plan-requests prefetch threads over @c's plans; *@out NULL when plans are off.
 * @cf and @c are borrowed and outlive the planner. 0 or -errno. */
int planner_new(const struct conf *cf, struct cache *c, struct planner **out);
/* Stops the threads (each ends its prefetch in flight first). Before the cache closes. */
void planner_free(struct planner *pr);
/* POST /_/plan by @owner (an access key): {"bucket": B, "name": N, "keys": [...] or
 * "keys_hex": [...], "sizes": [...]}. 0 with the plan's JSON ({"plan": ID, ...}) in @out, or
 * -S3E_* with @em. */
int planner_post(struct planner *pr, const char *owner, const char *body, size_t len,
                 struct buf *out, struct errmsg *em);

#endif
