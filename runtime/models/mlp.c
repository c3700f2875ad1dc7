/* mlp.c - the `mlp` workload: model, slices, act regions, reference trainer.
 *
 * Legend: B = micro-batch size, T = sequence length, C = hidden, H = 4C, V = vocabulary,
 * L = layers, nl = layers of a slice, M = micro-batches per iteration.
 * The model and the act-region layout are described in mlp.h; docs/model.md explains
 * why pipelined gradients match the reference.
 */
#include "mlp.h"
#include "mlp_layers.h"
#include "mlp_layout.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------
 * Sizes
 */

int mlp_config_check(const MlpConfig *c, char *why, size_t why_n)
{
    const char *msg = NULL;
    if (c->vocab < 1)
        msg = "vocabulary size must be >= 1";
    else if (c->C < 1)
        msg = "hidden size C must be >= 1";
    else if (c->L < 0)
        msg = "layers L must be >= 0";
    else if (c->T < 1)
        msg = "sequence length T must be >= 1";
    else if (c->B < 1)
        msg = "micro-batch size B must be >= 1";
    else if (c->M < 1)
        msg = "micro-batches M must be >= 1";
    else {
        /* BLAS takes int dimensions; byte sizes must fit comfortably in size_t. */
        double bt = (double)c->B * c->T, h = 4.0 * c->C, lim = 2147483647.0;
        double floats = (double)c->L * (2.0 * h * c->C + 8.0 * c->C + h)
                      + 2.0 * c->vocab * c->C + c->vocab
                      + (double)(c->L + 2) * bt * (h * 2 + 8.0 * c->C) + bt * c->vocab;
        if (bt > lim || h > lim || (double)c->vocab * c->C > 1e15 ||
            floats * 8.0 > 1e18 || bt * h > 1e15 || bt * c->vocab > 1e15)
            msg = "model too large";
    }
    if (msg && why && why_n > 0)
        snprintf(why, why_n, "%s", msg);
    return msg ? -1 : 0;
}

/* The act region's layout (mlp_layout.h, shared with the GPU kernels and the code
 * generator). */
typedef MlpLayout ActLayout;

static bool slice_empty(const MlpSlice *s) { return !s->embed && !s->head && s->nlayers == 0; }

static ActLayout act_layout(const MlpConfig *c, const MlpSlice *s)
{
    return mlp_layout((size_t)c->vocab, (size_t)c->C, (size_t)c->T, (size_t)c->B,
                      (size_t)s->nlayers, s->embed, s->head);
}

size_t mlp_io_bytes(const MlpConfig *c)
{
    return (size_t)c->B * c->T * c->C * sizeof(float);
}

PR_LAYOUT_BYTES(mlp, MlpConfig, MlpSlice, act_layout)

/* Parameter floats of one block. */
static size_t layer_params(const MlpConfig *c)
{
    size_t C = (size_t)c->C, H = 4 * C;
    return 2 * C + H * C + H + C * H + C;
}

size_t mlp_weight_bytes(const MlpConfig *c, const MlpSlice *s)
{
    size_t C = (size_t)c->C, V = (size_t)c->vocab;
    size_t n = (size_t)s->nlayers * layer_params(c);
    if (s->embed)
        n += V * C;
    if (s->head)
        n += 2 * C + V * C + V;
    return 2 * n * sizeof(float);
}

int mlp_slices_init(const MlpConfig *c, int nv, const int *layers, MlpSlice *slices)
{
    if (nv < 1)
        return -1;
    long long sum = 0;
    for (int v = 0; v < nv; v++) {
        if (layers[v] < 0)
            return -1;
        sum += layers[v];
    }
    if (sum != c->L)
        return -1;
    int l0 = 0;
    for (int v = 0; v < nv; v++) {
        slices[v] = (MlpSlice){.vstage = v, .layer0 = l0, .nlayers = layers[v],
                               .embed = v == 0, .head = v == nv - 1};
        l0 += layers[v];
    }
    return 0;
}

MlpSlice mlp_whole(const MlpConfig *c)
{
    return (MlpSlice){.vstage = 0, .layer0 = 0, .nlayers = c->L, .embed = true, .head = true};
}

/* ------------------------------------------------------------------------------------
 * Parameters
 */

