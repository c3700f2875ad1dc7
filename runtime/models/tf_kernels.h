/* tf_kernels.h - the layer bodies of the gpt and llama workloads: each function computes
 * one output element, row or column from its index, in the common subset of C11 and
 * CUDA C++. The CUDA backend's kernels (runtime/cuda/tf_cuda.cu) call them with their
 * thread's index; the CPU workload (runtime/models/transformer.c) and the host emulation
 * test of the GPU passes (tests/unit/test_tf_cuda_host.c) call the very same code in
 * loops, so one formula serves both backends and the GPU's index arithmetic is checked
 * without a GPU.
 *
 * Norm statistics in double, eps 1e-5; RoPE base 10000 on (2i, 2i+1) pairs; causal
 * softmax with the sum in double; reductions over rows in row order (deterministic).
 * Legend (tf_layout.h): B, T, N = B*T, C, NH heads of size hd = C/NH, NKV key/value
 * heads (group = NH/NKV query heads share one), K = NKV*hd, ld = C + 2K the row length
 * of the QKV tensor (Q, then K, then V), F the MLP width.
 * No function allocates, keeps state or writes outside its own element/row/column, so
 * every index may run at once.
 */
#ifndef PIPERUN_TF_KERNELS_H
#define PIPERUN_TF_KERNELS_H

#include <math.h>
#include <stddef.h>

#include "tf_layout.h"

#ifdef __CUDACC__
#define TF_HD static inline __host__ __device__
#else
#define TF_HD static inline
#endif

/* ---- embedding -------------------------------------------------------------------- */

/* Element i of x0 (N,C) = wte[tok[n]] + wpe[n % T] (wpe NULL: llama, no learned
 * positions). i < N*C. */
TF_HD void tf_embed_elem(float *out, const int *tok, const float *wte, const float *wpe,
                         int C, int T, size_t i)
{
    size_t n = i / (size_t)C, c = i % (size_t)C;
    float x = wte[(size_t)tok[n] * C + c];
    if (wpe)
        x += wpe[(n % (size_t)T) * C + c];
    out[i] = x;
}

/* Column c of dwte (V,C) += dx (N,C) scattered by tok (N), rows in order (no atomics,
 * deterministic). c < C. */
TF_HD void tf_embed_backward_col(float *dwte, const float *dx, const int *tok, int N, int C,
                                 int c)
{
    for (int n = 0; n < N; n++)
        dwte[(size_t)tok[n] * C + c] += dx[(size_t)n * C + c];
}

/* Element i = t*C + c of dwpe (T,C) += sum over b of dx (N,C) at row b*T + t, in b
 * order. i < T*C. */
TF_HD void tf_pos_backward_elem(float *dwpe, const float *dx, int B, int T, int C, size_t i)
{
    size_t t = i / (size_t)C, c = i % (size_t)C;
    for (int b = 0; b < B; b++)
        dwpe[i] += dx[((size_t)b * T + t) * C + c];
}

/* ---- LayerNorm / RMSNorm ------------------------------------------------------------- */

/* Mean and rstd = 1/sqrt(var + 1e-5) of one row x (C) (rms: mean 0, var = mean(x^2)). */
TF_HD void tf_norm_stats(const float *x, int C, int rms, float *mean, float *rstd)
{
    double mu = 0.0;
    if (!rms) {
        for (int i = 0; i < C; i++)
            mu += x[i];
        mu /= C;
    }
    double v = 0.0;
    for (int i = 0; i < C; i++)
        v += (x[i] - mu) * (x[i] - mu);
    v /= C;
    *mean = (float)mu;
    *rstd = (float)(1.0 / sqrt(v + 1e-5));
}

/* Row n: mean[n], rstd[n] of inp (N,C). */
TF_HD void tf_norm_stats_row(float *mean, float *rstd, const float *inp, int rms, int C, int n)
{
    tf_norm_stats(inp + (size_t)n * C, C, rms, &mean[n], &rstd[n]);
}

