/* benchutil.h - what the benchmarks share: a monotonic clock, the peak RSS, the
 * `P V M` arguments, and the hand-built schedules of the unit tests
 * (tests/unit/testutil.h, without its cmocka part). Header-only: bench/run.sh builds each bench/bench_*.c as one program. */
#ifndef PIPEC_BENCHUTIL_H
#define PIPEC_BENCHUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TESTUTIL_NO_CMOCKA
#include "../tests/unit/testutil.h"

/* Milliseconds on the monotonic clock (CLOCK_MONOTONIC; needs _DEFAULT_SOURCE or POSIX). */
static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Peak resident set size in bytes (VmHWM of /proc/self/status), 0 when unknown. */
static inline double peak_rss(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    double kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            kb = atof(line + 6);
    fclose(f);
    return kb * 1024;
}

/* The optional `P V M` arguments of a benchmark named name: none keeps *P, *V, *M, three
 * set them. Returns 0, or 2 after a usage line on stderr for any other count. */
static inline int bench_pvm_args(int argc, char **argv, const char *name, int *P, int *V,
                                 int *M)
{
    if (argc == 4) {
        *P = atoi(argv[1]);
        *V = atoi(argv[2]);
        *M = atoi(argv[3]);
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s [P V M]\n", name);
        return 2;
    }
    return 0;
}

#endif
