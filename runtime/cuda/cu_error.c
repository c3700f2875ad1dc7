/* cu_error.c - the CUDA backend's error record (cuda_check.h): what a failed CUDA,
 * cuBLAS or NCCL call prints, the run's first failure message, and the calling thread's
 * rank the messages name. Below every other file of runtime/cuda/: the kernels
 * (mlp_cuda.cu, tf_cuda.cu, spin.cu) and piperun_cuda.c report through it, and it calls
 * none of them. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_check.h"

_Thread_local int cu_rank = -1;

static pthread_mutex_t err_mu = PTHREAD_MUTEX_INITIALIZER;
static char first_error[256];

void cu_error(const char *file, int line, const char *call, const char *what)
{
    char msg[200];
    const char *f = strrchr(file, '/');
    snprintf(msg, sizeof msg, "%s:%d: %.60s: %.80s", f ? f + 1 : file, line, call, what);
    fprintf(stderr, "piperun: rank %d: %s\n", cu_rank, msg);
    pthread_mutex_lock(&err_mu);
    if (!first_error[0])
        snprintf(first_error, sizeof first_error, "%s", msg);
    pthread_mutex_unlock(&err_mu);
}

char *cu_first_error(char *buf, size_t n)
{
    pthread_mutex_lock(&err_mu);
    snprintf(buf, n, "%s", first_error);
    pthread_mutex_unlock(&err_mu);
    return buf;
}

void cu_error_reset(void)
{
    pthread_mutex_lock(&err_mu);
    first_error[0] = 0;
    pthread_mutex_unlock(&err_mu);
}

const char *cu_blas_str(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
    }
}
