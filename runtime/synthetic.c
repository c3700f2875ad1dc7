/* synthetic.c - the `synthetic` workload: every compute op busy-waits its cost-model
 * time (scaled by --time-scale) and touches the arena bytes it allocates, so that a
 * paper-scale configuration can be replayed on a CPU and its measured timeline laid
 * over the simulated one. The arena is planned for the cost model's bytes divided by
 * PrProgram.synthetic_scale (so that it fits in host memory); touching is capped at
 * SYNTH_TOUCH_CAP bytes per op, one write per 64-byte line, piece by piece
 * (runtime/region.h). SO/SI (on the copy
 * threads, piperun.c) copy the scaled bytes and take bytes / host_bw of the cost model. */
#include <string.h>

#include "piperun_internal.h"

#define SYNTH_TOUCH_CAP (4 << 20)

int pr_synthetic_op(PrRank *r, const PrOp *o)
{
    int64_t held = o->held[PR_SYNTHETIC];
    if ((o->kind == PR_F || o->kind == PR_R) && held > 0) {
        /* the pieces of the held prefix, wherever the plan put them, up to the cap */
        const int64_t *from = r->run->prog->vstages[o->vstage].from[PR_SYNTHETIC];
        int64_t left = SYNTH_TOUCH_CAP;
        for (int k = 0; k < PR_PIECES && left > 0; k++) {
            int64_t lo, n = pr_region_piece_held(from, held, k, &lo);
            if (n == 0 || o->at[PR_SYNTHETIC][k] < 0)
                continue;
            if (n > left)
                n = left;
            unsigned char *p = r->arena + o->at[PR_SYNTHETIC][k];
            for (int64_t j = 0; j < n; j += 64)
                p[j] = (unsigned char)((lo + j) >> 6);
            left -= n;
        }
    }
    pr_spin_ms(o->cost_ms * r->run->opt.time_scale);
    return 0;
}
