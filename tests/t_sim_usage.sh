#!/usr/bin/env bash
# t_sim_usage.sh - the usage of `pipec sim` and `pipec diff` (docs/spec.md "Command line"):
# -h prints it on stdout and exits 0; an unknown option prints it on stderr and exits 2.
cd "$(dirname "$0")/.."
. tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for cmd in sim diff; do
    "$PIPEC_ASAN" $cmd -h >"$tmp/out" 2>"$tmp/err"
    check "$cmd -h: exit 0" test $? = 0
    check "$cmd -h: usage on stdout" grep -q "^usage: pipec $cmd \[options\] " "$tmp/out"
    check "$cmd -h: nothing on stderr" test ! -s "$tmp/err"
    "$PIPEC_ASAN" $cmd --bogus examples/tiny_1f1b.pipe examples/tiny_1f1b.pipe >"$tmp/out" 2>"$tmp/err"
    check "$cmd --bogus: exit 2" test $? = 2
    check "$cmd --bogus: names the option" grep -qxF "pipec $cmd: unknown option '--bogus'" "$tmp/err"
    check "$cmd --bogus: usage on stderr" grep -q "^usage: pipec $cmd \[options\] " "$tmp/err"
    check "$cmd --bogus: nothing on stdout" test ! -s "$tmp/out"
done
finish
