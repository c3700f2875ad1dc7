/* sim_svg.c - `pipec sim --svg` and `pipec diff --svg`: a self-contained SVG timeline for
 * papers. Stages are rows (a thin sub-row under a stage for each swap stream it uses);
 * F/B/W/R/SO/SI/OG/LW boxes in distinct colours with the micro-batch number ("m" or "m.c") on
 * them; the row background is hatched, so every bubble shows as hatching; under each
 * stage a strip with its live memory over time (DESIGN.md "Memory", replayed over the
 * simulated times) and a dashed budget line; an axis in ms with "nice" ticks (1, 2, 5 x
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
#include "sim.h"
#include "sim_svg.h"

/* Colours per kind (colour-blind-safe "deep" palette); the HTML timeline uses them too. */
const char *const svg_kind_fill[OP_NKINDS] = {"#4C72B0", "#55A868", "#8172B3", "#C44E52",
                                                 "#DD8452", "#937860", "#DA8BC3", "#8C8C8C", "#E6A0A3"};
const char *const svg_kind_label[OP_NKINDS] = {
    "F forward",   "B backward", "W weight grad", "R recompute", "SO swap out", "SI swap in",
    "OG grad offload + host step", "LW weight load", "RO overlapped recompute"};

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
    sb_printf(out, "H%.2f\"><title>stage %d memory: peak ", xpos(f, r->makespan_ms), s);
    char a[32];
    sb_puts(out, human_size(a, sizeof a, S->peak_mem_bytes));
    if (p->has_memory)
        sb_printf(out, " of %s", human_size(a, sizeof a, p->memory));
    sb_puts(out, "</title></path>\n");
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
        sb_printf(out, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"%s "
                       "class=\"op\">"
                       "<title>%s: %.6g-%.6g ms</title></rect>\n",
                  x0, y, w, h, svg_kind_fill[o->kind], o->chunk & 1 ? " fill-opacity=\"0.72\"" : "",
                  op_name(nm, sizeof nm, (OpKind)o->kind, o->mb, o->chunk), start[i], end[i]);
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
    double **delta = xmalloc(((size_t)p->P ? (size_t)p->P : 1) * sizeof *delta);
    for (int32_t s = 0; s < p->P; s++)
        delta[s] = xcalloc(p->stages[s].n ? p->stages[s].n : 1, sizeof **delta);
    sim_mem_deltas(p, delta);
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
    for (int32_t s = 0; s < p->P; s++)
        free(delta[s]);
    free(delta);
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

static void legend(StrBuf *out, const Pipeline *const *ps, int np, double y, int width)
{
    bool used[OP_NKINDS] = {false};
    for (int k = 0; k < np; k++)
        for (int32_t s = 0; s < ps[k]->P; s++)
            for (uint32_t i = 0; i < ps[k]->stages[s].n; i++)
                if (ps[k]->stages[s].ops[i].kind < OP_NKINDS)
                    used[ps[k]->stages[s].ops[i].kind] = true;
    double x = LEFT;
    for (int k = 0; k < OP_NKINDS; k++) {
        if (!used[k])
            continue;
        sb_printf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\" class=\"leg\">%s</text>\n",
                  x, y - 10, svg_kind_fill[k], x + 16, y, svg_kind_label[k]);
        x += 16 + strlen(svg_kind_label[k]) * 6.6 + 18;
    }
    sb_printf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"url(#idle)\" "
                   "stroke=\"#bbb\" stroke-width=\"0.5\"/><text x=\"%.1f\" y=\"%.1f\" "
                   "class=\"leg\">idle (bubble)</text>\n",
              x, y - 10, x + 16, y);
    x += 16 + 13 * 6.6 + 18;
    sb_printf(out, "<path d=\"M%.1f %.1fH%.1f\" class=\"memc\"/><text x=\"%.1f\" y=\"%.1f\" "
                   "class=\"leg\">memory</text><path d=\"M%.1f %.1fH%.1f\" class=\"budget\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" class=\"leg\">budget</text>\n",
              x, y - 4, x + 14, x + 18, y, x + 70, y - 4, x + 84, x + 88, y);
    sb_printf(out, "<text x=\"%d\" y=\"%.1f\" class=\"leg\">peak memory</text>\n",
              width - RIGHT + 10, y);
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
              ".budget{stroke:#C44E52;stroke-width:1;stroke-dasharray:4 3}</style>\n"
              "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
              width, height, width, height);
}

static void title(StrBuf *out, const Pipeline *p, const SimResult *r, const char *tag, double y)
{
    sb_printf(out, "<text x=\"%d\" y=\"%.1f\" class=\"title\">", LEFT, y);
    if (tag) {
        xml_text(out, tag);
        sb_puts(out, " \xe2\x80\x94 ");
    }
    xml_text(out, p->name ? p->name : "pipeline");
    sb_printf(out, " \xe2\x80\x94 %d stage%s, %d micro-batch%s", p->P, p->P == 1 ? "" : "s",
              p->M, p->M == 1 ? "" : "es");
    if (p->V > 1)
        sb_printf(out, ", %d chunks", p->V);
    char ms[32];
    sb_printf(out, "; makespan %s, bubble ratio %.1f%%%s</text>\n",
              human_ms(ms, sizeof ms, r->makespan_ms), 100 * r->bubble_ratio,
              r->stuck ? " (stuck: partial)" : "");
}

void svg_write(StrBuf *out, const Pipeline *p, const SimResult *r, const SvgOpts *opts)
{
    const Pipeline *ps[1] = {p};
    int width = picture_width(ps, 1, opts);
    Frame f = {LEFT, width - LEFT - RIGHT, r->makespan_ms, width};
    double top = 58, rows = panel_height(p), height = top + rows + 48;
    header(out, width, height);
    title(out, p, r, NULL, 22);
    legend(out, ps, 1, 44, width);
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
    double top = 58, ha = panel_height(a), hb = panel_height(b), gap = 34;
    double height = top + ha + gap + hb + 48;
    header(out, width, height);
    title(out, a, ra, la ? la : "A", 22);
    legend(out, ps, 2, 44, width);
    double y = draw_panel(out, a, ra, &f, top);
    double yb = y + gap;
    title(out, b, rb, lb ? lb : "B", yb - 10);
    draw_panel(out, b, rb, &f, yb);
    double ybot = yb + hb - ROW_GAP + 4;
    draw_axis(out, &f, top - 4, ybot);
    /* The makespan of each as a dashed marker across both panels. */
    const SimResult *rs[2] = {ra, rb};
    for (int k = 0; k < 2; k++) {
        double x = xpos(&f, rs[k]->makespan_ms);
        sb_printf(out, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"%s\" "
                       "stroke-dasharray=\"4 3\" stroke-width=\"1.2\"/>\n",
                  x, top - 4, x, ybot, k ? "#C44E52" : "#4C72B0");
    }
    sb_puts(out, "</svg>\n");
}

void sim_write_svg_pair(StrBuf *out, const Pipeline *a, const SimResult *ra, const char *la,
                        const Pipeline *b, const SimResult *rb, const char *lb)
{
    svg_write_pair(out, a, ra, la, b, rb, lb, NULL);
}
