/* cmd_emit.c - `pipec emit`, `pipec compile` (alias `build`) and `pipec run`
 * (docs/spec.md "Command line", docs/runtime.md, docs/cuda.md).
 *
 *   emit FILE -o DIR [--backend B]          DIR/rank_K.c, main.c, program.h, Makefile
 *   compile FILE -o DIR [--backend B] [--launcher L]
 *                                           emit, then compile and link DIR/NAME
 *   run FILE [--backend B] [--launcher L] [options]
 *                                           compile into a cache folder keyed by a hash
 *                                           of the generated sources and the target,
 *                                           then run NAME (under mpirun with --launcher mpi)
 *
 * B is cpu (default) or cuda, L is threads (default: one process, a thread per rank) or
 * mpi (one process per rank). This file parses the commands and says what a run does;
 * the generated files come from emit_c.h, the compilers and processes from toolchain.h,
 * the output folder and the build cache from outdir.h. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmds.h"
#include "costmodel.h"
#include "driver.h"
#include "emit_c.h"
#include "opsem.h"
#include "outdir.h"
#include "piperun.h"
#include "pr_options.h"
#include "stream_check.h"
#include "toolchain.h"

/* Parses --backend / --launcher values into t. Returns 0, or 2 after a message. */
static int parse_target(Target *t, int opt_backend, int c, const char *arg)
{
    if (c == opt_backend) {
        if (!strcmp(arg, "cpu") || !strcmp(arg, "cuda")) {
            t->cuda = !strcmp(arg, "cuda");
            return 0;
        }
        fprintf(stderr, "pipec: unknown backend '%s' (cpu or cuda)\n", arg);
        return 2;
    }
    if (!strcmp(arg, "threads") || !strcmp(arg, "mpi")) {
        t->mpi = !strcmp(arg, "mpi");
        return 0;
    }
    fprintf(stderr, "pipec: unknown launcher '%s' (threads or mpi)\n", arg);
    return 2;
}

/* What `pipec run` tells before it starts: the rank count, and whether the mlp
 * workload can run the file (and why not). */
typedef struct RunInfo {
    int nranks;
    bool mlp_ok;
    char why[256];        /* mlp_shape's reason when !mlp_ok */
    char model[64];       /* the model's name, "" without one */
    char arch[32];        /* the model's arch, which names its workload ("mlp") */
} RunInfo;

/* Verifies the CUDA backend's stream plan pl->streams against the arena plans the
 * program carries (stream_check.h stream_plan_verify: the objects the emitter writes)
 * and appends streams.json, written from the same plan, to out. Returns 0, or 1 with a
 * message (a plan that fails is pipec's bug). */
static int add_stream_plan(EmitOut *out, const Pipeline *p, const EmitPlans *pl,
                           const char *file)
{
    char why[400] = "";
    int nbad = stream_plan_verify(p, &pl->sin.in, pl->streams, pl->plan_syn, pl->plan_mlp, why,
                                  sizeof why);
    if (nbad) {
        fprintf(stderr, "%s: internal error: the CUDA stream plan fails its verifier (%d "
                        "violation%s): %s\n", file, nbad, nbad == 1 ? "" : "s", why);
        return 1;
    }
    StrBuf json = {0};
    stream_plan_json(&json, p, pl->streams);
    size_t cap = out->cap;
    VEC_RESERVE(out->files, (size_t)out->n + 1, cap);
    out->cap = (uint32_t)cap;
    EmitFile *f = &out->files[out->n++];
    f->name = xstrdup("streams.json");
    f->text = json;
    f->tables = false;
    return 0;
}

/* The folders of this pipec's installation that the generated program is given
 * (emit_c.h EmitSite), absolute; each NULL when not found. */
typedef struct Site {
    EmitSite s;
    char *inc, *lib, *data_dir;
} Site;


/* The absolute form of p (freed), or NULL when it does not resolve; out of memory is
 * not "not found": a program must not be written with its paths left out. */
static char *abs_path(char *p)
{
    errno = 0;
    char *r = p ? realpath(p, NULL) : NULL;
    if (!r && errno == ENOMEM)
        out_of_memory();
    free(p);
    return r;
}

