/* test_tf_cuda_host.c - the CUDA backend's gpt and llama workloads without a GPU: the
 * passes of runtime/cuda/tf_slice.h (what tf_cuda.cu enqueues: the call order, every
 * tensor's place in the region, a region whose pieces lie apart (runtime/region.h), an R
 * into the pieces F did not keep, split B/W, the identity
 * slice) run on the host, with the kernel bodies of runtime/models/tf_kernels.h called in
 * a loop over every index a GPU thread would take, and the layer functions the GPU
 * takes from the mlp's .cuh kernels and cuBLAS done by their CPU twins
 * (runtime/models/mlp_layers.h). The gradients of a pipelined iteration must match
 * tf_reference_iteration (runtime/models/transformer.c) within the GPU's --check bound 1e-4
 * relative, for gpt and for llama with grouped-query attention.
 *
 * Legend as transformer.h: B, T, N = B*T, C, NH, NKV, F, V, L, M. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cuda/tf_slice.h"
#include "mlp_layers.h"

/* ---- the primitives on the host: a loop where tf_cuda.cu launches a kernel ------------- */

static const TfDims *dims(const TfDev *x) { return &x->host->cfg.d; }
static int rows(const TfDev *x) { return dims(x)->B * dims(x)->T; }

static int tfk_copy(TfDev *x, float *dst, const float *src, size_t n)
{
    (void)x;
    memmove(dst, src, n * sizeof *dst);
    return 0;
}

static int tfk_zero(TfDev *x, float *dst, size_t n)
{
    (void)x;
    memset(dst, 0, n * sizeof *dst);
    return 0;
}

static int tfk_embed(TfDev *x, float *x0, const int *tok, const float *wte, const float *wpe)
{
    const TfDims *d = dims(x);
    for (size_t i = 0; i < (size_t)rows(x) * d->C; i++)
        tf_embed_elem(x0, tok, wte, wpe, d->C, d->T, i);
    return 0;
}

static int tfk_embed_backward(TfDev *x, float *dwte, float *dwpe, const float *dx0,
                              const int *tok)
{
    const TfDims *d = dims(x);
    for (int c = 0; c < d->C; c++)
        tf_embed_backward_col(dwte, dx0, tok, rows(x), d->C, c);
    for (size_t i = 0; dwpe && i < (size_t)d->T * d->C; i++)
        tf_pos_backward_elem(dwpe, dx0, d->B, d->T, d->C, i);
    return 0;
}

static int tfk_norm(TfDev *x, float *out, const float *inp, const float *w, const float *b)
{
    for (int n = 0; n < rows(x); n++)
        tf_norm_forward_row(out, inp, w, b, dims(x)->C, n);
    return 0;
}

static int tfk_norm_backward_input(TfDev *x, float *dinp, const float *dout, const float *inp,
                                   const float *w, bool rms)
{
    for (int n = 0; n < rows(x); n++)
        tf_norm_backward_input_row(dinp, dout, inp, w, rms, dims(x)->C, n);
    return 0;
}

static int tfk_norm_backward_weight(TfDev *x, float *dw, float *db, const float *dout,
                                    const float *inp)
{
    int N = rows(x), C = dims(x)->C;
    for (int n = 0; n < N; n++)
        tf_norm_stats_row(x->stats, x->stats + N, inp, db == NULL, C, n);
    for (int i = 0; i < C; i++)
        tf_norm_backward_weight_col(dw, db, dout, inp, x->stats, x->stats + N, N, C, i);
    return 0;
}

static int tfk_matmul(TfDev *x, float *out, const float *inp, const float *w,
                      const float *bias, int N, int C, int OC)
{
    (void)x;
    mlp_matmul_forward(out, inp, w, bias, N, C, OC);
    return 0;
}

static int tfk_matmul_backward_input(TfDev *x, float *dinp, const float *dout, const float *w,
                                     int N, int C, int OC)
{
    (void)x;
    mlp_matmul_backward_input(dinp, dout, w, N, C, OC);
    return 0;
}

static int tfk_matmul_backward_weight(TfDev *x, float *dw, float *dbias, const float *dout,
                                      const float *inp, int N, int C, int OC)
{
    (void)x;
    mlp_matmul_backward_weight(dw, dbias, dout, inp, N, C, OC);
    return 0;
}

