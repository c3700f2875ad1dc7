/* cmd_compare.c - `pipec compare FILE... [--set KEY=V[,V...]]... [--format F] [-o OUT]`:
 * one row of figures per file and per point of the sweep the `--set` lists span
 * (docs/compare.md).
 *
 * Legend: P = stages, M = micro-batches, V = chunks per rank. Times ms, sizes bytes.
 *
 * The sweep: each `--set KEY=V1,V2,...` names the values of one setting, split at the
 * commas outside brackets, braces, parentheses and strings; the points are the cartesian
 * product of the lists, the first `--set` varying slowest (nested loops in the order
 * given), inside the files in the order given. Each point compiles the file with one
 * value of each `--set` (SetOverride spans into the argument, so a diagnostic points at
 * the value's column), checks it (structure, dependencies; memory only to fill `fits`),
 * simulates it, and keeps a Row. A point that does not compile keeps a row whose status
 * names the error codes; its diagnostics go to standard error and the exit status is 1.
 *
 * The columns are one table (columns[] below): their keys are the CSV header and the
 * JSON fields, docs/spec.md "JSON output" fixes `makespan_ms`, `bubble_ratio`,
 * `tokens_per_s` and `mfu`; every figure is SimResult's (sim.h). Every
 * format reads the same cells: csv and json at full precision (sim_fmt_num), text, md
 * and latex rounded for people. */
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cmds.h"
#include "driver.h"
#include "frontend.h"
#include "sim.h"
#include "util.h"

/* One row: a file at one point of the sweep. Numbers are NaN when unknown (the point
 * did not compile). */
typedef struct Row {
    char *file;          /* as given */
    char *set;           /* the point: "KEY=VALUE KEY=VALUE", "" without --set */
    char *name;          /* the pipeline's name, "" when it did not compile */
    char *schedule;      /* template (or "explicit"), then " | " each recompute and pass */
    char *status;        /* "ok", "stuck" or "error[CODE,...]" */
    int P, M, V;
    double makespan_ms, bubble_ratio;
    double lower_bound_ms;   /* no order of the same ops can be faster (sim_lower_bound) */
    double above_bound;      /* makespan / lower bound - 1 */
    double overhead_ratio;   /* (idle + recomputation) / (P x makespan) */
    double tokens_per_s, mfu; /* NaN without a model and a device */
    double peak_max;     /* bytes, the largest stage's peak (weights included) */
    double *peak;        /* [P] bytes per stage, NULL when unknown */
    int fits;            /* 1 within the budget (or none set), 0 over it, -1 unknown */
} Row;

typedef enum ColKind {
    COL_STR, COL_INT, COL_MS, COL_RATIO, COL_RATE, COL_BYTES, COL_PEAKS, COL_FITS
} ColKind;

/* The columns, in output order: key (CSV header, JSON field), head (text, md, latex). */
static const struct Column {
    const char *key, *head;
    ColKind kind;
    size_t off;
} columns[] = {
    {"file", "file", COL_STR, offsetof(Row, file)},
    {"set", "set", COL_STR, offsetof(Row, set)},
    {"name", "name", COL_STR, offsetof(Row, name)},
    {"stages", "P", COL_INT, offsetof(Row, P)},
    {"microbatches", "M", COL_INT, offsetof(Row, M)},
    {"chunks", "V", COL_INT, offsetof(Row, V)},
    {"schedule", "schedule and passes", COL_STR, offsetof(Row, schedule)},
    {"makespan_ms", "makespan ms", COL_MS, offsetof(Row, makespan_ms)},
    {"lower_bound_ms", "bound ms", COL_MS, offsetof(Row, lower_bound_ms)},
    {"above_lower_bound", "above bound", COL_RATIO, offsetof(Row, above_bound)},
    {"bubble_ratio", "bubble", COL_RATIO, offsetof(Row, bubble_ratio)},
    {"overhead_ratio", "overhead", COL_RATIO, offsetof(Row, overhead_ratio)},
    {"peak_mem_bytes", "peak GiB", COL_BYTES, offsetof(Row, peak_max)},
    {"peak_mem_bytes_per_stage", "peak GiB per stage", COL_PEAKS, offsetof(Row, peak)},
    {"fits", "fits", COL_FITS, offsetof(Row, fits)},
    {"tokens_per_s", "tokens/s", COL_RATE, offsetof(Row, tokens_per_s)},
    {"mfu", "MFU", COL_RATIO, offsetof(Row, mfu)},
    {"status", "status", COL_STR, offsetof(Row, status)},
};
enum { NCOLS = sizeof columns / sizeof columns[0] };

