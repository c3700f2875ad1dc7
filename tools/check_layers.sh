#!/bin/sh
# tools/check_layers.sh - the include layers of docs/architecture.md "Layers", checked:
#
#   - every source file under compiler/ and grammar/ is in exactly one layer of the
#     table there (one line per layer, highest first: NAME, then its files relative to
#     compiler/, or grammar/...; `x.c` stands for x.c and x.h, `dir/*.c` for every .c
#     and .h file of dir: a layer is a folder, compiler/NAME/);
#   - a file includes headers of its own layer or of a lower one, never of a higher one;
#   - the includes between files form no circle;
#   - the runtime (runtime/) includes only runtime/ and plan/ headers: nothing else of
#     the compiler.
#
# Prints one line per violation and exits 1 when there is one; prints "layers: ok" and
# exits 0 otherwise. usage: tools/check_layers.sh [SRCDIR]   (default: .)
set -eu
src=${1:-.}
exec python3 - "$src" <<'EOF'
import fnmatch, glob, os, re, sys

root = sys.argv[1]
doc = open(os.path.join(root, "docs/architecture.md"), encoding="utf-8").read()
m = re.search(r"^### Layers\n.*?```\n(.*?)```", doc, re.S | re.M)
if not m:
    print("layers: no table under '### Layers' in docs/architecture.md")
    sys.exit(1)

# The table: highest layer first. A row is NAME (words), two or more spaces, files.
rows = [l for l in m.group(1).splitlines() if l.strip()]
layer_of = {}          # repository path -> (rank, name)
problems = []
src_files = sorted(glob.glob(os.path.join(root, "compiler/**/*.[ch]"), recursive=True) +
                   glob.glob(os.path.join(root, "compiler/**/*.def"), recursive=True) +
                   glob.glob(os.path.join(root, "grammar/*.[ly]")) +
                   glob.glob(os.path.join(root, "plan/*.h")) +
                   glob.glob(os.path.join(root, "runtime/**/*.[ch]"), recursive=True) +
                   glob.glob(os.path.join(root, "runtime/**/*.cuh"), recursive=True) +
                   glob.glob(os.path.join(root, "runtime/**/*.cu"), recursive=True))
src_files = [os.path.relpath(f, root) for f in src_files]
for i, row in enumerate(rows):
    parts = re.split(r"\s{2,}", row.strip(), maxsplit=1)
    if len(parts) != 2:
        problems.append("layers: row without files: %r" % row)
        continue
    name, files = parts
    rank = len(rows) - i
    files = re.sub(r"\([^)]*\)", "", files)
    for item in re.split(r"[,;]\s*", files):
        item = item.strip()
        if not item:
            continue
        if "/" in item and item.split("/")[0] in ("plan", "runtime", "grammar"):
            pat = item
        else:
            pat = "compiler/" + item
        if pat.endswith(".c") and "*" not in pat:
            pats = [pat, pat[:-2] + ".h"]
        else:
            pats = [pat, pat.replace("*.c", "*.h")] if "*.c" in pat else [pat]
        hit = False
        for p in pats:
            for f in src_files:
                if fnmatch.fnmatch(f, p) and (p.count("/") == f.count("/")):
                    hit = True
                    if f in layer_of and layer_of[f][0] != rank:
                        problems.append("layers: %s is in two layers (%s, %s)"
                                        % (f, layer_of[f][1], name))
                    layer_of[f] = (rank, name)
        if not hit:
            problems.append("layers: %s (layer %s) names no file" % (item, name))

inc_re = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

def resolve(f, name):
    """The repository path of header `name` included by f, or None (generated)."""
    here = os.path.dirname(f)
    for d in (here,) + layer_dirs + ("compiler", "plan", "runtime") + rt_dirs:
        p = os.path.normpath(os.path.join(d, name))
        if p in src_set:
            return p
    return None

src_set = set(src_files)
# The runtime's group folders (runtime/models, core, ...), searched as the build's -I are.
rt_dirs = tuple(sorted(os.path.relpath(d, root) for d in
                       glob.glob(os.path.join(root, "runtime/*/"))))
# The compiler's layer folders, searched as the build's -I paths are.
layer_dirs = tuple(sorted(os.path.relpath(d, root) for d in
                          glob.glob(os.path.join(root, "compiler/*/"))))
edges = {}
for f in src_files:
    text = open(os.path.join(root, f), encoding="utf-8", errors="replace").read()
    edges[f] = [h for h in (resolve(f, n) for n in inc_re.findall(text)) if h and h != f]

for f in src_files:
    side = f.split("/")[0]
    if side in ("compiler", "grammar"):
        if f not in layer_of:
            problems.append("layers: %s is in no layer of docs/architecture.md \"Layers\"" % f)
            continue
        for h in edges[f]:
            if h.split("/")[0] in ("compiler", "grammar") and h not in layer_of:
                continue  # reported above
            hl = layer_of.get(h)
            if hl and hl[0] > layer_of[f][0]:
                problems.append("layers: %s (%s) includes %s (%s): a higher layer"
                                % (f, layer_of[f][1], h, hl[1]))
    elif side == "runtime" or side == "plan":
        for h in edges[f]:
            if h.split("/")[0] not in ("runtime", "plan"):
                problems.append("layers: %s includes %s: the runtime includes nothing of "
                                "the compiler but plan/" % (f, h))

# circles: depth-first search over the include edges
state = {}
def dfs(f, path):
    state[f] = 1
    for h in edges.get(f, []):
        if state.get(h) == 1:
            cyc = path[path.index(h):] + [h] if h in path else [f, h]
            problems.append("layers: include circle: " + " -> ".join(cyc))
        elif not state.get(h):
            dfs(h, path + [h])
    state[f] = 2
sys.setrecursionlimit(10000)
for f in src_files:
    if not state.get(f):
        dfs(f, [f])

for p in problems:
    print(p)
if problems:
    sys.exit(1)
print("layers: ok (%d files in %d layers)" % (len(layer_of), len(rows)))
EOF
