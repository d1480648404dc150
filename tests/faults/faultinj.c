/*
 * faultinj.c: an LD_PRELOAD shim for `make test-faults`. It makes chosen libc calls (and
 * allocations) of the real, unmodified server fail on their N-th matching call, so the
 * driver (tests/faults/faults.py) can put it through a full disk, unreadable cache files,
 * failing fsyncs, failing allocations and a full LMDB map. It owns no server state.
 *
 * Rules, from $S3C_FAULT (comma-separated) and from the file $S3C_FAULT_CTL (one a line,
 * '#' comments; re-read within ~50 ms of a change, and every load restarts the counters):
 *     FUNC:N:ERRNO[:COUNT[:PATH[:MAXLEN]]]
 *   FUNC   open (open*, openat*, creat, mkostemp*), create (those of them that create a
 *          file: O_CREAT, creat, mkostemp*), write (write, writev), pwrite (pwrite*,
 *          pwritev*), read (read, readv), pread (pread*, preadv*), fsync, fdatasync,
 *          rename (rename*), fallocate (fallocate*, posix_fallocate*), copy_file_range,
 *          sendfile (sendfile*), ftruncate, unlink (unlink*), mkdir (mkdir*),
 *          malloc (malloc, calloc, realloc: no PATH), hmac (OpenSSL's one-shot HMAC(), which
 *          SigV2 calls, and EVP_MAC_init(), which SigV4's lib/digest.c calls: they fail as
 *          when OpenSSL cannot allocate; no PATH)
 *   N      the first matching call that fails: 1 = the next one after the rule was loaded
 *   ERRNO  a name (EIO, ENOSPC, ENOMEM, EDQUOT, ...) or a number
 *   COUNT  how many matching calls fail from N on; 0 = every one (default 1)
 *   PATH   only calls on a file whose path contains this string (fd calls: /proc/self/fd)
 *   MAXLEN write and pwrite (write, pwrite, pwrite64): only calls of at most this many bytes
 *          (an LMDB meta page write is the only index write shorter than a page)
 * A rule may also slow writes down instead of failing them (a cache disk slower than the backend):
 *     slow:RATE[:PATH]
 *   every write, writev, pwrite*, pwritev* and copy_file_range (to a file whose path contains
 *   PATH, when given) first books its bytes on one clock shared by all threads and sleeps until
 *   they have passed at RATE bytes/s (K M G suffixes: powers of 1024), so all such writes
 *   together never go faster than RATE, whether they are O_DIRECT or fill the page cache.
 * or make data flushes slow (a disk whose cache flushes take long, as under other writers'
 * load):
 *     lag:MS[:PATH]
 *   every fdatasync (of a file whose path contains PATH, when given) first sleeps MS
 *   milliseconds (fsync, which the cache calls on directories, is left alone).
 * $S3C_FAULT_LOG: every injected fault is appended there as one line "FUNC #K ERRNO PATH".
 * $S3C_FAULT_MDB_MAPSIZE: bytes; mdb_env_set_mapsize() is capped to it (a real LMDB map full).
 *
 * The shim never allocates on its own paths (raw syscalls, static buffers), so it can sit
 * under malloc itself. Not for sanitizer builds: ASan must be the first preloaded runtime.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum fn {
    FN_OPEN, FN_WRITE, FN_PWRITE, FN_READ, FN_PREAD, FN_FSYNC, FN_FDATASYNC, FN_RENAME,
    FN_FALLOCATE, FN_COPY_FILE_RANGE, FN_SENDFILE, FN_FTRUNCATE, FN_UNLINK, FN_MKDIR,
    FN_MALLOC, FN_CREATE, FN_HMAC, FN_SLOW, FN_LAG, FN_COUNT
};
static const char *const fn_names[FN_COUNT] = {
    "open", "write", "pwrite", "read", "pread", "fsync", "fdatasync", "rename",
    "fallocate", "copy_file_range", "sendfile", "ftruncate", "unlink", "mkdir", "malloc",
    "create", "hmac", "slow", "lag",
};

static const struct { const char *name; int err; } errnos[] = {
    {"EIO", EIO}, {"ENOSPC", ENOSPC}, {"ENOMEM", ENOMEM}, {"EDQUOT", EDQUOT}, {"EROFS", EROFS},
    {"EACCES", EACCES}, {"EPERM", EPERM}, {"EAGAIN", EAGAIN}, {"EINTR", EINTR},
    {"EBADF", EBADF}, {"EFBIG", EFBIG}, {"EMFILE", EMFILE}, {"ENFILE", ENFILE},
    {"EXDEV", EXDEV}, {"ENOTSUP", ENOTSUP}, {"EINVAL", EINVAL}, {"ENOENT", ENOENT},
};

#define MAX_RULES 16
#define PATH_CAP 256

struct rule {
    enum fn fn;
    unsigned long n, count;
    int err;
    char path[PATH_CAP];
    size_t maxlen; /* SIZE_MAX: any length */
    atomic_ulong seen;
    double rate;   /* FN_SLOW: bytes per second */
};

