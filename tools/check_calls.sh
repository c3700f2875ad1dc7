#!/bin/sh
# tools/check_calls.sh - the compiler's layers of docs/architecture.md "Layers", checked
# at the level of calls, from the built objects' symbols (nm), as tests/t_layers.sh does
# for the runtime's groups:
#
#   - an object of a layer uses (nm: undefined, U) no symbol that an object of a higher
#     layer defines: a lower layer neither calls a higher one nor reads its data, even
#     through a prototype it declares itself;
#   - the runtime's objects use no symbol that a compiler object defines (the runtime
#     links nothing of the compiler);
#   - every compiler object is in a layer (its folder, OBJDIR/compiler/NAME/, is a row of
#     the table; OBJDIR/gen/ holds the parser and scanner, of the layer whose row names
#     grammar/pipe.y); an object directly under OBJDIR/compiler/ whose name an object of
#     a layer folder also has is left from a build before the move and is not read.
#
# Includes (a file including a higher layer's header, include circles) are
# tools/check_layers.sh's. A symbol defined by an object of the user's own layer or a
# lower one is that one's (the linker takes the first); one defined only by the runtime
# or by no object (libc) is no call between layers.
#
# Prints one line per violation and exits 1 when there is one; prints "calls: ok" and
# exits 0 otherwise; exits 2 when OBJDIR holds no compiler object.
# usage: tools/check_calls.sh [OBJDIR [SRCDIR]]   (default: build/obj and .)
set -eu
objdir=${1:-build/obj}
src=${2:-.}
exec python3 - "$objdir" "$src" <<'EOF'
import glob, os, re, subprocess, sys

objdir, root = sys.argv[1], sys.argv[2]
doc = open(os.path.join(root, "docs/architecture.md"), encoding="utf-8").read()
m = re.search(r"^### Layers\n.*?```\n(.*?)```", doc, re.S | re.M)
if not m:
    print("calls: no table under '### Layers' in docs/architecture.md")
    sys.exit(1)
rows = [l.split(None, 1) for l in m.group(1).splitlines() if l.strip()]
rank = {row[0]: len(rows) - i for i, row in enumerate(rows)}      # highest first
gen_layer = next((row[0] for row in rows if len(row) > 1 and "grammar/pipe.y" in row[1]), None)

def symbols(path):
    """(defined, used) global symbols of the object at path."""
    out = subprocess.run(["nm", path], capture_output=True, text=True)
    if out.returncode != 0:
        print("calls: nm %s: %s" % (path, out.stderr.strip()))
        sys.exit(1)
    defined, used = set(), set()
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRCVW":
            defined.add(parts[2])
    return defined, used

problems = []
objs = {}      # source name -> (layer, defined, used)
comp_defs = {}  # symbol -> the source name of a compiler object defining it, any folder
paths = sorted(glob.glob(os.path.join(objdir, "compiler", "**", "*.o"), recursive=True))
in_layers = {os.path.basename(p) for p in paths if os.path.relpath(p, objdir).count(os.sep) == 2}
for path in paths:
    rel = os.path.relpath(path, objdir)
    layer = rel.split(os.sep)[1]
    if rel.count(os.sep) == 1 and os.path.basename(path) in in_layers:
        continue  # left by a build from before the file moved into its layer's folder
    syms = symbols(path)
    for s in syms[0]:
        comp_defs.setdefault(s, rel[:-2] + ".c")
    if layer not in rank or rel.count(os.sep) != 2:
        problems.append("calls: %s is in no layer of docs/architecture.md \"Layers\"" % rel)
        continue
    objs[rel[:-2] + ".c"] = (layer,) + syms
for path in sorted(glob.glob(os.path.join(objdir, "gen", "*.o"))):
    name = "gen/" + os.path.basename(path)[:-2] + ".c"
    syms = symbols(path)
    for s in syms[0]:
        comp_defs.setdefault(s, name)
    if gen_layer:
        objs[name] = (gen_layer,) + syms
if not objs:
    print("calls: no compiler object under %s (build first: make bin/pipec)" % objdir)
    sys.exit(2)

definer = {}  # symbol -> [(rank, source)] of the compiler objects defining it
for f, (layer, defined, _) in objs.items():
    for s in defined:
        definer.setdefault(s, []).append((rank[layer], f))

for f, (layer, defined, used) in sorted(objs.items()):
    for s in sorted(used - defined):
        ds = definer.get(s, [])
        if not ds or min(r for r, _ in ds) <= rank[layer]:
            continue
        g = min(ds)[1]
        problems.append("calls: %s (%s) uses %s of %s (%s): a higher layer"
                        % (f, layer, s, g, objs[g][0]))

rt = sorted(glob.glob(os.path.join(objdir, "runtime", "**", "*.o"), recursive=True))
rt_syms = [(os.path.relpath(p, objdir), symbols(p)) for p in rt]
rt_defined = set().union(*(d for _, (d, _) in rt_syms)) if rt_syms else set()
for f, (_, used) in rt_syms:
    for s in sorted(used - rt_defined):
        if s in comp_defs:
            problems.append("calls: %s uses %s of %s: the runtime uses nothing of the "
                            "compiler" % (f, s, comp_defs[s]))

for p in problems:
    print(p)
if problems:
    sys.exit(1)
print("calls: ok (%d compiler objects in %d layers, %d runtime objects)"
      % (len(objs), len(rank), len(rt_syms)))
EOF
