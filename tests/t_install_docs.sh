#!/usr/bin/env bash
# t_install_docs.sh - `make install` into a staging folder: the binary, stdlib, runtime
# libraries that were built, the man page generated from the usage texts, the docs, the
# bash and zsh completion and the editor support; the installed pipec finds its stdlib
# without PIPEC_STDLIB, and the installed completion and man page describe it.
cd "$(dirname "$0")/.."
. tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset PIPEC_STDLIB
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s install DESTDIR="$tmp" PREFIX=/usr >"$tmp/log" 2>&1; then
    bad "make install" "$(tail -n 5 "$tmp/log")"; finish; exit
fi
ok
R=$tmp/usr
for f in bin/pipec share/pipec/stdlib/schedules.pipe lib/libpiperun.a include/piperun.h \
         share/man/man1/pipec.1 share/doc/pipec/README.md share/doc/pipec/docs/language.md \
         share/bash-completion/completions/pipec share/zsh/site-functions/_pipec \
         share/vim/vimfiles/syntax/pipe.vim share/vim/vimfiles/ftdetect/pipe.vim \
         share/pipec/vscode/package.json share/pipec/vscode/syntaxes/pipe.tmLanguage.json; do
    check "installed: $f" test -s "$R/$f"
done
for lib in build/libpiperun*.a; do
    check "installed: the built $(basename "$lib")" cmp -s "$lib" "$R/lib/$(basename "$lib")"
done
# The installed binary imports std/ from its own share/pipec/stdlib.
check "installed pipec finds its stdlib" "$R/bin/pipec" check -q examples/llama2_13b_1f1b.pipe

# The man page: renders without warnings, has every command and every option of its
# usage text (generated from them).
if command -v groff >/dev/null 2>&1; then
    check "man page: groff without warnings" test -z "$(groff -man -Tutf8 -ww -z "$R/share/man/man1/pipec.1" 2>&1)"
    MANWIDTH=200 groff -man -Tascii -P-cbou "$R/share/man/man1/pipec.1" 2>/dev/null >"$tmp/man.txt"
    for c in $("$R/bin/pipec" --help | awk '/^Commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { exit }'); do
        miss=""
        for o in $("$R/bin/pipec" help "$c" | grep -o -- '--[a-z][a-z0-9-]*' | sort -u); do
            grep -q -- "$o" "$tmp/man.txt" || miss="$miss $o"
        done
        if grep -q "^ *pipec $c\$" "$tmp/man.txt" && [ -z "$miss" ]; then ok
        else bad "man page: pipec $c" "missing:$miss"; fi
    done
else
    skip "man page" "groff is not installed"
fi

# bash completion, as installed, against the installed binary.
cat >"$tmp/comp.sh" <<'EOF'
source "$1"
t() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _pipec; echo "${COMPREPLY[*]}"; }
p=$2
[ "$(t "$p" si)" = "sim" ] || { echo "command: $(t "$p" si)"; exit 1; }
[ "$(t "$p" sim --js)" = "--json" ] || { echo "option: $(t "$p" sim --js)"; exit 1; }
[ "$(t "$p" opt x.pipe --pass dependency_r)" = "dependency_relaxation" ] || { echo "pass"; exit 1; }
[ "$(t "$p" run x.pipe --backend c)" = "cpu cuda" ] || { echo "backend"; exit 1; }
case " $(t "$p" diff --) " in *" --json "*) ;; *) echo "diff options"; exit 1 ;; esac
EOF
check "bash completion" bash "$tmp/comp.sh" "$R/share/bash-completion/completions/pipec" "$R/bin/pipec"
if command -v zsh >/dev/null 2>&1; then
    check "zsh completion parses" zsh -n "$R/share/zsh/site-functions/_pipec"
else
    check "zsh completion: a compdef file" grep -q '^#compdef pipec' "$R/share/zsh/site-functions/_pipec"
fi
check "vim syntax installed is the generated one" cmp -s build/editors/vim/syntax/pipe.vim "$R/share/vim/vimfiles/syntax/pipe.vim"
finish
