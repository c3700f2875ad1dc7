/* driver.c - the compile pipeline shared by every command, and the usage texts; see
 * driver.h. Reads like QBE's main: a flat list of stages, stopping at the first that
 * reported errors.
 *
 *     load_pipeline       parse, imports, templates, settings    (frontend.h)
 *     derive_costs        model + device -> costs                 (costmodel.h)
 *     recompute           one pass call per `recompute` directive (passes/passes.h)
 *     apply passes        in the order written                    (passes/passes.h)
 *     check_pipeline      structure and dependencies              (check.h)
 *     lint_pipeline       warnings: legal but suspicious            (lint.h)
 */
#include "driver.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "arena_plan.h"
#include "check.h"
#include "costmodel.h"
#include "csv.h"
#include "frontend.h"
#include "human.h"
#include "lint.h"
#include "memory.h"
#include "opsem.h"
#include "passes.h"
#include "sim.h"
#include "util.h"

/* The arguments of a recompute call (recompute_call): stages, policy, block's layers
 * or keep's tensor names, and granularity=layer. */
typedef struct RecomputeArgs {
    Field f[4];
    char keep[256];
} RecomputeArgs;

/* The `recompute(stages=LO..HI, policy=P[, layers=N | keep="T ..."])` call a `recompute`
 * directive stands for (`policy block(N)`, `policy keep(T, ...)`). The argument values
 * point at the directive's location so pass errors land on it. */
static PassCall recompute_call(const RecomputeDir *r, RecomputeArgs *a)
{
    Field *args = a->f;
    uint32_t n = 2;
    args[0] = (Field){.key = "stages", .loc = r->loc};
    args[0].val = (Value){.kind = VAL_RANGE, .lo = r->lo, .hi = r->hi, .loc = r->loc};
    args[1] = (Field){.key = "policy", .loc = r->loc};
    args[1].val = (Value){.kind = VAL_IDENT, .str = (char *)policy_name[r->policy], .loc = r->loc};
    if (r->policy == POLICY_BLOCK) {
        args[n] = (Field){.key = "layers", .loc = r->loc};
        args[n++].val = (Value){.kind = VAL_NUM, .num = r->arg, .loc = r->loc};
    } else if (r->policy == POLICY_KEEP) {
        args[n] = (Field){.key = "keep", .loc = r->loc};
        args[n++].val = (Value){.kind = VAL_STRING, .str = (char *)keep_format(r->arg, a->keep, sizeof a->keep),
                                .loc = r->loc};
    }
    if (r->per_layer) {
        args[n] = (Field){.key = "granularity", .loc = r->loc};
        args[n++].val = (Value){.kind = VAL_IDENT, .str = "layer", .loc = r->loc};
    }
    return (PassCall){.name = "recompute", .args = args, .nargs = n, .loc = r->loc};
}

/* The stages after load_pipeline, on p (NULL when loading failed); nerr0 is d->nerr
 * before the load. */
static Pipeline *compile_loaded(Diag *d, const DriverOpts *o, Pipeline *p, int nerr0)
{
    if (!p || d->nerr > nerr0)
        goto fail;
    if (derive_costs(d, p) || d->nerr > nerr0)
        goto fail;
    if (opsem_check_costs(d, p))
        goto fail;
    if (!(o && o->no_passes)) {
        for (uint32_t i = 0; i < p->nrecompute; i++) {
            RecomputeArgs args;
            PassCall call = recompute_call(&p->recompute[i], &args);
            if (run_pass(d, p, &call) || d->nerr > nerr0)
                goto fail;
        }
        for (uint32_t i = 0; i < p->npasses; i++)
            if (run_pass(d, p, &p->passes[i]) || d->nerr > nerr0)
                goto fail;
    }
    if (check_pipeline(d, p, CHECK_STRUCTURE | CHECK_DEPS) || d->nerr > nerr0)
        goto fail;
    lint_pipeline(d, p);
    if (d->nerr > nerr0) /* -Werror */
        goto fail;
    return p;
fail:
    if (o && o->nsets)
        note_overrides(d);
    pipeline_free(p);
    return NULL;
}