/* Carves mem (nparams floats) into the tensors of p, in the order of MlpParams. */
static void carve(MlpParams *p, float *mem, const MlpConfig *c)
{
    size_t C = (size_t)c->C, H = 4 * C, L = (size_t)c->L, V = (size_t)c->vocab;
    float *q = mem;
    p->wte = q;    q += V * C;
    p->ln_w = q;   q += L * C;
    p->ln_b = q;   q += L * C;
    p->fc1_w = q;  q += L * H * C;
    p->fc1_b = q;  q += L * H;
    p->fc2_w = q;  q += L * C * H;
    p->fc2_b = q;  q += L * C;
    p->lnf_w = q;  q += C;
    p->lnf_b = q;  q += C;
    p->head_w = q; q += V * C;
    p->head_b = q;
}

static size_t count_params(const MlpConfig *c)
{
    size_t C = (size_t)c->C, V = (size_t)c->vocab;
    return V * C + (size_t)c->L * layer_params(c) + 2 * C + V * C + V;
}

#define LAYER_TENSORS 6  /* ln_w ln_b fc1_w fc1_b fc2_w fc2_b */
#define HEAD_TENSORS 4   /* lnf_w lnf_b head_w head_b */

int mlp_param_count(const MlpModel *m) { return m->ntensors; }

/* Tensor i of the parameter set p (params or grads): pointer and element count. */
static void tensor(const MlpModel *m, const MlpParams *p, int i, float **t, size_t *n)
{
    size_t C = (size_t)m->cfg.C, H = 4 * C, V = (size_t)m->cfg.vocab;
    int L = m->cfg.L;
    assert(i >= 0 && i < m->ntensors);
    if (i == 0) {
        *t = p->wte, *n = V * C;
        return;
    }
    i--;
    if (i < L * LAYER_TENSORS) {
        size_t l = (size_t)(i / LAYER_TENSORS);
        switch (i % LAYER_TENSORS) {
        case 0: *t = p->ln_w + l * C, *n = C; return;
        case 1: *t = p->ln_b + l * C, *n = C; return;
        case 2: *t = p->fc1_w + l * H * C, *n = H * C; return;
        case 3: *t = p->fc1_b + l * H, *n = H; return;
        case 4: *t = p->fc2_w + l * C * H, *n = C * H; return;
        default: *t = p->fc2_b + l * C, *n = C; return;
        }
    }
    switch (i - L * LAYER_TENSORS) {
    case 0: *t = p->lnf_w, *n = C; return;
    case 1: *t = p->lnf_b, *n = C; return;
    case 2: *t = p->head_w, *n = V * C; return;
    default: *t = p->head_b, *n = V; return;
    }
}

void mlp_param(const MlpModel *m, int i, const char **name, float **p, float **grad,
               size_t *n)
{
    float *t;
    size_t k;
    if (name)
        *name = m->names[i];
    tensor(m, &m->params, i, &t, &k);
    if (p)
        *p = t;
    if (n)
        *n = k;
    tensor(m, &m->grads, i, &t, &k);
    if (grad)
        *grad = t;
}

bool mlp_param_in_slice(const MlpModel *m, int i, const MlpSlice *s)
{
    if (i == 0)
        return s->embed;
    i--;
    if (i < m->cfg.L * LAYER_TENSORS) {
        int l = i / LAYER_TENSORS;
        return l >= s->layer0 && l < s->layer0 + s->nlayers;
    }
    return s->head;
}

/* Uniform in [-a, a). */
static void fill_uniform(float *t, size_t n, float a, uint64_t *state)
{
    for (size_t i = 0; i < n; i++)
        t[i] = (float)((2.0 * pr_uniform01(state) - 1.0) * a);
}

static void fill(float *t, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        t[i] = v;
}

