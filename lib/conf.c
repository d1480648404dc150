/*
 * conf.c: the configuration of `s3cached serve`, driven by CONF_TABLE (conf.h).
 * Applies defaults, then the config file, then S3CACHED_* environment, then
 * flags; parses sizes, durations, booleans and enums; derives listen_host/port,
 * dirty_limit and the default backend. Writes `help` and config/s3cached.conf.
 * It opens no sockets and checks no paths beyond reading the config file.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "s3c.h"
#include "conf.h"

struct conf_row {
    const char *name;
    enum conf_type type;
    size_t off;
    const char *def;
    const char *help;
};

static const struct conf_row conf_rows[] = {
#define X(name, type, field, def, help) { name, CONF_##type, offsetof(struct conf, field), def, help },
    CONF_TABLE(X)
#undef X
};
#define CONF_NROWS ARRAY_SIZE(conf_rows)

/* Where values come from, for error messages. */
enum conf_src { SRC_DEFAULT, SRC_FILE, SRC_ENV, SRC_FLAG };

struct conf_state {
    struct conf *cf;
    struct errmsg *em;
    unsigned char set[CONF_NROWS];     /* set by a file, the environment or a flag */
    char where[CONF_NROWS][160];       /* source label of each row's value */
};

/* --- parsers ------------------------------------------------------------------------ */

static const char *skip_blank(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* Decimal digits at *@pp into *@out. NULL, or an error string. */
static const char *read_digits(const char **pp, uint64_t *out, const char *nan)
{
    const char *p = *pp;
    uint64_t v = 0;
    if (*p < '0' || *p > '9')
        return nan;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return "too large";
        v = v * 10 + d;
    }
    *pp = p;
    *out = v;
    return NULL;
}

/* Is @s (length @n) blank to its end? */
static int blank_to_end(const char *s)
{
    return *skip_blank(s) == '\0';
}

const char *conf_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        char c;
        unsigned shift;
    } units[] = { { 'K', 10 }, { 'M', 20 }, { 'G', 30 }, { 'T', 40 } };
    const char *p, *err;
    uint64_t v;
    unsigned shift = 0;

    if (!s)
        return "empty value";
    p = skip_blank(s);
    if (!*p)
        return "empty value";
    if (*p == '-')
        return "not a size";
    if ((err = read_digits(&p, &v, "not a size")))
        return err;
    if (*p == '.' || *p == ',')
        return "fractional sizes are not allowed";
    p = skip_blank(p);
    if (*p) {
        size_t i;
        char u = (char)toupper((unsigned char)*p);
        if (u == 'B' && blank_to_end(p + 1)) {
            p++;
        } else {
            for (i = 0; i < ARRAY_SIZE(units); i++)
                if (units[i].c == u)
                    break;
            if (i == ARRAY_SIZE(units))
                return "unknown unit (use K, M, G or T)";
            shift = units[i].shift;
            p++;
            if (*p == 'i' || *p == 'I') {
                p++;
                if (*p != 'B' && *p != 'b')
                    return "unknown unit (use K, M, G or T)";
            }
            if (*p == 'B' || *p == 'b')
                p++;
        }
        if (!blank_to_end(p))
            return "unknown unit (use K, M, G or T)";
    }
    if (shift && v > (UINT64_MAX >> shift))
        return "too large";
    *out = v << shift;
    return NULL;
}

/* A rate (demand) like "2.8G", "600M/s", "2.8e9": digits with an optional fraction and decimal
 * exponent, then an optional unit as in conf_parse_size() (K M G T powers of 1024, "iB"/"B"
 * allowed), then an optional "/s". Rounded to whole bytes/s. */