typedef enum Format { FMT_TEXT, FMT_CSV, FMT_MD, FMT_LATEX, FMT_JSON } Format;
static const char *const format_name[] = {"text", "csv", "md", "latex", "json"};

/* Appends the cell of column c of row r to out: full precision (csv, json: a JSON value
 * when json) or rounded for people. */
static void put_cell(StrBuf *out, const Row *r, const struct Column *c, Format f)
{
    const char *at = (const char *)r + c->off;
    bool full = f == FMT_CSV || f == FMT_JSON;
    char b[64];
    switch (c->kind) {
    case COL_STR: {
        const char *s = *(char *const *)at;
        if (f == FMT_JSON)
            sim_json_string(out, s);
        else
            sb_puts(out, s);
        return;
    }
    case COL_INT: /* P, M, V: 0 when the point did not compile */
        if (*(const int *)at > 0)
            sb_printf(out, "%d", *(const int *)at);
        else
            sb_puts(out, f == FMT_JSON ? "null" : f == FMT_CSV ? "" : "-");
        return;
    case COL_MS:
    case COL_RATIO:
    case COL_RATE: {
        double x = *(const double *)at;
        if (full)
            sb_puts(out, isfinite(x) ? sim_fmt_num(b, sizeof b, x) : f == FMT_JSON ? "null" : "");
        else if (!isfinite(x))
            sb_puts(out, "-");
        else
            sb_printf(out, c->kind == COL_MS ? "%.3f" : c->kind == COL_RATE ? "%.0f" : "%.4f", x);
        return;
    }
    case COL_BYTES: {
        double x = *(const double *)at;
        if (full)
            sb_puts(out, isfinite(x) ? sim_fmt_bytes(b, sizeof b, x) : f == FMT_JSON ? "null" : "");
        else
            sb_puts(out, isfinite(x) ? (snprintf(b, sizeof b, "%.2f", x / 1073741824.0), b) : "-");
        return;
    }
    case COL_PEAKS: {
        const double *pk = *(double *const *)at;
        if (!pk) {
            sb_puts(out, f == FMT_JSON ? "null" : f == FMT_CSV ? "" : "-");
            return;
        }
        sb_puts(out, f == FMT_JSON ? "[" : "");
        for (int s = 0; s < r->P; s++) {
            sb_puts(out, s ? (f == FMT_JSON ? ", " : " ") : "");
            if (full)
                sb_puts(out, sim_fmt_bytes(b, sizeof b, pk[s]));
            else
                sb_printf(out, "%.2f", pk[s] / 1073741824.0);
        }
        sb_puts(out, f == FMT_JSON ? "]" : "");
        return;
    }
    case COL_FITS: {
        int v = *(const int *)at;
        if (f == FMT_JSON)
            sb_puts(out, v < 0 ? "null" : v ? "true" : "false");
        else
            sb_puts(out, v < 0 ? (full ? "" : "-") : v ? "yes" : "no");
        return;
    }
    }
}

/* Whether column c is numeric (right-aligned in text and md). */
static bool numeric(const struct Column *c)
{
    return c->kind != COL_STR && c->kind != COL_PEAKS && c->kind != COL_FITS;
}

/* Appends s to out with the characters LaTeX treats specially escaped. */
static void latex_text(StrBuf *out, const char *s)
{
    for (; *s; s++)
        switch (*s) {
        case '\\': sb_puts(out, "\\textbackslash{}"); break;
        case '~': sb_puts(out, "\\textasciitilde{}"); break;
        case '^': sb_puts(out, "\\textasciicircum{}"); break;
        case '&': case '%': case '$': case '#': case '_': case '{': case '}':
            sb_putc(out, '\\');
            sb_putc(out, *s);
            break;
        default: sb_putc(out, *s);
        }
}

