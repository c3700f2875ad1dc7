/* piperun.h - libpiperun: the whole API that generated per-rank programs call
 * (docs/runtime.md).
 *
 * A generated program is constant data: per rank a packed table (PrRankDesc.table, a
 * string of printable characters, docs/runtime.md "Packed op tables") that holds its
 * ops and its program, i.e. the order of its ops with the messages received before and
 * sent after each, as this loop runs them (pr_run_steps):
 *
 *     pr_recv(r, 0, 0);   // msg 0 from rank 0: F0 -> F0
 *     pr_op(r, 0);        // F0
 *     pr_send(r, 2, 1);   // msg 1 to rank 2: F0 -> F0
 *     ...
 *
 * and main.c's tables of ranks and virtual stages with the model shape. pr_main unpacks
 * the tables (pr_program_unpack) into the in-memory form below: one PrOp per op of each
 * rank, one PrMsg per cross-rank message, one PrStep per step of each rank's program.
 * A program built in memory (tests) may give ops, msgs and run directly instead.
 *
 * main.c hands the tables to pr_main(), which parses the run options, starts one thread
 * per rank (plus a device-to-host and a host-to-device copy thread per rank for SO/SI),
 * runs the iterations and prints the summary.
 *
 * Legend: P = ranks (stages), M = micro-batches per iteration, V = chunks per rank,
 * P*V virtual stages; (v,m) = virtual stage v, micro-batch m. Sizes are bytes, times
 * milliseconds unless a name says otherwise.
 *
 * Semantics (docs/spec.md "Dependencies", "Memory", "Time"; docs/semantics.md for the
 * messages):
 * - F/B/W/R run on the rank's thread in program order. SO and OG are queued to the
 *   rank's device-to-host copy thread, SI and LW to its host-to-device copy thread; each
 *   copy thread runs its ops in program order, concurrently with compute. OG is issued
 *   after every B/W of its chunk (program order); F of a chunk with an LW waits for it.
 * - An op that allocates arena memory (F, R, SI) first waits for every SO listed before
 *   it on its rank (the SO's region may be what it reuses); B and R of (v,m) wait for
 *   SI(v,m); SI(v,m) waits for SO(v,m).
 * - Each cross-rank dependency is one message (PrMsg) from the producer's rank to the
 *   consumer's rank, sent after the producing op and received before the consuming op,
 *   matched in issue order per (sender, receiver) pair. A send completes when the
 *   matching receive is posted (PR_SEND_RENDEZVOUS, NCCL-like) or at once
 *   (PR_SEND_EAGER), as the program's send_mode says.
 * - Failures (an op error, a failed allocation, a fatal signal, a receive stuck past the
 *   watchdog timeout, a peer rank that died or stopped: no CPU progress or heartbeat
 *   for 6 s, checked twice a second by the waiting side) stop every rank: every
 *   blocking call returns -1, the generated functions return through PR_CHECK, and the
 *   run exits non-zero with one message naming the rank and the op, after printing
 *   each rank's last 16 ops (the flight recorder).
 *
 * Thread-safety: every pr_* call takes the calling rank's PrRank and must be made from
 * that rank's thread.
 */
#ifndef PIPERUN_H
#define PIPERUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "region.h"

#define PIPERUN_ABI 8

/* Op kinds, in the order of the compiler's OP_KINDS. PR_OG / PR_LW: model-state
 * offload of one chunk (TPipe's T-Offload; docs/semantics.md "Model-state offload"):
 * OG copies the chunk's gradients to the host and runs its optimizer step there (on
 * the device-to-host copy thread), LW copies the updated weights back (host-to-device
 * copy thread). Both have mb 0. */
enum { PR_F, PR_B, PR_W, PR_R, PR_SO, PR_SI, PR_OG, PR_LW, PR_NKINDS };

/* Workloads: the real model of runtime/mlp.h, or cost-model replay. */
enum { PR_MLP, PR_SYNTHETIC, PR_NWORKLOADS };

/* PrOp.flags: facts about the op's (v,m) that change what the op does. */
enum {
    PR_HAS_R = 1u,   /* an R(v,m) exists: F keeps only the checkpoint */
    PR_HAS_W = 2u,   /* a W(v,m) exists: B computes input gradients only */
    PR_HAS_SI = 4u,  /* an SO/SI pair exists for (v,m) */
    PR_HAS_LW = 8u,  /* this op waits for its chunk's LW of this iteration (F) */
    PR_WAIT_SI = 16u, /* this op waits for the SI of its (v,m) (B, R) */
};