static LoadOpts load_opts(const DriverOpts *o)
{
    return (LoadOpts){.include_dirs = o ? o->include_dirs : NULL, .ninclude = o ? o->ninclude : 0,
                      .sets = o ? o->sets : NULL, .nsets = o ? o->nsets : 0};
}

/* Whether path names a PyTorch pipelining schedule CSV (docs/csv.md "Reading a CSV
 * directly"): a file whose name ends in ".csv". */
static bool is_csv_path(const char *path)
{
    size_t n = strlen(path);
    return n > 4 && !strcmp(path + n - 4, ".csv");
}

/* The pipeline of the CSV at path, as import-csv reads it (csv_import_dialect), its
 * diagnostics located at the CSV's cells; NULL after reporting. --set has no setting
 * lines to replace in a CSV, so it is refused there. */
static Pipeline *load_csv(Diag *d, const DriverOpts *o, const char *path)
{
    if (o && o->nsets) {
        diag_error(d, LOC_NONE, DIAG_VALUE, "--set replaces setting lines of a .pipe file; "
                   "%s is a CSV (import-csv it first)", path);
        return NULL;
    }
    size_t len;
    char *text = read_file(path, &len);
    if (!text) {
        diag_error(d, LOC_NONE, DIAG_NAME, "cannot read '%s': %s", path, strerror(errno));
        return NULL;
    }
    if (len > UINT32_MAX - 1) {
        free(text);
        diag_error(d, LOC_NONE, DIAG_LIMIT, "'%s' is larger than 4 GiB", path);
        return NULL;
    }
    uint32_t file = diag_add_file(d, path, text, (uint32_t)len);
    char *name = csv_name_from_path(path);
    /* the import's warnings are the action checks' (compiler/ir/actions.c), which the
     * structure check gives again at the same cells */
    bool mute = d->mute_warnings;
    d->mute_warnings = true;
    Pipeline *p = csv_import_dialect(d, file, name, NULL);
    d->mute_warnings = mute;
    free(name);
    return p;
}

Pipeline *driver_compile(Diag *d, const DriverOpts *o, const char *path)
{
    LoadOpts lo = load_opts(o);
    int nerr0 = d->nerr;
    d->werror |= o && o->werror;
    Pipeline *p = is_csv_path(path) ? load_csv(d, o, path) : load_pipeline(d, &lo, path);
    return compile_loaded(d, o, p, nerr0);
}

Pipeline *driver_compile_string(Diag *d, const DriverOpts *o, const char *name, const char *text,
                                size_t len)
{
    LoadOpts lo = load_opts(o);
    int nerr0 = d->nerr;
    d->werror |= o && o->werror;
    return compile_loaded(d, o, load_pipeline_string(d, &lo, name, text, len), nerr0);
}

bool driver_common_opt(DriverOpts *o, int opt, const char *arg)
{
    if (opt == DRIVER_OPT_SET) {
        size_t cap = (size_t)o->nsets;
        size_t len = strlen(arg);
        const char *eq = strchr(arg, '=');
        SetOverride so = {.text = arg, .lo = (uint32_t)(eq ? (size_t)(eq - arg) + 1 : len),
                          .hi = (uint32_t)len};
        VEC_PUSH(o->sets, o->nsets, cap, so);
        return true;
    }
    if (opt == 'W' && arg && !strcmp(arg, "error")) {
        o->werror = true;
        return true;
    }
    if (opt != 'I')
        return false;
    size_t cap = (size_t)o->ninclude;
    VEC_PUSH(o->include_dirs, o->ninclude, cap, arg);
    return true;
}

void driver_opts_free(DriverOpts *o)
{
    free(o->include_dirs);
    o->include_dirs = NULL;
    o->ninclude = 0;
    free(o->sets);
    o->sets = NULL;
    o->nsets = 0;
}