static struct rule rules[MAX_RULES];
static atomic_int nrules;
static atomic_uint fn_mask;           /* bit per FUNC with at least one rule: the fast path */
static atomic_flag load_lock = ATOMIC_FLAG_INIT;
static const char *ctl_path, *log_path;
static struct timespec ctl_mtime;
static ino_t ctl_ino;
static atomic_long ctl_checked_ms;
static int log_fd = -1;
static __thread int in_shim __attribute__((tls_model("initial-exec")));

/* ---- tiny helpers without libc state ----------------------------------------------------- */

static size_t s_len(const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    return n;
}

static const char *find_field(const char *s, char sep, int idx, size_t *len)
{
    for (int i = 0; i < idx; i++) {
        while (*s && *s != sep && *s != '\n')
            s++;
        if (*s != sep)
            return NULL;
        s++;
    }
    const char *e = s;
    while (*e && *e != sep && *e != '\n' && *e != '\r')
        e++;
    *len = (size_t)(e - s);
    return s;
}

static int parse_ulong(const char *s, size_t len, unsigned long *out)
{
    unsigned long v = 0;
    if (!len)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    *out = v;
    return 0;
}

static int parse_errno(const char *s, size_t len)
{
    unsigned long v;
    if (!parse_ulong(s, len, &v))
        return (int)v;
    for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++)
        if (s_len(errnos[i].name) == len && !memcmp(errnos[i].name, s, len))
            return errnos[i].err;
    return -1;
}

static const char *errno_name(int err)
{
    for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++)
        if (errnos[i].err == err)
            return errnos[i].name;
    return "E?";
}

/* "slow:RATE[:PATH]" into @r (the next free rule): RATE in bytes/s with an optional K M G. */
static void parse_slow(struct rule *r, const char *rate, size_t lr, const char *path, size_t lp)
{
    unsigned long v, mul = 1;
    if (lr && (rate[lr - 1] == 'K' || rate[lr - 1] == 'M' || rate[lr - 1] == 'G')) {
        mul = rate[lr - 1] == 'K' ? 1024ul : rate[lr - 1] == 'M' ? 1024ul * 1024 : 1024ul * 1024 * 1024;
        lr--;
    }
    if (parse_ulong(rate, lr, &v) || v == 0)
        return;
    r->fn = FN_SLOW;
    r->rate = (double)v * (double)mul;
    r->n = 1;
    r->count = 0;
    r->err = 0;
    r->maxlen = SIZE_MAX;
    r->path[0] = '\0';
    if (path && lp) {
        if (lp >= PATH_CAP)
            lp = PATH_CAP - 1;
        memcpy(r->path, path, lp);
        r->path[lp] = '\0';
    }
    atomic_store(&r->seen, 0);
    atomic_store(&nrules, atomic_load(&nrules) + 1);
}

/* "lag:MS[:PATH]" into @r (the next free rule): a "slow" rule whose rate field holds MS. */
static void parse_lag(struct rule *r, const char *ms, size_t lm, const char *path, size_t lp)
{
    unsigned long v;
    if (parse_ulong(ms, lm, &v) || v == 0)
        return;
    parse_slow(r, ms, lm, path, lp); /* the same fields */
    r->fn = FN_LAG;
    r->rate = (double)v;
}

