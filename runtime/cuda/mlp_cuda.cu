/* mlp_cuda.cu - the `mlp` workload on the GPU: the slice forward, recompute, backward
 * and weight-gradient passes of runtime/models/mlp.c, on the same act-region layout (so the
 * arena plan, SO/SI sizes and the checkpoint/wact prefixes are the CPU ones), with the
 * layer kernels of layernorm.cuh, gelu.cuh, residual.cuh, crossentropy.cuh and the
 * cuBLAS GEMMs of matmul.cuh. The CPU code (runtime/models/mlp.h) is the reference: --check
 * copies the GPU gradients to the host and compares them with mlp_reference_iteration.
 * Legend: B, T, C, H = 4C, V, N = B*T; nl = blocks of the slice. */
#include <string.h>

#include "cu_api.h"
#include "crossentropy.cuh"
#include "gelu.cuh"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "mlp_layout.h"
#include "residual.cuh"

/* The act layout of runtime/models/mlp.c (mlp_layout.h: one definition for the CPU, the GPU
 * and the code generator). */
typedef MlpLayout Layout;

static bool slice_empty(const MlpSlice *s) { return !s->embed && !s->head && s->nlayers == 0; }

static Layout layout(const MlpConfig *c, const MlpSlice *s)
{
    return mlp_layout((size_t)c->vocab, (size_t)c->C, (size_t)c->T, (size_t)c->B,
                      (size_t)s->nlayers, s->embed, s->head);
}

/* Device twin of a host parameter/gradient pointer. */
static float *dp(const CuMlp *g, const float *host)
{
    return g->params + (host - g->host->param_mem);
}
static float *dg(const CuMlp *g, const float *host)
{
    return g->grads + (host - g->host->grad_mem);
}

