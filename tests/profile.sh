#!/usr/bin/env bash
# tests/profile.sh - where a shell suite's time goes: runs it under bash's xtrace with a
# clock in each trace line and prints the source lines that took the most wall time
# (the time from a traced command to the next traced command, summed per FILE:LINE,
# with the number of times the line ran). Not a test (tests/run.sh runs only t_*.sh).
#
#   tests/profile.sh tests/t_lynx.sh [TOP]
#
# On an idle machine wall time is about CPU time for a suite that runs one thing at a
# time; docs/performance.md "The test suite" lists what it found.
set -u
cd "$(dirname "$0")/.." || exit 1
suite=${1:?usage: tests/profile.sh tests/t_NAME.sh [TOP]}
top=${2:-25}
trace=$(mktemp) env_file=$(mktemp); trap 'rm -f "$trace" "$env_file"' EXIT
# every bash the suite starts reads $BASH_ENV first: the clock into PS4 (bash does not
# take PS4 from the environment), and the trace on
printf '%s\n' 'PS4='"'"'+@${EPOCHREALTIME}@${BASH_SOURCE[0]##*/}:${LINENO}@ '"'" 'set -x' >"$env_file"
exec 9>"$trace"
t0=$EPOCHREALTIME
BASH_XTRACEFD=9 BASH_ENV=$env_file bash "$suite" >/dev/null 2>&1
t1=$EPOCHREALTIME
exec 9>&-
echo "$suite: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s wall"
awk -F@ -v end="$t1" '
    /^\++@[0-9]/ { if (prev != "") { d[prev] += $2 - pt; n[prev]++ } prev = $3; pt = $2 }
    END { if (prev != "") { d[prev] += end - pt; n[prev]++ }
          for (k in d) printf "%8.2f s %6d x  %s\n", d[k], n[k], k }' "$trace" | sort -rn | head -n "$top"
