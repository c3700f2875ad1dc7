/* ir.h - the elaborated pipeline: what every consumer (check, passes, sim, print, emit)
 * reads. Nothing downstream of elaboration looks at the AST.
 *
 * Legend: P = stages (ranks), M = micro-batches per iteration, V = chunks per rank,
 * P*V virtual stages in model order. Times are milliseconds, sizes bytes, bandwidths
 * bytes per second, all as double (sizes are exact up to 2^53 bytes = 8 PiB).
 *
 * Limits (docs/language.md): P <= 65535, V <= 255, M <= 2^31 - 1, at most
 * IR_MAX_OPS ops in one pipeline. An Op is 16 bytes, so 2 million ops take 32 MiB. */
#ifndef PIPEC_IR_H
#define PIPEC_IR_H

#include <stdbool.h>
#include <stdint.h>

#include "diag.h"
#include "opkinds.h"

#define IR_MAX_STAGES 65535
#define IR_MAX_CHUNKS 255
#define IR_MAX_MICROBATCHES 2147483647
#define IR_MAX_OPS 50000000u

/* Op kinds. X(enum suffix, spelling in the language). Stream: which per-rank stream the
 * op runs on (docs/spec.md "Dependencies": F/B/W/R on compute, SO device-to-host, SI
 * host-to-device). OG and LW extend the core of docs/spec.md "Explicit form" (docs/semantics.md "Model-state
 * offload"): OG (D2H) offloads one chunk's gradients and runs its optimizer step on the
 * host, LW (H2D) loads the chunk's updated weights back (TPipe's T-Offload, §5). Both
 * act on a whole chunk and are written with micro-batch 0: `OG0.1`, `LW0.1`. New kinds
 * go at the end: the runtime's PR_* kinds (plan/opkinds.h) are the first kinds, in
 * this order (opsem.c asserts it). RO is R overlapped with the tensor-parallel
 * all-reduces of its host, the next compute op listed after it (docs/semantics.md
 * "Overlapped recomputation"; Lynx §4): the runtime runs it as an R at its list
 * position (op_sem[].runs_as), so it has no PR_* kind of its own. Every other fact
 * of a kind is its row of op_sem[] (opsem.h). */
#define OP_KINDS(X) \
    X(F, "F") \
    X(B, "B") \
    X(W, "W") \
    X(R, "R") \
    X(SO, "SO") \
    X(SI, "SI") \
    X(OG, "OG") \
    X(LW, "LW") \
    X(RO, "RO")

typedef enum OpKind {
#define X(e, s) OP_##e,
    OP_KINDS(X)
#undef X
    OP_NKINDS
} OpKind;

extern const char *const op_kind_name[OP_NKINDS];

/* One op of one rank's list: `KIND mb.chunk`. 16 bytes. */
typedef struct Op {
    uint32_t mb;     /* micro-batch, 0..M-1 */
    uint8_t kind;    /* OpKind */
    uint8_t chunk;   /* 0..V-1; virtual stage = ir_vstage(p, rank, chunk) */
    uint16_t aux;    /* free for passes (block ids, marks); 0 from the parser */
    Loc loc;         /* where the op was written (or the template op that emitted it) */
} Op;

/* One rank's ops in listed order. */
typedef struct StageOps {
    Op *ops;
    uint32_t n;
    uint32_t cap;
    Loc loc;         /* the `stage N {` that declared it (LOC_NONE if none) */
    bool declared;   /* a `stage N` block exists */
} StageOps;

/* A reference to an op by identity (not position): stage:KIND mb.chunk. 8 bytes. */
typedef struct OpRef {
    uint32_t mb;
    uint16_t stage;
    uint8_t kind;
    uint8_t chunk;
} OpRef;

/* Actions of PyTorch's pipelining runtime that are not ops (docs/csv.md "Actions",
 * docs/semantics.md "Runtime actions"). They sit between a rank's ops, change no op's
 * timing or memory, and are only checked (actions.h) and written back (csv.h).
 * X(enum suffix, spelling in the language and in PyTorch's CSV). SEND_F/RECV_F/
 * SEND_B/RECV_B name the local virtual stage (a RECV the receiving one, as PyTorch
 * writes it); UNSHARD, RESHARD and REDUCE_GRAD act on a whole chunk (written with
 * micro-batch 0, like OG); OVERLAP_F_B (no numbers) runs the next two ops listed
 * after it as one overlapped pair (DualPipeV). */
