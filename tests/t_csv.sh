#!/usr/bin/env bash
# t_csv.sh - `pipec import-csv` and `pipec export-csv` (docs/csv.md) from the command line.
#
# - PyTorch's own artifacts (tests/csv/README.md) import, pass `pipec check`, and come
#   back from export-csv with every rank's actions in the same order. The expected
#   order comes from `norm` below, written here: drop empty cells (bubbles); SEND/RECV,
#   sharding actions and (a;b)OVERLAP_F_B composites are kept as import keeps them.
# - export-csv --comms of PyTorch's ZB1P compute artifact is its comms artifact.
# - kept actions are checked in the .pipe (located at the op there), and sharding
#   actions in a suspicious order warn; UNSHARD, RESHARD, REDUCE_GRAD and OVERLAP_F_B,
#   which pipec does not run as PyTorch does, warn once per kind (docs/csv.md "What
#   pipec runs") on import, check and sim, with the exact text and location.
# - export -> import -> export is a fixed point, byte for byte; a stdlib schedule
#   exported and imported again has the same ops on every rank.
# - bad CSVs: exact diagnostics, exit 1, no output file; usage errors exit 2.
# - check and sim read a .csv FILE directly, as its import (docs/csv.md).
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
export PIPEC_STDLIB="$PWD/stdlib"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
A=tests/csv

norm() {
    tr -d '\r' <"$1" | awk -F, '{
        out = ""
        for (i = 1; i <= NF; i++) if ($i != "") out = out (out == "" ? "" : ",") $i
        print out
    }'
}
# "S: OP OP ..." per rank from the canonical print form.
ops_of() {
    awk '/^  stage [0-9]+ \{/ { c = 1; printf "%s:", $2; sub(/^  stage [0-9]+ \{/, "") }
         c { for (i = 1; i <= NF; i++) { if ($i == "}") { print ""; c = 0; break } printf " %s", $i } }'
}

# --- artifacts: import, check, round trip -------------------------------------------
artifact() { # NAME EXPORT-FLAGS "stages P" "microbatches M" "chunks V[ vshape]"
    local n=$1 flags=$2
    if "$PIPEC" import-csv "$A/$n.csv" -o "$tmp/$n.pipe" 2>"$tmp/err"; then ok; else
        bad "import $n" "$(cat "$tmp/err")"; return; fi
    for want in "$3" "$4" "$5"; do
        if grep -qx "  $want" "$tmp/$n.pipe"; then ok; else bad "import $n: $want" "$(head -6 "$tmp/$n.pipe")"; fi
    done
    if "$PIPEC" check "$tmp/$n.pipe" >"$tmp/out" 2>&1 && grep -q ": ok: pipeline $n," "$tmp/out"; then ok
    else bad "check $n" "$(head -5 "$tmp/out")"; fi
    # shellcheck disable=SC2086
    "$PIPEC" export-csv $flags "$tmp/$n.pipe" -o "$tmp/$n.csv" 2>/dev/null
    norm "$A/$n.csv" >"$tmp/$n.want"
    if [ -s "$tmp/$n.csv" ] && cmp -s "$tmp/$n.want" "$tmp/$n.csv"; then ok; else
        bad "round trip $n" "$(diff "$tmp/$n.want" "$tmp/$n.csv" | head -4)"; fi
    "$PIPEC" import-csv "$tmp/$n.csv" -o "$tmp/$n.2.pipe" 2>/dev/null &&
        "$PIPEC" export-csv $flags "$tmp/$n.2.pipe" -o "$tmp/$n.2.csv" 2>/dev/null
    if cmp -s "$tmp/$n.csv" "$tmp/$n.2.csv"; then ok; else bad "fixed point $n"; fi
    # The .pipe files differ only in the pipeline name and the header comment.
    if [ "$(ops_of <"$tmp/$n.pipe")" = "$(ops_of <"$tmp/$n.2.pipe")" ]; then ok; else bad "ops again $n"; fi
}
# The ZB1P artifacts use the older spelling (B + W split, BW full): --legacy.
artifact zb1p_2rank_2stagep_compute --legacy "stages 2" "microbatches 8" "chunks 2"
artifact zb1p_2rank_2stagep_comms --legacy "stages 2" "microbatches 8" "chunks 2"
artifact dualpipev_4rank_10mb "" "stages 4" "microbatches 10" "chunks 2 vshape"

# The artifacts' warnings. The ZB1P ones have no UNSHARD, RESHARD, REDUCE_GRAD or
# OVERLAP_F_B: import and check say nothing. The DualPipeV one has OVERLAP_F_B pairs,
# which pipec runs as F then B: one warning, at the first pair's cell (after 7 + 10
# cells of 4 bytes: column 69), counting the composites in the file; check says it at
# the first OVERLAP_F_B of the .pipe.
for n in zb1p_2rank_2stagep_compute zb1p_2rank_2stagep_comms; do
    "$PIPEC" import-csv "$A/$n.csv" -o "$tmp/w.pipe" 2>"$tmp/err"
    check "$n: import is quiet" test ! -s "$tmp/err"
    "$PIPEC" check "$tmp/w.pipe" >/dev/null 2>"$tmp/err"
    check "$n: check is quiet" test ! -s "$tmp/err"
