/* test_stream_plan.c - the CUDA backend's stream plan (plan/streams.h) and its
 * verifier (compiler/generation/stream_check.h): every example's plan passes, random schedules
 * with W, R, SO/SI, OG/LW and deps pass, and the plan the runtime used before (an SI
 * waiting only for the last SO: finding 1 of the CUDA review) is rejected, on
 * examples/demo.pipe and on a four-op case built by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>

#include "arena_plan.h"
#include "comm.h"
#include "driver.h"
#include "emit_c.h"
#include "stream_check.h"
#include "testutil.h"

static Pipeline *load(const char *path)
{
    setenv("PIPEC_STDLIB", "stdlib", 0);
    DriverOpts o = {0};
    Diag d = {0};
    d.out = fopen("/dev/null", "w");
    Pipeline *p = driver_compile(&d, &o, path);
    fclose(d.out);
    diag_free(&d);
    return p;
}

/* The plan of p checked against the arena plan of region sizes sz (NULL: cost model). */
/* stream_plan_verify over the plans built once as `emit --backend cuda` builds them
 * (emit_plans_build: the objects the emitter writes); json (may be NULL) gets
 * streams.json written from the same plan. */
static int verify(const Pipeline *p, StrBuf *json, char *why, size_t n)
{
    WorkloadShape shape;
    model_shape_of(p, &shape);
    EmitPlans pl;
    emit_plans_build(&pl, p, &shape, true);
    int nbad = stream_plan_verify(p, &pl.sin.in, pl.streams, pl.plan_syn, pl.plan_mlp, why, n);
    if (json)
        stream_plan_json(json, p, pl.streams);
    emit_plans_free(&pl);
    model_shape_free(&shape);
    return nbad;
}

static int verify_sizes(const Pipeline *p, const ArenaSizes *sz, char *why, size_t n)
{
    CommPlan *cp = comm_plan(p);
    StreamInBuf b;
    stream_in_build(&b, p, cp);
    StreamPlan *sp = stream_plan(&b.in);
    assert_non_null(sp);
    ArenaPlan *ap = arena_plan(p, sz, 1);
    int nbad = stream_plan_check(p, &b.in, sp, ap, why, n);
    arena_plan_free(ap);
    stream_plan_free(sp);
    stream_in_free(&b);
    comm_plan_free(cp);
    return nbad;
}

/* The waits the CUDA runtime made before the stream plan (piperun_cuda.c's enqueue_op):
 * SO after the compute op before it, SI after the last SO, F/R after the last SO, B/R
 * after SI(v,m), F after LW, OG after the compute op before it. Messages as planned. */
static StreamPlan *legacy_plan(const StreamIn *in)
{
    StreamPlan *sp = stream_plan(in);
    assert_non_null(sp);
    for (uint32_t r = 0; r < in->P; r++) {
        StreamRank *k = &sp->rank[r];
        uint32_t n = k->nops;
        size_t nvm = (size_t)in->PV * (size_t)in->M;
        int64_t *si_of = malloc(nvm * sizeof *si_of), *lw_of = malloc((size_t)in->PV * sizeof *lw_of);
        for (size_t x = 0; x < nvm; x++)
            si_of[x] = -1;
        for (int32_t v = 0; v < in->PV; v++)
            lw_of[v] = -1;
        int64_t last_comp = -1, last_so = -1;
        uint32_t nw = 0;
        for (uint32_t i = 0; i < n; i++) {
            const SpOp *o = &in->ops[r][i];
            size_t vmk = (size_t)o->vstage * (size_t)in->M + (size_t)o->mb;
            k->wstart[i] = nw;
            int64_t w[3] = {-1, -1, -1};
            switch (o->kind) {
            case OP_OG: w[0] = last_comp; break;
            case OP_LW: lw_of[o->vstage] = i; break;
            case OP_SO: w[0] = last_comp; last_so = i; break;
            case OP_SI: w[0] = last_so; si_of[vmk] = i; break;
            default:
                if (o->kind == OP_F || o->kind == OP_R)
                    w[0] = last_so;
                if (o->kind == OP_B || o->kind == OP_R)
                    w[1] = si_of[vmk];
                if (o->kind == OP_F)
                    w[2] = lw_of[o->vstage];
                last_comp = i;
            }
            for (int x = 0; x < 3; x++)
                if (w[x] >= 0 && k->stream[w[x]] != k->stream[i])
                    k->waits[nw++] = (uint32_t)w[x];
        }
        k->wstart[n] = nw;
        free(si_of);
        free(lw_of);
    }
    return sp;
}

