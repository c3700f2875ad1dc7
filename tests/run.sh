#!/usr/bin/env bash
# Runs every test: the cmocka unit-test binaries given as arguments, then every
# tests/t_*.sh suite. Each suite prints a last line "N passed, N failed"; cmocka
# binaries print "[  PASSED  ] N test(s)." / "[  FAILED  ] N test(s)...". The totals
# close the run as "N passed, N failed, N skipped".
#
# Independent suites run concurrently, PIPEC_TEST_JOBS at a time (default: the number of
# CPUs; 1 runs them one after another). Each suite's output is printed whole when it ends,
# with its wall time, the slowest first (by their times in the last run, else
# tests/suite-times). The suites that
# rebuild or install the tree itself (SERIAL below) run alone, after the others. The
# slowest suites are listed at the end. PIPEC_TEST_FULL=1 (make test-full) has the
# suites run their long sweeps whole instead of a sample (tests/lib.sh test_full).
# PIPEC_TEST_ONLY="t_sim.sh t_cli.sh" runs only the suites named (and the binaries given).
set -u
cd "$(dirname "$0")/.."
export PIPEC="${PIPEC:-$PWD/bin/pipec}"
export PIPEC_ASAN="${PIPEC_ASAN:-$PIPEC}"
export PIPEC_STDLIB="${PIPEC_STDLIB:-$PWD/stdlib}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# python3 looked up once for every suite (tests/lib.sh python_direct)
. tests/lib.sh
jobs=${PIPEC_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
case $jobs in ''|*[!0-9]*|0) echo "tests/run.sh: PIPEC_TEST_JOBS must be a positive integer" >&2; exit 2 ;; esac
SERIAL=" t_install.sh t_install_docs.sh t_targets.sh "
pass=0 fail=0 skip=0 failed_suites=""
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT

count() { # $1 = suite name, $2 = its output file, $3 = its exit status
    local p f s log=$2
    p=$(grep -aoE '\[  PASSED  \] [0-9]+ test' "$log" | awk '{s+=$4} END{print s+0}')
    f=$(grep -aoE '\[  FAILED  \] [0-9]+ test' "$log" | awk '{s+=$4} END{print s+0}')
    s=$(grep -aoE '\[  SKIPPED \] [0-9]+ test' "$log" | awk '{s+=$4} END{print s+0}')
    local line
    line=$(grep -aE '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -n "$line" ]; then
        p=$((p + $(echo "$line" | awk '{print $1}')))
        f=$((f + $(echo "$line" | awk '{print $3}')))
        s=$((s + $(echo "$line" | sed -n 's/.* \([0-9][0-9]*\) skipped.*/\1/p' | grep . || echo 0)))
    fi
    if [ "$3" != 0 ] && [ "$f" = 0 ]; then f=1; fi   # a crash counts as a failure
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    [ "$f" = 0 ] || failed_suites="$failed_suites $1"
}

# run_one I NAME CMD...: runs one suite into $dir/I.out; its status, wall seconds and
# CPU seconds (user + system of the suite and all it started and waited for: bash's
# `times` for this subshell's children) go to $dir/I.rc, $dir/I.cpu and, last, $dir/I.sec.
run_one() {
    local i=$1 t0=$SECONDS; shift 2
    "$@" >"$dir/$i.out" 2>&1
    echo $? >"$dir/$i.rc"
    times >"$dir/$i.times"   # not in a pipeline: that would be a child with no children
    awk 'NR == 2 { u = $1; s = $2; sub(/m/, " ", u); sub(/s$/, "", u); sub(/m/, " ", s); sub(/s$/, "", s)
        split(u, a, " "); split(s, b, " "); printf "%.0f\n", a[1] * 60 + a[2] + b[1] * 60 + b[2] }' \
        "$dir/$i.times" >"$dir/$i.cpu"
    echo $((SECONDS - t0)) >"$dir/$i.sec"
}

# report I NAME: prints a finished suite and adds it to the totals.
report() {
    local out=$dir/$1.out
    echo "== $2 ($(cat "$dir/$1.sec") s, $(cat "$dir/$1.cpu") CPU s)"
    case $2 in
        t_*) cat "$out" ;;
        *) grep -avE '^\[ (RUN|      OK) ' "$out" ;;
    esac
    count "$2" "$out" "$(cat "$dir/$1.rc")"
    echo "$(cat "$dir/$1.sec") $2" >>"$dir/times"
    echo "$(cat "$dir/$1.cpu") $2" >>"$dir/cpu"
}

