/*
 * tar.h: reading inside tar archives (WebDataset shards) without holding them in memory.
 *   - tar_walk: a forward-only, caller-driven walker. It says which bytes it needs next (a
 *     512-byte header, or one pax / GNU long-name payload, capped), the caller reads them
 *     (pread on a cached file, a ranged GET on a backend, or the bytes of a stream as they
 *     pass) and feeds them, and it emits one entry {name, data offset, size, type} per member.
 *     tar_walk_all() is that loop once, over a reader callback and an entry callback.
 *   - tar_index: the member index of one archive as a byte blob (an LMDB value): a sorted
 *     table read in place, O(log n) lookups by name, members in archive order.
 * Pure: no I/O but tar_index_build_fd()'s pread, no logging, no global state.
 */
#ifndef S3C_TAR_H
#define S3C_TAR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "s3c.h"

#define TAR_BLOCK 512
/* Longest member name kept (pax 'path' or GNU 'L' names can be longer; such entries are
 * emitted with TAR_F_UNSAFE and never indexed). */
#define TAR_NAME_MAX 4096

/* Caps against absurd or hostile archives. A zero field takes its default. */
struct tar_limits {
    uint32_t max_entries;    /* entries emitted (every type); default 1,000,000 */
    uint64_t max_name_bytes; /* sum of the emitted names' lengths; default 64 MiB */
    uint32_t max_meta;       /* one pax ('x' 'g' 'X') or GNU 'L' 'K' payload; default 64 KiB */
    uint32_t max_meta_run;   /* metadata headers before one entry; default 32 */
};
#define TAR_DEF_MAX_ENTRIES 1000000u
#define TAR_DEF_MAX_NAME_BYTES (64ull << 20)
#define TAR_DEF_MAX_META (64u << 10)
#define TAR_DEF_MAX_META_RUN 32u

enum tar_type {
    TAR_REG = 0,      /* '0', NUL, '7' (contiguous): the only type served as a member */
    TAR_DIR = 1,      /* '5', or an old-style NUL typeflag with a name ending in '/' */
    TAR_SYMLINK = 2,  /* '2' */
    TAR_HARDLINK = 3, /* '1' */
    TAR_SPARSE = 4,   /* GNU 'S' or pax GNU.sparse.*: its data is a sparse map, not the file */
    TAR_OTHER = 5,    /* '3' '4' '6', GNU 'D' 'M' 'V', unknown typeflags (data skipped) */
};

/* Entry flags. */
#define TAR_F_UNSAFE 0x1u /* empty name, leading '/', a ".." segment ('/' or '\\' separated),
                           * a NUL inside, or longer than TAR_NAME_MAX: never indexed */

struct tar_entry {
    const char *name;  /* NUL-terminated (a pax name with a NUL inside is cut there and
                        * flagged); borrowed: valid until the next tar_walk_next() call */
    size_t name_len;
    uint64_t hdr_off;  /* first header of the entry, pax / GNU long-name headers included
                        * (tarfile's TarInfo.offset, except after a 'g' header) */
    uint64_t data_off; /* first data byte (tarfile's TarInfo.offset_data) */
    uint64_t size;     /* data bytes at data_off; 0 for types without data (dir, links,
                        * devices). [data_off, data_off + size) is always inside the archive */
    int64_t mtime;     /* seconds; pax 'mtime' (integer part) wins over the header's field,
                        * which gives 0 when unreadable (mtime is never an error) */
    enum tar_type type;
    unsigned flags;    /* TAR_F_* */
};

/* What to read next: @len bytes of the archive at @off. */
struct tar_need {
    uint64_t off;
    size_t len;
};

enum tar_step {
    TAR_END = 0,   /* the end: a zero block, or the archive's size reached at a header */
    TAR_NEED = 1,  /* *need is set: feed those bytes, then call tar_walk_next() again */
    TAR_ENTRY = 2, /* *ent is set */
};

struct tar_walk;

/* Starts a walk over an archive of @archive_size bytes with @lim (NULL: defaults).
 * Returns 0 or -ENOMEM. Free with tar_walk_free(). */
int tar_walk_new(uint64_t archive_size, const struct tar_limits *lim, struct tar_walk **out);
void tar_walk_free(struct tar_walk *w);

