#!/usr/bin/env bash
# t_imports.sh - where imports are found (docs/language.md "Imports"): the importing
# file's folder, -I, each folder of $PIPEC_PATH (colon-separated, empty entries
# skipped), the stdlib ($PIPEC_STDLIB unless empty, else <dir of pipec>/../stdlib, else
# <dir of pipec>/../share/pipec/stdlib); absolute paths as written; what a missing
# import says it searched; files that cannot be sources (a folder, one over the size
# limit) rejected with a located error and exit 1.
cd "$(dirname "$0")/.."
. tests/lib.sh
P=$(realpath "$PIPEC_ASAN")
stdlib=$(realpath "${PIPEC_STDLIB:-stdlib}")
export PIPEC_STDLIB=$stdlib
# `run` builds: the runtime of this tree (the sanitizer build has none beside it).
export PIPERUN_INC=${PIPERUN_INC:-$PWD/runtime} PIPERUN_LIB=${PIPERUN_LIB:-$PWD/build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
mkdir -p a b c
printf 'template mine { stage 0 { F(0) B(0) } }\n' >b/lib.pipe
printf 'import "lib.pipe"\npipeline p { stages 1 microbatches 1 schedule mine }\n' >m.pipe

# --- $PIPEC_PATH -------------------------------------------------------------------------
PIPEC_PATH="$tmp/a::$tmp/b" "$P" check m.pipe >out 2>err
check "PIPEC_PATH: found in its second folder after an empty entry" test $? = 0
check "... and checked" grep -q "m.pipe: ok" out
PIPEC_PATH="$tmp/a:" "$P" check m.pipe >out 2>err
check "PIPEC_PATH without the folder: exit 1" test $? = 1
check "... located error[name]" grep -q '^m.pipe:1:8: error\[name\]: cannot find import "lib.pipe"' err
check "... the note lists every folder searched, in order" \
    grep -qF "note: searched: ., $tmp/a, $stdlib" err
PIPEC_PATH="$tmp/a:$tmp/c" "$P" check m.pipe >out 2>err
check "PIPEC_PATH whose last folder lacks it too: exit 1" test $? = 1
check "... the note lists both folders, then the stdlib" \
    grep -qF "note: searched: ., $tmp/a, $tmp/c, $stdlib" err
"$P" check -I "$tmp/c" -I "$tmp/b" m.pipe >out 2>err
check "-I: found in the second -I folder" test $? = 0
PIPEC_PATH="$tmp/b" "$P" check -I "$tmp/c" m.pipe >out 2>err
check "-I and PIPEC_PATH together: found in PIPEC_PATH" test $? = 0

# --- absolute paths ------------------------------------------------------------------------
printf 'import "%s/b/lib.pipe"\npipeline p { stages 1 microbatches 1 schedule mine }\n' "$tmp" >abs.pipe
"$P" check abs.pipe >out 2>err
check "an absolute import is read as written" test $? = 0
printf 'import "%s/a/lib.pipe"\npipeline p { stages 1 microbatches 1 }\n' "$tmp" >absmiss.pipe
PIPEC_PATH="$tmp/b" "$P" check absmiss.pipe >out 2>err
check "a missing absolute import: exit 1" test $? = 1
check "... is not searched for elsewhere" grep -qF "note: searched: only $tmp/a/lib.pipe (the path is absolute)" err

# --- the stdlib beside the binary -----------------------------------------------------------
# A copy of pipec in DIR/bin finds DIR/stdlib, or the install tree's DIR/share/pipec/stdlib.
for layout in stdlib share/pipec/stdlib; do
    rm -rf inst && mkdir -p "inst/bin" "inst/$layout"
    cp "$P" inst/bin/pipec && cp "$stdlib"/*.pipe "inst/$layout/"
    env -u PIPEC_STDLIB inst/bin/pipec check "$OLDPWD/examples/demo.pipe" >out 2>err
    check "stdlib in <bin>/../$layout is found without PIPEC_STDLIB" test $? = 0
done
PIPEC_STDLIB= inst/bin/pipec check "$OLDPWD/examples/demo.pipe" >out 2>err
check "an empty PIPEC_STDLIB is as unset: the stdlib beside the binary" test $? = 0
: >inst/stdlib
env -u PIPEC_STDLIB inst/bin/pipec check "$OLDPWD/examples/demo.pipe" >out 2>err
check "a file named stdlib beside bin/ is passed over for share/pipec/stdlib" test $? = 0
rm -f inst/stdlib
rm -rf inst/share && env -u PIPEC_STDLIB inst/bin/pipec check "$OLDPWD/examples/demo.pipe" >out 2>err
check "no stdlib beside the binary: exit 1" test $? = 1
check "... naming the missing stdlib import" grep -q 'error\[name\]: cannot find import "std/' err

# --- files that are not sources --------------------------------------------------------------
"$P" check a >out 2>err
check "a folder as the file: exit 1" test $? = 1
check "... says it is not a regular file" grep -q "error\[name\]: cannot read 'a': not a regular file" err
truncate -s 300M big.pipe
"$P" check big.pipe >out 2>err
check "a file over the size limit: exit 1" test $? = 1
check "... error[limit] naming the limit" grep -q "error\[limit\]: 'big.pipe' is larger than 268435456 bytes" err
printf 'import "big.pipe"\npipeline p { stages 1 microbatches 1 }\n' >ib.pipe
"$P" check ib.pipe >out 2>err
check "an import over the size limit: exit 1" test $? = 1
check "... located at the import" grep -q "^ib.pipe:1:8: error\[limit\]: 'big.pipe' is larger than" err
# --- -I and --include on every command that reads a file ------------------------------------
while read -r cmd rest; do
    # shellcheck disable=SC2086
    (cd "$tmp" && "$P" $cmd -I "$tmp/b" m.pipe $rest) >out 2>err
    rc=$?
    want=0
    if [ $rc = $want ]; then ok; else bad "$cmd -I DIR finds the import" "rc=$rc $(head -c 200 err)"; fi
    (cd "$tmp" && "$P" $cmd --include="$tmp/b" m.pipe $rest) >out 2>err
    rc=$?
    if [ $rc = $want ]; then ok; else bad "$cmd --include=DIR finds the import" "rc=$rc $(head -c 200 err)"; fi
done <<CMDS
check
print
sim --json
opt --pass recompute
diff m.pipe
export-csv
tune --budget 2
emit -o $tmp/e1
run --iters 1 --quiet --cache $tmp/cache
CMDS
(cd "$tmp" && "$P" check m.pipe) >out 2>err
check "... and without -I the import is not found" test $? = 1
finish
