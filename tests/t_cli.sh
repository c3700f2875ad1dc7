#!/usr/bin/env bash
# t_cli.sh - the command line: help, version, usage errors (exit 2), input errors
# (exit 1), atomic -o, `check` over several files, and `opt --pass` parsing.
cd "$(dirname "$0")/.."
. tests/lib.sh
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}  # the sanitizer build lives in build/asan/
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
P=$PIPEC_ASAN
good=tests/golden/print/minimal.pipe
commands="check print sim opt diff emit compile run import-csv export-csv tune compare"

# --- help and version --------------------------------------------------------------------
"$P" --help >"$tmp/out" 2>"$tmp/err"
check "--help exits 0" test $? = 0
check "--help writes to stdout only" test ! -s "$tmp/err"
for c in $commands; do
    check "--help lists $c" grep -qE "^  $c +" "$tmp/out"
    "$P" help "$c" >"$tmp/h" 2>&1
    check "help $c exits 0" test $? = 0
    check "help $c shows its usage" grep -q "^usage: pipec $c " "$tmp/h"
    "$P" "$c" --help >"$tmp/h2" 2>&1
    check "$c --help exits 0" test $? = 0
    check "$c --help equals help $c" cmp -s "$tmp/h" "$tmp/h2"
    "$P" "$c" -h >"$tmp/h3" 2>&1
    check "$c -h equals help $c" cmp -s "$tmp/h" "$tmp/h3"
done
"$P" help >"$tmp/h" 2>&1
check "help alone exits 0" test $? = 0
check "help alone is --help" cmp -s "$tmp/h" "$tmp/out"
"$P" help build >"$tmp/h" 2>&1
check "help build is compile's usage" grep -q "^usage: pipec compile " "$tmp/h"

version=$(sed -n 's/^#define PIPEC_VERSION "\(.*\)"/\1/p' compiler/base/util.h)
check "--version reads PIPEC_VERSION" test "$("$P" --version)" = "pipec $version"
check "-V is --version" test "$("$P" -V)" = "pipec $version"

# --- usage errors: exit 2, usage on stderr, nothing on stdout ----------------------------------
usage_error() { # NAME ARGS...
    local name=$1
    shift
    "$P" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ $rc != 2 ]; then
        bad "$name" "exit $rc, expected 2"
    elif [ -s "$tmp/out" ]; then
        bad "$name" "wrote to stdout"
    elif ! grep -q "usage: pipec" "$tmp/err"; then
        bad "$name" "no usage on stderr"
    else
        ok
    fi
}
usage_error "no arguments"
usage_error "unknown command" frobnicate x.pipe
usage_error "unknown global option" --frobnicate
usage_error "help of an unknown command" help frobnicate
usage_error "unknown option of check" check --frobnicate "$good"
usage_error "unknown option of print" print -Z "$good"
usage_error "check without files" check
usage_error "print with a missing -o argument" print "$good" -o
usage_error "opt without --pass" opt "$good"
usage_error "opt without a file" opt --pass recompute
usage_error "help with two commands" help check sim
usage_error "emit without -o" emit "$good"
usage_error "emit with two files" emit -o "$tmp/e2" "$good" "$good"
usage_error "compile with an unknown backend" compile --backend tpu "$good" -o "$tmp/e3"
usage_error "-W with anything but error" check -Wall "$good"
# An abbreviation of a documented option is the option (getopt_long's rule), --help too:
# every command prints its usage on stdout for --he, exit 0, as for --help.
for c in $commands; do
    "$P" "$c" --he "$good" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    "$P" help "$c" >"$tmp/h" 2>&1
    if [ $rc = 0 ] && cmp -s "$tmp/h" "$tmp/out" && [ ! -s "$tmp/err" ]; then ok
    else bad "$c --he is $c --help" "exit $rc: $(head -n 1 "$tmp/err")"; fi
