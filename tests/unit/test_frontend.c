/* test_frontend.c - the front end (frontend.h): lexer, parser, elaboration, imports,
 * templates and limits, through load_pipeline_string / load_pipeline.
 *
 * Expected values are written out by hand here: unit conversions from their
 * definitions (1 GiB = 2^30 bytes, 1 GB = 1e9, 1 s = 1000 ms), op lists from
 * the explicit 1F1B example of docs/spec.md "Explicit form", diagnostics as the exact first line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "diag.h"
#include "frontend.h"
#include "ir.h"
#include "opsem.h"
#include "util.h"
#include "testutil.h"

/* One load with its diagnostics captured in memory. */
typedef struct Run {
    Diag d;
    Pipeline *p;
    char *out;
    size_t outlen;
} Run;

static Pipeline *load_with(Run *r, const LoadOpts *o, const char *src)
{
    memset(r, 0, sizeof *r);
    r->d.out = open_memstream(&r->out, &r->outlen);
    assert_non_null(r->d.out);
    r->p = load_pipeline_string(&r->d, o, "t.pipe", src, strlen(src));
    fflush(r->d.out);
    return r->p;
}

static Pipeline *load(Run *r, const char *src)
{
    return load_with(r, NULL, src);
}

static void done(Run *r)
{
    pipeline_free(r->p);
    fclose(r->d.out);
    free(r->out);
    diag_free(&r->d);
}

/* Asserts that src fails and that the diagnostics contain `want` as a line start. */
static void expect_error(const char *src, const char *want)
{
    Run r;
    Pipeline *p = load(&r, src);
    if (p || !strstr(r.out, want)) {
        print_error("source:\n%s\nwanted: %s\ngot:\n%s\n", src, want, r.out);
        fail();
    }
    done(&r);
}

/* Asserts that the captured diagnostics contain want. */
#define assert_has(out, want)                                                   \
    do {                                                                        \
        if (!strstr((out), (want))) {                                           \
            print_error("wanted: %s\ngot:\n%s\n", (want), (out));               \
            fail();                                                             \
        }                                                                       \
    } while (0)

#define GiB 1073741824.0
#define MiB 1048576.0

/* the pipeline of docs/spec.md "Explicit form" (same values). */
static const char *design_example =
    "pipeline tiny_1f1b {\n"
    "  stages 4                 # P >= 1 ranks\n"
    "  microbatches 8           # M >= 1 per iteration\n"
    "  chunks 1                 # V >= 1\n"
    "  memory 40GiB             # per-stage budget\n"
    "\n"
    "  costs {                  # per virtual stage, per micro-batch\n"
    "    f 1ms  b 2ms  w 0ms  r 1ms\n"
    "    act 8GiB\n"
    "    ckpt 512MiB\n"
    "    wact 8GiB\n"
    "    weights 4GiB\n"
    "    p2p 0ms\n"
    "    host_bw 25GB/s\n"
    "    swap_fraction 1.0\n"
    "  }\n"
    "  costs stage 0 { f 1.2ms }    # per-rank override of any cost\n"
    "  costs vstage 3 { act 9GiB }  # per-virtual-stage override\n"
    "\n"
    "  stage 0 { F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7 }\n"
    "  stage 1 { F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7 }\n"
    "  stage 2 { F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7 }\n"
    "  stage 3 { F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 }\n"
    "\n"
    "  dep 2:F5 -> 1:B3         # extra edge\n"
    "}\n";

static const char *want_1f1b[4] = {
    "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
    "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
    "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
    "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7",
};

static void test_explicit_form(void **state)
{
    (void)state;
    Run r;
    Pipeline *p = load(&r, design_example);
    assert_non_null(p);
    assert_string_equal(r.out, "");
    assert_string_equal(p->name, "tiny_1f1b");
    assert_int_equal(p->P, 4);
    assert_int_equal(p->M, 8);
    assert_int_equal(p->V, 1);
    assert_int_equal(p->placement, PLACE_INTERLEAVED);
    assert_true(p->has_memory);
    assert_true(p->memory == 40 * GiB);
    assert_true(p->costs.v[COST_F] == 1.0 && p->costs.v[COST_B] == 2.0);
    assert_true(p->costs.v[COST_W] == 0.0 && p->costs.v[COST_R] == 1.0);
    assert_true(p->costs.v[COST_ACT] == 8 * GiB);
    assert_true(p->costs.v[COST_CKPT] == 512 * MiB);
    assert_true(p->costs.v[COST_WEIGHTS] == 4 * GiB);
    assert_true(p->costs.v[COST_HOST_BW] == 25e9);
    assert_true(p->costs.v[COST_SWAP_FRACTION] == 1.0);
    /* every field the example of docs/spec.md "Explicit form" sets: f .. swap_fraction, the first 11 */
    assert_int_equal(p->costs.set, (1u << (COST_SWAP_FRACTION + 1)) - 1);
    assert_true(p->stage_costs[0].v[COST_F] == 1.2);
    assert_int_equal(p->stage_costs[0].set, 1u << COST_F);
    assert_int_equal(p->stage_costs[1].set, 0);
    assert_true(p->vstage_costs[3].v[COST_ACT] == 9 * GiB);
    assert_int_equal(p->vstage_costs[3].set, 1u << COST_ACT);
    /* cost lookup: the overrides win where given */
    assert_true(ir_cost(p, 0, 0, COST_F) == 1.2);
    assert_true(ir_cost(p, 1, 0, COST_F) == 1.0);
    assert_true(ir_cost(p, 3, 0, COST_ACT) == 9 * GiB);
    for (int s = 0; s < 4; s++) {
        assert_ops(p, s, want_1f1b[s]);
        assert_true(p->stages[s].declared);
    }
    assert_int_equal(pipeline_nops(p), 64);
    assert_int_equal(p->ndeps, 1);
    assert_int_equal(p->deps[0].from.stage, 2);
    assert_int_equal(p->deps[0].from.kind, OP_F);
    assert_int_equal(p->deps[0].from.mb, 5);
    assert_int_equal(p->deps[0].to.stage, 1);
    assert_int_equal(p->deps[0].to.kind, OP_B);
    assert_int_equal(p->deps[0].to.mb, 3);
    /* locations: the op points at its token, the stage at its keyword */
    const char *at = strstr(design_example, "stage 2 { F0 F1 B0");
    assert_int_equal(p->stages[2].loc.off, (uint32_t)(at - design_example));
    assert_int_equal(p->stages[2].ops[2].loc.off, (uint32_t)(at - design_example) + 16);
    uint32_t line, col;
    diag_linecol(&r.d, p->stages[2].ops[2].loc, &line, &col);
    assert_int_equal(line, 22);
    assert_int_equal(col, 19);
    done(&r);
}

static void test_separators_and_comments(void **state)
{
    (void)state;
    Run r;
    Pipeline *p = load(&r, "#c\npipeline x{stages 2;microbatches 1;stage 0{F0;B0}#x\n;stage 1{F0 B0};};");
    assert_non_null(p);
    assert_ops(p, 0, "F0 B0");
    assert_ops(p, 1, "F0 B0");
    done(&r);
}

static void test_units(void **state)
{
    (void)state;
    Run r;
    Pipeline *p = load(&r, "pipeline u { stages 1 microbatches 1 memory 3\n"
                           "costs { f 250us b 1.5s w 2 r 0.5ms act 3TiB ckpt 2MB wact 1TiB\n"
                           "        weights 7 p2p 1e3us host_bw 2TB/s swap_fraction 0.25 }\n"
                           "costs stage 0 { host_bw 1024 act 2TB ckpt 1GB weights 1.5GiB }\n"
                           "stage 0 { F0 B0 } }");
    assert_non_null(p);
    assert_true(p->memory == 3.0);                      /* bare size: bytes */
    assert_true(p->costs.v[COST_F] == 0.25);            /* 250 us = 0.25 ms */
    assert_true(p->costs.v[COST_B] == 1500.0);          /* 1.5 s */
    assert_true(p->costs.v[COST_W] == 2.0);             /* bare time: ms */
    assert_true(p->costs.v[COST_R] == 0.5);
    assert_true(p->costs.v[COST_ACT] == 3.0 * 1099511627776.0);
    assert_true(p->costs.v[COST_CKPT] == 2e6);
    assert_true(p->costs.v[COST_WACT] == 1099511627776.0);
    assert_true(p->costs.v[COST_WEIGHTS] == 7.0);
    assert_true(p->costs.v[COST_P2P] == 1.0);           /* 1e3 us */
    assert_true(p->costs.v[COST_HOST_BW] == 2e12);
    assert_true(p->costs.v[COST_SWAP_FRACTION] == 0.25);
    assert_true(p->stage_costs[0].v[COST_HOST_BW] == 1024.0); /* bare bandwidth: bytes/s */
    assert_true(p->stage_costs[0].v[COST_ACT] == 2e12);
    assert_true(p->stage_costs[0].v[COST_CKPT] == 1e9);
    assert_true(p->stage_costs[0].v[COST_WEIGHTS] == 1.5 * GiB);
    done(&r);
}

