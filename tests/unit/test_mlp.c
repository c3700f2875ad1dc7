/* test_mlp.c - the `mlp` workload: every layer against an independent fp64 reference
 * (forward values, and backward against central finite differences of the fp64
 * forward), the whole model's gradient against finite differences, slice-wise pipelined
 * execution (F/R/B/W in several orders, act regions moved and shrunk as the runtime does)
 * against mlp_reference_iteration, training on a fixed text, and the text batches.
 *
 * Legend: B = micro-batch size, T = sequence length, C = hidden, H = 4C, V = vocabulary,
 * L = layers, M = micro-batches, N = B*T rows.
 *
 * Tolerances. fp32 rounding is ~6e-8 per operation; the layers here sum at most a few
 * hundred terms, so an fp32 result is within ~1e-5 relative of the fp64 one. The fp64
 * finite differences use h = 1e-5 (central): truncation error ~h^2 * f''' ~ 1e-10, and
 * rounding ~1e-16 / h ~ 1e-11, far below the fp32 noise being measured. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <cblas.h>

#include "data.h"
#include "mlp.h"
#include "mlp_layers.h"

/* ------------------------------------------------------------------------------------
 * fp64 reference layers (written from the formulas, independently of mlp_layers.c)
 */

static const double FD_H = 1e-5;

/* out (C) = layer norm of x (C), eps 1e-5 */
static void d_layernorm(double *out, const double *x, const double *w, const double *b, int C)
{
    double m = 0, v = 0;
    for (int i = 0; i < C; i++)
        m += x[i];
    m /= C;
    for (int i = 0; i < C; i++)
        v += (x[i] - m) * (x[i] - m);
    v /= C;
    for (int i = 0; i < C; i++)
        out[i] = (x[i] - m) / sqrt(v + 1e-5) * w[i] + b[i];
}

/* out (OC) = W (OC,IC) x (IC) + bias (OC) */
static void d_matvec(double *out, const double *W, const double *bias, const double *x,
                     int IC, int OC)
{
    for (int o = 0; o < OC; o++) {
        double s = bias ? bias[o] : 0.0;
        for (int i = 0; i < IC; i++)
            s += W[(size_t)o * IC + i] * x[i];
        out[o] = s;
    }
}

static double d_gelu(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

/* -log softmax(logits (V))[target] */
static double d_xent(const double *logits, int target, int V)
{
    double mx = logits[0], s = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > mx)
            mx = logits[i];
    for (int i = 0; i < V; i++)
        s += exp(logits[i] - mx);
    return log(s) + mx - logits[target];
}

/* ------------------------------------------------------------------------------------
 * Helpers
 */

static uint64_t rng_state = 42;
static double urand(void)   /* uniform [0,1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static void frand(float *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(lo + (hi - lo) * urand());
}
static double *to_double(const float *x, size_t n)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    assert_non_null(d);
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

/* max |a - ref| / max |ref|, printed llm.c style */
static double check(const char *what, const float *a, const double *ref, size_t n)
{
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - ref[i]);
        if (!(d <= md))
            md = d;
        if (fabs(ref[i]) > mr)
            mr = fabs(ref[i]);
    }
    double rel = md / (mr > 1e-30 ? mr : 1e-30);
    printf("    %-22s maxdiff %.3e  max|ref| %.3e  rel %.3e\n", what, md, mr, rel);
    return rel;
}

/* Central finite difference of J over every element of x (n doubles). */
typedef double (*Objective)(void *ctx);
static void fd_grad(double *grad, double *x, size_t n, Objective J, void *ctx)
{
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + FD_H;
        double jp = J(ctx);
        x[i] = keep - FD_H;
        double jm = J(ctx);
        x[i] = keep;
        grad[i] = (jp - jm) / (2 * FD_H);
    }
}

/* ------------------------------------------------------------------------------------
 * Layers: forward against fp64, backward against finite differences of the fp64 forward.
 * Each objective is J = sum_i wout_i * out_i, so dout = wout.
 */

enum { N_ = 5, C_ = 7, OC_ = 6, V_ = 9 };

typedef struct {
    double *inp, *w, *b, *wout;
} LayerCtx;

static double J_matmul(void *p)
{
    LayerCtx *c = p;
    double out[OC_], J = 0;
    for (int n = 0; n < N_; n++) {
        d_matvec(out, c->w, c->b, c->inp + n * C_, C_, OC_);
        for (int o = 0; o < OC_; o++)
            J += c->wout[n * OC_ + o] * out[o];
    }
    return J;
}

static void test_matmul(void **state)
{
    (void)state;
    float inp[N_ * C_], w[OC_ * C_], b[OC_], wout[N_ * OC_], out[N_ * OC_];
    frand(inp, N_ * C_, -1, 1), frand(w, OC_ * C_, -1, 1), frand(b, OC_, -1, 1);
    frand(wout, N_ * OC_, -1, 1);
    LayerCtx c = {to_double(inp, N_ * C_), to_double(w, OC_ * C_), to_double(b, OC_),
                  to_double(wout, N_ * OC_)};
    printf("matmul (N=%d C=%d OC=%d)\n", N_, C_, OC_);
    mlp_matmul_forward(out, inp, w, b, N_, C_, OC_);
    double ref[N_ * OC_];
    for (int n = 0; n < N_; n++)
        d_matvec(ref + n * OC_, c.w, c.b, c.inp + n * C_, C_, OC_);
    assert_true(check("out", out, ref, N_ * OC_) < 1e-5);

    float dinp[N_ * C_], dw[OC_ * C_] = {0}, db[OC_] = {0};
    mlp_matmul_backward_input(dinp, wout, w, N_, C_, OC_);
    mlp_matmul_backward_weight(dw, db, wout, inp, N_, C_, OC_);
    double g[OC_ * C_];
    fd_grad(g, c.inp, N_ * C_, J_matmul, &c);
    assert_true(check("dinp", dinp, g, N_ * C_) < 1e-5);
    fd_grad(g, c.w, OC_ * C_, J_matmul, &c);
    assert_true(check("dweight", dw, g, OC_ * C_) < 1e-5);
    fd_grad(g, c.b, OC_, J_matmul, &c);
    assert_true(check("dbias", db, g, OC_) < 1e-5);
    /* the weight gradient accumulates: a second call doubles it */
    mlp_matmul_backward_weight(dw, db, wout, inp, N_, C_, OC_);
    for (int i = 0; i < OC_; i++)
        g[i] *= 2;
    assert_true(check("dbias, twice", db, g, OC_) < 1e-5);
    free(c.inp), free(c.w), free(c.b), free(c.wout);
}

