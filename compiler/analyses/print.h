/* print.h - the canonical explicit form of a pipeline (docs/spec.md "Explicit form").
 *
 * `pipec print`, `pipec opt -o`, `import-csv` and `tune -o` all write through
 * print_pipeline, so two variants of a schedule diff cleanly as text. The form is
 * canonical: parsing the output and printing it again gives the same bytes, because
 * every number is written as the shortest decimal that reads back to the same double,
 * in a unit that represents it exactly. Costs the cost model derived are already at
 * the resolution of cost_quantise (ir.h: 1 ns, whole bytes and bytes/s), so the printed
 * form simulates exactly as the pipeline it came from; costs the source wrote are
 * printed exactly.
 *
 * Layout (fixed; tests/golden/print/ holds examples):
 *
 *     pipeline NAME {
 *       stages P
 *       microbatches M
 *       chunks V [vshape]          -- `interleaved` is the default and not written
 *       memory SIZE                -- only when a budget is set
 *
 *       costs {                    -- only the fields set, one per line, COST_FIELDS order
 *         f 1ms
 *       }
 *       costs stage S { f 1.2ms }  -- ranks with an override, fields set, one line each
 *       costs vstage V { act 9GiB }
 *
 *       stage S { OPS }            -- every rank; OPS wrapped at PRINT_OPS_PER_LINE ops
 *
 *       dep S:OP -> S:OP           -- in the order stored
 *     }
 */
#ifndef PIPEC_PRINT_H
#define PIPEC_PRINT_H

#include <stddef.h>

#include "ir.h"
#include "util.h"

/* Ops per line in `stage N { ... }`; a rank with more ops is written as a block with
 * continuation lines indented four spaces. */
#define PRINT_OPS_PER_LINE 16

/* Appends the canonical explicit form of p to out. Pure: reads p only. Model, device,
 * partition, schedule, recompute and apply settings are not printed: their effect is
 * already in the ops and the derived costs. The data-parallel settings are
 * (print_dp_settings). */
void print_pipeline(StrBuf *out, const Pipeline *p);

/* Appends p's `data_parallel`, `zero`, `grad_dtype` and `expert_parallel` lines, each
 * only when it is not the default (docs/language.md "Data parallelism", "Expert
 * parallelism"), indented two spaces. */
void print_dp_settings(StrBuf *out, const Pipeline *p);

/* Number formatting shared with other printers. Each writes a NUL-terminated string of
 * at most n bytes (PRINT_NUM_MAX is always enough) and returns buf.
 *
 * print_decimal: the shortest plain decimal (no exponent) that strtod reads back to x
 *   exactly: 1.2 -> "1.2", 3 -> "3", 1e-5 -> "0.00001". Non-finite values print as
 *   "inf", "-inf" or "nan" (not readable by the language; callers avoid them).
 * print_time: ms, always in ms: "1.2ms", "0ms".
 * print_size: bytes, in the unit among B KiB MiB GiB TiB KB MB GB TB that gives the
 *   smallest whole number (binary first on a tie): 8 GiB -> "8GiB", 1.5 GiB -> "1536MiB",
 *   4e9 -> "4GB", 3 -> "3B", 0 -> "0B"; a fractional byte count prints in B ("2.5B").
 * print_bw: bytes per second, the same rule over sizes with "/s": 25e9 -> "25GB/s". */
#define PRINT_NUM_MAX 400
char *print_decimal(char *buf, size_t n, double x);
char *print_time(char *buf, size_t n, double ms);
char *print_size(char *buf, size_t n, double bytes);
char *print_bw(char *buf, size_t n, double bytes_per_s);

/* The value of cost field f in the unit of its class (time, size, bandwidth, fraction). */
char *print_cost_value(char *buf, size_t n, CostField f, double v);

#endif
