/* test_offload.c - the OG/LW op kinds of model-state offload (TPipe's T-Offload, §5;
 * docs/semantics.md "Model-state offload") through every consumer: the lexer and the
 * template op form, check (pairs, micro-batch 0, order, deadlock), the memory walk, the
 * simulator (durations, waits, the shared host link), the printer (round trip), the CSV
 * export (left out with a warning), the writers (gantt, SVG, trace) and the toffload
 * pass on a model. Expected numbers are hand computations written next to each case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "check.h"
#include "costmodel.h"
#include "driver.h"
#include "csv.h"
#include "frontend.h"
#include "ir.h"
#include "memory.h"
#include "opsem.h"
#include "passes.h"
#include "print.h"
#include "sim.h"
#include "util.h"

#define GiB 1073741824.0

typedef struct Built {
    Diag d;
    Pipeline *p;
    char *out;      /* diagnostics text */
    size_t outlen;
} Built;

/* Compiles src as `pipec` does (driver_compile: costs, recompute directives, passes,
 * structural and dependency checks); diagnostics go to b->out. */
static void build(Built *b, const char *src)
{
    memset(b, 0, sizeof *b);
    b->d.out = open_memstream(&b->out, &b->outlen);
    b->p = driver_compile_string(&b->d, NULL, "t.pipe", src, strlen(src));
    fflush(b->d.out);
}

static void done(Built *b)
{
    pipeline_free(b->p);
    fclose(b->d.out);
    free(b->out);
    diag_free(&b->d);
}

/* check_pipeline's errors on src (loaded and costed, not compiled: driver_compile would
 * stop at these errors), with the diagnostics text in *text (caller frees). */
static int check_src(const char *src, int *ncode, char **text)
{
    Built b;
    memset(&b, 0, sizeof b);
    b.d.out = open_memstream(&b.out, &b.outlen);
    b.p = load_pipeline_string(&b.d, NULL, "t.pipe", src, strlen(src));
    assert_non_null(b.p);
    assert_int_equal(derive_costs(&b.d, b.p), 0);
    int n = check_pipeline(&b.d, b.p, CHECK_ALL);
    fflush(b.d.out);
    memcpy(ncode, b.d.ncode, sizeof b.d.ncode);
    *text = xstrdup(b.out ? b.out : "");
    done(&b);
    return n;
}

static char *printed(const Pipeline *p)
{
    StrBuf s = {0};
    print_pipeline(&s, p);
    return s.s;
}

/* ---- lexer, template form, printer ------------------------------------------------ */

static const char *const two_chunks =
    "pipeline t { stages 2 microbatches 2 chunks 2\n"
    "  costs { f 1ms b 2ms act 1GiB weights 1GiB host_bw 1GB/s grads 500MB wload 250MB opt_host 3ms }\n"
    "  stage 0 { LW0.1 F0 F1 F0.1 F1.1 B0.1 B1.1 OG0.1 B0 B1 }\n"
    "  stage 1 { F0 F1 LW0.1 F0.1 B0.1 F1.1 B1.1 OG0.1 B0 B1 }\n}\n";

static void test_parse_print(void **state)
{
    (void)state;
    Built a;
    build(&a, two_chunks);
    assert_non_null(a.p);
    const Op *o = &a.p->stages[0].ops[0];
    assert_int_equal(o->kind, OP_LW);
    assert_int_equal(o->mb, 0);
    assert_int_equal(o->chunk, 1);
    assert_int_equal(a.p->stages[0].ops[7].kind, OP_OG);
    assert_int_equal(op_stream(OP_OG), STREAM_D2H);
    assert_int_equal(op_stream(OP_LW), STREAM_H2D);
    assert_int_equal(check_pipeline(&a.d, a.p, CHECK_ALL), 0);
    /* the cost fields read back: 500 MB = 5e8 bytes, 3 ms */
    assert_true(fabs(ir_cost(a.p, 0, 1, COST_GRADS) - 5e8) < 1e-6);
    assert_true(fabs(ir_cost(a.p, 1, 0, COST_WLOAD) - 2.5e8) < 1e-6);
    assert_true(fabs(ir_cost(a.p, 0, 1, COST_OPT_HOST) - 3.0) < 1e-12);
    /* print -> load -> print is a fixpoint and keeps the ops */
    char *t1 = printed(a.p);
    assert_non_null(strstr(t1, "stage 0 { LW0.1 F0 F1 F0.1 F1.1 B0.1 B1.1 OG0.1 B0 B1 }"));
    assert_non_null(strstr(t1, "grads 500MB"));
    Built b;
    build(&b, t1);
    assert_non_null(b.p);
    char *t2 = printed(b.p);
    assert_string_equal(t1, t2);
    free(t1);
    free(t2);
    done(&a);
    done(&b);

    /* the template form: OG(0, c) and LW(0, c) */
    Built c;
    build(&c, "template tt { stage 0 { LW(0, 0) for i in 0 .. M { F(i) } for i in 0 .. M { B(i) } OG(0, 0) } }\n"
              "pipeline t { stages 1 microbatches 3 schedule tt }\n");
    assert_non_null(c.p);
    assert_int_equal(c.p->stages[0].n, 8);
    assert_int_equal(c.p->stages[0].ops[0].kind, OP_LW);
    assert_int_equal(c.p->stages[0].ops[7].kind, OP_OG);
    assert_int_equal(check_pipeline(&c.d, c.p, CHECK_ALL), 0);
    done(&c);
}