static int legacy_check(const Pipeline *p, char *why, size_t n)
{
    CommPlan *cp = comm_plan(p);
    StreamInBuf b;
    stream_in_build(&b, p, cp);
    StreamPlan *sp = legacy_plan(&b.in);
    ArenaPlan *ap = arena_plan(p, NULL, 1);
    int nbad = stream_plan_check(p, &b.in, sp, ap, why, n);
    arena_plan_free(ap);
    stream_plan_free(sp);
    stream_in_free(&b);
    comm_plan_free(cp);
    return nbad;
}

/* Every example: the plan passes the verifier for the cost model's arena and, where
 * the mlp workload runs, for its arena; streams.json has one entry per op. */
static void test_examples(void **state)
{
    (void)state;
    DIR *dir = opendir("examples");
    assert_non_null(dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(dir))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".pipe") || !example_checked(e->d_name))
            continue;
        char path[512], why[512];
        snprintf(path, sizeof path, "examples/%s", e->d_name);
        Pipeline *p = load(path);
        if (!p)
            fail_msg("%s does not compile", path);
        StrBuf js = {0};
        int nbad = verify(p, &js, why, sizeof why);
        if (nbad)
            fail_msg("%s: %d violations; %s", path, nbad, why);
        uint32_t nops = 0;
        for (int32_t s = 0; s < p->P; s++)
            nops += p->stages[s].n;
        uint32_t entries = 0;
        for (const char *c = js.s; (c = strstr(c, "\"stream\": ")); c++)
            entries++;
        assert_int_equal(entries, nops);
        sb_free(&js);
        MlpShape mlp;
        char mwhy[200];
        if (mlp_shape(p, &mlp, mwhy, sizeof mwhy) == 0) {
            nbad = verify_sizes(p, mlp.sizes, why, sizeof why);
            if (nbad)
                fail_msg("%s (mlp arena): %d violations; %s", path, nbad, why);
            mlp_shape_free(&mlp);
        }
        pipeline_free(p);
        n++;
    }
    closedir(dir);
    assert_true(n >= (plain_complement() ? 5 : 10));
}

/* Finding 1 on examples/demo.pipe: rank 1 lists SO1 B0 SI1; the old plan orders SI1 only
 * after SO1, so SI1 can land in the region B0 still reads. */
static void test_finding1_demo(void **state)
{
    (void)state;
    Pipeline *p = load("examples/demo.pipe");
    assert_non_null(p);
    char why[512];
    int nbad = legacy_check(p, why, sizeof why);
    assert_true(nbad > 0);
    print_message("old plan: %s\n", why);
    assert_non_null(strstr(why, "rank 1: SI1 (#8) may overwrite arena bytes"));
    assert_non_null(strstr(why, "that B0 (#7) writes before B0 ends"));
    assert_int_equal(verify(p, NULL, why, sizeof why), 0);
    pipeline_free(p);
}

/* The same by hand: F0 SO0 F1 B1 SI0 B0 on one rank, equal regions. F1 reuses what SO0
 * freed, SI0 what B1 freed: without the wait SI0 -> B1 the copy may overwrite the
 * region B1 still works on. */