static double J_layernorm(void *p)
{
    LayerCtx *c = p;
    double out[C_], J = 0;
    for (int n = 0; n < N_; n++) {
        d_layernorm(out, c->inp + n * C_, c->w, c->b, C_);
        for (int i = 0; i < C_; i++)
            J += c->wout[n * C_ + i] * out[i];
    }
    return J;
}

static void test_layernorm(void **state)
{
    (void)state;
    float inp[N_ * C_], w[C_], b[C_], wout[N_ * C_], out[N_ * C_], mean[N_], rstd[N_];
    frand(inp, N_ * C_, -2, 3), frand(w, C_, 0.5, 1.5), frand(b, C_, -1, 1);
    frand(wout, N_ * C_, -1, 1);
    LayerCtx c = {to_double(inp, N_ * C_), to_double(w, C_), to_double(b, C_),
                  to_double(wout, N_ * C_)};
    printf("layernorm (N=%d C=%d)\n", N_, C_);
    mlp_layernorm_forward(out, mean, rstd, inp, w, b, N_, C_);
    double ref[N_ * C_];
    for (int n = 0; n < N_; n++)
        d_layernorm(ref + n * C_, c.inp + n * C_, c.w, c.b, C_);
    assert_true(check("out", out, ref, N_ * C_) < 1e-5);

    float dinp[N_ * C_], dw[C_] = {0}, db[C_] = {0};
    for (int i = 0; i < N_ * C_; i++)
        dinp[i] = 0.5f;   /* backward_input accumulates: start from 0.5 */
    mlp_layernorm_backward_input(dinp, wout, inp, mean, rstd, w, N_, C_);
    mlp_layernorm_backward_weight(dw, db, wout, inp, mean, rstd, N_, C_);
    double g[N_ * C_];
    fd_grad(g, c.inp, N_ * C_, J_layernorm, &c);
    for (int i = 0; i < N_ * C_; i++)
        g[i] += 0.5;
    assert_true(check("dinp (+= 0.5)", dinp, g, N_ * C_) < 1e-5);
    fd_grad(g, c.w, C_, J_layernorm, &c);
    assert_true(check("dweight", dw, g, C_) < 1e-5);
    fd_grad(g, c.b, C_, J_layernorm, &c);
    assert_true(check("dbias", db, g, C_) < 1e-5);
    free(c.inp), free(c.w), free(c.b), free(c.wout);
}

enum { NG_ = 64 };

static double J_gelu(void *p)
{
    LayerCtx *c = p;
    double J = 0;
    for (int i = 0; i < NG_; i++)
        J += c->wout[i] * d_gelu(c->inp[i]);
    return J;
}

static void test_gelu(void **state)
{
    (void)state;
    float inp[NG_], wout[NG_], out[NG_], dinp[NG_];
    for (int i = 0; i < NG_; i++)   /* a grid over [-5, 5] plus 0 */
        inp[i] = -5.0f + 10.0f * i / (NG_ - 1);
    inp[NG_ / 2] = 0.0f;
    frand(wout, NG_, -1, 1);
    LayerCtx c = {to_double(inp, NG_), NULL, NULL, to_double(wout, NG_)};
    printf("gelu (n=%d)\n", NG_);
    mlp_gelu_forward(out, inp, NG_);
    double ref[NG_];
    for (int i = 0; i < NG_; i++)
        ref[i] = d_gelu(c.inp[i]);
    assert_true(check("out", out, ref, NG_) < 1e-5);
    /* closed forms: GELU(0) = 0, GELU'(0) = 1/2 */
    assert_true(out[NG_ / 2] == 0.0f);
    mlp_gelu_backward(dinp, inp, wout, NG_);
    assert_true(fabsf(dinp[NG_ / 2] - 0.5f * wout[NG_ / 2]) < 1e-7f);
    double g[NG_];
    fd_grad(g, c.inp, NG_, J_gelu, &c);
    assert_true(check("dinp", dinp, g, NG_) < 1e-5);
    free(c.inp), free(c.wout);
}

static int enc_tok[N_] = {3, 0, 8, 3, 3};   /* repeats: gradients add up */

static double J_encoder(void *p)
{
    LayerCtx *c = p;
    double J = 0;
    for (int n = 0; n < N_; n++)
        for (int i = 0; i < C_; i++)
            J += c->wout[n * C_ + i] * c->w[enc_tok[n] * C_ + i];
    return J;
}

static void test_encoder(void **state)
{
    (void)state;
    float wte[V_ * C_], wout[N_ * C_], out[N_ * C_], dwte[V_ * C_] = {0};
    frand(wte, V_ * C_, -1, 1), frand(wout, N_ * C_, -1, 1);
    LayerCtx c = {NULL, to_double(wte, V_ * C_), NULL, to_double(wout, N_ * C_)};
    printf("encoder (N=%d C=%d V=%d)\n", N_, C_, V_);
    mlp_encoder_forward(out, enc_tok, wte, N_, C_);
    for (int n = 0; n < N_; n++)
        assert_memory_equal(out + n * C_, wte + enc_tok[n] * C_, C_ * sizeof(float));
    mlp_encoder_backward(dwte, wout, enc_tok, N_, C_);
    double g[V_ * C_];
    fd_grad(g, c.w, V_ * C_, J_encoder, &c);
    assert_true(check("dwte", dwte, g, V_ * C_) < 1e-5);
    /* rows of unused tokens stay exactly zero */
    for (int i = 0; i < C_; i++)
        assert_true(dwte[1 * C_ + i] == 0.0f);
    free(c.w), free(c.wout);
}

