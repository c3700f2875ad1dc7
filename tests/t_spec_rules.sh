#!/usr/bin/env bash
# t_spec_rules.sh - docs/spec.md's normative rules checked black-box, one small input
# per rule, each section named after the spec's heading it checks: the explicit form
# and its example, cost lookup, units, virtual stages, completeness, dependencies,
# memory, time, diagnostics (format, codes, exit statuses), the command line (every
# command, its options and errors), JSON output and the stdlib names. Every check runs
# bin/pipec as a user would and compares what it prints with the number or text the
# rule gives.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case $PIPEC in /*) ;; */*) PIPEC=$PWD/$PIPEC ;; esac
export PIPEC_STDLIB="${PIPEC_STDLIB:-$PWD/stdlib}"

# pipe NAME TEXT: writes $tmp/NAME.pipe
pipe() { printf '%s\n' "$2" >"$tmp/$1.pipe"; }
# run ARGS...: runs pipec in $tmp; stdout to $tmp/out, stderr to $tmp/err, status to $rc
run() { (cd "$tmp" && "$PIPEC" "$@" >"$tmp/out" 2>"$tmp/err"); rc=$?; }
# status NAME WANT ARGS...: the exit status of pipec ARGS is WANT
status() { local n=$1 w=$2; shift 2; run "$@"; if [ "$rc" = "$w" ]; then ok; else bad "$n" "exit $rc, want $w: $(head -c 300 "$tmp/err")"; fi; }
# code NAME CODE ARGS...: pipec ARGS exits 1 with an error[CODE] in the gcc format
code() {
    local n=$1 c=$2; shift 2; run "$@"
    if [ "$rc" = 1 ] && grep -qE "^[^ :]+:[0-9]+:[0-9]+: error\[$c\]: " "$tmp/err"; then ok
    else bad "$n" "exit $rc, want 1 and error[$c]: $(head -c 300 "$tmp/err")"; fi
}
# js EXPR FILE: evaluates the Python expression over d = the JSON in FILE
js() { python3 -c 'import json,sys; d=json.load(open(sys.argv[2])); print(eval(sys.argv[1]))' "$1" "$2" 2>&1; }
# eq NAME GOT WANT
eq() { if [ "$2" = "$3" ]; then ok; else bad "$1" "got '$2', want '$3'"; fi; }
# simj FILE EXPR: EXPR over `pipec sim --json FILE`
simj() { run sim --json "$1"; js "$2" "$tmp/out"; }

# --- Explicit form ---------------------------------------------------------------------
# The spec's example, every part of the core, as written there.
cat >"$tmp/full.pipe" <<'EOF'
pipeline tiny_1f1b {
  stages 4                 # P >= 1 ranks
  microbatches 8           # M >= 1 per iteration
  chunks 1                 # V >= 1 model chunks per rank; optional: interleaved | vshape
  memory 40GiB             # per-stage budget (optional; default: the device's, else unlimited)

  costs {                  # per virtual stage, per micro-batch
    f 1ms  b 2ms  w 0ms  r 1ms
    act 8GiB               # activation bytes kept by F when the micro-batch is not recomputed
    ckpt 512MiB            # bytes kept by F when an R exists for that (stage, micro-batch)
    wact 8GiB              # bytes still held after B until W (only with W ops)
    weights 4GiB           # static bytes per rank: params + grads + optimizer states
    p2p 0ms                # time added to every cross-rank dependency
    host_bw 25GB/s         # swap bandwidth, each direction
    swap_fraction 1.0      # beta: fraction of the kept bytes an SO moves
  }
  costs stage 0 { f 1.2ms }    # per-rank override of any cost
  costs vstage 3 { act 9GiB }  # per-virtual-stage override of f b w r act ckpt wact

  stage 0 { F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7 }
  stage 1 { F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7 }
  stage 2 { F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7 }
  stage 3 { F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 }

  dep 2:F5 -> 1:B3         # extra edge: op B3 on stage 1 waits for F5 on stage 2
}
EOF
status "explicit form: the spec's example checks" 0 check full.pipe
run print full.pipe; cp "$tmp/out" "$tmp/full.p1"
for want in 'costs stage 0 { f 1.2ms }' 'costs vstage 3 { act 9GiB }' 'dep 2:F5 -> 1:B3' \
    'stage 3 { F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 }' 'memory 40GiB' 'host_bw 25GB/s'; do
    check "print: keeps '$want'" grep -qF "$want" "$tmp/full.p1"
