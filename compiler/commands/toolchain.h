/* toolchain.h - building and starting generated programs (docs/runtime.md, docs/cuda.md):
 * where the runtime's header and libraries and nvcc are, the compile and link commands
 * of each target, and the child processes that run them.
 *
 * The generated C is the same for every target: it calls only runtime/piperun.h; the
 * target picks the compiler and the libraries:
 *
 *   cpu  threads   $CC (cc)   libpiperun.a
 *   cpu  mpi       $MPICC (mpicc), -Wl,--wrap=pr_main,--wrap=pr_run,
 *                  libpiperun_mpi.a libpiperun.a
 *   cuda threads   nvcc -x c per file; nvcc links libpiperun_cuda.a, cuBLAS, NCCL, cudart
 *   cuda mpi       nvcc -x c per file; $MPICC links with the wraps libpiperun_cuda_mpi.a
 *                  libpiperun_cuda.a, cuBLAS, NCCL, cudart, libstdc++
 *
 * Every C file is compiled by its own compiler process, up to the processor count (at
 * most 8) at a time, the packed op tables (EmitFile.tables) at -O0 and the code at -O2;
 * then one command links. The runtime's header and libraries are found next to the
 * pipec binary: <bin>/../runtime and <bin>/../build in the source tree,
 * <prefix>/include and <prefix>/lib when installed ($PIPERUN_INC / $PIPERUN_LIB
 * override). nvcc is found on PATH, else as $CUDA_HOME/bin/nvcc (CUDA_HOME defaults to
 * /usr/local/cuda); its libraries are in $CUDA_HOME/lib64. mpirun is $MPIRUN, else
 * mpirun. */
#ifndef PIPEC_TOOLCHAIN_H
#define PIPEC_TOOLCHAIN_H

#include <stdbool.h>

#include "emit_c.h"

/* What the generated program is built for. */
typedef struct Target {
    bool cuda;        /* --backend cuda */
    bool mpi;         /* --launcher mpi */
} Target;

/* The folder of the running pipec binary (allocated), or NULL. */
char *self_dir(void);

/* Whether path names something that exists. */
bool path_exists(const char *path);

/* The runtime libraries target t links, most specific first; NULL-terminated. */
const char *const *target_libs(Target t);

/* Finds piperun.h (*inc) and the folder of target t's libraries (*lib), both allocated.
 * Returns 0, or -1 after a message that names the make target that builds what is
 * missing. */
int find_runtime(Target t, char **inc, char **lib);
/* find_runtime; say false: no message. */
int find_runtime_say(Target t, char **inc, char **lib, bool say);

/* Runs argv (no shell) and waits; returns its exit status, or -1 after a message when
 * it could not start or be waited for. With quiet_out its stdout goes to stderr. */
int spawn(char *const argv[], bool quiet_out);

/* Compiles the emitted files of out, already written in dir, into dir/NAME
 * (out->progname) for target t, saying "pipec: compiling K/N (FILE)" on stderr as each
 * file starts when the sources add up to 4 MiB or more. Returns 0, or 1 after a
 * message. */
int build_program(const EmitOut *out, const char *dir, Target t);

/* Runs the program argv (argv[0] its path) as P processes: mpirun -np P --oversubscribe
 * [--allow-run-as-root] argv... Returns the exit status as spawn does. */
int run_mpi(char **argv, int P);

#endif
