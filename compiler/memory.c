/* memory.c - the static memory walk of DESIGN.md "Memory"; see memory.h.
 *
 * One pass over each rank's list. The bytes each (v,m) holds live in an array indexed
 * by the position of the first op of (v,m) on the rank (its "slot"), found through the
 * op index, so the walk needs O(ops) memory whatever P*V*M is. The chunk-wide OG/LW ops
 * have no slot: LW adds its chunk's `grads + wload` to the rank's total directly. */
#include "memory.h"

#include <math.h>
#include <stdlib.h>

#include "opindex.h"
#include "opsem.h"
#include "util.h"

#define NONE UINT32_MAX


/* Per-rank walk state, indexed by slot. */
typedef struct Walk {
    const Pipeline *p;
    int32_t s;
    VmMem *vm;        /* [n] what the (v,m) whose slot this is holds */
    uint32_t *slot;   /* [n] slot of op i */
    uint8_t *has;     /* [n] VM_HAS_* of op i's (v,m) */
    OpCosts *cost;    /* [V] costs of each chunk of the rank */
} Walk;

/* The slot of (v,m): the smallest position of any of its ops on this rank. */
static uint32_t slot_of(const OpIndex *idx, int32_t v, uint32_t mb, uint32_t self)
{
    uint32_t best = self;
    for (int k = 0; k < OP_NKINDS; k++) {
        uint32_t pos;
        if (OP_IS_CHUNKWIDE(k))
            continue;
        if (opindex_find(idx, (OpKind)k, v, mb, NULL, &pos) && pos < best)
            best = pos;
    }
    return best;
}

static bool op_ok(const Pipeline *p, const Op *op)
{
    return op->kind < OP_NKINDS && op->chunk < (uint32_t)p->V && op->mb < (uint32_t)p->M;
}

/* Applies op i (the rule is opsem_mem_step): *alloc gets the bytes allocated at its
 * start, *freed those freed at its end. */
static void step(Walk *w, uint32_t i, double *alloc, double *freed)
{
    const Op *op = &w->p->stages[w->s].ops[i];
    *alloc = *freed = 0;
    if (!op_ok(w->p, op))
        return;
    VmMem *st = OP_IS_CHUNKWIDE(op->kind) ? NULL : &w->vm[w->slot[i]];
    opsem_mem_step((OpKind)op->kind, &w->cost[op->chunk], w->has[i], st, alloc, freed);
}

unsigned mem_vm_has(const OpIndex *idx, int32_t v, uint32_t mb)
{
    unsigned has = 0;
    for (int k = 0; k < OP_NKINDS; k++) {
        unsigned bit = opsem_has_bit((OpKind)k);
        if (bit && opindex_find(idx, (OpKind)k, v, mb, NULL, NULL))
            has |= bit;
    }
    return has;
}

static void walk_init(Walk *w, const Pipeline *p, const OpIndex *idx, int32_t s)
{
    const StageOps *st = &p->stages[s];
    size_t n1 = st->n ? st->n : 1;
    w->p = p;
    w->s = s;
    w->vm = xcalloc(n1, sizeof *w->vm);
    w->slot = xmalloc(n1 * sizeof *w->slot);
    w->has = xcalloc(n1, sizeof *w->has);
    w->cost = xmalloc((p->V > 0 ? (size_t)p->V : 1) * sizeof *w->cost);
    for (int32_t c = 0; c < p->V; c++)
        opsem_costs(p, s, c, &w->cost[c]);
    for (uint32_t i = 0; i < st->n; i++) {
        const Op *op = &st->ops[i];
        w->slot[i] = i;
        if (!op_ok(p, op) || OP_IS_CHUNKWIDE(op->kind))
            continue;
        int32_t v = ir_vstage(p, s, op->chunk);
        w->has[i] = (uint8_t)mem_vm_has(idx, v, op->mb);
        w->slot[i] = slot_of(idx, v, op->mb, i);
    }
}

static void walk_free(Walk *w)
{
    free(w->vm);
    free(w->slot);
    free(w->has);
    free(w->cost);
}

void mem_walk_ops(const Pipeline *p, const OpIndex *idx, int32_t s, double *alloc,
                  double *freed)
{
    Walk w;
    walk_init(&w, p, idx, s);
    for (uint32_t i = 0; i < p->stages[s].n; i++)
        step(&w, i, &alloc[i], &freed[i]);
    walk_free(&w);
}

static void walk_rank(const Pipeline *p, const OpIndex *idx, int32_t s, MemRank *out)
{
    Walk w;
    walk_init(&w, p, idx, s);
    double cur = ir_cost(p, s, 0, COST_WEIGHTS);
    MemRank r = {cur, cur, NONE, 0, 0};
    uint32_t live = 0;
    double states = 0;
    const StageOps *st = &p->stages[s];
    for (uint32_t i = 0; i < st->n; i++) {
        const Op *op = &st->ops[i];
        bool wide = OP_IS_CHUNKWIDE(op->kind);
        VmMem *vm = wide ? NULL : &w.vm[w.slot[i]];
        bool was = vm && vm->held > 0;
        double alloc, freed;
        step(&w, i, &alloc, &freed);
        cur += alloc;
        if (wide)
            states += alloc;
        /* step left held at "after the op"; at its start the frees are still held */
        bool mid = vm && vm->held + freed > 0;
        live += !was && mid;
        if (alloc > 0 && cur > r.peak) {
            r.peak = cur;
            r.peak_op = i;
            r.live_at_peak = live;
            r.states = states;
        }
        cur -= freed;
        live -= mid && !(vm->held > 0);
    }
    *out = r;
    walk_free(&w);
}

void mem_walk(const Pipeline *p, MemRank *out)
{
    OpIndex *idx = opindex_build(p);
    for (int32_t s = 0; s < p->P; s++)
        walk_rank(p, idx, s, &out[s]);
    opindex_free(idx);
}

uint32_t mem_live_at(const Pipeline *p, int32_t s, uint32_t upto, double *held, uint32_t cap)
{
    OpIndex *idx = opindex_build(p);
    uint32_t n = mem_live_idx(p, idx, s, upto, held, cap);
    opindex_free(idx);
    return n;
}

uint32_t mem_live_idx(const Pipeline *p, const OpIndex *idx, int32_t s, uint32_t upto,
                      double *held, uint32_t cap)
{
    if (s < 0 || s >= p->P)
        return 0;
    const StageOps *st = &p->stages[s];
    Walk w;
    walk_init(&w, p, idx, s);
    for (uint32_t i = 0; i < st->n && i <= upto; i++) {
        double alloc, freed;
        step(&w, i, &alloc, &freed);
        if (i == upto && !OP_IS_CHUNKWIDE(st->ops[i].kind) && op_ok(p, &st->ops[i]))
            w.vm[w.slot[i]].held += freed; /* its frees happen at its end */
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < st->n; i++)
        if (w.slot[i] == i && w.vm[i].held > 0) { /* a chunk-wide op holds no (v,m) */
            if (n < cap)
                held[n] = w.vm[i].held;
            n++;
        }
    walk_free(&w);
    return n;
}
