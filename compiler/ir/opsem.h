/* opsem.h - the one table of op semantics: for every op kind, the stream it runs on,
 * the ops it waits for, what it allocates and frees, and how long it takes. The wait
 * graph (waitgraph.c), the simulator (sim.c), the memory walk (memory.c), the arena
 * planner (arena_plan.c), the code generator (emit_c.c) and, through the generated
 * tables, the runtime all read it; none of them states a rule of its own. The table
 * also carries what the rest of the tree shows or checks of a kind: its pair (SO/SI,
 * OG/LW: check.c), the kind the runtime runs it as (emit_c.c, plan/opkinds.h), the
 * glyph, colour and label of the timelines (sim_gantt.c, sim_svg.c, sim_html.c),
 * whether it is chunk-wide, whether it is part of a chunk's backward. The op spellings
 * are OP_KINDS (ir.h): the lexer (grammar/pipe.l) looks a capitalised word up in them,
 * and the editor grammar's op class is generated from them (tools/mksyntax.sh).
 * A new op kind is one row in OP_KINDS (ir.h), one row in op_sem[] and one case in each
 * of opsem_mem_step / opsem_duration, plus its runtime kernel when it runs as itself.
 *
 * The rules are docs/spec.md "Dependencies", "Memory" and "Time"; the OG/LW rows extend
 * them (docs/semantics.md "Model-state offload").
 *
 * Legend: v = virtual stage, m = micro-batch, PV = P*V virtual stages. Times are
 * milliseconds, sizes bytes. */
#ifndef PIPEC_OPSEM_H
#define PIPEC_OPSEM_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"

/* An op's part in the memory walk of docs/spec.md "Memory". An allocating op allocates
 * at its start; a freeing op frees at its end. docs/spec.md "Time": an allocating op also
 * waits for every op listed before it on its rank that frees memory, so list order is
 * memory order and the memory in use never exceeds the walk's peak. */
typedef enum OpMemRole { MEM_NONE, MEM_ALLOC, MEM_FREE } OpMemRole;

/* A data dependency: the op waits for op `kind` of virtual stage v + dv and the same
 * micro-batch (micro-batch 0 when that kind is chunk-wide: OP_IS_CHUNKWIDE of ir.h), when that op exists.
 * dv = -1 applies only when v > 0, dv = +1 only when v < PV - 1; a dependency on
 * another virtual stage may cross ranks (the waiting rank's `p2p` is added). */
typedef struct OpWaitRule {
    uint8_t kind;       /* OpKind */
    int8_t dv;          /* -1, 0 or +1 */
    const char *why;    /* the rule in words, for `order` errors ("a backward needs its
                         * forward") */
} OpWaitRule;

#define OPSEM_MAX_WAITS 5

/* Which optional ops of one (v,m) exist (bits), the facts the memory and duration
 * rules depend on. */
enum { VM_HAS_R = 1u, VM_HAS_W = 2u, VM_HAS_SO = 4u, VM_HAS_SI = 8u };

/* One row of the table. */
typedef struct OpSem {
    Stream stream;          /* the per-rank stream it runs on, in listed order */
    uint8_t mem;            /* OpMemRole */
    bool waits_last_bw;     /* also waits for the last-listed B or W of its chunk */
    const char *why_last_bw; /* that rule in words */
    bool overlaps_host;     /* runs inside the tensor-parallel all-reduces of its host,
                             * the next compute op listed after it (opsem_host) */
    uint8_t nwait;
    OpWaitRule wait[OPSEM_MAX_WAITS];
    bool reads_params;      /* computes with its chunk's parameters, so at ZeRO stage 3 an
                             * all-gather of them precedes it on the data-parallel stream
                             * (docs/spec.md "Time"); W needs only activations and output
                             * gradients (dW = x^T dy) */
    bool works;             /* holds its virtual stage's `work` bytes (transient working
                             * memory) while it runs: docs/spec.md "Memory" */
    bool chunkwide;         /* acts on a whole chunk, written with micro-batch 0 (OG, LW) */
    bool backward;          /* part of its chunk's backward (B, W): a waits_last_bw op waits
                             * for the last of them */
    uint8_t has;            /* its VM_HAS_* bit, 0 for F, B and the chunk-wide kinds */
    uint8_t runs_as;        /* OpKind whose runtime kind (PR_*, plan/opkinds.h) and arena
                             * regions it uses: itself, or R for RO */
    uint8_t pair;           /* OpKind that must exist with it on the same (v,m), or chunk
                             * for a chunk-wide kind (SO/SI, OG/LW); OP_NKINDS for none */
    const char *why_pair;   /* the pair rule in words, for `missing` errors */
    char glyph;             /* `sim --gantt`'s fill character */
    const char *colour;     /* `sim --svg` and `--html` box colour, "#rrggbb" */
    const char *label;      /* the timelines' legend: "F forward" */
} OpSem;

