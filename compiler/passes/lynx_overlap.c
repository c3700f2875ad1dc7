/* lynx_overlap.c - Lynx-HEU: recomputation overlapped with tensor-parallel
 * communication (Chen et al., Optimizing Large Model Training through Overlapped
 * Activation Recomputation, §4.2, Eq. 2-9).
 *
 * Legend: P = ranks, M = micro-batches, (v,m) = virtual stage and micro-batch. Times
 * ms, sizes bytes.
 *
 * Lynx-HEU picks, for one transformer layer, which activations to keep and which to
 * recompute, and for each recomputed operator the phase it runs in: one of the four
 * all-reduce phases of Fig. 1 (two in a forward, two in a backward) or on demand on
 * the critical path (phase 5), minimising the recompute time left on the critical path
 * (Eq. 2) within the memory budget (Eq. 7-9); the same policy then serves every
 * identical layer. In pipec's terms, per rank:
 *   - which activations to keep: the rank's recomputation policy, one of
 *     recompute_menu's (passes.h): none, cmb, selective, the keep-sets of cm_keep_ladder (per operator: the layer's tensors
 *     kept one at a time in order of the rebuild time a byte saves, the greedy order of
 *     the per-layer knapsack HEU solves), mlp, full (the same for all its layers: §4.2
 *     "Key idea");
 *   - in which phase: each R(v,m) becomes an RO hosted by one of the compute ops listed
 *     before it (its all-reduces are the phases; docs/semantics.md "Overlapped
 *     recomputation"), the nearest of up to LYNX_HOSTS that has all-reduce time left
 *     and keeps the rank within the budget, never before an op of its own (v,m);
 *   - under layer-granular recomputation (docs/cost-model.md), an R that finds no such
 *     host becomes an RO in place, hosted by its own B: layer l is rebuilt in the
 *     backward all-reduces of layer l+1 (Lynx Fig. 7, phases 3-4; opsem_exposed_self),
 *     still bound to the gradient, holding the same memory;
 *   - on demand as the fallback: an R that finds no host stays where it is, just
 *     before its backward, bound to it (passes.h: it waits for B(v+1,m), phase 5 runs
 *     on the critical path of the backward); an RO is decoupled from the gradient (it
 *     runs in an earlier op's all-reduces, Fig. 7), so it loses that line.
 * Of the policies whose placement fits the budget (the rank's walk peak), the one
 * with the least compute-stream time (sim_busy: f, b, w, the on-demand r's and the
 * exposed part of each RO) wins, ties to the earlier of none, cmb, selective, the
 * keep-sets from the largest down, mlp, full (roughly: the one that keeps more). On the last
 * stage a recompute runs right after its forward's micro-batch turns round, so the
 * nearest host is the backward before it (Lynx §4.2, "Optimizations": no forward
 * phases there) without a special case. A rank where no policy fits is left as it was,
 * and so is a rank whose recomputes a `dep` line names (re-planning would move or
 * rename them; Obscura's swap passes write such lines).
 *
 * Without a model the policy cannot change (r and ckpt are the costs written): the
 * pass only moves the existing R ops into hosts. Without tensor parallelism (fcomm =
 * bcomm = 0) no host has time to offer and the pass only chooses the policies.
 *
 * Arguments: stages (a range, default all). Requires a checked IR; leaves it legal
 * (an RO is listed after every op of its own (v,m) that precedes its R, and before
 * its backward). Idempotent: every rank is planned from its list without R and RO. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"
#include "lynx.h"
#include "memory.h"
#include "opsem.h"
#include "passes.h"
#include "sched_util.h"
#include "sim.h"
#include "util.h"

/* How many compute ops before an R are tried as its host: Lynx's four phases lie in
 * the forward and the backward just before a 1F1B backward (Fig. 7). */
#define LYNX_HOSTS 3

/* Whether rank s's walk peak is within the budget. */
static bool rank_fits(const Pipeline *p, int32_t s)
{
    if (!p->has_memory)
        return true;
    MemRank mr;
    mem_walk_rank(p, s, &mr);
    return mr.peak <= p->memory;
}

/* The all-reduce time host j of rank list st has left after the ROs listed just
 * before it (opsem_exposed in list order). */
static double host_left(const StageOps *st, uint32_t j, const OpCosts *cost)
{
    uint32_t k = j;
    while (k > 0 && op_sem[st->ops[k - 1].kind].overlaps_host)
        k--;
    double budget = opsem_comm((OpKind)st->ops[j].kind, &cost[st->ops[j].chunk]);
    for (; k < j; k++)
        opsem_exposed(&cost[st->ops[k].chunk], &budget);
    return budget;
}

