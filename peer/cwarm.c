/*
 * cwarm.c: cluster warm-ups (cwarm.h). Owns the cluster jobs of this gateway (in memory, the
 * newest CWARM_MAX_JOBS) and, for each, its shares: the gateway, the keys handed to it, the
 * id of the warm job it runs them in and what it last said of it. The shares' jobs are the
 * gateways' own (objects/warm.c): this file only lists, splits, hands out and asks.
 * Locking: cw->mu guards the job list and every job's fields; no call to a peer or to the
 * local warm-ups is made under it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cwarm.h"
#include "lib/json.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "lib/workq.h"
#include "objects/warm.h"
#include "peer.h"

#define CWARM_MAGIC 0xc3a2a11eu
#define CWARM_MAX_JOBS 64
#define CWARM_MAX_ERRORS 100
#define CWARM_REFRESH_NS 100000000ll /* a job's shares are asked at most every 100 ms */
#define CWARM_SHARE_BODY_MAX (64u << 20)

struct cwarm_share {
    char node[RING_NAME_MAX];
    int self;
    size_t nkeys;
    uint64_t bytes;           /* of its keys, when the listing said */
    char job[32];             /* its job on that gateway; "" when none could be started */
    int final;                /* its state will not change any more */
    char state[16];
    uint64_t objects_total, objects_done, objects_cached, bytes_total, bytes_done;
    uint64_t errors_total, skipped;
    struct buf errors;        /* JSON items, "node" added */
    unsigned nerrors;
    char message[256];
};

struct cwarm_job {
    struct cwarm_job *next;
    unsigned refs;
    char id[32];
    char *body;               /* the request, until handed out */
    size_t len;
    char *bucket;
    int pin;
    int resolved;             /* the shares are known (or the job failed before) */
    int failed;               /* failed as a whole (listing): message says why */
    int cancel;
    char message[256];
    struct cwarm_share *shares;
    size_t nshares;
    int64_t started_ns, finished_ns;
    uint64_t refreshed_mono;
};

struct cwarm {
    unsigned magic;
    struct peer *p;
    struct warm *w;
    struct workq *wq;
    pthread_mutex_t mu;
    struct cwarm_job *jobs;   /* newest first */
    unsigned seq;
};

static void share_free(struct cwarm_share *s)
{
    buf_free(&s->errors);
}

static void cjob_release_locked(struct cwarm_job *j)
{
    if (--j->refs)
        return;
    for (size_t i = 0; i < j->nshares; i++)
        share_free(&j->shares[i]);
    free(j->shares);
    free(j->body);
    free(j->bucket);
    free(j);
}

int cwarm_new(struct peer *p, struct warm *w, struct workq *wq, struct cwarm **out)
{
    struct cwarm *cw = calloc(1, sizeof(*cw));
    if (!cw)
        return -ENOMEM;
    cw->magic = CWARM_MAGIC;
    cw->p = p;
    cw->w = w;
    cw->wq = wq;
    pthread_mutex_init(&cw->mu, NULL);
    *out = cw;
    return 0;
}

void cwarm_free(struct cwarm *cw)
{
    if (!cw)
        return;
    CHECK_OBJ_NOTNULL(cw, CWARM_MAGIC);
    pthread_mutex_lock(&cw->mu);
    while (cw->jobs) {
        struct cwarm_job *j = cw->jobs;
        cw->jobs = j->next;
        cjob_release_locked(j);
    }
    pthread_mutex_unlock(&cw->mu);
    pthread_mutex_destroy(&cw->mu);
    cw->magic = 0;
    free(cw);
}

int cwarm_is_id(const char *id)
{
    return id && id[0] == 'c';
}

static int state_final(const char *st)
{
    return !strcmp(st, "done") || !strcmp(st, "failed") || !strcmp(st, "cancelled") ||
           !strcmp(st, "interrupted");
}

/* Under cw->mu: @s fails for good with @why (its keys not done count as errors). */
static void share_fail_locked(struct cwarm_share *s, const char *why)
{
    snprintf(s->state, sizeof(s->state), "failed");
    snprintf(s->message, sizeof(s->message), "%s", why);
    s->final = 1;
    if (s->nerrors++ < CWARM_MAX_ERRORS) {
        if (s->errors.len)
            buf_puts(&s->errors, ",");
        buf_puts(&s->errors, "{\"node\":");
        buf_json_str(&s->errors, s->node);
        buf_printf(&s->errors, ",\"key\":\"\",\"error\":");
        buf_json_str(&s->errors, why);
        buf_puts(&s->errors, "}");
    }
}

