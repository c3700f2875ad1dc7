/* test_passes_obscura.c - the Obscura passes (docs/passes.md "Obscura passes") on small
 * pipelines whose results are worked out by hand from the paper.
 *
 * The hand example (Fig. 6 and Fig. 9 with P = 4): M = 12, f = 1 ms, b = 2 ms, r = f
 * (full recomputation), act a = 4 GiB, ckpt c = 1 GiB, weights 16 GiB, budget 23 GiB.
 * 1F1B keeps W_s = P - s = 4, 3, 2, 1 blocks, so rank s peaks at 16 + 4 W_s = 32, 28, 24,
 * 20 GiB: ranks 0-2 are over and become adjusted (full recomputation: 16 + W_s c +
 * (a - c) = 23, 22, 21 GiB, all within 23); rank 3 is not. Then, by the closed forms:
 *   - forward_migration (§3.2, Fig. 6): rank s has 2(P - s - 1) forward-bubble slots,
 *     W_s = min(M, (P - s) + 2(P - s - 1)) = 10, 7, 4 on ranks 0-2 (rank 3 keeps 1);
 *   - dependency_relaxation (§5.2, Fig. 9 middle): one more forward ahead of each steady
 *     backward: 11, 8, 5;
 *   - migration_refinement (§5.3, Fig. 9 bottom): k = 2 is the last adjusted rank, and
 *     rank s < k keeps W_k + (k - s) = 7, 6 (never below P - s, never above before);
 *   - swap(lambda=2, beta=0.5) (§6.1, Fig. 10): lambda_s = lambda + (k - s) = 4, 3, 2
 *     blocks; micro-batch m swaps on rank s iff m mod W_s < lambda_s.
 * The expected op lists below are written out from these counts (forwards in order,
 * backward i after min(M, W_s + i) forwards, R(i) just before B(i)).
 *
 * Also: identify_adjusted with CMB-Identifying (§8) on Llama-2 18B, partition_adjust
 * (§7.2, Algorithm 1) on a small Llama, swap_aware_recompute / obscura (§6.2, §9.2) on
 * Llama-2 28B, idempotence of every pass, and refusal of inputs outside the 1F1B family. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "arena_plan.h"
#include "check.h"
#include "costmodel.h"
#include "driver.h"
#include "frontend.h"
#include "ir.h"
#include "memory.h"
#include "passes.h"
#include "sched_util.h"
#include "print.h"
#include "sim.h"
#include "util.h"

#define GiB (1024.0 * 1024.0 * 1024.0)

typedef struct Built {
    Diag d;
    Pipeline *p;
} Built;

/* Compiles src as `pipec` does (driver_compile: costs, recompute directives, passes,
 * structural and dependency checks); p is NULL on any error (messages go to
 * the Diag's tmpfile, see diag_text). */
static void build(Built *b, const char *src)
{
    memset(b, 0, sizeof *b);
    b->d.out = tmpfile();
    b->p = driver_compile_string(&b->d, NULL, "t.pipe", src, strlen(src));
}

static void done(Built *b)
{
    pipeline_free(b->p);
    if (b->d.out)
        fclose(b->d.out);
    diag_free(&b->d);
}

/* The diagnostics written so far (caller frees). */
static char *diag_text(Built *b)
{
    fflush(b->d.out);
    long n = ftell(b->d.out);
    char *s = xmalloc((size_t)(n < 0 ? 0 : n) + 1);
    rewind(b->d.out);
    size_t got = n > 0 ? fread(s, 1, (size_t)n, b->d.out) : 0;
    s[got] = 0;
    return s;
}

static char *printed(const Pipeline *p)
{
    StrBuf s = {0};
    print_pipeline(&s, p);
    return s.s;
}

/* Rank s's op list as "F0 F1 B0 ..." (caller frees). */
static char *ops(const Pipeline *p, int32_t s)
{
    StrBuf sb = {0};
    sb_printf(&sb, "%s", "");
    const StageOps *st = &p->stages[s];
    for (uint32_t i = 0; i < st->n; i++) {
        char nm[32];
        const Op *o = &st->ops[i];
        sb_printf(&sb, "%s%s", i ? " " : "", op_name(nm, sizeof nm, o->kind, o->mb, o->chunk));
    }
    return sb.s;
}

static void assert_ops(const Pipeline *p, int32_t s, const char *want)
{
    char *got = ops(p, s);
    if (strcmp(got, want) != 0)
        fail_msg("rank %d:\n  got  %s\n  want %s", s, got, want);
    free(got);
}

/* The structure and dependency checks (memory separately where a pass promises it). */
static void assert_legal(const Pipeline *p)
{
    Diag cd = {0};
    cd.out = fopen("/dev/null", "w");
    assert_int_equal(check_pipeline(&cd, p, CHECK_STRUCTURE | CHECK_DEPS), 0);
    fclose(cd.out);
    diag_free(&cd);
}

/* Within the budget under the static walk and the static arena (what `check` runs). */
static bool fits_all(const Pipeline *p)
{
    Diag cd = {0};
    cd.out = fopen("/dev/null", "w");
    int n = check_pipeline(&cd, p, CHECK_ALL);
    if (n == 0)
        n = arena_check(&cd, p);
    fclose(cd.out);
    diag_free(&cd);
    return n == 0;
}

static double makespan(const Pipeline *p)
{
    void *sc = NULL;
    double ms = sim_makespan(p, &sc);
    sim_scratch_free(sc);
    return ms;
}

