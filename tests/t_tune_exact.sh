#!/usr/bin/env bash
# t_tune_exact.sh - `pipec tune --exact` (docs/tune.md "Exact search"): it proves
# optimality on 4 stages x 6 micro-batches with split backward, its -o order passes check
# and simulates to the makespan it reports, a tight budget gives the hand-derived serial
# order or "infeasible", a short --time-limit stops with a gap, and on random small cases
# its bound <= its optimum <= the makespan of every stdlib template that fits, and on
# uniform costs it finds 1F1B's makespan from GPipe's ops. With swaps (SO/SI) and
# model-state offload (OG/LW): hand-derived optima and the swap pass's plans; what it
# does not model (RO, a shared host link) is refused with a located error.
cd "$(dirname "$0")/.."
. tests/lib.sh
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# field JSON KEY: one key of a JSON object on standard input
field() { python3 -c 'import json,sys; v=json.load(sys.stdin)[sys.argv[1]]; print("null" if v is None else v)' "$1" 2>/dev/null || echo error; }
makespan() { "$PIPEC" sim --json "$1" 2>/dev/null | field makespan_ms; }
expect() { if python3 -c "import sys; sys.exit(0 if ($2) else 1)"; then ok; else bad "$1" "$2"; fi; }

# The help names the option and the Debian package that provides the solver.
help=$("$PIPEC" help tune 2>&1)
case "$help" in *--exact*--time-limit*coinor-libcbc-dev*) ok ;; *) bad "help names --exact, --time-limit and the package" ;; esac

"$PIPEC" tune --exact examples/tiny_1f1b.pipe >"$tmp/o" 2>"$tmp/e"
rc=$?
if grep -q "built without" "$tmp/e"; then
    # A pipec built without CBC (make NO_CBC=1) says what to install, with exit 2.
    check "without the solver: exit 2" test "$rc" = 2
    check "without the solver: names the package" grep -q "coinor-libcbc-dev" "$tmp/e"
    skip "exact search" "pipec was built without COIN-OR CBC"
    finish
    exit $?
fi

# mk NAME STAGES MBS MEMORY F P2P SCHEDULE: zbh1-style costs, b 2ms with w 1ms split off.
mk() {
    cat >"$tmp/$1.pipe" <<EOF
import "std/schedules.pipe"
pipeline $1 {
  stages $2
  microbatches $3
  chunks 1
  memory $4
  costs {
    f $5  b 2ms  w 1ms
    act 1GiB
    wact 512MiB
    weights 4GiB
    p2p $6
  }
  schedule $7
}
EOF
}

# exact NAME [ARGS]: runs --exact --json and -o; sets st, ms, lb, gap.
exact() {
    local t0=$SECONDS
    local n=$1; shift
    "$PIPEC" tune --exact "$tmp/$n.pipe" --json -o "$tmp/$n.out.pipe" "$@" >"$tmp/$n.json" 2>"$tmp/$n.err"
    read -r st ms lb gap < <(python3 -c 'import json,sys
try: d = json.load(open(sys.argv[1]))
except Exception: d = {}
print(*("null" if d.get(k) is None else d[k] for k in ("status", "makespan_ms", "lower_bound_ms", "gap")))' "$tmp/$n.json")
    [ -n "$T_TIMES" ] && echo "time $n $((SECONDS - t0)) s $st" >&2
}
# same_order NAME: the -o output passes check and sim gives the reported makespan.
same_order() {
    if "$PIPEC" check "$tmp/$1.out.pipe" >/dev/null 2>&1; then ok; else bad "$1: -o passes check"; fi
    expect "$1: sim of -o = reported makespan" "abs($(makespan "$tmp/$1.out.pipe") - $ms) <= 1e-6 * $ms"
}

# 4 x 6 with split backward, uniform costs, the budget zbh1 needs (weights + 4 x act):
# proven optimal within the default limit, never slower than zbh1.
mk zb46 4 6 8GiB 1ms 0.1ms zbh1
exact zb46
check "4x6: optimal" test "$st" = optimal
expect "4x6: gap 0, bound = makespan" "$gap == 0 and $lb == $ms"
expect "4x6: no slower than zbh1" "$ms <= $(makespan "$tmp/zb46.pipe") + 1e-9"
same_order zb46
# A budget below zbh1's (weights + 3 x act): still an order, proven optimal, and slower
# than the unconstrained optimum (a stage holds at most 3 forwards).
mk zb46t 4 6 7GiB 1ms 0.1ms zbh1
exact zb46t
check "4x6 at 7 GiB: optimal" test "$st" = optimal
expect "4x6 at 7 GiB: above the 8 GiB optimum" "$ms > $(field makespan_ms <"$tmp/zb46.json")"
same_order zb46t
# Weights + one act (5 GiB): one micro-batch at a time; stage 0 must run W(m) before
# F(m+1) (B frees all but wact), so each micro-batch takes the F chain 4 f + 3 p2p, the
# B chain 4 (b - w) + 3 p2p and stage 0's W: M (8 + 1 + 6 x 0.1) = 57.6 ms.
mk zb46s 4 6 5GiB 1ms 0.1ms zbh1
exact zb46s
check "one micro-batch at a time: optimal" test "$st" = optimal
expect "one micro-batch at a time: 6 x 9.6 ms" "abs($ms - 57.6) < 1e-9"
same_order zb46s
# Below weights + one act nothing fits.
mk zb46i 4 6 4.5GiB 1ms 0.1ms zbh1
exact zb46i
check "4.5 GiB: infeasible" test "$st" = infeasible
check "4.5 GiB: no makespan" test "$ms" = null
check "4.5 GiB: no -o file" test ! -e "$tmp/zb46i.out.pipe"

# A short limit on a bigger case stops with the file's order and a gap, or none.
mk big 6 12 10GiB 1.3ms 0.1ms zbh1
exact big --time-limit 1
case "$st" in
    feasible) expect "big: feasible with a gap" "$gap >= 0 and $lb <= $ms"; same_order big ;;
    timeout) check "big: timeout has no makespan" test "$ms" = null ;;
    *) bad "big --time-limit 1: feasible or timeout" "$st" ;;
