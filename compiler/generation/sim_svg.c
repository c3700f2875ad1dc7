/* sim_svg.c - `pipec sim --svg` and `pipec diff --svg`: a self-contained SVG timeline for
 * papers. Stages are rows (a thin sub-row under a stage for each swap stream it uses);
 * F/B/W/R/SO/SI/OG/LW boxes in distinct colours with the micro-batch number ("m" or "m.c") on
 * them, odd chunks striped (the legend says so); the row background is hatched, so every
 * bubble shows as hatching; under each stage a strip with its live memory over time
 * (docs/spec.md "Memory", replayed over the simulated times) on its own small axis, and a
 * dashed budget line; a legend that wraps to the width; an axis in ms with "nice" ticks (1, 2, 5 x
 * 10^k) and grid lines; the peak memory of each stage (and its budget) at the right of
 * its row. The plot is as wide as the schedule needs (SVG_MIN_OP_PX per op of the
 * busiest rank, between the default width and SVG_MAX_WIDTH) unless a width is given;
 * a box's label shrinks to fit it and is left out below a readable size, so labels never
 * overlap. No scripts, no external fonts or images. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "human.h"
#include "opsem.h"
#include "sim.h"
#include "sim_svg.h"

enum {
    WIDTH = SVG_DEFAULT_WIDTH,
    LEFT = 78,          /* stage labels */
    RIGHT = 150,        /* peak memory column */
    ROW_H = 26,         /* compute row */
    SUB_H = 12,         /* swap sub-row */
    ROW_GAP = 8,
    MEM_H = 18,         /* memory strip under a stage */
};

typedef struct Frame {
    double x0, pw;      /* plot left edge and width, px */
    double tmax;        /* ms at the right edge */
    int width;          /* the picture's width, px */
} Frame;

/* The picture's width for schedules ps: opts->width, else wide enough for
 * SVG_MIN_OP_PX per op of the busiest rank, within [WIDTH, SVG_MAX_WIDTH]. */
static int picture_width(const Pipeline *const *ps, int np, const SvgOpts *opts)
{
    if (opts && opts->width > 0)
        return opts->width < LEFT + RIGHT + 100 ? LEFT + RIGHT + 100 : opts->width;
    double need = 0;
    for (int k = 0; k < np; k++)
        for (int32_t s = 0; s < ps[k]->P; s++)
            need = fmax(need, (double)ps[k]->stages[s].n * SVG_MIN_OP_PX);
    double w = need + LEFT + RIGHT;
    return w < WIDTH ? WIDTH : w > SVG_MAX_WIDTH ? SVG_MAX_WIDTH : (int)ceil(w);
}

static double xpos(const Frame *f, double ms)
{
    return f->x0 + (f->tmax > 0 ? ms / f->tmax * f->pw : 0);
}

static void xml_text(StrBuf *out, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<': sb_puts(out, "&lt;"); break;
        case '>': sb_puts(out, "&gt;"); break;
        case '&': sb_puts(out, "&amp;"); break;
        case '"': sb_puts(out, "&quot;"); break;
        default:
            if ((unsigned char)*s >= 0x20)
                sb_putc(out, *s);
        }
    }
}