/* Appends s to out with '|' escaped for a Markdown table cell. */
static void md_text(StrBuf *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            sb_putc(out, '\\');
        sb_putc(out, *s);
    }
}

/* The table in format f. In text, md and latex a column that is empty in every row
 * (`set` without --set) is left out. */
static void write_table(StrBuf *out, const Row *rows, size_t nrows, Format f)
{
    char *cell[NCOLS];
    bool shown[NCOLS];
    size_t width[NCOLS];
    StrBuf tmp = {0};
    for (int c = 0; c < NCOLS; c++) {
        width[c] = strlen(columns[c].head);
        shown[c] = f == FMT_CSV || f == FMT_JSON || columns[c].kind != COL_STR;
        for (size_t i = 0; i < nrows; i++) {
            tmp.len = 0;
            put_cell(&tmp, &rows[i], &columns[c], f);
            shown[c] |= tmp.len > 0;
            width[c] = tmp.len > width[c] ? tmp.len : width[c];
        }
    }
    if (f == FMT_JSON) {
        sb_puts(out, "[");
        for (size_t i = 0; i < nrows; i++) {
            sb_puts(out, i ? ",\n {" : "{");
            for (int c = 0; c < NCOLS; c++) {
                sb_printf(out, "%s\"%s\": ", c ? ", " : "", columns[c].key);
                put_cell(out, &rows[i], &columns[c], f);
            }
            sb_puts(out, "}");
        }
        sb_puts(out, "]\n");
        sb_free(&tmp);
        return;
    }
    if (f == FMT_CSV) {
        for (int c = 0; c < NCOLS; c++)
            sb_printf(out, "%s%s", c ? "," : "", columns[c].key);
        sb_puts(out, "\n");
        for (size_t i = 0; i < nrows; i++) {
            for (int c = 0; c < NCOLS; c++) {
                tmp.len = 0;
                put_cell(&tmp, &rows[i], &columns[c], f);
                sb_puts(out, c ? "," : "");
                sb_csv_field(out, sb_str(&tmp));
            }
            sb_puts(out, "\n");
        }
        sb_free(&tmp);
        return;
    }
    /* text, md, latex: a header line, then the rows. */
    if (f == FMT_LATEX) {
        sb_puts(out, "\\begin{tabular}{");
        for (int c = 0; c < NCOLS; c++)
            if (shown[c])
                sb_putc(out, numeric(&columns[c]) ? 'r' : 'l');
        sb_puts(out, "}\n\\hline\n");
    }
    for (int r = -1; r < (int)nrows; r++) {
        bool first = true;
        for (int c = 0; c < NCOLS; c++) {
            if (!shown[c])
                continue;
            tmp.len = 0;
            if (r < 0)
                sb_puts(&tmp, columns[c].head);
            else
                put_cell(&tmp, &rows[r], &columns[c], f);
            cell[c] = tmp.s ? tmp.s : "";
            if (f == FMT_TEXT)
                sb_printf(out, numeric(&columns[c]) ? "%s%*s" : "%s%-*s", first ? "" : "  ",
                          (int)width[c], cell[c]);
            else if (f == FMT_MD) {
                sb_puts(out, first ? "| " : " | ");
                md_text(out, cell[c]);
            } else {
                sb_puts(out, first ? "" : " & ");
                latex_text(out, cell[c]);
            }
            first = false;
        }
        if (f == FMT_TEXT) {
            while (out->len && out->s[out->len - 1] == ' ')
                out->s[--out->len] = 0;
            sb_puts(out, "\n");
        } else if (f == FMT_MD) {
            sb_puts(out, " |\n");
            if (r < 0) {
                for (int c = 0; c < NCOLS; c++)
                    if (shown[c])
                        sb_puts(out, numeric(&columns[c]) ? "|---:" : "|---");
                sb_puts(out, "|\n");
            }
        } else {
            sb_puts(out, " \\\\\n");
            if (r < 0)
                sb_puts(out, "\\hline\n");
        }
    }
    if (f == FMT_LATEX)
        sb_puts(out, "\\hline\n\\end{tabular}\n");
    sb_free(&tmp);
}

