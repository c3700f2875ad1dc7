/* driver.c - the compile pipeline shared by every command, and the usage texts; see
 * driver.h. Reads like QBE's main: a flat list of stages, stopping at the first that
 * reported errors.
 *
 *     load_pipeline       parse, imports, templates, settings    (frontend.h)
 *     derive_costs        model + device -> costs                 (costmodel.h)
 *     recompute           one pass call per `recompute` directive (passes.h)
 *     apply passes        in the order written                    (passes.h)
 *     check_pipeline      structure and dependencies              (check.h)
 */
#include "driver.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "arena_plan.h"
#include "check.h"
#include "costmodel.h"
#include "frontend.h"
#include "opsem.h"
#include "passes.h"
#include "util.h"

/* The `recompute(stages=LO..HI, policy=P)` call a `recompute` directive stands for. The
 * argument values point at the directive's location so pass errors land on it. */
static PassCall recompute_call(const RecomputeDir *r, Field args[2])
{
    args[0] = (Field){.key = "stages", .loc = r->loc};
    args[0].val = (Value){.kind = VAL_RANGE, .lo = r->lo, .hi = r->hi, .loc = r->loc};
    args[1] = (Field){.key = "policy", .loc = r->loc};
    args[1].val = (Value){.kind = VAL_IDENT, .str = (char *)policy_name[r->policy], .loc = r->loc};
    return (PassCall){.name = "recompute", .args = args, .nargs = 2, .loc = r->loc};
}

Pipeline *driver_compile(Diag *d, const DriverOpts *o, const char *path)
{
    LoadOpts lo = {.include_dirs = o ? o->include_dirs : NULL, .ninclude = o ? o->ninclude : 0};
    int nerr0 = d->nerr;
    Pipeline *p = load_pipeline(d, &lo, path);
    if (!p || d->nerr > nerr0)
        goto fail;
    if (derive_costs(d, p) || d->nerr > nerr0)
        goto fail;
    if (opsem_check_costs(d, p))
        goto fail;
    if (!(o && o->no_passes)) {
        for (uint32_t i = 0; i < p->nrecompute; i++) {
            Field args[2];
            PassCall call = recompute_call(&p->recompute[i], args);
            if (run_pass(d, p, &call) || d->nerr > nerr0)
                goto fail;
        }
        for (uint32_t i = 0; i < p->npasses; i++)
            if (run_pass(d, p, &p->passes[i]) || d->nerr > nerr0)
                goto fail;
    }
    if (check_pipeline(d, p, CHECK_STRUCTURE | CHECK_DEPS) || d->nerr > nerr0)
        goto fail;
    return p;
fail:
    pipeline_free(p);
    return NULL;
}

bool driver_common_opt(DriverOpts *o, int opt, const char *arg)
{
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
}

/* Usage texts: DESIGN.md "Command line", one entry per command of cmds.h. */
#define COMMON_OPTS "  -I, --include DIR   search DIR for imports (repeatable; also $PIPEC_PATH)\n"