static int ce_tgt[N_] = {0, 8, 4, 4, 1};

static double J_xent(void *p)
{
    LayerCtx *c = p;
    double J = 0;
    for (int n = 0; n < N_; n++)
        J += d_xent(c->inp + n * V_, ce_tgt[n], V_);
    return J / N_;
}

static void test_softmax_crossentropy(void **state)
{
    (void)state;
    float logits[N_ * V_], probs[N_ * V_];
    frand(logits, N_ * V_, -3, 3);
    logits[0] = 80.0f;   /* a large logit: the max subtraction keeps exp finite */
    LayerCtx c = {to_double(logits, N_ * V_), NULL, NULL, NULL};
    printf("softmax + cross-entropy (N=%d V=%d)\n", N_, V_);
    mlp_softmax_forward(probs, logits, N_, V_);
    double ref[N_ * V_];
    for (int n = 0; n < N_; n++) {
        double s = 0, mx = c.inp[n * V_];
        for (int i = 0; i < V_; i++)
            mx = fmax(mx, c.inp[n * V_ + i]);
        for (int i = 0; i < V_; i++)
            s += exp(c.inp[n * V_ + i] - mx);
        for (int i = 0; i < V_; i++)
            ref[n * V_ + i] = exp(c.inp[n * V_ + i] - mx) / s;
    }
    assert_true(check("probs", probs, ref, N_ * V_) < 1e-5);
    float loss = mlp_crossentropy_forward(probs, ce_tgt, N_, V_);
    double lref = J_xent(&c);
    printf("    loss %.7f  ref %.7f\n", loss, lref);
    assert_true(fabs(loss - lref) <= 1e-5 * fabs(lref));
    /* uniform logits: loss = ln V exactly (closed form) */
    float zl[V_] = {0}, zp[V_];
    mlp_softmax_forward(zp, zl, 1, V_);
    assert_true(fabsf(mlp_crossentropy_forward(zp, ce_tgt, 1, V_) - logf((float)V_)) < 1e-6f);

    mlp_crossentropy_softmax_backward(probs, probs, ce_tgt, 1.0f / N_, N_, V_); /* in place */
    double g[N_ * V_];
    fd_grad(g, c.inp, N_ * V_, J_xent, &c);
    assert_true(check("dlogits", probs, g, N_ * V_) < 1e-5);
    free(c.inp);
}

/* ------------------------------------------------------------------------------------
 * The whole model: fp64 forward from the same parameters, finite differences over every
 * parameter, against the fp32 gradients of mlp_reference_iteration.
 */

typedef struct {
    const MlpModel *m;      /* for shapes and tensor offsets */
    double *p;              /* (nparams) mirror of m->param_mem */
    int M;
    const int *tok, *tgt;   /* (M,B,T) */
} ModelCtx;

static const double *off(const ModelCtx *c, const float *t)
{
    return c->p + (t - c->m->param_mem);
}

/* Mean loss over M micro-batches, in fp64: the model of mlp.h written out per token. */
static double J_model(void *ctx)
{
    ModelCtx *c = ctx;
    const MlpConfig *k = &c->m->cfg;
    const MlpParams *P = &c->m->params;
    int C = k->C, H = 4 * C, V = k->vocab;
    double *x = malloc(sizeof(double) * (size_t)(3 * C + 2 * H + V));
    double *ln = x + C, *h = ln + C, *y = h + H, *logits = y + C;
    (void)y;
    double *fo = logits + V;
    double sum = 0;
    size_t N = (size_t)c->M * k->B * k->T;
    for (size_t n = 0; n < N; n++) {
        const double *wte = off(c, P->wte) + (size_t)c->tok[n] * C;
        memcpy(x, wte, C * sizeof *x);
        for (int l = 0; l < k->L; l++) {
            d_layernorm(ln, x, off(c, P->ln_w) + l * C, off(c, P->ln_b) + l * C, C);
            d_matvec(h, off(c, P->fc1_w) + (size_t)l * H * C, off(c, P->fc1_b) + l * H, ln,
                     C, H);
            for (int i = 0; i < H; i++)
                h[i] = d_gelu(h[i]);
            d_matvec(fo, off(c, P->fc2_w) + (size_t)l * C * H, off(c, P->fc2_b) + l * C, h,
                     H, C);
            for (int i = 0; i < C; i++)
                x[i] += fo[i];
        }
        d_layernorm(ln, x, off(c, P->lnf_w), off(c, P->lnf_b), C);
        d_matvec(logits, off(c, P->head_w), off(c, P->head_b), ln, C, V);
        sum += d_xent(logits, c->tgt[n], V);
    }
    free(x);
    return sum / (double)N;
}

static void random_tokens(int *t, size_t n, int V)
{
    for (size_t i = 0; i < n; i++)
        t[i] = (int)(urand() * V);
}