/* The runtime's folders (find_runtime) and the folder of the default training text:
 * the first of <bin>/.. and <bin>/../share/doc/pipec that holds README.md (runtime/
 * data.h data_load_default reads its pages). */
static void site_find(Site *st, Target t)
{
    memset(st, 0, sizeof *st);
    if (find_runtime_say(t, &st->inc, &st->lib, false) == 0) {
        st->inc = abs_path(st->inc);
        st->lib = abs_path(st->lib);
    }
    char *bin = self_dir();
    static const char *const trees[] = {"..", "../share/doc/pipec"};
    for (size_t k = 0; bin && k < 2 && !st->data_dir; k++) {
        char *readme = xasprintf("%s/%s/README.md", bin, trees[k]);
        if (path_exists(readme))
            st->data_dir = abs_path(xasprintf("%s/%s", bin, trees[k]));
        free(readme);
    }
    free(bin);
    st->s = (EmitSite){st->inc, st->lib, st->data_dir};
}

static void site_free(Site *st)
{
    free(st->inc);
    free(st->lib);
    free(st->data_dir);
}

/* Layer-granular recomputation (opsem_remat_use) is a plan of the cost model, the walk,
 * the arena and sim, and the CPU model workloads run it (docs/runtime.md); the CUDA
 * runtime rebuilds a whole virtual stage, so emit --backend cuda refuses it with
 * error[limit] at the `recompute ... granularity layer` directive (else at the pipeline)
 * rather than run a program whose regions differ from the plan (docs/cuda.md). Returns
 * the errors reported. */
static int refuse_layer_remat(Diag *d, const Pipeline *p, bool cuda)
{
    for (int32_t s = 0; cuda && s < p->P; s++)
        for (int32_t c = 0; c < p->V; c++) {
            RematUse u;
            opsem_remat_use(p, s, c, &u);
            if (!u.per_layer)
                continue;
            Loc loc = p->loc;
            for (uint32_t j = 0; j < p->nrecompute; j++)
                if (p->recompute[j].per_layer && p->recompute[j].lo <= s && s < p->recompute[j].hi)
                    loc = p->recompute[j].loc;
            diag_error(d, loc, DIAG_LIMIT,
                       "the cuda backend rebuilds a whole virtual stage in an R: layer-granular "
                       "recomputation (stage %d) is modelled by check and sim and run by the "
                       "cpu backend's gpt and llama workloads, but not generated for cuda", s);
            return 1;
        }
    return 0;
}

/* Compiles and emits FILE into memory (with streams.json for cuda); *nranks = the ranks
 * the program runs (P, or P x D with data_parallel D); info
 * (may be NULL) gets what `run` reports. Returns 0, 1 (input errors) or 2. */
static int generate(const DriverOpts *dopt, const char *file, bool cuda, EmitOut *out,
                    int *nranks, RunInfo *info)
{
    memset(out, 0, sizeof *out);
    Diag d = {0};
    Pipeline *p = driver_compile(&d, dopt, file);
    int rc = 1;
    if (p && refuse_layer_remat(&d, p, cuda)) {
        pipeline_free(p);
        p = NULL;
    }
    if (p) {
        /* The budget is `check`'s to enforce: a schedule over it is still generated
         * (the CPU run of a GPU-sized plan is how one studies it), with the same
         * diagnostics as warnings. */
        d.demote = true;
        driver_check_memory(&d, p);
        d.demote = false;
        if (d.nwarn)
            fprintf(stderr, "%s: warning: over its memory budget (%d warning%s); 'pipec check' "
                            "rejects it, the program is generated all the same\n",
                    file, d.nwarn, d.nwarn == 1 ? "" : "s");
    }
    /* The model shape and the plans (arena, comm, and for cuda the stream plan),
     * computed once and handed to the emitter, the stream-plan verifier and run's
     * report. */
    WorkloadShape shape = {0};
    EmitPlans plans = {0};
    if (p) {
        model_shape_of(p, &shape);
        emit_plans_build(&plans, p, &shape, cuda);
    }
    Site site;
    site_find(&site, (Target){0}); /* the Makefile builds for the CPU */
    int erc = p ? emit_c_site(&d, p, file, &site.s, &plans, out) : 1;
    site_free(&site);
    if (p && erc == 0) {
        rc = cuda ? add_stream_plan(out, p, &plans, file) : 0;
        if (rc)
            emit_out_free(out);   /* nothing is written */
        /* P x D ranks with data parallelism (runtime/piperun.h pr_dp_nranks) */
        int64_t n64 = pr_dp_nranks(p->P, p->data_parallel);
        int n = n64 > INT_MAX ? INT_MAX : (int)n64;
        if (nranks)
            *nranks = n;
        if (info) {
            info->nranks = n;
            info->mlp_ok = shape.ok;
            snprintf(info->why, sizeof info->why, "%s", shape.why);
            snprintf(info->model, sizeof info->model, "%s", p->model ? p->model->name : "");
            snprintf(info->arch, sizeof info->arch, "%s",
                     p->model ? model_arch_name(p->model) : "mlp");
        }
    }
    emit_plans_free(&plans);
    model_shape_free(&shape);
    pipeline_free(p);
    diag_free(&d);
    return rc;
}

