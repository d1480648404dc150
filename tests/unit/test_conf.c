/*
 * test_conf.c: value parsers as tables, precedence flag > env > file > default,
 * one-line error messages, listen parsing, derived fields, and that
 * config/s3cached.conf is exactly what conf_print_sample() writes; deploy/'s placeholder
 * secrets refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <cmocka.h>

#include "lib/s3c.h"
#include "lib/conf.h"

static char tmpdir[256];

static int tmpdir_setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_conf.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int tmpdir_teardown(void **state)
{
    char cmd[300];
    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Writes @text to tmpdir/@name; returns the path (static buffer). */
static const char *write_file(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* Rates (need=, x-s3cached-job-need, check --per-gpu): fractions and exponents allowed. */
static void test_conf_rate_units(void **state)
{
    static const struct {
        const char *in;
        uint64_t want;
        const char *err;
    } cases[] = {
        { "2.8e9", 2800000000ULL, NULL },
        { "2.8E9", 2800000000ULL, NULL },
        { "600M", 600ULL << 20, NULL },
        { "600M/s", 600ULL << 20, NULL },
        { "0.6G", 644245094ULL, NULL },
        { "2.8G", 3006477107ULL, NULL },
        { "2.8GiB/s", 3006477107ULL, NULL },
        { " 1.5 K ", 1536, NULL },
        { "100", 100, NULL },
        { "0", 0, NULL },
        { "1e3", 1000, NULL },
        { "12B/s", 12, NULL },
        { "", 0, "empty value" },
        { ".5G", 0, "not a rate (bytes/s, e.g. 2.8G or 2.8e9)" },
        { "1.G", 0, "not a rate (bytes/s, e.g. 2.8G or 2.8e9)" },
        { "-1", 0, "not a rate (bytes/s, e.g. 2.8G or 2.8e9)" },
        { "fast", 0, "not a rate (bytes/s, e.g. 2.8G or 2.8e9)" },
        { "0x10", 0, "unknown unit (use K, M, G or T)" },
        { "inf", 0, "not a rate (bytes/s, e.g. 2.8G or 2.8e9)" },
        { "2Q", 0, "unknown unit (use K, M, G or T)" },
        { "2Gi", 0, "unknown unit (use K, M, G or T)" },
        { "2G/m", 0, "unknown unit (use K, M, G or T)" },
        { "1e30", 0, "too large" },
        { "20000000T", 0, "too large" },
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        uint64_t got = 7;
        const char *err = conf_parse_rate(cases[i].in, &got);
        if (cases[i].err) {
            if (!err || strcmp(err, cases[i].err))
                fail_msg("\"%s\": error \"%s\", want \"%s\"", cases[i].in, err ? err : "(none)",
                         cases[i].err);
        } else if (err || got != cases[i].want) {
            fail_msg("\"%s\": got %llu (%s), want %llu", cases[i].in, (unsigned long long)got,
                     err ? err : "ok", (unsigned long long)cases[i].want);
        }
    }
}

static void test_conf_size_suffixes(void **state)
{
    static const struct {
        const char *in;
        uint64_t want;
        const char *err;
    } cases[] = {
        { "512", 512, NULL },
        { "0", 0, NULL },
        { "4K", 4096, NULL },
        { "4k", 4096, NULL },
        { "10G", 10ULL << 30, NULL },
        { "8MiB", 8ULL << 20, NULL },
        { "8mib", 8ULL << 20, NULL },
        { "8MB", 8ULL << 20, NULL },
        { "8M", 8ULL << 20, NULL },
        { "5T", 5ULL << 40, NULL },
        { "512B", 512, NULL },
        { "512b", 512, NULL },
        { " 64K ", 64ULL << 10, NULL },
        { "10 G", 10ULL << 30, NULL },
        { "16777215T", 16777215ULL << 40, NULL },
        { "18446744073709551615", UINT64_MAX, NULL },
        { "1.5G", 0, "fractional sizes are not allowed" },
        { "1,5G", 0, "fractional sizes are not allowed" },
        { "12Q", 0, "unknown unit (use K, M, G or T)" },
        { "12KQ", 0, "unknown unit (use K, M, G or T)" },
        { "12Ki", 0, "unknown unit (use K, M, G or T)" },
        { "12 K B", 0, "unknown unit (use K, M, G or T)" },
        { "12BB", 0, "unknown unit (use K, M, G or T)" },
        { "x", 0, "not a size" },
        { "-1", 0, "not a size" },
        { "G", 0, "not a size" },
        { "", 0, "empty value" },
        { "   ", 0, "empty value" },
        { "16777216T", 0, "too large" },
        { "18446744073709551616", 0, "too large" },
        { "99999999999999999999999", 0, "too large" },
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        uint64_t got = 777;
        const char *err = conf_parse_size(cases[i].in, &got);
        if (cases[i].err) {
            if (!err || strcmp(err, cases[i].err))
                fail_msg("\"%s\": err \"%s\", want \"%s\"", cases[i].in, err ? err : "(null)",
                         cases[i].err);
            assert_int_equal(got, 777);
        } else {
            if (err)
                fail_msg("\"%s\": unexpected error \"%s\"", cases[i].in, err);
            assert_int_equal(got, cases[i].want);
        }
    }
}

static void test_conf_durations(void **state)
{
    static const struct {
        const char *in;
        int64_t want;
        const char *err;
    } cases[] = {
        { "0", 0, NULL },
        { "30", 30000, NULL },
        { "30s", 30000, NULL },
        { "500ms", 500, NULL },
        { "500MS", 500, NULL },
        { "2m", 120000, NULL },
        { "1h", 3600000, NULL },
        { " 10 s ", 10000, NULL },
        { "0ms", 0, NULL },
        { "1.5s", 0, "fractional durations are not allowed (use ms)" },
        { "10d", 0, "unknown unit (use ms, s, m or h)" },
        { "10sec", 0, "unknown unit (use ms, s, m or h)" },
        { "never", 0, "not a duration" },
        { "-1", 0, "not a duration" },
        { "s", 0, "not a duration" },
        { "", 0, "empty value" },
        { "9223372036854775807ms", INT64_MAX, NULL },
        { "9223372036854775808ms", 0, "too large" },
        { "9223372036854776s", 0, "too large" },
        { "99999999999999999999999", 0, "too large" },
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        int64_t got = 777;
        const char *err = conf_parse_duration_ms(cases[i].in, &got);
        if (cases[i].err) {
            if (!err || strcmp(err, cases[i].err))
                fail_msg("\"%s\": err \"%s\", want \"%s\"", cases[i].in, err ? err : "(null)",
                         cases[i].err);
        } else {
            if (err)
                fail_msg("\"%s\": unexpected error \"%s\"", cases[i].in, err);
            assert_int_equal(got, cases[i].want);
        }
    }
}

static void test_conf_bools(void **state)
{
    static const struct {
        const char *in;
        int want;
        int ok;
    } cases[] = {
        { "true", 1, 1 }, { "TRUE", 1, 1 }, { "yes", 1, 1 }, { "on", 1, 1 },  { "1", 1, 1 },
        { "false", 0, 1 }, { "No", 0, 1 }, { "off", 0, 1 },  { "0", 0, 1 },   { " true ", 1, 1 },
        { "", 0, 0 },      { "2", 0, 0 },  { "truee", 0, 0 }, { "y", 0, 0 },  { "enabled", 0, 0 },
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        int got = 7;
        const char *err = conf_parse_bool(cases[i].in, &got);
        if (cases[i].ok) {
            if (err)
                fail_msg("\"%s\": %s", cases[i].in, err);
            assert_int_equal(got, cases[i].want);
        } else if (!err) {
            fail_msg("\"%s\": accepted", cases[i].in);
        }
    }
}

static int load(struct conf *cf, struct errmsg *em, char **envp, int argc, ...)
{
    char *argv[32];
    va_list ap;
    va_start(ap, argc);
    for (int i = 0; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    em->buf[0] = '\0';
    return conf_load(cf, argc, argv, envp, em);
}

static void test_conf_defaults(void **state)
{
    struct conf cf;
    struct errmsg em;
    char *envp[] = { NULL };
    char cwd[4096], want[4200];
    (void)state;
    assert_int_equal(load(&cf, &em, envp, 0), 0);
    assert_null(cf.config);
    assert_string_equal(cf.listen, "127.0.0.1:9000");
    assert_string_equal(cf.listen_host, "127.0.0.1");
    assert_int_equal(cf.listen_port, 9000);
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    snprintf(want, sizeof(want), "file://%s/var/store", cwd);
    assert_string_equal(cf.backend, want);
    assert_string_equal(cf.backend_region, "us-east-1");
    assert_int_equal(cf.backend_virtual_host, 0);
    assert_int_equal(cf.backend_timeout, 30000);
    assert_string_equal(cf.cache_dir, "./var/cache");
    assert_int_equal(cf.cache_size, 10ULL << 30);
    assert_int_equal(cf.dirty_limit, 5ULL << 30);
    assert_null(cf.access_key);
    assert_int_equal(cf.write_mode, CONF_WRITE_THROUGH);
    assert_int_equal(cf.block_size, 8ULL << 20);
    assert_int_equal(cf.readahead, 16ULL << 20);
    assert_int_equal(cf.revalidate_after, 60000);
    assert_int_equal(cf.revalidate_never, 0);
    assert_int_equal(cf.warm_concurrency, 4);
    assert_int_equal(cf.client_rate_limit, 0);
    assert_int_equal(cf.max_connections, 4096);
    assert_int_equal(cf.max_object_size, 5ULL << 40);
    assert_int_equal(cf.log_level, CONF_LOG_INFO);
    assert_int_equal(cf.log_format, CONF_LOG_TEXT);
    conf_free(&cf);
    assert_null(cf.listen);
    conf_free(&cf); /* twice is harmless */
    conf_free(NULL);
}

static void test_conf_precedence(void **state)
{
    struct conf cf;
    struct errmsg em;
    const char *path = write_file("p.conf", "# comment\n"
                                            "\n"
                                            "cache-size = 1G\n"
                                            "  listen=127.0.0.1:9100  \n"
                                            "region = \"eu-west-1\"\n"
                                            "write-mode = back\n"
                                            "block-size = 1M\n"
                                            "anonymous = yes\n"
                                            "backend-access-key =\n"
                                            "admin-token = a#b = c\n");
    char envcfg[600];
    snprintf(envcfg, sizeof(envcfg), "S3CACHED_CONFIG=%s", path);
    char *envp[] = { envcfg, "S3CACHED_CACHE_SIZE=2G", "S3CACHED_LISTEN=127.0.0.1:9200",
                     "S3CACHED_LOG_LEVEL=debug", "S3CACHED_BIN=/ignored", "S3CACHED_READAHEAD=",
                     "PATH=/bin", NULL };
    (void)state;

    /* file only (path from the environment) */
    char *env_file_only[] = { envcfg, NULL };
    assert_int_equal(load(&cf, &em, env_file_only, 0), 0);
    assert_string_equal(cf.config, path);
    assert_int_equal(cf.cache_size, 1ULL << 30);
    assert_int_equal(cf.dirty_limit, 512ULL << 20);
    assert_int_equal(cf.listen_port, 9100);
    assert_string_equal(cf.region, "eu-west-1");
    assert_int_equal(cf.write_mode, CONF_WRITE_BACK);
    assert_int_equal(cf.block_size, 1ULL << 20);
    assert_int_equal(cf.anonymous, 1);
    assert_null(cf.backend_access_key);
    assert_string_equal(cf.admin_token, "a#b = c");
    conf_free(&cf);

    /* env over file */
    assert_int_equal(load(&cf, &em, envp, 0), 0);
    assert_int_equal(cf.cache_size, 2ULL << 30);
    assert_int_equal(cf.listen_port, 9200);
    assert_int_equal(cf.log_level, CONF_LOG_DEBUG);
    assert_int_equal(cf.readahead, 16ULL << 20); /* empty env var: unset */
    assert_int_equal(cf.write_mode, CONF_WRITE_BACK);  /* file still applies */
    conf_free(&cf);

    /* flags over env, both flag forms, bare bool */
    assert_int_equal(load(&cf, &em, envp, 7, "--cache-size", "3G", "--listen=[::1]:9300",
                          "--backend-insecure", "--anonymous", "off", "--no-backend-virtual-host"),
                     0);
    assert_int_equal(cf.cache_size, 3ULL << 30);
    assert_int_equal(cf.dirty_limit, 3ULL << 29);
    assert_string_equal(cf.listen_host, "::1");
    assert_int_equal(cf.listen_port, 9300);
    assert_int_equal(cf.backend_insecure, 1);
    assert_int_equal(cf.anonymous, 0);
    assert_int_equal(cf.backend_virtual_host, 0);
    assert_int_equal(cf.log_level, CONF_LOG_DEBUG);
    assert_string_equal(cf.source, "flag");
    conf_free(&cf);

    /* --config overrides S3CACHED_CONFIG; the last flag wins; explicit dirty-limit kept */
    const char *p2 = write_file("q.conf", "cache-size = 4G\ndirty-limit = 100M\n");
    char p2copy[512];
    snprintf(p2copy, sizeof(p2copy), "%s", p2);
    assert_int_equal(load(&cf, &em, env_file_only, 4, "--config", p2copy, "--threads=2",
                          "--threads=3"),
                     0);
    assert_string_equal(cf.config, p2copy);
    assert_int_equal(cf.cache_size, 4ULL << 30);
    assert_int_equal(cf.dirty_limit, 100ULL << 20);
    assert_int_equal(cf.threads, 3);
    assert_string_equal(cf.region, "us-east-1");
    conf_free(&cf);

    /* revalidate-after never, then a later source resets it */
    char *env_never[] = { "S3CACHED_REVALIDATE_AFTER=never", NULL };
    assert_int_equal(load(&cf, &em, env_never, 0), 0);
    assert_int_equal(cf.revalidate_never, 1);
    assert_int_equal(cf.revalidate_after, -1);
    conf_free(&cf);
    assert_int_equal(load(&cf, &em, env_never, 2, "--revalidate-after", "0"), 0);
    assert_int_equal(cf.revalidate_never, 0);
    assert_int_equal(cf.revalidate_after, 0);
    conf_free(&cf);
}

/* --keep-prefix / --lru-prefix: given again by one source, the lists add up; a source of
 * higher precedence still replaces them. */
static void test_conf_lists(void **state)
{
    struct conf cf;
    struct errmsg em;
    const char *path = write_file("l.conf", "keep-prefix = data/train/\n"
                                            "keep-prefix = other\n"
                                            "lru-prefix = data/val/\n");
    char envcfg[600];
    snprintf(envcfg, sizeof(envcfg), "S3CACHED_CONFIG=%s", path);
    char *env_file[] = { envcfg, NULL };
    char *env_list[] = { envcfg, "S3CACHED_KEEP_PREFIX=a/x,b", NULL };
    (void)state;
    assert_int_equal(load(&cf, &em, env_file, 0), 0);
    assert_string_equal(cf.keep_prefix, "data/train/,other");
    assert_string_equal(cf.lru_prefix, "data/val/");
    assert_int_equal(cf.keep_auto, 1);
    assert_int_equal(cf.keep_idle, 15 * 60 * 1000);
    conf_free(&cf);
    assert_int_equal(load(&cf, &em, env_list, 0), 0);
    assert_string_equal(cf.keep_prefix, "a/x,b"); /* the environment replaces the file's */
    conf_free(&cf);
    assert_int_equal(load(&cf, &em, env_list, 7, "--keep-prefix", "f/1", "--keep-prefix=f/2,f/3",
                          "--keep-auto", "false", "--keep-idle", "90s"),
                     0);
    assert_string_equal(cf.keep_prefix, "f/1,f/2,f/3");
    assert_string_equal(cf.lru_prefix, "data/val/");
    assert_int_equal(cf.keep_auto, 0);
    assert_int_equal(cf.keep_idle, 90000);
    conf_free(&cf);
}

static void test_conf_errors(void **state)
{
    struct conf cf;
    struct errmsg em;
    char *envp[] = { NULL };
    const char *bad = write_file("bad.conf", "# ok\ncache-size = 1G\n\n\n\n\ncache-size = x\n");
    char badp[512], want[700];
    snprintf(badp, sizeof(badp), "%s", bad);
    (void)state;

    static const struct {
        int argc;
        const char *argv[4];
        const char *msg;
    } cases[] = {
        { 2, { "--cache-size", "12Q" }, "--cache-size \"12Q\": unknown unit (use K, M, G or T)" },
        { 1, { "--cache-size=1.5G" }, "--cache-size \"1.5G\": fractional sizes are not allowed" },
        { 1, { "--cache-size" }, "--cache-size: missing value" },
        { 2, { "--cache-size", "--anonymous" }, "--cache-size: missing value" },
        { 1, { "--cach-size=1G" }, "unknown option \"--cach-size\" (did you mean --cache-size?)" },
        { 1, { "--frobnicate" }, "unknown option \"--frobnicate\" (see `s3cached help`)" },
        { 1, { "--no-cache-size" }, "--no-cache-size: --cache-size is not a boolean option" },
        { 1, { "--no-anonymous=1" }, "--no-anonymous: takes no value" },
        { 1, { "serve" }, "unexpected argument \"serve\" (options start with --)" },
        { 1, { "--" }, "unexpected argument \"--\" (options start with --)" },
        { 2, { "--write-mode", "sideways" }, "--write-mode \"sideways\": use one of through|back" },
        { 1, { "--log-level=trace" }, "--log-level \"trace\": use one of error|warn|info|debug" },
        { 1, { "--log-format=xml" }, "--log-format \"xml\": use one of text|json" },
        { 1, { "--anonymous=maybe" }, "--anonymous \"maybe\": not a boolean (use true or false)" },
        { 2, { "--threads", "-1" }, "--threads \"-1\": not a number (use 0 or more)" },
        { 2, { "--threads", "4x" }, "--threads \"4x\": not a number (use 0 or more)" },
        { 2, { "--idle-timeout", "never" }, "--idle-timeout \"never\": not a duration" },
        { 2, { "--revalidate-after", "soon" },
          "--revalidate-after \"soon\": not a duration (e.g. 60s, 5m, 1h or never)" },
        { 2, { "--listen", "9000" },
          "--listen \"9000\": expected ADDR:PORT (e.g. 127.0.0.1:9000 or [::1]:9000)" },
        { 2, { "--listen", "1.2.3.4:0" }, "--listen \"1.2.3.4:0\": port must be 1..65535" },
        { 2, { "--listen", "1.2.3.4:65536" }, "--listen \"1.2.3.4:65536\": port must be 1..65535" },
        { 2, { "--listen", "1.2.3.4:" }, "--listen \"1.2.3.4:\": port must be 1..65535" },
        { 2, { "--listen", "1.2.3.4:80x" }, "--listen \"1.2.3.4:80x\": port must be 1..65535" },
        { 2, { "--listen", "::1:9000" },
          "--listen \"::1:9000\": expected ADDR:PORT (e.g. 127.0.0.1:9000 or [::1]:9000)" },
        { 2, { "--listen", "[::1]9000" },
          "--listen \"[::1]9000\": expected ADDR:PORT (e.g. 127.0.0.1:9000 or [::1]:9000)" },
        { 2, { "--listen", "[1.2.3.4]:9000" },
          "--listen \"[1.2.3.4]:9000\": expected ADDR:PORT (e.g. 127.0.0.1:9000 or [::1]:9000)" },
        { 2, { "--listen", "300.1.1.1:9000" },
          "--listen \"300.1.1.1:9000\": expected ADDR:PORT (e.g. 127.0.0.1:9000 or [::1]:9000)" },
        { 2, { "--listen", "example.com:9000" },
          "--listen \"example.com:9000\": expected ADDR:PORT (e.g. 127.0.0.1:9000 or [::1]:9000)" },
        { 2, { "--config", "/nonexistent/x.conf" },
          "config file \"/nonexistent/x.conf\": No such file or directory" },
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        int rc = conf_load(&cf, cases[i].argc, (char **)cases[i].argv, envp, &em);
        if (rc != -EINVAL || strcmp(em.buf, cases[i].msg))
            fail_msg("case %zu: rc %d \"%s\", want \"%s\"", i, rc, em.buf, cases[i].msg);
        assert_null(cf.listen); /* freed on failure */
    }

    /* file errors name file:line */
    assert_int_equal(load(&cf, &em, envp, 2, "--config", badp), -EINVAL);
    snprintf(want, sizeof(want), "%s:7: cache-size \"x\": not a size", badp);
    assert_string_equal(em.buf, want);

    static const struct {
        const char *text;
        const char *msg; /* after "PATH:LINE: " */
    } fcases[] = {
        { "cache-size 10G\n", "1: expected \"key = value\", got \"cache-size 10G\"" },
        { "\n cache-sise = 1G\n", "2: unknown option \"cache-sise\" (did you mean cache-size?)" },
        { "config = /x\n", "1: config: cannot be set in a config file" },
        { "write-mode = fast\n", "1: write-mode \"fast\": use one of through|back" },
        { "listen = 1.2.3.4\n", "1: listen \"1.2.3.4\": expected ADDR:PORT (e.g. 127.0.0.1:9000 or [::1]:9000)" },
    };
    for (size_t i = 0; i < ARRAY_SIZE(fcases); i++) {
        const char *p = write_file("f.conf", fcases[i].text);
        char pc[512];
        snprintf(pc, sizeof(pc), "%s", p);
        assert_int_equal(load(&cf, &em, envp, 1, "--config=/dev/null"), 0);
        conf_free(&cf);
        char *env[] = { NULL, NULL };
        char e0[600];
        snprintf(e0, sizeof(e0), "S3CACHED_CONFIG=%s", pc);
        env[0] = e0;
        assert_int_equal(load(&cf, &em, env, 0), -EINVAL);
        snprintf(want, sizeof(want), "%s:%s", pc, fcases[i].msg);
        assert_string_equal(em.buf, want);
    }

    /* env errors name the variable */
    char *env_bad[] = { "S3CACHED_BLOCK_SIZE=lots", NULL };
    assert_int_equal(load(&cf, &em, env_bad, 0), -EINVAL);
    assert_string_equal(em.buf, "S3CACHED_BLOCK_SIZE \"lots\": not a size");
    /* a NULL errmsg is fine */
    char *av[] = { "--bogus" };
    assert_int_equal(conf_load(&cf, 1, av, envp, NULL), -EINVAL);
}

/* Every word of an ENUM row is parsed once into the enum constant of the same position. */
static void test_conf_enums(void **state)
{
    static const struct { const char *flag; size_t off; int want; } cases[] = {
        { "--write-mode=through", offsetof(struct conf, write_mode), CONF_WRITE_THROUGH },
        { "--write-mode=back", offsetof(struct conf, write_mode), CONF_WRITE_BACK },
        { "--miss-source=auto", offsetof(struct conf, miss_source), CONF_MISS_AUTO },
        { "--miss-source=backend", offsetof(struct conf, miss_source), CONF_MISS_BACKEND },
        { "--miss-source=cache", offsetof(struct conf, miss_source), CONF_MISS_CACHE },
        { "--log-level=error", offsetof(struct conf, log_level), CONF_LOG_ERROR },
        { "--log-level=warn", offsetof(struct conf, log_level), CONF_LOG_WARN },
        { "--log-level=info", offsetof(struct conf, log_level), CONF_LOG_INFO },
        { "--log-level=debug", offsetof(struct conf, log_level), CONF_LOG_DEBUG },
        { "--log-format=text", offsetof(struct conf, log_format), CONF_LOG_TEXT },
        { "--log-format=json", offsetof(struct conf, log_format), CONF_LOG_JSON },
    };
    char *envp[] = { NULL };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct conf cf;
        struct errmsg em = {{0}};
        char *av[] = { (char *)cases[i].flag };
        assert_int_equal(conf_load(&cf, 1, av, envp, &em), 0);
        int got;
        memcpy(&got, (char *)&cf + cases[i].off, sizeof(got));
        if (got != cases[i].want)
            fail_msg("%s: %d, want %d", cases[i].flag, got, cases[i].want);
        conf_free(&cf);
    }
}

static void test_conf_listen(void **state)
{
    static const struct {
        const char *in;
        const char *host;
        int port;
    } cases[] = {
        { "127.0.0.1:9000", "127.0.0.1", 9000 },
        { "0.0.0.0:1", "0.0.0.0", 1 },
        { "10.1.2.3:65535", "10.1.2.3", 65535 },
        { "[::1]:9000", "::1", 9000 },
        { "[::]:80", "::", 80 },
        { "[fe80::1:2]:8080", "fe80::1:2", 8080 },
        { ":9000", "0.0.0.0", 9000 },
        { "*:9000", "0.0.0.0", 9000 },
        { "localhost:9000", "127.0.0.1", 9000 },
    };
    char *envp[] = { NULL };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct conf cf;
        struct errmsg em;
        char arg[128];
        snprintf(arg, sizeof(arg), "--listen=%s", cases[i].in);
        if (load(&cf, &em, envp, 1, arg) != 0)
            fail_msg("%s: %s", cases[i].in, em.buf);
        assert_string_equal(cf.listen_host, cases[i].host);
        assert_int_equal(cf.listen_port, cases[i].port);
        conf_free(&cf);
    }
}

