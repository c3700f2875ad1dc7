#!/usr/bin/env bash
# t_docs.sh - the spec is in the tree and the code cites it there: docs/spec.md has every
# section code cites by name, the doc pages link it, tools/check_citations.sh finds what
# it must (and nothing else) on a small tree built here, and the repository passes it:
# every `docs/<page>.md "<heading>"` citation names a section that exists, and no file
# but docs/design-notes.md cites the design text the spec was written from.
cd "$(dirname "$0")/.."
. tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- docs/spec.md: the sections, each a level-2 heading of exactly this text ---------
for h in "Explicit form" "Cost lookup" "Units" "Virtual stages" "Completeness" \
         "Dependencies" "Memory" "Time" "Diagnostics" "Pipeline settings" \
         "Stdlib names" "Command line" "JSON output" "Runtime"; do
    check "docs/spec.md has the section \"$h\"" grep -qxF "## $h" docs/spec.md
done
# Every error code of compiler/base/diag.h is in the spec's table, and no other.
codes=$(sed -n 's/^ *X([A-Z]*, "\([a-z]*\)").*/\1/p' compiler/base/diag.h | sort)
spec_codes=$(sed -n '/^## Diagnostics$/,/^## /s/^| `\([a-z]*\)` |.*/\1/p' docs/spec.md | sort)
check "spec's code table is DIAG_CODES" test -n "$codes" -a "$codes" = "$spec_codes"
# Every command of `pipec --help` has a line in the spec's synopsis.
for c in $("$PIPEC" --help | awk '/^Commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { exit }'); do
    check "spec's command line has pipec $c" grep -qE "^pipec $c( |$)" docs/spec.md
done
# The fixed JSON names are in the spec and really printed.
"$PIPEC" sim --json tests/golden/sim/tiny_1f1b.pipe >"$tmp/sim.json"
for k in lower_bound_ms tokens_per_s mfu makespan_ms bubble_ratio peak_act_bytes; do
    if grep -q "\"$k\": " "$tmp/sim.json" && grep -q "\`$k\`" docs/spec.md; then ok
    else bad "sim --json key $k: printed and in the spec"; fi
done
# The spec's JSON example is a prefix of what sim --json prints for it.
want=$(sed -n '/^{"pipeline": "tiny_1f1b"/,/^```/p' docs/spec.md | sed '$d' | tr -d '\n' |
       sed -E 's/ +/ /g; s/, \.\.\.\]$//')
got=$(sed -E 's/ +/ /g' "$tmp/sim.json")
case "$got" in
    "$want"*) ok ;;
    *) bad "spec's sim --json example is what sim prints" "$want" ;;
esac

# The compare CSV header written in the spec is the one compare prints.
want=$(sed -n '/^\*\*`pipec compare --format csv`\*\*/,/^$/p' docs/spec.md | tr '\n' ' ' |
       sed -E 's/.*The header is `([^`]*)`.*/\1/; s/ //g')
got=$("$PIPEC" compare --format csv tests/golden/sim/tiny_1f1b.pipe | head -n 1)
check "spec's compare --format csv header is compare's" test -n "$want" -a "$want" = "$got"

# --- the doc pages link it ----------------------------------------------------------
for f in docs/semantics.md docs/language.md docs/architecture.md README.md; do
    check "$f links docs/spec.md" grep -qE 'docs/spec\.md|\(spec\.md\)' "$f"
done

# --- the checker, on a small tree of its own (not a git work tree: it uses find) ------
mkdir -p "$tmp/t/tools" "$tmp/t/docs" "$tmp/t/compiler" "$tmp/t/runtime" "$tmp/t/tests"
cp tools/check_citations.sh "$tmp/t/tools/"
D='DESIG''N'
printf '# Page\n\n## 5b. Model-state offload: OG\n\n- **Teardown and residency.** text\n' >"$tmp/t/docs/a.md"
printf 'readings of %s.md\n' "$D" >"$tmp/t/docs/design-notes.md"
A=docs/a.md    # the citations below are written through $A, so this file cites nothing
printf '/* %s "Model-state offload", %s "model-STATE", %s "Teardown" */\n' "$A" "$A" "$A" >"$tmp/t/compiler/ok.c"
printf 'const char *n[] = {"docs/a.md", "docs/b.md"};\n' >"$tmp/t/compiler/list.c"
(cd "$tmp/t" && tools/check_citations.sh) >"$tmp/out" 2>&1
check "checker: a clean tree passes" test $? = 0 -a ! -s "$tmp/out"
printf '/* %s "No such part" */\n' "$A" >"$tmp/t/runtime/bad1.c"
N=docs/nope.md
printf '# %s "Anything"\n' "$N" >"$tmp/t/tests/bad2.sh"
printf '/* as %s.md "Time" says */\n' "$D" >"$tmp/t/compiler/bad3.c"
printf 'the %s default\n' "$D" >"$tmp/t/docs/bad4.md"
(cd "$tmp/t" && tools/check_citations.sh) >"$tmp/out" 2>&1
check "checker: exit 1 on offenders" test $? = 1
check "checker: an unknown heading" grep -qF "runtime/bad1.c:1: $A \"No such part\": no heading" "$tmp/out"
check "checker: a missing page" grep -qF "tests/bad2.sh:1: $N \"Anything\": no file" "$tmp/out"
check "checker: a citation of the design text in code" grep -q '^compiler/bad3.c:1: cites' "$tmp/out"
check "checker: ... and in docs/" grep -q '^docs/bad4.md:1: cites' "$tmp/out"
check "checker: four offenders, nothing else" test "$(wc -l <"$tmp/out")" = 4
(cd "$tmp/t" && tools/check_citations.sh --cites-only) >"$tmp/out" 2>&1
check "checker: --cites-only" test "$(cut -d: -f1 "$tmp/out" | sort | tr '\n' ' ')" = "runtime/bad1.c tests/bad2.sh "
(cd "$tmp/t" && tools/check_citations.sh --no-such) >/dev/null 2>&1
check "checker: usage error is 2" test $? = 2

# --- the repository ------------------------------------------------------------------
tools/check_citations.sh --cites-only >"$tmp/out" 2>&1 || bad "every docs citation names a section" "$(cat "$tmp/out")"
[ -s "$tmp/out" ] || ok
tools/check_citations.sh --design-only >"$tmp/out" 2>&1
if grep -qE '^(docs/|README\.md)' "$tmp/out"; then bad "docs/ and README cite docs/spec.md" "$(grep -E '^(docs/|README\.md)' "$tmp/out")"
else ok; fi
if [ -s "$tmp/out" ]; then bad "the code cites docs/, not the design text" "$(wc -l <"$tmp/out") citations left: $(cut -d: -f1 "$tmp/out" | sort -u | head -n 5 | tr '\n' ' ')..."
else ok; fi
finish
