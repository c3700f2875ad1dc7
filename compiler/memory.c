/* memory.c - the static memory walk of DESIGN.md "Memory"; see memory.h.
 *
 * One pass over each rank's list. The bytes each (v,m) holds live in an array indexed
 * by the position of the first op of (v,m) on the rank (its "slot"), found through the
 * op index, so the walk needs O(ops) memory whatever P*V*M is. The chunk-wide OG/LW ops
 * have no slot: LW adds its chunk's `grads + wload` to the rank's total directly. */
#include "memory.h"

#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "check_int.h"
#include "util.h"


/* Per-rank walk state. held and host are indexed by slot. */
typedef struct Walk {
    const Pipeline *p;
    const OpIndex *idx;
    int32_t s;
    double *held;     /* [n] bytes on the device for the (v,m) whose slot this is */
    double *host;     /* [n] bytes swapped out to the host */
    uint32_t *slot;   /* [n] slot of op i */
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

static bool has_op(const OpIndex *idx, OpKind k, int32_t v, uint32_t mb)
{
    return opindex_find(idx, k, v, mb, NULL, NULL);
}

/* Applies op i: *alloc gets the bytes allocated at its start, *freed those freed at its
 * end (SO: freed at its position; SI: allocated at its position). */
static void step(Walk *w, uint32_t i, double *alloc, double *freed)
{
    const Pipeline *p = w->p;
    const Op *op = &p->stages[w->s].ops[i];
    *alloc = *freed = 0;
    if (op->kind >= OP_NKINDS || op->chunk >= (uint32_t)p->V || op->mb >= (uint32_t)p->M)
        return;
    int32_t c = op->chunk, v = ir_vstage(p, w->s, c);
    uint32_t sl = w->slot[i];
    double *held = &w->held[sl], *host = &w->host[sl];
    switch ((OpKind)op->kind) {
    case OP_F:
        *alloc = has_op(w->idx, OP_R, v, op->mb) ? ir_cost(p, w->s, c, COST_CKPT)
                                                  : ir_cost(p, w->s, c, COST_ACT);
        break;
    case OP_R:
        *alloc = ir_cost(p, w->s, c, COST_ACT) - ir_cost(p, w->s, c, COST_CKPT);
        break;
    case OP_B: {
        double keep = has_op(w->idx, OP_W, v, op->mb) ? ir_cost(p, w->s, c, COST_WACT) : 0;
        if (keep > *held)
            keep = *held;
        *freed = *held - keep;
        break;
    }
    case OP_W:
        *freed = *held;
        break;
    case OP_SO: {
        double moved = ir_cost(p, w->s, c, COST_SWAP_FRACTION) * *held;
        *freed = moved;
        *host += moved;
        break;
    }
    case OP_SI:
        *alloc = *host;
        *host = 0;
        break;
    default:
        break;
    }
    *held += *alloc;
}

static void walk_init(Walk *w, const Pipeline *p, const OpIndex *idx, int32_t s)
{
    const StageOps *st = &p->stages[s];
    w->p = p;
    w->idx = idx;
    w->s = s;
    w->held = xcalloc(st->n, sizeof *w->held);
    w->host = xcalloc(st->n, sizeof *w->host);
    w->slot = xmalloc((st->n ? st->n : 1) * sizeof *w->slot);
    for (uint32_t i = 0; i < st->n; i++) {
        const Op *op = &st->ops[i];
        if (op->kind >= OP_NKINDS || op->chunk >= (uint32_t)p->V || op->mb >= (uint32_t)p->M ||
            OP_IS_CHUNKWIDE(op->kind))
            w->slot[i] = i;
        else
            w->slot[i] = slot_of(idx, ir_vstage(p, s, op->chunk), op->mb, i);
    }
}

static void walk_free(Walk *w)
{
    free(w->held);
    free(w->host);
    free(w->slot);
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
        if (op->kind == OP_LW && op->chunk < (uint32_t)p->V && op->mb < (uint32_t)p->M) {
            /* The chunk's model states come back; OG's free is not counted (see memory.h). */
            double a = ir_cost(p, s, op->chunk, COST_GRADS) + ir_cost(p, s, op->chunk, COST_WLOAD);
            cur += a;
            states += a;
            if (a > 0 && cur > r.peak) {
                r.peak = cur;
                r.peak_op = i;
                r.live_at_peak = live;
                r.states = states;
            }
            continue;
        }
        if (OP_IS_CHUNKWIDE(op->kind))
            continue;
        uint32_t sl = w.slot[i];
        bool was = w.held[sl] > 0;
        double alloc, freed;
        step(&w, i, &alloc, &freed);
        cur += alloc;
        bool mid = w.held[sl] > 0;
        live += !was && mid;
        if (alloc > 0 && cur > r.peak) {
            r.peak = cur;
            r.peak_op = i;
            r.live_at_peak = live;
            r.states = states;
        }
        w.held[sl] -= freed;
        cur -= freed;
        live -= mid && !(w.held[sl] > 0);
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
        if (i < upto)
            w.held[w.slot[i]] -= freed;
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < st->n; i++)
        if (w.slot[i] == i && w.held[i] > 0) {
            if (n < cap)
                held[n] = w.held[i];
            n++;
        }
    walk_free(&w);
    return n;
}