done
run print full.p1; check "print is idempotent" cmp -s "$tmp/out" "$tmp/full.p1"
run print -o full.p2 full.pipe
check "print -o OUT writes the same text" cmp -s "$tmp/full.p2" "$tmp/full.p1"
# the override on rank 0 (f 1.2ms) and the vstage 3 act (9 GiB) are seen by sim
eq "cost lookup: costs stage 0 f 1.2ms, 8 F on rank 0" "$(simj full.pipe 'abs(d["per_stage"][0]["busy_ms"] - 25.6) < 1e-9')" True
eq "cost lookup: costs vstage 3 act 9GiB" "$(simj full.pipe 'd["per_stage"][3]["peak_mem_bytes"]')" $((4 * 1024 ** 3 + 9 * 1024 ** 3))
# Layout: comments, `;` and newlines separate only; the same pipeline on one line
pipe oneline 'pipeline tiny_1f1b { stages 4; microbatches 8; chunks 1; memory 40GiB; costs { f 1ms; b 2ms; w 0ms; r 1ms; act 8GiB; ckpt 512MiB; wact 8GiB; weights 4GiB; p2p 0ms; host_bw 25GB/s; swap_fraction 1.0 } costs stage 0 { f 1.2ms } costs vstage 3 { act 9GiB }; stage 0 { F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7 }; stage 1 { F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7 } stage 2 { F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7 } stage 3 { F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 } dep 2:F5 -> 1:B3 }'
run print oneline.pipe; check "layout: one line with ';' prints as the multi-line form" cmp -s "$tmp/out" "$tmp/full.p1"
# template forms: F(i), F(i, c) and a dep side S:F(i), in a template
pipe tmpl 'template t { for s in 0 .. P { stage s { for i in 0 .. M { F(i, 0) } for i in 0 .. M { B(i) } } } }
pipeline x { stages 2 microbatches 2 costs { f 1ms b 2ms } schedule t dep 1:F(1) -> 0:B(0) }'
run print tmpl.pipe
check "template forms: F(i, c) and F(i) expand to the explicit ops" grep -qF 'stage 0 { F0 F1 B0 B1 }' "$tmp/out"
check "template forms: dep S:F(i) prints as dep S:F1" grep -qF 'dep 1:F1 -> 0:B0' "$tmp/out"
# the spec's onef1b template, user-defined: 1F1B's (M+P-1)(f+b)
pipe onef1b 'template onef1b {
  for s in 0 .. P {
    stage s {
      let warm = min(P - s - 1, M)
      for i in 0 .. warm { F(i) }
      for i in 0 .. M - warm { F(i + warm) B(i) }
      for i in M - warm .. M { B(i) }
    }
  }
}
pipeline x { stages 4 microbatches 8 costs { f 1ms b 2ms } schedule onef1b }'
eq "templates: the spec's onef1b, makespan (M+P-1)(f+b)" "$(simj onef1b.pipe 'd["makespan_ms"]')" 33.0
# ranges: a .. b is half-open, a ..= b closed
pipe ranges 'pipeline x { stages 3 microbatches 1 costs { f 1ms b 1ms }
  for s in 0 ..= 2 { stage s { F0 B0 } } }'
status "ranges: 0 ..= 2 covers stages 0, 1 and 2" 0 check ranges.pipe
pipe ranges2 'pipeline x { stages 3 microbatches 1 costs { f 1ms b 1ms }
  for s in 0 .. 2 { stage s { F0 B0 } } }'
code "ranges: 0 .. 2 leaves stage 2 without ops" missing check ranges2.pipe

# --- Cost lookup and Units -------------------------------------------------------------
# vstage over stage over costs over the default
pipe lookup 'pipeline x { stages 2 microbatches 1
  costs { f 1ms b 1ms } costs stage 1 { f 2ms } costs vstage 1 { f 4ms }
  stage 0 { F0 B0 } stage 1 { F0 B0 } }'
eq "cost lookup: costs vstage over costs stage" "$(simj lookup.pipe 'd["per_stage"][1]["busy_ms"]')" 5.0
eq "cost lookup: costs on rank 0" "$(simj lookup.pipe 'd["per_stage"][0]["busy_ms"]')" 2.0
pipe deflt 'pipeline x { stages 1 microbatches 1 costs { act 100 } stage 0 { F0 SO0 SI0 B0 } }'
eq "cost lookup: f, b default to 0; host_bw unlimited makes SO/SI instantaneous" "$(simj deflt.pipe 'd["makespan_ms"]')" 0.0
pipe wdef 'pipeline x { stages 1 microbatches 1 costs { act 100 b 2ms w 1ms } stage 0 { F0 B0 W0 } }'
eq "cost lookup: wact defaults to act (B keeps all 100 B for W)" "$(simj wdef.pipe 'd["per_stage"][0]["peak_mem_bytes"]')" 100
code "costs vstage: a per-rank field is a value error" value check "$(pipe pr 'pipeline x { stages 1 microbatches 1 costs vstage 0 { p2p 1ms } stage 0 { F0 B0 } }'; echo pr.pipe)"
# units
pipe units 'pipeline x { stages 1 microbatches 1 costs { f 500us b 0.002s act 1KiB weights 1KB } stage 0 { F0 B0 } }'
eq "units: 500us + 0.002s = 2.5 ms" "$(simj units.pipe 'd["makespan_ms"]')" 2.5
eq "units: KiB is 1024 B, KB 1000 B" "$(simj units.pipe 'd["per_stage"][0]["peak_mem_bytes"]')" 2024
pipe bare 'pipeline x { stages 1 microbatches 1 costs { f 3 b 1 act 7 } stage 0 { F0 B0 } }'
eq "units: a bare time is ms" "$(simj bare.pipe 'd["makespan_ms"]')" 4.0
eq "units: a bare size is bytes" "$(simj bare.pipe 'd["per_stage"][0]["peak_mem_bytes"]')" 7
pipe bw 'pipeline x { stages 1 microbatches 1 costs { act 1MB host_bw 1GB/s } stage 0 { F0 SO0 SI0 B0 } }'
eq "units: SO and SI take bytes / host_bw (1 MB at 1 GB/s: 1 ms each)" "$(simj bw.pipe 'd["makespan_ms"]')" 2.0
pipe bw2 'pipeline x { stages 1 microbatches 1 costs { act 1MiB host_bw 1TiB/s } stage 0 { F0 SO0 SI0 B0 } }'
eq "units: TiB/s bandwidth" "$(simj bw2.pipe 'd["makespan_ms"]')" "$(python3 -c 'print(repr(2 * 2**20 / 2**40 * 1000))')"
for bad_cost in 'f -1ms' 'f 1GiB' 'act 2ms' 'host_bw 0' 'swap_fraction 1.5' 'f 1xs'; do
    pipe bc "pipeline x { stages 1 microbatches 1 costs { $bad_cost } stage 0 { F0 B0 } }"
    code "units: '$bad_cost' is a value error" value check bc.pipe
