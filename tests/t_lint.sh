#!/usr/bin/env bash
# t_lint.sh - the lint warnings `check` prints after the checks pass (compiler/analyses/lint.c):
# `split` (a minority of a stage's backwards left unsplit when the others have a W) and
# `empty` (virtual stages the model gives no layers that take time). A warning keeps
# exit 0; under -Werror it is an error and exit 1.
cd "$(dirname "$0")/.."
. tests/lib.sh
P=$PIPEC_ASAN
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# lint NAME RC ARGS...: `pipec check ARGS` (output in $tmp/out and $tmp/err) exits RC
lint() {
    local name=$1 want=$2
    shift 2
    "$P" check "$@" >"$tmp/out" 2>"$tmp/err"
    check "$name: exit $want" test $? = "$want"
}

# --- split: 12 micro-batches on chunk 1, W for the first 7 ---------------------------------
python3 - "$tmp/split.pipe" <<'PY'
import sys
M = 12
ops = []
for m in range(M):
    ops += [f"F{m}", f"F{m}.1"]
for m in range(M):
    ops.append(f"B{m}.1")
    if m < 7:
        ops.append(f"W{m}.1")
    ops.append(f"B{m}")
open(sys.argv[1], "w").write("pipeline sp {\n  stages 1 microbatches %d chunks 2\n"
                             "  costs { f 1ms b 2ms w 1ms }\n  stage 0 { %s }\n}\n" % (M, " ".join(ops)))
PY
lint "split: a warning keeps" 0 "$tmp/split.pipe"
check "split: the pipeline still checks" grep -q "split.pipe: ok" "$tmp/out"
# Four unsplit backwards are named, then "..."; the warning points at the first (B7.1).
col=$(($(sed -n 4p "$tmp/split.pipe" | grep -ob ' B7\.1 ' | cut -d: -f1) + 2))
check "split: located at B7.1, naming four and '...'" grep -qF "split.pipe:4:$col: warning[split]: stage 0 splits 7 of its 12 backwards of this chunk with W but not B7.1, B8.1, B9.1, B10.1, ...: those compute input and weight gradients together (a missing W?)" "$tmp/err"
check "split: chunk 0 has no W, so no warning for it" test "$(grep -c 'warning\[split\]' "$tmp/err")" = 1
lint "split -Werror" 1 -Werror "$tmp/split.pipe"
check "split -Werror: an error" grep -q "error\[split\]: stage 0 splits 7 of its 12 backwards" "$tmp/err"

# --- empty: model tiny (4 layers) over 16 stages -------------------------------------------------
printf 'import "std/schedules.pipe"\nimport "std/models.pipe"\nimport "std/devices.pipe"\npipeline e { stages 16 microbatches 16 model tiny device cpu schedule onef1b }\n' >"$tmp/empty.pipe"
lint "empty: a warning keeps" 0 "$tmp/empty.pipe"
check "empty: counts and lists eight, then '...'" grep -qF "warning[empty]: 12 of 16 virtual stages get no layers that take time from model 'tiny' (4 layers for 16 virtual stages): 0 (stage 0, chunk 0), 1 (stage 1, chunk 0), 2 (stage 2, chunk 0), 3 (stage 3, chunk 0), 4 (stage 4, chunk 0), 5 (stage 5, chunk 0), 6 (stage 6, chunk 0), 7 (stage 7, chunk 0), ...; their F and B take 0 ms" "$tmp/err"
"$P" sim --json "$tmp/empty.pipe" 2>/dev/null >"$tmp/j"
check "empty: those stages are idle in the simulation" python3 -c "
import json; d = json.load(open('$tmp/j'))
assert sum(s['busy_ms'] == 0 for s in d['per_stage']) == 12, d['per_stage']
assert all(d['per_stage'][v]['busy_ms'] == 0 for v in range(8))"
lint "empty -Werror" 1 -Werror "$tmp/empty.pipe"
# With an explicit partition, the warning points at it.
printf 'import "std/schedules.pipe"\nimport "std/models.pipe"\nimport "std/devices.pipe"\npipeline e { stages 3 microbatches 2 model tiny device cpu\n  partition [2, 0, 2]\n  schedule onef1b }\n' >"$tmp/part.pipe"
lint "empty, partition [2, 0, 2]" 0 "$tmp/part.pipe"
check "empty, partition [2, 0, 2]: located at the partition" grep -qF "part.pipe:5:3: warning[empty]: 1 of 3 virtual stages get no layers that take time from model 'tiny' (4 layers for 3 virtual stages): 1 (stage 1, chunk 0); their F and B take 0 ms" "$tmp/err"
# A stage whose forward costs nothing but whose backward does is not empty: no warning.
printf 'import "std/schedules.pipe"\nimport "std/models.pipe"\nimport "std/devices.pipe"\npipeline z { stages 2 microbatches 4 model tiny device cpu\n  costs stage 1 { f 0ms }\n  schedule onef1b }\n' >"$tmp/f0.pipe"
lint "f 0ms, b derived" 0 "$tmp/f0.pipe"
check "f 0ms, b derived: no warning" test ! -s "$tmp/err"
check "f 0ms, b derived: ok" grep -q "f0.pipe: ok" "$tmp/out"
finish