extern const OpSem op_sem[OP_NKINDS];

/* True for the kinds that act on a whole chunk (op_sem[k].chunkwide); false for a value
 * out of range. */
static inline bool op_chunkwide(unsigned k)
{
    return k < OP_NKINDS && op_sem[k].chunkwide;
}
#define OP_IS_CHUNKWIDE(k) op_chunkwide((unsigned)(k))

/* True for the kinds that run inside their host's all-reduces (op_sem[k].overlaps_host:
 * RO). */
static inline bool op_overlaps_host(unsigned k)
{
    return k < OP_NKINDS && op_sem[k].overlaps_host;
}

/* True when p lists some op whose kind has the property `has` (op_chunkwide,
 * op_overlaps_host, ...): what the figures ask before naming optional streams. */
bool opsem_lists(const Pipeline *p, bool (*has)(unsigned k));

/* True for the kinds that are part of a chunk's backward (op_sem[k].backward: B, W). */
static inline bool op_backward(unsigned k)
{
    return k < OP_NKINDS && op_sem[k].backward;
}

/* The words of the rule by which an op of kind u waits for one of kind w (for `order`
 * errors), or a generic phrase when no data rule links them (a `dep` line). */
const char *opsem_why(OpKind u, OpKind w);

/* The stream an op kind runs on: op_sem[k].stream, STREAM_COMPUTE for a kind out of
 * range. */
Stream op_stream(OpKind k);

/* Whether an op of kind k waits for the op of kind w of its own (v,m) (or, w chunk-wide,
 * of its own chunk) when that op exists: a dv = 0 row of op_sem[k].wait. */
bool opsem_waits_on(OpKind k, OpKind w);

/* The VM_HAS_* bit of an op kind, 0 for F/B and the chunk-wide kinds. */
unsigned opsem_has_bit(OpKind k);

/* The costs the rules read for one (rank, chunk), looked up once (ir_cost is not
 * free). ms_per_byte is 1000 / host_bw, 0 when the bandwidth is unlimited. */
typedef struct OpCosts {
    double f, b, w, r;            /* ms */
    double act, ckpt, wact;       /* bytes */
    double ract;                  /* bytes an R/RO allocates (`ract`, at most act - ckpt) */
    double grads, wload;          /* bytes OG moves out / LW brings back */
    double opt_host;              /* ms: OG's host optimizer step */
    double fcomm, bcomm, rcomm;   /* ms of f, b, r spent in tensor-parallel all-reduces */
    double work;                  /* bytes: transient working memory of F, B, R, RO */
    double frac;                  /* swap_fraction of the rank */
    double ms_per_byte;           /* ms per byte over the host link */
} OpCosts;

/* Fills *c for chunk c of rank s from the pipeline's costs (docs/spec.md "Cost lookup"). */
void opsem_costs(const Pipeline *p, int32_t s, int32_t chunk, OpCosts *c);

/* Which micro-batches of chunk c of rank s are rematerialized, and how (docs/semantics.md
 * "Memory", layer-granular recomputation): counts of the chunk's F ops and of its R and
 * RO ops, whether a W exists on the chunk, and whether its recomputation is
 * layer-granular (an R or RO exists and `ract` < act - ckpt). */
typedef struct RematUse {
    uint32_t nf, nr, nw;
    bool per_layer;
} RematUse;

/* Fills *u for chunk c of rank s (linear in the rank's ops). */
void opsem_remat_use(const Pipeline *p, int32_t s, int32_t c, RematUse *u);

/* What one (v,m) holds during the walk: bytes on the device and bytes swapped out. */
typedef struct VmMem {
    double held, host;
} VmMem;

/* The memory rule of docs/spec.md "Memory" for one op of kind k on a (v,m) whose optional
 * ops are `has` (VM_HAS_*), walked in list order: *alloc gets the bytes allocated at
 * the op's start, *freed the bytes freed at its end, and *st is updated. F adds `act`,
 * or `ckpt` when R exists; R adds `ract` (act - ckpt, or one layer's share under
 * layer-granular recomputation: docs/semantics.md "Memory"); B frees all but `wact` when W exists
 * (never more than is held), W the rest; SO frees swap_fraction of what is held and
 * keeps it on the host; SI brings it back. LW adds its chunk's grads + wload (st may
 * be NULL); OG's free is not counted: the walk keeps the model states to the end of
 * the list (docs/semantics.md "Model-state offload"). */