const char *conf_parse_rate(const char *s, uint64_t *out)
{
    static const char units[] = "KMGT";
    char num[64];
    size_t n = 0;
    double mul = 1;
    if (!s)
        return "empty value";
    const char *p = skip_blank(s);
    if (!*p)
        return "empty value";
    const char *start = p;
    while (isdigit((unsigned char)*p))
        p++;
    if (p == start)
        return "not a rate (bytes/s, e.g. 2.8G or 2.8e9)";
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return "not a rate (bytes/s, e.g. 2.8G or 2.8e9)";
        while (isdigit((unsigned char)*p))
            p++;
    }
    if ((*p == 'e' || *p == 'E') && (isdigit((unsigned char)p[1]) ||
                                     ((p[1] == '+' || p[1] == '-') && isdigit((unsigned char)p[2])))) {
        p += 2;
        while (isdigit((unsigned char)*p))
            p++;
    }
    n = (size_t)(p - start);
    if (n >= sizeof(num))
        return "too long";
    memcpy(num, start, n);
    num[n] = '\0';
    p = skip_blank(p);
    const char *u = *p ? strchr(units, toupper((unsigned char)*p)) : NULL;
    if (u && *p) {
        for (const char *k = units; k <= u; k++)
            mul *= 1024;
        p++;
        if (*p == 'i' || *p == 'I') {
            p++;
            if (*p != 'B' && *p != 'b')
                return "unknown unit (use K, M, G or T)";
        }
        if (*p == 'B' || *p == 'b')
            p++;
    } else if (*p == 'B' || *p == 'b') {
        p++;
    }
    if (*p == '/' && (p[1] == 's' || p[1] == 'S'))
        p += 2;
    if (!blank_to_end(p))
        return "unknown unit (use K, M, G or T)";
    double v = strtod(num, NULL) * mul;
    if (!(v < 1.8e19))
        return "too large";
    *out = (uint64_t)(v + 0.5);
    return NULL;
}

const char *conf_parse_duration_ms(const char *s, int64_t *out)
{
    const char *p, *err;
    uint64_t v, mult = 1000;

    if (!s)
        return "empty value";
    p = skip_blank(s);
    if (!*p)
        return "empty value";
    if (*p == '-')
        return "not a duration";
    if ((err = read_digits(&p, &v, "not a duration")))
        return err;
    if (*p == '.' || *p == ',')
        return "fractional durations are not allowed (use ms)";
    p = skip_blank(p);
    if (*p) {
        if (strncasecmp(p, "ms", 2) == 0) {
            mult = 1;
            p += 2;
        } else if (*p == 's' || *p == 'S') {
            mult = 1000;
            p++;
        } else if (*p == 'm' || *p == 'M') {
            mult = 60 * 1000;
            p++;
        } else if (*p == 'h' || *p == 'H') {
            mult = 3600 * 1000;
            p++;
        } else {
            return "unknown unit (use ms, s, m or h)";
        }
        if (!blank_to_end(p))
            return "unknown unit (use ms, s, m or h)";
    }
    if (v > (uint64_t)INT64_MAX / mult)
        return "too large";
    *out = (int64_t)(v * mult);
    return NULL;
}

const char *conf_parse_bool(const char *s, int *out)
{
    static const struct {
        const char *w;
        int v;
    } words[] = { { "true", 1 }, { "false", 0 }, { "yes", 1 }, { "no", 0 },
                  { "on", 1 },   { "off", 0 },   { "1", 1 },   { "0", 0 } };
    char tmp[8];
    size_t n;
    const char *p;

    if (!s)
        return "empty value";
    p = skip_blank(s);
    n = strlen(p);
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    if (n == 0)
        return "empty value";
    if (n < sizeof(tmp)) {
        memcpy(tmp, p, n);
        tmp[n] = '\0';
        for (size_t i = 0; i < ARRAY_SIZE(words); i++) {
            if (strcasecmp(tmp, words[i].w) == 0) {
                *out = words[i].v;
                return NULL;
            }
        }
    }
    return "not a boolean (use true or false)";
}

static const char *parse_int(const char *s, int64_t *out)
{
    const char *p = skip_blank(s), *err;
    uint64_t v;
    if (!*p)
        return "empty value";
    if ((err = read_digits(&p, &v, "not a number (use 0 or more)")))
        return err;
    if (!blank_to_end(p))
        return "not a number (use 0 or more)";
    if (v > (uint64_t)INT64_MAX)
        return "too large";
    *out = (int64_t)v;
    return NULL;
}

/* --- rows ---------------------------------------------------------------------------- */

/* The allowed words of an ENUM row: its help up to the first ' ' ("through|back"). */
static size_t enum_words_len(const struct conf_row *r)
{
    const char *sp = strchr(r->help, ' ');
    return sp ? (size_t)(sp - r->help) : strlen(r->help);
}