/* Advances the walk. Returns
 *   TAR_NEED:  *need says which bytes to feed next; they always lie inside the archive, at or
 *              after every byte asked for before (forward only). Calling again without
 *              feeding all of them returns TAR_NEED for the rest.
 *   TAR_ENTRY: *ent describes the next member, in archive order.
 *   TAR_END:   done (again on every later call).
 *   -EBADMSG   not a valid tar here: header checksum, a numeric field, a pax record, an
 *              extended header with no entry after it;
 *   -ENODATA   truncated: a header or a member's data would end past @archive_size;
 *   -E2BIG     a struct tar_limits cap was passed;
 *   -ENOMEM.
 * An error is final (returned again by every later call) and tar_walk_reason() says what and
 * at which offset. Entries returned before an error were read correctly, but the archive is
 * not valid as a whole: the index builders reject it. Work is bounded: every step moves
 * forward by at least one block, and each block is read once. */
int tar_walk_next(struct tar_walk *w, struct tar_entry *ent, struct tar_need *need);

/* Feeds the next @len bytes of the range last asked for by TAR_NEED (all of it at once, or in
 * pieces, in order). Returns 0, or -EINVAL when no bytes are awaited or @len exceeds what is
 * (a bug of the caller: the walk fails with that error). */
int tar_walk_feed(struct tar_walk *w, const void *buf, size_t len);

/* A short reason for the last error ("bad header checksum at offset 1536"), or "". */
const char *tar_walk_reason(const struct tar_walk *w);

/* The whole walk, for a caller that has the archive at hand (a file, the cache): the step API
 * above driven to its end, the bytes it needs asked of @read and each entry handed to
 * @on_entry. */
/* Gives the @len bytes of the archive at @off: 0 with *@bytes pointing at them (the reader's
 * memory, valid until its next call), or a negative error (reason in @em if it has one). */
typedef int tar_read_f(void *cls, uint64_t off, size_t len, const void **bytes,
                       struct errmsg *em);
/* Takes the next entry (borrowed, as tar_walk_next()'s): 0 goes on, anything else ends the
 * walk and is tar_walk_all()'s result. */
typedef int tar_entry_f(void *cls, const struct tar_entry *ent, struct errmsg *em);
/* Walks the archive of @archive_size bytes with @lim (NULL: defaults): @read(@read_cls, ...)
 * feeds it, forward only, and @on_entry(@entry_cls, ...) gets every entry in archive order.
 * Returns 0 at the end of the archive, the walk's error (as tar_walk_next(), the reason in
 * @em as "tar: <reason>"), -ENOMEM, or the first nonzero result of @read or @on_entry. */
int tar_walk_all(uint64_t archive_size, const struct tar_limits *lim, tar_read_f *read,
                 void *read_cls, tar_entry_f *on_entry, void *entry_cls, struct errmsg *em);

/*
 * The member index, a blob of version 1 (integers little-endian, read unaligned):
 *   header   32 bytes: "TARX", u8 version (1), u8 record size (24), u16 0, u32 n,
 *            u32 names_len, u64 archive_size, u32 n_skipped, u32 crc32 (zlib, of the blob with
 *            this field taken as 0)
 *   records  n x 24 bytes, in archive order: u64 data_off, u64 size, u32 name_off, u16 name_len,
 *            u16 0
 *   sorted   n x u32: record numbers ordered by name (bytewise, shorter first)
 *   names    names_len bytes: the names, without separators
 * 28 bytes + the name per member, plus 32: 10,000 WebDataset members named like
 * "sample-00042.jpg" (16 bytes) take 440,032 bytes.
 * Only TAR_REG entries with safe names are indexed, and a name appearing more than once maps to
 * its last entry (tar semantics: extracting overwrites), even when that last one is not a
 * regular file (the name is then absent). n_skipped counts the entries left out.
 */
#define TAR_INDEX_VERSION 1
#define TAR_INDEX_HDR 32
#define TAR_INDEX_REC 24

/* A member as the index has it. name is borrowed from the blob (not NUL-terminated). */
struct tar_member {
    const char *name;
    size_t name_len;
    uint64_t data_off;
    uint64_t size;
    uint32_t pos; /* rank in archive order: tar_index_get(ix, pos) gives this member */
};

/* A view on a blob; it holds no memory of its own and is valid while the blob is. */
struct tar_index {
    const uint8_t *blob;
    size_t len;
    uint32_t n;
    uint32_t names_len;
    uint64_t archive_size;
    uint32_t n_skipped;
};

