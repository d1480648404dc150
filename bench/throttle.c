/*
 * throttle.c: a loopback TCP relay with one aggregate bandwidth cap, for benchmarks that need a
 * slow backend (an HDD array, a shared object store) on a machine whose "backend" is otherwise
 * the page cache. Not part of the gateway.
 *
 *   throttle LISTEN_PORT TARGET_PORT BYTES_PER_SECOND
 *
 * Listens on 127.0.0.1:LISTEN_PORT; each accepted connection is relayed to
 * 127.0.0.1:TARGET_PORT, both directions, by a thread per direction. Every chunk that crosses
 * the relay (either way) first books its transmission time on one shared clock, so the sum of
 * all connections in both directions never exceeds BYTES_PER_SECOND (plus one chunk). Bytes move
 * with splice(2) through a pipe: the relay costs little CPU. Prints "ready" once listening; runs
 * until killed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (256u << 10) /* bytes booked at a time: the cap's granularity */

static double rate;              /* bytes per second, both directions together */
static uint64_t next_free_ns;    /* when the link is free again */
static pthread_mutex_t clock_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Books @n bytes on the shared link and sleeps until their slot has passed. */
static void book(size_t n)
{
    uint64_t now = now_ns(), cost = (uint64_t)((double)n * 1e9 / rate);
    pthread_mutex_lock(&clock_mu);
    if (next_free_ns < now)
        next_free_ns = now;
    next_free_ns += cost;
    uint64_t until = next_free_ns;
    pthread_mutex_unlock(&clock_mu);
    if (until > now + cost) { /* others are ahead of us: wait for our turn */
        uint64_t wait = until - cost - now;
        struct timespec ts = { (time_t)(wait / 1000000000u), (long)(wait % 1000000000u) };
        while (nanosleep(&ts, &ts) && errno == EINTR)
            ;
    }
}

struct pump {
    int from, to;
    struct pump *peer;
    int done;
    pthread_mutex_t *mu;
};

/* Moves bytes @p->from -> @p->to until EOF or an error, then half-closes @p->to. */
static void *pump_run(void *arg)
{
    struct pump *p = arg;
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) == 0) {
        (void)fcntl(pfd[1], F_SETPIPE_SZ, (int)CHUNK);
        for (;;) {
            ssize_t n = splice(p->from, NULL, pfd[1], NULL, CHUNK, SPLICE_F_MOVE);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            book((size_t)n);
            ssize_t left = n;
            while (left > 0) {
                ssize_t w = splice(pfd[0], NULL, p->to, NULL, (size_t)left, SPLICE_F_MOVE);
                if (w < 0 && errno == EINTR)
                    continue;
                if (w <= 0)
                    goto out;
                left -= w;
            }
        }
out:
        close(pfd[0]);
        close(pfd[1]);
    }
    shutdown(p->to, SHUT_WR);
    shutdown(p->from, SHUT_RD);
    pthread_mutex_lock(p->mu);
    p->done = 1;
    int last = p->peer->done;
    pthread_mutex_unlock(p->mu);
    if (last) { /* the second direction to finish owns the connection */
        close(p->from);
        close(p->to);
        pthread_mutex_destroy(p->mu);
        free(p->mu);
        free(p < p->peer ? p : p->peer);
    }
    return NULL;
}

static int connect_target(int port)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof(a)) == 0)
        return s;
    if (s >= 0)
        close(s);
    return -1;
}

int main(int argc, char **argv)
{
    if (argc != 4 || atoi(argv[1]) <= 0 || atoi(argv[2]) <= 0 || atof(argv[3]) <= 0) {
        fprintf(stderr, "usage: throttle LISTEN_PORT TARGET_PORT BYTES_PER_SECOND\n");
        return 2;
    }
    int target = atoi(argv[2]);
    rate = atof(argv[3]);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 128)) {
        perror("throttle: listen");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE)
                continue;
            perror("throttle: accept");
            return 1;
        }
        int t = connect_target(target);
        if (t < 0) {
            close(c);
            continue;
        }
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        setsockopt(t, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct pump *p = calloc(2, sizeof(*p));
        pthread_mutex_t *mu = malloc(sizeof(*mu));
        if (!p || !mu) {
            free(p);
            free(mu);
            close(c);
            close(t);
            continue;
        }
        pthread_mutex_init(mu, NULL);
        p[0] = (struct pump){ .from = c, .to = t, .peer = &p[1], .mu = mu };
        p[1] = (struct pump){ .from = t, .to = c, .peer = &p[0], .mu = mu };
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&at, 64u << 10);
        for (int i = 0; i < 2; i++)
            if (pthread_create(&th, &at, pump_run, &p[i])) {
                perror("throttle: thread");
                return 1;
            }
        pthread_attr_destroy(&at);
    }
}
