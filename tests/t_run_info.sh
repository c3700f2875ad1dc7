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
if [ "$rc" = 0 ] && grep -q 'workload mlp: model tiny really trains' "$tmp/err"; then ok
else bad "mlp announced" "rc=$rc $(cat "$tmp/err")"; fi
# The program itself names its text, once, by the rule a compiled program follows: the
# README and docs of the tree pipec runs from (docs/runtime.md "Training text").
root=$(realpath "$(dirname "$(realpath "$PIPEC")")/..")
pages=$(for f in README.md docs/language.md docs/runtime.md docs/model.md docs/semantics.md docs/cost-model.md docs/simulator.md docs/passes.md docs/architecture.md; do cat "$root/$f"; echo; done | wc -c)
check "the training text named: the tree's README and docs ($pages bytes)" grep -qxF "piperun: training text (--data FILE for another): README.md and docs, 9 of 9 pages, $pages bytes, in $root" "$tmp/err"
check "the training text named once" test "$(grep -c 'training text' "$tmp/err")" = 1
printf 'a training text of more than sixty-five bytes, for the sequences of the tiny model....\n' >"$tmp/text2"
"$PIPEC" run examples/demo.pipe --iters 1 --data "$tmp/text2" --cache "$tmp/cache" >"$tmp/out" 2>"$tmp/err"
check "--data: exit 0" test $? = 0
check "--data: the file named" grep -qxF "piperun: training text: $tmp/text2, 87 bytes" "$tmp/err"
"$PIPEC" run examples/demo.pipe --iters 1 --json --cache "$tmp/cache" >"$tmp/out" 2>"$tmp/err"
check "--json: no training text line" bash -c "! grep -q 'training text' '$tmp/err'"
# --workload mlp asked for: said without the "(its shape fits ...)" reason.
"$PIPEC" run examples/demo.pipe --workload mlp --iters 1 --cache "$tmp/cache" >"$tmp/out" 2>"$tmp/err"
check "--workload mlp: exit 0" test $? = 0
check "--workload mlp: announced as asked" grep -qx 'pipec run: workload mlp: model tiny really trains' "$tmp/err"
# --workload synthetic on a trainable model: --data has nothing to train and is ignored.
echo "some text" >"$tmp/text"
"$PIPEC" run examples/demo.pipe --workload synthetic --data "$tmp/text" --iters 1 --cache "$tmp/cache" >"$tmp/out" 2>"$tmp/err"
check "--workload synthetic --data: exit 0" test $? = 0
check "--workload synthetic --data: says --data is ignored" grep -qx 'pipec run: workload synthetic: ops busy-wait their cost-model times and touch scaled-down arenas (--workload synthetic); --data is ignored' "$tmp/err"
check "--workload synthetic --data: no training text" bash -c "! grep -q 'training text' '$tmp/err'"
# --workload mlp on a model too large for it: exit 1 before building, naming why.
"$PIPEC" run examples/llama2_13b_1f1b.pipe --workload mlp --iters 1 --cache "$tmp/cache4" >"$tmp/out" 2>"$tmp/err"
check "--workload mlp, model too large: exit 1" test $? = 1
check "--workload mlp, model too large: why" grep -q "^pipec run: --workload mlp needs the mlp workload, which cannot run this file: model llama2_13b is too large" "$tmp/err"
check "--workload mlp, model too large: what to do" grep -qF 'pipec run: use a smaller model (e.g. `model tiny`) to train for real, or run --workload synthetic without --check' "$tmp/err"
check "--workload mlp, model too large: nothing built" test ! -d "$tmp/cache4"
# A pipec with no docs beside it trains on the program's built-in text.
mkdir -p "$tmp/bin"
cp "$PIPEC" "$tmp/bin/pipec"
PIPERUN_INC=${PIPERUN_INC:-$PWD/runtime} PIPERUN_LIB=${PIPERUN_LIB:-$PWD/build} \
    "$tmp/bin/pipec" run examples/demo.pipe --iters 1 --cache "$tmp/cache" >"$tmp/out" 2>"$tmp/err"
check "no docs beside pipec: exit 0" test $? = 0
check "no docs beside pipec: the built-in text" grep -qxF "piperun: training text (--data FILE for another): the built-in text, 410 bytes (the program names no pipec tree holding README.md and docs/)" "$tmp/err"
# Why the mlp workload cannot run a file, said before anything is built (docs/model.md).
while IFS='|' read -r body why; do
    printf 'import "std/schedules.pipe"\nimport "std/models.pipe"\nimport "std/devices.pipe"\n%s\n' "$body" >"$tmp/w.pipe"
    "$PIPEC" run --workload mlp "$tmp/w.pipe" --iters 1 --cache "$tmp/cache5" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc = 1 ] && grep -qxF "pipec run: --workload mlp needs the mlp workload, which cannot run this file: $why" "$tmp/err" &&
       [ ! -d "$tmp/cache5" ]; then ok
    else bad "--workload mlp: $why" "rc=$rc $(head -c 300 "$tmp/err")"; fi
