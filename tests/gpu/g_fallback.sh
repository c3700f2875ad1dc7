#!/usr/bin/env bash
# g_fallback.sh - 4 ranks on one GPU: NCCL refuses two ranks on one device, so the
# runtime announces the in-process device-to-device copies and trains through them;
# --check passes; forcing the copies (PIPERUN_CUDA_P2P=copy) gives the same losses.
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
. tests/gpu/lib_gpu.sh
cat >"$T/p4.pipe" <<'P'
import "std/models.pipe"
import "std/schedules.pipe"
pipeline p4 { stages 4  microbatches 8  chunks 1  model tiny { layers 4  hidden 64  seq 32  mbs 4 }  schedule onef1b }
P
if CUDA_VISIBLE_DEVICES=0 gpu_run "$T/p4.pipe" --check --iters 3 --json >"$T/o1" 2>"$T/e1"; then
    grep -q 'device-to-device copies' "$T/e1" && ok || bad fallback_message "$(head -n 2 "$T/e1")"
    [ "$(json_get "$T/o1" 'len(j["per_stage"])')" = 4 ] && ok || bad fallback_stages
    # the loss is finite and moves over 3 iterations
    json_get "$T/o1" 'j["losses"]' | python3 -c '
import sys; l = eval(sys.stdin.read()); assert len(l) == 3 and all(x == x for x in l) and l[2] != l[0], l' &&
        ok || bad fallback_losses "$(json_get "$T/o1" 'j["losses"]')"
else bad fallback "$(tail -n 3 "$T/e1")"; fi
CUDA_VISIBLE_DEVICES=0 PIPERUN_CUDA_P2P=copy gpu_run "$T/p4.pipe" --iters 3 --json >"$T/o2" 2>/dev/null
[ -s "$T/o1" ] && [ "$(json_get "$T/o1" 'j["losses"]')" = "$(json_get "$T/o2" 'j["losses"]')" ] && ok ||
    bad copy_vs_default "losses differ"
finish
