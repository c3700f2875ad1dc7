#!/usr/bin/env bash
# g_transformer.sh - the gpt and llama workloads on the GPU (runtime/cuda/tf_cuda.cu):
#   - `pipec run --backend cuda --check` for both archs over tests/t_transformer.sh's
#     grid (tests/lib_tf.sh tf_grid: every stdlib schedule, an empty stage, R also into a
#     region split by the arena plan, SO/SI, OG/LW): max relative gradient error < 1e-4
#     against the CPU reference (runtime/models/transformer.h), the CUDA backend's bound;
#   - the loss falls over 50 iterations on the default text, and the measured arena peak
#     of every rank equals the static plan;
#   - with the one-process-per-rank launcher (cuda over MPI), --check within 1e-4.
# Shapes as tests/t_transformer.sh (hidden 16, seq 8, mbs 2, 4 layers).
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
. tests/gpu/lib_gpu.sh

. tests/lib_tf.sh
pipe() { tf_pipe "$@"; }
# run_check NAME [RUN ARGS...]: --check on the GPU, the printed max error < 1e-4
run_check() { local n=$1; shift; tf_check "$n" 1e-4 gpu_run_pipe "$@"; }
# gpu_run with the file last (tf_check appends it and the --check arguments)
gpu_run_pipe() {
    local args=() f
    while [ $# -gt 0 ]; do
        case $1 in *.pipe) f=$1 ;; *) args+=("$1") ;; esac
        shift
    done
    gpu_run "$f" "${args[@]}"
}

tf_grid
tf_train gpu_run_pipe

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$ngpu" -lt 2 ]; then
    # NCCL refuses two ranks of one communicator on one device (tests/gpu/quick.sh runs the
    # MPI form on one GPU with a host id per process instead)
    skip transformer_cuda_mpi "cuda over MPI needs 2 GPUs, one per process: $ngpu found"
elif command -v mpicc >/dev/null && command -v mpirun >/dev/null && [ -f build/libpiperun_cuda_mpi.a ]; then
    [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    for arch in gpt llama; do run_check "${arch}_zbh1_p2_m4" --launcher mpi; done
else
    skip transformer_cuda_mpi "mpicc/mpirun or build/libpiperun_cuda_mpi.a not found"
fi
finish
