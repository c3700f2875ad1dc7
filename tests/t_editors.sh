#!/usr/bin/env bash
# t_editors.sh - the editor support generated from editors/pipe-syntax.txt
# (tools/mksyntax.sh): the VS Code TextMate grammar and the Vim syntax file tokenize
# every example, stdlib and golden file without an unknown token, both know exactly the
# lexer's keywords, and a stray character is reported as unknown (the check can fail).
cd "$(dirname "$0")/.."
. tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sh tools/mksyntax.sh . "$tmp/ed" || { bad "mksyntax" "generation failed"; finish; exit; }
files=$(ls examples/*.pipe stdlib/*.pipe tests/golden/print/*.pipe tests/golden/diag/*.pipe)
printf 'pipeline p { stages 1 @ }\n' >"$tmp/stray.pipe"

# --- TextMate (VS Code) -------------------------------------------------------------
cat >"$tmp/tm.py" <<'EOF'
import json, re, sys
g = json.load(open(sys.argv[1]))
pats = [(p["name"], re.compile(p["match"])) for p in g["patterns"]]
bad = []
for path in sys.argv[2:]:
    for ln, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
        line = line.rstrip("\n")
        pos = 0
        while pos < len(line):
            if line[pos].isspace():
                pos += 1
                continue
            for name, rx in pats:
                m = rx.match(line, pos)
                if m and m.end() > pos:
                    pos = m.end()
                    break
            else:
                bad.append("%s:%d:%d: %r" % (path, ln, pos + 1, line[pos]))
                break
print("\n".join(bad))
EOF
# shellcheck disable=SC2086
out=$(python3 "$tmp/tm.py" "$tmp/ed/vscode/syntaxes/pipe.tmLanguage.json" $files)
if [ -z "$out" ]; then ok; else bad "TextMate grammar: unknown tokens" "$(echo "$out" | head -5)"; fi
out=$(python3 "$tmp/tm.py" "$tmp/ed/vscode/syntaxes/pipe.tmLanguage.json" "$tmp/stray.pipe")
check "TextMate grammar: a stray '@' is unknown" test -n "$out"
check "VS Code package.json names the grammar" python3 -c "
import json; p = json.load(open('$tmp/ed/vscode/package.json'))
assert p['contributes']['grammars'][0]['scopeName'] == 'source.pipe'
assert p['contributes']['languages'][0]['extensions'] == ['.pipe']"

# Both files know exactly the lexer's keywords.
lex=$(sed -n '/keywords\[\] = {/,/^};/p' grammar/pipe.l | grep -o '{"[a-z_]*",' | sed 's/{"\(.*\)",/\1/' | sort)
vimkw=$(sed -n 's/^syn keyword pipe_keyword //p' "$tmp/ed/vim/syntax/pipe.vim" | tr ' ' '\n' | sort)
tmkw=$(python3 -c "
import json, re; g = json.load(open('$tmp/ed/vscode/syntaxes/pipe.tmLanguage.json'))
m = [p['match'] for p in g['patterns'] if p['name'] == 'keyword.control.pipe'][0]
print('\n'.join(re.search(r'\((.*)\)', m).group(1).split('|')))" | sort)
check "keywords: Vim = lexer" test "$vimkw" = "$lex"
check "keywords: TextMate = lexer" test "$tmkw" = "$lex"

# Both know exactly the op table's kinds (tools/mksyntax.sh reads OP_KINDS), and the
# lexer takes each of them for an op: `pipec print` finds no syntax error (a schedule
# of one op breaks other rules, which print reports as such).
table=$(sed -n '/^#define OP_KINDS(X)/,/^$/s/^ *X([A-Z_]*, "\([A-Z]*\)").*/\1/p' compiler/ir/ir.h | sort)
vimop=$(sed -n "s/^syn match pipe_op '\\\\v<(\([A-Z|]*\)).*/\1/p" "$tmp/ed/vim/syntax/pipe.vim" | tr '|' '\n' | sort)
tmop=$(python3 -c "
import json, re; g = json.load(open('$tmp/ed/vscode/syntaxes/pipe.tmLanguage.json'))
m = [p['match'] for p in g['patterns'] if p['name'] == 'entity.name.function.op.pipe'][0]
print('\n'.join(re.search(r'\((.*?)\)', m).group(1).split('|')))" | sort)
check "op kinds: the table has some" test "$(echo "$table" | wc -l)" -ge 9
check "op kinds: Vim = op table" test "$vimop" = "$table"
check "op kinds: TextMate = op table" test "$tmop" = "$table"
notop=""
for k in $vimop XY; do  # XY: the check can fail
    printf 'pipeline p { stages 1 microbatches 4 stage 0 { %s3 } }\n' "$k" >"$tmp/op.pipe"
    "$PIPEC" print "$tmp/op.pipe" 2>&1 | grep -q 'error\[syntax\]' && notop="$notop $k"
done
check "op kinds: the lexer takes each editor op for an op (and not XY)" test "$notop" = " XY"

# --- Vim ------------------------------------------------------------------------------
if command -v vim >/dev/null 2>&1; then
    cat >"$tmp/check.vim" <<'EOF'
let s:bad = []
if &filetype !=# 'pipe'
  call add(s:bad, expand('%') . ': filetype ' . &filetype)
endif
for s:l in range(1, line('$'))
  let s:s = getline(s:l)
  for s:c in range(1, len(s:s))
    if s:s[s:c - 1] !~# '\s' && synID(s:l, s:c, 1) == 0
      call add(s:bad, expand('%') . ':' . s:l . ':' . s:c)
      break
    endif
  endfor
endfor
call writefile(s:bad, $VIMOUT, 'a')
qa!
EOF
    : >"$tmp/vim.out"
    for f in $files "$tmp/stray.pipe"; do
        VIMOUT="$tmp/vim.out" timeout 60 vim -Nu NONE -i NONE -es \
            --cmd "set rtp^=$tmp/ed/vim" --cmd 'filetype on' --cmd 'syntax on' \
            -c "source $tmp/check.vim" "$f" </dev/null >/dev/null 2>&1
    done
    out=$(grep -v stray.pipe "$tmp/vim.out")
    if [ -z "$out" ]; then ok; else bad "Vim syntax: unknown tokens" "$(echo "$out" | head -5)"; fi
    check "Vim syntax: a stray '@' is unknown" grep -q 'stray.pipe:1:' "$tmp/vim.out"
else
    skip "Vim syntax" "vim is not installed"
fi
finish
