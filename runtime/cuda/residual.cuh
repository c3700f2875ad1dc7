/* residual.cuh - the residual add and the token embedding (encoder) of the mlp model;
 * GPU twins of mlp_residual_forward and mlp_encoder_* in runtime/models/mlp_layers.c.
 * Legend: N = rows (B*T), C = channels, V = vocabulary. */
#pragma once
#include "cuda_check.h"

/* out (n) = a + b; out may alias either input. */
static __global__ void residual_forward_kernel(float *out, const float *a, const float *b, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = a[i] + b[i];
}

/* out (N,C) = wte[tok[n]] with wte (V,C), tok (N). */
static __global__ void encoder_forward_kernel(float *out, const int *tok, const float *wte, int N, int C)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C)
        return;
    size_t n = i / C, c = i % C;
    out[i] = wte[(size_t)tok[n] * C + c];
}

/* dwte (V,C) += dout (N,C) scattered by tok (N): one thread per channel, rows in order
 * n = 0..N-1 as on the CPU (deterministic, no atomics). */
static __global__ void encoder_backward_kernel(float *dwte, const float *dout, const int *tok, int N, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    for (int n = 0; n < N; n++)
        dwte[(size_t)tok[n] * C + c] += dout[(size_t)n * C + c];
}

static inline int residual_forward(cudaStream_t st, float *out, const float *a, const float *b,
                                   size_t n)
{
    residual_forward_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(out, a, b, n);
    KERNEL_CHECK();
    return 0;
}

static inline int encoder_forward(cudaStream_t st, float *out, const int *tok, const float *wte,
                                  int N, int C)
{
    size_t n = (size_t)N * C;
    encoder_forward_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(out, tok, wte, N, C);
    KERNEL_CHECK();
    return 0;
}

static inline int encoder_backward(cudaStream_t st, float *dwte, const float *dout, const int *tok,
                                   int N, int C)
{
    encoder_backward_kernel<<<(C + 127) / 128, 128, 0, st>>>(dwte, dout, tok, N, C);
    KERNEL_CHECK();
    return 0;
}
