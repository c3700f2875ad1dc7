#!/usr/bin/env bash
# t_run_info.sh - what `pipec run` says before it starts: the workload and why, the
# training text, the build, more rank threads than cores, and --check without a model.
cd "$(dirname "$0")/.."
. tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A file without a model replays the cost model (synthetic) and says so, with the reason,
# before the first iteration; the first run builds, the second finds the cache.
"$PIPEC" run examples/tiny_1f1b.pipe --iters 1 --cache "$tmp/cache" >"$tmp/out" 2>"$tmp/err"
rc=$?
first=$(grep -n 'workload synthetic' "$tmp/err" | head -n 1 | cut -d: -f1)
iter=$(grep -n '^iter 1' "$tmp/out" "$tmp/err" | head -n 1)
if [ "$rc" = 0 ] && [ -n "$first" ] && grep -q 'the pipeline has no `model`' "$tmp/err" &&
   grep -q '^pipec run: building tiny_1f1b (4 ranks)' "$tmp/err" && [ -n "$iter" ]; then ok
else bad "synthetic announced" "rc=$rc $(cat "$tmp/err")"; fi
"$PIPEC" run examples/tiny_1f1b.pipe --iters 1 --cache "$tmp/cache" >/dev/null 2>"$tmp/err2"
if ! grep -q 'building' "$tmp/err2" && grep -q 'workload synthetic' "$tmp/err2"; then ok
else bad "cached run does not build" "$(cat "$tmp/err2")"; fi

# More rank threads than cores: a warning exactly when P > cores.
cores=$(getconf _NPROCESSORS_ONLN)
if [ "$cores" -lt 4 ]; then
    check "oversubscribed warned" grep -q "warning\[oversubscribed\]: 4 rank threads on $cores cores" "$tmp/err"
else
    check "not oversubscribed" bash -c "! grep -q oversubscribed '$tmp/err'"
fi

# Progress: the first and the last iteration, at most one line a second in between; the
# summary's counts agree with their nouns ("1 chunk", not "1 chunks").
cat >"$tmp/syn1.pipe" <<'EOF2'
pipeline syn1 {
  stages 1  microbatches 1
  costs { f 0.2ms  b 0.4ms  act 1KiB }
  stage 0 { F0 B0 }
}
EOF2
"$PIPEC" run "$tmp/syn1.pipe" --iters 200 --cache "$tmp/cache3" >"$tmp/out" 2>"$tmp/err"
rc=$?
lines=$(grep -c '^iter ' "$tmp/out")
check "progress: the first and last iteration ($lines lines)" grep -q '^iter 200: ' "$tmp/out"
check "progress: at most one line a second ($lines lines for 200 short iterations)" test "$rc" = 0 -a "$lines" -ge 2 -a "$lines" -le 4
check "summary: 1 stage, 1 micro-batch, 1 chunk" grep -q '^syn1: 1 stage, 1 micro-batch, 1 chunk, workload synthetic, 200 iterations$' "$tmp/out"

# --quiet says nothing before the run.
"$PIPEC" run examples/tiny_1f1b.pipe --iters 1 --quiet --cache "$tmp/cache" >/dev/null 2>"$tmp/err3"
check "quiet" bash -c "! grep -q 'pipec run:' '$tmp/err3'"

# --check without a model fails before building and says what to add.
"$PIPEC" run examples/tiny_1f1b.pipe --check --cache "$tmp/cache2" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" = 1 ] && grep -q 'add `model tiny`' "$tmp/err" && [ ! -d "$tmp/cache2" ]; then ok
else bad "--check without a model" "rc=$rc $(cat "$tmp/err")"; fi

# A tiny model trains for real (mlp) and the training text is named.
"$PIPEC" run examples/demo.pipe --iters 1 --cache "$tmp/cache" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" = 0 ] && grep -q 'workload mlp: model tiny really trains' "$tmp/err" &&
   grep -q 'training text:' "$tmp/err"; then ok
else bad "mlp announced" "rc=$rc $(cat "$tmp/err")"; fi
finish
