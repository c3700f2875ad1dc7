/* transformer.h - the `gpt` and `llama` workloads: decoder-only transformers that the
 * generated pipeline programs really train, split into slices over virtual stages, with
 * the same slice, region and op contract as runtime/models/mlp.h (docs/model.md).
 *
 * Dimension legend (llm.c style):
 *   B  = micro-batch size, T = sequence length, N = B*T tokens, C = hidden size
 *   NH = attention heads, hd = C/NH head size, NKV = key/value heads, K = NKV*hd
 *   F  = MLP (ffn) width, V = vocabulary, L = layers, M = micro-batches per iteration
 *
 * The models, fp32 everywhere, every matrix product through cblas_sgemm:
 *   gpt (GPT-2 / Megatron-LM layer, Radford et al. 2019):
 *     x_0     = wte[token] + wpe[t]                                (B,T,C)
 *     a       = x_l + proj(attn(qkv(LN1(x_l))))                     causal, NH heads
 *     x_{l+1} = a + fc2(GELU(fc1(LN2(a))))
 *   llama (Touvron et al. 2023):
 *     x_0     = wte[token]
 *     a       = x_l + proj(attn(rope(qkv(RMS1(x_l)))))              causal, grouped-query
 *     x_{l+1} = a + down(SiLU(gate(RMS2(a))) * up(RMS2(a)))         SwiGLU
 *   logits = head(norm_f(x_L)) (B,T,V), loss = mean cross-entropy of the next token.
 * gpt linears have biases, llama's none; LayerNorm/RMSNorm eps 1e-5; RoPE base 10000
 * on (2i, 2i+1) pairs of each head; the head is untied from the embedding. No dropout.
 *
 * Slices, regions and ops: as for mlp (MlpSlice: layers layer0.., the embedding on the
 * first virtual stage, final norm + head + loss on the last). The region of a (slice,
 * micro-batch) is tf_layout.h's: nested prefixes ckpt <= wact <= act, floats only, so
 * SO/SI may move it and the arena plan may place its pieces apart (runtime/region.h:
 * cut at ckpt and wact). F keeps act (keep_all) or only ckpt (an R follows), R rebuilds
 * the rest, B writes input gradients (split: and leaves in wact what W needs), W
 * accumulates weight gradients. Pipelined gradients are
 * bit-identical to tf_reference_iteration's when each rank runs a virtual stage's B/W in
 * micro-batch order, and within rounding otherwise (docs/model.md).
 *
 * Threading: as mlp.h: ops of different slices may run at once; nothing is static.
 * Errors: tf_create/tf_forward return NULL/-1 when out of memory; shapes that do not fit
 * are rejected by tf_config_check; calls that break the contract assert.
 */
#ifndef PIPEC_TRANSFORMER_H
#define PIPEC_TRANSFORMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mlp.h"
#include "tf_layout.h"

/* Model shape: dims (tf_layout.h), L >= 0 layers, M >= 1 micro-batches per iteration
 * (the head's gradient is scaled 1/M). */
typedef struct TfConfig {
    TfDims d;
    int L;
    int M;
} TfConfig;

/* 0 when usable, else -1 and a one-line reason in why ("heads 3 do not divide hidden
 * size 16"). Also rejects tensors whose element counts do not fit an int. */
int tf_config_check(const TfConfig *c, char *why, size_t why_n);

/* Slices from a partition, as mlp_slices_init: layers[v] per virtual stage, summing to
 * c->L. Returns 0 or -1. */
int tf_slices_init(const TfConfig *c, int nv, const int *layers, MlpSlice *slices);
/* The whole model as one slice. */
MlpSlice tf_whole(const TfConfig *c);

/* One named parameter tensor: floats [off, off+n) of the parameter (and gradient)
 * allocation; layer -1 = embedding, L = head, else the layer. */
typedef struct TfTensor {
    char name[24];
    size_t off, n;
    int layer;
} TfTensor;

/* Per-layer parameter slots (absent ones have no tensor: gpt has no UP, llama no
 * biases). FC1 is gpt's fc1 / llama's gate, FC2 gpt's fc2 / llama's down. */
