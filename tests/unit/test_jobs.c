/*
 * test_jobs.c: unit tests of acct/jobs.c and its writers: which names a job may have, where a
 * job's need comes from (POST /_/jobs over the header over the key's need=, a header of "0"
 * clearing the header's), the cap (the rest charged to "other"), idle jobs folded into
 * "other" while declared ones stay, the verdict of a snapshot, and the jobs in /_/stats (JSON
 * read back) and /_/metrics (checked by promtool when it is installed).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acct/jobs.h"
#include "acct/stats.h"
#include "lib/json.h"
#include "lib/s3c.h"

#define SEC 1000000000ull

static _Atomic uint64_t now_ns;

static uint64_t fake_clock(void *cls)
{
    UNUSED(cls);
    return atomic_load(&now_ns);
}

static struct jobs *new_jobs(void)
{
    struct jobs *j = NULL;
    atomic_store(&now_ns, 1000 * SEC);
    assert_int_equal(jobs_new(&j), 0);
    jobs_set_clock(j, fake_clock, NULL);
    return j;
}

/* The view of job @name (it must exist). */
static struct jobs_view view(struct jobs *j, const char *name)
{
    struct jobs_view *v = NULL, out;
    size_t n = 0;
    assert_int_equal(jobs_snapshot(j, name, &v, &n), 0);
    if (n != 1)
        fail_msg("job \"%s\": %zu rows", name, n);
    out = v[0];
    free(v);
    return out;
}

static void test_jobs_names(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int ok;
    } cases[] = {
        {"resnet-run-7", 1}, {"team/cosmoflow:v2", 1}, {"a.b_c+d@e", 1}, {"AKIAXXXXXXXX", 1},
        {"", 0}, {"other", 0}, {"two words", 0}, {"x\ny", 0}, {"caf\xc3\xa9", 0}, {"a\"b", 0},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
        if (!!jobs_check_name(cases[i].name) == cases[i].ok)
            fail_msg("\"%s\": %s", cases[i].name, jobs_check_name(cases[i].name));
    char longname[JOBS_NAME_MAX + 2];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[JOBS_NAME_MAX + 1] = '\0';
    assert_non_null(jobs_check_name(longname));
    longname[JOBS_NAME_MAX] = '\0';
    assert_null(jobs_check_name(longname));
}

static void test_jobs_need_sources(void **state)
{
    (void)state;
    struct jobs *j = new_jobs();
    struct jobs_row *r = jobs_ref(j, "cosmo", "AK1", 0, 0);
    jobs_release(j, r);
    struct jobs_view v = view(j, "cosmo");
    assert_int_equal(v.need_bps, 0);
    assert_string_equal(v.need_source, "none");
    r = jobs_ref(j, "cosmo", "AK1", 0, 1000); /* the key's need= */
    jobs_release(j, r);
    v = view(j, "cosmo");
    assert_int_equal(v.need_bps, 1000);
    assert_string_equal(v.need_source, "key");
    r = jobs_ref(j, "cosmo", "AK1", 2000, 1000); /* a header beats the key */
    jobs_release(j, r);
    r = jobs_ref(j, "cosmo", "AK1", 0, 1000); /* and stays until changed */
    jobs_release(j, r);
    v = view(j, "cosmo");
    assert_int_equal(v.need_bps, 2000);
    assert_string_equal(v.need_source, "header");
    assert_int_equal(jobs_declare(j, "cosmo", 3000), 0); /* POST /_/jobs beats both */
    r = jobs_ref(j, "cosmo", "AK1", 2500, 1000);
    jobs_release(j, r);
    v = view(j, "cosmo");
    assert_int_equal(v.need_bps, 3000);
    assert_string_equal(v.need_source, "api");
    assert_true(v.declared);
    assert_int_equal(jobs_forget(j, "cosmo"), 0);
    assert_int_equal(jobs_forget(j, "cosmo"), -ENOENT);
    assert_int_equal(jobs_forget(j, "nobody"), -ENOENT);
    v = view(j, "cosmo");
    assert_int_equal(v.need_bps, 2500);
    r = jobs_ref(j, "cosmo", "AK1", JOBS_NEED_CLEAR, 0); /* "x-s3cached-job-need: 0" */
    jobs_release(j, r);
    v = view(j, "cosmo");
    assert_int_equal(v.need_bps, 0);
    assert_int_equal(jobs_declare(j, "cosmo", 0), 0); /* 0 declares nothing */
    assert_false(view(j, "cosmo").declared);
    jobs_free(j);
}