/* Usage texts: docs/spec.md "Command line", one entry per command of cmds.h. */
#define COMMON_OPTS "  -I, --include DIR   search DIR for imports (repeatable; also $PIPEC_PATH)\n" \
                    "  --set KEY=VALUE     override a pipeline setting, as the line `KEY VALUE`\n" \
                    "                      in the file (repeatable; docs/language.md)\n" \
                    "  -Werror             treat warnings as errors\n"

static const struct {
    const char *name, *text;
} usages[] = {
    {"check",
     "usage: pipec check [options] FILE...\n"
     "Parses, elaborates and checks each FILE: completeness, dependencies, deadlock and\n"
     "per-stage memory. Exit 0 when all are legal, 1 on errors, 2 on usage errors.\n"
     "A FILE named *.csv (for every command) is read as a PyTorch schedule CSV.\n"
     "  --mem               also print the per-rank peak memory table\n"
     "  --quiet             print nothing for a file that passes\n" COMMON_OPTS},
    {"print",
     "usage: pipec print [options] FILE [-o OUT]\n"
     "Prints the canonical explicit form of the compiled pipeline (templates expanded,\n"
     "passes applied, costs derived). print(parse(print(x))) == print(x).\n"
     "  -o, --output OUT    write OUT atomically instead of standard output\n" COMMON_OPTS},
    {"sim",
     "usage: pipec sim [options] FILE [--json] [--trace T.json] [--svg T.svg] [--html T.html]\n"
     "                 [--gantt]\n"
     "Simulates one iteration under the cost model: makespan, bubbles, peak memory.\n"
     "  --json              one JSON object instead of the summary\n"
     "  --trace T.json      write a Chrome trace (chrome://tracing, Perfetto)\n"
     "  --svg T.svg         write an SVG timeline (with each stage's memory over time)\n"
     "  --width PX          the SVG's width (default: from the schedule, >= 1200)\n"
     "  --html OUT.html     write an interactive timeline: one self-contained page with\n"
     "                      zoom, pan, hover details of every op and the memory curves\n"
     "  --gantt             print an ASCII timeline, as wide as the terminal ($COLUMNS)\n"
     "  --large             draw --svg, --html and --trace beyond 250000 ops\n"
     "A file argument `-` is standard input; `--svg -`, `--html -` and `--trace -` write to\n"
     "standard output (the summary then goes to standard error).\n" COMMON_OPTS},
    {"opt",
     "usage: pipec opt [options] FILE --pass a,b(k=v),... [-o OUT]\n"
     "Runs the given passes in order on the compiled pipeline, checking it after each,\n"
     "and prints the result in the canonical explicit form. Arguments take numbers with\n"
     "units (1.5ms, 8GiB), names, ranges (0..=2, 0..3) and lists ([1, 2]).\n"
     "  -p, --pass LIST     passes to run (repeatable; appended in order)\n"
     "  -o, --output OUT    write OUT atomically instead of standard output\n"
     "  --list              list the passes and their arguments\n" COMMON_OPTS},
    {"diff",
     "usage: pipec diff [options] A B [--metrics | --json] [--svg OUT.svg] [--html OUT.html]\n"
     "Simulates both schedules and prints their metrics side by side (with a note when\n"
     "their stages, micro-batches or chunks differ), each stage's busy, idle and bubble\n"
     "times, then each stage's op-order difference as a unified diff. Exit 0 when A and B\n"
     "are the same, 1 when they differ, 2 on errors (as diff(1)).\n"
     "  --metrics           only the metrics table; the exit status compares shape and\n"
     "                      metrics, not op orders\n"
     "  --json              one JSON object: both `sim --json` objects and what differs\n"
     "  --svg OUT.svg       both timelines, A above B, on one time axis\n"
     "  --width PX          the SVG's width (default: from the schedules, >= 1200)\n"
     "  --html OUT.html     an interactive page with both timelines and a picker\n"
     "  --large             draw --svg and --html beyond 250000 ops (both schedules)\n" COMMON_OPTS},
    {"emit",
     "usage: pipec emit [options] FILE -o DIR [--backend cpu|cuda]\n"
     "Writes one C source per rank (rank_K.c), main.c, program.h and a Makefile into DIR.\n"
     "  -o, --output DIR    the folder to write\n"
     "      --backend B     cpu (default) or cuda: the runtime the Makefile links\n"
     COMMON_OPTS},
    {"compile",
     "usage: pipec compile [options] FILE -o DIR [--backend cpu|cuda] [--launcher threads|mpi]\n"
     "Emits and compiles the per-rank programs into DIR/NAME (alias: pipec build).\n"
     "  -o, --output DIR    the folder to write\n"
     "      --backend B     cpu (default: OpenBLAS, threads) or cuda (nvcc, cuBLAS, NCCL)\n"
     "      --launcher L    threads (default: one process, a thread per rank) or mpi\n"
     "                      (one process per rank under mpirun; docs/cuda.md)\n" COMMON_OPTS},
    {"run",
     "usage: pipec run [options] FILE [--backend cpu|cuda] [--iters N] [--check] [--json]\n"
     "                 [--trace T.json]\n"
     "Builds the schedule into a cache folder keyed by the generated sources and runs it.\n"
     "  --backend B         cpu (default) or cuda\n"
     "  --launcher L        threads (default) or mpi (mpirun -np P; $MPIRUN overrides)\n"
     "  --iters N           training iterations (one line each: loss, time)\n"
     "  --workload W        mlp (the model really trains; the default when the file's\n"
     "                      model fits the CPU mlp workload) or synthetic (the default\n"
     "                      otherwise: ops busy-wait their cost-model time and touch\n"
     "                      their bytes); run says which it uses and why before it starts\n"
     "  --data FILE         text to train on (default: the project's docs)\n"
     "  --check             compare gradients with the sequential reference\n"
     "  --json              print the summary as JSON\n"
     "  --trace T.json      write what really happened as a Chrome trace\n"
     "  --profile           measure op costs and print a costs block\n"
     "  -o, --output FILE   with --profile: write the costs block to FILE\n"
     "  --time-scale X      synthetic workload: scale every op's time by X\n"
     "  --timeout S         watchdog: a wait stuck for S seconds stops every rank\n"
     "  --lr X, --seed N    learning rate and initialisation seed\n"
     "  --reference         also time the sequential reference trainer\n"
     "  --cache DIR         build cache (default: $XDG_CACHE_HOME/pipec)\n"
     "  --quiet             only the closing summary\n" COMMON_OPTS},
    {"import-csv",
     "usage: pipec import-csv F.csv [-o F.pipe] [--name NAME]\n"
     "Reads a PyTorch pipelining schedule CSV and writes the explicit form.\n"
     "  -o, --output OUT    write OUT atomically instead of standard output\n"
     "      --name NAME     the pipeline's name (default: the file's base name)\n"},
    {"export-csv",
     "usage: pipec export-csv [options] FILE [-o F.csv] [--legacy | --current] [--comms]\n"
     "Writes the schedule as a PyTorch pipelining schedule CSV (compute actions and the\n"
     "runtime actions FILE keeps), in the dialect FILE was imported in (import-csv marks\n"
     "a legacy CSV), else the current one.\n"
     "  -o, --output OUT    write OUT atomically instead of standard output\n"
     "      --legacy        spell the split backward B/BW as older PyTorch artifacts do\n"
     "      --current       spell it I/W and the full backward B, as PyTorch does now\n"
     "      --comms         the comms form: SEND/RECV placed by PyTorch's lowering\n"
     COMMON_OPTS},
    {"tune",
     "usage: pipec tune [options] FILE [-o OUT] [--budget N] [--top N] [--json|--csv]\n"
     "       pipec tune --exact FILE [--time-limit S] [--json] [-o OUT]\n"
     "Searches every stdlib template the file's stages and micro-batches allow and the\n"
     "file's own schedule, with recomputation policies, swapping and passes; prints a\n"
     "ranked table of the variants that pass check.\n"
     "  -o, --output OUT    write the best variant's explicit form to OUT\n"
     "      --budget N      evaluate at most N variants (default 2000)\n"
     "      --top N         print the N best (default 10); slower variants are pruned\n"
     "      --json          the rows, the count searched and what was skipped, as JSON\n"
     "      --csv           the rows as CSV with a header\n"
     "      --exact         a makespan-optimal order of the file's ops within its budget,\n"
     "                      by mixed-integer programming (COIN-OR CBC; Debian package\n"
     "                      coinor-libcbc-dev); the order with -o OUT\n"
     "      --time-limit S  stop the exact search after S seconds (default 60)\n"
     "                      (--json then prints {\"status\", \"makespan_ms\",\n"
     "                      \"lower_bound_ms\", \"gap\"})\n" COMMON_OPTS},
    {"compare",
     "usage: pipec compare [options] FILE... [--set KEY=V[,V...]]... [--format F] [-o OUT]\n"
     "Simulates each FILE at each point of the sweep the --set lists span (their cartesian\n"
     "product, the first --set varying slowest) and prints one row per file and point:\n"
     "name, P, M, V, schedule and passes, makespan, lower bound and the distance to it,\n"
     "bubble ratio, overhead ratio (recomputation counted), peak memory (largest and per\n"
     "stage), whether it fits the budget, tokens/s and MFU (docs/compare.md).\n"
     "  --format F          text (default), csv, md (Markdown), latex (a tabular) or json\n"
     "  -o, --output OUT    write OUT atomically instead of standard output\n"
     "  --set KEY=V1,V2     a setting's values: a comma outside brackets separates them\n"
     "A file that does not compile gets a row whose status names the error codes, its\n"
     "diagnostics on standard error, and exit status 1.\n" COMMON_OPTS},
};

