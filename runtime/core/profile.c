/* profile.c - the `--profile` costs block of a run (docs/runtime.md "Profiling"): the
 * measured op times per virtual stage, the measured p2p time and host bandwidth, in
 * the pipe language's `costs` syntax, for `pipec` to read back. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>

#include "core.h"

/* The index of the op of kind k for (v, m) in rank description d, or -1. */
static int64_t find_op(const PrRankDesc *d, int k, int v, int m)
{
    for (uint32_t i = 0; i < d->nops; i++)
        if (d->ops[i].kind == k && d->ops[i].vstage == v && d->ops[i].mb == m)
            return i;
    return -1;
}

/* The op of the compute thread (F, B, W, R) before op i of d, or -1. */
static int64_t prev_compute(const PrRankDesc *d, int64_t i)
{
    while (--i >= 0) {
        int k = d->ops[i].kind;
        if (pr_copy_dir(k) < 0)
            return i;
    }
    return -1;
}

/* The measured p2p time, ms: over the iterations after the first, the mean delay from
 * the end of a message's producing op to the start of its consuming op, counted where
 * the consumer's rank had nothing else to do (its previous op had ended before the
 * producer's end) - the simulator's dependency edge, max(previous end, producer end +
 * p2p), solved for p2p. It is the send, the receiver's wake-up and its receive; 0 when
 * no message was waited for or when the ranks' ops were not all timed here (MPI). */
static double measured_p2p_ms(const PrRun *run)
{
    const PrProgram *g = run->prog;
    double sum = 0;
    long n = 0;
    for (uint32_t k = 0; k < g->nmsgs; k++) {
        const PrMsg *m = &g->msgs[k];
        const PrRank *a = &run->rank[m->src], *b = &run->rank[m->dst];
        int64_t pi = find_op(a->d, m->from_kind, m->from_v, m->from_mb);
        int64_t ci = find_op(b->d, m->to_kind, m->to_v, m->to_mb);
        if (pi < 0 || ci < 0 || prev_compute(b->d, ci) < 0)
            continue;
        for (int it = 1; it < run->opt.iters; it++) {
            const PrSpan *p = &a->span[(size_t)it * a->d->nops + (size_t)pi];
            const PrSpan *c = &b->span[(size_t)it * b->d->nops + (size_t)ci];
            const PrSpan *prev = &b->span[(size_t)it * b->d->nops + (size_t)prev_compute(b->d, ci)];
            if (p->t1 <= 0 || c->t0 <= 0 || prev->t1 <= 0 || prev->t1 >= p->t1 || c->t0 < p->t1)
                continue;
            sum += c->t0 - p->t1;
            n++;
        }
    }
    return n ? sum / (double)n : 0;
}

/* The `costs` block of measured op times (docs/runtime.md "Profiling"): per virtual
 * stage the mean F, B (+ W when split, since `b` is the whole backward), W and R times
 * over the iterations after the first, the measured p2p time (measured_p2p_ms) and the
 * real region bytes of the mlp workload. */
int pr_profile_write(const PrRun *run)
{
    const PrProgram *g = run->prog;
    FILE *f = stdout;
    if (run->opt.profile_out && !(f = fopen(run->opt.profile_out, "w")))
        return -1;
    fprintf(f, "# op costs measured by `pipec run --profile` (workload %s, %d iterations)\n",
            pr_workload_name(g, run->opt.workload), run->opt.iters);
    fprintf(f, "costs { p2p %.6fms }\n", measured_p2p_ms(run));
    for (int v = 0; v < run->PV; v++) {
        const PrRank *r = &run->rank[g->vstages[v].rank];
        double mean[PR_NKINDS];
        for (int k = 0; k < PR_NKINDS; k++) {
            size_t kk = (size_t)v * PR_NKINDS + (size_t)k;
            mean[k] = r->kind_n[kk] ? r->kind_ms[kk] / r->kind_n[kk] : -1;
        }
        fprintf(f, "costs vstage %d {", v);
        if (mean[PR_F] >= 0)
            fprintf(f, " f %.6fms", mean[PR_F]);
        if (mean[PR_B] >= 0)
            fprintf(f, " b %.6fms", mean[PR_B] + (mean[PR_W] >= 0 ? mean[PR_W] : 0));
        if (mean[PR_W] >= 0)
            fprintf(f, " w %.6fms", mean[PR_W]);
        if (mean[PR_R] >= 0)
            fprintf(f, " r %.6fms", mean[PR_R]);
        if (run->wl->model)
            fprintf(f, " act %lld ckpt %lld wact %lld", (long long)g->vstages[v].act,
                    (long long)g->vstages[v].ckpt, (long long)g->vstages[v].wact);
        fprintf(f, " }\n");
    }
    for (int s = 0; s < run->P; s++) {
        const PrRank *r = &run->rank[s];
        double bytes = 0, ms = 0;
        for (uint32_t i = 0; i < r->d->nops; i++)
            if (r->d->ops[i].kind == PR_SO || r->d->ops[i].kind == PR_SI)
                for (int it = 0; it < run->opt.iters; it++) {
                    const PrSpan *sp = &r->span[(size_t)it * r->d->nops + i];
                    bytes += (double)r->d->ops[i].held[run->wl->plan];
                    ms += sp->t1 - sp->t0;
                }
        if (bytes > 0 && ms > 0)
            fprintf(f, "costs stage %d { host_bw %.0fB/s }\n", s, bytes / (ms / 1e3));
    }
    if (f != stdout && fclose(f) != 0)
        return -1;
    return 0;
}