#define PRE "pipeline x { stages 2 microbatches 4 "

static void test_unit_errors(void **state)
{
    (void)state;
    expect_error(PRE "costs { f 1GiB } }", "t.pipe:1:48: error[value]: cost 'f' takes a time, not a size");
    expect_error(PRE "costs { act 3ms } }", "t.pipe:1:50: error[value]: cost 'act' takes a size, not a time");
    expect_error(PRE "costs { host_bw 3GB } }",
                 "error[value]: cost 'host_bw' takes a bandwidth, not a size");
    expect_error(PRE "costs { swap_fraction 1ms } }",
                 "error[value]: cost 'swap_fraction' takes a plain number, not a time");
    expect_error(PRE "costs { f 3xs } }", "t.pipe:1:48: error[value]: unknown unit 'xs' (times: us ms s;");
    expect_error(PRE "costs { f 3ms/s } }", "error[value]: unknown unit 'ms/s'");
    expect_error(PRE "costs { b -2ms } }", "t.pipe:1:48: error[value]: cost 'b' must not be negative");
    expect_error(PRE "costs { f 1e999 } }", "t.pipe:1:48: error[value]: number out of range");
    expect_error(PRE "costs { zz 1 } }", "t.pipe:1:46: error[name]: unknown cost 'zz'");
    expect_error(PRE "costs { f fast } }", "t.pipe:1:48: error[value]: cost 'f' takes a number");
    expect_error(PRE "costs vstage 1 { p2p 1ms } }",
                 "error[value]: 'p2p' is a per-rank cost; set it in 'costs' or 'costs stage N'");
    expect_error(PRE "costs vstage 2 { f 1 } }", "error[value]: virtual stage 2 is out of range (virtual stages 2)");
    expect_error(PRE "costs stage 2 { f 1 } }", "error[value]: stage 2 is out of range (stages 2)");
    expect_error(PRE "memory -1GiB }", "t.pipe:1:45: error[value]: 'memory' must not be negative");
    expect_error(PRE "memory 1ms }", "error[value]: 'memory' takes a size, not a time");
}

static void test_shape_errors(void **state)
{
    (void)state;
    expect_error("pipeline x { microbatches 1 }", "t.pipe:1:10: error[value]: pipeline 'x' does not set 'stages'");
    expect_error("pipeline x { stages 1 }", "error[value]: pipeline 'x' does not set 'microbatches'");
    expect_error("pipeline x { stages 0 microbatches 1 }", "t.pipe:1:21: error[value]: 'stages' must be at least 1 (got 0)");
    expect_error("pipeline x { stages 1 microbatches 0 }", "error[value]: 'microbatches' must be at least 1 (got 0)");
    expect_error("pipeline x { stages 1 microbatches 1 chunks 0 }", "error[value]: 'chunks' must be at least 1 (got 0)");
    expect_error("pipeline x { stages 65536 microbatches 1 }", "error[limit]: 'stages' 65536 exceeds the limit of 65535");
    expect_error("pipeline x { stages 1 microbatches 1 chunks 256 }", "error[limit]: 'chunks' 256 exceeds the limit of 255");
    expect_error("pipeline x { stages 1 microbatches 2147483648 }",
                 "error[limit]: 'microbatches' 2147483648 exceeds the limit of 2147483647");
    expect_error("pipeline x { stages 1000 microbatches 1 chunks 100 }",
                 "error[limit]: stages * chunks = 100000 virtual stages exceeds the limit of 65536");
    expect_error("pipeline x { stages 1 stages 2 microbatches 1 }", "t.pipe:1:23: error[value]: 'stages' is already set");
    expect_error("pipeline x { stages 1.5 microbatches 1 }", "error[value]: expected an integer, not 1.5");
    expect_error("pipeline x { stages 99999999999999999999 microbatches 1 }",
                 "error[value]: integer out of range (the largest is 9223372036854775807)");
    expect_error("pipeline x { stages P microbatches 1 }", "error[name]: unknown name 'P'");
}

static void test_op_errors(void **state)
{
    (void)state;
    expect_error(PRE "stage 0 { F0 F4 } }", "t.pipe:1:51: error[value]: micro-batch 4 is out of range (microbatches 4)");
    expect_error(PRE "stage 0 { F1.1 } }", "t.pipe:1:48: error[value]: chunk 1 is out of range (chunks 1)");
    expect_error(PRE "stage 2 { F0 } }", "t.pipe:1:44: error[value]: stage 2 is out of range (stages 2)");
    expect_error(PRE "stage -1 { F0 } }", "error[value]: stage -1 is out of range (stages 2)");
    expect_error(PRE "dep 0:F0 -> 2:F0 }", "t.pipe:1:50: error[value]: stage 2 is out of range (stages 2)");
    expect_error(PRE "dep 0:F9 -> 1:F0 }", "t.pipe:1:44: error[value]: micro-batch 9 is out of range (microbatches 4)");
    expect_error(PRE "F0 }", "t.pipe:1:38: error[syntax]: op outside a 'stage' block");
    expect_error(PRE "stage 0 { stage 1 { F0 } } }", "error[syntax]: 'stage' blocks cannot be nested");
    expect_error(PRE "stage 0 { stages 3 } }", "error[syntax]: 'stages' is only allowed at the top of a pipeline");
    expect_error(PRE "stage 0 { G(1) } }", "error[name]: 'G' is not an op (ops: F, B, W, R, SO, SI)");
    expect_error(PRE "stage 0 { F(1, 0, 0) } }", "error[syntax]: F takes a micro-batch and an optional chunk");
    expect_error(PRE "F99999999999 }", "error[syntax]: op outside a 'stage' block");
    /* op numbers are reported as written, not capped at the IR's uint32_t / uint8_t */
    expect_error(PRE "stage 0 { B99999999999 } }", "error[value]: micro-batch 99999999999 is out of range (microbatches 4)");
    expect_error(PRE "stage 0 { F4294967296 } }", "t.pipe:1:48: error[value]: micro-batch 4294967296 is out of range (microbatches 4)");
    expect_error(PRE "stage 0 { F0.300 } }", "t.pipe:1:48: error[value]: chunk 300 is out of range (chunks 1)");
    expect_error(PRE "stage 0 { F0.256 } }", "error[value]: chunk 256 is out of range (chunks 1)");
    expect_error(PRE "stage 0 { F0.65535 } }", "error[value]: chunk 65535 is out of range (chunks 1)");
    expect_error(PRE "stage 0 { F0.1234567 } }", "error[value]: chunk 1234567 is out of range (chunks 1)");
    /* 2^64 = 18446744073709551616 does not fit the widest field either */
    expect_error(PRE "stage 0 { SI18446744073709551616 } }",
                 "t.pipe:1:48: error[value]: micro-batch 18446744073709551616 is out of range (microbatches 4)");
    expect_error(PRE "stage 0 { F0.18446744073709551616 } }",
                 "error[value]: chunk 18446744073709551616 is out of range (chunks 1)");
    expect_error(PRE "dep 0:F0.300 -> 1:F0 }", "t.pipe:1:44: error[value]: chunk 300 is out of range (chunks 1)");
    expect_error(PRE "dep 0:F0 -> 1:B5000000000 }", "t.pipe:1:52: error[value]: micro-batch 5000000000 is out of range (microbatches 4)");
    /* a number longer than the message buffer is cut with "..." */
    char nines[121], src[512], want[160];
    memset(nines, '9', 120);
    nines[120] = 0;
    snprintf(src, sizeof src, PRE "stage 0 { F%s } }", nines);
    snprintf(want, sizeof want, "error[value]: micro-batch %.60s... is out of range (microbatches 4)", nines);
    expect_error(src, want);
}