done
pipe wb 'pipeline x { stages 1 microbatches 1 costs { b 1ms w 2ms } stage 0 { F0 B0 W0 } }'
code "time: w > b is a value error" value check wb.pipe

# --- Virtual stages --------------------------------------------------------------------
# P = 2, V = 2, f = b = 1 ms, p2p 1 ms: interleaved crosses ranks 3 times each way
# (vs 0 1 2 3 on ranks 0 1 0 1), vshape twice (ranks 0 1 1 0)
pipe il 'pipeline x { stages 2 microbatches 1 chunks 2 costs { f 1ms b 1ms p2p 1ms }
  stage 0 { F0 F0.1 B0.1 B0 } stage 1 { F0 F0.1 B0.1 B0 } }'
pipe vs 'pipeline x { stages 2 microbatches 1 chunks 2 vshape costs { f 1ms b 1ms p2p 1ms }
  stage 0 { F0 F0.1 B0.1 B0 } stage 1 { F0 F0.1 B0.1 B0 } }'
pipe il2 'pipeline x { stages 2 microbatches 1 chunks 2 interleaved costs { f 1ms b 1ms p2p 1ms }
  stage 0 { F0 F0.1 B0.1 B0 } stage 1 { F0 F0.1 B0.1 B0 } }'
eq "virtual stages: interleaved is the default placement, vs(s,c) = cP + s" "$(simj il.pipe 'd["makespan_ms"]')" 14.0
eq "virtual stages: chunks V interleaved" "$(simj il2.pipe 'd["makespan_ms"]')" 14.0
eq "virtual stages: vshape, odd chunks cP + (P-1-s)" "$(simj vs.pipe 'd["makespan_ms"]')" 12.0
pipe ch 'pipeline x { stages 1 microbatches 1 stage 0 { F0 B0 F0.1 } }'
code "ops: a chunk >= V is a value error" value check ch.pipe
pipe mbr 'pipeline x { stages 1 microbatches 1 stage 0 { F0 B0 F1 } }'
code "ops: a micro-batch >= M is a value error" value check mbr.pipe

# --- Completeness ----------------------------------------------------------------------
pipe miss 'pipeline x { stages 2 microbatches 2 stage 0 { F0 F1 B0 B1 } stage 1 { F0 B0 F1 } }'
code "completeness: a missing B" missing check miss.pipe
pipe dup 'pipeline x { stages 1 microbatches 1 stage 0 { F0 B0 F0 } }'
code "completeness: a second F" duplicate check dup.pipe
pipe dupw 'pipeline x { stages 1 microbatches 1 stage 0 { F0 B0 W0 W0 } }'
code "completeness: a second W" duplicate check dupw.pipe
pipe dupr 'pipeline x { stages 1 microbatches 1 stage 0 { F0 R0 R0 B0 } }'
code "completeness: a second R" duplicate check dupr.pipe
pipe sonly 'pipeline x { stages 1 microbatches 1 stage 0 { F0 SO0 B0 } }'
code "completeness: an SO without its SI" missing check sonly.pipe
pipe split 'pipeline x { stages 1 microbatches 2 costs { f 1ms b 2ms w 1ms } stage 0 { F0 F1 B0 B1 W1 } }'
status "completeness: W on some micro-batches and not others" 0 check split.pipe

# --- Dependencies ----------------------------------------------------------------------
one() { pipe one "pipeline x { stages 1 microbatches 1 costs { act 100 ckpt 10 } stage 0 { $1 } }"; }
one 'B0 F0'; code "order: B before its F" order check one.pipe
one 'F0 B0 R0'; code "order: R after its B" order check one.pipe
one 'F0 SI0 SO0 B0'; code "order: SI before its SO" order check one.pipe
one 'W0 F0 B0'; code "order: W before its B" order check one.pipe
one 'R0 F0 B0'; code "order: R before its F" order check one.pipe
one 'SO0 F0 SI0 B0'; code "order: SO before its F" order check one.pipe
one 'F0 R0 SO0 SI0 B0'; code "order: R before the SI it waits for" order check one.pipe
one 'F0 SO0 B0 SI0'; code "order: B before the SI it waits for" order check one.pipe
one 'F0 SO0 SI0 R0 B0'; status "dependencies: F SO SI R B is legal" 0 check one.pipe
pipe vv 'pipeline x { stages 1 microbatches 1 chunks 2 stage 0 { F0.1 F0 B0.1 B0 } }'
code "order: F(v,m) before F(v-1,m) on one rank" order check vv.pipe
pipe vv 'pipeline x { stages 1 microbatches 1 chunks 2 stage 0 { F0 F0.1 B0 B0.1 } }'
code "order: B(v,m) before B(v+1,m) on one rank" order check vv.pipe
pipe vv 'pipeline x { stages 1 microbatches 1 chunks 2 stage 0 { F0 F0.1 B0.1 B0 } }'
status "dependencies: F0 F0.1 B0.1 B0 on one rank is legal" 0 check vv.pipe
pipe dl 'pipeline x { stages 2 microbatches 2 stage 0 { F0 B0 F1 B1 } stage 1 { F1 B1 F0 B0 } }'
code "deadlock: a cross-rank cycle" deadlock check dl.pipe
check "deadlock: the message walks the cycle" grep -q 'waits for stage 1 .*which waits for stage 0' "$tmp/err"
B2='stage 0 { F0 F1 B0 B1 } stage 1 { F0 B0 F1 B1 }'
pipe dep1 "pipeline x { stages 2 microbatches 2 $B2 dep 1:B1 -> 0:F1 }"
code "dep: an extra edge closing a cycle is a deadlock" deadlock check dep1.pipe
pipe dep2 "pipeline x { stages 2 microbatches 2 $B2 dep 1:F1 -> 1:F0 }"
code "dep: a same-rank edge pointing backwards is order" order check dep2.pipe
pipe dep3 "pipeline x { stages 2 microbatches 2 $B2 dep 0:W0 -> 1:F1 }"
code "dep: an endpoint its rank does not hold is placement" placement check dep3.pipe
# a dep adds a wait: F1 on rank 1 waits for B0 on rank 0 (f = 1, b = 2)
pipe dep4 "pipeline x { stages 2 microbatches 2 costs { f 1ms b 2ms } $B2 dep 0:B0 -> 1:F1 }"
pipe dep5 "pipeline x { stages 2 microbatches 2 costs { f 1ms b 2ms } $B2 }"
eq "dep: without the edge" "$(simj dep5.pipe 'd["makespan_ms"]')" 9.0
eq "dep: F1 on rank 1 waits for B0 on rank 0" "$(simj dep4.pipe 'd["makespan_ms"]')" 11.0