struct tar_index_builder;

/* Collects the entries of one archive of @archive_size bytes. Returns 0 or -ENOMEM. */
int tar_index_builder_new(uint64_t archive_size, struct tar_index_builder **out);
void tar_index_builder_free(struct tar_index_builder *b);
/* Adds the next entry of the walk (any type; the builder picks what it indexes: TAR_F_UNSAFE
 * entries are counted as skipped and take no part in "the last of a name wins").
 * Returns 0, -ENOMEM, or -E2BIG past 16,777,216 entries or 4 GiB of names. */
int tar_index_builder_add(struct tar_index_builder *b, const struct tar_entry *ent);
/* Makes the blob: *blob is malloc'ed (the caller frees it), *len its size.
 * Returns 0 or -ENOMEM; the builder can only be freed afterwards. */
int tar_index_builder_finish(struct tar_index_builder *b, void **blob, size_t *len);

/* Walks the archive of @size bytes that @read(@cls, ...) gives (tar_walk_all()) and makes its
 * index blob, as tar_index_builder_finish(). Returns 0, the walk's error or the builder's
 * (reason in @em), or @read's. *@blob is NULL on failure. */
int tar_index_build(uint64_t size, const struct tar_limits *lim, tar_read_f *read, void *cls,
                    void **blob, size_t *len, struct errmsg *em);
/* tar_index_build() of the archive in @fd (@size bytes; read with pread, 512 bytes per member
 * plus extended headers). Returns 0, the walk's error or the builder's (reason in @em), -errno
 * of a failed pread, or -ENODATA when the file ends before @size. @fd is borrowed (its offset
 * is not used). */
int tar_index_build_fd(int fd, uint64_t size, const struct tar_limits *lim, void **blob,
                       size_t *len, struct errmsg *em);

/* Opens a view on @blob (@len bytes, e.g. an LMDB value) after O(1) checks: magic, version,
 * record size, and that the sizes of its parts add up to @len. Returns 0, or -EBADMSG for a
 * blob that is not a version-1 index, with a reason in @em. Each lookup then bounds-checks what
 * it reads, so a corrupt blob gives -EBADMSG or a wrong answer, never a read outside it. */
int tar_index_open(struct tar_index *ix, const void *blob, size_t len, struct errmsg *em);

/* Checks the whole blob in O(n): the crc32, every record inside the archive and the names
 * area, records in archive order without overlap, names strictly sorted. Returns 0 or
 * -EBADMSG (reason in @em). For a blob just read from storage that is not trusted. */
int tar_index_verify(const struct tar_index *ix, struct errmsg *em);

/* Looks @name (@name_len bytes) up in O(log n). Returns 0 with *out, -ENOENT, or -EBADMSG
 * when a record it reads is corrupt. */
int tar_index_find(const struct tar_index *ix, const char *name, size_t name_len,
                   struct tar_member *out);

/* The member of rank @pos in archive order (0 <= @pos < ix->n). Returns 0, -ERANGE, or
 * -EBADMSG when its record is corrupt. */
int tar_index_get(const struct tar_index *ix, uint32_t pos, struct tar_member *out);

/*
 * Writing (tar_write.c): the header blocks of one regular-file entry, for responses that are
 * tar streams. Its data follows, padded with zeros to a multiple of TAR_BLOCK (TAR_PAD); two
 * zero blocks end an archive.
 */
#define TAR_PAD(n) ((TAR_BLOCK - (n) % TAR_BLOCK) % TAR_BLOCK)

/* A pax record of the caller's ("S3CACHED.status" = "404"). */
struct tar_write_kv {
    const char *key, *value;
};

/* Writes the header of a regular file named @name (@name_len bytes, no NUL) of @size bytes,
 * mode 0644, modified at @mtime (seconds), into @buf (@cap bytes): one ustar block, or a pax
 * header ("path" past 100 bytes, "size" past 8 GiB - 1, and @pax's @n_pax records) and then
 * the ustar block. Returns its length (a multiple of TAR_BLOCK), -E2BIG when @cap is too small,
 * or -EINVAL for an empty name. */
ssize_t tar_write_header(void *buf, size_t cap, const char *name, size_t name_len,
                         uint64_t size, int64_t mtime, const struct tar_write_kv *pax,
                         size_t n_pax);

#endif
