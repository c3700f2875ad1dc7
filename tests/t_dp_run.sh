#!/usr/bin/env bash
# t_dp_run.sh - the runtime trains `data_parallel D` replicas (docs/runtime.md "Data
# parallelism"): P x D ranks, replica d on global micro-batches d*M .. d*M+M-1, the
# gradients of each stage averaged over the replicas before the optimizer step, the
# step sharded over the replicas with `zero 1`.
#
# Oracles, none of them taken from a run of the code under test:
#   - `--check`: the sequential single-rank reference over the whole global batch
#     (D x M micro-batches), max relative gradient error < 1e-5, and the same for the
#     weights after the step (the reference stepped with its own gradients);
#   - D = 2 with M micro-batches and D = 1 with 2M micro-batches train on the same
#     global batch (micro-batch d*M + m is the same text either way), so every
#     iteration's mean loss agrees (to 1e-5 relative: only the summation order of the
#     gradient mean differs), also after optimizer steps, which use the reduced
#     gradients;
#   - `zero 1` updates each float once with the same SGD arithmetic as `zero 0`, so the
#     losses of every iteration are equal digit for digit;
#   - `data_parallel 1` generates the same program as no setting at all.
# The mlp workload throughout, gpt and llama for --check and the same two equalities;
# the MPI launcher when mpicc and mpirun are there.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
CACHE="$T/cache"
for i in $(seq 1 40); do echo "line $i: replicas train on their own shards of the batch."; done >"$T/text"

# pipe NAME P M V SCHEDULE [EXTRA...]: writes $T/NAME.pipe (the tiny mlp)
pipe() {
    local name=$1 P=$2 M=$3 V=$4 sched=$5; shift 5
    {
        echo 'import "std/models.pipe"'
        echo 'import "std/schedules.pipe"'
        echo "pipeline $name {"
        echo "  stages $P  microbatches $M  chunks $V"
        echo "  model tiny { layers 4  hidden 16  seq 8  mbs 2 }"
        echo "  schedule $sched"
        for x in "$@"; do echo "  $x"; done
        echo "}"
    } >"$T/$name.pipe"
}

# max_err OUT: the printed max relative gradient error
max_err() { sed -n 's/^max relative gradient error: //p' <<<"$1"; }
# below E BOUND: E is a number below BOUND
below() { [ -n "$1" ] && awk -v e="$1" -v b="$2" 'BEGIN { exit !(e < b) }'; }

# run_check NAME [ARGS...]: `pipec run --check` passes with gradient and updated-weight
# errors below 1e-5
run_check() {
    local name=$1 out; shift
    if ! out=$(timeout 120 "$PIPEC" run "$T/$name.pipe" --check --quiet --data "$T/text" \
               --cache "$CACHE" "$@" 2>&1); then
        bad "$name --check" "$(tail -n 3 <<<"$out")"; return
    fi
    local e w; e=$(max_err "$out")
    w=$(sed -n 's/^max relative weight error after the step: //p' <<<"$out")
    if below "$e" 1e-5 && below "$w" 1e-5; then ok
    else bad "$name --check" "max relative gradient error '$e', weight error '$w'"; fi
}

# losses NAME ITERS [ARGS...]: the JSON losses of a run, one a line
losses() {
    local name=$1 iters=$2; shift 2
    timeout 120 "$PIPEC" run "$T/$name.pipe" --iters "$iters" --json --data "$T/text" \
        --cache "$CACHE" "$@" 2>/dev/null |
        python3 -c 'import json,sys; print("\n".join(repr(x) for x in json.load(sys.stdin)["losses"]))'
}

# close A B: the two loss lists have the same length and agree to 1e-5 relative
close() {
    python3 - "$1" "$2" <<'PY'
import sys
a = [float(x) for x in open(sys.argv[1]).read().split()]
b = [float(x) for x in open(sys.argv[2]).read().split()]
sys.exit(not (a and len(a) == len(b) and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(a, b))))
PY
}

