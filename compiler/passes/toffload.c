/* toffload.c - TPipe's T-Offload (Lin et al., §5, Fig. 7(b), Appendix D): the deep
 * chunks' model states leave the device, with OG/LW ops for the transfers.
 *
 * Legend: P = ranks, V = chunks; sizes bytes, times ms, bandwidth bytes/s.
 *
 *   apply toffload(chunks=1, cpu_step=0ms)
 *
 * The deep chunks (`chunks`, a range, default the last chunk) have poor weight temporal
 * locality: their gradients are offloaded to the host and their optimizer step runs on
 * the CPU in the cool-down bubble after the chunk's last backward, and their (bf16)
 * weights are reloaded in the next iteration's warm-up bubble before the chunk's first
 * forward. Per rank and deep chunk c (docs/semantics.md "Model-state offload"):
 *   - `LW0.c` is listed first on the rank (it models the reload at the start of the
 *     iteration; on the h2d stream it starts at time 0 and every F of c waits for it);
 *   - `OG0.c` is listed right after the last B or W of c (d2h stream);
 *   - `costs vstage v { grads 2n  wload 2n  opt_host cpu_step x n / n_deep }`, n = the
 *     chunk's parameters: bf16 gradients out, bf16 weights back;
 *   - the rank's `weights` lose all 16 bytes per parameter of the deep chunks
 *     (cm_weight_bytes; mixed-precision Adam, ZeRO §3.1): the fp32 master weights and
 *     moments live on the host, the bf16 weights and gradients (4 bytes per parameter)
 *     are on the device from LW to OG only (the memory walk adds them at LW).
 * Apply it last: passes that rebuild op lists or re-derive costs drop what it added.
 *
 * Appendix D's two conditions decide, rank by rank, on the timeline simulated before
 * the change:
 *   offload: 2 x params_deep / host_bw + cpu_step <= makespan - end of the rank's last
 *            deep-chunk B    (Eq. 5-6: the gradients and the CPU step fit the cool-down)
 *   reload:  2 x params_deep / host_bw <= start of the rank's first deep-chunk F
 *            (Eq. 7-8: the bf16 weights come back within the warm-up)
 * A rank where either fails keeps its model states, with a warning naming the shortfall.
 * The transfers are ops, so the simulation after the change also shows their contention
 * with SO/SI swaps on the host link; a makespan that grows is warned about.
 *
 * Requires a model (parameter counts) and a device with a host link (`value` error
 * otherwise). Idempotent: a rank that already has OG/LW for a deep chunk is left alone. */
#include <math.h>
#include <stdlib.h>

#include "costmodel.h"
#include "opsem.h"
#include "passes.h"
#include "sim.h"
#include "util.h"

/* Inserts LW0.c for c in [lo, hi) at the head of st's list and OG0.c right after the
 * last B or W of c (at the end when c has none). */
static void insert_ops(StageOps *st, int32_t lo, int32_t hi, Loc loc)
{
    uint32_t n = st->n, nk = (uint32_t)(hi - lo);
    uint32_t *last = xmalloc(nk * sizeof *last);
    for (uint32_t k = 0; k < nk; k++)
        last[k] = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++) {
        const Op *o = &st->ops[i];
        if (op_backward(o->kind) && o->chunk >= lo && o->chunk < hi)
            last[o->chunk - lo] = i;
    }
    Op *ops = xmalloc(((size_t)n + 2 * nk) * sizeof *ops);
    uint32_t k = 0;
    for (int32_t c = lo; c < hi; c++)
        ops[k++] = (Op){.mb = 0, .kind = OP_LW, .chunk = (uint8_t)c, .loc = loc};
    for (uint32_t c = 0; c < nk; c++)
        if (last[c] == UINT32_MAX && n == 0)
            ops[k++] = (Op){.mb = 0, .kind = OP_OG, .chunk = (uint8_t)(lo + (int32_t)c), .loc = loc};
    for (uint32_t i = 0; i < n; i++) {
        ops[k++] = st->ops[i];
        for (uint32_t c = 0; c < nk; c++)
            if (last[c] == i || (last[c] == UINT32_MAX && i == n - 1))
                ops[k++] = (Op){.mb = 0, .kind = OP_OG, .chunk = (uint8_t)(lo + (int32_t)c), .loc = loc};
    }
    free(st->ops);
    st->ops = ops;
    st->n = st->cap = k;
    free(last);
}

