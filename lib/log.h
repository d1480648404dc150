/*
 * log.h: leveled logging to stderr, text or JSON lines. Thread-safe; one
 * write(2) per line. Lower layers do not log: they return errors. Background
 * threads (fills, drains, eviction) log their own failures.
 */
#ifndef S3C_LOG_H
#define S3C_LOG_H

enum log_level { S3C_LOG_ERROR = 0, S3C_LOG_WARN, S3C_LOG_INFO, S3C_LOG_DEBUG };

/* Lines up to @level are written, as JSON objects when @json. */
void log_setup(enum log_level level, int json);
int log_enabled(enum log_level lv);
int log_is_json(void);
void log_msg(enum log_level lv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Writes one prepared line (JSON object or text) plus '\n'. Used by the access log. A control
 * byte left in it is escaped (\xNN, in JSON \u00NN): a line never becomes two. */
void log_line(const char *line, size_t len);
struct buf;
/* Appends @s to @b for a text log line: bytes below 0x20 and 0x7f as \xNN, a backslash
 * doubled (so a key cannot spell one of our escapes). 0 or -ENOMEM / -EMSGSIZE. */
int log_buf_escaped(struct buf *b, const char *s);

#define log_err(...) log_msg(S3C_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(S3C_LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(S3C_LOG_INFO, __VA_ARGS__)
#define log_debug(...) (log_enabled(S3C_LOG_DEBUG) ? log_msg(S3C_LOG_DEBUG, __VA_ARGS__) : (void)0)

#endif