/* The index of @v among the allowed words of ENUM row @r, or -1. */
static int enum_index(const struct conf_row *r, const char *v)
{
    const char *p = r->help, *end = r->help + enum_words_len(r);
    size_t vn = strlen(v);
    for (int i = 0; p < end; i++) {
        const char *bar = memchr(p, '|', (size_t)(end - p));
        const char *we = bar ? bar : end;
        if ((size_t)(we - p) == vn && memcmp(p, v, vn) == 0)
            return i;
        p = we + 1;
    }
    return -1;
}

static int row_allows_never(const struct conf_row *r)
{
    return r->off == offsetof(struct conf, revalidate_after);
}

/* Rows whose value is a comma list: given again by the same source (a flag twice, two lines
 * of the file), the values add up. */
static int row_is_list(const struct conf_row *r)
{
    return r->off == offsetof(struct conf, keep_prefix) ||
           r->off == offsetof(struct conf, lru_prefix);
}

/* row_set(), or for a list row already set by this source (@again), "old,val". */
static int row_set(struct conf_state *st, const struct conf_row *r, const char *val,
                   const char *where);
static int row_set_again(struct conf_state *st, const struct conf_row *r, const char *val,
                         const char *where, int again)
{
    char *const *cur = (char *const *)(const void *)((const char *)st->cf + r->off);
    if (!again || !row_is_list(r) || !*cur || !*val)
        return row_set(st, r, val, where);
    char *joined = NULL;
    if (asprintf(&joined, "%s,%s", *cur, val) < 0) {
        errmsg_set(st->em, "%s: out of memory", where);
        return -ENOMEM;
    }
    int rc = row_set(st, r, joined, where);
    free(joined);
    return rc;
}

static const struct conf_row *row_find(const char *name, size_t n)
{
    for (size_t i = 0; i < CONF_NROWS; i++)
        if (strlen(conf_rows[i].name) == n && memcmp(conf_rows[i].name, name, n) == 0)
            return &conf_rows[i];
    return NULL;
}

/* Levenshtein distance, capped inputs (option names are short). */
static size_t edit_distance(const char *a, size_t an, const char *b)
{
    size_t bn = strlen(b), prev[64], cur[64];
    if (an >= 63 || bn >= 63)
        return 99;
    for (size_t j = 0; j <= bn; j++)
        prev[j] = j;
    for (size_t i = 1; i <= an; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= bn; j++) {
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = S3C_MIN(sub, S3C_MIN(del, ins));
        }
        memcpy(prev, cur, (bn + 1) * sizeof(size_t));
    }
    return prev[bn];
}

/* The closest option name to @name (length @n), or NULL when none is close. */
static const char *suggest(const char *name, size_t n)
{
    const char *best = NULL;
    size_t bestd = 3;
    for (size_t i = 0; i < CONF_NROWS; i++) {
        size_t d = edit_distance(name, n, conf_rows[i].name);
        if (d < bestd) {
            bestd = d;
            best = conf_rows[i].name;
        }
    }
    if (!best && n >= 4) {
        for (size_t i = 0; i < CONF_NROWS; i++)
            if (strncmp(conf_rows[i].name, name, n) == 0)
                return conf_rows[i].name;
    }
    return best;
}

static void unknown_option(struct conf_state *st, const char *prefix, const char *dashes,
                           const char *name, size_t n)
{
    const char *s = suggest(name, n);
    if (s)
        errmsg_set(st->em, "%sunknown option \"%s%.*s\" (did you mean %s%s?)", prefix, dashes,
                   (int)n, name, dashes, s);
    else
        errmsg_set(st->em, "%sunknown option \"%s%.*s\" (see `s3cached help`)", prefix, dashes,
                   (int)n, name);
}

/* Parses @val for row @r and stores it. @where labels the source: "--cache-size",
 * "S3CACHED_CACHE_SIZE" or "FILE:LINE: cache-size". */
