/*
 * buf.h: a growable byte buffer with a hard cap (curl dynbuf "toobig").
 * Always NUL-terminated after a successful append. Owner frees with buf_free().
 */
#ifndef S3C_BUF_H
#define S3C_BUF_H

#include <stddef.h>

struct buf {
    char *p;
    size_t len;
    size_t cap;
    size_t max; /* appends that would make len exceed max fail with -EMSGSIZE */
};

void buf_init(struct buf *b, size_t max);
/* 0, -EMSGSIZE (cap reached; the buffer is unchanged) or -ENOMEM. */
int buf_append(struct buf *b, const void *p, size_t n);
int buf_puts(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends @s with XML escaping of & < > " ' (and control characters as &#N;), bytes as they
 * are otherwise: keys in listings, as S3 writes them (&#1; is not XML 1.0, but the key comes
 * back whole to a lenient parser; encoding-type=url is the portable way). */
int buf_xml(struct buf *b, const char *s);
/* Appends <name>escaped value</name>. */
int buf_xml_elem(struct buf *b, const char *name, const char *value);
/* buf_xml() that writes only XML 1.0 (for error documents, which every client must parse):
 * tab, LF and CR as &#9; &#10; &#13;, the other control characters (U+0001-U+001F, which XML 1.0
 * allows in no form) and bytes that are not well-formed UTF-8 as U+FFFD. */
int buf_xml_text(struct buf *b, const char *s);
int buf_xml_text_elem(struct buf *b, const char *name, const char *value);
/* Appends @s as a JSON string literal, quotes included: always valid JSON, so a byte of @s
 * that is not part of well-formed UTF-8 is written as \ufffd. */
int buf_json_str(struct buf *b, const char *s);
/* Appends @s's bytes as a JSON string of lower-case hex digits, quotes included: any bytes,
 * whole (hex_decode_str() reads them back). */
int buf_json_hex(struct buf *b, const char *s);
void buf_reset(struct buf *b);
/* Gives the memory to the caller (free()); the buffer is empty afterwards. */
char *buf_take(struct buf *b);
void buf_free(struct buf *b);

#endif
