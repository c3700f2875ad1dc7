/* cmd_emit.c - `pipec emit`, `pipec compile` (alias `build`) and `pipec run`
 * (DESIGN.md "Command line", docs/runtime.md).
 *
 *   emit FILE -o DIR [--backend cpu]       DIR/rank_K.c, main.c, program.h, Makefile
 *   compile FILE -o DIR [--backend cpu]    emit, then cc ... -o DIR/NAME with libpiperun
 *   run FILE [options]                     compile into a cache folder keyed by a hash
 *                                          of the generated sources, then run NAME
 *
 * The runtime's header and library are found next to the pipec binary: <bin>/../runtime
 * and <bin>/../build in the source tree, <prefix>/include and <prefix>/lib when
 * installed ($PIPERUN_INC / $PIPERUN_LIB override). The C compiler is $CC, else cc. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmds.h"
#include "driver.h"
#include "emit_c.h"

/* Compiles and emits FILE into memory. Returns 0, 1 (input errors) or 2. */
static int generate(const DriverOpts *dopt, const char *file, const char *backend, EmitOut *out)
{
    memset(out, 0, sizeof *out);
    if (backend && strcmp(backend, "cpu") != 0) {
        if (!strcmp(backend, "cuda"))
            fprintf(stderr, "pipec: --backend cuda is not available yet (the CUDA backend is a "
                            "later issue); use --backend cpu\n");
        else
            fprintf(stderr, "pipec: unknown backend '%s' (cpu or cuda)\n", backend);
        return 2;
    }
    Diag d = {0};
    Pipeline *p = driver_compile(&d, dopt, file);
    int rc = 1;
    if (p && emit_c(&d, p, file, out) == 0)
        rc = 0;
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

/* Finds piperun.h and libpiperun.a. Returns 0, or -1 after a message. */
static int find_runtime(char **inc, char **lib)
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
        fprintf(stderr, "pipec: cannot find the runtime (piperun.h and libpiperun.a next to "
                        "pipec; run `make`, or set PIPERUN_INC and PIPERUN_LIB)\n");
        free(*inc);
        free(*lib);
        return -1;
    }
    return 0;
}

/* Runs argv (no shell); returns its exit status, or -1 when it could not start. */
static int spawn(char *const argv[], bool quiet_out)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (quiet_out)
            dup2(2, 1);
        execvp(argv[0], argv);
        fprintf(stderr, "pipec: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        fprintf(stderr, "pipec: %s was killed by signal %d\n", argv[0], WTERMSIG(st));
    return 1;
}

/* Compiles the emitted files in dir into dir/NAME. Returns 0, or 1 after a message. */
static int build(const EmitOut *out, const char *dir)
{
    char *inc, *lib;
    if (find_runtime(&inc, &lib) != 0)
        return 1;
    const char *cc = getenv("CC");
    if (!cc || !*cc)
        cc = "cc";
    char **argv = xcalloc((size_t)out->n + 16, sizeof *argv);
    int n = 0;
    char *ip = xasprintf("-I%s", inc), *lp = xasprintf("%s/libpiperun.a", lib);
    char *op = xasprintf("%s/%s", dir, out->progname);
    argv[n++] = (char *)cc;
    argv[n++] = "-std=c11";
    argv[n++] = "-O2";
    argv[n++] = "-Wall";
    argv[n++] = "-Wextra";
    argv[n++] = ip;
    argv[n++] = "-o";
    argv[n++] = op;
    char **srcs = xcalloc(out->n + 1, sizeof *srcs);
    for (uint32_t i = 0; i < out->n; i++) {
        size_t l = strlen(out->files[i].name);
        if (l > 2 && !strcmp(out->files[i].name + l - 2, ".c"))
            argv[n++] = srcs[i] = xasprintf("%s/%s", dir, out->files[i].name);
    }
    argv[n++] = lp;
    argv[n++] = "-lopenblas";
    argv[n++] = "-lpthread";
    argv[n++] = "-lm";
    argv[n] = NULL;
    int rc = spawn(argv, true);
    if (rc != 0)
        fprintf(stderr, "pipec: compiling the generated program in %s failed\n", dir);
    for (uint32_t i = 0; i < out->n; i++)
        free(srcs[i]);
    free(srcs);
    free(argv);
    free(ip);
    free(lp);
    free(op);
    free(inc);
    free(lib);
    return rc ? 1 : 0;
}

