/*
 * throttle.c: a loopback TCP relay with one aggregate bandwidth cap, and optionally a cap per
 * connection and a delay before each answer's first byte, for benchmarks that need a slow
 * backend (an HDD array, a shared object store, a cloud store that serves one connection at
 * ~90 MB/s and answers after tens of ms) on a machine whose "backend" is otherwise the page
 * cache. Not part of the gateway.
 *
 *   throttle LISTEN_PORT TARGET_PORT BYTES_PER_SECOND [CONN_BYTES_PER_SECOND [FIRST_BYTE_MS]]
 *
 * Listens on 127.0.0.1:LISTEN_PORT; each accepted connection is relayed to
 * 127.0.0.1:TARGET_PORT, both directions, by a thread per direction. Every chunk that crosses
 * the relay (either way) first books its transmission time on one shared clock, so the sum of
 * all connections in both directions never exceeds BYTES_PER_SECOND (plus one chunk), and, with
 * CONN_BYTES_PER_SECOND (0: none), on its direction's own clock, so that one connection never
 * moves more than that. With FIRST_BYTE_MS, the first bytes the target sends after the client
 * sent something (a request; keep-alive connections carry many) wait until FIRST_BYTE_MS after
 * that: each answer's time to first byte. Bytes move with splice(2) through a pipe: the relay
 * costs little CPU. Prints "ready" once listening; runs until killed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (256u << 10) /* bytes booked at a time: the cap's granularity */

static double rate;            /* bytes per second, both directions together */
static double conn_rate;       /* bytes per second of one direction of one connection, or 0 */
static uint64_t first_byte_ns; /* delay of an answer's first byte after its request, or 0 */
static uint64_t next_free_ns;  /* when the link is free again */
static pthread_mutex_t clock_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

/* With a cap per connection, waits for the direction's own clock *@own (its pace), then books
 * @n bytes on the shared link and sleeps until its slot there begins: a connection gets its
 * cap while the link has room, and its share of the link when it has not, and the link's time
 * is booked only by a connection ready to send. */
static void book(size_t n, uint64_t *own)
{
    uint64_t now = now_ns();
    if (conn_rate > 0) {
        if (*own > now) {
            sleep_ns(*own - now);
            now = now_ns();
        }
        *own = (*own > now ? *own : now) + (uint64_t)((double)n * 1e9 / conn_rate);
    }
    uint64_t cost = (uint64_t)((double)n * 1e9 / rate);
    pthread_mutex_lock(&clock_mu);
    if (next_free_ns < now)
        next_free_ns = now;
    uint64_t start = next_free_ns; /* our slot on the link */
    next_free_ns += cost;
    pthread_mutex_unlock(&clock_mu);
    if (start > now)
        sleep_ns(start - now);
    if (conn_rate > 0 && start > now) /* the link held us: our pace counts from there */
        *own += start - now;
}

struct pump {
    int from, to;
    struct pump *peer;
    int done;
    int answers;          /* the target->client direction (a FIRST_BYTE_MS delay applies) */
    uint64_t own_free_ns; /* this direction's clock (CONN_BYTES_PER_SECOND) */
    uint64_t asked_ns;    /* client->target: when the client last sent bytes with no answer
                           * begun since (under mu), 0 when none */
    pthread_mutex_t *mu;
};

/* The answers' side: before the first bytes of an answer (bytes from the target after the
 * client sent something), waits until FIRST_BYTE_MS after the client's bytes. */
static void first_byte_wait(struct pump *p)
{
    pthread_mutex_lock(p->mu);
    uint64_t asked = p->peer->asked_ns;
    p->peer->asked_ns = 0;
    pthread_mutex_unlock(p->mu);
    uint64_t now = now_ns();
    if (asked && asked + first_byte_ns > now)
        sleep_ns(asked + first_byte_ns - now);
}

/* The requests' side: the client sent bytes (a request begins, or goes on). */
static void asked(struct pump *p)
{
    pthread_mutex_lock(p->mu);
    if (!p->asked_ns)
        p->asked_ns = now_ns();
    pthread_mutex_unlock(p->mu);
}

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
            if (first_byte_ns && p->answers)
                first_byte_wait(p);
            else if (first_byte_ns)
                asked(p);
            book((size_t)n, &p->own_free_ns);
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
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof(a)) == 0)
        return s;
    if (s >= 0)
        close(s);
    return -1;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE,
           SIG_IGN); /* a client that hangs up mid-answer ends its connection, not the relay */
    if (argc < 4 || argc > 6 || atoi(argv[1]) <= 0 || atoi(argv[2]) <= 0 || atof(argv[3]) <= 0 ||
        (argc > 4 && atof(argv[4]) < 0) || (argc > 5 && atof(argv[5]) < 0)) {
        fprintf(stderr, "usage: throttle LISTEN_PORT TARGET_PORT BYTES_PER_SECOND "
                        "[CONN_BYTES_PER_SECOND [FIRST_BYTE_MS]]\n");
        return 2;
    }
    int target = atoi(argv[2]);
    rate = atof(argv[3]);
    conn_rate = argc > 4 ? atof(argv[4]) : 0;
    first_byte_ns = argc > 5 ? (uint64_t)(atof(argv[5]) * 1e6) : 0;
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)atoi(argv[1])),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
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
        p[0] = (struct pump){.from = c, .to = t, .peer = &p[1], .mu = mu};
        p[1] = (struct pump){.from = t, .to = c, .peer = &p[0], .answers = 1, .mu = mu};
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
