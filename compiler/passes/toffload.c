/* toffload.c - TPipe's T-Offload (Lin et al., §5, Fig. 7(b), Appendix D), as model-state
 * memory accounting checked against the simulated bubbles.
 *
 * Legend: P = ranks, V = chunks; sizes bytes, times ms, bandwidth bytes/s.
 *
 *   apply toffload(chunks=1, cpu_step=0ms)
 *
 * The deep chunks (`chunks`, a range, default the last chunk) keep their weights' good
 * temporal locality: their gradients are offloaded to the host and their optimizer
 * step runs on the CPU in the cool-down bubble after the chunk's last backward, and
 * their (bf16) weights are reloaded in the next iteration's warm-up bubble before the
 * chunk's first forward. On the device a deep chunk then holds 4 bytes per parameter
 * (bf16 weights and gradients) instead of mixed-precision Adam's 16 (ZeRO §3.1;
 * docs/cost-model.md): the 12 bytes of fp32 master weights and moments live on the host.
 * The pass sets each rank's `weights` to cm_weight_bytes(all its params) - 12 x (its
 * deep chunks' params), as a `costs stage s` value (so apply it after the passes that
 * re-derive costs from a partition).
 *
 * Appendix D's two conditions are checked on the simulated timeline, rank by rank:
 *   offload: 2 x params_deep / host_bw + cpu_step <= makespan - end of the rank's last
 *            deep-chunk B    (Eq. 5-6: the gradients and the CPU step fit the cool-down)
 *   reload:  2 x params_deep / host_bw <= start of the rank's first deep-chunk F
 *            (Eq. 7-8: the bf16 weights come back within the warm-up)
 * A rank where either fails keeps its weights, with a warning naming the shortfall.
 *
 * What is not modelled (pipec has no op kinds for model-state transfers): the transfers
 * and the CPU step do not appear as ops, so they neither occupy the host link in the
 * simulator (they could contend with SO/SI activation swaps) nor appear in the memory
 * walk or the generated code; the conditions above stand in for them.
 *
 * Requires a model (parameter counts) and a device with a host link (`value` error
 * otherwise). Changes no ops; idempotent (the weights are computed from the model,
 * not from the current value). */
#include <math.h>
#include <stdlib.h>

#include "costmodel.h"
#include "passes.h"
#include "sim.h"
#include "util.h"

int pass_toffload(Diag *d, Pipeline *p, const PassCall *call)
{
    int err = 0;
    int64_t lo = p->V - 1, hi = p->V;
    double cpu_step = 0;
    bool has_chunks = pass_arg_range(d, call, "chunks", &lo, &hi, &err);
    pass_arg_num(d, call, "cpu_step", &cpu_step, &err);
    if (err)
        return err;
    if (hi == INT32_MAX)
        hi = p->V;
    if (lo < 0 || hi > p->V || lo >= hi) {
        const Field *f = field_find(call->args, call->nargs, "chunks");
        diag_error(d, has_chunks && f ? f->loc : call->loc, DIAG_VALUE,
                   "chunks %lld..%lld is not a non-empty range of the %d chunks", (long long)lo,
                   (long long)hi, p->V);
        return 1;
    }
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
    if (costmodel_init(d, p, &cm)) {
        costmodel_free(&cm);
        return 1;
    }
    double *keep = xmalloc((size_t)p->P * sizeof *keep), *deep = xmalloc((size_t)p->P * sizeof *deep);
    for (int32_t s = 0; s < p->P; s++) {
        double all = 0, dp = 0;
        for (int32_t c = 0; c < p->V; c++) {
            CmCost cc;
            cm_vstage(&cm, ir_vstage(p, s, c), POLICY_NONE, &cc);
            all += cc.params;
            if (c >= lo && c < hi)
                dp += cc.params;
        }
        deep[s] = dp;
        keep[s] = cm_weight_bytes(all) - 12.0 * dp;
    }
    costmodel_free(&cm);

    /* Appendix D on the simulated timeline (before the change: weights do not move time). */
    SimResult *sr = simulate(p);
    for (int32_t s = 0; s < p->P && !sr->stuck; s++) {
        double bw = ir_cost(p, s, 0, COST_HOST_BW);
        double move = isfinite(bw) && bw > 0 ? 2.0 * deep[s] / bw * 1000.0 : 0.0;
        double last_b = 0, first_f = INFINITY;
        const StageOps *st = &p->stages[s];
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
            diag_warning(d, call->loc,
                         "toffload: stage %d keeps its model states: offload + CPU step %.3f ms "
                         "vs a cool-down bubble of %.3f ms, reload %.3f ms vs a warm-up bubble "
                         "of %.3f ms (TPipe Appendix D)",
                         s, move + cpu_step, cool, move, warm);
            continue;
        }
        p->stage_costs[s].v[COST_WEIGHTS] = keep[s];
        p->stage_costs[s].set |= 1u << COST_WEIGHTS;
        p->stage_costs[s].derived &= ~(1u << COST_WEIGHTS);
    }
    sim_free(sr);
    free(keep);
    free(deep);
    return 0;
}
