/* human.h - numbers for people: the one place that rounds times and sizes in text
 * tables, summaries, diagnostics and picture labels. JSON and `pipec print` never use
 * it (they keep full precision: docs/spec.md "JSON output"). */
#ifndef PIPEC_HUMAN_H
#define PIPEC_HUMAN_H

#include <stddef.h>

/* A duration given in ms, with a unit chosen for its size and three significant digits
 * (at least one decimal below 100): "500 us", "1.83 ms", "31.0 ms", "126 ms", "18.3 s",
 * "1234 s". "-" when not finite. Returns buf (32 bytes are enough). */
char *human_ms(char *buf, size_t n, double ms);

/* A byte count in binary units with one decimal: "512 B", "3.6 GiB". "-" when not
 * finite. Returns buf (32 bytes are enough). */
char *human_size(char *buf, size_t n, double bytes);

/* x, or +0 when x written with `decimals` decimals ("%.*f") reads as zero: what every
 * fixed-decimal table cell passes through, so no table shows "-0.000" for a difference
 * or an idle time that is float noise below the printed resolution. */
double human_fix(double x, int decimals);

#endif
