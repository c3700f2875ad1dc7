#!/usr/bin/env bash
# t_install.sh - what plain `make` and `make install` give a fresh clone (README "Set up"):
#   - `make` builds the MPI runtime when mpicc is installed and the CUDA runtime when
#     nvcc is, and says which it skipped and why (here: with the compilers hidden);
#   - after `make`, `pipec build --backend cuda` and `pipec build --launcher mpi`
#     produce a program with no `make cuda`/`make mpi` and no environment variable
#     (skipped, with the reason, when nvcc or mpicc is missing);
#   - `make install PREFIX=P` installs every runtime library that was built, and the
#     installed pipec finds them (and its stdlib) under P from any folder.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
PIPEC_BIN=$PWD/bin/pipec
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory "$@"; }
ex=$PWD/examples/tiny_1f1b.pipe
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
have_nvcc=$(command -v nvcc || { [ -x "$CUDA_HOME/bin/nvcc" ] && echo "$CUDA_HOME/bin/nvcc"; })
have_mpicc=$(command -v mpicc)

# --- skipped runtimes are named, with the reason --------------------------------------------
mk -s runtimes MPICC="$T/none/mpicc" NVCC= >"$T/out" 2>&1
check "make runtimes without the compilers exits 0" test $? = 0
check "... naming the skipped MPI runtime and why" \
    grep -q "skipped the MPI runtime (build/libpiperun_mpi.a): $T/none/mpicc not found" "$T/out"
check "... naming the skipped CUDA runtime and why" \
    grep -q "skipped the CUDA runtime (build/libpiperun_cuda.a): nvcc not found" "$T/out"

# --- after `make`: the backends build with no extra step --------------------------------------
# (make test ran `make all` before this suite, as a fresh clone's `make` does)
if [ -n "$have_mpicc" ]; then
    check "make built build/libpiperun_mpi.a" test -f build/libpiperun_mpi.a
    (cd "$T" && env -i PATH="$PATH" HOME="$T" "$PIPEC_BIN" build --launcher mpi "$ex" -o "$T/mpi") \
        >"$T/out" 2>"$T/err"
    check "pipec build --launcher mpi after make" test -x "$T/mpi/tiny_1f1b"
else
    skip "pipec build --launcher mpi" "mpicc not found"
fi
if [ -n "$have_nvcc" ]; then
    check "make built build/libpiperun_cuda.a" test -f build/libpiperun_cuda.a
    (cd "$T" && env -i PATH="$PATH" HOME="$T" "$PIPEC_BIN" build --backend cuda "$ex" -o "$T/cuda") \
        >"$T/out" 2>"$T/err"
    check "pipec build --backend cuda after make" test -x "$T/cuda/tiny_1f1b"
else
    skip "pipec build --backend cuda" "nvcc not found (the CUDA toolkit is not installed)"
fi

# --- make install: every built library, found by the installed pipec ---------------------------
if mk -s install PREFIX="$T/prefix" >"$T/out" 2>&1; then
    ok
    for l in libpiperun.a libpiperun_mpi.a libpiperun_cuda.a libpiperun_cuda_mpi.a; do
        if [ -f "build/$l" ]; then
            check "make install installs $l" cmp -s "build/$l" "$T/prefix/lib/$l"
        else
            check "make install installs no $l it did not build" test ! -e "$T/prefix/lib/$l"
        fi
    done
    inst() { # NAME ARGS...: the installed pipec builds from an unrelated folder, no env
        local name=$1
        shift
        (cd "$T" && env -i PATH="$PATH" HOME="$T" "$T/prefix/bin/pipec" build "$@" "$ex" -o "$T/i_$name") \
            >"$T/out" 2>"$T/err"
        if [ -x "$T/i_$name/tiny_1f1b" ]; then ok
        else bad "installed pipec build $*" "$(head -n 3 "$T/err")"; fi
    }
    inst cpu
    (cd "$T" && env -i PATH="$PATH" HOME="$T" "$T/prefix/bin/pipec" check "$OLDPWD/examples/demo.pipe") \
        >"$T/out" 2>"$T/err"
    check "the installed pipec finds its stdlib" grep -q ': ok: pipeline demo' "$T/out"
    # what it emits names the installation: the runtime in the Makefile, the docs as the
    # default training text (docs/runtime.md "Training text"); plain make builds it
    (cd "$T" && env -i PATH="$PATH" HOME="$T" "$T/prefix/bin/pipec" emit "$OLDPWD/examples/demo.pipe" -o "$T/i_emit") \
        >"$T/out" 2>"$T/err"
    pre=$(realpath "$T/prefix")
    check "installed emit: the Makefile names the installed runtime" \
        grep -qx "PIPERUN_LIB ?= $pre/lib" "$T/i_emit/Makefile"
    check "installed emit: the training text is the installed docs" \
        grep -qF ".data_dir = \"$pre/share/doc/pipec\"" "$T/i_emit/main.c"
    (cd "$T/i_emit" && env -i PATH="$PATH" make -s >"$T/out" 2>&1)
    check "installed emit: plain make builds it" test -x "$T/i_emit/demo"
    (cd "$T" && env -i PATH="$PATH" "$T/i_emit/demo" --iters 1 >"$T/out" 2>"$T/err")
    check "installed emit: the program names the installed docs" \
        grep -q "^piperun: training text (--data FILE for another): README.md and docs, 9 of 9 pages, [0-9]* bytes, in $pre/share/doc/pipec\$" "$T/err"
    [ -n "$have_mpicc" ] && inst mpi --launcher mpi
    [ -n "$have_nvcc" ] && inst cuda --backend cuda
else
    bad "make install" "$(tail -n 5 "$T/out")"
fi
finish
