/* test_transformer.c - the `gpt` and `llama` workloads: the whole model's gradient
 * against central finite differences, slice-wise pipelined execution (partitions,
 * recomputation into a split region, stage- and layer-granular, split B/W with W on the
 * wact prefix alone) against tf_reference_iteration, training on a fixed text, and the
 * region layout against the cost model's per-layer activation bytes (docs/cost-model.md)
 * and the code generator's arena sizes.
 *
 * Legend: B = micro-batch size, T = sequence length, C = hidden, NH heads, NKV key/value
 * heads, F = ffn, V = vocabulary, L = layers, M = micro-batches.
 *
 * Finite differences. The forward is fp32, so the loss carries ~1e-6 relative rounding;
 * with h = 1e-2 the central difference has rounding error ~1e-6 * 2.4 / 2e-2 ~ 1e-4 and
 * truncation ~h^2 * f''' ~ 1e-4, against gradients whose largest entries are ~1e-1: a
 * per-tensor bound of 1e-2 of the largest entry (+3e-4 absolute) separates rounding from
 * a wrong formula (which is off by O(1)). Measured: about 5e-4 for both. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "costmodel.h"
#include "data.h"
#include "emit_c.h"
#include "frontend.h"
#include "testutil.h"
#include "transformer.h"

static TfConfig gpt_cfg(void)
{
    return (TfConfig){{TF_GPT, 11, 8, 2, 2, 16, 4, 2}, 2, 1};
}

static TfConfig llama_cfg(void)
{
    /* grouped-query attention: 4 heads share 2 key/value heads; head size 4 */
    return (TfConfig){{TF_LLAMA, 11, 16, 4, 2, 12, 4, 2}, 2, 1};
}

static void fill_tokens(int *t, size_t n, int V, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int)((seed >> 33) % (uint64_t)V);
    }
}

/* Loss of one micro-batch of the whole model. */
static float whole_loss(TfModel *m, float *act, const int *tok, const int *tgt)
{
    MlpSlice s = tf_whole(&m->cfg);
    float loss = 0;
    assert_int_equal(tf_forward(m, &s, NULL, &loss, act, NULL, tok, tgt, true), 0);
    return loss;
}

static void check_fd(TfConfig c)
{
    TfModel *m = tf_create(&c, 7);
    assert_non_null(m);
    size_t N = (size_t)c.d.B * c.d.T;
    int tok[64], tgt[64];
    assert_true(N <= 64);
    fill_tokens(tok, N, c.d.V, 1);
    fill_tokens(tgt, N, c.d.V, 2);
    MlpSlice s = tf_whole(&c);
    float *act = malloc(tf_act_bytes(&c, &s));
    assert_non_null(act);
    tf_zero_grad(m, &s);
    assert_false(isnan(tf_reference_iteration(m, 1, tok, tgt)));
    const float h = 1e-2f;
    double worst = 0;
    for (int i = 0; i < m->ntensors; i++) {
        const TfTensor *t = &m->tensors[i];
        double maxg = 0, maxd = 0;
        for (size_t j = 0; j < t->n; j++)
            maxg = fmax(maxg, fabs(m->grad_mem[t->off + j]));
        for (size_t j = 0; j < t->n; j++) {
            float *p = &m->param_mem[t->off + j], p0 = *p;
            *p = p0 + h;
            double lp = whole_loss(m, act, tok, tgt);
            *p = p0 - h;
            double lm = whole_loss(m, act, tok, tgt);
            *p = p0;
            double fd = (lp - lm) / (2.0 * h);
            maxd = fmax(maxd, fabs(fd - m->grad_mem[t->off + j]));
        }
        if (maxd > 1e-2 * maxg + 3e-4)
            fail_msg("%s: finite differences differ by %g (largest gradient %g)", t->name, maxd,
                     maxg);
        assert_true(maxg > 0 || !strcmp(t->name, "wpe") || strstr(t->name, "_b"));
        worst = fmax(worst, maxd / fmax(maxg, 1e-30));
    }
    print_message("    %s: worst finite-difference error %.3g of the largest entry\n",
                  c.d.arch == TF_GPT ? "gpt" : "llama", worst);
    free(act);
    tf_free(m);
}

static void test_gpt_fd(void **state)
{
    (void)state;
    check_fd(gpt_cfg());
}

static void test_llama_fd(void **state)
{
    (void)state;
    check_fd(llama_cfg());
}

enum { MODE_KEEP, MODE_RECOMPUTE, MODE_SPLIT, MODE_LAYER };