/* Row n of out (N,C) = (inp - mean) * rstd * w + b; b NULL: RMSNorm. */
TF_HD void tf_norm_forward_row(float *out, const float *inp, const float *w, const float *b,
                               int C, int n)
{
    const float *x = inp + (size_t)n * C;
    float *o = out + (size_t)n * C, mu, s;
    tf_norm_stats(x, C, b == NULL, &mu, &s);
    for (int i = 0; i < C; i++)
        o[i] = (x[i] - mu) * s * w[i] + (b ? b[i] : 0.0f);
}

/* Row n of dinp (N,C) += the norm's input gradient for dout (N,C): LayerNorm
 * dx = s (dn - mean(dn) - xhat mean(dn xhat)), RMSNorm without the mean(dn) term. */
TF_HD void tf_norm_backward_input_row(float *dinp, const float *dout, const float *inp,
                                      const float *w, int rms, int C, int n)
{
    const float *d = dout + (size_t)n * C, *x = inp + (size_t)n * C;
    float *dx = dinp + (size_t)n * C, mu, s;
    tf_norm_stats(x, C, rms, &mu, &s);
    double dn_mean = 0.0, dn_xh_mean = 0.0;
    for (int i = 0; i < C; i++) {
        float xh = (x[i] - mu) * s, dn = w[i] * d[i];
        dn_mean += dn;
        dn_xh_mean += (double)dn * xh;
    }
    float a = rms ? 0.0f : (float)(dn_mean / C), bb = (float)(dn_xh_mean / C);
    for (int i = 0; i < C; i++) {
        float xh = (x[i] - mu) * s, dn = w[i] * d[i];
        dx[i] += (dn - a - xh * bb) * s;
    }
}

/* Channel i: dw[i] += sum_n dout * xhat, db[i] += sum_n dout (db NULL: RMSNorm), rows in
 * order, with the row statistics mean/rstd (N) of tf_norm_stats_row. */
TF_HD void tf_norm_backward_weight_col(float *dw, float *db, const float *dout,
                                       const float *inp, const float *mean, const float *rstd,
                                       int N, int C, int i)
{
    for (int n = 0; n < N; n++) {
        float d = dout[(size_t)n * C + i];
        dw[i] += d * ((inp[(size_t)n * C + i] - mean[n]) * rstd[n]);
        if (db)
            db[i] += d;
    }
}

/* ---- SwiGLU (llama) ------------------------------------------------------------------ */

/* Element j: fb = SiLU(fa) = fa / (1 + e^-fa), fd = fb * fc. */
TF_HD void tf_swiglu_elem(float *fb, float *fd, const float *fa, const float *fc, size_t j)
{
    fb[j] = fa[j] / (1.0f + expf(-fa[j]));
    fd[j] = fb[j] * fc[j];
}

/* Element j: dfa = dfb fc SiLU'(fa), SiLU' = sg (1 + x (1 - sg)); dfc = dfb fb. */
TF_HD void tf_swiglu_backward_elem(float *dfa, float *dfc, const float *dfb, const float *fa,
                                   const float *fb, const float *fc, size_t j)
{
    float sg = 1.0f / (1.0f + expf(-fa[j]));
    dfa[j] = dfb[j] * fc[j] * sg * (1.0f + fa[j] * (1.0f - sg));
    dfc[j] = dfb[j] * fb[j];
}

/* ---- rotary position embedding (Su et al. 2021, llama) ------------------------------- */

/* Element i of N * (NH + NKV) * hd/2: the pair (2p, 2p+1) of Q or K head h of row n of
 * qkv (N, ld), rotated by t * 10000^(-2p/hd) (t = n % T); inverse: the transpose
 * rotation (the gradient's). */
