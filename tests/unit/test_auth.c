/*
 * test_auth.c: http/auth.c without a server. The credentials file (a table of good and bad
 * files: comments, admin, rate=, the line of an error), its reload (the new table replaces the
 * old one whole; a bad file keeps the old one), --access-key/--secret-key, admin keys, the
 * bearer token of the admin endpoints, per-key rates, --anonymous (and what it still takes
 * from a signature it cannot check), the generated pair in CACHE_DIR/credentials (made once,
 * its secret shown once); and auth_check() on requests signed here with sigv4_sign() and
 * with SigV2 (HMAC-SHA1 computed here), virtual-hosted included. A mkdtemp directory per test.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "http/auth.h"
#include "http/req.h"
#include "lib/conf.h"
#include "lib/s3c.h"
#include "lib/s3err.h"
#include "sig/sigv4.h"

#define UNSIGNED "UNSIGNED-PAYLOAD"

struct env {
    char dir[256];
    char cred[300]; /* DIR/keys */
    struct conf cf;
    struct auth *a;
};

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_auth.XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    snprintf(e->cred, sizeof(e->cred), "%s/keys", e->dir);
    e->cf.cache_dir = e->dir;
    e->cf.region = "us-east-1";
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    char cmd[512];
    auth_free(e->a);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->dir);
    assert_int_equal(system(cmd), 0);
    free(e);
    return 0;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* auth_new() with cf.credentials = @text written to DIR/keys (NULL: no file). */
static int open_with(struct env *e, const char *text, struct errmsg *em)
{
    auth_free(e->a);
    e->a = NULL;
    if (text) {
        write_file(e->cred, text);
        e->cf.credentials = e->cred;
    } else {
        e->cf.credentials = NULL;
    }
    return auth_new(&e->cf, &e->a, em);
}

/* ---- requests ------------------------------------------------------------------------------ */

struct treq {
    struct req rq;
    struct sigv4_kv h[8];
    struct sigv4_kv q[4];
    char date[40], authz[512], path[256], raw[256];
};

static void treq_init(struct treq *t, const char *method, const char *path, enum op op)
{
    memset(t, 0, sizeof(*t));
    t->rq.magic = REQ_MAGIC;
    t->rq.method = method;
    snprintf(t->path, sizeof(t->path), "%s", path);
    snprintf(t->raw, sizeof(t->raw), "%s", path);
    t->rq.path = t->path;
    t->rq.raw_path = t->raw;
    t->rq.op = op;
    t->rq.headers = t->h;
    t->rq.query = t->q;
    t->rq.auth.payload = SIGV4_PAYLOAD_UNSIGNED;
}

static void treq_header(struct treq *t, const char *name, const char *value)
{
    assert_true(t->rq.n_headers < ARRAY_SIZE(t->h));
    t->h[t->rq.n_headers].name = name;
    t->h[t->rq.n_headers].value = value;
    t->rq.n_headers++;
}

/* A SigV4 header-signed request of @ak/@sk for @region, dated now; @payload is the value of
 * x-amz-content-sha256. */
static void sign_v4(struct treq *t, const char *ak, const char *sk, const char *region,
                    const char *payload)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(t->date, sizeof(t->date), "%Y%m%dT%H%M%SZ", &tm);
    treq_header(t, "Host", "127.0.0.1:9000");
    treq_header(t, "x-amz-date", t->date);
    treq_header(t, "x-amz-content-sha256", payload);
    struct sigv4_input in = {.method = t->rq.method, .path = t->rq.path, .query = t->rq.query,
                             .n_query = t->rq.n_query, .headers = t->rq.headers,
                             .n_headers = t->rq.n_headers};
    assert_int_equal(sigv4_sign(&in, ak, sk, region, "s3", t->date, payload, t->authz,
                                sizeof(t->authz)),
                     0);
    treq_header(t, "Authorization", t->authz);
}

/* A SigV2 header-signed request of @ak/@sk over the canonical resource @resource. */
static void sign_v2(struct treq *t, const char *ak, const char *sk, const char *resource)
{
    time_t now = time(NULL);
    struct tm tm;
    char sts[512], b64[64];
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int ml = 0;
    gmtime_r(&now, &tm);
    strftime(t->date, sizeof(t->date), "%a, %d %b %Y %H:%M:%S +0000", &tm);
    treq_header(t, "Date", t->date);
    snprintf(sts, sizeof(sts), "%s\n\n\n%s\n%s", t->rq.method, t->date, resource);
    assert_non_null(HMAC(EVP_sha1(), sk, (int)strlen(sk), (const unsigned char *)sts,
                         strlen(sts), mac, &ml));
    EVP_EncodeBlock((unsigned char *)b64, mac, (int)ml);
    snprintf(t->authz, sizeof(t->authz), "AWS %s:%s", ak, b64);
    treq_header(t, "Authorization", t->authz);
}

