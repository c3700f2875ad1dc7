#!/usr/bin/env bash
# t_sim.sh - `pipec sim` and `pipec diff` end to end on tests/golden/sim/*.pipe.
#
# Expected numbers come from the closed forms written in each input's header comment
# (1F1B/GPipe: makespan (M+P-1)(f+b), bubble ratio (P-1)/(M+P-1), 1F1B bubbles 2(P-s-1)f
# and (P-s-1)f, peak weights + min(P-s, M) act; the swap and interleaved cases timed by
# hand). The trace must parse as JSON with the expected event kinds and counts, the SVG
# as XML, and every per-stage op-order diff must turn A's list into B's under patch(1).
cd "$(dirname "$0")/.."
. tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
P=$PIPEC_ASAN
G=tests/golden/sim
GiB=1073741824

# --- DESIGN.md's --json example ----------------------------------------------------------
"$P" sim --json $G/tiny_1f1b.pipe >"$tmp/j" 2>"$tmp/err"
check "sim --json exits 0" test $? = 0
check "sim --json writes nothing on stderr" test ! -s "$tmp/err"
want='{"pipeline": "tiny_1f1b", "stages": 4, "microbatches": 8, "chunks": 1, "makespan_ms": 33.0, "bubble_ratio": 0.2727272727272727, "per_stage": ['
# Stage s: busy M(f+b) = 24, idle (P-1)(f+b) = 9, bubbles 2(P-s-1) and (P-s-1),
# peak 4GiB + (P-s) * 8GiB (M >= P - s).
for s in 0 1 2 3; do
    [ $s = 0 ] || want="$want, "
    peak=$(( (4 + (4 - s) * 8) * GiB )); act=$(( (4 - s) * 8 * GiB ))
    want="$want{\"stage\": $s, \"busy_ms\": 24.0, \"idle_ms\": 9.0, \"fwd_bubble_ms\": $((2 * (3 - s))).0, \"bwd_bubble_ms\": $((3 - s)).0, \"peak_mem_bytes\": $peak, \"budget_bytes\": $((40 * GiB)), \"static_mem_bytes\": $((4 * GiB)), \"peak_act_bytes\": $act}"
done
want="$want]}"
if [ "$(cat "$tmp/j")" = "$want" ]; then ok; else bad "sim --json tiny_1f1b" "$(diff <(echo "$want") "$tmp/j" | head -5)"; fi
check "sim --json is one JSON object" python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$tmp/j"
check "--json has DESIGN.md's stage-0 text" grep -qF '{"stage": 0, "busy_ms": 24.0, "idle_ms": 9.0, "fwd_bubble_ms": 6.0, "bwd_bubble_ms": 3.0, "peak_mem_bytes": 38654705664, "budget_bytes": 42949672960, "static_mem_bytes": 4294967296, "peak_act_bytes": 34359738368}' "$tmp/j"

# --- the human summary ----------------------------------------------------------------
"$P" sim $G/tiny_1f1b.pipe >"$tmp/s" 2>&1
check "summary: makespan" grep -q '^makespan  *33.000 ms$' "$tmp/s"
# 8 micro-batches in 33 ms: 242.42 per second.
check "summary: throughput" grep -q '^throughput  *242.42 micro-batches/s$' "$tmp/s"
check "summary: bubble ratio" grep -q '^bubble ratio  *0.2727' "$tmp/s"
check "summary: stage 0 row" grep -qE '^ +0 +24.000 +9.000 +6.000 +3.000 +36.0 GiB +40.0 GiB +90.0%$' "$tmp/s"

# --- other closed forms ---------------------------------------------------------------
"$P" sim --json $G/tiny_gpipe.pipe >"$tmp/g"
check "gpipe: makespan 33, ratio 3/11" grep -qF '"makespan_ms": 33.0, "bubble_ratio": 0.2727272727272727' "$tmp/g"
check "gpipe: stage 0 bubbles 9 and 0, peak 4 + 8*8 GiB" grep -qF "{\"stage\": 0, \"busy_ms\": 24.0, \"idle_ms\": 9.0, \"fwd_bubble_ms\": 9.0, \"bwd_bubble_ms\": 0.0, \"peak_mem_bytes\": $((68 * GiB))," "$tmp/g"
"$P" sim --json $G/swap.pipe >"$tmp/w"
check "swap: hand-timed makespan and bubbles" grep -qF '"makespan_ms": 23.0, "bubble_ratio": 0.7391304347826086, "per_stage": [{"stage": 0, "busy_ms": 6.0, "idle_ms": 17.0, "fwd_bubble_ms": 10.0, "bwd_bubble_ms": 7.0, "peak_mem_bytes": 3000000000, "budget_bytes": null, "static_mem_bytes": 1000000000, "peak_act_bytes": 2000000000}' "$tmp/w"
"$P" sim --json $G/interleaved.pipe >"$tmp/i"
check "interleaved: makespan M t + (P-1) t / V" grep -qF '"makespan_ms": 7.5, "bubble_ratio": 0.2,' "$tmp/i"
check "interleaved: idle (P-1)/V * t per rank" test "$(grep -o '"idle_ms": 1.5,' "$tmp/i" | wc -l)" = 2

