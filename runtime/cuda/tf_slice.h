/* tf_slice.h - the F, R, B and W passes of a gpt/llama slice on a device: the order of
 * the layer calls and where every tensor lives in the (slice, micro-batch) region, the
 * twin of runtime/models/transformer.c's forward_into / backward / weight_grads on the same
 * tf_layout.h layout (so the arena plan, SO/SI sizes and the ckpt/wact prefixes are the
 * CPU ones by construction). In the common subset of C11 and CUDA C++.
 *
 * The layer calls are the tfk_* primitives below, which the including file defines:
 * tf_cuda.cu with kernel launches (tf_kernels.h bodies, the mlp's .cuh kernels) and
 * cuBLAS GEMMs, all enqueued on one stream; tests/unit/test_tf_cuda_host.c with host
 * loops over the same tf_kernels.h bodies, which runs these passes on the host and
 * checks the gradients against tf_reference_iteration. Every primitive returns 0 or -1
 * (an error already reported), and so does every pass.
 *
 * Legend as transformer.h: B, T, N = B*T, C, NH, NKV, K = C*NKV/NH, F, V; QKV = C + 2K.
 * Pointers are device pointers; a region is addressed through runtime/region.h's PrRegion
 * (its pieces wherever the arena plan put them), as on the CPU.
 */
#ifndef PIPERUN_TF_SLICE_H
#define PIPERUN_TF_SLICE_H

#include <stdbool.h>
#include <stddef.h>

#include "tf_kernels.h"
#include "transformer.h"

/* One rank's copy of a gpt/llama model on its device. */
typedef struct TfDev {
    const TfModel *host;   /* shape and tensor offsets (its parameters: the initial ones) */
    float *params, *grads; /* (nparams) each, the offsets of host->param_mem */
    float *stats;          /* (2N) scratch: a norm's row means, then rstds */
    float *tmp;            /* (tmp_floats) scratch: the region of an F that keeps only
                              its checkpoint (the largest slice's act) */
    size_t tmp_floats;
    float *loss;           /* (M) the head slice's loss per micro-batch */
    void *be;              /* the including file's state (stream, cuBLAS handle) */
} TfDev;

/* ---- primitives (defined by the including file) ---------------------------------------- */

/* dst (n) = src; dst (n) = 0. */
static int tfk_copy(TfDev *x, float *dst, const float *src, size_t n);
static int tfk_zero(TfDev *x, float *dst, size_t n);
/* x0 (N,C) = wte[tok] (+ wpe[t] when wpe != NULL); dwte (V,C) += dx0 by tok, dwpe (T,C)
 * += dx0 summed over the batch (dwpe may be NULL). */
static int tfk_embed(TfDev *x, float *x0, const int *tok, const float *wte, const float *wpe);
static int tfk_embed_backward(TfDev *x, float *dwte, float *dwpe, const float *dx0,
                              const int *tok);
/* Norms over C (b / db NULL: RMSNorm): out = norm(inp); dinp += input gradient;
 * dw (C) += and db (C) += the weight gradients. */
static int tfk_norm(TfDev *x, float *out, const float *inp, const float *w, const float *b);
static int tfk_norm_backward_input(TfDev *x, float *dinp, const float *dout, const float *inp,
                                   const float *w, bool rms);
static int tfk_norm_backward_weight(TfDev *x, float *dw, float *db, const float *dout,
                                    const float *inp);
/* out (N,OC) = inp (N,C) @ w (OC,C)^T + bias (OC, may be NULL); dinp (N,C) = dout (N,OC)
 * @ w; dw (OC,C) += dout^T @ inp, dbias (OC) += sum_n dout (may be NULL). */
static int tfk_matmul(TfDev *x, float *out, const float *inp, const float *w,
                      const float *bias, int N, int C, int OC);
static int tfk_matmul_backward_input(TfDev *x, float *dinp, const float *dout, const float *w,
                                     int N, int C, int OC);
static int tfk_matmul_backward_weight(TfDev *x, float *dw, float *dbias, const float *dout,
                                      const float *inp, int N, int C, int OC);
