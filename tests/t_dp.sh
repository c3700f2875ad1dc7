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

finish
