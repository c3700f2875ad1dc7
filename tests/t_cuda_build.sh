#!/usr/bin/env bash
# t_cuda_build.sh - the CUDA backend builds without a GPU (docs/cuda.md): `make cuda`
# compiles runtime/cuda/ with nvcc warning-free (--Werror all-warnings, -Wall -Wextra
# for the C parts), and the generated program of every example compiles with nvcc (as
# C11, -Wall -Wextra -Werror) and links against build/libpiperun_cuda.a, cuBLAS and
# NCCL. Without a GPU the linked program must refuse to run with a clear message and
# exit 1. Skips when nvcc is not installed.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=$(command -v nvcc || { [ -x "$CUDA_HOME/bin/nvcc" ] && echo "$CUDA_HOME/bin/nvcc"; })
if [ -z "$NVCC" ]; then skip cuda_build "nvcc not found (CUDA toolkit not installed)"; finish; exit; fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT

if make -s cuda >"$T/out" 2>&1 && ! grep -qi 'warning' "$T/out"; then ok
else bad cuda_lib "$(grep -i -m 5 'warning\|error' "$T/out")"; finish; exit; fi

LIBS=(build/libpiperun_cuda.a -L"$CUDA_HOME/lib64" -lcublas -lnccl -lcudart -lopenblas -lpthread -lm)
n=0
for ex in examples/*.pipe; do
    name=$(basename "$ex" .pipe) d="$T/$name"
    if ! "$PIPEC" emit "$ex" -o "$d" >"$T/err" 2>&1; then
        bad "$name" "emit: $(tail -n 2 "$T/err")"; continue
    fi
    fail=""
    for f in "$d"/*.c; do
        "$NVCC" -x c -Xcompiler -std=c11,-Wall,-Wextra,-Werror -Iruntime -c "$f" -o "${f%.c}.o" \
            >"$T/err" 2>&1 && [ ! -s "$T/err" ] || { fail="$(basename "$f"): $(head -n 3 "$T/err")"; break; }
    done
    if [ -z "$fail" ] && "$NVCC" -o "$d/prog" "$d"/*.o "${LIBS[@]}" >"$T/err" 2>&1 && [ ! -s "$T/err" ]; then
        ok; n=$((n + 1))
    else bad "$name" "${fail:-link: $(head -n 3 "$T/err")}"; fi
done
[ "$n" -gt 0 ] && ok || bad cuda_examples "no example built"

# Without a GPU the program says so and exits 1 (with one, tests/gpu/ runs it).
if [ -x "$T/tiny_1f1b/prog" ] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    "$T/tiny_1f1b/prog" --workload synthetic >"$T/out" 2>&1; rc=$?
    [ "$rc" = 1 ] && grep -q 'no CUDA device' "$T/out" && ok || bad no_gpu "rc $rc: $(head -n 2 "$T/out")"
fi
finish
