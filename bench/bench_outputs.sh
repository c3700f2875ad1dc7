#!/usr/bin/env bash
# bench/bench_outputs.sh - the size of `pipec sim`'s figures as schedules grow, and the
# guard that keeps them sensible (docs/simulator.md "Size of the figures"): 8 stages,
# 1F1B, explicit costs, 1,024 / 8,192 / 31,250 micro-batches (16,384 / 131,072 /
# 500,000 ops). BENCH_OUTPUTS_MBS="1024 4096" runs other sizes.
#
# Per size: the ops; for each of --svg, --html and --trace, the bytes written and bytes
# per op, or "refused" when the schedule is over SIM_FIGURE_MAX_OPS (250,000 ops) and
# pipec wrote nothing (exit 1, a located `limit` error naming --large); then wall and
# CPU seconds of the three runs together. Past the guard a last row draws the SVG with
# --large, to show what the guard spares. The first line names the machine and its load.
# Not a test: t_sim.sh asserts the guard; nothing is asserted here.
set -u
# shellcheck source=bench/benchutil.sh
. "$(dirname "$0")/benchutil.sh"
bench_machine
printf '%-9s %-20s %-20s %-20s %7s %7s\n' ops "svg B (B/op)" "html B (B/op)" "trace B (B/op)" wall_s cpu_s
TIMEFORMAT='%R %U %S'
# One figure: prints "BYTES (B/OP)" or "refused"; $1 option, $2 file, $3 ops, $4... extra
figure() {
    local opt=$1 out=$2 ops=$3
    shift 3
    rm -f "$out"
    if "$PIPEC" sim "$T/o.pipe" "$opt" "$out" "$@" >/dev/null 2>"$T/err"; then
        local b
        b=$(wc -c <"$out")
        awk -v b="$b" -v o="$ops" 'BEGIN { printf "%d (%.0f)", b, b / o }'
    elif grep -q "error\[limit\].*--large" "$T/err" && [ ! -e "$out" ]; then
        printf refused
    else
        printf failed
    fi
}
last=
for m in ${BENCH_OUTPUTS_MBS:-1024 8192 31250}; do
    cat >"$T/o.pipe" <<EOF
import "std/schedules.pipe"
pipeline o {
  stages 8
  microbatches $m
  costs { f 1ms b 2ms }
  schedule onef1b
}
EOF
    ops=$((8 * 2 * m))
    t=$( { time { s=$(figure --svg "$T/o.svg" $ops); h=$(figure --html "$T/o.html" $ops);
                  r=$(figure --trace "$T/o.json" $ops); echo "$s|$h|$r" >"$T/row"; }; } 2>&1 )
    IFS='|' read -r s h r <"$T/row"
    read -r wall user sys <<<"$t"
    printf '%-9d %-20s %-20s %-20s %7.2f %7.2f\n' "$ops" "$s" "$h" "$r" "$wall" \
        "$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')"
    [ "$s" = refused ] && last=$ops
done
if [ -n "$last" ]; then
    t=$( { time s=$(figure --svg "$T/o.svg" "$last" --large); echo "$s" >"$T/row"; } 2>&1 )
    read -r wall user sys <<<"$t"
    printf '%-9s %-20s %-20s %-20s %7.2f %7.2f\n' "$last" "$(cat "$T/row")" "(--large)" "" \
        "$wall" "$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')"
fi