/* ---- check -------------------------------------------------------------------------- */

static void test_check_errors(void **state)
{
    (void)state;
    int nc[DIAG_NCODES];
    char *t;
    /* OG with micro-batch 1: value (and its LW0 has no OG0) */
    assert_int_equal(check_src("pipeline t { stages 1 microbatches 2 stage 0 { LW0 F0 F1 B0 B1 OG1 } }", nc, &t), 2);
    assert_int_equal(nc[DIAG_VALUE], 1);
    assert_non_null(strstr(t, "OG acts on a whole chunk and takes micro-batch 0 (OG0)"));
    free(t);
    /* unpaired: an OG without LW and an LW without OG */
    assert_int_equal(check_src("pipeline t { stages 1 microbatches 1 chunks 2 stage 0 { LW0 F0 F0.1 B0.1 OG0.1 B0 } }", nc, &t), 2);
    assert_int_equal(nc[DIAG_MISSING], 2);
    assert_non_null(strstr(t, "OG0.1 on stage 0 has no LW0.1"));
    assert_non_null(strstr(t, "LW0 on stage 0 has no OG0"));
    free(t);
    /* two LWs of one chunk */
    assert_int_equal(check_src("pipeline t { stages 1 microbatches 1 stage 0 { LW0 LW0 F0 B0 OG0 } }", nc, &t), 1);
    assert_int_equal(nc[DIAG_DUPLICATE], 1);
    free(t);
    /* OG before a W of its chunk; F before its LW */
    assert_int_equal(check_src("pipeline t { stages 1 microbatches 2 stage 0 { LW0 F0 F1 B0 B1 W0 OG0 W1 } }", nc, &t), 1);
    assert_int_equal(nc[DIAG_ORDER], 1);
    assert_non_null(strstr(t, "OG0 is listed before W1"));
    free(t);
    assert_int_equal(check_src("pipeline t { stages 1 microbatches 2 stage 0 { F0 LW0 F1 B0 B1 OG0 } }", nc, &t), 1);
    assert_int_equal(nc[DIAG_ORDER], 1);
    assert_non_null(strstr(t, "F0 is listed before LW0"));
    free(t);
    /* a cross-rank cycle through an LW: stage 1's LW waits (dep) for stage 0's B0, which
     * needs stage 1's B0, which needs its F0, which needs the LW */
    assert_int_equal(check_src("pipeline t { stages 2 microbatches 1 stage 0 { F0 B0 }"
                               " stage 1 { LW0 F0 B0 OG0 } dep 0:B0 -> 1:LW0 }", nc, &t), 1);
    assert_int_equal(nc[DIAG_DEADLOCK], 1);
    free(t);
    /* the same without the dep is fine */
    assert_int_equal(check_src("pipeline t { stages 2 microbatches 1 stage 0 { F0 B0 }"
                               " stage 1 { LW0 F0 B0 OG0 } }", nc, &t), 0);
    free(t);
}

/* ---- memory walk -------------------------------------------------------------------- */

