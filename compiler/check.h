/* check.h - the verifier of the elaborated IR (DESIGN.md "Completeness", "Dependencies",
 * "Memory"; docs/semantics.md states every rule this file enforces).
 *
 * Legend: P = stages (ranks), M = micro-batches, V = chunks per rank, PV virtual stages.
 * An op is named by (kind, virtual stage v, micro-batch m); its rank is the owner of v
 * (ir_owner), so an op's identity also fixes where it must live. */
#ifndef PIPEC_CHECK_H
#define PIPEC_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "diag.h"
#include "ir.h"

enum { CHECK_STRUCTURE = 1u, CHECK_DEPS = 2u, CHECK_MEMORY = 4u, CHECK_ALL = 7u };

/* Runs the chosen checks over the IR; reports through diag; returns the number of
 * errors reported. CHECK_STRUCTURE: missing/duplicate/placement (and W/R/SO/SI count
 * limits); CHECK_DEPS: order (same-rank violations), deadlock (cross-rank cycles,
 * smallest cycle, walked as a chain with a note at each op) and the send/recv lowering
 * check; CHECK_MEMORY: the static walk against the budget. Deps checks are skipped if
 * structure failed (they need every op exactly once). Linear in the number of ops
 * (plus a bounded search for the smallest cycle when there is a deadlock). */
int check_pipeline(Diag *d, const Pipeline *p, unsigned what);

/* Prints the per-rank peak table of `pipec check --mem` (rank, peak, budget, headroom,
 * weights, activations, the op at the peak). Sizes in GiB with one decimal. The weights
 * column adds the model states LW had loaded at the peak (docs/semantics.md). */
void check_mem_table(FILE *out, const Pipeline *p);

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

#endif
