/*
 * mpu_slot.h: the in-place layout of multipart uploads, shared by the POSIX
 * backend (be_file.c) and write-back staging (objects/wb_mpu.c). Clients send
 * parts of one common size P (but the last); such a part N goes straight into
 * the upload's data file at (N-1)*P, "slot N", so that a Complete of parts
 * 1..n can make that file the object with no second copy. What keeps attempts
 * of one part number from mixing, and a failed attempt from losing the part
 * acknowledged before it (backends/mpu_slot.c has the locks and the plan):
 *  - an attempt writes slot N only while it holds the slot's lock (an OFD lock
 *    on the slot's range, taken without waiting: a second attempt at once
 *    stages its bytes in a file of its own) and only when no acknowledged part
 *    N is in the slot (looked at after locking: only a holder records one);
 *  - records of part N are made and removed under N's publication lock, once
 *    the bytes are synced, and only by an attempt that succeeded: the last one
 *    to succeed is the part, a failed one leaves the records as they were;
 *  - a Complete makes the data file the object only while it holds the whole
 *    file's lock (no attempt is writing a slot, none can start); otherwise it
 *    copies the parts out and checks the MD5 of the slots it copied.
 * The locks are the kernel's (fcntl F_OFD_SETLK): they work across threads and
 * processes (gateways sharing a backend directory) and go when the descriptor
 * is closed, also by a crash. Where the file system has no locks, every
 * attempt stages its own file and every Complete copies: slower, still right.
 */
#ifndef S3C_MPU_SLOT_H
#define S3C_MPU_SLOT_H

#include <stddef.h>
#include <stdint.h>

/* Locks slot @number (of @psize bytes) of the data file @fd (open for writing) for this open
 * file description, without waiting: 0, or -EAGAIN when another attempt or a Complete holds
 * it, or another -errno (no locks here). Closing @fd releases it. */
int mpu_slot_lock(int fd, unsigned number, uint64_t psize);
/* Releases the lock of mpu_slot_lock() before @fd is closed (its attempt was recorded: a
 * Complete right after it must find the file free). */
void mpu_slot_unlock(int fd, unsigned number, uint64_t psize);
/* Locks the whole data file @fd (open for writing), without waiting: 0 when no slot is locked
 * by anyone else (and none can be until @fd is closed), else -EAGAIN or another -errno. */
int mpu_slot_lock_all(int fd);
/* Waits for the publication lock of part @number: byte @number of @fd, a file of the upload
 * that stays as long as it does (open for writing). 0 or -errno; mpu_slot_unpublish() or
 * closing @fd releases it. */
int mpu_slot_publish_lock(int fd, unsigned number);
void mpu_slot_unpublish(int fd, unsigned number);

/* A part named by a Complete, as its upload holds it. */
struct mpu_slot_use {
    unsigned number;
    uint64_t size;
    int inplace; /* its bytes are in the data file's slot */
};

/* Whether a Complete of @u[0..@n) (ascending numbers) can make the data file of common part
 * size @psize the object: the parts are 1..n, each in its slot or of @psize bytes (copied into
 * its slot), the last one in its slot or of at most @psize bytes, and no part numbered above
 * n is in place (@max_inplace: the highest number in place, 0 for none; those bytes would be
 * cut off). Pure. */
int mpu_slot_plan(const struct mpu_slot_use *u, size_t n, uint64_t psize, unsigned max_inplace);

#endif
