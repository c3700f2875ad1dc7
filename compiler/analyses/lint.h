/* lint.h - warnings about legal but suspicious pipelines (docs/language.md "Warnings").
 *
 * A lint never rejects a pipeline: it reports `warning[CODE]` diagnostics through
 * diag_warning (errors under -Werror). It runs on the compiled, checked IR. */
#ifndef PIPEC_LINT_H
#define PIPEC_LINT_H

#include "diag.h"
#include "ir.h"

/* Reports, for a checked pipeline p:
 *   warning[empty]  virtual stages that hold no layers of the model (more virtual
 *                   stages than the partition can fill): their ops cost nothing;
 *   warning[split]  a (stage, chunk) whose backwards are split by W for most
 *                   micro-batches but not for a few (fewer unsplit than split): the
 *                   pattern of a W deleted by mistake. Schedules that split a minority
 *                   on purpose (DualPipeV) are not warned about.
 * Returns the number of warnings. */
int lint_pipeline(Diag *d, const Pipeline *p);

#endif
