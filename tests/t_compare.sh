#!/usr/bin/env bash
# t_compare.sh - `--set KEY=VALUE` on check, sim, tune, print (docs/language.md
# "Overriding settings") and `pipec compare` (docs/compare.md): each format, a sweep's
# rows and their order, failing rows, -o, and bad overrides with their exact diagnostics.
#
# Expected figures are closed forms on a 1F1B/GPipe template with uniform costs
# (f = 1 ms, b = 2 ms, P = 4): makespan (M + P - 1)(f + b), bubble ratio
# (P - 1)/(M + P - 1); peaks weights + (in-flight micro-batches) x act, with 1F1B's stage
# 0 holding min(P, M) and GPipe's M. Full-precision numbers are checked against
# `pipec sim --json` of the same point, an independent path through the simulator;
# the lower bound is the makespan on uniform 1F1B and GPipe (both optimal there).
cd "$(dirname "$0")/.."
. tests/lib.sh
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
P=$PIPEC_ASAN
GiB=1073741824

cat >"$tmp/u.pipe" <<'EOF'
import "std/schedules.pipe"
pipeline uni {
  stages 4
  microbatches 8
  memory 12GiB
  costs { f 1ms  b 2ms  w 0ms  r 1ms  act 1GiB  ckpt 0  wact 1GiB  weights 1GiB  p2p 0ms }
  schedule onef1b
}
EOF
U=$tmp/u.pipe

# --- --set on check, sim, print, tune ------------------------------------------------------
out=$("$P" check "$U" --set microbatches=4 2>&1)
check "check --set: the override's shape" test "$out" = "$U: ok: pipeline uni, 4 stages, 4 micro-batches, 1 chunk, 32 ops"
"$P" sim --json "$U" --set microbatches=16 >"$tmp/j" 2>"$tmp/err"
check "sim --set exits 0" test $? = 0
# (16 + 3) x 3 ms = 57 ms; bubble 3/19.
check "sim --set: makespan (M+P-1)(f+b)" grep -q '"microbatches": 16, "chunks": 1, "makespan_ms": 57.0,' "$tmp/j"
check "sim --set: bubble (P-1)/(M+P-1)" python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert abs(r["bubble_ratio"] - 3/19) < 1e-12' "$tmp/j"
"$P" sim --json "$U" --set schedule=gpipe --set microbatches=16 >"$tmp/j" 2>&1
# GPipe holds all 16 micro-batches on stage 0: 1 + 16 GiB.
check "sim --set, two keys: GPipe's stage-0 peak" grep -q "\"stage\": 0, [^}]*\"peak_mem_bytes\": $((17 * GiB))," "$tmp/j"
"$P" sim --json "$U" --set microbatches=2 --set microbatches=16 >"$tmp/j2" 2>&1
check "repeated --set of one key: the last wins" grep -q '"microbatches": 16,' "$tmp/j2"

# print --set is print of the file with the line replaced (edited here with sed).
sed 's/microbatches 8/microbatches 5/; s/onef1b/gpipe/' "$U" >"$tmp/edited.pipe"
"$P" print "$tmp/edited.pipe" | sed 1d >"$tmp/want.print"
"$P" print "$U" --set microbatches=5 --set schedule=gpipe | sed 1d >"$tmp/got.print"
check "print --set equals print of the edited file" cmp -s "$tmp/want.print" "$tmp/got.print"
check "print --set shows the override" grep -q '^  microbatches 5$' "$tmp/got.print"
# A key the file does not set is added: without `memory` the file has no budget.
sed '/memory/d' "$U" >"$tmp/nomem.pipe"
out=$("$P" check "$tmp/nomem.pipe" --set memory=4GiB 2>&1)
check "--set of a key the file lacks: stage 0 over 4 GiB" grep -q 'error\[memory\]: stage 0 needs 5.0 GiB' <<<"$out"
# Overrides apply in place of every line of the key: `apply` lines as a whole.
printf 'import "std/schedules.pipe"\npipeline a { stages 2 microbatches 4 costs { f 1ms b 2ms w 1ms act 1GiB } schedule onef1b apply nosuchpass }\n' >"$tmp/apply.pipe"
check "--set apply replaces the file's apply" "$P" check -q "$tmp/apply.pipe" --set apply=dependency_relaxation

"$P" tune "$U" --set microbatches=4 --top 1 >"$tmp/t" 2>"$tmp/terr"
check "tune --set exits 0" test $? = 0
check "tune --set: the table is of the override" grep -q "^# $U: 4 stages, 4 micro-batches, budget 12.0 GiB" "$tmp/t"
"$P" tune "$U" --set microbatches=4 --top 1 -o "$tmp/best.pipe" >/dev/null 2>&1
check "tune --set -o: the variant keeps the override" grep -q 'microbatches 4' "$tmp/best.pipe"

