/*
 * server.c: the libmicrohttpd daemon (epoll, a thread pool sized to the cores,
 * suspend/resume for everything that waits; req.c answers each request), the
 * listening socket and TLS, signals and the orderly shutdown. Owns the server's
 * long-lived objects: backend, work queue, cache, object layer, auth, stats.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#if MHD_VERSION < 0x01000100
#error "libmicrohttpd 1.0.1 or newer is needed (MHD_OPTION_CLIENT_DISCIPLINE_LVL): build-aux/mhd.sh"
#endif

#include "acct/fair.h"
#include "acct/jobs.h"
#include "acct/ratelimit.h"
#include "acct/stats.h"
#include "auth.h"
#include "backends/backend.h"
#include "cache/cache.h"
#include "lib/buf.h"
#include "lib/log.h"
#include "lib/s3err.h"
#include "lib/workq.h"
#include "objects/objects.h"
#include "objects/plan.h"
#include "objects/warm.h"
#include "park.h"
#include "peer/cwarm.h"
#include "peer/peer.h"
#include "req_mhd.h"
#include "server.h"

static unsigned server_ncpu(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

static void server_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    log_debug("http: %s", msg);
}

/* Raw paths and query values: we decode them ourselves (SigV4 needs the raw forms). */
static size_t server_no_unescape(void *cls, struct MHD_Connection *c, char *uri)
{
    return strlen(uri);
}

/* ---------------------------------------------------------------------- listening */

static int server_listen_socket(const struct conf *cf, int *fd_out, int *v6, struct errmsg *em)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, cf->listen_host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)cf->listen_port);
        sl = sizeof(*s4);
        *v6 = 0;
    } else if (inet_pton(AF_INET6, cf->listen_host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)cf->listen_port);
        sl = sizeof(*s6);
        *v6 = 1;
    } else {
        errmsg_set(em, "--listen \"%s\": not a numeric IPv4 or IPv6 address", cf->listen);
        return -EINVAL;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        errmsg_set(em, "socket: %s", strerror(errno));
        return -errno;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (*v6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 4096) != 0) {
        int e = errno;
        errmsg_set(em, "cannot listen on %s: %s", cf->listen, strerror(e));
        close(fd);
        return -e;
    }
    *fd_out = fd;
    return 0;
}

/* realpath() of @path, or of its parent plus its last name when @path does not exist yet.
 * 0 or -1. */
static int server_resolve(const char *path, char out[PATH_MAX])
{
    if (realpath(path, out))
        return 0;
    if (errno != ENOENT)
        return -1;
    char parent[PATH_MAX], rp[PATH_MAX];
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    size_t pl = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path);
    if (!*name || !strcmp(name, ".") || !strcmp(name, "..") || pl >= sizeof(parent))
        return -1;
    memcpy(parent, slash ? path : ".", slash ? pl : 1);
    parent[slash ? pl : 1] = '\0';
    if (!realpath(parent, rp))
        return -1;
    size_t rl = strlen(rp), nl = strlen(name);
    int sep = strcmp(rp, "/") != 0;
    if (rl + (size_t)sep + nl >= PATH_MAX)
        return -1;
    memcpy(out, rp, rl);
    if (sep)
        out[rl++] = '/';
    memcpy(out + rl, name, nl + 1);
    return 0;
}

/* Whether the resolved path @in is @dir or below it. */
static int server_path_within(const char *in, const char *dir)
{
    size_t dl = strlen(dir);
    if (!strcmp(dir, "/"))
        return 1;
    return !strncmp(in, dir, dl) && (in[dl] == '\0' || in[dl] == '/');
}

/* A file:// store and the cache must not contain one another: through the S3 API clients
 * could then read and overwrite the index, staged uploads and cached files (store inside the
 * cache), or see the cache as a bucket (cache inside the store). */
static int server_check_overlap(const struct conf *cf, struct errmsg *em)
{
    const char *be = cf->backend;
    if (!be || strncasecmp(be, "file://", 7))
        return 0;
    char cache[PATH_MAX], store[PATH_MAX];
    if (server_resolve(cf->cache_dir, cache) || !realpath(be + 7, store))
        return 0; /* mkdir() or backend_open() names what cannot be opened */
    if (server_path_within(cache, store)) {
        errmsg_set(em, "--cache-dir \"%s\" is inside the backend's directory \"%s\": clients "
                       "could read and overwrite the cache through the S3 API; use a directory "
                       "outside it", cf->cache_dir, be + 7);
        return -EINVAL;
    }
    if (server_path_within(store, cache)) {
        errmsg_set(em, "the backend's directory \"%s\" is inside --cache-dir \"%s\": clients "
                       "could read and overwrite the cache through the S3 API; use a directory "
                       "outside it", be + 7, cf->cache_dir);
        return -EINVAL;
    }
    return 0;
}