# --- Memory ----------------------------------------------------------------------------
mem() { pipe mem "pipeline x { stages 1 microbatches ${3:-1} costs { $1 } stage 0 { $2 } }"; simj mem.pipe 'd["per_stage"][0]["peak_mem_bytes"]'; }
eq "memory: weights + F's act" "$(mem 'act 100 weights 5' 'F0 B0')" 105
eq "memory: F keeps ckpt when an R exists, R adds act - ckpt" "$(mem 'act 100 ckpt 10' 'F0 F1 R0 B0 R1 B1' 2)" 110
eq "memory: B frees all but wact until W" "$(mem 'act 100 wact 30' 'F0 F1 B0 B1 W0 W1' 2)" 200
eq "memory: B then W then the next F" "$(mem 'act 100 wact 30' 'F0 B0 F1 B1 W0 W1' 2)" 130
eq "memory: W frees what B kept" "$(mem 'act 100 wact 30' 'F0 B0 W0 F1 B1 W1' 2)" 100
eq "memory: SO frees swap_fraction of what is held" "$(mem 'act 100 swap_fraction 0.5' 'F0 SO0 F1 SI0 B0 B1' 2)" 200
eq "memory: a full SO frees it all before the next F" "$(mem 'act 100' 'F0 SO0 F1 B1 SI0 B0' 2)" 100
eq "memory: SI brings back what SO moved" "$(mem 'act 100' 'F0 SO0 F1 SI0 B1 B0' 2)" 200
eq "memory: SO of a checkpoint moves ckpt, R adds act - ckpt after SI" "$(mem 'act 100 ckpt 10' 'F0 SO0 F1 B1 SI0 R0 B0' 2)" 100
# a peak equal to the budget passes, one byte less fails; also for sizes that are not
# multiples of the runtime's alignment
for sz in 8GiB:8589934592 100:100 1000:1000 1KB:1000 37:37; do
    a=${sz%%:*} n=${sz#*:}
    pipe bud "pipeline x { stages 1 microbatches 1 memory $n costs { act $a } stage 0 { F0 B0 } }"
    status "memory: peak $a equal to the budget passes" 0 check bud.pipe
    pipe bud "pipeline x { stages 1 microbatches 1 memory $((n - 1)) costs { act $a } stage 0 { F0 B0 } }"
    code "memory: budget one byte below the peak $a" memory check bud.pipe
done
pipe bud2 'pipeline x { stages 1 microbatches 3 memory 301 costs { act 100 weights 1 } stage 0 { F0 F1 F2 B0 B1 B2 } }'
status "memory: weights + 3 x 100 B in a budget of 301 B" 0 check bud2.pipe
pipe bud3 'pipeline x { stages 1 microbatches 3 memory 300 costs { act 100 weights 1 } stage 0 { F0 F1 F2 B0 B1 B2 } }'
code "memory: weights + 3 x 100 B over a budget of 300 B" memory check bud3.pipe
check "memory: the error says at which op" grep -qE 'error\[memory\]: .*F2' "$tmp/err"

# --- Time ------------------------------------------------------------------------------
pipe tw 'pipeline x { stages 1 microbatches 2 costs { f 1ms b 3ms w 1ms } stage 0 { F0 F1 B0 B1 W0 } }'
eq "time: B takes b - w with its W, b without" "$(simj tw.pipe 'd["makespan_ms"]')" 8.0
pipe tp 'pipeline x { stages 2 microbatches 1 costs { f 1ms b 2ms p2p 0.5ms } costs stage 1 { p2p 0.25ms }
  stage 0 { F0 B0 } stage 1 { F0 B0 } }'
eq "time: p2p of the waiting rank on each cross-rank wait" "$(simj tp.pipe 'd["makespan_ms"]')" 6.75
eq "time: forward bubble from the first F to the first B" "$(simj tp.pipe 'd["per_stage"][0]["fwd_bubble_ms"]')" 3.75
eq "time: bubble ratio = sum of idle / (P x makespan)" "$(simj tp.pipe 'd["bubble_ratio"]')" "$(python3 -c 'print(repr(7.5 / 13.5))')"
pipe tp2 'pipeline x { stages 2 microbatches 1 costs { f 1ms b 2ms p2p 0.5ms } costs stage 1 { p2p 0.25ms }
  stage 0 { F0 B0 } stage 1 { F0 B0 } dep 0:F0 -> 1:B0 }'