static void test_model_fd(void **state)
{
    (void)state;
    MlpConfig cfg = {.vocab = 11, .C = 6, .L = 2, .T = 3, .B = 2, .M = 2};
    MlpModel *m = mlp_create(&cfg, 7);
    assert_non_null(m);
    /* non-trivial layer norm and bias parameters, so their gradients are exercised */
    for (int i = 0; i < mlp_param_count(m); i++) {
        const char *name;
        float *p;
        size_t n;
        mlp_param(m, i, &name, &p, NULL, &n);
        if (strstr(name, "ln") || strstr(name, "_b"))
            frand(p, n, strstr(name, "_w") ? 0.5 : -0.5, strstr(name, "_w") ? 1.5 : 0.5);
    }
    size_t NT = (size_t)cfg.M * cfg.B * cfg.T;
    int tok[12], tgt[12];
    random_tokens(tok, NT, cfg.vocab), random_tokens(tgt, NT, cfg.vocab);
    float loss = mlp_reference_iteration(m, cfg.M, tok, tgt);
    ModelCtx c = {m, to_double(m->param_mem, m->nparams), cfg.M, tok, tgt};
    double lref = J_model(&c);
    printf("model (V=%d C=%d L=%d B=%d T=%d M=%d): loss %.7f  fp64 %.7f\n", cfg.vocab,
           cfg.C, cfg.L, cfg.B, cfg.T, cfg.M, loss, lref);
    assert_true(fabs(loss - lref) < 1e-5 * lref);
    double *g = malloc(m->nparams * sizeof *g);
    fd_grad(g, c.p, m->nparams, J_model, &c);
    double worst = 0;
    for (int i = 0; i < mlp_param_count(m); i++) {
        const char *name;
        float *p, *grad;
        size_t n;
        mlp_param(m, i, &name, &p, &grad, &n);
        double r = check(name, grad, g + (p - m->param_mem), n);
        worst = fmax(worst, r);
    }
    /* A whole fp32 forward + backward: rounding from ~10 chained layers stays well under
     * 1e-5, while a real gradient bug shows as O(1) relative error. */
    assert_true(worst < 1e-5);
    free(g), free(c.p);
    mlp_free(m);
}

/* ------------------------------------------------------------------------------------
 * Sizes, slices, parameters
 */

static void test_sizes(void **state)
{
    (void)state;
    /* B*T = 32 and C = 16: every tensor is a multiple of 16 floats, no padding */
    MlpConfig c = {.vocab = 32, .C = 16, .L = 6, .T = 8, .B = 4, .M = 3};
    size_t BT = 32, BTC = BT * 16, BTH = 4 * BTC, BTV = BT * 32;
    assert_int_equal(mlp_io_bytes(&c), BTC * 4);
    int layers[3] = {1, 3, 2};
    MlpSlice s[3];
    assert_int_equal(mlp_slices_init(&c, 3, layers, s), 0);
    assert_true(s[0].embed && !s[0].head && s[0].layer0 == 0 && s[0].nlayers == 1);
    assert_true(!s[1].embed && !s[1].head && s[1].layer0 == 1 && s[1].nlayers == 3);
    assert_true(!s[2].embed && s[2].head && s[2].layer0 == 4 && s[2].nlayers == 2);
    /* middle slice, nl = 3: xs nl*BTC, mean+rstd 2*nl*BT, ln_out nl*BTC, fch+gelu
     * 2*nl*BTH, dxs nl*BTC (the input gradient goes to din), dln nl*BTC; then dgelu BTH */
    size_t wact = 3 * BTC + 6 * BT + 3 * BTC + 6 * BTH + 3 * BTC + 3 * BTC;
    assert_int_equal(mlp_ckpt_bytes(&c, &s[1]), BTC * 4);
    assert_int_equal(mlp_wact_bytes(&c, &s[1]), wact * 4);
    assert_int_equal(mlp_act_bytes(&c, &s[1]), (wact + BTH) * 4);
    /* embedding slice, nl = 1: nothing to checkpoint (tokens are the input); dxs has
     * nl + 1 entries since the embedding's weight gradient needs dxs[0] */
    assert_int_equal(mlp_ckpt_bytes(&c, &s[0]), 0);
    wact = BTC + 2 * BT + BTC + 2 * BTH + 2 * BTC + BTC;
    assert_int_equal(mlp_wact_bytes(&c, &s[0]), wact * 4);
    /* head slice, nl = 2: xs has nl + 1 entries, plus LN_f stats, output, probs, dlnf */
    wact = 3 * BTC + 4 * BT + 2 * BTC + 4 * BTH + 2 * BT + BTC + BTV + 2 * BTC + 2 * BTC
         + BTC;
    assert_int_equal(mlp_wact_bytes(&c, &s[2]), wact * 4);
    assert_int_equal(mlp_act_bytes(&c, &s[2]), (wact + BTH) * 4);
    /* weight bytes of the slices add up to params + grads of the model */
    MlpModel *m = mlp_create(&c, 1);
    assert_non_null(m);
    size_t sum = 0;
    for (int v = 0; v < 3; v++)
        sum += mlp_weight_bytes(&c, &s[v]);
    assert_int_equal(sum, 2 * m->nparams * sizeof(float));
    /* closed form: V*C (wte) + L*(2C + 4C*C + 4C + 4C*C + C) + 2C + V*C + V */
    assert_int_equal(m->nparams, 32 * 16 + 6 * (32 + 1024 + 64 + 1024 + 16) + 32 + 512 + 32);
    /* every tensor belongs to exactly one slice */
    assert_int_equal(mlp_param_count(m), 1 + 6 * 6 + 4);
    for (int i = 0; i < mlp_param_count(m); i++) {
        int owners = 0;
        for (int v = 0; v < 3; v++)
            owners += mlp_param_in_slice(m, i, &s[v]);
        assert_int_equal(owners, 1);
    }
    const char *name;
    size_t n;
    mlp_param(m, 0, &name, NULL, NULL, &n);
    assert_string_equal(name, "wte");
    assert_int_equal(n, 32 * 16);
    mlp_param(m, 1 + 6 * 4 + 2, &name, NULL, NULL, &n);
    assert_string_equal(name, "h4.fc1_w");
    assert_int_equal(n, 64 * 16);
    assert_true(mlp_param_in_slice(m, 1 + 6 * 4 + 2, &s[2]));
    mlp_param(m, mlp_param_count(m) - 1, &name, NULL, NULL, &n);
    assert_string_equal(name, "head_b");
    /* identity slice */
    MlpSlice id = {.vstage = 1, .layer0 = 2, .nlayers = 0};
    assert_int_equal(mlp_act_bytes(&c, &id), 0);
    assert_int_equal(mlp_weight_bytes(&c, &id), 0);
    /* bad partitions and configs */
    int bad1[2] = {3, 2}, bad2[2] = {7, -1};
    assert_int_equal(mlp_slices_init(&c, 2, bad1, s), -1);
    assert_int_equal(mlp_slices_init(&c, 2, bad2, s), -1);
    assert_int_equal(mlp_slices_init(&c, 0, bad1, s), -1);
    char why[80];
    MlpConfig bc = c;
    bc.C = 0;
    assert_int_equal(mlp_config_check(&bc, why, sizeof why), -1);
    assert_string_equal(why, "hidden size C must be >= 1");
    assert_null(mlp_create(&bc, 1));
    bc = c;
    bc.B = 1 << 20, bc.T = 1 << 20;
    assert_int_equal(mlp_config_check(&bc, why, sizeof why), -1);
    assert_string_equal(why, "model too large");
    assert_int_equal(mlp_config_check(&c, why, sizeof why), 0);
    /* deterministic init; the clone is equal */
    MlpModel *m2 = mlp_create(&c, 1), *m3 = mlp_create(&c, 2), *k = mlp_clone(m);
    assert_memory_equal(m->param_mem, m2->param_mem, m->nparams * sizeof(float));
    assert_memory_equal(m->param_mem, k->param_mem, m->nparams * sizeof(float));
    assert_true(memcmp(m->param_mem, m3->param_mem, m->nparams * sizeof(float)) != 0);
    mlp_free(m), mlp_free(m2), mlp_free(m3), mlp_free(k);
}

