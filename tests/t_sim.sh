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

# --- docs/spec.md "JSON output" example ----------------------------------------------------------
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
# Beyond the example of docs/spec.md "JSON output": 1F1B with uniform costs and no p2p is optimal, so the lower
# bound is the makespan (stage P-1 waits (P-1) f for its first F and the last B needs
# (P-1) b to drain after its last op: 3 + 24 + 6 = 33); no R, so the overhead ratio is the
# bubble ratio; no model, so tokens/s and MFU are null.
want="$want], \"lower_bound_ms\": 33.0, \"overhead_ratio\": 0.2727272727272727, \"tokens_per_s\": null, \"mfu\": null}"
if [ "$(cat "$tmp/j")" = "$want" ]; then ok; else bad "sim --json tiny_1f1b" "$(diff <(echo "$want") "$tmp/j" | head -5)"; fi
check "sim --json is one JSON object" python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$tmp/j"
check "--json has the spec's stage-0 text" grep -qF '{"stage": 0, "busy_ms": 24.0, "idle_ms": 9.0, "fwd_bubble_ms": 6.0, "bwd_bubble_ms": 3.0, "peak_mem_bytes": 38654705664, "budget_bytes": 42949672960, "static_mem_bytes": 4294967296, "peak_act_bytes": 34359738368}' "$tmp/j"

# --- the human summary ----------------------------------------------------------------
"$P" sim $G/tiny_1f1b.pipe >"$tmp/s" 2>&1
check "summary: makespan" grep -q '^makespan  *33.000 ms$' "$tmp/s"
# 8 micro-batches in 33 ms: 242.42 per second.
check "summary: throughput" grep -q '^throughput  *242.42 micro-batches/s$' "$tmp/s"
check "summary: bubble ratio" grep -q '^bubble ratio  *0.2727' "$tmp/s"
check "summary: distance to the lower bound" grep -qx 'makespan 33.000 ms, 0.00% above the lower bound (33.000 ms)' "$tmp/s"
check "summary: overhead ratio" grep -q '^overhead  *0.2727 (idle + recompute' "$tmp/s"
check "summary: no model, no tokens/s or MFU" grep -q '^tokens/s  *- (no model)$' "$tmp/s"
check "summary: stage 0 row" grep -qE '^ +0 +24.000 +9.000 +6.000 +3.000 +36.0 GiB +40.0 GiB +90.0%$' "$tmp/s"