#define ACTION_KINDS(X) \
    X(SEND_F, "SEND_F") \
    X(RECV_F, "RECV_F") \
    X(SEND_B, "SEND_B") \
    X(RECV_B, "RECV_B") \
    X(UNSHARD, "UNSHARD") \
    X(RESHARD, "RESHARD") \
    X(REDUCE_GRAD, "REDUCE_GRAD") \
    X(OVERLAP_F_B, "OVERLAP_F_B")

typedef enum ActionKind {
#define X(e, s) ACTION_##e,
    ACTION_KINDS(X)
#undef X
    ACTION_N
} ActionKind;

extern const char *const action_kind_name[ACTION_N];

/* True for the point-to-point kinds (SEND_F..RECV_B); a SEND has an even kind. */
#define ACTION_IS_P2P(k) ((k) <= ACTION_RECV_B)

/* One action on rank `rank`, listed before the op at index pos of that rank's list
 * (pos = the rank's op count when it follows the last op). 16 bytes. */
typedef struct Action {
    uint32_t mb;     /* micro-batch (0 for the chunk-wide kinds and OVERLAP_F_B) */
    uint32_t pos;    /* index of the op it precedes in stages[rank].ops */
    uint16_t rank;
    uint8_t kind;    /* ActionKind */
    uint8_t chunk;
    Loc loc;
} Action;

/* `dep A -> B`: B waits for A. */
typedef struct Dep {
    OpRef from, to;
    Loc loc;
} Dep;

/* Cost fields. X(enum suffix, name, unit, scope). Scope VSTAGE fields may be overridden
 * per virtual stage; RANK fields only per rank (docs/spec.md "Cost lookup"). The last three
 * belong to the OG/LW extension (docs/semantics.md "Model-state offload"): `grads` bytes
 * OG moves to the host, `wload` bytes LW brings back (both also the device bytes of the
 * chunk's model states between LW and OG), `opt_host` the host optimizer step OG runs
 * after its copy (ms). All default to 0. fcomm, bcomm and rcomm are the parts of f, b
 * and r during which the compute stream waits for tensor-parallel all-reduces (Lynx
 * Fig. 1 phases 1-4; docs/cost-model.md "Tensor-parallel communication"), default 0.
 * host_link_ranks is the one PIPELINE field: N consecutive ranks share one host link,
 * and the SO/SI/OG/LW transfers in flight on it share its bandwidth (docs/simulator.md
 * "Shared host links"); a positive integer, default 1 (every rank its own link). `work`
 * is the transient working memory an F, B or R of the virtual stage holds while it runs
 * (docs/spec.md "Memory"; derived by the cost model, docs/cost-model.md "Working
 * memory"), default 0. `ract` is what an R or RO allocates at its start and its B frees:
 * the rebuilt activations held at once, default act - ckpt (the whole virtual stage);
 * under layer-granular recomputation one layer's share (docs/cost-model.md
 * "Layer-granular recomputation"); read as at most act - ckpt.
 * The last four are the data-parallel stream's inputs (docs/spec.md "Time", docs/cost-model.md
 * "Data-parallel time"): `params` the parameters of a virtual stage on one tensor-parallel
 * rank (a count; the gradient and parameter collectives move a multiple of it), `dp_bw`
 * and `dp_latency` the rank's link to its data-parallel peers (bytes/s each direction,
 * ms per ring step), `mem_bw` its device memory bandwidth (the optimizer step). params
 * defaults to 0 (nothing to reduce), the bandwidths to unlimited, dp_latency to 0. */
typedef enum UnitClass { UNIT_NONE, UNIT_TIME, UNIT_SIZE, UNIT_BW, UNIT_FRACTION } UnitClass;
typedef enum CostScope { SCOPE_VSTAGE, SCOPE_RANK, SCOPE_PIPELINE } CostScope;

