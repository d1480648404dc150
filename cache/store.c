/*
 * store.c: the cache's on-disk layout: name key -> hashed fan-out path, temp
 * files, rename into the store, directory fsyncs. It owns no state and takes
 * no locks; eviction and fills decide what to create and unlink.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store.h"
#include "lib/digest.h"
#include "lib/hex.h"

static void dir_of(const char *path, char *out)
{
    snprintf(out, STORE_PATH_MAX, "%s", path);
    char *s = strrchr(out, '/');
    if (s)
        *s = 0;
}

int store_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

int store_mkdir(const char *p)
{
    char parent[STORE_PATH_MAX];
    if (mkdir(p, 0755))
        return errno == EEXIST ? 0 : -errno;
    dir_of(p, parent);
    return store_sync_dir(parent[0] ? parent : "/");
}

int store_init(const char *dir)
{
    char p[STORE_PATH_MAX];
    int rc = store_mkdir(dir);
    if (rc)
        return rc;
    snprintf(p, sizeof(p), "%s/data", dir);
    if ((rc = store_mkdir(p)))
        return rc;
    snprintf(p, sizeof(p), "%s/tmp", dir);
    if ((rc = store_mkdir(p)))
        return rc;
    DIR *d = opendir(p);
    if (!d)
        return -errno;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
    return 0;
}

void store_data_path(const char *dir, const void *name_key, size_t klen, uint64_t version,
                     char out[STORE_PATH_MAX])
{
    uint8_t dg[32];
    char hex[65];
    (void)digest_sha256(name_key, klen, dg); /* zeroed when OpenSSL fails */
    hex_encode(dg, 32, hex);
    snprintf(out, STORE_PATH_MAX, "%s/data/%.2s/%.2s/%s-%016llx", dir, hex, hex + 2, hex,
             (unsigned long long)version);
}

/* Creates the two fan-out levels above @path, each durable in its parent. */
static int make_parents(const char *path)
{
    char d[STORE_PATH_MAX], dd[STORE_PATH_MAX];
    dir_of(path, d);
    if (access(d, F_OK) == 0)
        return 0;
    dir_of(d, dd);
    int rc = store_mkdir(dd);
    if (rc)
        return rc;
    return store_mkdir(d);
}

int store_open(const char *path, int create, int *fd)
{
    int f = open(path, O_RDWR | O_CLOEXEC);
    if (f >= 0) {
        *fd = f;
        return 0;
    }
    if (errno != ENOENT || !create)
        return -errno;
    int rc = make_parents(path);
    if (rc)
        return rc;
    f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600); /* cached data: the owner's alone */
    if (f < 0)
        return -errno;
    char d[STORE_PATH_MAX];
    dir_of(path, d);
    store_sync_dir(d);
    *fd = f;
    return 0;
}

int store_stage(const char *dir, int *fd, char path[STORE_PATH_MAX])
{
    snprintf(path, STORE_PATH_MAX, "%s/tmp/stage-XXXXXX", dir);
    int f = mkostemp(path, O_CLOEXEC);
    if (f < 0)
        return -errno;
    *fd = f;
    return 0;
}

int store_rename(const char *from, const char *to)
{
    int rc = make_parents(to);
    if (rc)
        return rc;
    if (rename(from, to))
        return -errno;
    char d[STORE_PATH_MAX];
    dir_of(to, d);
    return store_sync_dir(d);
}

uint64_t store_new_version(void)
{
    uint64_t v = 0;
    while (v == 0) {
        if (getrandom(&v, sizeof(v), 0) != sizeof(v))
            v = (uint64_t)random() << 32 ^ (uint64_t)random();
    }
    return v;
}

void store_preallocate(int fd, uint64_t off, uint64_t len, int in_memory)
{
    if (!in_memory && len)
        (void)fallocate(fd, 0, (off_t)off, (off_t)len);
}

void store_punch(int fd, uint64_t off, uint64_t len)
{
    if (len)
        (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
}
