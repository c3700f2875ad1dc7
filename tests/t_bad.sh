#!/usr/bin/env bash
# tests/t_bad.sh - the bad-input corpus (tests/bad/*.pipe).
#
# Each file carries its expected diagnostics as comments anywhere in it:
#     # expect: NAME.pipe:LINE:COL: error[CODE]: exact message
# `pipec check NAME.pipe` (the sanitizer build, run inside tests/bad) must exit 1
# within 20 seconds, print every expected line (as a substring of its output), and
# print no sanitizer report. Files under tests/bad/inc/ are imported by the others and
# are not run themselves.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
pipec=$(realpath "$PIPEC_ASAN")
cd tests/bad || exit 1
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
for f in *.pipe; do
    [ -e "$f" ] || continue
    expects=$(grep -a -o '# expect: .*' "$f" | sed 's/^# expect: //')
    if [ -z "$expects" ]; then
        bad "$f" "no '# expect:' line"
        continue
    fi
    out=$(timeout 20 "$pipec" check "$f" 2>&1)
    rc=$?
    fail=""
    if [ "$rc" = 124 ]; then
        fail="timed out"
    elif [ "$rc" != 1 ]; then
        fail="exit status $rc, expected 1"
    elif printf '%s\n' "$out" | grep -aqE 'Sanitizer|runtime error:'; then
        fail="sanitizer report"
    else
        while IFS= read -r want; do
            if ! printf '%s\n' "$out" | grep -aqF -- "$want"; then
                fail="missing: $want"
                break
            fi
        done <<<"$expects"
    fi
    if [ -z "$fail" ]; then
        ok
    else
        bad "$f" "$fail"
        printf '%s\n' "$out" | head -n 20 | sed 's/^/    | /'
    fi
done
finish
