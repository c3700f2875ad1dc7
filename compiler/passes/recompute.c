/* recompute.c - the `recompute(stages=.., policy=..)` pass (Obscura §3.1, Observation 1). */
#include "costmodel.h"
#include "passes.h"

int pass_recompute(Diag *d, Pipeline *p, const PassCall *call)
{
    (void)p;
    diag_error(d, call->loc, DIAG_NAME, "pass 'recompute' is not implemented yet");
    return 1;
}
