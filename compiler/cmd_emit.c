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
 * mpi (one process per rank). The generated C is the same for every target: it calls
 * only runtime/piperun.h; the target picks the compiler and the libraries:
 *
 *   cpu  threads   $CC (cc)   libpiperun.a
 *   cpu  mpi       $MPICC (mpicc), -Wl,--wrap=pr_main,--wrap=pr_run,
 *                  libpiperun_mpi.a libpiperun.a
 *   cuda threads   nvcc -x c per file; nvcc links libpiperun_cuda.a, cuBLAS, NCCL, cudart
 *   cuda mpi       nvcc -x c per file; $MPICC links with the wraps libpiperun_cuda_mpi.a
 *                  libpiperun_cuda.a, cuBLAS, NCCL, cudart, libstdc++
 *
 * The runtime's header and libraries are found next to the pipec binary: <bin>/../runtime
 * and <bin>/../build in the source tree, <prefix>/include and <prefix>/lib when
 * installed ($PIPERUN_INC / $PIPERUN_LIB override). nvcc is found on PATH, else as
 * $CUDA_HOME/bin/nvcc (CUDA_HOME defaults to /usr/local/cuda); its libraries are in
 * $CUDA_HOME/lib64. mpirun is $MPIRUN, else mpirun. */
#define _GNU_SOURCE /* renameat2 (Linux): swap the output folder in one step */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmds.h"
#include "costmodel.h"
#include "driver.h"
#include "emit_c.h"
#include "piperun.h"
#include "pr_options.h"
#include "stream_check.h"

/* What the generated program is built for. */
typedef struct Target {
    bool cuda;        /* --backend cuda */
    bool mpi;         /* --launcher mpi */
} Target;

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

/* Appends streams.json, the CUDA backend's stream plan (stream_check.h), to out, after
 * the verifier passed it against the arena plans the program uses (cost model and, when
 * it runs, mlp). Returns 0, or 1 with a message (a plan that fails is pipec's bug). */
static int add_stream_plan(EmitOut *out, const Pipeline *p, const char *file)
{
    char why[400] = "";
    StrBuf json = {0};
    int nbad = stream_plan_verify(p, &json, why, sizeof why);
    if (nbad) {
        fprintf(stderr, "%s: internal error: the CUDA stream plan fails its verifier (%d "
                        "violation%s): %s\n", file, nbad, nbad == 1 ? "" : "s", why);
        sb_free(&json);
        return 1;
    }
    size_t cap = out->cap;
    VEC_RESERVE(out->files, (size_t)out->n + 1, cap);
    out->cap = (uint32_t)cap;
    EmitFile *f = &out->files[out->n++];
    f->name = xstrdup("streams.json");
    f->text = json;
    return 0;
}

/* The folders of this pipec's installation that the generated program is given
 * (emit_c.h EmitSite), absolute; each NULL when not found. */
typedef struct Site {
    EmitSite s;
    char *inc, *lib, *data_dir;
} Site;

static char *self_dir(void);
static bool exists(const char *path);
static int find_runtime_say(Target t, char **inc, char **lib, bool say);

static char *abs_path(char *p)
{
    char *r = p ? realpath(p, NULL) : NULL;
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
        if (exists(readme))
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
    Site site;
    site_find(&site, (Target){0}); /* the Makefile builds for the CPU */
    int erc = p ? emit_c_site(&d, p, file, &site.s, out) : 1;
    site_free(&site);
    if (p && erc == 0) {
        rc = cuda ? add_stream_plan(out, p, file) : 0;
        if (rc)
            emit_out_free(out);   /* nothing is written */
        /* P x D ranks with data parallelism (runtime/piperun.h pr_dp_nranks) */
        int64_t n64 = pr_dp_nranks(p->P, p->data_parallel);
        int n = n64 > INT_MAX ? INT_MAX : (int)n64;
        if (nranks)
            *nranks = n;
        if (info) {
            MlpShape shape;
            info->nranks = n;
            info->mlp_ok = mlp_shape(p, &shape, info->why, sizeof info->why) == 0;
            if (info->mlp_ok)
                mlp_shape_free(&shape);
            snprintf(info->model, sizeof info->model, "%s", p->model ? p->model->name : "");
            snprintf(info->arch, sizeof info->arch, "%s",
                     p->model ? model_arch_name(p->model) : "mlp");
        }
    }
    pipeline_free(p);
    diag_free(&d);
    return rc;
}

