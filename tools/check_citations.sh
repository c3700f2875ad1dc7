#!/usr/bin/env bash
# check_citations.sh - the spec lives in docs/, and the code cites it there.
#
# usage: tools/check_citations.sh [--cites-only | --design-only]
#
# 1. Every citation `docs/<page>.md "<heading>"` in compiler/, runtime/, tests/, tools/,
#    docs/ and README.md names a file that exists and a section of it: the quoted text
#    appears (case folded) in one of the file's Markdown headings (`## 5b. Model-state
#    offload: ...` is cited as "Model-state offload") or in a bold run-in label
#    (`**Devices**`, `- **Teardown and residency.**`).
# 2. No tracked file but docs/design-notes.md cites the design text the spec was
#    written from (the word spelled in capitals, as a file name or not): docs/spec.md
#    states the rules, and the code cites docs/.
#
# Prints one line per offender (FILE:LINE: what is wrong) and exits 1 when there is
# one, 0 otherwise; 2 on usage errors. Run from anywhere: it works in the repository
# root (git ls-files when it is a git work tree, else find).
set -u
cd "$(dirname "$0")/.." || exit 2
cites=1 design=1
case "${1:-}" in
    "") ;;
    --cites-only) design=0 ;;
    --design-only) cites=0 ;;
    *) echo "usage: tools/check_citations.sh [--cites-only | --design-only]" >&2; exit 2 ;;
esac
bad=0

# Headings and bold labels of a Markdown file, one per line.
sections() {
    sed -n -E 's/^#+[[:space:]]+//p' "$1"
    grep -oE '\*\*[^*]+\*\*' "$1" | sed -E 's/^\*\*//; s/\*\*$//'
}

if [ "$cites" = 1 ]; then
    # A citation: the file name, one space, a quoted text that starts with neither a
    # comma nor a quote (so C string lists such as "docs/a.md", "docs/b.md" are not
    # citations).
    # (each file's sections read once, case folded: secs[FILE])
    declare -A secs=()
    while IFS= read -r hit; do
        at=${hit%%:docs/*}          # FILE:LINE
        cite=${hit#"$at":}          # docs/<page>.md "<heading>"
        f=${cite%% *}
        h=${cite#* \"}
        h=${h%\"}
        if [ ! -f "$f" ]; then
            echo "$at: $cite: no file $f"
            bad=1
            continue
        fi
        if [ -z "${secs[$f]+set}" ]; then
            secs[$f]=$(sections "$f")
            secs[$f]=${secs[$f],,}
        fi
        hl=${h,,}
        case ${secs[$f]} in
        *"$hl"*) ;;
        *) echo "$at: $cite: no heading of $f contains \"$h\""
           bad=1 ;;
        esac
    done < <(grep -rnoE 'docs/[A-Za-z0-9_.-]+\.md "[^",][^"]*"' \
                 compiler runtime tests tools docs README.md 2>/dev/null)
fi

if [ "$design" = 1 ]; then
    word='DESIG''N'                 # split, so that this file does not cite it
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        files() { git ls-files; }
    else
        files() { find . -path ./build -prune -o -path ./bin -prune -o -type f -print | sed 's|^\./||'; }
    fi
    while IFS= read -r hit; do
        echo "$hit: cites $word.md; cite docs/spec.md (or the page that states the rule)"
        bad=1
    done < <(files | grep -vxF docs/design-notes.md | tr '\n' '\0' |
             xargs -0 grep -InwH -- "$word" 2>/dev/null | cut -d: -f1,2)
fi
exit "$bad"