/* Message payloads. */
enum {
    PR_PAY_TOKEN,    /* a `dep` edge or another ordering-only dependency: no data */
    PR_PAY_ACT,      /* F(v,m) -> F(v+1,m): the hidden state (mlp: B*T*C floats) */
    PR_PAY_GRAD,     /* B(v+1,m) -> B(v,m): its gradient (same size) */
};

/* How pr_send completes. */
/* The long options of a generated program (pr_main, run_main.c), which `pipec run`
 * passes through to it as given (compiler/commands/cmd_emit.c): one list for both, as
 * initialisers of getopt_long's struct option (the including file includes getopt.h). */
enum {
    PR_OPT_ITERS = 256, PR_OPT_CHECK, PR_OPT_JSON, PR_OPT_TRACE, PR_OPT_WORKLOAD, PR_OPT_DATA,
    PR_OPT_SCALE, PR_OPT_TIMEOUT, PR_OPT_PROFILE, PR_OPT_LR, PR_OPT_SEED, PR_OPT_QUIET,
    PR_OPT_REF,
    PR_OPT_END /* the first value free for a user's own options */
};
#define PR_PROGRAM_LONGOPTS                                   \
    {"iters", required_argument, NULL, PR_OPT_ITERS},         \
    {"check", no_argument, NULL, PR_OPT_CHECK},               \
    {"json", no_argument, NULL, PR_OPT_JSON},                 \
    {"trace", required_argument, NULL, PR_OPT_TRACE},         \
    {"workload", required_argument, NULL, PR_OPT_WORKLOAD},   \
    {"data", required_argument, NULL, PR_OPT_DATA},           \
    {"time-scale", required_argument, NULL, PR_OPT_SCALE},    \
    {"timeout", required_argument, NULL, PR_OPT_TIMEOUT},     \
    {"profile", no_argument, NULL, PR_OPT_PROFILE},           \
    {"lr", required_argument, NULL, PR_OPT_LR},               \
    {"seed", required_argument, NULL, PR_OPT_SEED},           \
    {"quiet", no_argument, NULL, PR_OPT_QUIET},               \
    {"reference", no_argument, NULL, PR_OPT_REF}

enum { PR_SEND_RENDEZVOUS, PR_SEND_EAGER };

/* One op of a rank's list, in program order. */
typedef struct PrOp {
    uint8_t kind;          /* PR_F .. PR_LW */
    uint8_t chunk;         /* 0..V-1 */
    uint16_t flags;        /* PR_HAS_* of this op's (v,m) */
    int32_t vstage;        /* v = the virtual stage of (rank, chunk) */
    int32_t mb;            /* m, 0..M-1 */
    uint32_t nso_before;   /* SOs listed before this op that must end before it starts:
                              the count listed before it when it allocates (F, R, SI, LW:
                              memory order, compiler/ir/opsem.h), else 0 */
    int64_t held[PR_NWORKLOADS]; /* bytes of the region's prefix [0, held) the op holds
                                    (compiler/plans/arena_plan.h ArenaRank.held): SO/SI: moved;
                                    F: allocated; R: the whole region; B: kept for W;
                                    otherwise 0 */
    double cost_ms;        /* cost-model duration (the synthetic workload's busy time;
                              OG: grads / host_bw + opt_host, LW: wload / host_bw) */
    double cost_bytes;     /* cost-model bytes the op allocates or moves (unscaled) */
    double link_ms;        /* the part of cost_ms spent on the host link at full host_bw
                              (SO, SI, LW: all of it; OG: all but opt_host), 0 for the
                              compute kinds; shared with the other ranks of the link
                              (PrProgram.host_link_ranks, docs/runtime.md) */
    int32_t line;          /* source line of the op (messages), 0 when unknown */
    int64_t at[PR_NWORKLOADS][PR_PIECES]; /* arena byte offset (64-aligned) of piece k of
                                    the (v,m) region this op uses (runtime/region.h: the
                                    region's bytes [from[k], from[k+1]) of its PrVstage,
                                    per workload's plan); F/R/B/W/SO: where the piece is,
                                    SI: where it comes back to; -1 where the op's region
                                    has none of piece k (or the piece is empty, or the op
                                    has no region) */
    int64_t mem_alloc[PR_NWORKLOADS]; /* bytes this op allocates at its start, and */
    int64_t mem_free[PR_NWORKLOADS];  /* bytes it frees at its end: the compiler's memory
                                         walk (opsem.h), which the runtime's live-byte
                                         count follows without a rule of its own */
} PrOp;

