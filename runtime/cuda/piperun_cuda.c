/* piperun_cuda.c - the CUDA backend of libpiperun: the API of runtime/piperun.h on
 * GPUs (docs/cuda.md). The generated program is the CPU backend's, linked against
 * build/libpiperun_cuda.a instead of libpiperun.a.
 *
 * One host thread per rank enqueues its program asynchronously, exactly as the stream
 * plan says (plan/streams.h: the plan `pipec emit --backend cuda` computed, verified
 * and wrote into the program as tables, which cu_host.c reads at start-up; streams.json
 * is written from the same plan): every op runs on its stream (compute: F/B/W/R; d2h:
 * SO, OG; h2d: SI, LW), first waiting for the end events of the ops the plan names and
 * for the receive events of its messages. No ordering decision is made here.
 *   - OG/LW (model-state offload, TPipe's T-Offload): OG copies the slice's gradients
 *     into pinned host memory with cudaMemcpyAsync on d2h and runs the SGD step on the
 *     host copy of the weights as a host function on that stream; LW copies those
 *     weights back on h2d. The end-of-iteration step skips offloaded slices.
 *   - the arena is one cudaMalloc of the planned size; regions are arena + offset.
 *   - messages: NCCL point-to-point over one communicator per ordered pair of ranks
 *     that exchange messages (two members: sender 0, receiver 1; non-blocking, set up
 *     and connected at start-up), each side on a stream of its own: a send is posted as
 *     soon as its producer is enqueued, its stream waiting for the producer's end; the
 *     receive is posted right before its consumer and records the event the
 *     consumer's stream waits for. Each pair's messages match in issue order on both
 *     sides, so no send or receive waits for another pair's. With fewer GPUs than ranks
 *     NCCL cannot be used (one rank per GPU): the runtime says so and falls back to
 *     device-to-device copies (cudaMemcpyPeerAsync into the receiver's buffer on the
 *     sender's p2p stream, then an event the consumer waits on); PIPERUN_CUDA_P2P=copy
 *     forces that path.
 *   - the watchdog: every host wait polls the run's failure flag; NCCL calls that are
 *     in progress and the end-of-iteration drain poll the communicators' asynchronous
 *     errors and fail after --timeout seconds without progress, naming the first op
 *     that has not finished. Rank threads are joined before the communicators are
 *     aborted (failed run) or destroyed (cu_host.h cu_teardown).
 * Workloads: mlp (mlp_cuda.cu; --check compares with the CPU reference of runtime/models/mlp.h),
 * gpt and llama in the same slot (tf_cuda.cu; reference runtime/models/transformer.h) and
 * synthetic (spin.cu). One run per process (the device state is global). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cu_api.h"
#include "cu_dist.h"
#include "cu_host.h"
#include "workload.h"

/* Seconds a failed run's teardown (joins, then every communicator aborted at once) may
 * take before the process gives up and exits 1 (cu_host.h cu_teardown). */
#define CU_TEARDOWN_DEADLINE_S 20.0

/* One process drives every rank unless piperun_cuda_mpi.c says otherwise. */
CuDist cu_dist = {0, 1, 0, 1, NULL, NULL, NULL, NULL, NULL};

typedef struct CuRank {
    bool local;                /* run by this process (always, unless one rank per process) */
    int dev;
    cudaStream_t comp, d2h, h2d, p2p; /* p2p: the copy fallback's messages */
    cudaStream_t *sendst, *recvst;    /* [P] NCCL: the stream of the pair (me, peer) /
                                         (peer, me), NULL when the pair has no message */
    cudaEvent_t *t0, *t1;      /* [nops] start and end of op i (timing) */
    cudaEvent_t ref;           /* timing origin, recorded at host time ref_ms */
    double ref_ms;
    unsigned char *arena;      /* device, arena_bytes */
    void **host;               /* [nvm] pinned SO/SI buffers */
    PrIo io;                   /* device io buffers (a model workload; router.c) */
    int *tok, *tgt;            /* (M,B,T) device */
    int *tok_h, *tgt_h;        /* (M,B,T) pinned */
    char *dummy;               /* 1 device byte: token messages */
    CuMlp mlp;
    const CuArch *arch;        /* the model on this device (cu_api.h); NULL: none */
    struct OgStep *og;         /* [PV] arguments of OG's host SGD step */
    bool *pinned;              /* [PV] host_w/host_g of v registered (cudaHostRegister) */
    float spin_ms;             /* launch overhead of the spin kernel on this rank's GPU */
} CuRank;

static struct {
    PrRun *run;
    CuRank *r;                 /* [P] */
    StreamPlan *plan;          /* what every rank enqueues (cu_stream_plan: the program's) */
    bool nccl;                 /* messages over NCCL (else the copy fallback) */
    ncclComm_t *comms;         /* [2 * P * P] pair (a,b): [2(aP+b)] a's side, [+1] b's;
                                  NULL where absent (or not in this process) */
    cudaEvent_t *msg_ev;       /* [nmsgs] */
    atomic_uint *msg_stamp;    /* [nmsgs] iteration + 1 when the copy was enqueued */
    ncclComm_t dp_comm;        /* data parallelism: the D processes of this process's
                                  stage (NULL: none) */
} CU;

/* ---- the helpers core.h declares --------------------------------------------- */

/* --check on the GPU: cuBLAS and the kernels sum in another order than the CPU
 * reference, so the bound is 1e-4 relative (issue 7) instead of the CPU's 1e-5. */
double pr_check_bound(void)
{
    return 1e-4;
}

/* A CUDA failure inside an op: record it with the op (cu_error printed the call). */
static int op_fail(PrRank *r, uint32_t i)
{
    char e[256];
    cu_first_error(e, sizeof e);
    pr_fail(r->run, r->id, i, "CUDA/NCCL error: %s", e);
    return -1;
}

/* ---- ops ---------------------------------------------------------------------------------- */

static int model_op(PrRank *r, CuRank *c, const PrOp *o)
{
    PrRun *run = r->run;
    const MlpSlice *s = &run->slice[o->vstage];
    size_t bt = (size_t)run->prog->model_batch * run->prog->model_seq;
    /* the region: its pieces wherever the plan put them in the device arena */
    PrRegion rg = pr_op_region(run, o, PR_MLP, c->arena);
    const int *tok = c->tok + (size_t)o->mb * bt, *tgt = c->tgt + (size_t)o->mb * bt;
    switch (o->kind) {
    case PR_F: {
        float *out = s->head ? NULL : *pr_io_next(&c->io, run, r->id, PR_FWD, o->vstage, o->mb);
        const float *in = *pr_io_in(&c->io, run, PR_FWD, o->vstage, o->mb);
        return c->arch->forward(&c->mlp, c->comp, s, o->mb, out, &rg, in, tok, tgt,
                                !(o->flags & PR_HAS_R));
    }
    case PR_R:
        return c->arch->recompute(&c->mlp, c->comp, s, &rg, tok);
    case PR_B: {
        float *din = s->embed ? NULL : *pr_io_next(&c->io, run, r->id, PR_BWD, o->vstage, o->mb);
        const float *dout = s->head ? NULL : *pr_io_in(&c->io, run, PR_BWD, o->vstage, o->mb);
        bool split = (o->flags & PR_HAS_W) != 0;
        return c->arch->backward(&c->mlp, c->comp, s, din, &rg, dout, tok, tgt, split);
    }
    case PR_W:
        return c->arch->weight_grad(&c->mlp, c->comp, s, &rg, tok);
    default:
        return 0;
    }
}