/* --- handing out ---------------------------------------------------------------------------- */

/* The body of a share: the keys @idx[0..@n) of @k, in "keys_hex" (any bytes, whole: the
 * owner reads them) and in "keys" (UTF-8: for people, and for an older owner). */
static int share_body(const struct warm_keys *k, const size_t *idx, size_t n, struct buf *b)
{
    int rc = buf_puts(b, "{\"bucket\":") || buf_json_str(b, k->bucket) || buf_puts(b, ",\"keys\":[");
    for (size_t i = 0; !rc && i < n; i++)
        rc = (i && buf_puts(b, ",")) || buf_json_str(b, k->keys[idx[i]]);
    if (!rc)
        rc = buf_puts(b, "],\"keys_hex\":[");
    for (size_t i = 0; !rc && i < n; i++)
        rc = (i && buf_puts(b, ",")) || buf_json_hex(b, k->keys[idx[i]]);
    if (!rc)
        rc = buf_puts(b, "]");
    if (!rc && k->sizes) {
        rc = buf_puts(b, ",\"sizes\":[");
        for (size_t i = 0; !rc && i < n; i++)
            rc = buf_printf(b, "%s%llu", i ? "," : "", (unsigned long long)k->sizes[idx[i]]);
        if (!rc)
            rc = buf_puts(b, "]");
    }
    if (!rc)
        rc = buf_printf(b, ",\"pin\":%s,\"fit\":%s}", k->pin ? "true" : "false",
                        k->fit ? "true" : "false");
    return rc ? -ENOMEM : 0;
}

/* The job id in a POST /_/warm answer, into @id. */
static int job_id_of(const char *body, size_t len, char id[32])
{
    struct json *j = NULL;
    struct errmsg em;
    int ok = body && !json_parse(body, len, &j, &em) && json_get_str(j, "job");
    if (ok)
        snprintf(id, 32, "%s", json_get_str(j, "job"));
    json_free(j);
    return ok ? 0 : -EINVAL;
}

struct cjob_arg {
    struct cwarm *cw;
    struct cwarm_job *j;
};