/* The hand example with `applies` after identify_adjusted(cmb=false). */
static void hand(Built *b, const char *costs_extra, const char *applies)
{
    StrBuf s = {0};
    sb_printf(&s,
              "import \"std/schedules.pipe\"\n"
              "pipeline fig { stages 4 microbatches 12 memory 23GiB\n"
              "  costs { f 1ms b 2ms r 1ms act 4GiB ckpt 1GiB weights 16GiB %s }\n"
              "  schedule onef1b\n"
              "  apply identify_adjusted(cmb=false)\n%s}\n",
              costs_extra, applies);
    build(b, s.s);
    if (!b->p) {
        char *msg = diag_text(b);
        fail_msg("did not build:\n%s\n%s", s.s, msg);
    }
    free(s.s);
}

/* The hand example (with costs_extra) built with applies a and with applies b: both
 * must print the same and mark the same ranks adjusted. Returns the printed form
 * (caller frees). */
static char *assert_same(const char *costs_extra, const char *a, const char *b, const char *what)
{
    Built x, y;
    hand(&x, costs_extra, a);
    hand(&y, costs_extra, b);
    char *px = printed(x.p), *py = printed(y.p);
    if (strcmp(px, py) != 0)
        fail_msg("%s", what);
    for (int32_t s = 0; s < x.p->P; s++)
        assert_int_equal(x.p->adjusted[s], y.p->adjusted[s]);
    assert_legal(y.p);
    free(py);
    done(&x);
    done(&y);
    return px;
}

/* Builds src twice, once with `apply X` and once with `apply X apply X`, and asserts the
 * same printed form. */
static void assert_idempotent(const char *pre, const char *pass)
{
    StrBuf a = {0}, b = {0}, what = {0};
    sb_printf(&a, "%sapply %s\n", pre, pass);
    sb_printf(&b, "%sapply %s apply %s\n", pre, pass, pass);
    sb_printf(&what, "%s is not idempotent", pass);
    free(assert_same("", a.s, b.s, what.s));
    free(a.s);
    free(b.s);
    free(what.s);
}

static const char *const ONEF1B_3 =
    "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 F8 B8 F9 B9 F10 B10 F11 B11";

/* §3.2 Step 1: ranks 0-2 over the budget, marked adjusted, fully recomputed. */
static void test_identify_adjusted(void **state)
{
    (void)state;
    Built b;
    hand(&b, "", "");
    static const uint8_t want_adj[4] = {1, 1, 1, 0};
    for (int32_t s = 0; s < 4; s++) {
        assert_int_equal(b.p->adjusted[s], want_adj[s]);
        assert_int_equal(b.p->stage_policy[s], want_adj[s] ? POLICY_FULL : POLICY_NONE);
    }
    /* 1F1B order kept, R(i) just before B(i) on ranks 0-2 */
    assert_ops(b.p, 0, "F0 F1 F2 F3 R0 B0 F4 R1 B1 F5 R2 B2 F6 R3 B3 F7 R4 B4 F8 R5 B5 F9 R6 B6 "
                       "F10 R7 B7 F11 R8 B8 R9 B9 R10 B10 R11 B11");
    assert_ops(b.p, 3, ONEF1B_3);
    /* peaks 16 + W_s c + (a - c): 23, 22, 21; rank 3 16 + a = 20 GiB */
    MemRank mr[4];
    mem_walk(b.p, mr);
    static const double want_peak[4] = {23, 22, 21, 20};
    for (int32_t s = 0; s < 4; s++)
        assert_true(fabs(mr[s].peak - want_peak[s] * GiB) < 1);
    assert_true(fits_all(b.p));
    assert_legal(b.p);
    done(&b);
    assert_idempotent("", "identify_adjusted(cmb=false)");
}

/* §3.2 Step 2, Fig. 6: W = 10, 7, 4, 1. */
static void test_forward_migration(void **state)
{
    (void)state;
    Built b;
    hand(&b, "", "apply forward_migration\n");
    assert_ops(b.p, 0, "F0 F1 F2 F3 F4 F5 F6 F7 F8 F9 R0 B0 F10 R1 B1 F11 R2 B2 R3 B3 R4 B4 R5 B5 "
                       "R6 B6 R7 B7 R8 B8 R9 B9 R10 B10 R11 B11");
    assert_ops(b.p, 1, "F0 F1 F2 F3 F4 F5 F6 R0 B0 F7 R1 B1 F8 R2 B2 F9 R3 B3 F10 R4 B4 F11 R5 B5 "
                       "R6 B6 R7 B7 R8 B8 R9 B9 R10 B10 R11 B11");
    assert_ops(b.p, 2, "F0 F1 F2 F3 R0 B0 F4 R1 B1 F5 R2 B2 F6 R3 B3 F7 R4 B4 F8 R5 B5 F9 R6 B6 "
                       "F10 R7 B7 F11 R8 B8 R9 B9 R10 B10 R11 B11");
    assert_ops(b.p, 3, ONEF1B_3);
    assert_legal(b.p);
    done(&b);
    /* the lag rule: rank 1 alone cannot run more forwards ahead than W_0 - 1 = 3, so
     * migrating it under an unmigrated rank 0 changes nothing */
    hand(&b, "", "apply forward_migration(stages=1)\n");
    assert_ops(b.p, 1, "F0 F1 F2 R0 B0 F3 R1 B1 F4 R2 B2 F5 R3 B3 F6 R4 B4 F7 R5 B5 F8 R6 B6 F9 R7 B7 "
                       "F10 R8 B8 F11 R9 B9 R10 B10 R11 B11");
    done(&b);
    assert_idempotent("", "forward_migration");
}

