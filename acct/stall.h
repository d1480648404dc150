/*
 * stall.h: where the time of a GET goes, per client and per job: is a reader starved by the
 * gateway, or is it not asking for more? A GET's transfer time runs from its request to its
 * completion; its stall is the part of it the response spent suspended waiting for bytes that
 * were not there yet, by cause:
 *   backend     the lookup (metadata from the backend) or a fetch this request started
 *   fill        a fill another request started (coalesced onto it)
 *   rate_limit  the key's token bucket (rate=, --client-rate-limit) or the fair share's pacing
 *   queue       a job it waited on was queued for a worker thread (the work queue was busy)
 * A row (struct stall_acc) sums its GETs: transfer and stall seconds, time to first byte, bytes
 * delivered and bytes that were hits, with 1 Hz samples for 10 s and 60 s windows.
 *
 * Cost: a row has a mutex taken at a GET's start and end (and at each suspend/resume); bytes
 * are relaxed atomic adds per chunk of a streamed response. No clock is read per chunk.
 *
 * Per request (struct stall_req, embedded in struct req):
 *   stall_req_begin()   the GET starts (its rows: the client's and the job's)
 *   stall_req_suspend() / stall_req_resume()   around every wait, from any thread, ordered
 *   stall_req_first_byte(), stall_req_sent()   the response's first byte, its chunks
 *   stall_req_end()     completion (closes a wait still open)
 */
#ifndef S3C_STALL_H
#define S3C_STALL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "lib/buf.h"

enum stall_cause { STALL_BACKEND = 0, STALL_FILL, STALL_RATE, STALL_QUEUE, STALL__N };
/* "backend" "fill" "rate_limit" "queue"; "none" out of range */
const char *stall_cause_name(int cause);

#define STALL_RING 62              /* 1 Hz samples: enough for the 60 s window */
#define STALL_SHORT_S 10           /* the window of the verdict */
#define STALL_LONG_S 60
#define STALL_OK_OF_NEED 0.9       /* delivered >= 0.9 x need: ok */
#define STALL_STARVED_SHARE 0.2    /* stall >= 20 % of transfer time: the gateway holds it back */

struct stall_sample {
    uint64_t seq, t_ns;
    uint64_t bytes, hit_bytes, xfer_ns, ttfb_ns, gets;
    uint64_t stall_ns[STALL__N];
};

struct stall_acc {
    pthread_mutex_t mu;
    /* under mu */
    uint64_t gets, active, start_sum, xfer_done;
    uint64_t susp[STALL__N], susp_sum[STALL__N], stall_done[STALL__N];
    uint64_t ttfb_sum, ttfb_n;
    /* per chunk */
    _Atomic uint64_t bytes, hit_bytes;
    /* the owner's ticker and readers, under the owner's lock */
    uint64_t born_ns;
    struct stall_sample ring[STALL_RING];
};

/* Totals at one moment, and what changed over a window ending then. */
struct stall_window {
    double secs;                 /* the window's length (shorter while the row is younger) */
    double bytes, hit_bytes, xfer_s, ttfb_s, gets;
    double stall_s[STALL__N];
};
struct stall_view {
    uint64_t gets, active, bytes, hit_bytes, ttfb_n;
    double xfer_s, ttfb_s, stall_s[STALL__N];
    struct stall_window w_short, w_long;
};

void stall_acc_init(struct stall_acc *a, uint64_t now_ns);
void stall_acc_destroy(struct stall_acc *a);
/* The tick numbered @seq at @now_ns: records the row's totals (waits and transfers in progress
 * counted up to @now_ns). Owner's lock held. */
void stall_acc_sample(struct stall_acc *a, uint64_t seq, uint64_t now_ns);
/* Adds the totals and samples of @src (no GET in flight) into @dst (the owner's "other" row),
 * so that @dst's windows stay continuous. Owner's lock held; @src's last sample is the tick
 * @dst also took last. */
void stall_acc_fold(struct stall_acc *dst, const struct stall_acc *src);
/* Totals at @now_ns and the short and long windows ending then. Owner's lock held. */
void stall_acc_view(struct stall_acc *a, uint64_t now_ns, struct stall_view *v);

/* The stall share of a window: stall seconds / transfer seconds (0 without transfer time). */
double stall_share(const struct stall_window *w);
/* The largest cause of a window's stall, or -1 when it has none. */
int stall_main_cause(const struct stall_window *w);

/* The fields of @v as JSON members (no braces): gets, in_flight_gets, delivered_bytes,
 * hit_bytes, hit_share, transfer_s, first_byte_s_avg, stall_s, stall_by_cause_s{},
 * delivered_bps_10s, delivered_bps_60s, stall_share_10s, stall_by_cause_10s_s{}, hit_share_10s,
 * main_cause_10s. 0 or buf's error. */
int stall_json(struct buf *out, const struct stall_view *v);

enum stall_state { STALL_IDLE = 0, STALL_OK, STALL_STARVED };
const char *stall_state_name(enum stall_state st); /* "idle" "ok" "starved" */
/* The verdict on a window (docs/operations.md, "The verdict"):
 *   no GET time in it                                       idle (it asked for nothing)
 *   @need_bps set and delivered >= STALL_OK_OF_NEED x need   ok
 *   stall share >= STALL_STARVED_SHARE                       starved, *@cause the main cause
 *   otherwise                                               idle (the reader sets the pace)
 * *@cause is -1 unless starved. */
enum stall_state stall_verdict(const struct stall_window *w, uint64_t need_bps, int *cause);

struct stall_req {
    struct stall_acc *acc[2]; /* the client's and the job's row; both NULL: not counted */
    uint64_t t0, t_susp, first_ns, streamed;
    int cause;                /* of the wait in progress (t_susp != 0) */
    uint64_t ns[STALL__N];    /* this request's stall so far */
};

/* A GET starts at @now_ns, charged to @client and @job (either may be NULL). */
void stall_req_begin(struct stall_req *r, struct stall_acc *client, struct stall_acc *job,
                     uint64_t now_ns);
/* The response waits from @now_ns for @cause (a second suspend before a resume is ignored). */
void stall_req_suspend(struct stall_req *r, enum stall_cause cause, uint64_t now_ns);
/* The wait ends at @now_ns. When the job that ends it was queued for a worker during the wait
 * ([@queued_ns, @started_ns) from workq_current(), 0 0 when unknown), that overlap is charged to
 * queue, the rest to the wait's cause. A resume without a suspend is ignored. */
void stall_req_resume(struct stall_req *r, uint64_t now_ns, uint64_t queued_ns,
                      uint64_t started_ns);
/* The response's first body byte goes out at @now_ns (the first call counts). */
void stall_req_first_byte(struct stall_req *r, uint64_t now_ns);
/* @n body bytes went out (a streamed chunk). */
void stall_req_sent(struct stall_req *r, uint64_t n);
/* @ns of waiting measured elsewhere (the fair share's pacing), charged to @cause. */
void stall_req_add(struct stall_req *r, enum stall_cause cause, uint64_t ns);
/* The GET completed at @now_ns having sent @sent body bytes in all (those not passed to
 * stall_req_sent() are added now); @hit: they came from the cache without waiting. */
void stall_req_end(struct stall_req *r, uint64_t now_ns, uint64_t sent, int hit);

#endif
