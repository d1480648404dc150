/*
 * fileio.c: whole-range writes, file-to-file copies and file system media (fileio.h). Owns
 * nothing: the descriptors are the caller's.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "fileio.h"
#include "s3c.h"

#define FILEIO_CHUNK (1u << 20) /* the copy buffer when the kernel cannot copy */

int fileio_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
    const unsigned char *p = buf;
    while (len) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EIO;
        p += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

int fileio_copy_range(int in, uint64_t in_off, int out, uint64_t out_off, uint64_t len)
{
    loff_t io = (loff_t)in_off, oo = (loff_t)out_off;
    while (len) {
        ssize_t n = copy_file_range(in, &io, out, &oo, (size_t)S3C_MIN(len, (uint64_t)1 << 30), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL ||
                      errno == EOPNOTSUPP || errno == EBADF))
            break; /* copy through memory instead */
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EIO; /* the source is shorter than promised */
        len -= (uint64_t)n;
    }
    if (!len)
        return 0;
    char *buf = malloc(FILEIO_CHUNK);
    int rc = buf ? 0 : -ENOMEM;
    while (!rc && len) {
        ssize_t n = pread(in, buf, (size_t)S3C_MIN(len, (uint64_t)FILEIO_CHUNK), io);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -EIO;
            break;
        }
        rc = fileio_pwrite_all(out, buf, (size_t)n, (uint64_t)oo);
        io += n;
        oo += n;
        len -= (uint64_t)n;
    }
    free(buf);
    return rc;
}

/* The statfs f_type magic numbers (linux/magic.h) of the file systems this code knows. */
static enum fs_medium medium_of_type(unsigned long type)
{
    static const struct {
        unsigned long magic;
        enum fs_medium medium;
    } known[] = {
        {0xEF53, FS_MEDIUM_DISK},         /* ext2/3/4 */
        {0x58465342, FS_MEDIUM_DISK},     /* xfs */
        {0x9123683E, FS_MEDIUM_DISK},     /* btrfs */
        {0xF2F52010, FS_MEDIUM_DISK},     /* f2fs */
        {0x2FC12FC1, FS_MEDIUM_DISK},     /* zfs */
        {0x794C7630, FS_MEDIUM_DISK},     /* overlayfs (a container's root) */
        {0x01021994, FS_MEDIUM_MEMORY},   /* tmpfs */
        {0x858458F6, FS_MEDIUM_MEMORY},   /* ramfs */
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (type == known[i].magic)
            return known[i].medium;
    return FS_MEDIUM_OTHER;
}

enum fs_medium fileio_medium_of_fd(int fd)
{
    struct statfs sf;
    return fstatfs(fd, &sf) < 0 ? FS_MEDIUM_OTHER : medium_of_type((unsigned long)sf.f_type);
}

enum fs_medium fileio_medium_of_path(const char *path)
{
    struct statfs sf;
    return statfs(path, &sf) < 0 ? FS_MEDIUM_OTHER : medium_of_type((unsigned long)sf.f_type);
}
