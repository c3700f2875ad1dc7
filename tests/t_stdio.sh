#!/usr/bin/env bash
# t_stdio.sh - `-` is standard input for every file argument and standard output for
# every output file (-o -, --svg -, --trace -); what else a command prints then goes to
# stderr, so that the piped output is exactly the file.
cd "$(dirname "$0")/.."
. tests/lib.sh
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
T=examples/tiny_1f1b.pipe

# import-csv - | check -
"$PIPEC" import-csv - <tests/csv/zb1p_2rank_2stagep_compute.csv >"$tmp/i.pipe"
check "import-csv -: a pipeline named stdin" grep -q '^pipeline stdin {' "$tmp/i.pipe"
out=$("$PIPEC" import-csv tests/csv/zb1p_2rank_2stagep_compute.csv | "$PIPEC" check -)
check "import-csv | check -" test "$out" = "<stdin>: ok: pipeline zb1p_2rank_2stagep_compute, 2 stages, 8 micro-batches, 2 chunks, 96 ops"
# print - and -o -: the same bytes as print FILE
"$PIPEC" print "$T" >"$tmp/p1"
"$PIPEC" print - <"$T" >"$tmp/p2"
"$PIPEC" print "$T" -o - >"$tmp/p3"
check "print - reads stdin" cmp -s "$tmp/p1" "$tmp/p2"
check "print -o - writes stdout" cmp -s "$tmp/p1" "$tmp/p3"
"$PIPEC" opt "$T" --pass 'recompute(stages=0..1)' -o - >"$tmp/o1"
check "opt -o -" grep -q '^    F0 F1 F2 F3 R0 B0' "$tmp/o1"
# a diagnostic about standard input names it <stdin>
printf 'pipeline p {\n  stages 2 microbatch 4\n}\n' | "$PIPEC" check - 2>"$tmp/e"
check "diagnostics name <stdin>" grep -q '^<stdin>:2:23: error\[syntax\]' "$tmp/e"
# sim --svg - / --trace -: stdout is the file, the summary goes to stderr
"$PIPEC" sim "$T" --svg - >"$tmp/s.svg" 2>"$tmp/s.err"
check "sim --svg -: an SVG on stdout" python3 -c "import xml.dom.minidom as m; m.parse('$tmp/s.svg')"
check "sim --svg -: summary on stderr" grep -q '^makespan' "$tmp/s.err"
"$PIPEC" sim "$T" --trace - >"$tmp/t.json" 2>/dev/null
check "sim --trace -: JSON on stdout" python3 -c "import json; json.load(open('$tmp/t.json'))"
# diff - B
"$PIPEC" diff - "$T" <"$T" >"$tmp/d"
check "diff - FILE: the same, exit 0" test $? = 0
# export-csv -o -, and from stdin
"$PIPEC" export-csv "$T" >"$tmp/c1"
"$PIPEC" export-csv - -o - <"$T" >"$tmp/c2"
check "export-csv - -o -" cmp -s "$tmp/c1" "$tmp/c2"
# tune -o -: the source on stdout (it checks), the table on stderr
"$PIPEC" tune "$T" -o - >"$tmp/best.pipe" 2>"$tmp/tune.err"
check "tune -o -: source on stdout" "$PIPEC" check -q "$tmp/best.pipe"
check "tune -o -: table on stderr" grep -q '^rank  makespan_ms' "$tmp/tune.err"
# Standard input that cannot be read (a folder): exit 1, naming it and the reason.
"$PIPEC" check - </ >"$tmp/out" 2>"$tmp/e"
check "check - from a folder: exit 1" test $? = 1
check "check - from a folder: says why" grep -qx 'pipec: error\[name\]: cannot read standard input: Is a directory' "$tmp/e"
"$PIPEC" import-csv - </ >"$tmp/out" 2>"$tmp/e"
check "import-csv - from a folder: exit 1" test $? = 1
check "import-csv - from a folder: says why" grep -qx 'pipec: cannot read standard input: Is a directory' "$tmp/e"
"$PIPEC" import-csv / >"$tmp/out" 2>"$tmp/e"
check "import-csv of a folder: says why" grep -qx 'pipec: cannot read /: Is a directory' "$tmp/e"
check "... writing nothing" test ! -s "$tmp/out"
finish
