#!/usr/bin/env bash
# bench_transformer.sh - the gpt and llama workloads (not tests): with op costs profiled
# by `pipec run --profile` written as a costs block into the pipeline, the simulator's
# iteration time against the measured one, on 2 ranks (ranks <= cores on the 2-core
# machine) for a few schedules. Target: within 15% (docs/performance.md).
#
# Each configuration: run ITERS iterations with --profile -o costs; paste the block into
# the pipeline (it overrides the cost model's derived values); run ITERS iterations
# again; print the measured mean and median iteration, the simulated one, and median /
# simulated. Shapes as examples/*_tiny.pipe
# (4 layers, hidden 64, seq 64, micro-batch 4), 8 micro-batches.
cd "$(dirname "$0")/.." || exit 1
PIPEC=${PIPEC:-bin/pipec}
ITERS=${ITERS:-20}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
GPT='model gpt_1_3b { layers 4  hidden 64  heads 4  vocab 256  seq 64  mbs 4  dtype fp32 }'
LLAMA='model llama2_70b { layers 4  hidden 64  heads 4  kv_heads 2  ffn 176  vocab 256  seq 64  mbs 4  dtype fp32 }'
mk() { # NAME ARCH SCHEDULE CHUNKS [COSTS_FILE]
    {
        echo 'import "std/models.pipe"'; echo 'import "std/schedules.pipe"'
        echo "pipeline $1 {"; echo "  stages 2  microbatches 8  chunks $4"
        if [ "$2" = gpt ]; then echo "  $GPT"; else echo "  $LLAMA"; fi
        echo "  schedule $3"
        [ -n "${5:-}" ] && grep -v '^#' "$5" | sed 's/^/  /'
        echo "}"
    } >"$T/$1.pipe"
}
json() { python3 -c "import json,sys; j=json.load(sys.stdin); print(j['$1'])"; }
# the median iteration after the first: on a shared machine a few iterations stall
median() { python3 -c "import json,sys,statistics as st; print(st.median(json.load(sys.stdin)['iter_ms'][1:]))"; }
status=0
printf "%-6s %-12s %12s %12s %12s %8s\n" arch schedule mean_ms median_ms simulated_ms ratio
for arch in gpt llama; do
    for cfg in "gpipe 1" "onef1b 1" "zbh1 1" "interleaved 2"; do
        set -- $cfg
        mk "${arch}_$1" "$arch" "$1" "$2"
        if ! "$PIPEC" run "$T/${arch}_$1.pipe" --iters "$ITERS" --profile -o "$T/costs" \
                --cache "$T/c" >/dev/null; then
            echo "$arch $1: profiling run failed"; status=1; continue
        fi
        mk "${arch}_$1_prof" "$arch" "$1" "$2" "$T/costs"
        out=$("$PIPEC" run "$T/${arch}_$1_prof.pipe" --iters "$ITERS" --json --cache "$T/c") ||
            { echo "$arch $1: run failed"; status=1; continue; }
        m=$(echo "$out" | json measured_ms); s=$(echo "$out" | json simulated_ms)
        md=$(echo "$out" | median)
        printf "%-6s %-12s %12.3f %12.3f %12.3f %8.3f\n" "$arch" "$1" "$m" "$md" "$s" \
            "$(echo "$md / $s" | bc -l)"
    done
done
exit $status