static int server_prepare_dirs(struct conf *cf, struct errmsg *em)
{
    int rc = server_check_overlap(cf, em); /* before mkdir: it would make a bucket */
    if (rc)
        return rc;
    if (mkdir(cf->cache_dir, 0755) != 0 && errno != EEXIST) {
        errmsg_set(em, "--cache-dir \"%s\": %s", cf->cache_dir, strerror(errno));
        return -errno;
    }
    if (access(cf->cache_dir, R_OK | W_OK | X_OK) != 0) {
        errmsg_set(em, "--cache-dir \"%s\": %s", cf->cache_dir, strerror(errno));
        return -errno;
    }
    return server_check_overlap(cf, em); /* again, now that symlinks in it resolve */
}

/* Reads a whole small PEM file (certificate or key) into a new NUL-terminated string. */
static int read_pem(const char *path, const char *what, char **out, struct errmsg *em)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        errmsg_set(em, "%s \"%s\": %s", what, path, strerror(errno));
        return -errno;
    }
    struct buf b;
    char chunk[4096];
    size_t n;
    int rc = 0;
    buf_init(&b, 1u << 20);
    while (!rc && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        rc = buf_append(&b, chunk, n);
    fclose(f);
    if (!rc && (!b.p || !strstr(b.p, "-----BEGIN"))) {
        errmsg_set(em, "%s \"%s\": not a PEM file", what, path);
        rc = -EINVAL;
    } else if (rc) {
        errmsg_set(em, "%s \"%s\": %s", what, path, strerror(-rc));
    }
    if (rc) {
        buf_free(&b);
        return rc;
    }
    *out = buf_take(&b);
    return 0;
}

static int server_read_tls(const struct conf *cf, char **cert, char **key, struct errmsg *em)
{
    int have_cert = cf->tls_cert && *cf->tls_cert, have_key = cf->tls_key && *cf->tls_key;
    if (!have_cert && !have_key)
        return 0;
    if (have_cert != have_key) {
        errmsg_set(em, "--tls-cert and --tls-key go together");
        return -EINVAL;
    }
    int rc = read_pem(cf->tls_cert, "--tls-cert", cert, em);
    if (!rc)
        rc = read_pem(cf->tls_key, "--tls-key", key, em);
    return rc;
}

/* Sleeps until no request of @srv is in flight or the monotonic clock reaches @deadline_ns. */
static void wait_inflight(struct server *srv, uint64_t deadline_ns)
{
    while (__atomic_load_n(&srv->inflight, __ATOMIC_RELAXED) > 0 && s3c_mono_ns() < deadline_ns)
        usleep(20 * 1000);
}

/* Opens the long-lived objects in dependency order (dirs, backend, workers, cache, auth, stats,
 * warm-up, object layer, rate limiter, fair share). On failure @em says why and
 * server_release() frees what was made. */
