/*
 * json.c: the JSON reader of include/json.h on jansson, the only file that includes
 * <jansson.h>. jansson parses (strict RFC 8259: UTF-8 checked, \u escapes and surrogate pairs
 * decoded, nothing after the value); this file adds our rules and copies the result into the
 * small struct json tree the callers walk: \u0000 refused (strings stay C strings), duplicate
 * member names refused, numbers read as doubles (an overflowing one refused), depth bounded by
 * JSON_MAX_DEPTH, input by JSON_MAX_BYTES.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
/* jansson names its null JSON_NULL too: here alone, json.h's is read as JSON_NULL_S3C */
#define JSON_NULL JSON_NULL_S3C
#include "json.h"
#undef JSON_NULL

/* Frees what @j holds (not @j itself). */
static void json_clear(struct json *j)
{
    free(j->str);
    for (size_t i = 0; i < j->n; i++) {
        json_clear(&j->items[i]);
        if (j->keys)
            free(j->keys[i]);
    }
    free(j->items);
    free(j->keys);
}

/* Copies jansson's @v, at depth @depth (the top value is 1), into @out (zeroed). 0, -EINVAL
 * (detail in @em) or -ENOMEM; on failure @out holds what was copied, for json_clear(). */
static int json_tree_copy(const json_t *v, int depth, struct json *out, struct errmsg *em)
{
    size_t n;
    int rc;

    if (depth > JSON_MAX_DEPTH) {
        errmsg_set(em, "JSON: nested too deeply (more than %d levels)", JSON_MAX_DEPTH);
        return -EINVAL;
    }
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *member;
        out->type = JSON_OBJ;
        n = json_object_size(v);
        if (!n)
            return 0;
        out->items = calloc(n, sizeof(*out->items));
        out->keys = calloc(n, sizeof(*out->keys));
        if (!out->items || !out->keys)
            return -ENOMEM;
        json_object_foreach((json_t *)v, key, member) { /* in document order */
            if (!(out->keys[out->n] = strdup(key)))
                return -ENOMEM;
            rc = json_tree_copy(member, depth + 1, &out->items[out->n], em);
            out->n++; /* counted even on failure so json_clear releases it */
            if (rc)
                return rc;
        }
        return 0;
    }
    case JSON_ARRAY:
        out->type = JSON_ARR;
        n = json_array_size(v);
        if (!n)
            return 0;
        if (!(out->items = calloc(n, sizeof(*out->items))))
            return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
            rc = json_tree_copy(json_array_get(v, i), depth + 1, &out->items[i], em);
            out->n++;
            if (rc)
                return rc;
        }
        return 0;
    case JSON_STRING:
        out->type = JSON_STR;
        return (out->str = strdup(json_string_value(v))) ? 0 : -ENOMEM;
    case JSON_INTEGER: /* not made with JSON_DECODE_INT_AS_REAL; kept for completeness */
    case JSON_REAL:
        out->type = JSON_NUM;
        out->num = json_number_value(v);
        return 0;
    case JSON_TRUE:
    case JSON_FALSE:
        out->type = JSON_BOOL;
        out->b = json_is_true(v);
        return 0;
    case JSON_NULL:
    default:
        out->type = JSON_NULL_S3C;
        return 0;
    }
}

int json_parse(const char *s, size_t len, struct json **out, struct errmsg *em)
{
    json_error_t err;
    json_t *root;
    struct json *v;
    int rc;

    *out = NULL;
    if (len > JSON_MAX_BYTES) {
        errmsg_set(em, "JSON: document larger than %u bytes", JSON_MAX_BYTES);
        return -EINVAL;
    }
    /* any value at the top; numbers as doubles (a 2^64 counter is read, 1e999 refused);
     * "a" twice in one object refused (which one would count?); \u0000 refused */
    root = json_loadb(s ? s : "", len,
                      JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        switch (json_error_code(&err)) {
        case json_error_out_of_memory:
            return -ENOMEM;
        case json_error_stack_overflow:
            errmsg_set(em, "JSON: nested too deeply (more than %d levels)", JSON_MAX_DEPTH);
            return -EINVAL;
        default:
            errmsg_set(em, "JSON: %s at byte %d", err.text, err.position);
            return -EINVAL;
        }
    }
    v = calloc(1, sizeof(*v));
    rc = v ? json_tree_copy(root, 1, v, em) : -ENOMEM;
    json_decref(root);
    if (rc) {
        json_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

void json_free(struct json *j)
{
    if (!j)
        return;
    json_clear(j);
    free(j);
}

const struct json *json_get(const struct json *obj, const char *key)
{
    if (!obj || obj->type != JSON_OBJ)
        return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (!strcmp(obj->keys[i], key))
            return &obj->items[i];
    return NULL;
}

const char *json_get_str(const struct json *obj, const char *key)
{
    const struct json *v = json_get(obj, key);
    return v && v->type == JSON_STR ? v->str : NULL;
}

double json_get_num(const struct json *obj, const char *key, double dflt)
{
    const struct json *v = json_get(obj, key);
    return v && v->type == JSON_NUM ? v->num : dflt;
}
