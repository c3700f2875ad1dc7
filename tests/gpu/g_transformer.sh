#!/usr/bin/env bash
# g_transformer.sh - the gpt and llama workloads on the GPU (runtime/cuda/tf_cuda.cu):
#   - `pipec run --backend cuda --check` for both archs under schedules with plain, split
#     (B/W) and interleaved backwards, an empty stage, R (also into a region split by the
#     arena plan), SO/SI and OG/LW: max relative gradient error < 1e-4 against the CPU
#     reference (runtime/transformer.h), the CUDA backend's bound;
#   - the loss falls over 50 iterations on the default text, and the measured arena peak
#     of every rank equals the static plan;
#   - with the one-process-per-rank launcher (cuda over MPI), --check within 1e-4.
# Shapes as tests/t_transformer.sh (hidden 16, seq 8, mbs 2, 4 layers).
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
. tests/gpu/lib_gpu.sh

. tests/lib_tf.sh
pipe() { tf_pipe "$@"; }
# run_check NAME [RUN ARGS...]: --check on the GPU, the printed max error < 1e-4
run_check() { local n=$1; shift; tf_check "$n" 1e-4 gpu_run_pipe "$@"; }
# gpu_run with the file last (tf_check appends it and the --check arguments)
gpu_run_pipe() {
    local args=() f
    while [ $# -gt 0 ]; do
        case $1 in *.pipe) f=$1 ;; *) args+=("$1") ;; esac
        shift
    done
    gpu_run "$f" "${args[@]}"
}

for arch in gpt llama; do
    for s in gpipe onef1b zbh1; do
        pipe "${arch}_$s" $arch 2 4 1 "$s"
        run_check "${arch}_$s"
    done
    pipe "${arch}_interleaved" $arch 2 4 2 interleaved
    run_check "${arch}_interleaved"
    pipe "${arch}_partition" $arch 3 4 1 onef1b "partition [3, 0, 1]"
    run_check "${arch}_partition"
    pipe "${arch}_recompute" $arch 4 8 1 onef1b "recompute stages 0..=2 policy full"
    run_check "${arch}_recompute"
    pipe "${arch}_recompute_zb" $arch 2 4 1 zbh1 "apply recompute(stages=0..=1, policy=full)"
    run_check "${arch}_recompute_zb"
    pipe "${arch}_swap" $arch 4 8 1 onef1b "apply swap(lambda=2, stages=0..=1)"
    run_check "${arch}_swap"
    pipe "${arch}_toffload" $arch 2 4 2 tpipe "apply toffload"
    run_check "${arch}_toffload"
done

for arch in gpt llama; do
    pipe "${arch}_train" $arch 4 8 1 onef1b "recompute stages 0..=0 policy full"
    out=$(gpu_run "$T/${arch}_train.pipe" --iters 50 --lr 0.1 --json 2>&1)
    if echo "$out" | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["workload"] == sys.argv[1], j["workload"]
l = j["losses"]
assert len(l) == 50 and 5.0 < l[0] < 6.2, l[:3]
assert sum(l[-5:]) / 5 < l[0] - 1.0, (l[0], l[-5:])
for s in j["per_stage"]:
    assert s["peak_arena_bytes"] == s["planned_peak_bytes"], s
' "$arch" 2>"$T/err"; then ok; else bad "${arch}_train" "$(tail -n 2 "$T/err") $(echo "$out" | tail -n 2)"; fi
done

if command -v mpicc >/dev/null && command -v mpirun >/dev/null && [ -f build/libpiperun_cuda_mpi.a ]; then
    [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    for arch in gpt llama; do run_check "${arch}_zbh1" --launcher mpi; done
else
    skip transformer_cuda_mpi "mpicc/mpirun or build/libpiperun_cuda_mpi.a not found"
fi
finish
