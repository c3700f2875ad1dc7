#!/usr/bin/env bash
# t_e2e.sh - end to end: .pipe -> generated C per rank -> libpiperun -> a real training
# iteration whose gradients must match the sequential single-rank reference.
#
#   - every stdlib schedule (gpipe onef1b interleaved zbh1 eager1f1b tpipe, and zbh2 zbv
#     dualpipev interleaved_zb looped_bfs vhalf vmin) on small
#     shapes (P 1..4, M 1..8, V 1..2 where the schedule is defined), with and without
#     every pass, through `pipec run --check`: max relative gradient error < 1e-5
#     (the program itself exits 1 above that; we also read the number it prints);
#   - generated sources compile warning-free with gcc and clang, -std=c11 -Wall -Wextra;
#   - one program: a program built by `pipec compile` and `pipec run` name the same
#     default training text and give the same losses for the same seed; the emitted
#     Makefile builds with plain `make` (the runtime's folders written in, overridable);
#   - run --json: measured_iters states the window measured_ms is the mean of, and
#     per_stage's busy_ms_per_iter is per iteration;
#   - names cannot inject code into generated files;
#   - a failing rank, a crashing rank and a stuck receive end with the specified error
#     and a non-zero exit within seconds (PIPERUN_FAULT, docs/runtime.md).
# The model is `tiny` made smaller (hidden 16, seq 8, mbs 2) so that the grid runs in
# about a minute on 2 cores; compile time dominates.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
CACHE="$T/cache"

# pipe NAME P M V SCHEDULE [EXTRA...]: writes $T/NAME.pipe
pipe() {
    local name=$1 P=$2 M=$3 V=$4 sched=$5; shift 5
    {
        echo 'import "std/models.pipe"'
        echo 'import "std/schedules.pipe"'
        echo "pipeline $name {"
        echo "  stages $P  microbatches $M  chunks $V"
        echo "  model tiny { layers 4  hidden 16  seq 8  mbs 2 }"
        echo "  schedule $sched"
        for x in "$@"; do echo "  $x"; done
        echo "}"
    } >"$T/$name.pipe"
}

# run_check NAME: runs --check and asserts the printed max error is < 1e-5 (linked with
# gold: tests/lib.sh gold_cc)
gold_cc "$T"
run_check() {
    local name=$1 out
    if ! out=$(timeout 60 "${gold_cc[@]}" "$PIPEC" run "$T/$name.pipe" --check --quiet --cache "$CACHE" 2>&1); then
        bad "$name" "run --check failed: $(echo "$out" | tail -n 3)"
        return
    fi
    local err
    err=$(echo "$out" | sed -n 's/^max relative gradient error: //p')
    if [ -z "$err" ]; then
        bad "$name" "no gradient error printed"
    elif awk -v e="$err" 'BEGIN { exit !(e < 1e-5) }'; then
        ok
    else
        bad "$name" "max relative gradient error $err >= 1e-5"
    fi
}

# --- the grid ---------------------------------------------------------------------
# Each point builds its own program (about 0.6 CPU s). `make test` runs 4 of the 7 (P, M)
# for each schedule, 3 of the 5 for interleaved (sample_points: the first and the last
# among them; one stage, fewer micro-batches than stages, odd P, and the largest);
# `make test-full` all of them.
pick() { # N CFG...: the configurations sample_points N keeps (all under test_full)
    local k=$1 i; shift
    if test_full; then printf '%s\n' "$@"; return; fi
    for i in $(sample_points $# "$k"); do echo "${!i}"; done
}
grid=(); while read -r c; do grid+=("$c"); done < <(pick 4 "1 1" "1 3" "2 1" "2 4" "3 5" "4 4" "4 8")
for cfg in "${grid[@]}"; do
    set -- $cfg
    for s in gpipe onef1b eager1f1b zbh1; do
        pipe "${s}_p$1_m$2" "$1" "$2" 1 "$s"
        run_check "${s}_p$1_m$2"
    done
done
grid=(); while read -r c; do grid+=("$c"); done < <(pick 3 "1 2" "2 2" "2 4" "4 4" "4 8")
for cfg in "${grid[@]}"; do
    set -- $cfg
    pipe "interleaved_p$1_m$2_v2" "$1" "$2" 2 interleaved
    run_check "interleaved_p$1_m$2_v2"
done
# the peers' schedules (split backwards, W ops, V-shape and looped placements); under
# vshape, consecutive virtual stages on one rank hand over without messages. Two
# configurations each; `make test` runs one per schedule, the first and the second in
# turn (zbh2 on 3 stages, zbv on 1, looped_bfs with one chunk among them).
peers=("zbh2 1 3 1" "zbh2 3 5 1" "interleaved_zb 2 4 2" "interleaved_zb 3 4 2"
    "looped_bfs 2 3 2" "looped_bfs 3 2 1" "zbv 1 2 2" "zbv 2 4 2" "dualpipev 2 4 2"
    "dualpipev 2 5 2" "vhalf 2 4 2" "vhalf 3 2 2" "vmin 2 3 2" "vmin 2 4 2")
for i in "${!peers[@]}"; do
    cfg=${peers[$i]}
    # the i-th of the 14: the second of zbh2's, the first of interleaved_zb's, ...
    test_full || [ $(((i + i / 2) % 2)) = 1 ] || continue
    set -- $cfg
    pipe "$1_p$2_m$3" "$2" "$3" "$4" "$1"
    case $1 in zbv | dualpipev | vhalf | vmin) sed -i 's/chunks 2/chunks 2 vshape/' "$T/$1_p$2_m$3.pipe" ;; esac
    run_check "$1_p$2_m$3"
