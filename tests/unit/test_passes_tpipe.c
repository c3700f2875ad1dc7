/* test_passes_tpipe.c - property tests of the TPipe and Lynx passes (trecomp_blockwise,
 * toffload, recompute_in_stalls, partition_balance) and the tpipe template: over
 * random P, M, V and costs (a fixed seed, so every run tests the same cases), every
 * pass's output passes the structural and dependency checks, the passes documented as
 * idempotent are (applying twice prints the same explicit form as once), and the
 * passes documented as never slower are not.
 *
 * The paper reproductions (closed forms of TPipe Appendices A-C) are in tests/t_tpipe.sh. */
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
#include "frontend.h"
#include "ir.h"
#include "passes.h"
#include "print.h"
#include "sim.h"
#include "util.h"

/* xorshift64*: deterministic across platforms */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 2685821657736338717ull) >> 33) % n;
}

typedef struct Built {
    Diag d;
    Pipeline *p;
    char *text; /* the diagnostics */
    size_t len;
} Built;

/* Compiles src as `pipec` does (driver_compile: costs, recompute directives, passes,
 * structural and dependency checks); p is NULL on any error. The diagnostics are in
 * b->text. */
static void build(Built *b, const char *src)
{
    memset(b, 0, sizeof *b);
    b->d.out = open_memstream(&b->text, &b->len);
    b->p = driver_compile_string(&b->d, NULL, "t.pipe", src, strlen(src));
    fflush(b->d.out);
}

static void done(Built *b)
{
    pipeline_free(b->p);
    if (b->d.out)
        fclose(b->d.out);
    free(b->text);
    diag_free(&b->d);
}

static char *printed(const Pipeline *p)
{
    StrBuf s = {0};
    print_pipeline(&s, p);
    return s.s;
}

/* A random explicit-cost configuration; sched is the template, V its chunks. */
static void config(StrBuf *s, int P, int M, int V, const char *sched, const char *applies)
{
    sb_printf(s,
              "import \"std/schedules.pipe\"\nimport \"std/tpipe.pipe\"\n"
              "pipeline r { stages %d microbatches %d chunks %d\n"
              "  costs { f %ums b %ums r %ums act %uMiB ckpt %uMiB p2p %ums }\n"
              "  schedule %s\n%s}\n",
              P, M, V, 1 + rnd(4), 1 + rnd(8), 1 + rnd(4), 64 + rnd(512), rnd(64), rnd(2), sched,
              applies);
}

