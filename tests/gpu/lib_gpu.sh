# tests/gpu/lib_gpu.sh - shared set-up of the GPU tests (sourced after tests/lib.sh):
# skips the whole script without a GPU, sets $T (a scratch folder removed at exit),
# $CACHE (pipec run's build cache) and gpu_run FILE ARGS... (= pipec run --backend cuda).
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then echo "SKIP: no GPU"; exit 0; fi
PIPEC=${PIPEC:-bin/pipec}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
CACHE="$T/cache"
gpu_run() {
    local f=$1; shift
    timeout 300 "$PIPEC" run --backend cuda "$f" --cache "$CACHE" "$@"
}
# json_get FILE EXPR: evaluates the Python expression EXPR over j = the JSON summary
json_get() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }
