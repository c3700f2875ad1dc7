/* fuzz_frontend.c - libFuzzer target for the front end: any bytes go through
 * load_pipeline_string (lexer, parser, imports, elaboration) and everything is freed.
 * A crash, a sanitizer report, a leak or a hang is a bug; diagnostics are expected.
 *
 *   make fuzz [FUZZ_SECONDS=60]       (clang; seeds in tests/fuzz/corpus, pipe.dict)
 *
 * The expansion limits are lowered so that one input runs in milliseconds; the
 * documented limits are exercised by tests/bad and the unit tests. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "diag.h"
#include "frontend.h"
#include "ir.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    devnull = fopen("/dev/null", "w");
    setenv("PIPEC_STDLIB", "stdlib", 0); /* run from the repository root */
    frontend_limits.max_iterations = 100000;
    frontend_limits.max_ops = 100000;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Diag d = {0};
    d.out = devnull;
    Pipeline *p = load_pipeline_string(&d, NULL, "fuzz.pipe", (const char *)data, size);
    if (p && d.nerr)
        abort(); /* a pipeline is returned only without errors */
    pipeline_free(p);
    diag_free(&d);
    return 0;
}
