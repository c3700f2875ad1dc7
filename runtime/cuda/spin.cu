/* spin.cu - the synthetic workload's busy kernel: one thread spins on the device's
 * nanosecond clock (%globaltimer) for the op's cost-model time, so a replayed schedule
 * occupies each stream as long as the simulator assumes. Calibration: the time of an
 * empty launch, measured with events on each rank's stream, is subtracted from each
 * request (one overhead per rank: ranks may sit on different GPUs). */
#include "cu_api.h"

__device__ static unsigned long long global_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void spin_kernel(unsigned long long ns)
{
    unsigned long long t0 = global_ns();
    while (global_ns() - t0 < ns)
        ;
}

extern "C" int cu_spin(cudaStream_t st, double ms, float overhead_ms)
{
    double t = ms - overhead_ms;
    if (!(t > 0))
        return 0;
    spin_kernel<<<1, 1, 0, st>>>((unsigned long long)(t * 1e6));
    KERNEL_CHECK();
    return 0;
}

/* The calibration body; a and b are created by the caller. */
static int calibrate(cudaStream_t st, cudaEvent_t a, cudaEvent_t b, float *best)
{
    *best = 1e30f;
    for (int k = 0; k < 5; k++) {
        CUDA_CHECK(cudaEventRecord(a, st));
        spin_kernel<<<1, 1, 0, st>>>(0ull);
        KERNEL_CHECK();
        CUDA_CHECK(cudaEventRecord(b, st));
        CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        if (ms < *best)
            *best = ms;
    }
    return 0;
}

extern "C" int cu_spin_calibrate(cudaStream_t st, float *overhead_ms)
{
    cudaEvent_t a = NULL, b = NULL;
    float best = 0;
    int rc = -1;
    cudaError_t e = cudaEventCreate(&a);
    if (e == cudaSuccess)
        e = cudaEventCreate(&b);
    if (e != cudaSuccess)
        cu_error(__FILE__, __LINE__, "cudaEventCreate", cudaGetErrorString(e));
    else
        rc = calibrate(st, a, b, &best);
    if (a)
        cudaEventDestroy(a);
    if (b)
        cudaEventDestroy(b);
    if (rc == 0)
        *overhead_ms = best;
    return rc;
}
