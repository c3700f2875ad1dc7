# tests/lib_tf.sh - shared by the gpt/llama workload tests (tests/t_transformer.sh on the
# CPU, tests/gpu/g_transformer.sh on the GPU); sourced after tests/lib.sh with $T set.
#   $GPT, $LLAMA     tiny model blocks (hidden 16, seq 8, mbs 2, 4 layers; llama with
#                    grouped-query attention)
#   tf_pipe NAME ARCH P M V SCHEDULE [EXTRA...]   writes $T/NAME.pipe
#   tf_check NAME BOUND CMD...   runs CMD $T/NAME.pipe --check --quiet and asserts that
#                    the printed max relative gradient error is below BOUND
#   tf_grid          for both archs, every stdlib schedule (the peers' V-shape and looped
#                    ones included), an explicit V-shape, an empty stage, and the passes
#                    that add R, W, SO/SI, OG/LW: `run_check NAME` (the caller's) on each;
#                    TF_GRID_SAMPLE=1 (t_transformer.sh in `make test`) runs 4 of the 8
#                    points of the four 1F1B-like schedules per arch, and each of the 7
#                    peers' schedules under one arch
#   tf_train CMD...  50 iterations of CMD FILE: the summary names the arch, the loss
#                    falls by more than 1 nat from 5-6.2, and every rank's measured arena
#                    peak equals the static plan
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

tf_grid() {
    local arch cfg s
    for arch in gpt llama; do
        for cfg in "2 4" "4 8"; do
            set -- $cfg
            for s in gpipe onef1b eager1f1b zbh1; do
                # TF_GRID_SAMPLE=1: each (arch, schedule) at one of the two (P, M), each
                # (arch, P, M) with two schedules, the two archs the other way round
                if [ "${TF_GRID_SAMPLE:-0}" = 1 ]; then
                    case $arch/$s/$1 in gpt/gpipe/4 | gpt/eager1f1b/4 | gpt/onef1b/2 | gpt/zbh1/2) continue ;; esac
                    case $arch/$s/$1 in llama/gpipe/2 | llama/eager1f1b/2 | llama/onef1b/4 | llama/zbh1/4) continue ;; esac
                fi
                pipe "${arch}_${s}_p$1_m$2" $arch "$1" "$2" 1 "$s"
                run_check "${arch}_${s}_p$1_m$2"
            done
        done
        # the peers' schedules: split backwards, W ops, V-shape and looped placements
        # (TF_GRID_SAMPLE=1: each under one arch, gpt the first, third, ..., llama the rest)
        local i=0
        for cfg in "zbh2 3 5 1" "interleaved_zb 2 4 2" "looped_bfs 2 3 2" "zbv 2 4 2" \
            "dualpipev 2 4 2" "vhalf 2 4 2" "vmin 2 4 2"; do
            i=$((i + 1))
            if [ "${TF_GRID_SAMPLE:-0}" = 1 ]; then
                case $arch/$((i % 2)) in gpt/0 | llama/1) continue ;; esac
            fi
            set -- $cfg
            pipe "${arch}_$1" $arch "$2" "$3" "$4" "$1"
            case $1 in zbv | dualpipev | vhalf | vmin) sed -i 's/chunks 2/chunks 2 vshape/' "$T/${arch}_$1.pipe" ;; esac
            run_check "${arch}_$1"
        done
        pipe "${arch}_interleaved" $arch 2 4 2 interleaved
        run_check "${arch}_interleaved"
        # V-shape placement with an explicit schedule (a stage's two chunks hand over
        # without messages on the last rank)
        {
            echo 'import "std/models.pipe"'
            echo "pipeline ${arch}_vexplicit {"
            echo "  stages 2  microbatches 2  chunks 2 vshape"
            if [ "$arch" = gpt ]; then echo "  $GPT"; else echo "  $LLAMA"; fi
            echo "  stage 0 { F0 F1 F0.1 F1.1 B0.1 B1.1 B0 B1 }"
            echo "  stage 1 { F0 F1 F0.1 F1.1 B0.1 B1.1 B0 B1 }"
            echo "}"
        } >"$T/${arch}_vexplicit.pipe"
        run_check "${arch}_vexplicit"
        # an uneven partition with an empty middle stage
        pipe "${arch}_partition" $arch 3 4 1 onef1b "partition [3, 0, 1]"
        run_check "${arch}_partition"
        # R (recompute from the checkpoint), also into a region split by the arena plan
        pipe "${arch}_recompute" $arch 4 8 1 onef1b "recompute stages 0..=2 policy full"
        run_check "${arch}_recompute"
        pipe "${arch}_recompute_zb" $arch 2 4 1 zbh1 "apply recompute(stages=0..=1, policy=full)"
        run_check "${arch}_recompute_zb"
        # SO/SI (Obscura's swapping), T-Recomp and T-Offload (OG/LW)
        pipe "${arch}_swap" $arch 4 8 1 onef1b "apply swap(lambda=2, stages=0..=1)"
        run_check "${arch}_swap"
        pipe "${arch}_trecomp" $arch 2 4 2 tpipe "apply trecomp_blockwise"
        run_check "${arch}_trecomp"
        pipe "${arch}_toffload" $arch 2 4 2 tpipe "apply toffload"
        run_check "${arch}_toffload"
    done
}

tf_train() {
    local arch out
    for arch in gpt llama; do
        pipe "${arch}_train" $arch 4 8 1 onef1b "recompute stages 0..=0 policy full"
        out=$("$@" "$T/${arch}_train.pipe" --iters 50 --lr 0.1 --json 2>&1)
        if echo "$out" | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["workload"] == sys.argv[1], j["workload"]
l = j["losses"]
assert len(l) == 50 and 5.0 < l[0] < 6.2, l[:3]
assert sum(l[-5:]) / 5 < l[0] - 1.0, (l[0], l[-5:])
for s in j["per_stage"]:
    # the measured live peak reaches the static plan and never exceeds the arena
    assert s["peak_arena_bytes"] == s["planned_peak_bytes"], s
    assert 0 < s["peak_arena_bytes"] <= s["arena_bytes"], s
' "$arch" 2>"$T/err"; then ok; else bad "${arch}_train" "$(tail -n 2 "$T/err") $(echo "$out" | tail -n 2)"; fi
    done
}
