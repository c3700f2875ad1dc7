/* sim.h - the schedule simulator (docs/spec.md "Time") and its writers: the --json object,
 * the human summary, an ASCII gantt, a Chrome trace and an SVG timeline.
 *
 * Legend: P = stages (ranks), M = micro-batches, V = chunks per rank. Times are
 * milliseconds, memory bytes. The simulator is an event-driven list scheduler, linear
 * in the number of ops; see docs/simulator.md for the readings of docs/spec.md it makes. */
#ifndef PIPEC_SIM_H
#define PIPEC_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir.h"
#include "util.h"

/* Per rank results. idle = makespan - busy; the bubbles are compute-stream idle time in
 * the windows of docs/spec.md "Time" (Obscura §2.1). Memory as in docs/spec.md "Memory":
 * static = the rank's `weights`, peak_act = peak - static. */
typedef struct SimStage {
    double busy_ms, idle_ms, fwd_bubble_ms, bwd_bubble_ms;
    double peak_mem_bytes, static_mem_bytes, peak_act_bytes;
    /* The data-parallel stream (SimResult.dp; docs/simulator.md "Data parallelism"), ms:
     * the durations of the rank's gradient reductions, of its parameter all-gathers
     * (zero 1-2 after the step, zero 3 before each F, R and B) and of its optimizer steps
     * (counted in busy_ms too), and dp_exposed_ms, how far the rank's last activity ends
     * past the makespan of the same run without the data-parallel stream (0 when it is
     * hidden; the largest over the ranks is SimResult.dp_exposed_ms). */
    double dp_reduce_ms, dp_gather_ms, opt_ms, dp_exposed_ms;
} SimStage;

/* One item of a rank's data-parallel stream, or an optimizer step (docs/spec.md "Time"),
 * for the trace: what it is, the rank and chunk, and when it ran (ms). */
typedef enum SimDpKind { SIM_DP_GATHER, SIM_DP_REDUCE, SIM_DP_OPT, SIM_DP_ALLGATHER } SimDpKind;
typedef struct SimDpSpan {
    double start, end;
    int32_t stage;
    uint8_t kind;   /* SimDpKind */
    uint8_t chunk;
} SimDpSpan;

/* The iteration's metrics beyond the per-rank rows (docs/simulator.md "Metrics").
 * lower_bound_ms: sim_lower_bound. overhead_ratio: (sum of idle + sum of recompute time,
 * R and RO on the compute stream) / (P x makespan), ms over ms. tokens_per_s: micro-batches
 * x micro-batch size x sequence length x data-parallel replicas / makespan (tokens per
 * second). mfu: model FLOPs of the iteration (cm_iteration_flops) / (makespan x GPUs x
 * device peak FLOP/s), GPUs = P x tensor_parallel x data-parallel replicas. A value that
 * is not known (no model, no device, a stuck or empty schedule) is NaN. */
typedef struct SimResult {
    double makespan_ms, bubble_ratio;
    double lower_bound_ms, overhead_ratio, tokens_per_s, mfu;
    bool dp;                  /* the data-parallel stream ran (data_parallel > 1 and some
                               * virtual stage has `params`); else the dp fields are 0 */
    double dp_exposed_ms;     /* makespan - the makespan of the same run without it */
    SimDpSpan *dpspan;        /* [ndpspan] its items, in the order they were placed */
    size_t ndpspan;
    SimStage *stage;          /* [P] */
    double **start, **end;    /* [P][n ops of that rank], ms */
    bool stuck;               /* the schedule cannot run (a cycle); times are partial */
} SimResult;

/* Simulates one iteration under docs/spec.md "Time". Linear in ops. The pipeline should be
 * checked (complete, no duplicates); ops that can never start (a cycle, or a missing
 * producer's consumer in an unchecked IR) leave stuck set and their times at 0. */
SimResult *simulate(const Pipeline *p);
void sim_free(SimResult *r);

/* A cheaper entry for search loops: only the makespan (no per-op arrays kept), reusing
 * scratch memory in *scratch (NULL on first call; free with sim_scratch_free). Returns
 * +inf when the schedule is stuck. */
double sim_makespan(const Pipeline *p, void **scratch);
void sim_scratch_free(void *scratch);

