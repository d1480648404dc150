/*
 * fair.h: fair sharing of the gateway's download bandwidth (--max-bandwidth) among the
 * clients that are downloading. A client is what /_/stats calls one: an access key from one
 * remote address. Every response body being sent is registered with its socket; a ticker
 * (FAIR_TICK_MS) measures what each client's sockets took (TCP_INFO), and once the gateway as
 * a whole takes FAIR_SATURATED of its capacity it computes the max-min fair level L (clients
 * that take less than their share keep what they take, the others split the rest equally) and
 * sets each socket's kernel pacing rate (SO_MAX_PACING_RATE) to L / (that client's sockets).
 * The kernel paces sendfile and callback responses alike, so hits keep zero-copy, and nothing
 * here sleeps, polls or touches libmicrohttpd. Below saturation no socket is paced and a
 * response costs two short critical sections, no system call.
 *
 *   fair_conn_start()   a response body is queued (MHD thread): join the client's set
 *   fair_tick()         every FAIR_TICK_MS (own thread): measure, re-level, (un)pace
 *   fair_conn_end()     the request completed (MHD thread, before the socket is closed)
 */
#ifndef S3C_FAIR_H
#define S3C_FAIR_H

#include <stddef.h>
#include <stdint.h>

#define FAIR_TICK_MS 100
#define FAIR_MIN_CONN_BPS (64u * 1024) /* the slowest a socket is ever paced */
#define FAIR_GREEDY 0.8     /* took >= this share of the level: wants more (unknown demand) */
#define FAIR_SATURATED 0.9  /* pacing starts when the gateway takes this share of capacity... */
#define FAIR_RELAXED 0.7    /* ...and stops when it takes less than this share */
#define FAIR_RELAX_ROUNDS 5 /* ...for this many rounds in a row */
#define FAIR_UNBOUNDED 1e30 /* a demand the level must cap */
#define FAIR_UNPACED UINT64_MAX /* fair_io.pace(): no limit */

struct fair;
struct fair_client;

/* One registered response; embedded in struct req, zeroed with it. */
struct fair_conn {
    struct fair_conn *next, *prev; /* the client's list */
    struct fair_client *cl;        /* NULL: not registered */
    int fd;
    int sampled;                   /* base is a real sample */
    uint64_t base;                 /* bytes written to the socket at the last sample */
    uint64_t counted;              /* bytes of this response charged by the rounds so far */
    uint64_t rate;                 /* pacing set on the socket, bytes/s (0 = none) */
    uint64_t held_ns;              /* rounds it spent paced while its client was held to the
                                    * level (stall by fair share; read after fair_conn_end) */
};

/* How sockets are measured and paced; the default is TCP_INFO and SO_MAX_PACING_RATE. Tests
 * plug in a simulated network. */
struct fair_io {
    /* Bytes written to @fd so far (0 when unknown); *@queued: how many of them are not yet
     * acknowledged. */
    uint64_t (*written)(void *cls, int fd, uint64_t *queued);
    void (*pace)(void *cls, int fd, uint64_t bps);    /* cap @fd's rate, or FAIR_UNPACED */
    void *cls;
};

/* A fair share of @capacity_bps (> 0), with a thread calling fair_tick() every FAIR_TICK_MS.
 * 0 or -errno. */
int fair_new(uint64_t capacity_bps, struct fair **out);
/* Without a thread and with @io (NULL: the real sockets): the caller calls fair_tick(). */
int fair_new_manual(uint64_t capacity_bps, const struct fair_io *io, struct fair **out);
/* Stops the thread and frees everything; no fair_conn may be used afterwards (libmicrohttpd
 * has stopped: every request completed). Accepts NULL. */
void fair_free(struct fair *f);

/* Registers @fc (zeroed, or ended) for the socket @fd of client (@key, @addr); while the
 * gateway is saturated, paces it at the client's share at once (one setsockopt). */
void fair_conn_start(struct fair *f, struct fair_conn *fc, int fd, const char *key,
                     const char *addr);
/* Unregisters @fc (a no-op when it is not registered; @f may be NULL) and charges its client
 * the @sent body bytes the rounds have not counted yet. After it returns, @fd is never touched
 * again by @f. While saturated, the bytes still queued in the socket drain at its pacing rate
 * after the request completed: until then the socket still counts among the client's
 * downloads (a "tail"), so that its others are not sped up meanwhile. */
void fair_conn_end(struct fair *f, struct fair_conn *fc, uint64_t sent);

/* One round at monotonic time @now_ns: measure every client since the last round, decide
 * whether the gateway is saturated, compute the level, (un)pace every registered socket. */
void fair_tick(struct fair *f, uint64_t now_ns);
/* The level of the last round (bytes/s one client may take), the clients it counted, and
 * whether sockets are being paced. */
uint64_t fair_level(struct fair *f, unsigned *active_clients, int *saturated);

/* What /_/stats and /_/metrics show of the fair share: a snapshot of the last round. */
struct fair_stats {
    uint64_t capacity_bps;     /* --max-bandwidth; 0: fair sharing is off (all below are 0) */
    uint64_t level_bps;        /* the level: what one client may take, bytes/s */
    uint64_t rate_bps;         /* what all clients took in the last round, bytes/s */
    uint64_t active_clients;   /* clients counted by the last round */
    uint64_t responses;        /* response bodies registered now (being sent) */
    uint64_t paced_responses;  /* of those, how many have a pacing rate on their socket */
    int saturated;             /* sockets are being paced */
};
/* Fills *@out under the fair lock (safe from any thread; one pass over the client table).
 * @f NULL (no --max-bandwidth): all zeros. */
void fair_get_stats(struct fair *f, struct fair_stats *out);

/* The max-min fair level of @capacity among @n demands (bytes/s; FAIR_UNBOUNDED = takes
 * whatever it gets): when the demands exceed @capacity, the L with sum(min(d, L)) == capacity;
 * otherwise every demand is met and L = max(d) + the spare, so any one client may grow into
 * it. @n == 0 gives @capacity. Reorders @demand. */
double fair_waterfill(double capacity, double *demand, size_t n);

#endif
