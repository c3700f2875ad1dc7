/* sim_gantt.c - `pipec sim --gantt`: an ASCII timeline, one row per stage (plus a row per
 * swap stream a stage uses), scaled so the makespan fills the given width (the
 * terminal's, or $COLUMNS).
 *
 *     stage 0 |F0-F1-F2-F3-B0===F4-B1===  F5-...
 *
 * An op is drawn from round(start/scale) to round(end/scale) columns (at least one when
 * it takes time): its whole name ("F3", "B3.1") then the fill character of its kind when
 * the box holds the name, else the fill character only — never a cut name, which could
 * read as another op (F1 for F12). Idle time is blank, a character no op uses. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opsem.h"
#include "sim.h"

/* A "nice" tick step (1, 2 or 5 times a power of ten) close to span / n. */
static double nice_step(double span, int n)
{
    if (!(span > 0) || n < 1)
        return 1;
    double raw = span / n, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

/* Draws one row; returns the number of ops drawn without their name (box too short). */
static uint32_t draw_row(StrBuf *out, const char *label, int lw, const StageOps *so, int stream,
                         const double *start, const double *end, double scale, int cols)
{
    uint32_t unnamed = 0;
    char *line = xmalloc((size_t)cols + 1);
    memset(line, ' ', (size_t)cols);
    line[cols] = 0;
    char name[48];
    for (uint32_t i = 0; i < so->n; i++) {
        const Op *o = &so->ops[i];
        if (o->kind >= OP_NKINDS || (int)op_stream((OpKind)o->kind) != stream)
            continue;
        long c0 = lround(start[i] * scale), c1 = lround(end[i] * scale);
        if (c1 <= c0 && end[i] > start[i])
            c1 = c0 + 1;
        if (c0 < 0)
            c0 = 0;
        if (c1 > cols)
            c1 = cols;
        if (c0 >= c1)
            continue;
        op_name(name, sizeof name, (OpKind)o->kind, o->mb, o->chunk);
        size_t nl = strlen(name);
        if ((size_t)(c1 - c0) < nl) { /* no room for the whole name: the kind's fill only */
            nl = 0;
            unnamed++;
        }
        for (long c = c0; c < c1; c++) {
            size_t j = (size_t)(c - c0);
            line[c] = j < nl ? name[j] : op_sem[o->kind].glyph;
        }
    }
    sb_printf(out, "%*s |%s\n", lw, label, line);
    free(line);
    return unnamed;
}

void sim_write_gantt(StrBuf *out, const Pipeline *p, const SimResult *r, int width)
{
    int lw = 0;
    char label[64];
    for (int32_t s = 0; s < p->P; s++) {
        int n = snprintf(label, sizeof label, "stage %d out", s);
        if (n > lw)
            lw = n;
    }
    int cols = width - lw - 2;
    if (cols < 10)
        cols = 10;
    double span = r->makespan_ms;
    double scale = span > 0 ? cols / span : 0;  /* columns per ms */
    uint32_t unnamed = 0;
    for (int32_t s = 0; s < p->P; s++) {
        const StageOps *so = &p->stages[s];
        bool has[STREAM_N] = {false, false, false};
        for (uint32_t i = 0; i < so->n; i++)
            if (so->ops[i].kind < OP_NKINDS)
                has[op_stream((OpKind)so->ops[i].kind)] = true;
        snprintf(label, sizeof label, "stage %d", s);
        unnamed += draw_row(out, label, lw, so, STREAM_COMPUTE, r->start[s], r->end[s], scale, cols);
        if (has[STREAM_D2H]) {
            snprintf(label, sizeof label, "stage %d out", s);
            unnamed += draw_row(out, label, lw, so, STREAM_D2H, r->start[s], r->end[s], scale, cols);
        }
        if (has[STREAM_H2D]) {
            snprintf(label, sizeof label, "stage %d in", s);
            unnamed += draw_row(out, label, lw, so, STREAM_H2D, r->start[s], r->end[s], scale, cols);
        }
    }
    /* The axis: '+' at each tick, the tick's time under it when there is room. */
    double step = nice_step(span, cols / 12 > 1 ? cols / 12 : 1);
    char *axis = xmalloc((size_t)cols + 1), *nums = xmalloc((size_t)cols + 32);
    memset(axis, '-', (size_t)cols);
    memset(nums, ' ', (size_t)cols + 31);
    axis[cols] = 0;
    nums[cols + 31] = 0;
    int next_free = 0;
    for (int t = 0; span > 0; t++) {
        double ms = t * step;
        if (ms > span * (1 + 1e-9))
            break;
        long c = lround(ms * scale);
        if (c >= cols)
            c = cols - 1;
        axis[c] = '+';
        char num[32];
        int n = snprintf(num, sizeof num, "%g", ms);
        if (c >= next_free && c + n <= cols + 30) {
            memcpy(nums + c, num, (size_t)n);
            next_free = (int)c + n + 1;
        }
    }
    int end = cols + 30;
    while (end > 0 && nums[end - 1] == ' ')
        end--;
    nums[end] = 0;
    sb_printf(out, "%*s  %s\n%*s  %s\n", lw, "", axis, lw, "ms", nums);
    /* The legend, wrapped to the width. */
    char scl[48];
    snprintf(scl, sizeof scl, "(1 column = %.3g ms)", scale > 0 ? 1 / scale : 0);
    /* OG/LW (model-state offload) are listed only when the schedule has them. */
    bool offload = opsem_lists(p, op_chunkwide);
    /* RO (overlapped recomputation) likewise */
    bool overlap = opsem_lists(p, op_overlaps_host);
    char more[96] = "";
    if (unnamed)
        snprintf(more, sizeof more, "(%u ops too short to name: fill only)", unnamed);
    const char *items[] = {"F forward (-)", "B backward (=)", "W weight grad (~)",
                           "R recompute (+)", "SO swap out (>)", "SI swap in (<)",
                           "OG grad offload + host step (})", "LW weight load ({)",
                           "RO overlapped recompute, exposed part (*)", "blank: idle", scl, more};
    int col = width;  /* forces a new line first */
    for (size_t i = 0; i < sizeof items / sizeof *items; i++) {
        if ((!offload && (i == 6 || i == 7)) || (!overlap && i == 8) || !*items[i])
            continue;
        int len = (int)strlen(items[i]);
        if (col + 2 + len > width) {
            sb_printf(out, "%s%*s", i ? "\n" : "", lw, "");
            col = lw;
        }
        sb_printf(out, "  %s", items[i]);
        col += len + 2;
    }
    sb_putc(out, '\n');
    free(axis);
    free(nums);
}
