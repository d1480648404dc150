/*
 * delayline.c: a loopback TCP relay that delays every byte by a fixed time, for benchmarks that
 * need a client a network round trip away on a machine whose kernel has no netem (tc cannot
 * add delay here). Not part of the gateway.
 *
 *   delayline LISTEN_PORT TARGET_PORT DELAY_US
 *
 * Listens on 127.0.0.1:LISTEN_PORT; each accepted connection is relayed to
 * 127.0.0.1:TARGET_PORT. Each direction has a reader thread, which stamps every chunk it reads
 * with its arrival time into a bounded ring (LINE_RING bytes, LINE_SLOTS chunks), and a writer
 * thread, which sends each chunk DELAY_US microseconds after it arrived (chunks already due go
 * out in one send). So a round trip through the relay costs 2 x DELAY_US more, while
 * throughput is bounded by the ring (LINE_RING per DELAY_US), not by one chunk per delay; a
 * full ring stops the reader, and TCP's flow control the sender. An end of stream (or a reset)
 * is forwarded as a half-close after the same delay; a writer that cannot send stops its
 * reader; a connection is closed when all four threads are done. The TCP handshake itself is
 * not delayed. Prints "ready" once listening; runs until killed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LINE_RING (16u << 20) /* bytes in flight per direction: the bandwidth-delay product */
#define LINE_CHUNK (256u << 10) /* at most this much read at a time */
#define LINE_SLOTS 4096u        /* chunks in flight per direction */

static uint64_t delay_ns;

struct line_slot {
    uint64_t due_ns; /* when its bytes may leave */
    uint32_t len;    /* 0: the end of the stream */
};

struct line_conn;

struct line { /* one direction; every field below fd is under conn->mu */
    int from, to;
    struct line_conn *conn;
    char *ring;
    size_t head, used; /* bytes waiting: [head, head + used) modulo LINE_RING */
    struct line_slot slot[LINE_SLOTS];
    unsigned shead, nslots; /* chunks waiting: from slot[shead], modulo LINE_SLOTS */
    int dead;               /* the writer gave up: the reader stops */
    pthread_cond_t cv;      /* reader waits for room, writer for chunks: never both at once */
};

