/* replay_main.c: a plain main() for the fuzz targets (no libFuzzer): feeds every file named on
 * the command line, or found in a directory named there, to LLVMFuzzerTestOneInput once.
 * Built with ASan+UBSan by `make fuzz-replay`, which runs it over tests/fuzz/corpus/<target>/
 * so every input a fuzzer ever found interesting (and every crash, once fixed) stays a test. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0, n;
    uint8_t chunk[65536];
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (len + n > cap) {
            cap = (len + n) * 2;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return 1;
            }
            buf = nb;
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(f);
    /* an exact-size copy: reads past the input trip ASan as they would under libFuzzer */
    uint8_t *exact = malloc(len ? len : 1);
    if (exact && len)
        memcpy(exact, buf, len);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            bad++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad += replay_file(argv[i]);
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char p[4096];
            snprintf(p, sizeof(p), "%s/%s", argv[i], e->d_name);
            bad += replay_file(p);
            files++;
        }
        if (d)
            closedir(d);
    }
    printf("%s: %d inputs replayed\n", argv[0], files);
    return bad ? 1 : 0;
}
