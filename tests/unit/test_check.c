/* test_check.c - the checker on IRs built in C: 1F1B generated here, then mutations.
 * Each test states the expected diagnostic from the rules of docs/semantics.md; the
 * cycles are worked out by hand in the comments.
 *
 * Legend: P = stages, M = micro-batches; ops are written as in the language (F3, B3.1). */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "check.h"
#include "comm.h"
#include "ir.h"
#include "opindex.h"
#include "sim.h"
#include "util.h"
#include "waitgraph.h"
#include "testutil.h"

#define GiB (1024.0 * 1024.0 * 1024.0)

/* ---- helpers ---------------------------------------------------------------------- */

/* DAPPLE 1F1B (the stdlib `onef1b` template, written out in C). */
static Pipeline *onef1b(int P, int M)
{
    Pipeline *p = mk(P, M, 1);
    gen_1f1b(p);
    return p;
}

/* Runs check_pipeline with diagnostics captured; returns the text (caller frees). */
static char *run(const Pipeline *p, unsigned what, Diag *d)
{
    char *text = NULL;
    size_t len = 0;
    memset(d, 0, sizeof *d);
    d->out = open_memstream(&text, &len);
    int n = check_pipeline(d, p, what);
    fclose(d->out);
    assert_int_equal(n, d->nerr);
    return text;
}

static void expect_has(const char *text, const char *needle)
{
    if (!strstr(text, needle))
        fail_msg("expected \"%s\" in:\n%s", needle, text);
}

/* Adds the dep from -> to (testutil.h's add_dep with any chunk, kind or stage). */
static void push_dep(Pipeline *p, OpRef from, OpRef to)
{
    size_t cap = p->depcap;
    Dep dp = {from, to, LOC_NONE};
    VEC_PUSH(p->deps, p->ndeps, cap, dp);
    p->depcap = (uint32_t)cap;
}

/* Checks p (`what`): the report holds `want` and nerr errors in all. Frees p. */
static void expect_report(Pipeline *p, unsigned what, const char *want, int nerr)
{
    Diag d;
    char *t = run(p, what, &d);
    expect_has(t, want);
    assert_int_equal(d.nerr, nerr);
    free(t);
    pipeline_free(p);
}

/* ---- tests -------------------------------------------------------------------------- */

static void test_onef1b_ok(void **state)
{
    (void)state;
    for (int P = 1; P <= 6; P++)
        for (int M = 1; M <= 9; M++) {
            Pipeline *p = onef1b(P, M);
            Diag d;
            char *t = run(p, CHECK_ALL, &d);
            if (d.nerr)
                fail_msg("P=%d M=%d: %s", P, M, t);
            free(t);
            pipeline_free(p);
        }
}

static void test_opindex(void **state)
{
    (void)state;
    Pipeline *p = onef1b(4, 8);
    OpIndex *x = opindex_build(p);
    assert_int_equal(opindex_count(x), 64);
    int32_t r;
    uint32_t pos;
    /* stage 2: F0 F1 B0 F2 B1 F3 ... so F3 is at position 5 */
    assert_true(opindex_find(x, OP_F, 2, 3, &r, &pos));
    assert_int_equal(r, 2);
    assert_int_equal(pos, 5);
    assert_false(opindex_find(x, OP_W, 2, 3, &r, &pos));
    assert_false(opindex_find(x, OP_F, 4, 0, &r, &pos));
    assert_false(opindex_find(x, OP_F, 0, 8, &r, &pos));
    opindex_free(x);
    /* vshape: chunk 1 of rank 0 is virtual stage 2*2-1 = 3 with P = 2 */
    Pipeline *q = mk(2, 1, 2);
    q->placement = PLACE_VSHAPE;
    ops(q, 0, "F0 F0.1 B0.1 B0");
    ops(q, 1, "F0 F0.1 B0.1 B0");
    x = opindex_build(q);
    assert_true(opindex_find(x, OP_B, 3, 0, &r, &pos));
    assert_int_equal(r, 0);
    assert_int_equal(pos, 2);
    assert_true(opindex_find(x, OP_F, 2, 0, &r, &pos));
    assert_int_equal(r, 1);
    assert_int_equal(pos, 1);
    opindex_free(x);
    Diag d;
    char *t = run(q, CHECK_ALL, &d);
    assert_int_equal(d.nerr, 0);
    free(t);
    pipeline_free(q);
    pipeline_free(p);
}

/* A sparse index (P*V*M far beyond the op count) answers the same. */
static void test_opindex_sparse(void **state)
{
    (void)state;
    Pipeline *p = mk(2, 2000000000, 1);
    ops(p, 0, "F7 F1999999999 B7");
    ops(p, 1, "F7 B7 F5");
    OpIndex *x = opindex_build(p);
    int32_t r;
    uint32_t pos;
    assert_true(opindex_find(x, OP_F, 0, 1999999999u, &r, &pos));
    assert_int_equal(pos, 1);
    assert_true(opindex_find(x, OP_F, 1, 5, &r, &pos));
    assert_int_equal(r, 1);
    assert_int_equal(pos, 2);
    assert_false(opindex_find(x, OP_F, 1, 6, &r, &pos));
    opindex_free(x);
    Diag d;
    char *t = run(p, CHECK_STRUCTURE, &d);
    /* stage 0 lacks F0..F6, F8..F1999999998, B0..B6, B8..B1999999999 */
    expect_has(t, "F0..F6, F8..F1999999998, B0..B6, B8..B1999999999 missing on stage 0");
    expect_has(t, "missing on stage 1");
    assert_int_equal(d.ncode[DIAG_MISSING], 2);
    free(t);
    pipeline_free(p);
}