static void test_finding1_small(void **state)
{
    (void)state;
    Pipeline *p = one(2, 1, "F0 SO0 F1 B1 SI0 B0");
    set_cost(&p->costs, COST_ACT, 4096);
    char why[512];
    assert_true(legacy_check(p, why, sizeof why) > 0);
    assert_non_null(strstr(why, "SI0 (#4) may overwrite arena bytes"));
    assert_non_null(strstr(why, "that B1 (#3) writes before B1 ends"));
    assert_int_equal(verify(p, NULL, why, sizeof why), 0);
    /* the plan has that wait, and SI0 waits for SO0's copy out through SO0 itself */
    CommPlan *cp = comm_plan(p);
    StreamInBuf b;
    stream_in_build(&b, p, cp);
    StreamPlan *sp = stream_plan(&b.in);
    const StreamRank *k = &sp->rank[0];
    assert_int_equal(k->stream[4], STREAM_H2D);
    assert_int_equal(k->wstart[5] - k->wstart[4], 2);
    assert_int_equal(k->waits[k->wstart[4]], 1);
    assert_int_equal(k->waits[k->wstart[4] + 1], 3);
    /* dropping the wait on B1 is caught */
    k->waits[k->wstart[4] + 1] = 1;
    ArenaPlan *ap = arena_plan(p, NULL, 1);
    assert_true(stream_plan_check(p, &b.in, sp, ap, why, sizeof why) > 0);
    arena_plan_free(ap);
    stream_plan_free(sp);
    stream_in_free(&b);
    comm_plan_free(cp);
    pipeline_free(p);
}

/* ---- random schedules ----------------------------------------------------------------- */

static uint64_t rng;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return n ? (uint32_t)(rng % n) : 0;
}

typedef struct Keyed {
    double key;
    Op op;
} Keyed;

static int cmp_keyed(const void *a, const void *b)
{
    double x = ((const Keyed *)a)->key, y = ((const Keyed *)b)->key;
    return (x > y) - (x < y);
}

static double between(double a, double b)
{
    return a + (b - a) * (0.05 + 0.9 * (double)rnd(1000) / 1000.0);
}

/* A random valid schedule: 1F1B or interleaved, then per (v,m) maybe R, W, SO/SI, per
 * chunk maybe LW ... OG, and a few cross-rank deps. */
static Pipeline *random_schedule(void)
{
    int P = 1 + (int)rnd(4), V = 1 + (int)rnd(2), M = P * (1 + (int)rnd(3));
    Pipeline *p = mk(P, M, V);
    if (V == 1)
        gen_1f1b(p);
    else
        gen_interleaved(p);
    set_cost(&p->costs, COST_ACT, 64.0 * (1 + rnd(8)));
    set_cost(&p->costs, COST_CKPT, 64.0 * rnd(3));
    set_cost(&p->costs, COST_WACT, 64.0 * (1 + rnd(3)));
    for (int s = 0; s < P; s++) {
        StageOps *so = &p->stages[s];
        size_t n = so->n, cap = n * 4 + 8, k = 0;
        Keyed *ks = malloc(cap * sizeof *ks);
        for (uint32_t i = 0; i < so->n; i++)
            ks[k++] = (Keyed){10.0 * i + 10, so->ops[i]};
        for (int c = 0; c < V; c++) {
            double first = 1e18, lastbw = 0;
            for (int m = 0; m < M; m++) {
                double f = -1, b = -1;
                for (size_t i = 0; i < n; i++)
                    if (ks[i].op.chunk == c && ks[i].op.mb == (uint32_t)m)
                        (ks[i].op.kind == OP_F ? &f : &b)[0] = ks[i].key;
                if (f < 0 || b < 0)
                    continue;
                first = f < first ? f : first;
                double lo = f, hi = b;
                if (rnd(3) == 0) { /* SO, SI */
                    double so_k = between(lo, hi), si_k = between(so_k, hi);
                    ks[k++] = (Keyed){so_k, {(uint32_t)m, OP_SO, (uint8_t)c, 0, LOC_NONE}};
                    ks[k++] = (Keyed){si_k, {(uint32_t)m, OP_SI, (uint8_t)c, 0, LOC_NONE}};
                    lo = si_k;
                }
                if (rnd(3) == 0) /* R */
                    ks[k++] = (Keyed){between(lo, hi), {(uint32_t)m, OP_R, (uint8_t)c, 0, LOC_NONE}};
                double end = b;
                if (rnd(2) == 0) { /* W, anywhere after B */
                    end = between(b, 10.0 * n + 20);
                    ks[k++] = (Keyed){end, {(uint32_t)m, OP_W, (uint8_t)c, 0, LOC_NONE}};
                }
                lastbw = end > lastbw ? end : lastbw;
            }
            if (first < 1e18 && rnd(3) == 0) { /* LW before the chunk's first F, OG after its last B/W */
                ks[k++] = (Keyed){between(0, first), {0, OP_LW, (uint8_t)c, 0, LOC_NONE}};
                ks[k++] = (Keyed){between(lastbw, 10.0 * n + 30), {0, OP_OG, (uint8_t)c, 0, LOC_NONE}};
            }
        }
        qsort(ks, k, sizeof *ks, cmp_keyed);
        so->n = 0;
        for (size_t i = 0; i < k; i++)
            push(p, s, (OpKind)ks[i].op.kind, ks[i].op.mb, ks[i].op.chunk);
        free(ks);
    }
    for (int d = 0; P > 1 && d < (int)rnd(3); d++) {
        int a = (int)rnd((uint32_t)P), b = (a + 1 + (int)rnd((uint32_t)P - 1)) % P;
        add_dep(p, a, OP_F, rnd((uint32_t)M), b, OP_B, rnd((uint32_t)M));
    }
    return p;
}

