/*
 * mpu_slot.c: the locks and the Complete plan of the in-place multipart layout
 * (backends/mpu_slot.h says what they guarantee). Owns no state: every lock
 * belongs to the open file description it was taken on.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "mpu_slot.h"

static int setlk(int fd, int cmd, short type, uint64_t off, uint64_t len)
{
    struct flock fl;
    memset(&fl, 0, sizeof(fl)); /* l_pid must be 0 for OFD locks */
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = (off_t)off;
    fl.l_len = (off_t)len; /* 0: to the end of the file, however far it grows */
    for (;;) {
        if (fcntl(fd, cmd, &fl) == 0)
            return 0;
        if (errno != EINTR)
            return errno == EACCES ? -EAGAIN : -errno;
    }
}

int mpu_slot_lock(int fd, unsigned number, uint64_t psize)
{
    if (number < 1 || !psize)
        return -EINVAL;
    return setlk(fd, F_OFD_SETLK, F_WRLCK, (uint64_t)(number - 1) * psize, psize);
}

void mpu_slot_unlock(int fd, unsigned number, uint64_t psize)
{
    if (number >= 1 && psize)
        (void)setlk(fd, F_OFD_SETLK, F_UNLCK, (uint64_t)(number - 1) * psize, psize);
}

int mpu_slot_lock_all(int fd)
{
    return setlk(fd, F_OFD_SETLK, F_WRLCK, 0, 0);
}

int mpu_slot_publish_lock(int fd, unsigned number)
{
    return setlk(fd, F_OFD_SETLKW, F_WRLCK, number, 1);
}

void mpu_slot_unpublish(int fd, unsigned number)
{
    (void)setlk(fd, F_OFD_SETLK, F_UNLCK, number, 1);
}

int mpu_slot_plan(const struct mpu_slot_use *u, size_t n, uint64_t psize, unsigned max_inplace)
{
    if (!n || !psize || max_inplace > n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (u[i].number != i + 1)
            return 0;
        if (u[i].inplace)
            continue;
        if (i + 1 < n ? u[i].size != psize : u[i].size > psize)
            return 0;
    }
    return 1;
}
