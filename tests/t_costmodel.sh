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
check "written costs: f, b, w and ckpt still derived per virtual stage" \
    test "$(grep -cE '^  costs vstage [01] \{ f [0-9.]+ms b [0-9.]+ms w [0-9.]+ms ckpt [0-9]+[KM]iB \}$' "$tmp/user.out")" = 2
finish
