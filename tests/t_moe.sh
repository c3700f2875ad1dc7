#!/usr/bin/env bash
# t_moe.sh - mixture of experts (docs/language.md "Expert parallelism", docs/cost-model.md
# "Mixture of experts"): the setting `expert_parallel` (print, --set, its errors), the
# stdlib Mixtrals and examples/mixtral_8x7b.pipe, and what check, sim and compare make of
# expert parallelism. The formulas themselves are unit-tested by hand in
# tests/unit/test_costmodel.c (test_moe_*); the figures here are derived in the comments.
cd "$(dirname "$0")/.."
. tests/lib.sh
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
P=$PIPEC_ASAN
X=examples/mixtral_8x7b.pipe

# --- print, --set ----------------------------------------------------------------------
"$P" print "$X" >"$tmp/p8" 2>&1
check "print: exit 0" test $? = 0
check "print: writes expert_parallel" grep -qx '  expert_parallel 8' "$tmp/p8"
"$P" print "$X" --set expert_parallel=1 >"$tmp/p1" 2>&1
check "print: expert_parallel 1 (the default) is not written" bash -c "! grep -q expert_parallel '$tmp/p1'"
check "print: the printed form checks" bash -c "'$P' check '$tmp/p8' >/dev/null 2>&1"
s8=$("$P" sim --json "$X" | python3 -c 'import json,sys; print(json.load(sys.stdin)["makespan_ms"])')
r8=$("$P" sim --json "$tmp/p8" | python3 -c 'import json,sys; print(json.load(sys.stdin)["makespan_ms"])')
check "print: the printed form simulates the same" test -n "$s8" -a "$s8" = "$r8"
"$P" check "$X" --set expert_parallel=3 >"$tmp/out" 2>&1
check "--set expert_parallel=3: exit 1" test $? = 1
check "--set expert_parallel=3: does not divide data_parallel, at the value" \
    grep -qx -- "--set:1:17: error\[value\]: expert_parallel 3 does not divide data_parallel 8" "$tmp/out"
"$P" check "$X" --set data_parallel=12 --set expert_parallel=3 >"$tmp/out" 2>&1
check "--set expert_parallel=3 with data_parallel 12: does not divide the 8 experts" \
    grep -qx -- "--set:1:1: error\[value\]: expert_parallel 3 does not divide the 8 experts of model 'mixtral_8x7b'" "$tmp/out"

# --- the stdlib models check -------------------------------------------------------------
for m in mixtral_8x7b mixtral_8x22b; do
    printf 'import "std/schedules.pipe"\nimport "std/models.pipe"\nimport "std/devices.pipe"\npipeline q { stages 8 microbatches 8 model %s device h200 data_parallel 8 expert_parallel 8 zero 1 schedule onef1b }\n' "$m" >"$tmp/$m.pipe"
    "$P" sim "$tmp/$m.pipe" >/dev/null 2>&1
    check "$m: simulates" test $? = 0
done

# --- check: the example fits with expert_parallel 8, not with 1 ---------------------------
"$P" check "$X" >"$tmp/out" 2>&1
check "$X: fits" test $? = 0
"$P" check "$X" --set expert_parallel=1 >"$tmp/out" 2>&1
check "$X with expert_parallel 1: memory error on stage 0" grep -q "error\[memory\]: stage 0 needs" "$tmp/out"

# --- compare: expert_parallel changes the makespan and the peaks ---------------------------
# Stage 1 holds 8 layers, each with 8 experts of 3 h F = 176,160,768 parameters. With
# E = 1 it keeps all 64 (1,409,286,144 x 8) at zero 1's 4 + 12/8 = 5.5 bytes (D/E = 8);
# with E = 8 one per layer (1,409,286,144) at 16 bytes (D/E = 1): 1,409,286,144 x (44 - 16)
# = 39,460,012,032 bytes less (activations are the same). Time: every F and B of a stage
# gains 8 layers x 2 all-to-alls of (E-1) x 5 us + (E-1)/E x e T h K / 450 GB/s =
# 0.035 + 0.875 x 67,108,864 B / 450e9 B/s = 0.16548944 ms each: 2.647831 ms; 1F1B's
# makespan before the data-parallel stream (makespan - dp_exposed_ms), (M + P - 1) (f + b)
# + the p2p terms, grows by 19 x 2 x 2.647831 = 100.618 ms. compare's makespan is sim's.
"$PIPEC" compare --format json "$X" --set expert_parallel=1,8 >"$tmp/c.json" 2>&1
"$PIPEC" sim --json "$X" --set expert_parallel=1 >"$tmp/s1.json" 2>/dev/null
"$PIPEC" sim --json "$X" >"$tmp/s8.json" 2>/dev/null
check "compare --set expert_parallel=1,8: compute makespan +100.618 ms, stage 1's peak -39,460,012,032 bytes" \
    python3 - "$tmp/c.json" "$tmp/s1.json" "$tmp/s8.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