static MlpModel *alloc_model(const MlpConfig *c)
{
    if (mlp_config_check(c, NULL, 0) != 0)
        return NULL;
    MlpModel *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->cfg = *c;
    m->nparams = count_params(c);
    m->ntensors = 1 + c->L * LAYER_TENSORS + HEAD_TENSORS;
    m->names = calloc((size_t)m->ntensors, sizeof *m->names);
    if (pr_params_alloc(m->nparams, &m->param_mem, &m->grad_mem) != 0 || !m->names) {
        mlp_free(m);
        return NULL;
    }
    carve(&m->params, m->param_mem, c);
    carve(&m->grads, m->grad_mem, c);
    static const char *const layer_names[LAYER_TENSORS] = {
        "ln_w", "ln_b", "fc1_w", "fc1_b", "fc2_w", "fc2_b"};
    static const char *const head_names[HEAD_TENSORS] = {"lnf_w", "lnf_b", "head_w", "head_b"};
    snprintf(m->names[0], sizeof m->names[0], "wte");
    for (int i = 0; i < c->L * LAYER_TENSORS; i++)
        snprintf(m->names[1 + i], sizeof m->names[0], "h%d.%s", i / LAYER_TENSORS,
                 layer_names[i % LAYER_TENSORS]);
    for (int i = 0; i < HEAD_TENSORS; i++)
        snprintf(m->names[1 + c->L * LAYER_TENSORS + i], sizeof m->names[0], "%s",
                 head_names[i]);
    return m;
}

MlpModel *mlp_create(const MlpConfig *c, uint64_t seed)
{
    MlpModel *m = alloc_model(c);
    if (!m)
        return NULL;
    size_t C = (size_t)c->C, H = 4 * C, L = (size_t)c->L, V = (size_t)c->vocab;
    uint64_t st = seed;
    MlpParams *p = &m->params;
    fill_uniform(p->wte, V * C, 1.0f, &st);
    fill(p->ln_w, L * C, 1.0f);
    fill(p->ln_b, L * C, 0.0f);
    fill_uniform(p->fc1_w, L * H * C, 1.0f / sqrtf((float)C), &st);
    fill(p->fc1_b, L * H, 0.0f);
    fill_uniform(p->fc2_w, L * C * H, 1.0f / sqrtf((float)H), &st);
    fill(p->fc2_b, L * C, 0.0f);
    fill(p->lnf_w, C, 1.0f);
    fill(p->lnf_b, C, 0.0f);
    fill_uniform(p->head_w, V * C, 1.0f / sqrtf((float)C), &st);
    fill(p->head_b, V, 0.0f);
    return m;
}

MlpModel *mlp_clone(const MlpModel *m)
{
    MlpModel *k = alloc_model(&m->cfg);
    if (!k)
        return NULL;
    memcpy(k->param_mem, m->param_mem, m->nparams * sizeof(float));
    memcpy(k->grad_mem, m->grad_mem, m->nparams * sizeof(float));
    return k;
}

void mlp_free(MlpModel *m)
{
    if (m) {
        pr_params_free(m->param_mem, m->grad_mem);
        free(m->names);
        free(m);
    }
}

void mlp_zero_grad(MlpModel *m, const MlpSlice *s)
{
    for (int i = 0; i < m->ntensors; i++)
        if (mlp_param_in_slice(m, i, s)) {
            float *g;
            size_t n;
            tensor(m, &m->grads, i, &g, &n);
            memset(g, 0, n * sizeof *g);
        }
}

void mlp_sgd_step(MlpModel *m, const MlpSlice *s, float lr)
{
    for (int i = 0; i < m->ntensors; i++)
        if (mlp_param_in_slice(m, i, s)) {
            float *p, *g;
            size_t n;
            tensor(m, &m->params, i, &p, &n);
            tensor(m, &m->grads, i, &g, &n);
            for (size_t j = 0; j < n; j++)
                p[j] -= lr * g[j];
        }
}

double mlp_rel_error(const float *a, const float *ref, size_t n)
{
    double maxdiff = 0.0, maxref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]), r = fabs((double)ref[i]);
        if (d > maxdiff || d != d)
            maxdiff = d != d ? INFINITY : d;
        if (r > maxref)
            maxref = r;
    }
    if (n == 0)
        return 0.0;
    return maxdiff / (maxref > 1e-30 ? maxref : 1e-30);
}

/* ------------------------------------------------------------------------------------
 * Forward, recompute, backward
 */

#ifndef NDEBUG
static bool tokens_ok(const int *t, size_t n, int V)
{
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= V)
            return false;
    return true;
}
#endif

/* The forward of slice s with tensors at A. xs[0] must hold the slice input unless
 * the slice embeds (then it is computed from tokens). The last block writes into out
 * when the slice has no head, else into xs[nl]. */
