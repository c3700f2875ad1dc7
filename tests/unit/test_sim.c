/* test_sim.c - the simulator against closed forms from the literature and against a
 * naive reference, on IR built here (the schedules are generated in this file, not
 * taken from the stdlib).
 *
 * Closed forms (f = forward time, b = 2f backward, no p2p, uniform costs):
 *   1F1B and GPipe: makespan (M+P-1)(f+b); bubble ratio (P-1)/(M+P-1).
 *   1F1B, stage s: forward bubble 2(P-s-1)f, backward bubble (P-s-1)f (Obscura §3.1,
 *     Observation 3: "stage s contains 2(p-s-1) forward bubbles, double the number of
 *     backward bubbles (p-s-1)", a bubble being one f). Hand check: stage s runs its
 *     P-s warm-up forwards back to back from s*f, and its first B starts when B0 has
 *     come back from the last stage: P*f + (P-s-1)*b; the gap is 2(P-s-1)f. The other
 *     s*f + 2s*f of its 3(P-1)f idle lie before its first F and after its last B.
 *   GPipe, stage s: the forwards run back to back, so the whole (P-s-1)(f+b) = 3(P-s-1)f
 *     of in-window idle is forward bubble and the backward bubble is 0 (the Observation 3
 *     split is a statement about 1F1B).
 *   Peak activations: min(P-s, M) micro-batches for 1F1B, M for GPipe.
 *   Interleaved 1F1B (Narayanan et al. 2021, §2.2): with V chunks per rank and a rank's
 *     per-micro-batch forward+backward time t = V(f_c + b_c), the idle time of every rank
 *     is (P-1)/V * t, so makespan = M t + (P-1) t / V. Compared: idle_ms of every rank.
 *   GPipe with p2p latency c: (M+P-1)(f+b) + 2(P-1)c (derived below).
 *   Obscura §6.2, Eq. 3, non-adjusted stages s > k: T_s = 3mf + 3(p-s-1)f, T_s being a
 *     stage's span from its first start to its last end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "ir.h"
#include "memory.h"
#include "sim.h"
#include "util.h"

#define GiB (1024.0 * 1024.0 * 1024.0)
#define EPS 1e-9

static void set_cost(CostBlock *c, CostField f, double v)
{
    c->v[f] = v;
    c->set |= 1u << f;
}

static Pipeline *mk(int P, int M, int V)
{
    Pipeline *p = pipeline_new();
    p->name = xstrdup("t");
    pipeline_set_shape(p, P, M, V);
    return p;
}

static void push(Pipeline *p, int s, OpKind k, int mb, int c)
{
    stage_push(&p->stages[s], (Op){.mb = (uint32_t)mb, .kind = (uint8_t)k, .chunk = (uint8_t)c,
                                   .loc = LOC_NONE});
}

static void uniform(Pipeline *p, double f, double b, double act)
{
    set_cost(&p->costs, COST_F, f);
    set_cost(&p->costs, COST_B, b);
    set_cost(&p->costs, COST_ACT, act);
}

/* 1F1B (DESIGN.md's onef1b template): P-s-1 warm-up forwards, then F/B pairs, then B. */
static void gen_1f1b(Pipeline *p)
{
    for (int s = 0; s < p->P; s++) {
        int warm = p->P - s - 1 < p->M ? p->P - s - 1 : p->M;
        for (int i = 0; i < warm; i++)
            push(p, s, OP_F, i, 0);
        for (int i = 0; i < p->M - warm; i++) {
            push(p, s, OP_F, i + warm, 0);
            push(p, s, OP_B, i, 0);
        }
        for (int i = p->M - warm; i < p->M; i++)
            push(p, s, OP_B, i, 0);
    }
}

static void gen_gpipe(Pipeline *p)
{
    for (int s = 0; s < p->P; s++) {
        for (int i = 0; i < p->M; i++)
            push(p, s, OP_F, i, 0);
        for (int i = 0; i < p->M; i++)
            push(p, s, OP_B, i, 0);
    }
}

/* Megatron-LM's interleaved 1F1B (Narayanan et al. 2021): M*V virtual micro-batches
 * per rank; k-th forward is micro-batch (k / PV) * P + k % P of chunk (k / P) % V, the
 * k-th backward the same with the chunk reversed; warm-up 2(P-s-1) + (V-1)P. M % P == 0. */
static void gen_interleaved(Pipeline *p)
{
    int P = p->P, M = p->M, V = p->V, total = M * V;
    for (int s = 0; s < P; s++) {
        int warm = 2 * (P - s - 1) + (V - 1) * P;
        if (warm > total)
            warm = total;
#define MB(k) (((k) / (P * V)) * P + (k) % P)
#define CH(k) (((k) % (P * V)) / P)
        for (int k = 0; k < warm; k++)
            push(p, s, OP_F, MB(k), CH(k));
        for (int i = 0; i < total - warm; i++) {
            push(p, s, OP_F, MB(warm + i), CH(warm + i));
            push(p, s, OP_B, MB(i), V - 1 - CH(i));
        }
        for (int i = total - warm; i < total; i++)
            push(p, s, OP_B, MB(i), V - 1 - CH(i));
#undef MB
#undef CH
    }
}

static void assert_near(double got, double want)
{
    if (fabs(got - want) > EPS * (1 + fabs(want))) {
        print_error("got %.17g, want %.17g\n", got, want);
        fail();
    }
}

/* ---- closed forms ---------------------------------------------------------------- */