/* out (n) = a + b (out may alias either). */
static int tfk_residual(TfDev *x, float *out, const float *a, const float *b, size_t n);
/* GELU (tanh approximation) and its backward, elementwise over n. */
static int tfk_gelu(TfDev *x, float *out, const float *inp, size_t n);
static int tfk_gelu_backward(TfDev *x, float *dinp, const float *inp, const float *dout,
                             size_t n);
/* SwiGLU over n: fb = SiLU(fa), fd = fb * fc; and the gradients dfa, dfc for dfb. */
static int tfk_swiglu(TfDev *x, float *fb, float *fd, const float *fa, const float *fc,
                      size_t n);
static int tfk_swiglu_backward(TfDev *x, float *dfa, float *dfc, const float *dfb,
                               const float *fa, const float *fb, const float *fc, size_t n);
/* RoPE on the Q and K heads of qkv (N,QKV) in place (inverse: the gradient's). */
static int tfk_rope(TfDev *x, float *qkv, bool inverse);
/* Causal attention: att (B,NH,T,T) = softmax probabilities, y (N,C) the heads' outputs;
 * backward: dqkv (N,QKV) for dy (N,C), datt (B,NH,T,T) scratch. */
static int tfk_attention(TfDev *x, float *y, float *att, const float *qkv);
static int tfk_attention_backward(TfDev *x, float *dqkv, float *datt, const float *dy,
                                  const float *att, const float *qkv);
/* The head: probs (N,V) = softmax(logits); *loss (device) = mean cross-entropy of tgt;
 * dlogits (N,V) = (probs - onehot(tgt)) * dloss (may alias probs). */
static int tfk_softmax(TfDev *x, float *probs, const float *logits);
static int tfk_crossentropy(TfDev *x, float *loss, const float *probs, const int *tgt);
static int tfk_crossentropy_backward(TfDev *x, float *dlogits, const float *probs,
                                     const int *tgt, float dloss);
/* p (n) -= lr * g. */
static int tfk_sgd(TfDev *x, float *p, const float *g, float lr, size_t n);

/* ---- the region ------------------------------------------------------------------------ */

#define TFD_NONE ((size_t)-1)

/* The pieces every pass reads: shape, layout, region. */
typedef struct TfdPass {
    TfDev *x;
    const MlpSlice *s;
    TfLayout a;
    PrRegion g;
    bool gpt;
    int N, C, F, V, QKV, nl;
    size_t nc, btc;
} TfdPass;

/* The pass of slice s over region g (NULL: a contiguous region at act). */
static TfdPass tfd_pass(TfDev *x, const MlpSlice *s, const PrRegion *g, float *act)
{
    const TfDims *d = &x->host->cfg.d;
    TfdPass p;
    p.x = x;
    p.s = s;
    p.a = tf_layout(d, s->nlayers, s->embed, s->head);
    p.g = g ? *g : tf_region_whole(act, &p.a);
    p.gpt = d->arch == TF_GPT;
    p.N = d->B * d->T;
    p.C = d->C;
    p.F = d->F;
    p.V = d->V;
    p.QKV = d->C + 2 * (d->C / d->NH * d->NKV);
    p.nl = s->nlayers;
    p.btc = (size_t)p.N * (size_t)p.C;
    p.nc = tf_pad16(p.btc);
    return p;
}

