/*
 * bench/index_fill.c: writes N entries into a cache index (CACHE_DIR/index), as if N objects
 * of 1 MiB were cached, so that bench/startup.sh can time a start with that many objects.
 * Usage: index-fill CACHE_DIR N. The data files are not created: only metadata (HEAD) can be
 * served from such a cache.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../cache/index.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: index-fill CACHE_DIR N\n");
        return 2;
    }
    char dir[4096];
    struct errmsg em = {{0}};
    struct index *ix;
    unsigned long n = strtoul(argv[2], NULL, 10);
    mkdir(argv[1], 0755);
    snprintf(dir, sizeof(dir), "%s/index", argv[1]);
    if (index_open(dir, &ix, &em)) {
        fprintf(stderr, "index-fill: %s\n", em.buf);
        return 1;
    }
    index_set_sync(ix, 0);
    struct index_entry e;
    uint8_t bitmap[1] = {0x1};
    memset(&e, 0, sizeof(e));
    e.size = e.meta.size = 1u << 20;
    e.block_size = 8u << 20;
    e.nblocks = 1;
    e.bitmap = bitmap;
    e.used_bytes = index_acct(e.size);
    e.meta.mtime_ns = 1700000000000000000ll;
    snprintf(e.meta.content_type, sizeof(e.meta.content_type), "application/x-tar");
    for (unsigned long i = 0; i < n; i++) {
        char key[64], name[96];
        struct index_key k;
        uint64_t oldv;
        int64_t delta;
        snprintf(key, sizeof(key), "train/shard-%08lu.tar", i);
        snprintf(name, sizeof(name), "bench/%s", key);
        snprintf(e.meta.etag, sizeof(e.meta.etag), "%032lx", i);
        e.version = i + 1;
        e.atime_ns = e.validated_ns = 1700000000000000000ll + (int64_t)i;
        index_key_make("bench", key, &k);
        int rc = index_put(ix, &k, name, &e, &oldv, &delta);
        if (rc) {
            fprintf(stderr, "index-fill: entry %lu: error %d\n", i, rc);
            return 1;
        }
    }
    index_set_sync(ix, 1);
    index_close(ix);
    return 0;
}
