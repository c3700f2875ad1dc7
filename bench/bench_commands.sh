#!/usr/bin/env bash
# bench/bench_commands.sh - `pipec check`, `pipec sim` and `pipec print` timed as users
# run them: whole processes on explicit schedules of 1,048,576 and 4,194,304 ops
# (`interleaved`, P = 64, V = 2, M = 4096 and 16384, written out once by `pipec print`).
#
# Each command runs 3 times; the table shows the fastest wall time and its CPU time
# (user + sys), since other work on the machine only ever adds to a run. Baselines, in
# the same run: `pipec print FILE -o /dev/null` (parse + print) for the commands, and
# the 1M-op schedule for the 4M-op one:
#   check/print  check's wall time over print's (the target is at most 2)
#   after parse  ops per second of check's work beyond parsing: ops / (check - print)
#   4M/1M        time per op at 4M ops over time per op at 1M ops (1.00 = linear)
# Not a test: nothing is asserted.
set -u
cd "$(dirname "$0")/.."
PIPEC=${PIPEC:-$PWD/bin/pipec}
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
dir=build/bench/commands
mkdir -p "$dir"

gen() { # M -> explicit file path
    local m=$1 src="$dir/src_$1.pipe" out="$dir/explicit_$1.pipe"
    if [ ! -s "$out" ]; then
        cat >"$src" <<EOF
import "std/schedules.pipe"
pipeline bench {
  stages 64 microbatches $m chunks 2
  schedule interleaved
  costs { f 1ms b 2ms act 1MiB weights 1GiB }
  memory 80GiB
}
EOF
        "$PIPEC" print "$src" -o "$out" || return 1
    fi
    echo "$out"
}

# best CMD ARGS...: prints "wall_ms cpu_ms" of the fastest of 3 runs.
best() {
    local bw="" bc="" i t w c
    for i in 1 2 3; do
        t=$( { TIMEFORMAT='%R %U %S'; time "$@" >/dev/null 2>&1; } 2>&1 | tail -1)
        w=$(awk '{printf "%.1f", $1 * 1000}' <<<"$t")
        c=$(awk '{printf "%.1f", ($2 + $3) * 1000}' <<<"$t")
        if [ -z "$bw" ] || awk -v a="$w" -v b="$bw" 'BEGIN{exit !(a < b)}'; then
            bw=$w
            bc=$c
        fi
    done
    echo "$bw $bc"
}

printf '%-7s %9s %-6s %10s %10s %12s %12s %8s\n' size ops command "wall ms" "cpu ms" "ops/s" "after parse" "ratio"
declare -A per_op
for m in 4096 16384; do
    f=$(gen $m) || { echo "bench_commands: could not write the schedule"; exit 1; }
    ops=$((2 * 64 * 2 * m))
    read -r pw pc < <(best "$PIPEC" print "$f" -o /dev/null)
    read -r cw cc < <(best "$PIPEC" check "$f")
    read -r sw sc < <(best "$PIPEC" sim "$f" --json)
    label=$([ $m = 4096 ] && echo 1M || echo 4M)
    for row in "print $pw $pc" "check $cw $cc" "sim $sw $sc"; do
        set -- $row
        opss=$(awk -v o=$ops -v w="$2" 'BEGIN{printf "%.0f", o / (w / 1000)}')
        after="-"
        ratio="-"
        if [ "$1" != print ]; then
            after=$(awk -v o=$ops -v w="$2" -v p="$pw" 'BEGIN{d = w - p; if (d > 0) printf "%.0f", o / (d / 1000); else print "inf"}')
            ratio=$(awk -v w="$2" -v p="$pw" 'BEGIN{printf "%.2f", w / p}')
        fi
        printf '%-7s %9d %-6s %10s %10s %12s %12s %8s\n' "$label" $ops "$1" "$2" "$3" "$opss" "$after" "$ratio"
        per_op[$label.$1]=$(awk -v o=$ops -v w="$2" 'BEGIN{printf "%.6g", w / o}')
    done
done
for c in print check sim; do
    printf '4M/1M time per op, %-6s %6.2f\n' "$c" "$(awk -v a="${per_op[4M.$c]}" -v b="${per_op[1M.$c]}" 'BEGIN{print a / b}')"
done
