#!/usr/bin/env bash
# t_dp.sh - data parallelism (docs/language.md "Data parallelism", docs/cost-model.md
# "Data parallelism"): the settings `data_parallel`, `zero`, `grad_dtype` (parsing,
# `pipec print`, `--set`), and what sim counts with them.
#
# Expected figures are ratios that follow from the definitions (docs/simulator.md):
# tokens_per_s = M x mbs x seq x D / makespan, mfu = flops / (makespan x P x tp x D x
# peak) with the flops of all D replicas, so tokens_per_s(D) / tokens_per_s(1) =
# D x makespan(1) / makespan(D) and mfu(D) / mfu(1) = makespan(1) / makespan(D).
cd "$(dirname "$0")/.."
. tests/lib.sh
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
P=$PIPEC_ASAN

cat >"$tmp/l7.pipe" <<'PIPE'
import "std/schedules.pipe"
import "std/models.pipe"
import "std/devices.pipe"
pipeline l7 {
  stages 4
  microbatches 8
  model llama2_7b
  device a100_sxm_80g
  schedule onef1b
}
PIPE
L=$tmp/l7.pipe

# --- settings: print -------------------------------------------------------------------
"$P" print "$L" >"$tmp/p0" 2>&1
check "print without the settings: no data_parallel line" bash -c "! grep -qE '^  (data_parallel|zero|grad_dtype) ' '$tmp/p0'"
"$P" print "$L" --set data_parallel=8 --set zero=1 --set grad_dtype=fp32 >"$tmp/p1" 2>&1
check "print: data_parallel when set" grep -qx '  data_parallel 8' "$tmp/p1"
check "print: zero when set" grep -qx '  zero 1' "$tmp/p1"
check "print: grad_dtype when set" grep -qx '  grad_dtype fp32' "$tmp/p1"
"$P" print "$L" --set data_parallel=1 --set zero=0 --set grad_dtype=bf16 >"$tmp/p2" 2>&1
check "print: the defaults written out print as nothing" bash -c "! grep -qE '^  (data_parallel|zero|grad_dtype) ' '$tmp/p2'"
cp "$tmp/p1" "$tmp/p1.pipe"
"$P" print "$tmp/p1.pipe" >"$tmp/p1b" 2>&1
check "print of the printed form is the same text" cmp -s "$tmp/p1" "$tmp/p1b"
printf 'pipeline z { stages 1 microbatches 1 zero 2 zero 3 stage 0 { F0 B0 } }\n' >"$tmp/dup.pipe"
"$P" check "$tmp/dup.pipe" >"$tmp/out" 2>&1
check "zero set twice: value error at the second" grep -q "dup.pipe:1:45: error\[value\]: 'zero' is already set" "$tmp/out"

# --- settings: bad --set values, located in the override ------------------------------
"$P" check "$L" --set data_parallel=0 >"$tmp/out" 2>&1
check "--set data_parallel=0: exit 1" test $? = 1
check "--set data_parallel=0: value error at the value" grep -qx -- "--set:1:15: error\[value\]: 'data_parallel' must be at least 1 (got 0)" "$tmp/out"
"$P" check "$L" --set zero=5 >"$tmp/out" 2>&1
check "--set zero=5: value error at the value" grep -qx -- "--set:1:6: error\[value\]: 'zero' is the ZeRO stage: 0, 1, 2 or 3 (got 5)" "$tmp/out"
"$P" check "$L" --set grad_dtype=fp8 >"$tmp/out" 2>&1
check "--set grad_dtype=fp8: value error at the value" grep -qx -- "--set:1:12: error\[value\]: unknown grad_dtype 'fp8': bf16 or fp32" "$tmp/out"

# --- sim: tokens_per_s and mfu count the replicas --------------------------------------
"$P" sim --json "$L" >"$tmp/j1" 2>&1
"$P" sim --json "$L" --set data_parallel=8 >"$tmp/j8" 2>&1
check "tokens_per_s counts the D replicas" python3 - "$tmp/j1" "$tmp/j8" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
want = 8 * a["tokens_per_s"] * a["makespan_ms"] / b["makespan_ms"]
assert abs(b["tokens_per_s"] / want - 1) < 1e-12, (a, b)
assert abs(b["mfu"] / (a["mfu"] * a["makespan_ms"] / b["makespan_ms"]) - 1) < 1e-12
PY

