/* passes.c - the pass registry and argument accessors; see passes.h. Each pass lives in
 * compiler/passes/NAME.c and is listed in passes.def (this folder). */
#include "passes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define PASS(name, args, summary) int pass_##name(Diag *d, Pipeline *p, const PassCall *call);
#include "passes.def"
#undef PASS

static const PassInfo passes[] = {
#define PASS(name, args, summary) {#name, pass_##name, args, summary},
#include "passes.def"
#undef PASS
};

const PassInfo *pass_lookup(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(passes); i++)
        if (strcmp(passes[i].name, name) == 0)
            return &passes[i];
    return NULL;
}

const PassInfo *pass_list(int *n)
{
    *n = (int)ARRAY_LEN(passes);
    return passes;
}

/* True when key is one of the comma-separated names in list. */
static bool arg_listed(const char *list, const char *key)
{
    size_t k = strlen(key);
    for (const char *s = list; *s;) {
        const char *e = strchr(s, ',');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == k && strncmp(s, key, k) == 0)
            return true;
        s += n + (e ? 1 : 0);
    }
    return false;
}

int run_pass(Diag *d, Pipeline *p, const PassCall *call)
{
    const PassInfo *pi = pass_lookup(call->name);
    if (!pi) {
        const char *names[ARRAY_LEN(passes)];
        StrBuf all = {0};
        for (size_t i = 0; i < ARRAY_LEN(passes); i++) {
            names[i] = passes[i].name;
            sb_printf(&all, "%s%s", i ? " " : "", passes[i].name);
        }
        char hint[96];
        diag_error(d, call->loc, DIAG_NAME, "unknown pass '%s'%s", call->name,
                   diag_suggest(hint, sizeof hint, call->name, names, ARRAY_LEN(passes)));
        diag_note(d, call->loc, "passes: %s (docs/passes.md, `pipec opt --list`)", all.s);
        sb_free(&all);
        return 1;
    }
    int err = 0;
    for (uint32_t i = 0; i < call->nargs; i++)
        if (!arg_listed(pi->args, call->args[i].key)) {
            char list[256], hint[96];
            const char *names[16];
            size_t n = 0;
            snprintf(list, sizeof list, "%s", pi->args);
            for (char *t = strtok(list, ","); t && n < 16; t = strtok(NULL, ","))
                names[n++] = t;
            diag_suggest(hint, sizeof hint, call->args[i].key, names, n);
            diag_error(d, call->args[i].loc, DIAG_NAME,
                       "pass '%s' takes no argument '%s'%s (it takes: %s)", pi->name,
                       call->args[i].key, hint, *pi->args ? pi->args : "none");
            err++;
        }
    if (err)
        return err;
    if (p->nactions) {
        /* An action's place is an op index that a pass may move (docs/language.md
         * "Runtime actions"); export-csv --comms places SEND/RECV again. */
        diag_warning(d, call->loc, WARN_PASS,
                     "pass '%s' may reorder ops, so the %u runtime action%s (SEND_F, UNSHARD, "
                     "...) of the schedule %s dropped", pi->name, p->nactions,
                     p->nactions == 1 ? "" : "s", p->nactions == 1 ? "is" : "are");
        free(p->actions);
        p->actions = NULL;
        p->nactions = p->actioncap = 0;
    }
    return pi->fn(d, p, call);
}

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