eq "time: a dep edge across ranks adds p2p too" "$(simj tp2.pipe 'd["makespan_ms"]')" 6.75
# SO on its own stream, overlapping compute; the F listed after the SO waits for its end
pipe ts 'pipeline x { stages 1 microbatches 2 costs { f 1ms b 1ms act 1MB host_bw 1GB/s }
  stage 0 { F0 SO0 F1 SI0 B1 B0 } }'
eq "time: an allocating F waits for a listed-earlier SO (list order is memory order)" "$(simj ts.pipe 'd["makespan_ms"]')" 5.0
pipe ts2 'pipeline x { stages 1 microbatches 2 costs { f 1ms b 1ms act 1MB host_bw 1GB/s }
  stage 0 { F0 F1 SO0 B1 SI0 B0 } }'
eq "time: an SI waits for the B listed before it (its memory)" "$(simj ts2.pipe 'd["makespan_ms"]')" 5.0
pipe tr 'pipeline x { stages 1 microbatches 1 costs { f 1ms b 2ms r 1.5ms } stage 0 { F0 R0 B0 } }'
eq "time: R takes r and counts as busy" "$(simj tr.pipe 'd["per_stage"][0]["busy_ms"]')" 4.5
# an R of the explicit form waits only for its F: rank 0's R0 runs while rank 1 works;
# bound to B(v+1,m) by a dep line, it waits for rank 1's B0
pipe rfree 'pipeline x { stages 2 microbatches 1 costs { f 1ms b 1ms r 1ms } stage 0 { F0 R0 B0 } stage 1 { F0 B0 } }'
eq "dependencies: an explicit R is not bound to the gradient" "$(simj rfree.pipe 'd["makespan_ms"]')" 4.0
pipe rbound 'pipeline x { stages 2 microbatches 1 costs { f 1ms b 1ms r 1ms } stage 0 { F0 R0 B0 } stage 1 { F0 B0 } dep 1:B0 -> 0:R0 }'
eq "dependencies: R bound by dep B(v+1,m) -> R(v,m)" "$(simj rbound.pipe 'd["makespan_ms"]')" 5.0
# GPipe: all idle is forward bubble 3(P-s-1)f; 1F1B: 2(P-s-1)f and (P-s-1)f
pipe gp 'import "std/schedules.pipe"
pipeline x { stages 4 microbatches 8 costs { f 1ms b 2ms } schedule gpipe }'
eq "time: GPipe rank 0 forward bubble 3(P-1)f" "$(simj gp.pipe 'd["per_stage"][0]["fwd_bubble_ms"]')" 9.0
eq "time: GPipe rank 0 backward bubble 0" "$(simj gp.pipe 'd["per_stage"][0]["bwd_bubble_ms"]')" 0.0

# --- Diagnostics -----------------------------------------------------------------------
pipe syn 'pipeline x { stages 1 microbatches 1 stage 0 { F0 B0 }'
code "diagnostics: syntax" syntax check syn.pipe
check "diagnostics: the source line and a caret follow" \
    python3 -c 'import re,sys; l=open(sys.argv[1]).read().split("\n"); i=[k for k,x in enumerate(l) if "error[syntax]" in x][0]; assert l[i+2].strip() == "^", l' "$tmp/err"
pipe badop 'pipeline x { stages 1 microbatches 1 stage 0 { F0 B0 X0 } }'
code "diagnostics: an unknown op kind is syntax" syntax check badop.pipe
check "diagnostics: ... located at the op" grep -qE '^badop\.pipe:1:54: error\[syntax\]' "$tmp/err"
pipe nm 'pipeline x { stages 1 microbatches 1 schedule nosuch }'
code "diagnostics: name (unknown template)" name check nm.pipe
pipe nm2 'import "std/nosuch.pipe"
pipeline x { stages 1 microbatches 1 stage 0 { F0 B0 } }'
code "diagnostics: name (unknown import)" name check nm2.pipe
pipe nm3 'import "std/models.pipe"
pipeline x { stages 1 microbatches 1 model nosuch stage 0 { F0 B0 } }'
code "diagnostics: name (unknown model)" name check nm3.pipe
pipe nm4 'import "std/devices.pipe"
pipeline x { stages 1 microbatches 1 device nosuch stage 0 { F0 B0 } }'
code "diagnostics: name (unknown device)" name check nm4.pipe
pipe nm5 'pipeline x { stages 1 microbatches 1 stage 0 { F0 B0 } apply nosuch }'
code "diagnostics: name (unknown pass)" name check nm5.pipe
pipe v0 'pipeline x { stages 0 microbatches 1 }'
code "diagnostics: value (P < 1)" value check v0.pipe
pipe m0 'pipeline x { stages 1 microbatches 0 }'
code "diagnostics: value (M < 1)" value check m0.pipe
pipe lim 'pipeline x { stages 100000 microbatches 1 }'
code "diagnostics: limit (P beyond the IR)" limit check lim.pipe
pipe warn 'pipeline x { stages 1 microbatches 3 costs { f 1ms b 2ms w 1ms } stage 0 { F0 F1 F2 B0 W0 B1 W1 B2 } }'
run check warn.pipe
eq "diagnostics: a warning leaves the exit status 0" "$rc" 0
check "diagnostics: warning[CODE] in the same format" grep -qE '^warn\.pipe:1:[0-9]+: warning\[[a-z]+\]: ' "$tmp/err"
code "diagnostics: -Werror makes it an error" '[a-z]+' check -Werror warn.pipe
run check -Werror full.pipe
eq "diagnostics: -Werror on a file without warnings" "$rc" 0
run check nm.pipe
check "diagnostics: FILE:LINE:COL, 1-based, at the name" grep -qE '^nm\.pipe:1:47: error\[name\]' "$tmp/err"
run check full.pipe syn.pipe
eq "check FILE...: 1 when any file has errors" "$rc" 1
check "check FILE...: the good file is still reported" grep -q '^full.pipe: ok' "$tmp/out"

