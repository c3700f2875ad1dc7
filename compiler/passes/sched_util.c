/* sched_util.c - the 1F1B-family shape the Obscura passes share; see sched_util.h. */
#include "sched_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "arena_plan.h"
#include "memory.h"
#include "passes.h"
#include "util.h"

#define LOCI(sh, s, m, k) ((((size_t)(s) * (size_t)(sh)->M) + (size_t)(m)) * OP_NKINDS + (size_t)(k))

int32_t sched_warm_1f1b(int32_t P, int32_t M, int32_t s)
{
    return P - s < M ? P - s : M;
}

void sched_free(SchedShape *sh)
{
    free(sh->warm);
    free(sh->rec);
    free(sh->swp);
    free(sh->loc);
    memset(sh, 0, sizeof *sh);
}

static int misfit(Diag *d, const PassCall *call, SchedShape *sh, int32_t s, const char *why)
{
    diag_error(d, call->loc, DIAG_VALUE,
               "pass '%s' needs a 1F1B-family schedule (one chunk; forwards and backwards in "
               "micro-batch order, each backward i after min(M, W + i) forwards); rank %d %s",
               call->name, s, why);
    sched_free(sh);
    return 1;
}

int sched_read(Diag *d, const Pipeline *p, const PassCall *call, SchedShape *sh)
{
    memset(sh, 0, sizeof *sh);
    if (p->V != 1) {
        diag_error(d, call->loc, DIAG_VALUE,
                   "pass '%s' needs one chunk per rank (the pipeline has %d)", call->name, p->V);
        return 1;
    }
    int32_t P = p->P, M = p->M;
    sh->P = P;
    sh->M = M;
    sh->warm = xcalloc((size_t)P, sizeof *sh->warm);
    sh->rec = xcalloc((size_t)P * (size_t)M, 1);
    sh->swp = xcalloc((size_t)P * (size_t)M, 1);
    sh->loc = xmalloc((size_t)P * (size_t)M * OP_NKINDS * sizeof *sh->loc);
    for (size_t i = 0; i < (size_t)P * (size_t)M * OP_NKINDS; i++)
        sh->loc[i] = LOC_NONE;
    uint8_t *seen = xmalloc((size_t)M * OP_NKINDS);
    for (int32_t s = 0; s < P; s++) {
        const StageOps *st = &p->stages[s];
        uint32_t nf = 0, nb = 0;
        memset(seen, 0, (size_t)M * OP_NKINDS);
        for (uint32_t i = 0; i < st->n; i++) {
            const Op *o = &st->ops[i];
            if (o->chunk != 0 || o->mb >= (uint32_t)M) {
                free(seen);
                return misfit(d, call, sh, s, "has an op outside chunk 0 or the micro-batches");
            }
            uint32_t m = o->mb;
            if (seen[m * OP_NKINDS + o->kind]) {
                free(seen);
                return misfit(d, call, sh, s, "lists an op twice");
            }
            seen[m * OP_NKINDS + o->kind] = 1;
            sh->loc[LOCI(sh, s, m, o->kind)] = o->loc;
            switch (o->kind) {
            case OP_F:
                if (m != nf) {
                    free(seen);
                    return misfit(d, call, sh, s, "lists its forwards out of micro-batch order");
                }
                nf++;
                break;
            case OP_B: {
                if (m != nb) {
                    free(seen);
                    return misfit(d, call, sh, s, "lists its backwards out of micro-batch order");
                }
                if (nb == 0)
                    sh->warm[s] = (int32_t)nf;
                int64_t want = (int64_t)sh->warm[s] + nb;
                if (want > M)
                    want = M;
                if (nf != want || nf == 0) {
                    free(seen);
                    return misfit(d, call, sh, s, "does not alternate forwards and backwards after its warm-up");
                }
                nb++;
                break;
            }
            case OP_R:
                sh->rec[(size_t)s * M + m] = 1;
                break;
            case OP_SO:
            case OP_SI:
                sh->swp[(size_t)s * M + m] = 1;
                break;
            default:
                free(seen);
                return misfit(d, call, sh, s, "has W ops (split backwards are not supported)");
            }
        }
        if (nf != (uint32_t)M || nb != (uint32_t)M) {
            free(seen);
            return misfit(d, call, sh, s, "does not list every forward and backward");
        }
    }
    free(seen);
    return 0;
}

static void emit(StageOps *st, const SchedShape *sh, int32_t s, OpKind k, int32_t m, Loc loc)
{
    Op o = {0};
    o.kind = (uint8_t)k;
    o.mb = (uint32_t)m;
    Loc l = sh->loc[LOCI(sh, s, m, k)];
    if (l.file == LOC_NONE_FILE) /* a new op: where its micro-batch's forward was written */
        l = sh->loc[LOCI(sh, s, m, OP_F)];
    o.loc = l.file == LOC_NONE_FILE ? loc : l;
    stage_push(st, o);
}

static bool is_compute(uint8_t k)
{
    return k == OP_F || k == OP_B || k == OP_R || k == OP_W;
}

