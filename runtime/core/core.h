/* core.h - the run core's header (runtime/core/: common.c, dp.c, router.c, trace.c,
 * profile.c, failure.c): the run and its ranks, the backend interface (PrBackend), the
 * workload interface (PrWorkload, PrArch: what the core and the backends see of a
 * workload and of its model's tensors), the router, data parallelism, failures and
 * liveness, what every backend and workload uses. Not part of the API that generated
 * code sees (piperun.h). The workloads have their own header (workloads/workload.h),
 * the CPU backend its own (cpu/cpu.h); docs/architecture.md "The runtime". */
#ifndef PIPERUN_CORE_H
#define PIPERUN_CORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "data.h"
#include "mlp.h"
#include "opkinds.h"
#include "piperun.h"

/* piperun.h's PR_* kinds are plan/opkinds.h's rows, in order: the stream and the name of
 * a kind come from there (pr_copy_dir, pr_kind_name). */
#define X(e, s, st) _Static_assert((int)PR_##e == (int)PLAN_K_##e, "PR_" s " is plan/opkinds.h's row");
PLAN_KINDS(X)
#undef X
_Static_assert((int)PR_NKINDS == (int)PLAN_NKINDS, "piperun.h's kinds are plan/opkinds.h's");

/* The copy direction of an op kind, from its stream (plan/opkinds.h): 0 device to host
 * (SO, OG), 1 host to device (SI, LW), -1 the compute stream. Every stream choice of the
 * runtime reads it. */
static inline int pr_copy_dir(int kind)
{
    Stream st = plan_kind_stream(kind);
    return st == STREAM_D2H ? 0 : st == STREAM_H2D ? 1 : -1;
}

typedef struct PrRun PrRun;
typedef struct PrBackend PrBackend;
typedef struct PrWorkload PrWorkload; /* below */

/* The io buffers of a rank, by (v,m) (pr_vm): the hidden states an F hands on
 * (direction PR_FWD, message payload PR_PAY_ACT) and the gradients a B hands back
 * (PR_BWD, PR_PAY_GRAD), run->io_bytes each, malloc'd. in[d]: the input of op (v,m) of
 * direction d, as it arrived (a message, or a same-rank op); out[d]: the output of op
 * (v,m), waiting for the send of its message. The router (router.c) moves them. */
enum { PR_FWD, PR_BWD };
typedef struct PrIo {
    void **in[2], **out[2];    /* [n] each */
    size_t n;
} PrIo;

/* What a waiter knows about a rank it watches (pr_live_check). */
typedef struct PrLive {
    int s;                 /* the watched rank */
    double seen;           /* ms: the last sign of life */
    struct timespec cpu;   /* its thread's CPU time then */
} PrLive;


/* The flight recorder: each rank keeps its last PR_RING ops (the idea of PyTorch's NCCL
 * watchdog flight recorder) and prints them when the run aborts. t1 = 0: still running. */
#define PR_RING 16
typedef struct PrRingEntry {
    uint32_t op;         /* op index on the rank */
    int32_t iter;        /* 0-based iteration */
    double t0, t1;       /* ms since the run started */
} PrRingEntry;


/* Trace of one op in one iteration (ms since the run started; 0/0 = did not run). */
typedef struct PrSpan {
    double t0, t1;
} PrSpan;

