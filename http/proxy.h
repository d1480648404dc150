/*
 * proxy.h: cluster mode's GET and HEAD of an object another gateway owns: answered by the
 * owner through this gateway (proxy.c).
 */
#ifndef S3C_PROXY_H
#define S3C_PROXY_H

struct req;

/* After authentication and routing: when @rq is a client's GET or HEAD of an object whose
 * owner (computed from @url, the request-target's path as sent) is another gateway, makes
 * the proxy its handler and returns 1; else 0 (served here). */
int proxy_route(struct req *rq, const char *url);

#endif