static void test_missing(void **state)
{
    (void)state;
    Pipeline *p = onef1b(4, 8);
    /* stage 2 (warm-up 1): F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7 */
    for (uint32_t m = 4; m < 8; m++)
        del(p, 2, find(p, 2, OP_F, m));
    del(p, 2, find(p, 2, OP_B, 6));
    Diag d;
    char *t = run(p, CHECK_ALL, &d);
    expect_has(t, "error[missing]: F4..F7, B6 missing on stage 2");
    assert_int_equal(d.nerr, 1); /* deps and memory are skipped */
    free(t);
    pipeline_free(p);
}

static void test_duplicate(void **state)
{
    (void)state;
    Pipeline *p = onef1b(2, 4);
    push(p, 1, OP_F, 3, 0);
    push(p, 1, OP_W, 0, 0);
    push(p, 1, OP_W, 0, 0);
    Diag d;
    char *t = run(p, CHECK_ALL, &d);
    expect_has(t, "error[duplicate]: duplicate F3 on stage 1");
    expect_has(t, "note: first F3 is here");
    expect_has(t, "error[duplicate]: duplicate W0 on stage 1");
    assert_int_equal(d.ncode[DIAG_DUPLICATE], 2);
    assert_int_equal(d.nerr, 2);
    free(t);
    pipeline_free(p);
}

static void test_placement(void **state)
{
    (void)state;
    Pipeline *p = onef1b(2, 2);
    push(p, 0, OP_F, 1, 1);       /* chunk 1 with V = 1 */
    add_dep(p, 1, OP_W, 0, 0, OP_B, 1); /* stage 1 has no W0 */
    add_dep(p, 5, OP_F, 0, 0, OP_B, 1); /* no stage 5 */
    /* ops the front end never builds (a pass or an importer could): an unknown kind, a
     * micro-batch beyond M */
    push(p, 0, (OpKind)99, 0, 0);
    push(p, 1, OP_F, 5, 0);
    Diag d;
    char *t = run(p, CHECK_STRUCTURE, &d);
    expect_has(t, "error[value]: unknown op kind 99 on stage 0");
    expect_has(t, "error[value]: F5 on stage 1: micro-batch 5 out of range (microbatches 2)");
    assert_int_equal(d.ncode[DIAG_VALUE], 2);
    expect_has(t, "error[placement]: F1.1 on stage 0 names chunk 1, but each stage holds 1 chunk");
    expect_has(t, "error[placement]: dep names 1:W0, but stage 1 has no such op");
    expect_has(t, "error[placement]: dep names 5:F0, but there is no stage 5 (stages 2)");
    assert_int_equal(d.ncode[DIAG_PLACEMENT], 3);
    free(t);
    /* the simulator (under the sanitizers here) reads nothing past its tables for them
     * and reports the schedule as one that cannot run to the end */
    SimResult *r = simulate(p);
    assert_non_null(r);
    assert_true(r->stuck);
    sim_free(r);
    pipeline_free(p);
}

static void test_swap_pairs(void **state)
{
    (void)state;
    Pipeline *p = mk(1, 2, 1);
    ops(p, 0, "F0 SO0 F1 SI1 B1 B0");
    Diag d;
    char *t = run(p, CHECK_STRUCTURE, &d);
    expect_has(t, "error[missing]: SO0 on stage 0 has no SI0");
    expect_has(t, "error[missing]: SI1 on stage 0 has no SO1");
    assert_int_equal(d.nerr, 2);
    free(t);
    pipeline_free(p);
}

static void test_order(void **state)
{
    (void)state;
    Pipeline *p = mk(1, 5, 1);
    /* B0 before F0; R1 after B1; W2 before B2; SI3 before SO3; R4 before F4 */
    ops(p, 0, "B0 F0 F1 B1 R1 F2 W2 B2 F3 SI3 SO3 B3 R4 F4 B4");
    Diag d;
    char *t = run(p, CHECK_ALL, &d);
    expect_has(t, "error[order]: B0 is listed before F0 on stage 0, but it waits for it: a backward needs its forward");
    expect_has(t, "error[order]: B1 is listed before R1 on stage 0, but it waits for it: a recompute must come before its backward");
    expect_has(t, "error[order]: W2 is listed before B2 on stage 0, but it waits for it");
    expect_has(t, "error[order]: SI3 is listed before SO3 on stage 0, but it waits for it: a swap-in must come after its swap-out");
    expect_has(t, "error[order]: R4 is listed before F4 on stage 0, but it waits for it: a recompute must come after its forward");
    assert_int_equal(d.ncode[DIAG_ORDER], 5);
    assert_int_equal(d.ncode[DIAG_DEADLOCK], 0); /* same-rank problems are order, not deadlock */
    free(t);
    pipeline_free(p);
}

/* P = 2, M = 2. Stage 0 runs B0 before F1, stage 1 runs F1 before B0:
 * stage 0 B0 waits for stage 1 B0 (data), which comes after F1 on stage 1 (stream),
 * which waits for stage 0 F1 (data), which comes after B0 on stage 0 (stream). */
