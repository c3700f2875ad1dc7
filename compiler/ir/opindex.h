/* opindex.h - the op index, below every consumer of the IR that looks ops up by
 * identity (the checker, the memory walk, the wait graph, the comm lowering, the
 * simulator, the passes). Depends only on ir.h. */
#ifndef PIPEC_OPINDEX_H
#define PIPEC_OPINDEX_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"

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

OpIndex *opindex_build(const Pipeline *p);

/* Finds op (kind, v, mb). Returns true and sets *rank and *pos (index into
 * p->stages[*rank].ops) when present; false when absent or out of range. Either
 * output pointer may be NULL. */
bool opindex_find(const OpIndex *idx, OpKind kind, int32_t v, uint32_t mb, int32_t *rank,
                  uint32_t *pos);

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
