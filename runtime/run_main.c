/* run_main.c - the generated program's main (pr_main): options, the per-iteration
 * lines and the closing summary (text or JSON). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "pr_options.h"

/* The CPU backend's --check bound; a backend whose arithmetic differs from the CPU
 * reference defines pr_check_bound itself (the CUDA backend: 1e-4), which overrides
 * this weak definition at link time. */
__attribute__((weak)) double pr_check_bound(void)
{
    return 1e-5;
}

static void usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s [--iters N] [--check] [--json] [--trace T.json] [--workload mlp|gpt|llama|synthetic]\n"
            "          [--data FILE] [--time-scale X] [--timeout SECONDS] [--profile [-o FILE]]\n"
            "          [--lr X] [--seed N] [--quiet] [--reference]\n",
            argv0);
}

/* The measured iteration time: the mean over iterations after the first (warm-up) when
 * there are several, else the only one. */
static double measured_ms(const PrResult *res)
{
    if (res->iters <= 1)
        return res->iter_ms[0];
    double s = 0;
    for (int i = 1; i < res->iters; i++)
        s += res->iter_ms[i];
    return s / (res->iters - 1);
}

static void print_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* A JSON number at full precision (docs/spec.md "JSON output"): the shortest %g text
 * that reads back to the same double, with a fractional digit when it has no exponent
 * (33.0); null when not finite. */
