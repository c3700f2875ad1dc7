/* transformer.c - the `gpt` and `llama` workloads (see transformer.h, tf_layout.h).
 * Legend: B batch, T time, N = B*T, C channels, NH heads, hd = C/NH, NKV key/value
 * heads, K = NKV*hd, F ffn width, V vocabulary. Weights are (out, in), row-major. */
#define _POSIX_C_SOURCE 200809L
#include "transformer.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "mlp_layers.h"
#include "tf_kernels.h"

#define NONE ((size_t)-1)

/* ---- config, slices, sizes ------------------------------------------------------- */

int tf_config_check(const TfConfig *c, char *why, size_t why_n)
{
    const TfDims *d = &c->d;
    if (d->arch != TF_GPT && d->arch != TF_LLAMA) {
        snprintf(why, why_n, "unknown transformer arch %d", d->arch);
        return -1;
    }
    const int v[7] = {d->V, d->C, d->NH, d->NKV, d->F, d->T, d->B};
    static const char *const nm[7] = {"vocab", "hidden", "heads", "kv_heads", "ffn", "seq",
                                      "mbs"};
    for (int i = 0; i < 7; i++)
        if (v[i] < 1) {
            snprintf(why, why_n, "`%s` must be >= 1", nm[i]);
            return -1;
        }
    if (c->L < 0 || c->M < 1) {
        snprintf(why, why_n, "layers must be >= 0 and micro-batches >= 1");
        return -1;
    }
    if (d->C % d->NH != 0) {
        snprintf(why, why_n, "heads %d do not divide hidden size %d", d->NH, d->C);
        return -1;
    }
    if (d->NH % d->NKV != 0) {
        snprintf(why, why_n, "kv_heads %d do not divide heads %d", d->NKV, d->NH);
        return -1;
    }
    if (d->arch == TF_LLAMA && (d->C / d->NH) % 2 != 0) {
        snprintf(why, why_n, "rotary embeddings need an even head size (hidden/heads = %d)",
                 d->C / d->NH);
        return -1;
    }
    double N = (double)d->B * d->T, big = 2147483647.0;
    if (N * (d->C + 2.0 * d->C) > big || N * d->F > big || N * d->V > big ||
        (double)d->B * d->NH * d->T * d->T > big || (double)d->V * d->C > big ||
        (double)d->F * d->C > big) {
        snprintf(why, why_n, "a tensor of one micro-batch has more than 2^31 elements");
        return -1;
    }
    return 0;
}

int tf_slices_init(const TfConfig *c, int nv, const int *layers, MlpSlice *slices)
{
    if (nv < 1)
        return -1;
    int at = 0;
    for (int v = 0; v < nv; v++) {
        if (layers[v] < 0 || layers[v] > c->L - at)
            return -1;
        slices[v] = (MlpSlice){v, at, layers[v], v == 0, v == nv - 1, false};
        at += layers[v];
    }
    return at == c->L ? 0 : -1;
}

MlpSlice tf_whole(const TfConfig *c) { return (MlpSlice){0, 0, c->L, true, true, false}; }

static TfLayout layout_of(const TfConfig *c, const MlpSlice *s)
{
    return tf_layout_remat(&c->d, s->nlayers, s->embed, s->head, s->per_layer);
}

size_t tf_io_bytes(const TfConfig *c)
{
    return (size_t)c->d.B * (size_t)c->d.T * (size_t)c->d.C * sizeof(float);
}
PR_LAYOUT_BYTES(tf, TfConfig, MlpSlice, layout_of)
size_t tf_layer_act_bytes(const TfConfig *c) { return tf_layer_fwd_bytes(&c->d); }

/* ---- parameters ------------------------------------------------------------------ */

static void fill_uniform(float *t, size_t n, float a, uint64_t *st)
{
    for (size_t i = 0; i < n; i++)
        t[i] = a * (2.0f * (float)pr_uniform01(st) - 1.0f);
}

