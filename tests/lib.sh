# tests/lib.sh - helpers for the shell test suites (sourced by tests/t_*.sh).
# ok NAME / bad NAME MESSAGE record results; finish prints "N passed, N failed, N skipped"
# and exits non-zero on a failure. Sources of truth stay in the test files themselves.
T_PASS=0 T_FAIL=0 T_SKIP=0
PIPEC="${PIPEC:-bin/pipec}"
PIPEC_ASAN="${PIPEC_ASAN:-$PIPEC}"
ok()   { T_PASS=$((T_PASS + 1)); }
bad()  { T_FAIL=$((T_FAIL + 1)); echo "FAIL: $1${2:+: $2}"; }
skip() { T_SKIP=$((T_SKIP + 1)); echo "SKIP: $1${2:+: $2}"; }
# check NAME COND...: runs the command; ok when it succeeds
check() { local n=$1; shift; if "$@"; then ok; else bad "$n"; fi; }
finish() { echo "$T_PASS passed, $T_FAIL failed, $T_SKIP skipped"; [ "$T_FAIL" = 0 ]; }
