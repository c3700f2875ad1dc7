/* spin.cu - the synthetic workload's busy kernel: one thread spins on the device's
 * nanosecond clock (%globaltimer) for the op's cost-model time, so a replayed schedule
 * occupies each stream as long as the simulator assumes. Calibration: the time of an
 * empty launch, measured with events, is subtracted from each request. */
#include "cu_api.h"

static float spin_overhead_ms; /* measured by cu_spin_calibrate; read-only afterwards */

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

extern "C" int cu_spin(cudaStream_t st, double ms)
{
    double t = ms - spin_overhead_ms;
    if (!(t > 0))
        return 0;
    spin_kernel<<<1, 1, 0, st>>>((unsigned long long)(t * 1e6));
    KERNEL_CHECK();
    return 0;
}

extern "C" int cu_spin_calibrate(cudaStream_t st)
{
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    float best = 1e30f;
    for (int k = 0; k < 5; k++) {
        CUDA_CHECK(cudaEventRecord(a, st));
        spin_kernel<<<1, 1, 0, st>>>(0ull);
        KERNEL_CHECK();
        CUDA_CHECK(cudaEventRecord(b, st));
        CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        if (ms < best)
            best = ms;
    }
    CUDA_CHECK(cudaEventDestroy(a));
    CUDA_CHECK(cudaEventDestroy(b));
    spin_overhead_ms = best;
    return 0;
}
