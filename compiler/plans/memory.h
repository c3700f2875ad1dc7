/* memory.h - the static memory walk of docs/spec.md "Memory", per rank.
 *
 * Each rank holds its `weights` plus, for every (virtual stage v, micro-batch m) it
 * owns: F adds `act`, or `ckpt` when R(v,m) exists; R adds `act - ckpt`; B frees all of
 * (v,m) except `wact` when W(v,m) exists, which W frees; SO frees `swap_fraction` of
 * what (v,m) holds at that point; SI brings it back. Allocations happen at an op's
 * start and frees at its end, SO/SI at their list positions; the peak of the walk is
 * what `check` compares with `memory` (peak <= budget passes). An F, B, R or RO also
 * holds its virtual stage's `work` bytes while it runs (opsem_work): the peak at an op
 * is what is held at its start plus its working memory. Sizes are bytes.
 *
 * Model-state offload (docs/semantics.md): LW(c) adds chunk c's `grads + wload` at its
 * list position. OG(c) frees them at its end in time, but the walk, which orders by
 * list position only, keeps them to the end of the list: it cannot know whether an op
 * listed after OG starts before the copy ends, so it stays an upper bound of the
 * simulated peak. */
#ifndef PIPEC_MEMORY_H
#define PIPEC_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"
#include "opindex.h"

typedef struct MemRank {
    double peak;        /* bytes, weights included */
    double weights;     /* bytes */
    uint32_t peak_op;   /* index in the rank's op list where the peak is reached;
                         * UINT32_MAX when the peak is the weights alone */
    uint32_t live_at_peak; /* (v,m) pairs holding bytes at the peak */
    double states;      /* bytes of model states LW had reloaded at the peak (in peak) */
    double work;        /* bytes of the peak op's transient working memory (in peak) */
} MemRank;

/* Fills out[0..P-1]. Allocations at an op's start, frees at its end, SO/SI at their
 * list positions. Linear in the number of ops. Works on any IR (incomplete or
 * misordered schedules give a walk of what is listed; never crashes). */
void mem_walk(const Pipeline *p, MemRank *out);

/* True when every rank's walk peak (mem_walk) is within p->memory, or there is no
 * budget; over[P], when not NULL, gets 1 per rank over it and 0 per rank within. */
bool mem_fits(const Pipeline *p, uint8_t *over);

/* mem_walk of rank s alone (the same *out as mem_walk's out[s]). */
void mem_walk_rank(const Pipeline *p, int32_t s, MemRank *out);

/* The bytes (v,m) holds on rank s just after op `upto` of that rank's list started
 * (its allocations done, its frees not yet), for every live (v,m): fills held[] with
 * up to cap values (largest first is not guaranteed) and returns how many (v,m) are
 * live. Used to explain a peak ("8 micro-batches x 3.6 GiB"). */
uint32_t mem_live_at(const Pipeline *p, int32_t s, uint32_t upto, double *held, uint32_t cap);

/* mem_live_at with an op index already built. */
uint32_t mem_live_idx(const Pipeline *p, const OpIndex *idx, int32_t s, uint32_t upto,
                      double *held, uint32_t cap);

/* The VM_HAS_* facts (opsem.h) of (v, m): which of its optional ops (R, W, SO, SI) the
 * index holds. */
unsigned mem_vm_has(const OpIndex *idx, int32_t v, uint32_t mb);

/* The walk of rank s op by op: alloc[i] bytes op i allocates at its start, freed[i]
 * bytes it frees at its end (both >= 0; arrays of p->stages[s].n, caller-allocated).
 * The one source of the per-op amounts the simulator, the code generator and the
 * runtime use (opsem_mem_step applied in list order). */
void mem_walk_ops(const Pipeline *p, const OpIndex *idx, int32_t s, double *alloc,
                  double *freed);

#endif
