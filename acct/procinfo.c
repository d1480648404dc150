/*
 * procinfo.c: the process's CPU and storage I/O, and the busy time of the cache's block device
 * (acct/procinfo.h), read from getrusage(2), /proc/self/io and /proc/diskstats at each call.
 */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "procinfo.h"

/* "NAME: VALUE" of /proc/self/io, or -1. */
static int64_t proc_io_field(const char *text, const char *name)
{
    const char *p = strstr(text, name);
    long long v;
    if (!p || sscanf(p + strlen(name), ": %lld", &v) != 1)
        return -1;
    return v;
}

/* io_ticks (ms busy) of the device @maj:@min in /proc/diskstats; -1 when absent. */
static double disk_busy_s(unsigned maj, unsigned min, char *name, size_t cap)
{
    FILE *f = fopen("/proc/diskstats", "re");
    char line[512];
    double busy = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        unsigned a, b;
        char dev[32];
        unsigned long long st[10];
        if (sscanf(line, "%u %u %31s %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &a, &b,
                   dev, &st[0], &st[1], &st[2], &st[3], &st[4], &st[5], &st[6], &st[7], &st[8],
                   &st[9]) != 13 || a != maj || b != min)
            continue;
        busy = (double)st[9] / 1e3; /* the 10th field: ms spent doing I/O */
        snprintf(name, cap, "%s", dev);
        break;
    }
    fclose(f);
    return busy;
}

void procinfo_get(const char *cache_dir, struct procinfo *out)
{
    struct rusage ru;
    char text[1024];
    memset(out, 0, sizeof(*out));
    out->disk_read_bytes = out->disk_write_bytes = -1;
    out->cache_disk_busy_s = -1;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        out->cpu_user_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
        out->cpu_system_s = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    out->cores = n > 0 ? (unsigned)n : 1;
    FILE *f = fopen("/proc/self/io", "re");
    if (f) {
        size_t len = fread(text, 1, sizeof(text) - 1, f);
        text[len] = '\0';
        fclose(f);
        out->disk_read_bytes = proc_io_field(text, "\nread_bytes");
        out->disk_write_bytes = proc_io_field(text, "\nwrite_bytes");
    }
    struct stat st;
    if (cache_dir && stat(cache_dir, &st) == 0 && major(st.st_dev) != 0)
        out->cache_disk_busy_s = disk_busy_s(major(st.st_dev), minor(st.st_dev),
                                             out->cache_disk, sizeof(out->cache_disk));
}
