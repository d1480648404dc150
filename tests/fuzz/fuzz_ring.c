/*
 * fuzz_ring.c: libFuzzer entry for ring_nginx_uri() (request-targets from the network) and
 * peers_parse() (--peers). Checks the shape of every $uri: no longer than the target,
 * starts with '/', no "//", "/./" or "/../" segment left (a decoded '%', '?' or '#' never
 * starts one), not ending in "/." or "/..".
 *   clang -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. tests/fuzz/fuzz_ring.c \
 *         ring/ring.c ring/peers.c -lz -lpthread -o build/fuzz_ring
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ring/peers.h"
#include "ring/ring.h"

static int has(const char *s, size_t n, const char *pat)
{
    size_t pl = strlen(pat);
    for (size_t i = 0; i + pl <= n; i++)
        if (memcmp(s + i, pat, pl) == 0)
            return 1;
    return 0;
}

static int ends(const char *s, size_t n, const char *pat)
{
    size_t pl = strlen(pat);
    return n >= pl && memcmp(s + n - pl, pat, pl) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *out = malloc(size + 1), *spec;
    if (!out)
        return 0;
    ssize_t n = ring_nginx_uri((const char *)data, size, out, size + 1);
    if (n >= 0) {
        if ((size_t)n > size || n == 0 || out[0] != '/')
            abort();
        /* a decoded '%'/'?'/'#' never makes a segment, so only literal dots are checked */
        if (has(out, (size_t)n, "//") || has(out, (size_t)n, "/./") ||
            has(out, (size_t)n, "/../") || ends(out, (size_t)n, "/.") ||
            ends(out, (size_t)n, "/.."))
            abort();
    } else if (n != -EINVAL) {
        abort();
    }
    free(out);

    spec = malloc(size + 1);
    if (!spec)
        return 0;
    memcpy(spec, data, size);
    spec[size] = '\0';
    struct ring_server *sv = NULL;
    size_t cnt = 0;
    char err[256];
    int rc = peers_parse(spec, &sv, &cnt, err, sizeof(err));
    if (rc == 0) {
        struct ring *r = NULL;
        if (cnt == 0)
            abort();
        if (cnt <= 8 && ring_new(sv, cnt, &r) == 0) { /* bounded: weights reach 1000 */
            (void)ring_owner(r, spec, size);
            ring_free(r);
        }
    } else if (rc != -EINVAL && rc != -ENOMEM) {
        abort();
    }
    peers_servers_free(sv, cnt);
    free(spec);
    return 0;
}