static float *tfd_at(const TfdPass *p, size_t off)
{
    return pr_region_at(&p->g, (int64_t)off);
}
/* xs[i]: the input of layer i (i = nl: of the final norm). */
static float *tfd_xs(const TfdPass *p, int i)
{
    return tfd_at(p, p->a.xs + (size_t)i * p->nc);
}
static float *tfd_lay(const TfdPass *p, int i, size_t off)
{
    return tfd_at(p, p->a.lbase + (size_t)i * p->a.lstride + off);
}
static float *tfd_glay(const TfdPass *p, int i, size_t off)
{
    return tfd_at(p, p->a.gbase + (size_t)i * p->a.gstride + off);
}
/* The gradient of xs[i]; dxs[0] of a slice without embedding is din. */
static float *tfd_dxs(const TfdPass *p, int i, float *din)
{
    if (!p->s->embed) {
        if (i == 0)
            return din;
        i--;
    }
    return tfd_at(p, p->a.dxs + (size_t)i * p->nc);
}
/* Parameter / gradient slot k of layer l, NULL when absent; a model-level offset. */
static const float *tfd_P(const TfdPass *p, int l, int k)
{
    size_t o = p->x->host->slot[(size_t)l * TF_NSLOTS + k];
    return o == TFD_NONE ? NULL : p->x->params + o;
}
static float *tfd_G(const TfdPass *p, int l, int k)
{
    size_t o = p->x->host->slot[(size_t)l * TF_NSLOTS + k];
    return o == TFD_NONE ? NULL : p->x->grads + o;
}
static float *tfd_p(const TfdPass *p, size_t off)
{
    return off == TFD_NONE ? NULL : p->x->params + off;
}
static float *tfd_g(const TfdPass *p, size_t off)
{
    return off == TFD_NONE ? NULL : p->x->grads + off;
}

/* ---- passes ------------------------------------------------------------------------------ */

/* The forward of the slice into its region (keep-all); xs[0] holds the input unless the
 * slice embeds. The last layer writes out (no head) or xs[nl]; out NULL: not kept (R). */
static int tfd_forward_into(const TfdPass *p, float *out, float *loss, const int *tok,
                            const int *tgt)
{
    TfDev *x = p->x;
    const TfModel *m = x->host;
    int N = p->N, C = p->C, F = p->F, nl = p->nl;
    size_t nf = (size_t)N * F;
    if (p->s->embed) {
        float *x0 = (nl == 0 && !p->s->head) ? out : tfd_xs(p, 0);
        if (x0 && tfk_embed(x, x0, tok, x->params + m->wte, tfd_p(p, m->wpe)))
            return -1;
    }
    for (int i = 0; i < nl; i++) {
        int l = p->s->layer0 + i;
        const float *xi = tfd_xs(p, i);
        float *ln1 = tfd_lay(p, i, p->a.l_ln1), *qkv = tfd_lay(p, i, p->a.l_qkv);
        float *att = tfd_lay(p, i, p->a.l_att), *atty = tfd_lay(p, i, p->a.l_atty);
        float *xmid = tfd_lay(p, i, p->a.l_xmid), *ln2 = tfd_lay(p, i, p->a.l_ln2);
        float *fa = tfd_lay(p, i, p->a.l_fa), *fb = tfd_lay(p, i, p->a.l_fb);
        const float *down_in = fb;
        /* (N,C) -> norm -> QKV (N,C+2K) [-> RoPE] -> attention (N,C) -> proj + x */
        if (tfk_norm(x, ln1, xi, tfd_P(p, l, TF_LN1_W), tfd_P(p, l, TF_LN1_B)) ||
            tfk_matmul(x, qkv, ln1, tfd_P(p, l, TF_QKV_W), tfd_P(p, l, TF_QKV_B), N, C, p->QKV) ||
            (!p->gpt && tfk_rope(x, qkv, false)) ||
            tfk_attention(x, atty, att, qkv) ||
            tfk_matmul(x, xmid, atty, tfd_P(p, l, TF_PROJ_W), tfd_P(p, l, TF_PROJ_B), N, C, C) ||
            tfk_residual(x, xmid, xmid, xi, p->btc) ||
            /* -> norm -> fc1 / gate (N,F) -> GELU / SwiGLU -> fc2 / down (N,C) + xmid */
            tfk_norm(x, ln2, xmid, tfd_P(p, l, TF_LN2_W), tfd_P(p, l, TF_LN2_B)) ||
            tfk_matmul(x, fa, ln2, tfd_P(p, l, TF_FC1_W), tfd_P(p, l, TF_FC1_B), N, C, F))
            return -1;
        if (p->gpt) {
            if (tfk_gelu(x, fb, fa, nf))
                return -1;
        } else {
            float *fc = tfd_lay(p, i, p->a.l_fc), *fd = tfd_lay(p, i, p->a.l_fd);
            if (tfk_matmul(x, fc, ln2, tfd_P(p, l, TF_UP_W), NULL, N, C, F) ||
                tfk_swiglu(x, fb, fd, fa, fc, nf))
                return -1;
            down_in = fd;
        }
        float *y = (i == nl - 1 && !p->s->head) ? out : tfd_xs(p, i + 1);
        if (!y)
            continue;
        if (tfk_matmul(x, y, down_in, tfd_P(p, l, TF_FC2_W), tfd_P(p, l, TF_FC2_B), N, F, C) ||
            tfk_residual(x, y, y, xmid, p->btc))
            return -1;
    }
    if (p->s->head) {
        float *lnf = tfd_at(p, p->a.lnf), *logits = tfd_at(p, p->a.logits);
        float *probs = tfd_at(p, p->a.probs);
        /* (N,C) -> norm -> head (N,V) -> softmax [-> loss] */
        if (tfk_norm(x, lnf, tfd_xs(p, nl), x->params + m->lnf_w, tfd_p(p, m->lnf_b)) ||
            tfk_matmul(x, logits, lnf, x->params + m->head_w, NULL, N, C, p->V) ||
            tfk_softmax(x, probs, logits) || (loss && tfk_crossentropy(x, loss, probs, tgt)))
            return -1;
    }
    return 0;
}

