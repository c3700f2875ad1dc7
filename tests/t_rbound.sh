#!/usr/bin/env bash
# t_rbound.sh - recomputation bound to the backward (docs/semantics.md section 2,
# "Recomputation bound to the backward"; docs/passes.md "Bound and decoupled
# recomputation").
#
# 1. Timing, worked by hand on P = 2, M = 2, f = 1, b = 2, r = 1, p2p = 0.5 ms, 1F1B
#    with stage 0 recomputed:
#      stage 1: F0 1.5-2.5, B0 2.5-4.5, F1 4.5-5.5, B1 5.5-7.5
#      directive (bound): R0 waits for stage 1's B0 + p2p = 5.0, runs 5-6, B0 6-8;
#        R1 waits for B1 + p2p = 8.0, runs 8-9, B1 9-11: makespan 11
#      hand-written R without a dep line (the explicit form): R0 runs 2-3 right after
#        F1; B0 waits for 4.5 + 0.5 = 5, runs 5-7; R1 7-8; B1 8-10: makespan 10
#    read off `sim --trace` (each R's start) and `sim --json` (the makespan).
# 2. `print` writes the binding as `dep` lines (one per R of stage 0, none for the last
#    stage), the printed file simulates the same and prints the same (idempotent);
#    `recompute ... policy none` removes the R ops and their lines.
# 3. vshape: the binding of virtual stage P-1 names B(P, m) on the same rank; it checks.
# 4. Lynx's RO placement decouples: an R turned RO loses its line.
# 5. `pipec run --check` on a pipeline with `recompute stages all policy full`: the
#    generated runtime obeys the cross-rank lines and the gradients match.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# start_of TRACE NAME STAGE: the start (ms) of op NAME on STAGE's compute stream
start_of() {
    python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))
for e in t["traceEvents"]:
    if e.get("ph") == "X" and e["name"] == sys.argv[2] and e["pid"] == int(sys.argv[3]):
        print(e["ts"] / 1000.0)
        break' "$@"
}
ms() { "$PIPEC" sim --json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["makespan_ms"])'; }
quiet() { "$@" >/dev/null 2>&1; }
eq() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a == b) }'; }

head='pipeline t {
  stages 2 microbatches 2
  costs { f 1ms b 2ms r 1ms act 4GiB ckpt 1GiB p2p 0.5ms }'
printf '%s\n  stage 0 { F0 F1 B0 B1 }\n  stage 1 { F0 B0 F1 B1 }\n  recompute stages 0 policy full\n}\n' \
    "$head" >"$tmp/bound.pipe"
printf '%s\n  stage 0 { F0 F1 R0 B0 R1 B1 }\n  stage 1 { F0 B0 F1 B1 }\n}\n' \
    "$head" >"$tmp/free.pipe"

# 1. timing
for v in bound free; do
    check "$v checks" quiet "$PIPEC_ASAN" check "$tmp/$v.pipe"
    "$PIPEC_ASAN" sim --trace "$tmp/$v.json" "$tmp/$v.pipe" >/dev/null 2>"$tmp/err" ||
        bad "$v sim --trace" "$(cat "$tmp/err")"
done
check "bound R0 starts when B0 of stage 1 ends + p2p (5.0)" eq "$(start_of "$tmp/bound.json" R0 0)" 5
check "bound R1 starts at 8.0 (B1 of stage 1 ends at 7.5)" eq "$(start_of "$tmp/bound.json" R1 0)" 8
check "bound makespan 11" eq "$(ms "$tmp/bound.pipe")" 11
check "hand-written R0 starts right after F1 (2.0)" eq "$(start_of "$tmp/free.json" R0 0)" 2
check "hand-written R1 starts after B0 (7.0), before B1 of stage 1 ends" \
    eq "$(start_of "$tmp/free.json" R1 0)" 7
check "hand-written makespan 10" eq "$(ms "$tmp/free.pipe")" 10

