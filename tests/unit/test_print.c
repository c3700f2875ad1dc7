/* test_print.c - the canonical printer: number formatting (exact units, shortest
 * decimals that read back), the layout of print_pipeline on hand-built IR, and the round
 * trip print(parse(print(x))) == print(x) through the front end.
 *
 * Expected strings are written by hand from the rules in print.h. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "driver.h"
#include "frontend.h"
#include "human.h"
#include "ir.h"
#include "print.h"
#include "units.h"
#include "util.h"

#define KiB 1024.0
#define MiB (1024.0 * KiB)
#define GiB (1024.0 * MiB)
#define TiB (1024.0 * GiB)

static char buf[PRINT_NUM_MAX];

static void test_decimal(void **state)
{
    (void)state;
    assert_string_equal(print_decimal(buf, sizeof buf, 0), "0");
    assert_string_equal(print_decimal(buf, sizeof buf, 3), "3");
    assert_string_equal(print_decimal(buf, sizeof buf, 1.2), "1.2");
    assert_string_equal(print_decimal(buf, sizeof buf, 0.1), "0.1");
    assert_string_equal(print_decimal(buf, sizeof buf, -2.5), "-2.5");
    assert_string_equal(print_decimal(buf, sizeof buf, 1e-5), "0.00001");
    assert_string_equal(print_decimal(buf, sizeof buf, 1500), "1500");
    assert_string_equal(print_decimal(buf, sizeof buf, 1e21), "1000000000000000000000");
    /* 0.1 + 0.2 is not 0.3: the shortest exact form needs 17 digits. */
    assert_string_equal(print_decimal(buf, sizeof buf, 0.1 + 0.2), "0.30000000000000004");
    /* 2^-10 = 0.0009765625 exactly. */
    assert_string_equal(print_decimal(buf, sizeof buf, 1.0 / 1024), "0.0009765625");
    assert_string_equal(print_decimal(buf, sizeof buf, 1.0 / 0.0), "inf");
    assert_string_equal(print_decimal(buf, sizeof buf, -1.0 / 0.0), "-inf");
    assert_string_equal(print_decimal(buf, sizeof buf, nan("")), "nan");
    /* The extremes of double still fit PRINT_NUM_MAX and read back exactly: the largest
     * has 309 integer digits, the smallest subnormal 323 zeros after the point. */
    const double extreme[] = {DBL_MAX, -DBL_MAX, 4.9406564584124654e-324, -DBL_MIN};
    for (size_t i = 0; i < sizeof extreme / sizeof extreme[0]; i++) {
        print_decimal(buf, sizeof buf, extreme[i]);
        assert_null(strpbrk(buf, "eE"));
        assert_true(strtod(buf, NULL) == extreme[i]);
    }
    assert_int_equal(strlen(print_decimal(buf, sizeof buf, DBL_MAX)), 309);
    assert_int_equal(strspn(print_decimal(buf, sizeof buf, 4.9406564584124654e-324) + 2, "0"), 323);
}

/* Every printed decimal reads back to the same double, over awkward and random
 * values (an LCG over the bit patterns of doubles between 2^-30 and 2^60). */
static void test_decimal_round_trip(void **state)
{
    (void)state;
    const double fixed[] = {1.2, 0.1, 0.7, 1.0 / 3, 2.0 / 3, 1e-7, 123456.789, 9007199254740993.0,
                            4503599627370497.5, 0.30000000000000004, 1e15 + 0.3, 5e-324 * 1e300};
    for (size_t i = 0; i < ARRAY_LEN(fixed); i++) {
        print_decimal(buf, sizeof buf, fixed[i]);
        assert_null(strchr(buf, 'e'));
        assert_true(strtod(buf, NULL) == fixed[i]);
    }
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 20000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t exp = 1023 - 30 + (x >> 58) % 90; /* 2^-30 .. 2^59 */
        uint64_t bits = (exp << 52) | (x & ((1ull << 52) - 1));
        double v;
        memcpy(&v, &bits, sizeof v);
        print_decimal(buf, sizeof buf, v);
        assert_null(strchr(buf, 'e'));
        if (strtod(buf, NULL) != v)
            fail_msg("%.17g printed as %s", v, buf);
    }
}

