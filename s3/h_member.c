/*
 * h_member.c: GET and HEAD of one member of a tar shard, `GET /bucket/shard.tar?member=NAME`.
 * The member is answered as an object of its own: its size, a Content-Type from its name's
 * extension, an ETag derived from the shard's ETag and the name, Range within the member, and
 * the conditional headers against the shard's ETag (or the member's). Its bytes are a range
 * of the cached shard: a hit is one member-index lookup (cache/members.c) and a sendfile at
 * the member's offset. A version without an index gets one built on a worker first. This is
 * a read_target: the GET flow itself is the object's (read.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/respond.h"
#include "http/server.h"
#include "lib/s3err.h"
#include "read.h"
#include "s3.h"
#include "sig/sigv4.h"

struct member_state {
    void *blob; /* the index a build of this request made (used when the version kept none) */
    size_t len;
    int rc;     /* the build's */
    struct errmsg em;
    struct be_meta mm; /* the member as an object */
};

static void member_state_free(void *p)
{
    struct member_state *ms = p;
    if (ms)
        free(ms->blob);
    free(ms);
}

/* Content-Type by a member name's extension (the WebDataset usual ones); NULL: the default. */
static const char *member_content_type(const char *name)
{
    static const struct { const char *ext, *type; } types[] = {
        {"jpg", "image/jpeg"}, {"jpeg", "image/jpeg"}, {"png", "image/png"},
        {"webp", "image/webp"}, {"gif", "image/gif"}, {"bmp", "image/bmp"},
        {"tif", "image/tiff"}, {"tiff", "image/tiff"}, {"txt", "text/plain"},
        {"cls", "text/plain"}, {"json", "application/json"}, {"xml", "application/xml"},
        {"html", "text/html"}, {"csv", "text/csv"}, {"wav", "audio/wav"},
        {"flac", "audio/flac"}, {"mp3", "audio/mpeg"}, {"ogg", "audio/ogg"},
        {"mp4", "video/mp4"}, {"webm", "video/webm"}, {"cbor", "application/cbor"},
        {"gz", "application/gzip"}, {"tar", "application/x-tar"},
    };
    const char *slash = strrchr(name, '/');
    const char *dot = strrchr(slash ? slash + 1 : name, '.');
    if (!dot || !dot[1])
        return NULL;
    for (size_t i = 0; i < ARRAY_SIZE(types); i++)
        if (!strcasecmp(dot + 1, types[i].ext))
            return types[i].type;
    return NULL;
}

/* The member's ETag: 32 hex digits of SHA-256(shard ETag, NUL, name), and "-m" so that no
 * client takes it for the MD5 of the bytes. */
static void member_etag(const char *shard_etag, const char *name, char out[BE_ETAG_MAX])
{
    char hex[65];
    size_t el = strlen(shard_etag), nl = strlen(name);
    char *msg = malloc(el + 1 + nl);
    if (!msg) {
        snprintf(out, BE_ETAG_MAX, "%s", shard_etag);
        return;
    }
    memcpy(msg, shard_etag, el + 1);
    memcpy(msg + el + 1, name, nl);
    sigv4_sha256_hex(msg, el + 1 + nl, hex);
    free(msg);
    snprintf(out, BE_ETAG_MAX, "%.32s-m", hex);
}

static void build_job(struct req *rq)
{
    struct member_state *ms = rq->job_state;
    ms->rc = cache_obj_members_build(rq->obj, &ms->blob, &ms->len, &ms->em);
}

/* read_member's select: the member named by ?member= as the view, from the shard's index (a
 * build on a worker first when the version has none). The conditional headers match the
 * shard's ETag or the member's. */
static int member_select(struct req *rq, const struct be_meta *m, struct read_view *v)
{
    struct member_state *ms = rq->job_state;
    int rc;
    if (!ms) {
        if (!(ms = calloc(1, sizeof(*ms))))
            return respond_error(rq, -ENOMEM);
        rq->job_state = ms;
        rq->job_state_free = member_state_free;
    }
    if (req_has_query(rq, "partNumber"))
        return respond_error_msg(rq, -S3E_INVALID_REQUEST,
                                 "Cannot specify both member and partNumber");
    const char *name = req_query(rq, "member");
    size_t name_len = strlen(name);
    if (!name_len || name_len > 4096)
        return respond_error_msg(rq, -S3E_INVALID_ARGUMENT,
                                 "member must name a member of the tar (1 to 4096 bytes)");
    size_t kl = strlen(rq->key);
    if ((kl > 7 && !strcasecmp(rq->key + kl - 7, ".tar.gz")) ||
        (kl > 4 && !strcasecmp(rq->key + kl - 4, ".tgz")))
        return respond_error_msg(rq, -S3E_NOT_IMPLEMENTED,
                                 "Member reads of compressed tars are not supported: "
                                 "reading one member of a gzip stream needs all the "
                                 "bytes before it");

    if (rq->phase == READ_SELECT && ms->rc) {
        char msg[400];
        snprintf(msg, sizeof(msg), "%s is not a tar archive the gateway can read: %s", rq->key,
                 ms->em.buf[0] ? ms->em.buf : s3c_strerror(ms->rc));
        return respond_error_msg(rq, ms->rc, ms->rc == -S3E_INVALID_ARCHIVE ? msg : NULL);
    }
    struct cache_member cm;
    if (ms->blob) {
        rc = cache_member_lookup(ms->blob, ms->len, name, name_len, &cm);
    } else {
        rc = cache_obj_member(rq->obj, name, name_len, &cm);
        if (rc == -ENODATA || rc == -EBADMSG) {
            if (rq->phase == READ_SELECT) /* built, yet neither kept nor handed back */
                return respond_error(rq, -S3E_INTERNAL);
            rq->phase = READ_SELECT;
            rc = req_run_wait_job(rq, build_job);
            return rc ? respond_error(rq, rc) : REQ_OK;
        }
    }
    if (rc == -ENOENT) {
        char msg[4400];
        snprintf(msg, sizeof(msg), "The specified key does not exist: %s has no member %s",
                 rq->key, name);
        return respond_error_msg(rq, -S3E_NO_SUCH_KEY, msg);
    }
    if (rc)
        return respond_error(rq, rc == -EBADMSG ? -S3E_INTERNAL : rc);
    if (cm.data_off > m->size || cm.size > m->size - cm.data_off)
        return respond_error(rq, -S3E_INTERNAL); /* never past the shard */

    struct be_meta *mm = &ms->mm;
    memset(mm, 0, sizeof(*mm));
    mm->size = cm.size;
    mm->mtime_ns = m->mtime_ns;
    member_etag(m->etag, name, mm->etag);
    const char *ct = member_content_type(name);
    snprintf(mm->content_type, sizeof(mm->content_type), "%s",
             ct ? ct : "application/octet-stream");
    v->meta = mm;
    v->base = cm.data_off;
    v->alt_etag = m->etag;
    return READ_ON;
}

static void member_served(struct req *rq)
{
    cache_count_members(rq->srv->cache, 1, 0, 0, 0);
}

const struct read_target read_member = {member_select, member_served};
