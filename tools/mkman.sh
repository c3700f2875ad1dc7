#!/bin/sh
# tools/mkman.sh - writes the pipec(1) man page to standard output from the usage texts
# the binary prints (`pipec --help`, `pipec help COMMAND`), so that the page and
# `pipec help` never disagree.
#
# usage: tools/mkman.sh PIPEC >pipec.1
set -eu
pipec=$1
version=$("$pipec" --version | sed 's/^pipec //')
# roff: backslashes as \e, a leading . or ' guarded, - as \-.
esc() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/" -e 's/-/\\-/g'; }
commands=$("$pipec" --help | awk '/^Commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { exit }')
cat <<HEAD
.TH PIPEC 1 "" "pipec $version" "User Commands"
.SH NAME
pipec \- compiler for pipeline\-parallel training schedules
.SH SYNOPSIS
.nf
HEAD
"$pipec" --help | sed -n '1,2p' | esc
cat <<'DESC'
.fi
.SH DESCRIPTION
pipec reads a
.I .pipe
file that says how a model is cut into pipeline stages and, for every stage, the order
of its forward, backward, weight\-gradient, recompute and swap operations over the
micro\-batches of one training iteration. It checks the schedule (completeness,
dependencies, deadlock, per\-stage memory), applies transformations from the
literature, simulates it under a cost model, compares and tunes variants, and
generates one C (or CUDA C) program per rank that really runs it.
.PP
Diagnostics read
.B FILE:LINE:COL: error[CODE]: message
(or
.BR warning[CODE] ),
then notes and the source line with a caret. Exit status: 0 success, 1 errors in the
input, 2 usage errors (\fBpipec diff\fR: 0 the same, 1 different, 2 errors).
A file argument
.B \-
is standard input; an output file
.B \-
is standard output.
.SH COMMANDS
DESC
for c in $commands; do
    printf '.SS "pipec %s"\n.nf\n' "$c"
    "$pipec" help "$c" | esc
    printf '.fi\n'
done
cat <<'TAIL'
.SH ENVIRONMENT
.TP
.B PIPEC_PATH
colon\-separated folders searched for imports after the importing file's folder and
\fB\-I\fR folders.
.TP
.B PIPEC_STDLIB
the folder of the standard library (default: \fI../share/pipec/stdlib\fR beside the
binary).
.TP
.B COLUMNS
the width of \fBpipec sim \-\-gantt\fR.
.TP
.B XDG_CACHE_HOME
where \fBpipec run\fR keeps its build cache (\fI$XDG_CACHE_HOME/pipec\fR).
.SH FILES
.TP
.I share/pipec/stdlib/*.pipe
schedule templates, models and devices, imported as \fI"std/NAME.pipe"\fR.
.TP
.I share/doc/pipec/
the language reference, semantics, passes, cost model, simulator and runtime pages.
.SH SEE ALSO
The documentation installed in \fIshare/doc/pipec/\fR (README.md, docs/*.md).
TAIL
