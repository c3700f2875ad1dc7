#!/usr/bin/env bash
# t_layers.sh - the runtime's layers (docs/architecture.md "The runtime"): no
# include circle among the files of runtime/, and no call circle among its groups (models,
# core, workloads, backends, top), read from the built objects' symbols (nm): a file
# calls a group when it uses a symbol that a file of the group defines. The groups are
# the folders of runtime/ (runtime/models/, core/, workloads/; the backends cpu/, cuda/,
# mpi/; the top is runtime/ itself), so every file is in one; a .c in another folder is
# reported. The core calls no workload and nothing of the top. The build compiles each
# group with its own and the lower groups' include paths (the Makefile's INC_rt_*), so
# an upward include does not compile: checked on a copy of a core file.
# A planted circle (a copy of the tree with one more include, one more call) fails.
# runtime/piperun.h's op-kind enum is the one tools/mkkinds.sh generates from
# plan/opkinds.h.
cd "$(dirname "$0")/.."
. tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The groups, lowest first, each the folders it is made of ("." the top: the files of
# runtime/ itself; program_table.c runs a rank's steps, pr_recv, pr_op, pr_send, where
# generated code once did): a group may use the ones before it (and itself), never one
# after it.
cat >"$tmp/groups" <<'EOF'
models    models
core      core
workloads workloads
backends  cpu cuda mpi
top       .
EOF

# layers.py ROOT GROUPS DIR[:PREFIX]...: checks ROOT/runtime's includes and the calls of
# the objects in each DIR; prints one line per problem, nothing when the layers hold.
cat >"$tmp/layers.py" <<'EOF'
import os, re, subprocess, sys
root, groups_file, objdirs = sys.argv[1], sys.argv[2], sys.argv[3:]
rt = os.path.join(root, "runtime")
files = sorted(os.path.relpath(os.path.join(d, f), rt)
               for d, _, fs in os.walk(rt) for f in fs
               if f.endswith((".c", ".h", ".cu", ".cuh")))
problems = []

def cycle(graph):
    """A circle of graph (node -> set of nodes) as a list, or None."""
    state, stack = {}, []
    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                c = visit(m)
                if c:
                    return c
        stack.pop()
        state[n] = 2
        return None
    for n in sorted(graph):
        if n not in state:
            c = visit(n)
            if c:
                return c
    return None

# includes: "x.h" resolved as the compiler would, beside the file, then runtime/ and its
# group folders (the build's -I); headers outside runtime/ are not its business
folders = sorted(d for d in os.listdir(rt) if os.path.isdir(os.path.join(rt, d)))
inc = {}
for f in files:
    here = os.path.dirname(f)
    for line in open(os.path.join(rt, f), errors="replace"):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if not m:
            continue
        names = [os.path.join(here, m.group(1)), m.group(1)]
        names += [os.path.join(d, m.group(1)) for d in folders]
        for cand in names:
            cand = os.path.normpath(cand)
            if cand in files:
                inc.setdefault(f, set()).add(cand)
                break
c = cycle(inc)
if c:
    problems.append("include circle: " + " -> ".join(c))

# groups: a file's is its folder's
folder_group, rank = {}, {}
for line in open(groups_file):
    name, *members = line.split()
    rank.setdefault(name, len(rank))
    for m in members:
        folder_group[m] = name
group = {}
for f in files:
    g = folder_group.get(os.path.dirname(f) or ".")
    if g:
        group[f] = g
    elif f.endswith((".c", ".cu")):
        problems.append("%s is in no group of t_layers.sh (runtime/%s/ is no group's folder)"
                        % (f, os.path.dirname(f)))

# calls: the objects' defined and undefined symbols
defs, uses = {}, {}
for arg in objdirs:  # DIR:PREFIX: DIR/PATH.o is the object of runtime/PREFIX/PATH.c or .cu
    d, _, prefix = arg.partition(":")
    objs = sorted(os.path.relpath(os.path.join(w, o), d)
                  for w, _, names in os.walk(d) for o in names if o.endswith(".o"))
    for o in objs:
        path = os.path.join(d, o)
        stem = os.path.normpath(os.path.join(prefix, o[:-2]))
        src = next((stem + e for e in (".c", ".cu") if stem + e in group), None)
        if src is None:
            continue
        out = subprocess.run(["nm", path], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U":
                uses.setdefault(src, set()).add(parts[1])
            elif len(parts) == 3 and parts[1] in "TDBRVW" and parts[1] != "W":
                defs.setdefault(parts[2], set()).add(src)
calls = {}
for f, syms in uses.items():
    for s in syms:
        for g in defs.get(s, ()):
            if g == f:
                continue
            a, b = group[f], group[g]
            calls.setdefault(a, set())
            if a != b:
                calls[a].add(b)
            if rank[b] > rank[a]:
                problems.append("%s (%s) calls %s of %s (%s), a group above it" %
                                (f, a, s, g, b))
c = cycle(calls)
if c:
    problems.append("call circle between groups: " + " -> ".join(c))
if not uses:
    problems.append("no objects read")
for p in sorted(set(problems)):
    print(p)
EOF

# The runtime's op-kind enum (runtime/piperun.h) is generated from plan/opkinds.h's
# PLAN_KINDS (tools/mkkinds.sh): regenerating it changes nothing, and a row added to
# PLAN_KINDS in a copy reaches the enum, before PR_NKINDS.
check "runtime/piperun.h's op kinds are plan/opkinds.h's (make kinds)" \
    sh -c 'sh tools/mkkinds.sh . | cmp -s - runtime/piperun.h'
mkdir -p "$tmp/k/runtime" "$tmp/k/plan"
cp runtime/piperun.h "$tmp/k/runtime/"
sed 's/^    X(LW, "LW", STREAM_H2D)$/    X(LW, "LW", STREAM_H2D) \\\n    X(QQ, "QQ", STREAM_COMPUTE)/' \
    plan/opkinds.h >"$tmp/k/plan/opkinds.h"
sh tools/mkkinds.sh -w "$tmp/k" >/dev/null
check "a kind added to PLAN_KINDS is generated into the enum" \
    grep -q "^enum { PR_F, PR_B, .*PR_LW, PR_QQ, PR_NKINDS };$" "$tmp/k/runtime/piperun.h"

objs=build/obj/runtime
if [ ! -f "$objs/core/common.o" ]; then
    skip "layers" "no built runtime objects in $objs (make first)"
    finish
    exit
fi
# the optional runtimes' objects where they were built (the CUDA one compiles the
# runtime's files again with PIPERUN_CUDA)
python3 "$tmp/layers.py" . "$tmp/groups" "$objs" "build/cuda/cpu" "build/cuda:cuda" \
    "build/mpi:mpi" >"$tmp/out" 2>&1
check "the runtime's layers hold (includes, calls, groups)" test ! -s "$tmp/out"
cat "$tmp/out"

# The check can fail: a copy of runtime/ where core's header includes a workload's
# header that includes it back, and a core object that calls a workload.
mkdir -p "$tmp/copy"
cp -r runtime "$tmp/copy/"
printf '#include "workload.h"\n' >>"$tmp/copy/runtime/core/core.h"
python3 "$tmp/layers.py" "$tmp/copy" "$tmp/groups" "$objs" >"$tmp/out" 2>&1
check "a planted include circle is found" grep -q "include circle: .*core/core.h" "$tmp/out"
mkdir -p "$tmp/copy/runtime/extra"
printf 'int t_extra(void) { return 0; }\n' >"$tmp/copy/runtime/extra/extra.c"
python3 "$tmp/layers.py" "$tmp/copy" "$tmp/groups" "$objs" >"$tmp/out" 2>&1
check "a .c in a folder that is no group's is found" grep -q "extra/extra.c is in no group" "$tmp/out"
# ... and the build's include paths refuse the upward include: a core file that
# includes the workloads' header does not compile with the core's flags
{ printf '#include "workload.h"\n'; cat runtime/core/trace.c; } >"$tmp/up.c"
core_flags=$(make -s --no-print-directory print-layer-flags LAYER=rt_core)
check "runtime/core/trace.c compiles with the core's flags" \
    sh -c '${CC:-cc} $1 -fsyntax-only runtime/core/trace.c' _ "$core_flags"
check "a core file including workload.h does not compile with them" \
    sh -c '! ${CC:-cc} $1 -fsyntax-only "$2" 2>/dev/null' _ "$core_flags" "$tmp/up.c"
mkdir -p "$tmp/obj"
cp -r "$objs"/. "$tmp/obj/"
printf 'extern int pr_model_op(void);\nint t_call(void) { return pr_model_op(); }\n' >"$tmp/call.c"
cc -c "$tmp/call.c" -o "$tmp/call.o" &&
    ld -r "$tmp/obj/core/trace.o" "$tmp/call.o" -o "$tmp/obj/core/trace2.o" &&
    mv "$tmp/obj/core/trace2.o" "$tmp/obj/core/trace.o"
python3 "$tmp/layers.py" . "$tmp/groups" "$tmp/obj" >"$tmp/out" 2>&1
check "a planted call from the core to a workload is found" grep -q \
    "core/trace.c (core) calls pr_model_op of workloads/workload_model.c (workloads), a group above" \
    "$tmp/out"
check "... and the circle it closes" grep -q "call circle between groups" "$tmp/out"
finish