static void test_cycle2(void **state)
{
    (void)state;
    Pipeline *p = mk(2, 2, 1);
    ops(p, 0, "F0 B0 F1 B1");
    ops(p, 1, "F0 F1 B0 B1");
    Diag d;
    char *t = run(p, CHECK_ALL, &d);
    expect_has(t, "error[deadlock]: stage 0 B0 waits for stage 1 B0, which comes after F1 on "
                  "stage 1, which waits for stage 0 F1, which comes after B0 on stage 0 (a cycle "
                  "of 2 cross-stage waits)");
    expect_has(t, "note: stage 1 F1 is here");
    assert_int_equal(d.nerr, 1);
    free(t);
    pipeline_free(p);
}

/* 1F1B, P = 4, M = 8, plus dep 3:B5 -> 0:F4. Stage 3 lists B5 after F4, and F4 on
 * stage 3 needs F4 of stages 2, 1 and 0: stage 0 F4 waits for stage 3 B5 (dep), which
 * comes after F4 on stage 3, which waits for stage 2 F4, which waits for stage 1 F4,
 * which waits for stage 0 F4. Going from stage 3 back to stage 0 takes 3 data waits at
 * least (each moves one stage), so 4 is the smallest cycle. */
static void test_cycle4(void **state)
{
    (void)state;
    Pipeline *p = onef1b(4, 8);
    add_dep(p, 3, OP_B, 5, 0, OP_F, 4);
    Diag d;
    char *t = run(p, CHECK_ALL, &d);
    expect_has(t, "error[deadlock]: stage 0 F4 waits for stage 3 B5 (by a dep line), which comes "
                  "after F4 on stage 3, which waits for stage 2 F4, which waits for stage 1 F4, "
                  "which waits for stage 0 F4 (a cycle of 4 cross-stage waits)");
    expect_has(t, "note: the dep line is here");
    assert_int_equal(d.nerr, 1);
    free(t);
    pipeline_free(p);
}

/* Two independent deadlocks are both reported: 1F1B P = 2, M = 8 with deps
 * 1:B0 -> 0:F0 and 1:B6 -> 0:F6. Each closes its own cycle (stage 0 Fm waits for
 * stage 1 Bm, which comes after Fm on stage 1, which waits for stage 0 Fm); the
 * second reaches the first through program order but not back, so they are two
 * strongly connected components and two errors. */
static void test_two_cycles(void **state)
{
    (void)state;
    Pipeline *p = onef1b(2, 8);
    add_dep(p, 1, OP_B, 0, 0, OP_F, 0);
    add_dep(p, 1, OP_B, 6, 0, OP_F, 6);
    Diag d;
    char *t = run(p, CHECK_DEPS, &d);
    assert_int_equal(d.ncode[DIAG_DEADLOCK], 2);
    expect_has(t, "error[deadlock]: stage 0 F0 waits for stage 1 B0 (by a dep line), which comes "
                  "after F0 on stage 1, which waits for stage 0 F0 (a cycle of 2 cross-stage waits)");
    expect_has(t, "error[deadlock]: stage 0 F6 waits for stage 1 B6 (by a dep line), which comes "
                  "after F6 on stage 1, which waits for stage 0 F6 (a cycle of 2 cross-stage waits)");
    free(t);
    pipeline_free(p);
}

/* Stage 0 consumes stage 1's gradients out of order: stage 1 produces B0 then B1; stage 0 needs
 * B1 first. The lowering sends in the receiver's order (B1's message, then B0's, both
 * after B1 on stage 1), so the pair never mismatches and nothing hangs. */
static void test_sendrecv_reordered(void **state)
{
    (void)state;
    Pipeline *p = mk(2, 2, 1);
    ops(p, 0, "F0 F1 B1 B0");
    ops(p, 1, "F0 F1 B0 B1");
    CommPlan *cp = comm_plan(p);
    assert_int_equal(cp->nmsgs, 4);
    /* rank 1: recv F0 before op 0, recv F1 before op 1, then two sends after op 3 (B1) */
    assert_int_equal(cp->start[1], 4);
    assert_int_equal(cp->start[2], 8);
    const CommItem *it = &cp->items[cp->start[1]];
    assert_int_equal(it[0].kind, COMM_RECV);
    assert_int_equal(it[0].pos, 0);
    assert_int_equal(it[1].kind, COMM_RECV);
    assert_int_equal(it[1].pos, 1);
    assert_int_equal(it[2].kind, COMM_SEND);
    assert_int_equal(it[2].pos, 3);
    assert_int_equal(it[3].kind, COMM_SEND);
    assert_int_equal(it[3].pos, 3);
    /* the first send carries B1 (consumed first by stage 0), the second B0 */
    assert_int_equal(cp->msgs[it[2].msg].src_pos, 3);
    assert_int_equal(cp->msgs[it[3].msg].src_pos, 2);
    assert_int_equal(cp->msgs[it[2].msg].seq, 0);
    assert_int_equal(cp->msgs[it[3].msg].seq, 1);
    /* rank 0: send F0 after op 0, send F1 after op 1, recv B1 before op 2, recv B0 before op 3 */
    it = &cp->items[0];
    assert_int_equal(it[0].kind, COMM_SEND);
    assert_int_equal(it[1].kind, COMM_SEND);
    assert_int_equal(it[2].kind, COMM_RECV);
    assert_int_equal(cp->msgs[it[2].msg].src_pos, 3);
    assert_false(comm_simulate(p, cp, COMM_EAGER).hung);
    comm_plan_free(cp);
    Diag d;
    char *t = run(p, CHECK_ALL, &d);
    assert_int_equal(d.nerr, 0);
    free(t);
    pipeline_free(p);
}

