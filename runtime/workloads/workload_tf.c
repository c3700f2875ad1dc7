/* workload_tf.c - the `gpt` and `llama` workloads (workload.h): the transformers of
 * runtime/models/transformer.h, their arch table for the model workloads' shared part
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

PR_MODEL_LAYOUT(TfConfig, tf_slices_init, tf_act_bytes, tf_ckpt_bytes, tf_wact_bytes,
                tf_region_cuts, tf_create);

/* ---- the arch table (PrArch) ----------------------------------------------------------- */

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

static void *a_create(const PrRun *run)
{
    TfConfig c = config_of(run->prog);
    return tf_create(&c, run->opt.seed);
}

PR_ARCH_DEFINE(tf_arch, TfModel, tf_forward_split, tf_recompute, tf_backward, tf_weight_grad,
               tf_zero_grad, tf_sgd_step, tf_param_in_slice, tf_whole, tf_reference_iteration,
               tf_free);

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
    PrModelSetup ms = {&tf_arch, &c, arch, c.L, a_init, a_sizes, a_new, tf_io_bytes(&c)};
    return pr_model_setup(run, &ms);
}

const PrWorkload pr_workload_tf = PR_MODEL_WORKLOAD("gpt/llama", tf_setup);