names=() cmds=() serial=()
# a binary's name: its file name, with the folder for those built without the sanitizers
# (build/tests/plain/test_x: plain/test_x)
for bin in "$@"; do
    case $bin in */plain/*) names+=("plain/$(basename "$bin")") ;; *) names+=("$(basename "$bin")") ;; esac
    cmds+=("$bin")
done
for suite in tests/t_*.sh; do
    [ -e "$suite" ] || continue
    name=$(basename "$suite")
    if [ -n "${PIPEC_TEST_ONLY:-}" ]; then case " $PIPEC_TEST_ONLY " in *" $name "*) ;; *) continue ;; esac; fi
    case $SERIAL in *" $name "*) serial+=("$suite"); continue ;; esac
    names+=("$name"); cmds+=("bash $suite")
done

# Longest first: the suites' seconds in the last run (build/test-times, written at the
# end; PIPEC_TEST_TIMES names another file) order them, slowest first, so that the long
# ones do not start last and leave one CPU idle at the end. A suite the last run did not
# time (a fresh clone has no build/test-times) takes its CPU seconds from
# tests/suite-times (measured on an idle machine, kept in the tree: docs/performance.md
# "The test suite"); suites in neither (new ones) go first.
# PIPEC_TEST_LIST=1 prints the names in that order and runs nothing.
times_file=${PIPEC_TEST_TIMES:-build/test-times}
declare -A prev=()
for f in tests/suite-times "$times_file"; do
    [ -s "$f" ] || continue
    while read -r sec name; do
        case $sec in ''|'#'*) continue ;; esac
        prev[$name]=$sec
    done <"$f"
done
order=$(for i in "${!names[@]}"; do echo "${prev[${names[$i]}]:-999999} $i"; done | sort -k1,1nr -k2,2n | cut -d' ' -f2)
n_=() c_=()
for i in $order; do n_+=("${names[$i]}"); c_+=("${cmds[$i]}"); done
names=("${n_[@]}") cmds=("${c_[@]}")
if [ "${PIPEC_TEST_LIST:-0}" = 1 ]; then
    printf '%s\n' "${names[@]}"
    for suite in "${serial[@]}"; do basename "$suite"; done
    exit 0
fi

# The concurrent part: at most $jobs suites at once, each reported when it ends.
declare -A running=()
next=0 n=${#names[@]}
while [ "$next" -lt "$n" ] || [ "${#running[@]}" -gt 0 ]; do
    while [ "$next" -lt "$n" ] && [ "${#running[@]}" -lt "$jobs" ]; do
        # shellcheck disable=SC2086
        run_one "$next" "${names[$next]}" ${cmds[$next]} &
        running[$next]=$!
        next=$((next + 1))
    done
    wait -n 2>/dev/null || true
    for i in "${!running[@]}"; do
        if [ -e "$dir/$i.sec" ]; then
            wait "${running[$i]}" 2>/dev/null
            unset "running[$i]"
            report "$i" "${names[$i]}"
        fi
    done
done

# The suites that rebuild or install the tree, alone.
i=$n
for suite in "${serial[@]}"; do
    (run_one "$i" "$(basename "$suite")" bash "$suite")   # a subshell: its own CPU times
    report "$i" "$(basename "$suite")"
    i=$((i + 1))
done

echo "slowest suites (s):$(sort -rn "$dir/times" | head -n 5 | awk '{printf " %s %s,", $2, $1}' | sed 's/,$//')"
echo "most CPU (s):$(sort -rn "$dir/cpu" | head -n 5 | awk '{printf " %s %s,", $2, $1}' | sed 's/,$//'); all suites: $(awk '{s += $1} END {print s + 0}' "$dir/cpu") CPU s in $SECONDS s"
# this run's times for the next one's order (a run of some suites only updates theirs)
if [ -d build ] && [ -z "${PIPEC_TEST_TIMES:-}" ]; then
    { [ -s "$times_file" ] && awk 'NR == FNR { seen[$2] = 1; next } !($2 in seen)' "$dir/times" "$times_file"
      cat "$dir/times"; } >"$times_file.tmp" 2>/dev/null && mv "$times_file.tmp" "$times_file"
    # and their CPU seconds (build/test-cpu: docs/performance.md "Times")
    { [ -s build/test-cpu ] && awk 'NR == FNR { seen[$2] = 1; next } !($2 in seen)' "$dir/cpu" build/test-cpu
      cat "$dir/cpu"; } >build/test-cpu.tmp 2>/dev/null && mv build/test-cpu.tmp build/test-cpu
fi
if [ "${PIPEC_TEST_FULL:-0}" = 1 ]; then echo "the long sweeps ran whole (PIPEC_TEST_FULL=1)"
else echo "the long sweeps ran a sample (make test-full runs them whole)"; fi
[ -z "$failed_suites" ] || echo "failing suites:$failed_suites"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
