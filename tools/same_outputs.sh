#!/bin/bash
# same_outputs.sh - shows that two revisions of pipec agree on every example: `pipec print`
# and `pipec sim --json` byte-identical, and the generated program of each example whose
# model the runtime trains gives the same losses (`pipec run FILE`).
#
#   tools/same_outputs.sh [BASE [HEAD]]
#
# BASE and HEAD are git revisions; HEAD `.` (the default) is the working tree as it is,
# uncommitted changes included. BASE defaults to the merge-base of HEAD and `main`.
# Each is built from a clean copy in a temporary folder (make bin/pipec and the CPU
# runtime); then tools/same-results.sh compares the two builds on every examples/*.pipe
# of HEAD (see there for what is compared).
#
# Environment: ITERS (training iterations, passed on), JOBS (default 2) make jobs,
# KEEP=1 keeps the temporary folder.
# Exit status: 0 when every example agrees, 1 when one differs, 2 on a usage or build error.
set -u -o pipefail
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
"$tmp/head/tools/same-results.sh" "$tmp/base/bin/pipec" "$tmp/head/bin/pipec" "$tmp"/head/examples/*.pipe
rc=$?
echo "base $base_rev, head $head_rev"
exit $rc