done
# the passes that exist: recomputation on some stages (R really recomputes)
for cfg in "2 4 0..=0" "4 8 0..=3" "3 5 1..=2"; do
    set -- $cfg
    pipe "recompute_p$1_m$2" "$1" "$2" 1 onef1b "recompute stages $3 policy full"
    run_check "recompute_p$1_m$2"
    pipe "recompute_zb_p$1_m$2" "$1" "$2" 1 zbh1 "apply recompute(stages=$3, policy=full)"
    run_check "recompute_zb_p$1_m$2"
done
# recomputation with two chunks per rank (the embedding slice's region is R's alone)
for cfg in "2 4 0..=0" "2 4 0..=1" "4 8 0..=2"; do
    set -- $cfg
    pipe "recompute_v2_p$1_m$2" "$1" "$2" 2 interleaved "recompute stages $3 policy full"
    run_check "recompute_v2_p$1_m$2"
done
# every pass of docs/passes.md and docs/tpipe.md, on P = 4, M = 8 with a budget that
# stage 0 (333 KiB under 1F1B) exceeds, so that the Obscura passes have a rank to adjust
for cfg in \
    "ia onef1b 1|apply identify_adjusted" \
    "iacmb onef1b 1|apply identify_adjusted(cmb=true)" \
    "fm onef1b 1|apply identify_adjusted|apply forward_migration" \
    "dr onef1b 1|apply identify_adjusted|apply forward_migration|apply dependency_relaxation" \
    "mr onef1b 1|apply identify_adjusted|apply forward_migration|apply dependency_relaxation|apply migration_refinement" \
    "swap onef1b 1|apply swap(lambda=2, stages=0..=1)" \
    "sar onef1b 1|apply identify_adjusted|apply swap_aware_recompute" \
    "pa onef1b 1|apply identify_adjusted|apply partition_adjust" \
    "obscura onef1b 1|apply obscura" \
    "tpipe tpipe 2" \
    "trecomp tpipe 2|apply trecomp_blockwise" \
    "trecomp_il interleaved 2|apply trecomp_blockwise" \
    "toffload tpipe 2|apply toffload" \
    "stalls onef1b 1|recompute stages 0..=3 policy full|apply recompute_in_stalls" \
    "balance onef1b 1|recompute stages 0..=1 policy full|apply partition_balance"; do
    IFS='|' read -r -a lines <<<"$cfg"
    set -- ${lines[0]}
    name=pass_$1
    pipe "$name" 4 8 "$3" "$2" "memory 300KiB" "${lines[@]:1}"
    sed -i 's|^import "std/schedules.pipe"|&\nimport "std/tpipe.pipe"|' "$T/$name.pipe"
    run_check "$name"