struct PrRank {
    PrRun *run;
    int id;
    const PrRankDesc *d;
    unsigned char *arena;      /* (arena_bytes) 64-aligned */
    int64_t arena_bytes;
    unsigned char *work;       /* the workspace (PrRankDesc.workspace_bytes), 64-aligned,
                                  in the arena's allocation just above it; NULL when
                                  the program reserves none (F then allocates) */
    int64_t work_bytes;
    size_t nvm;                /* P*V*M */
    PrIo io;                   /* the hidden states and gradients between ops (router.c) */
    int64_t live, peak;        /* live arena bytes now, measured peak */
    struct PrCpuRank *cpu_rank; /* the CPU backend's state of the rank (cpu/cpu.h): its
                                   host copies and copy threads; NULL on another backend */
    pthread_mutex_t mu;        /* guards live/peak, stop, the CPU backend's queues and
                                  SI stamps */
    pthread_cond_t cv;
    int stop;
    /* current state */
    int iter;
    atomic_uint cur_op;        /* op being run, for failure messages */
    uint32_t next_op;          /* the op after the last one finished (a receive waits for it) */
    int dropping;              /* fault "drop": skip sends */
    double busy_ms;
    double *kind_ms;           /* [PV * PR_NKINDS] summed op time per (v, kind) */
    uint32_t *kind_n;          /* [PV * PR_NKINDS] */
    PrSpan *span;              /* [iters * nops] */
    int fault_op, fault_what;  /* PIPERUN_FAULT on this rank, fault_op -1 = none */
    /* waking the rank thread in a receive: it spins briefly on the channel, then sets
     * sleeping and blocks on bell_cv; a sender signals only a sleeping receiver */
    pthread_mutex_t bell_mu;
    pthread_cond_t bell_cv;
    atomic_int sleeping;
    double spin_ms;            /* this rank's adaptive spin budget (cpu.c) */
    /* liveness (peer failure): what another thread may read about this rank's thread */
    atomic_int in_wait;        /* blocked in a runtime wait (receive, copies, barrier) */
    atomic_int gone;           /* the thread ended before the run did (killed) */
    atomic_int running;        /* 1 while op cur_op runs */
    atomic_int started;        /* cpu is valid */
    clockid_t cpu;             /* the rank thread's CPU-time clock */
    /* the receive this rank waits in, for the watchdog: its deadline (us on the
     * monotonic clock, 0 = none), message and op */
    atomic_llong wd_deadline_us;
    atomic_uint wd_msg, wd_op;
    PrRingEntry ring[PR_RING]; /* the flight recorder, ring[nring % PR_RING] next */
    atomic_uint nring;
    /* data parallelism (pr_dp_reduce, pr_dp_step): the iteration stamp (iter + 1) of the
     * last reduction, and the flat buffers of this rank's stage, allocated once */
    uint32_t dp_iter;
    double *dp_in, *dp_out;    /* [dp_n]: gradients (then losses) as doubles */
    float *dp_flat;            /* [dp_n]: gradients or parameters as floats */
    size_t dp_n;
};

struct PrRun {
    const PrBackend *be;       /* the backend that runs it */
    const PrProgram *prog;
    PrOptions opt;
    int P, PV, M;
    bool check_here;           /* --check compares the gradients in this process */
    PrRank *rank;              /* [P] */
    int ranks_ready;           /* ranks whose mutex is initialised */
    struct PrCpuRun *cpu_run;  /* the CPU backend's state of the run (cpu/cpu.h): its
                                  channels and shared host links; NULL on another
                                  backend */
    pthread_mutex_t mu;        /* guards error */
    pthread_cond_t cv;         /* a message arrived / barrier moved */
    atomic_int failed;
    char error[256];
    /* barrier between the main thread and the ranks (pr_barrier) */
    int bar_count;
    const PrWorkload *wl;      /* what the ops compute (PrWorkload), chosen by pr_run */
    /* the model workloads' state (workload_model.c): the model of arch `arch` */
    const struct PrArch *arch;
    void *net;                 /* MlpModel (mlp), TfModel (gpt, llama) */
    MlpSlice *slice;           /* [PV] */
    int **tokens, **targets;   /* [P] each rank's (B,T) batch */
    TextData data;             /* the training text */
    size_t io_bytes;           /* one hidden state between slices (PrIo buffers) */
    double *mb_loss;           /* [M] the head's loss per micro-batch */
    /* model-state offload (OG/LW) of a model workload, per virtual stage v */
    bool *offloaded;           /* [PV] v has an OG: its SGD step runs in OG, not at the end */
    float **host_w;            /* [PV] host copy of v's parameters (the master weights) */
    float **host_g;            /* [PV] host copy of v's gradients (what OG moved) */
    double t_start;            /* ms, monotonic */
    double spin_ms;            /* pr_spin_budget_ms() */
    PrLive *live;              /* [P] the main thread's view of each rank (pr_barrier) */
    atomic_int bar_seq;        /* barrier generation, read by spinning waiters */
    /* data parallelism (docs/runtime.md "Data parallelism"): D replicas (1: none), this
     * run's replica, and the state the replicas of one process share (NULL when each
     * process runs one replica's rank: pr_dp) */
    int D, replica;
    struct PrDpGroup *dp_group;
    /* called once, by pr_fail, when the run's first failure is recorded; NULL for none
     * (dp.c sets it when the run joins a group: it stops the other replicas) */
    void (*on_fail)(struct PrRun *run);
    /* --check: the reference after its step, kept for the weights' comparison (a model
     * of arch `arch`) */
    void *check_ref;
};

