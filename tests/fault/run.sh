#!/usr/bin/env bash
# tests/fault/run.sh - the allocation and I/O fault campaign.
#
#   tests/fault/run.sh [--sample K] SHIM
#
# SHIM is the LD_PRELOAD library built from tests/fault/faultinject.c. For each
# scenario (check of three examples; sim --json --svg --trace; emit over a folder an
# older emit wrote, the same on a file system without RENAME_EXCHANGE, emit into a new
# folder, and emit --backend cuda, whose stream plan allocates on its own; print -o;
# opt -o; sim --html; tune -o; import-csv -o; export-csv -o; compile -o over an older
# emit, with $CC a stand-in that writes the program, and compile --backend cuda the
# same with the stand-in as nvcc, which compiles the files in parallel and then links;
# skipped where the CUDA runtime is not built), a clean run counts the
# calls of every intercepted function (malloc calloc realloc fopen fwrite rename
# renameat2 fclose write mkdtemp fchmod close fork waitpid chmod lstat opendir readdir unlink
# rmdir); then the N-th call of one function
# fails, for every N (the full sweep) or, with --sample K, for K values of N spread over
# the range (always the first and the last). Every
# injected run must:
#   - end without a signal and without hanging (20 s), with exit status 0 or 1;
#   - with exit status 1, say what failed on stderr (a line starting "pipec: " or
#     "pipec COMMAND: ", or a located "error[");
#   - with exit status 0, produce exactly the outputs of the clean run (the fault was
#     one pipec may survive, such as a failed fclose of a file it only read);
#   - leave every output all old or all new: stdout empty or complete (for check, whole
#     lines of the clean run: one per file checked), each -o/--svg/
#     --trace file absent (or as before) or complete, the emit folder exactly the old
#     emit or exactly the new one, and no temporary file or folder beside them (but
#     for one that a "pipec: warning: cannot remove the old files in PATH" names: the
#     new folder is in place, and the old files it could not delete are left there).
# The last lines are "fault: R runs, F faults injected, E errors reported, S survived"
# and "N passed, N failed, N skipped" (tests/lib.sh).
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
sample=0
if [ "${1:-}" = --sample ]; then
    sample=$2
    shift 2
fi
shim=$(realpath "${1:?usage: tests/fault/run.sh [--sample K] SHIM}")
P=$(realpath "${PIPEC:-bin/pipec}")
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
funcs="malloc calloc realloc fopen fwrite rename renameat2 fclose write mkdtemp fchmod close fork
    waitpid chmod lstat opendir readdir unlink rmdir"
runs=0 injected=0 reported=0 survived=0

