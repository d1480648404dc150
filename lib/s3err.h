/*
 * s3err.h: the one table of S3 errors. Functions return 0, -errno or -S3E_*;
 * S3E values start at 1000 so they never collide with errno. The request
 * layer turns any of them into status + XML <Error> with s3err_lookup().
 */
#ifndef S3ERR_H
#define S3ERR_H

/*     symbol                     status  S3 Code                              default message */
#define S3ERR_TABLE(X)                                                                                      \
    X(ACCESS_DENIED,              403, "AccessDenied",                   "Access Denied")                   \
    X(SIGNATURE_DOES_NOT_MATCH,   403, "SignatureDoesNotMatch",          "The request signature we calculated does not match the signature you provided. Check your key and signing method.") \
    X(INVALID_ACCESS_KEY_ID,      403, "InvalidAccessKeyId",             "The AWS Access Key Id you provided does not exist in our records.") \
    X(REQUEST_TIME_TOO_SKEWED,    403, "RequestTimeTooSkewed",           "The difference between the request time and the current time is too large.") \
    X(EXPIRED_REQUEST,            403, "AccessDenied",                   "Request has expired")             \
    X(EXPIRES_OUT_OF_RANGE,       403, "AccessDenied",                   "X-Amz-Expires must be between 1 and 604800 seconds") \
    X(AUTH_HEADER_MALFORMED,      400, "AuthorizationHeaderMalformed",   "The authorization header is malformed.") \
    X(AUTH_QUERY_MALFORMED,       400, "AuthorizationQueryParametersError", "The authorization query parameters are malformed.") \
    X(MISSING_SECURITY_HEADER,    400, "MissingSecurityHeader",          "Your request was missing a required header.") \
    X(INVALID_ARGUMENT,           400, "InvalidArgument",                "Invalid Argument")                \
    X(INVALID_REQUEST,            400, "InvalidRequest",                 "Invalid Request")                 \
    X(BAD_REQUEST,                400, "BadRequest",                     "Bad Request")                     \
    X(INVALID_URI,                400, "InvalidURI",                     "Couldn't parse the specified URI.") \
    X(INVALID_BUCKET_NAME,        400, "InvalidBucketName",              "The specified bucket is not valid.") \
    X(KEY_TOO_LONG,               400, "KeyTooLongError",                "Your key is too long.")           \
    X(INVALID_KEY,                400, "InvalidArgument",                "The specified key is not valid for this gateway.") \
    X(NO_SUCH_BUCKET,             404, "NoSuchBucket",                   "The specified bucket does not exist.") \
    X(NO_SUCH_KEY,                404, "NoSuchKey",                      "The specified key does not exist.") \
    X(NO_SUCH_UPLOAD,             404, "NoSuchUpload",                   "The specified multipart upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.") \
    X(NOT_FOUND,                  404, "NotFound",                       "Not Found")                       \
    X(BUCKET_NOT_EMPTY,           409, "BucketNotEmpty",                 "The bucket you tried to delete is not empty.") \
    X(BUCKET_ALREADY_OWNED,       409, "BucketAlreadyOwnedByYou",        "Your previous request to create the named bucket succeeded and you already own it.") \
    X(KEY_CONFLICT,               409, "KeyConflict",                    "The key conflicts with the store: a component of its path is a symbolic link or no regular file, or the POSIX backend cannot nest keys on this file system.") \
    X(INVALID_RANGE,              416, "InvalidRange",                   "The requested range is not satisfiable") \
    X(PRECONDITION_FAILED,        412, "PreconditionFailed",             "At least one of the pre-conditions you specified did not hold") \
    X(NOT_MODIFIED,               304, "NotModified",                    "Not Modified")                    \
    X(BAD_DIGEST,                 400, "BadDigest",                      "The Content-MD5 you specified did not match what we received.") \
    X(INVALID_DIGEST,             400, "InvalidDigest",                  "The Content-MD5 you specified is not valid.") \
    X(SHA256_MISMATCH,            400, "XAmzContentSHA256Mismatch",      "The provided 'x-amz-content-sha256' header does not match what was computed.") \
    X(INCOMPLETE_BODY,            400, "IncompleteBody",                 "You did not provide the number of bytes specified by the Content-Length HTTP header.") \
    X(MALFORMED_XML,              400, "MalformedXML",                   "The XML you provided was not well-formed or did not validate against our published schema.") \
    X(MALFORMED_ACL,              400, "MalformedACLError",              "The XML you provided was not well-formed or did not validate against our published schema.") \
    X(MISSING_REQUEST_BODY,       400, "MissingRequestBodyError",        "Request Body is empty.")          \
    X(INVALID_PART,               400, "InvalidPart",                    "One or more of the specified parts could not be found. The part might not have been uploaded, or the specified entity tag might not have matched the part's entity tag.") \
    X(INVALID_PART_ORDER,         400, "InvalidPartOrder",               "The list of parts was not in ascending order. Parts must be ordered by part number.") \
    X(ENTITY_TOO_SMALL,           400, "EntityTooSmall",                 "Your proposed upload is smaller than the minimum allowed object size.") \
    X(ENTITY_TOO_LARGE,           400, "EntityTooLarge",                 "Your proposed upload exceeds the maximum allowed object size.") \
    X(MISSING_CONTENT_LENGTH,     411, "MissingContentLength",           "You must provide the Content-Length HTTP header.") \
    X(METHOD_NOT_ALLOWED,         405, "MethodNotAllowed",               "The specified method is not allowed against this resource.") \
    X(NOT_IMPLEMENTED,            501, "NotImplemented",                 "A header you provided implies functionality that is not implemented.") \
    X(REQUEST_TIMEOUT,            400, "RequestTimeout",                 "Your socket connection to the server was not read from or written to within the timeout period.") \
    X(HEADER_TOO_LARGE,           400, "RequestHeaderSectionTooLarge",   "Your request header section exceeds the maximum allowed size.") \
    X(METADATA_TOO_LARGE,         400, "MetadataTooLarge",               "Your metadata headers exceed the maximum allowed metadata size.") \
    X(INVALID_ARCHIVE,            400, "InvalidArchive",                 "The object is not a tar archive the gateway can read.") \
    X(MAX_MESSAGE_LENGTH,         400, "MaxMessageLengthExceeded",       "Your request was too big.") \
    X(SLOW_DOWN,                  503, "SlowDown",                       "Please reduce your request rate.") \
    X(SERVICE_UNAVAILABLE,        503, "ServiceUnavailable",             "The backend is unavailable. Please try again.") \
    X(GATEWAY_TIMEOUT,            503, "ServiceUnavailable",             "The backend did not answer in time. Please try again.") \
    X(INSUFFICIENT_STORAGE,       507, "InsufficientStorage",            "The gateway has no space left to store this object.") \
    X(INTERNAL,                   500, "InternalError",                  "We encountered an internal error. Please try again.")