static void test_time(void **state)
{
    (void)state;
    assert_string_equal(print_time(buf, sizeof buf, 1.2), "1.2ms");
    assert_string_equal(print_time(buf, sizeof buf, 0.1), "0.1ms");
    assert_string_equal(print_time(buf, sizeof buf, 0), "0ms");
    assert_string_equal(print_time(buf, sizeof buf, 2500), "2500ms");
    /* 1.2ms written as 1200us is 1200 / 1000: the same double as 1.2. */
    assert_string_equal(print_time(buf, sizeof buf, 1200 / 1000.0), "1.2ms");
    /* 50us = 0.05ms. */
    assert_string_equal(print_time(buf, sizeof buf, 50 / 1000.0), "0.05ms");
}

static void test_size(void **state)
{
    (void)state;
    assert_string_equal(print_size(buf, sizeof buf, 0), "0B");
    assert_string_equal(print_size(buf, sizeof buf, 3), "3B");
    assert_string_equal(print_size(buf, sizeof buf, 2.5), "2.5B");
    assert_string_equal(print_size(buf, sizeof buf, 1024), "1KiB");
    assert_string_equal(print_size(buf, sizeof buf, 1000), "1KB");
    assert_string_equal(print_size(buf, sizeof buf, 1536), "1536B"); /* 1.5KiB, 1.536KB */
    assert_string_equal(print_size(buf, sizeof buf, 8 * GiB), "8GiB");
    assert_string_equal(print_size(buf, sizeof buf, 512 * MiB), "512MiB");
    assert_string_equal(print_size(buf, sizeof buf, 1.5 * GiB), "1536MiB");
    assert_string_equal(print_size(buf, sizeof buf, 4e9), "4GB");
    assert_string_equal(print_size(buf, sizeof buf, 3 * TiB), "3TiB");
    /* 2^50 is 1024 TiB; no decimal unit divides it. */
    assert_string_equal(print_size(buf, sizeof buf, 1024 * TiB), "1024TiB");
    /* 1000 GiB: 1073741824 KB divides too, but 1000 is the smaller count. */
    assert_string_equal(print_size(buf, sizeof buf, 1000 * GiB), "1000GiB");
    /* 12.5 MB = 12500 KB; 12500000 = 2^5 * 5^8 so no binary unit above B divides. */
    assert_string_equal(print_size(buf, sizeof buf, 12.5e6), "12500KB");
    /* No unit divides what is not a whole number of bytes, infinity included. */
    assert_string_equal(print_size(buf, sizeof buf, INFINITY), "infB");
}

static void test_bw(void **state)
{
    (void)state;
    assert_string_equal(print_bw(buf, sizeof buf, 25e9), "25GB/s");
    assert_string_equal(print_bw(buf, sizeof buf, GiB), "1GiB/s");
    assert_string_equal(print_bw(buf, sizeof buf, 12.5e9), "12500MB/s");
    assert_string_equal(print_bw(buf, sizeof buf, 1e12), "1TB/s");
    assert_string_equal(print_bw(buf, sizeof buf, 7), "7B/s");
    assert_string_equal(print_cost_value(buf, sizeof buf, COST_SWAP_FRACTION, 0.5), "0.5");
    assert_string_equal(print_cost_value(buf, sizeof buf, COST_HOST_BW, 25e9), "25GB/s");
    assert_string_equal(print_cost_value(buf, sizeof buf, COST_ACT, 8 * GiB), "8GiB");
    assert_string_equal(print_cost_value(buf, sizeof buf, COST_P2P, 0.01), "0.01ms");
}

static Op op(OpKind k, uint32_t mb, uint8_t chunk)
{
    return (Op){.mb = mb, .kind = (uint8_t)k, .chunk = chunk, .loc = LOC_NONE};
}

/* Asserts that print_pipeline(p) is want. */
static void expect_print(const Pipeline *p, const char *want)
{
    StrBuf out = {0};
    print_pipeline(&out, p);
    assert_string_equal(out.s, want);
    sb_free(&out);
}

/* P = 2, M = 2, V = 1 GPipe with every layout feature: memory, costs, a stage and a
 * vstage override, a dep. */
/* The printer writes sizes with the units the front end reads (units.h): every size
 * unit of the table is chosen for 3 of it, and its suffix reads back to its factor. */
