#!/usr/bin/env bash
# t_tpipe.sh - the `tpipe` template and TPipe's T-Recomp against the paper's closed forms
# (TPipe §4.1-4.2, Appendices A-C), on unit costs and on the 48-layer Llama example.
cd "$(dirname "$0")/.."
. tests/lib.sh
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# metric FILE EXPR: evaluates a python expression over the sim --json object j
# (helpers: ms = makespan, act = [peak_act_bytes per stage]).
metric() {
    "$PIPEC_ASAN" sim --json "$1" >"$tmp/m.json" 2>"$tmp/m.err" || { echo "nan"; return; }
    python3 -c '
import json, sys
j = json.load(open(sys.argv[1])); ms = j["makespan_ms"]
act = [s["peak_act_bytes"] for s in j["per_stage"]]
print(eval(sys.argv[2]))' "$tmp/m.json" "$2"
}
# expect NAME PYTHON-CONDITION
q() { "$@" >/dev/null 2>&1; }
expect() { if python3 -c "import sys; sys.exit(0 if ($2) else 1)"; then ok; else bad "$1" "$2"; fi; }

# unit P M EXTRA: T-Pipe on the paper's unit costs: f = T_unit = 1ms per chunk, b = 2f,
# one block (1 GiB) of activations per chunk and micro-batch, checkpoints free.
unit() {
    cat >"$tmp/u.pipe" <<E
import "std/tpipe.pipe"
pipeline u { stages $1 microbatches $2 chunks 2
  costs { f 1ms b 2ms act 1GiB ckpt 0 }
  schedule tpipe
  $3 }
E
}
onef1b() {
    cat >"$tmp/o.pipe" <<E
import "std/schedules.pipe"
pipeline o { stages $1 microbatches $2
  costs { f 2ms b 4ms r 1ms act 2GiB ckpt 1GiB }
  schedule onef1b
  $3 }
E
}
G=1073741824
for PM in "8 32" "4 16" "6 24" "16 32" "3 9"; do
    set -- $PM; P=$1 M=$2
    unit $P $M ""
    check "tpipe P=$P M=$M checks" q "$PIPEC_ASAN" check "$tmp/u.pipe"
    t=$(metric "$tmp/u.pipe" ms); a0=$(metric "$tmp/u.pipe" "act[0]/$G")
    # Appendix A: period 6 T_unit; makespan 6(M+P-1) plus the two chunk intervals of at
    # most 5 T_unit each; rank 0 holds less than 1F1B's 2P blocks (m_a = 2P blocks).
    expect "tpipe P=$P makespan $t within 6(M+P-1)+10" "$t >= 6*($M+$P-1) and $t <= 6*($M+$P-1)+10"
    expect "tpipe P=$P rank-0 blocks $a0 below 1F1B's 2P" "$a0 < 2*$P"
    unit $P $M "apply trecomp_blockwise"
    check "trecomp P=$P M=$M checks" q "$PIPEC_ASAN" check "$tmp/u.pipe"
    t=$(metric "$tmp/u.pipe" ms); a=$(metric "$tmp/u.pipe" "max(act)/$G")
    # Appendix C: floor(P/2)+1 blocks (chunk 1's activations and one recompute buffer),
    # makespan [6P + 7(M-1)] T_unit.
    expect "trecomp P=$P blocks $a <= floor(P/2)+1" "$a <= $P//2 + 1"
    expect "trecomp P=$P makespan $t <= 6P+7(M-1)" "$t <= 6*$P + 7*($M-1)"
    # 1F1B with 50% recomputation on the same units: f = 2, b = 4, r = 1 per stage.
    onef1b $P $M "recompute stages all policy full"
    t50=$(metric "$tmp/o.pipe" ms)
    expect "1F1B+R50 P=$P makespan $t50 = 7(M-1+P) or less" "$t50 <= 7*($M-1+$P)"
    expect "trecomp P=$P within 5% of 1F1B+R50" "$t <= 1.05 * $t50"
done

