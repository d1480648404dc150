/*
 * arr.h: growable arrays (arr.c). An array is the caller's pointer, element count and
 * capacity; ARR_GROW() makes room before elements are appended:
 *     struct be_part *v = NULL; size_t n = 0, cap = 0;
 *     if ((rc = ARR_GROW(v, n, 1, cap))) goto fail;   (v and cap unchanged on failure)
 *     v[n++] = part;
 * Capacity doubles (16 at first), so appending n elements costs O(n).
 */
#ifndef S3C_ARR_H
#define S3C_ARR_H

#include <stddef.h>

/* Makes room for @more elements of @size bytes after the first @n of the array *@arrp of
 * capacity *@cap (both updated). 0 or -ENOMEM (nothing changed; also on overflow). */
int arr_grow(void *arrp, size_t size, size_t n, size_t more, size_t *cap);
#define ARR_GROW(arr, n, more, cap) arr_grow(&(arr), sizeof(*(arr)), (n), (more), &(cap))

#endif