done
# over its budget: `check` rejects it, `run` says so as warnings and still trains
"$PIPEC" check "$T/pass_tpipe.pipe" >/dev/null 2>&1
check "tpipe at 300 KiB fails check" test $? = 1
out=$(timeout 60 "$PIPEC" run "$T/pass_tpipe.pipe" --quiet --cache "$CACHE" 2>&1)
check "run over budget: exit 0" test $? = 0
check "run over budget: the memory diagnostics as warnings" grep -q "warning\[memory\]: stage 1 needs" <<<"$out"
check "run over budget: says it generates anyway" grep -q "over its memory budget (2 warnings)" <<<"$out"
if grep -q "error\[" <<<"$out"; then bad "run over budget: no error lines" "$out"; else ok; fi
# explicit SO/SI (swapping) and R together: the demo schedule
out=$(timeout 60 "$PIPEC" run examples/demo.pipe --check --quiet --cache "$CACHE" 2>&1)
if echo "$out" | grep -q '^max relative gradient error: 0$\|^max relative gradient error: [0-9.e-]*$' &&
   awk -v e="$(echo "$out" | sed -n 's/^max relative gradient error: //p')" 'BEGIN { exit !(e < 1e-5) }'; then ok
else bad demo_check "$(echo "$out" | tail -n 3)"; fi

# --- the demo trains: the loss falls over 8 iterations -------------------------------
out=$(timeout 60 "$PIPEC" run examples/demo.pipe --iters 8 --json --cache "$CACHE" 2>&1)
if echo "$out" | python3 -c '
import json, sys
j = json.load(sys.stdin)
l = j["losses"]
assert len(l) == 8 and l[-1] < l[0] - 0.1, l
assert j["simulated_ms"] > 0 and j["measured_ms"] > 0
# the measured window is stated, and measured_ms is the mean over it: the same double,
# summed in the same order, as every number is printed at full precision (docs/spec.md
# "JSON output")
assert j["measured_iters"] == [2, 8], j["measured_iters"]
assert j["measured_ms"] == sum(j["iter_ms"][1:]) / 7, j
for s in j["per_stage"]:
    # busy time per iteration, not summed over them: within the mean iteration
    assert "busy_ms" not in s and 0 < s["busy_ms_per_iter"] <= sum(j["iter_ms"]) / 8, s
    # the measured live peak never exceeds the planned arena, and reaches the plan
    assert 0 < s["peak_arena_bytes"] <= s["arena_bytes"], s
    assert s["peak_arena_bytes"] == s["planned_peak_bytes"], s
' 2>"$T/err"; then ok; else bad demo_loss "$(cat "$T/err" | tail -n 2)"; fi

# --- one program: the compiled program and `pipec run` train alike ------------------------
# Same default text (found by the same rule and named by the program), same seed: the
# same losses, bit for bit as printed (docs/runtime.md "Training text").
"$PIPEC" compile examples/demo.pipe -o "$T/one" >/dev/null 2>"$T/err" || bad one_compile "$(tail -n 2 "$T/err")"
timeout 120 "$T/one/demo" --iters 2 --seed 11 --json >"$T/one_a.json" 2>"$T/one_a.err"
check "one program: the compiled program runs" test $? = 0
timeout 120 "$PIPEC" run examples/demo.pipe --iters 2 --seed 11 --json --cache "$CACHE" >"$T/one_b.json" 2>"$T/one_b.err"
check "one program: pipec run runs" test $? = 0
check "one program: the same first losses for the same seed" python3 -c '
import json, sys
a, b = (json.load(open(f))["losses"] for f in sys.argv[1:3])
assert len(a) == 2 and a == b, (a, b)' "$T/one_a.json" "$T/one_b.json"
"$T/one/demo" --iters 1 --seed 11 >/dev/null 2>"$T/one_c.err"
"$PIPEC" run examples/demo.pipe --iters 1 --seed 11 --cache "$CACHE" >/dev/null 2>"$T/one_d.err"
check "one program: both name the same training text" test -n "$(grep 'training text' "$T/one_c.err")" -a \
    "$(grep 'training text' "$T/one_c.err")" = "$(grep 'training text' "$T/one_d.err")"
# another seed gives other losses (the comparison above can fail)
timeout 120 "$T/one/demo" --iters 1 --seed 12 --json >"$T/one_e.json" 2>/dev/null
check "one program: another seed, another loss" python3 -c '
import json, sys
a, b = (json.load(open(f))["losses"][0] for f in sys.argv[1:3])
assert a != b, (a, b)' "$T/one_a.json" "$T/one_e.json"

