/* limits.c - the front end's expansion and nesting limits (frontend.h, docs/language.md
 * "Limits"), read by the scanner, the parser, load.c and elaborate.c. Defined in a file
 * of its own, below all four of them, so that none calls up into another for it. */
#include "frontend.h"

FrontendLimits frontend_limits = {
    .max_ops = IR_MAX_OPS,
    .max_iterations = 100000000u,
    .max_nesting = 64,
    .max_expr_depth = 256,
    .max_import_depth = 16,
    .max_vstages = 65536,
    .max_file_bytes = (size_t)256 << 20,
};
