#!/usr/bin/env bash
# tests/t_bad.sh - the bad-input corpus (tests/bad/*.pipe).
#
# Each file carries its expected diagnostics as comments anywhere in it:
#     # expect: NAME.pipe:LINE:COL: error[CODE]: exact message
# `pipec check NAME.pipe` (the sanitizer build, run inside tests/bad) must exit 1
# within 20 seconds, print every expected line (as a substring of its output), and
# print no sanitizer report. Files under tests/bad/inc/ are imported by the others and
# are not run themselves.
#
# `make test` checks all the files in one run of the sanitizer build (`check` takes many
# files: each file's diagnostics, then its summary line "NAME.pipe: N errors"), which
# must exit 1 with no sanitizer report; each file's part of the output, up to its
# summary line, must say it has errors and hold every expected line. A file whose part
# does not (or every file, when the run as a whole fails) is checked again alone, as
# `make test-full` checks every file.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
pipec=$(realpath "$PIPEC_ASAN")
cd tests/bad || exit 1
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
# The expected lines, the sanitizer check and the matching are shell string operations
# (no grep, sed or printf process per file or per line: the sanitizer build's check is
# then the only process a file costs, with its timeout).
files=()
for f in *.pipe; do [ -e "$f" ] && files+=("$f"); done
declare -A part=()
if ! test_full && [ "${#files[@]}" -gt 0 ]; then
    all=$(timeout 300 "$pipec" check "${files[@]}" 2>&1)
    if [ $? = 1 ] && [[ $all != *Sanitizer* && $all != *'runtime error:'* ]]; then
        i=0 cur=""
        while IFS= read -r line; do
            cur+=$line$'\n'
            if [ "$i" -lt "${#files[@]}" ] && [[ $line == "${files[$i]}: "* ]]; then
                part[${files[$i]}]=$cur
                cur="" i=$((i + 1))
            fi
        done <<<"$all"
    fi
fi
# in_part FILE: FILE's part of the one run says it has errors and holds every expected line
in_part() {
    local p=${part[$1]:-} want
    [ -n "$p" ] || return 1
    [[ $p =~ (^|$'\n')"$1: "[0-9]+" error" ]] || return 1
    for want in "${expects[@]}"; do [[ $p == *"$want"* ]] || return 1; done
}
for f in "${files[@]}"; do
    expects=()
    while IFS= read -r line || [ -n "$line" ]; do
        case $line in *'# expect: '*) expects+=("${line#*'# expect: '}") ;; esac
    done <"$f"
    if [ "${#expects[@]}" = 0 ]; then
        bad "$f" "no '# expect:' line"
        continue
    fi
    if in_part "$f"; then ok; continue; fi
    out=$(timeout 20 "$pipec" check "$f" 2>&1)
    rc=$?
    fail=""
    if [ "$rc" = 124 ]; then
        fail="timed out"
    elif [ "$rc" != 1 ]; then
        fail="exit status $rc, expected 1"
    elif [[ $out == *Sanitizer* || $out == *'runtime error:'* ]]; then
        fail="sanitizer report"
    else
        for want in "${expects[@]}"; do
            if [[ $out != *"$want"* ]]; then
                fail="missing: $want"
                break
            fi
        done
    fi
    if [ -z "$fail" ]; then
        ok
    else
        bad "$f" "$fail"
        printf '%s\n' "$out" | head -n 20 | sed 's/^/    | /'
    fi
done
finish