done
# --h is --help where the command has no other --h... option; sim's --html makes it
# ambiguous there (a usage error, exit 2, as getopt_long says).
"$P" check --h "$good" >"$tmp/out" 2>&1
check "check --h is check --help" grep -q "^usage: pipec check " "$tmp/out"
usage_error "sim --h is ambiguous (--help, --html)" sim --h "$good"
grep -q "option '--h' is ambiguous" "$tmp/err"
check "sim --h: says it is ambiguous" test $? = 0
# An unknown short option is a usage error of the command: exit 2, getopt's message and
# the command's usage on stderr, nothing on stdout.
for c in $commands; do
    "$P" "$c" -Z "$good" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc = 2 ] && [ ! -s "$tmp/out" ] && grep -q "invalid option -- 'Z'" "$tmp/err" &&
        grep -q "^usage: pipec $c " "$tmp/err"; then ok
    else bad "$c -Z: a usage error" "exit $rc: $(head -n 2 "$tmp/err")"; fi
done
"$P" -h >"$tmp/out" 2>&1
check "-h is --help" grep -q "^usage: pipec COMMAND" "$tmp/out"
# After "--" every argument is a file, even one spelled like an option.
"$P" check -- --help >"$tmp/out" 2>"$tmp/err"
check "check -- --help reads a file named --help: exit 1" test $? = 1
check "... and names it" grep -q "cannot read '--help'" "$tmp/err"
"$P" print -- "$good" >"$tmp/out" 2>"$tmp/err"
check "print -- FILE prints FILE" grep -q "^pipeline m {" "$tmp/out"
"$P" frobnicate 2>&1 | grep -q "unknown command 'frobnicate'"
check "unknown command is named" test $? = 0

# --- input errors: exit 1 with a message naming the file ------------------------------------
"$P" check "$tmp/nonexistent.pipe" >"$tmp/out" 2>"$tmp/err"
check "check of a missing file exits 1" test $? = 1
check "check of a missing file names it" grep -q "nonexistent.pipe" "$tmp/err"
"$P" print "$tmp/nonexistent.pipe" >"$tmp/out" 2>"$tmp/err"
check "print of a missing file exits 1" test $? = 1
check "print of a missing file names it" grep -q "nonexistent.pipe" "$tmp/err"

# --- check over several files -----------------------------------------------------------------
printf 'pipeline dup { stages 1 microbatches 1 stage 0 { F0 F0 B0 } }\n' >"$tmp/dup.pipe"
"$P" check "$good" >"$tmp/out" 2>"$tmp/err"
check "check of a legal file exits 0" test $? = 0
check "check of a legal file says ok" grep -q "minimal.pipe: ok" "$tmp/out"
"$P" check -q "$good" >"$tmp/out" 2>&1
check "check -q is quiet" test ! -s "$tmp/out"
"$P" check "$good" "$tmp/dup.pipe" "$good" >"$tmp/out" 2>"$tmp/err"
check "check with one bad file of three exits 1" test $? = 1
check "check reports the duplicate" grep -q "dup.pipe:1:[0-9]*: error\[duplicate\]" "$tmp/err"
check "check still checks the files after the bad one" test "$(grep -c 'minimal.pipe: ok' "$tmp/out")" = 2

# --- -o is atomic: on an error the old file stays, no temporary is left ------------------------
printf 'previous contents\n' >"$tmp/out.pipe"
"$P" print "$tmp/dup.pipe" -o "$tmp/out.pipe" >/dev/null 2>&1
check "print -o on an error exits 1" test $? = 1
check "print -o on an error keeps the old file" test "$(cat "$tmp/out.pipe")" = "previous contents"
"$P" print "$good" -o "$tmp/nodir/out.pipe" >/dev/null 2>"$tmp/err"
check "print -o into a missing folder exits 1" test $? = 1
check "print -o into a missing folder says why" grep -q "cannot write" "$tmp/err"
"$P" print "$good" -o "$tmp/out.pipe" >/dev/null 2>&1
check "print -o replaces the file" cmp -s "$tmp/out.pipe" tests/golden/print/minimal.expected
leftover=$(find "$tmp" -name '*.tmp*' | wc -l)
check "print -o leaves no temporary files" test "$leftover" = 0

