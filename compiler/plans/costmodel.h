/* costmodel.h - per-stage costs derived from a model shape and a device
 * (docs/cost-model.md states every formula and its source).
 *
 * Legend: P = stages (ranks), V = chunks per rank, P*V virtual stages in model order.
 * L = transformer layers, h = hidden size, a = attention heads, g = key/value heads,
 * f = MLP (ffn) size, V_voc = vocabulary, s = sequence length, b = micro-batch size,
 * e = bytes per activation element (2 for bf16/fp16, 4 for fp32), t = tensor parallel.
 * Times are milliseconds per micro-batch, sizes bytes per micro-batch (activations) or
 * per rank (weights), bandwidths bytes per second.
 *
 * The model is cut into 2L + 2 units (Obscura §7.2): the embedding, then for every layer
 * an attention half-unit and an MLP half-unit, then the head. A partition gives each
 * virtual stage a run of half-layer units [ubeg[v], ubeg[v+1]) (unit 2i is layer i's
 * attention, unit 2i+1 its MLP); the embedding always sits on virtual stage 0 and the
 * head on the last one. */
#ifndef PIPEC_COSTMODEL_H
#define PIPEC_COSTMODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "diag.h"
#include "ir.h"

/* Derives costs from Pipeline.model + device + partition + tensor_parallel + the
 * per-rank recompute policy (Pipeline.stage_policy). Fills, for every virtual stage,
 * the vstage CostBlock fields f b w r act ckpt wact work, and for every rank the stage
 * CostBlock fields weights p2p host_bw — but only fields that the user did not set in
 * any explicit block that applies (a user's `costs`, `costs stage`, `costs vstage` value
 * always wins). Sets the memory budget from the device when `memory` is absent.
 * A pipeline without a model is left unchanged, except that on a rank whose policy is
 * not none an r the user did not set becomes that rank's f (full recomputation; ckpt
 * keeps its default 0 (docs/spec.md "Cost lookup")). Derived values are marked in CostBlock.derived, so a
 * second call first drops them: idempotent, and callable again after a pass changed
 * stage_policy or partition. Without a device only the byte fields are derived.
 * Returns the number of errors reported (`name` for an unknown model/device field,
 * `value` for a bad value, a partition that does not sum to the layers or has the wrong
 * length, tensor_parallel not dividing heads, ...). The model and device it validated
 * are kept in the pipeline (Pipeline.cost_inputs) for rederive_costs and
 * costmodel_get. driver_compile calls it once, before the passes. */
int derive_costs(Diag *d, Pipeline *p);

/* What passes call after changing stage_policy or partition: derive_costs again from the
 * model and device derive_costs validated, without reading them again and without
 * diagnostics (a partition written by cm_set_partition is valid by construction).
 * p must have been through derive_costs (a bug otherwise: die). */
void rederive_costs(Pipeline *p);

/* Architectures: llama = RMSNorm + SwiGLU + rotary, no biases, no dropout (Touvron et
 * al. 2023); gpt = LayerNorm + GELU + learned positions, biases, dropout (Megatron-LM);
 * mlp = residual MLP blocks only (LayerNorm + GELU, no attention; the runtime's `mlp`
 * workload). */
typedef enum ModelArch { ARCH_GPT, ARCH_LLAMA, ARCH_MLP } ModelArch;

/* How the attention core is stored: flash keeps only the per-row log-sum-exp (Dao et
 * al. 2022); eager keeps the a*s*s softmax (and dropout) tensors (Korthikanti §4.1). */
typedef enum AttnImpl { ATTN_FLASH, ATTN_EAGER } AttnImpl;

/* A model block after validation. Integer shapes are held as doubles for the
 * arithmetic (all validated as integers in [1, 2^31)). */