# --- Command line ----------------------------------------------------------------------
status "usage: no command" 2
status "usage: an unknown command" 2 frobnicate full.pipe
status "usage: check without a file" 2 check
status "usage: an unknown option" 2 check --no-such-option full.pipe
status "usage: print of two files" 2 print full.pipe full.pipe
status "usage: opt without --pass" 2 opt full.pipe
status "usage: emit without -o" 2 emit full.pipe
status "usage: diff of one file" 2 diff full.pipe
status "usage: emit --backend other" 2 emit full.pipe -o e0 --backend tpu
status "--version" 0 --version
status "--help" 0 --help
for c in check print sim opt diff emit compile build run import-csv export-csv tune compare; do
    status "$c --help" 0 "$c" --help
    status "help $c" 0 help "$c"
done
pipe ex 'pipeline tiny_1f1b { stages 4 microbatches 8 chunks 1 memory 40GiB
  costs { f 1ms b 2ms w 0ms r 1ms act 8GiB ckpt 512MiB wact 8GiB weights 4GiB p2p 0ms host_bw 25GB/s swap_fraction 1.0 }
  stage 0 { F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7 }
  stage 1 { F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7 }
  stage 2 { F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7 }
  stage 3 { F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 } }'
# sim: --trace is a Chrome trace, --svg an SVG, --gantt a text timeline
status "sim --trace --svg" 0 sim ex.pipe --trace t.json --svg t.svg
eq "sim --trace: a Chrome trace with traceEvents" "$(js '"traceEvents" in d and len(d["traceEvents"]) > 0' "$tmp/t.json")" True
check "sim --svg: an SVG" grep -q '<svg' "$tmp/t.svg"
status "sim --gantt" 0 sim ex.pipe --gantt
check "sim: the summary names the makespan" grep -q 'makespan .*33' "$tmp/out"
# opt --pass a,b(k=v) -o OUT
status "opt --pass with arguments" 0 opt ex.pipe --pass 'recompute(stages=0..=1,policy=full)' -o opt.pipe
check "opt: the R ops are in the output" grep -q 'R0' "$tmp/opt.pipe"
check "opt: recompute binds R(v,m) to B(v+1,m) by dep lines" grep -qF 'dep 1:B0 -> 0:R0' "$tmp/opt.pipe"
status "opt: its output checks" 0 check opt.pipe
status "opt: an unknown pass is a name error" 1 opt ex.pipe --pass nosuch
check "opt: ... with error[name]" grep -q 'error\[name\]' "$tmp/err"
status "opt --list" 0 opt --list
# diff exits as diff(1)
run print ex.pipe -o ex.p1
status "diff: the same schedule" 0 diff ex.pipe ex.p1
status "diff: different schedules" 1 diff ex.pipe opt.pipe
status "diff: an error" 2 diff ex.pipe no-such-file.pipe
status "diff --json" 1 diff --json ex.pipe opt.pipe
eq "diff --json: a, b, shape_differs, stages_differ, differ" \
    "$(js 'list(d)[:5] == ["a", "b", "shape_differs", "stages_differ", "differ"] and d["a"]["makespan_ms"] == 33.0' "$tmp/out")" True
# emit, compile and its alias build
status "emit -o DIR" 0 emit ex.pipe -o em
for f in rank_0.c rank_1.c rank_2.c rank_3.c Makefile; do check "emit: writes $f" test -s "$tmp/em/$f"; done
status "emit --backend cuda" 0 emit ex.pipe -o emc --backend cuda
check "emit --backend cuda: per-rank sources" test -s "$tmp/emc/rank_3.c"
if [ -f build/libpiperun.a ]; then
    status "compile -o DIR" 0 compile ex.pipe -o co1
    status "build (alias of compile)" 0 build ex.pipe -o co2
    eq "build: the same files as compile" "$(cd "$tmp/co1" && ls | sort | tr '\n' ' ')" "$(cd "$tmp/co2" && ls | sort | tr '\n' ' ')"
else
    skip "compile and build" "no build/libpiperun.a (run make)"
fi
# csv interop
status "export-csv" 0 export-csv ex.pipe -o ex.csv
check "export-csv: one row per rank" test "$(wc -l <"$tmp/ex.csv")" = 4
check "export-csv: PyTorch action names" grep -q '^0F0,0F1,0F2,0F3,0B0' "$tmp/ex.csv"
status "import-csv" 0 import-csv ex.csv -o back.pipe
run diff ex.pipe back.pipe --metrics; eq "csv round trip keeps the op orders" "$(grep -c 'op order' "$tmp/out"; true)" 0
status "import-csv to standard output" 0 import-csv ex.csv
check "import-csv: a pipeline" grep -q '^pipeline ' "$tmp/out"
# standard input and output
run sim --json - <"$tmp/ex.pipe" 2>/dev/null
(cd "$tmp" && "$PIPEC" sim --json - <ex.pipe >stdin.json 2>/dev/null); rc=$?
eq "FILE - is standard input" "$rc:$(js 'd["makespan_ms"]' "$tmp/stdin.json")" 0:33.0
# --set KEY=VALUE on check, sim, print, tune, compare
pipe one1 'pipeline x { stages 1 microbatches 1 costs { act 100 } stage 0 { F0 B0 } }'
status "--set: check" 1 check --set memory=50 one1.pipe
check "--set: check reads memory 50" grep -q 'error\[memory\]' "$tmp/err"
run sim --json --set memory=1KiB one1.pipe; eq "--set: sim" "$(js 'd["per_stage"][0]["budget_bytes"]' "$tmp/out")" 1024
run print --set microbatches=1 --set memory=2KiB one1.pipe; check "--set: print" grep -q 'memory 2KiB' "$tmp/out"
status "--set: tune" 0 tune --set memory=1KiB --json one1.pipe
run compare --set memory=50,1KiB --format csv one1.pipe
eq "--set: compare sweeps the values, one row each" "$(tail -n +2 "$tmp/out" | wc -l)" 2
eq "compare: a point over its budget is a row that does not fit, exit 0" "$rc:$(cut -d, -f15 "$tmp/out" | tail -n +2 | tr '\n' ' ')" "0:no yes "
run compare --set microbatches=0,1 --format csv one1.pipe
eq "compare: exit 1 when a row failed, the table printed whole" "$rc:$(tail -n +2 "$tmp/out" | wc -l)" 1:2