static char *capture_p;
static size_t capture_n;

static char *capture(void (*fn)(void *))
{
    char *p;
    capture_p = NULL;
    capture_n = 0;
    FILE *f = open_memstream(&capture_p, &capture_n);
    assert_non_null(f);
    fn(f);
    fclose(f);
    p = capture_p;
    capture_p = NULL;
    return p;
}

static void test_conf_help(void **state)
{
    char *h = capture(conf_print_help);
    (void)state;
#define X(name, type, field, def, help) assert_non_null(strstr(h, "--" name));
    CONF_TABLE(X)
#undef X
    assert_non_null(strstr(h, "--cache-size SIZE"));
    assert_non_null(strstr(h, "(default: 10G)"));
    assert_non_null(strstr(h, "--write-mode through|back"));
    assert_non_null(strstr(h, "--revalidate-after DURATION|never"));
    /* aligned: every option line has its help starting in the same column */
    int col = -1;
    for (char *line = strstr(h, "\n  --"); line; line = strstr(line + 1, "\n  --")) {
        char *sp = strstr(line + 3, "  ");
        assert_non_null(sp);
        while (*sp == ' ')
            sp++;
        int c = (int)(sp - line);
        if (col < 0)
            col = c;
        assert_int_equal(c, col);
    }
    free(h);
}

/* The committed sample equals conf_print_sample(), and with every option uncommented it
 * loads to exactly the defaults. */
static void test_conf_sample(void **state)
{
    char *s = capture(conf_print_sample);
    char path[1024];
    const char *slash = strrchr(__FILE__, '/');
    (void)state;
    snprintf(path, sizeof(path), "%.*s/../../config/s3cached.conf",
             slash ? (int)(slash - __FILE__) : 1, slash ? __FILE__ : ".");
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s (regenerate it with conf_print_sample)", path);
    char *file = NULL;
    size_t cap = 0;
    ssize_t n = getdelim(&file, &cap, '\0', f);
    fclose(f);
    assert_true(n > 0);
    if (strcmp(file, s) != 0)
        fail_msg("config/s3cached.conf differs from conf_print_sample(): regenerate it");
    free(file);

    /* uncomment "# key = value" lines */
    char *un = malloc(strlen(s) + 1), *o = un;
    for (char *line = s; *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line + 1) : strlen(line);
        char *eq = memchr(line, '=', len);
        if (len > 2 && line[0] == '#' && line[1] == ' ' && line[2] >= 'a' && line[2] <= 'z' &&
            eq && !memchr(line + 2, ' ', (size_t)(eq - line - 3))) {
            memcpy(o, line + 2, len - 2);
            o += len - 2;
        } else {
            memcpy(o, line, len);
            o += len;
        }
        line += len;
    }
    *o = '\0';
    assert_non_null(strstr(un, "\ncache-size = 10G\n"));
    const char *p = write_file("sample.conf", un);
    char pc[512];
    snprintf(pc, sizeof(pc), "%s", p);
    struct conf a, b;
    struct errmsg em;
    char *envp[] = { NULL };
    if (load(&a, &em, envp, 2, "--config", pc))
        fail_msg("sample: %s", em.buf);
    assert_int_equal(load(&b, &em, envp, 0), 0);