/* The (v,m) region op o works on, as workload w's plan places it in arena (host or
 * device): its pieces at o->at[w], cut at its virtual stage's from[w]. */
static inline PrRegion pr_op_region(const PrRun *run, const PrOp *o, int w, void *arena)
{
    return pr_region_placed(arena, o->at[w], run->prog->vstages[o->vstage].from[w]);
}

/* Whether workload w's plan gives op o a region at all (some piece placed). */
static inline bool pr_op_placed(const PrOp *o, int w)
{
    for (int k = 0; k < PR_PIECES; k++)
        if (o->at[w][k] >= 0)
            return true;
    return false;
}

/* One piece of an op's held prefix: n bytes at region offset lo (SO/SI: the offset in
 * the host buffer) and at arena offset at. */
typedef struct PrHeldPiece {
    int64_t lo, at, n;
} PrHeldPiece;

/* The pieces of the prefix [0, o->held[w]) of op o's region in workload w's plan, in
 * region order, into out: what an SO gathers into one host buffer and an SI scatters
 * back into its own pieces (cpu.c with memcpy, cuda/piperun_cuda.c with
 * cudaMemcpyAsync), what the synthetic workload's F and R touch. Returns how many, 0
 * when the plan gives o no region, or -1 when a piece of the prefix is not placed. */
int pr_held_pieces(const PrRun *run, const PrOp *o, int w, PrHeldPiece out[PR_PIECES]);

/* The index of (v,m) in a rank's [P*V*M] tables. */
static inline size_t pr_vm(const PrRun *run, int v, int m)
{
    return (size_t)v * (size_t)run->M + (size_t)m;
}

/* A transport for ranks that live in other processes (runtime/mpi/piperun_mpi.c).
 * pr_send and pr_recv hand a message whose peer is remote(peer) to it; everything
 * else (local ranks, waits, failures) stays in cpu.c. NULL: every rank is a thread
 * of this process. */
typedef struct PrTransport {
    bool (*remote)(int rank);
    /* sends message msg of rank r to peer; takes payload (io_bytes, or NULL for a
     * token). Returns 0 or -1 (pr_fail called). */
    int (*send)(PrRank *r, int32_t peer, uint32_t msg, void *payload);
    /* waits for message msg from peer; *payload: a malloc'd io_bytes buffer or NULL;
     * *t_send: when the peer sent it, ms since this run started, clamped to no later
     * than now. Returns 0 or -1 (pr_fail called). */
    int (*recv)(PrRank *r, int32_t peer, uint32_t msg, void **payload, double *t_send);
} PrTransport;
extern const PrTransport *pr_transport;

/* How the replicas of one stage meet when each process runs one replica's rank
 * (runtime/mpi/piperun_mpi.c); NULL: the D replicas are threads of this process and
 * meet in shared memory (common.c). replica: this process's replica. allreduce:
 * sums the n doubles of buf over the replicas of rank r's stage, in place, the same
 * result on every replica; allgather: buf holds n floats of which r's replica's shard
 * (pr_dp_shard) is filled, fills the others' shards from them. Each returns 0, or -1
 * after pr_fail. */
typedef struct PrDpOps {
    int replica;
    int (*allreduce)(PrRank *r, double *buf, size_t n);
    int (*allgather)(PrRank *r, float *buf, size_t n);
} PrDpOps;
extern const PrDpOps *pr_dp;
/* Rank r's end of iteration with D > 1 and the model workload: its stage's gradients
 * (and, on the head's rank, the micro-batch losses) become their mean over the D
 * replicas. Once per iteration (later calls return 0 at once), so a transport may call
 * it before it sends the iteration's results. Returns 0 or -1 (pr_fail called). */
int pr_dp_reduce(PrRank *r);
/* Whether the optimizer step is sharded over the replicas (D > 1, zero >= 1, the model
 * workload): then pr_dp_step replaces the backend's step. */
bool pr_dp_sharded(const PrRun *run);
/* The sharded step of rank r's stage, run by the main thread for each rank after the
 * iteration's check (the replicas' main threads take the stages in the same order):
 * SGD on its replica's shard of the stage's parameters, then the all-gather of the
 * others' shards. Returns 0 or -1 (pr_fail called). */
