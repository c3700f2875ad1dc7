/* test_arena_plan.c - static memory planning on small schedules planned by hand, and the
 * compiler's mlp region sizes against runtime/models/mlp.c.
 *
 * Sizes are multiples of 64 so alignment does not blur the arithmetic. Time is list
 * position: op i allocates at 2i and frees at 2i+1 (arena_plan.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "arena_plan.h"
#include "emit_c.h"
#include "ir.h"
#include "memory.h"
#include "mlp.h"
#include "testutil.h"

static ArenaPlan *plan1(Pipeline *p, int64_t act, int64_t ckpt, int64_t wact, int full)
{
    ArenaSizes z = {.act = act, .ckpt = ckpt, .wact = wact};
    return arena_plan(p, &z, full);
}

/* Where op i of rank s finds byte x of its region (its piece's offset + x - the piece's
 * start), -1 when the op's region has no such piece. */
static int64_t where(const ArenaPlan *a, int s, uint32_t i, int64_t x)
{
    const ArenaRank *r = &a->rank[s];
    const int64_t *from = a->from[0];
    int k = pr_region_piece(from, x);
    return r->at[i][k] < 0 ? -1 : r->at[i][k] + (x - from[k]);
}

/* arena_plan_report's table for p (cost-model sizes) under the line naming `what`
 * (caller frees). */
static char *report_text(const Pipeline *p, const char *what)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    arena_plan_report(f, p, NULL, NULL, what);
    fclose(f);
    return text;
}

/* Two live regions side by side; then reuse when lifetimes do not overlap. */
static void test_gpipe_vs_1f1b(void **st)
{
    (void)st;
    Pipeline *p = one(2, 1, "F0 F1 B0 B1");
    ArenaPlan *a = plan1(p, 100, 0, 0, 1); /* 100 -> 128 aligned */
    assert_int_equal(a->rank[0].size, 256);
    assert_int_equal(a->rank[0].peak_live, 256);
    assert_int_equal(where(a, 0, 0, 0), 0);
    assert_int_equal(where(a, 0, 1, 0), 128);
    assert_int_equal(where(a, 0, 2, 0), 0);   /* B0 works on F0's region */
    assert_int_equal(a->rank[0].held[0], 128);
    arena_plan_free(a);
    pipeline_free(p);

    p = one(2, 1, "F0 B0 F1 B1");
    a = plan1(p, 128, 0, 0, 1);
    assert_int_equal(a->rank[0].size, 128);   /* B0 frees at its end, F1 reuses */
    assert_int_equal(where(a, 0, 2, 0), 0);
    arena_plan_free(a);
    pipeline_free(p);
}

/* Recompute: F keeps the 128-byte checkpoint, R allocates the other 896 bytes in a
 * place of its own (the checkpoint stays where F put it).
 *   pos 0 F0 ckpt t0..7 | pos 1 F1 ckpt t2..11 | pos 2 R0 rest t4..7 | 3 B0
 *   pos 4 R1 rest t8..11 | pos 5 B1
 * First fit: ckpt0 at 0, ckpt1 at 128, rest0 at 256 (its region is split: 128 bytes
 * at 0, the rest at 256), rest1 reuses 256. Peak live at R0: 128 + 128 + 896 = 1152,
 * which is also the arena. */
static void test_recompute(void **st)
{
    (void)st;
    Pipeline *p = one(2, 1, "F0 F1 R0 B0 R1 B1");
    ArenaPlan *a = plan1(p, 1024, 128, 0, 1);
    const ArenaRank *r = &a->rank[0];
    assert_int_equal(r->peak_live, 1152);
    assert_int_equal(where(a, 0, 0, 0), 0);
    assert_int_equal(where(a, 0, 1, 0), 128);
    assert_int_equal(r->size, 1152);
    assert_int_equal(r->held[0], 128);   /* F0 allocates the checkpoint */
    assert_int_equal(r->held[2], 896);   /* R0 the rest */
    assert_int_equal(where(a, 0, 2, 0), 0);      /* R0: checkpoint at 0 ... */
    assert_int_equal(where(a, 0, 2, 128), 256);   /* ... the rest at 256 */
    assert_int_equal(where(a, 0, 3, 128), 256);   /* B0 sees both parts */
    assert_int_equal(where(a, 0, 4, 0), 128);
    assert_int_equal(where(a, 0, 4, 128), 256);   /* R1 reuses R0's place */
    assert_int_equal(where(a, 0, 0, 128), -1);    /* F0: only the checkpoint */
    arena_plan_free(a);
    pipeline_free(p);
}

/* Layer-granular recomputation (docs/spec.md "Memory"): the same schedule as
 * test_recompute with ract = 192 (one layer of a stage whose act - ckpt is 896): R
 * allocates 192 bytes above the checkpoint, not 896. Peak at R0: 128 + 128 + 192 = 448,
 * the arena too; R0's rebuilt layer at 256, R1 reuses it; bytes past ckpt + ract are in
 * no op's region. A ract at or above act - ckpt is the whole stage (test_recompute). */
