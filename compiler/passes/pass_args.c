/* pass_args.c - reading a pass call's arguments; see pass_args.h. */
#include "pass_args.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"
#include "util.h"

static const Field *arg(const PassCall *c, const char *key)
{
    return field_find(c->args, c->nargs, key);
}

/* Reports argument f of c as not `what` ("a number"), counts it in *err; false. */
static bool bad_arg(Diag *d, const PassCall *c, const Field *f, const char *what, int *err)
{
    diag_error(d, f->loc, DIAG_VALUE, "argument '%s' of pass '%s' must be %s", f->key, c->name,
               what);
    (*err)++;
    return false;
}

/* Argument key of c when present and of kind `kind`; NULL when absent, or after
 * reporting that it is not `what`. */
static const Field *arg_of_kind(Diag *d, const PassCall *c, const char *key, ValKind kind,
                                const char *what, int *err)
{
    const Field *f = arg(c, key);
    if (f && f->val.kind != kind) {
        bad_arg(d, c, f, what, err);
        return NULL;
    }
    return f;
}

Loc pass_arg_loc(const PassCall *c, const char *key)
{
    const Field *f = arg(c, key);
    return f ? f->loc : c->loc;
}

bool pass_arg_num(Diag *d, const PassCall *c, const char *key, double *out, int *err)
{
    const Field *f = arg_of_kind(d, c, key, VAL_NUM, "a number", err);
    if (f)
        *out = f->val.num;
    return f != NULL;
}

bool pass_arg_int(Diag *d, const PassCall *c, const char *key, int64_t *out, int *err)
{
    double v;
    if (!pass_arg_num(d, c, key, &v, err))
        return false;
    if (v != floor(v) || fabs(v) > 9e15)
        return bad_arg(d, c, arg(c, key), "an integer", err);
    *out = (int64_t)v;
    return true;
}

bool pass_arg_bool(Diag *d, const PassCall *c, const char *key, bool *out, int *err)
{
    const Field *f = arg(c, key);
    if (!f)
        return false;
    if (f->val.kind == VAL_IDENT && (!strcmp(f->val.str, "true") || !strcmp(f->val.str, "false"))) {
        *out = f->val.str[0] == 't';
        return true;
    }
    if (f->val.kind == VAL_NUM && (f->val.num == 0 || f->val.num == 1)) {
        *out = f->val.num == 1;
        return true;
    }
    return bad_arg(d, c, f, "true or false", err);
}

bool pass_arg_range(Diag *d, const PassCall *c, const char *key, int64_t *lo, int64_t *hi, int *err)
{
    const Field *f = arg(c, key);
    if (!f)
        return false;
    if (f->val.kind == VAL_RANGE) {
        *lo = f->val.lo;
        *hi = f->val.hi;
        return true;
    }
    if (f->val.kind == VAL_NUM && f->val.num == floor(f->val.num) && f->val.num >= 0 && f->val.num < 1e9) {
        *lo = (int64_t)f->val.num;
        *hi = *lo + 1;
        return true;
    }
    if (f->val.kind == VAL_IDENT && !strcmp(f->val.str, "all")) {
        *lo = 0;
        *hi = INT32_MAX;
        return true;
    }
    return bad_arg(d, c, f, "a stage range such as 0..=2", err);
}

bool pass_arg_ident(Diag *d, const PassCall *c, const char *key, const char **out, int *err)
{
    const Field *f = arg_of_kind(d, c, key, VAL_IDENT, "a name", err);
    if (f)
        *out = f->val.str;
    return f != NULL;
}

bool pass_chunks_in_range(Diag *d, const PassCall *c, int32_t V, int64_t *lo, int64_t *hi)
{
    if (*hi == INT32_MAX)
        *hi = V;
    if (*lo < 0 || *hi > V || *lo >= *hi) {
        diag_error(d, pass_arg_loc(c, "chunks"), DIAG_VALUE,
                   "chunks %lld..%lld is not a non-empty range of the %d chunks", (long long)*lo,
                   (long long)*hi, V);
        return false;
    }
    return true;
}

int pass_rewritten(Diag *d, Pipeline *p, const PassCall *c, const char *name)
{
    if (pipeline_nops(p) > IR_MAX_OPS) {
        diag_error(d, c->loc, DIAG_LIMIT, "%s makes the pipeline exceed %u ops", name,
                   IR_MAX_OPS);
        return 1;
    }
    rederive_costs(p);
    return 0;
}
