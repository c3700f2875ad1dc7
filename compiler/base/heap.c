/* heap.c - see heap.h. */
#define _DEFAULT_SOURCE
#include "heap.h"

#include <stdint.h>
#include <stdlib.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define PIPEC_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define PIPEC_SANITIZED 1
#endif

#if defined(__GLIBC__) && defined(__linux__) && !defined(PIPEC_SANITIZED)
#include <malloc.h>
#include <sys/mman.h>

/* Bytes the heap grows by at once, and the size of a transparent huge page. */
#define HEAP_PAD (64u << 20)
#define HUGE_PAGE ((uintptr_t)2 << 20)

void heap_tune(void)
{
    /* glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX) */
    if (!mallopt(M_MMAP_THRESHOLD, (int)(4u << 20) * (int)sizeof(long)) ||
        !mallopt(M_TRIM_THRESHOLD, INT32_MAX) || !mallopt(M_TOP_PAD, (int)HEAP_PAD))
        return;
    char *first = malloc(1); /* creates the heap, HEAP_PAD beyond this block */
    if (!first)
        return;
    uintptr_t lo = ((uintptr_t)first + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uintptr_t hi = ((uintptr_t)first + HEAP_PAD - HUGE_PAGE) & ~(HUGE_PAGE - 1);
    if (hi > lo) /* a hint: where the kernel has no huge page, nothing changes */
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    free(first);
}
#else
void heap_tune(void) {}
#endif
