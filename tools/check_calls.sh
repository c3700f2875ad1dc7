#!/bin/sh
# tools/check_calls.sh - the call layers of docs/architecture.md "Layers", checked on the
# built objects (the include check, tools/check_layers.sh, sees only the headers):
# no object of a layer uses a symbol (calls a function, reads a variable) that only an
# object of a higher layer defines. The layers are the Makefile's LAYERS, lowest first;
# layer L's objects are OBJDIR/L/*.o, and the generated parser and scanner
# (OBJDIR/../gen/*.o) are the front end's. Symbols are read with nm: the undefined ones
# of each object against the global ones each layer defines.
#
# Prints one line per use of a higher layer and exits 1 when there is one; prints
# "calls: ok (N objects in N layers)" and exits 0 otherwise; exits 2 when an object
# folder is missing or empty (build first: make all).
# usage: tools/check_calls.sh [OBJDIR [LAYER...]]
#   (default: build/obj/compiler and the LAYERS of ./Makefile)
set -eu
objdir=${1:-build/obj/compiler}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- $(sed -n 's/^LAYERS *= *//p' Makefile)
[ $# -gt 0 ] || { echo "calls: no layers (LAYERS of the Makefile)" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
rank=0
: >"$tmp/defs"; : >"$tmp/uses"
for layer in "$@"; do
    rank=$((rank + 1))
    objs=$(ls "$objdir/$layer"/*.o 2>/dev/null || true)
    [ "$layer" = frontend ] && objs="$objs $(ls "$objdir"/../gen/*.o 2>/dev/null || true)"
    [ -n "$(echo $objs)" ] || { echo "calls: no objects in $objdir/$layer (build first)" >&2; exit 2; }
    # rank layer object symbol: what each object defines (global) and what it uses
    # (undefined); nm -A starts each line with "object:"
    # shellcheck disable=SC2086
    nm -A -g --defined-only $objs | awk -v r=$rank -v l="$layer" \
        'NF >= 3 { o = $1; sub(/:[^:]*$/, "", o); print r, l, o, $NF }' >>"$tmp/defs"
    # shellcheck disable=SC2086
    nm -A -u $objs | awk -v r=$rank -v l="$layer" '{ o = $1; sub(/:[^:]*$/, "", o); print r, l, o, $NF }' >>"$tmp/uses"
done
awk 'NR == FNR { objs[$3] = 1; if (!($4 in lo) || $1 < lo[$4]) { lo[$4] = $1; ll[$4] = $2; lf[$4] = $3 }; next }
     ($4 in lo) && lo[$4] > $1 {
         printf "calls: %s (%s) uses %s, defined in %s (%s): a higher layer\n", $3, $2, $4, lf[$4], ll[$4]
         bad = 1
     }
     { objs[$3] = 1 }
     END {
         if (bad) exit 1
         n = 0; for (o in objs) n++
         printf "calls: ok (%d objects in %d layers)\n", n, '"$#"'
     }' "$tmp/defs" "$tmp/uses"