int pr_dp_step(PrRank *r);
/* The D replica runs of one process (the threads launcher): new (NULL when out of
 * memory), free; join makes run replica `replica` of the group; leave takes it out
 * (before it is freed); fail stops every other replica's run after run failed (pr_fail
 * calls it). pr_dp_rank_free frees a rank's reduction buffers. */
typedef struct PrDpGroup PrDpGroup;
/* The most rank threads (P x D) the threads launcher runs the replicas with. */
#define PR_DP_MAX_THREADS 1024
PrDpGroup *pr_dp_group_new(int D, int P);
void pr_dp_group_free(PrDpGroup *g);
void pr_dp_group_join(PrDpGroup *g, PrRun *run, int replica);
void pr_dp_group_leave(PrDpGroup *g, PrRun *run);
void pr_dp_group_stop(PrDpGroup *g); /* every replica stops at its next reduction */
void pr_dp_rank_free(PrRank *r);

/* A peer that shows no sign of life for this long (or --timeout when shorter) fails the
 * run: a rank thread that uses no CPU outside a runtime wait, or a process whose
 * heartbeats stop. Checked every PR_LIVE_CHECK_S by the waiting side, so a dead or
 * stopped peer is noticed within PR_PEER_SILENCE_S + PR_LIVE_CHECK_S < 10 s. */
#define PR_PEER_SILENCE_S 6.0
#define PR_LIVE_CHECK_S 0.5

/* Milliseconds on the monotonic clock. */
double pr_now_ms(void);
/* Busy-waits ms milliseconds (synthetic op time). */
void pr_spin_ms(double ms);
/* The CPU's spin-wait hint (x86 `pause`), for the spinning part of a wait. */
static inline void pr_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}
/* Records the first failure (later ones are dropped), wakes every waiter. rank/op may
 * be -1 when not tied to one. */
