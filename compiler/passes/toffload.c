/* toffload.c - placeholder, filled in below. */
#include "passes.h"

int pass_toffload(Diag *d, Pipeline *p, const PassCall *call)
{
    (void)p;
    diag_error(d, call->loc, DIAG_NAME, "pass 'toffload' is not implemented yet");
    return 1;
}