static const char *const RELAXED_2 =
    "F0 F1 F2 F3 F4 R0 B0 F5 R1 B1 F6 R2 B2 F7 R3 B3 F8 R4 B4 F9 R5 B5 F10 R6 B6 F11 R7 B7 "
    "R8 B8 R9 B9 R10 B10 R11 B11";

/* §5.2, Fig. 9 (middle): W = 11, 8, 5, 1 - one relaxed slot more than the Strawman. */
static void test_dependency_relaxation(void **state)
{
    (void)state;
    Built b;
    hand(&b, "", "apply forward_migration apply dependency_relaxation\n");
    assert_ops(b.p, 0, "F0 F1 F2 F3 F4 F5 F6 F7 F8 F9 F10 R0 B0 F11 R1 B1 R2 B2 R3 B3 R4 B4 R5 B5 "
                       "R6 B6 R7 B7 R8 B8 R9 B9 R10 B10 R11 B11");
    assert_ops(b.p, 1, "F0 F1 F2 F3 F4 F5 F6 F7 R0 B0 F8 R1 B1 F9 R2 B2 F10 R3 B3 F11 R4 B4 R5 B5 "
                       "R6 B6 R7 B7 R8 B8 R9 B9 R10 B10 R11 B11");
    assert_ops(b.p, 2, RELAXED_2);
    assert_ops(b.p, 3, ONEF1B_3);
    assert_legal(b.p);
    double t_relax = makespan(b.p);
    done(&b);
    /* the same closed form without the migration first */
    hand(&b, "", "apply dependency_relaxation\n");
    assert_ops(b.p, 2, RELAXED_2);
    done(&b);
    /* time: recomputation on 1F1B, the Strawman, the relaxed pipeline. With r = f on
     * ranks 0-2, the 1F1B critical path gains r per steady step on rank 2 (its backward
     * bubbles are 1 slot); migration and relaxation hide part of it, never adding any */
    hand(&b, "", "");
    double t_recomp = makespan(b.p);
    done(&b);
    hand(&b, "", "apply forward_migration\n");
    double t_straw = makespan(b.p);
    done(&b);
    Built n;
    build(&n, "import \"std/schedules.pipe\"\n"
              "pipeline non { stages 4 microbatches 12 costs { f 1ms b 2ms } schedule onef1b }\n");
    assert_non_null(n.p);
    double t_non = makespan(n.p);
    done(&n);
    assert_true(fabs(t_non - (12 + 4 - 1) * 3.0) < 1e-9); /* (M + P - 1)(f + b) */
    assert_true(t_straw < t_recomp);
    assert_true(t_relax <= t_straw);
    assert_true(t_relax >= t_non);
    assert_idempotent("apply forward_migration\n", "dependency_relaxation");
}

/* §5.3, Fig. 9 (bottom): k = 2, W = 7, 6, 5, 1. */
static void test_migration_refinement(void **state)
{
    (void)state;
    Built b;
    hand(&b, "", "apply forward_migration apply dependency_relaxation apply migration_refinement\n");
    assert_ops(b.p, 0, "F0 F1 F2 F3 F4 F5 F6 R0 B0 F7 R1 B1 F8 R2 B2 F9 R3 B3 F10 R4 B4 F11 R5 B5 "
                       "R6 B6 R7 B7 R8 B8 R9 B9 R10 B10 R11 B11");
    assert_ops(b.p, 1, "F0 F1 F2 F3 F4 F5 R0 B0 F6 R1 B1 F7 R2 B2 F8 R3 B3 F9 R4 B4 F10 R5 B5 "
                       "F11 R6 B6 R7 B7 R8 B8 R9 B9 R10 B10 R11 B11");
    assert_ops(b.p, 2, RELAXED_2);
    assert_ops(b.p, 3, ONEF1B_3);
    assert_legal(b.p);
    /* fewer forwards ahead on ranks 0-1: less memory, and "without affecting the
     * concealment of recomputation overhead" (§5.3): no slower than before */
    double t_ref = makespan(b.p);
    MemRank ref[4], rel[4];
    mem_walk(b.p, ref);
    done(&b);
    hand(&b, "", "apply forward_migration apply dependency_relaxation\n");
    double t_rel = makespan(b.p);
    mem_walk(b.p, rel);
    done(&b);
    assert_true(t_ref <= t_rel + 1e-9);
    /* rank 0: 16 + 7 c + (a - c) = 26 GiB instead of 16 + 11 c + 3 = 30 */
    assert_true(fabs(ref[0].peak - 26 * GiB) < 1);
    assert_true(fabs(rel[0].peak - 30 * GiB) < 1);
    assert_idempotent("apply forward_migration apply dependency_relaxation\n", "migration_refinement");
}