/* Every pass output checks; the idempotent passes are; the never-slower ones are. */
static void test_random_explicit(void **state)
{
    (void)state;
    static const char *const tpl[] = {"tpipe", "interleaved", "onef1b"};
    int cases = 0;
    for (int it = 0; it < 60; it++) {
        int which = (int)rnd(3);
        int P = 1 + (int)rnd(8), M = 1 + (int)rnd(12);
        int V = which == 0 ? 2 : which == 1 ? 2 + (int)rnd(3) : 1;
        if (which == 1)
            M = P * (1 + (int)rnd(3));
        static const char *const once[] = {
            "apply trecomp_blockwise\n",
            "apply trecomp_blockwise(delay=0, lead=1)\n",
            "apply recompute apply recompute_in_stalls\n",
        };
        static const char *const twice[] = {
            "apply trecomp_blockwise apply trecomp_blockwise\n",
            "apply trecomp_blockwise(delay=0, lead=1) apply trecomp_blockwise(delay=0, lead=1)\n",
            "apply recompute apply recompute_in_stalls apply recompute_in_stalls\n",
        };
        uint64_t seed = rng;
        for (int k = 0; k < 3; k++) {
            if (k < 2 && V < 2)
                continue;
            StrBuf a = {0}, b = {0}, base = {0};
            rng = seed; /* the same costs for the three builds */
            config(&a, P, M, V, tpl[which], once[k]);
            rng = seed;
            config(&b, P, M, V, tpl[which], twice[k]);
            rng = seed;
            config(&base, P, M, V, tpl[which], k == 2 ? "apply recompute\n" : "");
            Built x, y, z;
            build(&x, a.s);
            build(&y, b.s);
            build(&z, base.s);
            if (!x.p || !y.p || !z.p)
                fail_msg("case %d pass %d did not build:\n%s", it, k, a.s);
            Diag cd = {0};
            cd.out = fopen("/dev/null", "w");
            assert_int_equal(check_pipeline(&cd, z.p, CHECK_STRUCTURE | CHECK_DEPS), 0);
            if (check_pipeline(&cd, x.p, CHECK_STRUCTURE | CHECK_DEPS))
                fail_msg("case %d pass %d fails check:\n%s", it, k, a.s);
            char *px = printed(x.p), *py = printed(y.p);
            if (strcmp(px, py) != 0)
                fail_msg("case %d pass %d is not idempotent:\n%s", it, k, a.s);
            if (k == 2) { /* recompute_in_stalls only keeps strict improvements */
                void *sc = NULL;
                double t0 = sim_makespan(z.p, &sc), t1 = sim_makespan(x.p, &sc);
                sim_scratch_free(sc);
                assert_true(t1 <= t0 + 1e-9);
            }
            free(px);
            free(py);
            fclose(cd.out);
            diag_free(&cd);
            done(&x);
            done(&y);
            done(&z);
            sb_free(&a);
            sb_free(&b);
            sb_free(&base);
            cases++;
        }
    }
    assert_true(cases > 60);
}

/* The model-based passes over random layer counts, partitions and recomputed ranks. */
static void test_random_model(void **state)
{
    (void)state;
    for (int it = 0; it < 16; it++) {
        int P = 2 + (int)rnd(5), V = 1 + (int)rnd(2), M = P * (1 + (int)rnd(2));
        int L = P * V * (1 + (int)rnd(3)) + (int)rnd(3);
        int rec = (int)rnd(P + 1);
        StrBuf s = {0};
        sb_printf(&s,
                  "import \"std/schedules.pipe\"\nimport \"std/tpipe.pipe\"\n"
                  "import \"std/models.pipe\"\nimport \"std/devices.pipe\"\n"
                  "pipeline m { stages %d microbatches %d chunks %d\n"
                  "  model llama2_7b { layers %d seq 1024 }  device a100_sxm_80g\n"
                  "  schedule %s\n%s"
                  "  apply partition_balance apply partition_balance apply toffload\n}\n",
                  P, M, V, L, V == 2 ? "tpipe" : "onef1b", rec ? "  apply recompute(stages=0..=" : "");
        if (rec) { /* splice the range's end and close the call */
            char tail[64];
            snprintf(tail, sizeof tail, "%d)\n", rec - 1);
            char *at = strstr(s.s, "stages=0..=") + strlen("stages=0..=");
            StrBuf t = {0};
            sb_printf(&t, "%.*s%s%s", (int)(at - s.s), s.s, tail, at);
            sb_free(&s);
            s = t;
        }
        Built x;
        build(&x, s.s);
        if (!x.p)
            fail_msg("case %d did not build:\n%s", it, s.s);
        Diag cd = {0};
        cd.out = fopen("/dev/null", "w");
        if (check_pipeline(&cd, x.p, CHECK_ALL))
            fail_msg("case %d fails check:\n%s", it, s.s);
        /* partition_balance applied once more changes nothing (idempotent) */
        char *a = printed(x.p);
        PassCall call = {.name = "partition_balance", .loc = LOC_NONE};
        assert_int_equal(run_pass(&x.d, x.p, &call), 0);
        char *b = printed(x.p);
        assert_string_equal(a, b);
        free(a);
        free(b);
        fclose(cd.out);
        diag_free(&cd);
        done(&x);
        sb_free(&s);
    }
}

