/* passes.c - the pass registry; see passes.h. Each pass lives in compiler/passes/NAME.c
 * and is listed in passes.def (this folder). The only file that knows every pass: the
 * passes call helpers below it (pass_args.c, sched_util.c), never this file. */
#include "passes.h"

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
