#!/usr/bin/env bash
# t_lynx.sh - Lynx (docs/lynx.md): tensor-parallel all-reduces in the cost model, the RO
# op (overlapped recomputation: docs/semantics.md "Overlapped recomputation"), the passes
# lynx_overlap and lynx, and the reproduction of docs/lynx.md run as documented.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
q() { "$@" >/dev/null 2>&1; }
expect() { if python3 -c "import sys; sys.exit(0 if ($2) else 1)"; then ok; else bad "$1" "$2"; fi; }
# js FILE EXPR: a python expression over `sim --json` (j) and `sim --trace` (rec: the
# compute-stream ms of every R and RO over all ranks; nro: the number of ROs)
js() {
    "$PIPEC_ASAN" sim --json --trace "$T/t.json" "$1" >"$T/j.json" 2>"$T/j.err" || { echo nan; return; }
    python3 -c '
import json, sys
j = json.load(open(sys.argv[1])); t = json.load(open(sys.argv[2]))
ev = t["traceEvents"] if isinstance(t, dict) else t
x = [e for e in ev if e.get("ph") == "X"]
rec = sum(e["dur"] for e in x if e.get("cat") in ("R", "RO")) / 1000
nro = sum(1 for e in x if e.get("cat") == "RO")
busy = [s["busy_ms"] for s in j["per_stage"]]
print(eval(sys.argv[3]))' "$T/j.json" "$T/t.json" "$2"
}

# --- 1. the cost model: Megatron's all-reduces, NVLink against PCIe ------------------
cost() { # DEVICE TP FIELD: the field of vstage 1 in `print`
    cat >"$T/c.pipe" <<E
import "std/schedules.pipe"
import "std/models.pipe"
import "std/devices.pipe"
pipeline c { stages 4 microbatches 4 model gpt_7b { mbs 32 } device $1 tensor_parallel $2
  schedule onef1b }
E
    "$PIPEC_ASAN" print "$T/c.pipe" | sed -n "s/.*costs vstage 1 {.* $3 \([0-9.]*\)ms.*/\1/p"
}
nv=$(cost a100_sxm_40g 4 fcomm); pc=$(cost a100_pcie_40g 4 fcomm); f=$(cost a100_sxm_40g 4 f)
# 8 layers x 2 blocks x one ring all-reduce of e*T*h = 268,435,456 bytes over 4 ranks:
# 1.5 x 268435456 B / 300 GB/s + 6 x 5 us = 1.37217728 ms each (docs/cost-model.md)
expect "NVLink fcomm $nv = 16 all-reduces" "abs(${nv:-0} - 16 * (1.5 * 268435456 / 300e9 * 1e3 + 0.03)) < 1e-4"
expect "PCIe fcomm $pc = 16 all-reduces at 20 GB/s" "abs(${pc:-0} - 16 * (1.5 * 268435456 / 20e9 * 1e3 + 0.06)) < 1e-4"
expect "the forward $f ms contains its all-reduces" "${f:-0} > ${nv:-1}"
check "tensor_parallel 1: no all-reduce fields" test -z "$(cost a100_sxm_40g 1 fcomm)"

