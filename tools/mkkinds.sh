#!/bin/sh
# tools/mkkinds.sh - writes the runtime's op-kind enum (PR_F ... PR_NKINDS) into
# runtime/piperun.h from the op table's runtime column, the X-macro PLAN_KINDS of
# plan/opkinds.h (whose rows the compiler asserts are OP_KINDS' first kinds, in order:
# compiler/ir/opsem.c), as tools/mksyntax.sh writes the editors' op spellings.
#
# piperun.h is the API header generated programs compile against with the runtime's
# include folder alone (installed: PREFIX/include), so the enum is written into it,
# between the lines "BEGIN mkkinds" and "END mkkinds", not included from plan/; the
# file is checked in, and tests/t_layers.sh checks that regenerating it changes nothing.
#
# usage: tools/mkkinds.sh [SRCDIR]      prints runtime/piperun.h with the enum regenerated
#        tools/mkkinds.sh -w [SRCDIR]   rewrites it (atomically) when it differs (make kinds)
# Exits 1 with a message when PLAN_KINDS or the markers are not found.
set -eu
write=0
if [ "${1:-}" = -w ]; then write=1; shift; fi
src=${1:-.}
h=$src/runtime/piperun.h
kinds=$(sed -n '/^#define PLAN_KINDS(X)/,/^$/s/^ *X(\([A-Z][A-Z0-9_]*\), .*/\1/p' "$src/plan/opkinds.h")
[ -n "$kinds" ] || { echo "mkkinds: no PLAN_KINDS rows in plan/opkinds.h" >&2; exit 1; }
grep -q '^/\* BEGIN mkkinds' "$h" && grep -q '^/\* END mkkinds' "$h" ||
    { echo "mkkinds: no BEGIN mkkinds / END mkkinds lines in runtime/piperun.h" >&2; exit 1; }
enum="enum { $(for k in $kinds; do printf 'PR_%s, ' "$k"; done)PR_NKINDS };"
gen() {
    awk -v enum="$enum" '
        /^\/\* BEGIN mkkinds/ { print; print enum; skip = 1; next }
        /^\/\* END mkkinds/ { skip = 0 }
        !skip { print }' "$h"
}
if [ "$write" = 0 ]; then
    gen
    exit 0
fi
tmp=$h.tmp.$$
trap 'rm -f "$tmp"' EXIT
gen >"$tmp"
if cmp -s "$tmp" "$h"; then exit 0; fi
mv "$tmp" "$h"
echo "mkkinds: wrote runtime/piperun.h"
