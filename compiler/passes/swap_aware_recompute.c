/* swap_aware_recompute.c - the `swap_aware_recompute(verbose=false)` pass: Obscura §6.2,
 * Eq. 2-4.
 *
 * Recomputing more leaves fewer bytes to swap; recomputing less leaves more swapping,
 * whose transfers may no longer hide behind compute. The pass picks, for the adjusted
 * ranks, one recomputation policy (the paper gives the adjusted stages one strategy,
 * §9.3), the warm-up eviction count lambda of the last adjusted rank k (rank s evicts
 * lambda + (k - s), swap.c) and the swapped fraction beta, to
 *
 *     minimise the makespan
 *     s.t. every rank's static peak <= the budget                    (Eq. 4, M_s <= G)
 *          a_adj * beta <= (3 f_s + r_s) * B_s on each swapping rank  (Eq. 4)
 *
 * where a_adj is the bytes a micro-batch keeps on the rank (ckpt with R, else act) and
 * B_s the rank's host_bw. The objective is the simulator (sim_makespan over variants on
 * pipeline_clone copies), not the paper's analytic Eq. 2-3, which assumes b = 2f, the
 * same f on every rank and no p2p time. Candidates: the policies of recompute_menu (with
 * a model none, cmb, selective, the keep-sets of cm_keep_ladder, mlp, full: Obscura's
 * swapping-aware recomputation chooses sets of operators, about 0.39 of a forward in
 * Fig. 14, not only whole policies; without a model none and full); beta in {1/4, 1/2, 3/4, 1}; how many of the migrated
 * forwards the adjusted ranks keep (all, none, 1, 2, 4, ...: migration buys bubbles
 * with memory, which swapping or recomputation must then pay); lambda ascending from 0,
 * up to three values past the first that fits (memory falls with lambda). The
 * current state is a candidate too, so the pass never makes a fitting pipeline slower;
 * when no candidate fits, the pipeline is left as it was (check reports the memory).
 *
 * With verbose=true it writes one line to stderr: the choice, the simulated makespan and
 * Eq. 3's T_0 for the same choice (eq23_makespan), and how far they differ.
 *
 * Requires a 1F1B-family schedule. Nothing to do without adjusted ranks. Idempotent in
 * effect: a second run finds the same optimum (the current state is a candidate and
 * only a strictly faster variant replaces it). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"
#include "passes.h"
#include "sched_util.h"
#include "sim.h"
#include "util.h"

/* The bytes one micro-batch keeps on rank s between its forward and backward. */
static double kept_bytes(const Pipeline *p, int32_t s)
{
    return p->stage_policy[s] != POLICY_NONE ? ir_cost(p, s, 0, COST_CKPT) : ir_cost(p, s, 0, COST_ACT);
}

static double rec_ms(const Pipeline *p, int32_t s)
{
    return p->stage_policy[s] != POLICY_NONE ? ir_cost(p, s, 0, COST_R) : 0;
}

/* Eq. 4's bandwidth constraint on every rank that swaps. */
static bool bandwidth_ok(const Pipeline *p)
{
    for (int32_t s = 0; s < p->P; s++) {
        const StageOps *st = &p->stages[s];
        bool swaps = false;
        for (uint32_t i = 0; i < st->n && !swaps; i++)
            swaps = st->ops[i].kind == OP_SO;
        if (!swaps)
            continue;
        double f = ir_cost(p, s, 0, COST_F), B = ir_cost(p, s, 0, COST_HOST_BW);
        double beta = ir_cost(p, s, 0, COST_SWAP_FRACTION);
        if (kept_bytes(p, s) * beta > (3 * f + rec_ms(p, s)) * 1e-3 * B)
            return false;
    }
    return true;
}

double obscura_eq23(const Pipeline *p, int64_t lambda, double beta)
{
    int32_t k = sched_last_adjusted(p), P = p->P;
    double M = p->M, T = 0;
    for (int32_t s = P - 1; s >= 0; s--) {
        double f = ir_cost(p, s, 0, COST_F);
        if (s > k) {
            T = 3 * M * f + 3.0 * (P - s - 1) * f;
            continue;
        }
        double r = rec_ms(p, s), g = 3 * f + r, B = ir_cost(p, s, 0, COST_HOST_BW);
        double ls = lambda ? (double)(lambda + (k - s)) : 0;
        double x = isfinite(B) && B > 0 ? kept_bytes(p, s) * beta / B * 1e3 : 0; /* ms */
        double tc = fmax(ls * (x - f) - (k - s) * (2 * f + r), 0) + fmax(ls * (x - 2 * f - r), 0);
        double own = g * M + (k - s) * g + tc;
        T = s == P - 1 ? own : fmax(T + g, own);
    }
    return T;
}

typedef struct Choice {
    RecomputePolicy pol;
    uint32_t arg;   /* the policy's argument (keep's mask) */
    int64_t extra;  /* migrated forwards kept per adjusted rank; -1: as the input */
    int64_t lambda;
    double beta;
    double ms;
} Choice;

/* Applies a candidate to q (a clone): policy on the adjusted ranks; with extra >= 0 the
 * adjusted ranks keep at most extra forwards beyond 1F1B's warm-up (never more than
 * they had); then swap. */