static void check_1f1b(int P, int M, double f)
{
    Pipeline *p = mk(P, M, 1);
    double b = 2 * f, act = 3 * GiB;
    uniform(p, f, b, act);
    set_cost(&p->costs, COST_WEIGHTS, 5 * GiB);
    gen_1f1b(p);
    SimResult *r = simulate(p);
    assert_false(r->stuck);
    assert_near(r->makespan_ms, (M + P - 1) * (f + b));
    assert_near(r->bubble_ratio, (double)(P - 1) / (M + P - 1));
    void *scratch = NULL;
    assert_near(sim_makespan(p, &scratch), (M + P - 1) * (f + b));
    sim_scratch_free(scratch);
    for (int s = 0; s < P; s++) {
        const SimStage *S = &r->stage[s];
        assert_near(S->busy_ms, M * (f + b));
        assert_near(S->idle_ms, (P - 1) * (f + b));
        if (M >= P - s) {  /* the closed form assumes a full warm-up */
            assert_near(S->fwd_bubble_ms, 2.0 * (P - s - 1) * f);
            assert_near(S->bwd_bubble_ms, 1.0 * (P - s - 1) * f);
        }
        int live = P - s < M ? P - s : M;
        assert_near(S->peak_act_bytes, live * act);
        assert_near(S->static_mem_bytes, 5 * GiB);
        assert_near(S->peak_mem_bytes, 5 * GiB + live * act);
    }
    sim_free(r);
    pipeline_free(p);
}

static void test_1f1b_closed_form(void **state)
{
    (void)state;
    check_1f1b(4, 8, 1.0);  /* DESIGN.md's example: 33 ms, 0.2727, stage 0: 6 and 3 */
    check_1f1b(1, 5, 0.5);
    check_1f1b(2, 1, 1.5);
    check_1f1b(8, 32, 0.25);
    check_1f1b(5, 3, 1.0);  /* M < P: short warm-up on the first stages */
    check_1f1b(7, 13, 1.75);
}

static void check_gpipe(int P, int M, double f, double c)
{
    Pipeline *p = mk(P, M, 1);
    double b = 2 * f, act = 1 * GiB;
    uniform(p, f, b, act);
    set_cost(&p->costs, COST_P2P, c);
    gen_gpipe(p);
    SimResult *r = simulate(p);
    assert_false(r->stuck);
    /* F_i on stage s starts at s(f+c) + i f; the last stage's backwards follow its last
     * forward at (P-1)(f+c) + M f back to back; stage s's backwards start (P-1-s)(b+c)
     * later, so stage 0 ends at (P-1)(f+c) + M f + (P-1)(b+c) + M b. */
    assert_near(r->makespan_ms, (M + P - 1) * (f + b) + 2 * (P - 1) * c);
    if (c == 0)
        assert_near(r->bubble_ratio, (double)(P - 1) / (M + P - 1));
    for (int s = 0; s < P; s++) {
        const SimStage *S = &r->stage[s];
        if (c == 0) {
            assert_near(S->fwd_bubble_ms, 3.0 * (P - s - 1) * f);
            assert_near(S->bwd_bubble_ms, 0);
        } else {
            /* Forward bubble: from s(f+c) to the first B at (P-1)(f+c) + Mf + (P-1-s)(b+c),
             * less M f of forwards. */
            assert_near(S->fwd_bubble_ms, (P - 1 - s) * (f + c) + (P - 1 - s) * (b + c));
        }
        assert_near(S->peak_act_bytes, M * act);
    }
    sim_free(r);
    pipeline_free(p);
}

static void test_gpipe_closed_form(void **state)
{
    (void)state;
    check_gpipe(4, 8, 1.0, 0);
    check_gpipe(3, 1, 2.0, 0);
    check_gpipe(6, 10, 0.5, 0);
    check_gpipe(4, 8, 1.0, 0.25);
    check_gpipe(5, 3, 1.0, 1.0);
}

static void check_interleaved(int P, int M, int V, double fc)
{
    Pipeline *p = mk(P, M, V);
    double bc = 2 * fc;
    uniform(p, fc, bc, 1 * GiB);
    gen_interleaved(p);
    SimResult *r = simulate(p);
    assert_false(r->stuck);
    double t = V * (fc + bc);  /* one micro-batch's forward + backward on one rank */
    for (int s = 0; s < P; s++) {
        assert_near(r->stage[s].busy_ms, M * t);
        assert_near(r->stage[s].idle_ms, (P - 1) * t / V);
    }
    assert_near(r->makespan_ms, M * t + (P - 1) * t / V);
    sim_free(r);
    pipeline_free(p);
}

static void test_interleaved_closed_form(void **state)
{
    (void)state;
    check_interleaved(4, 8, 2, 0.5);
    check_interleaved(4, 8, 4, 0.25);
    check_interleaved(2, 4, 3, 1.0);
    check_interleaved(8, 16, 2, 0.125);
    check_interleaved(4, 4, 1, 1.0);  /* V = 1 is plain 1F1B */
}

/* Obscura's strawman pipeline (§4): stages 0..k are adjusted (full recomputation: an R
 * before every B, ckpt kept instead of act) with their steady-phase forwards migrated
 * into the forward bubbles; the other stages run 1F1B. Eq. 3 for s > k holds exactly
 * when the adjusted stages never hold back a forward (here: every forward migrated, so
 * F_i leaves stage k at (k+i+1)f, no later than in 1F1B). With a partial migration
 * (3(p-s-1) forwards) an adjusted stage's R+B+F cycle of 4f outlasts the 3f cycle of
 * the stages after it, which then idle (§4, Challenge 3): Eq. 3 is a lower bound, since
 * the last stage cannot finish before (p-1)f + 3mf and each B takes 2f to come back. */
