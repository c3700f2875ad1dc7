#!/usr/bin/env bash
# t_testsuite.sh - the test suite's own switches (docs/performance.md "The test suite"):
#   - `make test` runs the suites with PIPEC_TEST_FULL=0, `make test-full` with 1 (read
#     from the commands `make -n` prints);
#   - test_full (tests/lib.sh) is true only for PIPEC_TEST_FULL=1: unset, empty and 0
#     select the sample;
#   - sample_points picks the values written out here by hand: the first and the last
#     always, K spread evenly (1 + floor(i (N - 1) / (K - 1))), all of them when N <= K;
#   - python_direct (tests/lib.sh) puts the interpreter a python3 shim runs first on
#     PATH, and leaves PATH as it is when python3 is the interpreter; python_nosite
#     then puts a python3 that starts it with -S first, once, unless
#     PIPEC_TEST_PYTHON_SITE=1;
#   - `make test` runs the plain unit binaries (build/tests/plain/), `make test-full`
#     none, and the examples tests/unit/testutil.h names heavy exist;
#   - the sampled suites take their size from test_full: the default path (no
#     PIPEC_TEST_FULL) gives the sample, PIPEC_TEST_FULL=1 the whole sweep;
#   - tests/run.sh starts the longest suites first: without a last run's times (a
#     fresh clone) in the order of tests/suite-times, a suite it does not list first;
#     a last run's times (PIPEC_TEST_TIMES) take precedence.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh

# --- the Makefile ----------------------------------------------------------------------
# `make -n` prints the recipes; a recursive $(MAKE) line still runs, with -n itself.
# Continued lines joined.
recipe() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u TEST_FULL make -n "$1" 2>/dev/null |
    sed -e ':a' -e '/\\$/N; s/\\\n//; ta' | grep 'tests/run.sh'; }
n_test=$(recipe test)
n_full=$(recipe test-full)
case $n_test in *"PIPEC_TEST_FULL=0 "*) ok ;; *) bad "make test runs tests/run.sh with PIPEC_TEST_FULL=0" "$n_test" ;; esac
case $n_full in *"PIPEC_TEST_FULL=1 "*) ok ;; *) bad "make test-full runs tests/run.sh with PIPEC_TEST_FULL=1" "$n_full" ;; esac
check ".ci/run runs make test" grep -qx 'make test' .ci/run
# the plain unit binaries (the heavy examples the sanitizer build leaves out) run in
# `make test` only; `make test-full` checks every example under the sanitizers
for b in test_cuda_host test_stream_plan; do
    case $n_test in *" build/tests/plain/$b"*) ok ;; *) bad "make test runs build/tests/plain/$b" "$n_test" ;; esac
    case $n_full in *"/plain/"*) bad "make test-full runs no plain unit binary" "$n_full" ;; *) ok ;; esac
done
# each of tests/unit/testutil.h's heavy_examples is an example
heavy=$(sed -n '/^static const char \*const heavy_examples/,/^};/p' tests/unit/testutil.h | grep -o '[a-z0-9_]*\.pipe')
check "testutil.h: six heavy examples" test "$(echo "$heavy" | wc -w)" = 6
for f in $heavy; do check "testutil.h heavy example $f exists" test -f "examples/$f"; done

# --- test_full -------------------------------------------------------------------------
check "test_full: unset is the sample" bash -c 'unset PIPEC_TEST_FULL; . tests/lib.sh; ! test_full'
check "test_full: empty is the sample" bash -c 'PIPEC_TEST_FULL= ; . tests/lib.sh; ! test_full'
check "test_full: 0 is the sample" env PIPEC_TEST_FULL=0 bash -c '. tests/lib.sh; ! test_full'
check "test_full: 1 is the whole sweep" env PIPEC_TEST_FULL=1 bash -c '. tests/lib.sh; test_full'