/* Adds tensor `name` of n floats owned by layer (-1 embedding, L head). */
static size_t add_tensor(TfModel *m, const char *name, size_t n, int layer)
{
    TfTensor *t = &m->tensors[m->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->off = m->nparams;
    t->n = n;
    t->layer = layer;
    m->nparams += n;
    return t->off;
}

void tf_free(TfModel *m)
{
    if (m) {
        pr_params_free(m->param_mem, m->grad_mem);
        free(m->tensors);
        free(m->slot);
        free(m);
    }
}

TfModel *tf_create(const TfConfig *c, uint64_t seed)
{
    char why[128];
    if (tf_config_check(c, why, sizeof why) != 0)
        return NULL;
    const TfDims *d = &c->d;
    bool gpt = d->arch == TF_GPT;
    size_t C = (size_t)d->C, K = C * (size_t)d->NKV / (size_t)d->NH, F = (size_t)d->F;
    size_t V = (size_t)d->V, L = (size_t)c->L;
    TfModel *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->cfg = *c;
    m->tensors = calloc(5 + L * TF_NSLOTS, sizeof *m->tensors);
    m->slot = malloc((L ? L : 1) * TF_NSLOTS * sizeof *m->slot);
    if (!m->tensors || !m->slot) {
        tf_free(m);
        return NULL;
    }
    m->wte = add_tensor(m, "wte", V * C, -1);
    m->wpe = gpt ? add_tensor(m, "wpe", (size_t)d->T * C, -1) : NONE;
    /* per slot: size, name; absent slots have size 0 */
    const size_t qkv = C + 2 * K;
    const size_t sz[TF_NSLOTS] = {
        C, gpt ? C : 0, qkv * C, gpt ? qkv : 0, C * C, gpt ? C : 0, C, gpt ? C : 0,
        F * C, gpt ? F : 0, C * F, gpt ? C : 0, gpt ? 0 : F * C};
    static const char *const gname[TF_NSLOTS] = {
        "ln1_w", "ln1_b", "qkv_w", "qkv_b", "proj_w", "proj_b", "ln2_w", "ln2_b",
        "fc1_w", "fc1_b", "fc2_w", "fc2_b", "up_w"};
    static const char *const lname[TF_NSLOTS] = {
        "rms1_w", "", "qkv_w", "", "proj_w", "", "rms2_w", "", "gate_w", "", "down_w", "",
        "up_w"};
    for (size_t l = 0; l < L; l++)
        for (int k = 0; k < TF_NSLOTS; k++) {
            m->slot[l * TF_NSLOTS + k] = NONE;
            if (!sz[k])
                continue;
            char name[24];
            snprintf(name, sizeof name, "h%zu.%s", l, gpt ? gname[k] : lname[k]);
            m->slot[l * TF_NSLOTS + k] = add_tensor(m, name, sz[k], (int)l);
        }
    m->lnf_w = add_tensor(m, gpt ? "lnf_w" : "rmsf_w", C, (int)L);
    m->lnf_b = gpt ? add_tensor(m, "lnf_b", C, (int)L) : NONE;
    m->head_w = add_tensor(m, "head_w", V * C, (int)L);
    if (pr_params_alloc(m->nparams, &m->param_mem, &m->grad_mem) != 0) {
        tf_free(m);
        return NULL;
    }
    uint64_t st = seed;
    float *p = m->param_mem;
    fill_uniform(p + m->wte, V * C, 0.5f, &st);
    if (gpt)
        fill_uniform(p + m->wpe, (size_t)d->T * C, 0.5f, &st);
    /* fan-in of each weight slot; norm scales 1, biases 0 */
    const size_t fan[TF_NSLOTS] = {0, 0, C, 0, C, 0, 0, 0, C, 0, F, 0, C};
    for (size_t l = 0; l < L; l++)
        for (int k = 0; k < TF_NSLOTS; k++) {
            size_t o = m->slot[l * TF_NSLOTS + k];
            if (o == NONE)
                continue;
            if (k == TF_LN1_W || k == TF_LN2_W)
                for (size_t i = 0; i < sz[k]; i++)
                    p[o + i] = 1.0f;
            else if (fan[k])
                fill_uniform(p + o, sz[k], 1.0f / sqrtf((float)fan[k]), &st);
            else
                memset(p + o, 0, sz[k] * sizeof(float));
        }
    for (size_t i = 0; i < C; i++)
        p[m->lnf_w + i] = 1.0f;
    if (gpt)
        memset(p + m->lnf_b, 0, C * sizeof(float));
    fill_uniform(p + m->head_w, V * C, 1.0f / sqrtf((float)C), &st);
    return m;
}

bool tf_param_in_slice(const TfModel *m, int i, const MlpSlice *s)
{
    int l = m->tensors[i].layer;
    if (l < 0)
        return s->embed;
    if (l >= m->cfg.L)
        return s->head;
    return l >= s->layer0 && l < s->layer0 + s->nlayers;
}

void tf_zero_grad(TfModel *m, const MlpSlice *s)
{
    for (int i = 0; i < m->ntensors; i++)
        if (tf_param_in_slice(m, i, s))
            memset(m->grad_mem + m->tensors[i].off, 0, m->tensors[i].n * sizeof(float));
}

void tf_sgd_step(TfModel *m, const MlpSlice *s, float lr)
{
    for (int i = 0; i < m->ntensors; i++)
        if (tf_param_in_slice(m, i, s)) {
            float *p = m->param_mem + m->tensors[i].off, *g = m->grad_mem + m->tensors[i].off;
            for (size_t j = 0; j < m->tensors[i].n; j++)
                p[j] -= lr * g[j];
        }
}

/* ---- layers ---------------------------------------------------------------------- */

/* The norms over rows of (N,C), with tf_kernels.h's bodies (shared with the GPU). Row
 * statistics are recomputed wherever needed (forward, B, W) instead of being kept:
 * mean and rstd = 1/sqrt(var + eps) (LayerNorm), or rstd = 1/sqrt(mean(x^2) + eps) with
 * mean 0 (RMSNorm); same arithmetic every time, so the values are identical.
 * out (N,C) = (inp - mean) * rstd * w + b (b NULL: RMSNorm). */
static void norm_forward(float *out, const float *inp, const float *w, const float *b, int N,
                         int C)
{
    for (int n = 0; n < N; n++)
        tf_norm_forward_row(out, inp, w, b, C, n);
}

/* dinp (N,C) += the norm's input gradient for dout (N,C). */
static void norm_backward_input(float *dinp, const float *dout, const float *inp,
                                const float *w, bool rms, int N, int C)
{
    for (int n = 0; n < N; n++)
        tf_norm_backward_input_row(dinp, dout, inp, w, rms, C, n);
}

/* dw (C) += sum_n dout * xhat; db (C) += sum_n dout (db NULL: RMSNorm). */
static void norm_backward_weight(float *dw, float *db, const float *dout, const float *inp,
                                 int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * C, *x = inp + (size_t)n * C;
        float mu, s;
        tf_norm_stats(x, C, db == NULL, &mu, &s);
        for (int i = 0; i < C; i++) {
            dw[i] += d[i] * ((x[i] - mu) * s);
            if (db)
                db[i] += d[i];
        }
    }
}

