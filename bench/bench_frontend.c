/* bench_frontend.c - front-end throughput and memory: parse + elaborate + check of a
 * 2-million-op schedule, `interleaved` (stdlib/schedules.pipe) with P = 64, V = 4,
 * M = 4096, i.e. 2 * P * V * M = 2,097,152 ops (F and B).
 *
 * Phases, each timed with a monotonic clock:
 *   load     load_pipeline_string: parse, import the stdlib, expand the template
 *   check    what `pipec check` runs after loading: check_pipeline (structure and
 *            dependencies) and driver_check_memory (the memory walk and the arena plan)
 *   print    print_pipeline: the canonical explicit form
 *   reparse  load_pipeline_string of that explicit form (the parser on 2M op tokens)
 * Memory: the growth of peak RSS (VmHWM of /proc/self/status) over load, and over
 * load + check, divided by the op count: bytes per op, the IR's 16 bytes included.
 *
 * The baseline, run first in the same process, is the same schedule at P = 8, V = 4,
 * M = 512 (32,768 ops), the fastest of 5 runs. The ratio column is ops/s of a case over ops/s of the baseline:
 * close to 1 means linear scaling, and it is comparable across machines where raw
 * ops/s are not. Not a test: nothing is asserted.
 *
 * usage: bench_frontend [P V M]   (stdlib found through $PIPEC_STDLIB, default stdlib) */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "driver.h"
#include "frontend.h"
#include "ir.h"
#include "print.h"
#include "util.h"
#include "benchutil.h"

typedef struct Result {
    uint64_t ops;
    double load_ms, check_ms, print_ms, reparse_ms;
    double load_bpo;   /* peak RSS growth over load / ops, bytes */
    double bytes_per_op; /* peak RSS growth over load + check / ops, bytes */
    int errors;
} Result;

static Result run_case(int P, int V, int M)
{
    Result r = {0};
    char *src = xasprintf("import \"std/schedules.pipe\"\n"
                          "pipeline bench {\n"
                          "  stages %d microbatches %d chunks %d\n"
                          "  schedule interleaved\n"
                          "  costs { f 1ms b 2ms act 1MiB weights 1GiB }\n"
                          "  memory 80GiB\n"
                          "}\n",
                          P, M, V);
    Diag d = {0};
    double rss0 = peak_rss();
    double t0 = now_ms();
    Pipeline *p = load_pipeline_string(&d, NULL, "bench.pipe", src, strlen(src));
    double t1 = now_ms();
    double rss_load = peak_rss();
    if (p && !check_pipeline(&d, p, CHECK_STRUCTURE | CHECK_DEPS))
        driver_check_memory(&d, p);
    double t2 = now_ms();
    double rss1 = peak_rss();
    r.errors = d.nerr;
    if (p && !d.nerr) {
        r.ops = pipeline_nops(p);
        r.load_ms = t1 - t0;
        r.check_ms = t2 - t1;
        r.load_bpo = r.ops ? (rss_load - rss0) / (double)r.ops : 0;
        r.bytes_per_op = r.ops ? (rss1 - rss0) / (double)r.ops : 0;
        StrBuf out = {0};
        double t3 = now_ms();
        print_pipeline(&out, p);
        double t4 = now_ms();
        r.print_ms = t4 - t3;
        pipeline_free(p);
        p = NULL;
        Diag d2 = {0};
        double t5 = now_ms();
        Pipeline *q = load_pipeline_string(&d2, NULL, "bench_explicit.pipe", out.s, out.len);
        double t6 = now_ms();
        r.reparse_ms = t6 - t5;
        if (!q || pipeline_nops(q) != r.ops)
            r.errors++;
        pipeline_free(q);
        diag_free(&d2);
        sb_free(&out);
    }
    pipeline_free(p);
    diag_free(&d);
    free(src);
    return r;
}

static void row(const char *name, int P, int V, int M, const Result *r, double base_ops_per_s)
{
    double lc = r->load_ms + r->check_ms;
    double ops_s = lc > 0 ? r->ops / (lc / 1e3) : 0;
    printf("%-10s %3d %2d %5d %9llu %9.1f %9.1f %9.1f %9.1f %12.0f %6.2f", name, P, V, M,
           (unsigned long long)r->ops, r->load_ms, r->check_ms, r->print_ms, r->reparse_ms, ops_s,
           base_ops_per_s > 0 ? ops_s / base_ops_per_s : 1.0);
    /* Peak RSS only grows: a case smaller than an earlier one shows no growth. */
    if (r->bytes_per_op > 0)
        printf(" %8.1f %8.1f\n", r->load_bpo, r->bytes_per_op);
    else
        printf(" %8s %8s\n", "-", "-");
}

int main(int argc, char **argv)
{
    int P = 64, V = 4, M = 4096;
    if (bench_pvm_args(argc, argv, "bench_frontend", &P, &V, &M))
        return 2;
    if (!getenv("PIPEC_STDLIB"))
        setenv("PIPEC_STDLIB", "stdlib", 1);

    printf("bench_frontend: parse + elaborate + check (interleaved schedule; ops/s over load+check)\n");
    printf("%-10s %3s %2s %5s %9s %9s %9s %9s %9s %12s %6s %8s %8s\n", "case", "P", "V", "M", "ops",
           "load_ms", "check_ms", "print_ms", "reparse", "ops/s", "ratio", "B/op_ld", "B/op");
    /* Warm-up (page faults of the allocator, the stdlib read into the page cache). */
    Result w = run_case(4, 2, 8);
    if (w.errors) {
        fprintf(stderr, "bench_frontend: the warm-up schedule did not compile (%d errors)\n", w.errors);
        return 1;
    }
    /* The baseline is small: the fastest of 5 runs, so that noise does not set the ratio. */
    Result base = run_case(8, 4, 512);
    for (int i = 0; i < 4; i++) {
        Result b = run_case(8, 4, 512);
        if (b.load_ms + b.check_ms < base.load_ms + base.check_ms)
            base = b;
    }
    double lc = base.load_ms + base.check_ms;
    double base_ops_s = lc > 0 ? base.ops / (lc / 1e3) : 0;
    row("baseline", 8, 4, 512, &base, base_ops_s);
    Result big = run_case(P, V, M);
    if (big.errors) {
        fprintf(stderr, "bench_frontend: P=%d V=%d M=%d did not compile (%d errors)\n", P, V, M, big.errors);
        return 1;
    }
    row("large", P, V, M, &big, base_ops_s);
    printf("B/op_ld: peak RSS growth over load / ops; B/op: over load + check; the IR's Op is %zu bytes\n",
           sizeof(Op));
    return 0;
}
