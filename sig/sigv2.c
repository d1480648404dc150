/*
 * sigv2.c: legacy AWS Signature Version 2, verify only: the
 * "Authorization: AWS ACCESS:SIGNATURE" header and presigned query
 * (?AWSAccessKeyId=&Expires=&Signature=), which boto3 < 1.36 still produces by
 * default for generate_presigned_url. HMAC-SHA1 over the classic
 * string-to-sign. Pure apart from curl_getdate() for the Date header.
 */
#include <curl/curl.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/buf.h"
#include "lib/checksum.h"
#include "lib/s3err.h"
#include "sigv4.h"

#define SIGV2_MAX_EXPIRES_S 604800 /* 7 days, as SigV4's X-Amz-Expires */

/* Query parameters that are part of the v2 canonical resource, in sorted order. */
static const char *const sigv2_subresources[] = {
    "acl",
    "cors",
    "delete",
    "lifecycle",
    "location",
    "logging",
    "notification",
    "partNumber",
    "policy",
    "requestPayment",
    "response-cache-control",
    "response-content-disposition",
    "response-content-encoding",
    "response-content-language",
    "response-content-type",
    "response-expires",
    "restore",
    "tagging",
    "torrent",
    "uploadId",
    "uploads",
    "versionId",
    "versioning",
    "versions",
    "website",
};

static const char *hdr(const struct sigv4_input *in, const char *name)
{
    for (size_t i = 0; i < in->n_headers; i++)
        if (!strcasecmp(in->headers[i].name, name))
            return in->headers[i].value;
    return NULL;
}

static const struct sigv4_kv *qparam(const struct sigv4_input *in, const char *name)
{
    for (size_t i = 0; i < in->n_query; i++)
        if (!strcmp(in->query[i].name, name))
            return &in->query[i];
    return NULL;
}

static int amz_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "x-amz-a:v1,v2\n..." sorted by name, values trimmed. */
static int amz_headers(const struct sigv4_input *in, struct buf *b)
{
    char **lines = calloc(in->n_headers ? in->n_headers : 1, sizeof(char *));
    size_t n = 0;
    int rc = 0;
    if (!lines)
        return -ENOMEM;
    for (size_t i = 0; i < in->n_headers && !rc; i++) {
        const char *name = in->headers[i].name;
        if (strncasecmp(name, "x-amz-", 6))
            continue;
        const char *v = in->headers[i].value ? in->headers[i].value : "";
        while (*v == ' ' || *v == '\t')
            v++;
        size_t vl = strlen(v);
        while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
            vl--;
        size_t nl = strlen(name);
        char *line = malloc(nl + vl + 2);
        if (!line) {
            rc = -ENOMEM;
            break;
        }
        for (size_t j = 0; j < nl; j++)
            line[j] = (char)((name[j] >= 'A' && name[j] <= 'Z') ? name[j] + 32 : name[j]);
        line[nl] = ':';
        memcpy(line + nl + 1, v, vl);
        line[nl + 1 + vl] = '\0';
        lines[n++] = line;
    }
    if (!rc)
        qsort(lines, n, sizeof(char *), amz_cmp);
    for (size_t i = 0; i < n; i++) {
        if (!rc) {
            /* repeated names: join values with ',' */
            const char *colon = strchr(lines[i], ':');
            size_t name_len = (size_t)(colon - lines[i]);
            if (i > 0 && !strncmp(lines[i - 1], lines[i], name_len + 1))
                rc = buf_printf(b, ",%s", colon + 1);
            else
                rc = buf_printf(b, "%s%s", i ? "\n" : "", lines[i]);
        }
        free(lines[i]);
    }
    if (!rc && n)
        rc = buf_puts(b, "\n");
    free(lines);
    return rc;
}

/* Query parameters a V2 request may carry unsigned: a listing's (AWS accepts them: whoever
 * holds the request may list other prefixes of the bucket with it, which the key could list
 * anyway; nothing is changed), and those that change nothing the gateway does:
 * its own (presigned), botocore's x-id (names the operation the method and sub-resources
 * already name), and the headers botocore copies into a presigned V2 URL (content-type,
 * content-md5, x-amz-*: S3 and the gateway read them from the headers, where V2 signs them). */
static int sigv2_param_ok(const char *name, int presigned, int listing)
{
    static const char *const list_params[] =
        {"prefix",    "delimiter",          "marker",      "max-keys",   "encoding-type",
         "list-type", "continuation-token", "start-after", "fetch-owner"};
    if (!strcmp(name, "x-id"))
        return 1;
    for (size_t i = 0; listing && i < ARRAY_SIZE(list_params); i++)
        if (!strcmp(name, list_params[i]))
            return 1; /* as AWS: a listing's parameters ride unsigned (docs/security.md) */
    if (presigned && (!strcmp(name, "AWSAccessKeyId") || !strcmp(name, "Signature") ||
                      !strcmp(name, "Expires") || !strcasecmp(name, "content-type") ||
                      !strcasecmp(name, "content-md5") || !strncasecmp(name, "x-amz-", 6)))
        return 1;
    for (size_t i = 0; i < ARRAY_SIZE(sigv2_subresources); i++)
        if (!strcmp(name, sigv2_subresources[i]))
            return 1;
    return 0;
}

int sigv2_verify(const struct sigv4_input *in, const char *resource, time_t now,
                 sigv4_secret_f *lookup, void *cls, struct sigv4_result *out, struct errmsg *em)
{
    return sigv2_verify_ex(in, resource, now, 0, lookup, cls, out, em);
}