void opsem_mem_step(OpKind k, const OpCosts *c, unsigned has, VmMem *st, double *alloc,
                    double *freed);

/* The transient working memory of an op of kind k, bytes: the chunk's `work` for the
 * kinds whose row says `works` (F, B, R, RO), else 0. Held from the op's start to its
 * end on top of what the walk holds (docs/spec.md "Memory"). */
double opsem_work(OpKind k, const OpCosts *c);

/* The bytes an op moves over the host link: SO what it freed, SI what it allocated
 * (the amounts of opsem_mem_step), OG the chunk's grads, LW its wload; 0 for the
 * compute kinds. */
double opsem_moved(OpKind k, const OpCosts *c, double alloc, double freed);

/* The part of an op's duration spent moving bytes over the host link at the full
 * host_bw, ms: moved / host_bw for the copy kinds (SO, SI, OG, LW; OG's opt_host comes
 * after it), 0 for the compute kinds. On a link shared by several ranks this is the part
 * that shares the bandwidth (docs/simulator.md "Shared host links"). */
double opsem_link_ms(OpKind k, const OpCosts *c, double moved);

/* The duration of an op (docs/spec.md "Time"), ms: F f; B b, or b - w when W exists; W w;
 * R and RO r (an RO's exposed part is opsem_exposed); SO, SI and LW the bytes moved (opsem_moved) / host_bw; OG the same plus
 * opt_host. Never negative. */
double opsem_duration(OpKind k, const OpCosts *c, unsigned has, double moved);

/* Overlapped recomputation (docs/semantics.md "Overlapped recomputation"; Lynx §4,
 * Fig. 1 phases 1-4, Eq. 5-6). The host of the op at position i of a rank's list (a
 * kind with overlaps_host): the next op listed after it on the compute stream whose
 * kind does not overlap a host; -1 when there is none. O(ops skipped). */
int64_t opsem_host(const StageOps *so, uint32_t i);

/* The all-reduce time of an op of kind k, the phases an overlapped op can run in, ms:
 * F fcomm, B bcomm, R rcomm, 0 for the other kinds. */
double opsem_comm(OpKind k, const OpCosts *c);

/* The compute-stream time of an RO whose host has *budget ms of all-reduce phases left,
 * ms: its own all-reduces (rcomm) cannot share the link with the host's (Lynx Eq. 6) and
 * stay on the critical path; its compute, r - rcomm, runs inside the budget and only
 * the excess is exposed (Eq. 5). *budget loses what the RO hid. */
double opsem_exposed(const OpCosts *c, double *budget);

/* The share of a virtual stage one layer-granular rebuild holds, ract / (act - ckpt) in
 * (0, 1]: 1 / n for n alike layers; 1 when recomputation is stage-granular (`ract` at
 * its default act - ckpt) or nothing is rebuilt (docs/cost-model.md "Layer-granular
 * recomputation"). */
double opsem_layer_share(const OpCosts *c);

/* Whether an RO of a (v,m) may be hosted by its own B (the next compute op after it):
 * under layer-granular recomputation (share below 1) the rebuild of layer l runs in the
 * backward all-reduces of layer l+1 (Lynx Fig. 7, phases 3-4). */
bool opsem_self_host_ok(const OpCosts *c);

/* The all-reduce budget, ms, an RO hosted by its own B can use: the backward
 * all-reduces of all but the stage's first rebuilt layer, bcomm * (1 - g) with g the
 * layer share. */
double opsem_self_budget(const OpCosts *c);

/* opsem_exposed for an RO hosted by its own B: rcomm and the first layer's compute
 * g (r - rcomm) stay exposed (nothing of B runs before the first layer is rebuilt);
 * the other layers' compute (1 - g)(r - rcomm) hides in *budget, the excess exposed
 * (docs/semantics.md "Overlapped recomputation"). *budget loses what it hid. */
double opsem_exposed_self(const OpCosts *c, double *budget);

/* Reports a `value` error for every (rank, chunk) whose weight-gradient time exceeds
 * its whole backward (w > b; docs/spec.md "Time"), located at the cost block that set w
 * (or b, when only b was written there). Returns the errors reported. */
int opsem_check_costs(Diag *d, const Pipeline *p);

#endif
