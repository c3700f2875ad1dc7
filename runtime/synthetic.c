/* synthetic.c - the `synthetic` workload: every compute op busy-waits its cost-model
 * time (scaled by --time-scale) and touches the arena bytes it allocates, so that a
 * paper-scale configuration can be replayed on a CPU and its measured timeline laid
 * over the simulated one. The arena is planned for the cost model's bytes divided by
 * PrProgram.synthetic_scale (so that it fits in host memory); touching is capped at
 * SYNTH_TOUCH_CAP bytes per op, one write per 64-byte line. SO/SI (on the copy
 * threads, piperun.c) copy the scaled bytes and take bytes / host_bw of the cost model. */
#include <string.h>

#include "piperun_internal.h"

#define SYNTH_TOUCH_CAP (4 << 20)

int pr_synthetic_op(PrRank *r, const PrOp *o)
{
    int64_t n = o->held[PR_SYNTHETIC];
    if ((o->kind == PR_F || o->kind == PR_R) && n > 0 &&
        (o->off[PR_SYNTHETIC] >= 0 || o->rest[PR_SYNTHETIC] >= 0)) {
        if (n > SYNTH_TOUCH_CAP)
            n = SYNTH_TOUCH_CAP;
        /* R allocates the part after the checkpoint, in a place of its own (rest) */
        int64_t at = o->kind == PR_R && o->rest[PR_SYNTHETIC] >= 0 ? o->rest[PR_SYNTHETIC]
                                                                  : o->off[PR_SYNTHETIC];
        unsigned char *p = r->arena + at;
        for (int64_t i = 0; i < n; i += 64)
            p[i] = (unsigned char)(i >> 6);
    }
    pr_spin_ms(o->cost_ms * r->run->opt.time_scale);
    return 0;
}
