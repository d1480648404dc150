/*
 * json.c: a strict recursive-descent JSON reader (include/json.h). UTF-8 is
 * passed through; \u escapes (with surrogate pairs) become UTF-8; \u0000 is
 * refused so strings stay C strings.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "json.h"

struct jp {
    const char *p, *end;
    struct errmsg *em;
    int depth;
};

static void ws(struct jp *jp)
{
    while (jp->p < jp->end &&
           (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' || *jp->p == '\r'))
        jp->p++;
}

static int fail(struct jp *jp, const char *what)
{
    errmsg_set(jp->em, "JSON: %s", what);
    return -EINVAL;
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static void put_utf8(struct buf *b, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    buf_append(b, u, n);
}

static int parse_string(struct jp *jp, char **out)
{
    struct buf b;
    buf_init(&b, 16u << 20);
    jp->p++; /* opening quote */
    while (jp->p < jp->end && *jp->p != '"') {
        unsigned char c = (unsigned char)*jp->p;
        if (c < 0x20) {
            buf_free(&b);
            return fail(jp, "control character in string");
        }
        if (c != '\\') {
            const char *run = jp->p;
            while (jp->p < jp->end && *jp->p != '"' && *jp->p != '\\' &&
                   (unsigned char)*jp->p >= 0x20)
                jp->p++;
            if (buf_append(&b, run, (size_t)(jp->p - run))) {
                buf_free(&b);
                return -ENOMEM;
            }
            continue;
        }
        if (jp->end - jp->p < 2) {
            buf_free(&b);
            return fail(jp, "unterminated escape");
        }
        char e = jp->p[1];
        jp->p += 2;
        const char *simple = NULL;
        switch (e) {
        case '"': simple = "\""; break;
        case '\\': simple = "\\"; break;
        case '/': simple = "/"; break;
        case 'b': simple = "\b"; break;
        case 'f': simple = "\f"; break;
        case 'n': simple = "\n"; break;
        case 'r': simple = "\r"; break;
        case 't': simple = "\t"; break;
        case 'u': {
            unsigned cp, lo;
            if (jp->end - jp->p < 4 || hex4(jp->p, &cp)) {
                buf_free(&b);
                return fail(jp, "bad \\u escape");
            }
            jp->p += 4;
            if (cp >= 0xd800 && cp < 0xdc00) {
                if (jp->end - jp->p < 6 || jp->p[0] != '\\' || jp->p[1] != 'u' ||
                    hex4(jp->p + 2, &lo) || lo < 0xdc00 || lo > 0xdfff) {
                    buf_free(&b);
                    return fail(jp, "bad surrogate pair");
                }
                jp->p += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp < 0xe000) {
                buf_free(&b);
                return fail(jp, "lone low surrogate");
            }
            if (cp == 0) {
                buf_free(&b);
                return fail(jp, "\\u0000 not allowed");
            }
            put_utf8(&b, cp);
            break;
        }
        default:
            buf_free(&b);
            return fail(jp, "unknown escape");
        }
        if (simple)
            buf_append(&b, simple, 1);
    }
    if (jp->p >= jp->end) {
        buf_free(&b);
        return fail(jp, "unterminated string");
    }
    jp->p++;
    *out = buf_take(&b);
    return *out ? 0 : -ENOMEM;
}

static int parse_value(struct jp *jp, struct json *v);

static int parse_container(struct jp *jp, struct json *v, int is_obj)
{
    char close = is_obj ? '}' : ']';
    size_t cap = 0;
    v->type = is_obj ? JSON_OBJ : JSON_ARR;
    jp->p++;
    ws(jp);
    if (jp->p < jp->end && *jp->p == close) {
        jp->p++;
        return 0;
    }
    for (;;) {
        if (v->n == cap) {
            cap = cap ? cap * 2 : 4;
            struct json *ni = realloc(v->items, cap * sizeof(*ni));
            if (!ni)
                return -ENOMEM;
            v->items = ni;
            if (is_obj) {
                char **nk = realloc(v->keys, cap * sizeof(*nk));
                if (!nk)
                    return -ENOMEM;
                v->keys = nk;
            }
        }
        ws(jp);
        if (is_obj) {
            if (jp->p >= jp->end || *jp->p != '"')
                return fail(jp, "expected a member name");
            int rc = parse_string(jp, &v->keys[v->n]);
            if (rc)
                return rc;
            ws(jp);
            if (jp->p >= jp->end || *jp->p != ':') {
                free(v->keys[v->n]);
                return fail(jp, "expected ':'");
            }
            jp->p++;
        }
        memset(&v->items[v->n], 0, sizeof(v->items[0]));
        int rc = parse_value(jp, &v->items[v->n]);
        v->n++; /* counted even on failure so json_free releases it */
        if (rc)
            return rc;
        ws(jp);
        if (jp->p < jp->end && *jp->p == ',') {
            jp->p++;
            continue;
        }
        if (jp->p < jp->end && *jp->p == close) {
            jp->p++;
            return 0;
        }
        return fail(jp, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int parse_value(struct jp *jp, struct json *v)
{
    ws(jp);
    if (jp->p >= jp->end)
        return fail(jp, "unexpected end");
    if (++jp->depth > JSON_MAX_DEPTH)
        return fail(jp, "nested too deeply");
    int rc = 0;
    char c = *jp->p;
    if (c == '{' || c == '[') {
        rc = parse_container(jp, v, c == '{');
    } else if (c == '"') {
        v->type = JSON_STR;
        rc = parse_string(jp, &v->str);
    } else if (jp->end - jp->p >= 4 && !memcmp(jp->p, "true", 4)) {
        v->type = JSON_BOOL;
        v->b = 1;
        jp->p += 4;
    } else if (jp->end - jp->p >= 5 && !memcmp(jp->p, "false", 5)) {
        v->type = JSON_BOOL;
        jp->p += 5;
    } else if (jp->end - jp->p >= 4 && !memcmp(jp->p, "null", 4)) {
        v->type = JSON_NULL;
        jp->p += 4;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        char tmp[64];
        size_t n = 0;
        while (jp->p + n < jp->end && n < sizeof(tmp) - 1 &&
               strchr("+-0123456789.eE", jp->p[n]))
            n++;
        memcpy(tmp, jp->p, n);
        tmp[n] = '\0';
        char *end;
        v->type = JSON_NUM;
        v->num = strtod(tmp, &end);
        if (end != tmp + n || n == 0)
            return fail(jp, "bad number");
        jp->p += n;
    } else {
        rc = fail(jp, "unexpected character");
    }
    jp->depth--;
    return rc;
}

int json_parse(const char *s, size_t len, struct json **out, struct errmsg *em)
{
    struct jp jp = {s, s + len, em, 0};
    struct json *v = calloc(1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    int rc = parse_value(&jp, v);
    if (!rc) {
        ws(&jp);
        if (jp.p != jp.end)
            rc = fail(&jp, "trailing characters");
    }
    if (rc) {
        json_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

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
