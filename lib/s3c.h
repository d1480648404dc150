/*
 * s3c.h: small things every module of s3cached uses: array/unused helpers,
 * always-on assertions, magic-number object checks and the error-detail
 * buffer. Nothing here allocates or logs.
 */
#ifndef S3C_H
#define S3C_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <stdarg.h>

#define S3C_VERSION "0.1.0"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define UNUSED(x) ((void)(x))
#define S3C_MIN(a, b) ((a) < (b) ? (a) : (b))
#define S3C_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Invariant checks: a false assertion is a bug. They ignore NDEBUG. Never assert on
 * anything that came from the network, the disk, the config or the backend. */
void s3c_assert_fail(const char *expr, const char *file, int line, const char *func)
    __attribute__((noreturn));
#define S3C_ASSERT(e) ((e) ? (void)0 : s3c_assert_fail(#e, __FILE__, __LINE__, __func__))
#define AN(x) S3C_ASSERT((x) != 0)
#define AZ(x) S3C_ASSERT((x) == 0)

/* Long-lived structs that pass through void * carry a magic number first. */
#define CHECK_OBJ_NOTNULL(o, m) S3C_ASSERT((o) != NULL && (o)->magic == (m))
#define CAST_OBJ_NOTNULL(to, from, m)                                                         \
    do {                                                                                      \
        (to) = (from);                                                                        \
        CHECK_OBJ_NOTNULL((to), (m));                                                         \
    } while (0)

/* Optional detail for an error return (Redis anetSetError, curl failf). Lower layers fill
 * it, the request layer logs or returns it once. A NULL errmsg is allowed everywhere. */
struct errmsg {
    char buf[256];
};
void errmsg_set(struct errmsg *em, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clocks. */
uint64_t s3c_mono_ns(void);  /* CLOCK_MONOTONIC */
int64_t s3c_real_ns(void);   /* CLOCK_REALTIME, ns since the epoch */
/* A 64-bit hash of @n bytes (FNV-1a, then a finalizer's mixing): for in-memory tables only,
 * never stored (it may change between versions). */
uint64_t s3c_hash_bytes(const void *p, size_t n);
/* *@ts = now on @clock + @ms: the deadline of a pthread_cond_timedwait() on a condition variable
 * using that clock. */
void s3c_deadline(clockid_t clock, int64_t ms, struct timespec *ts);

/* Formats @t (UTC) as an RFC 7231 date, "Sun, 06 Nov 1994 08:49:37 GMT" (30 bytes). */
void s3c_http_date(int64_t t, char out[32]);
/* Formats @t_ns (UTC) as ISO 8601 with milliseconds, "2026-11-22T08:49:37.123Z". */
void s3c_iso8601(int64_t t_ns, char out[32]);

#endif