static void test_recompute_layer(void **st)
{
    (void)st;
    Pipeline *p = one(2, 1, "F0 F1 R0 B0 R1 B1");
    ArenaSizes z = {.act = 1024, .ckpt = 128, .wact = 0, .ract = 192};
    ArenaPlan *a = arena_plan(p, &z, 1);
    const ArenaRank *r = &a->rank[0];
    assert_int_equal(r->peak_live, 448);
    assert_int_equal(r->size, 448);
    assert_int_equal(r->held[2], 192);            /* R0: one layer */
    assert_int_equal(r->alloc[2], 192);
    assert_int_equal(where(a, 0, 2, 0), 0);       /* the checkpoint stays */
    assert_int_equal(where(a, 0, 2, 128), 256);   /* the layer above it */
    assert_int_equal(where(a, 0, 4, 128), 256);   /* R1 reuses R0's place */
    arena_plan_free(a);
    z.ract = 2048; /* more than act - ckpt: the whole stage */
    a = arena_plan(p, &z, 1);
    assert_int_equal(a->rank[0].peak_live, 1152);
    arena_plan_free(a);
    pipeline_free(p);
}

/* An empty checkpoint (the mlp model's embedding slice: its input is the token ids, kept
 * outside the arena): F allocates nothing and R rebuilds the whole region, which lives
 * in one place from R to B.
 *   pos 0 F0 | 1 F1 | 2 R0 [0,1024) t4..9 | 3 R1 must not reuse 0 while R0's region
 *   lives: 1024 | 4 B0 at 0 | 5 B1 at 1024. Peak 2048 = arena. */
static void test_recompute_empty_ckpt(void **st)
{
    (void)st;
    Pipeline *p = one(2, 1, "F0 F1 R0 R1 B0 B1");
    ArenaPlan *a = plan1(p, 1024, 0, 0, 1);
    const ArenaRank *r = &a->rank[0];
    assert_int_equal(r->held[0], 0);     /* F0 keeps nothing */
    assert_int_equal(r->held[2], 1024);  /* R0 the whole region */
    assert_int_equal(where(a, 0, 2, 0), 0);
    assert_int_equal(where(a, 0, 2, 1023), 1023); /* in one place */
    assert_int_equal(where(a, 0, 3, 0), 1024);   /* R1 beside it */
    assert_int_equal(where(a, 0, 4, 0), 0);      /* B0 finds R0's bytes */
    assert_int_equal(where(a, 0, 4, 1023), 1023);
    assert_int_equal(where(a, 0, 5, 0), 1024);
    assert_int_equal(r->peak_live, 2048);
    assert_int_equal(r->size, 2048);
    arena_plan_free(a);
    pipeline_free(p);
}

/* 1F1B on one rank with full recomputation and a uniform model (act 1024, ckpt 128):
 * three checkpoints in flight. The walk of docs/spec.md "Memory" peaks at each R: 3 * 128 + 896 = 1280;
 * the arena equals it (fragmentation 1). */
static void test_1f1b_recompute_tight(void **st)
{
    (void)st;
    Pipeline *p = one(5, 1, "F0 F1 F2 R0 B0 F3 R1 B1 F4 R2 B2 R3 B3 R4 B4");
    ArenaPlan *a = plan1(p, 1024, 128, 0, 1);
    assert_int_equal(a->rank[0].peak_live, 1280);
    assert_int_equal(a->rank[0].size, 1280);
    arena_plan_free(a);
    pipeline_free(p);
}

/* R and a split W: act 1024, ckpt 128, wact 512.
 *   pos 0 F0 ckpt t0..9 (to W0's end) | 1 F1 ckpt t2.. | 2 R0 rest [128,1024) t4:
 *   [128,512) lives to W0 (t9), [512,1024) to B0 (t7) | 3 B0 | 4 W0 | 5 R1 | 6 B1 | 7 W1
 * ckpt0 0, ckpt1 128, rest0 256; rest1 at t10 reuses 256. Peak 128 + 128 + 896 = 1152
 * at R0; B0 keeps 512 bytes of (0,0). */
static void test_recompute_w(void **st)
{
    (void)st;
    Pipeline *p = one(2, 1, "F0 F1 R0 B0 W0 R1 B1 W1");
    ArenaPlan *a = plan1(p, 1024, 128, 512, 1);
    const ArenaRank *r = &a->rank[0];
    assert_int_equal(r->peak_live, 1152);
    assert_int_equal(r->size, 1152);
    assert_int_equal(r->held[3], 512);
    assert_int_equal(where(a, 0, 4, 0), 0);      /* W0: checkpoint part */
    assert_int_equal(where(a, 0, 4, 128), 256);   /* and the rest of its wact */
    assert_int_equal(where(a, 0, 5, 128), 256);
    arena_plan_free(a);
    pipeline_free(p);
}

/* SO/SI and R of the same micro-batch (act 1024, ckpt 128; F1 keeps everything):
 *   0 F0 ckpt t0..3 | 1 SO0 frees it at t3 | 2 F1 (t4) reuses 0, 1024 bytes
 *   3 SI0 (t6) brings 128 back at 1024 | 4 R0 (t8) rest at 1152 | 5 B0 | 6 B1
 * Peak at R0: 1024 + 128 + 896 = 2048 = arena. */
