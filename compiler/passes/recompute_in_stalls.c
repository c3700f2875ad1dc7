/* recompute_in_stalls.c - placeholder, filled in below. */
#include "passes.h"

int pass_recompute_in_stalls(Diag *d, Pipeline *p, const PassCall *call)
{
    (void)p;
    diag_error(d, call->loc, DIAG_NAME, "pass 'recompute_in_stalls' is not implemented yet");
    return 1;
}