/* Every pair's sends come out in the receiver's recv order, on a schedule with deps. */
static void test_sendrecv_fifo(void **state)
{
    (void)state;
    Pipeline *p = onef1b(4, 8);
    add_dep(p, 0, OP_F, 6, 3, OP_F, 7);
    add_dep(p, 2, OP_B, 1, 1, OP_F, 6);
    CommPlan *cp = comm_plan(p);
    /* 3 F messages and 3 B messages per micro-batch, plus 2 deps */
    assert_int_equal(cp->nmsgs, 6 * 8 + 2);
    for (uint32_t a = 0; a < cp->P; a++)
        for (uint32_t b = 0; b < cp->P; b++) {
            uint32_t ns = 0, nr = 0;
            for (uint32_t t = cp->start[a]; t < cp->start[a + 1]; t++)
                if (cp->items[t].kind == COMM_SEND && cp->items[t].peer == b)
                    assert_int_equal(cp->msgs[cp->items[t].msg].seq, ns++);
            for (uint32_t t = cp->start[b]; t < cp->start[b + 1]; t++)
                if (cp->items[t].kind == COMM_RECV && cp->items[t].peer == a)
                    assert_int_equal(cp->msgs[cp->items[t].msg].seq, nr++);
            assert_int_equal(ns, nr);
        }
    assert_false(comm_simulate(p, cp, COMM_EAGER).hung);
    comm_plan_free(cp);
    pipeline_free(p);
}

/* A number in [0, n) from xorshift state *rs. */
static uint32_t rnd_below(uint64_t *rs, uint32_t n)
{
    *rs ^= *rs << 13;
    *rs ^= *rs >> 7;
    *rs ^= *rs << 17;
    return (uint32_t)(*rs % n);
}

/* comm_hangs (the verdict check_comm acts on) against comm_simulate of the built plan,
 * on perturbed 1F1B and interleaved lists: adjacent swaps, swaps out to the host (SO,
 * SI), deps across ranks. Both verdicts occur. */
static void test_comm_hangs_agrees(void **state)
{
    (void)state;
    uint64_t rs = 0x2545F4914F6CDD1Dull;
#define RND(n) rnd_below(&rs, (n))
    int hung = 0, ok = 0;
    for (int t = 0; t < 400; t++) {
        int P = 2 + (int)RND(3), V = 1 + (int)RND(2), M = P * (1 + (int)RND(2));
        Pipeline *p = mk(P, M, V);
        if (V == 1)
            gen_1f1b(p);
        else
            gen_interleaved(p);
        for (int s = 0; s < P; s++) {
            StageOps *st = &p->stages[s];
            if (RND(3) == 0) { /* a swap out and back of one micro-batch */
                uint32_t m = RND((uint32_t)M);
                push(p, s, OP_SO, m, 0);
                push(p, s, OP_SI, m, 0);
                for (uint32_t k = 0; k < 2; k++) { /* move each to a random place */
                    uint32_t from = st->n - 2 + k, to = RND(from + 1);
                    Op o = st->ops[from];
                    memmove(&st->ops[to + 1], &st->ops[to], (from - to) * sizeof o);
                    st->ops[to] = o;
                }
            }
            for (uint32_t k = RND(3); k > 0 && st->n > 1; k--) {
                uint32_t i = RND(st->n - 1);
                Op o = st->ops[i];
                st->ops[i] = st->ops[i + 1];
                st->ops[i + 1] = o;
            }
        }
        if (RND(2)) {
            int fs = (int)RND((uint32_t)P), ts = (int)RND((uint32_t)P);
            uint32_t fm = RND((uint32_t)M), tm = RND((uint32_t)M);
            add_dep(p, fs, OP_F, fm, ts, OP_B, tm);
        }
        OpIndex *idx = opindex_build(p);
        Graph g;
        graph_build(&g, p, idx);
        CommPlan *cp = comm_plan(p);
        bool want = comm_simulate(p, cp, COMM_EAGER).hung;
        if (comm_hangs(&g) != want) {
            for (int s = 0; s < P; s++) {
                char *o = ops_text(p, s);
                print_error("stage %d: %s\n", s, o);
                free(o);
            }
            fail_msg("case %d: comm_hangs %d, comm_simulate %d", t, !want, want);
        }
        hung += want;
        ok += !want;
        comm_plan_free(cp);
        graph_free(&g);
        opindex_free(idx);
        pipeline_free(p);
    }
#undef RND
    assert_true(hung > 20);
    assert_true(ok > 20);
}

/* 1F1B under blocking (rendezvous) sends hangs, the PyTorch pipelining class of bug:
 * P = 2. Stage 0 runs F0, sends it (stage 1 is in its recv: they match), runs F1 and
 * blocks sending it; stage 1 runs F0 and B0 and blocks sending B0. Both in send. */
