/* cmd_check.c - `pipec check`, `pipec print` and `pipec opt` (DESIGN.md "Command line").
 *
 * All three compile through driver_compile; check adds the memory walk, print writes
 * the canonical explicit form, opt runs a pass list given on the command line (the
 * syntax of `apply` arguments) with the structural and dependency checks after every
 * pass, then prints like print. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "arena_plan.h"
#include "check.h"
#include "emit_c.h"
#include "cmds.h"
#include "driver.h"
#include "passes.h"
#include "print.h"
#include "util.h"

/* Writes out to path atomically, or to stdout when path is NULL. Returns 0 or 1 with a
 * message. */
static int write_output(const char *path, const StrBuf *out)
{
    const char *s = out->s ? out->s : "";
    if (!path || !strcmp(path, "-")) {
        fwrite(s, 1, out->len, stdout);
        return flush_stdout();
    }
    if (write_file_atomic(path, s, out->len) != 0) {
        fprintf(stderr, "pipec: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

static int usage_error(const char *cmd)
{
    driver_usage(stderr, cmd);
    return 2;
}

/* --- pipec check ----------------------------------------------------------------- */

int cmd_check(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"mem", no_argument, NULL, 'm'},
        {"quiet", no_argument, NULL, 'q'},
        DRIVER_LONGOPTS,
        {0, 0, 0, 0},
    };
    DriverOpts o = {0};
    bool mem = false, quiet = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "mq" DRIVER_SHORTOPTS, longopts, NULL)) != -1) {
        if (driver_common_opt(&o, c, optarg))
            continue;
        switch (c) {
        case 'm':
            mem = true;
            break;
        case 'q':
            quiet = true;
            break;
        default:
            driver_opts_free(&o);
            return usage_error("check");
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "pipec check: no input file\n");
        driver_opts_free(&o);
        return usage_error("check");
    }
    int status = 0;
    for (int i = optind; i < argc; i++) {
        Diag d = {0};
        Pipeline *p = driver_compile(&d, &o, argv[i]);
        /* driver_compile ran CHECK_STRUCTURE | CHECK_DEPS; the memory checks (walk,
         * then arena) complete CHECK_ALL. */
        if (p && driver_check_memory(&d, p))
            driver_memory_remedy(&d, p, argv[i]);
        if (p && mem) {
            check_mem_table(stdout, p);
            arena_plan_report(stdout, p, NULL,
                              "the cost model's act, ckpt and wact (what the budget is "
                              "checked with)");
            /* When the runtime implements the model's workload, also the arena the
             * generated program really plans, with its real tensor sizes. */
            MlpShape shape;
            char why[200];
            if (mlp_shape(p, &shape, why, sizeof why) == 0) {
                static const char *const arch[] = {"mlp", "gpt", "llama"};
                char what[160];
                snprintf(what, sizeof what,
                         "the %s workload's real region sizes (the arena `pipec run` "
                         "allocates; weights are the cost model's)",
                         arch[shape.arch >= 0 && shape.arch <= 2 ? shape.arch : 0]);
                arena_plan_report(stdout, p, shape.sizes, what);
                mlp_shape_free(&shape);
            }
        }
        const char *shown = strcmp(argv[i], "-") ? argv[i] : "<stdin>";
        if (d.nerr) {
            fprintf(stderr, "%s: %d error%s\n", shown, d.nerr, d.nerr == 1 ? "" : "s");
            status = 1;
        } else if (!quiet) {
            printf("%s: ok: pipeline %s, %d stage%s, %d micro-batch%s, %d chunk%s, %llu ops\n",
                   shown, p->name, (int)p->P, p->P == 1 ? "" : "s", (int)p->M,
                   p->M == 1 ? "" : "es", (int)p->V, p->V == 1 ? "" : "s",
                   (unsigned long long)pipeline_nops(p));
        }
        pipeline_free(p);
        diag_free(&d);
    }
    if (flush_stdout() != 0)
        status = 1;
    driver_opts_free(&o);
    return status;
}

/* --- pipec print ----------------------------------------------------------------- */

