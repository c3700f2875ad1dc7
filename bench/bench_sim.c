/* bench_sim.c - simulator throughput and memory (the search loops of the passes and
 * `pipec tune` call it many times).
 *
 * Schedules are built in C (1F1B; Megatron's interleaved 1F1B with V chunks) with
 * uniform costs f 1ms, b 2ms, act 1GiB and a little p2p, so every op waits on
 * something real. Cases:
 *   1f1b P8 M32           512 ops, many runs: simulate() and sim_makespan() (scratch reused)
 *   interleaved P8 V4 M32 2048 ops, many runs
 *   interleaved P64 V4 M4096  2,097,152 ops, a few runs
 * Columns: microseconds per run, simulated ops per second, and the ratio of those ops/s
 * to a baseline measured in the same process: a plain pass over the same ops (reading
 * each op and summing its cost-table duration). The ratio is machine independent: it
 * says how many plain passes one simulation costs. Memory: peak RSS growth (VmHWM)
 * over the first simulate() of the big case, per op (results included: start and end
 * times are 16 bytes per op).
 *
 * Targets (issue 4): P=8, M=32 well under a millisecond; 2M ops under two seconds.
 * Not a test: nothing is asserted. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir.h"
#include "sim.h"
#include "util.h"
#include "benchutil.h"

/* Interleaved 1F1B (Narayanan et al. 2021); V = 1 is plain 1F1B. M % P == 0. */
static Pipeline *build(int P, int V, int M)
{
    Pipeline *p = mk(P, M, V);
    set_cost(&p->costs, COST_F, 1.0 / V);
    set_cost(&p->costs, COST_B, 2.0 / V);
    set_cost(&p->costs, COST_ACT, 1073741824.0 / V);
    set_cost(&p->costs, COST_P2P, 0.01);
    if (V == 1)
        gen_1f1b(p);
    else
        gen_interleaved(p);
    return p;
}

/* The baseline: one plain pass over the ops, summing a duration per op. */
static volatile double sink;
static double plain_pass(const Pipeline *p)
{
    double dur[OP_NKINDS] = {p->costs.v[COST_F], p->costs.v[COST_B], 0, 0, 0, 0}, t = 0;
    for (int32_t s = 0; s < p->P; s++) {
        const Op *o = p->stages[s].ops;
        for (uint32_t i = 0; i < p->stages[s].n; i++)
            t += dur[o[i].kind] + o[i].mb * 1e-12;
    }
    sink = t;
    return t;
}

typedef struct Timing {
    double us_per_run, ops_per_s;
} Timing;

static Timing time_runs(const Pipeline *p, int runs, int what, void **scratch)
{
    double nops = (double)pipeline_nops(p);
    double t0 = now_ms();
    for (int i = 0; i < runs; i++) {
        if (what == 0)
            plain_pass(p);
        else if (what == 1)
            sim_free(simulate(p));
        else
            sink = sim_makespan(p, scratch);
    }
    double ms = now_ms() - t0;
    return (Timing){ms * 1e3 / runs, nops * runs / (ms / 1e3)};
}

static void row(const char *name, const Pipeline *p, int runs, const char *entry, Timing t,
                Timing base)
{
    printf("%-26s %9llu %7d %-13s %12.2f %14.3e %10.4f\n", name,
           (unsigned long long)pipeline_nops(p), runs, entry, t.us_per_run, t.ops_per_s,
           t.ops_per_s / base.ops_per_s);
}

static void bench_case(const char *name, int P, int V, int M, int runs)
{
    Pipeline *p = build(P, V, M);
    void *scratch = NULL;
    time_runs(p, runs / 10 + 1, 1, &scratch);  /* warm up */
    Timing base = time_runs(p, runs, 0, NULL);
    Timing full = time_runs(p, runs, 1, NULL);
    Timing ms = time_runs(p, runs, 2, &scratch);
    row(name, p, runs, "plain pass", base, base);
    row(name, p, runs, "simulate", full, base);
    row(name, p, runs, "sim_makespan", ms, base);
    sim_scratch_free(scratch);
    pipeline_free(p);
}

int main(int argc, char **argv)
{
    int bigP = 64, bigV = 4, bigM = 4096;
    if (bench_pvm_args(argc, argv, "bench_sim", &bigP, &bigV, &bigM))
        return 2;
    printf("bench_sim: event-driven simulator (ratio = ops/s over a plain pass's ops/s)\n");
    printf("%-26s %9s %7s %-13s %12s %14s %10s\n", "case", "ops", "runs", "entry", "us/run",
           "ops/s", "ratio");
    bench_case("1f1b P8 M32", 8, 1, 32, 20000);
    bench_case("interleaved P8 V4 M32", 8, 4, 32, 5000);

    Pipeline *p = build(bigP, bigV, bigM);
    double nops = (double)pipeline_nops(p);
    double rss0 = peak_rss(), t0 = now_ms();
    SimResult *r = simulate(p);
    double first_ms = now_ms() - t0, rss1 = peak_rss();
    char name[64];
    snprintf(name, sizeof name, "interleaved P%d V%d M%d", bigP, bigV, bigM);
    Timing base = time_runs(p, 3, 0, NULL);
    Timing full = time_runs(p, 3, 1, NULL);
    void *scratch = NULL;
    Timing ms = time_runs(p, 3, 2, &scratch);
    row(name, p, 3, "plain pass", base, base);
    row(name, p, 3, "simulate", full, base);
    row(name, p, 3, "sim_makespan", ms, base);
    printf("%s: first simulate %.1f ms, makespan %.1f ms (%.1f by the closed form, "
           "which ignores the 0.01ms p2p), "
           "peak RSS growth %.1f bytes/op\n",
           name, first_ms, r->makespan_ms, bigM * 3.0 + (bigP - 1) * 3.0 / bigV,
           (rss1 - rss0) / nops);
    sim_free(r);
    sim_scratch_free(scratch);
    pipeline_free(p);
    return 0;
}
