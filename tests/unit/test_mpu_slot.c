/*
 * test_mpu_slot.c: the in-place multipart layout's rules (backends/mpu_slot.h): when a
 * Complete may make the data file the object (a table), and what the slot locks exclude
 * between two open files of one data file (two attempts, an attempt and a Complete).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backends/mpu_slot.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define P 100

static void test_mpu_slot_plan(void **state)
{
    /* I: in place; F: a file of its own of P bytes; S: a file of its own, shorter; L: longer */
    static const struct {
        const char *parts; /* one letter per part, numbered from @first */
        unsigned first, max_inplace;
        uint64_t psize;
        int want;
    } cases[] = {
        { "III", 1, 3, P, 1 },   /* the checkpoint: every part in its slot */
        { "IIS", 1, 2, P, 1 },   /* a short last part, copied into its slot */
        { "IFI", 1, 3, P, 1 },   /* a re-upload of P bytes, copied into its slot */
        { "FFF", 1, 0, P, 1 },   /* no part in place yet: all copied in */
        { "IIL", 1, 2, P, 0 },   /* a last part longer than P does not fit its slot */
        { "ISI", 1, 3, P, 0 },   /* a short part in the middle */
        { "ILI", 1, 3, P, 0 },
        { "II", 2, 3, P, 0 },    /* not from part 1 */
        { "II", 1, 3, P, 0 },    /* part 3 in place would be cut off */
        { "II", 1, 2, 0, 0 },    /* no common size */
        { "", 1, 0, P, 0 },
        { "I", 1, 1, P, 1 },
        { "S", 1, 0, P, 1 },
    };
    (void)state;
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        struct mpu_slot_use u[8];
        size_t n = 0;
        for (const char *k = cases[c].parts; *k; k++, n++) {
            u[n].number = cases[c].first + (unsigned)n;
            u[n].inplace = *k == 'I';
            u[n].size = *k == 'S' ? P / 2 : *k == 'L' ? P + 1 : P;
        }
        if (mpu_slot_plan(u, n, cases[c].psize, cases[c].max_inplace) != cases[c].want) {
            print_error("case %zu (%s from %u): want %d\n", c, cases[c].parts, cases[c].first,
                        cases[c].want);
            fail();
        }
    }
    /* numbers with a gap */
    struct mpu_slot_use gap[2] = { { 1, P, 1 }, { 3, P, 1 } };
    assert_int_equal(mpu_slot_plan(gap, 2, P, 3), 0);
}

static void test_mpu_slot_locks(void **state)
{
    char path[] = "/tmp/test_mpu_slot.XXXXXX";
    int a, b, c, info1, info2;
    (void)state;

    a = mkstemp(path);
    assert_true(a >= 0);
    b = open(path, O_RDWR);
    c = open(path, O_RDWR);
    assert_true(b >= 0 && c >= 0);

    /* two attempts of one slot: the second is told at once; other slots are free */
    assert_int_equal(mpu_slot_lock(a, 2, P), 0);
    assert_int_equal(mpu_slot_lock(b, 2, P), -EAGAIN);
    assert_int_equal(mpu_slot_lock(b, 1, P), 0);
    assert_int_equal(mpu_slot_lock(b, 3, P), 0);
    assert_int_equal(mpu_slot_lock(b, 0, P), -EINVAL);
    /* a Complete cannot take the file while any slot is held, nor an attempt a slot after */
    assert_int_equal(mpu_slot_lock_all(c), -EAGAIN);
    close(a);
    assert_int_equal(mpu_slot_lock_all(c), -EAGAIN);
    close(b);
    assert_int_equal(mpu_slot_lock_all(c), 0);
    a = open(path, O_RDWR);
    assert_int_equal(mpu_slot_lock(a, 1, P), -EAGAIN);
    assert_int_equal(mpu_slot_lock(a, 1000000, P), -EAGAIN); /* beyond the end too */
    close(c);
    assert_int_equal(mpu_slot_lock(a, 1, P), 0);
    /* an attempt recorded gives its slot back with the fd still open */
    b = open(path, O_RDWR);
    assert_int_equal(mpu_slot_lock_all(b), -EAGAIN);
    mpu_slot_unlock(a, 1, P);
    assert_int_equal(mpu_slot_lock_all(b), 0);
    close(b);
    close(a);

    /* publication locks: one per number, released by unpublish or close */
    info1 = open(path, O_RDWR);
    info2 = open(path, O_RDWR);
    assert_int_equal(mpu_slot_publish_lock(info1, 7), 0);
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 7, .l_len = 1 };
    assert_int_equal(fcntl(info2, F_OFD_GETLK, &fl), 0);
    assert_int_equal(fl.l_type, F_WRLCK); /* held by info1 */
    assert_int_equal(mpu_slot_publish_lock(info2, 8), 0); /* another number does not wait */
    mpu_slot_unpublish(info1, 7);
    assert_int_equal(mpu_slot_publish_lock(info2, 7), 0);
    close(info1);
    close(info2);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mpu_slot_plan),
        cmocka_unit_test(test_mpu_slot_locks),
    };
    return cmocka_run_group_tests_name("mpu_slot", tests, NULL, NULL);
}
