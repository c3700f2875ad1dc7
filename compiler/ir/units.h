/* units.h - the unit suffixes of the language (docs/spec.md "Units"):
 * one table that the front end reads numbers with (elaborate.c: `costs`, `memory`,
 * model and device fields, pass arguments) and the printer writes them with (print.c).
 *
 * Every unit converts to the IR's base unit of its class: times to milliseconds,
 * sizes to bytes, bandwidths (SIZE/s) to bytes per second. */
#ifndef PIPEC_UNITS_H
#define PIPEC_UNITS_H

#include <stdbool.h>
#include <stddef.h>

#include "ir.h"

typedef struct UnitInfo {
    const char *name;  /* as written after the number: "ms", "GiB" */
    UnitClass cls;     /* UNIT_TIME or UNIT_SIZE (a SIZE/s suffix is UNIT_BW) */
    double factor;     /* to ms or bytes */
} UnitInfo;

/* us ms s, then B KiB MiB GiB TiB, then KB MB GB TB. */
extern const UnitInfo unit_table[];
extern const size_t unit_count;

/* The class and factor of a suffix ("ms", "GiB", "GB/s" = a size unit then "/s");
 * false for an unknown one (nothing written). */
bool unit_lookup(const char *suffix, UnitClass *cls, double *factor);

/* "a time", "a size", "a bandwidth", "a plain number": for "X takes a time". */
const char *unit_class_name(UnitClass c);

/* The units known, as diagnostics list them: "times: us ms s; sizes: B KiB ...;
 * bandwidths: SIZE/s". Returns buf. */
char *unit_list(char *buf, size_t n);

#endif
