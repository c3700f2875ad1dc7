#!/usr/bin/env bash
# t_diag.sh - diagnostics and warnings against golden files (tests/golden/diag/).
#
# Each NAME.pipe says how it is run on its first `# run: ARGS` line (the arguments of
# pipec, run in tests/golden/diag so that paths print as NAME.pipe); NAME.expected holds
# the exact standard output and error, merged, then a last line "exit N". A difference
# prints a unified diff. The format is docs/spec.md "Diagnostics": FILE:LINE:COL: error[CODE]: message,
# notes, the quoted line and a caret.
cd "$(dirname "$0")/.."
. tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case $PIPEC_ASAN in /*) ;; */*) PIPEC_ASAN=$PWD/$PIPEC_ASAN ;; esac

for f in tests/golden/diag/*.pipe; do
    name=diag/$(basename "$f" .pipe)
    exp=${f%.pipe}.expected
    args=$(sed -n 's/^# run: //p' "$f" | head -n 1)
    if [ -z "$args" ] || [ ! -f "$exp" ]; then
        bad "$name" "no '# run:' line or no .expected beside it"
        continue
    fi
    # shellcheck disable=SC2086 # ARGS is a word list
    ( cd tests/golden/diag && timeout 60 "$PIPEC_ASAN" $args 2>&1; echo "exit $?" ) >"$tmp/out"
    if cmp -s "$exp" "$tmp/out"; then
        ok
    else
        bad "$name" "output differs from $(basename "$exp")"
        diff -u "$exp" "$tmp/out" | head -n 40
    fi
done

# Every diagnostic line of the goldens has the shape of docs/spec.md "Diagnostics".
if grep -ahE '^[^ ].*:[0-9]+:[0-9]+: ' tests/golden/diag/*.expected |
   grep -avE '^[^ :]+:[0-9]+:[0-9]+: (error\[[a-z]+\]|warning\[[a-z]+\]|note): .'; then
    bad "diag format" "a located line is not FILE:LINE:COL: error[CODE]|warning[CODE]|note: message"
else
    ok
fi
finish
