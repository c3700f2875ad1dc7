/* layernorm.cuh - layer norm over the last axis (eps 1e-5), forward and backward; the
 * GPU twin of mlp_layernorm_* in runtime/models/mlp_layers.c (same formulas, double
 * accumulation per row; weight gradients summed over rows in order, so the result is
 * deterministic).
 * Legend: N = rows (B*T), C = channels. */
#pragma once
#include "cuda_check.h"

/* One warp per row. out (N,C), mean (N), rstd (N), inp (N,C), weight/bias (C). */
static __global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                         const float *weight, const float *bias, int N, int C)
{
    int lane = threadIdx.x % 32;
    int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (n >= N)
        return;
    const float *x = inp + (size_t)n * C;
    double s = 0.0;
    for (int i = lane; i < C; i += 32)
        s += x[i];
    for (int o = 16; o > 0; o /= 2)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    double m = s / C, v = 0.0;
    for (int i = lane; i < C; i += 32)
        v += (x[i] - m) * (x[i] - m);
    for (int o = 16; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    v /= C;
    float r = (float)(1.0 / sqrt(v + 1e-5));
    float mf = (float)m;
    float *y = out + (size_t)n * C;
    for (int i = lane; i < C; i += 32)
        y[i] = (x[i] - mf) * r * weight[i] + bias[i];
    if (lane == 0) {
        mean[n] = mf;
        rstd[n] = r;
    }
}

/* dinp (N,C) += input gradient for dout (N,C). One warp per row. */
static __global__ void layernorm_backward_input_kernel(float *dinp, const float *dout, const float *inp,
                                                const float *mean, const float *rstd,
                                                const float *weight, int N, int C)
{
    int lane = threadIdx.x % 32;
    int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (n >= N)
        return;
    const float *d = dout + (size_t)n * C, *x = inp + (size_t)n * C;
    float *dx = dinp + (size_t)n * C;
    float m = mean[n], s = rstd[n];
    double a = 0.0, b = 0.0;
    for (int i = lane; i < C; i += 32) {
        float norm = (x[i] - m) * s, dnorm = weight[i] * d[i];
        a += dnorm;
        b += (double)dnorm * norm;
    }
    for (int o = 16; o > 0; o /= 2) {
        a += __shfl_xor_sync(0xffffffffu, a, o);
        b += __shfl_xor_sync(0xffffffffu, b, o);
    }
    float af = (float)(a / C), bf = (float)(b / C);
    for (int i = lane; i < C; i += 32) {
        float norm = (x[i] - m) * s, dnorm = weight[i] * d[i];
        dx[i] += (dnorm - af - norm * bf) * s;
    }
}

/* dweight (C) += sum_n dout * xhat, dbias (C) += sum_n dout: one thread per channel,
 * rows in order. */
static __global__ void layernorm_backward_weight_kernel(float *dweight, float *dbias, const float *dout,
                                                 const float *inp, const float *mean,
                                                 const float *rstd, int N, int C)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= C)
        return;
    float dw = dweight[i], db = dbias[i];
    for (int n = 0; n < N; n++) {
        float d = dout[(size_t)n * C + i];
        dw += d * ((inp[(size_t)n * C + i] - mean[n]) * rstd[n]);
        db += d;
    }
    dweight[i] = dw;
    dbias[i] = db;
}

static inline int layernorm_forward(cudaStream_t st, float *out, float *mean, float *rstd,
                                    const float *inp, const float *w, const float *b, int N, int C)
{
    layernorm_forward_kernel<<<(N + 7) / 8, 256, 0, st>>>(out, mean, rstd, inp, w, b, N, C);
    KERNEL_CHECK();
    return 0;
}

static inline int layernorm_backward_input(cudaStream_t st, float *dinp, const float *dout,
                                           const float *inp, const float *mean,
                                           const float *rstd, const float *w, int N, int C)
{
    layernorm_backward_input_kernel<<<(N + 7) / 8, 256, 0, st>>>(dinp, dout, inp, mean, rstd, w,
                                                                  N, C);
    KERNEL_CHECK();
    return 0;
}

static inline int layernorm_backward_weight(cudaStream_t st, float *dw, float *db,
                                            const float *dout, const float *inp,
                                            const float *mean, const float *rstd, int N, int C)
{
    layernorm_backward_weight_kernel<<<(C + 127) / 128, 128, 0, st>>>(dw, db, dout, inp, mean,
                                                                       rstd, N, C);
    KERNEL_CHECK();
    return 0;
}