typedef struct ModelShape {
    ModelArch arch;
    AttnImpl attention;
    double layers;     /* L */
    double hidden;     /* h */
    double heads;      /* a */
    double kv_heads;   /* g (grouped-query attention; = a by default) */
    double ffn;        /* f (default 4h for gpt/mlp, 256-rounded 8h/3 for llama) */
    double vocab;      /* V_voc */
    double seq;        /* s, tokens per sample */
    double mbs;        /* b, samples per micro-batch */
    double elem;       /* e, bytes per activation element: bf16/fp16 2, fp32 4 */
    bool seqpar;       /* sequence parallelism with the tensor parallel ranks: the
                        * activations outside attention and MLP are split /t too
                        * (Korthikanti §4.2.2); field `sequence_parallel 1` */
    /* Mixture of experts (docs/cost-model.md "Mixture of experts"): with experts N > 1
     * every layer's MLP is N experts of width expert_ffn behind a router that sends each
     * token to topk K of them (Shazeer et al. 2017; Fedus et al. 2022, Switch; Jiang et
     * al. 2024, Mixtral). N = 1 (the default) is the dense MLP. */
    double experts;    /* N, field `experts` (default 1) */
    double topk;       /* K, field `topk` (default 1), 1 <= K <= N */
    double expert_ffn; /* F, one expert's MLP width, field `expert_ffn` (default ffn) */
} ModelShape;

/* A device block after validation. Absent bandwidths are +inf, absent latencies 0. */
typedef struct DeviceSpec {
    bool has_memory;
    double memory;       /* bytes of device memory */
    double reserved;     /* bytes not available to training (CUDA context, workspaces) */
    double peak_flops;   /* dense FLOP/s at the model's dtype (peak_tflops * 1e12) */
    double efficiency;   /* achieved fraction of peak for GEMM-dominated work, (0, 1] */
    double mem_bw;       /* device memory bandwidth, bytes/s (memory-bound recompute) */
    double host_bw;      /* host link, bytes/s each direction (swap) */
    double host_latency; /* ms; kept for completeness, the SO/SI time of docs/spec.md "Time" has no latency */
    double host_link_ranks; /* consecutive ranks sharing one host link (>= 1, default 1;
                             * docs/simulator.md "Shared host links") */
    double peer_bw;      /* link to the neighbouring stage, bytes/s */
    double peer_latency; /* ms per message */
    double dp_bw;        /* link to the data-parallel peers (inter-node by default), bytes/s
                          * per GPU each direction */
    double dp_latency;   /* ms per step of a ring collective over that link */
} DeviceSpec;

/* Validates an entity's fields into a ModelShape / DeviceSpec. Unknown key: `name` at
 * the field; bad value (wrong kind or unit, not a positive integer, unknown arch or
 * dtype, efficiency outside (0, 1]): `value` at the field; a missing required field
 * (model: layers hidden heads vocab seq; device: peak_tflops): `value` at the entity.
 * Returns the number of errors; *out is filled with defaults where fields are absent. */
int model_read(Diag *d, const Entity *e, ModelShape *out);

/* Model m's architecture by name ("gpt", "llama", "mlp"): its `arch` field, else the
 * default model_read leaves (gpt). The one place that default is spelt, read by the code
 * generator's CPU workloads and by `run`'s announcement. */
const char *model_arch_name(const Entity *m);
int device_read(Diag *d, const Entity *e, DeviceSpec *out);

/* The pieces of a model a partition moves around (Obscura §7.2). */
typedef enum CmUnit { CM_EMBED, CM_ATTN, CM_MLP, CM_HEAD } CmUnit;

/* The cost of a piece of the model, per micro-batch, on one tensor-parallel rank.
 * act: bytes F keeps with no recomputation; ckpt: bytes F keeps under the policy (the
 * policy's saved set; = act for POLICY_NONE); r: recompute time under the policy (0 for
 * POLICY_NONE); w: the weight-gradient part of b; fcomm, bcomm, rcomm: the Megatron
 * all-reduces inside f, b and r (cm_allreduce_ms; 0 when t = 1); a2a: the expert-parallel
 * dispatch and combine all-to-alls inside f, and again inside b (and inside r when r
 * re-runs the forward; cm_alltoall_ms; 0 when E = 1); wact: bytes B keeps until W (inputs and
 * output gradients of the weighted layers, <= act); params: parameters held (after /t
 * and, for experts, /E); eparams: the part of params in experts. */
