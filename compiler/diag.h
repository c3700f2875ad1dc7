/* diag.h - source files, locations and diagnostics (DESIGN.md "Diagnostics").
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

/* Error codes, fixed by DESIGN.md. X(enum suffix, printed name). */
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

/* One source file kept for the whole run: diagnostics quote its lines. */
typedef struct SrcFile {
    char *path;          /* as given or as found on the search path */
    char *text;          /* NUL-terminated contents, owned */
    uint32_t len;        /* bytes */
    uint32_t *lines;     /* byte offset of each line start, built on first use */
    uint32_t nlines;
} SrcFile;

typedef struct Diag {
    SrcFile *files;
    uint32_t nfiles, cap;
    int nerr;            /* errors reported so far */
    int ncode[DIAG_NCODES]; /* errors per code */
    int max_errors;      /* stop printing (still counting) after this many; 0 = 100 */
    FILE *out;           /* where diagnostics go; NULL = stderr */
    bool color;          /* unused for now: output is plain text */
    bool demote;         /* diag_error prints "warning[CODE]" and counts in nwarn, not nerr */
    int nwarn;           /* errors demoted so far */
    /* The template a `schedule` line expanded: every error located inside `expand_span`
     * gets a note at `expand_at` saying so (diag_set_expansion). */
    Span expand_span;
    Loc expand_at;
    char expand_note[160];
} Diag;

/* Registers a file and takes ownership of text (NUL-terminated, len bytes). Returns the
 * file index for Loc.file. Files larger than 4 GiB are refused by the loader first. */
uint32_t diag_add_file(Diag *d, const char *path, char *text, uint32_t len);

/* Finds an already registered file by path; returns its index or -1. */
int diag_find_file(const Diag *d, const char *path);

/* 1-based line and column of loc (columns count bytes). line = 0 for LOC_NONE. */
void diag_linecol(Diag *d, Loc loc, uint32_t *line, uint32_t *col);

/* Reports an error with a code and a printf message, then the quoted line and caret. */
void diag_error(Diag *d, Loc loc, DiagCode code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* From now on, an error located inside span (a template's source) is followed by the
 * note `note` at `at` (the `schedule` line that expanded it), like gcc's "in expansion
 * of macro". An empty span turns it off. */
void diag_set_expansion(Diag *d, Span span, Loc at, const char *note);

/* A note attached to the previous error (printed only if that error was printed). */
void diag_note(Diag *d, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A warning: printed like an error with "warning:", not counted in nerr. */
void diag_warning(Diag *d, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Frees every file. */
void diag_free(Diag *d);

#endif
