#!/usr/bin/env bash
# t_remat.sh - layer-granular rematerialization (docs/semantics.md "Memory",
# docs/cost-model.md "Layer-granular recomputation"): `recompute ... granularity layer`
# and recompute(granularity=layer) derive `ract`, one layer's rebuilt activations; the
# walk (check --mem), the arena plan and sim's memory rows agree on the hand-derived
# peaks; the default stays the stage at once; the CPU runtime's gpt and llama workloads
# rebuild layer by layer with the stage-granular losses; emit refuses what a runtime does
# not do.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
P=$PIPEC_ASAN
GiB=1073741824
expect() { if python3 -c "import sys; sys.exit(0 if ($2) else 1)"; then ok; else bad "$1" "$2"; fi; }

# --- 1. hand-derived peaks on explicit costs -------------------------------------------
# 1F1B, P = 2, M = 4, every B preceded by its R. Stage 0 holds F0's and F1's checkpoints
# (2 GiB each) when R0 starts; R0 adds ract = 1 GiB: 5 GiB of activations + 4 GiB
# weights = 9 GiB. Stage 1: one checkpoint + ract = 3 GiB, 7 GiB in all. Stage-granular
# (no ract) R adds act - ckpt = 6 GiB: 10 + 4 = 14 GiB and 8 + 4 = 12 GiB.
mk() { # NAME RACT-FIELD
    cat >"$T/$1.pipe" <<E
import "std/schedules.pipe"
pipeline $1 {
  stages 2  microbatches 4
  memory 40GiB
  costs { f 1ms b 2ms act 8GiB ckpt 2GiB $2 weights 4GiB }
  schedule onef1b
  recompute stages all policy full
}
E
}
mk lay "ract 1GiB"
mk stg ""
for c in lay:9:7:5 stg:14:12:10; do
    IFS=: read -r n p0 p1 a0 <<<"$c"
    "$P" sim --json "$T/$n.pipe" >"$T/$n.json" 2>"$T/$n.err"
    check "$n: sim --json exits 0" test $? = 0
    expect "$n: sim peaks $p0 and $p1 GiB" "__import__('json').load(open('$T/$n.json'))['per_stage'][0]['peak_mem_bytes'] == $p0 * $GiB and __import__('json').load(open('$T/$n.json'))['per_stage'][1]['peak_mem_bytes'] == $p1 * $GiB"
    "$P" check --mem "$T/$n.pipe" >"$T/$n.mem" 2>&1
    check "$n: check --mem exits 0" test $? = 0
    # the walk's row and the arena's: the same peak, the arena packed without a gap
    check "$n: walk peak $p0 GiB at R0" grep -Eq "^ +0 +$p0\.0 GiB .* $a0\.0 GiB +R0 " "$T/$n.mem"
    check "$n: arena $a0 GiB = peak live, total $p0 GiB" \
        grep -Eq "^ +0 +$a0\.0 GiB +$a0\.0 GiB +1\.000 +4\.0 GiB +$p0\.0 GiB" "$T/$n.mem"
done
# a budget of 8 GiB: the stage-granular plan is over by 6 GiB, the layer-granular by 1
sed 's/memory 40GiB/memory 8GiB/' "$T/lay.pipe" >"$T/lay8.pipe"
"$P" check "$T/lay8.pipe" >"$T/lay8.out" 2>&1
check "ract 1GiB over an 8 GiB budget: memory error" grep -q "error\[memory\]: stage 0 needs 9.0 GiB" "$T/lay8.out"