/* dinp (N,C) = dout (N,OC) @ w (OC,C) + beta * dinp. */
static void mm_backward_input(float *dinp, const float *dout, const float *w, int N, int C,
                              int OC, float beta)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C,
                beta, dinp, C);
}

/* Rotary position embedding (Su et al. 2021) on the Q and K heads of qkv (N, C+2K) in
 * place; inverse = true applies the transpose rotation (the gradient's). */
static void rope(float *qkv, const TfDims *d, bool inverse)
{
    int C = d->C, hd = C / d->NH, ld = C + 2 * (C / d->NH) * d->NKV;
    int nheads = d->NH + d->NKV; /* Q heads, then K heads, contiguous */
    for (int b = 0; b < d->B; b++)
        for (int t = 0; t < d->T; t++) {
            float *row = qkv + ((size_t)b * d->T + t) * ld;
            for (int i = 0; i < hd / 2; i++) {
                double th = t * pow(10000.0, -2.0 * i / hd);
                float c = (float)cos(th), s = inverse ? -(float)sin(th) : (float)sin(th);
                for (int h = 0; h < nheads; h++) {
                    float *p = row + (size_t)h * hd + 2 * i;
                    float x0 = p[0], x1 = p[1];
                    p[0] = x0 * c - x1 * s;
                    p[1] = x0 * s + x1 * c;
                }
            }
        }
}

/* Causal self-attention forward. qkv (N, C+2K); att (B,NH,T,T) receives the softmax
 * probabilities (zero above the diagonal); y (N,C) the heads' outputs. */
static void attention_forward(float *y, float *att, const float *qkv, const TfDims *d)
{
    int T = d->T, C = d->C, hd = C / d->NH, K = hd * d->NKV, ld = C + 2 * K;
    int group = d->NH / d->NKV;
    float scale = 1.0f / sqrtf((float)hd);
    for (int b = 0; b < d->B; b++)
        for (int h = 0; h < d->NH; h++) {
            const float *base = qkv + (size_t)b * T * ld;
            const float *q = base + (size_t)h * hd, *k = base + C + (size_t)(h / group) * hd;
            const float *v = base + C + K + (size_t)(h / group) * hd;
            float *p = att + ((size_t)b * d->NH + h) * T * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, scale, q, ld, k, ld,
                        0.0f, p, T);
            for (int i = 0; i < T; i++) {
                float *r = p + (size_t)i * T, mx = r[0];
                for (int j = 1; j <= i; j++)
                    mx = r[j] > mx ? r[j] : mx;
                double sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    r[j] = expf(r[j] - mx);
                    sum += r[j];
                }
                float inv = (float)(1.0 / sum);
                for (int j = 0; j <= i; j++)
                    r[j] *= inv;
                for (int j = i + 1; j < T; j++)
                    r[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, p, T, v, ld,
                        0.0f, y + (size_t)b * T * C + (size_t)h * hd, C);
        }
}