# is_empty DIR: whether DIR is a folder with nothing in it (shell globs, no process).
is_empty() {
    [ -d "$1" ] || return 1
    local e
    shopt -s nullglob dotglob
    e=("$1"/*)
    shopt -u nullglob dotglob
    [ "${#e[@]}" = 0 ]
}
# setup NAME: sets up $T/w (the work folder, cleared) for the scenario's command. Once
# the clean run has kept the folder it starts from ($T/ref_NAME/w0), a copy of that;
# an empty folder that is to stay empty is left as it is (most failed runs write
# nothing: no rm, mkdir or cp for them).
setup() {
    if [ -d "$T/ref_$1/w0" ]; then
        if is_empty "$T/ref_$1/w0"; then
            is_empty "$T/w" && return 0
            rm -rf "$T/w" && mkdir "$T/w"
        else
            rm -rf "$T/w" && cp -r "$T/ref_$1/w0" "$T/w"
        fi
        return
    fi
    rm -rf "$T/w"
    mkdir -p "$T/w"
    case $1 in
    emit | emit_noexchange | compile | compile_cuda) cp -r "$T/ref_old_gen" "$T/w/gen" ;;
    print) cp "$T/ref_old_print" "$T/w/out.pipe" ;;
    esac
}
command_of() {
    case $1 in
    check) echo check examples/demo.pipe examples/tiny_1f1b.pipe examples/obscura_llama2_18b_gb16.pipe ;;
    sim) echo sim examples/demo.pipe --json --svg "$T/w/t.svg" --trace "$T/w/t.json" ;;
    emit | emit_noexchange | emit_new) echo emit examples/demo.pipe -o "$T/w/gen" ;;
    emit_cuda) echo emit --backend cuda examples/demo.pipe -o "$T/w/gen" ;;
    compile) echo compile examples/demo.pipe -o "$T/w/gen" ;;
    compile_cuda) echo compile --backend cuda examples/demo.pipe -o "$T/w/gen" ;;
    print) echo print examples/obscura_llama2_18b_gb16.pipe -o "$T/w/out.pipe" ;;
    opt) echo opt examples/demo.pipe --pass recompute -o "$T/w/opt.pipe" ;;
    sim_html) echo sim examples/demo.pipe --html "$T/w/t.html" ;;
    tune) echo tune --budget 10 examples/tiny_1f1b.pipe -o "$T/w/best.pipe" ;;
    import_csv) echo import-csv tests/csv/zb1p_2rank_2stagep_compute.csv -o "$T/w/in.pipe" ;;
    export_csv) echo export-csv examples/tiny_1f1b.pipe -o "$T/w/out.csv" ;;
    esac
}

# compile's C compiler: a stand-in that writes the program named after -o; and the
# same as nvcc (on PATH first), which compile --backend cuda runs once per file (in
# parallel) and then to link.
printf '#!/bin/sh\nwhile [ $# -gt 0 ]; do\n  if [ "$1" = -o ]; then printf "program\\n" >"$2" && chmod +x "$2"; exit $?; fi\n  shift\ndone\nexit 1\n' >"$T/cc"
chmod +x "$T/cc"
mkdir -p "$T/bin"
cp "$T/cc" "$T/bin/nvcc"

# The old contents the emit and print scenarios overwrite.
"$P" emit examples/tiny_1f1b.pipe -o "$T/ref_old_gen" >/dev/null || exit 1
"$P" print examples/tiny_1f1b.pipe -o "$T/ref_old_print" || exit 1

# outputs_ok NAME RC: whether $T/w and $T/out are all old or all new (against the clean
# run's copy in $T/ref_NAME); with RC 0 they must be all new. When not, $why says why.
# (Called as it is, not in a $(...) subshell: a fork saved for each of the runs.)
outputs_ok() {
    local name=$1 rc=$2 ref=$T/ref_$name
    # a folder of old files that pipec said it could not remove: no longer an output
    local left="" line
    while IFS= read -r line; do
        case $line in "pipec: warning: cannot remove the old files in "*)
            left=${line#"pipec: warning: cannot remove the old files in "} ;;
        esac
    done <"$T/err"
    if [ -n "$left" ]; then
        case $left in
        "$T"/w/*.tmp?????? | "$T"/w/*.old??????) rm -rf "$left" ;;
        *) why="the warning names $left, not a temporary of the output folder"; return 1 ;;
        esac
    fi
    if [ -s "$T/out" ] && ! cmp -s "$T/out" "$ref/out"; then
        # check reports each file on its own line: a failure in a later file keeps
        # the complete lines of the earlier ones
        if [ "$name" != check ] || [ -n "$(tail -c 1 "$T/out")" ] ||
           grep -qvxF -f "$ref/out" "$T/out"; then
            why="stdout is neither empty nor complete"
            return 1
        fi
    fi
    if [ "$rc" = 0 ] && ! cmp -s "$T/out" "$ref/out"; then
        why="exit 0 with a different stdout"
        return 1
    fi
    # The common outcomes, the outputs all old (a reported error) or all new, pass every
    # check below: settle them with one or two diffs, or none where the run failed and
    # both the work folder and its old contents are empty.
    if [ "$rc" != 0 ] && is_empty "$T/w" && is_empty "$ref/w0"; then
        return 0
    fi
    if { [ "$rc" != 0 ] && diff -rq "$T/w" "$ref/w0" >/dev/null 2>&1; } ||
       diff -rq "$T/w" "$ref/w" >/dev/null 2>&1; then
        return 0
    fi
    local f
    for f in $(cd "$ref/w" && find . -type f); do
        if [ -e "$T/w/$f" ] && ! cmp -s "$T/w/$f" "$ref/w/$f" && ! cmp -s "$T/w/$f" "$ref/w0/$f" 2>/dev/null; then
            why="$f is half-written"
            return 1
        fi
    done
    case $name in
    emit | emit_noexchange)
        if ! diff -rq "$T/w/gen" "$ref/w/gen" >/dev/null 2>&1 && ! diff -rq "$T/w/gen" "$T/ref_old_gen" >/dev/null 2>&1; then
            why="the emit folder is a mix of old and new: $(diff -rq "$T/w/gen" "$T/ref_old_gen" 2>&1 | head -3 | tr '\n' ' ')"
            return 1
        fi
        ;;
    compile | compile_cuda)
        # the emitted files all old or all new; after a failed build, no program (and
        # with cuda, any of the objects nvcc wrote before the build failed)
        if ! diff -rq "$T/w/gen" "$ref/w/gen" >/dev/null 2>&1 && ! diff -rq "$T/w/gen" "$T/ref_old_gen" >/dev/null 2>&1 &&
           ! { [ "$rc" = 1 ] && [ ! -e "$T/w/gen/demo" ] &&
               diff -rq -x demo -x '*.o' "$T/w/gen" "$ref/w/gen" >/dev/null 2>&1 &&
               ! diff -rq -x demo "$T/w/gen" "$ref/w/gen" 2>&1 | grep -v '^Only in [^:]*: [a-z_0-9]*\.o$' | grep -q .; }; then
            why="the compile folder is neither old, new, nor new without its program"
            return 1
        fi
        ;;
    emit_new | emit_cuda)
        if [ -e "$T/w/gen" ] && ! diff -rq "$T/w/gen" "$ref/w/gen" >/dev/null 2>&1; then
            why="the new emit folder is incomplete"
            return 1
        fi
        ;;
    esac
    if [ "$rc" = 0 ] && ! diff -rq "$T/w" "$ref/w" >/dev/null; then
        why="exit 0 with different outputs"
        return 1
    fi
    local extra
    extra=$(cd "$T/w" && find . | grep -E '\.(tmp|old)[A-Za-z0-9]{6}' | head -1)
    if [ -n "$extra" ]; then
        why="left a temporary behind: $extra"
        return 1
    fi
    return 0
}

# said FILE: whether a line of FILE starts "pipec: " or "pipec COMMAND: ", or has a
# located "error[" (grep -E '^pipec( [a-z-]+)?: |error\[' without a process).
said() {
    local text re=$'\n''pipec( [a-z-]+)?: |error\['
    IFS= read -r -d '' text <"$1"
    [[ $'\n'$text =~ $re ]]
}
# env_of NAME: the shim's settings besides FAULT_FUNC/FAULT_N/FAULT_COUNT.
env_of() {
    case $1 in
    emit_noexchange) echo FAULT_NO_EXCHANGE=1 ;;
    compile) echo CC="$T/cc" ;;
    compile_cuda) echo PATH="$T/bin:$PATH" ;;
    *) echo FAULT_NO_EXCHANGE=0 ;;
    esac
}

for name in check sim emit emit_noexchange emit_new emit_cuda print opt sim_html tune import_csv \
    export_csv compile compile_cuda; do
    # the clean run: reference outputs and call counts
    setup $name
    mkdir -p "$T/ref_$name"
    cp -r "$T/w" "$T/ref_$name/w0"
    rm -f "$T/count"
    # shellcheck disable=SC2046
    env $(env_of $name) FAULT_COUNT="$T/count" LD_PRELOAD=$shim "$P" $(command_of $name) >"$T/ref_$name/out" 2>"$T/err"
    rc=$?
    if [ $rc != 0 ] && [ $name = compile_cuda ] && grep -q 'cannot find libpiperun_cuda\.a' "$T/err"; then
        skip "$name" "the CUDA runtime is not built here (make cuda)"
        continue
    elif [ $rc != 0 ]; then
        bad "$name: clean run" "exit $rc: $(head -c 300 "$T/err")"
        continue
    fi
    cp -r "$T/w" "$T/ref_$name/w"
    envs=$(env_of $name) cmd=$(command_of $name)
    for fn in $funcs; do
        n=$(awk -v f="$fn" '$1 == f { print $2 }' "$T/count")
        [ "${n:-0}" -gt 0 ] || continue
        if [ "$sample" -gt 0 ] && [ "$n" -gt "$sample" ]; then
            points=$(sample_points "$n" "$sample")
        else
            points=$(seq 1 "$n")
        fi
        for k in $points; do
            setup $name
            # shellcheck disable=SC2046
            env $envs FAULT_FUNC=$fn FAULT_N=$k LD_PRELOAD=$shim timeout 20 "$P" $cmd >"$T/out" 2>"$T/err"
            rc=$?
            runs=$((runs + 1))
            injected=$((injected + 1))
            what="$name, $fn #$k of $n"
            if [ $rc -ge 124 ]; then
                bad "$what" "exit $rc (signal or timeout): $(head -c 300 "$T/err")"
            elif [ $rc != 0 ] && [ $rc != 1 ]; then
                bad "$what" "exit $rc"
            elif [ $rc = 1 ] && ! said "$T/err"; then
                bad "$what" "exit 1 without a message: $(head -c 300 "$T/err")"
            elif ! outputs_ok $name $rc; then
                bad "$what" "$why"
            else
                ok
                if [ $rc = 1 ]; then reported=$((reported + 1)); else survived=$((survived + 1)); fi
            fi
        done
    done
done
echo "fault: $runs runs, $injected faults injected, $reported errors reported, $survived survived"
finish