# --- memory: stage 0's weights against Megatron-LM's theoretical memory -----------------
# An independent oracle: Megatron-LM's compute_weight_and_optimizer_memory
# (megatron/training/theoretical_memory_usage.py), re-typed below: the most loaded
# shard is (the transformer block / PP + one embedding) / TP, the vocabulary padded to
# a multiple of 128 x TP, at 18 bytes per parameter, or 6 + 12/DP with the distributed
# optimizer. pipec's stage 0 (grad_dtype fp32; zero 0, or zero 1 for the distributed
# optimizer) must be within 1% (docs/cost-model.md "Data parallelism").
cat >"$tmp/mp.pipe" <<'PIPE'
import "std/schedules.pipe"
import "std/models.pipe"
import "std/devices.pipe"
pipeline mp {
  stages 8
  microbatches 8
  model llama2_70b
  device h100_sxm_80g
  memory 1000GiB
  grad_dtype fp32
  schedule onef1b
}
PIPE
megatron_case() { # NAME MODEL TP DP ZERO H L A G F VOCAB LLAMA
    local out
    out=$("$PIPEC" sim --json "$tmp/mp.pipe" --set "model=$2" --set tensor_parallel="$3" \
          --set data_parallel="$4" --set zero="$5" 2>&1)
    check "Megatron stage-0 weights within 1%: $1" python3 - "$out" "${@:3}" <<'PY'
import json, math, sys
got = json.loads(sys.argv[1])["per_stage"][0]["static_mem_bytes"]
tp, dp, zero, h, L, a, g, f, vocab, llama = map(float, sys.argv[2:12])
pp = 8
padded = math.ceil(vocab / (128 * tp)) * 128 * tp
norm = 1 if llama else 2
layer = 2 * h * (f * (1.5 if llama else 1) + norm) + 2 * h * h * (1 + g / a)
most = ((layer * L + norm * h) / pp + h * padded) / tp
want = most * (18 if zero == 0 else 6 + 12 / dp)
print(f"    pipec {got / 2**30:.3f} GiB, Megatron {want / 2**30:.3f} GiB, {100 * (got / want - 1):+.2f}%")
assert abs(got / want - 1) < 0.01
PY
}
megatron_case "Llama-2 70B PP8 TP8 DP8" llama2_70b 8 8 0 8192 80 64 8 28672 32000 1
megatron_case "Llama-2 70B PP8 TP8 DP8 distributed optimizer" llama2_70b 8 8 1 8192 80 64 8 28672 32000 1
megatron_case "GPT-3 28B PP8 TP4 DP16" gpt3_28b 4 16 0 5120 88 40 40 20480 50304 0
megatron_case "GPT-3 28B PP8 TP4 DP16 distributed optimizer" gpt3_28b 4 16 1 5120 88 40 40 20480 50304 0
megatron_case "GPT-3 175B PP8 TP8 DP8 distributed optimizer" \
    "gpt3_28b { layers 96 hidden 12288 heads 96 ffn 49152 }" 8 8 1 12288 96 96 96 49152 50304 0

# --- memory: the ZeRO stages on a hand-computed stage ------------------------------------
# llama2_70b, 8 stages, tensor_parallel 8: stage 1 holds 10 layers of
# 3hf + h + h(h + 2 kv) + h^2 + h, kv = 8 x 128 = 1024: 704,643,072 + 8,192 + 83,886,080
# + 67,108,864 + 8,192 = 855,654,400 parameters / 8 = 106,956,800 each: 1,069,568,000 on
# the rank. At D = 8: zero 0 16 bytes = 17,113,088,000; zero 1 4 + 12/8 = 5.5 ->
# 5,882,624,000; zero 2 2 + 14/8 = 3.75 -> 4,010,880,000; zero 3 16/8 = 2 ->
# 2,139,136,000 plus a layer's 2-byte gather 213,913,600 = 2,353,049,600. fp32
# gradients at zero 0: 18 -> 19,252,224,000.
zero_case() { # ZERO GRAD WANT
    local got
    got=$("$PIPEC" sim --json "$tmp/mp.pipe" --set tensor_parallel=8 --set data_parallel=8 \
          --set zero="$1" --set grad_dtype="$2" 2>&1 |
          python3 -c 'import json,sys; print(int(json.load(sys.stdin)["per_stage"][1]["static_mem_bytes"]))')
    check "stage 1 weights, zero $1, $2: $3" test "$got" = "$3"
}
zero_case 0 bf16 17113088000
zero_case 1 bf16 5882624000
zero_case 2 bf16 4010880000
zero_case 3 bf16 2353049600
zero_case 0 fp32 19252224000

