/*
 * stall.c: stall accounting of GETs (acct/stall.h): per-request waits by cause, summed into
 * rows (a client's, a job's) with 1 Hz samples for windows, and the verdict on a window.
 * Owns no table of rows: stats.c (clients) and jobs.c (jobs) embed a struct stall_acc and tick
 * it. Times in and out of a row are transfer-time integrals: a row keeps the number of GETs (and
 * of waits, by cause) in progress and the sum of their start times, so that its totals at any
 * moment count what is in progress up to that moment, without visiting the requests.
 */
#include <stdint.h>
#include <string.h>

#include "lib/s3c.h"
#include "stall.h"

static const char *const stall_cause_names[STALL__N] = {"backend", "fill", "rate_limit", "queue"};

const char *stall_cause_name(int cause)
{
    return cause >= 0 && cause < STALL__N ? stall_cause_names[cause] : "none";
}

const char *stall_state_name(enum stall_state st)
{
    return st == STALL_OK ? "ok" : st == STALL_STARVED ? "starved" : "idle";
}

void stall_acc_init(struct stall_acc *a, uint64_t now_ns)
{
    memset(a, 0, sizeof(*a));
    pthread_mutex_init(&a->mu, NULL);
    a->born_ns = now_ns;
}

void stall_acc_destroy(struct stall_acc *a)
{
    pthread_mutex_destroy(&a->mu);
}

/* @done + @n x @now - @sum, never below 0 (a start stamped on another thread a little after our
 * @now would otherwise wrap). */
static uint64_t integral(uint64_t done, uint64_t n, uint64_t sum, uint64_t now)
{
    int64_t open = (int64_t)(n * now - sum);
    return done + (open > 0 ? (uint64_t)open : 0);
}

/* The totals of @a at @now, as a sample. */
static void stall_live(struct stall_acc *a, uint64_t now, struct stall_sample *s)
{
    memset(s, 0, sizeof(*s));
    s->t_ns = now;
    pthread_mutex_lock(&a->mu);
    s->xfer_ns = integral(a->xfer_done, a->active, a->start_sum, now);
    for (int c = 0; c < STALL__N; c++)
        s->stall_ns[c] = integral(a->stall_done[c], a->susp[c], a->susp_sum[c], now);
    s->gets = a->gets;
    s->ttfb_ns = a->ttfb_sum;
    pthread_mutex_unlock(&a->mu);
    s->bytes = atomic_load_explicit(&a->bytes, memory_order_relaxed);
    s->hit_bytes = atomic_load_explicit(&a->hit_bytes, memory_order_relaxed);
}

void stall_acc_sample(struct stall_acc *a, uint64_t seq, uint64_t now_ns)
{
    struct stall_sample *s = &a->ring[seq % STALL_RING];
    stall_live(a, now_ns, s);
    s->seq = seq;
}

void stall_acc_fold(struct stall_acc *dst, const struct stall_acc *src)
{
    pthread_mutex_lock(&dst->mu);
    dst->gets += src->gets;
    dst->xfer_done += src->xfer_done;
    dst->ttfb_sum += src->ttfb_sum;
    dst->ttfb_n += src->ttfb_n;
    for (int c = 0; c < STALL__N; c++)
        dst->stall_done[c] += src->stall_done[c];
    pthread_mutex_unlock(&dst->mu);
    atomic_fetch_add_explicit(&dst->bytes, atomic_load(&src->bytes), memory_order_relaxed);
    atomic_fetch_add_explicit(&dst->hit_bytes, atomic_load(&src->hit_bytes),
                              memory_order_relaxed);
    for (unsigned i = 0; i < STALL_RING; i++) {
        struct stall_sample *d = &dst->ring[i];
        const struct stall_sample *s = &src->ring[i];
        if (!s->t_ns || !d->t_ns || d->seq != s->seq)
            continue;
        d->bytes += s->bytes;
        d->hit_bytes += s->hit_bytes;
        d->xfer_ns += s->xfer_ns;
        d->ttfb_ns += s->ttfb_ns;
        d->gets += s->gets;
        for (int c = 0; c < STALL__N; c++)
            d->stall_ns[c] += s->stall_ns[c];
    }
}

static double delta_s(uint64_t end, uint64_t base)
{
    return end > base ? (double)(end - base) / 1e9 : 0.0;
}

static double delta(uint64_t end, uint64_t base)
{
    return end > base ? (double)(end - base) : 0.0;
}

/* The window of @secs ending at @end: from the newest sample at least @secs old, or from the
 * row's birth (zeros) when it has none. */
