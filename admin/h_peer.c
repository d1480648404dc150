/*
 * h_peer.c: the requests gateways send each other about writes (admin_priv.h): a write
 * notice, which may carry every key of one request (a DeleteObjects: one notice, not one per
 * key), and a resync, sent by a gateway that could not deliver one. Only a peer's signed
 * request is served; the work runs on a worker (cache invalidations, a warm-up's start).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin_priv.h"
#include "backends/backend.h"
#include "cache/cache.h"
#include "http/respond.h"
#include "http/server.h"
#include "lib/hex.h"
#include "lib/json.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "objects/warm.h"
#include "peer/peer.h"

enum { PH_START = 0, PH_JOB_DONE };

struct notice_state {
    struct json *doc;
    const struct json *changes; /* into doc: an array of checked objects */
    uint64_t forgotten;
};

static void notice_state_free(void *p)
{
    struct notice_state *s = p;
    if (!s)
        return;
    json_free(s->doc);
    free(s);
}

/* The key of change @c into *@key (the caller frees it; NULL: the whole bucket): its
 * "key_hex" (any bytes, whole) where given, else its "key" (UTF-8 only: an older peer's).
 * 0, -EINVAL for a key that is not a string or not a valid key, or -ENOMEM. */
static int change_key(const struct json *c, char **key)
{
    const struct json *kj = json_get(c, "key"), *hj = json_get(c, "key_hex");
    *key = NULL;
    if (!kj && !hj)
        return 0;
    if ((kj && kj->type != JSON_STR) || (hj && hj->type != JSON_STR))
        return -EINVAL;
    int rc = hj ? hex_decode_str(hj->str, key) : (*key = strdup(kj->str)) ? 0 : -ENOMEM;
    if (!rc && backend_check_key(*key, strlen(*key)))
        rc = -EINVAL;
    if (rc) {
        free(*key);
        *key = NULL;
    }
    return rc;
}

static void notice_job(struct req *rq)
{
    struct notice_state *s = rq->job_state;
    struct server *srv = rq->srv;
    char owner[RING_NAME_MAX];
    rq->rc = 0;
    for (size_t i = 0; i < s->changes->n; i++) {
        const struct json *c = &s->changes->items[i];
        const char *b = json_get_str(c, "bucket");
        const struct json *w = json_get(c, "warm");
        uint64_t n = 0;
        char *k = NULL;
        if (change_key(c, &k)) /* checked: only memory runs out */
            continue;
        if (!k) {
            (void)cache_invalidate_prefix(srv->cache, b, "", &n);
            s->forgotten += n;
            continue;
        }
        /* a change already on the backend is newer than a dirty copy here (one taken while
         * this gateway owned the key): that copy goes too, its drain cancelled, so it never
         * overwrites the newer object; other changes leave dirty copies alone */
        const struct json *st = json_get(c, "stored");
        if ((st && st->b ? cache_forget(srv->cache, b, k) : cache_invalidate(srv->cache, b, k)) ==
            0)
            s->forgotten++;
        /* the writer kept no copy: the owner fetches the new version back */
        if (w && w->b && srv->warm && !peer_route_key(srv->peer, b, k, owner))
            (void)warm_object(srv->warm, b, k);
        free(k);
    }
}

/* Checks the notice's shape: 0, or an S3 error with @msg set. */
static int notice_check(const struct json *d, const struct json **changes, char *msg, size_t cap)
{
    const struct json *ch = d && d->type == JSON_OBJ ? json_get(d, "changes") : NULL;
    if (!ch || ch->type != JSON_ARR) {
        snprintf(msg, cap, "a notice is {\"changes\": [{\"bucket\": B, \"key\": K}, ...]}");
        return -S3E_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < ch->n; i++) {
        const struct json *c = &ch->items[i], *w = json_get(c, "warm"), *st = json_get(c, "stored");
        const char *b = c->type == JSON_OBJ ? json_get_str(c, "bucket") : NULL;
        char *k = NULL;
        int bad = !b || backend_check_bucket_name(b) || change_key(c, &k) ||
                  (w && w->type != JSON_BOOL) || (st && st->type != JSON_BOOL);
        free(k);
        if (bad) {
            snprintf(msg, cap,
                     "change %zu: want a valid \"bucket\", an optional valid \"key\" "
                     "(or \"key_hex\": its bytes in hex) and optional booleans \"warm\" and "
                     "\"stored\"",
                     i);
            return -S3E_INVALID_ARGUMENT;
        }
    }
    *changes = ch;
    return 0;
}

int admin_peer_notice(struct req *rq)
{
    if (rq->phase == PH_JOB_DONE) {
        struct notice_state *s = rq->job_state;
        char out[64];
        int n = snprintf(out, sizeof(out), "{\"forgotten\":%llu}\n",
                         (unsigned long long)s->forgotten);
        return respond_text(rq, 200, "application/json", out, (size_t)n);
    }
    if (!rq->is_peer || !rq->srv->peer)
        return respond_error_msg(rq, -S3E_ACCESS_DENIED, "Write notices come from peers only");
    struct notice_state *s = calloc(1, sizeof(*s));
    struct errmsg em = {""};
    char msg[200];
    if (!s)
        return respond_error(rq, -ENOMEM);
    rq->job_state = s;
    rq->job_state_free = notice_state_free;
    if (json_parse(rq->body.p ? rq->body.p : "", rq->body.len, &s->doc, &em))
        return respond_error_msg(rq, -S3E_INVALID_ARGUMENT, em.buf);
    int rc = notice_check(s->doc, &s->changes, msg, sizeof(msg));
    if (rc)
        return respond_error_msg(rq, rc, msg);
    rq->phase = PH_JOB_DONE;
    rc = req_run_job(rq, notice_job);
    return rc ? respond_error(rq, rc) : REQ_OK;
}

int admin_peer_resync(struct req *rq)
{
    if (!rq->is_peer || !rq->srv->peer)
        return respond_error_msg(rq, -S3E_ACCESS_DENIED, "Resyncs come from peers only");
    int64_t now = s3c_real_ns();
    cache_set_valid_after(rq->srv->cache, now);
    log_info("cluster: %s could not tell this gateway of writes: what it cached before now is "
             "revalidated on its next read",
             rq->peer_name);
    char out[64];
    int n = snprintf(out, sizeof(out), "{\"revalidate_before_ns\":%lld}\n", (long long)now);
    return respond_text(rq, 200, "application/json", out, (size_t)n);
}