# --- threads: --check over the whole global batch ------------------------------------------
pipe d2_1f1b 2 2 1 onef1b "data_parallel 2"
run_check d2_1f1b
pipe d2_zero1 2 2 1 onef1b "data_parallel 2  zero 1"
run_check d2_zero1
pipe d3_gpipe 3 3 1 gpipe "data_parallel 3"
run_check d3_gpipe
pipe d2_zb 2 4 1 zbh1 "data_parallel 2  zero 1"
run_check d2_zb
pipe d2_interleaved 2 4 2 interleaved "data_parallel 2"
run_check d2_interleaved
pipe d2_p1 1 2 1 onef1b "data_parallel 2"
run_check d2_p1

out=$("$PIPEC" run "$T/d2_1f1b.pipe" --iters 2 --data "$T/text" --cache "$T/cache2" 2>&1)
check "run: building with P x D = 4 ranks" grep -q "building d2_1f1b (4 ranks)" <<<"$out"
check "summary: the replicas and the global batch" \
    grep -qx "data parallel: 2 replicas, 4 ranks, each replica on its 2 micro-batches of the global batch of 4" <<<"$out"
out=$("$PIPEC" run "$T/d2_1f1b.pipe" --json --data "$T/text" --cache "$CACHE" 2>/dev/null)
check "json: data_parallel and zero" python3 -c "import json,sys; d=json.loads(sys.argv[1]); sys.exit(not (d['data_parallel'] == 2 and d['zero'] == 0))" "$out"

# --- D = 2 on M micro-batches = D = 1 on 2M: the same global batch -----------------------
pipe d1_m4 2 4 1 onef1b
losses d1_m4 4 >"$T/l_d1"
losses d2_1f1b 4 >"$T/l_d2"
check "D=2 x M=2 and D=1 x M=4: the same losses over 4 iterations (1e-5)" close "$T/l_d2" "$T/l_d1"
pipe d1_m8 2 8 1 gpipe
pipe d4_m2 2 2 1 gpipe "data_parallel 4"
losses d1_m8 3 >"$T/l_d1_8"
losses d4_m2 3 >"$T/l_d4"
check "D=4 x M=2 and D=1 x M=8: the same losses over 3 iterations (1e-5)" close "$T/l_d4" "$T/l_d1_8"
# without the reduction the step of D = 2 would use half the batch: the losses differ
pipe d1_m2 2 2 1 onef1b
losses d1_m2 4 >"$T/l_d1_2"
check "oracle: D=1 x M=2 (half the batch) gives other losses" bash -c "! cmp -s '$T/l_d1_2' '$T/l_d2'"

# --- zero 1: the sharded step equals the unsharded one ------------------------------------
losses d2_zero1 5 >"$T/l_z1"
pipe d2_zero0 2 2 1 onef1b "data_parallel 2  zero 0"
losses d2_zero0 5 >"$T/l_z0"
check "zero 1 and zero 0: equal losses over 5 iterations" cmp -s "$T/l_z1" "$T/l_z0"
check "zero 1: 5 losses" test "$(wc -l <"$T/l_z1")" = 5
pipe d3_zero1 3 3 1 gpipe "data_parallel 3  zero 1"
losses d3_zero1 4 >"$T/l_z31"
losses d3_gpipe 4 >"$T/l_z30"
check "zero 1 with D = 3 (shards of unequal size): equal losses" cmp -s "$T/l_z31" "$T/l_z30"

# --- the gpt and llama workloads: the same reduction over their tensors -------------------
. tests/lib_tf.sh
for arch in gpt llama; do
    tf_pipe "${arch}_d2" "$arch" 2 2 1 onef1b "data_parallel 2"
    run_check "${arch}_d2"
    tf_pipe "${arch}_d2_z1" "$arch" 2 2 1 onef1b "data_parallel 2  zero 1"
    losses "${arch}_d2" 3 >"$T/l_${arch}_z0"
    losses "${arch}_d2_z1" 3 >"$T/l_${arch}_z1"
    check "$arch zero 1 = zero 0: equal losses over 3 iterations" cmp -s "$T/l_${arch}_z1" "$T/l_${arch}_z0"
    tf_pipe "${arch}_d1" "$arch" 2 4 1 onef1b
    losses "${arch}_d1" 3 >"$T/l_${arch}_d1"
    check "$arch D=2 x M=2 and D=1 x M=4: the same losses (1e-5)" close "$T/l_${arch}_z0" "$T/l_${arch}_d1"
