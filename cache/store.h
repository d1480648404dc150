/*
 * store.h: the on-disk layout of the cache (private to cache/). Object data
 * lives in CACHE_DIR/data/ab/cd/<hex of the index key hash>-<version>, one
 * sparse file per object version; CACHE_DIR/tmp holds staged uploads. No
 * locking, no index: callers decide, store.c does the file system calls.
 */
#ifndef S3C_CACHE_STORE_H
#define S3C_CACHE_STORE_H

#include <stddef.h>
#include <stdint.h>

#define STORE_PATH_MAX 4096

/* Creates @p (one level) and, when it was created, fsyncs its parent: a directory's entry is
 * durable only then. 0 (also when it existed) or -errno. */
int store_mkdir(const char *p);
/* fsync() of the directory @dir: the names created, renamed or removed in it become durable. */
int store_sync_dir(const char *dir);
/* Creates data/ and tmp/ under @dir, durably, and empties tmp/ (orphans of a previous run). */
int store_init(const char *dir);
/* The data file path of (@name_key, @version). */
void store_data_path(const char *dir, const void *name_key, size_t klen, uint64_t version,
                     char out[STORE_PATH_MAX]);
/* Opens @path O_RDWR (creating it and its parent directories, fsyncing the parent when
 * created, if @create). 0 and *@fd, or -errno. */
int store_open(const char *path, int create, int *fd); /* created 0600 */
/* A new temp file in tmp/: O_RDWR|O_CLOEXEC. */
int store_stage(const char *dir, int *fd, char path[STORE_PATH_MAX]);
/* Renames @from to @to (creating parents) and fsyncs the directory. */
int store_rename(const char *from, const char *to);
/* Allocates [@off, @off + @len) of @fd at once (best effort): one extent instead of
 * page-by-page delayed allocation. The file's size grows to @off + @len if it was smaller (a
 * data file's size means nothing: the index says what is present), so that store_punch() can
 * give the range back (ext4 punches nothing past the end of a file, and an extent kept past it
 * would hold disk space nothing counts). Nothing when @in_memory (tmpfs, ramfs: there it
 * would allocate and zero pages that the write then copies over again). */
void store_preallocate(int fd, uint64_t off, uint64_t len, int in_memory);
/* Gives back the space of [@off, @off + @len) of @fd (best effort; the file keeps its size). */
void store_punch(int fd, uint64_t off, uint64_t len);
/* A fresh random non-zero version id. */
uint64_t store_new_version(void);

#endif