enum { O_BACKEND = 300, O_ITERS, O_CHECK, O_JSON, O_TRACE, O_WORKLOAD, O_DATA, O_SCALE,
       O_TIMEOUT, O_PROFILE, O_LR, O_SEED, O_QUIET, O_CACHE, O_REF };

static int emit_or_compile(int argc, char **argv, bool compile)
{
    DriverOpts dopt = {0};
    const char *outdir = NULL, *backend = "cpu";
    static const struct option longopts[] = {
        DRIVER_LONGOPTS,
        {"backend", required_argument, NULL, O_BACKEND},
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
        else if (c == O_BACKEND)
            backend = optarg;
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
    int rc = generate(&dopt, argv[optind], backend, &out);
    if (rc == 0 && emit_write(&out, outdir) != 0) {
        fprintf(stderr, "pipec: cannot write %s: %s\n", outdir, strerror(errno));
        rc = 1;
    }
    if (rc == 0 && compile)
        rc = build(&out, outdir);
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

/* FNV-1a 64 over the generated files, the version and the runtime library's size and
 * modification time (a rebuilt runtime invalidates the cache). */
static uint64_t hash_out(const EmitOut *out)
{
    uint64_t h = 1469598103934665603ull;
#define MIX(ptr, len)                                            \
    for (size_t _i = 0; _i < (len); _i++) {                      \
        h ^= ((const unsigned char *)(ptr))[_i];                 \
        h *= 1099511628211ull;                                   \
    }
    MIX(PIPEC_VERSION, strlen(PIPEC_VERSION));
    for (uint32_t i = 0; i < out->n; i++) {
        MIX(out->files[i].name, strlen(out->files[i].name) + 1);
        MIX(out->files[i].text.s ? out->files[i].text.s : "", out->files[i].text.len);
    }
    char *inc, *lib;
    if (find_runtime(&inc, &lib) == 0) {
        char *lp = xasprintf("%s/libpiperun.a", lib);
        struct stat st;
        if (stat(lp, &st) == 0) {
            MIX(&st.st_size, sizeof st.st_size);
            MIX(&st.st_mtime, sizeof st.st_mtime);
        }
        free(lp);
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

/* The default training text: README.md and the docs/ pages of the tree pipec runs from,
 * concatenated into the cache. NULL when none is found (the program's built-in text). */
static char *default_data(const char *root)
{
    char *bin = self_dir();
    if (!bin)
        return NULL;
    StrBuf text = {0};
    const char *names[] = {"README.md", "docs/language.md", "docs/runtime.md", "docs/model.md",
                           "docs/semantics.md", "docs/cost-model.md", "docs/simulator.md",
                           "docs/passes.md", "docs/architecture.md"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *path = xasprintf("%s/../%s", bin, names[i]);
        size_t len;
        char *t = read_file(path, &len);
        if (t) {
            sb_puts(&text, t);
            sb_putc(&text, '\n');
        }
        free(t);
        free(path);
    }
    free(bin);
    if (text.len < 4096) {
        sb_free(&text);
        return NULL;
    }
    char *path = xasprintf("%s/text.txt", root);
    if (write_file_atomic(path, text.s, text.len) != 0) {
        free(path);
        path = NULL;
    }
    sb_free(&text);
    return path;
}

int cmd_run(int argc, char **argv)
{
    DriverOpts dopt = {0};
    const char *backend = "cpu", *cache = NULL, *data = NULL;
    static const struct option longopts[] = {
        DRIVER_LONGOPTS,
        {"backend", required_argument, NULL, O_BACKEND},
        {"iters", required_argument, NULL, O_ITERS},
        {"check", no_argument, NULL, O_CHECK},
        {"json", no_argument, NULL, O_JSON},
        {"trace", required_argument, NULL, O_TRACE},
        {"workload", required_argument, NULL, O_WORKLOAD},
        {"data", required_argument, NULL, O_DATA},
        {"time-scale", required_argument, NULL, O_SCALE},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"profile", no_argument, NULL, O_PROFILE},
        {"lr", required_argument, NULL, O_LR},
        {"seed", required_argument, NULL, O_SEED},
        {"quiet", no_argument, NULL, O_QUIET},
        {"cache", required_argument, NULL, O_CACHE},
        {"reference", no_argument, NULL, O_REF},
        {"output", required_argument, NULL, 'o'},
        {NULL, 0, NULL, 0},
    };
    /* Options for the program, passed through as given. */
    char **pass = xcalloc((size_t)argc * 2 + 8, sizeof *pass);
    int np = 1;
    bool synthetic = false;
    int c, rc = 2;
    optind = 1;
    while ((c = getopt_long(argc, argv, DRIVER_SHORTOPTS "o:", longopts, NULL)) != -1) {
        if (driver_common_opt(&dopt, c, optarg))
            continue;
        const char *name = NULL;
        for (const struct option *o = longopts; o->name; o++)
            if (o->val == c)
                name = o->name;
        switch (c) {
        case O_BACKEND: backend = optarg; break;
        case O_CACHE: cache = optarg; break;
        case O_DATA: data = optarg; break;
        case O_CHECK: case O_JSON: case O_PROFILE: case O_QUIET: case O_REF:
            pass[np++] = xasprintf("--%s", name);
            break;
        case 'o':
            pass[np++] = xstrdup("-o");
            pass[np++] = xstrdup(optarg);
            break;
        case O_WORKLOAD:
            synthetic = !strcmp(optarg, "synthetic");
            /* fall through */
        case O_ITERS: case O_TRACE: case O_SCALE: case O_TIMEOUT: case O_LR: case O_SEED:
            pass[np++] = xasprintf("--%s", name);
            pass[np++] = xstrdup(optarg);
            break;
        default:
            driver_usage(stderr, argv[0]);
            goto out;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "pipec run: need one FILE\n");
        driver_usage(stderr, argv[0]);
        goto out;
    }
    EmitOut eo;
    rc = generate(&dopt, argv[optind], backend, &eo);
    if (rc != 0)
        goto out;
    char *root = cache_root(cache);
    char *dir = xasprintf("%s/%016llx", root, (unsigned long long)hash_out(&eo));
    char *exe = xasprintf("%s/%s", dir, eo.progname);
    rc = 0;
    if (mkdirs(dir) != 0) {
        fprintf(stderr, "pipec: cannot create the cache folder %s: %s\n", dir, strerror(errno));
        rc = 1;
    } else if (!exists(exe)) {
        if (emit_write(&eo, dir) != 0) {
            fprintf(stderr, "pipec: cannot write %s: %s\n", dir, strerror(errno));
            rc = 1;
        } else
            rc = build(&eo, dir);
    }
    char *dd = NULL;
    if (!rc && !data && !synthetic)
        dd = default_data(root);
    if (!rc) {
        pass[0] = xstrdup(exe);
        if (data || dd) {
            pass[np++] = xstrdup("--data");
            pass[np++] = xstrdup(data ? data : dd);
        }
        pass[np] = NULL;
        rc = spawn(pass, false);
        if (rc < 0) {
            fprintf(stderr, "pipec: cannot run %s\n", exe);
            rc = 1;
        } else if (rc != 0)
            rc = 1;
    }
    free(dd);
    free(root);
    free(dir);
    free(exe);
    emit_out_free(&eo);
out:
    for (int i = 0; i < np; i++)
        free(pass[i]);
    free(pass);
    driver_opts_free(&dopt);
    return rc;
}
