/* mlp_layout.h - the act-region layout of the `mlp` workload (runtime/models/mlp.h), in one
 * place for the CPU runtime that carves it (runtime/models/mlp.c), the GPU kernels that carve
 * the same region on the device (runtime/cuda/mlp_cuda.cu) and the code generator that
 * plans the arena with its sizes (compiler/generation/emit_c.c): one layout, three readers.
 *
 * Legend (llm.c style): B = micro-batch size, T = sequence length, C = hidden size,
 * H = 4C, V = vocabulary, nl = the slice's blocks, nres = nl + head. p(x) = x rounded up
 * to a multiple of 16 floats (64 bytes).
 *
 * One (slice, micro-batch) region, in floats, as nested prefixes (runtime/models/mlp.h):
 *   [0, ckpt)   the slice input xs[0] (B,T,C): empty on the embedding slice
 *   [0, wact)   what a split B leaves for W: activations and output gradients
 *   [0, act)    + B's temporary dgelu
 * An empty slice (no embedding, no head, no block) has an empty region. MlpActs carves a
 * region (runtime/region.h PrRegion: in up to PR_PIECES pieces, each anywhere) into its
 * tensors, for the CPU's and the GPU's passes alike.
 *
 * Header-only (static inline): pure arithmetic, no allocation, no I/O; valid C11 and
 * C++ (nvcc).
 */
#ifndef PIPEC_MLP_LAYOUT_H
#define PIPEC_MLP_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "region.h"

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

/* Where the tensors of one forward live: the act region (strides = the layout's) or,
 * for F without keep_all, small temporaries reused by every layer (strides 0). The
 * pointers are host or device addresses alike: only arithmetic is done on them. */
typedef struct MlpActs {
    float *xs;                    /* xs[0] (B,T,C), the slice input */
    float *xs1;                   /* xs[i] = xs1 + (i - 1) * s_x for i >= 1 */
    float *mean, *rstd;           /* (B,T) per layer, stride s_bt */
    float *ln_out;                /* (B,T,C) per layer, stride s_btc */
    float *fch, *gelu;            /* (B,T,H) per layer, stride s_bth */
    float *lnf_mean, *lnf_rstd;   /* (B,T) */
    float *lnf_out;               /* (B,T,C) */
    float *probs;                 /* (B,T,V) */
    size_t s_x, s_bt, s_btc, s_bth;
} MlpActs;

/* The region laid out as a contiguous at act (NULL: only its cuts, floats), in the
 * pieces of runtime/region.h: the slice input xs[0] is the whole checkpoint, so piece 0
 * is [0, ckpt), piece 2 [ckpt, wact), piece 3 [wact, act) (B's temporary dgelu); every
 * tensor array of the layout lies inside one piece. */
static inline PrRegion mlp_region_whole(void *act, const MlpLayout *a)
{
    return pr_layout_region(act, (int64_t)a->ckpt, (int64_t)a->wact, (int64_t)a->act);
}

/* xs[i], the input of block i (i = nl: of the final layer norm). */
static inline float *mlp_xs(const MlpActs *A, size_t i)
{
    return i == 0 ? A->xs : A->xs1 + (i - 1) * A->s_x;
}

/* The tensors of region g laid out as a. */
static inline MlpActs mlp_acts_in_region(const PrRegion *g, const MlpLayout *a)
{
    MlpActs A;
    A.xs = pr_region_at(g, (int64_t)a->xs);
    A.xs1 = pr_region_at(g, (int64_t)(a->xs + a->sbtc));
    A.mean = pr_region_at(g, (int64_t)a->mean);
    A.rstd = pr_region_at(g, (int64_t)a->rstd);
    A.ln_out = pr_region_at(g, (int64_t)a->ln_out);
    A.fch = pr_region_at(g, (int64_t)a->fch);
    A.gelu = pr_region_at(g, (int64_t)a->gelu);
    A.lnf_mean = pr_region_at(g, (int64_t)a->lnf_mean);
    A.lnf_rstd = pr_region_at(g, (int64_t)a->lnf_rstd);
    A.lnf_out = pr_region_at(g, (int64_t)a->lnf_out);
    A.probs = pr_region_at(g, (int64_t)a->probs);
    A.s_x = a->sbtc;
    A.s_bt = a->sbt;
    A.s_btc = a->sbtc;
    A.s_bth = a->sbth;
    return A;
}

/* Floats of the scratch an F that keeps only the checkpoint runs on: one block's
 * tensors, reused by every block, and the head's when head. */
static inline size_t mlp_scratch_floats(size_t V, size_t C, size_t T, size_t B, bool head)
{
    size_t bt = B * T, btc = bt * C, bth = bt * 4 * C;
    return 2 * btc + 2 * bt + 2 * bth + (head ? 2 * bt + btc + bt * V : 0);
}

/* Carves q (mlp_scratch_floats floats) into the tensors of such an F: xs[i] is one
 * copy of the residual stream updated in place, every stride 0. */
static inline MlpActs mlp_acts_scratch(float *q, size_t C, size_t T, size_t B, bool head)
{
    size_t bt = B * T, btc = bt * C, bth = bt * 4 * C;
    MlpActs A = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    A.xs = A.xs1 = q; q += btc;
    A.mean = q;       q += bt;
    A.rstd = q;       q += bt;
    A.ln_out = q;     q += btc;
    A.fch = q;        q += bth;
    A.gelu = q;       q += bth;
    if (head) {
        A.lnf_mean = q; q += bt;
        A.lnf_rstd = q; q += bt;
        A.lnf_out = q;  q += btc;
        A.probs = q;
    }
    return A;
}

#endif