/* Many errors in one run, each once. */
static void test_many_errors(void **state)
{
    (void)state;
    Run r;
    assert_null(load(&r, PRE "stage 0 { F4 F5 } stage 1 { for i in 0 .. 10 { F(i + 4) } } }"));
    assert_int_equal(r.d.nerr, 3); /* F4, F5, and F(i + 4) once for the whole loop */
    assert_int_equal(r.d.ncode[DIAG_VALUE], 3);
    done(&r);
}

static void test_syntax_errors(void **state)
{
    (void)state;
    expect_error("pipelin x { }",
                 "t.pipe:1:1: error[syntax]: unexpected identifier 'pipelin', expected end of file, "
                 "'pipeline', 'template', 'import', 'model' or 'device'");
    expect_error("pipeline { }", "t.pipe:1:10: error[syntax]: unexpected '{', expected name");
    expect_error("pipeline x { stages 1 microbatches 1 costs { f } }",
                 "t.pipe:1:48: error[syntax]: unexpected '}', expected name, string, number, '-' or '['");
    expect_error("import foo", "t.pipe:1:8: error[syntax]: unexpected identifier 'foo', expected string");
    expect_error("pipeline x { stages 1 $ }", "t.pipe:1:23: error[syntax]: unexpected character '$'");
    expect_error("pipeline x { stages 1 \x01 }", "t.pipe:1:23: error[syntax]: unexpected byte 0x01");
    expect_error("pipeline x { \xc3\xa9 }", "t.pipe:1:14: error[syntax]: unexpected non-ASCII bytes");
    expect_error("model m { s \"abc }", "t.pipe:1:13: error[syntax]: unterminated string");
    expect_error("pipeline x { stages 1 microbatches 1\n  stage 0 { F0 B0\n",
                 "t.pipe:2:18: error[syntax]: unexpected end of file");
    expect_error("pipeline x { stages 1 microbatches 1\n  stage 0 { F0 B0\n",
                 "t.pipe:2:11: note: possibly unterminated 'stage' block; the '{' is here");
    expect_error("pipeline x { stages 1 microbatches 1 stage 0 { for i in 0 .. 2 { F(i) }",
                 "t.pipe:1:46: note: possibly unterminated 'stage' block; the '{' is here");
    expect_error("template t { costs stage 0 {", "note: possibly unterminated 'costs' block; the '{' is here");
    expect_error("", "t.pipe:1:1: error[syntax]: no pipeline in 't.pipe'");
    expect_error("pipeline a { stages 1 microbatches 1 } pipeline b { stages 1 microbatches 1 }",
                 "t.pipe:1:49: error[syntax]: a file may contain only one pipeline");
    /* several syntax errors in one run */
    Run r;
    assert_null(load(&r, "pipeline x { stage 0 { F0 $ } stage 1 { B0 @ } stages 2 microbatches 1 }"));
    assert_int_equal(r.d.nerr, 2);
    done(&r);
}

static void test_settings(void **state)
{
    (void)state;
    Run r;
    Pipeline *p = load(&r,
        "model m { arch llama layers 40 hidden 5120 dtype \"bf16\" mem 2GiB bw 25GB/s t 3ms l [1, 2.5] }\n"
        "device d { memory 80GiB peak_tflops 312 }\n"
        "pipeline x { stages 4 microbatches 8 chunks 2 vshape\n"
        "  model m { layers 48 }  device d  partition [10, 9.5, 10, 10.5]  tensor_parallel 2\n"
        "  recompute stages 0..=2 policy full  recompute stages 1..3 policy selective\n"
        "  recompute stages 3 policy cmb  recompute stages all policy mlp\n"
        "  apply forward_migration(stages=0..=2, t=1ms, l=[1, 2], s=\"a\", m=all, n=-3)\n"
        "  apply dependency_relaxation  apply other()\n"
        "  stage 3 { F0.1 } }");
    assert_non_null(p);
    assert_int_equal(p->V, 2);
    assert_int_equal(p->placement, PLACE_VSHAPE);
    assert_int_equal(ir_vstage(p, 3, 1), 4); /* odd chunk of the last rank: 1*4 + (4-1-3) */
    assert_false(p->has_memory);             /* the device's budget is the cost model's */
    assert_string_equal(p->model->name, "m");
    assert_int_equal(p->model->nfields, 9);  /* 8 definition fields + 1 override */
    const Field *f = field_find(p->model->fields, p->model->nfields, "layers");
    assert_int_equal(f->val.kind, VAL_NUM);
    assert_true(f->val.num == 48);           /* the override wins */
    f = field_find(p->model->fields, p->model->nfields, "arch");
    assert_int_equal(f->val.kind, VAL_IDENT);
    assert_string_equal(f->val.str, "llama");
    f = field_find(p->model->fields, p->model->nfields, "dtype");
    assert_int_equal(f->val.kind, VAL_STRING);
    assert_string_equal(f->val.str, "bf16");
    f = field_find(p->model->fields, p->model->nfields, "mem");
    assert_int_equal(f->val.unit, UNIT_SIZE);
    assert_true(f->val.num == 2 * GiB);
    f = field_find(p->model->fields, p->model->nfields, "bw");
    assert_int_equal(f->val.unit, UNIT_BW);
    assert_true(f->val.num == 25e9);
    f = field_find(p->model->fields, p->model->nfields, "t");
    assert_int_equal(f->val.unit, UNIT_TIME);
    assert_true(f->val.num == 3.0);
    f = field_find(p->model->fields, p->model->nfields, "l");
    assert_int_equal(f->val.kind, VAL_LIST);
    assert_int_equal(f->val.nlist, 2);
    assert_true(f->val.list[1] == 2.5);
    f = field_find(p->model->fields, p->model->nfields, "hidden");
    assert_int_equal(f->val.unit, UNIT_NONE);
    assert_string_equal(p->device->name, "d");
    f = field_find(p->device->fields, p->device->nfields, "memory");
    assert_true(f->val.num == 80 * GiB);
    assert_true(p->partition_set && !p->partition_even);
    assert_int_equal(p->npartition, 4);
    assert_true(p->partition[1] == 9.5 && p->partition[3] == 10.5);
    assert_int_equal(p->tensor_parallel, 2);
    assert_int_equal(p->nrecompute, 4);
    assert_int_equal(p->recompute[0].lo, 0);
    assert_int_equal(p->recompute[0].hi, 3);
    assert_int_equal(p->recompute[0].policy, POLICY_FULL);
    assert_int_equal(p->recompute[1].lo, 1);
    assert_int_equal(p->recompute[1].hi, 3);
    assert_int_equal(p->recompute[1].policy, POLICY_SELECTIVE);
    assert_int_equal(p->recompute[2].lo, 3);
    assert_int_equal(p->recompute[2].hi, 4);
    assert_int_equal(p->recompute[3].lo, 0);
    assert_int_equal(p->recompute[3].hi, 4);
    assert_int_equal(p->recompute[3].policy, POLICY_MLP);
    assert_int_equal(p->npasses, 3);
    assert_string_equal(p->passes[0].name, "forward_migration");
    assert_int_equal(p->passes[0].nargs, 6);
    assert_int_equal(p->passes[0].args[0].val.kind, VAL_RANGE);
    assert_int_equal(p->passes[0].args[0].val.lo, 0);
    assert_int_equal(p->passes[0].args[0].val.hi, 3);
    assert_true(p->passes[0].args[1].val.num == 1.0);
    assert_int_equal(p->passes[0].args[2].val.kind, VAL_LIST);
    assert_int_equal(p->passes[0].args[3].val.kind, VAL_STRING);
    assert_int_equal(p->passes[0].args[4].val.kind, VAL_IDENT);
    assert_string_equal(p->passes[0].args[4].val.str, "all");
    assert_true(p->passes[0].args[5].val.num == -3);
    assert_string_equal(p->passes[1].name, "dependency_relaxation");
    assert_int_equal(p->passes[1].nargs, 0);
    assert_int_equal(p->passes[2].nargs, 0);
    assert_ops(p, 3, "F0.1");
    done(&r);

    /* with chunks, one entry per stage or one per virtual stage (docs/cost-model.md) */
    p = load(&r, "pipeline x { stages 2 microbatches 1 chunks 2 partition [1, 2, 3, 4.5] }");
    assert_non_null(p);
    assert_int_equal(p->npartition, 4);
    assert_true(p->partition[3] == 4.5);
    done(&r);
    p = load(&r, "pipeline x { stages 2 microbatches 1 chunks 2 partition [3, 4] }");
    assert_non_null(p);
    assert_int_equal(p->npartition, 2);
    done(&r);

    p = load(&r, "pipeline x { stages 2 microbatches 1 partition even }");
    assert_non_null(p);
    assert_true(p->partition_set && p->partition_even);
    assert_int_equal(p->tensor_parallel, 1);
    assert_null(p->model);
    done(&r);

    expect_error(PRE "model nope }", "t.pipe:1:44: error[name]: unknown model 'nope'");
    expect_error(PRE "device nope }", "error[name]: unknown device 'nope'");
    expect_error(PRE "schedule nope }", "error[name]: unknown schedule template 'nope'");
    expect_error(PRE "partition [1, 2, 3] }", "error[value]: 'partition' lists 3 stages, but the pipeline has 2");
    expect_error(PRE "chunks 2 partition [1, 2, 3] }",
                 "t.pipe:1:47: note: with chunks 2, give one entry per stage or one per virtual stage (4)");
    expect_error(PRE "partition [1, 2.25] }", "error[value]: a partition entry is a number of layers, a multiple of 0.5");
    expect_error(PRE "recompute stages 0..=2 policy full }",
                 "error[value]: recompute stages 0..3 are not a non-empty range within stages 2");
    expect_error(PRE "recompute stages 1..1 policy full }", "error[value]: recompute stages 1..1 are not a non-empty range");
    expect_error(PRE "recompute stages 0 policy some }",
                 "error[value]: unknown recompute policy 'some' (policies: none, full, selective, cmb, mlp, block(N), keep(...))");
    expect_error(PRE "tensor_parallel 0 }", "error[value]: 'tensor_parallel' must be at least 1 (got 0)");
    expect_error("model m { a 1 } model m { b 2 } pipeline x { stages 1 microbatches 1 }",
                 "t.pipe:1:23: error[name]: model 'm' is already defined");
}