esac
"$PIPEC" tune --exact "$tmp/big.pipe" --time-limit 1 >"$tmp/big.txt" 2>&1
check "big: the text names the status" grep -qE "^exact search: (feasible|timeout)" "$tmp/big.txt"

# Bad options.
"$PIPEC" tune --exact "$tmp/zb46.pipe" --time-limit 0 >/dev/null 2>&1
check "--time-limit 0: usage error" test $? = 2
# Ops the program does not model: an overlapped recompute (its time depends on the op
# listed after it), and host transfers on a link two ranks share (processor sharing).
cat >"$tmp/ro.pipe" <<'EOF'
pipeline ro {
  stages 1
  microbatches 2
  chunks 1
  costs { f 1ms b 2ms r 1ms act 1GiB ckpt 256MiB }
  stage 0 { F0 F1 RO0 B1 B0 }
}
EOF
"$PIPEC" tune --exact "$tmp/ro.pipe" >/dev/null 2>"$tmp/ro.err"
check "RO: exit 1" test $? = 1
check "RO: located limit error" grep -q "ro.pipe:6:19: error\[limit\]: tune --exact does not model RO0" "$tmp/ro.err"
cat >"$tmp/link.pipe" <<'EOF'
pipeline link {
  stages 2
  microbatches 1
  chunks 1
  costs { f 1ms b 2ms act 1GiB host_bw 100GB/s swap_fraction 1
          host_link_ranks 2 }
  stage 0 { F0 SO0 SI0 B0 }
  stage 1 { F0 B0 }
}
EOF
"$PIPEC" tune --exact "$tmp/link.pipe" >/dev/null 2>"$tmp/link.err"
check "shared link: exit 1" test $? = 1
check "shared link: located limit error naming the setting" \
    grep -q "link.pipe:5:3: error\[limit\]: tune --exact cannot model host_link_ranks 2" "$tmp/link.err"
sed -i 's/host_link_ranks 2/host_link_ranks 1/' "$tmp/link.pipe"
"$PIPEC" tune --exact "$tmp/link.pipe" >/dev/null 2>&1
check "own link: solved" test $? = 0