# --- time: the data-parallel stream on a hand-computed pipeline ---------------------------
# docs/cost-model.md "Data-parallel time", docs/spec.md "Time". Two stages, gpipe, f 1 ms,
# b 2 ms, no p2p: stage 1 runs F0 1-2, F1 2-3, B0 3-5, B1 5-7; stage 0 F0 0-1, F1 1-2,
# B0 5-7, B1 7-9: makespan 9 ms without the stream. Each virtual stage has 1e6
# parameters; D = 2 replicas over 1 GB/s and 0.1 ms per ring step; mem_bw 28 GB/s.
#  zero 0: all-reduce of 2e6 bf16 gradient bytes, 2 (D-1)/D x 2e6 / 1e9 s + 2 (D-1) x 0.1
#    = 2 + 0.2 = 2.2 ms; the step updates 1e6 parameters x 28 bytes / 28 GB/s = 1 ms.
#    Stage 1: reduce 7-9.2, step 9.2-10.2; stage 0: reduce 9-11.2, step 11.2-12.2.
#    Makespan 12.2, exposed 3.2 (stage 0) and 1.2 (stage 1).
#  zero 1 (and 2): reduce-scatter (D-1)/D x 2e6 / 1e9 + 0.1 = 1.1 ms; step on the 5e5
#    parameters of the shard, 0.5 ms; all-gather of the 2e6 bf16 parameter bytes, 1.1 ms.
#    Stage 0: 9-10.1, 10.1-10.6, 10.6-11.7; stage 1 ends 7 + 2.7 = 9.7. Makespan 11.7.
#  zero 3: an all-gather (1.1 ms) before every F and B, from when the rank's previous
#    op started (or 0): stage 0 gathers 0-1.1, F0 1.1-2.1, gathers 1.1-2.2, F1 2.2-3.2;
#    stage 1 gathers 0-1.1, F0 2.1-3.1, gathers 2.1-3.2, F1 3.2-4.2, gathers 3.2-4.3,
#    B0 4.3-6.3, gathers 4.3-5.4, B1 6.3-8.3, reduce-scatter 8.3-9.4, step 9.4-9.9;
#    stage 0 gathers 2.2-3.3, B0 6.3-8.3, gathers 6.3-7.4, B1 8.3-10.3, reduce-scatter
#    10.3-11.4, step 11.4-11.9. Makespan 11.9, 4 gathers of 1.1 ms per stage.
#  zero 0, fp32 gradients: all-reduce of 4e6 bytes, 4.2 ms; step 30 bytes per parameter,
#    30/28 ms: makespan 9 + 4.2 + 30/28.
cat >"$tmp/h.pipe" <<'PIPE'
pipeline h {
  stages 2
  microbatches 2
  data_parallel 2
  costs { f 1ms b 2ms params 1000000 dp_bw 1GB/s dp_latency 0.1ms mem_bw 28GB/s }
  stage 0 { F0 F1 B0 B1 }
  stage 1 { F0 F1 B0 B1 }
}
PIPE
dp_time_case() { # NAME MAKESPAN EXPOSED EXPOSED1 REDUCE GATHER OPT SETTINGS...
    local name=$1 want="$2 $3 $4 $5 $6 $7"
    shift 7
    "$P" sim --json "$tmp/h.pipe" "$@" >"$tmp/hj" 2>&1
    check "dp time by hand: $name" python3 - "$tmp/hj" $want <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ms, ex, ex1, red, gat, opt = map(float, sys.argv[2:8])
close = lambda a, b: abs(a - b) <= 1e-9 * max(1, abs(b))
got = (d["makespan_ms"], d["dp_exposed_ms"], d["per_stage"][1]["dp_exposed_ms"],
       d["per_stage"][0]["dp_reduce_ms"], d["per_stage"][0]["dp_gather_ms"],
       d["per_stage"][0]["opt_ms"])
assert all(close(a, b) for a, b in zip(got, (ms, ex, ex1, red, gat, opt))), got
assert close(d["per_stage"][0]["dp_exposed_ms"], ex), d["per_stage"][0]
PY
}
dp_time_case "zero 0: all-reduce, step" 12.2 3.2 1.2 2.2 0 1
dp_time_case "zero 1: reduce-scatter, step on the shard, all-gather" 11.7 2.7 0.7 1.1 1.1 0.5 --set zero=1
dp_time_case "zero 2: as zero 1" 11.7 2.7 0.7 1.1 1.1 0.5 --set zero=2
dp_time_case "zero 3: gathers before every F and B" 11.9 2.9 0.9 1.1 4.4 0.5 --set zero=3
dp_time_case "zero 0, fp32 gradients" "$(python3 -c 'print(9 + 4.2 + 30 / 28)')" \
    "$(python3 -c 'print(4.2 + 30 / 28)')" "$(python3 -c 'print(1.2 + 2 + 30 / 28 - 1)')" \
    4.2 0 "$(python3 -c 'print(30 / 28)')" --set grad_dtype=fp32
