#!/usr/bin/env bash
# t_readme.sh - replays README.md's "A two-minute tour" and "Choose a schedule" in a
# fresh folder each (the second with a link to examples/): every code
# block that starts with a "# NAME.pipe:" comment is written to NAME.pipe, every "$ "
# line is run as written (pipec on PATH, the build cache in $XDG_CACHE_HOME), and its
# output (stdout and stderr) must be the lines shown under it. For `pipec run`, whose
# times and cache folder differ from run to run, numbers and the cache path are masked,
# a "..." line stands for any lines, and warning[oversubscribed] (it depends on the
# machine's cores) is left out.
cd "$(dirname "$0")/.."
. tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bindir=$(dirname "$(realpath "$PIPEC")")
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
# replay SECTION DIR: runs the section's commands in DIR; prints "commands: N" and the
# differences.
replay() {
(cd "$2" && PATH="$bindir:$PATH" XDG_CACHE_HOME="$tmp/cache" timeout 600 python3 - "$OLDPWD/README.md" "$1" <<'EOF'
import re, subprocess, sys
text = open(sys.argv[1]).read()
m = re.search(r"^## " + re.escape(sys.argv[2]) + r"\n(.*?)^## ", text, re.S | re.M)
assert m, "no section " + sys.argv[2]
blocks = re.findall(r"^```\n(.*?)^```", m.group(1), re.S | re.M)
def mask(lines, run):
    res = []
    for l in lines:
        if "warning[oversubscribed]" in l:
            continue
        if run:
            l = re.sub(r" in \S+$", " in DIR", l)
            l = re.sub(r"[0-9a-f]{16}", "HASH", l)
            l = re.sub(r"\d+(\.\d+)?", "#", l)
        res.append(l)
    return res
def matches(want, got):
    if not want:
        return not got
    if want[0] == "...":
        return any(matches(want[1:], got[i:]) for i in range(len(got) + 1))
    return bool(got) and want[0] == got[0] and matches(want[1:], got[1:])
fails, ncmd = [], 0
for b in blocks:
    lines = b.rstrip("\n").split("\n")
    f = re.match(r"# (\S+\.pipe):", lines[0])
    if f:
        open(f.group(1), "w").write(b)
        continue
    if not lines[0].startswith("$ "):
        continue
    i = 0
    while i < len(lines):
        cmd = lines[i][2:]
        j = i + 1
        while j < len(lines) and not lines[j].startswith("$ "):
            j += 1
        want = lines[i + 1:j]
        p = subprocess.run(["bash", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        got = p.stdout.rstrip("\n").split("\n") if p.stdout.strip() else []
        run = cmd.startswith("pipec run")
        ncmd += 1
        if not matches(mask(want, run), mask(got, run)):
            fails.append("$ %s\n--- README\n%s\n--- got\n%s" % (cmd, "\n".join(want), "\n".join(got)))
        i = j
print("commands: %d" % ncmd)
print("\n\n".join(fails))
EOF
)
}
mkdir "$tmp/tour" "$tmp/choose"
ln -s "$PWD/examples" "$tmp/choose/examples"
out=$(replay "A two-minute tour" "$tmp/tour")
n=$(echo "$out" | sed -n 's/^commands: //p')
check "README tour: commands found ($n)" test "${n:-0}" -ge 10
rest=$(echo "$out" | sed '1d')
if [ -z "$rest" ]; then ok; else bad "README tour: outputs differ" "$(echo "$rest" | head -40)"; fi
out=$(replay "Choose a schedule" "$tmp/choose")
n=$(echo "$out" | sed -n 's/^commands: //p')
check "README Choose a schedule: commands found ($n)" test "${n:-0}" -ge 10
# The section answers issue 23's question on a 70B configuration: compare over stdlib
# templates and tune on the Llama-2 70B example, the exact search on a small one.
sec=$(sed -n '/^## Choose a schedule$/,/^## An example$/p' README.md)
for want in '$ pipec compare examples/llama2_70b_zero1.pipe --set schedule=' \
            '$ pipec tune examples/llama2_70b_zero1.pipe' '$ pipec tune --exact examples/'; do
    check "README Choose a schedule: has '$want'" grep -qF -- "$want" <<<"$sec"
done
rest=$(echo "$out" | sed '1d')
if [ -z "$rest" ]; then ok; else bad "README Choose a schedule: outputs differ" "$(echo "$rest" | head -40)"; fi
finish
