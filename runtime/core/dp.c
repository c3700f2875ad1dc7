/* dp.c - data parallelism in the runtime (docs/runtime.md "Data parallelism"): D
 * replicas of the whole pipeline, each on its own shard of the global batch, their
 * gradients reduced per stage at the end of every iteration, and, with `zero 1` (ZeRO
 * stage 1, Rajbhandari et al., SC'20, §5.1: optimizer-state partitioning), the
 * optimizer step sharded over the replicas and followed by an all-gather of the
 * parameters.
 *
 * Ranks, shards and the rank numbering are runtime/piperun.h's pr_dp_* rule. Where the
 * replicas meet:
 *   - one process (the threads launcher): pr_run_core runs the D replicas as D runs of
 *     the program in this process (D x P rank threads), which share one PrDpGroup: per
 *     stage, the D ranks of that stage meet at a barrier, each reads the others'
 *     buffers in shared memory and sums them in replica order (so every replica gets
 *     the same bits);
 *   - one process per rank (--launcher mpi): runtime/mpi/piperun_mpi.c sets pr_dp, whose
 *     allreduce and allgather are MPI_Allreduce and MPI_Allgatherv over the
 *     communicator of the stage's D processes.
 *
 * The mean is taken in double: g = (float)((g_0 + ... + g_{D-1}) / D) for every gradient
 * float, each g_d being replica d's mean over its M micro-batches, so g is the mean over
 * the D x M micro-batches of the global batch, what `--check`'s reference computes in
 * one sequential pass. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "tf_kernels.h"

const PrDpOps *pr_dp;

/* The state the D replica runs of one process share. Per stage s: a barrier (count,
 * generation) and each replica's registered buffers. */
struct PrDpGroup {
    int D, P;
    PrRun **runs;              /* [D] */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int *count, *gen;          /* [P] */
    double **in;               /* [P*D]: stage s, replica d at s*D + d */
    float **flat;              /* [P*D] */
    atomic_int failed;
};

bool pr_dp_sharded(const PrRun *run)
{
    return run->D > 1 && run->prog->zero >= 1 && run->wl->model;
}

/* ---- the shared-memory group of one process's replicas --------------------------------- */

PrDpGroup *pr_dp_group_new(int D, int P)
{
    PrDpGroup *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->D = D;
    g->P = P;
    g->runs = calloc((size_t)D, sizeof *g->runs);
    g->count = calloc((size_t)P, sizeof *g->count);
    g->gen = calloc((size_t)P, sizeof *g->gen);
    g->in = calloc((size_t)P * (size_t)D, sizeof *g->in);
    g->flat = calloc((size_t)P * (size_t)D, sizeof *g->flat);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    atomic_init(&g->failed, 0);
    if (!g->runs || !g->count || !g->gen || !g->in || !g->flat) {
        pr_dp_group_free(g);
        return NULL;
    }
    return g;
}

void pr_dp_group_free(PrDpGroup *g)
{
    if (!g)
        return;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->runs);
    free(g->count);
    free(g->gen);
    free(g->in);
    free(g->flat);
    free(g);
}

static void group_fail(PrRun *run);

void pr_dp_group_join(PrDpGroup *g, PrRun *run, int replica)
{
    pthread_mutex_lock(&g->mu);
    g->runs[replica] = run;
    pthread_mutex_unlock(&g->mu);
    run->dp_group = g;
    run->on_fail = group_fail; /* pr_fail stops the other replicas through it */
    run->replica = replica;
    run->D = g->D;
    if (atomic_load(&g->failed)) /* another replica failed before this one joined */
        pr_fail(run, -1, -1, "stopped: another replica failed");
}

void pr_dp_group_leave(PrDpGroup *g, PrRun *run)
{
    pthread_mutex_lock(&g->mu);
    g->runs[run->replica] = NULL;
    pthread_mutex_unlock(&g->mu);
}