# --- 2. the cost model's one-layer share ------------------------------------------------
# gpt_13b (40 layers) on PP4 TP4, mbs 16: vstage 1 holds 10 whole layers, alike, so one
# layer's share is (act - ckpt) / 10 (to the byte's rounding); the stage-granular file
# derives no ract and prints as before.
g13() { # NAME RECOMPUTE-LINES [PARTITION]
    cat >"$T/$1.pipe" <<E
import "std/schedules.pipe"
import "std/models.pipe"
import "std/devices.pipe"
pipeline $1 {
  stages 4  microbatches 8
  model gpt_13b { mbs 16 }  device a100_sxm_40g
  tensor_parallel 4
  ${3:-partition even}
  schedule onef1b
  $2
}
E
    "$P" print "$T/$1.pipe" >"$T/$1.print" 2>"$T/$1.err" || echo "print $1 failed" >>"$T/$1.err"
}
# field NAME VSTAGE FIELD: the value in KiB/MiB/B of `print` converted to bytes
field() {
    python3 - "$T/$1.print" "$2" "$3" <<'E'
import re, sys
u = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
for l in open(sys.argv[1]):
    if l.strip().startswith("costs vstage %s {" % sys.argv[2]):
        m = re.search(r"\b%s ([0-9.]+)(B|KiB|MiB|GiB)\b" % sys.argv[3], l)
        print(float(m.group(1)) * u[m.group(2)] if m else "None")
        break
E
}
g13 full "recompute stages 0..=3 policy full"
g13 lfull "recompute stages 0..=3 policy full granularity layer"
g13 pfull "apply recompute(stages=0..=3, policy=full, granularity=layer)"
g13 keep "recompute stages 0..=3 policy keep(fc1) granularity layer"
g13 blk "recompute stages 0..=3 policy block(2) granularity layer"
g13 half "recompute stages 0..=3 policy full granularity layer" "partition [9.5, 10.5, 10, 10]"
check "stage-granular prints no ract" test "$(grep -c ract "$T/full.print")" = 0
check "granularity layer prints ract" grep -q "ract" "$T/lfull.print"
for n in lfull keep; do
    a=$(field $n 1 act); k=$(field $n 1 ckpt); r=$(field $n 1 ract)
    expect "$n: vstage 1 ract $r = (act - ckpt) / 10" "abs($r - ($a - $k) / 10) <= 1"
done
check "the pass's granularity=layer prints as the directive" \
    cmp -s <(sed 1d "$T/lfull.print") <(sed 1d "$T/pfull.print")
# block(2): the two recomputed layers are full ones: the same share as full's
lf=$(field lfull 1 ract); bk=$(field blk 1 ract)
expect "block(2): ract $bk = full's $lf" "$bk == $lf"
# partition [9.5, 10.5, ...]: vstage 0 ends with an attention half, vstage 1 starts
# with the MLP half (keeping its input): the largest piece is still a whole layer
for v in 0 1 2 3; do
    h=$(field half $v ract)
    expect "half-layer partition: vstage $v ract $h = a whole layer's $lf" "$h == $lf"
done
# the --set form of the directive
"$P" print "$T/full.pipe" --set "recompute=stages 0..=3 policy full granularity layer" >"$T/set.print" 2>&1
check "--set recompute=... granularity layer prints as the directive" \
    cmp -s <(sed 1d "$T/set.print") <(sed 1d "$T/lfull.print")
# the layer-granular peak: ckpt of the live micro-batches + one layer + work, below
# the stage-granular one (the same file but the clause)
for n in full lfull; do
    "$P" sim --json "$T/$n.pipe" >"$T/$n.json" 2>/dev/null
done
expect "layer-granular peak below stage-granular on every rank" "all(a['peak_mem_bytes'] < b['peak_mem_bytes'] for a, b in zip(__import__('json').load(open('$T/lfull.json'))['per_stage'], __import__('json').load(open('$T/full.json'))['per_stage']))"
# the walk's rule by hand on ranks 1 and 2 (1F1B, M = 8 >= P): at its first R rank s
# holds P - s checkpoints, R's one layer and R's working memory, on top of its weights
for s in 1 2; do
    w=$(python3 - "$T/lfull.print" $s <<'E'
import re, sys
u = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
for l in open(sys.argv[1]):
    if l.strip().startswith("costs stage %s {" % sys.argv[2]):
        m = re.search(r"\bweights ([0-9.]+)(B|KiB|MiB|GiB)\b", l)
        print(float(m.group(1)) * u[m.group(2)])
E
)
    k=$(field lfull $s ckpt); r=$(field lfull $s ract); wk=$(field lfull $s work)
    expect "rank $s: sim peak = weights + $((4 - s)) ckpt + ract + work" \
        "__import__('json').load(open('$T/lfull.json'))['per_stage'][$s]['peak_mem_bytes'] == $w + $((4 - s)) * $k + $r + $wk"