done
dv=$A/dualpipev_4rank_10mb.csv
nov=$(grep -o ')OVERLAP_F_B' "$dv" | wc -l)
ovw="OVERLAP_F_B is kept for the round trip ($nov actions, the first here), but pipec's simulation and generated programs run each pair as its F then its B, one after the other: pipec has no overlapped F/B op"
"$PIPEC" import-csv "$dv" -o "$tmp/w.pipe" 2>"$tmp/err"
check "dualpipev: import warns once about OVERLAP_F_B" test "$(cat "$tmp/err")" = "$dv:1:69: warning[action]: $ovw
    $(sed -n 1p "$dv")
                                                                        ^"
ll=$(grep -n -m1 ' OVERLAP_F_B ' "$tmp/w.pipe" | cut -d: -f1)
lc=$(sed -n "${ll}p" "$tmp/w.pipe" | awk '{ print index($0, " OVERLAP_F_B ") + 1 }')
"$PIPEC" check "$tmp/w.pipe" >/dev/null 2>"$tmp/err"
check "dualpipev: check exit 0" test $? = 0
check "dualpipev: check warns once, at the first OVERLAP_F_B of the .pipe" test "$(grep 'warning\[' "$tmp/err")" = "$tmp/w.pipe:$ll:$lc: warning[action]: $ovw"
"$PIPEC" check -Werror "$tmp/w.pipe" >/dev/null 2>&1
check "dualpipev: check -Werror fails" test $? = 1

# The ZB1P artifact has one bubble cell on rank 0 and one leading one on rank 1:
# the export is the input minus those two cells and nothing else.
if [ "$(tr -d -c , <"$A/zb1p_2rank_2stagep_compute.csv" | wc -c)" = \
     "$(($(tr -d -c , <"$tmp/zb1p_2rank_2stagep_compute.csv" | wc -c) + 2))" ]; then ok
else bad "zb1p: exactly the two bubble cells dropped"; fi
# Current spelling of the same schedule: I for the split backward (--current: the file
# was imported from a legacy CSV, so that dialect is the default).
"$PIPEC" export-csv --current "$tmp/zb1p_2rank_2stagep_compute.pipe" >"$tmp/cur.csv"
if [ "$(head -c 27 "$tmp/cur.csv")" = "0F0,0F1,2F0,2F1,2I0,2W0,0F2" ]; then ok; else bad "current spelling" "$(head -c 40 "$tmp/cur.csv")"; fi

# CRLF line ends and a header-free quoted cell read the same.
sed 's/$/\r/; s/^0F0,/"0F0",/' "$A/dualpipev_4rank_10mb.csv" >"$tmp/crlf.csv"
"$PIPEC" import-csv "$tmp/crlf.csv" -o "$tmp/crlf.pipe" 2>/dev/null
if [ "$(ops_of <"$tmp/crlf.pipe")" = "$(ops_of <"$tmp/dualpipev_4rank_10mb.pipe")" ]; then ok; else bad "CRLF + quotes"; fi

# --name and the header comment (and the legacy-dialect mark); stdout without -o.
out=$("$PIPEC" import-csv --name my_zb "$A/zb1p_2rank_2stagep_compute.csv")
if [ "$(echo "$out" | sed -n 1p)" = "# imported from zb1p_2rank_2stagep_compute.csv (PyTorch pipelining schedule CSV) by pipec import-csv" ] &&
   [ "$(echo "$out" | sed -n 2p)" = "# pipec: csv dialect legacy (B = input gradients, BW = full backward)" ] &&
   [ "$(echo "$out" | sed -n 3p)" = "pipeline my_zb {" ] &&
   echo "$out" | grep -qx "    w 1ms"; then ok; else bad "--name / header" "$(echo "$out" | head -3)"; fi

# --- stdlib schedules: export, import back, same ops ------------------------------------
for spec in "onef1b 4 8 1" "interleaved 4 8 2" "interleaved 2 6 3" "zbh1 4 6 1" "gpipe 3 2 1"; do
    set -- $spec
    printf 'import "std/schedules.pipe"\npipeline t { stages %d microbatches %d chunks %d costs { f 1ms b 2ms } schedule %s }\n' \
        "$2" "$3" "$4" "$1" >"$tmp/t.pipe"
    "$PIPEC" export-csv "$tmp/t.pipe" -o "$tmp/t.csv" &&
        "$PIPEC" import-csv "$tmp/t.csv" -o "$tmp/t2.pipe" &&
        "$PIPEC" export-csv "$tmp/t2.pipe" -o "$tmp/t2.csv"
    if [ "$("$PIPEC" print "$tmp/t.pipe" | ops_of)" = "$(ops_of <"$tmp/t2.pipe")" ] &&
       cmp -s "$tmp/t.csv" "$tmp/t2.csv" && "$PIPEC" check "$tmp/t2.pipe" >/dev/null; then ok
    else bad "template round trip $spec"; fi
