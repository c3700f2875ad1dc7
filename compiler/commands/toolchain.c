/* toolchain.c - building and starting generated programs (toolchain.h): where the
 * runtime and nvcc are, compile and link commands, and child processes. */
#define _POSIX_C_SOURCE 200809L
#include "toolchain.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The folder of the running pipec binary, or NULL. */
char *self_dir(void)
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

bool path_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* The runtime libraries a target links, most specific first; NULL-terminated. */
const char *const *target_libs(Target t)
{
    static const char *const cpu[] = {"libpiperun.a", NULL};
    static const char *const cpu_mpi[] = {"libpiperun_mpi.a", "libpiperun.a", NULL};
    static const char *const cuda[] = {"libpiperun_cuda.a", NULL};
    static const char *const cuda_mpi[] = {"libpiperun_cuda_mpi.a", "libpiperun_cuda.a", NULL};
    return t.cuda ? (t.mpi ? cuda_mpi : cuda) : (t.mpi ? cpu_mpi : cpu);
}

/* Finds piperun.h and the target's libraries (their folder). Returns 0, or -1 after a
 * message that names the make target that builds what is missing. */
int find_runtime(Target t, char **inc, char **lib)
{
    return find_runtime_say(t, inc, lib, true);
}

int find_runtime_say(Target t, char **inc, char **lib, bool say)
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
        if (!*inc && path_exists(hi) && path_exists(hl)) {
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
        *inc = *lib = NULL;
        return -1;
    }
    for (const char *const *n = target_libs(t); *n; n++) {
        char *path = xasprintf("%s/%s", *lib, *n);
        bool ok = path_exists(path);
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
            *inc = *lib = NULL;
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
int spawn(char *const argv[], bool quiet_out)
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

/* Runs the n commands cmds[i] (stdout to stderr), at most `jobs` at a time; with
 * progress, says "pipec: compiling K/N (NAME)" on stderr as command K starts (names[K]).
 * A command killed by a signal is named with it. Returns 0 when all exit 0, else 1
 * (every started command is waited for). */
static int spawn_many(char **const *cmds, const char *const *names, int n, int jobs,
                      bool progress)
{
    int running = 0, next = 0, bad = 0;
    pid_t *pids = xcalloc((size_t)n + 1, sizeof *pids);
    fflush(stdout);
    fflush(stderr);
    while (next < n || running > 0) {
        while (next < n && running < jobs && !bad) {
            if (progress) {
                fprintf(stderr, "pipec: compiling %d/%d (%s)\n", next + 1, n, names[next]);
                fflush(stderr);
            }
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
            pids[next++] = pid;
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
            free(pids);
            return 1;
        }
        running--;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad = 1;
        for (int k = 0; k < next && WIFSIGNALED(st); k++)
            if (pids[k] == w)
                fprintf(stderr, "pipec: %s was killed by signal %d\n", cmds[k][0],
                        WTERMSIG(st));
    }
    free(pids);
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

/* Programs whose C files add up to this many bytes say how their build goes. */
#define PROGRESS_BYTES (4u << 20)

/* The compile command of the emitted file `name` in dir, into dir/NAME.o (added to the
 * link command): the target's compiler, C11, -O0 for tables only (EmitFile.tables),
 * else -O2. */
static void compile_cmd(Argv *a, Argv *link, const char *compiler, Target t, const char *ip,
                        const char *dir, const EmitFile *f)
{
    const char *level = f->tables ? "-O0" : "-O2";
    arg(a, compiler);
    if (t.cuda) { /* nvcc compiles it as C11 */
        arg(a, "-x");
        arg(a, "c");
        arg(a, level);
        arg(a, "-Xcompiler");
        arg(a, "-std=c11,-Wall,-Wextra");
    } else {
        arg(a, "-std=c11");
        arg(a, level);
        arg(a, "-Wall");
        arg(a, "-Wextra");
    }
    arg(a, ip);
    arg(a, "-c");
    argf(a, xasprintf("%s/%s", dir, f->name));
    arg(a, "-o");
    argf(a, xasprintf("%s/%.*s.o", dir, (int)(strlen(f->name) - 2), f->name));
    arg(link, a->v[a->n - 1]);
}

int build_program(const EmitOut *out, const char *dir, Target t)
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
    /* with MPI the linker is mpicc, for CUDA too */
    const char *linker = t.mpi ? mpicc : t.cuda ? nvcc : cc;
    Argv link = {0};
    arg(&link, linker);
    arg(&link, "-o");
    arg(&link, op);
    Argv *cmds = xcalloc(out->n + 1, sizeof *cmds);
    char ***cv = xcalloc(out->n + 1, sizeof *cv);
    const char **names = xcalloc(out->n + 1, sizeof *names);
    int nc = 0;
    size_t bytes = 0;
    for (uint32_t i = 0; i < out->n; i++) {
        if (!is_c(out->files[i].name))
            continue;
        compile_cmd(&cmds[nc], &link, t.cuda ? nvcc : t.mpi ? mpicc : cc, t, ip, dir,
                    &out->files[i]);
        names[nc] = out->files[i].name;
        cv[nc] = cmds[nc].v;
        nc++;
        bytes += out->files[i].text.len;
    }
    bool progress = bytes >= PROGRESS_BYTES;
    int rc = spawn_many(cv, names, nc, ncpu(), progress);
    if (!rc) {
        if (progress)
            fprintf(stderr, "pipec: linking %s\n", op);
        link_libs(&link, t, lib, t.cuda && !t.mpi);
        rc = spawn(link.v, true) != 0;
    }
    if (rc)
        fprintf(stderr, "pipec: compiling the generated program in %s failed\n", dir);
    argv_free(&link);
    for (int i = 0; i < nc; i++)
        argv_free(&cmds[i]);
    free(cmds);
    free(cv);
    free(names);
    free(ip);
    free(op);
    free(nvcc);
    free(inc);
    free(lib);
    return rc ? 1 : 0;
}

/* Runs the program argv (argv[0] its path) as P processes: mpirun -np P --oversubscribe
 * [--allow-run-as-root] argv... Returns the exit status as spawn does. */
int run_mpi(char **argv, int P)
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
