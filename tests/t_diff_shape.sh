#!/usr/bin/env bash
# t_diff_shape.sh - `pipec diff` of two pipelines of different shapes (exit status as
# diff(1): 0 the same, 1 different, 2 trouble; docs/design-notes.md): 1F1B over 2 and over
# 3 stages, 2 micro-batches, f = 1 ms, b = 2 ms, whose makespans are (M + P - 1)(f + b).
cd "$(dirname "$0")/.."
. tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'pipeline two {\n  stages 2  microbatches 2\n  costs { f 1ms b 2ms }\n  stage 0 { F0 F1 B0 B1 }\n  stage 1 { F0 B0 F1 B1 }\n}\n' >"$tmp/two.pipe"
printf 'pipeline three {\n  stages 3  microbatches 2\n  costs { f 1ms b 2ms }\n  stage 0 { F0 F1 B0 B1 }\n  stage 1 { F0 F1 B0 B1 }\n  stage 2 { F0 B0 F1 B1 }\n}\n' >"$tmp/three.pipe"

"$PIPEC_ASAN" diff --json "$tmp/two.pipe" "$tmp/three.pipe" >"$tmp/d.json" 2>"$tmp/err"
check "diff --json, shapes differ: exit 1" test $? = 1
check "diff --json: shape_differs, stages 1 and 2 differ, makespans 9 and 12 ms" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(not (d["shape_differs"] is True and d["stages_differ"] == [1, 2] and d["differ"] is True
              and d["a"]["makespan_ms"] == 9 and d["b"]["makespan_ms"] == 12
              and d["a"]["stages"] == 2 and d["b"]["stages"] == 3))' "$tmp/d.json"
"$PIPEC_ASAN" diff "$tmp/two.pipe" "$tmp/three.pipe" >"$tmp/d.txt" 2>"$tmp/err"
check "diff, shapes differ: exit 1" test $? = 1
check "diff: a note names the shapes" grep -qxF "note: A and B differ in shape: stages 2 vs 3" "$tmp/d.txt"
check "diff: the stage only B has shows '-' for A" \
    grep -qE '^ +2 +- +6\.000 +- +6\.000 +- +0\.000 +- +0\.000$' "$tmp/d.txt"
check "diff: the makespan row" grep -qE '^makespan ms +9\.000 +12\.000 +\+3\.000 +1\.333$' "$tmp/d.txt"

# trouble in either file: exit 2, its located error, nothing on stdout
echo 'pipeline x { stages 0 }' >"$tmp/bad.pipe"
for order in "two bad" "bad two"; do
    set -- $order
    "$PIPEC_ASAN" diff "$tmp/$1.pipe" "$tmp/$2.pipe" >"$tmp/out" 2>"$tmp/err"
    check "diff $order: exit 2" test $? = 2
    check "diff $order: the bad file's located error" grep -qF "bad.pipe:1:21: error[value]: 'stages' must be at least 1 (got 0)" "$tmp/err"
    check "diff $order: nothing on stdout" test ! -s "$tmp/out"
done
finish
