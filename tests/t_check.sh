#!/usr/bin/env bash
# t_check.sh - `pipec check` on the golden cases of tests/golden/check/.
#
# Each NAME.pipe carries its expectation in comments: `# expect-ok` (exit 0, nothing on
# stderr but the summary) or one or more `# expect: NAME.pipe:LINE:COL: ...` lines (exit
# 1, every line present in stderr). Checks run under the sanitizer build, in the folder
# of the file so that paths print as NAME.pipe. Then `check --mem` prints the table.
cd "$(dirname "$0")/.."
. tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case $PIPEC_ASAN in /*) ;; */*) PIPEC_ASAN=$PWD/$PIPEC_ASAN ;; esac

for f in tests/golden/check/*.pipe; do
    name=check/$(basename "$f")
    ( cd "$(dirname "$f")" && timeout 20 "$PIPEC_ASAN" check "$(basename "$f")" ) \
        >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if grep -q 'Sanitizer\|runtime error' "$tmp/err"; then
        bad "$name" "sanitizer report"; head -n 20 "$tmp/err"; continue
    fi
    if grep -q '^# expect-ok' "$f"; then
        if [ $rc = 0 ]; then ok; else bad "$name" "exit $rc, expected 0"; head -n 10 "$tmp/err"; fi
        continue
    fi
    if ! grep -q '^# expect: ' "$f"; then
        bad "$name" "no # expect line"; continue
    fi
    if [ $rc != 1 ]; then
        bad "$name" "exit $rc, expected 1"; head -n 10 "$tmp/err"; continue
    fi
    missing=0
    while IFS= read -r line; do
        want=${line#\# expect: }
        if ! grep -qF -- "$want" "$tmp/err"; then
            bad "$name" "missing: $want"; missing=1
        fi
    done < <(grep '^# expect: ' "$f")
    if [ $missing = 0 ]; then ok; else head -n 20 "$tmp/err"; fi
done

# check --mem prints the per-stage table even when everything fits: stage 0 of
# mem_at_budget peaks at 4 + 4 x 8 = 36 GiB with 0 B of headroom, stage 3 at 12 GiB.
if "$PIPEC_ASAN" check --mem tests/golden/check/mem_at_budget.pipe >"$tmp/out" 2>"$tmp/err"; then
    if grep -q '^ *0 *36.0 GiB *36.0 GiB *0 B *4.0 GiB *32.0 GiB *F3 (4)' "$tmp/out" "$tmp/err" &&
       grep -q '^ *3 *12.0 GiB *36.0 GiB *24.0 GiB *4.0 GiB *8.0 GiB *F0 (1)' "$tmp/out" "$tmp/err"; then
        ok
    else
        bad "check --mem table"; cat "$tmp/out" "$tmp/err" | head -n 12
    fi
else
    bad "check --mem exit status"; head -n 10 "$tmp/err"
fi
# Without a budget, --mem prints "-" for the budget and the headroom; stage 0 of this
# 1F1B (P = 2, M = 2) holds both micro-batches' act (2 GiB) at F1, stage 1 one at F0.
printf 'pipeline nb { stages 2 microbatches 2 costs { f 1ms b 2ms act 1GiB weights 512MiB }\n stage 0 { F0 F1 B0 B1 }\n stage 1 { F0 B0 F1 B1 } }\n' >"$tmp/nb.pipe"
"$PIPEC_ASAN" check --mem "$tmp/nb.pipe" >"$tmp/out" 2>"$tmp/err"
check "check --mem without a budget: exit 0" test $? = 0
check "check --mem without a budget: stage 0 row" grep -qE '^ +0 +2\.5 GiB +- +- +512\.0 MiB +2\.0 GiB +F1 \(2\)$' "$tmp/out"
check "check --mem without a budget: stage 1 row" grep -qE '^ +1 +1\.5 GiB +- +- +512\.0 MiB +1\.0 GiB +F0 \(1\)$' "$tmp/out"
check "check --mem without a budget: arena rows without a budget" grep -qE '^ +0 +2\.0 GiB +2\.0 GiB +1\.000 +512\.0 MiB +2\.5 GiB +-$' "$tmp/out"
# --mem also plans the arena with the workload's real region sizes when `pipec run` can
# run the model: mlp, gpt or llama, named.
for f in demo:mlp gpt_tiny:gpt llama_tiny:llama; do
    "$PIPEC_ASAN" check --mem "examples/${f%%:*}.pipe" >"$tmp/out" 2>"$tmp/err"
    check "check --mem ${f%%:*}: exit 0" test $? = 0
    check "check --mem ${f%%:*}: the ${f##*:} workload's arena" grep -qx "  sizes: the ${f##*:} workload's real region sizes (the arena \`pipec run\` allocates; weights are the cost model's)" "$tmp/out"
    check "check --mem ${f%%:*}: two arena tables" test "$(grep -c '^arena plan' "$tmp/out")" = 2
done
# -m and -q are --mem and --quiet: the tables, and no "ok" line.
"$PIPEC_ASAN" check -m -q examples/demo.pipe >"$tmp/out" 2>&1
check "check -m -q: tables" grep -q '^arena plan' "$tmp/out"
check "check -m -q: no ok line" bash -c "! grep -q ': ok' '$tmp/out'"
# Only the cost model's table when the workload cannot run the model.
"$PIPEC_ASAN" check --mem examples/llama2_13b_1f1b.pipe >"$tmp/out" 2>&1
check "check --mem, a model too large to run: one arena table" test "$(grep -c '^arena plan' "$tmp/out")" = 1
# `recompute stages` spelled all, as one stage, or as a range: the same directives.
for form in "all|0..=1" "1|1..=1" "0|0..1"; do
    for f in "${form%%|*}" "${form##*|}"; do
        printf 'pipeline p { stages 2 microbatches 2 costs { f 1ms b 2ms r 1ms act 1GiB ckpt 0 } recompute stages %s policy full\n stage 0 { F0 F1 B0 B1 }\n stage 1 { F0 B0 F1 B1 } }\n' "$f" >"$tmp/rs.pipe"
        "$PIPEC_ASAN" print "$tmp/rs.pipe" >"$tmp/rs_$f.out" 2>&1
    done
    check "recompute stages ${form%%|*} is ${form##*|}" cmp -s "$tmp/rs_${form%%|*}.out" "$tmp/rs_${form##*|}.out"
done
check "recompute stages all: R ops on both stages" test "$(grep -c ' R0 ' "$tmp/rs_all.out")" = 2
check "recompute stages 1: R ops on stage 1 only" test "$(grep -c ' R0 ' "$tmp/rs_1.out")" = 1
# A dep naming an op that its stage lacks points at that stage's block ("stage N is
# here"); when the stage has no block at all, there is nothing to point at and no note.
printf 'pipeline ns {\n  stages 2  microbatches 1\n  stage 0 { F0 B0 }\n  stage 1 { F0 B0 }\n  dep 1:W0 -> 0:B0\n}\n' >"$tmp/ns.pipe"
"$PIPEC_ASAN" check "$tmp/ns.pipe" >"$tmp/out" 2>"$tmp/err"
check "dep to an absent op: exit 1" test $? = 1
check "dep to an absent op: the error" grep -qF 'ns.pipe:5:3: error[placement]: dep names 1:W0, but stage 1 has no such op' "$tmp/err"
check "dep to an absent op: the stage block noted" grep -qF 'ns.pipe:4:3: note: stage 1 is here' "$tmp/err"
printf 'pipeline ns {\n  stages 2  microbatches 1\n  stage 0 { F0 B0 }\n  dep 1:F0 -> 0:B0\n}\n' >"$tmp/ns.pipe"
"$PIPEC_ASAN" check "$tmp/ns.pipe" >"$tmp/out" 2>"$tmp/err"
check "dep into a stage without a block: exit 1" test $? = 1
check "dep into a stage without a block: the error" grep -qF 'ns.pipe:4:3: error[placement]: dep names 1:F0, but stage 1 has no such op' "$tmp/err"
check "dep into a stage without a block: no note" test "$(grep -c 'is here' "$tmp/err")" = 0

finish
