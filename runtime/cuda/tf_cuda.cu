/* tf_cuda.cu - the `gpt` and `llama` workloads on the GPU, fp32: the slice passes of
 * tf_slice.h (F, R, B, W on runtime/models/tf_layout.h's region, so the arena plan, SO/SI sizes
 * and the ckpt/wact prefixes are the CPU ones) with their primitives enqueued on the
 * rank's compute stream: cuBLAS GEMMs (matmul.cuh, pedantic fp32, no TF32), the mlp's
 * kernels for what the models share (residual, GELU, softmax and cross-entropy), and for
 * the rest one thread per element, row or column running the bodies of tf_kernels.h
 * (norms, embedding, SwiGLU, RoPE, causal grouped-query attention: straightforward, not
 * fused). The CPU model (runtime/models/transformer.h) is the reference: --check copies these
 * gradients to the host and compares them with tf_reference_iteration (1e-4 relative);
 * tests/unit/test_tf_cuda_host.c runs the same passes and bodies on the host.
 * Legend as transformer.h: B, T, N = B*T, C, NH, NKV, K, F, V. */
#include <stdlib.h>
#include <string.h>

#include "cu_api.h"
extern "C" {
#include "transformer.h"
}
#include "crossentropy.cuh"
#include "gelu.cuh"
#include "matmul.cuh"
#include "residual.cuh"
#include "tf_slice.h"

/* The device state of one rank's model: the passes' TfDev, its stream and cuBLAS. */
typedef struct CuTf {
    TfDev dev;
    cudaStream_t st;   /* the stream of the op being enqueued */
    cublasHandle_t h;
} CuTf;

static CuTf *be(TfDev *x) { return (CuTf *)x->be; }
static const TfDims *dims(const TfDev *x) { return &x->host->cfg.d; }
static int rows(const TfDev *x) { return dims(x)->B * dims(x)->T; }

/* ---- kernels: one thread per index of a tf_kernels.h body ------------------------------- */

#define TF_THREADS 256
#define TF_INDEX(n)                                                          \
    size_t i_ = (size_t)blockIdx.x * blockDim.x + threadIdx.x;               \
    if (i_ >= (n))                                                           \
        return;

/* Launches kernel over n indices (its last argument) on x's stream. */
#define TF_LAUNCH(kernel, n, ...)                                                        \
    do {                                                                                 \
        size_t n_ = (n);                                                                 \
        if (n_) {                                                                        \
            kernel<<<(unsigned)((n_ + TF_THREADS - 1) / TF_THREADS), TF_THREADS, 0,      \
                     be(x)->st>>>(__VA_ARGS__, n_);                                      \
            KERNEL_CHECK();                                                              \
        }                                                                                \
    } while (0)

static __global__ void embed_kernel(float *out, const int *tok, const float *wte,
                                    const float *wpe, int C, int T, size_t n)
{
    TF_INDEX(n);
    tf_embed_elem(out, tok, wte, wpe, C, T, i_);
}

static __global__ void embed_backward_kernel(float *dwte, const float *dx, const int *tok, int N,
                                             int C, size_t n)
{
    TF_INDEX(n);
    tf_embed_backward_col(dwte, dx, tok, N, C, (int)i_);
}

static __global__ void pos_backward_kernel(float *dwpe, const float *dx, int B, int T, int C,
                                           size_t n)
{
    TF_INDEX(n);
    tf_pos_backward_elem(dwpe, dx, B, T, C, i_);
}

static __global__ void norm_forward_kernel(float *out, const float *inp, const float *w,
                                           const float *b, int C, size_t n)
{
    TF_INDEX(n);
    tf_norm_forward_row(out, inp, w, b, C, (int)i_);
}

static __global__ void norm_backward_input_kernel(float *dinp, const float *dout,
                                                  const float *inp, const float *w, int rms,
                                                  int C, size_t n)
{
    TF_INDEX(n);
    tf_norm_backward_input_row(dinp, dout, inp, w, rms, C, (int)i_);
}

static __global__ void norm_stats_kernel(float *mean, float *rstd, const float *inp, int rms,
                                         int C, size_t n)
{
    TF_INDEX(n);
    tf_norm_stats_row(mean, rstd, inp, rms, C, (int)i_);
}

static __global__ void norm_backward_weight_kernel(float *dw, float *db, const float *dout,
                                                   const float *inp, const float *mean,
                                                   const float *rstd, int N, int C, size_t n)
{
    TF_INDEX(n);
    tf_norm_backward_weight_col(dw, db, dout, inp, mean, rstd, N, C, (int)i_);
}