const char *driver_usage_text(const char *name)
{
    if (name && !strcmp(name, "build"))
        name = "compile";
    for (size_t i = 0; name && i < ARRAY_LEN(usages); i++)
        if (!strcmp(usages[i].name, name))
            return usages[i].text;
    return NULL;
}

void driver_usage(FILE *out, const char *name)
{
    const char *t = driver_usage_text(name);
    if (t)
        fputs(t, out);
    else
        fprintf(out, "usage: pipec COMMAND [options] FILE...   (pipec --help lists the commands)\n");
}

int driver_usage_status(const char *name, bool help)
{
    driver_usage(help ? stdout : stderr, name);
    return help ? 0 : 2;
}

int driver_operands(int argc, const char *name, int n)
{
    if (argc - optind == n)
        return -1;
    driver_usage(stderr, name);
    return 2;
}

/* ---- the weights alone over every budget ------------------------------------------ */

/* Whether every rank's weights alone exceed the budget; *lo and *hi get the smallest
 * and the largest rank's weights (bytes). */
static bool weights_over_all(const Pipeline *p, double *lo, double *hi)
{
    if (!p->has_memory || p->P < 1 || !p->stage_costs)
        return false;
    *lo = INFINITY;
    *hi = 0;
    for (int32_t s = 0; s < p->P; s++) {
        double w = ir_cost(p, s, 0, COST_WEIGHTS);
        if (!(w > p->memory))
            return false;
        *lo = fmin(*lo, w);
        *hi = fmax(*hi, w);
    }
    return true;
}

