#!/usr/bin/env bash
# t_bind.sh - the CPU backend binds each rank thread to a CPU of its own when the
# process may use at least as many CPUs as it has rank threads, and binds none
# otherwise (docs/runtime.md "Threads and streams", Binding). The program runs under
# `taskset -c 0,1` (two CPUs) long enough to read its threads' affinity from /proc:
# with 2 ranks, two threads are bound, one to CPU 0 and one to CPU 1; with 3 ranks none
# is.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! command -v taskset >/dev/null || [ "$(nproc --all)" -lt 2 ] ||
   ! taskset -c 0,1 true 2>/dev/null; then
    skip "binding" "needs taskset and CPUs 0 and 1"; finish; exit
fi
# affinities P: the sorted Cpus_allowed_list of the threads of a P-rank program, read
# while it runs
affinities() {
    cat >"$tmp/b$1.pipe" <<EOF2
import "std/schedules.pipe"
pipeline b$1 {
  stages $1  microbatches 8
  costs { f 2ms  b 2ms }
  schedule onef1b
}
EOF2
    "$PIPEC" compile "$tmp/b$1.pipe" -o "$tmp/b$1" >/dev/null 2>"$tmp/err$1" || { cat "$tmp/err$1"; return; }
    taskset -c 0,1 "$tmp/b$1/b$1" --workload synthetic --iters 40 --quiet >/dev/null 2>&1 &
    local pid=$!
    sleep 0.5
    for t in /proc/$pid/task/*/status; do sed -n 's/^Cpus_allowed_list:\s*//p' "$t"; done 2>/dev/null | sort
    wait $pid
}
two=$(affinities 2)
check "2 ranks on 2 CPUs: one thread bound to CPU 0, one to CPU 1 ($(echo $two))" \
    test "$(echo "$two" | grep -cx 0)" = 1 -a "$(echo "$two" | grep -cx 1)" = 1
three=$(affinities 3)
check "3 ranks on 2 CPUs: no thread bound ($(echo $three))" \
    test -n "$three" -a -z "$(echo "$three" | grep -vx '0-1')"
finish
