#!/usr/bin/env bash
# t_mpi.sh - one process per rank through MPI (runtime/mpi/, docs/cuda.md "Several
# processes: MPI"), oversubscribed on a small machine.
#
# For each configuration
#   - `pipec compile --launcher mpi` links the program against the MPI transport (mpicc,
#     -Wl,--wrap=pr_main,--wrap=pr_run); run as one process it is the plain threaded
#     runtime (the reference);
#   - `pipec run --launcher mpi` runs it under `mpirun -np P --oversubscribe`: one
#     process per rank, messages over MPI point-to-point.
# Asserted: the same losses as the threaded run and as `pipec run` (the program linked
# without MPI), gradients after iteration 1 within 1e-6 relative per tensor
# (PIPERUN_GRAD_DUMP; the accumulation order is the same, so they are in fact equal),
# --check passing on process 0 with the gathered gradients, the same measured peaks;
# the synthetic workload; a failing rank and a stuck receive stopping the whole job
# with the rank named; a process count that does not match the program refused.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    skip mpi "mpicc/mpirun not found (make deps installs openmpi-bin libopenmpi-dev)"
    finish; exit
fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
CACHE="$T/cache"
# the training text of every run (pipec run would otherwise pick the docs)
for i in $(seq 1 40); do echo "line $i: pipelines move activations forward and gradients back."; done >"$T/text"
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
# Shared memory and TCP on the loopback only: runs in containers without a network.
export OMPI_MCA_btl="self,vader,tcp" OMPI_MCA_btl_tcp_if_include=lo \
       OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
if ! make -s mpi >"$T/err" 2>&1; then
    bad mpi_build "$(tail -n 5 "$T/err")"; finish; exit
fi

# pipe NAME P M V SCHEDULE [EXTRA...]: writes $T/NAME.pipe
pipe() {
    local name=$1 P=$2 M=$3 V=$4 sched=$5; shift 5
    {
        echo 'import "std/models.pipe"'
        echo 'import "std/schedules.pipe"'
        echo 'import "std/tpipe.pipe"'
        echo "pipeline $name {"
        echo "  stages $P  microbatches $M  chunks $V"
        echo "  model tiny { layers 4  hidden 16  seq 8  mbs 2 }"
        echo "  schedule $sched"
        for x in "$@"; do echo "  $x"; done
        echo "}"
    } >"$T/$name.pipe"
}

# build NAME: `pipec compile --launcher mpi` into $T/NAME; $T/NAME/prog is the program,
# warning-free
build() {
    local name=$1
    "$PIPEC" compile --launcher mpi "$T/$name.pipe" -o "$T/$name" >"$T/out" 2>"$T/err" &&
        ! grep -qi warning "$T/err" && ln -sf "$(basename "$(cat "$T/out")")" "$T/$name/prog"
}

# mpi_run NAME ARGS...: `pipec run --launcher mpi` of $T/NAME.pipe
mpi_run() {
    local name=$1; shift
    timeout 120 "$PIPEC" run --launcher mpi "$T/$name.pipe" --cache "$CACHE" "$@"
}

# json_field FILE KEY: the line of the summary holding "KEY": [...] (losses) or per_stage
field() { sed -n "s/.*\"$2\": \(\[[^]]*\]\).*/\1/p" "$1" | head -n 1; }
peaks() { grep -o '"peak_arena_bytes": [0-9]*' "$1" | tr '\n' ' '; }

# grads_close A B: every tensor's max |a - b| / max |b| <= 1e-6, same names and sizes
grads_close() {
    awk 'NR == FNR { a[FNR] = $0; n = FNR; next }
         { if (FNR > n) exit 1; split(a[FNR], x, " "); split($0, y, " ")
           if (y[2] != "") {            # "name count" header
               if (x[1] != y[1] || x[2] != y[2]) { print "tensor " x[1] " vs " y[1]; exit 1 }
               if (cur != "") check(); cur = y[1]; md = 0; mr = 0; next }
           d = x[1] - y[1]; if (d < 0) d = -d; r = y[1] < 0 ? -y[1] : y[1]
           if (d > md) md = d; if (r > mr) mr = r; m = FNR }
         function check() { if (md / (mr > 1e-30 ? mr : 1e-30) > 1e-6) { print cur ": " md; bad = 1 } }
         END { if (cur != "") check(); if (FNR != n) { print "lengths differ"; exit 1 }; exit bad }' "$1" "$2"
}