static void test_swap_recompute(void **st)
{
    (void)st;
    Pipeline *p = one(2, 1, "F0 SO0 F1 SI0 R0 B0 B1");
    ArenaPlan *a = plan1(p, 1024, 128, 0, 1);
    const ArenaRank *r = &a->rank[0];
    assert_int_equal(r->held[1], 128);
    assert_int_equal(where(a, 0, 2, 0), 0);
    assert_int_equal(where(a, 0, 3, 0), 1024);
    assert_int_equal(r->held[3], 128);
    assert_int_equal(where(a, 0, 4, 0), 1024);
    assert_int_equal(where(a, 0, 4, 128), 1152);
    assert_int_equal(where(a, 0, 5, 128), 1152);
    assert_int_equal(r->size, 2048);
    assert_int_equal(r->peak_live, 2048);
    arena_plan_free(a);
    pipeline_free(p);
}

/* Split backward: B0 frees all but the 256-byte wact prefix, W0 frees that.
 *   pos 0 F0 | 1 B0 (frees [256,1024) at t3) | 2 F1 (t4) | 3 W0 (frees [0,256) at t7)
 * F1 needs 1024 contiguous bytes while [0,256) lives: first fit at 256; arena 1280,
 * peak 256 + 1024 = 1280. */
static void test_split_w(void **st)
{
    (void)st;
    Pipeline *p = one(2, 1, "F0 B0 F1 W0 B1 W1");
    ArenaPlan *a = plan1(p, 1024, 0, 256, 1);
    assert_int_equal(where(a, 0, 2, 0), 256);
    assert_int_equal(a->rank[0].size, 1280);
    assert_int_equal(a->rank[0].peak_live, 1280);
    arena_plan_free(a);
    pipeline_free(p);
}

/* Swap: SO0 frees region 0 at its end (t3), F1 (t4) reuses offset 0, SI0 (t6) brings
 * region 0 back elsewhere (128) and B0 works there. With swap_fraction 0.5 and no full
 * swap the SO frees the top 64 bytes only: F1 fits at 64, the SI's 64 bytes go to 192,
 * (region bytes [64, 128)); B0 names the part that stayed at 0; peak 64 + 128 + 64 =
 * 256. */
static void test_swap(void **st)
{
    (void)st;
    Pipeline *p = one(2, 1, "F0 SO0 F1 SI0 B0 B1");
    ArenaPlan *a = plan1(p, 128, 0, 0, 1);
    const ArenaRank *r = &a->rank[0];
    assert_int_equal(where(a, 0, 0, 0), 0);
    assert_int_equal(where(a, 0, 1, 0), 0);      /* SO reads from the old place */
    assert_int_equal(where(a, 0, 2, 0), 0);      /* F1 reuses it */
    assert_int_equal(where(a, 0, 3, 0), 128);    /* SI writes to the new place */
    assert_int_equal(where(a, 0, 4, 0), 128);    /* B0 works there */
    assert_int_equal(r->held[1], 128);
    assert_int_equal(r->held[3], 128);
    assert_int_equal(r->size, 256);
    assert_int_equal(r->peak_live, 256);
    arena_plan_free(a);

    p->costs.v[COST_SWAP_FRACTION] = 0.5;
    p->costs.set |= 1u << COST_SWAP_FRACTION;
    a = plan1(p, 128, 0, 0, 0);
    assert_int_equal(a->rank[0].held[1], 64);
    assert_int_equal(where(a, 0, 2, 0), 64);
    assert_int_equal(where(a, 0, 3, 64), 192);
    assert_int_equal(where(a, 0, 4, 0), 0);
    assert_int_equal(a->rank[0].size, 256);
    assert_int_equal(a->rank[0].peak_live, 256);
    arena_plan_free(a);
    pipeline_free(p);
}

/* Whether the F/B-only plan of rank s is a packing: every piece [at, at + len) of a
 * (chunk, mb) region lives, at one place, from its F's start (list time 2i) to its B's
 * end (2j + 1), and no two pieces that live at once overlap. Checked from the ops, the
 * piece boundaries and the offsets alone. */