/* §6.1, Fig. 10, Eq. 1 on the refined pipeline: lambda_s = 4, 3, 2 on W_s = 7, 6, 5. */
static void test_swap(void **state)
{
    (void)state;
    const char *pre = "apply forward_migration apply dependency_relaxation apply migration_refinement\n";
    StrBuf s = {0};
    sb_printf(&s, "%sapply swap(lambda=2, beta=0.5)\n", pre);
    Built b;
    hand(&b, "", s.s);
    /* swapped micro-batches: m mod W_s < lambda_s */
    static const char *const want_swapped[3] = {"0 1 2 3 7 8 9 10", "0 1 2 6 7 8", "0 1 5 6 10 11"};
    for (int32_t r = 0; r < 3; r++) {
        StrBuf got = {0};
        sb_printf(&got, "%s", "");
        const StageOps *st = &b.p->stages[r];
        for (uint32_t i = 0; i < st->n; i++)
            if (st->ops[i].kind == OP_SO)
                sb_printf(&got, "%s%u", got.len ? " " : "", st->ops[i].mb);
        if (strcmp(got.s, want_swapped[r]) != 0)
            fail_msg("rank %d swaps %s, want %s", r, got.s, want_swapped[r]);
        free(got.s);
        assert_true(fabs(ir_cost(b.p, r, 0, COST_SWAP_FRACTION) - 0.5) < 1e-12);
    }
    assert_true(fabs(ir_cost(b.p, 3, 0, COST_SWAP_FRACTION) - 1.0) < 1e-12);
    /* rank 2 by hand: eviction in the warm-up (SO0, SO1, each listed one forward late,
     * so that the next forward does not wait for the copy); loads one backward
     * ahead (SI1 before B0; SI0, whose backward comes first, one forward earlier); evict-one-load-one in the steady phase (SO5 ...
     * SI5); loading only at the end (SI10, SI11). The R ops come from identify_adjusted
     * (the recompute pass), so they are bound to the backward (docs/semantics.md
     * section 2): on a swapping rank R(i) is listed right after the step's forward and
     * ahead of that forward's SO, so it never waits for the copy (the simulator makes
     * an allocating op wait for every SO listed before it) and does not hold the
     * forward until B(i) of rank 3 arrives (§5.1). */
    assert_ops(b.p, 2, "F0 F1 SO0 F2 SO1 F3 SI0 F4 R0 SI1 B0 F5 R1 SO5 B1 F6 R2 SO6 B2 F7 R3 B3 "
                       "F8 R4 SI5 B4 F9 R5 SI6 B5 F10 R6 SO10 B6 F11 R7 SO11 B7 R8 B8 R9 SI10 B9 "
                       "R10 SI11 B10 R11 B11");
    assert_ops(b.p, 3, ONEF1B_3);
    assert_legal(b.p);
    /* Eq. 1 at the end of rank 2's warm-up (just after F4, op 7): A = (mu - lambda) c +
     * (1 - beta) lambda c = 3 + 1 = 4 GiB, plus the half block SI0 brought back early */
    double held[16];
    uint32_t n = mem_live_at(b.p, 2, 7, held, 16);
    double sum = 0;
    for (uint32_t i = 0; i < n && i < 16; i++)
        sum += held[i];
    assert_true(fabs(sum - 4.5 * GiB) < 1);
    /* peak: Eq. 1 + the two half blocks loaded ahead + R0's (a - c) = 4 + 1 + 3 */
    MemRank mr[4];
    mem_walk(b.p, mr);
    assert_true(fabs(mr[2].peak - (16 + 8) * GiB) < 1);
    done(&b);
    free(s.s);
    assert_idempotent(pre, "swap(lambda=2, beta=0.5)");
    /* lambda = 0 removes the swaps again */
    s = (StrBuf){0};
    sb_printf(&s, "%sapply swap(lambda=2, beta=0.5) apply swap(lambda=0)\n", pre);
    hand(&b, "", s.s);
    Built r;
    hand(&r, "", pre);
    for (int32_t k = 0; k < 4; k++) {
        char *a = ops(b.p, k), *c = ops(r.p, k);
        assert_string_equal(a, c);
        free(a);
        free(c);
    }
    done(&r);
    done(&b);
    free(s.s);
}

/* When every transfer fits in its window (x = beta c / B = 0.5 GiB / 1000 GB/s, about
 * 0.54 ms, under f = 1 ms), the swaps are hidden: the makespan equals the unswapped
 * pipeline's (the assumption of Eq. 3). With a slow link (x = 5.4 ms) they are not. */
static void test_swap_hidden(void **state)
{
    (void)state;
    const char *pre = "apply forward_migration apply dependency_relaxation apply migration_refinement\n";
    StrBuf s = {0};
    sb_printf(&s, "%sapply swap(lambda=2, beta=0.5)\n", pre);
    Built a, b, c;
    hand(&a, "host_bw 1000GB/s", pre);
    hand(&b, "host_bw 1000GB/s", s.s);
    hand(&c, "host_bw 100GB/s", s.s);
    double t0 = makespan(a.p), t1 = makespan(b.p), t2 = makespan(c.p);
    if (!(fabs(t1 - t0) < 1e-6))
        fail_msg("unswapped %.3f ms, swapped %.3f ms", t0, t1);
    assert_true(t2 > t0 + 1);
    done(&a);
    done(&b);
    done(&c);
    free(s.s);
}