void pr_fail(PrRun *run, int rank, int64_t op, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* "F3.1" */
void pr_op_name(char *buf, size_t n, const PrOp *o);
/* The peer silence that fails a run, ms: min(PR_PEER_SILENCE_S, --timeout). */
double pr_peer_silence_ms(const PrRun *run);
/* Writes rank s's flight recorder (its last ops, oldest first) to f; nothing when it
 * ran no op. */
void pr_flight_print(const PrRun *run, int s, FILE *f);
/* The same from a signal handler (async-signal-safe), for the rank of the calling
 * thread or, when it is none, for every rank of the current run. */
void pr_flight_write_signal(int fd);

/* The relative bound of --check, max |g - ref| / max |ref| per tensor: 1e-5 on the CPU
 * (run_main.c, weak), 1e-4 on the GPU (piperun_cuda.c; issue 7). */
double pr_check_bound(void);
/* run_main.c: the --profile costs block. Returns 0 or -1. */
int pr_profile_write(const PrRun *run);
/* Installs the fatal-signal handler that names the rank and op, then exits 1. */
void pr_install_signals(void);
/* trace.c: writes the Chrome trace of every iteration. Returns 0 or -1 (errno). */
int pr_trace_write(const PrRun *run, const char *path);
/* ---- the run core (common.c) ---------------------------------------------- */

/* What a backend supplies to the run core, as each of nccl-tests' tests supplies its
 * callbacks to common.cu. Hooks marked "main" run on the main thread, "rank" on the
 * rank's thread; NULL optional hooks do nothing. Hooks returning int return 0, or -1
 * after pr_fail. */
struct PrBackend {
    /* main: after the core made the ranks' common state, read PIPERUN_FAULT and set up
     * the workload: the backend's devices, arenas, copy threads and messages. */
    int (*setup)(PrRun *run);
    /* main, optional: right after the run's clock started (run->t_start). */
    int (*start)(PrRun *run);
    /* rank, optional: once, before the first iteration. */
    int (*rank_start)(PrRank *r);
    /* rank: one iteration of rank r: its generated program, then waiting until every
     * op it issued has finished. */
    int (*rank_iteration)(PrRank *r);
    /* rank, optional: after the main thread has taken the iteration's results (an
     * optimizer step where the rank's state lives). */
    int (*rank_step)(PrRank *r);
    /* rank, optional: after the last iteration. */
    void (*rank_end)(PrRank *r);
    /* main, optional: before iteration it starts. */
    void (*iter_begin)(PrRun *run, int it);
    /* main, optional: after every rank ended iteration it, before its losses are read. */
    int (*iter_end)(PrRun *run, int it);
    /* main, optional: after the losses of an iteration (the optimizer step). */
    void (*step)(PrRun *run);
    /* main, optional: stops and joins the started rank threads th[0..started) (NULL:
     * pthread_join each). */
    void (*stop)(PrRun *run, pthread_t *th, int started);
    /* main, optional: frees what setup made; called after any failure too, so it
     * tolerates a rank or state that was never set up. */
    void (*teardown)(PrRun *run);
    /* any thread, optional: called by pr_fail with r->mu held, wakes the threads of
     * rank r that wait on the backend's own condition variables (the CPU backend's copy
     * threads) so that they see the failure. */
    void (*wake)(PrRank *r);
    bool reference;            /* --reference times the CPU reference trainer */
    /* data parallelism: the backend reduces the gradients and steps the shards itself
     * (on the device: NCCL), instead of the core's pr_dp_reduce and pr_dp_step */
    bool dp_own;
};

/* Runs prog on backend be with workload wl (pr_workload_for): checks the options, makes
 * the run, sets up the workload and the backend, starts one thread per rank, runs the
 * iterations, fills res (may be NULL), frees everything. Returns 0, or 1 (res->error
 * says why). */
int pr_run_core(const PrBackend *be, const PrWorkload *wl, const PrProgram *prog,
                const PrOptions *o, PrResult *res);
/* The backend this library was built with (cpu.c: threads; cuda/piperun_cuda.c:
 * GPUs); pr_run (run.c) is pr_run_core over it. */
extern const PrBackend pr_backend;

/* The thread's rank (-1: none) and the op it runs (NULL: none), for the fatal-signal
 * handler and the flight recorder. */
extern _Thread_local int pr_tl_rank;
extern _Thread_local const PrOp *pr_tl_op;
extern _Thread_local uint32_t pr_tl_opi;

/* The checks at the start of pr_send (send) / pr_recv and of pr_op: -1 when the run
 * has failed or the call does not fit the program (pr_fail called), else 0.
 * pr_op_check also makes i the rank's current op (for failure messages). */
int pr_msg_check(PrRank *r, int32_t peer, uint32_t msg, bool send);
int pr_op_check(PrRank *r, uint32_t i);
/* "F", "B", ... for PR_F, PR_B, ...; "?" for another value. */
const char *pr_kind_name(int kind);
/* Blocks on cv (mutex mu held) until it is signalled or until deadline (ms on the
 * monotonic clock). Not a sleep: every state change a waiter waits for signals cv. */
void pr_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double deadline);
/* Liveness: l starts watching rank s at now (ms). pr_live_check fails the run naming
 * rank l->s when its thread has ended (killed) or has used no CPU outside a runtime wait
 * for pr_peer_silence_ms() (stopped or hung): a healthy rank either computes or waits in
 * the runtime. watcher: the rank that noticed (-1: the main thread). Returns 0 or -1. */
void pr_live_start(PrLive *l, int s, double now);
int pr_live_check(PrRun *run, PrLive *l, int watcher, double now);
/* The flight recorder: op i of rank r starts at t0 / the last one ends at t1 (ms). */
void pr_ring_start(PrRank *r, uint32_t i, double t0);
void pr_ring_end(PrRank *r, double t1);
/* PIPERUN_FAULT (piperun.h) at op i of rank r: 0 to go on (nothing injected, or drop:
 * r->dropping set), -1 after an injected failure. segv raises, die ends the thread. */
int pr_fault_inject(PrRank *r, uint32_t i);
/* The barrier of the main thread (me = NULL) and every rank (me); -1 when the run
 * failed. Waiters block at once; the main thread checks the ranks' liveness. */
int pr_barrier(PrRun *run, PrRank *me);
/* One process per rank: -1 with res->error set when np processes (np > 1) cannot run
 * prog, else 0. pr_process_options: what a process other than 0 (me) runs with: no
 * --reference, no --profile, --trace T written as T.rankK (into trace, n bytes). */
int pr_process_count_check(const PrProgram *prog, int np, PrResult *res);
void pr_process_options(PrOptions *o, int me, char *trace, size_t n);

