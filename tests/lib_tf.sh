# tests/lib_tf.sh - shared by the gpt/llama workload tests (tests/t_transformer.sh on the
# CPU, tests/gpu/g_transformer.sh on the GPU); sourced after tests/lib.sh with $T set.
#   $GPT, $LLAMA     tiny model blocks (hidden 16, seq 8, mbs 2, 4 layers; llama with
#                    grouped-query attention)
#   tf_pipe NAME ARCH P M V SCHEDULE [EXTRA...]   writes $T/NAME.pipe
#   tf_check NAME BOUND CMD...   runs CMD $T/NAME.pipe --check --quiet and asserts that
#                    the printed max relative gradient error is below BOUND
GPT='model gpt_1_3b { layers 4  hidden 16  heads 2  vocab 256  seq 8  mbs 2  dtype fp32 }'
LLAMA='model llama2_70b { layers 4  hidden 16  heads 4  kv_heads 2  ffn 24  vocab 256  seq 8  mbs 2  dtype fp32 }'

tf_pipe() {
    local name=$1 arch=$2 P=$3 M=$4 V=$5 sched=$6; shift 6
    {
        echo 'import "std/models.pipe"'
        echo 'import "std/schedules.pipe"'
        echo 'import "std/tpipe.pipe"'
        echo "pipeline $name {"
        echo "  stages $P  microbatches $M  chunks $V"
        if [ "$arch" = gpt ]; then echo "  $GPT"; else echo "  $LLAMA"; fi
        echo "  schedule $sched"
        for x in "$@"; do echo "  $x"; done
        echo "}"
    } >"$T/$name.pipe"
}

tf_check() {
    local name=$1 bound=$2 out err; shift 2
    if ! out=$("$@" "$T/$name.pipe" --check --quiet 2>&1); then
        bad "$name" "run --check failed: $(echo "$out" | tail -n 3)"
        return
    fi
    err=$(echo "$out" | sed -n 's/^max relative gradient error: //p')
    if [ -z "$err" ]; then
        bad "$name" "no gradient error printed"
    elif awk -v e="$err" -v b="$bound" 'BEGIN { exit !(e < b) }'; then
        ok
    else
        bad "$name" "max relative gradient error $err >= $bound"
    fi
}
