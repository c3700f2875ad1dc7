#!/usr/bin/env bash
# t_schedules.sh - the stdlib schedule templates (stdlib/schedules.pipe, docs/schedules.md).
#
# 1. The grid: every template for P in 1..8, M in 1..16, V in 1..3 (the V-shape ones,
#    zbv dualpipev vhalf vmin, with `chunks V vshape`). Where the schedule is defined
#    (docs/schedules.md) the expansion passes `pipec check`; elsewhere it fails with
#    exactly one `value` error: the template's `require` message at its line, and a note
#    at the pipeline's `schedule` line giving P, M and V. Every undefined point is
#    checked exactly.
# 2. Op order: every defined grid point of gpipe, onef1b, interleaved, zbh1, eager1f1b
#    (and interleaved_zb where M % P = 0; make test: those with P + M even) is printed
#    and compared, rank by rank, with tests/sched_ref.c, an independent C port of PyTorch's per-rank generator (per-stage
#    counters and a weight-gradient queue, not the templates' closed forms). The port
#    itself is checked against PyTorch's own artifact zb1p_2rank_2stagep_compute.csv.
#    2b: zbv, dualpipev, interleaved_zb, looped_bfs and interleaved against the orders
#    PyTorch 2.11's classes generate (tests/torch/, at least two (P, M) each), through
#    `pipec export-csv`. 2c: CSV round trip of every new template.
# 3. Closed forms under the simulator with f = 1ms, b = 2ms (and w = 1ms for the split
#    schedules): makespan (M + P - 1)(f + b) for gpipe, onef1b, eager1f1b; (MV + P - 1)(f + b)
#    for interleaved (Narayanan et al. 2021, §2.2: the bubble shrinks by V); 3M + P - 1 for
#    zbh1 when M >= P (Qi et al. 2024, §3.1: bubble (P-1)(F + B - W)). Peak activations
#    with act = 1 GiB: onef1b rank s holds min(P - s, M), eager1f1b min(2(P-s-1)+1, M),
#    zbh1 min(P, M) on every rank (= 1F1B's rank 0), gpipe M. ZB-H2: no bubble inside a
#    rank, 3M + P - 1, 2P - 1 held; ZB-V: 6M + P - 1, 2P chunk activations; looped BFS:
#    (VM + P - 1)(f + b), VM held; V-Min / V-Half: about 1/3 / 1/2 of 1F1B's memory and
#    a shorter makespan than 1F1B.
# 4. A handful of expansions under the sanitizer build.
# 5. tpipe through std/schedules.pipe (which imports tpipe.pipe): alone, and with
#    std/tpipe.pipe imported as well, in either order (a file imported twice loads once,
#    so the template is not defined twice); the op lists are the same.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
export PIPEC_STDLIB="$PWD/stdlib"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

${CC:-cc} -std=c11 -O2 -Wall -Wextra -o "$tmp/sched_ref" tests/sched_ref.c || { bad "build sched_ref"; finish; exit; }

SCHEDS="gpipe onef1b interleaved zbh1 eager1f1b zbh2 zbv dualpipev interleaved_zb looped_bfs vhalf vmin"
# The V-shape templates run with `chunks V vshape`, the others with the default placement.
vshaped() { case $1 in zbv | dualpipev | vhalf | vmin) return 0 ;; esac; return 1; }
defined() { # NAME P M V
    case $1 in
    interleaved) [ $(($3 % $2)) = 0 ] ;;
    interleaved_zb) r=$(($3 / $2)); [ "$r" -lt 1 ] && r=1; [ $(($3 % r)) = 0 ] ;;
    looped_bfs) true ;;
    zbv | vhalf | vmin) [ "$4" = 2 ] ;;
    dualpipev) [ "$4" = 2 ] && [ "$3" -ge $((2 * $2)) ] ;;
    *) [ "$4" = 1 ] ;;
    esac
}
mkpipe() { # FILE NAME P M V [COSTS]
    local pl=""
    vshaped "$2" && pl=" vshape"
    printf 'import "std/schedules.pipe"\npipeline t {\n  stages %d\n  microbatches %d\n  chunks %d%s\n  costs { %s }\n  schedule %s\n}\n' \
        "$3" "$4" "$5" "$pl" "${6:-f 1ms b 2ms}" "$2" >"$1"
}
# "S: OP OP ..." per rank from the canonical print form.
ops_of() {
    awk '/^  stage [0-9]+ \{/ { c = 1; printf "%s:", $2; sub(/^  stage [0-9]+ \{/, "") }
         c { for (i = 1; i <= NF; i++) { if ($i == "}") { print ""; c = 0; break } printf " %s", $i } }'
}