/* Host buffers that the CUDA backend pins (cudaHostRegister) must not share a page with
 * another registered buffer, or the second registration fails ("already registered"):
 * pr_host_bytes(n) is n floats rounded up to whole pages (at least one page), and
 * pr_host_alloc(n) returns that many page-aligned bytes, zeroed (free with free()), or
 * NULL when out of memory. */
size_t pr_host_bytes(size_t nfloats);
float *pr_host_alloc(size_t nfloats);
/* The model's gradient floats of virtual stage v and of rank s (every slice it owns,
 * in model order), and the copy of rank s's gradients to buf (pack) or from buf into
 * the model (!pack): what data parallelism and the MPI transports move (dp.c). */
size_t pr_vstage_grad_floats(const PrRun *run, int v);
size_t pr_rank_grad_floats(const PrRun *run, int s);
void pr_rank_grad_copy(PrRun *run, int s, float *buf, bool pack);

/* The router of io buffers (router.c). pr_io_init allocates nvm slots per direction (0,
 * or -1 when out of memory); pr_io_free frees what the slots hold with release (free,
 * or a device free) and the slots, after a partial init too. The rule, as slots of io
 * (host or device buffers): pr_io_in, the input of op (v,m) of direction dir;
 * pr_io_next, where the output of op (v,m) of rank `rank` goes: the input of the next
 * op of its direction ((v+1,m) forward, (v-1,m) backward) when that op's virtual stage
 * is on the same rank, else the slot the send of its message takes it from;
 * pr_io_msg, the slot the payload of message m leaves from (send) or arrives in (NULL:
 * a token). The host backend moves malloc'd buffers through r->io: pr_io_take, the
 * input of op (v,m) (NULL when none has arrived), which the caller now owns;
 * pr_io_route, the output buf of op (v,m) to where it goes; pr_io_send, the payload
 * message m carries out of r (NULL: a token), which the caller now owns; pr_io_recv,
 * buf (NULL: none), the payload of message m that reached r, to its consumer. */
int pr_io_init(PrIo *io, size_t nvm);
void pr_io_free(PrIo *io, void (*release)(void *buf));
void **pr_io_in(PrIo *io, const PrRun *run, int dir, int v, int m);
void **pr_io_next(PrIo *io, const PrRun *run, int rank, int dir, int v, int m);
void **pr_io_msg(PrIo *io, const PrRun *run, const PrMsg *m, bool send);
void *pr_io_take(PrRank *r, int dir, int v, int m);
void pr_io_route(PrRank *r, int dir, int v, int m, void *buf);
void *pr_io_send(PrRank *r, const PrMsg *m);
void pr_io_recv(PrRank *r, const PrMsg *m, void *buf);

/* The workload's name: synthetic, or the model's arch (mlp, gpt, llama); w: PR_MLP or
 * PR_SYNTHETIC. */
const char *pr_workload_name(const PrProgram *g, int w);

/* ---- what the core sees of a workload (runtime/workloads/ implements them) ---------- */

/* One workload. Hooks marked "main" run on the main thread, "rank" on the rank's
 * thread, "copy" on one of its copy threads; NULL optional hooks do nothing. Hooks
 * returning int return 0, or -1 after pr_fail. */
struct PrWorkload {
    const char *name;          /* "synthetic", "mlp", "gpt/llama" (messages) */
    int plan;                  /* the arena plan its ops follow: the index w of PrOp.at[w],
                                  held[w], mem_alloc[w] and of PrRankDesc.arena_bytes[w]
                                  (PR_MLP, PR_SYNTHETIC) */
    bool model;                /* trains a model: losses, --check, gradients, io buffers */
    bool replay;               /* busy-waits the cost model's times (ops, copies, p2p) */
    /* main, optional: after the core made the run, before the backend's setup. */
    int (*setup)(PrRun *run);
    /* main, optional: after the backend's teardown; tolerates a partial setup. */
    void (*teardown)(PrRun *run);
    /* rank: the work of compute op i (F, B, W, R) on the host, after the backend's waits. */
    int (*op)(PrRank *r, uint32_t i, const PrOp *o);
    /* copy, optional: OG or LW on the host (NULL: the backend replays its time). */
    int (*state)(PrRank *r, const PrOp *o);
    /* main, optional: before each iteration (gradients and losses to zero). */
    void (*zero)(PrRun *run);
    /* main, optional: the optimizer step on the host after an iteration. */
    void (*step)(PrRun *run);
    /* main, optional: --check after iteration 1 (the gradients into res); --reference:
     * the mean ms of one sequential reference iteration, or -1. */
    int (*check)(PrRun *run, PrResult *res);
    double (*reference_ms)(PrRun *run);
    /* main, optional: after iteration 1's optimizer step, with --check: the weights
     * the host stepped against the reference's (res->max_weight_err). */
    void (*check_weights)(PrRun *run, PrResult *res);
};