int sigv2_verify_ex(const struct sigv4_input *in, const char *resource, time_t now, int listing,
                    sigv4_secret_f *lookup, void *cls, struct sigv4_result *out, struct errmsg *em)
{
    const char *authz = hdr(in, "Authorization");
    const struct sigv4_kv *qak = qparam(in, "AWSAccessKeyId");
    const struct sigv4_kv *qsig = qparam(in, "Signature");
    const struct sigv4_kv *qexp = qparam(in, "Expires");
    char access[129], given[128];
    const char *date_line;
    int presigned = 0;

    memset(out, 0, sizeof(*out));
    if (authz && !strncmp(authz, "AWS ", 4)) {
        const char *p = authz + 4, *colon = strrchr(p, ':');
        if (!colon || colon == p || (size_t)(colon - p) >= sizeof(access) ||
            strlen(colon + 1) >= sizeof(given)) {
            errmsg_set(em, "Authorization: expected 'AWS ACCESS_KEY:SIGNATURE'");
            return -S3E_AUTH_HEADER_MALFORMED;
        }
        snprintf(access, sizeof(access), "%.*s", (int)(colon - p), p);
        snprintf(given, sizeof(given), "%s", colon + 1);
        const char *xdate = hdr(in, "x-amz-date"), *date = hdr(in, "Date");
        time_t t = curl_getdate(xdate ? xdate : date ? date : "", NULL);
        if (t < 0) {
            errmsg_set(em, "SigV2 needs a Date or x-amz-date header");
            return -S3E_ACCESS_DENIED;
        }
        if (t > now + 900 || t < now - 900)
            return -S3E_REQUEST_TIME_TOO_SKEWED;
        date_line = xdate ? "" : date;
    } else if (qak && qsig && qexp && qak->value && qsig->value && qexp->value) {
        presigned = 1;
        snprintf(access, sizeof(access), "%s", qak->value);
        snprintf(given, sizeof(given), "%s", qsig->value);
        char *end;
        long long exp = strtoll(qexp->value, &end, 10);
        if (*end || exp <= 0) {
            errmsg_set(em, "Expires must be a number of seconds since the epoch");
            return -S3E_AUTH_QUERY_MALFORMED;
        }
        if ((long long)now > exp)
            return -S3E_EXPIRED_REQUEST;
        if (exp - (long long)now > SIGV2_MAX_EXPIRES_S) {
            errmsg_set(em, "Expires must be at most 7 days (604800 seconds) from now");
            return -S3E_AUTH_QUERY_MALFORMED;
        }
        date_line = qexp->value;
    } else {
        return -S3E_ACCESS_DENIED;
    }
    /* SigV2 signs only the sub-resources: a parameter outside them (a listing's prefix, an
     * admin endpoint's) could be changed by anyone holding the URL or a captured request. */
    for (size_t i = 0; i < in->n_query; i++)
        if (!sigv2_param_ok(in->query[i].name, presigned, listing)) {
            out->refused = 1;
            errmsg_set(em,
                       "The query parameter '%.64s' is not covered by a Signature Version 2 "
                       "signature: sign this request with Signature Version 4",
                       in->query[i].name);
            return -S3E_ACCESS_DENIED;
        }
    if (!given[0]) {
        errmsg_set(em, "empty signature");
        return -S3E_SIGNATURE_DOES_NOT_MATCH;
    }
    const char *secret = lookup(cls, access);
    if (!secret)
        return -S3E_INVALID_ACCESS_KEY_ID;

    struct buf sts;
    int rc;
    buf_init(&sts, 64 * 1024);
    const char *md5 = hdr(in, "Content-MD5"), *ctype = hdr(in, "Content-Type");
    rc = buf_printf(&sts, "%s\n%s\n%s\n%s\n", in->method, md5 ? md5 : "", ctype ? ctype : "",
                    date_line ? date_line : "");
    if (!rc)
        rc = amz_headers(in, &sts);
    if (!rc)
        rc = buf_puts(&sts, resource);
    char sep = '?';
    for (size_t i = 0; i < ARRAY_SIZE(sigv2_subresources) && !rc; i++) {
        const struct sigv4_kv *kv = qparam(in, sigv2_subresources[i]);
        if (!kv)
            continue;
        if (kv->value && *kv->value)
            rc = buf_printf(&sts, "%c%s=%s", sep, kv->name, kv->value);
        else
            rc = buf_printf(&sts, "%c%s", sep, kv->name);
        sep = '&';
    }
    if (rc) {
        buf_free(&sts);
        return rc == -EMSGSIZE ? -S3E_AUTH_HEADER_MALFORMED : rc;
    }
    /* Fail closed: a digest that could not be computed matches nothing (an empty one would
     * match an empty signature). */
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    char want[64] = "";
    if (!HMAC(EVP_sha1(), secret, (int)strlen(secret), (const unsigned char *)sts.p, sts.len, mac,
              &maclen) ||
        maclen != 20 || base64_encode(mac, maclen, want, sizeof(want))) {
        OPENSSL_cleanse(mac, sizeof(mac));
        buf_free(&sts);
        errmsg_set(em, "SigV2: HMAC-SHA1 failed");
        return -ENOMEM; /* OpenSSL could not allocate its context */
    }
    OPENSSL_cleanse(mac, sizeof(mac));
    int ok = want[0] && strlen(want) == strlen(given) &&
             CRYPTO_memcmp(want, given, strlen(want)) == 0;
    if (!ok)
        errmsg_set(em, "SigV2 string to sign: %.200s", sts.p);
    buf_free(&sts);
    if (!ok)
        return -S3E_SIGNATURE_DOES_NOT_MATCH;
    snprintf(out->access_key, sizeof(out->access_key), "%s", access);
    out->payload = SIGV4_PAYLOAD_UNSIGNED;
    out->presigned = presigned;
    out->md5_signed = 1; /* Content-MD5 is a line of V2's string to sign */
    return 0;
}