static double nice_step(double span, int n)
{
    if (!(span > 0))
        return 1;
    double raw = span / n, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

/* Which streams each rank uses. */
static void streams_used(const StageOps *so, bool has[STREAM_N])
{
    has[0] = true;
    has[1] = has[2] = false;
    for (uint32_t i = 0; i < so->n; i++)
        if (so->ops[i].kind < OP_NKINDS)
            has[op_stream((OpKind)so->ops[i].kind)] = true;
}

static double panel_height(const Pipeline *p)
{
    double h = 0;
    for (int32_t s = 0; s < p->P; s++) {
        bool has[STREAM_N];
        streams_used(&p->stages[s], has);
        h += ROW_H + (has[1] ? SUB_H + 1 : 0) + (has[2] ? SUB_H + 1 : 0) + MEM_H + 2 + ROW_GAP;
    }
    return h;
}

/* The memory strip: live bytes of rank s over the simulated times as a step line,
 * scaled to max(budget, peak); the budget as a dashed red line. */
typedef struct MemPath {
    StrBuf *out;
    const Frame *f;
    double y, h, scale, last_y;
    bool started;
} MemPath;

static void mem_point(void *ctx, double t_ms, double bytes)
{
    MemPath *m = ctx;
    double x = xpos(m->f, t_ms), y = m->y + m->h - bytes * m->scale;
    if (!m->started)
        sb_printf(m->out, "M%.2f %.2f", x, y);
    else
        sb_printf(m->out, "H%.2fV%.2f", x, y);
    m->started = true;
    m->last_y = y;
}

static void draw_memory(StrBuf *out, const Pipeline *p, const SimResult *r, double *const *delta,
                        int32_t s, const Frame *f, double y)
{
    const SimStage *S = &r->stage[s];
    double top = fmax(S->peak_mem_bytes, p->has_memory ? p->memory : 0);
    if (!(top > 0))
        return;
    MemPath m = {.out = out, .f = f, .y = y, .h = MEM_H, .scale = MEM_H / top};
    sb_printf(out, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" class=\"memb\"/>\n",
              f->x0, y, xpos(f, r->makespan_ms) - f->x0, MEM_H);
    sb_puts(out, "<path class=\"memc\" d=\"");
    mem_point(&m, 0, S->static_mem_bytes);
    sim_mem_replay(p, r, delta, s, mem_point, &m);
    char a[32];
    sb_printf(out, "H%.2f\"><title>stage %d memory: peak ", xpos(f, r->makespan_ms), s);
    sb_puts(out, human_size(a, sizeof a, S->peak_mem_bytes));
    if (p->has_memory)
        sb_printf(out, " of %s", human_size(a, sizeof a, p->memory));
    sb_puts(out, "</title></path>\n");
    /* The strip's scale: an axis at its left edge from 0 to `top`, in bytes units. */
    sb_printf(out, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" class=\"axis\"/>"
                   "<text x=\"%.2f\" y=\"%.1f\" class=\"memax\">%s</text>"
                   "<text x=\"%.2f\" y=\"%.1f\" class=\"memax\">0 B</text>\n",
              f->x0, y, f->x0, y + MEM_H, f->x0 - 3, y + 7, human_size(a, sizeof a, top),
              f->x0 - 3, y + MEM_H);
    if (p->has_memory) {
        double yb = y + MEM_H - p->memory * m.scale;
        sb_printf(out, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" class=\"budget\"/>\n",
                  f->x0, yb, xpos(f, r->makespan_ms), yb);
    }
}

static void draw_ops(StrBuf *out, const Frame *f, const StageOps *so, int stream,
                     const double *start, const double *end, double y, double h)
{
    double fs = h >= ROW_H ? 11 : 8;   /* largest font size, px */
    for (uint32_t i = 0; i < so->n; i++) {
        const Op *o = &so->ops[i];
        if (o->kind >= OP_NKINDS || (int)op_stream((OpKind)o->kind) != stream)
            continue;
        double x0 = xpos(f, start[i]), x1 = xpos(f, end[i]), w = x1 - x0;
        if (w <= 0)
            continue;
        char nm[48];
        sb_printf(out, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
                       "class=\"op\">"
                       "<title>%s: %.6g-%.6g ms</title></rect>\n",
                  x0, y, w, h, op_sem[o->kind].colour,
                  op_name(nm, sizeof nm, (OpKind)o->kind, o->mb, o->chunk), start[i], end[i]);
        /* Odd chunks carry white stripes (the legend's "chunk" entry), never a lighter
         * fill: a pale box reads as idle. */
        if (o->chunk & 1)
            sb_printf(out, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
                           "class=\"chunk\"/>\n",
                      x0, y, w, h);
        char lab[32];
        if (OP_IS_CHUNKWIDE(o->kind)) /* chunk-wide: the kind and chunk, no micro-batch */
            snprintf(lab, sizeof lab, "%s.%u", op_kind_name[o->kind], o->chunk);
        else if (o->chunk)
            snprintf(lab, sizeof lab, "%u.%u", o->mb, o->chunk);
        else
            snprintf(lab, sizeof lab, "%u", o->mb);
        /* The largest font up to fs that fits the box (glyphs ~0.62 em wide), >= 6px. */
        double fit = (w - 2) / (strlen(lab) * 0.62), sz = fit < fs ? fit : fs;
        if (sz >= 6)
            sb_printf(out, "<text x=\"%.2f\" y=\"%.1f\" class=\"mb\" font-size=\"%.1f\">%s</text>\n",
                      x0 + w / 2, y + h / 2 + sz * 0.36, sz, lab);
    }
}

/* One schedule's rows from y down; returns the y below them. */
static double draw_panel(StrBuf *out, const Pipeline *p, const SimResult *r, const Frame *f,
                         double y)
{
    char a[64], b[64];
    double **delta = sim_mem_deltas_new(p);
    for (int32_t s = 0; s < p->P; s++) {
        const StageOps *so = &p->stages[s];
        bool has[STREAM_N], offload = false;
        streams_used(so, has);
        for (uint32_t i = 0; i < so->n && !offload; i++)
            offload = OP_IS_CHUNKWIDE(so->ops[i].kind);
        double h = ROW_H + (has[1] ? SUB_H + 1 : 0) + (has[2] ? SUB_H + 1 : 0);
        double bx1 = xpos(f, r->makespan_ms);
        /* Hatched background up to this schedule's makespan: idle shows through. */
        sb_printf(out, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" "
                       "fill=\"url(#idle)\" stroke=\"#bbb\" stroke-width=\"0.5\"/>\n",
                  f->x0, y, bx1 - f->x0, ROW_H);
        sb_printf(out, "<text x=\"%d\" y=\"%.1f\" class=\"lab\">stage %d</text>\n", LEFT - 8,
                  y + ROW_H / 2.0 + 4, s);
        draw_ops(out, f, so, STREAM_COMPUTE, r->start[s], r->end[s], y, ROW_H);
        double yy = y + ROW_H + 1;
        for (int st = STREAM_D2H; st <= STREAM_H2D; st++) {
            if (!has[st])
                continue;
            sb_printf(out, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" "
                           "fill=\"#f4f4f4\"/>\n<text x=\"%d\" y=\"%.1f\" class=\"sub\">%s</text>\n",
                      f->x0, yy, bx1 - f->x0, SUB_H, LEFT - 8, yy + SUB_H - 3,
                      st == STREAM_D2H ? (offload ? "to host" : "swap out")
                                       : (offload ? "from host" : "swap in"));
            draw_ops(out, f, so, st, r->start[s], r->end[s], yy, SUB_H);
            yy += SUB_H + 1;
        }
        const SimStage *S = &r->stage[s];
        bool over = p->has_memory && S->peak_mem_bytes > p->memory;
        sb_printf(out, "<text x=\"%.2f\" y=\"%.1f\" class=\"mem\"%s>%s", f->x0 + f->pw + 10,
                  y + ROW_H / 2.0 + 4, over ? " fill=\"#C44E52\"" : "",
                  sim_fmt_size(a, sizeof a, S->peak_mem_bytes));
        if (p->has_memory)
            sb_printf(out, " / %s", sim_fmt_size(b, sizeof b, p->memory));
        sb_puts(out, "</text>\n");
        draw_memory(out, p, r, delta, s, f, y + h + 1);
        y += h + MEM_H + 2 + ROW_GAP;
    }
    sim_mem_deltas_free(p, delta);
    return y;
}

static void draw_axis(StrBuf *out, const Frame *f, double ytop, double ybot)
{
    double step = nice_step(f->tmax, 10);
    for (int i = 0;; i++) {
        double t = i * step;
        if (t > f->tmax * (1 + 1e-9) || i > 1000)
            break;
        double x = xpos(f, t);
        sb_printf(out, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" class=\"grid\"/>\n"
                       "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" class=\"axis\"/>\n"
                       "<text x=\"%.2f\" y=\"%.1f\" class=\"tick\">%g</text>\n",
                  x, ytop, x, ybot, x, ybot, x, ybot + 5, x, ybot + 18, t);
    }
    sb_printf(out, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" class=\"axis\"/>\n",
              f->x0, ybot, f->x0 + f->pw, ybot);
    sb_printf(out, "<text x=\"%.2f\" y=\"%.1f\" class=\"tick\">time (ms)</text>\n",
              f->x0 + f->pw / 2, ybot + 36);
}

/* ---- the legend: planned (which entries, where; it wraps) then written ------------- */

typedef enum Swatch { SW_BOX, SW_CHUNK, SW_IDLE, SW_MEM, SW_BUDGET, SW_MAKESPAN } Swatch;

typedef struct LegEntry {
    Swatch sw;
    const char *fill;   /* SW_BOX: the kind's colour */
    const char *label;
    double x;           /* left edge, px */
    int line;           /* 0 = the first legend line */
} LegEntry;

enum { LEG_MAX = OP_NKINDS + 5, LEG_Y = 44, LEG_LINE = 17 };

/* Legend text is 11 px; 6.6 px a character bounds Helvetica's and Arial's widths. */
static double leg_width(const LegEntry *e)
{
    return 18 + strlen(e->label) * 6.6;
}

/* The legend's entries for schedules ps, laid out from LEFT in lines that end before the
 * peak-memory column (width - RIGHT); pair adds the makespan markers of `diff --svg`.
 * Returns the number of entries; *lines gets the number of lines. */
static int legend_plan(const Pipeline *const *ps, int np, bool pair, int width, LegEntry *e,
                       int *lines)
{
    bool used[OP_NKINDS] = {false}, odd = false;
    int32_t vmax = 1;
    for (int k = 0; k < np; k++) {
        vmax = ps[k]->V > vmax ? ps[k]->V : vmax;
        for (int32_t s = 0; s < ps[k]->P; s++)
            for (uint32_t i = 0; i < ps[k]->stages[s].n; i++) {
                const Op *o = &ps[k]->stages[s].ops[i];
                if (o->kind < OP_NKINDS)
                    used[o->kind] = true;
                odd |= (o->chunk & 1) != 0;
            }
    }
    int n = 0;
    for (int k = 0; k < OP_NKINDS; k++)
        if (used[k])
            e[n++] = (LegEntry){SW_BOX, op_sem[k].colour, op_sem[k].label, 0, 0};
    if (odd)
        e[n++] = (LegEntry){SW_CHUNK, NULL, vmax == 2 ? "chunk 1" : "odd chunks", 0, 0};
    e[n++] = (LegEntry){SW_IDLE, NULL, "idle (bubble)", 0, 0};
    e[n++] = (LegEntry){SW_MEM, NULL, "memory", 0, 0};
    e[n++] = (LegEntry){SW_BUDGET, NULL, "budget", 0, 0};
    if (pair)
        e[n++] = (LegEntry){SW_MAKESPAN, NULL, "makespan of A, B", 0, 0};
    double x = LEFT, xmax = width - RIGHT;
    int line = 0;
    for (int k = 0; k < n; k++) {
        double w = leg_width(&e[k]);
        if (x > LEFT && x + w > xmax) {
            line++;
            x = LEFT;
        }
        e[k].x = x;
        e[k].line = line;
        x += w + 18;
    }
    *lines = line + 1;
    return n;
}

/* The downward triangle that heads a makespan marker, its tip at (x, y). */
static void makespan_mark(StrBuf *out, double x, double y)
{
    sb_printf(out, "<path d=\"M%.2f %.1fL%.2f %.1fL%.2f %.1fZ\" class=\"mkt\"/>", x - 4, y - 7,
              x + 4, y - 7, x, y);
}

static void legend(StrBuf *out, const LegEntry *e, int n, int width)
{
    for (int k = 0; k < n; k++) {
        double x = e[k].x, y = LEG_Y + e[k].line * LEG_LINE;
        sb_puts(out, "<g class=\"leg-entry\">");
        switch (e[k].sw) {
        case SW_BOX:
            sb_printf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>",
                      x, y - 10, e[k].fill);
            break;
        case SW_CHUNK:
            sb_printf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" "
                           "fill=\"#8C8C8C\"/><rect x=\"%.1f\" y=\"%.1f\" width=\"12\" "
                           "height=\"12\" class=\"chunk\"/>",
                      x, y - 10, x, y - 10);
            break;
        case SW_IDLE:
            sb_printf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" "
                           "fill=\"url(#idle)\" stroke=\"#bbb\" stroke-width=\"0.5\"/>",
                      x, y - 10);
            break;
        case SW_MEM:
        case SW_BUDGET:
            sb_printf(out, "<path d=\"M%.1f %.1fH%.1f\" class=\"%s\"/>", x, y - 4, x + 14,
                      e[k].sw == SW_MEM ? "memc" : "budget");
            break;
        case SW_MAKESPAN:
            sb_printf(out, "<path d=\"M%.1f %.1fV%.1f\" class=\"mksp\"/>", x + 6, y - 3, y + 2);
            makespan_mark(out, x + 6, y - 3);
            break;
        }
        sb_printf(out, "<text x=\"%.1f\" y=\"%.1f\" class=\"leg\">%s</text></g>\n", x + 18, y,
                  e[k].label);
    }
    sb_printf(out, "<text x=\"%d\" y=\"%d\" class=\"leg\">peak memory</text>\n",
              width - RIGHT + 10, LEG_Y);
}