/* The options of emit, compile and run: their own, then the program's (piperun.h), which
 * run passes through. */
enum { O_BACKEND = PR_OPT_END, O_LAUNCHER, O_CACHE,
       O_ITERS = PR_OPT_ITERS, O_CHECK = PR_OPT_CHECK, O_JSON = PR_OPT_JSON,
       O_TRACE = PR_OPT_TRACE, O_WORKLOAD = PR_OPT_WORKLOAD, O_DATA = PR_OPT_DATA,
       O_SCALE = PR_OPT_SCALE, O_TIMEOUT = PR_OPT_TIMEOUT, O_PROFILE = PR_OPT_PROFILE,
       O_LR = PR_OPT_LR, O_SEED = PR_OPT_SEED, O_QUIET = PR_OPT_QUIET, O_REF = PR_OPT_REF };

static int emit_or_compile(int argc, char **argv, bool compile)
{
    DriverOpts dopt = {0};
    const char *outdir = NULL;
    Target t = {0};
    /* --launcher only changes how the program is linked: emit has no use for it */
    static const struct option longopts[] = {
        DRIVER_LONGOPTS,
        {"backend", required_argument, NULL, O_BACKEND},
        {"launcher", required_argument, NULL, O_LAUNCHER},
        {"output", required_argument, NULL, 'o'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, DRIVER_SHORTOPTS "o:", longopts, NULL)) != -1) {
        if (driver_common_opt(&dopt, c, optarg))
            continue;
        if (c == 'o')
            outdir = optarg;
        else if ((c == O_BACKEND || (c == O_LAUNCHER && compile)) &&
                 parse_target(&t, O_BACKEND, c, optarg) == 0)
            continue;
        else {
            driver_usage(stderr, argv[0]);
            driver_opts_free(&dopt);
            return 2;
        }
    }
    if (optind != argc - 1 || !outdir) {
        fprintf(stderr, "pipec %s: need one FILE and -o DIR\n", argv[0]);
        driver_usage(stderr, argv[0]);
        driver_opts_free(&dopt);
        return 2;
    }
    EmitOut out;
    int rc = generate(&dopt, argv[optind], t.cuda, &out, NULL, NULL);
    if (rc == 0 && write_output_folder(&out, outdir) != 0)
        rc = 1;
    if (rc == 0 && compile)
        rc = build_program(&out, outdir, t);
    if (rc == 0 && compile)
        printf("%s/%s\n", outdir, out.progname);
    emit_out_free(&out);
    driver_opts_free(&dopt);
    return rc;
}

int cmd_emit(int argc, char **argv)
{
    return emit_or_compile(argc, argv, false);
}

int cmd_compile(int argc, char **argv)
{
    return emit_or_compile(argc, argv, true);
}

/* Says, before a run starts, which workload it uses and why (the program picks mlp when
 * the file's model can run on the CPU, else synthetic), and warns about more rank
 * threads than cores; quiet (--quiet, --json) keeps only errors. Returns 0, or 1 after an error (--check that cannot be met, or a
 * warning under -Werror). */
