/*
 * arr.c: growable arrays (arr.h).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arr.h"

int arr_grow(void *arrp, size_t size, size_t n, size_t more, size_t *cap)
{
    void *p;
    if (n + more < n)
        return -ENOMEM;
    if (n + more <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < n + more) {
        if (ncap > SIZE_MAX / 2)
            return -ENOMEM;
        ncap *= 2;
    }
    if (ncap > SIZE_MAX / size)
        return -ENOMEM;
    memcpy(&p, arrp, sizeof(p));
    p = realloc(p, ncap * size);
    if (!p)
        return -ENOMEM;
    memcpy(arrp, &p, sizeof(p));
    *cap = ncap;
    return 0;
}
