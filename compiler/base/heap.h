/* heap.h - the process's allocator settings for large schedules (docs/performance.md
 * "Page faults"). A command over a million ops allocates and frees arrays of tens of
 * megabytes phase after phase (op index, wait graph, plans, the simulator's tables);
 * by default glibc maps each array of 128 KiB or more on its own and unmaps it on free,
 * so every phase faults its pages in again, 4 KiB at a time: for `sim --json` of
 * 131,072 ops, 7,100 page faults and 40% of its time in the kernel. */
#ifndef PIPEC_HEAP_H
#define PIPEC_HEAP_H

/* Once, at start-up, before the first allocation that matters: arrays up to 32 MiB come
 * from the heap (glibc's largest mmap threshold), freed memory stays with the process
 * for the next phase (no trimming), the heap grows 64 MiB at a time, and that first
 * stretch is advised to the kernel as transparent huge pages (madvise MADV_HUGEPAGE: 2
 * MiB per fault where the kernel grants them). Only where glibc on Linux is the
 * allocator and no sanitizer replaces it; elsewhere a no-op. Never fails: a refused
 * setting leaves the defaults. */
void heap_tune(void);

#endif
