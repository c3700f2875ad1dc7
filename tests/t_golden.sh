#!/usr/bin/env bash
# t_golden.sh - `pipec print` against hand-written expectations, and its idempotence.
#
# tests/golden/print/NAME.pipe is an input and NAME.expected the print written by hand
# (the comments in each input say how). Then print(parse(print(x))) == print(x) byte for
# byte for every golden input, every examples/*.pipe and stdlib schedule expansions.
cd "$(dirname "$0")/.."
. tests/lib.sh
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}  # the sanitizer build lives in build/asan/
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# idempotent NAME FILE [PIPEC]: prints FILE, prints the print, compares (with the
# sanitizer build unless PIPEC is given).
idempotent() {
    local name=$1 file=$2 p=${3:-$PIPEC_ASAN}
    if ! "$p" print "$file" >"$tmp/a.pipe" 2>"$tmp/a.err"; then
        bad "$name: print" "$(head -n 5 "$tmp/a.err")"
        return
    fi
    if ! "$p" print "$tmp/a.pipe" >"$tmp/b.pipe" 2>"$tmp/b.err"; then
        bad "$name: print of the print" "$(head -n 5 "$tmp/b.err")"
        return
    fi
    if cmp -s "$tmp/a.pipe" "$tmp/b.pipe"; then
        ok
    else
        bad "$name: print(parse(print(x))) differs from print(x)"
        diff -u "$tmp/a.pipe" "$tmp/b.pipe" | head -n 30
    fi
}

