/*
 * fuzz_tar.c: libFuzzer entry for the tar walker and the member-index blob. The input is
 * walked as an archive (fed in pieces whose size comes from the input) with the walk's
 * contract checked at every step, indexed, and the index looked up by every name; then the
 * input itself is opened as an index blob, and so is the built blob with one byte changed.
 * Even-sized inputs get the checksum of every block set right first, so that mutations reach
 * past it; odd-sized ones keep testing the check.
 * Built by `make fuzz`; `make fuzz-replay` replays tests/fuzz/corpus/tar/.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/tar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(e)                                                                              \
    do {                                                                                      \
        if (!(e))                                                                             \
            abort();                                                                          \
    } while (0)

struct seen {
    char *name;
    size_t len;
    uint64_t data_off, size;
    int safe;     /* not TAR_F_UNSAFE: the index sees it */
    int servable; /* regular and safe */
};

/* Looks every name up and reads every member of a blob that may be corrupt: answers stay
 * inside the blob and the archive it claims. */
static void probe_blob(const uint8_t *b, size_t len, const struct seen *v, size_t n)
{
    struct tar_index ix;
    struct tar_member m;
    if (tar_index_open(&ix, b, len, NULL) != 0)
        return;
    (void)tar_index_verify(&ix, NULL);
    for (size_t i = 0; i < n; i++) {
        int rc = tar_index_find(&ix, v[i].name, v[i].len, &m);
        CHECK(rc == 0 || rc == -ENOENT || rc == -EBADMSG);
        if (rc == 0)
            CHECK((const uint8_t *)m.name >= b && (const uint8_t *)m.name + m.name_len <= b + len &&
                  m.data_off <= ix.archive_size && m.size <= ix.archive_size - m.data_off);
    }
    uint32_t lim = ix.n < 4096 ? ix.n : 4096;
    for (uint32_t p = 0; p <= lim; p++) {
        int rc = tar_index_get(&ix, p, &m);
        CHECK(rc == 0 || rc == -ERANGE || rc == -EBADMSG);
    }
    (void)tar_index_find(&ix, (const char *)b, len < 64 ? len : 64, &m);
}

/* Sets the checksum field of every whole 512-byte block of @a to its sum. */
static void fix_checksums(uint8_t *a, size_t size)
{
    for (size_t off = 0; off + 512 <= size; off += 512) {
        uint8_t *h = a + off;
        unsigned sum = 8 * ' ';
        for (size_t i = 0; i < 512; i++)
            if (i < 148 || i >= 156)
                sum += h[i];
        for (int i = 5; i >= 0; i--, sum >>= 3)
            h[148 + i] = (uint8_t)('0' + (sum & 7));
        h[154] = 0;
        h[155] = ' ';
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t size)
{
    struct tar_limits lim = { .max_entries = 100, .max_name_bytes = 4000, .max_meta = 16384,
                              .max_meta_run = 8 };
    struct tar_walk *w = NULL;
    struct tar_index_builder *b = NULL;
    struct seen *v = NULL;
    size_t n = 0, cap = 0;
    void *blob = NULL;
    size_t blob_len = 0;
    uint8_t *buf = malloc(16384);
    uint8_t *data = malloc(size ? size : 1);
    size_t chunk = size % 3 == 0 ? 0 : 1 + size % 61; /* 0: each range in one feed */
    uint64_t next_off = 0, last_hdr = 0;
    int rc;

    if (!buf || !data || tar_walk_new(size, &lim, &w) != 0 ||
        tar_index_builder_new(size, &b) != 0)
        goto out;
    memcpy(data, in, size);
    if (size % 2 == 0)
        fix_checksums(data, size);
    for (unsigned steps = 0;; steps++) {
        struct tar_entry e;
        struct tar_need need;
        CHECK(steps < 4 * size + 16); /* bounded: at least a block per few steps */
        rc = tar_walk_next(w, &e, &need);
        if (rc == TAR_NEED) {
            CHECK(need.len > 0 && need.len <= 16384);
            CHECK(need.off <= size && need.len <= size - need.off && need.off >= next_off);
            size_t k = chunk && chunk < need.len ? chunk : need.len;
            memcpy(buf, data + need.off, k); /* a copy: the walker reads only what it is fed */
            CHECK(tar_walk_feed(w, buf, k) == 0);
            next_off = need.off + k;
            continue;
        }
        if (rc != TAR_ENTRY)
            break;
        CHECK(e.data_off <= size && e.size <= size - e.data_off);
        CHECK(e.hdr_off < e.data_off && (n == 0 || e.hdr_off > last_hdr));
        CHECK(strlen(e.name) == e.name_len);
        CHECK(n < lim.max_entries);
        last_hdr = e.hdr_off;
        if (tar_index_builder_add(b, &e) != 0)
            goto out;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            struct seen *nv = realloc(v, cap * sizeof(*nv));
            if (!nv)
                goto out;
            v = nv;
        }
        v[n].name = malloc(e.name_len + 1);
        if (!v[n].name)
            goto out;
        memcpy(v[n].name, e.name, e.name_len + 1);
        v[n].len = e.name_len;
        v[n].data_off = e.data_off;
        v[n].size = e.size;
        v[n].safe = !(e.flags & TAR_F_UNSAFE);
        v[n].servable = e.type == TAR_REG && v[n].safe;
        n++;
    }
    CHECK(rc == TAR_END || rc == -EBADMSG || rc == -ENODATA || rc == -E2BIG);
    CHECK(rc == TAR_END || tar_walk_reason(w)[0]);

    if (rc == TAR_END && tar_index_builder_finish(b, &blob, &blob_len) == 0) {
        struct tar_index ix;
        struct tar_member m;
        CHECK(tar_index_open(&ix, blob, blob_len, NULL) == 0);
        CHECK(tar_index_verify(&ix, NULL) == 0);
        for (size_t i = 0; i < n; i++) {
            /* the last safe entry of this name wins (unsafe ones are not indexed) */
            size_t last = SIZE_MAX;
            for (size_t j = 0; j < n; j++)
                if (v[j].safe && v[j].len == v[i].len &&
                    memcmp(v[j].name, v[i].name, v[i].len) == 0)
                    last = j;
            int frc = tar_index_find(&ix, v[i].name, v[i].len, &m);
            if (last != SIZE_MAX && v[last].servable) {
                CHECK(frc == 0 && m.data_off == v[last].data_off && m.size == v[last].size);
                CHECK(tar_index_get(&ix, m.pos, &m) == 0 && m.data_off == v[last].data_off);
            } else {
                CHECK(frc == -ENOENT);
            }
        }
        /* the blob with one byte changed */
        if (blob_len) {
            uint8_t *c = malloc(blob_len);
            if (c) {
                memcpy(c, blob, blob_len);
                c[(size * 7919u) % blob_len] ^= (uint8_t)(size ? data[0] | 1 : 1);
                probe_blob(c, blob_len, v, n);
                free(c);
            }
        }
    }
    /* the input as a blob */
    memcpy(data, in, size);
    probe_blob(data, size, v, n);
out:
    for (size_t i = 0; i < n; i++)
        free(v[i].name);
    free(v);
    free(blob);
    free(buf);
    free(data);
    tar_walk_free(w);
    tar_index_builder_free(b);
    return 0;
}