/* F (tf_forward): out (N,C) or NULL on the head slice; in (N,C) or NULL on the
 * embedding slice; the head's loss goes to x->loss[mb]. keep_all false: the forward
 * runs in x->tmp and only the checkpoint prefix is kept in the region g. */
static int tfd_forward(TfDev *x, const MlpSlice *s, int mb, float *out, const PrRegion *g,
                       const float *in, const int *tok, const int *tgt, bool keep_all)
{
    TfdPass p = tfd_pass(x, s, g, NULL);
    float *loss = s->head ? x->loss + mb : NULL;
    if (p.a.act == 0) /* identity slice */
        return tfk_copy(x, out, in, p.btc);
    if (keep_all)
        return (!s->embed && tfk_copy(x, tfd_xs(&p, 0), in, p.btc)) ||
                       tfd_forward_into(&p, out, loss, tok, tgt)
                   ? -1 : 0;
    if (p.a.act > x->tmp_floats)
        return -1;
    TfdPass t = tfd_pass(x, s, NULL, x->tmp);
    if ((!s->embed && tfk_copy(x, x->tmp, in, p.btc)) ||
        tfd_forward_into(&t, out, loss, tok, tgt))
        return -1;
    return p.a.ckpt ? tfk_copy(x, tfd_at(&p, 0), x->tmp, p.a.ckpt) : 0;
}

/* R (tf_recompute): the whole region again from its checkpoint. */
static int tfd_recompute(TfDev *x, const MlpSlice *s, const PrRegion *g, const int *tok)
{
    TfdPass p = tfd_pass(x, s, g, NULL);
    return p.a.act == 0 ? 0 : tfd_forward_into(&p, NULL, NULL, tok, NULL);
}

