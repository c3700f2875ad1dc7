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
# (Appendix C), and the example, which recomputes 3 of each stage's 6 layers (block(3)).
expect "llama48: T-Recomp within 5% of 1F1B+R50 = 7/6 x 1F1B" "$tr <= 1.05 * 7.0 / 6.0 * $t1"
expect "llama48: the 1f1b_r50 example within 1% of 7/6 x 1F1B ($tm, $t1)" "abs($tm - 7.0 / 6.0 * $t1) <= 0.01 * 7.0 / 6.0 * $t1"
# Fig. 8(a): 1F1B + R=50% peaks at 10.65 GB of activations (GB = 1e9 bytes).
am=$(metric "$ex"_1f1b_r50.pipe "max(act)")
expect "llama48: 1F1B+R50 peak activations $am within 5% of the paper's 10.65 GB" "abs($am - 10.65e9) <= 0.05 * 10.65e9"
expect "llama48: T-Recomp within 5% of the 1f1b_r50 example" "$tr <= 1.05 * $tm"

# T-Offload (§5): on ranks without the embedding or the head the deep chunk holds half
# the parameters. All 16 bytes per parameter of it leave the static part (weights x 1/2);
# LW brings back 4 of them (bf16 weights and gradients) for the iteration, so the peak
# falls by 12/16 x 1/2 = 0.375 x weights. OG moves the bf16 gradients (2 bytes per deep
# parameter = weights / 16) at host_bw 25 GB/s, LW the bf16 weights (the same bytes).
check "all example checks" q "$PIPEC_ASAN" check "$ex"_all.pipe
"$PIPEC_ASAN" sim --trace "$tmp/all.trace" "$ex"_all.pipe >/dev/null 2>&1
for s in 1 3 6; do
    w0=$(metric "$ex"_trecomp.pipe "j['per_stage'][$s]['static_mem_bytes']")
    p0=$(metric "$ex"_trecomp.pipe "j['per_stage'][$s]['peak_mem_bytes']")
    w1=$(metric "$ex"_all.pipe "j['per_stage'][$s]['static_mem_bytes']")
    p1=$(metric "$ex"_all.pipe "j['per_stage'][$s]['peak_mem_bytes']")
    expect "toffload stage $s: weights $w1 = 0.5 x $w0" "abs($w1 - 0.5 * $w0) <= 1e-9 * $w0"
    expect "toffload stage $s: peak $p1 = $p0 - 0.375 x $w0" "abs($p1 - ($p0 - 0.375 * $w0)) <= 1e-6 * $p0"
    check "toffload stage $s: OG and LW on the host streams, lasting weights / 16 / host_bw" python3 - "$tmp/all.trace" "$s" "$w0" <<'E'
import json, sys
j = json.load(open(sys.argv[1])); s = int(sys.argv[2]); w0 = float(sys.argv[3])
want_us = w0 / 16 / 25e9 * 1e6
ev = {e["name"]: e for e in j["traceEvents"] if e.get("pid") == s and e.get("cat") in ("OG", "LW")}
assert set(ev) == {"OG0.1", "LW0.1"}, ev
assert ev["OG0.1"]["tid"] == 1 and ev["LW0.1"]["tid"] == 2, ev
for e in ev.values():
    assert abs(e["dur"] - want_us) <= 1e-3 * want_us, (e, want_us)
# LW runs from the start, before the deep chunk's first forward; OG after its last backward
f = [e for e in j["traceEvents"] if e.get("pid") == s and e.get("cat") == "F" and e["args"]["chunk"] == 1]
b = [e for e in j["traceEvents"] if e.get("pid") == s and e.get("cat") == "B" and e["args"]["chunk"] == 1]
assert ev["LW0.1"]["ts"] == 0 and ev["LW0.1"]["dur"] <= min(e["ts"] for e in f)
assert ev["OG0.1"]["ts"] >= max(e["ts"] + e["dur"] for e in b) - 1e-3
assert ev["OG0.1"]["ts"] + ev["OG0.1"]["dur"] <= j["otherData"]["makespan_ms"] * 1e3 + 1e-3
E
done
# check --mem: the weights column of the T-Offload example is below T-Recomp's on every rank
"$PIPEC_ASAN" check --mem "$ex"_trecomp.pipe >"$tmp/m0" 2>&1; "$PIPEC_ASAN" check --mem "$ex"_all.pipe >"$tmp/m1" 2>&1
check "check --mem: model states fall with T-Offload" python3 - "$tmp/m0" "$tmp/m1" <<'E'
import sys
def rows(f):
    r = {}
    for line in open(f):
        x = line.split()
        if len(x) > 9 and x[0].isdigit() and x[2] == "GiB" and len(r) < 8 and int(x[0]) not in r:
            r[int(x[0])] = (float(x[1]), float(x[7]))   # peak, weights (GiB)
    return r
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert len(a) == 8 and len(b) == 8, (a, b)
for s in range(8):
    assert b[s][1] < 0.7 * a[s][1] and b[s][0] < a[s][0], (s, a[s], b[s])
