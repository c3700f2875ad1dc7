#!/usr/bin/env bash
# t_targets.sh - what a generated program is built for (docs/runtime.md "Building"):
# --backend cpu|cuda and --launcher threads|mpi as documented (the defaults written out
# change nothing; other values are usage errors naming them), and where `pipec compile`
# finds the runtime: $PIPERUN_INC / $PIPERUN_LIB, else piperun.h and libpiperun.a next
# to pipec (../runtime and ../build in the source tree, ../include and ../lib in an
# install tree); what is missing is named with the make target that builds it.
cd "$(dirname "$0")/.."
. tests/lib.sh
P=$(realpath "$PIPEC_ASAN")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
E=examples/tiny_1f1b.pipe
# The runtime the suite builds against (the coverage build sets its own).
rt_inc=${PIPERUN_INC:-$PWD/runtime} rt_lib=${PIPERUN_LIB:-$PWD/build}

# --- option values ---------------------------------------------------------------------------
for cmd in compile run; do
    "$P" $cmd --backend gpu $E -o "$tmp/x" >"$tmp/out" 2>"$tmp/err"
    check "$cmd --backend gpu: exit 2" test $? = 2
    check "$cmd --backend gpu: names the value" grep -qF "pipec: unknown backend 'gpu' (cpu or cuda)" "$tmp/err"
    "$P" $cmd --launcher slurm $E -o "$tmp/x" >"$tmp/out" 2>"$tmp/err"
    check "$cmd --launcher slurm: exit 2" test $? = 2
    check "$cmd --launcher slurm: names the value" grep -qF "pipec: unknown launcher 'slurm' (threads or mpi)" "$tmp/err"
done
check "nothing written for a bad value" test ! -e "$tmp/x"
"$P" emit --backend gpu $E -o "$tmp/x" >/dev/null 2>"$tmp/err"
check "emit --backend gpu: exit 2" test $? = 2
# emit writes sources for any launcher: --launcher is compile's and run's option only.
"$P" emit --launcher mpi $E -o "$tmp/x" >/dev/null 2>"$tmp/err"
check "emit --launcher: exit 2" test $? = 2
check "emit --launcher: an unknown option of emit" grep -qxF "pipec emit: unknown option '--launcher'" "$tmp/err"
check "emit --launcher: nothing written" test ! -e "$tmp/x"
"$P" emit $E -o "$tmp/default" >/dev/null 2>&1
"$P" emit --backend cpu $E -o "$tmp/cpu" >/dev/null 2>&1
check "emit --backend cpu is the default" diff -r "$tmp/default" "$tmp/cpu"

