/*
 * test_index.c: the LMDB index (cache/index.c) after LMDB's fatal state. A real
 * meta page write error is injected: this binary defines pwrite(), which
 * liblmdb's calls resolve to, and fails the next write of a meta page (the
 * first two pages of the index's data.mdb) once armed. LMDB then answers every
 * transaction with MDB_PANIC; the index must reopen it and work again. Also: the index's
 * files are created 0600, and tightened to it when found wider.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cmocka.h>

#include "cache/index.h"
#include "cache/store.h"

/* ---- the fault: a failing meta page write ---------------------------------------------- */

static char fault_dir[300]; /* only files under it */
static int fault_armed, fault_fired;

/* Whether @fd is the index's data.mdb under fault_dir. No allocation: LMDB may call us with
 * its own locks held. */
static int fd_is_index_data(int fd)
{
    char link[64], path[1024];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n <= 0)
        return 0;
    path[n] = '\0';
    size_t dl = strlen(fault_dir);
    const char *tail = "/data.mdb";
    return dl && strncmp(path, fault_dir, dl) == 0 && (size_t)n > strlen(tail)
           && strcmp(path + n - strlen(tail), tail) == 0;
}

/* Named "pwrite" for the linker (unistd.h maps the C name to pwrite64 here). */
ssize_t test_pwrite(int fd, const void *buf, size_t len, off_t off) __asm__("pwrite");
ssize_t test_pwrite(int fd, const void *buf, size_t len, off_t off)
{
    long psize = sysconf(_SC_PAGESIZE);
    if (__atomic_load_n(&fault_armed, __ATOMIC_ACQUIRE) && off < 2 * psize && fd_is_index_data(fd)
        && __atomic_exchange_n(&fault_armed, 0, __ATOMIC_ACQ_REL)) {
        __atomic_add_fetch(&fault_fired, 1, __ATOMIC_RELEASE);
        errno = EIO;
        return -1;
    }
    return syscall(SYS_pwrite64, fd, buf, len, off);
}

static void fault_arm(void)
{
    __atomic_store_n(&fault_fired, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&fault_armed, 1, __ATOMIC_RELEASE);
}

/* ---- fixtures -------------------------------------------------------------------------- */

struct env {
    char dir[256];
    struct index *ix;
};

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    struct errmsg em = {{0}};
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_index.XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    snprintf(fault_dir, sizeof(fault_dir), "%s/", e->dir);
    char p[512];
    snprintf(p, sizeof(p), "%s/index", e->dir);
    int rc = index_open(p, &e->ix, &em);
    if (rc)
        fprintf(stderr, "index_open: %s\n", em.buf);
    assert_int_equal(rc, 0);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    __atomic_store_n(&fault_armed, 0, __ATOMIC_RELEASE);
    index_close(e->ix);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->dir);
    assert_int_equal(system(cmd), 0);
    fault_dir[0] = '\0';
    free(e);
    return 0;
}

/* Stores an entry of @size bytes (one block, present) as "b/@key" with @version. */
static int put(struct index *ix, const char *key, uint64_t version, uint64_t size)
{
    struct index_entry e;
    struct index_key k;
    uint8_t bitmap[1] = {0x1};
    char name[256];
    uint64_t oldv = 0;
    int64_t delta = 0;
    memset(&e, 0, sizeof(e));
    e.version = version;
    e.size = e.meta.size = size;
    e.block_size = 1u << 20;
    e.nblocks = 1;
    e.bitmap = bitmap;
    e.used_bytes = index_acct(size);
    e.atime_ns = e.validated_ns = 1700000000000000000ll + (int64_t)version;
    snprintf(e.meta.etag, sizeof(e.meta.etag), "%032llx", (unsigned long long)version);
    snprintf(name, sizeof(name), "b/%s", key);
    index_key_make("b", key, &k);
    return index_put(ix, &k, name, &e, &oldv, &delta);
}

/* 0 and the entry's version in *@version, or the error of index_get(). */
static int get(struct index *ix, const char *key, uint64_t *version)
{
    struct index_entry e;
    struct index_key k;
    index_key_make("b", key, &k);
    int rc = index_get(ix, &k, &e);
    if (!rc) {
        *version = e.version;
        index_entry_clear(&e);
    }
    return rc;
}

/* ---- tests ----------------------------------------------------------------------------- */

static void test_index_reopens_after_panic(void **state)
{
    struct env *e = *state;
    struct index_totals t;
    uint64_t v = 0;
    assert_int_equal(put(e->ix, "before", 1, 1000), 0);

    /* the commit's meta page write fails: LMDB's environment is now in its fatal state */
    fault_arm();
    assert_int_equal(put(e->ix, "lost", 2, 2000), -EIO);
    assert_int_equal(__atomic_load_n(&fault_fired, __ATOMIC_ACQUIRE), 1);

    /* the next calls reopen it: what was committed before is there, the failed write is not */
    assert_int_equal(get(e->ix, "before", &v), 0);
    assert_int_equal(v, 1);
    assert_true(index_reopens(e->ix) == 1);
    assert_int_equal(get(e->ix, "lost", &v), -ENOENT);
    assert_int_equal(index_totals(e->ix, &t), 0);
    assert_true(t.objects == 1);

    /* and writes are durable again */
    assert_int_equal(put(e->ix, "after", 3, 3000), 0);
    assert_int_equal(get(e->ix, "after", &v), 0);
    assert_int_equal(v, 3);
    assert_int_equal(index_totals(e->ix, &t), 0);
    assert_true(t.objects == 2);
    assert_true(t.used_bytes == index_acct(1000) + index_acct(3000));
    assert_true(index_reopens(e->ix) == 1);
}

