/*
 * jobs_priv.h: the table of jobs (jobs.c) as its writers (jobs_out.c) see it. Only acct/jobs*.c
 * include it.
 */
#ifndef S3C_JOBS_PRIV_H
#define S3C_JOBS_PRIV_H

#include <pthread.h>
#include <stdint.h>

#include "jobs.h"
#include "stall.h"

#define JOBS_MAGIC 0x10b5a11c
#define JOBS_ROW_MAGIC 0x10b5c0de
#define JOBS_SLOTS 512u

struct jobs_row {
    unsigned magic;
    struct jobs_row *next;
    uint32_t hash;
    /* under jobs->lock */
    unsigned refs;
    int is_other;
    int declared;                /* POST /_/jobs: kept until jobs_forget() */
    uint64_t need_api, need_hdr, need_key; /* bytes/s, 0 = none */
    char owner[JOBS_NAME_MAX + 1];      /* the key whose GET made the row ("": POST /_/jobs);
                                         * counts against its cap; its need= is need_key */
    char need_owner[JOBS_NAME_MAX + 1]; /* the key whose header set need_hdr, "" = none */
    uint64_t last_seen_ns;
    char name[JOBS_NAME_MAX + 1];
    struct stall_acc acc;
};

struct jobs {
    unsigned magic;
    uint64_t (*now)(void *cls);
    void *now_cls;
    pthread_mutex_t lock;
    struct jobs_row *slots[JOBS_SLOTS];
    struct jobs_row *other;
    unsigned n, max;
    unsigned key_max; /* rows one key's GETs may make (jobs_set_key_cap()) */
    uint64_t idle_ns;
    uint64_t seq; /* ticks done */
};

#endif