# --- bad overrides: exact diagnostics --------------------------------------------------------
diag() { # NAME EXPECTED ARGS...: the exact stderr, exit 1, nothing on stdout
    local name=$1 want=$2
    shift 2
    "$P" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ $rc != 1 ]; then bad "$name" "exit $rc, expected 1"
    elif [ -s "$tmp/out" ]; then bad "$name" "wrote to stdout"
    elif [ "$(cat "$tmp/err")" != "$want" ]; then bad "$name" "$(diff <(echo "$want") "$tmp/err")"
    else ok; fi
}
diag "--set stages=0: value at the override" "--set:1:8: error[value]: 'stages' must be at least 1 (got 0)
    stages=0
           ^
$U: 1 error" check "$U" --set stages=0
diag "--set unknown key: name, the keys listed" "--set:1:1: error[name]: unknown setting 'microbatch', did you mean 'microbatches'?
    microbatch=4
    ^
--set:1:1: note: the settings are stages, microbatches, chunks, memory, costs, model, device, partition, tensor_parallel, data_parallel, zero, grad_dtype, expert_parallel, schedule, recompute, apply
    microbatch=4
    ^
$U: 1 error" check "$U" --set microbatch=4
diag "--set without '='" "--set:1:7: error[syntax]: expected '=' and a value: --set KEY=VALUE, as the line \`KEY VALUE\` of a pipeline
    stages
          ^
$U: 1 error" check "$U" --set stages
diag "--set with an empty value" "--set:1:14: error[syntax]: 'microbatches' needs a value: --set microbatches=VALUE
    microbatches=
                 ^
$U: 1 error" check "$U" --set microbatches=
diag "--set: a list outside compare is a syntax error" "--set:1:15: error[syntax]: unexpected ',', expected the end of the --set value
    microbatches=4,8
                  ^
$U: 1 error" check "$U" --set microbatches=4,8
diag "--set schedule: unknown template at the value" "--set:1:10: error[name]: unknown schedule template 'onef1c', did you mean 'onef1b'?
    schedule=onef1c
             ^" sim "$U" --set schedule=onef1c
# An error located in the file gets a note naming the override.
"$P" check "$U" --set memory=3GiB >"$tmp/out" 2>"$tmp/err"
check "--set memory: exit 1" test $? = 1
check "--set memory: the budget's note points at the override" grep -qx -- '--set:1:1: note: the budget is set here' "$tmp/err"
check "--set memory: a note names the override" grep -qx -- '--set:1:1: note: the file was read with this override' "$tmp/err"
check "--set memory: the error is in the file" grep -q "^$U:[0-9]*:[0-9]*: error\[memory\]" "$tmp/err"
# The note names the overrides in effect: not one a later --set of its key replaced.
printf 'pipeline x { stages 2 microbatches 4\n  stage 0 { F0 B0 } stage 1 { F0 B0 } }\n' >"$tmp/two.pipe"
diag "--set: notes name the overrides in effect" "$tmp/two.pipe:2:27: error[value]: stage 1 is out of range (stages 1)
      stage 0 { F0 B0 } stage 1 { F0 B0 } }
                              ^
--set:1:1: note: the file was read with this override
    microbatches=1
    ^
--set:1:1: note: the file was read with this override
    stages=1
    ^
$tmp/two.pipe: 1 error" check "$tmp/two.pipe" --set microbatches=1 --set stages=3 --set stages=1
"$P" print "$U" --set stages=0 -o "$tmp/never.pipe" >/dev/null 2>&1
check "print --set error: no output file" test ! -e "$tmp/never.pipe"

# --- compare: a sweep and its order ------------------------------------------------------------
"$P" compare "$U" --set microbatches=8,16 --set schedule=onef1b,gpipe --format csv >"$tmp/c.csv" 2>"$tmp/err"
check "compare csv exits 0" test $? = 0
check "compare csv: nothing on stderr" test ! -s "$tmp/err"
check "compare csv: a header and 4 rows" test "$(wc -l <"$tmp/c.csv")" = 5
head -n 1 "$tmp/c.csv" | tr , '\n' >"$tmp/cols"
for c in makespan_ms bubble_ratio tokens_per_s mfu lower_bound_ms above_lower_bound overhead_ratio file set name stages microbatches chunks schedule peak_mem_bytes peak_mem_bytes_per_stage fits status; do
    check "compare csv: column $c" grep -qx "$c" "$tmp/cols"
