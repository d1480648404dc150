/*
 * fileio.h: whole-range file I/O every layer needs: write all of a buffer at an offset, and
 * copy a range between two files (in the kernel when it can). Blocking; EINTR is retried.
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

#endif
