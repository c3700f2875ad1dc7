/* emit_c.h - C code generation for the CPU backend: one straight-line C file per rank,
 * main.c with the program's constant tables, and build files (docs/runtime.md).
 *
 * Generated code calls only runtime/piperun.h. Every op becomes one pr_op() call; the
 * cross-rank messages of the comm lowering (comm_plan of comm.h, the plan the checker
 * verified) become pr_recv() right before the consuming op and pr_send() right after
 * the producing op, in the plan's order. The activation arena of each rank is planned
 * here (arena_plan.h), once for the mlp workload's real region sizes (runtime/models/mlp.h)
 * and once for the synthetic workload's cost-model sizes; the offsets are constant
 * tables in the generated code. Nothing from the source reaches generated C except
 * numbers and names that are escaped (string literals byte-escaped, comments cleaned). */
#ifndef PIPEC_EMIT_C_H
#define PIPEC_EMIT_C_H

#include <stdbool.h>
#include <stdint.h>

#include "arena_plan.h"
#include "comm.h"
#include "diag.h"
#include "ir.h"
#include "model_shape.h"
#include "stream_check.h"
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

/* The plans a generated program is written from, built once per command
 * (emit_plans_build) and handed to the emitter, which writes them into the program, and
 * for the CUDA backend to the stream plan's verifier (stream_check.h
 * stream_plan_verify), which checks these very objects. */
typedef struct EmitPlans {
    const WorkloadShape *shape; /* p's model shape as the command computed it (model_shape_of) */
    ArenaPlan *plan_mlp;    /* the model workload's arena plan; NULL when !shape->ok */
    ArenaSizes *cost;       /* [P*V] cost-model region sizes */
    ArenaPlan *plan_cost;   /* planned with cost */
    ArenaSizes *scaled;     /* [P*V] cost / scale, NULL when scale is 1 */
    ArenaPlan *plan_syn;    /* the synthetic workload's plan: plan_cost, or over scaled */
    double scale;           /* synthetic arena bytes = cost-model bytes / scale (>= 1) */
    CommPlan *cp;           /* the messages (comm.h) */
    StreamInBuf sin;        /* the stream plan's input (streams only) */
    StreamPlan *streams;    /* the CUDA backend's stream plan; NULL for the CPU backend */
} EmitPlans;

/* Builds the plans of p (compiled and checked, P, V, M >= 1) for its model shape; the
 * stream plan too when `streams` (--backend cuda). Aborts only when out of memory. */
void emit_plans_build(EmitPlans *pl, const Pipeline *p, const WorkloadShape *shape, bool streams);
void emit_plans_free(EmitPlans *pl);

/* Generates the files of the CPU backend for p (compiled and checked). source names
 * the .pipe file in the header comments. Returns 0, or the number of errors reported
 * through d. emit_c_site also writes site (may be NULL) into the program and its
 * Makefile, and writes the plans the command built once (emit_plans_build), with each
 * rank's stream plan table when plans->streams is set (docs/cuda.md "The stream plan's
 * table"); emit_c writes no site and builds the plans itself, without a stream plan. */
int emit_c(Diag *d, const Pipeline *p, const char *source, EmitOut *out);
int emit_c_site(Diag *d, const Pipeline *p, const char *source, const EmitSite *site,
                const EmitPlans *plans, EmitOut *out);
void emit_out_free(EmitOut *out);

/* Writes every file into dir (created if missing), each atomically. Returns 0, or -1
 * with errno set and *failed naming the file that could not be written (NULL when
 * dir itself could not be created). */
int emit_write(const EmitOut *out, const char *dir, const char **failed);

#endif
