#!/usr/bin/env bash
# t_cuda_build.sh - the CUDA backend builds without a GPU (docs/cuda.md):
#   - `make cuda` compiles runtime/cuda/ with nvcc warning-free (--Werror all-warnings,
#     -Wall -Wextra for the C parts);
#   - `pipec compile --backend cuda` builds every example (`make test`: one per shape of
#     generated code, below): nvcc compiles each generated file as C11 with -Wall -Wextra
#     and links against build/libpiperun_cuda.a, cuBLAS and NCCL; no warning may appear;
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

# Which examples nvcc builds. `make test-full` (PIPEC_TEST_FULL=1): every one. `make
# test`: one per shape of generated code, the smallest: examples whose sources are the
# same once their numbers (sizes, costs, counts), string literals, comments and packed
# tables (string data, docs/runtime.md "Packed op tables") are left out
# generate the same constructs for the compilers, so one compile checks them all; tiny_1f1b,
# gpt_tiny and llama_tiny always (the checks below read their programs).
mkdir "$T/shape"
for ex in examples/*.pipe; do
    name=$(basename "$ex" .pipe)
    if ! "$PIPEC" emit --backend cuda "$ex" -o "$T/shape/$name" >/dev/null 2>"$T/shape/$name.err"; then
        bad "$name" "emit --backend cuda: $(head -n 3 "$T/shape/$name.err")"; continue
    fi
    key=$(cat "$T/shape/$name"/*.c "$T/shape/$name"/*.h |
          sed '/^    "[^"]*"/d; /^ \* /d; /^\/\*/d; s/"[^"]*"/S/g; s/[0-9][0-9]*/N/g; s/N\.N/N/g' |
          sort -u | cksum | cut -d' ' -f1)
    echo "$key $(cat "$T/shape/$name"/*.c | wc -c) $name"
done >"$T/shapes"
if test_full; then
    awk '{ print $3 }' "$T/shapes" >"$T/build_list"
else
    sort -k1,1 -k2,2n "$T/shapes" | awk '$1 != last { print $3; last = $1 }
        $3 == "tiny_1f1b" || $3 == "gpt_tiny" || $3 == "llama_tiny" { print $3 }' | sort -u >"$T/build_list"
fi
echo "cuda_build: nvcc builds $(wc -l <"$T/build_list") of $(ls examples/*.pipe | wc -l) examples ($(cut -d' ' -f1 "$T/shapes" | sort -u | wc -l) shapes of generated code)"
# The chosen examples through pipec, two at a time (each pipec runs its nvcc jobs in
# parallel).
sed 's|.*|examples/&.pipe|' "$T/build_list" | xargs -P 2 -I{} sh -c \
    'n=$(basename "$1" .pipe); "$2" compile --backend cuda "$1" -o "$3/$n" >"$3/$n.out" 2>"$3/$n.err"; echo $? >"$3/$n.rc"' \
    _ {} "$PIPEC" "$T"
# cc_warnings FILE: the compilers' warnings in FILE, without pipec's own memory
# warnings (the papers' out-of-memory baselines are generated all the same)
cc_warnings() { grep -i 'warning' "$1" | grep -v 'warning\[memory\]\|over its memory budget'; }
n=0
while read -r name; do
    if [ "$(cat "$T/$name.rc" 2>/dev/null)" = 0 ] && [ -x "$T/$name/$(basename "$(cat "$T/$name.out")")" ] &&
       ! cc_warnings "$T/$name.err" >/dev/null; then
        ok; n=$((n + 1))
    else bad "$name" "rc $(cat "$T/$name.rc" 2>/dev/null): $(grep -i -m 3 'warning\|error' "$T/$name.err")"; fi
done <"$T/build_list"
[ "$n" = "$(wc -l <"$T/build_list")" ] && [ "$n" -gt 0 ] && ok || bad cuda_examples "$n examples built"
if test_full; then
    [ "$n" = "$(ls examples/*.pipe | wc -l)" ] && ok || bad cuda_examples_all "$n examples built"
fi
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
    # ... and the compiled program (the one built above) says so itself and exits 1
    if [ -x "$T/tiny_1f1b/tiny_1f1b" ]; then
        "$T/tiny_1f1b/tiny_1f1b" --workload synthetic >"$T/out" 2>&1
        rc=$?
        [ "$rc" = 1 ] && grep -q '^piperun: no GPU found' "$T/out" && ok ||
            bad no_gpu_program "rc $rc: $(head -n 2 "$T/out")"
    else bad no_gpu_program "tiny_1f1b was not built"; fi
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