static void test_memory_walk(void **state)
{
    (void)state;
    /* weights 1 GiB; LW adds grads + wload = 0.5 + 0.25 GiB; two micro-batches of 1 GiB
     * activations: peak at F1 = 1 + 0.75 + 2 = 3.75 GiB, 0.75 GiB of it model states.
     * OG's free is not counted by the walk, but B0/B1 free the activations. */
    Built a;
    build(&a, "pipeline t { stages 1 microbatches 2 memory 3.75GiB\n"
              "  costs { act 1GiB weights 1GiB grads 512MiB wload 256MiB }\n"
              "  stage 0 { LW0 F0 F1 B0 B1 OG0 } }");
    assert_non_null(a.p);
    MemRank r;
    mem_walk(a.p, &r);
    assert_true(fabs(r.peak - 3.75 * GiB) < 1);
    assert_true(fabs(r.weights - 1.0 * GiB) < 1);
    assert_true(fabs(r.states - 0.75 * GiB) < 1);
    assert_int_equal(r.peak_op, 2);
    assert_int_equal(r.live_at_peak, 2);
    assert_int_equal(check_pipeline(&a.d, a.p, CHECK_ALL), 0); /* exactly at the budget */
    /* one byte less: a memory error that names the model states */
    a.p->memory -= 1;
    fflush(a.d.out);
    size_t before = a.outlen;
    assert_int_equal(check_pipeline(&a.d, a.p, CHECK_ALL), 1);
    fflush(a.d.out);
    assert_non_null(strstr(a.out + before, "model states 768.0 MiB loaded by LW"));
    done(&a);

    /* without OG/LW the same costs hold only weights + activations: 3 GiB */
    Built b;
    build(&b, "pipeline t { stages 1 microbatches 2\n"
              "  costs { act 1GiB weights 1GiB grads 512MiB wload 256MiB }\n"
              "  stage 0 { F0 F1 B0 B1 } }");
    mem_walk(b.p, &r);
    assert_true(fabs(r.peak - 3.0 * GiB) < 1);
    assert_true(r.states == 0);
    done(&b);
}

/* ---- simulator ---------------------------------------------------------------------- */

static void test_sim_times(void **state)
{
    (void)state;
    /* host_bw 1e9 B/s = 1 byte per ns. LW moves 1e9 B: 0..1000 ms on h2d; every F of the
     * offloaded chunk waits for it, so F0 1000..1001,
     * F1 ..1002, B0 ..1004, B1 ..1006; OG = 2e9 B / 1e9 + 5 ms = 2005 ms: 1006..3011. */
    Built a;
    build(&a, "pipeline t { stages 1 microbatches 2\n"
              "  costs { f 1ms b 2ms act 1GiB weights 1GiB host_bw 1GB/s grads 2GB wload 1GB opt_host 5ms }\n"
              "  stage 0 { LW0 F0 F1 B0 B1 OG0 } }");
    assert_non_null(a.p);
    SimResult *r = simulate(a.p);
    assert_false(r->stuck);
    const double st[] = {0, 1000, 1001, 1002, 1004, 1006}, en[] = {1000, 1001, 1002, 1004, 1006, 3011};
    for (int i = 0; i < 6; i++) {
        assert_true(fabs(r->start[0][i] - st[i]) < 1e-9);
        assert_true(fabs(r->end[0][i] - en[i]) < 1e-9);
    }
    assert_true(fabs(r->makespan_ms - 3011) < 1e-9);
    /* busy counts compute only: 1 + 1 + 2 + 2 */
    assert_true(fabs(r->stage[0].busy_ms - 6) < 1e-9);
    /* peak: weights + 1.5 GB (grads + wload, LW's start) + 2 GiB activations */
    assert_true(fabs(r->stage[0].peak_mem_bytes - (1 * GiB + 3e9 + 2 * GiB)) < 1);
    sim_free(r);
    done(&a);

    /* The host link is shared: OG0.1 and SO0 run on d2h in listed order. P = 1, V = 2,
     * M = 1: F0 0..1, F0.1 1..2, B0.1 2..4, OG0.1 4..2004 (2e9 B), SO0 (1e9 B) waits for
     * the stream: 2004..3004, SI0 3004..4004, B0 4004..4006. LW moves nothing (0 ms). */
    Built b;
    build(&b, "pipeline t { stages 1 microbatches 1 chunks 2\n"
              "  costs { f 1ms b 2ms act 1GB host_bw 1GB/s }\n"
              "  costs vstage 1 { grads 2GB }\n"
              "  stage 0 { LW0.1 F0 F0.1 B0.1 OG0.1 SO0 SI0 B0 } }");
    assert_non_null(b.p);
    assert_int_equal(check_pipeline(&b.d, b.p, CHECK_ALL), 0);
    r = simulate(b.p);
    assert_true(fabs(r->start[0][5] - 2004) < 1e-9);  /* SO0 */
    assert_true(fabs(r->end[0][6] - 4004) < 1e-9);    /* SI0 */
    assert_true(fabs(r->makespan_ms - 4006) < 1e-9);
    void *scratch = NULL;
    assert_true(fabs(sim_makespan(b.p, &scratch) - 4006) < 1e-9);
    sim_scratch_free(scratch);
    sim_free(r);
    done(&b);

    /* Every F of the chunk waits for its LW, on every rank: P = 2, the deep chunk's
     * LW on rank 1 takes 50 ms (5e7 B at 1 GB/s); F0.1 there starts at 50, not 3. */
    Built c;
    build(&c, "pipeline t { stages 2 microbatches 1 chunks 2\n"
              "  costs { f 1ms b 2ms host_bw 1GB/s }\n"
              "  costs vstage 3 { wload 50MB }\n"
              "  stage 0 { F0 F0.1 B0.1 B0 }\n"
              "  stage 1 { LW0.1 F0 F0.1 B0.1 OG0.1 B0 } }");
    assert_non_null(c.p);
    assert_int_equal(check_pipeline(&c.d, c.p, CHECK_ALL), 0);
    r = simulate(c.p);
    assert_true(fabs(r->start[1][2] - 50) < 1e-9);
    /* vs 0..3 = rank 0 c0, rank 1 c0, rank 0 c1, rank 1 c1. F0.1 on rank 1 (vs 3) 50..51,
     * B0.1 51..53, OG0.1 (0 bytes, 0 ms) at 53; rank 0's B0.1 (vs 2) 53..55; rank 1's B0
     * (vs 1) 55..57; rank 0's B0 (vs 0) 57..59. */
    assert_true(fabs(r->start[1][4] - 53) < 1e-9);
    assert_true(fabs(r->makespan_ms - 59) < 1e-9);
    sim_free(r);
    done(&c);
}

