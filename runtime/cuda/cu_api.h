/* cu_api.h - what the CUDA backend's C core (piperun_cuda.c) calls in its CUDA C++ files:
 * the mlp workload on the GPU (mlp_cuda.cu), the gpt and llama workloads in the same slot
 * (tf_cuda.cu) and the synthetic spin kernel (spin.cu).
 * Every function returns 0, or -1 after cu_error() reported the failing call.
 * Tensors are device pointers unless a name says host; shapes as in runtime/models/mlp.h
 * (B, T, C, V, L; N = B*T). */
#ifndef PIPERUN_CU_API_H
#define PIPERUN_CU_API_H

#include <stdbool.h>
#include <stddef.h>

#include "cuda_check.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "mlp.h"

struct TfModel;

/* One rank's copy of the model on its device: parameters and gradients laid out exactly
 * as host->param_mem / grad_mem (so host tensor pointers map to device ones by offset),
 * a cuBLAS handle (pedantic fp32 math, no TF32) and scratch for F without keep_all. */
typedef struct CuMlp {
    const MlpModel *host;  /* layout, config and the initial parameters */
    float *params, *grads; /* (nparams) each, device */
    cublasHandle_t blas;
    float *tmp;            /* device scratch, tmp_floats */
    size_t tmp_floats;
    float *loss;           /* (M) device: per micro-batch loss of the head slice */
    /* the host model's parameter and gradient arrays (mlp or gpt/llama): a host tensor at
     * host_params + k has its device twin at params + k (OG/LW copy by these offsets) */
    const float *host_params, *host_grads;
    struct CuTf *tf;       /* gpt/llama (tf_cuda.cu): its device state; NULL for mlp, whose
                              host is then set */
} CuMlp;

/* One model architecture on the device, as PrArch is on the host (runtime/core/core.h):
 * the backend picks cu_mlp_arch (mlp_cuda.cu) or cu_tf_arch (tf_cuda.cu) once, at
 * set-up, by the program's arch, and calls the model only through it. init: g for the
 * host model `host` (MlpModel, TfModel; slices: all nv virtual stages); free; the four
 * ops of a slice with the act region in pieces (runtime/region.h PrRegion, device
 * addresses; as mlp_forward_split & co, the forward's loss to g->loss[mb]); zero and
 * SGD-step (p -= lr * g) the slice's tensors; copy the slice's gradients into the host
 * model dst (same config; synchronous on st). */
typedef struct CuArch {
    int (*init)(CuMlp *g, const void *host, const MlpSlice *slices, int nv);
    void (*free)(CuMlp *g);
    int (*forward)(CuMlp *g, cudaStream_t st, const MlpSlice *s, int mb, float *out,
                   const PrRegion *rg, const float *in, const int *tok, const int *tgt,
                   bool keep_all);
    int (*recompute)(CuMlp *g, cudaStream_t st, const MlpSlice *s, const PrRegion *rg,
                     const int *tok);
    int (*backward)(CuMlp *g, cudaStream_t st, const MlpSlice *s, float *din,
                    const PrRegion *rg, const float *dout, const int *tok, const int *tgt,
                    bool split);
    int (*weight_grad)(CuMlp *g, cudaStream_t st, const MlpSlice *s, const PrRegion *rg,
                       const int *tok);
    int (*zero_grad)(CuMlp *g, cudaStream_t st, const MlpSlice *s);
    int (*sgd)(CuMlp *g, cudaStream_t st, const MlpSlice *s, float lr);
    int (*grads_to_host)(CuMlp *g, cudaStream_t st, const MlpSlice *s, void *dst);
} CuArch;
extern const CuArch cu_mlp_arch, cu_tf_arch;

/* Allocates on the current device and copies the host's parameters. */
int cu_mlp_init(CuMlp *g, const MlpModel *host);
/* What every model's init and free share: the device parameters (copied from
 * host_params), zero gradients and losses (M), tmp_floats of scratch and the cuBLAS
 * handle (pedantic fp32); release frees them and zeroes g. */
int cu_model_alloc(CuMlp *g, const float *host_params, const float *host_grads,
                   size_t nparams, int M, size_t tmp_floats);
void cu_model_release(CuMlp *g);
void cu_mlp_free(CuMlp *g);

/* The ops of runtime/models/mlp.h on the GPU, enqueued on stream st (asynchronous). Same
 * arguments as mlp_forward & co, all device pointers; the forward's loss goes to
 * g->loss[mb]. */
int cu_mlp_forward(CuMlp *g, cudaStream_t st, const MlpSlice *s, int mb, float *out, void *act,
                   const float *in, const int *tok, const int *tgt, bool keep_all);