/* Rank s's walk (docs/spec.md "Memory") as levels, to test moves of one R without
 * walking the rank again: base[k] the bytes in use at op k's start, lev[k] after its
 * allocation plus the working memory it holds while it runs (-INFINITY when it
 * allocates and holds nothing), pre[k] the largest lev before k, suf[k] the largest from
 * k on, work[k] op k's working memory (opsem_work). Arrays of n + 1. */
typedef struct Levels {
    double *base, *lev, *pre, *suf, *alloc, *freed, *work;
} Levels;

static void levels_walk(const Pipeline *p, int32_t s, const OpCosts *cost, Levels *L)
{
    const StageOps *st = &p->stages[s];
    uint32_t n = st->n;
    mem_walk_ops(p, NULL, s, L->alloc, L->freed);
    double cur = ir_cost(p, s, 0, COST_WEIGHTS);
    for (uint32_t k = 0; k < n; k++) {
        const Op *op = &st->ops[k];
        L->work[k] = op->chunk < p->V
                         ? opsem_work((OpKind)op->kind, &cost[op->chunk]) : 0;
        L->base[k] = cur;
        cur += L->alloc[k];
        L->lev[k] = L->alloc[k] > 0 || L->work[k] > 0 ? cur + L->work[k] : -INFINITY;
        cur -= L->freed[k];
    }
    L->pre[0] = -INFINITY;
    for (uint32_t k = 0; k < n; k++)
        L->pre[k + 1] = fmax(L->pre[k], L->lev[k]);
    L->suf[n] = -INFINITY;
    for (uint32_t k = n; k-- > 0;)
        L->suf[k] = fmax(L->suf[k + 1], L->lev[k]);
}

/* Whether moving the R at position i to position j < i surely breaks the budget, from
 * the levels of the list before the move: it allocates the same bytes earlier (an R's
 * amount does not depend on what its (v,m) holds, and no op of its (v,m) lies between
 * j and i), so the walk from j to i - 1 is higher by them and the rest is unchanged.
 * Sizes are whole bytes, so these sums are exact; near the budget the caller walks
 * anyway. */
static bool move_over(const Pipeline *p, const Levels *L, uint32_t j, uint32_t i)
{
    double a = L->alloc[i];
    double peak = fmax(fmax(L->pre[j], L->suf[i + 1]), L->base[j] + a + L->work[i]);
    for (uint32_t k = j; k < i; k++)
        peak = fmax(peak, L->lev[k] + a);
    return peak > p->memory * (1 + 1e-12) + 1;
}

/* Moves each R of rank s into the nearest host before it that has all-reduce time
 * left and keeps the rank within the budget (see the top of the file). */
static void place_overlaps(Pipeline *p, int32_t s)
{
    StageOps *st = &p->stages[s];
    OpCosts *cost = xmalloc((size_t)p->V * sizeof *cost);
    for (int32_t c = 0; c < p->V; c++)
        opsem_costs(p, s, c, &cost[c]);
    size_t n1 = (size_t)st->n + 1;
    Levels L = {xmalloc(n1 * sizeof(double)), xmalloc(n1 * sizeof(double)),
                xmalloc(n1 * sizeof(double)), xmalloc(n1 * sizeof(double)),
                xmalloc(n1 * sizeof(double)), xmalloc(n1 * sizeof(double)),
                xmalloc(n1 * sizeof(double))};
    bool fresh = false;
    for (uint32_t i = 0; i < st->n; i++) {
        Op r = st->ops[i];
        if (r.kind != OP_R)
            continue;
        int tried = 0;
        for (uint32_t j = i; j-- > 0 && tried < LYNX_HOSTS;) {
            const Op *h = &st->ops[j];
            if (h->chunk == r.chunk && h->mb == r.mb)
                break; /* its own forward (or swap): nothing earlier can host it */
            if (op_stream((OpKind)h->kind) != STREAM_COMPUTE || op_sem[h->kind].overlaps_host)
                continue;
            tried++;
            if (!(host_left(st, j, cost) > 0))
                continue;
            if (p->has_memory) {
                if (!fresh)
                    levels_walk(p, s, cost, &L);
                fresh = true;
                if (move_over(p, &L, j, i))
                    continue;
            }
            memmove(&st->ops[j + 1], &st->ops[j], (size_t)(i - j) * sizeof *st->ops);
            st->ops[j] = r;
            st->ops[j].kind = OP_RO;
            /* the walk of the moved list: rank_fits, keeping the levels */
            bool fits = true;
            if (p->has_memory) {
                levels_walk(p, s, cost, &L);
                fits = fmax(ir_cost(p, s, 0, COST_WEIGHTS), L.suf[0]) <= p->memory;
                fresh = fits;
            }
            if (fits) {
                recompute_unbind(p, s, &r); /* decoupled: hosted before its gradient */
                break;
            }
            memmove(&st->ops[j], &st->ops[j + 1], (size_t)(i - j) * sizeof *st->ops);
            st->ops[i] = r;
        }
        /* no earlier host: under layer-granular recomputation its own B hosts it, in
         * place (the same memory), unless an RO before it shares that host */
        if (st->ops[i].kind == OP_R && st->ops[i].chunk == r.chunk && st->ops[i].mb == r.mb &&
            i + 1 < st->n && st->ops[i + 1].kind == OP_B && st->ops[i + 1].chunk == r.chunk &&
            st->ops[i + 1].mb == r.mb && (i == 0 || st->ops[i - 1].kind != OP_RO) &&
            opsem_self_host_ok(&cost[r.chunk]) && opsem_self_budget(&cost[r.chunk]) > 0) {
            bool bound = recompute_is_bound(p, s, &r);
            recompute_unbind(p, s, &r);
            st->ops[i].kind = OP_RO;
            if (bound) /* it still runs inside its backward: after the gradient */
                recompute_bind(p, s, &st->ops[i], r.loc);
            fresh = false;
        }
    }
    free(L.base), free(L.lev), free(L.pre), free(L.suf), free(L.alloc), free(L.freed);
    free(L.work);
    free(cost);
}

