#!/usr/bin/env bash
# t_streams.sh - `pipec emit --backend cuda` writes DIR/streams.json, the CUDA backend's
# stream plan (docs/cuda.md "The stream plan"), for every example:
#   {"ranks": [{"rank": R, "ops": [{"i": I, "op": "SI1", "stream": "h2d",
#                                   "waits": [I, ...]}, ...]}, ...]}
# one entry per op of every rank in program order, with exactly those keys; streams are
# compute (F B W R RO), d2h (SO OG) or h2d (SI LW); each wait is an earlier op on another
# stream. emit writes streams.json only after the verifier (compiler/generation/stream_check.h)
# passed the plan against the program's arena plans, so every example's emit
# succeeding is every example's plan verified; tests/unit/test_stream_plan.c runs the
# verifier itself and shows it rejects bad plans. docs/cuda.md's plan of demo rank 1 is
# the one streams.json gives. The program carries the same plan as one packed table per
# rank (rank_R.c pr_rank_R_streams), which the CUDA runtime reads: decoded here, it
# equals streams.json. The CPU backend writes neither.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT

for ex in examples/*.pipe; do
    name=$(basename "$ex" .pipe)
    if ! "$PIPEC" emit --backend cuda "$ex" -o "$T/$name" >/dev/null 2>"$T/$name.err"; then
        # layer-granular recomputation is refused (docs/cuda.md), and nothing else
        if grep -q 'error\[limit\]: the cuda backend rebuilds a whole virtual stage' "$T/$name.err"; then
            ok; continue
        fi
        bad "$name" "emit failed: $(head -n 2 "$T/$name.err")"; continue
    fi
    if out=$(python3 - "$T/$name/streams.json" "$T/$name" <<'PY'
import json, os, re, sys
j = json.load(open(sys.argv[1]))
assert list(j) == ["ranks"], list(j)
# the ops of every rank, as the generated program lists them in the comment above its
# table (rank_R.c: " *      I OP ...", docs/runtime.md "Packed op tables")
stages = {}
for f in os.listdir(sys.argv[2]):
    m = re.fullmatch(r"rank_(\d+)\.c", f)
    if m:
        calls = re.findall(r"^ \* +(\d+) (\S+)", open(os.path.join(sys.argv[2], f)).read(), re.M)
        assert [int(i) for i, _ in calls] == list(range(len(calls))), f
        stages[int(m.group(1))] = [n for _, n in calls]
kind_stream = {"F": "compute", "B": "compute", "W": "compute", "R": "compute", "RO": "compute",
               "SO": "d2h", "OG": "d2h", "SI": "h2d", "LW": "h2d"}
assert [r["rank"] for r in j["ranks"]] == list(range(len(stages))), "ranks"
for r in j["ranks"]:
    assert list(r) == ["rank", "ops"], list(r)
    want = stages[r["rank"]]
    assert [o["op"] for o in r["ops"]] == want, ("ops of rank", r["rank"])
    for n, o in enumerate(r["ops"]):
        assert list(o) == ["i", "op", "stream", "waits"], list(o)
        assert o["i"] == n
        kind = re.match(r"[A-Z]+", o["op"]).group(0)
        assert o["stream"] == kind_stream[kind], (o, kind)
        for w in o["waits"]:
            assert 0 <= w < n and r["ops"][w]["stream"] != o["stream"], (r["rank"], o)
        assert o["waits"] == sorted(set(o["waits"])), o
# the program carries the same plan: each rank_R.c's pr_rank_R_streams table (docs/cuda.md
# "The stream plan's table", decoded here independently of the runtime's reader) gives
# every op the stream and waits of streams.json, and receives and sends every message
# of main.c's .nmsgs once
LAST, MORE = "0123456789ABCDEFGHIJKLMNOPQRSTUV", "abcdefghijklmnopqrstuvwxyzWXYZ+-"
def nums(t):
    x = 0
    for c in t:
        if c in LAST:
            yield x << 5 | LAST.index(c); x = 0
        else:
            x = x << 5 | MORE.index(c)
def unzig(z):
    return -(z >> 1) - 1 if z & 1 else z >> 1
names = ["compute", "d2h", "h2d"]
nmsgs = int(re.search(r"\.nmsgs = (\d+)", open(os.path.join(sys.argv[2], "main.c")).read()).group(1))
recv, sent = [0] * nmsgs, [0] * nmsgs
for r in j["ranks"]:
    src = open(os.path.join(sys.argv[2], "rank_%d.c" % r["rank"])).read()
    m = re.search(r"const char pr_rank_%d_streams\[\] =\n((?: +\"[^\"]*\"\n?)+);" % r["rank"], src)
    assert m, ("no stream table", r["rank"])
    it = nums("".join(re.findall(r'"([^"]*)"', m.group(1))))
    assert next(it) == 1 and next(it) == len(r["ops"]), ("table head", r["rank"])
    prev = 0
    for i, o in enumerate(r["ops"]):
        assert names[next(it)] == o["stream"], (r["rank"], i)
        assert sorted(i - next(it) for _ in range(next(it))) == o["waits"], (r["rank"], i)
        for tally in (recv, sent):
            for _ in range(next(it)):
                prev += unzig(next(it)); tally[prev] += 1
    assert next(it, None) is None, ("table tail", r["rank"])
assert recv == [1] * nmsgs and sent == [1] * nmsgs, "messages"
PY
    ); then ok; else bad "$name" "$out"; fi
done

# finding 1's wait is there: on the demo, rank 1's SI1 waits for the B0 listed before it
python3 - "$T/demo/streams.json" <<'PY' && ok || bad demo_si_waits_b
import json, sys
ops = json.load(open(sys.argv[1]))["ranks"][1]["ops"]
si1 = next(o for o in ops if o["op"] == "SI1")
b0 = next(o for o in ops if o["op"] == "B0")
assert b0["i"] < si1["i"] and b0["i"] in si1["waits"], si1
PY

# docs/cuda.md shows demo rank 1's plan: the block must be what streams.json says
python3 - "$T/demo/streams.json" docs/cuda.md <<'PY' && ok || bad docs_plan "docs/cuda.md's plan of demo rank 1 differs from streams.json"
import json, sys
ops = json.load(open(sys.argv[1]))["ranks"][1]["ops"]
want = ["    %-3d %-4s %-8s %s" % (o["i"], o["op"], o["stream"],
        ", ".join("%s (#%d)" % (ops[x]["op"], x) for x in o["waits"]) or "-") for o in ops]
doc = open(sys.argv[2]).read()
a = doc.index("<!-- streams: examples/demo.pipe rank 1 -->\n") + len("<!-- streams: examples/demo.pipe rank 1 -->\n")
got = doc[a:doc.index("<!-- end streams -->")].rstrip("\n").split("\n")
assert [g.rstrip() for g in got] == [w.rstrip() for w in want], (got[:3], want[:3])
PY

"$PIPEC" emit examples/tiny_1f1b.pipe -o "$T/cpu" >/dev/null 2>&1 && [ ! -e "$T/cpu/streams.json" ] &&
    ! grep -q streams "$T/cpu"/*.c "$T/cpu/program.h" &&
    ok || bad cpu_no_streams "the CPU backend wrote streams.json or a stream plan table"
finish
