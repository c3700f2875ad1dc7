#!/usr/bin/env bash
# bench_runtime.sh - runtime benchmarks (not tests), on the `tiny` model:
#  1. P = 1: the generated program's iteration time against the sequential reference
#     trainer in the same binary (--reference); target: within 5%.
#  2. P = 2, 1F1B: op costs profiled by `pipec run --profile` are written as a costs
#     block into the pipeline; the simulator's iteration time with those costs against
#     the measured one; target: within 15%.
cd "$(dirname "$0")/.." || exit 1
PIPEC=${PIPEC:-bin/pipec}
ITERS=${ITERS:-20}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mk() { # NAME P M [COSTS_FILE]
    {
        echo 'import "std/models.pipe"'; echo 'import "std/schedules.pipe"'
        echo "pipeline $1 {"; echo "  stages $2  microbatches $3"
        echo "  model tiny"; echo "  schedule onef1b"
        [ -n "${4:-}" ] && grep -v '^#' "$4" | sed 's/^/  /'
        echo "}"
    } >"$T/$1.pipe"
}
json() { python3 -c "import json,sys; j=json.load(sys.stdin); print(j['$1'])"; }

mk p1 1 8
out=$("$PIPEC" run "$T/p1.pipe" --iters "$ITERS" --reference --json --cache "$T/c")
pipe_ms=$(echo "$out" | json measured_ms); ref_ms=$(echo "$out" | json reference_ms)
printf "P=1 M=8 tiny: pipelined %.3f ms/iter, reference %.3f ms/iter, ratio %.3f (target <= 1.05)\n" \
    "$pipe_ms" "$ref_ms" "$(echo "$pipe_ms / $ref_ms" | bc -l)"

mk p2 2 8
"$PIPEC" run "$T/p2.pipe" --iters "$ITERS" --profile -o "$T/costs.pipe" --cache "$T/c" >/dev/null
mk p2prof 2 8 "$T/costs.pipe"
out=$("$PIPEC" run "$T/p2prof.pipe" --iters "$ITERS" --json --cache "$T/c")
m=$(echo "$out" | json measured_ms); s=$(echo "$out" | json simulated_ms)
printf "P=2 M=8 1F1B tiny, profiled costs: measured %.3f ms/iter, simulated %.3f ms, ratio %.3f (target within 15%%)\n" \
    "$m" "$s" "$(echo "$m / $s" | bc -l)"