static void check_obscura_eq3(int P, int M, int k, bool migrate_all)
{
    Pipeline *p = mk(P, M, 1);
    double f = 1.0;
    uniform(p, f, 2 * f, 2 * GiB);
    set_cost(&p->costs, COST_R, f);
    set_cost(&p->costs, COST_CKPT, 0.25 * GiB);
    for (int s = 0; s < P; s++) {
        if (s > k) {
            int warm = P - s - 1 < M ? P - s - 1 : M;
            for (int i = 0; i < warm; i++)
                push(p, s, OP_F, i, 0);
            for (int i = 0; i < M - warm; i++) {
                push(p, s, OP_F, i + warm, 0);
                push(p, s, OP_B, i, 0);
            }
            for (int i = M - warm; i < M; i++)
                push(p, s, OP_B, i, 0);
            continue;
        }
        int warm = migrate_all ? M : 3 * (P - s - 1);
        if (warm > M)
            warm = M;
        if (warm < 1)
            warm = 1;
        for (int i = 0; i < warm; i++)
            push(p, s, OP_F, i, 0);
        for (int i = 0; i < M; i++) {
            push(p, s, OP_R, i, 0);
            push(p, s, OP_B, i, 0);
            if (warm + i < M)
                push(p, s, OP_F, warm + i, 0);
        }
    }
    SimResult *r = simulate(p);
    assert_false(r->stuck);
    for (int s = k + 1; s < P; s++) {
        uint32_t n = p->stages[s].n;
        double span = r->end[s][n - 1] - r->start[s][0];
        if (migrate_all)
            assert_near(span, 3.0 * M * f + 3.0 * (P - s - 1) * f);
        else  /* Eq. 3 is then a lower bound: imbalance adds bubbles (§4, Challenge 3) */
            assert_true(span >= 3.0 * M * f + 3.0 * (P - s - 1) * f - EPS);
    }
    /* The adjusted stages keep ckpt per micro-batch plus one recomputed act at a time. */
    for (int s = 0; s <= k; s++)
        assert_true(r->stage[s].peak_act_bytes <= M * 0.25 * GiB + 2 * GiB + 1);
    sim_free(r);
    pipeline_free(p);
}

static void test_obscura_eq3(void **state)
{
    (void)state;
    for (int P = 2; P <= 8; P += 3)
        for (int k = 0; k < P - 1; k++) {
            check_obscura_eq3(P, 2 * P, k, true);
            check_obscura_eq3(P, 2 * P, k, false);
            check_obscura_eq3(P, P + 3, k, true);
        }
}

/* The DESIGN.md --json example, built in C: exact text of the header and stage 0. */
static void test_json_example(void **state)
{
    (void)state;
    Pipeline *p = mk(4, 8, 1);
    free(p->name);
    p->name = xstrdup("tiny_1f1b");
    uniform(p, 1, 2, 8 * GiB);
    set_cost(&p->costs, COST_W, 0);
    set_cost(&p->costs, COST_R, 1);
    set_cost(&p->costs, COST_CKPT, 0.5 * GiB);
    set_cost(&p->costs, COST_WACT, 8 * GiB);
    set_cost(&p->costs, COST_WEIGHTS, 4 * GiB);
    set_cost(&p->costs, COST_P2P, 0);
    set_cost(&p->costs, COST_HOST_BW, 25e9);
    set_cost(&p->costs, COST_SWAP_FRACTION, 1);
    p->has_memory = true;
    p->memory = 40 * GiB;
    gen_1f1b(p);
    SimResult *r = simulate(p);
    StrBuf b = {0};
    sim_write_json(&b, p, r);
    const char *want =
        "{\"pipeline\": \"tiny_1f1b\", \"stages\": 4, \"microbatches\": 8, \"chunks\": 1, "
        "\"makespan_ms\": 33.0, \"bubble_ratio\": 0.2727, "
        "\"per_stage\": [{\"stage\": 0, \"busy_ms\": 24.0, \"idle_ms\": 9.0, "
        "\"fwd_bubble_ms\": 6.0, \"bwd_bubble_ms\": 3.0, "
        "\"peak_mem_bytes\": 38654705664, \"budget_bytes\": 42949672960, "
        "\"static_mem_bytes\": 4294967296, \"peak_act_bytes\": 34359738368}, ";
    assert_int_equal(strncmp(b.s, want, strlen(want)), 0);
    assert_non_null(strstr(b.s, "{\"stage\": 3, \"busy_ms\": 24.0, \"idle_ms\": 9.0, "
                                "\"fwd_bubble_ms\": 0.0, \"bwd_bubble_ms\": 0.0, "
                                "\"peak_mem_bytes\": 12884901888"));
    assert_string_equal(b.s + b.len - 3, "]}\n");
    sb_free(&b);
    p->has_memory = false;
    sim_write_json(&b, p, r);
    assert_non_null(strstr(b.s, "\"budget_bytes\": null"));
    sb_free(&b);
    sim_free(r);
    pipeline_free(p);
}