done
# printed and read back: the same simulation (the explicit form carries ract)
"$P" sim --json "$T/lfull.print" >"$T/back.json" 2>/dev/null
expect "print round trip keeps the peaks" "[s['peak_mem_bytes'] for s in __import__('json').load(open('$T/back.json'))['per_stage']] == [s['peak_mem_bytes'] for s in __import__('json').load(open('$T/lfull.json'))['per_stage']]"
# check --mem's walk and arena totals equal sim's peak on every rank (walk = sim)
"$P" check --mem "$T/lfull.pipe" >"$T/lfull.mem" 2>&1
check "lfull: check --mem passes" grep -q ": ok: pipeline" "$T/lfull.mem"
check "lfull: arena without fragmentation" test "$(grep -cE '^ +[0-3] .* 1\.000 ' "$T/lfull.mem")" = 4

# passes that re-plan a rank's policy through recompute keep the file's granularity:
# lynx after the directive still derives ract on every virtual stage
"$P" print examples/lynx_gpt13b_mb32_lynx.pipe >"$T/lx.print" 2>/dev/null
check "apply lynx keeps granularity layer (ract on 4 virtual stages)" \
    test "$(grep -c 'costs vstage [0-3] {.* ract ' "$T/lx.print")" = 4

# --- 3. an RO hosted by its own backward (docs/semantics.md "Overlapped recomputation")
# One rank, one micro-batch: F0 RO0 B0 with f 10, b 20, r 10 (rcomm 2) ms; act 8 GiB,
# ckpt 0, ract 2 GiB: g = 1/4. RO0's exposed time = rcomm + g (r - rcomm) + what of
# (1 - g)(r - rcomm) = 6 ms exceeds the budget bcomm (1 - g): bcomm 8 -> budget 6, all
# hidden, 2 + 2 = 4 ms, makespan 34; bcomm 4 -> budget 3, 2 + 2 + 3 = 7 ms, makespan 37;
# an R in its place 40. Without ract (stage-granular) B0 cannot host it: `order`.
self() { # NAME BCOMM RACT-FIELD OP
    cat >"$T/$1.pipe" <<E
pipeline $1 {
  stages 1  microbatches 1
  costs { f 10ms b 20ms r 10ms rcomm 2ms bcomm $2ms act 8GiB ckpt 0 $3 }
  stage 0 { F0 $4 B0 }
}
E
    "$P" sim --json "$T/$1.pipe" 2>"$T/$1.err" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["makespan_ms"])' 2>/dev/null
}
check "self-hosted RO, bcomm 8: makespan 34 ms" test "$(self s8 8 'ract 2GiB' RO0)" = 34.0
check "self-hosted RO, bcomm 4: makespan 37 ms" test "$(self s4 4 'ract 2GiB' RO0)" = 37.0
check "R in its place: makespan 40 ms" test "$(self sr 8 'ract 2GiB' R0)" = 40.0
self sx 8 '' RO0 >/dev/null
check "stage-granular: B0 cannot host RO0" grep -q "error\[order\]: RO0 on stage 0 cannot run inside B0" "$T/sx.err"
# lynx_overlap turns the mbs 32 example's unhosted recomputes into self-hosted ROs
# (RO just before its own B), bound to the gradient
python3 - "$T/lx.print" <<'E' >"$T/lx.self"
import re, sys
n = 0
for l in open(sys.argv[1]):
    ops = l.split()
    n += sum(1 for a, b in zip(ops, ops[1:]) if a.startswith("RO") and b == "B" + a[2:])
