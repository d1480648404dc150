/*
 * fileio.h: whole-range file I/O every layer needs: write all of a buffer at an offset, copy a
 * range between two files (in the kernel when it can), and what medium keeps a file system's
 * data. Blocking; EINTR is retried.
 */
#ifndef S3C_FILEIO_H
#define S3C_FILEIO_H

#include <stddef.h>
#include <stdint.h>

/* Writes @len bytes of @p to @fd at @off (pwrite until done). 0, -errno, or -EIO when the
 * file takes no more. */
int fileio_pwrite_all(int fd, const void *p, size_t len, uint64_t off);
/* Copies @len bytes of @in at @in_off to @out at @out_off: copy_file_range, else through a
 * buffer (another file system, a kernel or file without it). 0, -EIO when @in is shorter, or
 * -errno. */
int fileio_copy_range(int in, uint64_t in_off, int out, uint64_t out_off, uint64_t len);

/* What keeps a file system's data, as far as its latency goes. */
enum fs_medium {
    FS_MEDIUM_OTHER = 0, /* a network or FUSE file system (NFS, Lustre, CephFS, GPFS, SMB, 9p),
                          * or unknown: a read may stall on the network */
    FS_MEDIUM_DISK,      /* a local disk file system: ext2/3/4, xfs, btrfs, f2fs, zfs, overlayfs */
    FS_MEDIUM_MEMORY,    /* tmpfs, ramfs: no disk behind it */
};
/* The medium of the file system holding @fd, or FS_MEDIUM_OTHER when fstatfs fails. */
enum fs_medium fileio_medium_of_fd(int fd);
/* The same for the file system holding @path. */
enum fs_medium fileio_medium_of_path(const char *path);

#endif
