/*
 * test_mpu.c: the multipart rules shared by the POSIX backend and write-back staging
 * (backends/mpu.c): a Complete's checks and ETag against a table of parts, upload IDs, ETags as
 * clients quote them, the pages of an upload listing, and the MD5 of a range.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/mpu.h"
#include "lib/s3c.h"
#include "lib/s3err.h"

#define MIB (1ull << 20)

/* The upload's parts, by number: the store's callback of mpu_complete_plan(). */
struct held {
    struct mpu_part p[8];
    size_t n;
    unsigned calls;
};

static int held_part(void *cls, unsigned number, const char *etag, struct mpu_part *out)
{
    struct held *h = cls;
    (void)etag;
    h->calls++;
    for (size_t i = 0; i < h->n; i++)
        if (h->p[i].number == number) {
            *out = h->p[i];
            return 0;
        }
    return -S3E_INVALID_PART;
}

static struct held upload3(void)
{
    struct held h = {.n = 3};
    h.p[0] = (struct mpu_part){1, "00000000000000000000000000000001", 5 * MIB, 1};
    h.p[1] = (struct mpu_part){2, "00000000000000000000000000000002", 5 * MIB, 0};
    h.p[2] = (struct mpu_part){3, "00000000000000000000000000000003", 1 * MIB, 1};
    return h;
}

static void want_of(const struct held *h, struct be_part *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].number = h->p[i].number;
        snprintf(w[i].etag, sizeof(w[i].etag), "\"%s\"", h->p[i].etag); /* quoted, as sent */
    }
}

static void test_mpu_complete_plan_ok(void **state)
{
    struct held h = upload3();
    struct be_part w[3];
    struct mpu_plan plan;
    (void)state;
    want_of(&h, w, 3);
    assert_int_equal(mpu_complete_plan(w, 3, held_part, &h, &plan), 0);
    assert_int_equal(plan.n, 3);
    assert_int_equal(plan.total, 11 * MIB);
    assert_int_equal(plan.part_size, 5 * MIB);
    /* MD5 of the three binary MD5s, "-3": what S3 gives this upload */
    assert_string_equal(plan.etag, "ef2c5f0e74f5f9224fa8cec6c947d732-3");
    assert_int_equal(plan.use[0].inplace, 1);
    assert_int_equal(plan.use[1].inplace, 0);
    assert_int_equal(plan.use[2].size, 1 * MIB);
    mpu_plan_free(&plan);
    mpu_plan_free(&plan); /* twice is harmless */
}

static void test_mpu_complete_plan_errors(void **state)
{
    struct be_part w[3];
    struct mpu_plan plan;
    (void)state;
    /* out of order: refused before any part is looked up */
    struct held h = upload3();
    want_of(&h, w, 3);
    w[1].number = 1;
    assert_int_equal(mpu_complete_plan(w, 3, held_part, &h, &plan), -S3E_INVALID_PART_ORDER);
    assert_int_equal(h.calls, 0);
    /* another ETag */
    h = upload3();
    want_of(&h, w, 3);
    w[1].etag[5] = 'f';
    assert_int_equal(mpu_complete_plan(w, 3, held_part, &h, &plan), -S3E_INVALID_PART);
    /* a part the upload does not hold */
    h = upload3();
    want_of(&h, w, 3);
    w[2].number = 4;
    assert_int_equal(mpu_complete_plan(w, 3, held_part, &h, &plan), -S3E_INVALID_PART);
    /* a part under 5 MiB that is not the last */
    h = upload3();
    h.p[1].size = 5 * MIB - 1;
    want_of(&h, w, 3);
    assert_int_equal(mpu_complete_plan(w, 3, held_part, &h, &plan), -S3E_ENTITY_TOO_SMALL);
    /* a last part larger than the others: no common part size */
    h = upload3();
    h.p[2].size = 6 * MIB;
    want_of(&h, w, 3);
    assert_int_equal(mpu_complete_plan(w, 3, held_part, &h, &plan), 0);
    assert_int_equal(plan.part_size, 0);
    mpu_plan_free(&plan);
}

static void test_mpu_etag_and_ids(void **state)
{
    static const struct { const char *client, *ours; int want; } cases[] = {
        {"abc", "abc", 1}, {"\"abc\"", "abc", 1}, {"\"ABC\"", "abc", 1}, {"\"abc", "abc", 0},
        {"ab", "abc", 0}, {"\"\"", "", 1}, {"\"abcd\"", "abc", 0},
    };
    char id[MPU_ID_LEN + 1], id2[MPU_ID_LEN + 1];
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
        assert_int_equal(mpu_etag_match(cases[i].client, cases[i].ours), cases[i].want);
    assert_int_equal(mpu_id_new(id), 0);
    assert_int_equal(mpu_id_new(id2), 0);
    assert_true(mpu_id_ok(id));
    assert_string_not_equal(id, id2);
    assert_false(mpu_id_ok(NULL));
    assert_false(mpu_id_ok("0123456789abcdef0123456789abcde"));   /* 31 digits */
    assert_false(mpu_id_ok("0123456789abcdef0123456789abcdeF"));  /* upper case */
    assert_false(mpu_id_ok("../3456789abcdef0123456789abcdef0"));
}

static void test_mpu_uploads_page(void **state)
{
    static const char *const keys[] = {"b", "a", "c", "b", "a"};
    static const char *const ids[] = {"2", "9", "1", "1", "3"};
    struct be_upload u[5];
    size_t n = 5;
    int truncated = 0;
    (void)state;
    for (size_t i = 0; i < 5; i++) {
        u[i].key = strdup(keys[i]);
        snprintf(u[i].upload_id, sizeof(u[i].upload_id), "%s", ids[i]);
    }
    /* after (a, 3): (a, 9) (b, 1) (b, 2) (c, 1); two of them */
    mpu_uploads_page(u, &n, "a", "3", 2, &truncated);
    assert_int_equal(n, 2);
    assert_int_equal(truncated, 1);
    assert_string_equal(u[0].key, "a");
    assert_string_equal(u[0].upload_id, "9");
    assert_string_equal(u[1].key, "b");
    assert_string_equal(u[1].upload_id, "1");
    for (size_t i = 0; i < n; i++) /* the array is on the stack: the keys only */
        free(u[i].key);
}

static void test_mpu_md5_range(void **state)
{
    char path[] = "/tmp/test_mpu.XXXXXX", md5[33];
    int fd = mkstemp(path);
    (void)state;
    assert_true(fd >= 0);
    unlink(path);
    assert_int_equal(write(fd, "xxabcxx", 7), 7);
    assert_int_equal(mpu_md5_range(fd, 2, 3, md5), 0);
    assert_string_equal(md5, "900150983cd24fb0d6963f7d28e17f72"); /* MD5("abc") */
    assert_int_equal(mpu_md5_range(fd, 0, 0, md5), 0);
    assert_string_equal(md5, "d41d8cd98f00b204e9800998ecf8427e"); /* MD5("") */
    assert_int_equal(mpu_md5_range(fd, 5, 3, md5), -EIO);          /* past the end */
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mpu_complete_plan_ok),
        cmocka_unit_test(test_mpu_complete_plan_errors),
        cmocka_unit_test(test_mpu_etag_and_ids),
        cmocka_unit_test(test_mpu_uploads_page),
        cmocka_unit_test(test_mpu_md5_range),
    };
    return cmocka_run_group_tests_name("mpu", tests, NULL, NULL);
}