/* ------------------------------------------------------------------------------------
 * Slice-wise execution against the reference
 */

enum {
    RECOMPUTE = 1,   /* F keeps the checkpoint only; R before B */
    SPLIT = 2,       /* B computes input gradients; W later */
    MOVE = 4,        /* act regions swapped out to a host copy and back to a new address */
    B_REVERSE = 8,   /* B (and W) over micro-batches in reverse order */
};

/* A fresh 64-byte aligned region of exactly n bytes (ASan flags any access beyond). */
static void *region(size_t n)
{
    void *p = aligned_alloc(64, n ? n : 64);
    assert_non_null(p);
    memset(p, 0xA5, n ? n : 64);   /* garbage: nothing may rely on zeroed memory */
    return p;
}

/* Replaces *r (holding keep bytes that matter) by a fresh region of n bytes. */
static void reregion(void **r, size_t keep, size_t n)
{
    void *q = region(n);
    memcpy(q, *r, keep);
    free(*r);
    *r = q;
}

/* Runs one iteration of model m split by layers[0..nv) in GPipe order (all F slice by
 * slice, then all B from the last slice back), in the given mode; returns the mean loss. */
static float run_sliced(MlpModel *m, int nv, const int *layers, int mode, const int *tok,
                        const int *tgt)
{
    const MlpConfig *c = &m->cfg;
    int M = c->M;
    size_t bt = (size_t)c->B * c->T, btc = bt * c->C;
    MlpSlice s[8];
    assert_int_equal(mlp_slices_init(c, nv, layers, s), 0);
    float *h = malloc(sizeof(float) * btc * nv * M);    /* (nv,M,B,T,C) slice outputs */
    float *g = malloc(sizeof(float) * btc * nv * M);    /* (nv,M,B,T,C) slice input grads */
    void **act = calloc((size_t)nv * M, sizeof *act);
    double loss = 0;
    for (int v = 0; v < nv; v++)
        for (int k = 0; k < M; k++) {
            const MlpSlice *sl = &s[v];
            size_t n = (mode & RECOMPUTE) ? mlp_ckpt_bytes(c, sl) : mlp_act_bytes(c, sl);
            void **a = &act[v * M + k];
            *a = region(n);
            float l = -1;
            int rc = mlp_forward(m, sl, sl->head ? NULL : h + (v * M + k) * btc,
                                 sl->head ? &l : NULL, *a,
                                 v > 0 ? h + ((v - 1) * M + k) * btc : NULL,
                                 tok + k * bt, tgt + k * bt, !(mode & RECOMPUTE));
            assert_int_equal(rc, 0);
            if (sl->head)
                loss += l;
            if (mode & MOVE) {   /* SO then SI of what F kept */
                void *host = malloc(n ? n : 1);
                memcpy(host, *a, n);
                free(*a);
                *a = region(n);
                memcpy(*a, host, n);
                free(host);
            }
        }
    for (int v = nv - 1; v >= 0; v--) {
        const MlpSlice *sl = &s[v];
        for (int j = 0; j < M; j++) {
            int k = (mode & B_REVERSE) ? M - 1 - j : j;
            void **a = &act[v * M + k];
            if (mode & RECOMPUTE) {
                reregion(a, mlp_ckpt_bytes(c, sl), mlp_act_bytes(c, sl));
                mlp_recompute(m, sl, *a, tok + k * bt);
            }
            mlp_backward(m, sl, v > 0 ? g + (v * M + k) * btc : NULL, *a,
                         v < nv - 1 ? g + ((v + 1) * M + k) * btc : NULL, tok + k * bt,
                         tgt + k * bt, (mode & SPLIT) != 0);
            if (mode & SPLIT) /* B frees all but the wact prefix */
                reregion(a, mlp_wact_bytes(c, sl), mlp_wact_bytes(c, sl));
        }
        if (mode & SPLIT)
            for (int j = 0; j < M; j++) {
                int k = (mode & B_REVERSE) ? M - 1 - j : j;
                mlp_weight_grad(m, sl, act[v * M + k], tok + k * bt);
            }
        for (int k = 0; k < M; k++)
            free(act[v * M + k]);
    }
    free(h), free(g), free(act);
    return (float)(loss / M);
}

static MlpConfig slice_cfg = {.vocab = 32, .C = 8, .L = 4, .T = 5, .B = 3, .M = 3};

static double compare_grads(const MlpModel *a, const MlpModel *ref, bool verbose)
{
    double worst = 0;
    for (int i = 0; i < mlp_param_count(a); i++) {
        const char *name;
        float *ga, *gr;
        size_t n;
        mlp_param(a, i, &name, NULL, &ga, &n);
        mlp_param(ref, i, NULL, NULL, &gr, NULL);
        double e = mlp_rel_error(ga, gr, n);
        if (verbose)
            printf("    %-10s maxrel %.3e\n", name, e);
        worst = fmax(worst, e);
    }
    return worst;
}

