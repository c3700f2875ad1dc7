/* mlp_layout.h - the act-region layout of the `mlp` workload (runtime/mlp.h), in one
 * place for the CPU runtime that carves it (runtime/mlp.c), the GPU kernels that carve
 * the same region on the device (runtime/cuda/mlp_cuda.cu) and the code generator that
 * plans the arena with its sizes (compiler/emit_c.c): one layout, three readers.
 *
 * Legend (llm.c style): B = micro-batch size, T = sequence length, C = hidden size,
 * H = 4C, V = vocabulary, nl = the slice's blocks, nres = nl + head. p(x) = x rounded up
 * to a multiple of 16 floats (64 bytes).
 *
 * One (slice, micro-batch) region, in floats, as nested prefixes (runtime/mlp.h):
 *   [0, ckpt)   the slice input xs[0] (B,T,C): empty on the embedding slice
 *   [0, wact)   what a split B leaves for W: activations and output gradients
 *   [0, act)    + B's temporary dgelu
 * An empty slice (no embedding, no head, no block) has an empty region.
 *
 * Header-only (static inline): pure arithmetic, no allocation, no I/O; valid C11 and
 * C++ (nvcc).
 */
#ifndef PIPEC_MLP_LAYOUT_H
#define PIPEC_MLP_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

/* Offsets (floats from the region start) of the tensors of one (slice, micro-batch)
 * act region and of the gradient buffers B writes there. Per-layer tensors are arrays
 * over the slice's blocks with the strides sbt, sbtc, sbth. xs[i] is the input of block
 * i (i < nl) and, on the head slice, xs[nl] is the input of the final layer norm. */
typedef struct MlpLayout {
    size_t xs;          /* (nres,B,T,C) residual stream; xs[0] is the checkpoint */
    size_t mean, rstd;  /* (nl,B,T) block layer norm statistics */
    size_t ln_out;      /* (nl,B,T,C) block layer norm output */
    size_t fch;         /* (nl,B,T,H) fc1 output before GELU; B turns it into its grad */
    size_t gelu;        /* (nl,B,T,H) GELU output */
    size_t lnf_mean, lnf_rstd; /* (B,T) final layer norm statistics */
    size_t lnf_out;     /* (B,T,C) final layer norm output */
    size_t probs;       /* (B,T,V) softmax output; B turns it into dlogits */
    size_t dxs;         /* (ndxs,B,T,C) grads of xs[i], i = i0..nl (i0 = 0 on the
                           embedding slice, else 1: dxs[0] is then din) */
    size_t dln;         /* (nl,B,T,C) grads of the block layer norm outputs */
    size_t dlnf;        /* (B,T,C) grad of the final layer norm output */
    size_t dgelu;       /* (B,T,H) B's temporary: grad of the GELU output */
    size_t ckpt, wact, act; /* prefix sizes in floats */
    size_t sbt, sbtc, sbth; /* strides per layer: p(BT), p(BTC), p(BTH) */
} MlpLayout;

static inline size_t mlp_pad16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

/* The layout of a slice with nl blocks (embed: it holds the embedding, head: the final
 * layer norm and the head) of a model with vocabulary V, hidden size C, sequence length
 * T and micro-batch size B. */
static inline MlpLayout mlp_layout(size_t V, size_t C, size_t T, size_t B, size_t nl,
                                   bool embed, bool head)
{
    MlpLayout a = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    size_t bt = B * T, nres = nl + (head ? 1 : 0);
    a.sbt = mlp_pad16(bt);
    a.sbtc = mlp_pad16(bt * C);
    a.sbth = mlp_pad16(bt * 4 * C);
    if (!embed && !head && nl == 0)
        return a;
    size_t o = 0;
    a.xs = o;        o += nres * a.sbtc;
    a.ckpt = (!embed && nres > 0) ? a.sbtc : 0;
    a.mean = o;      o += nl * a.sbt;
    a.rstd = o;      o += nl * a.sbt;
    a.ln_out = o;    o += nl * a.sbtc;
    a.fch = o;       o += nl * a.sbth;
    a.gelu = o;      o += nl * a.sbth;
    if (head) {
        a.lnf_mean = o; o += a.sbt;
        a.lnf_rstd = o; o += a.sbt;
        a.lnf_out = o;  o += a.sbtc;
        a.probs = o;    o += mlp_pad16(bt * V);
    }
    a.dxs = o;       o += (nl + (embed ? 1 : 0)) * a.sbtc;
    a.dln = o;       o += nl * a.sbtc;
    if (head) {
        a.dlnf = o;  o += a.sbtc;
    }
    a.wact = o;
    a.dgelu = o;     o += nl > 0 ? a.sbth : 0;
    a.act = o;
    return a;
}

#endif
