/* workload_tf.c - the `gpt` and `llama` workloads in the runtime: each op of a rank runs
 * the slice of runtime/transformer.h that its virtual stage owns, on activations in the
 * rank's arena. Data flow, io buffers, regions (one place, or split after an R) and
 * model-state offload are those of workload_mlp.c, whose entry points hand over here
 * when the program's model is a transformer (PrProgram.model_arch). */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "piperun_internal.h"
#include "transformer.h"

static TfConfig config_of(const PrProgram *g)
{
    return (TfConfig){{g->model_arch, g->mlp_vocab, g->mlp_C, g->model_heads,
                       g->model_kv_heads, g->model_ffn, g->mlp_T, g->mlp_B},
                      g->mlp_L, g->M};
}

static int tf_init(const void *cfg, int nv, const int *layers, MlpSlice *slices)
{
    return tf_slices_init(cfg, nv, layers, slices);
}

static void tf_sizes(const void *cfg, const MlpSlice *s, int64_t out[3])
{
    out[0] = (int64_t)tf_act_bytes(cfg, s);
    out[1] = (int64_t)tf_ckpt_bytes(cfg, s);
    out[2] = (int64_t)tf_wact_bytes(cfg, s);
}

int pr_tf_setup(PrRun *run)
{
    const PrProgram *g = run->prog;
    TfConfig c = config_of(g);
    char why[160];
    if (tf_config_check(&c, why, sizeof why) != 0) {
        pr_fail(run, -1, -1, "%s model: %s", g->model_arch == TF_GPT ? "gpt" : "llama", why);
        return -1;
    }
    const char *arch = g->model_arch == TF_GPT ? "gpt" : "llama";
    if (pr_slices_setup(run, tf_init, &c, c.L, arch) != 0 ||
        pr_check_region_sizes(run, tf_sizes, &c) != 0)
        return -1;
    run->tf = tf_create(&c, run->opt.seed);
    if (!run->tf) {
        pr_fail(run, -1, -1, "out of memory creating the model");
        return -1;
    }
    return pr_model_ready(run, tf_io_bytes(&c));
}

void pr_tf_teardown(PrRun *run)
{
    tf_free(run->tf);
    run->tf = NULL;
    pr_model_states_free(run);
}

void pr_tf_zero(PrRun *run)
{
    for (int v = 0; v < run->PV; v++)
        tf_zero_grad(run->tf, &run->slice[v]);
    for (int m = 0; m < run->M; m++)
        run->mb_loss[m] = 0;
}

void pr_tf_step(PrRun *run)
{
    for (int v = 0; v < run->PV; v++)
        if (!run->offloaded || !run->offloaded[v]) /* an OG stepped it on the host */
            tf_sgd_step(run->tf, &run->slice[v], (float)run->opt.lr);
}

int pr_tf_op(PrRank *r, uint32_t i, const PrOp *o)
{
    PrRun *run = r->run;
    const PrProgram *g = run->prog;
    const MlpSlice *s = &run->slice[o->vstage];
    TfModel *m = run->tf;
    size_t k = (size_t)o->vstage * (size_t)run->M + (size_t)o->mb;
    /* the region: contiguous at off, or (after an R) checkpoint at off, rest apart */
    size_t ck = tf_ckpt_bytes(&m->cfg, s);
    unsigned char *act = r->arena + (o->off[PR_MLP] >= 0 ? o->off[PR_MLP] : 0);
    unsigned char *rest = o->rest[PR_MLP] >= 0 ? r->arena + o->rest[PR_MLP] : act + ck;
    if (s->embed || s->head) {
        if (data_batch(&run->data, run->opt.seed, r->iter, o->mb, g->mlp_B, g->mlp_T,
                       g->mlp_vocab, r->tokens, r->targets) != 0) {
            pr_fail(run, r->id, i, "no batch from the training text");
            return -1;
        }
    }
    switch (o->kind) {
    case PR_F: {
        float *in = NULL, *out = NULL;
        if (!s->embed && !(in = r->in_f[k])) {
            pr_fail(run, r->id, i, "the input of F has not arrived");
            return -1;
        }
        if (!s->head && !(out = malloc(run->io_bytes))) {
            pr_fail(run, r->id, i, "out of memory (%zu bytes)", run->io_bytes);
            return -1;
        }
        float loss = 0;
        int rc = tf_forward(m, s, out, s->head ? &loss : NULL, act, in, r->tokens, r->targets,
                            !(o->flags & PR_HAS_R));
        free(in);
        r->in_f[k] = NULL;
        if (rc != 0) {
            free(out);
            pr_fail(run, r->id, i, "out of memory in the forward");
            return -1;
        }
        if (s->head)
            run->mb_loss[o->mb] = loss;
        if (out) {
            int nv = o->vstage + 1;
            size_t kn = (size_t)nv * (size_t)run->M + (size_t)o->mb;
            void **slot = g->vstages[nv].rank == r->id ? &r->in_f[kn] : &r->out_f[k];
            free(*slot);
            *slot = out;
        }
        return 0;
    }
    case PR_R:
        tf_recompute(m, s, act, rest, r->tokens);
        return 0;
    case PR_B: {
        float *dout = NULL, *din = NULL;
        if (!s->head && !(dout = r->in_b[k])) {
            pr_fail(run, r->id, i, "the output gradient of B has not arrived");
            return -1;
        }
        if (!s->embed && !(din = malloc(run->io_bytes))) {
            pr_fail(run, r->id, i, "out of memory (%zu bytes)", run->io_bytes);
            return -1;
        }
        tf_backward(m, s, din, act, rest, dout, r->tokens, r->targets,
                    (o->flags & PR_HAS_W) != 0);
        free(dout);
        r->in_b[k] = NULL;
        if (din) {
            int pv = o->vstage - 1;
            size_t kp = (size_t)pv * (size_t)run->M + (size_t)o->mb;
            void **slot = g->vstages[pv].rank == r->id ? &r->in_b[kp] : &r->out_b[k];
            free(*slot);
            *slot = din;
        }
        return 0;
    }
    case PR_W:
        tf_weight_grad(m, s, act, rest, r->tokens);
        return 0;
    default:
        return 0;
    }
}

