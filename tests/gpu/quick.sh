#!/usr/bin/env bash
# tests/gpu/quick.sh - `make test-gpu-quick`: the GPU check that fits a short loan of one
# GPU (about 6 minutes on one H100 with the build). Prints "SKIP: no GPU" and exits 0
# without one. In order, most telling first:
#   1. a gpt/llama grid (1F1B, ZB-H1, interleaved, recomputation, swap, T-Recomp,
#      T-Offload) with --check (1e-4 against the CPU reference), and the losses of three
#      iterations equal to the CPU backend's within 1e-3;
#   2. a fault: an injected failure on rank 1 ends the run with exit 1 within 30 s, the
#      failure named (the teardown aborts every communicator at once);
#   3. two MPI processes sharing the one GPU through NCCL over sockets on the loopback
#      interface (each process its own NCCL_HOSTID), so the MPI form's pair set-up,
#      connect, streams, drain and finalize run on a one-GPU machine; --check, and a
#      fault-injected rank that ends the job with exit 1;
#   4. compute-sanitizer on one region-pieces case (skipped when it is not installed);
#   5. every example (g_examples.sh), the synthetic replay (g_synthetic.sh) and the
#      swap-overlap test (g_swap.sh).
# `make test-gpu` stays the full suite (tests/gpu/run.sh).
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
. tests/gpu/lib_gpu.sh
. tests/lib_tf.sh
t0=$SECONDS
pipe() { tf_pipe "$@"; }
gpu_run_pipe() {
    local args=() f
    while [ $# -gt 0 ]; do
        case $1 in *.pipe) f=$1 ;; *) args+=("$1") ;; esac
        shift
    done
    gpu_run "$f" "${args[@]}"
}
run_check() { local n=$1; shift; tf_check "$n" 1e-4 gpu_run_pipe "$@"; }

# same_losses NAME: three iterations on the CPU and on the GPU, losses within 1e-3
same_losses() {
    local n=$1
    "$PIPEC" run "$T/$n.pipe" --cache "$CACHE" --iters 3 --json >"$T/$n.cpu.json" 2>"$T/err" ||
        { bad "${n}_losses" "cpu run: $(tail -n 2 "$T/err")"; return; }
    gpu_run "$T/$n.pipe" --iters 3 --json >"$T/$n.gpu.json" 2>"$T/err" ||
        { bad "${n}_losses" "gpu run: $(tail -n 2 "$T/err")"; return; }
    python3 - "$T/$n.cpu.json" "$T/$n.gpu.json" <<'EOF' && ok || bad "${n}_losses" "losses differ"
import json, sys
a = json.load(open(sys.argv[1]))["losses"]
b = json.load(open(sys.argv[2]))["losses"]
assert len(a) == len(b) == 3, (a, b)
d = max(abs(x - y) for x, y in zip(a, b))
print("losses cpu %s gpu %s max diff %.2g" % (a, b, d))
sys.exit(0 if d <= 1e-3 else 1)
EOF
}

# --- 1. the gpt/llama grid ------------------------------------------------------------------
for arch in gpt llama; do
    pipe "${arch}_q_onef1b" $arch 4 8 1 onef1b
    pipe "${arch}_q_zbh1" $arch 2 4 1 zbh1
    pipe "${arch}_q_interleaved" $arch 2 4 2 interleaved
    pipe "${arch}_q_recompute" $arch 4 8 1 onef1b "recompute stages 0..=2 policy full"
    pipe "${arch}_q_swap" $arch 4 8 1 onef1b "apply swap(lambda=2, stages=0..=1)"
    pipe "${arch}_q_trecomp" $arch 2 4 2 tpipe "apply trecomp_blockwise"
    pipe "${arch}_q_toffload" $arch 2 4 2 tpipe "apply toffload"
    for c in onef1b zbh1 interleaved recompute swap trecomp toffload; do
        run_check "${arch}_q_$c"
    done
    same_losses "${arch}_q_onef1b"
    same_losses "${arch}_q_recompute"
done
echo "grid done at $((SECONDS - t0)) s"