/* 400 random schedules (`make test`: the first 100 of the same 400). */
static void test_random(void **state)
{
    (void)state;
    rng = 0x9e3779b97f4a7c15ull;
    int caught = 0, n = test_full() ? 400 : 100;
    for (int t = 0; t < n; t++) {
        Pipeline *p = random_schedule();
        char why[512];
        int nbad = verify(p, NULL, why, sizeof why);
        if (nbad) {
            char *txt = ops_text(p, 0);
            fail_msg("random schedule %d: %d violations; %s (stage 0: %s)", t, nbad, why, txt);
        }
        caught += legacy_check(p, why, sizeof why) > 0;
        pipeline_free(p);
    }
    /* the old plan fails on a good share of them (one in 20 at least): the verifier has
     * teeth */
    assert_true(caught >= n / 20);
}

/* Plan shapes: a send waits for its producer's end, wherever the producer runs (a dep
 * from an SO), and the consumer of a receive is where it is waited for (a dep into an
 * SI: the h2d stream waits, not the compute stream). */
static void test_message_shapes(void **state)
{
    (void)state;
    Pipeline *p = mk(2, 2, 1);
    gen_1f1b(p);
    /* stage 0: F0 F1 B0 B1 -> F0 SO0 F1 SI0 B0 B1; stage 1: F0 B0 F1 B1 -> F0 SO0 SI0 B0 ... */
    StageOps *s0 = &p->stages[0];
    s0->n = 0;
    ops(p, 0, "F0 SO0 F1 SI0 B0 B1");
    p->stages[1].n = 0;
    ops(p, 1, "F0 SO0 SI0 B0 F1 B1");
    size_t cap = p->depcap;
    Dep dp = {{0, 1, OP_SO, 0}, {0, 0, OP_SI, 0}, LOC_NONE}; /* 1:SO0 -> 0:SI0 */
    VEC_PUSH(p->deps, p->ndeps, cap, dp);
    p->depcap = (uint32_t)cap;
    CommPlan *cp = comm_plan(p);
    StreamInBuf b;
    stream_in_build(&b, p, cp);
    StreamPlan *sp = stream_plan(&b.in);
    int found = 0;
    for (uint32_t j = 0; j < cp->nmsgs; j++) {
        const CommMsg *m = &cp->msgs[j];
        if (m->src == 1 && m->src_pos == 1) { /* from SO0 of stage 1 */
            assert_int_equal(sp->send_after[j], 1);
            assert_int_equal(m->dst_pos, 3);
            const StreamRank *k = &sp->rank[0];
            assert_int_equal(k->stream[3], STREAM_H2D);
            bool in = false;
            for (uint32_t x = k->rstart[3]; x < k->rstart[4]; x++)
                in |= k->recvs[x] == j;
            assert_true(in);
            found++;
        }
    }
    assert_int_equal(found, 1);
    /* the send of F0's activation waits for F0, not for the SO listed after it */
    for (uint32_t j = 0; j < cp->nmsgs; j++)
        if (cp->msgs[j].src == 0 && cp->msgs[j].src_pos == 0)
            assert_int_equal(sp->send_after[j], 0);
    char why[256];
    ArenaPlan *ap = arena_plan(p, NULL, 1);
    assert_int_equal(stream_plan_check(p, &b.in, sp, ap, why, sizeof why), 0);
    /* a consumer that does not wait for its receive is caught */
    StreamRank *k = &sp->rank[0];
    for (uint32_t x = 0; x < k->rstart[k->nops]; x++)
        k->recvs[x] = UINT32_MAX;
    assert_true(stream_plan_check(p, &b.in, sp, ap, why, sizeof why) > 0);
    assert_non_null(strstr(why, "no receive is waited for"));
    arena_plan_free(ap);
    stream_plan_free(sp);
    stream_in_free(&b);
    comm_plan_free(cp);
    pipeline_free(p);
}