# --- 1. the grid ------------------------------------------------------------------
mkdir "$tmp/def" "$tmp/undef"
ndef=0 nundef=0
for s in $SCHEDS; do for P in 1 2 3 4 5 6 7 8; do for M in $(seq 1 16); do for V in 1 2 3; do
    if defined "$s" "$P" "$M" "$V"; then d=def; ndef=$((ndef + 1)); else d=undef; nundef=$((nundef + 1)); fi
    mkpipe "$tmp/$d/${s}_${P}_${M}_${V}.pipe" "$s" "$P" "$M" "$V"
done; done; done; done

(cd "$tmp/def" && "$PIPEC" check ./*.pipe) >"$tmp/def.out" 2>&1; rc=$?
nok=$(grep -c ': ok: pipeline t' "$tmp/def.out")
if [ "$rc" = 0 ] && [ "$nok" = "$ndef" ]; then ok; else
    bad "grid: defined expansions pass check" "rc=$rc, $nok of $ndef ok"
    grep -m 5 'error' "$tmp/def.out"
fi

(cd "$tmp/undef" && "$PIPEC" check ./*.pipe) >"$tmp/undef.out" 2>&1; rc=$?
nval=$(grep -c '_[0-9]*\.pipe:7:12: error\[value\]: ' "$tmp/undef.out")
nerr=$(grep -c 'error\[' "$tmp/undef.out")
none=$(grep -c '\.pipe: 1 error$' "$tmp/undef.out")
if [ "$rc" = 1 ] && [ "$nval" = "$nundef" ] && [ "$nerr" = "$nundef" ] && [ "$none" = "$nundef" ]; then ok; else
    bad "grid: undefined expansions give one value error each" \
        "rc=$rc, $nundef files, $nval value errors, $nerr errors, $none with exactly one"
fi

# The exact diagnostics of every undefined grid point: the message of the template's
# `require` (written out here, one per template) at line 7, column 12 of the pipeline
# (mkpipe's `  schedule NAME`), then the note at the line of that `require` in
# std/schedules.pipe, column 3.
why() { # NAME P M V: sets msg to the message of the require that fails first at that point
    case $1 in
    gpipe) msg="gpipe is defined for chunks 1 only" ;;
    onef1b) msg="onef1b is defined for chunks 1 only; use interleaved for more chunks" ;;
    interleaved) msg="interleaved needs microbatches to be a multiple of stages" ;;
    zbh1) msg="zbh1 is defined for chunks 1 only" ;;
    eager1f1b) msg="eager1f1b is defined for chunks 1 only" ;;
    zbh2) msg="zbh2 is defined for chunks 1 only" ;;
    zbv | vhalf | vmin) msg="$1 is defined for chunks 2 vshape only" ;;
    dualpipev)
        if [ "$4" != 2 ]; then msg="dualpipev is defined for chunks 2 vshape only"
        else msg="dualpipev needs at least twice as many microbatches as stages"; fi ;;
    interleaved_zb) msg="interleaved_zb needs microbatches to be a multiple of the number of rounds, max(1, the quotient of microbatches by stages)" ;;
    *) msg="" ;;
    esac
}
# The line of each require in std/schedules.pipe, by its message (read once).
declare -A req_line=()
n=0
while IFS= read -r l; do
    n=$((n + 1))
    case $l in *require*\"*\"*) m=${l#*\"}; req_line[${m%\"*}]=$n ;; esac
done <stdlib/schedules.pipe
: >"$tmp/want.txt"
for f in "$tmp"/undef/*.pipe; do
    b=${f##*/}; b=${b%.pipe}
    s=${b%_*_*_*}; IFS=_ read -r P M V <<<"${b#"$s"_}"
    why "$s" "$P" "$M" "$V"
    line=${req_line[$msg]:-}
    if [ -z "$line" ]; then bad "require for $s" "no require with \"$msg\" in stdlib/schedules.pipe"; continue; fi
    printf '%s\t%s\n' "$b.pipe:7:12: error[value]: $msg" \
        "std/schedules.pipe:$line:3: note: expanded from template '$s' (stages $P, microbatches $M, chunks $V)" >>"$tmp/want.txt"
