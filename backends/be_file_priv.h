/*
 * be_file_priv.h: what the files of the POSIX backend share: its state (struct bef), the
 * directory cache's entries, the metadata record format, temp files, and the functions each
 * file gives the others (prefixed bef_). Only backends/be_file*.c include it.
 *   be_file.c          open/close, reads (HEAD, GET, open_fd), writes (PUT, copy, DELETE), buckets
 *   be_file_store.c    records, names and paths, temp files and their atomic placement (nesting)
 *   be_file_dircache.c the bounded LRU of sorted directory entries listings search
 *   be_file_list.c     ListObjects over the tree (a walk of the directory cache)
 *   be_file_mpu.c      multipart uploads in ROOT/.s3cached/uploads (backends/mpu*.c share the rules)
 */
#ifndef S3C_BE_FILE_PRIV_H
#define S3C_BE_FILE_PRIV_H

#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "backend.h"

#define BEF_MAGIC 0xbef11e5u
#define BEF_XATTR "user.s3cached"
#define BEF_PART_XATTR "user.s3cached.part"
#define BEF_PSIZE_XATTR "user.s3cached.psize" /* an upload's "data": its part size P */
#define BEF_MARKER ".s3cached-dir"
#define BEF_SELF ".s3cached-obj"          /* key "a" kept inside directory "a" */
#define BEF_INTERNAL ".s3cached"
#define BEF_CHUNK (256u * 1024)
#define BEF_KEY_MAX 1024
#define BEF_PATH_MAX 1400                 /* bucket + '/' + key + marker suffix */
#define BEF_REC_MAX 8192                  /* encoded metadata record */
#define BEF_DC_CAP_BYTES (256ull << 20)   /* directory cache memory */
#define BEF_DC_CAP_DIRS 200000u
#define BEF_DC_NBUCKETS 16384u
#define BEF_DC_STABLE_NS (200LL * 1000000) /* trust a dir mtime only this far in the past */
#define BEF_COMPLETED_TTL_NS (3600LL * 1000000000)
#define BEF_SWEEP_EVERY_NS (600LL * 1000000000)
#define BEF_TMP_TTL_NS (3600LL * 1000000000)
#define BEF_PLACE_RETRIES 32
#define BEF_MEMO_SLOTS 16384u             /* ETags of files outside the store */


/* ------------------------------------------------------------------------------------ */
/* Directory cache                                                                       */

/* DE_NESTED: the key "name" that directory "name/" may hold as BEF_SELF (each directory has one,
 * looked up when listed); DE_SELF: that file, seen inside the directory (not an entry there). */
enum { DE_FILE = 1, DE_DIR = 2, DE_MARKER = 3, DE_NESTED = 4, DE_SELF = 5 };

/* One directory entry by its "virtual name": a file's name, a directory's name + "/" (and its
 * nested key: the name alone), "" for the marker file. Sorting virtual names bytewise gives S3
 * key order: "a" < "a-b" < "a.txt" < "a/" < "a0". */
struct dent {
    uint32_t off; /* into the arena */
    uint16_t len;
    uint8_t type;
};

struct dcent {
    struct dcent *hnext, *prev, *next; /* hash chain, LRU list */
    char *path;
    uint64_t hash;
    dev_t dev;
    ino_t ino;
    struct timespec mtim;
    size_t n;
    struct dent *ents;
    char *arena;
    size_t bytes;
    unsigned refs; /* the table holds one while the entry is in it */
    int in_table;
};

struct dircache {
    pthread_mutex_t mu;
    struct dcent **tab;
    struct dcent lru; /* sentinel: lru.next is the most recent */
    size_t bytes;
    size_t count;
};

struct bef {
    unsigned magic;
    struct backend be;
    char *root;
    int rootfd, tmpfd, upfd, donefd;
    struct dircache dc;
    int64_t last_sweep_ns;
    /* place() creating a key's parent directories and renaming into them, and be_file_del()
     * unlinking a key (read) against be_file_del() removing parents left empty and nest()
     * turning a file into a directory (write): this process's puts and deletes of keys under
     * one prefix cannot starve each other (another process is met by retries). Other
     * processes on the same store are kept out of a nest() by flock(): shared on the key's
     * directory while a key is renamed in or unlinked, exclusive while one of its files nests. */
    pthread_rwlock_t parents;
    int follow;        /* --follow-symlinks */
    int can_exchange;  /* renameat2(RENAME_EXCHANGE) works here: keys nest, dirs get flocks */
    int have_openat2;  /* else reads follow no symlink at all (without --follow-symlinks) */
    pthread_mutex_t memo_mu;
    struct memo *memo; /* BEF_MEMO_SLOTS, allocated on the first file outside the store */
};

/* An ETag computed for a file outside the store (no xattr is written there). */
struct memo {
    dev_t dev;
    ino_t ino;
    uint64_t size;
    int64_t mtime_ns, ctime_ns;
    char etag[33];
};

/* ------------------------------------------------------------------------------------ */
/* Metadata records: "S3C" 0x01, then (tag, u16 length, bytes) fields.                  */

enum {
    T_SIZE = 1, T_MTIME, T_ETAG, T_CTYPE, T_CC, T_CD, T_CE, T_CL, T_EXPIRES, T_UMETA,
    T_CKALGO, T_CK, T_PARTS, T_PSIZE,
    T_BUCKET = 20, T_KEY, T_INIT, T_PHASH, T_NUMBER,
};