/* OG's optimizer step on the host: hw -= lr * hg over n floats (mlp_sgd_step's SGD). */
typedef struct OgStep {
    float *hw, *hg;   /* (n) host weights and the gradients OG copied */
    size_t n;
    float lr;
} OgStep;

static void CUDART_CB og_host_step(void *arg)
{
    const OgStep *a = arg;
    for (size_t j = 0; j < a->n; j++)
        a->hw[j] -= a->lr * a->hg[j];
}

/* OG (dir 0: gradients device -> host, then the host step) or LW (dir 1: weights host ->
 * device) of virtual stage v's slice on stream st. */
static int state_copy(PrRank *r, CuRank *c, int v, int dir, cudaStream_t st)
{
    PrRun *run = r->run;
    if (!run->host_w || !run->host_w[v] || !run->host_g || !run->host_g[v]) {
        cu_error(__FILE__, __LINE__, dir == 0 ? "OG" : "LW",
                 "no host copy of the virtual stage's weights (the slice is not offloaded)");
        return -1;
    }
    PrStageTensor t = pr_stage_tensors(v, 0);
    while (pr_stage_tensor_next(run, &t)) {
        if (dir == 0)
            CUDA_CHECK(cudaMemcpyAsync(run->host_g[v] + t.at,
                                       c->mlp.grads + (t.grad - c->mlp.host_grads),
                                       t.n * sizeof(float), cudaMemcpyDeviceToHost, st));
        else
            CUDA_CHECK(cudaMemcpyAsync(c->mlp.params + (t.param - c->mlp.host_params),
                                       run->host_w[v] + t.at, t.n * sizeof(float),
                                       cudaMemcpyHostToDevice, st));
    }
    if (dir == 0) {
        c->og[v] = (OgStep){run->host_w[v], run->host_g[v], t.at, (float)run->opt.lr};
        CUDA_CHECK(cudaLaunchHostFunc(st, og_host_step, &c->og[v]));
    }
    return 0;
}

static cudaStream_t stream_of(const CuRank *c, unsigned st)
{
    return st == STREAM_D2H ? c->d2h : st == STREAM_H2D ? c->h2d : c->comp;
}

/* SO (out) or SI (back) of the (v,m) region on st. */
static int swap_copy(PrRank *r, CuRank *c, const PrOp *o, cudaStream_t st)
{
    PrRun *run = r->run;
    int w = run->wl->plan;
    size_t k = pr_vm(run, o->vstage, o->mb);
    int64_t bytes = o->held[w];
    /* the held prefix [0, bytes) sits in the pinned host buffer at region coordinates:
     * SO gathers it from the region's pieces, SI scatters it into the SI's, as on the
     * CPU */
    PrHeldPiece pc[PR_PIECES];
    int np = bytes > 0 ? pr_held_pieces(run, o, w, pc) : 0;
    if (np < 0) {
        cu_error(__FILE__, __LINE__, pr_kind_name(o->kind),
                 "the plan places no arena bytes for part of the region it moves");
        return -1;
    }
    for (int j = 0; j < np; j++) {
        unsigned char *dev = c->arena + pc[j].at, *host = (unsigned char *)c->host[k] + pc[j].lo;
        if (o->kind == PR_SO)
            CUDA_CHECK(cudaMemcpyAsync(host, dev, (size_t)pc[j].n, cudaMemcpyDeviceToHost, st));
        else
            CUDA_CHECK(cudaMemcpyAsync(dev, host, (size_t)pc[j].n, cudaMemcpyHostToDevice, st));
    }
    /* synthetic: the compiler's duration of the copy (the scaled copy is shorter) */
    if (run->wl->replay && cu_spin(st, o->cost_ms * run->opt.time_scale, c->spin_ms))
        return -1;
    return 0;
}

/* Op i on the stream the plan gives it, after the plan's waits and its receives. */
static int enqueue_op(PrRank *r, CuRank *c, uint32_t i)
{
    PrRun *run = r->run;
    const PrOp *o = &r->d->ops[i];
    const StreamRank *k = &CU.plan->rank[r->id];
    cudaStream_t st = stream_of(c, k->stream[i]);
    for (uint32_t x = k->wstart[i]; x < k->wstart[i + 1]; x++)
        CUDA_CHECK(cudaStreamWaitEvent(st, c->t1[k->waits[x]], 0));
    for (uint32_t x = k->rstart[i]; x < k->rstart[i + 1]; x++)
        CUDA_CHECK(cudaStreamWaitEvent(st, CU.msg_ev[k->recvs[x]], 0));
    CUDA_CHECK(cudaEventRecord(c->t0[i], st));
    int rc;
    switch (o->kind) {
    case PR_OG:
    case PR_LW:
        rc = run->wl->model && c->arch
                 ? state_copy(r, c, o->vstage, pr_copy_dir(o->kind), st)
                 : cu_spin(st, o->cost_ms * run->opt.time_scale, c->spin_ms);
        break;
    case PR_SO:
    case PR_SI:
        rc = swap_copy(r, c, o, st);
        break;
    default:
        rc = run->wl->model ? model_op(r, c, o)
                            : cu_spin(st, o->cost_ms * run->opt.time_scale, c->spin_ms);
    }
    if (rc)
        return -1;
    CUDA_CHECK(cudaEventRecord(c->t1[i], st));
    return 0;
}

/* Live bytes as the compiler's walk counts them (PrOp.mem_alloc at the op's start,
 * mem_free at its end), in program order: the runtime states no memory rule of its own. */
static void account(PrRank *r, const PrOp *o)
{
    int w = r->run->wl->plan;
    r->live += o->mem_alloc[w];
    if (r->live > r->peak)
        r->peak = r->live;
    r->live -= o->mem_free[w];
}

int pr_op(PrRank *r, uint32_t i)
{
    if (pr_op_check(r, i) != 0 || pr_fault_inject(r, i) != 0)
        return -1;
    if (enqueue_op(r, &CU.r[r->id], i) != 0)
        return op_fail(r, i);
    account(r, &r->d->ops[i]);
    r->next_op = i + 1;
    return 0;
}

/* ---- messages ------------------------------------------------------------------------------ */

static void *msg_buf(PrRank *r, CuRank *c, const PrMsg *m, bool send)
{
    PrRun *run = r->run;
    void **slot = run->wl->model ? pr_io_msg(&c->io, run, m, send) : NULL;
    return slot ? *slot : c->dummy;
}

static size_t msg_bytes(const PrRun *run, const PrMsg *m)
{
    return run->wl->model && m->payload != PR_PAY_TOKEN ? run->io_bytes : 1;
}