/* Whether some rank's weights are written in the source (so the cost model's
 * re-derivation for another shape would not change them). */
static bool weights_written(const Pipeline *p)
{
    uint32_t bit = 1u << COST_WEIGHTS;
    if (p->costs.set & ~p->costs.derived & bit)
        return true;
    for (int32_t s = 0; s < p->P; s++)
        if (p->stage_costs[s].set & ~p->stage_costs[s].derived & bit)
            return true;
    return false;
}

/* Whether q's costs derive (quietly) with every rank's weights within p's budget.
 * Frees q. */
static bool weights_fit(Pipeline *q, double budget)
{
    Diag quiet = {.max_errors = -1}; /* counts, never prints */
    bool ok = derive_costs(&quiet, q) == 0 && quiet.nerr == 0;
    for (int32_t s = 0; ok && s < q->P; s++)
        ok = ir_cost(q, s, 0, COST_WEIGHTS) <= budget;
    diag_free(&quiet);
    pipeline_free(q);
    return ok;
}

/* The fewest stages (with p's chunks and tensor parallelism, partition even, every
 * virtual stage keeping at least one half-layer unit) whose weights fit p's budget;
 * 0 when none does. p has a model and derived costs. */
static int32_t stages_to_fit(const Pipeline *p)
{
    double units = 2 * p->cost_inputs->model.layers;
    for (int32_t P = p->P + 1; (double)P * p->V <= units && P <= IR_MAX_STAGES; P++) {
        Pipeline *q = pipeline_clone(p);
        pipeline_set_shape(q, P, p->M, p->V);
        q->partition_set = false;
        q->partition_even = true;
        if (weights_fit(q, p->memory))
            return P;
    }
    return 0;
}

