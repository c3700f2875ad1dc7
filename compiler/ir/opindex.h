/* opindex.h - the op index, below every consumer of the IR that looks ops up by
 * identity (the checker, the memory walk, the wait graph, the comm lowering, the
 * simulator, the passes). Depends only on ir.h. */
#ifndef PIPEC_OPINDEX_H
#define PIPEC_OPINDEX_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"

/* No op: what an op index, a position or a wait holds where there is none. */
#define NONE UINT32_MAX

/* The op index: for every (kind, virtual stage, micro-batch) the rank and position of
 * the op in that rank's list, built once in O(ops) time and memory and shared by the
 * checker, the memory walk, the comm lowering, the simulator and the passes.
 *
 * Dense tables indexed by (kind, v, m) when P*V*M is at most a small multiple of the
 * op count (every complete schedule), else a sorted array searched in O(log ops).
 * Ops with a kind, chunk or micro-batch out of range are not indexed. When an op
 * appears twice, the index keeps the first occurrence (ranks in order, then list
 * order). The index is a snapshot: rebuild it after changing the IR. */
typedef struct OpIndex OpIndex;

/* A sparse index's entry (opindex.c). */
typedef struct IdxEnt IdxEnt;

/* The index's layout is here only so that opindex_find's dense lookup (every complete
 * schedule, and the hot path of the checker, the wait graph and the simulator) is
 * inlined; the fields are the index's own: read them through the functions below. */
struct OpIndex {
    int32_t P, V, PV;
    uint32_t M;
    bool vshape;       /* placement, to find the owner of v */
    bool dense;        /* the dense tables (else the sorted array) */
    uint32_t *kt[OP_NKINDS]; /* dense: [PV][M] position, or UINT32_MAX, per kind; NULL
                              * for a kind no op has (most schedules use two or three) */
    IdxEnt *ents;      /* sparse: sorted by key, one per key */
    uint64_t nents;
    uint64_t count;
};

OpIndex *opindex_build(const Pipeline *p);

/* opindex_find's path for a sparse index (a binary search); x->dense is false and
 * (kind, v, mb) in range. */
bool opindex_find_sparse(const OpIndex *x, OpKind kind, int32_t v, uint32_t mb,
                         int32_t *rank, uint32_t *pos);

/* The rank that owns virtual stage v (ir_owner of the indexed pipeline's placement). */
static inline int32_t opindex_owner(const OpIndex *x, int32_t v)
{
    int32_t c = v / x->P, r = v % x->P;
    return (x->vshape && (c & 1)) ? x->P - 1 - r : r;
}

/* Finds op (kind, v, mb). Returns true and sets *rank and *pos (index into
 * p->stages[*rank].ops) when present; false when absent or out of range. Either
 * output pointer may be NULL. */
static inline bool opindex_find(const OpIndex *x, OpKind kind, int32_t v, uint32_t mb,
                                int32_t *rank, uint32_t *pos)
{
    if ((unsigned)kind >= OP_NKINDS || v < 0 || v >= x->PV || mb >= x->M)
        return false;
    if (!x->dense)
        return opindex_find_sparse(x, kind, v, mb, rank, pos);
    const uint32_t *t = x->kt[kind];
    uint32_t at;
    if (!t || (at = t[(uint64_t)v * x->M + mb]) == UINT32_MAX)
        return false;
    if (pos)
        *pos = at;
    if (rank)
        *rank = opindex_owner(x, v);
    return true;
}

/* The global id of op (kind, v, mb) in a numbering of all ops rank after rank:
 * off[rank] + its list position, where off[r] (caller's array of P+1) counts the ops
 * listed on ranks before r. UINT32_MAX when absent. The ids of the simulator, the
 * wait graph and the exact model. */
static inline uint32_t opindex_global(const OpIndex *x, const uint32_t *off, OpKind kind,
                                      int32_t v, uint32_t mb)
{
    int32_t r;
    uint32_t pos;
    if (!opindex_find(x, kind, v, mb, &r, &pos))
        return UINT32_MAX;
    return off[r] + pos;
}

/* Number of ops the index holds (duplicates and out-of-range ops excluded). */
uint64_t opindex_count(const OpIndex *idx);

void opindex_free(OpIndex *idx);

/* The smallest micro-batch >= from for which (kind, v, mb) is indexed, or UINT32_MAX.
 * Dense index: a scan; sparse index: a binary search. */
uint32_t opindex_next(const OpIndex *idx, OpKind kind, int32_t v, uint32_t from);

/* The smallest micro-batch >= from (and < M) for which (kind, v, mb) is not indexed, or
 * UINT32_MAX when there is none: where the next run of absent ops starts. */
uint32_t opindex_next_absent(const OpIndex *idx, OpKind kind, int32_t v, uint32_t from);

#endif