static int row_set(struct conf_state *st, const struct conf_row *r, const char *val,
                   const char *where)
{
    char *field = (char *)st->cf + r->off;
    const char *err = NULL;
    size_t ri = (size_t)(r - conf_rows);

    switch (r->type) {
    case CONF_STR: {
        char **sp = (char **)(void *)field;
        char *dup = NULL;
        if (*val) {
            dup = strdup(val);
            if (!dup) {
                errmsg_set(st->em, "%s: out of memory", where);
                return -ENOMEM;
            }
        }
        free(*sp);
        *sp = dup;
        break;
    }
    case CONF_ENUM: {
        int idx = enum_index(r, val);
        if (idx < 0) {
            errmsg_set(st->em, "%s \"%s\": use one of %.*s", where, val,
                       (int)enum_words_len(r), r->help);
            return -EINVAL;
        }
        memcpy(field, &idx, sizeof(idx));
        break;
    }
    case CONF_SIZE: {
        uint64_t v;
        if (!(err = conf_parse_size(val, &v)))
            memcpy(field, &v, sizeof(v));
        break;
    }
    case CONF_DUR: {
        int64_t v;
        const char *p = skip_blank(val);
        if (row_allows_never(r) && strncasecmp(p, "never", 5) == 0 && blank_to_end(p + 5)) {
            v = -1;
            st->cf->revalidate_never = 1;
            memcpy(field, &v, sizeof(v));
        } else if (!(err = conf_parse_duration_ms(val, &v))) {
            memcpy(field, &v, sizeof(v));
            if (row_allows_never(r))
                st->cf->revalidate_never = 0;
        } else if (row_allows_never(r) && strcmp(err, "not a duration") == 0) {
            err = "not a duration (e.g. 60s, 5m, 1h or never)";
        }
        break;
    }
    case CONF_INT: {
        int64_t v;
        if (!(err = parse_int(val, &v)))
            memcpy(field, &v, sizeof(v));
        break;
    }
    case CONF_BOOL: {
        int v;
        if (!(err = conf_parse_bool(val, &v)))
            memcpy(field, &v, sizeof(v));
        break;
    }
    }
    if (err) {
        errmsg_set(st->em, "%s \"%s\": %s", where, val, err);
        return -EINVAL;
    }
    snprintf(st->where[ri], sizeof(st->where[ri]), "%s", where);
    return 0;
}

/* --- sources ------------------------------------------------------------------------- */

static int load_defaults(struct conf_state *st)
{
    for (size_t i = 0; i < CONF_NROWS; i++) {
        const struct conf_row *r = &conf_rows[i];
        char where[96];
        snprintf(where, sizeof(where), "%s (default)", r->name);
        if (!*r->def)
            continue; /* memset already made it NULL / 0 */
        int rc = row_set(st, r, r->def, where);
        if (rc)
            return rc;
    }
    snprintf(st->cf->source, sizeof(st->cf->source), "default");
    return 0;
}

static char *trim(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    while (isspace((unsigned char)*s))
        s++;
    return s;
}

static int load_file(struct conf_state *st, const char *path)
{
    FILE *f = fopen(path, "r");
    char *line = NULL, prefix[160];
    size_t cap = 0;
    unsigned lineno = 0;
    int rc = 0;
    unsigned char again[CONF_NROWS] = { 0 };

    if (!f) {
        rc = -errno;
        errmsg_set(st->em, "config file \"%s\": %s", path, strerror(-rc));
        return -EINVAL;
    }
    while (getline(&line, &cap, f) >= 0) {
        char *p = line, *eq, *key, *val;
        lineno++;
        if (lineno == 1 && strncmp(p, "\xef\xbb\xbf", 3) == 0)
            p += 3;
        p = trim(p);
        if (!*p || *p == '#')
            continue;
        snprintf(prefix, sizeof(prefix), "%s:%u: ", path, lineno);
        eq = strchr(p, '=');
        if (!eq) {
            errmsg_set(st->em, "%sexpected \"key = value\", got \"%.60s\"", prefix, p);
            rc = -EINVAL;
            break;
        }
        *eq = '\0';
        key = trim(p);
        val = trim(eq + 1);
        size_t vn = strlen(val);
        if (vn >= 2 && ((val[0] == '"' && val[vn - 1] == '"') ||
                        (val[0] == '\'' && val[vn - 1] == '\''))) {
            val[vn - 1] = '\0';
            val++;
        }
        if (strncmp(key, "--", 2) == 0)
            key += 2;
        const struct conf_row *r = row_find(key, strlen(key));
        if (!r) {
            unknown_option(st, prefix, "", key, strlen(key));
            rc = -EINVAL;
            break;
        }
        if (r->off == offsetof(struct conf, config)) {
            errmsg_set(st->em, "%sconfig: cannot be set in a config file", prefix);
            rc = -EINVAL;
            break;
        }
        if (!*val)
            continue; /* "option =": unset, the default stays (as in the sample) */
        char where[160];
        snprintf(where, sizeof(where), "%s:%u: %s", path, lineno, r->name);
        if ((rc = row_set_again(st, r, val, where, again[r - conf_rows])))
            break;
        st->set[r - conf_rows] = 1;
        again[r - conf_rows] = 1;
    }
    if (!rc && ferror(f)) {
        errmsg_set(st->em, "config file \"%s\": read error", path);
        rc = -EINVAL;
    }
    free(line);
    fclose(f);
    if (!rc)
        snprintf(st->cf->source, sizeof(st->cf->source), "file");
    return rc;
}