#define COST_FIELDS(X) \
    X(F, "f", UNIT_TIME, SCOPE_VSTAGE) \
    X(B, "b", UNIT_TIME, SCOPE_VSTAGE) \
    X(W, "w", UNIT_TIME, SCOPE_VSTAGE) \
    X(R, "r", UNIT_TIME, SCOPE_VSTAGE) \
    X(ACT, "act", UNIT_SIZE, SCOPE_VSTAGE) \
    X(CKPT, "ckpt", UNIT_SIZE, SCOPE_VSTAGE) \
    X(WACT, "wact", UNIT_SIZE, SCOPE_VSTAGE) \
    X(WEIGHTS, "weights", UNIT_SIZE, SCOPE_RANK) \
    X(P2P, "p2p", UNIT_TIME, SCOPE_RANK) \
    X(HOST_BW, "host_bw", UNIT_BW, SCOPE_RANK) \
    X(SWAP_FRACTION, "swap_fraction", UNIT_FRACTION, SCOPE_RANK) \
    X(GRADS, "grads", UNIT_SIZE, SCOPE_VSTAGE) \
    X(WLOAD, "wload", UNIT_SIZE, SCOPE_VSTAGE) \
    X(OPT_HOST, "opt_host", UNIT_TIME, SCOPE_VSTAGE) \
    X(FCOMM, "fcomm", UNIT_TIME, SCOPE_VSTAGE) \
    X(BCOMM, "bcomm", UNIT_TIME, SCOPE_VSTAGE) \
    X(RCOMM, "rcomm", UNIT_TIME, SCOPE_VSTAGE) \
    X(HOST_LINK_RANKS, "host_link_ranks", UNIT_NONE, SCOPE_PIPELINE) \
    X(PARAMS, "params", UNIT_NONE, SCOPE_VSTAGE) \
    X(DP_BW, "dp_bw", UNIT_BW, SCOPE_RANK) \
    X(DP_LATENCY, "dp_latency", UNIT_TIME, SCOPE_RANK) \
    X(MEM_BW, "mem_bw", UNIT_BW, SCOPE_RANK) \
    X(EXPERT_PARAMS, "expert_params", UNIT_NONE, SCOPE_VSTAGE) \
    X(WORK, "work", UNIT_SIZE, SCOPE_VSTAGE) \
    X(RACT, "ract", UNIT_SIZE, SCOPE_VSTAGE)

typedef enum CostField {
#define X(e, n, u, s) COST_##e,
    COST_FIELDS(X)
#undef X
    COST_NFIELDS
} CostField;

extern const char *const cost_field_name[COST_NFIELDS];
extern const UnitClass cost_field_unit[COST_NFIELDS];
extern const CostScope cost_field_scope[COST_NFIELDS];

/* The resolution derived costs are kept at, which is also what `pipec print` writes
 * (print.h): times to 1 / COST_TIME_RESOLUTION ms (1 ns), sizes to whole bytes,
 * bandwidths to whole bytes/s; fractions unchanged. */
#define COST_TIME_RESOLUTION 1e6

/* v, a value of field f, rounded to that resolution (a non-finite v unchanged, -0 made
 * 0). The cost model stores every value it derives
 * through it (docs/cost-model.md "Resolution"), so a derived cost printed and read back
 * is the same double and `pipec print X > Y` simulates Y exactly as X. */
double cost_quantise(CostField f, double v);

/* One `costs [stage N | vstage N] { ... }` block: the fields it sets. */
typedef struct CostBlock {
    double v[COST_NFIELDS];  /* ms, bytes, bytes/s or a fraction, by field */
    uint32_t set;            /* bit (1u << field) when the block sets that field */
    uint32_t derived;        /* bits of `set` filled by derive_costs, not the source */
    Loc loc;                 /* the block (LOC_NONE when derived) */
} CostBlock;

/* A value in a model/device block or a pass argument. */
typedef enum ValKind { VAL_NUM, VAL_IDENT, VAL_STRING, VAL_RANGE, VAL_LIST } ValKind;

typedef struct Value {
    ValKind kind;
    UnitClass unit;  /* VAL_NUM: the unit it was written with, converted to ms/bytes/bytes/s */
    double num;      /* VAL_NUM */
    char *str;       /* VAL_IDENT, VAL_STRING (owned) */
    int64_t lo, hi;  /* VAL_RANGE: half-open [lo, hi) */
    double *list;    /* VAL_LIST of numbers (owned) */
    uint32_t nlist;
    Loc loc;
} Value;