static void test_rendezvous_hangs(void **state)
{
    (void)state;
    Pipeline *p = onef1b(2, 4);
    CommPlan *cp = comm_plan(p);
    CommHang h = comm_simulate(p, cp, COMM_RENDEZVOUS);
    assert_true(h.hung);
    assert_int_equal(h.nblocked, 2);
    assert_int_equal(h.rank, 0);
    assert_int_equal(cp->items[h.item].kind, COMM_SEND);
    assert_int_equal(cp->items[h.item].pos, 1); /* after F1 */
    assert_int_not_equal(h.peer_item, UINT32_MAX);
    assert_int_equal(cp->items[h.peer_item].kind, COMM_SEND);
    assert_int_equal(cp->items[h.peer_item].pos, 1); /* after B0 on stage 1 */
    assert_false(comm_simulate(p, cp, COMM_EAGER).hung);
    comm_plan_free(cp);
    pipeline_free(p);
}

/* An acyclic wait graph that still hangs once lowered. Stage 0 lists SI0 (which waits,
 * through a dep, for B0 of stage 1) before F1. In the wait graph SI0 is on the
 * host-to-device stream and F1 does not wait for it. But the host program of stage 0
 * issues its list in order: it blocks in the recv before SI0, so F1 never runs and is
 * never sent; stage 1 blocks in the recv before F1. */
static void test_lowering_hang(void **state)
{
    (void)state;
    Pipeline *p = mk(2, 2, 1);
    ops(p, 0, "F0 SO0 SI0 F1 B0 B1");
    ops(p, 1, "F0 F1 B0 B1");
    add_dep(p, 1, OP_B, 0, 0, OP_SI, 0);
    Diag d;
    char *t = run(p, CHECK_ALL, &d);
    expect_has(t, "error[deadlock]: stage 0 blocks before SI0 in the recv of B0 from stage 1, "
                  "while stage 1 blocks before F1 in the recv of F1 from stage 0");
    assert_int_equal(d.nerr, 1);
    free(t);
    pipeline_free(p);
}

/* An allocating op waits for the SOs listed before it (docs/spec.md "Time"): with a dep
 * into the SO that comes from work which needs that allocating op, it is a cycle. */
static void test_swap_wait_cycle(void **state)
{
    (void)state;
    Pipeline *p = mk(2, 2, 1);
    ops(p, 0, "F0 SO0 F1 SI0 B0 B1");
    ops(p, 1, "F0 F1 B0 B1");
    /* SO0 waits for stage 1 F1, which waits for stage 0 F1, which waits for SO0 */
    add_dep(p, 1, OP_F, 1, 0, OP_SO, 0);
    Diag d;
    char *t = run(p, CHECK_DEPS, &d);
    assert_int_equal(d.ncode[DIAG_DEADLOCK], 1);
    expect_has(t, "stage 0 SO0 waits for stage 1 F1 (by a dep line), which waits for stage 0 F1, "
                  "which comes after SO0 on stage 0");
    free(t);
    pipeline_free(p);
}

static void test_memory_budget(void **state)
{
    (void)state;
    /* 1F1B P = 8, M = 16: stage 0 holds min(P, M) = 8 micro-batches at F7.
     * weights 26 GiB + 8 x 3.5 GiB = 54 GiB. */
    Pipeline *p = onef1b(8, 16);
    set_cost(&p->costs, COST_WEIGHTS, 26 * GiB);
    set_cost(&p->costs, COST_ACT, 3.5 * GiB);
    p->has_memory = true;
    p->memory = 54 * GiB;
    Diag d;
    char *t = run(p, CHECK_ALL, &d);
    assert_int_equal(d.nerr, 0); /* exactly at budget passes */
    free(t);
    p->memory = 54 * GiB - 1;
    t = run(p, CHECK_ALL, &d);
    expect_has(t, "error[memory]: stage 0 needs 54.0 GiB at F7, over its budget of 54.0 GiB by "
                  "1 B (57982058496 > 57982058495 bytes): weights 26.0 GiB + 8 micro-batches x "
                  "3.5 GiB activations");
    assert_int_equal(d.nerr, 1); /* stage 1 peaks at 26 + 7 x 3.5 = 50.5 GiB */
    free(t);
    /* the table */
    char *tab = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&tab, &len);
    check_mem_table(f, p);
    fclose(f);
    expect_has(tab, "    0     54.0 GiB     54.0 GiB         -1 B     26.0 GiB     28.0 GiB  F7 (8)  OVER");
    expect_has(tab, "    7     29.5 GiB     54.0 GiB     24.5 GiB     26.0 GiB      3.5 GiB  F0 (1)");
    free(tab);
    pipeline_free(p);
}

/* A dep endpoint must name an op that exists, on the stage it names (check.c
 * check_dep_ref): each way of missing is its own error, and the schedule's own waits
 * are still checked. The front end rejects most of these earlier; a pass or an
 * importer building deps does not go through it. */