TF_HD void tf_rope_elem(float *qkv, const TfDims *d, int inverse, size_t i)
{
    int hd = d->C / d->NH, half = hd / 2, nh = d->NH + d->NKV;
    size_t ld = (size_t)d->C + 2 * (size_t)hd * d->NKV;
    size_t n = i / ((size_t)nh * half);
    int r = (int)(i % ((size_t)nh * half)), h = r / half, p = r % half;
    int t = (int)(n % (size_t)d->T);
    double th = t * pow(10000.0, -2.0 * p / hd);
    float c = (float)cos(th), s = inverse ? -(float)sin(th) : (float)sin(th);
    float *x = qkv + n * ld + (size_t)h * hd + 2 * p;
    float x0 = x[0], x1 = x[1];
    x[0] = x0 * c - x1 * s;
    x[1] = x0 * s + x1 * c;
}

/* ---- causal self-attention with grouped-query heads ---------------------------------- */

/* Pointer to row (b, t) of head h's Q, or of key/value head kh's K or V (which = 0, 1,
 * 2), in qkv (N, ld). */
TF_HD const float *tf_qkv_at(const float *qkv, const TfDims *d, int which, int b, int t,
                             int head)
{
    int hd = d->C / d->NH;
    size_t ld = (size_t)d->C + 2 * (size_t)hd * d->NKV;
    size_t col = which == 0 ? (size_t)head * hd
                            : (size_t)d->C + (size_t)(which - 1) * hd * d->NKV + (size_t)head * hd;
    return qkv + ((size_t)b * d->T + t) * ld + col;
}

/* Row r = (b, h, i) of att (B,NH,T,T): the causal softmax of scale q_i . k_j over
 * j <= i, zeros above the diagonal. r < B*NH*T. */
TF_HD void tf_att_forward_row(float *att, const float *qkv, const TfDims *d, size_t r)
{
    int T = d->T, hd = d->C / d->NH, group = d->NH / d->NKV;
    int i = (int)(r % (size_t)T), h = (int)(r / (size_t)T % (size_t)d->NH);
    int b = (int)(r / ((size_t)T * d->NH));
    float scale = 1.0f / sqrtf((float)hd), *p = att + r * (size_t)T;
    const float *q = tf_qkv_at(qkv, d, 0, b, i, h);
    float mx = -INFINITY;
    for (int j = 0; j <= i; j++) {
        const float *k = tf_qkv_at(qkv, d, 1, b, j, h / group);
        float s = 0.0f;
        for (int e = 0; e < hd; e++)
            s += q[e] * k[e];
        p[j] = scale * s;
        mx = p[j] > mx ? p[j] : mx;
    }
    double sum = 0.0;
    for (int j = 0; j <= i; j++) {
        p[j] = expf(p[j] - mx);
        sum += p[j];
    }
    float inv = (float)(1.0 / sum);
    for (int j = 0; j <= i; j++)
        p[j] *= inv;
    for (int j = i + 1; j < T; j++)
        p[j] = 0.0f;
}

/* Element x = n*C + h*hd + e of y (N,C) = sum_{j <= t} P[b,h,t,j] v_j[e]. x < N*C. */
TF_HD void tf_att_value_elem(float *y, const float *att, const float *qkv, const TfDims *d,
                             size_t x)
{
    int T = d->T, C = d->C, hd = C / d->NH, group = d->NH / d->NKV;
    size_t n = x / (size_t)C;
    int col = (int)(x % (size_t)C), h = col / hd, e = col % hd;
    int b = (int)(n / (size_t)T), t = (int)(n % (size_t)T);
    const float *p = att + (((size_t)b * d->NH + h) * T + t) * (size_t)T;
    float s = 0.0f;
    for (int j = 0; j <= t; j++)
        s += p[j] * tf_qkv_at(qkv, d, 2, b, j, h / group)[e];
    y[x] = s;
}

/* Row r = (b, h, i) of datt (B,NH,T,T): dS = P (dP - sum_j dP P) with dP_j = dy_i . v_j
 * over j <= i, zeros above the diagonal; dy (N,C) is the attention output's gradient. */