# compare NAME P: threaded vs P processes, mlp with --check
compare() {
    local name=$1 P=$2 d="$T/$1"
    if ! build "$name"; then bad "$name" "build: $(tail -n 5 "$T/err")"; return; fi
    if ! (cd "$d" && PIPERUN_GRAD_DUMP="$d/g1" timeout 60 ./prog --iters 3 --check --json --data "$T/text" \
            >"$d/o1" 2>"$d/e1"); then
        bad "$name" "threaded run: $(tail -n 3 "$d/e1")"; return
    fi
    if ! PIPERUN_GRAD_DUMP="$d/gP" mpi_run "$name" --iters 3 --check --json --data "$T/text" \
            >"$d/oP" 2>"$d/eP"; then
        bad "$name" "pipec run --launcher mpi (P=$P): $(tail -n 5 "$d/eP")"; return
    fi
    # one process per rank really ran: process k wrote nothing to stdout but 0 did
    [ "$(grep -c '"stage":' "$d/oP")" = "$P" ] && ok || bad "${name}_summary" "$(head -c 200 "$d/oP")"
    local l1 lP lc
    l1=$(field "$d/o1" losses) lP=$(field "$d/oP" losses)
    [ -n "$l1" ] && [ "$l1" = "$lP" ] && ok || bad "${name}_losses" "threaded $l1, mpi $lP"
    # the program linked without MPI (pipec run) trains the same
    lc=$(timeout 60 "$PIPEC" run "$T/$name.pipe" --iters 3 --json --data "$T/text" --cache "$CACHE" 2>&1 |
         sed -n 's/.*"losses": \(\[[^]]*\]\).*/\1/p')
    [ "$lc" = "$lP" ] && ok || bad "${name}_losses_cpu" "pipec run $lc, mpi $lP"
    if [ -s "$d/g1" ] && [ -s "$d/gP" ] && grads_close "$d/gP" "$d/g1" >"$T/err"; then ok
    else bad "${name}_grads" "$(head -n 3 "$T/err")"; fi
    # --check ran on process 0 against the gathered gradients of every rank
    grep -q '"max_grad_error": 0[,}]\|"max_grad_error": [0-9.e-]*,' "$d/oP" &&
        awk -v e="$(sed -n 's/.*"max_grad_error": \([0-9.e+-]*\).*/\1/p' "$d/oP")" \
            'BEGIN { exit !(e < 1e-5) }' && ok || bad "${name}_check" "$(grep -o '"max_grad_error[^,]*' "$d/oP")"
    # one summary line per stage, with every rank's measured peak (gathered on process 0)
    [ "$(peaks "$d/o1")" = "$(peaks "$d/oP")" ] && [ -n "$(peaks "$d/oP")" ] && ok ||
        bad "${name}_peaks" "threaded $(peaks "$d/o1"), mpi $(peaks "$d/oP")"
}

pipe onef1b_p2 2 4 1 onef1b
compare onef1b_p2 2
pipe onef1b_p4 4 8 1 onef1b
compare onef1b_p4 4
pipe zbh1_p4 4 4 1 zbh1
compare zbh1_p4 4
pipe interleaved_p2 2 4 2 interleaved
compare interleaved_p2 2
pipe recompute_p4 4 8 1 onef1b "recompute stages 0..=3 policy full"
compare recompute_p4 4
# T-Recomp: recomputation of the shallow chunks and the dep tokens it adds between ranks
pipe trecomp_p2 2 4 2 tpipe "apply trecomp_blockwise"
compare trecomp_p2 2
# Obscura's swapping: SO/SI on the copy threads of each process
pipe swap_p4 4 8 1 onef1b "apply swap(lambda=2, stages=0..=1)"
compare swap_p4 4

# --- the documented command line, with no extra environment (docs/cuda.md): every
# process sends its gradients for --check, not only when PIPERUN_GRAD_DUMP is set
if [ -x "$T/onef1b_p2/prog" ]; then
    start=$(date +%s)
    if (cd "$T" && env -u PIPERUN_GRAD_DUMP -u OMPI_MCA_btl -u OMPI_MCA_btl_tcp_if_include \
            -u OMPI_MCA_btl_vader_single_copy_mechanism -u OMPI_MCA_rmaps_base_oversubscribe \
            XDG_CACHE_HOME="$T/xdg" timeout 60 "$PIPEC" run onef1b_p2.pipe --launcher mpi --check \
            >"$T/doc_out" 2>"$T/doc_err"); then
        grep -q '^max relative gradient error: ' "$T/doc_out" && ok ||
            bad mpi_check_documented "no gradient report: $(tail -n 3 "$T/doc_out")"
    else
        bad mpi_check_documented "$(grep -v '^\s*$' "$T/doc_err" | head -n 3)"
    fi
    [ $(($(date +%s) - start)) -lt 20 ] && ok || bad mpi_check_time "took $(($(date +%s) - start)) s"
fi