static void test_dep_refs(void **state)
{
    (void)state;
    static const struct {
        OpRef to;
        const char *want;
    } cases[] = {
        {{0, 1, 9, 0}, "error[value]: dep names an unknown op kind"},
        {{0, 5, OP_F, 0}, "error[placement]: dep names 5:F0, but there is no stage 5 (stages 2)"},
        {{0, 1, OP_F, 2}, "error[placement]: dep names 1:F0.2, but stage 1 holds only 1 chunk"},
        {{7, 1, OP_F, 0}, "error[value]: dep names 1:F7: micro-batch 7 out of range (microbatches 2)"},
        {{0, 1, OP_W, 0}, "error[placement]: dep names 1:W0, but stage 1 has no such op"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        Pipeline *p = onef1b(2, 2);
        push_dep(p, (OpRef){0, 0, OP_F, 0}, cases[i].to);
        expect_report(p, CHECK_ALL, cases[i].want, 1);
    }
}

/* The sparse index (P*V*M far beyond the op count) on what a pass or an importer can
 * hand it: a duplicate keeps its first occurrence, out-of-range ops are left out, and
 * every out-of-range question answers "absent" (opindex.h). */
static void test_opindex_sparse_edges(void **state)
{
    (void)state;
    Pipeline *p = mk(2, 2000000000, 1);
    ops(p, 0, "F7 B7 F7 F3 F7");
    ops(p, 1, "F5");
    push(p, 0, OP_F, 1, 1);        /* chunk 1 with V = 1 */
    push(p, 1, (OpKind)99, 0, 0);  /* unknown kind */
    OpIndex *x = opindex_build(p);
    assert_int_equal(opindex_count(x), 4); /* F7 B7 F3 on stage 0, F5 on stage 1 */
    int32_t r;
    uint32_t pos;
    assert_true(opindex_find(x, OP_F, 0, 7, &r, &pos));
    assert_int_equal(pos, 0); /* the first of the three F7 */
    assert_true(opindex_find(x, OP_F, 0, 3, NULL, &pos));
    assert_int_equal(pos, 3);
    assert_false(opindex_find(x, (OpKind)99, 0, 0, &r, &pos));
    assert_false(opindex_find(x, OP_F, -1, 7, &r, &pos));
    assert_false(opindex_find(x, OP_F, 0, 2000000000u, &r, &pos));
    /* beyond the last key held (the last kind, the last virtual stage) */
    assert_false(opindex_find(x, (OpKind)(OP_NKINDS - 1), 1, 1999999999u, &r, &pos));
    assert_int_equal(opindex_next(x, OP_F, 0, 4), 7);
    assert_int_equal(opindex_next(x, OP_F, 0, 8), NONE);
    assert_int_equal(opindex_next(x, OP_F, 0, 2000000000u), NONE);
    assert_int_equal(opindex_next(x, (OpKind)99, 0, 0), NONE);
    assert_int_equal(opindex_next(x, OP_F, -1, 0), NONE);
    assert_int_equal(opindex_next(x, OP_F, 2, 0), NONE);
    opindex_free(x);
    pipeline_free(p);
    /* no ops at all, sparse (huge M) and dense (M = 0: no cells) */
    p = mk(2, 2000000000, 1);
    x = opindex_build(p);
    assert_int_equal(opindex_count(x), 0);
    assert_false(opindex_find(x, OP_F, 0, 0, &r, &pos));
    assert_int_equal(opindex_next(x, OP_F, 0, 0), NONE);
    opindex_free(x);
    pipeline_free(p);
    p = mk(1, 0, 1);
    x = opindex_build(p);
    assert_int_equal(opindex_count(x), 0);
    assert_false(opindex_find(x, OP_F, 0, 0, &r, &pos));
    assert_int_equal(opindex_next(x, OP_F, 0, 0), NONE);
    opindex_free(x);
    pipeline_free(p);
}

/* The messages that depend on V: a chunk out of range with several chunks per stage,
 * in an op and in a dep endpoint (the plural forms). */
static void test_chunk_plural(void **state)
{
    (void)state;
    Pipeline *p = one(1, 2, "F0 F0.1 B0.1 B0 F0.5");
    expect_report(p, CHECK_STRUCTURE, "error[placement]: F0.5 on stage 0 names chunk 5, but "
                  "each stage holds 2 chunks (virtual stages vs(0, 0..1))", 1);
    p = one(1, 2, "F0 F0.1 B0.1 B0");
    push_dep(p, (OpRef){0, 0, OP_F, 0}, (OpRef){0, 0, OP_B, 3});
    expect_report(p, CHECK_STRUCTURE,
                  "error[placement]: dep names 0:B0.3, but stage 0 holds only 2 chunks", 1);
}

/* A dep from an op to itself is an `order` error of its own wording (check_order). */
static void test_dep_self(void **state)
{
    (void)state;
    Pipeline *p = onef1b(2, 2);
    add_dep(p, 1, OP_F, 1, 1, OP_F, 1);
    expect_report(p, CHECK_ALL, "error[order]: dep makes F1 on stage 1 wait for itself", 1);
}

/* A shape the elaborator rejected (P, M or V not positive, no stages) is not checked
 * again: nothing is reported, whatever the ops. */
static void test_bad_shape_skipped(void **state)
{
    (void)state;
    Pipeline *p = onef1b(2, 2);
    push(p, 0, (OpKind)99, 0, 0); /* an error the checker reports on a sound shape */
    int32_t *field[] = {&p->P, &p->M, &p->V};
    for (size_t i = 0; i < ARRAY_LEN(field); i++) {
        int32_t keep = *field[i];
        *field[i] = 0;
        Diag d;
        char *t = run(p, CHECK_ALL, &d);
        assert_int_equal(d.nerr, 0);
        assert_string_equal(t, "");
        free(t);
        *field[i] = keep;
    }
    StageOps *st = p->stages;
    p->stages = NULL;
    Diag d;
    char *t = run(p, CHECK_ALL, &d);
    assert_int_equal(d.nerr, 0);
    free(t);
    p->stages = st;
    t = run(p, CHECK_ALL, &d);
    expect_has(t, "error[value]: unknown op kind 99 on stage 0");
    free(t);
    pipeline_free(p);
}

/* Weights alone over the budget: no op is named (the peak is before the first op), and
 * the memory table says "-" where it names the peak op. */
static void test_memory_weights_alone(void **state)
{
    (void)state;
    Pipeline *p = onef1b(2, 2);
    set_cost(&p->costs, COST_WEIGHTS, 10 * GiB);
    set_cost(&p->costs, COST_ACT, 0);
    p->has_memory = true;
    p->memory = 1 * GiB;
    Diag d;
    char *t = run(p, CHECK_ALL, &d);
    expect_has(t, "error[memory]: stage 0 needs 10.0 GiB for its weights alone, over its budget "
                  "of 1.0 GiB by 9.0 GiB");
    expect_has(t, "error[memory]: stage 1 needs 10.0 GiB for its weights alone");
    assert_int_equal(d.nerr, 2);
    free(t);
    char *tab = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&tab, &len);
    check_mem_table(f, p);
    fclose(f);
    expect_has(tab, "    0     10.0 GiB      1.0 GiB     -9.0 GiB     10.0 GiB          0 B  - (0)  OVER");
    free(tab);
    pipeline_free(p);
}

