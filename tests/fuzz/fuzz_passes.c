/* fuzz_passes.c - libFuzzer target for `pipec opt --pass` lists: any bytes are read as
 * a pass list (parse_pass_list of frontend.h) and, when they parse, the passes run in
 * order on tests/fuzz/pass_base.pipe (1F1B of the `tiny` model, 3 stages, 4
 * micro-batches), with the structure and dependency checks after each, as `pipec opt`
 * does. A crash, a sanitizer report, a leak or a hang is a bug; so is a pass that
 * reports no error but leaves a schedule the checker rejects (passes.h: a pass leaves
 * the IR legal).
 *
 *   make fuzz [FUZZ_SECONDS=60]    (clang; seeds in tests/fuzz/pass_corpus, passes.dict)
 *
 * Run from the repository root (the stdlib and pass_base.pipe are read from there). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "diag.h"
#include "driver.h"
#include "frontend.h"
#include "ir.h"
#include "passes/passes.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *devnull;
static char *base;        /* tests/fuzz/pass_base.pipe */
static size_t base_len;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    devnull = fopen("/dev/null", "w");
    setenv("PIPEC_STDLIB", "stdlib", 0); /* run from the repository root */
    base = read_file("tests/fuzz/pass_base.pipe", &base_len);
    if (!base) {
        perror("tests/fuzz/pass_base.pipe");
        exit(1);
    }
    frontend_limits.max_iterations = 100000;
    frontend_limits.max_ops = 100000;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    Diag d = {0};
    d.out = devnull;
    char *text = xmalloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    uint32_t file = diag_add_file(&d, "<--pass>", text, (uint32_t)size);
    uint32_t ncalls = 0;
    PassCall *calls = parse_pass_list(&d, file, &ncalls);
    if (calls && d.nerr)
        abort(); /* a list is returned only without errors */
    Pipeline *p = NULL;
    if (calls) {
        p = driver_compile_string(&d, NULL, "pass_base.pipe", base, base_len);
        if (!p || d.nerr)
            abort(); /* the base pipeline is valid */
        for (uint32_t i = 0; i < ncalls; i++) {
            int before = d.nerr;
            if (run_pass(&d, p, &calls[i]) || d.nerr > before)
                break;
            if (check_pipeline(&d, p, CHECK_STRUCTURE | CHECK_DEPS) || d.nerr > before)
                abort(); /* a pass that succeeded left an illegal schedule */
        }
    }
    pass_calls_free(calls, ncalls);
    pipeline_free(p);
    diag_free(&d);
    return 0;
}
