/* driver.h - the compile pipeline every command shares:
 *
 *     load (parse + elaborate) -> derive costs -> recompute directives -> apply passes
 *     -> structural and dependency checks
 *
 * and the options every command accepts (-I DIR). */
#ifndef PIPEC_DRIVER_H
#define PIPEC_DRIVER_H

#include <stdbool.h>
#include <stdio.h>

#include "arena_plan.h"
#include "diag.h"
#include "frontend.h"
#include "ir.h"

typedef struct DriverOpts {
    const char **include_dirs; int ninclude;   /* -I DIR (repeatable) */
    bool no_passes;                            /* load + costs only */
    bool werror;                               /* -Werror: warnings are errors */
    SetOverride *sets; int nsets;              /* --set KEY=VALUE (repeatable, in order) */
} DriverOpts;

/* Loads FILE (load_pipeline of frontend.h, with o's --set overrides), derives costs (derive_costs of costmodel.h),
 * runs the `recompute` pass for each `recompute` directive and then the `apply` passes
 * in order (run_pass of passes/passes.h), then check_pipeline(d, p, CHECK_STRUCTURE|CHECK_DEPS)
 * (check.h). Returns NULL when any step reported errors (after a note at each override
 * when the errors are not at one: note_overrides). Memory is not checked here. */
Pipeline *driver_compile(Diag *d, const DriverOpts *o, const char *path);

/* The same from memory (tests, fuzzing): text[0..len) read as the file `name`
 * (load_pipeline_string of frontend.h), then every step above. */
Pipeline *driver_compile_string(Diag *d, const DriverOpts *o, const char *name, const char *text,
                                size_t len);

/* The memory checks of `pipec check` (and of `pipec tune` on every candidate): the
 * static walk of docs/spec.md "Memory" (check_pipeline with CHECK_MEMORY) and, when the
 * walk fits, the static arena plan (arena_check), whose packing can need more than the
 * walk's peak. When the weights alone exceed every rank's budget it reports instead one
 * error that leads with what would hold them (more stages, more tensor parallelism, a
 * larger device; docs/language.md §8). Returns the number of `memory` errors
 * reported (as warnings too, when the caller set d->demote: `pipec emit`, `compile` and
 * `run` do). p must have passed check_pipeline's CHECK_STRUCTURE without errors (as
 * driver_compile's result has): the structure is not checked again. */
int driver_check_memory(Diag *d, const Pipeline *p);

/* driver_check_memory with a cache of arena plans per rank (arena_check_memo; NULL:
 * none), for searches over many variants. */
int driver_check_memory_memo(Diag *d, const Pipeline *p, ArenaMemo *memo);

/* After memory errors on p (compiled from path), a closing note with a concrete remedy:
 * the `recompute` directive on the over-budget stages whose fastest policy fits
 * (each policy tried on a copy, checked and simulated), else `pipec tune FILE`; when a
 * rank's weights alone exceed the budget, says so. Prints nothing without memory
 * errors, nor when every rank's weights exceed it (that error carries its remedy). */
void driver_memory_remedy(Diag *d, const Pipeline *p, const char *path);

/* Parses the options every command shares (-I DIR, --include DIR, -Werror, --set
 * KEY=VALUE) from a getopt loop; returns true when it consumed opt. */
bool driver_common_opt(DriverOpts *o, int opt, const char *optarg);

/* The getopt pieces for driver_common_opt: add DRIVER_SHORTOPTS to the short option
 * string and DRIVER_LONGOPTS to the struct option table of a command. */
#define DRIVER_SHORTOPTS "I:W:"
#define DRIVER_OPT_SET 0x5e7
#define DRIVER_LONGOPTS {"include", required_argument, NULL, 'I'}, \
                        {"set", required_argument, NULL, DRIVER_OPT_SET}

/* Frees what driver_common_opt allocated (the include and override lists). */
void driver_opts_free(DriverOpts *o);

/* The usage text of `pipec NAME` (what `pipec help NAME` prints), or NULL for an
 * unknown command. Commands print it on a usage error:
 *     driver_usage(stderr, "sim"); return 2; */
const char *driver_usage_text(const char *name);
void driver_usage(FILE *out, const char *name);

/* The end of a command's option loop for an option it does not take itself: for --help
 * (help true) prints name's usage on stdout and returns 0 (the exit status); for
 * anything else (getopt_long's '?' or ':') prints it on stderr and returns 2. */
int driver_usage_status(const char *name, bool help);

/* After a command's option loop: -1 (go on) when exactly n operands follow the options
 * (argv[optind]...), else name's usage on stderr and 2 (the exit status). */
int driver_operands(int argc, const char *name, int n);

#endif
