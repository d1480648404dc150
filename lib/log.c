/*
 * log.c: leveled logging to stderr (lib/log.h), text or JSON lines, one
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
static const char hexl[] = "0123456789abcdef";

void log_setup(enum log_level level, int json)
{
    log_level_cur = (int)level;
    log_json = json;
}

int log_enabled(enum log_level lv)
{
    return (int)lv <= log_level_cur;
}

int log_is_json(void)
{
    return log_json;
}

int log_buf_escaped(struct buf *b, const char *s)
{
    const char *run = s;
    int rc = 0;
    for (; *s && !rc; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch >= 0x20 && ch != 0x7f && ch != '\\')
            continue;
        char esc[4] = {'\\', 'x', hexl[ch >> 4], hexl[ch & 15]};
        rc = buf_append(b, run, (size_t)(s - run));
        if (!rc)
            rc = ch == '\\' ? buf_append(b, "\\\\", 2) : buf_append(b, esc, 4);
        run = s + 1;
    }
    if (!rc)
        rc = buf_append(b, run, (size_t)(s - run));
    return rc;
}

/* Writes @line plus '\n' with any control byte that is still in it escaped (\xNN in text,
 * \u00NN in JSON): one log line stays one line, whatever a client put in a key or header. */
static void log_line_escaped(const char *line, size_t len)
{
    struct buf b;
    buf_init(&b, 4 * len + 8);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)line[i];
        if (ch >= 0x20 && (ch != 0x7f || log_json)) {
            buf_append(&b, &line[i], 1);
        } else if (log_json) {
            char esc[6] = {'\\', 'u', '0', '0', hexl[ch >> 4], hexl[ch & 15]};
            buf_append(&b, esc, 6);
        } else {
            char esc[4] = {'\\', 'x', hexl[ch >> 4], hexl[ch & 15]};
            buf_append(&b, esc, 4);
        }
    }
    buf_append(&b, "\n", 1);
    if (b.p)
        (void)!write(2, b.p, b.len);
    buf_free(&b);
}

void log_line(const char *line, size_t len)
{
    char small[1024];
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)line[i];
        if (ch < 0x20 || (ch == 0x7f && !log_json)) {
            log_line_escaped(line, len);
            return;
        }
    }
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
    char msg[1024], ts[32];
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
    char line[64 + 4 * sizeof(msg)]; /* every byte of msg may become \xNN: no allocation */
    int n = snprintf(line, sizeof(line), "%s [%d] %s: ", ts, (int)getpid(), log_names[lv]);
    if (n <= 0)
        return;
    size_t o = (size_t)n;
    for (const char *p = msg; *p && o + 4 < sizeof(line); p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch >= 0x20 && ch != 0x7f && ch != '\\') {
            line[o++] = (char)ch;
        } else if (ch == '\\') {
            line[o++] = '\\';
            line[o++] = '\\';
        } else {
            line[o++] = '\\';
            line[o++] = 'x';
            line[o++] = hexl[ch >> 4];
            line[o++] = hexl[ch & 15];
        }
    }
    log_line(line, o);
}