/* The communicator of pair (a,b) on side `side` (0: the sender a, 1: the receiver b). */
static ncclComm_t pair_comm(int a, int b, int side)
{
    return CU.comms ? CU.comms[2 * ((size_t)a * CU.run->P + (size_t)b) + side] : NULL;
}

/* An NCCL call on a non-blocking communicator returned e: polls until it is no longer
 * in progress, failing on an error, on another rank's failure or after --timeout.
 * Returns 0 or -1 (cu_error / pr_fail called). */
static int nccl_settle(PrRun *run, ncclComm_t comm, ncclResult_t e, const char *call)
{
    double deadline = pr_now_ms() + run->opt.timeout_s * 1e3;
    while (e == ncclInProgress) {
        if (atomic_load(&run->failed))
            return -1;
        if (pr_now_ms() > deadline) {
            cu_error(__FILE__, __LINE__, call, "still in progress after --timeout seconds");
            return -1;
        }
        struct timespec ts = {0, 50000L};
        nanosleep(&ts, NULL);
        if (ncclCommGetAsyncError(comm, &e) != ncclSuccess)
            break;
    }
    if (e != ncclSuccess) {
        cu_error(__FILE__, __LINE__, call, ncclGetErrorString(e));
        return -1;
    }
    return 0;
}

int pr_send(PrRank *r, int32_t peer, uint32_t msg)
{
    PrRun *run = r->run;
    if (pr_msg_check(r, peer, msg, true) != 0)
        return -1;
    if (r->dropping) /* PIPERUN_FAULT drop */
        return 0;
    CuRank *c = &CU.r[r->id];
    const PrMsg *m = &run->prog->msgs[msg];
    uint32_t prod = CU.plan->send_after[msg];
    if (CU.nccl) {
        /* posted at once on the pair's stream, after the producer's end */
        cudaStream_t st = c->sendst[peer];
        ncclComm_t comm = pair_comm(r->id, peer, 0);
        if (cudaStreamWaitEvent(st, c->t1[prod], 0) != cudaSuccess)
            goto cuda;
        if (nccl_settle(run, comm, ncclSend(msg_buf(r, c, m, true), msg_bytes(run, m), ncclChar,
                                            1, comm, st), "ncclSend"))
            return op_fail(r, prod);
        return 0;
    }
    /* copy mode: into the receiver's buffer, on this rank's p2p stream */
    if (cudaStreamWaitEvent(c->p2p, c->t1[prod], 0) != cudaSuccess)
        goto cuda;
    if (run->wl->model && m->payload != PR_PAY_TOKEN) {
        CuRank *d = &CU.r[peer];
        if (cudaMemcpyPeerAsync(msg_buf(run->rank + peer, d, m, false), d->dev,
                                msg_buf(r, c, m, true), c->dev, run->io_bytes, c->p2p) != cudaSuccess)
            goto cuda;
    }
    /* synthetic: the receiving rank's p2p time, before the message counts as arrived */
    if (run->wl->replay && run->prog->ranks[peer].p2p_ms > 0 &&
        cu_spin(c->p2p, run->prog->ranks[peer].p2p_ms * run->opt.time_scale, c->spin_ms))
        return op_fail(r, prod);
    if (cudaEventRecord(CU.msg_ev[msg], c->p2p) != cudaSuccess)
        goto cuda;
    pthread_mutex_lock(&run->mu);
    atomic_store(&CU.msg_stamp[msg], (unsigned)r->iter + 1);
    pthread_cond_broadcast(&run->cv);
    pthread_mutex_unlock(&run->mu);
    return 0;
cuda:
    cu_error(__FILE__, __LINE__, "send", cudaGetErrorString(cudaGetLastError()));
    return op_fail(r, prod);
}

int pr_recv(PrRank *r, int32_t peer, uint32_t msg)
{
    PrRun *run = r->run;
    if (pr_msg_check(r, peer, msg, false) != 0)
        return -1;
    CuRank *c = &CU.r[r->id];
    const PrMsg *m = &run->prog->msgs[msg];
    if (CU.nccl) {
        /* posted on the pair's stream; the consumer's stream waits for msg_ev (the plan) */
        cudaStream_t st = c->recvst[peer];
        ncclComm_t comm = pair_comm(peer, r->id, 1);
        if (nccl_settle(run, comm, ncclRecv(msg_buf(r, c, m, false), msg_bytes(run, m), ncclChar,
                                            0, comm, st), "ncclRecv"))
            return op_fail(r, r->next_op);
        if (run->wl->replay && r->d->p2p_ms > 0 &&
            cu_spin(st, r->d->p2p_ms * run->opt.time_scale, c->spin_ms))
            return op_fail(r, r->next_op);
        if (cudaEventRecord(CU.msg_ev[msg], st) != cudaSuccess) {
            cu_error(__FILE__, __LINE__, "cudaEventRecord", cudaGetErrorString(cudaGetLastError()));
            return op_fail(r, r->next_op);
        }
        return 0;
    }
    /* copy mode: the sender's host thread must have enqueued the copy (host order only) */
    double deadline = pr_now_ms() + run->opt.timeout_s * 1e3;
    pthread_mutex_lock(&run->mu);
    while (atomic_load(&CU.msg_stamp[msg]) != (unsigned)r->iter + 1 && !atomic_load(&run->failed)) {
        if (pr_now_ms() > deadline) {
            pthread_mutex_unlock(&run->mu);
            pr_fail(run, r->id, r->next_op, "watchdog: stuck %.1f s in the receive of message "
                    "%u from rank %d", run->opt.timeout_s, msg, peer);
            return -1;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&run->cv, &run->mu, &ts);
    }
    pthread_mutex_unlock(&run->mu);
    return atomic_load(&run->failed) ? -1 : 0;
}

/* ---- iterations ----------------------------------------------------------------------------- */

/* Ops of rank r that have finished on the GPU this iteration (end events). */
static uint32_t ops_done(const PrRank *r, const CuRank *c)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->d->nops; i++)
        n += cudaEventQuery(c->t1[i]) == cudaSuccess;
    return n;
}

/* Waits for every stream of the rank, polling NCCL's asynchronous errors and the run's
 * failure; --timeout seconds without an op finishing names the first op that has not
 * finished. Returns 0 or -1. */