struct line_conn {
    pthread_mutex_t mu;
    int refs; /* threads still running; the last one closes and frees */
    int fd[2];
    struct line dir[2];
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t ns)
{
    struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* Drops one thread's hold on @c; the last one closes both sockets and frees everything. */
static void line_conn_put(struct line_conn *c)
{
    pthread_mutex_lock(&c->mu);
    int last = --c->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (!last)
        return;
    for (int i = 0; i < 2; i++) {
        close(c->fd[i]);
        free(c->dir[i].ring);
        pthread_cond_destroy(&c->dir[i].cv);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Reads @l->from into the ring, stamping each chunk, until EOF, an error or a dead writer;
 * queues an end-of-stream chunk last. */
static void *line_read(void *arg)
{
    struct line *l = arg;
    struct line_conn *c = l->conn;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        while (!l->dead && (l->used == LINE_RING || l->nslots == LINE_SLOTS))
            pthread_cond_wait(&l->cv, &c->mu);
        size_t at = (l->head + l->used) % LINE_RING, room = LINE_RING - l->used;
        if (room > LINE_RING - at)
            room = LINE_RING - at; /* a chunk never wraps */
        int dead = l->dead;
        pthread_mutex_unlock(&c->mu);
        if (dead)
            break;
        /* [at, at + room) is ours until queued: the writer reads only [head, head + used) */
        ssize_t n = recv(l->from, l->ring + at, room < LINE_CHUNK ? room : LINE_CHUNK, 0);
        if (n < 0 && errno == EINTR)
            continue;
        uint64_t due = now_ns() + delay_ns;
        pthread_mutex_lock(&c->mu);
        l->slot[(l->shead + l->nslots) % LINE_SLOTS] =
            (struct line_slot){ due, n > 0 ? (uint32_t)n : 0 };
        l->nslots++;
        if (n > 0)
            l->used += (size_t)n;
        pthread_cond_signal(&l->cv);
        pthread_mutex_unlock(&c->mu);
        if (n <= 0)
            break;
    }
    line_conn_put(c);
    return NULL;
}

/* Sends each chunk of the ring to @l->to when it is due, until the end-of-stream chunk (then
 * half-closes @l->to) or a failed send (then also stops the reader). */
static void *line_write(void *arg)
{
    struct line *l = arg;
    struct line_conn *c = l->conn;
    int eof = 0, err = 0;
    while (!eof && !err) {
        pthread_mutex_lock(&c->mu);
        while (l->nslots == 0)
            pthread_cond_wait(&l->cv, &c->mu);
        uint64_t due = l->slot[l->shead].due_ns;
        pthread_mutex_unlock(&c->mu);
        sleep_until(due);
        uint64_t now = now_ns();
        /* every chunk due by now and contiguous in the ring goes out in one send */
        pthread_mutex_lock(&c->mu);
        size_t at = l->head, n = 0;
        unsigned k = 0;
        while (k < l->nslots) {
            const struct line_slot *s = &l->slot[(l->shead + k) % LINE_SLOTS];
            if (s->due_ns > now || (n > 0 && at + n == LINE_RING))
                break;
            k++;
            if (s->len == 0) {
                eof = 1;
                break;
            }
            n += s->len;
        }
        pthread_mutex_unlock(&c->mu);
        for (size_t off = 0; off < n;) {
            ssize_t w = send(l->to, l->ring + at + off, n - off, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                err = 1;
                break;
            }
            off += (size_t)w;
        }
        pthread_mutex_lock(&c->mu);
        l->shead = (l->shead + k) % LINE_SLOTS;
        l->nslots -= k;
        l->head = (l->head + n) % LINE_RING;
        l->used -= n;
        l->dead = err;
        pthread_cond_signal(&l->cv);
        pthread_mutex_unlock(&c->mu);
    }
    shutdown(l->to, SHUT_WR);
    if (err)
        shutdown(l->from, SHUT_RD); /* wakes a reader blocked in recv */
    line_conn_put(c);
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

/* A connection's state for sockets @a (accepted) and @b (to the target), or NULL. */
static struct line_conn *line_conn_new(int a, int b)
{
    struct line_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->dir[0].ring = malloc(LINE_RING); /* touched only as bytes flow */
    c->dir[1].ring = malloc(LINE_RING);
    if (!c->dir[0].ring || !c->dir[1].ring) {
        free(c->dir[0].ring);
        free(c->dir[1].ring);
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    c->refs = 4;
    c->fd[0] = a;
    c->fd[1] = b;
    for (int i = 0; i < 2; i++) {
        c->dir[i].from = c->fd[i];
        c->dir[i].to = c->fd[1 - i];
        c->dir[i].conn = c;
        pthread_cond_init(&c->dir[i].cv, NULL);
    }
    return c;
}

static long parse_num(const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return errno || end == s || *end || v < 0 ? -1 : v;
}

int main(int argc, char **argv)
{
    long lport = argc == 4 ? parse_num(argv[1]) : -1, tport = argc == 4 ? parse_num(argv[2]) : -1;
    long us = argc == 4 ? parse_num(argv[3]) : -1;
    if (lport <= 0 || lport > 65535 || tport <= 0 || tport > 65535 || us < 0 || us > 10000000) {
        fprintf(stderr, "usage: delayline LISTEN_PORT TARGET_PORT DELAY_US (0..10000000)\n");
        return 2;
    }
    delay_ns = (uint64_t)us * 1000u;
    signal(SIGPIPE, SIG_IGN);
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); /* wake on time, not 50 us late */
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)lport),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 128)) {
        perror("delayline: listen");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 64u << 10);
    for (;;) {
        int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        if (s < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE)
                continue;
            perror("delayline: accept");
            return 1;
        }
        int t = connect_target((int)tport);
        struct line_conn *c = t < 0 ? NULL : line_conn_new(s, t);
        if (!c) {
            close(s);
            if (t >= 0)
                close(t);
            continue;
        }
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        setsockopt(t, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        pthread_t th;
        for (int i = 0; i < 4; i++)
            if (pthread_create(&th, &at, i < 2 ? line_read : line_write, &c->dir[i % 2])) {
                perror("delayline: thread");
                return 1;
            }
    }
}
