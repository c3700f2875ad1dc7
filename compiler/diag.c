/* diag.c - see diag.h. */
#include "diag.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

const char *const diag_code_name[DIAG_NCODES] = {
#define X(e, s) s,
    DIAG_CODES(X)
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

int diag_find_file(const Diag *d, const char *path)
{
    for (uint32_t i = 0; i < d->nfiles; i++)
        if (strcmp(d->files[i].path, path) == 0)
            return (int)i;
    return -1;
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

static void vreport(Diag *d, Loc loc, const char *kind, const char *fmt, va_list ap)
{
    FILE *o = out_of(d);
    if (loc.file < d->nfiles) {
        uint32_t line, col;
        diag_linecol(d, loc, &line, &col);
        fprintf(o, "%s:%u:%u: %s", d->files[loc.file].path, line, col, kind);
    } else {
        fprintf(o, "pipec: %s", kind);
    }
    vfprintf(o, fmt, ap);
    fputc('\n', o);
    quote(d, loc);
}

void diag_error(Diag *d, Loc loc, DiagCode code, const char *fmt, ...)
{
    if (d->demote) {
        d->nwarn++;
    } else {
        d->nerr++;
        if ((unsigned)code < DIAG_NCODES)
            d->ncode[code]++;
    }
    if (!printed_ok(d))
        return;
    char kind[48];
    snprintf(kind, sizeof kind, "%s[%s]: ", d->demote ? "warning" : "error", diag_code_name[code]);
    va_list ap;
    va_start(ap, fmt);
    vreport(d, loc, kind, fmt, ap);
    va_end(ap);
    const Span *x = &d->expand_span;
    if (loc.file == x->file && loc.off >= x->off && loc.off < x->end)
        diag_note(d, d->expand_at, "%s", d->expand_note);
}

void diag_set_expansion(Diag *d, Span span, Loc at, const char *note)
{
    d->expand_span = span;
    d->expand_at = at;
    snprintf(d->expand_note, sizeof d->expand_note, "%s", note ? note : "");
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

void diag_warning(Diag *d, Loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(d, loc, "warning: ", fmt, ap);
    va_end(ap);
}

void diag_free(Diag *d)
{
    for (uint32_t i = 0; i < d->nfiles; i++) {
        free(d->files[i].path);
        free(d->files[i].text);
        free(d->files[i].lines);
    }
    free(d->files);
    d->files = NULL;
    d->nfiles = d->cap = 0;
}