int cmd_print(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        DRIVER_LONGOPTS,
        {0, 0, 0, 0},
    };
    DriverOpts o = {0};
    const char *outpath = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:" DRIVER_SHORTOPTS, longopts, NULL)) != -1) {
        if (driver_common_opt(&o, c, optarg))
            continue;
        if (c == 'o') {
            outpath = optarg;
            continue;
        }
        driver_opts_free(&o);
        return usage_error("print");
    }
    if (argc - optind != 1) {
        fprintf(stderr, "pipec print: expected one input file\n");
        driver_opts_free(&o);
        return usage_error("print");
    }
    Diag d = {0};
    Pipeline *p = driver_compile(&d, &o, argv[optind]);
    int status = 1;
    if (p) {
        StrBuf out = {0};
        print_pipeline(&out, p);
        status = write_output(outpath, &out);
        sb_free(&out);
    }
    pipeline_free(p);
    diag_free(&d);
    driver_opts_free(&o);
    return status;
}

/* --- pipec opt: the --pass list -------------------------------------------------- */

/* A recursive-descent reader over the pseudo file "<--pass>":
 *
 *     list  = call { "," call }
 *     call  = NAME [ "(" [ arg { "," arg } ] ")" ]
 *     arg   = NAME "=" value
 *     value = NUMBER [UNIT] | INT ".." INT | INT "..=" INT | NAME | "[" NUMBER { "," NUMBER } "]"
 *
 * Units as in the language: us ms s (times, to ms), B KiB MiB GiB TiB KB MB GB TB (to
 * bytes), SIZE/s (to bytes per second). Errors are `syntax` or `value` at the offending
 * byte. */
typedef struct PassLexer {
    Diag *d;
    uint32_t file;
    const char *s;  /* the whole option text */
    uint32_t pos;
    int nerr;
} PassLexer;

static Loc pl_loc(const PassLexer *l, uint32_t at)
{
    return (Loc){at, l->file};
}

static void pl_space(PassLexer *l)
{
    while (l->s[l->pos] == ' ' || l->s[l->pos] == '\t')
        l->pos++;
}

static bool pl_accept(PassLexer *l, const char *tok)
{
    pl_space(l);
    size_t n = strlen(tok);
    if (strncmp(l->s + l->pos, tok, n) != 0)
        return false;
    l->pos += (uint32_t)n;
    return true;
}

static bool is_ident_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_ident(char c)
{
    return is_ident_start(c) || (c >= '0' && c <= '9');
}

static void pl_error(PassLexer *l, uint32_t at, DiagCode code, const char *what)
{
    char near[24];
    const char *s = l->s + at;
    size_t k = strcspn(s, ",()=[] ");
    k = k == 0 ? 1 : k > 12 ? 12 : k;
    if (!*s)
        snprintf(near, sizeof near, "the end of the list");
    else
        snprintf(near, sizeof near, "'%.*s'", (int)k, s);
    for (char *q = near; *q; q++) /* the message is quoted raw: keep it printable */
        if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f)
            *q = '?';
    diag_error(l->d, pl_loc(l, at), code, "%s, found %s", what, near);
    l->nerr++;
}

/* An identifier at the cursor, or NULL (nothing consumed). */
static char *pl_ident(PassLexer *l)
{
    pl_space(l);
    uint32_t b = l->pos;
    if (!is_ident_start(l->s[b]))
        return NULL;
    while (is_ident(l->s[l->pos]))
        l->pos++;
    return xstrndup(l->s + b, l->pos - b);
}

static const struct {
    const char *name;
    UnitClass unit;
    double scale;   /* to ms, bytes or bytes per second */
} pass_units[] = {
    {"us", UNIT_TIME, 1e-3}, {"ms", UNIT_TIME, 1}, {"s", UNIT_TIME, 1e3},
    {"B", UNIT_SIZE, 1},     {"KiB", UNIT_SIZE, 1024.0}, {"MiB", UNIT_SIZE, 1048576.0},
    {"GiB", UNIT_SIZE, 1073741824.0}, {"TiB", UNIT_SIZE, 1099511627776.0},
    {"KB", UNIT_SIZE, 1e3},  {"MB", UNIT_SIZE, 1e6}, {"GB", UNIT_SIZE, 1e9}, {"TB", UNIT_SIZE, 1e12},
};

/* NUMBER: digits [. digits], read with strtod so that values round-trip like the
 * language's. Returns false (nothing consumed) when there is no number. */
