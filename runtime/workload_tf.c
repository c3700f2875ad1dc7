/* workload_tf.c - the `gpt` and `llama` workloads (workload.h): the transformers of
 * runtime/transformer.h, their arch table for the model workloads' shared part
 * (workload_model.c, which runs the ops, the offload, the step and --check over it) and
 * their set-up. */
#include "transformer.h"
#include "workload.h"

static TfConfig config_of(const PrProgram *g)
{
    return (TfConfig){{g->model_arch, g->model_vocab, g->model_hidden, g->model_heads,
                       g->model_kv_heads, g->model_ffn, g->model_seq, g->model_batch},
                      g->model_layers, g->M};
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

static void *tf_new(const void *cfg, uint64_t seed)
{
    return tf_create(cfg, seed);
}

/* ---- the arch table (PrArch) ----------------------------------------------------------- */

static int a_forward(void *net, const MlpSlice *s, float *out, float *loss, const PrRegion *rg,
                     const float *in, const int *tok, const int *tgt, bool keep_all)
{
    return tf_forward_split(net, s, out, loss, rg, in, tok, tgt, keep_all);
}

static void a_recompute(void *net, const MlpSlice *s, const PrRegion *rg, const int *tok)
{
    tf_recompute(net, s, rg, tok);
}

static void a_backward(void *net, const MlpSlice *s, float *din, const PrRegion *rg,
                       const float *dout, const int *tok, const int *tgt, bool split)
{
    tf_backward(net, s, din, rg, dout, tok, tgt, split);
}

static void a_weight_grad(void *net, const MlpSlice *s, const PrRegion *rg, const int *tok)
{
    tf_weight_grad(net, s, rg, tok);
}

static void a_zero_grad(void *net, const MlpSlice *s)
{
    tf_zero_grad(net, s);
}

static void a_sgd(void *net, const MlpSlice *s, float lr)
{
    tf_sgd_step(net, s, lr);
}

static int a_tensor_count(const void *net)
{
    return ((const TfModel *)net)->ntensors;
}

static void a_tensor(const void *net, int i, const char **name, float **param, float **grad,
                     size_t *n)
{
    const TfModel *m = net;
    const TfTensor *t = &m->tensors[i];
    if (name)
        *name = t->name;
    if (param)
        *param = m->param_mem + t->off;
    if (grad)
        *grad = m->grad_mem + t->off;
    if (n)
        *n = t->n;
}

static bool a_in_slice(const void *net, int i, const MlpSlice *s)
{
    return tf_param_in_slice(net, i, s);
}

static void *a_create(const PrRun *run)
{
    TfConfig c = config_of(run->prog);
    return tf_create(&c, run->opt.seed);
}

static MlpSlice a_whole(const void *net)
{
    return tf_whole(&((const TfModel *)net)->cfg);
}

static float a_iteration(void *net, int M, const int *tok, const int *tgt)
{
    return tf_reference_iteration(net, M, tok, tgt);
}

static void a_destroy(void *net)
{
    tf_free(net);
}

static const PrArch tf_arch = {
    a_forward, a_recompute, a_backward, a_weight_grad, a_zero_grad, a_sgd,
    a_tensor_count, a_tensor, a_in_slice, a_create, a_whole, a_iteration, a_destroy,
};

/* ---- the workload ------------------------------------------------------------------------ */

static int tf_setup(PrRun *run)
{
    TfConfig c = config_of(run->prog);
    const char *arch = run->prog->model_arch == TF_GPT ? "gpt" : "llama";
    char why[160];
    if (tf_config_check(&c, why, sizeof why) != 0) {
        pr_fail(run, -1, -1, "%s model: %s", arch, why);
        return -1;
    }
    PrModelSetup ms = {&tf_arch, &c, arch, c.L, tf_init, tf_sizes, tf_new, tf_io_bytes(&c)};
    return pr_model_setup(run, &ms);
}

const PrWorkload pr_workload_tf = PR_MODEL_WORKLOAD("gpt/llama", tf_setup);
