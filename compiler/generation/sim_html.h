/* sim_html.h - `pipec sim --html` and `pipec diff --html`: one self-contained HTML page (no
 * network, no external files) with an interactive timeline: zoom (wheel, +/- buttons
 * and keys), pan (drag, arrow keys), hover details of every op, each stage's memory over
 * time with its budget line, and a picker between variants (A and B of `pipec diff`) on
 * one shared time axis. The page embeds the simulated times as JSON and draws on a
 * canvas, so it stays fast for large schedules. */
#ifndef PIPEC_SIM_HTML_H
#define PIPEC_SIM_HTML_H

#include "sim.h"

/* One schedule shown by the page: its label in the picker, pipeline and simulation. */
typedef struct HtmlVariant {
    const char *label;
    const Pipeline *p;
    const SimResult *r;
} HtmlVariant;

/* Appends the page for n >= 1 variants to out (the first is shown first). */
void html_write(StrBuf *out, const HtmlVariant *v, int n);

#endif
