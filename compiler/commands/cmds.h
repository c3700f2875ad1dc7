/* cmds.h - one entry function per `pipec COMMAND` (docs/spec.md "Command line"). main.c
 * dispatches on argv[1] and calls cmd_NAME(argc - 1, argv + 1), so argv[0] is the
 * command name and each command parses its own options with getopt_long. Every command
 * returns the process exit status: 0 ok, 1 errors in the input (diagnostics printed),
 * 2 usage errors. The comment after each names the file that defines it. */
#ifndef PIPEC_CMDS_H
#define PIPEC_CMDS_H

int cmd_check(int argc, char **argv);      /* cmd_check.c: diagnostics, --mem */
int cmd_print(int argc, char **argv);      /* cmd_check.c: canonical explicit form */
int cmd_opt(int argc, char **argv);        /* cmd_check.c: --pass a,b(k=v), then print */
int cmd_sim(int argc, char **argv);        /* cmd_sim.c: summary, --json, --trace, --svg,
                                              --gantt, --html */
int cmd_diff(int argc, char **argv);       /* cmd_sim.c: two schedules side by side */
int cmd_emit(int argc, char **argv);       /* cmd_emit.c: per-rank C sources */
int cmd_compile(int argc, char **argv);    /* cmd_emit.c: emit + compile (alias: build) */
int cmd_run(int argc, char **argv);        /* cmd_emit.c: build into a cache, then run */
int cmd_import_csv(int argc, char **argv); /* cmd_csv.c: PyTorch schedule CSV -> .pipe */
int cmd_export_csv(int argc, char **argv); /* cmd_csv.c: .pipe -> PyTorch schedule CSV */
int cmd_tune(int argc, char **argv);       /* tune.c: search schedule variants */
int cmd_compare(int argc, char **argv);    /* cmd_compare.c: figures of files and sweeps */

#endif
