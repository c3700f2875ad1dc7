/* sim_svg.h - the SVG timeline's options (sim_svg.c); sim.h's sim_write_svg and
 * sim_write_svg_pair are these with the defaults. */
#ifndef PIPEC_SIM_SVG_H
#define PIPEC_SIM_SVG_H

#include "sim.h"

/* The default picture width and its bounds, px. */
#define SVG_DEFAULT_WIDTH 1200
#define SVG_MAX_WIDTH 32000
/* Plot pixels per op of the busiest rank when the width is chosen from the schedule. */
#define SVG_MIN_OP_PX 14

typedef struct SvgOpts {
    int width;   /* the picture's width in px; 0: from the schedule */
} SvgOpts;

/* One timeline (`pipec sim --svg`): opts may be NULL (defaults). */
void svg_write(StrBuf *out, const Pipeline *p, const SimResult *r, const SvgOpts *opts);

/* Two timelines, a above b, on one time axis (`pipec diff --svg`), labelled la and lb. */
void svg_write_pair(StrBuf *out, const Pipeline *a, const SimResult *ra, const char *la,
                    const Pipeline *b, const SimResult *rb, const char *lb, const SvgOpts *opts);

#endif