# --- the emitted Makefile: plain `make` builds, the paths stay overridable --------------
pipe mk_p2 2 2 1 onef1b
"$PIPEC" emit "$T/mk_p2.pipe" -o "$T/mk" 2>"$T/err" || bad emit_mk "$(tail -n 2 "$T/err")"
if (cd "$T/mk" && env -u PIPERUN_INC -u PIPERUN_LIB make >"$T/mk.out" 2>&1); then ok
else bad "emitted Makefile: plain make" "$(tail -n 3 "$T/mk.out")"; fi
check "emitted Makefile: the program runs" "$T/mk/mk_p2" --iters 1 --workload synthetic --time-scale 0 --quiet
"$PIPEC" emit "$T/mk_p2.pipe" -o "$T/mk2" 2>/dev/null
(cd "$T/mk2" && make PIPERUN_LIB="$T/nowhere" >"$T/mk2.out" 2>&1)
check "emitted Makefile: PIPERUN_LIB on the command line is used" grep -q "$T/nowhere/libpiperun.a" "$T/mk2.out"
check "emitted Makefile: ... and nothing built from it" test ! -e "$T/mk2/mk_p2"
# a runtime folder without the target's library: emit still writes the program (its
# Makefile then names no found folder), without a double free of the paths it dropped
# (the sanitizer build)
mkdir -p "$T/nolib"
PIPERUN_INC="$PWD/runtime" PIPERUN_LIB="$T/nolib" "$PIPEC_ASAN" emit "$T/mk_p2.pipe" -o "$T/mk3" >"$T/mk3.err" 2>&1
check "emit with a library folder lacking libpiperun.a: no sanitizer report, exit 0 ($(head -c 200 "$T/mk3.err"))" \
    sh -c '! grep -q Sanitizer "$1" && test -f "$2/Makefile"' _ "$T/mk3.err" "$T/mk3"

# --- generated C: header, warnings, escaping ---------------------------------------------
pipe emit_p3 3 4 1 onef1b
if "$PIPEC" emit "$T/emit_p3.pipe" -o "$T/gen" >/dev/null 2>&1; then
    head -n 1 "$T/gen/rank_0.c" | grep -q "Generated by pipec [0-9.]* from .*emit_p3.pipe" && ok ||
        bad emit_header "$(head -n 1 "$T/gen/rank_0.c")"
    for cc in gcc clang; do
        command -v $cc >/dev/null || { skip "emit_$cc" "$cc missing"; continue; }
        if $cc -std=c11 -Wall -Wextra -Werror -Iruntime -c "$T"/gen/*.c -o /dev/null 2>"$T/err" ||
           (cd "$T/gen" && for f in *.c; do $cc -std=c11 -Wall -Wextra -Werror -I"$OLDPWD/runtime" -fsyntax-only "$f" || exit 1; done) 2>"$T/err"; then ok
        else bad "emit_$cc" "$(head -n 5 "$T/err")"; fi
    done
    n=$(ls "$T"/gen/rank_*.c | wc -l); [ "$n" = 3 ] && ok || bad emit_files "$n rank files"
else
    bad emit "pipec emit failed"
fi
# a source path with quotes, comment closers and trigraphs reaches only escaped text
evil="$T/ev\"il*"'??'"/x.pipe"
mkdir -p "$(dirname "$evil")" && cp "$T/emit_p3.pipe" "$evil"
if "$PIPEC" emit "$evil" -o "$T/gen2" >/dev/null 2>&1 &&
   (cd "$T/gen2" && for f in *.c; do gcc -std=c11 -Wall -Wextra -Werror -I"$OLDPWD/runtime" -fsyntax-only "$f" || exit 1; done) 2>"$T/err"; then ok
else bad emit_escape "$(head -n 3 "$T/err")"; fi
# a comment opener, a closer and a trigraph in the folder names, a tab and a non-ASCII
# letter in the file name: the header comment keeps none of them (only its own "/*" and
# "*/") and is printable ASCII
evil2="$T/a??=b/*x*/c\\d"$'\t\xc3\xa9'".pipe"
mkdir -p "$(dirname "$evil2")" && cp "$T/emit_p3.pipe" "$evil2"
if "$PIPEC" emit "$evil2" -o "$T/gen4" >/dev/null 2>&1; then
    h=$(head -n 1 "$T/gen4/rank_0.c")
    inner=${h#/\*}; inner=${inner%\*/}
    case $inner in
    *'/*'* | *'*/'* | *'??'* | *'\'*) bad emit_comment_escape "$h" ;;
    *) ok ;;
    esac
    if printf '%s\n' "$h" | LC_ALL=C grep -q '[^ -~]'; then bad emit_comment_printable "$h"; else ok; fi
    (cd "$T/gen4" && for f in *.c; do gcc -std=c11 -Wall -Wextra -Werror -I"$OLDPWD/runtime" -fsyntax-only "$f" || exit 1; done) 2>"$T/err" &&
        ok || bad emit_comment_escape_compiles "$(head -n 3 "$T/err")"