# Swapping (docs/tune.md "Exact search": SO on the device-to-host stream frees at its
# end, SI on the host-to-device stream allocates at its start, an allocation waits for
# the frees listed before it).
# swapfile NAME STAGES MBS MEMORY COSTS STAGE_LIST: every stage lists STAGE_LIST.
swapfile() {
    {
        echo "pipeline $1 {"
        echo "  stages $2"
        echo "  microbatches $3"
        echo "  chunks 1"
        [ -n "$4" ] && echo "  memory $4"
        echo "  costs { f 1ms b 2ms act 1GiB weights 4GiB p2p 0.1ms swap_fraction 1 $5 }"
        [ "$2" -gt 1 ] && echo "  costs stage 1 { f 1.5ms b 2.5ms }"
        for ((s = 0; s < $2; s++)); do echo "  stage $s { $6 }"; done
        echo "}"
    } >"$tmp/$1.pipe"
}
# One stage, a budget of weights + one act: each micro-batch's bytes are on the device
# from F's start to SO's end and from SI's start to B's end, and no two such spans
# overlap, so the optimum is M (f + b + 2 x 1 GiB / host_bw) = 3 (3 + 2 x 1.953125) ms
# = 20.71875 ms, from a listed order that is over budget.
swapfile one 1 3 5GiB "host_bw 512GiB/s" "F0 F1 F2 SO0 SO1 SO2 SI0 SI1 SI2 B0 B1 B2"
exact one
check "one stage, one act: optimal" test "$st" = optimal
expect "one stage, one act: M (f + b + 2 d)" "abs($ms - 20.71875) < 1e-9"
same_order one
# Instantaneous swaps (host_bw unlimited) make a budget of weights + one act free: the
# optimum is that of the same ops without SO/SI and without a budget.
swapfile inst 3 4 5GiB "" "F0 SO0 F1 SO1 F2 SO2 F3 SO3 SI0 B0 SI1 B1 SI2 B2 SI3 B3"
sed -e 's/ SO[0-9]//g; s/ SI[0-9]//g; /memory/d' "$tmp/inst.pipe" >"$tmp/instn.pipe"
exact instn
free_ms=$ms
exact inst
check "instant swaps: optimal" test "$st" = optimal
expect "instant swaps: = the optimum with no budget" "abs($ms - $free_ms) < 1e-9"
expect "instant swaps: below the listed order" "$ms < $(makespan "$tmp/inst.pipe")"
same_order inst
# 2 ms swaps and a budget of weights + two acts: optimal, no slower than the listed
# order, no faster than the same ops with no budget.
swapfile sw24 2 4 6GiB "host_bw 512GiB/s" "F0 SO0 F1 SO1 F2 SO2 F3 SO3 SI0 B0 SI1 B1 SI2 B2 SI3 B3"
sed -e 's/ SO[0-9]//g; s/ SI[0-9]//g; /memory/d' "$tmp/sw24.pipe" >"$tmp/sw24n.pipe"
exact sw24n
free_ms=$ms
exact sw24
check "2x4 swapping: optimal" test "$st" = optimal
expect "2x4 swapping: between the no-budget optimum and the listed order" \
    "$free_ms <= $ms + 1e-9 and $ms <= $(makespan "$tmp/sw24.pipe") + 1e-9"
same_order sw24
# The swap pass's plan (with its dep lines gating each SI): an order within the limit
# that simulates to what is reported.
cat >"$tmp/swp.pipe" <<'EOF'
import "std/schedules.pipe"
pipeline swp {
  stages 2
  microbatches 3
  chunks 1
  memory 6GiB
  costs { f 1ms b 2ms act 1GiB weights 4GiB p2p 0.1ms host_bw 500GiB/s }
  schedule onef1b
  apply swap(lambda=1, beta=1, stages=0..=0)
}
EOF
exact swp --time-limit 20
case "$st" in
    optimal | feasible)
        same_order swp
        sim_lb=$("$PIPEC" sim --json "$tmp/swp.pipe" 2>/dev/null | field lower_bound_ms)
        expect "swap pass: sim's bound <= the order's makespan" "$sim_lb <= $ms + 1e-9"
        expect "swap pass: the search's bound <= its makespan" "$lb <= $ms + 1e-9"
        if "$PIPEC" check "$tmp/swp.pipe" >/dev/null 2>&1; then
            expect "swap pass: no slower than the plan" "$ms <= $(makespan "$tmp/swp.pipe") + 1e-9"
        fi ;;
    *) bad "swap pass: an order" "$st $(cat "$tmp/swp.err")" ;;
esac
check "swap pass: the plan has SO" grep -q "SO0" "$tmp/swp.out.pipe"

# Model-state offload: LW (host-to-device, allocates grads + wload at its start; every F
# of its chunk waits for it) and OG (device-to-host, after every B and W of its chunk;
# its copy, then opt_host). At weights + 2 GiB of states + one act, stage 1 runs one
# micro-batch at a time (after B, W's wact would not leave room for the next F), so the
# optimum is LW + M (f + b) + OG = 1.953125 + 9 + 1.953125 + 1 = 13.90625 ms, from a
# listed order that is over budget.
cat >"$tmp/og.pipe" <<'EOF'
pipeline og {
  stages 2
  microbatches 3
  chunks 1
  memory 7GiB
  costs { f 1ms b 2ms w 1ms act 1GiB wact 512MiB weights 4GiB p2p 0.1ms host_bw 512GiB/s }
  costs vstage 1 { grads 1GiB wload 1GiB opt_host 1ms }
  stage 0 { F0 F1 F2 B0 W0 B1 W1 B2 W2 }
  stage 1 { LW0 F0 F1 F2 B0 W0 B1 W1 B2 W2 OG0 }
}
EOF
exact og
check "offload: optimal" test "$st" = optimal
expect "offload: LW + M (f + b) + OG" "abs($ms - 13.90625) < 1e-9"
same_order og

