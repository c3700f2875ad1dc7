#!/bin/bash
# longfn.sh - lists the functions longer than N lines (default 120) in C, CUDA and
# grammar files.
#
#   tools/longfn.sh FILE...            e.g. tools/longfn.sh compiler/*/*.c runtime/*.c
#   N=80 tools/longfn.sh FILE...
#
# One line per long function: FILE:LINE LENGTH SIGNATURE, LINE where its signature
# starts and LENGTH counted from there to its closing brace. A function is a top-level
# definition: a signature in column 0 (a name, `static`, `__global__`, ... then a
# parenthesis) and a body whose closing brace sits alone in column 0; the opening brace
# alone in column 0 (the house layout) or at the end of the signature's last line. A
# header's static inline functions count as well. Prints nothing when every function is
# short enough; a FILE that does not exist is skipped.
N=${N:-120}
for f in "$@"; do
    [ -f "$f" ] || continue
    awk -v N="$N" -v F="$f" '
/^[a-zA-Z_].*\(/ && !/;[ \t]*$/ && !/^(struct|enum|union|typedef)[ \t]/ && !/=/ { cand = /\{.*\}[ \t]*$/ ? "" : $0; cl = NR }
!start && cand != "" && /\)[ \t]*\{[ \t]*$/ { start = NR; name = cand; sl = cl }
/^\{/ { start = NR; name = cand; sl = cl }
/^\}/ { if (start) { len = NR - sl + 1; if (len > N) printf "%s:%d %d %s\n", F, sl, len, name; start = 0; cand = "" } }
' "$f"
done