TF_HD void tf_att_dscore_row(float *datt, const float *att, const float *dy, const float *qkv,
                             const TfDims *d, size_t r)
{
    int T = d->T, C = d->C, hd = C / d->NH, group = d->NH / d->NKV;
    int i = (int)(r % (size_t)T), h = (int)(r / (size_t)T % (size_t)d->NH);
    int b = (int)(r / ((size_t)T * d->NH));
    const float *p = att + r * (size_t)T, *g = dy + ((size_t)b * T + i) * C + (size_t)h * hd;
    float *ds = datt + r * (size_t)T;
    double dot = 0.0;
    for (int j = 0; j <= i; j++) {
        const float *v = tf_qkv_at(qkv, d, 2, b, j, h / group);
        float s = 0.0f;
        for (int e = 0; e < hd; e++)
            s += g[e] * v[e];
        ds[j] = s;
        dot += (double)s * p[j];
    }
    float fd = (float)dot;
    for (int j = 0; j <= i; j++)
        ds[j] = p[j] * (ds[j] - fd);
    for (int j = i + 1; j < T; j++)
        ds[j] = 0.0f;
}

/* Element x = n*C + h*hd + e of the Q part of dqkv (N, ld): scale sum_{j <= t} dS k_j[e].
 * x < N*C. */
TF_HD void tf_att_dq_elem(float *dqkv, const float *datt, const float *qkv, const TfDims *d,
                          size_t x)
{
    int T = d->T, C = d->C, hd = C / d->NH, group = d->NH / d->NKV;
    size_t n = x / (size_t)C, ld = (size_t)C + 2 * (size_t)hd * d->NKV;
    int col = (int)(x % (size_t)C), h = col / hd, e = col % hd;
    int b = (int)(n / (size_t)T), t = (int)(n % (size_t)T);
    const float *ds = datt + (((size_t)b * d->NH + h) * T + t) * (size_t)T;
    float s = 0.0f;
    for (int j = 0; j <= t; j++)
        s += ds[j] * tf_qkv_at(qkv, d, 1, b, j, h / group)[e];
    dqkv[n * ld + (size_t)col] = (1.0f / sqrtf((float)hd)) * s;
}

/* Element x = n*K + kh*hd + e of the K and V parts of dqkv (N, ld), row n = (b, j): over
 * the query heads h of key/value head kh in order, dK += scale sum_{i >= j} dS[h,i,j]
 * q_i[e] and dV += sum_{i >= j} P[h,i,j] dy_i[e]. x < N*K. */
TF_HD void tf_att_dkv_elem(float *dqkv, const float *datt, const float *att, const float *dy,
                           const float *qkv, const TfDims *d, size_t x)
{
    int T = d->T, C = d->C, hd = C / d->NH, group = d->NH / d->NKV, K = hd * d->NKV;
    size_t n = x / (size_t)K, ld = (size_t)C + 2 * (size_t)K;
    int col = (int)(x % (size_t)K), kh = col / hd, e = col % hd;
    int b = (int)(n / (size_t)T), j = (int)(n % (size_t)T);
    float scale = 1.0f / sqrtf((float)hd), dk = 0.0f, dv = 0.0f;
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        size_t hb = ((size_t)b * d->NH + h) * T;
        float sk = 0.0f, sv = 0.0f;
        for (int i = j; i < T; i++) {
            size_t at = (hb + i) * (size_t)T + j;
            sk += datt[at] * tf_qkv_at(qkv, d, 0, b, i, h)[e];
            sv += att[at] * dy[((size_t)b * T + i) * C + (size_t)h * hd + e];
        }
        dk += scale * sk;
        dv += sv;
    }
    dqkv[n * ld + (size_t)C + (size_t)col] = dk;
    dqkv[n * ld + (size_t)C + (size_t)K + (size_t)col] = dv;
}

/* ---- optimizer ------------------------------------------------------------------------ */

/* Element j: p -= lr * g (the workloads' SGD). */
TF_HD void tf_sgd_elem(float *p, const float *g, float lr, size_t j)
{
    p[j] -= lr * g[j];
}

#endif