/* Fix 2's shape: every send waits for its own producer only (stage 0 of 1F1B sends
 * F0's activation after F0, not after the warm-up's last F), and an op waits for the
 * receives of its own messages only. */
static void test_send_at_producer(void **state)
{
    (void)state;
    for (int V = 1; V <= 2; V++) {
        Pipeline *p = mk(4, 8, V);
        if (V == 1)
            gen_1f1b(p);
        else
            gen_interleaved(p);
        CommPlan *cp = comm_plan(p);
        StreamInBuf b;
        stream_in_build(&b, p, cp);
        StreamPlan *sp = stream_plan(&b.in);
        assert_true(cp->nmsgs > 0);
        for (uint32_t j = 0; j < cp->nmsgs; j++) {
            const CommMsg *m = &cp->msgs[j];
            assert_int_equal(sp->send_after[j], m->src_pos);
            const StreamRank *k = &sp->rank[m->dst];
            uint32_t hits = 0;
            for (uint32_t i = 0; i < k->nops; i++)
                for (uint32_t x = k->rstart[i]; x < k->rstart[i + 1]; x++)
                    if (k->recvs[x] == j) {
                        assert_int_equal(i, m->dst_pos);
                        hits++;
                    }
            assert_int_equal(hits, 1);
        }
        /* stage 0's first message goes out after F0 (position 0) */
        bool first = false;
        for (uint32_t j = 0; j < cp->nmsgs; j++)
            if (cp->msgs[j].src == 0 && cp->msgs[j].src_pos == 0)
                first = sp->send_after[j] == 0;
        assert_true(first);
        stream_plan_free(sp);
        stream_in_free(&b);
        comm_plan_free(cp);
        pipeline_free(p);
    }
}

/* What the verifier checks a plan against: the comm plan, the plan's input and the
 * cost-model arena plan (full swap) of one pipeline. */
typedef struct Inputs {
    CommPlan *cp;
    StreamInBuf b;
    ArenaPlan *ap;
} Inputs;

static void inputs_open(Inputs *x, const Pipeline *p)
{
    x->cp = comm_plan(p);
    stream_in_build(&x->b, p, x->cp);
    x->ap = arena_plan(p, NULL, 1);
}

static void inputs_close(Inputs *x)
{
    arena_plan_free(x->ap);
    stream_in_free(&x->b);
    comm_plan_free(x->cp);
}

/* The verifier catches each kind of broken plan it documents (stream_check.h): a wait
 * on an op not listed before, a send that may leave before its producer ends, a consumer
 * that waits for no receive. Each corruption of the correct plan of 1F1B (P = 2, M = 4,
 * with W and SO/SI on stage 0, so that every stream has ops) is reported, with the ops
 * named, with the arena plan and without one; the uncorrupted plan passes. */