"$P" sim --json "$tmp/h.pipe" --set data_parallel=1 >"$tmp/hj" 2>&1
check "dp time: one replica, makespan 9 and no data-parallel keys" python3 - "$tmp/hj" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["makespan_ms"] == 9.0 and "dp_exposed_ms" not in d, d
assert not any(k.startswith("dp_") or k == "opt_ms" for k in d["per_stage"][0]), d
PY
"$P" sim "$tmp/h.pipe" --set zero=1 --trace "$tmp/ht.json" >/dev/null 2>&1
check "trace: the data-parallel thread with zero 1's items at their hand-computed times" python3 - "$tmp/ht.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
got = sorted((e["pid"], e["tid"], e["name"], e["ts"], e["dur"]) for e in ev if e.get("cat") == "dp")
want = sorted([(0, 3, "reduce.0", 9000, 1100), (0, 0, "opt.0", 10100, 500),
               (0, 3, "all-gather.0", 10600, 1100), (1, 3, "reduce.0", 7000, 1100),
               (1, 0, "opt.0", 8100, 500), (1, 3, "all-gather.0", 8600, 1100)])
assert got == want, got
assert any(e.get("name") == "thread_name" and e.get("tid") == 3 for e in ev)
PY
"$P" sim "$tmp/h.pipe" --set data_parallel=1 --trace "$tmp/ht1.json" >/dev/null 2>&1
check "trace with one replica: no data-parallel thread" bash -c "! grep -q 'data parallel' '$tmp/ht1.json'"
"$P" sim "$tmp/h.pipe" >"$tmp/ht" 2>&1
check "sim text: the data-parallel table" grep -qE '^ +0 +2\.200 +0\.000 +1\.000 +3\.200$' "$tmp/ht"
check "sim text: the exposed time" grep -q 'data parallel 2 replicas, zero 0, bf16 gradients: the iteration ends 3.200 ms later' "$tmp/ht"
printf 'pipeline z { stages 1 microbatches 1 costs { dp_bw 0 } stage 0 { F0 B0 } }\n' >"$tmp/z.pipe"
"$P" check "$tmp/z.pipe" >"$tmp/out" 2>&1
check "dp_bw 0: value error at the value" grep -q "z.pipe:1:52: error\[value\]: cost 'dp_bw' must be positive" "$tmp/out"
printf 'pipeline z { stages 1 microbatches 1 costs { params 2e15 } stage 0 { F0 B0 } }\n' >"$tmp/z.pipe"
"$P" check "$tmp/z.pipe" >"$tmp/out" 2>&1
check "params above 2^50: limit error at the value" grep -q "z.pipe:1:53: error\[limit\]: cost 'params' exceeds the limit of 2^50" "$tmp/out"

# --- time: derived from the model and the device ----------------------------------------
# llama2_70b stage 1, tensor_parallel 8 (1,069,568,000 parameters on the rank, above) on
# h100_sxm_80g (dp_bw 50 GB/s, dp_latency 10 us, mem_bw 3350 GB/s), D = 8, zero 1:
# reduce-scatter 7/8 x 2 x 1,069,568,000 / 50e9 s + 7 x 0.01 ms = 37.43488 + 0.07 ms;
# the step 1,069,568,000 / 8 x 28 / 3350e9 s; the all-gather as the reduce-scatter.
"$PIPEC" print "$tmp/mp.pipe" --set tensor_parallel=8 --set data_parallel=8 --set zero=1 >"$tmp/mpp" 2>&1
check "print: derived params of a virtual stage" grep -q 'params 1069568000' "$tmp/mpp"
check "print: derived dp_bw and dp_latency" grep -q 'dp_bw 50GB/s dp_latency 0.01ms mem_bw 3350GB/s' "$tmp/mpp"
"$PIPEC" sim --json "$tmp/mp.pipe" --set tensor_parallel=8 --set data_parallel=8 --set zero=1 \
    --set grad_dtype=bf16 >"$tmp/mj" 2>&1
