#!/usr/bin/env bash
# tools/same-results.sh OLD_PIPEC NEW_PIPEC [EXAMPLE.pipe...] - shows that a change to
# the compiler changed no result: for every example (default: examples/*.pipe),
#   - `pipec print` and `pipec sim --json` of the two builds are byte-identical
#     (output, diagnostics and exit status), and
#   - where the runtime trains the example's model for real (`pipec check --mem` then
#     reports the workload's real region sizes), `pipec run --iters N --json` of the two
#     builds gives the same losses (N = $ITERS, default 3, on a fixed text; each build
#     has a fresh cache, so each program is built with its own pipec).
# Both use this checkout's stdlib unless PIPEC_STDLIB is set; a pipec that is not in a
# built tree (a copy such as /tmp/pipec-old) runs with this checkout's runtime.
# Prints one line per difference and "N same, N different"; exits 1 on a difference.
#
#   make bin/pipec && cp bin/pipec /tmp/pipec-old   # before the change
#   ... change, make bin/pipec ...
#   tools/same-results.sh /tmp/pipec-old bin/pipec
set -u
if [ $# -lt 2 ]; then
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
old=$(realpath "$1") new=$(realpath "$2")
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
export PIPEC_STDLIB="${PIPEC_STDLIB:-$root/stdlib}"
[ $# -gt 0 ] || set -- "$root"/examples/*.pipe
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
same=0 diff=0
# a fixed text to train on (the default, the docs, may differ between the two trees)
python3 -c "print('the pipeline runs forward and backward over every micro-batch. ' * 400)" >"$tmp/text"
differ() { echo "different: $*"; diff=$((diff + 1)); }

losses() { # $1 pipec, $2 file, $3 cache name: the "losses" array of a short run
    local rt=()
    [ -f "$(dirname "$1")/../runtime/piperun.h" ] ||
        rt=(env PIPERUN_INC="$root/runtime" PIPERUN_LIB="$root/build")
    timeout 600 "${rt[@]}" "$1" run "$2" --iters "${ITERS:-3}" --json --quiet --data "$tmp/text" \
        --cache "$tmp/$3" 2>&1 |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["losses"])' 2>&1
}

for f in "$@"; do
    for cmd in print "sim --json"; do
        # shellcheck disable=SC2086
        a=$("$old" $cmd "$f" 2>&1; echo "exit $?")
        # shellcheck disable=SC2086
        b=$("$new" $cmd "$f" 2>&1; echo "exit $?")
        if [ "$a" = "$b" ]; then same=$((same + 1)); else differ "pipec $cmd $f"; fi
    done
    if "$new" check --mem "$f" 2>/dev/null | grep -q "workload's real region sizes"; then
        a=$(losses "$old" "$f" cache-old)
        b=$(losses "$new" "$f" cache-new)
        if [ "$a" = "$b" ] && [ "${a#[}" != "$a" ]; then
            same=$((same + 1))
        else
            differ "pipec run $f: losses $a against $b"
        fi
    fi
done
echo "$same same, $diff different"
[ "$diff" = 0 ]