static int drain(PrRank *r, CuRank *c)
{
    PrRun *run = r->run;
    int P = run->P;
    double now = pr_now_ms(), deadline = now + run->opt.timeout_s * 1e3, next_check = now + 50;
    uint32_t done = ops_done(r, c);
    for (;;) {
        int busy = 0;
        for (int k = 0; k < 4 + 2 * P; k++) {
            cudaStream_t st = k == 0 ? c->comp : k == 1 ? c->d2h : k == 2 ? c->h2d : k == 3 ? c->p2p
                              : k < 4 + P ? (c->sendst ? c->sendst[k - 4] : NULL)
                                          : (c->recvst ? c->recvst[k - 4 - P] : NULL);
            if (!st)
                continue;
            cudaError_t e = cudaStreamQuery(st);
            if (e == cudaErrorNotReady)
                busy++;
            else if (e != cudaSuccess) {
                cu_error(__FILE__, __LINE__, "cudaStreamQuery", cudaGetErrorString(e));
                return op_fail(r, r->next_op ? r->next_op - 1 : 0);
            }
        }
        if (!busy)
            return 0;
        for (int q = 0; CU.comms && q < P; q++)
            for (int side = 0; side < 2; side++) {
                ncclComm_t comm = side ? pair_comm(q, r->id, 1) : pair_comm(r->id, q, 0);
                ncclResult_t ae = ncclSuccess;
                if (comm && ncclCommGetAsyncError(comm, &ae) == ncclSuccess && ae != ncclSuccess &&
                    ae != ncclInProgress) {
                    pr_fail(run, r->id, -1, "NCCL asynchronous error: %s", ncclGetErrorString(ae));
                    return -1;
                }
            }
        if (atomic_load(&run->failed))
            return -1;
        now = pr_now_ms();
        if (now > next_check) {    /* progress resets the watchdog */
            uint32_t d = ops_done(r, c);
            if (d > done) {
                done = d;
                deadline = now + run->opt.timeout_s * 1e3;
            }
            next_check = now + 50;
        }
        if (now > deadline) {
            uint32_t stuck = 0;
            for (uint32_t i = 0; i < r->d->nops; i++)
                if (cudaEventQuery(c->t1[i]) == cudaErrorNotReady) {
                    stuck = i;
                    break;
                }
            pr_fail(run, r->id, stuck, "watchdog: no op finished on the GPU for %.1f s (this op "
                    "has not finished; the communicators are aborted next)", run->opt.timeout_s);
            return -1;
        }
        struct timespec ts = {0, 100000L};
        nanosleep(&ts, NULL);
    }
}

/* Measured op spans of this iteration from the events. */
static int collect(PrRank *r, CuRank *c)
{
    PrRun *run = r->run;
    for (uint32_t i = 0; i < r->d->nops; i++) {
        const PrOp *o = &r->d->ops[i];
        float a = 0, b = 0;
        CUDA_CHECK(cudaEventElapsedTime(&a, c->ref, c->t0[i]));
        CUDA_CHECK(cudaEventElapsedTime(&b, c->ref, c->t1[i]));
        PrSpan *sp = &r->span[(size_t)r->iter * r->d->nops + i];
        sp->t0 = c->ref_ms - run->t_start + a;
        sp->t1 = c->ref_ms - run->t_start + b;
        size_t kk = (size_t)o->vstage * PR_NKINDS + o->kind;
        /* the first of several iterations warms up (as on the CPU) */
        if (r->iter > 0 || run->opt.iters == 1) {
            r->kind_ms[kk] += b - a;
            r->kind_n[kk]++;
        }
        if (pr_copy_dir(o->kind) < 0)
            r->busy_ms += b - a;
    }
    return 0;
}

static bool owns(const PrRun *run, int rank, int v)
{
    return run->prog->vstages[v].rank == rank;
}

/* Start of an iteration on rank r: zero its gradients, upload its batches. */
static int begin(PrRank *r, CuRank *c)
{
    PrRun *run = r->run;
    const PrProgram *g = run->prog;
    if (!c->arch)
        return 0;
    size_t bt = (size_t)g->model_batch * g->model_seq;
    for (int v = 0; v < run->PV; v++)
        if (owns(run, r->id, v) && c->arch->zero_grad(&c->mlp, c->comp, &run->slice[v]))
            return -1;
    for (int m = 0; m < run->M; m++)
        if (data_batch(&run->data, run->opt.seed, r->iter,
                       pr_dp_microbatch(run->M, run->replica, m), /* the replica's shard */
                       g->model_batch, g->model_seq, g->model_vocab, c->tok_h + m * bt,
                       c->tgt_h + m * bt) != 0) {
            pr_fail(run, r->id, -1, "no batch from the training text");
            return -1;
        }
    CUDA_CHECK(cudaMemcpyAsync(c->tok, c->tok_h, (size_t)run->M * bt * sizeof(int),
                               cudaMemcpyHostToDevice, c->comp));
    CUDA_CHECK(cudaMemcpyAsync(c->tgt, c->tgt_h, (size_t)run->M * bt * sizeof(int),
                               cudaMemcpyHostToDevice, c->comp));
    return 0;
}

/* End of an iteration: losses of the head slice, gradients for --check. */
static int finish_iter(PrRank *r, CuRank *c)
{
    PrRun *run = r->run;
    if (!c->arch)
        return 0;
    if (owns(run, r->id, run->PV - 1)) {
        float *l = malloc((size_t)run->M * sizeof *l);
        if (!l)
            return -1;
        cudaError_t e = cudaMemcpy(l, c->mlp.loss, (size_t)run->M * sizeof *l,
                                   cudaMemcpyDeviceToHost);
        for (int m = 0; m < run->M && e == cudaSuccess; m++)
            run->mb_loss[m] = l[m];
        free(l);
        CUDA_CHECK(e);
    }
    if (r->iter == 0 && run->opt.check)
        for (int v = 0; v < run->PV; v++)
            if (owns(run, r->id, v) &&
                c->arch->grads_to_host(&c->mlp, c->comp, &run->slice[v], run->net))
                return -1;
    return 0;
}

/* ---- data parallelism (docs/runtime.md "Data parallelism") ------------------------------ */

/* One tensor of a rank's stage on its device: parameters, gradients, floats. */
typedef struct DpTensor {
    float *p, *g;
    size_t n;
} DpTensor;

/* The tensors of rank s in model order (the order of pr_rank_grad_copy, so the flat
 * offsets are the CPU's) into *out (malloc'd); returns how many, or -1. */
static int dp_tensors(PrRun *run, int s, const CuRank *c, DpTensor **out)
{
    int nt = pr_model_tensor_count(run), k = 0;
    *out = malloc((size_t)(nt ? nt : 1) * sizeof **out);
    if (!*out)
        return -1;
    for (int v = 0; v < run->PV; v++)
        for (PrStageTensor t = pr_stage_tensors(v, 0);
             owns(run, s, v) && pr_stage_tensor_next(run, &t);)
            (*out)[k++] = (DpTensor){c->mlp.params + (t.param - c->mlp.host_params),
                                     c->mlp.grads + (t.grad - c->mlp.host_grads), t.n};
    return k;
}

/* The stage's NCCL communicator over its D processes (main thread, at setup). */
static int dp_setup(PrRun *run)
{
    if (run->D <= 1 || !run->wl->model)
        return 0;
    int s = -1, nlocal = 0;
    for (int k = 0; k < run->P; k++)
        if (CU.r[k].local) {
            s = k;
            nlocal++;
        }
    if (!cu_dist.dp_bcast || nlocal != 1) { /* pr_run_core refuses threaded replicas */
        pr_fail(run, -1, -1, "data_parallel %d on the CUDA backend runs one process per rank "
                "(a GPU each): use --launcher mpi (mpirun -np %d)", run->D,
                (int)pr_dp_nranks(run->P, run->D));
        return -1;
    }
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (run->replica == 0)
        NCCL_CHECK(ncclGetUniqueId(&id));
    if (cu_dist.dp_bcast(&id, sizeof id) != 0) {
        cu_error(__FILE__, __LINE__, "dp_bcast", "cannot broadcast the NCCL unique id");
        return -1;
    }
    CUDA_CHECK(cudaSetDevice(CU.r[s].dev));
    NCCL_CHECK(ncclCommInitRank(&CU.dp_comm, run->D, id, run->replica));
    return 0;
}

