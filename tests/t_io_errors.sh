#!/usr/bin/env bash
# t_io_errors.sh - write errors are loud, output folders are all old or all new.
#
# Every reporting command run with stdout on /dev/full must exit 1 with
# "pipec: error writing standard output: <reason>" on stderr (a lost report is never
# exit 0). `pipec emit -o DIR` over an existing folder replaces it whole, refuses a
# folder holding files pipec does not write, and a failure leaves DIR as it was
# (the injected failures themselves are in tests/fault/).
cd "$(dirname "$0")/.."
. tests/lib.sh
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
P=$(realpath "$PIPEC_ASAN")
E=examples/tiny_1f1b.pipe
D=examples/demo.pipe

# --- standard output on /dev/full --------------------------------------------------------
if [ -w /dev/full ]; then
    full() { # NAME ARGS...: must exit 1 naming the write error, no sanitizer report
        local name=$1
        shift
        "$P" "$@" >/dev/full 2>"$tmp/err"
        local rc=$?
        if [ $rc != 1 ]; then
            bad "$name > /dev/full" "exit $rc, expected 1"
        elif ! grep -q '^pipec: error writing standard output: No space left on device$' "$tmp/err"; then
            bad "$name > /dev/full" "message: $(head -c 300 "$tmp/err")"
        elif grep -qE 'Sanitizer|runtime error:' "$tmp/err"; then
            bad "$name > /dev/full" "sanitizer report"
        else
            ok
        fi
    }
    full "check" check "$E"
    full "check --mem" check --mem "$E"
    full "sim" sim "$E"
    full "sim --json" sim "$E" --json
    full "sim --gantt" sim "$E" --gantt
    full "diff" diff "$E" "$D"
    full "tune" tune "$E"
    full "export-csv" export-csv "$E"
    full "print" print "$E"
    full "opt" opt "$E" --pass recompute
    "$P" export-csv "$E" >"$tmp/e.csv" 2>/dev/null
    full "import-csv" import-csv "$tmp/e.csv"
    full "--help" --help
    full "--version" --version
    full "help sim" help sim
    # "-" as an output file is standard output: the same one message, once.
    full "print -o -" print "$E" -o -
    full "opt -o -" opt "$E" --pass recompute -o -
    full "export-csv -o -" export-csv "$E" -o -
    full "import-csv -o -" import-csv "$tmp/e.csv" -o -
    full "sim --svg -" sim "$E" --svg -
    full "sim --trace -" sim "$E" --trace -
    full "sim --html -" sim "$E" --html -
    full "tune -o -" tune "$E" -o -
    for o in svg html; do
        "$P" diff "$E" "$D" --$o - >/dev/full 2>"$tmp/err"
        check "diff --$o - > /dev/full: exit 2 (diff's error status)" test $? = 2
        check "diff --$o - > /dev/full: one message" test "$(cat "$tmp/err")" = "pipec: error writing standard output: No space left on device"
    done
    "$P" sim "$E" --svg - >/dev/full 2>"$tmp/err"
    check "sim --svg - > /dev/full: the message only once" test "$(grep -c '^pipec: ' "$tmp/err")" = 1
    # an error in the input keeps its own diagnostics and exit status 1
    printf 'pipeline p { stages 0 }\n' >"$tmp/bad.pipe"
    "$P" check "$tmp/bad.pipe" >/dev/full 2>"$tmp/err"
    check "check of a bad file > /dev/full exits 1" test $? = 1
    check "check of a bad file > /dev/full keeps its diagnostic" grep -q 'error\[value\]' "$tmp/err"
    # a usage error stays 2
    "$P" sim >/dev/full 2>/dev/null
    check "usage error > /dev/full exits 2" test $? = 2
else
    skip "/dev/full" "not writable here"
fi