/* The region of slice s in two places: its checkpoint at ck, the rest at rest. */
static PrRegion two_places(const TfConfig *c, const MlpSlice *s, void *ck, void *rest)
{
    int64_t from[PR_PIECES + 1], nck = (int64_t)(tf_ckpt_bytes(c, s) / sizeof(float));
    tf_region_cuts(c, s, from);
    for (int k = 0; k <= PR_PIECES; k++)
        from[k] /= (int64_t)sizeof(float);
    PrRegion g = pr_region_whole(ck, from);
    for (int k = 0; k < PR_PIECES; k++)
        if (g.base[k] && from[k] >= nck)
            g.base[k] = (float *)rest + (from[k] - nck);
    return g;
}

/* One iteration of M micro-batches, slice by slice (forwards in model order, then
 * backwards in reverse), with regions allocated at exactly the bytes the mode leaves
 * alive, so that AddressSanitizer catches any access outside them. Gradients must equal
 * the reference's bit for bit (same micro-batch order). */
static void run_slices(TfConfig c, int nv, const int *layers, int mode)
{
    TfModel *m = tf_create(&c, 3), *ref = tf_create(&c, 3);
    assert_non_null(m);
    assert_non_null(ref);
    MlpSlice sl[8];
    assert_int_equal(tf_slices_init(&c, nv, layers, sl), 0);
    bool recompute = mode == MODE_RECOMPUTE || mode == MODE_LAYER;
    for (int v = 0; v < nv; v++) {
        MlpSlice st = sl[v];
        sl[v].per_layer = mode == MODE_LAYER;
        /* one layer's rebuilt part instead of n: R's place shrinks from the second layer */
        if (sl[v].per_layer && sl[v].nlayers >= 2)
            assert_true(tf_act_bytes(&c, &sl[v]) - tf_ckpt_bytes(&c, &sl[v]) <
                        tf_act_bytes(&c, &st) - tf_ckpt_bytes(&c, &st));
    }
    size_t N = (size_t)c.d.B * c.d.T, io = tf_io_bytes(&c);
    int *tok = malloc((size_t)c.M * N * sizeof *tok), *tgt = malloc((size_t)c.M * N * sizeof *tgt);
    fill_tokens(tok, (size_t)c.M * N, c.d.V, 11);
    fill_tokens(tgt, (size_t)c.M * N, c.d.V, 12);
    MlpSlice whole = tf_whole(&c);
    tf_zero_grad(ref, &whole);
    float lref = tf_reference_iteration(ref, c.M, tok, tgt);
    double lsum = 0;
    for (int mb = 0; mb < c.M; mb++) {
        const int *tk = tok + mb * N, *tg = tgt + mb * N;
        void *ck[8], *rest[8];
        float *x = NULL;
        for (int v = 0; v < nv; v++) {
            size_t a = tf_act_bytes(&c, &sl[v]), k = tf_ckpt_bytes(&c, &sl[v]);
            float *out = sl[v].head ? NULL : malloc(io), loss = 0;
            if (recompute) {
                ck[v] = malloc(k ? k : 1);
                assert_int_equal(tf_forward(m, &sl[v], out, &loss, ck[v], x, tk, tg, false), 0);
                rest[v] = malloc(a - k ? a - k : 1);   /* R rebuilds the rest elsewhere */
                PrRegion g = two_places(&c, &sl[v], ck[v], rest[v]);
                tf_recompute(m, &sl[v], &g, tk);
            } else {
                ck[v] = malloc(a ? a : 1);
                assert_int_equal(tf_forward(m, &sl[v], out, &loss, ck[v], x, tk, tg, true), 0);
                rest[v] = (char *)ck[v] + k;
            }
            if (sl[v].head)
                lsum += loss;
            free(x);
            x = out;
        }
        float *dout = NULL;
        for (int v = nv - 1; v >= 0; v--) {
            float *din = sl[v].embed ? NULL : malloc(io);
            bool split = mode == MODE_SPLIT;
            PrRegion g = two_places(&c, &sl[v], ck[v], rest[v]);
            tf_backward(m, &sl[v], din, &g, dout, tk, tg, split);
            if (split) { /* keep only the wact prefix for W */
                size_t w = tf_wact_bytes(&c, &sl[v]), k = tf_ckpt_bytes(&c, &sl[v]);
                char *keep = malloc(w ? w : 1);
                memcpy(keep, ck[v], w);
                free(ck[v]);
                PrRegion gw = two_places(&c, &sl[v], keep, keep + k);
                tf_weight_grad(m, &sl[v], &gw, tk);
                free(keep);
            } else {
                free(ck[v]);
            }
            if (recompute)
                free(rest[v]);
            free(dout);
            dout = din;
        }
        free(dout);
    }
    assert_float_equal(lsum / c.M, lref, 1e-6);
    for (int i = 0; i < m->ntensors; i++) {
        const TfTensor *t = &m->tensors[i];
        double e = mlp_rel_error(m->grad_mem + t->off, ref->grad_mem + t->off, t->n);
        if (e != 0)
            fail_msg("partition of %d, mode %d: %s differs by %g", nv, mode, t->name, e);
    }
    free(tok);
    free(tgt);
    tf_free(m);
    tf_free(ref);
}

