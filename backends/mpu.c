/*
 * mpu.c: the rules of multipart uploads that do not depend on where a store keeps them
 * (mpu.h): IDs, the checks and the ETag of a Complete, listings of uploads, the age of
 * completed records. Owns no state.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "lib/hex.h"
#include "lib/s3c.h"
#include "lib/s3err.h"
#include "mpu.h"

#define MPU_CHUNK (1u << 20)

int mpu_id_ok(const char *id)
{
    size_t n = 0;
    if (!id)
        return 0;
    for (; id[n]; n++)
        if (!((id[n] >= '0' && id[n] <= '9') || (id[n] >= 'a' && id[n] <= 'f')))
            return 0;
    return n == MPU_ID_LEN;
}

int mpu_id_new(char id[MPU_ID_LEN + 1])
{
    unsigned char rnd[MPU_ID_LEN / 2];
    size_t got = 0;
    while (got < sizeof(rnd)) {
        ssize_t n = getrandom(rnd + got, sizeof(rnd) - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -EIO;
        got += (size_t)n;
    }
    hex_encode(rnd, sizeof(rnd), id);
    return 0;
}

int mpu_etag_match(const char *client, const char *ours)
{
    size_t n = strlen(client);
    if (n >= 2 && client[0] == '"' && client[n - 1] == '"') {
        client++;
        n -= 2;
    }
    return n == strlen(ours) && strncasecmp(client, ours, n) == 0;
}

int mpu_md5_range(int fd, uint64_t off, uint64_t len, char out[33])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    char *buf = malloc(MPU_CHUNK);
    int rc = 0;
    if (!ctx || !buf || !EVP_DigestInit_ex(ctx, EVP_md5(), NULL)) {
        rc = -ENOMEM;
        goto out;
    }
    while (!rc && len) {
        ssize_t r = pread(fd, buf, (size_t)S3C_MIN(len, (uint64_t)MPU_CHUNK), (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = r < 0 ? -errno : -EIO;
            break;
        }
        EVP_DigestUpdate(ctx, buf, (size_t)r);
        off += (uint64_t)r;
        len -= (uint64_t)r;
    }
    if (!rc && !EVP_DigestFinal_ex(ctx, md, &mdlen))
        rc = -ENOMEM;
    if (!rc)
        hex_encode(md, 16, out);
out:
    EVP_MD_CTX_free(ctx);
    free(buf);
    return rc;
}

void mpu_plan_free(struct mpu_plan *p)
{
    if (!p)
        return;
    free(p->parts);
    free(p->use);
    memset(p, 0, sizeof(*p));
}

int mpu_complete_plan(const struct be_part *want, size_t n, mpu_part_f *part, void *cls,
                      struct mpu_plan *out)
{
    unsigned char *md5s = NULL;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    int rc = 0;
    memset(out, 0, sizeof(*out));
    for (size_t i = 1; i < n; i++) /* the order first, as S3 answers */
        if (want[i].number <= want[i - 1].number)
            return -S3E_INVALID_PART_ORDER;
    out->n = n;
    out->parts = calloc(n, sizeof(*out->parts));
    out->use = calloc(n, sizeof(*out->use));
    md5s = malloc(16 * n);
    if (!out->parts || !out->use || !md5s) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n && !rc; i++) {
        struct mpu_part *p = &out->parts[i];
        if ((rc = part(cls, want[i].number, want[i].etag, p)))
            break;
        if (!mpu_etag_match(want[i].etag, p->etag) || strlen(p->etag) != 32 ||
            hex_decode(p->etag, 16, md5s + 16 * i)) {
            rc = -S3E_INVALID_PART;
            break;
        }
        if (i + 1 < n && p->size < BE_MIN_PART_SIZE) {
            rc = -S3E_ENTITY_TOO_SMALL;
            break;
        }
        if (i == 0)
            out->part_size = p->size;
        else if ((i + 1 < n && p->size != out->part_size) ||
                 (i + 1 == n && p->size > out->part_size))
            out->part_size = 0;
        out->use[i] = (struct mpu_slot_use){p->number, p->size, p->inplace};
        out->total += p->size;
    }
    if (!rc && !EVP_Digest(md5s, 16 * n, md, &mdlen, EVP_md5(), NULL))
        rc = -ENOMEM;
    if (!rc) {
        hex_encode(md, 16, out->etag);
        snprintf(out->etag + 32, sizeof(out->etag) - 32, "-%zu", n);
    }
out:
    free(md5s);
    if (rc)
        mpu_plan_free(out);
    return rc;
}

static int mpu_upload_cmp(const void *a, const void *b)
{
    const struct be_upload *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : strcmp(x->upload_id, y->upload_id);
}

void mpu_uploads_page(struct be_upload *u, size_t *n, const char *key_marker,
                      const char *id_marker, unsigned max, int *truncated)
{
    size_t k = 0;
    *truncated = 0;
    if (*n > 1)
        qsort(u, *n, sizeof(*u), mpu_upload_cmp);
    for (size_t i = 0; i < *n; i++) {
        int drop = 0;
        if (key_marker && *key_marker) {
            int c = strcmp(u[i].key, key_marker);
            drop = c < 0 ||
                   (c == 0 && (!id_marker || !*id_marker || strcmp(u[i].upload_id, id_marker) <= 0));
        }
        if (!drop && k == max) {
            *truncated = 1;
            drop = 1;
        }
        if (drop) {
            free(u[i].key);
            u[i].key = NULL;
            continue;
        }
        u[k++] = u[i];
    }
    *n = k;
}

void mpu_done_sweep(int dir_fd, int64_t *last_ns)
{
    int64_t now = s3c_real_ns(), last = __atomic_load_n(last_ns, __ATOMIC_RELAXED);
    if (now - last < MPU_DONE_SWEEP_NS ||
        !__atomic_compare_exchange_n(last_ns, &last, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return;
    int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    while ((de = readdir(d))) {
        struct stat st;
        if (de->d_name[0] == '.')
            continue;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec < now - MPU_DONE_TTL_NS)
            (void)unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
}