/* The onef1b template gives the 1F1B lists of docs/spec.md "Explicit form". */
static const char *onef1b_template =
    "template onef1b {\n"
    "  for s in 0 .. P {\n"
    "    stage s {\n"
    "      let warm = min(P - s - 1, M)\n"
    "      for i in 0 .. warm { F(i) }\n"
    "      for i in 0 .. M - warm { F(i + warm) B(i) }\n"
    "      for i in M - warm .. M { B(i) }\n"
    "    }\n"
    "  }\n"
    "}\n";

static void test_template_onef1b(void **state)
{
    (void)state;
    char src[2048];
    snprintf(src, sizeof src, "%spipeline x { stages 4 microbatches 8 schedule onef1b }", onef1b_template);
    Run r;
    Pipeline *p = load(&r, src);
    assert_non_null(p);
    for (int s = 0; s < 4; s++)
        assert_ops(p, s, want_1f1b[s]);
    assert_string_equal(p->schedule, "onef1b");
    /* a template op points at the op call in the template */
    const char *at = strstr(src, "F(i + warm)");
    assert_int_equal(p->stages[0].ops[3].loc.off, (uint32_t)(at - src));
    done(&r);

    /* M < P: warm-up is clipped by min(). By hand: rank 0 of P=4, M=2 runs F0 F1 B0 B1. */
    snprintf(src, sizeof src, "%spipeline x { stages 4 microbatches 2 schedule onef1b }", onef1b_template);
    p = load(&r, src);
    assert_non_null(p);
    assert_ops(p, 0, "F0 F1 B0 B1");
    assert_ops(p, 3, "F0 B0 F1 B1");
    done(&r);
}

static void test_template_language(void **state)
{
    (void)state;
    Run r;
    Pipeline *p = load(&r,
        "template t {\n"
        "  stage 0 {\n"
        "    for i in 0 ..= 3 { if i % 2 == 0 { F(i) } else { B(i) } }\n"   /* F0 B1 F2 B3 */
        "    let a = 7 / 2 * 2 - 6 % 4\n"                                    /* 3*2 - 2 = 4 */
        "    F(a) F(max(1, 9, 5) - 4)\n"                                     /* F4 F5 */
        "    if a > 3 && !(a >= 5) || 1 / 0 == 0 { W(0) }\n"                 /* short circuit: W0 */
        "    if a < 0 { R(0) } else if a <= 4 { R(1) } else { R(2) }\n"      /* R1 */
        "    if a != 4 { SO(9) }\n"
        "    SO(-(-2)) SI(2) F(0, V - 1) W1 R2.1\n"
        "    let a = a + 1 F(a)\n"                                           /* shadowing: F5 */
        "  }\n"
        "  stage P - 1 { for i in 5 .. 0 { F(i) } F(M - 1) }\n"             /* empty loop */
        "  dep 0:F(0) -> P - 1:F(M - 1)\n"
        "}\n"
        "pipeline x { stages 3 microbatches 8 chunks 2 schedule t }");
    assert_non_null(p);
    assert_string_equal(r.out, "");
    assert_ops(p, 0, "F0 B1 F2 B3 F4 F5 W0 R1 SO2 SI2 F0.1 W1 R2.1 F5");
    assert_ops(p, 1, "");
    assert_false(p->stages[1].declared);
    assert_ops(p, 2, "F7");
    assert_int_equal(p->ndeps, 1);
    assert_int_equal(p->deps[0].to.stage, 2);
    assert_int_equal(p->deps[0].to.mb, 7);
    done(&r);

    /* lets and loops work in a pipeline body too; the template does not see them */
    p = load(&r, "template t { stage 0 { F(0) } }\n"
                 "pipeline x { stages 2 microbatches 2 let k = 1\n"
                 "  stage k { for i in 0 .. M { F(i) } } schedule t }");
    assert_non_null(p);
    assert_ops(p, 0, "F0");
    assert_ops(p, 1, "F0 F1");
    done(&r);
    expect_error("template t { stage 0 { F(k) } }\n"
                 "pipeline x { stages 2 microbatches 2 let k = 1 schedule t }",
                 "t.pipe:2:57: error[name]: unknown name 'k'");
    /* the template's line is a note (the error is reported at the `schedule` line) */
    expect_error("template t { stage 0 { F(k) } }\n"
                 "pipeline x { stages 2 microbatches 2 let k = 1 schedule t }",
                 "t.pipe:1:26: note: expanded from template 't' (stages 2, microbatches 2, chunks 1)");
}