check "derived reduce-scatter, step and all-gather of stage 1" python3 - "$tmp/mj" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["per_stage"][1]
n = 1069568000
rs = 7 / 8 * 2 * n / 50e9 * 1e3 + 7 * 0.01
opt = n / 8 * 28 / 3350e9 * 1e3
for k, want in (("dp_reduce_ms", rs), ("dp_gather_ms", rs), ("opt_ms", opt)):
    assert abs(s[k] / want - 1) < 1e-6, (k, s[k], want)
PY
cp "$tmp/mpp" "$tmp/mpp.pipe"
"$PIPEC" sim --json "$tmp/mpp.pipe" >"$tmp/mj2" 2>&1
"$PIPEC" sim --json "$tmp/mp.pipe" --set tensor_parallel=8 --set data_parallel=8 --set zero=1 >"$tmp/mj" 2>&1
check "the printed form simulates the same data-parallel time" python3 - "$tmp/mj" "$tmp/mj2" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
for k in ("makespan_ms", "dp_exposed_ms"):
    assert a[k] == b[k], (k, a[k], b[k])
assert a["per_stage"] == b["per_stage"]
PY
"$PIPEC" print "$L" >"$tmp/p1d" 2>&1
check "print with one replica: no data-parallel cost fields" bash -c "! grep -qE 'params|dp_bw|dp_latency|mem_bw' '$tmp/p1d'"

# --- time: overlap with the cooldown ------------------------------------------------------
# A reduction starts when its virtual stage's last B or W ends. gpipe's stage 0 ends the
# iteration with its last B, so its reduction, step and all-gather are all exposed; zbv
# (zero-bubble V, ending with W ops) puts each rank's later chunk's backward early, and
# that chunk's reduction runs during the cooldown: less is exposed.
sed 's/schedule onef1b/schedule gpipe/' "$L" >"$tmp/g.pipe"
sed 's/schedule onef1b/chunks 2 vshape\n  schedule zbv/' "$L" >"$tmp/v.pipe"
"$PIPEC" sim --json "$tmp/g.pipe" --set data_parallel=8 --set zero=1 --set memory=1000GiB >"$tmp/gj" 2>&1
"$PIPEC" sim --json "$tmp/v.pipe" --set data_parallel=8 --set zero=1 --set memory=1000GiB >"$tmp/vj" 2>&1
check "gpipe exposes stage 0's reduction, step and all-gather whole" python3 - "$tmp/gj" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["per_stage"][0]
want = s["dp_reduce_ms"] + s["opt_ms"] + s["dp_gather_ms"]
assert abs(d["dp_exposed_ms"] - want) < 1e-6 * want, (d["dp_exposed_ms"], want)
assert d["per_stage"][3]["dp_exposed_ms"] == 0, d["per_stage"][3]
PY
check "zbv hides more of the reduction than gpipe" python3 - "$tmp/gj" "$tmp/vj" <<'PY'
import json, sys
g, v = (json.load(open(f)) for f in sys.argv[1:3])
assert 0 < v["dp_exposed_ms"] < g["dp_exposed_ms"], (v["dp_exposed_ms"], g["dp_exposed_ms"])
PY
"$PIPEC" sim --json "$L" --set data_parallel=8 --set zero=3 >"$tmp/z3" 2>&1
"$PIPEC" sim --json "$L" --set data_parallel=8 --set zero=2 >"$tmp/z2" 2>&1
check "zero 3's gathers add time to zero 2's" python3 - "$tmp/z2" "$tmp/z3" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert b["makespan_ms"] > a["makespan_ms"], (a["makespan_ms"], b["makespan_ms"])
assert all(y["dp_gather_ms"] > x["dp_gather_ms"] for x, y in zip(a["per_stage"], b["per_stage"]))
PY

