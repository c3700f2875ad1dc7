/* emit_table.h - the packed op tables of generated programs (docs/runtime.md "Packed op
 * tables"): one rank's ops (runtime/piperun.h PrOp) and program (PrStep) written as a
 * C string of printable characters in runtime/prtable.h's number code, which the
 * runtime unpacks at start-up (pr_program_unpack). A table compiles in time linear in
 * its length, as any string literal, and takes about 15 characters per op: op rows
 * refer to per-rank dictionaries of the rows that repeat (costs, arena places, memory
 * amounts), and micro-batches, lines and message ids are differences. */
#ifndef PIPEC_EMIT_TABLE_H
#define PIPEC_EMIT_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "piperun.h"
#include "stream_plan.h"
#include "util.h"

/* One rank's table: its ops, its steps in order (for every op, the messages it
 * receives, the op, the messages it sends), every message's payload and the virtual
 * stage of each chunk. */
typedef struct PackRank {
    const PrOp *ops;           /* [nops]; nso_before is 0 or the SOs listed before */
    uint32_t nops;
    const PrStep *steps;       /* [nsteps] (PR_STEP_RECV* PR_STEP_OP PR_STEP_SEND*) per op */
    uint32_t nsteps;
    const uint8_t *payload;    /* [message id] PR_PAY_* */
    const uint32_t *from_op;   /* [message id] the producing op's index on its rank (a send
                                  may sit after a later op: comm.h) */
    int32_t V;
    const int32_t *vstage;     /* [V] */
} PackRank;

/* What a table holds, for the comment above it. */
typedef struct PackStats {
    uint32_t ncost, nplace, nmem;   /* dictionary rows */
    size_t nchars;                  /* characters of the table */
} PackStats;

/* Appends rank r's table to b as the lines of a C string literal ("    \"...\"\n", at
 * most 100 characters each); st (may be NULL) gets its sizes. */
void emit_pack_rank(StrBuf *b, const PackRank *r, PackStats *st);

/* The stream plan of one rank as the CUDA runtime reads it (PrRankDesc.streams;
 * docs/cuda.md "The stream plan's table"): the rank's StreamRank and the messages whose
 * send waits for one of its ops (send_after, indexed by message id). */
typedef struct PackStreams {
    const StreamRank *k;
    const uint32_t *sends;      /* [nsends] ids of the messages this rank sends */
    uint32_t nsends;
    const uint32_t *send_after; /* [message id] the op whose end the send waits for */
} PackStreams;

/* Appends the table of r to b as string-literal lines (as emit_pack_rank); *nchars
 * (may be NULL) gets its length in characters. */
void emit_pack_streams(StrBuf *b, const PackStreams *r, size_t *nchars);

#endif
