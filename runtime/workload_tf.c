/* workload_tf.c - the `gpt` and `llama` workloads in the runtime: each op of a rank runs
 * the slice of runtime/transformer.h that its virtual stage owns, on activations in the
 * rank's arena. Data flow, io buffers, regions (pieces placed by the plan) and
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

static void tf_sizes(const void *cfg, const MlpSlice *s, int64_t out[3],
                     int64_t from[PR_PIECES + 1])
{
    out[0] = (int64_t)tf_act_bytes(cfg, s);
    out[1] = (int64_t)tf_ckpt_bytes(cfg, s);
    out[2] = (int64_t)tf_wact_bytes(cfg, s);
    tf_region_cuts(cfg, s, from);
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
    /* the region: its pieces wherever the plan put them */
    PrRegion rg = pr_op_region(run, o, PR_MLP, r->arena);
    if (s->embed || s->head) {
        /* replica d's data shard: global micro-batch d*M + m (piperun.h) */
        int gm = pr_dp_microbatch(run->M, run->replica, o->mb);
        if (data_batch(&run->data, run->opt.seed, r->iter, gm, g->mlp_B, g->mlp_T,
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
        int rc = tf_forward_split(m, s, out, s->head ? &loss : NULL, &rg, in, r->tokens,
                                  r->targets, !(o->flags & PR_HAS_R), r->work,
                                   (size_t)r->work_bytes);
        free(in);
        r->in_f[k] = NULL;
        if (rc != 0) {
            free(out);
            if (rc == -2)
                pr_fail(run, r->id, i, "the plan's workspace (%lld bytes) is smaller than "
                        "the forward's temporaries", (long long)r->work_bytes);
            else
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
        tf_recompute(m, s, &rg, r->tokens);
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
        tf_backward(m, s, din, &rg, dout, r->tokens, r->targets,
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
        tf_weight_grad(m, s, &rg, r->tokens);
        return 0;
    default:
        return 0;
    }
}

/* The transformer's sequential reference (PrRefModel). */
static void *tf_ref_create(const PrRun *run)
{
    TfConfig c = config_of(run->prog);
    return tf_create(&c, run->opt.seed);
}

static void tf_ref_zero(void *m)
{
    MlpSlice whole = tf_whole(&((TfModel *)m)->cfg);
    tf_zero_grad(m, &whole);
}

static float tf_ref_iteration(void *m, int M, const int *tok, const int *tgt)
{
    return tf_reference_iteration(m, M, tok, tgt);
}

static void tf_ref_step(void *m, float lr)
{
    MlpSlice whole = tf_whole(&((TfModel *)m)->cfg);
    tf_sgd_step(m, &whole, lr);
}

static const float *tf_ref_grad(const void *m, int i)
{
    const TfModel *t = m;
    return t->grad_mem + t->tensors[i].off;
}

static void tf_ref_destroy(void *m)
{
    tf_free(m);
}

static const float *tf_ref_param(const void *m, int i)
{
    const TfModel *t = m;
    return t->param_mem + t->tensors[i].off;
}

static const PrRefModel tf_ref = {tf_ref_create, tf_ref_zero, tf_ref_iteration, tf_ref_step,
                                  tf_ref_grad, tf_ref_destroy, tf_ref_param};

int pr_tf_check(PrRun *run, PrResult *res)
{
    return pr_model_check(run, res, &tf_ref);
}

double pr_tf_reference_ms(PrRun *run)
{
    return pr_model_reference_ms(run, &tf_ref);
}
