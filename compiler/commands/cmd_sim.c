/* cmd_sim.c - `pipec sim` (summary, --json, --gantt, --trace, --svg) and `pipec diff`
 * (two schedules side by side, then each stage's op order as a unified diff).
 *
 * The op-order diff is Myers' O((N+M)D) greedy algorithm ("An O(ND) Difference
 * Algorithm and Its Variations", Algorithmica 1986) over op identities, after trimming
 * the common prefix and suffix; it keeps one diagonal row per edit step (O(D^2) ints),
 * so it gives up, saying so, beyond DIFF_MAX_EDITS differences in one stage. */
#define _DEFAULT_SOURCE  /* TIOCGWINSZ */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cmds.h"
#include "driver.h"
#include "human.h"
#include "sim_html.h"
#include "sim.h"
#include "sim_svg.h"
#include "util.h"

#define DIFF_MAX_EDITS 4000
#define DIFF_CONTEXT 3

enum {
    OPT_JSON = 256, OPT_TRACE, OPT_SVG, OPT_GANTT, OPT_HELP, OPT_WIDTH, OPT_HTML, OPT_LARGE,
    OPT_METRICS
};

/* The options sim and diff share (the figures, --json, --help), for their option tables;
 * read_sim_args reads them. */
#define SIM_FIGURE_LONGOPTS                                                                \
    {"json", no_argument, NULL, OPT_JSON},                                                 \
    {"svg", required_argument, NULL, OPT_SVG},                                             \
    {"width", required_argument, NULL, OPT_WIDTH},                                         \
    {"html", required_argument, NULL, OPT_HTML},                                           \
    {"large", no_argument, NULL, OPT_LARGE},                                               \
    {"help", no_argument, NULL, OPT_HELP}

/* --width PX for the SVG: a whole number of pixels; returns false on a bad value. */
static bool parse_width(const char *arg, SvgOpts *so)
{
    char *e;
    long w = strtol(arg, &e, 10);
    if (!*arg || *e || w < 300 || w > SVG_MAX_WIDTH) {
        fprintf(stderr, "pipec: --width wants a whole number of pixels in 300..%d, not '%s'\n",
                SVG_MAX_WIDTH, arg);
        return false;
    }
    so->width = (int)w;
    return true;
}

/* The terminal width for --gantt: $COLUMNS, else the terminal's, else 100. */
static int term_width(void)
{
    const char *c = getenv("COLUMNS");
    if (c && *c) {
        char *e;
        long w = strtol(c, &e, 10);
        if (!*e && w >= 20 && w <= 10000)
            return (int)w;
    }
    struct winsize ws;
    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 100;
}

/* The options of sim and diff. */
typedef struct SimArgs {
    DriverOpts o;     /* the common compile options */
    SvgOpts so;       /* --width */
    bool json, gantt; /* --json, --gantt */
    bool metrics;     /* diff --metrics */
    const char *trace, *svg, *html; /* output paths, NULL when not asked for */
    bool large;       /* --large: draw figures beyond SIM_FIGURE_MAX_OPS */
} SimArgs;

/* Figures (--svg, --html, --trace) are drawn op by op: about 130, 25 and 300 bytes per op.
 * Beyond this many ops they are refused unless --large (docs/simulator.md "Size of the
 * figures"), so that a schedule of millions of ops never writes gigabytes unasked. */
#define SIM_FIGURE_MAX_OPS 250000u

/* Reports a `limit` error at the first pipeline when the figures asked for would draw
 * more than SIM_FIGURE_MAX_OPS ops (nops: all the pipelines drawn together) and --large
 * was not given. Returns true when refused. */
static bool figure_refused(Diag *d, const Pipeline *p, uint64_t nops, const SimArgs *a,
                           const char *cmd)
{
    if (a->large || (!a->svg && !a->html && !a->trace) || nops <= SIM_FIGURE_MAX_OPS)
        return false;
    double mb = (double)nops * (a->trace ? 300 : a->svg ? 130 : 25) / 1e6;
    diag_error(d, p->loc, DIAG_LIMIT,
               "%s %s of %llu ops would write about %.0f MB: figures draw at most %u ops "
               "(--large draws them anyway)", cmd,
               a->trace ? "--trace" : a->svg ? "--svg" : "--html", (unsigned long long)nops, mb,
               SIM_FIGURE_MAX_OPS);
    return true;
}

/* Reads the options of command cmd (longopts: the ones it takes) and checks that nfiles
 * file arguments follow; argv[optind] is the first. Returns -1 to go on, else the exit
 * status (0 after --help, 2 after a usage error), with a->o freed. */
