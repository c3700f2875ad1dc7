#!/usr/bin/env bash
# t_same_results.sh - tools/same_outputs.sh (and its second name tools/same-results.sh),
# the before/after check of a compiler change:
# a build compared with itself is the same on print, sim --json and the losses of a
# model the runtime trains; a build whose print differs (a wrapper that adds a line)
# is reported, with exit status 1; --chain compares each adjacent pair of revisions,
# reusing the builds kept under SAME_OUTPUTS_CACHE.
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

# --chain over three commits of a small git repository (tags A, B, C) whose builds are
# already in the cache (a wrapper of this pipec; C's adds a line to print), so nothing
# is built: A..B is the same, B..C differs on print, and the chain exits 1.
repo=$tmp/repo cache=$tmp/cache
mkdir -p "$repo/tools" && cp tools/same_outputs.sh "$repo/tools/"
git -C "$repo" init -q && git -C "$repo" add tools
for t in A B C; do
    git -C "$repo" -c user.name=t -c user.email=t@t commit -q --allow-empty -m "$t" &&
        git -C "$repo" tag "$t"
    d=$cache/$(git -C "$repo" rev-parse "$t")
    mkdir -p "$d/bin" "$d/examples" && cp examples/tiny_1f1b.pipe "$d/examples/"
    ln -s "$PWD/stdlib" "$d/stdlib"
    if [ $t = C ]; then cp "$tmp/pipec" "$d/bin/pipec"
    else printf '#!/bin/sh\nexec "%s" "$@"\n' "$pipec" >"$d/bin/pipec"; fi
    chmod +x "$d/bin/pipec" && : >"$d/.same_outputs_built"
done
(cd "$repo" && SAME_OUTPUTS_CACHE=$cache tools/same_outputs.sh --chain A B C) >"$tmp/out3" 2>&1
check "a chain with a differing pair exits 1" test $? = 1
check "one summary line per pair" test "$(grep -c '^[ABC]\.\.[ABC]: ' "$tmp/out3")" = 2
check "A..B is the same" grep -qx "A..B: 2 same, 0 different" "$tmp/out3"
check "B..C differs on print, the example named as in the tree" \
    grep -qx "different: pipec print examples/tiny_1f1b.pipe" "$tmp/out3"
check "B..C's summary" grep -qx "B..C: 1 same, 1 different" "$tmp/out3"
check "the cached builds are reused, nothing built" eval '! grep -q building "$tmp/out3"'
(cd "$repo" && SAME_OUTPUTS_CACHE=$cache tools/same_outputs.sh --chain A B) >"$tmp/out4" 2>&1
check "a chain of same pairs exits 0" test $? = 0 -a "$(cat "$tmp/out4")" = "A..B: 2 same, 0 different"
(cd "$repo" && tools/same_outputs.sh --chain A) >/dev/null 2>&1
check "--chain with one revision: usage, exit 2" test $? = 2
(cd "$repo" && SAME_OUTPUTS_CACHE=$cache tools/same_outputs.sh --chain A nosuchrev) >/dev/null 2>&1
check "--chain with an unknown revision exits 2" test $? = 2
finish