static void test_slices(void **state)
{
    (void)state;
    static const int parts[][5] = {
        {1, 4}, {2, 1, 3}, {3, 0, 2, 2}, {4, 2, 0, 1, 1}, {3, 4, 0, 0}, {4, 0, 4, 0, 0}};
    for (int a = 0; a < 2; a++) {
        TfConfig c = a ? llama_cfg() : gpt_cfg();
        c.L = 4;
        c.M = 3;
        for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++)
            for (int mode = MODE_KEEP; mode <= MODE_LAYER; mode++)
                run_slices(c, parts[p][0], parts[p] + 1, mode);
    }
}

/* 40 SGD iterations of each model on a fixed paragraph: the loss falls well below its
 * start (ln V for V = 256 is 5.55). */
static void test_training(void **state)
{
    (void)state;
    static const char text[] =
        "the quick brown fox jumps over the lazy dog. the dog sleeps and the fox runs. "
        "a pipeline cuts the model into stages; every stage runs its forward and backward "
        "ops over the micro-batches of one training iteration.";
    TextData d;
    assert_int_equal(data_from_memory(&d, text, sizeof text - 1), 0);
    for (int a = 0; a < 2; a++) {
        TfConfig c = {{a ? TF_LLAMA : TF_GPT, 256, 32, 4, a ? 2 : 4, 64, 16, 4}, 2, 2};
        TfModel *m = tf_create(&c, 5);
        MlpSlice s = tf_whole(&c);
        size_t N = (size_t)c.d.B * c.d.T;
        int *tok = malloc(2 * N * sizeof *tok), *tgt = malloc(2 * N * sizeof *tgt);
        float first = 0, last = 0;
        for (int it = 0; it < 40; it++) {
            for (int mb = 0; mb < 2; mb++)
                assert_int_equal(data_batch(&d, 1, it, mb, c.d.B, c.d.T, 256, tok + mb * N,
                                            tgt + mb * N), 0);
            tf_zero_grad(m, &s);
            float l = tf_reference_iteration(m, 2, tok, tgt);
            tf_sgd_step(m, &s, 0.2f);
            if (it == 0)
                first = l;
            if (it >= 35)
                last += l / 5;
        }
        print_message("    %s: loss %.3f -> %.3f\n", a ? "llama" : "gpt", first, last);
        assert_true(first > logf(256) - 0.7f && first < logf(256) + 0.7f);
        assert_true(last < first - 1.0f);
        free(tok);
        free(tgt);
        tf_free(m);
    }
    data_free(&d);
}

/* A pipeline of P stages over `model`, loaded from text (no imports). */
static Pipeline *load(Cap *cap, const char *model, int P)
{
    char src[512];
    int n = snprintf(src, sizeof src,
                     "model m { %s }\npipeline t { stages %d microbatches 1 model m\n", model, P);
    for (int s = 0; s < P; s++)
        n += snprintf(src + n, sizeof src - (size_t)n, "stage %d { F0 B0 }\n", s);
    snprintf(src + n, sizeof src - (size_t)n, "}\n");
    Pipeline *p = load_pipeline_string(&cap->d, NULL, "t.pipe", src, strlen(src));
    if (!p)
        fail_msg("%s", cap_text(cap));
    return p;
}

/* The runtime's per-layer forward bytes equal the cost model's activation bytes of one
 * layer (attention + MLP half-units, docs/cost-model.md) at fp32 with eager attention
 * (the runtime keeps the softmax), less what the runtime does not have: GPT's dropout
 * (Korthikanti's masks of 1 byte per element after attention and MLP, and the softmax
 * dropout's mask and output, (e + 1) a s per token). The head likewise, exactly. */
