#!/usr/bin/env bash
# t_cuda_build.sh - the CUDA backend builds without a GPU (docs/cuda.md):
#   - `make cuda` compiles runtime/cuda/ with nvcc warning-free (--Werror all-warnings,
#     -Wall -Wextra for the C parts);
#   - `pipec compile --backend cuda` builds every example: nvcc compiles each generated
#     file as C11 with -Wall -Wextra and links against build/libpiperun_cuda.a, cuBLAS
#     and NCCL; no warning may appear;
#   - the CUDA program carries the GPU's --check bound (pr_check_bound), the CPU one not;
#   - `pipec compile --backend cuda --launcher mpi` links the one-rank-per-process form
#     (NCCL unique ids over MPI_Bcast, ncclCommInitRankConfig) when mpicc is there;
#   - without a GPU, `pipec run --backend cuda` (threads and mpi) exits 1 saying no GPU
#     was found, and without nvcc `pipec compile --backend cuda` exits 1 saying so.
# Skips when nvcc is not installed.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=$(command -v nvcc || { [ -x "$CUDA_HOME/bin/nvcc" ] && echo "$CUDA_HOME/bin/nvcc"; })
if [ -z "$NVCC" ]; then skip cuda_build "nvcc not found (CUDA toolkit not installed)"; finish; exit; fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export CUDA_HOME

if env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s cuda >"$T/out" 2>&1 && ! grep -qi 'warning' "$T/out"; then ok
else bad cuda_lib "$(grep -i -m 5 'warning\|error' "$T/out")"; finish; exit; fi