static void stall_window_of(const struct stall_acc *a, const struct stall_sample *end,
                            unsigned secs, struct stall_window *w)
{
    static const struct stall_sample zero;
    const struct stall_sample *base = NULL;
    uint64_t limit = end->t_ns > (uint64_t)secs * 1000000000ull
                         ? end->t_ns - (uint64_t)secs * 1000000000ull : 0;
    for (unsigned i = 0; i < STALL_RING; i++) {
        const struct stall_sample *s = &a->ring[i];
        if (s->t_ns && s->t_ns <= limit && (!base || s->t_ns > base->t_ns))
            base = s;
    }
    uint64_t t0 = base ? base->t_ns : a->born_ns;
    if (!base)
        base = &zero;
    w->secs = delta_s(end->t_ns, t0);
    w->bytes = delta(end->bytes, base->bytes);
    w->hit_bytes = delta(end->hit_bytes, base->hit_bytes);
    w->xfer_s = delta_s(end->xfer_ns, base->xfer_ns);
    w->ttfb_s = delta_s(end->ttfb_ns, base->ttfb_ns);
    w->gets = delta(end->gets, base->gets);
    for (int c = 0; c < STALL__N; c++)
        w->stall_s[c] = delta_s(end->stall_ns[c], base->stall_ns[c]);
}

void stall_acc_view(struct stall_acc *a, uint64_t now_ns, struct stall_view *v)
{
    struct stall_sample now;
    memset(v, 0, sizeof(*v));
    stall_live(a, now_ns, &now);
    pthread_mutex_lock(&a->mu);
    v->active = a->active;
    v->ttfb_n = a->ttfb_n;
    pthread_mutex_unlock(&a->mu);
    v->gets = now.gets;
    v->bytes = now.bytes;
    v->hit_bytes = now.hit_bytes;
    v->xfer_s = (double)now.xfer_ns / 1e9;
    v->ttfb_s = (double)now.ttfb_ns / 1e9;
    for (int c = 0; c < STALL__N; c++)
        v->stall_s[c] = (double)now.stall_ns[c] / 1e9;
    stall_window_of(a, &now, STALL_SHORT_S, &v->w_short);
    stall_window_of(a, &now, STALL_LONG_S, &v->w_long);
}

double stall_share(const struct stall_window *w)
{
    double s = 0;
    for (int c = 0; c < STALL__N; c++)
        s += w->stall_s[c];
    if (w->xfer_s <= 0)
        return 0;
    return s >= w->xfer_s ? 1.0 : s / w->xfer_s;
}

int stall_main_cause(const struct stall_window *w)
{
    int best = -1;
    for (int c = 0; c < STALL__N; c++)
        if (w->stall_s[c] > 0 && (best < 0 || w->stall_s[c] > w->stall_s[best]))
            best = c;
    return best;
}

enum stall_state stall_verdict(const struct stall_window *w, uint64_t need_bps, int *cause)
{
    *cause = -1;
    if (w->xfer_s <= 0)
        return STALL_IDLE;
    double secs = w->secs < 1.0 ? 1.0 : w->secs;
    if (need_bps && w->bytes / secs >= STALL_OK_OF_NEED * (double)need_bps)
        return STALL_OK;
    if (stall_share(w) >= STALL_STARVED_SHARE) {
        *cause = stall_main_cause(w);
        return STALL_STARVED;
    }
    return STALL_IDLE;
}

/* --- JSON ----------------------------------------------------------------------------- */

static double rate_of(const struct stall_window *w)
{
    return w->bytes / (w->secs < 1.0 ? 1.0 : w->secs);
}

static int json_causes(struct buf *out, const char *name, const double *s)
{
    int rc = buf_printf(out, ", \"%s\": {", name);
    for (int c = 0; c < STALL__N && !rc; c++)
        rc = buf_printf(out, "%s\"%s\": %.6f", c ? ", " : "", stall_cause_names[c], s[c]);
    return rc ? rc : buf_puts(out, "}");
}

int stall_json(struct buf *out, const struct stall_view *v)
{
    double total = 0;
    for (int c = 0; c < STALL__N; c++)
        total += v->stall_s[c];
    const struct stall_window *ws = &v->w_short;
    int main = stall_main_cause(ws);
    int rc = buf_printf(out,
                        "\"gets\": %llu, \"in_flight_gets\": %llu, \"delivered_bytes\": %llu, "
                        "\"hit_bytes\": %llu, \"hit_share\": %.4f, \"transfer_s\": %.6f, "
                        "\"first_byte_s_avg\": %.6f, \"stall_s\": %.6f",
                        (unsigned long long)v->gets, (unsigned long long)v->active,
                        (unsigned long long)v->bytes, (unsigned long long)v->hit_bytes,
                        v->bytes ? (double)v->hit_bytes / (double)v->bytes : 0.0, v->xfer_s,
                        v->ttfb_n ? v->ttfb_s / (double)v->ttfb_n : 0.0, total);
    if (!rc)
        rc = json_causes(out, "stall_by_cause_s", v->stall_s);
    if (!rc)
        rc = buf_printf(out,
                        ", \"delivered_bps_10s\": %.0f, \"delivered_bps_60s\": %.0f, "
                        "\"stall_share_10s\": %.4f",
                        rate_of(ws), rate_of(&v->w_long), stall_share(ws));
    if (!rc)
        rc = json_causes(out, "stall_by_cause_10s_s", ws->stall_s);
    if (!rc)
        rc = buf_printf(out, ", \"hit_share_10s\": %.4f, \"main_cause_10s\": ",
                        ws->bytes > 0 ? ws->hit_bytes / ws->bytes : 0.0);
    if (!rc)
        rc = main >= 0 ? buf_printf(out, "\"%s\"", stall_cause_names[main])
                       : buf_puts(out, "null");
    return rc;
}