static void test_number_format(void **state)
{
    (void)state;
    char buf[64];
    assert_string_equal(sim_fmt_num(buf, sizeof buf, 33), "33.0");
    assert_string_equal(sim_fmt_num(buf, sizeof buf, 0), "0.0");
    assert_string_equal(sim_fmt_num(buf, sizeof buf, -0.0), "0.0");
    assert_string_equal(sim_fmt_num(buf, sizeof buf, 0.2727), "0.2727");
    assert_string_equal(sim_fmt_num(buf, sizeof buf, 0.1 + 0.2), "0.30000000000000004");
    assert_string_equal(sim_fmt_num(buf, sizeof buf, 1.0 / 0.0), "null");
    assert_string_equal(sim_fmt_num(buf, sizeof buf, 10), "10.0");
    assert_string_equal(sim_fmt_num(buf, sizeof buf, 1234.5), "1234.5");
    assert_string_equal(sim_fmt_num(buf, sizeof buf, 1e-5), "1e-05");
    assert_string_equal(sim_fmt_num(buf, sizeof buf, 2e20), "2e+20");
    assert_string_equal(sim_fmt_num(buf, sizeof buf, 0.00012345), "0.00012345");
    assert_string_equal(sim_fmt_bytes(buf, sizeof buf, 8 * GiB), "8589934592");
    assert_string_equal(sim_fmt_bytes(buf, sizeof buf, 2.5), "3");
    assert_string_equal(sim_fmt_size(buf, sizeof buf, 36 * GiB), "36.0 GiB");
    assert_string_equal(sim_fmt_size(buf, sizeof buf, 512), "512 B");
}

/* ---- hand-timed small cases ------------------------------------------------------- */

/* One rank, swaps: act 1e9 B at host_bw 1e11 B/s moves in 10 ms.
 *   F0 [0,1]; SO0 [1,11]; F1 allocates, so it waits SO0: [11,12]; SI0 waits SO0
 *   [11,21]; B1 [12,14]; B0 waits SI0: [21,23]. Makespan 23.
 *   busy 6, idle 17; forward bubble: 12 - (1 + 1) = 10; backward: 23 - 12 - 4 = 7.
 *   Memory (weights 1e9): F0 +1e9; SO0 -1e9 at 11; at 11 F1 +1e9 and SI0 +1e9 -> 3e9
 *   peak; the list walk gives the same: 1, 0, 1, 2 (+ weights). */
static void test_swap_timing(void **state)
{
    (void)state;
    Pipeline *p = mk(1, 2, 1);
    uniform(p, 1, 2, 1e9);
    set_cost(&p->costs, COST_HOST_BW, 1e11);
    set_cost(&p->costs, COST_WEIGHTS, 1e9);
    push(p, 0, OP_F, 0, 0);
    push(p, 0, OP_SO, 0, 0);
    push(p, 0, OP_F, 1, 0);
    push(p, 0, OP_SI, 0, 0);
    push(p, 0, OP_B, 1, 0);
    push(p, 0, OP_B, 0, 0);
    SimResult *r = simulate(p);
    const double st[] = {0, 1, 11, 11, 12, 21}, en[] = {1, 11, 12, 21, 14, 23};
    for (int i = 0; i < 6; i++) {
        assert_near(r->start[0][i], st[i]);
        assert_near(r->end[0][i], en[i]);
    }
    assert_near(r->makespan_ms, 23);
    assert_near(r->stage[0].busy_ms, 6);
    assert_near(r->stage[0].idle_ms, 17);
    assert_near(r->stage[0].fwd_bubble_ms, 10);
    assert_near(r->stage[0].bwd_bubble_ms, 7);
    assert_near(r->stage[0].peak_mem_bytes, 3e9);
    MemRank m;
    mem_walk(p, &m);
    assert_near(m.peak, 3e9);
    sim_free(r);
    pipeline_free(p);

    /* Ties: F0 SO0 F1 B1 SI0 B0 with dep 0:B1 -> 0:SI0 (same rank, no p2p).
     *   F0 [0,1]; SO0 [1,11]; F1 [11,12] (waits SO0); B1 [12,14]; SI0 waits B1:
     *   [14,24]; B0 [24,26]. At 11 SO0's free comes before F1's allocation, so the
     *   live bytes are weights + 1e9 at most, as in the list walk. */
    p = mk(1, 2, 1);
    uniform(p, 1, 2, 1e9);
    set_cost(&p->costs, COST_HOST_BW, 1e11);
    set_cost(&p->costs, COST_WEIGHTS, 1e9);
    const OpKind k2[] = {OP_F, OP_SO, OP_F, OP_B, OP_SI, OP_B};
    const int m2[] = {0, 0, 1, 1, 0, 0};
    for (int i = 0; i < 6; i++)
        push(p, 0, k2[i], m2[i], 0);
    Dep d = {.from = {.mb = 1, .stage = 0, .kind = OP_B}, .to = {.mb = 0, .stage = 0, .kind = OP_SI},
             .loc = LOC_NONE};
    VEC_PUSH(p->deps, p->ndeps, *(size_t[]){0}, d);
    r = simulate(p);
    const double st2[] = {0, 1, 11, 12, 14, 24};
    for (int i = 0; i < 6; i++)
        assert_near(r->start[0][i], st2[i]);
    assert_near(r->makespan_ms, 26);
    assert_near(r->stage[0].peak_mem_bytes, 2e9);
    mem_walk(p, &m);
    assert_near(m.peak, 2e9);
    sim_free(r);
    pipeline_free(p);
}