static int read_sim_args(int argc, char **argv, const char *cmd, const struct option *longopts,
                         int nfiles, SimArgs *a)
{
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h" DRIVER_SHORTOPTS, longopts, NULL)) != -1) {
        if (driver_common_opt(&a->o, opt, optarg))
            continue;
        switch (opt) {
        case OPT_JSON: a->json = true; break;
        case OPT_GANTT: a->gantt = true; break;
        case OPT_METRICS: a->metrics = true; break;
        case OPT_TRACE: a->trace = optarg; break;
        case OPT_SVG: a->svg = optarg; break;
        case OPT_HTML: a->html = optarg; break;
        case OPT_LARGE: a->large = true; break;
        case OPT_WIDTH:
            if (!parse_width(optarg, &a->so)) {
                driver_opts_free(&a->o);
                return 2;
            }
            break;
        case 'h':
        case OPT_HELP:
        default:
            driver_opts_free(&a->o);
            return driver_usage_status(cmd, opt == 'h' || opt == OPT_HELP);
        }
    }
    int st = driver_operands(argc, cmd, nfiles);
    if (st >= 0)
        driver_opts_free(&a->o);
    return st;
}

int cmd_sim(int argc, char **argv)
{
    static const struct option longopts[] = {
        SIM_FIGURE_LONGOPTS,
        {"trace", required_argument, NULL, OPT_TRACE},
        {"gantt", no_argument, NULL, OPT_GANTT},
        DRIVER_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    SimArgs sa = {0};
    int st = read_sim_args(argc, argv, "sim", longopts, 1, &sa);
    if (st >= 0)
        return st;
    Diag d = {0};
    Pipeline *p = driver_compile(&d, &sa.o, argv[optind]);
    driver_opts_free(&sa.o);
    if (!p || figure_refused(&d, p, pipeline_nops(p), &sa, "sim")) {
        pipeline_free(p);
        diag_free(&d);
        return 1;
    }
    SimResult *r = simulate(p);
    int rc = 0;
    StrBuf out = {0};
    if (sa.json) {
        sim_write_json(&out, p, r);
    } else {
        sim_write_summary(&out, p, r);
        /* What the columns add up to (docs/spec.md "Time"). */
        sb_puts(&out, "idle = makespan - busy = fwd bubble (first F to first B)\n"
                      "       + bwd bubble (first B to last B) + idle before 1st F, after last B\n");
    }
    if (sa.gantt) {
        StrBuf g = {0};
        sim_write_gantt(&g, p, r, term_width());
        /* With --json, stdout stays one JSON object: the gantt goes to stderr. */
        if (sa.json)
            fputs(sb_str(&g), stderr);
        else {
            sb_putc(&out, '\n');
            sb_puts(&out, sb_str(&g));
        }
        sb_free(&g);
    }
    /* `--svg -` or `--trace -` make standard output that file: the summary goes to stderr. */
    bool to_stdout = !(sa.trace && !strcmp(sa.trace, "-")) &&
                     !(sa.svg && !strcmp(sa.svg, "-")) && !(sa.html && !strcmp(sa.html, "-"));
    fputs(sb_str(&out), to_stdout ? stdout : stderr);
    sb_free(&out);
    if (sa.trace) {
        StrBuf t = {0};
        sim_write_trace(&t, p, r);
        if (write_output(sa.trace, &t))
            rc = 1;
        sb_free(&t);
    }
    if (sa.svg) {
        StrBuf t = {0};
        svg_write(&t, p, r, &sa.so);
        if (write_output(sa.svg, &t))
            rc = 1;
        sb_free(&t);
    }
    if (sa.html) {
        StrBuf t = {0};
        HtmlVariant hv = {p->name, p, r};
        html_write(&t, &hv, 1);
        if (write_output(sa.html, &t))
            rc = 1;
        sb_free(&t);
    }
    if (r->stuck) {
        fprintf(stderr, "pipec: %s: the schedule cannot run to the end\n", argv[optind]);
        rc = 1;
    }
    sim_free(r);
    pipeline_free(p);
    diag_free(&d);
    return rc;
}

/* ---- the op-order diff ---------------------------------------------------------- */

typedef struct Edit {
    char op;        /* '=' both, '-' only in a, '+' only in b */
    uint32_t a, b;  /* positions in a and b (the one that applies) */
} Edit;

static uint64_t op_key(const Op *o)
{
    return (uint64_t)o->kind << 40 | (uint64_t)o->chunk << 32 | o->mb;
}

/* Appends the edit script turning a[0..n) into b[0..m) to *e (Myers' greedy forward
 * pass, then a backtrack over the saved diagonal rows). Returns false when it needs
 * more than DIFF_MAX_EDITS edits. */
static bool myers(const uint64_t *a, uint32_t n, const uint64_t *b, uint32_t m, uint32_t ao,
                  uint32_t bo, Edit **e, size_t *ne, size_t *cap)
{
    /* rows[d] holds V[k] for k = -d..d at offset rowoff[d] + k + d. */
    int64_t *rows = NULL;
    size_t nrows = 0, rowcap = 0, *rowoff = NULL, offcap = 0, noff = 0;
    int64_t D = -1;
    for (int64_t d = 0; d <= (int64_t)n + m; d++) {
        if (d > DIFF_MAX_EDITS)
            break;
        VEC_PUSH(rowoff, noff, offcap, nrows);
        VEC_RESERVE(rows, nrows + 2 * (size_t)d + 1, rowcap);
        int64_t *cur = rows + nrows, *prev = d ? rows + rowoff[d - 1] : NULL;
        nrows += 2 * (size_t)d + 1;
        bool found = false;
        for (int64_t k = -d; k <= d; k += 2) {
            int64_t x;
            if (d == 0)
                x = 0;
            else if (k == -d || (k != d && prev[k - 1 + (d - 1)] < prev[k + 1 + (d - 1)]))
                x = prev[k + 1 + (d - 1)];
            else
                x = prev[k - 1 + (d - 1)] + 1;
            int64_t y = x - k;
            while (x < n && y < m && a[x] == b[y])
                x++, y++;
            cur[k + d] = x;
            if (x >= n && y >= m) {
                found = true;
                break;
            }
        }
        if (found) {
            D = d;
            break;
        }
    }
    if (D < 0) {
        free(rows);
        free(rowoff);
        return false;
    }
    /* Backtrack from (n, m), collecting edits in reverse. */
    size_t start = *ne;
    int64_t x = n, y = m;
    for (int64_t d = D; d > 0; d--) {
        int64_t k = x - y, *prev = rows + rowoff[d - 1];
        bool down = k == -d || (k != d && prev[k - 1 + (d - 1)] < prev[k + 1 + (d - 1)]);
        int64_t pk = down ? k + 1 : k - 1, px = prev[pk + (d - 1)], py = px - pk;
        int64_t sx = down ? px : px + 1, sy = sx - k;  /* where the snake began */
        while (x > sx && y > sy) {
            x--, y--;
            VEC_PUSH(*e, *ne, *cap, ((Edit){'=', ao + (uint32_t)x, bo + (uint32_t)y}));
        }
        if (down)
            VEC_PUSH(*e, *ne, *cap, ((Edit){'+', ao + (uint32_t)px, bo + (uint32_t)py}));
        else
            VEC_PUSH(*e, *ne, *cap, ((Edit){'-', ao + (uint32_t)px, bo + (uint32_t)py}));
        x = px, y = py;
    }
    while (x > 0 && y > 0) {
        x--, y--;
        VEC_PUSH(*e, *ne, *cap, ((Edit){'=', ao + (uint32_t)x, bo + (uint32_t)y}));
    }
    for (size_t i = start, j = *ne; i + 1 < j; i++, j--) {
        Edit t = (*e)[i];
        (*e)[i] = (*e)[j - 1];
        (*e)[j - 1] = t;
    }
    free(rows);
    free(rowoff);
    return true;
}

/* Writes a unified diff of two op lists (context DIFF_CONTEXT). Returns 0 when they are
 * equal, 1 when they differ, -1 when the difference is too large to show. */
static int diff_ops(StrBuf *out, const StageOps *sa, const StageOps *sb, const char *na,
                    const char *nb, int32_t stage)
{
    uint32_t n = sa ? sa->n : 0, m = sb ? sb->n : 0;
    uint64_t *a = xmalloc((n ? n : 1) * sizeof *a), *b = xmalloc((m ? m : 1) * sizeof *b);
    for (uint32_t i = 0; i < n; i++)
        a[i] = op_key(&sa->ops[i]);
    for (uint32_t i = 0; i < m; i++)
        b[i] = op_key(&sb->ops[i]);
    uint32_t pre = 0, suf = 0;
    while (pre < n && pre < m && a[pre] == b[pre])
        pre++;
    while (suf < n - pre && suf < m - pre && a[n - 1 - suf] == b[m - 1 - suf])
        suf++;
    int rc = 0;
    if (pre == n && pre == m)
        goto done;
    Edit *e = NULL;
    size_t ne = 0, cap = 0;
    for (uint32_t i = 0; i < pre; i++)
        VEC_PUSH(e, ne, cap, ((Edit){'=', i, i}));
    if (!myers(a + pre, n - pre - suf, b + pre, m - pre - suf, pre, pre, &e, &ne, &cap)) {
        sb_printf(out, "stage %d: the op orders differ in more than %d places (not shown)\n",
                  stage, DIFF_MAX_EDITS);
        free(e);
        rc = -1;
        goto done;
    }
    for (uint32_t i = 0; i < suf; i++)
        VEC_PUSH(e, ne, cap, ((Edit){'=', n - suf + i, m - suf + i}));
    rc = 1;
    sb_printf(out, "--- %s stage %d\n+++ %s stage %d\n", na, stage, nb, stage);
    char buf[48];
    for (size_t i = 0; i < ne;) {
        if (e[i].op == '=') {
            i++;
            continue;
        }
        /* A hunk: from DIFF_CONTEXT before this change to DIFF_CONTEXT after the last
         * change that is at most 2*DIFF_CONTEXT equal lines from the previous one. */
        size_t lo = i >= DIFF_CONTEXT ? i - DIFF_CONTEXT : 0, hi = i;
        for (size_t j = i + 1; j < ne && j - hi - 1 <= 2 * DIFF_CONTEXT; j++)
            if (e[j].op != '=')
                hi = j;
        size_t end = hi + DIFF_CONTEXT + 1 < ne ? hi + DIFF_CONTEXT + 1 : ne;
        uint32_t alen = 0, blen = 0;
        for (size_t k = lo; k < end; k++) {
            alen += e[k].op != '+';
            blen += e[k].op != '-';
        }
        uint32_t a0 = e[lo].a, b0 = e[lo].b;
        sb_printf(out, "@@ -%u", alen ? a0 + 1 : a0);
        if (alen != 1)
            sb_printf(out, ",%u", alen);
        sb_printf(out, " +%u", blen ? b0 + 1 : b0);
        if (blen != 1)
            sb_printf(out, ",%u", blen);
        sb_puts(out, " @@\n");
        for (size_t k = lo; k < end; k++) {
            const Op *o = e[k].op == '+' ? &sb->ops[e[k].b] : &sa->ops[e[k].a];
            sb_printf(out, "%c%s\n", e[k].op == '=' ? ' ' : e[k].op,
                      op_name(buf, sizeof buf, (OpKind)o->kind, o->mb, o->chunk));
        }
        i = end;
    }
    free(e);
done:
    free(a);
    free(b);
    return rc;
}

/* The B / A cell of a metrics row: "1.000" when both are 0, "-" when only A is. */
static void ratio_cell(char *ra, size_t n, double a, double b)
{
    if (a != 0)
        snprintf(ra, n, "%.3f", human_fix(b / a, 3));
    else
        snprintf(ra, n, "%s", b == 0 ? "1.000" : "-");
}

static void row_num(StrBuf *out, const char *name, double a, double b, int prec)
{
    char ra[32];
    ratio_cell(ra, sizeof ra, a, b);
    sb_printf(out, "%-18s %14.*f %14.*f %+14.*f %8s\n", name, prec, human_fix(a, prec), prec,
              human_fix(b, prec), prec, human_fix(b - a, prec), ra);
}

static void row_size(StrBuf *out, const char *name, double a, double b)
{
    char sa[64], sb2[64], sd[64], ra[32];
    ratio_cell(ra, sizeof ra, a, b);
    sim_fmt_size(sd, sizeof sd, fabs(b - a));
    char sd2[72];
    snprintf(sd2, sizeof sd2, "%c%s", b < a ? '-' : '+', sd);
    sb_printf(out, "%-18s %14s %14s %14s %8s\n", name, sim_fmt_size(sa, sizeof sa, a),
              sim_fmt_size(sb2, sizeof sb2, b), sd2, ra);
}

/* A note, in the metrics header, when A and B differ in stages, micro-batches or chunks:
 * their metrics then compare different work. */
static bool write_shape_note(StrBuf *out, const Pipeline *a, const Pipeline *b)
{
    if (a->P == b->P && a->M == b->M && a->V == b->V)
        return false;
    sb_puts(out, "note: A and B differ in shape:");
    const char *sep = " ";
    if (a->P != b->P)
        sb_printf(out, "%sstages %d vs %d", sep, a->P, b->P), sep = ", ";
    if (a->M != b->M)
        sb_printf(out, "%smicrobatches %d vs %d (compare micro-batches/s, not makespan)", sep,
                  a->M, b->M), sep = ", ";
    if (a->V != b->V)
        sb_printf(out, "%schunks %d vs %d", sep, a->V, b->V);
    sb_puts(out, "\n");
    return true;
}

/* Per stage, A and B side by side: busy, idle and its two bubbles (docs/spec.md "Time"),
 * in ms; "-" for a stage only one of them has. */
static void write_stage_rows(StrBuf *out, const Pipeline *a, const SimResult *ra,
                             const Pipeline *b, const SimResult *rb)
{
    static const char *const head[8] = {"busy A", "busy B", "idle A", "idle B",
                                        "fwd bub A", "fwd bub B", "bwd bub A", "bwd bub B"};
    int32_t P = a->P > b->P ? a->P : b->P;
    sb_printf(out, "\n%5s", "stage");
    for (int k = 0; k < 8; k++)
        sb_printf(out, " %10s", head[k]);
    sb_puts(out, "   (ms)\n");
    for (int32_t s = 0; s < P; s++) {
        const SimStage *x = s < a->P ? &ra->stage[s] : NULL, *y = s < b->P ? &rb->stage[s] : NULL;
        const SimStage *of[8] = {x, y, x, y, x, y, x, y};
        sb_printf(out, "%5d", s);
        for (int k = 0; k < 8; k++) {
            const SimStage *t = of[k];
            double v = !t ? 0 : k < 2 ? t->busy_ms : k < 4 ? t->idle_ms : k < 6 ? t->fwd_bubble_ms
                                                                                 : t->bwd_bubble_ms;
            if (t)
                sb_printf(out, " %10.3f", human_fix(v, 3));
            else
                sb_printf(out, " %10s", "-");
        }
        sb_putc(out, '\n');
    }
}

/* The metrics table of `pipec diff`, then (unless metrics_only) the per-stage rows and
 * op-order diffs. Returns whether A and B differ: shape or any metric, and op order
 * unless metrics_only. */
static bool write_diff(StrBuf *out, const Pipeline *a, const SimResult *ra, const char *na,
                       const Pipeline *b, const SimResult *rb, const char *nb,
                       bool metrics_only)
{
    sb_printf(out, "A: %s (%s)\nB: %s (%s)\n", na, a->name ? a->name : "", nb,
              b->name ? b->name : "");
    bool differ = write_shape_note(out, a, b);
    sb_printf(out, "\n%-18s %14s %14s %14s %8s\n", "", "A", "B", "B - A", "B / A");
    row_num(out, "makespan ms", ra->makespan_ms, rb->makespan_ms, 3);
    double ta = ra->makespan_ms > 0 ? a->M / (ra->makespan_ms / 1000) : 0;
    double tb = rb->makespan_ms > 0 ? b->M / (rb->makespan_ms / 1000) : 0;
    row_num(out, "micro-batches/s", ta, tb, 2);
    row_num(out, "bubble ratio", ra->bubble_ratio, rb->bubble_ratio, 4);
    differ |= ra->makespan_ms != rb->makespan_ms || ra->bubble_ratio != rb->bubble_ratio;
    int32_t P = a->P > b->P ? a->P : b->P;
    char name[48];
    for (int32_t s = 0; s < P; s++) {
        snprintf(name, sizeof name, "peak mem stage %d", s);
        double pa = s < a->P ? ra->stage[s].peak_mem_bytes : 0;
        double pb = s < b->P ? rb->stage[s].peak_mem_bytes : 0;
        row_size(out, name, pa, pb);
        differ |= pa != pb;
    }
    if (metrics_only)
        return differ;
    write_stage_rows(out, a, ra, b, rb);
    if (ra->stuck || rb->stuck)
        sb_printf(out, "warning: %s cannot run to the end; its numbers are partial\n",
                  ra->stuck ? na : nb);
    sb_putc(out, '\n');
    int ndiff = 0;
    for (int32_t s = 0; s < P; s++)
        ndiff += diff_ops(out, s < a->P ? &a->stages[s] : NULL, s < b->P ? &b->stages[s] : NULL,
                          na, nb, s) != 0;
    if (ndiff == 0)
        sb_printf(out, "op order: the same on all %d stage%s\n", P, P == 1 ? "" : "s");
    else
        sb_printf(out, "op order: %d of %d stage%s differ\n", ndiff, P, P == 1 ? "" : "s");
    return differ || ndiff;
}

/* `pipec diff --json`: {"a": SIM, "b": SIM, "shape_differs": bool, "stages_differ":
 * [stage numbers whose op order differs], "differ": bool}, SIM being `pipec sim --json`'s
 * object. */
static bool write_diff_json(StrBuf *out, const Pipeline *a, const SimResult *ra,
                            const Pipeline *b, const SimResult *rb)
{
    StrBuf ja = {0}, jb = {0}, scratch = {0};
    sim_write_json(&ja, a, ra);
    sim_write_json(&jb, b, rb);
    while (ja.len && ja.s[ja.len - 1] == '\n')
        ja.s[--ja.len] = 0;
    while (jb.len && jb.s[jb.len - 1] == '\n')
        jb.s[--jb.len] = 0;
    bool shape = a->P != b->P || a->M != b->M || a->V != b->V;
    bool differ = shape || ra->makespan_ms != rb->makespan_ms;
    sb_printf(out, "{\"a\": %s, \"b\": %s, \"shape_differs\": %s, \"stages_differ\": [", ja.s,
              jb.s, shape ? "true" : "false");
    int32_t P = a->P > b->P ? a->P : b->P;
    int n = 0;
    for (int32_t s = 0; s < P; s++) {
        double pa = s < a->P ? ra->stage[s].peak_mem_bytes : 0;
        double pb = s < b->P ? rb->stage[s].peak_mem_bytes : 0;
        differ |= pa != pb;
        scratch.len = 0;
        if (diff_ops(&scratch, s < a->P ? &a->stages[s] : NULL, s < b->P ? &b->stages[s] : NULL,
                     "a", "b", s) != 0)
            sb_printf(out, "%s%d", n++ ? ", " : "", s);
    }
    differ |= n > 0;
    sb_printf(out, "], \"differ\": %s}\n", differ ? "true" : "false");
    sb_free(&ja);
    sb_free(&jb);
    sb_free(&scratch);
    return differ;
}

int cmd_diff(int argc, char **argv)
{
    static const struct option longopts[] = {
        SIM_FIGURE_LONGOPTS,
        {"metrics", no_argument, NULL, OPT_METRICS},
        DRIVER_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    SimArgs sa = {0};
    int st = read_sim_args(argc, argv, "diff", longopts, 2, &sa);
    if (st >= 0)
        return st;
    if (sa.metrics && sa.json) {
        fprintf(stderr, "pipec diff: --metrics and --json do not go together (--json has "
                        "the metrics of both)\n");
        driver_opts_free(&sa.o);
        return 2;
    }
    const char *fa = argv[optind], *fb = argv[optind + 1];
    Diag d = {0};
    Pipeline *a = driver_compile(&d, &sa.o, fa);
    Pipeline *b = driver_compile(&d, &sa.o, fb);
    driver_opts_free(&sa.o);
    int rc = 0;
    if (!a || !b || figure_refused(&d, a, pipeline_nops(a) + pipeline_nops(b), &sa, "diff")) {
        rc = 2; /* as diff(1): 0 the same, 1 different, 2 trouble */
        goto out;
    }
    SimResult *ra = simulate(a), *rb = simulate(b);
    StrBuf s = {0};
    bool differ = sa.json ? write_diff_json(&s, a, ra, b, rb)
                          : write_diff(&s, a, ra, fa, b, rb, fb, sa.metrics);
    rc = differ ? 1 : 0;
    fputs(sb_str(&s), stdout);
    sb_free(&s);
    if (sa.svg) {
        StrBuf t = {0};
        char *la = xasprintf("A: %s", fa), *lb = xasprintf("B: %s", fb);
        svg_write_pair(&t, a, ra, la, b, rb, lb, &sa.so);
        free(la);
        free(lb);
        if (write_output(sa.svg, &t))
            rc = 2;
        sb_free(&t);
    }
    if (sa.html) {
        StrBuf t = {0};
        char *la = xasprintf("A: %s", fa), *lb = xasprintf("B: %s", fb);
        HtmlVariant hv[2] = {{la, a, ra}, {lb, b, rb}};
        html_write(&t, hv, 2);
        free(la);
        free(lb);
        if (write_output(sa.html, &t))
            rc = 2;
        sb_free(&t);
    }
    sim_free(ra);
    sim_free(rb);
out:
    pipeline_free(a);
    pipeline_free(b);
    diag_free(&d);
    return rc;
}
