/* partition_balance.c - placeholder, filled in below. */
#include "passes.h"

int pass_partition_balance(Diag *d, Pipeline *p, const PassCall *call)
{
    (void)p;
    diag_error(d, call->loc, DIAG_NAME, "pass 'partition_balance' is not implemented yet");
    return 1;
}
