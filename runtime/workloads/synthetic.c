/* synthetic.c - the `synthetic` workload: every compute op busy-waits its cost-model
 * time (scaled by --time-scale) and touches the arena bytes it allocates, so that a
 * paper-scale configuration can be replayed on a CPU and its measured timeline laid
 * over the simulated one. The arena is planned for the cost model's bytes divided by
 * PrProgram.synthetic_scale (so that it fits in host memory); touching is capped at
 * SYNTH_TOUCH_CAP bytes per op, one write per 64-byte line, piece by piece
 * (runtime/region.h). The backends replay the rest of the cost model (PrWorkload.replay):
 * SO/SI copy the scaled bytes and take bytes / host_bw of the cost model, OG/LW their
 * time, a received message its p2p time. */
#include <string.h>

#include "workload.h"

#define SYNTH_TOUCH_CAP (4 << 20)

/* One compute op: touch its region's held bytes, then busy-wait its time. */
static int synthetic_op(PrRank *r, uint32_t i, const PrOp *o)
{
    (void)i;
    PrHeldPiece pc[PR_PIECES];
    int np = o->kind == PR_F || o->kind == PR_R ? pr_held_pieces(r->run, o, PR_SYNTHETIC, pc) : 0;
    int64_t left = SYNTH_TOUCH_CAP;
    for (int j = 0; j < np && left > 0; j++) { /* wherever the plan put each piece */
        int64_t n = pc[j].n < left ? pc[j].n : left;
        unsigned char *p = r->arena + pc[j].at;
        for (int64_t b = 0; b < n; b += 64)
            p[b] = (unsigned char)((pc[j].lo + b) >> 6);
        left -= n;
    }
    pr_spin_ms(o->cost_ms * r->run->opt.time_scale);
    return 0;
}

const PrWorkload pr_workload_synthetic = {
    .name = "synthetic", .plan = PR_SYNTHETIC, .replay = true, .op = synthetic_op,
};