static __global__ void swiglu_kernel(float *fb, float *fd, const float *fa, const float *fc,
                                     size_t n)
{
    TF_INDEX(n);
    tf_swiglu_elem(fb, fd, fa, fc, i_);
}

static __global__ void swiglu_backward_kernel(float *dfa, float *dfc, const float *dfb,
                                              const float *fa, const float *fb, const float *fc,
                                              size_t n)
{
    TF_INDEX(n);
    tf_swiglu_backward_elem(dfa, dfc, dfb, fa, fb, fc, i_);
}

static __global__ void rope_kernel(float *qkv, TfDims d, int inverse, size_t n)
{
    TF_INDEX(n);
    tf_rope_elem(qkv, &d, inverse, i_);
}

static __global__ void att_forward_kernel(float *att, const float *qkv, TfDims d, size_t n)
{
    TF_INDEX(n);
    tf_att_forward_row(att, qkv, &d, i_);
}

static __global__ void att_value_kernel(float *y, const float *att, const float *qkv, TfDims d,
                                        size_t n)
{
    TF_INDEX(n);
    tf_att_value_elem(y, att, qkv, &d, i_);
}

static __global__ void att_dscore_kernel(float *datt, const float *att, const float *dy,
                                         const float *qkv, TfDims d, size_t n)
{
    TF_INDEX(n);
    tf_att_dscore_row(datt, att, dy, qkv, &d, i_);
}

static __global__ void att_dq_kernel(float *dqkv, const float *datt, const float *qkv, TfDims d,
                                     size_t n)
{
    TF_INDEX(n);
    tf_att_dq_elem(dqkv, datt, qkv, &d, i_);
}

static __global__ void att_dkv_kernel(float *dqkv, const float *datt, const float *att,
                                      const float *dy, const float *qkv, TfDims d, size_t n)
{
    TF_INDEX(n);
    tf_att_dkv_elem(dqkv, datt, att, dy, qkv, &d, i_);
}

static __global__ void sgd_step_kernel(float *p, const float *g, float lr, size_t n)
{
    TF_INDEX(n);
    tf_sgd_elem(p, g, lr, i_);
}

/* ---- the primitives of tf_slice.h ----------------------------------------------------- */

static int tfk_copy(TfDev *x, float *dst, const float *src, size_t n)
{
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, be(x)->st));
    return 0;
}

static int tfk_zero(TfDev *x, float *dst, size_t n)
{
    CUDA_CHECK(cudaMemsetAsync(dst, 0, n * sizeof(float), be(x)->st));
    return 0;
}

static int tfk_embed(TfDev *x, float *x0, const int *tok, const float *wte, const float *wpe)
{
    const TfDims *d = dims(x);
    TF_LAUNCH(embed_kernel, (size_t)rows(x) * d->C, x0, tok, wte, wpe, d->C, d->T);
    return 0;
}

static int tfk_embed_backward(TfDev *x, float *dwte, float *dwpe, const float *dx0,
                              const int *tok)
{
    const TfDims *d = dims(x);
    TF_LAUNCH(embed_backward_kernel, (size_t)d->C, dwte, dx0, tok, rows(x), d->C);
    if (dwpe)
        TF_LAUNCH(pos_backward_kernel, (size_t)d->T * d->C, dwpe, dx0, d->B, d->T, d->C);
    return 0;
}

static int tfk_norm(TfDev *x, float *out, const float *inp, const float *w, const float *b)
{
    TF_LAUNCH(norm_forward_kernel, (size_t)rows(x), out, inp, w, b, dims(x)->C);
    return 0;
}

static int tfk_norm_backward_input(TfDev *x, float *dinp, const float *dout, const float *inp,
                                   const float *w, bool rms)
{
    TF_LAUNCH(norm_backward_input_kernel, (size_t)rows(x), dinp, dout, inp, w, rms ? 1 : 0,
              dims(x)->C);
    return 0;
}

static int tfk_norm_backward_weight(TfDev *x, float *dw, float *db, const float *dout,
                                    const float *inp)
{
    int N = rows(x), C = dims(x)->C;
    TF_LAUNCH(norm_stats_kernel, (size_t)N, x->stats, x->stats + N, inp, db == NULL ? 1 : 0, C);
    TF_LAUNCH(norm_backward_weight_kernel, (size_t)C, dw, db, dout, inp, x->stats, x->stats + N,
              N, C);
    return 0;
}

