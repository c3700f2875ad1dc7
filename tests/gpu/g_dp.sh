#!/usr/bin/env bash
# g_dp.sh - data parallelism on the GPU (docs/runtime.md "Data parallelism"): the CUDA
# backend over MPI, one process per rank of the P x D, each stage's gradients averaged
# with ncclAllReduce (ncclAvg) over its D processes, `zero 1`'s shards stepped on each
# replica's device and gathered with ncclBroadcast.
#   - `--check` (replica 0's reduced gradients against the CPU reference over the whole
#     global batch, D x M micro-batches) within the CUDA bound 1e-4, for P = 1 and 2,
#     with and without zero 1;
#   - zero 1 and zero 0 give the same losses (each float stepped once, same kernel);
#   - D = 2 with M micro-batches and D = 1 with 2M train on the same global batch: the
#     same losses within 1e-4;
#   - the threads launcher is refused (the replicas need a process, and a GPU, each).
# All processes may share one GPU: as tests/gpu/quick.sh does, each gets its own
# NCCL_HOSTID and NCCL runs over loopback sockets. Skips without a GPU or MPI.
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
. tests/gpu/lib_gpu.sh
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    skip gpu_dp "mpicc/mpirun not found"; finish; exit
fi
if ! make -s cuda-mpi >"$T/err" 2>&1; then bad gpu_dp_build "$(tail -n 3 "$T/err")"; finish; exit; fi
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for i in $(seq 1 40); do echo "line $i: replicas train on their own shards of the batch."; done >"$T/text"
cat >"$T/one.sh" <<'EOF'
#!/bin/sh
export NCCL_HOSTID="pipec-dp-${OMPI_COMM_WORLD_RANK:-0}" NCCL_SOCKET_IFNAME=lo
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_NVLS_ENABLE=0
exec "$@"
EOF
chmod +x "$T/one.sh"

# pipe NAME P M EXTRA...: the tiny mlp under 1F1B
pipe() {
    local name=$1 P=$2 M=$3; shift 3
    printf '%s\n' 'import "std/models.pipe"' 'import "std/schedules.pipe"' "pipeline $name {" \
        "  stages $P  microbatches $M" '  model tiny { layers 4  hidden 16  seq 8  mbs 2 }' \
        '  schedule onef1b' "$@" '}' >"$T/$name.pipe"
}
# mpi NAME NP ARGS...: compiles NAME for cuda over MPI (once) and runs it on NP processes
mpi() {
    local name=$1 np=$2; shift 2
    [ -x "$T/$name.prog" ] || {
        "$PIPEC" compile --backend cuda --launcher mpi "$T/$name.pipe" -o "$T/$name" >"$T/$name.out" 2>"$T/$name.err" &&
            ln -sf "$(cat "$T/$name.out")" "$T/$name.prog"
    } || return 1
    timeout 180 mpirun --oversubscribe -np "$np" "$T/one.sh" "$T/$name.prog" --data "$T/text" "$@"
}
losses() { python3 -c 'import json,sys; print("\n".join(repr(x) for x in json.load(sys.stdin)["losses"]))'; }
close() {
    python3 - "$1" "$2" "$3" <<'PY'
import sys
a = [float(x) for x in open(sys.argv[1]).read().split()]
b = [float(x) for x in open(sys.argv[2]).read().split()]
t = float(sys.argv[3])
sys.exit(not (a and len(a) == len(b) and all(abs(x - y) <= t * abs(y) for x, y in zip(a, b))))
PY
}
check_ok() {
    local name=$1 out=$2 e
    e=$(sed -n 's/^max relative gradient error: //p' "$out")
    if [ -n "$e" ] && awk -v e="$e" 'BEGIN { exit !(e < 1e-4) }'; then ok
    else bad "$name --check" "error '$e': $(tail -n 3 "$out")"; fi
}

pipe g_p1_d2 1 4 '  data_parallel 2'
mpi g_p1_d2 2 --check --quiet >"$T/o1" 2>&1; check_ok g_p1_d2 "$T/o1"
pipe g_p2_d2 2 4 '  data_parallel 2'
mpi g_p2_d2 4 --check --quiet >"$T/o2" 2>&1; check_ok g_p2_d2 "$T/o2"
pipe g_p2_d2_z1 2 4 '  data_parallel 2  zero 1'
mpi g_p2_d2_z1 4 --check --quiet >"$T/o3" 2>&1; check_ok g_p2_d2_z1 "$T/o3"

mpi g_p2_d2 4 --iters 4 --json 2>/dev/null | losses >"$T/l_z0"
mpi g_p2_d2_z1 4 --iters 4 --json 2>/dev/null | losses >"$T/l_z1"
check "gpu zero 1 = zero 0: the same losses over 4 iterations" close "$T/l_z1" "$T/l_z0" 1e-6
pipe g_p2_d1 2 8
gpu_run "$T/g_p2_d1.pipe" --data "$T/text" --iters 4 --json 2>/dev/null | losses >"$T/l_d1"
check "gpu D=2 x M=4 and D=1 x M=8: the same losses (1e-4)" close "$T/l_z0" "$T/l_d1" 1e-4

gpu_run "$T/g_p2_d2.pipe" --data "$T/text" >"$T/o4" 2>&1
rc=$?
[ "$rc" = 1 ] && grep -q 'use --launcher mpi' "$T/o4" && ok || bad gpu_dp_threads "rc $rc: $(tail -n 2 "$T/o4")"
finish