#define X(name, type, field, def, help) CMP_##type(field);
#define CMP_STR(f)                                                                            \
    if (a.f || b.f)                                                                           \
        assert_string_equal(a.f, b.f);
#define CMP_ENUM(f) assert_int_equal(a.f, b.f);
#define CMP_SIZE(f) assert_int_equal(a.f, b.f);
#define CMP_DUR(f) assert_int_equal(a.f, b.f);
#define CMP_INT(f) assert_int_equal(a.f, b.f);
#define CMP_BOOL(f) assert_int_equal(a.f, b.f);
    free(a.config);
    a.config = NULL;
    CONF_TABLE(X)
#undef X
    conf_free(&a);
    conf_free(&b);
    free(un);
    free(s);
}

/* The stand-in secrets deploy/ ships are refused by `serve` (conf_check_secrets()); a secret
 * that merely contains "replace" is not a placeholder. */
static void test_conf_placeholder_secrets(void **state)
{
    static const struct {
        const char *value;
        int placeholder;
    } cases[] = {
        {"replace-with-openssl-rand-hex-24", 1},          /* k8s/secret.yaml, systemd env */
        {"replace-with-40-hex-chars-0000000000000000", 1}, /* k8s/secret.yaml credentials */
        {"replace-me", 1},
        {"0123456789abcdef0123456789abcdef01234567", 1}, /* secrets/credentials.example */
        {"fedcba9876543210fedcba9876543210fedcba98", 1}, /* secrets/store_credentials.example */
        {"9f2c4e0b7a1d3c5e8f60718293a4b5c6d7e8f9011223", 0},
        {"replace-mee", 0}, {"my-replace-with-x", 0}, {"", 0}, {NULL, 0},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (!conf_placeholder(cases[i].value) != !cases[i].placeholder)
            fail_msg("\"%s\": placeholder %d expected", cases[i].value ? cases[i].value : "(null)",
                     cases[i].placeholder);
    static const char *const opts[] = {"--admin-token", "--peer-secret", "--secret-key",
                                       "--backend-access-key", "--backend-secret-key"};
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
        struct conf cf;
        struct errmsg em;
        char *envp[] = {NULL};
        assert_int_equal(load(&cf, &em, envp, 2, (char *)opts[i], "replace-with-openssl-rand-hex-24"),
                         0);
        assert_int_equal(conf_check_secrets(&cf, &em), -EINVAL);
        if (!strstr(em.buf, opts[i]) || !strstr(em.buf, "placeholder"))
            fail_msg("%s: message \"%s\"", opts[i], em.buf);
        conf_free(&cf);
        assert_int_equal(load(&cf, &em, envp, 2, (char *)opts[i], "a-secret-of-my-own-0123456789"),
                         0);
        assert_int_equal(conf_check_secrets(&cf, &em), 0);
        conf_free(&cf);
    }
    struct conf cf;
    struct errmsg em;
    char *envp[] = {"S3CACHED_ADMIN_TOKEN=replace-with-openssl-rand-hex-24", NULL};
    assert_int_equal(load(&cf, &em, envp, 0), 0);
    assert_int_equal(conf_check_secrets(&cf, &em), -EINVAL);
    if (!strstr(em.buf, "S3CACHED_ADMIN_TOKEN"))
        fail_msg("message \"%s\"", em.buf);
    conf_free(&cf);
}

