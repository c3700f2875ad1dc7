/* diag.h - source files, locations and diagnostics (docs/spec.md "Diagnostics").
 *
 * Every diagnostic reads
 *     FILE:LINE:COL: error[CODE]: message
 * then the source line and a caret under the column, like gcc; notes follow as
 *     FILE:LINE:COL: note: message
 * with their own source line and caret. Errors are counted, never fatal: a phase keeps
 * going and reports as many as it can, and the driver stops when the count is non-zero. */
#ifndef PIPEC_DIAG_H
#define PIPEC_DIAG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* A location: a byte offset into one registered source file. 8 bytes. */
typedef struct Loc {
    uint32_t off;   /* byte offset from the start of the file */
    uint32_t file;  /* index into Diag.files; LOC_NONE_FILE for "no location" */
} Loc;

#define LOC_NONE_FILE UINT32_MAX
#define LOC_NONE ((Loc){0, LOC_NONE_FILE})

/* A span of one file's source: byte offsets [off, end) of file `file`. */
typedef struct Span {
    uint32_t file, off, end;
} Span;

/* Error codes, fixed by docs/spec.md "Diagnostics". X(enum suffix, printed name). */
#define DIAG_CODES(X) \
    X(SYNTAX, "syntax") \
    X(NAME, "name") \
    X(VALUE, "value") \
    X(MISSING, "missing") \
    X(DUPLICATE, "duplicate") \
    X(PLACEMENT, "placement") \
    X(ORDER, "order") \
    X(DEADLOCK, "deadlock") \
    X(MEMORY, "memory") \
    X(LIMIT, "limit")

typedef enum DiagCode {
#define X(e, s) DIAG_##e,
    DIAG_CODES(X)
#undef X
    DIAG_NCODES
} DiagCode;

extern const char *const diag_code_name[DIAG_NCODES];

/* Warning classes, printed as `warning[CODE]` (docs/language.md "Warnings"); `-Werror`
 * makes each an error. X(enum suffix, printed name, what it warns about). */
#define WARN_CODES(X) \
    X(EMPTY, "empty", "a virtual stage without layers: its ops cost nothing") \
    X(SPLIT, "split", "a stage splits some backwards with W and leaves others whole") \
    X(OVERSUBSCRIBED, "oversubscribed", "more rank threads than cores") \
    X(MODEL, "model", "a policy or pass that needs a model to size its effect") \
    X(PASS, "pass", "a pass that fell back or lengthened the schedule") \
    X(CSV, "csv", "a CSV action or dependency that was dropped") \
    X(ACTION, "action", "a runtime action in an order PyTorch's runtime rejects, or that pipec " \
                        "does not run")

typedef enum WarnCode {
#define X(e, s, why) WARN_##e,
    WARN_CODES(X)
#undef X
    WARN_NCODES
} WarnCode;

extern const char *const warn_code_name[WARN_NCODES];

/* One source file kept for the whole run: diagnostics quote its lines. */
typedef struct SrcFile {
    char *path;          /* as given or as found on the search path */
    char *name;          /* what diagnostics print ("std/NAME.pipe"); NULL = path */
    char *text;          /* NUL-terminated contents, owned */
    uint32_t len;        /* bytes */
    uint32_t *lines;     /* byte offset of each line start, built on first use */
    uint32_t nlines;
} SrcFile;

/* Writes the name of the op at ctx on stage `stage` into buf (n bytes), e.g.
 * "F7 (stage 0, micro-batch 7)": the lazy form of diag_set_op. */
typedef void (*DiagOpNamer)(char *buf, size_t n, const void *ctx, uint32_t stage);