/* A lower bound on the makespan, ms: no order of p's ops (placement fixed, any per-rank
 * order on each stream, memory ignored, each op taking the time it takes in p) can end
 * earlier. The largest over every (rank, stream) of Jackson's preemptive one-machine
 * bound with heads and tails from the dependency graph (docs/simulator.md "Lower bound"),
 * so never below a rank's busy time nor the longest dependency chain; equal to the
 * makespan on 1F1B with uniform costs and no p2p. Linear-logarithmic in the ops. NaN when
 * the pipeline cannot be indexed (incomplete) or its dependencies (`dep` lines
 * included) form a cycle. */
double sim_lower_bound(const Pipeline *p);

/* Data-parallel replicas of the pipeline (each running the same schedule on other
 * samples), the one place tokens_per_s and mfu read it: the `data_parallel` setting
 * (docs/language.md "Data parallelism"), default 1. */
int32_t sim_dp_replicas(const Pipeline *p);

/* Each rank's compute-stream busy time without running the schedule, ms: the sum of
 * its compute ops' durations (an RO counts only its exposed part, opsem_exposed).
 * busy[P], caller-allocated; all 0 when the pipeline cannot be simulated. */
void sim_busy(const Pipeline *p, double *busy);

/* sim_busy's busy[r] alone (the same value), preparing only rank r's ops: ms, 0 when the
 * pipeline cannot be simulated or r is not a rank. */
double sim_busy_rank(const Pipeline *p, int32_t r);

/* Writers: Chrome trace JSON, SVG, ASCII gantt (width in columns), the --json object
 * of docs/spec.md "JSON output", the human summary. They append to out. */
void sim_write_json(StrBuf *out, const Pipeline *p, const SimResult *r);
void sim_write_trace(StrBuf *out, const Pipeline *p, const SimResult *r);
void sim_write_svg(StrBuf *out, const Pipeline *p, const SimResult *r);
void sim_write_gantt(StrBuf *out, const Pipeline *p, const SimResult *r, int width);
void sim_write_summary(StrBuf *out, const Pipeline *p, const SimResult *r);

/* Beyond the interface above: helpers the writers share (and the runtime may use to
 * draw measured timelines in the same format). */

/* Per-op memory changes of docs/spec.md "Memory", from the list-order walk (the amounts of
 * mem_walk): delta[s][i] > 0 bytes allocated at the start of op i of rank s (F, R, SI),
 * < 0 bytes freed at its end (B, W, SO). delta is laid out like SimResult.start
 * (caller-allocated). All zero when the schedule is incomplete. */
void sim_mem_deltas(const Pipeline *p, double **delta);

/* sim_mem_deltas into arrays it allocates (delta[s] has p->stages[s].n entries, one
 * allocation behind them all); free them with sim_mem_deltas_free(p, delta). */
double **sim_mem_deltas_new(const Pipeline *p);
void sim_mem_deltas_free(const Pipeline *p, double **delta);

/* Replays rank s's live memory over the times in r (weights included): allocations at
 * op starts, frees at op ends, frees first at equal times. Calls fn (may be NULL) after
 * every change with the time in ms and the live bytes; returns the peak in bytes. */
double sim_mem_replay(const Pipeline *p, const SimResult *r, double *const *delta, int32_t s,
                      void (*fn)(void *ctx, double t_ms, double bytes), void *ctx);

/* Pipeline-wide comparisons and the two-timeline picture of `pipec diff --svg`: a above
 * b on one time axis, labelled la and lb. */
void sim_write_svg_pair(StrBuf *out, const Pipeline *a, const SimResult *ra, const char *la,
                        const Pipeline *b, const SimResult *rb, const char *lb);

/* Number formatting for the writers; each returns buf (64 bytes is enough).
 * sim_fmt_num: shortest round-trip decimal with at least one fractional digit, as JSON
 *   ("33.0", "0.2727", "1e-05"); "null" when not finite.
 * sim_fmt_bytes: a whole number of bytes ("38654705664"); "null" when not finite.
 * sim_fmt_size: human size with one decimal ("36.0 GiB"). */
char *sim_fmt_num(char *buf, size_t n, double x);
char *sim_fmt_bytes(char *buf, size_t n, double x);
char *sim_fmt_size(char *buf, size_t n, double bytes);
/* Appends s as a JSON string literal. */
void sim_json_string(StrBuf *out, const char *s);

#endif