done
# zbh1's B ops have W ops, so they export as I; onef1b's as B. Rank 0 of zbh1 P=2 M=2:
# F0 F1 B0 W0 B1 W1 (hand-derived: warmup 1, W not deferred on rank 0).
printf 'import "std/schedules.pipe"\npipeline t { stages 2 microbatches 2 costs { f 1ms b 2ms w 1ms } schedule zbh1 }\n' >"$tmp/z.pipe"
if [ "$("$PIPEC" export-csv "$tmp/z.pipe" | head -1)" = "0F0,0F1,0I0,0W0,0I1,0W1" ]; then ok; else bad "zbh1 exports I/W"; fi

# R/SO/SI have no PyTorch action: left out, one warning per kind, exit 0.
cat >"$tmp/r.pipe" <<'EOF'
pipeline r {
  stages 1
  microbatches 2
  stage 0 { F0 F1 R0 B0 R1 B1 }
}
EOF
"$PIPEC" export-csv "$tmp/r.pipe" -o "$tmp/r.csv" 2>"$tmp/r.err"; rc=$?
if [ "$rc" = 0 ] && [ "$(cat "$tmp/r.csv")" = "0F0,0F1,0B0,0B1" ] && [ "$(grep -cF 'warning[csv]: R ops have no PyTorch' "$tmp/r.err")" = 1 ]; then ok
else bad "export drops R" "rc=$rc $(cat "$tmp/r.err")"; fi

# --- dialects ---------------------------------------------------------------------------
# export-csv writes back the dialect a file was imported in: the legacy zb1p artifact
# (B = input half, BW = full) round-trips with its own spelling; --current forces I/W;
# a current-dialect CSV (DualPipeV, with I) stays current and carries no legacy mark.
"$PIPEC" import-csv tests/csv/zb1p_2rank_2stagep_compute.csv -o "$tmp/zbl.pipe"
check "import marks the legacy dialect" grep -q '^# pipec: csv dialect legacy' "$tmp/zbl.pipe"
"$PIPEC" export-csv "$tmp/zbl.pipe" -o "$tmp/zbl.csv"
if [ "$(sed 's/,,*/,/g; s/^,//; s/,$//' tests/csv/zb1p_2rank_2stagep_compute.csv)" = "$(cat "$tmp/zbl.csv")" ]; then ok
else bad "legacy CSV round-trips in its dialect" "$(head -c 200 "$tmp/zbl.csv")"; fi
"$PIPEC" export-csv --current "$tmp/zbl.pipe" -o "$tmp/zbc.csv"
check "--current spells the input half I" grep -q '[0-9]I[0-9]' "$tmp/zbc.csv"
"$PIPEC" import-csv tests/csv/dualpipev_4rank_10mb.csv -o "$tmp/dv.pipe" 2>/dev/null
check "a current CSV has no legacy mark" bash -c "! grep -q 'csv dialect' '$tmp/dv.pipe'"
"$PIPEC" export-csv "$tmp/dv.pipe" -o "$tmp/dv.csv" 2>/dev/null
check "a current CSV exports current (I)" grep -q '[0-9]I[0-9]' "$tmp/dv.csv"

# --- bad CSVs -----------------------------------------------------------------------
expect() { # FILE EXPECTED-STDERR
    rm -f "$tmp/bad.pipe"
    "$PIPEC" import-csv "$1" -o "$tmp/bad.pipe" 2>"$tmp/err"; local rc=$?
    if [ "$rc" = 1 ] && [ "$(cat "$tmp/err")" = "$2" ] && ! [ -e "$tmp/bad.pipe" ]; then ok
    else bad "diagnostic for $1" "rc=$rc: $(diff <(echo "$2") "$tmp/err")"; fi
}
expect $A/bad_action.csv "$A/bad_action.csv:2:10: error[syntax]: bad action '0X1': unknown action type; expected F, I, B, W, BW, SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD or REDUCE_GRAD
    1F1,1B0,0X1
             ^"
expect $A/bad_two_ranks.csv "$A/bad_two_ranks.csv:2:5: error[placement]: stage 0 is on rank 0 and on rank 1 (0F2); a stage belongs to one rank
    1F0,0F2,1B0
        ^
$A/bad_two_ranks.csv:1:1: note: stage 0 is first on rank 0 here
    0F0,0F1,0B0,0B1
    ^"
expect $A/bad_placement.csv "$A/bad_placement.csv:2:9: error[placement]: stage 4 is on rank 1; the looped (interleaved) placement of 6 stages over 2 ranks puts it on rank 0
    1F0,3F0,4F0,1B0,3B0,4B0
            ^
$A/bad_placement.csv:1:9: error[placement]: stage 5 is on rank 0; the looped (interleaved) placement of 6 stages over 2 ranks puts it on rank 1
    0F0,2F0,5F0,0B0,2B0,5B0
            ^"
expect $A/bad_unpaired.csv "$A/bad_unpaired.csv:1:9: error[missing]: backward-input action 0I0 has no weight-gradient action 0W0
    0F0,0F1,0I0,0B1
            ^"