/* auth_check() of a GET /bkt/k signed by @ak/@sk: the result, *@admin the admin right. */
static int check_key(struct env *e, const char *ak, const char *sk, int *admin)
{
    struct treq t;
    struct errmsg em = {""};
    treq_init(&t, "GET", "/bkt/k", OP_GET);
    sign_v4(&t, ak, sk, "us-east-1", UNSIGNED);
    int rc = auth_check(e->a, &t.rq, &em);
    if (!rc)
        assert_string_equal(t.rq.access_key, ak);
    if (admin)
        *admin = t.rq.is_admin;
    return rc;
}

/* ---- the credentials file ------------------------------------------------------------------ */

static void test_auth_credentials_file(void **state)
{
    struct env *e = *state;
    static char long_key[200];
    memset(long_key, 'A', 129);
    snprintf(long_key + 129, sizeof(long_key) - 129, " SK\n");
    /* keys: "AK:SK:admin:rate" each, checked to authenticate with that right and rate */
    const struct {
        const char *text;
        int rc;
        const char *msg;  /* a part of the error message */
        const char *keys; /* on success: "AK SK admin rate;..." */
    } cases[] = {
        {"AK1 SK1\n", 0, NULL, "AK1 SK1 0 0"},
        {"# keys\n\nAK1 SK1 admin   # the admin\nAK2\tSK2 rate=10M\r\nAK3 SK3 rate=1K admin\n"
         "   \n",
         0, NULL, "AK1 SK1 1 0;AK2 SK2 0 10485760;AK3 SK3 1 1024"},
        {"AK1 SK1", 0, NULL, "AK1 SK1 0 0"}, /* no final newline */
        {"AK1\n", -EINVAL, ":1: expected 'ACCESS_KEY SECRET_KEY [admin] [rate=RATE] [need=RATE]'",
         NULL},
        {"AK1 SK1 need=2.8G rate=1M\n", 0, NULL, "AK1 SK1 0 1048576"}, /* need: a job's rate */
        {"AK1 SK1 need=lots\n", -EINVAL, ":1: need \"lots\"", NULL},
        {"AK1 SK1\nAK2 SK2 root\n", -EINVAL, "keys:2: unknown word \"root\"", NULL},
        {"AK1 SK1 rate=fast\n", -EINVAL, ":1: rate \"fast\"", NULL},
        {"AK1 SK1 rate=1.5G\n", -EINVAL, ":1: rate \"1.5G\"", NULL},
        {"# nothing\n\n", -EINVAL, "no keys in the file", NULL},
        {"", -EINVAL, "no keys in the file", NULL},
        {long_key, -EINVAL, ":1: expected", NULL},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct errmsg em = {""};
        int rc = open_with(e, cases[i].text, &em);
        if (rc != cases[i].rc || (cases[i].msg && !strstr(em.buf, cases[i].msg)))
            fail_msg("case %zu: rc %d \"%s\", want %d \"%s\"", i, rc, em.buf, cases[i].rc,
                     cases[i].msg ? cases[i].msg : "");
        if (rc)
            continue;
        char keys[256], *save = NULL;
        snprintf(keys, sizeof(keys), "%s", cases[i].keys);
        for (char *k = strtok_r(keys, ";", &save); k; k = strtok_r(NULL, ";", &save)) {
            char ak[16], sk[16];
            int admin, got_admin = -1;
            unsigned long long rate;
            assert_int_equal(sscanf(k, "%15s %15s %d %llu", ak, sk, &admin, &rate), 4);
            if (check_key(e, ak, sk, &got_admin) || got_admin != admin ||
                auth_rate_limit(e->a, ak) != rate)
                fail_msg("case %zu: key %s: admin %d rate %llu, want admin %d rate %llu", i, ak,
                         got_admin, (unsigned long long)auth_rate_limit(e->a, ak), admin, rate);
        }
        /* a secret is only good for its own key */
        assert_int_equal(check_key(e, "AK1", "SK2", NULL), -S3E_SIGNATURE_DOES_NOT_MATCH);
        assert_int_equal(check_key(e, "AK9", "SK1", NULL), -S3E_INVALID_ACCESS_KEY_ID);
    }
    /* a file that cannot be read */
    struct errmsg em = {""};
    e->cf.credentials = "/nonexistent/keys";
    assert_int_equal(auth_new(&e->cf, &e->a, &em), -ENOENT);
    assert_non_null(strstr(em.buf, "--credentials \"/nonexistent/keys\""));
}