/* The smallest tensor-parallel degree above p's (the cost model accepting it: it
 * divides the heads) whose weights fit p's budget on p's stages; 0 when none does. */
static int32_t tp_to_fit(const Pipeline *p)
{
    for (int32_t t = p->tensor_parallel + 1; t <= p->cost_inputs->model.heads; t++) {
        Pipeline *q = pipeline_clone(p);
        q->tensor_parallel = t;
        if (weights_fit(q, p->memory))
            return t;
    }
    return 0;
}

/* When the weights alone exceed every rank's budget: one `memory` error that leads
 * with what would fit them (more stages, more tensor parallelism, a larger device or
 * budget), instead of one error per rank (docs/language.md §8). Returns 1
 * when it reported, else 0. */
static int weights_error(Diag *d, const Pipeline *p)
{
    double lo, hi;
    if (!weights_over_all(p, &lo, &hi))
        return 0;
    StrBuf fix = {0};
    const char *sep = "";
    if (p->model && p->cost_inputs && !weights_written(p)) {
        int32_t P = stages_to_fit(p), t = tp_to_fit(p);
        if (P) {
            sb_printf(&fix, "stages %d%s", P,
                      p->partition_set && !p->partition_even ? " (partition even)" : "");
            sep = ", ";
        }
        if (t) {
            sb_printf(&fix, "%stensor_parallel %d", sep, t);
            sep = ", ";
        }
    }
    /* A budget that holds the largest rank's weights: a device's memory rounded up to
     * the 0.1 GiB shown, or a `memory` setting in whole GiB (as the user would write it). */
    const double GiB = 1073741824.0, step = GiB / 10;
    char a[32], b[32], c[72];
    const DeviceSpec *dv = p->cost_inputs && p->cost_inputs->has_device
                               ? &p->cost_inputs->device : NULL;
    const char *or = *sep ? "or " : "";
    if (dv && dv->has_memory && p->memory == dv->memory - dv->reserved)
        sb_printf(&fix, "%s%sa device with %s (%s reserved)", sep, or,
                  human_size(a, sizeof a, ceil((hi + dv->reserved) / step) * step),
                  human_size(b, sizeof b, dv->reserved));
    else
        sb_printf(&fix, "%s%s`memory %.0fGiB`", sep, or, ceil(hi / GiB));
    Loc at = p->shape_loc[0].file != LOC_NONE_FILE ? p->shape_loc[0] : p->loc;
    human_size(a, sizeof a, lo);
    if (p->P == 1)
        snprintf(c, sizeof c, "stage 0's weights (%s) exceed", a);
    else if (lo == hi)
        snprintf(c, sizeof c, "every stage's weights (%s) exceed", a);
    else
        snprintf(c, sizeof c, "every stage's weights (%s to %s) exceed", a,
                 human_size(b, sizeof b, hi));
    diag_error(d, at, DIAG_MEMORY, "to fit the weights alone, use %s: %s its budget of %s",
               fix.s, c, human_size(a, sizeof a, p->memory));
    if (p->shape_loc[3].file != LOC_NONE_FILE)
        diag_note(d, p->shape_loc[3], "the budget is set here");
    sb_free(&fix);
    return 1;
}

int driver_check_memory(Diag *d, const Pipeline *p)
{
    return driver_check_memory_memo(d, p, NULL);
}

