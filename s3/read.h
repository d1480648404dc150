/*
 * read.h: the one GET / HEAD flow (read.c) of whatever is answered as an object: an object,
 * or a member of a tar shard (h_member.c). What differs between them is a struct read_target.
 */
#ifndef S3C_S3_READ_H
#define S3C_S3_READ_H

#include <stdint.h>

#include "backends/backend.h"
#include "http/req.h"

/* The phases of a read (rq->phase). */
enum { READ_START = 0, READ_META, READ_SELECT, READ_BODY };

/* A step's "go on", beside the handler returns REQ_OK and REQ_CLOSE. */
#define READ_ON 2

/* What a target answers: @meta (headers, size; a 304 carries them too), whose byte 0 is byte
 * @base of the cached object. */
struct read_view {
    const struct be_meta *meta;
    uint64_t base;
    const char *alt_etag; /* NULL, or a second ETag the conditional headers may name: 304 when
                           * either matches an If-None-Match, 412 only when both fail */
};

struct read_target {
    /* After the object's metadata @m is known and ?versionId checked: checks what the target
     * asks of the request and sets *@v. Returns READ_ON to go on, or the handler's return
     * (REQ_OK, REQ_CLOSE) once it answered (an error) or parked the request (a job; it is
     * called again with rq->phase READ_SELECT once resumed). NULL: the whole object,
     * ?partNumber allowed. */
    int (*select)(struct req *rq, const struct be_meta *m, struct read_view *v);
    /* Called when the conditions and the range passed, before the answer (each time the
     * request comes back until the body is opened); NULL: nothing. */
    void (*served)(struct req *rq);
};

extern const struct read_target read_object; /* the object itself */
extern const struct read_target read_member; /* h_member.c: ?member=NAME of a tar shard */

/* GET (@is_get) or HEAD of @t through the cache: the object, its metadata, ?versionId, @t's
 * selection, the conditional headers, ?partNumber or Range, then the answer from the cache
 * (suspending while the cache fetches). An answer that read no byte (HEAD, 304, 412, 416, an
 * empty range, an error) says so to the cache at once, not at release: its client may
 * already send the next request. A handler's end(). */
int read_end(struct req *rq, int is_get, const struct read_target *t);

#endif