static void test_verifier_rejects(void **state)
{
    (void)state;
    Pipeline *p = mk(2, 4, 1);
    ops(p, 0, "F0 F1 SO0 F2 B1 W1 SI0 B0 W0 F3 B2 W2 B3 W3");
    ops(p, 1, "F0 B0 F1 B1 F2 B2 F3 B3");
    set_cost(&p->costs, COST_ACT, 4096);
    set_cost(&p->costs, COST_WACT, 1024);
    Inputs x;
    inputs_open(&x, p);
    const CommPlan *cp = x.cp;
    char why[512];
    for (int corrupt = 0; corrupt < 5; corrupt++) {
        StreamPlan *sp = stream_plan(&x.b.in);
        why[0] = 0;
        const char *want = NULL;
        StreamRank *k = &sp->rank[0];
        if (corrupt == 1) { /* the first wait of stage 0 names its own op */
            uint32_t i = 0;
            while (i < k->nops && k->wstart[i + 1] == k->wstart[i])
                i++;
            assert_true(i < k->nops);
            k->waits[k->wstart[i]] = i;
            want = "which is not listed before it (its event is not recorded yet)";
        } else if (corrupt == 2 || corrupt == 3) {
            /* a message stage 0 sends after a B (position > 0): its send waits for op 0
             * (which ends before the producer) or for no op of the rank at all */
            uint32_t j = 0;
            while (j < cp->nmsgs && !(cp->msgs[j].src == 0 && cp->msgs[j].src_pos > 0))
                j++;
            assert_true(j < cp->nmsgs);
            sp->send_after[j] = corrupt == 2 ? 0 : k->nops;
            want = "which may end before the producer";
        } else if (corrupt == 4) { /* stage 1's receives are dropped */
            StreamRank *k1 = &sp->rank[1];
            for (uint32_t x = 0; x < k1->rstart[k1->nops]; x++)
                k1->recvs[x] = sp->nmsgs;
            want = "arrives: no receive is waited for";
        }
        /* with the arena plan, and without one (ap NULL: waits and messages only) */
        for (int with_ap = 1; with_ap >= 0; with_ap--) {
            int nbad = stream_plan_check(p, &x.b.in, sp, with_ap ? x.ap : NULL, why, sizeof why);
            if (!want) {
                assert_int_equal(nbad, 0);
            } else {
                assert_true(nbad > 0);
                assert_non_null(strstr(why, want));
                assert_non_null(strstr(why, "rank "));
            }
        }
        stream_plan_free(sp);
    }
    inputs_close(&x);
    pipeline_free(p);
}

/* Ops the plan cannot place (an unknown kind, a virtual stage or micro-batch out of
 * range) get their table stream (compute for an unknown kind) and no waits, and nothing
 * waits for them; a message naming a rank or position that does not exist gets no
 * receive. The runtime links the plan as it is, so a bad input must not crash it. */
static void test_unknown_ops(void **state)
{
    (void)state;
    /* one rank, PV = 1, M = 1: F0, then three ops it cannot place, then B0 */
    const SpOp ops0[] = {{OP_F, 0, 0}, {99, 0, 0}, {OP_SO, 5, 0}, {OP_SI, 0, 7}, {OP_B, 0, 0}};
    const SpOp *const ops[] = {ops0};
    const uint32_t nops[] = {5};
    const SpMsg msgs[] = {{0, 0, 3, 0}, {0, 0, 0, 9}};
    StreamIn in = {.P = 1, .PV = 1, .M = 1, .ops = ops, .nops = nops, .msgs = msgs, .nmsgs = 2};
    StreamPlan *sp = stream_plan(&in);
    assert_non_null(sp);
    const StreamRank *k = &sp->rank[0];
    assert_int_equal(k->stream[1], STREAM_COMPUTE);
    assert_int_equal(k->stream[2], STREAM_D2H);
    assert_int_equal(k->stream[3], STREAM_H2D);
    for (uint32_t i = 1; i <= 3; i++)
        assert_int_equal(k->wstart[i + 1] - k->wstart[i], 0);
    for (uint32_t x = k->wstart[4]; x < k->wstart[5]; x++)
        assert_true(k->waits[x] == 0 || k->waits[x] > 3);
    assert_int_equal(k->rstart[k->nops], 0); /* neither message is received */
    stream_plan_free(sp);
}

/* The plan's edges: stream names, a rank without ops, no ranks, PV or M of 0 (every op
 * unplaceable: no waits), ops with a negative virtual stage or micro-batch, and a
 * duplicate op (the SI waits for the later SO of its (v,m), the latest of that stream). */