/* `require COND "message"`: a template's precondition (docs/language.md section 6). */
static void test_require(void **state)
{
    (void)state;
    static const char *tmpl =
        "template t {\n"
        "  require M % P == 0 \"t needs \\\"M\\\" to be a multiple of P\"\n"
        "  for s in 0 .. P { stage s { for i in 0 .. M { F(i) B(i) } } }\n"
        "  stage 0 { F(M) }\n" /* reached only when the require holds: an error then */
        "}\n";
    char src[512];
    Run r;
    /* holds: the template runs (and so reaches its out-of-range F(M)) */
    snprintf(src, sizeof src, "%spipeline x { stages 2 microbatches 4 schedule t }", tmpl);
    assert_null(load(&r, src));
    assert_has(r.out, "t.pipe:6:47: error[value]: micro-batch 4 is out of range (microbatches 4)");
    assert_has(r.out, "t.pipe:4:13: note: F(4, 0) (stage 0, micro-batch 4) is expanded from "
                      "template 't' (stages 2, microbatches 4, chunks 1)");
    assert_int_equal(r.d.nerr, 1);
    done(&r);
    /* fails: one `value` error at the pipeline's `schedule` line with the message
     * (escapes undone), a note at the statement, and nothing after the require runs */
    snprintf(src, sizeof src, "%spipeline x {\n  stages 2 microbatches 3\n  schedule t\n}", tmpl);
    assert_null(load(&r, src));
    assert_has(r.out, "t.pipe:8:12: error[value]: t needs \"M\" to be a multiple of P\n");
    assert_has(r.out, "t.pipe:2:3: note: expanded from template 't' (stages 2, microbatches 3, chunks 1)\n");
    assert_int_equal(r.d.nerr, 1);
    assert_int_equal(r.d.ncode[DIAG_VALUE], 1);
    done(&r);

    /* a true require emits nothing; later ops are emitted */
    Pipeline *p = load(&r, "template u { require V == 2 \"two chunks\" stage 0 { F(0, 1) } }\n"
                           "pipeline x { stages 1 microbatches 1 chunks 2 schedule u }");
    assert_non_null(p);
    assert_string_equal(r.out, "");
    assert_ops(p, 0, "F0.1");
    done(&r);

    /* in a loop: the first failing iteration ends the template; one error */
    p = load(&r, "template u { for s in 0 .. P { require s < 2 \"at most 2\" stage s { F(0) } } }\n"
                 "pipeline x { stages 5 microbatches 1 schedule u }");
    assert_null(p);
    assert_has(r.out, "t.pipe:2:47: error[value]: at most 2\n");
    assert_has(r.out, "t.pipe:1:32: note: expanded from template 'u'");
    assert_int_equal(r.d.nerr, 1);
    done(&r);

    /* it ends the template, not the pipeline: the body after `schedule` still runs */
    assert_null(load(&r, "template u { require 0 \"never\" }\n"
                         "pipeline x { stages 1 microbatches 1 schedule u stage 0 { F7 } }"));
    assert_has(r.out, "t.pipe:2:47: error[value]: never\n");
    assert_has(r.out, "t.pipe:2:59: error[value]: micro-batch 7 is out of range (microbatches 1)");
    assert_int_equal(r.d.nerr, 2);
    done(&r);

    /* in a pipeline body: no note (no template); the rest of the body does not run */
    assert_null(load(&r, "pipeline x { stages 1 microbatches 1 require M > 1 \"needs 2\" stage 0 { F7 } }"));
    assert_has(r.out, "t.pipe:1:38: error[value]: needs 2\n");
    assert_null(strstr(r.out, "note:"));
    assert_int_equal(r.d.nerr, 1);
    done(&r);

    /* a condition that cannot be evaluated is reported and also ends the template */
    assert_null(load(&r, "template u { require zz \"x\" stage 0 { F9 } }\n"
                         "pipeline x { stages 1 microbatches 1 schedule u }"));
    assert_has(r.out, "t.pipe:2:47: error[name]: unknown name 'zz'");
    assert_int_equal(r.d.nerr, 1);
    done(&r);

    /* syntax: the condition and the string are both needed */
    expect_error("template u { require V == 1 } pipeline x { stages 1 microbatches 1 schedule u }",
                 "t.pipe:1:29: error[syntax]: unexpected '}'");
    assert_null(load(&r, "template u { require \"m\" } pipeline x { stages 1 microbatches 1 schedule u }"));
    assert_has(r.out, "t.pipe:1:22: error[syntax]: unexpected string \"m\"");
    assert_has(r.out, "t.pipe:1:14: note: 'require' takes a condition and a message: require COND \"message\"");
    done(&r);

    /* `require` is a keyword, and like every keyword still a name */
    p = load(&r, "model require { layers 2 }\n"
                 "pipeline x { stages 1 microbatches 1 model require stage 0 { F0 B0 } }");
    assert_non_null(p);
    assert_string_equal(p->model->name, "require");
    done(&r);
}

/* Expressions run as compiled code (elaborate.c expr_run): the values, the errors and
 * the point where evaluation stops are the tree walk's. */
static void test_compiled_eval(void **state)
{
    (void)state;
    Run r;
    Pipeline *p = load(&r,
        "pipeline x { stages 1 microbatches 16\n"
        "  stage 0 {\n"
        "    F(min(5, 4, 3 * 3, 2 + 0, max(1, 7) - 5, 9))\n"  /* F2 */
        "    F(max(0)) F(-(-(3)) + !0)\n"                      /* F0 F4 */
        "    for k in 0 .. 2 { F(k * 2 + (k + 1) * 3 - k % 2) }\n" /* F3 F7 */
        "    if 0 && zz { F(15) } if 1 || 1 / 0 { F(14) }\n"  /* short circuit: F14 */
        "    F((1 < 2) + (2 <= 2) + (3 > 2) + (3 >= 4) + (5 == 5) + (5 != 5))\n" /* F4 */
        "  }\n}\n");
    assert_non_null(p);
    assert_string_equal(r.out, "");
    assert_ops(p, 0, "F2 F0 F4 F3 F7 F14 F4");
    done(&r);

    /* the first failing operand is the one reported; what follows is not evaluated */
    assert_null(load(&r, PRE "stage 0 { F(zz + 1 / 0) } }"));
    assert_has(r.out, "unknown name 'zz'");
    assert_null(strstr(r.out, "division by zero"));
    done(&r);
    assert_null(load(&r, PRE "stage 0 { F(1 / 0 + zz) } }"));
    assert_has(r.out, "division by zero");
    assert_null(strstr(r.out, "unknown name"));
    done(&r);
    assert_null(load(&r, PRE "stage 0 { F(zz * (yy + 1)) } }"));
    assert_has(r.out, "unknown name 'zz'");
    assert_null(strstr(r.out, "unknown name 'yy'"));
    done(&r);
    expect_error(PRE "stage 0 { let m = -9223372036854775807 - 1 F(-m) } }",
                 "error[value]: integer overflow in -(-9223372036854775808)");
    expect_error(PRE "stage 0 { F(min(1, 2.5)) } }", "error[value]: expected an integer, not 2.5");

    /* A `let` that fails leaves its name reading the outer binding, in that iteration
     * only: here x is 1 when k = 0 (the division fails), then 10 / k. */
    assert_null(load(&r, "pipeline x { stages 1 microbatches 8\n"
                         "  let x = 1\n"
                         "  stage 0 { for k in 0 .. 3 { let x = 10 / k F(x) } }\n}\n"));
    assert_has(r.out, "t.pipe:3:42: error[value]: division by zero");
    assert_has(r.out, "error[value]: micro-batch 10 is out of range (microbatches 8)");
    assert_int_equal(r.d.nerr, 2);
    done(&r);
}

static void test_template_errors(void **state)
{
    (void)state;
    expect_error(PRE "stage 0 { F(1 / 0) } }", "t.pipe:1:52: error[value]: division by zero");
    expect_error(PRE "stage 0 { F(1 % (2 - 2)) } }", "error[value]: modulo by zero");
    expect_error(PRE "stage 0 { F(9223372036854775807 + 1) } }",
                 "error[value]: integer overflow in 9223372036854775807 + 1");
    expect_error(PRE "stage 0 { F(4611686018427387904 * 2) } }",
                 "error[value]: integer overflow in 4611686018427387904 * 2");
    expect_error(PRE "stage 0 { F(-9223372036854775807 - 2) } }",
                 "error[value]: integer overflow in -9223372036854775807 - 2");
    expect_error(PRE "stage 0 { let m = -9223372036854775807 - 1 F(m / -1) } }",
                 "error[value]: integer overflow in -9223372036854775808 / -1");
    expect_error(PRE "stage 0 { F(zz) } }", "t.pipe:1:50: error[name]: unknown name 'zz'");
    expect_error(PRE "stage 0 { F(foo(1)) } }", "error[name]: unknown function 'foo' (functions: min, max)");
    expect_error(PRE "stage 0 { F(1.5) } }", "error[value]: expected an integer, not 1.5");
    expect_error(PRE "stage 0 { F(2ms) } }", "error[value]: expected an integer, not 2ms");
    expect_error(PRE "stage 0 { for i in 0 ..= 9223372036854775807 { } } }",
                 "error[value]: integer overflow in the end of '..='");
    expect_error("template t { stages 3 } pipeline x { stages 1 microbatches 1 schedule t }",
                 "t.pipe:1:14: error[syntax]: 'stages' is only allowed at the top of a pipeline");
    expect_error("template t { schedule t } pipeline x { stages 1 microbatches 1 schedule t }",
                 "error[syntax]: 'schedule' is only allowed at the top of a pipeline");
}