# 2. print
"$PIPEC_ASAN" print "$tmp/bound.pipe" >"$tmp/p1.pipe" 2>"$tmp/err" || bad "print" "$(cat "$tmp/err")"
check "print lists R before each B of stage 0" grep -q 'stage 0 { F0 F1 R0 B0 R1 B1 }' "$tmp/p1.pipe"
check "print writes dep 1:B0 -> 0:R0" grep -qx '  dep 1:B0 -> 0:R0' "$tmp/p1.pipe"
check "print writes dep 1:B1 -> 0:R1" grep -qx '  dep 1:B1 -> 0:R1' "$tmp/p1.pipe"
check "exactly two dep lines" test "$(grep -c '^  dep ' "$tmp/p1.pipe")" = 2
"$PIPEC_ASAN" print "$tmp/p1.pipe" >"$tmp/p2.pipe" 2>"$tmp/err"
check "print is idempotent" cmp -s "$tmp/p1.pipe" "$tmp/p2.pipe"
check "the printed file simulates the same" eq "$(ms "$tmp/p1.pipe")" 11
# the last stage recomputed: no downstream backward, no line
sed 's/recompute stages 0 policy full/recompute stages all policy full/' "$tmp/bound.pipe" >"$tmp/all.pipe"
"$PIPEC_ASAN" print "$tmp/all.pipe" >"$tmp/pall.pipe" 2>"$tmp/err"
check "stages all: lines only for stage 0" test "$(grep -c '^  dep ' "$tmp/pall.pipe")" = 2
check "stages all: stage 1 recomputes" grep -q 'stage 1 { F0 R0 B0 F1 R1 B1 }' "$tmp/pall.pipe"
# policy none removes the R ops and their lines
"$PIPEC_ASAN" opt "$tmp/bound.pipe" --pass 'recompute(stages=0, policy=none)' -o "$tmp/none.pipe" 2>"$tmp/err" ||
    bad "recompute policy=none" "$(cat "$tmp/err")"
check "policy none: no R, no dep lines" sh -c "! grep -qE 'R[0-9]|^  dep ' '$tmp/none.pipe'"
check "policy none: checks" quiet "$PIPEC_ASAN" check "$tmp/none.pipe"

# 3. vshape: virtual stages 1 and 2 both live on rank 1
cat >"$tmp/v.pipe" <<'EOF'
import "std/schedules.pipe"
pipeline v {
  stages 2 microbatches 4 chunks 2 vshape
  costs { f 1ms b 2ms r 1ms act 1GiB ckpt 64MiB }
  schedule zbv
  recompute stages all policy full
}
EOF
if "$PIPEC_ASAN" print "$tmp/v.pipe" >"$tmp/pv.pipe" 2>"$tmp/err"; then
    check "vshape: same-rank line 1:B0.1 -> 1:R0" grep -qx '  dep 1:B0.1 -> 1:R0' "$tmp/pv.pipe"
    check "vshape: 3 x 4 lines (virtual stages 0-2)" test "$(grep -c '^  dep .*R' "$tmp/pv.pipe")" = 12
    check "vshape: checks" quiet "$PIPEC_ASAN" check "$tmp/v.pipe"
else
    bad "vshape print" "$(cat "$tmp/err")"
fi

# 4. Lynx: an R that becomes an RO loses its binding; an R that stays keeps it
cat >"$tmp/l.pipe" <<'EOF'
import "std/schedules.pipe"
pipeline l {
  stages 2 microbatches 4
  costs { f 1ms b 2ms r 1ms fcomm 0.5ms bcomm 1ms act 1GiB ckpt 64MiB }
  schedule onef1b
  recompute stages all policy full
  apply lynx_overlap
}
EOF
if "$PIPEC_ASAN" print "$tmp/l.pipe" >"$tmp/pl.pipe" 2>"$tmp/err"; then
    python3 - "$tmp/pl.pipe" >"$tmp/lres" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
s0 = re.search(r"stage 0 \{([^}]*)\}", text).group(1).split()
deps = set(re.findall(r"dep 1:B(\d+) -> 0:R(\d+)", text))
ro = [o for o in s0 if o.startswith("RO")]
r = [o for o in s0 if re.fullmatch(r"R\d+", o)]
ok = bool(ro) and all((m[1:], m[1:]) in deps for m in r) and len(deps) == len(r) \
     and not re.search(r"-> 0:RO", text)
print("ok" if ok else "bad ro=%s r=%s deps=%s" % (ro, r, sorted(deps)))
EOF
    check "lynx_overlap: ROs unbound, remaining Rs bound ($(cat "$tmp/lres"))" grep -qx ok "$tmp/lres"
    check "lynx_overlap result checks" quiet "$PIPEC_ASAN" check "$tmp/l.pipe"
else
    bad "lynx print" "$(cat "$tmp/err")"
fi

# 5. the generated runtime obeys the lines
cat >"$tmp/run.pipe" <<'EOF'
import "std/models.pipe"
import "std/schedules.pipe"
pipeline run {
  stages 3  microbatches 4  chunks 1
  model tiny { layers 3  hidden 16  seq 8  mbs 2 }
  schedule onef1b
  recompute stages all policy full
}
EOF
if out=$(timeout 120 "$PIPEC" run "$tmp/run.pipe" --check --quiet --cache "$tmp/cache" 2>&1); then
    err=$(echo "$out" | sed -n 's/^max relative gradient error: //p')
    if [ -n "$err" ] && awk -v e="$err" 'BEGIN { exit !(e < 1e-5) }'; then ok; else
        bad "run --check gradient error" "$out"; fi
else
    bad "run --check with bound recomputation" "$(echo "$out" | tail -n 3)"
fi

finish
