/*
 * hex.h: hexadecimal digits, both ways (hex.c). Pure.
 */
#ifndef S3C_HEX_H
#define S3C_HEX_H

#include <stddef.h>

/* The value of the hex digit @c (either case), or -1. */
int hex_digit(int c);
/* Decodes the 2 * @n hex digits at @hex into @out[0..@n): 0, or -1 at a non-hex character
 * (@out partly written). */
int hex_decode(const char *hex, size_t n, unsigned char *out);
/* The bytes the hex digits of @hex stand for, as a NUL-terminated string into *@out (the
 * caller frees it): 0, -EINVAL (an odd number of digits, a character that is not one, a NUL
 * byte) or -ENOMEM. How peers carry keys that are not UTF-8 in JSON (peer.c, cwarm.c). */
int hex_decode_str(const char *hex, char **out);
/* @n bytes of @in as 2 * @n lower-case hex digits and a NUL into @out. */
void hex_encode(const void *in, size_t n, char *out);

#endif
