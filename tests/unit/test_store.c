/* test_store.c: the cache's file system helpers: what medium keeps a directory's data
 * (lib/fileio.c: the cache skips preallocation in memory, the file backend trusts a local disk
 * not to stall), preallocation and the mode of the files it creates (cache/store.c). */
#include <errno.h>
#include <fcntl.h>
#include <mntent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "cache/store.h"
#include "lib/fileio.h"

/* The type /proc/mounts gives the mount point @dir (exactly), or NULL. */
static const char *mount_type(const char *dir, char *out, size_t cap)
{
    FILE *f = setmntent("/proc/mounts", "r");
    const char *found = NULL;
    if (!f)
        return NULL;
    for (struct mntent *m; (m = getmntent(f));)
        if (!strcmp(m->mnt_dir, dir)) {
            snprintf(out, cap, "%s", m->mnt_type);
            found = out;
        }
    endmntent(f);
    return found;
}

static void test_medium_agrees_with_mounts(void **state)
{
    (void)state;
    char ty[64];
    if (!mount_type("/dev/shm", ty, sizeof(ty)))
        skip(); /* no /dev/shm mount on this machine */
    int mem = !strcmp(ty, "tmpfs") || !strcmp(ty, "ramfs");
    assert_int_equal(fileio_medium_of_path("/dev/shm") == FS_MEDIUM_MEMORY, mem);
    int fd = open("/dev/shm", O_RDONLY | O_DIRECTORY);
    assert_true(fd >= 0);
    assert_int_equal(fileio_medium_of_fd(fd) == FS_MEDIUM_MEMORY, mem);
    close(fd);
    assert_true(mount_type("/proc", ty, sizeof(ty)) && !strcmp(ty, "proc"));
    assert_int_equal(fileio_medium_of_path("/proc"), FS_MEDIUM_OTHER); /* not a disk */
    assert_int_equal(fileio_medium_of_path("/no/such/dir"), FS_MEDIUM_OTHER);
    assert_int_equal(fileio_medium_of_fd(-1), FS_MEDIUM_OTHER);
    if (mount_type("/", ty, sizeof(ty)) && (!strcmp(ty, "ext4") || !strcmp(ty, "xfs") ||
                                            !strcmp(ty, "btrfs") || !strcmp(ty, "overlay")))
        assert_int_equal(fileio_medium_of_path("/"), FS_MEDIUM_DISK);
}

static blkcnt_t blocks_after(const char *dir, int in_memory, uint64_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/prealloc-XXXXXX", dir);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    store_preallocate(fd, 0, len, in_memory);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    if (!in_memory) {
        /* the size covers the extent, so that a punch can give it all back (ext4 punches
         * nothing past a file's end: before, the preallocation past it outlived the punch) */
        assert_int_equal((uint64_t)st.st_size, len);
        blkcnt_t had = st.st_blocks;
        store_punch(fd, 0, len);
        struct stat after;
        assert_int_equal(fstat(fd, &after), 0);
        assert_int_equal(after.st_size, st.st_size); /* a punch keeps the size */
        if (had)
            assert_int_equal(after.st_blocks, 0);
    }
    close(fd);
    return st.st_blocks;
}

static void test_store_preallocate(void **state)
{
    (void)state;
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    const uint64_t len = 4u << 20;
    assert_int_equal(blocks_after(dir, 1, len), 0); /* in memory: nothing allocated */
    char probe[4096];
    snprintf(probe, sizeof(probe), "%s/probe-XXXXXX", dir);
    int fd = mkstemp(probe);
    assert_true(fd >= 0);
    unlink(probe);
    int can = fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 4096) == 0;
    close(fd);
    if (!can)
        skip(); /* this file system has no fallocate: nothing to compare */
    assert_true((uint64_t)blocks_after(dir, 0, len) * 512 >= len);
}

/* A cache file store_open() creates (a fill's data, an empty object) and a staged one are the
 * owner's alone, whatever the umask lets through. */
static void test_store_files_are_private(void **state)
{
    (void)state;
    char dir[256], p[STORE_PATH_MAX];
    struct stat st;
    int fd = -1;
    mode_t old = umask(022);
    snprintf(dir, sizeof(dir), "/tmp/test_store_mode.XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(p, sizeof(p), "%s/ab/cd/obj", dir);
    assert_int_equal(store_open(p, 1, &fd), 0);
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    close(fd);
    snprintf(p, sizeof(p), "%s/tmp", dir);
    assert_int_equal(mkdir(p, 0700), 0);
    assert_int_equal(store_stage(dir, &fd, p), 0);
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    close(fd);
    umask(old);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_medium_agrees_with_mounts),
        cmocka_unit_test(test_store_preallocate),
        cmocka_unit_test(test_store_files_are_private),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