static void test_units_shared(void **state)
{
    (void)state;
    int nsize = 0;
    for (size_t i = 0; i < unit_count; i++) {
        UnitClass cls;
        double f;
        assert_true(unit_lookup(unit_table[i].name, &cls, &f));
        assert_int_equal(cls, unit_table[i].cls);
        assert_true(f == unit_table[i].factor);
        if (unit_table[i].cls != UNIT_SIZE || unit_table[i].factor == 1)
            continue;
        char buf[64], want[64];
        snprintf(want, sizeof want, "3%s", unit_table[i].name);
        assert_string_equal(print_size(buf, sizeof buf, 3 * unit_table[i].factor), want);
        snprintf(want, sizeof want, "3%s/s", unit_table[i].name);
        assert_string_equal(print_bw(buf, sizeof buf, 3 * unit_table[i].factor), want);
        nsize++;
    }
    assert_int_equal(nsize, 8);
    UnitClass cls;
    double f;
    assert_true(unit_lookup("GB/s", &cls, &f) && cls == UNIT_BW && f == 1e9);
    assert_false(unit_lookup("ms/s", &cls, &f));
    assert_false(unit_lookup("furlong", &cls, &f));
    char list[160];
    assert_string_equal(unit_list(list, sizeof list),
                        "times: us ms s; sizes: B KiB MiB GiB TiB KB MB GB TB; bandwidths: SIZE/s");
    /* A short buffer gets the list's beginning, never more than n bytes. */
    char small[12];
    memset(small, 'x', sizeof small);
    assert_string_equal(unit_list(small, 10), "times: us");
    assert_int_equal(small[10], 'x');
    assert_string_equal(unit_class_name(UNIT_TIME), "a time");
    assert_string_equal(unit_class_name(UNIT_SIZE), "a size");
    assert_string_equal(unit_class_name(UNIT_BW), "a bandwidth");
    assert_string_equal(unit_class_name(UNIT_FRACTION), "a plain number");
    assert_string_equal(unit_class_name(UNIT_NONE), "a plain number");
}

/* Numbers for people (human.h): the unit follows the size, "-" for what is not finite,
 * sizes beyond PiB stay in PiB. */
static void test_human(void **state)
{
    (void)state;
    char h[32];
    assert_string_equal(human_ms(h, sizeof h, 0.5), "500 us");
    assert_string_equal(human_ms(h, sizeof h, 1.83), "1.83 ms");
    assert_string_equal(human_ms(h, sizeof h, 18300), "18.3 s");
    assert_string_equal(human_ms(h, sizeof h, 0), "0 ms");
    assert_string_equal(human_ms(h, sizeof h, INFINITY), "-");
    assert_string_equal(human_ms(h, sizeof h, NAN), "-");
    assert_string_equal(human_size(h, sizeof h, 512), "512 B");
    assert_string_equal(human_size(h, sizeof h, 3.6 * GiB), "3.6 GiB");
    assert_string_equal(human_size(h, sizeof h, 2048 * 1024 * TiB), "2048.0 PiB");
    assert_string_equal(human_size(h, sizeof h, INFINITY), "-");
}

static void test_layout(void **state)
{
    (void)state;
    Pipeline *p = pipeline_new();
    p->name = xstrdup("two");
    pipeline_set_shape(p, 2, 2, 1);
    p->has_memory = true;
    p->memory = 40 * GiB;
    p->costs.v[COST_F] = 1;
    p->costs.v[COST_B] = 2;
    p->costs.v[COST_ACT] = 8 * GiB;
    p->costs.v[COST_HOST_BW] = 25e9;
    p->costs.set = 1u << COST_F | 1u << COST_B | 1u << COST_ACT | 1u << COST_HOST_BW;
    p->stage_costs[0].v[COST_F] = 1.2;
    p->stage_costs[0].v[COST_WEIGHTS] = 4 * GiB;
    p->stage_costs[0].set = 1u << COST_F | 1u << COST_WEIGHTS;
    p->vstage_costs[1].v[COST_ACT] = 9 * GiB;
    p->vstage_costs[1].set = 1u << COST_ACT;
    for (int32_t s = 0; s < 2; s++) {
        stage_push(&p->stages[s], op(OP_F, 0, 0));
        stage_push(&p->stages[s], op(OP_F, 1, 0));
        stage_push(&p->stages[s], op(OP_B, 0, 0));
        stage_push(&p->stages[s], op(OP_B, 1, 0));
    }
    Dep dep = {.from = {.mb = 1, .stage = 1, .kind = OP_F}, .to = {.mb = 0, .stage = 0, .kind = OP_B}};
    size_t cap = 0;
    VEC_PUSH(p->deps, p->ndeps, cap, dep);
    p->depcap = (uint32_t)cap;

    expect_print(p, "pipeline two {\n"
                    "  stages 2\n"
                    "  microbatches 2\n"
                    "  chunks 1\n"
                    "  memory 40GiB\n"
                    "\n"
                    "  costs {\n"
                    "    f 1ms\n"
                    "    b 2ms\n"
                    "    act 8GiB\n"
                    "    host_bw 25GB/s\n"
                    "  }\n"
                    "  costs stage 0 { f 1.2ms weights 4GiB }\n"
                    "  costs vstage 1 { act 9GiB }\n"
                    "\n"
                    "  stage 0 { F0 F1 B0 B1 }\n"
                    "  stage 1 { F0 F1 B0 B1 }\n"
                    "\n"
                    "  dep 1:F1 -> 0:B0\n"
                    "}\n");
    pipeline_free(p);
}

