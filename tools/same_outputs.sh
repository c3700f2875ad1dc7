#!/usr/bin/env bash
# same_outputs.sh - shows that a change to pipec changed no result, the one tool for it
# (tools/same-results.sh is its second name for the binary form):
#
#   tools/same_outputs.sh [BASE [HEAD]]                          two git revisions
#   tools/same_outputs.sh --chain REV0 REV1 ... REVn             each adjacent pair
#   tools/same_outputs.sh --bins OLD_PIPEC NEW_PIPEC [EXAMPLE.pipe...]   two builds
#
# For every example (examples/*.pipe of HEAD, or the ones named):
#   - `pipec print` and `pipec sim --json` of the two builds are byte-identical
#     (output, diagnostics and exit status), and
#   - where the runtime trains the example's model for real (`pipec check --mem` then
#     reports the workload's real region sizes), `pipec run --iters N --json` of the two
#     builds gives the same losses (N = $ITERS, default 3, on a fixed text; each build
#     has a fresh cache, so each program is built with its own pipec), to the digits the
#     build that prints fewer writes.
# Revisions: BASE and HEAD are git revisions; HEAD `.` (the default) is the working tree
# as it is, uncommitted changes included; BASE defaults to the merge-base of HEAD and
# `main`. Each is built from a clean copy in a temporary folder (make bin/pipec and the
# CPU runtime; JOBS make jobs, default 2; KEEP=1 keeps the folder).
# Builds: each uses its own tree's stdlib and runtime; a pipec that is not in a built
# tree (a copy such as /tmp/pipec-old) uses this checkout's (PIPEC_STDLIB, when set, wins).
# Chain: builds each revision once and compares REV0 with REV1, REV1 with REV2, ... as
# the two-revision form does (the examples of the later of each pair), one
# "REVa..REVb: N same, N different" line per pair after its difference lines. With
# SAME_OUTPUTS_CACHE=DIR each committed revision's build is kept in DIR/COMMIT (complete
# when DIR/COMMIT/.same_outputs_built exists) and a rerun reuses it.
#
#   make bin/pipec && cp bin/pipec /tmp/pipec-old   # before the change
#   ... change, make bin/pipec ...
#   tools/same_outputs.sh --bins /tmp/pipec-old bin/pipec
#
# Prints one line per difference and "N same, N different". Exit status: 0 when every
# example agrees (every pair of a chain), 1 when one differs, 2 on a usage or build error.
set -u -o pipefail
usage() { sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/same_outputs.XXXXXX") || exit 2
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$tmp"' EXIT

# --- two builds ---------------------------------------------------------------------
differ() { echo "different: $*"; diff=$((diff + 1)); }

# pc PIPEC ARGS...: runs PIPEC (for at most 600 s), with this checkout's stdlib and
# runtime when it is not in a built tree of its own.
pc() {
    local bin=$1 env=()
    shift
    [ -d "$(dirname "$bin")/../stdlib" ] || env+=(PIPEC_STDLIB="${PIPEC_STDLIB:-$root/stdlib}")
    [ -f "$(dirname "$bin")/../runtime/piperun.h" ] ||
        env+=(PIPERUN_INC="$root/runtime" PIPERUN_LIB="$root/build")
    env "${env[@]}" timeout 600 "$bin" "$@"
}

losses() { # $1 pipec, $2 file, $3 cache name: the "losses" array of a short run
    pc "$1" run "$2" --iters "${ITERS:-3}" --json --quiet --data "$tmp/text" \
        --cache "$tmp/$3" 2>&1 |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["losses"])' 2>&1
}

# compare OLD_PIPEC NEW_PIPEC EXAMPLE...: the comparison above; returns 1 on a difference.
compare() {
    local old new f cmd a b
    old=$(realpath "$1") new=$(realpath "$2")
    shift 2
    same=0 diff=0
    rm -rf "$tmp/cache-old" "$tmp/cache-new"
    # a fixed text to train on (the default, the docs, may differ between the two trees)
    python3 -c "print('the pipeline runs forward and backward over every micro-batch. ' * 400)" >"$tmp/text"
    for f in "$@"; do
        for cmd in print "sim --json"; do
            # shellcheck disable=SC2086
            a=$(pc "$old" $cmd "$f" 2>&1; echo "exit $?")
            # shellcheck disable=SC2086
            b=$(pc "$new" $cmd "$f" 2>&1; echo "exit $?")
            if [ "$a" = "$b" ]; then same=$((same + 1)); else differ "pipec $cmd $f"; fi
        done
        if pc "$new" check --mem "$f" 2>/dev/null | grep -q "workload's real region sizes"; then
            a=$(losses "$old" "$f" cache-old)
            b=$(losses "$new" "$f" cache-new)
            if [ "${a#[}" != "$a" ] && python3 - "$a" "$b" <<'PY'
import sys
# Equal, or equal to the printed digits of the build that prints fewer (an older `run
# --json` wrote losses to 5 decimals, a newer one writes them exactly).
a, b = (s.strip("[]").split(",") for s in sys.argv[1:3])
def dec(x):
    x = x.strip()
    return len(x.split(".")[1]) if "." in x and "e" not in x.lower() else 17
ok = len(a) == len(b) and all(
    round(float(x), min(dec(x), dec(y))) == round(float(y), min(dec(x), dec(y)))
    for x, y in zip(a, b))
sys.exit(0 if ok else 1)
PY
            then
                same=$((same + 1))
            else
                differ "pipec run $f: losses $a against $b"
            fi
        fi
    done
    echo "$same same, $diff different"
    [ "$diff" = 0 ]
}

