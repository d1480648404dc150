/*
 * fuzz_sigv4.c: libFuzzer entry point for sigv4_verify() (with and without a scope to check),
 * sigv2_verify() and sigv4_uri_encode(). The input is lines: method, path, then "?name=value"
 * query entries and "name:value" headers (an Authorization line among them exercises the
 * header parsers). make fuzz and make fuzz-replay build it; by hand:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. \
 *     tests/fuzz/fuzz_sigv4.c sig/sigv4.c sig/sigv2.c lib/checksum.c lib/buf.c \
 *     lib/s3c.c lib/s3err.c \
 *     -lcrypto -lcurl -lz -o fuzz_sigv4
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/s3c.h"
#include "sig/sigv4.h"

#define FUZZ_MAX_KV 32

static const char *fuzz_lookup(void *cls, const char *ak)
{
    (void)cls;
    return strcmp(ak, "AKIAIOSFODNN7EXAMPLE") ? NULL : "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1), *enc = malloc(size * 3 + 1);
    struct sigv4_kv q[FUZZ_MAX_KV], h[FUZZ_MAX_KV];
    size_t nq = 0, nh = 0, nl = 0;
    const char *method = "GET", *path = "/";
    if (!size)
        goto out;
    if (!s || !enc)
        goto out;
    memcpy(s, data, size);
    s[size] = '\0';
    sigv4_uri_encode(s, size, data[0] & 1, enc, size * 3 + 1);
    for (char *line = s, *next; line; line = next, nl++) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (nl == 0) {
            method = line;
        } else if (nl == 1) {
            path = line;
        } else if (line[0] == '?' && nq < FUZZ_MAX_KV) {
            char *eq = strchr(line + 1, '=');
            if (eq)
                *eq++ = '\0';
            q[nq++] = (struct sigv4_kv){line + 1, eq};
        } else if (nh < FUZZ_MAX_KV) {
            char *colon = strchr(line, ':');
            if (colon)
                *colon++ = '\0';
            h[nh++] = (struct sigv4_kv){line, colon ? colon : ""};
        }
    }
    struct sigv4_input in = {method, path, q, nq, h, nh, NULL, NULL};
    struct sigv4_result r;
    struct errmsg em;
    sigv4_verify(&in, (time_t)1369353600, fuzz_lookup, NULL, &r, &em);
    in.region = "us-east-1"; /* as the gateway calls it: the scope checked too */
    in.service = "s3";
    sigv4_verify(&in, (time_t)1369353600, fuzz_lookup, NULL, &r, &em);
    sigv2_verify(&in, path, (time_t)1369353600, fuzz_lookup, NULL, &r, &em);
    if (nh) {
        char authz[1024];
        sigv4_sign(&in, "AK", "SK", "us-east-1", "s3", "20130524T000000Z", "UNSIGNED-PAYLOAD",
                   authz, sizeof(authz));
    }
out:
    free(s);
    free(enc);
    return 0;
}
