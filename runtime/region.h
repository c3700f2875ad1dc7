/* region.h - the pieces of an activation region: one rule for the arena planner
 * (compiler/plans/arena_plan.c), the code generator that emits the plan
 * (compiler/generation/emit_c.c) and every runtime that addresses a planned region (the
 * CPU and CUDA backends, the mlp, gpt/llama and synthetic workloads).
 *
 * A (v,m) region is laid out as nested prefixes (docs/runtime.md "Static memory
 * planning"): what the layers keep of the checkpoint [0, lay), the checkpoint [0, ckpt),
 * what a split B leaves for W [0, wact), everything [0, act). The arena plan may put
 * each piece between two of these boundaries at an offset of its own, so that a region
 * fills holes that are not contiguous (the lifetimes of some schedules admit no packing
 * at the memory walk's peak with whole regions: docs/runtime.md "What fragmentation
 * remains"). Piece k is the region's bytes [from[k], from[k+1]); a piece may be empty.
 * Every tensor of a workload's layout lies wholly inside one piece, so a kernel finds a
 * tensor through pr_region_piece and the piece's place.
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
 * checkpoint, checkpoint and W part are lay, ckpt and wact units: from[0] = 0,
 * from[PR_PIECES] = act, and from[1..3] the three sizes clamped to [0, act], sorted.
 * Negative sizes count as 0. */
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

/* A placed region: the one descriptor through which every kernel (CPU and GPU, mlp and
 * gpt/llama) and every copy (SO/SI) addresses a (v,m) region. Piece k holds the
 * region's floats [from[k], from[k+1]) at base[k], a host or device address (only
 * arithmetic is done on it); base[k] is NULL where the op's region has none of piece k
 * (not placed by the plan, or empty). Every tensor of the mlp and gpt/llama layouts
 * lies wholly inside one piece (tests/unit/test_runtime.c checks both layouts), so
 * pr_region_at of a tensor's first float gives the whole tensor. */
typedef struct PrRegion {
    float *base[PR_PIECES];
    int64_t from[PR_PIECES + 1];   /* piece boundaries, floats: pr_region_cuts */
} PrRegion;

/* The region contiguous at act (float-aligned), cut at from[] floats: piece k at
 * act + from[k] floats. */
static inline PrRegion pr_region_whole(void *act, const int64_t from[PR_PIECES + 1])
{
    PrRegion g;
    for (int k = 0; k <= PR_PIECES; k++)
        g.from[k] = from[k];
    for (int k = 0; k < PR_PIECES; k++)
        g.base[k] = act && from[k] < from[k + 1] ? (float *)act + from[k] : (float *)0;
    return g;
}

/* The region contiguous at base (NULL: only its cuts) of a model layout whose checkpoint
 * is exactly its slice input, as the mlp and gpt/llama layouts are: prefix ends ckpt <=
 * wact <= act floats, so piece 0 is [0, ckpt), piece 1 is empty, piece 2 [ckpt, wact)
 * and piece 3 [wact, act). */
static inline PrRegion pr_layout_region(void *base, int64_t ckpt, int64_t wact, int64_t act)
{
    int64_t from[PR_PIECES + 1];
    pr_region_cuts(ckpt, ckpt, wact, act, from);
    return pr_region_whole(base, from);
}

/* The piece boundaries of g in bytes (what the arena plan and PrVstage.from give). */
static inline void pr_region_cuts_bytes(const PrRegion *g, int64_t from[PR_PIECES + 1])
{
    for (int k = 0; k <= PR_PIECES; k++)
        from[k] = g->from[k] * (int64_t)sizeof(float);
}

/* The region an op of the static plan works on: piece k at arena + at[k] bytes (at[k]
 * < 0: not placed, base NULL), cut at from_bytes[] bytes (PrVstage.from, multiples of
 * 64). arena is the rank's arena, host or device. */
static inline PrRegion pr_region_placed(void *arena, const int64_t at[PR_PIECES],
                                        const int64_t from_bytes[PR_PIECES + 1])
{
    PrRegion g;
    for (int k = 0; k <= PR_PIECES; k++)
        g.from[k] = from_bytes[k] / (int64_t)sizeof(float);
    for (int k = 0; k < PR_PIECES; k++)
        g.base[k] = at[k] >= 0 && g.from[k] < g.from[k + 1]
                        ? (float *)(void *)((unsigned char *)arena + at[k])
                        : (float *)0;
    return g;
}

/* The float at region offset x (floats, 0 <= x <= from[PR_PIECES]): in the piece
 * pr_region_piece gives; NULL when that piece is not placed (an op that reads what
 * its region does not hold fails loudly rather than reading another region). */
static inline float *pr_region_at(const PrRegion *g, int64_t x)
{
    int k = pr_region_piece(g->from, x);
    return g->base[k] ? g->base[k] + (x - g->from[k]) : (float *)0;
}

/* The part of piece k inside the prefix [0, held) of a region cut at from[] (any
 * unit): its length, with its start in *lo; 0 when piece k holds none of the prefix.
 * SO gathers a held prefix piece by piece into one host buffer at region coordinates
 * and SI scatters it back through this (the CPU and the CUDA backends alike). */
static inline int64_t pr_region_piece_held(const int64_t from[PR_PIECES + 1], int64_t held,
                                           int k, int64_t *lo)
{
    int64_t hi = from[k + 1] < held ? from[k + 1] : held;
    *lo = from[k];
    return hi > from[k] ? hi - from[k] : 0;
}

#endif