static void test_costmodel_bytes(void **state)
{
    (void)state;
    static const struct {
        const char *model;
        TfConfig c;
    } cases[] = {
        {"arch gpt layers 2 hidden 64 heads 4 vocab 256 seq 32 mbs 2 dtype fp32 "
         "attention eager",
         {{TF_GPT, 256, 64, 4, 4, 256, 32, 2}, 2, 1}},
        {"arch gpt layers 3 hidden 48 heads 3 ffn 80 vocab 96 seq 16 mbs 1 dtype fp32 "
         "attention eager",
         {{TF_GPT, 96, 48, 3, 3, 80, 16, 1}, 3, 1}},
        {"arch llama layers 2 hidden 64 heads 8 kv_heads 2 vocab 256 seq 32 mbs 2 "
         "dtype fp32 attention eager",
         {{TF_LLAMA, 256, 64, 8, 2, 256, 32, 2}, 2, 1}},
        {"arch llama layers 2 hidden 32 heads 4 ffn 48 vocab 64 seq 16 mbs 3 dtype fp32 "
         "attention eager",
         {{TF_LLAMA, 64, 32, 4, 4, 48, 16, 3}, 2, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Cap cap;
        cap_open(&cap);
        Pipeline *p = load(&cap, cases[i].model, 1);
        CostModel cm;
        assert_int_equal(costmodel_init(&cap.d, p, &cm), 0);
        CmCost at, ml, hd;
        cm_unit(&cm, CM_ATTN, false, POLICY_NONE, &at);
        cm_unit(&cm, CM_MLP, false, POLICY_NONE, &ml);
        cm_unit(&cm, CM_HEAD, false, POLICY_NONE, &hd);
        const TfConfig *c = &cases[i].c;
        double T = (double)c->d.B * c->d.T, e = 4, h = c->d.C, a = c->d.NH, s = c->d.T;
        double dropout = c->d.arch == TF_GPT ? T * (2 * h + (e + 1) * a * s) : 0;
        assert_true(cm.model.ffn == c->d.F && cm.model.kv_heads == c->d.NKV);
        double layer = (double)tf_layer_act_bytes(c);
        if (layer != at.act + ml.act - dropout)
            fail_msg("case %zu: runtime %g bytes per layer, cost model %g", i, layer,
                     at.act + ml.act - dropout);
        TfLayout ho = tf_layout(&c->d, 0, false, true);
        assert_true((double)(ho.fwd * sizeof(float)) == hd.act);
        costmodel_free(&cm);
        pipeline_free(p);
        cap_close(&cap);
    }
}

/* The code generator plans the arena with the runtime's region sizes, for the model's
 * defaults (llama's 256-rounded ffn, kv_heads = heads) and every slice kind. */
static void test_emit_sizes(void **state)
{
    (void)state;
    static const char *const models[] = {
        "arch llama layers 5 hidden 32 heads 4 vocab 256 seq 8 mbs 2",
        "arch gpt layers 5 hidden 16 heads 2 kv_heads 1 vocab 300 seq 8 mbs 1",
    };
    for (int k = 0; k < 2; k++) {
        Cap cap;
        cap_open(&cap);
        Pipeline *p = load(&cap, models[k], 3);
        MlpShape sh;
        char why[200];
        if (mlp_shape(p, &sh, why, sizeof why) != 0)
            fail_msg("%s", why);
        TfConfig c = {{sh.arch, sh.vocab, sh.C, sh.heads, sh.kv_heads, sh.ffn, sh.T, sh.B},
                      sh.L, 1};
        assert_int_equal(sh.arch, k ? TF_GPT : TF_LLAMA);
        assert_int_equal(sh.ffn, k ? 64 : 256);
        MlpSlice sl[3];
        assert_int_equal(tf_slices_init(&c, 3, sh.layers, sl), 0);
        for (int v = 0; v < 3; v++) {
            assert_int_equal(sh.sizes[v].act, (int64_t)tf_act_bytes(&c, &sl[v]));
            assert_int_equal(sh.sizes[v].ckpt, (int64_t)tf_ckpt_bytes(&c, &sl[v]));
            assert_int_equal(sh.sizes[v].wact, (int64_t)tf_wact_bytes(&c, &sl[v]));
            assert_true(sh.sizes[v].ckpt <= sh.sizes[v].wact &&
                        sh.sizes[v].wact <= sh.sizes[v].act);
        }
        mlp_shape_free(&sh);
        pipeline_free(p);
        cap_close(&cap);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_fd),
        cmocka_unit_test(test_llama_fd),
        cmocka_unit_test(test_slices),
        cmocka_unit_test(test_training),
        cmocka_unit_test(test_costmodel_bytes),
        cmocka_unit_test(test_emit_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
