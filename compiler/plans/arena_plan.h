/* arena_plan.h - static memory planning: every activation region's lifetime is known
 * from the schedule, so the regions of each rank are packed into one arena at compile
 * time (docs/runtime.md "Static memory planning").
 *
 * Which kinds allocate and free is the op table's (compiler/ir/opsem.c op_sem[].mem:
 * F, R, RO, SI and LW allocate; B, W and SO free); the plan places the activation
 * regions of the per-(v,m) kinds, an RO as the R it runs as. LW's model states are
 * not an activation region: the plan leaves them out.
 *
 * Model. The activations of each (v,m) of a rank form one region whose layout is three
 * nested prefixes (runtime/models/mlp.h "act region"): [0, ckpt) the checkpoint, [0, wact)
 * what a split B leaves for W, [0, act) everything. Over the schedule the region lives
 * as a sequence of "incarnations", each a prefix [0, size) at one offset:
 *   - F allocates [0, act), or only [0, ckpt) when an R(v,m) exists;
 *   - R allocates [ckpt, act) in a place of its own, anywhere: the checkpoint stays
 *     where F put it, and the region is then in two places (runtime/models/mlp.h
 *     mlp_recompute_split) until B/W, or until an SO moves both parts out (the SI
 *     brings them back as one incarnation). So the plan holds exactly what the
 *     walk of docs/spec.md "Memory" holds, and no bytes are copied;
 *   - B frees everything, except [0, wact) when a W(v,m) exists, which W frees;
 *   - SO(v,m) moves what the region holds at that point (always a prefix) to the host
 *     and frees it at the SO's end; SI(v,m) allocates a new incarnation, possibly at
 *     another offset, and brings the bytes back. Only when no R, B or W of (v,m) is
 *     listed between the SO and the SI (otherwise nothing moves). With
 *     swap_fraction < 1 (and full_swap unset: the cost model's view) the SO frees the
 *     top swap_fraction of the prefix (rounded down to 64 bytes) and the SI brings it
 *     back as a piece of its own, as the walk counts it; when an R of (v,m) exists the
 *     region then stays in place (conservative).
 * Time is the rank's list position: op i allocates at 2i (its start) and frees at 2i+1
 * (its end). Both the runtime and the simulator make an allocating op (MEM_ALLOC) wait
 * for every SO listed before it, so a region freed by an SO at list position i is
 * really free for any allocation listed after i.
 *
 * Pieces. Each incarnation is also cut at its region's piece boundaries (runtime/
 * region.h: what the layers keep of the checkpoint, the checkpoint, what W reads,
 * everything), and each piece can be placed on its own, with the incarnation's lifetime
 * (the part above a split B's keep ends at the B). Every op then names where each piece
 * of its region is (ArenaRank.at), and the runtimes address a region through its pieces.
 * Some lifetimes admit no packing at the walk's peak with whole regions
 * (docs/runtime.md "What fragmentation remains, and why"); in pieces they do.
 *
 * Packing (offline dynamic storage allocation: every lifetime is known): a first-fit
 * and a best-fit replay of the list; where they leave a gap above the walk's peak, the
 * greedy-by-size family of offline plans (TelaMalloc, Maas et al., ASPLOS'23 §3); where
 * those still do, a bounded exact search over canonical (skyline) packings with
 * MiniMalloc's section bound (Moffitt, ASPLOS'23 §4), and last shuffled greedy orders
 * (docs/runtime.md "Static memory planning" has the details and the limits). Whole
 * incarnations first; where they leave a gap, the same over the pieces, and the smaller
 * arena wins. The arena of a rank is the highest end placed; fragmentation = arena /
 * peak_live, where peak_live is the peak of the walk of docs/spec.md "Memory" over these (aligned)
 * regions: 1.0 = the arena is the walk's peak. The arena is never below peak_live; above
 * it only by packing loss (and, with swap_fraction < 1 and an R of the same (v,m), by
 * the part the walk swaps out). */
#ifndef PIPEC_ARENA_PLAN_H
#define PIPEC_ARENA_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "diag.h"
#include "ir.h"
#include "region.h"

#define ARENA_ALIGN 64
#define ARENA_PIECES PR_PIECES

/* Region sizes of one virtual stage, bytes (rounded up to ARENA_ALIGN by the planner;
 * ckpt and wact are clamped to act). */
typedef struct ArenaSizes {
    int64_t act, ckpt, wact;
    int64_t ckpt_layers; /* the checkpoint's first piece: what the layers keep (the
                          * rest is the embedding's and head's); 0 or ckpt: one piece */
    int64_t ract;        /* what an R rebuilds and holds at once (`ract`): 0 or at least
                          * act - ckpt for the whole [ckpt, act); less under layer-granular
                          * recomputation (docs/cost-model.md "Layer-granular recomputation") */
} ArenaSizes;

/* The piece boundaries of a region of sizes z, as planned (aligned): runtime/region.h
 * pr_region_cuts over the aligned sizes. from[PR_PIECES] is the aligned act. */
void arena_region_cuts(const ArenaSizes *z, int64_t from[ARENA_PIECES + 1]);

