/* cu_dist.h - the hooks through which the CUDA backend (piperun_cuda.c) runs one rank per
 * process (docs/cuda.md, "CUDA backend over MPI"). piperun_cuda.c knows nothing of MPI:
 * piperun_cuda_mpi.c, linked in with -Wl,--wrap=pr_main,--wrap=pr_run, fills cu_dist
 * before the run. With np == 1 (the default) one process drives every rank.
 *
 * Every hook is called from the process's main thread only (MPI_THREAD_FUNNELED), in
 * the same order on every process; each returns 0 or -1 (the run then fails). */
#ifndef PIPERUN_CU_DIST_H
#define PIPERUN_CU_DIST_H

#include <stddef.h>

#include "workload.h"

typedef struct CuDist {
    int me, np;          /* this process's rank and the number of processes (== P) */
    int local, nlocal;   /* index among the processes of this node, and their number
                            (the GPU: cu_host.h cu_pick_device), one GPU per process */
    /* Copies n bytes at buf from process 0 to every process (an NCCL unique id: one
     * call per ordered pair of ranks with messages, in the same order everywhere). */
    int (*bcast)(void *buf, size_t n);
    /* After iteration it (all local work done, results of this process in run):
     * gives every process the head's micro-batch losses (run->mb_loss) and, when
     * `grads`, moves every rank's gradients into process 0's run->net. */
    int (*after_iter)(PrRun *run, int it, int grads);
    /* After the last iteration: process 0 receives every rank's busy time and measured
     * peak into run->rank[s].busy_ms / .peak. */
    int (*at_end)(PrRun *run);
    /* Ends the whole job at once with exit status 1 (MPI_Abort); called from any thread
     * when a failed run's teardown passed its deadline. NULL: the process exits alone. */
    void (*abort_job)(void);
    /* Data parallelism (docs/runtime.md "Data parallelism"), one process per rank of the
     * P x D: copies n bytes at buf from replica 0's process of this stage to the
     * stage's other D - 1 processes (the NCCL unique id of the stage's communicator).
     * NULL: no data parallelism across processes. */
    int (*dp_bcast)(void *buf, size_t n);
} CuDist;

/* Defined in piperun_cuda.c: {0, 1, 0, 1, NULL, ...} = every rank in this process. */
extern CuDist cu_dist;

#endif
