#!/usr/bin/env bash
# t_compiler_layers.sh - the include layers of docs/architecture.md "Layers"
# (tools/check_layers.sh and the Makefile's per-layer include paths): the tree passes,
# and the check fails on each thing it forbids, in a copy of the tree: an include of a higher layer (base util.c including
# the commands' cmds.h), an include circle (ir.h including opsem.h, which includes
# ir.h), a runtime file including a compiler header, a compiler file in no layer;
# and an upward include compiled with its layer's flags fails. The calls
# (tools/check_calls.sh, from the objects' symbols): the built tree's objects call no
# higher layer, and the check fails on a synthetic pair of objects where a base object
# calls a commands one (and the circle it closes), on a runtime object calling the
# compiler, on an object in no layer, and on a call planted in the built util.o; no call
# circle between objects (files), inside a layer or in the runtime: one planted in a
# synthetic layer, and the circles that were broken (ir.c <-> opsem.c, the runtime
# core's failure.c <-> dp.c) planted back in copies of the built objects, are found.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT

out=$(sh tools/check_layers.sh . 2>&1)
check "the tree keeps its layers ($out)" test "${out#layers: ok}" != "$out"

# A fresh copy of what the check reads, for each broken variant.
copy() {
    rm -rf "$T/t"; mkdir -p "$T/t/docs"
    cp -r compiler grammar plan runtime "$T/t/"
    (cd docs && cp architecture.md "$T/t/docs/")
}
# expect_fail NAME PATTERN: the check on the copy exits 1 and prints PATTERN.
expect_fail() {
    local rc=0
    sh tools/check_layers.sh "$T/t" >"$T/out" 2>&1 || rc=$?
    if [ "$rc" = 1 ] && grep -qF "$2" "$T/out"; then ok; else bad "$1" "rc $rc: $(head -3 "$T/out")"; fi
}

copy
printf '#include "cmds.h"\n' >>"$T/t/compiler/base/util.c"
expect_fail "an include of a higher layer" "compiler/base/util.c (base) includes compiler/commands/cmds.h (commands): a higher layer"

copy
sed -i 's/#include "diag.h"/#include "diag.h"\n#include "opsem.h"/' "$T/t/compiler/ir/ir.h"
expect_fail "an include circle" "include circle: compiler/ir/ir.h -> compiler/ir/opsem.h -> compiler/ir/ir.h"

copy
printf '#include "ir.h"\n' >>"$T/t/runtime/core/trace.c"
expect_fail "the runtime including the compiler" "runtime/core/trace.c includes compiler/ir/ir.h"

copy
printf '#include "util.h"\n' >"$T/t/compiler/stray.c"
expect_fail "a file in no layer" "compiler/stray.c is in no layer"

copy
sed -i 's/^ generation .*$/ generation   nosuch.c/' "$T/t/docs/architecture.md"
expect_fail "a row naming no file" "nosuch.c (layer generation) names no file"

# The build enforces the layers: a file compiled with its layer's flags (the Makefile's,
# `make print-layer-flags`) cannot include a higher layer's header, and can its own and
# a lower one's. ir/opsem.c with an include of the commands' cmds.h added, and the
# runtime's trace.c with ir.h added, do not compile; the unchanged files do.
flags() { make -s --no-print-directory print-layer-flags LAYER="$1"; }
ir_flags=$(flags ir); rt_flags=$(flags rt_core); base_flags=$(flags base)
check "print-layer-flags: ir sees base, not plans" \
    sh -c 'case "$1" in *-Icompiler/base*) case "$1" in *-Icompiler/plans*) exit 1;; esac;; *) exit 1;; esac' _ "$ir_flags"
check "ir/opsem.c compiles with the ir layer's flags" \
    ${CC:-cc} $ir_flags -fsyntax-only compiler/ir/opsem.c
{ printf '#include "cmds.h"\n'; cat compiler/ir/opsem.c; } >"$T/up.c"
check "an upward include (ir -> commands) does not compile" \
    sh -c '! ${CC:-cc} "$@" -fsyntax-only "$0" 2>/dev/null' "$T/up.c" $ir_flags
check "... and the compiler names the header" \
    sh -c '${CC:-cc} "$@" -fsyntax-only "$0" 2>&1 | grep -q "cmds.h"' "$T/up.c" $ir_flags