void pr_dp_group_stop(PrDpGroup *g)
{
    atomic_store(&g->failed, 1);
    pthread_mutex_lock(&g->mu);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* The failure of run, a replica of g: stops the others (PrRun.on_fail). */
static void group_fail(PrRun *run)
{
    PrDpGroup *g = run->dp_group;
    if (!g || atomic_exchange(&g->failed, 1))
        return;
    /* under the group's lock, so that no run leaves (and is freed) meanwhile; pr_fail
     * of another run does not come back here (failed is set) and takes only that run's
     * locks, which no holder of them waits to take g->mu under */
    pthread_mutex_lock(&g->mu);
    pthread_cond_broadcast(&g->cv);
    for (int d = 0; d < g->D; d++) {
        PrRun *o = g->runs[d];
        if (o && o != run && !atomic_load(&o->failed))
            pr_fail(o, -1, -1, "stopped: replica %d failed", run->replica);
    }
    pthread_mutex_unlock(&g->mu);
}

/* The barrier of the D ranks of rank r's stage. Waiters block (counted as a runtime wait
 * for the liveness checks) until the last arrives, a replica fails, or --timeout. */
static int group_barrier(PrRank *r)
{
    PrRun *run = r->run;
    PrDpGroup *g = run->dp_group;
    int s = r->id;
    pthread_mutex_lock(&g->mu);
    int gen = g->gen[s];
    if (++g->count[s] == g->D) {
        g->count[s] = 0;
        g->gen[s] = gen + 1;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        return atomic_load(&g->failed) || atomic_load(&run->failed) ? -1 : 0;
    }
    bool own = pr_tl_rank == r->id; /* the rank's thread (else the main thread's step) */
    if (own)
        atomic_store(&r->in_wait, 1);
    double deadline = pr_now_ms() + run->opt.timeout_s * 1e3;
    int rc = 0;
    while (g->gen[s] == gen) {
        if (atomic_load(&g->failed) || atomic_load(&run->failed)) {
            rc = -1;
            break;
        }
        double now = pr_now_ms();
        if (now >= deadline) {
            rc = -2;
            break;
        }
        double until = now + PR_LIVE_CHECK_S * 1e3;
        pr_cond_wait_until(&g->cv, &g->mu, until < deadline ? until : deadline);
    }
    pthread_mutex_unlock(&g->mu);
    if (own)
        atomic_store(&r->in_wait, 0);
    if (rc == -2)
        pr_fail(run, r->id, -1, "watchdog: stuck %.0f s in the data-parallel reduction of "
                "stage %d (replica %d)", run->opt.timeout_s, s, run->replica);
    return rc ? -1 : 0;
}

static int group_allreduce(PrRank *r, double *buf, size_t n)
{
    PrRun *run = r->run;
    PrDpGroup *g = run->dp_group;
    int s = r->id, D = g->D;
    double *out = r->dp_out;
    g->in[s * D + run->replica] = buf;
    if (group_barrier(r) != 0)
        return -1;
    for (size_t j = 0; j < n; j++) {
        double sum = 0;
        for (int d = 0; d < D; d++) /* replica order: the same sum on every replica */
            sum += g->in[s * D + d][j];
        out[j] = sum;
    }
    if (group_barrier(r) != 0) /* every replica has read every buffer */
        return -1;
    memcpy(buf, out, n * sizeof *buf);
    return 0;
}

static int group_allgather(PrRank *r, float *buf, size_t n)
{
    PrRun *run = r->run;
    PrDpGroup *g = run->dp_group;
    int s = r->id, D = g->D;
    g->flat[s * D + run->replica] = buf;
    if (group_barrier(r) != 0)
        return -1;
    for (int d = 0; d < D; d++) {
        size_t lo, hi;
        pr_dp_shard(n, D, d, &lo, &hi);
        if (d != run->replica && hi > lo)
            memcpy(buf + lo, g->flat[s * D + d] + lo, (hi - lo) * sizeof *buf);
    }
    return group_barrier(r);
}

static const PrDpOps group_ops = {0, group_allreduce, group_allgather};

static const PrDpOps *ops(const PrRun *run)
{
    return run->dp_group ? &group_ops : pr_dp;
}

/* ---- the reduction and the sharded step ---------------------------------------------- */

/* Whether rank r holds its stage's state in this process (not a stand-in of another
 * process's rank). */
static bool here(const PrRank *r)
{
    return !(pr_transport && pr_transport->remote(r->id));
}

/* Rank r's flat buffers for n floats (n the same every iteration). Returns 0 or -1. */
static int buffers(PrRank *r, size_t n)
{
    if (r->dp_flat && r->dp_n == n)
        return 0;
    free(r->dp_in);
    free(r->dp_out);
    free(r->dp_flat);
    size_t k = n ? n : 1;
    r->dp_in = malloc(k * sizeof *r->dp_in);
    r->dp_out = malloc(k * sizeof *r->dp_out);
    r->dp_flat = malloc(k * sizeof *r->dp_flat);
    r->dp_n = n;
    if (r->dp_in && r->dp_out && r->dp_flat)
        return 0;
    pr_fail(r->run, r->id, -1, "out of memory for the data-parallel reduction (%zu floats)", n);
    return -1;
}

void pr_dp_rank_free(PrRank *r)
{
    free(r->dp_in);
    free(r->dp_out);
    free(r->dp_flat);
    r->dp_in = r->dp_out = NULL;
    r->dp_flat = NULL;
    r->dp_n = 0;
}

int pr_dp_reduce(PrRank *r)
{
    PrRun *run = r->run;
    if (run->D <= 1 || !run->wl->model || r->dp_iter == (uint32_t)r->iter + 1 ||
        !here(r))
        return 0;
    r->dp_iter = (uint32_t)r->iter + 1;
    const PrDpOps *dp = ops(run);
    if (!dp) {
        pr_fail(run, r->id, -1, "data_parallel %d without a way to reach the replicas", run->D);
        return -1;
    }
    bool head = run->prog->vstages[run->PV - 1].rank == r->id;
    size_t ng = pr_rank_grad_floats(run, r->id), nl = head ? (size_t)run->M : 0;
    if (buffers(r, ng + nl) != 0)
        return -1;
    pr_rank_grad_copy(run, r->id, r->dp_flat, true);
    for (size_t j = 0; j < ng; j++)
        r->dp_in[j] = r->dp_flat[j];
    for (size_t m = 0; m < nl; m++)
        r->dp_in[ng + m] = run->mb_loss[m];
    if (dp->allreduce(r, r->dp_in, ng + nl) != 0)
        return -1;
    for (size_t j = 0; j < ng; j++)
        r->dp_flat[j] = (float)(r->dp_in[j] / run->D);
    pr_rank_grad_copy(run, r->id, r->dp_flat, false);
    for (size_t m = 0; m < nl; m++)
        run->mb_loss[m] = r->dp_in[ng + m] / run->D;
    return 0;
}

/* Walks the parameter tensors of rank s's virtual stages in model order (the order of
 * pr_rank_grad_copy) over the flat floats [lo, hi): stepping them with their gradients
 * (SGD, tf_kernels.h tf_sgd_elem, the workloads' step) and copying them to flat
 * (step), or copying flat's [lo, hi) into the parameters (!step). */
static void walk_params(PrRun *run, int s, float *flat, size_t lo, size_t hi, bool step)
{
    float lr = (float)run->opt.lr;
    size_t at = 0;
    for (int v = 0; v < run->PV; v++) {
        if (run->prog->vstages[v].rank != s)
            continue;
        PrStageTensor t = pr_stage_tensors(v, at);
        while (pr_stage_tensor_next(run, &t)) {
            size_t a = t.at > lo ? t.at : lo, b = t.at + t.n < hi ? t.at + t.n : hi;
            for (size_t j = a; j < b; j++) {
                if (step) {
                    tf_sgd_elem(t.param, t.grad, lr, j - t.at);
                    flat[j] = t.param[j - t.at];
                } else {
                    t.param[j - t.at] = flat[j];
                }
            }
        }
        at = t.at;
    }
}

int pr_dp_step(PrRank *r)
{
    PrRun *run = r->run;
    if (!pr_dp_sharded(run) || !here(r))
        return 0;
    const PrDpOps *dp = ops(run);
    size_t n = pr_rank_grad_floats(run, r->id), lo, hi;
    if (!dp || buffers(r, n > r->dp_n ? n : r->dp_n) != 0)
        return -1;
    pr_dp_shard(n, run->D, run->replica, &lo, &hi);
    walk_params(run, r->id, r->dp_flat, lo, hi, true);
    if (dp->allgather(r, r->dp_flat, n) != 0)
        return -1;
    walk_params(run, r->id, r->dp_flat, 0, lo, false);
    walk_params(run, r->id, r->dp_flat, hi, n, false);
    return 0;
}

/* ---- the model's gradients as flat floats (the order of the tensors in each slice) -- */

/* Elements of v's parameter tensors (= its gradients), whatever the model
 * (pr_model_tensor). */
size_t pr_vstage_grad_floats(const PrRun *run, int v)
{
    PrStageTensor t = pr_stage_tensors(v, 0);
    while (pr_stage_tensor_next(run, &t))
        ;
    return t.at;
}

size_t pr_rank_grad_floats(const PrRun *run, int s)
{
    size_t n = 0;
    for (int v = 0; v < run->PV; v++)
        if (run->prog->vstages[v].rank == s)
            n += pr_vstage_grad_floats(run, v);
    return n;
}

void pr_rank_grad_copy(PrRun *run, int s, float *buf, bool pack)
{
    for (int v = 0; v < run->PV; v++) {
        if (run->prog->vstages[v].rank != s)
            continue;
        for (PrStageTensor t = pr_stage_tensors(v, 0); pr_stage_tensor_next(run, &t);) {
            if (pack)
                memcpy(buf, t.grad, t.n * sizeof *t.grad);
            else
                memcpy(t.grad, buf, t.n * sizeof *t.grad);
            buf += t.n;
        }
    }
}