/* T-Recomp on unit costs at P = 8: Appendix C's floor(P/2) + 1 blocks on every rank and
 * at most [6P + 7(M-1)] time units (f = 1 per chunk, b = 2, r = 1, one block per F). */
static void test_appendix_c(void **state)
{
    (void)state;
    const char *src = "import \"std/tpipe.pipe\"\n"
                      "pipeline u { stages 8 microbatches 32 chunks 2\n"
                      "  costs { f 1ms b 2ms act 1B ckpt 0 } schedule tpipe\n"
                      "  apply trecomp_blockwise }\n";
    Built x;
    build(&x, src);
    assert_non_null(x.p);
    SimResult *r = simulate(x.p);
    assert_false(r->stuck);
    assert_true(r->makespan_ms <= 6 * 8 + 7 * 31 + 1e-9);
    for (int s = 0; s < 8; s++)
        assert_true(r->stage[s].peak_act_bytes <= 8 / 2 + 1);
    sim_free(r);
    done(&x);
}

/* The printed form of src compiled; fails the test when it does not compile. */
static char *compiled(const char *src)
{
    Built x;
    build(&x, src);
    if (!x.p)
        fail_msg("did not build:\n%s", src);
    char *t = printed(x.p);
    done(&x);
    return t;
}

/* `chunks=all` names every chunk of the rank: the same schedule as the explicit range
 * 0..=V-1, and not the default range (trecomp_blockwise: chunk 0; toffload: chunk V-1).
 * The toffload device has a host link fast enough for the offload to hide in the
 * bubbles of every rank but the first. */
static void test_chunks_all(void **state)
{
    (void)state;
    static const char *const src[] = {
        "import \"std/schedules.pipe\"\n"
        "pipeline c { stages 2 microbatches 4 chunks 3\n"
        "  costs { f 1ms b 2ms act 1MiB ckpt 0 } schedule interleaved\n"
        "  apply trecomp_blockwise(delay=0, lead=1%s) }\n",
        "import \"std/tpipe.pipe\"\nimport \"std/models.pipe\"\n"
        "device d { peak_tflops 100 host_bw 10000GB/s }\n"
        "pipeline c { stages 4 microbatches 8 chunks 2\n"
        "  model llama2_7b { layers 16 seq 1024 } device d schedule tpipe\n"
        "  apply toffload(cpu_step=0ms%s) }\n",
    };
    static const char *const args[][3] = {{"", ", chunks=all", ", chunks=0..=2"},
                                          {"", ", chunks=all", ", chunks=0..=1"}};
    /* an op on a chunk that only the whole range reaches: chunk 1 recomputed, chunk 0's
     * gradients offloaded after the last backward */
    static const char *const shallow[] = {"R0.1", "B7 OG0\n"};
    for (size_t i = 0; i < ARRAY_LEN(src); i++) {
        char *t[3];
        for (int k = 0; k < 3; k++) {
            StrBuf s = {0};
            sb_printf(&s, src[i], args[i][k]);
            t[k] = compiled(s.s);
            sb_free(&s);
        }
        assert_string_equal(t[1], t[2]);
        assert_null(strstr(t[0], shallow[i]));
        assert_non_null(strstr(t[1], shallow[i]));
        for (int k = 0; k < 3; k++)
            free(t[k]);
    }
}

/* src compiled lists exactly `stage0` and `stage1` as its two ranks' op lists. */
static void assert_two_ranks(const char *src, const char *stage0, const char *stage1)
{
    char *t = compiled(src), *want[2];
    want[0] = xasprintf("  stage 0 { %s }\n", stage0);
    want[1] = xasprintf("  stage 1 { %s }\n", stage1);
    for (int s = 0; s < 2; s++) {
        if (!strstr(t, want[s]))
            fail_msg("want\n%sin\n%s", want[s], t);
        free(want[s]);
    }
    free(t);
}