int pass_toffload(Diag *d, Pipeline *p, const PassCall *call)
{
    int err = 0;
    int64_t lo = p->V - 1, hi = p->V;
    double cpu_step = 0;
    pass_arg_range(d, call, "chunks", &lo, &hi, &err);
    pass_arg_num(d, call, "cpu_step", &cpu_step, &err);
    if (err)
        return err;
    if (!pass_chunks_in_range(d, call, p->V, &lo, &hi))
        return 1;
    if (!(cpu_step >= 0) || !isfinite(cpu_step)) {
        diag_error(d, call->loc, DIAG_VALUE, "cpu_step must be a time >= 0");
        return 1;
    }
    if (!p->model) {
        diag_error(d, call->loc, DIAG_VALUE,
                   "toffload needs a model: it moves the deep chunks' model states (TPipe §5)");
        return 1;
    }
    CostModel cm;
    costmodel_get(p, &cm);
    double *keep = xmalloc((size_t)p->P * sizeof *keep), *deep = xmalloc((size_t)p->P * sizeof *deep);
    double *cp = xmalloc((size_t)p->P * (size_t)p->V * sizeof *cp);
    CmDp dps = cm_dp(p);
    for (int32_t s = 0; s < p->P; s++) {
        double all = 0, dp = 0;
        for (int32_t c = 0; c < p->V; c++) {
            CmCost cc;
            cm_vstage(&cm, ir_vstage(p, s, c), POLICY_NONE, &cc);
            cp[(size_t)s * p->V + c] = cc.params;
            all += cc.params;
            if (c >= lo && c < hi)
                dp += cc.params;
        }
        deep[s] = dp;
        keep[s] = cm_weight_bytes(all, &dps) - cm_weight_bytes(dp, &dps);
    }
    costmodel_free(&cm);

    /* Appendix D on the timeline before the change. */
    SimResult *sr = simulate(p);
    double before = sr->makespan_ms;
    int changed = 0;
    for (int32_t s = 0; s < p->P && !sr->stuck; s++) {
        StageOps *st = &p->stages[s];
        bool done = false;
        for (uint32_t i = 0; i < st->n; i++)
            done |= OP_IS_CHUNKWIDE(st->ops[i].kind) && st->ops[i].chunk >= lo && st->ops[i].chunk < hi;
        if (done || !(deep[s] > 0))
            continue;
        double bw = ir_cost(p, s, 0, COST_HOST_BW);
        double move = isfinite(bw) && bw > 0 ? 2.0 * deep[s] / bw * 1000.0 : 0.0;
        double last_b = 0, first_f = INFINITY;
        for (uint32_t i = 0; i < st->n; i++) {
            const Op *o = &st->ops[i];
            if (o->chunk < lo || o->chunk >= hi)
                continue;
            if (o->kind == OP_B)
                last_b = fmax(last_b, sr->end[s][i]);
            if (o->kind == OP_F)
                first_f = fmin(first_f, sr->start[s][i]);
        }
        double cool = sr->makespan_ms - last_b, warm = isfinite(first_f) ? first_f : 0;
        if (move + cpu_step > cool + 1e-9 || move > warm + 1e-9) {
            diag_warning(d, call->loc, WARN_PASS,
                         "toffload: stage %d keeps its model states: offload + CPU step %.3f ms "
                         "vs a cool-down bubble of %.3f ms, reload %.3f ms vs a warm-up bubble "
                         "of %.3f ms (TPipe Appendix D)",
                         s, move + cpu_step, cool, move, warm);
            continue;
        }
        p->stage_costs[s].v[COST_WEIGHTS] = cost_quantise(COST_WEIGHTS, keep[s]);
        p->stage_costs[s].set |= 1u << COST_WEIGHTS;
        p->stage_costs[s].derived &= ~(1u << COST_WEIGHTS);
        for (int32_t c = (int32_t)lo; c < hi; c++) {
            double n = cp[(size_t)s * p->V + c];
            CostBlock *b = &p->vstage_costs[ir_vstage(p, s, c)];
            const double val[3] = {2.0 * n, 2.0 * n, cpu_step * n / deep[s]};
            const CostField fl[3] = {COST_GRADS, COST_WLOAD, COST_OPT_HOST};
            for (int k = 0; k < 3; k++) {
                b->v[fl[k]] = cost_quantise(fl[k], val[k]);
                b->set |= 1u << fl[k];
                b->derived &= ~(1u << fl[k]);
            }
        }
        insert_ops(st, (int32_t)lo, (int32_t)hi, call->loc);
        changed++;
    }
    sim_free(sr);
    if (changed) {
        sr = simulate(p);
        if (!sr->stuck && sr->makespan_ms > before * (1 + 1e-9) + 1e-9)
            diag_warning(d, call->loc, WARN_PASS,
                         "toffload: the model-state transfers lengthen the makespan from %.3f "
                         "to %.3f ms (they share the host link with swaps and earlier "
                         "model-state transfers)",
                         before, sr->makespan_ms);
        sim_free(sr);
    }
    free(cp);
    free(keep);
    free(deep);
    return 0;
}