/* One model architecture on the host, over its model object `net` (MlpModel,
 * TfModel): the kernels of one slice (runtime/models/mlp.h mlp_forward_split & co), its
 * tensors and its sequential reference. */
typedef struct PrArch {
    /* ws: the rank's workspace (PrRank.work) an F without keep_all runs in; returns 0,
     * -1 when out of memory, -2 when ws_bytes is too small */
    int (*forward)(void *net, const MlpSlice *s, float *out, float *loss, const PrRegion *rg,
                   const float *in, const int *tok, const int *tgt, bool keep_all, void *ws,
                   size_t ws_bytes);
    void (*recompute)(void *net, const MlpSlice *s, const PrRegion *rg, const int *tok);
    void (*backward)(void *net, const MlpSlice *s, float *din, const PrRegion *rg,
                     const float *dout, const int *tok, const int *tgt, bool split);
    void (*weight_grad)(void *net, const MlpSlice *s, const PrRegion *rg, const int *tok);
    void (*zero_grad)(void *net, const MlpSlice *s);
    void (*sgd)(void *net, const MlpSlice *s, float lr);
    /* tensors, in the order of --check: count, tensor i (outputs may be NULL), whether
     * it belongs to slice s */
    int (*tensor_count)(const void *net);
    void (*tensor)(const void *net, int i, const char **name, float **param, float **grad,
                   size_t *n);
    bool (*in_slice)(const void *net, int i, const MlpSlice *s);
    /* a fresh model of the program's shape with the run's seed (the same initial
     * weights; NULL when out of memory), the slice of the whole model, one reference
     * iteration over M micro-batches (the mean loss, NaN on failure), free */
    void *(*create)(const PrRun *run);
    MlpSlice (*whole)(const void *net);
    float (*iteration)(void *net, int M, const int *tok, const int *tgt);
    void (*destroy)(void *net);
} PrArch;

/* The model's gradient tensors, whatever its arch (0 tensors without a model): count,
 * tensor i's name, parameters, gradients and floats (outputs may be NULL), and whether
 * it belongs to virtual stage v. For the backends and transports that move gradients
 * and parameters (dp.c, cuda/, mpi/). */
static inline int pr_model_tensor_count(const PrRun *run)
{
    return run->arch && run->net ? run->arch->tensor_count(run->net) : 0;
}
static inline void pr_model_tensor(const PrRun *run, int i, const char **name, float **param,
                                   float **grad, size_t *n)
{
    run->arch->tensor(run->net, i, name, param, grad, n);
}
static inline bool pr_model_tensor_in_slice(const PrRun *run, int i, int v)
{
    return run->arch->in_slice(run->net, i, &run->slice[v]);
}

/* The parameter tensors of virtual stage v in model order, each with its flat offset:
 * the order of the stage's host copies (OG, LW) and of pr_rank_grad_copy. Start with
 * t = pr_stage_tensors(v, at0) and call pr_stage_tensor_next(run, &t) before each
 * tensor: it fills i (pr_model_tensor's index), param, grad, n (floats) and at (at0
 * plus the floats of the stage's tensors before it) and returns true, or false after
 * the last one, t.at then at0 plus all the stage's floats. */
typedef struct PrStageTensor {
    int v, i;
    float *param, *grad;
    size_t n, at;
} PrStageTensor;
static inline PrStageTensor pr_stage_tensors(int v, size_t at0)
{
    return (PrStageTensor){.v = v, .i = -1, .at = at0};
}
static inline bool pr_stage_tensor_next(const PrRun *run, PrStageTensor *t)
{
    t->at += t->n;
    t->n = 0;
    while (++t->i < pr_model_tensor_count(run))
        if (pr_model_tensor_in_slice(run, t->i, t->v)) {
            pr_model_tensor(run, t->i, NULL, &t->param, &t->grad, &t->n);
            return true;
        }
    return false;
}

#endif
