#!/usr/bin/env bash
# bench/run.sh - what `make bench` runs: every benchmark, one after the other.
#
#   bench/bench_*.c   built against build/libpipec.a and build/libpiperun.a (make all
#                     first), then run from the repository root
#   bench/bench_*.sh  run as they are ($PIPEC is bin/pipec)
# Benchmarks print fixed columns; nothing here asserts timings.
set -u
cd "$(dirname "$0")/.."
export PIPEC=${PIPEC:-$PWD/bin/pipec}
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
CC=${CC:-cc}
mkdir -p build/bench
BLAS_CFLAGS=$(pkg-config --cflags openblas 2>/dev/null || echo -I/usr/include/x86_64-linux-gnu/openblas-pthread)
BLAS_LIBS=$(pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
# The include paths of the whole compiler (every layer) and the runtime, as the Makefile
# has them.
INC=$(make -s --no-print-directory print-layer-flags LAYER=ALL)
status=0

for src in bench/bench_*.c; do
    [ -e "$src" ] || continue
    name=$(basename "$src" .c)
    echo "== $name"
    # shellcheck disable=SC2086
    if ! $CC $INC -O2 -g -Wno-unused-parameter $BLAS_CFLAGS -o "build/bench/$name" "$src" \
        build/libpipec.a build/libpiperun.a $BLAS_LIBS -pthread -lm; then
        echo "$name: build failed"
        status=1
        continue
    fi
    "build/bench/$name" || status=1
done

for script in bench/bench_*.sh; do
    [ -e "$script" ] || continue
    echo "== $(basename "$script" .sh)"
    bash "$script" || status=1
done
exit $status
