/* identify_adjusted.c - the `identify_adjusted(cmb=true)` pass: Obscura §3.2 Step 1
 * ("Identify and Recompute") with §8's CMB-Identifying.
 *
 * A rank whose static memory peak (mem_walk, docs/spec.md "Memory") exceeds the budget is
 * fixed in the cheapest of two ways:
 *   - cmb=true (the default; §8): if the rank has no recomputation yet, it first gets
 *     the `cmb` policy (recompute the norm, activation-function and multiply operators:
 *     ~40% fewer activation bytes for a few percent of time, Yuan et al. 2024). It is
 *     not marked adjusted when that suffices.
 *   - otherwise (still over, or cmb=false) the rank is marked adjusted
 *     (Pipeline.adjusted[s] = 1) and gets full recomputation, the policy the paper's
 *     Strawman uses (§3.2, §9.1); swap_aware_recompute may later trade it for a cheaper
 *     policy plus swapping.
 * The `cmb` step needs a model to cost it; without one (explicit costs) it would be
 * costed as full recomputation, so it is skipped. Ranks within the budget are left
 * alone; a pipeline without a budget is unchanged.
 *
 * Idempotent: a rank is only ever moved up the ladder none -> cmb -> adjusted + full, and
 * an adjusted rank is never revisited. The op lists stay legal: R(m) is inserted just
 * before B(m) by the `recompute` pass. */
#include <stdlib.h>

#include "passes.h"
#include "sched_util.h"
#include "util.h"

int pass_identify_adjusted(Diag *d, Pipeline *p, const PassCall *call)
{
    int err = 0;
    bool cmb = true;
    pass_arg_bool(d, call, "cmb", &cmb, &err);
    if (err)
        return err;
    uint8_t *over = xmalloc((size_t)p->P + 1);
    if (!sched_fits(p, over)) {
        for (int32_t s = 0; s < p->P && !err; s++) {
            if (!over[s] || p->adjusted[s])
                continue;
            if (cmb && p->model && p->stage_policy[s] == POLICY_NONE) {
                err = sched_recompute(d, p, s, s + 1, POLICY_CMB, 0, call->loc);
                if (err)
                    break;
                uint8_t *o2 = xmalloc((size_t)p->P + 1);
                sched_fits(p, o2);
                bool still = o2[s];
                free(o2);
                if (!still)
                    continue;
            }
            p->adjusted[s] = 1;
            err = sched_recompute(d, p, s, s + 1, POLICY_FULL, 0, call->loc);
        }
    }
    free(over);
    return err;
}