static int server_open(struct server *srv, struct errmsg *em)
{
    const struct conf *cf = srv->cf;
    int rc;
    if ((rc = server_prepare_dirs(srv->cf, em)) ||
        (rc = backend_open(cf, cf->backend, &srv->be, em)))
        return rc;
    unsigned nworkers = cf->workers > 0 ? (unsigned)cf->workers : 4 * server_ncpu() + 4;
    if ((rc = workq_new(nworkers, &srv->wq))) {
        errmsg_set(em, "cannot start worker threads: %s", strerror(-rc));
        return rc;
    }
    /* a few threads for jobs that block until fills on srv->wq land */
    if ((rc = workq_new(SERVER_WAIT_THREADS, &srv->wq_wait))) {
        errmsg_set(em, "cannot start worker threads: %s", strerror(-rc));
        return rc;
    }
    if ((rc = cache_open(cf, srv->be, srv->wq, &srv->cache, em)))
        return rc;
    if ((rc = auth_new(cf, &srv->auth, em)))
        return rc;
    if ((rc = stats_new(&srv->stats)) || (rc = stats_start_ticker(srv->stats))) {
        errmsg_set(em, "cannot start statistics: %s", strerror(-rc));
        return rc;
    }
    stats_set_disk_path(srv->stats, cf->cache_dir);
    if ((rc = park_new(cf->park_warn > 0 ? (uint64_t)cf->park_warn : 0, srv->stats, req_describe,
                       &srv->park))) {
        errmsg_set(em, "cannot start the watch over parked requests: %s", strerror(-rc));
        return rc;
    }
    if (cf->accounting && cf->stall_accounting) {
        if ((rc = jobs_new(&srv->jobs))) {
            errmsg_set(em, "cannot start job accounting: %s", strerror(-rc));
            return rc;
        }
        stats_set_jobs(srv->stats, srv->jobs);
    }
    if ((rc = warm_new(cf, srv->be, srv->cache, srv->wq, &srv->warm))) {
        errmsg_set(em, "cannot start warm-up jobs: %s", strerror(-rc));
        return rc;
    }
    if ((rc = planner_new(cf, srv->cache, &srv->planner))) {
        errmsg_set(em, "cannot start the read plans' prefetches: %s", strerror(-rc));
        return rc;
    }
    if ((rc = objects_new(cf, srv->be, srv->cache, srv->warm, &srv->obj, em)))
        return rc;
    if ((rc = rl_new(&srv->rl))) {
        errmsg_set(em, "cannot start the rate limiter: %s", strerror(-rc));
        return rc;
    }
    if (cf->max_bandwidth && (rc = fair_new(cf->max_bandwidth, &srv->fair))) {
        errmsg_set(em, "cannot start fair sharing: %s", strerror(-rc));
        return rc;
    }
    if ((rc = peer_open(cf, &srv->peer, em)))
        return rc;
    if (srv->peer) {
        struct objects_peer_ops ops;
        peer_objects_ops(srv->peer, &ops);
        objects_set_peer_ops(srv->obj, &ops);
        if ((rc = cwarm_new(srv->peer, srv->warm, srv->wq, &srv->cwarm))) {
            errmsg_set(em, "cannot start cluster warm-ups: %s", strerror(-rc));
            return rc;
        }
        /* while this gateway was down, writes through the others could not reach it */
        cache_set_valid_after(srv->cache, s3c_real_ns());
    }
    return 0;
}

/* After a failed start: frees what server_open() made (no request was served). */
static void server_release(struct server *srv)
{
    cwarm_free(srv->cwarm);
    park_free(srv->park);
    if (srv->stats)
        stats_free(srv->stats);
    jobs_free(srv->jobs); /* after the stats ticker that ticks it */
    rl_free(srv->rl);
    fair_free(srv->fair);
    objects_free(srv->obj); /* its drainers may tell the peers of drains: before peer_close */
    peer_close(srv->peer);
    planner_free(srv->planner);
    warm_free(srv->warm);
    auth_free(srv->auth);
    if (srv->cache)
        cache_close(srv->cache);
    if (srv->wq_wait)
        workq_free(srv->wq_wait);
    if (srv->wq)
        workq_free(srv->wq);
    if (srv->be)
        backend_close(srv->be);
}

/* Starts libmicrohttpd on the listening socket @lfd (taken over). NULL on failure. */
static struct MHD_Daemon *server_start_daemon(struct server *srv, int lfd, int v6,
                                              char *tls_cert, char *tls_key)
{
    const struct conf *cf = srv->cf;
    unsigned nthreads = cf->threads > 0 ? (unsigned)cf->threads : server_ncpu();
    /* libmicrohttpd zeroes a connection's pool for every request: keep it just big enough for
     * the largest header section plus a read buffer. */
    size_t mem = (size_t)cf->max_header_size + 32 * 1024;
    unsigned timeout_s = (unsigned)((cf->idle_timeout + 999) / 1000);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
    struct MHD_OptionItem opts[16];
    size_t no = 0;
#define OPT(o, v, p) (opts[no++] = (struct MHD_OptionItem){(o), (intptr_t)(v), (p)})
    OPT(MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)server_mhd_log, srv); /* first: logs the rest */
    OPT(MHD_OPTION_LISTEN_SOCKET, lfd, NULL);
    OPT(MHD_OPTION_THREAD_POOL_SIZE, nthreads, NULL);
    OPT(MHD_OPTION_CONNECTION_LIMIT, cf->max_connections, NULL);
    OPT(MHD_OPTION_CONNECTION_TIMEOUT, timeout_s, NULL);
    OPT(MHD_OPTION_CONNECTION_MEMORY_LIMIT, mem, NULL);
    OPT(MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)server_no_unescape, NULL);
    OPT(MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)req_completed, srv);
    /* 1: a bare LF ending a chunk-size line, a chunk's data or a header line, and
     * Transfer-Encoding beside Content-Length, are refused (400, connection closed) rather than
     * read as CRLF: a proxy in front that reads them otherwise cannot be desynchronised. */
    OPT(MHD_OPTION_CLIENT_DISCIPLINE_LVL, 1, NULL);
    if (tls_cert) {
        flags |= MHD_USE_TLS;
        OPT(MHD_OPTION_HTTPS_MEM_CERT, 0, tls_cert);
        OPT(MHD_OPTION_HTTPS_MEM_KEY, 0, tls_key);
    }
    OPT(MHD_OPTION_END, 0, NULL);
