#!/bin/bash
# same_outputs.sh - shows that two revisions of pipec agree on every example: `pipec print`
# and `pipec sim --json` byte-identical, and the generated program of each example trains
# to the same losses (`pipec run FILE`).
#
#   tools/same_outputs.sh [BASE [HEAD]]
#
# BASE and HEAD are git revisions; HEAD `.` (the default) is the working tree as it is,
# uncommitted changes included. BASE defaults to the merge-base of HEAD and `main`.
# Each is built from a clean copy in a temporary folder (make bin/pipec and the CPU
# runtime), then every examples/*.pipe of HEAD is run through both:
#
#   print   pipec print FILE                     stdout compared byte for byte
#   sim     pipec sim --json FILE                stdout compared byte for byte
#   run     pipec run FILE --iters N --json ...  from the summary: the workload, the
#                                                losses, the simulated time and each
#                                                rank's planned arena and peak, compared
#
# Both runs train on the same text (--data: BASE's README.md and docs/*.md; the default
# text is the docs of the binary's own tree, which a change may edit) with the same seed.
# Examples the model workloads cannot run use the synthetic one, which has no loss: for
# them the run compares what the generated tables say (simulated time, arena plan), and
# --time-scale keeps it short.
#
# Environment: ITERS (default 2) training iterations, TIME_SCALE (default 0.001) for
# synthetic runs, JOBS (default 2) make jobs, KEEP=1 keeps the temporary folder.
# Exit status: 0 when every example agrees, 1 when one differs, 2 on a usage or build error.
set -u -o pipefail
ITERS=${ITERS:-2}
TIME_SCALE=${TIME_SCALE:-0.001}
JOBS=${JOBS:-2}

root=$(git rev-parse --show-toplevel 2>/dev/null) || { echo "same_outputs: not in a git tree" >&2; exit 2; }
cd "$root" || exit 2
head_rev=${2:-.}
if [ $# -ge 1 ]; then
    base_rev=$1
else
    base_rev=$(git merge-base main "$( [ "$head_rev" = . ] && echo HEAD || echo "$head_rev")") ||
        { echo "same_outputs: no merge-base with main; name BASE" >&2; exit 2; }
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/same_outputs.XXXXXX") || exit 2
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$tmp"' EXIT

# copy REV DIR: a clean copy of revision REV (`.`: the working tree) in DIR.
copy() {
    mkdir -p "$2"
    if [ "$1" = . ]; then
        git ls-files -z --cached --others --exclude-standard |
            while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
            tar --null -T - -cf - | tar -xf - -C "$2"
    else
        git archive "$1" | tar -xf - -C "$2"
    fi
}

# build NAME REV: copies and builds REV under $tmp/NAME.
build() {
    echo "same_outputs: building $1 ($2)" >&2
    copy "$2" "$tmp/$1" || { echo "same_outputs: cannot copy revision $2" >&2; exit 2; }
    if ! make -C "$tmp/$1" -j"$JOBS" bin/pipec build/libpiperun.a >"$tmp/$1.log" 2>&1; then
        tail -20 "$tmp/$1.log" >&2
        echo "same_outputs: cannot build revision $2 (log above)" >&2
        exit 2
    fi
}

build base "$base_rev"
build head "$head_rev"
cat "$tmp/base/README.md" "$tmp/base"/docs/*.md >"$tmp/text.txt"

# out SIDE FILE KIND: what SIDE's pipec says about FILE for KIND (print, sim, run).
out() {
    local pipec="$tmp/$1/bin/pipec" f="$tmp/head/$2"
    case $3 in
    print) "$pipec" print "$f" ;;
    sim) "$pipec" sim --json "$f" ;;
    run) "$pipec" run "$f" --iters "$ITERS" --json --data "$tmp/text.txt" \
             --time-scale "$TIME_SCALE" --cache "$tmp/cache-$1" 2>"$tmp/$1.err" |
             grep -oE '"(workload|losses|simulated_ms|arena_bytes|planned_peak_bytes)": ("[^"]*"|\[[^]]*\]|[-+.0-9eE]+|null)' ;;
    esac
}

nbad=0
printf '%-40s %-6s %-6s %s\n' example print sim "run (losses)"
for path in "$tmp"/head/examples/*.pipe; do
    ex=examples/${path##*/}
    line=$(printf '%-40s' "$ex")
    for kind in print sim run; do
        out base "$ex" $kind >"$tmp/a" 2>/dev/null; ra=$?
        out head "$ex" $kind >"$tmp/b" 2>/dev/null; rb=$?
        if [ $ra != $rb ] || ! cmp -s "$tmp/a" "$tmp/b"; then
            verdict=DIFF
            nbad=$((nbad + 1))
            { echo "== $ex: pipec $kind differs (exit $ra vs $rb)"; diff "$tmp/a" "$tmp/b" | head -10; } >>"$tmp/report"
        elif [ $ra != 0 ]; then
            verdict="fail"  # the same failure on both sides
        else
            verdict=same
        fi
        if [ $kind = run ] && [ "$verdict" = same ]; then
            losses=$(grep -o '"losses": [^]]*]' "$tmp/b" | sed 's/"losses": //')
            workload=$(grep -o '"workload": "[^"]*"' "$tmp/b" | sed 's/.*: //; s/"//g')
            case $losses in
            *[0-9]*) verdict="same $workload $losses" ;;
            *) verdict="same $workload (no loss)" ;;
            esac
        fi
        line="$line $(printf '%-6s' "$verdict")"
    done
    echo "$line"
done
[ -f "$tmp/report" ] && cat "$tmp/report"
echo "base $base_rev, head $head_rev: $nbad difference(s)"
[ $nbad = 0 ]
