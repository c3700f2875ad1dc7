#!/usr/bin/env bash
# t_tune_exact.sh - `pipec tune --exact` (docs/tune.md "Exact search"): it proves
# optimality on 4 stages x 6 micro-batches with split backward, its -o order passes check
# and simulates to the makespan it reports, a tight budget gives the hand-derived serial
# order or "infeasible", a short --time-limit stops with a gap, and on random small cases
# its bound <= its optimum <= the makespan of every stdlib template that fits.
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
    st=$(field status <"$tmp/$n.json"); ms=$(field makespan_ms <"$tmp/$n.json")
    lb=$(field lower_bound_ms <"$tmp/$n.json"); gap=$(field gap <"$tmp/$n.json")
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

# Bad options and unmodelled ops.
"$PIPEC" tune --exact "$tmp/zb46.pipe" --time-limit 0 >/dev/null 2>&1
check "--time-limit 0: usage error" test $? = 2
cat >"$tmp/swap.pipe" <<'EOF'
pipeline swap {
  stages 1
  microbatches 1
  chunks 1
  stage 0 { F0 SO0 SI0 B0 }
}
EOF
"$PIPEC" tune --exact "$tmp/swap.pipe" >/dev/null 2>"$tmp/swap.err"
check "SO: exit 1" test $? = 1
check "SO: located limit error" grep -q "swap.pipe:5:16: error\[limit\]: tune --exact models F, B, W and R only" "$tmp/swap.err"

# Random small cases: bound <= optimum <= every V=1 template that fits the budget.
for seed in 1 2 3 4 5 6; do
    read -r P M f b w c mem < <(python3 -c "
import random; r = random.Random($seed)
b = r.choice([1.5, 2, 2.5, 3]); print(r.choice([2, 3]), r.choice([2, 3, 4]), r.choice([0.5, 1, 1.5]), b,
      r.choice([0.5, 1]), r.choice([0, 0.1, 0.3]), r.choice([5.5, 6, 7, 16]))")
    n=r$seed
    for t in gpipe onef1b eager1f1b zbh1 zbh2; do
        sed "s/^pipeline X/pipeline $n/; s/@P/$P/; s/@M/$M/; s/@f/$f/; s/@b/$b/; s/@w/$w/; s/@c/$c/; s/@mem/$mem/; s/@T/$t/" >"$tmp/$n.$t.pipe" <<'EOF'
import "std/schedules.pipe"
pipeline X {
  stages @P
  microbatches @M
  chunks 1
  memory @memGiB
  costs { f @fms b @bms w @wms act 1GiB wact 512MiB weights 4GiB p2p @cms }
  schedule @T
}
EOF
    done
    cp "$tmp/$n.zbh1.pipe" "$tmp/$n.pipe"
    exact $n
    if [ "$st" != optimal ] && [ "$st" != infeasible ]; then bad "$n: solved" "$st $(cat "$tmp/$n.err")"; continue; fi
    [ "$st" = optimal ] && same_order $n
    for t in gpipe onef1b eager1f1b zbh1 zbh2; do
        "$PIPEC" check "$tmp/$n.$t.pipe" >/dev/null 2>&1 || continue
        tm=$(makespan "$tmp/$n.$t.pipe")
        if [ "$st" = infeasible ]; then bad "$n: infeasible, yet $t fits"; continue; fi
        expect "$n: bound <= optimum <= $t" "$lb <= $ms + 1e-9 and $ms <= $tm + 1e-9"
    done
done

finish