# Every example through pipec, two at a time (each pipec runs its nvcc jobs in parallel).
ls examples/*.pipe | xargs -P 2 -I{} sh -c \
    'n=$(basename "$1" .pipe); "$2" compile --backend cuda "$1" -o "$3/$n" >"$3/$n.out" 2>"$3/$n.err"; echo $? >"$3/$n.rc"' \
    _ {} "$PIPEC" "$T"
# cc_warnings FILE: the compilers' warnings in FILE, without pipec's own memory
# warnings (the papers' out-of-memory baselines are generated all the same)
cc_warnings() { grep -i 'warning' "$1" | grep -v 'warning\[memory\]\|over its memory budget'; }
n=0
for ex in examples/*.pipe; do
    name=$(basename "$ex" .pipe)
    if [ "$(cat "$T/$name.rc" 2>/dev/null)" = 0 ] && [ -x "$T/$name/$(basename "$(cat "$T/$name.out")")" ] &&
       ! cc_warnings "$T/$name.err" >/dev/null; then
        ok; n=$((n + 1))
    else bad "$name" "rc $(cat "$T/$name.rc" 2>/dev/null): $(grep -i -m 3 'warning\|error' "$T/$name.err")"; fi
done
[ "$n" = "$(ls examples/*.pipe | wc -l)" ] && ok || bad cuda_examples "$n examples built"
# the objects really came from nvcc's C path: one per generated .c
[ "$(ls "$T/tiny_1f1b"/*.o 2>/dev/null | wc -l)" = "$(ls "$T/tiny_1f1b"/*.c | wc -l)" ] && ok ||
    bad cuda_objects "$(ls "$T/tiny_1f1b")"

# The gpt and llama programs link the GPU transformer workload (runtime/cuda/tf_cuda.cu).
for ex in gpt_tiny llama_tiny; do
    nm "$T/$ex/$ex" 2>/dev/null | grep -q ' T cu_tf_forward$' && ok || bad "${ex}_tf_cuda" "cu_tf_forward not linked"
done

# The --check bound is the backend's: the CUDA program links piperun_cuda.c's strong
# pr_check_bound (1e-4), the CPU program run_main.c's weak one (1e-5).
nm "$T/tiny_1f1b/tiny_1f1b" 2>/dev/null | grep -q ' T pr_check_bound$' && ok || bad cuda_bound "no strong pr_check_bound"
"$PIPEC" compile examples/tiny_1f1b.pipe -o "$T/cpu" >/dev/null 2>&1 &&
    nm "$T/cpu/tiny_1f1b" | grep -q ' W pr_check_bound$' && ok || bad cpu_bound "no weak pr_check_bound"

# No nvcc: a clear error, exit 1.
PATH=/usr/bin:/bin CUDA_HOME="$T/none" "$PIPEC" compile --backend cuda examples/tiny_1f1b.pipe \
    -o "$T/nonvcc" >/dev/null 2>"$T/err"
rc=$?
[ "$rc" = 1 ] && grep -q 'needs nvcc' "$T/err" && ok || bad no_nvcc "rc $rc: $(head -n 2 "$T/err")"

HAVE_GPU=0
nvidia-smi -L 2>/dev/null | grep -q '^GPU' && HAVE_GPU=1
if [ "$HAVE_GPU" = 0 ]; then
    # Without a GPU `pipec run` says so before it builds anything, and exits 1 (with one,
    # tests/gpu/ runs it)...
    "$PIPEC" run --backend cuda examples/tiny_1f1b.pipe --workload synthetic --cache "$T/cache" \
        >"$T/out" 2>&1
    rc=$?
    [ "$rc" = 1 ] && grep -q '^pipec run: no GPU found' "$T/out" && [ ! -e "$T/cache" ] && ok ||
        bad no_gpu "rc $rc: $(head -n 2 "$T/out")"
    # ... and the compiled program says so itself and exits 1
    if "$PIPEC" compile --backend cuda examples/tiny_1f1b.pipe -o "$T/nogpu" >/dev/null 2>&1; then
        "$T/nogpu/tiny_1f1b" --workload synthetic >"$T/out" 2>&1
        rc=$?
        [ "$rc" = 1 ] && grep -q '^piperun: no GPU found' "$T/out" && ok ||
            bad no_gpu_program "rc $rc: $(head -n 2 "$T/out")"
    else bad no_gpu_program "compile --backend cuda failed"; fi
fi

# One rank per process (the MPI bootstrap of NCCL): compiles and links.
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
    export OMPI_MCA_btl="self,vader,tcp" OMPI_MCA_btl_tcp_if_include=lo \
           OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
    if env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s cuda-mpi >"$T/out" 2>&1 &&
       "$PIPEC" compile --backend cuda --launcher mpi examples/tiny_1f1b.pipe -o "$T/cm" \
           >"$T/out" 2>"$T/err" && ! grep -qi warning "$T/err" && [ -x "$T/cm/tiny_1f1b" ]; then
        ok
        # the wraps are linked in: the program calls the MPI entry points
        nm "$T/cm/tiny_1f1b" | grep -q '__wrap_pr_main' && nm "$T/cm/tiny_1f1b" | grep -q 'ncclCommInitRank' &&
            ok || bad cuda_mpi_symbols "no __wrap_pr_main / ncclCommInitRank"
        if [ "$HAVE_GPU" = 0 ]; then
            start=$(date +%s)
            timeout 60 "$PIPEC" run --backend cuda --launcher mpi examples/tiny_1f1b.pipe --workload synthetic \
                --cache "$T/cache" >"$T/out" 2>&1
            rc=$?
            [ "$rc" = 1 ] && grep -q 'no GPU found' "$T/out" && [ $(($(date +%s) - start)) -lt 30 ] && ok ||
                bad no_gpu_mpi "rc $rc: $(grep -v '^\s*$' "$T/out" | grep -m 2 piperun)"
        fi
    else bad cuda_mpi_build "$(grep -i -m 3 'warning\|error' "$T/err" "$T/out")"; fi
    # Data parallelism (docs/runtime.md "Data parallelism"): D = 2 replicas, one process
    # per rank, gradients averaged with ncclAllReduce over each stage's communicator and
    # zero 1's shards gathered with ncclBroadcast
    printf '%s\n' 'import "std/models.pipe"' 'import "std/schedules.pipe"' \
        'pipeline tiny_dp {' '  stages 2  microbatches 4' \
        '  model tiny { layers 4  hidden 16  seq 8  mbs 2 }' '  schedule onef1b' \
        '  data_parallel 2  zero 1' '}' >"$T/tiny_dp.pipe"
    if "$PIPEC" compile --backend cuda --launcher mpi "$T/tiny_dp.pipe" -o "$T/cdp" \
           >"$T/out" 2>"$T/err" && ! grep -qi warning "$T/err"; then
        ok
        prog=$(cat "$T/out")
        grep -q '\.data_parallel = 2, \.zero = 1' "$T/cdp/main.c" && ok || bad cuda_dp_main "main.c without data_parallel"
        nm "$prog" | grep -q 'ncclAllReduce' && nm "$prog" | grep -q 'ncclBroadcast' && ok ||
            bad cuda_dp_symbols "no ncclAllReduce / ncclBroadcast"
        # the threads launcher cannot hold the replicas' devices: refused before any GPU
        # call, naming the launcher to use
        if "$PIPEC" compile --backend cuda "$T/tiny_dp.pipe" -o "$T/cdpt" >"$T/out" 2>"$T/err"; then
            "$(cat "$T/out")" --quiet >"$T/out2" 2>&1
            rc=$?
            [ "$rc" = 1 ] && grep -q 'data_parallel 2 on this backend runs one process per rank: use --launcher mpi (mpirun -np' "$T/out2" && ok ||
                bad cuda_dp_threads "rc $rc: $(head -n 2 "$T/out2")"
        else bad cuda_dp_threads_build "$(grep -i -m 3 'warning\|error' "$T/err")"; fi
    else bad cuda_dp_build "$(grep -i -m 3 'warning\|error' "$T/err" "$T/out")"; fi
fi
finish
