/* dependency_relaxation.c - the `dependency_relaxation(stages=..)` pass (Obscura §5.1-5.2,
 * Fig. 8-9).
 *
 * In the Strawman, an adjusted rank s lists "R(x) B(x) F(y)": B(x) waits for B(x) of rank
 * s + 1, and F(y), listed behind it, cannot use that wait (Fig. 8a). Shifting the
 * remaining forwards left and the backwards right, interleaved like 1F1B, gives
 * "F(y) R(x) B(x)": the forward (and the recomputation, which needs only local data)
 * runs while the backward waits, and the backward moves right into the time the
 * forward freed (Fig. 8b-c). In the list form of sched_util.h this is one more forward
 * listed ahead of every backward of the steady phase: on each chosen rank (`stages`,
 * default the adjusted ranks) the warm count becomes
 *
 *     W_s = min(M, 3(P - s - 1) + 2)
 *
 * i.e. the migrated count of forward_migration plus the one relaxed slot (never
 * lowered; capped at W_{s-1} - 1 as in forward_migration). It
 * costs one more micro-batch's kept bytes on the rank, which the activation swapping of
 * §6 pays for.
 *
 * Requires a 1F1B-family schedule. Idempotent (closed form applied with max). */
#include "passes.h"
#include "sched_util.h"

int pass_dependency_relaxation(Diag *d, Pipeline *p, const PassCall *call)
{
    return sched_migrate(d, p, call, 2);
}