/* W splits the backward: B takes b - w. Two ranks, M = 1, f 1, b 3, w 1, p2p 0.5:
 *   s0 F0 [0,1]; s1 F0 [1.5,2.5]; s1 B0 [2.5,4.5]; s1 W0 [4.5,5.5];
 *   s0 B0 waits s1 B0 + p2p: [5,7]; s0 W0 [7,8]. Makespan 8.
 *   A dep 1:W0 -> 0:B0 instead delays s0 B0 to 5.5 + 0.5 = 6: makespan 9. */
static void test_w_split_and_dep(void **state)
{
    (void)state;
    Pipeline *p = mk(2, 1, 1);
    uniform(p, 1, 3, 0);
    set_cost(&p->costs, COST_W, 1);
    set_cost(&p->costs, COST_P2P, 0.5);
    for (int s = 0; s < 2; s++) {
        push(p, s, OP_F, 0, 0);
        push(p, s, OP_B, 0, 0);
        push(p, s, OP_W, 0, 0);
    }
    SimResult *r = simulate(p);
    assert_near(r->start[1][1], 2.5);
    assert_near(r->end[1][1], 4.5);
    assert_near(r->start[0][1], 5);
    assert_near(r->makespan_ms, 8);
    void *scratch = NULL;
    assert_near(sim_makespan(p, &scratch), 8);
    sim_free(r);
    Dep d = {.from = {.mb = 0, .stage = 1, .kind = OP_W, .chunk = 0},
             .to = {.mb = 0, .stage = 0, .kind = OP_B, .chunk = 0}, .loc = LOC_NONE};
    VEC_PUSH(p->deps, p->ndeps, *(size_t[]){0}, d);
    r = simulate(p);
    assert_near(r->start[0][1], 6);
    assert_near(r->makespan_ms, 9);
    assert_near(sim_makespan(p, &scratch), 9);
    sim_free(r);
    sim_scratch_free(scratch);
    pipeline_free(p);
}

/* A cycle: rank 0 lists B0 before F0 (B waits for its own rank's later F). */
static void test_stuck(void **state)
{
    (void)state;
    Pipeline *p = mk(2, 1, 1);
    uniform(p, 1, 2, 0);
    push(p, 0, OP_B, 0, 0);
    push(p, 0, OP_F, 0, 0);
    push(p, 1, OP_F, 0, 0);
    push(p, 1, OP_B, 0, 0);
    SimResult *r = simulate(p);
    assert_true(r->stuck);
    void *scratch = NULL;
    assert_true(isinf(sim_makespan(p, &scratch)));
    sim_scratch_free(scratch);
    StrBuf b = {0};
    sim_write_summary(&b, p, r);
    sim_write_gantt(&b, p, r, 80);
    sim_write_trace(&b, p, r);
    sim_write_svg(&b, p, r);
    sb_free(&b);
    sim_free(r);
    pipeline_free(p);
    /* An incomplete schedule (M says 4, one micro-batch listed) and an empty one. */
    p = mk(2, 4, 1);
    push(p, 0, OP_F, 0, 0);
    r = simulate(p);
    assert_true(r->stuck);
    sim_free(r);
    pipeline_free(p);
    p = mk(0, 0, 0);
    r = simulate(p);
    assert_false(r->stuck);
    assert_near(r->makespan_ms, 0);
    sim_free(r);
    pipeline_free(p);
}

/* ---- property tests over random legal schedules ---------------------------------- */

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}
static double rndf(double lo, double hi) { return lo + (hi - lo) * (rnd(1u << 20) / (double)(1u << 20)); }

typedef struct Gen {
    Pipeline *p;
    int PV;
    uint8_t *has;    /* [kind][v][m] planned */
    uint8_t *done;   /* [kind][v][m] emitted */
    int *order_rank; /* global order of emission: the rank and position of each op */
    int *order_pos;
    int nordered;
} Gen;

#define AT(g, k, v, m) ((size_t)(k) * (g)->PV * (g)->p->M + (size_t)(v) * (g)->p->M + (m))

static bool ready(const Gen *g, int k, int v, int m)
{
#define DONE(kk, vv) g->done[AT(g, kk, vv, m)]
#define HAS(kk, vv) g->has[AT(g, kk, vv, m)]
    switch (k) {
    case OP_F: return v == 0 || DONE(OP_F, v - 1);
    case OP_B:
        return (v == g->PV - 1 || DONE(OP_B, v + 1)) && DONE(OP_F, v) &&
               (!HAS(OP_R, v) || DONE(OP_R, v)) && (!HAS(OP_SI, v) || DONE(OP_SI, v));
    case OP_W: return DONE(OP_B, v);
    case OP_R: return DONE(OP_F, v) && (!HAS(OP_SI, v) || DONE(OP_SI, v));
    case OP_SO: return DONE(OP_F, v);
    case OP_SI: return DONE(OP_SO, v);
    }
    return false;
#undef DONE
#undef HAS
}

/* A random legal schedule: random shape and costs, random W/R/SO-SI choices, ops emitted
 * in a random topological order of DESIGN.md's dependencies (so no deadlock), plus a few
 * `dep` edges that follow that order. */