static void print_num(FILE *f, double v)
{
    if (!isfinite(v)) {
        fputs("null", f);
        return;
    }
    char buf[40];
    /* at least the digits before the point, so that 100 reads 100.0, not 1e+02 */
    int lead = v != 0 ? (int)floor(log10(fabs(v))) + 1 : 1;
    for (int prec = lead < 1 ? 1 : lead > 17 ? 17 : lead; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    fputs(buf, f);
    if (!strpbrk(buf, ".e"))
        fputs(".0", f);
}

static void summary_json(FILE *f, const PrProgram *g, const PrOptions *o, const PrResult *res,
                         double sim)
{
    fprintf(f, "{\"pipeline\": ");
    print_json_str(f, g->name);
    fprintf(f, ", \"workload\": \"%s\", \"stages\": %d, \"microbatches\": %d, \"chunks\": %d, "
               "\"iters\": %d,",
            pr_workload_name(g, o->workload), g->P, g->M, g->V, res->iters);
    if (pr_dp_degree(g) > 1) /* micro-batches are per replica */
        fprintf(f, " \"data_parallel\": %d, \"zero\": %d,", (int)pr_dp_degree(g),
                (int)g->zero);
    fprintf(f, "\n \"losses\": [");
    for (int i = 0; i < res->iters; i++) {
        fputs(i ? ", " : "", f);
        print_num(f, res->loss[i]);
    }
    fprintf(f, "],\n \"iter_ms\": [");
    for (int i = 0; i < res->iters; i++) {
        fputs(i ? ", " : "", f);
        print_num(f, res->iter_ms[i]);
    }
    /* measured_ms: the mean iteration over measured_iters (1-based, inclusive) */
    fprintf(f, "],\n \"measured_ms\": ");
    print_num(f, measured_ms(res));
    fprintf(f, ", \"measured_iters\": [%d, %d]", res->iters > 1 ? 2 : 1, res->iters);
    fprintf(f, ", \"simulated_ms\": ");
    print_num(f, sim >= 0 ? sim : NAN);
    fprintf(f, ", \"reference_ms\": ");
    print_num(f, res->ref_ms >= 0 ? res->ref_ms : NAN);
    fprintf(f, ",\n \"per_stage\": [");
    for (int s = 0; s < g->P; s++) {
        /* per iteration, the mean over all of them, as the text summary shows it */
        fprintf(f, "%s{\"stage\": %d, \"busy_ms_per_iter\": ", s ? ",\n   " : "", s);
        print_num(f, res->busy_ms[s] / res->iters);
        fprintf(f, ", \"peak_arena_bytes\": %lld, \"arena_bytes\": %lld, "
                   "\"planned_peak_bytes\": %lld, \"workspace_bytes\": %lld}",
                (long long)res->peak_arena[s], (long long)g->ranks[s].arena_bytes[o->workload],
                (long long)g->ranks[s].peak_live_bytes[o->workload],
                (long long)g->ranks[s].workspace_bytes[o->workload]);
    }
    fprintf(f, "],\n \"max_grad_error\": ");
    if (res->max_grad_err >= 0 || isnan(res->max_grad_err)) {
        print_num(f, res->max_grad_err);
        fprintf(f, ", \"grad_errors\": {");
        for (int i = 0; i < res->ngrad; i++) {
            fputs(i ? ", " : "", f);
            print_json_str(f, res->grad_name[i]);
            fputs(": ", f);
            print_num(f, res->grad_err[i]);
        }
        fputs("}", f);
    } else {
        fputs("null", f);
    }
    if (res->max_weight_err >= 0 || isnan(res->max_weight_err)) {
        fputs(", \"max_weight_error\": ", f);
        print_num(f, res->max_weight_err);
    }
    fputs("}\n", f);
}

static void fmt_bytes(char *buf, size_t n, double b)
{
    if (b < 1024.0)
        snprintf(buf, n, "%.0f B", b);
    else if (b < 1048576.0)
        snprintf(buf, n, "%.1f KiB", b / 1024);
    else if (b < 1073741824.0)
        snprintf(buf, n, "%.1f MiB", b / 1048576.0);
    else
        snprintf(buf, n, "%.1f GiB", b / 1073741824.0);
}

static void summary_text(FILE *f, const PrProgram *g, const PrOptions *o, const PrResult *res,
                         double sim)
{
    double meas = measured_ms(res);
    char window[48] = ""; /* which iterations meas is the mean of */
    if (res->iters > 1)
        snprintf(window, sizeof window, " (mean of iterations 2-%d)", res->iters);
    fprintf(f, "%s: %d stage%s, %d micro-batch%s, %d chunk%s, workload %s, %d iteration%s\n",
            g->name, g->P, g->P == 1 ? "" : "s", g->M, g->M == 1 ? "" : "es", g->V,
            g->V == 1 ? "" : "s", pr_workload_name(g, o->workload), res->iters,
            res->iters == 1 ? "" : "s");
    if (pr_dp_degree(g) > 1)
        fprintf(f, "data parallel: %d replicas, %d ranks, each replica on its %d micro-batches "
                "of the global batch of %d%s\n", (int)pr_dp_degree(g),
                (int)pr_dp_nranks(g->P, pr_dp_degree(g)), g->M,
                (int)pr_dp_microbatch(g->M, pr_dp_degree(g), 0),
                g->zero >= 1 ? ", optimizer step sharded (zero 1)" : "");
    if (o->workload == PR_MLP && res->iters > 1)
        fprintf(f, "loss: %.4f -> %.4f\n", res->loss[0], res->loss[res->iters - 1]);
    if (sim > 0)
        fprintf(f, "iteration time: measured %.3f ms%s, simulated %.3f ms (measured/simulated "
                   "%.3f)\n",
                meas, window, sim, meas / sim);
    else if (sim == 0)
        fprintf(f, "iteration time: measured %.3f ms%s, simulated 0 ms (the costs give no times: "
                   "name a device, or profile them with --profile)\n", meas, window);
    else
        fprintf(f, "iteration time: measured %.3f ms%s, simulated n/a\n", meas, window);
    if (res->ref_ms >= 0)
        fprintf(f, "sequential reference trainer: %.3f ms per iteration (pipelined/reference "
                   "%.3f)\n", res->ref_ms, meas / res->ref_ms);
    for (int s = 0; s < g->P; s++) {
        char a[32], b[32];
        fmt_bytes(a, sizeof a, (double)g->ranks[s].arena_bytes[o->workload]);
        fmt_bytes(b, sizeof b, (double)res->peak_arena[s]);
        fprintf(f, "  stage %d: busy %.3f ms/iter, arena %s, peak live %s\n", s,
                res->busy_ms[s] / res->iters, a, b);
    }
    if (res->max_grad_err >= 0 || isnan(res->max_grad_err)) {
        fprintf(f, "gradient check against the sequential reference (max relative error per "
                   "tensor):\n");
        for (int i = 0; i < res->ngrad; i++)
            fprintf(f, "  %-12s %.3g\n", res->grad_name[i], res->grad_err[i]);
        fprintf(f, "max relative gradient error: %.3g\n", res->max_grad_err);
    }
    if (res->max_weight_err >= 0 || isnan(res->max_weight_err))
        fprintf(f, "max relative weight error after the step: %.3g\n", res->max_weight_err);
}

/* pr_main on a program in memory form (pr_program_unpack). */
static int main_unpacked(const PrProgram *prog, int argc, char **argv)
{
    PrOptions o;
    pr_options_default(&o, prog);
    enum { O_ITERS = PR_OPT_ITERS, O_CHECK = PR_OPT_CHECK, O_JSON = PR_OPT_JSON,
           O_TRACE = PR_OPT_TRACE, O_WORKLOAD = PR_OPT_WORKLOAD, O_DATA = PR_OPT_DATA,
           O_SCALE = PR_OPT_SCALE, O_TIMEOUT = PR_OPT_TIMEOUT, O_PROFILE = PR_OPT_PROFILE,
           O_LR = PR_OPT_LR, O_SEED = PR_OPT_SEED, O_QUIET = PR_OPT_QUIET, O_REF = PR_OPT_REF,
           O_HELP = PR_OPT_END };
    static const struct option longopts[] = {
        PR_PROGRAM_LONGOPTS,
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    int c, li = -1;
    double v;
    const char *want = NULL; /* what the option takes, for the message of a bad value */
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:", longopts, &li)) != -1) {
        switch (c) {
        case O_ITERS:
            if ((want = pr_option_number(c, optarg, &v)))
                goto bad;
            o.iters = (int)v;
            break;
        case O_CHECK: o.check = true; break;
        case O_JSON: o.json = true; break;
        case O_TRACE: o.trace = optarg; break;
        case O_WORKLOAD:
            /* the model workload: by the program's arch name (gpt, llama), or `mlp`,
             * its name before gpt and llama existed */
            if (!strcmp(optarg, pr_workload_name(prog, PR_MLP)) || !strcmp(optarg, "mlp"))
                o.workload = PR_MLP;
            else if (!strcmp(optarg, "synthetic"))
                o.workload = PR_SYNTHETIC;
            else {
                want = "mlp or synthetic";
                goto bad;
            }
            break;
        case O_DATA: o.data = optarg; break;
        case O_SCALE:
            if ((want = pr_option_number(c, optarg, &v)))
                goto bad;
            o.time_scale = v;
            break;
        case O_TIMEOUT:
            if ((want = pr_option_number(c, optarg, &v)))
                goto bad;
            o.timeout_s = v;
            break;
        case O_PROFILE: o.profile = true; break;
        case 'o': o.profile_out = optarg; break;
        case O_LR:
            if ((want = pr_option_number(c, optarg, &v)))
                goto bad;
            o.lr = v;
            break;
        case O_SEED:
            if ((want = pr_option_number(c, optarg, &v)))
                goto bad;
            o.seed = (uint64_t)v;
            break;
        case O_QUIET: o.quiet = true; break;
        case O_REF: o.reference = true; break;
        case O_HELP: usage(stdout, argv[0]); return 0;
        default:
            usage(stderr, argv[0]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], argv[optind]);
        usage(stderr, argv[0]);
        return 2;
    }
    pr_install_signals();
    PrResult res;
    int rc = pr_run(prog, &o, &res);
    if (rc) {
        if (!res.error_shown)
            fprintf(stderr, "piperun: %s\n", res.error[0] ? res.error : "the run failed");
        pr_result_free(&res);
        return 1;
    }
    double sim = prog->sim_ms >= 0 ? prog->sim_ms * (o.workload == PR_SYNTHETIC ? o.time_scale : 1)
                                   : -1;
    if (o.json)
        summary_json(stdout, prog, &o, &res, sim);
    else if (!o.profile || o.profile_out)
        summary_text(stdout, prog, &o, &res, sim);
    double bound = pr_check_bound();
    if (o.check && !(res.max_grad_err < bound)) {
        fprintf(stderr, "piperun: gradient check failed: max relative error %.3g >= %g\n",
                res.max_grad_err, bound);
        rc = 1;
    }
    if (o.check && res.max_weight_err >= 0 && !(res.max_weight_err < bound)) {
        fprintf(stderr, "piperun: weight check failed: max relative error %.3g >= %g "
                "after the step\n", res.max_weight_err, bound);
        rc = 1;
    }
    pr_result_free(&res);
    return rc;
bad:
    /* every bad value comes from a long option: li is its index in longopts */
    fprintf(stderr, "%s: bad value '%s' for --%s (%s)\n", argv[0], optarg,
            li >= 0 ? longopts[li].name : "?", want ? want : "see --help");
    usage(stderr, argv[0]);
    return 2;
}

int pr_main(const PrProgram *prog, int argc, char **argv)
{
    PrProgram *g;
    char why[256];
    if (pr_program_unpack(prog, &g, why, sizeof why) != 0) {
        fprintf(stderr, "piperun: %s\n", why);
        return 1;
    }
    int rc = main_unpacked(g, argc, argv);
    pr_program_free(g);
    return rc;
}