/* Lists the keys, splits them by owner, starts each share (on a worker). */
static void cjob_main(void *arg)
{
    struct cjob_arg *a = arg;
    struct cwarm *cw = a->cw;
    struct cwarm_job *j = a->j;
    struct warm_keys k;
    struct errmsg em = {{0}};
    struct peers_snap *snap = NULL;
    struct cwarm_share *sh = NULL;
    size_t **idx = NULL, *cnt = NULL, nodes = 0;
    struct buf *bodies = NULL;
    int rc = warm_resolve(cw->w, j->body, j->len, &k, &em);
    free(a);
    if (rc) {
        pthread_mutex_lock(&cw->mu);
        j->failed = j->resolved = 1;
        snprintf(j->message, sizeof(j->message), "%s", em.buf[0] ? em.buf : s3c_strerror(rc));
        j->finished_ns = s3c_real_ns();
        cjob_release_locked(j);
        pthread_mutex_unlock(&cw->mu);
        return;
    }
    snap = peer_snap_get(cw->p);
    const struct ring *ring = peers_snap_ring(snap);
    int self = peers_snap_self(snap);
    nodes = ring ? ring_count(ring) : 0;
    /* slot @nodes: keys with no owner on the ring (no ring yet), warmed here */
    idx = calloc(nodes + 1, sizeof(*idx));
    cnt = calloc(nodes + 1, sizeof(*cnt));
    rc = idx && cnt ? 0 : -ENOMEM;
    for (size_t i = 0; !rc && i <= nodes; i++)
        if (!(idx[i] = malloc((k.n ? k.n : 1) * sizeof(size_t))))
            rc = -ENOMEM;
    for (size_t i = 0; !rc && i < k.n; i++) {
        int o = peer_owner_index(snap, k.bucket, k.keys[i]);
        size_t slot = o < 0 ? (self >= 0 ? (size_t)self : nodes) : (size_t)o;
        idx[slot][cnt[slot]++] = i;
    }
    size_t nsh = 0;
    for (size_t i = 0; !rc && i <= nodes; i++)
        nsh += cnt[i] ? 1 : 0;
    if (!rc && !(sh = calloc(nsh ? nsh : 1, sizeof(*sh))))
        rc = -ENOMEM;
    if (!rc && !(bodies = calloc(nsh ? nsh : 1, sizeof(*bodies))))
        rc = -ENOMEM;
    size_t s = 0;
    for (size_t i = 0; !rc && i <= nodes; i++) {
        if (!cnt[i])
            continue;
        struct cwarm_share *x = &sh[s];
        buf_init(&x->errors, 1u << 20);
        x->self = i == nodes || (int)i == self;
        snprintf(x->node, sizeof(x->node), "%s", x->self ? peer_self(cw->p) : ring_name(ring, i));
        x->nkeys = cnt[i];
        for (size_t q = 0; k.sizes && q < cnt[i]; q++)
            x->bytes += k.sizes[idx[i][q]];
        snprintf(x->state, sizeof(x->state), "queued");
        buf_init(&bodies[s], CWARM_SHARE_BODY_MAX);
        rc = share_body(&k, idx[i], cnt[i], &bodies[s]);
        s++;
    }
    pthread_mutex_lock(&cw->mu);
    int cancel = j->cancel;
    pthread_mutex_unlock(&cw->mu);
    /* hand the shares out: this gateway's to its own warm-ups, the others' at once */
    struct peer_req *rq = NULL;
    struct peer_result *res = NULL;
    size_t nremote = 0;
    if (!rc && !cancel) {
        rq = calloc(nsh ? nsh : 1, sizeof(*rq));
        res = calloc(nsh ? nsh : 1, sizeof(*res));
        if (!rq || !res)
            rc = -ENOMEM;
    }
    for (size_t i = 0; !rc && !cancel && i < nsh; i++) {
        if (sh[i].self) {
            struct buf out;
            struct errmsg lem = {{0}};
            buf_init(&out, 4096);
            int lrc = warm_start(cw->w, bodies[i].p, bodies[i].len, &out, &lem);
            if (lrc || job_id_of(out.p, out.len, sh[i].job))
                share_fail_locked(&sh[i], lem.buf[0] ? lem.buf : s3c_strerror(lrc ? lrc : -EIO));
            buf_free(&out);
            continue;
        }
        rq[nremote++] = (struct peer_req){.host = sh[i].node, .method = "POST", .path = "/_/warm",
                                          .body = bodies[i].p, .body_len = bodies[i].len,
                                          .timeout_ms = peer_timeout_ms(cw->p)};
    }
    if (!rc && !cancel && nremote)
        peer_call_many(peer_client(cw->p), rq, nremote, res);
    for (size_t i = 0, r = 0; !rc && !cancel && i < nsh; i++) {
        if (sh[i].self)
            continue;
        struct peer_result *pr = &res[r++];
        char why[400];
        if (pr->rc)
            snprintf(why, sizeof(why), "gateway %s unreachable: %s", sh[i].node,
                     s3c_strerror(pr->rc));
        else if (pr->status != 202 && pr->status != 200)
            snprintf(why, sizeof(why), "gateway %s refused its share: HTTP %ld", sh[i].node,
                     pr->status);
        else if (job_id_of(pr->body.p, pr->body.len, sh[i].job))
            snprintf(why, sizeof(why), "gateway %s: no job in its answer", sh[i].node);
        else
            why[0] = '\0';
        if (why[0]) {
            log_warn("cluster warm %s: %s", j->id, why);
            share_fail_locked(&sh[i], why);
        }
        buf_free(&pr->body);
    }
    pthread_mutex_lock(&cw->mu);
    if (rc) {
        j->failed = 1;
        snprintf(j->message, sizeof(j->message), "%s", s3c_strerror(rc));
        for (size_t i = 0; sh && i < nsh; i++)
            share_free(&sh[i]);
        free(sh);
        sh = NULL;
        nsh = 0;
    } else if (cancel) {
        for (size_t i = 0; i < nsh; i++) {
            snprintf(sh[i].state, sizeof(sh[i].state), "cancelled");
            sh[i].final = 1;
        }
    }
    j->shares = sh;
    j->nshares = nsh;
    j->resolved = 1;
    free(j->body);
    j->body = NULL;
    cjob_release_locked(j);
    pthread_mutex_unlock(&cw->mu);
    for (size_t i = 0; bodies && i < nsh; i++)
        buf_free(&bodies[i]);
    free(bodies);
    free(rq);
    free(res);
    for (size_t i = 0; idx && i <= nodes; i++)
        free(idx[i]);
    free(idx);
    free(cnt);
    peers_snap_put(snap);
    warm_keys_free(&k);
}

