/* test_costmodel.c - the cost model (costmodel.h) and the `recompute` pass.
 *
 * Every expected number is worked out by hand in the comment above its assertion from
 * the published formula (docs/cost-model.md), not copied from the implementation:
 * Korthikanti et al. 2022 for activation bytes, Narayanan et al. 2021 for FLOPs, 16
 * bytes per parameter for mixed-precision Adam. Pipelines are built directly in the IR,
 * so these tests do not depend on the front end. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "costmodel.h"
#include "diag.h"
#include "ir.h"
#include "passes.h"
#include "util.h"
#include "testutil.h"

#define GiB (1024.0 * 1024.0 * 1024.0)

/* |a - b| <= 1e-12 |b| (exact up to rounding of the double arithmetic) */
#define assert_near(a, b)                                                                 \
    do {                                                                                  \
        double a_ = (a), b_ = (b);                                                        \
        if (!(fabs(a_ - b_) <= 1e-12 * fabs(b_) + 1e-9)) {                                \
            print_error("%s = %.17g, expected %.17g\n", #a, a_, b_);                      \
            fail();                                                                       \
        }                                                                                 \
    } while (0)

/* A derived cost a of field f whose unrounded value is b: derive_costs keeps it at the
 * resolution print writes (cost_quantise: 1 ns for times, whole bytes), so a is b
 * rounded to that resolution, at most half a step away from b. */
#define assert_derived(a, f, b)                                                           \
    do {                                                                                  \
        double a_ = (a), b_ = (b);                                                        \
        double h_ = cost_field_unit[f] == UNIT_TIME ? 0.5 / COST_TIME_RESOLUTION : 0.5;   \
        if (!(a_ == cost_quantise(f, b_) && fabs(a_ - b_) <= h_ * (1 + 1e-9))) {          \
            print_error("%s = %.17g, expected %.17g at the resolution of %s\n", #a, a_, b_, \
                        #f);                                                              \
            fail();                                                                       \
        }                                                                                 \
    } while (0)

/* ---- building IR by hand ---------------------------------------------------------- */

static Entity *ent(const char *name)
{
    Entity *e = xcalloc(1, sizeof *e);
    e->name = xstrdup(name);
    e->loc = LOC_NONE;
    return e;
}

static Field *ent_field(Entity *e, const char *key)
{
    e->fields = xrealloc(e->fields, (e->nfields + 1) * sizeof *e->fields);
    Field *f = &e->fields[e->nfields++];
    memset(f, 0, sizeof *f);
    f->key = xstrdup(key);
    f->loc = LOC_NONE;
    f->val.loc = LOC_NONE;
    return f;
}

static void ent_num(Entity *e, const char *key, double v, UnitClass u)
{
    Field *f = ent_field(e, key);
    f->val.kind = VAL_NUM;
    f->val.num = v;
    f->val.unit = u;
}

static void ent_id(Entity *e, const char *key, const char *id)
{
    Field *f = ent_field(e, key);
    f->val.kind = VAL_IDENT;
    f->val.str = xstrdup(id);
}

static void ent_free(Entity *e)
{
    for (uint32_t i = 0; i < e->nfields; i++) {
        free(e->fields[i].key);
        value_free(&e->fields[i].val);
    }
    free(e->fields);
    free(e->name);
    free(e);
}

/* A GPT model: Korthikanti's setting (16-bit activations, dropout, eager attention). */
static Entity *gpt_model(double L, double h, double a, double s, double b, const char *attn)
{
    Entity *m = ent("g");
    ent_id(m, "arch", "gpt");
    ent_num(m, "layers", L, UNIT_NONE);
    ent_num(m, "hidden", h, UNIT_NONE);
    ent_num(m, "heads", a, UNIT_NONE);
    ent_num(m, "vocab", 1000, UNIT_NONE);
    ent_num(m, "seq", s, UNIT_NONE);
    ent_num(m, "mbs", b, UNIT_NONE);
    ent_id(m, "dtype", "bf16");
    ent_id(m, "attention", attn);
    return m;
}

/* Llama-2 13B as in std/models.pipe. */
static Entity *llama13b(void)
{
    Entity *m = ent("llama2_13b");
    ent_id(m, "arch", "llama");
    ent_num(m, "layers", 40, UNIT_NONE);
    ent_num(m, "hidden", 5120, UNIT_NONE);
    ent_num(m, "heads", 40, UNIT_NONE);
    ent_num(m, "ffn", 13824, UNIT_NONE);
    ent_num(m, "vocab", 32000, UNIT_NONE);
    ent_num(m, "seq", 4096, UNIT_NONE);
    ent_num(m, "mbs", 1, UNIT_NONE);
    ent_id(m, "dtype", "bf16");
    return m;
}

/* 100 TFLOP/s at efficiency 0.5 = 5e13 FLOP/s achieved; 1000 GB/s memory; 100 GB/s
 * peer link with 10 us latency; 20 GB/s host link; 80 GiB with 1 GiB reserved. */
static Entity *dev(void)
{
    Entity *d = ent("d");
    ent_num(d, "memory", 80 * GiB, UNIT_SIZE);
    ent_num(d, "reserved", 1 * GiB, UNIT_SIZE);
    ent_num(d, "peak_tflops", 100, UNIT_NONE);
    ent_num(d, "efficiency", 0.5, UNIT_NONE);
    ent_num(d, "mem_bw", 1e12, UNIT_BW);
    ent_num(d, "host_bw", 20e9, UNIT_BW);
    ent_num(d, "peer_bw", 100e9, UNIT_BW);
    ent_num(d, "peer_latency", 0.01, UNIT_TIME);
    return d;
}

static Pipeline *mkpipe(int32_t P, int32_t M, int32_t V, Entity *model, Entity *device)
{
    Pipeline *p = pipeline_new();
    p->name = xstrdup("t");
    pipeline_set_shape(p, P, M, V);
    p->model = model;
    p->device = device;
    return p;
}

/* A CostModel for a lone model (+ device) with tensor parallel t, one stage. */
static void mkcm(Cap *c, CostModel *cm, Entity *model, Entity *device, int t)
{
    Pipeline *p = mkpipe(1, 1, 1, model, device);
    p->tensor_parallel = t;
    assert_int_equal(costmodel_init(&c->d, p, cm), 0);
    pipeline_free(p);
}

/* Activation bytes of one transformer layer (attention + MLP half-units). */
static double layer_bytes(const CostModel *cm, RecomputePolicy pol)
{
    CmCost a, m;
    cm_unit(cm, CM_ATTN, false, pol, &a);
    cm_unit(cm, CM_MLP, false, pol, &m);
    return pol == POLICY_NONE ? a.act + m.act : a.ckpt + m.ckpt;
}

/* ---- formulas ----------------------------------------------------------------------- */

/* Korthikanti et al. 2022, Eq. 1 (no parallelism): s*b*h*(34 + 5*a*s/h) bytes per layer.
 * s = 2048, b = 2, h = 1024, a = 16: s*b*h = 4,194,304; 5*a*s/h = 5*16*2048/1024 = 160;
 * 4,194,304 * 194 = 813,694,976. Selective recomputation keeps 34*s*b*h = 142,606,336.
 * Eq. 2 (tensor parallel t = 2, no sequence parallel): s*b*h*(10 + 24/t + 5*a*s/(h*t))
 * = 4,194,304 * (10 + 12 + 80) = 427,819,008. */
static void test_korthikanti(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    CostModel cm;
    mkcm(&c, &cm, gpt_model(2, 1024, 16, 2048, 2, "eager"), NULL, 1);
    assert_near(layer_bytes(&cm, POLICY_NONE), 813694976.0);
    assert_near(layer_bytes(&cm, POLICY_SELECTIVE), 142606336.0);
    costmodel_free(&cm);

    mkcm(&c, &cm, gpt_model(2, 1024, 16, 2048, 2, "eager"), NULL, 2);
    assert_near(layer_bytes(&cm, POLICY_NONE), 427819008.0);
    costmodel_free(&cm);

    /* Eq. 3, sequence parallel with t = 2: s*b*h*(34/t + 5*a*s/(h*t))
     * = 4,194,304 * (17 + 80) = 406,847,488. */
    Entity *m = gpt_model(2, 1024, 16, 2048, 2, "eager");
    ent_num(m, "sequence_parallel", 1, UNIT_NONE);
    mkcm(&c, &cm, m, NULL, 2);
    assert_near(layer_bytes(&cm, POLICY_NONE), 406847488.0);
    costmodel_free(&cm);

    /* flash attention drops the a*s^2 terms and keeps an fp32 log-sum-exp per row and
     * head: 34*s*b*h + 4*a*s*b = 142,606,336 + 4*16*4096 = 142,868,480. */
    mkcm(&c, &cm, gpt_model(2, 1024, 16, 2048, 2, "flash"), NULL, 1);
    assert_near(layer_bytes(&cm, POLICY_NONE), 142868480.0);
    costmodel_free(&cm);
    cap_close(&c);
}

/* The llama adaptation (docs/cost-model.md): per token 20h + 8f bytes for bf16 (RMSNorm
 * fp32 upcast 4h + output 2h, twice; Q K V 6h; attention output 2h; SwiGLU gate, SiLU,
 * up, product 4 x 2f) plus flash's 4a. Llama-2 13B, s = 4096, b = 1:
 * 20*5120 + 8*13824 + 4*40 = 102,400 + 110,592 + 160 = 213,152 bytes per token,
 * x 4096 = 873,070,592 per layer. Full recomputation keeps the layer input 2*s*b*h =
 * 2*4096*5120 = 41,943,040. */
static void test_llama_bytes(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    CostModel cm;
    mkcm(&c, &cm, llama13b(), NULL, 1);
    assert_near(layer_bytes(&cm, POLICY_NONE), 873070592.0);
    assert_near(layer_bytes(&cm, POLICY_FULL), 41943040.0);
    /* cmb drops 4h per norm (the fp32 upcast; the normed output is recomputed from the
     * kept 2h input: 6h - 2h) and the SiLU output and product (2 x 2f):
     * 2*4h + 4f = 40,960 + 55,296 = 96,256 per token, x 4096 = 394,264,576;
     * 873,070,592 - 394,264,576 = 478,806,016: a 45% saving (Obscura §8: ~40%). */
    assert_near(layer_bytes(&cm, POLICY_CMB), 478806016.0);
    costmodel_free(&cm);
    cap_close(&c);
}

/* Narayanan et al. 2021, §5.1: a GPT layer's forward is 24*b*s*h^2*(1 + s/(6h)) FLOPs
 * and the logit layer 2*b*s*h*V; backward is twice the forward.
 * b = 2, s = 2048, h = 1024: 24*2*2048*1024^2 = 103,079,215,104, x (1 + 2048/6144) = 4/3
 * -> 137,438,953,472 FLOPs; at 5e13 FLOP/s: 2.74877906944 ms.
 * Logits: 2*2*2048*1024*1000 = 8,388,608,000 FLOPs -> 0.16777216 ms. */
static void test_flops(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    CostModel cm;
    mkcm(&c, &cm, gpt_model(2, 1024, 16, 2048, 2, "flash"), dev(), 1);
    CmCost a, m, hd;
    cm_unit(&cm, CM_ATTN, false, POLICY_NONE, &a);
    cm_unit(&cm, CM_MLP, false, POLICY_NONE, &m);
    cm_unit(&cm, CM_HEAD, false, POLICY_NONE, &hd);
    assert_near(a.f + m.f, 2.74877906944);
    assert_near(a.b + m.b, 2 * 2.74877906944);
    assert_near(hd.f, 0.16777216);
    /* the weight-gradient part is the GEMMs alone: 24*b*s*h^2 -> 2.06158430208 ms */
    assert_near(a.w + m.w, 2.06158430208);
    costmodel_free(&cm);

    /* tensor parallel divides the FLOPs: t = 4 -> 0.68719476736 ms of compute, plus one
     * all-reduce per half-unit (test_tp_comm: 0.18582912 ms each) */
    mkcm(&c, &cm, gpt_model(2, 1024, 16, 2048, 2, "flash"), dev(), 4);
    cm_unit(&cm, CM_ATTN, false, POLICY_NONE, &a);
    cm_unit(&cm, CM_MLP, false, POLICY_NONE, &m);
    assert_near(a.f + m.f - a.fcomm - m.fcomm, 2.74877906944 / 4);
    assert_near(a.f + m.f, 2.74877906944 / 4 + 2 * 0.18582912);
    costmodel_free(&cm);
    cap_close(&c);
}

/* Megatron's all-reduces (Shoeybi et al. 2019 §3; Lynx Fig. 1), ring time of Thakur et
 * al. 2005: AR(n) = 2(t-1)/t * n / peer_bw + 2(t-1) * peer_latency. b = 2, s = 2048,
 * h = 1024, fp16: n = 2 * 4096 * 1024 = 8,388,608 bytes. t = 4 on dev() (100 GB/s,
 * 10 us): 1.5 * 8388608 / 1e11 s = 0.12582912 ms + 6 * 0.01 ms = 0.18582912 ms, one in
 * the forward and one in the backward of each half-unit. A PCIe-like 10 GB/s link:
 * 1.2582912 + 0.06 = 1.3182912 ms. t = 1: none. */
static void test_tp_comm(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    CostModel cm;
    CmCost a, m, af, mf, as;
    mkcm(&c, &cm, gpt_model(2, 1024, 16, 2048, 2, "flash"), dev(), 4);
    assert_near(cm_allreduce_ms(&cm, 8388608.0), 0.18582912);
    cm_unit(&cm, CM_ATTN, false, POLICY_NONE, &a);
    cm_unit(&cm, CM_MLP, false, POLICY_NONE, &m);
    assert_near(a.fcomm, 0.18582912);
    assert_near(m.bcomm, 0.18582912);
    /* b = 2 x the compute + the backward's all-reduce */
    assert_near(a.b, 2 * (a.f - a.fcomm) + 0.18582912);
    /* full recomputation re-runs the forward, all-reduce included; selective recomputes
     * the attention core only, which communicates nothing */
    cm_unit(&cm, CM_ATTN, false, POLICY_FULL, &af);
    cm_unit(&cm, CM_MLP, false, POLICY_FULL, &mf);
    cm_unit(&cm, CM_ATTN, false, POLICY_SELECTIVE, &as);
    assert_near(af.rcomm, 0.18582912);
    assert_near(af.r, af.f);
    assert_near(mf.rcomm, 0.18582912);
    assert_near(as.rcomm, 0);
    /* no all-reduce in the weight gradient, the embedding or the head */
    CmCost hd, em;
    cm_unit(&cm, CM_HEAD, false, POLICY_NONE, &hd);
    cm_unit(&cm, CM_EMBED, false, POLICY_NONE, &em);
    assert_near(hd.fcomm + hd.bcomm + em.fcomm + em.bcomm, 0);
    costmodel_free(&cm);

    Entity *pcie = dev();
    ent_num(pcie, "peer_bw", 10e9, UNIT_BW); /* the later field wins */
    mkcm(&c, &cm, gpt_model(2, 1024, 16, 2048, 2, "flash"), pcie, 4);
    cm_unit(&cm, CM_MLP, false, POLICY_NONE, &m);
    assert_near(m.fcomm, 1.3182912);
    costmodel_free(&cm);

    mkcm(&c, &cm, gpt_model(2, 1024, 16, 2048, 2, "flash"), dev(), 1);
    cm_unit(&cm, CM_MLP, false, POLICY_FULL, &m);
    assert_near(m.fcomm + m.bcomm + m.rcomm, 0);
    costmodel_free(&cm);
    cap_close(&c);
}

/* 16 bytes per parameter. Llama-2 13B layer: attention 4h^2 = 104,857,600, MLP 3hf =
 * 212,336,640, two RMSNorm weights 2h = 10,240: 317,204,480 parameters ->
 * 5,075,271,680 bytes. Embedding V*h = 163,840,000 -> 2,621,440,000 bytes. Head V*h + h
 * (final norm) = 163,845,120 -> 2,621,521,920 bytes. With t = 8 each is divided by 8. */
static void test_weights(void **state)
{
    (void)state;
    const CmDp dp1 = {1, 0, 2};
    Cap c;
    cap_open(&c);
    CostModel cm;
    mkcm(&c, &cm, llama13b(), NULL, 1);
    CmCost a, m, e, hd;
    cm_unit(&cm, CM_ATTN, false, POLICY_NONE, &a);
    cm_unit(&cm, CM_MLP, false, POLICY_NONE, &m);
    cm_unit(&cm, CM_EMBED, false, POLICY_NONE, &e);
    cm_unit(&cm, CM_HEAD, false, POLICY_NONE, &hd);
    assert_near(cm_weight_bytes(a.params + m.params, &dp1), 5075271680.0);
    assert_near(cm_weight_bytes(e.params, &dp1), 2621440000.0);
    assert_near(cm_weight_bytes(hd.params, &dp1), 2621521920.0);
    costmodel_free(&cm);
    mkcm(&c, &cm, llama13b(), NULL, 8);
    cm_unit(&cm, CM_ATTN, false, POLICY_NONE, &a);
    cm_unit(&cm, CM_MLP, false, POLICY_NONE, &m);
    assert_near(cm_weight_bytes(a.params + m.params, &dp1), 5075271680.0 / 8);
    costmodel_free(&cm);
    cap_close(&c);
}

/* Model states per ZeRO stage (ZeRO §5), hand-computed for 1e9 parameters, D = 8:
 * zero 0: (2+2+12) = 16 GB, fp32 gradients (2+4+12) = 18 GB; zero 1: 4 + 12/8 = 5.5 GB,
 * fp32 6 + 1.5 = 7.5 GB (Megatron's 6 + 12/DP); zero 2: 2 + 14/8 = 3.75 GB, fp32
 * 2 + 16/8 = 4 GB; zero 3: 16/8 = 2 GB, fp32 18/8 = 2.25 GB. With D = 1 every stage
 * is 16. ZeRO-3 gathers a layer's 16-bit parameters: 2 bytes each, only at zero 3 with
 * D > 1. */
static void test_zero_weights(void **state)
{
    (void)state;
    const double n = 1e9;
    const double want[4][2] = {{16e9, 18e9}, {5.5e9, 7.5e9}, {3.75e9, 4e9}, {2e9, 2.25e9}};
    for (int z = 0; z < 4; z++) {
        CmDp bf = {8, z, 2}, fp = {8, z, 4}, one = {1, z, 2};
        assert_near(cm_weight_bytes(n, &bf), want[z][0]);
        assert_near(cm_weight_bytes(n, &fp), want[z][1]);
        assert_near(cm_weight_bytes(n, &one), 16e9);
        assert_near(cm_zero3_gather_bytes(1e8, &bf), z == 3 ? 2e8 : 0);
        assert_near(cm_zero3_gather_bytes(1e8, &one), 0);
    }
}

/* derive_costs with the data-parallel settings: a 4-layer GPT (h = 1024, f = 4h,
 * vocabulary 1000, s = 2048) on 2 stages. Parameters: attention 4h^2 + 6h = 4,200,448,
 * MLP 2hf + f + 3h = 8,395,776, a layer 12,596,224; embedding (1000 + 2048) h =
 * 3,121,152; head 1000 h + 2h = 1,026,048. Stage 0 = embedding + 2 layers = 28,313,600,
 * stage 1 = 2 layers + head = 26,218,496. zero 3, D = 4: 16/4 = 4 bytes each plus a
 * layer's 2-byte gather (25,192,448): 138,446,848 and 130,066,432. zero 1, D = 4, fp32
 * gradients: 6 + 12/4 = 9 bytes: 254,822,400 and 235,966,464. */
/* docs/cost-model.md "Data-parallel time", by hand: D = 4 replicas, 1e6 parameters,
 * 1 GB/s, 0.1 ms per ring step, mem_bw 28 GB/s. An all-reduce of 2e6 bf16 gradient bytes
 * moves 2 x 3/4 x 2e6 B in 6 steps: 3 + 0.6 ms; a reduce-scatter or all-gather half of
 * it, 1.5 + 0.3 ms. The step: 28 bytes per parameter (26 + g), 1 ms for all of them,
 * 0.25 ms for a quarter. */
static void test_dp_time(void **state)
{
    (void)state;
    assert_float_equal(cm_ring_allreduce_ms(2e6, 4, 1e9, 0.1), 3.6, 1e-12);
    assert_float_equal(cm_ring_gather_ms(2e6, 4, 1e9, 0.1), 1.8, 1e-12);
    assert_float_equal(cm_ring_gather_ms(2e6, 1, 1e9, 0.1), 0, 0);
    assert_float_equal(cm_ring_gather_ms(2e6, 4, INFINITY, 0.1), 0.3, 1e-12);
    CmDp dp = {4, 0, 2};
    CmDpTime t;
    assert_float_equal(cm_opt_bytes_per_param(&dp), 28, 0);
    cm_dp_time(1e6, &dp, 1e9, 0.1, 28e9, &t);
    assert_float_equal(t.reduce, 3.6, 1e-12);
    assert_float_equal(t.opt, 1, 1e-12);
    assert_float_equal(t.gather_after, 0, 0);
    assert_float_equal(t.gather_op, 0, 0);
    for (int z = 1; z <= 3; z++) {
        dp.zero = z;
        cm_dp_time(1e6, &dp, 1e9, 0.1, 28e9, &t);
        assert_float_equal(t.reduce, 1.8, 1e-12);
        assert_float_equal(t.opt, 0.25, 1e-12);
        assert_float_equal(t.gather_after, z < 3 ? 1.8 : 0, 1e-12);
        assert_float_equal(t.gather_op, z == 3 ? 1.8 : 0, 1e-12);
    }
    dp = (CmDp){4, 0, 4}; /* fp32 gradients: twice the bytes, 30 per parameter */
    cm_dp_time(1e6, &dp, 1e9, 0, 30e9, &t);
    assert_float_equal(t.reduce, 6, 1e-12);
    assert_float_equal(t.opt, 1, 1e-12);
    dp.D = 1; /* one replica: nothing */
    cm_dp_time(1e6, &dp, 1e9, 0.1, 28e9, &t);
    assert_float_equal(t.reduce + t.opt + t.gather_after + t.gather_op, 0, 0);
}

/* Experts reduce over the D / E replicas that hold them (docs/cost-model.md "Data-parallel
 * time"), by hand: 1e6 parameters, half in experts, D = 4, zero 1, 1 GB/s, 0.1 ms a step,
 * 28 GB/s. Dense: RS(1e6 B, 4) = 0.75 + 0.3 = 1.05 ms, step 125,000 x 28 B = 0.125 ms,
 * AG 1.05 ms. Experts at E = 2 (D/E = 2): RS(1e6 B, 2) = 0.5 + 0.1 = 0.6 ms, step 250,000
 * x 28 B = 0.25 ms, AG 0.6 ms. At E = 4 (D/E = 1) nothing moves and the step updates all
 * 500,000: 0.5 ms. */
static void test_dp_time_moe(void **state)
{
    (void)state;
    CmDp dp = {4, 1, 2};
    CmDpTime t;
    cm_dp_time_moe(1e6, 5e5, 2, &dp, 1e9, 0.1, 28e9, &t);
    assert_float_equal(t.reduce, 1.65, 1e-12);
    assert_float_equal(t.opt, 0.375, 1e-12);
    assert_float_equal(t.gather_after, 1.65, 1e-12);
    cm_dp_time_moe(1e6, 5e5, 4, &dp, 1e9, 0.1, 28e9, &t);
    assert_float_equal(t.reduce, 1.05, 1e-12);
    assert_float_equal(t.opt, 0.625, 1e-12);
    assert_float_equal(t.gather_after, 1.05, 1e-12);
    CmDpTime u; /* E = 1: the experts are on every replica, as dense parameters */
    cm_dp_time_moe(1e6, 5e5, 1, &dp, 1e9, 0.1, 28e9, &t);
    cm_dp_time(1e6, &dp, 1e9, 0.1, 28e9, &u);
    assert_memory_equal(&t, &u, sizeof t);
    /* no experts: cm_dp_time */
    cm_dp_time_moe(1e6, 0, 4, &dp, 1e9, 0.1, 28e9, &t);
    cm_dp_time(1e6, &dp, 1e9, 0.1, 28e9, &u);
    assert_memory_equal(&t, &u, sizeof t);
}

static void test_zero_derive(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = mkpipe(2, 2, 1, gpt_model(4, 1024, 16, 2048, 1, "flash"), dev());
    p->data_parallel = 4;
    p->zero = 3;
    assert_int_equal(derive_costs(&c.d, p), 0);
    assert_true(ir_cost(p, 0, 0, COST_WEIGHTS) == 138446848.0);
    assert_true(ir_cost(p, 1, 0, COST_WEIGHTS) == 130066432.0);
    p->zero = 1;
    p->grad_dtype = GRAD_FP32;
    rederive_costs(p);
    assert_true(ir_cost(p, 0, 0, COST_WEIGHTS) == 254822400.0);
    assert_true(ir_cost(p, 1, 0, COST_WEIGHTS) == 235966464.0);
    p->data_parallel = 1;
    p->zero = 0;
    p->grad_dtype = GRAD_BF16;
    rederive_costs(p);
    assert_true(ir_cost(p, 0, 0, COST_WEIGHTS) == 16 * 28313600.0);
    pipeline_free(p);
    cap_close(&c);
}

/* p2p = latency + e*s*b*h/t / bandwidth: 0.01 ms + 2*2048*2*1024 B / 100e9 B/s
 * = 0.01 + 8,388,608 / 1e11 s = 0.01 + 0.08388608 ms = 0.09388608 ms. */
static void test_p2p(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    CostModel cm;
    mkcm(&c, &cm, gpt_model(2, 1024, 16, 2048, 2, "flash"), dev(), 1);
    assert_near(cm_p2p_ms(&cm), 0.09388608);
    costmodel_free(&cm);
    /* no device: no link to time */
    mkcm(&c, &cm, gpt_model(2, 1024, 16, 2048, 2, "flash"), NULL, 1);
    assert_true(cm_p2p_ms(&cm) == 0);
    costmodel_free(&cm);
    cap_close(&c);
}

/* Kept bytes: none > {selective, cmb, mlp} > full; recompute time: full > {selective,
 * cmb, mlp} > none. On Llama-2 13B (flash) and on an eager GPT. */
static void check_order(const CostModel *cm)
{
    double k[POLICY_N], r[POLICY_N];
    for (int pol = 0; pol < POLICY_N; pol++) {
        CmCost a, m;
        cm_unit(cm, CM_ATTN, false, (RecomputePolicy)pol, &a);
        cm_unit(cm, CM_MLP, false, (RecomputePolicy)pol, &m);
        k[pol] = a.ckpt + m.ckpt;
        r[pol] = a.r + m.r;
        if (pol == POLICY_NONE)
            assert_near(k[pol], a.act + m.act);
    }
    RecomputePolicy mid[] = {POLICY_SELECTIVE, POLICY_CMB, POLICY_MLP};
    for (int i = 0; i < 3; i++) {
        assert_true(k[POLICY_NONE] > k[mid[i]]);
        assert_true(k[mid[i]] > k[POLICY_FULL]);
        assert_true(r[POLICY_FULL] > r[mid[i]]);
        assert_true(r[mid[i]] > r[POLICY_NONE]);
    }
    assert_true(r[POLICY_NONE] == 0);
}

/* Keep-sets (docs/cost-model.md "Keep-sets") on Korthikanti's GPT layer, eager attention,
 * b = 2, s = 2048, h = 1024, a = 16, t = 1, two layers on one virtual stage, dev()
 * (5e13 FLOP/s): sbh = 4,194,304.
 * - keeping every tensor is no recomputation: ckpt = act, r = 0;
 * - keeping all but `core` is Korthikanti's selective recomputation (the 5as^2b
 *   softmax/dropout bytes dropped, the core's FLOPs re-run once): the same ckpt and r;
 * - keep() keeps the layer input alone, 2sbh per layer, like full recomputation;
 * - keep(fc1) adds fc1's output, e f = 8h bytes per token: 8 sbh = 33,554,432 per layer;
 * - all but fc1: r = fc1's GEMM, 2 T h f = 2*4096*1024*4096 = 34,359,738,368 FLOPs per
 *   layer, 0.68719476736 ms at 5e13 FLOP/s, twice for two layers. */
static void test_keep_sets(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    CostModel cm;
    Pipeline *p = mkpipe(1, 1, 1, gpt_model(2, 1024, 16, 2048, 2, "eager"), dev());
    assert_int_equal(costmodel_init(&c.d, p, &cm), 0);
    uint32_t all = (1u << KEEP_N) - 1, nofc1 = all & ~(1u << KEEP_FC1);
    CmCost k, ref, none;
    cm_vstage(&cm, 0, POLICY_NONE, &none);
    cm_vstage_arg(&cm, 0, POLICY_KEEP, all, &k);
    assert_near(k.ckpt, none.act);
    assert_near(k.r, 0);
    cm_vstage_arg(&cm, 0, POLICY_KEEP, all & ~(1u << KEEP_CORE), &k);
    cm_vstage(&cm, 0, POLICY_SELECTIVE, &ref);
    assert_near(k.ckpt, ref.ckpt);
    assert_near(k.r, ref.r);
    assert_near(none.act - k.ckpt, 2 * (813694976.0 - 142606336.0));
    cm_vstage_arg(&cm, 0, POLICY_KEEP, 0, &k);
    cm_vstage(&cm, 0, POLICY_FULL, &ref);
    assert_near(k.ckpt, ref.ckpt);
    assert_true(k.r < ref.r); /* fc2 is never re-run */
    CmCost k1;
    cm_vstage_arg(&cm, 0, POLICY_KEEP, 1u << KEEP_FC1, &k1);
    assert_near(k1.ckpt - k.ckpt, 2 * 33554432.0);
    cm_vstage_arg(&cm, 0, POLICY_KEEP, nofc1, &k);
    assert_near(k.r, 2 * 0.68719476736);
    assert_near(none.act - k.ckpt, 2 * 33554432.0);
    /* a ladder starts at keep(), adds one tensor at a time and ends with all ten */
    uint32_t ladder[KEEP_N + 1];
    assert_int_equal(cm_keep_ladder(&cm, ladder), KEEP_N + 1);
    assert_int_equal(ladder[0], 0);
    assert_int_equal(ladder[KEEP_N], all);
    for (int i = 0; i < KEEP_N; i++)
        assert_int_equal(__builtin_popcount(ladder[i + 1] & ~ladder[i]), 1);
    costmodel_free(&cm);
    pipeline_free(p);

    /* with t = 4 a dropped mlp_in repeats the attention block's all-reduce (0.18582912 ms,
     * test_tp_comm) once per layer */
    p = mkpipe(1, 1, 1, gpt_model(2, 1024, 16, 2048, 2, "eager"), dev());
    p->tensor_parallel = 4;
    assert_int_equal(costmodel_init(&c.d, p, &cm), 0);
    cm_vstage_arg(&cm, 0, POLICY_KEEP, all & ~(1u << KEEP_MLP_IN), &k);
    assert_near(k.rcomm, 2 * 0.18582912);
    cm_vstage_arg(&cm, 0, POLICY_KEEP, all & ~(1u << KEEP_QKV), &k);
    assert_near(k.rcomm, 0);
    costmodel_free(&cm);
    pipeline_free(p);
    cap_close(&c);
}

/* block(n): the first n layers of the virtual stage recomputed in full, the rest not.
 * Four GPT layers (flash, b = 2, s = 2048, h = 1024, dev()): a layer's forward is
 * 2.74877906944 ms (test_flops), so block(2) has r = 5.49755813888 ms, and keeps the
 * embedding, the head, two layer inputs and two whole layers. block(9) is full. */
static void test_block(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    CostModel cm;
    Pipeline *p = mkpipe(1, 1, 1, gpt_model(4, 1024, 16, 2048, 2, "flash"), dev());
    assert_int_equal(costmodel_init(&c.d, p, &cm), 0);
    CmCost k, full, a, m, none;
    cm_vstage_arg(&cm, 0, POLICY_BLOCK, 2, &k);
    assert_near(k.r, 2 * 2.74877906944);
    cm_unit(&cm, CM_ATTN, false, POLICY_NONE, &a);
    cm_unit(&cm, CM_MLP, false, POLICY_NONE, &m);
    cm_vstage(&cm, 0, POLICY_FULL, &full);
    /* full keeps 4 layer inputs (2 sbh = 8,388,608 each); block(2) two of them + 2 layers */
    assert_near(k.ckpt, full.ckpt - 2 * 8388608.0 + 2 * (a.act + m.act));
    cm_vstage(&cm, 0, POLICY_NONE, &none);
    assert_near(k.act, none.act);
    cm_vstage_arg(&cm, 0, POLICY_BLOCK, 9, &k);
    assert_near(k.ckpt, full.ckpt);
    assert_near(k.r, full.r);
    costmodel_free(&cm);
    pipeline_free(p);
    cap_close(&c);
}

static void test_policy_order(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    CostModel cm;
    mkcm(&c, &cm, llama13b(), dev(), 1);
    check_order(&cm);
    /* cmb's recompute is memory-bound. Traffic per layer (16h + 10f bytes per token:
     * two norms read 2h and write 6h, SiLU reads and writes 2f, the product reads 4f and
     * writes 2f) = (81,920 + 138,240) * 4096 = 901,775,360 B -> 0.90177536 ms at 1 TB/s.
     * f = 4096 * (8h^2 + 6hf + 4sh) = 4096 * (209,715,200 + 424,673,280 + 83,886,080)
     * = 2,942,052,597,760 FLOPs / 5e13 = 58.8410519552 ms: cmb costs 1.5% of f here
     * (2.4% on an A100, Obscura §8: 2-3%). */
    CmCost a, m;
    cm_unit(&cm, CM_ATTN, false, POLICY_CMB, &a);
    cm_unit(&cm, CM_MLP, false, POLICY_CMB, &m);
    assert_near(a.r + m.r, 0.90177536);
    assert_near(a.f + m.f, 58.8410519552);
    costmodel_free(&cm);
    mkcm(&c, &cm, gpt_model(2, 1024, 16, 2048, 2, "eager"), dev(), 1);
    check_order(&cm);
    costmodel_free(&cm);
    cap_close(&c);
}

/* ---- derive_costs ------------------------------------------------------------------- */

/* User values win: `costs { f 1ms }`, `costs stage 1 { act 5 }`, `costs vstage 0
 * { ckpt 7 }`, `costs stage 0 { weights 9 }`; everything else is derived. */
static void test_precedence(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = mkpipe(2, 2, 1, gpt_model(4, 1024, 16, 2048, 2, "flash"), dev());
    p->costs.v[COST_F] = 1;
    p->costs.set |= 1u << COST_F;
    p->stage_costs[1].v[COST_ACT] = 5;
    p->stage_costs[1].set |= 1u << COST_ACT;
    p->vstage_costs[0].v[COST_CKPT] = 7;
    p->vstage_costs[0].set |= 1u << COST_CKPT;
    p->stage_costs[0].v[COST_WEIGHTS] = 9;
    p->stage_costs[0].set |= 1u << COST_WEIGHTS;
    assert_int_equal(derive_costs(&c.d, p), 0);

    CostModel cm;
    assert_int_equal(costmodel_init(&c.d, p, &cm), 0);
    CmCost v0, v1;
    cm_vstage(&cm, 0, POLICY_FULL, &v0);
    cm_vstage(&cm, 1, POLICY_FULL, &v1);
    assert_true(ir_cost(p, 0, 0, COST_F) == 1 && ir_cost(p, 1, 0, COST_F) == 1);
    assert_derived(ir_cost(p, 0, 0, COST_B), COST_B, v0.b);
    assert_true(ir_cost(p, 1, 0, COST_ACT) == 5);
    assert_true(ir_cost(p, 1, 0, COST_WACT) == 5); /* default wact = act kept (docs/spec.md "Cost lookup") */
    assert_derived(ir_cost(p, 0, 0, COST_ACT), COST_ACT, v0.act);
    assert_true(ir_cost(p, 0, 0, COST_CKPT) == 7);
    assert_derived(ir_cost(p, 1, 0, COST_CKPT), COST_CKPT, v1.ckpt);
    assert_true(ir_cost(p, 0, 0, COST_WEIGHTS) == 9);
    assert_derived(ir_cost(p, 1, 0, COST_WEIGHTS), COST_WEIGHTS, cm_weight_bytes(v1.params, &(CmDp){1, 0, 2}));
    assert_derived(ir_cost(p, 1, 0, COST_P2P), COST_P2P, cm_p2p_ms(&cm));
    assert_true(ir_cost(p, 1, 0, COST_HOST_BW) == 20e9);
    /* even partition of 4 layers over 2 stages: 2 layers each, embedding on 0, head on 1 */
    assert_true(cm.ubeg[0] == 0 && cm.ubeg[1] == 4 && cm.ubeg[2] == 8);
    /* the memory budget comes from the device: 80 GiB - 1 GiB reserved */
    assert_true(p->has_memory && p->memory == 79 * GiB);
    costmodel_free(&cm);
    pipeline_free(p);
    cap_close(&c);
}

static bool blocks_equal(const CostBlock *a, const CostBlock *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(a[i].v, b[i].v, sizeof a[i].v) || a[i].set != b[i].set ||
            a[i].derived != b[i].derived)
            return false;
    return true;
}

/* wact (bytes B keeps for W) is derived from the model where the user set neither act
 * nor wact: the GEMM inputs and output gradients, capped at act (docs/cost-model.md
 * "wact"); less than act for a whole transformer stage, whose attention core and
 * dropout masks W does not read. A user's act alone keeps the default wact = act, and a
 * user's host_bw is kept over the device's. */
static void test_wact_derived(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = mkpipe(2, 2, 1, gpt_model(4, 1024, 16, 2048, 2, "eager"), dev());
    set_cost(&p->stage_costs[1], COST_ACT, 5);
    set_cost(&p->costs, COST_HOST_BW, 5e9); /* the user's host link, not the device's */
    assert_int_equal(derive_costs(&c.d, p), 0);
    assert_true(ir_cost(p, 0, 0, COST_HOST_BW) == 5e9 && ir_cost(p, 1, 0, COST_HOST_BW) == 5e9);
    CostModel cm;
    assert_int_equal(costmodel_init(&c.d, p, &cm), 0);
    CmCost v0;
    cm_vstage(&cm, 0, POLICY_FULL, &v0);
    assert_true(v0.wact > 0 && v0.wact < v0.act);
    assert_derived(ir_cost(p, 0, 0, COST_WACT), COST_WACT, v0.wact);
    assert_true(p->vstage_costs[0].derived & (1u << COST_WACT));
    assert_true(ir_cost(p, 1, 0, COST_WACT) == 5);
    assert_false(p->vstage_costs[1].set & (1u << COST_WACT));
    costmodel_free(&cm);
    pipeline_free(p);
    cap_close(&c);
}

/* A device without mem_bw, host_bw or peer_bw: memory traffic costs nothing (cmb's
 * recomputation is elementwise work only: r = 0), an all-reduce is its latency alone,
 * 2(t-1) x peer_latency = 2 x 3 x 0.01 ms, and no rank gets a host_bw (unlimited). */
static void test_device_without_links(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Entity *d = ent("bare");
    ent_num(d, "peak_tflops", 100, UNIT_NONE);
    ent_num(d, "peer_latency", 0.01, UNIT_TIME);
    Pipeline *p = mkpipe(2, 2, 1, gpt_model(4, 1024, 16, 2048, 2, "flash"), d);
    p->tensor_parallel = 4;
    assert_int_equal(derive_costs(&c.d, p), 0);
    CostModel cm;
    assert_int_equal(costmodel_init(&c.d, p, &cm), 0);
    assert_near(cm_allreduce_ms(&cm, 8388608.0), 0.06);
    CmCost cmb, none;
    cm_unit(&cm, CM_MLP, false, POLICY_CMB, &cmb);
    cm_unit(&cm, CM_MLP, false, POLICY_NONE, &none);
    assert_true(cmb.r == 0 && cmb.ckpt < none.act);
    /* stage 0 holds 2 layers: 2 attention and 2 MLP blocks, one all-reduce each */
    assert_derived(ir_cost(p, 0, 0, COST_FCOMM), COST_FCOMM, 4 * 0.06);
    assert_false(p->stage_costs[0].set & (1u << COST_HOST_BW));
    assert_true(isinf(ir_cost(p, 0, 0, COST_HOST_BW)));
    assert_false(p->has_memory);
    costmodel_free(&cm);
    pipeline_free(p);
    cap_close(&c);
}

/* cm_ckpt_layers: -1 everywhere before derive_costs has costed the pipeline, and for a
 * virtual stage whose act the source sets; the model's checkpoint elsewhere. */
static void test_ckpt_layers(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = mkpipe(2, 2, 1, gpt_model(4, 1024, 16, 2048, 2, "flash"), dev());
    double out[2] = {0, 0};
    cm_ckpt_layers(p, out);
    assert_true(out[0] == -1 && out[1] == -1);
    set_cost(&p->vstage_costs[1], COST_ACT, 5);
    assert_int_equal(derive_costs(&c.d, p), 0);
    cm_ckpt_layers(p, out);
    CostModel cm;
    assert_int_equal(costmodel_init(&c.d, p, &cm), 0);
    CmCost k;
    cm_slice(&cm, cm.ubeg[0], cm.ubeg[1], false, false, POLICY_FULL, &k);
    assert_true(k.ckpt > 0);
    assert_near(out[0], k.ckpt);
    assert_true(out[1] == -1);
    costmodel_free(&cm);
    pipeline_free(p);
    cap_close(&c);
}

/* ir_cost outside the shape falls back one level: a chunk outside [0, V) to the rank's
 * block, a rank outside [0, P) to the pipeline's `costs`, and a pipeline without
 * per-rank arrays (no shape yet) to `costs`, then the defaults. */
static void test_ir_cost_fallback(void **state)
{
    (void)state;
    Pipeline *p = mkpipe(2, 2, 2, NULL, NULL);
    set_cost(&p->costs, COST_F, 1);
    set_cost(&p->costs, COST_WEIGHTS, 10);
    set_cost(&p->stage_costs[1], COST_F, 2);
    set_cost(&p->stage_costs[1], COST_WEIGHTS, 20);
    set_cost(&p->vstage_costs[ir_vstage(p, 1, 1)], COST_F, 3);
    assert_true(ir_cost(p, 1, 1, COST_F) == 3);
    assert_true(ir_cost(p, 1, -1, COST_F) == 2);
    assert_true(ir_cost(p, 1, 2, COST_F) == 2);
    assert_true(ir_cost(p, 1, 0, COST_WEIGHTS) == 20);
    assert_true(ir_cost(p, -1, 0, COST_WEIGHTS) == 10);
    assert_true(ir_cost(p, 2, 0, COST_WEIGHTS) == 10);
    pipeline_free(p);
    Pipeline *q = pipeline_new();
    set_cost(&q->costs, COST_B, 4);
    assert_true(ir_cost(q, 0, 0, COST_B) == 4);
    assert_true(ir_cost(q, 0, 0, COST_F) == 0);
    assert_true(isinf(ir_cost(q, 0, 0, COST_HOST_BW)));
    pipeline_free(q);
}

/* Deriving twice, or after a policy round trip, changes nothing. */
static void test_idempotent(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = mkpipe(4, 4, 2, llama13b(), dev());
    p->stage_costs[2].v[COST_F] = 3;
    p->stage_costs[2].set |= 1u << COST_F;
    assert_int_equal(derive_costs(&c.d, p), 0);
    Pipeline *q = pipeline_clone(p);
    assert_int_equal(derive_costs(&c.d, p), 0);
    assert_true(blocks_equal(p->stage_costs, q->stage_costs, 4));
    assert_true(blocks_equal(p->vstage_costs, q->vstage_costs, 8));
    p->stage_policy[1] = POLICY_CMB;
    assert_int_equal(derive_costs(&c.d, p), 0);
    assert_false(blocks_equal(p->vstage_costs, q->vstage_costs, 8));
    p->stage_policy[1] = POLICY_NONE;
    assert_int_equal(derive_costs(&c.d, p), 0);
    assert_true(blocks_equal(p->stage_costs, q->stage_costs, 4));
    assert_true(blocks_equal(p->vstage_costs, q->vstage_costs, 8));
    assert_true(ir_cost(p, 2, 1, COST_F) == 3); /* the user's value survives */
    pipeline_free(q);
    pipeline_free(p);
    cap_close(&c);
}

/* Partitions: even with a remainder, explicit lists, and every way to get one wrong. */
static void test_partition(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    CostModel cm;
    /* 5 layers = 10 half-layer units over 4 stages: 2 each, the remaining 2 to the last
     * two stages -> 2, 2, 3, 3 units; boundaries 0 2 4 7 10 */
    Pipeline *p = mkpipe(4, 4, 1, gpt_model(5, 1024, 16, 2048, 2, "flash"), NULL);
    p->partition_set = p->partition_even = true;
    assert_int_equal(costmodel_init(&c.d, p, &cm), 0);
    int64_t want[] = {0, 2, 4, 7, 10};
    for (int i = 0; i < 5; i++)
        assert_true(cm.ubeg[i] == want[i]);
    /* vstage 3 = units [7, 10) = layer 3's MLP half, then layer 4: it starts with an MLP
     * half-unit, so full recomputation keeps two inputs of 2*s*b*h bytes (its own and
     * layer 4's); the head keeps its activations under every policy. */
    CmCost v3;
    cm_vstage(&cm, 3, POLICY_FULL, &v3);
    CmCost hd;
    cm_unit(&cm, CM_HEAD, false, POLICY_FULL, &hd);
    assert_near(v3.ckpt - hd.ckpt, 2 * (2.0 * 2048 * 2 * 1024));
    costmodel_free(&cm);

    /* an explicit list with half layers: [1.5, 1, 1, 1.5] */
    double good[] = {1.5, 1, 1, 1.5};
    p->partition_even = false;
    p->partition = xmalloc(sizeof good);
    memcpy(p->partition, good, sizeof good);
    p->npartition = 4;
    assert_int_equal(costmodel_init(&c.d, p, &cm), 0);
    assert_true(cm.ubeg[1] == 3 && cm.ubeg[2] == 5 && cm.ubeg[3] == 7 && cm.ubeg[4] == 10);
    costmodel_free(&cm);

    struct {
        double v[4];
        uint32_t n;
        const char *msg;
    } bad[] = {
        {{2, 2, 1, 0}, 3, "partition has 3 entries; the pipeline has 4 stages"},
        {{2, 2, 1, 1}, 4, "partition sums to 6 layers; model 'g' has 5"},
        {{2, 2, 0.7, 0.5}, 4, "partition entry 2 (0.7) must be a number of layers >= 0 in steps of 0.5"},
        {{3, 2, 1, -1}, 4, "partition entry 3 (-1) must be a number of layers >= 0 in steps of 0.5"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        Cap e;
        cap_open(&e);
        memcpy(p->partition, bad[i].v, sizeof bad[i].v);
        p->npartition = bad[i].n;
        assert_int_equal(derive_costs(&e.d, p), 1);
        assert_int_equal(e.d.ncode[DIAG_VALUE], 1);
        assert_non_null(strstr(cap_text(&e), bad[i].msg));
        cap_close(&e);
    }
    pipeline_free(p);

    /* chunks 2 on 2 ranks, one entry per rank: [3, 2] layers = 6 and 4 half-layer
     * units, split over the chunks: rank 0 -> vstages 0 and 2 get 3 and 3, rank 1 ->
     * vstages 1 and 3 get 2 and 2; boundaries 0 3 5 8 10 */
    p = mkpipe(2, 4, 2, gpt_model(5, 1024, 16, 2048, 2, "flash"), NULL);
    double ranks[] = {3, 2};
    p->partition_set = true;
    p->partition = xmalloc(sizeof ranks);
    memcpy(p->partition, ranks, sizeof ranks);
    p->npartition = 2;
    assert_int_equal(costmodel_init(&c.d, p, &cm), 0);
    int64_t want2[] = {0, 3, 5, 8, 10};
    for (int i = 0; i < 5; i++)
        assert_true(cm.ubeg[i] == want2[i]);
    costmodel_free(&cm);
    /* three entries fit neither the 2 ranks nor the 4 virtual stages */
    Cap e;
    cap_open(&e);
    p->npartition = 3;
    assert_int_equal(costmodel_init(&e.d, p, &cm), 1);
    assert_non_null(strstr(cap_text(&e), "partition has 3 entries; the pipeline has 2 stages"));
    assert_non_null(strstr(cap_text(&e), "note: with chunks 2, give one entry per stage or one "
                                         "per virtual stage (4), in model order"));
    costmodel_free(&cm);
    cap_close(&e);
    pipeline_free(p);
    cap_close(&c);
}

/* Bad model and device blocks give `name` and `value` errors with exact messages. */
static void test_bad_blocks(void **state)
{
    (void)state;
    struct {
        const char *key;
        int kind; /* 0 number, 1 ident */
        double num;
        const char *id;
        DiagCode code;
        const char *msg;
    } cases[] = {
        {"colour", 1, 0, "red", DIAG_NAME, "unknown model field 'colour'"},
        {"layers", 0, 2.5, NULL, DIAG_VALUE, "model field 'layers' must be a positive integer"},
        {"layers", 0, 0, NULL, DIAG_VALUE, "model field 'layers' must be a positive integer"},
        {"arch", 1, 0, "rnn", DIAG_VALUE, "model field 'arch' must be one of: gpt, llama, mlp"},
        {"dtype", 1, 0, "int4", DIAG_VALUE, "model field 'dtype' must be one of: bf16, fp16, fp32"},
        {"heads", 0, 7, NULL, DIAG_VALUE, "model 'g': 7 heads do not divide hidden size 1024"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        Cap c;
        cap_open(&c);
        Entity *m = gpt_model(2, 1024, 16, 2048, 2, "flash");
        if (cases[i].kind)
            ent_id(m, cases[i].key, cases[i].id);
        else
            ent_num(m, cases[i].key, cases[i].num, UNIT_NONE);
        ModelShape ms;
        assert_int_equal(model_read(&c.d, m, &ms), 1);
        assert_int_equal(c.d.ncode[cases[i].code], 1);
        assert_non_null(strstr(cap_text(&c), cases[i].msg));
        ent_free(m);
        cap_close(&c);
    }
    /* devices: a size given as a time, efficiency out of range, no peak */
    Cap c;
    cap_open(&c);
    Entity *d = dev();
    ent_num(d, "memory", 3, UNIT_TIME);
    ent_num(d, "efficiency", 1.5, UNIT_NONE);
    ent_num(d, "speed", 1, UNIT_NONE);
    DeviceSpec ds;
    assert_int_equal(device_read(&c.d, d, &ds), 3);
    assert_non_null(strstr(cap_text(&c), "device field 'memory' must be a size"));
    assert_non_null(strstr(cap_text(&c), "device field 'efficiency' must be in (0, 1]"));
    assert_non_null(strstr(cap_text(&c), "unknown device field 'speed'"));
    ent_free(d);
    d = ent("nopeak");
    ent_num(d, "memory", GiB, UNIT_SIZE);
    assert_int_equal(device_read(&c.d, d, &ds), 1);
    assert_non_null(strstr(cap_text(&c), "device 'nopeak' has no 'peak_tflops'"));
    ent_free(d);
    /* tensor_parallel 0, which the front end refuses first, is refused here too */
    Pipeline *z = mkpipe(2, 2, 1, gpt_model(2, 1024, 16, 2048, 2, "flash"), NULL);
    z->tensor_parallel = 0;
    assert_int_equal(derive_costs(&c.d, z), 1);
    assert_non_null(strstr(cap_text(&c), "tensor_parallel must be at least 1"));
    pipeline_free(z);
    /* tensor parallel must divide the heads: 16 heads, t = 3 */
    Pipeline *p = mkpipe(2, 2, 1, gpt_model(2, 1024, 16, 2048, 2, "flash"), NULL);
    p->tensor_parallel = 3;
    assert_int_equal(derive_costs(&c.d, p), 1);
    assert_non_null(strstr(cap_text(&c), "tensor_parallel 3 does not divide the 16 attention heads"));
    pipeline_free(p);
    cap_close(&c);
}

/* A pipeline without a model keeps its costs. */
static void test_no_model(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = mkpipe(2, 2, 1, NULL, NULL);
    p->costs.v[COST_F] = 2;
    p->costs.set = 1u << COST_F;
    Pipeline *q = pipeline_clone(p);
    assert_int_equal(derive_costs(&c.d, p), 0);
    assert_true(blocks_equal(&p->costs, &q->costs, 1));
    assert_true(blocks_equal(p->stage_costs, q->stage_costs, 2));
    assert_true(blocks_equal(p->vstage_costs, q->vstage_costs, 2));
    assert_false(p->has_memory);
    pipeline_free(q);
    pipeline_free(p);
    cap_close(&c);
}

/* ---- the recompute pass ------------------------------------------------------------- */

/* 1F1B, P = 2, M = 3:  stage 0: F0 F1 B0 F2 B1 B2   stage 1: F0 B0 F1 B1 F2 B2 */
static Pipeline *onef1b(Entity *model, Entity *device)
{
    Pipeline *p = mkpipe(2, 3, 1, model, device);
    OpKind s0[] = {OP_F, OP_F, OP_B, OP_F, OP_B, OP_B};
    uint32_t m0[] = {0, 1, 0, 2, 1, 2};
    OpKind s1[] = {OP_F, OP_B, OP_F, OP_B, OP_F, OP_B};
    uint32_t m1[] = {0, 0, 1, 1, 2, 2};
    for (int i = 0; i < 6; i++) {
        push(p, 0, s0[i], m0[i], 0);
        push(p, 1, s1[i], m1[i], 0);
    }
    return p;
}

static void run_recompute(Cap *c, Pipeline *p, int64_t lo, int64_t hi, const char *policy,
                          int want)
{
    Field args[2];
    memset(args, 0, sizeof args);
    args[0].key = "stages";
    args[0].val.kind = VAL_RANGE;
    args[0].val.lo = lo;
    args[0].val.hi = hi;
    args[0].loc = LOC_NONE;
    args[1].key = "policy";
    args[1].val.kind = VAL_IDENT;
    args[1].val.str = (char *)policy;
    args[1].loc = LOC_NONE;
    PassCall call = {.name = "recompute", .args = args, .nargs = 2, .loc = LOC_NONE};
    assert_int_equal(run_pass(&c->d, p, &call), want);
}

static void test_recompute_pass(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = onef1b(NULL, NULL);
    p->costs.v[COST_F] = 2;
    p->costs.set = 1u << COST_F;
    run_recompute(&c, p, 0, 1, "full", 0);
    assert_ops(p, 0, "F0 F1 R0 B0 F2 R1 B1 R2 B2");
    assert_ops(p, 1, "F0 B0 F1 B1 F2 B2");
    assert_int_equal(p->stage_policy[0], POLICY_FULL);
    assert_int_equal(p->stage_policy[1], POLICY_NONE);
    /* no model: full recomputation costs r = f = 2 ms on stage 0, ckpt the default 0 */
    assert_true(ir_cost(p, 0, 0, COST_R) == 2 && ir_cost(p, 1, 0, COST_R) == 0);
    assert_true(ir_cost(p, 0, 0, COST_CKPT) == 0);
    /* again, on all stages: no second R on stage 0 */
    run_recompute(&c, p, 0, INT32_MAX, "full", 0);
    assert_ops(p, 0, "F0 F1 R0 B0 F2 R1 B1 R2 B2");
    assert_ops(p, 1, "F0 R0 B0 F1 R1 B1 F2 R2 B2");
    /* policy none removes them on the given stages only */
    run_recompute(&c, p, 1, 2, "none", 0);
    assert_ops(p, 0, "F0 F1 R0 B0 F2 R1 B1 R2 B2");
    assert_ops(p, 1, "F0 B0 F1 B1 F2 B2");
    assert_true(ir_cost(p, 1, 0, COST_R) == 0);
    run_recompute(&c, p, 0, 2, "none", 0);
    assert_ops(p, 0, "F0 F1 B0 F2 B1 B2");
    /* an R already present elsewhere (hoisted before F2) is kept and not doubled */
    StageOps *st = &p->stages[0];
    Op r = {.mb = 1, .kind = OP_R, .chunk = 0, .loc = LOC_NONE};
    stage_push(st, r);
    memmove(&st->ops[4], &st->ops[3], sizeof(Op) * 3);
    st->ops[3] = r; /* F0 F1 B0 R1 F2 B1 B2 */
    run_recompute(&c, p, 0, 1, "cmb", 0);
    assert_ops(p, 0, "F0 F1 R0 B0 R1 F2 B1 R2 B2");
    /* without a model, cmb is costed as full recomputation, with a warning */
    assert_non_null(strstr(cap_text(&c), "policy 'cmb' needs a model"));
    assert_int_equal(c.d.nerr, 0);
    pipeline_free(p);
    cap_close(&c);
}

/* With a model, the pass re-derives r and ckpt from the policy. */
static void test_recompute_costs(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = onef1b(gpt_model(4, 1024, 16, 2048, 2, "flash"), dev());
    assert_int_equal(derive_costs(&c.d, p), 0);
    CostModel cm;
    assert_int_equal(costmodel_init(&c.d, p, &cm), 0);
    CmCost sel, full;
    cm_vstage(&cm, 1, POLICY_SELECTIVE, &sel);
    cm_vstage(&cm, 1, POLICY_FULL, &full);
    run_recompute(&c, p, 1, 2, "selective", 0);
    assert_derived(ir_cost(p, 1, 0, COST_R), COST_R, sel.r);
    assert_derived(ir_cost(p, 1, 0, COST_CKPT), COST_CKPT, sel.ckpt);
    assert_derived(ir_cost(p, 1, 0, COST_ACT), COST_ACT, full.act);
    run_recompute(&c, p, 1, 2, "full", 0);
    assert_derived(ir_cost(p, 1, 0, COST_R), COST_R, full.r);
    /* full recomputation re-runs the forward of the transformer layers; the head (on
     * this last stage) is not recomputed: r = f - f(head) */
    CmCost hd;
    cm_unit(&cm, CM_HEAD, false, POLICY_FULL, &hd);
    assert_true(hd.f > 0);
    /* r and f are each rounded to 1 ns, so r = f - f(head) holds to one step */
    assert_true(fabs(ir_cost(p, 1, 0, COST_R) - (ir_cost(p, 1, 0, COST_F) - hd.f)) <=
                1.0 / COST_TIME_RESOLUTION);
    costmodel_free(&cm);
    pipeline_free(p);
    cap_close(&c);
}

/* Passes re-cost from the model and device derive_costs validated (Pipeline.cost_inputs),
 * not from the entities: after derive_costs, a model broken behind its back changes
 * nothing for rederive_costs, costmodel_get or the recompute pass, and nothing is
 * reported; derive_costs itself reads the model again and reports the bad field. */
static void test_rederive_kept_inputs(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = onef1b(gpt_model(4, 1024, 16, 2048, 2, "flash"), dev());
    assert_null(p->cost_inputs);
    assert_int_equal(derive_costs(&c.d, p), 0);
    assert_non_null(p->cost_inputs);
    Pipeline *q = pipeline_clone(p);
    assert_non_null(q->cost_inputs);
    ent_id(q->model, "layers", "many"); /* the later field wins: layers is now a name */
    rederive_costs(q);
    assert_true(blocks_equal(p->stage_costs, q->stage_costs, 2));
    assert_true(blocks_equal(p->vstage_costs, q->vstage_costs, 2));
    CostModel a, b;
    assert_int_equal(costmodel_init(&c.d, p, &a), 0);
    costmodel_get(q, &b);
    assert_true(a.model.layers == 4 && b.model.layers == 4 && a.tp == b.tp && a.nv == b.nv);
    assert_true(a.device.peak_flops == b.device.peak_flops && b.has_device);
    assert_memory_equal(a.ubeg, b.ubeg, (size_t)(a.nv + 1) * sizeof *a.ubeg);
    costmodel_free(&a);
    costmodel_free(&b);
    run_recompute(&c, p, 1, 2, "selective", 0);
    run_recompute(&c, q, 1, 2, "selective", 0);
    assert_true(blocks_equal(p->vstage_costs, q->vstage_costs, 2));
    assert_true(ir_cost(q, 1, 0, COST_R) > 0);
    assert_int_equal(c.d.nerr + c.d.nwarn, 0);
    assert_string_equal(cap_text(&c), "");
    assert_int_equal(derive_costs(&c.d, q), 1);
    assert_non_null(strstr(cap_text(&c), "model field 'layers' must be a positive integer"));
    pipeline_free(q);
    pipeline_free(p);
    cap_close(&c);
}

static void test_recompute_bad_args(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = onef1b(NULL, NULL);
    run_recompute(&c, p, 0, 3, "full", 1);
    assert_non_null(strstr(cap_text(&c), "stage 2 is out of range: the pipeline has 2 stages"));
    run_recompute(&c, p, 0, 1, "most", 1);
    assert_non_null(strstr(cap_text(&c), "unknown recomputation policy 'most'"));
    run_recompute(&c, p, -1, 1, "full", 1); /* a range the front end cannot write */
    assert_non_null(strstr(cap_text(&c), "bad stage range -1..1"));
    assert_ops(p, 0, "F0 F1 B0 F2 B1 B2");
    /* without a model, cmb and mlp are costed as full recomputation, and say so; an
     * empty range rewrites nothing and says nothing */
    run_recompute(&c, p, 1, 1, "selective", 0);
    assert_null(strstr(cap_text(&c), "warning"));
    run_recompute(&c, p, 0, 1, "cmb", 0);
    assert_non_null(strstr(cap_text(&c), "policy 'cmb' needs a model to size its savings"));
    run_recompute(&c, p, 1, 2, "mlp", 0);
    assert_non_null(strstr(cap_text(&c), "policy 'mlp' needs a model to size its savings"));
    assert_true(p->stage_policy[0] == POLICY_CMB && p->stage_policy[1] == POLICY_MLP);
    assert_ops(p, 0, "F0 F1 R0 B0 F2 R1 B1 R2 B2");
    pipeline_free(p);
    cap_close(&c);
}

/* ---- mixture of experts (docs/cost-model.md "Mixture of experts") ------------------ */

/* Mixtral 8x7B as in std/models.pipe (Jiang et al. 2024, Table 1). */
static Entity *mixtral(double layers, double h, double heads, double ffn)
{
    Entity *m = ent("mixtral");
    ent_id(m, "arch", "llama");
    ent_num(m, "layers", layers, UNIT_NONE);
    ent_num(m, "hidden", h, UNIT_NONE);
    ent_num(m, "heads", heads, UNIT_NONE);
    ent_num(m, "kv_heads", 8, UNIT_NONE);
    ent_num(m, "ffn", ffn, UNIT_NONE);
    ent_num(m, "vocab", 32000, UNIT_NONE);
    ent_num(m, "experts", 8, UNIT_NONE);
    ent_num(m, "topk", 2, UNIT_NONE);
    ent_num(m, "seq", 4096, UNIT_NONE);
    return m;
}

/* Total and active parameters. Mixtral 8x7B (h 4096, k = 4096*8/32 = 1024, F 14336):
 * attention h(h+2k) + h^2 + h = 25,165,824 + 16,777,216 + 4,096 = 41,947,136; the MoE
 * MLP's norm and router h + 8h = 36,864 and 8 experts of 3hF = 176,160,768 each; a layer
 * 41,947,136 + 36,864 + 1,409,286,144 = 1,451,270,144, 32 layers 46,440,644,608; the
 * embedding Vh = 131,072,000 and head Vh + h = 131,076,096: 46,702,792,704 in all
 * (Mistral: 46.7e9). Active: 6 of the 8 experts idle per layer, 32 x 6 x 176,160,768 =
 * 33,822,867,456 fewer: 12,879,925,248 (Mistral: 12.9e9). Mixtral 8x22B (h 6144, 48
 * heads, k 1024, F 16384, 56 layers): attention 6144*8192 + 6144^2 + 6144 = 88,086,528,
 * norm and router 9h = 55,296, experts 8 x 301,989,888; a layer 2,504,060,928, 56 layers
 * 140,227,411,968, plus 2Vh + h = 393,222,144: 140,620,634,112 (Mistral: 141e9); active
 * minus 56 x 6 x 301,989,888 = 101,468,602,368: 39,152,031,744 (Mistral: 39e9). */
static void test_moe_params(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    CostModel cm;
    double total, active;
    mkcm(&c, &cm, mixtral(32, 4096, 32, 14336), NULL, 1);
    cm_model_params(&cm, &total, &active);
    assert_near(total, 46702792704.0);
    assert_near(active, 12879925248.0);
    assert_true(fabs(total / 46.7e9 - 1) < 0.01 && fabs(active / 12.9e9 - 1) < 0.01);
    costmodel_free(&cm);
    mkcm(&c, &cm, mixtral(56, 6144, 48, 16384), NULL, 1);
    cm_model_params(&cm, &total, &active);
    assert_near(total, 140620634112.0);
    assert_near(active, 39152031744.0);
    assert_true(fabs(total / 141e9 - 1) < 0.01 && fabs(active / 39e9 - 1) < 0.01);
    costmodel_free(&cm);
    /* a dense model: all parameters are active (Llama-2 13B: 40 x 317,204,480 +
     * 163,840,000 + 163,845,120 = 13,015,864,320) */
    mkcm(&c, &cm, llama13b(), NULL, 1);
    cm_model_params(&cm, &total, &active);
    assert_near(total, 13015864320.0);
    assert_near(active, total);
    costmodel_free(&cm);
    cap_close(&c);
}

/* A small MoE: llama, 2 layers, h 1024 (8 heads, no GQA), 4 experts of width F 2048,
 * top-2, vocabulary 1000, s 1024, b 1, bf16, on dev() (5e13 FLOP/s achieved, peer link
 * 100 GB/s and 10 us). T = 1024. */
static Entity *small_moe(void)
{
    Entity *m = ent("moe");
    ent_id(m, "arch", "llama");
    ent_num(m, "layers", 2, UNIT_NONE);
    ent_num(m, "hidden", 1024, UNIT_NONE);
    ent_num(m, "heads", 8, UNIT_NONE);
    ent_num(m, "expert_ffn", 2048, UNIT_NONE);
    ent_num(m, "experts", 4, UNIT_NONE);
    ent_num(m, "topk", 2, UNIT_NONE);
    ent_num(m, "vocab", 1000, UNIT_NONE);
    ent_num(m, "seq", 1024, UNIT_NONE);
    return m;
}

/* The MoE MLP half-unit with E = 2 (t = 1). FLOPs: router 2hN = 8,192 and K x 6hF =
 * 25,165,824 per token, x T = 25,778,192,384: 0.51556384768 ms. All-to-all: each rank
 * sends e T h K = 4,194,304 bytes, half of them to the other rank: 0.01 ms + 2,097,152 B /
 * 100e9 B/s = 0.03097152 ms; dispatch + combine 0.06194304 ms in f and again in b.
 * f = 0.57750688768, b = 2 x 0.51556384768 + 0.06194304 = 1.09307073536, w =
 * 0.51556384768 (the all-to-alls are not weight-gradient work). act per token: norm
 * (4+e)h = 6,144, router 4N + 12K = 40, per routed copy 2eh + 4eF = 20,480 (x2): 47,144,
 * x T = 48,275,456. Parameters: one expert 3hF = 6,291,456, N/E = 2 of them 12,582,912,
 * plus norm and router h + hN = 5,120: 12,588,032. With E = 1 no all-to-all, and all 4
 * experts (25,165,824) on the rank. */
static void test_moe_unit(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = mkpipe(1, 1, 1, small_moe(), dev());
    p->expert_parallel = 2;
    CostModel cm;
    assert_int_equal(costmodel_init(&c.d, p, &cm), 0);
    assert_int_equal(cm.ep, 2);
    CmCost u;
    cm_unit(&cm, CM_MLP, false, POLICY_NONE, &u);
    assert_near(u.a2a, 0.06194304);
    assert_near(u.f, 0.57750688768);
    assert_near(u.b, 1.09307073536);
    assert_near(u.w, 0.51556384768);
    assert_near(u.act, 48275456.0);
    assert_near(u.eparams, 12582912.0);
    assert_near(u.params, 12588032.0);
    /* full recomputation re-runs the forward, all-to-alls included */
    cm_unit(&cm, CM_MLP, false, POLICY_FULL, &u);
    assert_near(u.r, 0.57750688768);
    /* attention is not affected */
    CmCost a;
    cm_unit(&cm, CM_ATTN, false, POLICY_NONE, &a);
    assert_near(a.a2a, 0);
    assert_near(a.eparams, 0);
    costmodel_free(&cm);
    p->expert_parallel = 1;
    assert_int_equal(costmodel_init(&c.d, p, &cm), 0);
    cm_unit(&cm, CM_MLP, false, POLICY_NONE, &u);
    assert_near(u.a2a, 0);
    assert_near(u.f, 0.51556384768);
    assert_near(u.eparams, 25165824.0);
    costmodel_free(&cm);
    /* E must divide the experts; a dense model takes only E = 1 */
    p->expert_parallel = 3;
    assert_int_equal(costmodel_init(&c.d, p, &cm), 1);
    assert_non_null(strstr(cap_text(&c), "expert_parallel 3 does not divide the 4 experts"));
    costmodel_free(&cm);
    pipeline_free(p);
    p = mkpipe(1, 1, 1, llama13b(), dev());
    p->expert_parallel = 2;
    assert_int_equal(costmodel_init(&c.d, p, &cm), 1);
    assert_non_null(strstr(cap_text(&c), "expert_parallel 2 needs a mixture-of-experts model"));
    costmodel_free(&cm);
    pipeline_free(p);
    cap_close(&c);
}

/* Model states with experts: the small MoE on one stage, D = 4, E = 2, zero 1. Dense
 * parameters: embedding Vh = 1,024,000, 2 x (attention h(3h) + h^2 + h = 4,195,328 +
 * norm and router 5,120), head Vh + h = 1,025,024: 10,449,920 at 4 + 12/4 = 7 bytes =
 * 73,149,440. Experts: 2 layers x 2 of them x 6,291,456 = 25,165,824, sharded over
 * D/E = 2 replicas: 4 + 12/2 = 10 bytes = 251,658,240. Sum 324,807,680. With E = 1 all
 * 4 experts per layer (50,331,648) at 7 bytes: 73,149,440 + 352,321,536 = 425,470,976. */
static void test_moe_weights(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = mkpipe(1, 2, 1, small_moe(), dev());
    p->data_parallel = 4;
    p->expert_parallel = 2;
    p->zero = 1;
    assert_int_equal(derive_costs(&c.d, p), 0);
    assert_true(ir_cost(p, 0, 0, COST_WEIGHTS) == 324807680.0);
    p->expert_parallel = 1;
    assert_int_equal(derive_costs(&c.d, p), 0);
    assert_true(ir_cost(p, 0, 0, COST_WEIGHTS) == 425470976.0);
    pipeline_free(p);
    cap_close(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_korthikanti),   cmocka_unit_test(test_llama_bytes),
        cmocka_unit_test(test_flops),         cmocka_unit_test(test_weights),
        cmocka_unit_test(test_p2p),           cmocka_unit_test(test_policy_order),
        cmocka_unit_test(test_keep_sets),     cmocka_unit_test(test_block),
        cmocka_unit_test(test_precedence),    cmocka_unit_test(test_idempotent),
        cmocka_unit_test(test_partition),     cmocka_unit_test(test_bad_blocks),
        cmocka_unit_test(test_no_model),      cmocka_unit_test(test_recompute_pass),
        cmocka_unit_test(test_recompute_costs), cmocka_unit_test(test_recompute_bad_args),
        cmocka_unit_test(test_tp_comm),
        cmocka_unit_test(test_rederive_kept_inputs),
        cmocka_unit_test(test_wact_derived),
        cmocka_unit_test(test_device_without_links),
        cmocka_unit_test(test_ckpt_layers),
        cmocka_unit_test(test_ir_cost_fallback),
        cmocka_unit_test(test_zero_weights),
        cmocka_unit_test(test_zero_derive),
        cmocka_unit_test(test_dp_time),
        cmocka_unit_test(test_dp_time_moe),
        cmocka_unit_test(test_moe_params),
        cmocka_unit_test(test_moe_unit),
        cmocka_unit_test(test_moe_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