# --- sample_points ---------------------------------------------------------------------
sp() { sample_points "$1" "$2" | tr '\n' ' '; }
check "sample_points 100 4: 1 34 67 100" test "$(sp 100 4)" = "1 34 67 100 "
check "sample_points 10 3: 1 5 10" test "$(sp 10 3)" = "1 5 10 "
check "sample_points 3 8: all three" test "$(sp 3 8)" = "1 2 3 "
check "sample_points 6 6: all six" test "$(sp 6 6)" = "1 2 3 4 5 6 "
check "sample_points 7 6: 1 2 3 4 5 7" test "$(sp 7 6)" = "1 2 3 4 5 7 "
check "sample_points 1 6: 1" test "$(sp 1 6)" = "1 "
# 527 calls (check's malloc count in the fault campaign) at 30: steps of 526/29 = 18.14
check "sample_points 527 30: 30 values, 1 19 37 ... 508 527" \
    test "$(sp 527 30 | wc -w) $(sp 527 30 | cut -d' ' -f1-3) $(sp 527 30 | cut -d' ' -f29-30)" = "30 1 19 37 508 527"

# --- python_direct: a python3 that is a script (a version manager's shim) is looked past
# (PATH without python_nosite's folder: python3 as the environment has it)
PATH=$(printf '%s' "$PATH" | tr : '\n' | grep -v '/build/test-python$' | paste -sd: -)
real=$(python3 -c 'import sys; print(sys.executable)')
shim=$(mktemp -d)
printf '#!/bin/sh\nexec "%s" "$@"\n' "$real" >"$shim/python3"
chmod +x "$shim/python3"
# (python_nosite left out: PIPEC_TEST_PYTHON_SITE=1)
check "python_direct: past a shim to the interpreter ($real)" \
    test "$(PATH=$shim:$PATH PIPEC_TEST_PYTHON_SITE=1 bash -c '. tests/lib.sh; command -v python3')" = "$real"
mkdir "$shim/direct" && ln -s "$real" "$shim/direct/python3"
check "python_direct: an interpreter first on PATH is left as it is" \
    test "$(PATH=$shim/direct:$PATH PIPEC_TEST_PYTHON_SITE=1 bash -c '. tests/lib.sh; echo "$PATH"')" = "$shim/direct:$PATH"

# --- python_nosite: the suites' python3 starts without the site module, from a shim too
# (in a folder of its own with its own build/: the tree's build/test-python is shared by
# the suites running beside this one)
nd=$shim/tree; mkdir -p "$nd/build"
lib=$PWD/tests/lib.sh
nosite() { (cd "$nd" && PATH=$1:$PATH bash -c ". '$lib'; $2"); }
for p in "$shim" "$shim/direct"; do
    check "python_nosite: python3 is build/test-python/python3 (PATH from $p)" \
        test "$(nosite "$p" 'command -v python3')" = "$nd/build/test-python/python3"
    check "python_nosite: -S, the standard library there (PATH from $p)" \
        test "$(nosite "$p" 'python3 -c "import json, sys; print(sys.flags.no_site, json.dumps(1))"')" = "1 1"
    check "python_nosite: runs the interpreter by its real path, not a link (PATH from $p)" \
        grep -qF "exec \"$(realpath "$real")\" -S" "$nd/build/test-python/python3"
done
check "python_nosite: sourced twice, put on PATH once" \
    test "$(nosite "$shim/direct" ". '$lib'; echo \"\$PATH\"" | tr : '\n' | grep -c '/build/test-python$')" = 1
check "python_nosite: PIPEC_TEST_PYTHON_SITE=1 keeps site" \
    test "$(PIPEC_TEST_PYTHON_SITE=1 nosite "$shim/direct" 'python3 -c "import sys; print(sys.flags.no_site)"')" = 0
rm -rf "$shim"

