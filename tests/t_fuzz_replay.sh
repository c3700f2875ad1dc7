#!/usr/bin/env bash
# tests/t_fuzz_replay.sh - replays the fuzzing seed corpus (tests/fuzz/corpus: valid
# and invalid inputs, some found by `make fuzz`) through `pipec check` built with
# AddressSanitizer and UndefinedBehaviorSanitizer. Every input must finish within 20
# seconds with exit status 0 (accepted) or 1 (diagnosed), never a crash or a
# sanitizer report.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
pipec=$(realpath "$PIPEC_ASAN")
export PIPEC_STDLIB="$PWD/stdlib"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
for f in tests/fuzz/corpus/*; do
    [ -f "$f" ] || continue
    out=$(timeout 20 "$pipec" check "$f" 2>&1)
    rc=$?
    if [ "$rc" != 0 ] && [ "$rc" != 1 ]; then
        bad "$f" "exit status $rc"
        printf '%s\n' "$out" | tail -n 15 | sed 's/^/    | /'
    elif printf '%s\n' "$out" | grep -aqE 'Sanitizer|runtime error:'; then
        bad "$f" "sanitizer report"
        printf '%s\n' "$out" | head -n 15 | sed 's/^/    | /'
    else
        ok
    fi
done
finish