E
# the explicit form round-trips: OG/LW and the grads/wload/opt_host costs print and read back
"$PIPEC_ASAN" print "$ex"_all.pipe >"$tmp/all.print" 2>/dev/null
"$PIPEC_ASAN" print "$tmp/all.print" >"$tmp/all.print2" 2>/dev/null
check "toffload example round-trips through print" cmp -s "$tmp/all.print" "$tmp/all.print2"
check "printed form has OG0.1 and LW0.1 on every stage" python3 -c "
import re, sys
t = open('$tmp/all.print').read()
st = re.findall(r'^  stage (\d+) \{([^}]*)\}', t, re.M)
assert len(st) == 8 and all(' LW0.1 ' in ' ' + b + ' ' and ' OG0.1 ' in ' ' + b + ' ' for _, b in st), st[:1]
"
tm1=$(metric "$ex"_all.pipe ms)
expect "toffload leaves the makespan alone" "$tm1 == $tr"
sed 's/apply toffload(chunks=1)/apply toffload(chunks=1) apply toffload/' "$ex"_all.pipe >"$tmp/all2.pipe"
"$PIPEC_ASAN" print "$ex"_all.pipe >"$tmp/once" 2>&1; "$PIPEC_ASAN" print "$tmp/all2.pipe" >"$tmp/twice" 2>&1
check "toffload idempotent" cmp -s "$tmp/once" "$tmp/twice"
unit 4 8 "apply toffload"
"$PIPEC_ASAN" check "$tmp/u.pipe" >"$tmp/e" 2>&1
expect "toffload without a model: value error" "$? == 1 and 'error[value]' in open('$tmp/e').read()"
# T-Offload end to end (mlp workload): OG really moves the deep chunk's gradients to a
# host buffer and runs its SGD step there on the copy thread, LW copies the weights back.
# The gradients of iteration 1 match the sequential reference, and the losses of 4
# iterations are those of the same schedule without offload bit for bit (a missing or
# broken OG step or LW reload would leave the deep chunk's weights stale from iteration
# 2 on). The runtime trace has OG on the d2h thread and LW on the h2d thread.
cat >"$tmp/toff.pipe" <<'E'
import "std/models.pipe"
import "std/tpipe.pipe"
pipeline toff {
  stages 2  microbatches 4  chunks 2
  model tiny { layers 4  hidden 16  seq 8  mbs 2 }
  schedule tpipe
  apply toffload
}
E
sed 's/  apply toffload//; s/pipeline toff/pipeline plain/' "$tmp/toff.pipe" >"$tmp/plain.pipe"
# a fixed, repetitive text, so that "it trains" does not hang on what the docs say today
python3 -c "print('the pipeline runs forward and backward over every micro-batch. ' * 200)" >"$tmp/text"
check "toffload e2e: run --check" q timeout 120 "$PIPEC" run "$tmp/toff.pipe" --check --quiet --cache "$tmp/cache"
timeout 120 "$PIPEC" run "$tmp/toff.pipe" --iters 4 --json --data "$tmp/text" --trace "$tmp/run.trace" --cache "$tmp/cache" >"$tmp/r1.json" 2>&1
timeout 120 "$PIPEC" run "$tmp/plain.pipe" --iters 4 --json --data "$tmp/text" --cache "$tmp/cache" >"$tmp/r0.json" 2>&1
check "toffload e2e: same losses as without offload, OG/LW on the copy threads" python3 - "$tmp/r1.json" "$tmp/r0.json" "$tmp/run.trace" <<'E'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert len(a["losses"]) == 4 and a["losses"] == b["losses"], (a["losses"], b["losses"])
assert a["losses"][3] < a["losses"][0], a["losses"]   # it trains
ev = [e for e in json.load(open(sys.argv[3]))["traceEvents"] if e.get("ph") == "X"]
og = [e for e in ev if e["cat"] == "OG"]; lw = [e for e in ev if e["cat"] == "LW"]
assert len(og) == 8 and len(lw) == 8, (len(og), len(lw))   # 2 ranks x 4 iterations
assert all(e["tid"] == 1 for e in og) and all(e["tid"] == 2 for e in lw)
for e in og:   # after every B of the deep chunk on its rank in that iteration
    bs = [x for x in ev if x["cat"] == "B" and x["pid"] == e["pid"] and x["args"]["chunk"] == 1
          and x["args"]["iter"] == e["args"]["iter"]]
    assert len(bs) == 4 and e["ts"] >= max(x["ts"] + x["dur"] for x in bs) - 1, e