done
col() { awk -F, -v k="$1" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == k) c = i; next } { print $c }' "$tmp/c.csv"; }
check "sweep order: first --set slowest" test "$(col set | tr '\n' ';')" = "microbatches=8 schedule=onef1b;microbatches=8 schedule=gpipe;microbatches=16 schedule=onef1b;microbatches=16 schedule=gpipe;"
check "sweep: M per row" test "$(col microbatches | tr '\n' ' ')" = "8 8 16 16 "
# (M+3) x 3: 33, 33, 57, 57 ms for both schedules.
check "sweep: makespans (M+P-1)(f+b)" test "$(col makespan_ms | tr '\n' ' ')" = "33.0 33.0 57.0 57.0 "
# Stage 0: 1F1B 1 + 4 GiB; GPipe 1 + M GiB (8 fits 12 GiB, 16 does not).
check "sweep: stage-0 peaks" test "$(col peak_mem_bytes | tr '\n' ' ')" = "$((5 * GiB)) $((9 * GiB)) $((5 * GiB)) $((17 * GiB)) "
check "sweep: fits" test "$(col fits | tr '\n' ' ')" = "yes yes yes no "
check "sweep: per-stage peaks of 1F1B" test "$(col peak_mem_bytes_per_stage | head -n 1)" = "$((5 * GiB)) $((4 * GiB)) $((3 * GiB)) $((2 * GiB))"
check "sweep: schedule column" test "$(col schedule | tr '\n' ' ')" = "onef1b gpipe onef1b gpipe "
# 1F1B with uniform costs is optimal: the lower bound is the makespan (docs/simulator.md
# "Metrics"); without recomputation the overhead is the bubble; no model, no tokens/s.
check "sweep: lower bound = makespan on uniform 1F1B and GPipe" test "$(col lower_bound_ms | tr '\n' ' ')" = "33.0 33.0 57.0 57.0 "
check "sweep: 0 above the bound" test "$(col above_lower_bound | tr '\n' ' ')" = "0.0 0.0 0.0 0.0 "
check "sweep: overhead = bubble without recomputation" test "$(col overhead_ratio | tr '\n' ' ')" = "$(col bubble_ratio | tr '\n' ' ')"
check "sweep: no model, no tokens/s or MFU" test "$(col tokens_per_s | tr '\n' ' ')$(col mfu | tr '\n' ' ')" = "        "
check "sweep: status" test "$(col status | tr '\n' ' ')" = "ok ok ok ok "
# bubble_ratio at full precision: what sim --json says for the same point.
want=$("$P" sim --json "$U" --set microbatches=16 | python3 -c 'import json,sys; print(repr(json.load(sys.stdin)["bubble_ratio"]))')
check "csv bubble_ratio is sim --json's, full precision" test "$(col bubble_ratio | sed -n 3p)" = "$want"

# Two files: rows file by file.
"$P" compare "$U" "$tmp/edited.pipe" --set microbatches=4,8 --format csv >"$tmp/c.csv" 2>&1
check "two files x two points: 4 rows" test "$(col file | tr '\n' ' ')" = "$U $U $tmp/edited.pipe $tmp/edited.pipe "
# Commas inside brackets do not split a value (and the CSV field is quoted).
"$P" compare "$U" --set "partition=[1,1,1,1],even" --set "memory=12GiB" --format csv >"$tmp/c2.csv" 2>&1
check "a bracketed list is one point, its CSV field quoted" python3 -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [r["set"] for r in rows] == ["partition=[1,1,1,1] memory=12GiB", "partition=even memory=12GiB"], rows
assert [r["status"] for r in rows] == ["ok", "ok"]' "$tmp/c2.csv"

# --- compare: each format --------------------------------------------------------------------
"$P" compare "$U" --set microbatches=8,16 >"$tmp/c.txt" 2>&1
check "text: header" grep -qE '^file +set +name +P +M +V +schedule and passes +makespan ms +bound ms +above bound +bubble +overhead +peak GiB +peak GiB per stage +fits +tokens/s +MFU +status$' "$tmp/c.txt"
check "text: row M=8" grep -qE "^$U +microbatches=8 +uni +4 +8 +1 +onef1b +33.000 +33.000 +0.0000 +0.2727 +0.2727 +5.00 +5.00 4.00 3.00 2.00 +yes +- +- +ok$" "$tmp/c.txt"
check "text: 3 lines" test "$(wc -l <"$tmp/c.txt")" = 3
"$P" compare "$U" >"$tmp/c.txt" 2>&1
check "text without --set: no set column" grep -qE '^file +name +P ' "$tmp/c.txt"

