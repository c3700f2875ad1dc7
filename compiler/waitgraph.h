/* waitgraph.h - the wait graph of all ranks (who waits for whom: docs/spec.md
 * "Dependencies" and "Time", one row of compiler/opsem.h per rule) and the `deadlock`
 * check over it. Used by the checker (check.c) and the comm lowering's check (comm.c);
 * below both, above the op index. */
#ifndef PIPEC_WAITGRAPH_H
#define PIPEC_WAITGRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "diag.h"
#include "ir.h"
#include "opindex.h"

#ifndef NONE
#define NONE UINT32_MAX
#endif

/* Why one op waits for another (an edge of the wait graph, docs/semantics.md). */
typedef enum WaitWhy {
    WAIT_STREAM, /* the previous op on the same stream of the same rank */
    WAIT_DATA,   /* a data dependency of docs/spec.md "Dependencies" */
    WAIT_MEMORY, /* an allocating op waits for a freeing op listed before it (opsem.h) */
    WAIT_DEP     /* a `dep` line */
} WaitWhy;

typedef struct Pred {
    uint32_t node;  /* the op waited for (global op number) */
    uint8_t why;    /* WaitWhy */
    uint32_t dep;   /* WAIT_DEP: index into p->deps */
} Pred;

/* The wait graph, implicit: ops are numbered rank by rank (node = off[s] + pos) and
 * their predecessors computed on demand from the op index. 18 bytes per op plus 8 per
 * dep. */
typedef struct Graph {
    const Pipeline *p;
    const OpIndex *idx;
    uint32_t N;           /* ops */
    uint32_t *off;        /* [P+1] first node of each rank */
    uint16_t *rank;       /* [N] */
    uint32_t *sprev;      /* [N] previous op on the same stream, or NONE */
    uint32_t (*mprev)[STREAM_N - 1]; /* [N] allocating ops: the last op listed before
                                      * on each other stream that frees memory, or NONE */
    uint32_t *dstart;     /* [N+1] CSR of dep predecessors */
    uint32_t *dfrom;      /* [ndeps] pred node */
    uint32_t *ddep;       /* [ndeps] index into p->deps */
    uint32_t maxpred;     /* size a Pred buffer must have */
} Graph;

/* Builds the graph; deps naming absent ops are left out (the structure check reported
 * them). Requires N < 2^32 - 1. */
void graph_build(Graph *g, const Pipeline *p, const OpIndex *idx);
void graph_free(Graph *g);

/* The ops u waits for, into buf (g->maxpred entries). With all = false, a same-rank
 * data or dep predecessor listed at or after u is left out (an `order` error, reported
 * separately), which makes every remaining cycle cross ranks. */
uint32_t graph_preds(const Graph *g, uint32_t u, Pred *buf, bool all);

static inline uint32_t graph_pos(const Graph *g, uint32_t u)
{
    return u - g->off[g->rank[u]];
}

static inline const Op *graph_op(const Graph *g, uint32_t u)
{
    return &g->p->stages[g->rank[u]].ops[graph_pos(g, u)];
}

/* Resolves a dep endpoint to its node; NONE when it names no op. */
uint32_t graph_ref(const Graph *g, OpRef r);

/* Reports `deadlock` for every cycle of the wait graph (the smallest cycle of each
 * strongly connected component, walked as a chain). Returns errors reported. */
int check_waitgraph(Diag *d, const Graph *g);

/* "stage 1 B3"-style name of node u into buf. */
char *node_name(const Graph *g, uint32_t u, char *buf, size_t n);

#endif