static Pipeline *gen_random(bool swaps, bool deps)
{
    int P = 1 + (int)rnd(5), V = 1 + (int)rnd(3), M = 1 + (int)rnd(7);
    Pipeline *p = mk(P, M, V);
    p->placement = V > 1 && rnd(2) ? PLACE_VSHAPE : PLACE_INTERLEAVED;
    Gen g = {.p = p, .PV = P * V};
    size_t n = (size_t)OP_NKINDS * g.PV * M;
    g.has = xcalloc(n, 1);
    g.done = xcalloc(n, 1);
    for (int v = 0; v < g.PV; v++) {
        CostBlock *c = &p->vstage_costs[v];
        double f = rndf(0.2, 3);
        set_cost(c, COST_F, f);
        set_cost(c, COST_B, rndf(f, 3 * f));
        set_cost(c, COST_W, rndf(0, f));
        set_cost(c, COST_R, rndf(0.1, f));
        double act = (double)(1 + rnd(1000)) * 1e6;
        set_cost(c, COST_ACT, act);
        set_cost(c, COST_CKPT, act * rndf(0, 0.5));
        set_cost(c, COST_WACT, act * rndf(0, 1));
    }
    for (int s = 0; s < P; s++) {
        CostBlock *c = &p->stage_costs[s];
        set_cost(c, COST_P2P, rnd(2) ? 0 : rndf(0, 0.5));
        set_cost(c, COST_WEIGHTS, (double)rnd(1000) * 1e6);
        set_cost(c, COST_HOST_BW, rndf(1e9, 1e10));
        set_cost(c, COST_SWAP_FRACTION, rndf(0.2, 1));
    }
    int total = 0;
    for (int v = 0; v < g.PV; v++)
        for (int m = 0; m < M; m++) {
            g.has[AT(&g, OP_F, v, m)] = g.has[AT(&g, OP_B, v, m)] = 1;
            g.has[AT(&g, OP_W, v, m)] = rnd(3) == 0;
            g.has[AT(&g, OP_R, v, m)] = rnd(3) == 0;
            g.has[AT(&g, OP_SO, v, m)] = g.has[AT(&g, OP_SI, v, m)] = swaps && rnd(3) == 0;
            for (int k = 0; k < OP_NKINDS; k++)
                total += g.has[AT(&g, k, v, m)];
        }
    g.order_rank = xmalloc((size_t)total * sizeof(int));
    g.order_pos = xmalloc((size_t)total * sizeof(int));
    int *cand = xmalloc(3 * (size_t)total * sizeof(int));
    while (g.nordered < total) {
        int nc = 0;
        for (int k = 0; k < OP_NKINDS; k++)
            for (int v = 0; v < g.PV; v++)
                for (int m = 0; m < M; m++)
                    if (g.has[AT(&g, k, v, m)] && !g.done[AT(&g, k, v, m)] && ready(&g, k, v, m)) {
                        cand[3 * nc] = k;
                        cand[3 * nc + 1] = v;
                        cand[3 * nc + 2] = m;
                        nc++;
                    }
        assert_true(nc > 0);
        /* Prefer low micro-batches a little, as real schedules do. */
        int pick = (int)rnd((uint32_t)nc);
        int alt = (int)rnd((uint32_t)nc);
        if (cand[3 * alt + 2] < cand[3 * pick + 2])
            pick = alt;
        int k = cand[3 * pick], v = cand[3 * pick + 1], m = cand[3 * pick + 2], s, c;
        ir_owner(p, v, &s, &c);
        g.order_rank[g.nordered] = s;
        g.order_pos[g.nordered] = (int)p->stages[s].n;
        g.nordered++;
        push(p, s, (OpKind)k, m, c);
        g.done[AT(&g, k, v, m)] = 1;
    }
    if (deps) {
        size_t cap = 0;
        for (int i = 0; i < 3; i++) {
            int a = (int)rnd((uint32_t)total), b = (int)rnd((uint32_t)total);
            if (a == b)
                continue;
            if (a > b) {
                int t = a;
                a = b;
                b = t;
            }
            const Op *oa = &p->stages[g.order_rank[a]].ops[g.order_pos[a]];
            const Op *ob = &p->stages[g.order_rank[b]].ops[g.order_pos[b]];
            Dep d = {.from = {oa->mb, (uint16_t)g.order_rank[a], oa->kind, oa->chunk},
                     .to = {ob->mb, (uint16_t)g.order_rank[b], ob->kind, ob->chunk},
                     .loc = LOC_NONE};
            VEC_PUSH(p->deps, p->ndeps, cap, d);
        }
        p->depcap = (uint32_t)cap;
    }
    free(cand);
    free(g.has);
    free(g.done);
    free(g.order_rank);
    free(g.order_pos);
    return p;
}

/* The naive reference: durations and memory straight from DESIGN.md with linear
 * searches, and start times by relaxing every constraint until nothing changes
 * (O(n^2) per round). */
typedef struct RefOp {
    int rank, pos, kind, v, m;
    double dur, start, end;
} RefOp;

static int ref_find(const RefOp *o, int n, int kind, int v, int m)
{
    for (int i = 0; i < n; i++)
        if (o[i].kind == kind && o[i].v == v && o[i].m == m)
            return i;
    return -1;
}

