#!/usr/bin/env bash
# t_bound.sh - the makespan lower bound (docs/simulator.md "Lower bound") against the
# simulator on random small cases of every stdlib template: the bound never exceeds the
# simulated makespan (it bounds every order of the ops, the template's included), is
# never below a rank's busy time, and equals the makespan on onef1b with uniform costs
# and no p2p (1F1B is optimal there). Random P, M, V, placement, per-stage and
# per-virtual-stage cost overrides, W splits (the templates that have them), p2p and
# recomputation; a fixed seed, so a failure reproduces.
cd "$(dirname "$0")/.."
. tests/lib.sh
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 - "$PIPEC" "$tmp" >"$tmp/out" 2>&1 <<'PY'
import json, random, subprocess, sys
pipec, tmp = sys.argv[1], sys.argv[2]
rng = random.Random(23)
# template: (V choices, vshape)
T = {"gpipe": ([1], False), "onef1b": ([1], False), "eager1f1b": ([1], False),
     "zbh1": ([1], False), "zbh2": ([1], False), "tpipe": ([2], False),
     "interleaved": ([1, 2, 3], False), "interleaved_zb": ([1, 2], False),
     "looped_bfs": ([1, 2, 3], False), "zbv": ([2], True), "dualpipev": ([2], True),
     "vhalf": ([2], True), "vmin": ([2], True)}
def ms(x): return "%gms" % x
fails, ran = [], {}
for name, (vs, vshape) in sorted(T.items()):
    ran[name] = 0
    for case in range(40):
        if ran[name] >= 12:
            break
        P, V = rng.randint(1, 4), rng.choice(vs)
        M = rng.choice([P, 2 * P, rng.randint(1, 3 * P)])
        uniform = name == "onef1b" and case % 3 == 0
        f = rng.choice([0.5, 1, 1.5, 2]); b = f * rng.choice([1, 2, 3]); w = rng.choice([0, b / 2, b / 3])
        p2p = 0 if uniform else rng.choice([0, 0, 0.1, 0.5])
        lines = ['import "std/schedules.pipe"', 'import "std/tpipe.pipe"', "pipeline r {",
                 "  stages %d microbatches %d chunks %d%s" % (P, M, V, " vshape" if vshape else ""),
                 "  costs { f %s b %s w %s r %s act 1GiB ckpt 100MiB p2p %s }" % (ms(f), ms(b), ms(w), ms(f), ms(p2p))]
        if not uniform:
            for s in range(P):
                if rng.random() < 0.5:
                    lines.append("  costs stage %d { f %s b %s }" % (s, ms(f * rng.choice([0.5, 1, 2])), ms(b * rng.choice([1, 1.5, 2]))))
            for v in range(P * V):
                if rng.random() < 0.3:
                    lines.append("  costs vstage %d { f %s }" % (v, ms(f * rng.choice([0.25, 3]))))
            if rng.random() < 0.3:
                s0 = rng.randrange(P)
                lines.append("  recompute stages %d..=%d policy full" % (s0, rng.randrange(s0, P)))
        lines += ["  schedule %s" % name, "}"]
        src = "\n".join(lines) + "\n"
        path = "%s/%s_%d.pipe" % (tmp, name, case)
        open(path, "w").write(src)
        r = subprocess.run([pipec, "sim", "--json", path], capture_output=True, text=True)
        if r.returncode != 0:
            continue  # P, M, V outside where the template is defined
        ran[name] += 1
        j = json.loads(r.stdout)
        lb, mk = j["lower_bound_ms"], j["makespan_ms"]
        busy = max(s["busy_ms"] for s in j["per_stage"])
        tol = 1e-9 * max(1, mk)
        if lb is None or lb > mk + tol or lb < busy - tol:
            fails.append("%s: bound %s, makespan %s, busy %s\n%s" % (name, lb, mk, busy, src))
        if uniform and abs(lb - mk) > tol:
            fails.append("%s uniform: bound %s != makespan %s\n%s" % (name, lb, mk, src))
for name, n in sorted(ran.items()):
    print("case %s %d" % (name, n))
for f in fails:
    print("fail " + f.replace("\n", "\n     "))
PY

check "the property script ran" grep -q '^case onef1b' "$tmp/out"
while read -r _ name n; do
    if [ "$n" -ge 3 ]; then ok; else bad "$name: only $n random cases where it is defined"; fi
done < <(grep '^case ' "$tmp/out")
if grep -q '^fail' "$tmp/out"; then
    bad "bound <= makespan, >= busy, tight on uniform 1F1B" "$(grep -A12 -m3 '^fail' "$tmp/out")"
else
    ok
fi
grep -v '^case ' "$tmp/out" | grep -v '^fail\|^     ' | head -5
finish