/* End of rank r's iteration: its stage's gradients, and the head's micro-batch losses,
 * averaged over the D replicas (ncclAllReduce, ncclAvg) on its compute stream, before
 * the losses and gradients are read. */
static int dp_reduce(PrRank *r, CuRank *c)
{
    PrRun *run = r->run;
    if (!CU.dp_comm || !c->arch)
        return 0;
    DpTensor *t;
    int nt = dp_tensors(run, r->id, c, &t);
    if (nt < 0)
        return -1;
    ncclResult_t e = ncclGroupStart();
    for (int k = 0; k < nt && e == ncclSuccess; k++)
        e = ncclAllReduce(t[k].g, t[k].g, t[k].n, ncclFloat, ncclAvg, CU.dp_comm, c->comp);
    if (e == ncclSuccess && owns(run, r->id, run->PV - 1))
        e = ncclAllReduce(c->mlp.loss, c->mlp.loss, (size_t)run->M, ncclFloat, ncclAvg,
                          CU.dp_comm, c->comp);
    ncclResult_t ee = ncclGroupEnd();   /* always closes the group */
    free(t);
    NCCL_CHECK(e);
    NCCL_CHECK(ee);
    CUDA_CHECK(cudaStreamSynchronize(c->comp));
    return 0;
}

/* zero >= 1: the SGD step of this replica's shard of the stage's parameters (flat
 * floats pr_dp_shard, in model order), then each replica's shard broadcast from it to
 * the others: an all-gather of shards of unequal sizes. */
static int dp_step(PrRank *r, CuRank *c)
{
    PrRun *run = r->run;
    DpTensor *t;
    int nt = dp_tensors(run, r->id, c, &t);
    if (nt < 0)
        return -1;
    size_t n = 0;
    for (int k = 0; k < nt; k++)
        n += t[k].n;
    int rc = 0;
    ncclResult_t e = ncclSuccess, ee = ncclSuccess;
    for (int d = -1; d < run->D && rc == 0; d++) {
        /* d = -1: this replica's step; d >= 0: replica d's shard broadcast */
        size_t lo, hi, at = 0;
        pr_dp_shard(n, run->D, d < 0 ? run->replica : d, &lo, &hi);
        if (d == 0)
            e = ncclGroupStart();
        for (int k = 0; k < nt && rc == 0 && e == ncclSuccess; k++) {
            size_t a = at > lo ? at : lo, b = at + t[k].n < hi ? at + t[k].n : hi;
            if (a < b) {
                if (d < 0)
                    rc = cu_sgd_range(c->comp, t[k].p + (a - at), t[k].g + (a - at),
                                      (float)run->opt.lr, b - a);
                else
                    e = ncclBroadcast(t[k].p + (a - at), t[k].p + (a - at), b - a, ncclFloat,
                                      d, CU.dp_comm, c->comp);
            }
            at += t[k].n;
        }
        if (d == run->D - 1)
            ee = ncclGroupEnd();
    }
    free(t);
    if (rc != 0)
        return -1;
    NCCL_CHECK(e);
    NCCL_CHECK(ee);
    return 0;
}

/* The rank's GPU, for every CUDA call of its thread. */
static int cuda_rank_start(PrRank *r)
{
    CuRank *c = &CU.r[r->id];
    cu_rank = r->id;
    if (c->local && cudaSetDevice(c->dev) != cudaSuccess) {
        pr_fail(r->run, r->id, -1, "cannot select GPU %d", c->dev);
        return -1;
    }
    return 0;
}

/* One iteration of rank r: upload its batches, enqueue its program, wait for its
 * streams, read the op times and the losses. A rank of another process (one rank per
 * process) only keeps the barriers. */
static int cuda_rank_iteration(PrRank *r)
{
    CuRank *c = &CU.r[r->id];
    if (!c->local)
        return 0;
    int rc = begin(r, c);
    if (rc == 0)
        rc = r->d->run(r);
    if (rc == 0)
        rc = drain(r, c);
    if (rc == 0 && dp_reduce(r, c) != 0) /* before the losses and gradients are read */
        rc = op_fail(r, r->next_op ? r->next_op - 1 : 0);
    if (rc == 0 && (collect(r, c) || finish_iter(r, c)))
        rc = op_fail(r, r->next_op ? r->next_op - 1 : 0);
    return rc;
}

/* The SGD step of the rank's slices that are not offloaded, on its compute stream. */
static int cuda_rank_step(PrRank *r)
{
    PrRun *run = r->run;
    CuRank *c = &CU.r[r->id];
    if (c->local && c->arch && CU.dp_comm && pr_dp_sharded(run))
        return dp_step(r, c) != 0 ? op_fail(r, 0) : 0;
    for (int v = 0; c->arch && v < run->PV; v++)
        if (owns(run, r->id, v) && !(run->offloaded && run->offloaded[v]) &&
            c->arch->sgd(&c->mlp, c->comp, &run->slice[v], (float)run->opt.lr))
            return op_fail(r, 0);
    return 0;
}

static void cuda_rank_end(PrRank *r)
{
    CuRank *c = &CU.r[r->id];
    if (c->local && drain(r, c) != 0 && !atomic_load(&r->run->failed))
        pr_fail(r->run, r->id, -1, "the last optimizer step failed on the GPU");
}

/* ---- setup ------------------------------------------------------------------------------- */