# --- JSON output -----------------------------------------------------------------------
run sim --json ex.pipe
want='{"pipeline": "tiny_1f1b", "stages": 4, "microbatches": 8, "chunks": 1, "makespan_ms": 33.0, "bubble_ratio": 0.2727272727272727, "per_stage": [{"stage": 0, "busy_ms": 24.0, "idle_ms": 9.0, "fwd_bubble_ms": 6.0, "bwd_bubble_ms": 3.0, "peak_mem_bytes": 38654705664, "budget_bytes": 42949672960, "static_mem_bytes": 4294967296, "peak_act_bytes": 34359738368}, '
eq "sim --json: the spec's example, byte for byte" "$(head -c ${#want} "$tmp/out")" "$want"
eq "sim --json: one line" "$(wc -l <"$tmp/out")" 1
eq "sim --json: keys in order" "$(js 'list(d)' "$tmp/out")" \
    "['pipeline', 'stages', 'microbatches', 'chunks', 'makespan_ms', 'bubble_ratio', 'per_stage', 'lower_bound_ms', 'overhead_ratio', 'tokens_per_s', 'mfu']"
eq "sim --json: per_stage keys in order" "$(js 'list(d["per_stage"][1])' "$tmp/out")" \
    "['stage', 'busy_ms', 'idle_ms', 'fwd_bubble_ms', 'bwd_bubble_ms', 'peak_mem_bytes', 'budget_bytes', 'static_mem_bytes', 'peak_act_bytes']"
eq "sim --json: peak_act_bytes = peak - static on every rank" \
    "$(js 'all(s["peak_act_bytes"] == s["peak_mem_bytes"] - s["static_mem_bytes"] for s in d["per_stage"])' "$tmp/out")" True
run sim --json one1.pipe
eq "sim --json: budget_bytes null without a budget" "$(js 'd["per_stage"][0]["budget_bytes"]' "$tmp/out")" None
pipe third 'pipeline x { stages 1 microbatches 1 costs { f 1ms b 0.3333333333333333ms } stage 0 { F0 B0 } }'
run sim --json third.pipe
check "sim --json: full precision (shortest round trip)" grep -qF '"makespan_ms": 1.3333333333333333' "$tmp/out"
run tune --json ex.pipe
eq "tune --json: top-level keys, fixed ones first" "$(js 'list(d)[:3]' "$tmp/out")" "['variants', 'searched', 'skipped']"
eq "tune --json: row keys, fixed ones first" "$(js 'list(d["variants"][0])[:5]' "$tmp/out")" \
    "['name', 'source', 'makespan_ms', 'fits', 'peak_mem_bytes']"
eq "tune --json: types" "$(js 'all(r["source"] in ("stdlib", "file") and r["fits"] is True and len(r["peak_mem_bytes"]) == 4 for r in d["variants"]) and isinstance(d["searched"], int) and all(isinstance(s, str) for s in d["skipped"])' "$tmp/out")" True
pipe small 'pipeline s { stages 2 microbatches 2 costs { f 1ms b 2ms } stage 0 { F0 F1 B0 B1 } stage 1 { F0 B0 F1 B1 } }'
run tune --exact --time-limit 10 --json small.pipe
eq "tune --exact --json: keys" "$(js 'list(d)' "$tmp/out")" "['status', 'makespan_ms', 'lower_bound_ms', 'gap']"
eq "tune --exact: the optimum of 1F1B on 2 x 2" "$(js 'd["makespan_ms"]' "$tmp/out")" 9.0
run tune --csv ex.pipe
check "tune --csv: a header row" grep -q '^rank,name,source,makespan_ms,fits' "$tmp/out"
run compare ex.pipe --format csv
eq "compare --format csv: the header" "$(head -n 1 "$tmp/out")" \
    'file,set,name,stages,microbatches,chunks,schedule,makespan_ms,lower_bound_ms,above_lower_bound,bubble_ratio,overhead_ratio,peak_mem_bytes,peak_mem_bytes_per_stage,fits,tokens_per_s,mfu,status'
run compare ex.pipe --format json
eq "compare --format json: an array of rows with the CSV's keys" "$(js 'isinstance(d, list) and d[0]["makespan_ms"] == 33.0 and "bubble_ratio" in d[0]' "$tmp/out")" True
for fmt in text md latex; do status "compare --format $fmt" 0 compare ex.pipe --format $fmt; done

# --- Stdlib names ----------------------------------------------------------------------
# every schedule name resolves (a shape it does not take is a value error, never name)
for s in gpipe onef1b interleaved zbh1 eager1f1b tpipe zbh2 zbv dualpipev interleaved_zb looped_bfs vhalf vmin; do
    pipe sn "import \"std/schedules.pipe\"