static void header(StrBuf *out, int width, double height)
{
    sb_printf(out,
              "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
              "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\" "
              "viewBox=\"0 0 %d %.0f\" font-family=\"Helvetica, Arial, sans-serif\">\n"
              "<defs><pattern id=\"idle\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
              "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fafafa\"/>"
              "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#c8c8c8\" stroke-width=\"2\"/>"
              "</pattern><pattern id=\"chunk\" width=\"5\" height=\"5\" "
              "patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(-45)\">"
              "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"5\" stroke=\"#fff\" stroke-width=\"1.4\"/>"
              "</pattern></defs>\n"
              "<style>.op{stroke:#fff;stroke-width:0.6}.mb{fill:#fff;text-anchor:middle;font-weight:600}"
              ".lab{font-size:12px;text-anchor:end;fill:#222}"
              ".sub{font-size:9px;text-anchor:end;fill:#666}"
              ".mem{font-size:11px;fill:#222}"
              ".tick{font-size:11px;text-anchor:middle;fill:#333}"
              ".leg{font-size:11px;fill:#222}"
              ".title{font-size:14px;font-weight:600;fill:#111}"
              ".grid{stroke:#000;stroke-opacity:0.08;stroke-width:1}"
              ".axis{stroke:#333;stroke-width:1}"
              ".memb{fill:#f7f7f7}.memc{fill:none;stroke:#4C72B0;stroke-width:1.2}"
              ".budget{stroke:#C44E52;stroke-width:1;stroke-dasharray:4 3}"
              ".chunk{fill:url(#chunk);pointer-events:none}"
              ".memax{font-size:8px;text-anchor:end;fill:#666}"
              ".mksp{stroke:#222;stroke-width:1.2;stroke-dasharray:7 2 1 2}.mkt{fill:#222}"
              ".mkl{font-size:10px;font-weight:600;fill:#222}</style>\n"
              "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
              width, height, width, height);
}

