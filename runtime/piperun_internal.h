/* piperun_internal.h - what the runtime's own files share (not part of the API that
 * generated code sees; that is piperun.h). */
#ifndef PIPERUN_INTERNAL_H
#define PIPERUN_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "data.h"
#include "mlp.h"
#include "piperun.h"

typedef struct PrRun PrRun;

/* A message in flight on one (src, dst) channel. */
typedef struct PrNode {
    uint32_t msg;
    void *payload;       /* an io buffer (mlp) or NULL */
    double t_send;       /* ms since the run started */
    struct PrNode *next;
} PrNode;

typedef struct PrChan {
    PrNode *head, *tail;
} PrChan;

/* The queue of one copy thread (SO or SI ops of the current iteration). */
typedef struct PrCopyQ {
    uint32_t *op;        /* [nops] op indices */
    uint32_t head, tail; /* queued = tail - head */
    uint32_t done;       /* ops finished this iteration */
} PrCopyQ;

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
    size_t nvm;                /* P*V*M */
    void **in_f, **in_b;       /* [nvm] by consumer (v,m): inputs that arrived */
    void **out_f, **out_b;     /* [nvm] by producer (v,m): outputs awaiting a send */
    void **host;               /* [nvm] host copies for SO/SI */
    int64_t *host_cap;         /* [nvm] */
    int64_t live, peak;        /* live arena bytes now, measured peak */
    uint32_t *si_done;         /* [nvm] iteration stamp (iter + 1) when SI finished */
    uint32_t *lw_done;         /* [PV] iteration stamp (iter + 1) when LW finished */
    int *tokens, *targets;     /* (B,T) scratch */
    /* copy threads */
    pthread_t copy_th[2];
    int copy_started;
    PrCopyQ q[2];              /* 0: device-to-host (SO), 1: host-to-device (SI) */
    pthread_mutex_t mu;        /* guards q, live/peak, si_done */
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
};

struct PrRun {
    const PrProgram *prog;
    PrOptions opt;
    int P, PV, M;
    PrRank *rank;              /* [P] */
    int ranks_ready;           /* ranks whose mutex is initialised */
    PrChan *chan;              /* [P*P], src * P + dst */
    pthread_mutex_t mu;        /* guards chan and error */
    pthread_cond_t cv;         /* a message arrived / barrier moved */
    atomic_int failed;
    char error[256];
    /* barrier between the main thread and the ranks */
    int bar_count, bar_gen;
    /* the mlp workload */
    MlpModel *model;
    MlpSlice *slice;           /* [PV] */
    TextData data;
    size_t io_bytes;
    double *mb_loss;           /* [M] */
    /* model-state offload (OG/LW) of the mlp workload, per virtual stage v */
    bool *offloaded;           /* [PV] v has an OG: its SGD step runs in OG, not at the end */
    float **host_w;            /* [PV] host copy of v's parameters (the master weights) */
    float **host_g;            /* [PV] host copy of v's gradients (what OG moved) */
    double t_start;            /* ms, monotonic */
};

/* Milliseconds on the monotonic clock. */
double pr_now_ms(void);
/* Busy-waits ms milliseconds (synthetic op time). */
void pr_spin_ms(double ms);
/* Records the first failure (later ones are dropped), wakes every waiter. rank/op may
 * be -1 when not tied to one. */
void pr_fail(PrRun *run, int rank, int64_t op, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* "F3.1" */
void pr_op_name(char *buf, size_t n, const PrOp *o);

/* The relative bound of --check, max |g - ref| / max |ref| per tensor: 1e-5 on the CPU
 * (run_main.c, weak), 1e-4 on the GPU (piperun_cuda.c; issue 7). */
double pr_check_bound(void);
/* run_main.c: the --profile costs block. Returns 0 or -1. */
int pr_profile_write(const PrRun *run);
/* Installs the fatal-signal handler that names the rank and op, then exits 1. */
void pr_install_signals(void);
/* trace.c: writes the Chrome trace of every iteration. Returns 0 or -1 (errno). */
int pr_trace_write(const PrRun *run, const char *path);
/* synthetic.c: one op of the synthetic workload. Returns 0 or -1 (pr_fail called). */
int pr_synthetic_op(PrRank *r, const PrOp *o);
/* workload_mlp.c */
int pr_mlp_setup(PrRun *run);
void pr_mlp_teardown(PrRun *run);
int pr_mlp_op(PrRank *r, uint32_t i, const PrOp *o);
/* OG: copies v's gradients to host_g[v] and steps host_w[v] (SGD); LW: copies host_w[v]
 * back into the model's parameters. Run on the copy threads. Return 0 or -1. */
int pr_mlp_offload(PrRank *r, const PrOp *o);
int pr_mlp_load(PrRank *r, const PrOp *o);
int pr_mlp_check(PrRun *run, PrResult *res);   /* reference iteration; fills grad errors */
void pr_mlp_step(PrRun *run);
void pr_mlp_zero(PrRun *run);
double pr_mlp_reference_ms(PrRun *run);   /* mean ms per reference iteration, or -1 */

#endif