/* T-Recomp on a hand-written schedule that swaps micro-batch 1 (lead 1): an R written by
 * hand (rank 0's R0) is kept and not doubled; R1 goes after SI1, which it waits for,
 * even where the lead would put it earlier (rank 0); a swap of another micro-batch is
 * not counted in the lead (rank 1: R0 passes over SI1 to land one backward ahead). */
static void test_trecomp_explicit(void **state)
{
    (void)state;
    assert_two_ranks("pipeline c { stages 2 microbatches 2 chunks 2\n"
                     "  costs { f 1ms b 2ms r 1ms act 1MiB ckpt 0 }\n"
                     "  stage 0 { F0 F1 SO1 F0.1 F1.1 B0.1 R0 B1.1 B0 SI1 B1 }\n"
                     "  stage 1 { F0 F1 SO1 F0.1 B0.1 F1.1 B1.1 SI1 B0 B1 }\n"
                     "  apply trecomp_blockwise(delay=0, lead=1) }\n",
                     "F0 F1 SO1 F0.1 F1.1 B0.1 R0 B1.1 B0 SI1 R1 B1",
                     "F0 F1 SO1 F0.1 B0.1 F1.1 R0 B1.1 SI1 R1 B0 B1");
}

/* T-Recomp on chunk 0, then on chunk 1 (no delay: a range that does not start at chunk
 * 0 gets none by default): the second call adds the R ops of chunk 1 on ranks that
 * already recompute, each one compute op ahead of its B or right after its own F, and
 * keeps the first call's. */
static void test_trecomp_two_calls(void **state)
{
    (void)state;
    assert_two_ranks("import \"std/schedules.pipe\"\n"
                     "pipeline c { stages 2 microbatches 2 chunks 2\n"
                     "  costs { f 1ms b 2ms act 1MiB ckpt 0 } schedule interleaved\n"
                     "  apply trecomp_blockwise(delay=0, lead=1)\n"
                     "  apply trecomp_blockwise(chunks=1, lead=1) }\n",
                     "F0 F1 F0.1 R0.1 F1.1 R1.1 B0.1 R0 B1.1 R1 B0 B1",
                     "F0 F1 F0.1 R0.1 B0.1 F1.1 R1.1 R0 B1.1 R1 B0 B1");
}

/* T-Offload twice, chunk 0 then chunk 1, on ZB-V (V-shape, split backwards): each OG
 * follows the last B or W of its chunk (here a W), the second call leaves the first's
 * LW and OG alone, a rank whose warm-up bubble cannot hide the reload keeps its model
 * states (rank 0 for chunk 0: it has no warm-up bubble), and since the two calls' transfers
 * share each rank's host link, the second lengthens the makespan and says so. */
static void test_toffload_twice(void **state)
{
    (void)state;
    const char *src = "import \"std/schedules.pipe\"\nimport \"std/models.pipe\"\n"
                      "device d { peak_tflops 100 host_bw 10000GB/s }\n"
                      "pipeline c { stages 4 microbatches 8 chunks 2 vshape\n"
                      "  model llama2_7b { layers 16 seq 1024 } device d schedule zbv\n"
                      "  apply toffload(chunks=0) apply toffload(chunks=1) }\n";
    Built x;
    build(&x, src);
    if (!x.p)
        fail_msg("did not build: %s", x.text);
    const Pipeline *p = x.p;
    assert_non_null(strstr(x.text, "warning[pass]: toffload: stage 0 keeps its model states"));
    assert_non_null(strstr(x.text, "warning[pass]: toffload: the model-state transfers lengthen "
                                   "the makespan"));
    assert_non_null(strstr(x.text, "(they share the host link with swaps and earlier "
                                   "model-state transfers)"));
    for (int32_t s = 0; s < p->P; s++) {
        const StageOps *st = &p->stages[s];
        int32_t lw[2] = {-1, -1}, og[2] = {-1, -1}, lastbw[2] = {-1, -1};
        for (uint32_t i = 0; i < st->n; i++) {
            const Op *o = &st->ops[i];
            if (o->kind == OP_LW)
                lw[o->chunk] = (int32_t)i;
            else if (o->kind == OP_OG)
                og[o->chunk] = (int32_t)i;
            else if (o->kind == OP_B || o->kind == OP_W)
                lastbw[o->chunk] = (int32_t)i;
        }
        for (int c = 0; c < 2; c++) {
            if (s == 0 && c == 0) { /* kept */
                assert_true(lw[c] < 0 && og[c] < 0);
                continue;
            }
            assert_true(lw[c] >= 0 && lw[c] < 2); /* at the head of the list */
            assert_int_equal(og[c], lastbw[c] + 1);
            assert_int_equal(st->ops[lastbw[c]].kind, OP_W);
        }
    }
    done(&x);
}

