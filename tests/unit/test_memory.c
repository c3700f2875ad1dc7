/* test_memory.c - the static memory walk (docs/spec.md "Memory") on IRs built in C.
 * Every expected number is worked out by hand in the comment above its test, in GiB
 * (G) unless said otherwise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ir.h"
#include "memory.h"
#include "testutil.h"

#define G (1024.0 * 1024.0 * 1024.0)

/* 1F1B: stage s keeps min(P - s, M) forwards live at the end of its warm-up, reached
 * when F(min(P - s, M) - 1) allocates, at list position min(P - s, M) - 1. */
static void test_onef1b_closed_form(void **state)
{
    (void)state;
    for (int P = 1; P <= 8; P++)
        for (int M = 1; M <= 12; M++) {
            Pipeline *p = pipeline_new();
            pipeline_set_shape(p, P, M, 1);
            set_cost(&p->costs, COST_ACT, 3 * G);
            set_cost(&p->costs, COST_WEIGHTS, 5 * G);
            gen_1f1b(p);
            MemRank r[8];
            mem_walk(p, r);
            for (int s = 0; s < P; s++) {
                int live = P - s < M ? P - s : M;
                assert_true(r[s].weights == 5 * G);
                assert_true(r[s].peak == 5 * G + live * 3 * G);
                assert_int_equal(r[s].peak_op, live - 1);
                assert_int_equal(r[s].live_at_peak, live);
            }
            pipeline_free(p);
        }
}

/* Split backward, act 8, wact 3, weights 1:
 *   F0 +8 -> 9 | B0 frees 8 - 3 -> 4 | F1 +8 -> 12 | B1 -> 7 | F2 +8 -> 15 (peak, 3 live)
 *   W0 -> 12 | W1 -> 9 | B2 -> 4 | W2 -> 1 */
static void test_wact(void **state)
{
    (void)state;
    Pipeline *p = one(3, 1, "F0 B0 F1 B1 F2 W0 W1 B2 W2");
    set_cost(&p->costs, COST_ACT, 8 * G);
    set_cost(&p->costs, COST_WACT, 3 * G);
    set_cost(&p->costs, COST_WEIGHTS, 1 * G);
    MemRank r;
    mem_walk(p, &r);
    assert_true(r.peak == 15 * G);
    assert_int_equal(r.peak_op, 4);
    assert_int_equal(r.live_at_peak, 3);
    double held[4];
    /* just after F2 started: mb 0 and 1 hold wact 3 each, mb 2 holds 8 */
    assert_int_equal(mem_live_at(p, 0, 4, held, 4), 3);
    assert_true(held[0] == 3 * G && held[1] == 3 * G && held[2] == 8 * G);
    /* after W0 ended (upto = W1, which frees nothing at its start): mb 0 is gone */
    assert_int_equal(mem_live_at(p, 0, 6, held, 4), 2);
    pipeline_free(p);
}

/* Without W, wact is irrelevant: B frees everything. act 8: F0 8 | B0 0 | F1 8. */
static void test_no_w_frees_all(void **state)
{
    (void)state;
    Pipeline *p = one(2, 1, "F0 B0 F1 B1");
    set_cost(&p->costs, COST_ACT, 8 * G);
    set_cost(&p->costs, COST_WACT, 3 * G);
    MemRank r;
    mem_walk(p, &r);
    assert_true(r.peak == 8 * G);
    assert_int_equal(r.peak_op, 0); /* F1 reaches 8 again, not more: the first peak stays */
    assert_int_equal(r.live_at_peak, 1);
    pipeline_free(p);
}

/* Recomputation, act 8, ckpt 1 (both micro-batches have an R):
 *   F0 +1 -> 1 | F1 +1 -> 2 | R0 +7 -> 9 (peak, 2 live) | B0 -8 -> 1 | R1 +7 -> 8 | B1 -> 0 */
static void test_recompute(void **state)
{
    (void)state;
    Pipeline *p = one(2, 1, "F0 F1 R0 B0 R1 B1");
    set_cost(&p->costs, COST_ACT, 8 * G);
    set_cost(&p->costs, COST_CKPT, 1 * G);
    MemRank r;
    mem_walk(p, &r);
    assert_true(r.peak == 9 * G);
    assert_int_equal(r.peak_op, 2);
    assert_int_equal(r.live_at_peak, 2);
    assert_true(r.weights == 0);
    pipeline_free(p);
}

/* Swapping, act 8, swap_fraction 0.25:
 *   F0 +8 -> 8 | SO0 moves 2 -> 6 | F1 +8 -> 14 | SI0 +2 -> 16 (peak) | B0 -8 -> 8 | B1 -> 0 */
static void test_swap(void **state)
{
    (void)state;
    Pipeline *p = one(2, 1, "F0 SO0 F1 SI0 B0 B1");
    set_cost(&p->costs, COST_ACT, 8 * G);
    set_cost(&p->costs, COST_SWAP_FRACTION, 0.25);
    MemRank r;
    mem_walk(p, &r);
    assert_true(r.peak == 16 * G);
    assert_int_equal(r.peak_op, 3);
    double held[4];
    assert_int_equal(mem_live_at(p, 0, 2, held, 4), 2); /* at F1: 6 and 8 */
    assert_true(held[0] == 6 * G && held[1] == 8 * G);
    /* the same with the SI after B1's allocation point: the peak is F1's 14 */
    Pipeline *q = one(2, 1, "F0 SO0 F1 B1 SI0 B0");
    set_cost(&q->costs, COST_ACT, 8 * G);
    set_cost(&q->costs, COST_SWAP_FRACTION, 0.25);
    mem_walk(q, &r);
    assert_true(r.peak == 14 * G);
    assert_int_equal(r.peak_op, 2);
    pipeline_free(q);
    pipeline_free(p);
}