/* dep from the compute op listed last on rank s to the SI just appended */
static void dep_si(Pipeline *p, int32_t s, size_t *cap)
{
    const StageOps *st = &p->stages[s];
    const Op *si = &st->ops[st->n - 1];
    for (uint32_t i = st->n - 1; i-- > 0;) {
        const Op *o = &st->ops[i];
        if (!is_compute(o->kind))
            continue;
        Dep dp = {{o->mb, (uint16_t)s, o->kind, o->chunk}, {si->mb, (uint16_t)s, si->kind, si->chunk}, si->loc};
        VEC_PUSH(p->deps, p->ndeps, *cap, dp);
        return;
    }
}

/* Lists SI(m) on rank s with its dep_si gate, unless m does not swap or its SI is
 * listed already (si_done[m], then set). */
static void emit_si(Pipeline *p, const SchedShape *sh, int32_t s, int32_t m, uint8_t *si_done,
                    size_t *cap, Loc loc)
{
    if (!sh->swp[(size_t)s * sh->M + m] || si_done[m])
        return;
    emit(&p->stages[s], sh, s, OP_SI, m, loc);
    dep_si(p, s, cap);
    si_done[m] = 1;
}

void sched_write(Pipeline *p, const SchedShape *sh, Loc loc)
{
    int32_t P = sh->P, M = sh->M;
    /* drop the SI gates an earlier write added; a new set follows the new lists */
    uint32_t nd = 0;
    for (uint32_t i = 0; i < p->ndeps; i++) {
        const Dep *dp = &p->deps[i];
        if (dp->to.kind == OP_SI && dp->from.stage == dp->to.stage && is_compute(dp->from.kind))
            continue;
        p->deps[nd++] = *dp;
    }
    p->ndeps = nd;
    size_t cap = p->depcap;
    for (int32_t s = 0; s + 1 < P; s++)
        if (sh->warm[s] < sh->warm[s + 1])
            die("sched_write: warm counts must not increase (rank %d: %d < %d)", s, sh->warm[s],
                sh->warm[s + 1]);
    for (int32_t s = 0; s < P; s++) {
        StageOps *st = &p->stages[s];
        const uint8_t *rec = sh->rec + (size_t)s * M, *swp = sh->swp + (size_t)s * M;
        st->n = 0;
        int32_t nf = 0;
        uint8_t *si_done = xcalloc((size_t)M, 1);
        bool swaps = false;
        for (int32_t m = 0; m < M && !swaps; m++)
            swaps = swp[m] != 0;
        /* bound[m]: R(m) waits for B(m) of rank s + 1 (a binding line, passes.h) */
        uint8_t *bound = xcalloc((size_t)M, 1);
        for (uint32_t k = 0; k < p->ndeps; k++)
            if (p->deps[k].to.stage == s && p->deps[k].to.mb < (uint32_t)M &&
                recompute_dep_is_binding(p, &p->deps[k]))
                bound[p->deps[k].to.mb] = 1;
        for (int32_t i = 0; i < M; i++) {
            int64_t c = (int64_t)sh->warm[s] + i;
            if (c > M)
                c = M;
            /* R(i) ahead of the step's forwards, unless bound: it would hold them until
             * the gradient arrives (§5.1); a bound R(i) follows them, ahead of their SO */
            bool early = swaps && rec[i] && i < nf && !bound[i];
            bool after_f = swaps && rec[i] && bound[i];
            if (early) {
                emit_si(p, sh, s, i, si_done, &cap, loc);
                emit(st, sh, s, OP_R, i, loc);
            }
            /* SO(m) after the next forward of the same run (the warm-up), else after F(m) */
            int32_t so = -1, run = (int32_t)c - nf;
            for (; nf < c; nf++) {
                /* the warm-up's first load starts one forward early: its backward
                 * follows the last warm-up forward, which has no later step to hide in */
                if (run > 1 && nf == c - 1 && i + 1 < nf)
                    emit_si(p, sh, s, i, si_done, &cap, loc);
                emit(st, sh, s, OP_F, nf, loc);
                if (so >= 0)
                    emit(st, sh, s, OP_SO, so, loc);
                so = swp[nf] ? nf : -1;
            }
            if (after_f) {
                emit_si(p, sh, s, i, si_done, &cap, loc);
                emit(st, sh, s, OP_R, i, loc);
            }
            if (so >= 0)
                emit(st, sh, s, OP_SO, so, loc);
            /* SI(i) if not prefetched; then prefetch SI(i+1) when its SO is listed */
            emit_si(p, sh, s, i, si_done, &cap, loc);
            if (i + 1 < M && i + 1 < nf)
                emit_si(p, sh, s, i + 1, si_done, &cap, loc);
            if (rec[i] && !early && !after_f)
                emit(st, sh, s, OP_R, i, loc);
            emit(st, sh, s, OP_B, i, loc);
        }
        free(si_done);
        free(bound);
    }
    p->depcap = (uint32_t)(cap > UINT32_MAX ? UINT32_MAX : cap);
}

