#!/usr/bin/env bash
# g_synthetic.sh - the synthetic replay of an 8-stage 1F1B schedule on the GPU: each op
# spins its cost-model time, so the measured iteration time (mean of iterations 2..5)
# must be within 10% of the simulated makespan, (M + P - 1) * (f + b) = (16 + 7) * 6 ms
# = 138 ms by the 1F1B closed form (p2p 0). The ranks share the GPUs there are (the
# copy fallback on one GPU): spin kernels of different ranks run concurrently.
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
. tests/gpu/lib_gpu.sh
cat >"$T/p8.pipe" <<'P'
import "std/schedules.pipe"
pipeline p8 {
  stages 8  microbatches 16  chunks 1
  costs { f 2ms  b 4ms  act 1MiB }
  schedule onef1b
}
P
sim=$("$PIPEC" sim --json "$T/p8.pipe" | python3 -c 'import json,sys; print(json.load(sys.stdin)["makespan_ms"])')
python3 -c "import sys; sys.exit(abs($sim - 138) > 1e-6)" && ok || bad sim_closed_form "simulated $sim ms"
if gpu_run "$T/p8.pipe" --workload synthetic --iters 5 --json >"$T/o8" 2>"$T/e8"; then
    m=$(json_get "$T/o8" 'j["measured_ms"]') s=$(json_get "$T/o8" 'j["simulated_ms"]')
    python3 -c "import sys; sys.exit(not ($s > 0 and abs($m - $s) <= 0.1 * $s))" && ok ||
        bad synthetic_vs_sim "measured $m ms, simulated $s ms"
else bad p8 "$(tail -n 3 "$T/e8")"; fi
finish