/* Causal self-attention backward: dqkv (N, C+2K) = the gradient of qkv for dy (N,C);
 * datt (B,NH,T,T) is scratch. Key/value heads shared by a group accumulate in head
 * order. */
static void attention_backward(float *dqkv, float *datt, const float *dy, const float *att,
                               const float *qkv, const TfDims *d)
{
    int T = d->T, C = d->C, hd = C / d->NH, K = hd * d->NKV, ld = C + 2 * K;
    int group = d->NH / d->NKV;
    float scale = 1.0f / sqrtf((float)hd);
    for (int b = 0; b < d->B; b++)
        for (int h = 0; h < d->NH; h++) {
            size_t bo = (size_t)b * T * ld;
            const float *q = qkv + bo + (size_t)h * hd, *k = qkv + bo + C + (size_t)(h / group) * hd;
            const float *v = k + K;
            float *dq = dqkv + bo + (size_t)h * hd, *dk = dqkv + bo + C + (size_t)(h / group) * hd;
            float *dv = dk + K;
            const float *dyh = dy + (size_t)b * T * C + (size_t)h * hd;
            const float *p = att + ((size_t)b * d->NH + h) * T * T;
            float *dp = datt + ((size_t)b * d->NH + h) * T * T;
            float beta = h % group == 0 ? 0.0f : 1.0f;
            /* dP = dY V^T; dS = P (dP - rowsum(dP P)) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, dyh, C, v, ld,
                        0.0f, dp, T);
            for (int i = 0; i < T; i++) {
                float *r = dp + (size_t)i * T;
                const float *pr = p + (size_t)i * T;
                double dot = 0.0;
                for (int j = 0; j <= i; j++)
                    dot += (double)r[j] * pr[j];
                float fd = (float)dot;
                for (int j = 0; j <= i; j++)
                    r[j] = pr[j] * (r[j] - fd);
                for (int j = i + 1; j < T; j++)
                    r[j] = 0.0f;
            }
            /* dQ = dS K scale, dK (+)= dS^T Q scale, dV (+)= P^T dY */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, scale, dp, T, k, ld,
                        0.0f, dq, ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, scale, dp, T, q, ld,
                        beta, dk, ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, p, T, dyh, C,
                        beta, dv, ld);
        }
}

/* ---- regions --------------------------------------------------------------------- */

/* The float at region offset off (a tensor lies wholly in one piece: tf_layout.h). */
static float *at(const PrRegion *g, size_t off)
{
    return pr_region_at(g, (int64_t)off);
}

static size_t nc_of(const TfConfig *c)
{
    return tf_pad16((size_t)c->d.B * (size_t)c->d.T * (size_t)c->d.C);
}

/* xs[i]: input of layer i of the slice (i = nl: of the final norm). */
static float *xs_at(const PrRegion *g, const TfLayout *a, const TfConfig *c, int i)
{
    return at(g, a->xs + (size_t)i * nc_of(c));
}

/* Layer i's forward part and gradients: one copy that every layer uses in turn under
 * layer-granular recomputation (tf_layout.h). */
static float *lay(const PrRegion *g, const TfLayout *a, int i, size_t off)
{
    return at(g, a->lbase + (size_t)(a->per_layer ? 0 : i) * a->lstride + off);
}

static float *glay(const PrRegion *g, const TfLayout *a, int i, size_t off)
{
    return at(g, a->gbase + (size_t)(a->per_layer ? 0 : i) * a->gstride + off);
}

/* Gradient of xs[i]; dxs[0] of a slice without embedding is din. */
static float *dxs_at(const PrRegion *g, const TfLayout *a, const TfConfig *c, const MlpSlice *s,
                     int i, float *din)
{
    if (!s->embed) {
        if (i == 0)
            return din;
        i--;
    }
    return at(g, a->dxs + (size_t)i * nc_of(c));
}

static const float *P(const TfModel *m, size_t l, int k)
{
    size_t o = m->slot[l * TF_NSLOTS + k];
    return o == NONE ? NULL : m->param_mem + o;
}