# --- the sampled suites follow test_full -------------------------------------------------
# t_fault.sh: the fault campaign's --sample (its run.sh replaced by a stand-in that
# prints its arguments).
fault_k() { # prints the --sample t_fault.sh passes under the environment given
    local tmp
    tmp=$(mktemp -d)
    mkdir -p "$tmp/tests/fault" "$tmp/build/fault"
    cp tests/t_fault.sh tests/lib.sh "$tmp/tests/"
    : >"$tmp/build/fault/faultinject.so"
    printf '#!/usr/bin/env bash\necho "$@"\n' >"$tmp/tests/fault/run.sh"
    env "$@" bash "$tmp/tests/t_fault.sh"
    rm -rf "$tmp"
}
check "t_fault: the default path samples 3 values of N" test "$(fault_k -u PIPEC_TEST_FULL)" = "--sample 3 build/fault/faultinject.so"
check "t_fault: PIPEC_TEST_FULL=1 samples 30" test "$(fault_k PIPEC_TEST_FULL=1)" = "--sample 30 build/fault/faultinject.so"
# tf_grid (tests/lib_tf.sh): the points it runs (pipe and run_check stand-ins), whole
# (46: 23 per arch) and with TF_GRID_SAMPLE=1 (31: 4 of the 8 1F1B-like points per arch,
# each of the 7 peers' schedules under one arch)
tf_points() {
    bash -c 'T=$(mktemp -d); . tests/lib_tf.sh; n=0; pipe() { :; }; run_check() { n=$((n + 1)); }
             TF_GRID_SAMPLE=$0; tf_grid 2>/dev/null; rm -rf "$T"; echo "$n"' "$1"
}
check "tf_grid: 46 points whole" test "$(tf_points 0)" = 46
check "tf_grid: 31 with TF_GRID_SAMPLE=1" test "$(tf_points 1)" = 31
check "t_transformer: the sample unless test_full" grep -qx 'test_full || TF_GRID_SAMPLE=1' tests/t_transformer.sh

# --- the order of tests/run.sh (PIPEC_TEST_LIST=1 prints it and runs nothing) -------------
order=$(PIPEC_TEST_TIMES=/nonexistent PIPEC_TEST_LIST=1 env -u PIPEC_TEST_ONLY bash tests/run.sh build/tests/test_sim)
# the listed names in the order of their seconds in tests/suite-times; the unlisted ones
# (the serial suites at the end aside) before them
listed=$(grep -vx 't_install.sh\|t_install_docs.sh\|t_targets.sh' <<<"$order" |
    awk 'NR == FNR { if ($1 !~ /^#/) t[$2] = $1; next } ($1 in t) { print t[$1] }' tests/suite-times -)
check "run.sh: a fresh clone's order follows tests/suite-times" test "$listed" = "$(sort -rn <<<"$listed")"
check "run.sh: the longest suite in tests/suite-times first" \
    test "$(head -n 1 <<<"$order")" = "$(grep -v '^#' tests/suite-times | sort -rn | awk -v s=" $(tr '\n' ' ' <<<"$order")" 'index(s, " " $2 " ") { print $2; exit }')"
tt=$(mktemp)
printf '5000 t_cli.sh\n4000 test_sim\n' >"$tt"
order=$(PIPEC_TEST_TIMES=$tt PIPEC_TEST_LIST=1 env -u PIPEC_TEST_ONLY bash tests/run.sh build/tests/test_sim)
check "run.sh: the last run's times before tests/suite-times" test "$(head -n 2 <<<"$order" | tr '\n' ' ')" = "t_cli.sh test_sim "
check "run.sh: the serial suites last" test "$(tail -n 3 <<<"$order" | sort | tr '\n' ' ')" = "t_install.sh t_install_docs.sh t_targets.sh "
printf '5000 t_no_such_suite.sh\n' >"$tt"
order=$(PIPEC_TEST_TIMES=$tt PIPEC_TEST_LIST=1 env -u PIPEC_TEST_ONLY bash tests/run.sh)
check "run.sh: a name that is no suite runs nothing" test -z "$(grep -x t_no_such_suite.sh <<<"$order")"
rm -f "$tt"
finish