static RefOp *reference(const Pipeline *p, int *np)
{
    int n = (int)pipeline_nops(p), k = 0;
    RefOp *o = xcalloc((size_t)n, sizeof *o);
    for (int s = 0; s < p->P; s++)
        for (uint32_t i = 0; i < p->stages[s].n; i++, k++) {
            const Op *op = &p->stages[s].ops[i];
            o[k] = (RefOp){s, (int)i, op->kind, ir_vstage(p, s, op->chunk), (int)op->mb, 0, 0, 0};
        }
    /* Durations; SO/SI from the bytes held in list order. */
    for (int i = 0; i < n; i++) {
        RefOp *x = &o[i];
        int c = p->stages[x->rank].ops[x->pos].chunk;
        switch (x->kind) {
        case OP_F: x->dur = ir_cost(p, x->rank, c, COST_F); break;
        case OP_B:
            x->dur = ir_cost(p, x->rank, c, COST_B) -
                     (ref_find(o, n, OP_W, x->v, x->m) >= 0 ? ir_cost(p, x->rank, c, COST_W) : 0);
            if (x->dur < 0)
                x->dur = 0;
            break;
        case OP_W: x->dur = ir_cost(p, x->rank, c, COST_W); break;
        case OP_R: x->dur = ir_cost(p, x->rank, c, COST_R); break;
        default: {
            /* held just before the SO: F's bytes, plus R's if listed before. */
            int so = ref_find(o, n, OP_SO, x->v, x->m);
            bool hasR = ref_find(o, n, OP_R, x->v, x->m) >= 0;
            int rp = hasR ? o[ref_find(o, n, OP_R, x->v, x->m)].pos : INT32_MAX;
            double held = hasR ? ir_cost(p, x->rank, c, COST_CKPT) : ir_cost(p, x->rank, c, COST_ACT);
            if (rp < o[so].pos)
                held += ir_cost(p, x->rank, c, COST_ACT) - ir_cost(p, x->rank, c, COST_CKPT);
            double bytes = held * ir_cost(p, x->rank, 0, COST_SWAP_FRACTION);
            x->dur = bytes / ir_cost(p, x->rank, 0, COST_HOST_BW) * 1000;
        }
        }
    }
    int PV = p->P * p->V;
    for (int round = 0;; round++) {
        assert_true(round <= n + 1);
        bool changed = false;
        for (int i = 0; i < n; i++) {
            RefOp *x = &o[i];
            double t = 0;
            int pre[8], np2 = 0;
            switch (x->kind) {
            case OP_F: if (x->v > 0) pre[np2++] = ref_find(o, n, OP_F, x->v - 1, x->m); break;
            case OP_B:
                if (x->v < PV - 1) pre[np2++] = ref_find(o, n, OP_B, x->v + 1, x->m);
                pre[np2++] = ref_find(o, n, OP_F, x->v, x->m);
                pre[np2++] = ref_find(o, n, OP_R, x->v, x->m);
                pre[np2++] = ref_find(o, n, OP_SI, x->v, x->m);
                break;
            case OP_W: pre[np2++] = ref_find(o, n, OP_B, x->v, x->m); break;
            case OP_R:
                pre[np2++] = ref_find(o, n, OP_F, x->v, x->m);
                pre[np2++] = ref_find(o, n, OP_SI, x->v, x->m);
                break;
            case OP_SO: pre[np2++] = ref_find(o, n, OP_F, x->v, x->m); break;
            case OP_SI: pre[np2++] = ref_find(o, n, OP_SO, x->v, x->m); break;
            }
            for (int j = 0; j < np2; j++)
                if (pre[j] >= 0) {
                    double e = o[pre[j]].end;
                    if (o[pre[j]].rank != x->rank)
                        e += ir_cost(p, x->rank, 0, COST_P2P);
                    t = fmax(t, e);
                }
            for (uint32_t d = 0; d < p->ndeps; d++) {
                const Dep *e = &p->deps[d];
                if (e->to.stage != x->rank || e->to.kind != x->kind || e->to.mb != (uint32_t)x->m ||
                    ir_vstage(p, e->to.stage, e->to.chunk) != x->v)
                    continue;
                int a = ref_find(o, n, e->from.kind, ir_vstage(p, e->from.stage, e->from.chunk),
                                 (int)e->from.mb);
                t = fmax(t, o[a].end + (e->from.stage != e->to.stage
                                            ? ir_cost(p, x->rank, 0, COST_P2P) : 0));
            }
            /* Same stream, earlier in the list; SOs listed earlier for F, R, SI. */
            for (int j = 0; j < n; j++) {
                if (o[j].rank != x->rank || o[j].pos >= x->pos)
                    continue;
                if (op_stream(o[j].kind) == op_stream(x->kind))
                    t = fmax(t, o[j].end);
                if (o[j].kind == OP_SO && (x->kind == OP_F || x->kind == OP_R || x->kind == OP_SI))
                    t = fmax(t, o[j].end);
            }
            if (t != x->start || t + x->dur != x->end) {
                x->start = t;
                x->end = t + x->dur;
                changed = true;
            }
        }
        if (!changed)
            break;
    }
    *np = n;
    return o;
}

/* The longest dependency chain (no stream order): a lower bound on the makespan. */
static double critical_path(const Pipeline *p, const RefOp *o, int n)
{
    double *cp = xcalloc((size_t)n, sizeof *cp), best = 0;
    int PV = p->P * p->V;
    /* Relax in rounds; the DAG is small. */
    for (int round = 0; round <= n; round++) {
        bool changed = false;
        for (int i = 0; i < n; i++) {
            const RefOp *x = &o[i];
            double t = 0;
            int pre[4], k = 0;
            if (x->kind == OP_F && x->v > 0) pre[k++] = ref_find(o, n, OP_F, x->v - 1, x->m);
            if (x->kind == OP_B && x->v < PV - 1) pre[k++] = ref_find(o, n, OP_B, x->v + 1, x->m);
            if (x->kind == OP_B || x->kind == OP_R || x->kind == OP_SO) pre[k++] = ref_find(o, n, OP_F, x->v, x->m);
            if (x->kind == OP_W) pre[k++] = ref_find(o, n, OP_B, x->v, x->m);
            for (int j = 0; j < k; j++)
                if (pre[j] >= 0)
                    t = fmax(t, cp[pre[j]] + (o[pre[j]].rank != x->rank ? ir_cost(p, x->rank, 0, COST_P2P) : 0));
            if (t + x->dur > cp[i]) {
                cp[i] = t + x->dur;
                changed = true;
            }
        }
        if (!changed)
            break;
    }
    for (int i = 0; i < n; i++)
        best = fmax(best, cp[i]);
    free(cp);
    return best;
}