/* The plan of one rank. */
typedef struct ArenaRank {
    int64_t size;        /* arena bytes */
    int64_t peak_live;   /* the peak of alloc/freed over the list: the walk of docs/spec.md "Memory"
                          * over the 64-aligned sizes */
    int64_t pad;         /* bytes of peak_live that are ARENA_ALIGN padding: peak_live less
                          * the same walk's peak over the unaligned sizes */
    uint32_t peak_op;    /* list index of the op at which the peak is first reached */
    uint32_t nops;
    int64_t *held;       /* [nops] SO/SI: bytes of the region prefix moved; F, R: bytes
                          * of the region allocated (R: the whole act); B: bytes kept
                          * for W; else 0 */
    int64_t *alloc;      /* [nops] bytes op i allocates at its start, and */
    int64_t *freed;      /* [nops] bytes it frees at its end: the walk of docs/spec.md
                          * "Memory" (opsem_mem_step) over the aligned sizes, the
                          * amounts the runtime counts live bytes with */
    int64_t (*at)[ARENA_PIECES]; /* [nops] offset of piece k of the region op i works on
                          * (region bytes [from[k], from[k+1]) of arena_region_cuts at
                          * at[i][k]); -1 where the op's region has none of that piece
                          * (or the piece is empty, or the op has no region) */
} ArenaRank;

typedef struct ArenaPlan {
    int32_t P;
    ArenaRank *rank;     /* [P] */
    int64_t (*from)[ARENA_PIECES + 1]; /* [P*V] the piece boundaries of each virtual
                          * stage's region (arena_region_cuts of the sizes planned) */
} ArenaPlan;

/* Region sizes from the cost model: ir_cost act/ckpt/wact of every virtual stage
 * ([P*V], owned by the caller), and with a `model` the layers' part of the checkpoint
 * (cm_ckpt_layers). Sizes above 2^62 bytes are clamped. */
ArenaSizes *arena_sizes_from_costs(const Pipeline *p);

/* Plans every rank for region sizes sz[P*V] (NULL: arena_sizes_from_costs). full_swap
 * makes every SO move and free the whole held prefix (the runtime's behaviour);
 * otherwise swap_fraction < 1 keeps the region in place. Works on any IR: ops whose
 * (v,m) lacks an F or a B, or sits out of order, are planned conservatively or left
 * without a region (off = -1), never a crash. Linear in ops apart from the bounded
 * candidate search. */
ArenaPlan *arena_plan(const Pipeline *p, const ArenaSizes *sz, int full_swap);

/* arena_plan for a budget check: the search for a tighter packing stops as soon as a
 * rank's weights + arena fit within `budget` bytes (0: no budget, as arena_plan), so
 * the verdict "fits" is arena_plan's and sizes can be larger. quick skips the shuffled
 * orders and the exact search (the fast plans and the greedy orders only): for search
 * loops (passes, tune), whose winners `pipec check` plans again in full. */
ArenaPlan *arena_plan_within(const Pipeline *p, const ArenaSizes *sz, int full_swap,
                             double budget, bool quick);
void arena_plan_free(ArenaPlan *a);
/* The bytes of rank r's arena that count against the budget: its size less the
 * alignment padding at the walk's peak (r->pad). The budget bounds the walk of
 * docs/spec.md "Memory" in the cost model's bytes; only packing loss above that walk is
 * charged, never the runtime's 64-byte alignment (docs/runtime.md "Static memory
 * planning"). */
int64_t arena_charged(const ArenaRank *r);

/* The workspace of rank s, bytes: the largest transient working memory of its ops
 * (opsem_work: the `work` of each chunk with an F, B, R or RO), one region above the
 * activations' arena that every op reuses while it runs, as training runtimes keep one
 * workspace. arena_check and arena_plan_report add it to the arena and the weights. */
double arena_workspace(const Pipeline *p, int32_t s);

/* Prints an arena table of `pipec check --mem`: per rank the arena size, the peak of
 * live activation bytes, fragmentation, weights and arena + weights + workspace
 * (ws[P] bytes when not NULL, the runtime's; NULL: arena_workspace) against the budget,
 * under a line naming the sizes planned with (`what`). sz NULL: the cost model's sizes
 * (the budget check's plan); else region sizes [P*V] planned as the runtime does (every
 * SO moves the whole held prefix). */
void arena_plan_report(FILE *out, const Pipeline *p, const ArenaSizes *sz, const int64_t *ws,
                       const char *what);

/* Reports a `memory` error for every rank whose weights + arena (cost-model sizes) +
 * workspace exceed the pipeline's budget (none without a budget). Returns the error count. */
int arena_check(Diag *d, const Pipeline *p);

/* A cache of budget-check plans per rank, for search loops (tune) that check many
 * variants sharing ranks: arena_check_memo(d, p, memo) is arena_check(d, p), planning
 * only the ranks (op list, sizes, budget, weights) it has not planned before. */
typedef struct ArenaMemo ArenaMemo;
ArenaMemo *arena_memo_new(void);
void arena_memo_free(ArenaMemo *m);
int arena_check_memo(Diag *d, const Pipeline *p, ArenaMemo *memo);

#endif