int cwarm_start(struct cwarm *cw, const char *body, size_t len, struct buf *out,
                struct errmsg *em)
{
    int rc = warm_validate(body, len, em);
    if (rc)
        return rc;
    struct cwarm_job *j = calloc(1, sizeof(*j));
    struct cjob_arg *a = malloc(sizeof(*a));
    if (!j || !a || !(j->body = malloc(len ? len : 1))) {
        free(j);
        free(a);
        return -ENOMEM;
    }
    memcpy(j->body, body, len);
    j->len = len;
    struct json *js = NULL;
    struct errmsg pem;
    if (!json_parse(body, len, &js, &pem)) {
        const struct json *pin = json_get(js, "pin");
        j->bucket = json_get_str(js, "bucket") ? strdup(json_get_str(js, "bucket")) : NULL;
        j->pin = pin && pin->type == JSON_BOOL && pin->b;
    }
    json_free(js);
    j->refs = 2; /* the list's, the worker's */
    j->started_ns = s3c_real_ns();
    uint32_t h = ring_hash(peer_self(cw->p), strlen(peer_self(cw->p)));
    pthread_mutex_lock(&cw->mu);
    snprintf(j->id, sizeof(j->id), "c%08x%04x%04x", (unsigned)(j->started_ns / 1000000000ll),
             ++cw->seq & 0xffff, (unsigned)(h & 0xffff));
    j->next = cw->jobs;
    cw->jobs = j;
    unsigned n = 0; /* a bounded history: the oldest finished jobs go */
    for (struct cwarm_job **pp = &cw->jobs; *pp;) {
        struct cwarm_job *x = *pp;
        if (++n > CWARM_MAX_JOBS && x->resolved && x->finished_ns) {
            *pp = x->next;
            cjob_release_locked(x);
            continue;
        }
        pp = &x->next;
    }
    *a = (struct cjob_arg){cw, j};
    rc = workq_submit(cw->wq, WORKQ_LOW, cjob_main, a);
    if (rc) {
        j->refs--;
        j->failed = j->resolved = 1;
        snprintf(j->message, sizeof(j->message), "%s", s3c_strerror(rc));
        free(a);
    } else {
        buf_printf(out, "{\"job\":\"%s\"}\n", j->id);
    }
    pthread_mutex_unlock(&cw->mu);
    return rc;
}

/* --- asking the shares ---------------------------------------------------------------------- */

/* Under cw->mu: @s takes what its gateway said of its job (@body, a job's JSON). */
static void share_update_locked(struct cwarm_share *s, const char *body, size_t len)
{
    struct json *j = NULL;
    struct errmsg em;
    if (!body || json_parse(body, len, &j, &em) || !json_get_str(j, "state")) {
        json_free(j);
        share_fail_locked(s, "unreadable answer from the gateway");
        return;
    }
    snprintf(s->state, sizeof(s->state), "%s", json_get_str(j, "state"));
    s->objects_total = (uint64_t)json_get_num(j, "objects_total", (double)s->objects_total);
    s->objects_done = (uint64_t)json_get_num(j, "objects_done", (double)s->objects_done);
    s->objects_cached = (uint64_t)json_get_num(j, "objects_cached_already", 0);
    s->bytes_total = (uint64_t)json_get_num(j, "bytes_total", 0);
    s->bytes_done = (uint64_t)json_get_num(j, "bytes_done", 0);
    s->errors_total = (uint64_t)json_get_num(j, "errors_total", 0);
    s->skipped = (uint64_t)json_get_num(j, "objects_skipped", 0);
    if (json_get_str(j, "message"))
        snprintf(s->message, sizeof(s->message), "%s", json_get_str(j, "message"));
    const struct json *errs = json_get(j, "errors");
    buf_reset(&s->errors);
    s->nerrors = 0;
    for (size_t i = 0; errs && errs->type == JSON_ARR && i < errs->n; i++) {
        const struct json *e = &errs->items[i];
        if (s->nerrors++ >= CWARM_MAX_ERRORS)
            break;
        if (s->errors.len)
            buf_puts(&s->errors, ",");
        buf_puts(&s->errors, "{\"node\":");
        buf_json_str(&s->errors, s->node);
        buf_puts(&s->errors, ",\"key\":");
        buf_json_str(&s->errors, json_get_str(e, "key") ? json_get_str(e, "key") : "");
        buf_puts(&s->errors, ",\"error\":");
        buf_json_str(&s->errors, json_get_str(e, "error") ? json_get_str(e, "error") : "");
        buf_puts(&s->errors, "}");
    }
    s->final = state_final(s->state);
    json_free(j);
}

