/* arena_plan.h - static memory planning: every activation region's lifetime is known
 * from the schedule, so the regions of each rank are packed into one arena at compile
 * time (docs/runtime.md "Static memory planning").
 *
 * Model. Each (v,m) of a rank owns one region whose layout is three nested prefixes
 * (runtime/mlp.h "act region"): [0, ckpt) the checkpoint, [0, wact) what a split B
 * leaves for W, [0, act) everything. Following DESIGN.md "Memory":
 *   - F allocates [0, act), or only [0, ckpt) when an R(v,m) exists; R allocates
 *     [ckpt, act);
 *   - B frees everything, except [0, wact) when a W(v,m) exists, which W frees;
 *   - SO(v,m) moves what the region holds at that point (always a prefix) to the host
 *     and frees it; SI(v,m) allocates it again, possibly at another offset, and brings
 *     it back. The region then lives on at the new offset (a second "incarnation").
 *     With swap_fraction < 1 the planner keeps the region in place instead (no bytes
 *     freed): the arena is planned for the conservative case.
 * Time is the rank's list position: op i allocates at 2i (its start) and frees at 2i+1
 * (its end). Both the runtime and the simulator make an allocating op (F, R, SI) wait
 * for every SO listed before it, so a region freed by an SO at list position i is
 * really free for any allocation listed after i.
 *
 * Packing: incarnations in order of their first allocation, each placed at the lowest
 * 64-byte aligned offset where none of its pieces overlaps (in address and in time) a
 * piece already placed (first fit over the candidate offsets "0, or right after a live
 * piece", at most ARENA_MAX_CANDIDATES tried before the top of the live pieces). The
 * arena of a rank is the highest end placed; fragmentation = arena / peak live bytes
 * (1.0 = perfect packing). */
#ifndef PIPEC_ARENA_PLAN_H
#define PIPEC_ARENA_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "diag.h"
#include "ir.h"

#define ARENA_ALIGN 64
#define ARENA_MAX_CANDIDATES 64

/* Region sizes of one virtual stage, bytes (rounded up to ARENA_ALIGN by the planner;
 * ckpt and wact are clamped to act). */
typedef struct ArenaSizes {
    int64_t act, ckpt, wact;
} ArenaSizes;

/* The plan of one rank. */
typedef struct ArenaRank {
    int64_t size;        /* arena bytes */
    int64_t peak_live;   /* peak over the list of the bytes of live regions */
    uint32_t peak_op;    /* list index of the op at which the peak is first reached */
    uint32_t nops;
    int64_t *off;        /* [nops] offset of the region op i works on; -1 for none
                          * (SI: where the bytes come back to) */
    int64_t *held;       /* [nops] SO/SI: bytes of the region prefix moved; F: bytes
                          * allocated; R: bytes allocated; else 0 */
} ArenaRank;

typedef struct ArenaPlan {
    int32_t P;
    ArenaRank *rank;     /* [P] */
} ArenaPlan;

/* Region sizes from the cost model: ir_cost act/ckpt/wact of every virtual stage
 * ([P*V], owned by the caller). wact is taken as 0 for stages without W ops. Sizes
 * above 2^62 bytes are clamped. */
ArenaSizes *arena_sizes_from_costs(const Pipeline *p);

/* Plans every rank for region sizes sz[P*V] (NULL: arena_sizes_from_costs). full_swap
 * makes every SO move and free the whole held prefix (the runtime's behaviour);
 * otherwise swap_fraction < 1 keeps the region in place. Works on any IR: ops whose
 * (v,m) lacks an F or a B, or sits out of order, are planned conservatively or left
 * without a region (off = -1), never a crash. Linear in ops apart from the bounded
 * candidate search. */
ArenaPlan *arena_plan(const Pipeline *p, const ArenaSizes *sz, int full_swap);
void arena_plan_free(ArenaPlan *a);

/* Prints the arena table of `pipec check --mem`: per rank the arena size, the peak of
 * live activation bytes, fragmentation, weights and arena + weights against the budget,
 * for the cost model's sizes. */
void arena_plan_report(FILE *out, const Pipeline *p);

/* Reports a `memory` error for every rank whose weights + arena (cost-model sizes)
 * exceed the pipeline's budget (none without a budget). Returns the error count. */
int arena_check(Diag *d, const Pipeline *p);

#endif
