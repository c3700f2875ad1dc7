/* recompute_in_stalls.c - Lynx's cool-down optimisation (Lynx §4.2, "Optimizations",
 * second point): "the training in cool-down incurs many synchronization stalls ...
 * Lynx further uses the synchronization stalls for hiding recomputation overhead when
 * all the dependent tensors are on the same GPU and sufficient GPU memory is
 * available" (Fig. 6(b): the recomputation of batch 2 on stage 0 runs in the stall
 * before an earlier backward).
 *
 * Legend: P = ranks; times ms, sizes bytes. The cool-down of a rank is its list after
 * its last F. An R(v, m) there needs only F(v, m)'s checkpoint, which is on the same
 * rank and already done, so it may run earlier than the backward just before which it
 * is listed.
 *
 * The pass simulates the schedule, and for every rank walks its cool-down R ops in
 * order: an R is hoisted to just before the earliest cool-down compute op j that is
 * preceded by a stall (start(j) - end(op before j)) with at least r left, and the r is
 * taken from that stall. The result is kept only if the simulated makespan gets
 * shorter and every rank's static memory peak stays within the budget (a hoisted R holds
 * its re-materialised activations longer); otherwise the rank's list goes back. Then
 * the whole is simulated again and the walk repeats until nothing moves (at most 8
 * rounds), so a second application changes nothing: idempotent.
 *
 * A hoisted R is decoupled from the gradient: Lynx runs it "when all the dependent
 * tensors are on the same GPU" (the checkpoint), so it loses its binding to B(v+1,m)
 * (passes.h; docs/passes.md "Bound and decoupled recomputation"), or it could not use
 * a stall that precedes that gradient; an R that stays keeps it.
 *
 * Requires a complete, checked schedule; R ops stay after their F (the last F precedes
 * every cool-down op) and before their B, so the result is complete and ordered; a
 * hoist that would make the schedule stuck is undone by the makespan test. Ranks
 * without R ops in the cool-down are left alone. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "memory.h"
#include "opsem.h"
#include "passes.h"
#include "sim.h"
#include "util.h"

/* Moves op `from` of a list to position `to` (to < from), shifting the ones between. */
static void move_op(Op *ops, uint32_t from, uint32_t to)
{
    Op o = ops[from];
    memmove(ops + to + 1, ops + to, (size_t)(from - to) * sizeof *ops);
    ops[to] = o;
}

/* One round over rank s with the times of r; returns the number of R ops hoisted. */
static uint32_t hoist_rank(Pipeline *p, const SimResult *sr, int32_t s)
{
    StageOps *st = &p->stages[s];
    uint32_t n = st->n, last_f = UINT32_MAX, moved = 0;
    for (uint32_t i = 0; i < n; i++)
        if (st->ops[i].kind == OP_F)
            last_f = i;
    if (last_f == UINT32_MAX || last_f + 2 >= n)
        return 0;
    /* stall[i]: compute idle before op i (cool-down compute ops only), still unused */
    double *stall = xcalloc(n, sizeof *stall);
    uint32_t prev = last_f;
    for (uint32_t i = last_f + 1; i < n; i++) {
        if (op_stream(st->ops[i].kind) != STREAM_COMPUTE)
            continue;
        stall[i] = fmax(0.0, sr->start[s][i] - sr->end[s][prev]);
        prev = i;
    }
    /* pos[k] = where original op k now sits; ops are moved only leftwards among the
     * cool-down, so walk the original indices and keep a mapping. */
    Op *orig = xmalloc((size_t)n * sizeof *orig);
    memcpy(orig, st->ops, (size_t)n * sizeof *orig);
    uint32_t *where = xmalloc((size_t)n * sizeof *where); /* current index of original k */
    for (uint32_t k = 0; k < n; k++)
        where[k] = k;
    for (uint32_t i = last_f + 1; i < n; i++) {
        if (orig[i].kind != OP_R)
            continue;
        double r = ir_cost(p, s, orig[i].chunk, COST_R);
        for (uint32_t j = last_f + 1; j < i; j++) {
            if (op_stream(orig[j].kind) != STREAM_COMPUTE || orig[j].kind == OP_R)
                continue;
            if (stall[j] + 1e-12 < r || r <= 0)
                continue;
            /* hoist R (original i) before original j */
            uint32_t from = where[i], to = where[j];
            if (to >= from)
                break;
            move_op(st->ops, from, to);
            recompute_unbind(p, s, &orig[i]); /* decoupled: it runs before its gradient */
            for (uint32_t k = 0; k < n; k++)
                if (where[k] >= to && where[k] < from)
                    where[k]++;
            where[i] = to;
            stall[j] -= r;
            moved++;
            break;
        }
    }
    free(stall);
    free(orig);
    free(where);
    return moved;
}

int pass_recompute_in_stalls(Diag *d, Pipeline *p, const PassCall *call)
{
    (void)d;
    (void)call;
    void *scratch = NULL;
    for (int round = 0; round < 8; round++) {
        SimResult *sr = simulate(p);
        if (sr->stuck) {
            sim_free(sr);
            break;
        }
        double base = sr->makespan_ms;
        uint32_t kept = 0;
        for (int32_t s = 0; s < p->P; s++) {
            StageOps *st = &p->stages[s];
            Op *save = xmalloc(((size_t)st->n + 1) * sizeof *save);
            memcpy(save, st->ops, (size_t)st->n * sizeof *save);
            Dep *dsave = xmalloc(((size_t)p->ndeps + 1) * sizeof *dsave);
            uint32_t nd = p->ndeps;
            if (nd)
                memcpy(dsave, p->deps, (size_t)nd * sizeof *dsave);
            uint32_t moved = hoist_rank(p, sr, s);
            if (moved) {
                double t = sim_makespan(p, &scratch);
                if (t < base - 1e-9 && mem_fits(p, NULL)) {
                    kept += moved;
                    base = t;
                } else {
                    memcpy(st->ops, save, (size_t)st->n * sizeof *save);
                    if (nd) /* unbinding only shrinks the lines */
                        memcpy(p->deps, dsave, (size_t)nd * sizeof *dsave);
                    p->ndeps = nd;
                }
            }
            free(save);
            free(dsave);
        }
        sim_free(sr);
        if (!kept)
            break;
    }
    sim_scratch_free(scratch);
    return 0;
}