typedef struct CmCost {
    double f, b, w, r;      /* ms, all-reduces and all-to-alls included */
    double fcomm, bcomm, rcomm; /* ms of f, b, r spent in tensor-parallel all-reduces */
    double a2a;             /* ms of f (and of b) spent in expert-parallel all-to-alls */
    double act, ckpt, wact; /* bytes */
    double work;            /* bytes of transient working memory while an F, B or R runs:
                             * the largest of the units' (docs/cost-model.md "Working
                             * memory"), not a sum */
    double params;          /* parameters */
    double eparams;         /* of which expert parameters (sharded over the E ranks) */
} CmCost;

/* What the passes need: the model, device and partition of a pipeline, validated once. */
typedef struct CostModel {
    ModelShape model;
    DeviceSpec device;
    bool has_device;   /* without a device, times are 0 */
    int32_t tp;        /* tensor parallel degree t >= 1 */
    int32_t ep;        /* expert parallel degree E >= 1 (1 for a dense model) */
    int32_t nv;        /* virtual stages P*V */
    int64_t *ubeg;     /* [nv + 1] half-layer unit boundaries, ubeg[0] = 0, ubeg[nv] = 2L */
} CostModel;

/* The model and device of a pipeline after validation (Pipeline.cost_inputs). */
typedef struct CostInputs {
    ModelShape model;
    DeviceSpec device;
    bool has_device;
    int32_t tp;
    int32_t ep;
} CostInputs;

/* Validates p's model, device, tensor_parallel and partition into cm (which the caller
 * frees with costmodel_free, also after errors). `partition even` (or none) gives every
 * virtual stage 2L/(P*V) half-layer units, the remainder going one each to the last
 * virtual stages. An explicit partition has P*V entries (one per virtual stage, in
 * model order) or P (one per rank, split evenly over the rank's chunks, the remainder
 * to its later chunks); entries are layers, multiples of 0.5, >= 0, summing to L.
 * Returns the number of errors; p must have a model. */
int costmodel_init(Diag *d, const Pipeline *p, CostModel *cm);
void costmodel_free(CostModel *cm);

/* The same for a pipeline derive_costs has costed, for the passes: from the model and
 * device it validated and the current partition, with no diagnostics. p must have a
 * model and have been through derive_costs, and its partition be valid (a bug
 * otherwise: die). Free cm with costmodel_free. */
void costmodel_get(const Pipeline *p, CostModel *cm);

/* Model FLOPs of one iteration of one pipeline replica: 3 x M x the forward FLOPs of one
 * micro-batch through the whole model, summed over the tensor-parallel ranks (the backward
 * is twice the forward; recomputation is not counted: model FLOPs, as Chowdhery et al.
 * 2022 App. B and Narayanan et al. 2021 §5.1 define them). The units' FLOPs are those
 * docs/cost-model.md "FLOPs and times" states. NaN when p has no validated model
 * (Pipeline.cost_inputs is NULL). */
double cm_iteration_flops(const Pipeline *p);

/* The cost of one unit under a policy. first: the unit is the first transformer unit of
 * its virtual stage (full recomputation must then keep an MLP unit's input too). */
void cm_unit(const CostModel *cm, CmUnit u, bool first, RecomputePolicy pol, CmCost *out);

/* The keep-sets a planner tries (lynx_overlap, swap_aware_recompute), into out[]; returns
 * how many: keep() (nothing but the layer input), then one tensor more at a time, in
 * order of the rebuild time a kept byte saves (the tensor's rebuild ms over its bytes,
 * mlp_in's including the all-reduce it would repeat), up to every tensor the model has:
 * the greedy ratio order of the per-operator knapsack Lynx-HEU solves for one layer
 * (Lynx §4.2) and Obscura's swapping-aware choice of operators (§6.2). */
