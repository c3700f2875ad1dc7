/* obscura.c - the `obscura(cmb=true, verbose=false)` pass: the Obscura planner (§4) in the
 * paper's order, each step one of the passes of this directory:
 *
 *   1. identify_adjusted(cmb)   §3.2 Step 1 with §8's CMB-Identifying
 *   2. forward_migration         §3.2 Step 2 (the Strawman)
 *   3. dependency_relaxation     §5.1-5.2
 *   4. migration_refinement      §5.3
 *   5. swap_aware_recompute      §6 (activation swapping + the policy, Eq. 1-4)
 *   6. partition_adjust          §7 (Algorithm 1)
 *
 * Steps 2-6 act on the adjusted ranks; with none (every rank fits, possibly after cmb)
 * the pass stops after step 1. Requires a 1F1B-family schedule (sched_util.h), as the
 * paper starts from 1F1B. Idempotent in effect: a second run finds no rank over the
 * budget and every later step at a fixed point. */
#include <string.h>

#include "passes.h"
#include "sched_util.h"

int pass_identify_adjusted(Diag *d, Pipeline *p, const PassCall *call);
int pass_forward_migration(Diag *d, Pipeline *p, const PassCall *call);
int pass_dependency_relaxation(Diag *d, Pipeline *p, const PassCall *call);
int pass_migration_refinement(Diag *d, Pipeline *p, const PassCall *call);
int pass_swap_aware_recompute(Diag *d, Pipeline *p, const PassCall *call);
int pass_partition_adjust(Diag *d, Pipeline *p, const PassCall *call);

int pass_obscura(Diag *d, Pipeline *p, const PassCall *call)
{
    int err = 0;
    bool cmb = true, verbose = false;
    pass_arg_bool(d, call, "cmb", &cmb, &err);
    pass_arg_bool(d, call, "verbose", &verbose, &err);
    if (err)
        return err;
    Field cmbf = {0};
    cmbf.key = (char *)"cmb";
    cmbf.val.kind = VAL_NUM;
    cmbf.val.num = cmb ? 1 : 0;
    cmbf.loc = cmbf.val.loc = call->loc;
    Field verbf = cmbf;
    verbf.key = (char *)"verbose";
    verbf.val.num = verbose ? 1 : 0;
    PassCall c_id = {call->name, &cmbf, 1, call->loc};
    PassCall c_plain = {call->name, NULL, 0, call->loc};
    PassCall c_verb = {call->name, &verbf, 1, call->loc};
    if ((err = pass_identify_adjusted(d, p, &c_id)))
        return err;
    if (sched_last_adjusted(p) < 0)
        return 0;
    if ((err = pass_forward_migration(d, p, &c_plain)) || (err = pass_dependency_relaxation(d, p, &c_plain)) ||
        (err = pass_migration_refinement(d, p, &c_plain)) || (err = pass_swap_aware_recompute(d, p, &c_verb)))
        return err;
    return pass_partition_adjust(d, p, &c_verb);
}