int driver_check_memory_memo(Diag *d, const Pipeline *p, ArenaMemo *memo)
{
    int n0 = d->nerr + d->nwarn; /* counted either way when the caller demotes errors */
    if (weights_error(d, p))
        return d->nerr + d->nwarn - n0;
    check_pipeline(d, p, CHECK_MEMORY | CHECK_SOUND); /* every caller checked structure */
    if (d->nerr + d->nwarn == n0)
        arena_check_memo(d, p, memo);
    return d->nerr + d->nwarn - n0;
}

/* True when q passes what `pipec check` demands: structure, dependencies, memory. */
static bool fits_quietly(Diag *quiet, const Pipeline *q)
{
    quiet->nerr = quiet->nwarn = 0;
    return check_pipeline(quiet, q, CHECK_STRUCTURE | CHECK_DEPS) == 0 && quiet->nerr == 0 &&
           driver_check_memory(quiet, q) == 0;
}

void driver_memory_remedy(Diag *d, const Pipeline *p, const char *path)
{
    double wlo, whi;
    if (!p->has_memory || !d->ncode[DIAG_MEMORY] || weights_over_all(p, &wlo, &whi))
        return; /* weights_error's message is its own remedy */
    MemRank *mr = xmalloc((size_t)p->P * sizeof *mr);
    mem_walk(p, mr);
    int32_t lo = -1, hi = -1;
    bool weights_alone = false;
    for (int32_t s = 0; s < p->P; s++)
        if (mr[s].peak > p->memory) {
            lo = lo < 0 ? s : lo;
            hi = s;
            weights_alone |= mr[s].weights > p->memory;
        }
    free(mr);
    FILE *devnull = fopen("/dev/null", "w");
    Diag quiet = {.out = devnull};
    static const RecomputePolicy order[] = {POLICY_SELECTIVE, POLICY_MLP, POLICY_CMB,
                                            POLICY_FULL};
    RecomputePolicy best = POLICY_NONE;
    double best_ms = INFINITY;
    void *scratch = NULL;
    for (size_t i = 0; devnull && lo >= 0 && !weights_alone && i < ARRAY_LEN(order); i++) {
        if (!p->model && order[i] != POLICY_FULL)
            continue; /* without a model every policy is costed as full */
        Pipeline *q = pipeline_clone(p);
        RecomputeDir dir = {.lo = lo, .hi = hi + 1, .policy = order[i], .loc = LOC_NONE};
        RecomputeArgs args;
        PassCall call = recompute_call(&dir, &args);
        quiet.nerr = 0;
        if (run_pass(&quiet, q, &call) == 0 && quiet.nerr == 0 && fits_quietly(&quiet, q)) {
            double ms = sim_makespan(q, &scratch);
            if (ms < best_ms) {
                best_ms = ms;
                best = order[i];
            }
        }
        pipeline_free(q);
    }
    sim_scratch_free(scratch);
    diag_free(&quiet);
    if (devnull)
        fclose(devnull);
    Loc at = p->schedule_loc.file != LOC_NONE_FILE ? p->schedule_loc : p->loc;
    char range[48], ms[32];
    snprintf(range, sizeof range, "%d..=%d", lo, hi);
    if (best != POLICY_NONE)
        diag_note(d, at,
                  "to fit, add `recompute stages %s policy %s` (simulated makespan %s), "
                  "or run `pipec tune %s` to search schedules, recomputation and swapping",
                  range, policy_name[best], human_ms(ms, sizeof ms, best_ms), path);
    else if (lo < 0)
        diag_note(d, at,
                  "every stage's walk fits the budget, only the packing of its activations "
                  "does not; run `pipec tune %s` to search schedules, recomputation and "
                  "swapping",
                  path);
    else if (weights_alone)
        diag_note(d, at,
                  "the weights alone exceed the budget: use more stages, tensor_parallel, or "
                  "a larger device (`pipec tune %s` cannot fix this)",
                  path);
    else
        diag_note(d, at,
                  "no `recompute` directive on stages %s fits alone; run `pipec tune %s` to "
                  "search schedules, recomputation and swapping",
                  range, path);
}
