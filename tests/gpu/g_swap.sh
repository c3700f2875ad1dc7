#!/usr/bin/env bash
# g_swap.sh - swap copies overlap compute on the GPU (docs/spec.md "Time": SO on the
# device-to-host stream, SI on the host-to-device stream, concurrent with compute).
# One stage, 4 micro-batches; each SO/SI moves act = 256 MiB at host_bw 64 GiB/s, so
# the synthetic workload spins 256 MiB / 64 GiB/s = 3.90625 ms per copy on its stream:
# copy time = 4 copies * 3.90625 = 15.625 ms; compute = 4 * (f + b) = 4 * 12 = 48 ms.
# Asserted: the measured iteration time is below compute + copy = 63.625 ms (with no
# overlap it would be at least that), and in the trace some copy interval intersects a
# compute interval of the same rank.
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
. tests/gpu/lib_gpu.sh
cat >"$T/swap.pipe" <<'P'
pipeline swap1 {
  stages 1  microbatches 4  chunks 1
  costs { f 4ms  b 8ms  act 256MiB  host_bw 64GiB/s }
  stage 0 { F0 SO0 F1 SO1 F2 F3 B3 SI1 B2 SI0 B1 B0 }
}
P
"$PIPEC" check "$T/swap.pipe" >"$T/err" 2>&1 && ok || bad swap_check "$(head -n 3 "$T/err")"
if gpu_run "$T/swap.pipe" --workload synthetic --iters 5 --json --trace "$T/swap.json" \
        >"$T/o" 2>"$T/e"; then
    m=$(json_get "$T/o" 'j["measured_ms"]')
    python3 -c "import sys; sys.exit(not (0 < $m < 48 + 15.625))" && ok ||
        bad swap_time "measured $m ms >= compute + copy = 63.625 ms"
    python3 - "$T/swap.json" <<'PY' && ok || bad swap_trace "no copy overlaps compute in the trace"
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
comp = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("tid") == 0]
copy = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("tid") in (1, 2)]
sys.exit(not any(a0 < b1 and b0 < a1 for a0, a1 in copy for b0, b1 in comp))
PY
else bad swap_run "$(tail -n 3 "$T/e")"; fi
finish