enum s3err {
    S3E_BASE = 1000,
#define X(sym, status, code, msg) S3E_##sym,
    S3ERR_TABLE(X)
#undef X
    S3E_END
};

struct s3err_info {
    int status;          /* HTTP status */
    const char *code;    /* S3 <Code> */
    const char *message; /* default <Message> */
};

/* Any return code (0, -errno, -S3E_*) as a human string; never NULL. */
const char *s3c_strerror(int rc);
/* The S3 error for a return code: -S3E_* map directly; -errno via s3err_from_errno(). */
const struct s3err_info *s3err_lookup(int rc, int is_bucket);
/* Map -errno to -S3E_*: ENOENT -> NO_SUCH_KEY (or NO_SUCH_BUCKET when @is_bucket),
 * ENOSPC/EDQUOT -> INSUFFICIENT_STORAGE, EACCES/EPERM -> ACCESS_DENIED,
 * ENAMETOOLONG -> KEY_TOO_LONG, ENOTEMPTY -> BUCKET_NOT_EMPTY, EEXIST/ENOTDIR/EISDIR ->
 * KEY_CONFLICT, ETIMEDOUT -> GATEWAY_TIMEOUT, ECONNREFUSED/ECONNRESET/EHOSTUNREACH ->
 * SERVICE_UNAVAILABLE, anything else -> INTERNAL. -S3E_* pass through unchanged. */
int s3err_from_errno(int rc, int is_bucket);

#endif