/* The title line: at 14 px from LEFT when it fits the picture, else from the left edge
 * in the font size that fits (bold glyphs ~0.62 em wide), at least 8 px. */
static void title(StrBuf *out, const Pipeline *p, const SimResult *r, const char *tag, double y,
                  int width)
{
    StrBuf t = {0};
    if (tag) {
        xml_text(&t, tag);
        sb_puts(&t, " \xe2\x80\x94 ");
    }
    xml_text(&t, p->name ? p->name : "pipeline");
    sb_printf(&t, " \xe2\x80\x94 %d stage%s, %d micro-batch%s", p->P, p->P == 1 ? "" : "s",
              p->M, p->M == 1 ? "" : "es");
    if (p->V > 1)
        sb_printf(&t, ", %d chunks", p->V);
    char ms[32];
    sb_printf(&t, "; makespan %s, bubble ratio %.1f%%%s", human_ms(ms, sizeof ms, r->makespan_ms),
              human_fix(100 * r->bubble_ratio, 1), r->stuck ? " (stuck: partial)" : "");
    size_t chars = 0; /* UTF-8 characters (an entity's letters count: an overestimate) */
    for (const char *c = t.s; *c; c++)
        chars += (*c & 0xc0) != 0x80;
    double x = LEFT, fs = 14;
    if (LEFT + chars * 0.62 * fs > width - 8) {
        x = 8;
        fs = (width - 16) / (chars * 0.62);
        fs = fs < 8 ? 8 : fs > 14 ? 14 : fs;
    }
    sb_printf(out, "<text x=\"%.0f\" y=\"%.1f\"", x, y);
    if (fs < 14)
        sb_printf(out, " font-size=\"%.1f\"", fs);
    sb_printf(out, " class=\"title\">%s</text>\n", t.s);
    sb_free(&t);
}