static void test_auth_reload(void **state)
{
    struct env *e = *state;
    struct errmsg em = {""};
    assert_int_equal(open_with(e, "AK1 SK1 rate=1M\n", &em), 0);
    assert_int_equal(check_key(e, "AK1", "SK1", NULL), 0);
    write_file(e->cred, "AK2 SK2 admin\n");
    /* nothing changes until the reload (SIGHUP) */
    assert_int_equal(check_key(e, "AK1", "SK1", NULL), 0);
    assert_int_equal(check_key(e, "AK2", "SK2", NULL), -S3E_INVALID_ACCESS_KEY_ID);
    assert_int_equal(auth_reload(e->a, &em), 0);
    int admin = 0;
    assert_int_equal(check_key(e, "AK2", "SK2", &admin), 0);
    assert_int_equal(admin, 1);
    assert_int_equal(check_key(e, "AK1", "SK1", NULL), -S3E_INVALID_ACCESS_KEY_ID); /* revoked */
    assert_int_equal(auth_rate_limit(e->a, "AK1"), 0);
    struct auth_reload_status rs;
    auth_reload_status(e->a, &rs);
    assert_true(rs.reloads == 1 && rs.reload_failures == 0 && !rs.last_failed);
    /* a bad file is refused: the keys it still names stay as they were (even with another
     * secret on their line), the keys it adds wait for a reload that succeeds */
    write_file(e->cred, "AK2 SK2-changed\nAK3 SK3 superuser\n");
    assert_int_equal(auth_reload(e->a, &em), -EINVAL);
    assert_non_null(strstr(em.buf, "unknown word \"superuser\""));
    assert_non_null(strstr(em.buf, "; the previous keys stay in force"));
    assert_int_equal(check_key(e, "AK2", "SK2", &admin), 0);
    assert_int_equal(admin, 1);
    assert_int_equal(check_key(e, "AK3", "SK3", NULL), -S3E_INVALID_ACCESS_KEY_ID);
    auth_reload_status(e->a, &rs);
    assert_true(rs.reloads == 1 && rs.reload_failures == 1 && rs.last_failed && !rs.revoked);
    assert_non_null(strstr(rs.last_error, "unknown word \"superuser\""));
    /* a file that cannot be read says nothing: every key stays */
    unlink(e->cred);
    assert_int_equal(auth_reload(e->a, &em), -ENOENT);
    assert_non_null(strstr(em.buf, "could not be read"));
    assert_int_equal(check_key(e, "AK2", "SK2", NULL), 0);
    /* a bad file that no longer names a key revokes it at once */
    write_file(e->cred, "# AK2 SK2 admin\nAK3 SK3 superuser\n");
    assert_int_equal(auth_reload(e->a, &em), -EINVAL);
    assert_non_null(strstr(em.buf, "except 1 the file no longer names, revoked: AK2"));
    assert_int_equal(check_key(e, "AK2", "SK2", NULL), -S3E_INVALID_ACCESS_KEY_ID);
    auth_reload_status(e->a, &rs);
    assert_true(rs.reload_failures == 3 && rs.last_failed && rs.revoked == 1);
    write_file(e->cred, "AK3 SK3\n");
    assert_int_equal(auth_reload(e->a, &em), 0);
    assert_int_equal(check_key(e, "AK3", "SK3", NULL), 0);
    auth_reload_status(e->a, &rs);
    assert_true(rs.reloads == 2 && rs.reload_failures == 3 && !rs.last_failed && !rs.revoked &&
                !rs.last_error[0]);
    /* --access-key stays through a reload of the file */
    e->cf.access_key = "OPKEY";
    e->cf.secret_key = "OPSECRET";
    assert_int_equal(open_with(e, "AK1 SK1\n", &em), 0);
    assert_int_equal(check_key(e, "OPKEY", "OPSECRET", &admin), 0);
    assert_int_equal(admin, 1); /* --access-key is an admin key */
    write_file(e->cred, "AK4 SK4\n");
    assert_int_equal(auth_reload(e->a, &em), 0);
    assert_int_equal(check_key(e, "OPKEY", "OPSECRET", NULL), 0);
    assert_int_equal(check_key(e, "AK4", "SK4", &admin), 0);
    assert_int_equal(admin, 0);
    /* ... and through a failed one that names no key at all */
    write_file(e->cred, "");
    assert_int_equal(auth_reload(e->a, &em), -EINVAL);
    assert_non_null(strstr(em.buf, "revoked: AK4"));
    assert_int_equal(check_key(e, "OPKEY", "OPSECRET", NULL), 0);
    assert_int_equal(check_key(e, "AK4", "SK4", NULL), -S3E_INVALID_ACCESS_KEY_ID);
    /* nothing to reload without a file */
    assert_int_equal(open_with(e, NULL, &em), 0);
    em.buf[0] = '\0';
    assert_int_equal(auth_reload(e->a, &em), -ENOENT);
    assert_non_null(strstr(em.buf, "no --credentials file"));
}

