#!/usr/bin/env bash
# bench_tune.sh - `pipec tune` on Llama-2 70B, 8 stages x tensor_parallel 8, 32
# micro-batches (tests/tune/llama2_70b_tp8.pipe, docs/tune.md): CPU seconds, variants
# searched per CPU second, and the ratio against the same search without pruning
# (--top 100000 keeps every row, so nothing is pruned) in the same run. Prints fixed
# columns; asserts nothing. docs/performance.md "pipec tune" has the figures.
set -u
cd "$(dirname "$0")/.."
PIPEC=${PIPEC:-$PWD/bin/pipec}
file=tests/tune/llama2_70b_tp8.pipe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# run NAME ARGS...: CPU seconds (user + sys) and the variants searched
run() {
    local name=$1
    shift
    /usr/bin/env time -f '%U %S' -o "$tmp/$name.time" "$PIPEC" tune --json "$@" "$file" \
        >"$tmp/$name.json" 2>/dev/null || return 1
    cpu=$(awk '{ print $1 + $2 }' "$tmp/$name.time")
    n=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["searched"])' "$tmp/$name.json")
    best=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["variants"][0]["makespan_ms"])' "$tmp/$name.json")
    printf '%-22s %8.2f %9d %12.1f %12.1f\n' "$name" "$cpu" "$n" \
        "$(python3 -c "print($n / max($cpu, 1e-3))")" "$best"
    eval "cpu_$name=$cpu"
}
printf '%-22s %8s %9s %12s %12s\n' search cpu_s searched variants_per_s best_ms
run pruned || { echo "bench_tune: tune failed"; exit 1; }
run unpruned --top 100000 || { echo "bench_tune: tune failed"; exit 1; }
# shellcheck disable=SC2154
python3 -c "print('8x32 pruned / unpruned CPU time: %.3f (target: pruned <= 1 s)' % ($cpu_pruned / max($cpu_unpruned, 1e-3)))"