struct rec {
    struct be_meta m;
    int have_size, have_mtime;
    char bucket[64];
    char key[BEF_KEY_MAX + 1];
    int64_t initiated_ns;
    char phash[33];
    unsigned number;
};

struct enc {
    char buf[BEF_REC_MAX];
    size_t len;
    int err;
};


/* ------------------------------------------------------------------------------------ */
/* Temp files and atomic placement                                                       */

struct tmpf {
    int fd;
    char name[48];
};


/* A directory on the way down a walk: with --follow-symlinks, a link back to one of them (a
 * loop) is not walked again. */
struct anc {
    dev_t dev;
    ino_t ino;
    const struct anc *up;
};

static inline struct bef *bef_of(struct backend *be)
{
    struct bef *b;

    CHECK_OBJ_NOTNULL(be, BACKEND_MAGIC);
    CAST_OBJ_NOTNULL(b, (struct bef *)be->priv, BEF_MAGIC);
    return b;
}

static inline int64_t ts_ns(const struct timespec *ts)
{
    return (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}


/* be_file_dircache.c: directory cache */
void bef_dc_release(struct dircache *dc, struct dcent *e);
int bef_dc_init(struct dircache *dc);
void bef_dc_destroy(struct dircache *dc);
int bef_classify(int dfd, const struct dirent *d, int follow);
int bef_list_dir_open(struct bef *b, const char *path);
int bef_dc_get(struct bef *b, const char *path, struct dcent **out);
const char *bef_dent_name(const struct dcent *e, size_t i);
size_t bef_dc_lower(const struct dcent *e, const char *s, size_t n);
size_t bef_dc_prefix_end(const struct dcent *e, size_t lo, const char *s, size_t n);
int bef_dent_eq(const struct dcent *e, size_t i, const char *s, size_t n);

/* be_file_store.c: records, names, temp files, placement */
void bef_enc_init(struct enc *e);
void bef_enc_str(struct enc *e, int tag, const char *s);
void bef_enc_num(struct enc *e, int tag, int64_t v);
void bef_enc_meta(struct enc *e, const struct be_meta *m);
int bef_rec_decode(const char *buf, size_t len, struct rec *r);
int bef_md5_fd(int fd, uint64_t off, uint64_t len, char out[33]);
void bef_random_hex(char *out, size_t nbytes);
const char *bef_guess_type(const char *key);
int bef_check_names(const char *bucket, const char *key);
int bef_obj_path(const char *bucket, const char *key, char out[BEF_PATH_MAX]);
int bef_bucket_exists(struct bef *b, const char *bucket);
int bef_missing(struct bef *b, const char *bucket);
int bef_copy_range_to(int in, uint64_t off, int out, uint64_t out_off, uint64_t len);
int bef_copy_range(int in, uint64_t off, int out, uint64_t len);
int bef_tmp_create(struct bef *b, struct tmpf *t);
void bef_tmp_discard(struct bef *b, struct tmpf *t);
int bef_tmp_finish(struct tmpf *t, struct be_meta *m);
int bef_dir_lock(const struct bef *b, int fd, int op);
void bef_dir_unlock(int fd, int locked);
int bef_open_parents(struct bef *b, const char *bucket, char *const *dirs, size_t n, int create, int *out, size_t *bad);
size_t bef_split_key(const char *key, char *buf, char **dirs, const char **leaf);
int bef_place(struct bef *b, const char *bucket, const char *key, struct tmpf *t);

/* be_file.c */
int bef_open_nofollow(struct bef *b, const char *path, int flags);
int bef_read_open(struct bef *b, const char *path, int *outside);
int bef_obj_open(struct bef *b, const char *bucket, const char *key, int *out, struct be_meta *m);
void bef_sweep_tmp(struct bef *b);

/* be_file_list.c: listing */
int bef_dir_has_key(struct bef *b, const char *path, int depth, const struct anc *up);
int be_file_list(struct backend *be, const struct be_list_req *rq, struct be_list_page *out);

/* be_file_mpu.c: multipart */
void bef_rm_flat_dir(int parent, const char *name);
int be_file_mp_create(struct backend *be, const char *bucket, const char *key, const struct be_meta *meta, char upload_id[BE_UPLOAD_ID_MAX]);
int be_file_mp_put_part(struct backend *be, const char *bucket, const char *key, const char *upload_id, int fd, const struct be_part *part);
int be_file_mp_copy_part(struct backend *be, const char *bucket, const char *key, const char *upload_id, unsigned part_number, const char *src_bucket, const char *src_key, uint64_t off, uint64_t len, struct be_part *out);
int be_file_mp_complete(struct backend *be, const char *bucket, const char *key, const char *upload_id, const struct be_part *parts, size_t n, struct be_meta *out);
int be_file_mp_abort(struct backend *be, const char *bucket, const char *key, const char *upload_id);
int be_file_mp_list_parts(struct backend *be, const char *bucket, const char *key, const char *upload_id, unsigned marker, unsigned max, struct be_part **out, size_t *n, int *truncated);
int be_file_mp_list_uploads(struct backend *be, const char *bucket, const char *prefix, const char *key_marker, const char *upload_id_marker, unsigned max, struct be_upload **out, size_t *n, int *truncated);

#endif