# --- opt: the --pass list -----------------------------------------------------------------------
"$P" opt --list >"$tmp/out" 2>&1
check "opt --list exits 0" test $? = 0
check "opt --list names recompute" grep -q "recompute" "$tmp/out"
"$P" opt "$good" --pass 'frobnicate' >"$tmp/out" 2>"$tmp/err"
check "opt with an unknown pass exits 1" test $? = 1
check "opt with an unknown pass points into --pass" grep -q "^<--pass>:1:1: error\[name\]" "$tmp/err"
"$P" opt "$good" --pass 'recompute(stages=0..=1' >"$tmp/out" 2>"$tmp/err"
check "opt with an unclosed argument list exits 1" test $? = 1
check "opt syntax error has a column" grep -q "^<--pass>:1:23: error\[syntax\]" "$tmp/err"
"$P" opt "$good" --pass 'recompute(stages=0..=0, policy=full),,' >"$tmp/out" 2>"$tmp/err"
check "opt with an empty pass name exits 1" test $? = 1
check "opt empty pass name column" grep -q "^<--pass>:1:38: error\[syntax\]" "$tmp/err"
"$P" opt "$good" --pass 'recompute(stages=0, bogus=3furlongs)' >"$tmp/out" 2>"$tmp/err"
check "opt with an unknown unit exits 1" test $? = 1
check "opt unknown unit is a value error at the number, as in apply" grep -q "^<--pass>:1:27: error\[value\]" "$tmp/err"
"$P" opt "$good" --pass 'recompute(stages=0, nosuch=1)' >"$tmp/out" 2>"$tmp/err"
check "opt with an unknown argument exits 1" test $? = 1
check "opt unknown argument points at it" grep -q "^<--pass>:1:21: error\[name\]" "$tmp/err"
# Each malformed --pass list: exit 1 and the exact first line of its diagnostic.
E=examples/tiny_1f1b.pipe
while IFS='|' read -r list want; do
    "$P" opt $E --pass "$list" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc = 1 ] && [ "$(head -n 1 "$tmp/err")" = "$want" ] && [ ! -s "$tmp/out" ]; then ok
    else bad "opt --pass '$list'" "rc=$rc $(head -n 1 "$tmp/err")"; fi
done <<'CASES'
swap(=1)|<--pass>:1:6: error[syntax]: unexpected '=', expected name or ')'
swap(lambda 1)|<--pass>:1:13: error[syntax]: unexpected number '1', expected '='
recompute(stages=0..=x)|<--pass>:1:22: error[syntax]: unexpected identifier 'x', expected number
recompute(stages=1.5..=2)|<--pass>:1:18: error[value]: a range needs integer bounds
recompute(stages=[])|<--pass>:1:11: error[value]: argument 'stages' of pass 'recompute' must be a stage range such as 0..=2
recompute(stages=[1, x])|<--pass>:1:22: error[syntax]: unexpected identifier 'x', expected number or '-'
recompute(stages=[1, 2)|<--pass>:1:23: error[syntax]: unexpected ')', expected ']' or ','
swap(beta=1e999)|<--pass>:1:11: error[value]: number out of range
swap(lambda=1) extra|<--pass>:1:16: error[syntax]: unexpected identifier 'extra', expected the end of the pass list
swap(beta="x")|<--pass>:1:6: error[value]: argument 'beta' of pass 'swap' must be a number
CASES
# Tabs separate like spaces.
"$P" opt $E --pass $'recompute(\tstages=0,\tpolicy=full)' >"$tmp/tab" 2>"$tmp/err"
check "opt --pass with tabs: exit 0" test $? = 0
"$P" opt $E --pass 'recompute(stages=0, policy=full)' >"$tmp/sp" 2>/dev/null
check "opt --pass with tabs: as with spaces" cmp -s "$tmp/tab" "$tmp/sp"

finish