static int rank_setup(PrRun *run, int s, int ngpu)
{
    PrRank *r = &run->rank[s];
    CuRank *c = &CU.r[s];
    const PrProgram *g = run->prog;
    size_t nvm = (size_t)run->PV * run->M, nops = r->d->nops ? r->d->nops : 1;
    int w = run->wl->plan;
    cu_rank = s;
    c->local = cu_dist.np == 1 || s == cu_dist.me;
    char why[320];
    if (cu_pick_device(cu_dist.np, cu_dist.local, cu_dist.nlocal, ngpu, s, &c->dev, why,
                       sizeof why) != 0) {
        pr_fail(run, s, -1, "%s", why);
        return -1;
    }
    r->nvm = nvm;
    c->t0 = calloc(nops, sizeof *c->t0);
    c->t1 = calloc(nops, sizeof *c->t1);
    c->host = calloc(nvm, sizeof *c->host);
    c->pinned = calloc((size_t)run->PV, sizeof *c->pinned);
    c->sendst = calloc((size_t)run->P, sizeof *c->sendst);
    c->recvst = calloc((size_t)run->P, sizeof *c->recvst);
    c->og = calloc((size_t)run->PV, sizeof *c->og);
    int io = pr_io_init(&c->io, nvm);
    if (!c->t0 || !c->t1 || !c->host || !c->pinned || !c->sendst || !c->recvst || !c->og ||
        io != 0) {
        pr_fail(run, s, -1, "out of host memory");
        return -1;
    }
    for (uint32_t i = 0; i < r->d->nops; i++)
        if (r->d->ops[i].kind >= PR_NKINDS) {
            pr_fail(run, s, i, "op kind %d is not supported by the CUDA backend",
                    (int)r->d->ops[i].kind);
            return -1;
        }
    if (!c->local)   /* another process runs it: host bookkeeping only (trace, summary) */
        return 0;
    CUDA_CHECK(cudaSetDevice(c->dev));
    CUDA_CHECK(cudaStreamCreateWithFlags(&c->comp, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&c->d2h, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&c->h2d, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&c->p2p, cudaStreamNonBlocking));
    for (size_t i = 0; i < nops; i++) {
        CUDA_CHECK(cudaEventCreate(&c->t0[i]));
        CUDA_CHECK(cudaEventCreate(&c->t1[i]));
    }
    CUDA_CHECK(cudaEventCreate(&c->ref));
    int64_t ab = r->d->arena_bytes[w];
    CUDA_CHECK(cudaMalloc((void **)&c->arena, (size_t)(ab > 0 ? ab : 64)));
    CUDA_CHECK(cudaMalloc((void **)&c->dummy, 64));
    /* pinned host buffers: the largest SO of each (v,m) */
    for (uint32_t i = 0; i < r->d->nops; i++) {
        const PrOp *o = &r->d->ops[i];
        size_t k = pr_vm(run, o->vstage, o->mb);
        if (o->kind == PR_SO && o->held[w] > 0 && !c->host[k])
            CUDA_CHECK(cudaMallocHost(&c->host[k], (size_t)o->held[w]));
    }
    if (run->wl->replay)
        return cu_spin_calibrate(c->comp, &c->spin_ms);
    c->arch = run->prog->model_arch ? &cu_tf_arch : &cu_mlp_arch;
    if (c->arch->init(&c->mlp, run->net, run->slice, run->PV))
        return -1;
    /* OG/LW copy from and to these host copies asynchronously: pin them */
    for (int v = 0; v < run->PV; v++)
        if (owns(run, s, v) && run->offloaded && run->offloaded[v] && run->host_w[v]) {
            /* whole pages of their own (pr_host_alloc): two registrations never share one */
            size_t n = pr_host_bytes(pr_vstage_grad_floats(run, v));
            CUDA_CHECK(cudaHostRegister(run->host_w[v], n, cudaHostRegisterPortable));
            cudaError_t e = cudaHostRegister(run->host_g[v], n, cudaHostRegisterPortable);
            if (e != cudaSuccess) {
                cudaHostUnregister(run->host_w[v]);
                CUDA_CHECK(e);
            }
            c->pinned[v] = true;
        }
    size_t bt = (size_t)g->model_batch * g->model_seq;
    CUDA_CHECK(cudaMalloc((void **)&c->tok, (size_t)run->M * bt * sizeof(int)));
    CUDA_CHECK(cudaMalloc((void **)&c->tgt, (size_t)run->M * bt * sizeof(int)));
    CUDA_CHECK(cudaMallocHost((void **)&c->tok_h, (size_t)run->M * bt * sizeof(int)));
    CUDA_CHECK(cudaMallocHost((void **)&c->tgt_h, (size_t)run->M * bt * sizeof(int)));
    for (int v = 0; v < run->PV; v++)
        for (int m = 0; m < run->M; m++) {
            size_t k = pr_vm(run, v, m);
            bool mine = owns(run, s, v);
            if (!mine && !(v > 0 && owns(run, s, v - 1)) && !(v + 1 < run->PV && owns(run, s, v + 1)))
                continue;
            for (int d = 0; d < 2; d++) {
                CUDA_CHECK(cudaMalloc(&c->io.in[d][k], run->io_bytes));
                CUDA_CHECK(cudaMalloc(&c->io.out[d][k], run->io_bytes));
            }
        }
    return 0;
}

/* Frees a device io buffer (pr_io_free). */
static void dev_free(void *buf)
{
    cudaFree(buf);
}

static void rank_teardown(PrRun *run, int s)
{
    PrRank *r = &run->rank[s];
    CuRank *c = &CU.r[s];
    size_t nops = r->d->nops ? r->d->nops : 1;
    if (c->local && cudaSetDevice(c->dev) == cudaSuccess) {
        cudaDeviceSynchronize();
        for (size_t i = 0; c->t0 && c->t1 && i < nops; i++) {
            if (c->t0[i])
                cudaEventDestroy(c->t0[i]);
            if (c->t1[i])
                cudaEventDestroy(c->t1[i]);
        }
        for (size_t k = 0; c->host && k < r->nvm; k++)
            if (c->host[k])
                cudaFreeHost(c->host[k]);
        pr_io_free(&c->io, dev_free);
        if (c->arch)
            c->arch->free(&c->mlp);
        for (int v = 0; c->pinned && v < run->PV; v++)
            if (c->pinned[v]) {
                cudaHostUnregister(run->host_w[v]);
                cudaHostUnregister(run->host_g[v]);
            }
        void *dev[] = {c->arena, c->dummy, c->tok, c->tgt};
        for (size_t j = 0; j < sizeof dev / sizeof dev[0]; j++)
            cudaFree(dev[j]);
        cudaFreeHost(c->tok_h);
        cudaFreeHost(c->tgt_h);
        cudaStream_t st[4] = {c->comp, c->d2h, c->h2d, c->p2p};
        for (int k = 0; k < 4; k++)
            if (st[k])
                cudaStreamDestroy(st[k]);
        for (int q = 0; q < run->P; q++) {
            if (c->sendst && c->sendst[q])
                cudaStreamDestroy(c->sendst[q]);
            if (c->recvst && c->recvst[q])
                cudaStreamDestroy(c->recvst[q]);
        }
    }
    pr_io_free(&c->io, dev_free); /* the slots of a rank of another process */
    void *own[] = {c->t0, c->t1, c->host, c->pinned, c->sendst, c->recvst, c->og};
    for (size_t j = 0; j < sizeof own / sizeof own[0]; j++)
        free(own[j]);
}

/* Whether ordered pair (a,b) has a message. */
static bool has_pair(const PrProgram *g, int a, int b)
{
    for (uint32_t j = 0; j < g->nmsgs; j++)
        if (g->msgs[j].src == a && g->msgs[j].dst == b)
            return true;
    return false;
}

/* cfg.maxCTAs for every pair communicator (cu_host.h cu_nccl_max_ctas): the NCCL
 * kernels that can wait at once on the busiest local GPU are its ranks' pair streams. */
static int pair_max_ctas(PrRun *run)
{
    const PrProgram *g = run->prog;
    int P = run->P, cap = 32;
    for (int s = 0; s < P; s++) {
        if (!CU.r[s].local)
            continue;
        int pending = 0, sm = 0;
        for (int t = 0; t < P; t++)
            if (CU.r[t].local && CU.r[t].dev == CU.r[s].dev)
                for (int q = 0; q < P; q++)
                    pending += (q != t && has_pair(g, t, q)) + (q != t && has_pair(g, q, t));
        if (cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, CU.r[s].dev) != cudaSuccess)
            sm = 32;
        int c = cu_nccl_max_ctas(sm, pending);
        cap = c < cap ? c : cap;
    }
    return cap;
}

