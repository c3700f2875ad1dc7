/* lynx.c - the `lynx` pass: Lynx-HEU, then recomputation-aware partitioning re-costed
 * with overlap (Chen et al., Optimizing Large Model Training through Overlapped
 * Activation Recomputation, §3 Fig. 5 and §5 Fig. 8).
 *
 * Lynx's policy maker alternates its two parts: a partition is proposed (§5 step 1 or
 * 4), the recomputation policy generator plans it (step 2, Lynx-HEU: lynx_overlap.c),
 * the training cost model times each stage (step 3), and the greedy keeps the move of
 * one layer from the slowest to the fastest stage while the longest stage shrinks and
 * every stage fits. This pass is `lynx_overlap` followed by `partition_balance`
 * (partition_balance.c) whose every candidate partition is re-planned by Lynx-HEU
 * before it is timed and checked against the budget.
 *
 * Arguments: verbose (bool: print each kept move). Requires a model (`value` error
 * otherwise). Idempotent: on its own output Lynx-HEU plans the same
 * ranks and the greedy's first move is not kept. */
#include "lynx.h"
#include "passes.h"

/* Lynx-HEU over every rank: of the pipeline first, then of each candidate partition. */
static int replan(Diag *d, Pipeline *q, const PassCall *call)
{
    return lynx_plan(d, q, 0, q->P, call->loc);
}

int pass_lynx(Diag *d, Pipeline *p, const PassCall *call)
{
    return partition_balance_run(d, p, call, replan);
}