/* --- per request ----------------------------------------------------------------------- */

void stall_req_begin(struct stall_req *r, struct stall_acc *client, struct stall_acc *job,
                     uint64_t now_ns)
{
    memset(r, 0, sizeof(*r));
    r->acc[0] = client;
    r->acc[1] = job;
    r->t0 = now_ns;
    for (int i = 0; i < 2; i++) {
        struct stall_acc *a = r->acc[i];
        if (!a)
            continue;
        pthread_mutex_lock(&a->mu);
        a->active++;
        a->start_sum += now_ns;
        pthread_mutex_unlock(&a->mu);
    }
}

void stall_req_suspend(struct stall_req *r, enum stall_cause cause, uint64_t now_ns)
{
    if ((!r->acc[0] && !r->acc[1]) || r->t_susp || (unsigned)cause >= STALL__N)
        return;
    r->t_susp = now_ns ? now_ns : 1;
    r->cause = (int)cause;
    for (int i = 0; i < 2; i++) {
        struct stall_acc *a = r->acc[i];
        if (!a)
            continue;
        pthread_mutex_lock(&a->mu);
        a->susp[cause]++;
        a->susp_sum[cause] += r->t_susp;
        pthread_mutex_unlock(&a->mu);
    }
}

void stall_req_resume(struct stall_req *r, uint64_t now_ns, uint64_t queued_ns,
                      uint64_t started_ns)
{
    if (!r->t_susp)
        return;
    uint64_t t = r->t_susp, waited = now_ns > t ? now_ns - t : 0, q = 0;
    if (started_ns) { /* the waking job's time in the queue that fell within this wait */
        uint64_t from = S3C_MAX(queued_ns, t), to = S3C_MIN(started_ns, now_ns);
        q = to > from ? S3C_MIN(to - from, waited) : 0;
    }
    int c = r->cause;
    r->t_susp = 0;
    r->ns[c] += waited - q;
    r->ns[STALL_QUEUE] += q;
    for (int i = 0; i < 2; i++) {
        struct stall_acc *a = r->acc[i];
        if (!a)
            continue;
        pthread_mutex_lock(&a->mu);
        a->susp[c]--;
        a->susp_sum[c] -= t;
        a->stall_done[c] += waited - q;
        a->stall_done[STALL_QUEUE] += q;
        pthread_mutex_unlock(&a->mu);
    }
}

void stall_req_first_byte(struct stall_req *r, uint64_t now_ns)
{
    if (!r->first_ns)
        r->first_ns = now_ns ? now_ns : 1;
}

void stall_req_sent(struct stall_req *r, uint64_t n)
{
    r->streamed += n;
    for (int i = 0; i < 2; i++)
        if (r->acc[i])
            atomic_fetch_add_explicit(&r->acc[i]->bytes, n, memory_order_relaxed);
}

void stall_req_add(struct stall_req *r, enum stall_cause cause, uint64_t ns)
{
    if (!ns || (unsigned)cause >= STALL__N)
        return;
    r->ns[cause] += ns;
    for (int i = 0; i < 2; i++) {
        struct stall_acc *a = r->acc[i];
        if (!a)
            continue;
        pthread_mutex_lock(&a->mu);
        a->stall_done[cause] += ns;
        pthread_mutex_unlock(&a->mu);
    }
}

void stall_req_end(struct stall_req *r, uint64_t now_ns, uint64_t sent, int hit)
{
    if (!r->acc[0] && !r->acc[1])
        return;
    stall_req_resume(r, now_ns, 0, 0);
    uint64_t rest = sent > r->streamed ? sent - r->streamed : 0;
    uint64_t xfer = now_ns > r->t0 ? now_ns - r->t0 : 0;
    for (int i = 0; i < 2; i++) {
        struct stall_acc *a = r->acc[i];
        if (!a)
            continue;
        pthread_mutex_lock(&a->mu);
        a->active--;
        a->start_sum -= r->t0;
        a->xfer_done += xfer;
        a->gets++;
        if (r->first_ns) {
            a->ttfb_sum += r->first_ns > r->t0 ? r->first_ns - r->t0 : 0;
            a->ttfb_n++;
        }
        pthread_mutex_unlock(&a->mu);
        if (rest)
            atomic_fetch_add_explicit(&a->bytes, rest, memory_order_relaxed);
        if (hit && sent)
            atomic_fetch_add_explicit(&a->hit_bytes, sent, memory_order_relaxed);
    }
    r->acc[0] = r->acc[1] = NULL;
}
