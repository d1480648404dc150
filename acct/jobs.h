/*
 * jobs.h: training jobs as the gateway sees them, and what each needs. A job is named by the
 * request header x-s3cached-job (any number of clients, keys and addresses may name one), or
 * is its access key's name when the header is absent. Its GETs are charged to its row (struct
 * stall_acc, acct/stall.h); its need, in bytes/s, comes from POST /_/jobs (jobs_declare), else
 * the latest x-s3cached-job-need header of the key that declared it, else need= on the line of
 * the key that made the row in the credentials file.
 *
 * Ownership: the first key whose x-s3cached-job-need names a need for a job owns that need
 * until it clears it ("0") or the row goes; the header from any other key is ignored (the GET
 * is served and charged to the job as usual). The key whose GET made the row (its owner)
 * gives need_key. A request without a key never makes a row (charged to a job that exists, or
 * to "other").
 *
 * Bounded like the client rows: at most jobs_set_limits() jobs (default JOBS_MAX_DEFAULT) have
 * a row of their own, and one key's GETs make at most jobs_set_key_cap() of them (default
 * JOBS_KEY_MAX_DEFAULT), so that no key can fill the table with names of its own: the rest are
 * charged to the row "other". Nothing is evicted to make room: a job with no GET in flight for
 * idle seconds (default 300) is folded into "other" at a tick, unless it was declared (a
 * declaration stays until jobs_forget()); POST /_/jobs (an admin) may make rows past the
 * per-key cap.
 *
 *   jobs_ref()      once per GET, after authentication   -> the job's row (never NULL)
 *   jobs_acc()      its struct stall_acc for stall_req_begin()
 *   jobs_release()  at completion
 *   jobs_tick()     1 Hz (the stats ticker): samples, folds idle rows
 *
 * Threading: every function is thread-safe (one mutex over the table, held briefly).
 */
#ifndef S3C_JOBS_H
#define S3C_JOBS_H

#include <stdint.h>

#include "lib/buf.h"
#include "stall.h"

#define JOBS_HEADER "x-s3cached-job"
#define JOBS_NEED_HEADER "x-s3cached-job-need"
#define JOBS_NAME_MAX 128          /* an access key may be this long */
#define JOBS_MAX_DEFAULT 256
#define JOBS_KEY_MAX_DEFAULT 32    /* rows one key's GETs may make */
#define JOBS_IDLE_S_DEFAULT 300
#define JOBS_OTHER "other"

struct jobs;
struct jobs_row;

int jobs_new(struct jobs **out);
void jobs_free(struct jobs *j); /* every row released; accepts NULL */
/* @max 0 keeps the cap, @idle_s 0 the idle time. */
void jobs_set_limits(struct jobs *j, unsigned max, unsigned idle_s);
/* How many rows one key's GETs may make (0 keeps the cap). */
void jobs_set_key_cap(struct jobs *j, unsigned per_key);
/* The monotonic clock (tests); NULL restores s3c_mono_ns(). */
void jobs_set_clock(struct jobs *j, uint64_t (*now)(void *cls), void *cls);

/* NULL when @name may name a job: 1 to JOBS_NAME_MAX bytes of letters, digits and . _ - : / @ +
 * and not "other"; else why not. */
const char *jobs_check_name(const char *name);

/* A new reference to the row of job @name (checked by the caller), creating it for @key (the
 * request's access key; NULL or "" never creates a row) while the table and @key's cap have
 * room. @need_hdr: the request's x-s3cached-job-need (bytes/s; 0 = none given,
 * JOBS_NEED_CLEAR = "0" given: clears the header's need), taken only from the key that owns
 * the job's need (or when none does: @key then owns it); @key_need: need= of @key (0 = none),
 * taken only from the row's owner. Never NULL: the row "other" when there is no room. */
#define JOBS_NEED_CLEAR UINT64_MAX
struct jobs_row *jobs_ref(struct jobs *j, const char *name, const char *key, uint64_t need_hdr,
                          uint64_t key_need);
void jobs_release(struct jobs *j, struct jobs_row *r); /* @r may be NULL */
struct stall_acc *jobs_acc(struct jobs_row *r);

/* POST /_/jobs: job @name needs @need_bps (0 clears the declaration). 0, or -ENOSPC when the
 * table is full of declared jobs, -ENOMEM. */
int jobs_declare(struct jobs *j, const char *name, uint64_t need_bps);
/* DELETE /_/jobs/NAME: forgets the declaration (the row folds once idle). 0 or -ENOENT. */
int jobs_forget(struct jobs *j, const char *name);

void jobs_tick(struct jobs *j);

/* What the writers show of a job. */
struct jobs_view {
    char name[JOBS_NAME_MAX + 1];
    int is_other, declared;
    uint64_t need_bps;
    const char *need_source;   /* "api" "header" "key" "none" */
    enum stall_state state;
    int cause;                 /* of a starved state, else -1 */
    struct stall_view v;
};
/* Every row (the one named @only when not NULL), sorted by name, "other" last when it has
 * something. 0 or -ENOMEM; free *@out. */
int jobs_snapshot(struct jobs *j, const char *only, struct jobs_view **out, size_t *n);

/* The "jobs" array of /_/stats and GET /_/jobs: one object per job (jobs_out.c). */
int jobs_json(struct jobs *j, const char *only, struct buf *out);
int jobs_json_view(const struct jobs_view *jv, struct buf *out);
/* The s3cached_job_* families (Prometheus text 0.0.4). */
int jobs_prometheus(struct jobs *j, struct buf *out);

#endif
