/* cmd_check.c - `pipec check`, `pipec print` and `pipec opt` (docs/spec.md "Command line").
 *
 * All three compile through driver_compile; check adds the memory walk, print writes
 * the canonical explicit form, opt runs a pass list given on the command line (read by
 * the grammar's `apply` rules, parse_pass_list of frontend.h) with the structural and
 * dependency checks after every pass, then prints like print. */
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
#include "frontend.h"
#include "passes.h"
#include "print.h"
#include "util.h"

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
        if (p && driver_check_memory(&d, p)) {
            driver_memory_remedy(&d, p, argv[i]);
            if (o.nsets)
                note_overrides(&d);
        }
        if (p && mem) {
            check_mem_table(stdout, p);
            arena_plan_report(stdout, p, NULL, NULL,
                              "the cost model's act, ckpt and wact (what the budget is "
                              "checked with)");
            /* When the runtime implements the model's workload, also the arena the
             * generated program really plans, with its real tensor sizes. */
            WorkloadShape ms;
            model_shape_of(p, &ms);
            if (ms.ok) {
                const MlpShape shape = ms.s;
                static const char *const arch[] = {"mlp", "gpt", "llama"};
                char what[160];
                snprintf(what, sizeof what,
                         "the %s workload's real region sizes (the arena `pipec run` "
                         "allocates; weights are the cost model's)",
                         arch[shape.arch >= 0 && shape.arch <= 2 ? shape.arch : 0]);
                int64_t *ws = xcalloc((size_t)p->P, sizeof *ws);
                for (int32_t s = 0; s < p->P; s++)
                    ws[s] = mlp_workspace(p, &shape, s);
                arena_plan_report(stdout, p, shape.sizes, ws, what);
                free(ws);
            }
            model_shape_free(&ms);
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
    list = (StrBuf){0}; /* owned by d now */
    uint32_t ncalls = 0;
    PassCall *calls = parse_pass_list(&d, file, &ncalls);
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
