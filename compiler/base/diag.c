/* diag.c - see diag.h. */
#include "diag.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

const char *const diag_code_name[DIAG_NCODES] = {
#define X(e, s) s,
    DIAG_CODES(X)
#undef X
};

const char *const warn_code_name[WARN_NCODES] = {
#define X(e, s, why) s,
    WARN_CODES(X)
#undef X
};

uint32_t diag_add_file(Diag *d, const char *path, char *text, uint32_t len)
{
    size_t cap = d->cap;
    VEC_RESERVE(d->files, (size_t)d->nfiles + 1, cap);
    d->cap = (uint32_t)cap;
    SrcFile *f = &d->files[d->nfiles];
    memset(f, 0, sizeof *f);
    f->path = xstrdup(path);
    f->text = text;
    f->len = len;
    return d->nfiles++;
}

void diag_set_name(Diag *d, uint32_t file, const char *name)
{
    if (file >= d->nfiles)
        return;
    free(d->files[file].name);
    d->files[file].name = name ? xstrdup(name) : NULL;
}

const char *diag_file_name(const Diag *d, uint32_t file)
{
    if (file >= d->nfiles)
        return "";
    return d->files[file].name ? d->files[file].name : d->files[file].path;
}

static void build_lines(SrcFile *f)
{
    size_t n = 0, cap = 0;
    VEC_PUSH(f->lines, n, cap, 0);
    for (uint32_t i = 0; i < f->len; i++)
        if (f->text[i] == '\n')
            VEC_PUSH(f->lines, n, cap, i + 1);
    f->nlines = (uint32_t)n;
}

void diag_linecol(Diag *d, Loc loc, uint32_t *line, uint32_t *col)
{
    if (loc.file >= d->nfiles) {
        *line = *col = 0;
        return;
    }
    SrcFile *f = &d->files[loc.file];
    if (!f->lines)
        build_lines(f);
    uint32_t off = loc.off > f->len ? f->len : loc.off;
    uint32_t lo = 0, hi = f->nlines; /* last line start <= off */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (f->lines[mid] <= off)
            lo = mid;
        else
            hi = mid;
    }
    *line = lo + 1;
    *col = off - f->lines[lo] + 1;
}

static FILE *out_of(const Diag *d)
{
    return d->out ? d->out : stderr;
}

static int printed_ok(const Diag *d)
{
    return d->nerr <= (d->max_errors ? d->max_errors : 100);
}

/* Prints the source line of loc and a caret; tabs in the prefix are kept so that the
 * caret lines up. */
static void quote(Diag *d, Loc loc)
{
    if (loc.file >= d->nfiles)
        return;
    SrcFile *f = &d->files[loc.file];
    uint32_t line, col;
    diag_linecol(d, loc, &line, &col);
    const char *s = f->text + f->lines[line - 1];
    const char *e = s;
    while (e < f->text + f->len && *e != '\n' && *e != '\r')
        e++;
    FILE *o = out_of(d);
    fputs("    ", o);
    for (const char *p = s; p < e; p++)
        fputc((unsigned char)*p < 0x20 && *p != '\t' ? '?' : *p, o);
    fputs("\n    ", o);
    for (uint32_t i = 1; i < col && s + i - 1 < e; i++)
        fputc(s[i - 1] == '\t' ? '\t' : ' ', o);
    fputs("^\n", o);
}

static bool in_expansion(const Diag *d, Loc loc)
{
    const Span *x = &d->expand_span;
    return x->end > x->off && loc.file == x->file && loc.off >= x->off && loc.off < x->end &&
           d->expand_at.file < d->nfiles;
}

static void vreport(Diag *d, Loc loc, const char *kind, const char *fmt, va_list ap)
{
    FILE *o = out_of(d);
    if (loc.file < d->nfiles) {
        uint32_t line, col;
        diag_linecol(d, loc, &line, &col);
        fprintf(o, "%s:%u:%u: %s", diag_file_name(d, loc.file), line, col, kind);
    } else {
        fprintf(o, "pipec: %s", kind);
    }
    vfprintf(o, fmt, ap);
    fputc('\n', o);
    quote(d, loc);
}

/* Prints one error or warning; inside a template expansion the primary location is the
 * `schedule` line and the template line follows as a note. A syntax-class error is about
 * the template's text itself: it stays at the template, with a note at the `schedule`
 * line. */
static void vprimary(Diag *d, Loc loc, const char *kind, const char *fmt, va_list ap)
{
    if (!in_expansion(d, loc)) {
        vreport(d, loc, kind, fmt, ap);
        return;
    }
    if (!strncmp(kind, "error[syntax]", 13)) {
        vreport(d, loc, kind, fmt, ap);
        diag_note(d, d->expand_at, "the template is expanded here");
        return;
    }
    vreport(d, d->expand_at, kind, fmt, ap);
    if (!d->op_note[0] && d->op_namer)
        d->op_namer(d->op_note, sizeof d->op_note, d->op_ctx, d->op_stage);
    if (d->op_note[0])
        diag_note(d, loc, "%s is %s", d->op_note, d->expand_note);
    else
        diag_note(d, loc, "%s", d->expand_note);
}