static int tfk_residual(TfDev *x, float *out, const float *a, const float *b, size_t n)
{
    (void)x;
    mlp_residual_forward(out, a, b, n);
    return 0;
}

static int tfk_gelu(TfDev *x, float *out, const float *inp, size_t n)
{
    (void)x;
    mlp_gelu_forward(out, inp, n);
    return 0;
}

static int tfk_gelu_backward(TfDev *x, float *dinp, const float *inp, const float *dout,
                             size_t n)
{
    (void)x;
    mlp_gelu_backward(dinp, inp, dout, n);
    return 0;
}

static int tfk_swiglu(TfDev *x, float *fb, float *fd, const float *fa, const float *fc,
                      size_t n)
{
    (void)x;
    for (size_t j = 0; j < n; j++)
        tf_swiglu_elem(fb, fd, fa, fc, j);
    return 0;
}

static int tfk_swiglu_backward(TfDev *x, float *dfa, float *dfc, const float *dfb,
                               const float *fa, const float *fb, const float *fc, size_t n)
{
    (void)x;
    for (size_t j = 0; j < n; j++)
        tf_swiglu_backward_elem(dfa, dfc, dfb, fa, fb, fc, j);
    return 0;
}

static int tfk_rope(TfDev *x, float *qkv, bool inverse)
{
    const TfDims *d = dims(x);
    size_t n = (size_t)rows(x) * (size_t)(d->NH + d->NKV) * (size_t)(d->C / d->NH / 2);
    for (size_t i = 0; i < n; i++)
        tf_rope_elem(qkv, d, inverse, i);
    return 0;
}

static int tfk_attention(TfDev *x, float *y, float *att, const float *qkv)
{
    const TfDims *d = dims(x);
    for (size_t r = 0; r < (size_t)d->B * d->NH * d->T; r++)
        tf_att_forward_row(att, qkv, d, r);
    for (size_t i = 0; i < (size_t)rows(x) * d->C; i++)
        tf_att_value_elem(y, att, qkv, d, i);
    return 0;
}

static int tfk_attention_backward(TfDev *x, float *dqkv, float *datt, const float *dy,
                                  const float *att, const float *qkv)
{
    const TfDims *d = dims(x);
    size_t K = (size_t)d->C / d->NH * d->NKV;
    for (size_t r = 0; r < (size_t)d->B * d->NH * d->T; r++)
        tf_att_dscore_row(datt, att, dy, qkv, d, r);
    for (size_t i = 0; i < (size_t)rows(x) * d->C; i++)
        tf_att_dq_elem(dqkv, datt, qkv, d, i);
    for (size_t i = 0; i < (size_t)rows(x) * K; i++)
        tf_att_dkv_elem(dqkv, datt, att, dy, qkv, d, i);
    return 0;
}

static int tfk_softmax(TfDev *x, float *probs, const float *logits)
{
    mlp_softmax_forward(probs, logits, rows(x), dims(x)->V);
    return 0;
}

static int tfk_crossentropy(TfDev *x, float *loss, const float *probs, const int *tgt)
{
    *loss = mlp_crossentropy_forward(probs, tgt, rows(x), dims(x)->V);
    return 0;
}

static int tfk_crossentropy_backward(TfDev *x, float *dlogits, const float *probs,
                                     const int *tgt, float dloss)
{
    mlp_crossentropy_softmax_backward(dlogits, probs, tgt, dloss, rows(x), dims(x)->V);
    return 0;
}

static int tfk_sgd(TfDev *x, float *p, const float *g, float lr, size_t n)
{
    (void)x;
    for (size_t j = 0; j < n; j++)
        tf_sgd_elem(p, g, lr, j);
    return 0;
}

/* ---- the test ----------------------------------------------------------------------------- */

static void fill_tokens(int *t, size_t n, int V, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int)((seed >> 33) % (uint64_t)V);
    }
}

/* A device twin of m on the host: parameters copied, gradients zero, scratch sized for
 * the largest of the nv slices. */