/* The folder of the running pipec binary, or NULL. */
static char *self_dir(void)
{
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0)
        return NULL;
    buf[n] = 0;
    char *slash = strrchr(buf, '/');
    if (!slash)
        return NULL;
    *slash = 0;
    return xstrdup(buf);
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* The runtime libraries a target links, most specific first; NULL-terminated. */
static const char *const *target_libs(Target t)
{
    static const char *const cpu[] = {"libpiperun.a", NULL};
    static const char *const cpu_mpi[] = {"libpiperun_mpi.a", "libpiperun.a", NULL};
    static const char *const cuda[] = {"libpiperun_cuda.a", NULL};
    static const char *const cuda_mpi[] = {"libpiperun_cuda_mpi.a", "libpiperun_cuda.a", NULL};
    return t.cuda ? (t.mpi ? cuda_mpi : cuda) : (t.mpi ? cpu_mpi : cpu);
}

/* Finds piperun.h and the target's libraries (their folder). Returns 0, or -1 after a
 * message that names the make target that builds what is missing. */
static int find_runtime(Target t, char **inc, char **lib)
{
    return find_runtime_say(t, inc, lib, true);
}

/* find_runtime; say false: no message. */
static int find_runtime_say(Target t, char **inc, char **lib, bool say)
{
    const char *ei = getenv("PIPERUN_INC"), *el = getenv("PIPERUN_LIB");
    char *bin = self_dir();
    *inc = *lib = NULL;
    const char *ci[2] = {"../runtime", "../include"}, *cl[2] = {"../build", "../lib"};
    if (ei && *ei)
        *inc = xstrdup(ei);
    if (el && *el)
        *lib = xstrdup(el);
    for (int k = 0; bin && k < 2; k++) {
        char *i = xasprintf("%s/%s", bin, ci[k]), *l = xasprintf("%s/%s", bin, cl[k]);
        char *hi = xasprintf("%s/piperun.h", i), *hl = xasprintf("%s/libpiperun.a", l);
        if (!*inc && exists(hi) && exists(hl)) {
            *inc = i;
            i = NULL;
            if (!*lib) {
                *lib = l;
                l = NULL;
            }
        }
        free(i);
        free(l);
        free(hi);
        free(hl);
    }
    free(bin);
    if (!*inc || !*lib) {
        if (say)
            fprintf(stderr, "pipec: cannot find the runtime (piperun.h and libpiperun.a next to "
                        "pipec; run `make`, or set PIPERUN_INC and PIPERUN_LIB)\n");
        free(*inc);
        free(*lib);
        return -1;
    }
    for (const char *const *n = target_libs(t); *n; n++) {
        char *path = xasprintf("%s/%s", *lib, *n);
        bool ok = exists(path);
        free(path);
        if (!ok) {
            const char *how = !strcmp(*n, "libpiperun_cuda.a") ? "make cuda"
                              : !strcmp(*n, "libpiperun_mpi.a") ? "make mpi"
                              : !strcmp(*n, "libpiperun_cuda_mpi.a") ? "make cuda-mpi"
                                                                     : "make";
            if (say)
                fprintf(stderr, "pipec: cannot find %s in %s (run `%s`)\n", *n, *lib, how);
            free(*inc);
            free(*lib);
            return -1;
        }
    }
    return 0;
}

/* $CUDA_HOME, else /usr/local/cuda. */
static const char *cuda_home(void)
{
    const char *h = getenv("CUDA_HOME");
    return h && *h ? h : "/usr/local/cuda";
}