/* `key value` inside a model/device block, or `key=value` in a pass call. */
typedef struct Field {
    char *key;
    Value val;
    Loc loc;
} Field;

/* A model or device: its name and fields, after a pipeline's override block has been
 * merged over the stdlib or user definition (later fields win). */
typedef struct Entity {
    char *name;
    Field *fields;
    uint32_t nfields;
    Loc loc;
} Entity;

/* Recomputation policies (docs/spec.md "Pipeline settings"). Those before BLOCK take no
 * argument; block takes a layer count, keep a set of tensors (RecomputeDir.arg). */
#define RECOMPUTE_POLICIES(X) \
    X(NONE, "none") \
    X(FULL, "full") \
    X(SELECTIVE, "selective") \
    X(CMB, "cmb") \
    X(MLP, "mlp") \
    X(BLOCK, "block") \
    X(KEEP, "keep")

typedef enum RecomputePolicy {
#define X(e, s) POLICY_##e,
    RECOMPUTE_POLICIES(X)
#undef X
    POLICY_N
} RecomputePolicy;

extern const char *const policy_name[POLICY_N];

/* The tensors of a transformer layer the `keep` policy may keep, one bit each in its
 * argument (docs/cost-model.md "Keep-sets": each one's bytes per token, the operator that
 * rebuilds it and its source, Korthikanti et al. 2022 §4.1). The layer input is always
 * kept. X(enum suffix, spelling). */
#define KEEP_TENSORS(X) \
    X(ATTN_NORM, "attn_norm") \
    X(QKV, "qkv") \
    X(CORE, "core") \
    X(ATTN_OUT, "attn_out") \
    X(ATTN_MASK, "attn_mask") \
    X(MLP_IN, "mlp_in") \
    X(MLP_NORM, "mlp_norm") \
    X(FC1, "fc1") \
    X(ACT_FN, "act_fn") \
    X(MLP_MASK, "mlp_mask")

typedef enum KeepTensor {
#define X(e, s) KEEP_##e,
    KEEP_TENSORS(X)
#undef X
    KEEP_N
} KeepTensor;

extern const char *const keep_tensor_name[KEEP_N];

/* Reads a keep-set written as tensor names separated by commas and/or blanks
 * ("fc1, mlp_in") into a mask of (1 << KeepTensor) bits. Returns NULL, or the first
 * name that is not a keep tensor (a pointer into s; its length is strcspn(ret, ", \t")). */
const char *keep_parse(const char *s, uint32_t *mask);

/* A keep mask as tensor names separated by blanks ("qkv fc1"), into buf[n]. */
const char *keep_format(uint32_t mask, char *buf, size_t n);

/* A policy as `recompute` writes it, into buf[n]: "full", "block(3)", "keep(qkv, fc1)".
 * arg is the policy's argument: block's layer count, keep's mask; ignored otherwise. */
const char *policy_format(RecomputePolicy pol, uint32_t arg, char *buf, size_t n);

/* `recompute stages LO..HI policy P` (stages half-open [lo, hi)); `policy block(N)` and
 * `policy keep(T, ...)` carry an argument (policy_format). */
typedef struct RecomputeDir {
    int32_t lo, hi;
    RecomputePolicy policy;
    uint32_t arg;   /* block: layers recomputed per virtual stage (>= 1); keep: the mask */
    bool per_layer; /* `granularity layer`: R rebuilds one layer at a time inside B */
    Loc loc;
} RecomputeDir;

/* `apply NAME(k=v, ...)`, run in the order written. */
typedef struct PassCall {
    char *name;
    Field *args;
    uint32_t nargs;
    Loc loc;
} PassCall;

typedef enum Placement { PLACE_INTERLEAVED, PLACE_VSHAPE } Placement;

/* The dtype gradients are reduced and kept in (`grad_dtype`, docs/language.md "Data
 * parallelism"): bf16 (2 bytes per parameter, the default) or fp32 (4 bytes: Megatron-LM's
 * main-gradient accumulation). X(enum suffix, spelling, bytes per parameter). */