/* ---- CSV export and the writers ------------------------------------------------------ */

static void test_csv_and_writers(void **state)
{
    (void)state;
    Built a;
    build(&a, two_chunks);
    assert_non_null(a.p);
    StrBuf csv = {0};
    fflush(a.d.out);
    size_t before = a.outlen;
    assert_int_equal(csv_export(&a.d, a.p, CSV_CURRENT, &csv), 4); /* 2 OG + 2 LW */
    fflush(a.d.out);
    assert_null(strstr(csv.s, "OG"));
    assert_null(strstr(csv.s, "LW"));
    assert_non_null(strstr(a.out + before, "OG ops have no PyTorch pipelining action"));
    assert_non_null(strstr(a.out + before, "LW ops have no PyTorch pipelining action"));
    sb_free(&csv);

    SimResult *r = simulate(a.p);
    StrBuf g = {0}, s = {0}, t = {0};
    sim_write_gantt(&g, a.p, r, 100);
    assert_non_null(strstr(g.s, "stage 0 out |"));
    assert_non_null(strstr(g.s, "OG0.1"));
    assert_non_null(strstr(g.s, "LW weight load"));
    sim_write_svg(&s, a.p, r);
    assert_non_null(strstr(s.s, "OG grad offload + host step"));
    assert_non_null(strstr(s.s, "to host"));
    sim_write_trace(&t, a.p, r);
    assert_non_null(strstr(t.s, "\"name\": \"OG0.1\", \"cat\": \"OG\", \"ph\": \"X\", \"pid\": 0, \"tid\": 1"));
    assert_non_null(strstr(t.s, "\"name\": \"LW0.1\", \"cat\": \"LW\", \"ph\": \"X\", \"pid\": 0, \"tid\": 2"));
    assert_non_null(strstr(t.s, "h2d (swap in, weight load)"));
    sb_free(&g);
    sb_free(&s);
    sb_free(&t);
    sim_free(r);
    done(&a);

    /* a schedule without OG/LW keeps the plain legend and stream names */
    Built b;
    build(&b, "pipeline t { stages 1 microbatches 1 costs { f 1ms b 1ms } stage 0 { F0 B0 } }");
    r = simulate(b.p);
    sim_write_gantt(&g, b.p, r, 100);
    sim_write_trace(&t, b.p, r);
    assert_null(strstr(g.s, "LW weight load"));
    assert_non_null(strstr(t.s, "\"h2d (swap in)\""));
    sb_free(&g);
    sb_free(&t);
    sim_free(r);
    done(&b);
}