else
    bad emit_comment_escape "pipec emit failed"
fi
# the CUDA backend emits the same per-rank sources (the backend is chosen at link time)
"$PIPEC" emit "$T/emit_p3.pipe" -o "$T/gen3" --backend cuda >/dev/null 2>"$T/err"
[ $? = 0 ] && [ "$(cd "$T/gen3" && ls rank_*.c | wc -l)" = 3 ] && [ -f "$T/gen3/main.c" ] &&
    ok || bad emit_cuda "$(cat "$T/err")"

# --- failures: a failing rank, a crash, a stuck receive ------------------------------------
pipe fault_p3 3 4 1 onef1b
# timed(EXPECTED_RC_NONZERO PATTERN ENV): runs with a fault, wants exit != 0, the pattern,
# and at most 15 s
fault() {
    local name=$1 pat=$2 env=$3; shift 3
    local t0=$SECONDS out rc
    out=$(env "$env" timeout 30 "$PIPEC" run "$T/fault_p3.pipe" --quiet --cache "$CACHE" "$@" 2>&1); rc=$?
    if [ $rc = 0 ] || [ $rc = 124 ]; then bad "$name" "exit $rc: $out"
    elif ! echo "$out" | grep -q "$pat"; then bad "$name" "no '$pat' in: $out"
    elif [ $((SECONDS - t0)) -gt 15 ]; then bad "$name" "took $((SECONDS - t0)) s"
    else ok; fi
}
# rank 1's op 2 is B0 (1F1B on 3 stages: F0 F1 B0 ...)
fault fault_fail 'piperun: rank 1, op B0 (#2, line [0-9]*): injected failure' PIPERUN_FAULT=1:2:fail
fault fault_alloc 'piperun: rank 2, op F1 (#2, line [0-9]*): out of memory' PIPERUN_FAULT=2:2:alloc
fault fault_segv 'piperun: rank 0, op F1 (#1): fatal signal SIGSEGV' PIPERUN_FAULT=0:1:segv
# (ranks 2 and 0 then wait too, for F1 and for B0's gradient: whichever watchdog fires
# first names its rank and the op it waits for)
fault fault_stuck 'piperun: rank [0-2], op [FB][01] (#[0-9]*, line [0-9]*): watchdog: stuck 1.0 s in the receive of message' \
    PIPERUN_FAULT=0:1:drop --timeout 1

# --- peer failure (docs/runtime.md "Failures"): a rank that stops (like SIGSTOP: no CPU,
# no progress) or dies (its thread ends without a word, like kill -9) under the default
# --timeout of 30 s: the others notice within 10 s, name it and its last op, and print
# the flight recorder of every rank
peer() {
    local name=$1 pat=$2 env=$3; shift 3
    local t0 t1 out rc
    t0=$(date +%s%N)
    out=$(env "$env" timeout 30 "$PIPEC" run "$T/fault_p3.pipe" --quiet --cache "$CACHE" "$@" 2>&1); rc=$?
    t1=$(date +%s%N)
    if [ $rc = 0 ] || [ $rc = 124 ]; then bad "$name" "exit $rc: $out"
    elif ! echo "$out" | grep -q "$pat"; then bad "$name" "no '$pat' in: $out"
    elif ! echo "$out" | grep -q "^piperun: rank 1, its last [0-9]* ops"; then bad "${name}_ring" "$out"
    elif [ $(( (t1 - t0) / 1000000 )) -ge 10000 ]; then bad "$name" "took $(( (t1 - t0) / 1000000 )) ms"
    else ok; fi
}
peer peer_stop 'piperun: rank 1, op B0 (#2, line [0-9]*): peer failure: no progress for 6.0 s in this op' \
    PIPERUN_FAULT=1:2:stop
peer peer_die "piperun: rank 1, op B0 (#2, line [0-9]*): peer failure: the rank's thread is gone" \
    PIPERUN_FAULT=1:2:die
finish