# --- 2. a fault ends the run ----------------------------------------------------------------
s0=$SECONDS
PIPERUN_FAULT=1:2:fail timeout 60 "$PIPEC" run --backend cuda "$T/gpt_q_onef1b.pipe" \
    --cache "$CACHE" >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" = 1 ] && grep -q 'piperun: rank 1, op .*injected failure' "$T/err" &&
   [ $((SECONDS - s0)) -le 30 ]; then ok
else bad fault_ends_run "exit $rc after $((SECONDS - s0)) s: $(tail -n 3 "$T/err")"; fi

# --- 3. two MPI processes on one GPU --------------------------------------------------------
if command -v mpicc >/dev/null && command -v mpirun >/dev/null && [ -f build/libpiperun_cuda_mpi.a ]; then
    [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    pipe gpt_q_mpi gpt 2 4 1 onef1b
    if "$PIPEC" compile --backend cuda --launcher mpi "$T/gpt_q_mpi.pipe" -o "$T/mpi" >"$T/out" 2>&1; then
        prog=$(find "$T/mpi" -maxdepth 1 -type f -perm -u+x -name 'gpt_q_mpi*' | head -n 1)
        # each process its own NCCL host id, NCCL over loopback sockets only
        cat >"$T/one.sh" <<'EOF'
#!/bin/sh
export NCCL_HOSTID="pipec-quick-${OMPI_COMM_WORLD_RANK:-0}" NCCL_SOCKET_IFNAME=lo
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_NVLS_ENABLE=0
exec "$@"
EOF
        chmod +x "$T/one.sh"
        if timeout 120 mpirun --oversubscribe -np 2 "$T/one.sh" "$prog" --check >"$T/out" 2>&1 &&
           grep -q 'max relative gradient error' "$T/out"; then ok
        else bad nccl_two_processes "$(tail -n 5 "$T/out")"; fi
        s0=$SECONDS
        PIPERUN_FAULT=1:3:fail timeout 90 mpirun --oversubscribe -np 2 -x PIPERUN_FAULT "$T/one.sh" \
            "$prog" >"$T/out" 2>&1
        rc=$?
        if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q 'injected failure' "$T/out" &&
           [ $((SECONDS - s0)) -le 45 ]; then ok
        else bad nccl_two_processes_fault "exit $rc after $((SECONDS - s0)) s: $(tail -n 4 "$T/out")"; fi
    else
        bad nccl_two_processes "compile: $(tail -n 3 "$T/out")"
    fi
else
    skip nccl_two_processes "mpicc/mpirun or build/libpiperun_cuda_mpi.a not found"
fi

# --- 4. compute-sanitizer on one region-pieces case -----------------------------------------
san=$(command -v compute-sanitizer || { [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" ] &&
      echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer"; })
if [ -n "$san" ]; then
    "$PIPEC" compile --backend cuda "$T/gpt_q_recompute.pipe" -o "$T/san" >"$T/out" 2>&1
    prog=$(find "$T/san" -maxdepth 1 -type f -perm -u+x -name 'gpt_q_recompute*' | head -n 1)
    if [ -n "$prog" ] && timeout 300 "$san" --error-exitcode 99 "$prog" --check >"$T/out" 2>&1; then ok
    else bad compute_sanitizer "$(tail -n 5 "$T/out")"; fi
else
    skip compute_sanitizer "compute-sanitizer not found"
fi
echo "mpi, fault and sanitizer done at $((SECONDS - t0)) s"

# --- 5. the examples, the synthetic replay, the swap overlap --------------------------------
for g in g_examples.sh g_synthetic.sh g_swap.sh; do
    out=$(bash "tests/gpu/$g" 2>&1)
    echo "$out" | grep -v '^[0-9]* passed'
    line=$(echo "$out" | grep '^[0-9]* passed' | tail -n 1)
    if [ -z "$line" ]; then bad "$g" "ended without a summary"; continue; fi
    set -- $line
    T_PASS=$((T_PASS + $1)) T_FAIL=$((T_FAIL + $3)) T_SKIP=$((T_SKIP + $5))
done
echo "quick GPU check: $((SECONDS - t0)) s"
finish