done <<'CASES'
pipeline w { stages 2 microbatches 2 model tiny { arch llama heads 16 hidden 48 } device cpu schedule onef1b }|model tiny: heads must divide hidden, kv_heads heads, and a llama head size must be even
pipeline w { stages 2 microbatches 2 model tiny partition [1.5, 2.5] device cpu schedule onef1b }|the mlp workload runs whole layers only (partition entry 0 is 1.5)
pipeline w { stages 2 microbatches 2 chunks 2 model tiny partition [3, 1] device cpu schedule interleaved }|the mlp workload runs whole layers only (the partition gives virtual stage 0 1.5 layers)
pipeline w { stages 2 microbatches 2 model tiny { seq 65536 mbs 64 } device cpu memory 100GiB schedule onef1b }|model tiny: activations of one micro-batch are too large for the CPU mlp workload
pipeline w { stages 2 microbatches 2 model tiny { arch gpt heads 4 seq 65536 mbs 64 } device cpu memory 100GiB schedule onef1b }|model tiny: activations of one micro-batch are too large for the CPU gpt workload
model m { arch mlp layers 2 hidden 64 vocab 256 seq 16 } pipeline w { stages 2 microbatches 2 model m device cpu schedule onef1b }|model m: `mbs` must be a whole number in 1..16777216
model m { arch gpt layers 2 hidden 64 heads 4 ffn 100000000 vocab 256 seq 16 mbs 2 } pipeline w { stages 2 microbatches 2 model m device cpu memory 1TiB schedule onef1b }|model m: `ffn` must be a whole number
CASES
# A model without `arch` is a gpt (docs/cost-model.md): announced and run as one.
printf 'import "std/schedules.pipe"\nimport "std/devices.pipe"\nmodel m { layers 2 hidden 32 heads 2 vocab 64 seq 8 mbs 2 }\npipeline w { stages 2 microbatches 2 model m device cpu schedule onef1b }\n' >"$tmp/w.pipe"
"$PIPEC" run "$tmp/w.pipe" --iters 1 --cache "$tmp/cache6" >"$tmp/out" 2>"$tmp/err"
check "a model without arch: exit 0" test $? = 0
check "... announced as the gpt workload" grep -qx "pipec run: workload gpt: model m really trains (its shape fits the CPU workload)" "$tmp/err"
check "... and run as one" grep -q "^w: 2 stages, 2 micro-batches, 1 chunk, workload gpt, 1 iteration" "$tmp/out"
# A partition with one entry per stage is split over its chunks as the cost model splits
# it (docs/cost-model.md): [4, 0] with two chunks is [2, 0, 2, 0] per virtual stage, and
# the mlp workload trains both alike: the same losses and the same arenas, which differ
# from those of [1, 1, 1, 1].
i=0
for part in "[4, 0]" "[2, 0, 2, 0]" "[1, 1, 1, 1]"; do
    i=$((i + 1))
    printf 'import "std/schedules.pipe"\nimport "std/models.pipe"\nimport "std/devices.pipe"\npipeline w { stages 2 microbatches 2 chunks 2 model tiny partition %s device cpu schedule interleaved }\n' "$part" >"$tmp/w.pipe"
    "$PIPEC" run --workload mlp "$tmp/w.pipe" --iters 2 --seed 3 --cache "$tmp/cache6" >"$tmp/out" 2>"$tmp/err"
    check "partition $part with chunks 2: the mlp workload trains it" test $? = 0
    grep "^iter [0-9]" "$tmp/out" | sed "s/ *time.*//" >"$tmp/loss$i"
    grep -o "arena [^,]*" "$tmp/out" >"$tmp/arena$i"
