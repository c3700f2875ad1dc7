/* gelu.cuh - GELU, tanh approximation (Hendrycks & Gimpel 2016, section 2), forward and
 * backward; the GPU twin of mlp_gelu_* in runtime/models/mlp_layers.c. Elementwise over n. */
#pragma once
#include "cuda_check.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

/* out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static __global__ void gelu_forward_kernel(float *out, const float *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float x = inp[i], cube = 0.044715f * x * x * x;
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + cube)));
}

/* dinp (n) = GELU'(inp) * dout; dinp may alias inp or dout. */
static __global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float x = inp[i], cube = 0.044715f * x * x * x;
    float t = tanhf(GELU_SCALE * (x + cube)), sech2 = 1.0f - t * t;
    float g = 0.5f * (1.0f + t) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = g * dout[i];
}

static inline int gelu_forward(cudaStream_t st, float *out, const float *inp, size_t n)
{
    gelu_forward_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(out, inp, n);
    KERNEL_CHECK();
    return 0;
}

static inline int gelu_backward(cudaStream_t st, float *dinp, const float *inp, const float *dout,
                                size_t n)
{
    gelu_backward_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(dinp, inp, dout, n);
    KERNEL_CHECK();
    return 0;
}