# --- 2. the RO op: syntax, print, diff, semantics, errors ------------------------------
cat >"$T/ro.pipe" <<'E'
pipeline ro {
  stages 1 microbatches 3
  costs { f 2ms b 4ms r 2ms fcomm 1ms bcomm 1ms rcomm 0.5ms act 4GiB ckpt 1GiB }
  stage 0 { F0 F1 RO0 F2 RO1 B0 B1 R2 B2 }
}
E
check "RO checks" q "$PIPEC_ASAN" check "$T/ro.pipe"
"$PIPEC_ASAN" print "$T/ro.pipe" >"$T/p1.pipe" && "$PIPEC_ASAN" print "$T/p1.pipe" >"$T/p2.pipe"
check "print keeps RO" grep -q "stage 0 { F0 F1 RO0 F2 RO1 B0 B1 R2 B2 }" "$T/p1.pipe"
check "print of print is the same" cmp -s "$T/p1.pipe" "$T/p2.pipe"
sed 's/RO1 B0/R1 B0/' "$T/ro.pipe" >"$T/r.pipe"
"$PIPEC_ASAN" diff "$T/ro.pipe" "$T/r.pipe" >"$T/diff.txt" 2>&1
check "diff shows RO1 against R1" grep -q "RO1" "$T/diff.txt"
# busy: F 3 x 2 + B 3 x 4 + R2 2 = 20, plus RO0 hosted by F2 (fcomm 1): rcomm 0.5 +
# (2 - 0.5 - 1) = 1.0, and RO1 hosted by B0 (bcomm 1): 1.0. With R1 instead: 2.
b=$(js "$T/ro.pipe" "busy[0]"); br=$(js "$T/r.pipe" "busy[0]")
expect "RO busy $b = 22" "abs($b - 22) < 1e-9"
expect "R in RO1's place busy $br = 23" "abs($br - 23) < 1e-9"
# without all-reduce time an RO costs what an R costs
sed 's/fcomm 1ms bcomm 1ms rcomm 0.5ms//' "$T/ro.pipe" >"$T/ro0.pipe"
sed 's/RO/R/g' "$T/ro0.pipe" >"$T/r0.pipe"
b0=$(js "$T/ro0.pipe" "j['makespan_ms']"); r0=$(js "$T/r0.pipe" "j['makespan_ms']")
expect "no all-reduces: RO makespan $b0 = R makespan $r0" "abs($b0 - $r0) < 1e-9"
# memory: an RO allocates act - ckpt at its list position, as R: at RO1, F0 and F1 hold
# 4 GiB each (their ROs ran), F2 its 1 GiB checkpoint
pk=$(js "$T/ro.pipe" "j['per_stage'][0]['peak_mem_bytes'] / 2**30")
expect "RO0 holds its activations from its position: peak $pk GiB = 9" "abs($pk - 9) < 1e-9"
# templates emit it: RO(i)
cat >"$T/tpl.pipe" <<'E'
template ro_tpl { stage 0 { F(0) RO(0) F(1) B(0) R(1) B(1) } }
pipeline t { stages 1 microbatches 2 costs { f 1ms b 2ms r 1ms } schedule ro_tpl }
E
check "template RO(i)" grep -q "F0 RO0 F1 B0 R1 B1" <("$PIPEC_ASAN" print "$T/tpl.pipe" 2>&1)
# errors: an RO without a host, inside its own backward, beside an R of its (v,m)
bad_case() { # NAME OPS CODE MESSAGE
    printf 'pipeline e {\n  stages 1 microbatches 2\n  stage 0 { %s }\n}\n' "$2" >"$T/e.pipe"
    "$PIPEC_ASAN" check "$T/e.pipe" >"$T/e.out" 2>&1
    local rc=$?
    if [ $rc = 1 ] && grep -q "error\[$3\]: $4" "$T/e.out"; then ok; else bad "$1" "$(head -n 2 "$T/e.out")"; fi
}
bad_case "RO without a host" "F0 F1 B0 B1 RO1" order "RO1 on stage 0 has no host"
bad_case "RO inside its own backward" "F0 RO0 B0 F1 B1" order "RO0 on stage 0 cannot run inside B0, which waits for it"
bad_case "R and RO of one (v,m)" "F0 F1 RO0 R0 B0 B1" duplicate "RO0 on stage 0: its (virtual stage, micro-batch) also has R0"
bad_case "RO before its forward" "RO0 F0 F1 B0 B1" order "RO0 is listed before F0 on stage 0, but it waits for it"
bad_case "RO after its backward" "F0 B0 RO0 F1 B1" order "B0 is listed before RO0 on stage 0, but it waits for it"

# --- 3. the passes on a small configuration: plans, fits, runs ------------------------
small() { # NAME MEMORY PASSES...
    local name=$1 mem=$2; shift 2
    {
        echo 'import "std/models.pipe"'; echo 'import "std/schedules.pipe"'; echo 'import "std/devices.pipe"'
        echo "pipeline $name {"
        echo "  stages 2  microbatches 4"
        echo "  model tiny { layers 4  hidden 16  seq 8  mbs 2 }  device cpu  memory $mem"
        echo "  tensor_parallel 2"
        echo "  schedule onef1b"
        for x in "$@"; do echo "  apply $x"; done
        echo "}"
    } >"$T/$name.pipe"
}
run_check() {
    local out err
    if ! out=$(timeout 60 "$PIPEC" run "$T/$1.pipe" --check --quiet --cache "$T/cache" 2>&1); then
        bad "$1 run --check" "$(echo "$out" | tail -n 2)"; return
    fi
    err=$(echo "$out" | sed -n 's/^max relative gradient error: //p')
    if [ -n "$err" ] && awk -v e="$err" 'BEGIN { exit !(e < 1e-5) }'; then ok; else bad "$1 run --check" "error '$err'"; fi
}
# 230 KiB: rank 0 (165 KiB of weights, two micro-batches of 36 KiB in flight) must
# recompute; rank 1 (one in flight) need not
small s_none 230KiB
check "small config does not fit without recomputation" test "$("$PIPEC_ASAN" check "$T/s_none.pipe" >/dev/null 2>&1; echo $?)" = 1
for passes in lynx_overlap lynx "lynx_overlap recompute_in_stalls" "lynx_overlap partition_balance" \
    "recompute(stages=0..=0,policy=full) lynx_overlap" "lynx_overlap recompute(stages=all,policy=full)"; do
    name="s_$(echo "$passes" | tr -c 'a-z0-9\n' '_')"
    # shellcheck disable=SC2086
    small "$name" 230KiB $passes
    check "$passes fits" q "$PIPEC_ASAN" check "$T/$name.pipe"
    run_check "$name"
