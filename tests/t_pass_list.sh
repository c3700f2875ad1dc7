#!/usr/bin/env bash
# t_pass_list.sh - `pipec opt --pass LIST` and an `apply LIST` line read the same texts
# the same way: both go through the grammar's pass-list rules (grammar/pipe.y) and the
# front end's value reading (elaborate.c), so the same string gives the same result
# and the same diagnostics.
#
# Each string below is given once as `pipec opt BASE --pass STRING` and once as the
# line `apply STRING` at the end of BASE's pipeline, compiled with `pipec print`. Then:
#   - both exit with the same status;
#   - accepted: both print the same pipeline, byte for byte, with the same warnings;
#   - rejected (strings marked `=`): the first error and its notes are the same text,
#     and at the same place in the string. What is normalised, and why:
#       * the location prefix (`<--pass>:1:C:` against `FILE:6:C+8:`, the string
#         sitting after "  apply " on line 6), checked to point at the same byte;
#       * the token after the list when the error is at its end: the --pass text ends
#         there ("unexpected end of the pass list"), the apply line is followed by the
#         pipeline's closing brace ("unexpected '}'", located on the next line).
#   - rejected (strings marked `~`: a complete list followed by text that is not part
#     of it): both are `syntax` errors, but the messages necessarily differ: a --pass
#     text must end after the list, while in a file the same text goes on as the next
#     item of the pipeline (`apply a b` reads `b` as the start of an op call), so the
#     file's parser stops at a later token.
# A string is the whole of one line below after its marker and a space.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

head='import "std/models.pipe"
import "std/devices.pipe"
import "std/schedules.pipe"
pipeline f {
  stages 3 microbatches 4 model tiny device cpu schedule onef1b'
printf '%s\n}\n' "$head" >"$tmp/base.pipe"

# The first error and its notes (or, with no error, every warning), location prefixes
# replaced by the byte of the string they point at ("@COL"), "@end" for the token
# after the list, "@next" for a later line.
# $2: the line the string is on; $3: the column it starts at.
diags() {
    awk -v line="$2" -v col0="$3" '
        /^[^ ].*: (error|warning)\[/ { if (seen_error) exit; if ($0 ~ /: error\[/) seen_error = 1 }
        /^[^ ].*: (error|warning|note)/ {
            if (match($0, /^[^ ]*:[0-9]+:[0-9]+: /)) {
                loc = substr($0, 1, RLENGTH - 2); rest = substr($0, RLENGTH + 1)
                n = split(loc, part, ":"); l = part[n - 1]; c = part[n]
                where = (l == line) ? "@" (c - col0) : "@next"
            } else { where = "@none"; rest = $0 }
            if (sub(/unexpected end of the pass list|unexpected .}./, "unexpected <end of the list>", rest))
                where = "@end"
            print where " " rest
        }' "$1"
}

n=0
while IFS= read -r row; do
    [ -n "$row" ] || continue
    mark=${row%% *}
    s=${row#? }
    n=$((n + 1))
    printf '%s\n  apply %s\n}\n' "$head" "$s" >"$tmp/apply.pipe"
    "$PIPEC" opt "$tmp/base.pipe" --pass "$s" >"$tmp/o1" 2>"$tmp/e1"; r1=$?
    "$PIPEC" print "$tmp/apply.pipe" >"$tmp/o2" 2>"$tmp/e2"; r2=$?
    what="string $n [$s]"
    if [ "$r1" != "$r2" ]; then
        bad "$what" "exit status $r1 with --pass, $r2 with apply"
        continue
    fi
    if [ "$mark" = "~" ]; then
        if [ "$r1" = 1 ] && grep -q '^<--pass>:1:[0-9]*: error\[syntax\]' "$tmp/e1" &&
            grep -q 'apply.pipe:[0-9]*:[0-9]*: error\[syntax\]' "$tmp/e2"; then
            ok
        else
            bad "$what" "expected a syntax error from both"
        fi
        continue
    fi
    diags "$tmp/e1" 1 1 >"$tmp/d1"
    # On line 6, after "  apply ": the string starts at column 9.
    diags "$tmp/e2" 6 9 >"$tmp/d2"
    if [ "$r1" = 0 ] && ! cmp -s "$tmp/o1" "$tmp/o2"; then
        bad "$what" "accepted by both, printed differently"
    elif ! cmp -s "$tmp/d1" "$tmp/d2"; then
        bad "$what" "different diagnostics"
        diff "$tmp/d1" "$tmp/d2" | sed 's/^/    | /'
    elif [ "$r1" = 1 ] && ! [ -s "$tmp/d1" ]; then
        bad "$what" "rejected without a diagnostic"
    else
        ok
    fi
done <<'EOF'
= recompute(stages=0..=1, policy=full)
= recompute(stages=0..2, policy=selective)
= recompute(stages=all, policy=full)
= recompute(stages=1, policy=cmb)
= recompute(stages=0..=2, policy=full), forward_migration(stages=0..=1)
= forward_migration
= forward_migration()
= dependency_relaxation
= recompute(stages=0..=2, policy=full),dependency_relaxation,migration_refinement
= identify_adjusted
= identify_adjusted(cmb=true)
= swap_aware_recompute
= obscura(cmb=1, verbose=0)
= partition_balance
= swap(lambda=1, beta=0)
= toffload(cpu_step=1ms)
= recompute_in_stalls
= recompute ( stages = 0..=1 , policy = full )
= recompute(stages=0..=1,	policy=full) # a comment
= ,
= recompute(
= recompute(stages
= recompute(stages=
= recompute(stages=0..=1
= recompute(stages=0..=1,
= recompute(stages=0..=1 policy=full)
= a,,b
= (x)
= x(=1)
= x(k=1,)
= x(k=[1,2)
= x(k=[1,,2])
= x(k=0..)
= x(k==1)
= x(k="open)
= x(k=1..=2.5)
= recompute(stages=0..=1, policy=1zz)
= recompute(stages=0..=1, policy=1ms)
= recompute(stages=9, policy=full)
= recompute(stages=0..=1, policy=bogus)
= recompute(stages=2..1, policy=full)
= recompute(stages=0..=1, policy=full, extra=1)
= frobnicate
= forward_migraton
= stages
= toffload(cpu_step=1GiB)
= x(k=1e999)
= recompute(stages=0..=1, policy="full")
= recompute(stages=0..=1, policy=full), nosuch
= swap(lambda=-1)
= identify_adjusted(cmb=maybe)
~ x)
~ a b
~ x;y
~ recompute stages=1
~ x(k=1)(y)
EOF
check "at least 50 strings were compared" test "$n" -ge 50
finish
