#!/usr/bin/env bash
# bench_gpu.sh - GPU mlp throughput of the generated 1-rank program (CUDA backend)
# against the same kernels in one stream without the pipeline runtime
# (docs/performance.md says what is measured and how). Skips without a GPU.
cd "$(dirname "$0")/.." || exit 1
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then echo "SKIP: no GPU"; exit 0; fi
make -s all cuda || exit 1
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=$(command -v nvcc || echo "$CUDA_HOME/bin/nvcc")
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cat >"$T/p1.pipe" <<'P'
import "std/models.pipe"
import "std/schedules.pipe"
pipeline p1 { stages 1  microbatches 8  chunks 1  model tiny { layers 8  hidden 512  seq 256  mbs 8 }  schedule gpipe }
P
PIPEC_STDLIB=$PWD/stdlib bin/pipec emit "$T/p1.pipe" -o "$T/g" >/dev/null || exit 1
for f in "$T"/g/*.c; do "$NVCC" -x c -Xcompiler -std=c11 -Iruntime -c "$f" -o "${f%.c}.o" || exit 1; done
"$NVCC" -o "$T/p1" "$T"/g/*.o build/libpiperun_cuda.a -L"$CUDA_HOME/lib64" -lcublas -lnccl -lcudart -lopenblas -lpthread -lm || exit 1
nvidia-smi -L | head -n 1
"$T/p1" --iters 20 --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
toks = 8 * 8 * 256
print("generated 1-rank program: %.3f ms/iter, %.0f tokens/s" % (j["measured_ms"], toks / j["measured_ms"] * 1e3))'
