#!/usr/bin/env bash
# t_print_diff.sh - `pipec print` is exact: the cost model stores derived costs at the
# resolution print writes (docs/cost-model.md "Resolution"), so for every example X,
# Y = `pipec print X` simulates byte for byte as X (`sim --json` identical but for
# tokens_per_s and mfu, which need the model print does not write) and `pipec diff X Y`
# finds them the same (exit 0); `diff --metrics` prints the metrics rows only; no table shows -0.000
# (docs/simulator.md).
cd "$(dirname "$0")/.."
. tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A negative zero as a table prints it: "-0", "-0.0", "-0.000", ... not followed by a digit.
negzero='(^|[^0-9.])-0(\.0+)?([^0-9.]|$)'
# absent ERE FILE: no line of FILE matches (one grep, no shell started for the `!`)
absent() { ! grep -qE -- "$1" "$2"; }

for x in examples/*.pipe; do
    n=$(basename "$x" .pipe)
    y="$tmp/$n.pipe"
    if ! "$PIPEC" print "$x" >"$y" 2>"$tmp/err"; then
        bad "$n: print" "$(head -3 "$tmp/err")"
        continue
    fi
    "$PIPEC" diff "$x" "$y" >"$tmp/$n.diff" 2>"$tmp/err"
    rc=$?
    check "$n: diff X (print X) exits 0" test "$rc" = 0
    check "$n: diff says the op order is the same" grep -q '^op order: the same on all' "$tmp/$n.diff"
    # tokens_per_s and mfu need the model, which the explicit form does not carry
    # (docs/spec.md "Explicit form": print writes no model); every other byte must be the same.
    "$PIPEC" sim --json "$x" 2>/dev/null | sed -E 's/, "(tokens_per_s|mfu)": [^,}]*//g' >"$tmp/$n.a.json"
    "$PIPEC" sim --json "$y" 2>/dev/null | sed -E 's/, "(tokens_per_s|mfu)": [^,}]*//g' >"$tmp/$n.b.json"
    check "$n: sim --json of X and of print X byte-identical (but tokens/s, MFU)" cmp -s "$tmp/$n.a.json" "$tmp/$n.b.json"
    check "$n: sim --json has a makespan" grep -q '"makespan_ms": ' "$tmp/$n.a.json"
    # Y simulates as X (above), so the tables are read from Y: X's passes run once less.
    "$PIPEC" sim "$y" >"$tmp/$n.sim" 2>&1
    check "$n: no negative zero in diff" absent "$negzero" "$tmp/$n.diff"
    check "$n: no negative zero in sim" absent "$negzero" "$tmp/$n.sim"
    # --metrics: the two name lines, a blank, the head row, makespan, throughput, bubble
    # ratio and one peak-memory row per stage; nothing else, exit 0.
    # the stage count: the first top-level "stages" of the sim JSON (a number)
    IFS= read -r -d '' js <"$tmp/$n.a.json"; P=x
    [[ $js =~ \"stages\":\ ([0-9]+) ]] && P=${BASH_REMATCH[1]}
    "$PIPEC" diff --metrics "$y" "$y" >"$tmp/$n.m" 2>&1
    rc=$?
    check "$n: diff --metrics exits 0" test "$rc" = 0
    check "$n: diff --metrics prints $((7 + P)) lines" test "$(wc -l <"$tmp/$n.m")" = $((7 + P))
    check "$n: diff --metrics has no per-stage rows or op order" \
        absent '^(stage|op order|---|\+\+\+|@@)' "$tmp/$n.m"
    check "$n: diff --metrics has the peak memory of its last stage" \
        grep -q "^peak mem stage $((P - 1)) " "$tmp/$n.m"
done

# Differences below the printed resolution print as zero, with a sign of +: A makespan
# 3 ms (f 1 ms, b 2 ms), B 2.9999999 ms, so B - A = -1e-7 ms shows as +0.000 and the
# ratio as 1.000, yet the files differ (exit 1).
printf 'pipeline a {\n  stages 1\n  microbatches 1\n  costs { f 1ms b 2ms }\n  stage 0 { F0 B0 }\n}\n' >"$tmp/a.pipe"
sed 's/f 1ms/f 0.9999999ms/' "$tmp/a.pipe" >"$tmp/b.pipe"
"$PIPEC_ASAN" diff "$tmp/a.pipe" "$tmp/b.pipe" >"$tmp/ab.diff" 2>&1
check "tiny difference: diff exits 1" test $? = 1
check "tiny difference: makespan row reads +0.000 and 1.000" \
    grep -qE '^makespan ms +3\.000 +3\.000 +\+0\.000 +1\.000$' "$tmp/ab.diff"
check "tiny difference: no negative zero" bash -c "! grep -qE -- '$negzero' '$tmp/ab.diff'"
"$PIPEC_ASAN" diff --metrics "$tmp/a.pipe" "$tmp/b.pipe" >"$tmp/abm.diff" 2>&1
check "tiny difference: diff --metrics exits 1" test $? = 1
# Only the op order differs (one stage, no activation bytes: 4 ms, no idle, peak 0 either
# way): the full diff exits 1, --metrics, which does not compare op orders, 0.
printf 'pipeline a {\n  stages 1\n  microbatches 2\n  costs { f 1ms b 1ms }\n  stage 0 { F0 F1 B0 B1 }\n}\n' >"$tmp/o1.pipe"
sed 's/F0 F1 B0 B1/F0 B0 F1 B1/' "$tmp/o1.pipe" >"$tmp/o2.pipe"
"$PIPEC_ASAN" diff "$tmp/o1.pipe" "$tmp/o2.pipe" >/dev/null 2>&1
check "op order only: diff exits 1" test $? = 1
"$PIPEC_ASAN" diff --metrics "$tmp/o1.pipe" "$tmp/o2.pipe" >/dev/null 2>&1
check "op order only: diff --metrics exits 0" test $? = 0
"$PIPEC_ASAN" diff --metrics --json "$tmp/o1.pipe" "$tmp/o2.pipe" >/dev/null 2>"$tmp/err"
check "diff --metrics --json: usage error (exit 2)" test $? = 2
finish