"$P" sim --json $G/dep.pipe --trace "$tmp/dep.json" >"$tmp/dep"
check "dep: makespan 12 (the dep and its p2p)" grep -qF '"makespan_ms": 12.0,' "$tmp/dep"
cat >"$tmp/check_dep.py" <<'EOF'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
s = [e for e in ev if e["name"] == "dep" and e["ph"] == "s"]
f = [e for e in ev if e["name"] == "dep" and e["ph"] == "f"]
# One flow from stage 1's B1 (ends at 7.5 ms) to stage 0's B0 (starts at 8 ms).
assert len(s) == 1 and len(f) == 1, (s, f)
assert s[0]["pid"] == 1 and 7499 < s[0]["ts"] <= 7500, s
assert f[0]["pid"] == 0 and f[0]["ts"] == 8000 and f[0]["id"] == s[0]["id"], f
EOF
check "dep: one flow event pair in the trace" python3 "$tmp/check_dep.py" "$tmp/dep.json"

# --- gantt -------------------------------------------------------------------------------
COLUMNS=72 "$P" sim --gantt $G/tiny_1f1b.pipe >"$tmp/gantt"
check "gantt: one row per stage" test "$(grep -c '^ *stage [0-3] |' "$tmp/gantt")" = 4
check "gantt: fits COLUMNS" test "$(awk '/stage 0 \|/{on=1} on && length($0) > 72' "$tmp/gantt" | wc -l)" = 0
check "summary fits 80 columns" test "$(awk 'length($0) > 80' "$tmp/gantt" | wc -l)" = 0
check "gantt: stage 0 starts with F0, stage 3 idles first" grep -q '^ *stage 0 |F0' "$tmp/gantt"
check "gantt: stage 3 waits for F0" grep -q '^ *stage 3 |\.\.*F0' "$tmp/gantt"
COLUMNS=200 "$P" sim --gantt $G/swap.pipe >"$tmp/gantt2"
check "gantt: swap streams get rows" grep -q '^stage 0 out |.*SO0' "$tmp/gantt2"
check "gantt: SI row" grep -q 'stage 0 in |.*SI0' "$tmp/gantt2"
"$P" sim --json --gantt $G/swap.pipe >"$tmp/jg" 2>"$tmp/jg.err"
check "--json --gantt keeps stdout JSON" python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$tmp/jg"
check "--json --gantt: gantt on stderr" grep -q 'stage 0 |' "$tmp/jg.err"

# --- Chrome trace ------------------------------------------------------------------------
"$P" sim $G/tiny_1f1b.pipe --trace "$tmp/t.json" >/dev/null
check "trace: written" test -s "$tmp/t.json"
check "trace: parses (json.tool)" python3 -m json.tool "$tmp/t.json" /dev/null
# 64 ops as X events; 1F1B over 4 ranks has 2 (P-1) M = 48 cross-rank deps; 4 stages.
cat >"$tmp/check_trace.py" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"]
kinds = {}
for e in ev:
    kinds[e["ph"]] = kinds.get(e["ph"], 0) + 1
procs = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
threads = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
x = [e for e in ev if e["ph"] == "X"]
assert kinds.get("X") == 64, kinds
assert kinds.get("s") == 48 and kinds.get("f") == 48, kinds
assert procs == {0, 1, 2, 3}, procs
assert len(threads) == 12, threads
assert {e["pid"] for e in ev if e["ph"] == "C"} == {0, 1, 2, 3}, kinds
# Times in microseconds: the last B of stage 0 ends at 33 ms.
end = max(e["ts"] + e["dur"] for e in x)
assert abs(end - 33000) < 1e-6, end
# Counter peaks match the summary's 36 GiB on stage 0.
peak0 = max(e["args"]["GiB"] for e in ev if e["ph"] == "C" and e["pid"] == 0)
assert abs(peak0 - 36) < 1e-9, peak0
# Each flow starts inside its producer's slice and ends where its consumer starts.
for e in ev:
    if e["ph"] == "s":
        assert any(s["pid"] == e["pid"] and s["ts"] <= e["ts"] <= s["ts"] + s["dur"] for s in x)
    if e["ph"] == "f":
        assert any(s["pid"] == e["pid"] and s["ts"] == e["ts"] for s in x)
