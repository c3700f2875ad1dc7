/* workload_mlp.c - the `mlp` workload (workload.h): the model of runtime/models/mlp.h, its
 * arch table for the model workloads' shared part (workload_model.c, which runs the
 * ops, the offload, the step and --check over it) and its set-up. */
#include "workload.h"

static MlpConfig config_of(const PrProgram *g)
{
    return (MlpConfig){g->model_vocab, g->model_hidden, g->model_layers, g->model_seq,
                       g->model_batch, g->M};
}

PR_MODEL_LAYOUT(MlpConfig, mlp_slices_init, mlp_act_bytes, mlp_ckpt_bytes, mlp_wact_bytes,
                mlp_region_cuts, mlp_create);

/* ---- the arch table (PrArch) ----------------------------------------------------------- */

static int a_tensor_count(const void *net)
{
    return mlp_param_count(net);
}

static void a_tensor(const void *net, int i, const char **name, float **param, float **grad,
                     size_t *n)
{
    mlp_param(net, i, name, param, grad, n);
}

static void *a_create(const PrRun *run)
{
    MlpConfig c = config_of(run->prog);
    return mlp_create(&c, run->opt.seed);
}

PR_ARCH_DEFINE(mlp_arch, MlpModel, mlp_forward_split, mlp_recompute_split, mlp_backward_split,
               mlp_weight_grad_split, mlp_zero_grad, mlp_sgd_step, mlp_param_in_slice, mlp_whole,
               mlp_reference_iteration, mlp_free);

/* ---- the workload ------------------------------------------------------------------------ */

static int mlp_setup(PrRun *run)
{
    MlpConfig c = config_of(run->prog);
    char why[160];
    if (mlp_config_check(&c, why, sizeof why) != 0) {
        pr_fail(run, -1, -1, "mlp model: %s", why);
        return -1;
    }
    PrModelSetup ms = {&mlp_arch, &c, "mlp", c.L, a_init, a_sizes, a_new, mlp_io_bytes(&c)};
    return pr_model_setup(run, &ms);
}

const PrWorkload pr_workload_mlp = PR_MODEL_WORKLOAD("mlp", mlp_setup);