static void forward_into(MlpModel *m, const MlpSlice *s, const MlpActs *A, float *out,
                         float *loss, const int *tokens, const int *targets)
{
    const MlpConfig *c = &m->cfg;
    const MlpParams *p = &m->params;
    int N = c->B * c->T, C = c->C, H = 4 * c->C, V = c->vocab, nl = s->nlayers;
    size_t btc = (size_t)N * C;

    if (s->embed) {
        assert(tokens && tokens_ok(tokens, (size_t)N, V));
        /* with neither blocks nor head the embedding is the slice output */
        float *x0 = (nl == 0 && !s->head) ? out : A->xs;
        if (x0)
            mlp_encoder_forward(x0, tokens, p->wte, N, C);
    }
    for (int i = 0; i < nl; i++) {
        size_t l = (size_t)(s->layer0 + i);
        const float *x = mlp_xs(A, (size_t)i);
        float *mean = A->mean + i * A->s_bt, *rstd = A->rstd + i * A->s_bt;
        float *ln = A->ln_out + i * A->s_btc;
        float *fch = A->fch + i * A->s_bth, *gelu = A->gelu + i * A->s_bth;
        float *y = (i == nl - 1 && !s->head) ? out : mlp_xs(A, (size_t)i + 1);
        mlp_layernorm_forward(ln, mean, rstd, x, p->ln_w + l * C, p->ln_b + l * C, N, C);
        mlp_matmul_forward(fch, ln, p->fc1_w + l * H * C, p->fc1_b + l * H, N, C, H);
        mlp_gelu_forward(gelu, fch, (size_t)N * H);
        if (!y)
            continue;   /* recompute of a slice without head: the output is not kept */
        /* y = x + fc2(gelu): fc2 into y, then add the residual (y may alias x) */
        if (y == x) {
            /* in place (temporaries): use fch, no longer needed, for the fc2 output */
            mlp_matmul_forward(fch, gelu, p->fc2_w + l * C * H, p->fc2_b + l * C, N, H, C);
            mlp_residual_forward(y, x, fch, btc);
        } else {
            mlp_matmul_forward(y, gelu, p->fc2_w + l * C * H, p->fc2_b + l * C, N, H, C);
            mlp_residual_forward(y, x, y, btc);
        }
    }
    if (s->head) {
        const float *x = mlp_xs(A, (size_t)nl);
        mlp_layernorm_forward(A->lnf_out, A->lnf_mean, A->lnf_rstd, x, p->lnf_w, p->lnf_b,
                              N, C);
        mlp_matmul_forward(A->probs, A->lnf_out, p->head_w, p->head_b, N, C, V);
        mlp_softmax_forward(A->probs, A->probs, N, V);
        if (loss) {
            assert(targets && tokens_ok(targets, (size_t)N, V));
            *loss = mlp_crossentropy_forward(A->probs, targets, N, V);
        }
    }
}

int mlp_forward(MlpModel *m, const MlpSlice *s, float *out, float *loss, void *act,
                const float *in, const int *tokens, const int *targets, bool keep_all)
{
    ActLayout a = act_layout(&m->cfg, s);
    PrRegion g = mlp_region_whole(act, &a);
    return mlp_forward_split(m, s, out, loss, &g, in, tokens, targets, keep_all, NULL, 0);
}

int mlp_forward_split(MlpModel *m, const MlpSlice *s, float *out, float *loss,
                      const PrRegion *g, const float *in, const int *tokens,
                      const int *targets, bool keep_all, void *ws, size_t ws_bytes)
{
    const MlpConfig *c = &m->cfg;
    size_t btc = (size_t)c->B * c->T * c->C;
    assert(s->head ? out == NULL : out != NULL);
    assert(s->embed || in != NULL);
    if (slice_empty(s)) {
        memmove(out, in, btc * sizeof *out);
        return 0;
    }
    ActLayout a = act_layout(c, s);
    if (keep_all) {
        MlpActs A = mlp_acts_in_region(g, &a);
        if (!s->embed)
            memcpy(A.xs, in, btc * sizeof *in);
        forward_into(m, s, &A, out, loss, tokens, targets);
        return 0;
    }
    /* Only the checkpoint is kept: run on temporaries reused by every block, updating
     * one copy of the residual stream in place. */
    size_t n = mlp_scratch_floats((size_t)c->vocab, (size_t)c->C, (size_t)c->T, (size_t)c->B,
                                  s->head);
    if (ws && ws_bytes < n * sizeof(float))
        return -2;
    float *tmp = ws ? (float *)ws : malloc(n * sizeof *tmp);
    if (!tmp)
        return -1;
    MlpActs A = mlp_acts_scratch(tmp, (size_t)c->C, (size_t)c->T, (size_t)c->B, s->head);
    if (!s->embed) {
        memcpy(pr_region_at(g, (int64_t)a.xs), in, btc * sizeof *in);   /* the checkpoint */
        memcpy(A.xs, in, btc * sizeof *in);
    }
    forward_into(m, s, &A, out, loss, tokens, targets);
    if (!ws)
        free(tmp);
    return 0;
}