static void test_random_properties(void **state)
{
    (void)state;
    void *scratch = NULL;
    for (int iter = 0; iter < 300; iter++) {
        bool swaps = iter % 3 == 1, deps = iter % 2 == 1;
        Pipeline *p = gen_random(swaps, deps);
        SimResult *r = simulate(p);
        assert_false(r->stuck);
        int n;
        RefOp *o = reference(p, &n);
        double ref_makespan = 0;
        for (int i = 0; i < n; i++) {
            assert_near(r->start[o[i].rank][o[i].pos], o[i].start);
            assert_near(r->end[o[i].rank][o[i].pos], o[i].end);
            ref_makespan = fmax(ref_makespan, o[i].end);
        }
        assert_near(r->makespan_ms, ref_makespan);
        assert_near(sim_makespan(p, &scratch), r->makespan_ms);
        assert_true(r->makespan_ms >= critical_path(p, o, n) - EPS);
        double idle = 0;
        for (int s = 0; s < p->P; s++) {
            const SimStage *S = &r->stage[s];
            double busy = 0;
            for (int i = 0; i < n; i++)
                if (o[i].rank == s && op_stream(o[i].kind) == STREAM_COMPUTE)
                    busy += o[i].dur;
            assert_near(S->busy_ms, busy);
            assert_true(r->makespan_ms >= busy - EPS);
            assert_true(S->idle_ms >= 0);
            assert_true(S->fwd_bubble_ms >= 0 && S->bwd_bubble_ms >= 0);
            assert_true(S->fwd_bubble_ms + S->bwd_bubble_ms <= S->idle_ms + 1e-6);
            idle += S->idle_ms;
        }
        assert_near(r->bubble_ratio, r->makespan_ms > 0 ? idle / (p->P * r->makespan_ms) : 0);
        /* Memory: the simulated peak equals the static walk when every op is on the
         * compute stream (one stream: time order is list order). With swaps, SI can run
         * ahead of a B listed before it, so only the weights bound holds. */
        MemRank *m = xcalloc((size_t)p->P, sizeof *m);
        mem_walk(p, m);
        for (int s = 0; s < p->P; s++) {
            if (!swaps)
                assert_near(r->stage[s].peak_mem_bytes, m[s].peak);
            assert_true(r->stage[s].peak_mem_bytes >= r->stage[s].static_mem_bytes);
            assert_near(r->stage[s].peak_act_bytes,
                        r->stage[s].peak_mem_bytes - r->stage[s].static_mem_bytes);
        }
        free(m);
        free(o);
        sim_free(r);
        pipeline_free(p);
    }
    sim_scratch_free(scratch);
}

/* ---- writers --------------------------------------------------------------------- */

static void test_writers(void **state)
{
    (void)state;
    Pipeline *p = mk(3, 3, 2);
    uniform(p, 1, 2, GiB);
    set_cost(&p->costs, COST_HOST_BW, 4 * GiB);
    gen_interleaved(p);
    push(p, 0, OP_SO, 0, 1);
    SimResult *r = simulate(p);
    StrBuf b = {0};
    sim_write_gantt(&b, p, r, 100);
    assert_non_null(strstr(b.s, "stage 0 |F0"));
    assert_non_null(strstr(b.s, "stage 0 out |"));
    /* Every row is exactly as wide as asked. */
    for (char *line = b.s; *line;) {
        char *nl = strchr(line, '\n');
        assert_true(nl - line <= 100 || strstr(line, "column"));
        line = nl + 1;
    }
    sb_free(&b);
    sim_write_trace(&b, p, r);
    assert_non_null(strstr(b.s, "\"traceEvents\""));
    assert_non_null(strstr(b.s, "\"ph\": \"X\""));
    assert_non_null(strstr(b.s, "\"ph\": \"C\""));
    assert_non_null(strstr(b.s, "\"ph\": \"s\""));
    assert_non_null(strstr(b.s, "\"name\": \"B2.1\""));
    sb_free(&b);
    sim_write_svg(&b, p, r);
    assert_int_equal(strncmp(b.s, "<?xml", 5), 0);
    assert_non_null(strstr(b.s, "</svg>\n"));
    sb_free(&b);
    sim_write_summary(&b, p, r);
    assert_non_null(strstr(b.s, "makespan"));
    sb_free(&b);
    sim_free(r);
    pipeline_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_1f1b_closed_form),
        cmocka_unit_test(test_gpipe_closed_form),
        cmocka_unit_test(test_interleaved_closed_form),
        cmocka_unit_test(test_obscura_eq3),
        cmocka_unit_test(test_json_example),
        cmocka_unit_test(test_number_format),
        cmocka_unit_test(test_swap_timing),
        cmocka_unit_test(test_w_split_and_dep),
        cmocka_unit_test(test_stuck),
        cmocka_unit_test(test_random_properties),
        cmocka_unit_test(test_writers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