bool diag_wants_op(const Diag *d)
{
    return d->expand_span.end > d->expand_span.off;
}

void diag_set_op_lazy(Diag *d, DiagOpNamer namer, const void *ctx, uint32_t stage)
{
    d->op_note[0] = 0;
    d->op_namer = namer;
    d->op_ctx = ctx;
    d->op_stage = stage;
}

void diag_clear_op(Diag *d)
{
    d->op_note[0] = 0;
    d->op_namer = NULL;
}

void diag_set_op(Diag *d, const char *fmt, ...)
{
    va_list ap;
    d->op_namer = NULL;
    va_start(ap, fmt);
    vsnprintf(d->op_note, sizeof d->op_note, fmt, ap);
    va_end(ap);
}

void diag_error(Diag *d, Loc loc, DiagCode code, const char *fmt, ...)
{
    if (d->demote) {
        d->nwarn++;
    } else {
        d->nerr++;
        d->last_error = loc;
        if ((unsigned)code < DIAG_NCODES)
            d->ncode[code]++;
    }
    if (printed_ok(d)) {
        char kind[48];
        snprintf(kind, sizeof kind, "%s[%s]: ", d->demote ? "warning" : "error",
                 (unsigned)code < DIAG_NCODES ? diag_code_name[code] : "?");
        va_list ap;
        va_start(ap, fmt);
        vprimary(d, loc, kind, fmt, ap);
        va_end(ap);
    }
    diag_clear_op(d);
}

void diag_set_expansion(Diag *d, Span span, Loc at, const char *note)
{
    d->expand_span = span;
    d->expand_at = at;
    snprintf(d->expand_note, sizeof d->expand_note, "%s", note ? note : "");
}

static void diag_report(Diag *d, Loc loc, const char *kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprimary(d, loc, kind, fmt, ap);
    va_end(ap);
}

void diag_note(Diag *d, Loc loc, const char *fmt, ...)
{
    if (!printed_ok(d))
        return;
    va_list ap;
    va_start(ap, fmt);
    vreport(d, loc, "note: ", fmt, ap);
    va_end(ap);
}

void diag_warning(Diag *d, Loc loc, WarnCode code, const char *fmt, ...)
{
    if (d->mute_warnings)
        return;
    if (d->werror)
        d->nerr++;
    else
        d->nwarn++;
    if (!printed_ok(d))
        return;
    char kind[64], msg[1024];
    const char *name = (unsigned)code < WARN_NCODES ? warn_code_name[code] : "?";
    snprintf(kind, sizeof kind, "%s[%s]: ", d->werror ? "error" : "warning", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (d->werror)
        snprintf(msg + strlen(msg), sizeof msg - strlen(msg), " [-Werror]");
    diag_report(d, loc, kind, "%s", msg);
}

/* Damerau-Levenshtein (optimal string alignment) distance, case folded; words longer
 * than 63 bytes are never close. */
static int edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63)
        return 99;
    int dp[64][64];
    for (size_t i = 0; i <= n; i++)
        dp[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++)
        dp[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int v = dp[i - 1][j - 1] + (ca != cb);
            if (dp[i - 1][j] + 1 < v)
                v = dp[i - 1][j] + 1;
            if (dp[i][j - 1] + 1 < v)
                v = dp[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && dp[i - 2][j - 2] + 1 < v)
                v = dp[i - 2][j - 2] + 1;
            dp[i][j] = v;
        }
    return dp[n][m];
}

const char *diag_closest(const char *word, const char *const *names, size_t n)
{
    if (!word || !*word)
        return NULL;
    size_t len = strlen(word);
    int limit = len <= 2 ? 0 : len <= 4 ? 1 : len <= 8 ? 2 : 3;
    const char *best = NULL;
    int bestd = limit + 1;
    for (size_t i = 0; i < n; i++) {
        if (!names[i] || !strcmp(names[i], word))
            continue;
        int dist = edit_distance(word, names[i]);
        if (dist < bestd) {
            bestd = dist;
            best = names[i];
        }
    }
    return best;
}

char *diag_suggest(char *buf, size_t len, const char *word, const char *const *names, size_t n)
{
    const char *c = diag_closest(word, names, n);
    if (len)
        buf[0] = 0;
    if (c)
        snprintf(buf, len, ", did you mean '%s'?", c);
    return buf;
}

void diag_free(Diag *d)
{
    for (uint32_t i = 0; i < d->nfiles; i++) {
        free(d->files[i].path);
        free(d->files[i].name);
        free(d->files[i].text);
        free(d->files[i].lines);
    }
    free(d->files);
    d->files = NULL;
    d->nfiles = d->cap = 0;
}