#undef OPT
    return MHD_start_daemon(flags, 0, NULL, NULL, (MHD_AccessHandlerCallback)req_access, srv,
                            MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
}

/* The start-up log line, and on stdout where to connect and with which key. */
static void server_banner(struct server *srv, int tls, int v6)
{
    const struct conf *cf = srv->cf;
    const char *ak = NULL, *sk = NULL;
    unsigned nthreads = cf->threads > 0 ? (unsigned)cf->threads : server_ncpu();
    unsigned nworkers = workq_threads(srv->wq);
    auth_banner_key(srv->auth, &ak, &sk);
    log_info("s3cached %s serving %s://%s (backend %s, cache %s, %llu bytes, "
             "%u HTTP threads, %u workers)",
             S3C_VERSION, tls ? "https" : "http", cf->listen, cf->backend, cf->cache_dir,
             (unsigned long long)cf->cache_size, nthreads, nworkers);
    char host[80];
    snprintf(host, sizeof(host), "%s%s%s:%d", v6 ? "[" : "", cf->listen_host, v6 ? "]" : "",
             cf->listen_port);
    if (ak && sk) { /* a pair generated just now: shown this once */
        printf("endpoint:    %s://%s\n"
               "access key:  %s\n"
               "secret key:  %s\n"
               "try:         AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s AWS_DEFAULT_REGION=%s "
               "aws --endpoint-url %s://%s s3 ls\n",
               tls ? "https" : "http", host, ak, sk, ak, sk, cf->region,
               tls ? "https" : "http", host);
        fflush(stdout);
    } else if (ak) {
        printf("endpoint:    %s://%s\n"
               "access key:  %s\n"
               "secret key:  in %s/credentials\n",
               tls ? "https" : "http", host, ak, cf->cache_dir);
        fflush(stdout);
    } else if (cf->anonymous) {
        printf("endpoint:    http://%s:%d (anonymous access)\n", cf->listen_host, cf->listen_port);
        fflush(stdout);
    }
}

