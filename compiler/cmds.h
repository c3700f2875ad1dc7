/* cmds.h - one entry function per `pipec COMMAND`. main.c dispatches on argv[1] and
 * calls cmd_NAME(argc - 1, argv + 1), so argv[0] is the command name and each command
 * parses its own options with getopt_long. Every command returns the process exit
 * status: 0 ok, 1 errors in the input (diagnostics printed), 2 usage errors. */
#ifndef PIPEC_CMDS_H
#define PIPEC_CMDS_H

int cmd_check(int argc, char **argv);      /* check.c / driver: diagnostics, --mem */
int cmd_print(int argc, char **argv);      /* print.c: canonical explicit form */
int cmd_opt(int argc, char **argv);        /* passes.c: --pass a,b(k=v) */
int cmd_sim(int argc, char **argv);        /* sim: summary, --json, --trace, --svg, --gantt */
int cmd_diff(int argc, char **argv);       /* sim: two schedules side by side */
int cmd_emit(int argc, char **argv);       /* emit_c.c: per-rank C sources */
int cmd_compile(int argc, char **argv);    /* emit + compile (alias: build) */
int cmd_run(int argc, char **argv);        /* build into a cache, then run */
int cmd_import_csv(int argc, char **argv); /* csv.c: PyTorch schedule CSV -> .pipe */
int cmd_export_csv(int argc, char **argv); /* csv.c: .pipe -> PyTorch schedule CSV */
int cmd_tune(int argc, char **argv);       /* tune.c: search schedule variants */

#endif
