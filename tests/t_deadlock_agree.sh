#!/usr/bin/env bash
# t_deadlock_agree.sh - the static deadlock verdict agrees with real runs.
#
# 210 random explicit schedules under `make test-full`, 42 under `make test` (the first 42
# of the same seed's 210; tests/deadlock/agree.c: P 2..4, M 1..4, V 1..2, about 40%
# deadlocking; a new seed every run, printed, AGREE_SEED=N replays one). For each:
# the verdict of `pipec check` (exit 0, or exit 1 with only error[deadlock]) against a
# real threaded run of the program generated from it (whatever the verdict) with a 1 s
# watchdog: `check` ok <=> the run exits 0; `check` deadlock <=> the run is stopped by
# the watchdog (exit 1, "watchdog: stuck"). Where check accepts the schedule, the
# program run is what `pipec emit` writes, byte for byte but for the installation's
# folders pipec writes in (the Makefile's runtime folders and the program's data_dir,
# which this tool leaves out).
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
tool=build/tests/deadlock_agree
if [ ! -x "$tool" ]; then
    skip "deadlock agreement" "$tool is not built (make test builds it)"
    finish
    exit
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
N=210
test_full || N=42
seed=${AGREE_SEED:-$(date +%s)}
echo "deadlock agreement: seed $seed, $N schedules"
"$tool" gen "$seed" "$N" "$T" || { bad "generate schedules"; finish; exit; }

# The programs are built as one translation unit (a file that includes each generated .c
# file: one compiler and one assembler run instead of one per file) and linked with gold
# where the compiler can use it: 0.13 CPU s a program against 0.38 (t_e2e and the other
# suites build generated programs file by file, as `pipec` does). Where that build fails
# the files are built one by one, as before.
ldflag=
echo 'int main(void) { return 0; }' >"$T/ld.c"
cc -fuse-ld=gold -o "$T/ld" "$T/ld.c" 2>/dev/null && ldflag=-fuse-ld=gold
# build_prog DIR: DIR/prog from DIR/*.c
build_prog() {
    local d=$1 f
    for f in "$d"/*.c; do echo "#include \"${f##*/}\""; done >"$d/unity.inc"
    cc -std=c11 -O0 -Iruntime -I"$d" $ldflag -o "$d/prog" -x c "$d/unity.inc" -x none \
        build/libpiperun.a -lopenblas -lpthread -lm 2>/dev/null && rm -f "$d/unity.inc" && return
    rm -f "$d/unity.inc"
    cc -std=c11 -O0 -Iruntime -o "$d/prog" "$d"/*.c build/libpiperun.a -lopenblas -lpthread -lm
}

# one I: writes $T/rI.res = "VERDICT RUN DETAIL"
one() {
    local i=$1 f=$T/s$1.pipe verdict run detail=""
    "$PIPEC" check "$f" >"$T/c$i.out" 2>&1
    case $? in
    0) verdict=ok ;;
    1) if grep -q 'error\[' "$T/c$i.out" && ! grep 'error\[' "$T/c$i.out" | grep -vq 'error\[deadlock\]'; then
           verdict=deadlock
       else
           verdict=other
       fi ;;
    *) verdict=crash ;;
    esac
    if ! "$tool" emit "$f" "$T/g$i" 2>"$T/e$i.err" ||
       ! build_prog "$T/g$i" 2>>"$T/e$i.err"; then
        echo "$verdict build-failed $(head -c 200 "$T/e$i.err" | tr '\n' ' ')" >"$T/r$i.res"
        return
    fi
    if [ "$verdict" = ok ]; then
        "$PIPEC" emit "$f" -o "$T/p$i" >/dev/null 2>&1 && rm -f "$T/g$i/prog.o" &&
            diff -r -x prog -I '^    \.data_dir = ' -I '^PIPERUN_\(INC\|LIB\) ?= ' \
                "$T/g$i" "$T/p$i" >/dev/null || detail="(not what pipec emit writes)"
    fi
    timeout 20 "$T/g$i/prog" --workload synthetic --iters 1 --timeout 1 --quiet >"$T/o$i" 2>&1
    case $? in
    0) run=ok ;;
    1) if grep -q 'watchdog: stuck' "$T/o$i"; then run=deadlock; else run=failed; fi ;;
    124) run=hung ;;
    *) run=crashed ;;
    esac
    echo "$verdict $run $detail $(grep -m 1 piperun "$T/o$i")" >"$T/r$i.res"
}
export -f one build_prog
export T tool PIPEC ldflag
# runs that deadlock sleep in the watchdog: more of them than cores
seq 0 $((N - 1)) | xargs -P 8 -I{} bash -c 'one {}'

agree_ok=0 agree_dl=0
for i in $(seq 0 $((N - 1))); do
    read -r verdict run detail <"$T/r$i.res"
    if [ "$verdict" = "$run" ] && [ -z "${detail%%piperun*}" ]; then
        ok
        if [ "$verdict" = ok ]; then agree_ok=$((agree_ok + 1)); else agree_dl=$((agree_dl + 1)); fi
    else
        bad "schedule s$i (seed $seed)" "check says $verdict, the run $run $detail: $(tr '\n' ' ' <"$T/s$i.pipe")"
    fi
done
echo "deadlock agreement: $agree_ok run to completion, $agree_dl deadlocked, as check said"
# all but one in 21 (200 of 210)
check "at least $((N - N / 21)) schedules agreed" test $((agree_ok + agree_dl)) -ge $((N - N / 21))
check "both verdicts were exercised" test "$agree_ok" -gt 0 -a "$agree_dl" -gt 0
finish
