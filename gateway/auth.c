/*
 * auth.c: who may do what. Holds the client credentials (a file re-read on
 * SIGHUP, a single --access-key, or a generated pair kept in
 * CACHE_DIR/credentials), authenticates each request with sigv4.c, and
 * decides admin rights (admin key, bearer token, or --anonymous).
 * The credential table is immutable and reference-counted, so a reload
 * never pulls a secret out from under a request being verified.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gw.h"
#include "log.h"
#include "s3err.h"

struct cred {
    char access_key[129];
    char secret_key[129];
    int admin;
    uint64_t rate_bps; /* 0 = unlimited */
};

struct cred_table {
    unsigned refs;
    size_t n;
    struct cred c[];
};

struct auth {
    const struct conf *cf;
    pthread_mutex_t mu;
    struct cred_table *tab;
    char file[4096]; /* credentials file to reload, "" when none */
};

static void table_release(struct cred_table *t)
{
    if (t && __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        OPENSSL_cleanse(t->c, t->n * sizeof(t->c[0]));
        free(t);
    }
}

static struct cred_table *table_get(struct auth *a)
{
    pthread_mutex_lock(&a->mu);
    struct cred_table *t = a->tab;
    if (t)
        __atomic_add_fetch(&t->refs, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&a->mu);
    return t;
}

static int table_add(struct cred_table **tp, const char *ak, const char *sk, int admin,
                     uint64_t rate)
{
    struct cred_table *t = *tp;
    size_t n = t ? t->n : 0;
    struct cred_table *nt = realloc(t, sizeof(*nt) + (n + 1) * sizeof(nt->c[0]));
    if (!nt)
        return -ENOMEM;
    if (!t)
        nt->refs = 1;
    nt->n = n + 1;
    struct cred *c = &nt->c[n];
    memset(c, 0, sizeof(*c));
    snprintf(c->access_key, sizeof(c->access_key), "%s", ak);
    snprintf(c->secret_key, sizeof(c->secret_key), "%s", sk);
    c->admin = admin;
    c->rate_bps = rate;
    *tp = nt;
    return 0;
}

/* Parses "ACCESS SECRET [admin] [rate=RATE]" lines. */
static int auth_read_file(const char *path, struct cred_table **out, struct errmsg *em)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        errmsg_set(em, "--credentials \"%s\": %s", path, strerror(errno));
        return -errno;
    }
    struct cred_table *t = NULL;
    char line[1024];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        char *save = NULL, *words[8];
        int nw = 0;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        for (char *w = strtok_r(line, " \t\r\n", &save); w && nw < 8;
             w = strtok_r(NULL, " \t\r\n", &save))
            words[nw++] = w;
        if (nw == 0)
            continue;
        if (nw < 2 || strlen(words[0]) > 128 || strlen(words[1]) > 128) {
            errmsg_set(em, "%s:%d: expected 'ACCESS_KEY SECRET_KEY [admin] [rate=RATE]'", path,
                       lineno);
            rc = -EINVAL;
            break;
        }
        int admin = 0;
        uint64_t rate = 0;
        for (int i = 2; i < nw && !rc; i++) {
            if (!strcmp(words[i], "admin"))
                admin = 1;
            else if (!strncmp(words[i], "rate=", 5)) {
                const char *err = conf_parse_size(words[i] + 5, &rate);
                if (err) {
                    errmsg_set(em, "%s:%d: rate \"%s\": %s", path, lineno, words[i] + 5, err);
                    rc = -EINVAL;
                }
            } else {
                errmsg_set(em, "%s:%d: unknown word \"%s\" (expected admin or rate=RATE)", path,
                           lineno, words[i]);
                rc = -EINVAL;
            }
        }
        if (!rc)
            rc = table_add(&t, words[0], words[1], admin, rate);
        if (rc)
            break;
    }
    fclose(f);
    if (!rc && !t) {
        errmsg_set(em, "--credentials \"%s\": no keys in the file", path);
        rc = -EINVAL;
    }
    if (rc) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

static void random_chars(char *out, size_t n, const char *alphabet)
{
    unsigned char rnd[64];
    size_t al = strlen(alphabet);
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        for (size_t i = 0; i < sizeof(rnd); i++)
            rnd[i] = (unsigned char)(rand() ^ (int)time(NULL));
    }
    for (size_t i = 0; i < n; i++)
        out[i] = alphabet[rnd[i % sizeof(rnd)] % al];
    out[n] = '\0';
}

