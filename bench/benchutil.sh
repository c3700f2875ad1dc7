# shellcheck shell=bash
# bench/benchutil.sh - what the shell benchmarks share; sourced (`. bench/benchutil.sh`)
# from the repository root. Not a benchmark: bench/run.sh runs bench_*.sh only.

# The first line of a benchmark's output: the machine's cores, CPU model and load average
# (timings on a loaded machine grow).
bench_machine() {
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'),"\
         "load average $(cut -d' ' -f1-3 /proc/loadavg)"
}