EOF
check "trace: event kinds, counts, times, counters" python3 "$tmp/check_trace.py" "$tmp/t.json"

# --- SVG ---------------------------------------------------------------------------------
"$P" sim $G/swap.pipe --svg "$tmp/s.svg" >/dev/null
"$P" sim $G/tiny_1f1b.pipe --svg "$tmp/t.svg" >/dev/null
cat >"$tmp/check_svg.py" <<'EOF'
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == ns + "svg"
ops = [r for r in root.iter(ns + "rect") if r.get("class") == "op"]
assert len(ops) == int(sys.argv[2]), len(ops)
texts = "".join(t.text or "" for t in root.iter(ns + "text"))
for want in sys.argv[3:]:
    assert want in texts, want
EOF
check "svg: well-formed, 64 boxes, labels" python3 "$tmp/check_svg.py" "$tmp/t.svg" 64 "stage 3" "36.0 GiB / 40.0 GiB" "time (ms)"
check "svg: swap rows" python3 "$tmp/check_svg.py" "$tmp/s.svg" 6 "swap out" "swap in" "2.8 GiB"

# --- diff --------------------------------------------------------------------------------
"$P" diff $G/tiny_1f1b.pipe $G/tiny_gpipe.pipe --svg "$tmp/d.svg" >"$tmp/d" 2>"$tmp/d.err"
check "diff exits 0" test $? = 0
check "diff: makespan row" grep -qE '^makespan ms +33.000 +33.000 +\+0.000 +1.000$' "$tmp/d"
check "diff: peak memory stage 0" grep -qE '^peak mem stage 0 +36.0 GiB +68.0 GiB +\+32.0 GiB +1.889$' "$tmp/d"
check "diff: every stage differs" grep -q '^op order: 4 of 4 stages differ$' "$tmp/d"
check "diff --svg: well-formed, 128 boxes" python3 "$tmp/check_svg.py" "$tmp/d.svg" 128 "A: " "B: "
# Apply each stage's unified diff to A's op list with patch(1): it must give B's.
ops_of() { # FILE STAGE: the op list of a stage, one per line
    sed -n "s/^ *stage $2 { \(.*\) }/\1/p" "$1" | tr ' ' '\n'
}
for s in 0 1 2 3; do
    ops_of $G/tiny_1f1b.pipe $s >"$tmp/a$s"
    ops_of $G/tiny_gpipe.pipe $s >"$tmp/b$s"
    awk -v s="$s" '/^--- .* stage /{on = ($NF == s)} on' "$tmp/d" |
        sed -e '1s/.*/--- a/' -e '2s/.*/+++ b/' | sed '/^op order/d' >"$tmp/p$s"
    if patch -s -o "$tmp/r$s" "$tmp/a$s" <"$tmp/p$s" >/dev/null 2>&1 && cmp -s "$tmp/r$s" "$tmp/b$s"; then
        ok
    else
        bad "diff: stage $s patch turns A into B" "$(head -5 "$tmp/p$s")"
    fi
done
"$P" diff $G/tiny_1f1b.pipe $G/tiny_1f1b.pipe >"$tmp/same"
check "diff: same file" grep -q '^op order: the same on all 4 stages$' "$tmp/same"
check "diff: same file, no hunks" test "$(grep -c '^@@' "$tmp/same")" = 0

# --- errors ------------------------------------------------------------------------------
"$P" sim >/dev/null 2>&1
check "sim without a file: usage (2)" test $? = 2
"$P" diff $G/swap.pipe >/dev/null 2>&1
check "diff with one file: usage (2)" test $? = 2
"$P" sim --bogus $G/swap.pipe >/dev/null 2>&1
check "sim --bogus: usage (2)" test $? = 2
"$P" sim "$tmp/nonexistent.pipe" >/dev/null 2>&1
check "sim on a missing file: 1" test $? = 1
"$P" sim $G/swap.pipe --trace "$tmp/no/such/dir/t.json" >/dev/null 2>"$tmp/e"
check "trace into a missing folder: 1" test $? = 1
check "trace into a missing folder: says why" grep -q 'no/such/dir' "$tmp/e"

finish
