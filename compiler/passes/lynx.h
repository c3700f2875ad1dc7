/* lynx.h - what Lynx's two passes share (Chen et al., Optimizing Large Model Training
 * through Overlapped Activation Recomputation): the recomputation-aware partitioning
 * of partition_balance.c, run by `partition_balance` alone and by `lynx` with the
 * Lynx-HEU planner of lynx_overlap.c re-run on every candidate partition (Lynx §5,
 * Fig. 8 steps 2-3). Private to compiler/passes. */
#ifndef PIPEC_PASSES_LYNX_H
#define PIPEC_PASSES_LYNX_H

#include <stdbool.h>

#include "diag.h"
#include "ir.h"

/* The greedy of partition_balance.c on p, reading call's `verbose`; p needs a model
 * (`value` error at call, naming call's pass, otherwise). replan, when not NULL, plans
 * p once before the greedy and then each candidate after its costs were re-derived,
 * before its memory and time are judged; a non-zero return drops the candidate (or,
 * for p itself, ends the pass). Returns the errors reported. */
int partition_balance_run(Diag *d, Pipeline *p, const PassCall *call,
                          int (*replan)(Diag *d, Pipeline *q, const PassCall *call));

/* Lynx-HEU (§4.2) on ranks [lo, hi) of p: for each rank, the recomputation policy and
 * the placement of its recomputes (overlapped inside a host's all-reduces, or on
 * demand) that fit the budget with the least exposed recompute time. Re-derives the
 * costs. Returns the errors reported (from derive_costs). */
int lynx_plan(Diag *d, Pipeline *p, int32_t lo, int32_t hi, Loc loc);

/* p takes the contents of q (a clone of p that was transformed) and q is freed; p keeps
 * its own pass calls, which the caller (the pass being run) may still be reading. */
void lynx_adopt(Pipeline *p, Pipeline *q);

#endif
