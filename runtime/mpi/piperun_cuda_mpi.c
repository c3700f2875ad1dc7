/* piperun_cuda_mpi.c - the CUDA backend with one process per rank through MPI
 * (docs/cuda.md, "CUDA backend over MPI"). Built with mpicc into
 * build/libpiperun_cuda_mpi.a (`make cuda-mpi`); the generated program is linked
 * unchanged, the linker routes two calls here:
 *
 *     mpicc -o NAME OBJECTS -Wl,--wrap=pr_main -Wl,--wrap=pr_run \
 *           libpiperun_cuda_mpi.a libpiperun_cuda.a -L$CUDA_HOME/lib64 \
 *           -lcublas -lnccl -lcudart -lstdc++ -lopenblas -lpthread -lm
 *     mpirun -np P ./NAME [options]           (one GPU per process)
 *
 * __wrap_pr_main initialises MPI (MPI_THREAD_FUNNELED: only the main thread calls MPI),
 * finds this process's index among the processes of its node (MPI_Comm_split_type; the
 * GPU is chosen by cu_pick_device of runtime/cuda/cu_host.h: that index when the
 * process sees the node's GPUs, GPU 0 when it sees one), fills the hooks of cu_dist.h,
 * silences stdout on
 * every process but 0 and runs the real pr_main; a failure on any process aborts the
 * whole job (MPI_Abort), so no process waits forever in a collective.
 *
 * The hooks (called by piperun_cuda.c on the main thread, in the same order on every
 * process):
 *   - bcast: for every ordered pair of ranks with messages, process 0's
 *     ncclGetUniqueId result goes to every process (MPI_Bcast), then the pair's two
 *     processes call ncclCommInitRankConfig(comm, 2, id, side) - the NCCL bootstrap of
 *     the NCCL documentation's "one device per process" example, once per pair;
 *   - after_iter: the head rank's micro-batch losses to every process (MPI_Bcast from
 *     the head's process); in iteration 1 with --check, every rank's gradients to
 *     process 0 (MPI_Send/MPI_Recv, rank order), which compares them with the CPU
 *     reference;
 *   - at_end: busy time and measured peak of every rank to process 0 (MPI_Gather).
 * __wrap_pr_run refuses a process count other than P and, on processes other than 0,
 * drops --reference and --profile and writes --trace T as T.rankK (own rank's ops). */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "cu_dist.h"

int __real_pr_main(const PrProgram *prog, int argc, char **argv);
int __real_pr_run(const PrProgram *prog, const PrOptions *o, PrResult *res);
int __wrap_pr_main(const PrProgram *prog, int argc, char **argv);
int __wrap_pr_run(const PrProgram *prog, const PrOptions *o, PrResult *res);

enum { TAG_GRAD = 7 };

/* The processes of this process's replica (MPI_COMM_WORLD without data parallelism):
 * every hook but dp_bcast; and the D processes of its stage (dp_bcast). With
 * data_parallel D and P x D processes, process w is replica w / P's stage w % P
 * (runtime/piperun.h pr_dp_rank). */
static MPI_Comm replica_comm = MPI_COMM_WORLD, stage_comm = MPI_COMM_NULL;
static int world_np = 1, replica;

static int dp_bcast(void *buf, size_t n)
{
    if (n > (size_t)INT32_MAX)
        return -1;
    return MPI_Bcast(buf, (int)n, MPI_BYTE, 0, stage_comm) == MPI_SUCCESS ? 0 : -1;
}

static int bcast(void *buf, size_t n)
{
    if (n > (size_t)INT32_MAX)
        return -1;
    return MPI_Bcast(buf, (int)n, MPI_BYTE, 0, replica_comm) == MPI_SUCCESS ? 0 : -1;
}

static int after_iter(PrRun *run, int it, int grads)
{
    (void)it;
    const PrProgram *g = run->prog;
    int me, head = g->vstages[g->P * g->V - 1].rank;
    MPI_Comm_rank(replica_comm, &me);
    if (run->wl->model &&
        MPI_Bcast(run->mb_loss, run->M, MPI_DOUBLE, head, replica_comm) != MPI_SUCCESS)
        return -1;
    if (!grads)
        return 0;
    if (me != 0) {
        size_t n = pr_rank_grad_floats(run, me);
        float *buf = malloc((n ? n : 1) * sizeof *buf);
        if (!buf || n > (size_t)INT32_MAX) {
            free(buf);
            return -1;
        }
        pr_rank_grad_copy(run, me, buf, true);
        int rc = MPI_Send(buf, (int)n, MPI_FLOAT, 0, TAG_GRAD, replica_comm);
        free(buf);
        return rc == MPI_SUCCESS ? 0 : -1;
    }
    for (int s = 1; s < run->P; s++) {
        size_t n = pr_rank_grad_floats(run, s);
        float *buf = malloc((n ? n : 1) * sizeof *buf);
        if (!buf || n > (size_t)INT32_MAX) {
            free(buf);
            return -1;
        }
        int rc = MPI_Recv(buf, (int)n, MPI_FLOAT, s, TAG_GRAD, replica_comm, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS)
            pr_rank_grad_copy(run, s, buf, false);
        free(buf);
        if (rc != MPI_SUCCESS)
            return -1;
    }
    return 0;
}