done
# Each error line (its folder dropped) with the note line after it.
awk '/ error\[/ { e = $0; sub(/^.*\//, "", e); next }
     / note: / && e != "" { print e "\t" $0; e = "" }' "$tmp/undef.out" >"$tmp/got.txt"
sort "$tmp/want.txt" >"$tmp/want.s"; sort "$tmp/got.txt" >"$tmp/got.s"
nwant=$(wc -l <"$tmp/want.s")
if [ "$nwant" = "$nundef" ] && cmp -s "$tmp/want.s" "$tmp/got.s"; then ok; else
    bad "grid: exact require messages and notes ($nwant expected, $nundef undefined points)" \
        "$(diff "$tmp/want.s" "$tmp/got.s" | head -6)"
fi

# --- 2. op order against the reference ----------------------------------------------
# The reference port reproduces PyTorch's own ZB1P artifact (P = 2, V = 2, M = 8).
"$tmp/sched_ref" zb1p 2 8 2 >"$tmp/ref.txt"
"$PIPEC" import-csv tests/csv/zb1p_2rank_2stagep_compute.csv | ops_of >"$tmp/pt.txt"
if [ -s "$tmp/ref.txt" ] && cmp -s "$tmp/ref.txt" "$tmp/pt.txt"; then ok; else
    bad "sched_ref reproduces PyTorch's zb1p artifact" "$(diff "$tmp/ref.txt" "$tmp/pt.txt" | head -5)"
fi

# The templates sched_ref ports: the five first ones, and interleaved_zb (PyTorch's
# ZB1P, sched_ref's zb1p) where M is a multiple of P (sched_ref's rounds are P long).
# Each point's print goes to a file of its own; then one awk turns them all into
# "== POINT" and its rank lines, sched_ref one list of the same points into the same form
# (one process each instead of four per point), and the two are compared point by point.
ndiff=0 ncmp=0 nref=0
mkdir "$tmp/pr"
: >"$tmp/points"
for f in "$tmp"/def/*.pipe; do
    b=${f##*/}; b=${b%.pipe}
    s=${b%_*_*_*}; IFS=_ read -r P M V <<<"${b#"$s"_}"
    ref=$s
    case $s in
    gpipe | onef1b | interleaved | zbh1 | eager1f1b) ;;
    interleaved_zb) ref=zb1p; [ $((M % P)) = 0 ] || continue ;;
    *) continue ;;
    esac
    # make test: the points with P + M even (a checkerboard: 436 of the 764, every
    # template, P and M, the first point 1x1 and the last 8x16, and M = P on each P);
    # make test-full: all of them
    test_full || [ $(((P + M) % 2)) = 0 ] || continue
    nref=$((nref + 1))
    "$PIPEC" print "$f" >"$tmp/pr/$b" 2>/dev/null
    echo "$b $ref $P $M $V" >>"$tmp/points"