#define GRAD_DTYPES(X) \
    X(BF16, "bf16", 2) \
    X(FP32, "fp32", 4)

typedef enum GradDtype {
#define X(e, s, b) GRAD_##e,
    GRAD_DTYPES(X)
#undef X
    GRAD_NDTYPES
} GradDtype;

extern const char *const grad_dtype_name[GRAD_NDTYPES];
extern const int grad_dtype_bytes[GRAD_NDTYPES];

/* Limits of a written cost (docs/language.md "Limits"): a time above IR_MAX_COST_MS
 * (1e9 ms, 11.6 days per op) or a size above IR_MAX_COST_BYTES (1 PiB) is a `limit`
 * error at the value. */
#define IR_MAX_COST_MS 1e9
#define IR_MAX_COST_BYTES 1125899906842624.0
/* A written `params` above IR_MAX_COST_PARAMS (2^50) is a `limit` error at the value. */
#define IR_MAX_COST_PARAMS 1125899906842624.0

/* Limits of the data-parallel settings (docs/language.md "Data parallelism"). */
#define IR_MAX_DATA_PARALLEL 1048576
#define IR_MAX_EXPERT_PARALLEL IR_MAX_DATA_PARALLEL /* E <= D (docs/language.md) */
#define IR_MAX_ZERO 3

typedef struct Pipeline {
    char *name;
    Loc loc;

    /* Shape: the explicit form's settings. */
    int32_t P, M, V;
    Placement placement;
    bool has_memory;      /* `memory` given (or taken from the device) */
    double memory;        /* per-rank budget, bytes */
    Loc shape_loc[4];     /* where stages / microbatches / chunks / memory were set */

    /* Costs (docs/spec.md "Cost lookup"). */
    CostBlock costs;          /* `costs { }` */
    CostBlock *stage_costs;   /* [P]: `costs stage s { }` */
    CostBlock *vstage_costs;  /* [P*V]: `costs vstage v { }` */

    /* The schedule. */
    StageOps *stages;         /* [P] */
    Dep *deps;
    uint32_t ndeps, depcap;
    /* Runtime actions between the ops, sorted by (rank, pos), ties in listed order;
     * empty unless the file writes them (import-csv keeps a CSV's). */
    Action *actions;
    uint32_t nactions, actioncap;

    /* Settings beyond the explicit form; consumed by the cost model and the passes,
     * never printed by `pipec print`. */
    Entity *model;            /* NULL when none */
    Entity *device;           /* NULL when none */
    bool partition_set;
    bool partition_even;
    double *partition;        /* [npartition] layers per stage (0.5 = one half-layer unit) */
    uint32_t npartition;
    Loc partition_loc;
    int32_t tensor_parallel;  /* >= 1 */
    Loc tp_loc;               /* where `tensor_parallel` is set (LOC_NONE when not) */
    /* Data parallelism (docs/language.md "Data parallelism"); printed by `pipec print`
     * when not the default, as they change the simulated iteration. */
    int32_t data_parallel;    /* D >= 1 replicas of the whole pipeline, default 1 */
    int32_t zero;             /* ZeRO stage 0..3 (Rajbhandari et al., SC'20), default 0 */
    GradDtype grad_dtype;     /* default GRAD_BF16 */
    Loc dp_loc, zero_loc, grad_dtype_loc; /* where each is set (LOC_NONE when not) */
    /* Expert parallelism (docs/language.md "Expert parallelism"): E >= 1 ranks share a
     * mixture-of-experts layer's experts, default 1; the cost model checks it against the
     * model (docs/cost-model.md "Mixture of experts"). */
    int32_t expert_parallel;
    Loc ep_loc;               /* where `expert_parallel` is set (LOC_NONE when not) */
    char *schedule;           /* template name given by `schedule`, or NULL */
    Loc schedule_loc;
    RecomputeDir *recompute;
    uint32_t nrecompute;
    PassCall *passes;
    uint32_t npasses;
    RecomputePolicy *stage_policy; /* [P]: recomputation policy per rank, default none */
    uint32_t *stage_policy_arg;    /* [P]: its argument (RecomputeDir.arg), 0 for the others */
    uint8_t *stage_per_layer;      /* [P]: 1 when the rank rematerializes one layer at a time
                                    * (`granularity layer`): the cost model derives `ract` */
    uint8_t *adjusted;        /* [P]: 1 when a pass marked the rank adjusted (Obscura §3.2) */
    /* The model and device as derive_costs validated them (costmodel.h), so that passes
     * re-cost without reading them again; NULL before. Plain data of cost_inputs_size
     * bytes, copied by pipeline_clone. */
    struct CostInputs *cost_inputs;
    size_t cost_inputs_size;
} Pipeline;

