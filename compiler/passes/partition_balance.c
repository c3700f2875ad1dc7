/* partition_balance.c - Lynx's recomputation-aware model partitioning (Lynx §5, Fig. 8).
 *
 * Legend: P = ranks, V = chunks, P*V virtual stages; L layers = 2L half-layer units
 * (costmodel.h). Times ms.
 *
 * "We aim to iteratively reduce the number of layers in the slowest stage and increase
 * the number of layers in the fastest stage until the execution times across stages are
 * as equal as possible ... If the new partitioning scheme is valid (i.e., no
 * out-of-memory errors) and the longest stage of the new partitioning scheme is shorter
 * than the current longest stage, then the new partitioning scheme is adopted. Repeat
 * ... until the partitioning scheme does not change."
 *
 * A rank's time is the cost model's, with recomputation (Lynx's training cost model):
 * the sum of its compute ops' durations (sim_busy), T_s = sum over its ops of f, b (b - w
 * when split), w, r and the exposed part of each overlapped recompute; every rank keeps its recomputation policy and its R ops, and the
 * costs are re-derived for each candidate partition, so a rank that recomputes is
 * charged its recomputation. One step moves one layer (two half-layer units) from the
 * largest virtual stage of the slowest rank to the smallest virtual stage of the
 * fastest rank. A step is kept when every rank's static memory peak stays within the
 * budget and max_s T_s strictly falls, or stays with fewer ranks at the maximum (ranks
 * tied at the maximum would otherwise end the greedy at once; the pair (max, count)
 * falls lexicographically at every kept step, so the pass terminates); the first step
 * that is not kept ends the pass.
 * verbose=true prints each kept step on stderr.
 *
 * Requires a model (partitions are in layers; `value` error otherwise). Changes only
 * the partition and the derived costs, never the ops, so a legal schedule stays legal.
 * Idempotent: on its own output the first step is not kept. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "costmodel.h"
#include "lynx.h"
#include "memory.h"
#include "passes.h"
#include "sim.h"
#include "util.h"

/* The longest rank time of the cost model (see above); *slow / *fast get the ranks and
 * *nmax the number of ranks within 1e-9 relative of the longest. */
static double rank_times(const Pipeline *p, int32_t *slow, int32_t *fast, int32_t *nmax)
{
    double tmax = -1, tmin = INFINITY;
    double *ts = xmalloc((size_t)p->P * sizeof *ts);
    sim_busy(p, ts);
    for (int32_t s = 0; s < p->P; s++) {
        double t = ts[s];
        if (t > tmax)
            tmax = t, *slow = s;
        if (t < tmin)
            tmin = t, *fast = s;
    }
    *nmax = 0;
    for (int32_t s = 0; s < p->P; s++)
        *nmax += ts[s] >= tmax * (1 - 1e-9);
    free(ts);
    return tmax;
}

int pass_partition_balance(Diag *d, Pipeline *p, const PassCall *call)
{
    return partition_balance_run(d, p, call, NULL);
}

int partition_balance_run(Diag *d, Pipeline *p, const PassCall *call,
                          int (*replan)(Diag *d, Pipeline *q, const PassCall *call))
{
    int err = 0;
    bool verbose = false;
    pass_arg_bool(d, call, "verbose", &verbose, &err);
    if (err)
        return err;
    if (!p->model) {
        diag_error(d, call->loc, DIAG_VALUE,
                   "%s needs a model: it moves layers between stages (Lynx §5)", call->name);
        return 1;
    }
    if (replan && (err = replan(d, p, call)))
        return err;
    CostModel cm;
    costmodel_get(p, &cm);
    int32_t nv = cm.nv;
    int64_t *units = xmalloc((size_t)nv * sizeof *units);
    for (int32_t v = 0; v < nv; v++)
        units[v] = cm.ubeg[v + 1] - cm.ubeg[v];
    costmodel_free(&cm);

    int32_t slow = 0, fast = 0, nmax = 0;
    /* half-layer units moved per step: a layer, or with Lynx-HEU re-planning, half of
     * one (an attention or an MLP block: the cost model's unit, Obscura §7.2) */
    int64_t mv = replan ? 1 : 2;
    double cur = rank_times(p, &slow, &fast, &nmax);
    for (int64_t step = 0; step < 4 * (int64_t)nv * 64 && slow != fast; step++) {
        int32_t vs = -1, vf = -1;
        for (int32_t c = 0; c < p->V; c++) {
            int32_t a = ir_vstage(p, slow, c), b = ir_vstage(p, fast, c);
            if (units[a] >= mv && (vs < 0 || units[a] > units[vs]))
                vs = a;
            if (vf < 0 || units[b] < units[vf])
                vf = b;
        }
        if (vs < 0)
            break;
        Pipeline *q = pipeline_clone(p);
        units[vs] -= mv;
        units[vf] += mv;
        cm_set_partition(q, units, nv);
        int32_t s2 = 0, f2 = 0, n2 = 0;
        rederive_costs(q);
        bool keep = (!replan || replan(d, q, call) == 0) && mem_fits(q, NULL);
        double t = keep ? rank_times(q, &s2, &f2, &n2) : INFINITY;
        /* strictly shorter, or as long with fewer ranks at the longest (ties would
         * otherwise stop the greedy at its first step) */
        keep = keep && (t < cur * (1 - 1e-9) || (t <= cur * (1 + 1e-9) && n2 < nmax));
        if (!keep) {
            pipeline_free(q);
            break;
        }
        if (verbose)
            fprintf(stderr, "partition_balance: one layer from stage %d to stage %d: longest stage "
                            "%.3f ms -> %.3f ms\n", slow, fast, cur, t);
        lynx_adopt(p, q); /* p becomes the candidate (re-planned when replan is given) */
        cur = rank_times(p, &slow, &fast, &nmax);
    }
    free(units);
    return 0;
}
