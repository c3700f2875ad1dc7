/* tf_layout.h - the activation-region layout of the `gpt` and `llama` workloads
 * (runtime/models/transformer.h), in one place for the runtime that carves it and the code
 * generator that plans the arena with it (compiler/generation/emit_c.c): one layout, two readers.
 *
 * Dimension legend (llm.c style):
 *   B = micro-batch size, T = sequence length, N = B*T tokens, C = hidden size,
 *   NH = attention heads, NKV = key/value heads (grouped-query attention), K = C*NKV/NH
 *   (the width of K and of V), F = MLP (ffn) width, V = vocabulary, n = the slice's
 *   layers. p(x) = x rounded up to a multiple of 16 floats (64 bytes).
 *
 * One (slice, micro-batch) region, in floats, as nested prefixes (docs/model.md):
 *   [0, ckpt)   the slice input xs[0] (N,C): empty on the embedding slice
 *   [0, fwd)    what F keeps for the backward: per layer exactly the tensors the cost
 *               model counts (docs/cost-model.md, Korthikanti et al. 2022 §4.1 at fp32
 *               without dropout; the Llama adaptation), plus the head's
 *   [0, wact)   + the output gradients of every weighted op, which W reads
 *   [0, act)    + B's temporaries (the attention-probability gradient and two more)
 * Every tensor lies wholly inside one piece of tf_region_whole's cuts ([0, ckpt),
 * [ckpt, wact), [wact, act)), so a region whose pieces the arena plan places apart
 * (runtime/region.h) still holds whole tensors.
 *
 * Header-only (static inline): pure arithmetic, no allocation, no I/O.
 */
#ifndef PIPEC_TF_LAYOUT_H
#define PIPEC_TF_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "region.h"

/* Architectures of the transformer workloads (stdlib/models.pipe `arch`). */
enum { TF_GPT = 1, TF_LLAMA = 2 };

/* A transformer's shape: arch TF_GPT or TF_LLAMA, the rest >= 1; NH divides C, NKV
 * divides NH, and for llama C/NH is even (rotary pairs). */
typedef struct TfDims {
    int arch;
    int V, C, NH, NKV, F, T, B;
} TfDims;

/* Offsets (floats from the region start) and sizes of one slice's region. Per-layer
 * tensors sit at l_* + i * lstride (forward part) and g_* + i * gstride (gradients). */
typedef struct TfLayout {
    size_t xs;          /* (n + head) x (N,C): xs[i] = input of layer i, xs[n] of LN_f */
    size_t lbase, lstride;
    size_t l_ln1;       /* (N,C) first norm output = QKV input */
    size_t l_qkv;       /* (N,C+2K) Q, K, V (llama: Q and K rotated) */
    size_t l_att;       /* (B,NH,T,T) causal softmax probabilities */
    size_t l_atty;      /* (N,C) attention output = projection input */
    size_t l_xmid;      /* (N,C) residual after attention = second norm input */
    size_t l_ln2;       /* (N,C) second norm output = MLP input */
    size_t l_fa, l_fb;  /* (N,F) gpt: fc1 output, GELU output; llama: gate, SiLU(gate) */
    size_t l_fc, l_fd;  /* (N,F) llama: up, SiLU(gate) * up; gpt: unused */
    size_t lnf;         /* (N,C) head: final norm output */
    size_t logits;      /* (N,V) head: logits (B overwrites them with dlogits) */
    size_t probs;       /* (N,V) head: softmax */
    size_t fwd;         /* end of the forward part */
    size_t gbase, gstride;
    size_t g_ln1;       /* (N,C) d first norm output */
    size_t g_qkv;       /* (N,C+2K) d QKV-linear output */
    size_t g_xmid;      /* (N,C) d residual after attention */
    size_t g_ln2;       /* (N,C) d second norm output */
    size_t g_fa, g_fc;  /* (N,F) gpt: d fc1 output; llama: d gate, d up */
    size_t dxs;         /* (n + embed) x (N,C): gradients of xs[1..n] (and xs[0] on the
                           embedding slice) */
    size_t dlnf;        /* (N,C) head: d final norm output */
    size_t wact;        /* end of what W reads */
    size_t t_datt;      /* (B,NH,T,T) B's temporary: d attention probabilities */
    size_t t_datty;     /* (N,C) B's temporary: d attention output */
    size_t t_dfb;       /* (N,F) B's temporary: d GELU output (gpt) / d product (llama) */
    size_t act;         /* end of the region */
    size_t ckpt;        /* p(NC) on a slice without embedding, else 0; per_layer: every
                           xs[i], (n + head) x p(NC) */
    bool per_layer;     /* layer-granular recomputation: one layer's forward part and
                           gradients (lstride, gstride), which every layer i uses in turn */
} TfLayout;

