/* matmul.cuh - the linear layers of the mlp model through cuBLAS (fp32, no TF32: the
 * handle uses CUBLAS_PEDANTIC_MATH so the GPU gradients can be compared with the CPU
 * reference); the GPU twins of mlp_matmul_* in runtime/models/mlp_layers.c.
 * A row-major (R,K) tensor is a column-major (K,R) one; each call spells out the view.
 * Legend: N = rows (B*T), C = channels in, OC = channels out. */
#pragma once
#include "cuda_check.h"

/* out (N,OC) += bias (OC) broadcast over rows. */
static __global__ void add_bias_kernel(float *out, const float *bias, int N, int OC)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)N * OC)
        out[i] += bias[i % OC];
}

/* dbias (OC) += sum_n dout (N,OC): one thread per output channel, rows in order. */
static __global__ void bias_backward_kernel(float *dbias, const float *dout, int N, int OC)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= OC)
        return;
    float s = dbias[j];
    for (int n = 0; n < N; n++)
        s += dout[(size_t)n * OC + j];
    dbias[j] = s;
}

/* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC) (bias may be NULL).
 * Column-major view: out^T (OC,N) = weight^T' (OC,C) * inp^T (C,N) with weight read
 * transposed (its column-major form is (C,OC)). */
static inline int matmul_forward(cublasHandle_t h, cudaStream_t st, float *out, const float *inp,
                                 const float *weight, const float *bias, int N, int C, int OC)
{
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSetStream(h, st));
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, C, inp, C,
                             &zero, out, OC));
    if (bias) {
        size_t n = (size_t)N * OC;
        add_bias_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(out, bias, N, OC);
        KERNEL_CHECK();
    }
    return 0;
}

/* dinp (N,C) = dout (N,OC) @ weight (OC,C). Column-major: dinp^T (C,N) = weight^T (C,OC)
 * * dout^T (OC,N), both read as stored. */
static inline int matmul_backward_input(cublasHandle_t h, cudaStream_t st, float *dinp,
                                        const float *dout, const float *weight, int N, int C,
                                        int OC)
{
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSetStream(h, st));
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, weight, C, dout, OC,
                             &zero, dinp, C));
    return 0;
}

/* dweight (OC,C) += dout^T (OC,N) @ inp (N,C); dbias (OC) += sum_n dout (may be NULL).
 * Column-major: dweight^T (C,OC) += inp^T (C,N) * dout (N,OC). */
static inline int matmul_backward_weight(cublasHandle_t h, cudaStream_t st, float *dweight,
                                         float *dbias, const float *dout, const float *inp,
                                         int N, int C, int OC)
{
    const float one = 1.0f;
    CUBLAS_CHECK(cublasSetStream(h, st));
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C, dout, OC, &one,
                             dweight, C));
    if (dbias) {
        bias_backward_kernel<<<(OC + 127) / 128, 128, 0, st>>>(dbias, dout, N, OC);
        KERNEL_CHECK();
    }
    return 0;
}