static float *G(const TfModel *m, size_t l, int k)
{
    size_t o = m->slot[l * TF_NSLOTS + k];
    return o == NONE ? NULL : m->grad_mem + o;
}

/* ---- forward --------------------------------------------------------------------- */

/* The forward of layer i of slice s from xs[i] into its forward part in region g; y (may
 * be NULL: a rebuild inside the backward needs no layer output) gets the layer output. */
static void layer_forward(TfModel *m, const MlpSlice *s, const PrRegion *g, const TfLayout *a,
                          int i, float *y)
{
    const TfConfig *c = &m->cfg;
    const TfDims *d = &c->d;
    bool gpt = d->arch == TF_GPT;
    int N = d->B * d->T, C = d->C, F = d->F;
    int K = C / d->NH * d->NKV, QKV = C + 2 * K;
    size_t btc = (size_t)N * C;
    size_t l = (size_t)(s->layer0 + i);
    const float *x = xs_at(g, a, c, i);
    float *ln1 = lay(g, a, i, a->l_ln1), *qkv = lay(g, a, i, a->l_qkv);
    float *att = lay(g, a, i, a->l_att), *atty = lay(g, a, i, a->l_atty);
    float *xmid = lay(g, a, i, a->l_xmid), *ln2 = lay(g, a, i, a->l_ln2);
    float *fa = lay(g, a, i, a->l_fa), *fb = lay(g, a, i, a->l_fb);
    norm_forward(ln1, x, P(m, l, TF_LN1_W), P(m, l, TF_LN1_B), N, C);
    mlp_matmul_forward(qkv, ln1, P(m, l, TF_QKV_W), P(m, l, TF_QKV_B), N, C, QKV);
    if (!gpt)
        rope(qkv, d, false);
    attention_forward(atty, att, qkv, d);
    mlp_matmul_forward(xmid, atty, P(m, l, TF_PROJ_W), P(m, l, TF_PROJ_B), N, C, C);
    mlp_residual_forward(xmid, xmid, x, btc);
    norm_forward(ln2, xmid, P(m, l, TF_LN2_W), P(m, l, TF_LN2_B), N, C);
    const float *down_in;
    mlp_matmul_forward(fa, ln2, P(m, l, TF_FC1_W), P(m, l, TF_FC1_B), N, C, F);
    if (gpt) {
        mlp_gelu_forward(fb, fa, (size_t)N * F);
        down_in = fb;
    } else {
        float *fc = lay(g, a, i, a->l_fc), *fd = lay(g, a, i, a->l_fd);
        mlp_matmul_forward(fc, ln2, P(m, l, TF_UP_W), NULL, N, C, F);
        for (size_t j = 0; j < (size_t)N * F; j++)
            tf_swiglu_elem(fb, fd, fa, fc, j);
        down_in = fd;
    }
    if (!y)
        return;
    mlp_matmul_forward(y, down_in, P(m, l, TF_FC2_W), P(m, l, TF_FC2_B), N, F, C);
    mlp_residual_forward(y, y, xmid, btc);
}

/* The head of slice s (final norm, logits, softmax) from xs[nl]; the loss when loss. */
static void head_forward(TfModel *m, const MlpSlice *s, const PrRegion *g, const TfLayout *a,
                         float *loss, const int *targets)
{
    const TfConfig *c = &m->cfg;
    const TfDims *d = &c->d;
    bool gpt = d->arch == TF_GPT;
    int N = d->B * d->T, C = d->C, V = d->V;
    const float *x = xs_at(g, a, c, s->nlayers);
    float *lnf = at(g, a->lnf), *logits = at(g, a->logits), *probs = at(g, a->probs);
    norm_forward(lnf, x, m->param_mem + m->lnf_w, gpt ? m->param_mem + m->lnf_b : NULL, N, C);
    mlp_matmul_forward(logits, lnf, m->param_mem + m->head_w, NULL, N, C, V);
    mlp_softmax_forward(probs, logits, N, V);
    if (loss) {
        assert(targets);
        *loss = mlp_crossentropy_forward(probs, targets, N, V);
    }
}

/* The forward of slice s into region g (keep-all). xs[0] holds the input unless the
 * slice embeds. The last layer writes out (no head), or xs[nl] (head); out may be NULL
 * (recompute: the slice output is not kept). */
