/* passes.h - the registry of schedule transformations (docs/passes.md).
 *
 * A pass takes the IR and leaves it legal: every op present once, every dependency
 * satisfiable, no deadlock (the checker runs after every pass in tests). A pass returns
 * the number of errors it reported through diag (0 on success); it reports `value` for
 * bad arguments and `name` for unknown argument names. Passes are run in the order a
 * pipeline's `apply` lines or `pipec opt --pass` give them. */
#ifndef PIPEC_PASSES_H
#define PIPEC_PASSES_H

#include <stdbool.h>

#include "diag.h"
#include "ir.h"
#include "pass_args.h"

typedef int (*PassFn)(Diag *d, Pipeline *p, const PassCall *call);

typedef struct PassInfo {
    const char *name;     /* fixed by docs/spec.md "Stdlib names" */
    PassFn fn;
    const char *args;     /* the accepted arguments, for help and for name checks: "stages,policy" */
    const char *summary;  /* one line, with the paper section */
} PassInfo;

/* The pass named name, or NULL. */
const PassInfo *pass_lookup(const char *name);

/* All registered passes, in docs order; *n gets the count. */
const PassInfo *pass_list(int *n);

/* Runs one call: `name` error if the pass or one of its argument names is unknown,
 * else the pass's own result. */
int run_pass(Diag *d, Pipeline *p, const PassCall *call);

/* Backward-bound recomputation (docs/semantics.md "Dependencies"): an R(v,m) that
 * `recompute` places (the directive, the pass, and the baselines and passes built on
 * it) also waits for the downstream backward B(v+1,m), as checkpointing runtimes run it.
 * The binding is the explicit `dep B(v+1,m) -> R(v,m)` line in p->deps, so `print` shows
 * it; on the last virtual stage (v = PV-1) there is none. Passes that decouple a
 * recompute from the gradient (Lynx's RO and stall hoisting) remove its line. */

/* The R a recomputation pass lists for backward b (`recompute`, trecomp_blockwise): b's
 * stage, chunk and micro-batch, aux 0, located at loc (the directive or pass call), or
 * at b when loc.file is LOC_NONE_FILE. */
Op recompute_op_of(const Op *b, Loc loc);

/* True when dep e is the binding of a recompute: B(v+1,m) on the owner of v+1 ->
 * R(v,m) or RO(v,m). */
bool recompute_dep_is_binding(const Pipeline *p, const Dep *e);

/* True when recompute r (an R or RO listed on rank s) has its binding line. */
bool recompute_is_bound(const Pipeline *p, int32_t s, const Op *r);

/* Adds the binding line of recompute r on rank s (nothing for v = PV-1 or when the
 * line exists). loc: where the line is reported (the directive or pass call). */
void recompute_bind(Pipeline *p, int32_t s, const Op *r, Loc loc);

/* Removes the binding line of recompute r on rank s, if any. */
void recompute_unbind(Pipeline *p, int32_t s, const Op *r);

/* Removes every binding line of a recompute on rank s. */
void recompute_unbind_rank(Pipeline *p, int32_t s);

/* The most policies recompute_menu gives. */
#define RECOMPUTE_MENU_MAX (KEEP_N + 5)

/* The recomputation policies a planner chooses among per rank (lynx_overlap: Lynx §4.2;
 * swap_aware_recompute: Obscura §6.2), roughly least recomputation first, so that a
 * planner breaking ties to the earlier entry keeps more: with a model none, cmb,
 * selective, the keep-sets of cm_keep_ladder from the largest down (one tensor less
 * each; the whole set is `none`), mlp, full; without one only none and full (the others
 * would be costed as full). pol[] and arg[] (RECOMPUTE_MENU_MAX each) get the policy
 * and its argument (keep's mask, else 0). Returns how many. */
int recompute_menu(const Pipeline *p, RecomputePolicy *pol, uint32_t *arg);

#endif