/* One cross-rank message: the dependency from op `from` on rank src to op `to` on rank
 * dst. Message ids are indices into PrProgram.msgs. */
typedef struct PrMsg {
    int32_t src, dst;          /* ranks */
    uint8_t from_kind, to_kind;
    uint8_t payload;           /* PR_PAY_* */
    int32_t from_v, from_mb;   /* the producing op's (v,m) */
    int32_t to_v, to_mb;       /* the consuming op's (v,m) */
} PrMsg;

struct PrRank;
typedef struct PrRank PrRank;

/* One step of a rank's program: run op idx, or receive or send message idx. */
enum { PR_STEP_OP, PR_STEP_RECV, PR_STEP_SEND };
typedef struct PrStep {
    uint8_t what;              /* PR_STEP_* */
    uint32_t idx;              /* op index on the rank, or message id */
} PrStep;

/* One rank of the program. */
typedef struct PrRankDesc {
    int (*run)(PrRank *r);     /* one iteration: pr_run_steps (or a function of a program
                                  built in memory) */
    const PrOp *ops;           /* [nops] */
    uint32_t nops;
    int64_t arena_bytes[PR_NWORKLOADS];     /* planned arena size per workload */
    int64_t peak_live_bytes[PR_NWORKLOADS]; /* planned peak of live region bytes */
    double host_bw;            /* cost-model swap bandwidth, bytes/s (0 = unlimited) */
    double p2p_ms;             /* cost-model time added to each received dependency */
    int64_t workspace_bytes[PR_NWORKLOADS]; /* the workspace kept above the arena, bytes
                                  (compiler/plans/arena_plan.h arena_workspace): mlp, gpt,
                                  llama: the temporaries an F that keeps only its
                                  checkpoint runs in (mlp_forward_split, tf_forward_split),
                                  0 when no F of the rank has an R; synthetic: the cost
                                  model's `work`, scaled as its arena. 0 in a table
                                  built by hand: F then allocates its temporaries */
    const char *table;         /* the packed ops and steps (docs/runtime.md "Packed op
                                  tables"), which pr_program_unpack turns into ops, steps
                                  and run; NULL when those are given */
    const PrStep *steps;       /* [nsteps] the program that pr_run_steps runs */
    uint32_t nsteps;
    const char *streams;       /* the rank's stream plan for the CUDA backend, packed
                                  (plan/stream_plan.h; docs/cuda.md "The stream plan's
                                  table"), which it enqueues from; NULL from `pipec emit`
                                  without --backend cuda (the CPU backends ignore it) */
} PrRankDesc;

/* One virtual stage: its owner and, for the mlp workload, the planned region sizes. */
typedef struct PrVstage {
    int32_t rank, chunk;
    int32_t layers;            /* mlp blocks on this virtual stage */
    int32_t per_layer;         /* 1: its R and RO rebuild one layer at a time inside the
                                  backward (layer-granular recomputation; the gpt/llama
                                  workloads' layout, runtime/tf_layout.h), else 0 */
    int64_t act, ckpt, wact;   /* planned mlp region bytes (checked against runtime/mlp.h
                                  at start-up) */
    int64_t from[PR_NWORKLOADS][PR_PIECES + 1]; /* the piece boundaries of this virtual
                                  stage's region in each workload's plan, bytes
                                  (runtime/region.h pr_region_cuts over the sizes planned:
                                  from[w][0] = 0, from[w][PR_PIECES] = the region's act);
                                  the mlp and gpt/llama workloads check from[PR_MLP]
                                  against their own layout at start-up */
} PrVstage;

