/*
 * fuzz_awschunk.c: libFuzzer entry point for the aws-chunked decoder. The first byte picks the
 * mode and the feed size (1..64 bytes, or all at once); the rest is the body. Not built by the
 * Makefile:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. \
 *     tests/fuzz/fuzz_awschunk.c sig/awschunk.c sig/sigv4.c lib/checksum.c \
 *     lib/buf.c lib/s3c.c -lcrypto -lz -o fuzz_awschunk
 */
#include <stdint.h>
#include <string.h>

#include "sig/awschunk.h"

static volatile uint8_t fuzz_sink;

static int fuzz_out(void *cls, const void *p, size_t n)
{
    (void)cls;
    for (size_t i = 0; i < n; i++)
        fuzz_sink ^= ((const uint8_t *)p)[i];
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t key[32] = {1, 2, 3};
    struct awschunk *c;
    if (!size)
        return 0;
    enum awschunk_mode mode = (enum awschunk_mode)(data[0] % 3);
    size_t step = (data[0] >> 2) ? (data[0] >> 2) : size;
    data++;
    size--;
    if (awschunk_new(mode, key, "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
                     "20130524T000000Z", "20130524/us-east-1/s3/aws4_request", &c))
        return 0;
    int rc = 0;
    for (size_t off = 0; off < size && !rc; off += step)
        rc = awschunk_feed(c, data + off, size - off < step ? size - off : step, fuzz_out, NULL);
    awschunk_finish(c);
    awschunk_trailer(c, "x-amz-checksum-crc32");
    awschunk_decoded_bytes(c);
    awschunk_free(c);
    return 0;
}