/* partition_balance without a memory budget (a device with no `memory`): layers move
 * from the longer stage while that shortens it, [20, 12] -> [16, 16] for Llama-2 7B
 * (the head costs less than a layer, so a 17th layer on stage 0 would be longer than
 * stage 1's 16 and the head). */
static void test_balance_without_budget(void **state)
{
    (void)state;
    Built x;
    build(&x, "import \"std/schedules.pipe\"\nimport \"std/models.pipe\"\n"
              "device d { peak_tflops 100 }\n"
              "pipeline pb { stages 2 microbatches 4 model llama2_7b device d\n"
              "  partition [20, 12] schedule onef1b apply partition_balance }\n");
    if (!x.p)
        fail_msg("did not build: %s", x.text);
    assert_false(x.p->has_memory);
    assert_int_equal(x.p->npartition, 2);
    assert_true(x.p->partition[0] == 16 && x.p->partition[1] == 16);
    done(&x);
}

/* Ranges no source can write (starting below 0, built in the IR) are refused with the
 * pass's own message, the schedule left as it was. */
static void test_ranges_below_zero(void **state)
{
    (void)state;
    static const struct {
        const char *pass, *key, *msg;
    } cases[] = {
        {"trecomp_blockwise", "chunks", "chunks -1..1 is not a non-empty range of the 2 chunks"},
        {"toffload", "chunks", "chunks -1..1 is not a non-empty range of the 2 chunks"},
        {"lynx_overlap", "stages", "bad stage range -1..1: the pipeline has 2 stages"},
    };
    Built x;
    build(&x, "import \"std/schedules.pipe\"\n"
              "pipeline c { stages 2 microbatches 4 chunks 2\n"
              "  costs { f 1ms b 2ms act 1MiB ckpt 0 } schedule interleaved }\n");
    assert_non_null(x.p);
    char *before = printed(x.p);
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        Field arg = {0};
        arg.key = (char *)cases[i].key;
        arg.val.kind = VAL_RANGE;
        arg.val.lo = -1;
        arg.val.hi = 1;
        PassCall call = {(char *)cases[i].pass, &arg, 1, LOC_NONE};
        assert_int_equal(run_pass(&x.d, x.p, &call), 1);
        fflush(x.d.out);
        if (!strstr(x.text, cases[i].msg))
            fail_msg("%s: want \"%s\" in\n%s", cases[i].pass, cases[i].msg, x.text);
        char *after = printed(x.p);
        assert_string_equal(before, after);
        free(after);
    }
    free(before);
    done(&x);
}

int main(void)
{
    setenv("PIPEC_STDLIB", "stdlib", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_appendix_c),
        cmocka_unit_test(test_chunks_all),
        cmocka_unit_test(test_trecomp_explicit),
        cmocka_unit_test(test_trecomp_two_calls),
        cmocka_unit_test(test_toffload_twice),
        cmocka_unit_test(test_balance_without_budget),
        cmocka_unit_test(test_ranges_below_zero),
        cmocka_unit_test(test_random_explicit),
        cmocka_unit_test(test_random_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