print(n)
E
check "lynx at mbs 32 lists self-hosted ROs ($(cat "$T/lx.self"))" test "$(cat "$T/lx.self")" -gt 0

# --- 4. errors ------------------------------------------------------------------------
cat >"$T/bad.pipe" <<'E'
import "std/schedules.pipe"
pipeline b {
  stages 2  microbatches 2
  costs { f 1ms b 1ms }
  schedule onef1b
  recompute stages all policy full granularity leyer
}
E
"$P" check "$T/bad.pipe" >"$T/bad.out" 2>&1
check "unknown granularity: exit 1" test $? = 1
check "unknown granularity: located value error" \
    grep -q "bad.pipe:6:48: error\[value\]: unknown recompute granularity 'leyer' (granularities: stage, layer)" "$T/bad.out"
sed -i 's/recompute stages all policy full granularity leyer/apply recompute(granularity=tile)/' "$T/bad.pipe"
"$P" check "$T/bad.pipe" >"$T/bad.out" 2>&1
check "pass granularity=tile: located value error" \
    grep -q "bad.pipe:6:.*error\[value\]: unknown recomputation granularity 'tile' (stage, layer)" "$T/bad.out"
"$P" emit --backend cuda "$T/lfull.pipe" -o "$T/out_cuda" >"$T/emit.out" 2>&1
check "emit --backend cuda refuses layer granularity: exit 1" test $? = 1
check "emit --backend cuda: error[limit] at the directive" \
    grep -q "lfull.pipe:10:3: error\[limit\]: the cuda backend rebuilds a whole virtual stage" "$T/emit.out"
check "emit --backend cuda: nothing written" test ! -e "$T/out_cuda"
"$PIPEC" emit "$T/lfull.pipe" -o "$T/out_cpu" >"$T/emit.out" 2>&1
check "emit (cpu) generates layer granularity: exit 0" test $? = 0

# --- 5. the CPU runtime rebuilds one layer at a time (docs/runtime.md) -----------------
# The same model, schedule and seed, stage- and layer-granular: the same math in another
# order, so the losses are equal to the last bit and the gradients match the sequential
# reference (--check); the layer-granular arena and workspace are smaller (one layer's
# forward part instead of four, per rank).
rt_pair() { # NAME MODEL-LINE SCHEDULE
    cat >"$T/$1_s.pipe" <<E
import "std/models.pipe"
import "std/schedules.pipe"
import "std/devices.pipe"
pipeline $1 {
  stages 2
  microbatches 4
  $2
  device cpu
  partition even
  schedule $3
  recompute stages all policy full
}
E
    sed 's/policy full$/policy full granularity layer/' "$T/$1_s.pipe" >"$T/$1_l.pipe"
}
rt_pair gpt8 "model gpt_1_3b { layers 8  hidden 64  heads 4  vocab 256  seq 32  mbs 2  dtype fp32 }" onef1b
rt_pair llama8 "model llama2_70b { layers 8  hidden 64  heads 4  kv_heads 2  ffn 176  vocab 256  seq 32  mbs 2  dtype fp32 }" onef1b
"$PIPEC" emit "$T/gpt8_l.pipe" -o "$T/out_gpt8" >"$T/emit.out" 2>&1
check "emit (cpu): both virtual stages marked layer-granular" \
    test "$(grep -c '\.per_layer = 1' "$T/out_gpt8/main.c")" = 2
