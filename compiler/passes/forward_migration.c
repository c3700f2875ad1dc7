/* forward_migration.c - the `forward_migration(stages=..)` pass: the Strawman pipeline's
 * Step 2 "Migrate" (Obscura §3.2, Fig. 6).
 *
 * On each chosen rank (`stages`, default the adjusted ranks) the steady-phase forwards
 * move left, before the first backward, as far as the rank's forward bubbles allow, so
 * that the forward bubbles turn into backward bubbles that can hide recomputation.
 *
 * How many: with b = 2f and no p2p time, 1F1B rank s starts B0 at P*f + 2(P-s-1)*f and
 * has run P - s forwards from time s*f, so it idles 2(P-s-1)*f before its first backward:
 * 2(P-s-1) forward-bubble slots of one forward each (Observation 3). The pass raises the
 * rank's warm count W_s (forwards listed before B0, sched_util.h) to
 *
 *     W_s = min(M, (P - s) + 2(P - s - 1)) = min(M, 3(P - s - 1) + 1)
 *
 * (never lowering it), and the rest stays 1F1B-interleaved. A rank cannot run more
 * forwards ahead than the rank before it feeds it (W_s <= W_{s-1}, else the schedule
 * deadlocks) and needs one fewer than it to keep the 1F1B lag (sched_util.h), so W_s is
 * capped at W_{s-1} - 1 (or M when W_{s-1} = M): migrating stage 2 alone of an
 * unmigrated 1F1B moves nothing.
 *
 * Requires a 1F1B-family schedule (sched_util.h). Idempotent (W_s is a closed form,
 * applied with max). Memory grows: each migrated forward keeps its activations (or
 * checkpoint) until its backward (the paper's Challenge 2, Table 1). */
#include "passes.h"
#include "sched_util.h"

int pass_forward_migration(Diag *d, Pipeline *p, const PassCall *call)
{
    return sched_migrate(d, p, call, 1);
}