static bool fb_packing_ok(const Pipeline *p, const ArenaPlan *ap, int s)
{
    const ArenaRank *r = &ap->rank[s];
    const StageOps *so = &p->stages[s];
    int64_t(*blk)[4] = calloc((size_t)so->n * ARENA_PIECES, sizeof *blk); /* lo, hi, t0, t1 */
    size_t nb = 0;
    bool ok = true;
    for (uint32_t i = 0; i < so->n; i++) {
        if (so->ops[i].kind != OP_F)
            continue;
        uint32_t j = i + 1;
        while (j < so->n && !(so->ops[j].kind == OP_B && so->ops[j].mb == so->ops[i].mb &&
                              so->ops[j].chunk == so->ops[i].chunk))
            j++;
        const int64_t *from = ap->from[ir_vstage(p, s, so->ops[i].chunk)];
        ok = ok && j < so->n;
        for (int k = 0; ok && k < ARENA_PIECES; k++) {
            if (from[k] == from[k + 1])
                continue;
            int64_t at = r->at[i][k];
            ok = at >= 0 && r->at[j][k] == at && at + from[k + 1] - from[k] <= r->size;
            blk[nb][0] = at;
            blk[nb][1] = at + from[k + 1] - from[k];
            blk[nb][2] = 2 * (int64_t)i;
            blk[nb][3] = 2 * (int64_t)j + 1;
            nb++;
        }
    }
    for (size_t a = 0; a < nb; a++)
        for (size_t b = a + 1; b < nb; b++)
            if (blk[a][2] <= blk[b][3] && blk[b][2] <= blk[a][3] && blk[a][0] < blk[b][1] &&
                blk[b][0] < blk[a][1])
                ok = false;
    free(blk);
    return ok;
}

/* Interleaved 1F1B with V = 4 on 8 ranks, 32 micro-batches, and the region sizes of
 * Llama-2 18B partitioned evenly over 32 virtual stages (examples/llama2_18b_1f1b.pipe
 * with `chunks 4`): 128 regions of two or three sizes per rank, where first fit and the
 * greedy orders leave 12% above the walk's peak on ranks 4 and 6. The exact search
 * reaches the peak there, and every plan is a packing. */
static void test_interleaved_v4(void **st)
{
    (void)st;
    static const int64_t kib[32] = {
        1140000, 1417856, 1139968, 1417856, 1139968, 1417856, 1139968, 1417856,
        1139968, 1417856, 1139968, 1417856, 1139968, 1417856, 1139968, 1417856,
        1705216, 1705216, 1705216, 1705216, 1705216, 1705216, 1705216, 1705216,
        1705216, 1705216, 1705216, 1705216, 1705216, 1705216, 1705216, 2596096};
    Pipeline *p = mk(8, 32, 4);
    gen_interleaved(p);
    ArenaSizes sz[32];
    for (int v = 0; v < 32; v++)
        sz[v] = (ArenaSizes){.act = kib[v] * 1024};
    ArenaPlan *a = arena_plan(p, sz, 1);
    for (int s = 0; s < 8; s++) {
        const ArenaRank *r = &a->rank[s];
        assert_true(fb_packing_ok(p, a, s));
        assert_true(r->size >= r->peak_live);
        if (s == 4 || s == 6)
            assert_int_equal(r->size, r->peak_live);
    }
    arena_plan_free(a);

    /* The budget check on 8 x A100-80GB (78 GiB each, with the example's weights): a
     * rank has a `memory` error from the arena exactly when its walk is over the budget
     * too (ranks 0-3): the arena fits wherever the walk fits. */
    static const int64_t wkib[8] = {35574880, 36373600, 33014880, 36373600,
                                    33014880, 36373600, 33014880, 38933680};
    for (int v = 0; v < 32; v++)
        set_cost(&p->vstage_costs[v], COST_ACT, (double)kib[v] * 1024);
    for (int s = 0; s < 8; s++)
        set_cost(&p->stage_costs[s], COST_WEIGHTS, (double)wkib[s] * 1024);
    p->has_memory = true;
    p->memory = 78.0 * 1024 * 1024 * 1024;
    MemRank m[8];
    mem_walk(p, m);
    char *text = NULL;
    size_t len = 0;
    Diag d = {0};
    d.out = open_memstream(&text, &len);
    int nerr = arena_check(&d, p);
    fclose(d.out);
    int nover = 0;
    for (int s = 0; s < 8; s++) {
        char what[32];
        snprintf(what, sizeof what, "stage %d: ", s);
        bool over = m[s].peak > p->memory;
        nover += over;
        if (over != (strstr(text, what) != NULL))
            fail_msg("rank %d: walk peak %.0f, budget %.0f, arena error: %s", s, m[s].peak,
                     p->memory, over ? "no" : "yes");
    }
    assert_int_equal(nover, 4);
    assert_int_equal(nerr, nover);
    free(text);
    diag_free(&d);
    pipeline_free(p);
}

/* Bad input never crashes: a B without F, a W before B, ops out of range. */
static void test_malformed(void **st)
{
    (void)st;
    Pipeline *p = one(3, 1, "B0 W1 B1 F2 SI2 SO2 B2");
    ArenaPlan *a = plan1(p, 128, 64, 64, 1);
    assert_int_equal(where(a, 0, 0, 0), -1);
    assert_true(a->rank[0].size >= 0);
    arena_plan_free(a);
    pipeline_free(p);
}

/* Misordered ops of a (v,m) are planned as arena_plan.h says, conservatively: an R
 * outside F..B is ignored (F keeps the whole act, as without R), a W before its B too
 * (the region ends at B), and an SO/SI pair moves nothing unless it lies between F and
 * the region's end with no R, B or W of it in between. Each arena is the size of the
 * schedule's without the misordered ops. */