rows = rows["rows"] if isinstance(rows, dict) else rows
a, b = rows
s1, s8 = (json.load(open(f)) for f in sys.argv[2:4])
assert a["set"] == "expert_parallel=1" and b["set"] == "expert_parallel=8", (a["set"], b["set"])
assert abs(a["makespan_ms"] - s1["makespan_ms"]) < 1e-6 and abs(b["makespan_ms"] - s8["makespan_ms"]) < 1e-6
c1, c8 = (s["makespan_ms"] - s["dp_exposed_ms"] for s in (s1, s8))
assert abs(c8 - c1 - 100.618) < 0.002, (c1, c8)
pa, pb = a["peak_mem_bytes_per_stage"][1], b["peak_mem_bytes_per_stage"][1]
assert abs(pa - pb - 39460012032) <= 2, (pa, pb)
assert [a["fits"], b["fits"]] == [False, True], (a["fits"], b["fits"])
PY
# --- the data-parallel stream: experts reduce over the D / E replicas that hold them ------
# Stage 1 has 1,745,158,144 parameters, 1,409,286,144 of them in its one expert per layer
# (E = 8): with D = 8, D / E = 1 replica holds each expert, so only the 335,872,000 dense
# ones are reduce-scattered over the 8 replicas (zero 1, bf16 gradients, h100_sxm_80g's
# 50 GB/s and 10 us): 7/8 x 671,744,000 B / 50e9 B/s + 7 x 0.01 ms = 11.82552 ms, and the
# step updates 335,872,000 / 8 dense + all 1,409,286,144 expert parameters at 28 B each
# over 3350 GB/s: 12.130019 ms. With E = 1 the stage holds all 8 experts of its layers
# (8 x 1,409,286,144) and reduces them with the dense ones over the 8 replicas:
# 7/8 x 2 x 11,610,161,152 B / 50e9 B/s + 0.07 ms = 406.42564 ms (one collective).
check "sim: stage 1 reduces only its dense parameters at expert_parallel 8 (11.82552 ms, step 12.130019 ms)" \
    python3 - "$tmp/s1.json" "$tmp/s8.json" <<'PY'
import json, sys
s1, s8 = (json.load(open(f))["per_stage"][1] for f in sys.argv[1:3])
assert abs(s8["dp_reduce_ms"] - 11.82552) < 1e-6, s8["dp_reduce_ms"]
assert abs(s8["opt_ms"] - 12.130019) < 1e-5, s8["opt_ms"]
assert abs(s1["dp_reduce_ms"] - 406.42564) < 1e-5, s1["dp_reduce_ms"]
PY

# tune reads it too: with E = 1 nothing fits without recomputation or passes, so the
# plain schedule as written is a variant only with E = 8
"$PIPEC" tune --json "$X" --set expert_parallel=1 >"$tmp/t1.json" 2>/dev/null
"$PIPEC" tune --json "$X" >"$tmp/t8.json" 2>/dev/null
check "tune: the schedule as written is a fitting variant with expert_parallel 8 only" \
    python3 - "$tmp/t1.json" "$tmp/t8.json" <<'PY'
import json, sys
a, b = ({v["name"]: v for v in json.load(open(f))["variants"]} for f in sys.argv[1:3])
w = "as written (schedule onef1b)"
assert a and w not in a, sorted(a)
assert w in b and b[w]["fits"], sorted(b)
PY
"$PIPEC" tune "$X" -o "$tmp/best.pipe" >/dev/null 2>&1
check "tune -o writes expert_parallel" grep -q '^  expert_parallel 8$' "$tmp/best.pipe"
finish