/* The values of one `--set`: the spans of text[lo, hi) between the commas outside
 * brackets, braces, parentheses and strings. Returns their number (>= 1). */
static size_t split_points(const SetOverride *o, SetOverride **pts)
{
    size_t n = 0, cap = 0;
    int depth = 0;
    bool str = false;
    uint32_t start = o->lo;
    for (uint32_t i = o->lo; i <= o->hi; i++) {
        char ch = i < o->hi ? o->text[i] : ',';
        if (str) {
            str = ch != '"';
            continue;
        }
        if (ch == '"')
            str = true;
        else if (ch == '(' || ch == '[' || ch == '{')
            depth++;
        else if ((ch == ')' || ch == ']' || ch == '}') && depth > 0)
            depth--;
        else if (ch == ',' && (depth == 0 || i == o->hi)) {
            VEC_PUSH(*pts, n, cap, ((SetOverride){o->text, start, i}));
            start = i + 1;
        }
    }
    return n;
}

/* "recompute 0..=2 full", then each pass by name, after the template: what the row ran. */
static char *describe(const Pipeline *p)
{
    StrBuf b = {0};
    sb_puts(&b, p->schedule ? p->schedule : "explicit");
    for (uint32_t i = 0; i < p->nrecompute; i++) {
        const RecomputeDir *r = &p->recompute[i];
        char pol[320];
        sb_printf(&b, " | recompute %d..=%d %s%s", r->lo, r->hi - 1,
                  policy_format(r->policy, r->arg, pol, sizeof pol), r->per_layer ? " layer" : "");
    }
    for (uint32_t i = 0; i < p->npasses; i++)
        sb_printf(&b, " | %s", p->passes[i].name);
    return b.s;
}

/* Compiles, checks and simulates one point into *row. Returns false when the point did
 * not compile or cannot run (its diagnostics printed). */
static bool measure(Row *row, const DriverOpts *o, const char *path, FILE *devnull)
{
    Diag d = {0};
    Pipeline *p = driver_compile(&d, o, path);
    row->makespan_ms = row->bubble_ratio = row->peak_max = NAN;
    row->lower_bound_ms = row->above_bound = row->overhead_ratio = NAN;
    row->tokens_per_s = row->mfu = NAN;
    row->fits = -1;
    if (!p) {
        StrBuf st = {0};
        sb_puts(&st, "error[");
        for (int c = 0, k = 0; c < DIAG_NCODES; c++)
            if (d.ncode[c])
                sb_printf(&st, "%s%s", k++ ? "," : "", diag_code_name[c]);
        sb_puts(&st, "]");
        row->status = st.s;
        fprintf(stderr, "pipec compare: %s%s%s: %d error%s\n", path, *row->set ? " with " : "",
                row->set, d.nerr, d.nerr == 1 ? "" : "s");
        row->name = xstrdup("");
        row->schedule = xstrdup("");
        diag_free(&d);
        return false;
    }
    row->name = xstrdup(p->name);
    row->schedule = describe(p);
    row->P = p->P, row->M = p->M, row->V = p->V;
    SimResult *r = simulate(p);
    row->status = xstrdup(r->stuck ? "stuck" : "ok");
    if (!r->stuck) {
        row->makespan_ms = r->makespan_ms;
        row->bubble_ratio = r->bubble_ratio;
        row->lower_bound_ms = r->lower_bound_ms;
        if (r->lower_bound_ms > 0)
            row->above_bound = r->makespan_ms / r->lower_bound_ms - 1;
        row->overhead_ratio = r->overhead_ratio;
        row->tokens_per_s = r->tokens_per_s;
        row->mfu = r->mfu;
        row->peak = xmalloc((size_t)p->P * sizeof *row->peak);
        row->peak_max = 0;
        for (int32_t s = 0; s < p->P; s++) {
            row->peak[s] = r->stage[s].peak_mem_bytes;
            row->peak_max = fmax(row->peak_max, row->peak[s]);
        }
        Diag quiet = {.out = devnull ? devnull : stderr, .max_errors = 1};
        row->fits = driver_check_memory(&quiet, p) == 0;
        diag_free(&quiet);
    }
    bool ok = !r->stuck;
    if (r->stuck)
        fprintf(stderr, "pipec compare: %s: the schedule cannot run to the end\n", path);
    sim_free(r);
    pipeline_free(p);
    diag_free(&d);
    return ok;
}