static void test_misordered(void **st)
{
    (void)st;
    static const char *const pairs[][2] = {
        {"F0 F1 B0 B1 R0", "F0 F1 B0 B1"},             /* R after B */
        {"R0 F0 F1 B0 B1", "F0 F1 B0 B1"},             /* R before F */
        {"F0 F1 W0 B0 B1", "F0 F1 B0 B1"},             /* W before B */
        {"SO0 SI0 F0 F1 B0 B1", "F0 F1 B0 B1"},        /* a swap before F */
        {"F0 SO0 F1 B1 B0", "F0 F1 B1 B0"},            /* an SO without SI */
        {"F0 SI0 SO0 F1 B0 B1", "F0 F1 B0 B1"},        /* SI before SO */
        {"F0 SO0 F1 B0 SI0 B1", "F0 F1 B0 B1"},        /* B between SO and SI */
        {"F0 SO0 F1 R0 SI0 B0 B1", "F0 F1 R0 B0 B1"},  /* R between SO and SI */
        {"F0 SO0 F1 B0 B1 SI0", "F0 F1 B0 B1"},        /* SI after B */
    };
    for (size_t i = 0; i < ARRAY_LEN(pairs); i++) {
        Pipeline *p = one(2, 1, pairs[i][0]), *q = one(2, 1, pairs[i][1]);
        ArenaPlan *a = plan1(p, 128, 64, 64, 1), *b = plan1(q, 128, 64, 64, 1);
        assert_int_equal(a->rank[0].size, b->rank[0].size);
        arena_plan_free(a);
        arena_plan_free(b);
        pipeline_free(p);
        pipeline_free(q);
    }
}

/* The budget check: weights + arena against memory, exactly at budget passes. */
static void test_budget(void **st)
{
    (void)st;
    Pipeline *p = one(2, 1, "F0 F1 B0 B1");
    p->costs.v[COST_ACT] = 1024;
    p->costs.v[COST_WEIGHTS] = 4096;
    p->costs.set |= (1u << COST_ACT) | (1u << COST_WEIGHTS);
    p->has_memory = true;
    p->memory = 4096 + 2048;          /* exactly weights + two regions */
    Diag d = {0};
    d.out = fopen("/dev/null", "w");
    assert_int_equal(arena_check(&d, p), 0);
    p->memory -= 1;
    assert_int_equal(arena_check(&d, p), 1);
    assert_int_equal(d.ncode[DIAG_MEMORY], 1);
    char *text = report_text(p, "the cost model's act, ckpt and wact");
    assert_non_null(strstr(text, "  sizes: the cost model's act, ckpt and wact\n"));
    free(text);
    fclose(d.out);
    diag_free(&d);
    pipeline_free(p);
}

/* The budget check's verdict is the full plan's: a rank passes exactly when weights +
 * arena + workspace fit. Checked at budgets around the full plan's arena and around an
 * upper bound worked out here by hand (every F, R and SI allocating a whole act, or
 * ckpt + the R's part: what arena_check may decide a rank by without planning), on
 * ranks with packing loss, recomputation, split backwards and swaps. */
