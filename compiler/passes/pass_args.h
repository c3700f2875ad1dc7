/* pass_args.h - reading a pass call's arguments (`apply NAME(key=value, ...)`,
 * docs/passes.md), and the op-count check a rewriting pass ends with, for the passes. Below the registry (passes.c): a pass reads its
 * arguments here and never calls the registry. */
#ifndef PIPEC_PASS_ARGS_H
#define PIPEC_PASS_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "diag.h"
#include "ir.h"

/* Argument accessors for pass implementations. Each returns true when the argument is
 * present and well-formed, false when absent (out keeps the default); a present but
 * ill-typed argument reports `value` at its location and returns false, incrementing
 * *err. */
bool pass_arg_num(Diag *d, const PassCall *c, const char *key, double *out, int *err);
bool pass_arg_int(Diag *d, const PassCall *c, const char *key, int64_t *out, int *err);
bool pass_arg_bool(Diag *d, const PassCall *c, const char *key, bool *out, int *err);
/* A stage range: `stages=0..=2`, `stages=3` (one stage) or `stages=all`; half-open. */
bool pass_arg_range(Diag *d, const PassCall *c, const char *key, int64_t *lo, int64_t *hi,
                    int *err);
/* An identifier argument, e.g. `policy=full`. */
bool pass_arg_ident(Diag *d, const PassCall *c, const char *key, const char **out, int *err);
/* Where a bad value of argument key is reported: at the argument, or at the call when
 * the call leaves it to its default. */
Loc pass_arg_loc(const PassCall *c, const char *key);

/* Resolves a `chunks` range read by pass_arg_range against V chunks per stage: `all`
 * becomes 0..V. An empty range or one outside 0..V reports `value` at the argument and
 * returns false. */
bool pass_chunks_in_range(Diag *d, const PassCall *c, int32_t V, int64_t *lo, int64_t *hi);

/* Ends a pass `name` that rewrote op lists: when the pipeline now has more than
 * IR_MAX_OPS ops, reports `limit` at the call and returns 1; else re-derives the costs
 * (rederive_costs) and returns 0. */
int pass_rewritten(Diag *d, Pipeline *p, const PassCall *c, const char *name);

#endif