/* No memory, no costs, no deps: those sections and their blank lines disappear. A rank
 * with more than PRINT_OPS_PER_LINE ops becomes a block; chunk suffixes and vshape. */
static void test_wrap_and_vshape(void **state)
{
    (void)state;
    Pipeline *p = pipeline_new();
    p->name = xstrdup("w");
    pipeline_set_shape(p, 1, 9, 2);
    p->placement = PLACE_VSHAPE;
    for (uint8_t c = 0; c < 2; c++)
        for (uint32_t m = 0; m < 9; m++)
            stage_push(&p->stages[0], op(OP_F, m, c));
    stage_push(&p->stages[0], op(OP_SO, 12, 1));
    assert_int_equal(PRINT_OPS_PER_LINE, 16);
    expect_print(p, "pipeline w {\n"
                    "  stages 1\n"
                    "  microbatches 9\n"
                    "  chunks 2 vshape\n"
                    "\n"
                    "  stage 0 {\n"
                    "    F0 F1 F2 F3 F4 F5 F6 F7 F8 F0.1 F1.1 F2.1 F3.1 F4.1 F5.1 F6.1\n"
                    "    F7.1 F8.1 SO12.1\n"
                    "  }\n"
                    "}\n");
    pipeline_free(p);
}

/* Parses text, prints it; returns the print (caller frees) or NULL on errors. */
static char *parse_print(const char *text)
{
    Diag d = {0};
    d.out = stderr;
    Pipeline *p = load_pipeline_string(&d, NULL, "test.pipe", text, strlen(text));
    char *r = NULL;
    if (p) {
        StrBuf out = {0};
        print_pipeline(&out, p);
        r = out.s;
    }
    pipeline_free(p);
    diag_free(&d);
    return r;
}

/* Awkward values written in other units print in the canonical unit, and the print
 * reads back to itself. */
static void test_round_trip_through_parser(void **state)
{
    (void)state;
    const char *src = "pipeline rt { stages 1 microbatches 1 chunks 1 memory 1.5GiB\n"
                      "  costs { f 1200us b 0.1ms w 50us r 2s act 1.5GiB ckpt 3 host_bw 25GB/s\n"
                      "          swap_fraction 0.25 }\n"
                      "  stage 0 { F0 B0 W0 } }\n";
    char *a = parse_print(src);
    assert_non_null(a);
    assert_string_equal(a, "pipeline rt {\n"
                           "  stages 1\n"
                           "  microbatches 1\n"
                           "  chunks 1\n"
                           "  memory 1536MiB\n"
                           "\n"
                           "  costs {\n"
                           "    f 1.2ms\n"
                           "    b 0.1ms\n"
                           "    w 0.05ms\n"
                           "    r 2000ms\n"
                           "    act 1536MiB\n"
                           "    ckpt 3B\n"
                           "    host_bw 25GB/s\n"
                           "    swap_fraction 0.25\n"
                           "  }\n"
                           "\n"
                           "  stage 0 { F0 B0 W0 }\n"
                           "}\n");
    char *b = parse_print(a);
    assert_non_null(b);
    assert_string_equal(a, b);
    free(a);
    free(b);
}