# 1F1B is optimal on uniform costs when its P in-flight micro-batches fit: from GPipe's
# ops (F and B only) under a budget of weights + P acts, which GPipe's own order
# exceeds, the search finds (M + P - 1)(f + b), 1F1B's makespan.
for pm in "2 4" "3 6" "4 8" "3 5"; do
    set -- $pm
    n=g$1x$2
    cat >"$tmp/$n.pipe" <<EOF
import "std/schedules.pipe"
pipeline $n {
  stages $1
  microbatches $2
  chunks 1
  memory $((4 + $1))GiB
  costs { f 1ms b 2ms act 1GiB weights 4GiB p2p 0ms }
  schedule gpipe
}
EOF
    sed "s/schedule gpipe/schedule onef1b/" "$tmp/$n.pipe" >"$tmp/$n.1f1b.pipe"
    exact $n
    check "$n: optimal" test "$st" = optimal
    expect "$n: = (M + P - 1) 3 ms" "abs($ms - ($2 + $1 - 1) * 3) < 1e-9"
    expect "$n: = onef1b's makespan" "abs($ms - $(makespan "$tmp/$n.1f1b.pipe")) < 1e-9"
    same_order $n
done

# Random small cases (2-4 stages, 2-8 micro-batches; one in four with chunks 2 vshape):
# sim's lower bound <= the optimum, the solver's bound <= the optimum <= every stdlib
# template of the same chunks and placement that fits the budget (compare's rows). The
# file's own schedule (zbh1 or zbv) splits every backward, so every template's ops are
# its ops or its ops with B and W fused. Seeds 1 to 20; `make test` 5 of them spread
# evenly (sample_points: 1 5 10 15 20, seed 20 with chunks 2).
seeds=$(seq 1 20)
test_full || seeds=$(sample_points 20 5)
for seed in $seeds; do
    read -r P M V f b w c mem < <(python3 -c "
import random; r = random.Random($seed)
V = 2 if $seed % 4 == 0 else 1
P = r.choice([2, 3]) if V == 2 else r.choice([2, 3, 4])
M = r.choice(range(2, 7)) if V == 2 else r.choice(range(2, 9))
print(P, M, V, r.choice([0.5, 1, 1.5]), r.choice([1.5, 2, 2.5, 3]), r.choice([0.5, 1]),
      r.choice([0, 0.1, 0.3]), r.choice([5.5, 6, 7, 9, 16]))")
    n=r$seed
    if [ "$V" = 2 ]; then sched=zbv; chunks="2 vshape"; all=zbv,dualpipev,vmin,vhalf
    else sched=zbh1; chunks=1; all=gpipe,onef1b,eager1f1b,zbh1,zbh2; fi
    cat >"$tmp/$n.pipe" <<EOF
import "std/schedules.pipe"
pipeline $n {
  stages $P
  microbatches $M
  chunks $chunks
  memory ${mem}GiB
  costs { f ${f}ms b ${b}ms w ${w}ms act 1GiB wact 512MiB weights 4GiB p2p ${c}ms }
  schedule $sched
}
EOF
    exact $n --time-limit 10
    case "$st" in
        optimal | feasible) same_order $n ;;
        infeasible) ;;
        *) bad "$n: solved" "$st $(cat "$tmp/$n.err")"; continue ;;
    esac
    "$PIPEC" compare --format json "$tmp/$n.pipe" --set schedule=$all >"$tmp/$n.cmp" 2>/dev/null
    sim_lb=$("$PIPEC" sim --json "$tmp/$n.pipe" 2>/dev/null | field lower_bound_ms)
    if python3 - "$tmp/$n.cmp" "$st" "$ms" "$lb" "$sim_lb" >"$tmp/$n.why" <<'PY'
import json, sys
rows, st = json.load(open(sys.argv[1])), sys.argv[2]
bad = []
if st == "infeasible":
    bad += [r["set"] + " fits" for r in rows if r["fits"]]
else:
    ms, lb, sim_lb = (float(v) for v in sys.argv[3:6])
    if not sim_lb <= ms + 1e-9: bad.append("sim's bound %g > %g" % (sim_lb, ms))
    if not lb <= ms + 1e-9: bad.append("bound %g > %g" % (lb, ms))
    for r in rows:
        if r["fits"] and not ms <= r["makespan_ms"] + 1e-9:
            bad.append("%s %g < %g" % (r["set"], r["makespan_ms"], ms))
print("; ".join(bad))
sys.exit(1 if bad else 0)
PY
    then ok; else bad "$n ($P x $M, V $V, $st): bound <= optimum <= every template" "$(cat "$tmp/$n.why")"; fi
done

finish
