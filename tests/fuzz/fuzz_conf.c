/*
 * fuzz_conf.c: libFuzzer entry for the value parsers and conf_load() flag handling.
 * Input: NUL-separated argv words.
 *   clang -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. tests/fuzz/fuzz_conf.c \
 *         lib/conf.c lib/s3c.c -o build/fuzz_conf
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/s3c.h"
#include "lib/conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1), *argv[16];
    int argc = 0;
    uint64_t u;
    int64_t d;
    int b;
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    conf_parse_size(s, &u);
    conf_parse_duration_ms(s, &d);
    conf_parse_bool(s, &b);
    for (char *p = s; p < s + size && argc < 16; p += strlen(p) + 1)
        argv[argc++] = p;
    char *envp[] = { NULL };
    struct conf cf;
    struct errmsg em;
    /* --config would read files: drop it */
    for (int i = 0; i < argc; i++)
        if (strstr(argv[i], "config"))
            argv[i] = "--anonymous";
    if (conf_load(&cf, argc, argv, envp, &em) == 0)
        conf_free(&cf);
    free(s);
    return 0;
}
