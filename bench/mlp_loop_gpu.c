/* mlp_loop_gpu.c - the baseline of bench/bench_gpu.sh: the CUDA backend's mlp kernels
 * (runtime/cuda/mlp_cuda.cu: cuBLAS SGEMMs, layer norm, GELU, residual, softmax
 * cross-entropy) called by hand in one stream, in the order of the generated 1-rank
 * GPipe program (F0..F{M-1}, then B0..B{M-1}, then SGD), without
 * the pipeline runtime: no events per op, no rank thread, no arena bookkeeping.
 *
 *     nvcc -x c -Xcompiler -std=c11 -O2 -Iruntime -Iruntime/models -Iruntime/cuda -I$CUDA_HOME/include \
 *          -c bench/mlp_loop_gpu.c -o mlp_loop_gpu.o
 *     nvcc -o mlp_loop_gpu mlp_loop_gpu.o build/libpiperun_cuda.a \
 *          -L$CUDA_HOME/lib64 -lcublas -lnccl -lcudart -lopenblas -lpthread -lm
 *     ./mlp_loop_gpu C L T B M V ITERS
 *
 * C hidden size, L blocks, T sequence length, B micro-batch size, M micro-batches, V
 * vocabulary, ITERS >= 2 iterations. Prints the mean iteration time over iterations 2..ITERS (ms) and tokens/s = M*B*T /
 * that time. Tokens are random (the kernels' time does not depend on them); they are
 * uploaded every iteration, as the runtime does. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_api.h"

static int arg(char **argv, int i, int lo)
{
    int v = atoi(argv[i]);
    if (v < lo) {
        fprintf(stderr, "mlp_loop_gpu: argument %d must be >= %d\n", i, lo);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: %s C L T B M V ITERS\n", argv[0]);
        return 2;
    }
    MlpConfig cfg = {.C = arg(argv, 1, 1), .L = arg(argv, 2, 1), .T = arg(argv, 3, 1),
                     .B = arg(argv, 4, 1), .M = arg(argv, 5, 1), .vocab = arg(argv, 6, 2)};
    int iters = arg(argv, 7, 2);
    char why[200];
    if (mlp_config_check(&cfg, why, sizeof why) != 0) {
        fprintf(stderr, "mlp_loop_gpu: %s\n", why);
        return 2;
    }
    MlpModel *host = mlp_create(&cfg, 1);
    MlpSlice s = mlp_whole(&cfg);
    CuMlp g;
    memset(&g, 0, sizeof g);
    if (!host || cu_mlp_init(&g, host) != 0)
        return 1;
    size_t act = mlp_act_bytes(&cfg, &s), bt = (size_t)cfg.B * cfg.T;
    size_t ntok = (size_t)cfg.M * bt;
    unsigned char *arena;
    int *tok, *tgt, *tok_h, *tgt_h;
    cudaStream_t st;
    cudaEvent_t e0, e1;
    if (cudaMalloc((void **)&arena, act * (size_t)cfg.M) != cudaSuccess ||
        cudaMalloc((void **)&tok, ntok * sizeof(int)) != cudaSuccess ||
        cudaMalloc((void **)&tgt, ntok * sizeof(int)) != cudaSuccess ||
        cudaMallocHost((void **)&tok_h, ntok * sizeof(int)) != cudaSuccess ||
        cudaMallocHost((void **)&tgt_h, ntok * sizeof(int)) != cudaSuccess ||
        cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        fprintf(stderr, "mlp_loop_gpu: CUDA set-up failed (is there a GPU?)\n");
        return 1;
    }
    srand(1);
    double sum = 0;
    for (int it = 0; it < iters; it++) {
        for (size_t i = 0; i < ntok; i++) {
            tok_h[i] = rand() % cfg.vocab;
            tgt_h[i] = rand() % cfg.vocab;
        }
        cudaEventRecord(e0, st);
        cudaMemcpyAsync(tok, tok_h, ntok * sizeof(int), cudaMemcpyHostToDevice, st);
        cudaMemcpyAsync(tgt, tgt_h, ntok * sizeof(int), cudaMemcpyHostToDevice, st);
        if (cu_mlp_zero_grad(&g, st, &s))
            return 1;
        for (int m = 0; m < cfg.M; m++)
            if (cu_mlp_forward(&g, st, &s, m, NULL, arena + (size_t)m * act, NULL,
                               tok + (size_t)m * bt, tgt + (size_t)m * bt, true))
                return 1;
        for (int m = 0; m < cfg.M; m++)
            if (cu_mlp_backward(&g, st, &s, NULL, arena + (size_t)m * act, NULL,
                                tok + (size_t)m * bt, tgt + (size_t)m * bt, false))
                return 1;
        if (cu_mlp_sgd(&g, st, &s, 0.05f))
            return 1;
        cudaEventRecord(e1, st);
        if (cudaEventSynchronize(e1) != cudaSuccess) {
            fprintf(stderr, "mlp_loop_gpu: iteration %d failed on the GPU\n", it + 1);
            return 1;
        }
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (it > 0)
            sum += ms;
    }
    double mean = sum / (iters - 1);
    printf("hand-written single-stream loop: %.3f ms/iter, %.0f tokens/s\n", mean,
           (double)ntok / mean * 1e3);
    cu_mlp_free(&g);
    mlp_free(host);
    return 0;
}