void svg_write(StrBuf *out, const Pipeline *p, const SimResult *r, const SvgOpts *opts)
{
    const Pipeline *ps[1] = {p};
    int width = picture_width(ps, 1, opts);
    Frame f = {LEFT, width - LEFT - RIGHT, r->makespan_ms, width};
    LegEntry le[LEG_MAX];
    int lines, nle = legend_plan(ps, 1, false, width, le, &lines);
    double top = LEG_Y + 14 + (lines - 1) * LEG_LINE, rows = panel_height(p);
    double height = top + rows + 48;
    header(out, width, height);
    title(out, p, r, NULL, 22, width);
    legend(out, le, nle, width);
    draw_panel(out, p, r, &f, top);
    draw_axis(out, &f, top - 4, top + rows - ROW_GAP + 4);
    sb_puts(out, "</svg>\n");
}

void sim_write_svg(StrBuf *out, const Pipeline *p, const SimResult *r)
{
    svg_write(out, p, r, NULL);
}

void svg_write_pair(StrBuf *out, const Pipeline *a, const SimResult *ra, const char *la,
                    const Pipeline *b, const SimResult *rb, const char *lb, const SvgOpts *opts)
{
    double tmax = fmax(ra->makespan_ms, rb->makespan_ms);
    const Pipeline *ps[2] = {a, b};
    int width = picture_width(ps, 2, opts);
    Frame f = {LEFT, width - LEFT - RIGHT, tmax, width};
    LegEntry le[LEG_MAX];
    int lines, nle = legend_plan(ps, 2, true, width, le, &lines);
    double top = LEG_Y + 14 + (lines - 1) * LEG_LINE, ha = panel_height(a), hb = panel_height(b);
    double gap = 34, height = top + ha + gap + hb + 48;
    header(out, width, height);
    title(out, a, ra, la ? la : "A", 22, width);
    legend(out, le, nle, width);
    double y = draw_panel(out, a, ra, &f, top);
    double yb = y + gap;
    title(out, b, rb, lb ? lb : "B", yb - 10, width);
    draw_panel(out, b, rb, &f, yb);
    double ybot = yb + hb - ROW_GAP + 4;
    draw_axis(out, &f, top - 4, ybot);
    /* The makespan of each as a dark dash-dot line across both panels, headed by a
     * triangle and its letter: nothing like the budget's red dashes. */
    const SimResult *rs[2] = {ra, rb};
    for (int k = 0; k < 2; k++) {
        double x = xpos(&f, rs[k]->makespan_ms);
        sb_printf(out, "<g class=\"makespan\"><line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" "
                       "y2=\"%.1f\" class=\"mksp\"/>",
                  x, top - 4, x, ybot);
        makespan_mark(out, x, top - 3);
        sb_printf(out, "<text x=\"%.2f\" y=\"%.1f\" class=\"mkl\">%c</text></g>\n",
                  x + (k ? 5 : -11), top - 3, k ? 'B' : 'A');
    }
    sb_puts(out, "</svg>\n");
}

void sim_write_svg_pair(StrBuf *out, const Pipeline *a, const SimResult *ra, const char *la,
                        const Pipeline *b, const SimResult *rb, const char *lb)
{
    svg_write_pair(out, a, ra, la, b, rb, lb, NULL);
}