/* IR the checks would reject still prints, so that a dump can show it: no name
 * ("unnamed"), no ranks (no stage lines and no blank line before them), an unlimited
 * budget (no memory line: it cannot be written), an op kind outside the table ("?"),
 * chunk numbers of two digits. */
static void test_degenerate_ir(void **state)
{
    (void)state;
    Pipeline *p = pipeline_new();
    p->has_memory = true;
    p->memory = INFINITY;
    expect_print(p, "pipeline unnamed {\n"
                    "  stages 0\n"
                    "  microbatches 0\n"
                    "  chunks 0\n"
                    "}\n");
    pipeline_set_shape(p, 1, 1, 13);
    stage_push(&p->stages[0], op(OP_F, 0, 12));
    stage_push(&p->stages[0], (Op){.mb = 0, .kind = OP_NKINDS, .loc = LOC_NONE});
    stage_push(&p->stages[0], op(OP_B, 0, 12));
    expect_print(p, "pipeline unnamed {\n"
                    "  stages 1\n"
                    "  microbatches 1\n"
                    "  chunks 13\n"
                    "\n"
                    "  stage 0 { F0.12 ?0 B0.12 }\n"
                    "}\n");
    pipeline_free(p);
}

/* -Werror through the driver (DriverOpts.werror, as `pipec check -Werror`): a pass that
 * warns (partition_adjust without a model moves nothing) makes the compile fail with one
 * error and no warning; without it the pipeline compiles with one warning. */
static void test_werror_through_driver(void **state)
{
    (void)state;
    static const char src[] = "pipeline pa { stages 1 microbatches 1 costs { f 1ms b 2ms }\n"
                              "  stage 0 { F0 B0 }\n"
                              "  apply partition_adjust }\n";
    FILE *devnull = fopen("/dev/null", "w");
    assert_non_null(devnull);
    for (int werror = 0; werror < 2; werror++) {
        Diag d = {.out = devnull};
        DriverOpts o = {.werror = werror};
        Pipeline *p = driver_compile_string(&d, &o, "pa.pipe", src, strlen(src));
        assert_int_equal(d.nerr, werror);
        assert_int_equal(d.nwarn, 1 - werror);
        if (werror)
            assert_null(p);
        else
            assert_int_equal(pipeline_nops(p), 2);
        pipeline_free(p);
        diag_free(&d);
    }
    fclose(devnull);
}

/* The usage texts: one per command, `build` is compile's, an unknown command has none
 * and driver_usage then prints the general usage line. */
static void test_usage_texts(void **state)
{
    (void)state;
    assert_ptr_equal(driver_usage_text("build"), driver_usage_text("compile"));
    assert_non_null(strstr(driver_usage_text("tune"), "usage: pipec tune "));
    assert_null(driver_usage_text("frobnicate"));
    assert_null(driver_usage_text(NULL));
    char text[256] = "";
    FILE *f = fmemopen(text, sizeof text - 1, "w");
    assert_non_null(f);
    driver_usage(f, "frobnicate");
    fclose(f);
    assert_string_equal(text, "usage: pipec COMMAND [options] FILE...   (pipec --help lists the commands)\n");
}

/* `pipec print` is print_pipeline of driver_compile; without options (NULL) a golden
 * input compiles and prints as its .expected says. */
static void test_print_golden_through_driver(void **state)
{
    (void)state;
    Diag d = {0};
    Pipeline *p = driver_compile(&d, NULL, "tests/golden/print/minimal.pipe");
    assert_non_null(p);
    assert_int_equal(d.nerr + d.nwarn, 0);
    size_t n;
    char *want = read_file("tests/golden/print/minimal.expected", &n);
    assert_non_null(want);
    expect_print(p, want);
    free(want);
    pipeline_free(p);
    diag_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decimal),
        cmocka_unit_test(test_decimal_round_trip),
        cmocka_unit_test(test_time),
        cmocka_unit_test(test_size),
        cmocka_unit_test(test_bw),
        cmocka_unit_test(test_units_shared),
        cmocka_unit_test(test_human),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_wrap_and_vshape),
        cmocka_unit_test(test_round_trip_through_parser),
        cmocka_unit_test(test_degenerate_ir),
        cmocka_unit_test(test_werror_through_driver),
        cmocka_unit_test(test_usage_texts),
        cmocka_unit_test(test_print_golden_through_driver),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