extern "C" int cu_model_alloc(CuMlp *g, const float *host_params, const float *host_grads,
                              size_t nparams, int M, size_t tmp_floats)
{
    g->host_params = host_params;
    g->host_grads = host_grads;
    g->tmp_floats = tmp_floats;
    CUDA_CHECK(cudaMalloc((void **)&g->params, nparams * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&g->grads, nparams * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&g->tmp, (tmp_floats ? tmp_floats : 16) * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&g->loss, (size_t)M * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(g->params, host_params, nparams * sizeof(float),
                          cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(g->grads, 0, nparams * sizeof(float)));
    CUDA_CHECK(cudaMemset(g->loss, 0, (size_t)M * sizeof(float)));
    CUBLAS_CHECK(cublasCreate(&g->blas));
    CUBLAS_CHECK(cublasSetMathMode(g->blas, CUBLAS_PEDANTIC_MATH));
    return 0;
}

extern "C" void cu_model_release(CuMlp *g)
{
    if (g->blas)
        cublasDestroy(g->blas);
    cudaFree(g->params);
    cudaFree(g->grads);
    cudaFree(g->tmp);
    cudaFree(g->loss);
    memset(g, 0, sizeof *g);
}

extern "C" int cu_mlp_init(CuMlp *g, const MlpModel *host)
{
    const MlpConfig *c = &host->cfg;
    memset(g, 0, sizeof *g);
    g->host = host;
    return cu_model_alloc(g, host->param_mem, host->grad_mem, host->nparams, c->M,
                          mlp_scratch_floats((size_t)c->vocab, (size_t)c->C, (size_t)c->T,
                                             (size_t)c->B, true));
}

extern "C" void cu_mlp_free(CuMlp *g)
{
    cu_model_release(g);
}

/* forward_into of mlp.c: xs[0] holds the slice input unless the slice embeds; the last
 * block writes into out when the slice has no head; loss (device) may be NULL. */
static int forward_into(CuMlp *g, cudaStream_t st, const MlpSlice *s, const MlpActs *A, float *out,
                        float *loss, const int *tok, const int *tgt)
{
    const MlpConfig *c = &g->host->cfg;
    const MlpParams *p = &g->host->params;
    int N = c->B * c->T, C = c->C, H = 4 * c->C, V = c->vocab, nl = s->nlayers;
    size_t btc = (size_t)N * C;
    cublasHandle_t h = g->blas;
    if (s->embed) {
        float *x0 = (nl == 0 && !s->head) ? out : A->xs;
        if (x0 && encoder_forward(st, x0, tok, dp(g, p->wte), N, C))
            return -1;
    }
    for (int i = 0; i < nl; i++) {
        size_t l = (size_t)(s->layer0 + i);
        const float *x = mlp_xs(A, (size_t)i);
        float *mean = A->mean + i * A->s_bt, *rstd = A->rstd + i * A->s_bt;
        float *ln = A->ln_out + i * A->s_btc, *fch = A->fch + i * A->s_bth;
        float *ge = A->gelu + i * A->s_bth;
        float *y = (i == nl - 1 && !s->head) ? out : mlp_xs(A, (size_t)i + 1);
        /* (N,C) -> LN -> (N,C) -> fc1 -> (N,H) -> GELU -> (N,H) -> fc2 -> (N,C) + x */
        if (layernorm_forward(st, ln, mean, rstd, x, dp(g, p->ln_w + l * C), dp(g, p->ln_b + l * C),
                              N, C) ||
            matmul_forward(h, st, fch, ln, dp(g, p->fc1_w + l * H * C), dp(g, p->fc1_b + l * H), N,
                           C, H) ||
            gelu_forward(st, ge, fch, (size_t)N * H))
            return -1;
        if (!y)
            continue;
        float *f2 = y == x ? fch : y;   /* in place (scratch): fch is free again */
        if (matmul_forward(h, st, f2, ge, dp(g, p->fc2_w + l * C * H), dp(g, p->fc2_b + l * C), N,
                           H, C) ||
            residual_forward(st, y, x, f2, btc))
            return -1;
    }
    if (s->head) {
        const float *x = mlp_xs(A, (size_t)nl);
        /* (N,C) -> LN_f -> (N,C) -> head -> (N,V) -> softmax -> (N,V) */
        if (layernorm_forward(st, A->lnf_out, A->lnf_mean, A->lnf_rstd, x, dp(g, p->lnf_w),
                              dp(g, p->lnf_b), N, C) ||
            matmul_forward(h, st, A->probs, A->lnf_out, dp(g, p->head_w), dp(g, p->head_b), N, C,
                           V) ||
            softmax_forward(st, A->probs, A->probs, N, V))
            return -1;
        if (loss && crossentropy_forward(st, loss, A->probs, tgt, N, V))
            return -1;
    }
    return 0;
}

/* The region contiguous at act of slice s, in the layout of the model g holds. */
static PrRegion whole_region(CuMlp *g, const MlpSlice *s, void *act)
{
    Layout a = layout(&g->host->cfg, s);
    return mlp_region_whole(act, &a);
}

extern "C" int cu_mlp_forward(CuMlp *g, cudaStream_t st, const MlpSlice *s, int mb, float *out,
                              void *act, const float *in, const int *tok, const int *tgt,
                              bool keep_all)
{
    PrRegion rg = whole_region(g, s, act);
    return cu_mlp_forward_split(g, st, s, mb, out, &rg, in, tok, tgt, keep_all);
}

extern "C" int cu_mlp_forward_split(CuMlp *g, cudaStream_t st, const MlpSlice *s, int mb,
                                    float *out, const PrRegion *rg, const float *in,
                                    const int *tok, const int *tgt, bool keep_all)
{
    const MlpConfig *c = &g->host->cfg;
    size_t btc = (size_t)c->B * c->T * c->C;
    if (slice_empty(s)) {
        CUDA_CHECK(cudaMemcpyAsync(out, in, btc * sizeof(float), cudaMemcpyDeviceToDevice, st));
        return 0;
    }
    Layout a = layout(c, s);
    float *loss = s->head ? g->loss + mb : NULL;
    if (keep_all) {
        MlpActs A = mlp_acts_in_region(rg, &a);
        if (!s->embed)
            CUDA_CHECK(cudaMemcpyAsync(A.xs, in, btc * sizeof(float), cudaMemcpyDeviceToDevice, st));
        return forward_into(g, st, s, &A, out, loss, tok, tgt);
    }
    /* Only the checkpoint is kept: scratch reused by every block (mlp.c does the same). */
    MlpActs A = mlp_acts_scratch(g->tmp, (size_t)c->C, (size_t)c->T, (size_t)c->B, true);
    if (!s->embed) {
        CUDA_CHECK(cudaMemcpyAsync(pr_region_at(rg, (int64_t)a.xs), in, btc * sizeof(float),
                                   cudaMemcpyDeviceToDevice, st));
        CUDA_CHECK(cudaMemcpyAsync(A.xs, in, btc * sizeof(float), cudaMemcpyDeviceToDevice, st));
    }
    return forward_into(g, st, s, &A, out, loss, tok, tgt);
}

extern "C" int cu_mlp_recompute(CuMlp *g, cudaStream_t st, const MlpSlice *s, void *act,
                                const int *tok)
{
    PrRegion rg = whole_region(g, s, act);
    return cu_mlp_recompute_split(g, st, s, &rg, tok);
}

extern "C" int cu_mlp_recompute_split(CuMlp *g, cudaStream_t st, const MlpSlice *s,
                                      const PrRegion *rg, const int *tok)
{
    if (slice_empty(s))
        return 0;
    Layout a = layout(&g->host->cfg, s);
    MlpActs A = mlp_acts_in_region(rg, &a);
    /* out = NULL: a slice without head does not keep its output; loss = NULL */
    return forward_into(g, st, s, &A, NULL, NULL, tok, NULL);
}

/* Gradient of xs[i] in the act region; dxs[0] of a slice without embedding is din. */
static float *dxs_at(const PrRegion *rg, const Layout *a, const MlpSlice *s, int i, float *din)
{
    if (!s->embed) {
        if (i == 0)
            return din;
        i--;
    }
    return pr_region_at(rg, (int64_t)(a->dxs + (size_t)i * a->sbtc));
}

/* Weight gradients of the slice from the act region after its input-gradient pass. */
static int weight_grads(CuMlp *g, cudaStream_t st, const MlpSlice *s, const PrRegion *rg,
                        const Layout *a, const int *tok)
{
    const MlpConfig *c = &g->host->cfg;
    const MlpParams *gr = &g->host->grads;
    int N = c->B * c->T, C = c->C, H = 4 * c->C, V = c->vocab, nl = s->nlayers;
    cublasHandle_t h = g->blas;
    MlpActs A = mlp_acts_in_region(rg, a);
    if (s->head &&
        (matmul_backward_weight(h, st, dg(g, gr->head_w), dg(g, gr->head_b), A.probs, A.lnf_out, N,
                                C, V) ||
         layernorm_backward_weight(st, dg(g, gr->lnf_w), dg(g, gr->lnf_b), pr_region_at(rg, (int64_t)a->dlnf),
                                   mlp_xs(&A, (size_t)nl), A.lnf_mean, A.lnf_rstd, N, C)))
        return -1;
    for (int i = nl - 1; i >= 0; i--) {
        size_t l = (size_t)(s->layer0 + i);
        const float *dres = dxs_at(rg, a, s, i + 1, NULL);
        if (matmul_backward_weight(h, st, dg(g, gr->fc2_w + l * C * H), dg(g, gr->fc2_b + l * C),
                                   dres, A.gelu + i * A.s_bth, N, H, C) ||
            matmul_backward_weight(h, st, dg(g, gr->fc1_w + l * H * C), dg(g, gr->fc1_b + l * H),
                                   A.fch + i * A.s_bth, A.ln_out + i * A.s_btc, N, C, H) ||
            layernorm_backward_weight(st, dg(g, gr->ln_w + l * C), dg(g, gr->ln_b + l * C),
                                      pr_region_at(rg, (int64_t)(a->dln + i * a->sbtc)), mlp_xs(&A, (size_t)i),
                                      A.mean + i * A.s_bt, A.rstd + i * A.s_bt, N, C))
            return -1;
    }
    if (s->embed && encoder_backward(st, dg(g, gr->wte), dxs_at(rg, a, s, 0, NULL), tok, N, C))
        return -1;
    return 0;
}

extern "C" int cu_mlp_backward(CuMlp *g, cudaStream_t st, const MlpSlice *s, float *din, void *act,
                               const float *dout, const int *tok, const int *tgt, bool split)
{
    PrRegion rg = whole_region(g, s, act);
    return cu_mlp_backward_split(g, st, s, din, &rg, dout, tok, tgt, split);
}

extern "C" int cu_mlp_backward_split(CuMlp *g, cudaStream_t st, const MlpSlice *s, float *din,
                                     const PrRegion *rg, const float *dout, const int *tok,
                                     const int *tgt, bool split)
{
    const MlpConfig *c = &g->host->cfg;
    const MlpParams *p = &g->host->params;
    int N = c->B * c->T, C = c->C, H = 4 * c->C, V = c->vocab, nl = s->nlayers;
    size_t btc = (size_t)N * C;
    cublasHandle_t h = g->blas;
    if (slice_empty(s)) {
        CUDA_CHECK(cudaMemcpyAsync(din, dout, btc * sizeof(float), cudaMemcpyDeviceToDevice, st));
        return 0;
    }
    Layout a = layout(c, s);
    MlpActs A = mlp_acts_in_region(rg, &a);
    float *dtop = dxs_at(rg, &a, s, nl, din);   /* grad of the slice's top */
    if (s->head) {
        float *dlnf = pr_region_at(rg, (int64_t)a.dlnf);
        float gscale = 1.0f / (float)c->M;
        /* dlogits (N,V) replaces probs; -> dlnf (N,C) -> dtop (N,C) */
        if (crossentropy_softmax_backward(st, A.probs, A.probs, tgt, gscale / (float)N, N, V) ||
            matmul_backward_input(h, st, dlnf, A.probs, dp(g, p->head_w), N, C, V))
            return -1;
        CUDA_CHECK(cudaMemsetAsync(dtop, 0, btc * sizeof(float), st));
        if (layernorm_backward_input(st, dtop, dlnf, mlp_xs(&A, (size_t)nl), A.lnf_mean,
                                     A.lnf_rstd, dp(g, p->lnf_w), N, C))
            return -1;
    } else {
        CUDA_CHECK(cudaMemcpyAsync(dtop, dout, btc * sizeof(float), cudaMemcpyDeviceToDevice, st));
    }
    float *dgelu = pr_region_at(rg, (int64_t)a.dgelu);
    for (int i = nl - 1; i >= 0; i--) {
        size_t l = (size_t)(s->layer0 + i);
        const float *dres = dxs_at(rg, &a, s, i + 1, din);
        float *dx = dxs_at(rg, &a, s, i, din), *fch = A.fch + i * A.s_bth;
        float *dln = pr_region_at(rg, (int64_t)(a.dln + i * a.sbtc));
        /* dres (N,C) -> fc2^T -> dgelu (N,H) -> GELU' -> dfch (N,H) -> fc1^T -> dln (N,C)
         * -> LN' -> dx (N,C) += residual */
        if (matmul_backward_input(h, st, dgelu, dres, dp(g, p->fc2_w + l * C * H), N, H, C) ||
            gelu_backward(st, fch, fch, dgelu, (size_t)N * H) ||
            matmul_backward_input(h, st, dln, fch, dp(g, p->fc1_w + l * H * C), N, C, H))
            return -1;
        CUDA_CHECK(cudaMemcpyAsync(dx, dres, btc * sizeof(float), cudaMemcpyDeviceToDevice, st));
        if (layernorm_backward_input(st, dx, dln, mlp_xs(&A, (size_t)i), A.mean + i * A.s_bt,
                                     A.rstd + i * A.s_bt, dp(g, p->ln_w + l * C), N, C))
            return -1;
    }
    return split ? 0 : weight_grads(g, st, s, rg, &a, tok);
}

extern "C" int cu_mlp_weight_grad(CuMlp *g, cudaStream_t st, const MlpSlice *s, void *act,
                                  const int *tok)
{
    PrRegion rg = whole_region(g, s, act);
    return cu_mlp_weight_grad_split(g, st, s, &rg, tok);
}

extern "C" int cu_mlp_weight_grad_split(CuMlp *g, cudaStream_t st, const MlpSlice *s,
                                        const PrRegion *rg, const int *tok)
{
    if (slice_empty(s))
        return 0;
    Layout a = layout(&g->host->cfg, s);
    return weight_grads(g, st, s, rg, &a, tok);
}

__global__ void sgd_kernel(float *p, const float *gr, float lr, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] -= lr * gr[i];
}

extern "C" int cu_sgd_range(cudaStream_t st, float *p, const float *gr, float lr, size_t n)
{
    if (n == 0)
        return 0;
    sgd_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(p, gr, lr, n);
    KERNEL_CHECK();
    return 0;
}

extern "C" int cu_mlp_zero_grad(CuMlp *g, cudaStream_t st, const MlpSlice *s)
{
    for (int i = 0; i < mlp_param_count(g->host); i++)
        if (mlp_param_in_slice(g->host, i, s)) {
            float *hg;
            size_t n;
            mlp_param(g->host, i, NULL, NULL, &hg, &n);
            CUDA_CHECK(cudaMemsetAsync(dg(g, hg), 0, n * sizeof(float), st));
        }
    return 0;
}

extern "C" int cu_mlp_sgd(CuMlp *g, cudaStream_t st, const MlpSlice *s, float lr)
{
    for (int i = 0; i < mlp_param_count(g->host); i++)
        if (mlp_param_in_slice(g->host, i, s)) {
            float *hp, *hg;
            size_t n;
            mlp_param(g->host, i, NULL, &hp, &hg, &n);
            sgd_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(dp(g, hp), dg(g, hg), lr, n);
            KERNEL_CHECK();
        }
    return 0;
}

extern "C" int cu_mlp_grads_to_host(CuMlp *g, cudaStream_t st, const MlpSlice *s, MlpModel *dst)
{
    for (int i = 0; i < mlp_param_count(g->host); i++)
        if (mlp_param_in_slice(g->host, i, s)) {
            float *hg, *out;
            size_t n;
            mlp_param(g->host, i, NULL, NULL, &hg, &n);
            mlp_param(dst, i, NULL, NULL, &out, NULL);
            CUDA_CHECK(cudaMemcpyAsync(out, dg(g, hg), n * sizeof(float), cudaMemcpyDeviceToHost, st));
        }
    CUDA_CHECK(cudaStreamSynchronize(st));
    return 0;
}

/* ---- the mlp's device arch table (CuArch) ----------------------------------------------- */

static int arch_init(CuMlp *g, const void *host, const MlpSlice *slices, int nv)
{
    (void)slices;
    (void)nv;
    return cu_mlp_init(g, (const MlpModel *)host);
}

static int arch_grads_to_host(CuMlp *g, cudaStream_t st, const MlpSlice *s, void *dst)
{
    return cu_mlp_grads_to_host(g, st, s, (MlpModel *)dst);
}

extern "C" const CuArch cu_mlp_arch = {
    arch_init,          cu_mlp_free,      cu_mlp_forward_split, cu_mlp_recompute_split,
    cu_mlp_backward_split, cu_mlp_weight_grad_split, cu_mlp_zero_grad, cu_mlp_sgd,
    arch_grads_to_host,
};
