/* cpu.h - the CPU backend's own header (cpu.c, and its MPI transport
 * mpi/piperun_mpi.c): the channels between rank threads and the copy threads' queues,
 * on top of the run core (core.h). */
#ifndef PIPERUN_CPU_H
#define PIPERUN_CPU_H

#include "core.h"

/* A message in flight on one (src, dst) channel. */
typedef struct PrNode {
    uint32_t msg;
    void *payload;       /* an io buffer (a model workload's) or NULL */
    double t_send;       /* ms since the run started */
    _Atomic(struct PrNode *) next;
} PrNode;

/* The FIFO of one (src, dst) pair: a lock-free single-producer single-consumer queue
 * (only rank src's thread sends on it, only rank dst's thread receives). head is the
 * consumer's dummy node (its successor is the oldest message), tail the producer's last
 * node; both start at stub. count is the number of messages queued: a receiver spins on
 * it, and it pairs with PrRank.sleeping for the wake-up. */
typedef struct PrChan {
    PrNode *head, *tail;
    PrNode stub;
    atomic_uint count;
} PrChan;

/* The queue of one copy thread (SO/OG or SI/LW ops of the current iteration): PrRank.q. */
typedef struct PrCopyQ {
    uint32_t *op;        /* [nops] op indices */
    uint32_t head, tail; /* queued = tail - head */
    uint32_t done;       /* ops finished this iteration */
    pthread_cond_t cv;   /* (with PrRank.mu) its copy thread waits here for an op: an
                            op queued wakes that thread only */
} PrCopyQ;

/* The CPU backend's state of one rank (PrRank.cpu_rank): the host copies of SO/SI and the
 * copy threads with their queues. Made by the backend's rank set-up, freed by its
 * teardown; PrRank.mu guards the queues and si_done. */
typedef struct PrCpuRank {
    void **host;               /* [nvm] host copies for SO/SI */
    int64_t *host_cap;         /* [nvm] bytes */
    uint32_t *si_done;         /* [nvm] iteration stamp (iter + 1) when SI finished */
    uint32_t *lw_done;         /* [PV] iteration stamp (iter + 1) when LW finished */
    pthread_t copy_th[2];
    int copy_started;
    PrCopyQ *q;                /* [2] 0: device-to-host (SO), 1: host-to-device (SI) */
} PrCpuRank;

/* A host link that N = host_link_ranks ranks share (cpu.c). */
typedef struct PrLink PrLink;

/* The CPU backend's state of a run (PrRun.cpu_run): the channels between the rank
 * threads and the shared host links of the synthetic replay. Made by the backend's
 * set-up, freed by its teardown. */
typedef struct PrCpuRun {
    PrChan *chan;              /* [P*P], src * P + dst */
    PrLink *link;              /* [nlinks]: ranks s*N .. s*N+N-1 share link s; NULL when
                                  every rank has its own */
    int nlinks;
} PrCpuRun;

/* How long a waiter spins before it blocks, ms (0 when the ranks outnumber the CPUs). */
double pr_spin_budget_ms(const PrRun *run);
/* Queues node on the channel src -> dst and wakes dst's rank thread if it sleeps. */
void pr_chan_put(PrRun *run, int src, int dst, PrNode *node);
/* Waits until rank r's copy threads have run every SO/SI/OG/LW queued this iteration.
 * Returns 0, or -1 when the run failed or the watchdog fired. */
int pr_drain_copies(PrRank *r);

#endif
