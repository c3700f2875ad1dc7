/* sched_util.h - what the Obscura passes share (Obscura, ATC'25, §3.2, §5-8): a compact
 * description of a 1F1B-family schedule, and the list surgery that reads and writes it.
 *
 * Legend: P = stages (ranks), M = micro-batches, one chunk per rank (V = 1). Times ms,
 * sizes bytes.
 *
 * The 1F1B family. On rank s, let c_s(i) be the number of forwards listed before the
 * backward of micro-batch i. Every schedule these passes produce has
 *
 *     c_s(i) = min(M, W_s + i)         W_s = the rank's warm count, 1 <= W_s <= M
 *
 * (1F1B: W_s = min(M, P - s); GPipe: W_s = M), forwards and backwards in micro-batch
 * order, R(i) (when present) the compute op just before B(i), SO(m) just after F(m), and SI(m) listed
 * one backward ahead of B(m): just before the R/B group of micro-batch m - 1 when SO(m)
 * is listed by then, else just before R(m)/B(m). On a rank that swaps, three placements
 * keep the copies off the compute stream's critical path (the simulator, like the
 * runtime, makes an allocating op - F, R, SI - wait for every SO listed before it):
 *   - in a steady step R(i) does not wait for SO(y) (listed after F(y)): an R bound to
 *     the backward (a `dep B(i) -> R(i)` line from rank s + 1, passes.h) is listed
 *     right after the step's forward and ahead of its SO, "F(y) R(i) SO(y) SI(i+1)
 *     B(i)", since listed ahead of F(y) it would hold the forward until the gradient
 *     arrives (Obscura §5.1); an R without that line is listed before the forward,
 *     "R(i) F(y) SO(y) SI(i+1) B(i)". Both have the same static peak: R(i)'s bytes
 *     and F(y)'s unswapped block are held together once, at the later of the two;
 *   - in the warm-up SO(m) is listed after F(m + 1), so F(m + 1) does not wait for it;
 *   - the warm-up's first load SI(i) is listed before the last warm-up forward, so the
 *     first backward does not wait for it.
 * Each SI gets a `dep` on the compute op
 * listed just before it on its rank: the simulator starts an SI as soon as its SO has
 * ended, which would load blocks long before the backwards that free memory for them;
 * the gate makes the time-ordered memory follow the list-order walk that `check`
 * bounds. (sched_write replaces these same-rank compute -> SI deps on every write.)
 * The passes only change W_s, which
 * micro-batches recompute and which swap, so the shape is re-emitted from those.
 *
 * Deadlock freedom: rank s reaches B(i) after listing c_s(i) forwards; rank s + 1
 * needs c_{s+1}(i) of rank s's forwards before its own B(i), which rank s waits for.
 * So the schedule runs iff W_s >= W_{s+1} for every s (sched_write asserts it).
 *
 * Lag: with W_s = W_{s+1} < M, forward W_s + i - 1 must cross ranks s and s + 1 before
 * B(i) of rank s + 1 can run, and rank s lists that forward only after its B(i - 1):
 * every steady step then waits for a forward to travel down and a backward to travel
 * back (the tight dependency of Obscura §5.1), and the steady phase serialises. 1F1B
 * keeps W_s = W_{s+1} + 1; the passes keep W_s >= W_{s+1} + 1 unless W_s = M (a rank
 * that lists every forward before its first backward has none left to delay). */
#ifndef PIPEC_SCHED_UTIL_H
#define PIPEC_SCHED_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "diag.h"
#include "ir.h"

typedef struct SchedShape {
    int32_t P, M;
    int32_t *warm;   /* [P] W_s: forwards listed before the first backward */
    uint8_t *rec;    /* [P*M] rec[s*M + m]: R(m) on rank s */
    uint8_t *swp;    /* [P*M] swp[s*M + m]: SO(m)/SI(m) on rank s */
    Loc *loc;        /* [P*M*6] the source location of each (rank, m, kind) op, for
                      * diagnostics about rewritten ops; LOC_NONE when new */
} SchedShape;

/* Reads p into sh. p must have V = 1 and, on every rank, exactly F0..F(M-1) and
 * B0..B(M-1) in micro-batch order with c_s(i) = min(M, W_s + i), at most one R(m)
 * before B(m), SO/SI pairs, and no W. Otherwise reports `value` at call->loc naming the
 * pass and the first rank that does not fit, and returns 1 (sh is then empty). */