/* The text of the committed file @rel (from the repository root) between the line starting
 * with @begin and the line starting with @end, or NULL when a marker is missing. */
static char *generated_block(const char *rel, const char *begin, const char *end)
{
    char path[1024];
    const char *slash = strrchr(__FILE__, '/');
    snprintf(path, sizeof(path), "%.*s/../../%s", slash ? (int)(slash - __FILE__) : 1,
             slash ? __FILE__ : ".", rel);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s (make docs writes it)", path);
    char *file = NULL;
    size_t cap = 0;
    ssize_t n = getdelim(&file, &cap, '\0', f);
    fclose(f);
    assert_true(n > 0);
    char *b = NULL, *e = NULL;
    for (char *line = file; !e && *line;) {
        char *nl = strchr(line, '\n');
        if (!b && !strncmp(line, begin, strlen(begin)))
            b = nl ? nl + 1 : NULL;
        else if (b && !strncmp(line, end, strlen(end)))
            e = line;
        if (!nl)
            break;
        line = nl + 1;
    }
    char *out = b && e ? strndup(b, (size_t)(e - b)) : NULL;
    free(file);
    return out;
}

/* docs/configuration.md and docs/s3cached.1 hold exactly what `s3cached help --markdown` and
 * `help --man` write from CONF_TABLE between their GENERATED markers: a row added to the
 * table without `make docs` fails here. */
