/* crossentropy.cuh - softmax, cross-entropy loss and their fused backward for the mlp
 * head; GPU twins of mlp_softmax_forward, mlp_crossentropy_forward and
 * mlp_crossentropy_softmax_backward in runtime/models/mlp_layers.c.
 * Legend: N = rows (B*T), V = vocabulary. */
#pragma once
#include <math.h>

#include "cuda_check.h"

/* probs (N,V) = softmax(logits (N,V)) per row; probs may alias logits. One warp per
 * row, the sum in double as on the CPU. */
static __global__ void softmax_forward_kernel(float *probs, const float *logits, int N, int V)
{
    int lane = threadIdx.x % 32;
    int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (n >= N)
        return;
    const float *l = logits + (size_t)n * V;
    float *p = probs + (size_t)n * V;
    float mx = -INFINITY;
    for (int i = lane; i < V; i += 32)
        mx = fmaxf(mx, l[i]);
    for (int o = 16; o > 0; o /= 2)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    double s = 0.0;
    for (int i = lane; i < V; i += 32) {
        float e = expf(l[i] - mx);
        p[i] = e;
        s += e;
    }
    for (int o = 16; o > 0; o /= 2)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    float inv = (float)(1.0 / s);
    for (int i = lane; i < V; i += 32)
        p[i] *= inv;
}

/* *loss = mean over rows of -log probs[n, targets[n]]: one block of 256 threads, a fixed
 * reduction tree (deterministic). */
static __global__ void crossentropy_forward_kernel(float *loss, const float *probs, const int *targets,
                                            int N, int V)
{
    __shared__ double part[256];
    double s = 0.0;
    for (int n = threadIdx.x; n < N; n += blockDim.x) {
        float p = probs[(size_t)n * V + targets[n]];
        s += -log(p > 1e-30f ? (double)p : 1e-30);
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if ((int)threadIdx.x < k)
            part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        *loss = (float)(part[0] / N);
}

/* dlogits (N,V) = (probs - onehot(targets)) * dloss; dlogits may alias probs. */
static __global__ void crossentropy_softmax_backward_kernel(float *dlogits, const float *probs,
                                                     const int *targets, float dloss, int N, int V)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * V)
        return;
    int n = (int)(i / V), v = (int)(i % V);
    dlogits[i] = (probs[i] - (v == targets[n] ? 1.0f : 0.0f)) * dloss;
}

static inline int softmax_forward(cudaStream_t st, float *probs, const float *logits, int N, int V)
{
    softmax_forward_kernel<<<(N + 7) / 8, 256, 0, st>>>(probs, logits, N, V);
    KERNEL_CHECK();
    return 0;
}

static inline int crossentropy_forward(cudaStream_t st, float *loss, const float *probs,
                                       const int *targets, int N, int V)
{
    crossentropy_forward_kernel<<<1, 256, 0, st>>>(loss, probs, targets, N, V);
    KERNEL_CHECK();
    return 0;
}

static inline int crossentropy_softmax_backward(cudaStream_t st, float *dlogits, const float *probs,
                                                const int *targets, float dloss, int N, int V)
{
    size_t n = (size_t)N * V;
    crossentropy_softmax_backward_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(
        dlogits, probs, targets, dloss, N, V);
    KERNEL_CHECK();
    return 0;
}