/* S3CACHED_<NAME> for row @r into @out. */
static void env_name(const struct conf_row *r, char *out, size_t n)
{
    size_t k = (size_t)snprintf(out, n, "S3CACHED_");
    for (const char *p = r->name; *p && k + 1 < n; p++)
        out[k++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    out[k] = '\0';
}

static const char *env_get(char **envp, const char *name)
{
    size_t n = strlen(name);
    if (!envp)
        return NULL;
    for (char **e = envp; *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

/* Unknown S3CACHED_* variables are ignored (scripts use S3CACHED_BIN and the like);
 * an empty variable counts as unset. */
static int load_env(struct conf_state *st, char **envp)
{
    for (size_t i = 0; i < CONF_NROWS; i++) {
        char name[80];
        const char *v;
        env_name(&conf_rows[i], name, sizeof(name));
        v = env_get(envp, name);
        if (!v || !*v || conf_rows[i].off == offsetof(struct conf, config))
            continue;
        int rc = row_set(st, &conf_rows[i], v, name);
        if (rc)
            return rc;
        st->set[i] = 1;
        snprintf(st->cf->source, sizeof(st->cf->source), "env");
    }
    return 0;
}

/* Walks the flags. With @only_config, just finds --config (into *@config_path) and checks
 * nothing else; otherwise applies every flag. */
static int load_flags(struct conf_state *st, int argc, char **argv, int only_config,
                      const char **config_path)
{
    unsigned char again[CONF_NROWS] = { 0 };
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *name, *eq, *val = NULL;
        size_t n;
        int negated = 0;
        char where[96];
        const struct conf_row *r;

        if (!a)
            continue;
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            if (only_config)
                continue;
            errmsg_set(st->em, "unexpected argument \"%s\" (options start with --)", a);
            return -EINVAL;
        }
        name = a + 2;
        eq = strchr(name, '=');
        n = eq ? (size_t)(eq - name) : strlen(name);
        if (eq)
            val = eq + 1;
        r = row_find(name, n);
        if (!r && n > 3 && strncmp(name, "no-", 3) == 0) {
            r = row_find(name + 3, n - 3);
            if (r && !only_config) {
                if (r->type != CONF_BOOL) {
                    errmsg_set(st->em, "--%.*s: --%s is not a boolean option", (int)n, name,
                               r->name);
                    return -EINVAL;
                }
                if (eq) {
                    errmsg_set(st->em, "--%.*s: takes no value", (int)n, name);
                    return -EINVAL;
                }
            }
            if (r && r->type == CONF_BOOL && !eq)
                negated = 1;
            else
                r = NULL;
        }
        if (!r) {
            if (only_config)
                continue;
            unknown_option(st, "", "--", name, n);
            return -EINVAL;
        }
        if (!val && !negated) {
            if (r->type == CONF_BOOL) {
                int b;
                /* "--anonymous false" takes the word; a bare "--anonymous" means true */
                if (i + 1 < argc && argv[i + 1] && !conf_parse_bool(argv[i + 1], &b))
                    val = argv[++i];
                else
                    val = "true";
            } else if (i + 1 < argc && argv[i + 1] && strncmp(argv[i + 1], "--", 2) != 0) {
                val = argv[++i];
            } else {
                if (only_config)
                    continue;
                errmsg_set(st->em, "--%s: missing value", r->name);
                return -EINVAL;
            }
        }
        if (negated)
            val = "false";
        if (only_config) {
            if (r->off == offsetof(struct conf, config))
                *config_path = val;
            continue;
        }
        snprintf(where, sizeof(where), "--%s", r->name);
        int rc = row_set_again(st, r, val, where, again[r - conf_rows]);
        if (rc)
            return rc;
        st->set[r - conf_rows] = 1;
        again[r - conf_rows] = 1;
        snprintf(st->cf->source, sizeof(st->cf->source), "flag");
    }
    return 0;
}

/* --- derived fields ------------------------------------------------------------------ */

static int parse_listen(struct conf_state *st)
{
    struct conf *cf = st->cf;
    const char *where = st->where[row_find("listen", 6) - conf_rows];
    const char *s = cf->listen ? cf->listen : "";
    const char *colon, *hs, *he;
    char host[64];
    unsigned char addr[16];
    uint64_t port = 0;

    if (s[0] == '[') {
        hs = s + 1;
        he = strchr(hs, ']');
        if (!he || he[1] != ':')
            goto bad;
        colon = he + 1;
    } else {
        hs = s;
        colon = strrchr(s, ':');
        if (!colon)
            goto bad;
        he = colon;
        if (memchr(hs, ':', (size_t)(he - hs)))
            goto bad; /* an IPv6 address needs brackets */
    }
    if ((size_t)(he - hs) >= sizeof(host))
        goto bad;
    memcpy(host, hs, (size_t)(he - hs));
    host[he - hs] = '\0';
    {
        const char *p = colon + 1;
        if (read_digits(&p, &port, "x") || *p || port < 1 || port > 65535) {
            errmsg_set(st->em, "%s \"%s\": port must be 1..65535", where, s);
            return -EINVAL;
        }
    }
    if (s[0] == '[') {
        if (inet_pton(AF_INET6, host, addr) != 1)
            goto bad;
    } else if (host[0] == '\0' || strcmp(host, "*") == 0) {
        snprintf(host, sizeof(host), "0.0.0.0");
    } else if (strcmp(host, "localhost") == 0) {
        snprintf(host, sizeof(host), "127.0.0.1");
    } else if (inet_pton(AF_INET, host, addr) != 1) {
        goto bad;
    }
    snprintf(cf->listen_host, sizeof(cf->listen_host), "%s", host);
    cf->listen_port = (int)port;
    return 0;
bad:
    errmsg_set(st->em, "%s \"%s\": expected ADDR:PORT (e.g. 127.0.0.1:9000 or [::1]:9000)",
               where, s);
    return -EINVAL;
}

static int finish(struct conf_state *st)
{
    struct conf *cf = st->cf;
    int rc = parse_listen(st);
    if (rc)
        return rc;
    if (!st->set[row_find("dirty-limit", 11) - conf_rows])
        cf->dirty_limit = cf->cache_size / 2;
    if (!cf->backend) {
        char *cwd = getcwd(NULL, 0);
        size_t n;
        if (!cwd) {
            errmsg_set(st->em, "backend: getcwd: %s (set --backend)", strerror(errno));
            return -EINVAL;
        }
        n = strlen(cwd) + sizeof("file:///var/store");
        cf->backend = malloc(n);
        if (!cf->backend) {
            free(cwd);
            errmsg_set(st->em, "backend: out of memory");
            return -ENOMEM;
        }
        snprintf(cf->backend, n, "file://%s/var/store", strcmp(cwd, "/") ? cwd : "");
        free(cwd);
    }
    return 0;
}

int conf_load(struct conf *cf, int argc, char **argv, char **envp, struct errmsg *em)
{
    struct conf_state *st;
    const char *config_path = NULL;
    int rc;
    extern char **environ;

    AN(cf);
    memset(cf, 0, sizeof(*cf));
    st = calloc(1, sizeof(*st));
    if (!st) {
        errmsg_set(em, "out of memory");
        return -ENOMEM;
    }
    st->cf = cf;
    st->em = em;
    if (!envp)
        envp = environ;

    if ((rc = load_defaults(st)))
        goto out;
    if ((rc = load_flags(st, argc, argv, 1, &config_path)))
        goto out;
    if (!config_path) {
        const char *e = env_get(envp, "S3CACHED_CONFIG");
        if (e && *e)
            config_path = e;
    }
    if (config_path && (rc = load_file(st, config_path)))
        goto out;
    if ((rc = load_env(st, envp)))
        goto out;
    if ((rc = load_flags(st, argc, argv, 0, NULL)))
        goto out;
    if (config_path && !cf->config) {
        cf->config = strdup(config_path);
        if (!cf->config) {
            rc = -ENOMEM;
            goto out;
        }
    }
    rc = finish(st);
out:
    free(st);
    if (rc) {
        conf_free(cf);
        return rc == -ENOMEM ? -ENOMEM : -EINVAL;
    }
    return 0;
}

void conf_free(struct conf *cf)
{
    if (!cf)
        return;
    for (size_t i = 0; i < CONF_NROWS; i++) {
        if (conf_rows[i].type == CONF_STR) {
            char **sp = (char **)(void *)((char *)cf + conf_rows[i].off);
            free(*sp);
            *sp = NULL;
        }
    }
}

/* --- placeholder secrets -------------------------------------------------------------- */

/* The values deploy/ ships where a secret goes. They are public: a gateway started with one
 * would take anyone's admin requests (or peer requests, or a client key). */
#define CONF_PLACEHOLDER_PREFIX "replace-with-" /* k8s/secret.yaml, systemd/s3cached.env */
static const char *const conf_placeholders[] = {
    "replace-me",                               /* backend keys of the same files */
    "0123456789abcdef0123456789abcdef01234567", /* secrets/credentials.example */
    "fedcba9876543210fedcba9876543210fedcba98", /* secrets/store_credentials.example */
};

const char *conf_placeholder(const char *value)
{
    if (!value)
        return NULL;
    while (*value == ' ' || *value == '\t')
        value++;
    if (!strncmp(value, CONF_PLACEHOLDER_PREFIX, strlen(CONF_PLACEHOLDER_PREFIX)))
        return "a \"" CONF_PLACEHOLDER_PREFIX "...\" placeholder of deploy/";
    for (size_t i = 0; i < sizeof(conf_placeholders) / sizeof(conf_placeholders[0]); i++)
        if (!strcmp(value, conf_placeholders[i]))
            return i ? "the example key of deploy/secrets/*.example"
                     : "the \"replace-me\" placeholder of deploy/";
    return NULL;
}

int conf_check_secrets(const struct conf *cf, struct errmsg *em)
{
    const struct {
        const char *opt, *env, *value;
    } secrets[] = {
        {"admin-token", "S3CACHED_ADMIN_TOKEN", cf->admin_token},
        {"peer-secret", "S3CACHED_PEER_SECRET", cf->peer_secret},
        {"secret-key", "S3CACHED_SECRET_KEY", cf->secret_key},
        {"backend-access-key", "S3CACHED_BACKEND_ACCESS_KEY", cf->backend_access_key},
        {"backend-secret-key", "S3CACHED_BACKEND_SECRET_KEY", cf->backend_secret_key},
    };
    for (size_t i = 0; i < sizeof(secrets) / sizeof(secrets[0]); i++) {
        const char *what = conf_placeholder(secrets[i].value);
        if (what) {
            errmsg_set(em, "--%s (%s) is %s, which anyone can read: set a value of your own "
                       "(e.g. openssl rand -hex 24)", secrets[i].opt, secrets[i].env, what);
            return -EINVAL;
        }
    }
    return 0;
}

/* --- help and sample ------------------------------------------------------------------ */

/* The help text of @r without an ENUM row's leading word list. */
static const char *row_help(const struct conf_row *r)
{
    if (r->type != CONF_ENUM)
        return r->help;
    return skip_blank(r->help + enum_words_len(r));
}

static void row_metavar(const struct conf_row *r, char *out, size_t n)
{
    switch (r->type) {
    case CONF_STR: snprintf(out, n, "VALUE"); break;
    case CONF_SIZE: snprintf(out, n, "SIZE"); break;
    case CONF_DUR: snprintf(out, n, row_allows_never(r) ? "DURATION|never" : "DURATION"); break;
    case CONF_INT: snprintf(out, n, "N"); break;
    case CONF_BOOL: out[0] = '\0'; break;
    case CONF_ENUM: snprintf(out, n, "%.*s", (int)enum_words_len(r), r->help); break;
    }
}

void conf_print_help(void *file)
{
    FILE *f = file;
    int width = 0;
    char left[CONF_NROWS][96];

    for (size_t i = 0; i < CONF_NROWS; i++) {
        char mv[64];
        row_metavar(&conf_rows[i], mv, sizeof(mv));
        int n = snprintf(left[i], sizeof(left[i]), "--%s%s%s", conf_rows[i].name, *mv ? " " : "",
                         mv);
        width = S3C_MAX(width, n);
    }
    fprintf(f, "Options of `s3cached serve` (also S3CACHED_<OPTION> in the environment and\n"
               "`option = value` lines in the --config file; flag > environment > file > default):\n");
    for (size_t i = 0; i < CONF_NROWS; i++) {
        const struct conf_row *r = &conf_rows[i];
        const char *h = row_help(r);
        fprintf(f, "  %-*s  %s", width, left[i], h);
        if (*r->def)
            fprintf(f, "%s(default: %s)", *h ? " " : "", r->def);
        fputc('\n', f);
    }
    fprintf(f, "Sizes take K, M, G or T (powers of 1024); durations ms, s, m or h (bare = seconds).\n");
}

void conf_print_sample(void *file)
{
    FILE *f = file;
    fprintf(f,
            "# s3cached configuration file.\n"
            "#\n"
            "# Use it with `s3cached serve --config FILE` or S3CACHED_CONFIG=FILE.\n"
            "# One `option = value` a line; `#` starts a comment line; blank lines are\n"
            "# ignored. Option names are the flags without \"--\". Every option can also\n"
            "# be set in the environment as S3CACHED_<OPTION> (upper case, '-' as '_').\n"
            "# Precedence: flag > environment > this file > default.\n"
            "#\n"
            "# Sizes take K, M, G or T (powers of 1024; \"8MiB\" and \"512\" work too).\n"
            "# Durations take ms, s, m or h; a bare number is seconds.\n"
            "# Booleans: true/false, yes/no, on/off, 1/0.\n"
            "#\n"
            "# Every option below is commented out and shows its default value; an\n"
            "# empty value means unset.\n"
            "# Generated by conf_print_sample() (lib/conf.c): keep them in sync.\n");
    for (size_t i = 0; i < CONF_NROWS; i++) {
        const struct conf_row *r = &conf_rows[i];
        if (r->off == offsetof(struct conf, config))
            continue; /* a flag or S3CACHED_CONFIG only */
        fprintf(f, "\n# %s\n", r->help);
        if (*r->def)
            fprintf(f, "# %s = %s\n", r->name, r->def);
        else
            fprintf(f, "# %s =\n", r->name);
    }
}

/* --- docs/configuration.md and docs/s3cached.1 ------------------------------------------ */

/* Writes @s with markdown's '|' as "\|" (a table cell), or with roff's '\' as "\e" and '-' as
 * "\-" when @roff. */
static void put_escaped(FILE *f, const char *s, int roff)
{
    for (; *s; s++) {
        if (roff && *s == '\\')
            fputs("\\e", f);
        else if (roff && *s == '-')
            fputs("\\-", f);
        else if (!roff && *s == '|')
            fputs("\\|", f);
        else
            fputc(*s, f);
    }
}

void conf_print_markdown(void *file)
{
    FILE *f = file;
    fprintf(f, "| option | default | meaning |\n| --- | --- | --- |\n");
    for (size_t i = 0; i < CONF_NROWS; i++) {
        const struct conf_row *r = &conf_rows[i];
        char mv[64];
        row_metavar(r, mv, sizeof(mv));
        fprintf(f, "| `--%s%s", r->name, *mv ? " " : "");
        put_escaped(f, mv, 0);
        fprintf(f, "` | ");
        if (*r->def) {
            fputc('`', f);
            put_escaped(f, r->def, 0);
            fputc('`', f);
        }
        fprintf(f, " | ");
        put_escaped(f, row_help(r), 0);
        fprintf(f, " |\n");
    }
}

void conf_print_man(void *file)
{
    FILE *f = file;
    for (size_t i = 0; i < CONF_NROWS; i++) {
        const struct conf_row *r = &conf_rows[i];
        char mv[64];
        row_metavar(r, mv, sizeof(mv));
        fprintf(f, ".TP\n\\fB\\-\\-");
        put_escaped(f, r->name, 1);
        fputs("\\fR", f);
        if (*mv) {
            fputs(" \\fI", f);
            put_escaped(f, mv, 1);
            fputs("\\fR", f);
        }
        fputs("\n", f);
        const char *h = row_help(r);
        if (*h == '.' || *h == '\'')
            fputs("\\&", f);
        put_escaped(f, h, 1);
        if (*r->def) {
            fputs(*h ? " (default: " : "(default: ", f);
            put_escaped(f, r->def, 1);
            fputc(')', f);
        }
        fputc('\n', f);
    }
}