for e in lw:   # before every F of the deep chunk
    fs = [x for x in ev if x["cat"] == "F" and x["pid"] == e["pid"] and x["args"]["chunk"] == 1
          and x["args"]["iter"] == e["args"]["iter"]]
    assert len(fs) == 4 and e["ts"] + e["dur"] <= min(x["ts"] for x in fs) + 1, e
E
# The synthetic workload busy-waits the modelled times: with host_bw 1 MB/s OG moves
# grads = 2 x the deep chunk's parameters and LW the same bytes, so each lasts
# grads / 1e6 s (tens of ms on this model) plus opt_host 20 ms for OG.
sed 's/  apply toffload/  costs { f 40ms b 80ms host_bw 1MB\/s }\n  apply toffload(cpu_step=20ms)/' "$tmp/toff.pipe" >"$tmp/toffs.pipe"
timeout 120 "$PIPEC" run "$tmp/toffs.pipe" --workload synthetic --iters 1 --quiet --trace "$tmp/syn.trace" --cache "$tmp/cache" >/dev/null 2>&1
"$PIPEC" sim "$tmp/toffs.pipe" --trace "$tmp/syn.sim" >/dev/null 2>&1
check "toffload synthetic: OG/LW last their modelled times" python3 - "$tmp/syn.trace" "$tmp/syn.sim" <<'E'
import json, sys
run = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("cat") in ("OG", "LW")]
sim = {(e["pid"], e["name"]): e for e in json.load(open(sys.argv[2]))["traceEvents"] if e.get("cat") in ("OG", "LW")}
assert len(run) == 4 and len(sim) == 4, (run, sim)
for e in run:
    want = sim[(e["pid"], e["name"])]["dur"]
    assert want > 10e3, want                         # at least 10 ms modelled
    assert want * 0.95 <= e["dur"] <= want * 2 + 50e3, (e, want)   # spins end late under load
og = [e for e in sim.values() if e["cat"] == "OG"]; lw = {e["pid"]: e for e in sim.values() if e["cat"] == "LW"}
for e in og:   # OG = grads / host_bw + opt_host = LW's time + 20 ms
    assert abs(e["dur"] - (lw[e["pid"]]["dur"] + 20e3)) < 1, (e, lw[e["pid"]])
E
# With chunks 3, trecomp_blockwise(chunks=0..=1) recomputes only chunks 0 and 1 (an R for
# each of their micro-batches) and toffload(chunks=2..=2) moves only chunk 2's states (one
# OG and one LW per stage).
cat >"$tmp/v3.pipe" <<E
import "std/schedules.pipe"
import "std/models.pipe"
import "std/devices.pipe"
pipeline v3 { stages 2 microbatches 6 chunks 3 model gpt_1_3b device h100_sxm_80g
  schedule interleaved
  apply trecomp_blockwise(chunks=0..=1)
  apply toffload(chunks=2..=2) }
E
check "chunks 3, trecomp 0..=1 + toffload 2..=2: checks" q "$PIPEC_ASAN" check "$tmp/v3.pipe"
for s in 0 1; do
    got=$("$PIPEC" print "$tmp/v3.pipe" | sed -n "/^  stage $s {/,/}/p" | tr -s ' \n' '\n' |
          grep -E '^(R|OG|LW)' | sed 's/^\([A-Z]*\)[0-9]*\(\.[0-9]\)\{0,1\}$/\1\2/' | sort | uniq -c | tr -s ' \n' ' ')
    check "chunks 3, stage $s: 6 R of chunk 0, 6 of chunk 1, OG and LW of chunk 2 ($got)" test "$got" = " 1 LW.2 1 OG.2 6 R 6 R.1 "
done
finish
