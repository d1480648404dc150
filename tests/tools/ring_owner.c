/*
 * ring_owner.c: build/ring-owner, the owner of each key on the ring of --peers, as a
 * gateway computes it (ring/peers.c + ring/ring.c). e2e 86 compares it with the
 * server real nginx picks.
 *   ring-owner --peers SPEC [--self NAME] [--uri] [KEY...]
 *   ring-owner --envoy MIN_RING_SIZE --peers LIST [KEY...]
 * Keys come from the arguments, or one per line from stdin when there are none. Each
 * gets one output line: the owner's name (with --uri, a tab and nginx's $uri of the key,
 * bytes outside 0x21-0x7e as \xNN), or "!EINVAL" (nginx answers 400), "!ENOENT" (no server
 * up), "!EAGAIN" (nginx chooses by round robin). --uri takes each key as a
 * request-target ("/bucket/key?query") and hashes nginx's $uri of it. --envoy takes each
 * key as a request-target and names the owner on Envoy's RING_HASH ring of the static
 * LIST (deploy/scale-out/envoy.yaml's hash_policy: xxHash64 of the path before '?').
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring/peers.h"
#include "ring/ring.h"
#include "ring/ring_envoy.h"

static const char *errname(int rc)
{
    switch (rc) {
    case -EINVAL: return "EINVAL";
    case -ENOENT: return "ENOENT";
    case -EAGAIN: return "EAGAIN";
    case -ENOMEM: return "ENOMEM";
    default: return "ERROR";
    }
}

static void put_escaped(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c > 0x20 && c < 0x7f && c != '\\')
            putchar(c);
        else
            printf("\\x%02x", c);
    }
}

static int one(struct peers *p, int uri, const char *key, size_t len)
{
    struct peers_owner o;
    int rc = uri ? peers_owner_uri(p, key, len, &o) : peers_owner(p, key, len, &o);

    if (rc < 0) {
        printf("!%s", errname(rc));
    } else {
        fputs(o.name, stdout);
        if (o.is_self)
            fputs(" (self)", stdout);
    }
    if (uri) {
        char *buf = malloc(len + 1);
        ssize_t ul = buf ? ring_nginx_uri(key, len, buf, len + 1) : -ENOMEM;
        putchar('\t');
        if (ul >= 0)
            put_escaped(buf, (size_t)ul);
        free(buf);
    }
    putchar('\n');
    return rc == -ENOMEM ? 1 : 0;
}

static int envoy_main(const char *spec, unsigned long min_size, char **keys, int nkeys)
{
    struct ring_server *sv = NULL;
    struct ring_envoy *r = NULL;
    char err[512] = "";
    size_t n = 0;
    int rc = peers_parse(spec, &sv, &n, err, sizeof(err));

    if (rc == 0 && (rc = ring_envoy_new(sv, n, min_size, 0, &r)) < 0)
        snprintf(err, sizeof(err), "cannot build the ring: %s", strerror(-rc));
    peers_servers_free(sv, n);
    if (rc < 0) {
        fprintf(stderr, "ring-owner: %s\n", err);
        return 2;
    }
    if (nkeys > 0) {
        for (int i = 0; i < nkeys; i++)
            puts(ring_envoy_name(r, (size_t)ring_envoy_owner_path(r, keys[i], strlen(keys[i]))));
    } else {
        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        while ((len = getline(&line, &cap, stdin)) >= 0) {
            if (len > 0 && line[len - 1] == '\n')
                len--;
            puts(ring_envoy_name(r, (size_t)ring_envoy_owner_path(r, line, (size_t)len)));
        }
        free(line);
    }
    ring_envoy_free(r);
    return 0;
}

int main(int argc, char **argv)
{
    const char *spec = NULL, *self = NULL;
    int uri = 0, i, bad = 0;
    unsigned long envoy = 0;
    struct peers *p = NULL;
    char err[512];

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--peers") == 0 && i + 1 < argc)
            spec = argv[++i];
        else if (strcmp(argv[i], "--self") == 0 && i + 1 < argc)
            self = argv[++i];
        else if (strcmp(argv[i], "--uri") == 0)
            uri = 1;
        else if (strcmp(argv[i], "--envoy") == 0 && i + 1 < argc)
            envoy = strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            fprintf(stderr, "ring-owner: unknown option %s\n", argv[i]);
            return 2;
        } else
            break;
    }
    if (!spec) {
        fprintf(stderr, "usage: ring-owner --peers SPEC [--self NAME] [--uri] [KEY...]\n"
                        "       ring-owner --envoy MIN_RING_SIZE --peers LIST [KEY...]\n");
        return 2;
    }
    if (envoy)
        return envoy_main(spec, envoy, argv + i, argc - i);
    int rc = peers_new(spec, self, NULL, &p, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "ring-owner: %s\n", err[0] ? err : strerror(-rc));
        return 2;
    }
    if (i < argc) {
        for (; i < argc; i++)
            bad |= one(p, uri, argv[i], strlen(argv[i]));
    } else {
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        while ((n = getline(&line, &cap, stdin)) >= 0) {
            if (n > 0 && line[n - 1] == '\n')
                n--;
            bad |= one(p, uri, line, (size_t)n);
        }
        free(line);
    }
    peers_free(p);
    return bad;
}