/* Eq. 2-3 on the hand example (f = 1, r = 1, g = 3f + r = 4 ms, M = 12, k = 2): rank 3
 * takes 3 M f = 36; without swaps (lambda 0) T^C = 0 and T_s = max(T_{s+1} + 4,
 * 48 + 4(k - s)): 48, 52, 56 on ranks 2, 1, 0. With lambda 2, beta 0.5 and host_bw
 * 134.217728 GB/s, a block is x = 1 GiB x 0.5 / B = 4 ms and l_s = 4, 3, 2 on ranks 0-2:
 * T^C_2 = 2(4 - 1) + 2(4 - 3) = 8, T^C_1 = 3 x 3 - 3 + 3 = 9, T^C_0 = 4 x 3 - 6 + 4 = 10,
 * so T_2 = 56, T_1 = max(60, 61) = 61, T_0 = max(65, 66) = 66. Without a host_bw (an
 * unlimited link) a block costs nothing: 56 again. With every rank adjusted (k = 3: a
 * 19.5 GiB budget, below even rank 3's 16 + 4 GiB) rank 3 takes its own g M = 48 and the
 * others 52, 56, 60. */
static void test_eq23(void **state)
{
    (void)state;
    Built b;
    hand(&b, "host_bw 134.217728GB/s", "");
    assert_int_equal(sched_last_adjusted(b.p), 2);
    assert_true(fabs(obscura_eq23(b.p, 0, 1.0) - 56) < 1e-9);
    assert_true(fabs(obscura_eq23(b.p, 2, 0.5) - 66) < 1e-9);
    done(&b);
    hand(&b, "", "");
    assert_true(fabs(obscura_eq23(b.p, 2, 0.5) - 56) < 1e-9);
    done(&b);
    build(&b, "import \"std/schedules.pipe\"\n"
              "pipeline fig { stages 4 microbatches 12 memory 19.5GiB\n"
              "  costs { f 1ms b 2ms r 1ms act 4GiB ckpt 1GiB weights 16GiB }\n"
              "  schedule onef1b apply identify_adjusted(cmb=false) }\n");
    assert_non_null(b.p);
    assert_int_equal(sched_last_adjusted(b.p), 3);
    assert_true(fabs(obscura_eq23(b.p, 0, 1.0) - 60) < 1e-9);
    done(&b);
}

/* §5.3 with a rank between adjusted ones that is not adjusted (rank 1, act 1.5 GiB: 16 +
 * 4 x 1.5 = 22 GiB with its 4 warm-up forwards, within 23) and keeps more warm-up
 * forwards than 1F1B's 3: k = 2, rank 1 is left as written, and rank 0 (11 warm-up
 * forwards) keeps W_k + (k - 0) = 4 but never fewer than W_1 + 1 = 5, so that warm-up
 * counts still fall from rank to rank. */
static void test_refinement_around_unadjusted(void **state)
{
    (void)state;
    Built b;
    build(&b, "pipeline fig { stages 4 microbatches 12 memory 23GiB\n"
              "  costs { f 1ms b 2ms r 1ms act 4GiB ckpt 1GiB weights 16GiB }\n"
              "  costs stage 1 { act 1.5GiB }\n"
              "  stage 0 { F0 F1 F2 F3 F4 F5 F6 F7 F8 F9 F10 B0 F11 B1 B2 B3 B4 B5 B6 B7 B8 B9 B10 B11 }\n"
              "  stage 1 { F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 F8 B5 F9 B6 F10 B7 F11 B8 B9 B10 B11 }\n"
              "  stage 2 { F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 F8 B7 F9 B8 F10 B9 F11 B10 B11 }\n"
              "  stage 3 { F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 F8 B8 F9 B9 F10 B10 F11 B11 }\n"
              "  apply identify_adjusted(cmb=false) apply migration_refinement }\n");
    assert_non_null(b.p);
    assert_true(b.p->adjusted[0] && !b.p->adjusted[1] && b.p->adjusted[2] && !b.p->adjusted[3]);
    assert_ops(b.p, 0, "F0 F1 F2 F3 F4 R0 B0 F5 R1 B1 F6 R2 B2 F7 R3 B3 F8 R4 B4 F9 R5 B5 "
                       "F10 R6 B6 F11 R7 B7 R8 B8 R9 B9 R10 B10 R11 B11");
    assert_ops(b.p, 1, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 F8 B5 F9 B6 F10 B7 F11 B8 B9 "
                       "B10 B11");
    done(&b);
}

/* The schedule passes rewrite the SI gates they add (`dep` from the compute op before a
 * swap-in on its rank) and keep the source's own `dep` lines, here one to a backward,
 * one to an SI from another rank and one to an SI from an SO; a second rewrite
 * (migration_refinement, which moves nothing here) gives the same text. */
static void test_user_deps_kept(void **state)
{
    (void)state;
    static const char *const mine[] = {"dep 1:F0 -> 0:B0", "dep 1:F2 -> 0:SI0",
                                       "dep 0:SO0 -> 0:SI0"};
    static const char *const deps = "  dep 1:F0 -> 0:B0 dep 1:F2 -> 0:SI0 dep 0:SO0 -> 0:SI0\n";
    StrBuf a = {0}, b = {0};
    sb_printf(&a, "%s  apply swap(lambda=2, beta=0.5)\n", deps);
    sb_printf(&b, "%s  apply swap(lambda=2, beta=0.5) apply migration_refinement\n", deps);
    char *px = assert_same("host_bw 100GB/s", a.s, b.s, "the second rewrite changed the text");
    for (size_t i = 0; i < ARRAY_LEN(mine); i++) {
        const char *at = strstr(px, mine[i]);
        assert_non_null(at);
        assert_null(strstr(at + 1, mine[i])); /* once */
    }
    assert_non_null(strstr(px, "dep 0:F2 -> 0:SI0")); /* swap's gate of SI0 on rank 0 */
    free(px);
    free(a.s);
    free(b.s);
}

