#!/usr/bin/env bash
# t_layers.sh - the runtime's layers (docs/architecture.md "The runtime"): no
# include circle among the files of runtime/, and no call circle among its groups (core,
# models, workloads, backends, top), read from the built objects' symbols (nm): a file
# calls a group when it uses a symbol that a file of the group defines. The core calls
# no workload and nothing of run.c or run_main.c; every file of runtime/ is in a group.
# A planted circle (a copy of the tree with one more include, one more call) fails.
# runtime/piperun.h's op-kind enum is the one tools/mkkinds.sh generates from
# plan/opkinds.h.
cd "$(dirname "$0")/.."
. tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# program_table.c runs a rank's steps (pr_recv, pr_op, pr_send) where generated code
# once did, so it sits with the top. The groups, lowest first (a group on two lines keeps its first place): a group may use
# the ones before it (and itself), never one after it.
cat >"$tmp/groups" <<'EOF'
models    data.c mlp.c mlp_layers.c transformer.c
core      failure.c piperun_common.c dp.c router.c trace.c profile.c
workloads synthetic.c workload_model.c workload_mlp.c workload_tf.c
backends  piperun.c mpi/piperun_mpi.c mpi/piperun_cuda_mpi.c
backends  cuda/piperun_cuda.c cuda/cu_error.c cuda/cu_host.c cuda/mlp_cuda.cu cuda/tf_cuda.cu cuda/spin.cu
top       run.c run_main.c program_table.c
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

# includes: "x.h" resolved as the compiler would, beside the file, then runtime/ and
# runtime/cuda/ (the build's -I); headers outside runtime/ are not its business
inc = {}
for f in files:
    here = os.path.dirname(f)
    for line in open(os.path.join(rt, f), errors="replace"):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if not m:
            continue
        names = (os.path.join(here, m.group(1)), m.group(1), os.path.join("cuda", m.group(1)))
        for cand in names:
            cand = os.path.normpath(cand)
            if cand in files:
                inc.setdefault(f, set()).add(cand)
                break
c = cycle(inc)
if c:
    problems.append("include circle: " + " -> ".join(c))

# groups
group, rank = {}, {}
for line in open(groups_file):
    name, *members = line.split()
    rank.setdefault(name, len(rank))
    for m in members:
        group[m] = name
for f in files:
    if f.endswith((".c", ".cu")) and f not in group:
        problems.append("%s is in no group of t_layers.sh" % f)

# calls: the objects' defined and undefined symbols
defs, uses = {}, {}
for arg in objdirs:  # DIR:PREFIX: DIR/x.o is the object of runtime/PREFIX/x.c or x.cu
    d, _, prefix = arg.partition(":")
    for o in sorted(os.listdir(d)) if os.path.isdir(d) else ():
        if o.endswith(".o"):
            path = os.path.join(d, o)
            stem = os.path.join(prefix, o[:-2])
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
if [ ! -f "$objs/piperun_common.o" ]; then
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
printf '#include "workload.h"\n' >>"$tmp/copy/runtime/piperun_internal.h"
python3 "$tmp/layers.py" "$tmp/copy" "$tmp/groups" "$objs" >"$tmp/out" 2>&1
check "a planted include circle is found" grep -q "include circle: .*piperun_internal.h" "$tmp/out"
mkdir -p "$tmp/obj"
cp "$objs"/*.o "$tmp/obj/"
printf 'extern int pr_model_op(void);\nint t_call(void) { return pr_model_op(); }\n' >"$tmp/call.c"
cc -c "$tmp/call.c" -o "$tmp/call.o" &&
    ld -r "$tmp/obj/trace.o" "$tmp/call.o" -o "$tmp/obj/trace2.o" &&
    mv "$tmp/obj/trace2.o" "$tmp/obj/trace.o"
python3 "$tmp/layers.py" . "$tmp/groups" "$tmp/obj" >"$tmp/out" 2>&1
check "a planted call from the core to a workload is found" \
    grep -q "trace.c (core) calls pr_model_op of workload_model.c (workloads), a group above" \
    "$tmp/out"
check "... and the circle it closes" grep -q "call circle between groups" "$tmp/out"
finish