/* The keys deploy/ ships as placeholders (k8s/secret.yaml, secrets/credentials.example) are
 * public: a file holding one is refused at start and on SIGHUP (no placeholder key is taken;
 * as with any failed reload, the keys in use that the file still names stay, the others go). */
static void test_auth_placeholder_keys(void **state)
{
    struct env *e = *state;
    struct errmsg em = {""};
    static const char *const files[] = {
        "AKTRAININGJOBS0001 replace-with-40-hex-chars-0000000000000000\n"
        "AKOPERATOR00000001 replace-with-40-hex-chars-1111111111111111 admin\n",
        "AKREAL 9f2c4e0b7a1d3c5e8f6071829304a5b6c7d8e9f0 admin\n"
        "AKEXAMPLECLIENT0001 0123456789abcdef0123456789abcdef01234567 admin\n",
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        em.buf[0] = '\0';
        assert_int_equal(open_with(e, files[i], &em), -EINVAL);
        if (!strstr(em.buf, "placeholder") && !strstr(em.buf, "example key"))
            fail_msg("file %zu: message \"%s\"", i, em.buf);
    }
    assert_int_equal(open_with(e, "AK1 SK1\nAK2 SK2\n", &em), 0);
    write_file(e->cred, "AK1 SK1\n"
                        "AKOPERATOR00000001 replace-with-40-hex-chars-1111111111111111 admin\n");
    assert_int_equal(auth_reload(e->a, &em), -EINVAL);
    assert_int_equal(check_key(e, "AK1", "SK1", NULL), 0);
    assert_int_equal(check_key(e, "AK2", "SK2", NULL), -S3E_INVALID_ACCESS_KEY_ID);
    assert_int_equal(check_key(e, "AKOPERATOR00000001", "replace-with-40-hex-chars-1111111111111111",
                               NULL), -S3E_INVALID_ACCESS_KEY_ID);
}

static void test_auth_access_key_flags(void **state)
{
    struct env *e = *state;
    struct errmsg em = {""};
    e->cf.access_key = "OPKEY";
    assert_int_equal(open_with(e, NULL, &em), -EINVAL);
    assert_string_equal(em.buf, "--access-key given without --secret-key");
    e->cf.access_key = "";
    e->cf.secret_key = "OPSECRET";
    assert_int_equal(open_with(e, NULL, &em), -EINVAL);
    assert_string_equal(em.buf, "--secret-key given without --access-key");
    e->cf.access_key = "OPKEY";
    assert_int_equal(open_with(e, NULL, &em), 0);
    int admin = 0;
    assert_int_equal(check_key(e, "OPKEY", "OPSECRET", &admin), 0);
    assert_int_equal(admin, 1);
    /* no pair is generated when keys were given, and none is shown */
    const char *ak, *sk;
    auth_banner_key(e->a, &ak, &sk);
    assert_null(ak);
    assert_null(sk);
    char p[300];
    snprintf(p, sizeof(p), "%s/credentials", e->dir);
    assert_int_equal(access(p, F_OK), -1);
}

/* An admin request with a body must sign it: UNSIGNED-PAYLOAD (and the unsigned trailer) is
 * refused on POST and PUT to /_/..., a SHA-256 or a signed aws-chunked mode passes, as do
 * GET and DELETE, the other operations, and the bearer token. */
