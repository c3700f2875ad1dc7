/* emit_c.h - C code generation for the CPU backend: one straight-line C file per rank,
 * main.c with the program's constant tables, and build files (docs/runtime.md).
 *
 * Generated code calls only runtime/piperun.h. Every op becomes one pr_op() call; the
 * cross-rank messages of the comm lowering (comm_plan of comm.h, the plan the checker
 * verified) become pr_recv() right before the consuming op and pr_send() right after
 * the producing op, in the plan's order. The activation arena of each rank is planned
 * here (arena_plan.h), once for the mlp workload's real region sizes (runtime/mlp.h)
 * and once for the synthetic workload's cost-model sizes; the offsets are constant
 * tables in the generated code. Nothing from the source reaches generated C except
 * numbers and names that are escaped (string literals byte-escaped, comments cleaned). */
#ifndef PIPEC_EMIT_C_H
#define PIPEC_EMIT_C_H

#include <stdbool.h>
#include <stdint.h>

#include "arena_plan.h"
#include "diag.h"
#include "ir.h"
#include "model_shape.h"
#include "util.h"

/* One generated file: a name inside the output folder and its contents. */
typedef struct EmitFile {
    char *name;
    StrBuf text;
    bool tables;      /* constant tables only: compiled without optimisation */
} EmitFile;

typedef struct EmitOut {
    EmitFile *files;
    uint32_t n, cap;
    char *progname;   /* the program's file name (the pipeline name, sanitised) */
} EmitOut;

/* Where the generated program's build and run find the installation of the pipec
 * that generated it (docs/runtime.md "Generated files"); any field NULL: not known. */
typedef struct EmitSite {
    const char *inc;       /* folder of piperun.h: the Makefile's PIPERUN_INC default */
    const char *lib;       /* folder of libpiperun.a: the Makefile's PIPERUN_LIB default */
    const char *data_dir;  /* folder of README.md and docs/: PrProgram.data_dir */
} EmitSite;

/* Generates the files of the CPU backend for p (compiled and checked). source names
 * the .pipe file in the header comments. Returns 0, or the number of errors reported
 * through d. emit_c_site also writes site (may be NULL) into the program and its
 * Makefile, and takes p's model shape as the command computed it once (model_shape_of);
 * emit_c writes no site and computes the shape itself. */
int emit_c(Diag *d, const Pipeline *p, const char *source, EmitOut *out);
int emit_c_site(Diag *d, const Pipeline *p, const char *source, const EmitSite *site,
                const WorkloadShape *shape, EmitOut *out);
void emit_out_free(EmitOut *out);

/* Writes every file into dir (created if missing), each atomically. Returns 0, or -1
 * with errno set and *failed naming the file that could not be written (NULL when
 * dir itself could not be created). */
int emit_write(const EmitOut *out, const char *dir, const char **failed);

#endif
