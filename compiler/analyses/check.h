/* check.h - the verifier of the elaborated IR (docs/spec.md "Completeness", "Dependencies",
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
#include "opindex.h"

enum { CHECK_STRUCTURE = 1u, CHECK_DEPS = 2u, CHECK_MEMORY = 4u, CHECK_ALL = 7u, CHECK_SOUND = 8u };

/* Runs the chosen checks over the IR; reports through diag; returns the number of
 * errors reported. CHECK_STRUCTURE: missing/duplicate/placement (and W/R/SO/SI count
 * limits); CHECK_DEPS: order (same-rank violations), deadlock (cross-rank cycles,
 * smallest cycle, walked as a chain with a note at each op) and the send/recv lowering
 * check; CHECK_MEMORY: the static walk against the budget. Deps checks are skipped if
 * structure failed (they need every op exactly once). Linear in the number of ops
 * (plus a bounded search for the smallest cycle when there is a deadlock). CHECK_SOUND:
 * the caller vouches that p, unchanged since, passed CHECK_STRUCTURE without errors, so
 * the structure is not checked again (quietly) before the later checks. */
int check_pipeline(Diag *d, const Pipeline *p, unsigned what);

/* Prints the per-rank peak table of `pipec check --mem` (rank, peak, budget, headroom,
 * weights, activations, the op at the peak). Sizes in GiB with one decimal. The weights
 * column adds the model states LW had loaded at the peak (docs/semantics.md). */
void check_mem_table(FILE *out, const Pipeline *p);


#endif