static int at_end(PrRun *run)
{
    int me;
    MPI_Comm_rank(replica_comm, &me);
    double mine[2] = {run->rank[me].busy_ms, (double)run->rank[me].peak};
    double *all = me == 0 ? calloc((size_t)run->P * 2, sizeof *all) : NULL;
    if (me == 0 && !all)
        return -1;
    int rc = MPI_Gather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, replica_comm);
    for (int s = 0; me == 0 && rc == MPI_SUCCESS && s < run->P; s++) {
        run->rank[s].busy_ms = all[2 * s];
        run->rank[s].peak = (int64_t)all[2 * s + 1];
    }
    free(all);
    return rc == MPI_SUCCESS ? 0 : -1;
}

/* cu_dist.abort_job: a failed run whose teardown cannot end stops the whole job. */
static void abort_job(void)
{
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int __wrap_pr_run(const PrProgram *prog, const PrOptions *o, PrResult *res)
{
    if (!o || pr_process_count_check(prog, world_np, res) != 0)
        return 1;
    PrOptions opt = *o;
    char trace[4096];
    int wme = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wme);
    pr_process_options(&opt, world_np > 1 ? wme : 0, trace, sizeof trace);
    if (replica != 0)
        opt.check = false;   /* replica 0's process 0 compares the reduced gradients */
    static PrDpOps dp;
    dp = (PrDpOps){replica, NULL, NULL}; /* the CUDA backend reduces itself (NCCL) */
    pr_dp = stage_comm != MPI_COMM_NULL ? &dp : NULL;
    int rc = __real_pr_run(prog, &opt, res);
    pr_dp = NULL;
    return rc;
}

int __wrap_pr_main(const PrProgram *prog, int argc, char **argv)
{
    int provided = 0, me = 0, np = 1, local = 0, nlocal = 1;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "piperun: MPI_Init_thread failed\n");
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    world_np = np;
    int P = prog->P, D = pr_dp_degree(prog), wme = me;
    if (D > 1 && np > 1 && np == pr_dp_nranks(P, D)) { /* one communicator per replica */
        replica = pr_dp_replica(P, me);
        if (MPI_Comm_split(MPI_COMM_WORLD, replica, pr_dp_stage(P, me), &replica_comm) !=
                MPI_SUCCESS ||
            MPI_Comm_split(MPI_COMM_WORLD, pr_dp_stage(P, me), replica, &stage_comm) !=
                MPI_SUCCESS) {
            fprintf(stderr, "piperun: cannot split the data-parallel communicators\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
            return 1;
        }
        MPI_Comm_rank(replica_comm, &me);
        MPI_Comm_size(replica_comm, &np);
    }
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, wme, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_rank(node, &local);
        MPI_Comm_size(node, &nlocal);
        MPI_Comm_free(&node);
    }
    if (provided < MPI_THREAD_FUNNELED) {
        fprintf(stderr, "piperun: this MPI does not support MPI_THREAD_FUNNELED\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    if (world_np > 1) {
        cu_dist = (CuDist){me, np, local, nlocal, bcast, after_iter, at_end, abort_job,
                           stage_comm != MPI_COMM_NULL ? dp_bcast : NULL};
        if (wme != 0 && !freopen("/dev/null", "w", stdout)) {
            fprintf(stderr, "piperun: cannot silence stdout of process %d\n", wme);
            MPI_Abort(MPI_COMM_WORLD, 1);
            return 1;
        }
    }
    int rc = __real_pr_main(prog, argc, argv);
    fflush(stdout);
    fflush(stderr);
    if (rc == 1 && world_np > 1) {
        MPI_Abort(MPI_COMM_WORLD, 1);   /* the others may wait for this rank */
        return 1;
    }
    if (replica_comm != MPI_COMM_WORLD)
        MPI_Comm_free(&replica_comm);
    if (stage_comm != MPI_COMM_NULL)
        MPI_Comm_free(&stage_comm);
    MPI_Finalize();
    return rc;
}
