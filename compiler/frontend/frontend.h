/* frontend.h - the front end's entry points: read a .pipe file (and everything it
 * imports), parse it, expand templates and resolve models and devices into the IR.
 *
 * source -> tokens (grammar/pipe.l) -> AST (grammar/pipe.y, ast.c) -> imports (load.c)
 * -> Pipeline (elaborate.c). The language is described in docs/language.md. */
#ifndef PIPEC_FRONTEND_H
#define PIPEC_FRONTEND_H

#include <stddef.h>

#include "diag.h"
#include "ir.h"

/* One `--set KEY=VALUE` (docs/language.md "Overriding settings"): text is the whole
 * argument; the value read is text[lo, hi) (all of it after the '=', or one point of a
 * `pipec compare` sweep). */
typedef struct SetOverride {
    const char *text;
    uint32_t lo, hi;
} SetOverride;

/* The file name diagnostics print for an override: `--set:1:8: error[value]: ...`. */
#define SET_FILE_NAME "--set"

typedef struct LoadOpts {
    const char *const *include_dirs; /* -I DIR, searched after the importing file's folder */
    int ninclude;
    const SetOverride *sets;         /* --set, in order: each replaces the file's setting */
    int nsets;
} LoadOpts;

/* Parses and elaborates the file: imports, templates, `schedule` expansion, settings,
 * model/device resolution. Each override of o->sets is registered as a file named
 * SET_FILE_NAME, read as a setting line and put in place of the pipeline's lines of
 * the same setting (`name` error for an unknown key, `syntax` for a bad value). Returns the pipeline, or NULL when errors were reported
 * (d->nerr > 0). The Diag keeps the source text; it must outlive the pipeline.
 * o may be NULL (no -I dirs). */
Pipeline *load_pipeline(Diag *d, const LoadOpts *o, const char *path);

/* The same from memory (fuzzing, tests); name is used in diagnostics and its folder
 * is the first place relative imports are searched. text need not be NUL-terminated. */
Pipeline *load_pipeline_string(Diag *d, const LoadOpts *o, const char *name,
                               const char *text, size_t len);

/* Reads a pass list, the text of `pipec opt --pass` registered as file `file` of d:
 * `name(key=value, ...), name, ...`, by the grammar's rules for `apply` (a second start
 * symbol of grammar/pipe.y) and with its values read as `apply`'s are (units to ms,
 * bytes, bytes per second). Returns the *n calls, or NULL after errors (`syntax`,
 * `value`) located in the file. Free the calls with pass_calls_free. */
PassCall *parse_pass_list(Diag *d, uint32_t file, uint32_t *n);
void pass_calls_free(PassCall *calls, uint32_t n);

/* Where the stdlib is found: $PIPEC_STDLIB, else <dir of the pipec binary>/../stdlib,
 * else <dir of binary>/../share/pipec/stdlib. Returned string is static or owned by
 * the front end. Import search path for "std/NAME.pipe": the importing file's folder,
 * -I dirs, each dir of $PIPEC_PATH (colon-separated), the stdlib folder (a path
 * beginning with "std/" maps to the stdlib folder itself). */
const char *stdlib_dir(void);

/* A template of a stdlib file and the shape its header states (docs/language.md
 * "Templates": `template NAME chunks N [interleaved | vshape]`). */
typedef struct StdTemplate {
    char *name;    /* the template's name */
    char *file;    /* the stdlib file that defines it, without ".pipe": "schedules" for
                    * std/schedules.pipe */
    int V;         /* the header's chunks N; 0 when the header states none (any chunks);
                    * -1 when N is not an integer literal (an expression the front end
                    * evaluates only while elaborating) */
    bool vshape;   /* the header says `vshape` */
} StdTemplate;

/* Lists the templates of every stdlib file (each NAME.pipe of stdlib_dir(), files in
 * name order, templates in file order), parsed but not elaborated. Returns the count
 * and *out (free it with std_templates_free), or -1 with *out NULL after reporting
 * through d why the folder or a file could not be read or parsed (`name`, `syntax`). */
int std_templates(Diag *d, StdTemplate **out);
void std_templates_free(StdTemplate *t, int n);

/* The settings `--set` can override, comma-separated ("stages, microbatches, ..."), in
 * buf; returns buf. */
char *settings_list(char *buf, size_t len);

/* After errors in a run with overrides: a note at each override (the files named
 * SET_FILE_NAME) saying the file was read with it, unless the last error is located in
 * an override already. */
void note_overrides(Diag *d);

/* Expansion and nesting limits (docs/language.md "Limits"). Checked with error code
 * `limit`. Tests may lower them; the defaults are the documented values. */
typedef struct FrontendLimits {
    uint64_t max_ops;        /* ops in one pipeline (IR_MAX_OPS) */
    uint64_t max_iterations; /* loop iterations in one elaboration (100 million) */
    int max_nesting;         /* nesting of { ( [ (64) */
    int max_expr_depth;      /* depth of an expression tree (256) */
    int max_import_depth;    /* chain of imports (16) */
    uint64_t max_vstages;    /* P * V (65536): per-virtual-stage tables are allocated */
    size_t max_file_bytes;   /* one source file (256 MiB) */
} FrontendLimits;

extern FrontendLimits frontend_limits;

#endif