#define NTHREADS 6

struct worker {
    struct index *ix;
    unsigned id;
    unsigned ok, failed, ok_after; /* ok_after: successes since the fault fired */
    unsigned wrong;                /* records read back with another version: never */
    int last_rc;
};

static int workers_stop;

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    for (unsigned i = 0; !__atomic_load_n(&workers_stop, __ATOMIC_ACQUIRE); i++) {
        char key[32];
        uint64_t v = 0;
        int fired = __atomic_load_n(&fault_fired, __ATOMIC_ACQUIRE);
        snprintf(key, sizeof(key), "w%u-%u", w->id, i % 16);
        int rc = put(w->ix, key, 1000 + i, 100 + i % 1000);
        if (!rc)
            rc = get(w->ix, key, &v);
        w->last_rc = rc;
        if (rc) {
            w->failed++;
            __atomic_store_n(&w->ok_after, 0, __ATOMIC_RELAXED);
            continue;
        }
        if (v != 1000 + i)
            w->wrong++; /* checked by the main thread: cmocka asserts are not thread-safe */
        w->ok++;
        if (fired)
            __atomic_add_fetch(&w->ok_after, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* Calls on several threads while the environment fails: some fail meanwhile, none hangs or
 * crashes, a reopen happens although calls keep arriving, and every thread works again. */
static void test_index_panic_under_concurrent_calls(void **state)
{
    struct env *e = *state;
    struct worker w[NTHREADS];
    pthread_t th[NTHREADS];
    __atomic_store_n(&workers_stop, 0, __ATOMIC_RELEASE);
    for (unsigned i = 0; i < NTHREADS; i++) {
        w[i] = (struct worker){.ix = e->ix, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, worker_run, &w[i]), 0);
    }
    usleep(20000);
    fault_arm();
    /* until the fault fired, the index reopened and every thread had 20 calls in a row
     * work since, for at most 10 s */
    int done = 0, ms = 0, reopen_ms = -1;
    for (; ms < 10000 && !done; ms += 1) {
        usleep(1000);
        if (reopen_ms < 0 && index_reopens(e->ix) >= 1)
            reopen_ms = ms;
        done = __atomic_load_n(&fault_fired, __ATOMIC_ACQUIRE) && index_reopens(e->ix) >= 1;
        for (unsigned i = 0; i < NTHREADS && done; i++)
            done = __atomic_load_n(&w[i].ok_after, __ATOMIC_RELAXED) >= 20;
    }
    __atomic_store_n(&workers_stop, 1, __ATOMIC_RELEASE);
    for (unsigned i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    unsigned ok = 0, failed = 0;
    for (unsigned i = 0; i < NTHREADS; i++) {
        ok += w[i].ok;
        failed += w[i].failed;
    }
    printf("    | %u calls worked, %u failed around the fault; reopened after ~%d ms\n", ok,
           failed, reopen_ms);
    assert_int_equal(__atomic_load_n(&fault_fired, __ATOMIC_ACQUIRE), 1);
    assert_true(index_reopens(e->ix) >= 1);
    assert_true(failed >= 1); /* at least the commit whose meta write failed */
    for (unsigned i = 0; i < NTHREADS; i++) {
        assert_int_equal(w[i].wrong, 0);
        assert_true(w[i].ok_after >= 20);
        assert_int_equal(w[i].last_rc, 0);
    }
    uint64_t v = 0;
    assert_int_equal(put(e->ix, "end", 7, 7), 0);
    assert_int_equal(get(e->ix, "end", &v), 0);
    assert_int_equal(v, 7);
}

/* ---- member indexes ------------------------------------------------------------------- */

static int members_copy(void *arg, const void *blob, size_t len)
{
    char *out = arg;
    snprintf(out, 64, "%.*s", (int)len, (const char *)blob);
    return 0;
}

static int members_get(struct index *ix, const char *key, uint64_t version, char out[64])
{
    struct index_key k;
    index_key_make("b", key, &k);
    out[0] = '\0';
    return index_members_get(ix, &k, version, members_copy, out);
}

static int members_put(struct index *ix, const char *key, uint64_t version, const char *blob)
{
    struct index_key k;
    index_key_make("b", key, &k);
    return index_members_put(ix, &k, version, blob, strlen(blob));
}

/* A member index lives and dies with its version's record: stored only for the record's
 * version, gone when the record is replaced (a new version) or deleted (eviction,
 * invalidation), and never handed to a later version of the same key. */
static void test_index_members_follow_the_version(void **state)
{
    struct env *e = *state;
    char got[64];
    struct index_key k;
    int64_t delta;
    assert_int_equal(members_put(e->ix, "shard.tar", 5, "v5"), -ESTALE); /* no record */
    assert_int_equal(put(e->ix, "shard.tar", 5, 100), 0);
    assert_int_equal(members_get(e->ix, "shard.tar", 5, got), -ENOENT);
    assert_int_equal(members_put(e->ix, "shard.tar", 4, "v4"), -ESTALE); /* another version */
    assert_int_equal(members_put(e->ix, "shard.tar", 5, "v5"), 0);
    assert_int_equal(members_get(e->ix, "shard.tar", 5, got), 0);
    assert_string_equal(got, "v5");
    /* another key's index is its own */
    assert_int_equal(put(e->ix, "shard.tar2", 5, 100), 0);
    assert_int_equal(members_get(e->ix, "shard.tar2", 5, got), -ENOENT);
    /* a new version replaces the record: the old index goes with it */
    assert_int_equal(put(e->ix, "shard.tar", 6, 100), 0);
    assert_int_equal(members_get(e->ix, "shard.tar", 5, got), -ENOENT);
    assert_int_equal(members_get(e->ix, "shard.tar", 6, got), -ENOENT);
    assert_int_equal(members_put(e->ix, "shard.tar", 6, "v6"), 0);
    /* deleting the record (eviction, invalidation) deletes the index */
    index_key_make("b", "shard.tar", &k);
    assert_int_equal(index_del(e->ix, &k, 6, &delta), 0);
    assert_int_equal(members_get(e->ix, "shard.tar", 6, got), -ENOENT);
    /* the same version number coming back (a restore) finds nothing left behind */
    assert_int_equal(put(e->ix, "shard.tar", 6, 100), 0);
    assert_int_equal(members_get(e->ix, "shard.tar", 6, got), -ENOENT);
}

/* The mode bits (permission part) of @dir/@name. */
static unsigned mode_of(const char *dir, const char *name)
{
    char p[600];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    assert_int_equal(stat(p, &st), 0);
    return (unsigned)(st.st_mode & 07777);
}

/* The index (keys, user metadata, member names, the write-back journal) is the owner's alone:
 * created 0600 whatever the umask lets through, and an index left 0644 by an older version is
 * tightened when it is opened again. */
static void test_index_files_are_private(void **state)
{
    (void)state;
    char dir[256], p[300];
    struct index *ix = NULL;
    struct errmsg em = {{0}};
    mode_t old = umask(022);
    snprintf(dir, sizeof(dir), "/tmp/test_index_mode.XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(p, sizeof(p), "%s/index", dir);
    assert_int_equal(index_open(p, &ix, &em), 0);
    assert_int_equal(put(ix, "k", 1, 10), 0);
    assert_int_equal(mode_of(p, "data.mdb"), 0600);
    assert_int_equal(mode_of(p, "lock.mdb"), 0600);
    index_close(ix);
    char f[400];
    snprintf(f, sizeof(f), "%s/data.mdb", p);
    assert_int_equal(chmod(f, 0644), 0);
    snprintf(f, sizeof(f), "%s/lock.mdb", p);
    assert_int_equal(chmod(f, 0664), 0);
    assert_int_equal(index_open(p, &ix, &em), 0);
    assert_int_equal(mode_of(p, "data.mdb"), 0600);
    assert_int_equal(mode_of(p, "lock.mdb"), 0600);
    uint64_t v = 0;
    assert_int_equal(get(ix, "k", &v), 0); /* the same index, tightened */
    assert_int_equal(v, 1);
    index_close(ix);
    umask(old);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* The on-disk names do not change with how they are hashed: a long name's index key (plain
 * prefix, NUL, SHA-256 of "bucket/key") and a data file's path (SHA-256 of its name key, in
 * hex), against digests computed with Python's hashlib. */
static void test_index_names_on_disk(void **state)
{
    (void)state;
    char key[601];
    memset(key, 'k', 600);
    key[600] = '\0';
    struct index_key k;
    index_key_make("bkt", key, &k);
    assert_int_equal(k.len, INDEX_KEY_PLAIN_MAX + 1 + 32);
    assert_memory_equal(k.b, "bkt/kkkk", 8);
    assert_int_equal(k.b[INDEX_KEY_PLAIN_MAX], 0);
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", k.b[INDEX_KEY_PLAIN_MAX + 1 + i]);
    assert_string_equal(hex, "a6fee5924785d5a5e94bb419215211806f0e423652c19a40c0bad47aeaa6433e");
    char path[STORE_PATH_MAX];
    store_data_path("/c", "bkt/short", 9, 0x1234, path);
    assert_string_equal(path, "/c/data/74/ff/"
                              "74ffbff265c298fd7c6064ebe8fa350f97e0648b4164884cf1401ee7b6f85e67-"
                              "0000000000001234");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_index_reopens_after_panic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_index_panic_under_concurrent_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_index_members_follow_the_version, setup, teardown),
        cmocka_unit_test(test_index_files_are_private),
        cmocka_unit_test(test_index_names_on_disk),
    };
    return cmocka_run_group_tests_name("index", tests, NULL, NULL);
}