void mlp_recompute(MlpModel *m, const MlpSlice *s, void *act, const int *tokens)
{
    ActLayout a = act_layout(&m->cfg, s);
    PrRegion g = mlp_region_whole(act, &a);
    mlp_recompute_split(m, s, &g, tokens);
}

void mlp_recompute_split(MlpModel *m, const MlpSlice *s, const PrRegion *g, const int *tokens)
{
    if (slice_empty(s))
        return;
    ActLayout a = act_layout(&m->cfg, s);
    MlpActs A = mlp_acts_in_region(g, &a);
    /* out = NULL: a slice without head does not keep its output; loss = NULL */
    forward_into(m, s, &A, NULL, NULL, tokens, NULL);
}

/* Gradient of xs[i] in the act region; dxs[0] of a slice without embedding is din. */
static float *dxs_at(const PrRegion *base, const ActLayout *a, const MlpSlice *s, int i,
                     float *din)
{
    if (!s->embed) {
        if (i == 0)
            return din;
        i--;
    }
    return pr_region_at(base, (int64_t)(a->dxs + (size_t)i * a->sbtc));
}

/* Weight gradients of the slice from the act region after its input-gradient pass. */
static void weight_grads(MlpModel *m, const MlpSlice *s, const PrRegion *base, const ActLayout *a,
                         const int *tokens)
{
    const MlpConfig *c = &m->cfg;
    const MlpParams *g = &m->grads;
    int N = c->B * c->T, C = c->C, H = 4 * c->C, V = c->vocab, nl = s->nlayers;
    MlpActs A = mlp_acts_in_region(base, a);
    if (s->head) {
        mlp_matmul_backward_weight(g->head_w, g->head_b, A.probs, A.lnf_out, N, C, V);
        mlp_layernorm_backward_weight(g->lnf_w, g->lnf_b, pr_region_at(base, (int64_t)a->dlnf),
                                      mlp_xs(&A, (size_t)nl), A.lnf_mean, A.lnf_rstd,
                                      N, C);
    }
    for (int i = nl - 1; i >= 0; i--) {
        size_t l = (size_t)(s->layer0 + i);
        const float *dres = dxs_at(base, a, s, i + 1, NULL);
        mlp_matmul_backward_weight(g->fc2_w + l * C * H, g->fc2_b + l * C, dres,
                                   A.gelu + i * A.s_bth, N, H, C);
        mlp_matmul_backward_weight(g->fc1_w + l * H * C, g->fc1_b + l * H,
                                   A.fch + i * A.s_bth, A.ln_out + i * A.s_btc, N, C, H);
        mlp_layernorm_backward_weight(g->ln_w + l * C, g->ln_b + l * C,
                                      pr_region_at(base, (int64_t)(a->dln + i * a->sbtc)), mlp_xs(&A, (size_t)i),
                                      A.mean + i * A.s_bt, A.rstd + i * A.s_bt, N, C);
    }
    if (s->embed) {
        assert(tokens);
        mlp_encoder_backward(g->wte, dxs_at(base, a, s, 0, NULL), tokens, N, C);
    }
}