done
nro=$(js "$T/s_lynx_overlap.pipe" nro)
expect "lynx_overlap overlaps recomputation on the small config ($nro ROs)" "$nro > 0"
small s_heu 230KiB lynx_overlap
"$PIPEC_ASAN" print "$T/s_heu.pipe" >"$T/heu1.pipe" 2>/dev/null
check "rank 1 keeps its activations" grep -q "stage 1 { F0 B0 F1 B1 F2 B2 F3 B3 }" "$T/heu1.pipe"
# idempotent, on the small config and on the examples (docs/passes.md)
for pass in lynx_overlap lynx "lynx_overlap(stages=0..=0)"; do
    for f in "$T/s_none.pipe" examples/lynx_gpt7b_full.pipe examples/lynx_gpt13b_full.pipe; do
        "$PIPEC_ASAN" opt "$f" --pass "$pass" -o "$T/o1.pipe" 2>"$T/o.err" || { bad "$pass on $f" "$(head -n 1 "$T/o.err")"; continue; }
        "$PIPEC_ASAN" opt "$f" --pass "$pass,$pass" -o "$T/o2.pipe" 2>/dev/null
        check "$pass idempotent on $(basename "$f")" cmp -s "$T/o1.pipe" "$T/o2.pipe"
    done
done
check "lynx needs a model" grep -q "error\[value\]: lynx needs a model" \
    <("$PIPEC_ASAN" opt "$T/ro.pipe" --pass lynx 2>&1)
# without a model lynx_overlap only moves the written R ops into hosts
sed 's/RO/R/g; s/F0 F1 R0 F2 B0 R1 B1/F0 F1 F2 R0 B0 R1 B1/' "$T/ro.pipe" >"$T/nm.pipe"
"$PIPEC_ASAN" opt "$T/nm.pipe" --pass lynx_overlap -o "$T/nm2.pipe" 2>/dev/null
check "no model: the R ops become ROs" grep -q "RO0" "$T/nm2.pipe"
check "no model: the result checks" q "$PIPEC_ASAN" check "$T/nm2.pipe"

# with Obscura's planner, whose swap pass names recomputes in `dep` lines: those ranks
# are left as they are, and the result checks both ways round. Each pass list is about
# 3 CPU s under the sanitizers (0.25 s without): `make test` runs them with the plain
# build (the sanitizer build runs lynx_overlap on lynx_gpt7b_full below, and Obscura's
# passes in test_passes_obscura), `make test-full` all three under the sanitizers.
for ps in lynx lynx_overlap "obscura,lynx_overlap"; do
    p=$PIPEC_ASAN
    test_full || p=$PIPEC
    "$p" opt examples/obscura_llama2_28b_gb32.pipe --pass "$ps" -o "$T/ob.pipe" 2>"$T/ob.err" ||
        { bad "$ps after obscura" "$(grep -m 1 error "$T/ob.err")"; continue; }
    check "$ps after obscura checks" q "$PIPEC_ASAN" check "$T/ob.pipe"
done

# random configurations (tensor parallel or not, one or two chunks): tests/t_passes.sh
# section 6 checks every output of lynx_overlap and lynx and that each is a fixed point

# --- 4. the reproduction of docs/lynx.md, run as documented ---------------------------
for f in examples/lynx_*.pipe; do
    check "$(basename "$f") fits" q "$PIPEC_ASAN" check "$f"
done
ratio() { # NAME: full makespan / lynx makespan
    local a b
    a=$(js "examples/$1_full.pipe" "j['makespan_ms']"); b=$(js "examples/$1_lynx.pipe" "j['makespan_ms']")
    python3 -c "print($a / $b)"
}
r7=$(ratio lynx_gpt7b); r7p=$(ratio lynx_gpt7b_pcie); r13=$(ratio lynx_gpt13b); r23=$(ratio lynx_gpt23b)
expect "GPT-7B NVLink: lynx beats full recomputation by $r7 >= 1.2x" "$r7 >= 1.2"
# Lynx's headline configuration (GPT-7B, PP 4, TP 4, A100-40GB, micro-batch 32): at
# least 1.26x, through Lynx-HEU's per-operator choice (the keep-sets: docs/lynx.md)
expect "GPT-7B NVLink: $r7 >= 1.26x full recomputation" "$r7 >= 1.26"
expect "GPT-7B PCIe: $r7p >= 1.2x" "$r7p >= 1.2"
expect "more gain on PCIe ($r7p > $r7)" "$r7p > $r7"
expect "GPT-13B: lynx faster ($r13)" "$r13 > 1.0"
expect "GPT-23B: lynx faster ($r23)" "$r23 > 1.0"
for m in gpt13b gpt23b; do
    for k in full lynx; do sed 's/a100_sxm_40g/a100_pcie_40g/' "examples/lynx_${m}_$k.pipe" >"$T/${m}_pcie_$k.pipe"; done
    check "$m PCIe lynx fits" q "$PIPEC_ASAN" check "$T/${m}_pcie_lynx.pipe"
    a=$(js "$T/${m}_pcie_full.pipe" "j['makespan_ms']"); b=$(js "$T/${m}_pcie_lynx.pipe" "j['makespan_ms']")
    rn=$(ratio "lynx_$m")
    expect "$m: more gain on PCIe ($a / $b against $rn)" "$a / $b > $rn"