static void row_free(Row *r)
{
    free(r->file);
    free(r->set);
    free(r->name);
    free(r->schedule);
    free(r->status);
    free(r->peak);
}

/* Reads the options; returns -1 to go on, else the exit status. */
static int compare_args(int argc, char **argv, DriverOpts *o, Format *f, const char **out)
{
    enum { OPT_FORMAT = 256 };
    static const struct option longopts[] = {
        {"format", required_argument, NULL, OPT_FORMAT},
        {"output", required_argument, NULL, 'o'},
        DRIVER_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "o:" DRIVER_SHORTOPTS, longopts, NULL)) != -1) {
        if (driver_common_opt(o, opt, optarg))
            continue;
        if (opt == 'o') {
            *out = optarg;
            continue;
        }
        if (opt == OPT_FORMAT) {
            int k = -1;
            for (int i = 0; i < (int)ARRAY_LEN(format_name); i++)
                if (!strcmp(optarg, format_name[i]))
                    k = i;
            if (k >= 0) {
                *f = (Format)k;
                continue;
            }
            fprintf(stderr, "pipec compare: --format wants text, csv, md, latex or json, not '%s'\n",
                    optarg);
        }
        driver_usage(stderr, "compare");
        return 2;
    }
    if (optind >= argc) {
        fprintf(stderr, "pipec compare: no input file\n");
        driver_usage(stderr, "compare");
        return 2;
    }
    return -1;
}

int cmd_compare(int argc, char **argv)
{
    DriverOpts o = {0};
    Format f = FMT_TEXT;
    const char *outpath = NULL;
    int rc = compare_args(argc, argv, &o, &f, &outpath);
    if (rc >= 0) {
        driver_opts_free(&o);
        return rc;
    }
    /* Each --set's values, and the point being measured (a mixed-radix counter). */
    int nsets = o.nsets;
    SetOverride **pts = xcalloc((size_t)nsets + 1, sizeof *pts);
    size_t *npts = xcalloc((size_t)nsets + 1, sizeof *npts), *at = xcalloc((size_t)nsets + 1, sizeof *at);
    SetOverride *all = o.sets, *point = xcalloc((size_t)nsets + 1, sizeof *point);
    for (int i = 0; i < nsets; i++)
        npts[i] = split_points(&all[i], &pts[i]);
    DriverOpts po = o;
    po.sets = point;
    FILE *devnull = fopen("/dev/null", "w");
    Row *rows = NULL;
    size_t nrows = 0, cap = 0;
    rc = 0;
    for (int fi = optind; fi < argc; fi++) {
        memset(at, 0, (size_t)nsets * sizeof *at);
        for (;;) {
            StrBuf set = {0};
            for (int i = 0; i < nsets; i++) {
                point[i] = pts[i][at[i]];
                const char *eq = strchr(point[i].text, '=');
                size_t key = eq ? (size_t)(eq - point[i].text) : strlen(point[i].text);
                sb_printf(&set, "%s%.*s=%.*s", i ? " " : "", (int)key, point[i].text,
                          (int)(point[i].hi - point[i].lo), point[i].text + point[i].lo);
            }
            Row row = {.file = xstrdup(argv[fi]), .set = set.s ? set.s : xstrdup("")};
            if (!measure(&row, &po, argv[fi], devnull))
                rc = 1;
            VEC_PUSH(rows, nrows, cap, row);
            int i = nsets - 1; /* the last --set varies fastest */
            while (i >= 0 && ++at[i] == npts[i])
                at[i--] = 0;
            if (i < 0)
                break;
        }
    }
    StrBuf out = {0};
    write_table(&out, rows, nrows, f);
    if (write_output(outpath, &out))
        rc = 1;
    sb_free(&out);
    for (size_t i = 0; i < nrows; i++)
        row_free(&rows[i]);
    free(rows);
    for (int i = 0; i < nsets; i++)
        free(pts[i]);
    free(pts);
    free(npts);
    free(at);
    free(point);
    if (devnull)
        fclose(devnull);
    driver_opts_free(&o);
    return rc;
}