/* The weight gradients of the slice from the wact prefix of its region. */
static int tfd_weight_grads(const TfdPass *p, const int *tok)
{
    TfDev *x = p->x;
    const TfModel *m = x->host;
    int N = p->N, C = p->C, F = p->F, nl = p->nl;
    if (p->s->head &&
        (tfk_matmul_backward_weight(x, x->grads + m->head_w, NULL, tfd_at(p, p->a.logits),
                                    tfd_at(p, p->a.lnf), N, C, p->V) ||
         tfk_norm_backward_weight(x, x->grads + m->lnf_w, tfd_g(p, m->lnf_b),
                                  tfd_at(p, p->a.dlnf), tfd_xs(p, nl))))
        return -1;
    for (int i = nl - 1; i >= 0; i--) {
        int l = p->s->layer0 + i;
        const float *ln2 = tfd_lay(p, i, p->a.l_ln2);
        if (tfk_matmul_backward_weight(x, tfd_G(p, l, TF_FC2_W), tfd_G(p, l, TF_FC2_B),
                                       tfd_dxs(p, i + 1, NULL),
                                       tfd_lay(p, i, p->gpt ? p->a.l_fb : p->a.l_fd), N, F, C) ||
            tfk_matmul_backward_weight(x, tfd_G(p, l, TF_FC1_W), tfd_G(p, l, TF_FC1_B),
                                       tfd_glay(p, i, p->a.g_fa), ln2, N, C, F) ||
            (!p->gpt && tfk_matmul_backward_weight(x, tfd_G(p, l, TF_UP_W), NULL,
                                                   tfd_glay(p, i, p->a.g_fc), ln2, N, C, F)) ||
            tfk_norm_backward_weight(x, tfd_G(p, l, TF_LN2_W), tfd_G(p, l, TF_LN2_B),
                                     tfd_glay(p, i, p->a.g_ln2), tfd_lay(p, i, p->a.l_xmid)) ||
            tfk_matmul_backward_weight(x, tfd_G(p, l, TF_PROJ_W), tfd_G(p, l, TF_PROJ_B),
                                       tfd_glay(p, i, p->a.g_xmid), tfd_lay(p, i, p->a.l_atty),
                                       N, C, C) ||
            tfk_matmul_backward_weight(x, tfd_G(p, l, TF_QKV_W), tfd_G(p, l, TF_QKV_B),
                                       tfd_glay(p, i, p->a.g_qkv), tfd_lay(p, i, p->a.l_ln1), N,
                                       C, p->QKV) ||
            tfk_norm_backward_weight(x, tfd_G(p, l, TF_LN1_W), tfd_G(p, l, TF_LN1_B),
                                     tfd_glay(p, i, p->a.g_ln1), tfd_xs(p, i)))
            return -1;
    }
    if (p->s->embed &&
        tfk_embed_backward(x, x->grads + m->wte, tfd_g(p, m->wpe), tfd_dxs(p, 0, NULL), tok))
        return -1;
    return 0;
}

/* B (tf_backward): din (N,C) or NULL on the embedding slice, dout (N,C) or NULL on the
 * head slice; split: leave the weight gradients to W (their inputs stay in wact). */