/* Creates the NCCL communicator of every ordered pair (a,b) with messages, two members
 * (a = 0, b = 1), non-blocking, and the pair's stream on each side; then connects
 * every pair with one one-byte message in one group, so that no send or receive of an
 * iteration waits for a connection (the host threads never wait for each other inside
 * NCCL). One process for every rank: both sides here; one per rank (cu_dist): process 0
 * makes each pair's unique id and cu_dist.bcast hands it to every process, in the same
 * order everywhere. Returns 0 or -1. */
static int setup_pairs(PrRun *run)
{
    const PrProgram *g = run->prog;
    int P = run->P;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    cfg.maxCTAs = pair_max_ctas(run);
    for (int a = 0; a < P; a++)
        for (int b = 0; b < P; b++) {
            if (a == b || !has_pair(g, a, b))
                continue;
            ncclUniqueId id;
            memset(&id, 0, sizeof id);
            if (cu_dist.np <= 1 || cu_dist.me == 0)
                NCCL_CHECK(ncclGetUniqueId(&id));
            if (cu_dist.np > 1 && (!cu_dist.bcast || cu_dist.bcast(&id, sizeof id) != 0)) {
                cu_error(__FILE__, __LINE__, "bcast", "cannot broadcast the NCCL unique id");
                return -1;
            }
            for (int side = 0; side < 2; side++) {
                int s = side ? b : a;
                if (!CU.r[s].local)
                    continue;
                CUDA_CHECK(cudaSetDevice(CU.r[s].dev));
                cudaStream_t *st = side ? &CU.r[b].recvst[a] : &CU.r[a].sendst[b];
                CUDA_CHECK(cudaStreamCreateWithFlags(st, cudaStreamNonBlocking));
            }
            /* no early return between Start and End (fix of the review's NCCL_CHECK note) */
            ncclResult_t e = ncclSuccess;
            const char *call = "ncclGroupStart";
            if ((e = ncclGroupStart()) != ncclSuccess)
                goto fail;
            for (int side = 0; side < 2 && e == ncclSuccess; side++) {
                int s = side ? b : a;
                if (!CU.r[s].local)
                    continue;
                if (cudaSetDevice(CU.r[s].dev) != cudaSuccess) {
                    e = ncclUnhandledCudaError;
                    call = "cudaSetDevice";
                    break;
                }
                ncclComm_t *cm = &CU.comms[2 * ((size_t)a * P + (size_t)b) + side];
                ncclResult_t ei = ncclCommInitRankConfig(cm, 2, id, side, &cfg);
                if (ei != ncclSuccess && ei != ncclInProgress) {
                    e = ei;
                    call = "ncclCommInitRankConfig";
                }
            }
            ncclResult_t ee = ncclGroupEnd();
            if (e == ncclSuccess && ee != ncclSuccess && ee != ncclInProgress) {
                e = ee;
                call = "ncclGroupEnd";
            }
            if (e != ncclSuccess)
                goto fail;
            for (int side = 0; side < 2; side++) {
                ncclComm_t cm = CU.comms[2 * ((size_t)a * P + (size_t)b) + side];
                ncclResult_t st = ncclInProgress;
                if (cm && (ncclCommGetAsyncError(cm, &st) != ncclSuccess ||
                           nccl_settle(run, cm, st, "ncclCommInitRankConfig")))
                    return -1;
            }
            continue;
        fail:
            cu_error(__FILE__, __LINE__, call, ncclGetErrorString(e));
            return -1;
        }
    /* connect: every pair's first message, in one group */
    ncclResult_t e = ncclGroupStart();
    for (int a = 0; a < P && e == ncclSuccess; a++)
        for (int b = 0; b < P; b++) {
            for (int side = 0; side < 2; side++) {
                ncclComm_t cm = pair_comm(a, b, side);
                if (!cm)
                    continue;
                CuRank *c = &CU.r[side ? b : a];
                ncclResult_t ei = cudaSetDevice(c->dev) != cudaSuccess ? ncclUnhandledCudaError
                                : side ? ncclRecv(c->dummy, 1, ncclChar, 0, cm, c->recvst[a])
                                       : ncclSend(c->dummy, 1, ncclChar, 1, cm, c->sendst[b]);
                if (ei != ncclSuccess && ei != ncclInProgress && e == ncclSuccess)
                    e = ei;
            }
        }
    ncclResult_t ee = ncclGroupEnd();
    if (e == ncclSuccess && ee != ncclInProgress)
        e = ee;
    if (e != ncclSuccess) {
        cu_error(__FILE__, __LINE__, "connect the pairs", ncclGetErrorString(e));
        return -1;
    }
    for (size_t k = 0; k < 2 * (size_t)P * P; k++) {
        ncclResult_t st = ncclInProgress;
        if (CU.comms[k] && (ncclCommGetAsyncError(CU.comms[k], &st) != ncclSuccess ||
                            nccl_settle(run, CU.comms[k], st, "connect the pairs")))
            return -1;
    }
    return 0;   /* the exchange itself completes on the pairs' streams, before any message */
}

/* NCCL over one GPU per rank, or the copy fallback. Returns 0 or -1. */
static int setup_transport(PrRun *run, int ngpu)
{
    const PrProgram *g = run->prog;
    const char *force = getenv("PIPERUN_CUDA_P2P");
    bool copy = cu_dist.np <= 1 && (ngpu < run->P || (force && !strcmp(force, "copy")));
    if (cu_dist.np <= 1 && ngpu < run->P)
        fprintf(stderr, "piperun: %d ranks on %d GPU%s: NCCL needs one GPU per rank, so messages "
                "are in-process device-to-device copies (rank s runs on GPU s %% %d)\n", run->P,
                ngpu, ngpu == 1 ? "" : "s", ngpu);
    CU.msg_ev = calloc(g->nmsgs + 1, sizeof *CU.msg_ev);
    CU.msg_stamp = calloc(g->nmsgs + 1, sizeof *CU.msg_stamp);
    if (!CU.msg_ev || !CU.msg_stamp)
        return -1;
    for (uint32_t i = 0; i < g->nmsgs; i++) {
        /* the event lives on the stream that records it: the sender's (copies) or the
         * receiver's (NCCL); one rank per process: only this process's receives */
        int owner = copy ? g->msgs[i].src : g->msgs[i].dst;
        if (!CU.r[owner].local)
            continue;
        CUDA_CHECK(cudaSetDevice(CU.r[owner].dev));
        CUDA_CHECK(cudaEventCreateWithFlags(&CU.msg_ev[i], cudaEventDisableTiming));
    }
    if (copy)
        return 0;
    CU.nccl = true;
    CU.comms = calloc(2 * (size_t)run->P * (size_t)run->P, sizeof *CU.comms);
    if (!CU.comms)
        return -1;
    return setup_pairs(run);
}

/* cu_teardown's callbacks: the rank threads and the pair communicators. */
typedef struct Down {
    pthread_t *th;
    int ncomms;
} Down;