static int announce(const DriverOpts *dopt, const RunInfo *info, const char *workload,
                    bool check, bool quiet, Target t, const char *data)
{
    Diag d = {.werror = dopt->werror};
    bool mlp = workload ? strcmp(workload, "synthetic") != 0 : info->mlp_ok;
    if ((check || mlp) && !info->mlp_ok) {
        fprintf(stderr, "pipec run: %s needs the mlp workload, which cannot run this file: %s\n",
                check ? "--check" : "--workload mlp", info->why);
        if (!info->model[0])
            fprintf(stderr, "pipec run: add `model tiny` (import \"std/models.pipe\") to the "
                            "pipeline to train a real model, or run without --check\n");
        else
            fprintf(stderr, "pipec run: use a smaller model (e.g. `model tiny`) to train for "
                            "real, or run --workload synthetic without --check\n");
        return 1;
    }
    if (!quiet) {
        if (mlp)
            fprintf(stderr, "pipec run: workload %s: model %s really trains%s\n", info->arch,
                    info->model, workload ? "" : " (its shape fits the CPU workload)");
        else
            fprintf(stderr, "pipec run: workload synthetic: ops busy-wait their cost-model times "
                            "and touch scaled-down arenas%s%s%s\n",
                    workload ? " (--workload synthetic)" : "; the mlp workload cannot run this "
                                                           "file: ",
                    workload ? "" : info->why, data ? "; --data is ignored" : "");
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (!quiet && !t.mpi && cores > 0 && info->nranks > cores)
        diag_warning(&d, LOC_NONE, WARN_OVERSUBSCRIBED,
                     "%d rank threads on %ld cores: ranks share cores, so measured times are "
                     "longer than simulated ones (--launcher mpi spreads ranks over machines)",
                     info->nranks, cores);
    int rc = d.nerr ? 1 : 0;
    diag_free(&d);
    return rc;
}

/* `pipec run`'s options: the compiler's, the target's, and those passed through to the
 * program as given. */
static const struct option run_longopts[] = {
    DRIVER_LONGOPTS,
    {"backend", required_argument, NULL, O_BACKEND},
    {"launcher", required_argument, NULL, O_LAUNCHER},
    PR_PROGRAM_LONGOPTS,
    {"cache", required_argument, NULL, O_CACHE},
    {"output", required_argument, NULL, 'o'},
    {NULL, 0, NULL, 0},
};

/* What `pipec run` was asked for. */
typedef struct RunOpts {
    DriverOpts dopt;
    const char *file;
    const char *cache, *data;   /* --cache, --data, or NULL */
    const char *workload;       /* --workload, or NULL: the program's default */
    Target t;
    bool synthetic, check, quiet;
    char **pass;                /* the program's argv: [0] its path (set when it starts),
                                   then the options passed through; NULL-terminated */
    int np;                     /* entries of pass used */
} RunOpts;

/* Parses `pipec run`'s command line into ro (ro->pass allocated for the pass-through
 * options). Returns 0, or 2 after a usage message. */
static int parse_run_opts(RunOpts *ro, int argc, char **argv)
{
    memset(ro, 0, sizeof *ro);
    ro->pass = xcalloc((size_t)argc * 2 + 8, sizeof *ro->pass);
    ro->np = 1;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, DRIVER_SHORTOPTS "o:", run_longopts, NULL)) != -1) {
        if (driver_common_opt(&ro->dopt, c, optarg))
            continue;
        const char *name = NULL;
        for (const struct option *o = run_longopts; o->name; o++)
            if (o->val == c)
                name = o->name;
        switch (c) {
        case O_BACKEND: case O_LAUNCHER:
            if (parse_target(&ro->t, O_BACKEND, c, optarg) != 0)
                return 2;
            break;
        case O_CACHE: ro->cache = optarg; break;
        case O_DATA: ro->data = optarg; break;
        case O_CHECK: case O_JSON: case O_PROFILE: case O_QUIET: case O_REF:
            ro->check |= c == O_CHECK;
            ro->quiet |= c == O_QUIET || c == O_JSON; /* JSON output: no chatter beside it */
            ro->pass[ro->np++] = xasprintf("--%s", name);
            break;
        case 'o':
            ro->pass[ro->np++] = xstrdup("-o");
            ro->pass[ro->np++] = xstrdup(optarg);
            break;
        case O_WORKLOAD:
            ro->synthetic = !strcmp(optarg, "synthetic");
            ro->workload = optarg;
            /* fall through */
        case O_ITERS: case O_TRACE: case O_SCALE: case O_TIMEOUT: case O_LR: case O_SEED: {
            /* the program's own value rules, checked before anything is built */
            double v;
            const char *want = pr_option_number(c, optarg, &v);
            if (want) {
                fprintf(stderr, "pipec run: bad value '%s' for --%s (%s)\n", optarg, name, want);
                driver_usage(stderr, argv[0]);
                return 2;
            }
            ro->pass[ro->np++] = xasprintf("--%s", name);
            ro->pass[ro->np++] = xstrdup(optarg);
            break;
        }
        default:
            driver_usage(stderr, argv[0]);
            return 2;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "pipec run: need one FILE\n");
        driver_usage(stderr, argv[0]);
        return 2;
    }
    ro->file = argv[optind];
    return 0;
}