import \"std/tpipe.pipe\"
pipeline x { stages 2 microbatches 4 chunks 1 costs { f 1ms b 2ms } schedule $s }"
    run check sn.pipe
    if grep -q 'error\[name\]' "$tmp/err"; then bad "stdlib: schedule $s resolves" "$(head -n 1 "$tmp/err")"; else ok; fi
done
for s in gpipe:1: onef1b:1: interleaved:2: zbh1:1: eager1f1b:1: tpipe:2: zbh2:1: zbv:2:vshape dualpipev:2:vshape interleaved_zb:2: looped_bfs:2: vhalf:2:vshape vmin:2:vshape; do
    IFS=: read -r n v pl <<<"$s"
    pipe sn "import \"std/schedules.pipe\"
import \"std/tpipe.pipe\"
pipeline x { stages 4 microbatches 8 chunks $v $pl costs { f 1ms b 2ms w 0.5ms } schedule $n }"
    status "stdlib: schedule $n on 4 stages, 8 micro-batches, chunks $v $pl" 0 check sn.pipe
done
# a V-shape template gives its placement to a pipeline that writes none
for s in zbv dualpipev vhalf vmin; do
    for c in 'chunks 2 vshape' 'chunks 2' ''; do
        pipe vt "import \"std/schedules.pipe\"
pipeline x { stages 4 microbatches 8 $c costs { f 1ms b 2ms w 0.5ms } schedule $s }"
        run sim --json vt.pipe; cp "$tmp/out" "$tmp/vt.$(echo "$c" | tr -d ' ').json"
    done
    check "stdlib: $s under 'chunks 2' is $s under 'chunks 2 vshape'" cmp -s "$tmp/vt.chunks2vshape.json" "$tmp/vt.chunks2.json"
    check "stdlib: $s without a chunks line is $s under 'chunks 2 vshape'" cmp -s "$tmp/vt.chunks2vshape.json" "$tmp/vt..json"
    run print vt.pipe
    check "stdlib: print of $s without a chunks line writes chunks 2 vshape" grep -qx '  chunks 2 vshape' "$tmp/out"
    pipe vt "import \"std/schedules.pipe\"
pipeline x { stages 4 microbatches 8 chunks 2 interleaved costs { f 1ms b 2ms w 0.5ms } schedule $s }"
    code "stdlib: $s under a written interleaved placement" value check vt.pipe
done
pipe tpd 'import "std/schedules.pipe"
pipeline x { stages 4 microbatches 8 costs { f 1ms b 2ms } schedule tpipe }'
run print tpd.pipe
check "stdlib: tpipe without a chunks line has its two chunks" grep -qx '  chunks 2' "$tmp/out"
pipe tpd 'import "std/schedules.pipe"
pipeline x { stages 4 microbatches 8 chunks 2 vshape costs { f 1ms b 2ms } schedule tpipe }'
code "stdlib: tpipe under vshape is refused by its require" value check tpd.pipe
for m in llama2_7b llama2_13b llama2_18b llama2_23b llama2_28b llama2_70b gpt3_13b gpt3_18b gpt3_23b gpt3_28b gpt_1_3b gpt_4_7b gpt_7b gpt_13b gpt_23b tiny mixtral_8x7b; do
    pipe mn "import \"std/models.pipe\"
import \"std/schedules.pipe\"
pipeline x { stages 4 microbatches 4 model $m schedule onef1b }"
    run print mn.pipe
    if [ "$rc" = 0 ] && grep -q '^  costs vstage 0 { .*act ' "$tmp/out"; then ok; else bad "stdlib: model $m derives costs" "$(head -n 2 "$tmp/err")"; fi
done
for dv in a100_sxm_80g a100_sxm_40g a100_pcie_40g a800_pcie_80g h100_sxm_80g h200 cpu; do
    pipe dn "import \"std/models.pipe\"
import \"std/devices.pipe\"
import \"std/schedules.pipe\"
pipeline x { stages 4 microbatches 4 model tiny device $dv schedule onef1b }"
    run sim --json dn.pipe
    if [ "$rc" = 0 ] && [ "$(js 'd["per_stage"][0]["budget_bytes"] > 0' "$tmp/out")" = True ]; then ok
    else bad "stdlib: device $dv sets the default budget" "$(head -n 2 "$tmp/err")"; fi
done
run opt --list
for ps in recompute identify_adjusted forward_migration dependency_relaxation migration_refinement swap \
    swap_aware_recompute partition_adjust obscura trecomp_blockwise toffload recompute_in_stalls \
    partition_balance lynx_overlap lynx; do
    check "stdlib: pass $ps listed" grep -qE "^  $ps " "$tmp/out"
done
# the settings the spec names, and recompute's policies
for pol in none full selective cmb mlp; do
    pipe rp "import \"std/models.pipe\"
import \"std/schedules.pipe\"
pipeline x { stages 4 microbatches 8 model tiny partition even tensor_parallel 1 schedule onef1b recompute stages 0..=1 policy $pol }"
    status "settings: recompute policy $pol" 0 check rp.pipe
done
pipe st 'import "std/models.pipe"
import "std/devices.pipe"
import "std/schedules.pipe"
pipeline x { stages 2 microbatches 4 model tiny { layers 4 } device cpu partition [3, 1]
  data_parallel 2 zero 1 grad_dtype fp32 schedule onef1b apply forward_migration(stages=0..=0) }'
status "settings: model block, partition list, data_parallel, zero, grad_dtype, apply" 0 check st.pipe

finish
