/* partition_adjust.c - the `partition_adjust(verbose=false)` pass: Obscura §7.2,
 * Algorithm 1.
 *
 * On-demand recomputation makes the adjusted ranks slower per micro-batch (3f + r)
 * than the others (3f). The pass moves half-layer units (an attention or an MLP half of
 * a layer, §7.2: the model has 2L + 2 units with the embedding and the head) from the
 * slowest adjusted rank a = argmax_{s adjusted} (3 f_s + r_s) to the fastest non-adjusted
 * rank b = argmin (3 f_s) among those for which the moved partition still fits the
 * budget on every rank, one unit at a time, re-deriving the costs after each move, while
 * the move makes the simulated makespan strictly smaller (Algorithm 1 loops while
 * T_k - C_adj > T_{k+1} on the analytic Eq. 5 model and keeps the partition of the last
 * move that satisfied it; the simulator is the judge here, which needs no
 * approximation). The partition is contiguous: moving a unit from rank a to rank b
 * shifts the boundaries of the ranks between them by one unit each. The result is
 * written to Pipeline.partition (layers, 0.5 steps; partition_set, not even).
 *
 * Needs a model (explicit costs cannot be split into units): without one the pass warns
 * and changes nothing. One chunk per rank. Nothing to do without both adjusted and
 * non-adjusted ranks. Idempotent: it stops when the next move does not help, which a
 * second run finds again at once. Schedules are untouched (only costs change), so the
 * op lists stay legal. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"
#include "passes.h"
#include "sched_util.h"
#include "sim.h"
#include "util.h"

typedef struct Part {
    bool set, even;
    double *v;
    uint32_t n;
} Part;

static Part part_save(const Pipeline *p)
{
    Part s = {p->partition_set, p->partition_even, NULL, p->npartition};
    if (p->npartition) {
        s.v = xmalloc(p->npartition * sizeof *s.v);
        memcpy(s.v, p->partition, p->npartition * sizeof *s.v);
    }
    return s;
}

static void part_restore(Pipeline *p, Part *s)
{
    free(p->partition);
    p->partition = s->v;
    p->npartition = s->n;
    p->partition_set = s->set;
    p->partition_even = s->even;
    s->v = NULL;
}

static double per_mb(const Pipeline *p, int32_t s, bool with_r)
{
    double f = ir_cost(p, s, 0, COST_F);
    return 3 * f + (with_r && p->stage_policy[s] != POLICY_NONE ? ir_cost(p, s, 0, COST_R) : 0);
}

int pass_partition_adjust(Diag *d, Pipeline *p, const PassCall *call)
{
    int err = 0;
    bool verbose = false;
    pass_arg_bool(d, call, "verbose", &verbose, &err);
    if (err)
        return err;
    if (!p->model) {
        diag_warning(d, call->loc, WARN_MODEL,
                     "partition_adjust needs a model to move layers; nothing moved");
        return 0;
    }
    if (p->V != 1) {
        diag_error(d, call->loc, DIAG_VALUE, "pass '%s' needs one chunk per rank (the pipeline has %d)",
                   call->name, p->V);
        return 1;
    }
    int32_t P = p->P, nadj = 0;
    for (int32_t s = 0; s < P; s++)
        nadj += p->adjusted[s] != 0;
    if (nadj == 0 || nadj == P)
        return 0;
    CostModel cm;
    costmodel_get(p, &cm);
    int64_t *units = xmalloc((size_t)P * sizeof *units);
    for (int32_t s = 0; s < P; s++)
        units[s] = cm.ubeg[s + 1] - cm.ubeg[s];
    int64_t total = cm.ubeg[P];
    costmodel_free(&cm);

    void *scratch = NULL;
    double base = sim_makespan(p, &scratch);
    int moves = 0;
    double before = base;
    for (int64_t iter = 0; iter < total; iter++) {
        int32_t a = -1;
        for (int32_t s = 0; s < P; s++)
            if (p->adjusted[s] && units[s] > 1 && (a < 0 || per_mb(p, s, true) > per_mb(p, a, true)))
                a = s;
        if (a < 0)
            break;
        /* non-adjusted ranks, fastest first */
        int32_t *order = xmalloc((size_t)P * sizeof *order);
        int32_t no = 0;
        for (int32_t s = 0; s < P; s++)
            if (!p->adjusted[s])
                order[no++] = s;
        for (int32_t i = 1; i < no; i++)
            for (int32_t j = i; j > 0 && per_mb(p, order[j], false) < per_mb(p, order[j - 1], false); j--) {
                int32_t t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
        bool moved = false;
        for (int32_t i = 0; i < no && !moved; i++) {
            int32_t b = order[i];
            Part saved = part_save(p);
            units[a]--;
            units[b]++;
            cm_set_partition(p, units, P);
            rederive_costs(p);
            double ms = sim_makespan(p, &scratch);
            bool fits = sched_fits(p, NULL); /* the candidate's memory: line 6's M_s <= G */
            if (fits && ms < base * (1 - 1e-9)) {
                free(saved.v);
                base = ms;
                moved = true;
                moves++;
            } else {
                units[a]++;
                units[b]--;
                part_restore(p, &saved);
                rederive_costs(p);
                if (fits && ms < INFINITY) {
                    /* b fits but does not help: Algorithm 1 stops here; a b that does
                     * not fit is passed over for the next fastest (line 6) */
                    i = no;
                }
            }
        }
        free(order);
        if (!moved)
            break;
    }
    sim_scratch_free(scratch);
    if (verbose)
        fprintf(stderr, "partition_adjust: %s: %d half-layer units moved, %.1f ms -> %.1f ms\n",
                p->name ? p->name : "pipeline", moves, before, base);
    free(units);
    return 0;
}
