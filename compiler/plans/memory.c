/* memory.c - the static memory walk of docs/spec.md "Memory"; see memory.h.
 *
 * One pass over each rank's list. The bytes each (v,m) holds live in an array indexed
 * by the position of the first op of (v,m) on the rank (its "slot"), found by one scan
 * of the rank's list (or through the op index when V*M is far above the rank's op
 * count), so the walk needs O(ops) memory whatever P*V*M is. The chunk-wide OG/LW ops
 * have no slot: LW adds its chunk's `grads + wload` to the rank's total directly. */
#include "memory.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "opindex.h"
#include "opsem.h"
#include "util.h"

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

/* Applies op i (the rule is opsem_mem_step): *alloc gets the bytes allocated at its
 * start, *freed those freed at its end. */
static void step(Walk *w, uint32_t i, double *alloc, double *freed)
{
    const Op *op = &w->p->stages[w->s].ops[i];
    *alloc = *freed = 0;
    if (!ir_op_in_range(w->p, op))
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
    /* Every op of a (v,m) owned by rank s is on rank s (an op's virtual stage is its
     * rank's chunk), so one scan of the list finds what the index would: the first
     * position of (chunk, mb) and its VM_HAS_* bits. A table of V*M cells when that is
     * O(ops) (every complete schedule), else the index. */
    size_t VM = (size_t)(p->V > 0 ? p->V : 0) * (size_t)(p->M > 0 ? p->M : 0);
    if (!idx || VM <= 4 * (size_t)st->n + 1024) {
        uint32_t *first = xmalloc((VM ? VM : 1) * sizeof *first);
        uint8_t *has = xcalloc(VM ? VM : 1, 1);
        for (size_t k = 0; k < VM; k++)
            first[k] = NONE;
        for (uint32_t i = 0; i < st->n; i++) {
            const Op *op = &st->ops[i];
            if (!ir_op_in_range(p, op))
                continue;
            size_t k = (size_t)op->chunk * (size_t)p->M + op->mb;
            has[k] |= (uint8_t)opsem_has_bit((OpKind)op->kind);
            if (!OP_IS_CHUNKWIDE(op->kind) && first[k] == NONE)
                first[k] = i;
        }
        for (uint32_t i = 0; i < st->n; i++) {
            const Op *op = &st->ops[i];
            w->slot[i] = i;
            if (!ir_op_in_range(p, op) || OP_IS_CHUNKWIDE(op->kind))
                continue;
            size_t k = (size_t)op->chunk * (size_t)p->M + op->mb;
            w->has[i] = has[k];
            w->slot[i] = first[k] < i ? first[k] : i;
        }
        free(first);
        free(has);
        return;
    }
    for (uint32_t i = 0; i < st->n; i++) {
        const Op *op = &st->ops[i];
        w->slot[i] = i;
        if (!ir_op_in_range(p, op) || OP_IS_CHUNKWIDE(op->kind))
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
    MemRank r = {cur, cur, NONE, 0, 0, 0};
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
        /* the op's transient working memory, held while it runs (docs/spec.md "Memory") */
        double work = ir_op_in_range(p, op) ? opsem_work((OpKind)op->kind, &w.cost[op->chunk]) : 0;
        cur += alloc;
        if (wide)
            states += alloc;
        /* step left held at "after the op"; at its start the frees are still held */
        bool mid = vm && vm->held + freed > 0;
        live += !was && mid;
        if ((alloc > 0 || work > 0) && cur + work > r.peak) {
            r.peak = cur + work;
            r.peak_op = i;
            r.live_at_peak = live;
            r.states = states;
            r.work = work;
        }
        cur -= freed;
        live -= mid && !(vm->held > 0);
    }
    *out = r;
    walk_free(&w);
}

/* Whether some rank's (chunk, mb) table would be much larger than its list (an
 * incomplete schedule with many micro-batches): then the walk uses the op index. */
static bool walk_needs_index(const Pipeline *p)
{
    size_t VM = (size_t)(p->V > 0 ? p->V : 0) * (size_t)(p->M > 0 ? p->M : 0);
    for (int32_t s = 0; s < p->P; s++)
        if (VM > 4 * (size_t)p->stages[s].n + 1024)
            return true;
    return false;
}

void mem_walk(const Pipeline *p, MemRank *out)
{
    OpIndex *idx = walk_needs_index(p) ? opindex_build(p) : NULL;
    for (int32_t s = 0; s < p->P; s++)
        walk_rank(p, idx, s, &out[s]);
    opindex_free(idx);
}

bool mem_fits(const Pipeline *p, uint8_t *over)
{
    if (over)
        memset(over, 0, (size_t)p->P);
    if (!p->has_memory)
        return true;
    MemRank *mr = xmalloc((size_t)p->P * sizeof *mr);
    mem_walk(p, mr);
    bool ok = true;
    for (int32_t s = 0; s < p->P; s++)
        if (mr[s].peak > p->memory) {
            ok = false;
            if (over)
                over[s] = 1;
        }
    free(mr);
    return ok;
}

void mem_walk_rank(const Pipeline *p, int32_t s, MemRank *out)
{
    OpIndex *idx = walk_needs_index(p) ? opindex_build(p) : NULL;
    walk_rank(p, idx, s, out);
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
        if (i == upto && !OP_IS_CHUNKWIDE(st->ops[i].kind) && ir_op_in_range(p, &st->ops[i]))
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
