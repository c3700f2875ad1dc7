/* cuda_check.h - error checks for every CUDA, cuBLAS and NCCL call of the CUDA backend
 * (docs/cuda.md), in the style of nccl-tests: each macro evaluates the call once and, on
 * failure, prints "piperun: rank R: FILE:LINE: CALL: error string" to stderr and makes
 * the enclosing function return -1 (the runtime's failure status; pr_fail is then called
 * by the caller with the op). cu_rank is the rank of the calling thread (-1 outside
 * a rank), set by the runtime. */
#ifndef PIPERUN_CUDA_CHECK_H
#define PIPERUN_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The rank of the calling host thread, for messages (-1: none). */
#ifdef __cplusplus
extern thread_local int cu_rank;
#else
extern _Thread_local int cu_rank;
#endif
/* Prints a failed call ("piperun: rank R: FILE:LINE: CALL: what") and records it as the
 * run's first failure message unless one is recorded (cu_error.c); thread-safe. */
void cu_error(const char *file, int line, const char *call, const char *what);
/* The run's first failure message copied into buf (n bytes), "" when none; returns buf. */
char *cu_first_error(char *buf, size_t n);
/* Forgets the first failure message (a run's set-up and teardown). */
void cu_error_reset(void);
/* cuBLAS status as text. */
const char *cu_blas_str(cublasStatus_t s);

#ifdef __cplusplus
}
#endif

#define CUDA_CHECK(call)                                                        \
    do {                                                                        \
        cudaError_t e_ = (call);                                                \
        if (e_ != cudaSuccess) {                                                \
            cu_error(__FILE__, __LINE__, #call, cudaGetErrorString(e_));        \
            return -1;                                                          \
        }                                                                       \
    } while (0)

#define CUBLAS_CHECK(call)                                                      \
    do {                                                                        \
        cublasStatus_t s_ = (call);                                             \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                      \
            cu_error(__FILE__, __LINE__, #call, cu_blas_str(s_));               \
            return -1;                                                          \
        }                                                                       \
    } while (0)

#define NCCL_CHECK(call)                                                        \
    do {                                                                        \
        ncclResult_t r_ = (call);                                               \
        if (r_ != ncclSuccess && r_ != ncclInProgress) {                        \
            cu_error(__FILE__, __LINE__, #call, ncclGetErrorString(r_));        \
            return -1;                                                          \
        }                                                                       \
    } while (0)

/* After a kernel launch: checks the launch itself (configuration errors). */
#define KERNEL_CHECK() CUDA_CHECK(cudaGetLastError())

#endif
