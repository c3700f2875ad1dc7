#!/usr/bin/env bash
# t_costmodel.sh - the cost model's inputs as written in a file (docs/cost-model.md):
# both spellings of sequence_parallel, a device that gives only peak_tflops (no
# bandwidths, no memory), and costs the source wrote, which derivation never overrides.
cd "$(dirname "$0")/.."
. tests/lib.sh
P=$PIPEC_ASAN
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
H='import "std/schedules.pipe"
import "std/models.pipe"
import "std/devices.pipe"'

# --- sequence_parallel: true is 1, false is 0; it shrinks activations ----------------------
peak() { "$P" sim --json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["per_stage"][0]["peak_mem_bytes"])'; }
for v in true 1 false 0; do
    printf '%s\npipeline s { stages 2 microbatches 4 model gpt_1_3b { sequence_parallel %s } device a100_sxm_80g tensor_parallel 2 schedule onef1b }\n' "$H" $v >"$tmp/sp_$v.pipe"
    eval "pk_$v=\$(peak \"\$tmp/sp_\$v.pipe\")"
done
check "sequence_parallel true is 1" test "$pk_true" = "$pk_1"
check "sequence_parallel false is 0" test "$pk_false" = "$pk_0"
check "sequence_parallel shrinks the peak" test "${pk_true:-0}" -lt "${pk_false:-0}"

# --- a device with only peak_tflops ----------------------------------------------------------
printf '%s\ndevice bare { peak_tflops 100 }\npipeline b { stages 2 microbatches 4 model gpt_1_3b device bare schedule onef1b }\n' "$H" >"$tmp/bare.pipe"
"$P" print "$tmp/bare.pipe" >"$tmp/bare.out" 2>"$tmp/err"
check "bare device: prints" test $? = 0
sed -n '/^pipeline b {/,$p' "$tmp/bare.out" >"$tmp/bare.pl"
check "bare device: no peer bandwidth, so p2p 0" test "$(grep -c '^  costs stage [01] { weights [0-9]*KiB p2p 0ms }$' "$tmp/bare.pl")" = 2
check "bare device: no host bandwidth derived" bash -c "! grep -q host_bw '$tmp/bare.pl'"
check "bare device: no memory budget" bash -c "! grep -q '^  memory' '$tmp/bare.pl'"
check "bare device: the explicit form checks" bash -c "'$P' check '$tmp/bare.out' >/dev/null 2>&1"

# --- costs the source wrote stay as written ---------------------------------------------------
printf '%s\npipeline u { stages 2 microbatches 4 model gpt_1_3b device a100_sxm_80g costs { r 5ms act 1GiB } recompute stages 0..=1 policy full schedule onef1b }\n' "$H" >"$tmp/user.pipe"
"$P" print "$tmp/user.pipe" >"$tmp/user.out" 2>"$tmp/err"
check "written costs: prints" test $? = 0
check "written costs: r and act kept in the global block" \
    test "$(sed -n '/^  costs {$/,/^  }$/p' "$tmp/user.out" | tr -s ' \n' ' ')" = " costs { r 5ms act 1GiB } "
check "written costs: no virtual stage gets a derived r, act or wact" \
    bash -c "! grep -E '^  costs vstage .*( r | act | wact )' '$tmp/user.out'"
check "written costs: f, b, w, ckpt and work still derived per virtual stage" \
    test "$(grep -cE '^  costs vstage [01] \{ f [0-9.]+ms b [0-9.]+ms w [0-9.]+ms ckpt [0-9]+[KM]iB work [0-9]+[KM]iB \}$' "$tmp/user.out")" = 2
# --- bad device and model fields: a located value error each, exit 1 ------------------------
bad_input() { # NAME DEVICE-BLOCK MODEL-OVERRIDE MESSAGE (at the device's line 4, or the
    # pipeline's line 5 where the model override is wrong)
    local line=4
    [ -z "$3" ] || line=5
    printf '%s\n%s\npipeline b { stages 2 microbatches 4 model gpt_1_3b %s device %s schedule onef1b }\n' \
        "$H" "$2" "$3" "$(printf '%s' "$2" | sed -n 's/^device \([a-z_0-9]*\).*/\1/p')" >"$tmp/bad.pipe"
    "$P" check "$tmp/bad.pipe" >"$tmp/bad.out" 2>&1
    check "$1: exit 1" test $? = 1
    check "$1: '$4' at line $line" grep -qE "^$tmp/bad\.pipe:$line:[0-9]+: error\[value\]: $4\$" "$tmp/bad.out"
}
bad_input "memory not a size" 'device d { peak_tflops 100 memory fast }' '' "device field 'memory' must be a size"
bad_input "memory in ms" 'device d { peak_tflops 100 memory 5ms }' '' "device field 'memory' must be a size"
bad_input "memory 0" 'device d { peak_tflops 100 memory 0 }' '' "device field 'memory' must be greater than 0"
bad_input "peak_tflops in GiB" 'device d { peak_tflops 5GiB }' '' \
    "device field 'peak_tflops' must be a positive number \(dense TFLOP/s\)"
bad_input "efficiency above 1" 'device d { peak_tflops 100 efficiency 1.5 }' '' \
    "device field 'efficiency' must be in \(0, 1\]"
bad_input "reserved = memory" 'device d { peak_tflops 100 memory 2GiB reserved 2GiB }' '' \
    "device 'd' reserves all of its memory"
bad_input "heads do not divide hidden" 'device d { peak_tflops 100 }' '{ heads 3 }' \
    "model 'gpt_1_3b': 3 heads do not divide hidden size 2048"
bad_input "kv_heads do not divide heads" 'device d { peak_tflops 100 }' '{ kv_heads 3 }' \
    "model 'gpt_1_3b': 3 key/value heads do not divide 16 heads"

# --- a partition with one entry per stage under chunks: each stage's layers split evenly
# over its chunks, the odd half-layer to the later chunk (docs/cost-model.md) ------------------
f_of() { sed -n "s/^  costs vstage $2 { f \([0-9.]*\)ms .*/\1/p" "$1"; }
for part in "13, 11" "13.5, 10.5"; do
    printf '%s\npipeline b { stages 2 chunks 2 microbatches 4 model gpt_1_3b device a100_sxm_80g partition [%s] schedule interleaved }\n' "$H" "$part" >"$tmp/pr.pipe"
    "$P" print "$tmp/pr.pipe" >"$tmp/pr.out" 2>&1
    check "partition [$part] per stage under chunks 2: prints" test $? = 0
    f0=$(f_of "$tmp/pr.out" 0) f2=$(f_of "$tmp/pr.out" 2) f1=$(f_of "$tmp/pr.out" 1)
    if [ "$part" = "13, 11" ]; then
        check "partition [$part]: stage 0's two chunks get 6.5 layers each" test -n "$f0" -a "$f0" = "$f2"
        check "partition [$part]: stage 1's first chunk (5.5 layers) is lighter" \
            python3 -c "import sys; sys.exit(not 0 < float('${f1:-0}') < float('${f0:-0}'))"
    else
        check "partition [$part]: stage 0's later chunk takes the odd half-layer" \
            python3 -c "import sys; sys.exit(not 0 < float('${f0:-0}') < float('${f2:-0}'))"
    fi
done
finish