static TfDev dev_create(const TfModel *m, const MlpSlice *sl, int nv)
{
    TfDev x = {0};
    size_t N = (size_t)m->cfg.d.B * m->cfg.d.T;
    x.host = m;
    x.params = malloc(m->nparams * sizeof(float));
    x.grads = calloc(m->nparams, sizeof(float));
    x.stats = malloc(2 * N * sizeof(float));
    x.loss = calloc((size_t)m->cfg.M, sizeof(float));
    for (int v = 0; v < nv; v++) {
        size_t a = tf_act_bytes(&m->cfg, &sl[v]) / sizeof(float);
        x.tmp_floats = a > x.tmp_floats ? a : x.tmp_floats;
    }
    x.tmp = malloc((x.tmp_floats ? x.tmp_floats : 1) * sizeof(float));
    assert_true(x.params && x.grads && x.stats && x.loss && x.tmp);
    memcpy(x.params, m->param_mem, m->nparams * sizeof(float));
    return x;
}

static void dev_free(TfDev *x)
{
    free(x->params);
    free(x->grads);
    free(x->stats);
    free(x->loss);
    free(x->tmp);
}

/* The region of slice s with every piece in an allocation of its own, exactly its size
 * (ASan flags a tensor that would cross a cut), allocated last piece first. */
static PrRegion pieces_apart(const TfConfig *c, const MlpSlice *s)
{
    int64_t from[PR_PIECES + 1];
    tf_region_cuts(c, s, from);
    PrRegion g;
    for (int k = 0; k <= PR_PIECES; k++)
        g.from[k] = from[k] / (int64_t)sizeof(float);
    for (int k = PR_PIECES - 1; k >= 0; k--) {
        size_t n = (size_t)(from[k + 1] - from[k]);
        g.base[k] = n ? malloc(n) : NULL;
        assert_true(!n || g.base[k]);
    }
    return g;
}

static void pieces_free(PrRegion *g)
{
    for (int k = 0; k < PR_PIECES; k++)
        free(g->base[k]);
}

/* One iteration of M micro-batches over the slices of `layers` (nv virtual stages) with
 * the passes of tf_slice.h, each micro-batch in schedule-like order: F of every slice,
 * the last slice through an F that keeps only its checkpoint, an R into the pieces F did
 * not keep and a split B + W; the middle slices keep all, B without split. Every region
 * has its pieces in allocations of their own. The gradients must match the sequential
 * reference within 1e-4 relative; the losses too. */