/* Asks the gateways of @j's unfinished shares about them (no lock held; @j referenced). */
static void cjob_refresh(struct cwarm *cw, struct cwarm_job *j)
{
    pthread_mutex_lock(&cw->mu);
    uint64_t now = s3c_mono_ns();
    if (!j->resolved || now - j->refreshed_mono < CWARM_REFRESH_NS) {
        pthread_mutex_unlock(&cw->mu);
        return;
    }
    j->refreshed_mono = now;
    size_t n = j->nshares, nr = 0;
    struct peer_req *rq = calloc(n ? n : 1, sizeof(*rq));
    struct peer_result *res = calloc(n ? n : 1, sizeof(*res));
    size_t *which = calloc(n ? n : 1, sizeof(*which));
    char (*paths)[48] = calloc(n ? n : 1, sizeof(*paths));
    char (*hosts)[RING_NAME_MAX] = calloc(n ? n : 1, sizeof(*hosts));
    char (*local)[32] = calloc(n ? n : 1, sizeof(*local));
    if (!rq || !res || !which || !paths || !hosts || !local)
        n = 0;
    for (size_t i = 0; i < n; i++) {
        const struct cwarm_share *s = &j->shares[i];
        local[i][0] = '\0';
        if (s->final || !s->job[0])
            continue;
        if (s->self) {
            snprintf(local[i], sizeof(local[i]), "%s", s->job);
            continue;
        }
        snprintf(paths[nr], sizeof(paths[nr]), "/_/warm/%s", s->job);
        snprintf(hosts[nr], sizeof(hosts[nr]), "%s", s->node);
        rq[nr] = (struct peer_req){.host = hosts[nr], .method = "GET", .path = paths[nr],
                                   .timeout_ms = peer_timeout_ms(cw->p)};
        which[nr++] = i;
    }
    pthread_mutex_unlock(&cw->mu);

    struct buf *lout = calloc(n ? n : 1, sizeof(*lout));
    int *lrc = calloc(n ? n : 1, sizeof(*lrc));
    for (size_t i = 0; lout && lrc && i < n; i++) {
        buf_init(&lout[i], 16u << 20);
        if (local[i][0])
            lrc[i] = warm_status(cw->w, local[i], &lout[i]);
    }
    if (nr)
        peer_call_many(peer_client(cw->p), rq, nr, res);

    pthread_mutex_lock(&cw->mu);
    for (size_t i = 0; lout && lrc && i < n; i++) {
        if (!local[i][0])
            continue;
        if (lrc[i])
            share_fail_locked(&j->shares[i], "its job is gone from this gateway");
        else
            share_update_locked(&j->shares[i], lout[i].p, lout[i].len);
    }
    for (size_t r = 0; r < nr; r++) {
        struct cwarm_share *s = &j->shares[which[r]];
        char why[400];
        if (res[r].rc) {
            snprintf(why, sizeof(why), "gateway %s unreachable: %s", s->node,
                     s3c_strerror(res[r].rc));
            log_warn("cluster warm %s: %s: its share fails", j->id, why);
            share_fail_locked(s, why);
        } else if (res[r].status != 200) {
            snprintf(why, sizeof(why), "gateway %s does not know job %s (HTTP %ld)", s->node,
                     s->job, res[r].status);
            share_fail_locked(s, why);
        } else {
            share_update_locked(s, res[r].body.p, res[r].body.len);
        }
        buf_free(&res[r].body);
    }
    pthread_mutex_unlock(&cw->mu);
    for (size_t i = 0; lout && i < n; i++)
        buf_free(&lout[i]);
    free(lout);
    free(lrc);
    free(rq);
    free(res);
    free(which);
    free(paths);
    free(hosts);
    free(local);
}