/* The generated pair lives in CACHE_DIR/credentials (0600), created once and reused. */
static int auth_generated(const struct conf *cf, struct cred_table **out, struct errmsg *em)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/credentials", cf->cache_dir);
    if (access(path, R_OK) == 0)
        return auth_read_file(path, out, em);
    char ak[21], sk[41];
    random_chars(ak, 20, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789");
    random_chars(sk, 40, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        errmsg_set(em, "cannot create %s: %s", path, strerror(errno));
        return -errno;
    }
    char line[256];
    int n = snprintf(line, sizeof(line), "# generated by s3cached serve\n%s %s admin\n", ak, sk);
    int rc = write(fd, line, (size_t)n) == n && fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    if (rc) {
        errmsg_set(em, "cannot write %s: %s", path, strerror(-rc));
        return rc;
    }
    return table_add(out, ak, sk, 1, 0);
}

int auth_new(const struct conf *cf, struct auth **out, struct errmsg *em)
{
    struct auth *a = calloc(1, sizeof(*a));
    int rc = 0;
    if (!a)
        return -ENOMEM;
    a->cf = cf;
    pthread_mutex_init(&a->mu, NULL);
    if (cf->credentials && *cf->credentials) {
        snprintf(a->file, sizeof(a->file), "%s", cf->credentials);
        rc = auth_read_file(a->file, &a->tab, em);
    }
    if (!rc && cf->access_key && *cf->access_key) {
        if (!cf->secret_key || !*cf->secret_key) {
            errmsg_set(em, "--access-key given without --secret-key");
            rc = -EINVAL;
        } else {
            rc = table_add(&a->tab, cf->access_key, cf->secret_key, 1, 0);
        }
    } else if (!rc && cf->secret_key && *cf->secret_key) {
        errmsg_set(em, "--secret-key given without --access-key");
        rc = -EINVAL;
    }
    if (!rc && !a->tab && !cf->anonymous)
        rc = auth_generated(cf, &a->tab, em);
    if (rc) {
        auth_free(a);
        return rc;
    }
    *out = a;
    return 0;
}