# The comms form: SEND/RECV pair per ordered pair of ranks in issue order, as NCCL pairs
# them. PyTorch's ZB1P comms artifact with rank 1's first two receives swapped: rank 0's
# first send to rank 1 (0SEND_F0) meets rank 1's first receive from rank 0 (1RECV_F1).
expect $A/bad_comm_swapped.csv "$A/bad_comm_swapped.csv:2:1: error[order]: 1RECV_F1 on rank 1 is matched with 0SEND_F0 from rank 0: it is rank 1's next receive from rank 0 and that is rank 0's next send to rank 1, so NCCL pairs them; expected 1RECV_F0
    $(sed -n 2p $A/bad_comm_swapped.csv)
    ^
$A/bad_comm_swapped.csv:1:5: note: 0SEND_F0 is here
    $(sed -n 1p $A/bad_comm_swapped.csv)
        ^"
expect $A/bad_comm_unmatched_send.csv "$A/bad_comm_unmatched_send.csv:1:18: error[missing]: 0SEND_F1 on rank 0 has no matching 1RECV_F1 on rank 1
    0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1
                     ^"
expect $A/bad_comm_unmatched_recv.csv "$A/bad_comm_unmatched_recv.csv:1:40: error[missing]: 0RECV_B1 on rank 0 has no matching 1SEND_B1 on rank 1
    0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1
                                           ^"
# A RECV after the compute that consumes it, a SEND before the compute that produces it.
expect $A/bad_comm_recv_late.csv "$A/bad_comm_recv_late.csv:2:18: error[order]: 1RECV_F1 comes after 1F1, which consumes what it receives
    1RECV_F0,1F0,1F1,1RECV_F1,1B0,1SEND_B0,1B1,1SEND_B1
                     ^
$A/bad_comm_recv_late.csv:2:14: note: 1F1 is here
    1RECV_F0,1F0,1F1,1RECV_F1,1B0,1SEND_B0,1B1,1SEND_B1
                 ^"
expect $A/bad_comm_send_early.csv "$A/bad_comm_send_early.csv:1:14: error[order]: 0SEND_F1 comes before 0F1, which produces what it sends
    0F0,0SEND_F0,0SEND_F1,0F1,0RECV_B0,0B0,0RECV_B1,0B1
                 ^
$A/bad_comm_send_early.csv:1:23: note: 0F1 is here
    0F0,0SEND_F0,0SEND_F1,0F1,0RECV_B0,0B0,0RECV_B1,0B1
                          ^"
# Blocking sends: rank 0 waits to receive B0 before sending F0, which rank 1 needs first.
expect $A/bad_comm_deadlock.csv "$A/bad_comm_deadlock.csv:1:5: error[deadlock]: 0RECV_B0 on rank 0 waits for rank 1, which waits in 1RECV_F0: with blocking sends neither can go on
    0F0,0RECV_B0,0SEND_F0,0B0
        ^
$A/bad_comm_deadlock.csv:2:1: note: 1RECV_F0 is here
    1RECV_F0,1F0,1B0,1SEND_B0
    ^"

# RFC 4180 quoting: a quote left open, text after a closing quote; an empty overlap; an
# older release's batched pair whose second half has no micro-batch index.
printf '"0F0,0F1\n' >"$tmp/q1.csv"
expect "$tmp/q1.csv" "$tmp/q1.csv:1:1: error[syntax]: unterminated quoted cell: a '\"' opens it and the line ends
    \"0F0,0F1
    ^"
printf '"0F0"x,0F1\n' >"$tmp/q2.csv"
expect "$tmp/q2.csv" "$tmp/q2.csv:1:6: error[syntax]: unexpected 'x' after a quoted cell; expected ',' or the end of the line
    \"0F0\"x,0F1
         ^"
printf '0F0,(;)OVERLAP_F_B\n' >"$tmp/q3.csv"
expect "$tmp/q3.csv" "$tmp/q3.csv:1:5: error[syntax]: bad action '(;)OVERLAP_F_B': no actions inside ( )
    0F0,(;)OVERLAP_F_B
        ^"
printf '0F0,0SEND_F0_1RECV_B\n' >"$tmp/q4.csv"
expect "$tmp/q4.csv" "$tmp/q4.csv:1:13: error[syntax]: bad action '0SEND_F0_1RECV_B': unexpected '_' after the micro-batch index
    0F0,0SEND_F0_1RECV_B
                ^"
# Quoted cells at a CRLF line end import as the same actions unquoted.
printf '"0F0","0B0"\r\n' >"$tmp/q6.csv"
"$PIPEC" import-csv "$tmp/q6.csv" -o "$tmp/q6.pipe" 2>"$tmp/err"
check "quoted cells before CRLF: exit 0" test $? = 0
check "quoted cells before CRLF: the ops" test "$(ops_of <"$tmp/q6.pipe")" = "0: F0 B0"
# export-csv leaves dep edges out, with a warning (one edge: singular).
printf 'pipeline d { stages 2 microbatches 1 costs { f 1ms b 2ms } stage 0 { F0 B0 } stage 1 { F0 B0 } dep 0:F0 -> 1:F0 }\n' >"$tmp/dep1.pipe"
"$PIPEC" export-csv "$tmp/dep1.pipe" >"$tmp/dep1.csv" 2>"$tmp/err"
check "export-csv with one dep: exit 0" test $? = 0
check "export-csv with one dep: the warning" grep -q "warning\[csv\]: the schedule's 1 dep edge cannot be written to a PyTorch CSV and is left out$" "$tmp/err"
check "export-csv with one dep: the actions" test "$(cat "$tmp/dep1.csv")" = "$(printf '0F0,0B0\n1F0,1B0')"

