/*
 * procinfo.h: what the gateway's process and its cache disk have done so far, for /_/stats and
 * /_/metrics (and so `s3cached check` can name what bounded a run): CPU seconds (getrusage),
 * bytes the process read from and wrote to storage (/proc/self/io), and how long the block
 * device under the cache directory was busy (/proc/diskstats io_ticks). Linux only; a figure
 * that cannot be read is reported as unknown (-1), never as 0.
 */
#ifndef S3C_PROCINFO_H
#define S3C_PROCINFO_H

#include <stdint.h>

struct procinfo {
    double cpu_user_s, cpu_system_s;
    unsigned cores;              /* online CPUs */
    int64_t disk_read_bytes;     /* -1: unknown */
    int64_t disk_write_bytes;
    double cache_disk_busy_s;    /* -1: unknown (not on a block device) */
    char cache_disk[32];         /* its name in /proc/diskstats, "" when unknown */
};

/* Fills @out; @cache_dir may be NULL (the disk then unknown). Never fails. */
void procinfo_get(const char *cache_dir, struct procinfo *out);

#endif