static int tfd_backward(TfDev *x, const MlpSlice *s, float *din, const PrRegion *g,
                        const float *dout, const int *tok, const int *tgt, bool split)
{
    TfdPass p = tfd_pass(x, s, g, NULL);
    const TfModel *m = x->host;
    int N = p.N, C = p.C, F = p.F, nl = p.nl;
    size_t nf = (size_t)N * F;
    if (p.a.act == 0)
        return tfk_copy(x, din, dout, p.btc);
    float *dtop = tfd_dxs(&p, nl, din);
    if (s->head) {
        float *dlnf = tfd_at(&p, p.a.dlnf), *dlogits = tfd_at(&p, p.a.logits);
        float dloss = 1.0f / (float)m->cfg.M / (float)N;
        /* dlogits (N,V), over the logits -> dlnf (N,C) -> dtop (N,C) */
        if (tfk_crossentropy_backward(x, dlogits, tfd_at(&p, p.a.probs), tgt, dloss) ||
            tfk_matmul_backward_input(x, dlnf, dlogits, x->params + m->head_w, N, C, p.V) ||
            tfk_zero(x, dtop, p.btc) ||
            tfk_norm_backward_input(x, dtop, dlnf, tfd_xs(&p, nl), x->params + m->lnf_w, !p.gpt))
            return -1;
    } else if (tfk_copy(x, dtop, dout, p.btc))
        return -1;
    float *dfb = nl > 0 ? tfd_at(&p, p.a.t_dfb) : NULL;
    float *datty = nl > 0 ? tfd_at(&p, p.a.t_datty) : NULL;
    float *datt = nl > 0 ? tfd_at(&p, p.a.t_datt) : NULL;
    for (int i = nl - 1; i >= 0; i--) {
        int l = s->layer0 + i;
        const float *dres = tfd_dxs(&p, i + 1, din);
        float *dx = tfd_dxs(&p, i, din), *fa = tfd_lay(&p, i, p.a.l_fa);
        float *dfa = tfd_glay(&p, i, p.a.g_fa), *dln2 = tfd_glay(&p, i, p.a.g_ln2);
        float *dxmid = tfd_glay(&p, i, p.a.g_xmid), *dqkv = tfd_glay(&p, i, p.a.g_qkv);
        float *dln1 = tfd_glay(&p, i, p.a.g_ln1);
        /* MLP: dres (N,C) -> fc2^T -> dfb (N,F) -> GELU' / SwiGLU' -> fc1^T (+ up^T) */
        if (tfk_matmul_backward_input(x, dfb, dres, tfd_P(&p, l, TF_FC2_W), N, F, C))
            return -1;
        if (p.gpt) {
            if (tfk_gelu_backward(x, dfa, fa, dfb, nf) ||
                tfk_matmul_backward_input(x, dln2, dfa, tfd_P(&p, l, TF_FC1_W), N, C, F))
                return -1;
        } else {
            float *dfc = tfd_glay(&p, i, p.a.g_fc);
            /* the up branch's share goes through datty (free until the attention) */
            if (tfk_swiglu_backward(x, dfa, dfc, dfb, fa, tfd_lay(&p, i, p.a.l_fb),
                                    tfd_lay(&p, i, p.a.l_fc), nf) ||
                tfk_matmul_backward_input(x, dln2, dfa, tfd_P(&p, l, TF_FC1_W), N, C, F) ||
                tfk_matmul_backward_input(x, datty, dfc, tfd_P(&p, l, TF_UP_W), N, C, F) ||
                tfk_residual(x, dln2, dln2, datty, p.btc))
                return -1;
        }
        /* -> norm' + residual -> dxmid -> proj^T -> attention' [-> RoPE'] -> QKV^T ->
         * norm' + residual -> dx */
        if (tfk_copy(x, dxmid, dres, p.btc) ||
            tfk_norm_backward_input(x, dxmid, dln2, tfd_lay(&p, i, p.a.l_xmid),
                                    tfd_P(&p, l, TF_LN2_W), !p.gpt) ||
            tfk_matmul_backward_input(x, datty, dxmid, tfd_P(&p, l, TF_PROJ_W), N, C, C) ||
            tfk_attention_backward(x, dqkv, datt, datty, tfd_lay(&p, i, p.a.l_att),
                                   tfd_lay(&p, i, p.a.l_qkv)) ||
            (!p.gpt && tfk_rope(x, dqkv, true)) ||
            tfk_matmul_backward_input(x, dln1, dqkv, tfd_P(&p, l, TF_QKV_W), N, C, p.QKV) ||
            tfk_copy(x, dx, dxmid, p.btc) ||
            tfk_norm_backward_input(x, dx, dln1, tfd_xs(&p, i), tfd_P(&p, l, TF_LN1_W), !p.gpt))
            return -1;
    }
    return split ? 0 : tfd_weight_grads(&p, tok);
}

/* W (tf_weight_grad). */
static int tfd_weight_grad(TfDev *x, const MlpSlice *s, const PrRegion *g, const int *tok)
{
    TfdPass p = tfd_pass(x, s, g, NULL);
    return p.a.act == 0 ? 0 : tfd_weight_grads(&p, tok);
}

/* Zeroes the slice's gradients (zero) or steps its parameters p -= lr * g. */
static int tfd_zero_or_step(TfDev *x, const MlpSlice *s, bool zero, float lr)
{
    const TfModel *m = x->host;
    for (int i = 0; i < m->ntensors; i++) {
        const TfTensor *t = &m->tensors[i];
        if (!tf_param_in_slice(m, i, s))
            continue;
        if (zero ? tfk_zero(x, x->grads + t->off, t->n)
                 : tfk_sgd(x, x->params + t->off, x->grads + t->off, lr, t->n))
            return -1;
    }
    return 0;
}

#endif