static void test_slices_vs_reference(void **state)
{
    (void)state;
    const MlpConfig *c = &slice_cfg;
    size_t nt = (size_t)c->M * c->B * c->T;
    int *tok = malloc(nt * sizeof *tok), *tgt = malloc(nt * sizeof *tgt);
    random_tokens(tok, nt, c->vocab), random_tokens(tgt, nt, c->vocab);
    MlpModel *ref = mlp_create(c, 3);
    assert_non_null(ref);
    /* not the init's trivial layer norm: perturb every parameter a little */
    for (size_t i = 0; i < ref->nparams; i++)
        ref->param_mem[i] += (float)(0.1 * (urand() - 0.5));
    float rloss = mlp_reference_iteration(ref, c->M, tok, tgt);
    /* a gradient that is all zero would make the comparison vacuous */
    for (int i = 0; i < mlp_param_count(ref); i++) {
        float *gr;
        size_t n;
        mlp_param(ref, i, NULL, NULL, &gr, &n);
        double mx = 0;
        for (size_t j = 0; j < n; j++)
            mx = fmax(mx, fabs(gr[j]));
        assert_true(mx > 0);
    }
    static const int parts[][5] = {
        {1, 4}, {2, 2, 2}, {3, 1, 2, 1}, {4, 1, 1, 1, 1}, /* {nv, layers...} */
        {2, 0, 4}, {3, 2, 0, 2}, {2, 4, 0}, {4, 0, 2, 2, 0}};
    static const int modes[] = {0, RECOMPUTE, SPLIT, RECOMPUTE | SPLIT | MOVE, MOVE,
                                B_REVERSE, B_REVERSE | SPLIT | RECOMPUTE};
    for (size_t pi = 0; pi < sizeof parts / sizeof parts[0]; pi++)
        for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++) {
            MlpModel *m = mlp_create(c, 3);
            memcpy(m->param_mem, ref->param_mem, m->nparams * sizeof(float));
            float loss = run_sliced(m, parts[pi][0], parts[pi] + 1, modes[mi], tok, tgt);
            double e = compare_grads(m, ref, false);
            printf("  partition %zu mode %2d: loss %.6f (ref %.6f)  max rel grad error %.3e\n",
                   pi, modes[mi], loss, rloss, e);
            assert_true(fabsf(loss - rloss) <= 1e-6f * rloss);
            /* Micro-batch order of accumulation as in the reference: same operations in the
             * same order, so bit-identical. Reversed: the sum of M fp32 terms in another
             * order, ~M * 6e-8 relative. */
            if (modes[mi] & B_REVERSE)
                assert_true(e < 1e-5);
            else
                assert_true(e == 0.0);
            mlp_free(m);
        }
    mlp_free(ref);
    free(tok), free(tgt);
}

/* Slices on threads of their own, as the runtime runs ranks: slice v runs F of every
 * micro-batch as soon as slice v-1 has produced it, then B of every micro-batch as soon
 * as slice v+1 has produced its gradient (1F1B-like overlap between slices). */
typedef struct {
    MlpModel *m;
    const MlpSlice *s;
    int nv, mode;
    const int *tok, *tgt;
    float *h, *g;            /* (nv,M,B,T,C) */
    int *fdone, *bdone;      /* (nv) micro-batches done, guarded by mu */
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    float loss;
} Rank;

static void wait_for(Rank *r, int *counter, int need)
{
    pthread_mutex_lock(r->mu);
    while (*counter < need)
        pthread_cond_wait(r->cv, r->mu);
    pthread_mutex_unlock(r->mu);
}

static void bump(Rank *r, int *counter)
{
    pthread_mutex_lock(r->mu);
    (*counter)++;
    pthread_cond_broadcast(r->cv);
    pthread_mutex_unlock(r->mu);
}

static void *rank_main(void *arg)
{
    Rank *r = arg;
    const MlpConfig *c = &r->m->cfg;
    const MlpSlice *s = r->s;
    int v = s->vstage, M = c->M, nv = r->nv;
    size_t bt = (size_t)c->B * c->T, btc = bt * c->C;
    void **act = calloc((size_t)M, sizeof *act);
    double loss = 0;
    for (int k = 0; k < M; k++) {
        if (v > 0)
            wait_for(r, &r->fdone[v - 1], k + 1);
        act[k] = aligned_alloc(64, mlp_act_bytes(c, s) + 64);
        float l = 0;
        mlp_forward(r->m, s, s->head ? NULL : r->h + (v * M + k) * btc, s->head ? &l : NULL,
                    act[k], v > 0 ? r->h + ((v - 1) * M + k) * btc : NULL, r->tok + k * bt,
                    r->tgt + k * bt, !(r->mode & RECOMPUTE));
        loss += l;
        bump(r, &r->fdone[v]);
    }
    for (int k = 0; k < M; k++) {
        if (v < nv - 1)
            wait_for(r, &r->bdone[v + 1], k + 1);
        if (r->mode & RECOMPUTE)
            mlp_recompute(r->m, s, act[k], r->tok + k * bt);
        mlp_backward(r->m, s, v > 0 ? r->g + (v * M + k) * btc : NULL, act[k],
                     v < nv - 1 ? r->g + ((v + 1) * M + k) * btc : NULL, r->tok + k * bt,
                     r->tgt + k * bt, (r->mode & SPLIT) != 0);
        bump(r, &r->bdone[v]);
    }
    for (int k = 0; k < M; k++) {
        if (r->mode & SPLIT)
            mlp_weight_grad(r->m, s, act[k], r->tok + k * bt);
        free(act[k]);
    }
    free(act);
    r->loss = (float)(loss / M);
    return NULL;
}

