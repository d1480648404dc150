/*
 * fuzz_range.c: libFuzzer entry for range_parse() and cond_check().
 *   clang -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. tests/fuzz/fuzz_range.c \
 *         lib/range.c lib/s3c.c -lcurl -o build/fuzz_range
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/s3c.h"
#include "lib/s3err.h"
#include "lib/range.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    uint64_t off = 0, len = 0, objsize = 1000;
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    if (size >= 1)
        objsize = data[0]; /* small sizes reach the edges */
    int rc = range_parse(s, objsize, &off, &len);
    if (rc == 1 && (len == 0 || off >= objsize || len > objsize - off))
        abort();
    if (rc != 0 && rc != 1 && rc != -S3E_INVALID_RANGE)
        abort();
    struct cond_hdrs c = { s, s, s, s };
    rc = cond_check(&c, "abc", 784111777, size & 1);
    if (rc != 0 && rc != -S3E_NOT_MODIFIED && rc != -S3E_PRECONDITION_FAILED)
        abort();
    free(s);
    return 0;
}