/* The wait graph on IR the checker would reject (waitgraph.h: deps naming absent ops are
 * left out; an op of unknown kind or out-of-range chunk or micro-batch waits only for
 * the op before it on its stream). */
static void test_graph_bad_ir(void **state)
{
    (void)state;
    Pipeline *p = mk(2, 1, 1);
    ops(p, 0, "F0 B0");
    ops(p, 1, "F0 B0");
    push(p, 1, (OpKind)99, 0, 0);
    push(p, 1, OP_F, 0, 3);  /* chunk 3 with V = 1 */
    push(p, 1, OP_F, 4, 0);  /* micro-batch 4 with M = 1 */
    add_dep(p, 0, OP_W, 0, 1, OP_F, 0);  /* from an absent op */
    add_dep(p, 0, OP_F, 0, 1, OP_W, 0);  /* to an absent op */
    add_dep(p, 0, OP_F, 0, 1, OP_B, 0);  /* kept */
    OpIndex *idx = opindex_build(p);
    Graph g;
    graph_build(&g, p, idx);
    assert_int_equal(g.N, 7);
    static const OpRef bad[] = {
        {0, 0, 99, 0}, {0, 2, OP_F, 0}, {0, 0, OP_F, 1}, {1, 0, OP_F, 0}, {0, 0, OP_W, 0},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        assert_int_equal(graph_ref(&g, bad[i]), NONE);
    assert_int_equal(graph_ref(&g, (OpRef){0, 1, OP_B, 0}), 3);
    Pred *buf = malloc(g.maxpred * sizeof *buf);
    /* stage 1 F0 (node 2) waits for stage 0 F0 only: the dep from 0:W0 is left out */
    uint32_t n = graph_preds(&g, 2, buf, true);
    assert_int_equal(n, 1);
    assert_int_equal(buf[0].node, 0);
    assert_int_equal(buf[0].why, WAIT_DATA);
    /* stage 1 B0 (node 3): its stream, its F, the next stage's B (none: last stage),
     * and the kept dep from stage 0 F0 */
    n = graph_preds(&g, 3, buf, true);
    assert_int_equal(n, 3);
    assert_int_equal(buf[2].node, 0);
    assert_int_equal(buf[2].why, WAIT_DEP);
    assert_int_equal(buf[2].dep, 2);
    /* the unknown kind, the chunk 3 and the micro-batch 4: the op before them only */
    for (uint32_t u = 4; u < 7; u++) {
        n = graph_preds(&g, u, buf, true);
        assert_int_equal(n, 1);
        assert_int_equal(buf[0].node, u - 1);
        assert_int_equal(buf[0].why, WAIT_STREAM);
    }
    Diag d;
    memset(&d, 0, sizeof d);
    d.out = fopen("/dev/null", "w");
    assert_int_equal(check_waitgraph(&d, &g), 0);
    fclose(d.out);
    free(buf);
    graph_free(&g);
    opindex_free(idx);
    pipeline_free(p);
    /* an OG whose chunk has no B or W on its rank waits for nothing (add_last_bw) */
    p = mk(1, 1, 1);
    ops(p, 0, "F0");
    push(p, 0, OP_OG, 0, 0);
    idx = opindex_build(p);
    graph_build(&g, p, idx);
    buf = malloc(g.maxpred * sizeof *buf);
    assert_int_equal(graph_preds(&g, 1, buf, true), 0);
    free(buf);
    graph_free(&g);
    opindex_free(idx);
    pipeline_free(p);
    /* no ops: an empty graph without a cycle */
    p = mk(1, 1, 1);
    idx = opindex_build(p);
    graph_build(&g, p, idx);
    assert_int_equal(g.N, 0);
    memset(&d, 0, sizeof d);
    d.out = fopen("/dev/null", "w");
    assert_int_equal(check_waitgraph(&d, &g), 0);
    assert_int_equal(d.nerr, 0);
    fclose(d.out);
    graph_free(&g);
    opindex_free(idx);
    pipeline_free(p);
}

/* Rendezvous (every send waits for its recv): GPipe, P = 2, M = 2, needs no buffering.
 * Stage 0 blocks in the send of F0 until stage 1 reaches its recv; stage 1 then waits in
 * the recv of F1, so when stage 0 sends F1 its receiver is already there, and stage 1
 * finds that message done when it resumes. */
static void test_rendezvous_receiver_first(void **state)
{
    (void)state;
    Pipeline *p = mk(2, 2, 1);
    gen_gpipe(p);
    CommPlan *cp = comm_plan(p);
    CommHang h = comm_simulate(p, cp, COMM_RENDEZVOUS);
    assert_false(h.hung);
    assert_int_equal(h.nblocked, 0);
    comm_plan_free(cp);
    pipeline_free(p);
    /* no stages: no messages, nothing to block */
    p = mk(0, 1, 1);
    cp = comm_plan(p);
    assert_int_equal(cp->nmsgs, 0);
    h = comm_simulate(p, cp, COMM_RENDEZVOUS);
    assert_false(h.hung);
    comm_plan_free(cp);
    pipeline_free(p);
}

/* A lowering hang around a ring of 17 stages (more than the 16 the message walks):
 * every stage s lists F0 SO0 SI0 F1 B0 B1 with a dep from F1 of stage s+1 (stage 0 for
 * the last) into its SI0. The wait graph is acyclic (F1 does not wait for SI0), but each
 * host program blocks in the recv before its SI0, waiting for an F1 the next stage
 * lists after its own SI0. */
static void test_lowering_hang_ring(void **state)
{
    (void)state;
    enum { P = 17 };
    Pipeline *p = mk(P, 2, 1);
    for (int s = 0; s < P; s++) {
        ops(p, s, "F0 SO0 SI0 F1 B0 B1");
        add_dep(p, (s + 1) % P, OP_F, 1, s, OP_SI, 0);
    }
    Diag d;
    char *t = run(p, CHECK_ALL, &d);
    expect_has(t, "error[deadlock]: stage 0 blocks before SI0 in the recv of F1 from stage 1, "
                  "while stage 1 blocks before SI0 in the recv of F1 from stage 2, while ");
    expect_has(t, "while stage 15 blocks before SI0 in the recv of F1 from stage 16, ... (17 "
                  "stages): every send of the cycle comes after a recv that waits for it");
    if (strstr(t, "stage 16 blocks"))
        fail_msg("the walk shows 16 stages, not 17:\n%s", t);
    assert_int_equal(d.nerr, 1);
    free(t);
    pipeline_free(p);
}

/* A peak at LW, before any activation is live: the composition names the weights and
 * the model states only. Stage 0 lists LW0 F0 B0 OG0 with weights 1 GiB, grads and
 * wload 1 GiB each (LW brings back 2 GiB) and no activations: 3 GiB at LW0. */
static void test_memory_peak_at_lw(void **state)
{
    (void)state;
    Pipeline *p = mk(1, 1, 1);
    push(p, 0, OP_LW, 0, 0);
    ops(p, 0, "F0 B0");
    push(p, 0, OP_OG, 0, 0);
    set_cost(&p->costs, COST_WEIGHTS, 1 * GiB);
    set_cost(&p->costs, COST_GRADS, 1 * GiB);
    set_cost(&p->costs, COST_WLOAD, 1 * GiB);
    set_cost(&p->costs, COST_ACT, 0);
    p->has_memory = true;
    p->memory = 2 * GiB;
    expect_report(p, CHECK_ALL,
                  "error[memory]: stage 0 needs 3.0 GiB at LW0, over its budget of 2.0 GiB by "
                  "1.0 GiB: weights 1.0 GiB + model states 2.0 GiB loaded by LW\n", 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_onef1b_ok),
        cmocka_unit_test(test_opindex),
        cmocka_unit_test(test_opindex_sparse),
        cmocka_unit_test(test_missing),
        cmocka_unit_test(test_duplicate),
        cmocka_unit_test(test_placement),
        cmocka_unit_test(test_swap_pairs),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_cycle2),
        cmocka_unit_test(test_cycle4),
        cmocka_unit_test(test_two_cycles),
        cmocka_unit_test(test_sendrecv_reordered),
        cmocka_unit_test(test_sendrecv_fifo),
        cmocka_unit_test(test_rendezvous_hangs),
        cmocka_unit_test(test_lowering_hang),
        cmocka_unit_test(test_swap_wait_cycle),
        cmocka_unit_test(test_memory_budget),
        cmocka_unit_test(test_dep_refs),
        cmocka_unit_test(test_opindex_sparse_edges),
        cmocka_unit_test(test_chunk_plural),
        cmocka_unit_test(test_dep_self),
        cmocka_unit_test(test_bad_shape_skipped),
        cmocka_unit_test(test_memory_weights_alone),
        cmocka_unit_test(test_graph_bad_ir),
        cmocka_unit_test(test_rendezvous_receiver_first),
        cmocka_unit_test(test_lowering_hang_ring),
        cmocka_unit_test(test_comm_hangs_agrees),
        cmocka_unit_test(test_memory_peak_at_lw),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
