/* exact.h - `pipec tune --exact`: a makespan-optimal order of a file's ops (placement
 * fixed) within its memory budget, found by a mixed-integer program solved with COIN-OR
 * CBC (docs/tune.md "Exact search"; Qi et al., Zero Bubble Pipeline Parallelism, ICLR
 * 2024, §3). Times are milliseconds, memory bytes. */
#ifndef PIPEC_EXACT_H
#define PIPEC_EXACT_H

#include <stdbool.h>

#include "diag.h"
#include "ir.h"

/* How a search ended. EXACT_FEASIBLE: stopped at the time limit with an order in hand;
 * EXACT_TIMEOUT: stopped at the limit with none. */
typedef enum ExactStatus {
    EXACT_OPTIMAL,
    EXACT_FEASIBLE,
    EXACT_INFEASIBLE,
    EXACT_TIMEOUT,
} ExactStatus;

/* The result of exact_search. makespan_ms is the simulated makespan of the order found
 * (NAN without one), lower_bound_ms the solver's proven bound (ms; NAN when infeasible),
 * gap (makespan - bound) / makespan (NAN without an order). */
typedef struct ExactResult {
    ExactStatus status;
    double makespan_ms, lower_bound_ms, gap;
    double seconds;        /* wall-clock time the solver took */
} ExactResult;

/* Whether this pipec was built with the solver (the Makefile found coinor-libcbc-dev). */
bool exact_available(void);

/* Searches an optimal order of p's ops: each op stays on its rank, every rule of
 * docs/spec.md "Dependencies" and "Time" and p's budget (the walk of docs/spec.md "Memory",
 * peak <= budget) hold. p must be compiled and checked (driver_compile). On success
 * with an order (optimal or feasible), p's op lists are reordered to it. Stops after
 * time_limit_s seconds. Returns 0, or 1 after a located error in d (what the search does
 * not model: RO, or copies on a host link several ranks share; docs/tune.md "Exact
 * search") or an internal error on stderr. */
int exact_search(Diag *d, Pipeline *p, double time_limit_s, ExactResult *res);

/* `pipec tune --exact FILE [--time-limit S] [--json] [-o OUT]`. Exit 0 when an order was
 * found or infeasibility proven, 1 on errors or when the limit passed with no order, 2 on
 * usage errors and when this pipec was built without the solver. */
int cmd_tune_exact(int argc, char **argv);

#endif