static bool pl_number(PassLexer *l, double *out, bool *integral)
{
    pl_space(l);
    const char *b = l->s + l->pos, *e = b;
    if (*e == '-')
        e++;
    if (!(*e >= '0' && *e <= '9'))
        return false;
    while (*e >= '0' && *e <= '9')
        e++;
    *integral = true;
    if (*e == '.' && e[1] >= '0' && e[1] <= '9') { /* not a range's ".." */
        *integral = false;
        e++;
        while (*e >= '0' && *e <= '9')
            e++;
    }
    char *tmp = xstrndup(b, (size_t)(e - b));
    *out = strtod(tmp, NULL);
    free(tmp);
    l->pos += (uint32_t)(e - b);
    return true;
}

static bool pl_value(PassLexer *l, Value *v)
{
    pl_space(l);
    uint32_t at = l->pos;
    *v = (Value){.loc = pl_loc(l, at)};
    double x;
    bool integral;
    if (pl_accept(l, "[")) {
        v->kind = VAL_LIST;
        size_t cap = 0;
        if (pl_accept(l, "]"))
            return true;
        do {
            uint32_t nat = (pl_space(l), l->pos);
            if (!pl_number(l, &x, &integral)) {
                pl_error(l, nat, DIAG_SYNTAX, "expected a number in the list");
                value_free(v);
                return false;
            }
            VEC_PUSH(v->list, v->nlist, cap, x);
        } while (pl_accept(l, ","));
        if (!pl_accept(l, "]")) {
            pl_error(l, (pl_space(l), l->pos), DIAG_SYNTAX, "expected ']' closing the list");
            value_free(v);
            return false;
        }
        return true;
    }
    if (pl_number(l, &x, &integral)) {
        if (pl_accept(l, "..")) {
            bool incl = pl_accept(l, "=");
            double y;
            bool yint;
            uint32_t yat = (pl_space(l), l->pos);
            if (!integral || !pl_number(l, &y, &yint) || !yint) {
                pl_error(l, integral ? yat : at, DIAG_SYNTAX, "expected a range of integers such as 0..=2");
                return false;
            }
            if (x < 0 || y < 0 || x > 1e9 || y > 1e9) {
                pl_error(l, at, DIAG_VALUE, "range bounds must be between 0 and 1000000000");
                return false;
            }
            v->kind = VAL_RANGE;
            v->lo = (int64_t)x;
            v->hi = (int64_t)y + (incl ? 1 : 0);
            return true;
        }
        v->kind = VAL_NUM;
        v->num = x;
        v->unit = UNIT_NONE;
        uint32_t uat = l->pos;
        while (is_ident(l->s[l->pos]))
            l->pos++;
        size_t ulen = l->pos - uat;
        if (ulen) {
            size_t i;
            for (i = 0; i < ARRAY_LEN(pass_units); i++)
                if (strlen(pass_units[i].name) == ulen && !strncmp(pass_units[i].name, l->s + uat, ulen))
                    break;
            if (i == ARRAY_LEN(pass_units)) {
                pl_error(l, uat, DIAG_VALUE, "unknown unit (times: us ms s; sizes: B KiB MiB GiB TiB KB MB GB TB; bandwidth: SIZE/s)");
                return false;
            }
            v->unit = pass_units[i].unit;
            v->num = x * pass_units[i].scale;
            if (v->unit == UNIT_SIZE && l->s[l->pos] == '/' && l->s[l->pos + 1] == 's' &&
                !is_ident(l->s[l->pos + 2])) {
                l->pos += 2;
                v->unit = UNIT_BW;
            }
        }
        if (!isfinite(v->num)) {
            pl_error(l, at, DIAG_VALUE, "number out of range");
            return false;
        }
        return true;
    }
    char *id = pl_ident(l);
    if (id) {
        v->kind = VAL_IDENT;
        v->str = id;
        return true;
    }
    pl_error(l, at, DIAG_SYNTAX, "expected a value (number, name, range or [list])");
    return false;
}

void pass_calls_free(PassCall *calls, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        free(calls[i].name);
        for (uint32_t j = 0; j < calls[i].nargs; j++) {
            free(calls[i].args[j].key);
            value_free(&calls[i].args[j].val);
        }
        free(calls[i].args);
    }
    free(calls);
}