int sched_read(Diag *d, const Pipeline *p, const PassCall *call, SchedShape *sh);

/* Rewrites every rank's op list of p from sh (the shape above), and the SI gates. */
void sched_write(Pipeline *p, const SchedShape *sh, Loc loc);

void sched_free(SchedShape *sh);

/* Lowers warm counts of the ranks in sel (ascending s) to keep the lag above: W_s <=
 * W_{s-1} - 1, or <= M when W_{s-1} = M. Never below a legal input's counts. */
void sched_keep_lag(SchedShape *sh, const uint8_t *sel);

/* The 1F1B warm count of rank s: min(M, P - s). */
int32_t sched_warm_1f1b(int32_t P, int32_t M, int32_t s);

/* The ranks a pass acts on: `stages=` when given (validated against P: `value` error
 * and false when out of range), else the adjusted ranks (Pipeline.adjusted). sel[P]
 * gets 1 per chosen rank. */
bool sched_select(Diag *d, const Pipeline *p, const PassCall *call, uint8_t *sel, int *err);

/* What every list-rewriting pass starts with: the ranks it acts on (sched_select) and
 * the shape of p (sched_read). Returns 0 with *sel (P + 1 bytes, freed by the caller)
 * and *sh filled, or the number of errors reported (nothing to free then). */
int sched_begin(Diag *d, const Pipeline *p, const PassCall *call, uint8_t **sel, SchedShape *sh);

/* Raises the warm count of every selected rank s to min(M, 3(P-s-1) + extra), keeps the
 * lag (sched_keep_lag) and rewrites p. extra = 1 is the strawman's migration into the
 * forward bubbles (Obscura §3.2 Step 2), extra = 2 the dependency relaxation's one more
 * forward ahead of each steady backward (§5.2). Returns the errors reported. */
int sched_migrate(Diag *d, Pipeline *p, const PassCall *call, int32_t extra);

/* k: the last adjusted rank (Obscura §5.3), or -1 when none is adjusted. */
int32_t sched_last_adjusted(const Pipeline *p);

/* Runs the `recompute` pass on ranks [lo, hi) with a policy (by value, not by name) and
 * its argument (RecomputeDir.arg: block's layers, keep's mask; 0 for the others). */
int sched_recompute(Diag *d, Pipeline *p, int32_t lo, int32_t hi, RecomputePolicy pol,
                    uint32_t arg, Loc loc);

/* True when every rank's static memory peak (mem_walk) and, when all of those fit, its
 * weights + static arena (arena_plan, what `check` also verifies) are within the budget
 * (or there is no budget); over[P], when not NULL, gets 1 per rank over either. */
bool sched_fits(const Pipeline *p, uint8_t *over);

/* Sets rank s's swap_fraction (beta) as if written in `costs stage s { }`. */
void sched_set_beta(Pipeline *p, int32_t s, double beta);

/* The `recompute` pass (recompute.c) and `swap` (swap.c), called by the Obscura passes. */
int pass_recompute(Diag *d, Pipeline *p, const PassCall *call);
int pass_swap(Diag *d, Pipeline *p, const PassCall *call);

/* Obscura Eq. 2-3 (§6.2): the analytic T_0 of the Obscura pipeline in ms for p's costs
 * and adjusted ranks 0..k (k = the last adjusted rank): rank s > k takes
 * T_s = 3 M f_s + 3(P - s - 1) f_s; rank s <= k takes
 * T_s = max(T_{s+1} + g_s, g_s M + (k - s) g_s + T^C_s) with g_s = 3 f_s + r_s and Eq. 2's
 * T^C_s = max(l_s (x - f) - (k - s)(2f + r), 0) + max(l_s (x - 2f - r), 0) (epsilon = 0;
 * the paper leaves the second term unclamped, a negative cost is read as 0), where
 * l_s = lambda + (k - s) blocks of x = a_s beta / B_s ms each (a_s the bytes a
 * micro-batch keeps, B_s the rank's host_bw). Assumes b = 2f and no p2p, as the paper. */
double obscura_eq23(const Pipeline *p, int64_t lambda, double beta);

#endif