done
# recompute on the critical path: Lynx-HEU on the even partition (Lynx Fig. 10a) and lynx
"$PIPEC_ASAN" opt examples/lynx_gpt7b_full.pipe --pass lynx_overlap -o "$T/heu.pipe" 2>/dev/null
check "Lynx-HEU on the even partition fits" q "$PIPEC_ASAN" check "$T/heu.pipe"
rf=$(js examples/lynx_gpt7b_full.pipe rec); rh=$(js "$T/heu.pipe" rec); rl=$(js examples/lynx_gpt7b_lynx.pipe rec)
nro=$(js "$T/heu.pipe" nro)
expect "HEU overlaps recomputes ($nro ROs)" "$nro > 0"
expect "HEU leaves less than half the recompute time on the critical path ($rh of $rf ms)" "$rh < 0.5 * $rf"
expect "lynx leaves less than HEU ($rl < $rh ms)" "$rl < $rh"
mh=$(js "$T/heu.pipe" "j['makespan_ms']"); mf=$(js examples/lynx_gpt7b_full.pipe "j['makespan_ms']")
expect "HEU alone beats full recomputation ($mf / $mh)" "$mf / $mh > 1.05"

# Lynx Fig. 10b: GPT-13B at micro-batch 32 fits only with layer-granular recomputation
# (docs/lynx.md "Micro-batch 32 and layer granularity"): both examples pass check, the
# whole-stage variant is over its budget, lynx beats full recomputation, and Lynx-HEU
# hides more of the later stages' recomputation than of the first ones'.
for k in full lynx; do
    check "GPT-13B mbs 32 $k (granularity layer) fits" q "$PIPEC_ASAN" check "examples/lynx_gpt13b_mb32_$k.pipe"
done
sed 's/ granularity layer//' examples/lynx_gpt13b_mb32_full.pipe >"$T/mb32_stage.pipe"
"$PIPEC_ASAN" check "$T/mb32_stage.pipe" >"$T/mb32_stage.out" 2>&1
check "GPT-13B mbs 32, whole-stage recomputation: over the budget" grep -q "error\[memory\]: stage 0 needs" "$T/mb32_stage.out"
m32f=$(js examples/lynx_gpt13b_mb32_full.pipe "j['makespan_ms']"); m32l=$(js examples/lynx_gpt13b_mb32_lynx.pipe "j['makespan_ms']")
expect "GPT-13B mbs 32: lynx beats full recomputation ($m32f / $m32l >= 1.2)" "$m32f / $m32l >= 1.2"
sed 's/apply lynx/apply lynx_overlap/' examples/lynx_gpt13b_mb32_lynx.pipe >"$T/mb32_heu.pipe"
# per rank: the recompute time on the critical path under HEU over full's (Fig. 10b)
prk='[sum(e["dur"] for e in x if e.get("cat") in ("R", "RO") and e["pid"] == r) for r in range(4)]'
hf=$(js examples/lynx_gpt13b_mb32_full.pipe "$prk"); hh=$(js "$T/mb32_heu.pipe" "$prk")
expect "GPT-13B mbs 32 HEU: stages 2-3 hide more than stages 0-1 ($hh of $hf us)" \
    "max($hh[2:]) < min($hh[:2]) and all(a < b for a, b in zip($hh, $hf))"

# --- 5. pipec tune tries both ---------------------------------------------------------
# (600 variants: 25 CPU s under the sanitizers, 5 s without; `make test` runs the plain
# build, t_tune.sh a small search with the sanitizers; `make test-full` the sanitizers)
p=$PIPEC; test_full && p=$PIPEC_ASAN
"$p" tune examples/lynx_gpt7b_lynx.pipe >"$T/tune.txt" 2>/dev/null
check "tune tries lynx_overlap" grep -q "| lynx_overlap" "$T/tune.txt"
check "tune tries lynx" grep -qE "\| lynx( |\$)" "$T/tune.txt"
finish
