/* comm.h - the send/recv lowering of cross-rank dependencies (docs/semantics.md,
 * "Communication"). The checker verifies exactly this plan and the code generator
 * emits exactly it, so the two agree by construction.
 *
 * The model. Every cross-rank dependency (a data dependency of docs/spec.md "Dependencies" or a `dep`
 * line whose two ops live on different ranks) is one point-to-point message from the
 * producer's rank to the consumer's rank. Messages on each ordered pair (src, dst)
 * match in issue order (FIFO, no tags), as NCCL point-to-point does.
 *  - recv: blocking, on the consumer's rank right before the consuming op; several
 *    recvs before one op are ordered by (src rank, producer position).
 *  - send: non-blocking (posted, its completion awaited at the end of the iteration:
 *    an isend, or a per-peer send stream with NCCL), placed on the producer's rank
 *    after the producing op, in the receiver's recv order: the send of the k-th
 *    message (src -> dst) sits after both its producing op and the send of message
 *    k-1, so sends always match the receiver's order and can never be mismatched.
 * With this lowering a schedule hangs only if each rank's whole list order plus the
 * messages has a cycle; comm_simulate() finds it in linear time. */
#ifndef PIPEC_COMM_H
#define PIPEC_COMM_H

#include <stdbool.h>
#include <stdint.h>

#include "diag.h"
#include "ir.h"
#include "waitgraph.h"

typedef enum CommKind { COMM_RECV = 0, COMM_SEND = 1 } CommKind;

/* One message: a cross-rank dependency, producer op -> consumer op. */
typedef struct CommMsg {
    uint32_t src, src_pos;  /* producer: rank and index in its op list */
    uint32_t dst, dst_pos;  /* consumer: rank and index in its op list */
    uint32_t seq;           /* index among the messages of (src, dst), matching order */
    uint8_t sync;           /* 1: from a `dep` line (a token, no payload); 0: data
                             * (F: the activation of the producer's (v,m); B: the input
                             * gradient of the producer's (v,m)) */
    Loc loc;                /* the `dep` line for sync messages, else LOC_NONE */
} CommMsg;

/* One comm call in a rank's program. */
typedef struct CommItem {
    uint8_t kind;   /* CommKind */
    uint32_t peer;  /* the other rank */
    uint32_t msg;   /* index into CommPlan.msgs */
    uint32_t pos;   /* recv: right before op pos; send: right after op pos */
} CommItem;

/* The lowering of one pipeline. Rank r's calls, in program order, are
 * items[start[r] .. start[r+1]): sorted by (pos, recvs before sends). Interleaved with
 * the ops, rank r runs: for each op i: its recvs (pos == i), op i, its sends (pos == i). */
typedef struct CommPlan {
    uint32_t P;
    CommMsg *msgs;
    uint32_t nmsgs;
    CommItem *items;   /* 2 * nmsgs */
    uint32_t *start;   /* [P + 1] */
} CommPlan;

/* Builds the lowering. Needs every op exactly once (the structure check passed);
 * dependencies on absent ops are skipped. O(ops + msgs log msgs). */
CommPlan *comm_plan(const Pipeline *p);

void comm_plan_free(CommPlan *cp);

/* How sends behave in comm_simulate. */
typedef enum CommMode {
    COMM_EAGER,      /* the lowering above: sends never block */
    COMM_RENDEZVOUS  /* a send blocks until the receiver posts the matching recv
                      * (plain blocking NCCL send on the compute stream); used to show
                      * why the lowering does not do that */
} CommMode;

/* Result of running every rank's program (ops in list order, comm calls as planned). */
typedef struct CommHang {
    bool hung;            /* some rank cannot finish */
    uint32_t nblocked;    /* ranks blocked */
    /* One blocked rank and the call it is blocked in (the first rank, by number, that
     * is blocked); peer_pos is where the peer is stuck (its next op, or its op count
     * when it finished). */
    uint32_t rank, item;  /* item: index into CommPlan.items */
    uint32_t peer_item;   /* the call the peer is blocked in, UINT32_MAX if finished */
} CommHang;

/* Simulates the per-rank programs under mode: linear in ops + messages. Same-rank
 * stream parallelism is ignored on purpose: a rank's host program issues its list in
 * order, so a blocking call stops everything listed after it. */
CommHang comm_simulate(const Pipeline *p, const CommPlan *cp, CommMode mode);

/* Whether comm_simulate of the lowering of g (COMM_EAGER) hangs, found without
 * building the plan: from each rank's progress and, per message, the op after which
 * its send is placed. Linear in ops + messages. */
bool comm_hangs(const Graph *g);

/* Runs the send/recv lowering over the wait graph and reports a hang as `deadlock`
 * (naming both blocked ranks and the send each waits for). Returns errors reported. */
int check_comm(Diag *d, const Pipeline *p, const Graph *g);

#endif
