#!/bin/bash
# longfn.sh - lists the functions longer than N lines (default 120) in C files.
#
#   tools/longfn.sh FILE...            e.g. tools/longfn.sh compiler/*/*.c runtime/*.c
#   N=80 tools/longfn.sh FILE...
#
# One line per long function: FILE:LINE LENGTH SIGNATURE, LINE where its signature
# starts and LENGTH counted from there to its closing brace. A function is a top-level
# definition in the house layout: the signature starts in column 0 and the body's braces
# sit alone in column 0. Prints nothing when every function is short enough.
N=${N:-120}
for f in "$@"; do
    awk -v N="$N" -v F="$f" '
/^[a-zA-Z].*\(/ && !/;[ \t]*$/ { cand = $0; cl = NR }
/^\{/ { start = NR; name = cand; sl = cl }
/^\}/ { if (start) { len = NR - sl + 1; if (len > N) printf "%s:%d %d %s\n", F, sl, len, name; start = 0 } }
' "$f"
done