enum { TF_LN1_W, TF_LN1_B, TF_QKV_W, TF_QKV_B, TF_PROJ_W, TF_PROJ_B, TF_LN2_W, TF_LN2_B,
       TF_FC1_W, TF_FC1_B, TF_FC2_W, TF_FC2_B, TF_UP_W, TF_NSLOTS };

typedef struct TfModel {
    TfConfig cfg;
    size_t nparams;
    float *param_mem;     /* (nparams) every parameter */
    float *grad_mem;      /* (nparams) their gradients, same offsets */
    int ntensors;
    TfTensor *tensors;    /* (ntensors) wte [wpe] h0.ln1_w ... lnf_w [lnf_b] head_w */
    size_t *slot;         /* (L, TF_NSLOTS) offset of each layer slot, (size_t)-1 absent */
    size_t wte, wpe, lnf_w, lnf_b, head_w;   /* offsets; (size_t)-1 when absent */
} TfModel;

/* Deterministic initial weights for seed (splitmix64): wte, wpe uniform +-0.5, linear
 * weights uniform +-1/sqrt(fan_in), biases 0, norm scales 1, shifts 0. NULL when c is
 * unusable or out of memory. */
TfModel *tf_create(const TfConfig *c, uint64_t seed);
void tf_free(TfModel *m);

/* Bytes of the hidden state between slices (N*C floats), and of a slice's region. */
size_t tf_io_bytes(const TfConfig *c);
/* tf_act_bytes, tf_ckpt_bytes, tf_wact_bytes, tf_region_cuts (tf_region_whole's cuts). */
PR_LAYOUT_BYTES_DECL(tf, TfConfig, MlpSlice);

/* F: as mlp_forward. in (N,C) or NULL on the embedding slice; tokens/targets (B,T);
 * out (N,C) or NULL on the head slice; loss receives the head's mean cross-entropy.
 * Returns 0, or -1 when out of memory (keep_all=false runs in a temporary region). */
int tf_forward(TfModel *m, const MlpSlice *s, float *out, float *loss, void *act,
               const float *in, const int *tokens, const int *targets, bool keep_all);
/* F, R, B, W with the region in pieces (runtime/region.h PrRegion over the cuts of
 * tf_region_cuts, each piece anywhere; those an op does not touch may be NULL), as
 * mlp_forward_split and friends; tf_forward(act) is tf_forward_split of the region
 * contiguous at act (tf_region_whole). */
/* ws: the workspace an F without keep_all runs in (the slice's whole act region,
 * TfLayout.act floats; the rank's PrRankDesc.workspace_bytes); NULL: it is allocated.
 * Returns 0, -1 when out of memory, -2 when ws_bytes is too small. */
int tf_forward_split(TfModel *m, const MlpSlice *s, float *out, float *loss, const PrRegion *g,
                     const float *in, const int *tokens, const int *targets, bool keep_all,
                     void *ws, size_t ws_bytes);
void tf_recompute(TfModel *m, const MlpSlice *s, const PrRegion *g, const int *tokens);
void tf_backward(TfModel *m, const MlpSlice *s, float *din, const PrRegion *g,
                 const float *dout, const int *tokens, const int *targets, bool split);
void tf_weight_grad(TfModel *m, const MlpSlice *s, const PrRegion *g, const int *tokens);

void tf_zero_grad(TfModel *m, const MlpSlice *s);
/* p -= lr * grad on the slice's parameters. */
void tf_sgd_step(TfModel *m, const MlpSlice *s, float lr);
bool tf_param_in_slice(const TfModel *m, int i, const MlpSlice *s);

/* The sequential reference: M micro-batches of the whole model in order, gradients
 * accumulated with scale 1/M (tokens, targets (M,B,T)). Mean loss, NAN when out of
 * memory. */
float tf_reference_iteration(TfModel *m, int M, const int *tokens, const int *targets);

/* Bytes one layer adds to what F keeps (tf_layer_fwd_bytes): what the unit test holds
 * equal to the cost model's per-layer activation bytes at fp32 (docs/model.md). */
size_t tf_layer_act_bytes(const TfConfig *c);

#endif