/* B with the head's gradient scale gscale (1/M). */
static void backward(MlpModel *m, const MlpSlice *s, float *din, const PrRegion *base,
                     const float *dout, const int *tokens, const int *targets, bool split,
                     float gscale)
{
    const MlpConfig *c = &m->cfg;
    const MlpParams *p = &m->params;
    int N = c->B * c->T, C = c->C, H = 4 * c->C, V = c->vocab, nl = s->nlayers;
    size_t btc = (size_t)N * C;
    assert(s->head ? dout == NULL : dout != NULL);
    assert(s->embed ? din == NULL : din != NULL);
    if (slice_empty(s)) {
        memmove(din, dout, btc * sizeof *din);
        return;
    }
    ActLayout a = act_layout(c, s);
    MlpActs A = mlp_acts_in_region(base, &a);

    float *dtop = dxs_at(base, &a, s, nl, din);   /* grad of the slice's top */
    if (s->head) {
        assert(targets && tokens_ok(targets, (size_t)N, V));
        float *dlnf = pr_region_at(base, (int64_t)a.dlnf);
        /* dlogits replaces probs */
        mlp_crossentropy_softmax_backward(A.probs, A.probs, targets, gscale / (float)N, N, V);
        mlp_matmul_backward_input(dlnf, A.probs, p->head_w, N, C, V);
        memset(dtop, 0, btc * sizeof *dtop);
        mlp_layernorm_backward_input(dtop, dlnf, mlp_xs(&A, (size_t)nl), A.lnf_mean,
                                     A.lnf_rstd, p->lnf_w, N, C);
    } else {
        memcpy(dtop, dout, btc * sizeof *dtop);
    }
    float *dgelu = pr_region_at(base, (int64_t)a.dgelu);
    for (int i = nl - 1; i >= 0; i--) {
        size_t l = (size_t)(s->layer0 + i);
        const float *dres = dxs_at(base, &a, s, i + 1, din);
        float *dx = dxs_at(base, &a, s, i, din);
        float *fch = A.fch + i * A.s_bth;   /* becomes dfch */
        float *dln = pr_region_at(base, (int64_t)(a.dln + i * a.sbtc));
        mlp_matmul_backward_input(dgelu, dres, p->fc2_w + l * C * H, N, H, C);
        mlp_gelu_backward(fch, fch, dgelu, (size_t)N * H);
        mlp_matmul_backward_input(dln, fch, p->fc1_w + l * H * C, N, C, H);
        memcpy(dx, dres, btc * sizeof *dx);
        mlp_layernorm_backward_input(dx, dln, mlp_xs(&A, (size_t)i), A.mean + i * A.s_bt,
                                     A.rstd + i * A.s_bt, p->ln_w + l * C, N, C);
    }
    if (s->embed)
        assert(tokens && tokens_ok(tokens, (size_t)N, V));
    if (!split)
        weight_grads(m, s, base, &a, tokens);
}

void mlp_backward(MlpModel *m, const MlpSlice *s, float *din, void *act, const float *dout,
                  const int *tokens, const int *targets, bool split)
{
    ActLayout a = act_layout(&m->cfg, s);
    PrRegion g = mlp_region_whole(act, &a);
    backward(m, s, din, &g, dout, tokens, targets, split, 1.0f / (float)m->cfg.M);
}

void mlp_backward_split(MlpModel *m, const MlpSlice *s, float *din, const PrRegion *g,
                        const float *dout, const int *tokens, const int *targets, bool split)
{
    backward(m, s, din, g, dout, tokens, targets, split, 1.0f / (float)m->cfg.M);
}

void mlp_weight_grad(MlpModel *m, const MlpSlice *s, void *act, const int *tokens)
{
    ActLayout a = act_layout(&m->cfg, s);
    PrRegion g = mlp_region_whole(act, &a);
    mlp_weight_grad_split(m, s, &g, tokens);
}

void mlp_weight_grad_split(MlpModel *m, const MlpSlice *s, const PrRegion *g,
                           const int *tokens)
{
    if (slice_empty(s))
        return;
    ActLayout a = act_layout(&m->cfg, s);
    weight_grads(m, s, g, &a, tokens);
}

/* One micro-batch of the reference (PrReferenceStep): the whole model, F then B. */
PR_REFERENCE_STEP(reference_step, MlpModel, mlp_whole, ActLayout, act_layout, mlp_region_whole,
                  mlp_forward, backward)

float mlp_reference_iteration(MlpModel *m, int M, const int *tokens, const int *targets)
{
    const MlpConfig *c = &m->cfg;
    MlpSlice s = mlp_whole(c);
    return pr_reference_iteration(m, M, (size_t)c->B * c->T, mlp_act_bytes(c, &s),
                                  reference_step, tokens, targets);
}