/* The whole generated program: constant tables emitted by `pipec emit`. */
typedef struct PrProgram {
    int abi;                   /* PIPERUN_ABI */
    const char *name;          /* pipeline name */
    const char *source;        /* source file */
    const char *version;       /* pipec version that generated it */
    int32_t P, M, V;
    int send_mode;             /* PR_SEND_* */
    const PrRankDesc *ranks;   /* [P] */
    const PrVstage *vstages;   /* [P*V] */
    const PrMsg *msgs;         /* [nmsgs]; NULL in packed programs (pr_program_unpack
                                  builds it from the ranks' tables) */
    uint32_t nmsgs;
    /* The model's shape from the pipeline's `model`, whatever its arch (0 when there is
     * none): vocabulary (tokens), hidden size (floats per token), layers, sequence
     * length (tokens) and micro-batch size (sequences). */
    int model_vocab, model_hidden, model_layers, model_seq, model_batch;
    const char *model_unavailable; /* why --workload mlp (the model) cannot run, or NULL */
    double synthetic_scale;    /* synthetic arena bytes = cost-model bytes / this (>= 1) */
    double sim_ms;             /* simulated iteration time under the cost model, ms; < 0
                                  when unknown */
    int32_t host_link_ranks;   /* consecutive ranks sharing one host link (0 or 1: every
                                  rank its own); the synthetic replay shares its bandwidth
                                  among the transfers in flight (docs/runtime.md) */
    /* The model's arch: 0 mlp (runtime/mlp.h), else a transformer of runtime/
     * transformer.h (1 gpt, 2 llama) with these attention and MLP widths (the model_*
     * fields above give the rest of its shape, PrVstage its region sizes). */
    int model_arch, model_heads, model_kv_heads, model_ffn;
    /* Data parallelism (docs/runtime.md "Data parallelism"): D replicas of the whole
     * pipeline (0 or 1: one), each training on its own shard of the global batch, their
     * gradients reduced per stage before the optimizer step; zero >= 1 shards the
     * optimizer step over the replicas (ZeRO stage 1), 0 steps every parameter on every
     * replica. */
    int32_t data_parallel, zero;
    /* The folder holding README.md and docs/ of the pipec that generated the program
     * (its source tree or share/doc/pipec of its installation), whose pages are the
     * model workload's default training text (runtime/data.h data_load_default,
     * docs/runtime.md "Training text"); NULL: none was found. */
    const char *data_dir;
} PrProgram;

/* The rank rule of data parallelism, in one place (the code generator's rank count,
 * the launchers, the runtime): a program of P stages and D replicas runs P x D ranks,
 * numbered replica-major: rank = replica * P + stage. Replica d trains on global
 * micro-batches d*M .. d*M + M-1 (its data shard; M = micro-batches per iteration of one
 * replica), and in a sharded step (zero >= 1) updates floats [lo, hi) = [n*d/D,
 * n*(d+1)/D) of its stage's n parameter floats. */
static inline int32_t pr_dp_degree(const PrProgram *g)
{
    return g->data_parallel > 1 ? g->data_parallel : 1;
}
static inline int64_t pr_dp_nranks(int32_t P, int32_t D)
{
    return (int64_t)P * (D > 1 ? D : 1);
}
static inline int32_t pr_dp_rank(int32_t P, int32_t stage, int32_t replica)
{
    return replica * P + stage;
}
static inline int32_t pr_dp_stage(int32_t P, int32_t rank)
{
    return rank % P;
}
static inline int32_t pr_dp_replica(int32_t P, int32_t rank)
{
    return rank / P;
}
static inline int32_t pr_dp_microbatch(int32_t M, int32_t replica, int32_t m)
{
    return replica * M + m;
}
static inline void pr_dp_shard(size_t n, int32_t D, int32_t replica, size_t *lo, size_t *hi)
{
    *lo = n * (size_t)replica / (size_t)D;
    *hi = n * (size_t)(replica + 1) / (size_t)D;
}