static int tfk_matmul(TfDev *x, float *out, const float *inp, const float *w,
                      const float *bias, int N, int C, int OC)
{
    return matmul_forward(be(x)->h, be(x)->st, out, inp, w, bias, N, C, OC);
}

static int tfk_matmul_backward_input(TfDev *x, float *dinp, const float *dout, const float *w,
                                     int N, int C, int OC)
{
    return matmul_backward_input(be(x)->h, be(x)->st, dinp, dout, w, N, C, OC);
}

static int tfk_matmul_backward_weight(TfDev *x, float *dw, float *dbias, const float *dout,
                                      const float *inp, int N, int C, int OC)
{
    return matmul_backward_weight(be(x)->h, be(x)->st, dw, dbias, dout, inp, N, C, OC);
}

static int tfk_residual(TfDev *x, float *out, const float *a, const float *b, size_t n)
{
    return residual_forward(be(x)->st, out, a, b, n);
}

static int tfk_gelu(TfDev *x, float *out, const float *inp, size_t n)
{
    return gelu_forward(be(x)->st, out, inp, n);
}

static int tfk_gelu_backward(TfDev *x, float *dinp, const float *inp, const float *dout,
                             size_t n)
{
    return gelu_backward(be(x)->st, dinp, inp, dout, n);
}

static int tfk_swiglu(TfDev *x, float *fb, float *fd, const float *fa, const float *fc,
                      size_t n)
{
    TF_LAUNCH(swiglu_kernel, n, fb, fd, fa, fc);
    return 0;
}

static int tfk_swiglu_backward(TfDev *x, float *dfa, float *dfc, const float *dfb,
                               const float *fa, const float *fb, const float *fc, size_t n)
{
    TF_LAUNCH(swiglu_backward_kernel, n, dfa, dfc, dfb, fa, fb, fc);
    return 0;
}

static int tfk_rope(TfDev *x, float *qkv, bool inverse)
{
    const TfDims *d = dims(x);
    size_t n = (size_t)rows(x) * (size_t)(d->NH + d->NKV) * (size_t)(d->C / d->NH / 2);
    TF_LAUNCH(rope_kernel, n, qkv, *d, inverse ? 1 : 0);
    return 0;
}

static int tfk_attention(TfDev *x, float *y, float *att, const float *qkv)
{
    const TfDims *d = dims(x);
    TF_LAUNCH(att_forward_kernel, (size_t)d->B * d->NH * d->T, att, qkv, *d);
    TF_LAUNCH(att_value_kernel, (size_t)rows(x) * d->C, y, att, qkv, *d);
    return 0;
}

static int tfk_attention_backward(TfDev *x, float *dqkv, float *datt, const float *dy,
                                  const float *att, const float *qkv)
{
    const TfDims *d = dims(x);
    size_t K = (size_t)d->C / d->NH * d->NKV;
    TF_LAUNCH(att_dscore_kernel, (size_t)d->B * d->NH * d->T, datt, att, dy, qkv, *d);
    TF_LAUNCH(att_dq_kernel, (size_t)rows(x) * d->C, dqkv, datt, qkv, *d);
    TF_LAUNCH(att_dkv_kernel, (size_t)rows(x) * K, dqkv, datt, att, dy, qkv, *d);
    return 0;
}

static int tfk_softmax(TfDev *x, float *probs, const float *logits)
{
    return softmax_forward(be(x)->st, probs, logits, rows(x), dims(x)->V);
}

static int tfk_crossentropy(TfDev *x, float *loss, const float *probs, const int *tgt)
{
    return crossentropy_forward(be(x)->st, loss, probs, tgt, rows(x), dims(x)->V);
}

static int tfk_crossentropy_backward(TfDev *x, float *dlogits, const float *probs,
                                     const int *tgt, float dloss)
{
    return crossentropy_softmax_backward(be(x)->st, dlogits, probs, tgt, dloss, rows(x),
                                         dims(x)->V);
}

static int tfk_sgd(TfDev *x, float *p, const float *g, float lr, size_t n)
{
    TF_LAUNCH(sgd_step_kernel, n, p, g, lr);
    return 0;
}

/* ---- the API of cu_api.h ---------------------------------------------------------------- */

static TfDev *dev_on(CuMlp *g, cudaStream_t st)
{
    g->tf->st = st;
    return &g->tf->dev;
}