/* Allocates an empty pipeline (P = M = V = 0). */
Pipeline *pipeline_new(void);

/* Sets P, M, V and allocates the per-rank and per-virtual-stage arrays, empty. Any
 * earlier arrays are freed. The caller validated the ranges. */
void pipeline_set_shape(Pipeline *p, int32_t P, int32_t M, int32_t V);

/* A deep copy (for passes that try variants and for `pipec tune`). */
Pipeline *pipeline_clone(const Pipeline *p);

void pipeline_free(Pipeline *p);

/* Appends an op to a rank's list. */
void stage_push(StageOps *s, Op op);

/* Appends an action; callers append in (rank, pos) order or call pipeline_sort_actions. */
void pipeline_push_action(Pipeline *p, Action a);

/* Sorts p->actions by (rank, pos), keeping the listed order of equal keys. */
void pipeline_sort_actions(Pipeline *p);

/* Writes "SEND_F3", "RECV_B3.1", "UNSHARD0.1", "OVERLAP_F_B" into buf; returns buf. */
char *action_name(char *buf, size_t n, const Action *a);

/* Total number of ops over all ranks. */
uint64_t pipeline_nops(const Pipeline *p);

/* Virtual stage of chunk c on rank s (docs/spec.md "Virtual stages"): c*P + s, or with
 * vshape c*P + (P-1-s) for odd c. */
int32_t ir_vstage(const Pipeline *p, int32_t s, int32_t c);

/* True when op's kind, chunk and micro-batch are within p's shape (OP_NKINDS, V, M). A
 * written list may hold ops that fail it (check reports them); the op index, the memory
 * walk and the simulator pass over them. */
static inline bool ir_op_in_range(const Pipeline *p, const Op *op)
{
    return op->kind < OP_NKINDS && op->chunk < (uint32_t)p->V && op->mb < (uint32_t)p->M;
}

/* The rank and chunk that own virtual stage v (inverse of ir_vstage). */
void ir_owner(const Pipeline *p, int32_t v, int32_t *s, int32_t *c);

/* The half-layer units of each of the P*V virtual stages under the list form of
 * `partition` (docs/cost-model.md "Units of the model and the partition"): P*V entries
 * give one per virtual stage in model order; P entries give one per stage, split evenly
 * over its chunks with the remainder going to the later chunks. Each entry is a number of
 * layers >= 0 in steps of 0.5 and at most max_units half-layer units. units has P*V
 * elements. Returns 0; -1 when the list has neither P nor P*V entries; 1 + i when entry
 * i is not a valid number of layers. The one split the cost model and the CPU workload
 * share. */
int ir_partition_units(const Pipeline *p, double max_units, int64_t *units);

/* Whether a `partition` list of n entries fits p's shape: one per stage (P) or one per
 * virtual stage (P*V). The count rule the front end checks and ir_partition_units
 * reads. */
bool ir_partition_count_ok(const Pipeline *p, uint32_t n);

/* The value of cost field f for chunk c on rank s: `costs vstage`, else `costs stage`,
 * else `costs`, else the default (0; host_bw +inf; swap_fraction 1; wact = act).
 * For SCOPE_RANK fields c is ignored. */
double ir_cost(const Pipeline *p, int32_t s, int32_t c, CostField f);

/* Writes "F3", "B3.1", "SO0" (chunk suffix only when chunk > 0) into buf; returns buf. */
char *op_name(char *buf, size_t n, OpKind kind, uint32_t mb, uint32_t chunk);

/* Looks a field up in an entity or pass call by key; NULL when absent. */
const Field *field_find(const Field *fields, uint32_t n, const char *key);

/* Frees a Value's owned parts. */
void value_free(Value *v);
Value value_clone(const Value *v);

#endif