/* Options of one run (what `pipec run` passes on the program's command line). */
typedef struct PrOptions {
    int workload;              /* PR_MLP or PR_SYNTHETIC */
    int iters;                 /* iterations, >= 1 */
    bool check;                /* compare iteration 1's gradients with the reference */
    bool json;                 /* print the summary as one JSON object */
    bool quiet;                /* no per-iteration lines */
    bool profile;              /* measure op costs and print a `costs` block */
    const char *profile_out;   /* write the costs block there instead of stdout */
    const char *trace;         /* write a Chrome trace of what ran there, or NULL */
    const char *data;          /* text file for the mlp workload (NULL: the default) */
    double time_scale;         /* synthetic: busy time = cost-model time * this */
    double timeout_s;          /* watchdog: a receive or wait stuck this long fails */
    double lr;                 /* SGD learning rate (mlp) */
    uint64_t seed;             /* model initialisation and data sampling */
    int threads_blas;          /* OpenBLAS threads (1 when ranks compute at once) */
    bool reference;            /* also time the sequential reference trainer (bench) */
} PrOptions;

/* Sets the defaults: mlp when available else synthetic, 1 iteration, time scale 1,
 * timeout 30 s, lr 0.05, seed 1. */
void pr_options_default(PrOptions *o, const PrProgram *prog);

/* Measured results of a run. Arrays are owned by the result (pr_result_free). */
typedef struct PrResult {
    int iters;
    double *loss;              /* [iters] mean loss (mlp; NAN for synthetic) */
    double *iter_ms;           /* [iters] wall time of each iteration */
    double *busy_ms;           /* [P] compute time per rank, summed over iterations */
    int64_t *peak_arena;       /* [P] peak live arena bytes measured */
    double max_grad_err;       /* --check: max relative gradient error; -1 when unchecked */
    double max_weight_err;     /* --check: max relative error of the weights after
                                  iteration 1's step (the ranks this process steps on
                                  the host); -1 when not compared */
    int ngrad;                 /* --check: tensors compared */
    char (*grad_name)[32];     /* [ngrad] */
    double *grad_err;          /* [ngrad] */
    double ref_ms;             /* --reference: mean time of one reference iteration +
                                  optimizer step, same data; -1 when not measured */
    char error[256];           /* the failure message, "" when the run succeeded */
    bool error_shown;          /* error was printed to stderr when it was recorded */
} PrResult;
void pr_result_free(PrResult *res);

/* Runs prog with options o; fills res (may be NULL). Returns 0, or 1 when a rank
 * failed (res->error says which rank and op) or the options do not fit the program. */
int pr_run(const PrProgram *prog, const PrOptions *o, PrResult *res);

/* The generated main(): parses the options (--iters N --check --json --trace FILE
 * --workload mlp|synthetic --data FILE --time-scale X --timeout S --profile [-o FILE]
 * --lr X --seed N --quiet), runs, prints. Returns the exit status: 0 ok, 1 failure,
 * 2 usage. */
int pr_main(const PrProgram *prog, int argc, char **argv);

/* Unpacks a program whose ranks give packed tables (PrRankDesc.table, docs/runtime.md
 * "Packed op tables") into *out: a copy of prog with every rank's ops, steps and run
 * (pr_run_steps) and the message table filled in; a program without tables is copied
 * as it is. Returns 0, or -1 with the reason in why (a table that is corrupt or does
 * not fit the program, out of memory). Free *out with pr_program_free. */
int pr_program_unpack(const PrProgram *prog, PrProgram **out, char *why, size_t why_n);
void pr_program_free(PrProgram *prog);

/* Runs one iteration of rank r's program, r's PrRankDesc.steps in order. Returns 0, or
 * -1 once the run has failed. */
int pr_run_steps(PrRank *r);

/* The calls generated code makes. Each returns 0, or -1 once the run has failed (this
 * rank's error, or another rank's): the caller returns at once (PR_CHECK). */
int pr_op(PrRank *r, uint32_t op);                  /* run op `op` of this rank */
int pr_send(PrRank *r, int32_t peer, uint32_t msg); /* send message msg to rank peer */
int pr_recv(PrRank *r, int32_t peer, uint32_t msg); /* receive message msg from peer */

#define PR_CHECK(call) do { if ((call) != 0) return -1; } while (0)

/* Testing aid (docs/runtime.md): the environment variable
 *     PIPERUN_FAULT=rank:op:what
 * injects a fault on rank `rank` at its op index `op`: what = fail (the op reports an
 * error), segv (a SIGSEGV), alloc (a failed allocation), drop (the op's sends after it
 * are skipped, so the receiver is stuck until the watchdog fires), stop (the rank's
 * thread stops without using CPU, like a process under SIGSTOP), die (the thread ends
 * without a word, like a killed process). */

#endif
