/*
 * log.c: leveled logging to stderr (include/log.h), text or JSON lines, one
 * write(2) per line so lines from threads never interleave.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "log.h"
#include "s3c.h"

static int log_level_cur = S3C_LOG_INFO;
static int log_json;

static const char *const log_names[] = {"error", "warn", "info", "debug"};

int log_setup(const char *level_name, const char *format)
{
    int lv = -1;
    for (size_t i = 0; i < ARRAY_SIZE(log_names); i++)
        if (level_name && !strcmp(level_name, log_names[i]))
            lv = (int)i;
    if (level_name && lv < 0)
        return -EINVAL;
    if (format && strcmp(format, "text") && strcmp(format, "json"))
        return -EINVAL;
    if (lv >= 0)
        log_level_cur = lv;
    if (format)
        log_json = !strcmp(format, "json");
    return 0;
}

int log_enabled(enum log_level lv)
{
    return (int)lv <= log_level_cur;
}

int log_is_json(void)
{
    return log_json;
}

void log_line(const char *line, size_t len)
{
    char small[1024];
    if (len + 1 <= sizeof(small)) {
        memcpy(small, line, len);
        small[len] = '\n';
        (void)!write(2, small, len + 1);
        return;
    }
    (void)!write(2, line, len);
    (void)!write(2, "\n", 1);
}

void log_msg(enum log_level lv, const char *fmt, ...)
{
    char msg[1024], ts[32], line[1400];
    va_list ap;
    if (!log_enabled(lv))
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    s3c_iso8601(s3c_real_ns(), ts);
    if (log_json) {
        struct buf b;
        buf_init(&b, 4096);
        if (!buf_printf(&b, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":", ts, log_names[lv]) &&
            !buf_json_str(&b, msg) && !buf_puts(&b, "}"))
            log_line(b.p, b.len);
        buf_free(&b);
        return;
    }
    int n = snprintf(line, sizeof(line), "%s [%d] %s: %s", ts, (int)getpid(), log_names[lv], msg);
    if (n > 0)
        log_line(line, S3C_MIN((size_t)n, sizeof(line) - 1));
}
