/*
 * hex.c: hexadecimal digits, both ways (hex.h).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hex.h"

int hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int hex_decode(const char *hex, size_t n, unsigned char *out)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hex_digit((unsigned char)hex[2 * i]), lo;
        if (hi < 0 || (lo = hex_digit((unsigned char)hex[2 * i + 1])) < 0)
            return -1;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

void hex_encode(const void *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *p = in;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

int hex_decode_str(const char *hex, char **out)
{
    size_t n = strlen(hex);
    *out = NULL;
    if (n % 2)
        return -EINVAL;
    unsigned char *s = malloc(n / 2 + 1);
    if (!s)
        return -ENOMEM;
    if (hex_decode(hex, n / 2, s) || memchr(s, 0, n / 2)) {
        free(s);
        return -EINVAL;
    }
    s[n / 2] = 0;
    *out = (char *)s;
    return 0;
}
