/* waitgraph.h - the wait graph of all ranks (who waits for whom: docs/spec.md
 * "Dependencies" and "Time", one row of compiler/ir/opsem.h per rule) and the `deadlock`
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

/* Why one op waits for another (an edge of the wait graph, docs/semantics.md). */
typedef enum WaitWhy {
    WAIT_STREAM, /* the previous op on the same stream of the same rank */
    WAIT_DATA,   /* a data dependency of docs/spec.md "Dependencies" */
    WAIT_MEMORY, /* an allocating op waits for a freeing op listed before it (opsem.h) */
    WAIT_DEP     /* a `dep` line */
} WaitWhy;

/* One wait: the op waited for and why. 8 bytes. */
typedef struct Pred {
    uint32_t node;     /* the op waited for (global op number) */
    uint32_t why : 2;  /* WaitWhy */
    uint32_t dep : 30; /* WAIT_DEP: index into p->deps (fewer than 2^30 deps) */
} Pred;

/* The wait graph: ops are numbered rank by rank (node = off[s] + pos); the
 * predecessors of every op are computed once, in graph_build, into one CSR array
 * (node u's are pred[pstart[u] .. pstart[u + 1]), in the order graph_preds gives them),
 * which the order check, the cycle search and the comm lowering all read. 10 bytes per
 * op plus 8 per wait. */
typedef struct Graph {
    const Pipeline *p;
    const OpIndex *idx;
    uint32_t N;           /* ops */
    uint32_t *off;        /* [P+1] first node of each rank */
    uint16_t *rank;       /* [N] */
    uint32_t *pstart;     /* [N+1] CSR of predecessors, every wait (all = true) */
    Pred *pred;           /* [pstart[N]] */
    uint32_t ncross;      /* waits across ranks (the comm lowering's messages) */
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

/* True when the wait of u for w is one graph_preds(all = false) leaves out: w on u's
 * rank and listed at or after u (only data and dep waits can be). */
static inline bool graph_left_out(const Graph *g, uint32_t u, uint32_t w)
{
    return g->rank[w] == g->rank[u] && w >= u;
}

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