/* Cost lookup per virtual stage and per rank: P = 2, V = 2, interleaved. Rank 0 holds
 * vstages 0 and 2, rank 1 holds 1 and 3. act 4, vstage 2 act 1, stage 1 weights 10.
 *   rank 0: F0 (v0) 4 + F0.1 (v2) 1 = 5; rank 1: 10 + 4 + 4 = 18. */
static void test_cost_overrides(void **state)
{
    (void)state;
    Pipeline *p = mk(2, 1, 2);
    ops(p, 0, "F0 F0.1 B0.1 B0");
    ops(p, 1, "F0 F0.1 B0.1 B0");
    set_cost(&p->costs, COST_ACT, 4 * G);
    set_cost(&p->vstage_costs[2], COST_ACT, 1 * G);
    set_cost(&p->stage_costs[1], COST_WEIGHTS, 10 * G);
    MemRank r[2];
    mem_walk(p, r);
    assert_true(r[0].peak == 5 * G);
    assert_true(r[0].weights == 0);
    assert_true(r[1].peak == 18 * G);
    assert_true(r[1].weights == 10 * G);
    assert_int_equal(r[1].peak_op, 1);
    assert_int_equal(r[1].live_at_peak, 2);
    pipeline_free(p);
}

/* No ops: the peak is the weights, at no op. Broken lists walk what is listed without
 * crashing: B0 before F0 frees nothing, each F0 adds 8 (16 at the duplicate), and ops
 * out of range (W3 with M = 1, chunk 4 with V = 1) are skipped. */
static void test_edges(void **state)
{
    (void)state;
    Pipeline *p = mk(1, 1, 1);
    set_cost(&p->costs, COST_WEIGHTS, 7);
    MemRank r;
    mem_walk(p, &r);
    assert_true(r.peak == 7);
    assert_int_equal(r.peak_op, UINT32_MAX);
    assert_int_equal(r.live_at_peak, 0);
    pipeline_free(p);
    p = one(1, 1, "B0 F0 F0 W3 R0.4");
    set_cost(&p->costs, COST_ACT, 8);
    mem_walk(p, &r);
    assert_true(r.peak == 16);
    assert_int_equal(r.peak_op, 2);
    pipeline_free(p);
}

/* mem_live_at (memory.h): the (v,m) live just after op `upto` started. Ranks F0 F1 LW0
 * OG0 F5 (F5 out of range with M = 2), act 8, grads + wload 5: F0 and F1 hold 8 each
 * from their starts on; LW's model states, OG and the out-of-range op are no (v,m).
 * Asked at F0: 1 live; at LW, OG, F5 or past the end: 2. held gets at most cap values;
 * a rank that does not exist has none. */
static void test_live_at(void **state)
{
    (void)state;
    Pipeline *p = one(2, 1, "F0 F1");
    push(p, 0, OP_LW, 0, 0);
    push(p, 0, OP_OG, 0, 0);
    push(p, 0, OP_F, 5, 0);
    set_cost(&p->costs, COST_ACT, 8);
    set_cost(&p->costs, COST_GRADS, 2);
    set_cost(&p->costs, COST_WLOAD, 3);
    double held[4] = {0, 0, 0, 0};
    assert_int_equal(mem_live_at(p, 0, 0, held, 4), 1);
    assert_true(held[0] == 8);
    for (uint32_t upto = 2; upto <= 5; upto++) {
        held[0] = held[1] = 0;
        assert_int_equal(mem_live_at(p, 0, upto, held, 4), 2);
        assert_true(held[0] == 8 && held[1] == 8);
    }
    held[1] = -1;
    assert_int_equal(mem_live_at(p, 0, 1, held, 1), 2);
    assert_true(held[0] == 8 && held[1] == -1);
    assert_int_equal(mem_live_at(p, -1, 0, held, 4), 0);
    assert_int_equal(mem_live_at(p, 1, 0, held, 4), 0);
    /* the walk counts LW's model states in the peak, not as a (v,m) */
    MemRank r;
    mem_walk(p, &r);
    assert_true(r.peak == 21);
    assert_true(r.states == 5);
    assert_int_equal(r.live_at_peak, 2);
    pipeline_free(p);
    /* no chunks (V = 0): every op is out of range, the peak is the weights */
    p = mk(1, 1, 0);
    push(p, 0, OP_F, 0, 0);
    set_cost(&p->costs, COST_WEIGHTS, 7);
    set_cost(&p->costs, COST_ACT, 8);
    mem_walk(p, &r);
    assert_true(r.peak == 7);
    assert_int_equal(r.peak_op, UINT32_MAX);
    pipeline_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_onef1b_closed_form),
        cmocka_unit_test(test_wact),
        cmocka_unit_test(test_no_w_frees_all),
        cmocka_unit_test(test_recompute),
        cmocka_unit_test(test_swap),
        cmocka_unit_test(test_cost_overrides),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_live_at),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