# --- emit -o DIR: the folder is replaced whole --------------------------------------------
g="$tmp/gen"
"$P" emit "$D" -o "$g" >/dev/null 2>&1
check "emit into a new folder" test -f "$g/main.c"
nranks_demo=$(ls "$g"/rank_*.c | wc -l)
# a pipeline with fewer ranks: no rank file of the old one may stay behind
printf 'pipeline two { stages 2 microbatches 2 costs { f 1 b 2 } stage 0 { F0 F1 B0 B1 } stage 1 { F0 B0 F1 B1 } }\n' >"$tmp/two.pipe"
"$P" emit "$tmp/two.pipe" -o "$g/" >/dev/null 2>"$tmp/err"
check "emit over a folder pipec wrote exits 0" test $? = 0
check "the old pipeline had more ranks than 2" test "$nranks_demo" -gt 2
check "emit over a folder leaves exactly the new rank files" test "$(ls "$g"/rank_*.c | wc -l)" = 2
check "emit leaves no temporary folder beside DIR" test "$(ls "$tmp" | grep -c '^gen\.')" = 0
# a folder with a file pipec does not write is left alone
cp -r "$g" "$tmp/keep"
echo notes >"$g/notes.txt"
"$P" emit "$D" -o "$g" >/dev/null 2>"$tmp/err"
check "emit over a folder with foreign files exits 1" test $? = 1
check "... naming the foreign file" grep -q "gen/notes.txt is not a file pipec writes" "$tmp/err"
rm "$g/notes.txt"
check "... and leaves the folder as it was" diff -rq "$g" "$tmp/keep"
# a subfolder, or a link even with a generated file's name, is foreign too
mkdir "$g/sub"
"$P" emit "$D" -o "$g" >/dev/null 2>"$tmp/err"
check "emit over a folder with a subfolder exits 1, naming it" grep -q "gen/sub is not a file pipec writes" "$tmp/err"
rmdir "$g/sub"
ln -s "$tmp/keep/Makefile" "$g/link.c"
"$P" emit "$D" -o "$g" >/dev/null 2>"$tmp/err"
check "emit over a folder with a link exits 1, naming it" grep -q "gen/link.c is not a file pipec writes" "$tmp/err"
rm "$g/link.c"
check "... and leaves the folder as it was" diff -rq "$g" "$tmp/keep"
# what a build adds (objects, the program: an executable) is pipec's and replaced
: >"$g/rank_0.o"
printf '#!/bin/sh\n' >"$g/prog" && chmod +x "$g/prog"
"$P" emit "$tmp/two.pipe" -o "$g" >/dev/null 2>"$tmp/err"
check "emit over a built folder exits 0" test $? = 0
check "... leaving no object or program of the old build" test ! -e "$g/rank_0.o" -a ! -e "$g/prog"
mkdir "$tmp/dot" && (cd "$tmp/dot" && "$P" emit "$OLDPWD/$D" -o . >/dev/null 2>"$tmp/err")
check "emit -o . is refused" test $? = 1
check "... writing nothing" test -z "$(ls -A "$tmp/dot")"
mkdir -p "$tmp/dot/sub"
for o in "" .. sub/.. /; do
    (cd "$tmp/dot/sub" && "$P" emit "$OLDPWD/$D" -o "$o" >/dev/null 2>"$tmp/err")
    check "emit -o '$o': exit 1" test $? = 1
    check "emit -o '$o': says why" grep -qxF "pipec: -o $o: name the output folder itself (not '.' or '..')" "$tmp/err"
done
check "... writing nothing anywhere" test "$(find "$tmp/dot" | wc -l)" = 2
echo x >"$tmp/file"
"$P" emit "$D" -o "$tmp/file" >/dev/null 2>"$tmp/err"
check "emit -o FILE is refused" grep -q "exists and is not a folder" "$tmp/err"
check "... leaving the file" test "$(cat "$tmp/file")" = x
# a folder that cannot be written beside: the message names it, DIR is untouched
if [ "$(id -u)" != 0 ]; then
    mkdir "$tmp/ro" && "$P" emit "$D" -o "$tmp/ro/gen" >/dev/null 2>&1 && chmod a-w "$tmp/ro"
    cp -r "$tmp/ro/gen" "$tmp/ro_before"
    "$P" emit "$tmp/two.pipe" -o "$tmp/ro/gen" >/dev/null 2>"$tmp/err"
    check "emit beside a read-only parent exits 1" test $? = 1
    check "... naming the folder" grep -q "cannot create a folder beside $tmp/ro/gen" "$tmp/err"
    check "... and leaves DIR all old" diff -rq "$tmp/ro/gen" "$tmp/ro_before"
    chmod u+w "$tmp/ro"
fi
finish
