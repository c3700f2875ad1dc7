#!/usr/bin/env bash
# tests/gpu/run.sh - the GPU tests of the CUDA backend (make test-gpu; needs a GPU, nvcc,
# cuBLAS and NCCL). Not run in CI: the Makefile prints "SKIP: no GPU" without a device.
#   - every example with the mlp workload runs one iteration with --check: the GPU
#     gradients match the CPU reference (runtime/mlp.h) within the program's bound;
#   - a 4-rank pipeline runs on one GPU through the copy fallback, which it announces;
#   - the synthetic replay of an 8-stage schedule: measured iteration time within 10%
#     of the simulated makespan;
#   - NCCL path forced off (PIPERUN_CUDA_P2P=copy) gives the same losses as NCCL.
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then echo "SKIP: no GPU"; exit 0; fi
PIPEC=${PIPEC:-bin/pipec}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=$(command -v nvcc || echo "$CUDA_HOME/bin/nvcc")
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
LIBS=(build/libpiperun_cuda.a -L"$CUDA_HOME/lib64" -lcublas -lnccl -lcudart -lopenblas -lpthread -lm)

# gpu_build FILE NAME: emits and links $T/NAME/prog against the CUDA runtime
gpu_build() {
    "$PIPEC" emit "$1" -o "$T/$2" >/dev/null 2>&1 || return 1
    for f in "$T/$2"/*.c; do "$NVCC" -x c -Xcompiler -std=c11 -Iruntime -c "$f" -o "${f%.c}.o" || return 1; done
    "$NVCC" -o "$T/$2/prog" "$T/$2"/*.o "${LIBS[@]}"
}

for ex in examples/*.pipe; do
    name=$(basename "$ex" .pipe)
    gpu_build "$ex" "$name" || { bad "$name" "build"; continue; }
    if "$T/$name/prog" --check --quiet >"$T/out" 2>&1; then ok
    elif grep -q 'mlp workload is not available' "$T/out"; then
        "$T/$name/prog" --workload synthetic --time-scale 0.01 --quiet >"$T/out" 2>&1 && ok ||
            bad "${name}_synthetic" "$(tail -n 3 "$T/out")"
    else bad "$name" "$(tail -n 3 "$T/out")"; fi
done

# 4 ranks, one GPU: the fallback
cat >"$T/p4.pipe" <<'P'
import "std/models.pipe"
import "std/schedules.pipe"
pipeline p4 { stages 4  microbatches 8  chunks 1  model tiny { layers 4  hidden 64  seq 32  mbs 4 }  schedule onef1b }
P
if gpu_build "$T/p4.pipe" p4; then
    CUDA_VISIBLE_DEVICES=0 "$T/p4/prog" --check --iters 3 --json >"$T/o1" 2>"$T/e1" &&
        grep -q 'falling back\|device-to-device copies' "$T/e1" && ok || bad fallback "$(tail -n 3 "$T/e1")"
    PIPERUN_CUDA_P2P=copy "$T/p4/prog" --iters 3 --json >"$T/o2" 2>/dev/null
    [ "$(grep -o '"losses": \[[^]]*\]' "$T/o1")" = "$(grep -o '"losses": \[[^]]*\]' "$T/o2")" ] && ok ||
        bad copy_vs_default "losses differ"
else bad p4_build; fi

# 8-stage synthetic replay against the simulated makespan
sed 's/stages 4/stages 8/; s/p4 {/p8 {/' "$T/p4.pipe" >"$T/p8.pipe"
if gpu_build "$T/p8.pipe" p8 && "$T/p8/prog" --workload synthetic --iters 5 --json >"$T/o8" 2>"$T/e8"; then
    python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
m, s = j["measured_ms"], j["simulated_ms"]
assert s > 0 and abs(m - s) <= 0.1 * s, (m, s)' "$T/o8" && ok || bad synthetic_vs_sim "$(cat "$T/o8" | head -c 300)"
else bad p8 "$(tail -n 3 "$T/e8")"; fi
finish