# --- other closed forms ---------------------------------------------------------------
"$P" sim --json $G/tiny_gpipe.pipe >"$tmp/g"
check "gpipe: makespan 33, ratio 3/11" grep -qF '"makespan_ms": 33.0, "bubble_ratio": 0.2727272727272727' "$tmp/g"
check "gpipe: stage 0 bubbles 9 and 0, peak 4 + 8*8 GiB" grep -qF "{\"stage\": 0, \"busy_ms\": 24.0, \"idle_ms\": 9.0, \"fwd_bubble_ms\": 9.0, \"bwd_bubble_ms\": 0.0, \"peak_mem_bytes\": $((68 * GiB))," "$tmp/g"
"$P" sim --json $G/swap.pipe >"$tmp/w"
# The bound's longest chain: F0 1 + SO0 10 + SI0 10 + B0 2 = 23, the makespan.
check "swap: lower bound = the chain F0 SO0 SI0 B0" grep -qF '"lower_bound_ms": 23.0,' "$tmp/w"
check "swap: hand-timed makespan and bubbles" grep -qF '"makespan_ms": 23.0, "bubble_ratio": 0.7391304347826086, "per_stage": [{"stage": 0, "busy_ms": 6.0, "idle_ms": 17.0, "fwd_bubble_ms": 10.0, "bwd_bubble_ms": 7.0, "peak_mem_bytes": 3000000000, "budget_bytes": null, "static_mem_bytes": 1000000000, "peak_act_bytes": 2000000000}' "$tmp/w"
"$P" sim --json $G/shared_link.pipe >"$tmp/hl"
check "shared link: two ranks' swaps share it (hand-timed 18ms)" grep -qF '"makespan_ms": 18.0,' "$tmp/hl"
check "shared link: the bound keeps the full-bandwidth chain (12ms)" grep -qF '"lower_bound_ms": 12.0,' "$tmp/hl"
sed 's/host_link_ranks 2/host_link_ranks 1/' $G/shared_link.pipe >"$tmp/own_links.pipe"
"$P" sim --json "$tmp/own_links.pipe" >"$tmp/hl1"
check "own links: the same swaps do not slow each other (12ms)" grep -qF '"makespan_ms": 12.0,' "$tmp/hl1"
"$P" sim --trace "$tmp/hl.json" $G/shared_link.pipe >/dev/null 2>&1
check "shared link: trace spans of SO0 [1,8] and [2,9], SI0 [8,15] and [9,16] (us)" python3 -c '
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
got = sorted((e["name"], e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"] in ("SO0", "SI0"))
sys.exit(got != [("SI0", 8000, 15000), ("SI0", 9000, 16000), ("SO0", 1000, 8000), ("SO0", 2000, 9000)])' "$tmp/hl.json"
"$P" print $G/shared_link.pipe >"$tmp/hl_print.pipe"
check "print keeps host_link_ranks" grep -qx '    host_link_ranks 2' "$tmp/hl_print.pipe"
"$P" sim --json "$tmp/hl_print.pipe" >"$tmp/hl2"
check "printed and read back, it simulates the same" grep -qF '"makespan_ms": 18.0,' "$tmp/hl2"
"$P" sim --json $G/interleaved.pipe >"$tmp/i"
check "interleaved: makespan M t + (P-1) t / V" grep -qF '"makespan_ms": 7.5, "bubble_ratio": 0.2,' "$tmp/i"
check "interleaved: idle (P-1)/V * t per rank" test "$(grep -o '"idle_ms": 1.5,' "$tmp/i" | wc -l)" = 2

"$P" sim --json $G/dep.pipe --trace "$tmp/dep.json" >"$tmp/dep"
check "dep: makespan 12 (the dep and its p2p)" grep -qF '"makespan_ms": 12.0,' "$tmp/dep"
# Stage 1 can start no F before 1 + 0.5, its ops take 6, and its last B has stage 0's
# B (2) after it, with p2p 0.5: 1.5 + 6 + 2.5 = 10 (its listed F1 after B0 costs 2 more).
check "dep: lower bound 10" grep -qF '"lower_bound_ms": 10.0,' "$tmp/dep"
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
check "gantt: stage 3 waits for F0 (idle is blank)" grep -q '^ *stage 3 |  *F0' "$tmp/gantt"
# A box too short for its whole name shows its kind's fill only, never a cut name: in an
# interleaved schedule (names like B3.1) drawn at 60 and 400 columns, no name is cut
# after its '.', and the names drawn at 60 columns are a subset of those drawn at 400
# that the schedule has (a cut "F1" of "F12" would be a name in its own right, so the
# check is on chunk suffixes: at 60 columns every chunk-1 op drawn by name keeps ".1").
sed 's/schedule onef1b/chunks 2  schedule interleaved/' examples/llama2_13b_1f1b.pipe >"$tmp/il.pipe"
COLUMNS=60 "$P" sim --gantt "$tmp/il.pipe" >"$tmp/gantt3"
check "gantt: no cut names" python3 -c "
import re
rows = [l for l in open('$tmp/gantt3') if re.match(r'^ *stage \d+ \|', l)]
assert rows
for l in rows:
    body = l.split('|', 1)[1]
    assert not re.search(r'[FBWR]\d+\.(?!\d)', body), l
    assert '.' not in re.sub(r'[FBWR]\d+\.\d+', '', body), l
"
check "gantt: narrow boxes are counted in the legend" grep -q 'ops too short to name: fill only' "$tmp/gantt3"
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
# A memory curve per stage with the budget line; the curve of stage 0 climbs from its
# weights (4 GiB) to its peak (36 GiB), on an 18 px strip scaled to the 40 GiB budget.
cat >"$tmp/check_mem.py" <<'EOF'
import re, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
curves = [p for p in root.iter(ns + "path") if p.get("class") == "memc" and "V" in p.get("d", "")]
budgets = [l for l in root.iter(ns + "line") if l.get("class") == "budget"]
assert len(curves) == 4, len(curves)
assert len(budgets) == 4, len(budgets)
ys = [float(v) for v in re.findall(r"V([0-9.]+)", curves[0].get("d"))]
y0 = float(re.match(r"M[0-9.]+ ([0-9.]+)", curves[0].get("d")).group(1))
assert abs((y0 - min(ys)) - 18 * (36 - 4) / 40) < 0.05, (y0, min(ys))
title = " ".join(t.text or "" for t in root.iter(ns + "title") if "memory" in (t.text or ""))
assert "stage 0 memory: peak 36.0 GiB of 40.0 GiB" in title, title
EOF
check "svg: memory curve and budget line per stage" python3 "$tmp/check_mem.py" "$tmp/t.svg"
# Width from the schedule: 14 px per op of the busiest rank unless --width.
"$P" sim examples/tpipe_llama48_tpipe.pipe --svg "$tmp/big.svg" >/dev/null
w=$(sed -n 's/^<svg [^>]* width="\([0-9]*\)".*/\1/p' "$tmp/big.svg")
check "svg: width from the schedule ($w px)" test "$w" -gt 3000
"$P" sim examples/tpipe_llama48_tpipe.pipe --svg "$tmp/w.svg" --width 1500 >/dev/null
check "svg: --width" grep -q '^<svg [^>]* width="1500"' "$tmp/w.svg"
"$P" sim examples/tpipe_llama48_tpipe.pipe --svg "$tmp/w.svg" --width 12 >/dev/null 2>&1
check "svg: --width 12 is a usage error" test $? = 2
# Numbers for people in the title: seconds with three digits, the bubble ratio in %.
check "svg: title numbers" grep -qE 'class="title">.*makespan [0-9]+\.[0-9] s, bubble ratio [0-9]+\.[0-9]%' "$tmp/big.svg"

# --- diff --------------------------------------------------------------------------------
"$P" diff $G/tiny_1f1b.pipe $G/tiny_gpipe.pipe --svg "$tmp/d.svg" >"$tmp/d" 2>"$tmp/d.err"
check "diff exits 1 when the schedules differ (as diff(1))" test $? = 1
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
check "diff: same file exits 0" test $? = 0
check "diff: same file" grep -q '^op order: the same on all 4 stages$' "$tmp/same"
check "diff: same file, no hunks" test "$(grep -c '^@@' "$tmp/same")" = 0
check "diff: no shape note for the same shape" bash -c "! grep -q '^note:' '$tmp/same'"
# Per-stage rows: A's busy and idle are sim's numbers for stage 0 (24 and 9 ms for tiny_1f1b).
check "diff: per-stage rows" grep -qE '^ +0 +24\.000 +24\.000 +9\.000 +9\.000 ' "$tmp/same"
# Different micro-batches: a note says so; the exit status is 1.
"$P" diff $G/tiny_1f1b.pipe examples/demo.pipe >"$tmp/shape" 2>&1
check "diff: different costs differ" test $? = 1
printf 'pipeline m4 {\n stages 4 microbatches 4\n costs { f 1ms b 2ms }\n' >"$tmp/m4.pipe"
for s in 0 1 2 3; do printf ' stage %d { F0 F1 F2 F3 B0 B1 B2 B3 }\n' $s >>"$tmp/m4.pipe"; done
echo '}' >>"$tmp/m4.pipe"
"$P" diff $G/tiny_1f1b.pipe "$tmp/m4.pipe" >"$tmp/shape" 2>&1
rc=$?
if [ "$rc" = 1 ] && grep -q '^note: A and B differ in shape: microbatches 8 vs 4' "$tmp/shape"; then ok
else bad "diff: shape note" "rc=$rc $(head -5 "$tmp/shape")"; fi
# --json: one object holding both sim objects and what differs.
"$P" diff --json $G/tiny_1f1b.pipe $G/tiny_gpipe.pipe >"$tmp/dj"
rc=$?
check "diff --json" python3 -c "
import json, sys
d = json.load(open('$tmp/dj'))
assert $rc == 1 and d['differ'] is True and d['shape_differs'] is False, d
assert d['stages_differ'] == [0, 1, 2, 3], d['stages_differ']
assert d['a']['makespan_ms'] == 33.0 and d['a']['pipeline'] == 'tiny_1f1b'
assert len(d['b']['per_stage']) == 4
"
"$P" diff --json $G/tiny_1f1b.pipe $G/tiny_1f1b.pipe >"$tmp/dj2"
check "diff --json, same: exit 0, differ false" python3 -c "
import json; d = json.load(open('$tmp/dj2')); assert d['differ'] is False and d['stages_differ'] == []"
"$P" diff $G/tiny_1f1b.pipe "$tmp/nonexistent.pipe" >/dev/null 2>&1
check "diff: an input error exits 2" test $? = 2
check "diff help lists --json and --svg" bash -c "'$P' help diff | grep -q -- --json && '$P' help diff | grep -q -- --svg"

# --- diff: stage and chunk counts that differ, zero-cost schedules ----------------------------
printf 'pipeline two { stages 2 microbatches 2 costs { f 1ms b 2ms } stage 0 { F0 F1 B0 B1 } stage 1 { F0 B0 F1 B1 } }\n' >"$tmp/two.pipe"
"$P" diff $G/tiny_1f1b.pipe "$tmp/two.pipe" >"$tmp/d4" 2>&1
check "diff, 4 vs 2 stages: exit 1" test $? = 1
check "diff, 4 vs 2 stages: the note names both counts" grep -q '^note: A and B differ in shape: stages 4 vs 2, microbatches 8 vs 2 (compare micro-batches/s, not makespan)$' "$tmp/d4"
check "diff, 4 vs 2 stages: B's missing stages show '-'" grep -qE '^ +3 +24\.000 +- +9\.000 +- ' "$tmp/d4"
check "diff, 4 vs 2 stages: every stage's order differs" grep -q '^op order: 4 of 4 stages differ$' "$tmp/d4"
"$P" diff --json $G/tiny_1f1b.pipe "$tmp/two.pipe" >"$tmp/d4j"
check "diff --json, 4 vs 2 stages" python3 -c "
import json; d = json.load(open('$tmp/d4j'))
assert d['shape_differs'] is True and d['differ'] is True and d['stages_differ'] == [0, 1, 2, 3], d
assert d['a']['stages'] == 4 and d['b']['stages'] == 2"
"$P" diff $G/interleaved.pipe "$tmp/two.pipe" >"$tmp/dv" 2>&1
check "diff, 2 vs 1 chunks: the note names the chunks only" grep -q '^note: A and B differ in shape: chunks 2 vs 1$' "$tmp/dv"
# Zero costs: makespan 0 on both sides, so B / A is 1 and micro-batches/s 0.
printf 'pipeline z1 { stages 1 microbatches 2 stage 0 { F0 F1 B0 B1 } }\n' >"$tmp/z1.pipe"
printf 'pipeline z2 { stages 1 microbatches 2 stage 0 { F0 B0 F1 B1 } }\n' >"$tmp/z2.pipe"
"$P" diff "$tmp/z1.pipe" "$tmp/z2.pipe" >"$tmp/dz" 2>&1
check "diff, zero costs, other order: exit 1" test $? = 1
check "diff, zero costs: makespan ratio 1" grep -qE '^makespan ms +0\.000 +0\.000 +\+0\.000 +1\.000$' "$tmp/dz"
check "diff, zero costs: micro-batches/s 0" grep -qE '^micro-batches/s +0\.00 +0\.00 +\+0\.00 +1\.000$' "$tmp/dz"
check "diff, one stage: singular" grep -q '^op order: 1 of 1 stage differ$' "$tmp/dz"
check "diff, one stage: F1 moved after B0" test "$(grep -E '^[-+](F1|B0)$' "$tmp/dz" | tr '\n' ' ')" = "-F1 +F1 "
"$P" diff "$tmp/z1.pipe" "$tmp/z1.pipe" >"$tmp/dz1" 2>&1
check "diff, one stage, same: singular" grep -q '^op order: the same on all 1 stage$' "$tmp/dz1"
# --width of diff's SVG, checked as sim's.
"$P" diff --width 1400 "$tmp/z1.pipe" "$tmp/two.pipe" --svg "$tmp/dw.svg" >/dev/null 2>&1
check "diff --width 1400: the SVG is 1400 wide" grep -q '^<svg [^>]* width="1400"' "$tmp/dw.svg"
for w in 12 '' 1500px 40000; do
    "$P" diff --width "$w" "$tmp/z1.pipe" "$tmp/z2.pipe" --svg "$tmp/dw2.svg" >/dev/null 2>"$tmp/dwe"
    check "diff --width '$w': usage error (2)" test $? = 2
    check "diff --width '$w': says what it wants" grep -qF "pipec: --width wants a whole number of pixels in 300..32000, not '$w'" "$tmp/dwe"
    "$P" sim --width "$w" "$tmp/z1.pipe" --svg "$tmp/dw2.svg" >/dev/null 2>&1
    check "sim --width '$w': usage error (2)" test $? = 2
done
check "a rejected --width writes no SVG" test ! -e "$tmp/dw2.svg"

# File names with XML's special characters label diff's SVG escaped; it stays XML.
cp $G/tiny_1f1b.pipe "$tmp/a&b\".pipe"
cp $G/tiny_gpipe.pipe "$tmp/x<y>.pipe"
"$P" diff "$tmp/a&b\".pipe" "$tmp/x<y>.pipe" --svg "$tmp/esc.svg" >/dev/null 2>&1
check "diff --svg, special file names: escaped A label" grep -qF 'A: '"$tmp"'/a&amp;b&quot;.pipe' "$tmp/esc.svg"
check "diff --svg, special file names: escaped B label" grep -qF 'B: '"$tmp"'/x&lt;y&gt;.pipe' "$tmp/esc.svg"
check "diff --svg, special file names: well-formed XML" python3 -c "import xml.dom.minidom as m; m.parse('$tmp/esc.svg')"

# --- gantt width: $COLUMNS when it is a number from 20, else 100 columns -------------------------
gantt_width() { # COLUMNS value: the widest timeline row
    COLUMNS=$1 "$P" sim --gantt $G/tiny_1f1b.pipe | grep -E '^ +stage [0-9]+ \|' | awk '{ if (length > w) w = length } END { print w }'
}
check "gantt: COLUMNS=60 makes 60-column rows" test "$(gantt_width 60)" = 60
check "gantt: COLUMNS=150 makes 150-column rows" test "$(gantt_width 150)" = 150
# The label column stays; the timeline keeps at least 10 columns ("    stage 0 |" is 13).
check "gantt: COLUMNS=20 keeps 10 timeline columns" test "$(gantt_width 20)" = 23
# Without COLUMNS, a terminal's own width.
if command -v script >/dev/null; then
    w=$(env -u COLUMNS script -qec "stty cols 50; '$P' sim --gantt $G/tiny_1f1b.pipe" /dev/null | tr -d '\r' |
        grep -E '^ +stage [0-9]+ \|' | awk '{ if (length > w) w = length } END { print w }')
    check "gantt: a 50-column terminal makes 50-column rows ($w)" test "$w" = 50
else
    skip "gantt on a terminal" "no script(1)"
fi
for c in abc 5 60x '' 20000; do
    check "gantt: COLUMNS='$c' is ignored (100 columns)" test "$(gantt_width "$c")" = 100
done

# --- sim of a schedule over its budget: simulated as written, the stage marked ------------
printf 'pipeline ob { stages 2 microbatches 4 memory 3GiB costs { f 1ms b 2ms act 1GiB }\n stage 0 { F0 F1 F2 F3 B0 B1 B2 B3 }\n stage 1 { F0 B0 F1 B1 F2 B2 F3 B3 } }\n' >"$tmp/ob.pipe"
"$P" sim "$tmp/ob.pipe" --svg "$tmp/ob.svg" >"$tmp/ob" 2>&1
check "over budget: sim still exits 0" test $? = 0
# GPipe order on stage 0 holds all four micro-batches: 4 GiB of a 3 GiB budget.
check "over budget: stage 0 marked" grep -qE '^ +0 +12\.000 +3\.000 +0\.000 +3\.000 +4\.0 GiB +3\.0 GiB +133\.3%  over budget$' "$tmp/ob"
check "over budget: stage 1 not marked" grep -qE '^ +1 +12\.000 +3\.000 +0\.000 +0\.000 +1\.0 GiB +3\.0 GiB +33\.3%$' "$tmp/ob"
check "over budget: the SVG's memory label of stage 0 is red" grep -q 'class="mem" fill="#C44E52">4.0 GiB / 3.0 GiB' "$tmp/ob.svg"
check "over budget: stage 1's label is not" grep -q 'class="mem">1.0 GiB / 3.0 GiB' "$tmp/ob.svg"
"$P" check "$tmp/ob.pipe" >/dev/null 2>&1
check "over budget: check rejects it (exit 1)" test $? = 1

# --- diff: beyond DIFF_MAX_EDITS (4000) edits in one stage the hunks are not shown --------
# A is GPipe's order on one stage (F0..F(n-1) B0..B(n-1)), B is F0 B0 F1 B1 ...: turning
# one into the other takes 2(n - 1) edits, 4000 for n = 2001 and 4002 for n = 2002.
for n in 2001 2002; do
    python3 -c "
n = $n
print('pipeline a { stages 1 microbatches %d stage 0 { %s %s } }' % (n, ' '.join('F%d' % i for i in range(n)), ' '.join('B%d' % i for i in range(n))))
print('pipeline b { stages 1 microbatches %d stage 0 { %s } }' % (n, ' '.join('F%d B%d' % (i, i) for i in range(n))), file=open('$tmp/big_b$n.pipe', 'w'))" >"$tmp/big_a$n.pipe"
    "$P" diff "$tmp/big_a$n.pipe" "$tmp/big_b$n.pipe" >"$tmp/big$n" 2>&1
    check "diff, $n micro-batches on one stage: exit 1" test $? = 1
    check "diff, $n micro-batches: the stage differs" grep -qx 'op order: 1 of 1 stage differ' "$tmp/big$n"
done
check "diff, 4000 edits: shown" test "$(grep -cE '^[-+][FB][0-9]+$' "$tmp/big2001")" = 4000
check "diff, 4000 edits: no 'not shown' line" bash -c "! grep -q 'not shown' '$tmp/big2001'"
check "diff, 4002 edits: says so instead" grep -qx 'stage 0: the op orders differ in more than 4000 places (not shown)' "$tmp/big2002"
check "diff, 4002 edits: no hunk" bash -c "! grep -q '^@@' '$tmp/big2002'"

# --- edges of the reports ------------------------------------------------------------------
# Same makespan, different bubble ratio: diff says they differ (exit 1); B / A of a zero
# A is "-" (A has no bubble, B's memory has no A counterpart).
cat >"$tmp/one.pipe" <<'E'
pipeline one { stages 1 microbatches 1 costs { f 3ms b 3ms } stage 0 { F0 B0 } }
E
cat >"$tmp/duo.pipe" <<'E'
pipeline duo { stages 2 microbatches 1 costs { f 1ms b 2ms act 1GiB }
  stage 0 { F0 B0 } stage 1 { F0 B0 } }
E
"$P" diff "$tmp/one.pipe" "$tmp/duo.pipe" >"$tmp/d1" 2>&1
check "diff, same makespan, other bubble ratio: exit 1" test $? = 1
while IFS='|' read -r what row; do
    check "diff: $what" grep -qE "$row" "$tmp/d1"
done <<'ROWS'
makespan 6 both|^makespan ms +6\.000 +6\.000 +\+0\.000 +1\.000$
bubble ratio 0 vs 1/2, ratio -|^bubble ratio +0\.0000 +0\.5000 +\+0\.5000 +-$
peak 0 vs 1 GiB, ratio -|^peak mem stage 0 +0 B +1\.0 GiB +\+1\.0 GiB +-$
ROWS
# --json: the same shape with another makespan differs; so do other micro-batch or chunk
# counts with the same stages (shape_differs).
sed 's/b 2ms act 1GiB/b 3ms/; s/pipeline duo/pipeline slow/' "$tmp/duo.pipe" >"$tmp/slow.pipe"
printf 'pipeline twom { stages 2 microbatches 2 costs { f 1ms b 2ms }\n  stage 0 { F0 F1 B0 B1 } stage 1 { F0 B0 F1 B1 } }\n' >"$tmp/twom.pipe"
printf 'pipeline twov { stages 2 microbatches 1 chunks 2 costs { f 1ms b 2ms }\n  stage 0 { F0 F0.1 B0.1 B0 } stage 1 { F0 F0.1 B0.1 B0 } }\n' >"$tmp/twov.pipe"
"$P" diff --json "$tmp/duo.pipe" "$tmp/slow.pipe" >"$tmp/j1"
check "diff --json, slower B: exit 1" test $? = 1
check "diff --json, slower B: shape same, differ" grep -qF '"shape_differs": false, "stages_differ": [], "differ": true}' "$tmp/j1"
for o in twom twov; do
    "$P" diff --json "$tmp/duo.pipe" "$tmp/$o.pipe" >"$tmp/j2"
    check "diff --json, $o: exit 1" test $? = 1
    check "diff --json, $o: the shape differs" grep -qF '"shape_differs": true' "$tmp/j2"
done
# Two changes more than 2 * DIFF_CONTEXT (6) equal ops apart are two hunks, each with
# 3 ops of context: F0/F1 swapped at the front, B10/B11 at the end of 24 ops.
a="F0 F1 F2 F3 F4 F5 F6 F7 F8 F9 F10 F11 B0 B1 B2 B3 B4 B5 B6 B7 B8 B9 B10 B11"
b="F1 F0 F2 F3 F4 F5 F6 F7 F8 F9 F10 F11 B0 B1 B2 B3 B4 B5 B6 B7 B8 B9 B11 B10"
printf 'pipeline ha { stages 1 microbatches 12 costs { f 1ms b 2ms } stage 0 { %s } }\n' "$a" >"$tmp/ha.pipe"
printf 'pipeline hb { stages 1 microbatches 12 costs { f 1ms b 2ms } stage 0 { %s } }\n' "$b" >"$tmp/hb.pipe"
"$P" diff "$tmp/ha.pipe" "$tmp/hb.pipe" >"$tmp/hunks"
check "diff, two far changes: two hunks" test "$(grep '^@@' "$tmp/hunks" | tr '\n' ' ')" = "@@ -1,5 +1,5 @@ @@ -20,5 +20,5 @@ "
check "diff, two far changes: the second hunk" test "$(sed -n '/^@@ -20/,$p' "$tmp/hunks" | sed -n '2,7p' | tr '\n' ' ')" = " B7  B8  B9 -B10  B11 +B10 "
# The gantt axis leaves out a tick's time where the one before runs into it: at 880
# columns a 1050 s schedule ticks every 10 s, 8.3 columns apart, and 1.01e+06 (8
# characters and a space) leaves no room for 1.02e+06.
printf 'pipeline big { stages 1 microbatches 1 costs { f 350000ms b 700000ms } stage 0 { F0 B0 } }\n' >"$tmp/bigms.pipe"
COLUMNS=880 "$P" sim --gantt "$tmp/bigms.pipe" >"$tmp/bg"
nums=$(grep -A1 '^ *+-' "$tmp/bg" | tail -n 1)
check "gantt axis: 1.01e+06 then 1.03e+06" bash -c "grep -q ' 1\.01e+06 *1\.03e+06 ' <<<'$nums '"
check "gantt axis: every label whole, a multiple of 10 s" python3 -c "
import sys
t = sys.argv[1].split()
assert t[0] == 'ms' and len(t) > 90, t
assert all(float(x) % 10000 == 0 for x in t[1:]), t" "$nums"
# The SVG's time axis ticks at 1, 2 or 5 times a power of ten, about ten of them: a
# 12 ms schedule every 1 ms, an 80 ms one every 10 ms.
for t in "12 4 8 0 1 2 3 4 5 6 7 8 9 10 11 12" "80 30 50 0 10 20 30 40 50 60 70 80"; do
    set -- $t
    printf 'pipeline t%s { stages 1 microbatches 1 costs { f %sms b %sms } stage 0 { F0 B0 } }\n' "$1" "$2" "$3" >"$tmp/t$1.pipe"
    "$P" sim "$tmp/t$1.pipe" --svg "$tmp/t$1.svg" >/dev/null
    n=$1; shift 3
    check "svg: a ${n} ms schedule ticks at $*" test "$(sed -n 's/.*class="tick">\([0-9.]*\)<.*/\1/p' "$tmp/t$n.svg" | tr '\n' ' ')" = "$* "
done
# A rank of 2400 ops needs more than the widest picture: capped at SVG_MAX_WIDTH.
printf 'import "std/schedules.pipe"\npipeline wide { stages 2 microbatches 1200 costs { f 1ms b 2ms } schedule onef1b }\n' >"$tmp/wide.pipe"
"$P" sim "$tmp/wide.pipe" --svg "$tmp/wide.svg" >/dev/null
max=$(sed -n 's/^#define SVG_MAX_WIDTH \([0-9]*\)$/\1/p' compiler/generation/sim_svg.h)
check "svg: width capped at SVG_MAX_WIDTH ($max)" test "$(sed -n 's/^<svg [^>]* width="\([0-9]*\)".*/\1/p' "$tmp/wide.svg")" = "$max"
# A file name with a control character: dropped from the SVG's text, the rest escaped.
cp "$tmp/one.pipe" "$tmp/q\"b"$'\t'"c.pipe"
"$P" diff --svg "$tmp/pair.svg" "$tmp/one.pipe" "$tmp/q\"b"$'\t'"c.pipe" >/dev/null
check "svg: a tab in a label dropped, a quote escaped" grep -qF 'q&quot;bc.pipe' "$tmp/pair.svg"
# The trace draws a flow for each cross-rank chain link and dep edge: none between the
# two chunks a V-shape keeps on one rank, none for a dep within a rank.
printf 'pipeline dx { stages 2 microbatches 1 costs { f 1ms b 2ms } stage 0 { F0 B0 } stage 1 { F0 B0 }\n  dep 0:F0 -> 1:B0\n  dep 0:F0 -> 0:B0 }\n' >"$tmp/dx.pipe"
"$P" sim "$tmp/dx.pipe" --trace "$tmp/dx.json" >/dev/null
check "trace: one dep flow, for the cross-rank edge" python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
dep = [(e['ph'], e['pid']) for e in ev if e.get('name') == 'dep']
assert dep == [('s', 0), ('f', 1)], dep" "$tmp/dx.json"
printf 'import "std/schedules.pipe"\npipeline zv { stages 2 microbatches 4 chunks 2 vshape costs { f 1ms b 2ms w 1ms } schedule zbv }\n' >"$tmp/zv.pipe"
"$P" sim "$tmp/zv.pipe" --trace "$tmp/zv.json" >/dev/null
# P*V = 4 virtual stages, 4 micro-batches, F and B: 3 links each, 1 of them (1 -> 2) on
# rank 1, so 2 flows (an s and an f event each) per (kind, micro-batch).
check "trace, V-shape: no flow between the chunks on one rank" python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
n = sum(1 for e in ev if e.get('name') == 'p2p')
assert n == 2 * 4 * 2 * 2, n" "$tmp/zv.json"
# The gantt legend lists RO when the schedule has overlapped recomputation (Lynx).
COLUMNS=100 "$P" sim --gantt examples/lynx_gpt7b_lynx.pipe >"$tmp/lx" 2>&1
check "gantt: RO in the legend of a Lynx schedule" grep -q 'RO overlapped recompute, exposed part (\*)' "$tmp/lx"
check "gantt: RO boxes drawn (*)" grep -q '^ *stage [0-9] |.*\*' "$tmp/lx"
check "gantt: no RO in the legend of 1F1B" bash -c "! grep -q 'RO overlapped' '$tmp/gantt'"
# On a terminal narrower than 20 columns --gantt takes 100 columns (as off a terminal).
if command -v script >/dev/null; then
    env -u COLUMNS script -qec "stty cols 15; '$P' sim --gantt '$tmp/one.pipe'" /dev/null >"$tmp/tty" 2>&1
    check "gantt on a 15-column terminal: 100 columns" test "$(tr -d '\r' <"$tmp/tty" | awk '/stage 0 \|/ { print length($0) }')" = 100
else
    skip "gantt on a narrow terminal" "no script(1)"
fi

# --- --help of sim and diff --------------------------------------------------------------
for c in sim diff; do
    for h in --help -h; do
        "$P" $c $h >"$tmp/o" 2>"$tmp/e"
        check "$c $h: exit 0" test $? = 0
        check "$c $h: its usage on stdout" grep -q "^usage: pipec $c " "$tmp/o"
    done
done

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

# --- figures at paper-column width (docs/simulator.md) ---------------------------------------
# Computed from the emitted coordinates: each legend entry spans from its swatch's x to its
# text's x + 6.6 px a character (11 px text) and is 12 px high; no two overlap, and none
# reaches the peak-memory column (the picture's width less 150 px).
cat >"$tmp/check_fig.py" <<'EOF'
import re, sys, xml.etree.ElementTree as ET
path, kind = sys.argv[1], sys.argv[2]
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(path).getroot()
width = float(root.get("width"))
boxes = []
for g in root.iter(ns + "g"):
    if g.get("class") != "leg-entry":
        continue
    first = list(g)[0]
    if first.tag == ns + "rect":
        x0 = float(first.get("x"))
    else:
        x0 = float(re.match(r"M([0-9.]+)", first.get("d")).group(1))
    t = g.find(ns + "text")
    x1 = float(t.get("x")) + len(t.text) * 6.6
    y = float(t.get("y"))
    boxes.append((x0, x1, y - 10, y + 2, t.text))
assert len(boxes) >= 5, boxes
for i, a in enumerate(boxes):
    assert a[1] <= width - 150, ("into the peak-memory column", a, width)
    for b in boxes[i + 1:]:
        apart = a[1] <= b[0] or b[1] <= a[0] or a[3] <= b[2] or b[3] <= a[2]
        assert apart, ("legend entries overlap", a, b)
labels = [b[4] for b in boxes]
# no op is told apart by opacity
assert not [e for e in root.iter() if e.get("fill-opacity") or e.get("opacity")], "opacity used"
style = "".join(s.text or "" for s in root.iter(ns + "style"))
rule = lambda c: re.search(r"\." + c + r"\{([^}]*)\}", style).group(1)
# the memory strip's axis: per stage its top in a size unit and 0 B
memax = [t.text for t in root.iter(ns + "text") if t.get("class") == "memax"]
assert memax and len(memax) % 2 == 0, memax
assert all(re.fullmatch(r"[0-9.]+ (B|KiB|MiB|GiB|TiB)", m) for m in memax), memax
assert memax.count("0 B") == len(memax) // 2, memax
chunk_rects = [r for r in root.iter(ns + "rect") if r.get("class") == "chunk"]
if kind == "vshape":
    assert root.find(f".//{ns}pattern[@id='chunk']") is not None, "no chunk pattern"
    assert "url(#chunk)" in rule("chunk"), rule("chunk")
    assert "chunk 1" in labels, labels
    assert len(chunk_rects) > 1, "chunk 1 ops not striped"
else:
    assert not [l for l in labels if "chunk" in l], labels
if kind == "pair":
    mk = [l for l in root.iter(ns + "line") if l.get("class") == "mksp"]
    assert len(mk) == 2, len(mk)
    b, m = rule("budget"), rule("mksp")
    get = lambda r, k: re.search(k + r":([^;]*)", r).group(1)
    assert get(b, "stroke") != get(m, "stroke"), (b, m)
    assert get(b, "stroke-dasharray") != get(m, "stroke-dasharray"), (b, m)
    assert "makespan of A, B" in labels, labels
EOF
printf 'import "std/schedules.pipe"\npipeline zbv { stages 4 microbatches 8 chunks 2 vshape\n  costs { f 1ms b 2ms w 1ms act 1GiB } memory 12GiB schedule zbv }\n' >"$tmp/zbv.pipe"
for w in 600 1200; do
    "$P" sim $G/tiny_1f1b.pipe --svg "$tmp/f$w.svg" --width $w >/dev/null
    check "figure, 1F1B at $w px: legend apart, memory axis" python3 "$tmp/check_fig.py" "$tmp/f$w.svg" plain
    "$P" sim "$tmp/zbv.pipe" --svg "$tmp/v$w.svg" --width $w >/dev/null
    check "figure, zbv at $w px: chunk 1 striped and explained" python3 "$tmp/check_fig.py" "$tmp/v$w.svg" vshape
    "$P" diff $G/tiny_1f1b.pipe $G/tiny_gpipe.pipe --svg "$tmp/p$w.svg" --width $w >/dev/null
    check "figure, diff at $w px: makespan markers unlike the budget" python3 "$tmp/check_fig.py" "$tmp/p$w.svg" pair
done
check "figure at 600 px: the legend wraps (entries on two lines)" \
    test "$(grep -o '<g class="leg-entry"><[a-z]* [^>]*y="[0-9.]*"' "$tmp/v600.svg" | sed 's/.*y="\([0-9.]*\)"/\1/' | sort -u | wc -l)" -ge 2
check "figure at 600 px: a long title shrinks to fit" grep -q 'font-size="[0-9.]*" class="title"' "$tmp/p600.svg"

# --- figures of huge schedules: refused beyond 250000 ops unless --large ------------------
# (docs/simulator.md "Size of the figures"); 1F1B has 2 ops per (stage, micro-batch).
big() { # big NAME P M: a uniform 1F1B of P x M
    printf 'import "std/schedules.pipe"\npipeline %s {\n  stages %d microbatches %d\n  costs { f 1ms b 2ms }\n  schedule onef1b\n}\n' "$1" "$2" "$3" >"$tmp/$1.pipe"
}
big at_limit 5 25000    # 250000 ops: drawn
big over_limit 4 31251  # 250008 ops: refused
for o in svg html trace; do
    "$P" sim "$tmp/over_limit.pipe" --$o "$tmp/over.$o" >"$tmp/out" 2>"$tmp/e"
    check "--$o of 250008 ops: exit 1" test $? = 1
    check "--$o of 250008 ops: nothing written" test ! -e "$tmp/over.$o"
    check "--$o of 250008 ops: a located limit error naming --large" grep -qE \
        "^$tmp/over_limit.pipe:2:10: error\[limit\]: sim --$o of 250008 ops would write about [0-9]+ MB: figures draw at most 250000 ops \(--large draws them anyway\)\$" "$tmp/e"
done
"$P" sim "$tmp/over_limit.pipe" --svg "$tmp/over.svg" --large >/dev/null 2>"$tmp/e"
check "--large draws it" test $? = 0 -a -s "$tmp/over.svg"
"$P" sim "$tmp/at_limit.pipe" --html "$tmp/at.html" >/dev/null 2>"$tmp/e"
check "250000 ops are drawn" test $? = 0 -a -s "$tmp/at.html"
"$P" sim "$tmp/over_limit.pipe" --json >"$tmp/out" 2>"$tmp/e"
check "no figure asked: no bound" test $? = 0
big half 4 20000        # 160000 ops: two of them are 320000
"$P" diff "$tmp/half.pipe" "$tmp/half.pipe" --svg "$tmp/huge_diff.svg" >/dev/null 2>"$tmp/e"
check "diff --svg counts both schedules: exit 2" test $? = 2 -a ! -e "$tmp/huge_diff.svg"
check "... diff names it" grep -q "error\[limit\]: diff --svg of 320000 ops" "$tmp/e"

finish
