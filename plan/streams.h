/* streams.h - the stream plan of the CUDA backend: for every op of every rank, the
 * stream it runs on and the ops whose end it waits for (docs/cuda.md "The stream
 * plan"). Computed once, from the op lists and the messages of the comm plan; the CUDA
 * runtime enqueues exactly from it (runtime/cuda/piperun_cuda.c makes no ordering
 * decision of its own) and `pipec emit --backend cuda` writes it to DIR/streams.json.
 *
 * This header is plain C data (no IR: plan/opkinds.h only), included by both sides.
 * The compiler builds the plan (compiler/plans/stream_plan.h, over the op table); the code
 * generator writes the plan into the program as one packed table per rank
 * (PR_STREAMS_VERSION below, docs/cuda.md "The stream plan's table"), which the CUDA
 * runtime reads at start-up (runtime/cuda/cu_host.h cu_stream_plan) instead of
 * computing it: the runtime links no compiler file. The compiler's adapter, the JSON
 * writer and the verifier are in compiler/generation/stream_check.h.
 *
 * The waits, each only when the op it names is listed earlier on the same rank and runs
 * on another stream (ops on one stream run in list order, so a wait on a same-stream
 * op is implied, and of several waits on one stream only the latest is kept):
 *   1. dependencies: the op kind table's data dependencies (opsem.h op_sem[].wait,
 *      docs/spec.md "Dependencies": B on F, R and SI of its (v,m), R on F and SI, SO on F,
 *      SI on SO, W on B, F on its chunk's LW; waits_last_bw: OG on the last B/W of its
 *      chunk) whose op is on the same rank;
 *   2. memory order (docs/spec.md "Time"): an op the table marks MEM_ALLOC (F, R, SI, LW)
 *      waits for the last op listed before it that the table marks MEM_FREE (B, W, SO)
 *      on each other stream: list order is memory order, and the arena plan may give it
 *      what those ops freed (finding 1 of the CUDA review: an SI that waited only for the
 *      last SO could land in a region a listed-earlier B still read);
 *   3. the bytes: an op of (v,m) waits for the op of (v,m) listed right before it (an SO
 *      after an R reads what R rebuilt, not only what F wrote), a chunk-wide op (OG, LW)
 *      for the chunk-wide op of its virtual stage listed before it (OG writes the host
 *      weights LW reads);
 *   4. messages: the send of a message waits for the end of its producing op (whatever
 *      stream that op runs on: an SO or OG too); the consuming op's stream (an SI or LW
 *      too) waits for its receive.
 * Streams come from the table (op_sem[].stream). */
#ifndef PIPEC_STREAMS_H
#define PIPEC_STREAMS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "opkinds.h"

#define SP_NONE UINT32_MAX

/* One op as the plan sees it. */
typedef struct SpOp {
    uint8_t kind;      /* OpKind (compiler/ir/ir.h): only the compiler builds the input */
    int32_t vstage;    /* v, 0..PV-1 */
    int32_t mb;        /* m, 0..M-1 (0 for OG/LW) */
} SpOp;

/* One cross-rank message: producer op src_pos on rank src, consumer dst_pos on dst. */
typedef struct SpMsg {
    uint32_t src, src_pos, dst, dst_pos;
} SpMsg;

/* The plan's input: P ranks, their op lists, the messages. */
typedef struct StreamIn {
    uint32_t P;
    int32_t PV, M;
    const SpOp *const *ops;   /* [P] -> [nops[r]] in list order */
    const uint32_t *nops;     /* [P] */
    const SpMsg *msgs;        /* [nmsgs] */
    uint32_t nmsgs;
} StreamIn;

/* The plan of one rank. Op i waits for waits[wstart[i] .. wstart[i+1]) (ascending op
 * indices of this rank, each on another stream, each listed before i) and for the
 * receives of recvs[rstart[i] .. rstart[i+1]) (message indices whose consumer is i). */
typedef struct StreamRank {
    uint32_t nops;
    uint8_t *stream;   /* [nops] Stream (plan/opkinds.h) */
    uint32_t *wstart;  /* [nops + 1] */
    uint32_t *waits;
    uint32_t *rstart;  /* [nops + 1] */
    uint32_t *recvs;
} StreamRank;

typedef struct StreamPlan {
    uint32_t P;
    StreamRank *rank;      /* [P] */
    uint32_t nmsgs;
    uint32_t *send_after;  /* [nmsgs] op on the sender whose end the send waits for */
} StreamPlan;

/* The format version of a rank's packed stream-plan table (PrRankDesc.streams, in
 * runtime/prtable.h's number code; docs/cuda.md "The stream plan's table"). */
#define PR_STREAMS_VERSION 1

/* Frees a plan built by stream_plan or read by cu_stream_plan (either side: here so
 * that the runtime needs no compiler file). NULL is a no-op. */
static inline void stream_plan_free(StreamPlan *sp)
{
    if (!sp)
        return;
    for (uint32_t r = 0; sp->rank && r < sp->P; r++) {
        StreamRank *k = &sp->rank[r];
        free(k->stream);
        free(k->wstart);
        free(k->waits);
        free(k->rstart);
        free(k->recvs);
    }
    free(sp->rank);
    free(sp->send_after);
    free(sp);
}

#endif