static void test_plan_edges(void **state)
{
    (void)state;
    assert_string_equal(stream_name(STREAM_D2H), "d2h");
    assert_string_equal(stream_name(STREAM_N), "?");
    /* rank 0: F0 SO0 SO0 SI0 (SO duplicated), then SO with v = -1 and SI with m = -1;
     * rank 1: nothing */
    const SpOp ops0[] = {{OP_F, 0, 0}, {OP_SO, 0, 0}, {OP_SO, 0, 0}, {OP_SI, 0, 0},
                         {OP_SO, -1, 0}, {OP_SI, 0, -1}};
    const SpOp *const ops[] = {ops0, NULL};
    const uint32_t nops[] = {6, 0};
    StreamIn in = {.P = 2, .PV = 2, .M = 1, .ops = ops, .nops = nops};
    StreamPlan *sp = stream_plan(&in);
    assert_non_null(sp);
    const StreamRank *k = &sp->rank[0];
    assert_int_equal(k->wstart[4] - k->wstart[3], 1);
    assert_int_equal(k->waits[k->wstart[3]], 2);
    assert_int_equal(k->wstart[6] - k->wstart[4], 0);
    assert_int_equal(sp->rank[1].nops, 0);
    assert_int_equal(sp->rank[1].wstart[0], 0);
    stream_plan_free(sp);
    /* PV = 0, then M = 0: nothing can be placed, so nothing waits */
    for (int c = 0; c < 2; c++) {
        in.PV = c == 0 ? 0 : 2;
        in.M = c == 0 ? 1 : 0;
        sp = stream_plan(&in);
        assert_non_null(sp);
        assert_int_equal(sp->rank[0].wstart[6], 0);
        assert_int_equal(sp->rank[0].stream[1], STREAM_D2H);
        char why[200];
        assert_int_equal(stream_plan_check(NULL, &in, sp, NULL, why, sizeof why), 0);
        stream_plan_free(sp);
    }
    /* no ranks at all */
    in.P = 0;
    sp = stream_plan(&in);
    assert_non_null(sp);
    assert_int_equal(sp->P, 0);
    stream_plan_free(sp);
}

/* The verifier on inputs the front end never gives: ops it cannot place are skipped, a
 * message naming a rank that does not exist is skipped, one whose consumer position
 * does not exist is reported (named "op #9"); with no room for the description
 * (why_n = 0) the count is the same. No comm plan: no messages. */
static void test_verifier_bad_input(void **state)
{
    (void)state;
    Pipeline *p = mk(1, 1, 1);
    ops(p, 0, "F0 B0");
    StreamInBuf b;
    stream_in_build(&b, p, NULL);
    assert_int_equal(b.in.nmsgs, 0);
    stream_in_free(&b);
    assert_null(b.ops);
    stream_in_free(&b); /* an emptied buffer frees nothing more */
    assert_int_equal(b.in.P, 0);
    const SpOp ops0[] = {{OP_F, 0, 0}, {99, 0, 0}, {OP_SO, 5, 0}, {OP_SI, 0, 7},
                         {OP_SO, -1, 0}, {OP_SI, 0, -1}, {OP_B, 0, 0}};
    const SpOp *const ops[] = {ops0};
    const uint32_t nops[] = {7};
    const SpMsg msgs[] = {{0, 0, 3, 0}, {3, 0, 0, 0}, {0, 0, 0, 9}};
    StreamIn in = {.P = 1, .PV = 1, .M = 1, .ops = ops, .nops = nops, .msgs = msgs, .nmsgs = 3};
    StreamPlan *sp = stream_plan(&in);
    char why[300];
    assert_int_equal(stream_plan_check(p, &in, sp, NULL, why, sizeof why), 1);
    assert_string_equal(why, "rank 0: op #9 (#9) may start before message 2 (F0 of rank 0) "
                             "arrives: no receive is waited for");
    assert_int_equal(stream_plan_check(p, &in, sp, NULL, NULL, 0), 1);
    stream_plan_free(sp);
    pipeline_free(p);
}

/* The verifier's orders through same-stream order, and the reads it catches. On 1F1B
 * P = 2, M = 4 (stage 1: F0 B0 F1 B1 ...): a send that waits for an op listed after its
 * producer on the producer's stream, and a consumer whose receive is waited for by the
 * op before it on its stream, are both correct; a receive moved to the op after the
 * consumer is not. Then a swap-out whose waits are dropped may read the arena bytes its
 * F writes, and an F whose waits are dropped may read the weights its LW writes. */
