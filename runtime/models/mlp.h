/* mlp.h - the `mlp` workload: a small character-level language model that the
 * generated pipeline programs really train, split into slices over virtual stages.
 *
 * Dimension legend (llm.c style):
 *   B  = micro-batch size (sequences per micro-batch)
 *   T  = sequence length (tokens per sequence)
 *   C  = hidden size (channels); the MLP is 4C wide
 *   V  = vocabulary size (256 byte-level characters by default)
 *   L  = number of residual MLP blocks (layers)
 *   M  = micro-batches per iteration
 *
 * The model, fp32 everywhere:
 *   x_0     = wte[token]                                  embedding       (B,T,C)
 *   x_{l+1} = x_l + fc2(GELU(fc1(LN_l(x_l))))             block l < L     (B,T,C)
 *   logits  = head(LN_f(x_L))                             output head     (B,T,V)
 *   loss    = mean over (B,T) of -log softmax(logits)[target]
 * fc1 is Linear C->4C, fc2 is Linear 4C->C, head is Linear C->V; GELU is the tanh
 * approximation. The embedding and the head are separate (untied) tensors, so the first
 * and the last virtual stage share no parameter.
 *
 * Pipeline split. A slice is the part of the model one virtual stage owns: the embedding
 * (virtual stage 0 only), a contiguous range of blocks, and the final layer norm + head +
 * loss (last virtual stage only). Between consecutive slices flows the hidden state
 * (B,T,C) forward and its gradient (B,T,C) backward (mlp_io_bytes each).
 *
 * Per (slice, micro-batch) activation memory ("act region"), carved by the runtime from
 * its arena: a plain byte buffer without pointers inside, so SO/SI may copy it to the
 * host and back (to the same or another 64-byte aligned address) between ops. Layout,
 * as prefixes of one region of mlp_act_bytes bytes:
 *   [0, mlp_ckpt_bytes)   the checkpoint: the slice input (B,T,C); empty on the
 *                         embedding slice, whose input is the tokens. This is all that
 *                         F keeps with keep_all=false; R rebuilds the rest.
 *   [0, mlp_wact_bytes)   what a split B leaves for W: activations and the output
 *                         gradients of every linear/layer norm. The rest of the region
 *                         (B's temporaries) may be freed after B.
 *   [0, mlp_act_bytes)    everything F keeps with keep_all=true (or F + R), plus space
 *                         that B uses for gradients.
 * So ckpt <= wact <= act, matching the pipeline memory model: F adds act (or ckpt when an
 * R follows), R adds act - ckpt, B frees all but wact when a W follows, W frees wact.
 * The region must be 64-byte aligned (float alignment is the hard requirement). The
 * static arena plan may place the pieces between these prefixes apart (runtime/
 * region.h); the *_split entry points take the region as a PrRegion of those pieces.
 *
 * Threading. Every op of one slice runs on the thread of its rank; ops of different
 * slices may run at the same time on different threads: a slice's ops touch only its own
 * parameters and gradients (disjoint ranges of the shared allocation), its act regions,
 * and the buffers passed in. Nothing is global or static. Matrix products call
 * cblas_sgemm; set OpenBLAS to 1 thread (openblas_set_num_threads(1)) when several ranks
 * compute at once, and for bit-reproducible comparisons.
 *
 * Loss scaling. The loss of an iteration is the mean over its M micro-batches, so the
 * head's backward scales each micro-batch's gradient by 1/M (MlpConfig.M). Weight
 * gradients accumulate (+=) over the micro-batches of an iteration; mlp_zero_grad clears
 * them. With the same micro-batch order of accumulation, a pipelined iteration gives
 * gradients bit-identical to mlp_reference_iteration; any order is within ~1e-6 relative
 * (docs/model.md).
 *
 * Errors: functions that allocate return 0 or -1 (out of memory; nothing changed);
 * sizes that overflow are rejected by mlp_config_check. Calls with shapes that do not
 * fit the model are programming errors (assert).
 */
#ifndef PIPEC_MLP_H
#define PIPEC_MLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model_common.h"
#include "region.h"

/* Model shape, from the pipeline's `model` block (vocab, hidden, layers, seq, batch)
 * and its micro-batch count. All fields >= 1 except L >= 0. */
typedef struct MlpConfig {
    int vocab;   /* V: vocabulary size; tokens are 0..V-1 (256: raw bytes) */
    int C;       /* hidden size */
    int L;       /* residual MLP blocks */
    int T;       /* sequence length */
    int B;       /* micro-batch size */
    int M;       /* micro-batches per iteration: the head's gradient is scaled 1/M */
} MlpConfig;