/* ---- the toffload pass ---------------------------------------------------------------- */

static void test_toffload_pass(void **state)
{
    (void)state;
    const char *base =
        "import \"std/tpipe.pipe\"\nimport \"std/models.pipe\"\nimport \"std/devices.pipe\"\n"
        "pipeline m { stages 4 microbatches 8 chunks 2\n"
        "  model llama2_7b { layers 16 } device a100_sxm_80g\n"
        "  schedule tpipe\n%s}\n";
    char src0[512], src1[512], src2[512];
    snprintf(src0, sizeof src0, base, "");
    snprintf(src1, sizeof src1, base, "  apply toffload(cpu_step=1ms)\n");
    snprintf(src2, sizeof src2, base, "  apply toffload(cpu_step=1ms) apply toffload(cpu_step=1ms)\n");
    Built a, b, c;
    build(&a, src0);
    build(&b, src1);
    build(&c, src2);
    assert_non_null(a.p);
    assert_non_null(b.p);
    assert_non_null(c.p);
    assert_int_equal(check_pipeline(&b.d, b.p, CHECK_ALL), 0);
    CostModel cm;
    assert_int_equal(costmodel_init(&b.d, b.p, &cm), 0);
    for (int32_t s = 0; s < 4; s++) {
        const StageOps *st = &b.p->stages[s];
        /* LW0.1 first; OG0.1 right after the last B of chunk 1; nothing else added */
        assert_int_equal(st->n, a.p->stages[s].n + 2);
        assert_int_equal(st->ops[0].kind, OP_LW);
        assert_int_equal(st->ops[0].chunk, 1);
        uint32_t lastb = 0, og = 0, nog = 0;
        for (uint32_t i = 0; i < st->n; i++) {
            if (st->ops[i].kind == OP_B && st->ops[i].chunk == 1)
                lastb = i;
            if (st->ops[i].kind == OP_OG)
                og = i, nog++;
        }
        assert_int_equal(nog, 1);
        assert_int_equal(og, lastb + 1);
        /* weights = 16 x (all params - deep params); grads = wload = 2 x deep params;
         * opt_host = the whole cpu_step (one deep chunk) */
        CmCost c0, c1;
        cm_vstage(&cm, ir_vstage(b.p, s, 0), POLICY_NONE, &c0);
        cm_vstage(&cm, ir_vstage(b.p, s, 1), POLICY_NONE, &c1);
        assert_true(fabs(ir_cost(b.p, s, 0, COST_WEIGHTS) - 16 * c0.params) < 1e-3 * c0.params);
        assert_true(fabs(ir_cost(b.p, s, 1, COST_GRADS) - 2 * c1.params) < 1e-6 * c1.params);
        assert_true(fabs(ir_cost(b.p, s, 1, COST_WLOAD) - 2 * c1.params) < 1e-6 * c1.params);
        assert_true(fabs(ir_cost(b.p, s, 1, COST_OPT_HOST) - 1.0) < 1e-12);
        assert_true(ir_cost(b.p, s, 0, COST_GRADS) == 0);
    }
    costmodel_free(&cm);
    /* Appendix D holds here (the pass added ops on every rank), so the transfers fit the
     * bubbles: the makespan is unchanged and every rank's peak falls */
    SimResult *ra = simulate(a.p), *rb = simulate(b.p);
    assert_true(fabs(ra->makespan_ms - rb->makespan_ms) < 1e-9 * ra->makespan_ms);
    for (int32_t s = 0; s < 4; s++)
        assert_true(rb->stage[s].peak_mem_bytes < ra->stage[s].peak_mem_bytes);
    sim_free(ra);
    sim_free(rb);
    /* idempotent */
    char *p1 = printed(b.p), *p2 = printed(c.p);
    assert_string_equal(p1, p2);
    free(p1);
    free(p2);
    done(&a);
    done(&b);
    done(&c);
}

int main(void)
{
    setenv("PIPEC_STDLIB", "stdlib", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_print),
        cmocka_unit_test(test_check_errors),
        cmocka_unit_test(test_memory_walk),
        cmocka_unit_test(test_sim_times),
        cmocka_unit_test(test_csv_and_writers),
        cmocka_unit_test(test_toffload_pass),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