/* Parses one rule "FUNC:N:ERRNO[:COUNT[:PATH[:MAXLEN]]]" of @line (ending at ',' '\n' or NUL). */
static void parse_rule(const char *line, char sep_rules)
{
    size_t l0 = 0, l1 = 0, l2 = 0, l3 = 0, l4 = 0, l5 = 0;
    (void)sep_rules;
    const char *f = find_field(line, ':', 0, &l0);
    const char *n = find_field(line, ':', 1, &l1);
    const char *e = find_field(line, ':', 2, &l2);
    const char *c = find_field(line, ':', 3, &l3);
    const char *p = find_field(line, ':', 4, &l4);
    const char *m = find_field(line, ':', 5, &l5);
    int idx = atomic_load(&nrules);
    if (f && n && l0 == 4 && !memcmp(f, "slow", 4) && idx < MAX_RULES) {
        parse_slow(&rules[idx], n, l1, e, l2); /* slow:RATE[:PATH]: fields 1 and 2 */
        return;
    }
    if (f && n && l0 == 3 && !memcmp(f, "lag", 3) && idx < MAX_RULES) {
        parse_lag(&rules[idx], n, l1, e, l2); /* lag:MS[:PATH] */
        return;
    }
    if (!f || !n || !e || idx >= MAX_RULES)
        return;
    struct rule *r = &rules[idx];
    int fn = -1;
    for (int i = 0; i < FN_COUNT; i++)
        if (s_len(fn_names[i]) == l0 && !memcmp(fn_names[i], f, l0))
            fn = i;
    unsigned long nn, cc = 1;
    int err = parse_errno(e, l2);
    if (fn < 0 || parse_ulong(n, l1, &nn) || nn == 0 || err <= 0)
        return;
    if (c && l3 && parse_ulong(c, l3, &cc))
        return;
    unsigned long ml = (unsigned long)SIZE_MAX;
    if (m && l5 && parse_ulong(m, l5, &ml))
        return;
    r->maxlen = (size_t)ml;
    r->fn = (enum fn)fn;
    r->n = nn;
    r->count = cc;
    r->err = err;
    r->path[0] = '\0';
    if (p && l4) {
        if (l4 >= PATH_CAP)
            l4 = PATH_CAP - 1;
        memcpy(r->path, p, l4);
        r->path[l4] = '\0';
    }
    atomic_store(&r->seen, 0);
    atomic_store(&nrules, idx + 1);
}

/* Splits @text into rules at @sep and newlines. */
static void parse_rules(const char *text, char sep)
{
    const char *s = text;
    while (*s) {
        while (*s == sep || *s == '\n' || *s == '\r' || *s == ' ' || *s == '\t')
            s++;
        if (!*s)
            break;
        if (*s != '#') {
            /* one rule: up to the next separator */
            char one[PATH_CAP + 64];
            size_t k = 0;
            while (s[k] && s[k] != sep && s[k] != '\n' && k < sizeof(one) - 1) {
                one[k] = s[k];
                k++;
            }
            one[k] = '\0';
            parse_rule(one, sep);
        }
        while (*s && *s != sep && *s != '\n')
            s++;
    }
}