/* Llama-2 18B on 8 x A100-80GB as test_identify_cmb uses it, with `extra` in the
 * pipeline body. */
static void l18(Built *b, const char *extra)
{
    StrBuf s = {0};
    sb_printf(&s,
              "import \"std/schedules.pipe\"\nimport \"std/models.pipe\"\n"
              "import \"std/devices.pipe\"\n"
              "pipeline l18 { stages 8 microbatches 16 model llama2_18b device a100_sxm_80g\n"
              "  partition even schedule onef1b %s }\n",
              extra);
    build(b, s.s);
    free(s.s);
    assert_non_null(b->p);
}

/* §8: Llama-2 18B (8 x A100-80GB, seq 4096, M = 16): rank 0 is over the budget under
 * 1F1B, and the CMB policy alone brings it within (docs/passes.md §9.2 table), so with
 * cmb=true no rank is adjusted; with cmb=false rank 0 is adjusted and fully recomputed. */
static void test_identify_cmb(void **state)
{
    (void)state;
    Built b;
    uint8_t over[8];
    l18(&b, "");
    assert_false(sched_fits(b.p, over));
    assert_int_equal(over[0], 1);
    done(&b);
    l18(&b, "apply identify_adjusted");
    assert_int_equal(sched_last_adjusted(b.p), -1);
    assert_int_equal(b.p->stage_policy[0], POLICY_CMB);
    for (int32_t r = 1; r < 8; r++)
        assert_int_equal(b.p->stage_policy[r], POLICY_NONE);
    assert_true(fits_all(b.p));
    done(&b);
    /* cmb=false, or a rank that already recomputes (selective, still over: it is not
     * tried with CMB): adjusted, fully recomputed */
    l18(&b, "recompute stages 0 policy selective");
    assert_false(sched_fits(b.p, over));
    assert_int_equal(over[0], 1);
    done(&b);
    static const char *const adj[] = {"apply identify_adjusted(cmb=false)",
                                      "recompute stages 0 policy selective apply identify_adjusted"};
    for (size_t i = 0; i < ARRAY_LEN(adj); i++) {
        l18(&b, adj[i]);
        assert_int_equal(b.p->adjusted[0], 1);
        assert_int_equal(b.p->stage_policy[0], POLICY_FULL);
        assert_int_equal(sched_last_adjusted(b.p), 0);
        done(&b);
    }
}

static double part_sum(const Pipeline *p)
{
    double t = 0;
    for (uint32_t i = 0; i < p->npartition; i++)
        t += p->partition[i];
    return t;
}

/* §7.2, Algorithm 1 on Llama-2 7B cut to 8 layers (2L = 16 half-layer units, 4 per rank;
 * the embedding stays on rank 0 and the head on rank 3), P = 4, M = 32, a 12 GiB budget:
 * rank 0 (13.2 GiB under 1F1B) is the one adjusted rank. Units leave rank 0 only, arrive on
 * non-adjusted ranks only, in half layers; the layer total is kept; each move made the
 * simulated makespan strictly smaller and the result fits; a second run moves nothing. */
static void test_partition_adjust(void **state)
{
    (void)state;
    static const char *const src =
        "import \"std/schedules.pipe\"\nimport \"std/models.pipe\"\nimport \"std/devices.pipe\"\n"
        "pipeline pa { stages 4 microbatches 32 model llama2_7b { layers 8 } device a100_sxm_80g\n"
        "  memory 12GiB partition even schedule onef1b apply identify_adjusted(cmb=false) %s }\n";
    StrBuf s0 = {0}, s1 = {0}, s2 = {0};
    sb_printf(&s0, src, "");
    sb_printf(&s1, src, "apply partition_adjust");
    sb_printf(&s2, src, "apply partition_adjust apply partition_adjust");
    Built a, b, c;
    build(&a, s0.s);
    build(&b, s1.s);
    build(&c, s2.s);
    assert_non_null(a.p);
    assert_non_null(b.p);
    assert_non_null(c.p);
    static const uint8_t want_adj[4] = {1, 0, 0, 0};
    for (int32_t r = 0; r < 4; r++)
        assert_int_equal(a.p->adjusted[r], want_adj[r]);
    CostModel cm;
    Diag cd = {0};
    cd.out = fopen("/dev/null", "w");
    assert_int_equal(costmodel_init(&cd, a.p, &cm), 0);
    int64_t before[4];
    for (int32_t r = 0; r < 4; r++)
        before[r] = cm.ubeg[r + 1] - cm.ubeg[r];
    costmodel_free(&cm);
    for (int32_t r = 0; r < 4; r++)
        assert_int_equal(before[r], 4);
    assert_int_equal(b.p->npartition, 4);
    assert_true(fabs(part_sum(b.p) - 8) < 1e-9);
    assert_int_equal(costmodel_init(&cd, b.p, &cm), 0);
    int64_t moved = 0;
    for (int32_t r = 0; r < 4; r++) {
        int64_t u = cm.ubeg[r + 1] - cm.ubeg[r];
        if (r == 0)
            assert_true(u < before[0]); /* Algorithm 1 line 7 */
        else
            assert_true(u >= before[r]); /* line 8: non-adjusted ranks only gain */
        moved += r ? u - before[r] : 0;
    }
    assert_int_equal(moved, before[0] - (cm.ubeg[1] - cm.ubeg[0]));
    costmodel_free(&cm);
    fclose(cd.out);
    diag_free(&cd);
    assert_true(makespan(b.p) < makespan(a.p));
    assert_true(fits_all(b.p));
    assert_legal(b.p);
    char *pb = printed(b.p), *pc = printed(c.p);
    assert_string_equal(pb, pc);
    free(pb);
    free(pc);
    done(&a);
    done(&b);
    done(&c);
    free(s0.s);
    free(s1.s);
    free(s2.s);
    /* without a model: a warning, nothing moved */
    Built e;
    hand(&e, "", "apply partition_adjust\n");
    char *msg = diag_text(&e);
    assert_non_null(strstr(msg, "needs a model"));
    assert_int_equal(e.p->npartition, 0);
    free(msg);
    done(&e);
}

