/*
 * s3c.c: the small shared helpers of s3c.h: assertion failure, error detail,
 * clocks and date formatting. No state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "s3c.h"

void s3c_assert_fail(const char *expr, const char *file, int line, const char *func)
{
    char msg[512];
    int n = snprintf(msg, sizeof(msg), "s3cached: assertion \"%s\" failed in %s() at %s:%d\n",
                     expr, func, file, line);
    if (n > 0)
        (void)!write(2, msg, (size_t)S3C_MIN(n, (int)sizeof(msg) - 1));
    abort();
}

void errmsg_set(struct errmsg *em, const char *fmt, ...)
{
    va_list ap;
    if (!em)
        return;
    va_start(ap, fmt);
    vsnprintf(em->buf, sizeof(em->buf), fmt, ap);
    va_end(ap);
}

uint64_t s3c_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t s3c_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

void s3c_deadline(clockid_t clock, int64_t ms, struct timespec *ts)
{
    clock_gettime(clock, ts);
    int64_t ns = ts->tv_nsec + ms % 1000 * 1000000;
    ts->tv_sec += (time_t)(ms / 1000 + ns / 1000000000);
    ts->tv_nsec = (long)(ns % 1000000000);
}

/* Digits by hand: the date goes on every object answer (Last-Modified), where two snprintf()
 * calls cost more than the rest of the header. */
static char *put_digits(char *p, unsigned v, int n)
{
    for (int i = n - 1; i >= 0; i--, v /= 10)
        p[i] = (char)('0' + v % 10);
    return p + n;
}

void s3c_http_date(int64_t t, char out[32])
{
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char mons[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    struct tm tm;
    time_t tt = (time_t)t;
    if (!gmtime_r(&tt, &tm))
        memset(&tm, 0, sizeof(tm));
    if (tm.tm_year + 1900 < 0 || tm.tm_year + 1900 > 9999) { /* years the format cannot hold */
        char tmp[96];
        snprintf(tmp, sizeof(tmp), "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday],
                 tm.tm_mday, mons[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                 tm.tm_sec);
        snprintf(out, 32, "%.31s", tmp);
        return;
    }
    char *p = out; /* "Sun, 06 Nov 1994 08:49:37 GMT": 29 bytes and the NUL */
    memcpy(p, days[tm.tm_wday], 3);
    p += 3;
    *p++ = ',';
    *p++ = ' ';
    p = put_digits(p, (unsigned)tm.tm_mday, 2);
    *p++ = ' ';
    memcpy(p, mons[tm.tm_mon], 3);
    p += 3;
    *p++ = ' ';
    p = put_digits(p, (unsigned)(tm.tm_year + 1900), 4);
    *p++ = ' ';
    p = put_digits(p, (unsigned)tm.tm_hour, 2);
    *p++ = ':';
    p = put_digits(p, (unsigned)tm.tm_min, 2);
    *p++ = ':';
    p = put_digits(p, (unsigned)tm.tm_sec, 2);
    memcpy(p, " GMT", 5);
}

void s3c_iso8601(int64_t t_ns, char out[32])
{
    struct tm tm;
    time_t tt = (time_t)(t_ns / 1000000000ll);
    gmtime_r(&tt, &tm);
    char tmp[96];
    snprintf(tmp, sizeof(tmp), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int)((t_ns % 1000000000ll) / 1000000ll));
    snprintf(out, 32, "%.31s", tmp);
}

uint64_t s3c_hash_bytes(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}