/* Whether a `dep` line names a recompute (R or RO) of rank s: re-planning would move or
 * rename the op it names (Obscura's swap passes write such lines). A recompute's
 * binding to its backward (passes.h) does not count: re-planning remakes it. */
static bool deps_name_recompute(const Pipeline *p, int32_t s)
{
    for (uint32_t i = 0; i < p->ndeps; i++) {
        if (recompute_dep_is_binding(p, &p->deps[i]))
            continue;
        const OpRef *e[2] = {&p->deps[i].from, &p->deps[i].to};
        for (int j = 0; j < 2; j++)
            if (e[j]->stage == s && e[j]->kind < OP_NKINDS &&
                opsem_has_bit((OpKind)e[j]->kind) == VM_HAS_R)
                return true;
    }
    return false;
}

/* Rank s of q planned with policy pol: its R and RO removed, pol's on-demand R ops
 * added (sched_recompute), then placed. Returns the errors reported. */
static int plan_rank(Diag *d, Pipeline *q, int32_t s, RecomputePolicy pol, uint32_t arg,
                     Loc loc)
{
    int err = sched_recompute(d, q, s, s + 1, POLICY_NONE, 0, loc);
    if (!err && pol != POLICY_NONE)
        err = sched_recompute(d, q, s, s + 1, pol, arg, loc);
    if (!err)
        place_overlaps(q, s);
    return err;
}

void lynx_adopt(Pipeline *p, Pipeline *q)
{
    Pipeline tmp = *p;
    *p = *q;
    *q = tmp;
    PassCall *calls = p->passes;
    uint32_t n = p->npasses;
    p->passes = q->passes;
    p->npasses = q->npasses;
    q->passes = calls;
    q->npasses = n;
    pipeline_free(q);
}

int lynx_plan(Diag *d, Pipeline *p, int32_t lo, int32_t hi, Loc loc)
{
    RecomputePolicy order[RECOMPUTE_MENU_MAX];
    uint32_t oarg[RECOMPUTE_MENU_MAX];
    int norder = recompute_menu(p, order, oarg); /* without a model: none, full */
    int err = 0;
    for (int32_t s = lo; s < hi && !err; s++) {
        if (deps_name_recompute(p, s))
            continue;
        Pipeline *best = NULL;
        double tbest = INFINITY;
        for (int k = 0; k < norder && !err; k++) {
            Pipeline *q = pipeline_clone(p);
            if (p->model)
                err = plan_rank(d, q, s, order[k], oarg[k], loc);
            else if (k == 0)
                place_overlaps(q, s); /* no model: the written R ops, placed */
            else {
                pipeline_free(q);
                break;
            }
            if (err || !rank_fits(q, s)) {
                pipeline_free(q);
                continue;
            }
            double busy = sim_busy_rank(q, s);
            if (busy < tbest * (1 - 1e-12)) {
                pipeline_free(best);
                best = q;
                tbest = busy;
            } else {
                pipeline_free(q);
            }
        }
        if (best)
            lynx_adopt(p, best);
    }
    return err;
}

int pass_lynx_overlap(Diag *d, Pipeline *p, const PassCall *call)
{
    int err = 0;
    int64_t lo = 0, hi = INT32_MAX;
    pass_arg_range(d, call, "stages", &lo, &hi, &err);
    if (err)
        return err;
    if (hi == INT32_MAX)
        hi = p->P;
    if (lo < 0 || lo > hi || hi > p->P) {
        diag_error(d, pass_arg_loc(call, "stages"), DIAG_VALUE,
                   "bad stage range %lld..%lld: the pipeline has %d stages", (long long)lo,
                   (long long)hi, p->P);
        return 1;
    }
    return lynx_plan(d, p, (int32_t)lo, (int32_t)hi, call->loc);
}