/* The half-layer units of each rank of p (one chunk). */
static void rank_units(Pipeline *p, int64_t *u)
{
    CostModel cm;
    Diag cd = {0};
    cd.out = fopen("/dev/null", "w");
    assert_int_equal(costmodel_init(&cd, p, &cm), 0);
    for (int32_t r = 0; r < p->P; r++)
        u[r] = cm.ubeg[r + 1] - cm.ubeg[r];
    costmodel_free(&cm);
    fclose(cd.out);
    diag_free(&cd);
}

/* Algorithm 1 line 6 picks b among the ranks that still fit: a move to the fastest
 * non-adjusted rank that would not fit is passed over for the next one, which here
 * takes the units (rank 1), where stopping at the first would have moved nothing. */
static void test_partition_adjust_skips_unfit(void **state)
{
    (void)state;
    static const char *const src =
        "import \"std/schedules.pipe\"\nimport \"std/models.pipe\"\nimport \"std/devices.pipe\"\n"
        "pipeline pa { stages 4 microbatches 16 model llama2_7b { layers 12 } device a100_sxm_80g\n"
        "  memory 20GiB partition [3.5, 2.5, 4.5, 1.5] schedule onef1b\n"
        "  apply identify_adjusted(cmb=false) %s }\n";
    StrBuf s0 = {0}, s1 = {0};
    sb_printf(&s0, src, "");
    sb_printf(&s1, src, "apply partition_adjust");
    Built a, b;
    build(&a, s0.s);
    build(&b, s1.s);
    assert_non_null(a.p);
    assert_non_null(b.p);
    assert_true(fits_all(a.p));
    static const uint8_t want_adj[4] = {1, 0, 0, 0};
    for (int32_t r = 0; r < 4; r++)
        assert_int_equal(a.p->adjusted[r], want_adj[r]);
    int64_t u0[4], u1[4];
    rank_units(a.p, u0);
    rank_units(b.p, u1);
    /* rank 3 is the fastest non-adjusted rank by 3 f_s, but one more unit there does
     * not fit: the units go to rank 1 */
    assert_true(3 * ir_cost(a.p, 3, 0, COST_F) < 3 * ir_cost(a.p, 1, 0, COST_F));
    assert_true(u1[0] < u0[0]);
    assert_int_equal(u1[1] - u0[1], u0[0] - u1[0]);
    assert_int_equal(u1[2], u0[2]);
    assert_int_equal(u1[3], u0[3]);
    assert_true(makespan(b.p) < makespan(a.p));
    assert_true(fits_all(b.p));
    assert_legal(b.p);
    done(&a);
    done(&b);
    free(s0.s);
    free(s1.s);
}

/* §6.2 and §9.2 on Llama-2 28B, M = 16: the whole planner fits the budget under the walk
 * and the arena, keeps Eq. 4's bandwidth bound on every swapping rank, is at least 1.2x
 * faster than DAPPLE+ (full recomputation everywhere) and at most as fast as 1F1B
 * without recomputation (which does not fit); a second run changes nothing. */
static void test_obscura_28b(void **state)
{
    (void)state;
    static const char *const src =
        "import \"std/schedules.pipe\"\nimport \"std/models.pipe\"\nimport \"std/devices.pipe\"\n"
        "pipeline l28 { stages 8 microbatches 16 model llama2_28b device a100_sxm_80g\n"
        "  partition even schedule onef1b %s }\n";
    StrBuf s[4] = {{0}};
    sb_printf(&s[0], src, "apply obscura");
    sb_printf(&s[1], src, "apply obscura apply obscura");
    sb_printf(&s[2], src, "apply recompute(stages=all, policy=full)");
    sb_printf(&s[3], src, "");
    Built o, o2, dp, non;
    build(&o, s[0].s);
    build(&o2, s[1].s);
    build(&dp, s[2].s);
    build(&non, s[3].s);
    if (!o.p)
        fail_msg("%s", diag_text(&o));
    assert_non_null(o.p);
    assert_non_null(o2.p);
    assert_non_null(dp.p);
    assert_non_null(non.p);
    assert_true(fits_all(o.p));
    assert_false(fits_all(non.p));
    double t_o = makespan(o.p), t_dp = makespan(dp.p), t_non = makespan(non.p);
    if (!(t_dp / t_o >= 1.2))
        fail_msg("obscura %.1f ms, DAPPLE+ %.1f ms, 1F1B %.1f ms", t_o, t_dp, t_non);
    assert_true(t_o >= t_non * (1 - 1e-9));
    for (int32_t r = 0; r < 8; r++) {
        const StageOps *st = &o.p->stages[r];
        bool swaps = false;
        for (uint32_t i = 0; i < st->n; i++)
            swaps |= st->ops[i].kind == OP_SO;
        if (!swaps)
            continue;
        assert_int_equal(o.p->adjusted[r], 1);
        double kept = ir_cost(o.p, r, 0, o.p->stage_policy[r] != POLICY_NONE ? COST_CKPT : COST_ACT);
        double f = ir_cost(o.p, r, 0, COST_F), rr = o.p->stage_policy[r] != POLICY_NONE ? ir_cost(o.p, r, 0, COST_R) : 0;
        double B = ir_cost(o.p, r, 0, COST_HOST_BW), beta = ir_cost(o.p, r, 0, COST_SWAP_FRACTION);
        assert_true(kept * beta <= (3 * f + rr) * 1e-3 * B); /* Eq. 4 */
    }
    char *a = printed(o.p), *b = printed(o2.p);
    assert_string_equal(a, b);
    free(a);
    free(b);
    done(&o);
    done(&o2);
    done(&dp);
    done(&non);
    for (int i = 0; i < 4; i++)
        free(s[i].s);
}