static void forward_into(TfModel *m, const MlpSlice *s, const PrRegion *g, float *out,
                         float *loss, const int *tokens, const int *targets)
{
    const TfConfig *c = &m->cfg;
    const TfDims *d = &c->d;
    TfLayout a = layout_of(c, s);
    int nl = s->nlayers;
    size_t btc = (size_t)d->B * d->T * d->C;
    if (s->embed) {
        assert(tokens);
        float *x0 = (nl == 0 && !s->head) ? out : xs_at(g, &a, c, 0);
        for (size_t j = 0; x0 && j < btc; j++)
            tf_embed_elem(x0, tokens, m->param_mem + m->wte,
                          d->arch == TF_GPT ? m->param_mem + m->wpe : NULL, d->C, d->T, j);
    }
    for (int i = 0; i < nl; i++)
        layer_forward(m, s, g, &a, i, (i == nl - 1 && !s->head) ? out : xs_at(g, &a, c, i + 1));
    if (s->head)
        head_forward(m, s, g, &a, loss, targets);
}

int tf_forward(TfModel *m, const MlpSlice *s, float *out, float *loss, void *act,
               const float *in, const int *tokens, const int *targets, bool keep_all)
{
    TfLayout a = layout_of(&m->cfg, s);
    PrRegion g = tf_region_whole(act, &a);
    return tf_forward_split(m, s, out, loss, &g, in, tokens, targets, keep_all, NULL, 0);
}

int tf_forward_split(TfModel *m, const MlpSlice *s, float *out, float *loss, const PrRegion *g,
                     const float *in, const int *tokens, const int *targets, bool keep_all,
                     void *ws, size_t ws_bytes)
{
    const TfConfig *c = &m->cfg;
    size_t btc = (size_t)c->d.B * c->d.T * c->d.C;
    assert(s->head ? out == NULL : out != NULL);
    assert(s->embed || in != NULL);
    TfLayout a = layout_of(c, s);
    if (a.act == 0) { /* identity slice */
        memmove(out, in, btc * sizeof *out);
        return 0;
    }
    if (keep_all) {
        if (!s->embed)
            memcpy(xs_at(g, &a, c, 0), in, btc * sizeof *in);
        forward_into(m, s, g, out, loss, tokens, targets);
        return 0;
    }
    /* Only the checkpoint is kept: run in a temporary region (the workspace), keep its
     * prefix. */
    if (ws && ws_bytes < a.act * sizeof(float))
        return -2;
    float *tmp = ws ? (float *)ws : malloc(a.act * sizeof *tmp);
    if (!tmp)
        return -1;
    PrRegion t = tf_region_whole(tmp, &a);
    if (!s->embed)
        memcpy(tmp, in, btc * sizeof *in);
    forward_into(m, s, &t, out, loss, tokens, targets);
    if (a.ckpt)
        memcpy(at(g, 0), tmp, a.ckpt * sizeof *tmp);
    if (!ws)
        free(tmp);
    return 0;
}

void tf_recompute(TfModel *m, const MlpSlice *s, const PrRegion *g, const int *tokens)
{
    TfLayout a = layout_of(&m->cfg, s);
    if (a.act == 0)
        return;
    if (!a.per_layer) {
        forward_into(m, s, g, NULL, NULL, tokens, NULL);
        return;
    }
    /* Layer-granular: the first of the rebuilds inside the backward, the head and the
     * last layer; B rebuilds each earlier layer just before its backward. */
    if (s->head)
        head_forward(m, s, g, &a, NULL, NULL);
    layer_forward(m, s, g, &a, s->nlayers - 1, NULL);
}

/* ---- backward -------------------------------------------------------------------- */

/* Weight gradients of the head from the wact prefix of slice s's region. */
static void head_weight_grads(TfModel *m, const MlpSlice *s, const PrRegion *g,
                              const TfLayout *a)
{
    const TfConfig *c = &m->cfg;
    const TfDims *d = &c->d;
    bool gpt = d->arch == TF_GPT;
    int N = d->B * d->T, C = d->C, V = d->V;
    mlp_matmul_backward_weight(m->grad_mem + m->head_w, NULL, at(g, a->logits), at(g, a->lnf),
                               N, C, V);
    norm_backward_weight(m->grad_mem + m->lnf_w, gpt ? m->grad_mem + m->lnf_b : NULL,
                         at(g, a->dlnf), xs_at(g, a, c, s->nlayers), N, C);
}