static void test_conf_docs(void **state)
{
    static const struct {
        const char *path, *begin, *end;
        void (*fn)(void *);
    } docs[] = {
        {"docs/configuration.md", "<!-- BEGIN GENERATED", "<!-- END GENERATED",
         conf_print_markdown},
        {"docs/s3cached.1", ".\\\" BEGIN GENERATED", ".\\\" END GENERATED", conf_print_man},
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(docs); i++) {
        char *want = capture(docs[i].fn);
        char *have = generated_block(docs[i].path, docs[i].begin, docs[i].end);
        if (!have)
            fail_msg("%s: no %s ... %s markers", docs[i].path, docs[i].begin, docs[i].end);
        if (strcmp(have, want) != 0)
            fail_msg("%s differs from the option table (CONF_TABLE): run make docs", docs[i].path);
        free(have);
        free(want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conf_size_suffixes),
        cmocka_unit_test(test_conf_rate_units),
        cmocka_unit_test(test_conf_durations),
        cmocka_unit_test(test_conf_bools),
        cmocka_unit_test(test_conf_defaults),
        cmocka_unit_test(test_conf_precedence),
        cmocka_unit_test(test_conf_lists),
        cmocka_unit_test(test_conf_enums),
        cmocka_unit_test(test_conf_errors),
        cmocka_unit_test(test_conf_listen),
        cmocka_unit_test(test_conf_help),
        cmocka_unit_test(test_conf_sample),
        cmocka_unit_test(test_conf_placeholder_secrets),
        cmocka_unit_test(test_conf_docs),
    };
    return cmocka_run_group_tests_name("conf", tests, tmpdir_setup, tmpdir_teardown);
}