/* Under cw->mu: @j's JSON, cluster totals and a line per gateway. */
static void cjob_json_locked(struct cwarm_job *j, struct buf *b)
{
    uint64_t ot = 0, od = 0, oc = 0, bt = 0, bd = 0, et = 0, sk = 0;
    int running = !j->resolved, all_done = j->resolved && !j->failed;
    for (size_t i = 0; i < j->nshares; i++) {
        const struct cwarm_share *s = &j->shares[i];
        uint64_t total = s->objects_total ? s->objects_total : s->nkeys;
        ot += total;
        od += s->objects_done;
        oc += s->objects_cached;
        bt += S3C_MAX(s->bytes_total, s->bytes);
        bd += s->bytes_done;
        sk += s->skipped;
        et += s->errors_total;
        if (s->final && strcmp(s->state, "done") && s->job[0] == '\0')
            et += s->nkeys; /* never started */
        else if (s->final && !strcmp(s->state, "failed") && total > s->objects_done + s->errors_total)
            et += total - s->objects_done - s->errors_total; /* its gateway went away */
        running |= !s->final;
        all_done &= !strcmp(s->state, "done");
    }
    const char *state = running ? (j->resolved ? "running" : "queued")
                        : j->cancel ? "cancelled"
                        : all_done ? "done"
                                   : "failed";
    if (!running && !j->finished_ns)
        j->finished_ns = s3c_real_ns();
    buf_printf(b, "{\"job\":\"%s\",\"state\":\"%s\",\"cluster\":true,\"bucket\":", j->id, state);
    buf_json_str(b, j->bucket ? j->bucket : "");
    buf_printf(b, ",\"pin\":%s,\"objects_total\":%llu,\"objects_done\":%llu,"
                  "\"objects_cached_already\":%llu,\"bytes_total\":%llu,\"bytes_done\":%llu,"
                  "\"errors_total\":%llu,\"errors\":[",
               j->pin ? "true" : "false", (unsigned long long)ot, (unsigned long long)od,
               (unsigned long long)oc, (unsigned long long)S3C_MAX(bt, bd),
               (unsigned long long)bd, (unsigned long long)et);
    int first = 1;
    for (size_t i = 0; i < j->nshares; i++)
        if (j->shares[i].errors.len) {
            buf_printf(b, "%s%s", first ? "" : ",", j->shares[i].errors.p);
            first = 0;
        }
    buf_puts(b, "]");
    if (sk)
        buf_printf(b, ",\"objects_skipped\":%llu", (unsigned long long)sk);
    if (j->message[0] || (!running && !all_done && !j->cancel)) {
        char msg[300];
        size_t nf = 0;
        for (size_t i = 0; i < j->nshares; i++)
            nf += strcmp(j->shares[i].state, "done") != 0;
        if (!j->message[0])
            snprintf(msg, sizeof(msg), "%zu of %zu gateways did not complete their share", nf,
                     j->nshares);
        buf_puts(b, ",\"message\":");
        buf_json_str(b, j->message[0] ? j->message : msg);
    }
    char ts[32];
    s3c_iso8601(j->started_ns, ts);
    buf_printf(b, ",\"started\":\"%s\"", ts);
    if (j->finished_ns) {
        s3c_iso8601(j->finished_ns, ts);
        buf_printf(b, ",\"finished\":\"%s\"", ts);
    }
    buf_puts(b, ",\"nodes\":[");
    for (size_t i = 0; i < j->nshares; i++) {
        const struct cwarm_share *s = &j->shares[i];
        buf_printf(b, "%s{\"node\":", i ? "," : "");
        buf_json_str(b, s->node);
        buf_printf(b, ",\"self\":%s,\"job\":\"%s\",\"state\":\"%s\",\"objects_total\":%llu,"
                      "\"objects_done\":%llu,\"objects_cached_already\":%llu,"
                      "\"bytes_total\":%llu,\"bytes_done\":%llu,\"errors_total\":%llu",
                   s->self ? "true" : "false", s->job, s->state,
                   (unsigned long long)(s->objects_total ? s->objects_total : s->nkeys),
                   (unsigned long long)s->objects_done, (unsigned long long)s->objects_cached,
                   (unsigned long long)S3C_MAX(s->bytes_total, s->bytes),
                   (unsigned long long)s->bytes_done, (unsigned long long)s->errors_total);
        if (s->message[0]) {
            buf_puts(b, ",\"message\":");
            buf_json_str(b, s->message);
        }
        buf_puts(b, "}");
    }
    buf_puts(b, "]}\n");
}