static void test_budget_verdict(void **st)
{
    (void)st;
    static const struct {
        const char *list;
        int M;
        double act, ckpt, wact, frac;
    } cases[] = {
        {"F0 F1 B0 B1", 2, 1024, 0, 0, 1},
        {"F0 B0 F1 W0 B1 W1", 2, 1024, 0, 256, 1},
        {"F0 F1 F2 R0 B0 F3 R1 B1 F4 R2 B2 R3 B3 R4 B4", 5, 1024, 128, 0, 1},
        {"F0 F1 R0 B0 W0 R1 B1 W1", 2, 1024, 128, 512, 1},
        {"F0 SO0 F1 SI0 R0 B0 B1", 2, 1024, 128, 0, 1},
        {"F0 SO0 F1 SI0 B0 B1", 2, 128, 0, 0, 0.5},
        {"F0 F1 F2 B1 F3 B0 B3 B2", 4, 640, 0, 0, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        Pipeline *p = one(cases[c].M, 1, cases[c].list);
        set_cost(&p->costs, COST_ACT, cases[c].act);
        if (cases[c].ckpt > 0)
            set_cost(&p->costs, COST_CKPT, cases[c].ckpt);
        if (cases[c].wact > 0)
            set_cost(&p->costs, COST_WACT, cases[c].wact);
        if (cases[c].frac < 1)
            set_cost(&p->costs, COST_SWAP_FRACTION, cases[c].frac);
        set_cost(&p->costs, COST_WEIGHTS, 4096);
        ArenaPlan *a = arena_plan(p, NULL, 0);
        double base = 4096 + arena_workspace(p, 0);
        double size = (double)a->rank[0].size;
        double bound = 0; /* no ract: ckpt + what an R rebuilds is act */
        for (uint32_t i = 0; i < p->stages[0].n; i++) {
            OpKind k = (OpKind)p->stages[0].ops[i].kind;
            if (k == OP_F || k == OP_R || k == OP_SI)
                bound += cases[c].act;
        }
        assert_true(bound >= size);
        const double budgets[] = {size - 64, size - 1, size, (size + bound) / 2, bound - 1,
                                  bound, bound + 1, 1e15};
        p->has_memory = true;
        for (size_t b = 0; b < sizeof budgets / sizeof *budgets; b++) {
            p->memory = base + budgets[b];
            Diag d = {0};
            d.out = fopen("/dev/null", "w");
            int want = budgets[b] < size ? 1 : 0;
            assert_int_equal(arena_check(&d, p), want);
            assert_int_equal(d.nerr, want);
            fclose(d.out);
            diag_free(&d);
        }
        arena_plan_free(a);
        pipeline_free(p);
    }
}

/* The code generator plans with the runtime's act, ckpt and wact (mlp_layout.h) for many
 * shapes: mlp_region_sizes hands it the shape in the right order. */
static void test_mlp_sizes(void **st)
{
    (void)st;
    int shapes[][5] = {{256, 64, 4, 64, 4}, {256, 16, 4, 8, 2}, {7, 3, 5, 5, 3},
                       {1, 1, 1, 1, 1}, {300, 33, 7, 9, 1}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        MlpConfig c = {shapes[k][0], shapes[k][1], shapes[k][2], shapes[k][3], shapes[k][4], 4};
        for (int nl = 0; nl <= c.L; nl++)
            for (int e = 0; e < 2; e++)
                for (int h = 0; h < 2; h++) {
                    MlpSlice s = {0, 0, nl, e, h, false};
                    ArenaSizes z = mlp_region_sizes(c.vocab, c.C, c.T, c.B, nl, e, h);
                    assert_int_equal(z.act, (int64_t)mlp_act_bytes(&c, &s));
                    assert_int_equal(z.ckpt, (int64_t)mlp_ckpt_bytes(&c, &s));
                    assert_int_equal(z.wact, (int64_t)mlp_wact_bytes(&c, &s));
                }
    }
}

/* Sizes beyond 2^62 bytes are clamped to 4e18 (arena_plan.h), and a budget that large
 * leaves room for anything: the plan is the plain one. */
static void test_huge_sizes(void **st)
{
    (void)st;
    Pipeline *p = one(2, 1, "F0 F1 B0 B1");
    set_cost(&p->costs, COST_ACT, 1e20);
    set_cost(&p->costs, COST_CKPT, 1e3);
    ArenaSizes *sz = arena_sizes_from_costs(p);
    assert_int_equal(sz[0].act, 4000000000000000000LL);
    assert_int_equal(sz[0].ckpt, 1000);          /* aligned by the planner, not here */
    assert_int_equal(sz[0].wact, sz[0].act);     /* wact defaults to act, clamped too */
    free(sz);

    ArenaPlan *a = arena_plan_within(p, NULL, 0, 1e30, false);
    ArenaPlan *b = arena_plan(p, NULL, 0);
    assert_int_equal(a->rank[0].size, 2 * 4000000000000000000LL);
    assert_int_equal(a->rank[0].size, b->rank[0].size);
    assert_int_equal(a->rank[0].peak_live, a->rank[0].size);
    arena_plan_free(a);
    arena_plan_free(b);
    pipeline_free(p);
}

/* A stage without activations (act 0): nothing is placed, the arena is empty, and the
 * report calls it unfragmented (1.000) rather than dividing by zero. */
static void test_no_activations(void **st)
{
    (void)st;
    Pipeline *p = one(2, 1, "F0 F1 B0 B1");
    set_cost(&p->costs, COST_WEIGHTS, 2048);
    ArenaPlan *a = arena_plan(p, NULL, 0);
    assert_int_equal(a->rank[0].size, 0);
    assert_int_equal(a->rank[0].peak_live, 0);
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(a->rank[0].at[i][0], -1);
    arena_plan_free(a);
    char *text = report_text(p, "none");
    assert_non_null(strstr(text, "\n    0          0 B          0 B    1.000      2.0 KiB      2.0 KiB            -\n"));
    free(text);
    pipeline_free(p);
}

/* The budget check over a rank with no ops: its weights alone exceed the budget, so it
 * gets the error, with no "live activations peak" note (there is no op to point at);
 * the other rank fits. The report prints the budget column in the same units. */
static void test_budget_empty_rank(void **st)
{
    (void)st;
    Pipeline *p = mk(2, 1, 1);
    ops(p, 0, "F0 B0");
    ops(p, 1, "");
    set_cost(&p->costs, COST_ACT, 1024);
    set_cost(&p->stage_costs[1], COST_WEIGHTS, 8 << 20);
    p->has_memory = true;
    p->memory = 4 << 20;
    char *text = NULL;
    size_t len = 0;
    Diag d = {0};
    d.out = open_memstream(&text, &len);
    assert_int_equal(arena_check(&d, p), 1);
    fflush(d.out);
    assert_non_null(strstr(text, "stage 1: static arena 0 B + weights 8.0 MiB = 8.0 MiB "
                                 "exceeds the budget 4.0 MiB by 4.0 MiB"));
    assert_null(strstr(text, "live activations peak"));
    fclose(d.out);
    free(text);
    diag_free(&d);
    text = report_text(p, "costs");
    assert_non_null(strstr(text, "\n    0      1.0 KiB      1.0 KiB    1.000          0 B      1.0 KiB      4.0 MiB\n"));
    assert_non_null(strstr(text, "\n    1          0 B          0 B    1.000      8.0 MiB      8.0 MiB      4.0 MiB\n"));
    free(text);
    pipeline_free(p);
}

/* Quick mode (the search loops' plan) skips the exact search and the shuffled orders:
 * on the interleaved case where only the exact search reaches the peak it may leave a
 * gap, never an arena below the walk's peak, and never one below the full plan's. */
static void test_quick(void **st)
{
    (void)st;
    Pipeline *p = mk(4, 8, 2);
    gen_interleaved(p);
    set_cost(&p->costs, COST_ACT, 3 << 10);
    for (int v = 0; v < 8; v += 3)
        set_cost(&p->vstage_costs[v], COST_ACT, 1 << 10);
    ArenaPlan *full = arena_plan(p, NULL, 0);
    ArenaPlan *quick = arena_plan_within(p, NULL, 0, 0, true);
    for (int s = 0; s < p->P; s++) {
        assert_int_equal(quick->rank[s].peak_live, full->rank[s].peak_live);
        assert_true(quick->rank[s].size >= full->rank[s].size);
        assert_true(full->rank[s].size >= full->rank[s].peak_live);
        assert_true(fb_packing_ok(p, quick, s));
    }
    arena_plan_free(full);
    arena_plan_free(quick);
    pipeline_free(p);
}

/* A (v,m) whose B comes before its F, or that has no B, gets no region (arena_plan.h:
 * "left without a region"): its ops name no place, and the arena holds only the other
 * micro-batch's region, though the walk, which counts every F, peaks higher. */
static void test_unpaired(void **st)
{
    (void)st;
    static const struct {
        const char *list;
        uint32_t f0, f1;        /* list positions of F0 and F1 */
    } cases[] = {{"B0 F0 F1 B1", 1, 2}, {"F0 F1 B1", 0, 1}};
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        Pipeline *p = one(2, 1, cases[i].list);
        ArenaPlan *a = plan1(p, 128, 64, 64, 1);
        const ArenaRank *r = &a->rank[0];
        assert_int_equal(where(a, 0, cases[i].f0, 0), -1);
        assert_int_equal(where(a, 0, cases[i].f1, 0), 0);
        assert_int_equal(r->size, 128);
        assert_int_equal(r->peak_live, 256);
        arena_plan_free(a);
        pipeline_free(p);
    }
}