static void test_slices_threads(void **state)
{
    (void)state;
    const MlpConfig *c = &slice_cfg;
    size_t nt = (size_t)c->M * c->B * c->T, btc = (size_t)c->B * c->T * c->C;
    int *tok = malloc(nt * sizeof *tok), *tgt = malloc(nt * sizeof *tgt);
    random_tokens(tok, nt, c->vocab), random_tokens(tgt, nt, c->vocab);
    MlpModel *ref = mlp_create(c, 5);
    float rloss = mlp_reference_iteration(ref, c->M, tok, tgt);
    enum { NV = 4 };
    int layers[NV] = {1, 1, 1, 1};
    MlpSlice s[NV];
    assert_int_equal(mlp_slices_init(c, NV, layers, s), 0);
    for (int mode = 0; mode < 4; mode++) {
        MlpModel *m = mlp_create(c, 5);
        float *h = malloc(sizeof(float) * btc * NV * c->M);
        float *g = malloc(sizeof(float) * btc * NV * c->M);
        int fdone[NV] = {0}, bdone[NV] = {0};
        pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
        pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
        Rank r[NV];
        pthread_t th[NV];
        for (int v = 0; v < NV; v++) {
            r[v] = (Rank){m, &s[v], NV, mode, tok, tgt, h, g, fdone, bdone, &mu, &cv, 0};
            assert_int_equal(pthread_create(&th[v], NULL, rank_main, &r[v]), 0);
        }
        for (int v = 0; v < NV; v++)
            pthread_join(th[v], NULL);
        double e = compare_grads(m, ref, mode == 3);
        printf("  threads, mode %d: loss %.6f (ref %.6f)  max rel grad error %.3e\n", mode,
               r[NV - 1].loss, rloss, e);
        assert_true(e == 0.0);
        assert_true(r[NV - 1].loss == rloss);
        free(h), free(g);
        mlp_free(m);
    }
    mlp_free(ref);
    free(tok), free(tgt);
}

/* zero_grad and sgd_step touch only the slice's tensors */
static void test_slice_optimizer(void **state)
{
    (void)state;
    MlpConfig c = slice_cfg;
    MlpModel *m = mlp_create(&c, 9);
    int layers[2] = {3, 1};
    MlpSlice s[2];
    assert_int_equal(mlp_slices_init(&c, 2, layers, s), 0);
    for (size_t i = 0; i < m->nparams; i++)
        m->grad_mem[i] = 1.0f;
    MlpModel *before = mlp_clone(m);
    mlp_sgd_step(m, &s[1], 0.25f);
    mlp_zero_grad(m, &s[1]);
    for (int i = 0; i < mlp_param_count(m); i++) {
        float *p, *gr, *p0;
        size_t n;
        mlp_param(m, i, NULL, &p, &gr, &n);
        mlp_param(before, i, NULL, &p0, NULL, NULL);
        bool mine = mlp_param_in_slice(m, i, &s[1]);
        for (size_t j = 0; j < n; j++) {
            assert_true(gr[j] == (mine ? 0.0f : 1.0f));
            assert_true(p[j] == (mine ? p0[j] - 0.25f : p0[j]));
        }
    }
    mlp_free(m), mlp_free(before);
}

/* ------------------------------------------------------------------------------------
 * Training on a fixed text, and the data loader
 */

static const char text[] =
    "The quick brown fox jumps over the lazy dog. A pipeline schedule says, for every "
    "stage, in which order the forward and backward passes of the micro-batches run. "
    "The compiler checks the schedule, simulates it, and emits a program per rank that "
    "trains a small language model on text like this one, with the same gradients as "
    "training without a pipeline. The lazy dog sleeps; the quick fox runs on and on.";

static void test_training_loss_falls(void **state)
{
    (void)state;
    MlpConfig c = {.vocab = 256, .C = 32, .L = 2, .T = 16, .B = 8, .M = 2};
    TextData d;
    assert_int_equal(data_from_memory(&d, text, sizeof text - 1), 0);
    MlpModel *m = mlp_create(&c, 11);
    MlpSlice all = mlp_whole(&c);
    size_t nt = (size_t)c.M * c.B * c.T, bt = (size_t)c.B * c.T;
    int *tok = malloc(nt * sizeof *tok), *tgt = malloc(nt * sizeof *tgt);
    float first = 0, last = 0;
    for (int it = 0; it < 60; it++) {
        for (int k = 0; k < c.M; k++)
            assert_int_equal(data_batch(&d, 1, it, k, c.B, c.T, c.vocab, tok + k * bt,
                                        tgt + k * bt), 0);
        mlp_zero_grad(m, &all);
        float loss = mlp_reference_iteration(m, c.M, tok, tgt);
        mlp_sgd_step(m, &all, 0.5f);
        if (it == 0)
            first = loss;
        if (it >= 55)
            last += loss / 5;
        if (it % 10 == 0 || it == 59)
            printf("  iter %2d loss %.4f\n", it, loss);
    }
    printf("  loss of the first iteration %.4f, mean of the last 5 %.4f\n", first, last);
    /* At init the logits are small (|head_w| <= 1/sqrt(C) on a unit-variance LN output,
     * so std ~ 1/sqrt(3)) and the loss is close to ln V = 5.545. */
    assert_true(first > logf(256.0f) - 0.3f && first < logf(256.0f) + 0.7f);
    /* The text uses ~30 distinct characters; learning that alone brings the loss under
     * ln 30 = 3.4. */
    assert_true(last < 3.4f);
    mlp_free(m);
    free(tok), free(tgt);
    data_free(&d);
}

