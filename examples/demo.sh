#!/usr/bin/env bash
# examples/demo.sh - what `make demo` runs: the main job on the shipped examples.
#
# A list of steps, each a shell function named step_NAME listed in STEPS. A step whose
# pipec command is not built yet is skipped with a note, so steps can be appended as
# the compiler grows. The demo fails (exit 1) when a step fails.
set -u
cd "$(dirname "$0")/.."
PIPEC=${PIPEC:-bin/pipec}
EXAMPLE=${EXAMPLE:-examples/tiny_1f1b.pipe}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

STEPS="check summary print opt sim run train transformers"
failed=""

say() { printf '\n== %s\n' "$*"; }

# built CMD: whether `pipec CMD` is more than a stand-in.
built() { ! "$PIPEC" "$1" </dev/null 2>&1 | grep -q "is not built yet"; }

# needs CMD...: skips the calling step (returns 1) when one of the commands is missing.
needs() {
    local c
    for c in "$@"; do
        if ! built "$c"; then
            echo "(skipped: 'pipec $c' is not built yet)"
            return 1
        fi
    done
}

# Every example passes check (templates expanded, passes applied, memory walked), except
# those whose header documents a failing check ("pipec check FILE ... exit 1": the
# papers' out-of-memory baselines), which must fail.
step_check() {
    say "pipec check examples/*.pipe"
    local f rc=0
    for f in examples/*.pipe; do
        if grep -qE '^#.*pipec check.*exit 1' "$f"; then
            if "$PIPEC" check "$f" >/dev/null 2>"$tmp/err"; then
                echo "$f: passed check, but its header says it must fail"
                rc=1
            else
                echo "$f: fails as its header documents; first diagnostic:"
                grep -m 1 'error\[' "$tmp/err" | sed 's/^/    /'
            fi
        else
            "$PIPEC" check "$f" || rc=1
        fi
    done
    return $rc
}

# One line per example: its shape and op counts per kind.
step_summary() {
    say "summary of examples/*.pipe"
    printf '%-40s %6s %6s %6s %9s %s\n' file stages mbs chunks ops "ops by kind"
    local f rc=0
    for f in examples/*.pipe; do
        if ! "$PIPEC" print "$f" >"$tmp/p.pipe" 2>"$tmp/err"; then
            printf '%-40s %s\n' "$f" "does not compile:"
            cat "$tmp/err"
            rc=1
            continue
        fi
        awk -v f="$f" '
            /^  stages /       { P = $2 }
            /^  microbatches / { M = $2 }
            /^  chunks /       { V = $2 }
            /^  stage [0-9]+ \{/ { inops = 1 }
            inops {
                for (i = 1; i <= NF; i++)
                    if ($i ~ /^(F|B|W|R|SO|SI)[0-9]/) { k = $i; sub(/[0-9].*/, "", k); n[k]++; total++ }
                if ($0 ~ /\}/) inops = 0
            }
            END {
                kinds = ""
                split("F B W R SO SI", order, " ")
                for (j = 1; j <= 6; j++) if (n[order[j]]) kinds = kinds sprintf("%s=%d ", order[j], n[order[j]])
                printf "%-40s %6d %6d %6d %9d %s\n", f, P, M, V, total, kinds
            }' "$tmp/p.pipe"
    done
    return $rc
}

# The canonical explicit form, the text two variants are diffed as.
step_print() {
    say "pipec print $EXAMPLE"
    "$PIPEC" print "$EXAMPLE"
}

# A pass from the command line: on-demand recomputation on the first two ranks inserts
# R ops just before their backwards (Obscura §3.1).
step_opt() {
    say "pipec opt $EXAMPLE --pass 'recompute(stages=0..=1, policy=full)'"
    "$PIPEC" opt "$EXAMPLE" --pass 'recompute(stages=0..=1, policy=full)' >"$tmp/opt.pipe" || return 1
    echo "(what changed against pipec print:)"
    "$PIPEC" print "$EXAMPLE" >"$tmp/orig.pipe" || return 1
    diff -u "$tmp/orig.pipe" "$tmp/opt.pipe" | sed -n '3,$p' | grep -E '^[-+]' || true
}

step_sim() {
    say "pipec sim $EXAMPLE"
    needs sim || return 0
    "$PIPEC" sim "$EXAMPLE" --gantt
}

# A real training run of a tiny model on the CPU backend: ranks as threads.
step_run() {
    say "pipec run (CPU backend)"
    needs run || return 0
    local f=examples/demo.pipe
    if [ ! -f "$f" ]; then
        echo "(skipped: $f is not there yet)"
        return 0
    fi
    "$PIPEC" run "$f" --iters 3 --check
}

# Training longer: the demo pipeline for 15 iterations, so the loss can be seen falling;
# the summary compares the measured iteration time with the simulated one.
step_train() {
    say "pipec run examples/demo.pipe --iters 15"
    needs run || return 0
    [ -f examples/demo.pipe ] || { echo "(skipped: examples/demo.pipe is not there yet)"; return 0; }
    "$PIPEC" run examples/demo.pipe --iters 15
}

# The transformers the `.pipe` names: a GPT and a Llama (stdlib shapes shrunk by a model
# block) train for 50 iterations on the default text (the docs), and their pipelined
# gradients match the sequential reference.
step_transformers() {
    needs run || return 0
    local f
    for f in examples/gpt_tiny.pipe examples/llama_tiny.pipe; do
        say "pipec run $f --iters 50"
        "$PIPEC" run "$f" --iters 50 --quiet || return 1
        say "pipec run $f --check"
        "$PIPEC" run "$f" --check | grep -E 'workload|max relative' || return 1
    done
}

for s in $STEPS; do
    if ! "step_$s"; then
        echo "demo step '$s' failed"
        failed="$failed $s"
    fi
done
echo
if [ -n "$failed" ]; then
    echo "demo: failed steps:$failed"
    exit 1
fi
echo "demo: all steps done"

