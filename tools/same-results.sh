#!/usr/bin/env bash
# tools/same-results.sh OLD_PIPEC NEW_PIPEC [EXAMPLE.pipe...] - the second name of
# `tools/same_outputs.sh --bins` (see there): two pipec builds compared on every example.
if [ $# -lt 2 ]; then
    sed -n '2,3p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
exec "$(dirname "$0")/same_outputs.sh" --bins "$@"
