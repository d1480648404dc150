/*
 * fuzz_xml.c: libFuzzer entry for the XML reader (every document it reads).
 *   clang -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. tests/fuzz/fuzz_xml.c \
 *         lib/xml.c lib/s3c.c -lexpat -o build/fuzz_xml
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/s3c.h"
#include "lib/s3err.h"
#include "lib/xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct errmsg em;
    struct xml_part *parts;
    struct xml_delete_obj *objs;
    size_t n;
    int quiet;
    /* an exact-size copy so reads past @size trip ASan */
    char *p = malloc(size ? size : 1);
    if (!p)
        return 0;
    memcpy(p, data, size);
    int rc = xml_parse_complete(p, size, &parts, &n, &em);
    if (rc == 0) {
        if (n == 0 || n > XML_PARTS_MAX)
            abort();
        for (size_t i = 0; i < n; i++)
            if (parts[i].number < 1 || parts[i].number > XML_PARTS_MAX || !parts[i].etag[0])
                abort();
        free(parts);
    } else if (rc != -S3E_MALFORMED_XML && rc != -S3E_INVALID_PART && rc != -ENOMEM) {
        abort();
    }
    rc = xml_parse_delete(p, size, &quiet, &objs, &n, &em);
    if (rc == 0) {
        if (n == 0 || n > 1000)
            abort();
        xml_delete_free(objs, n);
    } else if (rc != -S3E_MALFORMED_XML && rc != -ENOMEM) {
        abort();
    }
    rc = xml_parse_acl(p, size, "s3cached", &em);
    if (rc != 0 && rc != -S3E_NOT_IMPLEMENTED && rc != -S3E_MALFORMED_ACL && rc != -ENOMEM)
        abort();
    free(p);
    return 0;
}