check "base/util.c and runtime/core/trace.c compile with their layers' flags" \
    sh -c '${CC:-cc} $1 -fsyntax-only compiler/base/util.c && ${CC:-cc} $2 -fsyntax-only runtime/core/trace.c' _ "$base_flags" "$rt_flags"
{ printf '#include "opsem.h"\n'; cat compiler/base/util.c; } >"$T/up2.c"
check "base cannot include the ir layer's opsem.h" \
    sh -c '! ${CC:-cc} "$@" -fsyntax-only "$0" 2>/dev/null' "$T/up2.c" $base_flags
{ printf '#include "ir.h"\n'; cat runtime/core/trace.c; } >"$T/rt.c"
check "the runtime cannot include a compiler header" \
    sh -c '! ${CC:-cc} "$@" -fsyntax-only "$0" 2>/dev/null' "$T/rt.c" $rt_flags

# Calls between layers, from the objects' symbols: a synthetic tree of objects first.
mkdir -p "$T/o/compiler/base" "$T/o/compiler/commands" "$T/o/runtime" "$T/o/compiler/nolayer"
printf 'int t_up(void);\nint t_low(void) { return t_up(); }\n' >"$T/low.c"
printf 'int t_low(void);\nint t_up(void) { return 1; }\nint t_top(void) { return t_low(); }\n' >"$T/high.c"
${CC:-cc} -c "$T/low.c" -o "$T/o/compiler/base/low.o"
${CC:-cc} -c "$T/high.c" -o "$T/o/compiler/commands/high.o"
out=$(sh tools/check_calls.sh "$T/o" . 2>&1); rc=$?
check "calls: a base object calling a commands one fails (rc $rc: $out)" \
    sh -c '[ "$1" = 1 ] && [ "$2" = "calls: compiler/base/low.c (base) uses t_up of compiler/commands/high.c (commands): a higher layer
calls: call circle: compiler/base/low.c -> compiler/commands/high.c (t_up) -> compiler/base/low.c (t_low)" ]' _ "$rc" "$out"
printf 'int t_low(void);\nint t_rt(void) { return t_low(); }\n' >"$T/rt.c"
${CC:-cc} -c "$T/rt.c" -o "$T/o/runtime/rt.o"
cp "$T/o/compiler/base/low.o" "$T/o/compiler/nolayer/stray.o"
rm "$T/o/compiler/base/low.o"
out=$(sh tools/check_calls.sh "$T/o" . 2>&1); rc=$?
check "calls: the runtime calling the compiler fails ($out)" \
    sh -c '[ "$1" = 1 ] && echo "$2" | grep -qx "calls: runtime/rt.o uses t_low of compiler/nolayer/stray.c: the runtime uses nothing of the compiler"' _ "$rc" "$out"
check "calls: an object in no layer fails" \
    sh -c 'echo "$1" | grep -qx "calls: compiler/nolayer/stray.o is in no layer of docs/architecture.md \"Layers\""' _ "$out"
rm -r "$T/o/compiler/nolayer" "$T/o/runtime/rt.o"
printf 'int t_up(void);\nint t_low(void) { return 2; }\n' >"$T/low.c"
${CC:-cc} -c "$T/low.c" -o "$T/o/compiler/base/low.o"
out=$(sh tools/check_calls.sh "$T/o" . 2>&1)
check "calls: a call downward passes ($out)" test "${out#calls: ok}" != "$out"

# A call circle between objects of one layer (base a -> b -> c -> a) is found and
# printed as its cycle, each edge with a symbol it uses.
mkdir -p "$T/c/compiler/base"
printf 'int t_b(void);\nint t_a(void) { return t_b(); }\n' >"$T/a.c"
printf 'int t_c(void);\nint t_b(void) { return t_c(); }\n' >"$T/b.c"
printf 'int t_a(void);\nint t_c(void) { return t_a(); }\n' >"$T/c.c"
for x in a b c; do ${CC:-cc} -c "$T/$x.c" -o "$T/c/compiler/base/$x.o"; done
out=$(sh tools/check_calls.sh "$T/c" . 2>&1); rc=$?
check "calls: a circle inside a layer fails (rc $rc: $out)" \
    sh -c '[ "$1" = 1 ] && [ "$2" = "calls: call circle: compiler/base/a.c -> compiler/base/b.c (t_b) -> compiler/base/c.c (t_c) -> compiler/base/a.c (t_a)" ]' _ "$rc" "$out"
rm "$T/c/compiler/base/c.o"
printf 'int t_c(void) { return 3; }\n' >"$T/c.c"
${CC:-cc} -c "$T/c.c" -o "$T/c/compiler/base/c.o"
out=$(sh tools/check_calls.sh "$T/c" . 2>&1)
check "calls: the same objects without the edge back pass ($out)" test "${out#calls: ok}" != "$out"