/* Whether the executable `name` is on PATH. */
static bool on_path(const char *name)
{
    const char *path = getenv("PATH");
    if (!path)
        return false;
    char *copy = xstrdup(path), *save = NULL;
    bool found = false;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char *f = xasprintf("%s/%s", *d ? d : ".", name);
        found = access(f, X_OK) == 0;
        free(f);
    }
    free(copy);
    return found;
}

/* nvcc on PATH, else $CUDA_HOME/bin/nvcc; NULL after a message when neither exists. */
static char *find_nvcc(void)
{
    if (on_path("nvcc"))
        return xstrdup("nvcc");
    char *p = xasprintf("%s/bin/nvcc", cuda_home());
    if (access(p, X_OK) == 0)
        return p;
    fprintf(stderr, "pipec: --backend cuda needs nvcc, the CUDA compiler: it is not on PATH and "
                    "not at %s (install the CUDA toolkit or set CUDA_HOME)\n", p);
    free(p);
    return NULL;
}

/* Runs argv (no shell) and waits; returns its exit status, or -1 after a message when
 * it could not start or be waited for. With quiet_out its stdout goes to stderr. */
static int spawn(char *const argv[], bool quiet_out)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "pipec: cannot start %s: %s\n", argv[0], strerror(errno));
        return -1;
    }
    if (pid == 0) {
        if (quiet_out)
            dup2(2, 1);
        execvp(argv[0], argv);
        fprintf(stderr, "pipec: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            fprintf(stderr, "pipec: cannot wait for %s: %s\n", argv[0], strerror(errno));
            return -1;
        }
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        fprintf(stderr, "pipec: %s was killed by signal %d\n", argv[0], WTERMSIG(st));
    return 1;
}

/* Runs the n commands cmds[i] (stdout to stderr), at most `jobs` at a time. Returns 0
 * when all exit 0, else 1 (every started command is waited for). */
static int spawn_many(char **const *cmds, int n, int jobs)
{
    int running = 0, next = 0, bad = 0;
    fflush(stdout);
    fflush(stderr);
    while (next < n || running > 0) {
        while (next < n && running < jobs && !bad) {
            pid_t pid = fork();
            if (pid < 0) {
                fprintf(stderr, "pipec: cannot start %s: %s\n", cmds[next][0], strerror(errno));
                bad = 1;
                break;
            }
            if (pid == 0) {
                dup2(2, 1);
                execvp(cmds[next][0], cmds[next]);
                fprintf(stderr, "pipec: cannot run %s: %s\n", cmds[next][0], strerror(errno));
                _exit(127);
            }
            next++;
            running++;
        }
        if (running == 0)
            break;
        int st;
        pid_t w = waitpid(-1, &st, 0);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "pipec: cannot wait for the compiler: %s\n", strerror(errno));
            return 1;
        }
        running--;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad = 1;
    }
    return bad || next < n;
}

/* A NULL-terminated argument list under construction. */
typedef struct Argv {
    char **v;
    int n, cap;
    char **owned;      /* strings to free */
    int nown, capown;
} Argv;

static void arg(Argv *a, const char *s)
{
    if (a->n + 2 > a->cap) {
        a->cap = a->cap ? 2 * a->cap : 32;
        a->v = xrealloc(a->v, (size_t)a->cap * sizeof *a->v);
    }
    a->v[a->n++] = (char *)s;
    a->v[a->n] = NULL;
}

/* Appends a string the list owns. */
static void argf(Argv *a, char *s)
{
    if (a->nown == a->capown) {
        a->capown = a->capown ? 2 * a->capown : 16;
        a->owned = xrealloc(a->owned, (size_t)a->capown * sizeof *a->owned);
    }
    a->owned[a->nown++] = s;
    arg(a, s);
}

static void argv_free(Argv *a)
{
    for (int i = 0; i < a->nown; i++)
        free(a->owned[i]);
    free(a->owned);
    free(a->v);
    memset(a, 0, sizeof *a);
}

static bool is_c(const char *name)
{
    size_t l = strlen(name);
    return l > 2 && !strcmp(name + l - 2, ".c");
}

