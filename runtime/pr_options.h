/* pr_options.h - the value rules of a generated program's numeric options (--iters,
 * --time-scale, --timeout, --lr, --seed), read by the program (run_main.c) and by
 * `pipec run`, which checks them before it builds anything (compiler/commands/cmd_emit.c): one
 * rule, one place. Header-only, so the compiler links no runtime code. */
#ifndef PIPERUN_PR_OPTIONS_H
#define PIPERUN_PR_OPTIONS_H

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "piperun.h"

/* Parses the argument of program option opt (PR_OPT_*). Returns NULL and sets *v when it
 * is a finite number in the option's range, else what the option takes, for the message
 * ("an integer from 1 to 1000000"). Options without a numeric value return NULL and leave
 * *v alone. */
static inline const char *pr_option_number(int opt, const char *arg, double *v)
{
    double lo, hi;
    int integer = 0, open_lo = 0;
    const char *want;
    switch (opt) {
    case PR_OPT_ITERS: lo = 1; hi = 1e6; integer = 1; want = "an integer from 1 to 1000000"; break;
    case PR_OPT_SCALE: lo = 0; hi = 1e6; want = "a number from 0 to 1e6"; break;
    case PR_OPT_TIMEOUT: lo = 0; hi = 1e6; open_lo = 1; want = "seconds, more than 0 and at most 1e6"; break;
    case PR_OPT_LR: lo = 0; hi = 1e3; want = "a number from 0 to 1000"; break;
    case PR_OPT_SEED: lo = 0; hi = 9007199254740992.0; integer = 1; want = "an integer from 0 to 2^53"; break;
    default: return NULL;
    }
    char *end;
    errno = 0;
    double x = strtod(arg, &end);
    if (!*arg || *end || errno || !isfinite(x) || x < lo || x > hi || (open_lo && !(x > lo)) ||
        (integer && x != floor(x)))
        return want;
    *v = x;
    return NULL;
}

#endif
