/*
 * req_kv.c: the request's headers and decoded query parameters as struct req holds them
 * (req_header, req_query, req_has_query; req.c fills them from libmicrohttpd). Kept apart from
 * req.c so that the modules reading a request (router.c, auth.c, upload.c) link into a unit
 * test without the HTTP daemon.
 */
#include <string.h>
#include <strings.h>

#include "req.h"

const char *req_header(struct req *rq, const char *name)
{
    for (size_t i = 0; i < rq->n_headers; i++) /* MHD's order: the first one sent wins */
        if (!strcasecmp(rq->headers[i].name, name))
            return rq->headers[i].value;
    return NULL;
}

int req_expects_continue(struct req *rq)
{
    const char *e = req_header(rq, "Expect");
    return e && !strcasecmp(e, "100-continue");
}

const char *req_query(struct req *rq, const char *name)
{
    for (size_t i = 0; i < rq->n_query; i++)
        if (!strcmp(rq->query[i].name, name))
            return rq->query[i].value ? rq->query[i].value : "";
    return NULL;
}

int req_has_query(struct req *rq, const char *name)
{
    return req_query(rq, name) != NULL;
}