/* Weight gradients of layer i of slice s from its forward part and gradients. */
static void layer_weight_grads(TfModel *m, const MlpSlice *s, const PrRegion *g,
                               const TfLayout *a, int i)
{
    const TfConfig *c = &m->cfg;
    const TfDims *d = &c->d;
    bool gpt = d->arch == TF_GPT;
    int N = d->B * d->T, C = d->C, F = d->F;
    int QKV = C + 2 * (C / d->NH * d->NKV);
    size_t l = (size_t)(s->layer0 + i);
    const float *dres = dxs_at(g, a, c, s, i + 1, NULL);
    const float *down_in = lay(g, a, i, gpt ? a->l_fb : a->l_fd);
    float *ln2 = lay(g, a, i, a->l_ln2);
    mlp_matmul_backward_weight(G(m, l, TF_FC2_W), G(m, l, TF_FC2_B), dres, down_in, N, F, C);
    mlp_matmul_backward_weight(G(m, l, TF_FC1_W), G(m, l, TF_FC1_B), glay(g, a, i, a->g_fa),
                               ln2, N, C, F);
    if (!gpt)
        mlp_matmul_backward_weight(G(m, l, TF_UP_W), NULL, glay(g, a, i, a->g_fc), ln2, N, C,
                                   F);
    norm_backward_weight(G(m, l, TF_LN2_W), G(m, l, TF_LN2_B), glay(g, a, i, a->g_ln2),
                         lay(g, a, i, a->l_xmid), N, C);
    mlp_matmul_backward_weight(G(m, l, TF_PROJ_W), G(m, l, TF_PROJ_B),
                               glay(g, a, i, a->g_xmid), lay(g, a, i, a->l_atty), N, C, C);
    mlp_matmul_backward_weight(G(m, l, TF_QKV_W), G(m, l, TF_QKV_B), glay(g, a, i, a->g_qkv),
                               lay(g, a, i, a->l_ln1), N, C, QKV);
    norm_backward_weight(G(m, l, TF_LN1_W), G(m, l, TF_LN1_B), glay(g, a, i, a->g_ln1),
                         xs_at(g, a, c, i), N, C);
}

/* Weight gradients of the embedding (and the positions: gpt) from dxs[0]. */
static void embed_weight_grads(TfModel *m, const MlpSlice *s, const PrRegion *g,
                               const TfLayout *a, const int *tokens)
{
    const TfConfig *c = &m->cfg;
    const TfDims *d = &c->d;
    int N = d->B * d->T, C = d->C;
    assert(tokens);
    const float *dx0 = dxs_at(g, a, c, s, 0, NULL);
    mlp_encoder_backward(m->grad_mem + m->wte, dx0, tokens, N, C);
    for (size_t j = 0; d->arch == TF_GPT && j < (size_t)d->T * C; j++)
        tf_pos_backward_elem(m->grad_mem + m->wpe, dx0, d->B, d->T, C, j);
}

/* Weight gradients of the slice from the wact prefix of its region; per_layer: the
 * layers' were taken inside the backward, layer by layer (their parts are gone). */
static void weight_grads(TfModel *m, const MlpSlice *s, const PrRegion *g, const int *tokens)
{
    TfLayout a = layout_of(&m->cfg, s);
    if (s->head)
        head_weight_grads(m, s, g, &a);
    for (int i = s->nlayers - 1; i >= 0 && !a.per_layer; i--)
        layer_weight_grads(m, s, g, &a, i);
    if (s->embed)
        embed_weight_grads(m, s, g, &a, tokens);
}