static void test_data(void **state)
{
    (void)state;
    TextData d;
    assert_int_equal(data_from_memory(&d, text, sizeof text - 1), 0);
    enum { B = 4, T = 10 };
    int t1[B * T], y1[B * T], t2[B * T], y2[B * T];
    assert_int_equal(data_batch(&d, 5, 3, 1, B, T, 256, t1, y1), 0);
    assert_int_equal(data_batch(&d, 5, 3, 1, B, T, 256, t2, y2), 0);
    assert_memory_equal(t1, t2, sizeof t1);   /* deterministic */
    assert_memory_equal(y1, y2, sizeof y1);
    for (int b = 0; b < B; b++) {
        /* each row is a window of the text; targets are the next characters */
        bool found = false;
        for (size_t q = 0; q + T < sizeof text - 1 && !found; q++) {
            found = true;
            for (int t = 0; t < T && found; t++)
                found = t1[b * T + t] == (unsigned char)text[q + t] &&
                        y1[b * T + t] == (unsigned char)text[q + t + 1];
        }
        assert_true(found);
        for (int t = 0; t + 1 < T; t++)
            assert_int_equal(y1[b * T + t], t1[b * T + t + 1]);
    }
    /* another micro-batch, iteration or seed gives another batch */
    assert_int_equal(data_batch(&d, 5, 3, 2, B, T, 256, t2, y2), 0);
    assert_true(memcmp(t1, t2, sizeof t1) != 0);
    assert_int_equal(data_batch(&d, 6, 3, 1, B, T, 256, t2, y2), 0);
    assert_true(memcmp(t1, t2, sizeof t1) != 0);
    /* a small vocabulary folds bytes: c % V */
    assert_int_equal(data_batch(&d, 5, 3, 1, B, T, 7, t2, y2), 0);
    for (int i = 0; i < B * T; i++)
        assert_int_equal(t2[i], t1[i] % 7);
    data_free(&d);

    /* shortest usable text: T + 1 bytes, one possible window */
    assert_int_equal(data_from_memory(&d, "abcd", 4), 0);
    int t3[2 * 3], y3[2 * 3];
    assert_true(data_fits(&d, 3));
    assert_false(data_fits(&d, 4));
    assert_int_equal(data_batch(&d, 1, 0, 0, 2, 3, 256, t3, y3), 0);
    int e3[6] = {'a', 'b', 'c', 'a', 'b', 'c'}, f3[6] = {'b', 'c', 'd', 'b', 'c', 'd'};
    assert_memory_equal(t3, e3, sizeof e3);
    assert_memory_equal(y3, f3, sizeof f3);
    assert_int_equal(data_batch(&d, 1, 0, 0, 2, 4, 256, t3, y3), -1);
    assert_int_equal(data_batch(&d, 1, 0, 0, 0, 3, 256, t3, y3), -1);
    data_free(&d);

    /* files */
    char path[] = "/tmp/test_mlp_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    assert_int_equal(data_load(&d, path), 0);
    assert_int_equal(d.n, sizeof text - 1);
    assert_memory_equal(d.bytes, text, d.n);
    data_free(&d);
    unlink(path);
    errno = 0;
    assert_int_equal(data_load(&d, path), -1);
    assert_int_equal(errno, ENOENT);
    assert_null(d.bytes);
}

/* writes n copies of byte c into dir/name */
static void write_page(const char *dir, const char *name, int c, size_t n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < n; i++)
        fputc(c, f);
    fclose(f);
}

/* The default training text (docs/runtime.md "Training text"): README.md, then the
 * docs pages in their order, each followed by a newline; the built-in text when the
 * folder is missing or too short. */
static void test_data_default(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_data_XXXXXX", sub[64], said[512];
    assert_non_null(mkdtemp(dir));
    snprintf(sub, sizeof sub, "%s/docs", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    TextData d;
    /* too short (3 bytes + newline): the built-in text, saying where it looked */
    write_page(dir, "README.md", 'r', 3);
    assert_int_equal(data_load_default(&d, dir, said, sizeof said), 0);
    assert_true(d.n > 100 && d.n < DATA_MIN_BYTES);
    assert_non_null(strstr(said, "the built-in text"));
    assert_non_null(strstr(said, dir));
    TextData b = d;
    /* README.md 3000 bytes, docs/runtime.md 2000, docs/language.md 1000: README, then
     * language (listed before runtime), each with its newline */
    write_page(dir, "README.md", 'r', 3000);
    write_page(dir, "docs/runtime.md", 'u', 2000);
    write_page(dir, "docs/language.md", 'l', 1000);
    write_page(dir, "docs/other.md", 'o', 5000); /* not one of the pages */
    assert_int_equal(data_load_default(&d, dir, said, sizeof said), 0);
    assert_int_equal(d.n, 6003);
    assert_int_equal(d.bytes[0], 'r');
    assert_int_equal(d.bytes[2999], 'r');
    assert_int_equal(d.bytes[3000], '\n');
    assert_int_equal(d.bytes[3001], 'l');
    assert_int_equal(d.bytes[4001], '\n');
    assert_int_equal(d.bytes[4002], 'u');
    assert_int_equal(d.bytes[6002], '\n');
    char want[256];
    snprintf(want, sizeof want, "README.md and docs, 3 of 9 pages, 6003 bytes, in %s", dir);
    assert_string_equal(said, want);
    data_free(&d);
    /* no folder: the built-in text, the same bytes as above */
    assert_int_equal(data_load_default(&d, NULL, said, sizeof said), 0);
    assert_int_equal(d.n, b.n);
    assert_memory_equal(d.bytes, b.bytes, d.n);
    assert_non_null(strstr(said, "the built-in text"));
    data_free(&d);
    data_free(&b);
    const char *pages[] = {"README.md", "docs/runtime.md", "docs/language.md", "docs/other.md"};
    for (size_t i = 0; i < 4; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, pages[i]);
        unlink(path);
    }
    rmdir(sub);
    rmdir(dir);
}

int main(void)
{
    openblas_set_num_threads(1);   /* bit-reproducible products across threads */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_encoder),
        cmocka_unit_test(test_softmax_crossentropy),
        cmocka_unit_test(test_model_fd),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_slices_vs_reference),
        cmocka_unit_test(test_slices_threads),
        cmocka_unit_test(test_slice_optimizer),
        cmocka_unit_test(test_training_loss_falls),
        cmocka_unit_test(test_data),
        cmocka_unit_test(test_data_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