# An action without its stage index; blanks (tabs, spaces) around a cell are not part of it.
printf 'F0,0B0\n' >"$tmp/n1.csv"
expect "$tmp/n1.csv" "$tmp/n1.csv:1:1: error[syntax]: bad action 'F0': an action starts with its stage index, as in 2F0
    F0,0B0
    ^"
printf '\t0F0\t, 0B0 \n' >"$tmp/n2.csv"
"$PIPEC" import-csv "$tmp/n2.csv" -o "$tmp/n2.pipe" 2>"$tmp/err"
check "blanks around cells: exit 0" test $? = 0
check "blanks around cells: the ops" test "$(ops_of <"$tmp/n2.pipe")" = "0: F0 B0"
# Two dep edges: the warning in the plural.
printf 'pipeline d { stages 2 microbatches 1 costs { f 1ms b 2ms } stage 0 { F0 B0 } stage 1 { F0 B0 } dep 0:F0 -> 1:F0 dep 1:B0 -> 0:B0 }\n' >"$tmp/dep2.pipe"
"$PIPEC" export-csv "$tmp/dep2.pipe" >/dev/null 2>"$tmp/err"
check "export-csv with two deps: the warning" grep -q "warning\[csv\]: the schedule's 2 dep edges cannot be written to a PyTorch CSV and are left out$" "$tmp/err"

# A CSV that imports but is not a complete schedule: import succeeds, check finds it.
printf '0F0,0F1,0B0\n' >"$tmp/inc.csv"
"$PIPEC" import-csv "$tmp/inc.csv" -o "$tmp/inc.pipe"
"$PIPEC" check "$tmp/inc.pipe" >"$tmp/out" 2>&1; rc=$?
if [ "$rc" = 1 ] && grep -q 'error\[missing\]' "$tmp/out"; then ok; else bad "incomplete CSV fails check" "rc=$rc"; fi

# Usage and file errors.
"$PIPEC" import-csv >/dev/null 2>&1; [ $? = 2 ] && ok || bad "import-csv without a file exits 2"
"$PIPEC" import-csv --bogus $A/bad_action.csv >/dev/null 2>&1; [ $? = 2 ] && ok || bad "import-csv bad option exits 2"
"$PIPEC" export-csv >/dev/null 2>&1; [ $? = 2 ] && ok || bad "export-csv without a file exits 2"
"$PIPEC" import-csv "$tmp/nonexistent.csv" 2>"$tmp/err"; rc=$?
if [ "$rc" = 1 ] && grep -q "cannot read .*nonexistent.csv" "$tmp/err"; then ok; else bad "missing file" "rc=$rc"; fi

# The pipeline's name comes from the file name, made an identifier: "2x.csv" is _2x.
printf '0F0,0B0\n' >"$tmp/2x.csv"
(cd "$tmp" && "$PIPEC" import-csv 2x.csv) >"$tmp/2x.pipe" 2>"$tmp/err"
check "import-csv 2x.csv: exit 0" test $? = 0
check "import-csv 2x.csv: pipeline _2x" grep -qx 'pipeline _2x {' "$tmp/2x.pipe"
check "import-csv 2x.csv: the header names the file as given" grep -qx '# imported from 2x.csv (PyTorch pipelining schedule CSV) by pipec import-csv' "$tmp/2x.pipe"
(cd "$tmp" && "$PIPEC" import-csv 2x.csv -o no/such/x.pipe) >/dev/null 2>"$tmp/err"
check "import-csv -o into a missing folder: exit 1" test $? = 1
check "import-csv -o into a missing folder: names it" grep -qF 'pipec: cannot write no/such/x.pipe: No such file or directory' "$tmp/err"

# A dep edge has no CSV spelling: export-csv warns at it, still writes the compute
# actions, and -Werror turns the warning into exit 1 with nothing written.
"$PIPEC" export-csv tests/golden/sim/dep.pipe >"$tmp/dep.csv" 2>"$tmp/err"
check "export-csv with a dep: exit 0" test $? = 0
check "export-csv with a dep: warning located at the dep" grep -qF "tests/golden/sim/dep.pipe:13:3: warning[csv]: the schedule's 1 dep edge cannot be written to a PyTorch CSV and is left out" "$tmp/err"
check "export-csv with a dep: the actions are written" test "$(tail -n 2 "$tmp/dep.csv" | tr '\n' ' ')" = "0F0,0F1,0B0,0B1 1F0,1B0,1F1,1B1 "
"$PIPEC" export-csv -Werror tests/golden/sim/dep.pipe -o "$tmp/dep2.csv" >/dev/null 2>"$tmp/err"
check "export-csv -Werror with a dep: exit 1" test $? = 1
check "export-csv -Werror with a dep: nothing written" test ! -e "$tmp/dep2.csv"
# A file that starts with the legacy-dialect mark is exported in that dialect.
{ echo "# pipec: csv dialect legacy (B = input gradients, BW = full backward)"; cat tests/golden/sim/tiny_1f1b.pipe; } >"$tmp/legacy_first.pipe"
"$PIPEC" export-csv "$tmp/legacy_first.pipe" >"$tmp/lf.csv" 2>"$tmp/err"
"$PIPEC" export-csv --legacy tests/golden/sim/tiny_1f1b.pipe >"$tmp/lf2.csv" 2>/dev/null
check "the legacy mark on line 1 chooses the legacy dialect" cmp -s "$tmp/lf.csv" "$tmp/lf2.csv"