static void test_jobs_cap_and_fold(void **state)
{
    (void)state;
    struct jobs *j = new_jobs();
    jobs_set_limits(j, 2, 10);
    struct jobs_row *a = jobs_ref(j, "a", "AK1", 0, 0), *b = jobs_ref(j, "b", "AK1", 0, 0);
    struct jobs_row *c = jobs_ref(j, "c", "AK1", 0, 0), *o = jobs_ref(j, "other", "AK1", 0, 0);
    assert_ptr_equal(c, o); /* over the cap, and the name "other", are "other" */
    assert_int_equal(jobs_declare(j, "d", 100), -ENOSPC);
    struct stall_req r;
    stall_req_begin(&r, NULL, jobs_acc(a), 1000 * SEC);
    stall_req_end(&r, 1001 * SEC, 4096, 1);
    jobs_release(j, a);
    jobs_release(j, c);
    jobs_release(j, o);
    assert_int_equal(jobs_declare(j, "b", 100), 0);
    jobs_release(j, b);
    for (int s = 0; s < 12; s++) { /* 12 s: a is idle past 10 s, b is declared */
        atomic_fetch_add(&now_ns, SEC);
        jobs_tick(j);
    }
    struct jobs_view *v = NULL;
    size_t n = 0;
    assert_int_equal(jobs_snapshot(j, NULL, &v, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(v[0].name, "b");
    assert_string_equal(v[1].name, "other");
    assert_true(v[1].is_other);
    assert_int_equal(v[1].v.gets, 1); /* a's GET went with it */
    assert_int_equal(v[1].v.bytes, 4096);
    free(v);
    a = jobs_ref(j, "a", "AK1", 0, 0); /* room again */
    assert_ptr_not_equal(a, o);
    jobs_release(j, a);
    jobs_free(j);
}

/* A job's need belongs to the key that declared it first: another key's header (or need=)
 * does not change it, until the owner clears it. */
static void test_jobs_need_owner(void **state)
{
    (void)state;
    struct jobs *j = new_jobs();
    struct jobs_row *r = jobs_ref(j, "train", "AKOWNER", 2000, 0);
    jobs_release(j, r);
    r = jobs_ref(j, "train", "AKOTHER", 5, 9); /* another key: served, need unchanged */
    jobs_release(j, r);
    struct jobs_view v = view(j, "train");
    assert_int_equal(v.need_bps, 2000);
    assert_string_equal(v.need_source, "header");
    r = jobs_ref(j, "train", "AKOTHER", JOBS_NEED_CLEAR, 0); /* nor can it clear it */
    jobs_release(j, r);
    assert_int_equal(view(j, "train").need_bps, 2000);
    r = jobs_ref(j, "train", NULL, 7, 0); /* nor can a request without a key */
    jobs_release(j, r);
    assert_int_equal(view(j, "train").need_bps, 2000);
    r = jobs_ref(j, "train", "AKOWNER", 3000, 0); /* the owner changes it */
    jobs_release(j, r);
    assert_int_equal(view(j, "train").need_bps, 3000);
    r = jobs_ref(j, "train", "AKOWNER", JOBS_NEED_CLEAR, 0); /* and gives it up */
    jobs_release(j, r);
    assert_int_equal(view(j, "train").need_bps, 0);
    r = jobs_ref(j, "train", "AKOTHER", 500, 0); /* then another key may declare it */
    jobs_release(j, r);
    v = view(j, "train");
    assert_int_equal(v.need_bps, 500);
    /* need= comes from the key that made the row only */
    r = jobs_ref(j, "eval", "AKA", 0, 100);
    jobs_release(j, r);
    r = jobs_ref(j, "eval", "AKB", 0, 900);
    jobs_release(j, r);
    r = jobs_ref(j, "eval", "AKB", 0, 0);
    jobs_release(j, r);
    v = view(j, "eval");
    assert_int_equal(v.need_bps, 100);
    assert_string_equal(v.need_source, "key");
    jobs_free(j);
}

/* One key cannot fill the table: its GETs make at most the per-key cap of rows (the rest go to
 * "other"), so another key's job still gets a row; a request without a key makes none. */
static void test_jobs_key_cap(void **state)
{
    (void)state;
    struct jobs *j = new_jobs();
    jobs_set_key_cap(j, 3);
    char name[32];
    for (int i = 0; i < 260; i++) {
        snprintf(name, sizeof(name), "spam-%03d", i);
        struct jobs_row *r = jobs_ref(j, name, "AKSPAM", 1000000000ull, 0);
        jobs_release(j, r);
    }
    struct jobs_view *v = NULL;
    size_t n = 0;
    assert_int_equal(jobs_snapshot(j, NULL, &v, &n), 0);
    assert_int_equal(n, 3); /* spam-000..002; "other" has no GET yet */
    free(v);
    struct jobs_row *real = jobs_ref(j, "resnet", "AKREAL", 2000, 0);
    struct jobs_row *o = jobs_ref(j, "spam-999", "AKSPAM", 0, 0);
    assert_ptr_equal(o, jobs_ref(j, "anon-job", NULL, 0, 0)); /* no key: no row */
    assert_ptr_not_equal(real, o);
    assert_int_equal(view(j, "resnet").need_bps, 2000);
    assert_ptr_equal(real, jobs_ref(j, "resnet", NULL, 0, 0)); /* joins a row that exists */
    jobs_release(j, real);
    jobs_release(j, real);
    jobs_release(j, o);
    jobs_release(j, o);
    /* POST /_/jobs (an admin) is not held to a key's cap */
    assert_int_equal(jobs_declare(j, "declared-by-admin", 100), 0);
    assert_int_equal(view(j, "declared-by-admin").need_bps, 100);
    jobs_free(j);
}

static void test_jobs_verdict(void **state)
{
    (void)state;
    struct jobs *j = new_jobs();
    /* a job needing 1 MB/s that gets 0.5 MB/s, waiting on the backend most of the time */
    struct jobs_row *r = jobs_ref(j, "unet3d", "AK1", 1000000, 0);
    for (int s = 0; s < 10; s++) {
        struct stall_req q;
        uint64_t t = atomic_load(&now_ns);
        stall_req_begin(&q, NULL, jobs_acc(r), t);
        stall_req_suspend(&q, STALL_BACKEND, t);
        stall_req_resume(&q, t + SEC * 8 / 10, 0, 0);
        stall_req_end(&q, t + SEC, 500000, 0);
        atomic_fetch_add(&now_ns, SEC);
        jobs_tick(j);
    }
    jobs_release(j, r);
    struct jobs_view v = view(j, "unet3d");
    assert_int_equal(v.state, STALL_STARVED);
    assert_int_equal(v.cause, STALL_BACKEND);
    /* it is told it needs less: ok */
    r = jobs_ref(j, "unet3d", "AK1", 400000, 0);
    jobs_release(j, r);
    v = view(j, "unet3d");
    assert_int_equal(v.state, STALL_OK);
    /* 10 s later nothing was asked: idle */
    for (int s = 0; s < 11; s++) {
        atomic_fetch_add(&now_ns, SEC);
        jobs_tick(j);
    }
    assert_int_equal(view(j, "unet3d").state, STALL_IDLE);
    jobs_free(j);
}

/* Runs @cmd with @text on stdin: its exit status. */
static int run_with(const char *cmd, const char *text, size_t len)
{
    char path[] = "/tmp/test_jobs.XXXXXX", line[512];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    snprintf(line, sizeof(line), "%s < %s > /dev/null 2>&1", cmd, path);
    int rc = system(line);
    unlink(path);
    return rc;
}

static void test_jobs_in_stats(void **state)
{
    (void)state;
    struct stats *s = NULL;
    struct jobs *j = new_jobs();
    assert_int_equal(stats_new(&s), 0);
    stats_set_jobs(s, j);
    stats_set_disk_path(s, "/");
    struct stats_client *c = stats_client_ref(s, "AKID", "10.0.0.1");
    struct jobs_row *r = jobs_ref(j, "label\"with\\quotes", "AK1", 2800000000ull, 0);
    struct stall_req q;
    stall_req_begin(&q, stats_client_stall(c), jobs_acc(r), s3c_mono_ns());
    stall_req_suspend(&q, STALL_QUEUE, s3c_mono_ns());
    stall_req_resume(&q, s3c_mono_ns() + 1000, 0, 0);
    stall_req_end(&q, s3c_mono_ns() + 2000, 123, 0);
    jobs_release(j, r);
    stats_client_release(s, c);
    stats_tick(s); /* ticks the jobs too */

    struct buf b;
    struct json *doc = NULL;
    struct errmsg em = {{0}};
    buf_init(&b, 16u << 20);
    assert_int_equal(stats_json(s, NULL, NULL, NULL, NULL, &b), 0);
    if (json_parse(b.p, b.len, &doc, &em))
        fail_msg("/_/stats JSON: %s", em.buf);
    const struct json *jobs = json_get(doc, "jobs"), *cl = json_get(doc, "clients");
    assert_non_null(jobs);
    assert_int_equal(jobs->n, 1);
    assert_string_equal(json_get_str(&jobs->items[0], "job"), "label\"with\\quotes");
    assert_true(json_get_num(&jobs->items[0], "need_bps", 0) == 2.8e9);
    assert_string_equal(json_get_str(&jobs->items[0], "need_source"), "header");
    assert_true(json_get_num(&jobs->items[0], "delivered_bytes", 0) == 123);
    assert_non_null(json_get_str(&jobs->items[0], "state"));
    assert_true(json_get_num(&cl->items[0], "gets", 0) == 1);
    assert_true(json_get_num(json_get(&cl->items[0], "stall_by_cause_s"), "queue", 0) > 0);
    const struct json *p = json_get(doc, "process");
    assert_non_null(p);
    assert_true(json_get_num(p, "cores", 0) >= 1);
    json_free(doc);

    buf_reset(&b);
    assert_int_equal(stats_prometheus(s, NULL, NULL, NULL, NULL, &b), 0);
    assert_non_null(strstr(b.p, "s3cached_job_need_bytes_per_second{job=\"label\\\"with\\\\quotes\"} "
                                "2800000000\n"));
    assert_non_null(strstr(b.p, "s3cached_client_stall_seconds_total{client=\"AKID\","
                                "addr=\"10.0.0.1\",cause=\"queue\"} 0.000001"));
    assert_non_null(strstr(b.p, "s3cached_process_cpu_seconds_total{mode=\"user\"} "));
    if (!access("/usr/bin/promtool", X_OK))
        assert_int_equal(run_with("/usr/bin/promtool check metrics", b.p, b.len), 0);
    else
        print_message("promtool not installed: the text was checked by the assertions only\n");
    buf_free(&b);
    stats_free(s);
    jobs_free(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jobs_names),
        cmocka_unit_test(test_jobs_need_sources),
        cmocka_unit_test(test_jobs_cap_and_fold),
        cmocka_unit_test(test_jobs_need_owner),
        cmocka_unit_test(test_jobs_key_cap),
        cmocka_unit_test(test_jobs_verdict),
        cmocka_unit_test(test_jobs_in_stats),
    };
    return cmocka_run_group_tests_name("jobs", tests, NULL, NULL);
}
