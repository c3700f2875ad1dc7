#!/usr/bin/env bash
# t_same_results.sh - tools/same_outputs.sh (and its second name tools/same-results.sh),
# the before/after check of a compiler change:
# a build compared with itself is the same on print, sim --json and the losses of a
# model the runtime trains; a build whose print differs (a wrapper that adds a line)
# is reported, with exit status 1.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pipec=$(realpath "$PIPEC")

ITERS=2 tools/same-results.sh "$pipec" "$pipec" examples/gpt_tiny.pipe examples/tiny_1f1b.pipe \
    >"$tmp/out" 2>&1
check "a build is the same as itself" test $? = 0
check "print, sim and the losses of gpt_tiny, print and sim of tiny_1f1b compared" \
    grep -qx "5 same, 0 different" "$tmp/out"

cat >"$tmp/pipec" <<W
#!/bin/sh
"$pipec" "\$@"; rc=\$?
[ "\$1" = print ] && echo "# one more line"
exit \$rc
W
chmod +x "$tmp/pipec"
tools/same-results.sh "$pipec" "$tmp/pipec" examples/tiny_1f1b.pipe >"$tmp/out" 2>&1
check "a different print exits 1" test $? = 1
check "and is named" grep -q "^different: pipec print .*tiny_1f1b.pipe" "$tmp/out"
check "sim --json is still the same" grep -qx "1 same, 1 different" "$tmp/out"
# the one tool's usages: --bins is what same-results.sh runs; a bad usage exits 2
tools/same_outputs.sh --bins "$pipec" "$tmp/pipec" examples/tiny_1f1b.pipe >"$tmp/out2" 2>&1
check "same_outputs.sh --bins reports the same difference" test $? = 1 -a "$(cat "$tmp/out2")" = "$(cat "$tmp/out")"
tools/same_outputs.sh --bins "$pipec" >/dev/null 2>&1
check "same_outputs.sh --bins with one build: usage, exit 2" test $? = 2
tools/same-results.sh "$pipec" >/dev/null 2>&1
check "same-results.sh with one build: usage, exit 2" test $? = 2
finish
