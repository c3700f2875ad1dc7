/* emit_c.h - C code generation for the CPU backend: one straight-line C file per rank,
 * main.c with the program's constant tables, and build files (docs/runtime.md).
 *
 * Generated code calls only runtime/piperun.h. Every op becomes one pr_op() call; the
 * cross-rank messages of the comm lowering (comm_plan of comm.h, the plan the checker
 * verified) become pr_recv() right before the consuming op and pr_send() right after
 * the producing op, in the plan's order. The activation arena of each rank is planned
 * here (arena_plan.h), once for the mlp workload's real region sizes (runtime/mlp.h)
 * and once for the synthetic workload's cost-model sizes; the offsets are constant
 * tables in the generated code. Nothing from the source reaches generated C except
 * numbers and names that are escaped (string literals byte-escaped, comments cleaned). */
#ifndef PIPEC_EMIT_C_H
#define PIPEC_EMIT_C_H

#include <stdbool.h>
#include <stdint.h>

#include "arena_plan.h"
#include "diag.h"
#include "ir.h"
#include "util.h"

/* One generated file: a name inside the output folder and its contents. */
typedef struct EmitFile {
    char *name;
    StrBuf text;
} EmitFile;

typedef struct EmitOut {
    EmitFile *files;
    uint32_t n, cap;
    char *progname;   /* the program's file name (the pipeline name, sanitised) */
} EmitOut;

/* The mlp workload's model shape and region sizes for a pipeline. */
typedef struct MlpShape {
    int vocab, C, L, T, B;
    int arch;             /* 0 mlp, TF_GPT or TF_LLAMA (runtime/tf_layout.h): the workload */
    int heads, kv_heads, ffn;  /* gpt/llama only */
    int *layers;          /* [P*V] blocks per virtual stage */
    ArenaSizes *sizes;    /* [P*V] act/ckpt/wact bytes, as runtime/mlp.h computes them */
} MlpShape;

/* Derives the model workload's shape from the pipeline's `model` (fields layers hidden
 * vocab seq mbs; arch, and for gpt/llama heads kv_heads ffn) and `partition` (even, or whole layers per virtual stage). Returns 0, or -1
 * with a one-line reason in why (no model, missing field, half-layer partition, too
 * large for the CPU workload). */
int mlp_shape(const Pipeline *p, MlpShape *out, char *why, size_t why_n);
void mlp_shape_free(MlpShape *s);

/* Region sizes of one slice, the same arithmetic as runtime/mlp.c's act layout (a unit
 * test holds the two together): blocks nl, embedding/head flags. Bytes. */
ArenaSizes mlp_region_sizes(int vocab, int C, int T, int B, int nl, bool embed, bool head);

/* The workspace rank s of p keeps above its arena for the model workload of shape sh,
 * bytes (64-aligned): the largest temporaries an F of the rank that keeps only its
 * checkpoint (its (v,m) has an R or RO) runs in: the mlp workload one block's
 * (runtime/mlp_layout.h mlp_scratch_floats), gpt/llama the slice's whole act region
 * (runtime/transformer.c tf_forward_split); 0 when the rank recomputes nothing. What
 * the generated program reserves (PrRankDesc.workspace_bytes) and `check --mem` adds
 * to the runtime's arena. */
int64_t mlp_workspace(const Pipeline *p, const MlpShape *sh, int32_t s);

/* Generates the files of the CPU backend for p (compiled and checked). source names
 * the .pipe file in the header comments. Returns 0, or the number of errors reported
 * through d. */
int emit_c(Diag *d, const Pipeline *p, const char *source, EmitOut *out);
void emit_out_free(EmitOut *out);

/* Writes every file into dir (created if missing), each atomically. Returns 0, or -1
 * with errno set and *failed naming the file that could not be written (NULL when
 * dir itself could not be created). */
int emit_write(const EmitOut *out, const char *dir, const char **failed);

#endif