static void pipelined_matches_reference(TfConfig c, int nv, const int *layers)
{
    TfModel *m = tf_create(&c, 3), *ref = tf_create(&c, 3);
    assert_non_null(m);
    assert_non_null(ref);
    MlpSlice sl[8];
    assert_true(nv <= 8);
    assert_int_equal(tf_slices_init(&c, nv, layers, sl), 0);
    size_t N = (size_t)c.d.B * c.d.T, btc = N * (size_t)c.d.C;
    int *tok = malloc((size_t)c.M * N * sizeof *tok), *tgt = malloc((size_t)c.M * N * sizeof *tgt);
    assert_true(tok && tgt);
    fill_tokens(tok, (size_t)c.M * N, c.d.V, 11);
    fill_tokens(tgt, (size_t)c.M * N, c.d.V, 12);
    MlpSlice whole = tf_whole(&c);
    tf_zero_grad(ref, &whole);
    float ref_loss = tf_reference_iteration(ref, c.M, tok, tgt);
    assert_false(isnan(ref_loss));

    TfDev x = dev_create(m, sl, nv);
    for (int v = 0; v < nv; v++)
        assert_int_equal(tfd_zero_or_step(&x, &sl[v], true, 0.0f), 0);
    PrRegion rg[8];
    float *h[9], *dh[9];
    for (int v = 0; v <= nv; v++) {
        h[v] = calloc(btc, sizeof(float));
        dh[v] = calloc(btc, sizeof(float));
        assert_true(h[v] && dh[v]);
    }
    for (int v = 0; v < nv; v++)
        rg[v] = pieces_apart(&c, &sl[v]);
    double loss = 0;
    for (int mb = 0; mb < c.M; mb++) {
        const int *tk = tok + (size_t)mb * N, *tg = tgt + (size_t)mb * N;
        for (int v = 0; v < nv; v++) {
            bool last = v == nv - 1;
            /* the slice boundary: h[v] in, h[v+1] out */
            assert_int_equal(tfd_forward(&x, &sl[v], mb, sl[v].head ? NULL : h[v + 1], &rg[v],
                                         sl[v].embed ? NULL : h[v], tk, tg, !last),
                             0);
            if (last) {
                /* poison what F did not keep (the pieces past the checkpoint), then R
                 * rebuilds it */
                int64_t ck = (int64_t)(tf_ckpt_bytes(&c, &sl[v]) / sizeof(float));
                for (int k = 0; k < PR_PIECES; k++)
                    for (int64_t j = rg[v].from[k]; j < rg[v].from[k + 1] && j >= ck; j++)
                        rg[v].base[k][j - rg[v].from[k]] = NAN;
                assert_int_equal(tfd_recompute(&x, &sl[v], &rg[v], tk), 0);
            }
        }
        loss += x.loss[mb];
        for (int v = nv - 1; v >= 0; v--) {
            bool last = v == nv - 1;
            assert_int_equal(tfd_backward(&x, &sl[v], sl[v].embed ? NULL : dh[v], &rg[v],
                                          sl[v].head ? NULL : dh[v + 1], tk, tg, last),
                             0);
            if (last)
                assert_int_equal(tfd_weight_grad(&x, &sl[v], &rg[v], tk), 0);
        }
    }
    assert_float_equal(loss / c.M, ref_loss, 1e-5 * fabs(ref_loss) + 1e-6);
    double worst = 0;
    for (int i = 0; i < ref->ntensors; i++) {
        const TfTensor *t = &ref->tensors[i];
        double e = mlp_rel_error(x.grads + t->off, ref->grad_mem + t->off, t->n);
        if (!(e < 1e-4))
            fail_msg("%s: relative gradient error %g", t->name, e);
        worst = e > worst ? e : worst;
    }
    print_message("max relative gradient error %.3g over %d tensors\n", worst, ref->ntensors);
    /* the SGD step of tf_slice.h is the CPU's */
    for (int v = 0; v < nv; v++) {
        assert_int_equal(tfd_zero_or_step(&x, &sl[v], false, 0.5f), 0);
        tf_sgd_step(ref, &sl[v], 0.5f);
    }
    for (size_t j = 0; j < m->nparams; j += 7)
        assert_float_equal(x.params[j], ref->param_mem[j],
                           1e-4 * fabs(ref->param_mem[j]) + 1e-5);
    for (int v = 0; v < nv; v++)
        pieces_free(&rg[v]);
    for (int v = 0; v <= nv; v++) {
        free(h[v]);
        free(dh[v]);
    }
    dev_free(&x);
    tf_free(m);
    tf_free(ref);
    free(tok);
    free(tgt);
}

static TfConfig gpt_cfg(void)
{
    return (TfConfig){{TF_GPT, 13, 16, 4, 4, 24, 6, 2}, 3, 2};
}

static TfConfig llama_cfg(void)
{
    /* grouped-query attention: 4 heads share 2 key/value heads; head size 4 */
    return (TfConfig){{TF_LLAMA, 13, 16, 4, 2, 20, 6, 2}, 3, 2};
}

static void test_gpt_two_slices(void **st)
{
    (void)st;
    pipelined_matches_reference(gpt_cfg(), 2, (const int[]){1, 2});
}

static void test_gpt_identity_slice(void **st)
{
    (void)st;
    pipelined_matches_reference(gpt_cfg(), 4, (const int[]){0, 2, 0, 1});
}

static void test_llama_two_slices(void **st)
{
    (void)st;
    pipelined_matches_reference(llama_cfg(), 2, (const int[]){2, 1});
}

static void test_llama_mqa_three_slices(void **st)
{
    (void)st;
    TfConfig c = llama_cfg();
    c.d.NKV = 1; /* multi-query: every head shares one key/value head */
    pipelined_matches_reference(c, 3, (const int[]){1, 1, 1});
}

static void test_whole_model_one_slice(void **st)
{
    (void)st;
    pipelined_matches_reference(llama_cfg(), 1, (const int[]){3});
    pipelined_matches_reference(gpt_cfg(), 1, (const int[]){3});
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_two_slices),
        cmocka_unit_test(test_gpt_identity_slice),
        cmocka_unit_test(test_llama_two_slices),
        cmocka_unit_test(test_llama_mqa_three_slices),
        cmocka_unit_test(test_whole_model_one_slice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
