#!/usr/bin/env bash
# tests/t_fuzz_replay.sh - replays the fuzzing seed corpora (valid and invalid inputs,
# some found by `make fuzz`) through pipec built with AddressSanitizer and
# UndefinedBehaviorSanitizer: tests/fuzz/corpus through `pipec check`,
# tests/fuzz/csv_corpus through `pipec import-csv`, tests/fuzz/pass_corpus as the
# `--pass` list of `pipec opt` on tests/fuzz/pass_base.pipe. Every input must
# finish within 20 seconds with exit status 0 (accepted) or 1 (diagnosed), never a
# crash or a sanitizer report.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
pipec=$(realpath "$PIPEC_ASAN")
export PIPEC_STDLIB="$PWD/stdlib"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
check "the pass corpus' pipeline reads" "$pipec" check -q tests/fuzz/pass_base.pipe
for f in tests/fuzz/corpus/* tests/fuzz/csv_corpus/* tests/fuzz/pass_corpus/*; do
    [ -f "$f" ] || continue
    case $f in
    */csv_corpus/*) out=$(timeout 20 "$pipec" import-csv "$f" 2>&1) ;;
    */pass_corpus/*) out=$(timeout 20 "$pipec" opt tests/fuzz/pass_base.pipe --pass "$(cat "$f")" 2>&1) ;;
    *) out=$(timeout 20 "$pipec" check "$f" 2>&1) ;;
    esac
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
