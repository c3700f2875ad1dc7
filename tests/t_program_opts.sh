#!/usr/bin/env bash
# t_program_opts.sh - a generated program's bad option values: the message names the
# option and what it takes, the usage follows on stderr, the exit status is 2.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
if ! "$PIPEC" compile examples/tiny_1f1b.pipe -o "$T/g" >"$T/out" 2>"$T/err"; then
    bad "compile tiny_1f1b" "$(tail -n 3 "$T/err")"
    finish
    exit
fi
prog=$(cat "$T/out")
# bad OPTION VALUE WHAT: the program must exit 2 naming --OPTION, VALUE and WHAT
while read -r opt val what; do
    "$prog" "--$opt" "$val" >"$T/o" 2>"$T/e"
    rc=$?
    if [ $rc != 2 ]; then
        bad "--$opt $val" "exit $rc, expected 2"
    elif ! grep -qF "bad value '$val' for --$opt ($what" "$T/e"; then
        bad "--$opt $val" "message: $(head -n 1 "$T/e")"
    elif ! grep -q "^usage: " "$T/e"; then
        bad "--$opt $val" "no usage after the message"
    else
        ok
    fi
done <<'LIST'
iters 0 an integer from 1 to 1000000
iters 2.5 an integer from 1 to 1000000
workload cnn mlp or synthetic
time-scale -1 a number from 0 to 1e6
timeout 0 seconds, more than 0
lr abc a number from 0 to 1000
seed -3 an integer from 0 to 2^53
LIST
# through `pipec run`, as documented: the same rule and message (runtime/pr_options.h),
# checked before anything is built: exit 2, the usage, no cache path, no cache folder
while read -r opt val what; do
    "$PIPEC" run examples/tiny_1f1b.pipe "--$opt" "$val" --cache "$T/cache" >"$T/o" 2>"$T/e"
    rc=$?
    if [ $rc != 2 ]; then bad "pipec run --$opt $val" "exit $rc, expected 2"
    elif [ "$(head -n 1 "$T/e")" != "pipec run: bad value '$val' for --$opt ($what)" ]; then
        bad "pipec run --$opt $val" "message: $(head -n 1 "$T/e")"
    elif ! grep -q "^usage: pipec run" "$T/e"; then bad "pipec run --$opt $val" "no usage"
    elif grep -q "$T/cache\|building" "$T/e" || [ -e "$T/cache" ]; then
        bad "pipec run --$opt $val" "built or named the cache"
    else ok; fi
done <<'LIST'
iters 0 an integer from 1 to 1000000
iters 2.5 an integer from 1 to 1000000
time-scale -1 a number from 0 to 1e6
timeout 0 seconds, more than 0 and at most 1e6
lr abc a number from 0 to 1000
seed -3 an integer from 0 to 2^53
LIST
# good values pass through to the program unchanged
"$PIPEC" run examples/tiny_1f1b.pipe --iters 2 --seed 7 --timeout 30 --json --cache "$T/cache" \
    >"$T/o" 2>"$T/e"
check "pipec run with good values runs" test $? = 0
check "... the program got --iters 2" python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(len(j['iter_ms']) != 2)" "$T/o"
finish