int cm_keep_ladder(const CostModel *cm, uint32_t out[KEEP_N + 1]);

/* The cost of a contiguous slice: half-layer units [u0, u1) plus the embedding and/or
 * head when asked; the sum of its units. */
void cm_slice(const CostModel *cm, int64_t u0, int64_t u1, bool embed, bool head,
              RecomputePolicy pol, CmCost *out);

/* The cost of virtual stage v (0 <= v < nv) under a policy: cm_slice of its units. */
void cm_vstage(const CostModel *cm, int32_t v, RecomputePolicy pol, CmCost *out);

/* The same with the policy's argument (RecomputeDir.arg): block(n) fully recomputes the
 * first n layers of the virtual stage and keeps the rest (docs/cost-model.md
 * "Recomputation policies"); keep keeps the layer input and the tensors of its mask
 * ("Keep-sets"). cm_unit and cm_slice read block as full and keep as keep(). */
void cm_vstage_arg(const CostModel *cm, int32_t v, RecomputePolicy pol, uint32_t arg,
                   CmCost *out);

/* The part of each virtual stage's checkpoint (COST_CKPT, bytes) that its transformer
 * layers keep, into out[P*V]; the rest of the checkpoint is what the embedding and the
 * head keep (they are never recomputed). The arena plan may place the two parts apart
 * (runtime/region.h). -1 where it is not known: a pipeline without a `model`, or a
 * virtual stage whose act or ckpt the source sets. */
void cm_ckpt_layers(const Pipeline *p, double *out);

/* One ring all-reduce of `bytes` over the t tensor-parallel ranks, ms:
 * 2(t-1)/t * bytes / peer_bw + 2(t-1) * peer_latency (Thakur, Rabenseifner and Gropp
 * 2005, §4.5: reduce-scatter then all-gather, t-1 steps each); 0 when t = 1 or without
 * a device. The tensor-parallel group sits in one node and talks over the device's
 * peer link (NVLink or PCIe: docs/cost-model.md "Tensor-parallel communication"). */
double cm_allreduce_ms(const CostModel *cm, double bytes);

/* One all-to-all over the E expert-parallel ranks in which each rank sends `bytes` in all
 * (the tokens it routes to experts, 1/E of them staying local), ms:
 * (E-1) * peer_latency + (E-1)/E * bytes / peer_bw (pairwise exchange, E-1 steps; the
 * expert-parallel group sits in one node: docs/cost-model.md "Mixture of experts"); 0
 * when E = 1 or without a device. */
double cm_alltoall_ms(const CostModel *cm, double bytes);

/* Parameters of the whole model (one copy, no tensor or expert parallelism) and those
 * active for one token (the embedding, attention, norms, routers, head and topk of the
 * experts of each layer: Fedus et al. 2022 §2, "parameters per token"). For a dense model
 * the two are equal. Reads only cm->model. */
void cm_model_params(const CostModel *cm, double *total, double *active);

/* The data-parallel settings the model states depend on (docs/cost-model.md "Data
 * parallelism"): D replicas, ZeRO stage 0..3, gradient bytes per parameter (2 or 4). */
typedef struct CmDp {
    int32_t D;         /* data_parallel, >= 1 */
    int32_t zero;      /* 0..3 */
    double grad_bytes; /* grad_dtype_bytes[grad_dtype] */
} CmDp;

/* The CmDp of a pipeline's settings. */
CmDp cm_dp(const Pipeline *p);

/* Model-state bytes per rank for `params` parameters held by the rank (after /t), for
 * mixed-precision Adam (Rajbhandari et al. 2020, ZeRO §5; K = 12 bytes of fp32 master
 * copy, momentum and variance), with g = grad_bytes and D = replicas:
 *   zero 0: (2 + g + 12) params     zero 1: (2 + g) params + 12 params / D
 *   zero 2: 2 params + (g + 12) params / D     zero 3: (2 + g + 12) params / D.
 * g = 2 and zero 0 give the 16 bytes per parameter of ZeRO §3.1; g = 4 gives Megatron-LM's
 * 18 (and 6 + 12/D with its distributed optimizer, zero 1). */