static const struct {
    const char *name, *text;
} usages[] = {
    {"check",
     "usage: pipec check [options] FILE...\n"
     "Parses, elaborates and checks each FILE: completeness, dependencies, deadlock and\n"
     "per-stage memory. Exit 0 when all are legal, 1 on errors, 2 on usage errors.\n"
     "  --mem               also print the per-rank peak memory table\n" COMMON_OPTS},
    {"print",
     "usage: pipec print [options] FILE [-o OUT]\n"
     "Prints the canonical explicit form of the compiled pipeline (templates expanded,\n"
     "passes applied, costs derived). print(parse(print(x))) == print(x).\n"
     "  -o, --output OUT    write OUT atomically instead of standard output\n" COMMON_OPTS},
    {"sim",
     "usage: pipec sim [options] FILE [--json] [--trace T.json] [--svg T.svg] [--gantt]\n"
     "Simulates one iteration under the cost model: makespan, bubbles, peak memory.\n"
     "  --json              one JSON object instead of the summary\n"
     "  --trace T.json      write a Chrome trace (chrome://tracing, Perfetto)\n"
     "  --svg T.svg         write an SVG timeline\n"
     "  --gantt             print an ASCII timeline\n" COMMON_OPTS},
    {"opt",
     "usage: pipec opt [options] FILE --pass a,b(k=v),... [-o OUT]\n"
     "Runs the given passes in order on the compiled pipeline, checking it after each,\n"
     "and prints the result in the canonical explicit form. Arguments take numbers with\n"
     "units (1.5ms, 8GiB), names, ranges (0..=2, 0..3) and lists ([1, 2]).\n"
     "  -p, --pass LIST     passes to run (repeatable; appended in order)\n"
     "  -o, --output OUT    write OUT atomically instead of standard output\n"
     "  --list              list the passes and their arguments\n" COMMON_OPTS},
    {"diff",
     "usage: pipec diff [options] A B [--svg OUT.svg]\n"
     "Simulates both schedules and prints their metrics side by side, then each stage's\n"
     "op-order difference as a unified diff.\n" COMMON_OPTS},
    {"emit",
     "usage: pipec emit [options] FILE -o DIR [--backend cpu|cuda]\n"
     "Writes one C source per rank (rank_K.c), main.c, program.h and a Makefile into DIR.\n"
     "  -o, --output DIR    the folder to write\n"
     "      --backend B     cpu (default) or cuda: the runtime the Makefile links\n" COMMON_OPTS},
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
     "  --workload W        mlp (default: the model really trains) or synthetic (ops\n"
     "                      busy-wait their cost-model time and touch their bytes)\n"
     "  --data FILE         text to train on (default: the project's docs)\n"
     "  --check             compare gradients with the sequential reference\n"
     "  --json              print the summary as JSON\n"
     "  --trace T.json      write what really happened as a Chrome trace\n"
     "  --profile           measure op costs and print a costs block (-o FILE writes it)\n"
     "  --time-scale X      synthetic workload: scale every op's time by X\n"
     "  --timeout S         watchdog: a wait stuck for S seconds stops every rank\n"
     "  --lr X, --seed N    learning rate and initialisation seed\n"
     "  --reference         also time the sequential reference trainer\n"
     "  --cache DIR         build cache (default: $XDG_CACHE_HOME/pipec)\n"
     "  --quiet             only the closing summary\n" COMMON_OPTS},
    {"import-csv",
     "usage: pipec import-csv F.csv [-o F.pipe] [--name NAME]\n"
     "Reads a PyTorch pipelining schedule CSV and writes the explicit form; --name sets\n"
     "the pipeline's name (default: the file's base name).\n"},
    {"export-csv",
     "usage: pipec export-csv [options] FILE [-o F.csv] [--legacy]\n"
     "Writes the schedule as a PyTorch pipelining schedule CSV (compute actions);\n"
     "--legacy spells the split backward B/BW as older PyTorch artifacts do.\n" COMMON_OPTS},
    {"tune",
     "usage: pipec tune [options] FILE [-o OUT] [--budget N] [--top N]\n"
     "Searches schedule templates, recomputation policies and passes; prints a ranked\n"
     "table of the variants that pass check.\n"
     "  -o, --output OUT    write the best variant's explicit form to OUT\n"
     "      --budget N      evaluate at most N variants (default 2000)\n"
     "      --top N         print the N best (default 10)\n" COMMON_OPTS},
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

int driver_check_memory(Diag *d, const Pipeline *p)
{
    int n0 = d->nerr + d->nwarn; /* counted either way when the caller demotes errors */
    check_pipeline(d, p, CHECK_MEMORY);
    if (d->nerr + d->nwarn == n0)
        arena_check(d, p);
    return d->nerr + d->nwarn - n0;
}
