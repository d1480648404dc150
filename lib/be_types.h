/*
 * be_types.h: the plain data every layer passes around with an object: its stored metadata
 * (struct be_meta), a multipart part (struct be_part) and the limits S3 sets on them. In lib/
 * because the XML reader (lib/xml.c) produces parts; the operations on them are the backend
 * interface's (backends/backend.h). Plain data: copy freely.
 */
#ifndef S3C_BE_TYPES_H
#define S3C_BE_TYPES_H

#include <stdint.h>

#define BE_ETAG_MAX 72
#define BE_USERMETA_MAX 2560 /* S3 allows 2 KB of user metadata; room for the separators */
#define BE_UPLOAD_ID_MAX 128
#define BE_MIN_PART_SIZE (5u << 20)
#define BE_MAX_PARTS 10000

/* What a backend stores with an object besides its bytes. Plain data: copy freely. */
struct be_meta {
    uint64_t size;
    int64_t mtime_ns;                /* Last-Modified, ns since the epoch */
    char etag[BE_ETAG_MAX];          /* without quotes: 32 hex, or 32 hex "-N" for multipart */
    char content_type[256];
    char cache_control[256];
    char content_disposition[512];
    char content_encoding[128];
    char content_language[64];
    char expires[64];
    /* x-amz-meta-*: "name:value\n" lines, name lower case without the "x-amz-meta-" prefix. */
    char usermeta[BE_USERMETA_MAX];
    char checksum_algo[8];           /* "", "CRC32", "CRC32C", "SHA1", "SHA256" */
    char checksum[64];               /* base64 full-object checksum of checksum_algo */
    uint32_t parts_count;            /* 0 for objects made by a single PUT */
    uint64_t part_size;              /* multipart: size of every part but the last when they are
                                      * all equal (what GET ?partNumber=N needs), else 0 */
};

struct be_part {
    unsigned number;
    char etag[BE_ETAG_MAX]; /* without quotes */
    uint64_t size;
    int64_t mtime_ns;
    char checksum_algo[8];
    char checksum[64];
};

#endif