# --- the synthetic workload over MPI -------------------------------------------------------
d="$T/onef1b_p4"
if [ -x "$d/prog" ]; then
    if mpi_run onef1b_p4 --workload synthetic --iters 2 --time-scale 0.001 --json \
            >"$d/os" 2>"$d/es"; then
        grep -q '"workload": "synthetic"' "$d/os" && [ "$(grep -c '"stage":' "$d/os")" = 4 ] && ok ||
            bad synthetic_mpi "$(head -c 300 "$d/os")"
    else bad synthetic_mpi "$(tail -n 3 "$d/es")"; fi

    # --- failures stop the whole job, naming the rank --------------------------------------
    start=$(date +%s)
    if PIPERUN_FAULT=2:1:fail mpi_run onef1b_p4 --quiet >/dev/null 2>"$d/ef"; then
        bad fail_mpi "exit 0 with an injected failure"
    else
        grep -q 'piperun: rank 2, op .*injected failure' "$d/ef" && ok ||
            bad fail_mpi "$(grep -v '^\s*$' "$d/ef" | head -n 3)"
    fi
    # a rank that stops sending: its receiver's watchdog fires after --timeout
    if PIPERUN_FAULT=0:0:drop mpi_run onef1b_p4 --quiet --timeout 2 >/dev/null 2>"$d/ed"; then
        bad drop_mpi "exit 0 with a dropped message"
    else
        grep -q 'watchdog: stuck 2.0 s' "$d/ed" && ok || bad drop_mpi "$(grep -v '^\s*$' "$d/ed" | head -n 3)"
    fi
    [ $(($(date +%s) - start)) -lt 40 ] && ok || bad fail_time "failures took $(($(date +%s) - start)) s"

    # --- a process count that does not match the ranks is refused (mpirun by hand) ----------
    if (cd "$d" && timeout 60 "${MPIRUN[@]}" -np 2 ./prog --quiet >/dev/null 2>"$d/en"); then
        bad np_mismatch "exit 0 with -np 2 for 4 ranks"
    else
        grep -q 'started with 2 MPI processes but the program has 4 ranks' "$d/en" && ok ||
            bad np_mismatch "$(grep -v '^\s*$' "$d/en" | head -n 3)"
    fi
fi

# --- peer failure: kill -9 or SIGSTOP of one process of a running job. Under the default
# --timeout (30 s) the job ends within 10 s, and the runtime (not only mpirun) names the
# failed rank and its last op.
pipe trial 2 8 1 onef1b
sed -i 's/^  model .*/  costs { f 1ms  b 1ms  act 1MiB  weights 1MiB }/' "$T/trial.pipe"
# trial NAME SIGNAL PATTERN
trial() {
    local name=$1 sig=$2 pat=$3 pid mp r1="" t0 t1 k
    "$PIPEC" run --launcher mpi "$T/trial.pipe" --cache "$CACHE" --workload synthetic \
        --iters 1000000 --quiet >/dev/null 2>"$T/$name.err" &
    pid=$!
    for k in $(seq 1 100); do   # the rank-1 process of the job, once it runs
        mp=$(pgrep -P "$pid" mpirun) || { sleep 0.2; continue; }
        for c in $(pgrep -P "${mp:-0}"); do
            tr '\0' '\n' 2>/dev/null <"/proc/$c/environ" | grep -qx 'OMPI_COMM_WORLD_RANK=1' && r1=$c
        done
        [ -n "$r1" ] && break
        sleep 0.2
    done
    if [ -z "$r1" ]; then bad "$name" "no rank-1 process"; kill "$pid"; wait "$pid"; return; fi
    sleep 2
    t0=$(date +%s%N)
    kill "-$sig" "$r1"
    for k in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    t1=$(date +%s%N)
    if kill -0 "$pid" 2>/dev/null; then
        bad "$name" "still running $(( (t1 - t0) / 1000000 )) ms after SIG$sig"
        kill -9 "$r1" 2>/dev/null; kill "$pid"; wait "$pid"; return
    fi
    wait "$pid" && bad "$name" "exit 0 after SIG$sig" && return
    kill -9 "$r1" 2>/dev/null   # a stopped process the launcher left behind
    if ! grep -q "$pat" "$T/$name.err"; then bad "$name" "no '$pat' in: $(grep -v '^  ' "$T/$name.err" | head -n 8)"
    elif [ $(( (t1 - t0) / 1000000 )) -ge 10000 ]; then bad "$name" "took $(( (t1 - t0) / 1000000 )) ms"
    else ok; fi
}
trial mpi_kill9 KILL 'piperun: rank 1, op [A-Z]*[0-9]* (#[0-9]*, line [0-9]*): peer failure: process 1 (pid [0-9]*) is gone'
trial mpi_sigstop STOP 'piperun: rank 1, op [A-Z]*[0-9]* (#[0-9]*, line [0-9]*): peer failure: no heartbeat for 6.0 s'
finish
