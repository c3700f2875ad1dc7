#!/usr/bin/env bash
# t_fault.sh - a bounded sample of the fault campaign (tests/fault/run.sh): 30 values
# of N per scenario and function, every function's first and last call included.
# `make fault` runs the full sweep.
cd "$(dirname "$0")/.."
shim=build/fault/faultinject.so
if [ ! -f "$shim" ]; then
    echo "SKIP: fault sample: $shim is not built (make test builds it)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
exec bash tests/fault/run.sh --sample 30 "$shim"
