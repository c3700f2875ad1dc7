#!/usr/bin/env bash
# t_transformer.sh - the `gpt` and `llama` workloads end to end: a `.pipe` whose model
# is a GPT or Llama shape (shrunk by a model block) generates programs that train that
# transformer (docs/model.md).
#
#   - every stdlib schedule (the peers' V-shape and looped ones included) and the passes
#     that add R, W, SO/SI, OG/LW ops, for both archs, through `pipec run --check`: max
#     relative gradient error < 1e-5 against the sequential reference (the program exits
#     1 above it; we also read the number);
#   - the summary names the workload by the arch; the measured arena peak of every rank
#     equals the static plan; the loss falls over 50 iterations on the default text;
#   - with MPI (one process per rank), the same losses and arena peaks as with threads,
#     and `run --launcher mpi --check` within 1e-5;
#     --check over several processes is refused with its reason (not yet gathered);
#   - `--profile` writes a costs block with the workload's real region bytes;
#   - a model too large for the CPU workload runs the synthetic one; asked for, the gpt
#     workload says why not.
# Shapes are tiny (hidden 16, seq 8, mbs 2, 4 layers) so that the grid runs in about a
# minute on 2 cores; compile time dominates.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
CACHE="$T/cache"

. tests/lib_tf.sh
pipe() { tf_pipe "$@"; }
# the grid's programs linked with gold (tests/lib.sh gold_cc)
gold_cc "$T"
# run_check NAME: runs --check and asserts the printed max error is < 1e-5
run_check() { tf_check "$1" 1e-5 timeout 60 "${gold_cc[@]}" "$PIPEC" run --cache "$CACHE"; }

# `make test`: half of the four 1F1B-like schedules' points (lib_tf.sh TF_GRID_SAMPLE;
# each arch, schedule and (P, M) still runs), `make test-full` all
test_full || TF_GRID_SAMPLE=1
tf_grid
tf_train timeout 120 "$PIPEC" run --cache "$CACHE"

# --- --profile: measured times and the real region bytes ------------------------------
pipe gpt_prof gpt 2 4 1 onef1b
out=$(timeout 60 "$PIPEC" run "$T/gpt_prof.pipe" --iters 3 --profile --quiet --cache "$CACHE" 2>&1)
check gpt_profile_header grep -q "^# op costs measured by .pipec run --profile. (workload gpt, 3 iterations)" <<<"$out"
check gpt_profile_vstage grep -Eq "^costs vstage 1 \{ f [0-9.]+ms b [0-9.]+ms act [1-9][0-9]* ckpt [0-9]+ wact [1-9]" <<<"$out"
# the measured p2p time (rank 1 waits for F0 of every iteration): a measurement, not the
# constant 0ms of before, between 0 and far below a second
p2p=$(sed -n 's/^costs { p2p \([0-9]*\.[0-9]\{6\}\)ms }$/\1/p' <<<"$out")
check "gpt_profile_p2p (${p2p:-none} ms)" python3 -c "import sys; sys.exit(not (0 <= float('${p2p:--1}') < 1000))"

# --- MPI: one process per rank trains the same (losses and peaks equal the threads') ----
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    skip mpi "mpicc/mpirun not found (make deps installs openmpi-bin libopenmpi-dev)"
elif ! make -s mpi >"$T/err" 2>&1; then
    bad mpi_build "$(tail -n 5 "$T/err")"
else
    [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_btl="self,vader,tcp" OMPI_MCA_btl_tcp_if_include=lo \
           OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
    field() { sed -n "s/.*\"$2\": \(\[[^]]*\]\).*/\1/p" "$1" | head -n 1; }
    peaks() { grep -o '"peak_arena_bytes": [0-9]*' "$1" | tr '\n' ' '; }
    for arch in gpt llama; do
        pipe "${arch}_mpi" $arch 4 8 1 zbh1 "apply recompute(stages=0..=1, policy=full)"
        timeout 120 "$PIPEC" run "$T/${arch}_mpi.pipe" --iters 3 --json --cache "$CACHE" >"$T/o1" 2>&1
        timeout 120 "$PIPEC" run --launcher mpi "$T/${arch}_mpi.pipe" --iters 3 --json --cache "$CACHE" >"$T/oP" 2>&1
        [ "$(grep -c '"stage":' "$T/oP")" = 4 ] && ok || bad "${arch}_mpi_summary" "$(tail -n 3 "$T/oP")"
        l1=$(field "$T/o1" losses) lP=$(field "$T/oP" losses)
        [ -n "$l1" ] && [ "$l1" = "$lP" ] && ok || bad "${arch}_mpi_losses" "threads $l1, mpi $lP"
        [ -n "$(peaks "$T/oP")" ] && [ "$(peaks "$T/o1")" = "$(peaks "$T/oP")" ] && ok ||
            bad "${arch}_mpi_peaks" "threads $(peaks "$T/o1"), mpi $(peaks "$T/oP")"
    done
    # --check over MPI: the transport gathers every arch's gradients (pr_model_tensor)
    for arch in gpt llama; do
        out=$(timeout 120 "$PIPEC" run --launcher mpi "$T/${arch}_mpi.pipe" --check --quiet --cache "$CACHE" 2>&1)
        rc=$?
        check "${arch}_mpi_check_exit" test $rc = 0
        err=$(sed -n 's/^max relative gradient error: //p' <<<"$out")
        check "${arch}_mpi_check_err (${err:-none})" python3 -c "import sys; sys.exit(not (0 <= float('${err:--1}') < 1e-5))"
    done
fi

# --- generated C of a transformer program: warning-free with gcc and clang --------------
if "$PIPEC" emit examples/llama_tiny.pipe -o "$T/gen" >/dev/null 2>&1; then
    check emit_arch grep -q '\.model_arch = 2, \.model_heads = 4, \.model_kv_heads = 2, \.model_ffn = 176' "$T/gen/main.c"
    for cc in gcc clang; do
        command -v $cc >/dev/null || { skip "emit_$cc" "$cc missing"; continue; }
        if (cd "$T/gen" && for f in *.c; do $cc -std=c11 -Wall -Wextra -Werror -I"$OLDPWD/runtime" -fsyntax-only "$f" || exit 1; done) 2>"$T/err"; then ok
        else bad "emit_$cc" "$(head -n 5 "$T/err")"; fi
    done
else
    bad emit "pipec emit examples/llama_tiny.pipe failed"
fi

# --- a model too large for the CPU: the synthetic workload, and the reason on request ----
cat >"$T/big.pipe" <<'EOF'
import "std/models.pipe"
import "std/schedules.pipe"
pipeline big {
  stages 2  microbatches 2
  model gpt_1_3b
  schedule onef1b
}
EOF
out=$(timeout 60 "$PIPEC" run "$T/big.pipe" --workload gpt --quiet --cache "$CACHE" 2>&1)
check big_exit test $? = 1
check big_reason grep -q "model gpt_1_3b is too large for the CPU gpt workload" <<<"$out"
finish