static void test_limits(void **state)
{
    (void)state;
    clock_t t0 = clock();
    /* loop iterations: refused before running */
    expect_error(PRE "stage 0 { for i in 0 .. 1000000000 { F(0) } } }",
                 "t.pipe:1:52: error[limit]: the expansion runs more than 100000000 loop iterations");
    expect_error(PRE "stage 0 { for i in 0 .. 100000 { for j in 0 .. 100000 { } } } }",
                 "error[limit]: the expansion runs more than 100000000 loop iterations");
    /* op count, with a lowered limit so that the test stays small */
    uint64_t saved = frontend_limits.max_ops;
    frontend_limits.max_ops = 1000;
    expect_error(PRE "stage 0 { for i in 0 .. 2000 { F(0) } } }",
                 "t.pipe:1:69: error[limit]: the schedule has more than 1000 ops");
    frontend_limits.max_ops = saved;
    /* nesting: 100000 '(' stops at the 65th */
    size_t n = 100000;
    char *deep = xmalloc(n + 200);
    strcpy(deep, PRE "stage 0 { F(");
    size_t k = strlen(deep);
    memset(deep + k, '(', n);
    strcpy(deep + k + n, "0 } }");
    expect_error(deep, "error[limit]: brackets nested deeper than 64 levels");
    /* braces */
    strcpy(deep, PRE);
    k = strlen(deep);
    for (size_t i = 0; i < 100; i++)
        k += (size_t)sprintf(deep + k, "if 1 { ");
    strcpy(deep + k, "}");
    expect_error(deep, "error[limit]: brackets nested deeper than 64 levels");
    /* a long left-deep expression: 1+1+...+1 */
    strcpy(deep, PRE "stage 0 { F(0");
    k = strlen(deep);
    for (size_t i = 0; i < 30000; i++)
        k += (size_t)sprintf(deep + k, "+1");
    strcpy(deep + k, ") } }");
    expect_error(deep, "error[limit]: expression nested deeper than 256 levels");
    /* a long unary chain: - - - ... 1 */
    strcpy(deep, PRE "stage 0 { F(");
    k = strlen(deep);
    for (size_t i = 0; i < 40000; i++)
        deep[k++] = '-';
    strcpy(deep + k, "1) } }");
    expect_error(deep, "error[limit]: ");
    free(deep);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    if (secs > 10) {
        print_error("limits took %.1f s\n", secs);
        fail();
    }
}

/* ---- imports: files in a temporary folder ------------------------------------------ */

static char tmpdir[64];

static void put(const char *rel, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    char *slash = strrchr(path, '/');
    *slash = 0;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    assert_int_equal(system(cmd), 0);
    *slash = '/';
    assert_int_equal(write_file_atomic(path, text, strlen(text)), 0);
}

static Pipeline *load_file_run(Run *r, const LoadOpts *o, const char *rel)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    memset(r, 0, sizeof *r);
    r->d.out = open_memstream(&r->out, &r->outlen);
    r->p = load_pipeline(&r->d, o, path);
    fflush(r->d.out);
    return r->p;
}

static int imports_setup(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/pipec_fe_XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    return 0;
}

static int imports_teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_imports(void **state)
{
    (void)state;
    char buf[512];
    put("lib/sched.pipe", "import \"common.pipe\"\ntemplate two { stage 0 { F(0) B(0) } stage 1 { F(0) B(0) } }\n");
    put("lib/common.pipe", "model tiny { layers 2 }\n");
    put("inc/dev.pipe", "device cpu { memory 1GiB }\n");
    put("std_here/std/x.pipe", "template sx { stage 0 { F(0) } }\n");
    put("stdroot/y.pipe", "template sy { stage 0 { F(0) } }\n");
    put("main.pipe", "import \"lib/sched.pipe\" import \"dev.pipe\" import \"lib/common.pipe\"\n"
                     "pipeline x { stages 2 microbatches 1 schedule two model tiny device cpu }\n");
    Run r;
    snprintf(buf, sizeof buf, "%s/inc", tmpdir);
    const char *dirs[] = {buf};
    LoadOpts o = {.include_dirs = dirs, .ninclude = 1};
    Pipeline *p = load_file_run(&r, &o, "main.pipe");
    assert_non_null(p);
    assert_ops(p, 1, "F0 B0");
    assert_string_equal(p->model->name, "tiny");
    assert_string_equal(p->device->name, "cpu");
    done(&r);
    /* without -I the device file is not found */
    assert_null(load_file_run(&r, NULL, "main.pipe"));
    assert_has(r.out, "main.pipe:1:32: error[name]: cannot find import \"dev.pipe\"");
    done(&r);

    /* "std/NAME" maps to the stdlib folder itself; PIPEC_PATH folders are searched */
    char *old = getenv("PIPEC_STDLIB") ? xstrdup(getenv("PIPEC_STDLIB")) : NULL;
    snprintf(buf, sizeof buf, "%s/stdroot", tmpdir);
    setenv("PIPEC_STDLIB", buf, 1);
    assert_string_equal(stdlib_dir(), buf);
    put("s.pipe", "import \"std/y.pipe\" pipeline x { stages 1 microbatches 1 schedule sy }");
    p = load_file_run(&r, NULL, "s.pipe");
    assert_non_null(p);
    done(&r);
    snprintf(buf, sizeof buf, "/nonexistent:%s/std_here", tmpdir);
    setenv("PIPEC_PATH", buf, 1);
    put("s2.pipe", "import \"std/x.pipe\" pipeline x { stages 1 microbatches 1 schedule sx }");
    p = load_file_run(&r, NULL, "s2.pipe");
    assert_non_null(p);
    done(&r);
    unsetenv("PIPEC_PATH");
    if (old) {
        setenv("PIPEC_STDLIB", old, 1);
        free(old);
    } else {
        unsetenv("PIPEC_STDLIB");
    }

    /* a file imported twice (diamond) is loaded once: no duplicate definitions */
    put("d/a.pipe", "import \"c.pipe\"\n");
    put("d/b.pipe", "import \"c.pipe\"\n");
    put("d/c.pipe", "template tc { stage 0 { F(0) } }\n");
    put("d/main.pipe", "import \"a.pipe\" import \"b.pipe\" pipeline x { stages 1 microbatches 1 schedule tc }");
    p = load_file_run(&r, NULL, "d/main.pipe");
    assert_non_null(p);
    done(&r);
}

static void test_import_errors(void **state)
{
    (void)state;
    Run r;
    /* a cycle: main -> a -> b -> a */
    put("cyc/a.pipe", "import \"b.pipe\"\n");
    put("cyc/b.pipe", "\nimport \"a.pipe\"\n");
    put("cyc/main.pipe", "import \"a.pipe\" pipeline x { stages 1 microbatches 1 }");
    assert_null(load_file_run(&r, NULL, "cyc/main.pipe"));
    assert_has(r.out, "b.pipe:2:8: error[name]: import cycle: \"a.pipe\" imports itself");
    assert_has(r.out, "a.pipe:1:8: note: through this import");
    assert_int_equal(r.d.nerr, 1);
    done(&r);
    /* a file importing itself */
    put("self.pipe", "import \"self.pipe\" pipeline x { stages 1 microbatches 1 }");
    assert_null(load_file_run(&r, NULL, "self.pipe"));
    assert_has(r.out, "self.pipe:1:8: error[name]: import cycle: \"self.pipe\" imports itself");
    done(&r);
    /* a chain of 20 imports passes the depth limit of 16 */
    char name[32], text[64];
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof name, "chain/c%d.pipe", i);
        snprintf(text, sizeof text, "import \"c%d.pipe\"\n", i + 1);
        put(name, text);
    }
    put("chain/c20.pipe", "\n");
    put("chain/main.pipe", "import \"c0.pipe\" pipeline x { stages 1 microbatches 1 }");
    assert_null(load_file_run(&r, NULL, "chain/main.pipe"));
    assert_has(r.out, "c15.pipe:1:8: error[limit]: imports nested deeper than 16 files");
    done(&r);
    /* an imported pipeline; an imported syntax error; a folder */
    put("ip/lib.pipe", "pipeline y { stages 1 microbatches 1 }\n");
    put("ip/bad.pipe", "template t { stage 0 { F( } }\n");
    put("ip/sub/x.pipe", "\n");
    put("ip/main.pipe", "import \"lib.pipe\" import \"bad.pipe\" import \"sub\" pipeline x { stages 1 microbatches 1 }");
    assert_null(load_file_run(&r, NULL, "ip/main.pipe"));
    assert_has(r.out, "lib.pipe:1:10: error[syntax]: an imported file cannot contain a pipeline");
    assert_has(r.out, "bad.pipe:1:27: error[syntax]: unexpected '}'");
    assert_has(r.out, "main.pipe:1:44: error[name]: cannot find import \"sub\"");
    done(&r);
    /* the main file itself */
    assert_null(load_file_run(&r, NULL, "missing.pipe"));
    assert_has(r.out, "error[name]: cannot read '");
    done(&r);
}