extern "C" int cu_tf_init(CuMlp *g, const TfModel *host, const MlpSlice *slices, int nv)
{
    const TfConfig *c = &host->cfg;
    memset(g, 0, sizeof *g);
    if (!(g->tf = (CuTf *)calloc(1, sizeof *g->tf))) {
        cu_error(__FILE__, __LINE__, "calloc", "out of host memory");
        return -1;
    }
    TfDev *x = &g->tf->dev;
    x->host = host;
    x->be = g->tf;
    for (int v = 0; v < nv; v++) {
        size_t a = tf_act_bytes(c, &slices[v]) / sizeof(float);
        x->tmp_floats = a > x->tmp_floats ? a : x->tmp_floats;
    }
    if (cu_model_alloc(g, host->param_mem, host->grad_mem, host->nparams, c->M, x->tmp_floats))
        return -1;
    CUDA_CHECK(cudaMalloc((void **)&x->stats, 2 * (size_t)c->d.B * c->d.T * sizeof(float)));
    x->params = g->params;
    x->grads = g->grads;
    x->loss = g->loss;
    x->tmp = g->tmp;
    g->tf->h = g->blas;
    return 0;
}

extern "C" void cu_tf_free(CuMlp *g)
{
    if (g->tf)
        cudaFree(g->tf->dev.stats);
    free(g->tf);
    g->tf = NULL;
    cu_model_release(g);
}

extern "C" PrRegion cu_tf_region_whole(CuMlp *g, const MlpSlice *s, void *act)
{
    const TfDims *d = &g->tf->dev.host->cfg.d;
    TfLayout a = tf_layout(d, s->nlayers, s->embed, s->head);
    return tf_region_whole(act, &a);
}

extern "C" int cu_tf_forward(CuMlp *g, cudaStream_t st, const MlpSlice *s, int mb, float *out,
                             const PrRegion *rg, const float *in, const int *tok,
                             const int *tgt, bool keep_all)
{
    return tfd_forward(dev_on(g, st), s, mb, out, rg, in, tok, tgt, keep_all);
}

extern "C" int cu_tf_recompute(CuMlp *g, cudaStream_t st, const MlpSlice *s, const PrRegion *rg,
                               const int *tok)
{
    return tfd_recompute(dev_on(g, st), s, rg, tok);
}

extern "C" int cu_tf_backward(CuMlp *g, cudaStream_t st, const MlpSlice *s, float *din,
                              const PrRegion *rg, const float *dout, const int *tok,
                              const int *tgt, bool split)
{
    return tfd_backward(dev_on(g, st), s, din, rg, dout, tok, tgt, split);
}

extern "C" int cu_tf_weight_grad(CuMlp *g, cudaStream_t st, const MlpSlice *s,
                                 const PrRegion *rg, const int *tok)
{
    return tfd_weight_grad(dev_on(g, st), s, rg, tok);
}

extern "C" int cu_tf_zero_grad(CuMlp *g, cudaStream_t st, const MlpSlice *s)
{
    return tfd_zero_or_step(dev_on(g, st), s, true, 0.0f);
}

extern "C" int cu_tf_sgd(CuMlp *g, cudaStream_t st, const MlpSlice *s, float lr)
{
    return tfd_zero_or_step(dev_on(g, st), s, false, lr);
}

extern "C" int cu_tf_grads_to_host(CuMlp *g, cudaStream_t st, const MlpSlice *s, TfModel *dst)
{
    const TfModel *m = g->tf->dev.host;
    for (int i = 0; i < m->ntensors; i++)
        if (tf_param_in_slice(m, i, s)) {
            const TfTensor *t = &m->tensors[i];
            CUDA_CHECK(cudaMemcpyAsync(dst->grad_mem + t->off, g->grads + t->off,
                                       t->n * sizeof(float), cudaMemcpyDeviceToHost, st));
        }
    CUDA_CHECK(cudaStreamSynchronize(st));
    return 0;
}

/* ---- the transformers' device arch table (CuArch) --------------------------------------- */

static int arch_init(CuMlp *g, const void *host, const MlpSlice *slices, int nv)
{
    return cu_tf_init(g, (const TfModel *)host, slices, nv);
}

static int arch_grads_to_host(CuMlp *g, cudaStream_t st, const MlpSlice *s, void *dst)
{
    return cu_tf_grads_to_host(g, st, s, (TfModel *)dst);
}

extern "C" const CuArch cu_tf_arch = {
    arch_init,      cu_tf_free,     cu_tf_forward, cu_tf_recompute, cu_tf_backward,
    cu_tf_weight_grad, cu_tf_zero_grad, cu_tf_sgd, arch_grads_to_host,
};
