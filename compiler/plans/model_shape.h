/* model_shape.h - the shape of the model a generated program trains (the mlp, gpt and
 * llama workloads of runtime/models/mlp.h and runtime/models/transformer.h), derived from the
 * pipeline's `model` and `partition`: dimensions, blocks per virtual stage and the
 * region sizes the arena plan places (docs/runtime.md "Workloads"). The code generator
 * writes it into the program, `pipec run` and `check --mem` say whether the model
 * workload can run the file, and the CUDA stream verifier plans with its sizes. */
#ifndef PIPEC_MODEL_SHAPE_H
#define PIPEC_MODEL_SHAPE_H

#include <stdbool.h>
#include <stddef.h>

#include "arena_plan.h"
#include "ir.h"

/* The mlp workload's model shape and region sizes for a pipeline. */
typedef struct MlpShape {
    int vocab, C, L, T, B;
    int arch;             /* 0 mlp, TF_GPT or TF_LLAMA (runtime/models/tf_layout.h): the workload */
    int heads, kv_heads, ffn;  /* gpt/llama only */
    int *layers;          /* [P*V] blocks per virtual stage */
    bool *per_layer;      /* [P*V] layer-granular recomputation (opsem_remat_use): the
                             gpt/llama layout that rebuilds one layer at a time */
    ArenaSizes *sizes;    /* [P*V] act/ckpt/wact bytes, as runtime/models/mlp.h computes them */
} MlpShape;

/* Derives the model workload's shape from the pipeline's `model` (fields layers hidden
 * vocab seq mbs; arch, and for gpt/llama heads kv_heads ffn) and `partition` (even, or
 * whole layers per virtual stage). Returns 0, or -1 with a one-line reason in why (no
 * model, missing field, half-layer partition, too large for the CPU workload). */
int mlp_shape(const Pipeline *p, MlpShape *out, char *why, size_t why_n);
void mlp_shape_free(MlpShape *s);

/* The model shape as a command computes it once (model_shape_of) and hands it to every
 * consumer: the emitter, the stream-plan verifier, `check --mem` and run's report. */
typedef struct WorkloadShape {
    bool ok;              /* the model workload runs the pipeline */
    MlpShape s;           /* arrays valid when ok; arch also when not (for messages) */
    char why[256];        /* mlp_shape's one-line reason when !ok */
} WorkloadShape;

/* Computes p's model shape (mlp_shape) into out; never fails: !out->ok says why not.
 * model_shape_free frees it. */
void model_shape_of(const Pipeline *p, WorkloadShape *out);
void model_shape_free(WorkloadShape *m);

/* Region sizes of one slice, the same arithmetic as runtime/models/mlp.c's act layout (a unit
 * test holds the two together): blocks nl, embedding/head flags. Bytes. */
ArenaSizes mlp_region_sizes(int vocab, int C, int T, int B, int nl, bool embed, bool head);

/* The workspace rank s of p keeps above its arena for the model workload of shape sh,
 * bytes (64-aligned): the largest temporaries an F of the rank that keeps only its
 * checkpoint (its (v,m) has an R or RO) runs in: the mlp workload one block's
 * (runtime/models/mlp_layout.h mlp_scratch_floats), gpt/llama the slice's whole act region
 * (runtime/models/transformer.c tf_forward_split); 0 when the rank recomputes nothing. What
 * the generated program reserves (PrRankDesc.workspace_bytes) and `check --mem` adds
 * to the runtime's arena. */
int64_t mlp_workspace(const Pipeline *p, const MlpShape *sh, int32_t s);

#endif
