#!/usr/bin/env bash
# t_fault.sh - a bounded sample of the fault campaign (tests/fault/run.sh): K values of
# N per scenario and function, every function's first and last call included, spread
# evenly (sample_points in tests/lib.sh). `make test` runs K = 3; `make test-full`
# (PIPEC_TEST_FULL=1) K = 30; `make fault` runs the full sweep.
cd "$(dirname "$0")/.."
. tests/lib.sh
shim=build/fault/faultinject.so
if [ ! -f "$shim" ]; then
    echo "SKIP: fault sample: $shim is not built (make test builds it)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
k=3
test_full && k=30
exec bash tests/fault/run.sh --sample "$k" "$shim"
