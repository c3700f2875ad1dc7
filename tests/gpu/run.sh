#!/usr/bin/env bash
# tests/gpu/run.sh - the GPU tests of the CUDA backend (`make test-gpu`; needs a GPU,
# nvcc, cuBLAS and NCCL; prints "SKIP: no GPU" and exits 0 elsewhere). Runs every
# tests/gpu/g_*.sh and sums their "N passed, N failed, N skipped" lines:
#   g_examples.sh  every example with --check on the GPU (mlp; gradients within the
#                  CUDA backend's 1e-4 relative bound), synthetic where mlp cannot run
#   g_fallback.sh  a 4-rank pipeline on one GPU through the copy fallback
#   g_synthetic.sh the synthetic replay of an 8-stage schedule within 10% of the
#                  simulated makespan
#   g_swap.sh      swap copies overlap compute: iteration time below compute + copy time
#   g_dp.sh        data_parallel 2 over MPI (NCCL all-reduce, zero 1's sharded step):
#                  --check over the global batch, zero 1 = zero 0, D=2 x M = D=1 x 2M
#   g_transformer.sh the gpt and llama workloads: --check (1e-4) under many schedules and
#                  passes, the loss falls, arena peaks equal the plan, cuda over MPI
cd "$(dirname "$0")/../.." || exit 1
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then echo "SKIP: no GPU"; exit 0; fi
p=0 f=0 s=0
for t in tests/gpu/g_*.sh; do
    echo "== $t"
    out=$(bash "$t" 2>&1)
    echo "$out" | grep -v '^[0-9]* passed'
    line=$(echo "$out" | grep '^[0-9]* passed' | tail -n 1)
    if [ -z "$line" ]; then echo "FAIL: $t ended without a summary"; f=$((f + 1)); continue; fi
    set -- $line
    p=$((p + $1)) f=$((f + $3)) s=$((s + $5))
done
echo "$p passed, $f failed, $s skipped"
[ "$f" = 0 ]