# --- finding the runtime ---------------------------------------------------------------------
# A copy of pipec in its own tree, with neither PIPERUN_INC nor PIPERUN_LIB set.
mkdir -p "$tmp/t/bin"
cp "$P" "$tmp/t/bin/pipec"
unset PIPERUN_INC PIPERUN_LIB
"$tmp/t/bin/pipec" compile $E -o "$tmp/c0" >"$tmp/out" 2>"$tmp/err"
check "no runtime next to pipec: exit 1" test $? = 1
check "no runtime next to pipec: says how to get one" grep -qF 'pipec: cannot find the runtime (piperun.h and libpiperun.a next to pipec; run `make`, or set PIPERUN_INC and PIPERUN_LIB)' "$tmp/err"
check "no runtime next to pipec: no program" test ! -e "$tmp/c0/tiny_1f1b"
# An install tree: bin/pipec, include/piperun.h, lib/libpiperun.a.
mkdir -p "$tmp/t/include" "$tmp/t/lib"
cp runtime/*.h "$tmp/t/include/"
if [ -f build/libpiperun.a ]; then
    cp build/libpiperun.a "$tmp/t/lib/"
    "$tmp/t/bin/pipec" compile --backend cpu --launcher threads $E -o "$tmp/c1" >"$tmp/out" 2>"$tmp/err"
    check "install tree: compile finds the runtime" test $? = 0
    check "install tree: prints the program's path" grep -qx "$tmp/c1/tiny_1f1b" "$tmp/out"
    timeout 60 "$tmp/c1/tiny_1f1b" --iters 1 >"$tmp/run" 2>&1
    check "install tree: the program runs" test $? = 0
else
    skip "install tree" "build/libpiperun.a is not built"
fi
# A library folder without a target's library: named, with its make target.
missing() { # NAME ARGS... ; expects "cannot find LIB in DIR (run `TARGET`)"
    local want=$1
    shift
    PIPERUN_INC=$tmp/t/include PIPERUN_LIB=$tmp/t/lib "$P" compile "$@" $E -o "$tmp/m" >/dev/null 2>"$tmp/err"
    local rc=$?
    if [ $rc = 1 ] && grep -qF "pipec: cannot find $want in $tmp/t/lib (run \`" "$tmp/err"; then ok
    else bad "compile $* without $want" "rc=$rc $(head -c 300 "$tmp/err")"; fi
    rm -rf "$tmp/m"
}
rm -f "$tmp/t/lib/libpiperun_"*
missing libpiperun_mpi.a --launcher mpi
check "... run \`make mpi\`" grep -qF '(run `make mpi`)' "$tmp/err"
missing libpiperun_cuda.a --backend cuda
check "... run \`make cuda\`" grep -qF '(run `make cuda`)' "$tmp/err"
: >"$tmp/t/lib/libpiperun_cuda.a"
missing libpiperun_cuda_mpi.a --backend cuda --launcher mpi
check "... run \`make cuda-mpi\`" grep -qF '(run `make cuda-mpi`)' "$tmp/err"
# --- $CC and $MPICC (docs/runtime.md, docs/cuda.md) --------------------------------------------
PIPERUN_INC=$rt_inc PIPERUN_LIB=$rt_lib CC=false "$P" compile $E -o "$tmp/cc1" >"$tmp/out" 2>"$tmp/err"
check "CC=false: exit 1" test $? = 1
check "CC=false: says the build failed, naming the folder" grep -qx "pipec: compiling the generated program in $tmp/cc1 failed" "$tmp/err"
check "CC=false: no program" test ! -e "$tmp/cc1/tiny_1f1b"
PIPERUN_INC=$rt_inc PIPERUN_LIB=$rt_lib CC=/nonexistent/cc "$P" compile $E -o "$tmp/cc2" >"$tmp/out" 2>"$tmp/err"
check "CC that does not exist: exit 1" test $? = 1
check "CC that does not exist: named" grep -qx "pipec: cannot run /nonexistent/cc: No such file or directory" "$tmp/err"
PIPERUN_INC=$rt_inc PIPERUN_LIB=$rt_lib CC= "$P" compile $E -o "$tmp/cc3" >"$tmp/out" 2>"$tmp/err"
check "an empty CC is cc: exit 0" test $? = 0
check "an empty CC is cc: the program" test -x "$tmp/cc3/tiny_1f1b"
# A compiler killed by a signal: named with the signal, and the build reported failed.
printf '#!/bin/sh\nkill -9 $$\n' >"$tmp/killcc"
chmod +x "$tmp/killcc"
PIPERUN_INC=$rt_inc PIPERUN_LIB=$rt_lib CC=$tmp/killcc "$P" compile $E -o "$tmp/cc5" >"$tmp/out" 2>"$tmp/err"
check "CC killed by a signal: exit 1" test $? = 1
check "CC killed by a signal: named, with the signal" grep -qx "pipec: $tmp/killcc was killed by signal 9" "$tmp/err"
check "CC killed by a signal: the build failed" grep -qx "pipec: compiling the generated program in $tmp/cc5 failed" "$tmp/err"
# --- the CUDA build's commands, with a stand-in nvcc (docs/cuda.md "Building") ----------------
# No nvcc on PATH and $CUDA_HOME/bin/nvcc a script that logs its arguments: pipec runs it
# once per generated .c (-x c, in parallel), then links with it, taking cuBLAS, NCCL and
# cudart from $CUDA_HOME/lib64. The runtime it names is a stand-in too (only its presence
# is checked before the compiler runs).
mkdir -p "$tmp/cuda/bin" "$tmp/fakert/inc" "$tmp/fakert/lib" "$tmp/nopath"
: >"$tmp/fakert/inc/piperun.h"
for l in libpiperun.a libpiperun_cuda.a libpiperun_mpi.a; do : >"$tmp/fakert/lib/$l"; done
nopath=
for d in $(echo "$PATH" | tr ':' ' '); do [ -x "$d/nvcc" ] || nopath=$nopath${nopath:+:}$d; done
# $1: what the stand-in does when it compiles (-c): exit 0 after writing its -o file, or
# fail with exit 3, or be killed; when it links: be killed.
fake_nvcc() {
    cat >"$tmp/cuda/bin/nvcc" <<FAKE
#!/bin/sh
echo "\$*" >>"$tmp/nvcc.log"
case " \$* " in *" -c "*) ;; *) kill -9 \$\$ ;; esac
case "$1" in fail) exit 3 ;; kill) kill -9 \$\$ ;; esac
while [ \$# -gt 1 ]; do [ "\$1" = -o ] && : >"\$2"; shift; done
FAKE
    chmod +x "$tmp/cuda/bin/nvcc"
    rm -f "$tmp/nvcc.log"
}
fake_nvcc ok
PATH=$nopath CUDA_HOME=$tmp/cuda PIPERUN_INC=$tmp/fakert/inc PIPERUN_LIB=$tmp/fakert/lib \
    "$P" compile --backend cuda $E -o "$tmp/cu1" >"$tmp/out" 2>"$tmp/err"
check "nvcc from \$CUDA_HOME/bin: exit 1 when its link is killed" test $? = 1
check "... the link named, with the signal" grep -qx "pipec: $tmp/cuda/bin/nvcc was killed by signal 9" "$tmp/err"
check "... the build reported failed" grep -qx "pipec: compiling the generated program in $tmp/cu1 failed" "$tmp/err"
check "... one nvcc -x c call per generated .c" test "$(grep -c -- '^-x c -O[02] -Xcompiler -std=c11,-Wall,-Wextra ' "$tmp/nvcc.log")" = "$(ls "$tmp/cu1"/*.c | wc -l)"
check "... the rank tables at -O0, main.c at -O2" test "$(grep -c -- "^-x c -O0 .* -c $tmp/cu1/rank_[0-9]*\.c " "$tmp/nvcc.log") $(grep -c -- "^-x c -O2 .* -c $tmp/cu1/main\.c " "$tmp/nvcc.log")" = "$(ls "$tmp/cu1"/rank_*.c | wc -l) 1"
check "... the link takes the CUDA libraries from \$CUDA_HOME/lib64, rpath there too" \
    grep -q -- "^-o $tmp/cu1/tiny_1f1b .*$tmp/fakert/lib/libpiperun_cuda.a -L$tmp/cuda/lib64 -Xlinker -rpath=$tmp/cuda/lib64 -lcublas -lnccl -lcudart -lopenblas -lpthread -lm\$" "$tmp/nvcc.log"
check "... no program" test ! -e "$tmp/cu1/tiny_1f1b"
for how in fail kill; do
    fake_nvcc $how
    PATH=$nopath CUDA_HOME=$tmp/cuda PIPERUN_INC=$tmp/fakert/inc PIPERUN_LIB=$tmp/fakert/lib \
        "$P" compile --backend cuda $E -o "$tmp/cu-$how" >"$tmp/out" 2>"$tmp/err"
    check "nvcc -c that ${how}s: exit 1" test $? = 1
    check "nvcc -c that ${how}s: the build reported failed" grep -qx "pipec: compiling the generated program in $tmp/cu-$how failed" "$tmp/err"
    check "nvcc -c that ${how}s: no link was tried" test "$(grep -vc -- ' -c ' "$tmp/nvcc.log")" = 0
done
# With --launcher mpi the CUDA program needs libpiperun_cuda_mpi.a: named with its make target.
PATH=$nopath CUDA_HOME=$tmp/cuda PIPERUN_INC=$tmp/fakert/inc PIPERUN_LIB=$tmp/fakert/lib \
    "$P" compile --backend cuda --launcher mpi $E -o "$tmp/cu2" >"$tmp/out" 2>"$tmp/err"
check "cuda + mpi without libpiperun_cuda_mpi.a: exit 1" test $? = 1
check "... named, with \`make cuda-mpi\`" grep -qx "pipec: cannot find libpiperun_cuda_mpi.a in $tmp/fakert/lib (run \`make cuda-mpi\`)" "$tmp/err"
# An empty $MPICC is mpicc, found on PATH.
mkdir -p "$tmp/mpibin"
# the stand-in compiles (-c: writes its -o file) and fails to link
cat >"$tmp/mpibin/mpicc" <<FAKE
#!/bin/sh
echo "mpicc \$*" >>"$tmp/mpicc.log"
case " \$* " in *" -c "*) ;; *) exit 4 ;; esac
while [ \$# -gt 1 ]; do [ "\$1" = -o ] && : >"\$2"; shift; done
FAKE
chmod +x "$tmp/mpibin/mpicc"
PATH=$tmp/mpibin:$PATH MPICC= PIPERUN_INC=$tmp/fakert/inc PIPERUN_LIB=$tmp/fakert/lib \
    "$P" compile --launcher mpi $E -o "$tmp/mp1" >"$tmp/out" 2>"$tmp/err"
check "an empty MPICC is mpicc: exit 1 when it fails" test $? = 1
check "... it was mpicc on PATH, compiling each file" test "$(grep -c -- "^mpicc -std=c11 -O[02] -Wall -Wextra .* -c " "$tmp/mpicc.log")" = "$(ls "$tmp/mp1"/*.c 2>/dev/null | wc -l)"
check "... and linking, wrapping pr_main and pr_run" grep -q -- "^mpicc -o $tmp/mp1/tiny_1f1b .* -Wl,--wrap=pr_main -Wl,--wrap=pr_run $tmp/fakert/lib/libpiperun_mpi.a $tmp/fakert/lib/libpiperun.a -lopenblas" "$tmp/mpicc.log"
if [ -f "$rt_lib/libpiperun_mpi.a" ]; then
    PIPERUN_INC=$rt_inc PIPERUN_LIB=$rt_lib MPICC=false "$P" compile --launcher mpi $E -o "$tmp/cc4" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if grep -q "cannot find libpiperun_mpi.a" "$tmp/err"; then
        skip "MPICC=false" "the MPI runtime is not built"
    else
        check "MPICC=false: exit 1" test $rc = 1
        check "MPICC=false: says the build failed" grep -qx "pipec: compiling the generated program in $tmp/cc4 failed" "$tmp/err"
    fi
fi
# --- the GPU checks skip cleanly without a GPU (docs/cuda.md "Testing on a GPU") ------------
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    for t in test-gpu-quick test-gpu; do
        out=$(env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -s $t 2>&1)
        check "make $t without a GPU: exit 0" test $? = 0
        check "make $t without a GPU: says so" test "$(echo "$out" | tail -n 1)" = "SKIP: no GPU"
    done
    check "tests/gpu/quick.sh without a GPU says so" test "$(bash tests/gpu/quick.sh)" = "SKIP: no GPU"
else
    skip "GPU targets skip without a GPU" "a GPU is present"
fi
finish