/* The link flags of target t after the objects or sources: runtime libraries, then
 * cuBLAS/NCCL/cudart for CUDA, OpenBLAS, pthreads, libm. nvcc links only without MPI
 * (with MPI the linker is mpicc, for CUDA too), so the MPI wrapping is gcc's spelling. */
static void link_libs(Argv *a, Target t, const char *lib, bool linker_is_nvcc)
{
    if (t.mpi) {
        arg(a, "-Wl,--wrap=pr_main");
        arg(a, "-Wl,--wrap=pr_run");
    }
    for (const char *const *n = target_libs(t); *n; n++)
        argf(a, xasprintf("%s/%s", lib, *n));
    if (t.cuda) {
        argf(a, xasprintf("-L%s/lib64", cuda_home()));
        if (linker_is_nvcc) {
            arg(a, "-Xlinker");
            argf(a, xasprintf("-rpath=%s/lib64", cuda_home()));
        } else {
            argf(a, xasprintf("-Wl,-rpath,%s/lib64", cuda_home()));
        }
        arg(a, "-lcublas");
        arg(a, "-lnccl");
        arg(a, "-lcudart");
        if (!linker_is_nvcc)
            arg(a, "-lstdc++");
    }
    arg(a, "-lopenblas");
    arg(a, "-lpthread");
    arg(a, "-lm");
}

