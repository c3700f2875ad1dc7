/* cu_host.h - the host-side decisions of the CUDA backend, in plain C without a CUDA
 * header so that they are unit-tested on machines without a GPU
 * (tests/unit/test_cuda_host.c): which GPU a rank uses, the stream plan of a generated
 * program, and the order in which a run is torn down. piperun_cuda.c calls them. */
#ifndef PIPERUN_CU_HOST_H
#define PIPERUN_CU_HOST_H

#include <stdbool.h>
#include <stddef.h>

#include "piperun.h"
#include "streams.h"

/* The GPU of pipeline rank `rank` (docs/cuda.md "Devices"). One process for every rank
 * (np == 1): rank s uses GPU s % ngpu. One process per rank (np > 1, `local` = its index
 * among the nlocal processes of its node): GPU local when the node's processes see all
 * its GPUs (nlocal <= ngpu), GPU 0 when each process sees exactly one (ngpu == 1, as with
 * a per-process CUDA_VISIBLE_DEVICES; processes that share one GPU are then NCCL's
 * "duplicate GPU" error at communicator set-up). Returns 0 with *dev set, or -1 with a
 * one-line reason in why (no GPU; more processes on the node than GPUs they see, with
 * more than one GPU visible). */
int cu_pick_device(int np, int local, int nlocal, int ngpu, int rank, int *dev, char *why,
                   size_t why_n);

/* Environment defaults set before the first CUDA call, each only when the user has not
 * set it: CUDA_MODULE_LOADING=EAGER, since with lazy loading (the CUDA default) a
 * kernel's first launch can wait for the whole device while NCCL kernels wait on a peer,
 * and two ranks can deadlock (docs/cuda.md "Teardown and residency"). */
void cu_env_defaults(void);

/* NCCL's CTA cap for a GPU with sm_count multiprocessors on which up to `pending` NCCL
 * kernels (one per pair stream with messages: sends and receives of every rank on the
 * GPU) can wait at once: all of them, and one compute kernel, must be resident together,
 * which NCCL does not guarantee across communicators. sm_count / (pending + 1), at least
 * 1 and at most 32 (NCCL's own largest default). */
int cu_nccl_max_ctas(int sm_count, int pending);

/* The stream plan (plan/streams.h) of a generated program, read from the tables
 * `pipec emit --backend cuda` wrote into it (PrRankDesc.streams, docs/cuda.md "The
 * stream plan's table"; streams.json is written from the same plan): the plan the
 * compiler built and verified, not recomputed here. g is the unpacked program (ops and
 * messages given). Every table is checked: its version, its op count, each op's stream
 * against its kind, each wait an earlier op, each message received by its consumer rank
 * and sent by its producer rank exactly once. Returns the plan, or NULL with a one-line
 * reason in why (no table, a corrupt one, out of memory). */
StreamPlan *cu_stream_plan(const PrProgram *g, char *why, size_t why_n);

/* The end of a run (fix of the CUDA review's finding 3: communicators were aborted and
 * freed while rank threads could still be inside a call on them). Every rank thread
 * returns by itself once the run has failed (each of its waits polls the failure flag),
 * so: join every started thread first, then abort (failed run) or destroy (clean run)
 * every communicator, then free them.
 *
 * A failed run aborts every communicator at once, a thread each (docs/cuda.md
 * "Teardown"): in NCCL an abort waits for the communicator's last kernel, which can be
 * queued behind compute that waits on a receive of another communicator; aborted one
 * after another, the first abort can wait forever for a communicator not yet aborted.
 * With every abort flag set together, each kernel ends. A failed run's teardown also has
 * a deadline: when it has not ended after deadline_s seconds, give_up is called (the
 * runtime's prints the reason and ends the process with exit status 1, MPI_Abort under
 * MPI) and cu_teardown returns -1 without waiting further (its threads are left running).
 * The callbacks are the real NCCL and pthread calls in piperun_cuda.c and fakes in the
 * unit test. */
typedef struct CuTeardown {
    void *ctx;
    int nthreads;                          /* rank threads started */
    void (*join)(void *ctx, int t);
    int ncomms;                            /* communicators created */
    void (*abort_comm)(void *ctx, int k);  /* ncclCommAbort; called concurrently */
    void (*destroy_comm)(void *ctx, int k);/* ncclCommDestroy */
    void (*free_comms)(void *ctx);
    double deadline_s;                     /* failed run: seconds before give_up; <= 0: none */
    void (*give_up)(void *ctx, double deadline_s); /* NULL: wait for ever */
} CuTeardown;

/* Returns 0, or -1 when a failed run's teardown passed its deadline (give_up was called).
 * *t is copied: the caller's may go out of scope once it returns. */
int cu_teardown(const CuTeardown *t, bool failed);

#endif
