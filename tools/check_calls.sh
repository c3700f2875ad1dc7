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
#   - no call circle between objects (files), inside a layer or between layers, nor
#     between the runtime's objects: the strongly connected components of the graph
#     "object A uses a symbol object B defines" are single objects. The runtime's
#     objects are OBJDIR/runtime/ and, where they were built, the CUDA and MPI runtimes'
#     beside OBJDIR (OBJDIR/../cuda/*.o of runtime/cuda/, OBJDIR/../cuda/cpu/GROUP/*.o of
#     runtime/GROUP/, OBJDIR/../mpi/*.o of runtime/mpi/), one graph over their source
#     files.
#     Each circle is printed as one of its cycles, every edge with a symbol it uses,
#     and the files of its component.
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

_nm = {}
def nm_lines(path):
    """nm's lines for the object at path. The first call runs one nm over every object
    under objdir and the CUDA and MPI folders beside it (nm -A: each line names its
    file): one process instead of two per object, 0.1 against 6 s for about 80 objects."""
    if not _nm:
        parent = os.path.dirname(os.path.normpath(objdir))
        batch = sorted(set(glob.glob(os.path.join(objdir, "**", "*.o"), recursive=True)) |
                       set(glob.glob(os.path.join(parent, "cuda", "**", "*.o"), recursive=True)) |
                       set(glob.glob(os.path.join(parent, "mpi", "*.o"))))
        out = subprocess.run(["nm", "-A"] + batch, capture_output=True, text=True) if batch else None
        if out is not None and out.returncode == 0:
            _nm.update({b: [] for b in batch})
            for line in out.stdout.splitlines():
                f, sep, rest = line.partition(":")
                if sep and f in _nm:
                    _nm[f].append(rest)
    if path not in _nm:   # not in the batch, or nm failed on one of them: this one alone
        out = subprocess.run(["nm", path], capture_output=True, text=True)
        if out.returncode != 0:
            print("calls: nm %s: %s" % (path, out.stderr.strip()))
            sys.exit(1)
        _nm[path] = out.stdout.splitlines()
    return _nm[path]

def symbols(path):
    """(defined, used) global symbols of the object at path."""
    defined, used = set(), set()
    for line in nm_lines(path):
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

def circles(units):
    """The call circles of units (source -> (defined, used)): one line per strongly
    connected component of more than one source."""
    strong, weak = {}, {}
    for f, (defined, _, w) in units.items():
        for s in defined:
            (weak if s in w else strong).setdefault(s, set()).add(f)
    graph = {}
    for f, (defined, used, _) in units.items():
        graph[f] = {}
        for s in sorted(used - defined):
            for g in strong.get(s) or weak.get(s, ()):
                if g != f:
                    graph[f].setdefault(g, s)
    # Tarjan's algorithm, iterative
    index, low, on, stack, comps, n = {}, {}, set(), [], [], 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = n; n += 1; stack.append(root); on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n; n += 1; stack.append(w); on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop(); on.discard(w); comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))
    lines = []
    for comp in sorted(comps):
        # the shortest cycle through the component's first file (breadth first)
        first, inside = comp[0], set(comp)
        prev, queue = {first: None}, [first]
        end = None
        while queue and end is None:
            nxt = []
            for v in queue:
                for w in sorted(graph[v]):
                    if w not in inside:
                        continue
                    if w == first:
                        end = v
                        break
                    if w not in prev:
                        prev[w] = v
                        nxt.append(w)
                if end is not None:
                    break
            queue = nxt
        path = [end]
        while prev[path[-1]] is not None:
            path.append(prev[path[-1]])
        path.reverse()
        cyc = path + [first]
        text = cyc[0] + "".join(" -> %s (%s)" % (b, graph[a][b]) for a, b in zip(cyc, cyc[1:]))
        line = "calls: call circle: " + text
        if len(comp) > len(path):
            line += "; %d files in all: %s" % (len(comp), " ".join(comp))
        lines.append(line)
    return lines

def weak_syms(path):
    return {p[2] for p in (l.split() for l in nm_lines(path)) if len(p) == 3 and p[1] in "VW"}

problems += circles({f: (defined, used, set()) for f, (_, defined, used) in objs.items()})

def rt_source(stem):
    """The source of the object of stem (runtime/GROUP/x), or None when it has none."""
    for ext in (".c", ".cu"):
        if os.path.exists(os.path.join(root, stem + ext)):
            return stem + ext
    return None

rt_units = {}
parent = os.path.dirname(os.path.normpath(objdir))
# DIR, PREFIX: DIR/PATH.o (at any depth) is the object of PREFIX/PATH.c or .cu
rt_dirs = [(os.path.join(objdir, "runtime"), "runtime"), (os.path.join(parent, "cuda"), "runtime/cuda"),
           (os.path.join(parent, "cuda", "cpu"), "runtime"), (os.path.join(parent, "mpi"), "runtime/mpi")]
for d, prefix in rt_dirs:
    for path in sorted(glob.glob(os.path.join(d, "**", "*.o"), recursive=True)):
        src = rt_source(prefix + "/" + os.path.relpath(path, d)[:-2])
        if src is None:
            continue
        defined, used = symbols(path)
        old = rt_units.get(src, (set(), set(), set()))
        rt_units[src] = (old[0] | defined, old[1] | used, old[2] | weak_syms(path))
problems += circles(rt_units)

for p in problems:
    print(p)
if problems:
    sys.exit(1)
print("calls: ok (%d compiler objects in %d layers, %d runtime objects; no call circle "
      "among them nor among the %d runtime files built)"
      % (len(objs), len(rank), len(rt_syms), len(rt_units)))
EOF
