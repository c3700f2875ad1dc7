#!/usr/bin/env bash
# bench_transformer.sh - the gpt and llama workloads (not tests): the simulator's
# iteration time with op costs profiled by `pipec run --profile` against the measured
# one, on 2 ranks (ranks <= cores on the 2-core machine) for a few schedules. Target:
# within 15% (docs/performance.md).
#
# Each configuration, ITERS iterations twice:
#   1. `pipec run --profile -o costs --json`: the measured iterations and, from the same
#      iterations (the second on: the first warms up), the mean f, b, w, r per virtual
#      stage; `pipec sim` of the pipeline with that costs block pasted in (it overrides
#      the cost model's derived values). same = mean iteration (2..) / simulated: the
#      simulator against the run whose op times it was given.
#   2. the pipeline with that costs block, run again: next = its mean iteration (2..) /
#      the same simulated time, i.e. costs profiled in one run predicting the next one.
# On an idle machine the two agree; on a shared one op times drift between runs (a
# factor of 2 in minutes) and only `same` still measures the simulator. The load average
# is printed with the table. Shapes as examples/*_tiny.pipe (4 layers, hidden 64, seq
# 64, micro-batch 4), 8 micro-batches.
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
# the mean iteration after the first (the profile's iterations)
mean_iter() { python3 -c "import json,sys,statistics as st; print(st.mean(json.load(open(sys.argv[1]))['iter_ms'][1:]))" "$1"; }
makespan() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['makespan_ms'])" "$1"; }
status=0
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null) on $(nproc) CPUs"
printf "%-6s %-12s %10s %10s %10s %7s %7s\n" arch schedule run1_ms sim_ms run2_ms same next
for arch in gpt llama; do
    for cfg in "gpipe 1" "onef1b 1" "zbh1 1" "interleaved 2"; do
        set -- $cfg
        mk "${arch}_$1" "$arch" "$1" "$2"
        if ! "$PIPEC" run "$T/${arch}_$1.pipe" --iters "$ITERS" --profile -o "$T/costs" --json \
                --cache "$T/c" >"$T/run1.json" 2>"$T/err"; then
            echo "$arch $1: profiling run failed: $(tail -n 2 "$T/err")"; status=1; continue
        fi
        mk "${arch}_$1_prof" "$arch" "$1" "$2" "$T/costs"
        if ! "$PIPEC" sim "$T/${arch}_$1_prof.pipe" --json >"$T/sim.json" 2>"$T/err" ||
           ! "$PIPEC" run "$T/${arch}_$1_prof.pipe" --iters "$ITERS" --json --cache "$T/c" \
                >"$T/run2.json" 2>"$T/err"; then
            echo "$arch $1: simulation or second run failed: $(tail -n 2 "$T/err")"; status=1; continue
        fi
        m1=$(mean_iter "$T/run1.json") s=$(makespan "$T/sim.json") m2=$(mean_iter "$T/run2.json")
        printf "%-6s %-12s %10.3f %10.3f %10.3f %7.3f %7.3f\n" "$arch" "$1" "$m1" "$s" "$m2" \
            "$(echo "$m1 / $s" | bc -l)" "$(echo "$m2 / $s" | bc -l)"
    done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
exit $status