/* Waits for SIGTERM or SIGINT (in @sigs, blocked); SIGHUP reloads the credentials meanwhile. */
static void server_wait_stop(struct server *srv, const sigset_t *sigs)
{
    for (;;) {
        int sig = 0;
        if (sigwait(sigs, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            struct errmsg hm = {{0}};
            int hr = auth_reload(srv->auth, &hm);
            if (hr)
                log_err("SIGHUP: credentials not reloaded: %s", hm.buf);
            else
                log_info("SIGHUP: credentials reloaded");
            continue;
        }
        log_info("signal %d: stopping (in-flight requests get up to %lld ms)", sig,
                 (long long)srv->cf->shutdown_timeout);
        return;
    }
}

/* Names one request still parked at shutdown (park_each()). */
static int server_name_parked(struct park_entry *e, void *cls)
{
    (void)cls;
    char d[600];
    req_describe(e, d, sizeof(d));
    log_warn("shutdown: request %s still waiting for %s", d,
             park_why_name((enum park_why)atomic_load(&e->why)));
    return 0;
}

/* After the waits of the shutdown, requests still parked would wait for good, and
 * libmicrohttpd cannot stop with a connection suspended: each is named; those waiting on the
 * cache have their wait cancelled and are woken to be answered 503 (or their connection
 * closed); the others (held by a job) get a moment to end. The number still parked then. */
static unsigned server_release_parked(struct server *srv)
{
    struct park_counts pc;
    park_counts(srv->park, 1, &pc);
    if (!pc.parked)
        return 0;
    park_each(srv->park, server_name_parked, NULL);
    unsigned woken = park_each(srv->park, req_release_parked, NULL);
    log_warn("shutdown: %u requests still parked; %u woken to be answered 503", pc.parked, woken);
    uint64_t until = s3c_mono_ns() + 2000000000ull;
    do {
        park_counts(srv->park, 1, &pc);
        if (pc.parked)
            usleep(20 * 1000);
    } while (pc.parked && s3c_mono_ns() < until);
    return pc.parked;
}

/* The orderly stop: no new connections; requests in flight get --shutdown-timeout, those still
 * waiting on the backend or the cache are answered 503; then everything is freed in reverse
 * order. 0, or the number of requests a job still holds (then nothing is freed: the process
 * exits with it, its connections closed). */
static unsigned server_shutdown(struct server *srv)
{
    MHD_socket qfd = MHD_quiesce_daemon(srv->daemon);
    uint64_t deadline = s3c_mono_ns() + (uint64_t)srv->cf->shutdown_timeout * 1000000ull;
    /* Requests being processed or answered (and so their jobs) get until the deadline; idle
     * keep-alive connections and uploads still waiting for their body are closed by
     * MHD_stop_daemon (the client sees a reset and retries; nothing partial is stored). */
    wait_inflight(srv, deadline);
    /* Requests still waiting on the backend (a stalled upstream, a flush, which waits without
     * limit unless asked) or on the cache (a lookup, a fill) are answered 503 now and given a
     * moment to be sent: the daemon must not stop with a connection suspended. Hits and
     * writes go on meanwhile. */
    backend_stop(srv->be);
    objects_flush_abort(srv->obj);
    cache_stop(srv->cache);
    wait_inflight(srv, s3c_mono_ns() + 2000000000ull);
    warm_free(srv->warm); /* cancels jobs; their workers end before the queue stops */
    planner_free(srv->planner); /* each prefetch thread ends its object first */
    srv->planner = NULL;
    workq_free(srv->wq_wait); /* its jobs end as their fills do, and resume their requests */
    srv->wq_wait = NULL;
    unsigned held = server_release_parked(srv);
    if (held) {
        log_err("shutdown: %u requests are still held by a job: the process exits with them "
                "(their connections are closed; what was acknowledged is on disk)", held);
        return held;
    }
    MHD_stop_daemon(srv->daemon);
    /* a write-back upload that outlived the shutdown timeout keeps its drainer, the cache and
     * the backend: left to the exiting process */
    int engine_left = objects_free(srv->obj) != 0;
    rl_free(srv->rl);
    fair_free(srv->fair); /* every connection has completed */
    workq_free(srv->wq); /* background fills finish; nothing resumes connections any more */
    srv->wq = NULL;
    cwarm_free(srv->cwarm); /* after the workers: cluster warm-ups call peers from them */
    srv->cwarm = NULL;
    peer_close(srv->peer);
    srv->peer = NULL;
    if (qfd != MHD_INVALID_SOCKET)
        close(qfd);
    cache_close(srv->cache);
    park_free(srv->park); /* every request was freed */
    srv->park = NULL;
    stats_free(srv->stats);
    jobs_free(srv->jobs); /* after the stats ticker that ticks it */
    auth_free(srv->auth);
    if (!engine_left)
        backend_close(srv->be);
    return 0;
}

int server_run(struct conf *cf, const struct handler *const *handlers)
{
    struct server srv;
    struct errmsg em = {{0}};
    int rc, lfd = -1, v6 = 0;
    char *tls_cert = NULL, *tls_key = NULL;
    memset(&srv, 0, sizeof(srv));
    srv.magic = SERVER_MAGIC;
    srv.cf = cf;
    srv.handlers = handlers;
    srv.start_ns = (uint64_t)s3c_real_ns();

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* every thread started below inherits it */
    /* Connections and the cache's open files share the fd table: use all we may. */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }
    signal(SIGPIPE, SIG_IGN);

    if ((rc = server_open(&srv, &em)) || (rc = server_read_tls(cf, &tls_cert, &tls_key, &em)) ||
        (rc = server_listen_socket(cf, &lfd, &v6, &em)))
        goto fail;
    srv.daemon = server_start_daemon(&srv, lfd, v6, tls_cert, tls_key);
    if (!srv.daemon) {
        errmsg_set(&em, "cannot start the HTTP server on %s%s", cf->listen,
                   tls_cert ? " (check that the TLS key matches the certificate)" : "");
        rc = -EIO;
        goto fail;
    }
    server_banner(&srv, tls_cert != NULL, v6);
    server_wait_stop(&srv, &sigs);
    unsigned held = server_shutdown(&srv);
    free(tls_cert);
    free(tls_key);
    log_info("stopped");
    if (held) { /* threads still use what would be freed: no teardown, no exit handlers */
        fflush(NULL);
        _exit(0);
    }
    return 0;

fail:
    log_err("%s", em.buf[0] ? em.buf : s3c_strerror(rc));
    free(tls_cert);
    free(tls_key);
    if (lfd >= 0)
        close(lfd);
    server_release(&srv);
    return rc ? rc : -EIO;
}