/* Shapes and ops the checker rejects, planned as arena_plan.h says: no ranks, no chunks
 * or no micro-batches (every op without a region), ops out of range or of unknown kind
 * (no region, nothing allocated), a duplicate (the first occurrence is the region's). */
static void test_bad_ir(void **st)
{
    (void)st;
    Pipeline *p = mk(0, 1, 1);
    ArenaPlan *a = arena_plan(p, NULL, 1);
    assert_int_equal(a->P, 0);
    arena_plan_free(a);
    pipeline_free(p);
    for (int c = 0; c < 2; c++) {
        p = mk(1, c ? 0 : 1, c ? 1 : 0);
        push(p, 0, OP_F, 0, 0);
        push(p, 0, OP_B, 0, 0);
        a = plan1(p, 128, 0, 0, 1);
        assert_int_equal(a->rank[0].nops, 2);
        assert_int_equal(a->rank[0].size, 0);
        assert_int_equal(a->rank[0].at[0][0], -1);
        assert_int_equal(a->rank[0].at[1][0], -1);
        arena_plan_free(a);
        pipeline_free(p);
    }
    /* 0 F0 | 1 F0.1 (V = 1) | 2 F5 (M = 1) | 3 op of kind 99 | 4 F0 again | 5 B0 */
    p = one(1, 1, "F0");
    push(p, 0, OP_F, 0, 1);
    push(p, 0, OP_F, 5, 0);
    push(p, 0, (OpKind)99, 0, 0);
    ops(p, 0, "F0 B0");
    a = plan1(p, 128, 0, 0, 1);
    const ArenaRank *r = &a->rank[0];
    assert_int_equal(where(a, 0, 0, 0), 0);
    assert_int_equal(where(a, 0, 5, 0), 0);
    for (uint32_t i = 1; i <= 3; i++) {
        assert_int_equal(r->at[i][0], -1);
        assert_int_equal(r->alloc[i], 0);
        assert_int_equal(r->freed[i], 0);
    }
    assert_int_equal(r->held[4], 0);
    assert_int_equal(r->size, 128);
    arena_plan_free(a);
    pipeline_free(p);
}