# Appendix B's delay: one round at P = 8 (the default) is at least as fast as none.
unit 8 32 "apply trecomp_blockwise(delay=0)"; t0=$(metric "$tmp/u.pipe" ms)
unit 8 32 "apply trecomp_blockwise"; t1=$(metric "$tmp/u.pipe" ms)
expect "trecomp: Appendix B delay helps at P=8 ($t1 < $t0)" "$t1 < $t0"
# Idempotent: applying the pass twice prints the same schedule as once.
unit 8 16 "apply trecomp_blockwise"; "$PIPEC_ASAN" print "$tmp/u.pipe" >"$tmp/once" 2>&1
unit 8 16 "apply trecomp_blockwise apply trecomp_blockwise"; "$PIPEC_ASAN" print "$tmp/u.pipe" >"$tmp/twice" 2>&1
check "trecomp idempotent" cmp -s "$tmp/once" "$tmp/twice"

# Bad uses: a `value` error, not a crash.
unit 4 8 "apply trecomp_blockwise(chunks=2)"
"$PIPEC_ASAN" check "$tmp/u.pipe" >"$tmp/e" 2>&1
expect "trecomp chunks out of range: value error" "$? == 1 and 'error[value]' in open('$tmp/e').read()"
cat >"$tmp/v.pipe" <<E
import "std/tpipe.pipe"
pipeline v { stages 4 microbatches 8 chunks 3 schedule tpipe }
E
"$PIPEC_ASAN" check "$tmp/v.pipe" >"$tmp/e" 2>&1
expect "tpipe with chunks 3: value error" "$? == 1 and 'error[value]' in open('$tmp/e').read()"

# The paper's configuration (TPipe §6, Fig. 8(a)): 48 layers, PP 8, TP 8, 32 GiB.
ex=examples/tpipe_llama48
for f in 1f1b tpipe trecomp 1f1b_r50; do check "$f example checks" q "$PIPEC_ASAN" check "$ex"_$f.pipe; done
a1=$(metric "$ex"_1f1b.pipe "max(act)"); t1=$(metric "$ex"_1f1b.pipe ms)
ap=$(metric "$ex"_tpipe.pipe "max(act)")
ar=$(metric "$ex"_trecomp.pipe "max(act)"); tr=$(metric "$ex"_trecomp.pipe ms)
tm=$(metric "$ex"_1f1b_r50.pipe ms)
expect "llama48: T-Pipe keeps less than 1F1B" "$ap < $a1"
expect "llama48: T-Pipe+T-Recomp keeps <= 35% of 1F1B's peak activations ($ar / $a1)" "$ar <= 0.35 * $a1"
# 1F1B + 50% recomputation in closed form: 7(M-1+P) / 6(M-1+P) of 1F1B's makespan
# (Appendix C), and the mlp-policy example (R ~ 59%).
expect "llama48: T-Recomp within 5% of 1F1B+R50 = 7/6 x 1F1B" "$tr <= 1.05 * 7.0 / 6.0 * $t1"
expect "llama48: T-Recomp within 5% of the 1f1b_r50 example" "$tr <= 1.05 * $tm"

# T-Offload (§5): on ranks without the embedding or the head the deep chunk holds half
# the parameters, and 12 of its 16 bytes per parameter move to the host:
# weights x (1 - 12/16 x 1/2) = 0.625 x weights.
check "all example checks" q "$PIPEC_ASAN" check "$ex"_all.pipe
for s in 1 3 6; do
    w0=$(metric "$ex"_trecomp.pipe "j['per_stage'][$s]['static_mem_bytes']")
    w1=$(metric "$ex"_all.pipe "j['per_stage'][$s]['static_mem_bytes']")
    expect "toffload stage $s: weights $w1 = 0.625 x $w0" "abs($w1 - 0.625 * $w0) <= 1e-9 * $w0"
done
tm1=$(metric "$ex"_all.pipe ms)
expect "toffload leaves the makespan alone" "$tm1 == $tr"
sed 's/apply toffload(chunks=1)/apply toffload(chunks=1) apply toffload/' "$ex"_all.pipe >"$tmp/all2.pipe"
"$PIPEC_ASAN" print "$ex"_all.pipe >"$tmp/once" 2>&1; "$PIPEC_ASAN" print "$tmp/all2.pipe" >"$tmp/twice" 2>&1
check "toffload idempotent" cmp -s "$tmp/once" "$tmp/twice"
unit 4 8 "apply toffload"
"$PIPEC_ASAN" check "$tmp/u.pipe" >"$tmp/e" 2>&1
expect "toffload without a model: value error" "$? == 1 and 'error[value]' in open('$tmp/e').read()"
finish
