#!/usr/bin/env bash
# t_workspace.sh - the workspace every rank keeps above its arena (compiler/plans/arena_plan.h
# arena_workspace, docs/runtime.md "Static memory planning"): the generated program
# reserves it in the rank's arena allocation, and the layer code's forward temporaries
# come from it, so the walk, the arena plan and the runtime count the same bytes.
#
# Expected values are hand-derived:
#   - demo.pipe (the `tiny` residual-MLP model, B = 4, T = seq = 64, C = 64, four
#     ranks): stage 0 recomputes, so its F keeps only the checkpoint and runs one
#     block's temporaries (runtime/models/mlp_layout.h mlp_scratch_floats, not the head):
#     2 BTC + 2 BT + 2 BT(4C) = 32768 + 512 + 131072 = 164352 floats = 657408 bytes;
#     stages 1-3 have no R: 0.
#   - gpt_tiny.pipe: stage 0 recomputes; a gpt F that keeps only its checkpoint runs in
#     the slice's whole region, so the workspace is stage 0's act region bytes (the
#     generated vstage table's `.act`); the other stages 0.
#   - the synthetic workload: the cost model's `work` (here written by hand, 1 MiB on
#     rank 1), the largest of the rank's ops, unscaled for an arena this small.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PIPEC_STDLIB="${PIPEC_STDLIB:-$PWD/stdlib}"

# ws FILE ARGS...: "arena:workspace" per stage of `run --json`, one line each
ws() {
    local f=$1
    shift
    "$PIPEC" run "$f" --iters 2 --json --cache "$tmp/cache" "$@" 2>"$tmp/err" >"$tmp/out" || return 1
    python3 -c '
import json, sys
t = open(sys.argv[1]).read()
d = json.loads(t[t.index("{"):])
for s in d["per_stage"]:
    print(s["workspace_bytes"])
print("grad", d.get("max_grad_error"))' "$tmp/out"
}

ws examples/demo.pipe --check >"$tmp/demo" || bad "demo runs" "$(tail -3 "$tmp/err")"
check "demo: stage 0 (R) reserves one block's temporaries" test "$(sed -n 1p "$tmp/demo")" = 657408
check "demo: stages without R reserve none" test "$(sed -n 2,4p "$tmp/demo" | tr '\n' ' ')" = "0 0 0 "
check "demo: gradients match the reference with F in the workspace" \
    test "$(sed -n 5p "$tmp/demo")" = "grad 0" -o "$(sed -n 5p "$tmp/demo")" = "grad 0.0"

ws examples/gpt_tiny.pipe --check >"$tmp/gpt" || bad "gpt_tiny runs" "$(tail -3 "$tmp/err")"
"$PIPEC" emit examples/gpt_tiny.pipe -o "$tmp/emit" >/dev/null 2>&1
act0=$(grep -ho '\.act = [0-9]*' "$tmp"/emit/*.c 2>/dev/null | head -1 | grep -o '[0-9]*$')
check "gpt_tiny: the vstage table gives stage 0's act" test -n "$act0"
check "gpt_tiny: stage 0 (R) reserves its whole act region" test "$(sed -n 1p "$tmp/gpt")" = "$act0"
check "gpt_tiny: stages without R reserve none" test "$(sed -n 2,4p "$tmp/gpt" | tr '\n' ' ')" = "0 0 0 "
check "gpt_tiny: gradients match the reference" \
    test "$(sed -n 5p "$tmp/gpt")" = "grad 0" -o "$(sed -n 5p "$tmp/gpt")" = "grad 0.0"

cat >"$tmp/syn.pipe" <<'EOF2'
pipeline syn {
  stages 2  microbatches 2
  costs { f 1ms  b 1ms  act 1MiB }
  costs stage 1 { work 1MiB }
  stage 0 { F0 F1 B0 B1 }
  stage 1 { F0 B0 F1 B1 }
}
EOF2
ws "$tmp/syn.pipe" --workload synthetic >"$tmp/syn" || bad "synthetic runs" "$(tail -3 "$tmp/err")"
check "synthetic: rank 0 has no working memory" test "$(sed -n 1p "$tmp/syn")" = 0
check "synthetic: rank 1 reserves its 1 MiB of work" test "$(sed -n 2p "$tmp/syn")" = 1048576
# check --mem's table for the runtime's region sizes adds the workspace the program
# reserves (not the cost model's `work`): demo rank 0's total is weights + arena +
# 657408 bytes, within the table's rounding (one decimal of each printed unit).
"$PIPEC" check --mem examples/demo.pipe >"$tmp/mem" 2>&1
check "check --mem: the runtime table's total holds the workspace" python3 -c '
import re, sys
u = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
def b(x, y): return float(x) * u[y]
t = open(sys.argv[1]).read().split("real region sizes")[1]
row = re.search(r"^\s+0\s+([\d.]+) (\w+)\s+[\d.]+ \w+\s+[\d.]+\s+([\d.]+) (\w+)\s+([\d.]+) (\w+)", t, re.M)
a, w, tot = b(*row.group(1, 2)), b(*row.group(3, 4)), b(*row.group(5, 6))
slack = 0.05 * (u[row.group(2)] + u[row.group(4)] + u[row.group(6)])
sys.exit(0 if abs(tot - (a + w + 657408)) <= slack else 1)' "$tmp/mem"
finish
