#!/bin/bash
# tools/longfn.sh FILE... - lists the functions longer than N lines (default 120) in C
# files written in the house style (top-level braces in column 0): FILE:LINE LENGTH NAME.
N=${N:-120}
for f in "$@"; do
awk -v N=$N -v F="$f" '
/^[a-zA-Z].*\(/ && !/;[ \t]*$/ { cand=$0; cl=NR }
/^\{/ { start=NR; name=cand; sl=cl }
/^\}/ { if (start) { len=NR-sl+1; if (len>N) printf "%s:%d %d %s\n", F, sl, len, name; start=0 } }
' "$f"
done