if [ "${1:-}" = --bins ]; then
    [ $# -ge 3 ] || usage
    shift
    old=$1 new=$2
    shift 2
    [ $# -gt 0 ] || set -- "$root"/examples/*.pipe
    compare "$old" "$new" "$@"
    exit $?
fi
chain=0
if [ "${1:-}" = --chain ]; then
    chain=1
    shift
    [ $# -ge 2 ] || usage
fi
case ${1:-} in -*) usage ;; esac
[ "$chain" = 1 ] || [ $# -le 2 ] || usage

# --- two revisions ------------------------------------------------------------------
JOBS=${JOBS:-2}
root=$(git rev-parse --show-toplevel 2>/dev/null) || { echo "same_outputs: not in a git tree" >&2; exit 2; }
cd "$root" || exit 2
head_rev=${2:-.}
if [ "$chain" = 1 ]; then
    :
elif [ $# -ge 1 ]; then
    base_rev=$1
else
    base_rev=$(git merge-base main "$( [ "$head_rev" = . ] && echo HEAD || echo "$head_rev")") ||
        { echo "same_outputs: no merge-base with main; name BASE" >&2; exit 2; }
fi

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

# build_in DIR REV: copies and builds REV in DIR.
build_in() {
    echo "same_outputs: building $2 in $1" >&2
    copy "$2" "$1" || { echo "same_outputs: cannot copy revision $2" >&2; exit 2; }
    if ! make -C "$1" -j"$JOBS" bin/pipec build/libpiperun.a >"$1.log" 2>&1; then
        tail -20 "$1.log" >&2
        echo "same_outputs: cannot build revision $2 (log above)" >&2
        exit 2
    fi
}

# build NAME REV: copies and builds REV under $tmp/NAME.
build() { build_in "$tmp/$1" "$2"; }

# built REV: the folder of REV's build, built on first use; committed revisions are
# kept under $SAME_OUTPUTS_CACHE when it is set (the working tree `.` never is).
built() {
    local sha dir
    if [ "$1" = . ]; then
        dir=$tmp/worktree
    else
        sha=$(git rev-parse --verify -q "$1^{commit}") ||
            { echo "same_outputs: no revision $1" >&2; exit 2; }
        dir=${SAME_OUTPUTS_CACHE:-$tmp/revs}/$sha
    fi
    if [ ! -e "$dir/.same_outputs_built" ]; then
        rm -rf "$dir"
        mkdir -p "$(dirname "$dir")" || exit 2
        build_in "$dir" "$1"
        : >"$dir/.same_outputs_built"
    fi
    echo "$dir"
}

# name REV: REV as a chain's summary line names it (`.`: the working tree).
name() { if [ "$1" = . ]; then echo "(working tree)"; else echo "$1"; fi; }

if [ "$chain" = 1 ]; then
    rc=0 prev='' prev_dir=''
    for rev in "$@"; do
        dir=$(built "$rev") || exit 2
        if [ -n "$prev" ]; then
            out=$(compare "$prev_dir/bin/pipec" "$dir/bin/pipec" "$dir"/examples/*.pipe) || rc=1
            # the difference lines, with the examples named as in the tree
            printf '%s\n' "$out" | sed -e '$d' -e "s|$dir/||g"
            echo "$(name "$prev")..$(name "$rev"): $(printf '%s\n' "$out" | tail -n 1)"
        fi
        prev=$rev prev_dir=$dir
    done
    exit $rc
fi

build base "$base_rev"
build head "$head_rev"
compare "$tmp/base/bin/pipec" "$tmp/head/bin/pipec" "$tmp"/head/examples/*.pipe
rc=$?
echo "base $base_rev, head $head_rev"
exit $rc