done
check "partition [4, 0] and [2, 0, 2, 0] with chunks 2: the same losses" cmp -s "$tmp/loss1" "$tmp/loss2"
check "... two iterations' losses" test "$(wc -l <"$tmp/loss1")" = 2
check "... the same arenas, one per stage" cmp -s "$tmp/arena1" "$tmp/arena2"
check "... which differ from [1, 1, 1, 1]'s" test "$(wc -l <"$tmp/arena1")" = 2 -a "$(cat "$tmp/arena1")" != "$(cat "$tmp/arena3")"
# The build cache: --cache, else $XDG_CACHE_HOME/pipec (an absolute path only, as the XDG
# spec says), else $HOME/.cache/pipec.
XDG_CACHE_HOME=$tmp/xdg "$PIPEC" run examples/tiny_1f1b.pipe --iters 1 >/dev/null 2>"$tmp/err"
check "cache in \$XDG_CACHE_HOME/pipec" grep -q "^pipec run: building tiny_1f1b (4 ranks) in $tmp/xdg/pipec/[0-9a-f]*\$" "$tmp/err"
mkdir -p "$tmp/home"
(cd "$tmp" && XDG_CACHE_HOME=rel HOME=$tmp/home "$PIPEC" run "$OLDPWD/examples/tiny_1f1b.pipe" --iters 1) >/dev/null 2>"$tmp/err"
check "a relative XDG_CACHE_HOME is ignored: cache in \$HOME/.cache/pipec" grep -q "^pipec run: building tiny_1f1b (4 ranks) in $tmp/home/.cache/pipec/[0-9a-f]*\$" "$tmp/err"
check "... nothing under the relative folder" test ! -e "$tmp/rel"
# Neither an absolute $XDG_CACHE_HOME nor an absolute $HOME: .cache/pipec under the
# current folder.
mkdir -p "$tmp/cwd"
(cd "$tmp/cwd" && XDG_CACHE_HOME= HOME=rel "$PIPEC" run "$OLDPWD/examples/tiny_1f1b.pipe" --iters 1) >/dev/null 2>"$tmp/err"
check "no absolute XDG_CACHE_HOME or HOME: cache in .cache/pipec" grep -q "^pipec run: building tiny_1f1b (4 ranks) in \.cache/pipec/[0-9a-f]*\$" "$tmp/err"
check "... under the current folder" test -d "$tmp/cwd/.cache/pipec"
# A cache folder that cannot be created: exit 1, naming it, and nothing runs.
"$PIPEC" run examples/tiny_1f1b.pipe --iters 1 --cache /dev/null/c >"$tmp/out" 2>"$tmp/err"
check "--cache that cannot be created: exit 1" test $? = 1
check "--cache that cannot be created: named, with the reason" grep -q "^pipec: cannot create the cache folder /dev/null/c/[0-9a-f]*: Not a directory\$" "$tmp/err"
check "--cache that cannot be created: nothing ran" test ! -s "$tmp/out"
# A cache folder whose program cannot be built because a generated file cannot be
# written there (here main.c is a folder): exit 1 naming that file, nothing runs; once
# the obstacle is gone the next run builds and runs.
cdir=$(dirname "$(ls "$tmp"/cache/*/tiny_1f1b | head -n 1)")
rm -rf "$cdir"
mkdir -p "$cdir/main.c"
"$PIPEC" run examples/tiny_1f1b.pipe --iters 1 --cache "$tmp/cache" >"$tmp/out" 2>"$tmp/err"
check "a cache file that cannot be written: exit 1" test $? = 1
check "... the file named, with the reason" grep -qx "pipec: cannot write $cdir/main.c: Is a directory" "$tmp/err"
check "... nothing ran" test ! -s "$tmp/out"
rmdir "$cdir/main.c"
"$PIPEC" run examples/tiny_1f1b.pipe --iters 1 --cache "$tmp/cache" >"$tmp/out" 2>"$tmp/err"
check "... the obstacle gone, the next run builds and runs" grep -q "^iter 1" "$tmp/out"
# Usage errors: no FILE, an unknown option.
"$PIPEC" run >"$tmp/out" 2>"$tmp/err"
check "run without FILE: exit 2" test $? = 2
check "run without FILE: says so" grep -qx "pipec run: need one FILE" "$tmp/err"
"$PIPEC" run --bogus examples/tiny_1f1b.pipe >"$tmp/out" 2>"$tmp/err"
check "run --bogus: exit 2" test $? = 2
check "run --bogus: named" grep -qx "pipec run: unknown option '--bogus'" "$tmp/err"
# --launcher mpi starts $MPIRUN -np P --oversubscribe (--allow-run-as-root as root) with
# the program and the options passed through.
printf '#!/bin/sh\nprintf "%%s\\n" "$@" >"%s"\n' "$tmp/mpirun.args" >"$tmp/mpirun"
chmod +x "$tmp/mpirun"
MPIRUN=$tmp/mpirun "$PIPEC" run examples/tiny_1f1b.pipe --launcher mpi --iters 1 --cache "$tmp/cmpi" >/dev/null 2>"$tmp/err"
rc=$?
if grep -q "cannot find libpiperun_mpi.a" "$tmp/err"; then
    skip "MPIRUN" "the MPI runtime is not built"
else
    check "MPIRUN: exit 0 as it did" test $rc = 0
    root=; [ "$(id -u)" = 0 ] && root=--allow-run-as-root
    want=$(printf '%s\n' -np 4 --oversubscribe $root; ls "$tmp"/cmpi/*/tiny_1f1b; printf '%s\n' --iters 1)
    check "MPIRUN: its arguments" test "$(cat "$tmp/mpirun.args")" = "$want"
    # An empty $MPIRUN is mpirun, found on PATH (the build is cached by now).
    mkdir -p "$tmp/mpibin"
    cp "$tmp/mpirun" "$tmp/mpibin/mpirun"
    rm -f "$tmp/mpirun.args"
    PATH=$tmp/mpibin:$PATH MPIRUN= "$PIPEC" run examples/tiny_1f1b.pipe --launcher mpi --iters 1 --cache "$tmp/cmpi" >/dev/null 2>"$tmp/err"
    check "an empty MPIRUN: exit 0" test $? = 0
    check "an empty MPIRUN: mpirun on PATH ran, with the same arguments" test "$(cat "$tmp/mpirun.args")" = "$want"
fi
finish