double cm_weight_bytes(double params, const CmDp *dp);

/* What ZeRO-3 gathers for one layer's F or B, bytes per rank: the 16-bit parameters of
 * the largest gather unit the rank holds (`layer_params`, after /t: a transformer layer,
 * the embedding or the head); 0 below zero 3 or with D = 1. */
double cm_zero3_gather_bytes(double layer_params, const CmDp *dp);

/* The data-parallel stream of one virtual stage (docs/cost-model.md "Data-parallel time"),
 * ms; all 0 with D = 1 or no parameters. */
typedef struct CmDpTime {
    double reduce;      /* the gradient reduction after its last B/W: a ring all-reduce of
                         * params x g bytes at zero 0, a reduce-scatter at zero 1-3 */
    double opt;         /* the optimizer step on the compute stream after it */
    double gather_after;/* the all-gather of the updated 16-bit parameters after the step
                         * (zero 1 and 2) */
    double gather_op;   /* zero 3: the all-gather of the 16-bit parameters before each F,
                         * R and B */
} CmDpTime;

/* One ring collective of `bytes` (the full buffer) over D ranks, ms (Patarasuk and Yuan
 * 2009; NCCL's ring): an all-reduce moves 2(D-1)/D x bytes per rank in 2(D-1) steps,
 * a reduce-scatter or an all-gather (D-1)/D x bytes in D-1 steps:
 *   all-reduce 2(D-1)/D x bytes / bw + 2(D-1) x latency, the others half of it.
 * bw in bytes/s (+inf: no bandwidth term), latency in ms per step; 0 when D <= 1. */
double cm_ring_allreduce_ms(double bytes, double D, double bw, double latency);
double cm_ring_gather_ms(double bytes, double D, double bw, double latency);

/* Bytes of device memory the optimizer step reads and writes per parameter it updates:
 * mixed-precision Adam reads the gradient (g) and the fp32 master weight, momentum and
 * variance (12) and writes the three back (12) and the 16-bit parameter (2): 26 + g. */
double cm_opt_bytes_per_param(const CmDp *dp);

/* The data-parallel times of a virtual stage of `params` parameters (after /t) on a rank
 * whose data-parallel link is dp_bw bytes/s and dp_latency ms per step and whose memory
 * bandwidth is mem_bw bytes/s (docs/cost-model.md "Data-parallel time"; ZeRO §7.2 for the
 * volumes, Megatron-LM's distributed optimizer for the order). The optimizer step updates
 * params parameters at zero 0, params / D at zero 1-3 (its shard), at
 * cm_opt_bytes_per_param bytes each over mem_bw. */
void cm_dp_time(double params, const CmDp *dp, double dp_bw, double dp_latency,
                double mem_bw, CmDpTime *out);

/* cm_dp_time for a virtual stage whose `params` include `eparams` expert parameters with
 * expert_parallel E: the dense part is reduced, stepped and gathered over the D replicas,
 * the experts' over the D / E replicas that hold the same experts (Megatron-core's
 * expert-data-parallel group; docs/cost-model.md "Data-parallel time"), one after the
 * other on the data-parallel stream. eparams = 0 or E = 1 is cm_dp_time. */
void cm_dp_time_moe(double params, double eparams, int32_t E, const CmDp *dp, double dp_bw,
                    double dp_latency, double mem_bw, CmDpTime *out);

/* Time added to every cross-rank dependency: peer_latency + (e*s*b*h/t) / peer_bw, ms
 * (one activation or gradient message; Narayanan et al. 2021 §4.1 scatter/gather). */
double cm_p2p_ms(const CostModel *cm);

/* Writes a partition in half-layer units (units[nv]) back as Pipeline.partition in layers
 * (0.5 steps), explicit; for passes that move units (partition_adjust, Obscura Alg. 1).
 * Call rederive_costs afterwards. */
void cm_set_partition(Pipeline *p, const int64_t *units, int32_t nv);

#endif
