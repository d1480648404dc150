/*
 * bench/tar_bench.c: the costs of lib/tar on a cached shard (bench/tar.sh makes one): a walk
 * of the headers with pread, warm (page cache) and cold (the file's pages dropped with
 * posix_fadvise first; the file must be synced), the index blob's size, and lookups by name
 * (hits, misses, members in archive order), also on a synthetic index of 1,000,000 members.
 * Usage: tar-bench SHARD [ROUNDS]. Prints one "what: figure" line per measure.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/s3c.h"
#include "lib/tar.h"

static double ms_since(uint64_t t0)
{
    return (double)(s3c_mono_ns() - t0) / 1e6;
}

struct bench_reader {
    int fd;
    char buf[65536];
    uint64_t reads;
};

static int bench_read(void *cls, uint64_t off, size_t len, const void **bytes, struct errmsg *em)
{
    struct bench_reader *r = cls;
    (void)em;
    if (len > sizeof(r->buf) || pread(r->fd, r->buf, len, (off_t)off) != (ssize_t)len)
        return -EIO;
    r->reads++;
    *bytes = r->buf;
    return 0;
}

static int bench_count(void *cls, const struct tar_entry *e, struct errmsg *em)
{
    (void)e;
    (void)em;
    (*(long *)cls)++;
    return 0;
}

/* Walks without indexing: the walker's own cost. Returns the entries, or -1. */
static long walk_only(int fd, uint64_t size, uint64_t *reads)
{
    static struct bench_reader r;
    long n = 0;
    r.fd = fd;
    r.reads = 0;
    int rc = tar_walk_all(size, NULL, bench_read, &r, bench_count, &n, NULL);
    *reads = r.reads;
    return rc ? -1 : n;
}

static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

/* ns per lookup of @k random members of @ix (by their names), and of @k absent names. */
static void lookups(const char *what, const struct tar_index *ix, long k)
{
    struct tar_member m, f;
    char miss[64];
    uint64_t t0 = s3c_mono_ns();
    long found = 0;
    for (long i = 0; i < k; i++) {
        if (tar_index_get(ix, (uint32_t)(rnd() % ix->n), &m) == 0 &&
            tar_index_find(ix, m.name, m.name_len, &f) == 0 && f.pos == m.pos)
            found++;
    }
    double get_find = (double)(s3c_mono_ns() - t0) / (double)k;
    t0 = s3c_mono_ns();
    for (long i = 0; i < k; i++)
        (void)tar_index_get(ix, (uint32_t)(rnd() % ix->n), &m);
    double get = (double)(s3c_mono_ns() - t0) / (double)k;
    t0 = s3c_mono_ns();
    for (long i = 0; i < k; i++) { /* an absent name beside a present one: NAME + "x" */
        if (tar_index_get(ix, (uint32_t)(rnd() % ix->n), &m) != 0 || m.name_len >= sizeof(miss))
            continue;
        memcpy(miss, m.name, m.name_len);
        miss[m.name_len] = 'x';
        found += tar_index_find(ix, miss, m.name_len + 1, &f) == 0;
    }
    double missns = (double)(s3c_mono_ns() - t0) / (double)k - get;
    printf("%s: find %.0f ns (hit), %.0f ns (miss), get %.0f ns; %ld found of %ld hits "
           "asked\n",
           what, get_find - get, missns, get, found, k);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: tar-bench SHARD [ROUNDS]\n");
        return 2;
    }
    int rounds = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 5;
    if (rounds < 1)
        rounds = 1;
    int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        perror(argv[1]);
        return 1;
    }
    uint64_t size = (uint64_t)st.st_size, reads = 0;
    printf("shard: %s, %.2f GiB\n", argv[1], (double)size / (1 << 30));

    for (int cold = 0; cold <= 1; cold++) {
        double best = 1e18, sum = 0;
        long n = 0;
        for (int r = 0; r < rounds; r++) {
            if (cold)
                posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            uint64_t t0 = s3c_mono_ns();
            n = walk_only(fd, size, &reads);
            double ms = ms_since(t0);
            best = ms < best ? ms : best;
            sum += ms;
        }
        if (n < 0) {
            fprintf(stderr, "walk failed\n");
            return 1;
        }
        printf("walk %s: %ld members, %llu preads, best %.1f ms, mean %.1f ms "
               "(%.0f members/s, %.1f GiB/s of shard)\n",
               cold ? "cold (fadvise DONTNEED)" : "warm", n, (unsigned long long)reads, best,
               sum / rounds, n / (best / 1e3), (double)size / (1 << 30) / (best / 1e3));
    }

    void *blob;
    size_t len;
    struct errmsg em = { "" };
    uint64_t t0 = s3c_mono_ns();
    int rc = tar_index_build_fd(fd, size, NULL, &blob, &len, &em);
    double build_ms = ms_since(t0);
    if (rc != 0) {
        fprintf(stderr, "index: %s\n", em.buf);
        return 1;
    }
    struct tar_index ix;
    if (tar_index_open(&ix, blob, len, &em) != 0)
        return 1;
    t0 = s3c_mono_ns();
    rc = tar_index_verify(&ix, &em);
    double verify_ms = ms_since(t0);
    printf("index (warm walk + build): %.1f ms; blob %zu bytes for %u members = %.1f bytes per "
           "member (names %u bytes); verify %.2f ms\n",
           build_ms, len, ix.n, (double)len / ix.n, ix.names_len, verify_ms);
    lookups("lookup in the shard's index", &ix, 2000000);
    free(blob);

    /* O(log n): an index of 1,000,000 members named like the shard's */
    struct tar_index_builder *b;
    if (tar_index_builder_new(1ull << 40, &b) != 0)
        return 1;
    for (uint32_t i = 0; i < 1000000; i++) {
        char nm[32];
        int nl = snprintf(nm, sizeof(nm), "sample-%07u.jpg", i);
        struct tar_entry e = { .name = nm, .name_len = (size_t)nl, .data_off = 512 + 1024ull * i,
                               .size = 100, .type = TAR_REG };
        if (tar_index_builder_add(b, &e) != 0)
            return 1;
    }
    t0 = s3c_mono_ns();
    if (tar_index_builder_finish(b, &blob, &len) != 0)
        return 1;
    printf("synthetic 1,000,000 members: finish %.0f ms, blob %zu bytes (%.1f per member)\n",
           ms_since(t0), len, (double)len / 1e6);
    tar_index_builder_free(b);
    if (tar_index_open(&ix, blob, len, &em) != 0)
        return 1;
    lookups("lookup in 1,000,000", &ix, 2000000);
    free(blob);
    close(fd);
    return 0;
}