/* The stdlib ships the schedules of docs/spec.md "Stdlib names"; each expands for a small shape. */
/* VSHAPE: 1 under `chunks V vshape`, else 0, in templates and in the pipeline body; a
 * template's pipeline-level name is not shadowed by it (docs/language.md section 6). */
static void test_vshape_constant(void **state)
{
    (void)state;
    Run r;
    static const char *tmpl =
        "template v {\n"
        "  require V == 2 && VSHAPE \"v needs chunks 2 vshape\"\n"
        "  for s in 0 .. P { stage s { F(0) F(0, 1) B(0, 1) B(0) } }\n"
        "}\n";
    char src[512];
    snprintf(src, sizeof src, "%spipeline x { stages 2 microbatches 1 chunks 2 vshape schedule v }", tmpl);
    Pipeline *p = load(&r, src);
    assert_non_null(p);
    assert_string_equal(r.out, "");
    assert_int_equal(p->placement, PLACE_VSHAPE);
    assert_ops(p, 1, "F0 F0.1 B0.1 B0");
    done(&r);

    /* the default placement: VSHAPE is 0 and the require fails with its message */
    snprintf(src, sizeof src, "%spipeline x { stages 2 microbatches 1 chunks 2 schedule v }", tmpl);
    assert_null(load(&r, src));
    assert_has(r.out, "t.pipe:5:56: error[value]: v needs chunks 2 vshape\n");
    assert_has(r.out, "t.pipe:2:3: note: expanded from template 'v' (stages 2, microbatches 1, chunks 2)");
    assert_int_equal(r.d.nerr, 1);
    done(&r);

    /* visible in a pipeline body too, and a `let` may shadow it there */
    p = load(&r, "pipeline x { stages 1 microbatches 2 chunks 1 vshape\n"
                 "  stage 0 { F(VSHAPE) B(VSHAPE) }\n"
                 "  let VSHAPE = 0\n"
                 "  stage 0 { F(VSHAPE) B(VSHAPE) } }");
    assert_non_null(p);
    assert_ops(p, 0, "F1 B1 F0 B0");
    done(&r);
}

static void test_stdlib_schedules(void **state)
{
    (void)state;
    static const char *names[] = {"gpipe", "onef1b", "interleaved", "zbh1", "eager1f1b",
                                  "zbh2", "looped_bfs", "interleaved_zb"};
    setenv("PIPEC_STDLIB", "stdlib", 1);
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        char src[256];
        snprintf(src, sizeof src, "import \"std/schedules.pipe\"\n"
                 "pipeline x { stages 4 microbatches 8 schedule %s }", names[i]);
        Run r;
        Pipeline *p = load(&r, src);
        if (!p) {
            print_error("%s: %s\n", names[i], r.out);
            fail();
        }
        /* every schedule has one F and one B per (rank, micro-batch) for V = 1 */
        uint32_t nf = 0, nb = 0;
        for (int s = 0; s < 4; s++)
            for (uint32_t k = 0; k < p->stages[s].n; k++) {
                nf += p->stages[s].ops[k].kind == OP_F;
                nb += p->stages[s].ops[k].kind == OP_B;
            }
        assert_int_equal(nf, 32);
        assert_int_equal(nb, 32);
        done(&r);
    }
    unsetenv("PIPEC_STDLIB");
}

/* Random bytes and truncations of valid input never crash and always report. */
static void test_garbage(void **state)
{
    (void)state;
    char buf[256];
    unsigned seed = 12345;
    static const char alphabet[] = "pipeline stage{}()[]F0B1.2 ..=-> 1ms#\n\"+*/%<>=!&|:;,x\x80\x00";
    for (int it = 0; it < 300; it++) {
        size_t n = (size_t)(it % 200);
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            buf[i] = alphabet[(seed >> 16) % (sizeof alphabet - 1)];
        }
        Run r;
        memset(&r, 0, sizeof r);
        r.d.out = open_memstream(&r.out, &r.outlen);
        r.p = load_pipeline_string(&r.d, NULL, "g.pipe", buf, n);
        assert_true(r.p != NULL || r.d.nerr > 0);
        done(&r);
    }
    size_t len = strlen(design_example);
    for (size_t cut = 0; cut < len; cut += 7) {
        Run r;
        memset(&r, 0, sizeof r);
        r.d.out = open_memstream(&r.out, &r.outlen);
        r.p = load_pipeline_string(&r.d, NULL, "g.pipe", design_example, cut);
        assert_true(r.p == NULL && r.d.nerr > 0);
        done(&r);
    }
}

/* IR helpers on input no front end makes: an op kind beyond the table runs on the compute
 * stream and is named "?"; a clone of a nameless pipeline is nameless, and a rank whose
 * list was emptied (ops allocated, none left) clones to an empty rank. */
static void test_ir_odd_input(void **state)
{
    (void)state;
    char buf[16];
    assert_int_equal(op_stream((OpKind)OP_NKINDS), STREAM_COMPUTE);
    assert_string_equal(op_name(buf, sizeof buf, (OpKind)OP_NKINDS, 3, 0), "?3");
    assert_string_equal(op_name(buf, sizeof buf, OP_SI, 3, 1), "SI3.1");
    Pipeline *p = mk(2, 1, 1);
    free(p->name);
    p->name = NULL;
    ops(p, 0, "F0 B0");
    ops(p, 1, "F0 B0");
    p->stages[1].n = 0;
    Pipeline *q = pipeline_clone(p);
    assert_null(q->name);
    assert_int_equal(q->stages[0].n, 2);
    assert_int_equal(q->stages[1].n, 0);
    assert_null(q->stages[1].ops);
    pipeline_free(q);
    pipeline_free(p);
}

/* util.h: a size of 0 still gives a block of its own, never NULL (two such blocks are
 * distinct), and an empty StrBuf reads as "". */
static void test_util_zero_sizes(void **state)
{
    (void)state;
    char *a = xmalloc(0), *b = xcalloc(0, 8), *c = xcalloc(8, 0);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_ptr_not_equal(a, b);
    char *r = xrealloc(xmalloc(16), 0);
    assert_non_null(r);
    free(a);
    free(b);
    free(c);
    free(r);
    StrBuf e = {0};
    assert_string_equal(sb_str(&e), "");
    sb_puts(&e, "x");
    assert_string_equal(sb_str(&e), "x");
    sb_free(&e);
}

/* diag.h: max_errors stops the printing, not the counting (warnings included, as check's
 * quiet pass uses it); an unknown file index has no name and takes none; a code beyond
 * the tables still counts, as an error or as a warning named "?". */