/* Checks a config: every field >= 1 and every tensor small enough that its byte size
 * and element count fit in size_t and int offsets. Returns 0 when usable, else -1 and
 * writes a one-line reason ("hidden size C must be >= 1") to why (why_n bytes). */
int mlp_config_check(const MlpConfig *c, char *why, size_t why_n);

/* The part of the model one virtual stage owns: blocks layer0 .. layer0+nlayers-1,
 * plus the embedding when embed (virtual stage 0), plus LN_f + head + loss when head
 * (the last virtual stage). nlayers may be 0 (an identity slice when neither flag). */
typedef struct MlpSlice {
    int vstage;      /* virtual stage index (for messages only) */
    int layer0;      /* first block, 0 <= layer0 <= L */
    int nlayers;     /* number of blocks, layer0 + nlayers <= L */
    bool embed;      /* owns the token embedding (the slice's input is the tokens) */
    bool head;       /* owns LN_f, the head and the loss (the slice's output is the loss) */
    bool per_layer;  /* layer-granular recomputation (gpt/llama only, runtime/models/tf_layout.h):
                        the program's PrVstage.per_layer */
} MlpSlice;

/* Fills slices[0..nv) from a partition: layers[v] blocks on virtual stage v, in model
 * order; the first gets the embedding, the last the head. Returns 0, or -1 when nv < 1,
 * a count is negative or the counts do not sum to c->L. */
int mlp_slices_init(const MlpConfig *c, int nv, const int *layers, MlpSlice *slices);

/* Parameter tensors, llm.c style: pointers into one allocation (see MlpModel). */
typedef struct MlpParams {
    float *wte;      /* (V,C) token embedding */
    float *ln_w;     /* (L,C) block layer norm scale */
    float *ln_b;     /* (L,C) block layer norm shift */
    float *fc1_w;    /* (L,4C,C) Linear C->4C weight (out, in) */
    float *fc1_b;    /* (L,4C) */
    float *fc2_w;    /* (L,C,4C) Linear 4C->C weight (out, in) */
    float *fc2_b;    /* (L,C) */
    float *lnf_w;    /* (C) final layer norm scale */
    float *lnf_b;    /* (C) final layer norm shift */
    float *head_w;   /* (V,C) output head weight (out, in) */
    float *head_b;   /* (V) */
} MlpParams;

/* A model: parameters and their gradients. Read-only for callers except through the
 * functions below; params.X and grads.X have the same shapes. */
typedef struct MlpModel {
    MlpConfig cfg;
    size_t nparams;        /* total number of parameter floats */
    float *param_mem;      /* (nparams) one allocation carved into params */
    float *grad_mem;       /* (nparams) one allocation carved into grads */
    MlpParams params;
    MlpParams grads;
    int ntensors;          /* number of named tensors (mlp_param_count) */
    char (*names)[24];     /* (ntensors) "wte", "h3.fc1_w", "lnf_b", "head_w", ... */
} MlpModel;

/* Creates a model with deterministic initial weights for seed: embedding and linear
 * weights uniform in +-1/sqrt(fan_in) (embedding: +-1), biases 0, layer norm scale 1,
 * shift 0; gradients zero. Returns NULL when c is unusable or out of memory. */
MlpModel *mlp_create(const MlpConfig *c, uint64_t seed);
/* A deep copy (parameters and gradients), e.g. the reference model for --check. */
MlpModel *mlp_clone(const MlpModel *m);
void mlp_free(MlpModel *m);

/* Bytes of the hidden state passed between virtual stages: B*T*C floats. The gradient
 * passed backward has the same size. */
size_t mlp_io_bytes(const MlpConfig *c);
/* mlp_act_bytes, mlp_ckpt_bytes, mlp_wact_bytes: bytes of the act region of one (slice,
 * micro-batch) (see the layout above): all of it (act), the checkpoint prefix kept when
 * R follows (ckpt), the prefix a split B keeps until W (wact); 0 for an identity slice;
 * multiples of 64. mlp_region_cuts: its piece boundaries in bytes (mlp_region_whole's). */
PR_LAYOUT_BYTES_DECL(mlp, MlpConfig, MlpSlice);
/* Bytes of parameters + gradients of a slice (the runtime's static memory). */
size_t mlp_weight_bytes(const MlpConfig *c, const MlpSlice *s);

/* F: forward of one micro-batch.
 *   in      (B,T,C) slice input; NULL on the embedding slice (tokens used instead)
 *   tokens  (B,T) token ids, used on the embedding slice (else may be NULL)
 *   targets (B,T) next-token ids, used on the head slice (else may be NULL)
 *   out     (B,T,C) slice output; NULL on the head slice
 *   loss    head slice: receives the mean cross-entropy of this micro-batch (unscaled
 *           by 1/M); else may be NULL
 *   act     the act region: keep_all=true fills all of it; keep_all=false writes only
 *           the ckpt prefix (act then needs only mlp_ckpt_bytes) and an R must follow
 * Returns 0, or -1 when out of memory (keep_all=false allocates temporaries). */