"$P" compare "$U" --set microbatches=8,16 --format md >"$tmp/c.md" 2>&1
check "md: header row" grep -qx '| file | set | name | P | M | V | schedule and passes | makespan ms | bound ms | above bound | bubble | overhead | peak GiB | peak GiB per stage | fits | tokens/s | MFU | status |' "$tmp/c.md"
check "md: alignment row" grep -qx '|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---|' "$tmp/c.md"
check "md: row M=16" grep -qxF "| $U | microbatches=16 | uni | 4 | 16 | 1 | onef1b | 57.000 | 57.000 | 0.0000 | 0.1579 | 0.1579 | 5.00 | 5.00 4.00 3.00 2.00 | yes | - | - | ok |" "$tmp/c.md"

cp "$U" "$tmp/a_b.pipe"
"$P" compare "$tmp/a_b.pipe" --format latex >"$tmp/c.tex" 2>&1
check "latex: a tabular" test "$(head -n 1 "$tmp/c.tex")" = '\begin{tabular}{llrrrlrrrrrrllrrl}'
check "latex: ends the tabular" test "$(tail -n 1 "$tmp/c.tex")" = '\end{tabular}'
check "latex: header" grep -qxF 'file & name & P & M & V & schedule and passes & makespan ms & bound ms & above bound & bubble & overhead & peak GiB & peak GiB per stage & fits & tokens/s & MFU & status \\' "$tmp/c.tex"
check "latex: _ escaped" grep -qF 'a\_b.pipe & uni & 4 & 8 & 1 & onef1b & 33.000 & 33.000 & 0.0000 & 0.2727 &' "$tmp/c.tex"
if command -v pdflatex >/dev/null 2>&1; then
    { echo '\documentclass{article}\begin{document}'; cat "$tmp/c.tex"; echo '\end{document}'; } >"$tmp/doc.tex"
    check "latex: compiles" sh -c "cd '$tmp' && pdflatex -interaction=nonstopmode doc.tex >/dev/null 2>&1"
else
    skip "latex: compiles" "pdflatex is not installed"
fi

"$P" compare "$U" --set microbatches=8,16 --set schedule=onef1b,gpipe --format json >"$tmp/c.json" 2>&1
check "json: parses, 4 rows, the same fields as csv" python3 - "$tmp/c.json" "$tmp/cols" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
cols = open(sys.argv[2]).read().split()
assert isinstance(rows, list) and len(rows) == 4, rows
for r in rows:
    assert list(r) == cols, (list(r), cols)
assert [r["makespan_ms"] for r in rows] == [33.0, 33.0, 57.0, 57.0]
assert [r["fits"] for r in rows] == [True, True, True, False]
assert rows[3]["peak_mem_bytes_per_stage"][0] == 17 * 2**30
assert rows[2]["bubble_ratio"] == 3 / 19
EOF
"$P" sim --json "$U" --set microbatches=16 --set schedule=gpipe >"$tmp/s.json"
check "json: a row's figures are sim --json's" python3 - "$tmp/c.json" "$tmp/s.json" <<'EOF'
import json, sys
row = json.load(open(sys.argv[1]))[3]
sim = json.load(open(sys.argv[2]))
assert row["makespan_ms"] == sim["makespan_ms"] and row["bubble_ratio"] == sim["bubble_ratio"]
assert row["peak_mem_bytes_per_stage"] == [s["peak_mem_bytes"] for s in sim["per_stage"]]
EOF

# Recomputation is busy time for the bubble ratio, overhead for the overhead ratio.
"$P" compare "$U" --set "recompute=stages 0..=3 policy full" --format json >"$tmp/r.json" 2>&1
"$P" sim --json "$U" --set "recompute=stages 0..=3 policy full" >"$tmp/rs.json" 2>&1
check "recompute: overhead above bubble, both sim --json's" python3 - "$tmp/r.json" "$tmp/rs.json" <<'EOF'
import json, sys
row = json.load(open(sys.argv[1]))[0]
sim = json.load(open(sys.argv[2]))
assert row["schedule"] == "onef1b | recompute 0..=3 full", row["schedule"]
assert row["overhead_ratio"] > row["bubble_ratio"], row
for k in ("makespan_ms", "bubble_ratio", "overhead_ratio", "lower_bound_ms"):
    assert row[k] == sim[k], (k, row[k], sim[k])