static inline size_t tf_pad16(size_t n) { return (n + 15) & ~(size_t)15; }

/* The layout of a slice with nl layers, the embedding (embed) and/or the head (head).
 * An identity slice (no layer, no embedding, no head) has an empty region (act 0).
 * per_layer (layer-granular recomputation, docs/runtime.md "Layer-granular
 * recomputation"; ignored without a layer): the checkpoint is every layer's input
 * xs[0..n] (the whole xs block, so [0, ckpt) is one piece), and one layer's forward part
 * and gradients follow it, which the backward rebuilds and uses layer by layer. */
static inline TfLayout tf_layout_remat(const TfDims *d, int nl, bool embed, bool head,
                                       bool per_layer)
{
    TfLayout a;
    memset(&a, 0, sizeof a);
    if (nl == 0 && !embed && !head)
        return a;
    size_t N = (size_t)d->B * (size_t)d->T, C = (size_t)d->C, F = (size_t)d->F;
    size_t K = C * (size_t)d->NKV / (size_t)d->NH, V = (size_t)d->V, n = (size_t)nl;
    size_t nc = tf_pad16(N * C), nqkv = tf_pad16(N * (C + 2 * K)), nf = tf_pad16(N * F);
    size_t natt = tf_pad16((size_t)d->B * (size_t)d->NH * (size_t)d->T * (size_t)d->T);
    size_t nv = tf_pad16(N * V), h = head ? 1 : 0;
    bool llama = d->arch == TF_LLAMA;
    size_t o = 0;
    a.xs = o;
    o += (n + h) * nc;
    a.ckpt = (!embed && n + h > 0) ? nc : 0;
    a.per_layer = per_layer && n > 0;
    size_t copies = a.per_layer ? 1 : n; /* per-layer parts laid out */
    if (a.per_layer)
        a.ckpt = (n + h) * nc;
    /* per-layer forward part */
    a.lbase = o;
    size_t q = 0;
    a.l_ln1 = q;  q += nc;
    a.l_qkv = q;  q += nqkv;
    a.l_att = q;  q += natt;
    a.l_atty = q; q += nc;
    a.l_xmid = q; q += nc;
    a.l_ln2 = q;  q += nc;
    a.l_fa = q;   q += nf;
    a.l_fb = q;   q += nf;
    a.l_fc = q;   q += llama ? nf : 0;
    a.l_fd = q;   q += llama ? nf : 0;
    a.lstride = q;
    o += copies * q;
    a.lnf = o;    o += h * nc;
    a.logits = o; o += h * nv;
    a.probs = o;  o += h * nv;
    a.fwd = o;
    /* gradients W reads */
    a.gbase = o;
    q = 0;
    a.g_ln1 = q;  q += nc;
    a.g_qkv = q;  q += nqkv;
    a.g_xmid = q; q += nc;
    a.g_ln2 = q;  q += nc;
    a.g_fa = q;   q += nf;
    a.g_fc = q;   q += llama ? nf : 0;
    a.gstride = q;
    o += copies * q;
    a.dxs = o;    o += (n + (embed ? 1 : 0)) * nc;
    a.dlnf = o;   o += h * nc;
    a.wact = o;
    /* B's temporaries */
    size_t any = n > 0 ? 1 : 0;
    a.t_datt = o;  o += any * natt;
    a.t_datty = o; o += any * nc;
    a.t_dfb = o;   o += any * nf;
    a.act = o;
    return a;
}

/* The stage-granular layout (tf_layout_remat without per_layer). */
static inline TfLayout tf_layout(const TfDims *d, int nl, bool embed, bool head)
{
    return tf_layout_remat(d, nl, embed, head, false);
}

/* The region laid out as a contiguous at act (NULL: only its cuts, floats), in the
 * pieces of runtime/region.h: the slice input xs[0] is the whole checkpoint, so piece 0
 * is [0, ckpt), piece 2 [ckpt, wact) (the forward part and the gradients W reads),
 * piece 3 [wact, act) (B's temporaries). */
static inline PrRegion tf_region_whole(void *act, const TfLayout *a)
{
    return pr_layout_region(act, (int64_t)a->ckpt, (int64_t)a->wact, (int64_t)a->act);
}

/* Bytes one layer adds to what F keeps (xs entry + the per-layer forward part): the
 * number the unit test holds equal to the cost model's per-layer activation bytes. */
static inline size_t tf_layer_fwd_bytes(const TfDims *d)
{
    TfLayout a = tf_layout(d, 1, false, false);
    return (a.lstride + tf_pad16((size_t)d->B * (size_t)d->T * (size_t)d->C)) * sizeof(float);
}

#endif