static void down_join(void *ctx, int t)
{
    pthread_join(((Down *)ctx)->th[t], NULL);
}

static void down_abort(void *ctx, int k)
{
    (void)ctx;
    if (CU.comms[k])
        ncclCommAbort(CU.comms[k]);
}

static void down_destroy(void *ctx, int k)
{
    (void)ctx;
    if (CU.comms[k]) {
        /* a non-blocking communicator: finalize, wait, then destroy */
        ncclResult_t e = ncclCommFinalize(CU.comms[k]), st = e;
        double deadline = pr_now_ms() + 10e3;
        while (e == ncclInProgress || st == ncclInProgress) {
            if (ncclCommGetAsyncError(CU.comms[k], &st) != ncclSuccess || pr_now_ms() > deadline)
                break;
            if (st != ncclInProgress)
                break;
            struct timespec ts = {0, 100000L};
            nanosleep(&ts, NULL);
        }
        if (st == ncclSuccess)
            ncclCommDestroy(CU.comms[k]);
        else
            ncclCommAbort(CU.comms[k]);
    }
}

/* A failed run's teardown passed its deadline: say so and end the process (the job
 * under MPI) with status 1, leaving the driver to reclaim the GPU. */
static void down_give_up(void *ctx, double deadline_s)
{
    (void)ctx;
    fprintf(stderr, "piperun: the failed run's teardown did not end within %.0f s (a GPU "
            "communicator could not be aborted); exiting\n", deadline_s);
    fflush(stderr);
    if (cu_dist.np > 1 && cu_dist.abort_job)
        cu_dist.abort_job();
    _exit(1);
}

static void down_free(void *ctx)
{
    (void)ctx;
    free(CU.comms);
    CU.comms = NULL;
}

/* ---- the CUDA backend of the run core (common.c) ---------------------------- */

/* The GPUs (one per rank, or shared), each rank's streams, events and buffers, the
 * stream plan and the messages (NCCL pairs or the copy fallback). */
static int cuda_setup(PrRun *run)
{
    const PrProgram *prog = run->prog;
    cu_env_defaults();   /* before the first CUDA call */
    if (cu_dist.np > 1 && cu_dist.np != prog->P) {
        pr_fail(run, -1, -1, "started with %d MPI processes but the program has %d ranks; run "
                "`mpirun -np %d`", cu_dist.np, prog->P, prog->P);
        return -1;
    }
    int ngpu = 0, dev = 0;
    cudaError_t ge = cudaGetDeviceCount(&ngpu);
    if (ge != cudaSuccess || ngpu < 1) {
        pr_fail(run, -1, -1, "no GPU found: the CUDA backend needs a CUDA device "
                "(cudaGetDeviceCount: %s)", ge != cudaSuccess ? cudaGetErrorString(ge) : "0 devices");
        return -1;
    }
    char why[320];
    if (cu_pick_device(cu_dist.np, cu_dist.local, cu_dist.nlocal, ngpu, cu_dist.me, &dev, why,
                       sizeof why) != 0) {
        pr_fail(run, -1, -1, "%s", why);
        return -1;
    }
    memset(&CU, 0, sizeof CU);
    cu_error_reset();
    CU.run = run;
    run->check_here = cu_dist.me == 0;
    CU.r = calloc((size_t)run->P, sizeof *CU.r);
    if (!CU.r) {
        pr_fail(run, -1, -1, "out of memory");
        return -1;
    }
    for (int s = 0; s < run->P; s++)
        if (rank_setup(run, s, ngpu) != 0) {
            if (!atomic_load(&run->failed))
                pr_fail(run, s, -1, "setup failed: %s", cu_first_error(why, sizeof why));
            return -1;
        }
    if (!(CU.plan = cu_stream_plan(prog, why, sizeof why))) {
        pr_fail(run, -1, -1, "%s", why);
        return -1;
    }
    if (setup_transport(run, ngpu) != 0) {
        pr_fail(run, -1, -1, "cannot set up the messages: %s",
                cu_first_error(why, sizeof why));
        return -1;
    }
    if (dp_setup(run) != 0) {
        if (!atomic_load(&run->failed))
            pr_fail(run, -1, -1, "cannot set up the data-parallel communicator: %s",
                    cu_first_error(why, sizeof why));
        return -1;
    }
    return 0;
}

/* The timing origin of every local rank, recorded as the run's clock starts. */
static int cuda_start(PrRun *run)
{
    for (int s = 0; s < run->P; s++) {
        CuRank *c = &CU.r[s];
        if (!c->local)
            continue;
        if (cudaSetDevice(c->dev) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess ||
            cudaEventRecord(c->ref, c->comp) != cudaSuccess) {
            pr_fail(run, s, -1, "cannot start the timing events");
            return -1;
        }
        c->ref_ms = pr_now_ms();
    }
    return 0;
}

/* One process per rank: the losses (and, in iteration 1 with --check, the gradients)
 * of every process (cu_dist.h). */
static int cuda_iter_end(PrRun *run, int it)
{
    bool grads = it == 0 && run->opt.check && run->wl->model;
    if (cu_dist.np > 1 && (!cu_dist.after_iter || cu_dist.after_iter(run, it, grads) != 0)) {
        pr_fail(run, cu_dist.me, -1, "cannot exchange the results of iteration %d", it + 1);
        return -1;
    }
    return 0;
}

/* Joins the rank threads and ends the communicators (cu_teardown), then gathers every
 * process's results. */
static void cuda_stop(PrRun *run, pthread_t *th, int started)
{
    Down down = {th, CU.comms ? 2 * run->P * run->P : 0};
    CuTeardown td = {&down, started, down_join, down.ncomms, down_abort, down_destroy, down_free,
                     CU_TEARDOWN_DEADLINE_S, down_give_up};
    cu_teardown(&td, atomic_load(&run->failed) != 0);
    if (!atomic_load(&run->failed) && cu_dist.np > 1 && started == run->P &&
        (!cu_dist.at_end || cu_dist.at_end(run) != 0))
        pr_fail(run, cu_dist.me, -1, "cannot gather the results of every rank");
}

static void cuda_teardown(PrRun *run)
{
    for (uint32_t i = 0; CU.msg_ev && i < run->prog->nmsgs; i++)
        if (CU.msg_ev[i])
            cudaEventDestroy(CU.msg_ev[i]);
    for (int s = 0; CU.r && s < run->P; s++)
        rank_teardown(run, s);
    free(CU.msg_ev);
    free(CU.msg_stamp);
    free(CU.r);
    stream_plan_free(CU.plan);
    memset(&CU, 0, sizeof CU);
    cu_error_reset();
}

/* The CUDA backend of the run core (pr_run, common.c). */
const PrBackend pr_backend = {
    .setup = cuda_setup, .start = cuda_start, .rank_start = cuda_rank_start,
    .rank_iteration = cuda_rank_iteration, .rank_step = cuda_rank_step,
    .rank_end = cuda_rank_end, .iter_end = cuda_iter_end, .stop = cuda_stop,
    .teardown = cuda_teardown, .dp_own = true,
};