static void test_auth_admin_body_signed(void **state)
{
    struct env *e = *state;
    struct errmsg em = {""};
    static const char sha[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    e->cf.admin_token = "s3cr3t-token";
    assert_int_equal(open_with(e, "ADM SK1 admin\nUSR SK2\n", &em), 0);
    static const struct {
        const char *method, *path;
        enum op op;
        const char *ak, *sk, *payload;
        int rc;
    } cases[] = {
        {"POST", "/_/warm", OP_ADMIN, "ADM", "SK1", UNSIGNED, -S3E_ACCESS_DENIED},
        {"PUT", "/_/policy", OP_ADMIN, "ADM", "SK1", UNSIGNED, -S3E_ACCESS_DENIED},
        {"POST", "/_/flush", OP_ADMIN, "ADM", "SK1", "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
         -S3E_ACCESS_DENIED},
        {"POST", "/_/unpin", OP_ADMIN, "USR", "SK2", UNSIGNED, -S3E_ACCESS_DENIED},
        {"POST", "/_/warm", OP_ADMIN, "ADM", "SK1", sha, 0},
        {"POST", "/_/warm", OP_ADMIN, "ADM", "SK1", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", 0},
        {"GET", "/_/warm", OP_ADMIN, "ADM", "SK1", UNSIGNED, 0},
        {"DELETE", "/_/warm/x", OP_ADMIN, "ADM", "SK1", UNSIGNED, 0},
        {"PUT", "/bkt/k", OP_PUT, "USR", "SK2", UNSIGNED, 0},
        {"POST", "/bkt", OP_DELETE_OBJECTS, "USR", "SK2", UNSIGNED, 0},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct treq t;
        em.buf[0] = '\0';
        treq_init(&t, cases[i].method, cases[i].path, cases[i].op);
        sign_v4(&t, cases[i].ak, cases[i].sk, "us-east-1", cases[i].payload);
        assert_int_equal(auth_check(e->a, &t.rq, &em), 0);
        int rc = auth_admin_body_signed(&t.rq, &em);
        if (rc != cases[i].rc)
            fail_msg("case %zu (%s %s %s): %d, want %d (%s)", i, cases[i].method, cases[i].path,
                     cases[i].payload, rc, cases[i].rc, em.buf);
        if (rc)
            assert_non_null(strstr(em.buf, "UNSIGNED-PAYLOAD"));
    }
    struct treq t;
    treq_init(&t, "POST", "/_/warm", OP_ADMIN);
    treq_header(&t, "Authorization", "Bearer s3cr3t-token");
    assert_int_equal(auth_check(e->a, &t.rq, &em), 0);
    assert_int_equal(auth_admin_body_signed(&t.rq, &em), 0);
}

static void test_auth_admin_and_bearer(void **state)
{
    struct env *e = *state;
    struct errmsg em = {""};
    e->cf.admin_token = "s3cr3t-token";
    assert_int_equal(open_with(e, "ADM SK1 admin\nUSR SK2\n", &em), 0);
    /* admin rights: the admin key, not the other */
    struct treq t;
    treq_init(&t, "GET", "/_/stats", OP_ADMIN);
    sign_v4(&t, "ADM", "SK1", "us-east-1", UNSIGNED);
    assert_int_equal(auth_check(e->a, &t.rq, &em), 0);
    assert_int_equal(auth_is_admin(e->a, &t.rq), 1);
    treq_init(&t, "GET", "/_/stats", OP_ADMIN);
    sign_v4(&t, "USR", "SK2", "us-east-1", UNSIGNED);
    assert_int_equal(auth_check(e->a, &t.rq, &em), 0); /* authenticated... */
    assert_int_equal(auth_is_admin(e->a, &t.rq), 0);   /* ...but no admin */
    /* the bearer token, on the admin endpoints only, compared whole */
    static const struct { const char *authz; enum op op; int rc; } cases[] = {
        {"Bearer s3cr3t-token", OP_ADMIN, 0},
        {"bearer s3cr3t-token", OP_ADMIN, 0},
        {"BEARER s3cr3t-token", OP_ADMIN, 0},
        {"Bearer s3cr3t-toke", OP_ADMIN, -S3E_ACCESS_DENIED},
        {"Bearer s3cr3t-token2", OP_ADMIN, -S3E_ACCESS_DENIED},
        {"Bearer ", OP_ADMIN, -S3E_ACCESS_DENIED},
        {"Bearer S3CR3T-TOKEN", OP_ADMIN, -S3E_ACCESS_DENIED},
        {"Bearer s3cr3t-token", OP_GET, -S3E_ACCESS_DENIED},
        {"Bearer s3cr3t-token", OP_PUT, -S3E_ACCESS_DENIED},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        treq_init(&t, "GET", "/_/stats", cases[i].op);
        treq_header(&t, "Authorization", cases[i].authz);
        int rc = auth_check(e->a, &t.rq, &em);
        if (rc != cases[i].rc)
            fail_msg("case %zu \"%s\": rc %d, want %d", i, cases[i].authz, rc, cases[i].rc);
        if (!rc) {
            assert_string_equal(t.rq.access_key, "admin-token");
            assert_int_equal(auth_is_admin(e->a, &t.rq), 1);
        } else {
            assert_int_equal(t.rq.is_admin, 0);
        }
    }
    /* without --admin-token, no bearer is accepted, not even an empty one */
    e->cf.admin_token = NULL;
    treq_init(&t, "GET", "/_/stats", OP_ADMIN);
    treq_header(&t, "Authorization", "Bearer ");
    assert_int_equal(auth_check(e->a, &t.rq, &em), -S3E_ACCESS_DENIED);
    e->cf.admin_token = "";
    treq_init(&t, "GET", "/_/stats", OP_ADMIN);
    treq_header(&t, "Authorization", "Bearer ");
    assert_int_equal(auth_check(e->a, &t.rq, &em), -S3E_ACCESS_DENIED);
}

static void test_auth_rate_per_key(void **state)
{
    struct env *e = *state;
    struct errmsg em = {""};
    e->cf.client_rate_limit = 5000;
    assert_int_equal(open_with(e, "FAST SK rate=100M\nSLOW SK rate=64K\nDEF SK\n", &em), 0);
    assert_int_equal(auth_rate_limit(e->a, "FAST"), 100ull << 20);
    assert_int_equal(auth_rate_limit(e->a, "SLOW"), 64ull << 10);
    assert_int_equal(auth_rate_limit(e->a, "DEF"), 5000);     /* --client-rate-limit */
    assert_int_equal(auth_rate_limit(e->a, "nobody"), 5000);
    e->cf.client_rate_limit = 0;
    assert_int_equal(auth_rate_limit(e->a, "DEF"), 0);        /* unlimited */
    write_file(e->cred, "FAST SK rate=1K\n");
    assert_int_equal(auth_reload(e->a, &em), 0);
    assert_int_equal(auth_rate_limit(e->a, "FAST"), 1024);    /* the reload's rate */
    assert_int_equal(auth_rate_limit(e->a, "SLOW"), 0);
}

static void test_auth_anonymous(void **state)
{
    struct env *e = *state;
    struct errmsg em = {""};
    struct treq t;
    /* without --anonymous an unsigned request is refused */
    assert_int_equal(open_with(e, "AK1 SK1\n", &em), 0);
    treq_init(&t, "GET", "/bkt/k", OP_GET);
    assert_int_equal(auth_check(e->a, &t.rq, &em), -S3E_ACCESS_DENIED);
    assert_int_equal(auth_is_admin(e->a, &t.rq), 0);

    e->cf.anonymous = 1;
    assert_int_equal(open_with(e, NULL, &em), 0);
    /* no keys and --anonymous: nothing is generated */
    char p[300];
    snprintf(p, sizeof(p), "%s/credentials", e->dir);
    assert_int_equal(access(p, F_OK), -1);
    treq_init(&t, "PUT", "/bkt/k", OP_PUT);
    assert_int_equal(auth_check(e->a, &t.rq, &em), 0);
    assert_string_equal(t.rq.access_key, "anonymous");
    assert_int_equal(t.rq.auth.payload, SIGV4_PAYLOAD_UNSIGNED);
    assert_int_equal(auth_is_admin(e->a, &t.rq), 1);
    /* a signature it cannot check is taken as anonymous; the payload mode still comes from
     * x-amz-content-sha256 */
    static const char hex[] = "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08";
    static const struct {
        const char *payload;
        int rc;
        enum sigv4_payload mode;
    } cases[] = {
        {UNSIGNED, 0, SIGV4_PAYLOAD_UNSIGNED},
        {hex, 0, SIGV4_PAYLOAD_SHA256},
        {"STREAMING-UNSIGNED-PAYLOAD-TRAILER", 0, SIGV4_PAYLOAD_UNSIGNED_TRAILER},
        {"STREAMING-AWS4-HMAC-SHA256-PAYLOAD", -S3E_NOT_IMPLEMENTED, 0},
        {"STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", -S3E_NOT_IMPLEMENTED, 0},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        treq_init(&t, "PUT", "/bkt/k", OP_PUT);
        sign_v4(&t, "UNKNOWN", "whatever", "us-east-1", cases[i].payload);
        int rc = auth_check(e->a, &t.rq, &em);
        if (rc != cases[i].rc || (!rc && (t.rq.auth.payload != cases[i].mode ||
                                          strcmp(t.rq.access_key, "anonymous"))))
            fail_msg("case %zu (%s): rc %d payload %d key %s", i, cases[i].payload, rc,
                     t.rq.auth.payload, t.rq.access_key);
    }
    treq_init(&t, "PUT", "/bkt/k", OP_PUT);
    sign_v4(&t, "UNKNOWN", "whatever", "us-east-1", hex);
    assert_int_equal(auth_check(e->a, &t.rq, &em), 0);
    assert_string_equal(t.rq.auth.payload_sha256,
                        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
    /* another region, SigV2 on the admin endpoints: anonymous too */
    treq_init(&t, "GET", "/bkt/k", OP_GET);
    sign_v4(&t, "UNKNOWN", "x", "eu-west-1", UNSIGNED);
    assert_int_equal(auth_check(e->a, &t.rq, &em), 0);
    assert_string_equal(t.rq.access_key, "anonymous");
    treq_init(&t, "GET", "/_/stats", OP_ADMIN);
    sign_v2(&t, "UNKNOWN", "x", "/_/stats");
    assert_int_equal(auth_check(e->a, &t.rq, &em), 0);
    assert_string_equal(t.rq.access_key, "anonymous");
    /* a key it knows still authenticates as that key */
    e->cf.anonymous = 1;
    assert_int_equal(open_with(e, "AK1 SK1\n", &em), 0);
    int admin = 1;
    assert_int_equal(check_key(e, "AK1", "SK1", &admin), 0);
    assert_int_equal(admin, 0);
}

static void test_auth_generated_keys(void **state)
{
    struct env *e = *state;
    struct errmsg em = {""};
    const char *ak, *sk;
    char p[300], ak1[64], sk1[64];
    struct stat st;
    assert_int_equal(open_with(e, NULL, &em), 0);
    snprintf(p, sizeof(p), "%s/credentials", e->dir);
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    auth_banner_key(e->a, &ak, &sk);
    assert_non_null(ak);
    assert_non_null(sk); /* shown once, when made */
    assert_int_equal(strlen(ak), 20);
    assert_int_equal(strlen(sk), 40);
    snprintf(ak1, sizeof(ak1), "%s", ak);
    snprintf(sk1, sizeof(sk1), "%s", sk);
    int admin = 0;
    assert_int_equal(check_key(e, ak1, sk1, &admin), 0);
    assert_int_equal(admin, 1);
    /* the next start reuses the pair and shows only its access key */
    assert_int_equal(open_with(e, NULL, &em), 0);
    auth_banner_key(e->a, &ak, &sk);
    assert_non_null(ak);
    assert_string_equal(ak, ak1);
    assert_null(sk);
    assert_int_equal(check_key(e, ak1, sk1, NULL), 0);
    /* two fresh directories get different pairs */
    char other[300];
    snprintf(other, sizeof(other), "%s/other", e->dir);
    assert_int_equal(mkdir(other, 0700), 0);
    e->cf.cache_dir = other;
    assert_int_equal(open_with(e, NULL, &em), 0);
    auth_banner_key(e->a, &ak, &sk);
    assert_non_null(sk);
    assert_string_not_equal(ak, ak1);
    /* a cache directory it cannot write to: an error that names the file */
    e->cf.cache_dir = "/nonexistent/dir";
    assert_int_equal(open_with(e, NULL, &em), -ENOENT);
    assert_non_null(strstr(em.buf, "/nonexistent/dir/credentials"));
    e->cf.cache_dir = e->dir;
}

static void test_auth_check_signatures(void **state)
{
    struct env *e = *state;
    struct errmsg em = {""};
    struct treq t;
    assert_int_equal(open_with(e, "AK1 SK1\n", &em), 0);
    /* SigV4: the key, the secret, the region */
    assert_int_equal(check_key(e, "AK1", "SK1", NULL), 0);
    assert_int_equal(check_key(e, "AK1", "SK1x", NULL), -S3E_SIGNATURE_DOES_NOT_MATCH);
    assert_int_equal(check_key(e, "AKX", "SK1", NULL), -S3E_INVALID_ACCESS_KEY_ID);
    treq_init(&t, "GET", "/bkt/k", OP_GET);
    sign_v4(&t, "AK1", "SK1", "eu-west-1", UNSIGNED);
    assert_int_equal(auth_check(e->a, &t.rq, &em), -S3E_AUTH_HEADER_MALFORMED);
    assert_int_equal(t.rq.auth.region_wrong, 1);
    /* what the signature proves reaches the request: the payload mode and hash */
    static const char h[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    treq_init(&t, "PUT", "/bkt/k", OP_PUT);
    sign_v4(&t, "AK1", "SK1", "us-east-1", h);
    assert_int_equal(auth_check(e->a, &t.rq, &em), 0);
    assert_int_equal(t.rq.auth.payload, SIGV4_PAYLOAD_SHA256);
    assert_string_equal(t.rq.auth.payload_sha256, h);
    /* a changed path breaks the signature */
    treq_init(&t, "GET", "/bkt/k", OP_GET);
    sign_v4(&t, "AK1", "SK1", "us-east-1", UNSIGNED);
    snprintf(t.path, sizeof(t.path), "/bkt/other");
    assert_int_equal(auth_check(e->a, &t.rq, &em), -S3E_SIGNATURE_DOES_NOT_MATCH);

    /* SigV2, path style: the resource is the path as sent */
    treq_init(&t, "GET", "/bkt/a%20b", OP_GET);
    snprintf(t.path, sizeof(t.path), "/bkt/a b");
    sign_v2(&t, "AK1", "SK1", "/bkt/a%20b");
    assert_int_equal(auth_check(e->a, &t.rq, &em), 0);
    assert_string_equal(t.rq.access_key, "AK1");
    treq_init(&t, "GET", "/bkt/k", OP_GET);
    sign_v2(&t, "AK1", "SK2", "/bkt/k");
    assert_int_equal(auth_check(e->a, &t.rq, &em), -S3E_SIGNATURE_DOES_NOT_MATCH);
    /* SigV2, virtual-hosted: the resource starts with the Host's bucket, so a signature for
     * /k of one bucket does not open /k of another */
    static const struct { const char *signed_as; int rc; } vh[] = {
        {"/bkt/k", 0},
        {"/k", -S3E_SIGNATURE_DOES_NOT_MATCH},
        {"/other/k", -S3E_SIGNATURE_DOES_NOT_MATCH},
    };
    for (size_t i = 0; i < ARRAY_SIZE(vh); i++) {
        treq_init(&t, "GET", "/k", OP_GET);
        t.rq.vhost = 1;
        t.rq.bucket = "bkt";
        sign_v2(&t, "AK1", "SK1", vh[i].signed_as);
        int rc = auth_check(e->a, &t.rq, &em);
        if (rc != vh[i].rc)
            fail_msg("vhost case %zu (%s): rc %d want %d", i, vh[i].signed_as, rc, vh[i].rc);
    }
    /* SigV2 signs neither the admin endpoints' parameters nor their bodies: refused there */
    treq_init(&t, "GET", "/_/stats", OP_ADMIN);
    sign_v2(&t, "AK1", "SK1", "/_/stats");
    em.buf[0] = '\0';
    assert_int_equal(auth_check(e->a, &t.rq, &em), -S3E_ACCESS_DENIED);
    assert_non_null(strstr(em.buf, "Signature Version 4"));
    assert_int_equal(t.rq.auth.refused, 1);
    /* no credentials at all */
    treq_init(&t, "GET", "/bkt/k", OP_GET);
    assert_int_equal(auth_check(e->a, &t.rq, &em), -S3E_ACCESS_DENIED);
    assert_string_equal(t.rq.access_key, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_auth_credentials_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_reload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_placeholder_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_access_key_flags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_admin_and_bearer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_admin_body_signed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_rate_per_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_anonymous, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_generated_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_check_signatures, setup, teardown),
    };
    return cmocka_run_group_tests_name("auth", tests, NULL, NULL);
}
