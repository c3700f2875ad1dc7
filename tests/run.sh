#!/usr/bin/env bash
# Runs every test: the cmocka unit-test binaries given as arguments, then every
# tests/t_*.sh suite. Each suite prints a last line "N passed, N failed"; cmocka
# binaries print "[  PASSED  ] N test(s)." / "[  FAILED  ] N test(s)...". The totals
# close the run as "N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/.."
export PIPEC="${PIPEC:-$PWD/bin/pipec}"
export PIPEC_ASAN="${PIPEC_ASAN:-$PIPEC}"
export PIPEC_STDLIB="${PIPEC_STDLIB:-$PWD/stdlib}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
pass=0 fail=0 skip=0 failed_suites=""
log=$(mktemp); trap 'rm -f "$log"' EXIT

count() { # $1 = suite name; reads the suite's output in $log, exit status in $2
    local p f s
    p=$(grep -aoE '\[  PASSED  \] [0-9]+ test' "$log" | awk '{s+=$4} END{print s+0}')
    f=$(grep -aoE '\[  FAILED  \] [0-9]+ test' "$log" | awk '{s+=$4} END{print s+0}')
    s=$(grep -aoE '\[  SKIPPED \] [0-9]+ test' "$log" | awk '{s+=$4} END{print s+0}')
    local line
    line=$(grep -aE '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -n "$line" ]; then
        p=$((p + $(echo "$line" | awk '{print $1}')))
        f=$((f + $(echo "$line" | awk '{print $3}')))
        s=$((s + $(echo "$line" | sed -n 's/.* \([0-9][0-9]*\) skipped.*/\1/p' | grep . || echo 0)))
    fi
    if [ "$2" != 0 ] && [ "$f" = 0 ]; then f=1; fi   # a crash counts as a failure
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    [ "$f" = 0 ] || failed_suites="$failed_suites $1"
}

for bin in "$@"; do
    echo "== $(basename "$bin")"
    "$bin" >"$log" 2>&1; rc=$?
    grep -avE '^\[ (RUN|      OK) ' "$log"
    count "$(basename "$bin")" $rc
done

for suite in tests/t_*.sh; do
    [ -e "$suite" ] || continue
    echo "== $(basename "$suite")"
    bash "$suite" >"$log" 2>&1; rc=$?
    cat "$log"
    count "$(basename "$suite")" $rc
done

[ -z "$failed_suites" ] || echo "failing suites:$failed_suites"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