void sched_keep_lag(SchedShape *sh, const uint8_t *sel)
{
    for (int32_t s = 1; s < sh->P; s++) {
        if (!sel[s])
            continue;
        int32_t cap = sh->warm[s - 1] == sh->M ? sh->M : sh->warm[s - 1] - 1;
        if (sh->warm[s] > cap)
            sh->warm[s] = cap;
    }
}

bool sched_select(Diag *d, const Pipeline *p, const PassCall *call, uint8_t *sel, int *err)
{
    int64_t lo = 0, hi = 0;
    memset(sel, 0, (size_t)p->P);
    if (pass_arg_range(d, call, "stages", &lo, &hi, err)) {
        if (hi == INT32_MAX)
            hi = p->P;
        if (lo < 0 || lo > hi || hi > p->P) {
            diag_error(d, pass_arg_loc(call, "stages"), DIAG_VALUE,
                       "stage range %lld..%lld is out of range: the pipeline has %d stages",
                       (long long)lo, (long long)hi, p->P);
            (*err)++;
            return false;
        }
        for (int64_t s = lo; s < hi; s++)
            sel[s] = 1;
        return true;
    }
    if (*err)
        return false;
    for (int32_t s = 0; s < p->P; s++)
        sel[s] = p->adjusted[s] != 0;
    return true;
}

int32_t sched_last_adjusted(const Pipeline *p)
{
    int32_t k = -1;
    for (int32_t s = 0; s < p->P; s++)
        if (p->adjusted[s])
            k = s;
    return k;
}

int sched_recompute(Diag *d, Pipeline *p, int32_t lo, int32_t hi, RecomputePolicy pol,
                    uint32_t arg, Loc loc)
{
    Field args[3];
    char keep[256];
    memset(args, 0, sizeof args);
    args[0].key = (char *)"stages";
    args[0].val.kind = VAL_RANGE;
    args[0].val.lo = lo;
    args[0].val.hi = hi;
    args[0].val.loc = args[0].loc = loc;
    args[1].key = (char *)"policy";
    args[1].val.kind = VAL_IDENT;
    args[1].val.str = (char *)policy_name[pol];
    args[1].val.loc = args[1].loc = loc;
    uint32_t n = 2;
    if (pol == POLICY_BLOCK) {
        args[2].key = (char *)"layers";
        args[2].val.kind = VAL_NUM;
        args[2].val.num = arg;
        args[2].val.loc = args[2].loc = loc;
        n = 3;
    } else if (pol == POLICY_KEEP) {
        keep_format(arg, keep, sizeof keep);
        args[2].key = (char *)"keep";
        args[2].val.kind = VAL_STRING;
        args[2].val.str = keep;
        args[2].val.loc = args[2].loc = loc;
        n = 3;
    }
    PassCall call = {(char *)"recompute", args, n, loc};
    return pass_recompute(d, p, &call);
}

bool sched_fits(const Pipeline *p, uint8_t *over)
{
    if (!mem_fits(p, over))
        return false;
    if (!p->has_memory)
        return true;
    bool ok = true;
    /* the static arena packs the same regions and can need more than the walk's peak */
    ArenaPlan *a = arena_plan_within(p, NULL, 0, p->memory, true);
    for (int32_t s = 0; s < p->P; s++)
        if (ir_cost(p, s, 0, COST_WEIGHTS) + (double)arena_charged(&a->rank[s]) > p->memory) {
            ok = false;
            if (over)
                over[s] = 1;
        }
    arena_plan_free(a);
    return ok;
}

void sched_set_beta(Pipeline *p, int32_t s, double beta)
{
    CostBlock *cb = &p->stage_costs[s];
    cb->v[COST_SWAP_FRACTION] = beta;
    cb->set |= 1u << COST_SWAP_FRACTION;
    cb->derived &= ~(1u << COST_SWAP_FRACTION);
}

int sched_begin(Diag *d, const Pipeline *p, const PassCall *call, uint8_t **sel, SchedShape *sh)
{
    int err = 0;
    *sel = xmalloc((size_t)p->P + 1);
    if (!sched_select(d, p, call, *sel, &err) || sched_read(d, p, call, sh)) {
        free(*sel);
        *sel = NULL;
        return err ? err : 1;
    }
    return 0;
}

int sched_migrate(Diag *d, Pipeline *p, const PassCall *call, int32_t extra)
{
    uint8_t *sel;
    SchedShape sh;
    int err = sched_begin(d, p, call, &sel, &sh);
    if (err)
        return err;
    for (int32_t s = 0; s < p->P; s++) {
        if (!sel[s])
            continue;
        int64_t want = 3 * ((int64_t)p->P - s - 1) + extra;
        if (want > p->M)
            want = p->M;
        if (want > sh.warm[s])
            sh.warm[s] = (int32_t)want;
    }
    sched_keep_lag(&sh, sel);
    sched_write(p, &sh, call->loc);
    sched_free(&sh);
    free(sel);
    return 0;
}
