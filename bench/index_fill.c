/*
 * bench/index_fill.c: writes N entries into a cache index (CACHE_DIR/index), as if N objects
 * of 1 MiB were cached, so that bench/startup.sh can time a start with that many objects.
 * Usage: index-fill CACHE_DIR N [I ...]. Data files are created (sparse, zeros) only for the
 * entries numbered I: the cache serves an indexed entry only when its data file is there (a
 * record that outlived its file is a miss), so those are the ones startup.sh asks for.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/index.h"
#include "cache/store.h"

/* A sparse data file of @size bytes for (@k, @version) under @cache_dir. 0 or -errno. */
static int data_file(const char *cache_dir, const struct index_key *k, uint64_t version,
                     uint64_t size)
{
    char p[STORE_PATH_MAX];
    int fd;
    store_data_path(cache_dir, k->b, k->len, version, p);
    int rc = store_open(p, 1, &fd);
    if (rc)
        return rc;
    rc = ftruncate(fd, (off_t)size) ? -1 : 0;
    close(fd);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: index-fill CACHE_DIR N [I ...]\n");
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
    if (store_init(argv[1])) {
        fprintf(stderr, "index-fill: cannot lay out %s\n", argv[1]);
        return 1;
    }
    for (int a = 3; a < argc; a++) {
        unsigned long i = strtoul(argv[a], NULL, 10);
        char key[64];
        struct index_key k;
        snprintf(key, sizeof(key), "train/shard-%08lu.tar", i);
        index_key_make("bench", key, &k);
        if (i >= n || data_file(argv[1], &k, i + 1, e.size)) {
            fprintf(stderr, "index-fill: no data file for entry %lu\n", i);
            return 1;
        }
    }
    return 0;
}