# ... then the built objects (make bin/pipec, build/libpiperun.a), and a call planted in
# the built base util.o to the commands' driver_compile.
if [ -f build/obj/compiler/base/util.o ] && [ -f build/obj/compiler/commands/driver.o ]; then
    out=$(sh tools/check_calls.sh build/obj . 2>&1)
    check "the built objects call no higher layer ($out)" test "${out#calls: ok}" != "$out"
    mkdir -p "$T/b"; cp -r build/obj/compiler "$T/b/"
    printf 'int driver_compile(void);\nint t_plant(void) { return driver_compile(); }\n' >"$T/plant.c"
    ${CC:-cc} -c "$T/plant.c" -o "$T/plant.o" &&
        ld -r build/obj/compiler/base/util.o "$T/plant.o" -o "$T/b/compiler/base/util.o"
    out=$(sh tools/check_calls.sh "$T/b" . 2>&1); rc=$?
    check "a call planted in base/util.o to driver_compile is found (rc $rc)" \
        sh -c '[ "$1" = 1 ] && echo "$2" | grep -qx "calls: compiler/base/util.c (base) uses driver_compile of compiler/commands/driver.c (commands): a higher layer"' _ "$rc" "$out"
    # the circles that were broken, planted back: ir.c calling opsem.c's op_stream
    # (opsem.c reads ir_cost of ir.c), and the runtime core's failure.c calling dp.c
    # (dp.c reports through pr_fail of failure.c)
    rm -rf "$T/b"; mkdir -p "$T/b"; cp -r build/obj/compiler build/obj/gen build/obj/runtime "$T/b/"
    printf 'int op_stream(int);\nint t_plant(void) { return op_stream(0); }\n' >"$T/plant.c"
    ${CC:-cc} -c "$T/plant.c" -o "$T/plant.o" &&
        ld -r build/obj/compiler/ir/ir.o "$T/plant.o" -o "$T/b/compiler/ir/ir.o"
    printf 'int pr_dp_reduce(void *);\nint t_plant2(void) { return pr_dp_reduce(0); }\n' >"$T/plant2.c"
    ${CC:-cc} -c "$T/plant2.c" -o "$T/plant2.o" &&
        ld -r build/obj/runtime/core/failure.o "$T/plant2.o" -o "$T/b/runtime/core/failure.o"
    out=$(sh tools/check_calls.sh "$T/b" . 2>&1); rc=$?
    check "a planted circle ir.c <-> opsem.c is found (rc $rc: $out)" \
        sh -c '[ "$1" = 1 ] && echo "$2" | grep -qx "calls: call circle: compiler/ir/ir.c -> compiler/ir/opsem.c (op_stream) -> compiler/ir/ir.c (ir_[a-z_]*)"' _ "$rc" "$out"
    check "a planted circle in the runtime core is found" \
        sh -c 'echo "$1" | grep -qx "calls: call circle: runtime/core/dp.c -> runtime/core/failure.c (pr_[a-z_]*) -> runtime/core/dp.c (pr_dp_reduce)"' _ "$out"
else
    skip "calls of the built objects" "no objects in build/obj/compiler (make bin/pipec first)"
fi

# No function longer than 120 lines in the compiler, the grammar, the runtime (its
# headers' inline functions and the CUDA kernels too) or tools/ (tools/longfn.sh), and
# the tool finds one that is, in the house layout and with the brace after the
# signature (a CUDA kernel), and not a 120-line one.
long=$(bash tools/longfn.sh compiler/*/*.[ch] grammar/*.[ly] plan/*.h runtime/*.[ch] runtime/*/*.[ch] \
       runtime/cuda/*.cu runtime/cuda/*.cuh runtime/mpi/*.c tools/*.c 2>&1)
check "no function over 120 lines${long:+: $long}" test -z "$long"
{ echo "int f(void)"; echo "{"; for i in $(seq 121); do echo "    (void)0;"; done; echo "}"; } >"$T/long.c"
check "longfn.sh finds a function of 124 lines" grep -q "long.c:1 124 int f(void)" \
    <(bash tools/longfn.sh "$T/long.c")
{ echo "__global__ void k(float *x,"; echo "                  int n) {"; for i in $(seq 118); do echo "    x[0] = n;"; done
  echo "}"; echo "static int g(void)"; echo "{"; for i in $(seq 117); do echo "    (void)0;"; done; echo "}"; } >"$T/long.cu"
check "... a kernel of 121 lines with its brace after the signature, not a function of 120" \
    test "$(bash tools/longfn.sh "$T/long.cu")" = "$T/long.cu:1 121 __global__ void k(float *x,"
finish
