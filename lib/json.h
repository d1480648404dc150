/*
 * json.h: a strict JSON reader into a small tree (admin request bodies, the CLI's view of
 * /_/stats and warm jobs, warm jobs kept on disk), on jansson (json.c). Bounded depth and size.
 * Pure.
 */
#ifndef S3C_JSON_H
#define S3C_JSON_H

#include <stddef.h>
#include "s3c.h"

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUM, JSON_STR, JSON_ARR, JSON_OBJ };

struct json {
    enum json_type type;
    int b;              /* JSON_BOOL */
    double num;         /* JSON_NUM */
    char *str;          /* JSON_STR (NUL-terminated, may not contain NUL) */
    size_t n;           /* JSON_ARR / JSON_OBJ: number of items */
    struct json *items; /* JSON_ARR / JSON_OBJ values */
    char **keys;        /* JSON_OBJ keys */
};

#define JSON_MAX_DEPTH 32         /* a value in an array in an object ... is 3 deep */
#define JSON_MAX_BYTES (64u << 20) /* the largest document a caller reads (the CLI's stats) */

/* Parses @len bytes of RFC 8259 JSON (any value at the top). 0 and a tree in *@out to free with
 * json_free(), or -EINVAL (detail in @em: what and at which byte) / -ENOMEM with *@out NULL.
 * Refused: invalid UTF-8, \u0000, a member name twice in one object, a number that overflows
 * a double, more than JSON_MAX_DEPTH levels, more than JSON_MAX_BYTES. */
int json_parse(const char *s, size_t len, struct json **out, struct errmsg *em);
void json_free(struct json *j);
/* Member @key of an object, or NULL. */
const struct json *json_get(const struct json *obj, const char *key);
/* Convenience: string member or NULL; number member or @dflt. */
const char *json_get_str(const struct json *obj, const char *key);
double json_get_num(const struct json *obj, const char *key, double dflt);

#endif
