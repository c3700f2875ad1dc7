#!/usr/bin/env bash
# bench_gpu.sh - GPU mlp throughput of the generated 1-rank program (CUDA backend,
# `pipec compile --backend cuda`) against a hand-written single-stream loop of the same
# kernels without the pipeline runtime (bench/mlp_loop_gpu.c, built with nvcc). Shape:
# C 512, L 8, T 256, B 8, M 8 (GPipe order), vocabulary 256; 20 iterations, the mean of
# iterations 2..20. The target (issue 7) is the generated program within 3% of the loop;
# docs/performance.md records the numbers with the device. Skips without a GPU.
cd "$(dirname "$0")/.." || exit 1
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then echo "SKIP: no GPU"; exit 0; fi
make -s all cuda || exit 1
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=$(command -v nvcc || echo "$CUDA_HOME/bin/nvcc")
PIPEC=${PIPEC:-bin/pipec}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
C=512 L=8 TT=256 B=8 M=8 V=256 ITERS=20
cat >"$T/p1.pipe" <<P
import "std/models.pipe"
import "std/schedules.pipe"
pipeline p1 { stages 1  microbatches $M  chunks 1  model tiny { layers $L  hidden $C  seq $TT  mbs $B }  schedule gpipe }
P
"$PIPEC" compile --backend cuda "$T/p1.pipe" -o "$T/g" >/dev/null || exit 1
grep -q "\.model_vocab = $V," "$T/g/main.c" || { echo "bench_gpu: the program's vocabulary is not $V"; exit 1; }
"$NVCC" -x c -Xcompiler -std=c11 -O2 -Iruntime -Iruntime/models -Iruntime/cuda -I"$CUDA_HOME/include" \
    -c bench/mlp_loop_gpu.c -o "$T/loop.o" &&
    "$NVCC" -o "$T/loop" "$T/loop.o" build/libpiperun_cuda.a -L"$CUDA_HOME/lib64" \
        -lcublas -lnccl -lcudart -lopenblas -lpthread -lm || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1
"$T/g/p1" --iters "$ITERS" --json >"$T/gen.json" || exit 1
"$T/loop" "$C" "$L" "$TT" "$B" "$M" "$V" "$ITERS" | tee "$T/loop.txt" || exit 1
python3 - "$T/gen.json" "$T/loop.txt" "$((M * B * TT))" <<'PY'
import json, re, sys
g = json.load(open(sys.argv[1]))["measured_ms"]
l = float(re.search(r"([0-9.]+) ms/iter", open(sys.argv[2]).read()).group(1))
toks = int(sys.argv[3])
print("generated 1-rank program:        %.3f ms/iter, %.0f tokens/s" % (g, toks / g * 1e3))
print("generated / hand-written loop:   %.3f (target <= 1.03)" % (g / l))
PY
