/*
 * s3err.c: the S3 error table (lib/s3err.h) and the one place where errno
 * values become S3 errors.
 */
#include <errno.h>
#include <string.h>

#include "s3err.h"

static const struct s3err_info s3err_table[] = {
#define X(sym, status, code, msg) {status, code, msg},
    S3ERR_TABLE(X)
#undef X
};

int s3err_from_errno(int rc, int is_bucket)
{
    if (rc >= 0)
        return rc;
    if (-rc > S3E_BASE && -rc < S3E_END)
        return rc;
    switch (-rc) {
    case ENOENT: return is_bucket ? -S3E_NO_SUCH_BUCKET : -S3E_NO_SUCH_KEY;
    case ENOSPC:
    case EDQUOT: return -S3E_INSUFFICIENT_STORAGE;
    case EACCES:
    case EPERM:
    case EROFS: return -S3E_ACCESS_DENIED;
    case ENAMETOOLONG: return -S3E_KEY_TOO_LONG;
    case ENOTEMPTY: return -S3E_BUCKET_NOT_EMPTY;
    case EEXIST:
    case ENOTDIR:
    case EISDIR: return -S3E_KEY_CONFLICT;
    case ETIMEDOUT: return -S3E_GATEWAY_TIMEOUT;
    case ECONNREFUSED:
    case ECONNRESET:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EPIPE: return -S3E_SERVICE_UNAVAILABLE;
    case EMSGSIZE: return -S3E_ENTITY_TOO_LARGE;
    case EINVAL: return -S3E_INVALID_ARGUMENT;
    case ENOTSUP: return -S3E_NOT_IMPLEMENTED;
    default: return -S3E_INTERNAL;
    }
}

const struct s3err_info *s3err_lookup(int rc, int is_bucket)
{
    int e = -s3err_from_errno(rc < 0 ? rc : -S3E_INTERNAL, is_bucket);
    if (e <= S3E_BASE || e >= S3E_END)
        e = S3E_INTERNAL;
    return &s3err_table[e - S3E_BASE - 1];
}

const char *s3c_strerror(int rc)
{
    if (rc == 0)
        return "success";
    if (rc < 0 && -rc > S3E_BASE && -rc < S3E_END)
        return s3err_table[-rc - S3E_BASE - 1].code;
    if (rc < 0)
        return strerror(-rc);
    return "unknown error";
}