int cu_mlp_recompute(CuMlp *g, cudaStream_t st, const MlpSlice *s, void *act, const int *tok);
int cu_mlp_backward(CuMlp *g, cudaStream_t st, const MlpSlice *s, float *din, void *act,
                    const float *dout, const int *tok, const int *tgt, bool split);
int cu_mlp_weight_grad(CuMlp *g, cudaStream_t st, const MlpSlice *s, void *act, const int *tok);
/* The four with the act region in pieces (runtime/region.h PrRegion, device addresses;
 * the pieces an op does not touch may be NULL), as mlp_forward_split & co:
 * cu_mlp_recompute(act) is cu_mlp_recompute_split of the region contiguous at act, and
 * so on. */
int cu_mlp_forward_split(CuMlp *g, cudaStream_t st, const MlpSlice *s, int mb, float *out,
                         const PrRegion *rg, const float *in, const int *tok, const int *tgt,
                         bool keep_all);
int cu_mlp_recompute_split(CuMlp *g, cudaStream_t st, const MlpSlice *s, const PrRegion *rg,
                           const int *tok);
int cu_mlp_backward_split(CuMlp *g, cudaStream_t st, const MlpSlice *s, float *din,
                          const PrRegion *rg, const float *dout, const int *tok,
                          const int *tgt, bool split);
int cu_mlp_weight_grad_split(CuMlp *g, cudaStream_t st, const MlpSlice *s, const PrRegion *rg,
                             const int *tok);
/* Zeroes / SGD-steps (p -= lr * g) the slice's tensors. */
int cu_mlp_zero_grad(CuMlp *g, cudaStream_t st, const MlpSlice *s);
int cu_mlp_sgd(CuMlp *g, cudaStream_t st, const MlpSlice *s, float lr);
/* The same SGD on n device floats p with gradients gr (a shard of a stage's parameters:
 * data parallelism's sharded step, docs/runtime.md "Data parallelism"). */
int cu_sgd_range(cudaStream_t st, float *p, const float *gr, float lr, size_t n);
/* Copies the slice's gradients into the host model dst (same config); synchronous on st. */
int cu_mlp_grads_to_host(CuMlp *g, cudaStream_t st, const MlpSlice *s, MlpModel *dst);

/* The gpt and llama workloads (runtime/models/transformer.h) on the GPU in the same CuMlp slot
 * (cu_tf_arch): cu_tf_init instead of cu_mlp_init (host: the initial parameters, shape
 * and tensor offsets; slices: all nv virtual stages, for the scratch of an F that keeps
 * only its checkpoint), then these instead of the cu_mlp_* calls above, with
 * tf_layout.h's regions (tf_act_bytes & co) addressed through PrRegion (tf_region_cuts'
 * pieces). cu_tf_grads_to_host copies the slice's gradients into dst (same config). */
int cu_tf_init(CuMlp *g, const struct TfModel *host, const MlpSlice *slices, int nv);
void cu_tf_free(CuMlp *g);
/* The region contiguous at act of slice s in the gpt/llama layout (tf_region_whole). */
PrRegion cu_tf_region_whole(CuMlp *g, const MlpSlice *s, void *act);
int cu_tf_forward(CuMlp *g, cudaStream_t st, const MlpSlice *s, int mb, float *out,
                  const PrRegion *rg, const float *in, const int *tok, const int *tgt,
                  bool keep_all);
int cu_tf_recompute(CuMlp *g, cudaStream_t st, const MlpSlice *s, const PrRegion *rg,
                    const int *tok);
int cu_tf_backward(CuMlp *g, cudaStream_t st, const MlpSlice *s, float *din, const PrRegion *rg,
                   const float *dout, const int *tok, const int *tgt, bool split);
int cu_tf_weight_grad(CuMlp *g, cudaStream_t st, const MlpSlice *s, const PrRegion *rg,
                      const int *tok);
int cu_tf_zero_grad(CuMlp *g, cudaStream_t st, const MlpSlice *s);
int cu_tf_sgd(CuMlp *g, cudaStream_t st, const MlpSlice *s, float lr);
int cu_tf_grads_to_host(CuMlp *g, cudaStream_t st, const MlpSlice *s, struct TfModel *dst);

/* Synthetic workload: a kernel that spins ms milliseconds on the device clock
 * (%globaltimer), minus overhead_ms, the launch overhead cu_spin_calibrate measured on
 * the calling rank's stream. */
int cu_spin(cudaStream_t st, double ms, float overhead_ms);
/* Measures the time of an empty spin launch on st (events, destroyed on every path)
 * into *overhead_ms. Returns 0 or -1. */
int cu_spin_calibrate(cudaStream_t st, float *overhead_ms);

#ifdef __cplusplus
}
#endif

#endif