static void run_opts_free(RunOpts *ro)
{
    for (int i = 0; i < ro->np; i++)
        free(ro->pass[i]);
    free(ro->pass);
    driver_opts_free(&ro->dopt);
}

/* Runs the built program exe with the passed-through options (--data among them when
 * given; without it the program finds its default training text itself, by the rule a
 * compiled program follows: runtime/models/data.h data_load_default). Returns 0, or 1 when it
 * cannot start or fails. */
static int start_program(RunOpts *ro, const RunInfo *info, const char *exe)
{
    ro->pass[0] = xstrdup(exe);
    if (ro->data) {
        ro->pass[ro->np++] = xstrdup("--data");
        ro->pass[ro->np++] = xstrdup(ro->data);
    }
    ro->pass[ro->np] = NULL;
    int rc = ro->t.mpi ? run_mpi(ro->pass, info->nranks) : spawn(ro->pass, false);
    if (rc < 0) {
        fprintf(stderr, "pipec: cannot run %s\n", exe);
        return 1;
    }
    return rc != 0 ? 1 : 0;
}

/* pipec run: parse, generate, announce, build into the cache, start. */
/* Whether this machine shows an NVIDIA GPU: the driver's device nodes (/dev/nvidia0 and
 * up, or /dev/dxg under WSL). A machine without them cannot run --backend cuda, which
 * `pipec run` says before it builds anything; the program itself still checks with
 * cudaGetDeviceCount. */
static bool gpu_visible(void)
{
    char dev[32];
    for (int i = 0; i < 64; i++) {
        snprintf(dev, sizeof dev, "/dev/nvidia%d", i);
        if (access(dev, F_OK) == 0)
            return true;
    }
    return access("/dev/dxg", F_OK) == 0;
}

int cmd_run(int argc, char **argv)
{
    RunOpts ro;
    int rc = parse_run_opts(&ro, argc, argv);
    if (rc != 0)
        goto out;
    if (ro.t.cuda && !gpu_visible()) {
        fprintf(stderr, "pipec run: no GPU found: --backend cuda runs on a CUDA device and this "
                "machine shows none (no /dev/nvidia*); `pipec compile --backend cuda` builds the "
                "program without running it\n");
        rc = 1;
        goto out;
    }
    EmitOut eo;
    RunInfo info = {0};
    rc = generate(&ro.dopt, ro.file, ro.t.cuda, &eo, NULL, &info);
    if (rc != 0)
        goto out;
    if (announce(&ro.dopt, &info, ro.workload, ro.check, ro.quiet, ro.t, ro.data) != 0) {
        emit_out_free(&eo);
        rc = 1;
        goto out;
    }
    char *root = cache_root(ro.cache);
    char *dir = xasprintf("%s/%016llx", root, (unsigned long long)hash_out(&eo, ro.t));
    char *exe = xasprintf("%s/%s", dir, eo.progname);
    rc = build_cached(&eo, ro.t, dir, exe, info.nranks, ro.quiet);
    if (!rc)
        rc = start_program(&ro, &info, exe);
    free(root);
    free(dir);
    free(exe);
    emit_out_free(&eo);
out:
    run_opts_free(&ro);
    return rc;
}
