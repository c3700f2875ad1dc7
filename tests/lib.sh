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
# The long sweeps: `make test-full` sets PIPEC_TEST_FULL=1 and the suites run them whole
# (or at their larger sample); `make test` (PIPEC_TEST_FULL unset or 0) runs a fixed,
# deterministic sample of each (docs/performance.md, "The test suite").
test_full() { [ "${PIPEC_TEST_FULL:-0}" = 1 ]; }
# sample_points N K: K (>= 2) of the values 1..N spread evenly, the first and the last
# always among them, ascending; all N when N <= K.
sample_points() {
    awk -v n="$1" -v k="$2" 'BEGIN {
        if (n <= k || k < 2) { for (i = 1; i <= n; i++) print i; exit }
        for (i = 0; i < k; i++) { v = 1 + int(i * (n - 1) / (k - 1)); if (v != last) print v; last = v } }'
}
# Python through a version manager's shim (pyenv's python3 is a chain of shell scripts:
# about 0.7 CPU s a start on this machine against 30 ms for the interpreter itself) is
# looked up once: the interpreter's folder goes first on PATH, for this suite and all it
# starts. tests/run.sh does it once for every suite; a python3 that is not a script is
# left as it is.
python_direct() {
    local py
    py=$(command -v python3) || return 0
    [ "$py" = "${PIPEC_TEST_PYTHON:-}" ] && return 0   # python_nosite's, below
    [ "$(head -c 2 "$py" 2>/dev/null)" = "#!" ] || return 0
    py=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) || return 0
    [ -x "$py" ] && [ "$(head -c 2 "$py" 2>/dev/null)" != "#!" ] || return 0
    PATH=${py%/*}:$PATH
    export PATH
}
python_direct
# The suites' Python uses only the standard library (json, re, csv, html...), so it starts
# without the site module (python3 -S): site's start-up, site-packages and whatever its
# .pth files import, took 0.11 of the 0.16 CPU s of a start on the development machine,
# and the suites start Python about a thousand times. A two-line sh script in
# build/test-python/ runs the interpreter with -S; it goes first on PATH, for this suite
# and all it starts (PIPEC_TEST_PYTHON names it). Left out where there is no build/
# folder, where the interpreter cannot import json without site, or with
# PIPEC_TEST_PYTHON_SITE=1.
python_nosite() {
    local py dir=$PWD/build/test-python
    [ "${PIPEC_TEST_PYTHON_SITE:-0}" != 1 ] && [ -d "$PWD/build" ] || return 0
    [ "$(command -v python3)" = "$dir/python3" ] && return 0
    py=$(command -v python3) || return 0
    [ "$(head -c 2 "$py" 2>/dev/null)" = "#!" ] && return 0   # still a shim: leave it
    # the interpreter's real path: a wrapper through a link that goes away (a test's
    # temporary folder) would break every suite that shares build/test-python
    py=$("$py" -S -c 'import json, re, csv, html, os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null) &&
        [ -x "$py" ] || return 0
    if [ ! -x "$dir/python3" ] || [ "$(sed -n 2p "$dir/python3")" != "exec \"$py\" -S \"\$@\"" ]; then
        mkdir -p "$dir" || return 0
        printf '#!/bin/sh\nexec "%s" -S "$@"\n' "$py" >"$dir/python3.$$" && chmod +x "$dir/python3.$$" &&
            mv -f "$dir/python3.$$" "$dir/python3" || { rm -f "$dir/python3.$$"; return 0; }
    fi
    PATH=$dir:$PATH PIPEC_TEST_PYTHON=$dir/python3
    export PATH PIPEC_TEST_PYTHON
}
python_nosite
# gold_cc DIR: sets the array gold_cc to `env CC=DIR/cc_gold`, a wrapper of cc that links
# with gold, where the compiler can use it and neither CC nor PIPERUN_LIB is set from
# outside (make coverage sets its own runtime); else to nothing. The suites put it before
# `pipec run` for their grids of --check builds (pipec honours $CC): 0.6 against 0.75 CPU
# s a build on the development machine. The suites that check the build itself (t_targets,
# t_install, t_e2e's one-program and warning checks) keep the default linker.
gold_cc() {
    gold_cc=()
    [ -z "${CC:-}" ] && [ -z "${PIPERUN_LIB:-}" ] || return 0
    printf 'int main(void) { return 0; }\n' >"$1/ld_probe.c" &&
        cc -fuse-ld=gold -o "$1/ld_probe" "$1/ld_probe.c" 2>/dev/null || return 0
    printf '#!/bin/sh\nexec cc -fuse-ld=gold "$@"\n' >"$1/cc_gold" && chmod +x "$1/cc_gold" &&
        gold_cc=(env CC="$1/cc_gold")
}
