/* fuzz_csv.c - libFuzzer target for the PyTorch schedule CSV importer (csv.h): any
 * bytes go through csv_import; an imported pipeline is checked, exported, imported
 * again and exported again, and the two exports must be equal (docs/csv.md: CSV ->
 * pipe -> CSV keeps every rank's action order). A crash, a sanitizer report, a leak,
 * a hang or a round trip that changes the schedule is a bug; diagnostics are expected.
 *
 *   make fuzz [FUZZ_SECONDS=60]    (clang; seeds in tests/fuzz/csv_corpus) */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "csv.h"
#include "diag.h"
#include "ir.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    devnull = fopen("/dev/null", "w");
    return 0;
}

/* Imports text (len bytes, copied) as "name.csv"; *d must be fresh. */
static Pipeline *import(Diag *d, const char *text, size_t len)
{
    char *copy = xmalloc(len + 1);
    memcpy(copy, text, len);
    copy[len] = 0;
    uint32_t file = diag_add_file(d, "fuzz.csv", copy, (uint32_t)len);
    return csv_import(d, file, "fuzz");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1u << 20)
        return 0;
    Diag d = {0};
    d.out = devnull;
    Pipeline *p = import(&d, (const char *)data, size);
    if (p && d.nerr)
        abort(); /* a pipeline is returned only without errors */
    if (p) {
        check_pipeline(&d, p, CHECK_ALL);
        StrBuf a = {0}, b = {0};
        csv_export(&d, p, CSV_CURRENT, &a);
        Diag d2 = {0};
        d2.out = devnull;
        Pipeline *q = import(&d2, a.s ? a.s : "", a.len);
        if (!q)
            abort(); /* an export must import again */
        csv_export(&d2, q, CSV_CURRENT, &b);
        if (a.len != b.len || memcmp(a.s, b.s, a.len) != 0)
            abort(); /* the round trip changed the schedule */
        pipeline_free(q);
        diag_free(&d2);
        sb_free(&a);
        sb_free(&b);
    }
    pipeline_free(p);
    diag_free(&d);
    return 0;
}