static void test_diag_limits(void **state)
{
    (void)state;
    Diag d = {0};
    char *text = NULL;
    size_t len = 0;
    d.out = open_memstream(&text, &len);
    uint32_t f = diag_add_file(&d, "a.pipe", xstrdup("x\n"), 2);
    Loc at = {0, f};
    diag_set_name(&d, f + 1, "other");
    assert_string_equal(diag_file_name(&d, f + 1), "");
    assert_string_equal(diag_file_name(&d, f), "a.pipe");
    diag_warning(&d, at, (WarnCode)WARN_NCODES, "odd %d", 1);
    diag_error(&d, at, (DiagCode)DIAG_NCODES, "odder");
    fflush(d.out);
    assert_non_null(strstr(text, "a.pipe:1:1: warning[?]: odd 1"));
    assert_non_null(strstr(text, "a.pipe:1:1: error[?]: odder"));
    assert_int_equal(d.nwarn, 1);
    assert_int_equal(d.nerr, 1);
    for (int c = 0; c < DIAG_NCODES; c++)
        assert_int_equal(d.ncode[c], 0);
    d.max_errors = -1;
    size_t before = len;
    diag_error(&d, at, DIAG_VALUE, "hidden");
    diag_warning(&d, at, WARN_PASS, "hidden too");
    fflush(d.out);
    assert_int_equal(len, before);
    assert_int_equal(d.nerr, 2);
    assert_int_equal(d.nwarn, 2);
    assert_int_equal(d.ncode[DIAG_VALUE], 1);
    fclose(d.out);
    free(text);
    diag_free(&d);
}

/* diag_closest (did-you-mean): case folded, a swap of two neighbours counts 1, the word
 * itself and NULL entries are skipped, nothing for an empty word or one of 64 bytes or
 * more, and the distance limit grows with the word (0 up to 2 letters, 1 up to 4, 2 up
 * to 8, 3 beyond). diag_suggest with no room writes nothing. */
/* --set KEY=VALUE (docs/language.md "Overriding settings"): the value is read by the
 * setting rule and replaces every line of its key where the first was; a sweep point
 * reads only its span; diagnostics are located in the file named "--set". */
static void test_set_overrides(void **state)
{
    (void)state;
    const char *src = "pipeline x { stages 2 microbatches 4 apply dependency_relaxation\n"
                      "  stage 0 { F0 B0 } stage 1 { F0 B0 } }";
    Run r;
    SetOverride one[] = {{"microbatches=1", 13, 14}, {"stages=3", 7, 8}, {"stages=2", 7, 8}};
    LoadOpts o = {.sets = one, .nsets = 3};
    Pipeline *p = load_with(&r, &o, src);
    assert_non_null(p);
    assert_int_equal(p->P, 2); /* the later of two overrides of one key wins */
    assert_int_equal(p->M, 1);
    assert_ops(p, 1, "F0 B0");
    done(&r);

    /* apply lines are replaced as a whole, in the place of the first */
    SetOverride ap[] = {{"apply=recompute_in_stalls, partition_balance", 6, 46}};
    o = (LoadOpts){.sets = ap, .nsets = 1};
    src = "pipeline x { stages 1 microbatches 1 apply dependency_relaxation stage 0 { F0 B0 }"
          " apply forward_migration }";
    p = load_with(&r, &o, src);
    assert_non_null(p);
    assert_int_equal(p->npasses, 2);
    assert_string_equal(p->passes[0].name, "recompute_in_stalls");
    assert_string_equal(p->passes[1].name, "partition_balance");
    done(&r);

    /* a key the file does not set is added: memory */
    SetOverride mem[] = {{"memory=2GiB", 7, 11}};
    o = (LoadOpts){.sets = mem, .nsets = 1};
    p = load_with(&r, &o, "pipeline x { stages 1 microbatches 1 stage 0 { F0 B0 } }");
    assert_non_null(p);
    assert_true(p->has_memory);
    assert_true(p->memory == 2.0 * 1073741824.0);
    done(&r);

    /* one point of a sweep: only [lo, hi) is read, located at its column */
    SetOverride pt[] = {{"microbatches=8,0,2", 15, 16}};
    o = (LoadOpts){.sets = pt, .nsets = 1};
    assert_null(load_with(&r, &o, "pipeline x { stages 1 microbatches 1 stage 0 { F0 B0 } }"));
    assert_has(r.out, "--set:1:16: error[value]: 'microbatches' must be at least 1 (got 0)");
    done(&r);
    pt[0] = (SetOverride){"microbatches=8,0,2", 17, 18};
    p = load_with(&r, &o, "pipeline x { stages 1 microbatches 1 schedule s }\n"
                          "template s { stage 0 { for i in 0 .. M { F(i) B(i) } } }");
    assert_non_null(p);
    assert_int_equal(p->M, 2);
    done(&r);

    /* bad keys and values */
    SetOverride bad[] = {{"stage=2", 6, 7}};
    o = (LoadOpts){.sets = bad, .nsets = 1};
    assert_null(load_with(&r, &o, "pipeline x { stages 1 microbatches 1 stage 0 { F0 B0 } }"));
    assert_has(r.out, "--set:1:1: error[name]: unknown setting 'stage', did you mean 'stages'?");
    done(&r);
    bad[0] = (SetOverride){"stages", 6, 6};
    assert_null(load_with(&r, &o, "pipeline x { stages 1 microbatches 1 stage 0 { F0 B0 } }"));
    assert_has(r.out, "--set:1:7: error[syntax]: expected '=' and a value");
    done(&r);
    bad[0] = (SetOverride){"stages=1 microbatches 2", 7, 23};
    assert_null(load_with(&r, &o, "pipeline x { stages 1 microbatches 1 stage 0 { F0 B0 } }"));
    assert_has(r.out, "--set:1:10: error[syntax]: unexpected 'microbatches', expected the end of the --set value");
    done(&r);
}

static void test_did_you_mean(void **state)
{
    (void)state;
    char long_name[80];
    memset(long_name, 'x', 70);
    long_name[70] = 0;
    const char *const names[] = {"onef1b", NULL, "gpipe", "interleaved", long_name, "zbh1"};
    size_t n = ARRAY_LEN(names);
    assert_null(diag_closest(NULL, names, n));
    assert_null(diag_closest("", names, n));
    assert_string_equal(diag_closest("OneF1B", names, n), "onef1b");
    assert_string_equal(diag_closest("noef1b", names, n), "onef1b"); /* one swap */
    assert_string_equal(diag_closest("gpip", names, n), "gpipe");    /* 4 letters: 1 */
    assert_null(diag_closest("gpi", names, n));                      /* 2 edits */
    assert_string_equal(diag_closest("intrleavd", names, n), "interleaved");
    assert_null(diag_closest("zb", names, n)); /* 2 letters: exact only */
    const char *const plural[] = {"gpipe", "gpipes"}; /* the word itself is skipped */
    assert_string_equal(diag_closest("gpipe", plural, 2), "gpipes");
    long_name[69] = 'y'; /* one edit from the 70-byte name, but too long to compare */
    const char *const longer[] = {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"};
    assert_null(diag_closest(long_name, longer, 1));
    char buf[64] = "unchanged";
    assert_ptr_equal(diag_suggest(buf, 0, "gpip", names, n), buf);
    assert_string_equal(buf, "unchanged");
    assert_string_equal(diag_suggest(buf, sizeof buf, "gpip", names, n),
                        ", did you mean 'gpipe'?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_explicit_form),
        cmocka_unit_test(test_vshape_constant),
        cmocka_unit_test(test_separators_and_comments),
        cmocka_unit_test(test_units),
        cmocka_unit_test(test_unit_errors),
        cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_op_errors),
        cmocka_unit_test(test_many_errors),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_settings),
        cmocka_unit_test(test_template_onef1b),
        cmocka_unit_test(test_template_language),
        cmocka_unit_test(test_require),
        cmocka_unit_test(test_template_errors),
        cmocka_unit_test(test_compiled_eval),
        cmocka_unit_test(test_limits),
        cmocka_unit_test_setup_teardown(test_imports, imports_setup, imports_teardown),
        cmocka_unit_test_setup_teardown(test_import_errors, imports_setup, imports_teardown),
        cmocka_unit_test(test_stdlib_schedules),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_did_you_mean),
        cmocka_unit_test(test_set_overrides),
        cmocka_unit_test(test_ir_odd_input),
        cmocka_unit_test(test_util_zero_sizes),
        cmocka_unit_test(test_diag_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