done

# --- data_parallel 1 changes nothing ---------------------------------------------------
pipe one_dp 2 4 1 onef1b "data_parallel 1"
"$PIPEC" emit "$T/one_dp.pipe" -o "$T/e1" >/dev/null 2>&1
"$PIPEC" emit "$T/d1_m4.pipe" -o "$T/e0" >/dev/null 2>&1
sed -i 's/one_dp/d1_m4/g' "$T"/e1/*
check "data_parallel 1: main.c as without the setting" cmp -s "$T/e1/main.c" "$T/e0/main.c"
check "data_parallel 1: no data_parallel field" bash -c "! grep -q data_parallel '$T/e0/main.c'"
"$PIPEC" emit "$T/d2_zero1.pipe" -o "$T/e2" >/dev/null 2>&1
check "data_parallel 2: main.c sets it" grep -q "\.data_parallel = 2, \.zero = 1" "$T/e2/main.c"

# --- failures: a failing rank of one replica stops every replica --------------------------
out=$(PIPERUN_FAULT=3:1:fail timeout 60 "$PIPEC" run "$T/d2_1f1b.pipe" --iters 2 --data "$T/text" \
      --cache "$CACHE" 2>&1)
rc=$?
check "fault on rank 3 (stage 1 of replica 1): exit 1" test "$rc" = 1
check "fault: the message names the replica and its stage's rank" \
    grep -q "^piperun: replica 1, rank 1, op .*injected failure" <<<"$out"
check "fault: replica 0 stops" grep -q "^piperun: replica 0, stopped: replica 1 failed" <<<"$out"

# --- MPI: one process per rank, mpirun -np P x D ------------------------------------------
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    skip mpi "mpicc/mpirun not found (make deps installs openmpi-bin libopenmpi-dev)"
elif ! make -s mpi >"$T/err" 2>&1; then
    bad mpi_build "$(tail -n 5 "$T/err")"
else
    export OMPI_MCA_btl="self,vader,tcp" OMPI_MCA_btl_tcp_if_include=lo \
           OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
    run_check d2_1f1b --launcher mpi
    run_check d2_zero1 --launcher mpi
    run_check d2_interleaved --launcher mpi
    run_check d2_p1 --launcher mpi
    losses d2_1f1b 4 --launcher mpi >"$T/l_mpi"
    check "mpi D=2: the losses of the threads launcher (the same arithmetic)" cmp -s "$T/l_mpi" "$T/l_d2"
    losses d2_zero1 5 --launcher mpi >"$T/l_mpi_z1"
    check "mpi zero 1: the losses of zero 0 on threads" cmp -s "$T/l_mpi_z1" "$T/l_z0"
    losses d3_zero1 4 --launcher mpi >"$T/l_mpi_z31"
    check "mpi D=3 zero 1: the losses of zero 0 on threads" cmp -s "$T/l_mpi_z31" "$T/l_z30"
    # a process count other than P x D is refused
    MPIRUN=(mpirun --oversubscribe)
    [ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
    if "$PIPEC" compile --launcher mpi "$T/d2_1f1b.pipe" -o "$T/cm" >"$T/out" 2>"$T/err"; then
        prog=$(cat "$T/out")
        (cd "$T/cm" && timeout 60 "${MPIRUN[@]}" -np 2 "$prog" --quiet --data "$T/text" \
            >/dev/null 2>"$T/en")
        check "mpi -np 2 for P x D = 4 ranks: exit non-zero" test $? != 0
        check "mpi -np 2: says to run 4" grep -q 'started with 2 MPI processes but the program has 4 ranks; run `mpirun -np 4`' "$T/en"
    else
        bad "mpi compile" "$(tail -n 3 "$T/err")"
    fi
fi

finish