static void backward(TfModel *m, const MlpSlice *s, float *din, const PrRegion *g,
                     const float *dout, const int *tokens, const int *targets, bool split,
                     float gscale)
{
    const TfConfig *c = &m->cfg;
    const TfDims *d = &c->d;
    TfLayout a = layout_of(c, s);
    bool gpt = d->arch == TF_GPT;
    int N = d->B * d->T, C = d->C, F = d->F, V = d->V, nl = s->nlayers;
    int QKV = C + 2 * (C / d->NH * d->NKV);
    size_t btc = (size_t)N * C, nf = (size_t)N * F;
    assert(s->head ? dout == NULL : dout != NULL);
    assert(s->embed ? din == NULL : din != NULL);
    if (a.act == 0) {
        memmove(din, dout, btc * sizeof *din);
        return;
    }
    float *dtop = dxs_at(g, &a, c, s, nl, din);
    if (s->head) {
        assert(targets);
        float *dlnf = at(g, a.dlnf), *dlogits = at(g, a.logits);
        mlp_crossentropy_softmax_backward(dlogits, at(g, a.probs), targets, gscale / (float)N,
                                          N, V);
        mm_backward_input(dlnf, dlogits, m->param_mem + m->head_w, N, C, V, 0.0f);
        memset(dtop, 0, btc * sizeof *dtop);
        norm_backward_input(dtop, dlnf, xs_at(g, &a, c, nl), m->param_mem + m->lnf_w, !gpt, N,
                            C);
    } else {
        memcpy(dtop, dout, btc * sizeof *dtop);
    }
    float *dfb = nl > 0 ? at(g, a.t_dfb) : NULL, *datty = nl > 0 ? at(g, a.t_datty) : NULL;
    float *datt = nl > 0 ? at(g, a.t_datt) : NULL;
    assert(!(split && a.per_layer)); /* a split backward needs every layer's parts */
    for (int i = nl - 1; i >= 0; i--) {
        size_t l = (size_t)(s->layer0 + i);
        if (a.per_layer && i < nl - 1) /* the R rebuilt the last layer */
            layer_forward(m, s, g, &a, i, NULL);
        const float *dres = dxs_at(g, &a, c, s, i + 1, din);
        float *dx = dxs_at(g, &a, c, s, i, din);
        float *fa = lay(g, &a, i, a.l_fa), *fb = lay(g, &a, i, a.l_fb);
        float *dfa = glay(g, &a, i, a.g_fa), *dln2 = glay(g, &a, i, a.g_ln2);
        float *dxmid = glay(g, &a, i, a.g_xmid), *dqkv = glay(g, &a, i, a.g_qkv);
        float *dln1 = glay(g, &a, i, a.g_ln1);
        /* MLP */
        mm_backward_input(dfb, dres, P(m, l, TF_FC2_W), N, F, C, 0.0f);
        if (gpt) {
            mlp_gelu_backward(dfa, fa, dfb, nf);
            mm_backward_input(dln2, dfa, P(m, l, TF_FC1_W), N, C, F, 0.0f);
        } else {
            float *fc = lay(g, &a, i, a.l_fc), *dfc = glay(g, &a, i, a.g_fc);
            for (size_t j = 0; j < nf; j++)
                tf_swiglu_backward_elem(dfa, dfc, dfb, fa, fb, fc, j);
            mm_backward_input(dln2, dfa, P(m, l, TF_FC1_W), N, C, F, 0.0f);
            mm_backward_input(dln2, dfc, P(m, l, TF_UP_W), N, C, F, 1.0f);
        }
        memcpy(dxmid, dres, btc * sizeof *dxmid);
        norm_backward_input(dxmid, dln2, lay(g, &a, i, a.l_xmid), P(m, l, TF_LN2_W), !gpt, N, C);
        /* attention */
        mm_backward_input(datty, dxmid, P(m, l, TF_PROJ_W), N, C, C, 0.0f);
        attention_backward(dqkv, datt, datty, lay(g, &a, i, a.l_att), lay(g, &a, i, a.l_qkv), d);
        if (!gpt)
            rope(dqkv, d, true);
        mm_backward_input(dln1, dqkv, P(m, l, TF_QKV_W), N, C, QKV, 0.0f);
        memmove(dx, dxmid, btc * sizeof *dx);
        norm_backward_input(dx, dln1, xs_at(g, &a, c, i), P(m, l, TF_LN1_W), !gpt, N, C);
        if (a.per_layer) /* before the next layer's rebuild overwrites the parts */
            layer_weight_grads(m, s, g, &a, i);
    }
    if (!split)
        weight_grads(m, s, g, tokens);
}

void tf_backward(TfModel *m, const MlpSlice *s, float *din, const PrRegion *g,
                 const float *dout, const int *tokens, const int *targets, bool split)
{
    backward(m, s, din, g, dout, tokens, targets, split, 1.0f / (float)m->cfg.M);
}

void tf_weight_grad(TfModel *m, const MlpSlice *s, const PrRegion *g, const int *tokens)
{
    TfLayout a = layout_of(&m->cfg, s);
    if (a.act == 0)
        return;
    weight_grads(m, s, g, tokens);
}

/* One micro-batch of the reference (PrReferenceStep): the whole model, F then B. */
PR_REFERENCE_STEP(reference_step, TfModel, tf_whole, TfLayout, layout_of, tf_region_whole,
                  tf_forward, backward)

float tf_reference_iteration(TfModel *m, int M, const int *tokens, const int *targets)
{
    const TfConfig *c = &m->cfg;
    MlpSlice s = tf_whole(c);
    return pr_reference_iteration(m, M, (size_t)c->d.B * c->d.T, tf_act_bytes(c, &s),
                                  reference_step, tokens, targets);
}