/* Parallel compile jobs: the online processors, 1..8. */
static int ncpu(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

/* Compiles the emitted files in dir into dir/NAME for target t. Returns 0, or 1 after
 * a message. */
static int build(const EmitOut *out, const char *dir, Target t)
{
    char *inc, *lib;
    if (find_runtime(t, &inc, &lib) != 0)
        return 1;
    char *nvcc = NULL;
    if (t.cuda && !(nvcc = find_nvcc())) {
        free(inc);
        free(lib);
        return 1;
    }
    const char *mpicc = getenv("MPICC");
    if (!mpicc || !*mpicc)
        mpicc = "mpicc";
    const char *cc = getenv("CC");
    if (!cc || !*cc)
        cc = "cc";
    char *ip = xasprintf("-I%s", inc), *op = xasprintf("%s/%s", dir, out->progname);
    Argv link = {0};
    int rc = 0;
    if (!t.cuda) {
        /* one compiler call: sources, runtime, libraries */
        arg(&link, t.mpi ? mpicc : cc);
        arg(&link, "-std=c11");
        arg(&link, "-O2");
        arg(&link, "-Wall");
        arg(&link, "-Wextra");
        arg(&link, ip);
        arg(&link, "-o");
        arg(&link, op);
        for (uint32_t i = 0; i < out->n; i++)
            if (is_c(out->files[i].name))
                argf(&link, xasprintf("%s/%s", dir, out->files[i].name));
        link_libs(&link, t, lib, false);
        rc = spawn(link.v, true) != 0;
    } else {
        /* nvcc compiles each file as C11 (in parallel), then links */
        Argv *cmds = xcalloc(out->n + 1, sizeof *cmds);
        char ***cv = xcalloc(out->n + 1, sizeof *cv);
        int nc = 0;
        for (uint32_t i = 0; i < out->n; i++) {
            if (!is_c(out->files[i].name))
                continue;
            Argv *a = &cmds[nc];
            const char *name = out->files[i].name;
            arg(a, nvcc);
            arg(a, "-x");
            arg(a, "c");
            arg(a, "-O2");
            arg(a, "-Xcompiler");
            arg(a, "-std=c11,-Wall,-Wextra");
            arg(a, ip);
            arg(a, "-c");
            argf(a, xasprintf("%s/%s", dir, name));
            arg(a, "-o");
            argf(a, xasprintf("%s/%.*s.o", dir, (int)(strlen(name) - 2), name));
            argf(&link, xstrdup(a->v[a->n - 1]));
            cv[nc++] = a->v;
        }
        rc = spawn_many(cv, nc, ncpu());
        for (int i = 0; i < nc; i++)
            argv_free(&cmds[i]);
        free(cmds);
        free(cv);
        if (!rc) {
            /* the objects are at the front of link.v: put the linker before them */
            Argv full = {0};
            arg(&full, t.mpi ? mpicc : nvcc);
            arg(&full, "-o");
            arg(&full, op);
            for (int i = 0; i < link.n; i++)
                arg(&full, link.v[i]);
            link_libs(&full, t, lib, !t.mpi);
            rc = spawn(full.v, true) != 0;
            argv_free(&full);
        }
    }
    if (rc)
        fprintf(stderr, "pipec: compiling the generated program in %s failed\n", dir);
    argv_free(&link);
    free(ip);
    free(op);
    free(nvcc);
    free(inc);
    free(lib);
    return rc ? 1 : 0;
}

/* --- the output folder: all old or all new ------------------------------------------- */

/* Whether an entry of an existing output folder is one pipec may replace: a regular
 * file that an emit or a compile writes (sources, headers, objects, the Makefile, the
 * program). Anything else (a subfolder, a link, notes.txt) keeps the folder as it is. */
static bool replaceable(const char *dir, const char *name)
{
    char *path = xasprintf("%s/%s", dir, name);
    struct stat st;
    bool ok = lstat(path, &st) == 0 && S_ISREG(st.st_mode);
    free(path);
    if (!ok)
        return false;
    size_t l = strlen(name);
    bool generated = !strcmp(name, "Makefile") ||
                     (l > 2 && name[l - 2] == '.' && strchr("cho", name[l - 1]));
    return generated || (st.st_mode & S_IXUSR);
}

/* A folder being written or replaced, and the names of the files in it: everything
 * needed to remove it again without allocating (so out_of_memory can). */
typedef struct Folder {
    char *path;
    const char **names;   /* [n] file names in it */
    uint32_t n;
} Folder;

/* Removes the files named in f and then the folder. Returns 0 or -1. Allocates
 * nothing: it runs on the out-of-memory path too. */
static int folder_remove(const Folder *f)
{
    char path[PATH_MAX];
    int rc = 0;
    for (uint32_t i = 0; i < f->n; i++) {
        int k = snprintf(path, sizeof path, "%s/%s", f->path, f->names[i]);
        if (k < 0 || (size_t)k >= sizeof path || (unlink(path) != 0 && errno != ENOENT))
            rc = -1;
    }
    return rmdir(f->path) != 0 ? -1 : rc;
}

static void folder_remove_cb(void *f)
{
    folder_remove(f);
}

/* Lists an existing folder dir into *f, checking that it holds only files pipec
 * writes. Returns 0, or 1 after a message naming the first entry that is not. */
static int folder_list(const char *dir, Folder *f, size_t *cap)
{
    DIR *dp = opendir(dir);
    if (!dp) {
        fprintf(stderr, "pipec: cannot read %s: %s\n", dir, strerror(errno));
        return 1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (errno = 0, e = readdir(dp)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (!replaceable(dir, e->d_name)) {
            fprintf(stderr, "pipec: %s/%s is not a file pipec writes: leaving %s as it is "
                            "(give -o a new folder or one pipec wrote)\n", dir, e->d_name, dir);
            rc = 1;
        } else {
            VEC_PUSH(f->names, f->n, *cap, xstrdup(e->d_name));
        }
    }
    if (rc == 0 && errno) { /* readdir failed: the listing is not the whole folder */
        fprintf(stderr, "pipec: cannot read %s: %s\n", dir, strerror(errno));
        rc = 1;
    }
    closedir(dp);
    return rc;
}

/* Writes every file of out into the folder outdir so that, whatever fails (a full
 * disk, an I/O error, out of memory), the folder is either as it was or holds exactly
 * the new files: they go into a fresh folder beside it (DIR.tmpXXXXXX), which then
 * takes its place in one rename (renameat2 RENAME_EXCHANGE; where the file system
 * lacks it, two renames that put the old folder back on failure). An existing folder
 * must hold only files pipec writes (replaceable). Returns 0, or 1 after a message
 * that names the file or folder that failed. */
static int write_output_folder(const EmitOut *out, const char *outdir)
{
    char *dir = xstrdup(outdir);
    for (size_t l = strlen(dir); l > 1 && dir[l - 1] == '/'; l--)
        dir[l - 1] = 0;
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    Folder fresh = {0}, old = {0};
    size_t oldcap = 0;
    const char **names = xcalloc(out->n + 1, sizeof *names);
    for (uint32_t i = 0; i < out->n; i++)
        names[i] = out->files[i].name;
    int rc = 1;
    struct stat st;
    bool exists_before = lstat(dir, &st) == 0;
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
        fprintf(stderr, "pipec: -o %s: name the output folder itself (not '.' or '..')\n", outdir);
        goto done;
    }
    if (exists_before && !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "pipec: cannot write %s: it exists and is not a folder\n", dir);
        goto done;
    }
    if (exists_before && folder_list(dir, &old, &oldcap) != 0)
        goto done;
    char *tmp = xasprintf("%s.tmpXXXXXX", dir);
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "pipec: cannot create a folder beside %s: %s\n", dir, strerror(errno));
        free(tmp);
        goto done;
    }
    fresh = (Folder){tmp, names, out->n};
    set_fatal_cleanup(folder_remove_cb, &fresh);
    if (chmod(tmp, 0755) != 0) {
        fprintf(stderr, "pipec: cannot write %s: %s\n", dir, strerror(errno));
        goto done;
    }
    for (uint32_t i = 0; i < out->n; i++) {
        char *path = xasprintf("%s/%s", tmp, out->files[i].name);
        const StrBuf *t = &out->files[i].text;
        int w = write_file_atomic(path, sb_str(t), t->len);
        free(path);
        if (w != 0) {
            fprintf(stderr, "pipec: cannot write %s/%s: %s\n", dir, out->files[i].name,
                    strerror(errno));
            goto done;
        }
    }
    char *aside = exists_before ? xasprintf("%s.oldXXXXXX", dir) : NULL;
    if (!exists_before) {
        if (rename(tmp, dir) != 0) {
            fprintf(stderr, "pipec: cannot create %s: %s\n", dir, strerror(errno));
            goto done;
        }
    } else if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
        old.path = tmp; /* tmp now holds the old files */
        if (folder_remove(&old) != 0)
            fprintf(stderr, "pipec: warning: cannot remove the old files in %s\n", tmp);
    } else if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
        fprintf(stderr, "pipec: cannot replace %s: %s\n", dir, strerror(errno));
        free(aside);
        goto done;
    } else {
        /* No exchange here: move the old folder aside (onto an empty one), the new in. */
        bool made = mkdtemp(aside) != NULL;
        if (!made || rename(dir, aside) != 0) {
            fprintf(stderr, "pipec: cannot replace %s: %s\n", dir, strerror(errno));
            if (made)
                rmdir(aside);
            free(aside);
            goto done;
        }
        if (rename(tmp, dir) != 0) {
            fprintf(stderr, "pipec: cannot replace %s: %s\n", dir, strerror(errno));
            if (rename(aside, dir) != 0)
                fprintf(stderr, "pipec: the old files of %s are in %s\n", dir, aside);
            free(aside);
            goto done;
        }
        old.path = aside;
        if (folder_remove(&old) != 0)
            fprintf(stderr, "pipec: warning: cannot remove the old files in %s\n", aside);
    }
    free(aside);
    fresh.n = 0; /* committed: nothing of it to remove */
    rc = 0;
