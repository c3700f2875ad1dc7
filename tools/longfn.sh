#!/bin/bash
# list functions longer than N lines in given C files (top-level braces)
N=${N:-120}
for f in "$@"; do
awk -v N=$N -v F="$f" '
/^[a-zA-Z].*\(/ && !/;[ \t]*$/ { cand=$0; cl=NR }
/^\{/ { start=NR; name=cand; sl=cl }
/^\}/ { if (start) { len=NR-sl+1; if (len>N) printf "%s:%d %d %s\n", F, sl, len, name; start=0 } }
' "$f"
done