static void recompute_mask(void)
{
    unsigned m = 0;
    int n = atomic_load(&nrules);
    for (int i = 0; i < n; i++)
        m |= 1u << rules[i].fn;
    atomic_store(&fn_mask, m);
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void log_write(const char *line, size_t len)
{
    if (log_fd < 0 && log_path)
        log_fd = (int)syscall(SYS_openat, AT_FDCWD, log_path,
                              O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd >= 0)
        syscall(SYS_write, log_fd, line, len);
}

/* "rules N": the driver waits for this line to know a new rule set is in force. */
static void log_loaded(void)
{
    char line[16] = "rules ";
    int n = atomic_load(&nrules);
    size_t o = 6;
    if (n >= 10)
        line[o++] = (char)('0' + n / 10);
    line[o++] = (char)('0' + n % 10);
    line[o++] = '\n';
    log_write(line, o);
}

/* Re-reads $S3C_FAULT_CTL when it changed (inode or mtime; checked at most every 50 ms). */
static void maybe_reload(void)
{
    if (!ctl_path)
        return;
    long t = now_ms(), last = atomic_load(&ctl_checked_ms);
    if (t - last < 50 || !atomic_compare_exchange_strong(&ctl_checked_ms, &last, t))
        return;
    struct stat st;
    if (syscall(SYS_newfstatat, AT_FDCWD, ctl_path, &st, 0) != 0)
        return;
    if (st.st_ino == ctl_ino && st.st_mtim.tv_sec == ctl_mtime.tv_sec &&
        st.st_mtim.tv_nsec == ctl_mtime.tv_nsec)
        return;
    if (atomic_flag_test_and_set(&load_lock))
        return;
    static char text[8192];
    long fd = syscall(SYS_openat, AT_FDCWD, ctl_path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        long n = syscall(SYS_read, fd, text, sizeof(text) - 1);
        syscall(SYS_close, fd);
        if (n >= 0) {
            text[n] = '\0';
            ctl_mtime = st.st_mtim;
            ctl_ino = st.st_ino;
            atomic_store(&fn_mask, 0); /* calls in flight see no rule while we rewrite */
            atomic_store(&nrules, 0);
            const char *env = getenv("S3C_FAULT");
            if (env)
                parse_rules(env, ',');
            parse_rules(text, ',');
            recompute_mask();
            log_loaded();
        }
    }
    atomic_flag_clear(&load_lock);
}

static void log_fault(const struct rule *r, unsigned long k, const char *path)
{
    char line[PATH_CAP * 2 + 96], num[24];
    size_t o = 0;
#define PUT(s)                                                                                    \
    do {                                                                                          \
        const char *s_ = (s);                                                                     \
        size_t l_ = s_len(s_);                                                                    \
        if (o + l_ >= sizeof(line) - 2)                                                           \
            l_ = sizeof(line) - 2 - o;                                                            \
        memcpy(line + o, s_, l_);                                                                 \
        o += l_;                                                                                  \
    } while (0)
    size_t d = sizeof(num) - 1;
    num[d] = '\0';
    do
        num[--d] = (char)('0' + k % 10);
    while ((k /= 10) && d);
    PUT(fn_names[r->fn]);
    PUT(" #");
    PUT(num + d);
    PUT(" ");
    PUT(errno_name(r->err));
    PUT(" ");
    PUT(path ? path : "-");
#undef PUT
    line[o++] = '\n';
    log_write(line, o);
}

static const char *fd_path(int fd, char *buf, size_t cap)
{
    char link[32] = "/proc/self/fd/";
    size_t o = s_len(link);
    char num[16];
    size_t d = sizeof(num);
    unsigned v = fd < 0 ? 0 : (unsigned)fd;
    do
        num[--d] = (char)('0' + v % 10);
    while ((v /= 10) && d);
    memcpy(link + o, num + d, sizeof(num) - d);
    link[o + sizeof(num) - d] = '\0';
    long n = syscall(SYS_readlinkat, AT_FDCWD, link, buf, cap - 1);
    if (n < 0)
        return NULL;
    buf[n] = '\0';
    return buf;
}

/* 0 to let the call through, or the errno to fail it with. @path or @fd names the file; @len is
 * the length of a write (SIZE_MAX for other calls). */
static int should_fail_len(enum fn fn, const char *path, int fd, size_t len)
{
    if (in_shim)
        return 0;
    in_shim = 1;
    maybe_reload();
    int err = 0;
    if (!(atomic_load(&fn_mask) & (1u << fn)))
        goto out;
    char pbuf[PATH_CAP * 2];
    const char *p = path;
    int resolved = path != NULL;
    int n = atomic_load(&nrules);
    for (int i = 0; i < n && !err; i++) {
        struct rule *r = &rules[i];
        if (r->fn != fn || len > r->maxlen)
            continue;
        if (r->path[0]) {
            if (!resolved) {
                p = fd_path(fd, pbuf, sizeof(pbuf));
                resolved = 1;
            }
            if (!p || !strstr(p, r->path))
                continue;
        }
        unsigned long k = atomic_fetch_add(&r->seen, 1) + 1;
        if (k >= r->n && (r->count == 0 || k < r->n + r->count)) {
            err = r->err;
            if (!resolved && fd >= 0) {
                p = fd_path(fd, pbuf, sizeof(pbuf));
                resolved = 1;
            }
            log_fault(r, k, p);
        }
    }
out:
    in_shim = 0;
    return err;
}

static int should_fail(enum fn fn, const char *path, int fd)
{
    return should_fail_len(fn, path, fd, SIZE_MAX);
}

static _Atomic uint64_t slow_next_ns; /* when the slowed "disk" is free again */
#define S3C_SLOW_BURST_NS 10000000u

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The rate of the first rule of @fn (FN_SLOW, FN_LAG) whose path the file of @fd matches, or
 * 0 when none does. */
static double rule_rate(enum fn fn, int fd)
{
    char pbuf[PATH_CAP * 2];
    const char *p = NULL;
    int resolved = 0;
    int n = atomic_load(&nrules);
    for (int i = 0; i < n; i++) {
        struct rule *r = &rules[i];
        if (r->fn != fn)
            continue;
        if (r->path[0]) {
            if (!resolved) {
                p = fd_path(fd, pbuf, sizeof(pbuf));
                resolved = 1;
            }
            if (!p || !strstr(p, r->path))
                continue;
        }
        return r->rate;
    }
    return 0;
}

/* A write of @len bytes to @fd: under a slow rule matching its file, books the bytes on the
 * shared clock and sleeps until they have passed (see the header). */
static void slow_down(int fd, size_t len)
{
    if (in_shim || !(atomic_load(&fn_mask) & (1u << FN_SLOW)) || !len || len == SIZE_MAX)
        return;
    in_shim = 1;
    double rate = rule_rate(FN_SLOW, fd);
    if (rate > 0) {
        /* A token bucket with a 10 ms burst: a sleep that overshoots (timer slack, a busy
         * machine) is made up by the next calls, so the rate holds for small writes too. */
        uint64_t now = mono_ns(), cost = (uint64_t)((double)len * 1e9 / rate);
        uint64_t floor = now - S3C_SLOW_BURST_NS, old = atomic_load(&slow_next_ns), until;
        do
            until = (old > floor ? old : floor) + cost;
        while (!atomic_compare_exchange_weak(&slow_next_ns, &old, until));
        if (until > now) {
            uint64_t w = until - now;
            struct timespec ts = { (time_t)(w / 1000000000u), (long)(w % 1000000000u) };
            while (syscall(SYS_nanosleep, &ts, &ts) != 0 && errno == EINTR)
                ;
        }
    }
    in_shim = 0;
}

static size_t iov_len(const struct iovec *iov, int cnt)
{
    size_t n = 0;
    for (int i = 0; i < cnt; i++)
        n += iov[i].iov_len;
    return n;
}

__attribute__((constructor)) static void faultinj_init(void)
{
    in_shim = 1;
    ctl_path = getenv("S3C_FAULT_CTL");
    log_path = getenv("S3C_FAULT_LOG");
    const char *env = getenv("S3C_FAULT");
    if (env)
        parse_rules(env, ',');
    recompute_mask();
    in_shim = 0;
}

#define REAL(ret, name, ...)                                                                      \
    static ret (*real_##name)(__VA_ARGS__);                                                       \
    if (!real_##name)                                                                             \
        real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name)

#define FAIL_WITH(e, value)                                                                       \
    do {                                                                                          \
        errno = (e);                                                                              \
        return (value);                                                                           \
    } while (0)

/* ---- allocations ----------------------------------------------------------------------------- */

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

void *malloc(size_t n)
{
    int e = should_fail(FN_MALLOC, NULL, -1);
    if (e)
        FAIL_WITH(e, NULL);
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    int e = should_fail(FN_MALLOC, NULL, -1);
    if (e)
        FAIL_WITH(e, NULL);
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    if (n) {
        int e = should_fail(FN_MALLOC, NULL, -1);
        if (e)
            FAIL_WITH(e, NULL);
    }
    return __libc_realloc(p, n);
}

/* ---- opening --------------------------------------------------------------------------------- */

static mode_t va_mode(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = va_mode(flags, ap);
    va_end(ap);
    REAL(int, open, const char *, int, ...);
    int e = should_fail(FN_OPEN, path, -1);
    if (!e && (flags & O_CREAT))
        e = should_fail(FN_CREATE, path, -1);
    if (e)
        FAIL_WITH(e, -1);
    return real_open(path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = va_mode(flags, ap);
    va_end(ap);
    REAL(int, open64, const char *, int, ...);
    int e = should_fail(FN_OPEN, path, -1);
    if (!e && (flags & O_CREAT))
        e = should_fail(FN_CREATE, path, -1);
    if (e)
        FAIL_WITH(e, -1);
    return real_open64(path, flags, mode);
}

int openat(int dfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = va_mode(flags, ap);
    va_end(ap);
    REAL(int, openat, int, const char *, int, ...);
    int e = should_fail(FN_OPEN, path, -1);
    if (!e && (flags & O_CREAT))
        e = should_fail(FN_CREATE, path, -1);
    if (e)
        FAIL_WITH(e, -1);
    return real_openat(dfd, path, flags, mode);
}

int openat64(int dfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = va_mode(flags, ap);
    va_end(ap);
    REAL(int, openat64, int, const char *, int, ...);
    int e = should_fail(FN_OPEN, path, -1);
    if (!e && (flags & O_CREAT))
        e = should_fail(FN_CREATE, path, -1);
    if (e)
        FAIL_WITH(e, -1);
    return real_openat64(dfd, path, flags, mode);
}

int __open_2(const char *path, int flags)
{
    REAL(int, __open_2, const char *, int);
    int e = should_fail(FN_OPEN, path, -1);
    if (e)
        FAIL_WITH(e, -1);
    return real___open_2(path, flags);
}

int __open64_2(const char *path, int flags)
{
    REAL(int, __open64_2, const char *, int);
    int e = should_fail(FN_OPEN, path, -1);
    if (e)
        FAIL_WITH(e, -1);
    return real___open64_2(path, flags);
}

int creat(const char *path, mode_t mode)
{
    REAL(int, creat, const char *, mode_t);
    int e = should_fail(FN_OPEN, path, -1);
    if (!e)
        e = should_fail(FN_CREATE, path, -1);
    if (e)
        FAIL_WITH(e, -1);
    return real_creat(path, mode);
}

int mkostemp(char *tmpl, int flags)
{
    REAL(int, mkostemp, char *, int);
    int e = should_fail(FN_OPEN, tmpl, -1);
    if (!e)
        e = should_fail(FN_CREATE, tmpl, -1);
    if (e)
        FAIL_WITH(e, -1);
    return real_mkostemp(tmpl, flags);
}

int mkostemp64(char *tmpl, int flags)
{
    REAL(int, mkostemp64, char *, int);
    int e = should_fail(FN_OPEN, tmpl, -1);
    if (!e)
        e = should_fail(FN_CREATE, tmpl, -1);
    if (e)
        FAIL_WITH(e, -1);
    return real_mkostemp64(tmpl, flags);
}

/* ---- data ------------------------------------------------------------------------------------ */

ssize_t write(int fd, const void *buf, size_t n)
{
    REAL(ssize_t, write, int, const void *, size_t);
    int e = should_fail_len(FN_WRITE, NULL, fd, n);
    if (e)
        FAIL_WITH(e, -1);
    slow_down(fd, n);
    return real_write(fd, buf, n);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    REAL(ssize_t, writev, int, const struct iovec *, int);
    int e = should_fail(FN_WRITE, NULL, fd);
    if (e)
        FAIL_WITH(e, -1);
    slow_down(fd, iov_len(iov, cnt));
    return real_writev(fd, iov, cnt);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    REAL(ssize_t, pwrite, int, const void *, size_t, off_t);
    int e = should_fail_len(FN_PWRITE, NULL, fd, n);
    if (e)
        FAIL_WITH(e, -1);
    slow_down(fd, n);
    return real_pwrite(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    REAL(ssize_t, pwrite64, int, const void *, size_t, off_t);
    int e = should_fail_len(FN_PWRITE, NULL, fd, n);
    if (e)
        FAIL_WITH(e, -1);
    slow_down(fd, n);
    return real_pwrite64(fd, buf, n, off);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    REAL(ssize_t, pwritev, int, const struct iovec *, int, off_t);
    int e = should_fail(FN_PWRITE, NULL, fd);
    if (e)
        FAIL_WITH(e, -1);
    slow_down(fd, iov_len(iov, cnt));
    return real_pwritev(fd, iov, cnt, off);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    REAL(ssize_t, pwritev64, int, const struct iovec *, int, off_t);
    int e = should_fail(FN_PWRITE, NULL, fd);
    if (e)
        FAIL_WITH(e, -1);
    slow_down(fd, iov_len(iov, cnt));
    return real_pwritev64(fd, iov, cnt, off);
}

ssize_t read(int fd, void *buf, size_t n)
{
    REAL(ssize_t, read, int, void *, size_t);
    int e = should_fail(FN_READ, NULL, fd);
    if (e)
        FAIL_WITH(e, -1);
    return real_read(fd, buf, n);
}

ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
    REAL(ssize_t, readv, int, const struct iovec *, int);
    int e = should_fail(FN_READ, NULL, fd);
    if (e)
        FAIL_WITH(e, -1);
    return real_readv(fd, iov, cnt);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    REAL(ssize_t, pread, int, void *, size_t, off_t);
    int e = should_fail(FN_PREAD, NULL, fd);
    if (e)
        FAIL_WITH(e, -1);
    return real_pread(fd, buf, n, off);
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
    REAL(ssize_t, pread64, int, void *, size_t, off_t);
    int e = should_fail(FN_PREAD, NULL, fd);
    if (e)
        FAIL_WITH(e, -1);
    return real_pread64(fd, buf, n, off);
}

ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off)
{
    REAL(ssize_t, preadv, int, const struct iovec *, int, off_t);
    int e = should_fail(FN_PREAD, NULL, fd);
    if (e)
        FAIL_WITH(e, -1);
    return real_preadv(fd, iov, cnt, off);
}

ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    REAL(ssize_t, preadv64, int, const struct iovec *, int, off_t);
    int e = should_fail(FN_PREAD, NULL, fd);
    if (e)
        FAIL_WITH(e, -1);
    return real_preadv64(fd, iov, cnt, off);
}

ssize_t sendfile(int out, int in, off_t *off, size_t n)
{
    REAL(ssize_t, sendfile, int, int, off_t *, size_t);
    int e = should_fail(FN_SENDFILE, NULL, in);
    if (e)
        FAIL_WITH(e, -1);
    return real_sendfile(out, in, off, n);
}

ssize_t sendfile64(int out, int in, off_t *off, size_t n)
{
    REAL(ssize_t, sendfile64, int, int, off_t *, size_t);
    int e = should_fail(FN_SENDFILE, NULL, in);
    if (e)
        FAIL_WITH(e, -1);
    return real_sendfile64(out, in, off, n);
}

ssize_t copy_file_range(int in, off_t *ino, int out, off_t *outo, size_t n, unsigned flags)
{
    REAL(ssize_t, copy_file_range, int, off_t *, int, off_t *, size_t, unsigned);
    int e = should_fail(FN_COPY_FILE_RANGE, NULL, out);
    if (e)
        FAIL_WITH(e, -1);
    slow_down(out, n);
    return real_copy_file_range(in, ino, out, outo, n, flags);
}

/* ---- durability and space -------------------------------------------------------------------- */

/* A flush of @fd: under a lag rule matching its file, sleeps its milliseconds first. */
static void lag_flush(int fd)
{
    if (in_shim || !(atomic_load(&fn_mask) & (1u << FN_LAG)))
        return;
    in_shim = 1;
    double ms = rule_rate(FN_LAG, fd);
    if (ms > 0) {
        uint64_t w = (uint64_t)ms * 1000000u;
        struct timespec ts = { (time_t)(w / 1000000000u), (long)(w % 1000000000u) };
        while (syscall(SYS_nanosleep, &ts, &ts) != 0 && errno == EINTR)
            ;
    }
    in_shim = 0;
}

int fsync(int fd)
{
    REAL(int, fsync, int);
    int e = should_fail(FN_FSYNC, NULL, fd);
    if (e)
        FAIL_WITH(e, -1);
    return real_fsync(fd);
}

int fdatasync(int fd)
{
    REAL(int, fdatasync, int);
    lag_flush(fd);
    int e = should_fail(FN_FDATASYNC, NULL, fd);
    if (e)
        FAIL_WITH(e, -1);
    return real_fdatasync(fd);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
    REAL(int, fallocate, int, int, off_t, off_t);
    int e = should_fail(FN_FALLOCATE, NULL, fd);
    if (e)
        FAIL_WITH(e, -1);
    return real_fallocate(fd, mode, off, len);
}

int fallocate64(int fd, int mode, off_t off, off_t len)
{
    REAL(int, fallocate64, int, int, off_t, off_t);
    int e = should_fail(FN_FALLOCATE, NULL, fd);
    if (e)
        FAIL_WITH(e, -1);
    return real_fallocate64(fd, mode, off, len);
}

int posix_fallocate(int fd, off_t off, off_t len)
{
    REAL(int, posix_fallocate, int, off_t, off_t);
    int e = should_fail(FN_FALLOCATE, NULL, fd);
    if (e)
        return e; /* posix_fallocate returns the error number */
    return real_posix_fallocate(fd, off, len);
}

int posix_fallocate64(int fd, off_t off, off_t len)
{
    REAL(int, posix_fallocate64, int, off_t, off_t);
    int e = should_fail(FN_FALLOCATE, NULL, fd);
    if (e)
        return e;
    return real_posix_fallocate64(fd, off, len);
}

int ftruncate(int fd, off_t len)
{
    REAL(int, ftruncate, int, off_t);
    int e = should_fail(FN_FTRUNCATE, NULL, fd);
    if (e)
        FAIL_WITH(e, -1);
    return real_ftruncate(fd, len);
}

int ftruncate64(int fd, off_t len)
{
    REAL(int, ftruncate64, int, off_t);
    int e = should_fail(FN_FTRUNCATE, NULL, fd);
    if (e)
        FAIL_WITH(e, -1);
    return real_ftruncate64(fd, len);
}

/* ---- names ----------------------------------------------------------------------------------- */

int rename(const char *from, const char *to)
{
    REAL(int, rename, const char *, const char *);
    int e = should_fail(FN_RENAME, to, -1);
    if (e)
        FAIL_WITH(e, -1);
    return real_rename(from, to);
}

int renameat(int fd1, const char *from, int fd2, const char *to)
{
    REAL(int, renameat, int, const char *, int, const char *);
    int e = should_fail(FN_RENAME, to, -1);
    if (e)
        FAIL_WITH(e, -1);
    return real_renameat(fd1, from, fd2, to);
}

int renameat2(int fd1, const char *from, int fd2, const char *to, unsigned flags)
{
    REAL(int, renameat2, int, const char *, int, const char *, unsigned);
    int e = should_fail(FN_RENAME, to, -1);
    if (e)
        FAIL_WITH(e, -1);
    return real_renameat2(fd1, from, fd2, to, flags);
}

int unlink(const char *path)
{
    REAL(int, unlink, const char *);
    int e = should_fail(FN_UNLINK, path, -1);
    if (e)
        FAIL_WITH(e, -1);
    return real_unlink(path);
}

int unlinkat(int dfd, const char *path, int flags)
{
    REAL(int, unlinkat, int, const char *, int);
    int e = should_fail(FN_UNLINK, path, -1);
    if (e)
        FAIL_WITH(e, -1);
    return real_unlinkat(dfd, path, flags);
}

int mkdir(const char *path, mode_t mode)
{
    REAL(int, mkdir, const char *, mode_t);
    int e = should_fail(FN_MKDIR, path, -1);
    if (e)
        FAIL_WITH(e, -1);
    return real_mkdir(path, mode);
}

int mkdirat(int dfd, const char *path, mode_t mode)
{
    REAL(int, mkdirat, int, const char *, mode_t);
    int e = should_fail(FN_MKDIR, path, -1);
    if (e)
        FAIL_WITH(e, -1);
    return real_mkdirat(dfd, path, mode);
}

/* ---- crypto ---------------------------------------------------------------------------------- */

/* OpenSSL's HMAC() (declared here without its headers: the ABI is what matters). */
unsigned char *HMAC(const void *md, const void *key, int key_len, const unsigned char *d,
                    size_t n, unsigned char *out, unsigned int *out_len)
{
    REAL(unsigned char *, HMAC, const void *, const void *, int, const unsigned char *, size_t,
         unsigned char *, unsigned int *);
    int e = should_fail(FN_HMAC, NULL, -1);
    if (e || !real_HMAC) {
        if (out_len)
            *out_len = 0;
        FAIL_WITH(e ? e : ENOSYS, NULL);
    }
    return real_HMAC(md, key, key_len, d, n, out, out_len);
}

/* OpenSSL's EVP_MAC_init(): 0 is its failure. */
int EVP_MAC_init(void *ctx, const unsigned char *key, size_t keylen, const void *params)
{
    REAL(int, EVP_MAC_init, void *, const unsigned char *, size_t, const void *);
    int e = should_fail(FN_HMAC, NULL, -1);
    if (e || !real_EVP_MAC_init)
        FAIL_WITH(e ? e : ENOSYS, 0);
    return real_EVP_MAC_init(ctx, key, keylen, params);
}

/* ---- LMDB ------------------------------------------------------------------------------------ */

struct MDB_env;
int mdb_env_set_mapsize(struct MDB_env *env, size_t size)
{
    REAL(int, mdb_env_set_mapsize, struct MDB_env *, size_t);
    const char *cap = getenv("S3C_FAULT_MDB_MAPSIZE");
    unsigned long c;
    if (cap && !parse_ulong(cap, s_len(cap), &c) && c && size > c)
        size = c;
    return real_mdb_env_set_mapsize(env, size);
}