/* A stage range no source can write (it starts below 0) is refused by the passes that
 * take `stages`, naming the range, and the schedule is left as it was. */
static void test_stage_range_below_zero(void **state)
{
    (void)state;
    Built b;
    hand(&b, "", "");
    char *before = printed(b.p);
    Field arg = {0};
    arg.key = (char *)"stages";
    arg.val.kind = VAL_RANGE;
    arg.val.lo = -1;
    arg.val.hi = 1;
    PassCall call = {(char *)"forward_migration", &arg, 1, LOC_NONE};
    assert_int_equal(run_pass(&b.d, b.p, &call), 1);
    char *msg = diag_text(&b);
    assert_non_null(strstr(msg, "error[value]: stage range -1..1 is out of range: the "
                                "pipeline has 4 stages"));
    char *after = printed(b.p);
    assert_string_equal(before, after);
    free(msg);
    free(before);
    free(after);
    done(&b);
}

/* Inputs outside the 1F1B family get a `value` error naming the pass and what the rank
 * does wrong, not a crash. */
static void test_refuses(void **state)
{
    (void)state;
    static const struct {
        const char *src, *why;
    } cases[] = {
        {"import \"std/schedules.pipe\"\npipeline v { stages 2 microbatches 4 chunks 2 "
         "costs { f 1 b 2 } schedule interleaved apply forward_migration(stages=all) }\n",
         "needs one chunk per rank (the pipeline has 2)"},
        {"pipeline x { stages 2 microbatches 2 costs { f 1 b 2 }\n"
         "  stage 0 { F1 F0 B0 B1 } stage 1 { F0 B0 F1 B1 } apply dependency_relaxation(stages=all) }\n",
         "rank 0 lists its forwards out of micro-batch order"},
        {"pipeline w { stages 2 microbatches 2 costs { f 1 b 2 w 1 }\n"
         "  stage 0 { F0 F1 B0 W0 B1 W1 } stage 1 { F0 B0 W0 F1 B1 W1 } apply swap(stages=all) }\n",
         "rank 0 has W ops (split backwards are not supported)"},
        {"pipeline t { stages 2 microbatches 3 costs { f 1 b 2 }\n"
         "  stage 0 { F0 F0 F1 B0 B1 } stage 1 { F0 B0 F1 B1 F2 B2 } apply dependency_relaxation(stages=all) }\n",
         "rank 0 lists an op twice"},
        {"pipeline t { stages 2 microbatches 3 costs { f 1 b 2 }\n"
         "  stage 0 { F0 F1 B1 B0 } stage 1 { F0 B0 F1 B1 F2 B2 } apply dependency_relaxation(stages=all) }\n",
         "rank 0 lists its backwards out of micro-batch order"},
        {"pipeline t { stages 2 microbatches 3 costs { f 1 b 2 }\n"
         "  stage 0 { F0 B0 F1 F2 B1 B2 } stage 1 { F0 B0 F1 B1 F2 B2 } apply dependency_relaxation(stages=all) }\n",
         "rank 0 does not alternate forwards and backwards after its warm-up"},
        {"pipeline t { stages 2 microbatches 3 costs { f 1 b 2 }\n"
         "  stage 0 { F0 B0 } stage 1 { F0 B0 F1 B1 F2 B2 } apply dependency_relaxation(stages=all) }\n",
         "rank 0 does not list every forward and backward"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        Built b;
        build(&b, cases[i].src);
        assert_null(b.p);
        char *msg = diag_text(&b);
        if (!strstr(msg, "error[value]") || !strstr(msg, cases[i].why))
            fail_msg("case %zu: %s", i, msg);
        free(msg);
        done(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identify_adjusted),
        cmocka_unit_test(test_eq23),
        cmocka_unit_test(test_forward_migration),
        cmocka_unit_test(test_dependency_relaxation),
        cmocka_unit_test(test_migration_refinement),
        cmocka_unit_test(test_refinement_around_unadjusted),
        cmocka_unit_test(test_swap),
        cmocka_unit_test(test_swap_hidden),
        cmocka_unit_test(test_user_deps_kept),
        cmocka_unit_test(test_identify_cmb),
        cmocka_unit_test(test_partition_adjust),
        cmocka_unit_test(test_partition_adjust_skips_unfit),
        cmocka_unit_test(test_obscura_28b),
        cmocka_unit_test(test_refuses),
        cmocka_unit_test(test_stage_range_below_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