static void test_verifier_orders(void **state)
{
    (void)state;
    Pipeline *p = mk(2, 4, 1);
    gen_1f1b(p);
    set_cost(&p->costs, COST_ACT, 4096);
    Inputs x;
    inputs_open(&x, p);
    char why[300];
    /* stage 0: F0 F1 B0 F2 B1 F3 B2 B3; the message of F0 (#0) sent after F1 (#1) */
    StreamPlan *sp = stream_plan(&x.b.in);
    uint32_t j = 0;
    while (!(x.cp->msgs[j].src == 0 && x.cp->msgs[j].src_pos == 0))
        j++;
    sp->send_after[j] = 1;
    assert_int_equal(stream_plan_check(p, &x.b.in, sp, x.ap, why, sizeof why), 0);
    stream_plan_free(sp);
    /* stage 1: F0 B0 F1 ...; the receive of F1 (#2) moved to B0 (#1), then to B1 (#3) */
    StreamRank *k;
    for (int later = 0; later < 2; later++) {
        sp = stream_plan(&x.b.in);
        k = &sp->rank[1];
        assert_int_equal(k->rstart[2] - k->rstart[1], 0);
        assert_int_equal(k->rstart[3] - k->rstart[2], 1);
        assert_int_equal(k->rstart[4] - k->rstart[3], 0);
        if (later)
            k->rstart[3]--;
        else
            k->rstart[2]++;
        int nbad = stream_plan_check(p, &x.b.in, sp, x.ap, why, sizeof why);
        if (later) {
            assert_int_equal(nbad, 1);
            assert_non_null(strstr(why, "rank 1: F1 (#2) may start before message"));
        } else {
            assert_int_equal(nbad, 0);
        }
        stream_plan_free(sp);
    }
    inputs_close(&x);
    pipeline_free(p);

    /* F0 SO0 SI0 B0: SO0 (#1) waits for F0 (#0) only; without it, it may read what F0
     * is still writing */
    p = one(1, 1, "F0 SO0 SI0 B0");
    set_cost(&p->costs, COST_ACT, 4096);
    set_cost(&p->costs, COST_HOST_BW, 1e9);
    inputs_open(&x, p);
    sp = stream_plan(&x.b.in);
    k = &sp->rank[0];
    assert_int_equal(k->wstart[2] - k->wstart[1], 1);
    assert_int_equal(stream_plan_check(p, &x.b.in, sp, x.ap, why, sizeof why), 0);
    k->wstart[2] = k->wstart[1];
    int nbad = stream_plan_check(p, &x.b.in, sp, x.ap, why, sizeof why);
    assert_true(nbad > 0);
    assert_non_null(strstr(why, "rank 0: SO0 (#1) may read arena bytes [0, "));
    assert_non_null(strstr(why, ") that F0 (#0) writes before F0 ends: no wait orders them"));
    assert_int_equal(stream_plan_check(p, &x.b.in, sp, x.ap, NULL, 0), nbad);
    stream_plan_free(sp);
    inputs_close(&x);
    pipeline_free(p);

    /* LW0 F0 B0 OG0: F0 (#1) reads the weights LW0 (#0) writes (no arena plan needed) */
    p = mk(1, 1, 1);
    push(p, 0, OP_LW, 0, 0);
    ops(p, 0, "F0 B0");
    push(p, 0, OP_OG, 0, 0);
    inputs_open(&x, p);
    sp = stream_plan(&x.b.in);
    k = &sp->rank[0];
    assert_int_equal(stream_plan_check(p, &x.b.in, sp, NULL, why, sizeof why), 0);
    k->wstart[2] = k->wstart[1];
    assert_true(stream_plan_check(p, &x.b.in, sp, NULL, why, sizeof why) > 0);
    assert_string_equal(why, "rank 0: F0 (#1) may read model-state bytes [0, 1) that LW0 (#0) "
                             "writes before LW0 ends: no wait orders them");
    stream_plan_free(sp);
    inputs_close(&x);
    pipeline_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_examples),
        cmocka_unit_test(test_finding1_demo),
        cmocka_unit_test(test_finding1_small),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_message_shapes),
        cmocka_unit_test(test_send_at_producer),
        cmocka_unit_test(test_verifier_rejects),
        cmocka_unit_test(test_unknown_ops),
        cmocka_unit_test(test_plan_edges),
        cmocka_unit_test(test_verifier_bad_input),
        cmocka_unit_test(test_verifier_orders),
    };
    if (plain_complement()) /* only the examples the sanitizer build leaves out */
        cmocka_set_test_filter("test_examples");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