void auth_free(struct auth *a)
{
    if (!a)
        return;
    table_release(a->tab);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

int auth_reload(struct auth *a, struct errmsg *em)
{
    if (!a->file[0]) {
        errmsg_set(em, "no --credentials file to reload");
        return -ENOENT;
    }
    struct cred_table *t = NULL;
    int rc = auth_read_file(a->file, &t, em);
    if (rc)
        return rc;
    const struct conf *cf = a->cf;
    if (cf->access_key && *cf->access_key && cf->secret_key && *cf->secret_key &&
        (rc = table_add(&t, cf->access_key, cf->secret_key, 1, 0))) {
        free(t);
        return rc;
    }
    pthread_mutex_lock(&a->mu);
    struct cred_table *old = a->tab;
    a->tab = t;
    pthread_mutex_unlock(&a->mu);
    table_release(old);
    return 0;
}

static const struct cred *table_find(const struct cred_table *t, const char *ak)
{
    for (size_t i = 0; t && i < t->n; i++)
        if (!strcmp(t->c[i].access_key, ak))
            return &t->c[i];
    return NULL;
}

static const char *auth_lookup_secret(void *cls, const char *access_key)
{
    const struct cred *c = table_find(cls, access_key);
    return c ? c->secret_key : NULL;
}

static int auth_bearer(struct auth *a, struct req *rq, const char *authz)
{
    const char *tok = authz + 7;
    const char *want = a->cf->admin_token;
    if (rq->op != OP_ADMIN)
        return -S3E_ACCESS_DENIED;
    if (!want || !*want || strlen(tok) != strlen(want) ||
        CRYPTO_memcmp(tok, want, strlen(want)) != 0)
        return -S3E_ACCESS_DENIED;
    snprintf(rq->access_key, sizeof(rq->access_key), "admin-token");
    rq->is_admin = 1;
    return 0;
}

/* --anonymous (trusted networks): a signature we cannot check, or would refuse (another
 * region, unsigned headers, SigV2 where it is not accepted), is accepted as anonymous. The
 * payload mode still comes from the header: a literal SHA-256 is still checked against the
 * body, signed streaming cannot be decoded. Returns 0 or -S3E_NOT_IMPLEMENTED. */
static int auth_anonymous_fallback(struct req *rq)
{
    const char *ph = req_header(rq, "x-amz-content-sha256");
    snprintf(rq->access_key, sizeof(rq->access_key), "anonymous");
    rq->is_admin = 1;
    rq->auth.payload = SIGV4_PAYLOAD_UNSIGNED;
    if (ph && !strcmp(ph, "STREAMING-UNSIGNED-PAYLOAD-TRAILER"))
        rq->auth.payload = SIGV4_PAYLOAD_UNSIGNED_TRAILER;
    else if (ph && !strncmp(ph, "STREAMING-", 10))
        return -S3E_NOT_IMPLEMENTED;
    else if (ph && strlen(ph) == 64) {
        rq->auth.payload = SIGV4_PAYLOAD_SHA256;
        for (size_t i = 0; i < 64; i++)
            rq->auth.payload_sha256[i] = (char)tolower((unsigned char)ph[i]);
        rq->auth.payload_sha256[64] = '\0';
    }
    return 0;
}

int auth_check(struct auth *a, struct req *rq, struct errmsg *em)
{
    const char *authz = req_header(rq, "Authorization");
    int presigned = req_has_query(rq, "X-Amz-Algorithm") || req_has_query(rq, "X-Amz-Signature") ||
                    req_has_query(rq, "AWSAccessKeyId");
    int v2 = (authz && !strncmp(authz, "AWS ", 4)) ||
             (!authz && req_has_query(rq, "AWSAccessKeyId") && !req_has_query(rq, "X-Amz-Algorithm"));
    if (authz && !strncasecmp(authz, "Bearer ", 7))
        return auth_bearer(a, rq, authz);
    if (!authz && !presigned) {
        if (a->cf->anonymous) {
            snprintf(rq->access_key, sizeof(rq->access_key), "anonymous");
            rq->is_admin = 1;
            rq->auth.payload = SIGV4_PAYLOAD_UNSIGNED;
            return 0;
        }
        return -S3E_ACCESS_DENIED;
    }
    if (v2 && rq->op == OP_ADMIN) {
        /* V2 signs neither the admin endpoints' parameters nor their bodies. */
        memset(&rq->auth, 0, sizeof(rq->auth));
        rq->auth.refused = 1;
        errmsg_set(em, "The admin endpoints need Signature Version 4, the admin token or "
                       "--anonymous");
        return a->cf->anonymous ? auth_anonymous_fallback(rq) : -S3E_ACCESS_DENIED;
    }
    struct cred_table *t = table_get(a);
    struct sigv4_input in = {
        .method = rq->method, .path = rq->path, .query = rq->query, .n_query = rq->n_query,
        .headers = rq->headers, .n_headers = rq->n_headers,
        .region = a->cf->region, .service = "s3",
    };
    int rc;
    if (v2) {
        /* The V2 resource starts with the bucket also when the Host header named it: a
         * signature for /k of one bucket must not open /k of another. */
        char *resource = NULL;
        rc = 0;
        if (rq->vhost && rq->bucket && asprintf(&resource, "/%s%s", rq->bucket, rq->raw_path) < 0) {
            resource = NULL;
            rc = -ENOMEM;
        }
        if (!rc)
            rc = sigv2_verify(&in, resource ? resource : rq->raw_path, time(NULL),
                              auth_lookup_secret, t, &rq->auth, em);
        free(resource);
    } else {
        rc = sigv4_verify(&in, time(NULL), auth_lookup_secret, t, &rq->auth, em);
    }
    if (!rc) {
        const struct cred *c = table_find(t, rq->auth.access_key);
        snprintf(rq->access_key, sizeof(rq->access_key), "%s", rq->auth.access_key);
        rq->is_admin = c && c->admin;
    } else if (a->cf->anonymous && (rc == -S3E_INVALID_ACCESS_KEY_ID ||
                                    rc == -S3E_SIGNATURE_DOES_NOT_MATCH || rq->auth.refused)) {
        rc = auth_anonymous_fallback(rq);
    }
    table_release(t);
    return rc;
}

int auth_is_admin(struct auth *a, struct req *rq)
{
    return rq->is_admin || a->cf->anonymous;
}

void auth_banner_key(struct auth *a, const char **access_key, const char **secret_key)
{
    *access_key = *secret_key = NULL;
    if (!a->file[0] && a->tab && a->tab->n) { /* never echo a credentials file's secrets */
        *access_key = a->tab->c[0].access_key;
        *secret_key = a->tab->c[0].secret_key;
    }
}

uint64_t auth_rate_limit(struct auth *a, const char *access_key)
{
    struct cred_table *t = table_get(a);
    const struct cred *c = table_find(t, access_key);
    uint64_t r = c ? c->rate_bps : 0;
    table_release(t);
    if (!r)
        r = a->cf->client_rate_limit;
    return r;
}
