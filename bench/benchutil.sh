# shellcheck shell=bash
# bench/benchutil.sh - what the shell benchmarks share; sourced first thing
# (`. "$(dirname "$0")/benchutil.sh"`). Not a benchmark: bench/run.sh runs bench_*.sh only.
#
# Sourcing it goes to the repository root, sets PIPEC (default bin/pipec, absolute) and
# PIPEC_STDLIB (default stdlib/, exported), and makes a temporary folder $T that is
# removed on exit.
cd "$(dirname "$0")/.." || exit 1
PIPEC=${PIPEC:-$PWD/bin/pipec}
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# The first line of a benchmark's output: the machine's cores, CPU model and load average
# (timings on a loaded machine grow).
bench_machine() {
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'),"\
         "load average $(cut -d' ' -f1-3 /proc/loadavg)"
}