for n in gpt8 llama8; do
    for g in s l; do
        "$PIPEC" run "$T/${n}_$g.pipe" --iters 3 --seed 7 --json --check >"$T/${n}_$g.json" 2>"$T/${n}_$g.err"
        check "$n ($g): run --check exits 0" test $? = 0
    done
    expect "$n: equal losses, stage- and layer-granular" "__import__('json').load(open('$T/${n}_s.json'))['losses'] == __import__('json').load(open('$T/${n}_l.json'))['losses'] and len(__import__('json').load(open('$T/${n}_l.json'))['losses']) == 3"
    expect "$n: layer-granular gradients match the reference" "__import__('json').load(open('$T/${n}_l.json'))['max_grad_error'] < 1e-4"
    expect "$n: every rank's arena + workspace smaller, layer-granular" "all(l['arena_bytes'] + l['workspace_bytes'] < s['arena_bytes'] + s['workspace_bytes'] and l['arena_bytes'] < s['arena_bytes'] for s, l in zip(__import__('json').load(open('$T/${n}_s.json'))['per_stage'], __import__('json').load(open('$T/${n}_l.json'))['per_stage']))"
    expect "$n: the measured peak is the planned one" "all(r['peak_arena_bytes'] <= r['arena_bytes'] and r['planned_peak_bytes'] <= r['arena_bytes'] for r in __import__('json').load(open('$T/${n}_l.json'))['per_stage'])"
done
# Swapped regions too: stage 0 swaps micro-batches 0 and 1 out between F and R (SO/SI
# move the held prefix: every layer's input, under layer granularity).
cat >"$T/sw_s.pipe" <<'E'
import "std/models.pipe"
import "std/devices.pipe"
pipeline sw {
  stages 2
  microbatches 4
  model gpt_1_3b { layers 8  hidden 64  heads 4  vocab 256  seq 32  mbs 2  dtype fp32 }
  device cpu
  partition even
  recompute stages all policy full
  stage 0 { F0 F1 SO0 F2 SO1 SI0 R0 B0 F3 SI1 R1 B1 R2 B2 R3 B3 }
  stage 1 { F0 R0 B0 F1 R1 B1 F2 R2 B2 F3 R3 B3 }
}
E
sed 's/policy full$/policy full granularity layer/' "$T/sw_s.pipe" >"$T/sw_l.pipe"
for g in s l; do
    "$PIPEC" run "$T/sw_$g.pipe" --iters 2 --seed 7 --json --check >"$T/sw_$g.json" 2>"$T/sw_$g.err"
    check "swapped ($g): run --check exits 0" test $? = 0
done
expect "swapped: equal losses, stage- and layer-granular" "__import__('json').load(open('$T/sw_s.json'))['losses'] == __import__('json').load(open('$T/sw_l.json'))['losses']"
expect "swapped: layer-granular gradients match the reference" "__import__('json').load(open('$T/sw_l.json'))['max_grad_error'] < 1e-4"
# What the model workloads do not run, `run --workload model` refuses with the reason
# before training (and plain `run` replays on the synthetic workload, saying why): the
# mlp workload, and a split backward (W) under layer granularity.
rt_pair mlp8 "model gpt_1_3b { arch mlp  layers 8  hidden 32  heads 4  vocab 256  seq 16  mbs 2  dtype fp32 }" onef1b
rt_pair zb8 "model gpt_1_3b { layers 8  hidden 64  heads 4  vocab 256  seq 32  mbs 2  dtype fp32 }" zbh1
for c in "mlp8:the mlp workload rebuilds a whole virtual stage" "zb8:its B and W are split"; do
    n=${c%%:*}
    "$PIPEC" run "$T/${n}_l.pipe" --iters 1 --workload model >"$T/$n.out" 2>&1
    check "$n: run --workload model refuses layer granularity: exit 1" test $? = 1
    check "$n: says why" grep -q "virtual stage 0 recomputes layer by layer, which the CPU model workload does not run: ${c#*:}" "$T/$n.out"
done
# The synthetic workload replays the plan's layer-granular regions (64-byte touches of
# R's one-layer place): the measured peak is the planned one.
"$PIPEC" run "$T/lfull.pipe" --workload synthetic --iters 1 --time-scale 0.001 --json >"$T/syn.json" 2>"$T/syn.err"
check "synthetic run of a layer-granular plan exits 0" test $? = 0
expect "synthetic: measured peak = planned peak on every rank" "all(r['peak_arena_bytes'] == r['planned_peak_bytes'] for r in __import__('json').load(open('$T/syn.json'))['per_stage'])"
finish