int mlp_forward(MlpModel *m, const MlpSlice *s, float *out, float *loss, void *act,
                const float *in, const int *tokens, const int *targets, bool keep_all);

/* R: rebuilds the full act region from its ckpt prefix (and tokens on the embedding
 * slice) after F with keep_all=false. Bit-identical to what F with keep_all=true keeps. */
void mlp_recompute(MlpModel *m, const MlpSlice *s, void *act, const int *tokens);

/* B: backward of one micro-batch; needs the full act region (F keep_all or F + R).
 *   dout    (B,T,C) gradient of the slice output; NULL on the head slice (the loss is
 *           the start, scaled 1/M)
 *   targets (B,T) on the head slice; tokens (B,T) on the embedding slice
 *   din     (B,T,C) receives the gradient of the slice input; NULL on the embedding slice
 * split=false also accumulates the slice's weight gradients (+=). split=true computes
 * input gradients only and leaves in the wact prefix of act what mlp_weight_grad needs. */
void mlp_backward(MlpModel *m, const MlpSlice *s, float *din, void *act, const float *dout,
                  const int *tokens, const int *targets, bool split);

/* W: accumulates (+=) the weight gradients of a split B from the wact prefix of act
 * (tokens (B,T) on the embedding slice). Same result as an unsplit B. */
void mlp_weight_grad(MlpModel *m, const MlpSlice *s, void *act, const int *tokens);

/* F, R, B and W with the act region in pieces (runtime/region.h PrRegion: piece k of
 * the cuts of mlp_region_cuts at its own address, as the static arena plan places it;
 * the pieces an op does not touch may be NULL: F without keep_all needs only the
 * checkpoint, W only [0, wact)). mlp_forward(act) is mlp_forward_split of the region
 * contiguous at act (mlp_region_whole), and so on; results are bit-identical wherever
 * the pieces lie. */
/* ws: the workspace an F without keep_all runs its temporaries in
 * (mlp_scratch_floats floats; the rank's PrRankDesc.workspace_bytes); NULL: they are
 * allocated. Returns 0, -1 when out of memory, -2 when ws_bytes is too small. */
int mlp_forward_split(MlpModel *m, const MlpSlice *s, float *out, float *loss,
                      const PrRegion *g, const float *in, const int *tokens,
                      const int *targets, bool keep_all, void *ws, size_t ws_bytes);
void mlp_recompute_split(MlpModel *m, const MlpSlice *s, const PrRegion *g, const int *tokens);
void mlp_backward_split(MlpModel *m, const MlpSlice *s, float *din, const PrRegion *g,
                        const float *dout, const int *tokens, const int *targets, bool split);
void mlp_weight_grad_split(MlpModel *m, const MlpSlice *s, const PrRegion *g,
                           const int *tokens);

/* Zeroes the gradients of the slice's parameters. */
void mlp_zero_grad(MlpModel *m, const MlpSlice *s);
/* Plain SGD on the slice's parameters: p -= lr * grad (grad is the gradient of the
 * iteration's mean loss). Does not clear the gradients. */
void mlp_sgd_step(MlpModel *m, const MlpSlice *s, float lr);

/* The whole model as one slice (embedding, all blocks, head): for the reference. */
MlpSlice mlp_whole(const MlpConfig *c);

/* The sequential single-rank reference: one iteration over M micro-batches of the
 * whole model, in micro-batch order, accumulating gradients (no zeroing, no optimizer
 * step), with each micro-batch's gradient scaled 1/M (this M, whatever cfg.M says).
 *   tokens, targets (M,B,T)
 * Returns the mean loss over the M micro-batches, or NAN when out of memory. */
float mlp_reference_iteration(MlpModel *m, int M, const int *tokens, const int *targets);

/* Named parameter tensors, for gradient comparison: i in 0..mlp_param_count-1 gives the
 * name ("h2.fc1_w"), the parameters p, the gradient grad and the element count n. Any
 * output pointer may be NULL. Per-layer tensors are listed per layer. */
int mlp_param_count(const MlpModel *m);
void mlp_param(const MlpModel *m, int i, const char **name, float **p, float **grad,
               size_t *n);
/* Whether tensor i belongs to slice s. */
bool mlp_param_in_slice(const MlpModel *m, int i, const MlpSlice *s);

/* Relative error of a gradient tensor against a reference, the measure --check prints:
 * max_i |a_i - ref_i| / max(max_i |ref_i|, 1e-30) (0 when n == 0). */
double mlp_rel_error(const float *a, const float *ref, size_t n);

#endif