done:
    set_fatal_cleanup(NULL, NULL);
    if (fresh.path && fresh.n && folder_remove(&fresh) != 0)
        fprintf(stderr, "pipec: warning: cannot remove %s\n", fresh.path);
    free(fresh.path);
    for (uint32_t i = 0; i < old.n; i++)
        free((char *)old.names[i]);
    free(old.names);
    free(names);
    free(dir);
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
        rc = build(&out, outdir, t);
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

/* FNV-1a 64 over the generated files, the version, the target and the size and
 * modification time of the runtime libraries it links (a rebuilt runtime invalidates
 * the cache). */
static uint64_t hash_out(const EmitOut *out, Target t)
{
    uint64_t h = 1469598103934665603ull;
#define MIX(ptr, len)                                            \
    for (size_t _i = 0; _i < (len); _i++) {                      \
        h ^= ((const unsigned char *)(ptr))[_i];                 \
        h *= 1099511628211ull;                                   \
    }
    MIX(PIPEC_VERSION, strlen(PIPEC_VERSION));
    const char *tag = t.cuda ? (t.mpi ? "cuda+mpi" : "cuda") : (t.mpi ? "cpu+mpi" : "cpu");
    MIX(tag, strlen(tag) + 1);
    for (uint32_t i = 0; i < out->n; i++) {
        MIX(out->files[i].name, strlen(out->files[i].name) + 1);
        MIX(sb_str(&out->files[i].text), out->files[i].text.len);
    }
    char *inc, *lib;
    if (find_runtime(t, &inc, &lib) == 0) {
        for (const char *const *n = target_libs(t); *n; n++) {
            char *lp = xasprintf("%s/%s", lib, *n);
            struct stat st;
            if (stat(lp, &st) == 0) {
                MIX(&st.st_size, sizeof st.st_size);
                MIX(&st.st_mtime, sizeof st.st_mtime);
            }
            free(lp);
        }
        free(inc);
        free(lib);
    }
#undef MIX
    return h;
}