static int apply(Diag *d, Pipeline *q, const PassCall *call, RecomputePolicy pol, uint32_t arg,
                 int64_t extra, int64_t lambda, double beta, Loc loc)
{
    int err = 0;
    if (extra >= 0) {
        SchedShape sh;
        if (sched_read(d, q, call, &sh))
            return 1;
        for (int32_t s = 0; s < q->P; s++) {
            int64_t w = (int64_t)sched_warm_1f1b(q->P, q->M, s) + extra;
            if (q->adjusted[s] && w < sh.warm[s])
                sh.warm[s] = (int32_t)w;
        }
        sched_write(q, &sh, loc);
        sched_free(&sh);
    }
    for (int32_t s = 0; s < q->P && !err; s++)
        if (q->adjusted[s] && (q->stage_policy[s] != pol || q->stage_policy_arg[s] != arg))
            err = sched_recompute(d, q, s, s + 1, pol, arg, loc);
    if (err)
        return err;
    Field args[2];
    memset(args, 0, sizeof args);
    args[0].key = (char *)"lambda";
    args[0].val.kind = VAL_NUM;
    args[0].val.num = (double)lambda;
    args[0].val.loc = args[0].loc = loc;
    args[1].key = (char *)"beta";
    args[1].val.kind = VAL_NUM;
    args[1].val.num = beta;
    args[1].val.loc = args[1].loc = loc;
    PassCall sc = {(char *)"swap", args, 2, loc};
    return pass_swap(d, q, &sc);
}

int pass_swap_aware_recompute(Diag *d, Pipeline *p, const PassCall *call)
{
    int err = 0;
    bool verbose = false;
    pass_arg_bool(d, call, "verbose", &verbose, &err);
    if (err)
        return err;
    int32_t k = sched_last_adjusted(p);
    if (k < 0)
        return 0;
    SchedShape sh;
    if (sched_read(d, p, call, &sh))
        return 1;
    int64_t lmax = sh.warm[0] - 1, xmax = sh.warm[0] - sched_warm_1f1b(p->P, p->M, 0);
    sched_free(&sh);

    RecomputePolicy pols[RECOMPUTE_MENU_MAX];
    uint32_t pargs[RECOMPUTE_MENU_MAX];
    int npol = recompute_menu(p, pols, pargs);
    static const double betas[] = {0.25, 0.5, 0.75, 1.0};
    void *scratch = NULL;
    Choice best = {POLICY_N, 0, -1, 0, 1.0, INFINITY};
    if (sched_fits(p, NULL))
        best.ms = sim_makespan(p, &scratch);
    /* migrated forwards kept: all (-1), none (0), and powers of two between */
    int64_t extras[40];
    int nx = 0;
    extras[nx++] = -1;
    for (int64_t x = 0; x < xmax && nx < 40; x = x ? 2 * x : 1)
        extras[nx++] = x;
    /* lambda ascending: memory falls with lambda, time mostly grows, so after the first
     * lambda that fits only a few more are tried (SEARCH_AFTER_FIT) */
    enum { SEARCH_AFTER_FIT = 3 };
    for (int ip = 0; ip < npol && !err; ip++)
        for (int ix = 0; ix < nx && !err; ix++)
            for (int ib = 0; ib < 4 && !err; ib++) {
                int after = -1;
                for (int64_t lam = 0; lam <= lmax && !err && after < SEARCH_AFTER_FIT; lam++) {
                    if (lam == 0 && ib > 0)
                        continue; /* beta is moot without swaps */
                    double beta = lam ? betas[ib] : 1.0;
                    Pipeline *q = pipeline_clone(p);
                    err = apply(d, q, call, pols[ip], pargs[ip], extras[ix], lam, beta, call->loc);
                    if (!err && sched_fits(q, NULL) && bandwidth_ok(q)) {
                        double ms = sim_makespan(q, &scratch);
                        if (ms < best.ms * (1 - 1e-9))
                            best = (Choice){pols[ip], pargs[ip], extras[ix], lam, beta, ms};
                        if (after < 0)
                            after = 0;
                    }
                    if (after >= 0)
                        after++;
                    pipeline_free(q);
                }
            }
    sim_scratch_free(scratch);
    if (err)
        return err;
    if (best.pol != POLICY_N)
        err = apply(d, p, call, best.pol, best.arg, best.extra, best.lambda, best.beta, call->loc);
    if (!err && verbose) {
        int64_t lam = best.pol == POLICY_N ? -1 : best.lambda;
        void *sc = NULL;
        double ms = sim_makespan(p, &sc), eq = obscura_eq23(p, lam < 0 ? 0 : lam, best.beta);
        char pname[320];
        fprintf(stderr,
                "swap_aware_recompute: %s: adjusted ranks 0..%d policy %s lambda %lld beta %.2f: "
                "simulated %.1f ms, eq23_makespan %.1f ms (%+.1f%%)\n",
                p->name ? p->name : "pipeline", k,
                policy_format(p->stage_policy[k], p->stage_policy_arg[k], pname, sizeof pname),
                (long long)(lam < 0 ? 0 : lam), best.beta, ms, eq, 100 * (eq - ms) / ms);
        sim_scratch_free(sc);
    }
    return err;
}