# --- the example: Llama-2 70B fits with zero 1, not with zero 0 ---------------------------
E=examples/llama2_70b_zero1.pipe
"$P" check "$E" >"$tmp/out" 2>&1
check "llama2_70b_zero1 fits with data_parallel 8, zero 1" test $? = 0
"$P" check "$E" --set zero=0 >"$tmp/out" 2>&1
check "llama2_70b_zero1 with zero 0: exit 1" test $? = 1
check "llama2_70b_zero1 with zero 0: a memory error in the file" grep -q "^$E:[0-9]*:[0-9]*: error\[memory\]: stage 1 needs" "$tmp/out"
# With D = 1 zero 1 shards over one replica: the same 16 bytes as zero 0, and no fit.
"$P" check "$E" --set data_parallel=1 >"$tmp/out" 2>&1
check "llama2_70b_zero1 with data_parallel 1: memory error" grep -q "error\[memory\]" "$tmp/out"

# --- compare and tune read the settings --------------------------------------------------
"$PIPEC" compare --format json "$L" --set data_parallel=1,8 >"$tmp/c.json" 2>&1
check "compare --set data_parallel=1,8: tokens/s x 8 x makespan ratio" python3 - "$tmp/c.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
rows = rows["rows"] if isinstance(rows, dict) else rows
a, b = rows
assert a["set"] == "data_parallel=1" and b["set"] == "data_parallel=8", (a["set"], b["set"])
want = 8 * a["tokens_per_s"] * a["makespan_ms"] / b["makespan_ms"]
assert abs(b["tokens_per_s"] / want - 1) < 1e-12, (a, b)
PY
"$PIPEC" compare --format json "$E" --set zero=0,1 >"$tmp/c.json" 2>&1
check "compare --set zero=0,1: the example fits only with zero 1" python3 - "$tmp/c.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
rows = rows["rows"] if isinstance(rows, dict) else rows
assert [r["fits"] for r in rows] == [False, True], rows
PY
"$PIPEC" tune --json "$L" --set data_parallel=8 --set zero=0 >"$tmp/t0.json" 2>/dev/null
"$PIPEC" tune --json "$L" --set data_parallel=8 --set zero=1 >"$tmp/t1.json" 2>/dev/null
check "tune: every variant's peaks are lower with zero 1" python3 - "$tmp/t0.json" "$tmp/t1.json" <<'PY'
import json, sys
a, b = ({v["name"]: v for v in json.load(open(f))["variants"]} for f in sys.argv[1:3])
common = set(a) & set(b)
assert common, (a.keys(), b.keys())
for n in common:
    assert all(x > y for x, y in zip(a[n]["peak_mem_bytes"], b[n]["peak_mem_bytes"])), n
PY
"$PIPEC" compare --format json "$L" --set data_parallel=1,8 >"$tmp/c.json" 2>&1
"$PIPEC" sim --json "$L" --set data_parallel=8 >"$tmp/s8.json" 2>&1
check "compare --set data_parallel=1,8: the exposed reduction lengthens the makespan" python3 - "$tmp/c.json" "$tmp/s8.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
rows = rows["rows"] if isinstance(rows, dict) else rows
s8 = json.load(open(sys.argv[2]))
a, b = rows
assert s8["dp_exposed_ms"] > 0
assert abs(b["makespan_ms"] - a["makespan_ms"] - s8["dp_exposed_ms"]) < 1e-6 * b["makespan_ms"], (a, b)
PY
"$PIPEC" tune --json "$L" --set data_parallel=1 >"$tmp/tu1.json" 2>/dev/null
"$PIPEC" tune --json "$L" --set data_parallel=8 >"$tmp/tu8.json" 2>/dev/null
check "tune: every variant's makespan grows with the exposed reduction at data_parallel 8" python3 - "$tmp/tu1.json" "$tmp/tu8.json" <<'PY'
import json, sys
a, b = ({v["name"]: v for v in json.load(open(f))["variants"]} for f in sys.argv[1:3])
common = [n for n in set(a) & set(b) if a[n]["makespan_ms"] is not None and b[n]["makespan_ms"] is not None]
assert common, (a.keys(), b.keys())
for n in common:
    assert b[n]["makespan_ms"] > a[n]["makespan_ms"], (n, a[n]["makespan_ms"], b[n]["makespan_ms"])
PY
"$PIPEC" tune "$L" --set data_parallel=8 --set zero=1 -o "$tmp/best.pipe" >/dev/null 2>&1
check "tune -o writes the data-parallel settings" grep -q '^  data_parallel 8$' "$tmp/best.pipe"
check "tune -o writes zero" grep -q '^  zero 1$' "$tmp/best.pipe"

finish
