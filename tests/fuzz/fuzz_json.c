/* fuzz_json.c: libFuzzer entry point for the JSON reader (admin request bodies).
 * Built by `make fuzz`; `make fuzz-replay` replays tests/fuzz/corpus/json/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct json *j = NULL;
    struct errmsg em;
    char *p = malloc(size ? size : 1); /* exact size: reads past the end trip ASan */
    if (!p)
        return 0;
    memcpy(p, data, size);
    if (json_parse(p, size, &j, &em) == 0) {
        json_get_str(j, "bucket");
        json_get_num(j, "n", 0);
        const struct json *k = json_get(j, "keys");
        if (k && k->type == JSON_ARR)
            for (size_t i = 0; i < k->n; i++)
                if (k->items[i].type == JSON_STR && !k->items[i].str)
                    abort();
        json_free(j);
    }
    free(p);
    return 0;
}