assert row["above_lower_bound"] == row["makespan_ms"] / row["lower_bound_ms"] - 1
EOF
# A model and a device: tokens/s and MFU, as sim --json gives them.
L=examples/llama2_13b_1f1b.pipe
"$P" compare "$L" --set microbatches=8 --format json >"$tmp/l.json" 2>&1
"$P" sim --json "$L" --set microbatches=8 >"$tmp/ls.json" 2>&1
check "model and device: tokens/s and MFU are sim --json's" python3 - "$tmp/l.json" "$tmp/ls.json" <<'EOF'
import json, sys
row = json.load(open(sys.argv[1]))[0]
sim = json.load(open(sys.argv[2]))
assert row["tokens_per_s"] > 0 and 0 < row["mfu"] < 1, row
assert row["tokens_per_s"] == sim["tokens_per_s"] and row["mfu"] == sim["mfu"]
EOF

# --- compare: -o, failing rows, usage ----------------------------------------------------------
"$P" compare "$U" --format csv -o "$tmp/o.csv" >"$tmp/out" 2>&1
check "-o: nothing on stdout" test ! -s "$tmp/out"
check "-o: the table" test "$(sed -n 2p "$tmp/o.csv" | cut -d, -f1)" = "$U"
"$P" compare "$U" -o "$tmp/nodir/x.csv" >/dev/null 2>"$tmp/err"
check "-o into a missing folder: exit 1" test $? = 1
check "-o into a missing folder: says so" grep -q "cannot write $tmp/nodir/x.csv" "$tmp/err"
echo keep >"$tmp/keep.csv"
"$P" compare "$U" --set stages=0 -o "$tmp/keep.csv" >/dev/null 2>&1
check "-o: a failing row still writes the whole table" test "$(sed -n 2p "$tmp/keep.csv" | grep -c 'error\[value\]')" = 1
mkdir "$tmp/ro"; chmod 555 "$tmp/ro"
"$P" compare "$U" -o "$tmp/ro/x.csv" >/dev/null 2>&1
rc=$?
if [ "$(id -u)" = 0 ]; then skip "-o into a read-only folder" "root writes anyway"
else check "-o into a read-only folder: exit 1, no file" test $rc = 1 -a ! -e "$tmp/ro/x.csv"; fi

"$P" compare "$U" --set microbatches=8,0,4 --format csv >"$tmp/c.csv" 2>"$tmp/err"
check "a failing point: exit 1" test $? = 1
check "a failing point: every row printed" test "$(col status | tr '\n' ' ')" = "ok error[value] ok "
check "a failing point: unknown figures are empty" test "$(col makespan_ms | tr '\n' ' ')" = "33.0  21.0 "
check "a failing point: the diagnostic at the value's column" test "$(head -n 3 "$tmp/err")" = "--set:1:16: error[value]: 'microbatches' must be at least 1 (got 0)
    microbatches=8,0,4
                   ^"
check "a failing point: the file and point named" grep -qx "pipec compare: $U with microbatches=0: 1 error" "$tmp/err"
"$P" compare "$U" --set microbatches=8,0 --format json >"$tmp/c.json" 2>/dev/null
check "json: a failing row's figures are null" python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))[1]; assert r["makespan_ms"] is None and r["mfu"] is None and r["fits"] is None and r["stages"] is None and r["status"] == "error[value]"' "$tmp/c.json"
printf 'pipeline broken { stages 2 microbatches 1 stage 0 { F0 B0 } stage 1 { F0 } }\n' >"$tmp/broken.pipe"
"$P" compare "$U" "$tmp/broken.pipe" >"$tmp/out" 2>"$tmp/err"
check "a file that fails check: exit 1" test $? = 1
check "a file that fails check: its row says why" grep -qE "^$tmp/broken.pipe .* error\[missing\]$" "$tmp/out"
check "a file that fails check: the good row" grep -qE "^$U .* ok$" "$tmp/out"
check "a file that fails check: its diagnostics" grep -q "^$tmp/broken.pipe:1:[0-9]*: error\[missing\]" "$tmp/err"

"$P" compare "$U" --format xml >"$tmp/out" 2>"$tmp/err"
check "--format xml: usage error" test $? = 2 -a ! -s "$tmp/out"
check "--format xml: says which formats" grep -q "text, csv, md, latex or json" "$tmp/err"
"$P" compare >/dev/null 2>&1
check "compare without files: usage error" test $? = 2
"$P" --help | grep -q '^  compare ' ; check "--help lists compare" test $? = 0
"$P" help compare | grep -q -- '--format F' ; check "help compare: --format" test $? = 0
finish