/* Tokens and targets (M,B,T) of iteration it; NULL pair when out of memory or no batch. */
static int batches(PrRun *run, int it, int **tok, int **tgt)
{
    const PrProgram *g = run->prog;
    size_t bt = (size_t)g->mlp_B * (size_t)g->mlp_T;
    if (!*tok)
        *tok = malloc((size_t)run->M * bt * sizeof **tok);
    if (!*tgt)
        *tgt = malloc((size_t)run->M * bt * sizeof **tgt);
    if (!*tok || !*tgt)
        return -1;
    for (int mb = 0; mb < run->M; mb++)
        if (data_batch(&run->data, run->opt.seed, it, mb, g->mlp_B, g->mlp_T, g->mlp_vocab,
                       *tok + mb * bt, *tgt + mb * bt) != 0)
            return -1;
    return 0;
}

int pr_tf_check(PrRun *run, PrResult *res)
{
    TfConfig c = config_of(run->prog);
    /* the same initial weights: a fresh model, same seed (iteration 0 not stepped yet) */
    TfModel *ref = tf_create(&c, run->opt.seed);
    int *tok = NULL, *tgt = NULL, n = ref ? ref->ntensors : 0, rc = -1;
    res->grad_name = calloc((size_t)(n ? n : 1), sizeof *res->grad_name);
    res->grad_err = calloc((size_t)(n ? n : 1), sizeof *res->grad_err);
    if (!ref || !res->grad_name || !res->grad_err || batches(run, 0, &tok, &tgt) != 0)
        goto out;
    MlpSlice whole = tf_whole(&c);
    tf_zero_grad(ref, &whole);
    if (isnan(tf_reference_iteration(ref, run->M, tok, tgt)))
        goto out;
    res->ngrad = n;
    res->max_grad_err = 0;
    for (int i = 0; i < n; i++) {
        const TfTensor *t = &ref->tensors[i];
        snprintf(res->grad_name[i], sizeof res->grad_name[i], "%s", t->name);
        res->grad_err[i] = mlp_rel_error(run->tf->grad_mem + t->off, ref->grad_mem + t->off, t->n);
        if (res->grad_err[i] > res->max_grad_err || isnan(res->grad_err[i]))
            res->max_grad_err = res->grad_err[i];
    }
    rc = 0;
out:
    tf_free(ref);
    free(tok);
    free(tgt);
    return rc;
}

double pr_tf_reference_ms(PrRun *run)
{
    TfConfig c = config_of(run->prog);
    TfModel *ref = tf_create(&c, run->opt.seed);
    int *tok = NULL, *tgt = NULL, n = 0;
    double ms = -1, total = 0;
    MlpSlice whole = tf_whole(&c);
    if (!ref)
        goto out;
    for (int it = 0; it < run->opt.iters; it++) {
        double t0 = pr_now_ms();
        if (batches(run, it, &tok, &tgt) != 0)
            goto out;
        tf_zero_grad(ref, &whole);
        if (isnan(tf_reference_iteration(ref, run->M, tok, tgt)))
            goto out;
        tf_sgd_step(ref, &whole, (float)run->opt.lr);
        if (it > 0 || run->opt.iters == 1) {
            total += pr_now_ms() - t0;
            n++;
        }
    }
    ms = n ? total / n : -1;
out:
    tf_free(ref);
    free(tok);
    free(tgt);
    return ms;
}