static struct cwarm_job *cjob_find_ref(struct cwarm *cw, const char *id)
{
    pthread_mutex_lock(&cw->mu);
    struct cwarm_job *j = cw->jobs;
    while (j && strcmp(j->id, id))
        j = j->next;
    if (j)
        j->refs++;
    pthread_mutex_unlock(&cw->mu);
    return j;
}

int cwarm_status(struct cwarm *cw, const char *id, struct buf *out)
{
    struct cwarm_job *j = cjob_find_ref(cw, id);
    if (!j)
        return -S3E_NOT_FOUND;
    cjob_refresh(cw, j);
    pthread_mutex_lock(&cw->mu);
    cjob_json_locked(j, out);
    cjob_release_locked(j);
    pthread_mutex_unlock(&cw->mu);
    return 0;
}

int cwarm_cancel(struct cwarm *cw, const char *id, struct buf *out)
{
    struct cwarm_job *j = cjob_find_ref(cw, id);
    if (!j)
        return -S3E_NOT_FOUND;
    pthread_mutex_lock(&cw->mu);
    j->cancel = 1;
    size_t n = j->nshares, nr = 0;
    struct peer_req *rq = calloc(n ? n : 1, sizeof(*rq));
    struct peer_result *res = calloc(n ? n : 1, sizeof(*res));
    char (*paths)[48] = calloc(n ? n : 1, sizeof(*paths));
    char (*hosts)[RING_NAME_MAX] = calloc(n ? n : 1, sizeof(*hosts));
    char (*local)[32] = calloc(n ? n : 1, sizeof(*local));
    for (size_t i = 0; rq && res && paths && hosts && local && i < n; i++) {
        const struct cwarm_share *s = &j->shares[i];
        if (s->final || !s->job[0])
            continue;
        if (s->self) {
            snprintf(local[i], sizeof(local[i]), "%s", s->job);
            continue;
        }
        snprintf(paths[nr], sizeof(paths[nr]), "/_/warm/%s", s->job);
        snprintf(hosts[nr], sizeof(hosts[nr]), "%s", s->node);
        rq[nr] = (struct peer_req){.host = hosts[nr], .method = "DELETE", .path = paths[nr],
                                   .timeout_ms = peer_timeout_ms(cw->p)};
        nr++;
    }
    j->refreshed_mono = 0; /* the status below asks again */
    pthread_mutex_unlock(&cw->mu);
    for (size_t i = 0; local && i < n; i++)
        if (local[i][0])
            (void)warm_cancel(cw->w, local[i]);
    if (nr)
        peer_call_many(peer_client(cw->p), rq, nr, res);
    for (size_t r = 0; r < nr; r++)
        buf_free(&res[r].body);
    free(rq);
    free(res);
    free(paths);
    free(hosts);
    free(local);
    cjob_refresh(cw, j);
    pthread_mutex_lock(&cw->mu);
    cjob_json_locked(j, out);
    cjob_release_locked(j);
    pthread_mutex_unlock(&cw->mu);
    return 0;
}

int cwarm_elsewhere(struct cwarm *cw, const char *method, const char *id, struct buf *out)
{
    char **names = NULL, path[64];
    size_t n = 0, k = 0;
    int self = -1, rc = -S3E_NOT_FOUND;
    if (peer_names(cw->p, &names, &n, &self))
        return -ENOMEM;
    snprintf(path, sizeof(path), "/_/warm/%s", id);
    struct peer_req *rq = calloc(n ? n : 1, sizeof(*rq));
    struct peer_result *res = calloc(n ? n : 1, sizeof(*res));
    for (size_t i = 0; rq && res && i < n; i++)
        if ((int)i != self)
            rq[k++] = (struct peer_req){.host = names[i], .method = method, .path = path,
                                        .timeout_ms = 2 * peer_timeout_ms(cw->p)};
    if (k)
        peer_call_many(peer_client(cw->p), rq, k, res);
    for (size_t i = 0; i < k; i++) {
        if (rc && !res[i].rc && res[i].status == 200 && res[i].body.p) {
            buf_append(out, res[i].body.p, res[i].body.len);
            rc = 0;
        }
        buf_free(&res[i].body);
    }
    free(rq);
    free(res);
    peer_names_free(names);
    return rc;
}