# --- golden prints ---------------------------------------------------------------------
for in in tests/golden/print/*.pipe; do
    name=golden/$(basename "$in" .pipe)
    exp=${in%.pipe}.expected
    if [ ! -f "$exp" ]; then
        bad "$name" "no .expected beside it"
        continue
    fi
    "$PIPEC_ASAN" print "$in" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc != 0 ]; then
        bad "$name" "exit $rc: $(head -n 5 "$tmp/err")"
    elif [ -s "$tmp/err" ]; then
        bad "$name" "unexpected stderr: $(head -n 5 "$tmp/err")"
    elif ! cmp -s "$exp" "$tmp/out"; then
        bad "$name" "print differs from $exp"
        diff -u "$exp" "$tmp/out"
    else
        ok
    fi
    idempotent "$name" "$in"
done

# --- examples ----------------------------------------------------------------------------
# The six Obscura examples of 23B and 28B take 2.5 to 5 CPU s each under the sanitizers
# (0.2 s without; their obscura pass allocates much): `make test` prints them with the
# plain build, `make test-full` with the sanitizers.
for in in examples/*.pipe; do
    [ -e "$in" ] || continue
    p=$PIPEC_ASAN
    case $in in examples/obscura_llama2_2[38]b_gb*.pipe) test_full || p=$PIPEC ;; esac
    idempotent "examples/$(basename "$in")" "$in" "$p"
done

# --- stdlib schedule expansions ------------------------------------------------------------
# NAME P M V: only where the template is defined (interleaved needs M % P == 0).
if [ -f stdlib/schedules.pipe ]; then
    while read -r sched P M V; do
        f=$tmp/$sched-$P-$M-$V.pipe
        cat >"$f" <<EOF
import "std/schedules.pipe"
pipeline ${sched}_$P {
  stages $P microbatches $M chunks $V
  schedule $sched
  costs { f 1ms b 2ms w 0.5ms }
}
EOF
        idempotent "stdlib $sched P=$P M=$M V=$V" "$f"
    done <<'EOF'
gpipe 4 8 1
onef1b 4 8 1
onef1b 3 5 1
interleaved 4 8 2
interleaved 2 4 3
zbh1 4 8 1
eager1f1b 4 8 1
zbh1 3 6 1
tpipe 4 8 2
EOF
else
    skip "stdlib expansions" "stdlib/schedules.pipe not there yet"
fi

# --- one transformation, three spellings ----------------------------------------------------
# `apply recompute(...)`, the `recompute` directive and `pipec opt --pass` on the same
# schedule print the same bytes (the golden apply_recompute.expected).
exp=tests/golden/print/apply_recompute.expected
grep -v '^ *apply ' tests/golden/print/apply_recompute.pipe >"$tmp/plain.pipe"
sed 's/^ *apply recompute(stages=0..=0, policy=full)/  recompute stages 0..=0 policy full/' \
    tests/golden/print/apply_recompute.pipe >"$tmp/directive.pipe"
"$PIPEC_ASAN" print "$tmp/directive.pipe" >"$tmp/out" 2>"$tmp/err"
check "recompute directive prints like apply recompute" cmp -s "$exp" "$tmp/out"
"$PIPEC_ASAN" opt "$tmp/plain.pipe" --pass 'recompute(stages=0..=0, policy=full)' >"$tmp/out" 2>"$tmp/err"
check "opt --pass recompute prints like apply recompute" cmp -s "$exp" "$tmp/out"
"$PIPEC_ASAN" opt "$tmp/plain.pipe" --pass 'recompute(stages=0..=0, policy=full)' -o "$tmp/o.pipe" >"$tmp/out" 2>&1
check "opt -o writes the same" cmp -s "$exp" "$tmp/o.pipe"
"$PIPEC_ASAN" opt "$tmp/plain.pipe" -p 'recompute(stages=0, policy=full)' -p 'recompute(stages=0, policy=none)' \
    >"$tmp/out" 2>"$tmp/err"
check "opt passes run in order (policy none removes the R ops again)" test "$(grep -c 'R[0-9]' "$tmp/out")" = 0
"$PIPEC_ASAN" print "$tmp/plain.pipe" >"$tmp/plainprint" 2>&1
check "opt full then none gives back the plain print" cmp -s "$tmp/plainprint" "$tmp/out"

# --- exit codes ------------------------------------------------------------------------------
"$PIPEC_ASAN" print >/dev/null 2>"$tmp/err"
check "print without a file exits 2" test $? = 2
"$PIPEC_ASAN" print tests/golden/print/minimal.pipe tests/golden/print/wrap.pipe >/dev/null 2>&1
check "print with two files exits 2" test $? = 2
printf 'pipeline bad { stages 0 microbatches 1 }\n' >"$tmp/bad.pipe"
"$PIPEC_ASAN" print "$tmp/bad.pipe" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "print of an invalid pipeline exits 1" test $rc = 1
check "print of an invalid pipeline prints nothing on stdout" test ! -s "$tmp/out"
check "print of an invalid pipeline explains on stderr" grep -q "bad.pipe:1:[0-9]*: error\[" "$tmp/err"
printf 'pipeline gap { stages 2 microbatches 1 stage 0 { F0 B0 } stage 1 { F0 } }\n' >"$tmp/gap.pipe"
"$PIPEC_ASAN" print "$tmp/gap.pipe" >"$tmp/out" 2>"$tmp/err"
check "print of an incomplete schedule exits 1" test $? = 1
check "print of an incomplete schedule reports missing" grep -q "error\[missing\]" "$tmp/err"

# -o writes the same bytes as stdout.
"$PIPEC_ASAN" print tests/golden/print/wrap.pipe -o "$tmp/o.pipe" >"$tmp/stdout" 2>"$tmp/err"
check "print -o exits 0" test $? = 0
check "print -o writes nothing on stdout" test ! -s "$tmp/stdout"
check "print -o writes the print" cmp -s "$tmp/o.pipe" tests/golden/print/wrap.expected

# Derived costs are printed rounded to 1 ns and whole bytes (no float noise such as
# 1.6777216000000001ms); costs the source wrote are printed exactly.
"$PIPEC_ASAN" print examples/demo.pipe >"$tmp/demo.pipe" 2>/dev/null
check "print: derived times at 1 ns" bash -c "! grep -Eq '[0-9]\.[0-9]{7,}ms' '$tmp/demo.pipe'"
check "print: derived times present" grep -q ' f 1.677722ms ' "$tmp/demo.pipe"
check "print: derived sizes whole bytes" bash -c "! grep -Eq '(act|ckpt|weights) [0-9]+\.[0-9]+(B|KiB|MiB|GiB)' '$tmp/demo.pipe'"
printf 'pipeline exact { stages 1 microbatches 1 costs { f 1.23456789ms act 1.5KiB } stage 0 { F0 B0 } }\n' >"$tmp/exact.pipe"
"$PIPEC_ASAN" print "$tmp/exact.pipe" >"$tmp/exact.out"
check "print: written costs exactly" bash -c "grep -qx '    f 1.23456789ms' '$tmp/exact.out' && grep -qx '    act 1536B' '$tmp/exact.out'"

finish
