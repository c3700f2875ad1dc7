/* region.h - the pieces of an activation region: one rule for the arena planner
 * (compiler/arena_plan.c), the code generator that emits the plan (compiler/emit_c.c)
 * and every runtime that addresses a planned region (the CPU and CUDA backends, the mlp,
 * gpt/llama and synthetic workloads).
 *
 * A (v,m) region is laid out as nested prefixes (docs/runtime.md "Static memory
 * planning"): what the layers keep of the checkpoint [0, lay), the checkpoint [0, ckpt),
 * what a split B leaves for W [0, wact), everything [0, act). The arena plan may put each piece between two of
 * these boundaries at an offset of its own, so that a region fills holes that are not
 * contiguous (the lifetimes of some schedules admit no packing at the memory walk's
 * peak with whole regions: docs/runtime.md "What fragmentation remains"). Piece k is
 * the region's bytes [from[k], from[k+1]); a piece may be empty. Every tensor of a
 * workload's layout lies wholly inside one piece, so a kernel finds a tensor through
 * pr_region_piece and the piece's place.
 *
 * Header-only (static inline): pure arithmetic, no allocation, no I/O; valid C11 and
 * C++ (nvcc).
 */
#ifndef PIPEC_REGION_H
#define PIPEC_REGION_H

#include <stdint.h>

/* Pieces of a region: [0, lay) what the layers keep of the checkpoint (their inputs),
 * [lay, ckpt) the rest of the checkpoint (what the embedding and the head keep: they
 * are never recomputed), [ckpt, wact) the rest of what W reads, [wact, act) B's
 * temporaries (in sorted order when the sizes are not nested). In the mlp and gpt/llama
 * workloads' layouts the checkpoint is the slice input alone: lay = ckpt. */
#define PR_PIECES 4

/* The piece boundaries of a region of act units (bytes, or floats) whose layers'
 * checkpoint, checkpoint and W part are lay, ckpt and wact units: from[0] = 0, from[PR_PIECES] =
 * act, and from[1..3] the three sizes clamped to [0, act], sorted. Negative sizes count
 * as 0. */
static inline void pr_region_cuts(int64_t lay, int64_t ckpt, int64_t wact, int64_t act,
                                  int64_t from[PR_PIECES + 1])
{
    int64_t c[3] = {lay, ckpt, wact};
    if (act < 0)
        act = 0;
    for (int k = 0; k < 3; k++)
        c[k] = c[k] < 0 ? 0 : c[k] > act ? act : c[k];
    for (int k = 1; k < 3; k++)
        for (int j = k; j > 0 && c[j - 1] > c[j]; j--) {
            int64_t t = c[j];
            c[j] = c[j - 1];
            c[j - 1] = t;
        }
    from[0] = 0;
    for (int k = 0; k < 3; k++)
        from[k + 1] = c[k];
    from[PR_PIECES] = act;
}

/* The piece that holds unit x of a region cut at from[] (0 <= x < from[PR_PIECES]): the
 * one non-empty piece with from[k] <= x < from[k+1]. */
static inline int pr_region_piece(const int64_t from[PR_PIECES + 1], int64_t x)
{
    int k = PR_PIECES - 1;
    while (k > 0 && from[k] > x)
        k--;
    return k;
}

#endif