/* A full swap of a region that R has rebuilt (F0 R0 SO0 SI0 B0, act 1024, ckpt 128): R
 * adds the 896 bytes above the checkpoint as a part of their own, the SO moves and frees
 * both parts (the whole 1024), the SI brings the 1024 back in one piece, where B works.
 *   0 F0 [0,128) | 1 R0 [128,1024) | 2 SO0 frees both at t5 | 3 SI0 (t6) | 4 B0 */
static void test_swap_after_recompute(void **st)
{
    (void)st;
    Pipeline *p = one(1, 1, "F0 R0 SO0 SI0 B0");
    ArenaPlan *a = plan1(p, 1024, 128, 0, 1);
    const ArenaRank *r = &a->rank[0];
    assert_int_equal(r->held[2], 1024);
    assert_int_equal(r->held[3], 1024);
    assert_int_equal(where(a, 0, 2, 0), where(a, 0, 0, 0));
    assert_int_equal(where(a, 0, 2, 128), where(a, 0, 1, 128));
    assert_int_equal(where(a, 0, 4, 0), where(a, 0, 3, 0));
    assert_int_equal(where(a, 0, 4, 1000), where(a, 0, 3, 0) + 1000);
    assert_int_equal(r->size, r->peak_live);
    arena_plan_free(a);
    pipeline_free(p);
}

/* Partial swaps (swap_fraction < 1, not full_swap) that move nothing: a fraction of
 * under 64 bytes of the region (0.25 of 128 rounds down to 0), and a (v,m) with an R
 * (the region is rebuilt, not swapped). The SO and SI hold 0 bytes and name the place
 * F wrote; the arena is the region. */
static void test_partial_swap_moves_nothing(void **st)
{
    (void)st;
    static const char *const lists[] = {"F0 SO0 SI0 B0", "F0 SO0 SI0 R0 B0"};
    for (size_t c = 0; c < ARRAY_LEN(lists); c++) {
        Pipeline *p = one(1, 1, lists[c]);
        set_cost(&p->costs, COST_SWAP_FRACTION, 0.25);
        ArenaPlan *a = plan1(p, 128, c ? 128 : 0, 0, 0);
        assert_int_equal(a->rank[0].held[1], 0);
        assert_int_equal(a->rank[0].held[2], 0);
        assert_int_equal(where(a, 0, 1, 0), 0);
        assert_int_equal(a->rank[0].size, 128);
        arena_plan_free(a);
        pipeline_free(p);
    }
}

/* B of a region that a partial swap has split, with W (F0 SO0 SI0 B0 W0, act 128, wact
 * 64, swap_fraction 0.5): SO moves [64, 128) out and frees it at t3, SI (t4) brings it
 * back as a part of its own, first fit at the same 64; B keeps [0, 64) for W, which
 * stayed in place, and ends the part that came back. Arena 128. With wact 0 (F0 B0 W0)
 * B keeps nothing and W has no region. */
static void test_split_region_b(void **st)
{
    (void)st;
    Pipeline *p = one(1, 1, "F0 SO0 SI0 B0 W0");
    set_cost(&p->costs, COST_SWAP_FRACTION, 0.5);
    ArenaPlan *a = plan1(p, 128, 0, 64, 0);
    const ArenaRank *r = &a->rank[0];
    assert_int_equal(r->held[1], 64);
    assert_int_equal(r->held[3], 64);
    assert_int_equal(where(a, 0, 3, 0), 0);
    assert_int_equal(where(a, 0, 4, 0), 0);
    assert_int_equal(where(a, 0, 2, 64), 64);
    assert_int_equal(where(a, 0, 3, 64), 64);
    assert_int_equal(r->size, 128);
    arena_plan_free(a);
    pipeline_free(p);
    p = one(1, 1, "F0 B0 W0");
    a = plan1(p, 128, 0, 0, 1);
    assert_int_equal(a->rank[0].held[1], 0);
    assert_int_equal(where(a, 0, 2, 0), -1);
    assert_int_equal(a->rank[0].size, 128);
    arena_plan_free(a);
    pipeline_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpipe_vs_1f1b), cmocka_unit_test(test_recompute),
        cmocka_unit_test(test_split_w),       cmocka_unit_test(test_swap),
        cmocka_unit_test(test_malformed),     cmocka_unit_test(test_budget),
        cmocka_unit_test(test_mlp_sizes),     cmocka_unit_test(test_1f1b_recompute_tight),
        cmocka_unit_test(test_recompute_w),   cmocka_unit_test(test_swap_recompute),
        cmocka_unit_test(test_recompute_empty_ckpt), cmocka_unit_test(test_misordered),
        cmocka_unit_test(test_interleaved_v4),
        cmocka_unit_test(test_huge_sizes),    cmocka_unit_test(test_no_activations),
        cmocka_unit_test(test_budget_empty_rank), cmocka_unit_test(test_quick),
        cmocka_unit_test(test_unpaired),
        cmocka_unit_test(test_bad_ir),
        cmocka_unit_test(test_swap_after_recompute),
        cmocka_unit_test(test_partial_swap_moves_nothing),
        cmocka_unit_test(test_split_region_b),
        cmocka_unit_test(test_recompute_layer),
        cmocka_unit_test(test_budget_verdict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