/* mkdir -p. */
static int mkdirs(const char *path)
{
    char *p = xstrdup(path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                free(p);
                return -1;
            }
            *s = '/';
        }
    int rc = mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
    free(p);
    return rc;
}

static char *cache_root(const char *opt)
{
    if (opt)
        return xstrdup(opt);
    const char *x = getenv("XDG_CACHE_HOME");
    if (x && *x == '/')
        return xasprintf("%s/pipec", x);
    const char *home = getenv("HOME");
    if (home && *home == '/')
        return xasprintf("%s/.cache/pipec", home);
    return xstrdup(".cache/pipec");
}

/* Runs the program argv (argv[0] its path) as P processes: mpirun -np P --oversubscribe
 * [--allow-run-as-root] argv... Returns the exit status as spawn does. */
static int run_mpi(char **argv, int P)
{
    const char *mpirun = getenv("MPIRUN");
    Argv a = {0};
    arg(&a, mpirun && *mpirun ? mpirun : "mpirun");
    arg(&a, "-np");
    argf(&a, xasprintf("%d", P));
    arg(&a, "--oversubscribe");   /* more ranks than cores is fine: ranks mostly wait */
    if (geteuid() == 0)
        arg(&a, "--allow-run-as-root");
    for (int i = 0; argv[i]; i++)
        arg(&a, argv[i]);
    int rc = spawn(a.v, false);
    argv_free(&a);
    return rc;
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

/* Makes sure the cache folder dir holds the built program exe: writes the generated
 * files and builds them unless an earlier run did. Returns 0, or 1 after a message. */
static int build_cached(const EmitOut *eo, Target t, const char *dir, const char *exe,
                        int nranks, bool quiet)
{
    if (mkdirs(dir) != 0) {
        fprintf(stderr, "pipec: cannot create the cache folder %s: %s\n", dir, strerror(errno));
        return 1;
    }
    if (exists(exe))
        return 0;
    if (!quiet)
        fprintf(stderr, "pipec run: building %s (%d rank%s) in %s\n", eo->progname, nranks,
                nranks == 1 ? "" : "s", dir);
    const char *failed;
    if (emit_write(eo, dir, &failed) != 0) {
        fprintf(stderr, "pipec: cannot write %s%s%s: %s\n", dir, failed ? "/" : "",
                failed ? failed : "", strerror(errno));
        return 1;
    }
    return build(eo, dir, t);
}

/* Runs the built program exe with the passed-through options (--data among them when
 * given; without it the program finds its default training text itself, by the rule a
 * compiled program follows: runtime/data.h data_load_default). Returns 0, or 1 when it
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