/* Parses the whole list; returns the calls (*n of them) or NULL with errors reported. */
PassCall *parse_pass_list(Diag *d, uint32_t file, const char *text, uint32_t *n)
{
    PassLexer l = {.d = d, .file = file, .s = text};
    PassCall *calls = NULL;
    size_t cap = 0;
    *n = 0;
    do {
        pl_space(&l);
        uint32_t at = l.pos;
        char *name = pl_ident(&l);
        if (!name) {
            pl_error(&l, at, DIAG_SYNTAX, "expected a pass name");
            break;
        }
        PassCall call = {.name = name, .loc = pl_loc(&l, at)};
        size_t acap = 0;
        if (pl_accept(&l, "(") && !pl_accept(&l, ")")) {
            do {
                pl_space(&l);
                uint32_t kat = l.pos;
                char *key = pl_ident(&l);
                if (!key) {
                    pl_error(&l, kat, DIAG_SYNTAX, "expected an argument name");
                    break;
                }
                if (!pl_accept(&l, "=")) {
                    pl_error(&l, (pl_space(&l), l.pos), DIAG_SYNTAX, "expected '=' after the argument name");
                    free(key);
                    break;
                }
                Field f = {.key = key, .loc = pl_loc(&l, kat)};
                if (!pl_value(&l, &f.val)) {
                    free(key);
                    break;
                }
                VEC_PUSH(call.args, call.nargs, acap, f);
            } while (pl_accept(&l, ","));
            if (!l.nerr && !pl_accept(&l, ")"))
                pl_error(&l, (pl_space(&l), l.pos), DIAG_SYNTAX, "expected ',' or ')' in the argument list");
        }
        VEC_PUSH(calls, *n, cap, call);
    } while (!l.nerr && pl_accept(&l, ","));
    pl_space(&l);
    if (!l.nerr && l.s[l.pos])
        pl_error(&l, l.pos, DIAG_SYNTAX, "expected ',' between passes");
    if (l.nerr) {
        pass_calls_free(calls, *n);
        *n = 0;
        return NULL;
    }
    return calls;
}

static void list_passes(void)
{
    int n;
    const PassInfo *pi = pass_list(&n);
    for (int i = 0; i < n; i++)
        printf("  %-24s (%s)\n      %s\n", pi[i].name, *pi[i].args ? pi[i].args : "no arguments", pi[i].summary);
}

int cmd_opt(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"pass", required_argument, NULL, 'p'},
        {"output", required_argument, NULL, 'o'},
        {"list", no_argument, NULL, 'l'},
        DRIVER_LONGOPTS,
        {0, 0, 0, 0},
    };
    DriverOpts o = {0};
    const char *outpath = NULL;
    StrBuf list = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "p:o:" DRIVER_SHORTOPTS, longopts, NULL)) != -1) {
        if (driver_common_opt(&o, c, optarg))
            continue;
        switch (c) {
        case 'p':
            if (list.len)
                sb_putc(&list, ',');
            sb_puts(&list, optarg);
            break;
        case 'o':
            outpath = optarg;
            break;
        case 'l':
            list_passes();
            sb_free(&list);
            driver_opts_free(&o);
            return 0;
        default:
            sb_free(&list);
            driver_opts_free(&o);
            return usage_error("opt");
        }
    }
    if (argc - optind != 1 || !list.len) {
        fprintf(stderr, "pipec opt: %s\n", argc - optind != 1 ? "expected one input file" : "no --pass given");
        sb_free(&list);
        driver_opts_free(&o);
        return usage_error("opt");
    }

    Diag d = {0};
    uint32_t file = diag_add_file(&d, "<--pass>", list.s, (uint32_t)list.len);
    const char *text = d.files[file].text;
    list = (StrBuf){0}; /* owned by d now */
    uint32_t ncalls = 0;
    PassCall *calls = parse_pass_list(&d, file, text, &ncalls);
    Pipeline *p = calls ? driver_compile(&d, &o, argv[optind]) : NULL;
    int status = 1;
    if (p) {
        bool failed = false;
        for (uint32_t i = 0; i < ncalls && !failed; i++)
            failed = run_pass(&d, p, &calls[i]) || d.nerr ||
                     check_pipeline(&d, p, CHECK_STRUCTURE | CHECK_DEPS) || d.nerr;
        if (!failed) {
            StrBuf out = {0};
            print_pipeline(&out, p);
            status = write_output(outpath, &out);
            sb_free(&out);
        }
    }
    pass_calls_free(calls, ncalls);
    pipeline_free(p);
    diag_free(&d);
    driver_opts_free(&o);
    return status;
}