# --- the comms form ------------------------------------------------------------------
# export-csv --comms lowers as PyTorch's test of its artifacts does (_merge_bw, then
# _add_send_recv): the ZB1P compute artifact gives PyTorch's comms artifact, every action.
"$PIPEC" export-csv --comms "$tmp/zb1p_2rank_2stagep_compute.pipe" -o "$tmp/lowered.csv"
check "export-csv --comms of the ZB1P compute artifact is PyTorch's comms artifact" \
    cmp -s "$tmp/lowered.csv" "$A/zb1p_2rank_2stagep_comms.csv"
# The imported comms artifact comes back unchanged, SEND/RECV and all.
check "comms artifact: import then export is the artifact" \
    cmp -s "$tmp/zb1p_2rank_2stagep_comms.csv" "$A/zb1p_2rank_2stagep_comms.csv"
# Every template-generated PyTorch schedule lowers to a comms form that import-csv's
# checks (pairing, order, deadlock) and `pipec check` accept.
for f in tests/torch/*.csv; do
    n=$(basename "$f" .csv)
    if "$PIPEC" import-csv "$f" 2>/dev/null | "$PIPEC" export-csv --comms - >"$tmp/lc.csv" 2>"$tmp/err" &&
       "$PIPEC" import-csv "$tmp/lc.csv" -o "$tmp/lc.pipe" 2>>"$tmp/err" &&
       "$PIPEC" check -q "$tmp/lc.pipe" >>"$tmp/err" 2>&1; then ok
    else bad "lowered $n" "$(head -3 "$tmp/err")"; fi
done
# The .pipe keeps the actions and `pipec check` checks them there: rank 1's first two
# receives swapped in the imported artifact (the issue's example) is an error at the
# RECV_F1 in the .pipe, with a note at stage 0's SEND_F0.
sed 's/^    RECV_F0 F0 SEND_F0 RECV_F1 /    RECV_F1 RECV_F0 F0 SEND_F0 /' \
    "$tmp/zb1p_2rank_2stagep_comms.pipe" >"$tmp/swapped.pipe"
l1=$(grep -n '^  stage 1 {' "$tmp/swapped.pipe" | cut -d: -f1); l1=$((l1 + 1))
l0=$(grep -n '^  stage 0 {' "$tmp/swapped.pipe" | cut -d: -f1); l0=$((l0 + 1))
"$PIPEC" check "$tmp/swapped.pipe" >"$tmp/out" 2>&1
check "check of swapped receives: exit 1" test $? = 1
check "check of swapped receives: located at the RECV in the .pipe" grep -qF \
    "$tmp/swapped.pipe:$l1:5: error[order]: RECV_F1 on stage 1 is matched with SEND_F0 from stage 0: it is stage 1's next receive from stage 0 and that is stage 0's next send to stage 1, so NCCL pairs them; expected RECV_F0" "$tmp/out"
check "check of swapped receives: note at the SEND" grep -qF "$tmp/swapped.pipe:$l0:8: note: SEND_F0 is here" "$tmp/out"

# --- sharding and gradient reduction -------------------------------------------------
# Kept and written back as they were.
printf '0UNSHARD,0F0,0F1,0SEND_F0,0SEND_F1,1RECV_B0,0RECV_B0,0B0,0RECV_B1,0B1,0RESHARD,0REDUCE_GRAD\n1RECV_F0,1UNSHARD,1F0,1RECV_F1,1F1,1B0,1SEND_B0,1B1,1SEND_B1,1RESHARD,1REDUCE_GRAD\n' >"$tmp/fsdp.csv"
"$PIPEC" import-csv "$tmp/fsdp.csv" -o "$tmp/fsdp.pipe" 2>"$tmp/err"
check "FSDP actions: a placement error for 1RECV_B0 on rank 0" grep -qF "fsdp.csv:1:36: error[placement]: 1RECV_B0 is on rank 0, which does not hold stage 1" "$tmp/err"
printf '0UNSHARD,0F0,0F1,0SEND_F0,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0RESHARD,0REDUCE_GRAD\n1RECV_F0,1UNSHARD,1F0,1RECV_F1,1F1,1B0,1SEND_B0,1B1,1SEND_B1,1RESHARD,1REDUCE_GRAD\n' >"$tmp/fsdp.csv"
"$PIPEC" import-csv "$tmp/fsdp.csv" -o "$tmp/fsdp.pipe" 2>"$tmp/err"
# UNSHARD, RESHARD and REDUCE_GRAD are no-ops in pipec's simulation and generated programs
# (docs/csv.md "What pipec runs"): one warning per kind, at its first cell, with the
# kind's count (2 each: one per rank); nothing else. Columns by hand: 0RESHARD follows
# nine cells of 9+4+4+9+9+9+4+9+4 = 61 bytes, 0REDUCE_GRAD the 9 of "0RESHARD,".
fsdp_line=$(sed -n 1p "$tmp/fsdp.csv")
nr="but pipec's simulation and generated programs treat it as a no-op"
check "FSDP actions: import warns once per kind, at the first cell" test "$(cat "$tmp/err")" = \
"$tmp/fsdp.csv:1:1: warning[action]: UNSHARD is kept for the round trip (2 actions, the first here), $nr: pipec models ZeRO-3's parameter gathers only as memory, with the 'zero 3' setting
    $fsdp_line
    ^
$tmp/fsdp.csv:1:62: warning[action]: RESHARD is kept for the round trip (2 actions, the first here), $nr: pipec models ZeRO-3's gathered parameters only as memory, with the 'zero 3' setting
    $fsdp_line
                                                                 ^
$tmp/fsdp.csv:1:71: warning[action]: REDUCE_GRAD is kept for the round trip (2 actions, the first here), $nr: pipec models data parallelism with the 'data_parallel', 'zero' and 'grad_dtype' settings, and the gradient reduction takes no time
    $fsdp_line
                                                                          ^"
check "FSDP actions: kept in the .pipe" grep -qF "stage 1 { RECV_F0 UNSHARD0 F0 RECV_F1 F1 B0 SEND_B0 B1 SEND_B1 RESHARD0 REDUCE_GRAD0 }" "$tmp/fsdp.pipe"
check "FSDP actions: stage 0 in the .pipe" grep -qxF "  stage 0 { UNSHARD0 F0 F1 SEND_F0 SEND_F1 RECV_B0 B0 RECV_B1 B1 RESHARD0 REDUCE_GRAD0 }" "$tmp/fsdp.pipe"
# check and sim warn the same, located at the actions in the .pipe: "  stage 0 { " is 12
# bytes, RESHARD0 follows 53 more, REDUCE_GRAD0 the 9 of "RESHARD0 ".
l=$(grep -n '^  stage 0 {' "$tmp/fsdp.pipe" | cut -d: -f1)
for cmd in check sim; do
    "$PIPEC" $cmd "$tmp/fsdp.pipe" >/dev/null 2>"$tmp/err"
    check "FSDP actions: $cmd exit 0" test $? = 0
    check "FSDP actions: $cmd warns at UNSHARD0" grep -qxF "$tmp/fsdp.pipe:$l:13: warning[action]: UNSHARD is kept for the round trip (2 actions, the first here), $nr: pipec models ZeRO-3's parameter gathers only as memory, with the 'zero 3' setting" "$tmp/err"
    check "FSDP actions: $cmd warns at RESHARD0" grep -qxF "$tmp/fsdp.pipe:$l:66: warning[action]: RESHARD is kept for the round trip (2 actions, the first here), $nr: pipec models ZeRO-3's gathered parameters only as memory, with the 'zero 3' setting" "$tmp/err"
    check "FSDP actions: $cmd warns at REDUCE_GRAD0" grep -qxF "$tmp/fsdp.pipe:$l:75: warning[action]: REDUCE_GRAD is kept for the round trip (2 actions, the first here), $nr: pipec models data parallelism with the 'data_parallel', 'zero' and 'grad_dtype' settings, and the gradient reduction takes no time" "$tmp/err"
    check "FSDP actions: $cmd warns three times" test "$(grep -c 'warning\[' "$tmp/err")" = 3
done
"$PIPEC" export-csv "$tmp/fsdp.pipe" -o "$tmp/fsdp2.csv" 2>/dev/null
check "FSDP actions: round trip equal" cmp -s "$tmp/fsdp.csv" "$tmp/fsdp2.csv"
"$PIPEC" check -q "$tmp/fsdp.pipe" 2>/dev/null
check "FSDP actions: check passes" test $? = 0
# Computing between a RESHARD and the next UNSHARD, and a REDUCE_GRAD before the last
# backward, are warnings (PyTorch's runtime fails there), at the CSV and in the .pipe.
printf '0UNSHARD,0F0,0RESHARD,0REDUCE_GRAD,0B0\n' >"$tmp/sh.csv"
"$PIPEC" import-csv "$tmp/sh.csv" -o "$tmp/sh.pipe" 2>"$tmp/err"
check "sharding order: import exit 0" test $? = 0
check "sharding order: compute after RESHARD warns at the CSV" grep -qF "sh.csv:1:36: warning[action]: 0B0 computes on stage 0 after its 0RESHARD and before the next UNSHARD: PyTorch's runtime stops with 'Attempted to compute on sharded stage'" "$tmp/err"
check "sharding order: REDUCE_GRAD before the last backward warns" grep -qF "sh.csv:1:23: warning[action]: 0REDUCE_GRAD of stage 0 comes before 0B0, the stage's last backward: it reduces gradients that are not complete" "$tmp/err"
"$PIPEC" check "$tmp/sh.pipe" >"$tmp/out" 2>&1
check "sharding order: check exit 0" test $? = 0
l=$(grep -n '^  stage 0 {' "$tmp/sh.pipe" | cut -d: -f1)
check "sharding order: the warning in the .pipe" grep -qF "sh.pipe:$l:47: warning[action]: B0 computes on stage 0 after its RESHARD0 and before the next UNSHARD" "$tmp/out"
"$PIPEC" check -Werror "$tmp/sh.pipe" >/dev/null 2>&1
check "sharding order: -Werror fails" test $? = 1
printf '0UNSHARD,0UNSHARD,0F0,0B0\n' >"$tmp/sh2.csv"
"$PIPEC" import-csv "$tmp/sh2.csv" >/dev/null 2>"$tmp/err"
check "UNSHARD twice warns" grep -qF "sh2.csv:1:10: warning[action]: 0UNSHARD of stage 0, which is already unsharded: PyTorch's runtime stops with 'Unsharding the same stage twice'" "$tmp/err"
# A pass may move ops, so it drops the actions (with a warning).
"$PIPEC" opt "$tmp/fsdp.pipe" --pass dependency_relaxation >/dev/null 2>"$tmp/err"
check "a pass drops the actions with a warning" grep -qF "runtime actions (SEND_F, UNSHARD, ...) of the schedule are dropped" "$tmp/err"

# --- a CSV read directly (docs/csv.md "Reading a CSV directly") ------------------------
# Every artifact: check and sim --json of F.csv say what they say of its imported .pipe
# (stdout byte for byte; the same exit status and the same diagnostics, located at the
# CSV's cells rather than the .pipe's lines, so only the codes are compared).
for f in $A/*.csv; do
    n=$(basename "$f" .csv)
    "$PIPEC" import-csv "$f" -o "$tmp/d_$n.pipe" >/dev/null 2>&1
    if [ -s "$tmp/d_$n.pipe" ]; then
        for cmd in check "sim --json"; do
            # shellcheck disable=SC2086
            a=$("$PIPEC" $cmd "$f" 2>/dev/null; echo "exit $?")
            # shellcheck disable=SC2086
            b=$("$PIPEC" $cmd "$tmp/d_$n.pipe" 2>/dev/null | sed "s|$tmp/d_$n.pipe|$f|g"; echo "exit ${PIPESTATUS[0]}")
            check "$cmd $n.csv = $cmd of its import" test "$a" = "$b"
        done
    else
        "$PIPEC" check "$f" >/dev/null 2>"$tmp/dc.err"
        check "check $n.csv: exit 1 like import-csv" test $? = 1
        "$PIPEC" import-csv "$f" >/dev/null 2>"$tmp/di.err"
        check "check $n.csv: import-csv's diagnostics, located at the CSV" \
            diff <(grep 'error\[' "$tmp/dc.err") <(grep 'error\[' "$tmp/di.err")
    fi
done
"$PIPEC" check --set microbatches=4 "$A/zb1p_2rank_2stagep_compute.csv" >"$tmp/out" 2>"$tmp/err"
check "--set with a CSV: exit 1" test $? = 1
check "--set with a CSV: says why" grep -qF "error[value]: --set replaces setting lines of a .pipe file; $A/zb1p_2rank_2stagep_compute.csv is a CSV (import-csv it first)" "$tmp/err"
"$PIPEC" check "$tmp/nope.csv" >"$tmp/out" 2>"$tmp/err"
check "a missing CSV: exit 1, named" grep -qF "cannot read '$tmp/nope.csv'" "$tmp/err"
printf '0UNSHARD,0UNSHARD,0F0,0B0\n' >"$tmp/sh3.csv"
"$PIPEC" check "$tmp/sh3.csv" >/dev/null 2>"$tmp/err"
check "check of a CSV: each action warning once, at the cell" \
    test "$(grep -c 'warning\[action\]' "$tmp/err")" = 2 -a "$(grep -c 'sh3.csv:1:10: warning\[action\]: UNSHARD0 of stage 0, which is already unsharded' "$tmp/err")" = 1
"$PIPEC_ASAN" sim --json "$A/dualpipev_4rank_10mb.csv" >/dev/null 2>&1
check "sim --json of a CSV under the sanitizers" test $? = 0

# --- under the sanitizers -----------------------------------------------------------
for f in $A/*.csv; do
    "$PIPEC_ASAN" import-csv "$f" -o "$tmp/asan.pipe" >/dev/null 2>&1; rc=$?
    case "$f" in
    */bad_*) [ "$rc" = 1 ] && ok || bad "asan import $f" "rc=$rc" ;;
    *) if [ "$rc" = 0 ] && "$PIPEC_ASAN" export-csv "$tmp/asan.pipe" >/dev/null 2>&1; then ok
       else bad "asan import/export $f" "rc=$rc"; fi ;;
    esac
done

finish
