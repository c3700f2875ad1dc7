#!/usr/bin/env bash
# bench_runtime.sh - runtime benchmarks (not tests). Each prints a ratio against a
# baseline measured in the same run, on the same machine, and the ratio's spread
# (the range of the per-round ratios over their median). ROUNDS=N (default 5) sets the
# rounds, ITERS=N (default 12) the iterations per process.
#  1. P = 1, the stdlib `tiny` model: the generated program (`pipec compile`) against
#     bench/mlp_loop.c, a hand-written single-rank training loop calling the same kernels
#     without the pipeline runtime. Rounds alternate the two (ABAB), each a fresh
#     process; both time the same window, from the start of the first forward to the end
#     of the last backward of the M micro-batches (the generated side's from its
#     --trace: no barrier wake-up, no zero_grad, no SGD step); the first iteration of
#     each process is dropped. Min and median per side; target: median ratio within 3%,
#     spread under 10%.
#  2. Threaded runtime, `--workload synthetic`, P = 2, M = 256, 1F1B, f = b = 10 us:
#     measured over simulated iteration time (target <= 1.5), in rounds alternating
#     with bench/onef1b_loop.c, the same schedule of busy-waited ops on two threads with
#     the runtime's hand-off and none of its bookkeeping: how far this machine lets two
#     threads get, and the runtime's own cost per op beside it; then STEADY_RUNS (10)
#     runs of both, each run's ratio (target <= 1.2 in every run, the worst printed)
#     and context switches per op (getrusage; target: no more than the loop's); the
#     same with the MPI launcher after it.
#  3. Zero costs, P = 2, M = 256, 1F1B: the MPI launcher (`pipec run --launcher mpi`)
#     against the threaded one, ABAB (target <= 3x); and its time per message (the
#     iteration over the 2M messages of its critical path: in 1F1B with P = 2 every
#     step waits for one message each way) against a plain MPI_Send/MPI_Recv ping-pong
#     (bench/mpi_pingpong.c, one-way latency) run in between (target <= 3x).
#  4. P = 2 1F1B on `tiny` with op costs measured by `pipec run --profile`: measured
#     over simulated iteration time (target within 15%).
cd "$(dirname "$0")/.." || exit 1
PIPEC=${PIPEC:-bin/pipec}
ROUNDS=${ROUNDS:-5}
ITERS=${ITERS:-12}
CC=${CC:-cc}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
BLAS_CFLAGS=$(pkg-config --cflags openblas 2>/dev/null || echo -I/usr/include/x86_64-linux-gnu/openblas-pthread)
BLAS_LIBS=$(pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
echo "machine: $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1), load $(cut -d' ' -f1-3 /proc/loadavg)"
if python3 -c "import os, sys; sys.exit(not os.getloadavg()[0] > 0.5 * os.cpu_count())"; then
    echo "note: the load average exceeds half the CPUs: other processes take CPU time from both"
    echo "      sides at random, so the ratios and spreads below measure that competition too;"
    echo "      the targets hold for an otherwise idle machine (docs/performance.md)"
fi

mk() { # NAME P M BODY...: a pipeline importing the stdlib
    local name=$1 P=$2 M=$3; shift 3
    {
        echo 'import "std/models.pipe"'; echo 'import "std/schedules.pipe"'
        echo "pipeline $name {"; echo "  stages $P  microbatches $M"
        for x in "$@"; do echo "  $x"; done
        echo "  schedule onef1b"; echo "}"
    } >"$T/$name.pipe"
}
# stats SIDE_A_FILE SIDE_B_FILE LABEL_A LABEL_B TARGET: files hold one line per round,
# the round's per-iteration times; prints min/median per side, the median ratio A/B and
# the spread of the per-round ratios
stats() {
    python3 - "$@" <<'PY'
import statistics as st, sys
a, b, la, lb, target = sys.argv[1:6]
ra = [[float(x) for x in l.split()] for l in open(a) if l.strip()]
rb = [[float(x) for x in l.split()] for l in open(b) if l.strip()]
fa = [x for r in ra for x in r]; fb = [x for r in rb for x in r]
per = [st.median(x) / st.median(y) for x, y in zip(ra, rb)]
ratio = st.median(fa) / st.median(fb)
spread = (max(per) - min(per)) / st.median(per)
print(f"  {la}: min {min(fa):.3f} ms, median {st.median(fa):.3f} ms")
print(f"  {lb}: min {min(fb):.3f} ms, median {st.median(fb):.3f} ms")
print(f"  ratio {ratio:.3f} at the median, {min(fa) / min(fb):.3f} at the min; "
      f"spread {100 * spread:.1f}% over {len(per)} rounds ({target})")
PY
}
# the op window of each iteration but the first in a --trace: from the start of its first
# op to the end of its last (ms), the window mlp_loop times
windows() {
    python3 -c "
import json, sys
w = {}
for e in json.load(sys.stdin)['traceEvents']:
    if e.get('ph') == 'X':
        i = e['args']['iter']; a, b = w.get(i, (1e300, -1e300))
        w[i] = (min(a, e['ts']), max(b, e['ts'] + e['dur']))
print(' '.join('%.4f' % ((b - a) / 1e3) for i, (a, b) in sorted(w.items())[1:]))"
}
iters_of() { python3 -c "import json,sys; print(' '.join(str(x) for x in json.load(sys.stdin)['iter_ms'][1:]))"; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }

# --- 1. P = 1 against the hand-written loop ----------------------------------------------
cat README.md docs/*.md >"$T/text"
mk p1 1 8 "model tiny"
if ! "$PIPEC" compile "$T/p1.pipe" -o "$T/p1" >"$T/exe" 2>"$T/err"; then
    echo "P=1: pipec compile failed: $(tail -n 3 "$T/err")"; exit 1
fi
# shellcheck disable=SC2086
if ! $CC -std=c11 -O2 -Wall -Wextra -D_POSIX_C_SOURCE=200809L -Iruntime -Iruntime/models $BLAS_CFLAGS \
        -o "$T/mlp_loop" bench/mlp_loop.c build/libpiperun.a $BLAS_LIBS -lpthread -lm; then
    echo "P=1: mlp_loop build failed"; exit 1
fi
prog=$(cat "$T/exe")
# tiny: hidden 64, layers 4, seq 64, mbs 4, vocab 256; M = 8
for r in $(seq 1 "$ROUNDS"); do
    "$prog" --iters "$ITERS" --json --data "$T/text" --trace "$T/a_trace.json" >"$T/a.json" || exit 1
    windows <"$T/a_trace.json" >>"$T/a"
    "$T/mlp_loop" 64 4 64 4 8 256 "$ITERS" "$T/text" >"$T/b.out" || exit 1
    sed -n 's/^iter [0-9]*: time \([0-9.]*\) ms/\1/p' "$T/b.out" | tail -n +2 | tr '\n' ' ' >>"$T/b"
    echo >>"$T/b"
done
la=$(python3 -c "import json; print('%.4f' % json.load(open('$T/a.json'))['losses'][-1])")
lb=$(sed -n 's/^loss //p' "$T/b.out")
echo "P=1 M=8 tiny, generated program vs hand-written loop (same kernels, same batches: last loss $la vs $lb):"
stats "$T/a" "$T/b" "generated" "hand-written" "target: within 3%, spread < 10%"
python3 - "$T/a" "$T/b" <<'PY'
import os, statistics as st, sys
r = [[[float(x) for x in l.split()] for l in open(f) if l.strip()] for f in sys.argv[1:3]]
per = [st.median(x) / st.median(y) for x, y in zip(*r)]
ratio = st.median([x for l in r[0] for x in l]) / st.median([x for l in r[1] for x in l])
spread = (max(per) - min(per)) / st.median(per)
load, ncpu = os.getloadavg()[0], os.cpu_count()
if (abs(ratio - 1) > 0.03 or spread >= 0.10) and load > 0.5 * ncpu:
    print(f"  note: not within the target here: with a load of {load:.1f} on {ncpu} CPUs the two")
    print("        sides lose the CPU to other processes at random, for milliseconds at a time,")
    print("        which is more than the 3% (a few ms) the target resolves")
PY

# --- 2. threaded synthetic, f = b = 10 us ----------------------------------------------
# ABAB against bench/onef1b_loop.c: the same schedule and busy-waited ops on two threads
# that hand off through atomic counters without the runtime (what the machine gives).
mk syn 2 256 "costs { f 10us  b 10us  act 1KiB  weights 1KiB }"
if ! $CC -std=c11 -O2 -Wall -Wextra -D_POSIX_C_SOURCE=200809L -o "$T/onef1b_loop" \
        bench/onef1b_loop.c -lpthread; then
    echo "P=2 synthetic: onef1b_loop build failed"; exit 1
fi
"$PIPEC" compile "$T/syn.pipe" -o "$T/syn" >"$T/syn_exe" 2>"$T/err" || {
    echo "P=2 synthetic: pipec compile failed: $(tail -n 3 "$T/err")"; exit 1; }
: >"$T/sa"; : >"$T/sb"; : >"$T/sh"
for r in $(seq 1 "$ROUNDS"); do
    out=$("$(cat "$T/syn_exe")" --workload synthetic --iters "$ITERS" --json) || exit 1
    echo "$out" | iters_of >>"$T/sa"
    s=$(echo "$out" | field simulated_ms)
    python3 -c "print(' '.join(['$s'] * 3))" >>"$T/sb"
    "$T/onef1b_loop" 256 10 10 "$ITERS" | sed -n 's/^iter [0-9]*: time \([0-9.]*\) ms/\1/p' |
        tail -n +2 | tr '\n' ' ' >>"$T/sh"
    echo >>"$T/sh"
done
echo "P=2 M=256 1F1B synthetic f=b=10us, threaded: measured vs simulated:"
stats "$T/sa" "$T/sb" "measured" "simulated" "target: <= 1.5"
echo "  the hand-written two-thread loop of the same ops (bench/onef1b_loop.c), same rounds:"
stats "$T/sh" "$T/sb" "hand-written" "simulated" "what the machine allows" | sed -n 's/^  ratio/  hand-written: ratio/p'
stats "$T/sa" "$T/sh" "measured" "hand-written" "runtime over hand-written" | sed -n 's/^  ratio/  runtime: ratio/p'
python3 - "$T/sa" "$T/sh" "$T/sb" <<'PY'
import statistics as st, sys
rows = [[float(x) for l in open(f) if l.strip() for x in l.split()] for f in sys.argv[1:4]]
a, h, s = (st.median(r) for r in rows)
print(f"  runtime overhead per critical-path op: {(a - h) * 1e3 / 512:.2f} us at the median, "
      f"{(min(rows[0]) - min(rows[1])) * 1e3 / 512:.2f} us at the min")
print("  (measured - hand-written over the 2M = 512 ops; target <= 5 us)")
if h / s > 1.5:
    print(f"  note: the hand-written loop itself takes {h / s:.2f}x the simulated time here: the")
    print("        two ranks do not get two CPUs (other processes hold them), so no runtime can")
    print("        reach 1.5 on this machine now; docs/performance.md has the figures")
PY
# Steadiness: STEADY_RUNS (default 10) runs, each the generated program then the loop,
# fresh processes; per run the ratio of their median iterations (the first dropped)
# and each side's context switches per op (getrusage of the child: ru_nvcsw +
# ru_nivcsw, over its whole run, setup included, / (ITERS x 4M ops)). Target: every
# run's ratio <= 1.2 and the runtime's switches per op no more than the loop's.
echo "  steadiness, ${STEADY_RUNS:-10} runs (runtime then loop, fresh processes, each run's medians):"
python3 - "$(cat "$T/syn_exe")" "$T/onef1b_loop" "$ITERS" "${STEADY_RUNS:-10}" <<'PY'
import json, os, resource, statistics as st, subprocess, sys
prog, loop, iters, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ops = iters * 4 * 256  # F and B of 256 micro-batches on each of 2 ranks, per iteration
def child(cmd):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cs = (r1.ru_nvcsw - r0.ru_nvcsw) + (r1.ru_nivcsw - r0.ru_nivcsw)
    return out, cs / ops
ratios, csr, csl = [], [], []
for k in range(runs):
    out, c1 = child([prog, "--workload", "synthetic", "--iters", str(iters), "--json"])
    a = st.median(json.loads(out)["iter_ms"][1:])
    out, c2 = child([loop, "256", "10", "10", str(iters)])
    h = st.median([float(l.split()[3]) for l in out.splitlines()[1:]])
    ratios.append(a / h); csr.append(c1); csl.append(c2)
    print(f"    run {k + 1}: runtime {a:.3f} ms, loop {h:.3f} ms, ratio {a / h:.3f}; "
          f"context switches per op {c1:.4f} vs {c2:.4f}")
w = max(range(runs), key=lambda k: ratios[k])
print(f"  worst ratio {ratios[w]:.3f} (run {w + 1}; target <= 1.2 in every run); context switches "
      f"per op: runtime median {st.median(csr):.4f}, max {max(csr):.4f}; loop median "
      f"{st.median(csl):.4f}, max {max(csl):.4f} (target: runtime <= loop)")
load, ncpu = os.getloadavg()[0], os.cpu_count()
if ratios[w] > 1.2 and load > 0.5 * ncpu:
    print(f"  note: with a load of {load:.1f} on {ncpu} CPUs both sides wait for CPUs that other")
    print("        processes hold, at random; the target is for an otherwise idle machine")
PY
if command -v mpirun >/dev/null && make -s mpi >/dev/null 2>&1; then
    : >"$T/sm"
    for r in $(seq 1 "$ROUNDS"); do
        "$PIPEC" run "$T/syn.pipe" --launcher mpi --workload synthetic --iters "$ITERS" --json \
            --cache "$T/c" | iters_of >>"$T/sm" || exit 1
    done
    echo "  the same with the MPI launcher (one process per rank), for comparison:"
    stats "$T/sm" "$T/sb" "measured" "simulated" "target: <= 1.5" | sed -n 's/^  ratio/  mpi: ratio/p'
fi

# --- 3. MPI launcher against threaded, and against an MPI ping-pong -------------------
if command -v mpicc >/dev/null && command -v mpirun >/dev/null && make -s mpi >/dev/null 2>&1; then
    mk zero 2 256 "costs { f 0us  b 0us  act 1KiB  weights 1KiB }"
    MPIRUN=(mpirun -np 2 --oversubscribe); [ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
    mpicc -std=c11 -O2 -Wall -Wextra -o "$T/pingpong" bench/mpi_pingpong.c || exit 1
    : >"$T/ma"; : >"$T/mb"; : >"$T/pa"; : >"$T/pb"
    for r in $(seq 1 "$ROUNDS"); do
        "$PIPEC" run "$T/zero.pipe" --launcher mpi --workload synthetic --iters "$ITERS" --json \
            --cache "$T/c" | iters_of >"$T/m1" || exit 1
        cat "$T/m1" >>"$T/ma"
        "$PIPEC" run "$T/zero.pipe" --workload synthetic --iters "$ITERS" --json --cache "$T/c" |
            iters_of >>"$T/mb" || exit 1
        # per message: each iteration's time over its 2M = 512 critical-path messages, us
        python3 -c "import sys; print(' '.join('%.4f' % (float(x) * 1e3 / 512) for x in sys.argv[1:]))" \
            $(cat "$T/m1") >>"$T/pa"
        pp=$("${MPIRUN[@]}" "$T/pingpong" 20000 16 | sed -n 's/^one-way \([0-9.]*\) us/\1/p')
        python3 -c "print(' '.join(['$pp'] * 3))" >>"$T/pb"
    done
    echo "P=2 M=256 1F1B zero costs: MPI launcher vs threaded iteration:"
    stats "$T/ma" "$T/mb" "mpi" "threaded" "target: <= 3"
    echo "  MPI transport per message vs MPI_Send/MPI_Recv ping-pong one-way latency (us, not ms):"
    stats "$T/pa" "$T/pb" "transport" "ping-pong" "target: <= 3" | sed 's/ ms/ us/g'
else
    echo "P=2 MPI: SKIP (no mpicc/mpirun, or make mpi failed)"
fi

# --- 4. profiled costs: simulated vs measured --------------------------------------------
mk p2 2 8 "model tiny"
"$PIPEC" run "$T/p2.pipe" --iters "$ITERS" --profile -o "$T/costs.pipe" --cache "$T/c" >/dev/null || exit 1
mk p2prof 2 8 "model tiny" "$(grep -v '^#' "$T/costs.pipe" | tr '\n' ' ')"
out=$("$PIPEC" run "$T/p2prof.pipe" --iters "$ITERS" --json --cache "$T/c") || exit 1
m=$(echo "$out" | field measured_ms); s=$(echo "$out" | field simulated_ms)
printf "P=2 M=8 1F1B tiny, profiled costs: measured %.3f ms/iter, simulated %.3f ms, ratio %.3f (target within 15%%)\n" \
    "$m" "$s" "$(python3 -c "print($m / $s)")"