typedef struct Diag {
    SrcFile *files;
    uint32_t nfiles, cap;
    int nerr;            /* errors reported so far */
    int ncode[DIAG_NCODES]; /* errors per code */
    int max_errors;      /* stop printing (still counting) after this many; 0 = 100 */
    FILE *out;           /* where diagnostics go; NULL = stderr */
    bool color;          /* unused for now: output is plain text */
    bool demote;         /* diag_error prints "warning[CODE]" and counts in nwarn, not nerr */
    int nwarn;           /* errors demoted and warnings printed so far */
    bool werror;         /* -Werror: diag_warning reports an error (counted in nerr) */
    bool mute_warnings;  /* diag_warning neither prints nor counts (a phase whose warnings
                            a later phase gives again, at the same places) */
    /* The template a `schedule` line expanded: every error located inside `expand_span`
     * gets a note at `expand_at` saying so (diag_set_expansion). */
    Span expand_span;
    Loc expand_at;
    char expand_note[160];
    char op_note[96];    /* the op the next error is about (diag_set_op), then cleared */
    DiagOpNamer op_namer; /* or, named only when an error needs it (diag_set_op_lazy) */
    const void *op_ctx;
    uint32_t op_stage;
    Loc last_error;      /* where the last error (not demoted) was reported */
} Diag;

/* Registers a file and takes ownership of text (NUL-terminated, len bytes). Returns the
 * file index for Loc.file. Files larger than 4 GiB are refused by the loader first. */
uint32_t diag_add_file(Diag *d, const char *path, char *text, uint32_t len);

/* Sets the name diagnostics print for file (e.g. "std/schedules.pipe" for a stdlib
 * file found at /usr/share/pipec/stdlib/schedules.pipe). */
void diag_set_name(Diag *d, uint32_t file, const char *name);

/* The name diagnostics print for file: its display name, else its path. */
const char *diag_file_name(const Diag *d, uint32_t file);


/* 1-based line and column of loc (columns count bytes). line = 0 for LOC_NONE. */
void diag_linecol(Diag *d, Loc loc, uint32_t *line, uint32_t *col);

/* Reports an error with a code and a printf message, then the quoted line and caret. */
void diag_error(Diag *d, Loc loc, DiagCode code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* From now on, a diagnostic located inside span (a template's source) is reported at
 * `at` (the `schedule` line in the user's file that expanded it), followed by the note
 * `note` at the template line, like rustc's macro backtraces. An empty span turns it
 * off. */
void diag_set_expansion(Diag *d, Span span, Loc at, const char *note);

/* Names the op the next diag_error is about, e.g. "F7 (stage 0, micro-batch 7)": when
 * the op comes from a template, the expansion note names it. Cleared by diag_error. */
void diag_set_op(Diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* As diag_set_op, but the name is written by namer(ctx, stage) only if an error about
 * the op is reported: checks name every op they visit, and formatting each one would
 * cost more than the check. ctx must live until the next diag_error or diag_clear_op. */
void diag_set_op_lazy(Diag *d, DiagOpNamer namer, const void *ctx, uint32_t stage);

/* Forgets the op set by diag_set_op or diag_set_op_lazy (its check found no error). */
void diag_clear_op(Diag *d);

/* Whether a note set by diag_set_op can be printed at all: only errors inside a template
 * expansion print it, so without one (an explicit file) callers skip formatting it. */
bool diag_wants_op(const Diag *d);

/* A note attached to the previous error (printed only if that error was printed). */
void diag_note(Diag *d, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A warning: printed like an error as "warning[CODE]: message", counted in nwarn, not
 * in nerr; with d->werror set it is an error ("error[CODE]: message [-Werror]"). */
void diag_warning(Diag *d, Loc loc, WarnCode code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The closest of names[0..n) to word by edit distance (Damerau-Levenshtein, case
 * folded), or NULL when none is close enough to be a likely typo (distance at most 0
 * for words of up to 2 letters, 1 up to 4, 2 up to 8, 3 beyond). */
const char *diag_closest(const char *word, const char *const *names, size_t n);

/* Appends ", did you mean 'NAME'?" for diag_closest's answer to buf (nothing when there
 * is none); returns buf. For messages: "unknown pass 'recomput'%s". */
char *diag_suggest(char *buf, size_t len, const char *word, const char *const *names, size_t n);

/* Frees every file. */
void diag_free(Diag *d);

#endif