done
# the prints in the order of $tmp/points (an empty print gives a point without ranks)
cut -d' ' -f1 "$tmp/points" | sed "s|^|$tmp/pr/|" | xargs awk '
    FNR == 1 { f = FILENAME; sub(/^.*\//, "", f); print "== " f }
    /^  stage [0-9]+ \{/ { c = 1; printf "%s:", $2; sub(/^  stage [0-9]+ \{/, "") }
    c { for (i = 1; i <= NF; i++) { if ($i == "}") { print ""; c = 0; break } printf " %s", $i } }' >"$tmp/got_orders"
# (a print that failed is an empty file, which awk skips: its "== POINT" is missing, so
# the point differs below)
"$tmp/sched_ref" - <"$tmp/points" >"$tmp/ref_orders"
# per point: "POINT<TAB>rank lines joined", the reference's then pipec's, compared by point
join_points() { awk '/^== / { if (k != "") print k "\t" v; k = $2; v = ""; next } { v = v "|" $0 }
                     END { if (k != "") print k "\t" v }' "$1"; }
join_points "$tmp/ref_orders" >"$tmp/ref_pts"; join_points "$tmp/got_orders" >"$tmp/got_pts"
ncmp=$(wc -l <"$tmp/ref_pts")
ndiff=$(awk -F'\t' 'NR == FNR { got[$1] = $2; next } !($1 in got) || got[$1] != $2 || $2 == "" {
    if (++n <= 3) print "order differs: " $1 > "/dev/stderr" } END { print n + 0 }' "$tmp/got_pts" "$tmp/ref_pts")
want_min=400; test_full && want_min=700
if [ "$ndiff" = 0 ] && [ "$ncmp" = "$nref" ] && [ "$ncmp" -gt "$want_min" ]; then ok; else bad "op order = reference" "$ndiff of $ncmp differ"; fi

# interleaved with V = 1 is onef1b, op for op.
for PM in "4 8" "3 9" "1 5"; do
    set -- $PM
    mkpipe "$tmp/i.pipe" interleaved "$1" "$2" 1; mkpipe "$tmp/o.pipe" onef1b "$1" "$2" 1
    if [ "$("$PIPEC" print "$tmp/i.pipe" | ops_of)" = "$("$PIPEC" print "$tmp/o.pipe" | ops_of)" ]; then ok
    else bad "interleaved V=1 equals onef1b (P=$1 M=$2)"; fi
done

# --- 2b. PyTorch's own orders -----------------------------------------------------------
# tests/torch/NAME_P_M_V.csv: each rank's compute actions as PyTorch 2.11's schedule class
# generates them (tests/torch/gen_golden.py, which needs torch; this test does not). The
# template's `pipec export-csv` must equal the file byte for byte.
nt=0
for g in tests/torch/*.csv; do
    b=$(basename "$g" .csv)
    s=$(echo "$b" | sed 's/_[0-9]*_[0-9]*_[0-9]*$//'); IFS=_ read -r P M V <<<"${b#"$s"_}"
    mkpipe "$tmp/pt.pipe" "$s" "$P" "$M" "$V" "f 1ms b 2ms w 1ms"
    if "$PIPEC" export-csv "$tmp/pt.pipe" >"$tmp/pt.csv" 2>"$tmp/pt.err" && cmp -s "$tmp/pt.csv" "$g"; then ok; else
        bad "order of $s P=$P M=$M V=$V = PyTorch's ($g)" "$(head -2 "$tmp/pt.err") $(diff "$g" "$tmp/pt.csv" | head -3)"
    fi
    nt=$((nt + 1))
done
# at least two (P, M) for each template PyTorch ships
for s in zbv dualpipev interleaved_zb looped_bfs interleaved; do
    n=$(ls tests/torch/"$s"_[0-9]*_[0-9]*_[0-9]*.csv 2>/dev/null | wc -l)
    if [ "$n" -ge 2 ]; then ok; else bad "PyTorch orders for $s" "$n files"; fi
done
# interleaved_zb with one chunk is zbh1, op for op
for PM in "4 8" "3 5" "5 2"; do
    set -- $PM
    mkpipe "$tmp/i.pipe" interleaved_zb "$1" "$2" 1; mkpipe "$tmp/o.pipe" zbh1 "$1" "$2" 1
    if [ "$("$PIPEC" print "$tmp/i.pipe" | ops_of)" = "$("$PIPEC" print "$tmp/o.pipe" | ops_of)" ]; then ok
    else bad "interleaved_zb V=1 equals zbh1 (P=$1 M=$2)"; fi
done

# --- 2c. CSV round trip -------------------------------------------------------------------
# export-csv -> import-csv gives the same per-rank op lists; export -> import -> export is
# a fixed point (docs/csv.md).
for cfg in "zbh2 4 8 1" "zbv 4 8 2" "dualpipev 3 7 2" "interleaved_zb 4 8 2" "looped_bfs 3 5 2" \
    "vhalf 4 8 2" "vmin 5 10 2"; do
    set -- $cfg
    mkpipe "$tmp/rt.pipe" "$1" "$2" "$3" "$4" "f 1ms b 2ms w 1ms"
    "$PIPEC" export-csv "$tmp/rt.pipe" -o "$tmp/rt.csv" 2>/dev/null
    "$PIPEC" import-csv "$tmp/rt.csv" -o "$tmp/rt2.pipe" 2>/dev/null
    "$PIPEC" export-csv "$tmp/rt2.pipe" -o "$tmp/rt2.csv" 2>/dev/null
    a=$("$PIPEC" print "$tmp/rt.pipe" | ops_of); b2=$("$PIPEC" print "$tmp/rt2.pipe" | ops_of)
    if [ -n "$a" ] && [ "$a" = "$b2" ] && cmp -s "$tmp/rt.csv" "$tmp/rt2.csv" && "$PIPEC" check "$tmp/rt2.pipe" >/dev/null 2>&1
    then ok; else bad "CSV round trip of $1 P=$2 M=$3 V=$4"; fi
done

# --- 3. closed forms under the simulator ----------------------------------------------
json_field() { # FIELD: every value of "FIELD": N in the sim JSON on stdin, one per line
    grep -o "\"$1\": [-0-9.e+]*" | awk '{ printf "%.6g\n", $2 }'
}
# sim_check NAME P M V COSTS WANT_MAKESPAN WANT_PEAKS(GiB, space-separated or ""): the
# point's file and what it must simulate to are written down here; sim_checks_run, after
# the last, simulates each (one `sim --json` a point) and reads all the outputs with one
# awk: every makespan_ms, every peak_act_bytes in GiB, and whether each fwd_bubble_ms and
# bwd_bubble_ms is 0 (ZB-H2 below). The awk replaces some six processes a point.
mkdir "$tmp/sc"
nsc=0
: >"$tmp/sc/want"
sim_check() {
    nsc=$((nsc + 1))
    mkpipe "$tmp/sc/$nsc.pipe" "$1" "$2" "$3" "$4" "$5"
    printf '%s\t%s\t%s\t%s\n' "$nsc" "$1 P=$2 M=$3 V=$4" "$6" "$7" >>"$tmp/sc/want"
}
sim_checks_run() {
    local i n what wms wpk ms pk fz bz
    for i in $(seq 1 "$nsc"); do "$PIPEC" sim --json "$tmp/sc/$i.pipe" >"$tmp/sc/$i.json" 2>&1; done
    # "I<TAB>makespans<TAB>peaks<TAB>FZ BZ" per output (FZ, BZ: 1 when every fwd, bwd
    # bubble is 0)
    (cd "$tmp/sc" && seq 1 "$nsc" | sed 's/$/.json/' | xargs awk '
        function flush() { if (f != "") printf "%s\t%s\t%s\t%d %d\n", f, ms, pk, fz, bz }
        FNR == 1 { flush(); f = FILENAME; sub(/\.json$/, "", f); ms = ""; pk = ""; fz = 1; bz = 1 }
        { s = $0
          while (match(s, /"(makespan_ms|peak_act_bytes|fwd_bubble_ms|bwd_bubble_ms)": [-0-9.e+]*/)) {
              t = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
              k = t; sub(/^"/, "", k); sub(/".*$/, "", k); v = t; sub(/^.*: /, "", v); v += 0
              if (k == "makespan_ms") ms = ms (ms == "" ? "" : " ") sprintf("%.6g", v)
              else if (k == "peak_act_bytes") pk = pk (pk == "" ? "" : " ") sprintf("%.6g", v / 1073741824)
              else if (k == "fwd_bubble_ms" && v != 0) fz = 0
              else if (k == "bwd_bubble_ms" && v != 0) bz = 0 } }
        END { flush() }') >"$tmp/sc/got"
    declare -gA sc_ms=() sc_pk=() sc_zero=()
    while IFS=$'\t' read -r i ms pk z; do sc_ms[$i]=$ms sc_pk[$i]=$pk sc_zero[$i]=$z; done <"$tmp/sc/got"
    while IFS=$'\t' read -r i what wms wpk; do
        ms=${sc_ms[$i]:-}
        if [ "$ms" != "$wms" ]; then bad "sim $what makespan" "got $ms, want $wms"; continue; fi
        if [ -n "$wpk" ] && [ "${sc_pk[$i]:-}" != "$wpk" ]; then
            bad "sim $what peaks" "got ${sc_pk[$i]:-}, want $wpk"; continue
        fi
        ok
    done <"$tmp/sc/want"
}
for P in 1 2 3 5 8; do for M in 1 2 7 16; do
    c="f 1ms b 2ms act 1GiB"
    p1="" pe="" pz="" pg=""
    for s in $(seq 0 $((P - 1))); do
        p1="$p1${p1:+ }$((P - s < M ? P - s : M))"
        pe="$pe${pe:+ }$((2 * (P - s - 1) + 1 < M ? 2 * (P - s - 1) + 1 : M))"
        pz="$pz${pz:+ }$((P < M ? P : M))"
        pg="$pg${pg:+ }$M"
    done
    sim_check onef1b "$P" "$M" 1 "$c" $((3 * (M + P - 1))) "$p1"
    sim_check eager1f1b "$P" "$M" 1 "$c" $((3 * (M + P - 1))) "$pe"
    sim_check gpipe "$P" "$M" 1 "$c" $((3 * (M + P - 1))) "$pg"
    if [ "$M" -ge "$P" ]; then
        sim_check zbh1 "$P" "$M" 1 "f 1ms b 2ms w 1ms act 1GiB" $((3 * M + P - 1)) "$pz"
    fi
done; done
for P in 1 2 3 4 8; do for k in 1 2 3; do for V in 2 3; do
    M=$((k * P))
    sim_check interleaved "$P" "$M" "$V" "f 1ms b 2ms" $((3 * (M * V + P - 1))) ""
done; done; done

# ZB-H2 (Qi et al. 2024, §3.1, Table 2): with f = b = w and M >= 2P - 1 no bubble inside
# any rank (forward and backward bubble 0; a rank's only idle time is its start offset s
# and the P - 1 - s after its end), makespan 3M + P - 1, and 2P - 1 micro-batches held
# on every rank. ZB-V (§6): zero bubble at f = b = w with 1F1B's memory: makespan
# 6M + P - 1 (each rank computes 6M: two chunks of f + b), every rank holding 2P chunk
# activations = P micro-batches of the whole model, as 1F1B's rank 0. DualPipeV has
# the same makespan in this model and one chunk activation more (2P + 1).
rep() { local i o=""; for ((i = 0; i < $1; i++)); do o="$o${o:+ }$2"; done; echo "$o"; }
zbh2_points=()   # "I P M": the sim_check of each ZB-H2 point, for its bubbles
for P in 1 2 3 4 5 8; do for M in $((2 * P - 1)) $((2 * P)) $((3 * P + 1)) 16; do
    [ "$M" -ge $((2 * P - 1)) ] || continue
    c="f 1ms b 2ms w 1ms act 1GiB"
    sim_check zbh2 "$P" "$M" 1 "$c" $((3 * M + P - 1)) "$(rep "$P" $((2 * P - 1)))"
    zbh2_points+=("$nsc $P $M")
    [ "$M" -ge $((2 * P)) ] || continue
    sim_check zbv "$P" "$M" 2 "$c" $((6 * M + P - 1)) "$(rep "$P" $((2 * P)))"
    sim_check dualpipev "$P" "$M" 2 "$c" $((6 * M + P - 1)) "$(rep "$P" $((2 * P + 1)))"
done; done
# Looped BFS (Lamy-Poirier 2022): with M >= P a rank runs its chunks back to back, so the
# makespan is (V*M + P - 1)(f + b), and it holds all V*M chunk activations at once.
for P in 1 2 4 5; do for M in $P $((2 * P + 1)); do for V in 1 2 3; do
    sim_check looped_bfs "$P" "$M" "$V" "f 1ms b 2ms act 1GiB" $((3 * (V * M + P - 1))) "$(rep "$P" $((V * M)))"
done; done; done
sim_checks_run
for pt in "${zbh2_points[@]}"; do
    read -r i P M <<<"$pt"
    if [ "${sc_zero[$i]:-}" = "1 1" ]; then ok; else bad "zbh2 P=$P M=$M: no bubble inside a rank"; fi
done
# V-Min and V-Half (Qi et al. 2024, controllable memory): with f = b = w = 1ms per chunk
# and M >= 2P, the most any rank holds is 2 * floor((P + 4) / 3) chunk activations for
# V-Min and 2 * (ceil(P / 2) + 1) for V-Half, against 2P for 1F1B over the whole model
# (P micro-batches of two chunks each): about 1/3 and 1/2 of it. Both finish before
# 1F1B does with the same work per rank (f 2ms, b 4ms over the whole model):
# (M + P - 1) * 6ms, V-Min no later than V-Half.
for P in 2 3 4 5 6 7 8; do for M in $((2 * P)) $((3 * P + 1)); do
    c="f 1ms b 2ms w 1ms act 1GiB"
    ms1=$((6 * (M + P - 1)))
    for s in vmin vhalf; do
        if [ $s = vmin ]; then want=$((2 * ((P + 4) / 3))); else want=$((2 * ((P + 1) / 2 + 1))); fi
        mkpipe "$tmp/s.pipe" $s "$P" "$M" 2 "$c"
        js=$("$PIPEC" sim --json "$tmp/s.pipe")
        peak=$(echo "$js" | grep -o '"peak_act_bytes": [0-9.e+]*' | awk '{ g = $2 / 1073741824; if (g > m) m = g } END { print m }')
        ms=$(echo "$js" | json_field makespan_ms)
        eval "ms_$s=\$ms"
        if [ "$peak" = "$want" ] && awk -v a="$ms" -v b="$ms1" 'BEGIN { exit !(a < b) }'; then ok; else
            bad "$s P=$P M=$M" "peak $peak GiB (want $want), makespan $ms (1F1B $ms1)"
        fi
    done
    if awk -v a="$ms_vmin" -v b="$ms_vhalf" 'BEGIN { exit !(a <= b) }'; then ok; else bad "vmin P=$P M=$M slower than vhalf"; fi
done; done

# --- 4. under the sanitizers --------------------------------------------------------
for f in gpipe_3_5_1 onef1b_8_16_1 interleaved_4_8_3 zbh1_5_3_1 eager1f1b_8_2_1 zbh2_4_9_1 zbv_3_5_2 \
    dualpipev_3_7_2 interleaved_zb_4_6_3 looped_bfs_3_4_2 vhalf_5_11_2 vmin_4_9_2; do
    if "$PIPEC_ASAN" check "$tmp/def/$f.pipe" >/dev/null 2>&1; then ok; else bad "asan check $f"; fi
done
for f in gpipe_2_2_2 interleaved_3_4_2 zbh1_4_4_3; do
    "$PIPEC_ASAN" check "$tmp/undef/$f.pipe" >"$tmp/asan.out" 2>&1; rc=$?
    if [ "$rc" = 1 ] && grep -q 'error\[value\]' "$tmp/asan.out"; then ok; else bad "asan undefined $f" "rc=$rc"; fi
done

# --- 5. tpipe through std/schedules.pipe ------------------------------------------------
tp_body='pipeline t {\n  stages 4\n  microbatches 8\n  chunks 2\n  costs { f 1ms b 2ms }\n  schedule tpipe\n}\n'
printf "import \"std/tpipe.pipe\"\n$tp_body" >"$tmp/tp_alone.pipe"
printf "import \"std/schedules.pipe\"\n$tp_body" >"$tmp/tp_sched.pipe"
printf "import \"std/schedules.pipe\"\nimport \"std/tpipe.pipe\"\n$tp_body" >"$tmp/tp_both.pipe"
printf "import \"std/tpipe.pipe\"\nimport \"std/schedules.pipe\"\n$tp_body" >"$tmp/tp_both2.pipe"
"$PIPEC" print "$tmp/tp_alone.pipe" 2>&1 | ops_of >"$tmp/tp_ref.txt"
# 4 ranks x 2 chunks x 8 micro-batches x (F + B) = 128 ops
if [ "$(tr ' ' '\n' <"$tmp/tp_ref.txt" | grep -c '^[FB][0-9]')" = 128 ]; then ok; else
    bad "tpipe alone expands to 128 ops" "$(head -2 "$tmp/tp_ref.txt")"
fi
for f in tp_sched tp_both tp_both2; do
    out=$("$PIPEC_ASAN" check "$tmp/$f.pipe" 2>&1); rc=$?
    "$PIPEC" print "$tmp/$f.pipe" 2>/dev/null | ops_of >"$tmp/tp_got.txt"
    if [ "$rc" = 0 ] && cmp -s "$tmp/tp_ref.txt" "$tmp/tp_got.txt"; then ok; else bad "tpipe via $f" "rc=$rc $out"; fi
done

finish
